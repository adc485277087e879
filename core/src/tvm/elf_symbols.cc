// SPDX-License-Identifier: Apache-2.0
#include "tvm/elf_symbols.h"

#include <elf.h>
#include <fmt/format.h>

#include <cstring>

#include "kiln/error.h"

namespace kiln::tvm_interop {

namespace {

// Copies a T from `file` at `offset`, or throws naming what was read.
template <typename T>
T read_at(std::span<const uint8_t> file, uint64_t offset, const char* what,
          const std::string& where) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) {
    throw ValueError(
        fmt::format("{}: truncated ELF file: the {} at byte {} needs {} bytes, the file "
                    "has {}",
                    where, what, offset, sizeof(T), file.size()));
  }
  T v;
  std::memcpy(&v, file.data() + offset, sizeof(T));
  return v;
}

}  // namespace

std::vector<ElfSymbol> read_dynamic_symbols(std::span<const uint8_t> file,
                                            const std::string& where) {
  const auto eh = read_at<Elf64_Ehdr>(file, 0, "ELF header", where);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    throw ValueError(fmt::format("{}: not an ELF file (byte 0)", where));
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    throw ValueError(fmt::format("{}: not a 64-bit little-endian ELF file (byte {})", where,
                                 static_cast<int>(EI_CLASS)));
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr)) {
    throw ValueError(fmt::format("{}: section header size {} (byte {}), expected {}", where,
                                 eh.e_shentsize, offsetof(Elf64_Ehdr, e_shentsize),
                                 sizeof(Elf64_Shdr)));
  }
  std::vector<ElfSymbol> out;
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    const uint64_t at = eh.e_shoff + i * sizeof(Elf64_Shdr);
    const auto sh = read_at<Elf64_Shdr>(file, at, "section header", where);
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum) {
      throw ValueError(fmt::format("{}: malformed .dynsym section header at byte {}", where, at));
    }
    const auto strtab = read_at<Elf64_Shdr>(
        file, eh.e_shoff + uint64_t{sh.sh_link} * sizeof(Elf64_Shdr), "string table header", where);
    if (strtab.sh_offset > file.size() || file.size() - strtab.sh_offset < strtab.sh_size) {
      throw ValueError(
          fmt::format("{}: the dynamic string table (byte {}, {} bytes) lies outside "
                      "the file of {} bytes",
                      where, strtab.sh_offset, strtab.sh_size, file.size()));
    }
    if (sh.sh_offset > file.size() || file.size() - sh.sh_offset < sh.sh_size) {
      throw ValueError(
          fmt::format("{}: .dynsym (byte {}, {} bytes) lies outside the file of {} "
                      "bytes",
                      where, sh.sh_offset, sh.sh_size, file.size()));
    }
    const char* names = reinterpret_cast<const char*>(file.data() + strtab.sh_offset);
    const uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
    out.reserve(count);
    for (uint64_t s = 1; s < count; ++s) {  // entry 0 is the null symbol
      const uint64_t sym_at = sh.sh_offset + s * sizeof(Elf64_Sym);
      const auto sym = read_at<Elf64_Sym>(file, sym_at, "symbol", where);
      if (sym.st_name >= strtab.sh_size) {
        throw ValueError(
            fmt::format("{}: symbol at byte {} names string {} beyond the table's {} "
                        "bytes",
                        where, sym_at, sym.st_name, strtab.sh_size));
      }
      const size_t max_len = strtab.sh_size - sym.st_name;
      const size_t len = strnlen(names + sym.st_name, max_len);
      if (len == max_len) {
        throw ValueError(
            fmt::format("{}: the name of the symbol at byte {} is not terminated", where, sym_at));
      }
      out.push_back(ElfSymbol{std::string(names + sym.st_name, len), sym.st_shndx != SHN_UNDEF,
                              ELF64_ST_TYPE(sym.st_info) == STT_FUNC, sym.st_size,
                              strtab.sh_offset + sym.st_name});
    }
    return out;
  }
  return out;  // no dynamic symbols: not a shared library anyone can call into
}

const ElfSymbol* find_symbol(const std::vector<ElfSymbol>& symbols, const std::string& name) {
  for (const ElfSymbol& s : symbols) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool is_tvm_library(std::span<const uint8_t> file) {
  try {
    for (const ElfSymbol& s : read_dynamic_symbols(file, "")) {
      if (!s.defined) continue;
      // tvm-ffi exports, or the markers of the runtime ABI before it (refused with a reason).
      if (s.name.rfind("__tvm_ffi_", 0) == 0 || s.name == "__tvm_main__" ||
          s.name == "__tvm_module_ctx") {
        return true;
      }
    }
  } catch (const Error&) {
  }
  return false;
}

}  // namespace kiln::tvm_interop
