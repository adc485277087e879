// SPDX-License-Identifier: Apache-2.0
// Throughput of a timed run (issue 21 item 2): bytes and flops per call over the median time,
// as GB/s and GFLOP/s, and the fraction of the device's peak memory bandwidth where its backend
// reports one.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for `kiln run` (and run configs' `throughput:` section) and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_THROUGHPUT_H_
#define KILN_DETAIL_THROUGHPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/any.h"

namespace kiln {

// The device attribute a backend reports its peak memory bandwidth in (the CUDA plugin does:
// docs/backends/cuda.md). No other attribute is turned into a peak: a guess would be false.
inline constexpr const char* kPeakMemoryBandwidthAttribute = "peak_memory_bandwidth_bytes_per_s";

// What one call moves and computes. `bytes` unset means "auto": the sum of the byte sizes of
// all tensor arguments (inputs and outputs), an estimate of the traffic (a kernel may read a
// value twice, or not at all). `flops` unset means unknown: no GFLOP/s.
struct ThroughputSpec {
  std::optional<double> bytes;
  std::optional<double> flops;
};

// The throughput of one run.
struct Throughput {
  double bytes = 0;            // per call
  bool bytes_derived = false;  // bytes is the arguments' total size (auto), not a given figure
  std::optional<double> flops;
  double seconds = 0;   // the time per call it is computed from (the median)
  double gb_per_s = 0;  // 1 GB = 1e9 bytes
  std::optional<double> gflop_per_s;
  std::optional<double> peak_bytes_per_s;  // the device's, when its backend reports one
  std::optional<double> fraction_of_peak;  // bytes / seconds / peak_bytes_per_s

  // "throughput: 42.1 GB/s (52% of the 81 GB/s peak memory bandwidth; 12582912 bytes per call,
  // the arguments' total size, an estimate of the traffic), 3.2 GFLOP/s (1e+08 flops per call)"
  std::string line() const;
};

// The sum of nbytes() of the tensors in `args` (scalars count 0).
double argument_bytes(const std::vector<Any>& args);

// The peak memory bandwidth (bytes/s) in a device's attributes (kPeakMemoryBandwidthAttribute,
// an integer or a number > 0), or nothing.
std::optional<double> peak_memory_bandwidth(
    const std::vector<std::pair<std::string, Any>>& attributes);

// The throughput of a call of `seconds` (> 0, else the rates are 0) moving spec.bytes (or
// `derived_bytes` when spec.bytes is unset) and computing spec.flops, against `peak`.
Throughput compute_throughput(const ThroughputSpec& spec, double derived_bytes, double seconds,
                              std::optional<double> peak_bytes_per_s);

}  // namespace kiln

#endif  // KILN_DETAIL_THROUGHPUT_H_
