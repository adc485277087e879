// SPDX-License-Identifier: Apache-2.0
#include "cpu_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace kiln::cpu {
namespace {

// The fields of the first processor block of /proc/cpuinfo ("key : value" lines), or an
// empty map when the file cannot be read.
std::map<std::string, std::string> first_cpuinfo_block() {
  std::map<std::string, std::string> fields;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      // A blank line ends a processor block; the first block is representative because
      // Kiln treats the host as one device. (aarch64 puts "Hardware" after the blocks, but
      // "model name"/"Features" appear in every block.)
      if (!fields.empty()) break;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    size_t start = colon + 1;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    fields.emplace(std::move(key), line.substr(start));
  }
  return fields;
}

// The first line of the file at `path` without trailing space; "" when unreadable.
std::string read_first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

// The whitespace-separated words of `text`.
std::set<std::string> split_words(const std::string& text) {
  std::set<std::string> words;
  std::istringstream in(text);
  std::string word;
  while (in >> word) words.insert(word);
  return words;
}

// The instruction-set extensions kernels care about, in a fixed order.
std::string isa_string(const std::map<std::string, std::string>& info) {
  std::string isa;
  auto add = [&](const char* name) {
    if (!isa.empty()) isa += ' ';
    isa += name;
  };
#if defined(__x86_64__) || defined(__i386__)
  static const char* const kFlags[] = {"sse4_2",   "avx",      "avx2",        "fma",     "avx512f",
                                       "avx512bw", "avx512vl", "avx512_bf16", "amx_tile"};
  const auto flags_it = info.find("flags");
  if (flags_it != info.end()) {
    const std::set<std::string> flags = split_words(flags_it->second);
    for (const char* flag : kFlags) {
      if (flags.count(flag) != 0) add(flag);
    }
  } else {
    // No /proc (e.g. a sandbox): ask the CPU directly for what GCC can name.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) add("sse4_2");
    if (__builtin_cpu_supports("avx")) add("avx");
    if (__builtin_cpu_supports("avx2")) add("avx2");
    if (__builtin_cpu_supports("fma")) add("fma");
    if (__builtin_cpu_supports("avx512f")) add("avx512f");
    if (__builtin_cpu_supports("avx512bw")) add("avx512bw");
    if (__builtin_cpu_supports("avx512vl")) add("avx512vl");
  }
#elif defined(__aarch64__)
  const auto features_it = info.find("Features");
  if (features_it != info.end()) {
    const std::set<std::string> features = split_words(features_it->second);
    if (features.count("asimd") != 0) add("neon");
    if (features.count("sve") != 0) add("sve");
    if (features.count("sve2") != 0) add("sve2");
  } else {
    add("neon");  // Advanced SIMD is mandatory on AArch64.
  }
#else
  (void)info;
#endif
  return isa;
}

// The vendor: x86 vendor_id, else the Arm implementer's name, else "unknown".
std::string vendor_string(const std::map<std::string, std::string>& info) {
  if (auto it = info.find("vendor_id"); it != info.end()) return it->second;
  if (auto it = info.find("CPU implementer"); it != info.end()) {
    // The Arm implementer codes of the common vendors (Arm ARM, "Main ID Register").
    static const std::map<std::string, std::string> kImplementers = {
        {"0x41", "ARM"},       {"0x42", "Broadcom"}, {"0x43", "Cavium"},
        {"0x48", "HiSilicon"}, {"0x4e", "NVIDIA"},   {"0x50", "APM"},
        {"0x51", "Qualcomm"},  {"0x61", "Apple"},    {"0xc0", "Ampere"}};
    auto known = kImplementers.find(it->second);
    return known != kImplementers.end() ? known->second : "implementer " + it->second;
  }
  return "unknown";
}

// Adds the cache sizes of cpu0, keyed by level and type, as the sysfs cache directory lists
// them. Missing or unreadable entries are skipped: containers often hide them.
void add_cache_sizes(std::vector<CpuAttribute>& out) {
  std::map<std::string, int64_t> sizes;
  std::error_code ec;
  const std::filesystem::path dir("/sys/devices/system/cpu/cpu0/cache");
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string leaf = it->path().filename().string();
    if (leaf.rfind("index", 0) != 0) continue;
    const std::string level = read_first_line(it->path() / "level");
    const std::string type = read_first_line(it->path() / "type");
    const int64_t size = parse_cache_size(read_first_line(it->path() / "size"));
    if (size < 0) continue;
    std::string key;
    if (level == "1" && type == "Data") key = "l1d_cache_bytes";
    if (level == "2" && type != "Instruction") key = "l2_cache_bytes";
    if (level == "3" && type != "Instruction") key = "l3_cache_bytes";
    if (!key.empty()) sizes.emplace(key, size);
  }
  for (const char* key : {"l1d_cache_bytes", "l2_cache_bytes", "l3_cache_bytes"}) {
    if (auto it = sizes.find(key); it != sizes.end()) out.push_back({key, it->second});
  }
}

}  // namespace

int64_t parse_cache_size(const std::string& text) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || value < 0) return -1;
  const std::string_view suffix(end, static_cast<size_t>(last - end));
  if (suffix.empty()) return value;
  if (suffix == "K") return value << 10;
  if (suffix == "M") return value << 20;
  if (suffix == "G") return value << 30;
  return -1;
}

std::vector<CpuAttribute> read_cpu_attributes(int32_t threads, const std::string& threads_source) {
  const std::map<std::string, std::string> info = first_cpuinfo_block();
  std::vector<CpuAttribute> out;

  std::string name = "unknown";
  if (auto it = info.find("model name"); it != info.end()) name = it->second;
  out.push_back({"name", name});
  out.push_back({"vendor", vendor_string(info)});

  struct utsname uts {};
  out.push_back({"arch", uname(&uts) == 0 ? std::string(uts.machine) : std::string("unknown")});

  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out.push_back({"cores", static_cast<int64_t>(cores > 0 ? cores : 1)});
  out.push_back({"threads", static_cast<int64_t>(threads)});
  out.push_back({"threads_source", threads_source});
  add_cache_sizes(out);

  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    out.push_back({"memory_bytes", static_cast<int64_t>(pages) * page_size});
  }
  out.push_back({"isa", isa_string(info)});
  return out;
}

}  // namespace kiln::cpu
