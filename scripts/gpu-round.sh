#!/usr/bin/env bash
# The whole GPU round on a machine with GPUs: configure and build, run the demo and the examples,
# the GPU test matrix through ctest (every suite on every transport, GPU count and PE layout, in
# both process modes; tests/gpu/CMakeLists.txt holds the matrix and its labels, and
# scripts/lib/gpu-test.sh runs each entry), compute-sanitizer over the [sanitize] cases, and
# optionally the benchmark suite. Each step's and each test's log and a summary go to $OUT (default
# $TMPDIR/gpucomm-gpu-round, outside the source tree): summary.txt, summary.json (--json) and
# gpu-round-logs.tgz, the latter renewed after every step and every minute of a ctest step (a round
# cut short keeps the logs of what it finished). A test killed for hanging has the call stacks of
# its processes at the end of its log.
#
#   scripts/gpu-round.sh [--steps build,demo,tests,sanitize,bench] [--counts "1 2 4"] [--gpus 0,1]
#                        [--pes-per-gpu "1 2 4"] [--mpi-pes-per-gpu "1 2"] [--quick-bench]
#                        [--suites "tests ibgda route minimal p2p proxy proxy_nic route_engine coll coll_ibgda ..."]
#                        [--test-spec "[soak]"] [--json PATH] [--record KIND]
#
# Steps not named are skipped; a later call can run further steps on the same build (build-gpu/).
# Every call that builds or tests configures build-gpu/ with the matrix its options ask for
# (-DGPUCOMM_GPU_TESTS=ON, GPUCOMM_GPU_COUNTS, GPUCOMM_PES_PER_GPU, GPUCOMM_MPI_PES_PER_GPU,
# GPUCOMM_GPU_TEST_TIMEOUT), which builds nothing anew; the tests step then runs
#   ctest -L gpu -LE '^sanitize$' -R <the suites> -L <the GPU counts>
# and the sanitize step ctest -L '^sanitize$' on the sanitizers' layout.
# --suites: the suites the build, tests and sanitize steps take (default all; "tests" is
# gpucomm_gpu_tests, the others gpucomm_gpu_tests_<name>; coll is the collectives suite on
# NVLinkStore, coll_<transport> on the others), to split a round over two calls. Not in the default:
# route_engine and coll_route_engine (route<NVLinkStore, ProxyQueue> over the network engine), which
# exist only where CMake finds UCX (the system's, or one carried in .deps/ucx by
# scripts/fetch-ucx.sh, which the configure step passes on as GPUCOMM_UCX_ROOT; GPUCOMM_UCX_ROOT set
# in the environment names another, such as fetch-ucx.sh --cuda's); and soak and
# soak_<transport>, the differential soak alone (gpucomm_gpu_soak[_<transport>]),
# which builds fast; with GPUCOMM_SOAK_OPS set it runs long (docs/guide/reliability.md). In ctest's
# names and labels: ops, coll, soak and the transport (nvlink for NVLinkStore).
# --test-spec: a Catch2 test spec the tests step passes to every suite (default: every test), to
# run one part of the suites in every layout, e.g. "[soak]" for the differential soak alone, or
# "add_fields*" for the test cases whose names start so (quote a name with spaces: "\"a name\"");
# the failure cases and the 5- and 8-PE barrier runs are left out then. A test whose spec matches
# no test case fails.
# --gpus: the GPUs the round may use, as nvidia-smi numbers them (default all); a run on n GPUs takes
# the first n of them, the demo and the examples see them all; not with the bench step, which
# measures every GPU of the machine. Two rounds on disjoint GPUs of one machine can run at the same
# time (each with its own OUT and build directory, GPUCOMM_BUILD_DIR) when no run of theirs needs
# MPS, i.e. with --mpi-pes-per-gpu 1, two GPUs or more each, and no demo step (its PyTorch example
# starts a daemon): a test world's sockets are named after its random session id, never after the GPU.
# --counts: GPU counts n (default 1, 2, 4, 8 up to the round's GPUs, and all of them). For each n
# and each p of --pes-per-gpu (default "1 2 4") every suite runs in one process with n*p PEs; for
# each p of --mpi-pes-per-gpu (default "1 2") with n*p >= 2 it runs under mpirun -np n*p
# (tests/gpu/CMakeLists.txt lists the variants: ProxyQueue's stream-per-PE and forced-split runs,
# the failure cases, the 5- and 8-PE barrier runs on one GPU). mpirun runs whose processes share a
# GPU run under the CUDA MPS control daemon, without which their kernels would time-slice: ctest's
# gpu_mps fixtures start one of the round's own (pipe and log directories under GPUCOMM_GPU_MPS_DIR,
# the logs copied to the round's) around those runs and quit it afterwards, and start it afresh after a test killed at
# its time limit (its kernels can be left in the server and fault the next test's clients); a
# daemon that is already reachable is used and left running; where nvidia-cuda-mps-control is
# missing, those runs are skipped (ctest: Skipped; SKIP lines in the summary). The GPU's compute
# mode is never changed. The sanitizers run with two PEs: on GPUs 0 and 1, or twice on GPU 0 of a
# one-GPU machine (there the NIC-model and proxy suites run as two processes under MPS).
# --json: where the machine-readable summary goes (default $OUT/summary.json): the round (commit,
# GPUs, status), each step, and each test with its suite, transport, layout, status, exit code,
# seconds and Catch2's counts (schema gpucomm.gpu-round-summary/1).
# --record KIND: at the end, merge the summary into the machine kind's test results
# (tests/results/KIND.json; KIND: the GPU model and count, e.g. h100-x4) through
# scripts/render_results.py record, which renders docs/contributing/status.md from them, and record the bench
# step's run as the kind's latest benchmarks; commit what it writes. A summary copied from the GPU
# machine is recorded the same way: scripts/render_results.py record --kind KIND --round summary.json.
# Environment: OUT, GPUCOMM_BUILD_DIR (default build-gpu), GPUCOMM_STEP_TIMEOUT (seconds a step or
# a test may take, default 900; not the build step), GPUCOMM_BUILD_TIMEOUT (seconds the build step
# may take, default 3600), GPUCOMM_COMMIT (the commit named in the summary, default git's
# HEAD), GPUCOMM_STACK_TOOL (the command that prints a hung process's call stacks, given its PID
# last; default eu-stack -p, gdb or cuda-gdb, whichever is installed first).
# Catch2 is taken from .deps/catch2 (Debian's package unpacked there) when the machine has none.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh  # NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# shellcheck source=scripts/lib/stacks.sh
source scripts/lib/stacks.sh

