// SPDX-License-Identifier: Apache-2.0
// Reading ABI structs written against any 1.x minor (docs/plugin-abi.md §6): the frozen 1.0
// minimum of every struct, zero-extended copies, and arrays strided by their first element's
// struct_size. Header-only; used by the host and by plugins alike, so both sides apply the same
// rules.
//
//   if (std::string why = kiln::sdk::check_struct<KilnKernelLibrary>(table); !why.empty()) ...
//   KilnKernelLibrary lib = kiln::sdk::zero_extended<KilnKernelLibrary>(table);
//   kiln::sdk::StridedArray<KilnDeviceBlob> blobs(lib.blobs, lib.num_blobs);
//   if (std::string why = blobs.check(); !why.empty()) ...
//   for (size_t i = 0; i < blobs.size(); ++i) use(blobs[i]);
#ifndef KILN_SDK_ABI_HPP_
#define KILN_SDK_ABI_HPP_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "kiln/c/kiln.h"

namespace kiln::sdk {

// The 1.0 size of each struct that starts with struct_size: the smallest a 1.x reader accepts.
template <typename T>
inline constexpr size_t kMinSize = 0;  // only the specialisations below are defined
template <>
inline constexpr size_t kMinSize<KilnExtension> = KILN_EXTENSION_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnHostServices> = KILN_HOST_SERVICES_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnNegotiateIn> = KILN_NEGOTIATE_IN_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnPluginInfo> = KILN_PLUGIN_INFO_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnComponent> = KILN_COMPONENT_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnDeviceBackend> = KILN_DEVICE_BACKEND_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnLoader> = KILN_LOADER_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnExporter> = KILN_EXPORTER_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnMetricCollector> = KILN_METRIC_COLLECTOR_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnMetric> = KILN_METRIC_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnLoadedModule> = KILN_LOADED_MODULE_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnExportRequest> = KILN_EXPORT_REQUEST_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnKernelEnv> = KILN_KERNEL_ENV_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnKernelLibrary> = KILN_KERNEL_LIBRARY_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnDeviceBlob> = KILN_DEVICE_BLOB_SIZE_1_0;
template <>
inline constexpr size_t kMinSize<KilnArtifact> = KILN_ARTIFACT_SIZE_1_0;

// The struct_size stored at `data` (a struct that starts with it).
inline size_t struct_size_of(const void* data) {
  size_t size = 0;
  std::memcpy(&size, data, sizeof(size));
  return size;
}

// Empty when `data` points at a T whose struct_size is at least T's 1.0 size; else why not,
// e.g. "KilnKernelLibrary has struct_size 24, smaller than the 1.0 layout (64 bytes)". `type`
// names the struct in the message. `data` must not be NULL.
template <typename T>
std::string check_struct(const void* data, const char* type) {
  const size_t size = struct_size_of(data);
  if (size >= kMinSize<T>) return {};
  return std::string(type) + " has struct_size " + std::to_string(size) +
         ", smaller than the 1.0 layout (" + std::to_string(kMinSize<T>) + " bytes)";
}

// A copy of the T at `data` as this reader compiled T: the writer's struct_size bytes, cut to
// sizeof(T) when the writer's T is longer (a later minor), with every field past the writer's
// struct_size zero (an older minor: appended slots read NULL). struct_size of the copy is
// sizeof(T). The caller has checked the struct (check_struct); no byte at or past the
// writer's struct_size is read.
template <typename T>
T zero_extended(const void* data) {
  T copy;
  std::memset(static_cast<void*>(&copy), 0, sizeof(T));
  std::memcpy(static_cast<void*>(&copy), data, std::min(struct_size_of(data), sizeof(T)));
  copy.struct_size = sizeof(T);
  return copy;
}

// A read-only view of `count` T written by another party, whose stride is the first
// element's struct_size (docs/plugin-abi.md §6.5). Borrowed: it does not own the array.
template <typename T>
class StridedArray {
 public:
  // `base` may be NULL only when `count` is 0.
  StridedArray(const T* base, int32_t count) : base_(base), count_(count) {}

  // Empty when the array is well formed; else what is wrong, naming `type` and the element:
  // a negative count, a NULL base, a first struct_size below T's 1.0 size or not a multiple
  // of the pointer size, or an element whose struct_size differs from the first's.
  std::string check(const char* type) const {
    if (count_ < 0) return std::string(type) + " array has a negative count";
    if (count_ == 0) return {};
    if (base_ == nullptr) return std::string(type) + " array is NULL but has elements";
    const size_t stride = struct_size_of(base_);
    if (stride < kMinSize<T> || stride % sizeof(void*) != 0) {
      return std::string(type) + " #0 has struct_size " + std::to_string(stride) +
             (stride < kMinSize<T>
                  ? ", smaller than the 1.0 layout (" + std::to_string(kMinSize<T>) + " bytes)"
                  : ", not a multiple of " + std::to_string(sizeof(void*)));
    }
    for (int32_t i = 1; i < count_; ++i) {
      const size_t size = struct_size_of(element(i));
      if (size != stride) {
        return std::string(type) + " #" + std::to_string(i) + " has struct_size " +
               std::to_string(size) + " but #0 has " + std::to_string(stride) +
               " (elements of one array share one size)";
      }
    }
    return {};
  }

  size_t size() const { return count_ > 0 ? static_cast<size_t>(count_) : 0; }

  // Element `i` as this reader compiled T (see zero_extended). Requires check() to be empty
  // and i < size().
  T operator[](size_t i) const { return zero_extended<T>(element(i)); }

 private:
  const void* element(size_t i) const { return kiln_array_element(base_, i); }

  const T* base_;
  int32_t count_;
};

}  // namespace kiln::sdk

#endif  // KILN_SDK_ABI_HPP_
