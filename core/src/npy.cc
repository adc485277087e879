// SPDX-License-Identifier: Apache-2.0
#include "kiln/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

#include "kiln/device_context.h"
#include "kiln/error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/tensor.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "npy.cc assumes a little-endian host ('=' descrs and NpyArray::data)");

namespace {

constexpr uint8_t kNpyMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kNpyMagicSize = sizeof(kNpyMagic);
constexpr size_t kAlign = 64;                    // numpy aligns the data to 64 bytes
constexpr size_t kMaxHeaderTextInMessage = 240;  // longer headers are cut in messages

constexpr const char* kSupportedDescrs =
    "|b1, |i1, |u1, <i2, <i4, <i8, <u2, <u4, <u8, <f2, <f4, <f8 (or with '>' or '=' byte order)";

// `text` with non-printable bytes escaped, cut to `max` characters plus "...".
std::string Printable(std::string_view text, size_t max = kMaxHeaderTextInMessage) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string Printable(std::span<const uint8_t> bytes, size_t max = kMaxHeaderTextInMessage) {
  return Printable(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   max);
}

// A shape as Python writes a tuple: "()", "(5,)", "(2, 3)".
std::string ShapeText(std::span<const int64_t> shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// The number of elements of `shape`, or nullopt if it overflows int64 (dims must be >= 0).
std::optional<uint64_t> NumElements(std::span<const int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  // A zero dim makes any product valid; otherwise the count itself must fit int64.
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return n;
}

std::string SystemError(int err) { return std::generic_category().message(err); }

[[noreturn]] void Fail(const std::string& source, const std::string& what) {
  throw ValueError(source + ": " + what);
}

// The header dict of a .npy file.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A strict parser for the header dict numpy writes, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// Keys in any order, ' or " quotes, optional trailing commas, spaces/tabs/newlines between
// tokens. Nothing else of Python's literal syntax.
class HeaderParser {
 public:
  // `text` is the header, which starts at byte `offset` of the file called `source`.
  HeaderParser(std::string_view text, size_t offset, const std::string& source)
      : text_(text), offset_(offset), source_(source) {}

  Header Parse() {
    Header header;
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) Error("the header is not a Python dict literal: expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      size_t key_pos = pos_;
      if (!AtQuote()) Error("expected a quoted key or '}'");
      std::string key = ParseString();
      SkipSpace();
      if (!Consume(':')) Error("expected ':' after key '" + Printable(key) + "'");
      SkipSpace();
      if (key == "descr") {
        if (have_descr) ErrorAt(key_pos, "duplicate key 'descr'");
        have_descr = true;
        if (Peek() == '[') {
          Fail(source_, "unsupported dtype descr: structured arrays (a list descr) are not " +
                            std::string("supported; header: ") + Printable(text_));
        }
        if (!AtQuote()) Error("the value of 'descr' must be a string");
        header.descr = ParseString();
      } else if (key == "fortran_order") {
        if (have_fortran) ErrorAt(key_pos, "duplicate key 'fortran_order'");
        have_fortran = true;
        header.fortran_order = ParseBool();
      } else if (key == "shape") {
        if (have_shape) ErrorAt(key_pos, "duplicate key 'shape'");
        have_shape = true;
        header.shape = ParseShape();
      } else {
        ErrorAt(key_pos, "unexpected key '" + Printable(key) +
                             "' (expected 'descr', 'fortran_order' and 'shape')");
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      Error("expected ',' or '}' after the value of '" + Printable(key) + "'");
    }
    SkipSpace();
    if (pos_ != text_.size()) Error("unexpected text after the header dict");
    for (auto [have, name] :
         {std::pair{have_descr, "descr"}, std::pair{have_fortran, "fortran_order"},
          std::pair{have_shape, "shape"}}) {
      if (!have) {
        Fail(source_, "malformed .npy header: missing key '" + std::string(name) +
                          "'; header: " + Printable(text_));
      }
    }
    return header;
  }

 private:
  [[noreturn]] void ErrorAt(size_t pos, const std::string& what) const {
    Fail(source_, "malformed .npy header at byte offset " + std::to_string(offset_ + pos) + ": " +
                      what + "; header: " + Printable(text_));
  }
  [[noreturn]] void Error(const std::string& what) const { ErrorAt(pos_, what); }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool AtQuote() const { return Peek() == '\'' || Peek() == '"'; }
  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  static bool IsIdentChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  // A '...' or "..." string without escapes, on one line.
  std::string ParseString() {
    size_t start = pos_;
    char quote = text_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        ErrorAt(start, "unterminated string");
      }
      char c = text_[pos_];
      if (c == '\\') Error("escape sequences are not supported in header strings");
      ++pos_;
      if (c == quote) return out;
      out += c;
    }
  }

