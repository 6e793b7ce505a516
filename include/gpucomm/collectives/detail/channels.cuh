#pragma once
// Channel steps: the pipelined protocol of the load/store algorithms for messages above the packet
// sizes (transports whose threads store to every peer's memory: comm::remote reaches every member).
//
// A part's share of a collective goes in steps of at most one block per member. Step s:
//   push      every thread stores its share of this member's block for member r (16-byte words
//             where the addresses allow, several loads in flight) straight into its block of r's
//             channel slot s % 4 (blocks of the workspace's channel_block_bytes), for
//             every other member r in turn from the next rank on; the group syncs; the leader
//             stores s into this member's channel flag at each of them with release semantics at
//             system scope (one release per member and step, cumulative over the group's stores);
//   complete  once every other member's channel flag here shows s (one thread per member polls
//             with acquire semantics at system scope, then the group syncs), the group folds or
//             copies the blocks of slot s % 4 into dst.
// Each member pushes step s + 1 before it completes step s, so the flags' latency is hidden behind
// the next push; no fence at the start and no quiet at the end: the data are stores of registers,
// ordered before the flag by its release. Nothing is ever reset: graph replays are safe.
//
// Slot reuse. Each member runs push s, complete s - 1, push s + 1, complete s, ... (a step whose
// push reads what the step before it completes runs that completion first), so a member has
// completed step s - 2 before it pushes step s. A member pushes step s into member r's slot s % 4
// only once r's channel flag here shows s - 2: r has then pushed step s - 2, so it has completed
// step s - 4, the last one that read that slot. Waiting for s - 2 never waits on anything of step
// s or later, so it always ends. Steps are counted per part across calls (local word
// channel_step_word, a call reserving all of its steps at once as packet epochs are), so the rule
// holds from one call to the next, whatever each call moves.

#include <cstddef>
#include <cstdint>

#include "../../detail/copy.cuh"
#include "rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// Runs `steps` channel steps on x's part (steps above): send(t, r) is this member's data for
/// team rank r at step t (a round_send: nothing to send is a bare flag), complete(t, s) folds or
/// copies step t once every member's block of it is here (from rank r:
/// x.ws.channel_block(x.part, s, r, x.rank), x.channel_elements<T>() elements at most).
/// complete_first(t): step t's push reads what step t - 1 completes, so that completion runs
/// before the push (t >= 1).
template <class T, class Tr, group G, class Send, class Complete, class CompleteFirst>
__device__ void run_channel(comm<Tr> const& c, G const& g, round_context const& x, std::size_t steps, Send&& send,
                            Complete&& complete, CompleteFirst&& complete_first) {
  if (steps == 0) return;  // the same at every member: no step drawn
  std::uint64_t const first = next_epochs(g, x.words + collective_workspace::channel_step_word, steps);
  round_context y = x;
  y.flags = x.ws.channel_flags(x.part);
  sym_ptr<signal_t> const my_flag(y.flags + x.rank);
  auto every_peer = [](int) { return true; };
  auto finish = [&](std::size_t t) {
    wait_flags(g, y, first + t, every_peer);  // syncs the group: every block of step t is visible
    complete(t, first + t);
  };
  for (std::size_t t = 0; t < steps; ++t) {
    std::uint64_t const s = first + t;
    bool const early = t > 0 && complete_first(t);
    if (early) finish(t - 1);
    // The slot is free at every member; the wait also syncs the group, so the stores below follow
    // every thread's reads of the step before (the completion just above, or two steps ago).
    wait_flags(g, y, s > 2 ? s - 2 : 0, every_peer);
    for (int k = 1; k < x.size; ++k) {
      int const r = x.peer_after(k);
      round_send<T> const out = send(t, r);
      auto* const block = reinterpret_cast<T*>(x.ws.channel_block(x.part, s, x.rank, r));
      if (out.count > 0)
        group_copy<copy_depth::deep>(g, c.remote(sym_ptr<T>(block), x.ws.members.pe_of(r)), out.src,
                                     out.count * sizeof(T));
    }
    group_sync(g);  // every thread's stores before the leader's releases
    if (is_leader(g)) {
      for (int k = 1; k < x.size; ++k) {
        int const r = x.peer_after(k);
        c.signal(this_thread(), my_flag, s, signal_op::set, x.ws.members.pe_of(r));
      }
    }
    if (t > 0 && !early) finish(t - 1);
  }
  finish(steps - 1);
}

}  // namespace detail

#endif  // __CUDACC__

}  // namespace gpucomm
