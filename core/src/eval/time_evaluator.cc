// SPDX-License-Identifier: Apache-2.0
// The measurement loop of SPEC.md §1.3, plus the opt-in noise-based stopping rule.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "eval/timer.h"
#include "kiln/detail/cancellation.h"
#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/module.h"
#include "kiln/statistics.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

// The reference's golden-ratio growth factor.
constexpr double kGrowth = 1.618;
// `number` never grows past this (a guard against overflow when a batch reads ~0 ns).
constexpr int64_t kMaxNumber = int64_t{1} << 40;

[[noreturn]] void bad(const char* parameter, const std::string& why) {
  throw ValueError(fmt::format("time_evaluator: {} {}", parameter, why));
}

// The relative standard error the noise rule compares with its target (kiln::stats' RSE);
// infinite while it means nothing (fewer than 2 repeats, a mean of 0).
double noise_rse(const std::vector<double>& v) {
  const stats::Summary s = stats::summarize(v);
  if (s.n < 2 || s.mean <= 0) return std::numeric_limits<double>::infinity();
  return s.rse;
}

// Seconds in which some runnable thread of this machine waited for a CPU since boot (the "some"
// total of /proc/pressure/cpu, in microseconds there), or -1 without PSI.
double cpu_pressure_seconds() {
  std::FILE* f = std::fopen("/proc/pressure/cpu", "r");
  if (f == nullptr) return -1;
  unsigned long long us = 0;
  const int got = std::fscanf(f, "some avg10=%*f avg60=%*f avg300=%*f total=%llu", &us);
  std::fclose(f);
  return got == 1 ? static_cast<double>(us) * 1e-6 : -1;
}

// Wall-clock, thread CPU and process CPU seconds and the machine's CPU pressure: the noise
// verdict's clocks (read outside the timed batches only).
struct Clocks {
  double wall = 0, thread_cpu = 0, process_cpu = 0, pressure = 0;

  static double cpu_seconds(clockid_t id) {
    timespec t{};
    if (clock_gettime(id, &t) != 0) return 0;
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  }
  static Clocks now() {
    Clocks c;
    c.wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    c.thread_cpu = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    c.process_cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    c.pressure = cpu_pressure_seconds();
    return c;
  }
  // A pressure of -1 (no PSI) stays -1.
  Clocks operator-(const Clocks& o) const {
    return {wall - o.wall, thread_cpu - o.thread_cpu, process_cpu - o.process_cpu,
            pressure < 0 || o.pressure < 0 ? -1 : pressure - o.pressure};
  }
  Clocks& operator+=(const Clocks& o) {
    wall += o.wall;
    thread_cpu += o.thread_cpu;
    process_cpu += o.process_cpu;
    pressure = pressure < 0 || o.pressure < 0 ? -1 : pressure + o.pressure;
    return *this;
  }
};

}  // namespace

void TimeEvaluatorOptions::validate() const {
  if (number < 1) bad("number", fmt::format("must be >= 1, got {}", number));
  if (repeat < 0) bad("repeat", fmt::format("must be >= 0, got {}", repeat));
  if (min_repeat_ms < 0) bad("min_repeat_ms", fmt::format("must be >= 0, got {}", min_repeat_ms));
  if (limit_zero_time_iterations < 1) {
    bad("limit_zero_time_iterations",
        fmt::format("must be >= 1, got {}", limit_zero_time_iterations));
  }
  if (cooldown_interval_ms < 0) {
    bad("cooldown_interval_ms", fmt::format("must be >= 0, got {}", cooldown_interval_ms));
  }
  if (repeats_to_cooldown < 1) {
    bad("repeats_to_cooldown", fmt::format("must be >= 1, got {}", repeats_to_cooldown));
  }
  if (cache_flush_bytes < 0) {
    bad("cache_flush_bytes", fmt::format("must be >= 0, got {}", cache_flush_bytes));
  }
  if (noise.enabled) {
    if (!(noise.target_rse > 0)) bad("noise.target_rse", "must be > 0");
    if (noise.min_repeats < 2) bad("noise.min_repeats", "must be >= 2");
    if (noise.max_repeats < noise.min_repeats) bad("noise.max_repeats", "must be >= min_repeats");
    if (noise.min_time_s < 0) bad("noise.min_time_s", "must be >= 0");
    if (!(noise.timeout_s > 0)) bad("noise.timeout_s", "must be > 0");
    if (noise.plateau_window < 2) bad("noise.plateau_window", "must be >= 2");
    if (!(noise.plateau_tolerance >= 0)) bad("noise.plateau_tolerance", "must be >= 0");
  }
}

