// verbs_gpu's host set-up (host/setup.hpp) run whole against the firmware model: the same code as on
// a NIC, only the backend differs (a firmware_model behind a recorder that keeps every command the
// set-up sends), with host memory for the rings. No rdma-core, no GPU.
//
// What the set-up sent is read back with the layouts generated from the kernel's mlx5_ifc.h
// (model/detail/mlx5_ifc_layout.hpp), never with the set-up's own prm_cmd.hpp. Each fix of issue 17
// item 2 has a case below, and each says what the set-up before it did and why the case fails on
// that: the model rejects the old command, or the case checks the value the old code got wrong. Each
// was also run once against the fix reverted, and failed.
#include <catch2/catch.hpp>

#include "forwarding_backend.hpp"
#include "model_devices.hpp"
#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/firmware.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace vm = gpucomm::verbs_gpu::model;
namespace host = gpucomm::verbs_gpu::host;
namespace ifc = gpucomm::verbs_gpu::model::detail::ifc;
namespace k = ifc::kernel;
using Catch::Matchers::Contains;

/// A firmware_model that keeps what the set-up asked of it: every command, UMEM registration and
/// doorbell mapping. Forwards every call unchanged.
class recorder final : public verbs_test::forwarding_backend {
 public:
  struct command {
    std::uint32_t opcode;
    std::vector<unsigned char> in;
    std::uint64_t get(ifc::structure const& s, std::string_view path) const {
      return ifc::get(in.data(), ifc::member(s, path));
    }
    std::vector<unsigned char> bytes(ifc::structure const& s, std::string_view path) const {
      ifc::field const f = ifc::member(s, path);
      std::vector<unsigned char> out(f.width / 8);
      ifc::get_bytes(in.data(), f, out.data());
      return out;
    }
  };
  struct umem_call {
    void* addr;
    std::size_t bytes;
    std::uint64_t page_sizes;
    std::uint32_t id;
  };
  struct map_call {
    std::uint32_t page_id;
    std::size_t bytes;
    std::uintptr_t at;  ///< the range's start (the set-up asks for whole host pages)
  };

  explicit recorder(vm::firmware_fabric const& fabric) : forwarding_backend(fw), fw(fabric) {}
  vm::firmware_model fw;
  std::vector<command> commands;
  std::vector<umem_call> umems;
  std::vector<map_call> maps;
  int unmaps = 0;
  int umem_deregs = 0;
  bool refuse_qp_destroy = false;  ///< obj_destroy of a QP fails with EBUSY, as firmware may refuse

  /// The commands of `opcode`, in order.
  std::vector<command> of(std::uint32_t opcode) const {
    std::vector<command> out;
    for (command const& c : commands)
      if (c.opcode == opcode) out.push_back(c);
    return out;
  }
  command last(std::uint32_t opcode) const {
    auto const all = of(opcode);
    REQUIRE_FALSE(all.empty());
    return all.back();
  }

  int general_cmd(void const* in, std::size_t ib, void* out, std::size_t ob) override {
    keep(in, ib);
    return fw.general_cmd(in, ib, out, ob);
  }
  host::umem_handle umem_reg(void* addr, std::size_t bytes, int access, int fd, std::uint64_t pages, int* e) override {
    host::umem_handle h = fw.umem_reg(addr, bytes, access, fd, pages, e);
    umems.push_back({addr, bytes, pages, h.id});
    return h;
  }
  void umem_dereg(host::umem_handle u) override {
    ++umem_deregs;
    fw.umem_dereg(u);
  }
  host::obj_handle obj_create(void const* in, std::size_t ib, void* out, std::size_t ob, int* e) override {
    keep(in, ib);
    return fw.obj_create(in, ib, out, ob, e);
  }
  int obj_modify(host::obj_handle o, void const* in, std::size_t ib, void* out, std::size_t ob) override {
    keep(in, ib);
    return fw.obj_modify(o, in, ib, out, ob);
  }
  int obj_destroy(host::obj_handle o) override {
    if (refuse_qp_destroy && !fw.object_of(o).first) return EBUSY;
    return fw.obj_destroy(o);
  }
  int map_doorbell(host::uar_handle u, std::size_t bytes, void** d) override {
    maps.push_back({u.page_id, bytes, reinterpret_cast<std::uintptr_t>(u.reg_addr)});
    return fw.map_doorbell(u, bytes, d);
  }
  void unmap_doorbell(host::uar_handle u) override {
    ++unmaps;
    fw.unmap_doorbell(u);
  }

 private:
  void keep(void const* in, std::size_t bytes) {
    auto const* p = static_cast<unsigned char const*>(in);
    commands.push_back({static_cast<std::uint32_t>(ifc::get(in, ifc::in_opcode)), {p, p + bytes}});
  }
};

using gpucomm_test::ib_device;
using gpucomm_test::roce_device;

/// The QPs a and b (on devices of their own, or one QP twice for loopback) taken to RTS.
void connect(host::qp& a, host::qp& b) {
  host::connection_info const ia = a.local_info(), ib = b.local_info();
  a.connect(ib);
  if (&a != &b) b.connect(ia);
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (host::setup_error const& e) {
    return e.what();
  }
  return "(no error)";
}

void make_dirs(std::string const& path) {
  for (std::size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
}

/// An allgather among `ranks` threads, each calling with its rank.
class thread_allgather {
 public:
  explicit thread_allgather(int ranks) : ranks_(ranks), slots_(static_cast<std::size_t>(ranks)) {}
  void operator()(int rank, void const* mine, void* all, std::size_t bytes) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !draining_; });  // the previous round is done
    auto const* p = static_cast<unsigned char const*>(mine);
    slots_[static_cast<std::size_t>(rank)].assign(p, p + bytes);
    if (++arrived_ == ranks_) {
      draining_ = true;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return draining_; });
    }
    for (int r = 0; r < ranks_; ++r)
      std::memcpy(static_cast<unsigned char*>(all) + static_cast<std::size_t>(r) * bytes,
                  slots_[static_cast<std::size_t>(r)].data(), bytes);
    if (--arrived_ == 0) {
      draining_ = false;
      cv_.notify_all();
    }
  }

 private:
  int ranks_;
  std::vector<std::vector<unsigned char>> slots_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool draining_ = false;
};

}  // namespace

