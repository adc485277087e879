#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ctest fixture setup: compiles the TVM fixtures with PYTHON (which must have apache-tvm) into
# OUT. Exits 77 (ctest: skipped) with the reason when there is no such Python.
#   build_fixtures.sh OUT [PYTHON]
# PYTHON comes last: CMake drops an empty KILN_TVM_PYTHON from the command line (a build
# configured without TVM, as tools/dev.sh demo does), which must be a skip, not "$2: unbound".
set -euo pipefail
out=$1
python=${2:-}
if [ -z "$python" ] || ! "$python" -c "import tvm" >/dev/null 2>&1; then
  echo "skipped: no Python with apache-tvm (KILN_TVM_PYTHON='$python'); tools/dev.sh test installs one"
  exit 77
fi
rm -rf "$out.tmp"
"$python" "$(dirname "$0")/make_fixtures.py" "$out.tmp"
rm -rf "$out"
mv "$out.tmp" "$out"
