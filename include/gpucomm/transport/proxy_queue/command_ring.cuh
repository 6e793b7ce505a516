#pragma once
// ProxyQueue's command ring: GPU threads (any thread of any CTA, or host threads in the tests)
// post commands; one proxy thread reads them in ticket order. Everything is __host__ __device__
// and goes through cuda::atomic_ref at system scope, so the host tests run the same protocol with
// CPU threads as producers.
//
// Memory (placed by the proxy's host half), each word alone on its cache line:
//   slots            (1 << log_depth) commands, pinned host memory mapped into the GPU: the
//                    producers write them over the bus, the reader reads them from its own memory;
//   ring_counters    `consumed` and `completed`, pinned host memory: written by the reader only,
//                    polled by producers;
//   producer_words   `reserved`, `free_below` and `completed_below`, GPU memory: touched by
//                    producers only, so the ticket and the common cases of the space and completion
//                    checks never cross the bus.
// Every counter is 64-bit and monotonic.
//
// Protocol, producer (one thread per command; a group elects it):
//  1. ticket:  t = reserved.fetch_add(1), relaxed. Tickets order the commands: the reader takes
//              them in ticket order, so one producer's commands are read in the order it posted.
//  2. space:   wait until t < consumed + depth: slot t % depth is free. A full ring is waited
//              out, never overwritten (back-pressure). `free_below` caches the last `consumed`
//              any producer saw: t < free_below + depth (acquire) is enough, and only when it is
//              not does the producer read `consumed` over the bus (acquire) and raise free_below
//              to it (fetch_max, release), so that later producers find the slot free locally.
//  3. write:   the 56 payload bytes of the slot, plain stores.
//  4. publish: slot.seq = t + 1, a release store at system scope: the payload is visible to any
//              reader that acquires seq == t + 1.
// Protocol, reader (the proxy, one thread):
//  1. wait:    slot next % depth holds seq == next + 1 (acquire): the command with ticket `next`.
//  2. read:    copy it out, act on it.
//  3. free:    consumed = next + 1 (release): the reads of the slot happen before any producer's
//              acquire in step 2 lets it rewrite the slot (directly, or through free_below: the
//              producer that raised it acquired `consumed` first and released free_below after,
//              so the order carries over to every producer that acquires free_below).
//  4. complete: completed = n (release) once every command with a ticket below n has taken
//              effect; a producer that acquires completed > t sees the effects of ticket t and of
//              every earlier one (what quiet and the blocking calls wait for). `completed_below`
//              caches it for producers as free_below caches `consumed`, with the same orders.
// A slot's seq is the ticket + 1 of the lap that wrote it, so a slot still holding an earlier
// lap's command never reads as the next one, and no slot is ever cleared.
//
// Rules: a producer that took a ticket must publish it (the reader waits for every ticket in
// order); in debug builds a producer that gives up waiting for space (status timeout) leaves its
// ticket unpublished, and the ring stays stopped there: the caller reports and stops (traps).

#include <cuda/atomic>
#include <nv/target>

#include <cstdint>
#include <cstring>

#include "../../config.hpp"
#include "../../detail/bounded_wait.cuh"
#include "command.cuh"

namespace gpucomm::proxy_queue {

/// The counters the reader writes. One cache line each: the GPU polls them over the bus.
struct ring_counters {
  alignas(64) std::uint64_t consumed = 0;   ///< tickets read: slots below consumed + depth are free
  alignas(64) std::uint64_t completed = 0;  ///< every ticket below it has taken effect
};
static_assert(sizeof(ring_counters) == 128);

/// The counters only producers touch (GPU memory when the GPU posts). One cache line each.
struct producer_words {
  alignas(64) std::uint64_t reserved = 0;         ///< tickets handed out
  alignas(64) std::uint64_t free_below = 0;       ///< a `consumed` some producer has seen
  alignas(64) std::uint64_t completed_below = 0;  ///< a `completed` some producer has seen
};
static_assert(sizeof(producer_words) == 192);

/// How a producer's wait ended.
enum class ring_status : std::uint32_t { ok = 0, timeout = 1 };

namespace detail {
GPUCOMM_HD GPUCOMM_FORCEINLINE cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> sys(std::uint64_t& w) {
  return cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(w);
}

/// Step 3: the payload (bytes 0..55) of `c` into `slot`, plain stores: three 16-byte and one
/// 8-byte store on the device, a memcpy on the host. Published by the release store of seq.
GPUCOMM_HD GPUCOMM_FORCEINLINE void write_payload(command* slot, command const& c) noexcept {
  NV_IF_ELSE_TARGET(NV_IS_DEVICE,
                    (auto const* from = reinterpret_cast<uint4 const*>(&c); auto* to = reinterpret_cast<uint4*>(slot);
                     to[0] = from[0]; to[1] = from[1]; to[2] = from[2];
                     reinterpret_cast<uint2*>(slot)[6] = reinterpret_cast<uint2 const*>(&c)[6];),
                    (std::memcpy(static_cast<void*>(slot), &c, command_payload_bytes);))
}
}  // namespace detail

/// The producers' view of one ring. Trivially copyable; kernels take it by value.
struct command_ring {
  command* slots = nullptr;                      ///< (1 << log_depth) slots, pinned host memory
  std::uint32_t log_depth = 0;                   ///< log2 of the slot count
  ring_counters* counters = nullptr;             ///< zero-initialised, written by the reader
  producer_words* producers = nullptr;           ///< zero-initialised, written by producers
  std::uint64_t timeout_ns = 20'000'000'000ull;  ///< bound of every wait, encoded (detail/bounded_wait.cuh)

  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t depth() const noexcept { return 1ull << log_depth; }

