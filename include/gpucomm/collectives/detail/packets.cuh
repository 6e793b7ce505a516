#pragma once
// Packet rounds: the small-message protocol of the load/store algorithms (transports whose threads
// store to every peer's memory: comm::remote), NCCL's LL idea.
//
// A line is 16 bytes, {data word 0, flag, data word 1, flag}: 8 bytes of data and the epoch's flag
// twice, written with ONE 16-byte store (relaxed, system scope) straight into the receiver's
// workspace. The store's two 8-byte halves are each single-copy atomic and each carries the flag, so
// a receiver whose 16-byte load shows the flag in both halves has the whole line: a line torn
// between its halves cannot pass. No flag word, no fence between data and flag, no quiet.
//
// One packet epoch e (a round; the part's packet epochs are counted by local word 2) over a chunk of
// the part's units (a unit: 8 bytes of whole elements, one line; a 16-byte element is a unit of two):
//   1. each thread loads its units of src (up to packet_lines_in_flight lines at once);
//   2. stores them into its own block of every other member's packet slot e & 1, flag(e) in each;
//   3. polls the same lines of every other member's block in its own slot e & 1 until both flags of
//      each show flag(e) (16-byte relaxed loads, the next member's issued before this one's are
//      checked), folds every member's unit in team-rank order (its own from registers), and writes
//      dst. Every member folds the same inputs in the same order: bitwise the same results.
// That is allreduce's epoch; the exchange is the same for reduce_scatter (member r is sent the units
// of src + r * n), allgather and alltoall (which copy member r's units to dst + r * n instead of
// folding them; alltoall sends r those of src + r * n): packet_round's modes.
// flag(e) = e mod (2^32 - 1) + 1 is never 0 (the zeroed workspace) and never flag(e - 2) (what the
// slot holds from its previous use), so a stale line never passes, for any e.
//
// Slot reuse: why two slots suffice, and what orders it. Every epoch is all-to-all (each member
// stores at least one line into every other member), so a member that received all of r's lines of
// epoch e - 1 knows r had finished its polls of epoch e - 2, the last reads of slot e & 1 at r,
// before it stored them; only then does the member store epoch e into that slot. Each member orders
// its polls of epoch e - 1 before its stores of epoch e at system scope:
//   - a host launcher's kernel (collective_entry::kernel_start) runs one call per part: its first
//     epoch follows the stream's previous kernel, which completed with every access performed
//     (with programmatic dependent launch: the kernel's grid dependency wait, host/collectives.cuh);
//   - a call from a user's kernel (collective_entry::device_call), which may run collectives back to
//     back: after the entry sync the leader fences once (acq_rel, system scope) and the group syncs
//     again, which orders every thread's earlier polls before every thread's stores of the call;
//   - every later epoch of a call (a share larger than one block): the same sync, leader fence, sync.
// Every polled value is consumed (its loop's exit) before the thread reaches the group's sync.
//
// The group agrees on e: a call reserves all of its epochs at once (next_epochs: every thread reads
// the part's counter, the group syncs, the leader records the last), and every epoch after the first
// starts with a group sync. Epochs are not read per round: rounds end with polls, not with a sync,
// so a thread that read the counter at the start of the next round could read it before the leader
// had recorded this round, and run a round twice with stale lines (the late-leader test pins it).
// Nothing is reset: graph replays are safe.

#include <cuda/atomic>
#include <cuda/std/bit>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../launch_shape.hpp"
#include "rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// Element types packet rounds move: whole elements in 8-byte units (16-byte ones in two lines).
template <class T>
concept packet_element = std::is_trivially_copyable_v<T> &&
    (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);

/// Whether automatic choices may take packets for T on Tr (every member then makes the same choice).
template <class Tr, class T>
inline constexpr bool packets_automatic = can_load_store<Tr>&& packet_element<T>&& load_stores_everywhere<Tr>;

/// The protocol allgather, alltoall and reduce_scatter run for n elements of T per member pair on
/// a team of `members`: packets up to packet_limit where packets_automatic, rounds (channel steps
/// or rounds of put_signal, detail/steps.cuh) otherwise. Only what every member shares goes in.
template <class Tr, class T>
GPUCOMM_HD constexpr collective_protocol data_protocol(std::size_t n, int members) {
  return packets_automatic<Tr, T> && n * sizeof(T) <= packet_limit(members) ? collective_protocol::packets
                                                                            : collective_protocol::rounds;
}

