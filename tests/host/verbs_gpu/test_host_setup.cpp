// verbs_gpu host setup without a NIC: the PRM command field encoder, and the clear error a
// machine without an RDMA device gets from the set-up on rdma-core (setup_model_test.cpp runs the
// set-up against the firmware model).
#include <catch2/catch.hpp>

#if __has_include(<infiniband/mlx5dv.h>) && defined(GPUCOMM_HAVE_RDMA_CORE)
#include <gpucomm/verbs_gpu/host/rdma_core_backend.hpp>
#include <gpucomm/verbs_gpu/host/setup.hpp>

#include <cstring>

namespace prm = gpucomm::verbs_gpu::host::prm;

TEST_CASE("verbs_gpu PRM command fields land where DEVX_SET puts them", "[verbs][host]") {
  std::uint32_t buf[prm::create_qp_in_bytes / 4] = {};
  prm::set(buf, prm::in_opcode, prm::op_create_qp);
  CHECK(be32toh(buf[0]) == 0x05000000u);
  // qpc.pd: bits 0xc0 + 0x28 .. + 24, the low 24 bits of big-endian word 7.
  prm::set(buf, prm::qpc_pd, 0xabcdef);
  CHECK(be32toh(buf[7]) == 0x00abcdefu);
  // qpc.log_sq_size: 4 bits at 0xc0 + 0x51, i.e. bits [14:11] of word 8 (counting from bit 31).
  prm::set(buf, prm::qpc_log_sq_size, 0xf);
  CHECK(be32toh(buf[8]) == (0xfu << (32 - 0x11 - 4)));
  CHECK(prm::get(buf, prm::qpc_log_sq_size) == 0xf);
  // A 64-bit field: qpc.dbr_addr at bit 0xc0 + 0x500 = 0x5c0, words 46 and 47.
  prm::set(buf, prm::qpc_dbr_addr, 0x0123456789abcdefull);
  CHECK(be32toh(buf[46]) == 0x01234567u);
  CHECK(be32toh(buf[47]) == 0x89abcdefu);
  // Neighbours untouched, values masked to the field width.
  prm::set(buf, prm::qpc_rwe, 7);
  CHECK(prm::get(buf, prm::qpc_rwe) == 1);
  CHECK(prm::get(buf, prm::qpc_rre) == 0);
  CHECK(prm::get(buf, prm::qpc_rae) == 0);
  CHECK(prm::get(buf, prm::qpc_atomic_mode) == 0);
  // Every field read back after writing all-ones into a zeroed buffer has exactly its width.
  for (auto f : {prm::cqc_cc, prm::cqc_oi, prm::cqc_log_cq_size, prm::cqc_uar_page, prm::cqc_c_eqn, prm::qpc_mtu,
                 prm::qpc_remote_qpn, prm::ads_rlid, prm::qpc_retry_count, prm::qpc_rnr_retry, prm::qpc_next_send_psn,
                 prm::qpc_cqn_snd, prm::qpc_min_rnr_nak, prm::qpc_rq_type}) {
    std::uint32_t b[prm::create_qp_in_bytes / 4] = {};
    prm::set(b, f, ~0ull);
    CHECK(prm::get(b, f) == (f.width == 32 ? 0xffffffffu : (1u << f.width) - 1));
    unsigned ones = 0;
    for (auto w : b) ones += static_cast<unsigned>(__builtin_popcount(w));
    CHECK(ones == f.width);
  }
}

