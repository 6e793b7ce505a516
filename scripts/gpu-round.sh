#!/usr/bin/env bash
# The whole GPU round on a machine with GPUs: configure and build, run the demo and the examples,
# the GPU test suites (NVLinkStore, IBGDAPost through the NIC model, route<NVLinkStore,
# IBGDAPost> with a forced split, MinimalStore, P2PCopy, ProxyQueue, and the collectives suite on each of them)
# on every GPU count asked and with several PEs per GPU, in both
# process modes (one process owning the GPUs, and one process per PE under mpirun),
# compute-sanitizer over the [sanitize] subset, the verbs_gpu tests and the IBGDAPost/route cases,
# and optionally the benchmark suite. Each step's log and a summary go to $OUT (default
# ./gpu-round-out): summary.txt and gpu-round-logs.tgz, the latter renewed after every step (a round
# cut short keeps the logs of the steps it finished, and what the step it was in had printed). A
# step killed for hanging has the call stacks of its processes at the end of its log.
#
#   scripts/gpu-round.sh [--steps build,demo,tests,sanitize,bench] [--counts "1 2 4"] [--gpus 0,1]
#                        [--pes-per-gpu "1 2 4"] [--mpi-pes-per-gpu "1 2"] [--quick-bench]
#                        [--suites "tests ibgda route minimal p2p proxy proxy_nic coll coll_ibgda ..."]
#                        [--test-spec "[soak]"]
#
# Steps not named are skipped; a later call can run further steps on the same build (build-gpu/).
# --suites: the suites the build, tests and sanitize steps take (default all; "tests" is
# gpucomm_gpu_tests, the others gpucomm_gpu_tests_<name>; coll is the collectives suite on
# NVLinkStore, coll_<transport> on the others), to split a round over two calls. Not in the
# default: soak and soak_<transport>, the differential soak alone (gpucomm_gpu_soak[_<transport>]),
# which builds fast; with GPUCOMM_SOAK_OPS set it runs long (docs/reliability.md).
# --test-spec: a Catch2 test spec the tests step passes to every suite (default: every test), to
# run one part of the suites in every layout, e.g. "[soak]" for the differential soak alone, or
# "add_fields*" for the test cases whose names start so (quote a name with spaces: "\"a name\"").
# A step whose spec matches no test case fails.
# --gpus: the GPUs the round may use, as nvidia-smi numbers them (default all); a run on n GPUs takes
# the first n of them, the demo and the examples see them all; not with the bench step, which
# measures every GPU of the machine. Two rounds on disjoint GPUs of one machine can run at the same
# time (each with its own OUT) when no run of theirs needs MPS, i.e. with --mpi-pes-per-gpu 1, two
# GPUs or more each, and no demo step (its PyTorch example starts a daemon): a test world's sockets
# are named after its random session id, never after the GPU.
# --counts: GPU counts n (default 1, 2, 4, 8 up to the round's GPUs, and all of them). For each n
# and each p of --pes-per-gpu (default "1 2 4") every suite runs in one process with n*p PEs; for
# each p of --mpi-pes-per-gpu (default "1 2") with n*p >= 2 it runs under mpirun -np n*p. A
# step's name gives the layout as GPUs and PEs in all: tests_route-one-process-1gpu-4pe is four PEs
# on one GPU, tests-mpi-2gpu-4pe four processes on two GPUs. The test binaries take the layout from
# GPUCOMM_TEST_PES_PER_GPU, which the round sets for each run (a caller's value is ignored).
# With n = 1 and one-process runs asked for, each op suite's [barrier] cases also run with 5 and 8
# PEs on the GPU (tests_route-barrier-one-process-1gpu-8pe), worlds the 2- and 4-GPU layouts reach
# with p = 4.
# mpirun runs whose processes share a GPU run under the CUDA MPS control daemon, without which
# their kernels would time-slice: the round starts its own (pipe and log directories in its logs,
# nothing global) around those runs and quits it afterwards, also on failure or interrupt, and starts
# it afresh after a step it had to kill at the step's time limit (that step's kernels can be left
# in the server and fault the next step's clients); it uses
# a daemon that is already reachable and leaves that one running; where nvidia-cuda-mps-control
# is missing, those runs are reported as SKIP and the overall line says so. The GPU's compute
# mode is never changed. The sanitizers run with two PEs: on GPUs 0 and 1, or twice on GPU 0 of a
# one-GPU machine (there the NIC-model suites run as two processes under MPS; see the step).
# Environment: OUT, GPUCOMM_STEP_TIMEOUT (seconds a step may take, default 900), GPUCOMM_COMMIT
# (the commit named in the summary, default git's HEAD), GPUCOMM_STACK_TOOL (the command that
# prints a hung process's call stacks, given its PID last; default eu-stack -p, gdb or cuda-gdb,
# whichever is installed first).
# Catch2 is taken from .deps/catch2 (Debian's package unpacked there) when the machine has none.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh

usage() { echo "usage: $0 [--steps build,demo,tests,sanitize,bench] [--counts \"1 2 4\"] [--gpus 0,1] [--pes-per-gpu \"1 2 4\"] [--mpi-pes-per-gpu \"1 2\"] [--quick-bench] [--suites \"$all_suites\"] [--test-spec SPEC]" >&2; exit 2; }
steps="build,demo,tests,sanitize"
counts=""
gpu_list=""
pes_per_gpu="1 2 4"
mpi_pes_per_gpu="1 2"
all_suites="tests ibgda route minimal p2p proxy proxy_nic coll coll_ibgda coll_route coll_minimal coll_p2p coll_proxy coll_proxy_nic"
only_suites=$all_suites
bench_args=()
test_spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps|--counts|--gpus|--pes-per-gpu|--mpi-pes-per-gpu|--suites|--test-spec) [ $# -ge 2 ] || usage ;;&
    --gpus) gpu_list=$2; shift 2 ;;
    --suites) only_suites=$2; shift 2 ;;
    --test-spec) test_spec=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    --pes-per-gpu) pes_per_gpu=$2; shift 2 ;;
    --mpi-pes-per-gpu) mpi_pes_per_gpu=$2; shift 2 ;;
    --quick-bench) bench_args+=(--quick); shift ;;
    *) echo "unknown argument $1" >&2; usage ;;
  esac
done
for v in $counts $pes_per_gpu $mpi_pes_per_gpu; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "--counts, --pes-per-gpu and --mpi-pes-per-gpu take counts >= 1, not '$v'" >&2; exit 2; }
done
has_step() { [[ ",$steps," == *",$1,"* ]]; }
# Only the round chooses the PE layout of a test run.
unset GPUCOMM_TEST_PES_PER_GPU

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

OUT=${OUT:-$PWD/gpu-round-out}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -z "$counts" ]; then
  for n in 1 2 4 8; do [ "$n" -le "$ngpu" ] && counts="$counts $n"; done
  [[ " $counts " == *" $ngpu "* ]] || counts="$counts $ngpu"
fi
for n in $counts; do
  [ "$n" -le "$ngpu" ] || { echo "--counts: $n GPUs asked, the round has $ngpu (${gpu_ids[*]})" >&2; exit 2; }
done

# layout N P: the name of N GPUs with P PEs each, as GPUs and PEs in all ("2gpu-4pe").
layout() { echo "${1}gpu-$(($1 * $2))pe"; }
# The sanitizers' two PEs: one on each of GPUs 0 and 1, or both on GPU 0 of a one-GPU machine.
if [ "$ngpu" -ge 2 ]; then san_n=2; san_pes=1; else san_n=1; san_pes=2; fi
san_layout=$(layout "$san_n" "$san_pes")

# mpirun runs whose processes share a GPU (p >= 2) need MPS; mps_mode says how they get it: none
# (no such run), own (the round starts a daemon of its own), existing (one is reachable already:
# every run uses it, and it is left running), missing (nvidia-cuda-mps-control not found: those
# runs are skipped).
one_layouts=""; mpi_layouts=""; shared_runs=0
for n in $counts; do
  for p in $pes_per_gpu; do one_layouts+=" $(layout "$n" "$p")"; done
  for p in $mpi_pes_per_gpu; do
    [ $((n * p)) -ge 2 ] && mpi_layouts+=" $(layout "$n" "$p")"
    [ "$p" -ge 2 ] && shared_runs=1
  done