  bool ParseBool() {
    for (auto [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word &&
          (pos_ + word.size() == text_.size() || !IsIdentChar(text_[pos_ + word.size()]))) {
        pos_ += word.size();
        return value;
      }
    }
    Error("the value of 'fortran_order' must be True or False");
  }

  // A Python int literal, optionally negative (rejected later with the whole shape), with an
  // optional 'L' suffix as Python 2 wrote it.
  int64_t ParseInt() {
    size_t start = pos_;
    bool negative = Consume('-');
    if (!IsDigit(Peek())) Error("expected an integer dimension in 'shape'");
    uint64_t value = 0;
    while (IsDigit(Peek())) {
      uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (__builtin_mul_overflow(value, uint64_t{10}, &value) ||
          __builtin_add_overflow(value, digit, &value) ||
          value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        ErrorAt(start, "dimension " + Printable(text_.substr(start, pos_ - start + 1)) +
                           "... in 'shape' does not fit in 64 bits");
      }
      ++pos_;
    }
    Consume('L');
    if (IsIdentChar(Peek())) Error("expected an integer dimension in 'shape'");
    return negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  }

  // A tuple of ints: (), (5,), (2, 3), (2, 3,).
  std::vector<int64_t> ParseShape() {
    std::vector<int64_t> shape;
    if (!Consume('(')) Error("the value of 'shape' must be a tuple such as (2, 3), (5,) or ()");
    SkipSpace();
    if (Consume(')')) return shape;
    bool comma = false;
    while (true) {
      shape.push_back(ParseInt());
      SkipSpace();
      if (Consume(',')) {
        comma = true;
        SkipSpace();
        if (Consume(')')) break;
        continue;
      }
      if (Consume(')')) break;
      Error("expected ',' or ')' in 'shape'");
    }
    if (shape.size() == 1 && !comma) {
      Error("the value of 'shape' is a parenthesized int, not a tuple (write (" +
            std::to_string(shape[0]) + ",))");
    }
    return shape;
  }

  std::string_view text_;
  size_t offset_;
  const std::string& source_;
  size_t pos_ = 0;
};

// The element type of a descr such as '<f4', and whether its bytes need swapping, or nullopt.
struct DescrType {
  DataType dtype;
  bool swap;
};
std::optional<DescrType> TypeOfDescr(std::string_view descr) {
  if (descr.size() < 3) return std::nullopt;
  char order = descr[0], kind = descr[1];
  if (order != '<' && order != '>' && order != '=' && order != '|') return std::nullopt;
  std::string_view size_text = descr.substr(2);
  if (size_text != "1" && size_text != "2" && size_text != "4" && size_text != "8") {
    return std::nullopt;
  }
  unsigned size = static_cast<unsigned>(size_text[0] - '0');
  if (order == '|' && size != 1) return std::nullopt;  // '|' is for byte-sized types only
  bool swap = order == '>' && size > 1;
  switch (kind) {
    case 'b':
      if (size == 1) return DescrType{DataType::Bool(), false};
      return std::nullopt;
    case 'i':
      return DescrType{DataType::Int(size * 8), swap};
    case 'u':
      return DescrType{DataType::UInt(size * 8), swap};
    case 'f':
      if (size == 1) return std::nullopt;
      return DescrType{DataType::Float(size * 8), swap};
    default:
      return std::nullopt;
  }
}

// The descr serialize_npy writes for `dtype`; throws ValueError if .npy cannot represent it.
std::string DescrOfType(DataType dtype) {
  const std::string name = dtype.str();
  if (dtype.lanes != 1) {
    throw ValueError("cannot write dtype " + name + " to .npy: .npy elements have one lane; " +
                     "store it as " + DataType(dtype.code, dtype.bits).str() +
                     " with an extra last dimension of " + std::to_string(dtype.lanes));
  }
  if (dtype.code == kDLBfloat) {
    throw ValueError("cannot write dtype " + name +
                     " to .npy: numpy has no bfloat16 dtype; convert it to float32 first");
  }
  const bool int_bits = dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
  const std::string size = std::to_string(dtype.bits / 8);
  const char order = dtype.bits == 8 ? '|' : '<';
  switch (dtype.code) {
    case KILN_DL_BOOL:
      if (dtype.bits == 8) return "|b1";
      break;
    case kDLInt:
      if (int_bits) return order + std::string("i") + size;
      break;
    case kDLUInt:
      if (int_bits) return order + std::string("u") + size;
      break;
    case kDLFloat:
      if (int_bits && dtype.bits != 8) return order + std::string("f") + size;
      break;
    default:
      break;
  }
  throw ValueError("cannot write dtype " + name +
                   " to .npy: supported are bool, int8..int64, uint8..uint64, float16, float32 " +
                   "and float64");
}

