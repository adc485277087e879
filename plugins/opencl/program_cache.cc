// SPDX-License-Identifier: Apache-2.0
#include "program_cache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>
#include <system_error>
#include <vector>

#include "cl_error.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/sdk/support/sha256.hpp"

namespace kiln::opencl {

using sdk::Sha256;

namespace {

namespace fs = std::filesystem;

// First bytes of a cache file; the last byte is the file format's version.
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'C', 'L', '\x01'};
// Cache files larger than this are not read (a binary is a few MiB at most).
constexpr uint64_t kMaxCacheFileBytes = uint64_t{1} << 30;
// Build logs longer than this are cut in error messages.
constexpr size_t kMaxLogBytes = 32 * 1024;
// The SPIR-V magic number, in the module's byte order.
constexpr uint32_t kSpirvMagic = 0x07230203;

using CreateProgramWithIL = cl_program(CL_API_CALL*)(cl_context, const void*, size_t, cl_int*);

const char* format_title(const std::string& format) {
  if (format == kFormatSource) return "OpenCL C source";
  if (format == kFormatBinary) return "OpenCL program binary";
  return "SPIR-V module";
}

// The build log of `program` on `device`, trimmed and cut at kMaxLogBytes.
std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) !=
          CL_SUCCESS ||
      size == 0) {
    return "";
  }
  std::string log(size, '\0');
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr) !=
      CL_SUCCESS) {
    return "";
  }
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) {
    log.pop_back();
  }
  if (log.size() > kMaxLogBytes) {
    const size_t more = log.size() - kMaxLogBytes;
    log.resize(kMaxLogBytes);
    log += "\n... (" + std::to_string(more) + " more bytes)";
  }
  return log;
}

// Builds `program` (made from `description`) for `device`; on failure releases it and throws
// with the build log.
void build_program(cl_program program, DeviceRecord& device, const std::string& options,
                   const std::string& description) {
  const cl_int err = clBuildProgram(program, 1, &device.device, options.c_str(), nullptr, nullptr);
  if (err == CL_SUCCESS) return;
  const std::string log = build_log(program, device.device);
  clReleaseProgram(program);
  int32_t code = KILN_ERROR_RUNTIME;
  if (err == CL_BUILD_PROGRAM_FAILURE || err == CL_INVALID_BUILD_OPTIONS ||
      err == CL_INVALID_BINARY || err == CL_INVALID_PROGRAM) {
    code = KILN_ERROR_VALUE;  // the code or its options are at fault
  } else if (err == CL_COMPILER_NOT_AVAILABLE || err == CL_LINKER_NOT_AVAILABLE) {
    code = KILN_ERROR_UNAVAILABLE;
  } else {
    code = kiln_code_for(err);
  }
  std::string message = "building " + description + " for " + device.label() + " with options '" +
                        options + "' failed: " + cl_failure("clBuildProgram", err);
  message += log.empty() ? std::string("; the device gave no build log") : "; build log:\n" + log;
  throw sdk::Error(code, message);
}

// clCreateProgramWithIL where the platform and device are OpenCL 2.1 or later (looked up in
// the loaded ICD loader: a 1.2-era loader does not export it), else clCreateProgramWithILKHR
// where the device lists cl_khr_il_program; NULL when neither exists.
CreateProgramWithIL find_create_with_il(const DeviceRecord& device) {
  CreateProgramWithIL fn = nullptr;
  if (device.platform_cl.at_least(2, 1) && device.device_cl.at_least(2, 1)) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&clGetPlatformIDs), &info) != 0 &&
        info.dli_fname != nullptr) {
      if (void* loader = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
        fn = reinterpret_cast<CreateProgramWithIL>(dlsym(loader, "clCreateProgramWithIL"));
        dlclose(loader);
      }
    }
  }
  if (fn == nullptr && device.khr_il_program) {
    fn = reinterpret_cast<CreateProgramWithIL>(
        clGetExtensionFunctionAddressForPlatform(device.platform, "clCreateProgramWithILKHR"));
  }
  return fn;
}

cl_program create_from_source(DeviceRecord& device, const void* data, size_t size,
                              const std::string& description) {
  const char* text = static_cast<const char*>(data);
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(device.context(), 1, &text, &size, &err);
  if (err != CL_SUCCESS || program == nullptr) {
    throw_cl("cannot create a program from " + description + " on " + device.label(),
             "clCreateProgramWithSource", err);
  }
  return program;
}