struct TimeEvaluator::Impl {
  // First, so that it goes last: the runtime stays while the function is released.
  std::shared_ptr<const DeviceContext> context;
  Function f;
  Device device;
  TimeEvaluatorOptions options;
  Ref<DeviceBackend> backend;
  std::optional<Function> preproc;
  int64_t number;  // grows and stays grown (SPEC.md §1.3)

  // Calls `f` `calls` times with packed `args`, the timed batch. With an interrupt poll on the
  // thread (kiln/detail/cancellation.h: a call from Python, for Ctrl-C), a long batch runs in
  // chunks that last a few milliseconds and runs the poll about every kInterruptPollPeriod
  // between them: one clock read per chunk and a poll (a few hundred ns, no lock) per period.
  void run_batch(const KilnAny* args, int32_t num_args, int64_t calls) const {
    if (!detail::interrupt_poll_installed()) {
      run_calls(args, num_args, calls);
      return;
    }
    using Clock = std::chrono::steady_clock;
    constexpr auto kChunkTime = detail::kInterruptPollPeriod / 10;
    int64_t chunk = 1;  // doubles until a chunk lasts kChunkTime
    auto last_poll = Clock::now();
    auto chunk_start = last_poll;
    for (int64_t done = 0; done < calls;) {
      const int64_t take = std::min(chunk, calls - done);
      run_calls(args, num_args, take);
      done += take;
      const auto now = Clock::now();
      if (now - chunk_start < kChunkTime && chunk < (int64_t{1} << 40)) {
        chunk *= 2;
      } else if (now - chunk_start > 4 * kChunkTime && chunk > 1) {
        chunk /= 2;  // the calls became slower
      }
      chunk_start = now;
      if (now - last_poll >= detail::kInterruptPollPeriod) {
        detail::poll_interrupt();
        last_poll = now;
      }
    }
  }

  // Calls `f` `calls` times with packed `args`: the timed inner loop, kept minimal.
  void run_calls(const KilnAny* args, int32_t num_args, int64_t calls) const {
    const KilnCallable& c = f.callable();
    for (int64_t i = 0; i < calls; ++i) {
      KilnAny ret;
      ret.type_code = KILN_TYPE_NONE;
      ret.flags = kAnyFlagAcceptsHostObjects;
      if (KilnError* err = c.call(c.self, args, num_args, &ret)) [[unlikely]] {
        detail::raise_and_free(err);
      }
      if (ret.type_code != KILN_TYPE_NONE) [[unlikely]] {
        Any::from_abi_result(ret);  // drops any reference the result carried
      }
    }
  }

  BenchmarkResult measure(const std::vector<Any>& args);
};

