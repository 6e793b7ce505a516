// The firmware model driving the NIC model (model/nic_backend.hpp): QPs made by the set-up
// (host/setup.hpp) run. WQEs posted on them execute on the buffers the set-up's MRs name, with the
// firmware's QP numbers and keys; a QP on a device another "process" models is reached over the
// model's fabric; a collapsed CQ without overrun-ignore reports its overrun, to the set-up as the
// CQ error event the firmware would raise. Host memory, no GPU.
#include <catch2/catch.hpp>

#include <gpucomm/verbs_gpu/host/setup.hpp>
#include <gpucomm/testing/nic_model/nic_backend.hpp>

#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "forwarding_backend.hpp"
#include "model_devices.hpp"

using namespace verbs_test;
namespace vh = gpucomm::verbs_gpu::host;

namespace {

// Runs the nic until the WQE at `index` of `sq` completes; its status.
vg::status complete(vm::nic& n, vg::send_queue const& sq, std::uint64_t index) {
  for (int i = 0; i < 200; ++i) {
    n.progress();
    vg::status const st = sq.poll();
    if (st == vg::status::error) return st;
    if (sq.counters->consumer > index) return vg::status::ok;
  }
  return vg::status::pending;
}

template <class F>
vg::status run_one(vm::nic& n, vg::send_queue const& sq, F f) {
  std::uint64_t index = 0;
  vg::status const st = post_one(sq, 1, f, vg::post_flags::none, &index);
  return st == vg::status::ok ? complete(n, sq, index) : st;
}

vh::device_options named(char const* name) {
  vh::device_options o;
  o.name = name;
  return o;
}

vh::qp_options shallow() {
  vh::qp_options o;
  o.log_sq_depth = 6;
  return o;
}

}  // namespace

TEST_CASE("nic_backend: the set-up's QPs run on the NIC model", "[nic_backend]") {
  vm::firmware_fabric fabric({gpucomm_test::ib_device("mlx5_0", 1), gpucomm_test::ib_device("mlx5_1", 2)});
  vm::model_network net;
  vh::host_control_memory memory;
  vm::nic_backend be_a(fabric, net, memory), be_b(fabric, net, memory);
  vh::device da(be_a, named("mlx5_0")), db(be_b, named("mlx5_1"));
  vh::qp qa(da, shallow()), qb(db, shallow()), loop(da, shallow());
  qa.connect(qb.local_info());
  qb.connect(qa.local_info());
  loop.connect(loop.local_info());
  REQUIRE(be_a.firmware().query_qp_state(qa.qpn()) == vm::qp_state::rts);

  std::vector<std::uint64_t> a(256), b(256);
  vh::memory_region ma(da, a.data(), a.size() * 8, false), mb(db, b.data(), b.size() * 8, false);
  auto local = [&](std::size_t i, std::uint32_t bytes) { return vg::local_buf{ma.addr() + i * 8, bytes, ma.lkey()}; };
  auto remote = [&](std::vector<std::uint64_t> const& v, vh::memory_region const& m, std::size_t i) {
    return vg::remote_buf{reinterpret_cast<std::uint64_t>(v.data() + i), m.rkey()};
  };
  std::mt19937_64 rng(5);
  vg::send_queue const sa = qa.send_queue(), sl = loop.send_queue();
  for (int round = 0; round < 20; ++round) {
    for (auto& w : a) w = rng();
    for (auto& w : b) w = rng();
    auto const a0 = a, b0 = b;
    std::size_t const i = rng() % 100, j = rng() % 100, len = 1 + rng() % 50;
    // RDMA WRITE A -> B: B's words [j, j + len) and nothing else change.
    REQUIRE(run_one(net.data_path(), sa, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, local(i, static_cast<std::uint32_t>(len * 8)), remote(b, mb, j));
            }) == vg::status::ok);
    for (std::size_t k = 0; k < b.size(); ++k) REQUIRE(b[k] == (k >= j && k < j + len ? a0[i + k - j] : b0[k]));
    // Fetch-and-add on B's word 200, the old value into A's word 250.
    std::uint64_t const add = rng();
    REQUIRE(run_one(net.data_path(), sa, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_atomic_fa(s, local(250, 8), remote(b, mb, 200), add);
            }) == vg::status::ok);
    CHECK(a[250] == b0[200]);
    CHECK(b[200] == b0[200] + add);
    // Loopback READ of A's words into A.
    auto const a1 = a;
    REQUIRE(run_one(net.data_path(), sl, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_read(s, local(0, 64), remote(a, ma, 128));
            }) == vg::status::ok);
    for (std::size_t k = 0; k < 8; ++k) REQUIRE(a[k] == a1[128 + k]);
  }
  vm::nic_stats const s = net.data_path().stats();
  CHECK(s.wqes == 60);
  CHECK(s.error_cqes == 0);

  // A key the firmware did not give B's memory: the responder refuses it.
  vg::status const bad = run_one(net.data_path(), sa, [&](vg::wqe_slot const& s2, std::uint32_t) {
    return vg::build_rdma_write(s2, local(0, 8),
                                vg::remote_buf{reinterpret_cast<std::uint64_t>(b.data()), mb.rkey() ^ 0x100});
  });
  CHECK(bad == vg::status::error);
  CHECK(net.data_path().stats().error_cqes == 1);
}

