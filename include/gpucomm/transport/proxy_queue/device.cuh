#pragma once
// ProxyQueue, device side: the calling group's leader writes a command into its PE's ring in pinned
// host memory (command_ring.cuh), and a proxy thread on the host carries it out with an engine a
// kernel cannot drive itself. The host half (proxy threads, rings, backends) is proxy_queue/host.hpp.
//
// Backends, chosen per peer by the host (state.hpp's paths): the NIC (detail/nic_backend.hpp: the
// proxy posts RDMA writes, reads and atomics; the NIC model in this version) for peers not reached
// through the mapped heap, and for every signal and atomic on the memory of a PE that some PE
// reaches that way (the NIC is that memory's atomicity domain). Fetching NIC atomics read their
// value from a result slot the calling thread claims and releases. With NIC peers, barrier is the
// contract's epoch barrier. The rest of this comment is the copy-engine backend:
// the copy engines, for peers this PE reaches through the mapped heap
// (same host, same GPU included). The proxy moves the bytes of put, get and put_signal with
// cudaMemcpyAsync on one stream per (PE, peer), and writes a put_signal's `set` with
// cuStreamWriteValue64 on the same stream after the data. What the copy engines cannot do, the
// GPU does itself over the same mappings (NVLinkStore's code): signals, signal `add`, atomics, and
// copies whose local buffer is in shared or local memory (the copy engine reads and writes only
// global memory).
//
// The store path: puts, gets and put_signals of at most proxy_options::store_path_bytes, and of at
// most 1 KiB per thread of the group (state.hpp's store_path_limit), to a peer the copy engines
// serve are the group's own loads and stores over the mapped heap (NVLinkStore's code), as are
// those whose local buffer the copy engines cannot reach; a command costs the proxy and the copy
// engine microseconds however small it is. Ordering between the two paths: none without a fence,
// as OpenSHMEM allows (a small put issued after a bulk put to the same bytes may land first);
// fence and quiet complete both, so after a fence the small put lands last.
//
// Local buffers (a put's or put_signal's src, a get's dst) may be anywhere a kernel addresses, as
// on every transport. To a peer the network backend serves: in the symmetric heap, or in a buffer
// registered with world::register_buffer, the backend reads or writes it itself (the engine: any
// global memory); anywhere else (cudaMalloc'd memory, shared memory, a local variable) the group
// stages it through one of the PE's staging slots (detail/staging.cuh: two halves of 64 KiB that
// the backend reaches, one command per 64 KiB chunk, the group copying the next chunk while the
// backend moves the last). A staged get waits like a get; a staged put_nbi returns once its last
// chunk is posted (the slot's next user waits for the backend to have read it); a staged
// put_signal's signal travels with its last chunk, posted once the earlier chunks are complete.
// Local variables: a put sends the leader's, a get fills every thread's (a group type without
// shfl: the leader's).
//
// How each operation meets comm.cuh's contract:
//   put             local src in global memory: g syncs (every thread's writes of src are ordered
//                   before the leader's post, whose release at system scope carries them to the
//                   proxy and so to the copy engine), the leader posts a put; blocking: the leader
//                   waits until the proxy reports it complete (the copy has written the peer),
//                   then g syncs. Small ones, or src elsewhere: the group's own stores, as
//                   NVLinkStore.
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
// A wait for ring space or completion that outlasts the world's wait timeout (debug builds: 20 s
// unless set; release builds: only when set, detail/bounded_wait.cuh) gives up and traps with the PE, the operation and
// the ticket; the proxy completes a command that failed (and records it for world::synchronize), so a wait never hangs
// on one.

#include <cuda/std/bit>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "../../comm.cuh"
#include "../../detail/bounded_wait.cuh"
#include "../../detail/copy.cuh"
#include "../../detail/device_check.cuh"
#include "../../detail/staging.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../verbs_gpu/wqe.cuh"
#include "../../team.hpp"
#include "../nvlink_store/device.cuh"
#include "../../transport_concept.hpp"
#include "command.cuh"
#include "command_ring.cuh"
#include "options.hpp"
#include "state.hpp"

namespace gpucomm {

class world;
namespace detail {
template <class World>
class proxy_queue_host_of;
}

struct ProxyQueue {
  static constexpr char const* name = "ProxyQueue";
  static constexpr capabilities caps{
      .put = true, .get = true, .put_signal = true, .signal = true, .atomics = true, .quiet = true, .barrier = true};

