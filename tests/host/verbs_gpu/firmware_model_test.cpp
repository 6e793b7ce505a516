// The mlx5 firmware model (testing/nic_model/firmware.hpp): full set-up sequences on one and two
// devices (InfiniBand and RoCE), each validation the model promises with the status and syndrome it
// must give, and QUERY_HCA_CAP decoded both through the generated layout and by hand.
//
// Commands are built with the layout generated from the kernel's mlx5_ifc.h
// (model/detail/mlx5_ifc_layout.hpp), never with host/prm_cmd.hpp. Each validation case starts from
// a command the model accepts (the full sequences show that) and breaks one field, so a check that
// stopped firing would let the command through and fail the case.
#include <catch2/catch.hpp>

#include "model_devices.hpp"
#include <gpucomm/testing/nic_model/firmware.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace {

namespace vm = gpucomm::verbs_gpu::model;
namespace host = gpucomm::verbs_gpu::host;
namespace ifc = gpucomm::verbs_gpu::model::detail::ifc;
namespace k = ifc::kernel;
using Catch::Matchers::Contains;

/// A command or output buffer laid out by a generated structure.
struct buffer {
  ifc::structure const* layout;
  std::vector<unsigned char> bytes;
  explicit buffer(ifc::structure const& s) : layout(&s), bytes(ifc::bytes(s)) {}
  buffer(ifc::structure const& s, std::uint32_t opcode) : buffer(s) { set("opcode", opcode); }
  buffer& set(std::string_view path, std::uint64_t v) {
    ifc::set(bytes.data(), ifc::member(*layout, path), v);
    return *this;
  }
  buffer& set_bytes(std::string_view path, void const* src) {
    ifc::set_bytes(bytes.data(), ifc::member(*layout, path), src);
    return *this;
  }
  std::uint64_t get(std::string_view path) const { return ifc::get(bytes.data(), ifc::member(*layout, path)); }
  std::uint32_t status() const { return static_cast<std::uint32_t>(ifc::get(bytes.data(), ifc::out_status)); }
  std::uint32_t syndrome() const { return static_cast<std::uint32_t>(ifc::get(bytes.data(), ifc::out_syndrome)); }
  void* data() { return bytes.data(); }
  std::size_t size() const { return bytes.size(); }
};

/// The firmware's verdict on a command: return code, status and the check named by the syndrome.
void expect_verdict(vm::firmware_model const& fw, int rc, buffer const& out, std::uint32_t status,
                    std::string_view check) {
  INFO("last_error: " << fw.last_error());
  CHECK(rc == EREMOTEIO);
  CHECK(out.status() == status);
  CHECK(out.syndrome() == vm::firmware_model::syndrome_of(check));
  CHECK_THAT(fw.last_error(), Contains(std::string(check)));
}

/// One host's set-up objects on an opened device: PD, a 64 KiB UMEM holding the SQ (offset 0), the
/// CQ buffer (0x2000) and the doorbell records (QP 0x3000, CQ 0x3040), two UARs and EQ 0's number.
/// The UMEM allows 4 KiB pages only, so the buffers at offsets are page aligned whatever the kernel
/// picks (the set-up itself registers one UMEM per buffer instead).
struct node {
  static constexpr std::uint64_t wq_off = 0, cq_off = 0x2000, qp_dbr = 0x3000, cq_dbr = 0x3040;
  vm::firmware_model fw;
  std::uint8_t port = 1;
  std::vector<std::uint64_t> mem = std::vector<std::uint64_t>(8192);
  host::pd_handle pd;
  host::umem_handle umem;
  host::uar_handle cq_uar, qp_uar;
  std::uint32_t eqn = 0;

  node(vm::firmware_fabric const& fabric, std::string const& name) : fw(fabric) {
    REQUIRE(fw.open(name) == 0);
    int e = -1;
    pd = fw.alloc_pd(&e);
    REQUIRE(e == 0);
    umem = fw.umem_reg(mem.data(), mem.size() * 8, host::access::local_write, -1, 0x1000, &e);
    REQUIRE(e == 0);
    cq_uar = fw.alloc_uar(host::uar_type::nc, &e);
    REQUIRE(e == 0);
    qp_uar = fw.alloc_uar(host::uar_type::nc_dedicated, &e);
    REQUIRE(e == 0);
    REQUIRE(fw.query_eqn(0, &eqn) == 0);
  }

