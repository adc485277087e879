// SPDX-License-Identifier: Apache-2.0
// HIP source compiled at run time with hiprtc, dlopened like the runtime: from libamdhip64 in
// ROCm 5 (which carries the hiprtc entry points) or from libhiprtc.so.6 in ROCm 6 and later.
// Needs no device: the compile targets an architecture named in the options
// (--gpu-architecture=gfx90a), so it is tested on machines without a GPU.
#ifndef KILN_PLUGINS_ROCM_HIPRTC_COMPILER_H_
#define KILN_PLUGINS_ROCM_HIPRTC_COMPILER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rocm {

// The libraries tried, in order, when none is configured: ROCm 6 moved hiprtc into its own
// library; ROCm 5 exports it from the HIP runtime itself.
inline const std::vector<std::string>& default_hiprtc_libraries() {
  static const std::vector<std::string> names = {"libhiprtc.so.6", "libhiprtc.so",
                                                 "libamdhip64.so.5", "libamdhip64.so"};
  return names;
}

// The hiprtc entry points. The library is never closed (see HipApi).
struct Hiprtc {
  void* handle = nullptr;
  std::string library;  // the name that was opened
  int version_major = 0;
  int version_minor = 0;

  // hiprtcResult is an int-sized enum; hiprtcProgram an opaque pointer.
  using Program = void*;
  const char* (*GetErrorString)(int) = nullptr;
  int (*Version)(int*, int*) = nullptr;
  int (*CreateProgram)(Program*, const char*, const char*, int, const char**,
                       const char**) = nullptr;
  int (*CompileProgram)(Program, int, const char**) = nullptr;
  int (*DestroyProgram)(Program*) = nullptr;
  int (*GetProgramLogSize)(Program, size_t*) = nullptr;
  int (*GetProgramLog)(Program, char*) = nullptr;
  int (*GetCodeSize)(Program, size_t*) = nullptr;
  int (*GetCode)(Program, char*) = nullptr;

  // "6 HIPRTC_ERROR_COMPILATION".
  std::string describe(int result) const;
};

// Opens hiprtc: `library` when it is not empty, else each of default_hiprtc_libraries() in
// turn until one exports every entry point. Returns NULL and sets `*why` (naming what was
// tried and why each failed) otherwise.
std::unique_ptr<Hiprtc> load_hiprtc(const std::string& library, std::string* why);

// What a compile produced.
struct CompileResult {
  bool ok = false;
  int status = 0;             // the hiprtcResult of the step that failed, 0 on success
  std::string status_text;    // "6 HIPRTC_ERROR_COMPILATION" when !ok
  std::string log;            // the compiler's log (warnings, errors); may be empty
  std::vector<uint8_t> code;  // the code object (an AMDGPU ELF) when ok
};

// Compiles `source` (named `name` in diagnostics) with `options`. Never throws for a bad
// program: the failure and the log are in the result. Throws std::bad_alloc only.
CompileResult compile_hip_source(const Hiprtc& rtc, std::string_view source,
                                 const std::string& name, const std::vector<std::string>& options);

// Splits a build-options string at whitespace; single or double quotes group words (the
// quotes are removed). Throws kiln::sdk::Error(KILN_ERROR_VALUE) for an unterminated quote.
std::vector<std::string> split_options(std::string_view text);

// The options a module's HIP source is compiled with for a device of architecture `target`
// (its gcnArchName): "--gpu-architecture=<target>", then `build_options` (the metadata's, split
// as above), then `extra` (the plugin's compile_options). A build option that sets
// --gpu-architecture / --offload-arch itself, or a `target` that is not a target ID, is a
// kiln::sdk::Error(KILN_ERROR_VALUE): the device decides.
std::vector<std::string> hiprtc_options(const std::string& target, std::string_view build_options,
                                        const std::vector<std::string>& extra);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_HIPRTC_COMPILER_H_
