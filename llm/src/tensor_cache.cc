// SPDX-License-Identifier: Apache-2.0
// The tensor cache (kiln/llm/tensor_cache.h): the metadata of TVM's tensor-cache writer
// (tvm/contrib/tvmjs.py, dump_tensor_cache), its shards loaded onto a device, and tensors by name.
#include "kiln/llm/tensor_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "kiln/error.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where in a cache something is, for messages: the metadata file, the shard (index and data
// path) and the record (index and name).
std::string cache_where(const fs::path& json_path) {
  return fmt::format("tensor cache {}", json_path.string());
}
std::string shard_where(const fs::path& json_path, size_t index, const std::string& data_path) {
  return data_path.empty()
             ? fmt::format("{}, shard {}", cache_where(json_path), index)
             : fmt::format("{}, shard {} '{}'", cache_where(json_path), index, data_path);
}
std::string record_where(const std::string& shard, size_t index, const std::string& name) {
  return name.empty() ? fmt::format("{}, record {}", shard, index)
                      : fmt::format("{}, record {} '{}'", shard, index, name);
}

// The member `key` of the JSON object `obj`; ValueError at `where` when it is missing.
const json& member(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) throw ValueError(fmt::format("{}: field '{}' is missing", where, key));
  return *it;
}

std::string string_member(const json& obj, const char* key, const std::string& where) {
  const json& v = member(obj, key, where);
  if (!v.is_string()) {
    throw ValueError(
        fmt::format("{}: field '{}' must be a string, not {}", where, key, v.type_name()));
  }
  return v.get<std::string>();
}

int64_t as_int64(const json& v, const std::string& what, const std::string& where) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ValueError(fmt::format("{}: {} is out of range: {}", where, what, v.dump()));
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  throw ValueError(fmt::format("{}: {} must be an integer, not {}", where, what,
                               v.is_number_float() ? v.dump() : std::string(v.type_name())));
}

// A non-negative integer member.
int64_t size_member(const json& obj, const char* key, const std::string& where) {
  const int64_t v = as_int64(member(obj, key, where), fmt::format("field '{}'", key), where);
  if (v < 0) throw ValueError(fmt::format("{}: field '{}' is negative: {}", where, key, v));
  return v;
}

const json& array_member(const json& obj, const char* key, const std::string& where) {
  const json& v = member(obj, key, where);
  if (!v.is_array()) {
    throw ValueError(
        fmt::format("{}: field '{}' must be an array, not {}", where, key, v.type_name()));
  }
  return v;
}

// A shard's data path must name a file in the cache's folder (or below it): a metadata file
// that points elsewhere is not a weight folder one can copy or trust.
void check_data_path(const std::string& data_path, const std::string& where) {
  if (data_path.empty()) throw ValueError(fmt::format("{}: field 'dataPath' is empty", where));
  const fs::path p(data_path);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) {
    throw ValueError(fmt::format(
        "{}: dataPath '{}' is absolute; shards are named relative to the metadata's folder", where,
        data_path));
  }
  for (const fs::path& part : p) {
    if (part == "..") {
      throw ValueError(
          fmt::format("{}: dataPath '{}' leaves the metadata's folder ('..')", where, data_path));
    }
  }
}

// The bytes a record of `shape` and `dtype` takes in its shard; ValueError at `where` when the
// count does not fit in an int64.
int64_t stored_nbytes(const std::vector<int64_t>& shape, int64_t element_bytes,
                      const std::string& where) {
  int64_t total = element_bytes;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(total, d, &total)) {
      throw ValueError(
          fmt::format("{}: shape [{}] has too many bytes", where, fmt::join(shape, ", ")));
    }
  }
  return total;
}