done
has_step tests || shared_runs=0
# On a one-GPU machine the sanitizers of the NIC-model suites run as two processes sharing the GPU
# (see the sanitize step), which needs MPS too.
mps_needed=$shared_runs
[ "$ngpu" -lt 2 ] && has_step sanitize && mps_needed=1
mps_vars=()   # CUDA_MPS_* of the daemon the shared-GPU runs use (empty: the caller's environment)
mps_mode=none
if command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
  if mps_probe 1; then mps_mode=existing
  elif [ "$mps_needed" -eq 1 ]; then
    mps_mode=own; mps_vars=(CUDA_MPS_PIPE_DIRECTORY="$logs/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$logs/mps/log")
  fi
elif [ "$mps_needed" -eq 1 ]; then mps_mode=missing
fi

note "gpu-round $(date -u +%Y-%m-%dT%H:%MZ): $ngpu GPU(s) (number $(first_gpus "$ngpu")): $(nvidia-smi --query-gpu=name --format=csv,noheader -i "$(first_gpus "$ngpu")" | sort | uniq -c | xargs)"
note "commit: ${GPUCOMM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
layouts=()
has_step tests && layouts+=("one process${one_layouts:- (none)}" "mpirun${mpi_layouts:- (none)}")
has_step sanitize && layouts+=("sanitizers $san_layout")
if [ ${#layouts[@]} -gt 0 ]; then
  printf -v joined '%s; ' "${layouts[@]}"
  note "PE layouts (GPUs-PEs in all): ${joined%; }"
fi
case $mps_mode in
  none) has_step tests && note "MPS: not used (no mpirun run shares a GPU)" ;;
  own) note "MPS: a daemon of the round's own for the mpirun runs that share a GPU (pipe and log directories: mps/ in the logs)" ;;
  existing) note "MPS: a daemon was already running (${CUDA_MPS_PIPE_DIRECTORY:-default pipe directory}); every run uses it, and it is left running" ;;
  missing) note "MPS: nvidia-cuda-mps-control not found: the mpirun runs that share a GPU are skipped" ;;
esac
nvidia-smi topo -m > "$logs/topo.txt" 2>&1
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1

