// SPDX-License-Identifier: Apache-2.0
#include "kiln/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSource = "src.npy";

// Whether `text` contains `part`; on failure says both.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

std::vector<uint8_t> Bytes(std::string_view text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// A .npy file with the given header dict text and data. With `pad` the header is padded with
// spaces and '\n' so the data starts at a multiple of 64 bytes, as numpy writes it.
std::vector<uint8_t> MakeNpy(std::string header, const std::vector<uint8_t>& data = {},
                             uint8_t major = 1, uint8_t minor = 0, bool pad = true) {
  const size_t preamble = major == 1 ? 10 : 12;
  if (pad) {
    while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
  }
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, minor};
  for (size_t i = 0; i < preamble - 8; ++i) {
    out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The message of the ValueError parse_npy(bytes, kSource) throws; "" if it does not throw.
// Also checks that the message starts with "<source>: ".
std::string NpyError(const std::vector<uint8_t>& bytes) {
  try {
    parse_npy(bytes, kSource);
  } catch (const ValueError& e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind(std::string(kSource) + ": ", 0), 0u) << message;
    return message;
  }
  ADD_FAILURE() << "parse_npy did not throw";
  return "";
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every dtype .npy supports, with its descr.
struct NpyType {
  DataType dtype;
  const char* descr;
};
const std::vector<NpyType>& SupportedTypes() {
  static const std::vector<NpyType> kTypes = {
      {DataType::Bool(), "|b1"},    {DataType::Int(8), "|i1"},    {DataType::Int(16), "<i2"},
      {DataType::Int(32), "<i4"},   {DataType::Int(64), "<i8"},   {DataType::UInt(8), "|u1"},
      {DataType::UInt(16), "<u2"},  {DataType::UInt(32), "<u4"},  {DataType::UInt(64), "<u8"},
      {DataType::Float(16), "<f2"}, {DataType::Float(32), "<f4"}, {DataType::Float(64), "<f8"},
  };
  return kTypes;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Distinct element bytes for a test array (0/1 for bool).
std::vector<uint8_t> Pattern(DataType dtype, const std::vector<int64_t>& shape) {
  std::vector<uint8_t> data(static_cast<size_t>(NumElements(shape)) * dtype.bytes());
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<uint8_t>(dtype == DataType::Bool() ? i % 2 : i * 7 + 3);
  }
  return data;
}

// Size of the preamble plus header of serialized .npy bytes (where the data starts).
size_t DataOffset(const std::vector<uint8_t>& bytes) {
  if (bytes[6] == 1) return 10 + (bytes[8] | (bytes[9] << 8));
  return 12 +
         (bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<size_t>(bytes[11]) << 24));
}

const std::vector<std::vector<int64_t>>& TestShapes() {
  static const std::vector<std::vector<int64_t>> kShapes = {{}, {0}, {5}, {2, 3, 4}, {3, 0, 2}};
  return kShapes;
}

TEST(Npy, RoundTripEveryDtypeAndShape) {
  for (const NpyType& t : SupportedTypes()) {
    for (const std::vector<int64_t>& shape : TestShapes()) {
      SCOPED_TRACE(t.dtype.str() + " shape size " + std::to_string(shape.size()));
      std::vector<uint8_t> data = Pattern(t.dtype, shape);
      std::vector<uint8_t> bytes = serialize_npy(t.dtype, shape, data.data(), data.size());
      ASSERT_GE(bytes.size(), 64u);
      EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), std::string("\x93NUMPY\x01\x00", 8));
      const size_t offset = DataOffset(bytes);
      EXPECT_EQ(offset % 64, 0u);
      EXPECT_EQ(bytes[offset - 1], '\n');
      EXPECT_EQ(bytes.size(), offset + data.size());
      std::string header(bytes.begin() + 10, bytes.begin() + static_cast<std::ptrdiff_t>(offset));
      EXPECT_TRUE(Contains(header, std::string("'descr': '") + t.descr + "'"));

      NpyArray array = parse_npy(bytes, kSource);
      EXPECT_EQ(array.dtype, t.dtype);
      EXPECT_EQ(array.shape, shape);
      EXPECT_EQ(array.data, data);
    }
  }
}

