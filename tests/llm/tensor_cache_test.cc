// SPDX-License-Identifier: Apache-2.0
// The tensor cache (llm/include/kiln/llm/tensor_cache.h) and its builtins without TVM: caches
// written here by hand in TVM's layout (tvm/contrib/tvmjs.py dump_tensor_cache), loaded onto the
// CPU and onto OpenCL (PoCL) when there is a device; every bad input is an error naming the file
// and the record, and leaves a cache as it was. tests/python/test_llm_tensor_cache.py compares
// with TVM's own writer and loader.
#include "kiln/llm/tensor_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/llm/builtins.h"
#include "kiln/runtime.h"
#include "kiln/temp_dir.h"
#include "kiln/vm/virtual_machine.h"
#include "pocl_env.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
// Device type codes as the builtins take them (TVM passes plain integers).
constexpr int64_t kCpu = kDLCPU;
constexpr int64_t kOpencl = kDLOpenCL;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The bytes of `values`, as a shard stores them.
template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// One tensor to write: its record fields and the bytes stored for it.
struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  std::string bytes;
  std::string format = "raw";
};

// Writes a cache in TVM's layout to `dir`: one shard file per element of `shards`
// (params_shard_<i>.bin, records back to back) and the metadata as `json_name`. Returns the
// metadata, for tests that change it and write it again (write_json).
json write_cache(const fs::path& dir, const std::vector<std::vector<Entry>>& shards,
                 const std::string& json_name = kTensorCacheJson) {
  json records = json::array();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string data;
    json recs = json::array();
    for (const Entry& e : shards[i]) {
      recs.push_back({{"name", e.name},
                      {"shape", e.shape},
                      {"dtype", e.dtype},
                      {"format", e.format},
                      {"nbytes", e.bytes.size()},
                      {"byteOffset", data.size()}});
      data += e.bytes;
    }
    const std::string data_path = "params_shard_" + std::to_string(i) + ".bin";
    std::ofstream(dir / data_path, std::ios::binary) << data;
    records.push_back({{"dataPath", data_path},
                       {"format", "raw-shard"},
                       {"nbytes", data.size()},
                       {"records", recs},
                       {"md5sum", "not checked"}});
  }
  json meta = {{"metadata", {{"ParamSize", 0}}}, {"records", records}};
  std::ofstream(dir / json_name) << meta.dump(2);
  return meta;
}

void write_json(const fs::path& dir, const json& meta, const std::string& name = kTensorCacheJson) {
  std::ofstream(dir / name) << meta.dump(2);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The host bytes of `t`.
std::string host_bytes(const Tensor& t) {
  std::string out(t.nbytes(), '\0');
  t.copy_to(out.data(), out.size());
  return out;
}

// A small cache of two shards: float32, float16 and int8 in shard 0; uint32, a scalar and an
// empty tensor in shard 1.
std::vector<std::vector<Entry>> sample_shards() {
  return {
      {{"w.f32", {2, 3}, "float32", bytes_of(std::vector<float>{1, 2, 3, -4, 5.5f, 6})},
       {"w.f16", {4}, "float16", bytes_of(std::vector<uint16_t>{0x3c00, 0x4000, 0xc200, 0x7bff})},
       {"w.i8", {3}, "int8", bytes_of(std::vector<int8_t>{-128, 0, 127})}},
      {{"w.u32",
        {2, 2},
        "uint32",
        bytes_of(std::vector<uint32_t>{0xdeadbeefu, 1u, 0xffffffffu, 42u})},
       {"w.scalar", {}, "int64", bytes_of(std::vector<int64_t>{-7})},
       {"w.empty", {0, 5}, "float32", ""}},
  };
}

class TensorCacheTest : public ::testing::Test {
 protected:
  TemporaryDirectory tmp_{"kiln_tensor_cache_"};
  fs::path dir(const std::string& name) {
    fs::path p = tmp_.path() / name;
    fs::create_directories(p);
    return p;
  }
  Runtime& runtime() { return Runtime::global(); }
};

TEST_F(TensorCacheTest, LoadsEveryRecordInRecordOrderWithItsBytes) {
  const fs::path d = dir("sample");
  const auto shards = sample_shards();
  write_cache(d, shards);
  WeightSet w = WeightSet::load(d, Device::cpu(), runtime());
  EXPECT_EQ(w.json_path(), d / kTensorCacheJson);
  EXPECT_EQ(w.device(), Device::cpu());
  ASSERT_EQ(w.size(), 6u);
  EXPECT_THAT(w.names(),
              ::testing::ElementsAre("w.f32", "w.f16", "w.i8", "w.u32", "w.scalar", "w.empty"));
  size_t i = 0;
  for (const auto& shard : shards) {
    for (const Entry& e : shard) {
      const Tensor& t = w.tensors()[i++];
      EXPECT_EQ(t.dtype(), DataType::parse(e.dtype)) << e.name;
      EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), e.shape) << e.name;
      EXPECT_EQ(host_bytes(t), e.bytes) << e.name;
      EXPECT_EQ(w.at(e.name).get(), t.get()) << e.name;
    }
  }
  EXPECT_FALSE(w.find("nope").has_value());
  EXPECT_THROW(
      {
        try {
          w.at("nope");
        } catch (const NotFoundError& e) {
          EXPECT_THAT(e.what(), AllOf(HasSubstr("nope"), HasSubstr("tensor-cache.json")));
          throw;
        }
      },
      NotFoundError);
}