TEST_CASE("set-up on the firmware model: to RTS on InfiniBand and RoCE, loopback and two devices",
          "[verbs][host][setup]") {
  bool const roce = GENERATE(false, true);
  bool const loopback = GENERATE(true, false);
  INFO((roce ? "RoCE" : "InfiniBand") << (loopback ? ", loopback" : ", two devices"));
  vm::firmware_fabric fabric(
      roce ? std::vector<vm::firmware_config>{roce_device("mlx5_0", 0x0a000001), roce_device("mlx5_1", 0x0a000002)}
           : std::vector<vm::firmware_config>{ib_device("mlx5_0", 1), ib_device("mlx5_1", 2)});
  recorder ra(fabric), rb(fabric);
  {
    host::device a(ra, {.name = "mlx5_0"});
    std::optional<host::device> b;
    if (!loopback) b.emplace(rb, host::device_options{.name = "mlx5_1"});
    host::qp qa(a, {.log_sq_depth = 6});
    std::optional<host::qp> qb;
    if (!loopback) qb.emplace(*b, host::qp_options{.log_sq_depth = 6});
    host::qp& peer = loopback ? qa : *qb;
    CHECK(ra.fw.query_qp_state(qa.qpn()) == vm::qp_state::init);
    connect(qa, peer);
    CHECK(ra.fw.query_qp_state(qa.qpn()) == vm::qp_state::rts);
    if (!loopback) CHECK(rb.fw.query_qp_state(qb->qpn()) == vm::qp_state::rts);

    // The device view points at the control memory and the mapped doorbell.
    gpucomm::verbs_gpu::send_queue const sq = qa.send_queue();
    CHECK(sq.qpn == qa.qpn());
    CHECK(sq.log_depth == 6);
    CHECK(sq.ring != nullptr);
    CHECK(sq.dbrec != nullptr);
    CHECK(sq.doorbell != nullptr);
    CHECK(sq.counters != nullptr);
    CHECK(sq.cq.cqn == qa.cqn());
    CHECK(sq.cq.mode == gpucomm::verbs_gpu::cq_mode::collapsed);
    CHECK(sq.scope == gpucomm::verbs_gpu::nic_scope::system);  // host memory

    // The capability pages the set-up read: current values through general_cmd.
    std::vector<std::uint64_t> op_mods;
    for (auto const& c : ra.of(k::MLX5_CMD_OP_QUERY_HCA_CAP)) op_mods.push_back(c.get(ifc::query_hca_cap_in, "op_mod"));
    std::vector<std::uint64_t> want = {(k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE << 1) | k::HCA_CAP_OPMOD_GET_CUR};
    if (roce) want.push_back((k::MLX5_SET_HCA_CAP_OP_MOD_ROCE << 1) | k::HCA_CAP_OPMOD_GET_CUR);
    want.push_back((k::MLX5_SET_HCA_CAP_OP_MOD_ATOMIC << 1) | k::HCA_CAP_OPMOD_GET_CUR);
    CHECK(op_mods == want);

    // The path: grh = 0 on both link layers; RoCE: the peer's GID and the MAC resolve_ah gave.
    auto const rtr = ra.last(k::MLX5_CMD_OP_INIT2RTR_QP);
    auto const& s = ifc::init2rtr_qp_in;
    CHECK(rtr.get(s, "qpc.primary_address_path.grh") == 0);
    CHECK(rtr.get(s, "qpc.remote_qpn") == peer.qpn());
    if (roce) {
      host::connection_info const pi = peer.local_info();
      CHECK(rtr.bytes(s, "qpc.primary_address_path.rgid_rip") == std::vector<unsigned char>(pi.gid, pi.gid + 16));
      host::ah_info const mac = vm::firmware_model::mac_of(pi.gid);
      CHECK(rtr.bytes(s, "qpc.primary_address_path.rmac") == std::vector<unsigned char>(mac.rmac, mac.rmac + 6));
      CHECK(rtr.get(s, "qpc.primary_address_path.src_addr_index") == 3);  // RoCE v2 IPv4 in Linux's default table
    } else {
      CHECK(rtr.get(s, "qpc.primary_address_path.rlid") == peer.local_info().lid);
    }
  }
  // Everything released, in an order firmware accepts.
  CHECK(ra.fw.live_objects() == 0);
  CHECK(rb.fw.live_objects() == 0);
  CHECK(ra.fw.lifetime_errors() == 0);
  CHECK(rb.fw.lifetime_errors() == 0);
  CHECK(ra.unmaps == static_cast<int>(ra.maps.size()));
}

