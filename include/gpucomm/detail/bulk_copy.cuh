#pragma once
// The Hopper bulk-copy unit (PTX cp.async.bulk, sm_90) as P2PCopy uses it: bulk stores from shared
// memory to (peer) global memory completing in per-thread bulk groups, bulk loads from (peer)
// global memory into shared memory completing on an mbarrier, and the pipeline that stages a
// global-to-global copy through shared memory with one thread.
//
// Facts from the PTX ISA this relies on:
//   - addresses and sizes of a bulk copy are multiples of 16 bytes;
//   - the unit is the async proxy: generic-proxy writes to shared memory it will read need
//     fence.proxy.async.shared::cta between them, and its writes to global memory need
//     cp.async.bulk.wait_group (completion, not .read) and a fence.proxy.async before generic
//     operations of the issuing thread are ordered after them;
//   - bulk groups belong to the issuing thread: only that thread can wait for them;
//   - an mbarrier's memory must be mbarrier.inval'ed before it is used for anything else.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../group.cuh"
#include "bulk_ptx.cuh"
#include "copy.cuh"
#include "spin.cuh"

namespace gpucomm::detail {

/// What the bulk-copy unit moves: 16-byte aligned addresses and sizes.
inline constexpr std::size_t bulk_granule = 16;

/// A body shorter than this goes through the group's own stores: under it the unit's start-up
/// (an mbarrier or a bulk group round trip, about a microsecond) costs more than the copy.
inline constexpr std::size_t bulk_min_bytes = 512;

/// The split of a copy into an SM-copied head, a bulk body and an SM-copied tail, or no body when
/// the addresses disagree modulo 16 or the body would be shorter than bulk_min_bytes.
struct bulk_split {
  std::size_t head = 0;  ///< bytes before the first 16-byte boundary of dst
  std::size_t body = 0;  ///< a multiple of 16, or 0: copy all of it with SM loads and stores
  GPUCOMM_HD constexpr std::size_t tail_at() const noexcept { return head + body; }
};

GPUCOMM_HD constexpr bulk_split split_for_bulk(std::uintptr_t dst, std::uintptr_t src, std::size_t bytes) noexcept {
  if (((dst ^ src) & (bulk_granule - 1)) != 0) return {};
  std::size_t const head = (bulk_granule - (dst & (bulk_granule - 1))) & (bulk_granule - 1);
  if (bytes < head) return {};
  std::size_t const body = (bytes - head) & ~(bulk_granule - 1);
  if (body < bulk_min_bytes) return {};
  return {head, body};
}
static_assert(split_for_bulk(16, 32, 4096).head == 0 && split_for_bulk(16, 32, 4096).body == 4096);
static_assert(split_for_bulk(17, 33, 4096).head == 15 && split_for_bulk(17, 33, 4096).body == 4080);
static_assert(split_for_bulk(17, 34, 4096).body == 0);

/// The largest size one bulk instruction is given (its operand is 32 bits; smaller pieces keep
/// several in flight).
inline constexpr std::uint32_t bulk_piece_bytes = 1u << 20;
/// The most one mbarrier phase can expect (its transaction count has 20 bits), far above any
/// CTA's shared memory.
inline constexpr std::size_t max_stage_bytes = (std::size_t{1} << 20) - bulk_granule;

#if defined(__CUDACC__)

/// Whether generic address `p` is in the calling CTA's shared memory (PTX isspacep.shared). Not
/// __isShared: nvcc 13.0's optimiser can hand that intrinsic a pointer of the caller's element type
/// and then rejects its own IR ("Broken function found"); the inline PTX keeps the operand a
/// 64-bit integer.
__device__ GPUCOMM_FORCEINLINE bool in_shared_memory(void const* p) {
  std::uint32_t shared = 0;
  asm("{\n\t.reg .pred is_shared;\n\tisspacep.shared is_shared, %1;\n\tselp.u32 %0, 1, 0, is_shared;\n\t}"
      : "=r"(shared)
      : "l"(p));
  return shared != 0;
}

/// Makes the calling thread's earlier generic-proxy accesses to shared memory ordered before the
/// bulk-copy unit's later ones (and the reverse). Every thread that wrote a put's shared-memory
/// source runs it before the synchronisation that hands the data to the issuing thread.
__device__ GPUCOMM_FORCEINLINE void fence_shared_for_bulk() { bulk_ptx::fence_async_shared(); }

/// Waits until every bulk copy this thread issued has completed, then orders their writes before
/// this thread's later generic operations (fence.proxy.async over every state space), so a release
/// that follows carries them. Nothing to wait for costs two instructions.
__device__ GPUCOMM_FORCEINLINE void complete_own_bulk_copies() {
  bulk_ptx::wait_group<0>();
  bulk_ptx::fence_async_all();
}

/// Bulk store of `bytes` (a multiple of 16) from shared `src` to global `dst`, in pieces, each its
/// own bulk group. Issued by one thread.
__device__ GPUCOMM_FORCEINLINE void bulk_store(unsigned char* dst, unsigned char const* src, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += bulk_piece_bytes) {
    std::size_t const left = bytes - at;
    auto const len = static_cast<std::uint32_t>(left < bulk_piece_bytes ? left : bulk_piece_bytes);
    bulk_ptx::store(dst + at, src + at, len);
    bulk_ptx::commit_group();
  }
}