/// Calls f.template operator()<P>() with P = data_protocol<Tr, T>(n, members), instantiating the
/// packet form only where the transport and type allow it.
template <class Tr, class T, class F>
__device__ GPUCOMM_FORCEINLINE void with_data_protocol(std::size_t n, int members, F&& f) {
  if constexpr (packets_automatic<Tr, T>) {
    if (data_protocol<Tr, T>(n, members) == collective_protocol::packets) {
      f.template operator()<collective_protocol::packets>();
      return;
    }
  }
  f.template operator()<collective_protocol::rounds>();
}

/// How a collective was entered, for the packet protocol's slot reuse (top of this header).
enum class collective_entry {
  device_call,   ///< from a user's kernel, which may run collectives back to back
  kernel_start,  ///< by a host launcher's kernel: one call per part, after the stream's previous kernel
};

/// A line as it lies in the workspace.
struct alignas(16) packet_line {
  std::uint32_t data0, flag0, data1, flag1;
};
static_assert(sizeof(packet_line) == 16 && alignof(packet_line) == 16, "a line is one 16-byte store");

/// The flag of packet epoch e: never 0, never flag(e - 2) (nor flag(e - 1)).
GPUCOMM_HD constexpr std::uint32_t packet_flag(std::uint64_t epoch) {
  return static_cast<std::uint32_t>(epoch % 0xffffffffull) + 1u;
}

/// A line as loaded: its halves {data0, flag0} and {data1, flag1}.
struct line_halves {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  __device__ GPUCOMM_FORCEINLINE bool shows(std::uint32_t flag) const {
    return static_cast<std::uint32_t>(lo >> 32) == flag && static_cast<std::uint32_t>(hi >> 32) == flag;
  }
  __device__ GPUCOMM_FORCEINLINE std::uint64_t data() const { return (lo & 0xffffffffull) | (hi << 32); }
};

/// Stores 8 data bytes and `flag` as one line at `to` (a peer's workspace).
__device__ GPUCOMM_FORCEINLINE void store_line(packet_line* to, std::uint64_t data, std::uint32_t flag) {
  std::uint64_t const f = std::uint64_t{flag} << 32;
  // One 16-byte store, relaxed at system scope (the receiver polls it): each 64-bit element is
  // single-copy atomic, so each half arrives with its flag. cuda::ptx has no relaxed vector store.
  asm volatile("st.relaxed.sys.global.v2.b64 [%0], {%1, %2};" ::"l"(__cvta_generic_to_global(to)),
               "l"(f | (data & 0xffffffffull)), "l"(f | (data >> 32))
               : "memory");
}

/// Loads the line at `from` (this PE's workspace) as peers last stored it.
__device__ GPUCOMM_FORCEINLINE line_halves load_line(packet_line const* from) {
  line_halves v;
  // One 16-byte load, relaxed at system scope: from L2, never a stale L1 copy; each half is
  // single-copy atomic. cuda::ptx has no relaxed vector load.
  asm volatile("ld.relaxed.sys.global.v2.b64 {%0, %1}, [%2];"
               : "=l"(v.lo), "=l"(v.hi)
               : "l"(__cvta_generic_to_global(from))
               : "memory");
  return v;
}

/// A unit: the elements one thread moves per member, max(8, sizeof(T)) bytes in `lines` lines.
template <class T>
struct packet_unit {
  static constexpr std::size_t lines = sizeof(T) > 8 ? sizeof(T) / 8 : 1;
  static constexpr std::size_t elements = lines * 8 / sizeof(T);
  std::uint64_t words[lines];
};

/// Lines each thread keeps in flight: its units of a wave, and each member's lines of them.
inline constexpr std::size_t packet_lines_in_flight = 2;

/// The unsigned integer of `Bytes` bytes (1, 2, 4 or 8).
template <std::size_t Bytes>
using packet_bits = std::conditional_t<
    Bytes == 1, std::uint8_t,
    std::conditional_t<Bytes == 2, std::uint16_t, std::conditional_t<Bytes == 4, std::uint32_t, std::uint64_t>>>;

/// The two words of a 16-byte element.
struct packet_pair {
  std::uint64_t lo, hi;
};