// Fix: ts_format as the kernel chooses it for user QPs (refs section 1). The old set-up always sent
// DEFAULT (1); the model, like firmware, refuses DEFAULT on a device that supports only
// free-running timestamps (check create_qp_in.qpc.ts_format), so the first section failed there,
// and the second checked FREE_RUNNING where the old code sent DEFAULT.
TEST_CASE("set-up: ts_format is FREE_RUNNING where supported, else DEFAULT", "[verbs][host][setup]") {
  auto ts_of = [](vm::firmware_config cfg) {
    recorder r{vm::firmware_fabric({cfg})};
    host::device d(r);
    host::qp q(d, {.log_sq_depth = 6});
    return r.last(k::MLX5_CMD_OP_CREATE_QP).get(ifc::create_qp_in, "qpc.ts_format");
  };
  SECTION("free-running only") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.caps.general.sq_ts_format = vm::ts_formats::free_running;
    CHECK(ts_of(c) == k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING);
  }
  SECTION("free-running and real time (the default ConnectX-7-like set)") {
    CHECK(ts_of(ib_device("mlx5_0", 1)) == k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING);
  }
  SECTION("real time only: no free-running support") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.caps.general.sq_ts_format = vm::ts_formats::real_time;
    CHECK(ts_of(c) == k::MLX5_TIMESTAMP_FORMAT_DEFAULT);
  }
  SECTION("RoCE: roce_cap.qp_ts_format counts too") {
    vm::firmware_config c = roce_device("mlx5_0", 0x0a000001);
    c.caps.roce.qp_ts_format = vm::ts_formats::real_time;
    CHECK(ts_of(c) == k::MLX5_TIMESTAMP_FORMAT_DEFAULT);
    c.caps.roce.qp_ts_format = vm::ts_formats::free_running;
    CHECK(ts_of(c) == k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING);
  }
}

// Fix: QUERY_HCA_CAP (general, RoCE, atomic) with the limits checked (refs section 2). The old set-up
// read only ibv_query_device: it opened a device without masked atomics (and failed later, at
// RST2INIT, with a bare firmware status), sent log_rra_max = log_sra_max = log2(max_qp_rd_atom) and
// log_msg_max = 30 whatever the device allowed (LIM_ERR from the model), and asked for any SQ depth.
TEST_CASE("set-up: capabilities from QUERY_HCA_CAP, refused with a message when short", "[verbs][host][setup]") {
  auto refusal = [](vm::firmware_config cfg, host::qp_options qo = {}) {
    recorder r{vm::firmware_fabric({cfg})};
    std::string const msg = error_of([&] {
      host::device d(r);
      host::qp q(d, qo);
    });
    // Refused by the set-up's own checks, before any object was created.
    CHECK(r.of(k::MLX5_CMD_OP_CREATE_CQ).empty());
    CHECK(r.of(k::MLX5_CMD_OP_CREATE_QP).empty());
    return msg;
  };
  vm::firmware_config c = ib_device("mlx5_0", 1);
  SECTION("no masked atomics") {
    c.caps.atomic.atomic_operations = k::MLX5_ATOMIC_OPS_CMP_SWAP | k::MLX5_ATOMIC_OPS_FETCH_ADD;
    std::string const msg = refusal(c);
    CHECK_THAT(msg, Contains("masked compare-and-swap") && Contains("masked fetch-and-add") &&
                        Contains("atomic_operations = 0x3") && Contains("mlx5_0"));
  }
  SECTION("no 4-byte atomics") {
    c.caps.atomic.atomic_size_qp = k::MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES;
    CHECK_THAT(refusal(c), Contains("4-byte operands") && Contains("atomic_size_qp = 0x8"));
  }
  SECTION("no atomics at all") {
    c.caps.general.atomic = false;
    CHECK_THAT(refusal(c), Contains("cmd_hca_cap.atomic = 0"));
  }
  SECTION("CQE version 0") {
    c.caps.general.cqe_version = 0;
    CHECK_THAT(refusal(c), Contains("cqe_version = 0"));
  }
  SECTION("no RC") {
    c.caps.general.rc = false;
    CHECK_THAT(refusal(c), Contains("cmd_hca_cap.rc = 0"));
  }
  SECTION("an SQ deeper than log_max_qp_sz") {
    c.caps.general.log_max_qp_sz = 8;
    CHECK_THAT(refusal(c, {.log_sq_depth = 9}), Contains("log_max_qp_sz = 8"));
  }
  SECTION("a collapsed CQ deeper than log_max_cq_sz") {
    c.caps.general.log_max_cq_sz = 8;
    CHECK_THAT(refusal(c, {.log_sq_depth = 9}), Contains("log_max_cq_sz = 8"));
  }
  SECTION("a collapsed CQ on a device that cannot ignore overrun") {
    c.caps.general.cq_oi = false;
    CHECK_THAT(refusal(c), Contains("overrun-ignore") && Contains("cq_mode::owner_bit"));
  }
}