TEST_F(TensorCacheTest, DecodesF32ToBf16RecordsExactly) {
  const fs::path d = dir("bf16");
  // Upper halves of float32 values: ordinary, negative, zero, -0, infinities, NaN, a subnormal.
  const std::vector<uint16_t> halves = {0x3f80, 0xc040, 0x0000, 0x8000, 0x7f80,
                                        0xff80, 0x7fc1, 0x0001, 0x4049, 0x7f7f};
  // The writer keeps the record's format for non-float32 tensors but stores their bytes raw.
  const std::vector<uint16_t> f16 = {0x3c00, 0xbc00};
  write_cache(d,
              {{{"w.bf16", {2, 5}, "float32", bytes_of(halves), "f32-to-bf16"},
                {"w.f16", {2}, "float16", bytes_of(f16), "f32-to-bf16"},
                {"w.b16raw", {2}, "bfloat16", bytes_of(std::vector<uint16_t>{0x3f80, 0x4000})}}});
  WeightSet w = WeightSet::load(d, Device::cpu(), runtime());
  Tensor t = w.at("w.bf16");
  EXPECT_EQ(t.dtype(), DataType::Float(32));
  std::vector<uint32_t> got(10);
  t.copy_to(got.data(), got.size() * 4);
  for (size_t k = 0; k < halves.size(); ++k) {
    EXPECT_EQ(got[k], static_cast<uint32_t>(halves[k]) << 16) << k;
  }
  std::vector<float> as_float(10);
  std::memcpy(as_float.data(), got.data(), 40);
  EXPECT_EQ(as_float[0], 1.0f);
  EXPECT_EQ(as_float[1], -3.0f);
  EXPECT_TRUE(std::isinf(as_float[4]));
  EXPECT_TRUE(std::isnan(as_float[6]));
  EXPECT_EQ(host_bytes(w.at("w.f16")), bytes_of(f16));
  EXPECT_EQ(w.at("w.b16raw").dtype(), DataType::BFloat16());
  EXPECT_EQ(host_bytes(w.at("w.b16raw")), bytes_of(std::vector<uint16_t>{0x3f80, 0x4000}));
}

TEST_F(TensorCacheTest, ReadsTheOlderNdarrayCacheJsonAndPrefersTensorCacheJson) {
  const fs::path d = dir("legacy");
  write_cache(d, {{{"old", {1}, "float32", bytes_of(std::vector<float>{7})}}},
              kLegacyTensorCacheJson);
  WeightSet w = WeightSet::load(d, Device::cpu(), runtime());
  EXPECT_EQ(w.json_path(), d / kLegacyTensorCacheJson);
  EXPECT_EQ(host_bytes(w.at("old")), bytes_of(std::vector<float>{7}));

  // With both, tensor-cache.json is the one (as TVM reads only it); a metadata file can also
  // be named directly.
  write_cache(d, {{{"new", {1}, "float32", bytes_of(std::vector<float>{8})}}});
  EXPECT_THAT(WeightSet::load(d, Device::cpu(), runtime()).names(), ::testing::ElementsAre("new"));
  EXPECT_THAT(WeightSet::load(d / kLegacyTensorCacheJson, Device::cpu(), runtime()).names(),
              ::testing::ElementsAre("old"));
}

