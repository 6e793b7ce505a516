#pragma once
// Steps 5-10 and 14 of the host set-up: the queues. qp, one RC QP and its CQ made through DEVX in
// the device's control memory (GPU memory for GPU-posted QPs; host memory when a host thread posts),
// the UAR's doorbell register mapped into the GPU, and the send_queue view kernels post through;
// host_qp, an RC QP a host thread posts to (ProxyQueue's NIC backend), made with ordinary verbs
// where the backend has them. Both are connected through connection.hpp's state machine.
//
//   host::qp q(dev);                                       // RESET -> INIT
//   auto const all = host::exchange(allgather, q.local_info(), ranks);
//   q.connect(all[peer]);                                  // INIT -> RTR -> RTS
//   kernel<<<...>>>(q.send_queue());

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../completion_queue.cuh"
#include "../send_queue.cuh"
#include "backend.hpp"
#include "connection.hpp"
#include "detail/setup_common.hpp"
#include "device.hpp"
#include "memory_registration.hpp"
#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

/// Who posts to a qp: a GPU's threads (the doorbell register mapped into the GPU) or a host thread
/// (the register through the UAR's own host mapping; the queues must then be in host memory).
enum class poster : std::uint8_t { gpu, host };

/// Options of one QP.
struct qp_options {
  std::uint32_t log_sq_depth = 10;  ///< WQEBBs, at most log2(max_sq_depth) and cmd_hca_cap.log_max_qp_sz
  cq_mode mode = cq_mode::collapsed;
  std::uint32_t log_ncqe = 0;  ///< owner-bit CQs: log2 of the entries (collapsed CQs: the SQ's depth)
  std::uint32_t ring_step = 32;
  std::uint32_t mtu = 5;  ///< ibv_mtu value (5 = 4096 B), capped at both ports' active MTU
  poster posted_by = poster::gpu;
};

/// One GPU-posted RC QP with its CQ (steps 5-12, 14). Construct, exchange local_info() with the
/// peer, call connect(peer_info), then pass send_queue() to kernels.
class qp {
 public:
  qp(device& dev, qp_options opt = {}) : dev_(dev), be_(dev.nic()), mem_(dev.memory()), opt_(opt) {
    try {
      build();
    } catch (...) {
      release();
      throw;
    }
  }
  qp(qp const&) = delete;
  qp& operator=(qp const&) = delete;
  ~qp() { release(); }

  /// Step 11: what the peer needs to connect to this QP.
  connection_info local_info() const { return dev_.info_for(qpn_); }

  /// Step 12b/c: INIT -> RTR -> RTS against the peer's connection_info (IB or RoCE).
  void connect(connection_info const& peer) { detail::devx_connect(dev_, qp_obj_, qpn_, opt_.mtu, peer); }

  /// Step 14: the device view kernels post through (valid after connect()).
  verbs_gpu::send_queue send_queue() const noexcept {
    verbs_gpu::send_queue sq{};
    sq.ring = static_cast<std::byte*>(ring_.ptr);
    sq.log_depth = opt_.log_sq_depth;
    sq.qpn = qpn_;
    sq.dbrec = static_cast<std::uint32_t*>(qp_dbr_.ptr) + dbr_snd;
    sq.doorbell = doorbell_;
    sq.counters = static_cast<qp_counters*>(counters_.ptr);
    sq.cq = completion_queue{static_cast<cqe64*>(cq_.ptr), static_cast<std::uint32_t*>(cq_dbr_.ptr),
                             opt_.mode == cq_mode::collapsed ? 0 : opt_.log_ncqe, opt_.mode, cqn_};
    sq.ring_step = opt_.ring_step;
    // GPU memory: the NIC reads ring and doorbell record where the GPU wrote them, so GPU-scope
    // release fences order the WQEs before the record; host memory needs system scope.
    sq.scope = mem_.gpu() ? nic_scope::gpu : nic_scope::system;
    return sq;
  }
  std::uint32_t qpn() const noexcept { return qpn_; }
  std::uint32_t cqn() const noexcept { return cqn_; }
  /// log2 of the CQ's entries as created (collapsed: the SQ's depth, refs section 3).
  std::uint32_t log_cq_size() const noexcept { return log_cq_; }

