#pragma once
// ProxyQueue, device side: the calling group's leader writes a command into its PE's ring in pinned
// host memory (command_ring.cuh), and a proxy thread on the host carries it out with an engine a
// kernel cannot drive itself. The host half (proxy threads, rings, backends) is proxy_queue/host.hpp.
//
// Backend in this version: the copy engines, for peers this PE reaches through the mapped heap
// (same host, same GPU included). The proxy moves the bytes of put, get and put_signal with
// cudaMemcpyAsync on one stream per (PE, peer), and writes a put_signal's `set` with
// cuStreamWriteValue64 on the same stream after the data. What the copy engines cannot do, the
// GPU does itself over the same mappings (NVLinkStore's code): signals, signal `add`, atomics, and
// copies whose local buffer is in shared or local memory (the copy engine reads and writes only
// global memory).
//
// How each operation meets comm.cuh's contract:
//   put             local src in global memory: g syncs (every thread's writes of src are ordered
//                   before the leader's post, whose release at system scope carries them to the
//                   proxy and so to the copy engine), the leader posts a put; blocking: the leader
//                   waits until the proxy reports it complete (the copy has written the peer),
//                   then g syncs. src elsewhere: the group's own stores, as NVLinkStore.
//   put_nbi         as put without the wait: src must not change before quiet.
//   get / get_nbi   as put, the other way: blocking returns when dst holds the data (the leader's
//                   acquire of the completion, then g's sync); get_nbi's dst is valid after quiet.
//   put_signal      set: one command, data then signal on the same stream, so the signal is
//                   written after the data (the stream write's default memory barrier orders the
//                   copy's writes before it); blocking waits for both. add: the put, the leader
//                   waits for it to complete, then a release fetch_add at system scope on the peer's
//                   word by the GPU, so it is atomic with every other GPU atomic on the word.
//   signal          NVLinkStore's: g syncs, the leader's release store or fetch_add at system scope.
//   atomics         NVLinkStore's: cuda::atomic_ref<T, thread_scope_system>, relaxed, on the peer's
//                   word, by the leader.
//   quiet, fence    g syncs; the leader waits until every command any thread of this PE posted
//                   before (tickets below the count issued) is complete, then NVLinkStore's quiet
//                   (a fence.acq_rel at system scope between two syncs) completes the GPU's own
//                   stores and atomics. fence is quiet: the proxy sends the copies it reads together
//                   as one batch, whose copies may run in any order, and the GPU's own operations
//                   do not pass through the ring at all.
//   barrier         the same completion of everything posted before, then NVLinkStore's barrier.
//   wait_until      the contract's: acquire loads at system scope until the comparison holds.
// Atomicity domain: NVLink/GPU atomics, the same as NVLinkStore's and P2PCopy's.
// Debug builds (GPUCOMM_DEBUG): a wait for ring space or completion gives up after the ring's
// timeout (20 s) and traps with the PE, the operation and the ticket; the proxy completes a
// command that failed (and records it for world::synchronize), so a wait never hangs on one.

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "../../comm.cuh"
#include "../../detail/copy.cuh"
#include "../../detail/device_check.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../team.hpp"
#include "../nvlink_store/device.cuh"
#include "../transport.hpp"
#include "command.cuh"
#include "command_ring.cuh"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm {

namespace detail {
class proxy_queue_host;
}

struct ProxyQueue {
  static constexpr char const* name = "ProxyQueue";
  static constexpr capabilities caps{
      .put = true, .get = true, .put_signal = true, .signal = true, .atomics = true, .quiet = true, .barrier = true};

  using device_state = detail::proxy_queue_state;
  using host_state = detail::proxy_queue_host;
  using options = proxy_options;

#if defined(__CUDACC__)
  template <group G, class T>
  __device__ static void put(comm<ProxyQueue> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    detail::check_pe(pe, c.npes());
    std::size_t const bytes = n * sizeof(T);
    if (!engine_reaches(src)) {
      detail::group_copy(g, peer_address(c, dst, pe), src, bytes);
      if (blocking) group_sync(g);
      return;
    }
    group_sync(g);  // every thread's writes of src before the leader's post
    if (is_leader(g) && bytes != 0) {
      std::uint64_t const t = post(c, command_for(proxy_queue::command_op::put, dst.get(), src, bytes, pe), "put");
      if (blocking) wait(c, t, "put");
    }
    if (blocking) group_sync(g);
  }

  template <group G, class T>
  __device__ static void get(comm<ProxyQueue> const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n, int pe,
                             bool blocking) {
    detail::check_pe(pe, c.npes());
    std::size_t const bytes = n * sizeof(T);
    if (!engine_reaches(dst)) {
      detail::group_copy(g, dst, peer_address(c, src, pe), bytes);
      if (blocking) group_sync(g);
      return;
    }
    group_sync(g);  // the group's earlier accesses to dst before the copy engine writes it
    if (is_leader(g) && bytes != 0) {
      std::uint64_t const t = post(c, command_for(proxy_queue::command_op::get, dst, src.get(), bytes, pe), "get");
      if (blocking) wait(c, t, "get");
    }
    if (blocking) group_sync(g);
  }

