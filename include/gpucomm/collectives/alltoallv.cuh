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
// member (any workspace of 128-byte blocks up to 8 members; the default 16 KiB up to 1024).
//
// Algorithm:
//   - on transports that store to every member (NVLinkStore, P2PCopy): one packet epoch (16-byte
//     lines with the flag in the data, detail/packets.cuh: one one-way trip, no fence) carries to
//     every other member this member's count for it and its largest count that goes in channel
//     steps, and, for each pair small enough (alltoallv_inline: at most packet_limit(team size)
//     bytes, and the part's share within one packet block with the counts), this part's share of
//     the pair's elements as well. A call whose pairs are all that small is that one epoch. The
//     data of larger pairs follow in channel steps (detail/channels.cuh: pipelined, chunks of the
//     workspace's channel_block_bytes), as many as the largest such pair needs. A call costs one
//     leader fence for the packet slot's reuse (detail/packets.cuh).
//   - elsewhere: every member first sends every other member its count and its largest count in a
//     round of put_signal, then the data go as alltoall's, each pair's share (of each part) cut into
//     rounds of block_bytes chunks (detail/rounds.cuh). The counts' messages are staged in this
//     member's own blocks of its round slots, which no other member writes.
// Every member learns every count it receives before it writes dst, so the capacity check comes
// first; every member computes the same number of data steps.

#include <cstddef>
#include <cstdint>

#include "detail/channels.cuh"
#include "detail/packets.cuh"
#include "detail/rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// Lines at the start of each member's block of alltoallv's packet epoch: its count and its
/// largest count that goes in steps.
inline constexpr std::size_t alltoallv_count_lines = 2;

/// Whether alltoallv sends a pair's `count` elements of T in its packet epoch rather than in
/// channel steps, on a team of `members`, with the workspace's `parts` and `block_bytes` (the same
/// at the sender and the receiver, which decide it from the count alone): elements of a packet
/// element type, at most packet_limit(members) bytes, and every part's share (at most
/// ceil(count / parts) elements) in one packet block after the two lines of the counts.
template <class T>
GPUCOMM_HD constexpr bool alltoallv_inline(std::size_t count, int members, int parts, std::size_t block_bytes) {
  if constexpr (!packet_element<T>) {
    return false;
  } else {
    using U = packet_unit<T>;
    std::size_t const share = (count + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts);
    std::size_t const lines = alltoallv_count_lines + (share + U::elements - 1) / U::elements * U::lines;
    return count * sizeof(T) <= packet_limit(members) && lines * sizeof(packet_line) <= block_bytes;
  }
}

/// The packet epoch of alltoallv on a transport that stores to every member (top of this header):
/// into its block of every other member r's packet slot, this member's count for r (line 0), its
/// largest count that goes in channel steps, `channel_largest` (line 1), and this part's share of
/// the pair's elements where alltoallv_inline (lines 2 on, in units). Receives every member's two
/// counts into in[2 s], in[2 s + 1] (this member's own included); the inline shares stay in the
/// slot for alltoallv_receive_inline. The epoch's slot is free (order_packet_epoch).
template <class T, class Tr, group G>
__device__ void alltoallv_send_packets(comm<Tr> const& c, G const& g, round_context const& x, std::uint64_t epoch,
                                       T const* src, std::size_t const* send_counts, std::size_t const* send_offsets,
                                       std::size_t channel_largest, std::uint64_t* in) {
  std::uint32_t const flag = packet_flag(epoch);
  std::size_t const gs = group_size(g);
  std::size_t const me = group_rank(g);
  auto* const own_block = reinterpret_cast<packet_line*>(x.ws.packet_block(x.part, epoch, x.rank));
  for (int k = 1; k < x.size; ++k) {
    int const r = x.peer_after(k);
    packet_line* const to = c.remote(sym_ptr<packet_line>(own_block), x.ws.members.pe_of(r));
    std::size_t const count = send_counts[r];
    if (me == static_cast<std::size_t>(k - 1) % gs) {
      store_line(to, count, flag);
      store_line(to + 1, channel_largest, flag);
    }
    if constexpr (packet_element<T>) {
      if (!alltoallv_inline<T>(count, x.size, x.ws.parts, x.ws.block_bytes)) continue;
      using U = packet_unit<T>;
      element_range const share = part_range(count, x.part, x.ws.parts);
      T const* const from = src + send_offsets[r] + share.lo;
      bool const aligned = (reinterpret_cast<std::uintptr_t>(from) & 7u) == 0;
      std::size_t const units = (share.size() + U::elements - 1) / U::elements;
      for (std::size_t u = me; u < units; u += gs) {
        std::size_t const at = u * U::elements;
        U const unit = load_unit(from + at, share.size() - at < U::elements ? share.size() - at : U::elements, aligned);
#pragma unroll
        for (std::size_t p = 0; p < U::lines; ++p)
          store_line(to + alltoallv_count_lines + u * U::lines + p, unit.words[p], flag);
      }
    }
  }
  // Every member's counts: polled by one thread per member.
  for (int s = static_cast<int>(me); s < x.size; s += static_cast<int>(gs)) {
    if (s == x.rank) {
      in[2 * s] = send_counts[s];
      in[2 * s + 1] = channel_largest;
      continue;
    }
    auto const* const block = reinterpret_cast<packet_line const*>(x.ws.packet_block(x.part, epoch, s));
    line_halves count, largest;
    spin_until(
        [&] {
          if (!count.shows(flag)) count = load_line(block);
          if (!largest.shows(flag)) largest = load_line(block + 1);
          return count.shows(flag) && largest.shows(flag);
        },
        {"alltoallv counts", reinterpret_cast<std::uint64_t const*>(block), "flag (high 32 bits) ==", flag,
         x.ws.members.pe_of(s)},
        x.header);
    in[2 * s] = count.data();
    in[2 * s + 1] = largest.data();
  }
  group_sync(g);
}

