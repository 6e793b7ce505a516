#pragma once
// collective_workspace: the symmetric memory one team's collectives run in, as a small trivially
// copyable value that kernels take by value.
//
//   gpucomm::team_workspace ws(w, w.team_world());                  // host, collective
//   my_kernel<<<1, 1024>>>(w.comm<NVLinkStore>(pe), ws.view(pe), ...);
//   // in the kernel: gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{});
//   wide_kernel<<<8, 1024>>>(w.comm<NVLinkStore>(pe), ws.view(pe).first_parts(8), ...);
//   // in the kernel: gpucomm::allreduce(c, block, ws.part(blockIdx.x), dst, src, n, op);
//
// A collective moves its data through the workspace in rounds: in each round every member writes at
// most `block_bytes` bytes into each other member's workspace, and each member then reads what it
// received into its destination (copying or reducing). Larger collectives take several rounds, so
// any count works with any workspace; a larger block means fewer rounds (a round costs about one
// barrier's latency). Destinations and sources are therefore ordinary local memory of the calling
// PE: nothing but the workspace is ever written by another PE, and a destination may be read or
// reused as soon as the collective returns. (Transports that move data with a NIC take sources
// only from the symmetric heap: IBGDAPost and ProxyQueue's NIC backend; see docs/guide/collectives.md.)
//
// Parts: a collective is run either by one group per member on the whole view (which uses part 0
// alone, whatever the workspace's parts), or by c groups per member, group k passing part(k) of a
// view with parts == c (first_parts(c): c of the workspace's parts, 1 <= c <= parts). Each part
// moves its own share of the elements with counters and slots of its own, so parts never wait on
// each other; every member must call with the same c. Parts not used by a call are left as they
// are, so c may change from call to call.
//
// Layout at every member, per part, in 64-bit words and bytes:
//   [0]        round: how many rounds this member has run on the part (local)
//   [1]        busy: 1 while a group of this PE is inside a collective on the part (debug builds)
//   [2]        packet epoch: how many packet epochs this member has run on the part (local)
//   [3]        channel step: how many channel steps this member has run on the part (local)
//   [4..7]     unused: keeps the local words on their own 64-byte line
//   flags      one word per team rank, rounded up to a 64-byte line: flags[r] is the last round
//              team rank r announced to this member (written by r only)
//   channel    the same for channel steps: channel flags[r] is the last step whose block team
//   flags      rank r has stored here (written by r only)
//   slots      from the next multiple of 128 bytes, two of them, used by rounds of alternate
//              parity; each holds one block of `block_bytes` per team rank, block r written by
//              team rank r only
//   packets    two more such slots, for the packet epochs of the load/store algorithms
//              (collectives/detail/packets.cuh), used by epoch parity: 16-byte lines of 8 data
//              bytes and the epoch's flag twice, so a block carries block_bytes / 2 bytes of data
//   channel    four channel slots, for the pipelined steps of the load/store algorithms
//   slots      (collectives/detail/channels.cuh), used by step modulo 4; each holds one block of
//              `channel_block_bytes` per other team rank (none for this PE itself), in the order
//              of the ranks after this one (channel_block)
// Rounds only count up and no word is ever reset after set-up, so a collective may run again and
// again in a CUDA graph (docs/guide/collectives.md: the round protocol).

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../sym_ptr.hpp"
#include "../team.hpp"

namespace gpucomm {

struct collective_workspace {
  /// The team the workspace was made for; every collective on it runs on this team.
  team members;
  /// How many groups share each collective (one per CTA in the multi-CTA form): the workspace's
  /// parts, or fewer (first_parts).
  int parts = 1;
  /// Which part this view is: -1 for the whole view (one group alone, on part 0); part(k) makes
  /// the view of part k.
  int part_index = -1;
  /// Bytes each member may send each other member per round: a multiple of 128.
  std::size_t block_bytes = 0;
  /// Bytes each member may send each other member per channel step: a multiple of 128.
  std::size_t channel_block_bytes = 0;
  /// This PE's workspace (symmetric: the same offset at every member).
  sym_ptr<std::byte> base;

