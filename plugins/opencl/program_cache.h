// SPDX-License-Identifier: Apache-2.0
// Building OpenCL programs from the three module formats, and the program cache: built
// programs are kept in memory per (device, format, source hash, build options), and, when a
// cache folder is configured, their binaries are stored on disk so that a later plugin
// instance or process skips the compiler. The key is the code's content, never a name; OpenCL C
// that includes other files (whose bytes the key cannot see) is built every time.
#ifndef KILN_PLUGINS_OPENCL_PROGRAM_CACHE_H_
#define KILN_PLUGINS_OPENCL_PROGRAM_CACHE_H_

#include <CL/cl.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device_registry.h"

namespace kiln::opencl {

// The device code formats the backend loads.
inline constexpr const char* kFormatSource = "opencl_c";       // OpenCL C source text
inline constexpr const char* kFormatBinary = "opencl_binary";  // clCreateProgramWithBinary
inline constexpr const char* kFormatSpirv = "spirv";           // clCreateProgramWithIL

// A built program (one device). Releases it when the last holder goes.
class Program {
 public:
  // Takes over the reference `program` holds; `description` names it in messages.
  Program(cl_program program, std::string description)
      : program_(program), description_(std::move(description)) {}
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  // The program, owned by this object.
  cl_program get() const { return program_; }
  // "OpenCL C source (sha256 0123abcd..., 812 bytes)", for messages.
  const std::string& description() const { return description_; }

 private:
  cl_program program_;
  std::string description_;
};

// What the cache did for one request, for logs and tests: found it in memory, found it on
// disk, built and cached it, or built it without caching (a source that includes other files).
enum class CacheOutcome { kMemoryHit, kDiskHit, kBuilt, kNotCached };

// Owns the programs built for every device and the caches. Thread-safe: mu_ guards the
// memory cache; builds run outside it (two threads may build the same program, the first one
// remembered wins).
class ProgramCache {
 public:
  // `cache_dir`: the on-disk cache folder (created on first write), empty for none.
  // `memory_entries`: programs kept in memory, least recently used dropped first; 0: none.
  ProgramCache(std::string cache_dir, int64_t memory_entries);
  ~ProgramCache();
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // The program built from `size` bytes at `data` (borrowed) in `format` for `device` with
  // `options`: from memory, else from the disk cache, else built (and stored in both).
  // Throws kiln::sdk::Error: KILN_ERROR_VALUE for an unknown format, empty or malformed code
  // and build failures (the message carries the device's build log), KILN_ERROR_UNIMPLEMENTED
  // for SPIR-V on a device without IL support, KILN_ERROR_UNAVAILABLE when the device has no
  // compiler, KILN_ERROR_RUNTIME for other OpenCL failures. A corrupt disk cache file is
  // ignored with a warning and rewritten.
  std::shared_ptr<Program> get(DeviceRecord& device, const std::string& format, const void* data,
                               size_t size, const std::string& options,
                               CacheOutcome* outcome = nullptr);

  // Drops every program held in memory (modules keep theirs alive).
  void clear();

  // The on-disk cache folder; empty when there is none.
  const std::filesystem::path& cache_dir() const { return dir_; }

 private:
  std::shared_ptr<Program> build(DeviceRecord& device, const std::string& format, const void* data,
                                 size_t size, const std::string& options,
                                 const std::string& description);
  std::shared_ptr<Program> load_from_disk(DeviceRecord& device, const std::filesystem::path& file,
                                          const std::string& key, const std::string& options,
                                          const std::string& description);
  void store_on_disk(const std::filesystem::path& file, const std::string& key,
                     const Program& program);
  void remember(const std::string& key, const std::shared_ptr<Program>& program);

  std::filesystem::path dir_;
  size_t capacity_;
  std::mutex mu_;
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<Program>>> lru_;
  std::map<std::string, decltype(lru_)::iterator> index_;
  std::atomic<bool> write_warned_{false};
};

// Whether OpenCL C source `data` (`size` bytes, borrowed) built with `options` reads files
// besides itself: a line that is an #include directive, or an -include / -imacros option. The
// cache's key holds only the source's bytes, so such a program is never cached: a header
// rewritten under its name would otherwise keep giving the old program.
bool source_reads_other_files(const void* data, size_t size, const std::string& options);

// The build options of a module: the metadata's, then the plugin's, joined by a space.
std::string join_build_options(const std::string& from_metadata, const std::string& from_plugin);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_PROGRAM_CACHE_H_
