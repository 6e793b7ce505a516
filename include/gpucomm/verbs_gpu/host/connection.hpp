#pragma once
// Connecting RC QPs (steps 11 and 12 of the host set-up): exchange() hands every rank's
// connection_info to all, and the state machine takes a QP RESET -> INIT when it is made and
// INIT -> RTR -> RTS against its peer's connection_info, on InfiniBand or RoCE: with DEVX commands
// for a qp, with ibv_modify_qp for a host_qp's ordinary-verbs QP. qp::connect and host_qp::connect
// (queues.hpp) are the public way in.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend.hpp"
#include "detail/setup_common.hpp"
#include "device.hpp"
#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

/// Step 11: exchanges connection_info through any allgather: `allgather(mine, all, bytes)` writes
/// every rank's `bytes` bytes, in rank order, into `all` (an MPI_Allgather, a bootstrap's
/// allgather, torch.distributed through a callback).
template <class AllGather>
std::vector<connection_info> exchange(AllGather&& allgather, connection_info const& mine, int ranks) {
  std::vector<connection_info> all(static_cast<std::size_t>(ranks));
  allgather(static_cast<void const*>(&mine), static_cast<void*>(all.data()), sizeof(connection_info));
  return all;
}

namespace detail {
// ---- RoCE v2 UDP source port (the kernel's mlx5_set_path_udp_sport; refs section 5) ----------------
/// rdma_calc_flow_label: a flow label both ends of a connection compute alike.
constexpr std::uint32_t flow_label(std::uint32_t lqpn, std::uint32_t rqpn) noexcept {
  std::uint64_t v = std::uint64_t{lqpn} * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<std::uint32_t>(v & 0xfffffu);
}
/// rdma_flow_label_to_udp_sport: 14 bits of the label in the RoCE v2 source port range 0xc000-0xffff.
constexpr std::uint16_t udp_sport(std::uint32_t fl) noexcept {
  std::uint32_t const low = (fl & 0x3fffu) ^ ((fl & 0xfc000u) >> 14);
  return static_cast<std::uint16_t>(low | 0xc000u);
}

// ---- DEVX QPs (qp) -----------------------------------------------------------------------------------
/// Step 12a: RESET -> INIT of the DEVX QP `obj` (number `qpn`) on `dev`, remote writes, reads and
/// atomics up to 8 bytes allowed.
inline void devx_rst2init(device& dev, obj_handle obj, std::uint32_t qpn) {
  backend& be = dev.nic();
  std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
  std::uint32_t out[prm::out_bytes / 4] = {};
  prm::set(in, prm::in_opcode, prm::op_rst2init_qp);
  prm::set(in, prm::modify_qpn, qpn);
  prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
  prm::set(in, prm::qpc_rwe, 1);
  prm::set(in, prm::qpc_rre, 1);
  prm::set(in, prm::qpc_rae, 1);
  prm::set(in, prm::qpc_atomic_mode, prm::atomic_mode_up_to_8b);
  prm::set(in, prm::ads_vhca_port_num, dev.port());
  prm::set(in, prm::ads_pkey_index, dev.options().pkey_index);
  prm::set(in, prm::qpc_counter_set_id, 0);
  int const rc = be.obj_modify(obj, in, sizeof in, out, sizeof out);
  detail::check_cmd(be, rc, out, "DEVX RST2INIT_QP (QP " + detail::hex(qpn) + ")");
}

/// Steps 12b/c: INIT -> RTR -> RTS of the DEVX QP `obj` (number `qpn`) on `dev` against the peer's
/// connection_info (IB or RoCE), at a path MTU of at most `wanted_mtu` (an ibv_mtu value).
inline void devx_connect(device& dev, obj_handle obj, std::uint32_t qpn, std::uint32_t wanted_mtu,
                         connection_info const& peer) {
  backend& be = dev.nic();
  bool const roce = dev.port_attr().ethernet;
  std::uint32_t const mtu = dev.path_mtu(qpn, peer, wanted_mtu);
  device_caps const& caps = dev.caps();
  device_options const& o = dev.options();
  {  // INIT -> RTR
    std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
    std::uint32_t out[prm::out_bytes / 4] = {};
    prm::set(in, prm::in_opcode, prm::op_init2rtr_qp);
    prm::set(in, prm::modify_qpn, qpn);
    prm::set(in, prm::qpc_mtu, mtu);
    prm::set(in, prm::qpc_log_msg_max, caps.log_max_msg);
    prm::set(in, prm::qpc_remote_qpn, peer.qpn);
    prm::set(in, prm::qpc_min_rnr_nak, 12);
    prm::set(in, prm::qpc_next_rcv_psn, 0);
    // What this QP answers; local_info() told the peer, which caps its log_sra_max by it.
    prm::set(in, prm::qpc_log_rra_max, dev.ra_cap());
    prm::set(in, prm::ads_vhca_port_num, dev.port());
    if (roce) {
      // grh stays 0 on RoCE (refs section 5: the bit is reserved there; every RoCE packet has a
      // GRH). The destination MAC comes from an address handle the provider resolves.
      ah_info ah;
      if (int const e = be.resolve_ah(dev.pd(), dev.port(), peer.gid, dev.gid_index(), &ah); e != 0)
        detail::fail(
            "resolving the RoCE peer's MAC (ibv_create_ah) failed: " + detail::errno_text(e) + detail::said(be),
            "check the GID index and that the peer's address is reachable (ping it)");
      std::uint8_t const tclass = dev.traffic_class();
      prm::set_bytes(in, prm::ads_rmac_bit, ah.rmac, 6);
      prm::set_bytes(in, prm::ads_rgid_rip_bit, peer.gid, 16);
      prm::set(in, prm::ads_hop_limit, 255);
      prm::set(in, prm::ads_src_addr_index, static_cast<std::uint32_t>(dev.gid_index()));
      prm::set(in, prm::ads_tclass, tclass);
      prm::set(in, prm::ads_eth_prio, o.sl & 7u);  // the kernel's mlx5_set_path: eth_prio = sl & 7
      if (dev.gid().type == gid_type::roce_v2) {
        prm::set(in, prm::ads_dscp, tclass >> 2);
        prm::set(in, prm::ads_udp_sport, detail::udp_sport(detail::flow_label(qpn, peer.qpn)));
      }
    } else {
      prm::set(in, prm::ads_grh, 0);
      prm::set(in, prm::ads_rlid, peer.lid);
      prm::set(in, prm::ads_sl, o.sl);
    }
    int const rc = be.obj_modify(obj, in, sizeof in, out, sizeof out);
    detail::check_cmd(be, rc, out, "DEVX INIT2RTR_QP (QP " + detail::hex(qpn) + " to " + detail::hex(peer.qpn) + ")");
  }
  {  // RTR -> RTS
    std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
    std::uint32_t out[prm::out_bytes / 4] = {};
    prm::set(in, prm::in_opcode, prm::op_rtr2rts_qp);
    prm::set(in, prm::modify_qpn, qpn);
    prm::set(in, prm::qpc_log_ack_req_freq, 0);
    prm::set(in, prm::qpc_log_sra_max, std::min({dev.ra_cap(), unsigned{peer.log_rra_max}}));
    prm::set(in, prm::qpc_next_send_psn, 0);
    prm::set(in, prm::qpc_retry_count, 7);
    prm::set(in, prm::qpc_rnr_retry, 7);
    prm::set(in, prm::ads_ack_timeout, 20);
    int const rc = be.obj_modify(obj, in, sizeof in, out, sizeof out);
    detail::check_cmd(be, rc, out, "DEVX RTR2RTS_QP (QP " + detail::hex(qpn) + ")");
  }
}

// ---- ordinary-verbs QPs (host_qp) -----------------------------------------------------------------
/// One ibv_modify_qp step of the ordinary-verbs QP `h` on `dev`; `what` names it in the error.
inline void verbs_step(device& dev, verbs_qp_handle const& h, verbs_qp_step const& s, std::string const& what) {
  if (int const e = dev.nic().modify_verbs_qp(h, s); e != 0)
    detail::fail("ibv_modify_qp " + what + " of QP " + detail::hex(h.qpn) + " on " + dev.name() +
                     " failed: " + detail::errno_text(e) + detail::said(dev.nic()),
                 "check the port, the peer's connection data and the device's read/atomic limits");
}

/// RESET -> INIT of the ordinary-verbs QP `h` on `dev`, remote writes, reads and atomics allowed.
inline void verbs_rst2init(device& dev, verbs_qp_handle const& h) {
  verbs_qp_step init;
  init.state = verbs_qp_step::to::init;
  init.port = dev.port();
  init.pkey_index = dev.options().pkey_index;
  init.access_flags = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
  verbs_step(dev, h, init, "RESET -> INIT");
}

/// INIT -> RTR -> RTS of the ordinary-verbs QP `h` on `dev` against the peer's connection_info (IB
/// or RoCE), with the same limits as devx_connect.
inline void verbs_connect(device& dev, verbs_qp_handle const& h, connection_info const& peer) {
  bool const roce = dev.port_attr().ethernet;
  verbs_qp_step rtr;
  rtr.state = verbs_qp_step::to::rtr;
  rtr.port = dev.port();
  rtr.path_mtu = dev.path_mtu(h.qpn, peer, 5);
  rtr.remote_qpn = peer.qpn;
  rtr.responder_rd_atomic = static_cast<std::uint8_t>(1u << dev.ra_cap());  // what local_info() offered
  rtr.min_rnr_timer = 12;
  rtr.sl = roce ? static_cast<std::uint8_t>(dev.options().sl & 7u) : dev.options().sl;
  if (roce) {
    rtr.global = true;  // every RoCE packet has a GRH; the provider resolves the MAC
    std::memcpy(rtr.dgid, peer.gid, 16);
    rtr.sgid_index = dev.gid_index();
    rtr.traffic_class = dev.traffic_class();
  } else {
    rtr.dlid = peer.lid;
  }
  verbs_step(dev, h, rtr, "INIT -> RTR (to QP " + detail::hex(peer.qpn) + ")");
  verbs_qp_step rts;
  rts.state = verbs_qp_step::to::rts;
  rts.port = dev.port();
  rts.initiator_rd_atomic = static_cast<std::uint8_t>(1u << std::min(dev.ra_cap(), unsigned{peer.log_rra_max}));
  verbs_step(dev, h, rts, "RTR -> RTS");
}
}  // namespace detail

}  // namespace gpucomm::verbs_gpu::host
