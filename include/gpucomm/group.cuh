#pragma once
// Groups: the set of threads that calls one gpucomm operation together.
//
// Every device operation takes the calling group first: `c.put(g, dst, src, n, pe)`. All threads
// of `g` call it with the same arguments; the group's threads share the work (each moves a strided
// part), and where one thread must act alone (a signal, an atomic, a flag) the group's rank-0
// thread, its *leader*, does.
//
// Any type meeting `gpucomm::group` works:
//   - cooperative_groups::thread_block                    (a whole CTA)
//   - cooperative_groups::thread_block_tile<N>, N = 1..32 (size known at compile time)
//   - cooperative_groups::coalesced_group                  (the active threads of a warp)
//   - gpucomm::single_thread (`gpucomm::this_thread()`)    (one thread on its own)
//   - a user type with `num_threads()`, `thread_rank()` and `sync()`, all const; optionally a
//     `static constexpr unsigned static_size` (its size at compile time) and a
//     `shfl(value, src_rank)` member (needed by operations that return a value to every thread).
// Wrappers of a group are groups too: with_staging(g, stages) hands P2PCopy its staging
// (transport/p2p_copy/staging.cuh), without_staging(g) (below) says that a P2PCopy copy of global
// memory is to go through g's own loads and stores.
//
// Rules: a group's threads all belong to one CTA; `sync()` synchronises exactly the group's
// threads and orders their memory accesses at least at CTA scope (as __syncthreads, __syncwarp
// and cooperative_groups' sync() do). The lanes of a warp may reach `sync()` at different times
// (the leader often works alone first): a user group of whole warps built on a CTA or named
// barrier should gather each warp (__syncwarp) before it, as group_sync does for a thread_block.

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "config.hpp"

namespace gpucomm {

/// The requirements on a calling group.
template <class G>
concept group = requires(G const& g) {
  { g.num_threads() } -> std::convertible_to<unsigned long long>;
  { g.thread_rank() } -> std::convertible_to<unsigned long long>;
  g.sync();
};

/// One thread acting alone. `sync()` does nothing: a thread is ordered with itself.
struct single_thread {
  static constexpr unsigned static_size = 1;
  GPUCOMM_HD constexpr unsigned num_threads() const noexcept { return 1; }
  GPUCOMM_HD constexpr unsigned thread_rank() const noexcept { return 0; }
  GPUCOMM_HD constexpr void sync() const noexcept {}
  template <class T>
  GPUCOMM_HD constexpr T shfl(T value, unsigned) const noexcept {
    return value;
  }
};

/// The calling thread as a group of one.
GPUCOMM_HD constexpr single_thread this_thread() noexcept { return {}; }

/// Size of G's groups when the type fixes it, 0 when only known at run time.
template <class G>
struct group_static_size : std::integral_constant<unsigned, 0> {};

template <class G>
requires requires { G::static_size; }
struct group_static_size<G> : std::integral_constant<unsigned, G::static_size> {};

#if defined(__CUDACC__)
template <unsigned N, class Parent>
struct group_static_size<cooperative_groups::thread_block_tile<N, Parent>> : std::integral_constant<unsigned, N> {};
#endif

template <class G>
inline constexpr unsigned group_static_size_v = group_static_size<std::remove_cvref_t<G>>::value;

/// True when the group type has shfl(value, src_rank).
template <class G>
concept shuffling_group = group<G> && requires(G const& g, std::uint64_t v) {
  g.shfl(v, 0u);
};

// The helpers below are __host__ __device__ so that host code can drive the same templates with
// host-side group types (verbs_gpu's host tests and host producers do); the pragma lets them call
// a group's __device__-only members from device code without a warning.
#if defined(__CUDACC__)
#define GPUCOMM_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define GPUCOMM_EXEC_CHECK_DISABLE
#endif

/// Number of threads in g; a constant when the type fixes it.
GPUCOMM_EXEC_CHECK_DISABLE
template <group G>
GPUCOMM_HD GPUCOMM_FORCEINLINE unsigned group_size(G const& g) {
  if constexpr (group_static_size_v<G> != 0) {
    return group_static_size_v<G>;
  } else {
    return static_cast<unsigned>(g.num_threads());
  }
}

/// This thread's rank in g.
GPUCOMM_EXEC_CHECK_DISABLE
template <group G>
GPUCOMM_HD GPUCOMM_FORCEINLINE unsigned group_rank(G const& g) {
  if constexpr (group_static_size_v<G> == 1) {
    return 0;
  } else {
    return static_cast<unsigned>(g.thread_rank());
  }
}

/// True on the group's leader, its rank-0 thread.
GPUCOMM_EXEC_CHECK_DISABLE
template <group G>
GPUCOMM_HD GPUCOMM_FORCEINLINE bool is_leader(G const& g) {
  return group_rank(g) == 0;
}

#if defined(__CUDACC__)
namespace detail {
/// The lanes of the calling thread's warp that exist in its CTA (all 32 but in a last, partial warp).
__device__ GPUCOMM_FORCEINLINE unsigned warp_lanes_in_block() {
  unsigned const threads = blockDim.x * blockDim.y * blockDim.z;
  unsigned const first = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & ~31u;
  return threads - first >= 32 ? ~0u : (1u << (threads - first)) - 1u;
}
}  // namespace detail
#endif

/// Synchronise g's threads (nothing for a group of one).
///
/// A whole CTA gathers each warp first (__syncwarp over the warp's lanes), then takes the CTA
/// barrier. gpucomm's operations have the leader, or a few lanes, work or wait alone while the
/// group's other threads go on to its next sync, so a warp reaches that barrier in parts. With
/// the barrier alone, CTA barriers reached that way can complete out of step (threads pass a
/// barrier instance before the leader has arrived at it, and read the barrier's epoch after the
/// leader has advanced it). Gathered warps arrive whole, and the instances pair.
GPUCOMM_EXEC_CHECK_DISABLE
template <group G>
GPUCOMM_HD GPUCOMM_FORCEINLINE void group_sync(G const& g) {
  if constexpr (group_static_size_v<G> != 1) {
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<std::remove_cvref_t<G>, cooperative_groups::thread_block>) {
      __syncwarp(detail::warp_lanes_in_block());
    }
#endif
    g.sync();
  }
}