status=0
skipped=0
step_pid=""
current_step=""
skip() { note "SKIP  $1 ($2)"; skipped=$((skipped + 1)); }
# stacks_of PID: where each of PID's descendants that are this round's binaries waits, for a step
# about to be killed for hanging. First every thread's state and kernel wait channel from /proc (at
# once, and it works where no debugger can attach); then every thread's call stack (stack_tool),
# all processes at once with 15 s each, so that the 20 s before the kill reach them all: one after
# another, a debugger that cannot attach (cuda-gdb under MPS: "Late attach is not supported") spent
# the whole window on the first process. eu-stack and gdb attach as host debuggers only (ptrace,
# without CUDA's debugger backend, which is what refuses under MPS); eu-stack has read every
# thread of 8 processes sharing 4 GPUs under MPS.
stack_tool() {
  if [ -n "${GPUCOMM_STACK_TOOL:-}" ]; then echo "$GPUCOMM_STACK_TOOL"
  elif command -v eu-stack > /dev/null; then echo "eu-stack -p"
  elif command -v gdb > /dev/null; then echo "gdb -batch -ex 'thread apply all bt' -p"
  # cuda-gdb takes a lock file that would let only one of the parallel sessions attach.
  elif command -v cuda-gdb > /dev/null; then echo "cuda-gdb --cuda-use-lockfile=0 -batch -ex 'thread apply all bt' -p"
  fi
}
stacks_of() {
  local p exe tool t dir
  local -a procs=() debuggers=()
  tool=$(stack_tool)
  for p in $(descendants "$1"); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    [[ $exe == "$PWD/$build/"* ]] && procs+=("$p")
  done
  [ ${#procs[@]} -gt 0 ] || return 0
  for p in "${procs[@]}"; do
    echo "== threads of process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-200))"
    for t in /proc/"$p"/task/*; do
      echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null): state $(awk '{print $3}' "$t/stat" 2>/dev/null), waits in $(cat "$t/wchan" 2>/dev/null)"
    done
  done
  [ -n "$tool" ] || return 0
  dir=$(mktemp -d)
  for p in "${procs[@]}"; do
    eval "timeout 15 $tool $p" > "$dir/$p" 2>&1 &
    debuggers+=($!)
  done
  wait "${debuggers[@]}"
  for p in "${procs[@]}"; do
    echo "== stacks of process $p (${tool%% *})"
    grep -E '^(Thread|TID|#)' "$dir/$p" | head -n 400
    grep -q '^#' "$dir/$p" || { echo "(no stack; the tool said:)"; grep -v '^$' "$dir/$p" | tail -n 5; }
  done
  rm -rf "$dir"
}
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}
# run NAME CMD...: run a step, log it, and record its outcome and Catch2's/ctest's closing line.
run() {
  local name=$1; shift
  local log="$logs/$name.log"
  local start=$SECONDS
  # A step that hangs is killed (GPUCOMM_STEP_TIMEOUT seconds, default 900) and counts as failed;
  # 20 s before that, the stacks of its processes go to its log (stacks_of).
  # It runs in the background so that an interrupt reaches on_signal at once, not after the step.
  current_step=$name
  local limit=${GPUCOMM_STEP_TIMEOUT:-900}
  timeout -k 10 "$limit" "$@" > "$log" 2>&1 &
  step_pid=$!
  local watchdog=""
  if [ "$limit" -gt 40 ]; then
    (sleep $((limit - 20)) && kill -0 "$step_pid" 2>/dev/null && stacks_of "$step_pid" >> "$log.stacks" 2>&1) &
    watchdog=$!
  fi
  wait "$step_pid"
  local rc=$?
  step_pid=""
  if [ -n "$watchdog" ]; then
    pkill -P "$watchdog" 2>/dev/null  # its sleep
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    [ -s "$log.stacks" ] && cat "$log.stacks" >> "$log"
    rm -f "$log.stacks"
  fi
  local tail_line
  tail_line=$(grep -E "All tests passed|test cases:|assertions:|tests passed|OK$|WRONG|ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 2 | tr '\n' ' ')
  # Catch2 exits 0 when its test spec matches no test case: a step that tested nothing fails.
  if [ $rc -eq 0 ] && grep -q "No tests ran" "$log"; then
    rc=1
    tail_line="no test case matched (Catch2: $(sed "s/\x1b\[[0-9;]*m//g" "$log" | grep -m1 -o "No test cases matched.*"))"
  fi
  if [ $rc -eq 0 ]; then note "PASS  $name ($((SECONDS - start)) s) $tail_line"
  else note "FAIL  $name (exit $rc, $((SECONDS - start)) s) $tail_line"; status=1; tail -n 40 "$log"; fi
  save_logs
  return $rc
}
# The logs so far into $OUT after every step, so that a round cut short (a caller's time limit, a
# machine taken away) still leaves every finished step's whole log.
save_logs() {
  cp "$summary" "$logs/summary.txt"
  tar czf "$OUT/gpu-round-logs.tgz.part" --exclude=./mps/pipe -C "$logs" . 2>/dev/null &&
    mv "$OUT/gpu-round-logs.tgz.part" "$OUT/gpu-round-logs.tgz"
}

# The MPS daemon of the round's own (mps_mode own) lives from mps_start to mps_stop; the EXIT trap
# quits it when the round ends early. A daemon found running is never quit.
mps_ours=0
mps_start() {
  mkdir -p "$logs/mps/pipe" "$logs/mps/log"
  # Started with every GPU visible: a client's CUDA_VISIBLE_DEVICES selects among the daemon's.
  if env -u CUDA_VISIBLE_DEVICES "${mps_vars[@]}" nvidia-cuda-mps-control -d > "$logs/mps/start.log" 2>&1; then
    mps_ours=1
    if mps_probe 10; then note "MPS   daemon started"; return 0; fi
  fi
  note "FAIL  mps-start (see mps/start.log and mps/log/control.log in the logs)"
  status=1
  return 1
}
mps_stop() {
  [ "$mps_ours" -eq 1 ] || return 0
  mps_ours=0
  if echo quit | timeout 60 env "${mps_vars[@]}" nvidia-cuda-mps-control >> "$logs/mps/start.log" 2>&1; then
    note "MPS   daemon stopped"
  else
    note "WARN  the MPS daemon did not take quit (pipe directory $logs/mps/pipe)"
  fi
}
# on_signal NAME NUMBER: stop the running step, record the interrupt, exit (the EXIT trap quits MPS).
# shellcheck disable=SC2317  # called by the traps below
on_signal() {
  trap - INT TERM
  if [ -n "$step_pid" ]; then kill -TERM "$step_pid" 2>/dev/null; wait "$step_pid"; fi
  note "STOP  interrupted by SIG$1${current_step:+ during $current_step}; the logs so far are in $logs"
  save_logs  # the interrupted step's log too: what it printed until then
  exit $((128 + $2))
}
trap mps_stop EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM

build="build-gpu"
tests_bin=$build/tests/gpucomm_gpu_tests
# The op suite per transport: NVLinkStore (with the world and verbs_gpu tests), IBGDAPost through
# the NIC model, route<NVLinkStore, IBGDAPost> with a forced split, MinimalStore (the contract alone),
# P2PCopy (the bulk-copy unit), ProxyQueue (the host proxy and the copy engines), ProxyQueue's NIC
# backend through the NIC model (every peer through the NIC; once more with the forced split).
suites=()
for name in $only_suites; do
  case $name in
    tests) suites+=(gpucomm_gpu_tests) ;;
    ibgda|route|minimal|p2p|proxy|proxy_nic|coll|coll_ibgda|coll_route|coll_minimal|coll_p2p|coll_proxy|coll_proxy_nic)
      suites+=("gpucomm_gpu_tests_$name") ;;
    soak|soak_ibgda|soak_route|soak_minimal|soak_p2p|soak_proxy|soak_proxy_nic)
      suites+=("gpucomm_gpu_$name") ;;
    *) echo "--suites: unknown suite '$name' ($all_suites)" >&2; exit 2 ;;
  esac
done
has_suite() { [[ " ${suites[*]} " == *" $1 "* ]]; }
if has_step build; then
  prefix=()
  [ -d .deps/catch2/usr ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr")
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  run configure cmake -S . -B $build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" \
      -DCMAKE_CUDA_COMPILER="$(gpucomm_find_nvcc)"
  run build cmake --build $build -j "$(nproc)" --target "${suites[@]}" ring_shift cub_allreduce thrust_local routed_ring \
      p2p_tile_push proxy_offload team_allreduce aggregate_stats
fi

if has_step demo; then
  # The demo and the examples take every GPU they see: only the round's.
  export CUDA_VISIBLE_DEVICES
  CUDA_VISIBLE_DEVICES=$(first_gpus "$ngpu")
  run demo bash scripts/demo.sh
  for ex in cub_allreduce thrust_local routed_ring p2p_tile_push proxy_offload team_allreduce aggregate_stats; do
    run "example-$ex" $build/examples/$ex
  done
  # The PyTorch example: its own build, two processes sharing GPU 0 under its own MPS daemon (exit 77:
  # no torch here, reported as a failure of the step so that a round never passes without it).
  run example-torch bash examples/torch/run.sh
  unset CUDA_VISIBLE_DEVICES
fi

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x CUDA_VISIBLE_DEVICES -x GPUCOMM_TEST_PES_PER_GPU)
# The soak's settings reach every process (a long run: docs/reliability.md).
for v in GPUCOMM_SOAK_OPS GPUCOMM_SOAK_SEED GPUCOMM_SOAK_MAX_BYTES GPUCOMM_SOAK_FAULTS GPUCOMM_SOAK_DROP; do
  if [ -n "${!v+set}" ]; then mpi+=(-x "$v"); fi
done
# mpi_shared NAME NP CMD...: step NAME, CMD under mpirun -np NP with processes sharing a GPU, which
# get the MPS directories: the round's own, or the caller's where they are set.
mpi_shared() {
  local name=$1 np=$2 mps_x=() v
  shift 2
  for v in CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; do
    if [ ${#mps_vars[@]} -gt 0 ] || [ -n "${!v+set}" ]; then mps_x+=(-x "$v"); fi
  done
  run "$name" env "${mps_vars[@]}" "${mpi[@]}" "${mps_x[@]}" -np "$np" "$@"
  local rc=$?
  mps_renew_after "$name" $rc
  return $rc
}
# mps_renew_after NAME RC: a step under our MPS daemon that was killed at its time limit (RC 124
# or 137) can leave its kernels on the GPUs inside the daemon's server, and their faults then take
# down the next step's clients (2026-11-27: route<> at 4gpu-8pe cut at 250 s mid-kernel; the
# failure cases after it died of "fatal GPU error" on every GPU about 10 s later, before their own
# kernels ran). The steps after it get a fresh daemon.
mps_renew_after() {
  { [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; } && [ "$mps_ours" -eq 1 ] || return 0
  note "MPS   restarting the daemon: $1 was killed at its time limit"
  mps_stop
  mps_start || mps_ready=0
}
# mpi_run N P SUITE: SUITE under mpirun with P processes on each of GPUs 0..N-1.
mpi_run() {
  # The exclusions first: Catch2 matches nothing for a name pattern followed by "~[tag]".
  local name cmd=("$build/tests/$3" --order decl "~[verbs]~[failure]${test_spec}")
  name="${3#gpucomm_gpu_}-mpi-$(layout "$1" "$2")"
  export GPUCOMM_TEST_PES_PER_GPU=$2
  if [ "$2" -ge 2 ]; then mpi_shared "$name" $(($1 * $2)) "${cmd[@]}"
  else run "$name" "${mpi[@]}" -np "$1" "${cmd[@]}"; fi
  unset GPUCOMM_TEST_PES_PER_GPU
}
# The failure cases of the op suites (tests/gpu/ops/failure.cu): hidden, each alone in fresh
# processes, in every layout, when no --test-spec narrows the run.
failure_suite() { [ -z "$test_spec" ] && [[ $1 == gpucomm_gpu_tests || $1 =~ ^gpucomm_gpu_tests_(ibgda|route|minimal|p2p|proxy|proxy_nic)$ ]]; }
# mpi_failures N P SUITE: the failure cases under mpirun with P processes on each of GPUs 0..N-1.
mpi_failures() {
  local name mps_x=() v
  name="${3#gpucomm_gpu_}-failures-mpi-$(layout "$1" "$2")"
  if [ "$2" -ge 2 ]; then
    for v in CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; do
      if [ ${#mps_vars[@]} -gt 0 ] || [ -n "${!v+set}" ]; then mps_x+=(-x "$v"); fi
    done
  fi
  export GPUCOMM_TEST_PES_PER_GPU=$2
  run "$name" env "${mps_vars[@]}" bash scripts/lib/one-per-process.sh "$build/tests/$3" "[failure]" \
      "${mpi[@]}" "${mps_x[@]}" -np $(($1 * $2))
  local rc=$?
  unset GPUCOMM_TEST_PES_PER_GPU
  [ "$2" -lt 2 ] || mps_renew_after "$name" $rc
  return $rc
}
if has_step tests; then
  spec_args=()
  [ -n "$test_spec" ] && spec_args=("$test_spec")
  # Every one-process run, and the mpirun runs with a GPU per process.
  for n in $counts; do
    export CUDA_VISIBLE_DEVICES
    CUDA_VISIBLE_DEVICES=$(first_gpus "$n")
    for suite in "${suites[@]}"; do
      for p in $pes_per_gpu; do
        run "${suite#gpucomm_gpu_}-one-process-$(layout "$n" "$p")" \
            env GPUCOMM_TEST_PES_PER_GPU="$p" "$build/tests/$suite" --order decl "${spec_args[@]}"
      done
      # ProxyQueue with one stream per PE for all its peers, the proxy's choice where per-peer
      # streams would outnumber the GPU's hardware queues (never the case at these PE counts).
      if [ "$suite" = gpucomm_gpu_tests_proxy ] && [ -n "${pes_per_gpu// /}" ]; then
        p=${pes_per_gpu##* }
        run "${suite#gpucomm_gpu_}-one-process-$(layout "$n" "$p")-stream-per-pe" \
            env GPUCOMM_TEST_PES_PER_GPU="$p" GPUCOMM_PROXY_STREAMS=per_pe "$build/tests/$suite" --order decl "${spec_args[@]}"
      fi
      # ProxyQueue's NIC suite with the route tests' forced split: the other half of the world
      # through the NIC, the same half by the copy engines, every signal and atomic through the NIC.
      if { [ "$suite" = gpucomm_gpu_tests_proxy_nic ] || [ "$suite" = gpucomm_gpu_tests_coll_proxy_nic ]; } &&
         [ -n "${pes_per_gpu// /}" ]; then
        p=${pes_per_gpu##* }
        run "${suite#gpucomm_gpu_}-one-process-$(layout "$n" "$p")-split" \
            env GPUCOMM_TEST_PES_PER_GPU="$p" GPUCOMM_TEST_PROXY_SPLIT=1 "$build/tests/$suite" --order decl "${spec_args[@]}"
      fi
      if [ "$n" -ge 2 ] && [[ " $mpi_pes_per_gpu " == *" 1 "* ]]; then mpi_run "$n" 1 "$suite"; fi
      # One GPU holds at most 4 PEs in the layouts above; the barrier cases also run with 5 and 8
      # PEs there, worlds whose blocks take more than one warp's share of a round's words and flags
      # (route<>'s barrier stalled and read early at 5 to 8 PEs until group_sync gathered each warp:
      # tests/results/2026-11-27-route-barrier-diagnosis.txt).
      # They are one-process runs: a round that asks for none (--pes-per-gpu "") skips them too.
      if [ "$n" -eq 1 ] && [ -n "${pes_per_gpu// /}" ] && failure_suite "$suite"; then
        for p in 5 8; do
          run "${suite#gpucomm_gpu_}-barrier-one-process-$(layout "$n" "$p")" \
              env GPUCOMM_TEST_PES_PER_GPU="$p" "$build/tests/$suite" --order decl "[barrier]"
        done
      fi
      if failure_suite "$suite"; then
        for p in $pes_per_gpu; do
          run "${suite#gpucomm_gpu_}-failures-one-process-$(layout "$n" "$p")" env GPUCOMM_TEST_PES_PER_GPU="$p" \
              bash scripts/lib/one-per-process.sh "$build/tests/$suite" "[failure]"
        done
        if [ "$n" -ge 2 ] && [[ " $mpi_pes_per_gpu " == *" 1 "* ]]; then mpi_failures "$n" 1 "$suite"; fi
      fi
    done
    unset CUDA_VISIBLE_DEVICES
  done
  # The mpirun runs whose processes share a GPU, under MPS.
  if [ "$shared_runs" -eq 1 ]; then
    mps_ready=1
    case $mps_mode in
      own) mps_start || mps_ready=0 ;;
      missing) mps_ready=0 ;;
    esac
    for n in $counts; do
      export CUDA_VISIBLE_DEVICES
      CUDA_VISIBLE_DEVICES=$(first_gpus "$n")
      for suite in "${suites[@]}"; do
        for p in $mpi_pes_per_gpu; do
          [ "$p" -ge 2 ] || continue
          if [ "$mps_ready" -eq 1 ]; then mpi_run "$n" "$p" "$suite"
          elif [ "$mps_mode" = missing ]; then
            skip "${suite#gpucomm_gpu_}-mpi-$(layout "$n" "$p")" "processes sharing a GPU need MPS: nvidia-cuda-mps-control not found"
          else
            skip "${suite#gpucomm_gpu_}-mpi-$(layout "$n" "$p")" "the MPS daemon did not start"
          fi
        done
      done
      # Last: a failure case's fault makes MPS refuse new clients until its processes are gone.
      for suite in "${suites[@]}"; do
        failure_suite "$suite" || continue
        for p in $mpi_pes_per_gpu; do
          [ "$p" -ge 2 ] && [ "$mps_ready" -eq 1 ] && mpi_failures "$n" "$p" "$suite"
        done
      done
      unset CUDA_VISIBLE_DEVICES
    done
    mps_stop
  fi
fi

if has_step sanitize; then
  # The suites that run the NIC model (IBGDAPost, route) share a GPU between their two PEs as two
  # processes under MPS, not one process: with two PEs of one process on one GPU, memcheck and
  # synccheck stall the model (a NIC-model atomic or barrier arrival never completes and the
  # debug-build wait traps after 20 s), while the same binaries pass both tools with one PE, with
  # two PEs as two processes, and racecheck with two PEs in one process; eager module loading,
  # polled stream synchronisation and --check-api-memory-access no did not change it. Two
  # processes is also how the model is used across PEs of different processes.
  # ProxyQueue's suite goes the same way: under synccheck, with two PEs of one process on one
  # GPU, a proxy copy never ran while the kernel waiting for it spun (the put/get matrix trapped
  # after 20 s), though memcheck and racecheck passed in one process.
  nic_suites=()
  for suite in gpucomm_gpu_tests_ibgda gpucomm_gpu_tests_route gpucomm_gpu_tests_proxy gpucomm_gpu_tests_proxy_nic \
      gpucomm_gpu_tests_coll_ibgda gpucomm_gpu_tests_coll_route gpucomm_gpu_tests_coll_proxy gpucomm_gpu_tests_coll_proxy_nic; do
    has_suite $suite && nic_suites+=("$suite")
  done
  nic_mpi=0
  if [ "$san_pes" -ge 2 ]; then
    case $mps_mode in
      own) mps_start && nic_mpi=1 ;;
      existing) nic_mpi=1 ;;
    esac
  fi
  export CUDA_VISIBLE_DEVICES GPUCOMM_TEST_PES_PER_GPU=$san_pes
  CUDA_VISIBLE_DEVICES=$(first_gpus "$san_n")
  for tool in memcheck racecheck synccheck; do
    san=(compute-sanitizer --tool "$tool" --error-exitcode 1)
    has_suite gpucomm_gpu_tests && run "sanitize-$tool-$san_layout" "${san[@]}" $tests_bin "[sanitize],[verbs]"
    for suite in gpucomm_gpu_tests_coll gpucomm_gpu_tests_coll_minimal; do
      has_suite $suite && run "sanitize-$tool-${suite#gpucomm_gpu_tests_}-$san_layout" "${san[@]}" "$build/tests/$suite" "[sanitize],[graph]"
    done
    has_suite gpucomm_gpu_tests_minimal &&
      run "sanitize-$tool-minimal-$san_layout" "${san[@]}" $build/tests/gpucomm_gpu_tests_minimal "[sanitize],[minimal]"
    # P2PCopy's racecheck tells apart the one report racecheck makes on correct bulk-copy code
    # (scripts/lib/racecheck-bulk.sh says which, and how the probes, built into both binaries, show it).
    for suite in gpucomm_gpu_tests_p2p gpucomm_gpu_tests_coll_p2p; do
      has_suite $suite || continue
      name="sanitize-$tool-${suite#gpucomm_gpu_tests_}-$san_layout"
      if [ "$tool" = racecheck ]; then run "$name" bash scripts/lib/racecheck-bulk.sh "$build/tests/$suite" "[sanitize]"
      else run "$name" "${san[@]}" "$build/tests/$suite" "[sanitize]"
      fi
    done
    for suite in "${nic_suites[@]}"; do
      name="sanitize-$tool-${suite#gpucomm_gpu_tests_}"
      filter="[sanitize],[ibgda],[route],[proxy]"
      [[ $suite == *_coll_* ]] && filter="[sanitize]"
      if [ "$san_pes" -lt 2 ]; then run "$name-$san_layout" "${san[@]}" "$build/tests/$suite" "$filter"
      elif [ "$nic_mpi" -eq 1 ]; then
        mpi_shared "$name-mpi-$san_layout" "$san_pes" "${san[@]}" "$build/tests/$suite" "$filter"
      else skip "$name-mpi-$san_layout" "two processes sharing a GPU need the MPS daemon ($mps_mode)"
      fi
    done
  done
  unset CUDA_VISIBLE_DEVICES GPUCOMM_TEST_PES_PER_GPU
  mps_stop
fi

if has_step bench; then
  if [ -x scripts/bench.sh ]; then
    OUT="$logs/bench" run bench bash scripts/bench.sh "${bench_args[@]}"
  else
    skip bench "scripts/bench.sh not present"
  fi
fi

save_logs
overall=$([ $status -eq 0 ] && echo PASS || echo FAIL)
[ $skipped -gt 0 ] && overall+=", $skipped step(s) skipped (SKIP lines)"
note "logs: gpu-round-logs.tgz; overall: $overall"
exit $status
