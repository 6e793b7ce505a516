#pragma once
// The MoE plan and the host launchers of dispatch and combine (collectives/moe.cuh).
//
//   gpucomm::moe_shape const shape{.experts_per_rank = 8, .hidden = 7168, .top_k = 8,
//                                  .token_dtype = gpucomm::moe_token_dtype::fp8_e4m3,
//                                  .max_tokens = 128, .max_recv_rows = 1024};
//   gpucomm::moe_plan plan(w, w.team_world(), shape);          // collective, once
//   gpucomm::moe_prepare<gpucomm::NVLinkStore>(w);              // PEs sharing a GPU: before launching
//   auto const h = gpucomm::moe_dispatch(w, plan, pe, dispatch_args, stream);
//   ... experts on dispatch_args.recv_rows ...
//   gpucomm::moe_combine(w, plan, pe, h, combine_args, stream);
//   w.synchronize();   // throws gpucomm::error if some member received more rows than its bound
//
// moe_plan is made collectively (every process, same order, same team, shape and options; the
// shape and options are compared across processes and a difference is a gpucomm::error naming
// it). Its workspace is symmetric memory of moe_workspace_bytes (collectives/moe_shape.hpp: the
// formula), allocated by the plan or given by the caller (a sym_array<std::byte> at least that
// large, else a gpucomm::error saying the size needed), zeroed once: calls never reset it, so they
// may be captured in a CUDA graph and replayed. ctas() CTAs of moe_threads threads run each call
// at every member (moe_ctas: by max_tokens and max_recv_rows), at most 32, at most the
// co-residency cap (launch_shape.hpp) and at most moe_options::max_ctas when set (an SM budget).
//
// The launchers check on the host, before launching anything, what they can: the PE is a member,
// the buffers are there, a host token count is within max_tokens, dispatch and combine alternate
// and combine gets the handle of the plan's last dispatch at that PE. What only the device knows
// (a device token count, expert ids, rows past max_recv_rows) is counted there and thrown by
// world::synchronize (a watch of the plan's error words: host/detail/device_error_watch.hpp).

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../collectives/launch_shape.hpp"
#include "../collectives/moe.cuh"
#include "../collectives/moe_shape.hpp"
#include "../error.hpp"
#include "../transport/nvlink_store.cuh"
#include "detail/co_residency.hpp"
#include "detail/device_error_watch.hpp"
#include "detail/device_guard.hpp"
#include "world.hpp"

namespace gpucomm {

/// Threads per CTA of the launchers' kernels.
inline constexpr int moe_threads = 512;

struct moe_options {
  /// The most CTAs a call runs per member (an SM budget); 0: the automatic choice alone.
  int max_ctas = 0;
  friend constexpr bool operator==(moe_options const&, moe_options const&) noexcept = default;
};

/// What combine takes from the dispatch it undoes: the plan's call at one PE.
struct moe_handle {
  void const* plan = nullptr;
  int pe = -1;
  long long call = 0;
};

class moe_plan {
 public:
  /// The plan, with a workspace of its own.
  moe_plan(world& w, team const& t, moe_shape const& s, moe_options o = {}) : moe_plan(w, t, s, nullptr, o) {}
  /// The plan in the caller's symmetric memory, `workspace` (at least moe_workspace_bytes; kept
  /// alive by the caller as long as the plan).
  moe_plan(world& w, team const& t, moe_shape const& s, sym_array<std::byte> const& workspace, moe_options o = {})
      : moe_plan(w, t, s, &workspace, o) {}
  moe_plan(moe_plan const&) = delete;
  moe_plan& operator=(moe_plan const&) = delete;
  ~moe_plan();

  /// What a kernel of local member PE pe takes (CTA k passes .part(k)).
  moe_view view(int pe) const;
  team const& members() const noexcept { return view_.members; }
  moe_shape const& shape() const noexcept { return view_.shape; }
  /// CTAs every call runs at every member.
  int ctas() const noexcept { return view_.ctas; }
  /// Symmetric bytes per PE of the workspace.
  std::size_t workspace_bytes() const noexcept { return moe_workspace_bytes(view_.members.size, view_.shape, ctas()); }
  /// Dynamic shared memory each CTA takes (moe_block_scratch_bytes).
  std::size_t block_scratch_bytes() const noexcept { return moe_block_scratch_bytes(view_.members.size, view_.shape); }

  // For the launchers: this process's record of each local PE's calls (dispatch, combine).
  long long& dispatches(int pe) { return calls_[local_index(pe)].dispatches; }
  long long& combines(int pe) { return calls_[local_index(pe)].combines; }

 private:
  moe_plan(world& w, team const& t, moe_shape const& s, sym_array<std::byte> const* given, moe_options o);

  sym_ptr<std::byte> base_of(int pe) const { return memory_->ptr(pe); }
  std::size_t local_index(int pe) const;

  static void check(world& w, team const& t, moe_shape const& s, moe_options const& o);

  /// Every process must make the same plan: members index each other's workspaces by its layout.
  static void agree_across_processes(world& w, moe_shape const& s, moe_options const& o, int ctas);

  /// What world::synchronize says of one member's error words: each new count once.
  static detail::device_error_watch::host_state::report reporter(moe_shape const& s);

  struct local_calls {
    int pe;
    long long dispatches = 0;
    long long combines = 0;
  };

