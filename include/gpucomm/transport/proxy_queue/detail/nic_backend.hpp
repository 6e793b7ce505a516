#pragma once
// ProxyQueue's NIC backend: carries out one local PE's commands to the peers it reaches through a
// NIC, and every signal and atomic on the memory of PEs that some PE reaches that way (their
// atomicity domain is the NIC's). Host only; run by the PE's proxy thread, which alone posts to
// and polls its queues.
//
// One RC QP per peer (itself included: loopback), made by verbs_gpu's set-up as a host_qp
// (setup.hpp): with ordinary verbs on a real mlx5 NIC (ibv_create_qp, its rings exposed by
// mlx5dv_init_obj), on the firmware model in tests. Either way its CQ is in owner-bit mode (the
// first error is never overwritten) and the proxy posts with verbs_gpu's own send_queue and WQE
// builders, as a GPU thread of IBGDAPost does (send_queue.cuh is __host__ __device__):
//   put         RDMA WRITEs of at most 1 GiB each, the last one signalled;
//   get         RDMA READs, the same way;
//   put_signal  the writes, then the signal update as an atomic WQE with the fence bit: the NIC
//               starts it only after the writes completed, so the data is in place first;
//   signal      the update alone, fenced behind the earlier WQEs to that peer;
//   atomic      the atomic WQE (transport/nic/atomics.cuh); a fetching one's old value
//               lands in the result slot its command names (one the posting thread holds until
//               it has read it: state.hpp), the others' in a slot nobody reads.
// Keys: every block of the symmetric heap is a memory region of its own (transport/nic/endpoints.hpp); the
// PE's key table in host memory (heap_keys.hpp) gives the block's lkey and every PE's rkey by heap
// page. Targets must lie in one live block of the peer's symmetric heap; local buffers in one live
// block of this PE's, or in one of the PE's local_buffers (below: its staging area and the buffers
// of world::register_buffer), which is all the NIC has registered: anything else is refused and
// recorded, never posted. The device stages every other local buffer (device.cuh).
//
// Doorbells: issue() writes a command's WQEs and publishes them without ringing (the send queue's
// defer_doorbell; it rings by itself once ring_step WQEBBs are unannounced); mark(), which the proxy
// thread calls after each batch of commands it read, rings every queue that has WQEs unannounced:
// one doorbell per queue per pass, however many commands the pass carried.
//
// Completion: each command's last WQE asks for a CQE; a command is complete once the QP's
// consumer index (send_queue.cuh, advanced from the CQ) passes it; RC completes in order. A get's
// data and an atomic's fetched value are written into GPU memory by the NIC and the CQE into host
// memory; a GPU that does not order the NIC's writes with what the CPU saw
// (cudaDevAttrGPUDirectRDMAWritesOrdering below Owner) gets them flushed (placement's
// flush_gpu_writes) before such a command is reported complete. An
// error completion moves the QP to error: the commands before the failed WQE completed, the rest
// are recorded as failed (with the syndrome) and completed without effect, and later commands to
// that peer are refused. A queue with work in flight that makes no progress for `stall` gets a
// signalled NOP, which rings the doorbell again: a doorbell the NIC dropped is covered by the
// next (the doorbell record is the source of truth).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../../callback.hpp"
#include "../../../detail/staging.hpp"
#include "../../../verbs_gpu/send_queue.cuh"
#include "../../nic/heap_keys.hpp"
#include "../../nic/atomics.cuh"
#include "../../../transport_concept.hpp"
#include "../command.cuh"
#include "../state.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