TEST_F(TensorCacheTest, AFolderWithoutMetadataIsNotFound) {
  const fs::path d = dir("empty");
  try {
    TensorCacheMetadata::load(d);
    FAIL() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(d.string()), HasSubstr("tensor-cache.json"),
                                HasSubstr("ndarray-cache.json")));
  }
  EXPECT_THROW(TensorCacheMetadata::load(d / "missing"), NotFoundError);
}

// Two folders whose shard files have the same names but different contents: each load reads
// its own folder's bytes, and in one TensorCache the later load's tensors replace the earlier
// one's of the same names while the other names stay.
TEST_F(TensorCacheTest, TwoFoldersWithTheSameFileNamesKeepTheirOwnContents) {
  const fs::path a = dir("a");
  const fs::path b = dir("b");
  write_cache(a, {{{"shared", {2}, "float32", bytes_of(std::vector<float>{1, 2})},
                   {"a_only", {1}, "int32", bytes_of(std::vector<int32_t>{11})}}});
  write_cache(b, {{{"shared", {2}, "float32", bytes_of(std::vector<float>{3, 4})},
                   {"b_only", {1}, "int32", bytes_of(std::vector<int32_t>{22})}}});
  WeightSet wa = WeightSet::load(a, Device::cpu(), runtime());
  WeightSet wb = WeightSet::load(b, Device::cpu(), runtime());
  EXPECT_EQ(host_bytes(wa.at("shared")), bytes_of(std::vector<float>{1, 2}));
  EXPECT_EQ(host_bytes(wb.at("shared")), bytes_of(std::vector<float>{3, 4}));

  TensorCache cache;
  cache.load(a, Device::cpu(), runtime());
  cache.load(b, Device::cpu(), runtime());
  EXPECT_THAT(cache.names(), ::testing::ElementsAre("a_only", "b_only", "shared"));
  EXPECT_EQ(host_bytes(*cache.get("shared")), bytes_of(std::vector<float>{3, 4}));
  EXPECT_EQ(host_bytes(*cache.get("a_only")), bytes_of(std::vector<int32_t>{11}));
  EXPECT_EQ(host_bytes(*cache.get("b_only")), bytes_of(std::vector<int32_t>{22}));
  // And loading a again brings its contents back.
  cache.load(a, Device::cpu(), runtime());
  EXPECT_EQ(host_bytes(*cache.get("shared")), bytes_of(std::vector<float>{1, 2}));
}

// --- bad input --------------------------------------------------------------------------------

// A cache folder whose load must fail: `mutate` breaks it after a good cache is written; the
// error must be of type E and name `what` (all of it); a TensorCache that held a tensor before
// holds exactly that afterwards.
class BadCacheTest : public TensorCacheTest {
 protected:
  template <typename E>
  void expect_refused(const fs::path& d, const std::vector<std::string>& what) {
    TensorCache cache;
    Tensor before = Tensor::empty_host({1}, DataType::Float(32));
    float one = 1.0f;
    before.copy_from(&one, 4);
    cache.update("w.f32", before, false);  // a name the failed load would have replaced
    try {
      cache.load(d, Device::cpu(), runtime());
      FAIL() << "no error for " << d;
    } catch (const E& e) {
      for (const std::string& s : what) EXPECT_THAT(e.what(), HasSubstr(s));
    } catch (const Error& e) {
      FAIL() << "wrong error type: " << e.what();
    }
    EXPECT_THAT(cache.names(), ::testing::ElementsAre("w.f32"));
    EXPECT_EQ(cache.get("w.f32")->get(), before.get());
  }
  fs::path good(const std::string& name) {
    fs::path d = dir(name);
    meta_ = write_cache(d, sample_shards());
    return d;
  }
  json meta_;
};

TEST_F(BadCacheTest, MissingShard) {
  const fs::path d = good("missing_shard");
  fs::remove(d / "params_shard_1.bin");
  // The first shard loads fine; the second is missing: nothing of either is added.
  expect_refused<RuntimeError>(
      d, {"tensor-cache.json", "params_shard_1.bin", "is missing", "'w.u32'", "'w.scalar'"});
}

