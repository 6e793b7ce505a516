#pragma once
// The send queue of one RC QP, posted to by GPU threads (or host threads: everything here is
// __host__ __device__, so the host tests run the same protocol against the NIC model).
//
// Protocol (counters in qp_counters, 64-bit, monotonic, in WQEBBs):
//  1. reserve:  the group's leader takes `n` WQEBBs with one atomic add on `reserved`.
//  2. space:    it waits until base + n fits in the ring above `consumer` (polling the CQ); a full
//               ring is waited out, never overwritten.
//  3. build:    every thread of the group writes its WQEs into its slots with 16-byte stores.
//  4. publish:  after a group sync, the leader waits until `ready == base` (the batches before it
//               are published: this is the ticket that keeps doorbells in order), rings the
//               doorbell if the batching policy says so, then sets `ready = base + n`.
//  5. ring:     (ticket holder only) producer = end; doorbell record = end & 0xffff; doorbell
//               = {end << 8, qpn << 8} as one 64-bit store to the UAR.
//
// Batching policy: a group's batch rings at its end unless it passes post_flags::defer_doorbell;
// a deferred batch rings anyway once `ring_step` WQEBBs are unannounced. Every later ring covers
// earlier deferred WQEs; a queue's sole poster may also ring for them (announce_published). The last WQE of each batch
// asks for a CQE unless post_flags::unsignaled.
//
// Because the ticket orders every doorbell, the doorbell record never goes backwards and no lock
// or atomicMax is needed (cf. rocSHMEM's sq_db_touched ticket; NVSHMEM uses a lock instead).
//
// Lost doorbells: a doorbell is a posted MMIO store that nothing acknowledges, and the NIC model
// drops some on purpose. A wait that sees no completion for a while rings again (after 50 us,
// then twice as long each time up to 10 ms): waiting for space, the ticket holder repeats the
// last ring (ring_again); waiting for a completion, the waiter posts a signalled NOP (first after
// 1 ms: a NOP overwrites the one CQE of a queue that has just failed), whose doorbell covers
// every WQE before it. A repeated ring costs the NIC nothing but a doorbell, and
// the NOP one WQEBB.
//
// Rules for callers: a batch is at most depth/2 WQEBBs; WQEs are at most max_wqe_wqebbs; a batch
// that is never rung (deferred and never followed) never completes.

#include <cuda/atomic>

#include <cstdint>

#include "../config.hpp"
#include "completion_queue.cuh"
#include "detail/memory.cuh"
#include "prm.cuh"
#include "wqe.cuh"