cl_program create_from_binary(DeviceRecord& device, const void* data, size_t size,
                              const std::string& description) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  cl_int status = CL_SUCCESS;
  cl_int err = CL_SUCCESS;
  cl_program program =
      clCreateProgramWithBinary(device.context(), 1, &device.device, &size, &bytes, &status, &err);
  if (err != CL_SUCCESS || program == nullptr) {
    if (program != nullptr) clReleaseProgram(program);
    const bool rejected = err == CL_INVALID_BINARY || err == CL_INVALID_VALUE;
    throw sdk::Error(rejected ? KILN_ERROR_VALUE : kiln_code_for(err),
                     device.label() + " rejected " + description + ": " +
                         cl_failure("clCreateProgramWithBinary", err) + ", binary status " +
                         std::to_string(status) + " (" + cl_error_name(status) + ")" +
                         (rejected ? "; a program binary only loads on the device and driver "
                                     "that produced it"
                                   : ""));
  }
  return program;
}

cl_program create_from_il(DeviceRecord& device, const void* data, size_t size,
                          const std::string& description) {
  uint32_t magic = 0;
  if (size >= 20) std::memcpy(&magic, data, sizeof(magic));
  if (size < 20 || size % 4 != 0 ||
      (magic != kSpirvMagic && magic != __builtin_bswap32(kSpirvMagic))) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     description +
                         " is not a SPIR-V module: it must be a multiple of 4 bytes, "
                         "at least 20, starting with the magic number 0x07230203");
  }
  if (device.il_version.empty()) {
    throw sdk::Error(KILN_ERROR_UNIMPLEMENTED,
                     "cannot load " + description + " on " + device.label() +
                         ": the device reports no IL version (SPIR-V needs OpenCL 2.1 or the "
                         "cl_khr_il_program extension; it is " +
                         device.version + "); load OpenCL C source (format opencl_c) instead");
  }
  CreateProgramWithIL create = find_create_with_il(device);
  if (create == nullptr) {
    throw sdk::Error(KILN_ERROR_UNIMPLEMENTED,
                     "cannot load " + description + " on " + device.label() +
                         ": neither clCreateProgramWithIL nor clCreateProgramWithILKHR is "
                         "available from the ICD loader and platform " +
                         device.platform_version);
  }
  cl_int err = CL_SUCCESS;
  cl_program program = create(device.context(), data, size, &err);
  if (err != CL_SUCCESS || program == nullptr) {
    if (program != nullptr) clReleaseProgram(program);
    throw_cl(device.label() + " rejected " + description, "clCreateProgramWithIL", err,
             err == CL_INVALID_VALUE ? KILN_ERROR_VALUE : 0);
  }
  return program;
}

// The binary of a built program, empty when the driver gives none.
std::vector<unsigned char> program_binary(cl_program program) {
  cl_uint devices = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof(devices), &devices, nullptr) !=
          CL_SUCCESS ||
      devices != 1) {
    return {};
  }
  size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) !=
          CL_SUCCESS ||
      size == 0) {
    return {};
  }
  std::vector<unsigned char> binary(size);
  unsigned char* out = binary.data();
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(out), &out, nullptr) != CL_SUCCESS) {
    return {};
  }
  return binary;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_u64(const std::string& in, size_t pos) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
  return v;
}