TEST_F(BadCacheTest, TruncatedShardNamesTheFirstRecordPastItsEnd) {
  const fs::path d = good("truncated");
  fs::resize_file(d / "params_shard_0.bin", 26);  // w.f32 (24 bytes) fits, w.f16 does not
  expect_refused<ValueError>(d, {"tensor-cache.json", "params_shard_0.bin", "truncated", "26 bytes",
                                 "the metadata says 35", "record 1 'w.f16'"});
}

TEST_F(BadCacheTest, ShardLargerThanTheMetadataSays) {
  const fs::path d = good("larger");
  std::ofstream(d / "params_shard_1.bin", std::ios::binary | std::ios::app) << "xx";
  expect_refused<ValueError>(d, {"params_shard_1.bin", "not the shard this metadata describes"});
}

TEST_F(BadCacheTest, ShardThatIsAFolder) {
  const fs::path d = good("folder_shard");
  fs::remove(d / "params_shard_0.bin");
  fs::create_directory(d / "params_shard_0.bin");
  expect_refused<RuntimeError>(d, {"params_shard_0.bin", "not a regular file"});
}

TEST_F(BadCacheTest, NbytesThatIsNotShapeTimesDtype) {
  const fs::path d = good("nbytes");
  meta_["records"][0]["records"][2]["nbytes"] = 4;  // w.i8 is 3 bytes
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"tensor-cache.json", "params_shard_0.bin", "record 2 'w.i8'",
                                 "nbytes is 4", "takes 3 bytes"});
}

TEST_F(BadCacheTest, Bf16RecordWithFloat32Nbytes) {
  const fs::path d = good("bf16_nbytes");
  meta_["records"][0]["records"][0]["format"] = "f32-to-bf16";  // 24 bytes; 12 when encoded
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"'w.f32'", "nbytes is 24", "f32-to-bf16", "takes 12 bytes"});
}

TEST_F(BadCacheTest, ByteOffsetPastTheShard) {
  const fs::path d = good("offset");
  meta_["records"][1]["records"][0]["byteOffset"] = 40;  // shard 1 is 24 bytes
  write_json(d, meta_);
  expect_refused<ValueError>(
      d, {"params_shard_1.bin", "record 0 'w.u32'", "[40, 56)", "past the end of the shard"});
  meta_["records"][1]["records"][0]["byteOffset"] = std::numeric_limits<int64_t>::max();
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"'w.u32'", "past the end of the shard"});
}

TEST_F(BadCacheTest, DtypesKilnDoesNotHave) {
  for (const char* dtype : {"float8_e4m3fn", "complex64", "floaty", "", "int4"}) {
    const fs::path d = good(std::string("dtype_") + (*dtype ? dtype : "empty"));
    meta_["records"][0]["records"][1]["dtype"] = dtype;
    write_json(d, meta_);
    expect_refused<ValueError>(d, {"record 1 'w.f16'", "dtype '" + std::string(dtype) + "'"});
  }
  const fs::path d = good("dtype_number");
  meta_["records"][0]["records"][1]["dtype"] = 2;
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"'w.f16'", "'dtype' must be a string"});
}

TEST_F(BadCacheTest, UnknownFormats) {
  const fs::path d = good("format");
  meta_["records"][0]["records"][0]["format"] = "q4f16";
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"'w.f32'", "format 'q4f16'"});
  meta_ = write_cache(d, sample_shards());
  meta_["records"][1]["format"] = "gzip-shard";
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"shard 1 'params_shard_1.bin'", "'gzip-shard'"});
}

TEST_F(BadCacheTest, RecordsNamingNoShard) {
  const fs::path d = good("no_shard");
  meta_["records"][1].erase("dataPath");
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"tensor-cache.json", "shard 1", "'dataPath' is missing"});
  for (const char* path : {"", "/etc/passwd", "../a/params_shard_0.bin", "x/../../y.bin"}) {
    meta_["records"][1]["dataPath"] = path;
    write_json(d, meta_);
    expect_refused<ValueError>(d, {"tensor-cache.json", "shard 1", "dataPath"});
  }
  meta_["records"][1]["dataPath"] = "params_shard_7.bin";
  write_json(d, meta_);
  expect_refused<RuntimeError>(d, {"shard 1 'params_shard_7.bin'", "is missing", "'w.u32'"});
}

