// SPDX-License-Identifier: Apache-2.0
#include "hiprtc_compiler.h"

#include <dlfcn.h>

#include "code_object.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::rocm {
namespace {

constexpr int kSuccess = 0;

const char* result_name(int result) {
  switch (result) {
    case 0:
      return "HIPRTC_SUCCESS";
    case 1:
      return "HIPRTC_ERROR_OUT_OF_MEMORY";
    case 2:
      return "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case 3:
      return "HIPRTC_ERROR_INVALID_INPUT";
    case 4:
      return "HIPRTC_ERROR_INVALID_PROGRAM";
    case 5:
      return "HIPRTC_ERROR_INVALID_OPTION";
    case 6:
      return "HIPRTC_ERROR_COMPILATION";
    case 7:
      return "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE";
    case 8:
      return "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case 9:
      return "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case 10:
      return "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    case 11:
      return "HIPRTC_ERROR_INTERNAL_ERROR";
    default:
      return "unknown hiprtc result";
  }
}

template <typename Fn>
bool bind(void* handle, Fn& slot, const char* name, std::string* missing) {
  dlerror();
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    *missing = name;
    return false;
  }
  slot = reinterpret_cast<Fn>(p);
  return true;
}

// Binds every entry point of `rtc` from its handle; returns the first missing name, or "".
std::string bind_all(Hiprtc& rtc) {
  std::string missing;
  void* h = rtc.handle;
  (void)(bind(h, rtc.GetErrorString, "hiprtcGetErrorString", &missing) &&
         bind(h, rtc.Version, "hiprtcVersion", &missing) &&
         bind(h, rtc.CreateProgram, "hiprtcCreateProgram", &missing) &&
         bind(h, rtc.CompileProgram, "hiprtcCompileProgram", &missing) &&
         bind(h, rtc.DestroyProgram, "hiprtcDestroyProgram", &missing) &&
         bind(h, rtc.GetProgramLogSize, "hiprtcGetProgramLogSize", &missing) &&
         bind(h, rtc.GetProgramLog, "hiprtcGetProgramLog", &missing) &&
         bind(h, rtc.GetCodeSize, "hiprtcGetCodeSize", &missing) &&
         bind(h, rtc.GetCode, "hiprtcGetCode", &missing));
  return missing;
}

// Destroys a program when it goes out of scope.
class ProgramGuard {
 public:
  ProgramGuard(const Hiprtc& rtc, Hiprtc::Program program) : rtc_(rtc), program_(program) {}
  ~ProgramGuard() {
    if (program_ != nullptr) rtc_.DestroyProgram(&program_);
  }
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;

 private:
  const Hiprtc& rtc_;
  Hiprtc::Program program_;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

}  // namespace

std::string Hiprtc::describe(int result) const {
  return std::to_string(result) + " " + result_name(result);
}

std::unique_ptr<Hiprtc> load_hiprtc(const std::string& library, std::string* why) {
  const std::vector<std::string> candidates =
      library.empty() ? default_hiprtc_libraries() : std::vector<std::string>{library};
  std::string tried;
  for (const std::string& name : candidates) {
    auto rtc = std::make_unique<Hiprtc>();
    // RTLD_NODELETE: a vendor runtime keeps process-wide state (threads, caches) that does not
    // survive dlclose, so it stays mapped until the process exits.
    rtc->handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (rtc->handle == nullptr) {
      const char* e = dlerror();
      tried +=
          (tried.empty() ? "" : "; ") + std::string(e != nullptr ? e : name + ": not loadable");
      continue;
    }
    rtc->library = name;
    const std::string missing = bind_all(*rtc);
    if (!missing.empty()) {
      // Keep the handle open: it may be the HIP runtime, which must not be unloaded.
      tried += (tried.empty() ? "" : "; ") + name + " does not export " + missing;
      continue;
    }
    if (rtc->Version(&rtc->version_major, &rtc->version_minor) != kSuccess) {
      rtc->version_major = rtc->version_minor = 0;
    }
    return rtc;
  }
  if (why != nullptr) {
    *why = "cannot load hiprtc, needed to compile hip_source modules (" +
           std::string(library.empty() ? "tried libhiprtc.so.6, libhiprtc.so, libamdhip64.so.5 and "
                                         "libamdhip64.so"
                                       : "option hiprtc_library") +
           "): " + tried;
  }
  return nullptr;
}

CompileResult compile_hip_source(const Hiprtc& rtc, std::string_view source,
                                 const std::string& name, const std::vector<std::string>& options) {
  CompileResult out;
  auto fail = [&](int status) {
    out.ok = false;
    out.status = status;
    out.status_text = rtc.describe(status);
    return out;
  };
  const std::string text(source);  // NUL-terminated copy
  Hiprtc::Program program = nullptr;
  int status = rtc.CreateProgram(&program, text.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (status != kSuccess) return fail(status);
  ProgramGuard guard(rtc, program);
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& o : options) argv.push_back(o.c_str());
  const int compiled = rtc.CompileProgram(program, static_cast<int>(argv.size()),
                                          argv.empty() ? nullptr : argv.data());
  size_t log_size = 0;
  if (rtc.GetProgramLogSize(program, &log_size) == kSuccess && log_size > 0) {
    std::string log(log_size, '\0');
    if (rtc.GetProgramLog(program, log.data()) == kSuccess) {
      while (!log.empty() && (log.back() == '\0' || is_space(log.back()))) log.pop_back();
      out.log = std::move(log);
    }
  }
  if (compiled != kSuccess) return fail(compiled);
  size_t code_size = 0;
  status = rtc.GetCodeSize(program, &code_size);
  if (status != kSuccess) return fail(status);
  if (code_size == 0) return fail(11);  // success without code: report an internal error
  std::vector<uint8_t> code(code_size);
  status = rtc.GetCode(program, reinterpret_cast<char*>(code.data()));
  if (status != kSuccess) return fail(status);
  out.ok = true;
  out.code = std::move(code);
  return out;
}

std::vector<std::string> split_options(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        current += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (is_space(c)) {
      if (in_word) out.push_back(std::move(current));
      current.clear();
      in_word = false;
    } else {
      current += c;
      in_word = true;
    }
  }
  if (quote != 0) {
    throw sdk::Error(KILN_ERROR_VALUE, "build options have an unterminated " +
                                           std::string(1, quote) + " quote: " + std::string(text));
  }
  if (in_word) out.push_back(std::move(current));
  return out;
}

std::vector<std::string> hiprtc_options(const std::string& target, std::string_view build_options,
                                        const std::vector<std::string>& extra) {
  // hiprtc 5.2 aborts the process on an architecture it does not know; a malformed one is
  // rejected here (the device's own gcnArchName is always one its runtime knows).
  if (!parse_target_id(target)) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "'" + target + "' is not an AMDGPU target ID (e.g. gfx90a:sramecc+:xnack-)");
  }
  std::vector<std::string> out = {"--gpu-architecture=" + target};
  const std::vector<std::string> from_metadata = split_options(build_options);
  for (const std::vector<std::string>* list : {&from_metadata, &extra}) {
    for (const std::string& o : *list) {
      if (o.rfind("--gpu-architecture", 0) == 0 || o.rfind("--offload-arch", 0) == 0) {
        throw sdk::Error(KILN_ERROR_VALUE,
                         "build option '" + o +
                             "' sets the architecture, which the rocm backend takes from the "
                             "device (" +
                             target + ")");
      }
      out.push_back(o);
    }
  }
  return out;
}

}  // namespace kiln::rocm
