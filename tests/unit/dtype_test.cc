// SPDX-License-Identifier: Apache-2.0
#include "kiln/dtype.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln {
namespace {

// Whether `text` contains `part`; on failure says both.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

struct Named {
  const char* name;
  DataType type;
  size_t bytes;
};

const std::vector<Named>& AllNamed() {
  static const std::vector<Named> kAll = {
      {"bool", DataType::Bool(), 1},         {"int8", DataType::Int(8), 1},
      {"int16", DataType::Int(16), 2},       {"int32", DataType::Int(32), 4},
      {"int64", DataType::Int(64), 8},       {"uint8", DataType::UInt(8), 1},
      {"uint16", DataType::UInt(16), 2},     {"uint32", DataType::UInt(32), 4},
      {"uint64", DataType::UInt(64), 8},     {"float16", DataType::Float(16), 2},
      {"bfloat16", DataType::BFloat16(), 2}, {"float32", DataType::Float(32), 4},
      {"float64", DataType::Float(64), 8},
  };
  return kAll;
}

// The message of the ValueError DataType::parse(text) throws ("" if it does not throw).
std::string ParseError(const std::string& text) {
  try {
    DataType::parse(text);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(DataType, ParsePrintRoundTripEveryName) {
  for (const Named& n : AllNamed()) {
    SCOPED_TRACE(n.name);
    DataType t = DataType::parse(n.name);
    EXPECT_EQ(t, n.type);
    EXPECT_EQ(t.lanes, 1);
    EXPECT_EQ(t.str(), n.name);
    EXPECT_EQ(DataType::parse(t.str()), t);
  }
}

TEST(DataType, ParseFields) {
  DataType b = DataType::parse("bool");
  EXPECT_EQ(b.code, KILN_DL_BOOL);
  EXPECT_EQ(b.bits, 8);
  EXPECT_EQ(b.lanes, 1);
  DataType i = DataType::parse("int8x4");
  EXPECT_EQ(i.code, kDLInt);
  EXPECT_EQ(i.bits, 8);
  EXPECT_EQ(i.lanes, 4);
  DataType u = DataType::parse("uint64");
  EXPECT_EQ(u.code, kDLUInt);
  EXPECT_EQ(u.bits, 64);
  DataType f = DataType::parse("float16");
  EXPECT_EQ(f.code, kDLFloat);
  EXPECT_EQ(f.bits, 16);
  DataType bf = DataType::parse("bfloat16");
  EXPECT_EQ(bf.code, kDLBfloat);
  EXPECT_EQ(bf.bits, 16);
}

TEST(DataType, LanesRoundTrip) {
  for (const Named& n : AllNamed()) {
    for (unsigned lanes : {1u, 2u, 4u, 16u, 65535u}) {
      std::string text = std::string(n.name) + "x" + std::to_string(lanes);
      SCOPED_TRACE(text);
      DataType t = DataType::parse(text);
      EXPECT_EQ(t.code, n.type.code);
      EXPECT_EQ(t.bits, n.type.bits);
      EXPECT_EQ(t.lanes, lanes);
      // "x1" is accepted but the canonical form omits it.
      EXPECT_EQ(t.str(), lanes == 1 ? std::string(n.name) : text);
      EXPECT_EQ(DataType::parse(t.str()), t);
      EXPECT_EQ(t.bytes(), n.bytes * lanes);
    }
  }
  EXPECT_EQ(DataType::parse("float32x2"), DataType::Float(32, 2));
  EXPECT_EQ(DataType::Int(8, 4).str(), "int8x4");
}

TEST(DataType, UnknownNameListsAcceptedNames) {
  std::string message = ParseError("flot32");
  EXPECT_TRUE(Contains(message, "'flot32'"));
  EXPECT_TRUE(Contains(message, "unknown dtype"));
  EXPECT_TRUE(Contains(message,
                       "expected one of bool, int8, int16, int32, int64, uint8, uint16, "
                       "uint32, uint64, float16, bfloat16, float32, float64"));
  EXPECT_TRUE(Contains(message, "'int8x4'"));
}

TEST(DataType, ParseIsStrict) {
  for (const char* bad : {"",         "float",      "double",    "int",   "uint",    "Float32",
                          "FLOAT32",  " int8",      "int8 ",     "int7",  "int128",  "float8",
                          "float128", "bfloat32",   "complex64", "bool8", "i4",      "<f4",
                          "f32",      "float32 x2", "int8X4",    "x4",    "int8xx4", "int8x4x2"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(DataType::parse(bad), ValueError);
    EXPECT_TRUE(Contains(ParseError(bad), "'" + std::string(bad) + "'"));
  }
}

TEST(DataType, BadLanes) {
  for (const char* bad : {"float32x0", "float32x", "float32x-1", "float32x+2", "float32x65536",
                          "float32x99999999999999999999", "int8x04", "int8x4.0", "boolx"}) {
    SCOPED_TRACE(bad);
    std::string message = ParseError(bad);
    EXPECT_TRUE(Contains(message, "'" + std::string(bad) + "'"));
    EXPECT_TRUE(Contains(message, "lanes"));
  }
  EXPECT_TRUE(Contains(ParseError("float32x0"), "1..65535"));
  EXPECT_TRUE(Contains(ParseError("float32x65536"), "1..65535"));
}

TEST(DataType, Bytes) {
  for (const Named& n : AllNamed()) {
    SCOPED_TRACE(n.name);
    EXPECT_EQ(n.type.bytes(), n.bytes);
  }
  EXPECT_EQ(DataType::Bool().bytes(), 1u);
  EXPECT_EQ(DataType::Bool(4).bytes(), 4u);
  EXPECT_EQ(DataType::parse("boolx3").bytes(), 3u);
  EXPECT_EQ(DataType::Int(8, 4).bytes(), 4u);
  EXPECT_EQ(DataType::Float(64, 2).bytes(), 16u);
  // Sub-byte types round up: 4 lanes of 1 bit is one byte, 3 lanes of 4 bits two.
  EXPECT_EQ(DataType(kDLUInt, 1, 4).bytes(), 1u);
  EXPECT_EQ(DataType(kDLUInt, 4, 3).bytes(), 2u);
  EXPECT_EQ(DataType(kDLInt, 64, 65535).bytes(), 8u * 65535u);
}

TEST(DataType, NamedConstructors) {
  EXPECT_EQ(DataType::Bool(), DataType(KILN_DL_BOOL, 8, 1));
  EXPECT_EQ(DataType::Int(32), DataType(kDLInt, 32, 1));
  EXPECT_EQ(DataType::UInt(16, 2), DataType(kDLUInt, 16, 2));
  EXPECT_EQ(DataType::Float(64), DataType(kDLFloat, 64, 1));
  EXPECT_EQ(DataType::BFloat16(), DataType(kDLBfloat, 16, 1));
  EXPECT_EQ(DataType(), DataType::Float(32));
  static_assert(DataType::Float(32).bytes() == 4);
  static_assert(DataType::Int(8, 4) == DataType(kDLInt, 8, 4));

  EXPECT_THROW(DataType::Int(7), ValueError);
  EXPECT_THROW(DataType::UInt(128), ValueError);
  EXPECT_THROW(DataType::Float(8), ValueError);
  EXPECT_THROW(DataType::Int(32, 0), ValueError);
  EXPECT_THROW(DataType::Bool(0), ValueError);
  try {
    DataType::Float(8);
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_TRUE(Contains(std::string(e.what()), "8-bit float"));
  }
}

TEST(DataType, DLPackConversion) {
  DLDataType dl{kDLFloat, 16, 4};
  DataType t = dl;
  EXPECT_EQ(t, DataType::Float(16, 4));
  EXPECT_EQ(t, dl);
  EXPECT_EQ(dl, t);
  DLDataType back = DataType::UInt(32, 2);
  EXPECT_EQ(back.code, kDLUInt);
  EXPECT_EQ(back.bits, 32);
  EXPECT_EQ(back.lanes, 2);
}

TEST(DataType, Equality) {
  EXPECT_EQ(DataType::Int(32), DataType::parse("int32"));
  EXPECT_NE(DataType::Int(32), DataType::UInt(32));
  EXPECT_NE(DataType::Int(32), DataType::Int(64));
  EXPECT_NE(DataType::Int(32), DataType::Int(32, 2));
  EXPECT_NE(DataType::Float(16), DataType::BFloat16());
}

TEST(DataType, StreamAndStrOfOtherTypes) {
  std::ostringstream os;
  os << DataType::Float(32, 2) << " " << DataType::Bool();
  EXPECT_EQ(os.str(), "float32x2 bool");
  // Types parse() rejects still print readably.
  EXPECT_EQ(DataType(kDLComplex, 64).str(), "complex64");
  EXPECT_EQ(DataType(kDLOpaqueHandle, 64).str(), "handle64");
  EXPECT_EQ(DataType(200, 8, 2).str(), "code200_8x2");
  EXPECT_EQ(DataType(kDLInt, 4).str(), "int4");
  EXPECT_THROW(DataType::parse("int4"), ValueError);
}

}  // namespace
}  // namespace kiln
