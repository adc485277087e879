// SPDX-License-Identifier: Apache-2.0
// Any, Function (typed and packed), conversions and the global registry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

TEST(Any, HoldsEveryKindAndCastsBack) {
  EXPECT_TRUE(Any().is_none());
  EXPECT_EQ(Any(true).cast<bool>(), true);
  EXPECT_EQ(Any(int64_t{-7}).cast<int64_t>(), -7);
  EXPECT_EQ(Any(42).cast<int32_t>(), 42);
  EXPECT_DOUBLE_EQ(Any(2.5).cast<double>(), 2.5);
  EXPECT_DOUBLE_EQ(Any(3).cast<double>(), 3.0) << "ints widen to float";
  EXPECT_EQ(Any("hello").cast<std::string>(), "hello");
  EXPECT_EQ(Any(Device::parse("cpu:0")).cast<Device>(), Device::cpu(0));
  EXPECT_EQ(Any(DataType::Float(16)).cast<DataType>(), DataType::Float(16));
  EXPECT_EQ(Any::shape({2, 3}).cast<std::vector<int64_t>>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Any::bytes(std::string_view("a\0b", 3)).cast<std::string>().size(), 3u);
  EXPECT_EQ(sizeof(Any), 16u);
}

TEST(Any, CastErrorsAreTypeErrorsNamingBothKinds) {
  try {
    Any("text").cast<int64_t>();
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "expected int, got string");
  }
  EXPECT_THROW(Any(1.5).cast<int64_t>(), TypeError);
  EXPECT_THROW(Any(300).cast<int8_t>(), TypeError) << "out of range";
  EXPECT_THROW(Any(-1).cast<uint32_t>(), TypeError);
  EXPECT_THROW(Any().cast<Tensor>(), TypeError);
}

TEST(Any, CopiesShareObjectsAndRefcountsBalance) {
  Tensor t = Tensor::empty({4}, DataType::Float(32));
  EXPECT_EQ(t.get()->use_count(), 1);
  {
    Any a(t);
    Any b = a;
    EXPECT_EQ(t.get()->use_count(), 3);
    Any c = std::move(b);
    EXPECT_EQ(t.get()->use_count(), 3);
    EXPECT_EQ(c.cast<Tensor>().get(), t.get());
  }
  EXPECT_EQ(t.get()->use_count(), 1);
}

TEST(Function, TypedCallableRoundTrip) {
  Function add = Function::from_typed("add", [](int64_t a, int64_t b) { return a + b; });
  EXPECT_EQ(add(2, 3).cast<int64_t>(), 5);
  Function concat = Function::from_typed(
      "concat", [](const std::string& a, const std::string& b) { return a + b; });
  EXPECT_EQ(concat("ki", std::string("ln")).cast<std::string>(), "kiln");
  Function scale = Function::from_typed("scale", [](double x, float y) { return x * y; });
  EXPECT_DOUBLE_EQ(scale(1.5, 2).cast<double>(), 3.0);
  Function nothing = Function::from_typed("nothing", [] {});
  EXPECT_TRUE(nothing().is_none());
}

TEST(Function, WrongArgumentsAreTypeErrorsNamingTheFunction) {
  Function add = Function::from_typed("add", [](int64_t a, int64_t b) { return a + b; });
  try {
    add(1);
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "function 'add' expects 2 arguments, got 1");
  }
  try {
    add(1, "two");
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("function 'add': argument 1: expected int, got string"));
  }
}

TEST(Function, ErrorsCrossTheBoundaryWithTheirType) {
  Function raise_value =
      Function::from_typed("raise_value", []() -> int64_t { throw ValueError("bad value"); });
  EXPECT_THROW(raise_value(), ValueError);
  Function raise_std = Function::from_typed(
      "raise_std", []() -> int64_t { throw std::runtime_error("std failure"); });
  try {
    raise_std();
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_STREQ(e.what(), "std failure");
  }
}

TEST(Function, ObjectsPassAndReturnByReference) {
  Tensor t = Tensor::empty({2, 2}, DataType::Float(32));
  Function identity = Function::from_typed("identity", [](Tensor x) { return x; });
  Tensor back = identity(t).cast<Tensor>();
  EXPECT_EQ(back.get(), t.get()) << "a host tensor crosses as a reference, not a copy";
  Function first_dim = Function::from_typed("first_dim", [](DLTensor* x) { return x->shape[0]; });
  EXPECT_EQ(first_dim(t).cast<int64_t>(), 2);
  Function apply =
      Function::from_typed("apply", [](Function f, int64_t x) { return f(x, x).cast<int64_t>(); });
  Function mul = Function::from_typed("mul", [](int64_t a, int64_t b) { return a * b; });
  EXPECT_EQ(apply(mul, 7).cast<int64_t>(), 49);
  Function make_string = Function::from_typed("make_string", [] { return std::string("made"); });
  EXPECT_EQ(make_string().cast<std::string>(), "made");
}

TEST(Function, PackedCallable) {
  Function count = Function::from_packed("count", [](const Any*, int32_t n) { return Any(n); });
  EXPECT_EQ(count(1, "x", 2.0).cast<int64_t>(), 3);
  EXPECT_EQ(count.call_packed({Any(1), Any(2)}).cast<int64_t>(), 2);
}

TEST(Registry, RegistersLooksUpAndRefusesDuplicates) {
  registry::set("testing.add_one",
                Function::from_typed("testing.add_one", [](int64_t x) { return x + 1; }));
  EXPECT_EQ(registry::require("testing.add_one")(41).cast<int64_t>(), 42);
  EXPECT_THROW(registry::set("testing.add_one", Function::from_typed("x", [] {})), ValueError);
  EXPECT_FALSE(registry::get("testing.nothing_here"));
  try {
    registry::require("testing.nothing_here");
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("testing.nothing_here"));
  }
  EXPECT_TRUE(registry::remove("testing.add_one"));
  EXPECT_FALSE(registry::remove("testing.add_one"));
}

TEST(Device, ParsesNamesAliasesAndIndices) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_EQ(Device::parse("llvm:0"), Device::cpu(0));
  EXPECT_EQ(Device::parse("cuda:1"), (Device{kDLCUDA, 1}));
  EXPECT_EQ(Device::parse("opencl:0").str(), "opencl:0");
  EXPECT_THROW(Device::parse("cpu:x"), ValueError);
  EXPECT_THROW(Device::parse("cpu:-1"), ValueError);
  try {
    Device::parse("tpu:0");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown device type 'tpu'"));
    EXPECT_THAT(e.what(), HasSubstr("cpu"));
  }
}

}  // namespace
}  // namespace kiln
