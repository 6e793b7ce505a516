#pragma once
// reduce: the element-wise reduction of every member's n elements of src, in team rank `root`'s
// dst.
//
//   gpucomm::reduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{}, /*root=*/0);
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n, operation and root. dst is written at the root only (others
// may pass nullptr) and may equal src there. Operations, element types and the folding order:
// reduction.cuh. src and dst are the caller's local memory (symmetric-heap memory on transports
// that take sources only from the heap). On return the root's dst is complete and may be read by
// every thread of g, and src may be reused. Algorithm: each round every other member puts its
// chunk into the root's workspace with one put_signal; the root folds them with its own
// (detail/rounds.cuh).

#include <cstddef>

#include "detail/rounds.cuh"
#include "reduction.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T, class Op>
__device__ void reduce(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                       std::size_t n, Op, int root) {
  require_reduction<Op, T>();
  detail::round_context const x = detail::enter_collective(c, g, ws, "reduce");
#if GPUCOMM_DEBUG
  if (root < 0 || root >= x.size) detail::device_misuse("reduce", "root is not a team rank");
#endif
  detail::element_range const mine = detail::part_range(n, x.part, ws.parts);
  std::size_t const per_round = x.block_elements<T>();
  bool const is_root = x.rank == root;
  for (std::size_t j = 0; j < detail::rounds_for(mine.size(), per_round); ++j) {
    detail::element_range const chunk = detail::chunk_of(mine.size(), j, per_round);
    std::size_t const at = mine.lo + chunk.lo;
    std::uint64_t const round = detail::run_round<T>(
        c, g, x,
        [&](int r) {
          return r == root ? detail::round_send<T>{src + at, chunk.size()} : detail::round_send<T>{};
        },
        [&](int) { return is_root; });
    if (is_root)
      detail::fold_ranks<Op>(g, dst + at, chunk.size(), x.size,
                             [&](int r) { return r == x.rank ? src + at : x.block<T>(round, r); });
  }
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
