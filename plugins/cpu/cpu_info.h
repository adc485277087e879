// SPDX-License-Identifier: Apache-2.0
// What the host CPU is: the attributes the cpu device backend reports.
#ifndef KILN_PLUGINS_CPU_CPU_INFO_H_
#define KILN_PLUGINS_CPU_CPU_INFO_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace kiln::cpu {

// One device attribute: an integer or a string value under `key`.
struct CpuAttribute {
  std::string key;
  std::variant<int64_t, std::string> value;
};

// Reads the host CPU's attributes from /proc/cpuinfo, /sys/devices/system/cpu, uname and
// sysconf: name, vendor, arch, cores, threads and threads_source (the plugin's thread count and
// where it came from, as given), l1d/l2/l3_cache_bytes (each
// only when the kernel reports it), memory_bytes and isa (space-separated). Missing sources
// give "unknown" strings or leave the attribute out; never throws except std::bad_alloc.
std::vector<CpuAttribute> read_cpu_attributes(int32_t threads, const std::string& threads_source);

// Parses a sysfs cache size such as "32K", "1024K", "16M" or "512"; -1 when malformed.
int64_t parse_cache_size(const std::string& text);

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_CPU_INFO_H_