 private:
  /// One buffer of control memory and its UMEM.
  struct block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    umem_handle umem{};
  };

  /// Control memory for one object: `bytes` rounded up to 4 KiB, filled with `value`.
  void allocate(block& b, std::size_t bytes, unsigned char value, char const* what) {
    // Whole host pages: dma-buf exports (cuMemGetHandleForAddressRange) need the host page size,
    // 64 KiB on some hosts.
    b.bytes = detail::round_up(bytes, std::max<std::size_t>(4096, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))));
    std::string why;
    b.ptr = mem_.allocate(b.bytes, 4096, &why);
    if (b.ptr == nullptr)
      detail::fail(
          "allocating " + std::to_string(b.bytes) + " bytes of " + mem_.name() + " for the " + what + " failed: " + why,
          "free memory on the GPU, or use fewer or shallower QPs");
    if (!mem_.fill(b.ptr, value, b.bytes, &why))
      detail::fail(std::string("initialising the ") + what + " (" + mem_.name() + ") failed: " + why);
  }

  void build() {
    device_caps const& caps = dev_.caps();
    std::string const on = " on " + dev_.name();
    if (opt_.log_sq_depth > 15 || (1u << opt_.log_sq_depth) > max_sq_depth)  // no shift past 31
      detail::fail("qp_options::log_sq_depth = " + std::to_string(opt_.log_sq_depth) +
                       ": the SQ is at most max_sq_depth (32768) WQEBBs",
                   "the 16-bit wqe_counter must stay unambiguous (completion_queue.cuh)");
    if (opt_.log_sq_depth > caps.log_max_qp_sz)
      detail::fail("qp_options::log_sq_depth = " + std::to_string(opt_.log_sq_depth) + " exceeds" + on +
                       "'s log_max_qp_sz = " + std::to_string(caps.log_max_qp_sz) + " (QUERY_HCA_CAP)",
                   "ask for a shallower SQ");
    // ---- refs section 3: a collapsed CQ as NVSHMEM and DOCA make it: cc = 1, oi = 1, as many
    // entries as the SQ has WQEBBs (log_cq_size = log2 of the depth rounded up to a power of two,
    // the whole ring allocated and 0xff-filled although only entry 0 is written).
    bool const collapsed = opt_.mode == cq_mode::collapsed;
    log_cq_ = collapsed ? detail::log2_ceil(std::uint64_t{1} << opt_.log_sq_depth) : opt_.log_ncqe;
    if (log_cq_ > caps.log_max_cq_sz)
      detail::fail("a CQ of 2^" + std::to_string(log_cq_) + " entries exceeds" + on +
                       "'s log_max_cq_sz = " + std::to_string(caps.log_max_cq_sz) + " (QUERY_HCA_CAP)",
                   collapsed ? "ask for a shallower SQ" : "ask for fewer CQ entries (qp_options::log_ncqe)");
    if (collapsed && !caps.cq_oi)
      detail::fail("a collapsed CQ needs overrun-ignore, which" + on + " lacks (cmd_hca_cap.cq_oi = 0)",
                   "use qp_options::mode = cq_mode::owner_bit");
    if (opt_.posted_by == poster::host && mem_.gpu())
      detail::fail("a QP the host posts to needs its rings in memory the host writes, not " + std::string(mem_.name()),
                   "give device_options::memory host memory (host_control_memory)");

    // ---- Step 5: control memory, one allocation per object (0xff marks CQEs invalid) ----------------
    allocate(ring_, std::size_t{wqebb_size} << opt_.log_sq_depth, 0, "SQ ring");
    allocate(cq_, sizeof(cqe64) << log_cq_, 0xff, "CQ");
    allocate(cq_dbr_, 64, 0, "CQ doorbell record");
    allocate(qp_dbr_, 64, 0, "QP doorbell record");
    allocate(counters_, sizeof(qp_counters), 0, "posting counters");
    // ---- Step 6: a UMEM each -------------------------------------------------------------------------
    ring_.umem = detail::register_umem(dev_, ring_.ptr, ring_.bytes, "SQ ring");
    cq_.umem = detail::register_umem(dev_, cq_.ptr, cq_.bytes, "CQ");
    cq_dbr_.umem = detail::register_umem(dev_, cq_dbr_.ptr, cq_dbr_.bytes, "CQ doorbell record");
    qp_dbr_.umem = detail::register_umem(dev_, qp_dbr_.ptr, qp_dbr_.bytes, "QP doorbell record");

    // ---- Step 7: the CQ (an NC UAR it names but the GPU never rings, EQ of vector 0) ------------------
    std::uint32_t eqn = 0;
    if (int const e = be_.query_eqn(0, &eqn); e != 0)
      detail::fail("query_eqn(0)" + on + " failed: " + detail::errno_text(e) + detail::said(be_));
    int e = 0;
    cq_uar_ = be_.alloc_uar(uar_type::nc, &e);
    if (!cq_uar_)
      detail::fail("alloc_uar(NC) for the CQ" + on + " failed: " + detail::errno_text(e) + detail::said(be_));
    {
      std::uint32_t in[prm::create_cq_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_cq);
      prm::set(in, prm::cqc_cqe_sz, 0);  // 64-byte CQEs
      prm::set(in, prm::cqc_cc, collapsed ? 1 : 0);
      prm::set(in, prm::cqc_oi, collapsed ? 1 : 0);
      prm::set(in, prm::cqc_log_cq_size, log_cq_);
      prm::set(in, prm::cqc_uar_page, cq_uar_.page_id);
      prm::set(in, prm::cqc_c_eqn, eqn);
      // With cq_umem_valid the firmware takes the page size from the UMEM (DOCA sets 0 and says so;
      // NVSHMEM's 4 matches its 64 KiB GPU pages; refs section 3).
      prm::set(in, prm::cqc_log_page_size, 0);
      prm::set(in, prm::cqc_page_offset, 0);
      prm::set(in, prm::cqc_dbr_umem_valid, 1);
      prm::set(in, prm::cqc_dbr_umem_id, cq_dbr_.umem.id);
      prm::set(in, prm::cqc_dbr_addr, 0);
      prm::set(in, prm::cq_umem_valid, 1);
      prm::set(in, prm::cq_umem_id, cq_.umem.id);
      prm::set(in, prm::cq_umem_offset, 0);
      cq_obj_ = be_.obj_create(in, sizeof in, out, sizeof out, &e);
      if (!cq_obj_) detail::check_cmd(be_, e != 0 ? e : EIO, out, "DEVX CREATE_CQ" + on);
      cqn_ = prm::get(out, prm::out_obj_number);
    }

    // ---- Step 8: the SQ doorbell UAR, mapped into the GPU (refs section 6) ----------------------------
    for (uar_type const t : {uar_type::nc_dedicated, uar_type::blue_flame, uar_type::nc}) {
      qp_uar_ = be_.alloc_uar(t, &e);
      if (qp_uar_) {
        qp_uar_type_ = t;
        break;
      }
    }
    if (!qp_uar_)
      detail::fail("alloc_uar for the SQ doorbell" + on +
                   " failed for NC_DEDICATED, BF and NC: " + detail::errno_text(e) + detail::said(be_));
    if (opt_.posted_by == poster::host) {
      doorbell_ = static_cast<std::uint64_t*>(qp_uar_.reg_addr);  // the host rings through the UAR's own mapping
    } else {
      // A BlueFlame register is 1 << log_bf_reg_size bytes (NVSHMEM maps all of it); NC registers 8.
      std::size_t const reg_bytes = qp_uar_type_ == uar_type::blue_flame ? std::size_t{1} << caps.log_bf_reg_size : 8;
      doorbell_ = dev_.map_doorbell(qp_uar_, reg_bytes);
      db_mapped_ = true;
    }

    // ---- Steps 9 and 10: CREATE_QP on the ring and QP doorbell record UMEMs ------------------------------
    {
      std::uint32_t in[prm::create_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_qp);
      prm::set(in, prm::qpc_st, prm::qp_st_rc);
      prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
      prm::set(in, prm::qpc_pd, dev_.pdn());
      prm::set(in, prm::qpc_uar_page, qp_uar_.page_id);
      prm::set(in, prm::qpc_ts_format, ts_format());
      prm::set(in, prm::qpc_log_sq_size, opt_.log_sq_depth);
      prm::set(in, prm::qpc_rq_type, prm::rq_type_zero_length);
      prm::set(in, prm::qpc_cqn_snd, cqn_);
      prm::set(in, prm::qpc_cqn_rcv, cqn_);
      prm::set(in, prm::qpc_log_page_size, 0);  // from the UMEM, as for the CQ
      prm::set(in, prm::qpc_page_offset, 0);
      prm::set(in, prm::qpc_dbr_umem_valid, 1);
      prm::set(in, prm::qpc_dbr_umem_id, qp_dbr_.umem.id);
      prm::set(in, prm::qpc_dbr_addr, 0);
      prm::set(in, prm::wq_umem_valid, 1);
      prm::set(in, prm::wq_umem_id, ring_.umem.id);
      prm::set(in, prm::wq_umem_offset, 0);
      qp_obj_ = be_.obj_create(in, sizeof in, out, sizeof out, &e);
      if (!qp_obj_) detail::check_cmd(be_, e != 0 ? e : EIO, out, "DEVX CREATE_QP" + on);
      qpn_ = prm::get(out, prm::out_obj_number);
    }
    // ---- Step 12a: RESET -> INIT (connection.hpp) ---------------------------------------------------
    detail::devx_rst2init(dev_, qp_obj_, qpn_);
  }

  /// refs section 1: the kernel's rule for user QPs (get_qp_ts_format): FREE_RUNNING when the
  /// device supports it (capability FREE_RUNNING or FREE_RUNNING_AND_REAL_TIME), else DEFAULT. Every
  /// capability that applies must allow it: roce_cap.qp_ts_format on RoCE devices, and
  /// cmd_hca_cap.sq_ts_format for the send queue.
  std::uint32_t ts_format() const noexcept {
    auto const free_running = [](unsigned cap) {
      return cap == prm::ts_cap_free_running || cap == prm::ts_cap_free_running_and_real_time;
    };
    device_caps const& c = dev_.caps();
    bool const fr = free_running(c.sq_ts_format) && (!c.roce || free_running(c.roce_qp_ts_format));
    return fr ? prm::ts_format_free_running : prm::ts_format_default;
  }

  /// Releases what exists, users before what they use (also after a constructor failed halfway).
  /// A QP or CQ the firmware refuses to destroy may still be read and written by the NIC: then
  /// nothing it uses is released (device::kept_qps() counts it), rather than freed under it.
  void release() noexcept {
    bool const qp_gone = !qp_obj_ || be_.obj_destroy(qp_obj_) == 0;
    bool const cq_gone = qp_gone && (!cq_obj_ || be_.obj_destroy(cq_obj_) == 0);
    qp_obj_ = cq_obj_ = obj_handle{};
    if (!qp_gone || !cq_gone) {
      dev_.keep_qp();
      return;
    }
    if (db_mapped_) dev_.unmap_doorbell(qp_uar_);  // before the UAR is freed
    db_mapped_ = false;
    if (qp_uar_) be_.free_uar(qp_uar_);
    if (cq_uar_) be_.free_uar(cq_uar_);
    qp_uar_ = cq_uar_ = uar_handle{};
    for (block* b : {&qp_dbr_, &cq_dbr_, &cq_, &ring_, &counters_}) {
      if (b->umem) be_.umem_dereg(b->umem);
      if (b->ptr) mem_.deallocate(b->ptr);
      *b = block{};
    }
  }

  device& dev_;
  backend& be_;
  control_memory& mem_;
  qp_options opt_;
  block ring_, cq_, cq_dbr_, qp_dbr_, counters_;
  std::uint32_t log_cq_ = 0;
  uar_handle cq_uar_{}, qp_uar_{};
  uar_type qp_uar_type_ = uar_type::nc;
  bool db_mapped_ = false;
  std::uint64_t* doorbell_ = nullptr;  ///< the GPU's mapping of the register, or the host's (poster::host)
  obj_handle cq_obj_{}, qp_obj_{};
  std::uint32_t cqn_ = 0, qpn_ = 0;
};

