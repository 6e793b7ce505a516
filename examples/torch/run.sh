#!/usr/bin/env bash
# The PyTorch example end to end on one GPU, offline:
#   1. checks that torch is importable (else exit 77: skipped) and prints its CUDA version and nvcc's;
#   2. installs the gpucomm Python package from this checkout with pip, offline (--no-index,
#      --no-build-isolation, --target under a temporary directory, on PYTHONPATH);
#   3. builds the extension into examples/torch/build/ (build.py; ignored by git);
#   4. starts a CUDA MPS daemon of its own (pipe and log directories under the temporary directory)
#      unless one already answers, so that the two processes' kernels are co-resident on the GPU;
#      quits it at the end. The GPU's compute mode is never changed;
#   5. runs the tests, each as 2 processes on GPU 0 (torch.distributed.run, gloo): test_allreduce.py,
#      then test_moe.py, or the one --test names;
# and exits 0 when every test passed, 1 when one failed (or did not finish), 77 where they cannot run
# here: no torch, no CUDA GPU, no MPS.
#
#   bash examples/torch/run.sh                                    # both; PYTHON=python3 by default
#   bash examples/torch/run.sh --test moe                         # one test: allreduce or moe
#   PYTHON=/opt/venv/bin/python bash examples/torch/run.sh --test allreduce --calls 1000
#                                                                 # arguments after --test NAME go to it
#
# Environment: PYTHON (the interpreter with torch), GPUCOMM_TORCH_NPROC (processes, default 2),
# GPUCOMM_TORCH_DEVICE (the GPU every rank uses, default 0), GPUCOMM_TORCH_TIMEOUT (seconds for the
# test, default 480, for each test), GPUCOMM_TORCH_RELEASE=1 (build gpucomm with -DNDEBUG: unbounded
# waits).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/lib/common.sh
source "$root/scripts/lib/common.sh"  # mps_probe
python=${PYTHON:-python3}
nproc=${GPUCOMM_TORCH_NPROC:-2}
device=${GPUCOMM_TORCH_DEVICE:-0}
timeout_s=${GPUCOMM_TORCH_TIMEOUT:-480}
build="$here/build"

note() { echo "[run.sh] $*"; }
skip() {
  note "SKIP: $*"
  exit 77
}
die() {
  note "FAIL: $*" >&2
  exit 1
}
t_start=$SECONDS
elapsed() { echo "$((SECONDS - t_start)) s"; }

tests=(allreduce moe)
if [ "${1:-}" = --test ]; then
  case "${2:-}" in
    allreduce | moe) tests=("$2") ;;
    all) ;;
    *) die "--test takes allreduce, moe or all, not '${2:-}'" ;;
  esac
  shift 2
fi
[ "$#" -gt 0 ] && [ "${#tests[@]}" -gt 1 ] && die "arguments for a test need --test allreduce or --test moe first: $*"

# ---- 1. torch --------------------------------------------------------------------------------------
command -v "$python" > /dev/null 2>&1 || skip "$python not found (set PYTHON to the interpreter that has torch)"
if ! info=$("$python" -c '
import torch
print(torch.__version__, torch.version.cuda, int(torch.cuda.is_available()), torch.cuda.device_count() if torch.cuda.is_available() else 0)
' 2> "${TMPDIR:-/tmp}/gpucomm-torch-import.$$"); then
  note "import torch failed:"
  tail -n 5 "${TMPDIR:-/tmp}/gpucomm-torch-import.$$"
  rm -f "${TMPDIR:-/tmp}/gpucomm-torch-import.$$"
  skip "torch is not importable by $python (install PyTorch, or set PYTHON)"
fi
rm -f "${TMPDIR:-/tmp}/gpucomm-torch-import.$$"
read -r torch_version torch_cuda cuda_ok ngpu <<< "$info"
note "torch $torch_version, built with CUDA $torch_cuda; CUDA available: $cuda_ok, $ngpu GPU(s)"
[ "$torch_cuda" = "None" ] && skip "this torch has no CUDA (a CPU-only build)"
[ "$cuda_ok" = "1" ] || skip "torch sees no CUDA GPU"
[ "$device" -lt "$ngpu" ] || skip "GPU $device does not exist ($ngpu visible)"

nvcc=""
for c in "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc 2> /dev/null)" /usr/local/cuda/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ]; then nvcc=$c; break; fi
done
[ -n "$nvcc" ] || die "nvcc not found (set CUDA_HOME, or put the CUDA 13 toolkit's bin on PATH)"
export CUDA_HOME=${CUDA_HOME:-$(cd "$(dirname "$nvcc")/.." && pwd)}
nvcc_release=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
note "nvcc $nvcc_release ($nvcc); torch's CUDA $torch_cuda"
if [ "${torch_cuda%%.*}" != "${nvcc_release%%.*}" ]; then
  # Only the binding goes through torch's build (host compiler, no CUDA), so this works: the core's
  # own CUDA runtime needs a driver for CUDA $nvcc_release, which torch's runtime runs on as well.
  note "note: torch's CUDA major version differs from the toolkit's; the extension does not compile CUDA code through torch, so that is fine (the driver must support CUDA $nvcc_release)"
