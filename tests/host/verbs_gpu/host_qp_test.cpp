// host_qp's ordinary-verbs branch (setup.hpp), which rdma-core takes on hardware, against a backend
// that answers the ordinary-verbs calls as mlx5's provider would (rings of its own, sized as the
// provider sizes them, CQEs initialised INVALID with owner 0) over the firmware model for
// everything else: the device opens
// without DEVX and sends no firmware command; the provider's rings become the send queue the proxy
// posts to; INIT, RTR and RTS carry the port, access, path and read/atomic depths, on InfiniBand
// and RoCE; a posted WQE rings the doorbell with the 8 bytes NVSHMEM and DOCA synthesize, and a CQE
// written as the NIC writes it completes it; the CQ has an entry for every WQEBB of the ring;
// rings the builders cannot use are refused; port options are checked without DEVX. What the real
// provider and NIC do is not here: this machine has no NIC.
#include <catch2/catch.hpp>

#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "forwarding_backend.hpp"
#include "model_devices.hpp"

using namespace verbs_test;
namespace vh = gpucomm::verbs_gpu::host;
using Catch::Matchers::Contains;

namespace {

/// Ordinary verbs as mlx5's provider answers them; the rest goes to the firmware model.
class provider_rings final : public forwarding_backend {
 public:
  explicit provider_rings(backend& inner) : forwarding_backend(inner) {}

  bool native_verbs_qps() const noexcept override { return true; }
  int open(std::string const& n) override {
    ++devx_opens;
    return forwarding_backend::open(n);
  }
  int open_verbs(std::string const& n) override {
    ++verbs_opens;
    return forwarding_backend::open(n);
  }
  int general_cmd(void const* in, std::size_t ib, void* out, std::size_t ob) override {
    ++firmware_commands;
    return forwarding_backend::general_cmd(in, ib, out, ob);
  }
  vh::verbs_qp_handle create_verbs_qp(vh::pd_handle, std::uint32_t log_wrs, std::uint32_t log_cqes, int*) override {
    ++created;
    asked_sq = log_wrs;
    asked_cqes = log_cqes;
    // Sized as mlx5's provider sizes them (providers/mlx5/verbs.c): the send queue reserves
    // wqe_bytes for every work request and rounds up to a power of two (mlx5_calc_sq_size:
    // roundup_pow_of_two(max_send_wr * wqe_size) / MLX5_SEND_WQE_BB), 256 bytes for an RC QP with
    // the default send operations; the CQ holds the entries asked for plus one, rounded up
    // (align_queue_size(cqe + 1)), at most max_cq_entries. Every CQE starts invalid with owner
    // bit 0 (op_own = MLX5_CQE_INVALID << 4).
    auto const pow2_at_least = [](std::uint64_t v) {
      std::uint64_t p = 1;
      while (p < v) p <<= 1;
      return p;
    };
    auto const wqebbs = static_cast<std::uint32_t>(pow2_at_least((std::uint64_t{1} << log_wrs) * wqe_bytes) / 64);
    auto const cqes = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(pow2_at_least((std::uint64_t{1} << log_cqes) + 1), max_cq_entries));
    sq.assign(std::size_t{stride} * wqebbs, std::byte{0});
    cq.assign(std::size_t{cqe_size} * cqes, 0);
    for (std::size_t i = 0; i < cqes; ++i) cq[i * cqe_size + 63] = 0xf0;
    vh::verbs_qp_handle h;
    h.impl = this;
    h.qpn = 0x1a2b;
    h.cqn = 0x3c;
    h.sq = sq.data();
    h.sq_wqebbs = wqebbs;
    h.sq_stride = stride;
    h.dbrec = dbrec;
    h.doorbell = &doorbell;
    h.cqes = cq.data();
    h.cqe_count = cqes;
    h.cqe_size = cqe_size;
    h.cq_dbrec = cq_dbrec;
    return h;
  }
  int modify_verbs_qp(vh::verbs_qp_handle const&, vh::verbs_qp_step const& step) override {
    steps.push_back(step);
    return 0;
  }
  int destroy_verbs_qp(vh::verbs_qp_handle) override {
    ++destroyed;
    return 0;
  }

