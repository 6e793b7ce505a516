#!/usr/bin/env bash
# What gpucomm costs to compile, in two modes. No GPU needed; every translation unit on its own, one
# at a time so the times do not compete. Needs GNU time (/usr/bin/time, installed when missing).
#
# Op suite (the default): the op suite's kernels (tests/gpu/ops/*.cu, the same program on every
# transport) per transport: PTX bytes, seconds in nvcc's front end (to PTX), seconds in ptxas (-O3,
# sm_90) and ptxas's peak memory. Prints a markdown table; progress on stderr.
#   scripts/compile-cost.sh [--debug 0|1] [--transports "1 2 3"] [--sources "tests/gpu/ops/a.cu ..."]
# Transports are the test numbers of tests/gpu/harness.cuh: 1 NVLinkStore, 2 IBGDAPost, 3 route,
# 4 MinimalStore, 5 P2PCopy, 6 ProxyQueue, 7 ProxyQueue with its NIC backend. --debug (default 1,
# as the test binaries build) sets GPUCOMM_DEBUG.
#
# Headers (--headers): seconds and peak memory of nvcc -c (sm_90, -std=c++20, -Iinclude) of
#   the umbrella <gpucomm/gpucomm.cuh> alone; <gpucomm/comm.cuh> + <gpucomm/transport/nvlink_store.cuh>;
#   <cub/cub.cuh> + <cuda/atomic> and <cuda/atomic> + <cooperative_groups.h> (the toolkit's
#   yardsticks, measured once); benchmarks/compile/twenty_kernels.cu with GPUCOMM_TEST_TRANSPORT
#   1, 2, 3 (NVLinkStore, IBGDAPost, route).
# Medians of --runs (default 3) runs, the runs interleaved (run 1 of every case, then run 2, ...) so
# a busy spell of a shared machine falls on all cases alike. Prints a markdown table of the medians,
# the ratios issue 54 sets as targets (umbrella / (cub + atomic) <= 1.0 in time and memory,
# (comm + nvlink_store) / (atomic + cg) <= 1.5) and, with several revisions, each case against the
# first revision; --json PATH writes the same as JSON (schema gpucomm.compile-cost/1).
#   scripts/compile-cost.sh --headers [--runs N] [--rev REV ...] [--json PATH] [--debug 0|1] [--twenty "1 2 3"]
# --rev (repeatable, in order; default WORKTREE) measures a git revision, extracted into a temporary
# folder, or WORKTREE, this checkout as it is: `--rev 7d40532 --rev WORKTREE` is before and after in
# one run. --debug sets GPUCOMM_DEBUG (default: unset, gpucomm's own default). --twenty: the transports
# twenty_kernels.cu is measured with (default "1 2 3"; "" measures the headers alone).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
mode=ops
debug=
transports="1 2 3"
twenty="1 2 3"
sources=$(ls tests/gpu/ops/*.cu)
runs=3
revs=()
json=
while [ $# -gt 0 ]; do
  case "$1" in
    --headers) mode=headers; shift ;;
    --debug) debug=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --twenty) twenty=$2; shift 2 ;;
    --sources) sources=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --rev) revs+=("$2"); shift 2 ;;
    --json) json=$2; [[ $json == /* ]] || json="$caller/$json"; shift 2 ;;
    -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
gpucomm_need /usr/bin/time time
gpucomm_install_missing
nvcc=$(gpucomm_find_nvcc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ops_mode() {
  local ptxas catch2=() names t src bytes front back peak n b f s m
  ptxas="$(dirname "$nvcc")/ptxas"
  [ -f /usr/include/catch2/catch.hpp ] || catch2=(-I.deps/catch2/usr/include)
  names=(x NVLinkStore IBGDAPost "route<NVLinkStore, IBGDAPost>" MinimalStore P2PCopy "ProxyQueue (copy engines)" "ProxyQueue (NIC)")
  echo "| transport | TUs | PTX bytes | front end (s) | ptxas (s) | ptxas peak memory (MiB), largest TU |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  for t in $transports; do
    bytes=0 front=0 back=0 peak=0 n=0
    for src in $sources; do
      echo "compile-cost: transport $t: $src" >&2
      /usr/bin/time -f "%e" -o "$tmp/front" "$nvcc" -std=c++20 -arch=sm_90 -Iinclude -Itests -Itests/gpu "${catch2[@]}" \
          -DGPUCOMM_DEBUG="${debug:-1}" -DGPUCOMM_TEST_TRANSPORT="$t" -lineinfo -ptx "$src" -o "$tmp/k.ptx"
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
}

# measure REV_INDEX CASE RUN SOURCE TREE [FLAGS...]: one nvcc -c, one line of $tmp/raw.tsv.
measure() {
  local rev=$1 case=$2 run=$3 src=$4 tree=$5 s m name=toolkit
  shift 5
  [ "$rev" = - ] || name=${labels[$rev]}
  echo "compile-cost: run $run: $name: $case" >&2
  if /usr/bin/time -f "%e %M" -o "$tmp/time" "$nvcc" "${flags[@]}" -I"$tree/include" "$@" -c "$src" \
      -o "$tmp/o.o" 2> "$tmp/nvcc.err"; then
    read -r s m < "$tmp/time"
    printf '%s\t%s\t%s\tok\t%s\t%s\n' "$rev" "$case" "$run" "$s" "$m" >> "$tmp/raw.tsv"
  else
    echo "compile-cost: $case failed at $name:" >&2
    tail -n 5 "$tmp/nvcc.err" >&2
    printf '%s\t%s\t%s\tfailed\t\t\n' "$rev" "$case" "$run" >> "$tmp/raw.tsv"
  fi
}

headers_mode() {
  local i rev sha dir paths run t revargs=()
  [ ${#revs[@]} -gt 0 ] || revs=(WORKTREE)
  flags=(-std=c++20 -arch=sm_90)
  [ -z "$debug" ] || flags+=(-DGPUCOMM_DEBUG="$debug")
  trees=() labels=()
  for i in "${!revs[@]}"; do
    rev=${revs[$i]}
    if [ "$rev" = WORKTREE ]; then
      trees[$i]=$PWD
      sha=$(git rev-parse HEAD)
      git diff --quiet HEAD -- include testing benchmarks/compile || sha="$sha+dirty"
    else
      sha=$(git rev-parse --verify "$rev^{commit}")
      dir="$tmp/rev$i"
      mkdir -p "$dir"
      mapfile -t paths < <(git ls-tree --name-only "$sha" include testing benchmarks/compile)
      git archive "$sha" -- "${paths[@]}" | tar -x -C "$dir"
      trees[$i]=$dir
    fi
    labels[$i]=$rev
    revargs+=(--rev "$rev=$sha")
  done
  printf '#include <gpucomm/gpucomm.cuh>\n' > "$tmp/umbrella.cu"
  printf '#include <gpucomm/comm.cuh>\n#include <gpucomm/transport/nvlink_store.cuh>\n' > "$tmp/comm_nvlink.cu"
  printf '#include <cub/cub.cuh>\n#include <cuda/atomic>\n' > "$tmp/cub_atomic.cu"
  printf '#include <cuda/atomic>\n#include <cooperative_groups.h>\n' > "$tmp/atomic_cg.cu"
  : > "$tmp/raw.tsv"
  for ((run = 1; run <= runs; run++)); do
    measure - cub_atomic "$run" "$tmp/cub_atomic.cu" "$PWD"
    measure - atomic_cg "$run" "$tmp/atomic_cg.cu" "$PWD"
    for i in "${!revs[@]}"; do
      measure "$i" umbrella "$run" "$tmp/umbrella.cu" "${trees[$i]}"
      measure "$i" comm_nvlink "$run" "$tmp/comm_nvlink.cu" "${trees[$i]}"
      for t in $twenty; do
        if [ -f "${trees[$i]}/benchmarks/compile/twenty_kernels.cu" ]; then
          measure "$i" "twenty_kernels.$t" "$run" "${trees[$i]}/benchmarks/compile/twenty_kernels.cu" "${trees[$i]}" \
              -DGPUCOMM_TEST_TRANSPORT="$t"
        else
          printf '%s\t%s\t%s\tmissing\t\t\n' "$i" "twenty_kernels.$t" "$run" >> "$tmp/raw.tsv"
        fi
      done
    done
  done
  python3 scripts/lib/compile_cost.py --raw "$tmp/raw.tsv" --nvcc "$("$nvcc" --version | grep -m1 release)" \
      --runs "$runs" --flags "${flags[*]} -Iinclude -c" "${revargs[@]}" ${json:+--json "$json"}
}

if [ "$mode" = headers ]; then headers_mode; else ops_mode; fi