/// The inline shares of alltoallv's packet epoch (alltoallv_send_packets): from every other member
/// s whose count for this member, count_from(s), goes inline, this part's share of it into
/// dst + offset_from(s).
template <class T, class Tr, group G, class CountFrom, class OffsetFrom>
__device__ void alltoallv_receive_inline(G const& g, round_context const& x, std::uint64_t epoch, T* dst,
                                         CountFrom&& count_from, OffsetFrom&& offset_from) {
  if constexpr (packet_element<T>) {
    using U = packet_unit<T>;
    std::uint32_t const flag = packet_flag(epoch);
    for (int k = 1; k < x.size; ++k) {
      int const s = x.peer_after(k);
      std::size_t const count = count_from(s);
      if (!alltoallv_inline<T>(count, x.size, x.ws.parts, x.ws.block_bytes)) continue;
      element_range const share = part_range(count, x.part, x.ws.parts);
      T* const to = dst + offset_from(s) + share.lo;
      bool const aligned = (reinterpret_cast<std::uintptr_t>(to) & 7u) == 0;
      auto const* const block =
          reinterpret_cast<packet_line const*>(x.ws.packet_block(x.part, epoch, s)) + alltoallv_count_lines;
      std::size_t const units = (share.size() + U::elements - 1) / U::elements;
      for (std::size_t u = group_rank(g); u < units; u += group_size(g)) {
        line_halves v[U::lines];
        auto arrived = [&] {
          bool all = true;
#pragma unroll
          for (std::size_t p = 0; p < U::lines; ++p) {
            if (!v[p].shows(flag)) v[p] = load_line(block + u * U::lines + p);
            all = all && v[p].shows(flag);
          }
          return all;
        };
        spin_until(arrived,
                   {"alltoallv packets", reinterpret_cast<std::uint64_t const*>(block + u * U::lines),
                    "flag (high 32 bits) ==", flag, x.ws.members.pe_of(s)},
                   x.header);
        U unit;
#pragma unroll
        for (std::size_t p = 0; p < U::lines; ++p) unit.words[p] = v[p].data();
        std::size_t const at = u * U::elements;
        store_unit(to + at, unit, share.size() - at, aligned);
      }
    }
  } else {
    (void)g, (void)x, (void)epoch, (void)dst, (void)count_from, (void)offset_from;
  }
}