/// The local memory outside the heap that one PE's NIC has registered (its staging area, and the
/// buffers of world::register_buffer), with their keys: changed by the world's thread (register_buffer),
/// read by the proxy thread.
class nic_local_buffers {
 public:
  void add(local_region const& r) {
    std::lock_guard<std::mutex> const hold(m_);
    list_.push_back(r);
  }
  void remove(std::uint64_t base) noexcept {
    std::lock_guard<std::mutex> const hold(m_);
    for (std::size_t i = 0; i < list_.size(); ++i) {
      if (list_[i].base != base) continue;
      list_.erase(list_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
  /// The lkey (wire order) of the buffer holding all of [address, address + bytes), or
  /// heap_keys::none.
  std::uint32_t lkey_wire(std::uint64_t address, std::uint64_t bytes) const {
    std::lock_guard<std::mutex> const hold(m_);
    for (local_region const& r : list_)
      if (range_within(address, bytes, r.base, r.bytes)) return r.lkey_wire;
    return heap_keys::none;
  }

 private:
  mutable std::mutex m_;
  std::vector<local_region> list_;
};

class nic_backend {
 public:
  /// log2 of each QP's send queue depth in WQEBBs.
  static constexpr std::uint32_t log_depth = 10;
  /// The largest message one WQE carries (mlx5 log_max_msg = 30).
  static constexpr std::uint64_t max_message_bytes = std::uint64_t{1} << 30;
  /// How long a queue with work in flight may make no progress before the backend rings again.
  static constexpr auto stall = std::chrono::milliseconds(1);

  struct placement {
    int pe = 0;                        ///< the local PE whose commands this backend carries out
    int npes = 0;                      ///< PEs in the world
    std::uint64_t slot = 0;            ///< its heap slot, as commands name it and the NIC reaches it
    std::uint64_t slot_bytes = 0;      ///< the slot's size
    heap_keys keys;                    ///< its key table (host memory): a block's lkey and every PE's rkey, by page
    std::vector<std::uint64_t> bases;  ///< [pe]: where every PE's slot starts, as its NIC reaches it
    std::uint64_t* results = nullptr;  ///< [result_slots + 1]: result slots, then the discarded values' word
    std::uint32_t results_lkey = 0;    ///< their registration
    std::uint32_t result_slots = 0;    ///< slots a command may name
    std::vector<std::uint8_t> paths;   ///< [peer]: proxy_path bits
    /// The registered local memory outside the heap (shared with the set-up, which changes it).
    std::shared_ptr<nic_local_buffers const> buffers;
    /// Makes the NIC's completed writes into this PE's GPU memory visible to the GPU
    /// (cudaDeviceFlushGPUDirectRDMAWrites); the error's text, or empty. Unset where the GPU
    /// orders them with their completions (and on the model, which writes with CUDA copies).
    callback<std::string()> flush_gpu_writes;
  };

  /// Posts to `queues`, [peer]: host-posted RC QPs, connected, with owner-bit CQs.
  nic_backend(std::vector<verbs_gpu::send_queue> const& queues, placement p, proxy_failures& failures);

  nic_backend(nic_backend const&) = delete;
  nic_backend& operator=(nic_backend const&) = delete;

  /// Whether command c is this backend's: data to a peer reached through the NIC, or a signal or
  /// atomic (the GPU does those itself where the NIC is not their domain).
  bool takes(proxy_queue::command const& c) const;

  /// Posts command `c` with ticket `ticket`. Returns true when it is complete already: refused or
  /// failed (and recorded).
  bool issue(proxy_queue::command const& c, std::uint64_t ticket);

  /// After a batch of issue()s: one doorbell for each queue whose WQEs are not announced yet. This
  /// thread alone posts, so after its own publish it holds each queue's ticket.
  void mark();

  /// Commands posted and not yet complete.
  bool busy() const;

  /// Calls done(ticket) for every command that completed, or failed.
  template <class Done>
  void poll(Done&& done) {
    auto const now = std::chrono::steady_clock::now();
    for (std::size_t peer = 0; peer < queues_.size(); ++peer) {
      queue& q = *queues_[peer];
      if (q.pending.empty()) continue;
      verbs_gpu::send_queue const& sq = q.sq;
      sq.poll();
      if (sq.has_error()) {
        fail_queue(q, static_cast<int>(peer), done);
        continue;
      }
      // Acquire: pairs with the poller's release of consumer (itself: this thread).
      std::uint64_t const consumer = verbs_gpu::detail::dev_ref(sq.counters->consumer).load(cuda::memory_order_acquire);
      bool progressed = false, flushed = false;
      while (!q.pending.empty() && q.pending.front().last < consumer) {
        make_visible(q.pending.front(), static_cast<int>(peer), flushed);
        done(q.pending.front().ticket);
        q.pending.pop_front();
        progressed = true;
      }
      if (progressed) {
        q.since = now;
      } else if (now - q.since > stall) {
        // A doorbell may have been dropped: a NOP rings again, and the NIC then runs to it.
        q.since = now;
        if (sq.flush() != verbs_gpu::status::ok && sq.has_error()) fail_queue(q, static_cast<int>(peer), done);
      }
    }
  }

 private:
  struct pending_command {
    std::uint64_t last = 0;  // the first WQEBB of its last WQE
    std::uint64_t ticket = 0;
    proxy_queue::command_op op = proxy_queue::command_op::nop;
    std::uint64_t bytes = 0;
  };
  struct queue {
    explicit queue(verbs_gpu::send_queue const& q) : sq(q) {}
    verbs_gpu::send_queue sq;
    std::deque<pending_command> pending;  // posted, not yet complete, in order
    std::chrono::steady_clock::time_point since{};
  };

  bool in_slot(std::uint64_t address, std::uint64_t bytes) const;
  /// The lkey (wire order) of the one live heap block holding all of [address, address + bytes),
  /// or heap_keys::none.
  std::uint32_t block_lkey(std::uint64_t address, std::uint64_t bytes) const;
  /// Whether the NIC reaches [address, address + bytes) of the heap: one live block (nothing, for 0
  /// bytes, but the address must still be the heap's).
  bool reachable(std::uint64_t address, std::uint64_t bytes) const;
  /// The lkey (wire order) of the local memory holding all of [address, address + bytes): one live
  /// heap block or one registered buffer; heap_keys::none when neither (a command of 0 bytes names
  /// no local memory: its address is not looked at).
  std::uint32_t local_lkey(std::uint64_t address, std::uint64_t bytes) const;
  bool is_word(std::uint64_t address, std::uint64_t bytes) const;
  static std::string not_in_heap(char const* what);
  static std::string not_registered(char const* what);

  /// The peer's copy of this PE's heap address `address`.
  verbs_gpu::remote_buf remote(int peer, std::uint64_t address) const;
  bool is_result_slot(std::uint64_t address) const;
  /// Where the NIC puts the old value: the command's result slot, or (address 0) the discarded word.
  verbs_gpu::local_buf result_at(std::uint64_t address, std::uint32_t bytes) const;

  /// The writes (or reads) of command c, in WQEs of at most max_message_bytes, in batches the ring
  /// takes, from (or into) local memory of key `lkey`; the last one's index goes to `last`.
  bool post_chunks(queue& q, proxy_queue::command const& c, std::uint64_t ticket, std::uint64_t& last, bool write,
                   std::uint32_t lkey);

  bool post_signal(queue& q, proxy_queue::command const& c, std::uint64_t ticket, std::uint64_t& last);

  bool post_atomic(queue& q, proxy_queue::command const& c, std::uint64_t ticket, std::uint64_t& last);

  /// Whether a post went through; if not, the command is recorded as failed.
  bool posted(queue& q, proxy_queue::command const& c, std::uint64_t ticket, verbs_gpu::status st);

  /// q went to error: the commands before the failed WQE completed, the others failed.
  template <class Done>
  void fail_queue(queue& q, int peer, Done&& done) {
    verbs_gpu::send_queue const& sq = q.sq;
    verbs_gpu::cq_error const e = sq.last_error();
    // Relaxed: only this thread posts, so producer is its own.
    std::uint64_t const failed = verbs_gpu::widen_wqe_counter(
        e.wqe_counter, verbs_gpu::detail::dev_ref(sq.counters->producer).load(cuda::memory_order_relaxed));
    bool flushed = false;
    while (!q.pending.empty() && q.pending.front().last < failed) {
      make_visible(q.pending.front(), peer, flushed);
      done(q.pending.front().ticket);
      q.pending.pop_front();
    }
    if (q.pending.empty()) return;
    pending_command const& first = q.pending.front();
    // Transport retries exhausted: the peer's NIC stopped answering (its host or its port is gone).
    bool const lost =
        sq.last_error().syndrome == static_cast<std::uint8_t>(verbs_gpu::cqe_syndrome::transport_retry_exc_err);
    failures_->record({at_.pe, peer, first.op, first.ticket, first.bytes,
                       "the NIC completed it with an error: " + error_text(q) + " (" +
                           std::to_string(q.pending.size()) + " commands on the queue failed with it)",
                       lost});
    for (auto const& p : q.pending) done(p.ticket);
    q.pending.clear();
  }

  /// Before command p is reported complete: if the GPU reads what the NIC wrote for it (a get's
  /// data, an atomic's fetched value) and the placement flushes, one flush covers every completion
  /// this pass has seen of the queue so far (they were polled before it).
  void make_visible(pending_command const& p, int peer, bool& flushed);

  static std::string error_text(queue& q);

  bool refuse(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why);
  void fail(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why);

  placement at_;
  proxy_failures* failures_;
  std::vector<std::unique_ptr<queue>> queues_;  // [peer]
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "nic_backend.inl"
#endif