template <group G>
class unstaged_group;

#if defined(__CUDACC__)
namespace detail {
/// Whether G is a whole CTA: cooperative_groups::thread_block, or one passed through
/// without_staging (below), which keeps it whole.
template <class G>
inline constexpr bool whole_block = std::is_same_v<G, cooperative_groups::thread_block>;
template <class G>
inline constexpr bool whole_block<unstaged_group<G>> = whole_block<G>;
template <class G>
inline constexpr bool whole_block_v = whole_block<std::remove_cvref_t<G>>;
}  // namespace detail

/// True when the type can hand a value from one of its threads to all of them.
template <class G>
concept broadcasting_group = shuffling_group<G> ||(group<G>&& detail::whole_block_v<G>);

/// The leader's `value`, returned to every thread of g. T is trivially copyable, at most 8 bytes.
template <group G, class T>
GPUCOMM_DEVICE GPUCOMM_FORCEINLINE T broadcast_from_leader(G const& g, T value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  if constexpr (group_static_size_v<G> == 1) {
    return value;
  } else if constexpr (detail::whole_block_v<G>) {
    // One slot per instantiation per CTA. Only whole-CTA groups come here, and a CTA is one group,
    // so no two groups share the slot. The second sync keeps a later broadcast from overwriting the
    // slot before every thread has read it.
    __shared__ T slot;
    if (is_leader(g)) slot = value;
    group_sync(g);
    T const result = slot;
    group_sync(g);
    return result;
  } else {
    static_assert(broadcasting_group<G>,
                  "gpucomm: this operation returns a value to every thread of the group, so the "
                  "group type needs a shfl(value, src_rank) member (cooperative_groups tiles and "
                  "coalesced_group have one)");
    return g.shfl(value, 0u);
  }
}

#endif  // __CUDACC__

namespace detail {
/// A group that forwards to the group it wraps: the base of the group wrappers (without_staging's
/// below, with_staging's in transport/p2p_copy/staging.cuh, with_scratch's in scratch.hpp).
template <group G>
class group_wrapper {
 public:
  GPUCOMM_HD explicit group_wrapper(G const& g) : g_(g) {}

  static constexpr unsigned static_size = group_static_size_v<G>;
  GPUCOMM_EXEC_CHECK_DISABLE
  GPUCOMM_HD unsigned long long num_threads() const { return group_size(g_); }
  GPUCOMM_EXEC_CHECK_DISABLE
  GPUCOMM_HD unsigned long long thread_rank() const { return group_rank(g_); }
  GPUCOMM_EXEC_CHECK_DISABLE
  GPUCOMM_HD void sync() const { group_sync(g_); }
  GPUCOMM_EXEC_CHECK_DISABLE
  template <class T>
  requires shuffling_group<G> GPUCOMM_HD T shfl(T value, unsigned src_rank)
  const { return g_.shfl(value, src_rank); }

  /// The group it wraps.
  GPUCOMM_HD G const& base() const { return g_; }

 private:
  G g_;
};
}  // namespace detail

/// Group g, choosing that a P2PCopy put from global memory, or any get, goes through g's own loads
/// and stores: what a call without staging does anyway, but said at the call site. GPUCOMM_DEBUG
/// builds print a note, once per module, for an unstaged P2PCopy call whose bytes the bulk-copy unit
/// could have moved with a staging; calls through without_staging print none. Every transport
/// accepts the group and ignores the choice; a whole CTA stays one that broadcasts. Wrapping a
/// group that carries a staging (with_staging) drops the staging.
template <group G>
class unstaged_group : public detail::group_wrapper<G> {
 public:
  using detail::group_wrapper<G>::group_wrapper;
};

/// g, with the choice of stores for P2PCopy's copies from and to global memory made visible (see
/// unstaged_group).
template <group G>
GPUCOMM_HD unstaged_group<G> without_staging(G const& g) {
  return unstaged_group<G>(g);
}

namespace detail {
template <class G>
inline constexpr bool is_unstaged_group_v = false;
template <class G>
inline constexpr bool is_unstaged_group_v<unstaged_group<G>> = true;
/// Whether G carries P2PCopy staging (with_staging's group: transport/p2p_copy/staging.cuh).
template <class G>
inline constexpr bool is_staged_group_v = false;

/// g as the library's own calls without a staging pass it: through without_staging, unless g
/// carries a staging of its caller's (with_staging), which the call then uses.
template <group G>
GPUCOMM_HD auto unless_staged(G const& g) {
  if constexpr (is_staged_group_v<G>)
    return g;
  else
    return without_staging(g);
}
}  // namespace detail

}  // namespace gpucomm
