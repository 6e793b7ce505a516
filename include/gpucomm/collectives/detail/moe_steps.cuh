#pragma once
// The steps of MoE dispatch and combine (collectives/moe.cuh), over the transport contract alone:
// put_nbi, quiet and signal, with sources in the workspace (so NIC transports, which take sources
// only from the symmetric heap, work too; where this PE stores to every peer itself, bf16 rows
// come from the tokens) and no put or signal to this PE (its own messages are local copies, its
// own flags local release stores).
//
// Dispatch, at each member s, CTA k of C (k's tokens: part_range(T, k, C)):
//   1. Counters (the caller's shared scratch): every CTA counts the rows of every expert and the
//      messages to every rank over all T tokens, and over the tokens before its own: so it knows
//      where its rows go among s's rows of each expert without talking to the other CTAs.
//   2. One warp walks the CTA's tokens in order, a lane per top-k slot, and writes each message's
//      header into staging (the row's position among s's rows of its expert, in token then slot
//      order; the message's index among s's messages to its rank); the other warps stage the rows
//      (fp8: cast, a float scale per 128 elements; bf16 on load/store transports: not staged).
//   3. A warp per token puts each message (header, then row) into its rank's dispatch region at
//      [s][message]; CTA 0 also puts s's count row (messages, rows per local expert) to each rank.
//      Each warp quiets; the CTA's leader then signals flag [k][s] = epoch at every rank.
//   4. Every CTA waits for all C x P flags, computes from the count rows where each (source,
//      expert) block starts (expert-major, then source rank), and unpacks its share of the
//      messages: a row per routed slot to its place, dropped (and counted) past max_recv_rows.
// Combine, at each member r: a warp per received message sums its rows (slot order, fmaf, float)
// times their weights into one bf16 row, staged in the message's own slot, and puts it to the
// source's combine region [r][token]; quiet, signal; then every CTA waits for all flags and sums,
// for each of its tokens, the partial rows in rank order (float, then bf16).
//
// Reuse without a barrier: dispatches and combines alternate on a plan, and at each member a call
// starts after the previous one finished at all its CTAs (a kernel boundary, or a grid sync). A
// member writes into r's dispatch region in call e + 1 only after its combine e saw r's combine
// signal, which r sent after its last read of that region; the combine region likewise, through
// the dispatch signals. Flags carry the call's epoch and only grow: graph replays are safe.

#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>

#include "../../comm.cuh"
#include "../../detail/device_check.cuh"
#include "../../detail/signal_wait.cuh"
#include "../../detail/spin.cuh"
#include "../../group.cuh"
#include "../moe_shape.hpp"
#include "rounds.cuh"

namespace gpucomm {

/// What MoE dispatch and combine need of a transport: put, signal and quiet.
template <class Tr>
concept moe_transport = can_put<Tr> && can_signal<Tr> && can_quiet<Tr>;

}  // namespace gpucomm

namespace gpucomm::detail {

#if defined(__CUDACC__)

namespace cg = cooperative_groups;
using moe_warp = cg::thread_block_tile<32, cg::thread_block>;

/// One CTA's view of the plan during a call.
struct moe_context {
  moe_view v;
  moe_layout l;
  int part = 0, parts = 1;
  int rank = 0, size = 1;  ///< this member's team rank, team size
  int E = 1, X = 1, H = 0, K = 1, Tm = 1;
  std::byte* base = nullptr;
  int* scratch = nullptr;            ///< moe_block_scratch_bytes of the caller's shared memory
  moe_warp warp;                     ///< this thread's warp
  int warps = 1, wid = 0, lane = 0;  ///< warps of the block, this warp's index, this thread's lane

