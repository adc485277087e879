// SPDX-License-Identifier: Apache-2.0
#include "tvm/relax_executable.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "kiln/error.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::tvm_interop {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMagicV1 = 0xD225DE2F4214151DULL;  // without the memory-scope section
constexpr uint64_t kMagicV2 = 0xD225DE2F4214151EULL;
constexpr const char* kVersion = "0.14";
constexpr uint64_t kTensorMagic = 0xDD5E40F096B4A13FULL;

// Constant tags (tvm-ffi type indices).
constexpr int32_t kTagInt = 1;
constexpr int32_t kTagFloat = 3;
constexpr int32_t kTagDataType = 5;
constexpr int32_t kTagString = 65;
constexpr int32_t kTagShape = 69;
constexpr int32_t kTagTensor = 70;

// Function kinds of VMFuncInfo.
constexpr int32_t kPackedFunc = 0;
constexpr int32_t kVMFunc = 1;
constexpr int32_t kVMTIRFunc = 2;

// Bounded little-endian reads naming the section being read.
class ExecutableReader {
 public:
  ExecutableReader(std::span<const uint8_t> bytes, std::string where)
      : bytes_(bytes), where_(std::move(where)) {}
  void section(const char* name) { section_ = name; }

  template <typename T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  uint64_t count(const char* what, uint64_t min_item_bytes) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(what);
    if (n > left() / std::max<uint64_t>(min_item_bytes, 1)) {
      fail(at, fmt::format("{} count {} does not fit in the {} bytes left", what, n, left()));
    }
    return n;
  }
  std::string str(const char* what) {
    const uint64_t n = count(what, 1);
    return std::string(reinterpret_cast<const char*>(take(n, what)), n);
  }
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left()) {
      fail(pos_, fmt::format("truncated: the {} needs {} bytes, {} are left", what, n, left()));
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t offset() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }
  [[noreturn]] void fail(uint64_t at, const std::string& message) const {
    throw ValueError(fmt::format("{}: {} section, byte {}: {}", where_, section_, at, message));
  }

 private:
  std::span<const uint8_t> bytes_;
  std::string where_;
  const char* section_ = "header";
  uint64_t pos_ = 0;
};

Tensor read_tensor(ExecutableReader& r) {
  const uint64_t at = r.offset();
  if (r.read<uint64_t>("tensor magic") != kTensorMagic) r.fail(at, "not a tensor (bad magic)");
  r.read<uint64_t>("tensor reserved word");
  const int32_t device_type = r.read<int32_t>("tensor device");
  r.read<int32_t>("tensor device id");
  if (device_type != kDLCPU) {
    r.fail(at, fmt::format("a tensor constant on device type {}; constants are stored on the CPU",
                           device_type));
  }
  const int32_t ndim = r.read<int32_t>("tensor ndim");
  if (ndim < 0 || ndim > 32) r.fail(at, fmt::format("a tensor constant with {} dimensions", ndim));
  DLDataType dtype{};
  dtype.code = r.read<uint8_t>("tensor dtype");
  dtype.bits = r.read<uint8_t>("tensor dtype");
  dtype.lanes = r.read<uint16_t>("tensor dtype");
  if (dtype.bits == 0 || dtype.lanes == 0) r.fail(at, "a tensor constant of an empty dtype");
  std::vector<int64_t> shape(static_cast<size_t>(ndim));
  uint64_t elements = 1;
  for (int64_t& d : shape) {
    d = r.read<int64_t>("tensor shape");
    if (d < 0 || (d > 0 && elements > (uint64_t{1} << 48) / static_cast<uint64_t>(d))) {
      r.fail(at, fmt::format("a tensor constant of extent {}", d));
    }
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t nbytes = r.read<uint64_t>("tensor byte size");
  // TVM writes elements x ceil(bits / 8), ignoring lanes.
  const uint64_t expected = elements * ((dtype.bits + 7u) / 8u);
  if (nbytes != expected) {
    r.fail(at, fmt::format("a tensor constant of {} elements with {} data bytes, expected {}",
                           elements, nbytes, expected));
  }
  const uint8_t* data = r.take(nbytes, "tensor data");
  if (dtype.lanes != 1) r.fail(at, "a vector-typed (lanes > 1) tensor constant");
  Tensor t = Tensor::empty_host(std::move(shape), DataType(dtype));
  t.copy_from(data, nbytes);
  return t;
}

}  // namespace

bool is_relax_executable(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, bytes.data(), 8);
  return magic == kMagicV1 || magic == kMagicV2;
}

