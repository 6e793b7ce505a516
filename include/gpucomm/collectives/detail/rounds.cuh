#pragma once
// The round protocol every generic collective is built from, over the transport contract alone
// (put_signal, signal, fence, quiet; waits on local words).
//
// A collective runs one or more rounds on its part of the team's workspace (workspace.hpp). In
// round e (rounds count up from 1 per part at each member, and every member runs the same
// sequence, so round e means the same step everywhere):
//   1. The group agrees on e (next_epoch's sync) and fences: the updates this group sent in round
//      e-1 are delivered before any of round e, so a member that sees flag value e from us also
//      has our data of round e-1 and earlier.
//   2. To every other member r, exactly one flag update with value e, into flags[our rank] at r:
//      either the signal of a put_signal that carries our data for r (into our block of r's slot
//      e & 1), or, where we send r nothing this round, a bare signal. The bare signals go first.
//   3. Before writing into r's slot e & 1 we wait until flags[r] here reaches e - 1: r has entered
//      round e - 1, so it has finished round e - 2, the last round that read that slot. Every
//      member sends every other one an update in every round (step 2, without waiting on anything
//      of round e first), so this wait always ends; in steady state it does not wait at all.
//   4. Quiet: our sources may be reused (and overwritten, for in-place collectives) afterwards.
//   5. We wait until flags[r] here reaches e for every r whose data we need: the acquire makes the
//      data, delivered before the flag (put_signal), visible. The caller then reads the blocks.
// Nothing is ever reset: flags only grow, and two slots alternate by parity, so a collective may be
// replayed in a CUDA graph any number of times. Only the workspace is written by other PEs.

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../comm.cuh"
#include "../../detail/copy.cuh"
#include "../../detail/device_check.cuh"
#include "../../detail/signal_wait.cuh"
#include "../../detail/spin.cuh"
#include "../../group.cuh"
#include "../workspace.hpp"
#include "../epilogue.cuh"
#include "../reduction.cuh"

namespace gpucomm {

/// What the generic collectives need of a transport: put_signal, signal and quiet (fence comes
/// from quiet where the transport has none).
template <class Tr>
concept collective_transport = can_put_signal<Tr> && can_signal<Tr> && can_quiet<Tr>;

#if defined(__CUDACC__)

namespace detail {

/// Transports whose remote() reaches every peer of the world (NVLinkStore, P2PCopy: their worlds
/// refuse PEs they cannot reach), so every member makes the same choice without asking: the
/// collectives run in packet epochs and channel steps there (detail/packets.cuh, channels.cuh).
template <class Tr>
concept load_stores_everywhere = can_load_store<Tr> && !requires {
  requires Tr::partial_load_store;
};

/// [lo, hi) of the elements [0, n) that part k of `parts` handles.
struct element_range {
  std::size_t lo = 0;
  std::size_t hi = 0;
  GPUCOMM_HD constexpr std::size_t size() const { return hi - lo; }
};
GPUCOMM_HD constexpr element_range part_range(std::size_t n, int k, int parts) {
  auto const p = static_cast<std::size_t>(parts);
  return {n * static_cast<std::size_t>(k) / p, n * static_cast<std::size_t>(k + 1) / p};
}
/// part_range with every boundary at a multiple of `granule` (the last part ends at n): the parts
/// split the ceil(n / granule) granules as part_range splits elements.
GPUCOMM_HD constexpr element_range granule_range(std::size_t n, std::size_t granule, int k, int parts) {
  if (granule == 1) return part_range(n, k, parts);  // every collective but allreduce_rows: no division
  element_range const g = part_range((n + granule - 1) / granule, k, parts);
  return {g.lo * granule < n ? g.lo * granule : n, g.hi * granule < n ? g.hi * granule : n};
}

/// The calling PE's view of one part of a workspace during a collective.
struct round_context {
  collective_workspace ws;
  int part = 0;
  int rank = 0;  ///< this PE's team rank
  int size = 0;  ///< team size
  std::uint64_t* words = nullptr;
  std::uint64_t* flags = nullptr;
  std::uint64_t const* header = nullptr;  ///< control-block header, for debug reports
  /// Shares of a message are split between parts at multiples of this many elements (rows of the
  /// row-wise allreduce: allreduce_rows.cuh).
  std::size_t granule = 1;

  /// This part's share of a message of n elements.
  GPUCOMM_HD constexpr element_range share(std::size_t n) const { return granule_range(n, granule, part, ws.parts); }

