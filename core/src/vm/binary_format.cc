// SPDX-License-Identifier: Apache-2.0
// The binary form of a VM executable (docs/vm.md "Binary form"): a 16-byte header, then the
// sections imports, functions, constants and code, each as a u32 id, a u64 payload size and the
// payload; everything little-endian. The reader bounds every count and length by the bytes
// left in its section before it allocates, and names the section and byte offset of every
// problem.
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "kiln/error.h"
#include "kiln/vm/executable.h"
#include "vm/exec_format.h"

namespace kiln::vm {

static_assert(std::endian::native == std::endian::little,
              "binary_format.cc copies little-endian words directly");

namespace {

constexpr uint8_t kMagic[8] = {0x89, 'K', 'V', 'M', '\r', '\n', 0x1a, '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 16;         // magic, u32 version, u32 flags
constexpr size_t kSectionHeaderSize = 12;  // u32 id, u64 payload size

struct Section {
  uint32_t id;
  const char* name;
};
constexpr Section kImports{1, "imports"};
constexpr Section kFunctions{2, "functions"};
constexpr Section kConstants{3, "constants"};
constexpr Section kCode{4, "code"};

enum ConstantTag : uint8_t {
  kTagTensor = 1,
  kTagShape = 2,
  kTagString = 3,
  kTagInt = 4,
  kTagFloat = 5,
  kTagDType = 6,
  kTagDevice = 7,
};

// The smallest encodings, which bound element counts by the bytes left.
constexpr size_t kMinStringBytes = 8;     // u64 length
constexpr size_t kMinFunctionBytes = 49;  // u8 kind, name, 4 x i64, u64 param count
constexpr size_t kMinConstantBytes = 5;   // u8 tag + dtype

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  void f64(double v) { put(std::bit_cast<uint64_t>(v), 8); }
  void bytes(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    if (n > 0) out_.insert(out_.end(), p, p + n);
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void i64s(const std::vector<int64_t>& v) {
    u64(v.size());
    bytes(v.data(), v.size() * sizeof(int64_t));
  }
  // Starts a section; returns where its size goes.
  size_t begin_section(const Section& s) {
    u32(s.id);
    const size_t at = out_.size();
    u64(0);
    return at;
  }
  void end_section(size_t at) {
    const uint64_t size = out_.size() - at - 8;
    for (int i = 0; i < 8; ++i)
      out_[at + static_cast<size_t>(i)] = static_cast<uint8_t>(size >> (8 * i));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes), end_(bytes.size()) {}

  Executable read() {
    Executable exec;
    read_header();
    begin_section(kImports);
    exec.imports.resize(count("import", kMinStringBytes));
    for (std::string& s : exec.imports) s = str("import name");
    end_section();

    begin_section(kFunctions);
    const size_t functions_at = pos_;
    exec.func_table.resize(count("function", kMinFunctionBytes));
    for (FuncInfo& f : exec.func_table) read_function(f);
    try {
      exec.rebuild_func_map();
    } catch (const ValueError& e) {
      fail(functions_at, e.what());
    }
    end_section();

    begin_section(kConstants);
    const size_t num_constants = count("constant", kMinConstantBytes);
    exec.constants.reserve(num_constants);
    for (size_t i = 0; i < num_constants; ++i) exec.constants.push_back(read_constant(i));
    end_section();

    begin_section(kCode);
    exec.instr_offset = i64s("instruction offset");
    exec.instr_data = i64s("instruction word");
    end_section();

    section_ = "end of file";
    if (pos_ != bytes_.size()) {
      fail(pos_, fmt::format("{} trailing bytes after the code section", bytes_.size() - pos_));
    }
    exec.validate();
    return exec;
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    throw ValueError(
        fmt::format("invalid VM executable: {} at byte offset {}: {}", section_, offset, what));
  }
  size_t remaining() const { return end_ - pos_; }
  void need(size_t n, const char* what) {
    if (n > remaining()) {
      fail(pos_, fmt::format("truncated: {} needs {} bytes, {} remain{}", what, n, remaining(),
                             end_ == bytes_.size() ? "" : " in the section"));
    }
  }
  uint64_t le(size_t n, const char* what) {
    need(n, what);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | bytes_[pos_ + i];
    pos_ += n;
    return v;
  }
  uint8_t u8(const char* what) { return static_cast<uint8_t>(le(1, what)); }
  uint16_t u16(const char* what) { return static_cast<uint16_t>(le(2, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
  uint64_t u64(const char* what) { return le(8, what); }
  int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
  int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }

  // A u64 count of elements that take at least `min_bytes` each, checked against the bytes
  // left before anything is allocated for them.
  size_t count(const char* what, size_t min_bytes) {
    const size_t at = pos_;
    const uint64_t n = u64(what);
    if (n > remaining() / min_bytes) {
      fail(at, fmt::format("{} count {} cannot fit in the {} bytes left (each takes at least {})",
                           what, n, remaining(), min_bytes));
    }
    return static_cast<size_t>(n);
  }
  std::string str(const char* what) {
    const size_t at = pos_;
    const uint64_t n = u64(what);
    if (n > remaining()) {
      fail(at, fmt::format("truncated: {} of {} bytes, {} remain", what, n, remaining()));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  std::vector<int64_t> i64s(const char* what) {
    std::vector<int64_t> v(count(what, sizeof(int64_t)));
    if (!v.empty()) std::memcpy(v.data(), bytes_.data() + pos_, v.size() * sizeof(int64_t));
    pos_ += v.size() * sizeof(int64_t);
    return v;
  }

  void read_header() {
    section_ = "header";
    if (bytes_.empty()) fail(0, "the input is empty (not a Kiln VM executable)");
    const size_t n = std::min(bytes_.size(), sizeof(kMagic));
    if (std::memcmp(bytes_.data(), kMagic, n) != 0) {
      fail(0, fmt::format("bad magic {:02x} (expected {:02x}): not a Kiln VM executable",
                          fmt::join(bytes_.first(n), " "), fmt::join(kMagic, " ")));
    }
    need(kHeaderSize, "the header");
    pos_ = sizeof(kMagic);
    const uint32_t version = u32("the version");
    if (version != kFormatVersion) {
      fail(8, fmt::format("unsupported format version {} (this build reads version {})", version,
                          kFormatVersion));
    }
    const uint32_t flags = u32("the flags");
    if (flags != 0) fail(12, fmt::format("reserved flags 0x{:08x} must be 0", flags));
  }

  void begin_section(const Section& s) {
    section_ = fmt::format("{} section", s.name);
    const size_t at = pos_;
    need(kSectionHeaderSize, "the section header (u32 id, u64 size)");
    const uint32_t id = u32("the section id");
    if (id != s.id) {
      fail(at,
           fmt::format("expected the {} section (id {}), found section id {}", s.name, s.id, id));
    }
    const uint64_t size = u64("the section size");
    if (size > remaining()) {
      fail(at + 4, fmt::format("truncated: the section size is {} bytes, {} remain in the input",
                               size, remaining()));
    }
    end_ = pos_ + static_cast<size_t>(size);
  }
  void end_section() {
    if (pos_ != end_)
      fail(pos_, fmt::format("{} unread bytes at the end of the section", end_ - pos_));
    end_ = bytes_.size();
  }

  void read_function(FuncInfo& f) {
    const size_t at = pos_;
    const uint8_t kind = u8("the function kind");
    if (kind > 1) fail(at, fmt::format("unknown function kind {} (0 PackedFunc, 1 VMFunc)", kind));
    f.kind = static_cast<FuncKind>(kind);
    f.name = str("the function name");
    f.start_instr = i64("start_instr");
    f.end_instr = i64("end_instr");
    f.num_args = i64("num_args");
    f.register_file_size = i64("register_file_size");
    f.param_names.resize(count("param name", kMinStringBytes));
    for (std::string& p : f.param_names) p = str("the param name");
  }

  DataType dtype(const char* what) {
    const size_t at = pos_;
    DataType t;
    t.code = u8(what);
    t.bits = u8(what);
    t.lanes = u16(what);
    if (!detail::is_valid_dtype(t)) {
      fail(at, fmt::format("{} (code {}, bits {}, lanes {}) is not a supported data type", what,
                           t.code, t.bits, t.lanes));
    }
    return t;
  }

  Constant read_constant(size_t index) {
    const size_t at = pos_;
    const uint8_t tag = u8("the constant tag");
    switch (tag) {
      case kTagTensor:
        return read_tensor(index);
      case kTagShape: {
        ShapeConstant s;
        s.dims = i64s("shape dimension");
        return s;
      }
      case kTagString:
        return str("the string constant");
      case kTagInt:
        return i64("the int constant");
      case kTagFloat:
        return std::bit_cast<double>(u64("the float constant"));
      case kTagDType:
        return dtype("the dtype constant");
      case kTagDevice: {
        const size_t dev_at = pos_;
        Device d;
        d.type = i32("the device type");
        d.id = i32("the device id");
        if (d.type < 0 || d.id < 0) {
          fail(dev_at, fmt::format("constant c[{}]: negative device type or id ({}, {})", index,
                                   d.type, d.id));
        }
        return d;
      }
      default:
        fail(at, fmt::format("constant c[{}] has the unknown tag {} (1 tensor, 2 shape, 3 string, "
                             "4 int, 5 float, 6 dtype, 7 device)",
                             index, tag));
    }
  }

  Tensor read_tensor(size_t index) {
    const DataType t = dtype("the tensor dtype");
    const size_t ndim_at = pos_;
    const uint32_t ndim = u32("the tensor ndim");
    if (ndim > remaining() / sizeof(int64_t)) {
      fail(ndim_at, fmt::format("constant c[{}]: {} dimensions cannot fit in the {} bytes left",
                                index, ndim, remaining()));
    }
    std::vector<int64_t> shape(ndim);
    uint64_t numel = 1;
    bool overflow = false;
    for (uint32_t i = 0; i < ndim; ++i) {
      const size_t dim_at = pos_;
      shape[i] = i64("a tensor dimension");
      if (shape[i] < 0) {
        fail(dim_at, fmt::format("constant c[{}]: negative dimension {}", index, shape[i]));
      }
      overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(shape[i]), &numel);
    }
    uint64_t expected = 0;
    if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, t.bytes(), &expected)) {
      fail(ndim_at, fmt::format("constant c[{}]: shape [{}] has too many elements", index,
                                fmt::join(shape, ", ")));
    }
    const size_t size_at = pos_;
    const uint64_t nbytes = u64("the tensor data size");
    if (nbytes != expected) {
      fail(size_at, fmt::format("constant c[{}]: data size {} does not match shape [{}] of {} ({} "
                                "bytes)",
                                index, nbytes, fmt::join(shape, ", "), t.str(), expected));
    }
    if (nbytes > remaining()) {
      fail(size_at, fmt::format("truncated: constant c[{}] has {} bytes of tensor data, {} remain",
                                index, nbytes, remaining()));
    }
    Tensor tensor = Tensor::empty_host(std::move(shape), t);
    if (nbytes > 0) std::memcpy(tensor.data(), bytes_.data() + pos_, static_cast<size_t>(nbytes));
    pos_ += static_cast<size_t>(nbytes);
    return tensor;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  size_t end_;  // end of the current section (of the input outside sections)
  std::string section_;
};

}  // namespace

std::vector<uint8_t> Executable::save_to_bytes() const {
  validate();
  Writer w;
  w.bytes(kMagic, sizeof(kMagic));
  w.u32(kFormatVersion);
  w.u32(0);

  size_t at = w.begin_section(kImports);
  w.u64(imports.size());
  for (const std::string& s : imports) w.str(s);
  w.end_section(at);

  at = w.begin_section(kFunctions);
  w.u64(func_table.size());
  for (const FuncInfo& f : func_table) {
    w.u8(static_cast<uint8_t>(f.kind));
    w.str(f.name);
    w.i64(f.start_instr);
    w.i64(f.end_instr);
    w.i64(f.num_args);
    w.i64(f.register_file_size);
    w.u64(f.param_names.size());
    for (const std::string& p : f.param_names) w.str(p);
  }
  w.end_section(at);

  at = w.begin_section(kConstants);
  w.u64(constants.size());
  for (const Constant& c : constants) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            w.u8(kTagTensor);
            const DataType t = x.dtype();
            w.u8(t.code);
            w.u8(t.bits);
            w.u16(t.lanes);
            w.u32(static_cast<uint32_t>(x.ndim()));
            for (int64_t d : x.shape()) w.i64(d);
            w.u64(x.nbytes());
            w.bytes(x.data(), x.nbytes());
          } else if constexpr (std::is_same_v<T, ShapeConstant>) {
            w.u8(kTagShape);
            w.i64s(x.dims);
          } else if constexpr (std::is_same_v<T, std::string>) {
            w.u8(kTagString);
            w.str(x);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            w.u8(kTagInt);
            w.i64(x);
          } else if constexpr (std::is_same_v<T, double>) {
            w.u8(kTagFloat);
            w.f64(x);
          } else if constexpr (std::is_same_v<T, DataType>) {
            w.u8(kTagDType);
            w.u8(x.code);
            w.u8(x.bits);
            w.u16(x.lanes);
          } else {
            w.u8(kTagDevice);
            w.i32(x.type);
            w.i32(x.id);
          }
        },
        c);
  }
  w.end_section(at);

  at = w.begin_section(kCode);
  w.i64s(instr_offset);
  w.i64s(instr_data);
  w.end_section(at);
  return w.take();
}

Executable Executable::load_from_bytes(std::span<const uint8_t> bytes) {
  return Reader(bytes).read();
}

bool Executable::has_binary_magic(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
}

}  // namespace kiln::vm
