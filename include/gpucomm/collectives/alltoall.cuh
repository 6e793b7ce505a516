#pragma once
// alltoall: every member sends n elements to every member; team rank s's src[r * n, (r + 1) * n)
// arrives at rank r's dst[s * n, (s + 1) * n).
//
//   gpucomm::alltoall(c, block, ws, dst, src, n);   // dst, src: team size * n elements
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n. src and dst are the caller's local memory and must not
// overlap (symmetric-heap memory on transports that take sources only from the heap). On return
// dst is complete and may be read by every thread of g, and src may be reused. Algorithm: on
// transports that store to every member, up to packet_limit bytes per member pair
// (launch_shape.hpp) in packet epochs (detail/packets.cuh); otherwise chunk by chunk, every member
// sends each other member's chunk into that member's workspace, then copies what it received
// (detail/steps.cuh: channel steps on transports that store to every member, rounds of put_signal
// elsewhere).

#include <cstddef>

#include "detail/packets.cuh"
#include "detail/steps.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// alltoall in protocol P (data_protocol's choice, the same at every member).
template <collective_protocol P, class Tr, group G, class T>
__device__ void alltoall_as(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                            std::size_t n, collective_entry entry) {
  round_context const x = enter_collective(c, g, ws, "alltoall");
  auto const source = [&](int r) { return src + static_cast<std::size_t>(r) * n; };
  if constexpr (P == collective_protocol::packets)
    exchange_packets<packet_mode::copy, false, void>(c, g, x, dst, n, source, n, entry);
  else
    exchange_blocks(c, g, x, dst, n, source);
  leave_collective(g, x);
}

}  // namespace detail

template <class Tr, group G, class T>
__device__ void alltoall(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                         std::size_t n) {
  detail::with_data_protocol<Tr, T>(n, ws.members.size, [&]<detail::collective_protocol P>() {
    detail::alltoall_as<P>(c, g, ws, dst, src, n, detail::collective_entry::device_call);
  });
}

#endif  // __CUDACC__

}  // namespace gpucomm
