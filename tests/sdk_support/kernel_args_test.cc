// SPDX-License-Identifier: Apache-2.0
// kiln::sdk::pack_kernel_args: the conversions of every argument kind, its errors, and the
// launch-path promise of docs/plugin-abi.md §3 rule 8 — packing allocates nothing. The
// allocation count comes from allocation_counter.cc, which replaces the global operator new.
#include "kiln/sdk/support/kernel_args.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "allocation_counter.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

using ::testing::HasSubstr;

KilnAny tensor_arg(DLTensor* t) {
  KilnAny a{};
  a.type_code = KILN_TYPE_TENSOR;
  a.value.v_tensor = t;
  return a;
}
KilnAny int_arg(int64_t v) {
  KilnAny a{};
  a.type_code = KILN_TYPE_INT;
  a.value.v_int64 = v;
  return a;
}
KilnAny float_arg(double v) {
  KilnAny a{};
  a.type_code = KILN_TYPE_FLOAT;
  a.value.v_float64 = v;
  return a;
}

// The handle a tensor becomes in these tests: its data address plus byte_offset.
uint64_t address_of(const DLTensor& t, size_t) {
  return reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
}

template <typename T>
T value_at(const PackedArgs& packed, size_t i) {
  T v{};
  std::memcpy(&v, packed.pointers[i], sizeof(T));
  return v;
}

// The message and code of the kiln::sdk::Error `body` throws ("" when it throws none).
template <typename Body>
std::string error_of(int32_t code, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

const char* kEveryKind = R"({"kernels": {"k": {"args": [
    "tensor", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"]}}})";

TEST(PackKernelArgs, PacksEveryKindWithItsSizeAndPointers) {
  const ModuleMetadata meta = parse_module_metadata(kEveryKind);
  const KernelInfo& k = find_kernel(meta, "k");
  DLTensor t{};
  t.data = reinterpret_cast<void*>(0x7f0000001000);
  t.byte_offset = 24;
  const KilnAny args[] = {tensor_arg(&t),     int_arg(-5),    int_arg(-300),  int_arg(-70000),
                          int_arg(INT64_MIN), int_arg(255),   int_arg(65535), int_arg(4294967295),
                          int_arg(INT64_MAX), float_arg(0.5), int_arg(3)};
  PackedArgs packed;
  pack_kernel_args(k, args, 11, address_of, packed);
  ASSERT_EQ(packed.count, 11u);
  const uint32_t sizes[] = {8, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
  for (size_t i = 0; i < 11; ++i) {
    EXPECT_EQ(packed.sizes[i], sizes[i]) << i;
    EXPECT_EQ(packed.pointers[i], packed.values[i].data()) << i;
  }
  EXPECT_EQ(value_at<uint64_t>(packed, 0), 0x7f0000001018u);
  EXPECT_EQ(value_at<int8_t>(packed, 1), -5);
  EXPECT_EQ(value_at<int16_t>(packed, 2), -300);
  EXPECT_EQ(value_at<int32_t>(packed, 3), -70000);
  EXPECT_EQ(value_at<int64_t>(packed, 4), INT64_MIN);
  EXPECT_EQ(value_at<uint8_t>(packed, 5), 255);
  EXPECT_EQ(value_at<uint16_t>(packed, 6), 65535);
  EXPECT_EQ(value_at<uint32_t>(packed, 7), 4294967295u);
  EXPECT_EQ(value_at<uint64_t>(packed, 8), static_cast<uint64_t>(INT64_MAX));
  EXPECT_EQ(value_at<float>(packed, 9), 0.5f);
  EXPECT_EQ(value_at<double>(packed, 10), 3.0);  // an int converts to a floating kind
  EXPECT_EQ(packed.kernel_params(), reinterpret_cast<void**>(packed.pointers.data()));
}

TEST(PackKernelArgs, RejectsCountsKindsAndRangesNamingTheArgument) {
  const ModuleMetadata meta = parse_module_metadata(kEveryKind);
  const KernelInfo& k = find_kernel(meta, "k");
  DLTensor t{};
  KilnAny args[] = {tensor_arg(&t), int_arg(1), int_arg(2), int_arg(3),   int_arg(4),   int_arg(5),
                    int_arg(6),     int_arg(7), int_arg(8), float_arg(9), float_arg(10)};
  PackedArgs packed;
  EXPECT_THAT(error_of(KILN_ERROR_VALUE, [&] { pack_kernel_args(k, args, 3, address_of, packed); }),
              HasSubstr("kernel 'k' takes 11 arguments, got 3"));
  args[1] = int_arg(128);
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [&] { pack_kernel_args(k, args, 11, address_of, packed); }),
      HasSubstr("argument 1: 128 does not fit in int8"));
  args[1] = int_arg(1);
  args[5] = int_arg(-1);
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE, [&] { pack_kernel_args(k, args, 11, address_of, packed); }),
      HasSubstr("argument 5: -1 does not fit in uint8"));
  args[5] = float_arg(1.5);
  EXPECT_THAT(error_of(KILN_ERROR_TYPE, [&] { pack_kernel_args(k, args, 11, address_of, packed); }),
              HasSubstr("argument 5 expects uint8, got float"));
  args[5] = int_arg(5);
  args[0] = int_arg(0);
  EXPECT_THAT(error_of(KILN_ERROR_TYPE, [&] { pack_kernel_args(k, args, 11, address_of, packed); }),
              HasSubstr("argument 0 expects tensor, got int"));
  // What the tensor conversion throws reaches the caller unchanged.
  args[0] = tensor_arg(&t);
  EXPECT_THAT(error_of(KILN_ERROR_VALUE,
                       [&] {
                         pack_kernel_args(
                             k, args, 11,
                             [](const DLTensor&, size_t index) -> uint64_t {
                               throw Error(KILN_ERROR_VALUE,
                                           "tensor " + std::to_string(index) + " is elsewhere");
                             },
                             packed);
                       }),
              HasSubstr("tensor 0 is elsewhere"));
}