TEST(Npy, HeaderMatchesNumpy) {
  // np.save of a (3, 4) float32 array writes exactly this header (length 118, data at 128).
  std::vector<int64_t> shape = {3, 4};
  std::vector<float> values(12, 1.5f);
  std::vector<uint8_t> bytes =
      serialize_npy(DataType::Float(32), shape, values.data(), values.size() * sizeof(float));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict;
  expected += std::string(128 - 1 - expected.size(), ' ') + "\n";
  ASSERT_EQ(bytes.size(), 128u + 48u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 128), expected);
  EXPECT_EQ(std::memcmp(bytes.data() + 128, values.data(), 48), 0);

  std::vector<uint8_t> scalar = serialize_npy(DataType::Float(64), {}, values.data(), 8);
  EXPECT_TRUE(Contains(std::string(scalar.begin(), scalar.end()), "'shape': (), }"));
  std::vector<int64_t> one = {5};
  std::vector<uint8_t> vec = serialize_npy(DataType::UInt(8), one, values.data(), 5);
  EXPECT_TRUE(Contains(std::string(vec.begin(), vec.end()),
                       "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"));
}

TEST(Npy, HeaderAlignedTo64ForManyHeaderLengths) {
  // Shapes of growing rank give every header length modulo 64.
  std::vector<int64_t> shape;
  for (int rank = 0; rank < 40; ++rank) {
    SCOPED_TRACE(rank);
    // Rank 0 is a scalar (2 bytes), every other shape has a 0 dim (no data).
    std::vector<uint8_t> bytes = rank == 0 ? serialize_npy(DataType::Int(16), shape, "ab", 2)
                                           : serialize_npy(DataType::Int(16), shape, nullptr, 0);
    const size_t offset = DataOffset(bytes);
    EXPECT_EQ(offset % 64, 0u);
    EXPECT_EQ(bytes[offset - 1], '\n');
    // The dict, then fewer than 64 spaces of padding, then '\n'.
    const std::string header(bytes.begin() + 10,
                             bytes.begin() + static_cast<std::ptrdiff_t>(offset));
    const size_t end = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', end + 1), header.size() - 1);
    EXPECT_LT(header.size() - 1 - (end + 1), 64u);
    NpyArray array = parse_npy(bytes, kSource);
    EXPECT_EQ(array.shape, shape);
    shape.push_back(rank == 0 ? 0 : rank * 1000);
  }
}

TEST(Npy, LargeHeaderUsesVersion2) {
  // 25000 dims of 1 need a header of 75000 bytes, more than version 1.0 can say.
  std::vector<int64_t> shape(25000, 1);
  const float value = 2.5f;
  std::vector<uint8_t> bytes = serialize_npy(DataType::Float(32), shape, &value, 4);
  EXPECT_EQ(bytes[6], 2);
  EXPECT_EQ(bytes[7], 0);
  const size_t offset = DataOffset(bytes);
  EXPECT_GT(offset, 65536u);
  EXPECT_EQ(offset % 64, 0u);
  NpyArray array = parse_npy(bytes, kSource);
  EXPECT_EQ(array.shape, shape);
  EXPECT_EQ(array.data.size(), 4u);
  float back = 0;
  std::memcpy(&back, array.data.data(), 4);
  EXPECT_EQ(back, 2.5f);
}

TEST(Npy, ParsesVersion2And3) {
  std::vector<uint8_t> data = {1, 0, 2, 0, 3, 0};
  for (uint8_t major : {2, 3}) {
    SCOPED_TRACE(major);
    NpyArray array = parse_npy(
        MakeNpy("{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", data, major), kSource);
    EXPECT_EQ(array.dtype, DataType::Int(16));
    EXPECT_EQ(array.shape, std::vector<int64_t>{3});
    EXPECT_EQ(array.data, data);
  }
}