TEST_F(BadCacheTest, MalformedJson) {
  const fs::path d = good("malformed");
  write_text(d / kTensorCacheJson, "{\"records\": [");
  expect_refused<ValueError>(d, {"tensor-cache.json", "malformed JSON"});
  write_text(d / kTensorCacheJson, "[]");
  expect_refused<ValueError>(d, {"tensor-cache.json", "must be a JSON object"});
  write_text(d / kTensorCacheJson, "{}");
  expect_refused<ValueError>(d, {"'records' is missing"});
  write_text(d / kTensorCacheJson, "{\"records\": {}}");
  expect_refused<ValueError>(d, {"'records' must be an array"});
  write_text(d / kTensorCacheJson, "{\"records\": [3]}");
  expect_refused<ValueError>(d, {"shard 0", "must be an object"});
  write_text(d / kTensorCacheJson, "");
  expect_refused<ValueError>(d, {"malformed JSON"});
  // Deep nesting is an error, not a stack overflow.
  write_text(d / kTensorCacheJson, "{\"records\": " + std::string(200000, '[') + "]}");
  expect_refused<ValueError>(d, {"malformed JSON"});
  write_text(d / kTensorCacheJson,
             "{\"records\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_refused<ValueError>(d, {"shard 0", "must be an object"});
}

TEST_F(BadCacheTest, FieldsOfTheWrongKind) {
  struct Case {
    const char* field;
    json value;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"shape", "2,3", "'shape' must be an array"},
      {"shape", json::array({2, -3}), "negative dimension -3"},
      {"shape", json::array({2, 1.5}), "must be an integer"},
      {"nbytes", 24.0, "'nbytes' must be an integer"},
      {"nbytes", -24, "'nbytes' is negative"},
      {"nbytes", 18446744073709551615ull, "out of range"},
      {"byteOffset", "0", "'byteOffset' must be an integer"},
      {"name", json(), "'name' must be a string"},
      {"name", "", "'name' is empty"},
      {"shape", json::array({1LL << 40, 1LL << 40}), "too many bytes"},
  };
  for (const Case& c : cases) {
    const fs::path d = good("kind");
    meta_["records"][0]["records"][0][c.field] = c.value;
    write_json(d, meta_);
    SCOPED_TRACE(c.says);
    expect_refused<ValueError>(
        d, {"tensor-cache.json", "shard 0 'params_shard_0.bin'", "record 0", c.says});
  }
  const fs::path d = good("missing_field");
  meta_["records"][0]["records"][0].erase("byteOffset");
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"record 0 'w.f32'", "'byteOffset' is missing"});
}

TEST_F(BadCacheTest, DuplicateNames) {
  const fs::path d = good("duplicate");
  meta_["records"][1]["records"][1]["name"] = "w.f16";
  write_json(d, meta_);
  expect_refused<ValueError>(d, {"shard 1 'params_shard_1.bin', record 1 'w.f16'", "taken already",
                                 "shard 0 'params_shard_0.bin', record 1 'w.f16'"});
}

TEST_F(BadCacheTest, DevicesThatAreNotThere) {
  const fs::path d = good("device");
  TensorCache cache;
  EXPECT_THROW(cache.load(d, Device{kDLExtDev, 0}, runtime()), NotFoundError);
  EXPECT_THROW(cache.load(d, Device{kDLCPU, -1}, runtime()), ValueError);
  if (runtime().find_backend(kDLCPU)) {
    EXPECT_THROW(cache.load(d, Device{kDLCPU, 1000}, runtime()), ValueError);
  }
  EXPECT_EQ(cache.size(), 0u);
}

// --- TensorCache ------------------------------------------------------------------------------

Tensor host_f32(std::vector<float> values) {
  Tensor t = Tensor::empty_host({static_cast<int64_t>(values.size())}, DataType::Float(32));
  t.copy_from(values.data(), values.size() * sizeof(float));
  return t;
}

