// SPDX-License-Identifier: Apache-2.0
// The dynamic symbol table of an ELF64 little-endian shared library, read from its bytes (never
// loaded), so a library can be recognised and checked before dlopen runs any of its code.
#ifndef KILN_TVM_ELF_SYMBOLS_H_
#define KILN_TVM_ELF_SYMBOLS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::tvm_interop {

struct ElfSymbol {
  std::string name;
  bool defined = false;   // st_shndx != SHN_UNDEF
  bool function = false;  // STT_FUNC (else data or other)
  uint64_t size = 0;      // st_size
  uint64_t name_at = 0;   // the byte offset of its name (in .dynstr) in the file
};

// The symbols of `file`'s .dynsym. Throws ValueError naming `where` and the byte offset when the
// file is not an ELF64 little-endian file or a table lies outside it.
std::vector<ElfSymbol> read_dynamic_symbols(std::span<const uint8_t> file,
                                            const std::string& where);

// The symbol `name` of `symbols`, or null.
const ElfSymbol* find_symbol(const std::vector<ElfSymbol>& symbols, const std::string& name);

// Whether `file` is an ELF shared library compiled by TVM: it defines a `__tvm_ffi_` symbol, or
// `__tvm_main__` / `__tvm_module_ctx` of the runtime ABI before tvm-ffi (loaded only to be refused
// with the reason). False for anything that cannot be read as an ELF file.
bool is_tvm_library(std::span<const uint8_t> file);

}  // namespace kiln::tvm_interop

#endif  // KILN_TVM_ELF_SYMBOLS_H_