TEST(Npy, ParsesHeaderVariants) {
  const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6};
  for (const char* header : {
           "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }",
           "{'shape': (2, 3), 'descr': '|u1', 'fortran_order': False}",
           "{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (2,3)}",
           "{'fortran_order':False,'shape':(2,3,),'descr':'<u1',}",
           "  {\n 'descr' : '=u1' ,\n\t'fortran_order' : False ,\r\n 'shape' : ( 2 , 3 ) ,\n}  ",
           "{'descr': '>u1', 'fortran_order': False, 'shape': (2L, 3L), }",
       }) {
    SCOPED_TRACE(header);
    NpyArray array = parse_npy(MakeNpy(header, data), kSource);
    EXPECT_EQ(array.dtype, DataType::UInt(8));
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(array.data, data);
  }
  // An unpadded header without the final newline is fine too.
  NpyArray array = parse_npy(
      MakeNpy("{'descr': '|b1', 'fortran_order': False, 'shape': ()}", {1}, 1, 0, false), kSource);
  EXPECT_EQ(array.dtype, DataType::Bool());
  EXPECT_TRUE(array.shape.empty());
  EXPECT_EQ(array.data, std::vector<uint8_t>{1});
}

TEST(Npy, ParsesEqualsAsLittleEndian) {
  NpyArray array = parse_npy(
      MakeNpy("{'descr': '=i4', 'fortran_order': False, 'shape': (1,), }", {1, 2, 3, 4}), kSource);
  EXPECT_EQ(array.dtype, DataType::Int(32));
  EXPECT_EQ(array.data, (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST(Npy, BigEndianIsSwapped) {
  NpyArray i4 = parse_npy(MakeNpy("{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }",
                                  {0, 0, 0, 1, 0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe}),
                          kSource);
  EXPECT_EQ(i4.dtype, DataType::Int(32));
  ASSERT_EQ(i4.data.size(), 12u);
  int32_t ints[3];
  std::memcpy(ints, i4.data.data(), 12);
  EXPECT_EQ(ints[0], 1);
  EXPECT_EQ(ints[1], 258);
  EXPECT_EQ(ints[2], -2);

  // 1.5 as a big-endian double is 3f f8 00 00 00 00 00 00.
  NpyArray f8 = parse_npy(MakeNpy("{'descr': '>f8', 'fortran_order': False, 'shape': (), }",
                                  {0x3f, 0xf8, 0, 0, 0, 0, 0, 0}),
                          kSource);
  EXPECT_EQ(f8.dtype, DataType::Float(64));
  double d = 0;
  std::memcpy(&d, f8.data.data(), 8);
  EXPECT_EQ(d, 1.5);

  NpyArray u2 = parse_npy(
      MakeNpy("{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", {0x12, 0x34, 0, 1}),
      kSource);
  EXPECT_EQ(u2.data, (std::vector<uint8_t>{0x34, 0x12, 1, 0}));

  NpyArray f2 = parse_npy(
      MakeNpy("{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }", {0x3c, 0x00}), kSource);
  EXPECT_EQ(f2.dtype, DataType::Float(16));
  EXPECT_EQ(f2.data, (std::vector<uint8_t>{0x00, 0x3c}));

  NpyArray i1 = parse_npy(
      MakeNpy("{'descr': '>i1', 'fortran_order': False, 'shape': (2,), }", {0x80, 0x7f}), kSource);
  EXPECT_EQ(i1.data, (std::vector<uint8_t>{0x80, 0x7f}));
}

// --- Malformed files: each is a ValueError naming the source and what is wrong. ---

const char* const kGoodHeader = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
const std::vector<uint8_t> kEightBytes = {0, 0, 128, 63, 0, 0, 0, 64};

TEST(NpyErrors, EmptyFile) {
  EXPECT_TRUE(Contains(NpyError({}), "src.npy: not a .npy file: the file is empty"));
}

TEST(NpyErrors, BadMagic) {
  std::vector<uint8_t> bytes = MakeNpy(kGoodHeader, kEightBytes);
  bytes[5] = 'Z';
  std::string message = NpyError(bytes);
  EXPECT_TRUE(Contains(message, "not a .npy file"));
  EXPECT_TRUE(Contains(message, "magic string \\x93NUMPY at byte offset 0"));
  EXPECT_TRUE(Contains(message, "found '\\x93NUMPZ'"));
  EXPECT_TRUE(Contains(NpyError(Bytes("PK\x03\x04 a zip file")), "found 'PK\\x03\\x04 a'"));
  EXPECT_TRUE(Contains(NpyError(Bytes("\x93NU")), "the file has only 3 bytes"));
}

TEST(NpyErrors, UnknownVersion) {
  EXPECT_TRUE(Contains(NpyError(MakeNpy(kGoodHeader, kEightBytes, 4, 0)),
                       "unsupported .npy format version 4.0 at byte offset 6"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy(kGoodHeader, kEightBytes, 1, 1)), "version 1.1"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy(kGoodHeader, kEightBytes, 0, 0)), "version 0.0"));
  EXPECT_TRUE(Contains(NpyError(Bytes("\x93NUMPY\x01")), "version at byte offset 6 is missing"));
}

TEST(NpyErrors, TruncatedHeader) {
  std::vector<uint8_t> bytes = MakeNpy(kGoodHeader, kEightBytes);
  EXPECT_TRUE(Contains(NpyError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 9)),
                       "format 1.0 needs 10 bytes before the header, the file has only 9"));
  bytes.resize(40);
  EXPECT_TRUE(Contains(NpyError(bytes),
                       "truncated .npy header: the header length at byte offset 8 says 118 bytes, "
                       "ending at byte offset 128, but the file has only 40 bytes"));
  std::vector<uint8_t> v2 = MakeNpy(kGoodHeader, kEightBytes, 2);
  v2.resize(11);
  EXPECT_TRUE(Contains(NpyError(v2), "format 2.0 needs 12 bytes"));
  // A version 2.0 length near 4 GiB must not overflow the bounds check.
  std::vector<uint8_t> huge = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff, '{'};
  EXPECT_TRUE(Contains(NpyError(huge), "says 4294967295 bytes"));
}

