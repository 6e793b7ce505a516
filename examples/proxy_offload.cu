// ProxyQueue: a CTA computes chunks of a result into its symmetric outbox and hands each finished
// chunk to the host proxy, which moves it to the next PE with the copy engines while the CTA goes
// on computing: one thread posts a 64-byte command per chunk, no SM moves the bytes. Each chunk is
// a put_signal_nbi that sets the chunk's own signal word at the receiver once its data is there;
// the receiver waits for every word, then checks every element.
//
// One PE per GPU; on a one-GPU machine two PEs share the GPU (the copies then go between two PEs'
// heaps on one GPU, through the same peer mapping).
#include <gpucomm/gpucomm.cuh>

#include <cooperative_groups.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::ProxyQueue>;

constexpr int threads = 512;
constexpr int chunk_elems = 1 << 18;  // 1 MiB of floats per chunk
constexpr int chunks = 16;

__host__ __device__ float element(int pe, std::size_t i) { return static_cast<float>(pe * 7919 + i % 1000003); }

__global__ void __launch_bounds__(threads)
    compute_and_offload(comm_t c, gpucomm::sym_ptr<float> outbox, gpucomm::sym_ptr<float> inbox,
                        gpucomm::sym_ptr<gpucomm::signal_t> arrived, unsigned long long* errors) {
  auto const block = cg::this_thread_block();
  int const me = c.my_pe(), next = (me + 1) % c.npes(), prev = (me + c.npes() - 1) % c.npes();
  for (int k = 0; k < chunks; ++k) {
    std::size_t const first = static_cast<std::size_t>(k) * chunk_elems;
    for (std::size_t i = threadIdx.x; i < chunk_elems; i += threads) outbox.get()[first + i] = element(me, first + i);
    // The block's writes of the chunk are ordered before the leader's post (put_signal_nbi syncs
    // the group first); the chunk must not change until the quiet below.
    c.put_signal_nbi(block, inbox + first, outbox.get() + first, chunk_elems, arrived + k, 1, gpucomm::signal_op::set,
                     next);
  }
  c.quiet(block);
  for (int k = 0; k < chunks; ++k) c.wait_until(block, arrived + k, gpucomm::cmp::eq, 1);
  unsigned long long bad = 0;
  for (std::size_t i = threadIdx.x; i < std::size_t{chunks} * chunk_elems; i += threads)
    bad += inbox.get()[i] != element(prev, i);
  if (bad) atomicAdd(errors, bad);
}

int main() try {
  // Before the first CUDA call (the world does this too, but cudaGetDeviceCount below comes
  // first): CUDA spreads streams over this many hardware queues (default 8), and a proxy copy
  // queued behind a kernel that waits for it would never run (docs/guide/proxyqueue.md).
  gpucomm::request_hardware_queues();
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  if (gpus == 1) devices.push_back(0);  // two PEs sharing the only GPU
  gpucomm::world w(devices);
  w.prepare(compute_and_offload);  // PEs sharing a GPU: load the kernel and reserve its stack first
  std::size_t const n = std::size_t{chunks} * chunk_elems;
  auto outbox = w.alloc<float>(n);
  auto inbox = w.alloc<float>(n);
  auto arrived = w.alloc<gpucomm::signal_t>(chunks);
  std::vector<unsigned long long*> errors(static_cast<std::size_t>(w.npes()), nullptr);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(inbox.ptr(pe).get(), 0xff, n * sizeof(float)), pe);  // poison (NaN)
    GPUCOMM_CUDA_CHECK(cudaMemset(arrived.ptr(pe).get(), 0, chunks * sizeof(gpucomm::signal_t)), pe);
    GPUCOMM_CUDA_CHECK(cudaMalloc(&errors[pe], sizeof(unsigned long long)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(errors[pe], 0, sizeof(unsigned long long)), pe);
  }
  w.barrier();  // every inbox poisoned and every signal zero before anyone sends
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    compute_and_offload<<<1, threads, 0, w.stream(pe)>>>(w.comm<gpucomm::ProxyQueue>(pe), outbox.ptr(pe), inbox.ptr(pe),
                                                         arrived.ptr(pe), errors[pe]);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();  // also reports any command the proxy could not carry out
  unsigned long long bad = 0;
  for (int pe : w.local_pes()) {
    // The host checks every element too, independently of the kernel's own count.
    std::vector<float> got(n);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(got.data(), inbox.ptr(pe).get(), n * sizeof(float), cudaMemcpyDeviceToHost), pe);
    int const prev = (pe + w.npes() - 1) % w.npes();
    for (std::size_t i = 0; i < n; ++i) bad += got[i] != element(prev, i);
    unsigned long long device_bad = 0;
    GPUCOMM_CUDA_CHECK(cudaMemcpy(&device_bad, errors[pe], sizeof(device_bad), cudaMemcpyDeviceToHost), pe);
    bad += device_bad;
    GPUCOMM_CUDA_CHECK(cudaFree(errors[pe]), pe);
  }
  std::printf("ProxyQueue offload: %d PEs on %d GPU(s), %d chunks of %d floats moved by the copy engines: %s\n",
              w.npes(), gpus, chunks, chunk_elems, bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