  template <group G, class T>
  __device__ static void put_signal(comm<ProxyQueue> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe, bool blocking) {
    detail::check_pe(pe, c.npes());
    std::size_t const bytes = n * sizeof(T);
    if (!engine_reaches(src)) {
      detail::group_copy(g, peer_address(c, dst, pe), src, bytes);
      NVLinkStore::signal(as_nvlink(c), g, sig, value, op, pe);
      return;
    }
    group_sync(g);  // every thread's writes of src before the leader's post
    if (is_leader(g)) {
      if (op == signal_op::set) {
        proxy_queue::command cmd = command_for(proxy_queue::command_op::put_signal, dst.get(), src, bytes, pe);
        cmd.signal = reinterpret_cast<std::uintptr_t>(sig.get());
        cmd.value = value;
        cmd.signal_op = static_cast<std::uint8_t>(signal_op::set);
        std::uint64_t const t = post(c, cmd, "put_signal");
        if (blocking) wait(c, t, "put_signal");
      } else {
        if (bytes != 0)
          wait(c, post(c, command_for(proxy_queue::command_op::put, dst.get(), src, bytes, pe), "put_signal"),
               "put_signal");
        // Release at system scope after the acquire of the completion: a waiter that acquires
        // the sum sees the data.
        cuda::atomic_ref<signal_t, cuda::thread_scope_system>(*peer_address(c, sig, pe))
            .fetch_add(value, cuda::memory_order_release);
      }
    }
    if (blocking || op == signal_op::add) group_sync(g);
  }

  template <group G>
  __device__ static void signal(comm<ProxyQueue> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value,
                                signal_op op, int pe) {
    detail::check_pe(pe, c.npes());
    NVLinkStore::signal(as_nvlink(c), g, sig, value, op, pe);
  }

  template <atomic_op Op, class T>
  __device__ static T atomic(comm<ProxyQueue> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    detail::check_pe(pe, c.npes());
    return NVLinkStore::atomic<Op>(as_nvlink(c), target, value, compare, pe);
  }

  template <group G>
  __device__ static void quiet(comm<ProxyQueue> const& c, G const& g) {
    complete_posted(c, g);
    NVLinkStore::quiet(as_nvlink(c), g);
  }

  template <group G>
  __device__ static void barrier(comm<ProxyQueue> const& c, G const& g, team const& t) {
    complete_posted(c, g);
    NVLinkStore::barrier(as_nvlink(c), g, t);
  }

 private:
  /// Whether the copy engine can reach a local buffer: global memory (device or mapped host), not
  /// the calling CTA's shared memory or a thread's local memory.
  __device__ static GPUCOMM_FORCEINLINE bool engine_reaches(void const* p) { return __isGlobal(p) != 0; }

  template <class T>
  __device__ static T* peer_address(comm<ProxyQueue> const& c, sym_ptr<T> p, int pe) {
    return NVLinkStore::remote(as_nvlink(c), p, pe);
  }

  /// The same PE seen through NVLinkStore, for what the GPU does itself over the mapped heap.
  __device__ static comm<NVLinkStore> as_nvlink(comm<ProxyQueue> const& c) {
    return comm<NVLinkStore>(c.my_pe(), c.npes(), c.team_states(), detail::nvlink_store_state{c.state().stride});
  }

  __device__ static proxy_queue::command command_for(proxy_queue::command_op op, void const* dst, void const* src,
                                                     std::size_t bytes, int pe) {
    proxy_queue::command cmd;
    cmd.op = op;
    cmd.dst = reinterpret_cast<std::uintptr_t>(dst);
    cmd.src = reinterpret_cast<std::uintptr_t>(src);
    cmd.bytes = bytes;
    cmd.pe = pe;
    return cmd;
  }

  /// Posts `cmd` into this PE's ring (the leader alone); returns its ticket.
  __device__ static std::uint64_t post(comm<ProxyQueue> const& c, proxy_queue::command const& cmd, char const* op) {
    std::uint64_t ticket = 0;
    if (c.state().ring.post(cmd, ticket) != proxy_queue::ring_status::ok) {
      printf(
          "gpucomm: ProxyQueue %s: PE %d's command ring has had no free slot for %llu ns (ticket %llu, %llu "
          "slots): is the world, and so its proxy, still alive? (block %d thread %d); trapping\n",
          op, c.my_pe(), static_cast<unsigned long long>(c.state().ring.timeout_ns),
          static_cast<unsigned long long>(ticket), static_cast<unsigned long long>(c.state().ring.depth()), blockIdx.x,
          threadIdx.x);
      __trap();
    }
    return ticket;
  }

  /// Waits until the command with `ticket` and every earlier one of this PE are complete.
  __device__ static void wait(comm<ProxyQueue> const& c, std::uint64_t ticket, char const* op) {
    if (c.state().ring.wait_complete(ticket) != proxy_queue::ring_status::ok) {
      printf(
          "gpucomm: ProxyQueue %s: PE %d's command %llu is not complete after %llu ns: is the world, and so its "
          "proxy, still alive? (block %d thread %d); trapping\n",
          op, c.my_pe(), static_cast<unsigned long long>(ticket),
          static_cast<unsigned long long>(c.state().ring.timeout_ns), blockIdx.x, threadIdx.x);
      __trap();
    }
  }

  /// g syncs; the leader waits until every command posted on this PE before is complete.
  template <group G>
  __device__ static void complete_posted(comm<ProxyQueue> const& c, G const& g) {
    group_sync(g);  // the posts of every thread of g before the leader counts the tickets
    if (is_leader(g)) {
      std::uint64_t const issued = c.state().ring.tickets_issued();
      if (issued != 0) wait(c, issued - 1, "quiet");
    }
  }
#endif  // __CUDACC__
};

}  // namespace gpucomm
