#pragma once
// IBGDAPost, device side: InfiniBand / RoCE through an mlx5 NIC, the GPU posting its own work requests
// (verbs_gpu): the calling group's leader builds the WQEs, rings the doorbell and polls the CQ;
// the NIC moves the bytes. No CPU is in the path.
//
// Queues. Every PE has `qps_per_peer` RC QPs to every PE, itself included (loopback), so every
// operation, local or not, goes through the NIC and its one atomicity domain. A calling group
// uses QP number (w % qps_per_peer) to each peer, where w is the grid-wide index of the warp
// holding the group's leader (rank 0): a group's operations to one peer always share one QP, so
// RC ordering and the fence bit order them; different warps spread over the QPs.
//
// Memory. The NIC reaches the symmetric heap (each block, one allocation, registered as a region of
// its own on every PE, its keys exchanged when it is allocated and found by heap offset in a table
// in GPU memory: detail/heap_keys.hpp) and the local buffers registered with
// world::register_buffer. An operation's range on either side must lie inside one allocation (one
// region), as with NVSHMEM; otherwise the NIC refuses it (a protection or remote access error,
// which world::synchronize() reports like any failed operation). A put's `src` and a get's `dst` may be anywhere else
// too (shared memory, cudaMalloc'd memory, a local variable); what each placement costs:
//   - in the symmetric heap or a registered buffer: nothing extra, the NIC reads or writes it;
//   - a put of at most inline_bytes (28): copied into the WQE by the leader, from anywhere;
//   - anywhere else: staged (detail/staging.cuh). The group takes one of the PE's staging slots
//     (two halves of 64 KiB in registered memory), copies each 64 KiB chunk of src into a half and
//     posts it while it fills the other half (a put), or reads chunks into both halves and copies
//     each one out once it has landed (a get). That is one extra copy through GPU memory per byte
//     and, for a get, a round trip per 64 KiB; a get_nbi waits like a get. A put_nbi returns once
//     its last chunk is posted: the slot waits for the NIC before its next user writes it. Local
//     variables: a put sends the leader's, a get fills every thread's (a group type without shfl:
//     the leader's); the group's threads copy everything else together.
// A null pointer with a non-zero size traps in debug builds.
//
// How each op meets comm.cuh's contract:
//   put            group sync (the group's writes to src happen before the leader's doorbell,
//                  whose system-scope release fence is cumulative over them), RDMA WRITE in
//                  chunks of at most 1 GiB; blocking: the leader waits for the completion (the
//                  NIC has read src; inline writes need no wait), then the group syncs. Staged:
//                  the same, with the group's copy into the staging half in place of src.
//   get            RDMA READ into dst; blocking: the leader waits for the completion, whose CQE it
//                  acquires (system scope), then the group syncs, so every thread sees dst.
//   put_signal     RDMA WRITE, then the signal update as an atomic WQE with the fence bit: the NIC
//                  starts it only after the write completed, so the data is in place before the
//                  signal changes. Blocking: waits for the signal's completion.
//   signal         set: masked compare-and-swap with an empty compare mask (an atomic store);
//                  add: fetch-and-add. Both carry the fence bit (the group's earlier puts to that
//                  PE land first).
//   atomics        64-bit: fetch-add and compare-swap natively; 32-bit and the bit operations
//                  through masked atomics (and / or: masked swap of the bits to clear or set; xor:
//                  masked add with every carry cut; swap and set: masked swap of every bit; fetch:
//                  add 0). Fetching forms wait for the completion and read the old value from a
//                  per-WQE result slot, which stays theirs until read (the WQE one ring later that
//                  lands on the same slot waits); the others, and signals, leave the old value in
//                  a discard word. No float add: mlx5 has none (a compile error).
//   fence          a NOP with the fence bit on each of the group's QPs that has work in flight:
//                  later WQEs on that QP start after everything before it completed.
//   quiet          each of the group's QPs with work in flight gets a signalled NOP, and the group
//                  waits until those complete (RC completes in order).
//   barrier        the contract's epoch barrier (contract.cuh), which first runs
//                  quiet_pe: quiet on every QP of this PE (all groups' work); the leader then sets
//                  its arrival flag at every member through the NIC, and the group waits for every
//                  member's flag (acquire).
//   wait_until     the contract's: acquire loads of the local word at system scope.
//   progress       while a thread of this PE waits on a local word (wait_until, barrier) for
//                  50 us, then twice as long each time up to 10 ms: a signalled NOP on each of this
//                  PE's QPs with work in flight, which rings again for a doorbell the NIC lost.
//                  The send queue's own waits ring again the same way (verbs_gpu/send_queue.cuh).
// Errors: an error completion (bad key, out of bounds, ...) is recorded once per QP with its
// syndrome; operations on that QP return at once afterwards (fetching ones return 0), and the
// host's world::synchronize() throws a gpucomm::error naming the PE, the peer, the operation and
// the syndrome. Nothing waits on a queue in error. (A peer waiting for a signal or barrier that
// never comes still waits: debug builds give up after GPUCOMM_SPIN_TIMEOUT_NS.)
// Atomicity domain: the NIC. Use only gpucomm operations of this transport on words they update.

