#pragma once
// broadcast: team rank `root`'s n elements of src arrive in every member's dst.
//
//   gpucomm::broadcast(c, block, ws, dst, src, n, /*root=*/0);
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n and root. src is read at the root only (others may pass
// nullptr); dst may equal src at the root. src and dst are the caller's local memory
// (symmetric-heap memory on transports that take sources only from the heap). On return dst is
// complete and may be read by every thread of g, and the root's src may be reused. Algorithm:
// each round the root puts its chunk into every other member's workspace with one put_signal; the
// others signal every member and copy the chunk out (detail/rounds.cuh).

#include <cstddef>

#include "detail/rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T>
__device__ void broadcast(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                          std::size_t n, int root) {
  detail::round_context const x = detail::enter_collective(c, g, ws, "broadcast");
#if GPUCOMM_DEBUG
  if (root < 0 || root >= x.size) detail::device_misuse("broadcast", "root is not a team rank");
#endif
  detail::element_range const mine = detail::part_range(n, x.part, ws.parts);
  std::size_t const per_round = x.block_elements<T>();
  bool const is_root = x.rank == root;
  if (is_root) detail::copy_elements(g, dst + mine.lo, src + mine.lo, mine.size());
  for (std::size_t j = 0; j < detail::rounds_for(mine.size(), per_round); ++j) {
    detail::element_range const chunk = detail::chunk_of(mine.size(), j, per_round);
    std::size_t const at = mine.lo + chunk.lo;
    std::uint64_t const round = detail::run_round<T>(
        c, g, x,
        [&](int) {
          return is_root ? detail::round_send<T>{src + at, chunk.size()} : detail::round_send<T>{};
        },
        [&](int r) { return r == root; });
    if (!is_root) detail::copy_elements(g, dst + at, x.block<T>(round, root), chunk.size());
  }
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