  std::uint32_t stride = 64, cqe_size = 64;
  std::uint64_t wqe_bytes = 256;                          // the provider's reservation per work request
  std::uint64_t max_cq_entries = std::uint64_t{1} << 22;  // the device's CQ size limit
  int devx_opens = 0, verbs_opens = 0, firmware_commands = 0, created = 0, destroyed = 0;
  std::uint32_t asked_sq = 0, asked_cqes = 0;
  std::vector<std::byte> sq;
  std::vector<unsigned char> cq;
  alignas(64) std::uint32_t dbrec[2] = {0, 0};
  alignas(64) std::uint32_t cq_dbrec[2] = {0, 0};
  alignas(64) std::uint64_t doorbell = 0;
  std::vector<vh::verbs_qp_step> steps;
};

vh::device_options without_devx() {
  vh::device_options o;
  o.name = "mlx5_0";
  o.devx = false;
  return o;
}

struct model_device {
  vm::firmware_fabric fabric;
  vm::model_network net;
  vh::host_control_memory memory;
  vm::nic_backend inner;
  provider_rings be;
  explicit model_device(vm::firmware_config c) : fabric({std::move(c)}), inner(fabric, net, memory), be(inner) {}
};

}  // namespace

TEST_CASE("host_qp with ordinary verbs: the provider's rings, INIT/RTR/RTS, a post and its completion (IB)",
          "[verbs][host][host_qp]") {
  model_device m(gpucomm_test::ib_device("mlx5_0", 4));
  vh::device dev(m.be, without_devx());
  CHECK(m.be.verbs_opens == 1);
  CHECK(m.be.devx_opens == 0);
  CHECK(m.be.firmware_commands == 0);  // no QUERY_HCA_CAP: a DEVX command
  {
    vh::host_qp q(dev, 6);
    CHECK(m.be.asked_sq == 6);
    // 64 work requests take 256 WQEBBs of 64 bytes; the CQ asked for 256 entries (4 per work
    // request), which the provider makes 512.
    CHECK(m.be.asked_cqes == 8);
    CHECK(m.be.created == 1);
    REQUIRE(m.be.steps.size() == 1);
    vh::verbs_qp_step const& init = m.be.steps[0];
    CHECK(init.state == vh::verbs_qp_step::to::init);
    CHECK(init.port == 1);
    CHECK(init.pkey_index == 0);
    CHECK(init.access_flags ==
          (vh::access::local_write | vh::access::remote_write | vh::access::remote_read | vh::access::remote_atomic));

    vg::send_queue const sq = q.send_queue();
    CHECK(sq.ring == m.be.sq.data());
    CHECK(sq.log_depth == 8);  // the ring the provider made (256 WQEBBs), not the depth asked for
    CHECK(sq.qpn == 0x1a2b);
    CHECK(sq.dbrec == m.be.dbrec + 1);  // the send half of the QP's doorbell record
    CHECK(sq.doorbell == &m.be.doorbell);
    CHECK(static_cast<void*>(sq.cq.cqes) == m.be.cq.data());
    CHECK(sq.cq.dbrec == m.be.cq_dbrec);
    CHECK(sq.cq.log_ncqe == 9);  // at least an entry per WQEBB
    CHECK(sq.cq.mode == vg::cq_mode::owner_bit);
    CHECK(sq.cq.cqn == 0x3c);
    CHECK(sq.scope == vg::nic_scope::system);
    REQUIRE(sq.counters != nullptr);

    vh::connection_info const mine = q.local_info();
    CHECK(mine.qpn == 0x1a2b);
    CHECK(mine.lid == 4);
    CHECK(mine.link_layer == vh::link_layer_infiniband);
    vh::connection_info peer = mine;
    peer.qpn = 0x77;
    peer.lid = 9;
    peer.mtu = 3;
    peer.log_rra_max = 1;
    q.connect(peer);
    REQUIRE(m.be.steps.size() == 3);
    vh::verbs_qp_step const& rtr = m.be.steps[1];
    CHECK(rtr.state == vh::verbs_qp_step::to::rtr);
    CHECK(rtr.path_mtu == 3);  // the least of 4096 B, the peer's and the port's
    CHECK(rtr.remote_qpn == 0x77);
    CHECK(rtr.dlid == 9);
    CHECK_FALSE(rtr.global);
    CHECK(rtr.responder_rd_atomic == 16);  // what local_info offered: the model's 16 (ibv_query_device)
    vh::verbs_qp_step const& rts = m.be.steps[2];
    CHECK(rts.state == vh::verbs_qp_step::to::rts);
    CHECK(rts.initiator_rd_atomic == 2);  // the peer answers 2^1

    // A NOP from the host: the record says 1 (the next free WQEBB), the control segment names the
    // QP (bytes 4-6, big-endian), and the doorbell is the 8 bytes the GPU libraries synthesize
    // (shared/reference/ibgda-notes.md 1.8, NVSHMEM's and DOCA's convention): BE32(next free << 8),
    // then BE32(QP number << 8).
    REQUIRE(post_one(sq, 1, [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) == vg::status::ok);
    CHECK(m.be.dbrec[1] == vg::to_be32(1));
    auto const* ctrl = reinterpret_cast<unsigned char const*>(m.be.sq.data());
    CHECK(ctrl[4] == 0x00);
    CHECK(ctrl[5] == 0x1a);
    CHECK(ctrl[6] == 0x2b);
    unsigned char const rung[8] = {0x00, 0x00, 0x01, 0x00, 0x00, 0x1a, 0x2b, 0x00};
    CHECK(std::memcmp(&m.be.doorbell, rung, 8) == 0);
    // Its CQE as the NIC writes it: a requester completion (opcode 0, owner 0) of WQE 0.
    unsigned char* cqe = m.be.cq.data();
    cqe[60] = 0;
    cqe[61] = 0;
    cqe[63] = 0x00;
    CHECK(sq.poll() == vg::status::ok);
    CHECK(sq.counters->consumer == 1);
    CHECK(m.be.cq_dbrec[0] == vg::to_be32(1));  // the consumer index the NIC reads
  }
  CHECK(m.be.destroyed == 1);
}

TEST_CASE("host_qp with ordinary verbs on RoCE: a GRH to the peer's GID", "[verbs][host][host_qp]") {
  model_device m(gpucomm_test::roce_device("mlx5_0", 0x0a000001));
  vh::device_options o = without_devx();
  o.sl = 3;
  o.traffic_class = 0x12;
  vh::device dev(m.be, o);
  vh::host_qp q(dev, 4);
  vh::connection_info peer = q.local_info();
  CHECK(peer.link_layer == vh::link_layer_ethernet);
  peer.qpn = 0x99;
  for (int i = 0; i < 16; ++i) peer.gid[i] = static_cast<std::uint8_t>(0xa0 + i);
  q.connect(peer);
  REQUIRE(m.be.steps.size() == 3);
  vh::verbs_qp_step const& rtr = m.be.steps[1];
  CHECK(rtr.global);
  CHECK(std::memcmp(rtr.dgid, peer.gid, 16) == 0);
  CHECK(rtr.sgid_index == dev.gid_index());
  CHECK(rtr.traffic_class == 0x12);
  CHECK(rtr.sl == 3);
}

TEST_CASE("host_qp with ordinary verbs: rings the builders cannot use are refused", "[verbs][host][host_qp]") {
  model_device m(gpucomm_test::ib_device("mlx5_0", 1));
  vh::device dev(m.be, without_devx());
  m.be.stride = 128;
  CHECK_THROWS_WITH(vh::host_qp(dev, 5), Contains("64-byte WQEBBs"));
  CHECK(m.be.destroyed == 1);  // what was made is released
  m.be.stride = 64;
  m.be.cqe_size = 128;
  CHECK_THROWS_WITH(vh::host_qp(dev, 5), Contains("MLX5_CQE_SIZE"));
  CHECK(m.be.destroyed == 2);
}

// The CQ must have an entry for every WQEBB of the ring the provider made: a ring of more than 4
// WQEBBs per work request (the mlx5 provider's RC WQE grew) gets its QP made again with a CQ of
// the ring's size; a device whose CQs cannot be that large is refused, not left to overrun.
TEST_CASE("host_qp with ordinary verbs: a CQ with an entry for every WQEBB of the provider's ring",
          "[verbs][host][host_qp]") {
  model_device m(gpucomm_test::ib_device("mlx5_0", 1));
  vh::device dev(m.be, without_devx());
  SECTION("a larger WQE reservation: made again with a larger CQ") {
    m.be.wqe_bytes = 1024;  // 16 WQEBBs per work request: 512 for 32, more than the 256 CQEs of the first try
    vh::host_qp q(dev, 5);
    CHECK(m.be.created == 2);
    CHECK(m.be.destroyed == 1);
    CHECK(m.be.asked_cqes == 9);  // the ring's 512 WQEBBs
    vg::send_queue const sq = q.send_queue();
    CHECK(sq.log_depth == 9);
    CHECK(sq.cq.log_ncqe == 10);
  }
  SECTION("a device whose CQs are smaller than the ring") {
    m.be.max_cq_entries = 64;
    CHECK_THROWS_WITH(vh::host_qp(dev, 5),
                      Contains("64 entries for a send queue of 128 WQEBBs") && Contains("overwritten"));
    CHECK(m.be.created == 2);
    CHECK(m.be.destroyed == 2);  // both tries released
  }
}

// The port options are checked before any QP is made, without DEVX too (their check used to
// follow the DEVX capabilities only, so a wrong one reached ibv_modify_qp as a bare EINVAL).
TEST_CASE("device without DEVX: out-of-range port options are refused with their name", "[verbs][host][host_qp]") {
  // A device whose set-up failed leaves its backend's context open: a fresh model device each time.
  auto const refusal = [](vm::firmware_config c, auto set) {
    model_device m(std::move(c));
    vh::device_options o = without_devx();
    set(o);
    std::string what = "(no error)";
    try {
      vh::device d(m.be, o);
    } catch (vh::setup_error const& e) {
      what = e.what();
    }
    CHECK(m.be.verbs_opens == 1);
    CHECK(m.be.firmware_commands == 0);
    return what;
  };
  auto const ib = [] { return gpucomm_test::ib_device("mlx5_0", 1); };
  auto const roce = [] { return gpucomm_test::roce_device("mlx5_0", 0x0a000001); };
  // The model's InfiniBand port has a P_Key table of 128 entries, its RoCE port one.
  CHECK_THAT(refusal(ib(), [](vh::device_options& o) { o.pkey_index = 128; }),
             Contains("pkey_index = 128") && Contains("128-entry P_Key table"));
  CHECK_THAT(refusal(roce(), [](vh::device_options& o) { o.pkey_index = 1; }),
             Contains("pkey_index = 1") && Contains("1-entry P_Key table"));
  CHECK_THAT(refusal(ib(), [](vh::device_options& o) { o.sl = 16; }), Contains("sl = 16") && Contains("0-15"));
  CHECK_THAT(refusal(roce(), [](vh::device_options& o) { o.sl = 8; }), Contains("Ethernet priority, 0-7"));
  CHECK_THAT(refusal(roce(), [](vh::device_options& o) { o.dscp = 64; }), Contains("dscp = 64"));
  // In range, the same device opens.
  CHECK(refusal(ib(), [](vh::device_options& o) {
          o.pkey_index = 127;
          o.sl = 15;
        }) == "(no error)");
}
