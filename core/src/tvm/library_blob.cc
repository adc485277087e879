// SPDX-License-Identifier: Apache-2.0
#include "tvm/library_blob.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln::tvm_interop {

namespace {

// Little-endian reads of TVM's serialization (u64 counts, strings as u64 length + bytes) from a
// bounded span; `base` is the offset of the span in what `where` names.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, std::string where, uint64_t base = 0)
      : bytes_(bytes), where_(std::move(where)), base_(base) {}

  uint64_t u64(const char* what) {
    uint64_t v = 0;
    std::memcpy(&v, take(8, what), 8);
    return v;
  }
  // A count of items of at least `min_item_bytes` each, bounded by the bytes left.
  uint64_t count(const char* what, uint64_t min_item_bytes) {
    const uint64_t at = offset();
    const uint64_t n = u64(what);
    if (min_item_bytes > 0 && n > left() / min_item_bytes) {
      fail(at, fmt::format("{} count {} needs at least {} bytes, {} are left", what, n,
                           n * min_item_bytes, left()));
    }
    return n;
  }
  std::string str(const char* what) {
    const uint64_t n = count(what, 1);
    const auto* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  // A string that names something in code (a kernel, a launch tag): printable ASCII, as the
  // identifiers TVM writes are; anything else is corrupt (and would not survive the JSON of
  // Kiln's kernel metadata).
  std::string name(const char* what) {
    const uint64_t at = offset();
    std::string s = str(what);
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x21 || c > 0x7e) {
        fail(at, fmt::format("the {} has byte 0x{:02x} at position {}, not printable ASCII", what,
                             c, i));
      }
    }
    return s;
  }
  std::vector<uint8_t> bytes(const char* what) {
    const uint64_t n = count(what, 1);
    const auto* p = take(n, what);
    return {p, p + n};
  }
  uint8_t u8(const char* what) { return *take(1, what); }
  uint16_t u16(const char* what) {
    uint16_t v = 0;
    std::memcpy(&v, take(2, what), 2);
    return v;
  }
  uint64_t offset() const { return base_ + pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }
  [[noreturn]] void fail(uint64_t at, const std::string& message) const {
    throw ValueError(fmt::format("{}: byte {}: {}", where_, at, message));
  }

 private:
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left()) {
      fail(offset(), fmt::format("truncated: the {} needs {} bytes, {} are left", what, n, left()));
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

  std::span<const uint8_t> bytes_;
  std::string where_;
  uint64_t base_;
  uint64_t pos_ = 0;
};

// Rejects import cycles (a module reachable from itself), which would make modules own each
// other.
void check_acyclic(const std::vector<BlobModule>& modules, const std::string& where) {
  enum class Mark { kNone, kActive, kDone };
  std::vector<Mark> mark(modules.size(), Mark::kNone);
  std::vector<std::pair<size_t, size_t>> stack;  // (module, next import)
  for (size_t root = 0; root < modules.size(); ++root) {
    if (mark[root] != Mark::kNone) continue;
    stack.push_back({root, 0});
    mark[root] = Mark::kActive;
    while (!stack.empty()) {
      auto& [m, next] = stack.back();
      if (next == modules[m].imports.size()) {
        mark[m] = Mark::kDone;
        stack.pop_back();
        continue;
      }
      const size_t child = modules[m].imports[next++];
      if (mark[child] == Mark::kActive) {
        throw ValueError(fmt::format("{}: the import tree has a cycle through module {} ('{}')",
                                     where, child, modules[child].kind));
      }
      if (mark[child] == Mark::kNone) {
        mark[child] = Mark::kActive;
        stack.push_back({child, 0});
      }
    }
  }
}

}  // namespace

std::vector<BlobModule> parse_library_blob(std::span<const uint8_t> blob,
                                           const std::string& where) {
  Reader header(blob, where);
  const uint64_t nbytes = header.u64("blob length");
  if (nbytes > header.left()) {
    header.fail(0, fmt::format("the blob says it has {} bytes, but the symbol holds {} after its "
                               "length",
                               nbytes, header.left()));
  }
  Reader r(blob.subspan(8, nbytes), where, 8);
  const uint64_t indptr_at = r.offset();
  const uint64_t n_indptr = r.count("import tree index", 8);
  if (n_indptr < 2) r.fail(indptr_at, "the import tree has no module");
  std::vector<uint64_t> indptr(n_indptr);
  for (auto& v : indptr) v = r.u64("import tree index");
  const uint64_t n_children = r.count("import list", 8);
  std::vector<uint64_t> children(n_children);
  for (auto& v : children) v = r.u64("import");
  const size_t n_modules = n_indptr - 1;
  if (indptr[0] != 0 || indptr[n_modules] != n_children) {
    r.fail(indptr_at, fmt::format("the import tree's index runs from {} to {}, expected 0 to {}",
                                  indptr[0], indptr[n_modules], n_children));
  }
  // The whole index is checked before any import is read: with the ends right, a
  // non-decreasing index keeps every import position below n_children.
  for (size_t i = 0; i < n_modules; ++i) {
    if (indptr[i] > indptr[i + 1]) {
      r.fail(indptr_at, fmt::format("the import tree's index decreases at module {}", i));
    }
  }
  std::vector<BlobModule> modules(n_modules);
  for (size_t i = 0; i < n_modules; ++i) {
    for (uint64_t j = indptr[i]; j < indptr[i + 1]; ++j) {
      if (children[j] >= n_modules) {
        r.fail(indptr_at, fmt::format("module {} imports module {}, but there are {}", i,
                                      children[j], n_modules));
      }
      modules[i].imports.push_back(static_cast<size_t>(children[j]));
    }
  }
  bool have_lib = false;
  for (size_t i = 0; i < n_modules; ++i) {
    const uint64_t at = r.offset();
    modules[i].kind = r.str("module kind");
    if (modules[i].kind == "_lib") {
      if (have_lib) r.fail(at, "a second '_lib' module (the library can be placed once)");
      have_lib = true;
      continue;
    }
    if (modules[i].kind.empty()) r.fail(at, fmt::format("module {} has an empty kind", i));
    modules[i].bytes = r.bytes("module bytes");
  }
  check_acyclic(modules, where);
  return modules;
}