  __device__ std::uint64_t* calls() const { return reinterpret_cast<std::uint64_t*>(base + l.control) + 2 * part; }
  __device__ unsigned long long* errors() const { return reinterpret_cast<unsigned long long*>(base + l.errors); }
  /// Flag of (CTA k, source s): dispatch's (which 0) or combine's (which 1).
  __device__ std::uint64_t* flag(int which, int k, int s) const {
    return reinterpret_cast<std::uint64_t*>(base + l.flags) + (static_cast<std::size_t>(which) * parts + k) * size + s;
  }
  __device__ std::uint32_t* count_row(int s) const {
    return reinterpret_cast<std::uint32_t*>(base + l.counts) +
           static_cast<std::size_t>(s) * moe_count_row_words(v.shape);
  }
  __device__ std::uint32_t* my_count_row(int r) const {
    return reinterpret_cast<std::uint32_t*>(base + l.my_counts) +
           static_cast<std::size_t>(r) * moe_count_row_words(v.shape);
  }
  __device__ std::uint64_t* token_words() const { return reinterpret_cast<std::uint64_t*>(base + l.tokens); }
  __device__ std::byte* message(int s, std::size_t m) const {
    return base + l.dispatch + (static_cast<std::size_t>(s) * Tm + m) * l.message_bytes;
  }
  __device__ std::byte* partial(int r, std::size_t t) const {
    return base + l.combine + (static_cast<std::size_t>(r) * Tm + t) * moe_row_bytes(v.shape);
  }
  __device__ moe_header* staged_headers(std::size_t t) const {
    return reinterpret_cast<moe_header*>(base + l.staging + t * l.staging_bytes);
  }
  __device__ std::byte* staged_row(std::size_t t) const {
    return base + l.staging + t * l.staging_bytes + static_cast<std::size_t>(K) * sizeof(moe_header);
  }
  // Shared scratch: [0, X) and [X, 2X) expert counters, then three per member, then 16 words.
  __device__ int* experts_a() const { return scratch; }
  __device__ int* experts_b() const { return scratch + X; }
  __device__ int* members_a() const { return scratch + 2 * X; }
  __device__ int* members_b() const { return scratch + 2 * X + size; }
  __device__ int* members_c() const { return scratch + 2 * X + 2 * size; }  ///< size + 1 with misc
  __device__ int* misc() const { return scratch + 2 * X + 3 * size + 1; }
};

/// Enters a dispatch or combine: checks how it is called (debug builds) and returns the CTA's context.
template <class Tr>
__device__ moe_context moe_enter(comm<Tr> const& c, cg::thread_block const& block, moe_view const& v, int* scratch,
                                 char const* op) {
  static_assert(moe_transport<Tr>, "gpucomm: MoE dispatch and combine need a transport with put, signal and quiet");
  moe_context x{.warp = cg::tiled_partition<32>(block)};
  x.warps = static_cast<int>(block.num_threads() / 32);
  x.wid = static_cast<int>(block.thread_rank() / 32);
  x.lane = static_cast<int>(x.warp.thread_rank());
  int const my_pe = c.my_pe();
  x.v = v;
  x.l = v.layout();
  x.parts = v.ctas;
  x.part = v.part_index < 0 ? 0 : v.part_index;
  x.size = v.members.size;
  x.rank = v.members.rank_of(my_pe);
  x.E = v.shape.experts_per_rank;
  x.X = moe_experts(x.size, v.shape);
  x.H = v.shape.hidden;
  x.K = v.shape.top_k;
  x.Tm = v.shape.max_tokens;
  x.base = v.base.get();
  x.scratch = scratch;
#if GPUCOMM_DEBUG
  if (!v.valid()) device_misuse(op, "the view is not a moe_plan's (moe_plan::view(pe))");
  if (x.rank < 0) device_misuse(op, "this PE is not a member of the plan's team");
  if (x.part >= x.parts) device_misuse(op, "part index past the plan's CTAs");
  if (v.part_index < 0 && x.parts != 1)
    device_misuse(op, "a plan of several CTAs needs one call per CTA, each with view.part(k)");
  if (scratch == nullptr) device_misuse(op, "no shared scratch (moe_block_scratch_bytes)");
#else
  (void)op;
#endif
  return x;
}

/// The expert id of slot j of token t (int32 or int64 ids).
__device__ GPUCOMM_FORCEINLINE long long moe_id(moe_context const& x, void const* ids, std::size_t t, int j) {
  std::size_t const i = t * static_cast<std::size_t>(x.K) + static_cast<std::size_t>(j);
  if (x.v.shape.index_dtype == moe_index_dtype::int64) return static_cast<long long const*>(ids)[i];
  return static_cast<int const*>(ids)[i];
}

/// Whether id routes to an expert; an id outside [-1, X) is counted (debug builds: trap).
__device__ GPUCOMM_FORCEINLINE bool moe_routed(moe_context const& x, long long id, bool count_bad) {
  if (id >= 0 && id < x.X) return true;
  if (id != -1) {
#if GPUCOMM_DEBUG
    device_misuse("gpucomm::moe_dispatch",
                  "an expert id outside [-1, experts_per_rank x members): the top-k ids do not fit the plan");
#endif
    if (count_bad) atomicAdd(x.errors() + moe_error_bad_ids, 1ull);
  }
  return false;
}

/// Waits until every flag [k][s] of `which`, k < parts, s < size, reaches epoch (acquire), then
/// syncs the block: every thread sees what the flags' writers released. On a transport with
/// progress (IBGDAPost) the waits make it, and the leader then completes its own signals, as the
/// contract's barrier does: a member that finishes its kernel rings no more doorbells.
template <class Tr>
__device__ void moe_wait_flags(comm<Tr> const& c, cg::thread_block const& block, moe_context const& x, int which,
                               std::uint64_t epoch) {
  int const n = x.parts * x.size;
  for (int i = static_cast<int>(block.thread_rank()); i < n; i += static_cast<int>(block.num_threads())) {
    std::uint64_t* const word = x.flag(which, i / x.size, i % x.size);
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> f(*word);
    spin_until([&] { return f.load(cuda::memory_order_acquire) >= epoch; },
               {which == 0 ? "moe_dispatch" : "moe_combine", word, ">=", epoch}, c.control_header(),
               progress_while_waiting(c));
  }
  if constexpr (provides_progress<Tr>) {
    if (block.thread_rank() == 0) c.quiet(this_thread());
  }
  block.sync();
}

/// The leader, after the block's sync: flag [part][rank] = epoch at every member, by the
/// transport's signal (a release after the block's completed puts) or, at this PE, a release store.
template <class Tr>
__device__ void moe_signal_all(comm<Tr> const& c, cg::thread_block const& block, moe_context const& x, int which,
                               std::uint64_t epoch) {
  block.sync();
  if (block.thread_rank() != 0) return;
  sym_ptr<signal_t> const mine(x.flag(which, x.part, x.rank));
  for (int k = 1; k < x.size; ++k) {
    int const r = x.rank + k < x.size ? x.rank + k : x.rank + k - x.size;
    c.signal(this_thread(), mine, epoch, signal_op::set, x.v.members.pe_of(r));
  }
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*mine.get()).store(epoch, cuda::memory_order_release);
}

