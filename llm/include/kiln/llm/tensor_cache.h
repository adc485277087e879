// SPDX-License-Identifier: Apache-2.0
// The tensor cache: a model's weights as TVM's tensor-cache writer lays them out
// (tvm.contrib.tvmjs.dump_tensor_cache; MLC-LLM ships its weights so), loaded onto a Kiln device.
//
// A weight folder holds `tensor-cache.json` (older caches: `ndarray-cache.json`) and shard files
// (`params_shard_<i>.bin`). The JSON lists the shards, each with its size and its records; a
// record names one tensor: name, shape, dtype, byte range in its shard and encoding ("raw", or
// "f32-to-bf16": a float32 tensor stored as the upper 16 bits of each element).
//
//   WeightSet weights = WeightSet::load("model/params", Device{kDLOpenCL, 0}, runtime);
//   Tensor embed = weights.at("model.embed_tokens.weight");
//
// Three layers: TensorCacheMetadata (the JSON, fully checked before any shard is read),
// WeightSet (one folder's tensors on one device, in record order) and TensorCache (tensors by
// name, what TVM's vm.builtin.tensor_cache.* builtins keep process-wide; builtin_tensor_cache()).
#ifndef KILN_LLM_TENSOR_CACHE_H_
#define KILN_LLM_TENSOR_CACHE_H_

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/device.h"
#include "kiln/device_context.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::llm {

// The metadata file names, in the order a folder is searched.
inline constexpr const char* kTensorCacheJson = "tensor-cache.json";
inline constexpr const char* kLegacyTensorCacheJson = "ndarray-cache.json";

// One tensor of a shard.
struct TensorRecord {
  std::string name;
  std::vector<int64_t> shape;
  DataType dtype;
  // "raw" (the bytes as they are) or "f32-to-bf16" (a float32 tensor stored as bfloat16: two
  // bytes per element; for any other dtype the writer stores the bytes raw under this name too).
  std::string format;
  int64_t nbytes = 0;       // bytes in the shard
  int64_t byte_offset = 0;  // where they start in the shard
  // Whether the shard holds bfloat16 bits that loading widens to float32.
  bool decodes_bf16() const { return format == "f32-to-bf16" && dtype == DataType::Float(32); }
};

// One shard file and the tensors in it.
struct ShardRecord {
  std::string data_path;  // relative to the metadata file's folder
  std::string format;     // "raw-shard", the only one there is
  int64_t nbytes = 0;     // the file's size
  std::vector<TensorRecord> records;
};

// A tensor cache's metadata, parsed and checked.
struct TensorCacheMetadata {
  std::filesystem::path json_path;  // the file it was read from
  std::vector<ShardRecord> shards;

  // Parses `json_text` (the contents of `json_path`, which only names it in errors and locates
  // the shards). Checks everything that needs no shard: the structure and field types, shard
  // format "raw-shard", a data path inside the folder, record formats "raw" / "f32-to-bf16",
  // dtypes Kiln knows, non-negative dimensions, nbytes equal to what shape and dtype take
  // (half of it for f32-to-bf16 float32), the byte range inside the shard's nbytes, tensor names
  // unique across the cache. Throws ValueError naming the file and the shard or record (index
  // and name).
  static TensorCacheMetadata parse(std::string_view json_text,
                                   const std::filesystem::path& json_path);
  // Reads and parses the metadata of `path`: a folder (its tensor-cache.json, else its
  // ndarray-cache.json) or a metadata file itself. NotFoundError naming the folder and both
  // file names when neither is there; RuntimeError when the file cannot be read; ValueError as
  // parse().
  static TensorCacheMetadata load(const std::filesystem::path& path);

  // The folder the shards' data paths are relative to.
  std::filesystem::path folder() const { return json_path.parent_path(); }
  // Number of tensors over all shards.
  size_t num_tensors() const;
};

