// The ring shift over per-peer routing: route<NVLinkStore, IBGDAPost> sends each peer through
// NVLink when this GPU can load and store its memory and through the NIC otherwise. Here the NIC
// is the software NIC model (a test and development tool) and a load_store_filter splits the GPUs
// into two halves, so neighbours in the other half go through the NIC, as on two hosts. The kernel
// is the same as for one transport; only the comm type differs. Every PE also adds one to a
// counter on PE 0, an atomic that the route keeps in one atomicity domain whichever path each PE
// takes. Runs one PE per GPU of this machine in one process.
#include <gpucomm/gpucomm.cuh>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
using transport = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
using comm_t = gpucomm::comm<transport>;

// One block of `threads`: the route's put, add and barrier carry both legs' code, more registers
// than a 1024-thread block can have, so the block is smaller and the bound tells the compiler.
constexpr int threads = 256;

__global__ void __launch_bounds__(threads) ring_shift(comm_t c, gpucomm::sym_ptr<int> send, gpucomm::sym_ptr<int> recv,
                                                      int n, gpucomm::sym_ptr<unsigned long long> counter) {
  auto block = cg::this_thread_block();
  for (int i = static_cast<int>(block.thread_rank()); i < n; i += static_cast<int>(block.num_threads()))
    send[i] = c.my_pe() * 1000000 + i;
  block.sync();
  int const next = (c.my_pe() + 1) % c.npes();
  c.put(block, recv, send.get(), n, next);  // NVLink stores or an RDMA WRITE, per peer
  c.add(block, counter, 1ull, 0);           // one atomicity domain for PE 0's counter
  c.barrier(block);                         // every put and add has landed everywhere
}

int main() try {
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  int const half = (gpus + 1) / 2;
  gpucomm::world_options options;
  options.load_store_filter = [half](int i, int j) { return i / half == j / half; };
  options.heap_bytes = std::size_t{256} << 20;
  gpucomm::world w({}, options);
  w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model});  // before IBGDAPost's first use
  int const n = 1 << 20;
  auto send = w.alloc<int>(n);
  auto recv = w.alloc<int>(n);
  auto counter = w.alloc<unsigned long long>(1);
  GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(0)), 0);
  GPUCOMM_CUDA_CHECK(cudaMemset(counter.ptr(0).get(), 0, sizeof(unsigned long long)), 0);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    ring_shift<<<1, threads, 0, w.stream(pe)>>>(w.comm<transport>(pe), send.ptr(pe), recv.ptr(pe), n, counter.ptr(pe));
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  int bad = 0, through_nic = 0;
  std::vector<int> host(n);
  for (int pe : w.local_pes()) {
    // PE pe's GPU current: only it is sure to map PE pe's memory (the filter keeps the others out).
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv.ptr(pe).get(), n * sizeof(int), cudaMemcpyDeviceToHost), pe);
    int const left = (pe + w.npes() - 1) % w.npes();
    for (int i = 0; i < n; ++i) bad += host[i] != left * 1000000 + i;
    through_nic += w.transport_host<transport>().leg_of(left, pe) == 1;
  }
  unsigned long long count = 0;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(0)), 0);
  GPUCOMM_CUDA_CHECK(cudaMemcpy(&count, counter.ptr(0).get(), sizeof(count), cudaMemcpyDeviceToHost), 0);
  bad += count != static_cast<unsigned long long>(w.npes());
  std::printf("routed ring shift of %d ints over %d GPU(s), %d hop(s) through the NIC model, counter %llu: %s\n", n,
              w.npes(), through_nic, count, bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
