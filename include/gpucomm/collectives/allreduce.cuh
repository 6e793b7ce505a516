#pragma once
// allreduce: every member's dst gets the element-wise reduction of every member's n elements of
// src.
//
//   gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{});
//   gpucomm::allreduce<gpucomm::allreduce_algorithm::two_shot>(c, block, ws, dst, src, n, op);
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n, operation and algorithm. dst may equal src (in place).
// Operations, element types and the folding order: reduction.cuh; every member's result is
// bitwise the same. src and dst are the caller's local memory (symmetric-heap memory on transports
// that take sources only from the heap: with two_shot, dst is a source too). On return dst is
// complete and may be read by every thread of g, and src may be reused.
//
// Algorithms (the template argument; automatic picks by transport and size):
//   packets    for transports with load/store (comm::remote: NVLinkStore) and element sizes of 1,
//              2, 4, 8 or 16 bytes: one-shot, in packet rounds (detail/packets.cuh): each member
//              stores its data, 4 bytes per 8-byte packet with the round's number, straight into
//              every other member's workspace, and polls its own for theirs: no flag, fence or
//              quiet, one one-way trip per round, twice the bytes on the wire. automatic takes it
//              up to packet_limit bytes where the type allows and the transport reaches every
//              peer with load/store (NVLinkStore, P2PCopy; not route, which reaches only its first
//              leg's peers so: there packets must be asked for, on teams inside that leg, and
//              debug builds trap otherwise).
//   one_shot   each round every member puts its chunk into every other member's workspace, and
//              every member folds all of them: one round trip, (size - 1) x the data sent per
//              member. automatic takes it up to one_shot_limit bytes, or for two members.
//   two_shot   a reduce_scatter of n / size blocks (member r folds block r), then an allgather
//              of the folded blocks: two round trips, 2 (size - 1) / size x the data per member.
// All fold in team-rank order: every algorithm gives the same bits.

#include <cstddef>

#include "detail/packets.cuh"
#include "detail/rounds.cuh"
#include "reduction.cuh"

namespace gpucomm {

enum class allreduce_algorithm { automatic, packets, one_shot, two_shot };

/// automatic's limit for one_shot, in bytes of src per member.
inline constexpr std::size_t one_shot_limit = std::size_t{256} << 10;
/// automatic's limit for packets, in bytes of src per member.
inline constexpr std::size_t packet_limit = std::size_t{64} << 10;

#if defined(__CUDACC__)

namespace detail {

/// Team rank r's block of the two-shot split of [0, n): `block` elements each, the last ones
/// shorter or empty; then the part's share of it.
GPUCOMM_HD constexpr element_range two_shot_block(std::size_t n, std::size_t block, int r, int part, int parts) {
  std::size_t const lo = static_cast<std::size_t>(r) * block < n ? static_cast<std::size_t>(r) * block : n;
  std::size_t const hi = lo + block < n ? lo + block : n;
  element_range const share = part_range(hi - lo, part, parts);
  return {lo + share.lo, lo + share.hi};
}

template <class Op, class Tr, group G, class T>
__device__ void allreduce_two_shot(comm<Tr> const& c, G const& g, round_context const& x, T* dst, T const* src,
                                   std::size_t n) {
  std::size_t const block = (n + static_cast<std::size_t>(x.size) - 1) / static_cast<std::size_t>(x.size);
  auto range = [&](int r) { return two_shot_block(n, block, r, x.part, x.ws.parts); };
  std::size_t const per_round = x.block_elements<T>();
  // Every member runs as many rounds as the longest share needs (which rank has it depends on the
  // part: shares of shorter blocks are not always shorter).
  std::size_t rounds = 0;
  for (int r = 0; r < x.size; ++r) {
    std::size_t const need = rounds_for(range(r).size(), per_round);
    rounds = need > rounds ? need : rounds;
  }
  element_range const mine = range(x.rank);
  // Reduce-scatter: each member folds its own block.
  for (std::size_t j = 0; j < rounds; ++j) {
    element_range const chunk = chunk_of(mine.size(), j, per_round);
    std::size_t const at = mine.lo + chunk.lo;
    std::uint64_t const round = run_round<T>(
        c, g, x,
        [&](int r) {
          element_range const theirs = range(r);
          element_range const part = chunk_of(theirs.size(), j, per_round);
          return round_send<T>{src + theirs.lo + part.lo, part.size()};
        },
        [&](int) { return chunk.size() > 0; });
    fold_ranks<Op>(g, dst + at, chunk.size(), x.size,
                   [&](int r) { return r == x.rank ? src + at : x.block<T>(round, r); });
  }
  // Allgather of the folded blocks.
  for (std::size_t j = 0; j < rounds; ++j) {
    element_range const chunk = chunk_of(mine.size(), j, per_round);
    std::uint64_t const round = run_round<T>(
        c, g, x,
        [&](int) {
          return round_send<T>{dst + mine.lo + chunk.lo, chunk.size()};
        },
        [&](int r) { return chunk_of(range(r).size(), j, per_round).size() > 0; });
    for (int r = 0; r < x.size; ++r) {
      if (r == x.rank) continue;
      element_range const theirs = range(r);
      element_range const part = chunk_of(theirs.size(), j, per_round);
      copy_elements(g, dst + theirs.lo + part.lo, x.block<T>(round, r), part.size());
    }
  }
}

}  // namespace detail

template <allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class Tr, group G, class T, class Op>
__device__ void allreduce(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                          std::size_t n, Op) {
  require_reduction<Op, T>();
  constexpr bool packets_possible = can_load_store<Tr> && detail::packet_element<T>;
  static_assert(Algorithm != allreduce_algorithm::packets || packets_possible,
                "gpucomm: allreduce_algorithm::packets needs a transport with load/store (comm::remote) and an element "
                "of 1, 2, 4, 8 or 16 bytes");
  detail::round_context const x = detail::enter_collective(c, g, ws, "allreduce");
  std::size_t const bytes = n * sizeof(T);
  // automatic takes packets only where every member surely makes the same choice.
  constexpr bool packets_automatic = packets_possible && detail::load_stores_everywhere<Tr>;
  allreduce_algorithm const chosen = Algorithm != allreduce_algorithm::automatic  ? Algorithm
                                     : packets_automatic && bytes <= packet_limit ? allreduce_algorithm::packets
                                     : bytes <= one_shot_limit || x.size <= 2     ? allreduce_algorithm::one_shot
                                                                                  : allreduce_algorithm::two_shot;
  if constexpr (packets_automatic || Algorithm == allreduce_algorithm::packets) {
    if (chosen == allreduce_algorithm::packets) {
#if GPUCOMM_DEBUG
      if (!detail::team_load_stores(c, x))
        detail::device_misuse(
            "allreduce",
            "allreduce_algorithm::packets: a team member is not reachable with load/store from this PE "
            "(route reaches only its first leg's peers so)");
#endif
      detail::fold_packets<Op>(c, g, x, dst, n, [&](int) { return src; });
      detail::leave_collective(g, x);
      return;
    }
  }
  if (chosen == allreduce_algorithm::one_shot)
    detail::fold_blocks<Op>(c, g, x, dst, n, [&](int) { return src; });
  else
    detail::allreduce_two_shot<Op>(c, g, x, dst, src, n);
  detail::leave_collective(g, x);
}

#endif  // __CUDACC__

}  // namespace gpucomm