TensorRecord parse_record(const json& r, const std::string& where, int64_t shard_nbytes) {
  if (!r.is_object()) {
    throw ValueError(fmt::format("{}: must be an object, not {}", where, r.type_name()));
  }
  TensorRecord rec;
  rec.name = string_member(r, "name", where);
  if (rec.name.empty()) throw ValueError(fmt::format("{}: field 'name' is empty", where));
  for (const json& d : array_member(r, "shape", where)) {
    const int64_t dim = as_int64(d, "a dimension of 'shape'", where);
    if (dim < 0) throw ValueError(fmt::format("{}: negative dimension {} in 'shape'", where, dim));
    rec.shape.push_back(dim);
  }
  const std::string dtype = string_member(r, "dtype", where);
  try {
    rec.dtype = DataType::parse(dtype);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: dtype '{}' is not one Kiln has: {}", where, dtype, e.what()));
  }
  rec.format = string_member(r, "format", where);
  if (rec.format != "raw" && rec.format != "f32-to-bf16") {
    throw ValueError(
        fmt::format("{}: format '{}' is not 'raw' or 'f32-to-bf16'", where, rec.format));
  }
  rec.nbytes = size_member(r, "nbytes", where);
  rec.byte_offset = size_member(r, "byteOffset", where);

  const int64_t element_bytes = rec.decodes_bf16() ? 2 : static_cast<int64_t>(rec.dtype.bytes());
  const int64_t expected = stored_nbytes(rec.shape, element_bytes, where);
  if (rec.nbytes != expected) {
    throw ValueError(fmt::format("{}: nbytes is {} but shape [{}] of {}{} takes {} bytes", where,
                                 rec.nbytes, fmt::join(rec.shape, ", "), rec.dtype.str(),
                                 rec.decodes_bf16() ? " stored as bfloat16 (f32-to-bf16)" : "",
                                 expected));
  }
  if (rec.byte_offset > shard_nbytes || rec.nbytes > shard_nbytes - rec.byte_offset) {
    throw ValueError(fmt::format(
        "{}: bytes [{}, {}) lie past the end of the shard ({} bytes)", where, rec.byte_offset,
        static_cast<uint64_t>(rec.byte_offset) + rec.nbytes, shard_nbytes));
  }
  return rec;
}

// "'a', 'b', 'c' and 4 more": the records of a shard, for messages about the whole file.
std::string record_names(const ShardRecord& shard) {
  constexpr size_t kShown = 3;
  if (shard.records.empty()) return "no records";
  std::string out = "records ";
  for (size_t i = 0; i < shard.records.size() && i < kShown; ++i) {
    out += fmt::format("{}'{}'", i == 0 ? "" : ", ", shard.records[i].name);
  }
  if (shard.records.size() > kShown) {
    out += fmt::format(" and {} more", shard.records.size() - kShown);
  }
  return out;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Reads the whole of `path` into `out`, which must be sized to the file already (the caller
// checked the size); RuntimeError at `where` on any failure, including a file that changed size.
void read_exactly(const fs::path& path, char* out, size_t size, const std::string& where) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    throw RuntimeError(
        fmt::format("{}: cannot open {}: {}", where, path.string(), errno_text(errno)));
  }
  size_t done = 0;
  while (done < size) {
    const size_t got = std::fread(out + done, 1, size - done, file.get());
    if (got == 0) break;
    done += got;
  }
  if (std::ferror(file.get())) {
    throw RuntimeError(
        fmt::format("{}: cannot read {}: {}", where, path.string(), errno_text(errno)));
  }
  if (done != size || std::fgetc(file.get()) != EOF) {
    throw RuntimeError(fmt::format("{}: {} changed size while it was read ({} bytes expected)",
                                   where, path.string(), size));
  }
}

// The size of the regular file `path`; RuntimeError at `where` when it is missing or not one.
uint64_t regular_file_size(const fs::path& path, const std::string& where) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw RuntimeError(fmt::format(
        "{}: {} is missing{}", where, path.string(),
        ec && ec != std::errc::no_such_file_or_directory ? ": " + ec.message() : std::string()));
  }
  if (!fs::is_regular_file(status)) {
    throw RuntimeError(fmt::format("{}: {} is not a regular file", where, path.string()));
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec)
    throw RuntimeError(fmt::format("{}: cannot stat {}: {}", where, path.string(), ec.message()));
  return size;
}

