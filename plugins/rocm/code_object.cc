// SPDX-License-Identifier: Apache-2.0
#include "code_object.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <set>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::rocm {
namespace {

// Bounds-checked little-endian reads from a byte span.
class Reader {
 public:
  Reader(std::span<const uint8_t> data, std::string what) : data_(data), what_(std::move(what)) {}

  size_t size() const { return data_.size(); }

  // True when [offset, offset + length) lies inside the data (without overflowing).
  bool fits(uint64_t offset, uint64_t length) const {
    return offset <= data_.size() && length <= data_.size() - offset;
  }

  // Throws naming `field` unless `length` bytes at `offset` are inside the data.
  void need(uint64_t offset, uint64_t length, const std::string& field) const {
    if (!fits(offset, length)) {
      sdk::throw_value_error(what_ + " is truncated or corrupt: " + field + " (" +
                             std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                             ") lies outside its " + std::to_string(data_.size()) + " bytes");
    }
  }

  template <typename T>
  T read(uint64_t offset, const std::string& field) const {
    need(offset, sizeof(T), field);
    T value{};
    // The formats are little-endian, as is every host this plugin builds for.
    std::memcpy(&value, data_.data() + offset, sizeof(T));
    return value;
  }

  std::span<const uint8_t> bytes(uint64_t offset, uint64_t length, const std::string& field) const {
    need(offset, length, field);
    return data_.subspan(static_cast<size_t>(offset), static_cast<size_t>(length));
  }

  const std::string& what() const { return what_; }

 private:
  std::span<const uint8_t> data_;
  std::string what_;
};

constexpr std::array<uint8_t, 4> kElfMagic = {0x7f, 'E', 'L', 'F'};
constexpr std::string_view kBundleMagic = "__CLANG_OFFLOAD_BUNDLE__";
constexpr std::string_view kCompressedBundleMagic = "CCOB";

constexpr uint16_t kEmAmdgpu = 0xe0;
constexpr uint8_t kElfOsAbiAmdgpuHsa = 64;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtStrtab = 3;
constexpr uint32_t kShtDynsym = 11;
constexpr uint8_t kSttObject = 1;
constexpr uint8_t kSttAmdgpuHsaKernel = 10;
constexpr uint64_t kElfHeaderSize = 64;
constexpr uint64_t kSectionHeaderSize = 64;
constexpr uint64_t kSymbolSize = 24;
constexpr uint64_t kMaxSections = 1u << 16;

// e_flags feature bits (LLVM's EF_AMDGPU_FEATURE_*).
constexpr uint32_t kXnackV3 = 0x100;
constexpr uint32_t kSramEccV3 = 0x200;
constexpr uint32_t kXnackMaskV4 = 0x300;
constexpr uint32_t kXnackOffV4 = 0x200;
constexpr uint32_t kXnackOnV4 = 0x300;
constexpr uint32_t kSramEccMaskV4 = 0xc00;
constexpr uint32_t kSramEccOffV4 = 0x800;
constexpr uint32_t kSramEccOnV4 = 0xc00;

// EF_AMDGPU_MACH values (LLVM's BinaryFormat/ELF.h; the gfx7xx to gfx1103 values were checked
// against clang-15's output).
struct MachName {
  uint32_t mach;
  const char* name;
};
constexpr MachName kMachNames[] = {
    {0x020, "gfx600"},  {0x021, "gfx601"},  {0x022, "gfx700"},  {0x023, "gfx701"},
    {0x024, "gfx702"},  {0x025, "gfx703"},  {0x026, "gfx704"},  {0x028, "gfx801"},
    {0x029, "gfx802"},  {0x02a, "gfx803"},  {0x02b, "gfx810"},  {0x02c, "gfx900"},
    {0x02d, "gfx902"},  {0x02e, "gfx904"},  {0x02f, "gfx906"},  {0x030, "gfx908"},
    {0x031, "gfx909"},  {0x032, "gfx90c"},  {0x033, "gfx1010"}, {0x034, "gfx1011"},
    {0x035, "gfx1012"}, {0x036, "gfx1030"}, {0x037, "gfx1031"}, {0x038, "gfx1032"},
    {0x039, "gfx1033"}, {0x03a, "gfx602"},  {0x03b, "gfx705"},  {0x03c, "gfx805"},
    {0x03d, "gfx1035"}, {0x03e, "gfx1034"}, {0x03f, "gfx90a"},  {0x040, "gfx940"},
    {0x041, "gfx1100"}, {0x042, "gfx1013"}, {0x043, "gfx1150"}, {0x044, "gfx1103"},
    {0x045, "gfx1036"}, {0x046, "gfx1101"}, {0x047, "gfx1102"}, {0x048, "gfx1200"},
    {0x04b, "gfx941"},  {0x04c, "gfx942"},  {0x04e, "gfx1201"}, {0x04f, "gfx950"},
};

bool starts_with(std::span<const uint8_t> data, std::string_view magic) {
  return data.size() >= magic.size() && std::memcmp(data.data(), magic.data(), magic.size()) == 0;
}

std::string hex(uint64_t v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(v));
  return buffer;
}

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// The ELF's target ID from its header flags.
TargetId target_from_flags(uint32_t flags, int version) {
  TargetId t;
  t.processor = processor_of_mach(flags & 0xff);
  if (version == 3) {
    // v3 sets a bit for "on" only; "off" and "unsupported" look the same.
    if ((flags & kSramEccV3) != 0) t.features.emplace_back("sramecc", true);
    if ((flags & kXnackV3) != 0) t.features.emplace_back("xnack", true);
  } else if (version >= 4) {
    const uint32_t sramecc = flags & kSramEccMaskV4;
    if (sramecc == kSramEccOnV4 || sramecc == kSramEccOffV4) {
      t.features.emplace_back("sramecc", sramecc == kSramEccOnV4);
    }
    const uint32_t xnack = flags & kXnackMaskV4;
    if (xnack == kXnackOnV4 || xnack == kXnackOffV4) {
      t.features.emplace_back("xnack", xnack == kXnackOnV4);
    }
  }
  return t;
}