usage() { echo "usage: $0 [--steps build,demo,tests,sanitize,bench] [--counts \"1 2 4\"] [--gpus 0,1] [--pes-per-gpu \"1 2 4\"] [--mpi-pes-per-gpu \"1 2\"] [--quick-bench] [--suites \"$all_suites\"] [--test-spec SPEC] [--json PATH] [--record KIND]" >&2; exit 2; }
steps="build,demo,tests,sanitize"
counts=""
gpu_list=""
pes_per_gpu="1 2 4"
mpi_pes_per_gpu="1 2"
all_suites="tests ibgda route minimal p2p proxy proxy_nic coll coll_ibgda coll_route coll_minimal coll_p2p coll_proxy coll_proxy_nic"
only_suites=$all_suites
bench_args=()
test_spec=""
json=""
record_kind=""
command_line="scripts/gpu-round.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps|--counts|--gpus|--pes-per-gpu|--mpi-pes-per-gpu|--suites|--test-spec|--json|--record) [ $# -ge 2 ] || usage ;;&
    --gpus) gpu_list=$2; shift 2 ;;
    --suites) only_suites=$2; shift 2 ;;
    --test-spec) test_spec=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    --pes-per-gpu) pes_per_gpu=$2; shift 2 ;;
    --mpi-pes-per-gpu) mpi_pes_per_gpu=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --record) record_kind=$2; shift 2 ;;
    --quick-bench) bench_args+=(--quick); shift ;;
    *) echo "unknown argument $1" >&2; usage ;;
  esac
done
for v in $counts $pes_per_gpu $mpi_pes_per_gpu; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "--counts, --pes-per-gpu and --mpi-pes-per-gpu take counts >= 1, not '$v'" >&2; exit 2; }
done
if [ -n "$record_kind" ] && ! [[ $record_kind =~ ^[a-z0-9]+-x[1-9][0-9]*$ ]]; then
  echo "--record takes a machine kind, the GPU model and count in lower case (e.g. h100-x4), not '$record_kind'" >&2
  exit 2
