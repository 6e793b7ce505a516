// A fused kernel with P2PCopy: warps 1..7 of a CTA compute tiles into shared memory while warp 0
// pushes the previous tile from shared memory to the next PE with the bulk-copy unit (one lane of
// warp 0 issues; no staging, since the source is already in shared memory). Two tile buffers
// alternate, so computing tile t overlaps pushing tile t-1. Each push is a put_signal: the
// receiver waits for its counter to reach the tile count, then checks every element.
//
// One PE per GPU; on a one-GPU machine two PEs share the GPU (the push then crosses between two
// PEs' heaps on one GPU, through the same peer mapping).
#include <gpucomm/gpucomm.cuh>

#include <cooperative_groups.h>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;
using comm_t = gpucomm::comm<gpucomm::P2PCopy>;

constexpr int threads = 256;      // warp 0 pushes, warps 1..7 compute
constexpr int tile_elems = 4096;  // 16 KiB of floats per tile
constexpr int tiles = 64;         // 1 MiB per PE
constexpr int compute_threads = threads - 32;

__host__ __device__ float element(int pe, int tile, int i) {
  return static_cast<float>(pe * 1000003 + tile * 4099 + i);
}

__global__ void __launch_bounds__(threads)
    produce_and_push(comm_t c, gpucomm::sym_ptr<float> inbox, gpucomm::sym_ptr<gpucomm::signal_t> arrived,
                     unsigned long long* errors) {
  __shared__ alignas(128) float tile[2][tile_elems];
  auto const block = cg::this_thread_block();
  auto const warp = cg::tiled_partition<32>(block);
  int const me = c.my_pe(), next = (me + 1) % c.npes(), prev = (me + c.npes() - 1) % c.npes();
  bool const pusher = threadIdx.x < 32;
  for (int t = 0; t <= tiles; ++t) {
    if (pusher) {
      // Tile t-1 was finished before the last __syncthreads. put_signal returns once the bulk
      // stores have read the buffer, so the compute warps may overwrite it after the next sync.
      if (t > 0)
        c.put_signal(warp, inbox + (t - 1) * tile_elems, tile[(t - 1) % 2], tile_elems, arrived, 1,
                     gpucomm::signal_op::add, next);
    } else if (t < tiles) {
      for (int i = static_cast<int>(threadIdx.x) - 32; i < tile_elems; i += compute_threads)
        tile[t % 2][i] = element(me, t, i);
      // These threads are not in the pushing warp: order their shared-memory writes before the
      // bulk-copy unit's reads of them (the __syncthreads below hands the tile over).
      gpucomm::publish_for_bulk_copy();
    }
    block.sync();
  }
  // Every tile of my predecessor has arrived when the counter reaches `tiles`.
  c.wait_until(block, arrived, gpucomm::cmp::ge, tiles);
  unsigned long long bad = 0;
  for (int i = static_cast<int>(threadIdx.x); i < tiles * tile_elems; i += threads)
    bad += inbox.get()[i] != element(prev, i / tile_elems, i % tile_elems);
  if (bad) atomicAdd(errors, bad);
}

int main() try {
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  if (gpus == 1) devices.push_back(0);  // two PEs sharing the only GPU
  gpucomm::world w(devices);
  w.prepare(produce_and_push);  // PEs sharing a GPU: load the kernel and reserve its stack before any launch
  auto inbox = w.alloc<float>(static_cast<std::size_t>(tiles) * tile_elems);
  auto arrived = w.alloc<gpucomm::signal_t>(1);
  std::vector<unsigned long long*> errors(static_cast<std::size_t>(w.npes()), nullptr);
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(inbox.ptr(pe).get(), 0xff, inbox.size() * sizeof(float)), pe);  // poison (NaN)
    GPUCOMM_CUDA_CHECK(cudaMemset(arrived.ptr(pe).get(), 0, sizeof(gpucomm::signal_t)), pe);
    GPUCOMM_CUDA_CHECK(cudaMalloc(&errors[pe], sizeof(unsigned long long)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(errors[pe], 0, sizeof(unsigned long long)), pe);
  }
  w.barrier();  // every inbox poisoned and counter zero before anyone pushes
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    produce_and_push<<<1, threads, 0, w.stream(pe)>>>(w.comm<gpucomm::P2PCopy>(pe), inbox.ptr(pe), arrived.ptr(pe),
                                                      errors[pe]);
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  unsigned long long bad = 0;
  for (int pe : w.local_pes()) {
    // The host checks every element too, independently of the kernel's own count.
    std::vector<float> got(inbox.size());
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(got.data(), inbox.ptr(pe).get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost),
                       pe);
    int const prev = (pe + w.npes() - 1) % w.npes();
    for (std::size_t i = 0; i < got.size(); ++i)
      bad += got[i] != element(prev, static_cast<int>(i / tile_elems), static_cast<int>(i % tile_elems));
    unsigned long long device_bad = 0;
    GPUCOMM_CUDA_CHECK(cudaMemcpy(&device_bad, errors[pe], sizeof(device_bad), cudaMemcpyDeviceToHost), pe);
    bad += device_bad;
    GPUCOMM_CUDA_CHECK(cudaFree(errors[pe]), pe);
  }
  std::printf("P2PCopy tile push: %d PEs on %d GPU(s), %d tiles of %d floats each, pushed from shared memory: %s\n",
              w.npes(), gpus, tiles, tile_elems, bad ? "WRONG" : "OK");
  return bad ? 1 : 0;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
