#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the binary seed corpus fuzz/corpus/vm_binary/ from the text seeds in
# fuzz/corpus/vm_asm/ (valid canonical programs) with a built `kiln`, and checks that each
# disassembles back to its text seed.
#
#   fuzz/make_corpus.sh [path/to/kiln]     # default: build/bin/kiln
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kiln="${1:-$root/build/bin/kiln}"
for src in "$root"/fuzz/corpus/vm_asm/*.kvmt; do
  out="$root/fuzz/corpus/vm_binary/$(basename "${src%.kvmt}").kvm"
  "$kiln" vm asm "$src" -o "$out"
  "$kiln" vm disasm "$out" | cmp -s - "$src" || { echo "$src is not canonical text" >&2; exit 1; }
done