TEST(NpyErrors, HeaderNotADict) {
  std::string message = NpyError(MakeNpy("[1, 2]", kEightBytes));
  EXPECT_TRUE(Contains(message, "malformed .npy header at byte offset 10"));
  EXPECT_TRUE(Contains(message, "not a Python dict literal"));
  EXPECT_TRUE(Contains(message, "header: [1, 2]"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy("", {})), "not a Python dict literal"));
}

TEST(NpyErrors, MalformedDict) {
  struct Case {
    const char* header;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}",
            "at byte offset 19: expected ':' after key 'descr'"},
           {"{descr: '<f4'}", "at byte offset 11: expected a quoted key or '}'"},
           {"{'descr': '<f4' 'fortran_order': False}",
            "expected ',' or '}' after the value of 'descr'"},
           {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
            "at byte offset 27: expected ',' or '}' after the value of 'descr'"},
           {"{'descr': '<f4", "at byte offset 20: unterminated string"},
           {"{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (2,)}",
            "escape sequences are not supported"},
           {"{'descr': 5, 'fortran_order': False, 'shape': (2,)}",
            "the value of 'descr' must be a string"},
           {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}",
            "the value of 'fortran_order' must be True or False"},
           {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
            "the value of 'fortran_order' must be True or False"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
            "the value of 'shape' must be a tuple"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            "is a parenthesized int, not a tuple (write (2,))"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
            "expected an integer dimension in 'shape'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
            "expected ',' or ')' in 'shape'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}",
            "expected ',' or ')' in 'shape'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (0x2,)}",
            "expected an integer dimension in 'shape'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
            "in 'shape' does not fit in 64 bits"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
            "unexpected text after the header dict"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
            "unexpected key 'extra' (expected 'descr', 'fortran_order' and 'shape')"},
           {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            "duplicate key 'descr'"},
       }) {
    SCOPED_TRACE(c.header);
    std::string message = NpyError(MakeNpy(c.header, kEightBytes));
    EXPECT_TRUE(Contains(message, "malformed .npy header"));
    EXPECT_TRUE(Contains(message, c.message));
  }
}