// Host half: ibgda_post/host.cuh; options (the NIC, QPs per peer): ibgda_post/options.hpp.

#include <cuda/atomic>
#include <cuda/std/bit>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "../../comm.cuh"
#include "../../detail/copy.cuh"
#include "../../detail/device_check.cuh"
#include "../../detail/staging.cuh"
#include "../../group.cuh"
#include "../../ops.hpp"
#include "../../sym_ptr.hpp"
#include "../../verbs_gpu/completion_queue.cuh"
#include "../../verbs_gpu/send_queue.cuh"
#include "../../verbs_gpu/wqe.cuh"
#include "state.hpp"
#include "../nic/atomics.cuh"
#include "../../transport_concept.hpp"
#include "options.hpp"

namespace gpucomm {

namespace detail {
class ibgda_host_state;
}

struct IBGDAPost {
  static constexpr char const* name = "IBGDAPost";
  static constexpr capabilities caps{.put = true,
                                     .get = true,
                                     .put_signal = true,
                                     .signal = true,
                                     .atomics = true,
                                     .float_add = false,
                                     .fence = true,
                                     .quiet = true,
                                     .barrier = false,
                                     .load_store = false};

  using device_state = detail::ibgda_state;
  using host_state = detail::ibgda_host_state;
  using options = ibgda_options;

  /// Puts of at most this many bytes go inline in the WQE (one WQEBB): `src` may be anywhere.
  static constexpr std::size_t inline_bytes = 28;
  /// The largest message one WQE carries (mlx5 log_max_msg = 30).
  static constexpr std::size_t max_message_bytes = std::size_t{1} << 30;

#if defined(__CUDACC__)
  using status = verbs_gpu::status;

  template <group G, class T>
  __device__ static void put(comm<IBGDAPost> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n, int pe,
                             bool blocking) {
    std::size_t const bytes = n * sizeof(T);
    verbs_gpu::local_buf from{};
    if (bytes > inline_bytes && !nic_reaches(c, src, bytes, "put", &from)) {
      staged(c, g, staged_op{staged_op::put}, const_cast<T*>(src), remote(c, dst, pe), bytes, pe, blocking);
      return;
    }
    group_sync(g);
    if (is_leader(g)) lead_write(c, pe, "put", remote(c, dst, pe), src, from, bytes, nullptr, blocking);
    group_sync(g);
  }

  template <group G, class T>
  __device__ static void get(comm<IBGDAPost> const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n, int pe,
                             bool blocking) {
    std::size_t const bytes = n * sizeof(T);
    verbs_gpu::local_buf to{};
    if (bytes > 0 && !nic_reaches(c, dst, bytes, "get", &to)) {
      staged(c, g, staged_op{staged_op::get}, dst, remote(c, src, pe), bytes, pe, true);
      return;
    }
    group_sync(g);
    if (is_leader(g)) lead_read(c, pe, to, remote(c, src, pe), bytes, blocking);
    group_sync(g);
  }