TEST_CASE("nic_backend: a QP reaches a device another process models, over the fabric", "[nic_backend]") {
  // Two "processes" in one: each has its own fabric object, where the other's device is remote.
  auto here = gpucomm_test::ib_device("mlx5_0", 1), there = gpucomm_test::ib_device("mlx5_1", 2);
  auto remote = [](vm::firmware_config c) {
    c.remote = true;
    return c;
  };
  vm::firmware_fabric fabric_a({here, remote(there)}), fabric_b({remote(here), there});
  vm::model_network net_a, net_b;
  std::string const addr_a = "gpucomm-nic-backend-test-" + std::to_string(::getpid()) + "-a";
  std::string const addr_b = "gpucomm-nic-backend-test-" + std::to_string(::getpid()) + "-b";
  net_a.data_path().listen(addr_a);
  net_b.data_path().listen(addr_b);
  net_a.add_remote("mlx5_1", addr_b);
  net_b.add_remote("mlx5_0", addr_a);
  vh::host_control_memory memory;
  vm::nic_backend be_a(fabric_a, net_a, memory), be_b(fabric_b, net_b, memory);
  CHECK(be_a.devices().size() == 1);  // a remote device is not this host's
  vh::device da(be_a, named("mlx5_0")), db(be_b, named("mlx5_1"));
  vh::qp qa(da, shallow()), qb(db, shallow());
  qa.connect(qb.local_info());
  qb.connect(qa.local_info());

  std::vector<std::uint64_t> a(64), b(64, 0);
  for (std::size_t k = 0; k < a.size(); ++k) a[k] = 0x1000 + k;
  vh::memory_region ma(da, a.data(), a.size() * 8, false), mb(db, b.data(), b.size() * 8, false);
  net_b.data_path().start();  // the responder's server answers without it; started to be realistic
  REQUIRE(run_one(net_a.data_path(), qa.send_queue(), [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_rdma_write(s, vg::local_buf{ma.addr(), 64 * 8, ma.lkey()},
                                        vg::remote_buf{reinterpret_cast<std::uint64_t>(b.data()), mb.rkey()});
          }) == vg::status::ok);
  CHECK(b == a);
  CHECK(net_a.data_path().stats().remote_ops == 1);
  CHECK(net_b.data_path().stats().served == 1);
  net_b.data_path().stop();
}

