// The gpucomm side of the PyTorch example: a process-per-PE world bootstrapped through the caller's
// allgather and barrier (torch.distributed's store, in the binding), the world team's workspace,
// and allreduce-sum launched on the caller's stream. No torch header here (see the interface).
#include <gpucomm/gpucomm.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpucomm_torch_core.hpp"

namespace gpucomm_torch {

struct communicator::state {
  gpucomm::world world;
  gpucomm::team_workspace workspace;
  state(gpucomm::callback_bootstrap boot, int device, communicator_options const& o)
      : world(std::move(boot), device, world_options(o)),
        workspace(world, world.team_world(), {.block_bytes = o.block_bytes, .parts = o.parts}) {
    // The transport's host half is set up collectively on first use: do it here, with the rest of
    // the collective set-up, rather than in the first all_reduce.
    (void)world.comm<gpucomm::NVLinkStore>(world.local_pes().front());
  }
  static gpucomm::world_options world_options(communicator_options const& o) {
    gpucomm::world_options w;
    w.heap_bytes = o.heap_bytes;
    return w;
  }
};

namespace {

// gpucomm::error is a std::runtime_error whose type lives in this library: hand the binding a plain
// one (pybind11 turns it into RuntimeError with the same message). Other exceptions (the bootstrap
// callbacks' own, a Python error among them) pass through unchanged.
template <class F>
decltype(auto) translated(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (gpucomm::error const& e) {
    throw std::runtime_error(e.what());
  }
}

template <class T>
void launch_sum(gpucomm::world& w, gpucomm::team_workspace const& ws, void* dst, void const* src, std::size_t n,
                cudaStream_t stream) {
  int const pe = w.local_pes().front();
  gpucomm::allreduce(w, ws, pe, static_cast<T*>(dst), static_cast<T const*>(src), n, gpucomm::reduction::sum{}, stream);
}

}  // namespace

communicator::communicator(int rank, int size, int device, bootstrap_callbacks callbacks, communicator_options options)
    : rank_(rank), size_(size), device_(device) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("gpucomm_torch: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (!callbacks.allgather || !callbacks.barrier)
    throw std::invalid_argument("gpucomm_torch: the bootstrap needs an allgather and a barrier");
  gpucomm::callback_bootstrap boot{rank, size, std::move(callbacks.allgather), std::move(callbacks.barrier)};
  state_ = translated([&] { return std::make_unique<state>(std::move(boot), device, options); });
  block_bytes_ = state_->workspace.block_bytes();
  parts_ = state_->workspace.parts();
}

communicator::~communicator() {
  // close() may throw (a rank that does not take part); a destructor must not.
  try {
    close();
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpucomm_torch: closing the communicator of rank %d failed: %s\n", rank_, e.what());
  }
}

void communicator::close() {
  if (!state_) return;
  std::unique_ptr<state> s = std::move(state_);
  // Collective: the workspace's memory is freed through the bootstrap (every rank agrees), after the
  // GPU is done with it (the heap waits for the device). Then the world goes.
  translated([&] { s.reset(); });
}

void communicator::all_reduce(void* dst, void const* src, std::size_t n, element type, std::uintptr_t stream) {
  if (!state_) throw std::logic_error("gpucomm_torch: all_reduce on a closed communicator");
  if (n == 0) return;  // every rank has n == 0: nothing to exchange
  auto const s = reinterpret_cast<cudaStream_t>(stream);
  auto& w = state_->world;
  auto const& ws = state_->workspace;
  translated([&] {
    switch (type) {
      case element::float32:
        return launch_sum<float>(w, ws, dst, src, n, s);
      case element::float16:
        return launch_sum<__half>(w, ws, dst, src, n, s);
      case element::bfloat16:
        return launch_sum<__nv_bfloat16>(w, ws, dst, src, n, s);
      case element::float64:
        return launch_sum<double>(w, ws, dst, src, n, s);
      case element::int32:
        return launch_sum<std::int32_t>(w, ws, dst, src, n, s);
      case element::int64:
        return launch_sum<std::int64_t>(w, ws, dst, src, n, s);
      case element::int8:
        return launch_sum<std::int8_t>(w, ws, dst, src, n, s);
      case element::uint8:
        return launch_sum<std::uint8_t>(w, ws, dst, src, n, s);
    }
    throw std::invalid_argument("gpucomm_torch: unknown element type " + std::to_string(static_cast<int>(type)));
  });
}

}  // namespace gpucomm_torch
