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
// Algorithm: every member first sends every other member its count and its largest count (so
// every member knows the counts it receives and how many data steps there are), then the data go
// as alltoall's, each pair's share (of each part) cut into chunks:
//   - on transports that store to every member (NVLinkStore, P2PCopy): the counts as one packet
//     epoch (16-byte lines with the flag in the data, detail/packets.cuh: one one-way trip, no
//     fence), the data in channel steps (detail/channels.cuh: pipelined, chunks of the
//     workspace's channel_block_bytes); a call from a kernel costs one leader fence for the packet
//     slot's reuse;
//   - elsewhere: a round of put_signal for the counts, then rounds of block_bytes chunks
//     (detail/rounds.cuh).
// The counts' messages are staged in this member's own blocks of its round slots, which no other
// member writes.

#include <cstddef>
#include <cstdint>

#include "detail/channels.cuh"
#include "detail/packets.cuh"
#include "detail/rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// What each member tells each other member r before alltoallv's data: its count for r, and its
/// largest count for anyone (16 bytes: one packet element of two lines).
struct alignas(16) alltoallv_counts {
  std::uint64_t count;
  std::uint64_t largest;
};

/// Every member's message for this member over the packet protocol, as word pairs {count,
/// largest}: in[2 s], in[2 s + 1] from team rank s (this member's own for s = rank), from
/// stage[2 r], stage[2 r + 1], this member's message for r. One packet epoch: no fence but the
/// leader's for the slot's reuse (a call from a kernel, detail/packets.cuh).
template <class Tr, group G>
__device__ void exchange_counts_in_packets(comm<Tr> const& c, G const& g, round_context const& x,
                                           std::uint64_t const* stage, std::uint64_t* in) {
  std::uint64_t const epoch = next_epochs(g, x.words + collective_workspace::packet_round_word, 1);
  order_packet_epoch(g);
  auto const* const messages = reinterpret_cast<alltoallv_counts const*>(stage);
  packet_round<packet_mode::copy, false, reduction::sum>(
      c, g, x, epoch, reinterpret_cast<alltoallv_counts*>(in), 1, [&](int r) { return messages + r; }, 1, 0, 1, true,
      identity_epilogue{});
  group_sync(g);
}

}  // namespace detail

template <class Tr, group G, class T>
__device__ void alltoallv(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst,
                          std::size_t* recv_counts, std::size_t dst_capacity, T const* src,
                          std::size_t const* send_counts, std::size_t const* send_offsets) {
  detail::round_context const x = detail::enter_collective(c, g, ws, "alltoallv");
  if (ws.block_bytes < sizeof(detail::alltoallv_counts) * static_cast<std::size_t>(x.size))
    detail::device_misuse("alltoallv", "the workspace's blocks hold less than 16 bytes per team member");
  // The counts: the message for rank r is {send_counts[r], largest send count}, staged in this
  // member's own block of round slot 0, received into its own block of round slot 1.
  std::size_t my_largest = 0;
  for (int r = 0; r < x.size; ++r) my_largest = send_counts[r] > my_largest ? send_counts[r] : my_largest;
  auto* const stage = x.block<std::uint64_t>(0, x.rank);
  auto* const in = x.block<std::uint64_t>(1, x.rank);
  for (int r = static_cast<int>(group_rank(g)); r < x.size; r += static_cast<int>(group_size(g))) {
    stage[2 * r] = send_counts[r];
    stage[2 * r + 1] = my_largest;
  }
  group_sync(g);
  if constexpr (detail::load_stores_everywhere<Tr>) {
    detail::exchange_counts_in_packets(c, g, x, stage, in);
  } else {
    std::uint64_t const counts_round = detail::run_round<std::uint64_t>(
        c, g, x,
        [&](int r) {
          return detail::round_send<std::uint64_t>{stage + 2 * r, 2};
        },
        [](int) { return true; });
    for (int s = static_cast<int>(group_rank(g)); s < x.size; s += static_cast<int>(group_size(g))) {
      std::uint64_t const* const from = s == x.rank ? stage + 2 * s : x.block<std::uint64_t>(counts_round, s);
      in[2 * s] = from[0];
      in[2 * s + 1] = from[1];
    }
    group_sync(g);
  }
  std::size_t largest = 0, total = 0;
  for (int s = 0; s < x.size; ++s) {
    std::size_t const count = in[2 * s];
    largest = in[2 * s + 1] > largest ? in[2 * s + 1] : largest;
    total += count;
    if (group_rank(g) == 0) recv_counts[s] = count;
  }
  if (total > dst_capacity)
    detail::device_misuse("alltoallv", "the elements received exceed dst_capacity; nothing was written");
  auto count_from = [&](int s) -> std::size_t { return in[2 * s]; };
  auto recv_offset = [&](int s) {
    std::size_t at = 0;
    for (int q = 0; q < s; ++q) at += count_from(q);
    return at;
  };
  // Own block: a local copy of this part's share.
  detail::element_range const own = detail::part_range(send_counts[x.rank], x.part, x.ws.parts);
  detail::copy_elements(g, dst + recv_offset(x.rank) + own.lo, src + send_offsets[x.rank] + own.lo, own.size());
  // Data: every pair's share is at most ceil(largest / parts), so this many chunks suffice for
  // every member, and every member computes the same number.
  std::size_t const longest_share =
      (largest + static_cast<std::size_t>(x.ws.parts) - 1) / static_cast<std::size_t>(x.ws.parts);
  auto chunk_to = [&](int r, std::size_t j, std::size_t per_chunk) {
    detail::element_range const share = detail::part_range(send_counts[r], x.part, x.ws.parts);
    detail::element_range const chunk = detail::chunk_of(share.size(), j, per_chunk);
    return detail::round_send<T>{src + send_offsets[r] + share.lo + chunk.lo, chunk.size()};
  };
  auto chunk_from = [&](int s, std::size_t j, std::size_t per_chunk) {
    detail::element_range const share = detail::part_range(count_from(s), x.part, x.ws.parts);
    detail::element_range const chunk = detail::chunk_of(share.size(), j, per_chunk);
    return detail::element_range{recv_offset(s) + share.lo + chunk.lo, recv_offset(s) + share.lo + chunk.hi};
  };
  if constexpr (detail::load_stores_everywhere<Tr>) {
    std::size_t const per_step = x.channel_elements<T>();
    detail::run_channel<T>(
        c, g, x, detail::rounds_for(longest_share, per_step),
        [&](std::size_t t, int r) { return chunk_to(r, t, per_step); },
        [&](std::size_t t, std::uint64_t step) {
          for (int s = 0; s < x.size; ++s) {
            if (s == x.rank) continue;
            detail::element_range const at = chunk_from(s, t, per_step);
            detail::copy_elements<detail::copy_depth::deep>(
                g, dst + at.lo, reinterpret_cast<T const*>(x.ws.channel_block(x.part, step, s, x.rank)), at.size());
          }
        },
        [](std::size_t) { return false; });
  } else {
    std::size_t const per_round = x.block_elements<T>();
    for (std::size_t j = 0; j < detail::rounds_for(longest_share, per_round); ++j) {
      std::uint64_t const round = detail::run_round<T>(
          c, g, x, [&](int r) { return chunk_to(r, j, per_round); },
          [&](int s) { return chunk_from(s, j, per_round).size() > 0; });
      for (int s = 0; s < x.size; ++s) {
        if (s == x.rank) continue;
        detail::element_range const at = chunk_from(s, j, per_round);
        detail::copy_elements(g, dst + at.lo, x.block<T>(round, s), at.size());
      }
    }
  }
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