// Reads shard `index` of `metadata` into `buffer` (resized to it), checking its size against
// the metadata before reading a byte.
void read_shard(const TensorCacheMetadata& metadata, size_t index, std::vector<char>& buffer) {
  const ShardRecord& shard = metadata.shards[index];
  const fs::path path = metadata.folder() / shard.data_path;
  const std::string where =
      fmt::format("{} (holds {})", shard_where(metadata.json_path, index, shard.data_path),
                  record_names(shard));
  const uint64_t size = regular_file_size(path, where);
  const auto want = static_cast<uint64_t>(shard.nbytes);
  if (size < want) {
    std::string first_cut;
    for (size_t j = 0; j < shard.records.size(); ++j) {
      const TensorRecord& rec = shard.records[j];
      if (static_cast<uint64_t>(rec.byte_offset) + static_cast<uint64_t>(rec.nbytes) > size) {
        first_cut =
            fmt::format("; record {} '{}' (bytes [{}, {})) is the first past its end", j, rec.name,
                        rec.byte_offset, static_cast<uint64_t>(rec.byte_offset) + rec.nbytes);
        break;
      }
    }
    throw ValueError(fmt::format(
        "{}: {} is truncated: {} bytes, the metadata says {}{} (an interrupted download? fetch "
        "it again)",
        where, path.string(), size, want, first_cut));
  }
  if (size > want) {
    throw ValueError(fmt::format(
        "{}: {} is {} bytes but the metadata says {}: not the shard this metadata describes", where,
        path.string(), size, want));
  }
  buffer.resize(static_cast<size_t>(size));
  read_exactly(path, buffer.data(), buffer.size(), where);
}

// Checks that `device` is one `context` can allocate on before any shard is read.
void check_device(const TensorCacheMetadata& metadata, Device device,
                  const DeviceContext& context) {
  if (device.id < 0) {
    throw ValueError(
        fmt::format("{}: device id {} is negative", cache_where(metadata.json_path), device.id));
  }
  Ref<DeviceBackend> backend = context.find_backend(device.type);
  if (!backend) {
    if (device.type == kDLCPU) return;  // the core's own host allocator serves it
    try {
      backend = context.backend(device.type);  // throws NotFoundError saying why
    } catch (const NotFoundError& e) {
      throw NotFoundError(fmt::format("{}: {}", cache_where(metadata.json_path), e.what()));
    }
  }
  std::string why;
  const int32_t count = backend->device_count(&why);
  if (device.id >= count) {
    throw ValueError(fmt::format("{}: there is no device {}: the {} backend has {} device(s){}",
                                 cache_where(metadata.json_path), context.device_str(device),
                                 backend->name(), count, why.empty() ? "" : " (" + why + ")"));
  }
}

// A copy of `e` (same kind) with `prefix` in front of its message.
[[noreturn]] void rethrow_with(const std::string& prefix, const Error& e) {
  throw_error(e.code(), fmt::format("{}: {}", prefix, e.what()));
}

}  // namespace

// --- TensorCacheMetadata ---------------------------------------------------------------------