  /// Steps 1-4 for one command, by the calling thread alone; `ticket` receives its ticket (also
  /// when the wait for space timed out: that ticket is then never published).
  GPUCOMM_HD inline ring_status post(command const& c, std::uint64_t& ticket) const noexcept {
    // Relaxed: the ticket only partitions the slots; the space wait and seq order the rest.
    ticket = detail::sys(producers->reserved).fetch_add(1, cuda::memory_order_relaxed);
    if (ring_status const s = wait_for_space(ticket); s != ring_status::ok) return s;
    command* const slot = slots + (ticket & (depth() - 1));
    detail::write_payload(slot, c);
    // Release at system scope: the payload stores above happen before a reader's acquire of this
    // seq (the reader is a CPU thread: system scope, not gpu).
    detail::sys(slot->seq).store(ticket + 1, cuda::memory_order_release);
    return ring_status::ok;
  }

  /// Step 2: until slot `ticket % depth` is free.
  GPUCOMM_HD inline ring_status wait_for_space(std::uint64_t ticket) const noexcept {
    // Acquire: pairs with the release of the producer that raised free_below, which had acquired
    // the reader's `consumed`: the reader's reads of the slot's previous command happen before
    // the caller's writes.
    if (ticket < detail::sys(producers->free_below).load(cuda::memory_order_acquire) + depth()) return ring_status::ok;
    gpucomm::detail::deadline const dl(timeout_ns);
    for (;;) {
      // Acquire: pairs with the reader's release of `consumed` (reader step 3).
      std::uint64_t const consumed = detail::sys(counters->consumed).load(cuda::memory_order_acquire);
      if (ticket < consumed + depth()) {
        // Release: what this thread acquired from the reader travels with the raised mark.
        detail::sys(producers->free_below).fetch_max(consumed, cuda::memory_order_release);
        return ring_status::ok;
      }
      if (dl.expired()) return ring_status::timeout;
      gpucomm::detail::spin_pause();
    }
  }

  /// Tickets handed out so far: every command posted before this call has a ticket below it.
  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t tickets_issued() const noexcept {
    // Acquire: a post that happened before the caller's call (through the caller's own program
    // order or a synchronisation) has its fetch_add ordered before this load.
    return detail::sys(producers->reserved).load(cuda::memory_order_acquire);
  }

  /// Whether every command up to and including `ticket` has taken effect (acquire: their effects
  /// are visible to the caller once this returns true).
  GPUCOMM_HD inline bool is_complete(std::uint64_t ticket) const noexcept {
    // Acquire: pairs with the release of the producer that raised completed_below, which had
    // acquired the reader's `completed`.
    if (ticket < detail::sys(producers->completed_below).load(cuda::memory_order_acquire)) return true;
    // Acquire: pairs with the reader's release of `completed` (reader step 4).
    std::uint64_t const completed = detail::sys(counters->completed).load(cuda::memory_order_acquire);
    if (ticket >= completed) return false;
    // Release: what this thread acquired from the reader travels with the raised mark.
    detail::sys(producers->completed_below).fetch_max(completed, cuda::memory_order_release);
    return true;
  }

  /// Waits until is_complete(ticket).
  GPUCOMM_HD inline ring_status wait_complete(std::uint64_t ticket) const noexcept {
    gpucomm::detail::deadline const dl(timeout_ns);
    while (!is_complete(ticket)) {
      if (dl.expired()) return ring_status::timeout;
      gpucomm::detail::spin_pause();
    }
    return ring_status::ok;
  }
};

/// The reader's side: the proxy thread's cursor over one ring. One reader per ring.
class ring_reader {
 public:
  ring_reader() = default;
  GPUCOMM_HD explicit ring_reader(command_ring const& ring) noexcept : ring_(ring) {}

  /// Reader step 1: the command with the next ticket, or nullptr if it is not published yet. The
  /// pointer stays valid (and the slot untouched by producers) until pop().
  GPUCOMM_HD GPUCOMM_FORCEINLINE command const* peek() const noexcept {
    command* const slot = ring_.slots + (next_ & (ring_.depth() - 1));
    // Acquire: pairs with the producer's release of seq; the payload is visible.
    return detail::sys(slot->seq).load(cuda::memory_order_acquire) == next_ + 1 ? slot : nullptr;
  }

  /// Reader step 3: the peeked command has been read; its slot is free for the lap after.
  GPUCOMM_HD GPUCOMM_FORCEINLINE void pop() noexcept {
    ++next_;
    // Release: the reads of the slot happen before a producer's acquire of this count.
    detail::sys(ring_.counters->consumed).store(next_, cuda::memory_order_release);
  }

  /// Reader step 4: every command with a ticket below `n` has taken effect (n never decreases).
  GPUCOMM_HD GPUCOMM_FORCEINLINE void publish_completed(std::uint64_t n) noexcept {
    // Release: the effects of those commands (and the reader's bookkeeping) happen before a
    // producer's acquire in is_complete.
    detail::sys(ring_.counters->completed).store(n, cuda::memory_order_release);
  }

  /// The ticket peek() looks for.
  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t next_ticket() const noexcept { return next_; }

 private:
  command_ring ring_{};
  std::uint64_t next_ = 0;
};

}  // namespace gpucomm::proxy_queue
