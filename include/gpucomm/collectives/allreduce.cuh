#pragma once
// allreduce: every member's dst gets the element-wise reduction of every member's n elements of
// src.
//
//   gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{});
//   gpucomm::allreduce<gpucomm::allreduce_algorithm::two_shot>(c, block, ws, dst, src, n, op);
//   gpucomm::allreduce(c, block, ws, dst, src, n, op, epilogue);   // epilogue.cuh
//
// Called by one group per member PE (or one group per part at every member, each passing
// ws.part(k)), all with the same n, operation and algorithm. dst may equal src (in place).
// Operations, element types and the folding order: reduction.cuh; every member's result is
// bitwise the same. src and dst are the caller's local memory (symmetric-heap memory on transports
// that take sources only from the heap: with two_shot, dst is a source too). On return dst is
// complete and may be read by every thread of g, and src may be reused. An epilogue
// (epilogue.cuh) replaces each reduced element by what it computes from it, as it is stored; the
// row-wise form, for epilogues that need a whole row, is allreduce_rows.cuh.
//
// Algorithms (the template argument; automatic picks by transport, size and team size):
//   packets    for transports with load/store (comm::remote: NVLinkStore) and element sizes of 1,
//              2, 4, 8 or 16 bytes: one-shot in packet epochs (detail/packets.cuh): each member
//              stores its data as 16-byte lines (8 data bytes and the epoch's flag twice) straight
//              into every other member's workspace, and polls its own for theirs: no flag word,
//              fence or quiet, one one-way trip, twice the bytes on the wire. automatic takes it up
//              to packet_limit(team size) bytes where the type allows and the transport reaches
//              every peer with load/store (NVLinkStore, P2PCopy; not route, which reaches only its
//              first leg's peers so: there packets must be asked for, on teams inside that leg, and
//              debug builds trap otherwise). A call from a kernel costs one leader fence (system
//              scope) for the slot reuse (detail/packets.cuh); the host launchers' kernels skip it.
//   one_shot   each round every member puts its chunk into every other member's workspace, and
//              every member folds all of them: one round trip, (size - 1) x the data sent per
//              member. automatic takes it up to one_shot_limit bytes, or for two members.
//   two_shot   a reduce_scatter of n / size blocks (member r folds block r), then an allgather
//              of the folded blocks: two round trips, 2 (size - 1) / size x the data per member.
//   On transports that store to every member (NVLinkStore, P2PCopy) one_shot and two_shot run in
//   channel steps (detail/channels.cuh): each member stores its chunk straight into the others'
//   workspace and releases one flag per member and step, and pushes the next chunk before it folds
//   this one, with no fence or quiet; elsewhere in rounds of put_signal (detail/rounds.cuh).
// All fold in team-rank order: every algorithm gives the same bits.

#include <cstddef>
#include <type_traits>

#include "detail/channels.cuh"
#include "detail/packets.cuh"
#include "detail/rounds.cuh"
#include "detail/steps.cuh"
#include "epilogue.cuh"
#include "reduction.cuh"