/// The calling thread waits until phase `parity` of the mbarrier at `bar` has completed.
__device__ GPUCOMM_FORCEINLINE void wait_mbarrier(std::uint64_t* bar, std::uint32_t parity) {
  spin_until([&] { return bulk_ptx::mbarrier_try_wait_parity(bar, parity); }, "P2PCopy: a bulk load");
}

/// Arms the mbarrier at `bar` for one phase that completes when `bytes` have arrived, then bulk
/// loads them from global `src` into shared `dst`, in pieces. Issued by one thread.
__device__ GPUCOMM_FORCEINLINE void bulk_load(unsigned char* dst, unsigned char const* src, std::size_t bytes,
                                              std::uint64_t* bar) {
  // The arrival and the byte count in one instruction: the phase cannot complete before every
  // piece below has landed (the count is set before any of them can complete).
  bulk_ptx::mbarrier_arrive_expect(bar, static_cast<std::uint32_t>(bytes));
  for (std::size_t at = 0; at < bytes; at += bulk_piece_bytes) {
    std::size_t const left = bytes - at;
    auto const len = static_cast<std::uint32_t>(left < bulk_piece_bytes ? left : bulk_piece_bytes);
    bulk_ptx::load(dst + at, src + at, len, bar);
  }
}

/// Initialises `count` mbarriers of one expected arrival each and makes them visible to the
/// bulk-copy unit (whose completions update them). One thread.
__device__ GPUCOMM_FORCEINLINE void init_mbarriers(std::uint64_t* bars, unsigned count) {
  for (unsigned s = 0; s < count; ++s) bulk_ptx::mbarrier_init(bars + s, 1u);
  fence_shared_for_bulk();
}

/// Invalidates `count` mbarriers whose phases have all completed, so their memory may be reused
/// (PTX requires mbarrier.inval first).
__device__ GPUCOMM_FORCEINLINE void inval_mbarriers(std::uint64_t* bars, unsigned count) {
  for (unsigned s = 0; s < count; ++s) {
    bulk_ptx::mbarrier_inval(bars + s);
  }
}

/// Copies `bytes` (a multiple of 16) from global `src` to global `dst` (either may be a peer's
/// mapping) through `Stages` shared-memory stages of `StageBytes` each, by the calling thread
/// alone:
///   - bulk loads fill every stage first, each completing on its stage's mbarrier;
///   - as chunk k's stage fills, a bulk store empties it into dst (one bulk group per store);
///   - chunk k's stage is refilled with chunk k+Stages once store k has read it: after issuing
///     store k+StoresInFlight, the thread waits until at most StoresInFlight stores are still
///     reading (wait_group.read), so that many stores and Stages-StoresInFlight loads overlap.
///     On one H100 one store in flight was best (docs/guide/p2p_copy.md): the copy is bound by the
///     bytes its loads keep in flight, and every extra store in flight takes a stage from them;
///   - with PrefetchAhead > 0, issuing the load of chunk k also asks L2 to prefetch chunk
///     k+PrefetchAhead of src, unless that chunk is among the first Stages (loaded at once
///     anyway): more of src on its way than the stages hold.
/// Returns when every load has completed (src may be reused) and every store has read its stage
/// (the staging may be reused); the stores' writes may still be in flight, and complete with
/// complete_own_bulk_copies().
template <std::size_t StageBytes, unsigned Stages, unsigned StoresInFlight, unsigned PrefetchAhead = 0>
__device__ void bulk_copy_staged(unsigned char* dst, unsigned char const* src, std::size_t bytes,
                                 unsigned char (&stage)[Stages][StageBytes], std::uint64_t (&full)[Stages]) {
  static_assert(StageBytes % bulk_granule == 0 && StageBytes <= max_stage_bytes);
  static_assert(Stages >= 2, "the pipeline refills a stage while another one drains");
  static_assert(StoresInFlight >= 1 && StoresInFlight < Stages,
                "at least one store in flight, and at least one stage left to load into");
  std::size_t const chunks = (bytes + StageBytes - 1) / StageBytes;
  auto const length = [&](std::size_t k) {
    std::size_t const left = bytes - k * StageBytes;
    return left < StageBytes ? left : StageBytes;
  };
  auto const load = [&](std::size_t k) {
    unsigned const s = static_cast<unsigned>(k % Stages);
    bulk_load(stage[s], src + k * StageBytes, length(k), &full[s]);
    if constexpr (PrefetchAhead != 0) {
      std::size_t const ahead = k + PrefetchAhead;
      if (ahead >= Stages && ahead < chunks)
        bulk_ptx::prefetch_l2(src + ahead * StageBytes, static_cast<std::uint32_t>(length(ahead)));
    }
  };
  init_mbarriers(full, Stages);
  for (std::size_t k = 0; k < chunks && k < Stages; ++k) load(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    unsigned const s = static_cast<unsigned>(k % Stages);
    wait_mbarrier(&full[s], static_cast<std::uint32_t>((k / Stages) & 1));
    bulk_ptx::store(dst + k * StageBytes, stage[s], static_cast<std::uint32_t>(length(k)));
    bulk_ptx::commit_group();
    // Store k - StoresInFlight has read its stage once only StoresInFlight stores (k -
    // StoresInFlight + 1 .. k) may still be reading: refill that stage with the chunk Stages on.
    if (k >= StoresInFlight) {
      std::size_t const refill = k - StoresInFlight + Stages;
      if (refill < chunks) {
        bulk_ptx::wait_group_read<StoresInFlight>();
        load(refill);
      }
    }
  }
  bulk_ptx::wait_group_read<0>();
  inval_mbarriers(full, Stages);
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
