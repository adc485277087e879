#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy (the root .clang-tidy) on the C++ files changed relative to a base commit,
# with the compile commands of a build tree, and reports what it finds on the changed lines
# (older findings in a touched file are not this change's). Exits 1 when there is any.
#
#   bash tools/clang-tidy-changed.sh [BASE]
#
# BASE defaults to the merge-base of HEAD with origin/main, or HEAD~1 when there is no
# origin/main or HEAD is origin/main itself (a fresh clone, as CI's: the last commit is then
# the change; working-tree changes are included either way). A changed header is checked
# through the source file of the same name beside it (foo.h -> foo.cc), when there is one.
# Environment: KILN_TIDY_BUILD_DIR (default build; needs compile_commands.json, which every
# configure writes), KILN_TIDY_JOBS (parallel clang-tidy processes, default 2), CLANG_TIDY
# (default clang-tidy).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${KILN_TIDY_BUILD_DIR:-build}"
jobs="${KILN_TIDY_JOBS:-2}"
tidy="${CLANG_TIDY:-clang-tidy}"

if [ $# -ge 1 ]; then
  base=$1
elif git rev-parse -q --verify origin/main >/dev/null &&
  [ "$(git merge-base HEAD origin/main)" != "$(git rev-parse HEAD)" ]; then
  base=$(git merge-base HEAD origin/main)
elif git rev-parse -q --verify HEAD~1 >/dev/null; then
  base=HEAD~1
else
  echo "clang-tidy-changed: no base commit (no origin/main and no HEAD~1); nothing to check"
  exit 0
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "clang-tidy-changed: $build/compile_commands.json is missing; configure $build first" >&2
  exit 2
fi

# The database without the flags only GCC knows (added for GCC builds only, see
# CMakeLists.txt and sdk/cmake/KilnSDKFunctions.cmake), so clang-tidy can parse a GCC build's
# commands too.
db="$build/clang-tidy"
mkdir -p "$db"
sed -e 's/ -fno-gnu-unique//g' -e 's/ -Wno-restrict//g' -e 's/ -Wno-subobject-linkage//g' -e 's/ -fdiagnostics-color=always//g' \
  "$build/compile_commands.json" >"$db/compile_commands.json"
# A unity build (KILN_UNITY_BUILD=ON) lists its batch files (CMakeFiles/<target>.dir/Unity/
# unity_<n>_cxx.cxx), not the sources: each batch becomes one entry per source it includes,
# with the batch's command (all sources of a batch share their target's flags).
python3 - "$db/compile_commands.json" <<'PY'
import json, re, sys
path = sys.argv[1]
entries = json.load(open(path))
out = []
for e in entries:
    unity = e["file"]
    if "/Unity/unity_" not in unity:
        out.append(e)
        continue
    with open(unity) as f:
        sources = re.findall(r'^#include "([^"]+)"', f.read(), re.M)
    for src in sources:
        command = re.sub(r" -o \S+", "", e["command"]).replace(unity, src)
        out.append({"directory": e["directory"], "command": command, "file": src})
json.dump(out, open(path, "w"), indent=0)
PY

files=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  case "$f" in
    *.h | *.hpp)
      src=""
      for ext in cc cpp; do
        if [ -f "${f%.*}.$ext" ]; then src="${f%.*}.$ext"; break; fi
      done
      [ -n "$src" ] || { echo "clang-tidy-changed: $f: no source file beside it; not checked"; continue; }
      f=$src
      ;;
  esac
  # Only files the build compiles (e.g. not the CUDA plugin on a machine without the toolkit).
  if grep -q "\"file\": \"$root/$f\"" "$db/compile_commands.json"; then
    files+=("$f")
  else
    echo "clang-tidy-changed: $f is not in $build's compile commands; not checked"
  fi
done < <(git diff --name-only --diff-filter=ACMR "$base" -- '*.cc' '*.cpp' '*.h' '*.hpp' | sort -u)

mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u | sed '/^$/d')
echo "clang-tidy-changed: base $(git rev-parse --short "$base"), ${#files[@]} file(s) with $($tidy --version | grep -o 'version [0-9.]*')"
if [ ${#files[@]} -eq 0 ]; then exit 0; fi

# The added and changed lines of every changed file (headers too), as clang-tidy's
# --line-filter: [{"name": "core/src/x.cc", "lines": [[first, last], ...]}, ...].
filter=$(git diff -U0 --no-color --diff-filter=ACMR "$base" -- '*.cc' '*.cpp' '*.h' '*.hpp' | awk '
  /^\+\+\+ b\// { file = substr($0, 7); next }
  /^@@ / {
    split($3, r, ","); start = substr(r[1], 2); count = (r[2] == "" ? 1 : r[2])
    if (count > 0) ranges[file] = ranges[file] (ranges[file] == "" ? "" : ",") "[" start "," start + count - 1 "]"
  }
  END {
    out = ""
    for (f in ranges) out = out (out == "" ? "" : ",") "{\"name\":\"" f "\",\"lines\":[" ranges[f] "]}"
    print "[" out "]"
  }')
if [ "$filter" = "[]" ]; then
  echo "clang-tidy-changed: only deletions; nothing to check"
  exit 0
fi

log="$db/clang-tidy.log"
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -I{} "$tidy" --quiet --line-filter="$filter" -p "$db" {} >"$log" 2>/dev/null ||
  true
findings=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: (warning|error):' "$log" || true)
cat "$log"
echo "clang-tidy-changed: ${findings} finding(s) in ${#files[@]} file(s)"
[ "$findings" -eq 0 ]