  /// The team rank k ranks after this one (0 < k < size): each member sends to its peers in this
  /// order, so that no member is every member's first.
  __device__ GPUCOMM_FORCEINLINE int peer_after(int k) const { return rank + k < size ? rank + k : rank + k - size; }
  template <class T>
  __device__ T* block(std::uint64_t round, int r) const {
    return reinterpret_cast<T*>(ws.block(part, round, r));
  }
  /// Elements of T one block holds.
  template <class T>
  __device__ std::size_t block_elements() const {
    return ws.block_bytes / sizeof(T);
  }
  /// Elements of T one channel block holds (channel steps, detail/channels.cuh).
  template <class T>
  __device__ std::size_t channel_elements() const {
    return ws.channel_block_bytes / sizeof(T);
  }
};

/// One member's outgoing data of a round: `count` elements from `src` (none: a bare signal).
template <class T>
struct round_send {
  T const* src = nullptr;
  std::size_t count = 0;
};

template <class Tr>
__device__ void check_transport() {
  static_assert(collective_transport<Tr>,
                "gpucomm: collectives need a transport with put_signal, signal and quiet "
                "(collectives/detail/rounds.cuh)");
}

/// Enters a collective: checks how it is called (debug builds) and returns the PE's context.
template <class Tr, group G>
__device__ round_context enter_collective(comm<Tr> const& c, G const& g, collective_workspace const& ws,
                                          char const* op) {
  check_transport<Tr>();
  round_context x;
  x.ws = ws;
  // The whole view (part_index -1) is one group running the collective alone, on part 0.
  if (ws.part_index < 0) x.ws.parts = 1;
  x.part = ws.chosen_part();
  x.size = ws.members.size;
  x.rank = ws.members.rank_of(c.my_pe());
  x.words = ws.local_words(x.part);
  x.flags = ws.flags(x.part);
  x.header = c.control_header();
#if GPUCOMM_DEBUG
  if (!ws.valid()) device_misuse(op, "the workspace is not a view of a team_workspace (team_workspace::view(pe))");
  if (x.rank < 0) device_misuse(op, "this PE is not a member of the workspace's team");
  if (x.part >= x.ws.parts) device_misuse(op, "part index past the workspace's parts");
  if (is_leader(g)) {
    // One group per PE and part at a time: two would draw the same rounds and corrupt each
    // other's data (for example one team's collectives called from two streams at once).
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> busy(x.words[collective_workspace::busy_word]);
    std::uint64_t expected = 0;
    if (!busy.compare_exchange_strong(expected, 1, cuda::memory_order_relaxed))
      device_misuse(op,
                    "another group of this PE is inside a collective on the same workspace part; collectives on "
                    "one team and part run one at a time (give concurrent callers their own team_workspace)");
  }
#else
  (void)op;
#endif
  (void)g;
  return x;
}

/// Debug builds: traps when `root` is not a team rank.
__device__ GPUCOMM_FORCEINLINE void check_root(round_context const& x, int root, char const* op) {
#if GPUCOMM_DEBUG
  if (root < 0 || root >= x.size) device_misuse(op, "root is not a team rank");
#else
  (void)x, (void)root, (void)op;
#endif
}

/// Leaves a collective: every thread of g may read what it wrote into its destination.
template <group G>
__device__ void leave_collective(G const& g, round_context const& x) {
  group_sync(g);
#if GPUCOMM_DEBUG
  if (is_leader(g)) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> busy(x.words[collective_workspace::busy_word]);
    busy.store(0, cuda::memory_order_relaxed);
  }
#else
  (void)x;
#endif
}

/// The group waits until flags[r] >= value for every other rank r with want(r) (acquire at
/// system scope), then syncs, so every thread sees what those ranks released.
template <group G, class Want>
__device__ void wait_flags(G const& g, round_context const& x, std::uint64_t value, Want&& want) {
  for (int r = static_cast<int>(group_rank(g)); r < x.size; r += static_cast<int>(group_size(g))) {
    if (r == x.rank || !want(r)) continue;
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> flag(x.flags[r]);
    spin_until([&] { return flag.load(cuda::memory_order_acquire) >= value; }, {"collective", x.flags + r, ">=", value},
               x.header);
  }
  group_sync(g);
}

/// Runs one round (steps above). send(r) is our data for team rank r, want(r) whether we need
/// r's. Returns the round: our received data from r is in x.block<T>(round, r).
template <class T, class Tr, group G, class Send, class Want>
__device__ std::uint64_t run_round(comm<Tr> const& c, G const& g, round_context const& x, Send&& send, Want&& want) {
  std::uint64_t const round = next_epoch(g, x.words + collective_workspace::round_word);
  if (x.size == 1) return round;
  c.fence(g);
  sym_ptr<signal_t> const my_flag(x.flags + x.rank);
  if (is_leader(g)) {
    for (int k = 1; k < x.size; ++k) {
      int const r = x.peer_after(k);
      if (send(r).count == 0) c.signal(this_thread(), my_flag, round, signal_op::set, x.ws.members.pe_of(r));
    }
  }
  wait_flags(g, x, round - 1, [&](int r) { return send(r).count > 0; });
  sym_ptr<T> const my_block(x.block<T>(round, x.rank));
  for (int k = 1; k < x.size; ++k) {
    int const r = x.peer_after(k);
    round_send<T> const s = send(r);
    if (s.count > 0)
      c.put_signal_nbi(unless_staged(g), my_block, s.src, s.count, my_flag, round, signal_op::set,
                       x.ws.members.pe_of(r));
  }
  c.quiet(g);
  wait_flags(g, x, round, want);
  return round;
}

/// Rounds needed for `n` elements at `per_round` a round.
GPUCOMM_HD constexpr std::size_t rounds_for(std::size_t n, std::size_t per_round) {
  return (n + per_round - 1) / per_round;
}
/// The part of round j's chunk inside [0, len): offset and count (0 past the end).
GPUCOMM_HD constexpr element_range chunk_of(std::size_t len, std::size_t j, std::size_t per_round) {
  std::size_t const lo = j * per_round;
  if (lo >= len) return {len, len};
  std::size_t const hi = lo + per_round < len ? lo + per_round : len;
  return {lo, hi};
}

/// Element types folded 16 bytes at a time: whole elements in a 16-byte vector, copied as bits.
template <class T>
concept vector_fold_element = sizeof(T) <= 16 && 16 % sizeof(T) == 0 && std::is_trivially_copyable_v<T>;

/// 16 bytes of elements, as one load or store moves them.
template <class T>
struct alignas(16) fold_vector {
  T e[16 / sizeof(T)];
};

/// Vectors each thread folds per step (their loads of one rank are in flight together): four, or
/// fewer for narrow elements, so that a thread holds at most 16 elements' accumulators (a CTA of
/// 1024 threads has 64 registers a thread).
template <class T>
inline constexpr int fold_vectors_in_flight = sizeof(T) < 4 ? static_cast<int>(sizeof(T)) : 4;

/// The vector form of fold_ranks below, for dst and every input 16-byte aligned: the first
/// count / (16 / sizeof(T)) vectors, each thread taking fold_vectors_in_flight<T> of them per step
/// and loading them from every rank before folding (every element still folded in rank order). Returns
/// the elements done; the caller folds the rest.
template <class Op, class T, group G, class In, class Epilogue>
__device__ GPUCOMM_FORCEINLINE std::size_t fold_ranks_vectors(G const& g, T* dst, std::size_t count, int size, In&& in,
                                                              Epilogue const& epilogue) {
  using R = element_reduction<T>;
  using V = fold_vector<T>;
  constexpr int E = 16 / sizeof(T);
  constexpr int K = fold_vectors_in_flight<T>;
  std::size_t const vectors = count / E;
  std::size_t const gs = group_size(g);
  for (std::size_t at = group_rank(g); at < vectors; at += K * gs) {
    auto live = [&](int k) { return at + k * gs < vectors; };
    accumulator_t<T> acc[K][E];
    for (int r = 0; r < size; ++r) {
      V const* const from = reinterpret_cast<V const*>(in(r));
      V got[K] = {};
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (live(k)) got[k] = from[at + k * gs];
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int i = 0; i < E; ++i) {
          auto const value = R::to_accumulator(got[k].e[i]);
          acc[k][i] = r == 0 ? value : R::template combine<Op>(acc[k][i], value);
        }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (!live(k)) continue;
      V out;
#pragma unroll
      for (int i = 0; i < E; ++i) out.e[i] = epilogue((at + k * gs) * E + i, R::from_accumulator(acc[k][i]));
      reinterpret_cast<V*>(dst)[at + k * gs] = out;
    }
  }
  return vectors * E;
}

