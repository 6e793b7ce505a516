#pragma once
// The narrow interface between the PyTorch binding (gpucomm_torch.cpp: torch and pybind11, compiled
// by the host compiler in the C++ mode torch's headers want) and the part that uses gpucomm
// (gpucomm_torch_core.cu: gpucomm, compiled by nvcc in C++20 for sm_90, no torch header). Only
// standard C++17 types cross it, so the two sides need not share a compiler, a language mode or
// torch's nvcc flags (torch's -D__CUDA_NO_HALF_CONVERSIONS__ and friends never reach gpucomm).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace gpucomm_torch {

/// The element types all_reduce takes; the binding maps torch dtypes onto them.
enum class element : int { float32, float16, bfloat16, float64, int32, int64, int8, uint8 };

/// How the processes find each other: gpucomm::callback_bootstrap's two collectives. Called from the
/// thread that builds or closes the communicator, in the same order on every rank.
struct bootstrap_callbacks {
  /// recv (size * bytes) gets every rank's `bytes` in rank order.
  std::function<void(void const* send, void* recv, std::size_t bytes)> allgather;
  std::function<void()> barrier;
};

struct communicator_options {
  /// Bytes each rank sends each other rank per round of a collective (gpucomm::workspace_options).
  std::size_t block_bytes = std::size_t{1} << 20;
  /// CTAs that share each all_reduce (the multi-CTA form).
  int parts = 1;
  /// Symmetric heap per PE; 0: gpucomm's default (GPUCOMM_HEAP_BYTES, else 1 GiB of address space).
  std::size_t heap_bytes = 0;
};

/// One PE of a gpucomm world with one process per PE (several may share a GPU), and the world
/// team's collective workspace. Construction and close() are collective over every rank.
class communicator {
 public:
  communicator(int rank, int size, int device, bootstrap_callbacks callbacks, communicator_options options);
  ~communicator();
  communicator(communicator const&) = delete;
  communicator& operator=(communicator const&) = delete;

  /// dst[i] = sum over ranks of src[i], i < n, launched on `stream` (a cudaStream_t as an integer; 0
  /// is the legacy default stream). dst == src is in place; otherwise they must not overlap. src
  /// and dst are this process's device memory on the communicator's GPU (any allocation: gpucomm's
  /// NVLinkStore collectives move data through the workspace, not through src and dst). Every rank
  /// calls with the same n and type, in the same order. Returns once the kernel is launched.
  void all_reduce(void* dst, void const* src, std::size_t n, element type, std::uintptr_t stream);

  /// Frees the workspace and the world (collective: every rank, same order). Afterwards every other
  /// call throws. The destructor closes a communicator that is still open.
  void close();
  bool closed() const noexcept { return state_ == nullptr; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  std::size_t block_bytes() const noexcept { return block_bytes_; }
  int parts() const noexcept { return parts_; }

 private:
  struct state;
  std::unique_ptr<state> state_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  std::size_t block_bytes_ = 0;
  int parts_ = 1;
};

}  // namespace gpucomm_torch