/// Element i of a unit, by value (shifts, not a trip through memory).
template <class T>
__device__ GPUCOMM_FORCEINLINE T unit_element(packet_unit<T> const& u, std::size_t i) {
  if constexpr (sizeof(T) == 16) {
    return cuda::std::bit_cast<T>(packet_pair{u.words[0], u.words[1]});
  } else {
    return cuda::std::bit_cast<T>(static_cast<packet_bits<sizeof(T)>>(u.words[0] >> (8 * sizeof(T) * i)));
  }
}

/// Puts v as element i of u, whose bits there are zero.
template <class T>
__device__ GPUCOMM_FORCEINLINE void set_unit_element(packet_unit<T>& u, std::size_t i, T const& v) {
  if constexpr (sizeof(T) == 16) {
    packet_pair const pair = cuda::std::bit_cast<packet_pair>(v);
    u.words[0] = pair.lo;
    u.words[1] = pair.hi;
  } else {
    u.words[0] |= std::uint64_t{cuda::std::bit_cast<packet_bits<sizeof(T)>>(v)} << (8 * sizeof(T) * i);
  }
}

/// Loads the unit at `at`, whose first `have` elements exist (the rest are zero bytes). `aligned`:
/// at is 8-byte aligned (then whole units go as 8-byte loads).
template <class T>
__device__ GPUCOMM_FORCEINLINE packet_unit<T> load_unit(T const* at, std::size_t have, bool aligned) {
  using U = packet_unit<T>;
  U u{};
  if (aligned && have == U::elements) {
#pragma unroll
    for (std::size_t p = 0; p < U::lines; ++p) u.words[p] = reinterpret_cast<std::uint64_t const*>(at)[p];
  } else {
#pragma unroll
    for (std::size_t i = 0; i < U::elements; ++i)
      if (i < have) set_unit_element(u, i, at[i]);
  }
  return u;
}

/// Stores u at `to`, whose message has `remaining` elements from there on (a unit's worth or fewer
/// are stored). `aligned`: to is 8-byte aligned (then a whole unit goes as 8-byte stores).
template <class T>
__device__ GPUCOMM_FORCEINLINE void store_unit(T* to, packet_unit<T> const& u, std::size_t remaining, bool aligned) {
  using U = packet_unit<T>;
  if (aligned && remaining >= U::elements) {
#pragma unroll
    for (std::size_t p = 0; p < U::lines; ++p) reinterpret_cast<std::uint64_t*>(to)[p] = u.words[p];
  } else {
#pragma unroll
    for (std::size_t i = 0; i < U::elements; ++i)
      if (i < remaining) to[i] = unit_element(u, i);
  }
}

/// Loads the lines of this thread's units of the wave from `block`: line p of unit k into v[k][p].
template <class T, std::size_t K>
__device__ GPUCOMM_FORCEINLINE void load_lines(line_halves (&v)[K][packet_unit<T>::lines], packet_line const* block,
                                               std::size_t first_index, std::size_t stride, std::size_t units) {
#pragma unroll
  for (std::size_t k = 0; k < K; ++k)
    if (first_index + k * stride < units)
#pragma unroll
      for (std::size_t p = 0; p < packet_unit<T>::lines; ++p)
        v[k][p] = load_line(block + (first_index + k * stride) * packet_unit<T>::lines + p);
}

/// What a packet exchange does with every member's units (packet_round below).
enum class packet_mode {
  fold,  ///< dst[e] = epilogue(e, the units of every member folded in team-rank order): allreduce, reduce_scatter
  copy,  ///< rank r's units into dst + r * stride: allgather, alltoall
};

/// Per-thread accumulators of a fold, nothing for a copy (whose T need not be reducible).
template <packet_mode Mode, class T>
struct packet_accumulator {
  using type = char;
};
template <class T>
struct packet_accumulator<packet_mode::fold, T> {
  using type = accumulator_t<T>;
};