namespace {

// TVM's DLDataType codes in function tables.
constexpr uint8_t kCodeInt = 0;
constexpr uint8_t kCodeUInt = 1;
constexpr uint8_t kCodeFloat = 2;
constexpr uint8_t kCodeHandle = 3;

// Kiln's metadata name of a TVM argument type, or empty.
std::string arg_kind(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return "";
  switch (code) {
    case kCodeHandle:
      return "tensor";  // a buffer's data pointer
    case kCodeInt:
      return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? fmt::format("int{}", bits) : "";
    case kCodeUInt:
      return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? fmt::format("uint{}", bits) : "";
    case kCodeFloat:
      return bits == 32 || bits == 64 ? fmt::format("float{}", bits) : "";
    default:
      return "";
  }
}

// TVM's code format names -> Kiln's device code formats, per module kind.
struct CodeFormat {
  const char* kiln_format;
  const char* target;
};
const std::map<std::string, std::map<std::string, CodeFormat>> kBlobFormats = {
    {"opencl",
     {{"cl", {"opencl_c", "opencl"}},
      {"spirv", {"spirv", "opencl"}},
      {"spv", {"spirv", "opencl"}}}},
    {"cuda",
     {{"cuda", {"cuda_source", "cuda"}},
      {"ptx", {"ptx", "cuda"}},
      {"cubin", {"cubin", "cuda"}},
      {"fatbin", {"fatbin", "cuda"}}}},
    {"rocm", {{"hsaco", {"hsaco", "rocm"}}, {"hip", {"hip_source", "rocm"}}}},
    {"hip", {{"hsaco", {"hsaco", "rocm"}}, {"hip", {"hip_source", "rocm"}}}},
};

}  // namespace

bool is_device_module_kind(const std::string& kind) { return kBlobFormats.count(kind) != 0; }

DeviceCode device_code_from_tvm(const BlobModule& module, const std::string& where) {
  auto kind = kBlobFormats.find(module.kind);
  if (kind == kBlobFormats.end()) {
    throw ValueError(
        fmt::format("{}: Kiln does not load TVM modules of kind '{}'", where, module.kind));
  }
  Reader r(module.bytes, where);
  const uint64_t fmt_at = r.offset();
  const std::string code_format = r.str("code format");
  auto format = kind->second.find(code_format);
  if (format == kind->second.end()) {
    std::string known;
    for (const auto& [name, f] : kind->second) known += (known.empty() ? "" : ", ") + name;
    r.fail(fmt_at, fmt::format("'{}' module in code format '{}', which Kiln cannot load (it "
                               "loads {})",
                               module.kind, code_format, known));
  }
  nlohmann::json kernels = nlohmann::json::object();
  // Smallest entry: key, name (8 each), arg, tag and extra-tag counts (8 each).
  const uint64_t n_functions = r.count("function table", 40);
  for (uint64_t i = 0; i < n_functions; ++i) {
    const uint64_t at = r.offset();
    const std::string key = r.name("function name");
    r.name("function name");  // FunctionInfo repeats the name
    nlohmann::json args = nlohmann::json::array();
    const uint64_t n_args = r.count("argument types", 4);
    for (uint64_t a = 0; a < n_args; ++a) {
      const uint8_t code = r.u8("argument type");
      const uint8_t bits = r.u8("argument type");
      const uint16_t lanes = r.u16("argument type");
      const std::string k = arg_kind(code, bits, lanes);
      if (k.empty()) {
        r.fail(at, fmt::format("kernel '{}' argument {} has type code {} bits {} lanes {}, which "
                               "Kiln cannot pass to a kernel",
                               key, a, code, bits, lanes));
      }
      args.push_back(k);
    }
    nlohmann::json launch = nlohmann::json::array();
    const uint64_t n_tags = r.count("launch tags", 8);
    for (uint64_t t = 0; t < n_tags; ++t) launch.push_back(r.name("launch tag"));
    const uint64_t n_extra = r.count("argument extra tags", 4);
    for (uint64_t e = 0; e < n_extra; ++e) {
      uint32_t tag = 0;
      for (int b = 0; b < 4; ++b) tag |= uint32_t{r.u8("argument extra tag")} << (8 * b);
      if (tag != 0) {  // 1: a CUDA tensor map (TMA descriptor), passed by value
        r.fail(at, fmt::format("kernel '{}' argument {} carries extra tag {} (a tensor map), "
                               "which Kiln does not pass",
                               key, e, tag));
      }
    }
    if (kernels.contains(key)) r.fail(at, fmt::format("kernel '{}' is listed twice", key));
    kernels[key] = {{"args", std::move(args)}, {"launch", std::move(launch)}};
  }
  DeviceCode code;
  code.data = r.bytes("device code");
  if (r.left() != 0) {
    r.fail(r.offset(), fmt::format("{} bytes follow the device code", r.left()));
  }
  code.format = format->second.kiln_format;
  code.target = format->second.target;
  code.name = fmt::format("tvm_{}.{}", module.kind, code_format);
  code.metadata_json = nlohmann::json{{"kernels", std::move(kernels)}}.dump();
  return code;
}

}  // namespace kiln::tvm_interop
