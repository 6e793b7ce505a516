#!/usr/bin/env bash
# What the op suite's kernels (tests/gpu/ops/*.cu, the same program on every transport) cost to
# compile, per transport: PTX bytes, seconds in nvcc's front end (to PTX), seconds in ptxas
# (-O3, sm_90) and ptxas's peak memory, each translation unit on its own, one at a time so the
# times do not compete. No GPU needed. Prints a markdown table; progress on stderr.
#   scripts/compile-cost.sh [--debug 0|1] [--transports "1 2 3"] [--sources "tests/gpu/ops/a.cu ..."]
# Transports are the test numbers of tests/gpu/harness.cuh: 1 NVLinkStore, 2 IBGDAPost, 3 route,
# 4 MinimalStore, 5 P2PCopy, 6 ProxyQueue, 7 ProxyQueue with its NIC backend. --debug (default 1,
# as the test binaries build) sets GPUCOMM_DEBUG. Needs /usr/bin/time (GNU time) for the memory.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
debug=1
transports="1 2 3"
sources=$(ls tests/gpu/ops/*.cu)
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) debug=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --sources) sources=$2; shift 2 ;;
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x /usr/bin/time ] || { echo "compile-cost: needs GNU time at /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
nvcc=$(gpucomm_find_nvcc)
ptxas="$(dirname "$nvcc")/ptxas"
catch2=()
[ -f /usr/include/catch2/catch.hpp ] || catch2=(-I.deps/catch2/usr/include)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=(x NVLinkStore IBGDAPost "route<NVLinkStore, IBGDAPost>" MinimalStore P2PCopy "ProxyQueue (copy engines)" "ProxyQueue (NIC)")

echo "| transport | TUs | PTX bytes | front end (s) | ptxas (s) | ptxas peak memory (MiB), largest TU |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for t in $transports; do
  bytes=0 front=0 back=0 peak=0 n=0
  for src in $sources; do
    echo "compile-cost: transport $t: $src" >&2
    /usr/bin/time -f "%e" -o "$tmp/front" "$nvcc" -std=c++20 -arch=sm_90 -Iinclude -Itests -Itests/gpu "${catch2[@]}" \
        -DGPUCOMM_DEBUG="$debug" -DGPUCOMM_TEST_TRANSPORT="$t" -lineinfo -ptx "$src" -o "$tmp/k.ptx"
    /usr/bin/time -f "%e %M" -o "$tmp/back" "$ptxas" -arch=sm_90 -O3 -lineinfo "$tmp/k.ptx" -o "$tmp/k.cubin"
    read -r b < <(wc -c < "$tmp/k.ptx")
    read -r f < "$tmp/front"
    read -r s m < "$tmp/back"
    bytes=$((bytes + b)); n=$((n + 1))
    front=$(awk -v a="$front" -v b="$f" 'BEGIN { print a + b }')
    back=$(awk -v a="$back" -v b="$s" 'BEGIN { print a + b }')
    [ "$m" -gt "$peak" ] && peak=$m
  done
  printf '| %s | %d | %d | %.1f | %.1f | %d |\n' "${names[$t]}" "$n" "$bytes" "$front" "$back" $((peak / 1024))
done