TEST(TensorCache, UpdateGetRemoveClear) {
  TensorCache cache;
  Tensor a = host_f32({1});
  Tensor b = host_f32({2});
  cache.update("p", a, false);
  EXPECT_EQ(cache.get("p")->get(), a.get());
  try {
    cache.update("p", b, false);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'p'"), HasSubstr("override")));
  }
  EXPECT_EQ(cache.get("p")->get(), a.get());
  cache.update("p", b, true);
  EXPECT_EQ(cache.get("p")->get(), b.get());
  EXPECT_THROW(cache.update("q", Tensor(), true), ValueError);
  EXPECT_TRUE(cache.remove("p"));
  EXPECT_FALSE(cache.remove("p"));
  EXPECT_FALSE(cache.get("p").has_value());
  cache.update("x", a, false);
  cache.update("y", b, false);
  EXPECT_EQ(cache.size(), 2u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(TensorCache, ParamsByPrefixAndByName) {
  TensorCache cache;
  std::vector<Tensor> p = {host_f32({0}), host_f32({1}), host_f32({2})};
  for (size_t i = 0; i < p.size(); ++i) cache.update("param_" + std::to_string(i), p[i], false);
  cache.update("param_4", host_f32({4}), false);  // after a gap: -1 stops before it

  std::vector<Tensor> got = cache.params_by_prefix("param", 3);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i].get(), p[i].get());
  EXPECT_EQ(cache.params_by_prefix("param", -1).size(), 3u);
  EXPECT_EQ(cache.params_by_prefix("param", 0).size(), 0u);
  EXPECT_EQ(cache.params_by_prefix("other", -1).size(), 0u);
  try {
    cache.params_by_prefix("param", 5);
    FAIL() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'param_3'"));
  }
  EXPECT_THROW(cache.params_by_prefix("param", -2), ValueError);

  got = cache.params_by_name({"param_2", "param_0", "param_2"});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].get(), p[2].get());
  EXPECT_EQ(got[1].get(), p[0].get());
  EXPECT_EQ(got[2].get(), p[2].get());
  EXPECT_TRUE(cache.params_by_name({}).empty());
  try {
    cache.params_by_name({"param_0", "nope"});
    FAIL() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'nope'"));
  }
}

// --- the builtins ---------------------------------------------------------------------------

std::vector<Tensor> tensors_of(const Any& array) {
  Ref<vm::ArrayObj> a = array.as_object<vm::ArrayObj>();
  EXPECT_TRUE(a) << "not an array: " << array.type_name();
  std::vector<Tensor> out;
  if (a) {
    for (const Any& item : a->items) out.push_back(item.cast<Tensor>());
  }
  return out;
}

class TensorCacheBuiltins : public TensorCacheTest {
 protected:
  void SetUp() override {
    register_builtins(runtime());
    fn("vm.builtin.tensor_cache.clear")();
  }
  void TearDown() override { fn("vm.builtin.tensor_cache.clear")(); }
  static Function fn(const std::string& name) { return registry::require(name); }
};

TEST_F(TensorCacheBuiltins, AreListed) {
  const std::vector<std::string> names = builtin_names();
  for (const char* name : {"vm.builtin.tensor_cache.load", "vm.builtin.tensor_cache.get",
                           "vm.builtin.tensor_cache.update", "vm.builtin.tensor_cache.remove",
                           "vm.builtin.tensor_cache.clear", "vm.builtin.param_array_from_cache",
                           "vm.builtin.param_array_from_cache_by_name",
                           "vm.builtin.param_array_from_cache_by_name_unpacked"}) {
    EXPECT_THAT(names, ::testing::Contains(std::string(name)));
  }
}

