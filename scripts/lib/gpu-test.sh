#!/usr/bin/env bash
# One GPU test of ctest's matrix (tests/gpu/CMakeLists.txt registers every (suite, transport, PE
# layout) with this as its command):
#   gpu-test.sh --name NAME --gpus N --pes-per-gpu P [--mpi] [--mps DIR] [--failures]
#               [--sanitize TOOL] [--racecheck-bulk] [--spec arg|join] [--env VAR=VALUE]...
#               [--timeout SECONDS] -- BINARY [CATCH2 ARGUMENTS...]
# runs BINARY on the first N of the GPUs it may use with P PEs on each: in one process, or with
# --mpi as one process per PE under mpirun (-np N*P). It exits 77 (ctest: skipped) when fewer GPUs
# are there than the layout needs, when mpirun is missing for --mpi, or when the processes share a
# GPU and no MPS daemon serves them.
#   --mps DIR         the processes share GPUs: the MPS daemon of ctest's fixture (scripts/lib/mps.sh
#                     DIR/mode); after a kill at the time limit the fixture's own daemon is restarted
#   --failures        each case that the Catch2 spec (the last argument) selects, alone in fresh
#                     processes (scripts/lib/one-per-process.sh): the op suites' [failure] cases
#   --sanitize TOOL   under compute-sanitizer --tool TOOL; --racecheck-bulk: racecheck through
#                     scripts/lib/racecheck-bulk.sh (P2PCopy)
#   --spec arg|join   GPUCOMM_TEST_SPEC, when set, narrows the run: as one more argument, or joined
#                     to the last argument (after its exclusions: "~[verbs]~[failure]" SPEC)
#   --timeout S       the test is killed after S seconds (default 900); 20 s before, the call
#                     stacks of its processes go to its output (scripts/lib/stacks.sh)
# Environment it reads: GPUCOMM_TEST_GPUS (the GPUs tests may use, as nvidia-smi numbers them,
# comma-separated; default CUDA_VISIBLE_DEVICES, else every GPU), GPUCOMM_TEST_SPEC, GPUCOMM_SOAK_*
# (passed to every process), and, where set (scripts/gpu-round.sh sets them): GPUCOMM_TEST_LOG_DIR
# (a copy of the output, NAME.log), GPUCOMM_TEST_SUMMARY (a line per test: PASS/FAIL/SKIP, seconds,
# Catch2's closing line) and GPUCOMM_TEST_RECORDS (a JSON object per line per test).
# GPUCOMM_TEST_PES_PER_GPU is always P: only the layout chooses it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib/common.sh
source "$here/common.sh"  # NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# shellcheck source=scripts/lib/stacks.sh
source "$here/stacks.sh"

usage() { echo "usage: $0 --name NAME --gpus N --pes-per-gpu P [--mpi] [--mps DIR] [--failures] [--sanitize TOOL] [--racecheck-bulk] [--spec arg|join] [--env VAR=VALUE]... [--timeout S] -- BINARY [ARGS...]" >&2; exit 2; }
name="" gpus="" pes="" mpi=0 mps_dir="" failures=0 tool="" bulk=0 spec_mode="" limit=900
extra_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name|--gpus|--pes-per-gpu|--mps|--sanitize|--spec|--env|--timeout) [ $# -ge 2 ] || usage ;;&
    --name) name=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --pes-per-gpu) pes=$2; shift 2 ;;
    --mpi) mpi=1; shift ;;
    --mps) mps_dir=$2; shift 2 ;;
    --failures) failures=1; shift ;;
    --sanitize) tool=$2; shift 2 ;;
    --racecheck-bulk) bulk=1; shift ;;
    --spec) spec_mode=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
