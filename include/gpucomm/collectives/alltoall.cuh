#pragma once
// alltoall: every member sends n elements to every member; team rank s's src[r * n, (r + 1) * n)
// arrives at rank r's dst[s * n, (s + 1) * n).
//
//   gpucomm::alltoall(c, block, ws, dst, src, n);   // dst, src: team size * n elements
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n. src and dst are the caller's local memory and must not
// overlap (symmetric-heap memory on transports that take sources only from the heap). On return
// dst is complete and may be read by every thread of g, and src may be reused. Algorithm: chunk
// by chunk, every member sends each other member's chunk into that member's workspace, then copies
// what it received (detail/steps.cuh: channel steps on transports that store to every member,
// rounds of put_signal elsewhere).

#include <cstddef>

#include "detail/steps.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T>
__device__ void alltoall(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                         std::size_t n) {
  detail::round_context const x = detail::enter_collective(c, g, ws, "alltoall");
  detail::exchange_blocks(c, g, x, dst, n, [&](int r) { return src + static_cast<std::size_t>(r) * n; });
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
