#pragma once
// Completion queue polling for a send queue (requester CQEs) and for responder CQEs
// (RDMA WRITE with immediate).
//
// Two CQ modes, chosen when the CQ is created:
//  - collapsed (`cqc.cc = 1`, `oi = 1`): one entry that the NIC overwrites with every CQE. The
//    poller reads the newest completed WQE index from it and never writes the CQ doorbell record.
//    This is what NVSHMEM, DeepEP and UCX use for GPU-posted RC queues; RC completes in order, so
//    "WQE s is complete" means every WQE before it is too.
//  - owner bit: a ring of 2^k entries; entry ci & (n-1) belongs to software when its opcode is not
//    INVALID and its owner bit equals (ci >> k) & 1. The poller consumes entries in order under a
//    lock and writes its consumer index to the CQ doorbell record.
//
// A CQE names its WQE by a 16-bit wqe_counter (the WQE's first WQEBB). It is widened to 64 bits
// against the producer index (everything rung), which is at most max_sq_depth (32768) ahead of any
// WQE still in flight, so the 16-bit value is unambiguous.
//
// Error CQEs (REQ_ERR, RESP_ERR, anything unexpected) are decoded (opcode, syndrome, vendor
// syndrome, WQE opcode, wqe_counter) and recorded once, sticky, in the queue's counters; every
// later wait on that queue returns status::error. They are never taken for "not yet".

#include <cuda/atomic>

#include <cstdint>

#include "../config.hpp"
#include "detail/memory.cuh"
#include "prm.cuh"

namespace gpucomm::verbs_gpu {

/// Result of a verbs operation or wait.
enum class status : std::uint32_t {
  ok = 0,       ///< done / progress made
  pending = 1,  ///< nothing new yet (polling only)
  error = 2,    ///< an error CQE was seen on this queue (see last_error())
  timeout = 3,  ///< a wait outlasted its bound (detail/bounded_wait.cuh)
  invalid = 4,  ///< the request cannot be posted (too large for the ring, zero size)
};

/// Name of a status value.
GPUCOMM_HD constexpr char const* status_name(status s) noexcept {
  switch (s) {
    case status::ok:
      return "ok";
    case status::pending:
      return "pending";
    case status::error:
      return "error";
    case status::timeout:
      return "timeout";
    case status::invalid:
      return "invalid";
  }
  return "unknown";
}

/// CQ mode, fixed at CQ creation.
enum class cq_mode : std::uint32_t { collapsed = 0, owner_bit = 1 };

/// A decoded error CQE.
struct cq_error {
  cqe_opcode opcode = cqe_opcode::invalid;  ///< REQ_ERR, RESP_ERR, or an unexpected opcode
  std::uint8_t syndrome = 0;                ///< cqe_syndrome value
  std::uint8_t vendor_syndrome = 0;
  std::uint8_t wqe_opcode = 0;    ///< opcode of the failed WQE
  std::uint16_t wqe_counter = 0;  ///< its first WQEBB, 16 bits

  GPUCOMM_HD constexpr char const* opcode_str() const noexcept { return cqe_opcode_name(opcode); }
  GPUCOMM_HD constexpr char const* syndrome_str() const noexcept { return cqe_syndrome_name(syndrome); }
  GPUCOMM_HD constexpr char const* wqe_opcode_str() const noexcept { return opcode_name(wqe_opcode); }