fi
[ -n "$record_kind" ] && bench_args+=(--record "$record_kind")
has_step() { [[ ",$steps," == *",$1,"* ]]; }
# Only the matrix chooses the PE layout of a test run.
unset GPUCOMM_TEST_PES_PER_GPU

# The suites: build targets, and the ctest name prefixes gpu.<suite>.<transport>. that select them.
targets=()
selected=()
for name in $only_suites; do
  case $name in
    tests) targets+=(gpucomm_gpu_tests); selected+=(ops.nvlink) ;;
    ibgda|route|minimal|p2p|proxy|proxy_nic|route_engine) targets+=("gpucomm_gpu_tests_$name"); selected+=("ops.$name") ;;
    coll) targets+=(gpucomm_gpu_tests_coll); selected+=(coll.nvlink) ;;
    coll_ibgda|coll_route|coll_minimal|coll_p2p|coll_proxy|coll_proxy_nic|coll_route_engine)
      targets+=("gpucomm_gpu_tests_$name"); selected+=("coll.${name#coll_}") ;;
    soak) targets+=(gpucomm_gpu_soak); selected+=(soak.nvlink) ;;
    soak_ibgda|soak_route|soak_minimal|soak_p2p|soak_proxy|soak_proxy_nic|soak_route_engine)
      targets+=("gpucomm_gpu_$name"); selected+=("soak.${name#soak_}") ;;
    *) echo "--suites: unknown suite '$name' ($all_suites)" >&2; exit 2 ;;
  esac
done

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -eq 0 ]; then
  echo "This machine has no NVIDIA GPU, so the GPU round cannot run here."
  exit 1