/// One RC QP a host thread posts to with verbs_gpu's builders (ProxyQueue's NIC backend), with an
/// owner-bit CQ of its own, at least as many entries as the SQ has WQEBBs, so no completion is overwritten
/// before it is polled. Construct, exchange local_info(), connect(), then post through send_queue()
/// from one host thread.
///
/// Made with ordinary verbs where the backend has them (rdma-core; device_options::devx = false
/// opens the device without DEVX): ibv_create_cq and ibv_create_qp, whose rings, doorbell records
/// and doorbell register mlx5dv_init_obj exposes, connected with ibv_modify_qp. The firmware model
/// has no ordinary verbs: there it is a qp (above) with its rings in the device's control memory,
/// which must be host memory, and the host ringing the UAR's register itself (poster::host); the
/// posting, polling and connection data are the same either way.
class host_qp {
 public:
  host_qp(device& dev, std::uint32_t log_sq_depth) : dev_(dev) {
    if (!dev.nic().native_verbs_qps()) {
      qp_options o;
      o.log_sq_depth = log_sq_depth;
      o.mode = cq_mode::owner_bit;
      o.log_ncqe = log_sq_depth;
      o.posted_by = poster::host;
      devx_ = std::make_unique<qp>(dev, o);
      return;
    }
    // Every WQE may ask for a completion, so the CQ needs an entry per WQEBB of the ring, and the
    // provider sizes the ring by work request: mlx5's reserves its largest default RC WQE for each
    // (256 bytes, 4 WQEBBs, with the memory-window operations it enables by default). A CQ of 4
    // entries per work request covers that; a provider that made a larger ring gets a QP again
    // with a CQ of the ring's size.
    create(log_sq_depth, log_sq_depth + 2);
    if (h_.cqe_count < h_.sq_wqebbs) {
      std::uint32_t const log_ring = detail::log2_ceil(h_.sq_wqebbs);
      release();
      create(log_sq_depth, log_ring);
    }
    try {
      // What the builders and the poller assume of the rings rdma-core's provider made.
      auto const power_of_two = [](std::uint32_t v) { return v != 0 && (v & (v - 1)) == 0; };
      if (h_.sq_stride != wqebb_size || !power_of_two(h_.sq_wqebbs) || h_.sq_wqebbs < (1u << log_sq_depth) ||
          h_.sq_wqebbs > max_sq_depth)
        detail::fail("the provider's send queue has " + std::to_string(h_.sq_wqebbs) + " WQEBBs of " +
                     std::to_string(h_.sq_stride) +
                     " bytes; verbs_gpu posts 64-byte WQEBBs to a ring of a power "
                     "of two, at least 2^" +
                     std::to_string(log_sq_depth) + ", at most " + std::to_string(max_sq_depth));
      if (h_.cqe_size != sizeof(cqe64) || !power_of_two(h_.cqe_count))
        detail::fail("the provider's CQ has " + std::to_string(h_.cqe_count) + " entries of " +
                         std::to_string(h_.cqe_size) + " bytes; verbs_gpu reads 64-byte CQEs",
                     "unset MLX5_CQE_SIZE (or set it to 64)");
      if (h_.cqe_count < h_.sq_wqebbs)
        detail::fail("the provider's CQ has " + std::to_string(h_.cqe_count) + " entries for a send queue of " +
                         std::to_string(h_.sq_wqebbs) +
                         " WQEBBs: completions could be overwritten before the proxy polls them",
                     "the device's CQs cannot hold an entry per WQEBB of its send queues (`ibv_devinfo -v`: max_cqe), "
                     "which verbs_gpu's posting needs");
      counters_ = std::make_unique<qp_counters>();
      detail::verbs_rst2init(dev, h_);
    } catch (...) {
      release();
      throw;
    }
  }
  host_qp(host_qp const&) = delete;
  host_qp& operator=(host_qp const&) = delete;
  ~host_qp() { release(); }

