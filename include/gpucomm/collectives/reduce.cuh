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
  detail::check_root(x, root, "reduce");
  bool const is_root = x.rank == root;
  detail::for_each_chunk<T>(x, n, [&](std::size_t at, std::size_t count) {
    std::uint64_t const round = detail::run_round<T>(
        c, g, x,
        [&](int r) {
          return r == root ? detail::round_send<T>{src + at, count} : detail::round_send<T>{};
        },
        [&](int) { return is_root; });
    if (is_root)
      detail::fold_ranks<Op>(g, dst + at, count, x.size,
                             [&](int r) { return r == x.rank ? src + at : x.block<T>(round, r); });
  });
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