TEST_CASE("set-up: message size and read/atomic depths within each side's capabilities", "[verbs][host][setup]") {
  // a: log_max_ra_res_qp 2, log_max_ra_req_qp 5; messages up to 1 MiB.
  vm::firmware_config ca = ib_device("mlx5_0", 1), cb = ib_device("mlx5_1", 2);
  ca.caps.general.log_max_ra_res_qp = 2;
  ca.caps.general.log_max_ra_req_qp = 5;
  ca.caps.general.log_max_msg = 20;
  vm::firmware_fabric fabric({ca, cb});
  recorder ra(fabric), rb(fabric);
  host::device a(ra, {.name = "mlx5_0"}), b(rb, {.name = "mlx5_1"});
  host::qp qa(a, {.log_sq_depth = 6}), qb(b, {.log_sq_depth = 6});
  connect(qa, qb);
  CHECK(ra.fw.query_qp_state(qa.qpn()) == vm::qp_state::rts);
  CHECK(rb.fw.query_qp_state(qb.qpn()) == vm::qp_state::rts);
  auto const& m = ifc::init2rtr_qp_in;
  CHECK(ra.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.log_rra_max") == 2);
  CHECK(ra.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.log_msg_max") == 20);
  // a issues at most 2^2 too: both capabilities cap both depths (the PRM's names and the kernel
  // pair them differently), and b answers 2^4.
  CHECK(ra.last(k::MLX5_CMD_OP_RTR2RTS_QP).get(m, "qpc.log_sra_max") == 2);
  CHECK(rb.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.log_rra_max") == 4);
  CHECK(rb.last(k::MLX5_CMD_OP_RTR2RTS_QP).get(m, "qpc.log_sra_max") == 2);  // a answers 2^2
}

// Fix: a collapsed CQ as NVSHMEM and DOCA make it (refs section 3). The old set-up sent
// log_cq_size = 0 and allocated and 0xff-filled one CQE; the case checks log_cq_size = log2 of the
// SQ depth and every entry 0xff (it failed on both). oi = 1 it had; cq_overrun_possible checks it.
TEST_CASE("set-up: a collapsed CQ has cc = 1, oi = 1 and as many 0xff-filled entries as the SQ",
          "[verbs][host][setup]") {
  recorder r{vm::firmware_fabric({ib_device("mlx5_0", 1)})};
  host::device d(r);
  SECTION("collapsed") {
    std::uint32_t const depth = GENERATE(6u, 7u, 10u);
    host::qp q(d, {.log_sq_depth = depth});
    auto const cq = r.last(k::MLX5_CMD_OP_CREATE_CQ);
    auto const& s = ifc::create_cq_in;
    CHECK(cq.get(s, "cq_context.cc") == 1);
    CHECK(cq.get(s, "cq_context.oi") == 1);
    CHECK(cq.get(s, "cq_context.cqe_sz") == k::MLX5_CQC_CQE_SZ_64_BYTES);
    CHECK(cq.get(s, "cq_context.log_cq_size") == depth);
    CHECK(q.log_cq_size() == depth);
    CHECK_FALSE(r.fw.cq_overrun_possible(q.cqn()));
    auto const* bytes = reinterpret_cast<unsigned char const*>(q.send_queue().cq.cqes);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < (std::size_t{64} << depth); ++i) bad += bytes[i] != 0xff;
    CHECK(bad == 0);
    CHECK(q.send_queue().cq.log_ncqe == 0);  // the poller reads entry 0 only
  }
  SECTION("owner-bit") {
    host::qp q(d, {.log_sq_depth = 6, .mode = gpucomm::verbs_gpu::cq_mode::owner_bit, .log_ncqe = 5});
    auto const cq = r.last(k::MLX5_CMD_OP_CREATE_CQ);
    CHECK(cq.get(ifc::create_cq_in, "cq_context.cc") == 0);
    CHECK(cq.get(ifc::create_cq_in, "cq_context.oi") == 0);
    CHECK(cq.get(ifc::create_cq_in, "cq_context.log_cq_size") == 5);
    CHECK(q.send_queue().cq.log_ncqe == 5);
  }
}

// Fix: one UMEM per object at offset 0 (refs section 4). The old set-up registered one UMEM for
// ring, CQ and both doorbell records with every page size from 4 KiB allowed, the CQ at offset
// ring_bytes: at the default depth (1024 WQEBBs) a 128 KiB UMEM with the CQ at 64 KiB, which a
// 128 KiB page the kernel may pick misaligns; the model refuses that (create_cq_in.cq_umem_offset,
// firmware_model_test "buffers at UMEM offsets ..."). The case checks four UMEMs, each at offset 0.
TEST_CASE("set-up: ring, CQ and both doorbell records each have a UMEM of their own", "[verbs][host][setup]") {
  recorder r{vm::firmware_fabric({ib_device("mlx5_0", 1)})};
  host::device d(r);
  host::qp q(d);  // the default depth
  REQUIRE(r.umems.size() == 4);
  for (auto const& u : r.umems) {
    CHECK(reinterpret_cast<std::uintptr_t>(u.addr) % 4096 == 0);
    CHECK(u.bytes % 4096 == 0);
    CHECK((u.page_sizes & 0x1000) != 0);
  }
  auto const cq = r.last(k::MLX5_CMD_OP_CREATE_CQ);
  auto const qp = r.last(k::MLX5_CMD_OP_CREATE_QP);
  std::vector<std::uint64_t> const ids = {
      cq.get(ifc::create_cq_in, "cq_umem_id"), cq.get(ifc::create_cq_in, "cq_context.dbr_umem_id"),
      qp.get(ifc::create_qp_in, "wq_umem_id"), qp.get(ifc::create_qp_in, "qpc.dbr_umem_id")};
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) CHECK(ids[i] != ids[j]);
  CHECK(cq.get(ifc::create_cq_in, "cq_umem_offset") == 0);
  CHECK(cq.get(ifc::create_cq_in, "cq_context.dbr_addr") == 0);
  CHECK(qp.get(ifc::create_qp_in, "wq_umem_offset") == 0);
  CHECK(qp.get(ifc::create_qp_in, "qpc.dbr_addr") == 0);
  // The ring's UMEM is the ring the device view posts into, and so on.
  gpucomm::verbs_gpu::send_queue const sq = q.send_queue();
  auto umem_at = [&](void const* p) {
    for (auto const& u : r.umems)
      if (u.addr == p) return static_cast<std::uint64_t>(u.id);
    return std::uint64_t{0};
  };
  CHECK(umem_at(sq.ring) == ids[2]);
  CHECK(umem_at(sq.cq.cqes) == ids[0]);
  CHECK(umem_at(sq.cq.dbrec) == ids[1]);
  CHECK(umem_at(sq.dbrec - gpucomm::verbs_gpu::dbr_snd) == ids[3]);
}

// Fix: the RoCE GID chosen by type and address family, grh = 0 (refs section 5). The old set-up took
// index 3 whenever the table had more than 3 entries, without looking at it, and set grh = 1: on
// the tables below index 3 is empty or IPv6, which the model refuses (resolve_ah: no filled entry;
// or the wrong family checked here), and grh = 1 is refused on RoCE (the bit is reserved there).
TEST_CASE("set-up: the RoCE GID is a RoCE v2 entry of the wanted family; grh stays 0", "[verbs][host][setup]") {
  // A RoCE table in which index 3 is empty (a) or a global IPv6 address (b), the IPv4 entries
  // elsewhere; v1 entries too, which must not be taken.
  auto table = [](std::uint8_t host_byte, bool third_empty) {
    vm::port_config p = vm::port_config::roce(0x0a000000u | host_byte, 0x020000fffe000000ull + host_byte);
    p.gids.assign(10, host::gid_entry{});
    auto put = [&](int i, host::gid_type t, bool v4) {
      host::gid_entry& g = p.gids[static_cast<std::size_t>(i)];
      g.type = t;
      if (v4) {
        g.gid[10] = g.gid[11] = 0xff;
        g.gid[12] = 10, g.gid[15] = host_byte;
      } else {
        g.gid[0] = 0x20, g.gid[1] = 0x01, g.gid[15] = host_byte;  // 2001::x
      }
    };
    put(0, host::gid_type::roce_v1, true);
    put(1, host::gid_type::roce_v2, false);
    if (!third_empty) {
      put(3, host::gid_type::roce_v1, false);
      p.gids[3].gid[14] = 1;  // another IPv6 address than entry 1's, as a v1 entry
    }
    put(6, host::gid_type::roce_v2, true);
    return p;
  };
  vm::firmware_config ca, cb;
  ca.name = "mlx5_0";
  cb.name = "mlx5_1";
  bool const third_empty = GENERATE(true, false);
  ca.ports = {table(1, third_empty)};
  cb.ports = {table(2, third_empty)};
  vm::firmware_fabric fabric({ca, cb});
  recorder ra(fabric), rb(fabric);
  SECTION("IPv4 (the default)") {
    host::device a(ra, {.name = "mlx5_0"}), b(rb, {.name = "mlx5_1"});
    CHECK(a.gid_index() == 6);
    CHECK(a.gid().ipv4_mapped());
    host::qp qa(a, {.log_sq_depth = 6}), qb(b, {.log_sq_depth = 6});
    connect(qa, qb);
    CHECK(ra.fw.query_qp_state(qa.qpn()) == vm::qp_state::rts);
    auto const rtr = ra.last(k::MLX5_CMD_OP_INIT2RTR_QP);
    CHECK(rtr.get(ifc::init2rtr_qp_in, "qpc.primary_address_path.src_addr_index") == 6);
    CHECK(rtr.get(ifc::init2rtr_qp_in, "qpc.primary_address_path.grh") == 0);
    CHECK(rtr.bytes(ifc::init2rtr_qp_in, "qpc.primary_address_path.rgid_rip")[15] == 2);
  }
  SECTION("IPv6 on request") {
    host::device a(ra, {.name = "mlx5_0", .gid_family = host::ip_family::ipv6});
    host::device b(rb, {.name = "mlx5_1", .gid_family = host::ip_family::ipv6});
    CHECK(a.gid_index() == 1);
    host::qp qa(a, {.log_sq_depth = 6}), qb(b, {.log_sq_depth = 6});
    connect(qa, qb);
    CHECK(rb.fw.query_qp_state(qb.qpn()) == vm::qp_state::rts);
    CHECK(ra.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(ifc::init2rtr_qp_in, "qpc.primary_address_path.src_addr_index") == 1);
  }
  SECTION("an explicit index must be a filled RoCE entry") {
    CHECK_THAT(error_of([&] { host::device a(ra, {.name = "mlx5_0", .gid_index = 2}); }),
               Contains("gid_index = 2") && Contains("no RoCE entry"));
    host::device a(rb, {.name = "mlx5_0", .gid_index = 0});  // a backend opens one device once
    CHECK(a.gid_index() == 0);
  }
}

TEST_CASE("set-up: a RoCE port without a RoCE v2 entry of the family is refused with the table",
          "[verbs][host][setup]") {
  vm::firmware_config c = roce_device("mlx5_0", 0x0a000001);
  c.ports[0].gids[1].type = host::gid_type::empty;  // the v2 link-local entry
  c.ports[0].gids[3].type = host::gid_type::empty;  // the v2 IPv4 entry
  recorder r{vm::firmware_fabric({c})};
  std::string const msg = error_of([&] { host::device d(r); });
  CHECK_THAT(msg, Contains("no RoCE v2 GID with an IPv4 address") && Contains("0 v1 IPv6") && Contains("2 v1 IPv4") &&
                      Contains("gid_family"));
}

// Fix: options for the SL, traffic class, DSCP and P_Key index (refs section 5: the kernel's
// mlx5_set_path sets eth_prio = sl & 7 and dscp = tclass >> 2 on RoCE v2, sl on IB, pkey_index when
// asked; udp_sport from the flow label of the two QP numbers). The old set-up had none of these
// options and sent sl = 0, pkey_index = 0, no dscp or eth_prio, and udp_sport = 0xc000 | (qpn & 0x3fff),
// which differs between the two ends of a connection.
TEST_CASE("set-up: SL, traffic class, DSCP and P_Key index options reach the QP context", "[verbs][host][setup]") {
  auto const& m = ifc::init2rtr_qp_in;
  SECTION("RoCE v2") {
    vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001), roce_device("mlx5_1", 0x0a000002)});
    recorder ra(fabric), rb(fabric);
    int const dscp = GENERATE(-1, 46);
    host::device a(ra, {.name = "mlx5_0", .sl = 3, .traffic_class = 0x62, .dscp = dscp});
    host::device b(rb, {.name = "mlx5_1"});
    host::qp qa(a, {.log_sq_depth = 6}), qb(b, {.log_sq_depth = 6});
    connect(qa, qb);
    auto const rtr = ra.last(k::MLX5_CMD_OP_INIT2RTR_QP);
    std::uint64_t const tclass = dscp < 0 ? 0x62 : (46u << 2) | 0x2;
    CHECK(rtr.get(m, "qpc.primary_address_path.tclass") == tclass);
    CHECK(rtr.get(m, "qpc.primary_address_path.dscp") == tclass >> 2);
    CHECK(rtr.get(m, "qpc.primary_address_path.eth_prio") == 3);
    CHECK(rtr.get(m, "qpc.primary_address_path.grh") == 0);
    // The UDP source port: in RoCE v2's range, the same at both ends (the kernel's flow label is
    // symmetric in the two QP numbers), and different for another pair.
    auto const sport_a = rtr.get(m, "qpc.primary_address_path.udp_sport");
    auto const sport_b = rb.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.primary_address_path.udp_sport");
    CHECK(sport_a >= 0xc000);
    CHECK(sport_a == sport_b);
    host::qp qc(a, {.log_sq_depth = 6}), qd(b, {.log_sq_depth = 6});
    connect(qc, qd);
    CHECK(ra.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.primary_address_path.udp_sport") != sport_a);
  }
  SECTION("RoCE v1: no DSCP, no UDP") {
    vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001)});
    recorder r(fabric);
    host::device a(r, {.gid_index = 2, .sl = 5, .traffic_class = 0x62});  // the v1 IPv4 entry
    host::qp q(a, {.log_sq_depth = 6});
    connect(q, q);
    auto const rtr = r.last(k::MLX5_CMD_OP_INIT2RTR_QP);
    CHECK(rtr.get(m, "qpc.primary_address_path.src_addr_index") == 2);
    CHECK(rtr.get(m, "qpc.primary_address_path.tclass") == 0x62);
    CHECK(rtr.get(m, "qpc.primary_address_path.eth_prio") == 5);
    CHECK(rtr.get(m, "qpc.primary_address_path.dscp") == 0);
    CHECK(rtr.get(m, "qpc.primary_address_path.udp_sport") == 0);
  }
  SECTION("InfiniBand") {
    vm::firmware_fabric fabric({ib_device("mlx5_0", 1)});
    recorder r(fabric);
    host::device a(r, {.sl = 9, .pkey_index = 5});
    host::qp q(a, {.log_sq_depth = 6});
    connect(q, q);
    CHECK(r.last(k::MLX5_CMD_OP_RST2INIT_QP).get(m, "qpc.primary_address_path.pkey_index") == 5);
    CHECK(r.last(k::MLX5_CMD_OP_INIT2RTR_QP).get(m, "qpc.primary_address_path.sl") == 9);
    CHECK(r.fw.query_qp_state(q.qpn()) == vm::qp_state::rts);
  }
  SECTION("out of range") {
    vm::firmware_fabric fabric({roce_device("mlx5_0", 0x0a000001)});
    recorder r(fabric);
    CHECK_THAT(error_of([&] { host::device a(r, {.pkey_index = 1}); }),
               Contains("pkey_index = 1") && Contains("1-entry P_Key table"));
    recorder r2(fabric);
    CHECK_THAT(error_of([&] { host::device a(r2, {.sl = 8}); }), Contains("Ethernet priority, 0-7"));
    recorder r3(fabric);
    CHECK_THAT(error_of([&] { host::device a(r3, {.dscp = 64}); }), Contains("dscp = 64"));
  }
}

