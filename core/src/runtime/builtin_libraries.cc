// SPDX-License-Identifier: Apache-2.0
#include "runtime/builtin_libraries.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <system_error>

#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/logging.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

constexpr const char* kLogSource = "builtin-libraries";
constexpr const char* kLlmLibrary = "libkiln_llm.so";

// The builtins libkiln_llm.so registers (kiln::llm::builtin_names()). Listed here, as names
// only, for one purpose: when the library is not loaded, each becomes a stub whose error names
// the library, instead of a VM's "Cannot find function". tests/python/test_llm_rpc.py checks
// that this list and the library's agree.
constexpr std::array kLlmBuiltins = {
    "vm.builtin.apply_presence_and_frequency_penalty",
    "vm.builtin.apply_repetition_penalty",
    "vm.builtin.apply_softmax_with_temperature",
    "vm.builtin.attention_kv_cache_append_mla_kv",
    "vm.builtin.attention_kv_cache_attention_with_fused_qkv",
    "vm.builtin.attention_kv_cache_attention_with_shared_kv",
    "vm.builtin.attention_kv_cache_commit_accepted_token_tree_nodes",
    "vm.builtin.attention_kv_cache_cross_attention",
    "vm.builtin.attention_kv_cache_debug_get_kv",
    "vm.builtin.attention_kv_cache_debug_get_kv_mla",
    "vm.builtin.attention_kv_cache_empty",
    "vm.builtin.attention_kv_cache_enable_sliding_window_for_seq",
    "vm.builtin.attention_kv_cache_get_num_available_pages",
    "vm.builtin.attention_kv_cache_get_query_positions",
    "vm.builtin.attention_kv_cache_get_total_sequence_length",
    "vm.builtin.attention_kv_cache_merge_attn_output_inplace",
    "vm.builtin.attention_kv_cache_self_attention",
    "vm.builtin.kv_cache_disagg_mark_send",
    "vm.builtin.kv_cache_disagg_prepare_recv",
    "vm.builtin.kv_state_add_sequence",
    "vm.builtin.kv_state_begin_forward",
    "vm.builtin.kv_state_clear",
    "vm.builtin.kv_state_end_forward",
    "vm.builtin.kv_state_fork_sequence",
    "vm.builtin.kv_state_popn",
    "vm.builtin.kv_state_remove_sequence",
    "vm.builtin.multinomial_from_uniform",
    "vm.builtin.paged_attention_kv_cache_create",
    "vm.builtin.param_array_from_cache",
    "vm.builtin.param_array_from_cache_by_name",
    "vm.builtin.param_array_from_cache_by_name_unpacked",
    "vm.builtin.sample_top_p_from_logits",
    "vm.builtin.sample_top_p_from_prob",
    "vm.builtin.tensor_cache.clear",
    "vm.builtin.tensor_cache.get",
    "vm.builtin.tensor_cache.load",
    "vm.builtin.tensor_cache.remove",
    "vm.builtin.tensor_cache.update",
};

// libkiln's own directory (where the bare names are looked for), or empty when unknown.
fs::path libkiln_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&load_builtin_libraries), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  const fs::path lib = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : lib.parent_path();
}

// Opens the library at `load.path` and calls its entry point; fills loaded / why_not.
void open_and_register(BuiltinLibraryLoad& load, const DeviceContext& context) {
  std::error_code ec;
  if (!fs::exists(load.path, ec)) {
    load.why_not = fmt::format("there is no {}", load.path.string());
    return;
  }
  ::dlerror();
  // Never closed: the functions it registers point into it for the rest of the process.
  void* handle = ::dlopen(load.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    load.why_not = fmt::format("dlopen failed: {}", why != nullptr ? why : "no reason given");
    return;
  }
  auto entry = reinterpret_cast<BuiltinLibraryEntry>(::dlsym(handle, kBuiltinLibraryEntry));
  if (entry == nullptr) {
    load.why_not = fmt::format("{} exports no {}(): it is not a builtin library",
                               load.path.string(), kBuiltinLibraryEntry);
    return;
  }
  const size_t before = registry::names().size();
  std::array<char, 1024> error{};
  if (entry(static_cast<const void*>(&context), error.data(), error.size()) != 0) {
    load.why_not = fmt::format("its {}() failed: {}", kBuiltinLibraryEntry,
                               error[0] != 0 ? error.data() : "no reason given");
    return;
  }
  const size_t after = registry::names().size();
  load.new_functions = after > before ? after - before : 0;
  load.loaded = true;
}

// Registers a stub for each of libkiln_llm's builtins that nothing provides: calling it throws
// NotFoundError naming the library and `why`.
void register_llm_stubs(const std::string& why) {
  for (const char* name : kLlmBuiltins) {
    if (registry::get(name)) continue;
    const std::string message = fmt::format(
        "'{}' is a builtin of {} (Kiln's LLM runtime), which this process did not load: {}. "
        "Install libkiln_llm beside libkiln, or name it in ${} (docs/architecture.md, "
        "\"Builtin libraries\")",
        name, kLlmLibrary, why, kBuiltinLibrariesVariable);
    registry::set(name, Function::from_packed(name, [message](const Any*, int32_t) -> Any {
                    throw NotFoundError(message);
                  }));
  }
}

}  // namespace

std::vector<std::string> builtin_library_names(const char* variable) {
  const std::string list = variable != nullptr ? variable : kDefaultBuiltinLibraries;
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) names.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

std::vector<BuiltinLibraryLoad> load_builtin_libraries(const DeviceContext& context) {
  const char* variable = std::getenv(kBuiltinLibrariesVariable);
  const fs::path beside = libkiln_directory();
  std::vector<BuiltinLibraryLoad> loads;
  bool llm_loaded = false;
  std::string llm_why = fmt::format("${} ('{}') does not list it", kBuiltinLibrariesVariable,
                                    variable != nullptr ? variable : "");
  for (const std::string& name : builtin_library_names(variable)) {
    BuiltinLibraryLoad load;
    load.name = name;
    if (name.find('/') != std::string::npos) {
      load.path = fs::absolute(name);
    } else if (!beside.empty()) {
      load.path = beside / name;
    }
    if (load.path.empty()) {
      load.why_not = "libkiln's directory is unknown (dladdr failed), and the name has no '/'";
    } else {
      try {
        open_and_register(load, context);
      } catch (const std::exception& e) {  // registry or filesystem errors: reported, not thrown
        load.why_not = e.what();
      }
    }
    const bool is_llm = load.path.filename() == kLlmLibrary || name == kLlmLibrary;
    if (load.loaded) {
      log(LogLevel::kDebug, kLogSource,
          fmt::format("loaded {} ({}): {} new global functions", name, load.path.string(),
                      load.new_functions));
      llm_loaded = llm_loaded || is_llm;
    } else {
      // The default library missing is a core-only install, not a fault.
      const bool quiet = variable == nullptr && is_llm && load.why_not.starts_with("there is no");
      log(quiet ? LogLevel::kDebug : LogLevel::kWarn, kLogSource,
          fmt::format("not loaded: {}: {}", name, load.why_not));
      if (is_llm) llm_why = load.why_not;
    }
    loads.push_back(std::move(load));
  }
  if (!llm_loaded) {
    try {
      register_llm_stubs(llm_why);
    } catch (const std::exception& e) {
      log(LogLevel::kWarn, kLogSource, fmt::format("cannot register the stubs: {}", e.what()));
    }
  }
  return loads;
}

}  // namespace kiln