uint32_t ReadLittleEndian(std::span<const uint8_t> bytes) {
  uint32_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

NpyArray parse_npy(std::span<const uint8_t> bytes, const std::string& source) {
  // Preamble: magic, version, header length.
  if (bytes.empty()) Fail(source, "not a .npy file: the file is empty");
  if (bytes.size() < kNpyMagicSize ||
      !std::equal(kNpyMagic, kNpyMagic + kNpyMagicSize, bytes.begin())) {
    Fail(source, "not a .npy file: expected the magic string \\x93NUMPY at byte offset 0, found '" +
                     Printable(bytes.first(std::min(bytes.size(), kNpyMagicSize))) + "'" +
                     (bytes.size() < kNpyMagicSize
                          ? " (the file has only " + std::to_string(bytes.size()) + " bytes)"
                          : std::string()));
  }
  if (bytes.size() < kNpyMagicSize + 2) {
    Fail(source, "truncated .npy file: the version at byte offset 6 is missing (the file has " +
                     std::to_string(bytes.size()) + " bytes)");
  }
  const unsigned major = bytes[6], minor = bytes[7];
  const std::string version = std::to_string(major) + "." + std::to_string(minor);
  if (minor != 0 || major < 1 || major > 3) {
    Fail(source, "unsupported .npy format version " + version +
                     " at byte offset 6 (supported: 1.0, 2.0, 3.0)");
  }
  const size_t length_size = major == 1 ? 2 : 4;
  const size_t header_offset = kNpyMagicSize + 2 + length_size;
  if (bytes.size() < header_offset) {
    Fail(source, "truncated .npy header: format " + version + " needs " +
                     std::to_string(header_offset) +
                     " bytes before the header, the file has only " + std::to_string(bytes.size()));
  }
  const size_t header_length = ReadLittleEndian(bytes.subspan(kNpyMagicSize + 2, length_size));
  if (header_length > bytes.size() - header_offset) {
    Fail(source, "truncated .npy header: the header length at byte offset 8 says " +
                     std::to_string(header_length) + " bytes, ending at byte offset " +
                     std::to_string(header_offset + header_length) + ", but the file has only " +
                     std::to_string(bytes.size()) + " bytes");
  }
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + header_offset),
                                     header_length);
  const Header header = HeaderParser(header_text, header_offset, source).Parse();

  // Meaning of the header.
  const std::optional<DescrType> type = TypeOfDescr(header.descr);
  if (!type) {
    Fail(source, "unsupported dtype descr '" + Printable(header.descr) +
                     "' (supported: " + kSupportedDescrs + "); header: " + Printable(header_text));
  }
  if (header.fortran_order) {
    Fail(source,
         "Fortran-order .npy files are not supported; save with np.ascontiguousarray; header: " +
             Printable(header_text));
  }
  for (size_t i = 0; i < header.shape.size(); ++i) {
    if (header.shape[i] < 0) {
      Fail(source, "negative dimension " + std::to_string(header.shape[i]) + " at index " +
                       std::to_string(i) + " of shape " + ShapeText(header.shape) +
                       "; header: " + Printable(header_text));
    }
  }
  const std::optional<uint64_t> count = NumElements(header.shape);
  uint64_t expected = 0;
  if (!count || __builtin_mul_overflow(*count, type->dtype.bytes(), &expected)) {
    Fail(source,
         "shape " + ShapeText(header.shape) + " of " + type->dtype.str() +
             " is too large: its size overflows 64 bits; header: " + Printable(header_text));
  }

  // Data.
  const size_t data_offset = header_offset + header_length;
  const size_t found = bytes.size() - data_offset;
  const std::string expectation = "expected " + std::to_string(expected) +
                                  " bytes of data at byte offset " + std::to_string(data_offset) +
                                  " for shape " + ShapeText(header.shape) + " of " +
                                  type->dtype.str() + ", found " + std::to_string(found);
  if (found < expected) Fail(source, "truncated data: " + expectation);
  if (found > expected) {
    Fail(source,
         std::to_string(found - expected) +
             " extra bytes after the array data (trailing data is not allowed): " + expectation);
  }
  NpyArray array;
  array.dtype = type->dtype;
  array.shape = header.shape;
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_offset), bytes.end());
  if (type->swap) {
    const size_t item = type->dtype.bytes();
    for (size_t i = 0; i + item <= array.data.size(); i += item) {
      std::reverse(array.data.begin() + static_cast<std::ptrdiff_t>(i),
                   array.data.begin() + static_cast<std::ptrdiff_t>(i + item));
    }
  }
  return array;
}

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw NotFoundError(name + ": no such .npy file");
    throw RuntimeError(name + ": cannot open .npy file: " + SystemError(err));
  }
  std::vector<uint8_t> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw RuntimeError(name + ": cannot read .npy file: " + SystemError(EISDIR));
    }
    if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  }
  uint8_t buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      ::close(fd);
      throw RuntimeError(name + ": cannot read .npy file: " + SystemError(err));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  ::close(fd);
  return parse_npy(bytes, name);
}

