#!/usr/bin/env bash
# Run gpucomm's benchmark suite on this machine's GPUs, with the raw CUDA references, every peer
# library found (NVSHMEM, NCCL) and the verbs_gpu posting benchmark (GPU 0, software NIC model),
# in one go:
#   scripts/bench.sh [--quick] [--gpus N] [--budget-s S] [--skip-build] [--no-profile] [--smoke]
#                    [--cases "reduce_scatter alltoallv"] [--record KIND]
# --cases: only the named cases (as the results name them: barrier, put_bw, allreduce, ...), at
# every PE count they run at, e.g. to finish the sweeps a budget cut; the stem ends in -cases. A
# name that matches no case of the sweep is reported, and the script exits 2 after the others ran.
# --smoke: for a one-GPU machine. Only the point-to-point bandwidth and ping-pong cases of
# NVLinkStore and P2PCopy, with two PEs sharing GPU 0, the raw copy references local -> local, and
# gpucomm's device collectives with 2 and 4 PEs sharing GPU 0 (8 B .. 64 MiB); no peers (they need a
# GPU per PE: NCCL's collective rows are "skipped" rows saying so). The figures are smoke: the stem
# ends in -smoke and the markdown says so. Used to tune copy pipelines and to check that the
# collective cases run, never quoted as link figures.
# Writes <date>-<gpu>-<n>gpu.{json,md} (+ -plots/*.png when matplotlib is there), the raw rows and
# the logs to $OUT/results, or to a temporary folder when OUT is not set: never into the tree.
# --record KIND: then store the run as the machine kind's latest results (KIND: the GPU model and
# count, e.g. h100-x4) through scripts/render_results.py record, which renders the docs from them;
# commit what it writes (benchmarks/results/README.md). A --cases run is not recorded: it would
# replace a whole sweep. Every case runs in its own process under a timeout, so a case that fails
# or hangs costs only its own rows; the results file is written whatever happens.
# The isolating variants (bench_cuda's *_limits cases) run with the rest, and where ncu is installed
# the copy variants are profiled once (hardware counters into the results; --no-profile skips it).
# Time: --quick < 4 minutes, full < 9 minutes on 4 H200 (build included); --budget-s caps the run.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/lib/common.sh  # also exports NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

quick=0
gpus=""
budget=""
skip_build=0
profile=1
smoke=0
only_cases=""
record_kind=""
command_line="scripts/bench.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --gpus) gpus=$2; shift ;;
    --budget-s) budget=$2; shift ;;
    --skip-build) skip_build=1 ;;
    --no-profile) profile=0 ;;
    --smoke) smoke=1 ;;
    --cases) only_cases=$2; shift ;;
    --record) record_kind=$2; shift ;;
    -h|--help) sed -n 2,26p "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$record_kind" ] && ! [[ $record_kind =~ ^[a-z0-9]+-x[1-9][0-9]*$ ]]; then
  echo "--record takes a machine kind, the GPU model and count in lower case (e.g. h100-x4), not '$record_kind'" >&2
  exit 2
fi

start=$(date +%s)
if [ -z "$budget" ]; then budget=$([ $quick = 1 ] && echo 225 || echo 525); fi
elapsed() { echo $(( $(date +%s) - start )); }
remaining() { echo $(( budget - $(elapsed) )); }

# One-node NVSHMEM, multicast off (common.sh), NVSHMEM's bootstrap over loopback.
export NVSHMEM_REMOTE_TRANSPORT=${NVSHMEM_REMOTE_TRANSPORT:-none}
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-1610612736}
export GPUCOMM_HEAP_BYTES=${GPUCOMM_HEAP_BYTES:-}
[ -z "$GPUCOMM_HEAP_BYTES" ] && unset GPUCOMM_HEAP_BYTES
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

