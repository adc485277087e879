// SPDX-License-Identifier: Apache-2.0
// Tensor: allocation, copies, DLPack import/export, .npy round trips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(Tensor, EmptyHasShapeDtypeDeviceAndAlignedMemory) {
  Tensor t = Tensor::empty({2, 3, 4}, DataType::Float(32));
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.dtype(), DataType::Float(32));
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.str(), "Tensor(shape=[2, 3, 4], dtype=float32, device=cpu:0)");
  Tensor scalar = Tensor::empty({}, DataType::Int(64));
  EXPECT_EQ(scalar.numel(), 1);
  Tensor zero = Tensor::empty({0, 5}, DataType::Int(8));
  EXPECT_EQ(zero.nbytes(), 0u);
  EXPECT_THROW(Tensor::empty({2, -1}, DataType::Float(32)), ValueError);
}

TEST(Tensor, CopiesCheckSizesAndShapes) {
  Tensor t = Tensor::empty({4}, DataType::Int(32));
  std::vector<int32_t> v{1, 2, 3, 4};
  t.copy_from(v.data(), 16);
  EXPECT_THAT(t.host_span<int32_t>(), ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_THROW(t.copy_from(v.data(), 12), ValueError);
  Tensor other = Tensor::empty({2, 2}, DataType::Int(32));
  EXPECT_THROW(other.copy_from(t), ValueError);
  Tensor same = Tensor::empty({4}, DataType::Int(32));
  same.copy_from(t);
  EXPECT_THAT(same.host_span<int32_t>(), ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_THROW(t.host_span<double>(), TypeError);
}

TEST(Tensor, DLPackExportAndImportShareMemory) {
  Tensor t = Tensor::empty({3}, DataType::Float(64));
  DLManagedTensor* managed = t.to_dlpack();
  EXPECT_EQ(managed->dl_tensor.data, t.dl()->data);
  EXPECT_EQ(t.get()->use_count(), 2);
  Tensor imported = Tensor::from_dlpack(managed);
  EXPECT_EQ(imported.data(), t.data());
  imported = Tensor();
  EXPECT_EQ(t.get()->use_count(), 1) << "the deleter released the exported reference";
}

TEST(Tensor, NpyRoundTripThroughFiles) {
  TempDir dir;
  Tensor t = Tensor::empty({2, 3}, DataType::Int(16));
  auto span = t.host_span<int16_t>();
  std::iota(span.begin(), span.end(), -3);
  t.save_npy(dir.path() / "t.npy");
  Tensor back = Tensor::load_npy(dir.path() / "t.npy");
  EXPECT_EQ(back.dtype(), DataType::Int(16));
  EXPECT_THAT(std::vector<int64_t>(back.shape().begin(), back.shape().end()),
              ::testing::ElementsAre(2, 3));
  EXPECT_THAT(back.host_span<int16_t>(), ::testing::ElementsAre(-3, -2, -1, 0, 1, 2));
  EXPECT_THROW(Tensor::load_npy(dir.path() / "missing.npy"), NotFoundError);
}

TEST(Tensor, UnknownDeviceTypeSaysWhichBackendsExist) {
  try {
    Tensor::empty({1}, DataType::Float(32), Device{kDLVulkan, 0});
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no backend serves device type 'vulkan'"));
  }
}

}  // namespace
}  // namespace kiln
