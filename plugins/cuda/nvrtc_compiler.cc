// SPDX-License-Identifier: Apache-2.0
#include "nvrtc_compiler.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::cuda {
namespace {

[[noreturn]] void fail(int32_t code, const std::string& message) {
  throw sdk::Error(code, message);
}

// Destroys the program on every path out of nvrtc_compile.
struct ProgramGuard {
  const NvrtcApi& api;
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program != nullptr) api.nvrtcDestroyProgram(&program);
  }
};

std::string result_text(const NvrtcApi& api, nvrtcResult result) {
  const char* text = api.nvrtcGetErrorString != nullptr ? api.nvrtcGetErrorString(result) : nullptr;
  return std::string(text != nullptr ? text : "NVRTC error") + " (" +
         std::to_string(static_cast<int>(result)) + ")";
}

std::string program_log(const NvrtcApi& api, nvrtcProgram program) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(std::strlen(log.c_str()));
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

}  // namespace

NvrtcApi::~NvrtcApi() { close(); }

void NvrtcApi::close() {
  if (handle_ != nullptr) ::dlclose(handle_);
  handle_ = nullptr;
  library_.clear();
  include_dirs_.clear();
}

namespace {

// The toolkit header folders for a library opened at `library_path` (see include_dirs()).
std::vector<std::string> toolkit_include_dirs(const std::string& library_path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') roots.emplace_back(v);
  }
  std::error_code ec;
  if (!library_path.empty()) {
    // <root>/lib64/libnvrtc.so.13 (or <root>/targets/x86_64-linux/lib/...): two folders up.
    const fs::path real = fs::canonical(library_path, ec);
    if (!ec) roots.push_back(real.parent_path().parent_path());
  }
  roots.emplace_back("/usr/local/cuda");
  std::vector<std::string> out;
  for (const fs::path& root : roots) {
    for (const char* sub : {"include", "include/cccl"}) {
      const fs::path dir = root / sub;
      if (!fs::is_directory(dir, ec)) continue;
      const std::string text = fs::canonical(dir, ec).string();
      if (!ec && std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
    }
  }
  return out;
}

}  // namespace

const std::vector<std::string>& NvrtcApi::default_libraries() {
  static const std::vector<std::string> libraries = [] {
    std::vector<std::string> out = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    // Toolkits outside the loader's search path: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
    std::vector<std::string> roots;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
      if (const char* v = std::getenv(var); v != nullptr && *v != '\0') roots.emplace_back(v);
    }
    roots.emplace_back("/usr/local/cuda");
    for (const std::string& root : roots) {
      for (const char* lib : {"/lib64/libnvrtc.so", "/lib/libnvrtc.so"}) {
        std::error_code ec;
        const std::string path = root + lib;
        if (std::filesystem::exists(path, ec) &&
            std::find(out.begin(), out.end(), path) == out.end()) {
          out.push_back(path);
        }
      }
    }
    return out;
  }();
  return libraries;
}

bool NvrtcApi::open(const std::vector<std::string>& candidates, std::string* why) {
  close();
  std::string tried;
  for (const std::string& candidate : candidates) {
    ::dlerror();
    // RTLD_NODELETE: a vendor runtime keeps process-wide state (threads, caches) that does not
    // survive dlclose, so it stays mapped until the process exits.
    void* handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == nullptr) {
      const char* error = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(error != nullptr ? error : candidate);
      continue;
    }
    std::string missing;
    auto resolve = [&](const char* name, auto& slot) {
      void* symbol = ::dlsym(handle, name);
      if (symbol == nullptr && missing.empty()) missing = name;
      std::memcpy(&slot, &symbol, sizeof(symbol));
    };
#define KILN_NVRTC_RESOLVE(name, symbol, result, parameters) resolve(#symbol, name);
    KILN_NVRTC_ENTRY_POINTS(KILN_NVRTC_RESOLVE)
#undef KILN_NVRTC_RESOLVE
    if (!missing.empty()) {
      tried += (tried.empty() ? "" : "; ") + candidate + " lacks " + missing;
      ::dlclose(handle);
      continue;
    }
    if (nvrtcVersion(&major_, &minor_) != NVRTC_SUCCESS) major_ = minor_ = 0;
    handle_ = handle;
    library_ = candidate;
    // Where the dynamic loader found it (a bare soname says nothing of its folder).
    Dl_info info{};
    void* any_symbol = ::dlsym(handle, "nvrtcVersion");
    include_dirs_ = toolkit_include_dirs(
        any_symbol != nullptr && ::dladdr(any_symbol, &info) != 0 && info.dli_fname != nullptr
            ? std::string(info.dli_fname)
            : candidate);
    return true;
  }
  *why = "cannot load NVRTC (needed for cuda_source modules): " +
         (tried.empty() ? std::string("no library to try") : tried);
  return false;
}

