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
// return dst is complete and may be read by every thread of g, and src may be reused. Algorithm: on
// transports that store to every member, up to packet_limit bytes per member pair
// (launch_shape.hpp) in packet epochs (detail/packets.cuh); otherwise chunk by chunk, every member
// sends each other member's chunk into that member's workspace, then folds what it received with
// its own (detail/steps.cuh: channel steps on transports that store to every member, rounds of
// put_signal elsewhere).

#include <cstddef>

#include "detail/packets.cuh"
#include "detail/steps.cuh"
#include "reduction.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// reduce_scatter in protocol P (data_protocol's choice, the same at every member).
template <collective_protocol P, class Op, class Tr, group G, class T>
__device__ void reduce_scatter_as(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                                  std::size_t n, collective_entry entry) {
  round_context const x = enter_collective(c, g, ws, "reduce_scatter");
  auto const source = [&](int r) { return src + static_cast<std::size_t>(r) * n; };
  if constexpr (P == collective_protocol::packets) {
    if constexpr (reduction_takes<Op, T>)  // else require_reduction has said why
      exchange_packets<packet_mode::fold, false, Op>(c, g, x, dst, 0, source, n, entry);
  } else {
    fold_blocks<Op>(c, g, x, dst, n, source);
  }
  leave_collective(g, x);
}

}  // namespace detail

template <class Tr, group G, class T, class Op>
__device__ void reduce_scatter(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                               std::size_t n, Op) {
  require_reduction<Op, T>();
  detail::with_data_protocol<Tr, T>(n, ws.members.size, [&]<detail::collective_protocol P>() {
    detail::reduce_scatter_as<P, Op>(c, g, ws, dst, src, n, detail::collective_entry::device_call);
  });
}

#endif  // __CUDACC__

}  // namespace gpucomm