TEST(NpyErrors, MissingKey) {
  std::string message = NpyError(MakeNpy("{'descr': '<f4', 'fortran_order': False}", kEightBytes));
  EXPECT_TRUE(Contains(message,
                       "src.npy: malformed .npy header: missing key 'shape'; header: "
                       "{'descr': '<f4', 'fortran_order': False}"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy("{'shape': (2,), 'fortran_order': False}", kEightBytes)),
                       "missing key 'descr'"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy("{'shape': (2,), 'descr': '<f4'}", kEightBytes)),
                       "missing key 'fortran_order'"));
  EXPECT_TRUE(Contains(NpyError(MakeNpy("{}", kEightBytes)), "missing key 'descr'"));
}

TEST(NpyErrors, FortranOrder) {
  std::string message =
      NpyError(MakeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", kEightBytes));
  EXPECT_TRUE(Contains(message,
                       "src.npy: Fortran-order .npy files are not supported; save with "
                       "np.ascontiguousarray"));
}

TEST(NpyErrors, UnsupportedDescr) {
  for (const char* descr : {"<c8", "<c16", "|O", "<U3", "|S5", "|V2", "<V2", "<M8[ns]", "<m8",
                            "<f16", "|f1", "|i4", "<b2", "?", "f4", "<i3", "<i16", "xi4", ""}) {
    SCOPED_TRACE(descr);
    std::string message = NpyError(
        MakeNpy(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }",
                kEightBytes));
    EXPECT_TRUE(Contains(message, std::string("unsupported dtype descr '") + descr + "'"));
    EXPECT_TRUE(Contains(message, "supported: |b1"));
  }
  std::string message = NpyError(
      MakeNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", kEightBytes));
  EXPECT_TRUE(Contains(message, "structured arrays"));
}

TEST(NpyErrors, NegativeDim) {
  std::string message =
      NpyError(MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", {}));
  EXPECT_TRUE(Contains(message, "negative dimension -3 at index 1 of shape (2, -3)"));
}

TEST(NpyErrors, ShapeOverflow) {
  std::string message = NpyError(
      MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", {}));
  EXPECT_TRUE(Contains(message, "shape (4294967296, 4294967296) of float32 is too large"));
  // The element count fits but the byte size does not.
  EXPECT_TRUE(Contains(NpyError(MakeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                        "(4611686018427387904,), }",
                                        {})),
                       "overflows 64 bits"));
}

TEST(NpyErrors, TruncatedData) {
  std::vector<uint8_t> bytes =
      MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(Contains(NpyError(bytes),
                       "src.npy: truncated data: expected 20 bytes of data at byte offset 128 for "
                       "shape (5,) of float32, found 6"));
}

TEST(NpyErrors, TrailingData) {
  std::vector<uint8_t> data(24 + 3, 0);
  std::string message =
      NpyError(MakeNpy("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", data));
  EXPECT_TRUE(Contains(message, "src.npy: 3 extra bytes after the array data"));
  EXPECT_TRUE(Contains(message, "expected 24 bytes of data at byte offset 128"));
}

TEST(NpyErrors, NonPrintableHeaderIsEscapedAndCut) {
  std::string header = "\x01\xff";
  header += std::string(1000, 'z');
  std::string message = NpyError(MakeNpy(header, {}));
  EXPECT_TRUE(Contains(message, "header: \\x01\\xffzzz"));
  EXPECT_TRUE(Contains(message, "..."));
  EXPECT_LT(message.size(), 500u);
}

// --- serialize_npy argument errors. ---

// The message of the ValueError serialize_npy throws; "" if it does not.
std::string SerializeError(DataType dtype, std::vector<int64_t> shape, const void* data,
                           size_t nbytes) {
  try {
    serialize_npy(dtype, shape, data, nbytes);
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "serialize_npy did not throw";
  return "";
}

TEST(NpySerialize, RejectsUnrepresentableTypes) {
  const uint8_t buffer[64] = {};
  EXPECT_TRUE(Contains(SerializeError(DataType::BFloat16(), {2}, buffer, 4),
                       "cannot write dtype bfloat16 to .npy: numpy has no bfloat16 dtype"));
  EXPECT_TRUE(Contains(SerializeError(DataType::Float(32, 4), {2}, buffer, 32),
                       "cannot write dtype float32x4 to .npy: .npy elements have one lane"));
  EXPECT_TRUE(Contains(SerializeError(DataType(kDLComplex, 64), {2}, buffer, 16),
                       "cannot write dtype complex64 to .npy"));
  EXPECT_TRUE(
      Contains(SerializeError(DataType(kDLInt, 4), {2}, buffer, 1), "cannot write dtype int4"));
  EXPECT_TRUE(
      Contains(SerializeError(DataType(kDLFloat, 8), {2}, buffer, 2), "cannot write dtype float8"));
}

TEST(NpySerialize, RejectsBadShapesAndSizes) {
  const uint8_t buffer[64] = {};
  EXPECT_TRUE(Contains(SerializeError(DataType::Float(32), {2, 3}, buffer, 20),
                       "data size mismatch: shape (2, 3) of float32 needs 24 bytes, got 20"));
  EXPECT_TRUE(Contains(SerializeError(DataType::Float(32), {}, buffer, 0),
                       "shape () of float32 needs 4 bytes, got 0"));
  EXPECT_TRUE(Contains(SerializeError(DataType::Int(8), {2, -1}, buffer, 0),
                       "negative dimension -1 at index 1 of shape (2, -1)"));
  EXPECT_TRUE(Contains(SerializeError(DataType::Int(64), {INT64_MAX, 2}, buffer, 0),
                       "is too large: its size overflows 64 bits"));
  EXPECT_TRUE(Contains(SerializeError(DataType::Int(8), {4}, nullptr, 4), "data is null"));
  EXPECT_NO_THROW(serialize_npy(DataType::Int(8), std::vector<int64_t>{0, 4}, nullptr, 0));
}

// --- Files. ---

class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_npy_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The names of the files in dir_.
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(NpyFileTest, WriteReadRoundTrip) {
  for (const NpyType& t : SupportedTypes()) {
    for (const std::vector<int64_t>& shape : TestShapes()) {
      SCOPED_TRACE(t.dtype.str() + " shape size " + std::to_string(shape.size()));
      fs::path path = dir_ / "a.npy";
      std::vector<uint8_t> data = Pattern(t.dtype, shape);
      write_npy(path, t.dtype, shape, data.data(), data.size());
      std::string contents = ReadFile(path);
      std::vector<uint8_t> expected = serialize_npy(t.dtype, shape, data.data(), data.size());
      EXPECT_EQ(contents, std::string(expected.begin(), expected.end()));
      NpyArray array = read_npy(path);
      EXPECT_EQ(array.dtype, t.dtype);
      EXPECT_EQ(array.shape, shape);
      EXPECT_EQ(array.data, data);
    }
  }
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyFileTest, ReadMissingFileIsNotFound) {
  const fs::path path = dir_ / "missing.npy";
  try {
    read_npy(path);
    FAIL() << "no exception";
  } catch (const NotFoundError& e) {
    EXPECT_TRUE(Contains(e.what(), path.string()));
  }
  EXPECT_THROW(read_npy(dir_ / "missing" / "x.npy"), NotFoundError);
}

TEST_F(NpyFileTest, ReadDirectoryIsRuntimeError) {
  try {
    read_npy(dir_);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_TRUE(Contains(e.what(), dir_.string() + ": cannot read .npy file: Is a directory"));
  }
}

TEST_F(NpyFileTest, ReadErrorsNameThePath) {
  const fs::path path = dir_ / "bad.npy";
  std::ofstream(path, std::ios::binary) << "not numpy";
  try {
    read_npy(path);
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": not a .npy file", 0), 0u) << e.what();
  }
}

TEST_F(NpyFileTest, OverwritesExistingFile) {
  const fs::path path = dir_ / "a.npy";
  std::ofstream(path, std::ios::binary) << "old contents";
  const int32_t values[] = {7, 8};
  std::vector<int64_t> shape = {2};
  write_npy(path, DataType::Int(32), shape, values, sizeof(values));
  NpyArray array = read_npy(path);
  EXPECT_EQ(array.data.size(), 8u);
  EXPECT_EQ(std::memcmp(array.data.data(), values, 8), 0);
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyFileTest, FailedWriteKeepsExistingFile) {
  const fs::path path = dir_ / "a.npy";
  std::ofstream(path, std::ios::binary) << "old contents";
  const int32_t values[] = {7, 8};
  std::vector<int64_t> shape = {3};
  try {
    write_npy(path, DataType::Int(32), shape, values, sizeof(values));
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": data size mismatch", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(write_npy(path, DataType::BFloat16(), shape, values, 6), ValueError);
  EXPECT_EQ(ReadFile(path), "old contents");
  EXPECT_EQ(Listing(), std::vector<std::string>{"a.npy"});
}

TEST_F(NpyFileTest, WriteIntoMissingDirectoryIsRuntimeError) {
  const fs::path path = dir_ / "no_such_dir" / "a.npy";
  const uint8_t value = 1;
  try {
    write_npy(path, DataType::UInt(8), {}, &value, 1);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": ", 0), 0u) << e.what();
    EXPECT_TRUE(Contains(e.what(), "No such file or directory"));
  }
}

