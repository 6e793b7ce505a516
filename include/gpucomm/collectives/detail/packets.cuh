#pragma once
// Packet rounds: the small-message protocol of the load/store algorithms (transports whose peers'
// memory threads can store to: comm::remote). Each 8-byte packet carries 4 data bytes and the
// packet round's number, written with one 8-byte store into the receiver's workspace; the receiver
// polls its own memory until a packet shows the round's number, and then has the data: no separate
// flag, no fence between data and flag, no quiet (NCCL's LL protocol is the same idea).
//
// Round e (packet rounds count per part, like rounds, in their own word and slots):
//   1. The group agrees on e: a call reserves the numbers of all its packet rounds at once
//      (next_epochs: one read of the part's counter, then the group's sync), and every round after
//      the first starts with a group sync. Each thread fences (acq_rel, system scope): the group's
//      reads of packet slot e & 1 in round e - 2 are ordered before this thread's stores of round
//      e into other members (the other half of that argument is in step 3).
//   2. Every member stores its packets into its own block of every other member's slot e & 1.
//   3. Every member polls the packets it needs in its own slot until each shows round e (relaxed
//      8-byte loads: data and round number arrive together, single-copy atomic). A member that has
//      all of round e - 1's packets from r knows r has entered round e - 1, so r has finished
//      reading slot e & 1 in round e - 2: every packet round here is all-to-all (each member sends
//      every other one packets, never zero of them), which is what makes two slots enough. Step 1's
//      fence, after the poll of round e - 1 and the group sync, orders that knowledge before the
//      stores of round e.
// Why the numbers are reserved per call and not read per round: rounds end with polls, not with a
// sync, so a thread that read the counter at the start of the next round could read it before the
// leader had recorded this round's number, and run a round twice with stale packets (a race the
// slow scheduling under compute-sanitizer's racecheck showed; the late-leader test pins it).
// The round number in a packet is the low 32 bits of e; a stale packet in slot e & 1 is from round
// e - 2 (or 0, never written), never equal. Nothing is reset: graph replays are safe.

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// Transports whose remote() reaches every peer of the world (NVLinkStore, P2PCopy: their worlds
/// refuse PEs they cannot reach), so every member makes the same choice without asking.
template <class Tr>
concept load_stores_everywhere = can_load_store<Tr> && !requires {
  requires Tr::partial_load_store;
};

/// Element types packet rounds move: sizes that packets of 4 bytes split or join evenly.
template <class T>
concept packet_element = sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16;

/// A unit: what one thread moves per member and round, max(4, sizeof(T)) bytes, whole elements.
template <class T>
struct packet_unit {
  static constexpr std::size_t bytes = sizeof(T) < 4 ? 4 : sizeof(T);
  static constexpr std::size_t elements = bytes / sizeof(T);
  static constexpr std::size_t packets = bytes / 4;
  alignas(16) std::uint32_t words[packets];
};

/// Elements of T one packet block carries (each packet: 4 data bytes in 8).
template <class T>
__device__ GPUCOMM_FORCEINLINE std::size_t packet_block_elements(round_context const& x) {
  return x.ws.block_bytes / 2 / packet_unit<T>::bytes * packet_unit<T>::elements;
}

/// The unit u of `count` elements at src (elements past count are zero bytes).
template <class T>
__device__ GPUCOMM_FORCEINLINE packet_unit<T> load_unit(T const* src, std::size_t count, std::size_t u) {
  packet_unit<T> unit{};
  std::size_t const first = u * packet_unit<T>::elements;
  std::size_t const have = count - first < packet_unit<T>::elements ? count - first : packet_unit<T>::elements;
  std::memcpy(unit.words, src + first, have * sizeof(T));
  return unit;
}

/// Stores unit u into packet block `to` (another member's memory) as packets of round `stamp`.
template <class T>
__device__ GPUCOMM_FORCEINLINE void store_unit(std::uint64_t* to, std::size_t u, packet_unit<T> const& unit,
                                               std::uint32_t stamp) {
  std::uint64_t* const at = to + u * packet_unit<T>::packets;
#pragma unroll
  for (std::size_t p = 0; p < packet_unit<T>::packets; ++p) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> packet(at[p]);
    packet.store((std::uint64_t{stamp} << 32) | unit.words[p], cuda::memory_order_relaxed);
  }
}

/// Polls unit u of packet block `from` (this member's memory) until every packet shows `stamp`.
template <class T>
__device__ GPUCOMM_FORCEINLINE packet_unit<T> receive_unit(round_context const& x, std::uint64_t* from, std::size_t u,
                                                           std::uint32_t stamp) {
  packet_unit<T> unit;
  std::uint64_t* const at = from + u * packet_unit<T>::packets;
#pragma unroll
  for (std::size_t p = 0; p < packet_unit<T>::packets; ++p) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> packet(at[p]);
    std::uint64_t v = packet.load(cuda::memory_order_relaxed);
    if (static_cast<std::uint32_t>(v >> 32) != stamp)
      spin_until(
          [&] {
            v = packet.load(cuda::memory_order_relaxed);
            return static_cast<std::uint32_t>(v >> 32) == stamp;
          },
          {"collective packets", at + p, "a stamp (high 32 bits) ==", stamp}, x.header);
    unit.words[p] = static_cast<std::uint32_t>(v);
  }
  return unit;
}

