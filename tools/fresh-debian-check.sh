#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that `bash tools/dev.sh test` (what .ci/run runs) passes on a fresh Debian 12: builds a
# bookworm root with debootstrap holding only git and ca-certificates, clones this repository
# into it (its committed HEAD: commit first), and runs the test command there as root.
# See docs/building.md ("The fresh-Debian check").
#
#   sudo bash tools/fresh-debian-check.sh [ROOT]     # ROOT default: /var/tmp/kiln-fresh-debian
#
# Environment:
#   KILN_FRESH_REUSE=1     keep an existing ROOT (default: make a new one each time)
#   KILN_FRESH_CCACHE=1    (default) install ccache in the root and bind-mount this machine's
#                          cache ($CCACHE_DIR or ~/.cache/ccache) and its configuration, so the
#                          build reuses what this machine compiled; 0: build from scratch
#   KILN_FRESH_MIRROR      Debian mirror (default http://deb.debian.org/debian)
#   KILN_FRESH_CA_BUNDLE   a PEM bundle the root trusts for HTTPS too (pip and curl), for a
#                          machine whose network goes through a TLS-inspecting proxy (default:
#                          none; the root trusts Debian's ca-certificates only)
#   KILN_JOBS, KILN_SKIP_ASAN, KILN_SKIP_FUZZ, KILN_SKIP_TIDY, KILN_FUZZ_SECONDS: passed on to
#                          tools/dev.sh test
# The log is written to ROOT.log as well as to standard output. Exits with the status of
# tools/dev.sh test. Needs root (debootstrap, mount, chroot) and the Debian mirror.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(realpath -m "${1:-/var/tmp/kiln-fresh-debian}")"
mirror="${KILN_FRESH_MIRROR:-http://deb.debian.org/debian}"
use_ccache="${KILN_FRESH_CCACHE:-1}"
log="$root.log"

if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-debian-check: run as root (debootstrap, mount and chroot need it)" >&2
  exit 2
fi
# The clone is made inside the root from the repository's own paths, bind-mounted read-only at
# the same places (a git worktree's .git names its common directory by absolute path).
git_common="$(cd "$repo" && realpath "$(git rev-parse --git-common-dir)")"
head="$(git -C "$repo" rev-parse --short HEAD)"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-debian-check: note: uncommitted changes are not tested (the clone is HEAD $head)"
fi

mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind <host path> [ro]
  local target="$root$1"
  mkdir -p "$target"
  mount --bind "$1" "$target"
  mounts+=("$target")
  if [ "${2:-}" = ro ]; then mount -o remount,bind,ro "$target"; fi
}

if [ "${KILN_FRESH_REUSE:-0}" != "1" ] || [ ! -f "$root/etc/debian_version" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
  }
  rm -rf --one-file-system "$root"
  echo "== debootstrap bookworm into $root (minbase + git, ca-certificates)"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$root" "$mirror" \
    >"$root.debootstrap.log" 2>&1 || {
    tail -20 "$root.debootstrap.log" >&2
    exit 1
  }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# debootstrap writes no /etc/hosts (an installed Debian has one, from the installer), and
# without it 'localhost' does not resolve (RpcSession.ServesOnAHostName listens on it).
if [ ! -s "$root/etc/hosts" ]; then
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
fi
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
echo "deb $mirror bookworm-updates main" >>"$root/etc/apt/sources.list"
echo "deb http://deb.debian.org/debian-security bookworm-security main" >>"$root/etc/apt/sources.list"

mkdir -p "$root/proc" "$root/sys" "$root/dev"
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
bind /sys
bind /dev
mount --bind /dev/pts "$root/dev/pts" && mounts+=("$root/dev/pts")
bind "$repo" ro
bind "$git_common" ro

env_args=(HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
          DEBIAN_FRONTEND=noninteractive)
for v in KILN_JOBS KILN_SKIP_ASAN KILN_SKIP_FUZZ KILN_SKIP_TIDY KILN_FUZZ_SECONDS; do
  if [ -n "${!v:-}" ]; then env_args+=("$v=${!v}"); fi
done
if [ -n "${KILN_FRESH_CA_BUNDLE:-}" ]; then
  cp "$KILN_FRESH_CA_BUNDLE" "$root/etc/ssl/kiln-fresh-ca.pem"
  env_args+=(PIP_CERT=/etc/ssl/kiln-fresh-ca.pem SSL_CERT_FILE=/etc/ssl/kiln-fresh-ca.pem
             CURL_CA_BUNDLE=/etc/ssl/kiln-fresh-ca.pem)
fi
if [ "$use_ccache" = "1" ]; then
  cache="${CCACHE_DIR:-$HOME/.cache/ccache}"
  mkdir -p "$cache"
  bind "$cache"
  # The configuration (base_dir above all, without which no path matches) is copied in and
  # named explicitly: with CCACHE_DIR set, ccache would read $CCACHE_DIR/ccache.conf instead.
  mkdir -p "$root/root/.config/ccache"
  conf="${CCACHE_CONFIGPATH:-$HOME/.config/ccache/ccache.conf}"
  [ -f "$conf" ] || conf="$cache/ccache.conf"
  touch "$root/root/.config/ccache/ccache.conf"
  if [ -f "$conf" ]; then cp "$conf" "$root/root/.config/ccache/ccache.conf"; fi
  env_args+=(CCACHE_DIR="$cache" CCACHE_CONFIGPATH=/root/.config/ccache/ccache.conf
             CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  chroot "$root" /usr/bin/env -i "${env_args[@]}" bash -c \
    'command -v ccache >/dev/null || { apt-get update -qq && apt-get install -y -qq ccache; }'
fi

# Under /work when this repository is (ccache's base_dir there maps the paths), else /src.
clone_parent="$(dirname "$repo")"
clone="$clone_parent/kiln-fresh-clone"
echo "== clone $repo (HEAD $head) into $clone inside the root; bash tools/dev.sh test"
set +e
chroot "$root" /usr/bin/env -i "${env_args[@]}" bash -c "
  set -e
  rm -rf '$clone'
  git clone -q '$repo' '$clone'
  cd '$clone'
  git log --oneline -1
  nice -n 10 bash tools/dev.sh test
" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if [ "$use_ccache" = "1" ]; then
  chroot "$root" /usr/bin/env -i "${env_args[@]}" ccache -s 2>/dev/null | sed -n '1,12p' || true
fi
echo "== fresh-debian-check: tools/dev.sh test exited with $status (log: $log)"
exit "$status"