// Fix: UAR mappings counted per page, the BlueFlame register's size from log_bf_reg_size (refs
// section 6). The old set-up mapped the doorbell of every QP (a second cudaHostRegister of a page
// fails: the model answers EEXIST, so the second QP below failed) and mapped 8 bytes of a BF
// register whatever its size.
TEST_CASE("set-up: QPs sharing a UAR page map it once; BF registers are mapped whole", "[verbs][host][setup]") {
  SECTION("the shared NC page") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.nc_dedicated_uar = false;
    c.caps.general.bf = false;  // so the SQs get the context's one NC page
    recorder r{vm::firmware_fabric({c})};
    {
      host::device d(r);
      auto first = std::make_unique<host::qp>(d, host::qp_options{.log_sq_depth = 6});
      host::qp second(d, {.log_sq_depth = 6});
      REQUIRE(r.maps.size() == 1);
      CHECK(r.maps[0].bytes == d.host_page_bytes());  // a whole host page
      CHECK(r.maps[0].at % d.host_page_bytes() == 0);
      CHECK(first->send_queue().doorbell == second.send_queue().doorbell);
      connect(*first, second);
      first.reset();
      CHECK(r.unmaps == 0);  // the second QP still rings through it
      CHECK(r.fw.lifetime_errors() == 0);
    }
    CHECK(r.unmaps == 1);
    CHECK(r.fw.lifetime_errors() == 0);
  }
  SECTION("BlueFlame registers of 1 << log_bf_reg_size bytes, a page each") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.nc_dedicated_uar = false;
    c.caps.general.log_bf_reg_size = GENERATE(8, 9, 10);
    recorder r{vm::firmware_fabric({c})};
    host::device d(r);
    host::qp a(d, {.log_sq_depth = 6}), b(d, {.log_sq_depth = 6});
    REQUIRE(r.maps.size() == 2);
    // The model refuses (EINVAL) a mapping that does not cover the whole register, so each map
    // holds 1 << log_bf_reg_size bytes from the register on: here a host page.
    CHECK(r.maps[0].bytes == d.host_page_bytes());
    CHECK(r.maps[0].page_id != r.maps[1].page_id);
    CHECK(a.send_queue().doorbell != b.send_queue().doorbell);
  }
  SECTION("dedicated NC registers, where the device has them") {
    recorder r{vm::firmware_fabric({ib_device("mlx5_0", 1)})};
    host::device d(r);
    host::qp a(d, {.log_sq_depth = 6});
    REQUIRE(r.maps.size() == 1);
    CHECK(r.maps[0].bytes == d.host_page_bytes());
  }
  SECTION("UAR pages of one 64 KiB host page: mapped once, each register at its offset") {
    // A 64 KiB-page host (acted out: the model and the set-up both take the page size): the
    // dedicated UAR pages of several QPs lie in one host page with different page ids, and a
    // second mapping of that page would fail. Keyed by UAR page id, the set-up mapped it twice.
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.host_page_bytes = 65536;
    recorder r{vm::firmware_fabric({c})};
    host::device_options o;
    o.host_page_bytes = 65536;
    {
      host::device d(r, o);
      host::qp a(d, {.log_sq_depth = 6}), b(d, {.log_sq_depth = 6}), x(d, {.log_sq_depth = 6});
      REQUIRE(r.maps.size() == 1);
      CHECK(r.maps[0].bytes == 65536);
      CHECK(r.maps[0].at % 65536 == 0);
      std::uint64_t* const da = a.send_queue().doorbell;
      std::uint64_t* const db = b.send_queue().doorbell;
      CHECK(da != db);
      // The model maps a host range to itself: each register is reached at its own address.
      CHECK(static_cast<std::size_t>(std::abs(reinterpret_cast<char*>(db) - reinterpret_cast<char*>(da))) % 4096 == 0);
      connect(a, b);
    }
    CHECK(r.unmaps == 1);
    CHECK(r.fw.lifetime_errors() == 0);
  }
  SECTION("a host page size that is no page size is refused") {
    recorder r{vm::firmware_fabric({ib_device("mlx5_0", 1)})};
    host::device_options o;
    o.host_page_bytes = 12288;
    CHECK_THROWS_WITH(host::device(r, o), Catch::Contains("host_page_bytes = 12288 is no page size"));
  }
}

