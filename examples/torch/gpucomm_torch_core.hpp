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
#include <string>

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
  /// Bytes each rank sends each other rank per round of a collective; 0: gpucomm's default
  /// (gpucomm::workspace_options).
  std::size_t block_bytes = 0;
  /// The most CTAs that share each collective; 0: gpucomm's default. The host launchers choose how
  /// many of them a call runs, by its size.
  int parts = 0;
  /// Symmetric heap per PE; 0: gpucomm's default (GPUCOMM_HEAP_BYTES, else 1 GiB of address space).
  std::size_t heap_bytes = 0;
};

class moe_plan;

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

  /// Waits for this process's work on the communicator's GPU (every stream), then reports what
  /// gpucomm counted on the device since the last call (gpucomm::world::synchronize): MoE rows past
  /// max_recv_rows, a device token count past max_tokens, expert ids out of range, a kernel that
  /// failed. Returns gpucomm's message naming them, empty when there is nothing to report (the
  /// binding calls this without the GIL; gpucomm_torch.py raises the message). Throws
  /// std::logic_error on a closed communicator. Local: not collective.
  std::string synchronize();

  /// Closes the MoE plans still open (in the order they were made), then frees the workspace and the
  /// world (collective: every rank, same order). Afterwards every other call throws. The destructor
  /// closes a communicator that is still open.
  void close();
  bool closed() const noexcept { return state_ == nullptr; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  std::size_t block_bytes() const noexcept { return block_bytes_; }
  int parts() const noexcept { return parts_; }

 private:
  friend class moe_plan;
  struct state;
  std::unique_ptr<state> state_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
  std::size_t block_bytes_ = 0;
  int parts_ = 1;
};

/// What MoE dispatch sends (gpucomm::moe_token_dtype) and the type of the top-k expert ids.
enum class moe_tokens : int { bfloat16, float8_e4m3 };
enum class moe_ids : int { int32, int64 };

/// gpucomm::moe_shape and gpucomm::moe_options, field for field (collectives/moe_shape.hpp).
struct moe_plan_shape {
  int experts_per_rank = 0;  ///< expert x lives at rank x / experts_per_rank
  int hidden = 0;            ///< elements per token, a multiple of 128
  int top_k = 0;             ///< 1 to 8
  moe_tokens tokens = moe_tokens::bfloat16;
  moe_ids ids = moe_ids::int32;
  int max_tokens = 0;     ///< tokens a rank dispatches per call, at most
  int max_recv_rows = 0;  ///< (token, expert) rows a rank receives per call, at most
  int max_ctas = 0;       ///< CTAs per call at most (an SM budget); 0: gpucomm's choice
};

/// One dispatch's buffers, this process's device memory on the communicator's GPU (the binding
/// checks their sizes). T = num_tokens, or *num_tokens_device (read on the device) when that is not
/// null; then the inputs hold max_tokens rows. R = max_recv_rows.
struct moe_dispatch_buffers {
  void const* tokens = nullptr;            ///< [T x hidden] bf16, 16-byte aligned
  void const* topk_ids = nullptr;          ///< [T x top_k] int32 or int64
  float const* topk_weights = nullptr;     ///< [T x top_k]
  int num_tokens = 0;                      ///< 0 to max_tokens
  int const* num_tokens_device = nullptr;  ///< one int, or null
  void* recv_rows = nullptr;               ///< [R x hidden] bf16, or fp8 e4m3 bytes; 16-byte aligned
  float* recv_scales = nullptr;            ///< fp8 plans: [R x hidden / 128]
  std::int32_t* recv_counts = nullptr;     ///< [experts_per_rank]
  std::int32_t* recv_sources = nullptr;    ///< [R x 3]: rank, token, slot
  float* recv_weights = nullptr;           ///< [R]
};

/// A gpucomm::moe_plan of the communicator's world team, and its host launchers on the caller's
/// stream (collectives/moe.cuh has the contract: rows expert-major, then by source rank, token and
/// slot; combine's fixed summation order). Construction and close() are collective over every rank
/// (same order, same shape: a shape that differs, or that gpucomm refuses on some rank, throws on
/// every rank). The communicator closes a plan still open when it closes.
///
/// Expert ids outside [-1, experts) are copied as -1 and counted where gpucomm counts them, by a
/// kernel of this plan before each dispatch (gpucomm's debug builds trap on them inside dispatch,
/// which would end the process's CUDA context); communicator::synchronize names them.
class moe_plan {
 public:
  moe_plan(communicator& c, moe_plan_shape const& shape);
  ~moe_plan();
  moe_plan(moe_plan const&) = delete;
  moe_plan& operator=(moe_plan const&) = delete;

  /// Launches the dispatch on `stream` (a cudaStream_t as an integer) and returns its call number,
  /// which combine takes. Dispatch and combine alternate; no host synchronisation (graph-capturable).
  long long dispatch(moe_dispatch_buffers const& b, std::uintptr_t stream);
  /// Launches the combine of dispatch `call`: out [T x hidden] bf16 from expert_rows [R x hidden]
  /// bf16, in recv_rows' order. out holds out_rows rows, at least T of that dispatch (max_tokens for
  /// a device count), else std::invalid_argument.
  void combine(long long call, void const* expert_rows, void* out, int out_rows, std::uintptr_t stream);

  /// Frees the workspace (collective). Afterwards dispatch and combine throw.
  void close();
  bool closed() const noexcept { return state_ == nullptr; }

  moe_plan_shape const& shape() const noexcept { return shape_; }
  int device() const noexcept { return device_; }
  int ctas() const noexcept { return ctas_; }
  /// Symmetric bytes per rank of the workspace (gpucomm::moe_workspace_bytes).
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }

 private:
  struct state;
  std::unique_ptr<state> state_;
  communicator* comm_ = nullptr;
  moe_plan_shape shape_;
  int device_ = 0;
  int ctas_ = 1;
  int combine_rows_ = 0;  ///< the rows the last dispatch's combine writes
  std::size_t workspace_bytes_ = 0;
};

}  // namespace gpucomm_torch