// A NUL-terminated name at `offset` in the string table [table, table + size).
std::string read_name(const Reader& r, uint64_t table, uint64_t size, uint32_t offset,
                      const std::string& field) {
  if (offset >= size) {
    sdk::throw_value_error(r.what() + " is corrupt: " + field + " name offset " +
                           std::to_string(offset) + " is outside its string table of " +
                           std::to_string(size) + " bytes");
  }
  const std::span<const uint8_t> bytes = r.bytes(table + offset, size - offset, field + " name");
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  const void* nul = std::memchr(begin, 0, bytes.size());
  if (nul == nullptr) {
    sdk::throw_value_error(r.what() + " is corrupt: " + field +
                           " name is not NUL-terminated inside its string table");
  }
  return std::string(begin, static_cast<const char*>(nul));
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// The target ID of a bundle entry's triple, e.g. "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-" or
// the older "hip-amdgcn-amd-amdhsa-gfx906"; nullopt for host and non-HIP entries.
std::optional<TargetId> bundle_target(const std::string& triple) {
  const size_t dash = triple.find('-');
  if (dash == std::string::npos || triple.compare(0, 3, "hip") != 0) return std::nullopt;
  constexpr std::string_view kGpuTriple = "amdgcn-amd-amdhsa";
  if (triple.compare(dash + 1, kGpuTriple.size(), kGpuTriple) != 0) return std::nullopt;
  std::string_view rest = std::string_view(triple).substr(dash + 1 + kGpuTriple.size());
  while (!rest.empty() && rest.front() == '-') rest.remove_prefix(1);
  return parse_target_id(rest);
}

}  // namespace

std::string TargetId::str() const {
  std::string out = processor;
  for (const auto& [name, on] : features) out += ":" + name + (on ? "+" : "-");
  return out;
}

std::optional<bool> TargetId::feature(std::string_view name) const {
  for (const auto& [n, on] : features) {
    if (n == name) return on;
  }
  return std::nullopt;
}