  /// Packs into one word (bit 63 set = valid) so the first error can be recorded with one CAS.
  GPUCOMM_HD constexpr std::uint64_t pack() const noexcept {
    return (1ull << 63) | (static_cast<std::uint64_t>(opcode) << 40) | (static_cast<std::uint64_t>(wqe_opcode) << 32) |
           (static_cast<std::uint64_t>(vendor_syndrome) << 24) | (static_cast<std::uint64_t>(syndrome) << 16) |
           wqe_counter;
  }
  GPUCOMM_HD static constexpr cq_error unpack(std::uint64_t w) noexcept {
    cq_error e;
    e.opcode = static_cast<cqe_opcode>((w >> 40) & 0xf);
    e.wqe_opcode = static_cast<std::uint8_t>(w >> 32);
    e.vendor_syndrome = static_cast<std::uint8_t>(w >> 24);
    e.syndrome = static_cast<std::uint8_t>(w >> 16);
    e.wqe_counter = static_cast<std::uint16_t>(w);
    return e;
  }
};

/// Decodes an error CQE.
GPUCOMM_HD constexpr cq_error decode_error_cqe(err_cqe64 const& e) noexcept {
  cq_error r;
  r.opcode = static_cast<cqe_opcode>(e.op_own >> 4);
  r.syndrome = e.syndrome;
  r.vendor_syndrome = e.vendor_err_synd;
  r.wqe_opcode = static_cast<std::uint8_t>(from_be32(e.s_wqe_opcode_qpn) >> 24);
  r.wqe_counter = from_be16(e.wqe_counter);
  return r;
}

/// Shared bookkeeping of one send queue and its CQ: all 64-bit, in WQEBBs, monotonic.
/// Lives in memory every posting thread can reach (GPU global memory for GPU producers, host
/// memory for host producers); zero-initialise before first use.
struct alignas(128) qp_counters {
  std::uint64_t reserved;  ///< WQEBBs handed out (one atomic add per group batch)
  std::uint8_t pad0[56];
  std::uint64_t ready;     ///< all WQEBBs below are written and published; the group whose
                           ///< reservation starts here holds the publish/doorbell ticket
  std::uint64_t producer;  ///< WQEBBs announced to the NIC (doorbell record + doorbell)
  std::uint64_t consumer;  ///< one past the first WQEBB of the newest completed WQE:
                           ///< every WQEBB below is reusable (a lower bound)
  std::uint64_t cq_ci;     ///< owner-bit CQ: CQEs consumed
  std::uint64_t error;     ///< first cq_error, packed; 0 = none
  std::uint32_t cq_lock;   ///< owner-bit CQ: held while consuming entries
  std::uint8_t pad1[20];
};
static_assert(sizeof(qp_counters) == 128);

namespace detail {
template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE cuda::atomic_ref<T, cuda::thread_scope_device> dev_ref(T& v) noexcept {
  return cuda::atomic_ref<T, cuda::thread_scope_device>(v);
}
template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE cuda::atomic_ref<T, cuda::thread_scope_system> sys_ref(T& v) noexcept {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(v);
}
}  // namespace detail

/// The 64-bit index of the WQE a CQE names, from its 16-bit wqe_counter and a reference index
/// `ref` (the producer index: everything rung) with ref - 65536 < true index < ref.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint64_t widen_wqe_counter(std::uint16_t counter,
                                                                         std::uint64_t ref) noexcept {
  if (ref == 0) return counter;
  return ref - 1 - static_cast<std::uint16_t>(static_cast<std::uint16_t>(ref - 1) - counter);
}
static_assert(widen_wqe_counter(0xffff, 0x10001) == 0xffff);
static_assert(widen_wqe_counter(0x0000, 0x10001) == 0x10000);
static_assert(widen_wqe_counter(0x0005, 0x30000) == 0x20005);

/// Device view of a CQ. Trivially copyable.
struct completion_queue {
  cqe64* cqes = nullptr;           ///< 1 entry (collapsed) or 2^log_ncqe entries, initialised to 0xff
  std::uint32_t* dbrec = nullptr;  ///< CQ doorbell record: [0] consumer index (BE, 24 bits)
  std::uint32_t log_ncqe = 0;
  cq_mode mode = cq_mode::collapsed;
  std::uint32_t cqn = 0;

  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t ncqe() const noexcept { return 1u << log_ncqe; }

