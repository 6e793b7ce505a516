#!/usr/bin/env bash
# The whole GPU round on a machine with GPUs: configure and build, run the demo and the examples,
# the three GPU test suites (NVLinkStore, IBGDAPost through the NIC model, route<NVLinkStore,
# IBGDAPost> with a forced split) on every GPU count asked in both process modes (one process
# owning the GPUs, and one process per GPU under mpirun), compute-sanitizer over the [sanitize]
# subset, the verbs_gpu tests and the IBGDAPost/route cases, and optionally the benchmark suite. Each step's log and a summary go to $OUT (default ./gpu-round-out):
# summary.txt and gpu-round-logs.tgz.
#
#   scripts/gpu-round.sh [--steps build,demo,tests,sanitize,bench] [--counts "1 2 4"] [--quick-bench]
#
# Steps not named are skipped; a later call can run further steps on the same build (build-gpu/).
# Catch2 is taken from .deps/catch2 (Debian's package unpacked there) when the machine has none.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

steps="build,demo,tests,sanitize"
counts=""
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    --quick-bench) bench_args+=(--quick); shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
has_step() { [[ ",$steps," == *",$1,"* ]]; }

OUT=${OUT:-$PWD/gpu-round-out}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -eq 0 ]; then
  echo "This machine has no NVIDIA GPU, so the GPU round cannot run here."
  exit 1
fi
if [ -z "$counts" ]; then
  for n in 1 2 4 8; do [ "$n" -le "$ngpu" ] && counts="$counts $n"; done
  [[ " $counts " == *" $ngpu "* ]] || counts="$counts $ngpu"
fi
note "gpu-round $(date -u +%Y-%m-%dT%H:%MZ): $ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
note "commit: ${GPUCOMM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi topo -m > "$logs/topo.txt" 2>&1
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1

status=0
# run NAME CMD...: run a step, log it, and record its outcome and Catch2's/ctest's closing line.
run() {
  local name=$1; shift
  local log="$logs/$name.log"
  local start=$SECONDS
  # A step that hangs is killed (GPUCOMM_STEP_TIMEOUT seconds, default 900) and counts as failed.
  timeout -k 10 "${GPUCOMM_STEP_TIMEOUT:-900}" "$@" > "$log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -E "All tests passed|test cases:|assertions:|tests passed|OK$|WRONG|ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 2 | tr '\n' ' ')
  if [ $rc -eq 0 ]; then note "PASS  $name ($((SECONDS - start)) s) $tail_line"
  else note "FAIL  $name (exit $rc, $((SECONDS - start)) s) $tail_line"; status=1; tail -n 40 "$log"; fi
  return $rc
}

build=build-gpu
tests_bin=$build/tests/gpucomm_gpu_tests
# The op suite per transport: NVLinkStore (with the world and verbs_gpu tests), IBGDAPost through
# the NIC model, route<NVLinkStore, IBGDAPost> with a forced split.
suites="gpucomm_gpu_tests gpucomm_gpu_tests_ibgda gpucomm_gpu_tests_route"
if has_step build; then
  prefix=()
  [ -d .deps/catch2/usr ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps/catch2/usr")
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  run configure cmake -S . -B $build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" \
      -DCMAKE_CUDA_COMPILER="$(gpucomm_find_nvcc)"
  run build cmake --build $build -j "$(nproc)" --target $suites ring_shift cub_allreduce thrust_local routed_ring
fi

if has_step demo; then
  run demo bash scripts/demo.sh
  for ex in cub_allreduce thrust_local routed_ring; do run "example-$ex" $build/examples/$ex; done
fi

mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS
     -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x CUDA_VISIBLE_DEVICES)
if has_step tests; then
  for n in $counts; do
    export CUDA_VISIBLE_DEVICES
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))
    for suite in $suites; do
      bin=$build/tests/$suite
      name=${suite#gpucomm_gpu_}
      run "${name}-one-process-${n}gpu" $bin --order decl
      if [ "$n" -ge 2 ]; then
        run "${name}-mpi-${n}gpu" "${mpi[@]}" -np "$n" $bin --order decl "~[verbs]"
      fi
    done
    unset CUDA_VISIBLE_DEVICES
  done
fi

if has_step sanitize; then
  export CUDA_VISIBLE_DEVICES=0,1
  [ "$ngpu" -lt 2 ] && export CUDA_VISIBLE_DEVICES=0
  for tool in memcheck racecheck synccheck; do
    run "sanitize-$tool" compute-sanitizer --tool $tool --error-exitcode 1 $tests_bin "[sanitize],[verbs]"
    for suite in gpucomm_gpu_tests_ibgda gpucomm_gpu_tests_route; do
      run "sanitize-$tool-${suite#gpucomm_gpu_tests_}" compute-sanitizer --tool $tool --error-exitcode 1 \
          $build/tests/$suite "[sanitize],[ibgda],[route]"
    done
  done
  unset CUDA_VISIBLE_DEVICES
fi

if has_step bench; then
  if [ -x scripts/bench.sh ]; then
    OUT="$logs/bench" run bench bash scripts/bench.sh "${bench_args[@]}"
  else
    note "SKIP  bench (scripts/bench.sh not present)"
  fi
fi

cp "$summary" "$logs/summary.txt"
tar czf "$OUT/gpu-round-logs.tgz" -C "$logs" .
note "logs: gpu-round-logs.tgz; overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
