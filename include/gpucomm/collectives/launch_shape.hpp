#pragma once
// How many CTAs, of how many threads, run one collective at each member: the host launchers' choice
// (host/collectives.cuh), and the advice for device callers, whose grid is their own.
//
//   gpucomm::launch_shape const s = gpucomm::allreduce_launch_shape<float>(ws, n);   // host
//   my_kernel<<<s.ctas, s.threads>>>(..., ws.view(pe).first_parts(s.ctas));
//   // in the kernel: gpucomm::allreduce(c, block, view.part(blockIdx.x), dst, src, n, op);
//
// CTA k runs workspace part k of `ctas` parts: a view whose `parts` is `ctas` (at most the
// workspace's parts; parts 0 to ctas - 1 of a larger workspace lie where they always do). Every
// member must run the same shape for a call, so the choice depends only on what every member
// shares: the protocol, the message's bytes per member, the workspace's parts and the co-residency
// cap (co_residency_cap below: all CTAs of the members on one GPU must run at once, since each waits
// for the others, and an SM per member stays free for work they wait on that runs on SMs).
//
// Packet rounds (allreduce_algorithm::packets): CTAs of packet_threads (256) threads, by size, about
// one CTA per 1-4 KiB of message (the 16-byte lines of 8 data bytes: 1 KiB is 128 lines):
//   bytes      <= 1K  2K  4K  8K  16K  32K  64K  128K  more (up to packet_limit)
//   CTAs           1   2   4   8   12   20   32    48    64
// Why 256 threads: they keep a 2 KiB share (the 64 KiB row) at one line per thread with no idle
// warp, where 512 would leave half of them idle up to 64 KiB and make every group sync wider; and a
// thread moves two of its own lines per wave (detail/packets.cuh), so one of 64 CTAs covers the 4
// KiB share of a 256 KiB message in one wave. How many such CTAs share an SM is the compiler's
// register allocation to say; the co-residency cap counts one CTA per SM, so no shape relies on
// more. Round protocols: every part, in CTAs of round_threads (512) threads. Why 512: at 1024
// threads each thread may hold 64 registers, and every round kernel (the folds, the copies, their
// loop bounds) spills at 64; at 512 they hold 128 and spill nothing. The rounds run faster so at
// every size except the copy collectives' largest messages (allgather and alltoall of hundreds of
// MiB), where 1024 threads kept more loads in flight.

#include <cstddef>

#include "../config.hpp"

namespace gpucomm {

/// The most bytes per member that the automatic choices send in packet epochs (allreduce's
/// packets; allgather, alltoall, reduce_scatter and alltoallv's pairs: bytes per member pair), on a
/// team of `members`: 512 KiB for two, 128 KiB for three or four, 64 KiB for more; above it they
/// take channel steps or rounds. Packets spare a call those protocols' flag words, fences and round
/// trips (one one-way trip) at the price of twice the bytes on the wire (each member stores
/// (members - 1) x twice its bytes, and polls as many lines): they pay for small messages, the
/// smaller the larger the team. The limit depends on `members` alone, so every member of a call makes the same choice.
/// docs/contributing/benchmarks.md says how to place it on a machine.
GPUCOMM_HD constexpr std::size_t packet_limit(int members) {
  return std::size_t{members <= 2 ? 512u : members <= 4 ? 128u : 64u} << 10;
}

/// One call's launch at each member: `ctas` CTAs of `threads` threads, CTA k running part k.
struct launch_shape {
  int ctas = 1;
  int threads = 512;
};

namespace detail {

/// Which protocol a call runs: packet rounds (detail/packets.cuh) or rounds (detail/rounds.cuh).
enum class collective_protocol { rounds, packets };

/// Threads per CTA of the launchers' kernels, by protocol.
inline constexpr int round_threads = 512;
inline constexpr int packet_threads = 256;

/// The packet table above: CTAs for a message of `bytes` per member.
GPUCOMM_HD constexpr int packet_ctas(std::size_t bytes) {
  constexpr std::size_t KiB = 1024;
  constexpr struct {
    std::size_t up_to;
    int ctas;
  } table[] = {{1 * KiB, 1},   {2 * KiB, 2},   {4 * KiB, 4},   {8 * KiB, 8},
               {16 * KiB, 12}, {32 * KiB, 20}, {64 * KiB, 32}, {128 * KiB, 48}};
  for (auto const& row : table)
    if (bytes <= row.up_to) return row.ctas;
  return 64;
}

/// The co-residency cap: the most CTAs a host launcher runs per member, with `sms` SMs on the
/// world's smallest GPU and at most `sharing` members on one GPU. The members' CTAs on one GPU all
/// fit at once, and `sharing` SMs stay free: work the collectives wait on may need an SM (copies
/// between PEs of one GPU, such as ProxyQueue's, are SM copies; a kernel a program launches between
/// calls). At least 1.
GPUCOMM_HD constexpr int co_residency_cap(int sms, int sharing) {
  int const members = sharing < 1 ? 1 : sharing;
  int const cap = (sms - members) / members;
  return cap > 1 ? cap : 1;
}

/// The launch of one call: `bytes` of the message per member, `parts` the workspace's, `cap` the
/// co-residency cap (at least 1). The same arguments give the same shape at every member.
GPUCOMM_HD constexpr launch_shape collective_launch_shape(collective_protocol protocol, std::size_t bytes, int parts,
                                                          int cap) {
  int const most = (parts < cap ? parts : cap) < 1 ? 1 : (parts < cap ? parts : cap);
  if (protocol == collective_protocol::packets) {
    int const want = packet_ctas(bytes);
    return {want < most ? want : most, packet_threads};
  }
  return {most, round_threads};
}

}  // namespace detail

}  // namespace gpucomm
