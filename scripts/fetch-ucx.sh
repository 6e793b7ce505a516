#!/usr/bin/env bash
# Carries UCX to a machine without a package registry (the GPU machine): downloads Debian's UCX
# runtime and headers (libucx0, libucx-dev), libnuma1, which UCX's libraries need, and ucx_info and
# ucx_perftest (ucx-utils: `ucx_info -d` lists the transports, benchmarks/engine/smoke.py measures
# against ucx_perftest) with apt-get on a Debian machine, and unpacks them into .deps/ucx
# (git-ignored; static libraries, manual pages, documentation and the other tools left out). Copy .deps/ucx along with the tree; then
#   cmake -S . -B build -DGPUCOMM_UCX_ROOT=$PWD/.deps/ucx/usr     (scripts/gpu-round.sh does this)
# finds it, and programs built against it run with
#   LD_LIBRARY_PATH=$PWD/.deps/ucx/usr/lib/x86_64-linux-gnu UCX_MODULE_DIR=$PWD/.deps/ucx/usr/lib/x86_64-linux-gnu/ucx
# which the GPU tests' launcher (scripts/lib/gpu-test.sh) sets itself. Debian 12's UCX (1.13) has no
# CUDA support: ProxyQueue's engine backend then moves puts' and gets' bytes through its memory
# agents (docs/guide/across_nodes.md, "GPU memory").
#
#   scripts/fetch-ucx.sh [DEST]     (default .deps/ucx; prints what it carries and its size)
#
# --cuda: a UCX built with CUDA support instead, which registers GPU memory (proxy_engine_data::
# registered): PyPI's libucx-cu13 wheel (version GPUCOMM_UCX_WHEEL, default 1.22.0), downloaded
# with pip and unpacked into DEST (default .deps/ucx-cuda) as DEST/libucx/{include,lib,bin}, each
# library once (the wheel holds three copies of each; here one file and its links), static
# libraries and documentation left out. Then
#   cmake -S . -B build -DGPUCOMM_UCX_ROOT=$PWD/.deps/ucx-cuda/libucx
#   LD_LIBRARY_PATH=$PWD/.deps/ucx-cuda/libucx/lib UCX_MODULE_DIR=$PWD/.deps/ucx-cuda/libucx/lib/ucx
# (scripts/gpu-round.sh takes it with GPUCOMM_UCX_ROOT set so). Its CUDA transports load only where
# libcuda and libnvidia-ml are (a GPU machine); elsewhere UCX runs without them.
#
#   scripts/fetch-ucx.sh --cuda [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--cuda" ]; then
  dest=${2:-.deps/ucx-cuda}
  version=${GPUCOMM_UCX_WHEEL:-1.22.0}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary :all: -d "$work" "libucx-cu13==$version"
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$work"/libucx_cu13-*.whl "$dest"
  root=$dest/libucx
  [ -f "$root/lib/libucp.so.0.0.0" ] || { echo "fetch-ucx.sh: no libucp.so.0.0.0 in the wheel" >&2; exit 1; }
  find "$root" \( -name '*.a' -o -name '*.la' \) -delete
  rm -rf "$root/share" "$root/lib/cmake" "$root/bin/io_demo" "$root/bin/ucx_read_profile" \
    "$root/bin/ucx_perftest_daemon"
  # libucx_cu13.libs stays: the wheel's own libcudart and libgomp, which UCM's CUDA memory hooks
  # (lib/ucx/libucm_cuda.so) and ucx_perftest find through their RUNPATH. Without the hooks UCX
  # does not learn of CUDA allocations.
  chmod +x "$root"/bin/*  # zipfile keeps no modes
  # One file per library: libX.so.0.0.0, with libX.so.0 and libX.so links to it.
  while IFS= read -r lib; do
    dir=$(dirname "$lib") full=$(basename "$lib")
    ln -sf "$full" "$dir/${full%.0.0}"
    ln -sf "${full%.0.0}" "$dir/${full%.0.0.0}"
  done < <(find "$root/lib" -name 'lib*.so.0.0.0')
  echo "libucx-cu13 $version" > "$dest/PACKAGES"
  echo "UCX with CUDA support carried in $dest ($(du -sh "$dest" | cut -f1)): libucx-cu13 $version"
  root=$(cd "$root" && pwd)
  echo "cmake: -DGPUCOMM_UCX_ROOT=$root; libraries: $root/lib; modules: $root/lib/ucx; tools: $root/bin"
  exit 0
fi
dest=${1:-.deps/ucx}
packages=(libucx0 libucx-dev libnuma1 ucx-utils)
command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null ||
  { echo "fetch-ucx.sh needs apt-get and dpkg-deb (a Debian or Ubuntu machine)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download writes as the _apt user where it can: a folder it may write to.
chmod 777 "$work"
(cd "$work" && apt-get download "${packages[@]}")
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$dest"
  dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >> "$dest/PACKAGES"
done
# What no program of gpucomm's loads: static libraries, libtool files, documentation.
find "$dest" \( -name '*.a' -o -name '*.la' \) -delete
rm -rf "$dest/usr/share" "$dest/usr/bin/io_demo" "$dest/usr/bin/ucx_read_profile"
libdir=$(dirname "$(find "$dest/usr/lib" -name 'libucp.so.0' | head -n 1)")
[ -f "$libdir/libucp.so" ] || { echo "fetch-ucx.sh: no libucp.so under $dest" >&2; exit 1; }
echo "UCX carried in $dest ($(du -sh "$dest" | cut -f1)):"
sed 's/^/  /' "$dest/PACKAGES"
echo "libraries: $libdir; tools: $dest/usr/bin"