  static constexpr std::size_t line_bytes = 64;
  static constexpr std::size_t round_word = 0;
  static constexpr std::size_t busy_word = 1;
  static constexpr std::size_t packet_round_word = 2;
  static constexpr std::size_t channel_step_word = 3;
  /// Slots of a part: two for rounds and two for packet epochs (blocks of block_bytes), and
  /// channel_slots for channel steps (blocks of channel_block_bytes).
  static constexpr std::size_t block_slots = 4;
  static constexpr std::size_t channel_slots = 4;

  /// Bytes of one part's flags: one word per member, whole lines.
  GPUCOMM_HD static constexpr std::size_t flags_bytes(int team_size) {
    return (static_cast<std::size_t>(team_size) * 8 + line_bytes - 1) / line_bytes * line_bytes;
  }
  /// Where a part's slots start: after its local line and its two flag arrays, at a multiple of
  /// 128 bytes.
  GPUCOMM_HD static constexpr std::size_t slots_offset(int team_size) {
    return (line_bytes + 2 * flags_bytes(team_size) + 127) / 128 * 128;
  }
  /// Bytes of one slot: a block per member.
  GPUCOMM_HD static constexpr std::size_t slot_bytes(int team_size, std::size_t block_bytes) {
    return static_cast<std::size_t>(team_size) * block_bytes;
  }
  /// Bytes of one channel slot: a block per other member.
  GPUCOMM_HD static constexpr std::size_t channel_slot_bytes(int team_size, std::size_t channel_block_bytes) {
    return static_cast<std::size_t>(team_size > 1 ? team_size - 1 : 0) * channel_block_bytes;
  }
  /// Bytes of one part: its local line and flags, two slots for rounds, two for packet rounds,
  /// channel_slots for channel steps.
  GPUCOMM_HD static constexpr std::size_t part_bytes(int team_size, std::size_t block_bytes,
                                                     std::size_t channel_block_bytes) {
    return slots_offset(team_size) + block_slots * slot_bytes(team_size, block_bytes) +
           channel_slots * channel_slot_bytes(team_size, channel_block_bytes);
  }
  /// Bytes of symmetric memory a workspace of `parts` parts needs at every member.
  GPUCOMM_HD static constexpr std::size_t bytes(int team_size, std::size_t block_bytes, std::size_t channel_block_bytes,
                                                int parts) {
    return static_cast<std::size_t>(parts) * part_bytes(team_size, block_bytes, channel_block_bytes);
  }
  /// The block size a request becomes: at least 128 bytes, rounded up to a multiple of 128 so that
  /// every block starts aligned for any element type and for 16-byte vectors.
  GPUCOMM_HD static constexpr std::size_t round_block_bytes(std::size_t requested) {
    std::size_t const b = requested < 128 ? 128 : requested;
    return (b + 127) / 128 * 128;
  }

  /// Bytes per PE that the automatic channel block keeps a workspace within, where it can.
  static constexpr std::size_t automatic_budget = std::size_t{64} << 20;
  /// The largest automatic channel block: past it a step's fixed cost is already spread over
  /// enough bytes, and a larger block would only grow the workspace.
  static constexpr std::size_t automatic_channel_block_most = std::size_t{256} << 10;
  /// The channel block a workspace of `parts` parts of `block_bytes` blocks (already rounded) gets
  /// for `team_size` members when none is asked for: the largest multiple of 4 KiB that keeps the
  /// whole workspace within automatic_budget, at most automatic_channel_block_most, and never
  /// below block_bytes (up to that most). Each channel step has a fixed cost whatever it moves (a
  /// flag to publish and one to wait for), so larger blocks, and fewer steps, are what make large
  /// collectives fast.
  GPUCOMM_HD static constexpr std::size_t automatic_channel_block_bytes(int team_size, std::size_t block_bytes,
                                                                        int parts) {
    std::size_t const most = automatic_channel_block_most;
    std::size_t const least = block_bytes < most ? block_bytes : most;
    if (team_size < 2 || parts < 1) return least;
    std::size_t const rest =
        static_cast<std::size_t>(parts) * (slots_offset(team_size) + block_slots * slot_bytes(team_size, block_bytes));
    std::size_t const left = automatic_budget > rest ? automatic_budget - rest : 0;
    std::size_t const fit = left / (channel_slots * static_cast<std::size_t>(parts) * (team_size - 1)) / 4096 * 4096;
    return fit < least ? least : fit > most ? most : fit;
  }