  template <group G, class T>
  __device__ static void put_signal(comm<IBGDAPost> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                                    sym_ptr<signal_t> sig, signal_t value, signal_op op, int pe, bool blocking) {
    std::size_t const bytes = n * sizeof(T);
    verbs_gpu::local_buf from{};
    if (bytes > inline_bytes && !nic_reaches(c, src, bytes, "put_signal", &from)) {
      staged(c, g, staged_op{staged_op::put_signal, sig, value, op}, const_cast<T*>(src), remote(c, dst, pe), bytes, pe,
             blocking);
      return;
    }
    group_sync(g);
    if (is_leader(g)) {
      signal_update const update{sig, value, op};
      lead_write(c, pe, "put_signal", remote(c, dst, pe), src, from, bytes, &update, blocking);
    }
    group_sync(g);
  }

  template <group G>
  __device__ static void signal(comm<IBGDAPost> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value,
                                signal_op op, int pe) {
    group_sync(g);
    if (is_leader(g)) lead_signal(c, sig, value, op, pe);
  }

  /// Called by the group's leader only (comm.cuh).
  template <atomic_op Op, class T>
  __device__ static T atomic(comm<IBGDAPost> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "gpucomm: IBGDAPost atomics take 32- or 64-bit integers");
    using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    return cuda::std::bit_cast<T>(atomic_words<Op, U>(c, remote(c, target, pe), cuda::std::bit_cast<U>(value),
                                                      cuda::std::bit_cast<U>(compare), pe));
  }

  template <group G>
  __device__ static void fence(comm<IBGDAPost> const& c, G const& g) {
    group_sync(g);
    if (is_leader(g)) lead_fence(c);
    group_sync(g);
  }

  template <group G>
  __device__ static void quiet(comm<IBGDAPost> const& c, G const& g) {
    group_sync(g);
    if (is_leader(g)) lead_quiet(c);
    group_sync(g);
  }

  /// What the contract's barrier completes first: every QP of this PE, whichever group used it (the
  /// threads of g share them), so puts any group issued before the barrier have landed.
  template <group G>
  __device__ static void quiet_pe(comm<IBGDAPost> const& c, G const& g) {
    device_state const& s = c.state();
    group_sync(g);
    unsigned const queues = static_cast<unsigned>(c.npes()) * s.qps_per_peer;
    for (unsigned i = group_rank(g); i < queues; i += group_size(g)) quiet_queue(s.queues[i]);
    group_sync(g);
  }

  // ---- for composite transports and tests ------------------------------------------------------

  /// The QP the calling thread's group (led by this thread) uses to PE `pe`.
  __device__ static verbs_gpu::send_queue const& queue(comm<IBGDAPost> const& c, int pe) {
    detail::check_pe(pe, c.npes());
    unsigned const threads = blockDim.x * blockDim.y * blockDim.z;
    unsigned const thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned const block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned const warp = block * ((threads + 31) / 32) + thread / 32;
    device_state const& s = c.state();
    return s.queues[static_cast<unsigned>(pe) * s.qps_per_peer + warp % s.qps_per_peer];
  }

  /// Whether q has WQEs that may not have completed. consumer is one past the newest completed
  /// WQE's first WQEBB, so consumer >= ready means everything published has completed.
  __device__ static bool in_flight(verbs_gpu::send_queue const& q) {
    using verbs_gpu::detail::dev_ref;
    // Acquire on ready: the WQEs published so far (by this thread before, among others) are counted.
    std::uint64_t const ready = dev_ref(q.counters->ready).load(cuda::memory_order_acquire);
    return dev_ref(q.counters->consumer).load(cuda::memory_order_acquire) < ready && !q.has_error();
  }