  std::uint32_t qpn() const noexcept { return devx_ ? devx_->qpn() : h_.qpn; }
  connection_info local_info() const { return devx_ ? devx_->local_info() : dev_.info_for(h_.qpn); }

  /// INIT -> RTR -> RTS against the peer's connection_info (IB or RoCE), as qp::connect.
  void connect(connection_info const& peer) {
    if (devx_) {
      devx_->connect(peer);
      return;
    }
    detail::verbs_connect(dev_, h_, peer);
  }

  /// The view the host thread posts and polls through (valid after connect()).
  verbs_gpu::send_queue send_queue() const noexcept {
    if (devx_) return devx_->send_queue();
    verbs_gpu::send_queue sq{};
    sq.ring = static_cast<std::byte*>(h_.sq);
    sq.log_depth = detail::log2_ceil(h_.sq_wqebbs);
    sq.qpn = h_.qpn;
    sq.dbrec = h_.dbrec + dbr_snd;
    sq.doorbell = h_.doorbell;
    sq.counters = counters_.get();
    sq.cq = completion_queue{static_cast<cqe64*>(h_.cqes), h_.cq_dbrec, detail::log2_ceil(h_.cqe_count),
                             cq_mode::owner_bit, h_.cqn};
    sq.scope = nic_scope::system;  // host memory, written by a host thread
    return sq;
  }