  /// Whether this is a usable view (made by team_workspace for a team).
  GPUCOMM_HD constexpr bool valid() const noexcept {
    return members.valid() && block_bytes > 0 && channel_block_bytes > 0 && base;
  }

  /// The view of part k of the workspace (0 <= k < parts), for the group of the k-th CTA.
  GPUCOMM_HD constexpr collective_workspace part(int k) const noexcept {
    collective_workspace v = *this;
    v.part_index = k;
    return v;
  }
  /// The view of the workspace's first c parts (1 <= c <= parts), for a collective that c groups
  /// share (their part(k), k < c). The parts' places do not depend on c.
  GPUCOMM_HD constexpr collective_workspace first_parts(int c) const noexcept {
    collective_workspace v = *this;
    v.parts = c;
    return v;
  }
  /// The part this view runs: part_index, or 0 for the whole view.
  GPUCOMM_HD constexpr int chosen_part() const noexcept { return part_index < 0 ? 0 : part_index; }

  /// Where part k starts, at this PE.
  GPUCOMM_HD constexpr std::byte* part_base(int k) const noexcept {
    return base.get() + static_cast<std::size_t>(k) * part_bytes(members.size, block_bytes, channel_block_bytes);
  }
  /// The local words of part k.
  GPUCOMM_HD std::uint64_t* local_words(int k) const noexcept { return reinterpret_cast<std::uint64_t*>(part_base(k)); }
  /// Part k's flags, at this PE (the same offset at every member).
  GPUCOMM_HD std::uint64_t* flags(int k) const noexcept {
    return reinterpret_cast<std::uint64_t*>(part_base(k) + line_bytes);
  }
  /// Part k's channel flags, at this PE (the same offset at every member).
  GPUCOMM_HD std::uint64_t* channel_flags(int k) const noexcept {
    return reinterpret_cast<std::uint64_t*>(part_base(k) + line_bytes + flags_bytes(members.size));
  }
  /// Part k's block of team rank r in the slot of round `round`, at this PE.
  GPUCOMM_HD constexpr std::byte* block(int k, std::uint64_t round, int r) const noexcept {
    return part_base(k) + slots_offset(members.size) +
           static_cast<std::size_t>(round & 1) * slot_bytes(members.size, block_bytes) +
           static_cast<std::size_t>(r) * block_bytes;
  }
  /// Part k's packet block of team rank r in the packet slot of packet round `round`, at this PE.
  GPUCOMM_HD constexpr std::byte* packet_block(int k, std::uint64_t round, int r) const noexcept {
    return part_base(k) + slots_offset(members.size) +
           static_cast<std::size_t>(2 + (round & 1)) * slot_bytes(members.size, block_bytes) +
           static_cast<std::size_t>(r) * block_bytes;
  }
  /// Part k's channel block that team rank `from` writes at team rank `at` in the channel slot of
  /// step `step` (from != at), as an offset at every member: at's slot holds the blocks of the
  /// ranks after it, at + 1 first.
  GPUCOMM_HD constexpr std::byte* channel_block(int k, std::uint64_t step, int from, int at) const noexcept {
    int const after = from > at ? from - at - 1 : from - at - 1 + members.size;
    return part_base(k) + slots_offset(members.size) + block_slots * slot_bytes(members.size, block_bytes) +
           static_cast<std::size_t>(step % channel_slots) * channel_slot_bytes(members.size, channel_block_bytes) +
           static_cast<std::size_t>(after) * channel_block_bytes;
  }
};

}  // namespace gpucomm