TensorCacheMetadata TensorCacheMetadata::parse(std::string_view json_text,
                                               const fs::path& json_path) {
  const std::string where = cache_where(json_path);
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("{}: malformed JSON: {}", where, e.what()));
  }
  if (!root.is_object()) {
    throw ValueError(
        fmt::format("{}: the metadata must be a JSON object, not {}", where, root.type_name()));
  }
  TensorCacheMetadata out;
  out.json_path = json_path;
  // Tensor names are unique across the cache: a second record of a name would silently replace
  // the first one's tensor.
  std::unordered_map<std::string, std::string> first_of_name;
  const json& shards = array_member(root, "records", where);
  out.shards.reserve(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const json& s = shards[i];
    std::string here = shard_where(json_path, i, "");
    if (!s.is_object()) {
      throw ValueError(fmt::format("{}: must be an object, not {}", here, s.type_name()));
    }
    ShardRecord shard;
    shard.data_path = string_member(s, "dataPath", here);
    check_data_path(shard.data_path, here);
    here = shard_where(json_path, i, shard.data_path);
    shard.format = string_member(s, "format", here);
    if (shard.format != "raw-shard") {
      throw ValueError(fmt::format("{}: format '{}' is not 'raw-shard', the only one there is",
                                   here, shard.format));
    }
    shard.nbytes = size_member(s, "nbytes", here);
    const json& records = array_member(s, "records", here);
    shard.records.reserve(records.size());
    for (size_t j = 0; j < records.size(); ++j) {
      const json& r = records[j];
      const std::string name = r.is_object() && r.contains("name") && r["name"].is_string()
                                   ? r["name"].get<std::string>()
                                   : std::string();
      const std::string rec_where = record_where(here, j, name);
      TensorRecord rec = parse_record(r, rec_where, shard.nbytes);
      auto [it, inserted] = first_of_name.emplace(rec.name, rec_where);
      if (!inserted) {
        throw ValueError(fmt::format("{}: the name is taken already by {}", rec_where, it->second));
      }
      shard.records.push_back(std::move(rec));
    }
    out.shards.push_back(std::move(shard));
  }
  return out;
}

TensorCacheMetadata TensorCacheMetadata::load(const fs::path& path) {
  std::error_code ec;
  fs::path json_path = path;
  if (fs::is_directory(path, ec)) {
    json_path = path / kTensorCacheJson;
    if (!fs::exists(json_path, ec)) {
      const fs::path legacy = path / kLegacyTensorCacheJson;
      if (!fs::exists(legacy, ec)) {
        throw NotFoundError(fmt::format("tensor cache {}: the folder has neither {} nor {}",
                                        path.string(), kTensorCacheJson, kLegacyTensorCacheJson));
      }
      json_path = legacy;
    }
  } else if (!fs::exists(path, ec)) {
    throw NotFoundError(fmt::format("tensor cache {}: no such folder or file", path.string()));
  }
  const std::string where = cache_where(json_path);
  const uint64_t size = regular_file_size(json_path, where);
  std::string text(static_cast<size_t>(size), '\0');
  read_exactly(json_path, text.data(), text.size(), where);
  return parse(text, json_path);
}

size_t TensorCacheMetadata::num_tensors() const {
  size_t n = 0;
  for (const ShardRecord& shard : shards) n += shard.records.size();
  return n;
}

// --- WeightSet -------------------------------------------------------------------------------

WeightSet WeightSet::load(const fs::path& path, Device device, const DeviceContext& context) {
  return load(TensorCacheMetadata::load(path), device, context);
}

WeightSet WeightSet::load(const TensorCacheMetadata& metadata, Device device,
                          const DeviceContext& context) {
  check_device(metadata, device, context);
  WeightSet out;
  out.device_ = device;
  out.json_path_ = metadata.json_path;
  const size_t n = metadata.num_tensors();
  out.names_.reserve(n);
  out.tensors_.reserve(n);
  out.index_.reserve(n);
  std::vector<char> shard_bytes;  // one shard at a time, reused
  std::vector<uint32_t> widened;  // f32-to-bf16 records decoded to float32
  for (size_t i = 0; i < metadata.shards.size(); ++i) {
    const ShardRecord& shard = metadata.shards[i];
    read_shard(metadata, i, shard_bytes);
    for (size_t j = 0; j < shard.records.size(); ++j) {
      const TensorRecord& rec = shard.records[j];
      const char* src = shard_bytes.data() + rec.byte_offset;
      Tensor tensor;
      try {
        tensor = Tensor::empty(rec.shape, rec.dtype, device, context);
        if (rec.decodes_bf16()) {
          // bfloat16 is the upper half of a float32: widening is a shift, exact.
          const size_t count = static_cast<size_t>(rec.nbytes) / 2;
          widened.resize(count);
          for (size_t k = 0; k < count; ++k) {
            uint16_t half;
            std::memcpy(&half, src + 2 * k, sizeof(half));
            widened[k] = static_cast<uint32_t>(half) << 16;
          }
          tensor.copy_from(widened.data(), count * sizeof(uint32_t));
        } else {
          tensor.copy_from(src, static_cast<size_t>(rec.nbytes));
        }
      } catch (const Error& e) {
        rethrow_with(fmt::format("{}: loading it onto {}",
                                 record_where(shard_where(metadata.json_path, i, shard.data_path),
                                              j, rec.name),
                                 context.device_str(device)),
                     e);
      }
      out.index_.emplace(rec.name, out.tensors_.size());
      out.names_.push_back(rec.name);
      out.tensors_.push_back(std::move(tensor));
    }
  }
  return out;
}