std::vector<uint8_t> serialize_npy(DataType dtype, std::span<const int64_t> shape, const void* data,
                                   size_t nbytes) {
  const std::string descr = DescrOfType(dtype);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      throw ValueError("negative dimension " + std::to_string(shape[i]) + " at index " +
                       std::to_string(i) + " of shape " + ShapeText(shape));
    }
  }
  const std::optional<uint64_t> count = NumElements(shape);
  uint64_t expected = 0;
  if (!count || __builtin_mul_overflow(*count, dtype.bytes(), &expected)) {
    throw ValueError("shape " + ShapeText(shape) + " of " + dtype.str() +
                     " is too large: its size overflows 64 bits");
  }
  if (nbytes != expected) {
    throw ValueError("data size mismatch: shape " + ShapeText(shape) + " of " + dtype.str() +
                     " needs " + std::to_string(expected) + " bytes, got " +
                     std::to_string(nbytes));
  }
  if (data == nullptr && nbytes > 0) {
    throw ValueError("data is null but nbytes is " + std::to_string(nbytes));
  }

  const std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + ShapeText(shape) + ", }";
  // Version 1.0 stores the header length in 2 bytes, 2.0 in 4.
  size_t header_offset = kNpyMagicSize + 2 + 2;
  size_t unpadded = header_offset + dict.size() + 1;  // + 1 for the final '\n'
  size_t header_length = dict.size() + 1 + (kAlign - unpadded % kAlign) % kAlign;
  uint8_t major = 1;
  if (header_length > 0xffff) {
    major = 2;
    header_offset = kNpyMagicSize + 2 + 4;
    unpadded = header_offset + dict.size() + 1;
    header_length = dict.size() + 1 + (kAlign - unpadded % kAlign) % kAlign;
    if (header_length > 0xffffffffu) {
      throw ValueError("shape " + ShapeText(shape) + " needs a header larger than 4 GiB");
    }
  }

  // The layout is known in full: size the buffer once and copy each part to its offset
  // (magic, version, header length, the dict padded with spaces, '\n', the data).
  std::vector<uint8_t> out(header_offset + header_length + nbytes, ' ');
  uint8_t* p = out.data();
  std::memcpy(p, kNpyMagic, kNpyMagicSize);
  p[kNpyMagicSize] = major;
  p[kNpyMagicSize + 1] = 0;
  for (size_t i = 0; i < header_offset - kNpyMagicSize - 2; ++i) {
    p[kNpyMagicSize + 2 + i] = static_cast<uint8_t>(header_length >> (8 * i));
  }
  std::memcpy(p + header_offset, dict.data(), dict.size());
  p[header_offset + header_length - 1] = '\n';
  if (nbytes > 0) std::memcpy(p + header_offset + header_length, data, nbytes);
  return out;
}

void write_npy(const std::filesystem::path& path, DataType dtype, std::span<const int64_t> shape,
               const void* data, size_t nbytes) {
  const std::string name = path.string();
  std::vector<uint8_t> bytes;
  try {
    bytes = serialize_npy(dtype, shape, data, nbytes);
  } catch (const ValueError& e) {
    throw ValueError(name + ": " + e.what());
  }

  // The one atomic writer (kiln::sdk::AtomicFile): a temporary file beside `path`, unique per
  // process and call, flushed and renamed over it; removed when anything fails.
  try {
    sdk::write_file_atomically(
        path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const sdk::Error& e) {
    throw RuntimeError(name + ": " + e.what());
  }
}

// ---- tensors ----

Tensor Tensor::load_npy(const std::filesystem::path& path) {
  NpyArray array = read_npy(path);
  Tensor host = empty_host(array.shape, array.dtype);
  host.copy_from(array.data.data(), array.data.size());
  return host;
}

Tensor Tensor::load_npy(const std::filesystem::path& path, Device device,
                        const DeviceContext& context) {
  Tensor host = load_npy(path);
  return device.type == kDLCPU && device.id == 0 ? host : host.to(device, context);
}

void Tensor::save_npy(const std::filesystem::path& path) const {
  Tensor host = device().type == kDLCPU ? *this : to_host();
  if (!host.is_contiguous()) throw ValueError("save_npy: the tensor is not contiguous");
  write_npy(path, dtype(), shape(), host.data(), host.nbytes());
}

}  // namespace kiln