// Fix: the NIC chosen by PCI closeness to the GPU when no name is given (the rule of closest_nic,
// tests/host/nic_select_test.cpp). The old set-up took the first mlx5 device (mlx5_0 here).
TEST_CASE("set-up: the NIC closest to the GPU in the PCI tree; a named device always wins", "[verbs][host][setup]") {
  char tmpl[] = "/tmp/gpucomm-setup-sysfs-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string const root = tmpl;
  // As nic_select_test: two switches under one root port; the GPU and mlx5_1 (and mlx5_2, one level
  // further down) under the second, mlx5_0 under the first.
  std::string const dev = root + "/devices/pci0000:00/0000:00:01.0";
  std::string const sw0 = dev + "/0000:01:00.0", sw1 = dev + "/0000:02:00.0";
  std::vector<std::pair<std::string, std::string>> const nodes = {{"0000:1b:00.0", sw1 + "/0000:1b:00.0"},
                                                                  {"0000:0a:00.0", sw0 + "/0000:0a:00.0"},
                                                                  {"0000:1c:00.0", sw1 + "/0000:1c:00.0"},
                                                                  {"0000:1e:00.0", sw1 + "/0000:1d:00.0/0000:1e:00.0"}};
  make_dirs(root + "/bus/pci/devices");
  for (auto const& [bus, path] : nodes) {
    make_dirs(path);
    REQUIRE(::symlink(path.c_str(), (root + "/bus/pci/devices/" + bus).c_str()) == 0);
  }
  std::vector<vm::firmware_config> devs;
  for (auto const& [name, bus, lid] : {std::tuple{"mlx5_0", "0000:0a:00.0", 1}, std::tuple{"mlx5_1", "0000:1c:00.0", 2},
                                       std::tuple{"mlx5_2", "0000:1e:00.0", 3}}) {
    vm::firmware_config c = ib_device(name, static_cast<std::uint16_t>(lid));
    c.pci_bus_id = bus;
    devs.push_back(c);
  }
  vm::firmware_config eth = ib_device("eth_0", 9);
  eth.mlx5 = false;
  eth.pci_bus_id = "0000:1c:00.0";  // as close as mlx5_1, but not mlx5
  devs.insert(devs.begin(), eth);
  vm::firmware_fabric fabric(devs);
  auto chosen = [&](host::device_options o) {
    o.sysfs = root;
    recorder r(fabric);
    host::device d(r, o);
    return d.name();
  };
  CHECK(chosen({.gpu_pci_bus_id = "0000:1B:00.0"}) == "mlx5_1");  // bus ids compare case-insensitively
  CHECK(chosen({.gpu_pci_bus_id = "0000:99:00.0"}) == "mlx5_0");  // an unknown GPU: the first mlx5 device
  CHECK(chosen({}) == "mlx5_0");                                  // host memory is on no GPU
  CHECK(chosen({.name = "mlx5_2", .gpu_pci_bus_id = "0000:1b:00.0"}) == "mlx5_2");
  recorder r(fabric);
  CHECK_THAT(error_of([&] { host::device d(r, {.name = "eth_0"}); }), Contains("not an mlx5 device"));
  CHECK_THAT(error_of([&] { host::device d(r, {.name = "mlx5_7"}); }),
             Contains("no RDMA device named mlx5_7") && Contains("eth_0, mlx5_0, mlx5_1, mlx5_2"));
  std::string const cleanup = "rm -rf '" + root + "'";
  CHECK(std::system(cleanup.c_str()) == 0);
}

