// SPDX-License-Identifier: Apache-2.0
#include "plugin_options.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::cpu {
namespace {

// Throws kiln::sdk::Error(KILN_ERROR_VALUE, message).
[[noreturn]] void throw_value(const std::string& message) {
  throw sdk::Error(KILN_ERROR_VALUE, message);
}

// Returns the option's thread count (0 = default) or throws naming the option and its text.
int64_t option_threads(const nlohmann::json& value) {
  const std::string text = value.dump();
  if (!value.is_number_integer()) {
    throw_value("option num_threads = " + text + " is invalid: expected an integer");
  }
  // Unsigned JSON integers above INT64_MAX would wrap in get<int64_t>(); reject them first.
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMaxThreads)) {
    throw_value("option num_threads = " + text + " is out of range (at most " +
                std::to_string(kMaxThreads) + ")");
  }
  const int64_t n = value.get<int64_t>();
  if (n < 0) {
    throw_value("option num_threads = " + text +
                " is invalid: expected a positive integer (or 0 for the default)");
  }
  if (n > kMaxThreads) {
    throw_value("option num_threads = " + text + " is out of range (at most " +
                std::to_string(kMaxThreads) + ")");
  }
  return n;
}

// Returns KILN_NUM_THREADS as a count (0 = default) or throws naming the variable and its text.
int64_t env_threads(std::string_view text) {
  int64_t n = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  const auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || end != last || n < 0 || n > kMaxThreads) {
    throw_value("environment variable KILN_NUM_THREADS='" + std::string(text) +
                "' is invalid: expected an integer from 0 (the default) to " +
                std::to_string(kMaxThreads));
  }
  return n;
}

}  // namespace

PluginOptions resolve_options(const char* options_json, const char* env_num_threads,
                              int32_t hardware_threads, const std::string& hardware_source) {
  const std::string_view json_text =
      options_json != nullptr && *options_json != '\0' ? options_json : "{}";
  const nlohmann::json options = nlohmann::json::parse(json_text, nullptr, false);
  if (options.is_discarded()) {
    throw_value("options are not valid JSON: " + std::string(json_text));
  }
  if (!options.is_object()) {
    throw_value("options must be a JSON object, got " + options.dump());
  }
  PluginOptions result;
  int64_t from_option = 0;
  for (const auto& [key, value] : options.items()) {
    if (key == "num_threads") {
      from_option = option_threads(value);
    } else {
      result.unknown.push_back(key);
    }
  }
  // The environment is validated even when the option wins: a typo there should not stay
  // hidden until the option is removed.
  int64_t from_env = 0;
  if (env_num_threads != nullptr && *env_num_threads != '\0') {
    from_env = env_threads(env_num_threads);
  }
  if (from_option > 0) {
    result.num_threads = static_cast<int32_t>(from_option);
    result.threads_source = "option num_threads";
  } else if (from_env > 0) {
    result.num_threads = static_cast<int32_t>(from_env);
    result.threads_source = "KILN_NUM_THREADS";
  } else {
    result.num_threads = hardware_threads > 0 ? hardware_threads : 1;
    result.threads_source = hardware_source;
  }
  return result;
}

ProcessCpus process_cpus() {
  ProcessCpus out;
  CPU_ZERO(&out.set);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) == 0) {
    out.set = mine;
    out.known = true;
    out.calling = std::max(1, CPU_COUNT(&mine));
  }
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
      cpu_set_t theirs;
      CPU_ZERO(&theirs);
      if (tid <= 0 || sched_getaffinity(tid, sizeof(theirs), &theirs) != 0) continue;
      CPU_OR(&out.set, &out.set, &theirs);
      out.known = true;
    }
    closedir(tasks);
  }
  if (out.known && CPU_COUNT(&out.set) > 0) {
    out.count = CPU_COUNT(&out.set);
    out.describe = "the process's CPU affinity (" + std::to_string(out.count) + " CPU" +
                   (out.count == 1 ? ")" : "s)");
  } else {
    out.known = false;
    const unsigned hw = std::thread::hardware_concurrency();
    out.count = hw > 0 ? static_cast<int32_t>(hw) : 1;
    out.calling = out.count;
    out.describe = "the hardware's CPUs (" + std::to_string(out.count) + ", no affinity mask)";
  }
  return out;
}

}  // namespace kiln::cpu