  /// Loads the tail word {wqe_counter, signature, op_own} of entry i. Acquire at system scope:
  /// pairs with the NIC's CQE write, so the rest of the CQE, and data the completed operation
  /// wrote into local memory (RDMA READ, fetched atomics), are visible after it.
  GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t load_tail(std::uint64_t i) const noexcept {
    auto* p = reinterpret_cast<std::uint32_t*>(reinterpret_cast<unsigned char*>(&cqes[i]) + cqe_tail_word_offset);
    return detail::sys_ref(*p).load(cuda::memory_order_acquire);
  }

  /// Reads entry i as an error CQE, consistent with `tail` (retried if the NIC overwrote the
  /// collapsed entry meanwhile; after a few tries the newest copy is used, it is an error too).
  GPUCOMM_HD inline cq_error read_error(std::uint64_t i, std::uint32_t tail) const noexcept {
    err_cqe64 e{};
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto const* words = reinterpret_cast<std::uint32_t const*>(&cqes[i]);
      auto* out = reinterpret_cast<std::uint32_t*>(&e);
      for (int w = 8; w < 16; ++w) {
        out[w] = detail::sys_ref(const_cast<std::uint32_t&>(words[w])).load(cuda::memory_order_relaxed);
      }
      // Acquire fence: the field loads above happen before the re-check of the tail word.
      cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
      std::uint32_t const again = load_tail(i);
      if (again == tail) break;
      tail = again;
    }
    cq_error r = decode_error_cqe(e);
    r.opcode = cqe_tail_opcode(tail);
    r.wqe_counter = cqe_tail_wqe_counter(tail);
    return r;
  }
};

/// Records the first error of a queue; later ones are dropped (the QP is in error state anyway).
GPUCOMM_HD GPUCOMM_FORCEINLINE void record_error(qp_counters& c, cq_error const& e) noexcept {
  std::uint64_t expected = 0;
  detail::dev_ref(c.error).compare_exchange_strong(expected, e.pack(), cuda::memory_order_relaxed);
}

/// The recorded error of a queue, if any (valid when the returned word's bit 63 is set).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint64_t error_word(qp_counters& c) noexcept {
  return detail::dev_ref(c.error).load(cuda::memory_order_relaxed);
}

/// Polls the send queue's CQ once: advances `c.consumer` past the newest completed WQE.
/// Returns ok when something completed, pending when nothing new, error on an error CQE (or when
/// one was recorded before). Any thread may call it at any time.
GPUCOMM_HD inline status poll_send_cq(completion_queue const& cq, qp_counters& c) noexcept {
  if (error_word(c) != 0) return status::error;
  if (cq.mode == cq_mode::collapsed) {
    std::uint32_t const tail = cq.load_tail(0);
    cqe_opcode const op = cqe_tail_opcode(tail);
    if (op == cqe_opcode::invalid) return status::pending;
    if (op != cqe_opcode::req) {
      record_error(c, cq.read_error(0, tail));
      return status::error;
    }
    // Producer after the CQE (the acquire above orders it): the NIC only completes rung WQEs, and
    // the ringer stores producer before it rings, so this producer is at least the CQE's WQE + 1.
    std::uint64_t const ref = detail::dev_ref(c.producer).load(cuda::memory_order_relaxed);
    std::uint64_t const s = widen_wqe_counter(cqe_tail_wqe_counter(tail), ref);
    // Release: a thread that sees the new consumer and reuses the slots also sees what the
    // completed operations wrote (acquired above).
    std::uint64_t const old = detail::dev_ref(c.consumer).fetch_max(s + 1, cuda::memory_order_acq_rel);
    return old < s + 1 ? status::ok : status::pending;
  }
  // Owner-bit mode: one consumer at a time. A thread that finds the lock taken reports pending;
  // the holder makes the progress.
  std::uint32_t unlocked = 0;
  if (!detail::dev_ref(c.cq_lock).compare_exchange_strong(unlocked, 1u, cuda::memory_order_acquire,
                                                          cuda::memory_order_relaxed)) {
    return status::pending;
  }
  status result = status::pending;
  std::uint64_t ci = detail::dev_ref(c.cq_ci).load(cuda::memory_order_relaxed);
  std::uint64_t const mask = cq.ncqe() - 1;
  for (;;) {
    std::uint32_t const tail = cq.load_tail(ci & mask);
    cqe_opcode const op = cqe_tail_opcode(tail);
    unsigned const owner = cqe_tail_op_own(tail) & 1u;
    if (op == cqe_opcode::invalid || owner != ((ci >> cq.log_ncqe) & 1u)) break;
    if (op != cqe_opcode::req) {
      record_error(c, cq.read_error(ci & mask, tail));
      result = status::error;
      ++ci;
      break;
    }
    std::uint64_t const ref = detail::dev_ref(c.producer).load(cuda::memory_order_relaxed);
    std::uint64_t const s = widen_wqe_counter(cqe_tail_wqe_counter(tail), ref);
    detail::dev_ref(c.consumer).fetch_max(s + 1, cuda::memory_order_acq_rel);
    result = status::ok;
    ++ci;
  }
  detail::dev_ref(c.cq_ci).store(ci, cuda::memory_order_relaxed);
  if (cq.dbrec != nullptr) {
    // Release fence at system scope: our reads of the consumed CQEs happen before the NIC may
    // overwrite those entries, which it does only after it sees this consumer index.
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
    detail::sys_ref(cq.dbrec[cq_dbr_set_ci])
        .store(to_be32(static_cast<std::uint32_t>(ci) & 0xffffffu), cuda::memory_order_relaxed);
  }
  // Release: hands the CQ (and cq_ci) to the next poller.
  detail::dev_ref(c.cq_lock).store(0u, cuda::memory_order_release);
  return result;
}

