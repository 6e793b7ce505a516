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
// chunk by chunk, the root sends its chunk into every other member's workspace and the others copy
// it out (detail/steps.cuh: channel steps on transports that store to every member, rounds of
// put_signal elsewhere).

#include <cstddef>

#include "detail/steps.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T>
__device__ void broadcast(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                          std::size_t n, int root) {
  detail::round_context const x = detail::enter_collective(c, g, ws, "broadcast");
  detail::check_root(x, root, "broadcast");
  bool const is_root = x.rank == root;
  if (is_root) {
    detail::element_range const mine = x.share(n);
    detail::copy_elements(g, dst + mine.lo, src + mine.lo, mine.size());
  }
  detail::run_chunks<T>(
      c, g, x, n,
      [&](detail::element_range at, int) {
        return is_root ? detail::round_send<T>{src + at.lo, at.size()} : detail::round_send<T>{};
      },
      [&](int r) { return r == root; },
      [&](detail::element_range at, auto&& in) {
        if (!is_root) detail::copy_elements(g, dst + at.lo, in(root), at.size());
      });
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
