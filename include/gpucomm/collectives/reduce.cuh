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
// every thread of g, and src may be reused. Algorithm: chunk by chunk, every other member sends
// its chunk into the root's workspace and the root folds them with its own (detail/steps.cuh:
// channel steps on transports that store to every member, rounds of put_signal elsewhere).

#include <cstddef>

#include "detail/steps.cuh"
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
  detail::run_chunks<T>(
      c, g, x, n,
      [&](detail::element_range at, int r) {
        return r == root ? detail::round_send<T>{src + at.lo, at.size()} : detail::round_send<T>{};
      },
      [&](int) { return is_root; },
      [&](detail::element_range at, auto&& in) {
        if (is_root)
          detail::fold_ranks<Op>(g, dst + at.lo, at.size(), x.size,
                                 [&](int r) { return r == x.rank ? src + at.lo : in(r); });
      });
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
