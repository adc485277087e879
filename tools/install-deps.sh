#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian 12 package Kiln needs to build, test and benchmark. Idempotent; run as
# root (or with sudo available). What each package is for, and the other ways to build:
# docs/building.md.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format clang-tidy
  libgtest-dev libgmock-dev libbenchmark-dev
  # Google Benchmark's compare.py (/usr/share/benchmark/compare.py), which the tests run on
  # `kiln run --benchmark-out` files. It imports scipy; Debian's python3-scipy cannot be
  # installed beside libboost1.81-dev (pythran pulls libboost1.74-dev), so tools/dev.sh puts
  # scipy in the tests' virtual environment instead.
  libbenchmark-tools
  libboost1.81-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  nlohmann-json3-dev libcli11-dev libarchive-dev libdlpack-dev libssl-dev
  # Debian's python3 (/usr/bin/python3), which tools/dev.sh makes the virtual environments
  # from, with venv (python3-venv) and the headers the extension is built against (python3-dev).
  python3 python3-venv python3-dev python3-numpy libpapi-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  libamdhip64-dev hipcc rocm-device-libs
  clang libclang-rt-14-dev
  # tools/wheel-check.sh: the minimal Debian 12 root the repaired wheel is tested in.
  debootstrap
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