  using device_state = detail::proxy_queue_state;
  using host_state = detail::proxy_queue_host_of<world>;
  using options = proxy_options;

#if defined(__CUDACC__)
  template <group G, class T>
  __device__ static void put(comm<ProxyQueue> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    detail::check_pe(pe, c.npes());
    std::size_t const bytes = n * sizeof(T);
    if (by_network(c, pe) && !network_reaches(c, src, bytes))
      return staged(c, g, staged_op{staged_op::put}, const_cast<T*>(src), dst.get(), bytes, pe, blocking);
    if (!engine_reaches(src) || by_stores(c, g, pe, bytes)) {
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
    if (by_network(c, pe) && !network_reaches(c, dst, bytes))
      return staged(c, g, staged_op{staged_op::get}, dst, src.get(), bytes, pe, true);
    if (!engine_reaches(dst) || by_stores(c, g, pe, bytes)) {
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
    std::uint8_t const path = path_to(c, pe);
    if (by_network(c, pe) && !network_reaches(c, src, bytes)) {
      return staged(c, g, staged_op{staged_op::put_signal, sig, value, op}, const_cast<T*>(src), dst.get(), bytes, pe,
                    blocking);
    }
    if (!engine_reaches(src) || by_stores(c, g, pe, bytes)) {
      detail::group_copy(g, peer_address(c, dst, pe), src, bytes);
      signal(c, g, sig, value, op, pe);  // its group sync orders the copy's stores before the update
      return;
    }
    group_sync(g);  // every thread's writes of src before the leader's post
    if (is_leader(g)) {
      // One command where one backend does both halves in order: the NIC (a write, then a fenced
      // atomic on the same QP), or the copy engine with a `set` (a stream write after the copy).
      if ((path & detail::proxy_data_nic) != 0 || (op == signal_op::set && path == 0)) {
        proxy_queue::command cmd = command_for(proxy_queue::command_op::put_signal, dst.get(), src, bytes, pe);
        cmd.signal = reinterpret_cast<std::uintptr_t>(sig.get());
        cmd.value = value;
        cmd.signal_op = static_cast<std::uint8_t>(op);
        std::uint64_t const t = post(c, cmd, "put_signal");
        if (blocking) wait(c, t, "put_signal");
      } else {
        // The data by the copy engine, complete, then the update in the word's atomicity domain.
        if (bytes != 0)
          wait(c, post(c, command_for(proxy_queue::command_op::put, dst.get(), src, bytes, pe), "put_signal"),
               "put_signal");
        std::uint64_t const t = update_signal(c, sig, value, op, pe, path);
        if (blocking && t != no_ticket) wait(c, t, "put_signal");
      }
    }
    if (blocking || op == signal_op::add || path != 0) group_sync(g);
  }

  template <group G>
  __device__ static void signal(comm<ProxyQueue> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value,
                                signal_op op, int pe) {
    detail::check_pe(pe, c.npes());
    std::uint8_t const path = path_to(c, pe);
    if ((path & detail::proxy_atomics_nic) == 0) return NVLinkStore::signal(as_nvlink(c), g, sig, value, op, pe);
    group_sync(g);  // the group's earlier writes before the leader's post (a release at system scope)
    if (is_leader(g)) update_signal(c, sig, value, op, pe, path);
  }

  /// Called by the group's leader only (comm.cuh).
  template <atomic_op Op, class T>
  __device__ static T atomic(comm<ProxyQueue> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    detail::check_pe(pe, c.npes());
    if ((path_to(c, pe) & detail::proxy_atomics_nic) == 0)
      return NVLinkStore::atomic<Op>(as_nvlink(c), target, value, compare, pe);
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "gpucomm: ProxyQueue atomics take 32- or 64-bit integers");
    using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    constexpr bool fetching = Op != atomic_op::add && Op != atomic_op::set;
    // A fetching atomic's value lands in a result slot this thread holds until it has read it; the
    // others name none (the NIC backend gives their old values a slot nobody reads).
    std::uint32_t const slot = fetching ? claim_result_slot(c) : 0;
    std::uint64_t const* result = fetching ? c.state().results + slot : nullptr;
    proxy_queue::command cmd = command_for(proxy_queue::command_op::atomic, target.get(), result, sizeof(T), pe);
    cmd.atomic_op = static_cast<std::uint8_t>(Op);
    cmd.value = cuda::std::bit_cast<U>(value);
    cmd.aux = cuda::std::bit_cast<U>(compare);
    std::uint64_t const t = post(c, cmd, "atomic");
    if constexpr (!fetching) {
      return T{};  // complete after quiet
    } else {
      wait(c, t, "atomic");
      T const old = cuda::std::bit_cast<T>(read_result<U>(result));
      // Release: the read above happens before the slot's next holder claims it (acquire).
      cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(c.state().result_claims[slot])
          .store(0u, cuda::memory_order_release);
      return old;
    }
  }

  template <group G>
  __device__ static void quiet(comm<ProxyQueue> const& c, G const& g) {
    complete_posted(c, g);
    NVLinkStore::quiet(as_nvlink(c), g);
  }

  /// NVLinkStore's barrier where every flag is written by the GPU itself; with NIC peers, the
  /// contract's epoch barrier, whose flags go through signal() (so through the NIC to them).
  template <group G>
  __device__ static void barrier(comm<ProxyQueue> const& c, G const& g, team const& t) {
    if (c.state().paths != nullptr) return contract::barrier(c, g, t);
    complete_posted(c, g);
    NVLinkStore::barrier(as_nvlink(c), g, t);
  }

 private:
  static constexpr std::uint64_t no_ticket = ~std::uint64_t{0};

  /// How this PE reaches pe (proxy_path bits); 0 when no peer is reached through the NIC.
  __device__ static GPUCOMM_FORCEINLINE std::uint8_t path_to(comm<ProxyQueue> const& c, int pe) {
    std::uint8_t const* paths = c.state().paths;
    return paths == nullptr ? std::uint8_t{0} : paths[pe];
  }

  /// Whether g's own loads and stores carry a put, get or put_signal of `bytes` to pe: the store
  /// path, for small ones (detail::store_path_limit) to a peer the GPU reaches (the copy engines').
  template <group G>
  __device__ static GPUCOMM_FORCEINLINE bool by_stores(comm<ProxyQueue> const& c, G const& g, int pe,
                                                       std::size_t bytes) {
    return bytes <= detail::store_path_limit(c.state().store_path_bytes, group_size(g)) && !by_network(c, pe);
  }

  /// Whether pe's data goes through the network backend (the NIC or an engine).
  __device__ static GPUCOMM_FORCEINLINE bool by_network(comm<ProxyQueue> const& c, int pe) {
    return (path_to(c, pe) & detail::proxy_data_nic) != 0;
  }

  /// Whether the network backend reaches the local buffer [p, p + bytes) itself: global memory,
  /// and for the NIC only this PE's heap and its registered buffers. Anything else is staged.
  __device__ static bool network_reaches(comm<ProxyQueue> const& c, void const* p, std::size_t bytes) {
    if (!engine_reaches(p)) return false;
    device_state const& s = c.state();
    if (s.network_reads_global) return true;
    if (detail::range_within(reinterpret_cast<std::uintptr_t>(p), bytes,
                             reinterpret_cast<std::uintptr_t>(c.control_header()), s.stride))
      return true;
    return detail::registered_region(*s.regions, p, bytes) != nullptr;
  }

  /// The leader's signal update in the word's atomicity domain: the GPU's own release at system
  /// scope, or a command to the NIC backend (fenced behind this PE's earlier commands to pe on
  /// the same QP). Returns the command's ticket, or no_ticket when the GPU did it.
  __device__ static std::uint64_t update_signal(comm<ProxyQueue> const& c, sym_ptr<signal_t> sig, signal_t value,
                                                signal_op op, int pe, std::uint8_t path) {
    signal_t* word = peer_address_if_gpu(c, sig, pe, path);
    if (word != nullptr) {
      cuda::atomic_ref<signal_t, cuda::thread_scope_system> ref(*word);
      if (op == signal_op::set)
        ref.store(value, cuda::memory_order_release);
      else
        ref.fetch_add(value, cuda::memory_order_release);
      return no_ticket;
    }
    proxy_queue::command cmd = command_for(proxy_queue::command_op::signal, nullptr, nullptr, 0, pe);
    cmd.signal = reinterpret_cast<std::uintptr_t>(sig.get());
    cmd.value = value;
    cmd.signal_op = static_cast<std::uint8_t>(op);
    return post(c, cmd, "signal");
  }

  /// pe's copy of p when its atomics are the GPU's, else null.
  template <class T>
  __device__ static T* peer_address_if_gpu(comm<ProxyQueue> const& c, sym_ptr<T> p, int pe, std::uint8_t path) {
    return (path & detail::proxy_atomics_nic) != 0 ? nullptr : peer_address(c, p, pe);
  }

  /// Claims a free result slot (result_claims 0 -> 1), starting from one picked by the calling
  /// thread's position so that concurrent callers rarely collide; waits while all are held.
  __device__ static std::uint32_t claim_result_slot(comm<ProxyQueue> const& c) {
    device_state const& s = c.state();
    std::uint32_t const mask = s.result_slots - 1;
    unsigned const block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned const thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    std::uint32_t i = (block * 131u + thread) & mask;
    gpucomm::detail::deadline const dl(s.ring.timeout_ns);
    for (std::uint32_t tries = 1;; ++tries, i = (i + 1) & mask) {
      std::uint32_t expected = 0;
      // Acquire: the previous holder's read of the slot happens before this holder's command.
      if (cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(s.result_claims[i])
              .compare_exchange_strong(expected, 1u, cuda::memory_order_acquire, cuda::memory_order_relaxed)) {
        return i;
      }
      if (tries % s.result_slots == 0) {
        if (dl.expired()) detail::device_misuse("atomic", "no result slot came free (is the world still alive?)");
        gpucomm::detail::spin_pause();
      }
    }
  }

  /// The value the network backend fetched into `slot` (state.hpp's slot format, the NIC's, which
  /// the engine backend writes too), once its command is complete.
  template <class U>
  __device__ static U read_result(std::uint64_t const* slot) {
    static_assert(detail::result_slot_value(0x04030201u, 4) == verbs_gpu::fetched32(0x04030201u),
                  "result slots hold 4-byte values as the NIC returns them");
    // Relaxed: the backend wrote it before the completion that wait() acquired at system scope.
    std::uint64_t const raw =
        cuda::atomic_ref<std::uint64_t const, cuda::thread_scope_system>(*slot).load(cuda::memory_order_relaxed);
    return static_cast<U>(detail::result_slot_value(raw, sizeof(U)));
  }

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
    if (c.state().ring.post(cmd, ticket) != proxy_queue::ring_status::ok) report_ring_full(c, ticket, op);
    return ticket;
  }

