// SPDX-License-Identifier: Apache-2.0
// The registry of format loaders and the per-load context (cycle and depth checks, the path
// policy).
#include "kiln/module_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

// The extension that names a file's format; a few platform names of shared libraries are all
// "so".
std::string format_of(const fs::path& path) {
  const std::string name = path.filename().string();
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 == name.size()) {
    throw ValueError(
        fmt::format("cannot tell the format of {}: its name has no extension", path.string()));
  }
  std::string format = name.substr(dot + 1);
  if (format == "dll" || format == "dylib" || format == "dso") format = "so";
  return format;
}

// The identity of a file for cycle checks: symlinks resolved where they can be.
fs::path file_identity(const fs::path& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  return ec ? fs::absolute(path).lexically_normal() : canonical;
}

std::string chain_text(const std::vector<fs::path>& chain, const fs::path& last) {
  std::vector<std::string> names;
  for (const auto& p : chain) names.push_back(p.filename().string());
  names.push_back(last.filename().string());
  return fmt::format("{}", fmt::join(names, " -> "));
}

}  // namespace

ModuleLoadContext::ModuleLoadContext(const ModuleLoaderRegistry& registry,
                                     const DeviceContext& devices, const ModuleLoadOptions& options)
    : registry_(registry), devices_(devices), options_(options) {}

void ModuleLoadContext::check_path(const fs::path& path) const {
  if (options_.check_path) options_.check_path(fs::absolute(path).lexically_normal());
}

Module ModuleLoadContext::load_nested(const fs::path& path) {
  check_nesting(file_identity(path));
  return load_here(path, true);
}

Module ModuleLoadContext::load_member(const fs::path& path) {
  check_nesting(file_identity(path));
  return load_here(path, false);
}

void ModuleLoadContext::check_nesting(const fs::path& id) const {
  if (std::find(chain_.begin(), chain_.end(), id) != chain_.end()) {
    throw ValueError(fmt::format("{} imports itself ({})", chain_.front().filename().string(),
                                 chain_text(chain_, id)));
  }
  if (static_cast<int>(chain_.size()) >= options_.max_depth) {
    throw ValueError(fmt::format("imports nest deeper than {} modules ({})", options_.max_depth,
                                 chain_text(chain_, id)));
  }
}

Module ModuleLoadContext::load_here(const fs::path& path, bool apply_policy) {
  if (apply_policy) check_path(path);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw NotFoundError(fmt::format("cannot find module file {}", path.string()));
  }
  const std::string format = format_of(path);
  const FormatLoader* loader = registry_.find(path, format);
  if (loader == nullptr) {
    const auto formats = registry_.formats();
    throw NotFoundError(
        fmt::format("no loader for '.{}' files ({}); loaders available: {}", format, path.string(),
                    formats.empty() ? "none" : fmt::format("{}", fmt::join(formats, ", "))));
  }
  chain_.push_back(file_identity(path));
  struct Pop {
    std::vector<fs::path>& chain;
    ~Pop() { chain.pop_back(); }
  } pop{chain_};
  return loader->load(path, *this);
}

void ModuleLoaderRegistry::add(std::shared_ptr<const FormatLoader> loader, int priority) {
  auto at = std::find_if(loaders_.begin(), loaders_.end(),
                         [&](const Entry& e) { return e.priority < priority; });
  loaders_.insert(at, Entry{priority, std::move(loader)});
}

const FormatLoader* ModuleLoaderRegistry::find(const fs::path& path,
                                               const std::string& format) const {
  for (const Entry& e : loaders_) {
    if (e.loader->accepts(path, format)) return e.loader.get();
  }
  return nullptr;
}

Module ModuleLoaderRegistry::load(const fs::path& path, const DeviceContext& devices,
                                  const ModuleLoadOptions& options) const {
  ModuleLoadContext context(*this, devices, options);
  return context.load_here(path, true);
}

std::vector<std::string> ModuleLoaderRegistry::formats() const {
  std::set<std::string> all;
  for (const Entry& e : loaders_) {
    for (std::string& f : e.loader->formats()) all.insert(std::move(f));
  }
  return {all.begin(), all.end()};
}

}  // namespace kiln
