// Thrust on the local part of a symmetric buffer: each PE sorts its own copy with thrust::sort
// (the sym_ptr's get() is an ordinary device pointer), then a kernel gets the right neighbour's
// sorted copy with gpucomm, and the host checks both.
#include <gpucomm/gpucomm.cuh>

#include <thrust/execution_policy.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;

__global__ void fetch_right(comm_t c, float* dst, gpucomm::sym_ptr<float const> src, int n) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  if (threadIdx.x < 32) c.get(warp, dst, src, n, (c.my_pe() + 1) % c.npes());
}

int main() try {
  gpucomm::world w;
  int const n = 100000;
  auto values = w.alloc<float>(n);
  std::vector<std::vector<float>> inputs(w.npes());
  std::vector<float*> fetched(w.npes());
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    inputs[pe].resize(n);
    unsigned x = 12345u + pe;
    for (auto& v : inputs[pe]) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(values.ptr(pe).get(), inputs[pe].data(), n * sizeof(float), cudaMemcpyHostToDevice),
                       pe);
    thrust::sort(thrust::cuda::par.on(w.stream(pe)), values.ptr(pe).get(), values.ptr(pe).get() + n);
    GPUCOMM_CUDA_CHECK(cudaMalloc(&fetched[pe], n * sizeof(float)), pe);
  }
  w.barrier();  // every PE's copy is sorted before anyone reads it
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    fetch_right<<<1, 32, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), fetched[pe], values.ptr(pe), n);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  int bad = 0;
  std::vector<float> got(n);
  for (int pe : w.local_pes()) {
    int const right = (pe + 1) % w.npes();
    auto expected = inputs[right];
    std::sort(expected.begin(), expected.end());
    GPUCOMM_CUDA_CHECK(cudaMemcpy(got.data(), fetched[pe], n * sizeof(float), cudaMemcpyDeviceToHost), pe);
    bad += got != expected;
    GPUCOMM_CUDA_CHECK(cudaFree(fetched[pe]), pe);
  }
  std::printf("thrust::sort on local parts + gpucomm get over %d GPU(s): %s\n", w.npes(), bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