/// dst[i] = epilogue(i, in(0)[i] op in(1)[i] op ... op in(size-1)[i]) for i < count, folded in rank
/// order in the accumulator type and converted to T before the epilogue sees it; in(r) is a
/// T const* for each team rank. Shared by g's threads: 16-byte vectors, several loads in flight per
/// thread, where dst and every input are 16-byte aligned; one element per thread and step
/// otherwise, and for the tail. dst may be one of the inputs (in place): each thread stores a
/// vector or element only after loading it from every rank.
template <class Op, class T, group G, class In, class Epilogue = identity_epilogue>
__device__ void fold_ranks(G const& g, T* dst, std::size_t count, int size, In&& in, Epilogue const& epilogue = {}) {
  if constexpr (reduction_takes<Op, T>) {  // else require_reduction has said why: no second error
    using R = element_reduction<T>;
    std::size_t done = 0;
    if constexpr (vector_fold_element<T>) {
      auto aligned = [](void const* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; };
      bool all = aligned(dst);
      for (int r = 0; r < size; ++r) all = all && aligned(in(r));
      if (all) done = fold_ranks_vectors<Op>(g, dst, count, size, in, epilogue);
    }
    for (std::size_t i = done + group_rank(g); i < count; i += group_size(g)) {
      accumulator_t<T> acc = R::to_accumulator(in(0)[i]);
      for (int r = 1; r < size; ++r) acc = R::template combine<Op>(acc, R::to_accumulator(in(r)[i]));
      dst[i] = epilogue(i, R::from_accumulator(acc));
    }
  }
}

/// Copies count elements, shared by g's threads (nothing when source and destination coincide).
template <copy_depth Depth = copy_depth::pair, class T, group G>
__device__ GPUCOMM_FORCEINLINE void copy_elements(G const& g, T* dst, T const* src, std::size_t count) {
  if (dst != src && count > 0) group_copy<Depth>(g, dst, src, count * sizeof(T));
}

}  // namespace detail

#endif  // __CUDACC__

}  // namespace gpucomm