TEST(PackKernelArgs, MetadataRefusesMoreArgumentsThanThePackerHolds) {
  std::string args = "\"int32\"";
  for (size_t i = 1; i <= kMaxKernelArgs; ++i) args += ", \"int32\"";
  EXPECT_THAT(
      error_of(KILN_ERROR_VALUE,
               [&] { parse_module_metadata(R"({"kernels": {"k": {"args": [)" + args + "]}}}"); }),
      HasSubstr("at most " + std::to_string(kMaxKernelArgs)));
}

// The launch path's promise: packing a launch's arguments (tensors, every scalar kind, the
// tensor callable with captures) makes no heap allocation.
TEST(PackKernelArgs, PackingAllocatesNothing) {
  const ModuleMetadata meta = parse_module_metadata(kEveryKind);
  const KernelInfo& k = find_kernel(meta, "k");
  DLTensor t{};
  t.data = reinterpret_cast<void*>(0x1000);
  const KilnAny args[] = {tensor_arg(&t), int_arg(1),   int_arg(2),   int_arg(3),
                          int_arg(4),     int_arg(5),   int_arg(6),   int_arg(7),
                          int_arg(8),     float_arg(9), float_arg(10)};
  const int32_t device_id = 3;
  uint64_t seen = 0;
  PackedArgs packed;
  const long before = allocation_count();
  for (int launch = 0; launch < 100; ++launch) {
    pack_kernel_args(
        k, args, 11,
        [device_id, &seen](const DLTensor& tensor, size_t) {
          seen += static_cast<uint64_t>(device_id);
          return reinterpret_cast<uint64_t>(tensor.data);
        },
        packed);
  }
  const long after = allocation_count();
  EXPECT_EQ(after - before, 0) << "pack_kernel_args allocated on the launch path";
  EXPECT_EQ(seen, 300u);
  EXPECT_EQ(packed.count, 11u);
  // The counter does count: an error message is built on the heap.
  EXPECT_THROW(pack_kernel_args(k, args, 2, address_of, packed), Error);
  EXPECT_GT(allocation_count(), after);
}

}  // namespace
}  // namespace kiln::sdk
