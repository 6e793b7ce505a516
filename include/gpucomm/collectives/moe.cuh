#pragma once
// Expert-parallel (MoE) dispatch and combine, called from a kernel: every member sends each of its
// tokens to the members holding the experts its router chose, once per member however many of
// that member's experts it chose, and gets back the weighted sum of the experts' outputs.
//
//   // host, once, collectively: gpucomm::moe_plan plan(w, team, shape);   (host/moe.cuh)
//   __global__ void layer(comm_t c, gpucomm::moe_view v, ...) {   // v.ctas CTAs, at every member
//     extern __shared__ int scratch[];                                // moe_block_scratch_bytes
//     auto block = cooperative_groups::this_thread_block();
//     gpucomm::moe_dispatch(c, block, v.part(blockIdx.x), dispatch_args, scratch);
//   }
//   // ... experts run on the received rows (a kernel boundary or a grid sync first) ...
//   //     gpucomm::moe_combine(c, block, v.part(blockIdx.x), combine_args, scratch);
//
// Dispatch takes T tokens [T x H] bf16, their top-k expert ids [T x k] (int32 or int64, as the
// plan's shape says; expert x lives at team rank x / experts_per_rank; -1 routes a slot nowhere)
// and weights [T x k] float, and writes at each member, for its local experts:
//   recv_rows     the received rows, expert-major: all rows of local expert 0, then expert 1, ...;
//                 within an expert by source rank, then source token, then slot. bf16 [R x H], or
//                 for fp8 e4m3 plans [R x H] bytes and recv_scales [R x H / 128] floats, row i's
//                 element h being fp8(h) x scale(h / 128)
//   recv_counts   rows per local expert (recv_counts[e] rows of expert e follow those of e - 1)
//   recv_sources  per row, the (team rank, token, slot) it came from (optional: may be null)
//   recv_weights  per row, its top-k weight (optional)
// with R = max_recv_rows. A member that would receive more rows than R keeps the first R in that
// order and drops the rest; the drop is counted on the device and world::synchronize throws a
// gpucomm::error naming it (the counts then say what was kept). Combine takes the expert outputs
// in the same rows, bf16 [R x H], and writes at each source, for each of its T tokens (T of its
// last dispatch), out[t] = the sum over its routed slots of weight x output, as bf16: at each
// expert member the slots it holds are summed in slot order (fmaf, float) and rounded to bf16, and
// the source sums those partial rows in team-rank order (float). The order is fixed, so the result
// is bitwise the same from run to run, whatever order messages arrive in. A token none of whose
// slots is routed gets zeros.
//
// The token count is args.num_tokens, or *args.num_tokens_device when that is not null (a count the
// device computed: CUDA graphs replay it as it is then); above max_tokens the call uses
// max_tokens and world::synchronize reports it. Expert ids outside [-1, experts) are ignored and
// reported, and trap in debug builds (GPUCOMM_DEBUG).
//
// Calls: at every member of the plan's team, v.ctas CTAs (any whole number of warps each, 512
// threads suit), CTA k passing v.part(k) and moe_block_scratch_bytes of shared memory; all of them
// resident together (they wait for each other, as every collective's CTAs do). Dispatches and
// combines alternate on one plan (dispatch, combine, dispatch, ...; debug builds trap otherwise), and
// each call starts after the previous one finished at all CTAs of this member (a kernel boundary
// or a grid sync): the plan's regions are reused without a barrier (detail/moe_steps.cuh). Token,
// id, weight and output buffers are the caller's local memory (tokens, recv_rows, expert_rows and
// out 16-byte aligned); tokens and expert outputs may be reused as soon as the call returns. Any transport with put,
// signal and quiet works, through comm<Transport>: NVLinkStore, P2PCopy, IBGDAPost, ProxyQueue, route<...>
// (gpucomm::moe_transport<Tr> says whether a transport does; one that does not fails to compile with a message saying
// so).

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "../comm.cuh"
#include "detail/moe_steps.cuh"
#include "moe_shape.hpp"

