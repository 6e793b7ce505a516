#pragma once
// IBGDAPost, host half: the NIC's set-up, reached through nic_link.hpp (host_state.hpp, compiled
// into programs that link the CMake target gpucomm::nic), and what needs device code after the
// kernels: world::synchronize() quiets every queue of the local PEs with a small kernel, so
// operations the kernels left in flight are complete when the host looks, then reports failed ones.
// The device side is ibgda_post/device.cuh.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "../../error.hpp"
#include "../../host/detail/device_guard.hpp"
#include "../../host/world.hpp"
#include "device.cuh"
#include "nic_link.hpp"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm {

namespace detail {
#if defined(__CUDACC__)
/// Quiets every queue in `queues` (one thread each): what the host runs after the user's kernels.
template <class = void>
__global__ void ibgda_quiet_all(verbs_gpu::send_queue const* queues, unsigned count);
#endif

/// The host half: the NIC set-up linked into the program (nic_link.hpp), asked for first so that a
/// program without it fails on every process before any exchange, plus what needs device code:
/// after the kernels on the world's streams have finished, world::synchronize() quiets every queue
/// of the local PEs with a small kernel, so operations the kernels left in flight (put_nbi, add,
/// set, signal) are complete when the host looks, then reports failed ones.
class ibgda_host_state {
 public:
  ibgda_host_state(world& w, ibgda_options const& options)
      : world_(&w),
        nic_(require_nic_setup<ibgda_nic_factory>("world::comm<IBGDAPost>", w.local_pes().front())(w, options)) {}

  ibgda_state device_state_for(int pe) const { return nic_->device_state_for(pe); }
  void on_register_buffer(registered_buffer const& b) { nic_->on_register_buffer(b); }
  void on_unregister_buffer(registered_buffer const& b) { nic_->on_unregister_buffer(b); }
  void on_heap_block(std::size_t offset, std::size_t bytes) { nic_->on_heap_block(offset, bytes); }
  void on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept { nic_->on_heap_block_freed(offset, bytes); }
  /// What this process's NIC model did so far (faults injected included). For tests (the
  /// differential soak counts faults); zeros on hardware.
  nic_model_stats model_stats() const { return nic_->model_stats(); }
  /// IBGDAPost reaches every PE (world::reaches, composite transports).
  bool reaches(int, int) const { return true; }
  /// Throws a gpucomm::error for the first failed operation recorded on any local QP.
  void check_errors() const { nic_->check_errors(); }

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

 private:
  world* world_;
  std::unique_ptr<ibgda_nic> nic_;
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