  buffer create_cq_cmd() const {
    buffer c(ifc::create_cq_in, k::MLX5_CMD_OP_CREATE_CQ);
    c.set("cq_context.cqe_sz", k::MLX5_CQC_CQE_SZ_64_BYTES)
        .set("cq_context.cc", 1)
        .set("cq_context.oi", 1)
        .set("cq_context.log_cq_size", 0)
        .set("cq_context.uar_page", cq_uar.page_id)
        .set("cq_context.c_eqn_or_apu_element", eqn)
        .set("cq_context.log_page_size", 4)
        .set("cq_context.dbr_umem_valid", 1)
        .set("cq_context.dbr_umem_id", umem.id)
        .set("cq_context.dbr_addr", cq_dbr)
        .set("cq_umem_valid", 1)
        .set("cq_umem_id", umem.id)
        .set("cq_umem_offset", cq_off);
    return c;
  }
  buffer create_qp_cmd(std::uint32_t cqn) const {
    buffer c(ifc::create_qp_in, k::MLX5_CMD_OP_CREATE_QP);
    c.set("qpc.st", k::MLX5_QPC_ST_RC)
        .set("qpc.pm_state", k::MLX5_QPC_PM_STATE_MIGRATED)
        .set("qpc.pd", pd.pdn)
        .set("qpc.uar_page", qp_uar.page_id)
        .set("qpc.ts_format", k::MLX5_TIMESTAMP_FORMAT_DEFAULT)
        .set("qpc.log_sq_size", 6)
        .set("qpc.rq_type", k::MLX5_ZERO_LEN_RQ)
        .set("qpc.cqn_snd", cqn)
        .set("qpc.cqn_rcv", cqn)
        .set("qpc.log_page_size", 4)
        .set("qpc.dbr_umem_valid", 1)
        .set("qpc.dbr_umem_id", umem.id)
        .set("qpc.dbr_addr", qp_dbr)
        .set("wq_umem_valid", 1)
        .set("wq_umem_id", umem.id)
        .set("wq_umem_offset", wq_off);
    return c;
  }
  static buffer rst2init_cmd(std::uint32_t qpn, std::uint8_t port) {
    buffer c(ifc::rst2init_qp_in, k::MLX5_CMD_OP_RST2INIT_QP);
    c.set("qpn", qpn)
        .set("qpc.pm_state", k::MLX5_QPC_PM_STATE_MIGRATED)
        .set("qpc.rwe", 1)
        .set("qpc.rre", 1)
        .set("qpc.rae", 1)
        .set("qpc.atomic_mode", k::MLX5_QPC_ATOMIC_MODE_UP_TO_8B)
        .set("qpc.primary_address_path.vhca_port_num", port)
        .set("qpc.primary_address_path.pkey_index", 0);
    return c;
  }
  /// INIT2RTR towards `peer`'s QP remote_qpn, with the path the set-up would build (LID on
  /// InfiniBand; GID index 3, its MAC from resolve_ah, on RoCE).
  buffer init2rtr_cmd(std::uint32_t qpn, node& peer, std::uint32_t remote_qpn) {
    host::port_info mine{}, theirs{};
    REQUIRE(fw.query_port(port, &mine) == 0);
    REQUIRE(peer.fw.query_port(peer.port, &theirs) == 0);
    buffer c(ifc::init2rtr_qp_in, k::MLX5_CMD_OP_INIT2RTR_QP);
    c.set("qpn", qpn)
        .set("qpc.mtu", k::MLX5_QPC_MTU_4K_BYTES)
        .set("qpc.log_msg_max", 30)
        .set("qpc.remote_qpn", remote_qpn)
        .set("qpc.min_rnr_nak", 12)
        .set("qpc.next_rcv_psn", 0)
        .set("qpc.log_rra_max", 4)
        .set("qpc.primary_address_path.vhca_port_num", port);
    if (mine.ethernet) {
      host::gid_entry g;
      REQUIRE(peer.fw.query_gid(peer.port, 3, &g) == 0);
      host::ah_info ah;
      REQUIRE(fw.resolve_ah(pd, port, g.gid, 3, &ah) == 0);
      c.set("qpc.primary_address_path.grh", 0)  // reserved on RoCE
          .set_bytes("qpc.primary_address_path.rgid_rip", g.gid)
          .set_bytes("qpc.primary_address_path.rmac", ah.rmac)
          .set("qpc.primary_address_path.hop_limit", 255)
          .set("qpc.primary_address_path.src_addr_index", 3)
          .set("qpc.primary_address_path.udp_sport", 0xc000u | (qpn & 0x3fffu));
    } else {
      c.set("qpc.primary_address_path.grh", 0).set("qpc.primary_address_path.rlid", theirs.lid);
    }
    return c;
  }
  static buffer rtr2rts_cmd(std::uint32_t qpn) {
    buffer c(ifc::rtr2rts_qp_in, k::MLX5_CMD_OP_RTR2RTS_QP);
    c.set("qpn", qpn)
        .set("qpc.log_ack_req_freq", 0)
        .set("qpc.log_sra_max", 4)
        .set("qpc.next_send_psn", 0)
        .set("qpc.retry_count", 7)
        .set("qpc.rnr_retry", 7)
        .set("qpc.primary_address_path.ack_timeout", 20);
    return c;
  }

  /// obj_create, expecting success; the new object's handle and number.
  std::pair<host::obj_handle, std::uint32_t> create(buffer in, ifc::structure const& out_layout,
                                                    std::string_view number) {
    buffer out(out_layout);
    int e = -1;
    host::obj_handle h = fw.obj_create(in.data(), in.size(), out.data(), out.size(), &e);
    INFO("last_error: " << fw.last_error());
    REQUIRE(e == 0);
    REQUIRE(h);
    REQUIRE(out.status() == 0);
    return {h, static_cast<std::uint32_t>(out.get(number))};
  }
  std::pair<host::obj_handle, std::uint32_t> make_cq() { return create(create_cq_cmd(), ifc::create_cq_out, "cqn"); }
  std::pair<host::obj_handle, std::uint32_t> make_qp(std::uint32_t cqn) {
    return create(create_qp_cmd(cqn), ifc::create_qp_out, "qpn");
  }
  /// obj_modify, expecting success.
  void modify(host::obj_handle qp, buffer in) {
    buffer out(ifc::rst2init_qp_out);
    int const rc = fw.obj_modify(qp, in.data(), in.size(), out.data(), out.size());
    INFO("last_error: " << fw.last_error());
    REQUIRE(rc == 0);
    REQUIRE(out.status() == 0);
  }
  /// obj_modify, for a verdict.
  int try_modify(host::obj_handle qp, buffer in, buffer& out) {
    return fw.obj_modify(qp, in.data(), in.size(), out.data(), out.size());
  }
};

/// A QP with its CQ, in RESET.
struct queue_pair {
  host::obj_handle cq, qp;
  std::uint32_t cqn = 0, qpn = 0;
  explicit queue_pair(node& n) {
    std::tie(cq, cqn) = n.make_cq();
    std::tie(qp, qpn) = n.make_qp(cqn);
  }
};

/// Takes a and b (QPs of nodes na, nb) to RTS, connected to each other; a QP connected to itself
/// (loopback) when they are the same.
void connect(node& na, queue_pair& a, node& nb, queue_pair& b) {
  bool const loopback = &a == &b;
  na.modify(a.qp, node::rst2init_cmd(a.qpn, na.port));
  if (!loopback) nb.modify(b.qp, node::rst2init_cmd(b.qpn, nb.port));
  na.modify(a.qp, na.init2rtr_cmd(a.qpn, nb, b.qpn));
  if (!loopback) nb.modify(b.qp, nb.init2rtr_cmd(b.qpn, na, a.qpn));
  na.modify(a.qp, node::rtr2rts_cmd(a.qpn));
  if (!loopback) nb.modify(b.qp, node::rtr2rts_cmd(b.qpn));
}

using gpucomm_test::ib_device;
using gpucomm_test::roce_device;

}  // namespace