/// A responder-side completion (RDMA WRITE with immediate arrived).
struct recv_completion {
  cqe_opcode opcode = cqe_opcode::invalid;
  std::uint32_t imm = 0;  ///< host order
  std::uint32_t byte_count = 0;
  std::uint32_t qpn = 0;
  cq_error error{};  ///< valid when opcode is an error opcode
};

/// Takes the next entry of an owner-bit receive CQ, `ci` being this CQ's consumer count (one
/// consumer thread at a time). Returns ok and fills `out`, pending, or error (also fills `out`).
GPUCOMM_HD inline status poll_recv_cq(completion_queue const& cq, std::uint64_t& ci, recv_completion& out) noexcept {
  std::uint64_t const mask = cq.ncqe() - 1;
  std::uint32_t const tail = cq.load_tail(ci & mask);
  cqe_opcode const op = cqe_tail_opcode(tail);
  if (op == cqe_opcode::invalid || (cqe_tail_op_own(tail) & 1u) != ((ci >> cq.log_ncqe) & 1u)) {
    return status::pending;
  }
  cqe64 const& e = cq.cqes[ci & mask];
  out.opcode = op;
  status st = status::ok;
  if (op == cqe_opcode::req_err || op == cqe_opcode::resp_err) {
    out.error = cq.read_error(ci & mask, tail);
    st = status::error;
  } else {
    out.imm = from_be32(detail::sys_ref(const_cast<std::uint32_t&>(e.imm_inval_pkey)).load(cuda::memory_order_relaxed));
    out.byte_count =
        from_be32(detail::sys_ref(const_cast<std::uint32_t&>(e.byte_cnt)).load(cuda::memory_order_relaxed));
    out.qpn = from_be32(detail::sys_ref(const_cast<std::uint32_t&>(e.sop_drop_qpn)).load(cuda::memory_order_relaxed)) &
              0xffffffu;
  }
  ++ci;
  if (cq.dbrec != nullptr) {
    // Release fence at system scope: the CQE reads above happen before the NIC may reuse the entry.
    cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
    detail::sys_ref(cq.dbrec[cq_dbr_set_ci])
        .store(to_be32(static_cast<std::uint32_t>(ci) & 0xffffffu), cuda::memory_order_relaxed);
  }
  return st;
}

}  // namespace gpucomm::verbs_gpu
