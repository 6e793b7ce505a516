// CUB and gpucomm in one kernel: each PE reduces its local array with cub::BlockReduce, sends the
// partial sum to every PE with put_signal, waits for all partials, and adds them up: an
// all-reduce of one number per PE, checked against the host.
#include <gpucomm/gpucomm.cuh>

#include <cub/block/block_reduce.cuh>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;
constexpr int threads = 256;

__global__ void allreduce_sum(comm_t c, long long const* data, int n, gpucomm::sym_ptr<long long> partials,
                              gpucomm::sym_ptr<gpucomm::signal_t> arrived, gpucomm::signal_t round, long long* out) {
  using reduce_t = cub::BlockReduce<long long, threads>;
  __shared__ typename reduce_t::TempStorage scratch;
  __shared__ long long partial;
  auto block = cg::this_thread_block();
  long long mine = 0;
  for (int i = threadIdx.x; i < n; i += threads) mine += data[i];
  long long const total = reduce_t(scratch).Sum(mine);
  if (threadIdx.x == 0) partial = total;
  block.sync();
  // Thread pe sends my partial to PE pe's slot [my_pe] and bumps its arrival counter; the data is
  // delivered before the counter moves.
  if (threadIdx.x < c.npes()) {
    c.put_signal(gpucomm::this_thread(), partials + c.my_pe(), &partial, 1, arrived, 1, gpucomm::signal_op::add,
                 static_cast<int>(threadIdx.x));
  }
  // Every PE adds 1 per round: wait for npes * round arrivals.
  c.wait_until(block, arrived, gpucomm::cmp::ge, static_cast<gpucomm::signal_t>(c.npes()) * round);
  if (threadIdx.x == 0) {
    long long sum = 0;
    for (int pe = 0; pe < c.npes(); ++pe) sum += partials[pe];
    *out = sum;
  }
}

int main() try {
  gpucomm::world w;
  int const n = 1 << 16;
  auto partials = w.alloc<long long>(static_cast<std::size_t>(w.npes()));
  auto arrived = w.alloc<gpucomm::signal_t>(1);
  std::vector<long long*> data(w.npes()), out(w.npes());
  long long expected = 0;
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    std::vector<long long> host(n);
    for (int i = 0; i < n; ++i) expected += host[i] = (pe + 1) * 7 + i % 13;
    GPUCOMM_CUDA_CHECK(cudaMalloc(&data[pe], n * sizeof(long long)), pe);
    GPUCOMM_CUDA_CHECK(cudaMalloc(&out[pe], sizeof(long long)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(data[pe], host.data(), n * sizeof(long long), cudaMemcpyHostToDevice), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(arrived.ptr(pe).get(), 0, sizeof(gpucomm::signal_t)), pe);
  }
  w.barrier();  // every PE's counter is zero before anyone signals
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    allreduce_sum<<<1, threads, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), data[pe], n, partials.ptr(pe),
                                                   arrived.ptr(pe), 1, out[pe]);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  int bad = 0;
  for (int pe : w.local_pes()) {
    long long got = 0;
    GPUCOMM_CUDA_CHECK(cudaMemcpy(&got, out[pe], sizeof(got), cudaMemcpyDeviceToHost), pe);
    bad += got != expected;
    GPUCOMM_CUDA_CHECK(cudaFree(data[pe]), pe);
    GPUCOMM_CUDA_CHECK(cudaFree(out[pe]), pe);
  }
  std::printf("CUB block reduce + gpucomm all-reduce over %d GPU(s): sum %lld, %s\n", w.npes(), expected,
              bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