  __device__ static void quiet_queue(verbs_gpu::send_queue const& q) {
    if (in_flight(q)) posted(q.quiet(), "quiet");
  }

  /// While a thread of this PE waits on a local word (the contract calls it, patiently): every
  /// queue of this PE with work in flight gets a signalled NOP, whose doorbell covers one the NIC
  /// may have lost (a peer's wait may hang on it, and this PE posts nothing else while it waits).
  /// Nothing waits for the NOPs; a queue in error is left to the host's report.
  __device__ static void progress(comm<IBGDAPost> const& c) {
    device_state const& s = c.state();
    unsigned const queues = static_cast<unsigned>(c.npes()) * s.qps_per_peer;
    for (unsigned i = 0; i < queues; ++i) {
      if (in_flight(s.queues[i])) (void)s.queues[i].flush();
    }
  }

 private:
  /// PE pe's copy of p, as the NIC addresses it: its address there and the rkey of the block
  /// holding it (heap_keys::none outside every block: the NIC refuses it, and the host reports).
  template <class T>
  __device__ static verbs_gpu::remote_buf remote(comm<IBGDAPost> const& c, sym_ptr<T> p, int pe) {
    detail::check_pe(pe, c.npes());  // before the tables are read at pe
    device_state const& s = c.state();
    auto const offset = static_cast<std::uint64_t>(reinterpret_cast<char const*>(p.get()) - s.local_base);
    return {s.peer_bases[pe] + offset, s.keys.rkey_wire(offset, pe), true};
  }