  // The reports are out of line: one copy per translation unit, not one per call site.
  [[noreturn]] __device__ static GPUCOMM_NOINLINE void report_ring_full(comm<ProxyQueue> const& c, std::uint64_t ticket,
                                                                        char const* op) {
    printf(
        "gpucomm: ProxyQueue %s: PE %d's command ring has had no free slot for %llu ns (ticket %llu, %llu "
        "slots): is the world, and so its proxy, still alive? (block %d thread %d); trapping\n",
        op, c.my_pe(), static_cast<unsigned long long>(gpucomm::detail::wait_bound_ns(c.state().ring.timeout_ns)),
        static_cast<unsigned long long>(ticket), static_cast<unsigned long long>(c.state().ring.depth()), blockIdx.x,
        threadIdx.x);
    __trap();
    __builtin_unreachable();
  }

  [[noreturn]] __device__ static GPUCOMM_NOINLINE void report_incomplete(comm<ProxyQueue> const& c,
                                                                         std::uint64_t ticket, char const* op) {
    printf(
        "gpucomm: ProxyQueue %s: PE %d's command %llu is not complete after %llu ns: is the world, and so its "
        "proxy, still alive? (block %d thread %d); trapping\n",
        op, c.my_pe(), static_cast<unsigned long long>(ticket),
        static_cast<unsigned long long>(gpucomm::detail::wait_bound_ns(c.state().ring.timeout_ns)), blockIdx.x,
        threadIdx.x);
    __trap();
    __builtin_unreachable();
  }

