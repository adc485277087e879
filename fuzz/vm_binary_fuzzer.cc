// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: Executable::load_from_bytes on arbitrary bytes. A malformed input must be
// a kiln::ValueError (anything else escaping is a finding); an accepted one must re-save to the
// very same bytes and round-trip through the text form.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  kiln::vm::Executable exec;
  try {
    exec = kiln::vm::Executable::load_from_bytes(input);
  } catch (const kiln::ValueError&) {
    return 0;
  }
  // The binary form is canonical: every field is determined by the executable.
  kiln::fuzz::check(exec.save_to_bytes() == std::vector<uint8_t>(input.begin(), input.end()),
                    "save_to_bytes(load_from_bytes(b)) == b");
  kiln::fuzz::check_round_trips(exec);
  return 0;
}
