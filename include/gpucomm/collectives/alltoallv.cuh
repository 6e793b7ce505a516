#pragma once
// alltoallv: every member sends each member a count of its own choosing, computed on the device
// (MoE dispatch and combine); each member learns how much it received from whom.
//
//   // send_counts[r], send_offsets[r]: elements for team rank r, at src + send_offsets[r]
//   gpucomm::alltoallv(c, block, ws, dst, recv_counts, dst_capacity, src, send_counts, send_offsets);
//   // recv_counts[s]: elements from team rank s; they sit at dst + (recv_counts[0] + ... + recv_counts[s-1])
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)). send_counts and send_offsets (team size entries each) are read by every thread of
// g and may live in shared, local or global memory; the counts need not agree with anything at
// the other members. The received data is packed in dst in team-rank order, this member's own
// block included; recv_counts (team size entries) is written. If the total exceeds dst_capacity
// the kernel traps with a message, in every build: nothing is written past dst + dst_capacity.
// src and dst are the caller's local memory and must not overlap (symmetric-heap memory on
// transports that take sources only from the heap). The workspace's blocks must hold 16 bytes per
// member (any workspace of 128-byte blocks up to 8 members; the default 64 KiB up to 4096).
//
// Algorithm: one round in which every member sends every other member its count and its largest
// count (so every member knows the counts it receives and how many data rounds there are), then
// data rounds as alltoall's, each pair's share cut into blocks (detail/rounds.cuh). The counts
// round stages its messages in this member's own block of its workspace slot, which no other
// member writes.

#include <cstddef>
#include <cstdint>

#include "detail/rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

template <class Tr, group G, class T>
__device__ void alltoallv(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst,
                          std::size_t* recv_counts, std::size_t dst_capacity, T const* src,
                          std::size_t const* send_counts, std::size_t const* send_offsets) {
  detail::round_context const x = detail::enter_collective(c, g, ws, "alltoallv");
  if (ws.block_bytes < 16 * static_cast<std::size_t>(x.size))
    detail::device_misuse("alltoallv", "the workspace's blocks hold less than 16 bytes per team member");
  // The counts round: message for rank r = {send_counts[r], largest send count}.
  std::size_t my_largest = 0;
  for (int r = 0; r < x.size; ++r) my_largest = send_counts[r] > my_largest ? send_counts[r] : my_largest;
  std::uint64_t const next = x.words[collective_workspace::round_word] + 1;
  auto* const stage = x.block<std::uint64_t>(next, x.rank);
  for (int r = static_cast<int>(group_rank(g)); r < x.size; r += static_cast<int>(group_size(g))) {
    stage[2 * r] = send_counts[r];
    stage[2 * r + 1] = my_largest;
  }
  std::uint64_t const counts_round = detail::run_round<std::uint64_t>(
      c, g, x,
      [&](int r) {
        return detail::round_send<std::uint64_t>{stage + 2 * r, 2};
      },
      [](int) { return true; });
  std::size_t largest = my_largest, total = 0;
  for (int s = 0; s < x.size; ++s) {
    std::uint64_t const* const message = x.block<std::uint64_t>(counts_round, s);
    std::size_t const count = s == x.rank ? send_counts[s] : message[0];
    if (s != x.rank && message[1] > largest) largest = message[1];
    total += count;
    if (group_rank(g) == 0) recv_counts[s] = count;
  }
  if (total > dst_capacity)
    detail::device_misuse("alltoallv", "the elements received exceed dst_capacity; nothing was written");
  group_sync(g);
  auto recv_offset = [&](int s) {
    std::size_t at = 0;
    for (int q = 0; q < s; ++q) at += recv_counts[q];
    return at;
  };
  // Own block: a local copy of this part's share.
  detail::element_range const own = detail::part_range(send_counts[x.rank], x.part, x.ws.parts);
  detail::copy_elements(g, dst + recv_offset(x.rank) + own.lo, src + send_offsets[x.rank] + own.lo, own.size());
  // Data rounds: every pair's share is at most ceil(largest / parts), so this many rounds suffice
  // for every member, and every member computes the same number.
  std::size_t const per_round = x.block_elements<T>();
  std::size_t const longest_share =
      (largest + static_cast<std::size_t>(x.ws.parts) - 1) / static_cast<std::size_t>(x.ws.parts);
  for (std::size_t j = 0; j < detail::rounds_for(longest_share, per_round); ++j) {
    std::uint64_t const round = detail::run_round<T>(
        c, g, x,
        [&](int r) {
          detail::element_range const share = detail::part_range(send_counts[r], x.part, x.ws.parts);
          detail::element_range const chunk = detail::chunk_of(share.size(), j, per_round);
          return detail::round_send<T>{src + send_offsets[r] + share.lo + chunk.lo, chunk.size()};
        },
        [&](int s) {
          return detail::chunk_of(detail::part_range(recv_counts[s], x.part, x.ws.parts).size(), j, per_round).size() >
                 0;
        });
    for (int s = 0; s < x.size; ++s) {
      if (s == x.rank) continue;
      detail::element_range const share = detail::part_range(recv_counts[s], x.part, x.ws.parts);
      detail::element_range const chunk = detail::chunk_of(share.size(), j, per_round);
      detail::copy_elements(g, dst + recv_offset(s) + share.lo + chunk.lo, x.block<T>(round, s), chunk.size());
    }
  }
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