visible=0
if command -v nvidia-smi >/dev/null 2>&1; then visible=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
[ -z "$gpus" ] && gpus=$visible
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/-$//')
[ -z "$gpu_name" ] && gpu_name=unknown-gpu
stamp=$(date -u +%Y-%m-%d)
stem="${stamp}-${gpu_name}-${gpus}gpu$([ $quick = 1 ] && echo -quick)$([ $smoke = 1 ] && echo -smoke)$([ -n "$only_cases" ] && echo -cases)"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucomm-bench.XXXXXX")
results=${OUT:+$OUT/results}
results=${results:-$work/results}
commit=${GPUCOMM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
rows=$work/rows.jsonl
status=$work/status.jsonl
log=$work/bench.log
: >"$rows"; : >"$status"
mkdir -p "$results"
echo "gpucomm benchmarks: $stem (budget ${budget}s, results to $results)"

record() {  # record CASE LIBRARY NPES RC SECONDS NOTE
  printf '{"case":"%s","library":"%s","npes":%s,"rc":%s,"seconds":%s,"note":"%s"}\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$status"
}
skip_row() {  # skip_row LIBRARY CASE NPES NOTE: a "skipped" row for a case that cannot run on this machine
  wanted "$2" || return 0
  printf '{"case":"%s","library":"%s","npes":%s,"ctas":0,"size":0,"metric":"latency","unit":"us","status":"skipped","note":"%s"}\n' \
    "$2" "$1" "$3" "$4" >>"$rows"
}

# ---- build -------------------------------------------------------------------------------------------
build=build-bench
have() { [ -x "$build/benchmarks/$1" ]; }
python=$(command -v python3 || command -v python || true)
if [ $skip_build = 0 ]; then
  nvcc=$(gpucomm_find_nvcc 2>/dev/null || echo nvcc)
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  t0=$(date +%s)
  if cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
       -DGPUCOMM_BUILD_TESTS=OFF -DGPUCOMM_BUILD_EXAMPLES=OFF -DGPUCOMM_BUILD_BENCHMARKS=ON >"$work/configure.log" 2>&1; then
    grep 'gpucomm benchmarks:' "$work/configure.log"
    # Each target on its own, so one that does not build leaves the others. Peer targets exist only
    # when the peer was found (the configure lines above say which).
    targets=(bench_gpucomm bench_cuda bench_nvshmem bench_nccl bench_verbs_posting bench_ibgda_model)
    [ $smoke = 1 ] && targets=(bench_gpucomm bench_cuda)
    for t in "${targets[@]}"; do
      if cmake --build "$build" --target "$t" -j "$(nproc)" >>"$work/build.log" 2>&1; then
        echo "built $t"
      else
        echo "$t not built (peer not found, or see $work/build.log)"; record "build:$t" build 0 1 0 "not built"
      fi
    done
  else
    echo "configure failed:"; tail -20 "$work/configure.log"; record configure build 0 1 0 "cmake configure failed"
  fi
  record build build 0 0 $(( $(date +%s) - t0 )) "configure and build"
fi

# ---- machine -------------------------------------------------------------------------------------------
machine=$work/machine.json
echo '{}' >"$machine"
if have bench_cuda; then timeout 60 "$build/benchmarks/bench_cuda" --case machine --out "$machine" >/dev/null 2>&1 || echo '{}' >"$machine"; fi
nvidia-smi topo -m >"$work/topo.txt" 2>/dev/null || : >"$work/topo.txt"
nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 >"$work/driver.txt" || : >"$work/driver.txt"

# ---- cases ---------------------------------------------------------------------------------------------
# run_case LIBRARY CASE NPES TIMEOUT COMMAND...: runs under a timeout (cut to what the budget has
# left), with its own --budget-s so it stops sweeping before the timeout would kill it.
wanted() { [ -z "$only_cases" ] || [[ " $only_cases " == *" $1 "* ]]; }  # wanted CASE: not excluded by --cases
run_case() {
  local lib=$1 name=$2 npes=$3 limit=$4; shift 4
  wanted "$name" || return 0
  local left; left=$(remaining)
  if [ "$left" -lt 15 ]; then
    echo "skip $lib $name (npes $npes): time budget spent"
    record "$name" "$lib" "$npes" -1 0 "not run: time budget spent"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local inner=$(( limit > 20 ? limit - 10 : limit / 2 ))
  local q=(); [ $quick = 1 ] && q=(--quick)
  echo "== $lib $name (npes $npes, limit ${limit}s)"
  local t0; t0=$(date +%s)
  timeout -k 5 "$limit" "$@" --case "$name" --npes "$npes" --out "$rows" --budget-s "$inner" "${q[@]}" >>"$log" 2>&1
  local rc=$?
  local took=$(( $(date +%s) - t0 ))
  local note=ok
  [ $rc = 124 ] || [ $rc = 137 ] && note="timed out after ${limit}s"
  [ $rc != 0 ] && [ "$note" = ok ] && note="exit status $rc"
  echo "   rc=$rc ${took}s $note"
  record "$name" "$lib" "$npes" "$rc" "$took" "$note"
}

# run_torch CASE SCRIPT NPES: a PyTorch example's benchmark (examples/torch/SCRIPT) as NPES
# processes, one per GPU: tp_layer (bench_tp_layer.py), moe (bench_moe.py). The extension is built
# once per run into the run's folder and shared by the cases, or taken from GPUCOMM_TORCH_BUILD where
# that folder holds one (examples/torch/build.py --release --build-dir DIR, from this tree).
run_torch() {
  local name=$1 script=$2 n=$3
  wanted "$name" || return 0
  if [ -z "$python" ] || ! "$python" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    skip_row torch "$name" "$n" "torch with CUDA is not importable by ${python:-python3}"
    return
  fi
  local ext="$work/torch-build"
  if [ -n "${GPUCOMM_TORCH_BUILD:-}" ] && compgen -G "$GPUCOMM_TORCH_BUILD/_gpucomm_torch*.so" >/dev/null; then
    ext=$GPUCOMM_TORCH_BUILD
  elif [ -f "$ext/.failed" ]; then
    record "$name" torch "$n" 1 0 "the PyTorch example's extension did not build"
    return
  elif [ ! -f "$ext/.built" ]; then
    echo "== build the PyTorch example's extension"
    if "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation \
         --target "$work/torch-site" . >>"$log" 2>&1 &&
       PYTHONPATH="$work/torch-site" "$python" examples/torch/build.py --release --build-dir "$ext" >>"$log" 2>&1; then
      touch "$ext/.built"
    else
      mkdir -p "$ext" && touch "$ext/.failed"  # the next case does not build it again
      record "$name" torch "$n" 1 0 "the PyTorch example's extension did not build"
      return
    fi
  fi
  GPUCOMM_TORCH_BUILD="$ext" PYTHONPATH="$root/examples/torch" \
    run_case torch "$name" "$n" "$bw_limit" "$python" -m torch.distributed.run --standalone --nproc_per_node="$n" \
    "examples/torch/$script" --device local
}

mpi=()
if command -v mpirun >/dev/null 2>&1; then
  mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NVSHMEM_REMOTE_TRANSPORT -x NVSHMEM_DISABLE_NVLS
       -x NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME -x NVSHMEM_SYMMETRIC_SIZE -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST)