fi

tmp=$(mktemp -d /tmp/gct.XXXXXX) || die "mktemp failed"
mps_ours=0
mps_vars=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [ "$mps_ours" -eq 1 ]; then
    if echo quit | timeout 60 env "${mps_vars[@]}" nvidia-cuda-mps-control > /dev/null 2>&1; then
      note "MPS daemon stopped"
    else
      note "WARN: the MPS daemon did not take quit (pipe directory $tmp/mps/pipe)"
    fi
    mps_ours=0
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 2. the gpucomm package, offline ---------------------------------------------------------------
t=$SECONDS
if "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation \
  --target "$tmp/site" "$root" > "$tmp/pip.log" 2>&1; then
  note "gpucomm package installed by pip into $tmp/site ($((SECONDS - t)) s)"
elif (cd "$root" && "$python" setup.py -q build_py --build-lib "$tmp/site") > "$tmp/build_py.log" 2>&1; then
  # pip or wheel missing from this interpreter (pip needs wheel to build offline with setuptools < 70.1):
  # setuptools alone lays out the same package (headers and _version.py included).
  note "pip could not install the package offline ($(grep -m1 -oE "invalid command 'bdist_wheel'|No module named [^ ]*|externally-managed-environment|error: .*" "$tmp/pip.log" || echo 'no message')); built it with setup.py build_py into $tmp/site instead ($((SECONDS - t)) s)"
else
  tail -n 15 "$tmp/pip.log" "$tmp/build_py.log"
  die "could not install the gpucomm package offline (logs above); install setuptools and wheel for $python"
fi
export PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import gpucomm; print("[run.sh] gpucomm", gpucomm.__version__, "headers in", gpucomm.get_include())' ||
  die "the gpucomm package is not importable"

# ---- 3. build ---------------------------------------------------------------------------------------
t=$SECONDS
build_args=()
[ "${GPUCOMM_TORCH_RELEASE:-0}" = 1 ] && build_args+=(--release)
"$python" "$here/build.py" --build-dir "$build" "${build_args[@]}" || die "the build failed (output above)"
note "build: $((SECONDS - t)) s"

# ---- 4. MPS ------------------------------------------------------------------------------------------
if [ "$nproc" -gt 1 ]; then
  command -v nvidia-cuda-mps-control > /dev/null 2>&1 ||
    skip "$nproc processes sharing GPU $device need the CUDA MPS daemon: nvidia-cuda-mps-control not found"
  if mps_probe 1; then
    note "MPS: a daemon already answers (${CUDA_MPS_PIPE_DIRECTORY:-default pipe directory}); using it, leaving it running"
  else
    mkdir -p "$tmp/mps/pipe" "$tmp/mps/log"
    mps_vars=(CUDA_MPS_PIPE_DIRECTORY="$tmp/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$tmp/mps/log")
    # Started with every GPU visible: a client's CUDA_VISIBLE_DEVICES selects among the daemon's.
    if env -u CUDA_VISIBLE_DEVICES "${mps_vars[@]}" nvidia-cuda-mps-control -d > "$tmp/mps/start.log" 2>&1; then
      mps_ours=1
    fi
    if [ "$mps_ours" -eq 1 ] && mps_probe 10; then
      note "MPS: daemon started (pipe directory $tmp/mps/pipe)"
      export CUDA_MPS_PIPE_DIRECTORY="$tmp/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$tmp/mps/log"
    else
      cat "$tmp/mps/start.log" "$tmp/mps/log/control.log" 2> /dev/null | tail -n 20
      die "the MPS daemon did not start (log above)"
    fi
  fi
fi

# ---- 5. the test -------------------------------------------------------------------------------------
# gpucomm never uses NVLink multicast; keep every other library off it too.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export GPUCOMM_TORCH_BUILD="$build" GPUCOMM_TORCH_DEVICE="$device"
status=0
for name in "${tests[@]}"; do
  note "test_$name.py: $nproc processes on GPU $device (timeout ${timeout_s} s)"
  t=$SECONDS
  timeout --kill-after=30 "$timeout_s" "$python" -m torch.distributed.run --standalone --nproc_per_node="$nproc" \
    "$here/test_$name.py" "$@"
  rc=$?
  [ "$rc" -eq 124 ] && note "FAIL: test_$name.py did not finish within $timeout_s s"
  note "test_$name.py: exit $rc, $((SECONDS - t)) s; total $(elapsed)"
  [ "$rc" -eq 0 ] || status=1
done
exit "$status"