/// Copies `bytes` (a multiple of 16) from src (this PE's workspace) to dst in r's workspace: a
/// put_nbi by the warp (its own stores on P2PCopy: no staging here), or a local copy for this PE.
template <class Tr>
__device__ GPUCOMM_FORCEINLINE void moe_send(comm<Tr> const& c, moe_warp const& warp, moe_context const& x, int r,
                                             std::byte* dst, std::byte const* src, std::size_t bytes) {
  auto* const d = reinterpret_cast<uint4*>(dst);
  auto const* const s = reinterpret_cast<uint4 const*>(src);
  if (r == x.rank)
    copy_vectors(warp, d, s, bytes / 16);
  else
    c.put_nbi(without_staging(warp), sym_ptr<uint4>(d), s, bytes / 16, x.v.members.pe_of(r));
}

/// Step 1: counters over all T tokens (experts_a, members_a) and over those before t0 (experts_b,
/// members_b); the rank mask of each of this CTA's tokens; CTA 0 stages the count rows.
__device__ inline void moe_count(cg::thread_block const& block, moe_context const& x, void const* ids, int T,
                                 element_range mine) {
  int const nt = static_cast<int>(block.num_threads()), me = static_cast<int>(block.thread_rank());
  for (int i = me; i < 2 * x.X + 2 * x.size; i += nt) x.scratch[i] = 0;
  block.sync();
  for (int t = me; t < T; t += nt) {
    bool const before = static_cast<std::size_t>(t) < mine.lo;
    bool const own = !before && static_cast<std::size_t>(t) < mine.hi;
    std::uint64_t ranks = 0;
    for (int j = 0; j < x.K; ++j) {
      long long const id = moe_id(x, ids, static_cast<std::size_t>(t), j);
      if (!moe_routed(x, id, own)) continue;
      atomicAdd(x.experts_a() + id, 1);
      if (before) atomicAdd(x.experts_b() + id, 1);
      ranks |= std::uint64_t{1} << (id / x.E);
    }
    for (std::uint64_t m = ranks; m != 0; m &= m - 1) {
      int const r = __ffsll(static_cast<long long>(m)) - 1;
      atomicAdd(x.members_a() + r, 1);
      if (before) atomicAdd(x.members_b() + r, 1);
    }
    if (own) x.token_words()[1 + t] = ranks;
  }
  block.sync();
  if (x.part != 0) return;
  if (me == 0) x.token_words()[0] = static_cast<std::uint64_t>(T);
  std::size_t const w = moe_count_row_words(x.v.shape);
  for (std::size_t i = me; i < static_cast<std::size_t>(x.size) * w; i += nt) {
    int const r = static_cast<int>(i / w), e = static_cast<int>(i % w) - 1;
    x.my_count_row(r)[i % w] = e < 0     ? static_cast<std::uint32_t>(x.members_a()[r])
                               : e < x.E ? static_cast<std::uint32_t>(x.experts_a()[r * x.E + e])
                                         : 0u;
  }
}