// New (issue 17 item 2, host side only): an MR per heap allocation and the (base, length, rkey)
// table PEs exchange. The old set-up had single memory_regions and nothing to exchange or look up.
TEST_CASE("set-up: a region registry per PE, exchanged and looked up", "[verbs][host][setup]") {
  vm::firmware_fabric fabric({ib_device("mlx5_0", 1), ib_device("mlx5_1", 2)});
  recorder ra(fabric), rb(fabric);
  host::device a(ra, {.name = "mlx5_0"}), b(rb, {.name = "mlx5_1"});
  host::region_registry rega(a), regb(b);
  std::vector<std::uint64_t> heap_a(3 * 512), heap_b(2 * 512);
  // Three allocations on a (one 4 KiB each), two on b, registered out of address order.
  rega.add(heap_a.data() + 1024, 4096, false);
  rega.add(heap_a.data(), 4096, false);
  rega.add(heap_a.data() + 512, 4096, false);
  regb.add(heap_b.data() + 512, 4096, false);
  host::region_entry const b0 = regb.add(heap_b.data(), 4096, false);
  CHECK(b0.length == 4096);
  CHECK_THAT(error_of([&] { regb.add(heap_b.data() + 100, 64, false); }), Contains("overlaps"));
  CHECK_THAT(error_of([&] { regb.remove(heap_b.data() + 1); }), Contains("no allocation registered"));
  CHECK(rega.lkey(heap_a.data() + 600, 64) != rega.lkey(heap_a.data() + 10, 64));
  CHECK_THAT(error_of([&] { rega.lkey(heap_a.data() + 500, 200); }), Contains("not inside one"));  // straddles two

  thread_allgather ag(2);
  std::thread tb([&] { regb.exchange([&](void const* m, void* all, std::size_t n) { ag(1, m, all, n); }, 2); });
  rega.exchange([&](void const* m, void* all, std::size_t n) { ag(0, m, all, n); }, 2);
  tb.join();
  REQUIRE(rega.ranks() == 2);
  CHECK(rega.local().size() == 3);
  CHECK(regb.local().size() == 2);
  for (host::region_registry const* reg : {&rega, &regb}) {
    // Every rank's table as that rank has it.
    for (int rank = 0; rank < 2; ++rank) {
      host::region_registry const& owner = rank == 0 ? rega : regb;
      for (host::region_entry const& e : owner.local()) {
        host::region_entry const* f = reg->find(rank, e.base + 8, 16);
        REQUIRE(f != nullptr);
        CHECK(f->base == e.base);
        CHECK(f->rkey == e.rkey);
      }
    }
  }
  auto const b_base = reinterpret_cast<std::uint64_t>(heap_b.data());
  CHECK(rega.find(1, b_base, 4096)->rkey == b0.rkey);
  CHECK(rega.find(1, b_base + 4000, 200) == nullptr);    // runs into the next allocation
  CHECK(rega.find(1, b_base + 2 * 4096, 8) == nullptr);  // past the registered ones
  CHECK(rega.find(2, b_base, 8) == nullptr);             // no rank 2
  CHECK(rega.find(0, b_base, 8) == nullptr);             // b's memory is not a's
  // The keys are those of the model's MRs: b's on b's device.
  CHECK(rega.find(1, b_base, 8)->rkey != 0);
}