namespace gpucomm {

struct moe_dispatch_args {
  __nv_bfloat16 const* tokens = nullptr;   ///< [T x hidden]
  void const* topk_ids = nullptr;          ///< [T x top_k], int32 or int64 (moe_shape::index_dtype)
  float const* topk_weights = nullptr;     ///< [T x top_k]
  int num_tokens = 0;                      ///< T, unless num_tokens_device is set
  int const* num_tokens_device = nullptr;  ///< T read on the device when not null
  void* recv_rows = nullptr;               ///< [max_recv_rows x hidden] bf16, or fp8 e4m3 bytes
  float* recv_scales = nullptr;            ///< fp8 plans: [max_recv_rows x hidden / 128]
  int* recv_counts = nullptr;              ///< [experts_per_rank]
  moe_source* recv_sources = nullptr;      ///< [max_recv_rows] or null
  float* recv_weights = nullptr;           ///< [max_recv_rows] or null
};

struct moe_combine_args {
  __nv_bfloat16 const* expert_rows = nullptr;  ///< [max_recv_rows x hidden], in recv_rows' order
  __nv_bfloat16* out = nullptr;                ///< [T x hidden] at each source
};

#if defined(__CUDACC__)

template <class Tr>
__device__ void moe_dispatch(comm<Tr> const& c, cooperative_groups::thread_block const& block, moe_view const& v,
                             moe_dispatch_args const& a, int* scratch) {
  detail::moe_context const x = detail::moe_enter(c, block, v, scratch, "gpucomm::moe_dispatch");
  using namespace detail;
  auto const& warp = x.warp;
  int const warps = x.warps, wid = x.wid, lane = x.lane;
  bool const reporter = x.part == 0 && block.thread_rank() == 0;

  int T = a.num_tokens_device != nullptr ? *a.num_tokens_device : a.num_tokens;
  if (T < 0 || T > x.Tm) {
    if (reporter) {
      atomicAdd(x.errors() + moe_error_tokens_over, 1ull);
      atomicMax(x.errors() + moe_error_largest_tokens, static_cast<unsigned long long>(T < 0 ? 0 : T));
    }
    T = T < 0 ? 0 : x.Tm;
  }
  std::uint64_t const combines = x.calls()[1];
  std::uint64_t const epoch = next_epoch(block, x.calls());
  if (combines + 1 != epoch) {
#if GPUCOMM_DEBUG
    device_misuse("gpucomm::moe_dispatch", "a second dispatch on the plan before its combine");
#endif
    if (reporter) atomicAdd(x.errors() + moe_error_out_of_order, 1ull);
  }
  element_range const mine = part_range(static_cast<std::size_t>(T), x.part, x.parts);

  // 1-2: counters; headers by warp 0, rows staged by the others. Where this PE stores to every
  // peer's memory itself (NVLinkStore, P2PCopy), bf16 rows go from the tokens straight to the
  // receivers, unstaged; fp8 rows are cast once, into staging.
  bool const fp8 = x.v.shape.token_dtype == moe_token_dtype::fp8_e4m3;
  bool const direct = load_stores_everywhere<Tr> && !fp8;
  moe_count(block, x, a.topk_ids, T, mine);
  block.sync();
  if (wid == 0) moe_headers(warp, x, a.topk_ids, a.topk_weights, mine);
  int const stagers = warps > 1 ? warps - 1 : 1;
  if (!direct && (warps == 1 || wid > 0))
    for (std::size_t t = mine.lo + (warps > 1 ? wid - 1 : 0); t < mine.hi; t += stagers)
      moe_stage_row(warp, x, a.tokens, t);
  block.sync();

  // 3: messages, and CTA 0's count rows; then the flags.
  std::size_t const payload = moe_payload_bytes(x.v.shape);
  if (x.part == 0 && wid == 0) {
    for (int r = 0; r < x.size; ++r)
      moe_send(c, warp, x, r, reinterpret_cast<std::byte*>(x.count_row(x.rank)),
               reinterpret_cast<std::byte const*>(x.my_count_row(r)), moe_count_row_words(x.v.shape) * 4);
  }
  for (std::size_t t = mine.lo + wid; t < mine.hi; t += warps) {
    moe_header const* const h = x.staged_headers(t);
    unsigned firsts = warp.ballot(lane < x.K && h[lane < x.K ? lane : 0].unused[1] != 0);
    for (; firsts != 0; firsts &= firsts - 1) {
      int const j = __ffs(firsts) - 1;
      int const r = static_cast<int>(h[j].unused[1]) - 1;
      std::byte* const to = x.message(x.rank, h[j].unused[0]);
      moe_send(c, warp, x, r, to, reinterpret_cast<std::byte const*>(h + j), sizeof(moe_header));
      std::byte const* const row =
          direct ? reinterpret_cast<std::byte const*>(a.tokens + t * static_cast<std::size_t>(x.H)) : x.staged_row(t);
      moe_send(c, warp, x, r, to + sizeof(moe_header), row, payload);
    }
  }
  c.quiet(warp);
  moe_signal_all(c, block, x, 0, epoch);
  moe_wait_flags(c, block, x, 0, epoch);

  // 4: where each source's rows of each expert go; counts; the unpacking of this CTA's messages.
  long long const rows = moe_bases(block, x);
  long long const R = x.v.shape.max_recv_rows;
  if (x.part == 0) {
    for (int e = static_cast<int>(block.thread_rank()); e < x.E; e += static_cast<int>(block.num_threads())) {
      long long const first = x.experts_a()[e], end = e + 1 < x.E ? x.experts_a()[e + 1] : rows;
      long long const kept = (end < R ? end : R) - first;
      a.recv_counts[e] = static_cast<int>(kept > 0 ? kept : 0);
    }
    if (reporter && rows > R) {
      atomicAdd(x.errors() + moe_error_rows_dropped, static_cast<unsigned long long>(rows - R));
      atomicMax(x.errors() + moe_error_largest_recv, static_cast<unsigned long long>(rows));
    }
  }
  std::size_t const row_bytes = fp8 ? static_cast<std::size_t>(x.H) : moe_row_bytes(x.v.shape);
  int const scales = x.H / moe_scale_block;
  element_range const share = part_range(static_cast<std::size_t>(x.members_c()[x.size]), x.part, x.parts);
  for (std::size_t i = share.lo + wid; i < share.hi; i += warps) {
    int const s = moe_source_of(x, static_cast<int>(i));
    std::byte const* const msg = x.message(s, i - static_cast<std::size_t>(x.members_c()[s]));
    moe_header const& h = *reinterpret_cast<moe_header const*>(msg);
    std::byte const* const row = msg + sizeof(moe_header);
    for (unsigned slots = h.slots; slots != 0; slots &= slots - 1) {
      int const j = __ffs(slots) - 1;
      long long const at = static_cast<long long>(x.experts_a()[s * x.E + h.expert[j]]) + h.position[j];
      if (at >= R) continue;
      auto const to = static_cast<std::size_t>(at);
      copy_vectors(warp, reinterpret_cast<uint4*>(static_cast<std::byte*>(a.recv_rows) + to * row_bytes),
                   reinterpret_cast<uint4 const*>(row), row_bytes / 16);
      if (fp8)
        for (int b = lane; b < scales; b += 32)
          a.recv_scales[to * scales + b] = reinterpret_cast<float const*>(row + x.H)[b];
      if (lane == 0 && a.recv_sources != nullptr) a.recv_sources[to] = {s, static_cast<std::int32_t>(h.token), j};
      if (lane == 0 && a.recv_weights != nullptr) a.recv_weights[to] = h.weight[j];
    }
  }
  block.sync();
}

template <class Tr>
__device__ void moe_combine(comm<Tr> const& c, cooperative_groups::thread_block const& block, moe_view const& v,
                            moe_combine_args const& a, int* scratch) {
  detail::moe_context const x = detail::moe_enter(c, block, v, scratch, "gpucomm::moe_combine");
  using namespace detail;
  std::uint64_t const dispatches = x.calls()[0];
  std::uint64_t const epoch = next_epoch(block, x.calls() + 1);
  if (dispatches != epoch) {
#if GPUCOMM_DEBUG
    device_misuse("gpucomm::moe_combine", "a combine on the plan without a dispatch before it");
#endif
    if (x.part == 0 && block.thread_rank() == 0) atomicAdd(x.errors() + moe_error_out_of_order, 1ull);
  }
  // Each received message: its slots' rows, weighted, summed in slot order, back to its source.
  moe_bases(block, x);
  long long const R = x.v.shape.max_recv_rows;
  std::size_t const vectors = static_cast<std::size_t>(x.H) / 8;  // 8 bf16 per 16 bytes
  auto const* const rows = reinterpret_cast<uint4 const*>(a.expert_rows);
  element_range const share = part_range(static_cast<std::size_t>(x.members_c()[x.size]), x.part, x.parts);
  for (std::size_t i = share.lo + x.wid; i < share.hi; i += x.warps) {
    int const s = moe_source_of(x, static_cast<int>(i));
    std::byte* const msg = x.message(s, i - static_cast<std::size_t>(x.members_c()[s]));
    moe_header const& h = *reinterpret_cast<moe_header const*>(msg);
    std::byte* const back = x.partial(x.rank, h.token);  // at the source, symmetric
    auto* const sum = reinterpret_cast<uint4*>(s == x.rank ? back : msg + sizeof(moe_header));
    for (std::size_t vi = x.lane; vi < vectors; vi += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (unsigned slots = h.slots; slots != 0; slots &= slots - 1) {
        int const j = __ffs(slots) - 1;
        long long const at = static_cast<long long>(x.experts_a()[s * x.E + h.expert[j]]) + h.position[j];
        if (at >= R) continue;
        uint4 const y = rows[static_cast<std::size_t>(at) * vectors + vi];
        auto const* const p = reinterpret_cast<__nv_bfloat162 const*>(&y);
        for (int q = 0; q < 4; ++q) {
          float2 const f = __bfloat1622float2(p[q]);
          acc[2 * q] = __fmaf_rn(h.weight[j], f.x, acc[2 * q]);
          acc[2 * q + 1] = __fmaf_rn(h.weight[j], f.y, acc[2 * q + 1]);
        }
      }
      uint4 out;
      auto* const o = reinterpret_cast<__nv_bfloat162*>(&out);
      for (int q = 0; q < 4; ++q) o[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
      sum[vi] = out;
    }
    if (s != x.rank) {
      x.warp.sync();  // every lane's part of the row is staged before the warp puts it
      moe_send(c, x.warp, x, s, back, reinterpret_cast<std::byte const*>(sum), moe_row_bytes(x.v.shape));
    }
  }
  c.quiet(x.warp);
  moe_signal_all(c, block, x, 1, epoch);
  moe_wait_flags(c, block, x, 1, epoch);

  // Each of this CTA's tokens: the partial rows of its ranks, in rank order.
  auto const T = static_cast<std::size_t>(x.token_words()[0]);
  element_range const tokens = part_range(T, x.part, x.parts);
  auto* const out = reinterpret_cast<uint4*>(a.out);
  for (std::size_t t = tokens.lo + x.wid; t < tokens.hi; t += x.warps) {
    std::uint64_t const ranks = x.token_words()[1 + t];
    for (std::size_t vi = x.lane; vi < vectors; vi += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (std::uint64_t m = ranks; m != 0; m &= m - 1) {
        int const r = __ffsll(static_cast<long long>(m)) - 1;
        uint4 const y = reinterpret_cast<uint4 const*>(x.partial(r, t))[vi];
        auto const* const p = reinterpret_cast<__nv_bfloat162 const*>(&y);
        for (int q = 0; q < 4; ++q) {
          float2 const f = __bfloat1622float2(p[q]);
          acc[2 * q] = __fadd_rn(acc[2 * q], f.x);
          acc[2 * q + 1] = __fadd_rn(acc[2 * q + 1], f.y);
        }
      }
      uint4 o4;
      auto* const o = reinterpret_cast<__nv_bfloat162*>(&o4);
      for (int q = 0; q < 4; ++q) o[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
      out[t * vectors + vi] = o4;
    }
  }
  block.sync();
}

#endif  // __CUDACC__

}  // namespace gpucomm