std::optional<TargetId> parse_target_id(std::string_view text) {
  TargetId t;
  size_t start = 0;
  bool first = true;
  while (start <= text.size()) {
    size_t end = text.find(':', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    if (part.empty()) return std::nullopt;
    if (first) {
      for (char c : part) {
        if (!valid_name_char(c)) return std::nullopt;
      }
      t.processor = std::string(part);
      first = false;
    } else {
      const char sign = part.back();
      if ((sign != '+' && sign != '-') || part.size() < 2) return std::nullopt;
      const std::string_view name = part.substr(0, part.size() - 1);
      for (char c : name) {
        if (!valid_name_char(c)) return std::nullopt;
      }
      if (t.feature(name)) return std::nullopt;  // a feature named twice
      t.features.emplace_back(std::string(name), sign == '+');
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  if (t.processor.empty()) return std::nullopt;
  return t;
}

bool target_compatible(const TargetId& code, const TargetId& device) {
  if (code.processor != device.processor) return false;
  for (const auto& [name, on] : code.features) {
    const std::optional<bool> d = device.feature(name);
    if (d && *d != on) return false;
  }
  return true;
}

std::string processor_of_mach(uint32_t mach) {
  for (const MachName& m : kMachNames) {
    if (m.mach == mach) return m.name;
  }
  return "";
}

std::string AmdgpuElf::target_name() const {
  if (!target.processor.empty()) return target.str();
  return "unknown machine " + hex(mach);
}

bool is_elf(std::span<const uint8_t> data) {
  return data.size() >= kElfMagic.size() &&
         std::equal(kElfMagic.begin(), kElfMagic.end(), data.begin());
}

bool is_offload_bundle(std::span<const uint8_t> data) { return starts_with(data, kBundleMagic); }

bool is_compressed_offload_bundle(std::span<const uint8_t> data) {
  return starts_with(data, kCompressedBundleMagic);
}

AmdgpuElf parse_amdgpu_elf(std::span<const uint8_t> data, const std::string& what) {
  const Reader r(data, what);
  if (!is_elf(data)) {
    sdk::throw_value_error(what + " is not an ELF file (first bytes: " + leading_bytes(data) + ")");
  }
  r.need(0, kElfHeaderSize, "the ELF header");
  const uint8_t elf_class = data[4];
  const uint8_t encoding = data[5];
  if (elf_class != 2) {
    sdk::throw_value_error(what + " is a " +
                           (elf_class == 1 ? std::string("32-bit") : "class " + hex(elf_class)) +
                           " ELF; AMDGPU code objects are 64-bit");
  }
  if (encoding != 1)
    sdk::throw_value_error(what + " is not a little-endian ELF; AMDGPU code objects are");
  const auto machine = r.read<uint16_t>(18, "e_machine");
  if (machine != kEmAmdgpu) {
    sdk::throw_value_error(what + " is an ELF for machine " + std::to_string(machine) +
                           (machine == 62 ? " (x86-64)" : "") +
                           ", not AMDGPU (e_machine 0xe0, 224)");
  }
  const uint8_t os_abi = data[7];
  if (os_abi != kElfOsAbiAmdgpuHsa) {
    sdk::throw_value_error(what + " has ELF OS ABI " + std::to_string(os_abi) +
                           ", not AMDGPU_HSA (64): it is not a HIP code object");
  }
  AmdgpuElf elf;
  elf.code_object_version = data[8] + 2;  // EI_ABIVERSION 0 = v2, 1 = v3, ...
  elf.flags = r.read<uint32_t>(48, "e_flags");
  elf.mach = elf.flags & 0xff;
  elf.target = target_from_flags(elf.flags, elf.code_object_version);

  const auto shoff = r.read<uint64_t>(40, "e_shoff");
  const auto shentsize = r.read<uint16_t>(58, "e_shentsize");
  uint64_t shnum = r.read<uint16_t>(60, "e_shnum");
  if (shoff == 0) return elf;  // no section table: no symbols to read
  if (shentsize != kSectionHeaderSize) {
    sdk::throw_value_error(what + " is corrupt: e_shentsize is " + std::to_string(shentsize) +
                           ", expected 64");
  }
  if (shnum == 0) {
    // More than 0xff00 sections: the count is in section 0's sh_size.
    shnum = r.read<uint64_t>(shoff + 32, "section 0 sh_size");
  }
  if (shnum > kMaxSections || !r.fits(shoff, shnum * kSectionHeaderSize)) {
    sdk::throw_value_error(what + " is truncated or corrupt: its section table (" +
                           std::to_string(shnum) + " sections at offset " + std::to_string(shoff) +
                           ") does not fit in its " + std::to_string(data.size()) + " bytes");
  }
  struct Section {
    uint32_t type;
    uint64_t offset;
    uint64_t size;
    uint32_t link;
    uint64_t entsize;
  };
  std::vector<Section> sections(static_cast<size_t>(shnum));
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t at = shoff + i * kSectionHeaderSize;
    const std::string field = "section " + std::to_string(i);
    Section& s = sections[static_cast<size_t>(i)];
    s.type = r.read<uint32_t>(at + 4, field + " sh_type");
    s.offset = r.read<uint64_t>(at + 24, field + " sh_offset");
    s.size = r.read<uint64_t>(at + 32, field + " sh_size");
    s.link = r.read<uint32_t>(at + 40, field + " sh_link");
    s.entsize = r.read<uint64_t>(at + 56, field + " sh_entsize");
  }
  std::set<std::string> kernels;
  for (size_t i = 0; i < sections.size(); ++i) {
    const Section& s = sections[i];
    if (s.type != kShtSymtab && s.type != kShtDynsym) continue;
    const std::string field = "symbol table (section " + std::to_string(i) + ")";
    if (s.entsize != kSymbolSize) {
      sdk::throw_value_error(what, " is corrupt: ", field, " has entry size ",
                             std::to_string(s.entsize), ", expected 24");
    }
    r.need(s.offset, s.size, field);
    if (s.link >= sections.size() || sections[s.link].type != kShtStrtab) {
      sdk::throw_value_error(what, " is corrupt: ", field, " links to section ",
                             std::to_string(s.link), ", which is not a string table");
    }
    const Section& strtab = sections[s.link];
    r.need(strtab.offset, strtab.size, "string table (section " + std::to_string(s.link) + ")");
    const uint64_t count = s.size / kSymbolSize;
    for (uint64_t k = 1; k < count; ++k) {  // symbol 0 is the null symbol
      const uint64_t at = s.offset + k * kSymbolSize;
      const std::string sym = field + " symbol " + std::to_string(k);
      const auto name_offset = r.read<uint32_t>(at, sym + " st_name");
      const auto info = r.read<uint8_t>(at + 4, sym + " st_info");
      const auto shndx = r.read<uint16_t>(at + 6, sym + " st_shndx");
      const uint8_t type = info & 0xf;
      // Every name is checked, so a corrupt table is reported rather than half read.
      const std::string name = read_name(r, strtab.offset, strtab.size, name_offset, sym);
      if (shndx == 0 || (type != kSttObject && type != kSttAmdgpuHsaKernel)) continue;
      if (type == kSttAmdgpuHsaKernel) {
        if (!name.empty()) kernels.insert(name);
      } else if (name.size() > 3 && name.compare(name.size() - 3, 3, ".kd") == 0) {
        kernels.insert(name.substr(0, name.size() - 3));
      }
    }
  }
  elf.kernels.assign(kernels.begin(), kernels.end());
  return elf;
}

std::vector<BundleEntry> parse_offload_bundle(std::span<const uint8_t> data) {
  const Reader r(data, "the offload bundle");
  if (!is_offload_bundle(data)) {
    sdk::throw_value_error("not a clang offload bundle: it does not start with " +
                           std::string(kBundleMagic) + " (first bytes: " + leading_bytes(data) +
                           ")");
  }
  uint64_t at = kBundleMagic.size();
  const auto count = r.read<uint64_t>(at, "the entry count");
  at += 8;
  // Each entry takes at least 24 header bytes (offset, size, triple length).
  constexpr uint64_t kEntryHeader = 24;
  const uint64_t room = (data.size() - at) / kEntryHeader;
  if (count == 0) sdk::throw_value_error("the offload bundle declares no entries");
  if (count > kMaxBundleEntries || count > room) {
    sdk::throw_value_error("the offload bundle is corrupt: it declares " + std::to_string(count) +
                           " entries, but its " + std::to_string(data.size()) +
                           " bytes hold at most " +
                           std::to_string(std::min<uint64_t>(room, kMaxBundleEntries)));
  }
  std::vector<BundleEntry> entries;
  entries.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    const std::string field = "entry " + std::to_string(i);
    BundleEntry e;
    e.offset = r.read<uint64_t>(at, field + " offset");
    e.size = r.read<uint64_t>(at + 8, field + " size");
    const auto triple_size = r.read<uint64_t>(at + 16, field + " triple length");
    at += kEntryHeader;
    const std::span<const uint8_t> triple = r.bytes(at, triple_size, field + " triple");
    at += triple_size;
    for (uint8_t c : triple) {
      if (c < 0x20 || c > 0x7e) {
        sdk::throw_value_error("the offload bundle is corrupt: " + field +
                               " has a triple with non-printable bytes");
      }
    }
    e.triple.assign(triple.begin(), triple.end());
    if (e.triple.empty())
      sdk::throw_value_error("the offload bundle is corrupt: " + field + " has an empty triple");
    if (!r.fits(e.offset, e.size)) {
      sdk::throw_value_error("the offload bundle is truncated or corrupt: " + field + " ('" +
                             e.triple + "') spans " + std::to_string(e.size) + " bytes at offset " +
                             std::to_string(e.offset) + ", outside its " +
                             std::to_string(data.size()) + " bytes");
    }
    e.target = bundle_target(e.triple);
    entries.push_back(std::move(e));
  }
  return entries;
}

SelectedCodeObject select_code_object(std::span<const uint8_t> data,
                                      std::string_view device_target) {
  const std::optional<TargetId> device = parse_target_id(device_target);
  if (is_compressed_offload_bundle(data)) {
    sdk::throw_value_error(
        "the code object is a compressed offload bundle (magic CCOB), which the rocm plugin does "
        "not unpack; build it without --offload-compress, or unbundle it with "
        "clang-offload-bundler");
  }
  if (is_offload_bundle(data)) {
    const std::vector<BundleEntry> entries = parse_offload_bundle(data);
    if (!device) {
      sdk::throw_value_error(
          "cannot pick an entry of the offload bundle: the device's architecture '" +
          std::string(device_target) + "' is not a valid target ID");
    }
    const BundleEntry* best = nullptr;
    size_t best_score = 0;
    std::vector<std::string> triples;
    for (const BundleEntry& e : entries) {
      triples.push_back(e.triple + (e.size == 0 ? " (empty)" : ""));
      if (!e.target || e.size == 0 || !target_compatible(*e.target, *device)) continue;
      const size_t score = e.target->features.size();
      if (best == nullptr || score > best_score) {
        best = &e;
        best_score = score;
      }
    }
    if (best == nullptr) {
      sdk::throw_value_error(
          "the offload bundle has no code object for the device's architecture " + device->str() +
          "; its entries: " + join(triples) + " (rebuild with --offload-arch=" + device->processor +
          ")");
    }
    const std::string origin = "offload bundle entry '" + best->triple + "'";
    SelectedCodeObject out;
    out.image = data.subspan(static_cast<size_t>(best->offset), static_cast<size_t>(best->size));
    out.elf = parse_amdgpu_elf(out.image, "the " + origin);
    if (!out.elf.target.processor.empty() && out.elf.target.processor != best->target->processor) {
      sdk::throw_value_error("the " + origin + " holds a code object for " + out.elf.target_name() +
                             ", not " + best->target->processor);
    }
    out.origin = origin;
    return out;
  }
  if (!is_elf(data)) {
    sdk::throw_value_error(
        "not a HIP code object: expected an AMDGPU ELF (magic 7f 45 4c 46, e_machine 0xe0) or "
        "a clang offload bundle (" +
        std::string(kBundleMagic) + "); got " + std::to_string(data.size()) +
        " bytes starting with " + leading_bytes(data));
  }
  SelectedCodeObject out;
  out.image = data;
  out.elf = parse_amdgpu_elf(data, "the code object");
  out.origin = "code object for " + out.elf.target_name();
  if (device && !out.elf.target.processor.empty() && !target_compatible(out.elf.target, *device)) {
    sdk::throw_value_error("the code object is for " + out.elf.target_name() +
                           " but the device is " + device->str() +
                           "; rebuild it with --offload-arch=" + device->processor +
                           " or use an offload bundle that has that architecture");
  }
  return out;
}

void check_kernels_present(const AmdgpuElf& elf, const std::vector<std::string>& kernels,
                           const std::string& origin) {
  for (const std::string& name : kernels) {
    if (std::binary_search(elf.kernels.begin(), elf.kernels.end(), name)) continue;
    const std::string has = elf.kernels.empty() ? std::string(" (it has no kernel symbols at all)")
                                                : " (its kernels: " + join(elf.kernels) + ")";
    sdk::throw_value_error("the metadata describes kernel '", name, "' but the ", origin,
                           " has no such kernel", has,
                           "; a kernel must be declared extern \"C\" __global__ to keep its name");
  }
}

std::string leading_bytes(std::span<const uint8_t> data, size_t count) {
  if (data.empty()) return "(no bytes)";
  std::string out;
  const size_t n = std::min(count, data.size());
  for (size_t i = 0; i < n; ++i) {
    char buffer[4];
    std::snprintf(buffer, sizeof(buffer), "%02x", data[i]);
    if (!out.empty()) out += ' ';
    out += buffer;
  }
  if (data.size() > n) out += " ...";
  return out;
}

}  // namespace kiln::rocm
