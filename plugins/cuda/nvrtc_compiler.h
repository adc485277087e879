// SPDX-License-Identifier: Apache-2.0
// CUDA C++ source compiled at run time with NVRTC, which is dlopened like the driver
// (libnvrtc.so.13, then .12, then libnvrtc.so). The compile needs no GPU and no driver: the
// target architecture is explicit, so it is testable on any machine with NVRTC installed.
// nvrtc_api_subset.h declares NVRTC's types and entry points.
#ifndef KILN_PLUGINS_CUDA_NVRTC_COMPILER_H_
#define KILN_PLUGINS_CUDA_NVRTC_COMPILER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nvrtc_api_subset.h"

namespace kiln::cuda {

// Function pointers into one dlopen'ed NVRTC library. Not copyable; closes it on destruction.
class NvrtcApi {
 public:
  NvrtcApi() = default;
  NvrtcApi(const NvrtcApi&) = delete;
  NvrtcApi& operator=(const NvrtcApi&) = delete;
  ~NvrtcApi();

  // The libraries tried when no explicit one is configured, in order: libnvrtc.so.13, .12
  // and libnvrtc.so through the dynamic loader, then libnvrtc.so in lib64/ and lib/ of
  // $CUDA_HOME, $CUDA_PATH and /usr/local/cuda where it exists.
  static const std::vector<std::string>& default_libraries();

  // Opens the first of `candidates` that loads and resolves every entry point. On failure
  // returns false and sets `*why` naming every candidate with its dlerror text.
  bool open(const std::vector<std::string>& candidates, std::string* why);
  bool is_open() const { return handle_ != nullptr; }
  const std::string& library() const { return library_; }
  // The toolkit's header folders that exist, for -I: CUDA source (TVM's among it) includes
  // <cuda/std/cstdint> and other CCCL headers that NVRTC does not bring itself. In order:
  // include/ and include/cccl/ of $CUDA_HOME, $CUDA_PATH, the toolkit the opened library sits
  // in (<root>/lib64/libnvrtc.so -> <root>/include) and /usr/local/cuda. Empty until open().
  const std::vector<std::string>& include_dirs() const { return include_dirs_; }
  // NVRTC's version, e.g. {13, 0}.
  int major_version() const { return major_; }
  int minor_version() const { return minor_; }

  // One pointer per entry point of KILN_NVRTC_ENTRY_POINTS, typed with its signature.
#define KILN_NVRTC_DECLARE_MEMBER(name, symbol, result, parameters) \
  result(*name) parameters = nullptr;
  KILN_NVRTC_ENTRY_POINTS(KILN_NVRTC_DECLARE_MEMBER)
#undef KILN_NVRTC_DECLARE_MEMBER

 private:
  void close();
  void* handle_ = nullptr;
  std::string library_;
  std::vector<std::string> include_dirs_;
  int major_ = 0;
  int minor_ = 0;
};

// What one compile produced.
struct NvrtcOutput {
  std::string ptx;             // always present on success
  std::vector<uint8_t> cubin;  // present when the target was a real architecture (sm_XY)
  std::string log;             // warnings, possibly empty
  // Each name expression given to the compile -> the symbol it lowered to (the name to look
  // up in the loaded module; equal to the expression for extern "C" kernels).
  std::map<std::string, std::string> lowered_names;
};

// Compiles `source` (named `program_name` in messages, e.g. "vector_add.cu") for `arch`
// ("sm_90" for PTX plus a cubin, "compute_90" for PTX only; empty: no -arch is added, for
// options that carry their own) with `options` appended after "-arch=<arch>". Every entry of
// `name_expressions` (kernel names, or C++ expressions such as "scale<float>") is registered so
// that its lowered name is reported. Throws kiln::sdk::Error: KILN_ERROR_VALUE with NVRTC's log for
// a compile error or a bad option
// ("<program_name>: NVRTC_ERROR_COMPILATION ... log: ..."), KILN_ERROR_RUNTIME for other NVRTC
// failures. `api` must be open.
NvrtcOutput nvrtc_compile(const NvrtcApi& api, std::string_view source,
                          const std::string& program_name, const std::string& arch,
                          const std::vector<std::string>& options,
                          const std::vector<std::string>& name_expressions);

// Splits a command-line style option string into arguments: whitespace separates, single and
// double quotes group ("-I'/path with space'" is one argument without the quotes), a backslash
// escapes the next character outside single quotes. Throws kiln::sdk::Error
// (KILN_ERROR_VALUE) naming `what` for an unterminated quote or a trailing backslash.
std::vector<std::string> split_options(std::string_view text, const std::string& what);

// "sm_90" for compute capability 9.0; "sm_90a"-style suffixes are not added.
std::string sm_arch(int major, int minor);

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_NVRTC_COMPILER_H_