TEST_CASE("firmware model: devices, ports and GID tables as configured", "[verbs][host][firmware]") {
  vm::firmware_config odd = ib_device("eth0", 9);
  odd.mlx5 = false;
  vm::firmware_fabric fabric({ib_device("mlx5_0", 1), roce_device("mlx5_1", 0x0a000002), odd});
  vm::firmware_model fw(fabric);
  auto const list = fw.devices();
  REQUIRE(list.size() == 3);
  CHECK(list[0].name == "mlx5_0");
  CHECK(list[0].mlx5);
  CHECK(list[0].pci_bus_id == "0000:17:00.0");
  CHECK_FALSE(list[2].mlx5);

  host::port_info pi{};
  CHECK(fw.query_port(1, &pi) == ENODEV);  // nothing open yet
  CHECK(fw.open("mlx5_9") == ENODEV);
  CHECK(fw.open("eth0") == EOPNOTSUPP);
  REQUIRE(fw.open("mlx5_1") == 0);
  CHECK(fw.open("mlx5_0") == EBUSY);
  REQUIRE(fw.query_port(1, &pi) == 0);
  CHECK(pi.active);
  CHECK(pi.ethernet);
  CHECK(pi.active_mtu == 5);
  CHECK(pi.gid_table_length == 8);
  CHECK(fw.query_port(2, &pi) == EINVAL);

  host::gid_entry g;
  REQUIRE(fw.query_gid(1, 3, &g) == 0);
  CHECK(g.type == host::gid_type::roce_v2);
  CHECK(g.ipv4_mapped());
  CHECK(g.gid[15] == 2);
  REQUIRE(fw.query_gid(1, 0, &g) == 0);
  CHECK(g.type == host::gid_type::roce_v1);
  CHECK(g.gid[0] == 0xfe);
  REQUIRE(fw.query_gid(1, 5, &g) == 0);
  CHECK(g.type == host::gid_type::empty);
  CHECK(fw.query_gid(1, 8, &g) == EINVAL);

  host::device_info di{};
  REQUIRE(fw.query_device(&di) == 0);
  CHECK(di.max_qp_rd_atom == 16);
  CHECK(di.max_qp_init_rd_atom == 16);
  CHECK(di.atomics);
  CHECK(di.max_qp == (1 << 17));

  // Names, LIDs and GIDs lead to one place each; capability values must fit their fields.
  CHECK_THROWS_AS(fabric.add_device(ib_device("mlx5_0", 7)), std::invalid_argument);
  CHECK_THROWS_AS(fabric.add_device(ib_device("mlx5_7", 1)), std::invalid_argument);
  CHECK_THROWS_AS(fabric.add_device(roce_device("mlx5_7", 0x0a000002)), std::invalid_argument);
  vm::firmware_config wide = ib_device("mlx5_7", 7);
  wide.caps.general.log_max_qp = 40;  // a 5-bit field
  CHECK_THROWS_AS(fabric.add_device(wide), std::invalid_argument);
  fabric.add_device(ib_device("mlx5_7", 7));
  CHECK(fw.devices().size() == 4);
}

TEST_CASE("firmware model: QUERY_HCA_CAP answers the configured capabilities", "[verbs][host][firmware]") {
  vm::firmware_config cfg = roce_device("mlx5_0", 0x0a000001);
  cfg.caps.general.log_max_qp = 12;
  cfg.caps.general.log_max_qp_sz = 13;
  cfg.caps.general.log_bf_reg_size = 8;
  cfg.caps.general.sq_ts_format = vm::ts_formats::real_time;
  cfg.caps.atomic.atomic_size_qp = 0x1c;
  cfg.caps.atomic.atomic_operations = 0x3;
  cfg.caps.roce.r_roce_min_src_udp_port = 0xc123;
  vm::hca_caps max = cfg.caps;
  max.general.log_max_qp = 18;
  cfg.max_caps = max;
  vm::firmware_model fw(cfg);
  REQUIRE(fw.open("mlx5_0") == 0);

  auto query = [&](std::uint32_t type, std::uint32_t mode) {
    buffer in(ifc::query_hca_cap_in, k::MLX5_CMD_OP_QUERY_HCA_CAP);
    in.set("op_mod", (type << 1) | mode);
    buffer out(ifc::query_hca_cap_out);
    int const rc = fw.general_cmd(in.data(), in.size(), out.data(), out.size());
    INFO("last_error: " << fw.last_error());
    REQUIRE(rc == 0);
    REQUIRE(out.status() == 0);
    return out;
  };
  buffer gen = query(k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE, k::HCA_CAP_OPMOD_GET_CUR);
  CHECK(gen.get("capability.cmd_hca_cap.cqe_version") == 1);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_qp") == 12);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_qp_sz") == 13);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_cq") == 24);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_cq_sz") == 22);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_ra_req_qp") == 4);
  CHECK(gen.get("capability.cmd_hca_cap.log_max_ra_res_qp") == 4);
  CHECK(gen.get("capability.cmd_hca_cap.log_bf_reg_size") == 8);
  CHECK(gen.get("capability.cmd_hca_cap.sq_ts_format") == k::MLX5_TIMESTAMP_FORMAT_CAP_REAL_TIME);
  CHECK(gen.get("capability.cmd_hca_cap.rq_ts_format") == k::MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME);
  CHECK(gen.get("capability.cmd_hca_cap.port_type") == k::MLX5_CAP_PORT_TYPE_ETH);
  CHECK(gen.get("capability.cmd_hca_cap.num_ports") == 1);
  CHECK(gen.get("capability.cmd_hca_cap.roce") == 1);
  CHECK(gen.get("capability.cmd_hca_cap.atomic") == 1);
  CHECK(gen.get("capability.cmd_hca_cap.uar_4k") == 1);
  // Independent of the generated layout, from mlx5_ifc.h's text: the capability page starts at byte
  // 0x10 of query_hca_cap_out (status[0x8], reserved_at_8[0x18], syndrome[0x20], reserved_at_40[0x40]).
  // mlx5_ifc_cmd_hca_cap_bits begins with one 32-bit word of flags, then one with hca_cap_2 ... vhca_id,
  // then reserved_at_40[0x40]; its fifth word (bit 0x80, byte 0x10) is log_max_srq_sz[0x8],
  // log_max_qp_sz[0x8], event_cap[0x1], reserved_at_91[0x2], isolate_vl_tc_new[0x1],
  // reserved_at_94[0x4], prio_tag_required[0x1], reserved_at_99[0x2], log_max_qp[0x5]: log_max_qp_sz
  // is byte 0x11 of the page, log_max_qp the low 5 bits of byte 0x13.
  CHECK(gen.bytes[0x10 + 0x11] == 13);
  CHECK((gen.bytes[0x10 + 0x13] & 0x1f) == 12);

  buffer gmax = query(k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE, k::HCA_CAP_OPMOD_GET_MAX);
  CHECK(gmax.get("capability.cmd_hca_cap.log_max_qp") == 18);
  CHECK((gmax.bytes[0x10 + 0x13] & 0x1f) == 18);

  buffer atom = query(k::MLX5_SET_HCA_CAP_OP_MOD_ATOMIC, k::HCA_CAP_OPMOD_GET_CUR);
  CHECK(atom.get("capability.atomic_caps.atomic_operations") == 0x3);
  CHECK(atom.get("capability.atomic_caps.atomic_size_qp") == 0x1c);
  CHECK(atom.get("capability.atomic_caps.atomic_req_8B_endianness_mode") == 1);
  CHECK(atom.get("capability.atomic_caps.supported_atomic_req_8B_endianness_mode_1") == 1);
  // By hand: mlx5_ifc_atomic_caps_bits is reserved_at_0[0x40], a word of endianness bits,
  // reserved_at_60[0x20], then reserved_at_80[0x10] + atomic_operations[0x10] (bytes 0x12-0x13) and
  // reserved_at_a0[0x10] + atomic_size_qp[0x10] (bytes 0x16-0x17), big-endian.
  CHECK(atom.bytes[0x10 + 0x12] == 0x00);
  CHECK(atom.bytes[0x10 + 0x13] == 0x03);
  CHECK(atom.bytes[0x10 + 0x16] == 0x00);
  CHECK(atom.bytes[0x10 + 0x17] == 0x1c);

  buffer roce = query(k::MLX5_SET_HCA_CAP_OP_MOD_ROCE, k::HCA_CAP_OPMOD_GET_CUR);
  CHECK(roce.get("capability.roce_cap.r_roce_min_src_udp_port") == 0xc123);
  CHECK(roce.get("capability.roce_cap.r_roce_dest_udp_port") == 4791);
  CHECK(roce.get("capability.roce_cap.roce_version") == (k::MLX5_ROCE_VERSION_1_CAP | k::MLX5_ROCE_VERSION_2_CAP));
  CHECK(roce.get("capability.roce_cap.qp_ts_format") == k::MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME);

  SECTION("a capability type the model does not report") {
    buffer in(ifc::query_hca_cap_in, k::MLX5_CMD_OP_QUERY_HCA_CAP);
    in.set("op_mod", (0x2u << 1) | 1u);  // ODP
    buffer out(ifc::query_hca_cap_out);
    expect_verdict(fw, fw.general_cmd(in.data(), in.size(), out.data(), out.size()), out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "query_hca_cap_in.op_mod");
  }
  SECTION("an output too short for the capability page") {
    buffer in(ifc::query_hca_cap_in, k::MLX5_CMD_OP_QUERY_HCA_CAP);
    buffer out(ifc::create_cq_out);
    expect_verdict(fw, fw.general_cmd(in.data(), in.size(), out.data(), out.size()), out,
                   k::MLX5_CMD_STAT_BAD_OUTP_LEN_ERR, "cmd.out_length");
  }
  SECTION("RoCE capabilities of an InfiniBand-only device") {
    vm::firmware_model ib(ib_device("mlx5_0", 1));
    REQUIRE(ib.open("mlx5_0") == 0);
    buffer in(ifc::query_hca_cap_in, k::MLX5_CMD_OP_QUERY_HCA_CAP);
    in.set("op_mod", (k::MLX5_SET_HCA_CAP_OP_MOD_ROCE << 1) | 1u);
    buffer out(ifc::query_hca_cap_out);
    expect_verdict(ib, ib.general_cmd(in.data(), in.size(), out.data(), out.size()), out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "query_hca_cap_in.op_mod");
  }
}

