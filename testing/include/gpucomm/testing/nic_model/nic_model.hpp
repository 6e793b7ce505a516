#pragma once
// A software mlx5 NIC: a TEST AND DEVELOPMENT TOOL, not a transport.
//
// It consumes exactly what GPU (or host) producers write for a real mlx5 RC QP: the send-queue
// ring of WQEBBs, the doorbell record's SND slot, and an 8-byte doorbell register per QP (here a
// word of ordinary host memory standing in for the UAR page). For every doorbell it reads the
// doorbell record, then validates and executes each new WQE as the hardware would:
//
//   - ctrl: QPN equals the QP's, wqe index equals the WQE's position (16 bits), DS in 1..16 and
//     consistent with the opcode and segments; unknown opcodes or opmods are LOCAL_QP_OP_ERR.
//   - local data segments: lkey registered in the QP's PD, range inside the region, LOCAL_WRITE
//     where the NIC writes locally (READ, fetched atomics): else LOCAL_PROT_ERR. Atomic result
//     segments of the wrong size: LOCAL_LENGTH_ERR.
//   - remote (checked by the nic that owns the peer QP, see respond()): rkey registered in the
//     peer QP's PD, range inside, REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC access: else
//     REMOTE_ACCESS_ERR; misaligned atomics: REMOTE_INVAL_REQ_ERR.
//   - SEND / SEND_IMM: the model has no receive queues, so they fail with RNR_RETRY_EXC_ERR, as
//     on hardware with no receive posted and rnr_retry exhausted. RDMA WRITE with immediate needs
//     a receive CQ on the peer (the model behaves as if a receive were always posted) and writes
//     a RESP_WR_IMM CQE there; without one it is RNR_RETRY_EXC_ERR too.
//
// It performs RDMA WRITE (gather list or inline), WRITE_IMM, READ (scatter list), NOP and all
// atomics (8-byte CS/FA, masked CS/FA on 4 and 8 bytes) between registered memory: host memory
// (accessed directly) and GPU memory of any local GPU (accessed with cudaMemcpyAsync on a
// non-blocking stream). Atomics run at the responder nic, serialised by it: they are atomic with
// respect to every other atomic that nic executes on its memory, whoever the requester (one
// atomicity domain per responder nic), and on host memory also with respect to system-scope
// atomics of CPUs and GPUs.
//
// Fabric (fabric.hpp): one nic per process, talking to the nics of other processes on the same
// host as real NICs talk over a wire. listen(address) serves an abstract unix socket;
// connect_remote(qpn, address, peer_qpn) makes a QP of another nic this QP's RC peer. For such a
// QP the requester (this nic) does everything local (WQE parsing, lkeys, gather/scatter, CQEs)
// and sends the responder's part (rkey, bounds and access checks, the write, read or atomic on
// the responder's memory) to the responder nic, whose server runs the same respond() that local
// peers use and replies with the syndrome and data. A connection that fails or breaks fails the
// WQE with TRANSPORT_RETRY_EXC_ERR (the QP goes to error). The server answers without the
// responder's progress thread: like a NIC, it needs no start() to be a responder.
//
// It writes CQEs in the CQ's mode (collapsed: entry 0; owner bit: the next entry, with the owner
// bit of its pass, waiting for the consumer index in the CQ doorbell record when the CQ is full),
// the tail word {wqe_counter, signature, op_own} last with one release store. A signaled WQE gets
// a REQ CQE; a failing WQE gets a REQ_ERR CQE whether signaled or not and moves the QP to the
// error state, after which every WQE is flushed with a WR_FLUSH_ERR CQE, as hardware does.
//
// Fault injection: doorbell handling delayed, completions delayed, doorbells dropped (the WQEs
// wait for the next doorbell, which covers them because the doorbell record is the source of
// truth), doorbells duplicated (handled twice; the second finds nothing new).
//
// Limits: no packets, no wire timing, no PCIe or MMIO semantics (write-combining, posted-write
// reordering, relaxed ordering), no receive queues, no SRQ, no retransmission, the responder QP
// is not moved to error by a remote error. Fabric: one host only (host byte order on the wire),
// requests of one nic to one responder go one at a time (no pipelining: progress waits for each
// reply), RDMA WRITE with immediate and SEND to a remote peer fail with RNR_RETRY_EXC_ERR (no
// receive queue is modelled across the wire), a broken connection is not re-established until
// connect_remote() is called again, and a WQE whose responder QP number does not exist at the
// responder fails with TRANSPORT_RETRY_EXC_ERR (hardware drops its packets until retries run out).
//
// Locks, always taken in this order (a thread holding one may take only those after it):
//   mu_ -> atomic_mu_ -> { regions_mu_, streams_mu_ }   (the last two are leaves, never nested)
//   mu_          QPs, CQs, client connections, stats_, rng_; held by progress for whole WQEs,
//                including while it waits for a remote reply.
//   atomic_mu_   held around every responder read-modify-write (the atomicity domain).
//   regions_mu_  the region table and the QP -> PD map that responders look keys up in.
//   streams_mu_  the per-device stream map of read_mem/write_mem.
//   fault_mu_    the first internal fault (internal_fault()); a leaf, taken with or without others.
//   server_mu_   the server object; taken with no other lock held (listen, stop), and held while
//                stop() joins the server's threads, which take only the locks below mu_.
// The server's threads take atomic_mu_, regions_mu_ and streams_mu_, never mu_: a requester
// waiting for a reply holds only mu_, so two nics waiting on each other's servers cannot deadlock.

#include <cuda/atomic>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gpucomm/verbs_gpu/completion_queue.cuh>
#include <gpucomm/verbs_gpu/prm.cuh>
#include <gpucomm/verbs_gpu/send_queue.cuh>
#include "fabric.hpp"
#include <gpucomm/transport/nic/model_faults.hpp>
#include <gpucomm/transport/nic/model_hook.hpp>
#include "qp_state.hpp"