namespace gpucomm::verbs_gpu {

/// Flags of one group batch.
enum class post_flags : std::uint32_t {
  none = 0,
  defer_doorbell = 1u << 0,  ///< ring only if ring_step WQEBBs are unannounced
  unsignaled = 1u << 1,      ///< no CQE for the batch's last WQE
  fence = 1u << 2,           ///< the batch's first WQE waits for every earlier WQE of the QP to complete
                             ///< (fence mode `ctrl_fence`, what rdma-core's IBV_SEND_FENCE sets)
};
GPUCOMM_HD constexpr post_flags operator|(post_flags a, post_flags b) noexcept {
  return static_cast<post_flags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
GPUCOMM_HD constexpr bool has_flag(post_flags f, post_flags bit) noexcept {
  return (static_cast<std::uint32_t>(f) & static_cast<std::uint32_t>(bit)) != 0;
}

using detail::nic_scope;

namespace detail {
/// The calling thread alone, as a group (host and device).
struct one_thread {
  static constexpr unsigned static_size = 1;
  GPUCOMM_HD constexpr unsigned num_threads() const noexcept { return 1; }
  GPUCOMM_HD constexpr unsigned thread_rank() const noexcept { return 0; }
  GPUCOMM_HD constexpr void sync() const noexcept {}
};
/// Builds a NOP (flush and quiet post one).
struct nop_builder {
  GPUCOMM_HD std::uint32_t operator()(wqe_slot const& s, std::uint32_t) const noexcept { return build_nop(s); }
};

/// Tells a send-queue wait when to ring again: when `consumer` has not moved for a while
/// (gpucomm::detail::patience_timer: 50 us, doubling to 10 ms, from the last completion).
struct stall_watch {
  std::uint64_t seen = 0;
  gpucomm::detail::patience_timer timer;
  std::uint32_t rings = 0;  ///< rings again so far

  GPUCOMM_HD GPUCOMM_FORCEINLINE explicit stall_watch(
      std::uint64_t first_ns = gpucomm::detail::patience_timer::first_ns) noexcept
      : timer(first_ns) {}

  GPUCOMM_HD GPUCOMM_FORCEINLINE bool stalled(std::uint64_t consumer) noexcept {
    if (consumer != seen) {
      seen = consumer;
      timer.restart();
    }
    if (!timer.due()) return false;
    ++rings;
    return true;
  }
};
}  // namespace detail

/// Device view of one send queue. Trivially copyable; pass it to kernels by value.
struct send_queue {
  std::byte* ring = nullptr;    ///< WQ buffer: (1 << log_depth) WQEBBs
  std::uint32_t log_depth = 0;  ///< log2 of the depth in WQEBBs (depth <= max_sq_depth)
  std::uint32_t qpn = 0;
  std::uint32_t* dbrec = nullptr;                ///< the SND slot of the QP's doorbell record (BE32)
  std::uint64_t* doorbell = nullptr;             ///< the 8-byte UAR doorbell register mapped for this device
  qp_counters* counters = nullptr;               ///< shared bookkeeping, zero-initialised
  completion_queue cq{};                         ///< the CQ of this send queue
  std::uint32_t ring_step = 32;                  ///< doorbell batching step in WQEBBs (deferred batches)
  nic_scope scope = nic_scope::system;           ///< where the NIC reads the ring and the doorbell record
  std::uint64_t timeout_ns = 20'000'000'000ull;  ///< bound of every wait, encoded (detail/bounded_wait.cuh)
  /// How long wait_complete sees no completion before it posts a NOP to cover a lost doorbell.
  static constexpr std::uint64_t nop_patience_ns = 1'000'000;

  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t depth() const noexcept { return 1ull << log_depth; }
  /// Slack kept free in the ring: `consumer` can trail the true end by up to a WQE's size.
  static constexpr std::uint64_t slack = max_wqe_wqebbs - 1;

  /// The slot of the WQE starting at `index`.
  GPUCOMM_HD GPUCOMM_FORCEINLINE wqe_slot slot(std::uint64_t index, std::uint8_t fm_ce_se = 0) const noexcept {
    return wqe_slot{ring, (depth() << wqebb_shift) - 1, index, qpn, fm_ce_se};
  }

  /// The first error recorded on this queue, if `has_error()`.
  GPUCOMM_HD GPUCOMM_FORCEINLINE bool has_error() const noexcept { return error_word(*counters) != 0; }
  GPUCOMM_HD GPUCOMM_FORCEINLINE cq_error last_error() const noexcept {
    return cq_error::unpack(error_word(*counters));
  }

  /// Polls the CQ once (see poll_send_cq).
  GPUCOMM_HD GPUCOMM_FORCEINLINE status poll() const noexcept { return poll_send_cq(cq, *counters); }

  /// Step 1: reserves n WQEBBs; returns the first one's index.
  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t reserve(std::uint32_t n) const noexcept {
    // Relaxed: the reservation only partitions indices; ordering comes from the space wait and
    // the ready ticket.
    return detail::dev_ref(counters->reserved).fetch_add(n, cuda::memory_order_relaxed);
  }

  /// Step 5, for the ticket holder only (the group for which ready == its base): announces every
  /// WQEBB below `end` to the NIC.
  GPUCOMM_HD GPUCOMM_FORCEINLINE void ring_doorbell(std::uint64_t end) const noexcept {
    // Only the ticket holder writes producer; relaxed, ordered before the doorbell record by the
    // fence below (pollers widen CQE counters against it after acquiring the CQE).
    detail::dev_ref(counters->producer).store(end, cuda::memory_order_relaxed);
    // Release fence (gpu or system scope): orders every WQE store below `end` (this group's, and,
    // through the ticket's acquire, the earlier groups') before the doorbell-record store, so the
    // NIC never fetches a WQE it was told about before the WQE is written.
    detail::fence_release(scope);
    detail::sys_ref(*dbrec).store(to_be32(static_cast<std::uint32_t>(end) & 0xffffu), cuda::memory_order_relaxed);
    // Release fence (gpu or system scope, as above): orders the doorbell-record store before the
    // doorbell store; the NIC reads the record when the doorbell arrives and must find it at least
    // this new. With the record in GPU memory the NIC reads it through the GPU's memory system,
    // where a GPU-scope release has performed it (NVSHMEM and DOCA fence at GPU scope there,
    // shared/reference/ibgda-notes.md section 2.3); a system-scope fence here would wait for the
    // previous doorbell's store to host memory or MMIO to complete, about 1.5 us per post.
    detail::fence_release(scope);
    detail::store_doorbell(doorbell, make_doorbell(end, qpn));
  }

  /// Rings again for every WQEBB below `end`, for a doorbell the NIC may have lost. Ticket holder
  /// only, after its own or an earlier holder's ring_doorbell(end): the doorbell record already
  /// says `end`. The doorbell names the same index; its DS byte (ignored by the NIC on a doorbell)
  /// counts the rings again, so that the register's value changes: the NIC model, which watches a
  /// word of memory, sees a write only as a new value.
  GPUCOMM_HD GPUCOMM_FORCEINLINE void ring_again(std::uint64_t end, std::uint32_t attempt) const noexcept {
    // Release fence at system scope: the doorbell record (stored before the first ring, by this
    // thread or by one whose ticket this thread acquired) is ordered before this doorbell too.
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
    detail::store_doorbell(doorbell, make_doorbell(end, qpn, static_cast<std::uint8_t>(1 + attempt % 63)));
  }

  /// Whether WQEBBs [base, base + n) may be written now.
  GPUCOMM_HD GPUCOMM_FORCEINLINE bool has_space(std::uint64_t base, std::uint32_t n) const noexcept {
    // Acquire: pairs with the poller's release of consumer; the completed WQEs' slots are free.
    return base + n + slack <= detail::dev_ref(counters->consumer).load(cuda::memory_order_acquire) + depth();
  }

  /// Step 2: waits until WQEBBs [base, base + n) may be written (see wait_for_space_slowly).
  GPUCOMM_HD GPUCOMM_FORCEINLINE status wait_for_space(std::uint64_t base, std::uint32_t n) const noexcept {
    return has_space(base, n) ? status::ok : wait_for_space_slowly(base, n);
  }

  /// Polls the CQ until the space is there; if this batch is next in line and earlier deferred
  /// batches are unannounced, rings for them so their completions can come, and rings again when
  /// nothing completes for a while.
  GPUCOMM_HD GPUCOMM_NOINLINE status wait_for_space_slowly(std::uint64_t base, std::uint32_t n) const noexcept {
    detail::deadline const dl(timeout_ns);
    detail::stall_watch watch;
    for (;;) {
      // Acquire: pairs with the poller's release of consumer; the completed WQEs' slots are free.
      std::uint64_t const c = detail::dev_ref(counters->consumer).load(cuda::memory_order_acquire);
      if (base + n + slack <= c + depth()) return status::ok;
      if (has_error()) return status::error;
      // Holding the ticket, no one else rings until this thread publishes; the previous holder's
      // producer update and WQE publication happen before (holds_ticket acquires).
      if (holds_ticket(base)) {
        if (detail::dev_ref(counters->producer).load(cuda::memory_order_relaxed) < base) {
          ring_doorbell(base);
        } else if (watch.stalled(c)) {
          ring_again(base, watch.rings);
        }
      }
      if (poll() == status::error) return status::error;
      if (dl.expired()) return status::timeout;
      detail::spin_pause();
    }
  }

  /// Step 4: publishes [base, base + n) in reservation order and rings per the policy. Called by
  /// one thread after every thread of the group wrote its WQEs and the group synced.
  GPUCOMM_HD GPUCOMM_FORCEINLINE status publish(std::uint64_t base, std::uint32_t n, bool ring_now) const noexcept {
    if (!holds_ticket(base)) {
      status const st = wait_for_ticket(base);
      if (st != status::ok) return st;
    }
    std::uint64_t const end = base + n;
    if (ring_now || end - detail::dev_ref(counters->producer).load(cuda::memory_order_relaxed) >= ring_step) {
      ring_doorbell(end);
    }
    // Release: hands the ticket on. The next holder's ring covers these WQEs if this one did not
    // ring, so the group's WQE stores (ordered before this by the group sync) are released too.
    detail::dev_ref(counters->ready).store(end, cuda::memory_order_release);
    return status::ok;
  }

  /// For a queue with one poster (a host proxy): announces, with one doorbell, every WQEBB published
  /// and not yet announced (its deferred batches). After its own publish the sole poster holds the
  /// ticket (ready is its next base), as ring_doorbell requires.
  GPUCOMM_HD GPUCOMM_FORCEINLINE void announce_published() const noexcept {
    // Relaxed: the sole poster wrote both counters itself.
    std::uint64_t const end = detail::dev_ref(counters->ready).load(cuda::memory_order_relaxed);
    if (detail::dev_ref(counters->producer).load(cuda::memory_order_relaxed) < end) ring_doorbell(end);
  }

  /// Whether the batch starting at `base` is next to publish (its publisher holds the ticket).
  GPUCOMM_HD GPUCOMM_FORCEINLINE bool holds_ticket(std::uint64_t base) const noexcept {
    // Acquire: pairs with the previous holder's release store of ready; its WQEs, producer update
    // and doorbell happen before whatever this holder does with the ticket.
    return detail::dev_ref(counters->ready).load(cuda::memory_order_acquire) == base;
  }

  GPUCOMM_HD GPUCOMM_NOINLINE status wait_for_ticket(std::uint64_t base) const noexcept {
    detail::deadline const dl(timeout_ns);
    while (!holds_ticket(base)) {
      if (has_error()) return status::error;
      if (dl.expired()) return status::timeout;
      detail::spin_pause();
    }
    return status::ok;
  }

  /// Waits until the WQE starting at `index` has completed (a signaled WQE at or after it must
  /// have been rung). When nothing completes for a while, posts a signalled NOP, whose doorbell
  /// covers a lost one.
  GPUCOMM_HD GPUCOMM_NOINLINE status wait_complete(std::uint64_t index) const noexcept {
    detail::deadline const dl(timeout_ns);
    // The first NOP only after 1 ms without a completion: the CQ keeps one CQE, and a NOP on a
    // queue that has just failed would overwrite the error CQE (its syndrome: a bad key, an
    // address out of bounds) with a flush error before this wait reads it. A NIC that answers at
    // all answers well within that.
    detail::stall_watch watch(nop_patience_ns);
    for (;;) {
      std::uint64_t const c = detail::dev_ref(counters->consumer).load(cuda::memory_order_acquire);
      if (c > index) return status::ok;
      status const st = poll();
      if (st == status::error) return st;
      if (st == status::ok) continue;
      if (watch.stalled(c)) {
        status const rung = flush();
        if (rung != status::ok) return rung;
      }
      if (dl.expired()) return status::timeout;
      detail::spin_pause();
    }
  }

  /// Posts a batch of `n_wqes` WQEs of `wqebbs_per_wqe` WQEBBs each from the group `g`: every
  /// thread of g calls it with the same arguments. Thread r builds WQEs r, r + size, ... by calling
  /// `build(slot, i)`, which writes WQE i into `slot` and returns its DS; WQEBBs of the slot the
  /// WQE leaves unused are filled with NOPs. Returns the batch's status to every thread, and the
  /// index of its first WQEBB in `*first_index` if given.
  GPUCOMM_EXEC_CHECK_DISABLE
  template <class G, class Build>
  GPUCOMM_HD status post(G const& g, std::uint32_t wqebbs_per_wqe, std::uint32_t n_wqes, Build const& build,
                         post_flags flags = post_flags::none, std::uint64_t* first_index = nullptr) const {
    std::uint64_t const total = static_cast<std::uint64_t>(wqebbs_per_wqe) * n_wqes;
    if (total == 0 || wqebbs_per_wqe > max_wqe_wqebbs || total > depth() / 2) return status::invalid;
    unsigned const rank = gpucomm::group_rank(g);
    unsigned const size = gpucomm::group_size(g);
    // Leader: steps 1 and 2. The status travels in the top 4 bits of the broadcast word (an index
    // never reaches 2^60).
    std::uint64_t word = 0;
    if (rank == 0) {
      std::uint64_t const base = reserve(static_cast<std::uint32_t>(total));
      status const st = has_error() ? status::error : wait_for_space(base, static_cast<std::uint32_t>(total));
      word = base | (static_cast<std::uint64_t>(st) << 60);
    }
    word = detail::grp_broadcast(g, word);
    auto const st = static_cast<status>(word >> 60);
    std::uint64_t const base = word & ((1ull << 60) - 1);
    if (st != status::ok) return st;
    // Step 3: build in parallel.
    bool const signal_last = !has_flag(flags, post_flags::unsignaled);
    bool const fence_first = has_flag(flags, post_flags::fence);
    for (std::uint32_t i = rank; i < n_wqes; i += size) {
      std::uint64_t const index = base + static_cast<std::uint64_t>(i) * wqebbs_per_wqe;
      auto const completion = (signal_last && i == n_wqes - 1) ? ctrl_cq_update : std::uint8_t{0};
      auto const fence = (fence_first && i == 0) ? ctrl_fence : std::uint8_t{0};
      wqe_slot const s = slot(index, static_cast<std::uint8_t>(completion | fence));
      std::uint32_t const used = wqebbs_for_ds(build(s, i));
      for (std::uint32_t k = used; k < wqebbs_per_wqe; ++k) build_nop(slot(index + k));
    }
    // Group sync: every thread's WQE stores happen before the leader's publish (and its fences).
    gpucomm::group_sync(g);
    status result = status::ok;
    if (rank == 0) {
      result = publish(base, static_cast<std::uint32_t>(total), !has_flag(flags, post_flags::defer_doorbell));
    }
    if (first_index != nullptr) *first_index = base;
    return static_cast<status>(detail::grp_broadcast(g, static_cast<std::uint32_t>(result)));
  }

  /// Posts one signaled NOP and rings: everything posted before it gets announced.
  GPUCOMM_HD inline status flush(std::uint64_t* nop_index = nullptr) const noexcept {
    return post(detail::one_thread{}, 1, 1, detail::nop_builder{}, post_flags::none, nop_index);
  }

  /// Waits until everything this queue had published before the call has completed (posts a
  /// signaled NOP behind it and waits for that). One thread calls it.
  GPUCOMM_HD inline status quiet() const noexcept {
    std::uint64_t nop = 0;
    status const st = flush(&nop);
    if (st != status::ok) return st;
    return wait_complete(nop);
  }
};

}  // namespace gpucomm::verbs_gpu