if [ -z "$name" ] || [ -z "$gpus" ] || [ -z "$pes" ] || [ $# -lt 1 ]; then usage; fi
binary=$1
shift
args=("$@")
start=$SECONDS

# record STATUS RC CLOSING: the test's line in the summary and its JSON record. NAME is
# gpu.<suite>.<transport>.<layout>[.mpi][.<variant>...] (tests/gpu/CMakeLists.txt).
record() {
  local status=$1 rc=$2 closing=$3 seconds=$((SECONDS - start)) suite transport layout rest counts=""
  IFS=. read -r _ suite transport layout rest <<< "$name"
  local mark
  case $status in passed) mark=PASS ;; skipped) mark=SKIP ;; *) mark=FAIL ;; esac
  echo "$mark  $name ($seconds s) $closing"
  [ -z "${GPUCOMM_TEST_SUMMARY:-}" ] || echo "$mark  $name ($seconds s) $closing" >> "$GPUCOMM_TEST_SUMMARY"
  [ -n "${GPUCOMM_TEST_RECORDS:-}" ] || return 0
  # Catch2's closing line: "All tests passed (A assertions in C test cases)", or "test cases: C | P
  # passed | F failed" and "assertions: ...".
  local c
  if [[ $closing =~ All\ tests\ passed\ \(([0-9]+)\ assertions?\ in\ ([0-9]+)\ test\ cases?\) ]]; then
    counts=", \"test_cases\": {\"total\": ${BASH_REMATCH[2]}, \"passed\": ${BASH_REMATCH[2]}, \"failed\": 0}"
    counts+=", \"assertions\": {\"total\": ${BASH_REMATCH[1]}, \"passed\": ${BASH_REMATCH[1]}, \"failed\": 0}"
  else
    for c in "test cases" assertions; do
      if [[ $closing =~ $c:\ +([0-9]+)\ \|\ +([0-9]+)\ passed\ \|\ +([0-9]+)\ failed ]]; then
        counts+=", \"${c// /_}\": {\"total\": ${BASH_REMATCH[1]}, \"passed\": ${BASH_REMATCH[2]}, \"failed\": ${BASH_REMATCH[3]}}"
      elif [[ $closing =~ $c:\ +([0-9]+)\ \|\ +([0-9]+)\ failed ]]; then
        counts+=", \"${c// /_}\": {\"total\": ${BASH_REMATCH[1]}, \"passed\": 0, \"failed\": ${BASH_REMATCH[2]}}"
      fi
    done
  fi
  local modifiers="" m
  for m in ${rest//./ }; do modifiers+="${modifiers:+, }\"$m\""; done
  printf '{"name": "%s", "suite": "%s", "transport": "%s", "layout": "%s", "gpus": %s, "pes_per_gpu": %s, "processes": "%s", "modifiers": [%s], "status": "%s", "exit_code": %s, "seconds": %s, "closing_line": "%s"%s}\n' \
    "$name" "$suite" "$transport" "$layout" "$gpus" "$pes" "$([ $mpi -eq 1 ] && echo per-pe || echo one)" "$modifiers" \
    "$status" "$rc" "$seconds" "$(tr -c '[:print:]' ' ' <<< "${closing//[\"\\]/ }" | sed 's/ *$//')" "$counts" >> "$GPUCOMM_TEST_RECORDS"
}
skip() { record skipped 77 "($1)"; exit 77; }

# The GPUs this test may use, and the first N of them.
if [ -n "${GPUCOMM_TEST_GPUS:-}" ]; then IFS=, read -ra pool <<< "$GPUCOMM_TEST_GPUS"
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -ra pool <<< "$CUDA_VISIBLE_DEVICES"
else read -ra pool <<< "$(seq 0 $(($(nvidia-smi -L 2>/dev/null | grep -c '^GPU') - 1)) | xargs)"
fi
[ "${#pool[@]}" -ge "$gpus" ] || skip "needs $gpus GPU(s), ${#pool[@]} here"
export CUDA_VISIBLE_DEVICES
CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${pool[*]:0:$gpus}")
export GPUCOMM_TEST_PES_PER_GPU=$pes
for e in "${extra_env[@]}"; do export "${e?}"; done
# GPUCOMM_TEST_LIB_PATH (an --env of the suites that use libraries carried beside the tree, such as
# UCX unpacked by scripts/fetch-ucx.sh): searched before the loader's path, by the test and by
# mpirun's processes.
if [ -n "${GPUCOMM_TEST_LIB_PATH:-}" ]; then
  export LD_LIBRARY_PATH="$GPUCOMM_TEST_LIB_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -x "$binary" ] || { record failed 1 "(not built: $binary; cmake --build <build> --target $(basename "$binary"))"; exit 1; }

# The Catch2 spec of a narrowed run.
if [ -n "${GPUCOMM_TEST_SPEC:-}" ] && [ -n "$spec_mode" ]; then
  if [ "$spec_mode" = join ] && [ ${#args[@]} -gt 0 ]; then args[-1]+=$GPUCOMM_TEST_SPEC
  else args+=("$GPUCOMM_TEST_SPEC"); fi
fi

# Processes sharing a GPU need the MPS daemon of the fixture (or one the caller runs).
mps_mode=""
if [ -n "$mps_dir" ]; then
  mps_mode=$(cat "$mps_dir/mode" 2>/dev/null || echo none)
  case $mps_mode in
    own) export CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log" ;;
    existing) ;;
    missing) skip "processes sharing a GPU need MPS: nvidia-cuda-mps-control not found" ;;
    *) mps_vars=(); mps_probe 1 || skip "processes sharing a GPU need MPS: no daemon (ctest starts one in its gpu_mps fixtures)" ;;
  esac