/// alltoallv (below), entered as `entry` says: a host launcher's kernel (collective_entry::
/// kernel_start) needs no fence before its packet epoch, the kernel boundary orders the slot's reuse.
template <class Tr, group G, class T>
__device__ void alltoallv_as(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst,
                             std::size_t* recv_counts, std::size_t dst_capacity, T const* src,
                             std::size_t const* send_counts, std::size_t const* send_offsets,
                             [[maybe_unused]] collective_entry entry) {
  round_context const x = enter_collective(c, g, ws, "alltoallv");
  if (ws.block_bytes < 16 * static_cast<std::size_t>(x.size))
    device_misuse("alltoallv", "the workspace's blocks hold less than 16 bytes per team member");
  constexpr bool packets = load_stores_everywhere<Tr>;
  // Whether a pair's count goes in channel steps or rounds (not in the packet epoch).
  auto stepped = [&](std::size_t count) {
    return !packets || !alltoallv_inline<T>(count, x.size, x.ws.parts, x.ws.block_bytes);
  };
  // The counts: from every member s, {its count for this member, its largest count for a peer that
  // goes in steps} into in[2 s], in[2 s + 1], a block of this member's own round slot 1.
  std::size_t my_largest = 0;
  for (int r = 0; r < x.size; ++r)
    if (r != x.rank && stepped(send_counts[r]) && send_counts[r] > my_largest) my_largest = send_counts[r];
  auto* const in = x.block<std::uint64_t>(1, x.rank);
  [[maybe_unused]] std::uint64_t epoch = 0;
  if constexpr (packets) {
    epoch = next_epochs(g, x.words + collective_workspace::packet_round_word, 1);
    if (entry == collective_entry::device_call) order_packet_epoch(g);
    alltoallv_send_packets(c, g, x, epoch, src, send_counts, send_offsets, my_largest, in);
  } else {
    // Staged in this member's own block of round slot 0.
    auto* const stage = x.block<std::uint64_t>(0, x.rank);
    for (int r = static_cast<int>(group_rank(g)); r < x.size; r += static_cast<int>(group_size(g))) {
      stage[2 * r] = send_counts[r];
      stage[2 * r + 1] = my_largest;
    }
    group_sync(g);
    std::uint64_t const counts_round = run_round<std::uint64_t>(
        c, g, x,
        [&](int r) {
          return round_send<std::uint64_t>{stage + 2 * r, 2};
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
    device_misuse("alltoallv", "the elements received exceed dst_capacity; nothing was written");
  auto count_from = [&](int s) -> std::size_t { return in[2 * s]; };
  auto recv_offset = [&](int s) {
    std::size_t at = 0;
    for (int q = 0; q < s; ++q) at += count_from(q);
    return at;
  };
  // Own block: a local copy of this part's share.
  element_range const own = part_range(send_counts[x.rank], x.part, x.ws.parts);
  copy_elements(g, dst + recv_offset(x.rank) + own.lo, src + send_offsets[x.rank] + own.lo, own.size());
  if constexpr (packets) alltoallv_receive_inline<T, Tr>(g, x, epoch, dst, count_from, recv_offset);
  // Data in steps: every stepped pair's share is at most ceil(largest / parts), so this many chunks
  // suffice for every member, and every member computes the same number (none when no pair steps).
  std::size_t const longest_share =
      (largest + static_cast<std::size_t>(x.ws.parts) - 1) / static_cast<std::size_t>(x.ws.parts);
  auto chunk_to = [&](int r, std::size_t j, std::size_t per_chunk) {
    if (!stepped(send_counts[r])) return round_send<T>{};
    element_range const share = part_range(send_counts[r], x.part, x.ws.parts);
    element_range const chunk = chunk_of(share.size(), j, per_chunk);
    return round_send<T>{src + send_offsets[r] + share.lo + chunk.lo, chunk.size()};
  };
  auto chunk_from = [&](int s, std::size_t j, std::size_t per_chunk) {
    if (!stepped(count_from(s))) return element_range{};
    element_range const share = part_range(count_from(s), x.part, x.ws.parts);
    element_range const chunk = chunk_of(share.size(), j, per_chunk);
    return element_range{recv_offset(s) + share.lo + chunk.lo, recv_offset(s) + share.lo + chunk.hi};
  };
  if constexpr (packets) {
    std::size_t const per_step = x.channel_elements<T>();
    run_channel<T>(
        c, g, x, rounds_for(longest_share, per_step), [&](std::size_t t, int r) { return chunk_to(r, t, per_step); },
        [&](std::size_t t, std::uint64_t step) {
          for (int s = 0; s < x.size; ++s) {
            if (s == x.rank) continue;
            element_range const at = chunk_from(s, t, per_step);
            copy_elements<copy_depth::deep>(
                g, dst + at.lo, reinterpret_cast<T const*>(x.ws.channel_block(x.part, step, s, x.rank)), at.size());
          }
        },
        [](std::size_t) { return false; });
  } else {
    std::size_t const per_round = x.block_elements<T>();
    for (std::size_t j = 0; j < rounds_for(longest_share, per_round); ++j) {
      std::uint64_t const round = run_round<T>(
          c, g, x, [&](int r) { return chunk_to(r, j, per_round); },
          [&](int s) { return chunk_from(s, j, per_round).size() > 0; });
      for (int s = 0; s < x.size; ++s) {
        if (s == x.rank) continue;
        element_range const at = chunk_from(s, j, per_round);
        copy_elements(g, dst + at.lo, x.block<T>(round, s), at.size());
      }
    }
  }
  leave_collective(g, x);
}

}  // namespace detail

template <class Tr, group G, class T>
__device__ void alltoallv(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst,
                          std::size_t* recv_counts, std::size_t dst_capacity, T const* src,
                          std::size_t const* send_counts, std::size_t const* send_offsets) {
  detail::alltoallv_as(c, g, ws, dst, recv_counts, dst_capacity, src, send_counts, send_offsets,
                       detail::collective_entry::device_call);
}

#endif  // __CUDACC__

}  // namespace gpucomm