/// Step 2, one warp: the headers of the CTA's tokens, in token order (experts_b and members_b
/// count on from the tokens before them). Lane j takes slot j; lanes of one rank form a message,
/// whose header the lowest of them (its first slot) holds; `unused` carries the message index and
/// rank + 1 (0 in the header of a slot that is not a message's first) for step 3.
__device__ inline void moe_headers(moe_warp const& warp, moe_context const& x, void const* ids, float const* weights,
                                   element_range mine) {
  int const lane = static_cast<int>(warp.thread_rank());
  unsigned const lower = (1u << lane) - 1u;
  for (std::size_t t = mine.lo; t < mine.hi; ++t) {
    bool const slot = lane < x.K;
    long long const id = slot ? moe_id(x, ids, t, lane) : -1;
    bool const routed = slot && moe_routed(x, id, false);
    int const key = routed ? static_cast<int>(id) : x.X + lane;  // unrouted lanes match no other
    unsigned const same_expert = __match_any_sync(0xffffffffu, key);
    int const r = routed ? static_cast<int>(id / x.E) : x.size + lane;
    unsigned const same_rank = __match_any_sync(0xffffffffu, r);
    int const first = __ffs(same_rank) - 1;
    moe_header* const headers = x.staged_headers(t);
    int position = 0, index = 0;
    if (routed) {
      position = x.experts_b()[id] + __popc(same_expert & lower);
      index = x.members_b()[r];
    }
    warp.sync();
    if (routed && (same_expert & lower) == 0) x.experts_b()[id] += __popc(same_expert);
    if (routed && first == lane) x.members_b()[r] += 1;
    if (slot) {
      moe_header& h = headers[first];
      if (routed) {
        h.expert[lane] = static_cast<std::uint16_t>(id - static_cast<long long>(r) * x.E);
        h.position[lane] = static_cast<std::uint32_t>(position);
        h.weight[lane] = weights[t * static_cast<std::size_t>(x.K) + static_cast<std::size_t>(lane)];
      }
      if (first == lane) {
        h.token = static_cast<std::uint32_t>(t);
        h.slots = routed ? same_rank : 0u;
        h.unused[0] = static_cast<std::uint32_t>(index);
        h.unused[1] = routed ? static_cast<std::uint32_t>(r + 1) : 0u;
      } else {
        headers[lane].unused[1] = 0;
      }
    }
    warp.sync();
  }
}