 private:
  /// ibv_create_cq + ibv_create_qp through the backend, into h_.
  void create(std::uint32_t log_send_wrs, std::uint32_t log_cqes) {
    backend& be = dev_.nic();
    int e = 0;
    h_ = be.create_verbs_qp(dev_.pd(), log_send_wrs, log_cqes, &e);
    if (!h_)
      detail::fail("ibv_create_cq (" + std::to_string(1u << log_cqes) + " entries) + ibv_create_qp (RC, " +
                       std::to_string(1u << log_send_wrs) + " send WRs) on " + dev_.name() +
                       " failed: " + detail::errno_text(e) + detail::said(be),
                   "check `ulimit -l` (locked memory) and the device's QP and CQ limits");
  }
  /// A QP rdma-core refuses to destroy may still be used by the NIC: then its counters are kept too.
  void release() noexcept {
    if (h_ && dev_.nic().destroy_verbs_qp(h_) != 0) {
      dev_.keep_qp();
      (void)counters_.release();
    }
    h_ = verbs_qp_handle{};
  }

  device& dev_;
  std::unique_ptr<qp> devx_;               ///< the firmware model's way
  verbs_qp_handle h_{};                    ///< rdma-core's way
  std::unique_ptr<qp_counters> counters_;  ///< the posting counters (rdma-core's way; the qp has its own)
};

}  // namespace gpucomm::verbs_gpu::host