std::string short_hash(const std::string& hex) { return hex.substr(0, 12); }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Whether `options` hold a flag that makes the compiler read a file the source does not name
// (-include, -imacros).
bool options_read_files(const std::string& options) {
  for (size_t at = options.find("-i"); at != std::string::npos; at = options.find("-i", at + 1)) {
    if (at > 0 && options[at - 1] != ' ' && options[at - 1] != '\t') continue;
    if (options.compare(at, 8, "-include") == 0 || options.compare(at, 8, "-imacros") == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool source_reads_other_files(const void* data, size_t size, const std::string& options) {
  if (options_read_files(options)) return true;
  const std::string_view text(static_cast<const char*>(data), size);
  size_t line = 0;
  while (line < text.size()) {
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) end = text.size();
    size_t at = text.find_first_not_of(" \t", line);
    if (at < end && text[at] == '#') {
      at = text.find_first_not_of(" \t", at + 1);
      if (at < end && text.compare(at, 7, "include") == 0) return true;
    }
    line = end + 1;
  }
  return false;
}

Program::~Program() {
  if (program_ != nullptr) clReleaseProgram(program_);
}

std::string join_build_options(const std::string& from_metadata, const std::string& from_plugin) {
  if (from_metadata.empty()) return from_plugin;
  if (from_plugin.empty()) return from_metadata;
  return from_metadata + " " + from_plugin;
}

ProgramCache::ProgramCache(std::string cache_dir, int64_t memory_entries)
    : dir_(std::move(cache_dir)), capacity_(static_cast<size_t>(memory_entries)) {}

ProgramCache::~ProgramCache() { clear(); }

void ProgramCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  index_.clear();
  lru_.clear();
}

void ProgramCache::remember(const std::string& key, const std::shared_ptr<Program>& program) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) != 0) return;
  lru_.emplace_front(key, program);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<Program> ProgramCache::get(DeviceRecord& device, const std::string& format,
                                           const void* data, size_t size,
                                           const std::string& options, CacheOutcome* outcome) {
  if (format != kFormatSource && format != kFormatBinary && format != kFormatSpirv) {
    throw sdk::Error(KILN_ERROR_VALUE, "the opencl backend cannot load format '" + format +
                                           "' (it loads opencl_c, opencl_binary and spirv)");
  }
  if (data == nullptr || size == 0) {
    throw sdk::Error(KILN_ERROR_VALUE, std::string("the ") + format_title(format) + " is empty");
  }
  const std::string hash = Sha256::hex(Sha256::of(data, size));
  const std::string description = std::string(format_title(format)) + " (sha256 " +
                                  short_hash(hash) + "..., " + std::to_string(size) + " bytes)";
  const std::string key = std::to_string(device.id) + "\n" + format + "\n" + options + "\n" + hash;
  if (format == kFormatSource && source_reads_other_files(data, size, options)) {
    // The key holds the source's bytes, not those of the headers it includes, which may change
    // under the same names: such a program is built every time (the driver's own cache, which
    // preprocesses first, may still skip the compiler).
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<Program> program = build(device, format, data, size, options, description);
    sdk::log(KILN_LOG_DEBUG,
             "program cache: built %s on %s in %.1f ms, not cached: it includes other files "
             "(#include, -include), whose contents the cache key cannot see",
             description.c_str(), device.label().c_str(), ms_since(t0));
    if (outcome != nullptr) *outcome = CacheOutcome::kNotCached;
    return program;
  }
  if (capacity_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);  // now the most recently used
      sdk::log(KILN_LOG_DEBUG, "program cache: memory hit for %s on %s", description.c_str(),
               device.label().c_str());
      if (outcome != nullptr) *outcome = CacheOutcome::kMemoryHit;
      return it->second->second;
    }
  }
  // A binary is already what the disk cache would store.
  const bool use_disk = !dir_.empty() && format != kFormatBinary;
  const std::string disk_key = "kiln opencl program cache 1\n" + device.identity() +
                               "format: " + format + "\noptions: " + options + "\nsha256: " + hash +
                               "\n";
  const fs::path file =
      use_disk ? dir_ / (Sha256::hex(Sha256::of(disk_key.data(), disk_key.size())) + ".clbin")
               : fs::path();
  std::shared_ptr<Program> program;
  if (use_disk) {
    program = load_from_disk(device, file, disk_key, options, description);
    if (program && outcome != nullptr) *outcome = CacheOutcome::kDiskHit;
  }
  if (!program) {
    const auto t0 = std::chrono::steady_clock::now();
    program = build(device, format, data, size, options, description);
    sdk::log(KILN_LOG_DEBUG, "program cache: built %s on %s in %.1f ms", description.c_str(),
             device.label().c_str(), ms_since(t0));
    if (outcome != nullptr) *outcome = CacheOutcome::kBuilt;
    if (use_disk) store_on_disk(file, disk_key, *program);
  }
  remember(key, program);
  return program;
}