// What rdma_core_backend hands ibv_modify_qp for host_qp's three steps: the attribute masks are
// the sets ibv_modify_qp(3) lists as required for an RC QP (the same rdma-core's rc_pingpong and
// pyverbs pass), written out here from the man page's table; every value lands in its field.
TEST_CASE("rdma_core_backend: ibv_modify_qp's attributes and masks for RESET -> INIT -> RTR -> RTS",
          "[verbs][host][host_qp]") {
  namespace vh = gpucomm::verbs_gpu::host;
  ibv_qp_attr a;
  std::memset(&a, 0xa5, sizeof a);  // poisoned: every field the step does not set must be cleared
  vh::verbs_qp_step init;
  init.state = vh::verbs_qp_step::to::init;
  init.port = 2;
  init.pkey_index = 3;
  init.access_flags =
      vh::access::local_write | vh::access::remote_write | vh::access::remote_read | vh::access::remote_atomic;
  CHECK(vh::verbs_qp_attributes(init, a) == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
  CHECK(a.qp_state == IBV_QPS_INIT);
  CHECK(a.port_num == 2);
  CHECK(a.pkey_index == 3);
  CHECK(a.qp_access_flags ==
        unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC});
  CHECK(a.dest_qp_num == 0);

  vh::verbs_qp_step rtr;
  rtr.state = vh::verbs_qp_step::to::rtr;
  rtr.port = 1;
  rtr.path_mtu = 5;
  rtr.remote_qpn = 0xabcde;
  rtr.responder_rd_atomic = 16;
  rtr.min_rnr_timer = 12;
  rtr.dlid = 0x1234;
  rtr.sl = 9;
  std::memset(&a, 0xa5, sizeof a);
  int const rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  CHECK(vh::verbs_qp_attributes(rtr, a) == rtr_mask);
  CHECK(a.qp_state == IBV_QPS_RTR);
  CHECK(a.path_mtu == IBV_MTU_4096);
  CHECK(a.dest_qp_num == 0xabcdeu);
  CHECK(a.rq_psn == 0);
  CHECK(a.max_dest_rd_atomic == 16);
  CHECK(a.min_rnr_timer == 12);
  CHECK(a.ah_attr.dlid == 0x1234);
  CHECK(a.ah_attr.sl == 9);
  CHECK(a.ah_attr.port_num == 1);
  CHECK(a.ah_attr.is_global == 0);
  CHECK(a.ah_attr.grh.hop_limit == 0);

  // RoCE: a GRH to the peer's GID from the chosen source GID.
  rtr.global = true;
  rtr.dlid = 0;
  for (int i = 0; i < 16; ++i) rtr.dgid[i] = static_cast<std::uint8_t>(0xf0 + i);
  rtr.sgid_index = 3;
  rtr.traffic_class = 0x62;
  std::memset(&a, 0xa5, sizeof a);
  CHECK(vh::verbs_qp_attributes(rtr, a) == rtr_mask);
  CHECK(a.ah_attr.is_global == 1);
  CHECK(std::memcmp(a.ah_attr.grh.dgid.raw, rtr.dgid, 16) == 0);
  CHECK(a.ah_attr.grh.sgid_index == 3);
  CHECK(a.ah_attr.grh.hop_limit > 1);  // routable
  CHECK(a.ah_attr.grh.traffic_class == 0x62);
  CHECK(a.ah_attr.dlid == 0);

  vh::verbs_qp_step rts;
  rts.state = vh::verbs_qp_step::to::rts;
  rts.timeout = 20;
  rts.retry_count = 7;
  rts.rnr_retry = 7;
  rts.initiator_rd_atomic = 8;
  std::memset(&a, 0xa5, sizeof a);
  CHECK(vh::verbs_qp_attributes(rts, a) == (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
  CHECK(a.qp_state == IBV_QPS_RTS);
  CHECK(a.timeout == 20);
  CHECK(a.retry_cnt == 7);
  CHECK(a.rnr_retry == 7);
  CHECK(a.sq_psn == 0);  // the peer's RTR expects 0 (rq_psn above)
  CHECK(a.max_rd_atomic == 8);
}

// What host_qp posts and polls through, taken from what mlx5dv_init_obj writes (mlx5dv.h's
// struct mlx5dv_qp and mlx5dv_cq), each field from its own distinct value.
TEST_CASE("rdma_core_backend: the rings mlx5dv_init_obj describes become host_qp's handle", "[verbs][host][host_qp]") {
  namespace vh = gpucomm::verbs_gpu::host;
  alignas(64) static unsigned char sq_ring[4096], cq_ring[4096], uar[4096];
  alignas(64) static __be32 qp_dbrec[2], cq_dbrec[2];
  mlx5dv_qp dq{};
  dq.dbrec = qp_dbrec;
  dq.sq.buf = sq_ring + 256;  // after a receive queue
  dq.sq.wqe_cnt = 64;
  dq.sq.stride = 64;
  dq.rq.buf = sq_ring;
  dq.rq.wqe_cnt = 4;
  dq.rq.stride = 64;
  dq.bf.reg = uar + 0x800;
  dq.bf.size = 256;
  mlx5dv_cq dc{};
  dc.buf = cq_ring;
  dc.dbrec = cq_dbrec;
  dc.cqe_cnt = 32;
  dc.cqe_size = 64;
  dc.cqn = 0x77;
  int impl = 0;
  vh::verbs_qp_handle const h = vh::verbs_qp_handle_of(&impl, 0x1b2c3, dq, dc);
  CHECK(h.impl == &impl);
  CHECK(h.qpn == 0x1b2c3u);
  CHECK(h.cqn == 0x77u);
  CHECK(h.sq == static_cast<void*>(sq_ring + 256));
  CHECK(h.sq_wqebbs == 64);
  CHECK(h.sq_stride == 64);
  CHECK(static_cast<void*>(h.dbrec) == static_cast<void*>(qp_dbrec));
  CHECK(static_cast<void*>(h.doorbell) == static_cast<void*>(uar + 0x800));
  CHECK(h.cqes == static_cast<void*>(cq_ring));
  CHECK(h.cqe_count == 32);
  CHECK(h.cqe_size == 64);
  CHECK(static_cast<void*>(h.cq_dbrec) == static_cast<void*>(cq_dbrec));
}

TEST_CASE("verbs_gpu host setup without an RDMA device fails with a clear message", "[verbs][host]") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  if (n > 0) {
    WARN("an RDMA device is present; the no-device error path is not exercised here");
    return;
  }
  try {
    gpucomm::verbs_gpu::host::rdma_core_backend be;
    gpucomm::verbs_gpu::host::device d(be);
    FAIL("opening a device succeeded without an RDMA device");
  } catch (gpucomm::verbs_gpu::host::setup_error const& e) {
    std::string const msg = e.what();
    CHECK(msg.find("no RDMA device") != std::string::npos);
    CHECK(msg.find("mlx5") != std::string::npos);
  }
}
#endif