std::optional<Tensor> WeightSet::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return tensors_[it->second];
}

Tensor WeightSet::at(const std::string& name) const {
  if (std::optional<Tensor> t = find(name)) return *t;
  throw NotFoundError(fmt::format("{}: no tensor named '{}'", cache_where(json_path_), name));
}

// --- TensorCache -----------------------------------------------------------------------------

void TensorCache::load(const fs::path& path, Device device, const DeviceContext& context) {
  // Loaded outside the lock (it takes long) and added at once: readers see the cache before or
  // after, never half of it.
  insert(WeightSet::load(path, device, context));
}

void TensorCache::insert(const WeightSet& weights) {
  std::lock_guard lock(mutex_);
  // Built aside and swapped in, so that a failure (out of memory) leaves the cache as it was.
  std::unordered_map<std::string, Tensor> next = tensors_;
  for (size_t i = 0; i < weights.size(); ++i) {
    next.insert_or_assign(weights.names()[i], weights.tensors()[i]);
  }
  tensors_.swap(next);
}

void TensorCache::update(const std::string& name, Tensor tensor, bool allow_override) {
  if (!tensor.defined()) {
    throw ValueError(fmt::format("tensor cache: no tensor given for '{}'", name));
  }
  std::lock_guard lock(mutex_);
  if (!allow_override && tensors_.count(name) != 0) {
    throw ValueError(fmt::format(
        "tensor cache: '{}' is there already (update with override=true to replace it)", name));
  }
  tensors_.insert_or_assign(name, std::move(tensor));
}

std::optional<Tensor> TensorCache::get(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

bool TensorCache::remove(const std::string& name) {
  std::lock_guard lock(mutex_);
  return tensors_.erase(name) != 0;
}

void TensorCache::clear() {
  std::unordered_map<std::string, Tensor> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(tensors_);
  }
  // `dropped` frees device memory here, outside the lock.
}

size_t TensorCache::size() const {
  std::lock_guard lock(mutex_);
  return tensors_.size();
}

std::vector<std::string> TensorCache::names() const {
  std::vector<std::string> out;
  {
    std::lock_guard lock(mutex_);
    out.reserve(tensors_.size());
    for (const auto& entry : tensors_) out.push_back(entry.first);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Tensor> TensorCache::params_by_prefix(const std::string& prefix, int64_t count) const {
  if (count < -1) {
    throw ValueError(fmt::format(
        "tensor cache: the number of parameters '{}_*' is {}; give a count >= 0, or -1 for all",
        prefix, count));
  }
  std::vector<Tensor> out;
  std::lock_guard lock(mutex_);
  for (int64_t i = 0; count == -1 || i < count; ++i) {
    const std::string name = fmt::format("{}_{}", prefix, i);
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      if (count == -1) break;
      throw NotFoundError(
          fmt::format("tensor cache: no parameter '{}' (of {} asked for; the cache holds {})", name,
                      count, tensors_.size()));
    }
    out.push_back(it->second);
  }
  return out;
}

std::vector<Tensor> TensorCache::params_by_name(const std::vector<std::string>& names) const {
  std::vector<Tensor> out;
  out.reserve(names.size());
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = tensors_.find(names[i]);
    if (it == tensors_.end()) {
      throw NotFoundError(
          fmt::format("tensor cache: no parameter '{}' (name {} of {}; the cache holds {})",
                      names[i], i, names.size(), tensors_.size()));
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace kiln::llm