fi
# gpu_ids: the round's GPUs (--gpus, else all); from here on ngpu counts those alone.
if [ -n "$gpu_list" ]; then
  IFS=, read -ra gpu_ids <<< "$gpu_list"
  for g in "${gpu_ids[@]}"; do
    if ! [[ $g =~ ^[0-9]+$ ]] || [ "$g" -ge "$ngpu" ]; then
      echo "--gpus takes GPU numbers 0..$((ngpu - 1)) separated by commas, not '$gpu_list'" >&2; exit 2
    fi
  done
  if [ "$(printf '%s\n' "${gpu_ids[@]}" | sort -u | wc -l)" -ne ${#gpu_ids[@]} ]; then
    echo "--gpus names a GPU twice: '$gpu_list'" >&2; exit 2
  fi
else
  read -ra gpu_ids <<< "$(seq 0 $((ngpu - 1)) | xargs)"
fi
if [ ${#gpu_ids[@]} -lt "$ngpu" ] && has_step bench; then
  echo "--gpus with the bench step: scripts/bench.sh measures every GPU of the machine; run it without --gpus" >&2; exit 2
fi
ngpu=${#gpu_ids[@]}
# first_gpus N: CUDA_VISIBLE_DEVICES for a run on N of the round's GPUs.
first_gpus() { local IFS=,; echo "${gpu_ids[*]:0:$1}"; }
# The tests take the first n of these (scripts/lib/gpu-test.sh).
export GPUCOMM_TEST_GPUS
GPUCOMM_TEST_GPUS=$(first_gpus "$ngpu")

if [ -z "$counts" ]; then
  for n in 1 2 4 8; do [ "$n" -le "$ngpu" ] && counts="$counts $n"; done
  [[ " $counts " == *" $ngpu "* ]] || counts="$counts $ngpu"
fi
for n in $counts; do
  [ "$n" -le "$ngpu" ] || { echo "--counts: $n GPUs asked, the round has $ngpu (${gpu_ids[*]})" >&2; exit 2; }
done
read -ra count_list <<< "$counts"
read -ra pes_list <<< "$pes_per_gpu"
read -ra mpi_pes_list <<< "$mpi_pes_per_gpu"
read -ra suite_list <<< "$only_suites"
# joined SEP WORD...: the words with SEP between them.
joined() { local IFS=$1; shift; echo "$*"; }

OUT=${OUT:-${TMPDIR:-/tmp}/gpucomm-gpu-round}
mkdir -p "$OUT"
json=${json:-$OUT/summary.json}
logs=$(mktemp -d)
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
# What the tests write (scripts/lib/gpu-test.sh): their logs, their summary lines, their records.
export GPUCOMM_TEST_LOG_DIR=$logs/tests GPUCOMM_TEST_SUMMARY=$summary GPUCOMM_TEST_RECORDS=$logs/tests.jsonl
mkdir -p "$GPUCOMM_TEST_LOG_DIR"
: > "$GPUCOMM_TEST_RECORDS"
: > "$logs/steps.jsonl"

build=${GPUCOMM_BUILD_DIR:-build-gpu}
mps_root=/nonexistent  # GPUCOMM_GPU_MPS_DIR of the build, once configured
limit=${GPUCOMM_STEP_TIMEOUT:-900}
build_limit=${GPUCOMM_BUILD_TIMEOUT:-3600}
started=$(date -u +%Y-%m-%dT%H:%MZ)
commit=${GPUCOMM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$(first_gpus "$ngpu")" | sort | uniq -c | xargs)
note "gpu-round $started: $ngpu GPU(s) (number $(first_gpus "$ngpu")): $gpu_names"
note "commit: $commit"
nvidia-smi topo -m > "$logs/topo.txt" 2>&1
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1

# The ctest selections. Names gpu.<suite>.<transport>.<layout>...; layout labels gpus<N>-pe<P>.
# The sanitizers' two PEs: one on each of GPUs 0 and 1, or both on GPU 0 of a one-GPU machine.
suites_regex="^gpu\.($(IFS='|'; echo "${selected[*]//./\\.}"))\."
counts_regex="^gpus($(joined '|' "${count_list[@]}"))-pe"
if [ "$ngpu" -ge 2 ]; then san_layout=gpus2-pe1; else san_layout=gpus1-pe2; fi
tests_excluded="sanitize"
[ -n "$test_spec" ] && tests_excluded+="|failure|barrier"
tests_select=(-L gpu -LE "^($tests_excluded)$" -R "$suites_regex" -L "$counts_regex")
sanitize_select=(-L '^sanitize$' -L "^$san_layout$" -R "$suites_regex")

status=0
step_pid=""
current_step=""
# run NAME CMD...: run a step (killed after GPUCOMM_STEP_TIMEOUT seconds, its processes' call stacks
# logged 20 s before), log it, and record its outcome and its closing line.
# run_ctest NAME ARGS...: ctest ARGS as a step: no time limit of its own (each test has one), its
# tests' lines go to the summary as they finish, the logs are saved every minute.
run() { step "$limit" "$@"; }
run_ctest() {
  local name=$1; shift
  (exec > /dev/null 2>&1; while sleep 60; do save_logs; done) &
  local saver=$!
  step 0 "$name" ctest --test-dir "$build" "$@"
  local rc=$?
  kill "$saver" 2>/dev/null
  wait "$saver" 2>/dev/null
  return $rc
}
step() {
  local step_limit=$1 name=$2; shift 2
  local log="$logs/$name.log"
  local start=$SECONDS
  # In the background so that an interrupt reaches on_signal at once, not after the step.
  current_step=$name
  if [ "$step_limit" -gt 0 ]; then timeout -k 10 "$step_limit" "$@" > "$log" 2>&1 &
  else "$@" > "$log" 2>&1 &
  fi
  step_pid=$!
  [ "$step_limit" -gt 0 ] && start_watchdog "$step_pid" "$step_limit" "$PWD/$build" "$log.stacks"
  wait "$step_pid"
  local rc=$?
  step_pid=""
  stop_watchdog
  [ -s "$log.stacks" ] && cat "$log.stacks" >> "$log"
  rm -f "$log.stacks"
  local tail_line
  tail_line=$(grep -E "All tests passed|test cases:|assertions:|tests passed|OK$|WRONG|ERROR SUMMARY" "$log" | tail -n 2 | tr '\n' ' ')
  tail_line=${tail_line% }
  local seconds=$((SECONDS - start))
  if [ $rc -eq 0 ]; then note "PASS  $name ($seconds s) $tail_line"
  else note "FAIL  $name (exit $rc, $seconds s) $tail_line"; status=1; tail -n 40 "$log"; fi
  printf '{"name": "%s", "status": "%s", "exit_code": %s, "seconds": %s, "closing_line": "%s"}\n' "$name" \
    "$([ $rc -eq 0 ] && echo passed || echo failed)" "$rc" "$seconds" "$(tr -c '[:print:]' ' ' <<< "${tail_line//[\"\\]/ }" | sed 's/ *$//')" \
    >> "$logs/steps.jsonl"
  save_logs
  return $rc
}
# The logs so far into $OUT, so that a round cut short (a caller's time limit, a machine taken
# away) still leaves every finished test's whole log; the MPS daemons' logs with them.
save_logs() {
  cp "$summary" "$logs/summary.txt"
  local d
  for d in "$mps_root"/*/; do
    [ -d "$d/log" ] && mkdir -p "$logs/mps/$(basename "$d")" && cp -r "$d/log" "$d/start.log" "$logs/mps/$(basename "$d")/" 2>/dev/null
  done
  tar czf "$OUT/gpu-round-logs.tgz.part" -C "$logs" . 2>/dev/null &&
    mv "$OUT/gpu-round-logs.tgz.part" "$OUT/gpu-round-logs.tgz"
}
# write_json: summary.json from the steps' and the tests' records.
write_json() {
  local overall=$1 skipped=$2
  {
    printf '{"schema": "gpucomm.gpu-round-summary/1",\n "round": {"started": "%s", "commit": "%s", "command": "%s", ' \
      "$started" "$commit" "${command_line//[\"\\]/ }"
    printf '"gpus": "%s", "gpu_names": "%s", "counts": "%s", ' "$(first_gpus "$ngpu")" "$gpu_names" "${count_list[*]}"
    printf '"steps_asked": "%s", "suites": "%s", "test_spec": "%s", "status": "%s", "tests_skipped": %s},\n' \
      "$steps" "${suite_list[*]}" "${test_spec//[\"\\]/ }" "$overall" "$skipped"
    echo ' "steps": ['
    sed '$!s/$/,/; s/^/  /' "$logs/steps.jsonl"
    echo ' ],'
    echo ' "tests": ['
    sed '$!s/$/,/; s/^/  /' "$GPUCOMM_TEST_RECORDS"
    echo ' ]}'
  } > "$json"
}
# on_signal NAME NUMBER: stop the running step and its tests, record the interrupt, exit.
# shellcheck disable=SC2317  # called by the traps below
on_signal() {
  trap - INT TERM
  stop_watchdog
  if [ -n "$step_pid" ]; then
    local p
    for p in $(descendants "$step_pid") "$step_pid"; do kill -TERM "$p" 2>/dev/null; done
    wait "$step_pid"
  fi
  # The MPS daemons ctest's fixtures started: their cleanup does not run now.
  local d
  for d in "$mps_root"/*/; do
    [ "$(cat "$d/mode" 2>/dev/null)" = own ] && bash scripts/lib/mps.sh stop "${d%/}"
  done
  note "STOP  interrupted by SIG$1${current_step:+ during $current_step}; the logs so far are in $logs"
  save_logs  # the interrupted step's log too: what it printed until then
  write_json STOPPED "$(grep -c '"status": "skipped"' "$GPUCOMM_TEST_RECORDS")"
  exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM

# The matrix this round asks for, as the build's options.
matrix=(-DGPUCOMM_GPU_TESTS=ON -DGPUCOMM_GPU_COUNTS="$(joined ';' "${count_list[@]}")"
        -DGPUCOMM_PES_PER_GPU="$(joined ';' "${pes_list[@]}")" -DGPUCOMM_MPI_PES_PER_GPU="$(joined ';' "${mpi_pes_list[@]}")"
        -DGPUCOMM_GPU_TEST_TIMEOUT="$limit")
# configured: whether the build's cache holds that matrix already (then a tests or sanitize step
# leaves the build as it is, and rounds side by side on one build do not configure it at once).
configured() {
  local o
  for o in "${matrix[@]}"; do
    o=${o#-D}
    grep -qxE "${o%%=*}:[A-Z]+=${o#*=}" "$build/CMakeCache.txt" 2>/dev/null || return 1
  done
}
if has_step build || { { has_step tests || has_step sanitize; } && ! configured; }; then
  prefix=()
  [ -d .deps/catch2/usr ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr")
  if [ -n "${GPUCOMM_UCX_ROOT:-}" ]; then
    prefix+=(-DGPUCOMM_UCX_ROOT="$GPUCOMM_UCX_ROOT")
  elif [ -d .deps/ucx/usr ]; then
    prefix+=(-DGPUCOMM_UCX_ROOT="$PWD/.deps/ucx/usr")
  fi
  gen=()
  [ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null 2>&1 && gen=(-G Ninja); }
  run configure cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" \
      -DCMAKE_CUDA_COMPILER="$(gpucomm_find_nvcc)" "${matrix[@]}"
fi
# Where ctest's MPS fixtures keep their daemons' directories (tests/gpu/CMakeLists.txt).
mps_root=$(sed -n 's/^GPUCOMM_GPU_MPS_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
mps_root=${mps_root:-/nonexistent}
if has_step build; then
  step "$build_limit" build cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" ring_shift cub_allreduce thrust_local \
      routed_ring p2p_tile_push proxy_offload team_allreduce fused_rmsnorm aggregate_stats moe_layer
fi

if has_step demo; then
  # The demo and the examples take every GPU they see: only the round's.
  export CUDA_VISIBLE_DEVICES
  CUDA_VISIBLE_DEVICES=$(first_gpus "$ngpu")
  run demo bash scripts/demo.sh
  for ex in cub_allreduce thrust_local routed_ring p2p_tile_push proxy_offload team_allreduce fused_rmsnorm \
      aggregate_stats moe_layer; do
    run "example-$ex" "$build/examples/$ex"
  done
  # The PyTorch example: its own build, two processes sharing GPU 0 under its own MPS daemon (exit 77:
  # no torch here, reported as a failure of the step so that a round never passes without it).
  run example-torch bash examples/torch/run.sh
  unset CUDA_VISIBLE_DEVICES
fi

# mps_notes WHICH: what the MPS fixture of a ctest step found (scripts/lib/mps.sh).
mps_notes() {
  case $(cat "$mps_root/$1/mode" 2>/dev/null) in
    stopped) note "MPS: a daemon of the round's own for the runs that share a GPU (its logs: mps/$1 in the logs)" ;;
    existing) note "MPS: a daemon was already running (${CUDA_MPS_PIPE_DIRECTORY:-default pipe directory}); every run used it, and it is left running" ;;
    missing) note "MPS: nvidia-cuda-mps-control not found: the mpirun runs that share a GPU were skipped" ;;
  esac
}
if has_step tests; then
  note "tests: $(ctest --test-dir "$build" -N "${tests_select[@]}" | tail -n 1 | xargs) (ctest ${tests_select[*]})"
  export GPUCOMM_TEST_SPEC=$test_spec
  run_ctest tests "${tests_select[@]}"
  unset GPUCOMM_TEST_SPEC
  mps_notes tests
fi
if has_step sanitize; then
  note "sanitize: $(ctest --test-dir "$build" -N "${sanitize_select[@]}" | tail -n 1 | xargs) (ctest ${sanitize_select[*]})"
  run_ctest sanitize "${sanitize_select[@]}"
  mps_notes sanitize
fi

if has_step bench; then
  if [ -x scripts/bench.sh ]; then
    OUT="$logs/bench" run bench bash scripts/bench.sh "${bench_args[@]}"
  else
    note "SKIP  bench (scripts/bench.sh not present)"
  fi
fi

skipped=$(grep -c '"status": "skipped"' "$GPUCOMM_TEST_RECORDS")
save_logs
overall=$([ $status -eq 0 ] && echo PASS || echo FAIL)
write_json "$overall" "$skipped"
[ "$skipped" -gt 0 ] && overall+=", $skipped test(s) skipped (SKIP lines)"
note "logs: $OUT/gpu-round-logs.tgz; summary: $json; overall: $overall"
if [ -n "$record_kind" ]; then
  if python3 scripts/render_results.py record --kind "$record_kind" --round "$json"; then
    note "recorded in tests/results/$record_kind.json; docs/contributing/status.md rendered from it: commit them"
  else
    note "FAIL  --record $record_kind: scripts/render_results.py record failed"; status=1
  fi
fi
exit $status