BenchmarkResult TimeEvaluator::Impl::measure(const std::vector<Any>& args) {
  std::vector<KilnAny> packed;
  packed.reserve(args.size());
  for (const Any& a : args) packed.push_back(a.to_abi());
  const auto num_args = static_cast<int32_t>(packed.size());
  // Cancellation (an RPC session that ended, kiln/detail/cancellation.h) is polled before every
  // batch and during cooldown sleeps, never inside a timed batch: an evaluation whose session
  // is gone stops within one batch instead of running its whole plan.
  constexpr const char* kWhat = "time_evaluator";
  detail::throw_if_cancelled(kWhat);
  detail::poll_interrupt();  // a caller's Ctrl-C (Python) likewise, and inside long batches

  // 1. Warm-up: exactly one call.
  f.call_abi(packed.data(), num_args);

  // 2. Buffers whose copy evicts the device's caches before each timed batch.
  Tensor flush_a, flush_b;
  if (options.cache_flush_bytes > 0) {
    const int64_t n = options.cache_flush_bytes / 4;
    flush_a = Tensor::empty({n}, DataType::Int(32), device, *context);
    flush_b = Tensor::empty({n}, DataType::Int(32), device, *context);
  }
  // 3.
  backend->synchronize(device.id);

  eval::Timer timer(backend, device.id);
  BenchmarkResult::Sample sample{};
  std::vector<double> results;
  std::vector<int64_t> numbers;
  std::vector<BenchmarkResult::Sample> raw;
  std::vector<double> rse_history;
  std::string stop_reason;
  const auto started = std::chrono::steady_clock::now();
  const NoiseStoppingRule& noise = options.noise;
  const int32_t total = noise.enabled ? -1 : options.repeat;
  // Cooldown sleeps are deliberate time off the CPU: kept out of the contention check's span.
  Clocks cooldowns;
  const Clocks measure_start = Clocks::now();

  for (int32_t i = 0;; ++i) {
    if (!noise.enabled && i >= options.repeat) break;
    if (preproc) preproc->call_abi(packed.data(), num_args);  // once per repeat, not timed
    double duration_ms = 0;
    int32_t zero_count = 0;
    do {
      if (duration_ms > 0) {
        const double grown =
            std::max(options.min_repeat_ms / (duration_ms / static_cast<double>(number)) + 1,
                     static_cast<double>(number) * kGrowth);
        number = std::min<int64_t>(static_cast<int64_t>(grown), kMaxNumber);
      }
      // Also while min_repeat_ms grows `number`.
      detail::throw_if_cancelled(kWhat);
      detail::poll_interrupt();
      if (flush_a.defined()) flush_a.copy_from(flush_b);  // not timed
      backend->synchronize(device.id);
      timer.start();
      run_batch(packed.data(), num_args, number);
      timer.stop();
      const int64_t ns = timer.elapsed_ns();
      if (ns == 0) ++zero_count;
      duration_ms = static_cast<double>(ns) / 1e6;
      if (options.keep_raw_samples) {
        sample.calls = number;
        sample.seconds = duration_ms / 1e3;
        raw.push_back(sample);
      }
    } while (duration_ms < options.min_repeat_ms &&
             zero_count < options.limit_zero_time_iterations);
    results.push_back(duration_ms / 1e3 / static_cast<double>(number));
    numbers.push_back(number);
    if (options.cooldown_interval_ms > 0 && i % options.repeats_to_cooldown == 0) {
      const Clocks before = Clocks::now();
      if (!detail::sleep_unless_cancelled(
              std::chrono::milliseconds(options.cooldown_interval_ms))) {
        detail::throw_if_cancelled(kWhat);
      }
      cooldowns += Clocks::now() - before;
    }
    if (options.on_repeat) options.on_repeat(i + 1, total);

    if (noise.enabled) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const int32_t done = i + 1;
      const double rse = noise_rse(results);
      rse_history.push_back(rse);
      if (done >= noise.min_repeats && elapsed >= noise.min_time_s && rse < noise.target_rse) {
        stop_reason = "target";
      } else if (elapsed >= noise.timeout_s) {
        stop_reason = "timeout";
      } else if (done >= noise.max_repeats) {
        stop_reason = "max_repeats";
      } else if (done >= noise.min_repeats && elapsed >= noise.min_time_s &&
                 static_cast<int32_t>(rse_history.size()) >= noise.plateau_window) {
        // The noise has stabilised above the target: more repeats would not help.
        auto first = rse_history.end() - noise.plateau_window;
        const auto [lo, hi] = std::minmax_element(first, rse_history.end());
        if (std::isfinite(*hi) && *hi > 0 && (*hi - *lo) / *hi < noise.plateau_tolerance) {
          stop_reason = "plateau";
        }
      }
      if (!stop_reason.empty()) break;
    }
  }

  const Clocks spent = Clocks::now() - measure_start - cooldowns;

  BenchmarkResult result(std::move(results));
  result.wall_time_s = spent.wall;
  result.thread_cpu_time_s = spent.thread_cpu;
  result.process_cpu_time_s = spent.process_cpu;
  // PSI's total lags: a stall that began in a cooldown sleep (or before the measurement) can be
  // counted when it ends, inside the window. No more than the window's own seconds can have
  // been under pressure, so the reading is clamped to them (a busy 2-core runner read 1.3x).
  result.cpu_pressure_s =
      spent.pressure < 0 ? -1 : std::clamp(spent.pressure, 0.0, std::max(0.0, spent.wall));
  result.numbers = std::move(numbers);
  result.raw_samples = std::move(raw);
  result.timer = timer.kind();
  result.stop_reason = stop_reason;
  result.name = f.name();
  result.device = device;
  return result;
}

TimeEvaluator::TimeEvaluator(Function f, Device device, TimeEvaluatorOptions options,
                             const DeviceContext& context)
    : impl_(std::make_unique<Impl>()) {
  if (!f) throw ValueError("time_evaluator: the function is undefined");
  options.validate();
  impl_->f = std::move(f);
  impl_->device = device;
  impl_->context = context.retain();
  impl_->backend = context.backend(device.type);
  if (!options.f_preproc.empty()) {
    impl_->preproc = registry::get(options.f_preproc);
    if (!impl_->preproc) {
      throw NotFoundError(fmt::format(
          "time_evaluator: f_preproc '{}' is not a registered global function", options.f_preproc));
    }
  }
  impl_->number = options.number;
  impl_->options = std::move(options);
}

TimeEvaluator::~TimeEvaluator() = default;
TimeEvaluator::TimeEvaluator(TimeEvaluator&&) noexcept = default;
TimeEvaluator& TimeEvaluator::operator=(TimeEvaluator&&) noexcept = default;

BenchmarkResult TimeEvaluator::operator()(const std::vector<Any>& args) {
  return impl_->measure(args);
}

int32_t TimeEvaluator::number() const {
  return static_cast<int32_t>(std::min<int64_t>(impl_->number, INT32_MAX));
}

}  // namespace kiln
