#!/usr/bin/env bash
# Build the ring-shift example and run it on every GPU of this machine that CUDA_VISIBLE_DEVICES
# leaves visible (one PE per GPU).
# Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "This machine has no NVIDIA GPU, so the demo cannot run here."
  exit 1
fi
gpucomm_need cmake cmake
gpucomm_need g++ g++
gpucomm_install_missing
nvcc=$(gpucomm_find_nvcc)

build=${GPUCOMM_DEMO_BUILD_DIR:-build-demo}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DGPUCOMM_BUILD_TESTS=OFF -DGPUCOMM_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target ring_shift -j "$(nproc)"
echo "Running the ring shift on every GPU that CUDA sees (CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES:-all}):"
"$build/examples/ring_shift"
