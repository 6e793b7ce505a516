#!/usr/bin/env bash
# Build everything (every header on its own, examples, tests, benchmarks) and run every test that
# needs no GPU: host tests, MPI bootstrap tests under mpirun -np 2, the UCX engine tests (mpirun
# -np 2 over TCP, and across network namespaces where they can be made), compile-fail tests, and
# an example built against an installed gpucomm. Installs missing Debian packages first.
# Writes the run's record, each step's seconds and ctest's counts, to <build>/test-summary.json
# (scripts/lib/test_summary.py), also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

build=${GPUCOMM_BUILD_DIR:-build}
rm -f "$build/ctest.log"  # a reused build folder: no counts of an earlier run
steps=""
step=packages
step_start=$SECONDS
done_step() {
  steps+="$1=$((SECONDS - step_start)) "
  step_start=$SECONDS
  step=$2
}
write_summary() {
  local rc=$?
  [ "$rc" -eq 0 ] || steps+="$step=$((SECONDS - step_start)) "  # the step that failed, last
  mkdir -p "$build"
  python3 scripts/lib/test_summary.py --out "$build/test-summary.json" --status "$rc" --seconds "$SECONDS" \
    --steps "$steps" --ctest-log "$build/ctest.log" ${nvcc:+--nvcc "$("$nvcc" --version | grep -m1 release)"} || true
  exit "$rc"
}
trap write_summary EXIT

gpucomm_need cmake cmake
gpucomm_need ninja ninja-build
gpucomm_need g++ g++
gpucomm_need /usr/include/catch2/catch.hpp catch2
gpucomm_need mpirun openmpi-bin libopenmpi-dev
gpucomm_need /usr/include/infiniband/mlx5dv.h libibverbs-dev rdma-core ibverbs-providers
gpucomm_need clang-format clang-format
# UCX (gpucomm::ucx, the network engine) and iproute2 (the engine tests across network namespaces).
gpucomm_need /usr/include/ucp/api/ucp.h libucx-dev
gpucomm_need ip iproute2
# Boost.PFR (Boost >= 1.75; Debian 12's default libboost-dev is 1.74): the aggregate headers and tests.
gpucomm_need /usr/include/boost/pfr.hpp libboost1.81-dev
# The kernel's mlx5_ifc.h: the independent layout source of the PRM layout test.
gpucomm_need_newest "/usr/src/linux-headers-*/include/linux/mlx5/mlx5_ifc.h" '^linux-headers-[0-9][^ ]*-common$'
gpucomm_install_missing
nvcc=$(gpucomm_find_nvcc)
done_step packages configure

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc"
done_step configure build
cmake --build "$build" -j "$(nproc)"
done_step build ctest
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" 2>&1 | tee "$build/ctest.log"
done_step ctest package
# The Python package (pyproject.toml): installs into fresh venvs, ships the headers, get_include() works.
bash tests/python/check_package.sh
done_step package done
