// SPDX-License-Identifier: Apache-2.0
#include "progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "commands.h"

namespace kiln::tool {
namespace {

bool dumb_terminal() {
  const char* term = std::getenv("TERM");
  return term != nullptr && std::string(term) == "dumb";
}

}  // namespace

std::string human_duration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  if (seconds < 1) return fmt::format("{:.0f} ms", seconds * 1e3);
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  const auto whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
  return fmt::format("{} h {:02} min", whole / 3600, whole % 3600 / 60);
}

std::string format_time_ns(double ns) {
  if (!std::isfinite(ns)) return "-";
  const double a = std::fabs(ns);
  if (a < 1e3) return fmt::format("{:.4g} ns", ns);
  if (a < 1e6) return fmt::format("{:.4g} us", ns / 1e3);
  if (a < 1e9) return fmt::format("{:.4g} ms", ns / 1e6);
  return fmt::format("{:.4g} s", ns / 1e9);
}

Progress::Mode Progress::choose(std::optional<bool> forced, bool json, std::FILE* out) {
  if (!forced) {
    const char* env = std::getenv("KILN_PROGRESS");
    const std::string value = env != nullptr ? env : "";
    if (value == "always" || value == "1" || value == "on") {
      forced = true;
    } else if (value == "never" || value == "0" || value == "off") {
      forced = false;
    } else if (!value.empty() && value != "auto") {
      throw UsageError(fmt::format(
          "KILN_PROGRESS='{}': expected always, never or auto (or 1, 0, on, off)", value));
    }
  }
  const bool terminal = isatty(fileno(out)) != 0;
  if (forced && !*forced) return Mode::kOff;
  if (!forced && (!terminal || json || dumb_terminal())) return Mode::kOff;
  return terminal && !dumb_terminal() ? Mode::kRedraw : Mode::kLines;
}

Progress::Progress(Mode mode, std::string function, std::FILE* out)
    : mode_(mode), function_(std::move(function)), out_(out) {}

void Progress::note(const std::string& text) {
  if (mode_ == Mode::kOff) return;
  finish();
  std::fprintf(out_, "[kiln] %s\n", text.c_str());
  std::fflush(out_);
}

void Progress::step_done() {
  finish();
  phase_start_ = Clock::now();
}

void Progress::repeat(int32_t done, int32_t total, double timeout_s) {
  if (mode_ == Mode::kOff) return;
  const Clock::time_point now = Clock::now();
  const bool last = total > 0 && done >= total;
  // Lines for people and logs: a redrawn line needs no more than 10 updates a second, a log no
  // more than one line every 2 s (and the last, so that a log shows the loop ended).
  const auto gap =
      mode_ == Mode::kRedraw ? std::chrono::milliseconds(100) : std::chrono::seconds(2);
  if (last_print_ && now - *last_print_ < gap && !last) return;
  last_print_ = now;

  const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
  std::string line;
  if (last) {
    line = fmt::format("timing {}: repeat {}/{}, {} elapsed, done", function_, done, total,
                       human_duration(elapsed));
  } else if (total > 0) {
    const double eta = elapsed / done * (total - done);
    line = fmt::format("timing {}: repeat {}/{}, {} elapsed, ETA {}", function_, done, total,
                       human_duration(elapsed), human_duration(eta));
  } else {
    line = fmt::format(
        "timing {}: repeat {} (until the noise target), {} elapsed, at most "
        "{} more",
        function_, done, human_duration(elapsed),
        human_duration(std::max(0.0, timeout_s - elapsed)));
  }
  emit(line, now);
}

void Progress::timing_elsewhere(const std::string& where) {
  if (mode_ == Mode::kOff) return;
  last_print_ = Clock::now();
  emit(fmt::format("timing {} {} (its repeats are not followed from here)", function_, where),
       *last_print_);
}

void Progress::emit(std::string line, Clock::time_point now) {
  // In a sweep, the point and the sweep's time go before what the point is doing.
  if (!point_.empty()) {
    line = fmt::format("{}, {} into the sweep{}: {}", point_,
                       human_duration(std::chrono::duration<double>(now - sweep_start_).count()),
                       sweep_eta_, line);
  }
  line = "[kiln] " + line;
  if (mode_ == Mode::kRedraw) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::start_point(size_t number, size_t total, const std::string& label,
                           std::string function) {
  point_ = fmt::format("point {}/{} ({})", number, total, label);
  // From the points done so far: a rough figure, but one that says whether to wait.
  sweep_eta_.clear();
  if (number > 1) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - sweep_start_).count();
    sweep_eta_ =
        fmt::format(", sweep ETA {}", human_duration(elapsed / static_cast<double>(number - 1) *
                                                     static_cast<double>(total - number + 1)));
  }
  function_ = std::move(function);
  last_print_.reset();
  phase_start_ = Clock::now();
}

void Progress::finish() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace kiln::tool