TEST_CASE("set-up: failures name the call, the firmware's verdict and what to do", "[verbs][host][setup]") {
  SECTION("no device at all") {
    recorder r{vm::firmware_fabric()};
    CHECK_THAT(error_of([&] { host::device d(r); }), Contains("no RDMA device found") && Contains("mlx5"));
  }
  SECTION("a command the firmware rejects: its status, syndrome and the model's reason") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.caps.general.log_max_qp = 0;  // one QP
    recorder r{vm::firmware_fabric({c})};
    host::device d(r);
    host::qp first(d, {.log_sq_depth = 6});
    std::size_t const held = r.fw.live_objects();
    std::string const msg = error_of([&] { host::qp second(d, {.log_sq_depth = 6}); });
    CHECK_THAT(msg, Contains("DEVX CREATE_QP on mlx5_0 was rejected by the firmware") &&
                        Contains("firmware status 0xf no resources") &&
                        Contains("syndrome 0x" +
                                 [] {
                                   char b[16];
                                   std::snprintf(b, sizeof b, "%x",
                                                 vm::firmware_model::syndrome_of("create_qp_in.qpn"));
                                   return std::string(b);
                                 }()) &&
                        Contains("2^log_max_qp QPs already"));
    // The half-built QP was released: nothing leaked, nothing released out of order.
    CHECK(r.fw.live_objects() == held);
    CHECK(r.fw.lifetime_errors() == 0);
    CHECK(r.unmaps == 1);
  }
  SECTION("a refusal before the firmware") {
    vm::firmware_config c = ib_device("mlx5_0", 1);
    c.num_comp_vectors = 0;
    recorder r{vm::firmware_fabric({c})};
    host::device d(r);
    CHECK_THAT(error_of([&] { host::qp q(d); }),
               Contains("query_eqn(0) on mlx5_0 failed: Invalid argument") && Contains("completion vectors"));
    CHECK(r.fw.lifetime_errors() == 0);
  }
  SECTION("connecting InfiniBand to RoCE") {
    vm::firmware_fabric fabric({ib_device("mlx5_0", 1), roce_device("mlx5_1", 0x0a000001)});
    recorder ra(fabric), rb(fabric);
    host::device a(ra, {.name = "mlx5_0"}), b(rb, {.name = "mlx5_1"});
    host::qp qa(a, {.log_sq_depth = 6}), qb(b, {.log_sq_depth = 6});
    CHECK_THAT(error_of([&] { qa.connect(qb.local_info()); }), Contains("connect ports of the same link layer"));
  }
}

TEST_CASE("set-up: a QP the firmware will not destroy keeps what it uses", "[verbs][host][setup]") {
  // Its ring, CQ, doorbell records and UAR may still be used by the NIC: releasing them under it
  // (what the set-up did) is a use after free by the NIC, which the model counts as lifetime errors.
  recorder r{vm::firmware_fabric({ib_device("mlx5_0", 1)})};
  std::uint32_t qpn = 0;
  {
    host::device d(r);
    {
      host::qp q(d, {.log_sq_depth = 6});
      connect(q, q);
      qpn = q.qpn();
      r.refuse_qp_destroy = true;
    }
    CHECK(d.kept_qps() == 1);
    CHECK(r.umem_deregs == 0);
    CHECK(r.unmaps == 0);
  }
  CHECK(r.fw.query_qp_state(qpn) == vm::qp_state::rts);  // still there, as on the NIC
  CHECK(r.fw.lifetime_errors() == 0);                    // nothing (the PD included) released under it
}