TEST_F(NpyFileTest, WriteOverDirectoryFailsCleanly) {
  const fs::path path = dir_ / "sub";
  fs::create_directory(path);
  const uint8_t value = 1;
  try {
    write_npy(path, DataType::UInt(8), {}, &value, 1);
    FAIL() << "no exception";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": cannot rename", 0), 0u) << e.what();
    EXPECT_TRUE(Contains(e.what(), "Is a directory"));
  }
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_EQ(Listing(), std::vector<std::string>{"sub"});
}

// --- Compatibility with numpy itself (skipped when numpy is not installed). ---

// The Python interpreter the compatibility test uses: $KILN_TEST_PYTHON or /usr/bin/python3.
std::string TestPython() {
  const char* python = std::getenv("KILN_TEST_PYTHON");
  return python != nullptr && *python != '\0' ? python : "/usr/bin/python3";
}

struct NumpyCase {
  const char* name;
  const char* descr;  // the numpy dtype; '>' cases only go from numpy to Kiln
  DataType dtype;
  std::vector<int64_t> shape;
};

std::vector<NumpyCase> NumpyCases() {
  return {
      {"bool", "|b1", DataType::Bool(), {2, 3}},
      {"i1", "|i1", DataType::Int(8), {5}},
      {"i2", "<i2", DataType::Int(16), {4}},
      {"i4", "<i4", DataType::Int(32), {2, 2}},
      {"i8", "<i8", DataType::Int(64), {3}},
      {"u1", "|u1", DataType::UInt(8), {2, 3, 4}},
      {"u2", "<u2", DataType::UInt(16), {3}},
      {"u4", "<u4", DataType::UInt(32), {1, 3}},
      {"u8", "<u8", DataType::UInt(64), {2}},
      {"f2", "<f2", DataType::Float(16), {5}},
      {"f4", "<f4", DataType::Float(32), {3, 4}},
      {"f8", "<f8", DataType::Float(64), {2, 3, 4}},
      {"scalar", "<f8", DataType::Float(64), {}},
      {"empty", "<f4", DataType::Float(32), {0}},
      {"empty3", "<i4", DataType::Int(32), {2, 0, 3}},
      {"be_i4", ">i4", DataType::Int(32), {3}},
      {"be_u2", ">u2", DataType::UInt(16), {2, 2}},
      {"be_f8", ">f8", DataType::Float(64), {2, 2}},
  };
}