/// Step 2, the other warps: token t's row into staging, as the plan's dtype.
__device__ inline void moe_stage_row(moe_warp const& warp, moe_context const& x, __nv_bfloat16 const* tokens,
                                     std::size_t t) {
  __nv_bfloat16 const* const row = tokens + t * static_cast<std::size_t>(x.H);
  std::byte* const to = x.staged_row(t);
  if (x.v.shape.token_dtype == moe_token_dtype::bf16) {
    copy_vectors(warp, reinterpret_cast<uint4*>(to), reinterpret_cast<uint4 const*>(row),
                 static_cast<std::size_t>(x.H) / 8);
    return;
  }
  // fp8 e4m3: a block of 128 elements per pass, 4 per lane; scale = amax / 448 (1 for a zero block).
  auto* const scales = reinterpret_cast<float*>(to + x.H);
  int const lane = static_cast<int>(warp.thread_rank());
  for (int b = 0; b < x.H / moe_scale_block; ++b) {
    __nv_bfloat16 const* const in = row + b * moe_scale_block + 4 * lane;
    float v[4], amax = 0.f;
    for (int i = 0; i < 4; ++i) {
      v[i] = __bfloat162float(in[i]);
      amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int d = 16; d > 0; d /= 2) amax = fmaxf(amax, warp.shfl_xor(amax, d));
    float const scale = amax > 0.f ? amax / 448.f : 1.f;
    float const inv = amax > 0.f ? 448.f / amax : 1.f;
    std::uint32_t packed = 0;
    for (int i = 0; i < 4; ++i)
      packed |= std::uint32_t{__nv_cvt_float_to_fp8(v[i] * inv, __NV_SATFINITE, __NV_E4M3)} << (8 * i);
    reinterpret_cast<std::uint32_t*>(to + b * moe_scale_block)[lane] = packed;
    if (lane == 0) scales[b] = scale;
  }
}

/// Step 4's first half (and combine's): from the count rows, base[s * E + e] (experts_a) = where
/// source s's rows of local expert e start among the received rows; members_c[s] = the first
/// message index of source s among all received, members_c[size] = the messages in all. Returns
/// the rows received in all (the same in every CTA).
__device__ inline long long moe_bases(cg::thread_block const& block, moe_context const& x) {
  int const nt = static_cast<int>(block.num_threads()), me = static_cast<int>(block.thread_rank());
  int* const totals = x.experts_b();  // per local expert, then its first row
  for (int e = me; e < x.E; e += nt) {
    int sum = 0;
    for (int s = 0; s < x.size; ++s) sum += static_cast<int>(x.count_row(s)[1 + e]);
    totals[e] = sum;
  }
  block.sync();
  if (me == 0) {
    long long at = 0;
    for (int e = 0; e < x.E; ++e) {
      int const n = totals[e];
      totals[e] = static_cast<int>(at);
      at += n;
    }
    x.misc()[0] = static_cast<int>(at);
    int m = 0;
    for (int s = 0; s < x.size; ++s) {
      x.members_c()[s] = m;
      m += static_cast<int>(x.count_row(s)[0]);
    }
    x.members_c()[x.size] = m;
  }
  block.sync();
  for (int e = me; e < x.E; e += nt) {
    int at = totals[e];
    for (int s = 0; s < x.size; ++s) {
      x.experts_a()[s * x.E + e] = at;
      at += static_cast<int>(x.count_row(s)[1 + e]);
    }
  }
  block.sync();
  return x.misc()[0];
}

/// The source rank and index of received message i (members_c holds the first of each source).
__device__ GPUCOMM_FORCEINLINE int moe_source_of(moe_context const& x, int i) {
  int s = 0;
  while (s + 1 < x.size && x.members_c()[s + 1] <= i) ++s;
  return s;
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