TEST_CASE("nic_backend: a collapsed CQ without overrun-ignore reports its overrun", "[nic_backend]") {
  vm::nic n;
  std::uint32_t const pd = n.alloc_pd();
  alignas(64) vg::cqe64 cqe[1];
  std::memset(cqe, 0xff, sizeof cqe);
  alignas(64) std::uint32_t cq_dbr[2] = {0, 0}, qp_dbr[2] = {0, 0};
  alignas(64) std::uint64_t doorbell = 0;
  std::vector<std::byte> ring(64 * 8);
  vg::qp_counters counters{};
  for (bool const oi : {true, false}) {
    vm::cq_config cc;
    cc.cqes = cqe;
    cc.dbrec = cq_dbr;
    cc.overrun_ignore = oi;
    std::uint32_t const cqn = n.create_cq(cc);
    vm::qp_config qc;
    qc.pd = pd;
    qc.ring = ring.data();
    qc.log_depth = 3;
    qc.dbrec_snd = qp_dbr + vg::dbr_snd;
    qc.doorbell = &doorbell;
    qc.send_cqn = cqn;
    std::uint32_t const qpn = n.create_qp(qc);
    n.connect(qpn, qpn);
    vg::send_queue sq{};
    sq.ring = ring.data();
    sq.log_depth = 3;
    sq.qpn = qpn;
    sq.dbrec = qp_dbr + vg::dbr_snd;
    sq.doorbell = &doorbell;
    sq.counters = &counters;
    sq.cq = vg::completion_queue{cqe, cq_dbr, 0, vg::cq_mode::collapsed, cqn};
    for (int k = 0; k < 3; ++k)
      REQUIRE(run_one(n, sq, [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) == vg::status::ok);
    n.destroy_qp(qpn);
    // Three completions into one entry nobody consumed: the second and third overrun without oi.
    CHECK(n.stats().cq_overruns == (oi ? 0u : 2u));
    CHECK(n.overrun_cqns() == (oi ? std::vector<std::uint32_t>{} : std::vector<std::uint32_t>{cqn}));
    // Fresh ring state for the second QP.
    std::fill(ring.begin(), ring.end(), std::byte{0});
    std::memset(cqe, 0xff, sizeof cqe);
    qp_dbr[0] = qp_dbr[1] = 0;
    counters = vg::qp_counters{};
  }
}

namespace {

/// A backend that forwards everything to a nic_backend but clears cqc.oi in every CREATE_CQ: the
/// set-up defect the review found (oi at the wrong bit), so a collapsed CQ overruns.
class drops_overrun_ignore final : public forwarding_backend {
 public:
  using forwarding_backend::forwarding_backend;
  vh::obj_handle obj_create(void const* in, std::size_t ib, void* out, std::size_t ob, int* e) override {
    std::vector<unsigned char> cmd(static_cast<unsigned char const*>(in), static_cast<unsigned char const*>(in) + ib);
    if (vh::prm::get(cmd.data(), vh::prm::in_opcode) == vh::prm::op_create_cq) {
      REQUIRE(vh::prm::get(cmd.data(), vh::prm::cqc_oi) == 1);  // the set-up asked for it
      vh::prm::set(cmd.data(), vh::prm::cqc_oi, 0);
    }
    return forwarding_backend::obj_create(cmd.data(), ib, out, ob, e);
  }
};

}  // namespace

TEST_CASE("nic_backend: a CQ that overruns is reported once as a CQ error event, naming the firmware's CQ",
          "[nic_backend]") {
  vm::firmware_fabric fabric({gpucomm_test::ib_device("mlx5_0", 1)});
  vm::model_network net;
  vh::host_control_memory memory;
  vm::nic_backend be(fabric, net, memory);
  drops_overrun_ignore broken(be);
  vh::device dev(broken, named("mlx5_0"));
  vh::qp q(dev, shallow()), once(dev, shallow());
  q.connect(q.local_info());
  once.connect(once.local_info());
  CHECK(be.async_events().empty());
  // Three completions into q's one entry, which nobody consumes: its CQ overruns. `once`'s CQ lost
  // oi too, but one completion cannot overrun.
  for (int k = 0; k < 3; ++k)
    REQUIRE(run_one(net.data_path(), q.send_queue(),
                    [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) == vg::status::ok);
  REQUIRE(run_one(net.data_path(), once.send_queue(),
                  [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) == vg::status::ok);
  std::vector<vh::async_event> const events = broken.async_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].what == vh::async_event::kind::cq_error);
  CHECK(events[0].object == q.send_queue().cq.cqn);  // the firmware's CQ number, as the set-up knows it
  CHECK_THAT(events[0].text(), Catch::Contains("CQ 0x") && Catch::Contains("overrun"));
  CHECK(broken.async_events().empty());  // each event once
}
