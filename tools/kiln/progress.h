// SPDX-License-Identifier: Apache-2.0
// Progress of `kiln run` on stderr. On a terminal: one line redrawn in place. Elsewhere (a
// file, a pipe, a CI log), nothing unless forced, and then plain lines, never escape codes.
#ifndef KILN_TOOLS_KILN_PROGRESS_H_
#define KILN_TOOLS_KILN_PROGRESS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace kiln::tool {

class Progress {
 public:
  enum class Mode {
    kOff,
    kRedraw,  // a terminal: "\r\033[K" and the line, at most 10 times a second
    kLines,   // anything else: one line at most every 2 s, and the last repeat's
  };

  // The mode for `out`: `forced` (--progress / --no-progress) when given, else
  // $KILN_PROGRESS ("always"/"1"/"on", "never"/"0"/"off", "auto"/empty), else auto: on when
  // `out` is a terminal whose TERM is not "dumb" and `json` is off. Forced on, a terminal gets
  // kRedraw (kLines when TERM is "dumb"), anything else kLines. Throws UsageError for another
  // $KILN_PROGRESS value.
  static Mode choose(std::optional<bool> forced, bool json, std::FILE* out);

  Progress(Mode mode, std::string function, std::FILE* out);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return mode_ != Mode::kOff; }
  // A one-off message on a line of its own.
  void note(const std::string& text);
  // A step ended (export, upload, load, ...): erases the line; the clock of the timing loop
  // starts from the last step before it.
  void step_done();
  // After a repeat: (repeats done, total or -1 when the noise rule decides). `timeout_s` bounds
  // an open-ended loop (its ETA is "at most" that).
  void repeat(int32_t done, int32_t total, double timeout_s);
  // The timing loop runs `where` ("in a worker process"), whose repeats do not reach this
  // display: one line that says what is being timed, in the sweep's frame.
  void timing_elsewhere(const std::string& where);
  // Erases a redrawn line before the results are printed.
  void finish();
  // A sweep's point `number` (1-based) of `total` starts, running `function`: later lines read
  // "[kiln] point 2/6 (device=cpu, shape=[1024]), 3.1 s into the sweep, sweep ETA 15.5 s:
  // timing relu: ..." (the ETA from the points done so far), so that one display follows the
  // whole sweep.
  void start_point(size_t number, size_t total, const std::string& label, std::string function);

 private:
  using Clock = std::chrono::steady_clock;
  // Prints `line` (led by the sweep's point and time, when in a sweep) as the mode says.
  void emit(std::string line, Clock::time_point now);
  Mode mode_;
  std::string function_;
  std::FILE* out_;
  Clock::time_point phase_start_ = Clock::now();
  std::optional<Clock::time_point> last_print_;
  bool drawn_ = false;  // a redrawn line is on the screen
  // A sweep's point and its start, printed before each line; empty outside sweeps.
  std::string point_;
  std::string sweep_eta_;  // ", sweep ETA 12.0 s" from the points done, once one is
  Clock::time_point sweep_start_ = Clock::now();
};

// "850 ms", "12.4 s", "3 min 05 s", "2 h 01 min": a duration for people.
std::string human_duration(double seconds);

// A measured time in the unit that suits it: "812 ns", "1.24 us", "31.2 ms", "2.05 s" (4
// significant digits; "-" when not finite). For benchmark times in `kiln run` sweep tables and
// `kiln compare`.
std::string format_time_ns(double ns);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_PROGRESS_H_