vm::Executable read_relax_executable(std::span<const uint8_t> bytes, const std::string& where) {
  ExecutableReader r(bytes, where);
  const uint64_t magic = r.read<uint64_t>("magic");
  if (magic != kMagicV1 && magic != kMagicV2) {
    r.fail(0, fmt::format("magic {:#018x} is not a Relax VM executable's", magic));
  }
  r.section("version");
  const uint64_t version_at = r.offset();
  if (const std::string v = r.str("version"); v != kVersion) {
    r.fail(version_at,
           fmt::format("version '{}', Kiln reads version '{}' (TVM 0.21 to 0.27)", v, kVersion));
  }

  vm::Executable exec;
  r.section("Global");
  // Smallest entry: kind, name length, four i64 and the parameter count.
  const uint64_t n_functions = r.count("function", 4 + 8 + 32 + 8);
  for (uint64_t i = 0; i < n_functions; ++i) {
    const uint64_t at = r.offset();
    vm::FuncInfo info;
    const int32_t kind = r.read<int32_t>("function kind");
    info.name = r.str("function name");
    info.start_instr = r.read<int64_t>("start instruction");
    info.end_instr = r.read<int64_t>("end instruction");
    info.num_args = r.read<int64_t>("argument count");
    info.register_file_size = r.read<int64_t>("register file size");
    const uint64_t n_params = r.count("parameter name", 8);
    for (uint64_t p = 0; p < n_params; ++p) info.param_names.push_back(r.str("parameter name"));
    if (kind == kPackedFunc) {
      info.kind = vm::FuncKind::kPackedFunc;
      // TVM marks a packed function's arity unknown (-2); Kiln's table says 0 for "not checked".
      if (info.num_args < 0) info.num_args = 0;
    } else if (kind == kVMFunc) {
      info.kind = vm::FuncKind::kVMFunc;
    } else if (kind == kVMTIRFunc) {
      r.fail(at, fmt::format("function '{}' is a VMTIRFunc (a TIR function the VM would call "
                             "as bytecode), which Kiln's VM does not run",
                             info.name));
    } else {
      r.fail(at, fmt::format("function '{}' has unknown kind {}", info.name, kind));
    }
    exec.func_table.push_back(std::move(info));
  }

  if (magic == kMagicV2) {
    r.section("memory scopes");
    const uint64_t n_scopes = r.count("memory scope", 16);
    for (uint64_t i = 0; i < n_scopes; ++i) {
      const uint64_t at = r.offset();
      r.read<int64_t>("constant index");
      if (const std::string scope = r.str("memory scope"); scope != "global") {
        r.fail(at, fmt::format("memory scope '{}': Kiln allocates in 'global' memory only", scope));
      }
    }
  }

  r.section("constant");
  const uint64_t n_constants = r.count("constant", 4);
  for (uint64_t i = 0; i < n_constants; ++i) {
    const uint64_t at = r.offset();
    const int32_t tag = r.read<int32_t>("constant tag");
    switch (tag) {
      case kTagTensor:
        exec.constants.emplace_back(read_tensor(r));
        break;
      case kTagShape: {
        vm::ShapeConstant shape;
        const uint64_t n = r.count("shape dimension", 8);
        for (uint64_t d = 0; d < n; ++d) shape.dims.push_back(r.read<int64_t>("shape dimension"));
        exec.constants.emplace_back(std::move(shape));
        break;
      }
      case kTagString:
        exec.constants.emplace_back(r.str("string constant"));
        break;
      case kTagInt:
        exec.constants.emplace_back(r.read<int64_t>("int constant"));
        break;
      case kTagFloat:
        exec.constants.emplace_back(r.read<double>("float constant"));
        break;
      case kTagDataType: {
        DLDataType t{};
        t.code = r.read<uint8_t>("dtype constant");
        t.bits = r.read<uint8_t>("dtype constant");
        t.lanes = r.read<uint16_t>("dtype constant");
        exec.constants.emplace_back(DataType(t));
        break;
      }
      default:
        r.fail(at, fmt::format("constant {} has unknown tag {} (known: 70 tensor, 69 shape, 65 "
                               "string, 1 int, 3 float, 5 dtype)",
                               i, tag));
    }
  }

  r.section("instr offset");
  const uint64_t n_offsets = r.count("instruction offset", 8);
  exec.instr_offset.resize(n_offsets);
  for (auto& w : exec.instr_offset) w = r.read<int64_t>("instruction offset");
  r.section("instr data");
  const uint64_t n_words = r.count("instruction word", 8);
  exec.instr_data.resize(n_words);
  for (auto& w : exec.instr_data) w = r.read<int64_t>("instruction word");
  if (r.left() != 0) r.fail(r.offset(), fmt::format("{} bytes follow the code", r.left()));

  try {
    exec.rebuild_func_map();
    exec.validate();  // the instruction encoding is TVM's: opcodes, registers, indices, jumps
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", where, e.what()));
  }
  return exec;
}

namespace {

std::vector<uint8_t> read_file(const fs::path& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NotFoundError(fmt::format("cannot open {}", path.string()));
  std::vector<uint8_t> bytes(limit);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(limit));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

class RelaxExecutableLoader : public FormatLoader {
 public:
  std::string describe() const override { return "TVM Relax VM executables"; }
  std::vector<std::string> formats() const override { return {"vmexec"}; }
  bool accepts(const fs::path& path, const std::string&) const override {
    try {
      return is_relax_executable(read_file(path, 8));
    } catch (const Error&) {
      return false;
    }
  }
  Module load(const fs::path& path, ModuleLoadContext& context) const override {
    std::vector<uint8_t> bytes = read_file(path, static_cast<size_t>(fs::file_size(path)));
    vm::Executable exec = read_relax_executable(bytes, path.string());
    return vm::make_executable_module(std::move(exec), {}, path.filename().string() + ".kvm",
                                      context.devices());
  }
};

}  // namespace

std::shared_ptr<const FormatLoader> relax_executable_format_loader() {
  return std::make_shared<RelaxExecutableLoader>();
}

}  // namespace kiln::tvm_interop
