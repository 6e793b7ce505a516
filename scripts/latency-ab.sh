#!/usr/bin/env bash
# A/B latency check for a change of the library: builds bench_gpucomm from two source trees (each a
# directory with include/ and benchmarks/, e.g. `git archive <rev> include benchmarks/gpucomm
# benchmarks/harness | tar -x -C dir`) and runs the latency cases alternately, A B A B ..., on the
# same machine in the same run, so drift affects both alike. With one GPU the two PEs share it:
# figures are smoke, for before/after comparison only.
#
#   [LATENCY_AB_CASES="put_latency ..."] scripts/latency-ab.sh A_DIR B_DIR OUT_DIR [ROUNDS]
#
# Writes OUT_DIR/{a,b}.jsonl (the harness's rows, one file per tree, all rounds) and prints the
# median per case and variant of each side.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
a=$1 b=$2 out=$3 rounds=${4:-3}
nvcc=$(gpucomm_find_nvcc)
mkdir -p "$out"
build() {  # tree -> binary
  local tree=$1 bin=$2
  "$nvcc" -std=c++20 -O3 -arch=sm_90 -lineinfo -DGPUCOMM_DEBUG=0 -I"$tree/include" \
    "$tree"/benchmarks/gpucomm/*.cu -lcuda -o "$bin"  # every case file: main.cu lists them all
}
build "$a" "$out/bench_a" & build "$b" "$out/bench_b" & wait
cases=${LATENCY_AB_CASES:-"put_latency p_latency atomic_latency put_signal_pingpong barrier"}
: > "$out/a.jsonl"; : > "$out/b.jsonl"
for ((r = 0; r < rounds; ++r)); do
  for side in a b; do
    for c in $cases; do
      # The harness appends to --out: one fresh file per run, so each run's rows count once.
      rm -f "$out/$side.round.jsonl"
      "$out/bench_$side" --case "$c" --npes 2 --quick --out "$out/$side.round.jsonl" >/dev/null 2>>"$out/$side.log"
      cat "$out/$side.round.jsonl" >> "$out/$side.jsonl"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys, collections
out = sys.argv[1]
med = {}
for side in "ab":
    rows = collections.defaultdict(list)
    for line in open(f"{out}/{side}.jsonl"):
        r = json.loads(line)
        if r.get("status") == "ok":
            rows[(r["case"], r.get("variant", ""), r.get("scope", ""), r.get("size", 0))].append(r["value"])
    med[side] = {k: statistics.median(v) for k, v in rows.items()}
print(f"{'case':22} {'variant':10} {'scope':6} {'size':>8} {'A':>9} {'B':>9} {'B/A':>6}")
for k in sorted(set(med["a"]) | set(med["b"])):
    x, y = med["a"].get(k), med["b"].get(k)
    ratio = f"{y / x:6.3f}" if x and y else "   n/a"
    print(f"{k[0]:22} {k[1]:10} {k[2]:6} {k[3]:>8} {x if x is not None else float('nan'):9.3f} "
          f"{y if y is not None else float('nan'):9.3f} {ratio}")
PY
