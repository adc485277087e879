// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the readers of TVM-compiled libraries, on arbitrary bytes. The first byte
// picks the reader: even, the library blob (parse_library_blob, then device_code_from_tvm on
// each device module of an accepted tree); odd, the ELF dynamic symbol table. A malformed input
// must be a kiln::ValueError; anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "tvm/elf_symbols.h"
#include "tvm/library_blob.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> input(data + 1, size - 1);
  using namespace kiln::tvm_interop;
  try {
    if ((data[0] & 1) != 0) {
      read_dynamic_symbols(input, "input");
      return 0;
    }
    for (const BlobModule& m : parse_library_blob(input, "input")) {
      if (!is_device_module_kind(m.kind)) continue;
      try {
        const kiln::DeviceCode code = device_code_from_tvm(m, "input");
        kiln::fuzz::check(!code.metadata_json.empty(), "accepted device code has metadata");
      } catch (const kiln::ValueError&) {
      }
    }
  } catch (const kiln::ValueError&) {
  }
  return 0;
}
