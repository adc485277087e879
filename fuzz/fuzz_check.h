// SPDX-License-Identifier: Apache-2.0
// Shared by the VM fuzz targets: the checks every accepted executable must pass.
#ifndef KILN_FUZZ_FUZZ_CHECK_H_
#define KILN_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/vm/executable.h"

namespace kiln::fuzz {

// Aborts (a finding for libFuzzer) with `what` when `ok` is false.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kiln fuzz: property violated: %s\n", what);
    std::abort();
  }
}

// The readers need no plugin: keep the process small and the runs deterministic.
inline void init_environment() {
  setenv("KILN_PLUGINS_DISABLE", "*", 0);
  setenv("KILN_LOG", "error", 0);
}

// An executable a reader accepted is valid, and round-trips through both forms: bytes ->
// executable -> bytes is identical, text -> executable -> text is identical.
inline void check_round_trips(const vm::Executable& exec) {
  exec.validate();  // throws (uncaught: a finding) when a reader let an invalid one through
  const std::vector<uint8_t> bytes = exec.save_to_bytes();
  const vm::Executable from_bytes = vm::Executable::load_from_bytes(bytes);
  check(from_bytes == exec, "load_from_bytes(save_to_bytes(e)) == e");
  check(from_bytes.save_to_bytes() == bytes, "save_to_bytes is stable");
  const std::string text = exec.as_text();
  const vm::Executable from_text = vm::Executable::from_text(text, "canonical.kvmt");
  check(from_text == exec, "from_text(as_text(e)) == e");
  check(from_text.as_text() == text, "as_text(from_text(as_text(e))) == as_text(e)");
  (void)exec.stats();
}

}  // namespace kiln::fuzz

#endif  // KILN_FUZZ_FUZZ_CHECK_H_