TEST_CASE("firmware model: the set-up sequence to RTS", "[verbs][host][firmware]") {
  SECTION("a loopback QP on an InfiniBand port") {
    vm::firmware_fabric fabric({ib_device("mlx5_0", 1)});
    node n(fabric, "mlx5_0");
    queue_pair q(n);
    CHECK(n.fw.query_qp_state(q.qpn) == vm::qp_state::reset);
    CHECK_FALSE(n.fw.cq_overrun_possible(q.cqn));
    connect(n, q, n, q);
    CHECK(n.fw.query_qp_state(q.qpn) == vm::qp_state::rts);
  }
  SECTION("a loopback QP on a RoCE port") {
    vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001)});
    node n(fabric, "mlx5_0");
    queue_pair q(n);
    connect(n, q, n, q);
    CHECK(n.fw.query_qp_state(q.qpn) == vm::qp_state::rts);
  }
  SECTION("two devices on InfiniBand, one model each") {
    vm::firmware_fabric fabric({ib_device("mlx5_0", 1), ib_device("mlx5_1", 2)});
    node a(fabric, "mlx5_0"), b(fabric, "mlx5_1");
    queue_pair qa(a), qb(b);
    CHECK(qa.qpn != qb.qpn);
    connect(a, qa, b, qb);
    CHECK(a.fw.query_qp_state(qa.qpn) == vm::qp_state::rts);
    CHECK(b.fw.query_qp_state(qb.qpn) == vm::qp_state::rts);
    CHECK_FALSE(a.fw.query_qp_state(qb.qpn).has_value());  // a QP of the other device
  }
  SECTION("two devices on RoCE, then torn down in reverse order") {
    vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001), roce_device("mlx5_1", 0x0a000002)});
    node a(fabric, "mlx5_0"), b(fabric, "mlx5_1");
    queue_pair qa(a), qb(b);
    connect(a, qa, b, qb);
    CHECK(b.fw.query_qp_state(qb.qpn) == vm::qp_state::rts);
    // Back to RESET and ERR take any state.
    buffer out(ifc::qp_2rst_out);
    buffer err(ifc::qp_2err_in, k::MLX5_CMD_OP_2ERR_QP);
    err.set("qpn", qa.qpn);
    REQUIRE(a.try_modify(qa.qp, err, out) == 0);
    CHECK(a.fw.query_qp_state(qa.qpn) == vm::qp_state::error);
    buffer rst(ifc::qp_2rst_in, k::MLX5_CMD_OP_2RST_QP);
    rst.set("qpn", qa.qpn);
    REQUIRE(a.try_modify(qa.qp, rst, out) == 0);
    CHECK(a.fw.query_qp_state(qa.qpn) == vm::qp_state::reset);
    // The CQ cannot go while the QP completes to it (firmware says bad resource state).
    CHECK(a.fw.obj_destroy(qa.cq) == EBUSY);
    CHECK_THAT(a.fw.last_error(), Contains("destroy_cq_in.cqn"));
    CHECK(a.fw.obj_destroy(qa.qp) == 0);
    CHECK_FALSE(a.fw.query_qp_state(qa.qpn).has_value());
    CHECK(a.fw.obj_destroy(qa.cq) == 0);
    a.fw.free_uar(a.qp_uar);
    a.fw.free_uar(a.cq_uar);
    a.fw.umem_dereg(a.umem);
    a.fw.dealloc_pd(a.pd);
    CHECK(a.fw.lifetime_errors() == 0);
  }
}