/// One packet round, number `round`, over `count` elements: every member stores source(r)'s units
/// into member r's packet block, then consume(u, unit_of) runs for every unit u of [0, count)
/// (shared by g's threads), where unit_of(r) is rank r's unit u (this member's own from
/// source(rank)). The caller has synced the group since the previous round (for_each_packet_round).
template <class T, class Tr, group G, class Source, class Consume>
__device__ void packet_round(comm<Tr> const& c, G const& g, round_context const& x, std::uint64_t round,
                             std::size_t count, Source&& source, Consume&& consume) {
  auto const stamp = static_cast<std::uint32_t>(round);
  std::size_t const units = (count + packet_unit<T>::elements - 1) / packet_unit<T>::elements;
  // Orders the group's reads of this slot two rounds ago (before the caller's sync) before the
  // stores below (see the top of this header).
  cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
  auto* const mine = reinterpret_cast<std::uint64_t*>(x.ws.packet_block(x.part, round, x.rank));
  for (int k = 1; k < x.size; ++k) {
    int const r = (x.rank + k) % x.size;
    std::uint64_t* const to = c.remote(sym_ptr<std::uint64_t>(mine), x.ws.members.pe_of(r));
    for (std::size_t u = group_rank(g); u < units; u += group_size(g))
      store_unit<T>(to, u, load_unit(source(r), count, u), stamp);
  }
  for (std::size_t u = group_rank(g); u < units; u += group_size(g)) {
    consume(u, [&](int r) {
      if (r == x.rank) return load_unit(source(r), count, u);
      return receive_unit<T>(x, reinterpret_cast<std::uint64_t*>(x.ws.packet_block(x.part, round, r)), u, stamp);
    });
  }
}

/// f(round, at, count) for each packet round's chunk of this part's share of [0, n), in order: the
/// rounds' numbers reserved at once (step 1 at the top of this header), the group synced before
/// every round after the first, so each round starts after all of the group's polls of the one
/// before.
template <class T, group G, class F>
__device__ void for_each_packet_round(G const& g, round_context const& x, std::size_t n, F&& f) {
  std::size_t const per_round = packet_block_elements<T>(x);
  std::uint64_t const first =
      next_epochs(g, x.words + collective_workspace::packet_round_word, chunk_count(x, n, per_round));
  std::uint64_t round = first;
  for_each_chunk(x, n, per_round, [&](std::size_t at, std::size_t count) {
    if (round != first) group_sync(g);
    f(round++, at, count);
  });
}

/// Whether this member reaches every other member with load/store (route reaches only its first
/// leg's peers that way).
template <class Tr>
__device__ bool team_load_stores(comm<Tr> const& c, round_context const& x) {
  for (int r = 0; r < x.size; ++r)
    if (r != x.rank && c.remote(sym_ptr<std::byte>(x.ws.base), x.ws.members.pe_of(r)) == nullptr) return false;
  return true;
}

/// The elements of a unit, by value.
template <class T>
__device__ GPUCOMM_FORCEINLINE T unit_element(packet_unit<T> const& unit, std::size_t i) {
  T v;
  std::memcpy(&v, reinterpret_cast<unsigned char const*>(unit.words) + i * sizeof(T), sizeof(T));
  return v;
}

/// One-shot allreduce (or reduce_scatter: source(r) = src + r * n) in packet rounds: every member
/// stores its chunk into every other member, and folds all of them in rank order into dst.
template <class Op, class T, class Tr, group G, class Source>
__device__ void fold_packets(comm<Tr> const& c, G const& g, round_context const& x, T* dst, std::size_t n,
                             Source&& source) {
  if constexpr (reduction_takes<Op, T>) {  // else require_reduction has said why
    using R = element_reduction<T>;
    constexpr std::size_t per_unit = packet_unit<T>::elements;
    for_each_packet_round<T>(g, x, n, [&](std::uint64_t round, std::size_t at, std::size_t count) {
      packet_round<T>(
          c, g, x, round, count, [&](int r) { return source(r) + at; },
          [&](std::size_t u, auto&& unit_of) {
            accumulator_t<T> acc[per_unit];
            packet_unit<T> const first = unit_of(0);
            for (std::size_t i = 0; i < per_unit; ++i) acc[i] = R::to_accumulator(unit_element(first, i));
            for (int r = 1; r < x.size; ++r) {
              packet_unit<T> const next = unit_of(r);
              for (std::size_t i = 0; i < per_unit; ++i)
                acc[i] = R::template combine<Op>(acc[i], R::to_accumulator(unit_element(next, i)));
            }
            std::size_t const base = u * per_unit;
            for (std::size_t i = 0; i < per_unit && base + i < count; ++i)
              dst[at + base + i] = R::from_accumulator(acc[i]);
          });
    });
  }
}

}  // namespace detail

#endif  // __CUDACC__

}  // namespace gpucomm