  /// Waits until the command with `ticket` and every earlier one of this PE are complete.
  __device__ static void wait(comm<ProxyQueue> const& c, std::uint64_t ticket, char const* op) {
    if (c.state().ring.wait_complete(ticket) != proxy_queue::ring_status::ok) report_incomplete(c, ticket, op);
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

  using staged_op = detail::staged_op;

  /// The leader's side of one staged operation (detail/staging.cuh's run): each chunk is one
  /// command from (or into) its half of the slot, which the network backend reaches. Out of line
  /// and independent of the group type: one copy per translation unit.
  struct staging_run : detail::staging_run_base<staging_run> {
    comm<ProxyQueue> const& c;
    std::uintptr_t target;  ///< the symmetric address at pe: a put's dst, a get's src
    int pe;
    std::uint64_t last = no_ticket;  ///< the last command posted

    __device__ staging_run(comm<ProxyQueue> const& c_, staged_op const& what_, void const* target_, std::size_t bytes_,
                           int pe_, unsigned slot_index)
        : staging_run_base(what_, c_.state().staging, c_.state().staging_slots, slot_index, bytes_),
          c(c_),
          target(reinterpret_cast<std::uintptr_t>(target_)),
          pe(pe_) {}

    /// Before the group copies chunk k: a put waits until the backend is done with the half's
    /// previous chunk; a get waits for chunk k's read (wait() acquires its completion at system
    /// scope; the group sync that follows extends it to the threads that copy it out).
    __device__ GPUCOMM_NOINLINE void before_copy(std::size_t k) {
      if (is_get()) {
        wait(c, reading[k & 1], what.name());
      } else {
        drain_half(k & 1);
      }
    }
    /// After the group copied chunk k (ordered before the post by the group sync and the post's
    /// release at system scope): a put posts it and notes it in the slot; a put_signal's last
    /// chunk carries the signal, once every earlier chunk is complete (an engine may complete
    /// commands out of order); a get reads chunk k + 2 into the half.
    __device__ GPUCOMM_NOINLINE void after_copy(std::size_t k) {
      if (is_get()) {
        if (k + 2 < chunks()) reading[k & 1] = post_read(k + 2);
        return;
      }
      bool const signals = what.kind == staged_op::put_signal && k + 1 == chunks();
      if (signals && last != no_ticket) wait(c, last, what.name());
      last = post_chunk(k, signals ? proxy_queue::command_op::put_signal : proxy_queue::command_op::put);
      slot.pending[k & 1] = last + 1;
    }
    /// A put_signal of no bytes: its signal alone. A blocking put's wait; then the slot goes back.
    __device__ GPUCOMM_NOINLINE void end(bool blocking) {
      if (!is_get()) {
        if (what.kind == staged_op::put_signal && chunks() == 0)
          last = post_chunk(0, proxy_queue::command_op::put_signal);
        if (blocking && last != no_ticket) wait(c, last, what.name());
      }
      detail::give_back_staging_slot(slot);
    }
    /// Waits until the backend is done with the half's last command (a put reading it).
    __device__ GPUCOMM_NOINLINE void drain_half(unsigned h) {
      if (slot.pending[h] == 0) return;
      wait(c, slot.pending[h] - 1, what.name());
      slot.pending[h] = 0;
    }
    __device__ std::uint64_t post_read(std::size_t k) { return post_chunk(k, proxy_queue::command_op::get); }
    /// The command that moves chunk k between its half and pe; its ticket.
    __device__ std::uint64_t post_chunk(std::size_t k, proxy_queue::command_op op) {
      std::uintptr_t const far = target + k * half_bytes;
      void const* near = half(k);
      bool const get = op == proxy_queue::command_op::get;
      proxy_queue::command cmd = command_for(op, get ? near : reinterpret_cast<void const*>(far),
                                             get ? reinterpret_cast<void const*>(far) : near, length(k), pe);
      if (op == proxy_queue::command_op::put_signal) {
        cmd.signal = reinterpret_cast<std::uintptr_t>(what.sig.get());
        cmd.value = what.value;
        cmd.signal_op = static_cast<std::uint8_t>(what.op);
      }
      return post(c, cmd, what.name());
    }
  };

  /// A put, put_signal or get to a peer the network backend serves whose local buffer it does not
  /// reach, through a staging slot (detail/staging.cuh); the leader's steps are staging_run's.
  template <group G>
  __device__ GPUCOMM_NOINLINE static void staged(comm<ProxyQueue> const& c, G const& g, staged_op const& what,
                                                 void* local_buffer, void const* target, std::size_t bytes, int pe,
                                                 bool blocking) {
    group_sync(g);  // every thread's writes of a put's source before the copy into the slot
    unsigned const slot_index = detail::take_staging_slot(g, c.state().staging_slots, what.name(), c.control_header());
    staging_run run{c, what, target, bytes, pe, slot_index};
    detail::run_staged(g, run, local_buffer, what.kind == staged_op::get, blocking);
  }
#endif  // __CUDACC__
};

}  // namespace gpucomm