/// One packet epoch over units [first, first + units) of a message of n elements: steps 1-3 at the
/// top of this header, in waves of packet_lines_in_flight lines per thread. This member sends
/// member r the units of source(r) (Uniform: source(r) is the same for every r, loaded once), and
/// its own units are those of source(rank). `aligned`: every source(r) and every destination of
/// the mode is 8-byte aligned (then whole units go as 8-byte loads and stores). The caller has
/// ordered this epoch's stores after the group's polls of the previous one.
template <packet_mode Mode, bool Uniform, class Op, class T, class Tr, group G, class Source, class Epilogue>
__device__ void packet_round(comm<Tr> const& c, G const& g, round_context const& x, std::uint64_t epoch, T* dst,
                             std::size_t stride, Source&& source, std::size_t n, std::size_t first, std::size_t units,
                             bool aligned, Epilogue const& epilogue) {
  using U = packet_unit<T>;
  constexpr std::size_t K = packet_lines_in_flight / U::lines;  // units per thread and wave
  constexpr std::size_t E = U::elements;
  constexpr std::size_t L = U::lines;
  std::uint32_t const flag = packet_flag(epoch);
  std::size_t const gs = group_size(g);
  auto* const own_block = reinterpret_cast<packet_line*>(x.ws.packet_block(x.part, epoch, x.rank));
  // This thread's units of a wave: `at + k * gs` for k < K, those below `units`.
  for (std::size_t at = group_rank(g); at < units; at += K * gs) {
    auto live = [&](std::size_t k) { return at + k * gs < units; };
    auto element = [&](std::size_t k) { return (first + at + k * gs) * E; };
    auto have = [&](std::size_t k) { return n - element(k) < E ? n - element(k) : E; };
    auto load = [&](U(&u)[K], T const* from) {
#pragma unroll
      for (std::size_t k = 0; k < K; ++k) u[k] = live(k) ? load_unit(from + element(k), have(k), aligned) : U{};
    };
    // 1. Load this member's own units.
    U mine[K];
    load(mine, source(x.rank));
    // 2. Store every other member's units into this member's block of its slot, from the next rank on.
    for (int step = 1; step < x.size; ++step) {
      int const r = x.peer_after(step);
      U theirs[K];
      if constexpr (Uniform) {
#pragma unroll
        for (std::size_t k = 0; k < K; ++k) theirs[k] = mine[k];
      } else {
        load(theirs, source(r));
      }
      packet_line* const to = c.remote(sym_ptr<packet_line>(own_block), x.ws.members.pe_of(r));
#pragma unroll
      for (std::size_t k = 0; k < K; ++k)
        if (live(k))
#pragma unroll
          for (std::size_t p = 0; p < L; ++p) store_line(to + (at + k * gs) * L + p, theirs[k].words[p], flag);
    }
    // 3. Every member's units, in rank order. The next member's lines are loaded before this
    // member's are checked: two members' loads in flight.
    auto block_of = [&](int r) { return reinterpret_cast<packet_line const*>(x.ws.packet_block(x.part, epoch, r)); };
    auto next_peer = [&](int r) { return r + 1 == x.rank ? r + 2 : r + 1; };
    auto store = [&](T* to, U const& u, std::size_t k) { store_unit(to + element(k), u, n - element(k), aligned); };
    line_halves pending[K][L];
    int loading = next_peer(-1);
    if (loading < x.size) load_lines<T>(pending, block_of(loading), at, gs, units);
    [[maybe_unused]] typename packet_accumulator<Mode, T>::type acc[K][E];
    for (int r = 0; r < x.size; ++r) {
      U got[K];
      if (r == x.rank) {
#pragma unroll
        for (std::size_t k = 0; k < K; ++k) got[k] = mine[k];
      } else {
        line_halves v[K][L];
#pragma unroll
        for (std::size_t k = 0; k < K; ++k)
#pragma unroll
          for (std::size_t p = 0; p < L; ++p) v[k][p] = pending[k][p];
        loading = next_peer(r);
        if (loading < x.size) load_lines<T>(pending, block_of(loading), at, gs, units);
        packet_line const* const block = block_of(r);
        // Whether every line shows the flag, loading again those that do not.
        auto arrived = [&](bool reload) {
          bool all = true;
#pragma unroll
          for (std::size_t k = 0; k < K; ++k)
#pragma unroll
            for (std::size_t p = 0; p < L; ++p) {
              if (!live(k) || v[k][p].shows(flag)) continue;
              if (reload) v[k][p] = load_line(block + (at + k * gs) * L + p);
              all = all && v[k][p].shows(flag);
            }
          return all;
        };
        if (!arrived(false)) {
          spin_until([&] { return arrived(true); },
                     {"collective packets", reinterpret_cast<std::uint64_t const*>(block + at * L),
                      "flag (high 32 bits) ==", flag, x.ws.members.pe_of(r)},
                     x.header);
        }
#pragma unroll
        for (std::size_t k = 0; k < K; ++k)
#pragma unroll
          for (std::size_t p = 0; p < L; ++p) got[k].words[p] = v[k][p].data();
      }
      if constexpr (Mode == packet_mode::fold) {
        using R = element_reduction<T>;
#pragma unroll
        for (std::size_t k = 0; k < K; ++k) {
          if (!live(k)) continue;
#pragma unroll
          for (std::size_t i = 0; i < E; ++i) {
            auto const value = R::to_accumulator(unit_element(got[k], i));
            acc[k][i] = r == 0 ? value : R::template combine<Op>(acc[k][i], value);
          }
        }
      } else {
        T* const to = dst + static_cast<std::size_t>(r) * stride;
        if (r != x.rank || to != source(x.rank)) {  // in place, the own block is already there
#pragma unroll
          for (std::size_t k = 0; k < K; ++k)
            if (live(k)) store(to, got[k], k);
        }
      }
    }
    // 4. The folded units into dst, each element through the epilogue.
    if constexpr (Mode == packet_mode::fold) {
      using R = element_reduction<T>;
#pragma unroll
      for (std::size_t k = 0; k < K; ++k) {
        if (!live(k)) continue;
        U out{};
#pragma unroll
        for (std::size_t i = 0; i < E; ++i) {
          T v = R::from_accumulator(acc[k][i]);
          if (i < have(k)) v = epilogue(element(k) + i, v);
          set_unit_element(out, i, v);
        }
        store(dst, out, k);
      }
    }
  }
}