std::string PythonTuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (int64_t d : shape) out += std::to_string(d) + ", ";
  return out + ")";
}

// `mode` "save": numpy writes np_<name>.npy and the little-endian element bytes np_<name>.bin;
// "check": numpy loads k_<name>.npy and compares dtype, shape and bytes with k_<name>.bin.
constexpr const char* kNumpyScript = R"PY(
import os, sys
import numpy as np
mode, d = sys.argv[1], sys.argv[2]
for name, descr, shape in CASES:
    n = 1
    for s in shape:
        n *= s
    if mode == "save":
        if descr == "|b1":
            a = np.arange(n) % 3 == 0
        elif descr[1] == "u":
            a = (np.arange(n) * 7 + 3) % 100
        else:
            a = (np.arange(n) * 7 + 3) % 100 - 50
        a = np.asarray(a).astype(np.dtype(descr)).reshape(shape)
        np.save(os.path.join(d, "np_" + name + ".npy"), a)
        with open(os.path.join(d, "np_" + name + ".bin"), "wb") as f:
            f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
    elif descr[0] != ">":
        a = np.load(os.path.join(d, "k_" + name + ".npy"))
        with open(os.path.join(d, "k_" + name + ".bin"), "rb") as f:
            raw = f.read()
        if a.dtype.str != descr or a.shape != shape or a.tobytes() != raw:
            sys.exit("numpy read k_%s.npy as %s %s, expected %s %s" %
                     (name, a.dtype.str, a.shape, descr, shape))