namespace gpucomm {

enum class allreduce_algorithm { automatic, packets, one_shot, two_shot };

/// automatic's limit for one_shot, in bytes of src per member.
inline constexpr std::size_t one_shot_limit = std::size_t{256} << 10;

#if defined(__CUDACC__)

namespace detail {

/// Checks a requested algorithm against the transport and type; returns whether a call with it
/// holds the packet code (requested, or automatic where packets_automatic).
template <allreduce_algorithm Algorithm, class Tr, class T>
consteval bool allreduce_holds_packets() {
  static_assert(Algorithm != allreduce_algorithm::packets || (can_load_store<Tr> && packet_element<T>),
                "gpucomm: allreduce_algorithm::packets needs a transport with load/store (comm::remote) and an element "
                "of 1, 2, 4, 8 or 16 bytes");
  return Algorithm == allreduce_algorithm::packets ||
         (Algorithm == allreduce_algorithm::automatic && packets_automatic<Tr, T>);
}

/// The algorithm a call of n elements of T on a team of `members` runs: `requested`, or for
/// automatic the choice by size and team size. Only arguments every member shares go in, so every
/// member chooses the same (the host launchers call it too, to size their launch).
template <class Tr, class T>
GPUCOMM_HD constexpr allreduce_algorithm chosen_allreduce(allreduce_algorithm requested, std::size_t n, int members) {
  if (requested != allreduce_algorithm::automatic) return requested;
  std::size_t const bytes = n * sizeof(T);
  if (packets_automatic<Tr, T> && bytes <= packet_limit(members)) return allreduce_algorithm::packets;
  return bytes <= one_shot_limit || members <= 2 ? allreduce_algorithm::one_shot : allreduce_algorithm::two_shot;
}

/// Team rank r's block of the two-shot split of [0, n): `block` elements each, the last ones
/// shorter or empty; then the part's share of it.
GPUCOMM_HD constexpr element_range two_shot_block(std::size_t n, std::size_t block, int r, int part, int parts) {
  std::size_t const lo = static_cast<std::size_t>(r) * block < n ? static_cast<std::size_t>(r) * block : n;
  std::size_t const hi = lo + block < n ? lo + block : n;
  element_range const share = part_range(hi - lo, part, parts);
  return {lo + share.lo, lo + share.hi};
}

/// The two-shot block size for n elements on `size` members, and how many chunks of `per_chunk`
/// elements the longest of the blocks' shares for `part` of `parts` takes (every member runs as many:
/// which rank has the longest depends on the part, since shares of shorter blocks are not always
/// shorter).
GPUCOMM_HD constexpr std::size_t two_shot_block_size(std::size_t n, int size) {
  return (n + static_cast<std::size_t>(size) - 1) / static_cast<std::size_t>(size);
}
GPUCOMM_HD constexpr std::size_t two_shot_chunks(std::size_t n, int size, int part, int parts, std::size_t per_chunk) {
  std::size_t const block = two_shot_block_size(n, size);
  std::size_t most = 0;
  for (int r = 0; r < size; ++r) {
    std::size_t const need = rounds_for(two_shot_block(n, block, r, part, parts).size(), per_chunk);
    most = need > most ? need : most;
  }
  return most;
}

template <class Op, class Tr, group G, class T, class Epilogue>
__device__ void allreduce_two_shot(comm<Tr> const& c, G const& g, round_context const& x, T* dst, T const* src,
                                   std::size_t n, Epilogue const& epilogue) {
  std::size_t const block = two_shot_block_size(n, x.size);
  auto range = [&](int r) { return two_shot_block(n, block, r, x.part, x.ws.parts); };
  std::size_t const per_round = x.block_elements<T>();
  std::size_t const rounds = two_shot_chunks(n, x.size, x.part, x.ws.parts, per_round);
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
    fold_ranks<Op>(
        g, dst + at, chunk.size(), x.size, [&](int r) { return r == x.rank ? src + at : x.block<T>(round, r); },
        [&](std::size_t i, T v) { return epilogue(at + i, v); });
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

/// two_shot in channel steps: steps 0 to J - 1 push each member's chunk of every other member's
/// block to it and fold this member's block; steps J to 2J - 1 push this member's folded chunks to
/// every other member and copy theirs into dst (J: chunks of the longest block share).
template <class Op, class Tr, group G, class T, class Epilogue>
__device__ void allreduce_two_shot_channels(comm<Tr> const& c, G const& g, round_context const& x, T* dst, T const* src,
                                            std::size_t n, Epilogue const& epilogue) {
  std::size_t const block = two_shot_block_size(n, x.size);
  std::size_t const per_step = x.channel_elements<T>();
  auto range = [&](int r) { return two_shot_block(n, block, r, x.part, x.ws.parts); };
  std::size_t const chunks = two_shot_chunks(n, x.size, x.part, x.ws.parts, per_step);
  // Chunk j of rank r's block share, in elements of the message.
  auto chunk = [&](int r, std::size_t j) {
    element_range const theirs = range(r);
    element_range const at = chunk_of(theirs.size(), j, per_step);
    return element_range{theirs.lo + at.lo, theirs.lo + at.hi};
  };
  run_channel<T>(
      c, g, x, 2 * chunks,
      [&](std::size_t t, int r) {
        if (t < chunks) return round_send<T>{src + chunk(r, t).lo, chunk(r, t).size()};
        element_range const folded = chunk(x.rank, t - chunks);
        return round_send<T>{dst + folded.lo, folded.size()};
      },
      [&](std::size_t t, std::uint64_t step) {
        auto block_of = [&](int r) { return reinterpret_cast<T const*>(x.ws.channel_block(x.part, step, r, x.rank)); };
        if (t < chunks) {
          element_range const at = chunk(x.rank, t);
          fold_ranks<Op>(
              g, dst + at.lo, at.size(), x.size, [&](int r) { return r == x.rank ? src + at.lo : block_of(r); },
              [&](std::size_t i, T v) { return epilogue(at.lo + i, v); });
          return;
        }
        for (int r = 0; r < x.size; ++r) {
          element_range const at = chunk(r, t - chunks);
          if (r != x.rank) copy_elements<copy_depth::deep>(g, dst + at.lo, block_of(r), at.size());
        }
      },
      // The first allgather step pushes the last folded chunk when there is one chunk.
      [&](std::size_t t) { return t == chunks && chunks == 1; });
}

/// What allreduce_chosen does besides the reduction: the epilogue of each element, the granule
/// the parts' shares are split at, and a pass `after(x)` the group makes over its part's share
/// once dst holds it (before it leaves the collective).
struct no_pass {
  __device__ void operator()(round_context const&) const {}
};
template <class Epilogue = identity_epilogue, class After = no_pass>
struct allreduce_extras {
  Epilogue epilogue{};
  std::size_t granule = 1;
  After after{};
  static constexpr bool has_after = !std::is_same_v<After, no_pass>;
};

/// allreduce with the algorithm already chosen (`chosen`, by chosen_allreduce: the same at every
/// member). Packets, Rounds: which code this instantiation holds (`chosen` is among them). A
/// granule above 1 takes packets or one_shot (two_shot splits the message by member, not by part).
template <bool Packets, bool Rounds, class Op, class Tr, group G, class T, class Extras = allreduce_extras<>>
__device__ void allreduce_chosen(comm<Tr> const& c, G const& g, collective_workspace const& ws,
                                 allreduce_algorithm chosen, T* dst, T const* src, std::size_t n,
                                 collective_entry entry, Extras const& extras = {}) {
  round_context x = enter_collective(c, g, ws, "allreduce");
  x.granule = extras.granule;
  auto leave = [&] {
    if constexpr (Extras::has_after) {
      group_sync(g);  // every thread's stores into dst before the pass
      extras.after(x);
    }
    leave_collective(g, x);
  };
  if constexpr (Packets) {
    if (chosen == allreduce_algorithm::packets) {
#if GPUCOMM_DEBUG
      if (!team_load_stores(c, x))
        device_misuse("allreduce",
                      "allreduce_algorithm::packets: a team member is not reachable with load/store from this PE "
                      "(route reaches only its first leg's peers so)");
#endif
      if constexpr (reduction_takes<Op, T>)  // else require_reduction has said why
        exchange_packets<packet_mode::fold, true, Op>(
            c, g, x, dst, 0, [&](int) { return src; }, n, entry, extras.epilogue);
      leave();
      return;
    }
  }
  if constexpr (Rounds) {
    if (chosen == allreduce_algorithm::one_shot) {
      fold_blocks<Op>(
          c, g, x, dst, n, [&](int) { return src; }, extras.epilogue);
    } else if constexpr (load_stores_everywhere<Tr>) {
      allreduce_two_shot_channels<Op>(c, g, x, dst, src, n, extras.epilogue);
    } else {
      allreduce_two_shot<Op>(c, g, x, dst, src, n, extras.epilogue);
    }
  }
  leave();
}

}  // namespace detail

template <allreduce_algorithm Algorithm = allreduce_algorithm::automatic, class Tr, group G, class T, class Op,
          class Epilogue = identity_epilogue>
__device__ void allreduce(comm<Tr> const& c, G const& g, collective_workspace const& ws, T* dst, T const* src,
                          std::size_t n, Op, Epilogue const& epilogue = {}) {
  require_reduction<Op, T>();
  detail::require_epilogue<Epilogue, T>();
  constexpr bool packets = detail::allreduce_holds_packets<Algorithm, Tr, T>();
  detail::allreduce_chosen<packets, Algorithm != allreduce_algorithm::packets, Op>(
      c, g, ws, detail::chosen_allreduce<Tr, T>(Algorithm, n, ws.members.size), dst, src, n,
      detail::collective_entry::device_call, detail::allreduce_extras<Epilogue>{epilogue});
}

#endif  // __CUDACC__

}  // namespace gpucomm