/// Orders the group's earlier polls before its later stores, at system scope: the group has synced
/// since its last poll; the leader fences, and the group syncs again.
template <group G>
__device__ GPUCOMM_FORCEINLINE void order_packet_epoch(G const& g) {
  if (is_leader(g)) cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
  group_sync(g);
}

/// Whether this member reaches every other member with load/store (route reaches only its first
/// leg's peers that way).
template <class Tr>
__device__ bool team_load_stores(comm<Tr> const& c, round_context const& x) {
  for (int r = 0; r < x.size; ++r)
    if (r != x.rank && c.remote(sym_ptr<std::byte>(x.ws.base), x.ws.members.pe_of(r)) == nullptr) return false;
  return true;
}

/// A one-shot exchange in packet epochs (allreduce packets; allgather, alltoall and reduce_scatter
/// up to the packet limit): this part's share of the message's units, in chunks of one block's lines
/// per epoch; every member sends every other member r its units of source(r) and, in Mode, folds
/// every member's units in rank order into dst or copies rank r's into dst + r * stride
/// (packet_round). The sources and the destinations are the same or do not overlap.
template <packet_mode Mode, bool Uniform, class Op, class T, class Tr, group G, class Source,
          class Epilogue = identity_epilogue>
__device__ void exchange_packets(comm<Tr> const& c, G const& g, round_context const& x, T* dst, std::size_t stride,
                                 Source&& source, std::size_t n, collective_entry entry,
                                 Epilogue const& epilogue = {}) {
  using U = packet_unit<T>;
  std::size_t const units = (n + U::elements - 1) / U::elements;
  // Shares split at whole granules (a granule above 1 is a whole number of units).
  std::size_t const unit_granule = x.granule > U::elements ? x.granule / U::elements : 1;
  element_range const mine = granule_range(units, unit_granule, x.part, x.ws.parts);
  std::size_t const per_epoch = x.ws.block_bytes / sizeof(packet_line) / U::lines;
  std::size_t const epochs = rounds_for(mine.size(), per_epoch);
  if (epochs == 0) return;  // the same at every member: no epoch drawn
  std::uint64_t const first = next_epochs(g, x.words + collective_workspace::packet_round_word, epochs);
  auto misaligned = [](void const* p) { return (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0; };
  bool aligned = !misaligned(dst);
  for (int r = 0; r < x.size; ++r)
    aligned = aligned && !misaligned(source(r)) && !misaligned(dst + static_cast<std::size_t>(r) * stride);
  for (std::size_t j = 0; j < epochs; ++j) {
    if (j > 0) group_sync(g);  // every thread's polls of the previous epoch are over
    if (j > 0 || entry == collective_entry::device_call) order_packet_epoch(g);
    element_range const chunk = chunk_of(mine.size(), j, per_epoch);
    packet_round<Mode, Uniform, Op>(c, g, x, first + j, dst, stride, source, n, mine.lo + chunk.lo, chunk.size(),
                                    aligned, epilogue);
  }
}

}  // namespace detail

#endif  // __CUDACC__

}  // namespace gpucomm