fi
nvshmem_ok() { have bench_nvshmem && [ ${#mpi[@]} -gt 0 ]; }

# verbs_gpu posting rate and post-to-doorbell latency: one GPU (0), the software NIC model as a
# drain-only consumer (no NIC involved). Its own JSON becomes rows through report.py verbs-rows; a
# failure or a timeout becomes an error row, and the sweep goes on.
run_verbs() {
  wanted verbs_posting || return 0
  local limit=$1 left; left=$(remaining)
  if [ "$left" -lt 15 ]; then
    echo "skip gpucomm verbs_posting: time budget spent"
    record verbs_posting gpucomm 1 -1 0 "not run: time budget spent"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== gpucomm verbs_posting (GPU 0, NIC model drain-only, limit ${limit}s)"
  local t0; t0=$(date +%s)
  rm -f "$work/verbs.json"
  timeout -k 5 "$limit" "$build/benchmarks/verbs_gpu/bench_verbs_posting" "$work/verbs.json" 0 >>"$log" 2>&1
  local rc=$?
  local took=$(( $(date +%s) - t0 ))
  local note=ok
  [ $rc = 124 ] || [ $rc = 137 ] && note="timed out after ${limit}s"
  [ $rc = 3 ] && note="some posts failed (see the rows)"
  [ $rc != 0 ] && [ "$note" = ok ] && note="exit status $rc"
  echo "   rc=$rc ${took}s $note"
  record verbs_posting gpucomm 1 "$rc" "$took" "$note"
  if [ -n "$python" ]; then
    "$python" benchmarks/report.py verbs-rows --json "$work/verbs.json" --rc "$rc" --note "$note" >>"$rows" \
      || echo "   report.py verbs-rows failed"
  fi
}
if [ $smoke = 0 ] && [ "$gpus" -ge 1 ] && have verbs_gpu/bench_verbs_posting; then
  run_verbs "$([ $quick = 1 ] && echo 45 || echo 60)"
fi

# IBGDAPost through the software NIC model (GPUs 0 and 1): device-side cost per operation, and
# round trips through the model. Model figures; it writes the harness's rows itself.
if [ $smoke = 0 ] && [ "$gpus" -ge 1 ] && have ibgda/bench_ibgda_model && wanted ibgda_model; then
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    record ibgda_model gpucomm 2 -1 0 "not run: time budget spent"
  else
    limit=60; [ "$limit" -gt "$left" ] && limit=$left
    echo "== gpucomm ibgda_model (GPUs 0 and 1, software NIC model, limit ${limit}s)"
    t0=$(date +%s)
    rm -f "$work/ibgda.jsonl"
    timeout -k 5 "$limit" "$build/benchmarks/ibgda/bench_ibgda_model" "$work/ibgda.jsonl" >>"$log" 2>&1
    rc=$?
    note=ok; [ $rc = 124 ] || [ $rc = 137 ] && note="timed out after ${limit}s"
    [ $rc != 0 ] && [ "$note" = ok ] && note="exit status $rc"
    echo "   rc=$rc $(( $(date +%s) - t0 ))s $note"
    record ibgda_model gpucomm 2 "$rc" "$(( $(date +%s) - t0 ))" "$note"
    [ $rc = 0 ] && [ -f "$work/ibgda.jsonl" ] && cat "$work/ibgda.jsonl" >>"$rows"
  fi
fi

smoke_note=""
coll_cases=(allreduce allgather alltoall reduce_scatter alltoallv)
if [ $smoke = 1 ]; then
  # Two PEs on GPU 0 (the gpucomm benchmarks place PE 1 on GPU 0 too); copy_limits writes local ->
  # local. NVLinkStore's put_bw at block scope is the baseline P2PCopy is read against; the CTA
  # counts are those of P2PCopy's targets (1, 4, 8).
  smoke_note="smoke: 2 PEs share GPU 0 (the collectives also 4; copy_limits, ce_copy: local -> local); not link figures, not comparable with one PE per GPU"
  if [ $quick = 1 ]; then bw_limit=90; lat_limit=45; else bw_limit=150; lat_limit=60; fi
  ctas=(--only ctas=1,4,8)
  have bench_cuda && run_case cuda copy_limits 2 "$lat_limit" "$build/benchmarks/bench_cuda" "${ctas[@]}"
  have bench_cuda && run_case cuda ce_copy 2 "$bw_limit" "$build/benchmarks/bench_cuda"
  for c in put_signal_pingpong p2pcopy_put_signal_pingpong; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$lat_limit" "$build/benchmarks/bench_gpucomm"
  done
  have bench_gpucomm && run_case gpucomm put_bw 2 "$bw_limit" "$build/benchmarks/bench_gpucomm" --only scope=block "${ctas[@]}"
  have bench_gpucomm && run_case gpucomm p2pcopy_put_bw 2 "$bw_limit" "$build/benchmarks/bench_gpucomm" "${ctas[@]}"
  # ProxyQueue: the ring's round trip and command rate, its latencies, and its copy-engine put_bw
  # from one posting thread per CTA (block scope), read against copy_limits' copy-engine rows.
  for c in proxyqueue_ring proxyqueue_command_rate proxyqueue_put_latency proxyqueue_put_signal_pingpong; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$lat_limit" "$build/benchmarks/bench_gpucomm"
  done
  have bench_gpucomm &&
    run_case gpucomm proxyqueue_put_bw 2 "$bw_limit" "$build/benchmarks/bench_gpucomm" --only scope=block --only ctas=1,4
  # The device collectives (nccl-tests semantics; allreduce float32 only here), 2 and 4 PEs on GPU 0,
  # sizes 8 B .. 64 MiB. NCCL cannot put two ranks on one GPU: its rows are skipped rows.
  for n in 2 4; do
    for c in "${coll_cases[@]}"; do
      only=(); [ "$c" = allreduce ] && only=(--only variant=float32)
      have bench_gpucomm && run_case gpucomm "$c" "$n" "$lat_limit" "$build/benchmarks/bench_gpucomm" \
        --max-size $((64 << 20)) "${only[@]}"
      [ "$c" != alltoallv ] && skip_row nccl "$c" "$n" "smoke: NCCL runs one rank per GPU; $n ranks need $n GPUs"
    done
  done
elif [ "$gpus" -lt 2 ]; then
  echo "fewer than 2 GPUs ($gpus): nothing to measure (--smoke runs the copy cases with PEs sharing one GPU)"
  record all none "$gpus" -1 0 "fewer than 2 GPUs"
else
  pe_counts=(2); [ "$gpus" -ge 4 ] && pe_counts+=(4)
  [ "$gpus" -gt 4 ] && pe_counts+=("$gpus")
  if [ $quick = 1 ]; then bw_limit=60; lat_limit=45; else bw_limit=110; lat_limit=60; fi
  # Cheap, headline cases first, bandwidth sweeps last: a budget that runs short cuts the sweeps.
  p2p_cases=(put_signal_pingpong p_latency atomic_latency put_latency atomic_rate)
  if have bench_cuda; then
    run_case cuda flag_pingpong 2 "$lat_limit" "$build/benchmarks/bench_cuda"
    run_case cuda ce_copy 2 "$lat_limit" "$build/benchmarks/bench_cuda"
    run_case cuda sm_store 2 "$lat_limit" "$build/benchmarks/bench_cuda"
  fi
  for n in "${pe_counts[@]}"; do
    have bench_gpucomm && run_case gpucomm barrier "$n" "$lat_limit" "$build/benchmarks/bench_gpucomm"
    nvshmem_ok && run_case nvshmem barrier "$n" "$lat_limit" "${mpi[@]}" -np "$n" "$build/benchmarks/bench_nvshmem"
  done
  for c in "${p2p_cases[@]}"; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$lat_limit" "$build/benchmarks/bench_gpucomm"
    nvshmem_ok && run_case nvshmem "$c" 2 "$lat_limit" "${mpi[@]}" -np 2 "$build/benchmarks/bench_nvshmem"
  done
  for n in "${pe_counts[@]}"; do
    have bench_gpucomm && run_case gpucomm all_reduce "$n" "$lat_limit" "$build/benchmarks/bench_gpucomm"
    have bench_nccl && run_case nccl all_reduce "$n" "$lat_limit" "$build/benchmarks/bench_nccl"
  done
  # What limits NVLinkStore: raw variants that each change one thing (benchmarks/cuda/limits.cu).
  if have bench_cuda; then
    for c in pingpong_limits quiet_limits barrier_limits copy_limits; do
      run_case cuda "$c" 2 "$lat_limit" "$build/benchmarks/bench_cuda"
    done
    # Hardware counters of the copy variants at 1 and 4 CTAs (one launch each, not timed).
    if [ $profile = 1 ] && wanted copy_profile && command -v ncu >/dev/null 2>&1 && [ "$(remaining)" -ge 60 ]; then
      echo "== ncu: copy variants (limit 120s)"
      metrics=gpu__time_duration.sum,l1tex__m_l1tex2xbar_req_cycles_active.max.pct_of_peak_sustained_elapsed
      metrics+=,l1tex__m_l1tex2xbar_write_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum
      metrics+=,l1tex__lsuin_requests.max.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts.max.pct_of_peak_sustained_elapsed
      for r in lg_throttle long_scoreboard barrier membar; do
        metrics+=,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
      done
      t0=$(date +%s)
      timeout -k 5 120 ncu --clock-control none -k regex:copy_limit_kernel --metrics "$metrics" --csv --page raw \
        "$build/benchmarks/bench_cuda" --case copy_profile --out "$work/ncu-launches.jsonl" >"$work/ncu.csv" 2>>"$log"
      rc=$?
      echo "   rc=$rc $(( $(date +%s) - t0 ))s"
      record copy_profile ncu 1 "$rc" "$(( $(date +%s) - t0 ))" "$([ $rc = 0 ] && echo ok || echo "exit status $rc")"
    fi
  fi
  for c in put_bw get_bw; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$bw_limit" "$build/benchmarks/bench_gpucomm"
    nvshmem_ok && run_case nvshmem "$c" 2 "$bw_limit" "${mpi[@]}" -np 2 "$build/benchmarks/bench_nvshmem"
  done
  # P2PCopy (the bulk-copy unit): its put_bw from global and shared memory, and its ping-pong.
  for c in p2pcopy_put_signal_pingpong p2pcopy_put_bw; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$bw_limit" "$build/benchmarks/bench_gpucomm"
  done
  # ProxyQueue (the host proxy and the copy engines).
  for c in proxyqueue_ring proxyqueue_command_rate proxyqueue_put_latency proxyqueue_put_signal_pingpong; do
    have bench_gpucomm && run_case gpucomm "$c" 2 "$bw_limit" "$build/benchmarks/bench_gpucomm"
  done
  # Bulk puts at block scope, one posting thread per CTA (the leader): the copy-engine comparison.
  # Thread scope would post a command per thread, a command-rate figure (proxyqueue_command_rate
  # has it), and its sweep outlasts the case's time limit.
  have bench_gpucomm &&
    run_case gpucomm proxyqueue_put_bw 2 "$bw_limit" "$build/benchmarks/bench_gpucomm" --only scope=block
  # The device collectives next to NCCL's (last: they are the newest sweeps, so a short budget cuts
  # them rather than the established cases), nccl-tests semantics (size, algbw, busbw), 8 B .. 256 MiB
  # (--quick: x4 steps to 64 MiB, allreduce float32 only; full: allreduce also bf16). NCCL has no
  # alltoallv.
  for n in "${pe_counts[@]}"; do
    for c in "${coll_cases[@]}"; do
      only=(); [ "$c" = allreduce ] && [ $quick = 1 ] && only=(--only variant=float32)
      have bench_gpucomm && run_case gpucomm "$c" "$n" "$bw_limit" "$build/benchmarks/bench_gpucomm" "${only[@]}"
      [ "$c" != alltoallv ] && have bench_nccl && run_case nccl "$c" "$n" "$bw_limit" "$build/benchmarks/bench_nccl" "${only[@]}"
    done
  done
  # The end-to-end cases, where torch with CUDA is importable (rows of both libraries; the extension
  # is built into the run's folder): the PyTorch example's tensor-parallel MLP layer and its allreduce
  # against torch.distributed + NCCL (examples/torch/bench_tp_layer.py), and its MoE dispatch +
  # combine against all_to_all_single over NCCL plus index permutes (examples/torch/bench_moe.py).
  for n in "${pe_counts[@]}"; do run_torch tp_layer bench_tp_layer.py "$n"; done
  for n in "${pe_counts[@]}"; do run_torch moe bench_moe.py "$n"; done
fi

# --cases: a name that matched no case of this machine's sweep is a mistake; say so, and exit 2 at
# the end (the cases that did run are reported all the same).
unmatched=""
for c in $only_cases; do
  grep -q "\"case\":\"$c\"" "$status" || unmatched+=" $c"
done
[ -n "$unmatched" ] && echo "--cases: no case of this sweep is named$unmatched (names as in the results' case column)" >&2

# ---- report --------------------------------------------------------------------------------------------
if [ -n "$python" ]; then
  "$python" benchmarks/report.py --rows "$rows" --status "$status" --machine "$machine" --topo "$work/topo.txt" \
    --driver "$work/driver.txt" --command "$command_line" --commit "$commit" --gpus "$gpus" --quick "$quick" \
    --seconds "$(elapsed)" --note "$smoke_note" --ncu "$work/ncu.csv" --ncu-launches "$work/ncu-launches.jsonl" --out "$results/$stem" || echo "report.py failed"
  if "$python" -c 'import matplotlib' 2>/dev/null; then
    "$python" benchmarks/plot.py "$results/$stem.json" --out "$results/$stem-plots" || echo "plot.py failed"
  else
    echo "matplotlib not installed: no plots"
  fi
else
  echo "no python3: raw rows only"
fi
# Whatever happened above, the raw rows and logs are kept beside the results.
cp "$rows" "$results/$stem.rows.jsonl" 2>/dev/null
cp "$log" "$results/$stem.log" 2>/dev/null
cp "$work"/*.log "$results/" 2>/dev/null
[ -f "$results/$stem.json" ] || cp "$rows" "$results/$stem.json"

echo "done in $(elapsed)s: $results/$stem.{json,md}"
ls "$results" | grep -F "$stem" || true
recorded=0
if [ -n "$record_kind" ]; then
  if [ -n "$python" ] && "$python" scripts/render_results.py record --kind "$record_kind" --bench "$results/$stem.json"; then
    echo "recorded as benchmarks/results/$record_kind/latest.json; the docs are rendered from it: commit them"
  else
    echo "--record $record_kind: not recorded (render_results.py failed, or no python3)" >&2; recorded=1
  fi
fi
[ -z "$unmatched" ] || exit 2
exit $recorded
