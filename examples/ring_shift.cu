// The classic ring shift: every PE puts its block of data into the next PE's buffer, then all
// meet at a barrier, and each checks that it holds its left neighbour's data. Runs one PE per GPU
// of this machine in one process.
#include <gpucomm/gpucomm.cuh>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;

__global__ void ring_shift(comm_t c, gpucomm::sym_ptr<int> send, gpucomm::sym_ptr<int> recv, int n) {
  auto block = cg::this_thread_block();
  for (int i = static_cast<int>(block.thread_rank()); i < n; i += static_cast<int>(block.num_threads()))
    send[i] = c.my_pe() * 1000000 + i;
  block.sync();
  int const next = (c.my_pe() + 1) % c.npes();
  c.put(block, recv, send.get(), n, next);  // my block into next's recv
  c.barrier(block);                         // every put has landed everywhere
}

int main() try {
  gpucomm::world w;  // one PE per visible GPU
  int const n = 1 << 20;
  auto send = w.alloc<int>(n);
  auto recv = w.alloc<int>(n);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    ring_shift<<<1, 1024, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), send.ptr(pe), recv.ptr(pe), n);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  int bad = 0;
  std::vector<int> host(n);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv.ptr(pe).get(), n * sizeof(int), cudaMemcpyDeviceToHost), pe);
    int const left = (pe + w.npes() - 1) % w.npes();
    for (int i = 0; i < n; ++i) bad += host[i] != left * 1000000 + i;
  }
  std::printf("ring shift of %d ints over %d GPU(s): %s\n", n, w.npes(), bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