TEST_F(TensorCacheBuiltins, LoadGetAndParamArrays) {
  const fs::path d = dir("builtins");
  write_cache(d, {{{"param_0", {2}, "float32", bytes_of(std::vector<float>{1, 2})},
                   {"param_1", {1}, "int32", bytes_of(std::vector<int32_t>{5})},
                   {"embed",
                    {2},
                    "float32",
                    bytes_of(std::vector<uint16_t>{0x3f80, 0x4040}),
                    "f32-to-bf16"}}});
  EXPECT_TRUE(fn("vm.builtin.tensor_cache.load")(d.string(), kCpu, 0).is_none());
  EXPECT_EQ(builtin_tensor_cache().size(), 3u);
  Any embed = fn("vm.builtin.tensor_cache.get")("embed");
  EXPECT_EQ(host_bytes(embed.cast<Tensor>()), bytes_of(std::vector<float>{1, 3}));
  EXPECT_TRUE(fn("vm.builtin.tensor_cache.get")("nope").is_none());

  std::vector<Tensor> params = tensors_of(fn("vm.builtin.param_array_from_cache")("param", -1));
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(host_bytes(params[1]), bytes_of(std::vector<int32_t>{5}));
  EXPECT_EQ(tensors_of(fn("vm.builtin.param_array_from_cache")("param", 2)).size(), 2u);

  std::vector<Tensor> by_name = tensors_of(fn("vm.builtin.param_array_from_cache_by_name")(
      vm::make_array({Any("embed"), Any("param_0")})));
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_EQ(by_name[0].get(), embed.cast<Tensor>().get());
  std::vector<Tensor> unpacked =
      tensors_of(fn("vm.builtin.param_array_from_cache_by_name_unpacked")("param_1", "embed"));
  ASSERT_EQ(unpacked.size(), 2u);
  EXPECT_EQ(unpacked[1].get(), embed.cast<Tensor>().get());

  fn("vm.builtin.tensor_cache.remove")("embed");
  EXPECT_TRUE(fn("vm.builtin.tensor_cache.get")("embed").is_none());
  fn("vm.builtin.tensor_cache.clear")();
  EXPECT_EQ(builtin_tensor_cache().size(), 0u);
}

TEST_F(TensorCacheBuiltins, UpdateHoldsTensorsAndCopiesViews) {
  Tensor a = host_f32({1, 2});
  fn("vm.builtin.tensor_cache.update")("a", a);
  EXPECT_EQ(fn("vm.builtin.tensor_cache.get")("a").cast<Tensor>().get(), a.get());
  try {
    fn("vm.builtin.tensor_cache.update")("a", host_f32({3}));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("vm.builtin.tensor_cache.update"), HasSubstr("'a'")));
  }
  fn("vm.builtin.tensor_cache.update")("a", host_f32({3}), true);
  EXPECT_EQ(host_bytes(fn("vm.builtin.tensor_cache.get")("a").cast<Tensor>()),
            bytes_of(std::vector<float>{3}));
  fn("vm.builtin.tensor_cache.update")("a", host_f32({4}), int64_t{1});

  // A view of memory the caller owns is copied: the cache must not point into it afterwards.
  std::vector<float> caller = {9, 8};
  int64_t shape[1] = {2};
  DLTensor dl{};
  dl.data = caller.data();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = DataType::Float(32);
  dl.shape = shape;
  fn("vm.builtin.tensor_cache.update")("view", Tensor::view(&dl));
  caller = {0, 0};
  EXPECT_EQ(host_bytes(fn("vm.builtin.tensor_cache.get")("view").cast<Tensor>()),
            bytes_of(std::vector<float>{9, 8}));
}

TEST_F(TensorCacheBuiltins, BadArgumentsNameTheBuiltin) {
  auto expect_error = [](auto call, const std::string& builtin, const std::string& says) {
    try {
      call();
      FAIL() << "no error from " << builtin;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr(builtin), HasSubstr(says)));
    }
  };
  const std::string load = "vm.builtin.tensor_cache.load";
  expect_error([&] { fn(load)((tmp_.path() / "none").string(), kCpu, 0); }, load, "no such folder");
  expect_error([&] { fn(load)(tmp_.path().string(), kCpu, 0); }, load, "tensor-cache.json");
  expect_error([&] { fn(load)(tmp_.path().string(), int64_t{1} << 40, 0); }, load, "out of range");
  expect_error([&] { fn(load)(tmp_.path().string(), kCpu); }, load, "arguments");
  const std::string update = "vm.builtin.tensor_cache.update";
  expect_error([&] { fn(update)("x"); }, update, "takes 2 to 3 arguments");
  expect_error([&] { fn(update)("x", 3); }, update, "must be a tensor");
  expect_error([&] { fn(update)(1, host_f32({1})); }, update, "must be a string");
  expect_error([&] { fn(update)("x", host_f32({1}), "yes"); }, update, "must be a bool");
  const std::string by_name = "vm.builtin.param_array_from_cache_by_name";
  expect_error([&] { fn(by_name)("a"); }, by_name, "must be an array of strings");
  expect_error(
      [&] {
        fn(by_name)(vm::make_array({Any("a"), Any(3)}));
      },
      by_name, "names[1] must be a string");
  expect_error([&] { fn(by_name)(vm::make_array({Any("missing")})); }, by_name, "'missing'");
  const std::string unpacked = "vm.builtin.param_array_from_cache_by_name_unpacked";
  expect_error([&] { fn(unpacked)("a", 2); }, unpacked, "argument 1");
  const std::string by_prefix = "vm.builtin.param_array_from_cache";
  expect_error([&] { fn(by_prefix)("p", 1); }, by_prefix, "'p_0'");
  expect_error([&] { fn(by_prefix)("p", -3); }, by_prefix, "-3");
}