fi

cmd=()
if [ $mpi -eq 1 ]; then
  command -v mpirun > /dev/null 2>&1 || skip "one process per PE needs mpirun"
  cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
       -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x CUDA_VISIBLE_DEVICES -x GPUCOMM_TEST_PES_PER_GPU)
  for v in GPUCOMM_SOAK_OPS GPUCOMM_SOAK_SEED GPUCOMM_SOAK_MAX_BYTES GPUCOMM_SOAK_FAULTS GPUCOMM_SOAK_DROP \
      CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; do
    if [ -n "${!v+set}" ]; then cmd+=(-x "$v"); fi
  done
  for e in "${extra_env[@]}"; do cmd+=(-x "${e%%=*}"); done
  if [ -n "${GPUCOMM_TEST_LIB_PATH:-}" ]; then cmd+=(-x LD_LIBRARY_PATH); fi
  cmd+=(-np $((gpus * pes)))
fi
if [ $failures -eq 1 ]; then
  # one-per-process.sh BIN SPEC LAUNCHER...: the launcher comes last.
  cmd=(bash "$here/one-per-process.sh" "$binary" "${args[@]}" "${cmd[@]}")
elif [ $bulk -eq 1 ]; then
  cmd=("${cmd[@]}" bash "$here/racecheck-bulk.sh" "$binary" "${args[@]}")
elif [ -n "$tool" ]; then
  # GPUCOMM_TEST_SANITIZER_API_ERRORS (an --env): compute-sanitizer's --report-api-errors, for
  # suites whose libraries probe the CUDA API and expect failures (UCX with CUDA).
  api=()
  [ -n "${GPUCOMM_TEST_SANITIZER_API_ERRORS:-}" ] && api=(--report-api-errors "$GPUCOMM_TEST_SANITIZER_API_ERRORS")
  cmd=("${cmd[@]}" compute-sanitizer --tool "$tool" "${api[@]}" --error-exitcode 1 "$binary" "${args[@]}")
else
  cmd=("${cmd[@]}" "$binary" "${args[@]}")
fi

log=$(mktemp)
echo "== $name: ${cmd[*]}"
echo "   CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES GPUCOMM_TEST_PES_PER_GPU=$pes${extra_env[*]:+ ${extra_env[*]}}${mps_mode:+ (MPS: $mps_mode)}"
# In the background with a watchdog: 20 s before the kill, the stacks of its processes.
timeout -k 10 "$limit" "${cmd[@]}" > "$log" 2>&1 &
pid=$!
start_watchdog "$pid" "$limit" "$(cd "$(dirname "$binary")" && pwd)" "$log.stacks"
# An interrupt of this test stops its processes, not only the wait.
trap 'stop_watchdog; kill -TERM "$pid" 2>/dev/null; wait "$pid"; cat "$log"; rm -f "$log" "$log.stacks"; exit 130' INT TERM
wait "$pid"
rc=$?
stop_watchdog
[ -s "$log.stacks" ] && cat "$log.stacks" >> "$log"
cat "$log"
[ -z "${GPUCOMM_TEST_LOG_DIR:-}" ] || cp "$log" "$GPUCOMM_TEST_LOG_DIR/$name.log"
output=$(cat "$log")
rm -f "$log" "$log.stacks"

# shellcheck disable=SC2001  # a regular expression: Catch2's colours (it prints them under mpirun)
closing=$(sed "s/\x1b\[[0-9;]*m//g" <<< "$output" | grep -E "All tests passed|test cases:|assertions:|tests passed|OK:|WRONG:|ERROR SUMMARY|RACECHECK SUMMARY" | tail -n 2 | tr '\n' ' ')
closing=${closing% }
# Catch2 exits 0 when its test spec matches no test case: a test that tested nothing fails.
if [ $rc -eq 0 ] && grep -q "No tests ran" <<< "$output"; then
  rc=1
  # shellcheck disable=SC2001  # a regular expression: Catch2's colours
  closing="no test case matched (Catch2: $(sed "s/\x1b\[[0-9;]*m//g" <<< "$output" | grep -m1 -o "No test cases matched.*"))"
fi
if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; }; then
  closing="killed at the time limit ($limit s)${closing:+; $closing}"
  [ "$mps_mode" = own ] && bash "$here/mps.sh" restart "$mps_dir"
fi
if [ $rc -eq 0 ]; then record passed 0 "$closing"; else record failed "$rc" "$closing"; fi
exit $rc