std::shared_ptr<Program> ProgramCache::build(DeviceRecord& device, const std::string& format,
                                             const void* data, size_t size,
                                             const std::string& options,
                                             const std::string& description) {
  cl_program program = nullptr;
  if (format == kFormatSource) {
    program = create_from_source(device, data, size, description);
  } else if (format == kFormatBinary) {
    program = create_from_binary(device, data, size, description);
  } else {
    program = create_from_il(device, data, size, description);
  }
  build_program(program, device, options, description);  // releases `program` on failure
  return std::make_shared<Program>(program, description);
}

std::shared_ptr<Program> ProgramCache::load_from_disk(DeviceRecord& device, const fs::path& file,
                                                      const std::string& key,
                                                      const std::string& options,
                                                      const std::string& description) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return nullptr;
  auto ignore = [&](const std::string& why) -> std::shared_ptr<Program> {
    sdk::log(KILN_LOG_WARN, "program cache: ignoring corrupt cache file %s (%s); rebuilding",
             file.string().c_str(), why.c_str());
    return nullptr;
  };
  const uintmax_t file_size = fs::file_size(file, ec);
  if (ec) return ignore("cannot read its size: " + ec.message());
  if (file_size > kMaxCacheFileBytes) return ignore("larger than 1 GiB");
  std::ifstream in(file, std::ios::binary);
  if (!in) return ignore("cannot open it");
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.size() != file_size) return ignore("short read");
  // magic | key length | key | payload length | payload sha256 | payload
  if (bytes.size() < sizeof(kMagic) + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return ignore("bad magic number");
  }
  size_t pos = sizeof(kMagic);
  const uint64_t key_size = get_u64(bytes, pos);
  pos += 8;
  if (key_size > bytes.size() - pos) return ignore("truncated key");
  if (bytes.compare(pos, key_size, key) != 0) return ignore("its key differs from the program's");
  pos += key_size;
  if (bytes.size() - pos < 8 + 32) return ignore("truncated header");
  const uint64_t payload_size = get_u64(bytes, pos);
  pos += 8;
  const std::string digest = bytes.substr(pos, 32);
  pos += 32;
  if (payload_size == 0 || payload_size != bytes.size() - pos) return ignore("bad payload size");
  const Sha256::Digest actual = Sha256::of(bytes.data() + pos, payload_size);
  if (std::memcmp(actual.data(), digest.data(), 32) != 0) return ignore("checksum mismatch");
  try {
    cl_program program =
        create_from_binary(device, bytes.data() + pos, payload_size, description + " from cache");
    build_program(program, device, options, description + " from cache");
    sdk::log(KILN_LOG_DEBUG, "program cache: disk hit for %s on %s: %s", description.c_str(),
             device.label().c_str(), file.string().c_str());
    return std::make_shared<Program>(program, description);
  } catch (const sdk::Error& e) {
    return ignore(std::string("the driver rejected the stored binary: ") + e.what());
  }
}

void ProgramCache::store_on_disk(const fs::path& file, const std::string& key,
                                 const Program& program) {
  const std::vector<unsigned char> binary = program_binary(program.get());
  auto warn = [&](const std::string& why) {
    // Once per cache: a read-only or full folder would otherwise warn on every load.
    if (!write_warned_.exchange(true)) {
      sdk::log(KILN_LOG_WARN,
               "program cache: cannot write %s: %s (further write failures are "
               "not reported)",
               file.string().c_str(), why.c_str());
    }
  };
  if (binary.empty()) {
    sdk::log(KILN_LOG_DEBUG, "program cache: the driver gives no binary for %s; not stored",
             program.description().c_str());
    return;
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return warn("cannot create the folder " + dir_.string() + ": " + ec.message());
  std::string header(kMagic, sizeof(kMagic));
  put_u64(header, key.size());
  header += key;
  put_u64(header, binary.size());
  const Sha256::Digest digest = Sha256::of(binary.data(), binary.size());
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  // Through the one atomic writer: readers never see a partial file, and a failed write leaves
  // no temporary file behind.
  try {
    sdk::AtomicFile out(file);
    out.write(header);
    out.write(binary.data(), binary.size());
    out.commit();
  } catch (const sdk::Error& e) {
    return warn(e.what());
  }
  sdk::log(KILN_LOG_DEBUG, "program cache: stored %s in %s", program.description().c_str(),
           file.string().c_str());
}

}  // namespace kiln::opencl
