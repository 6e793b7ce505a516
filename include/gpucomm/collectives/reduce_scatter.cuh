#pragma once
// reduce_scatter: member r's dst gets the element-wise reduction of every member's
// src[r * n, (r + 1) * n).
//
//   gpucomm::reduce_scatter(c, block, ws, dst, src, n, gpucomm::reduction::max{});
//   // src: team size * n elements, dst: n
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n and operation. dst may be src + rank * n (in place).
// Operations, element types and the folding order: reduction.cuh. src and dst are the caller's
// local memory (symmetric-heap memory on transports that take sources only from the heap). On
// return dst is complete and may be read by every thread of g, and src may be reused. Algorithm:
// chunk by chunk, every member sends each other member's chunk into that member's workspace, then
// folds what it received with its own (detail/steps.cuh: channel steps on transports that store to
// every member, rounds of put_signal elsewhere).

#include <cstddef>

#include "detail/steps.cuh"
#include "reduction.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T, class Op>
__device__ void reduce_scatter(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                               std::size_t n, Op) {
  require_reduction<Op, T>();
  detail::round_context const x = detail::enter_collective(c, g, ws, "reduce_scatter");
  detail::fold_blocks<Op>(c, g, x, dst, n, [&](int r) { return src + static_cast<std::size_t>(r) * n; });
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
