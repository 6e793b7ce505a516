// expect: the group type needs a shfl(value, src_rank) member
#include <gpucomm/gpucomm.cuh>
// A group of two threads with no way to hand a value around.
struct pair_of_threads {
  __device__ unsigned num_threads() const { return 2; }
  __device__ unsigned thread_rank() const { return threadIdx.x & 1; }
  __device__ void sync() const { __syncwarp(); }
};
static_assert(gpucomm::group<pair_of_threads>);
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<int> i) {
  c.add(pair_of_threads{}, i, 1, 0);  // non-fetching: fine with any group
#if GPUCOMM_MISUSE
  c.fetch_add(pair_of_threads{}, i, 1, 0);
#endif
}
