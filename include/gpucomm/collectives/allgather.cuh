#pragma once
// allgather (OpenSHMEM's fcollect): every member contributes n elements; afterwards every
// member's dst holds all of them, team rank r's at dst[r * n, (r + 1) * n).
//
//   __global__ void k(gpucomm::comm<NVLinkStore> c, gpucomm::collective_workspace ws, float* dst,
//                     float const* src, std::size_t n) {
//     gpucomm::allgather(c, cooperative_groups::this_thread_block(), ws, dst, src, n);
//   }
//
// Called by one group per member PE (or, in the multi-CTA form, by one group per part at every
// member, each passing ws.part(k)), all with the same n. src and dst are the caller's local memory
// (symmetric-heap memory on transports that take sources only from the heap); src may be
// dst + rank * n (in place). On return dst is complete and may be read by every thread of g, and
// src may be reused. Algorithm: on transports that store to every member, up to packet_limit bytes
// of src (launch_shape.hpp) in packet epochs (detail/packets.cuh: 16-byte lines of data and flag
// stored straight into every other member's workspace, one one-way trip); otherwise chunk by chunk,
// every member sends its chunk into every other member's workspace, then copies what it received
// (detail/steps.cuh: channel steps on transports that store to every member, rounds of put_signal
// elsewhere).

#include <cstddef>

#include "detail/packets.cuh"
#include "detail/steps.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// allgather in protocol P (data_protocol's choice, the same at every member).
template <collective_protocol P, class Tr, group G, class T>
__device__ void allgather_as(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                             std::size_t n, collective_entry entry) {
  round_context const x = enter_collective(c, g, ws, "allgather");
  auto const source = [&](int) { return src; };
  if constexpr (P == collective_protocol::packets)
    exchange_packets<packet_mode::copy, true, void>(c, g, x, dst, n, source, n, entry);
  else
    exchange_blocks(c, g, x, dst, n, source);
  leave_collective(g, x);
}

}  // namespace detail

template <class Tr, group G, class T>
__device__ void allgather(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                          std::size_t n) {
  detail::with_data_protocol<Tr, T>(n, ws.members.size, [&]<detail::collective_protocol P>() {
    detail::allgather_as<P>(c, g, ws, dst, src, n, detail::collective_entry::device_call);
  });
}

#endif  // __CUDACC__

}  // namespace gpucomm