TEST_F(TensorCacheBuiltins, AFailedLoadLeavesTheCacheAsItWas) {
  const fs::path good_dir = dir("good");
  write_cache(good_dir, {{{"w", {1}, "float32", bytes_of(std::vector<float>{1})}}});
  fn("vm.builtin.tensor_cache.load")(good_dir.string(), kCpu, 0);
  const fs::path bad = dir("bad");
  write_cache(bad, {{{"w", {1}, "float32", bytes_of(std::vector<float>{2})}},
                    {{"v", {1}, "float32", bytes_of(std::vector<float>{3})}}});
  fs::resize_file(bad / "params_shard_1.bin", 2);
  EXPECT_THROW(fn("vm.builtin.tensor_cache.load")(bad.string(), kCpu, 0), ValueError);
  EXPECT_EQ(builtin_tensor_cache().names(), std::vector<std::string>{"w"});
  EXPECT_EQ(host_bytes(builtin_tensor_cache().get("w").value()), bytes_of(std::vector<float>{1}));
}

// --- OpenCL -----------------------------------------------------------------------------------

TEST_F(TensorCacheTest, LoadsOntoOpencl) {
  Ref<DeviceBackend> cl = runtime().find_backend(kDLOpenCL);
  std::string why = "the opencl plugin is not loaded";
  if (!cl || cl->device_count(&why) == 0) GTEST_SKIP() << "no OpenCL device: " << why;
  kiln::test::pocl_loaded = true;
  const Device device{kDLOpenCL, 0};
  const fs::path d = dir("opencl");
  const std::vector<uint16_t> halves = {0x3f80, 0xc040, 0x7f80, 0x0001};
  auto shards = sample_shards();
  shards[0].push_back({"w.bf16", {4}, "float32", bytes_of(halves), "f32-to-bf16"});
  write_cache(d, shards);
  WeightSet w = WeightSet::load(d, device, runtime());
  ASSERT_EQ(w.size(), 7u);
  for (const auto& shard : sample_shards()) {
    for (const Entry& e : shard) {
      const Tensor t = w.at(e.name);
      EXPECT_EQ(t.device(), device) << e.name;
      EXPECT_EQ(host_bytes(t), e.bytes) << e.name;
    }
  }
  std::vector<uint32_t> widened;
  widened.reserve(halves.size());
  for (uint16_t h : halves) widened.push_back(static_cast<uint32_t>(h) << 16);
  EXPECT_EQ(host_bytes(w.at("w.bf16")), bytes_of(widened));

  register_builtins(runtime());
  registry::require("vm.builtin.tensor_cache.clear")();
  registry::require("vm.builtin.tensor_cache.load")(d.string(), kOpencl, 0);
  Tensor u32 = registry::require("vm.builtin.tensor_cache.get")("w.u32").cast<Tensor>();
  EXPECT_EQ(u32.device(), device);
  EXPECT_EQ(host_bytes(u32), sample_shards()[1][0].bytes);
  registry::require("vm.builtin.tensor_cache.clear")();

  std::string none;
  if (cl->device_count(&none) < 1000) {
    EXPECT_THROW(WeightSet::load(d, Device{kDLOpenCL, 1000}, runtime()), ValueError);
  }
}

}  // namespace
}  // namespace kiln::llm
