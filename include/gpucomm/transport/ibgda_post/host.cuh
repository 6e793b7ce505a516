#pragma once
// IBGDAPost, host half: the NIC's set-up (host_state.hpp), and what needs device code after
// the kernels: world::synchronize() quiets every queue of the local PEs with a small kernel, so
// operations the kernels left in flight are complete when the host looks, then reports failed ones.
// The device side is ibgda_post/device.cuh.

#include "host_state.hpp"
#include "device.cuh"

namespace gpucomm {

namespace detail {
#if defined(__CUDACC__)
/// Quiets every queue in `queues` (one thread each): what the host runs after the user's kernels.
template <class = void>
__global__ void ibgda_quiet_all(verbs_gpu::send_queue const* queues, unsigned count);
#endif

/// The host half (host_state.hpp), plus what needs device code: after the kernels on the
/// world's streams have finished, world::synchronize() quiets every queue of the local PEs with a
/// small kernel, so operations the kernels left in flight (put_nbi, add, set, signal) are complete
/// when the host looks, then reports failed ones.
class ibgda_host_state : public ibgda_host {
 public:
  using ibgda_host::ibgda_host;

  // A template so that only files that set IBGDAPost up compile the quiet kernel.
  template <class = void>
  void on_synchronize() const {
#if defined(__CUDACC__)
    current_device_guard const keep;
    for (int pe : world_->local_pes()) {
      ibgda_state const s = device_state_for(pe);
      unsigned const count = static_cast<unsigned>(world_->npes()) * s.qps_per_peer;
      GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(pe)), pe);
      ibgda_quiet_all<<<1, 128, 0, world_->stream(pe)>>>(s.queues, count);
      GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
    }
    for (int pe : world_->local_pes()) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(pe)), pe);
      GPUCOMM_CUDA_CHECK(cudaStreamSynchronize(world_->stream(pe)), pe);
    }
#endif
    check_errors();
  }
};

}  // namespace detail

namespace detail {
#if defined(__CUDACC__)
template <class>
__global__ void ibgda_quiet_all(verbs_gpu::send_queue const* queues, unsigned count) {
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) IBGDAPost::quiet_queue(queues[i]);
}
#endif
}  // namespace detail

}  // namespace gpucomm