TEST_CASE("firmware model: each validation fires with the firmware's status", "[verbs][host][firmware]") {
  vm::firmware_config small = ib_device("mlx5_0", 1);
  small.caps.general.log_max_qp_sz = 12;  // so that a 4-bit log_sq_size can exceed it
  vm::firmware_fabric fabric(
      {small, ib_device("mlx5_1", 2), roce_device("mlx5_2", 0x0a000001), roce_device("mlx5_3", 0x0a000002)});
  node n(fabric, "mlx5_0");
  buffer cq_out(ifc::create_cq_out), qp_out(ifc::create_qp_out), mod_out(ifc::rst2init_qp_out);
  auto create = [&](node& where, buffer in, buffer& out, std::size_t in_bytes = 0) {
    int e = -1;
    host::obj_handle h = where.fw.obj_create(in.data(), in_bytes ? in_bytes : in.size(), out.data(), out.size(), &e);
    CHECK_FALSE(h);
    return e;
  };

  SECTION("an opcode the firmware does not know") {
    buffer in(ifc::query_hca_cap_in, 0x7ff);
    buffer out(ifc::query_hca_cap_out);
    expect_verdict(n.fw, n.fw.general_cmd(in.data(), in.size(), out.data(), out.size()), out,
                   k::MLX5_CMD_STAT_BAD_OP_ERR, "cmd.opcode");
  }
  SECTION("a command through the wrong DEVX call: the kernel refuses it") {
    buffer in = n.create_cq_cmd();
    CHECK(n.fw.general_cmd(in.data(), in.size(), cq_out.data(), cq_out.size()) == EINVAL);
    CHECK(cq_out.status() == 0);
    CHECK_THAT(n.fw.last_error(), Contains("obj_create"));
  }
  SECTION("an input shorter than the command") {
    expect_verdict(n.fw, create(n, n.create_cq_cmd(), cq_out, ifc::bytes(ifc::create_cq_in) - 4), cq_out,
                   k::MLX5_CMD_STAT_BAD_INP_LEN_ERR, "cmd.in_length");
  }
  SECTION("a reserved bit set: every reserved range of CREATE_CQ, CREATE_QP and INIT2RTR") {
    // The ranges come from the generated layout (the kernel's reserved_at_* members, nested ones
    // included, less the DEVX-only members); the last bit of each, so the widths count too.
    queue_pair const q(n);  // plain variables: clang 14 cannot capture structured bindings
    host::obj_handle const qp = q.qp;
    std::uint32_t const qpn = q.qpn, cqn = q.cqn;
    n.modify(qp, node::rst2init_cmd(qpn, 1));
    std::size_t checked = 0;
    auto each = [&](buffer const& valid, auto&& issue) {
      for (ifc::field const& r : valid.layout->reserved) {
        buffer in = valid;
        ifc::set(in.data(), ifc::field{r.path, r.bit + r.width - 1, 1}, 1);
        buffer out(ifc::create_qp_out);
        INFO(valid.layout->name << "." << r.path);
        expect_verdict(n.fw, issue(in, out), out, k::MLX5_CMD_STAT_BAD_PARAM_ERR,
                       std::string(valid.layout->name) + "." + std::string(r.path));
        ++checked;
      }
    };
    each(n.create_cq_cmd(), [&](buffer& in, buffer& out) { return create(n, in, out); });
    each(n.create_qp_cmd(cqn), [&](buffer& in, buffer& out) { return create(n, in, out); });
    each(n.init2rtr_cmd(qpn, n, qpn), [&](buffer& in, buffer& out) { return n.try_modify(qp, in, out); });
    CHECK(checked ==
          ifc::create_cq_in.reserved.size() + ifc::create_qp_in.reserved.size() + ifc::init2rtr_qp_in.reserved.size());
    CHECK(checked > 100);
    // Not reserved: the DEVX-only members (set in every valid command above) and the uid slot,
    // which the kernel's DEVX layer fills in.
    n.create(n.create_cq_cmd().set("uid", 0x1234), ifc::create_cq_out, "cqn");
    n.modify(qp, n.init2rtr_cmd(qpn, n, qpn));
  }
  SECTION("undefined enumeration values") {
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.cqe_sz", 5), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_cq_in.cq_context.cqe_sz");
    auto [cq, cqn] = n.make_cq();
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.st", 0xf), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.st");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.pm_state", 2), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.pm_state");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.rq_type", 6), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.rq_type");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.ts_format", 3), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.ts_format");
    auto [qp, qpn] = n.make_qp(cqn);
    expect_verdict(n.fw, n.try_modify(qp, node::rst2init_cmd(qpn, 1).set("qpc.atomic_mode", 9), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "rst2init_qp_in.qpc.atomic_mode");
    n.modify(qp, node::rst2init_cmd(qpn, 1));
    expect_verdict(n.fw, n.try_modify(qp, n.init2rtr_cmd(qpn, n, qpn).set("qpc.mtu", 6), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.mtu");
  }
  SECTION("capability limits") {
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.log_cq_size", 23), cq_out), cq_out,
                   k::MLX5_CMD_STAT_LIM_ERR, "create_cq_in.cq_context.log_cq_size");
    auto [cq, cqn] = n.make_cq();
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.log_sq_size", 13), qp_out), qp_out,
                   k::MLX5_CMD_STAT_LIM_ERR, "create_qp_in.qpc.log_sq_size");
  }
  SECTION("illegal state transitions") {
    auto [cq, cqn] = n.make_cq();
    auto [qp, qpn] = n.make_qp(cqn);
    // "RST2RTR": INIT2RTR on a QP still in RESET.
    expect_verdict(n.fw, n.try_modify(qp, n.init2rtr_cmd(qpn, n, qpn), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_RES_STATE_ERR, "init2rtr_qp_in.qpn");
    n.modify(qp, node::rst2init_cmd(qpn, 1));
    // "INIT2RTS": RTR2RTS on a QP in INIT.
    expect_verdict(n.fw, n.try_modify(qp, node::rtr2rts_cmd(qpn), mod_out), mod_out, k::MLX5_CMD_STAT_BAD_RES_STATE_ERR,
                   "rtr2rts_qp_in.qpn");
    expect_verdict(n.fw, n.try_modify(qp, node::rst2init_cmd(qpn, 1), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_RES_STATE_ERR, "rst2init_qp_in.qpn");
    CHECK(n.fw.query_qp_state(qpn) == vm::qp_state::init);
  }
  SECTION("a modify command naming another QP than its object: the kernel refuses it") {
    auto [cq, cqn] = n.make_cq();
    auto [qp, qpn] = n.make_qp(cqn);
    auto [qp2, qpn2] = n.make_qp(cqn);
    CHECK(n.try_modify(qp, node::rst2init_cmd(qpn2, 1), mod_out) == EINVAL);
    CHECK(n.fw.query_qp_state(qpn2) == vm::qp_state::reset);
  }
  SECTION("buffers past the end of their UMEM") {
    std::uint64_t const end = n.mem.size() * 8;
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_umem_offset", end - 32), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_cq_in.cq_umem_offset");
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.dbr_addr", end), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_cq_in.cq_context.dbr_addr");
    auto [cq, cqn] = n.make_cq();
    // 64 WQE basic blocks of 64 bytes from 0xf100: 0x100 bytes too many.
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("wq_umem_offset", end - 0xf00), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.wq_umem_offset");
    n.make_qp(cqn);  // the same buffer at offset 0 fits
  }
  SECTION("misaligned doorbell records") {
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.dbr_addr", node::cq_dbr + 4), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_cq_in.cq_context.dbr_addr");
    auto [cq, cqn] = n.make_cq();
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.dbr_addr", node::qp_dbr + 2), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.dbr_addr");
  }
  SECTION("objects that do not exist") {
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.uar_page", 0x77), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_cq_in.cq_context.uar_page");
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_context.c_eqn_or_apu_element", 3), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_cq_in.cq_context.c_eqn_or_apu_element");
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_umem_id", 0x99), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_cq_in.cq_umem_id");
    auto [cq, cqn] = n.make_cq();
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.pd", 0x55), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_qp_in.qpc.pd");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.cqn_snd", cqn + 1), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_qp_in.qpc.cqn_snd");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.cqn_rcv", cqn + 1), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_qp_in.qpc.cqn_rcv");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.uar_page", 0x77), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_qp_in.qpc.uar_page");
    expect_verdict(n.fw, create(n, n.create_qp_cmd(cqn).set("qpc.dbr_umem_id", 0x99), qp_out), qp_out,
                   k::MLX5_CMD_STAT_BAD_RES_ERR, "create_qp_in.qpc.dbr_umem_id");
  }
  SECTION("objects of another context on the same device") {
    node other(fabric, "mlx5_0");
    auto [cq, cqn] = n.make_cq();
    expect_verdict(other.fw, create(other, other.create_qp_cmd(cqn), qp_out), qp_out, k::MLX5_CMD_STAT_BAD_RES_ERR,
                   "create_qp_in.qpc.cqn_snd");
    CHECK_THAT(other.fw.last_error(), Contains("another context"));
  }
  SECTION("buffers at UMEM offsets that a larger page would misalign") {
    // The same 64 KiB as the node's UMEM, but any page size from 4 KiB allowed: the kernel may pick
    // 64 KiB pages, and 0x2000 is then inside the first one.
    int e = -1;
    host::umem_handle any =
        n.fw.umem_reg(n.mem.data(), n.mem.size() * 8, host::access::local_write, -1, ~std::uint64_t{0xfff}, &e);
    REQUIRE(e == 0);
    expect_verdict(n.fw, create(n, n.create_cq_cmd().set("cq_umem_id", any.id), cq_out), cq_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_cq_in.cq_umem_offset");
    CHECK_THAT(n.fw.last_error(), Contains("0x10000"));
    // At offset 0 any page size fits; with 4 KiB and 8 KiB pages allowed, 0x2000 does too.
    n.create(n.create_cq_cmd().set("cq_umem_id", any.id).set("cq_umem_offset", 0), ifc::create_cq_out, "cqn");
    host::umem_handle small = n.fw.umem_reg(n.mem.data(), n.mem.size() * 8, host::access::local_write, -1, 0x3000, &e);
    REQUIRE(e == 0);
    auto [cq, cqn] = n.create(n.create_cq_cmd().set("cq_umem_id", small.id), ifc::create_cq_out, "cqn");
    expect_verdict(n.fw,
                   create(n, n.create_qp_cmd(cqn).set("wq_umem_id", any.id).set("wq_umem_offset", 0x4000), qp_out),
                   qp_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.wq_umem_offset");
    n.create(n.create_qp_cmd(cqn).set("wq_umem_id", small.id).set("wq_umem_offset", 0x4000), ifc::create_qp_out, "qpn");
  }
  SECTION("a collapsed CQ without overrun-ignore is flagged") {
    auto [cq, cqn] = n.create(n.create_cq_cmd().set("cq_context.oi", 0), ifc::create_cq_out, "cqn");
    CHECK(n.fw.cq_overrun_possible(cqn));
    auto [cq2, cqn2] = n.make_cq();
    CHECK_FALSE(n.fw.cq_overrun_possible(cqn2));
    auto [cq3, cqn3] = n.create(n.create_cq_cmd().set("cq_context.cc", 0), ifc::create_cq_out, "cqn");
    CHECK_FALSE(n.fw.cq_overrun_possible(cqn3));
    CHECK_THROWS_AS(n.fw.cq_overrun_possible(0x12345), std::out_of_range);
  }
  SECTION("atomic modes beyond the capabilities") {
    auto [cq, cqn] = n.make_cq();
    auto [qp, qpn] = n.make_qp(cqn);
    // Up to 16 bytes, on a device with 4- and 8-byte atomics.
    expect_verdict(n.fw, n.try_modify(qp, node::rst2init_cmd(qpn, 1).set("qpc.atomic_mode", 4), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "rst2init_qp_in.qpc.atomic_mode");
    vm::firmware_config plain = ib_device("mlx5_9", 9);
    plain.caps.atomic.atomic_operations = k::MLX5_ATOMIC_OPS_CMP_SWAP | k::MLX5_ATOMIC_OPS_FETCH_ADD;
    fabric.add_device(plain);
    node p(fabric, "mlx5_9");
    auto [pcq, pcqn] = p.make_cq();
    auto [pqp, pqpn] = p.make_qp(pcqn);
    expect_verdict(p.fw, p.try_modify(pqp, node::rst2init_cmd(pqpn, 1), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "rst2init_qp_in.qpc.atomic_mode");
    CHECK_THAT(p.fw.last_error(), Contains("masked"));
    p.modify(pqp, node::rst2init_cmd(pqpn, 1).set("qpc.atomic_mode", k::MLX5_QPC_ATOMIC_MODE_IB_SPEC));
  }
  SECTION("read/atomic depths beyond the capabilities") {
    auto [cq, cqn] = n.make_cq();
    auto [qp, qpn] = n.make_qp(cqn);
    n.modify(qp, node::rst2init_cmd(qpn, 1));
    expect_verdict(n.fw, n.try_modify(qp, n.init2rtr_cmd(qpn, n, qpn).set("qpc.log_rra_max", 5), mod_out), mod_out,
                   k::MLX5_CMD_STAT_LIM_ERR, "init2rtr_qp_in.qpc.log_rra_max");
    n.modify(qp, n.init2rtr_cmd(qpn, n, qpn));
    expect_verdict(n.fw, n.try_modify(qp, node::rtr2rts_cmd(qpn).set("qpc.log_sra_max", 5), mod_out), mod_out,
                   k::MLX5_CMD_STAT_LIM_ERR, "rtr2rts_qp_in.qpc.log_sra_max");
  }
  SECTION("paths that lead nowhere (InfiniBand)") {
    node b(fabric, "mlx5_1");
    queue_pair qa(n), qb(b);
    n.modify(qa.qp, node::rst2init_cmd(qa.qpn, 1));
    expect_verdict(
        n.fw,
        n.try_modify(qa.qp, n.init2rtr_cmd(qa.qpn, b, qb.qpn).set("qpc.primary_address_path.rlid", 0x33), mod_out),
        mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.primary_address_path.rlid");
    // The right LID, but the QP is on the first device.
    expect_verdict(n.fw, n.try_modify(qa.qp, n.init2rtr_cmd(qa.qpn, b, qa.qpn), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.remote_qpn");
    CHECK_THAT(n.fw.last_error(), Contains("mlx5_0"));
  }
  SECTION("paths that lead nowhere (RoCE)") {
    node a(fabric, "mlx5_2"), b(fabric, "mlx5_3");
    queue_pair qa(a), qb(b);
    a.modify(qa.qp, node::rst2init_cmd(qa.qpn, 1));
    std::uint8_t nobody[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 9};
    expect_verdict(
        a.fw,
        a.try_modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn).set_bytes("qpc.primary_address_path.rgid_rip", nobody),
                     mod_out),
        mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.primary_address_path.rgid_rip");
    host::ah_info ah;
    CHECK(a.fw.resolve_ah(a.pd, 1, nobody, 3, &ah) == EHOSTUNREACH);
    std::uint8_t const wrong_mac[6] = {2, 0, 10, 0, 0, 1};  // this side's own MAC
    expect_verdict(
        a.fw,
        a.try_modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn).set_bytes("qpc.primary_address_path.rmac", wrong_mac),
                     mod_out),
        mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.primary_address_path.rmac");
    expect_verdict(
        a.fw,
        a.try_modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn).set("qpc.primary_address_path.src_addr_index", 5),
                     mod_out),
        mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.primary_address_path.src_addr_index");
    expect_verdict(
        a.fw, a.try_modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn).set("qpc.primary_address_path.grh", 1), mod_out),
        mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.primary_address_path.grh");
    CHECK_THAT(a.fw.last_error(), Contains("reserved for RoCE"));
    expect_verdict(a.fw, a.try_modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn).set("opt_param_mask", 1), mod_out),
                   mod_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.opt_param_mask");
    a.modify(qa.qp, a.init2rtr_cmd(qa.qpn, b, qb.qpn));  // and the right path works
  }
  SECTION("PSNs that do not match between the two ends") {
    node b(fabric, "mlx5_1");
    SECTION("the sender is RTS first") {
      queue_pair qa(n), qb(b);
      n.modify(qa.qp, node::rst2init_cmd(qa.qpn, 1));
      b.modify(qb.qp, node::rst2init_cmd(qb.qpn, 1));
      n.modify(qa.qp, n.init2rtr_cmd(qa.qpn, b, qb.qpn));
      n.modify(qa.qp, node::rtr2rts_cmd(qa.qpn).set("qpc.next_send_psn", 0x10));
      expect_verdict(b.fw, b.try_modify(qb.qp, b.init2rtr_cmd(qb.qpn, n, qa.qpn), mod_out), mod_out,
                     k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.next_rcv_psn");
      b.modify(qb.qp, b.init2rtr_cmd(qb.qpn, n, qa.qpn).set("qpc.next_rcv_psn", 0x10));
    }
    SECTION("the receiver is RTR first") {
      queue_pair qa(n), qb(b);
      connect(n, qa, b, qb);  // both RTS at PSN 0; reset one side and bring it up with another PSN
      buffer rst(ifc::qp_2rst_in, k::MLX5_CMD_OP_2RST_QP);
      REQUIRE(n.try_modify(qa.qp, rst.set("qpn", qa.qpn), mod_out) == 0);
      n.modify(qa.qp, node::rst2init_cmd(qa.qpn, 1));
      n.modify(qa.qp, n.init2rtr_cmd(qa.qpn, b, qb.qpn));
      expect_verdict(n.fw, n.try_modify(qa.qp, node::rtr2rts_cmd(qa.qpn).set("qpc.next_send_psn", 5), mod_out), mod_out,
                     k::MLX5_CMD_STAT_BAD_PARAM_ERR, "rtr2rts_qp_in.qpc.next_send_psn");
      n.modify(qa.qp, node::rtr2rts_cmd(qa.qpn));
    }
  }
  SECTION("a QP already connected elsewhere") {
    node b(fabric, "mlx5_1");
    queue_pair qa(n), qb(b), qc(n);
    connect(n, qa, b, qb);
    n.modify(qc.qp, node::rst2init_cmd(qc.qpn, 1));
    expect_verdict(n.fw, n.try_modify(qc.qp, n.init2rtr_cmd(qc.qpn, b, qb.qpn), mod_out), mod_out,
                   k::MLX5_CMD_STAT_BAD_PARAM_ERR, "init2rtr_qp_in.qpc.remote_qpn");
  }
  SECTION("timestamp formats the device does not support") {
    vm::firmware_config fr = ib_device("mlx5_8", 8), rt = ib_device("mlx5_9", 9);
    fr.caps.general.sq_ts_format = vm::ts_formats::free_running;
    rt.caps.general.sq_ts_format = vm::ts_formats::real_time;
    fabric.add_device(fr);
    fabric.add_device(rt);
    node nf(fabric, "mlx5_8"), nr(fabric, "mlx5_9");
    auto [fcq, fcqn] = nf.make_cq();
    // DEFAULT needs more than free-running (the kernel asks free-running-only devices for FREE_RUNNING).
    expect_verdict(nf.fw, create(nf, nf.create_qp_cmd(fcqn), qp_out), qp_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR,
                   "create_qp_in.qpc.ts_format");
    nf.create(nf.create_qp_cmd(fcqn).set("qpc.ts_format", k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING), ifc::create_qp_out,
              "qpn");
    auto [rcq, rcqn] = nr.make_cq();
    expect_verdict(
        nr.fw, create(nr, nr.create_qp_cmd(rcqn).set("qpc.ts_format", k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING), qp_out),
        qp_out, k::MLX5_CMD_STAT_BAD_PARAM_ERR, "create_qp_in.qpc.ts_format");
    nr.create(nr.create_qp_cmd(rcqn).set("qpc.ts_format", k::MLX5_TIMESTAMP_FORMAT_REAL_TIME), ifc::create_qp_out,
              "qpn");
  }
  SECTION("objects released while in use are counted and kept") {
    auto [cq, cqn] = n.make_cq();
    n.fw.umem_dereg(n.umem);
    CHECK(n.fw.lifetime_errors() == 1);
    CHECK_THAT(n.fw.last_error(), Contains("UMEM"));
    n.make_qp(cqn);  // the UMEM is still there
    n.fw.dealloc_pd(n.pd);
    CHECK(n.fw.lifetime_errors() == 2);
  }
}

TEST_CASE("firmware model: UARs, doorbells, MRs and AHs", "[verbs][host][firmware]") {
  vm::firmware_config no_dedicated = roce_device("mlx5_2", 0x0a000003);
  no_dedicated.nc_dedicated_uar = false;
  vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001), roce_device("mlx5_1", 0x0a000002), no_dedicated});
  node n(fabric, "mlx5_0");
  int e = -1;

  SECTION("nc pages are shared within a context, the others are not") {
    host::uar_handle again = n.fw.alloc_uar(host::uar_type::nc, &e);
    REQUIRE(e == 0);
    CHECK(again.page_id == n.cq_uar.page_id);
    CHECK(again.reg_addr == n.cq_uar.reg_addr);
    CHECK(again.impl != n.cq_uar.impl);
    CHECK(n.qp_uar.page_id != n.cq_uar.page_id);
    host::uar_handle bf = n.fw.alloc_uar(host::uar_type::blue_flame, &e);
    REQUIRE(e == 0);
    CHECK(static_cast<char*>(bf.reg_addr) - static_cast<char*>(bf.base_addr) == 0x800);
    void* db = nullptr;
    CHECK(n.fw.map_doorbell(bf, 512, &db) == 0);  // 1 << log_bf_reg_size
    CHECK(db == bf.reg_addr);
    CHECK(n.fw.map_doorbell(bf, 512, &db) == EEXIST);  // its host page is mapped already
    CHECK(n.fw.map_doorbell(bf, 256, &db) == EINVAL);  // less than the register
    n.fw.unmap_doorbell(bf);
    host::uar_handle past = n.qp_uar;
    past.reg_addr = static_cast<char*>(past.reg_addr) + 8;
    CHECK(n.fw.map_doorbell(past, 8, &db) == EINVAL);  // misses the 8-byte register
    REQUIRE(n.fw.map_doorbell(n.qp_uar, 8, &db) == 0);
    *static_cast<std::uint64_t volatile*>(db) = 0x1234;  // plain host memory
    n.fw.free_uar(n.qp_uar);
    CHECK(n.fw.lifetime_errors() == 1);  // freed while mapped
    n.fw.free_uar(again);
    n.fw.free_uar(bf);
    CHECK(n.fw.lifetime_errors() == 1);
    vm::firmware_model other(fabric);
    REQUIRE(other.open("mlx5_2") == 0);
    host::uar_handle none = other.alloc_uar(host::uar_type::nc_dedicated, &e);
    CHECK(e == EOPNOTSUPP);
    CHECK_FALSE(none);
  }
  SECTION("memory regions") {
    std::vector<std::uint64_t> data(64);
    host::mr_handle a =
        n.fw.reg_mr(n.pd, data.data(), 512, host::access::local_write | host::access::remote_write, -1, 0, &e);
    REQUIRE(e == 0);
    host::mr_handle b = n.fw.reg_mr(n.pd, data.data(), 256, host::access::local_write, -1, 0, &e);
    REQUIRE(e == 0);
    CHECK(a.lkey == a.rkey);
    CHECK(a.lkey != b.lkey);
    n.fw.reg_mr(n.pd, data.data(), 256, host::access::remote_write, -1, 0, &e);
    CHECK(e == EINVAL);
    n.fw.dealloc_pd(n.pd);  // MRs on it
    CHECK(n.fw.lifetime_errors() == 1);
    n.fw.dereg_mr(a);
    n.fw.dereg_mr(b);
  }
  SECTION("address handles resolve to the MAC of the port holding the GID") {
    node other(fabric, "mlx5_1");
    host::gid_entry g;
    REQUIRE(other.fw.query_gid(1, 3, &g) == 0);
    host::ah_info ah;
    REQUIRE(n.fw.resolve_ah(n.pd, 1, g.gid, 3, &ah) == 0);
    std::uint8_t const want[6] = {0x02, 0x00, 10, 0, 0, 2};
    CHECK(std::memcmp(ah.rmac, want, 6) == 0);
    CHECK(n.fw.resolve_ah(n.pd, 1, g.gid, 5, &ah) == EINVAL);  // an empty source entry
  }
}