namespace gpucomm::verbs_gpu::model {

/// Access rights of a registered region (the ibv_access_flags the model checks).
enum access : std::uint32_t {
  local_write = 1u << 0,
  remote_write = 1u << 1,
  remote_read = 1u << 2,
  remote_atomic = 1u << 3,
  all_access = local_write | remote_write | remote_read | remote_atomic,
};

/// Keys of a registered region.
struct memory_key {
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

/// A CQ for the model: pointers to the entries (initialised to 0xff) and to the CQ doorbell record
/// (owner-bit mode reads the consumer index from it), in host memory, or in GPU memory of
/// `cuda_device` (read and written with cudaMemcpy, as a NIC reaches a GPU-resident CQ over PCIe).
struct cq_config {
  cq_mode mode = cq_mode::collapsed;
  cqe64* cqes = nullptr;
  std::uint32_t log_ncqe = 0;
  std::uint32_t* dbrec = nullptr;
  int cuda_device = -1;  ///< >= 0: entries and doorbell record are GPU memory of this device
  /// cqc.oi: a collapsed CQ without it overruns when a completion arrives while the one before is
  /// unconsumed (its consumer index in the doorbell record has not moved); the model counts and
  /// reports that (nic_stats::cq_overruns, overrun_cqns()).
  bool overrun_ignore = true;
};

/// A QP for the model: pointers to what the producer writes. The ring and the doorbell record are
/// host memory, or GPU memory of `cuda_device` (the model copies new WQEs out with cudaMemcpy after
/// each doorbell, as a NIC reads a GPU-resident ring over PCIe); the doorbell register is host
/// memory the model watches.
struct qp_config {
  std::uint32_t pd = 0;
  std::byte* ring = nullptr;  ///< SQ buffer, (1 << log_depth) WQEBBs
  std::uint32_t log_depth = 0;
  std::uint32_t* dbrec_snd = nullptr;  ///< the doorbell record's SND slot
  std::uint64_t* doorbell = nullptr;   ///< the 8-byte doorbell register (host memory here)
  std::uint32_t send_cqn = 0;
  std::uint32_t recv_cqn = 0;  ///< 0: none (RDMA WRITE with immediate to it fails)
  int cuda_device = -1;        ///< >= 0: ring and doorbell record are GPU memory of this device
  std::uint32_t qpn = 0;       ///< the QP number to use (a firmware's, see nic_backend.hpp); 0: the nic picks
};

/// Fault injection.
struct faults {
  std::chrono::microseconds doorbell_delay{0};    ///< before a doorbell is handled
  std::chrono::microseconds completion_delay{0};  ///< before each CQE is written
  double drop_doorbell = 0.0;                     ///< probability that a doorbell is ignored
  double duplicate_doorbell = 0.0;                ///< probability that a doorbell is handled twice
  std::uint64_t seed = 1;
  /// Probability that a doorbell handling (a CQE) is delayed by doorbell_delay (completion_delay).
  /// Below 1, delays land at random moments, and a long run is not slowed by every operation.
  double doorbell_delay_probability = 1.0;
  double completion_delay_probability = 1.0;
};

/// The model's faults from a transport's options (gpucomm/transport/nic/model_faults.hpp).
inline faults faults_from(nic_model_faults const& o) {
  faults f;
  f.doorbell_delay = std::chrono::microseconds(o.doorbell_delay_us);
  f.completion_delay = std::chrono::microseconds(o.completion_delay_us);
  f.drop_doorbell = o.drop_doorbell;
  f.duplicate_doorbell = o.duplicate_doorbell;
  f.seed = o.seed;
  f.doorbell_delay_probability = o.doorbell_delay_probability;
  f.completion_delay_probability = o.completion_delay_probability;
  return f;
}

struct nic_config {
  faults fault{};
  /// 4-byte fetched values land in network order (as hardware observed by NVSHMEM does), 8-byte
  /// ones in host order. Device code reads them with fetched32().
  bool fetch32_big_endian = true;
  /// Vendor syndrome written into error CQEs (the model's own value; hardware's vary).
  std::uint8_t vendor_syndrome = 0x51;
  /// Benchmark mode: do not read or execute WQEs; complete everything up to the doorbell record
  /// at once with one REQ CQE naming the last WQEBB (exact for 1-WQEBB WQEs).
  bool drain_only = false;
  /// Fabric: how long connect_remote() retries while nobody listens at the responder's address.
  std::chrono::milliseconds connect_timeout{20'000};
  /// Fabric: how long a requester waits to send a request or get its reply before the WQE fails
  /// with TRANSPORT_RETRY_EXC_ERR (a responder process that hangs).
  std::chrono::milliseconds reply_timeout{30'000};
};

/// What a nic did so far: the production-side type, so transports report it without the model.
using nic_stats = ::gpucomm::nic_model_stats;

/// The software NIC. Thread-safe: setup calls, progress() and the background thread serialise on
/// mu_; the fabric server runs beside them (see the lock order at the top of this file).
class nic {
 public:
  explicit nic(nic_config cfg = {}) : cfg_(cfg), rng_(cfg.fault.seed) {}
  nic(nic const&) = delete;
  nic& operator=(nic const&) = delete;
  ~nic() {
    stop();
    {
      // Closes the client connections: the responders' servers see the end of their streams.
      std::lock_guard lk(mu_);
      for (auto& q : qps_) q.link.reset();
      links_.clear();
    }
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    for (auto const& [dev, s] : streams_) {
      int cur = 0;
      cudaGetDevice(&cur);
      cudaSetDevice(dev);
      cudaStreamDestroy(s);
      cudaSetDevice(cur);
    }
  }

  /// A protection domain.
  std::uint32_t alloc_pd() {
    std::lock_guard lk(mu_);
    return ++next_pd_;
  }

  /// Registers [addr, addr + length) as NIC-accessible. `addr` is the address WQEs carry (for
  /// GPU memory and mapped host memory: the device/UVA address). `host_alias`, when given, is where
  /// the host reaches the same bytes (for mapped host memory whose device address differs);
  /// `cuda_device` >= 0 marks GPU memory of that device (accessed with cudaMemcpyAsync).
  /// `keys`, when not zero, are the keys to use (a firmware's, see nic_backend.hpp); they must be
  /// unique in the PD.
  memory_key register_memory(std::uint32_t pd, void const* addr, std::size_t length, std::uint32_t access_flags,
                             void* host_alias = nullptr, int cuda_device = -1, memory_key keys = {}) {
    std::lock_guard lk(regions_mu_);
    region r;
    r.pd = pd;
    r.base = reinterpret_cast<std::uint64_t>(addr);
    r.length = length;
    r.access = access_flags;
    r.host = static_cast<unsigned char*>(host_alias != nullptr ? host_alias : const_cast<void*>(addr));
    r.cuda_device = cuda_device;
    std::uint32_t const idx = static_cast<std::uint32_t>(regions_.size()) + 1;
    // Distinct lkey and rkey; never MLX5_INVALID_LKEY (0x100).
    r.lkey = keys.lkey != 0 ? keys.lkey : (idx << 12) | 0x0a5;
    r.rkey = keys.lkey != 0 ? keys.rkey : (idx << 12) | 0x05a;
    for (auto const& o : regions_) {
      if (o.valid && o.pd == pd && (o.lkey == r.lkey || o.rkey == r.rkey))
        throw std::invalid_argument("gpucomm::verbs_gpu::model: key " + std::to_string(r.lkey) + " is taken in PD " +
                                    std::to_string(pd));
    }
    regions_.push_back(r);
    return {r.lkey, r.rkey};
  }

  /// Removes a region; later WQEs naming its keys fail.
  void deregister_memory(std::uint32_t lkey) {
    std::lock_guard lk(regions_mu_);
    for (auto& r : regions_) {
      if (r.lkey == lkey) r.valid = false;
    }
  }

  std::uint32_t create_cq(cq_config const& c) {
    std::lock_guard lk(mu_);
    if (c.cqes == nullptr) throw std::invalid_argument("gpucomm::verbs_gpu::model: CQ without entries");
    if (c.mode == cq_mode::owner_bit && c.dbrec == nullptr) {
      throw std::invalid_argument("gpucomm::verbs_gpu::model: owner-bit CQ needs a doorbell record");
    }
    if (c.cuda_device >= 0) reserve_pinned(min_pinned);
    cq_state s;
    s.cfg = c;
    if (c.mode == cq_mode::collapsed) s.cfg.log_ncqe = 0;
    cqs_.push_back(s);
    return static_cast<std::uint32_t>(cqs_.size()) + 0x40;
  }

  std::uint32_t create_qp(qp_config const& c) {
    std::lock_guard lk(mu_);
    if (c.ring == nullptr || c.dbrec_snd == nullptr || c.doorbell == nullptr) {
      throw std::invalid_argument("gpucomm::verbs_gpu::model: QP needs a ring, a doorbell record and a doorbell");
    }
    if ((1u << c.log_depth) > max_sq_depth) throw std::invalid_argument("gpucomm::verbs_gpu::model: SQ too deep");
    if (c.cuda_device >= 0) reserve_pinned(std::size_t{wqebb_size} << c.log_depth);
    cq_at(c.send_cqn);
    if (c.recv_cqn != 0) cq_at(c.recv_cqn);
    qp_state_rec q;
    q.cfg = c;
    q.qpn = c.qpn != 0 ? c.qpn : 0x1000 + static_cast<std::uint32_t>(qps_.size()) * 7 + 3;
    if (find_qp(q.qpn) != nullptr)
      throw std::invalid_argument("gpucomm::verbs_gpu::model: QP " + std::to_string(q.qpn) + " exists");
    q.last_db =
        cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*c.doorbell).load(cuda::memory_order_acquire);
    {
      // Responders (this nic's server among them) scope rkeys by the QP's PD without taking mu_.
      std::lock_guard rk(regions_mu_);
      qp_pds_[q.qpn] = c.pd;
    }
    qps_.push_back(q);
    return q.qpn;
  }

  /// Removes QP `qpn`, as destroying it on hardware does: WQEs it has not executed are dropped, and
  /// requests of peers for it fail (TRANSPORT_RETRY_EXC_ERR).
  void destroy_qp(std::uint32_t qpn) {
    std::lock_guard lk(mu_);
    for (auto it = qps_.begin(); it != qps_.end(); ++it) {
      if (it->qpn == qpn) {
        qps_.erase(it);
        break;
      }
    }
    std::lock_guard rk(regions_mu_);
    qp_pds_.erase(qpn);
  }

  /// Retires CQ `cqn` (no QP may complete to it any more); its number is not reused.
  void destroy_cq(std::uint32_t cqn) {
    std::lock_guard lk(mu_);
    cq_at(cqn).cfg.cqes = nullptr;
  }

  /// The CQs that overran (cq_config::overrun_ignore), in order, each once.
  std::vector<std::uint32_t> overrun_cqns() {
    std::lock_guard lk(mu_);
    return overrun_cqns_;
  }

  /// Connects two QPs of this nic as an RC pair (a QP may be connected to itself: loopback).
  /// Replaces any earlier peer of either, remote ones included.
  void connect(std::uint32_t qpn_a, std::uint32_t qpn_b) {
    std::lock_guard lk(mu_);
    qp_state_rec& a = qp_at(qpn_a);
    qp_state_rec& b = qp_at(qpn_b);
    a.peer = qpn_b;
    b.peer = qpn_a;
    a.link.reset();
    b.link.reset();
  }

  /// Serves the responder side of this nic's QPs to other nics (connect_remote()) at the Linux
  /// abstract unix socket `address` (any 1 to 107 bytes; include the process id to keep it
  /// unique). Requests are answered by server threads, with or without start(), until stop() or
  /// destruction. Throws std::logic_error if this nic already listens (after stop() it may listen
  /// again), std::runtime_error if the address is taken or a socket call fails.
  void listen(std::string const& address) {
    std::lock_guard lk(server_mu_);
    if (server_ != nullptr) {
      throw std::logic_error("gpucomm::verbs_gpu::model: this nic already listens at '" + listen_address_ + "'");
    }
    server_ = std::make_unique<fabric::server>(
        address, [this](fabric::request const& rq, unsigned char const* payload, std::vector<unsigned char>& data) {
          // Relaxed: a statistic, read after the fact.
          served_.fetch_add(1, std::memory_order_relaxed);
          try {
            return respond(rq, payload, data);
          } catch (std::exception const& e) {
            // As progress does for a requester: memory the request names could not be accessed.
            note_internal_fault("answering a request of another nic", e.what(), cqe_syndrome::remote_op_err);
            return synd(cqe_syndrome::remote_op_err);
          }
        });
    listen_address_ = address;
  }

  /// Makes QP `responder_qpn` of the nic listening at `responder_address` the RC peer of this
  /// nic's QP `local_qpn`, replacing any earlier peer. Connects now, retrying for up to
  /// nic_config::connect_timeout while nobody listens there yet (processes start in any order);
  /// throws std::runtime_error if that never happens, std::invalid_argument for an unknown QP or
  /// a malformed address. QPs naming the same address share one connection; one that broke is
  /// replaced by a fresh one here (QPs already in error stay so).
  void connect_remote(std::uint32_t local_qpn, std::string const& responder_address, std::uint32_t responder_qpn) {
    {
      std::lock_guard lk(mu_);
      qp_state_rec& q = qp_at(local_qpn);
      if (auto it = links_.find(responder_address); it != links_.end() && !it->second->broken()) {
        set_remote(q, it->second, responder_qpn);
        return;
      }
    }
    // Connect without mu_: the retries may take seconds, and progress goes on meanwhile.
    std::shared_ptr<fabric::link> fresh =
        fabric::link::connect(responder_address, cfg_.connect_timeout, cfg_.reply_timeout);
    std::lock_guard lk(mu_);
    std::shared_ptr<fabric::link>& slot = links_[responder_address];
    // Another thread may have connected meanwhile: then share its link and drop this one.
    if (slot == nullptr || slot->broken()) slot = std::move(fresh);
    set_remote(qp_at(local_qpn), slot, responder_qpn);
  }

  qp_state state(std::uint32_t qpn) {
    std::lock_guard lk(mu_);
    return qp_at(qpn).state;
  }

  /// The first failure of the model's own machinery, "" while there was none: a CUDA call that
  /// copies memory a WQE names threw, and the model completed the WQE with LOCAL_PROT_ERR (as
  /// requester) or REMOTE_OP_ERR (as responder), as hardware reports a failed translation. Those
  /// completions say nothing of the cause; this does, and the model also prints it to stderr once.
  std::string internal_fault() {
    std::lock_guard lk(fault_mu_);
    return internal_fault_;
  }

  nic_stats stats() {
    std::lock_guard lk(mu_);
    nic_stats s = stats_;
    // Relaxed: statistics; counts of work that is still running may be one behind.
    s.atomics = atomics_.load(std::memory_order_relaxed);
    s.served = served_.load(std::memory_order_relaxed);
    return s;
  }

  /// Handles every doorbell rung since the last call. Returns the number of WQEs executed or
  /// flushed. Never blocks on a producer: a full owner-bit CQ leaves the rest for a later call.
  std::size_t progress() {
    std::lock_guard lk(mu_);
    std::size_t done = 0;
    for (auto& q : qps_) done += progress_qp(q);
    return done;
  }

  /// Runs progress() on a background thread until stop() (or destruction).
  void start() {
    if (thread_.joinable()) return;
    running_.store(true);
    thread_ = std::thread([this] {
      while (running_.load(std::memory_order_relaxed)) {
        if (progress() == 0) std::this_thread::yield();
      }
    });
  }
  /// Stops the progress thread and the server (listen()): connected requesters see their
  /// connections break. Client connections stay open until destruction; progress() still works.
  void stop() {
    running_.store(false);
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(server_mu_);
    server_.reset();  // shuts the listener and every connection down, joins the server's threads
  }

 private:
  struct region {
    std::uint32_t pd = 0, lkey = 0, rkey = 0, access = 0;
    std::uint64_t base = 0;
    std::size_t length = 0;
    unsigned char* host = nullptr;
    int cuda_device = -1;
    bool valid = true;
  };
  struct cq_state {
    cq_config cfg{};
    std::uint64_t pi = 0;
    bool overran = false;
  };
  struct qp_state_rec {
    qp_config cfg{};
    std::uint32_t qpn = 0;
    std::uint32_t peer = 0;              ///< local peer QP (0: none, or remote)
    std::shared_ptr<fabric::link> link;  ///< remote peer's nic (null: the peer is local)
    std::uint32_t remote_qpn = 0;        ///< remote peer QP, at that nic
    qp_state state = qp_state::rts;
    std::uint64_t last_db = 0;  ///< doorbell value last seen
    std::uint64_t ci = 0;       ///< next WQEBB to execute (64-bit)
    std::uint16_t target = 0;   ///< doorbell record value to execute up to (16 bits)
    bool armed = false;         ///< a doorbell was accepted; work up to `target`
    /// A ring in GPU memory: the host copy of it that WQEs are read from (same offsets).
    std::shared_ptr<std::vector<unsigned char>> shadow;
  };
  struct outcome {
    std::uint8_t syndrome = 0;  ///< 0: success
    std::uint32_t byte_count = 0;
    bool resp_imm = false;
    std::uint32_t imm = 0;
  };

  static constexpr std::uint8_t ok = 0;
  static constexpr std::uint8_t synd(cqe_syndrome s) { return static_cast<std::uint8_t>(s); }

  cq_state& cq_at(std::uint32_t cqn) {
    if (cqn < 0x41 || cqn - 0x41 >= cqs_.size() || cqs_[cqn - 0x41].cfg.cqes == nullptr) {
      throw std::invalid_argument("gpucomm::verbs_gpu::model: no CQ " + std::to_string(cqn));
    }
    return cqs_[cqn - 0x41];
  }
  qp_state_rec& qp_at(std::uint32_t qpn) {
    for (auto& q : qps_) {
      if (q.qpn == qpn) return q;
    }
    throw std::invalid_argument("gpucomm::verbs_gpu::model: no QP " + std::to_string(qpn));
  }
  qp_state_rec* find_qp(std::uint32_t qpn) {
    for (auto& q : qps_) {
      if (q.qpn == qpn) return &q;
    }
    return nullptr;
  }
  // Copies the region out: the table may grow (and move) under other threads once regions_mu_
  // is released.
  bool find_region_locked(std::uint32_t pd, std::uint32_t key, bool remote, region& out) const {
    for (auto const& r : regions_) {
      if (r.valid && r.pd == pd && (remote ? r.rkey : r.lkey) == key) {
        out = r;
        return true;
      }
    }
    return false;
  }
  void set_remote(qp_state_rec& q, std::shared_ptr<fabric::link> l, std::uint32_t responder_qpn) {
    q.link = std::move(l);
    q.remote_qpn = responder_qpn;
    q.peer = 0;
  }
  static bool in_bounds(region const& r, std::uint64_t addr, std::uint64_t len) {
    return addr >= r.base && len <= r.length && addr - r.base <= r.length - len;
  }

  bool chance(double p) {
    if (p <= 0.0) return false;
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p;
  }
  /// Sleeps for `d` with probability p (no draw when p >= 1, so seeded runs without delay
  /// probabilities draw as before); whether it did.
  bool delay(std::chrono::microseconds d, double p) {
    if (d.count() <= 0 || (p < 1.0 && !chance(p))) return false;
    std::this_thread::sleep_for(d);
    return true;
  }

  // ---- memory access ------------------------------------------------------------------------------
  /// The model's stream on GPU `dev`, made on first use with `dev` current and left so: every
  /// caller copies on `dev` next. The device current before is not restored: in the model's own
  /// threads (progress, the server's) none was ever set, and cudaSetDevice back to the default
  /// 0 would give a process of another GPU a context on GPU 0 (under MPS, a client there).
  cudaStream_t stream_for(int dev) {
    std::lock_guard lk(streams_mu_);
    auto it = streams_.find(dev);
    if (it != streams_.end()) return it->second;
    check(cudaSetDevice(dev), "cudaSetDevice");
    cudaStream_t s{};
    // Non-blocking: must not wait for the kernels that are posting to this NIC.
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    streams_[dev] = s;
    return s;
  }
  void note_internal_fault(char const* doing, char const* what, cqe_syndrome reported) noexcept {
    std::lock_guard lk(fault_mu_);
    if (!internal_fault_.empty()) return;
    try {
      std::string_view why(what);
      if (why.starts_with(model_prefix)) why.remove_prefix(model_prefix.size());  // said once, below
      internal_fault_ =
          std::string(doing) + ": " + std::string(why) + " (completed with " + cqe_syndrome_name(synd(reported)) + ")";
    } catch (...) {
      return;  // no memory for the message: the completion still reports the failure
    }
    std::fprintf(stderr, "%.*s%s\n", static_cast<int>(model_prefix.size()), model_prefix.data(),
                 internal_fault_.c_str());
  }
  static constexpr std::string_view model_prefix = "gpucomm::verbs_gpu::model: ";
  static void check(cudaError_t e, char const* what) {
    if (e != cudaSuccess) {
      throw std::runtime_error(std::string(model_prefix) + what + " failed: " + cudaGetErrorString(e));
    }
  }
  void read_mem(region const& r, std::uint64_t addr, void* dst, std::size_t len) {
    if (len == 0) return;
    if (r.cuda_device < 0) {
      std::memcpy(dst, r.host + (addr - r.base), len);
    } else {
      cudaStream_t const s = stream_for(r.cuda_device);
      // The owning GPU current: the runtime resolves the address in the current device's context,
      // and only the owner is sure to have it mapped (a peer may not, by hardware or by a filter).
      check(cudaSetDevice(r.cuda_device), "cudaSetDevice");
      check(cudaMemcpyAsync(dst, reinterpret_cast<void const*>(addr), len, cudaMemcpyDefault, s), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
  }
  void write_mem(region const& r, std::uint64_t addr, void const* src, std::size_t len) {
    if (len == 0) return;
    if (r.cuda_device < 0) {
      std::memcpy(r.host + (addr - r.base), src, len);
    } else {
      cudaStream_t const s = stream_for(r.cuda_device);
      check(cudaSetDevice(r.cuda_device), "cudaSetDevice");  // as in read_mem
      check(cudaMemcpyAsync(reinterpret_cast<void*>(addr), src, len, cudaMemcpyDefault, s), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
  }
  // Control memory (rings, doorbell records, CQs): host memory directly, GPU memory with a copy.
  // Control copies from and to GPU memory go through pinned host memory: a copy into pageable
  // memory goes through a driver staging buffer and takes longer, and the model makes several per
  // doorbell. Used under mu_ only. Sized when a QP or CQ in GPU memory is created, never while
  // progress runs: cudaHostAlloc and cudaFreeHost may wait for the device, whose kernels may be
  // waiting for this nic.
  static constexpr std::size_t min_pinned = 4096;
  void reserve_pinned(std::size_t bytes) {
    bytes = std::max(bytes, min_pinned);
    if (bytes <= pinned_bytes_) return;
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    pinned_ = static_cast<unsigned char*>(p);
    pinned_bytes_ = bytes;
  }
  void control_read(int cuda_device, void const* src, void* dst, std::size_t len) {
    if (cuda_device < 0) {
      std::memcpy(dst, src, len);
      return;
    }
    cudaStream_t const s = stream_for(cuda_device);
    check(cudaSetDevice(cuda_device), "cudaSetDevice");
    for (std::size_t done = 0; done < len; done += pinned_bytes_) {
      std::size_t const n = std::min(len - done, pinned_bytes_);
      check(cudaMemcpyAsync(pinned_, static_cast<unsigned char const*>(src) + done, n, cudaMemcpyDefault, s),
            "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      std::memcpy(static_cast<unsigned char*>(dst) + done, pinned_, n);
    }
  }
  /// A 32-bit big-endian doorbell-record word, read with acquire (host memory) or copied after the
  /// doorbell was seen (GPU memory: the producer's release fence before the doorbell store, GPU
  /// scope there, performed the record in GPU memory, where the copy engine reads it, as a NIC
  /// reads it over PCIe through the GPU's memory system).
  std::uint32_t read_dbr_word(int cuda_device, std::uint32_t* word) {
    if (cuda_device < 0)
      return from_be32(
          cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(*word).load(cuda::memory_order_acquire));
    std::uint32_t v = 0;
    control_read(cuda_device, word, &v, 4);
    return from_be32(v);
  }
  /// GPU-memory rings: copies WQEBBs [q.ci, q.ci + n) into the shadow, at their ring offsets.
  void fetch_wqebbs(qp_state_rec& q, std::uint32_t n) {
    if (q.cfg.cuda_device < 0 || n == 0) return;
    std::size_t const depth = std::size_t{1} << q.cfg.log_depth;
    n = static_cast<std::uint32_t>(std::min<std::size_t>(n, depth));  // a record past a full ring: producer error
    if (!q.shadow) q.shadow = std::make_shared<std::vector<unsigned char>>(depth * wqebb_size);
    std::size_t const first = static_cast<std::size_t>(q.ci & (depth - 1));
    std::size_t const head = std::min<std::size_t>(n, depth - first);
    control_read(q.cfg.cuda_device, q.cfg.ring + first * wqebb_size, q.shadow->data() + first * wqebb_size,
                 head * wqebb_size);
    if (head < n) control_read(q.cfg.cuda_device, q.cfg.ring, q.shadow->data(), (n - head) * wqebb_size);
  }

  // Read-modify-write of a 4- or 8-byte word at the responder; returns the old value. The caller
  // holds atomic_mu_: that alone makes GPU memory (read, then write) atomic among NIC atomics.
  template <class T, class F>
  T atomic_rmw(region const& r, std::uint64_t addr, F&& f) {
    // Relaxed: a statistic.
    atomics_.fetch_add(1, std::memory_order_relaxed);
    if (r.cuda_device < 0) {
      cuda::atomic_ref<T, cuda::thread_scope_system> ref(*reinterpret_cast<T*>(r.host + (addr - r.base)));
      T old = ref.load(cuda::memory_order_relaxed);
      while (!ref.compare_exchange_weak(old, f(old), cuda::memory_order_acq_rel, cuda::memory_order_relaxed)) {
      }
      return old;
    }
    T old{};
    read_mem(r, addr, &old, sizeof(T));
    T const nv = f(old);
    write_mem(r, addr, &nv, sizeof(T));
    return old;
  }

  // ---- WQE access ---------------------------------------------------------------------------------
  seg16 read_seg(qp_state_rec const& q, std::uint64_t index, std::uint32_t k) const {
    std::uint64_t const mask = (std::uint64_t{1} << (q.cfg.log_depth + wqebb_shift)) - 1;
    seg16 s;
    auto const* ring = q.shadow ? reinterpret_cast<std::byte const*>(q.shadow->data()) : q.cfg.ring;
    std::memcpy(&s, ring + ((index * wqebb_size + std::uint64_t{k} * ds_size) & mask), 16);
    return s;
  }
  template <class Seg>
  Seg seg_as(qp_state_rec const& q, std::uint64_t index, std::uint32_t k) const {
    seg16 const s = read_seg(q, index, k);
    Seg out;
    std::memcpy(&out, &s, 16);
    return out;
  }

  // ---- CQEs ---------------------------------------------------------------------------------------
  /// CQEs written and not consumed (the consumer index in the CQ doorbell record), 24 bits.
  std::uint32_t cq_unconsumed(cq_state const& c) {
    std::uint32_t const ci = read_dbr_word(c.cfg.cuda_device, &c.cfg.dbrec[cq_dbr_set_ci]) & 0xffffffu;
    return (static_cast<std::uint32_t>(c.pi) - ci) & 0xffffffu;
  }
  bool cq_has_room(cq_state const& c) {
    if (c.cfg.mode == cq_mode::collapsed) return true;
    return cq_unconsumed(c) < (1u << c.cfg.log_ncqe);
  }
  void write_cqe(cq_state& c, cqe_opcode op, std::uint16_t wqe_counter, std::uint8_t wqe_opcode, std::uint32_t qpn,
                 std::uint32_t byte_count, std::uint32_t imm, std::uint8_t syndrome) {
    if (delay(cfg_.fault.completion_delay, cfg_.fault.completion_delay_probability)) ++stats_.cqes_delayed;
    std::uint64_t const slot = c.pi & ((std::uint64_t{1} << c.cfg.log_ncqe) - 1);
    unsigned const owner = static_cast<unsigned>((c.pi >> c.cfg.log_ncqe) & 1u);
    unsigned char body[60] = {};
    if (op == cqe_opcode::req_err || op == cqe_opcode::resp_err) {
      err_cqe64 e{};
      e.syndrome = syndrome;
      e.vendor_err_synd = cfg_.vendor_syndrome;
      e.s_wqe_opcode_qpn = to_be32((std::uint32_t{wqe_opcode} << 24) | (qpn & 0xffffffu));
      std::memcpy(body, &e, 60);
      ++stats_.error_cqes;
    } else {
      cqe64 e{};
      e.byte_cnt = to_be32(byte_count);
      e.imm_inval_pkey = to_be32(imm);
      e.timestamp = to_be64(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
      e.sop_drop_qpn = to_be32((std::uint32_t{wqe_opcode} << 24) | (qpn & 0xffffffu));
      std::memcpy(body, &e, 60);
    }
    // A collapsed CQ without overrun-ignore overruns when its one entry is still unconsumed
    // (hardware then raises a CQ error event); reported once per CQ, the CQE still written.
    if (c.cfg.mode == cq_mode::collapsed && !c.cfg.overrun_ignore && c.pi != 0 && c.cfg.dbrec != nullptr &&
        cq_unconsumed(c) != 0) {
      ++stats_.cq_overruns;
      if (!c.overran) overrun_cqns_.push_back(static_cast<std::uint32_t>(&c - cqs_.data()) + 0x41);
      c.overran = true;
    }
    auto* entry = reinterpret_cast<unsigned char*>(&c.cfg.cqes[slot]);
    std::uint32_t const tail = make_cqe_tail(wqe_counter, 0, make_op_own(op, owner));
    if (c.cfg.cuda_device >= 0) {
      // Two copies on one stream, the second started when the first is done: the body (and the data
      // the operation wrote, copied and waited for before) lands before the tail word a poller
      // acquires. One wait for both.
      unsigned char* const staged = pinned_;  // reserve_pinned() ran when this CQ was created
      std::memcpy(staged, body, 60);
      std::memcpy(staged + 60, &tail, 4);
      cudaStream_t const s = stream_for(c.cfg.cuda_device);
      check(cudaSetDevice(c.cfg.cuda_device), "cudaSetDevice");
      check(cudaMemcpyAsync(entry, staged, 60, cudaMemcpyDefault, s), "cudaMemcpyAsync");
      check(cudaMemcpyAsync(entry + 60, staged + 60, 4, cudaMemcpyDefault, s), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    } else {
      std::memcpy(entry, body, 60);
      // Release store of the tail word: the body above (and the data the operation wrote) is
      // visible to a poller that acquires the tail.
      cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(*reinterpret_cast<std::uint32_t*>(entry + 60))
          .store(tail, cuda::memory_order_release);
    }
    ++c.pi;
    ++stats_.cqes;
  }

  // ---- local data segments ------------------------------------------------------------------------
  struct sge {
    region r;
    std::uint64_t addr;
    std::uint32_t len;
  };
  // Local data segments k0..ds-1 of a WQE; checks keys, bounds and (if `writes`) LOCAL_WRITE.
  std::uint8_t local_sges(qp_state_rec const& q, std::uint64_t index, std::uint32_t k0, std::uint32_t ds, bool writes,
                          std::vector<sge>& out) {
    for (std::uint32_t k = k0; k < ds; ++k) {
      auto const d = seg_as<data_seg>(q, index, k);
      std::uint32_t const bc = from_be32(d.byte_count);
      if (bc & inline_seg_flag) return synd(cqe_syndrome::local_qp_op_err);
      std::uint32_t const lkey = from_be32(d.lkey);
      std::uint64_t const addr = from_be64(d.addr);
      if (lkey == invalid_lkey && bc == 0) continue;  // empty segment
      region r;
      bool found;
      {
        std::lock_guard lk(regions_mu_);
        found = find_region_locked(q.cfg.pd, lkey, false, r);
      }
      if (!found || !in_bounds(r, addr, bc) || (writes && !(r.access & local_write))) {
        return synd(cqe_syndrome::local_prot_err);
      }
      out.push_back({r, addr, bc});
    }
    return ok;
  }

  // ---- responder ----------------------------------------------------------------------------------
  /// The responder's half of an RDMA WRITE, READ or atomic: the ONE place that checks the rkey
  /// (registered in the PD of responder QP rq.qpn), the bounds and the access, and performs the
  /// operation on this nic's memory. Called by execute() when the peer QP is in this nic and by
  /// the server for requesters in other nics. `payload` holds a write's rq.length bytes; `data`
  /// receives a read's bytes or an atomic's old value (host order, rq.length bytes). Returns the
  /// syndrome the requester reports (0: success). Takes atomic_mu_, regions_mu_, streams_mu_ and
  /// never mu_ (see the lock order at the top).
  std::uint8_t respond(fabric::request const& rq, unsigned char const* payload, std::vector<unsigned char>& data) {
    region r;
    bool found = false;
    {
      std::lock_guard lk(regions_mu_);
      auto const it = qp_pds_.find(rq.qpn);
      // No such QP here: hardware drops the packets and the requester's retries run out.
      if (it == qp_pds_.end()) return synd(cqe_syndrome::transport_retry_exc_err);
      found = find_region_locked(it->second, rq.rkey, true, r);
    }
    switch (rq.kind) {
      case fabric::op::write:
        // A zero-length write checks no rkey (as in the IB spec); any other needs REMOTE_WRITE.
        if (rq.length == 0) return ok;
        if (!found || !in_bounds(r, rq.raddr, rq.length) || !(r.access & remote_write)) {
          return synd(cqe_syndrome::remote_access_err);
        }
        write_mem(r, rq.raddr, payload, rq.length);
        return ok;
      case fabric::op::read:
        if (rq.length == 0) return ok;
        if (!found || !in_bounds(r, rq.raddr, rq.length) || !(r.access & remote_read)) {
          return synd(cqe_syndrome::remote_access_err);
        }
        data.resize(rq.length);
        read_mem(r, rq.raddr, data.data(), rq.length);
        return ok;
      case fabric::op::atomic: {
        std::uint64_t const size = rq.length;
        if (size != 4 && size != 8) return synd(cqe_syndrome::remote_inval_req_err);
        if (!found || !in_bounds(r, rq.raddr, size) || !(r.access & remote_atomic)) {
          return synd(cqe_syndrome::remote_access_err);
        }
        if (rq.raddr % size != 0) return synd(cqe_syndrome::remote_inval_req_err);
        data.resize(size);
        bool const cs = rq.atomic_cs != 0;
        // One atomicity domain per responder nic: local and remote requesters' atomics on this
        // nic's memory all run under this lock.
        std::lock_guard lk(atomic_mu_);
        if (size == 8) {
          std::uint64_t const old = atomic_rmw<std::uint64_t>(r, rq.raddr, [&](std::uint64_t v) {
            return atomic_op<std::uint64_t>(cs, v, rq.operand[0], rq.operand[1], rq.operand[2], rq.operand[3], 64);
          });
          std::memcpy(data.data(), &old, 8);
        } else {
          auto const w = [&](int k) { return static_cast<std::uint32_t>(rq.operand[k]); };
          std::uint32_t const old = atomic_rmw<std::uint32_t>(r, rq.raddr, [&](std::uint32_t v) {
            return atomic_op<std::uint32_t>(cs, v, w(0), w(1), w(2), w(3), 32);
          });
          std::memcpy(data.data(), &old, 4);
        }
        return ok;
      }
    }
    return synd(cqe_syndrome::remote_inval_req_err);  // an op this nic does not know
  }

  /// New value of an atomic: masked compare-and-swap (a = swap, b = compare) or masked
  /// fetch-and-add (a = add, b = field boundary). Unmasked forms pass all-ones masks / boundary 0.
  template <class T>
  static T atomic_op(bool cs, T v, T a, T b, T m_swap, T m_cmp, int bits) {
    if (cs) return ((v ^ b) & m_cmp) == 0 ? static_cast<T>((v & ~m_swap) | (a & m_swap)) : v;
    return static_cast<T>(field_add(v, a, b, bits));
  }

  /// Hands the responder's half of a WQE to the peer QP: respond() here for a peer in this nic,
  /// the peer nic's server for a remote one. Returns the syndrome; `data` as for respond().
  std::uint8_t forward(qp_state_rec const& q, qp_state_rec const* peer, fabric::request rq,
                       unsigned char const* payload, std::vector<unsigned char>& data) {
    if (rq.length > fabric::max_message) return synd(cqe_syndrome::local_length_err);
    if (q.link == nullptr) {
      rq.qpn = peer->qpn;
      return respond(rq, payload, data);
    }
    rq.qpn = q.remote_qpn;
    ++stats_.remote_ops;
    fabric::reply rp;
    std::uint64_t const expect = rq.kind == fabric::op::write ? 0 : rq.length;
    // The connection refused, broken, timed out or garbled: as a dead peer is to hardware.
    if (!q.link->call(rq, payload, expect, rp, data)) return synd(cqe_syndrome::transport_retry_exc_err);
    return rp.syndrome;
  }

  // ---- execution ----------------------------------------------------------------------------------
  outcome execute(qp_state_rec& q, std::uint64_t index, ctrl_seg const& c, std::uint32_t ds) {
    outcome o;
    std::uint32_t const w0 = from_be32(c.opmod_idx_opcode);
    auto const op = static_cast<std::uint8_t>(w0 & 0xff);
    auto const opmod = static_cast<std::uint8_t>(w0 >> 24);
    auto fail = [&](cqe_syndrome s) {
      o.syndrome = synd(s);
      return o;
    };
    if (static_cast<opcode>(op) == opcode::nop) return o;

    bool const remote = q.link != nullptr;
    qp_state_rec const* peer = remote ? nullptr : find_qp(q.peer);
    bool const connected = remote || peer != nullptr;
    std::vector<sge> sges;
    std::vector<unsigned char> data;
    switch (static_cast<opcode>(op)) {
      case opcode::rdma_write:
      case opcode::rdma_write_imm: {
        if (ds < 3) return fail(cqe_syndrome::local_qp_op_err);
        auto const ra = seg_as<raddr_seg>(q, index, 1);
        std::vector<unsigned char> payload;
        seg16 const first = read_seg(q, index, 2);
        std::uint32_t const bc = from_be32(first.w[0]);
        if (bc & inline_seg_flag) {
          std::uint32_t const len = bc & ~inline_seg_flag;
          if (inline_seg_ds(len) != ds - 2) return fail(cqe_syndrome::local_qp_op_err);
          std::vector<unsigned char> stream((ds - 2) * 16);
          for (std::uint32_t k = 0; k < ds - 2; ++k) {
            seg16 const s = read_seg(q, index, 2 + k);
            std::memcpy(stream.data() + 16 * k, &s, 16);
          }
          payload.assign(stream.begin() + 4, stream.begin() + 4 + len);
        } else {
          if (std::uint8_t const e = local_sges(q, index, 2, ds, false, sges); e != ok)
            return fail(static_cast<cqe_syndrome>(e));
          for (auto const& g : sges) {
            std::size_t const at = payload.size();
            payload.resize(at + g.len);
            read_mem(g.r, g.addr, payload.data() + at, g.len);
          }
        }
        bool const imm = static_cast<opcode>(op) == opcode::rdma_write_imm;
        if (!connected) return fail(cqe_syndrome::local_qp_op_err);
        // The immediate needs a receive at the peer: none is modelled across the fabric.
        if (imm && (remote || peer->cfg.recv_cqn == 0)) return fail(cqe_syndrome::rnr_retry_exc_err);
        fabric::request rq;
        rq.kind = fabric::op::write;
        rq.rkey = from_be32(ra.rkey);
        rq.raddr = from_be64(ra.raddr);
        rq.length = payload.size();
        if (std::uint8_t const e = forward(q, peer, rq, payload.data(), data); e != ok) {
          return fail(static_cast<cqe_syndrome>(e));
        }
        stats_.bytes += payload.size();
        o.byte_count = static_cast<std::uint32_t>(payload.size());
        if (imm) {
          o.resp_imm = true;
          o.imm = from_be32(c.imm);
        }
        return o;
      }
      case opcode::rdma_read: {
        if (ds < 3) return fail(cqe_syndrome::local_qp_op_err);
        auto const ra = seg_as<raddr_seg>(q, index, 1);
        if (std::uint8_t const e = local_sges(q, index, 2, ds, true, sges); e != ok)
          return fail(static_cast<cqe_syndrome>(e));
        std::uint64_t total = 0;
        for (auto const& g : sges) total += g.len;
        if (!connected) return fail(cqe_syndrome::local_qp_op_err);
        fabric::request rq;
        rq.kind = fabric::op::read;
        rq.rkey = from_be32(ra.rkey);
        rq.raddr = from_be64(ra.raddr);
        rq.length = total;
        if (std::uint8_t const e = forward(q, peer, rq, nullptr, data); e != ok) {
          return fail(static_cast<cqe_syndrome>(e));
        }
        std::size_t at = 0;
        for (auto const& g : sges) {
          write_mem(g.r, g.addr, data.data() + at, g.len);
          at += g.len;
        }
        stats_.bytes += total;
        o.byte_count = static_cast<std::uint32_t>(total);
        return o;
      }
      case opcode::send:
      case opcode::send_imm: {
        if (ds < 2) return fail(cqe_syndrome::local_qp_op_err);
        if (std::uint8_t const e = local_sges(q, index, 1, ds, false, sges); e != ok)
          return fail(static_cast<cqe_syndrome>(e));
        if (!connected) return fail(cqe_syndrome::local_qp_op_err);
        return fail(cqe_syndrome::rnr_retry_exc_err);  // no receive queues in the model, local or remote
      }
      case opcode::atomic_cs:
      case opcode::atomic_fa:
      case opcode::atomic_masked_cs:
      case opcode::atomic_masked_fa: {
        bool const masked =
            static_cast<opcode>(op) == opcode::atomic_masked_cs || static_cast<opcode>(op) == opcode::atomic_masked_fa;
        bool const cs =
            static_cast<opcode>(op) == opcode::atomic_cs || static_cast<opcode>(op) == opcode::atomic_masked_cs;
        std::uint32_t size = 8;
        std::uint32_t want_ds = ds_atomic;
        if (masked) {
          if (opmod == opmod_ext_atomic_4b) {
            size = 4;
          } else if (opmod != opmod_ext_atomic_8b) {
            return fail(cqe_syndrome::local_qp_op_err);
          }
          want_ds = (cs && size == 8) ? ds_masked_cs64 : ds_masked_atomic;
        } else if (opmod != 0) {
          return fail(cqe_syndrome::local_qp_op_err);
        }
        if (ds != want_ds) return fail(cqe_syndrome::local_qp_op_err);
        auto const ra = seg_as<raddr_seg>(q, index, 1);
        if (std::uint8_t const e = local_sges(q, index, want_ds - 1, want_ds, true, sges); e != ok) {
          return fail(static_cast<cqe_syndrome>(e));
        }
        if (sges.size() != 1 || sges[0].len != size) return fail(cqe_syndrome::local_length_err);
        if (!connected) return fail(cqe_syndrome::local_qp_op_err);
        fabric::request rq;
        rq.kind = fabric::op::atomic;
        rq.atomic_cs = cs ? 1 : 0;
        rq.rkey = from_be32(ra.rkey);
        rq.raddr = from_be64(ra.raddr);
        rq.length = size;
        // Operands in host order: {swap or add, compare or field boundary, swap mask, compare mask}.
        seg16 const s2 = read_seg(q, index, 2);
        if (size == 8) {
          std::uint64_t a, b, m_swap = ~0ull, m_cmp = ~0ull;
          std::memcpy(&a, &s2.w[0], 8);
          std::memcpy(&b, &s2.w[2], 8);
          a = from_be64(a);
          b = from_be64(b);
          if (masked && cs) {
            seg16 const s3 = read_seg(q, index, 3);
            std::memcpy(&m_swap, &s3.w[0], 8);
            std::memcpy(&m_cmp, &s3.w[2], 8);
            m_swap = from_be64(m_swap);
            m_cmp = from_be64(m_cmp);
          } else if (!masked && !cs) {
            b = 0;  // plain fetch-add: one field, no boundary
          }
          rq.operand[0] = a;
          rq.operand[1] = b;
          rq.operand[2] = m_swap;
          rq.operand[3] = m_cmp;
        } else {
          for (int k = 0; k < 4; ++k) rq.operand[k] = from_be32(s2.w[k]);
        }
        if (std::uint8_t const e = forward(q, peer, rq, nullptr, data); e != ok) {
          return fail(static_cast<cqe_syndrome>(e));
        }
        unsigned char result[8];
        if (size == 8) {
          std::memcpy(result, data.data(), 8);
        } else {
          std::uint32_t old;
          std::memcpy(&old, data.data(), 4);
          // The requester's NIC decides how a 4-byte result lands in its memory.
          if (cfg_.fetch32_big_endian) old = to_be32(old);
          std::memcpy(result, &old, 4);
        }
        write_mem(sges[0].r, sges[0].addr, result, size);
        o.byte_count = size;
        return o;
      }
      default:
        return fail(cqe_syndrome::local_qp_op_err);
    }
  }

  /// Addition in which a set bit i of `boundary` stops the carry out of bit i.
  static std::uint64_t field_add(std::uint64_t x, std::uint64_t y, std::uint64_t boundary, int bits = 64) {
    std::uint64_t r = 0, carry = 0;
    for (int i = 0; i < bits; ++i) {
      std::uint64_t const s = ((x >> i) & 1u) + ((y >> i) & 1u) + carry;
      r |= (s & 1u) << i;
      carry = ((boundary >> i) & 1u) ? 0 : (s >> 1);
    }
    return r;
  }

  std::size_t progress_qp(qp_state_rec& q) {
    auto db_ref = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*q.cfg.doorbell);
    std::uint64_t const db = db_ref.load(cuda::memory_order_acquire);
    int handlings = 0;
    if (db != q.last_db) {
      q.last_db = db;
      ++stats_.doorbells;
      if (doorbell_qpn(db) != q.qpn) {
        // A doorbell naming another QP is ignored, as the hardware ignores it for this QP.
      } else if (chance(cfg_.fault.drop_doorbell)) {
        ++stats_.doorbells_dropped;
      } else {
        handlings = 1;
        if (chance(cfg_.fault.duplicate_doorbell)) {
          ++stats_.doorbells_duplicated;
          handlings = 2;
        }
      }
    }
    std::size_t done = 0;
    for (int h = 0; h < handlings; ++h) {
      if (delay(cfg_.fault.doorbell_delay, cfg_.fault.doorbell_delay_probability)) ++stats_.doorbells_delayed;
      // The doorbell record is the source of truth for how far the producer got (acquire: the
      // WQEs below it, released by the producer's fence, are visible).
      q.target = static_cast<std::uint16_t>(read_dbr_word(q.cfg.cuda_device, q.cfg.dbrec_snd) & 0xffffu);
      q.armed = true;
      if (!cfg_.drain_only) fetch_wqebbs(q, static_cast<std::uint16_t>(q.target - static_cast<std::uint16_t>(q.ci)));
      done += run_qp(q);
    }
    if (handlings == 0 && q.armed) done += run_qp(q);  // resume after a full CQ
    return done;
  }

  std::size_t run_qp(qp_state_rec& q) {
    cq_state& scq = cq_at(q.cfg.send_cqn);
    std::size_t done = 0;
    if (cfg_.drain_only) {
      auto const n = static_cast<std::uint16_t>(q.target - static_cast<std::uint16_t>(q.ci));
      if (n != 0) {
        q.ci += n;
        write_cqe(scq, cqe_opcode::req, static_cast<std::uint16_t>(q.ci - 1), 0, q.qpn, 0, 0, 0);
        stats_.wqes += n;
      }
      q.armed = false;
      return n;
    }
    // A collapsed CQ keeps one entry that every completion rewrites, so of a batch's successful
    // completions a poller can only rely on the last: in GPU memory, where each CQE costs the model
    // two copies, they are written once, at the end of the batch, or before an error CQE, which
    // must come after them. Completions only come later; none is lost or reordered.
    bool const coalesce = scq.cfg.mode == cq_mode::collapsed && scq.cfg.cuda_device >= 0;
    struct {
      bool any = false;
      std::uint16_t counter = 0;
      std::uint8_t op = 0;
      std::uint32_t bytes = 0;
    } held;
    auto const write_held = [&] {
      if (held.any) write_cqe(scq, cqe_opcode::req, held.counter, held.op, q.qpn, held.bytes, 0, 0);
      held.any = false;
    };
    while (static_cast<std::uint16_t>(q.ci) != q.target) {
      std::uint64_t const index = q.ci;
      auto const c = seg_as<ctrl_seg>(q, index, 0);
      std::uint32_t const w0 = from_be32(c.opmod_idx_opcode);
      std::uint32_t const w1 = from_be32(c.qpn_ds);
      auto const op = static_cast<std::uint8_t>(w0 & 0xff);
      std::uint32_t const ds = w1 & 0x3f;
      bool const signaled = (c.fm_ce_se & ctrl_cq_update) != 0;
      std::uint32_t const wqebbs = ds == 0 ? 1 : (wqebbs_for_ds(ds) > max_wqe_wqebbs ? 1 : wqebbs_for_ds(ds));
      qp_state_rec* peer = find_qp(q.peer);
      cq_state* rcq = (peer != nullptr && peer->cfg.recv_cqn != 0) ? &cq_at(peer->cfg.recv_cqn) : nullptr;
      // Room for every CQE this WQE may produce, before executing it.
      if (!cq_has_room(scq) ||
          (rcq != nullptr && static_cast<opcode>(op) == opcode::rdma_write_imm && !cq_has_room(*rcq))) {
        break;
      }
      if (q.state == qp_state::error) {
        write_held();
        write_cqe(scq, cqe_opcode::req_err, static_cast<std::uint16_t>(index), op, q.qpn, 0, 0,
                  synd(cqe_syndrome::wr_flush_err));
        ++stats_.flushed;
      } else {
        outcome o;
        if ((w1 >> 8) != q.qpn || ((w0 >> 8) & 0xffffu) != (index & 0xffffu) || ds == 0 || ds > max_wqe_ds) {
          o.syndrome = synd(cqe_syndrome::local_qp_op_err);
        } else {
          try {
            o = execute(q, index, c, ds);
          } catch (std::exception const& e) {
            // Memory the region covers could not be accessed (a cudaMemcpy failed, e.g. on a part
            // of the heap that is not mapped): a protection error for this WQE, as hardware would
            // report a translation failure; never an exception out of progress().
            note_internal_fault("executing a WQE", e.what(), cqe_syndrome::local_prot_err);
            o = outcome{};
            o.syndrome = synd(cqe_syndrome::local_prot_err);
          }
        }
        if (o.syndrome != ok) {
          write_held();
          write_cqe(scq, cqe_opcode::req_err, static_cast<std::uint16_t>(index), op, q.qpn, 0, 0, o.syndrome);
          q.state = qp_state::error;
        } else {
          if (o.resp_imm && rcq != nullptr) {
            write_cqe(*rcq, cqe_opcode::resp_wr_imm, 0, op, peer->qpn, o.byte_count, o.imm, 0);
          }
          if (signaled && coalesce) {
            held = {true, static_cast<std::uint16_t>(index), op, o.byte_count};
          } else if (signaled) {
            write_cqe(scq, cqe_opcode::req, static_cast<std::uint16_t>(index), op, q.qpn, o.byte_count, 0, 0);
          }
        }
      }
      ++stats_.wqes;
      ++done;
      q.ci += wqebbs;
    }
    write_held();
    if (static_cast<std::uint16_t>(q.ci) == q.target) q.armed = false;
    return done;
  }

  nic_config cfg_;
  // Guarded by mu_ (see the lock order at the top of this file).
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::uint32_t next_pd_ = 0;
  std::vector<cq_state> cqs_;
  std::vector<std::uint32_t> overrun_cqns_;
  unsigned char* pinned_ = nullptr;  ///< reserve_pinned(): the control copies' bounce buffer
  std::size_t pinned_bytes_ = 0;
  std::vector<qp_state_rec> qps_;
  std::map<std::string, std::shared_ptr<fabric::link>> links_;  ///< client connections, by responder address
  nic_stats stats_;
  // The atomicity domain of this nic as a responder.
  std::mutex atomic_mu_;
  // Guarded by regions_mu_.
  std::mutex regions_mu_;
  std::vector<region> regions_;
  std::map<std::uint32_t, std::uint32_t> qp_pds_;  ///< QPN -> PD, for responders
  // Guarded by streams_mu_.
  std::mutex streams_mu_;
  std::map<int, cudaStream_t> streams_;
  std::mutex fault_mu_;
  std::string internal_fault_;  ///< guarded by fault_mu_
  // Statistics bumped by responders, which do not hold mu_.
  std::atomic<std::uint64_t> atomics_{0}, served_{0};
  std::atomic<bool> running_{false};
  std::thread thread_;
  // Guarded by server_mu_. Last: destroyed (after stop() already shut it down) before what its
  // threads use.
  std::mutex server_mu_;
  std::string listen_address_;
  std::unique_ptr<fabric::server> server_;
};

/// Host memory for one QP and its CQ, laid out as a GPU-resident QP would be (ring, doorbell
/// record, doorbell word, CQ entries, counters), plus the send_queue view and the model configs.
/// For host producers and host tests; GPU tests allocate the same pieces in mapped memory.
class host_queue_pair {
 public:
  host_queue_pair(nic& n, std::uint32_t pd, std::uint32_t log_depth, cq_mode mode, std::uint32_t log_ncqe = 0,
                  std::uint32_t recv_cqn = 0) {
    std::size_t const ring_bytes = std::size_t{wqebb_size} << log_depth;
    std::uint32_t const ncqe = mode == cq_mode::collapsed ? 1u : (1u << log_ncqe);
    ring_ = alloc(ring_bytes);
    std::memset(ring_.get(), 0, ring_bytes);
    cqes_ = alloc(ncqe * sizeof(cqe64));
    std::memset(cqes_.get(), 0xff, ncqe * sizeof(cqe64));  // opcode INVALID, owner 1
    misc_ = alloc(256 + sizeof(qp_counters));
    std::memset(misc_.get(), 0, 256 + sizeof(qp_counters));
    auto* misc = reinterpret_cast<unsigned char*>(misc_.get());
    auto* qp_dbrec = reinterpret_cast<std::uint32_t*>(misc);       // [rcv, snd]
    auto* cq_dbrec = reinterpret_cast<std::uint32_t*>(misc + 64);  // [set_ci, arm]
    auto* db = reinterpret_cast<std::uint64_t*>(misc + 128);
    auto* counters = reinterpret_cast<qp_counters*>(misc + 256);

    cq_config cc{mode, reinterpret_cast<cqe64*>(cqes_.get()), mode == cq_mode::collapsed ? 0 : log_ncqe, cq_dbrec};
    std::uint32_t const cqn = n.create_cq(cc);
    qp_config qc{pd, reinterpret_cast<std::byte*>(ring_.get()), log_depth, qp_dbrec + dbr_snd, db, cqn, recv_cqn};
    qpn_ = n.create_qp(qc);

    sq_.ring = reinterpret_cast<std::byte*>(ring_.get());
    sq_.log_depth = log_depth;
    sq_.qpn = qpn_;
    sq_.dbrec = qp_dbrec + dbr_snd;
    sq_.doorbell = db;
    sq_.counters = counters;
    sq_.cq = completion_queue{reinterpret_cast<cqe64*>(cqes_.get()), cq_dbrec, cc.log_ncqe, mode, cqn};
    sq_.scope = nic_scope::system;
  }
  send_queue& sq() noexcept { return sq_; }
  std::uint32_t qpn() const noexcept { return qpn_; }
  qp_counters& counters() noexcept { return *sq_.counters; }

 private:
  struct free_deleter {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  using buf = std::unique_ptr<void, free_deleter>;
  static buf alloc(std::size_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) throw std::bad_alloc();
    return buf(p);
  }
  buf ring_, cqes_, misc_;
  send_queue sq_{};
  std::uint32_t qpn_ = 0;
};

/// Host memory for a receive CQ (owner-bit mode) that RDMA WRITE with immediate completes into.
class host_recv_cq {
 public:
  host_recv_cq(nic& n, std::uint32_t log_ncqe) {
    std::size_t const bytes = (std::size_t{1} << log_ncqe) * sizeof(cqe64);
    mem_.reset(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096));
    if (!mem_) throw std::bad_alloc();
    std::memset(mem_.get(), 0xff, bytes);
    auto* dbrec =
        reinterpret_cast<std::uint32_t*>(static_cast<unsigned char*>(mem_.get()) + (bytes + 4095) / 4096 * 4096);
    dbrec[0] = dbrec[1] = 0;
    cq_ = completion_queue{static_cast<cqe64*>(mem_.get()), dbrec, log_ncqe, cq_mode::owner_bit, 0};
    cq_.cqn = n.create_cq(cq_config{cq_mode::owner_bit, cq_.cqes, log_ncqe, dbrec});
  }
  completion_queue const& cq() const noexcept { return cq_; }
  std::uint32_t cqn() const noexcept { return cq_.cqn; }

 private:
  struct free_deleter {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<void, free_deleter> mem_;
  completion_queue cq_{};
};

}  // namespace gpucomm::verbs_gpu::model