  moe_view view_;
  sym_array<std::byte> owned_;
  sym_array<std::byte> const* memory_ = nullptr;
  detail::device_error_watch::host_state* watch_ = nullptr;
  std::vector<int> watch_keys_;
  std::vector<local_calls> calls_;
};

namespace detail {

template <class Tr>
__global__ void __launch_bounds__(moe_threads) moe_dispatch_kernel(comm<Tr> c, moe_view v, moe_dispatch_args a) {
  extern __shared__ int moe_scratch[];
  moe_dispatch(c, cooperative_groups::this_thread_block(), v.part(static_cast<int>(blockIdx.x)), a, moe_scratch);
}
template <class Tr>
__global__ void __launch_bounds__(moe_threads) moe_combine_kernel(comm<Tr> c, moe_view v, moe_combine_args a) {
  extern __shared__ int moe_scratch[];
  moe_combine(c, cooperative_groups::this_thread_block(), v.part(static_cast<int>(blockIdx.x)), a, moe_scratch);
}

template <class Tr, class Args>
void moe_launch(world& w, moe_plan const& plan, int pe, void (*kernel)(comm<Tr>, moe_view, Args), Args const& a,
                cudaStream_t stream) {
  comm<Tr> const c = w.comm<Tr>(pe);
  current_device_guard const keep;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
  kernel<<<static_cast<unsigned>(plan.ctas()), moe_threads, plan.block_scratch_bytes(), stream>>>(c, plan.view(pe), a);
  GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
}

/// Whether p is 16-byte aligned: rows move as 16-byte vectors.
inline bool moe_aligned(void const* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

void moe_refuse(char const* call, int pe, std::string const& what);

}  // namespace detail

/// Loads the launchers' kernels for Tr on every local GPU: call it once before the first launch
/// where PEs share a GPU (world::prepare says why).
template <class Tr = NVLinkStore>
void moe_prepare(world& w) {
  w.prepare(detail::moe_dispatch_kernel<Tr>, detail::moe_combine_kernel<Tr>);
}

/// Dispatch at local member PE pe on `stream` (every member calls it for the same call).
template <class Tr = NVLinkStore>
moe_handle moe_dispatch(world& w, moe_plan& plan, int pe, moe_dispatch_args const& a, cudaStream_t stream) {
  constexpr char const* call = "gpucomm::moe_dispatch";
  moe_shape const& s = plan.shape();
  if (!plan.members().contains(pe)) detail::moe_refuse(call, pe, "this PE is not a member of the plan's team");
  bool const device_count = a.num_tokens_device != nullptr;
  if (!device_count && (a.num_tokens < 0 || a.num_tokens > s.max_tokens))
    detail::moe_refuse(call, pe,
                       "num_tokens " + std::to_string(a.num_tokens) +
                           " outside [0, max_tokens = " + std::to_string(s.max_tokens) + "]");
  if ((device_count || a.num_tokens > 0) && (!a.tokens || !a.topk_ids || !a.topk_weights))
    detail::moe_refuse(call, pe, "tokens, topk_ids or topk_weights is null");
  if (!a.recv_rows || !a.recv_counts) detail::moe_refuse(call, pe, "recv_rows or recv_counts is null");
  if (!detail::moe_aligned(a.tokens) || !detail::moe_aligned(a.recv_rows))
    detail::moe_refuse(call, pe, "tokens or recv_rows is not 16-byte aligned");
  if (s.token_dtype == moe_token_dtype::fp8_e4m3 && !a.recv_scales)
    detail::moe_refuse(call, pe, "recv_scales is null for an fp8 plan");
  if (plan.dispatches(pe) != plan.combines(pe))
    detail::moe_refuse(call, pe, "a second dispatch on the plan before the combine of the first");
  detail::moe_launch<Tr>(w, plan, pe, detail::moe_dispatch_kernel<Tr>, a, stream);
  return {&plan, pe, ++plan.dispatches(pe)};
}

/// Combine at local member PE pe on `stream`, undoing the dispatch `h` returned.
template <class Tr = NVLinkStore>
void moe_combine(world& w, moe_plan& plan, int pe, moe_handle const& h, moe_combine_args const& a,
                 cudaStream_t stream) {
  constexpr char const* call = "gpucomm::moe_combine";
  if (!plan.members().contains(pe)) detail::moe_refuse(call, pe, "this PE is not a member of the plan's team");
  if (h.plan != &plan || h.pe != pe) detail::moe_refuse(call, pe, "the handle is of another plan or PE");
  if (h.call != plan.dispatches(pe) || plan.combines(pe) != plan.dispatches(pe) - 1)
    detail::moe_refuse(call, pe, "the handle is not of the plan's last dispatch, or that dispatch was combined");
  if (!a.expert_rows || !a.out) detail::moe_refuse(call, pe, "expert_rows or out is null");
  if (!detail::moe_aligned(a.expert_rows) || !detail::moe_aligned(a.out))
    detail::moe_refuse(call, pe, "expert_rows or out is not 16-byte aligned");
  detail::moe_launch<Tr>(w, plan, pe, detail::moe_combine_kernel<Tr>, a, stream);
  ++plan.combines(pe);
}

}  // namespace gpucomm

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/moe.inl"
#endif
