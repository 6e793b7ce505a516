#pragma once
// P2PCopy's per-group scratch: the shared-memory stages through which a put from global memory
// (or a get into global memory) is pipelined, and the group wrapper that hands them to the
// transport.
//
//   __global__ void k(gpucomm::comm<gpucomm::P2PCopy> c, gpucomm::sym_ptr<float> dst, float const* src,
//                     std::size_t n, int pe) {
//     __shared__ gpucomm::P2PCopy::staging stages;  // one per calling group, in shared memory
//     auto const block = cooperative_groups::this_thread_block();
//     c.put(gpucomm::with_staging(block, stages), dst, src, n, pe);
//   }
//
// A staged group is a group like any other (every transport accepts it and ignores the stages),
// so generic code can pass one everywhere. Its threads are g's; it has shfl where g has one.
// without_staging(g) (group.cuh) says the opposite at the call site: g's own stores.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../detail/bulk_copy.cuh"
#include "../../group.cuh"
#include "../../scratch.hpp"

namespace gpucomm {

/// The stores a pipeline keeps in flight unless told otherwise: one, so that every other stage is
/// loading. Measured on one H100 (docs/guide/p2p_copy.md): a staged put is bound by the bytes its loads
/// keep in flight, and more stores in flight only took stages from the loads.
inline constexpr unsigned default_stores_in_flight = 1;

/// How many chunks ahead of its bulk loads a staged put asks L2 to prefetch its source unless told
/// otherwise (BasicP2PCopy's PrefetchAhead): none. Measured on H200 at 1, 2 and 4 chunks ahead, the
/// prefetch made the put slower at 1 to 16 CTAs and no faster beyond (docs/guide/p2p_copy.md, "Why
/// no L2 prefetch by default").
inline constexpr unsigned default_prefetch_ahead = 0;

/// `Stages` shared-memory stages of `StageBytes` bytes each, and an mbarrier per stage. Trivial,
/// meant to be a __shared__ variable (the bulk-copy unit reads and writes shared memory only); its
/// contents mean nothing between calls. `StoresInFlight` of the stages may be draining to the peer
/// while the others fill (detail::bulk_copy_staged).
template <std::size_t StageBytes, unsigned Stages, unsigned StoresInFlight = default_stores_in_flight>
struct p2p_staging {
  static_assert(StageBytes >= 16 && StageBytes % 16 == 0 && StageBytes <= detail::max_stage_bytes,
                "gpucomm::p2p_staging: a stage is a multiple of 16 bytes (the bulk-copy unit's granule)");
  static_assert(Stages >= 2 && Stages <= 16,
                "gpucomm::p2p_staging: 2 to 16 stages (the pipeline fills one while another drains)");
  static_assert(StoresInFlight >= 1 && StoresInFlight < Stages,
                "gpucomm::p2p_staging: 1 to Stages - 1 stores in flight (a stage must be left to load into)");
  static constexpr std::size_t stage_bytes = StageBytes;
  static constexpr unsigned stages = Stages;
  static constexpr unsigned stores_in_flight = StoresInFlight;
  static constexpr std::size_t alignment = 128;
  static constexpr std::size_t size = StageBytes * Stages + sizeof(std::uint64_t) * Stages;

  alignas(alignment) unsigned char stage[Stages][StageBytes];
  std::uint64_t full[Stages];  ///< the stages' mbarriers: a stage's bulk load has landed
};
static_assert(scratch_storage<p2p_staging<256, 2>>, "p2p_staging is per-group scratch like any other");

/// Group g with P2PCopy staging. Every thread of g passes the same storage, and no other group uses
/// it while g's call runs.
template <group G, class Staging>
class staged_group : public detail::group_wrapper<G> {
 public:
  using staging_type = Staging;
  GPUCOMM_HD staged_group(G const& g, Staging& storage) : detail::group_wrapper<G>(g), storage_(&storage) {}

  /// The stages.
  GPUCOMM_HD Staging& staging() const { return *storage_; }

 private:
  Staging* storage_;
};

/// g with `storage` as its P2PCopy staging (a p2p_staging, e.g. `P2PCopy::staging`).
template <group G, std::size_t StageBytes, unsigned Stages, unsigned StoresInFlight>
GPUCOMM_HD staged_group<G, p2p_staging<StageBytes, Stages, StoresInFlight>> with_staging(
    G const& g, p2p_staging<StageBytes, Stages, StoresInFlight>& storage) {
  return {g, storage};
}

#if defined(__CUDACC__)
/// The `slot`-th staging of type `Staging` in the calling kernel's dynamic shared memory, for a
/// staging larger than a static `__shared__` variable may hold (48 KiB), such as P2PCopy128K's. The
/// launch gives at least `(slot + 1) * sizeof(Staging)` bytes of dynamic shared memory, to a kernel
/// allowed that much first:
///   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
/// The kernel's own uses of its dynamic shared memory start after the stagings it takes.
template <class Staging>
__device__ GPUCOMM_FORCEINLINE Staging& dynamic_staging(unsigned slot = 0) {
  static_assert(alignof(Staging) <= 128, "gpucomm::dynamic_staging: the dynamic shared memory is 128-byte aligned");
  extern __shared__ __align__(128) unsigned char gpucomm_dynamic_shared[];
  return reinterpret_cast<Staging*>(gpucomm_dynamic_shared)[slot];
}
#endif

namespace detail {
template <class G, class S>
inline constexpr bool is_staged_group_v<staged_group<G, S>> = true;
}  // namespace detail

}  // namespace gpucomm
