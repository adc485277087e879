// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: Executable::from_text (the assembler) on arbitrary text. Malformed text must
// be a kiln::ValueError of the form "<source>:<line>:<column>: <message>"; accepted text must
// give an executable whose canonical text and binary form round-trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::vm::Executable exec;
  try {
    exec = kiln::vm::Executable::from_text(text, "fuzz.kvmt");
  } catch (const kiln::ValueError& e) {
    kiln::fuzz::check(std::string_view(e.what()).starts_with("fuzz.kvmt:"),
                      "from_text errors start with <source>:<line>:<column>");
    return 0;
  }
  kiln::fuzz::check_round_trips(exec);
  return 0;
}