print("numpy", np.__version__, mode, "ok")
)PY";

TEST_F(NpyFileTest, CompatibleWithNumpy) {
  const std::string python = TestPython();
  if (std::system(("'" + python + "' -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "numpy is not importable by " << python
                 << " (set KILN_TEST_PYTHON to a Python with numpy to run this test)";
  }
  std::string cases = "CASES = [\n";
  for (const NumpyCase& c : NumpyCases()) {
    cases += "    (\"" + std::string(c.name) + "\", \"" + c.descr + "\", " + PythonTuple(c.shape) +
             "),\n";
  }
  cases += "]\n";
  const fs::path script = dir_ / "npy_compat.py";
  std::ofstream(script) << cases << kNumpyScript;
  auto run = [&](const char* mode) {
    return std::system(
        ("'" + python + "' '" + script.string() + "' " + mode + " '" + dir_.string() + "'")
            .c_str());
  };

  // numpy -> Kiln.
  ASSERT_EQ(run("save"), 0);
  for (const NumpyCase& c : NumpyCases()) {
    SCOPED_TRACE(c.name);
    NpyArray array = read_npy(dir_ / ("np_" + std::string(c.name) + ".npy"));
    EXPECT_EQ(array.dtype, c.dtype);
    EXPECT_EQ(array.shape, c.shape);
    std::string raw = ReadFile(dir_ / ("np_" + std::string(c.name) + ".bin"));
    EXPECT_EQ(std::string(array.data.begin(), array.data.end()), raw);
  }

  // Kiln -> numpy.
  for (const NumpyCase& c : NumpyCases()) {
    if (c.descr[0] == '>') continue;
    std::vector<uint8_t> data = Pattern(c.dtype, c.shape);
    write_npy(dir_ / ("k_" + std::string(c.name) + ".npy"), c.dtype, c.shape, data.data(),
              data.size());
    std::ofstream(dir_ / ("k_" + std::string(c.name) + ".bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()),
               static_cast<std::streamsize>(data.size()));
  }
  EXPECT_EQ(run("check"), 0);
}

}  // namespace
}  // namespace kiln