// The tensors of one tensor cache, on one device, in record order (shard by shard). Immutable
// once loaded; copies share the tensors. Thread-safe to read.
class WeightSet {
 public:
  WeightSet() = default;

  // Loads every tensor of the cache at `path` (a folder or its metadata file, as
  // TensorCacheMetadata::load) onto `device`, allocating through `context`.
  static WeightSet load(const std::filesystem::path& path, Device device,
                        const DeviceContext& context);
  // Loads the cache `metadata` describes. Each shard file is read once, into one host buffer
  // reused from shard to shard, and its tensors are uploaded from it. All or nothing: on any
  // error the tensors allocated so far are released and nothing is returned. Errors:
  // NotFoundError for a device type no backend serves; ValueError for a negative or
  // out-of-range device id; RuntimeError naming the shard file and its records when it is
  // missing, not a regular file, or cannot be read; ValueError naming them when its size is not
  // the metadata's nbytes (a truncated or interrupted download: the message names the first
  // record that lies past the file's end); the backend's error when allocation or upload fails.
  static WeightSet load(const TensorCacheMetadata& metadata, Device device,
                        const DeviceContext& context);

  Device device() const { return device_; }
  const std::filesystem::path& json_path() const { return json_path_; }
  size_t size() const { return tensors_.size(); }
  // Names and tensors in record order (index i of one is index i of the other).
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The tensor named `name`, or nullopt.
  std::optional<Tensor> find(const std::string& name) const;
  // The tensor named `name`; NotFoundError naming it and the cache file.
  Tensor at(const std::string& name) const;

 private:
  Device device_;
  std::filesystem::path json_path_;
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Tensors by name: what TVM's vm.builtin.tensor_cache.* builtins keep, and where
// vm.builtin.param_array_from_cache* take a model's parameters from. Holds its tensors (shared
// with whoever else holds them). Every member is thread-safe; each is atomic (a failed call
// changes nothing).
class TensorCache {
 public:
  TensorCache() = default;
  TensorCache(const TensorCache&) = delete;
  TensorCache& operator=(const TensorCache&) = delete;

  // Loads the cache at `path` onto `device` (WeightSet::load, with its errors) and then adds
  // every tensor, replacing those of the same names. On an error the cache is as it was.
  void load(const std::filesystem::path& path, Device device, const DeviceContext& context);
  // Adds every tensor of `weights`, replacing those of the same names.
  void insert(const WeightSet& weights);
  // Sets `name` to `tensor` (held, not copied). ValueError naming it when it is there already
  // and !allow_override; ValueError for an undefined tensor.
  void update(const std::string& name, Tensor tensor, bool allow_override);
  // The tensor named `name`, or nullopt.
  std::optional<Tensor> get(const std::string& name) const;
  // Drops `name`; whether it was there.
  bool remove(const std::string& name);
  // Drops every tensor.
  void clear();
  size_t size() const;
  // Every name, sorted.
  std::vector<std::string> names() const;

  // vm.builtin.param_array_from_cache: `prefix`_0, `prefix`_1, ... For count >= 0 exactly
  // `count` of them (NotFoundError naming the first missing); for count == -1 up to the first
  // missing one. ValueError for count < -1.
  std::vector<Tensor> params_by_prefix(const std::string& prefix, int64_t count) const;
  // vm.builtin.param_array_from_cache_by_name: the tensors named `names`, in that order;
  // NotFoundError naming the first missing one.
  std::vector<Tensor> params_by_name(const std::vector<std::string>& names) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Tensor> tensors_;
};

// The process-wide cache TVM's builtins (vm.builtin.tensor_cache.*,
// vm.builtin.param_array_from_cache*) read and write: what an engine that loaded weights
// through the builtins finds them in. Never destroyed (tensors on a plugin's device must not be
// freed after the plugin is unloaded at exit).
TensorCache& builtin_tensor_cache();

}  // namespace kiln::llm

#endif  // KILN_LLM_TENSOR_CACHE_H_
