// SPDX-License-Identifier: Apache-2.0
#include "kiln/llm/builtins.h"

#include <algorithm>
#include <mutex>

#include "builtin_table.h"

namespace kiln::llm {
namespace {

detail::BuiltinList all_builtins(std::shared_ptr<const DeviceContext> context) {
  detail::BuiltinList all = detail::kv_cache_builtins();
  for (detail::BuiltinList part :
       {detail::sampling_builtins(), detail::tensor_cache_builtins(std::move(context))}) {
    for (auto& entry : part) all.push_back(std::move(entry));
  }
  return all;
}

}  // namespace

void register_builtins(const DeviceContext& context) {
  static std::mutex mutex;  // two runtimes registering at once replace whole sets, never mix
  std::lock_guard lock(mutex);
  for (auto& [name, function] : all_builtins(context.retain())) registry::set(name, function, true);
}

std::vector<std::string> builtin_names() {
  std::vector<std::string> names;
  for (auto& [name, function] : all_builtins(nullptr)) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::llm
