// Device collectives: every PE sums a vector with the others (allreduce) and gathers one value from
// each (allgather), inside its own kernel, through a team workspace. Runs in one process with
// `pes_per_gpu` PEs on every visible GPU (argument 1, default 2: several PEs may share a GPU).
#include <gpucomm/gpucomm.cuh>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;

__global__ void __launch_bounds__(1024)
    sum_and_gather(comm_t c, gpucomm::collective_workspace ws, float* grad, float* sum, int* ranks, std::size_t n) {
  auto block = cg::this_thread_block();
  for (std::size_t i = block.thread_rank(); i < n; i += block.num_threads())
    grad[i] = float(c.my_pe() + 1) * float(i % 7);
  block.sync();
  gpucomm::allreduce(c, block, ws, sum, grad, n, gpucomm::reduction::sum{});  // sum[i] over all PEs
  __shared__ int mine;
  if (block.thread_rank() == 0) mine = c.my_pe() * 10;
  block.sync();
  gpucomm::allgather(c, block, ws, ranks, &mine, 1);  // ranks[r] = 10 * r, from shared memory
}

int main(int argc, char** argv) try {
  int const pes_per_gpu = argc > 1 ? std::atoi(argv[1]) : 2;
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d)
    for (int k = 0; k < pes_per_gpu; ++k) devices.push_back(d);
  gpucomm::world w(devices);
  w.prepare(sum_and_gather);  // PEs sharing a GPU: load the kernel and reserve its stack before any launch
  gpucomm::team_workspace ws(w, w.team_world());  // the default; a one-CTA kernel runs on its part 0
  std::size_t const n = 1 << 20;
  auto grad = w.alloc<float>(n);
  auto sum = w.alloc<float>(n);
  auto ranks = w.alloc<int>(w.npes());
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    sum_and_gather<<<1, 1024, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), ws.view(pe), grad.ptr(pe).get(),
                                                 sum.ptr(pe).get(), ranks.ptr(pe).get(), n);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  int const npes = w.npes();
  float const pe_sum = float(npes * (npes + 1) / 2);
  std::size_t bad = 0;
  std::vector<float> host(n);
  std::vector<int> gathered(static_cast<std::size_t>(npes));
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaMemcpy(host.data(), sum.ptr(pe).get(), n * sizeof(float), cudaMemcpyDeviceToHost), pe);
    for (std::size_t i = 0; i < n; ++i) bad += host[i] != pe_sum * float(i % 7);
    GPUCOMM_CUDA_CHECK(
        cudaMemcpy(gathered.data(), ranks.ptr(pe).get(), gathered.size() * sizeof(int), cudaMemcpyDeviceToHost), pe);
    for (int r = 0; r < npes; ++r) bad += gathered[static_cast<std::size_t>(r)] != 10 * r;
  }
  std::printf("allreduce of %zu floats and allgather over %d PE(s) on %d GPU(s): %s\n", n, npes, gpus,
              bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