NvrtcOutput nvrtc_compile(const NvrtcApi& api, std::string_view source,
                          const std::string& program_name, const std::string& arch,
                          const std::vector<std::string>& options,
                          const std::vector<std::string>& name_expressions) {
  if (!api.is_open()) fail(KILN_ERROR_UNAVAILABLE, program_name + ": NVRTC is not loaded");
  // NVRTC reads the source as a NUL-terminated string: an embedded NUL would silently cut it.
  if (source.find('\0') != std::string_view::npos) {
    fail(KILN_ERROR_VALUE, program_name + ": CUDA source contains a NUL byte at offset " +
                               std::to_string(source.find('\0')) + " (not a text file?)");
  }
  const std::string text(source);
  ProgramGuard guard{api};
  nvrtcResult r = api.nvrtcCreateProgram(&guard.program, text.c_str(), program_name.c_str(), 0,
                                         nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    guard.program = nullptr;
    fail(KILN_ERROR_RUNTIME, program_name + ": nvrtcCreateProgram failed: " + result_text(api, r));
  }
  for (const std::string& expression : name_expressions) {
    r = api.nvrtcAddNameExpression(guard.program, expression.c_str());
    if (r != NVRTC_SUCCESS) {
      fail(KILN_ERROR_VALUE, program_name + ": kernel name '" + expression +
                                 "' is not a valid name expression: " + result_text(api, r));
    }
  }
  std::vector<std::string> all;
  if (!arch.empty()) all.push_back("-arch=" + arch);
  all.insert(all.end(), options.begin(), options.end());
  // After the caller's own, so that a -I of theirs wins.
  for (const std::string& dir : api.include_dirs()) all.push_back("-I" + dir);
  std::vector<const char*> argv;
  argv.reserve(all.size());
  for (const std::string& option : all) argv.push_back(option.c_str());

  r = api.nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
  NvrtcOutput out;
  out.log = program_log(api, guard.program);
  if (r != NVRTC_SUCCESS) {
    std::string joined;
    for (const std::string& option : all) joined += (joined.empty() ? "" : " ") + option;
    const int32_t code = r == NVRTC_ERROR_COMPILATION || r == NVRTC_ERROR_INVALID_OPTION ||
                                 r == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID
                             ? KILN_ERROR_VALUE
                             : KILN_ERROR_RUNTIME;
    fail(code,
         program_name + ": NVRTC compile failed: " + result_text(api, r) + " (options: " + joined +
             ")" +
             (out.log.empty() ? std::string(" with an empty log") : "; NVRTC log:\n" + out.log));
  }
  size_t ptx_size = 0;
  r = api.nvrtcGetPTXSize(guard.program, &ptx_size);
  if (r != NVRTC_SUCCESS || ptx_size == 0) {
    fail(KILN_ERROR_RUNTIME, program_name + ": nvrtcGetPTXSize failed: " + result_text(api, r));
  }
  out.ptx.assign(ptx_size, '\0');
  r = api.nvrtcGetPTX(guard.program, out.ptx.data());
  if (r != NVRTC_SUCCESS) {
    fail(KILN_ERROR_RUNTIME, program_name + ": nvrtcGetPTX failed: " + result_text(api, r));
  }
  out.ptx.resize(std::strlen(out.ptx.c_str()));
  size_t cubin_size = 0;
  if (api.nvrtcGetCUBINSize(guard.program, &cubin_size) == NVRTC_SUCCESS && cubin_size > 0) {
    out.cubin.resize(cubin_size);
    r = api.nvrtcGetCUBIN(guard.program, reinterpret_cast<char*>(out.cubin.data()));
    if (r != NVRTC_SUCCESS) {
      fail(KILN_ERROR_RUNTIME, program_name + ": nvrtcGetCUBIN failed: " + result_text(api, r));
    }
  }
  for (const std::string& expression : name_expressions) {
    const char* lowered = nullptr;
    r = api.nvrtcGetLoweredName(guard.program, expression.c_str(), &lowered);
    if (r != NVRTC_SUCCESS || lowered == nullptr) {
      fail(KILN_ERROR_NOT_FOUND, program_name + ": no lowered name for kernel '" + expression +
                                     "': " + result_text(api, r));
    }
    out.lowered_names.emplace(expression, lowered);
  }
  return out;
}

std::vector<std::string> split_options(std::string_view text, const std::string& what) {
  std::vector<std::string> out;
  std::string current;
  bool in_word = false;
  char quote = '\0';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != '\0') {
      if (c == quote) {
        quote = '\0';
      } else if (c == '\\' && quote == '"' && i + 1 < text.size() &&
                 (text[i + 1] == '"' || text[i + 1] == '\\')) {
        current += text[++i];
      } else {
        current += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) out.push_back(std::move(current));
      current.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        fail(KILN_ERROR_VALUE, what + ": trailing backslash in '" + std::string(text) + "'");
      }
      current += text[++i];
    } else {
      current += c;
    }
  }
  if (quote != '\0') {
    fail(KILN_ERROR_VALUE, what + ": unterminated " + (quote == '"' ? "double" : "single") +
                               " quote in '" + std::string(text) + "'");
  }
  if (in_word) out.push_back(std::move(current));
  return out;
}

std::string sm_arch(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

}  // namespace kiln::cuda