  /// atomic()'s work on the word's bits (inline: see lead_write).
  template <atomic_op Op, class U>
  __device__ GPUCOMM_FORCEINLINE static U atomic_words(comm<IBGDAPost> const& c, verbs_gpu::remote_buf to, U v, U cmpv,
                                                       int pe) {
    auto const& q = queue(c, pe);
    constexpr bool fetching = Op != atomic_op::add && Op != atomic_op::set;
    // What the NIC does for each op: transport/nic/atomics.cuh.
    auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t) -> std::uint32_t {
      verbs_gpu::local_buf const result =
          fetching ? claim_result_slot(c, q, s.index, sizeof(U)) : discard_slot(c, sizeof(U));
      return detail::build_nic_atomic<U>(Op, s, result, to, v, cmpv);
    };
    constexpr std::uint32_t wqebbs = detail::nic_atomic_wqebbs(Op, sizeof(U));
    std::uint64_t index = 0;
    if (!posted(q.post(verbs_gpu::detail::one_thread{}, wqebbs, 1, build, verbs_gpu::post_flags::none, &index),
                "atomic")) {
      return U{};
    }
    if constexpr (!fetching) {
      return U{};
    } else {
      bool const completed = finish(q, index, "atomic");
      U const result = completed ? read_result<U>(c, q, index) : U{};
      release_result_slot(c, q, index);
      return result;
    }
  }

  /// Whether the NIC reaches [p, p + bytes) of local memory (the local heap, or a registered
  /// buffer), and if so *out: its address and key. Every thread of a group gets the same answer.
  __device__ static bool nic_reaches(comm<IBGDAPost> const& c, void const* p, std::size_t bytes, char const* op,
                                     verbs_gpu::local_buf* out) {
    device_state const& s = c.state();
    auto const addr = reinterpret_cast<std::uintptr_t>(p);
    if (detail::range_within(addr, bytes, reinterpret_cast<std::uintptr_t>(s.local_base), s.local_bytes)) {
      auto const offset = static_cast<std::uint64_t>(addr - reinterpret_cast<std::uintptr_t>(s.local_base));
      *out = {static_cast<std::uint64_t>(addr), 0, s.keys.lkey_wire(offset), true};
      return true;
    }
    return registered(c, p, bytes, op, out);
  }

  /// nic_reaches' search of the registered buffers, out of line: only buffers outside the heap
  /// come here.
  __device__ GPUCOMM_NOINLINE static bool registered(comm<IBGDAPost> const& c, void const* p, std::size_t bytes,
                                                     char const* op, verbs_gpu::local_buf* out) {
    if constexpr (GPUCOMM_DEBUG) {
      if (p == nullptr) detail::device_misuse(op, "the local buffer is null");
    }
    detail::local_region const* r = detail::registered_region(*c.state().regions, p, bytes);
    if (r == nullptr) return false;
    *out = {static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)), 0, r->lkey_wire, true};
    return true;
  }

  using staged_op = detail::staged_op;

  /// The leader's side of one staged operation (detail/staging.cuh's run). Its steps are out of
  /// line and independent of the group type: one copy of them per translation unit.
  struct staging_run : detail::staging_run_base<staging_run> {
    comm<IBGDAPost> const& c;
    verbs_gpu::send_queue const& q;
    verbs_gpu::remote_buf peer;
    int pe;
    bool ok = true;
    std::uint64_t last = 0;  ///< the last WQE posted

    __device__ staging_run(comm<IBGDAPost> const& c_, staged_op const& what_, verbs_gpu::send_queue const& q_,
                           verbs_gpu::remote_buf peer_, std::size_t bytes_, int pe_, unsigned slot_index)
        : staging_run_base(what_, c_.state().staging, c_.state().staging_slots, slot_index, bytes_),
          c(c_),
          q(q_),
          peer(peer_),
          pe(pe_) {}

    /// Before the group copies chunk k: a put waits until the NIC has read the half's previous
    /// chunk; a get waits for chunk k's read, acquiring its completion (system scope), which the
    /// group sync that follows extends to the threads that copy it out.
    __device__ GPUCOMM_NOINLINE void before_copy(std::size_t k) {
      if (!is_get()) {
        drain_half(k & 1);
      } else if (ok) {
        ok = finish(q, reading[k & 1], what.name());
      }
    }
    /// After the group copied chunk k (the group sync before this orders the threads' accesses to
    /// the half before the doorbell, whose system-scope release fence is cumulative over them): a
    /// put posts it and notes it in the slot; a get reads chunk k + 2 into the half.
    __device__ GPUCOMM_NOINLINE void after_copy(std::size_t k) {
      if (is_get()) {
        if (k + 2 < chunks()) reading[k & 1] = post_read(k + 2);
        return;
      }
      std::uint64_t const index = post_chunk(k);
      if (ok) {
        slot.pending[k & 1] = index + 1;
        slot.pending_queue[k & 1] = static_cast<std::uint32_t>(&q - c.state().queues);
      }
    }
    /// A put_signal's signal, a blocking put's wait; then the slot goes back.
    __device__ GPUCOMM_NOINLINE void end(bool blocking) {
      if (!is_get()) {
        if (ok && what.kind == staged_op::put_signal) ok = post_signal(c, q, what.sig, what.value, what.op, pe, &last);
        if (ok && blocking) ok = finish(q, last, what.name());
      }
      detail::give_back_staging_slot(slot);
    }
    /// Waits until the NIC is done with the half's last WQE (a put's RDMA WRITE reading it).
    __device__ GPUCOMM_NOINLINE void drain_half(unsigned h) {
      if (slot.pending[h] == 0) return;
      finish(c.state().queues[slot.pending_queue[h]], slot.pending[h] - 1, what.name());
      slot.pending[h] = 0;
    }
    __device__ std::uint64_t post_read(std::size_t k) { return post_chunk(k); }
    /// RDMA WRITE of chunk k from its half, or READ into it; its index.
    __device__ std::uint64_t post_chunk(std::size_t k) {
      verbs_gpu::local_buf const staging{reinterpret_cast<std::uint64_t>(half(k)),
                                         static_cast<std::uint32_t>(length(k)), c.state().staging_lkey_wire, true};
      verbs_gpu::remote_buf const far{peer.addr + k * half_bytes, peer.rkey, true};
      bool const get = is_get();
      auto build = [&](verbs_gpu::wqe_slot const& w, std::uint32_t) {
        return get ? verbs_gpu::build_rdma_read(w, staging, far) : verbs_gpu::build_rdma_write(w, staging, far);
      };
      ok = ok && posted(q.post(verbs_gpu::detail::one_thread{}, 1, 1, build, verbs_gpu::post_flags::none, &last),
                        what.name());
      return last;
    }
  };

  /// A put, put_signal or get whose local buffer the NIC does not reach, through a staging slot
  /// (see the header comment and detail/staging.cuh); the leader's steps are staging_run's.
  template <group G>
  __device__ GPUCOMM_NOINLINE static void staged(comm<IBGDAPost> const& c, G const& g, staged_op const& what,
                                                 void* local_buffer, verbs_gpu::remote_buf peer, std::size_t bytes,
                                                 int pe, bool blocking) {
    group_sync(g);
    unsigned const slot_index = detail::take_staging_slot(g, c.state().staging_slots, what.name(), c.control_header());
    staging_run run{c, what, queue(c, pe), peer, bytes, pe, slot_index};
    detail::run_staged(g, run, local_buffer, what.kind == staged_op::get, blocking);
  }

  /// Where queue q's WQE at `index` has its result slot and owner word (one per WQEBB of the ring).
  __device__ static std::size_t result_index(comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q,
                                             std::uint64_t index) {
    auto const queue_index = static_cast<std::size_t>(&q - c.state().queues);
    return (queue_index << q.log_depth) + static_cast<std::size_t>(index & (q.depth() - 1));
  }

  __device__ static cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> result_owner(
      comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q, std::uint64_t index) {
    return cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(
        c.state().result_owners[result_index(c, q, index)]);
  }

  /// The result slot of the fetching atomic whose WQE is at `index`, taken for it. The WQE one ring
  /// earlier that used the slot completed before this one could be reserved, but its thread may
  /// not have read the value yet: wait until it released the slot.
  __device__ static verbs_gpu::local_buf claim_result_slot(comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q,
                                                           std::uint64_t index, std::uint32_t bytes) {
    auto owner = result_owner(c, q, index);
    // Acquire, pairing with release_result_slot's release: the earlier owner's read of the slot
    // happens before this WQE is posted, so before the NIC writes the slot again.
    detail::spin_until([&] { return owner.load(cuda::memory_order_acquire) == 0; },
                       {"atomic (waiting for the result slot's earlier owner to read it)",
                        &c.state().result_owners[result_index(c, q, index)], "==", 0},
                       c.control_header());
    owner.store(index + 1, cuda::memory_order_relaxed);  // only this thread writes it until released
    return {reinterpret_cast<std::uint64_t>(c.state().results + result_index(c, q, index)), bytes,
            c.state().results_lkey_wire, true};
  }

  /// The word that takes the old value of a non-fetching atomic or a signal, never read.
  __device__ static verbs_gpu::local_buf discard_slot(comm<IBGDAPost> const& c, std::uint32_t bytes) {
    device_state const& s = c.state();
    std::size_t const slots = static_cast<std::size_t>(c.npes()) * s.qps_per_peer << s.queues[0].log_depth;
    return {reinterpret_cast<std::uint64_t>(s.results + slots), bytes, s.results_lkey_wire, true};
  }

  template <class U>
  __device__ static U read_result(comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q, std::uint64_t index) {
    // Relaxed at system scope: the NIC wrote it before the CQE that finish() acquired.
    U const raw = cuda::atomic_ref<U, cuda::thread_scope_system>(
                      *reinterpret_cast<U*>(c.state().results + result_index(c, q, index)))
                      .load(cuda::memory_order_relaxed);
    if constexpr (sizeof(U) == 4)
      return verbs_gpu::fetched32(raw);
    else
      return raw;
  }

  /// Hands the slot on (also when the atomic failed: a later WQE waits for it).
  __device__ static void release_result_slot(comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q,
                                             std::uint64_t index) {
    // Release: orders read_result's load before the next owner's claim (claim_result_slot).
    result_owner(c, q, index).store(0, cuda::memory_order_release);
  }

  /// Whether a post went through; an error CQE is already recorded (the host reports it), a
  /// debug-build timeout or an unpostable batch traps.
  __device__ static bool posted(status st, char const* op) {
    if (st == status::ok) return true;
    if (st == status::timeout) detail::device_misuse(op, "the send queue made no progress (timeout)");
    if (st == status::invalid) detail::device_misuse(op, "the batch does not fit the send queue");
    return false;  // status::error: the QP is in error, reported to the host
  }

  /// Waits until the WQE at `index` has completed.
  __device__ static bool finish(verbs_gpu::send_queue const& q, std::uint64_t index, char const* op) {
    return posted(q.wait_complete(index), op);
  }

  /// A put_signal's signal update.
  struct signal_update {
    sym_ptr<signal_t> sig;
    signal_t value;
    signal_op op;
  };

  /// The leader's part of put and put_signal: the RDMA WRITE, then the signal when there is one
  /// (an empty put_signal still updates it), then the wait when blocking. Independent of the element
  /// type. Inline, like the other lead_* parts and atomic_words: out of line they make back-to-back
  /// posting slower, for less PTX (docs/contributing/benchmarks.md, "Compile cost").
  __device__ GPUCOMM_FORCEINLINE static void lead_write(comm<IBGDAPost> const& c, int pe, char const* op,
                                                        verbs_gpu::remote_buf to, void const* src,
                                                        verbs_gpu::local_buf const& from, std::size_t bytes,
                                                        signal_update const* signal, bool blocking) {
    auto const& q = queue(c, pe);
    std::uint64_t last = 0;
    bool const wrote = post_write(q, op, to, src, from, bytes, &last);
    bool const done = signal == nullptr ? wrote
                                        : (wrote || bytes == 0) &&
                                              post_signal(c, q, signal->sig, signal->value, signal->op, pe, &last);
    if (done && blocking) finish(q, last, op);
  }

  /// The leader's part of signal: one atomic WQE.
  __device__ GPUCOMM_FORCEINLINE static void lead_signal(comm<IBGDAPost> const& c, sym_ptr<signal_t> sig,
                                                         signal_t value, signal_op op, int pe) {
    std::uint64_t last = 0;
    post_signal(c, queue(c, pe), sig, value, op, pe, &last);
  }

  /// The leader's part of fence: a fencing NOP on each of the group's QPs with work in flight.
  /// Unsignalled and not rung: the group's next WQE on that QP rings for it (a doorbell covers every
  /// WQE before it), and quiet flushes it otherwise.
  __device__ GPUCOMM_FORCEINLINE static void lead_fence(comm<IBGDAPost> const& c) {
    for (int pe = 0; pe < c.npes(); ++pe) {
      auto const& q = queue(c, pe);
      if (!in_flight(q)) continue;
      posted(q.post(verbs_gpu::detail::one_thread{}, 1, 1, verbs_gpu::detail::nop_builder{},
                    verbs_gpu::post_flags::fence | verbs_gpu::post_flags::unsignaled |
                        verbs_gpu::post_flags::defer_doorbell),
             "fence");
    }
  }

  /// The leader's part of quiet: every one of the group's QPs complete.
  __device__ GPUCOMM_FORCEINLINE static void lead_quiet(comm<IBGDAPost> const& c) {
    for (int pe = 0; pe < c.npes(); ++pe) quiet_queue(queue(c, pe));
  }

  /// The leader's part of get: RDMA READ into `to` (nic_reaches), the wait when blocking.
  __device__ GPUCOMM_FORCEINLINE static void lead_read(comm<IBGDAPost> const& c, int pe, verbs_gpu::local_buf const& to,
                                                       verbs_gpu::remote_buf from, std::size_t bytes, bool blocking) {
    if (bytes == 0) return;
    auto const& q = queue(c, pe);
    std::uint64_t last = 0;
    bool const read =
        post_chunked(q, "get", bytes, &last, [&](verbs_gpu::wqe_slot const& s, std::size_t at, std::uint32_t len) {
          return verbs_gpu::build_rdma_read(s, {to.addr + at, len, to.lkey, true}, {from.addr + at, from.rkey, true});
        });
    if (read && blocking) finish(q, last, "get");
  }

  /// RDMA WRITE of `bytes` from `src` to `to`, in 1 GiB chunks, or inline when small. The index of
  /// the last WQE goes to *last. False when nothing was posted or the QP failed. `from`: where the
  /// NIC reads src (nic_reaches), unless the write goes inline.
  __device__ static bool post_write(verbs_gpu::send_queue const& q, char const* op, verbs_gpu::remote_buf to,
                                    void const* src, verbs_gpu::local_buf const& from, std::size_t bytes,
                                    std::uint64_t* last) {
    if (bytes == 0) return false;
    if (bytes <= inline_bytes) {
      auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t) {
        return verbs_gpu::build_rdma_write_inline(s, src, static_cast<std::uint32_t>(bytes), to);
      };
      return posted(q.post(verbs_gpu::detail::one_thread{}, 1, 1, build, verbs_gpu::post_flags::none, last), op);
    }
    return post_chunked(q, op, bytes, last, [&](verbs_gpu::wqe_slot const& s, std::size_t at, std::uint32_t len) {
      return verbs_gpu::build_rdma_write(s, {from.addr + at, len, from.lkey, true}, {to.addr + at, to.rkey, true});
    });
  }

  /// Posts ceil(bytes / max_message_bytes) one-WQEBB WQEs built by build(slot, offset, length), in
  /// batches the ring takes; *last is the index of the last one.
  template <class Build>
  __device__ static bool post_chunked(verbs_gpu::send_queue const& q, char const* op, std::size_t bytes,
                                      std::uint64_t* last, Build const& build) {
    std::size_t const chunks = (bytes + max_message_bytes - 1) / max_message_bytes;
    std::size_t const per_batch = q.depth() / 4;
    for (std::size_t first = 0; first < chunks; first += per_batch) {
      auto const n = static_cast<std::uint32_t>(chunks - first < per_batch ? chunks - first : per_batch);
      auto one = [&](verbs_gpu::wqe_slot const& s, std::uint32_t i) {
        std::size_t const at = (first + i) * max_message_bytes;
        std::size_t const len = bytes - at < max_message_bytes ? bytes - at : max_message_bytes;
        return build(s, at, static_cast<std::uint32_t>(len));
      };
      if (!posted(q.post(verbs_gpu::detail::one_thread{}, 1, n, one, verbs_gpu::post_flags::none, last), op)) {
        return false;
      }
      *last += n - 1;  // post() gave the batch's first WQE
    }
    return true;
  }

  /// The signal update, fenced behind everything earlier on the QP. *last gets its index.
  __device__ static bool post_signal(comm<IBGDAPost> const& c, verbs_gpu::send_queue const& q, sym_ptr<signal_t> sig,
                                     signal_t value, signal_op op, int pe, std::uint64_t* last) {
    verbs_gpu::remote_buf const to = remote(c, sig, pe);
    // One post per op, with the op a constant: the WQE's size and builder are fixed at compile time.
    auto post_as = [&](auto op_constant) {
      constexpr signal_op k = decltype(op_constant)::value;
      auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t) {
        return detail::build_nic_signal(k, s, discard_slot(c, 8), to, value);
      };
      return posted(q.post(verbs_gpu::detail::one_thread{}, detail::nic_signal_wqebbs(k), 1, build,
                           verbs_gpu::post_flags::fence, last),
                    "signal");
    };
    if (op == signal_op::set) return post_as(std::integral_constant<signal_op, signal_op::set>{});
    return post_as(std::integral_constant<signal_op, signal_op::add>{});
  }
#endif  // __CUDACC__
};

}  // namespace gpucomm
