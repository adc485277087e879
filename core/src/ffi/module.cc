// SPDX-License-Identifier: Apache-2.0
#include "kiln/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

#include "ffi/error_object.h"
#include "kiln/error.h"
#include "kiln/sdk/abi.hpp"

namespace kiln {

ModuleObj::~ModuleObj() {
  functions_.clear();  // functions may point into the loaded library
  if (loaded_.release != nullptr) loaded_.release(loaded_.handle);
}

void ModuleObj::add_function(const std::string& name, Function f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!functions_.emplace(name, std::move(f)).second) {
    throw ValueError(fmt::format("module already has a function '{}'", name));
  }
}

Ref<ModuleObj> ModuleObj::from_loader(const KilnLoadedModule& loaded, Ref<Object> plugin,
                                      std::string source) {
  auto obj = make_object<ModuleObj>(loaded.kind != nullptr ? loaded.kind : "unknown",
                                    loaded.entry_name != nullptr ? loaded.entry_name : "");
  obj->loaded_ = loaded;
  obj->plugin_ = std::move(plugin);
  obj->source_ = std::move(source);
  for (int32_t i = 0; i < loaded.num_functions; ++i) {
    if (loaded.function_names[i] != nullptr) obj->lazy_names_.push_back(loaded.function_names[i]);
  }
  // Arrays strided by their first element's struct_size (docs/plugin-abi.md §6.5). A
  // malformed one is refused here, after `obj` took the module, so that it is released.
  const sdk::StridedArray<KilnDeviceBlob> blobs(loaded.blobs, loaded.num_blobs);
  const sdk::StridedArray<KilnArtifact> artifacts(loaded.artifacts, loaded.num_artifacts);
  for (const std::string& why : {blobs.check("KilnDeviceBlob"), artifacts.check("KilnArtifact")}) {
    if (!why.empty()) throw AbiError(fmt::format("{}: the loaded module's {}", obj->source_, why));
  }
  for (size_t i = 0; i < blobs.size(); ++i) obj->blobs.push_back(blobs[i]);
  for (size_t i = 0; i < artifacts.size(); ++i) {
    const KilnArtifact a = artifacts[i];
    obj->artifacts.push_back(Artifact{a.name != nullptr ? a.name : "",
                                      a.role != nullptr ? a.role : "",
                                      std::vector<uint8_t>(a.data, a.data + a.size)});
  }
  return obj;
}

void ModuleObj::set_function_source(FunctionSource source) {
  std::lock_guard<std::mutex> lock(mu_);
  source_fns_ = std::move(source);
}

std::optional<Function> ModuleObj::find_function(const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = functions_.find(name); it != functions_.end()) return it->second;
  if (source_fns_.find) {
    auto find = source_fns_.find;  // asked unlocked: it may look up other modules
    lock.unlock();
    return find(name);
  }
  // Each Function handed out keeps this module (and so its library and plugin) alive; the
  // cache holds only the raw callable so that the module does not keep itself alive.
  if (auto it = callables_.find(name); it != callables_.end()) {
    return Function::from_abi(it->second, Ref<Object>(this), name);
  }
  if (loaded_.get_function == nullptr ||
      std::find(lazy_names_.begin(), lazy_names_.end(), name) == lazy_names_.end()) {
    return std::nullopt;
  }
  KilnCallable callable{};
  if (KilnError* err = loaded_.get_function(loaded_.handle, name.c_str(), &callable)) {
    if (err->code == KILN_ERROR_NOT_FOUND) {  // fall through to the imports
      ffi::release_error(err);
      return std::nullopt;
    }
    detail::raise_and_free(err);
  }
  callables_.emplace(name, callable);
  return Function::from_abi(callable, Ref<Object>(this), name);
}

std::vector<std::string> ModuleObj::function_names() const {
  std::unique_lock<std::mutex> lock(mu_);
  std::set<std::string> names(lazy_names_.begin(), lazy_names_.end());
  for (const auto& [name, f] : functions_) names.insert(name);
  if (source_fns_.names) {
    auto list = source_fns_.names;
    lock.unlock();
    for (std::string& name : list()) names.insert(std::move(name));
  }
  return {names.begin(), names.end()};
}

Function Module::get_function(const std::string& name) const {
  if (!obj_) throw ValueError("get_function on an undefined module");
  // Depth-first over this module and its imports, each once.
  std::set<ModuleObj*> seen;
  std::function<std::optional<Function>(ModuleObj*)> search =
      [&](ModuleObj* m) -> std::optional<Function> {
    if (!seen.insert(m).second) return std::nullopt;
    if (auto f = m->find_function(name)) return f;
    for (const auto& child : m->imports) {
      if (auto f = search(child.get())) return f;
    }
    return std::nullopt;
  };
  if (auto f = search(obj_.get())) return *f;
  const auto names = obj_->function_names();
  throw NotFoundError(
      fmt::format("module '{}' ({}) has no function '{}'; available: {}",
                  obj_->source().empty() ? obj_->kind() : obj_->source(), obj_->kind(), name,
                  names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
}

bool Module::has_function(const std::string& name) const {
  try {
    get_function(name);
    return true;
  } catch (const NotFoundError&) {
    return false;
  }
}

Function Module::entry() const {
  if (entry_name().empty()) {
    throw NotFoundError(fmt::format("module '{}' has no entry function", obj_->source()));
  }
  return get_function(entry_name());
}

std::vector<Module> Module::imports() const {
  std::vector<Module> out;
  for (const auto& m : obj_->imports) out.emplace_back(m);
  return out;
}

}  // namespace kiln
