// verbs_gpu send queue and completion queue on the host: counters, wraparound, batching, full
// ring, concurrent posting, through the NIC model.
#include <catch2/catch.hpp>

#include "fixture.hpp"

#include <chrono>
#include <future>
#include <random>
#include <thread>

using namespace verbs_test;
using namespace std::chrono_literals;

namespace {
std::uint32_t load_be32(std::uint32_t const* p) { return vg::from_be32(*p); }
std::uint64_t load_u64(std::uint64_t const* p) {
  return cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*const_cast<std::uint64_t*>(p)).load();
}
}  // namespace

TEST_CASE("verbs_gpu widen_wqe_counter is wrap-safe", "[verbs][cq]") {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t const ref = (rng() % (1ull << 48)) + vg::max_sq_depth + 1;
    std::uint64_t const s = ref - 1 - rng() % vg::max_sq_depth;  // any WQE still in the window
    REQUIRE(vg::widen_wqe_counter(static_cast<std::uint16_t>(s), ref) == s);
  }
  // Across the 16-bit wrap.
  CHECK(vg::widen_wqe_counter(0xfffe, 0x10003) == 0xfffe);
  CHECK(vg::widen_wqe_counter(0x0002, 0x10003) == 0x10002);
}

TEST_CASE("verbs_gpu post: counters, doorbell record and doorbell", "[verbs][sq]") {
  vm::nic n;
  vm::host_queue_pair qp(n, n.alloc_pd(), 4, vg::cq_mode::collapsed);
  auto& sq = qp.sq();
  std::uint64_t idx = ~0ull;
  REQUIRE(post_one(
              sq, 1, [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }, vg::post_flags::none,
              &idx) == vg::status::ok);
  CHECK(idx == 0);
  auto& c = qp.counters();
  CHECK(c.reserved == 1);
  CHECK(c.ready == 1);
  CHECK(c.producer == 1);
  CHECK(c.consumer == 0);
  CHECK(load_be32(sq.dbrec) == 1);
  CHECK(load_u64(sq.doorbell) == vg::make_doorbell(1, qp.qpn()));
  // The WQE: a signaled NOP at index 0 naming this QP.
  vg::ctrl_seg ctrl;
  std::memcpy(&ctrl, sq.ring, 16);
  CHECK(vg::from_be32(ctrl.opmod_idx_opcode) == 0);
  CHECK(vg::from_be32(ctrl.qpn_ds) == ((qp.qpn() << 8) | 1));
  CHECK(ctrl.fm_ce_se == vg::ctrl_cq_update);
  // A two-WQEBB slot holding a one-WQEBB WQE is padded with an unsignaled NOP.
  REQUIRE(post_one(sq, 2, [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) == vg::status::ok);
  vg::ctrl_seg pad;
  std::memcpy(&pad, sq.ring + 2 * 64, 16);
  CHECK(vg::from_be32(pad.opmod_idx_opcode) == (2u << 8));
  CHECK(pad.fm_ce_se == 0);
  CHECK(c.producer == 3);
  // The model executes all three WQEs, and the CQ reports the last signaled one.
  CHECK(n.progress() == 3);
  CHECK(sq.poll() == vg::status::ok);
  CHECK(c.consumer == 2);  // one past the first WQEBB of the newest completed WQE (index 1)
  // quiet covers the unsignalled pad: after 1 ms with no completion it rings a signalled NOP
  // (index 3), and one more for every further millisecond the model takes to answer (a loaded
  // machine), so the consumer ends one past the first of them or later.
  n.start();
  CHECK(sq.quiet() == vg::status::ok);
  n.stop();
  CHECK(c.consumer >= 4);
  CHECK(c.consumer <= c.producer);
}

TEST_CASE("verbs_gpu post_flags::fence sets the fence mode on the batch's first WQE only", "[verbs][sq]") {
  vm::nic n;
  vm::host_queue_pair qp(n, n.alloc_pd(), 4, vg::cq_mode::collapsed);
  auto& sq = qp.sq();
  auto nop = [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); };
  REQUIRE(sq.post(vg::detail::one_thread{}, 1, 3, make_builder(nop), vg::post_flags::fence) == vg::status::ok);
  REQUIRE(post_one(sq, 1, nop, vg::post_flags::fence | vg::post_flags::unsignaled) == vg::status::ok);
  std::uint8_t fm[4];
  for (int i = 0; i < 4; ++i) {
    vg::ctrl_seg ctrl;
    std::memcpy(&ctrl, sq.ring + 64 * i, 16);
    fm[i] = ctrl.fm_ce_se;
  }
  CHECK(fm[0] == vg::ctrl_fence);      // first of the batch: fenced
  CHECK(fm[1] == 0);                   // middle
  CHECK(fm[2] == vg::ctrl_cq_update);  // last: signalled, not fenced
  CHECK(fm[3] == vg::ctrl_fence);      // a one-WQE batch, unsignalled
  CHECK(n.progress() == 4);            // the model executes fenced WQEs like any other (it runs in order)
}

TEST_CASE("verbs_gpu batching: deferred batches ring every step, a final ring covers the rest", "[verbs][sq]") {
  for (std::uint32_t total : {13u, 8u, 1u, 21u}) {
    vm::nic n;
    qp_pair p(n, 6, vg::cq_mode::collapsed);
    auto& sq = p.sq();
    sq.ring_step = 8;
    host_buffer src(n, p.pd_a, 64), dst(n, p.pd_b, 64);
    for (std::size_t i = 0; i < 64; ++i) src.words[i] = 0x1000 + i;
    auto& c = p.a->counters();
    for (std::uint32_t i = 0; i < total; ++i) {
      bool const last = i + 1 == total;
      REQUIRE(post_one(
                  sq, 1,
                  [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_write(s, src.local(i, 8), dst.remote(i));
                  },
                  last ? vg::post_flags::none : vg::post_flags::defer_doorbell) == vg::status::ok);
      std::uint64_t const expected_producer = last ? i + 1 : ((i + 1) / 8) * 8;
      INFO("total " << total << " after WQE " << i);
      REQUIRE(c.producer == expected_producer);
      REQUIRE(load_be32(sq.dbrec) == expected_producer);
    }
    n.progress();
    REQUIRE(sq.wait_complete(total - 1) == vg::status::ok);
    for (std::uint32_t i = 0; i < 64; ++i) REQUIRE(dst.words[i] == (i < total ? 0x1000 + i : 0));
    CHECK(n.stats().wqes == total);
  }
}

TEST_CASE("verbs_gpu full ring: the poster waits for completions and never overwrites", "[verbs][sq]") {
  vm::nic n;
  qp_pair p(n, 4, vg::cq_mode::collapsed);  // 16 WQEBBs; usable 16 - 3
  auto& sq = p.sq();
  host_buffer src(n, p.pd_a, 64), dst(n, p.pd_b, 64);
  for (std::size_t i = 0; i < 64; ++i) src.words[i] = 0xabc00 + i;
  auto write = [&](std::uint32_t i) {
    return post_one(sq, 1, [&, i](vg::wqe_slot const& s, std::uint32_t) {
      return vg::build_rdma_write(s, src.local(i, 8), dst.remote(i));
    });
  };
  for (std::uint32_t i = 0; i < 13; ++i) REQUIRE(write(i) == vg::status::ok);
  std::vector<std::byte> snapshot(sq.ring, sq.ring + 16 * 64);
  // The 14th cannot fit until something completes: it must block, leaving the ring untouched.
  auto blocked = std::async(std::launch::async, [&] { return write(13); });
  CHECK(blocked.wait_for(100ms) == std::future_status::timeout);
  CHECK(std::memcmp(snapshot.data(), sq.ring, snapshot.size()) == 0);
  CHECK(dst.words[0] == 0);
  // The NIC completes the first 13; the poster proceeds and overwrites WQEBB 13 only after that.
  n.progress();
  REQUIRE(blocked.get() == vg::status::ok);
  n.start();
  REQUIRE(sq.quiet() == vg::status::ok);
  n.stop();
  for (std::uint32_t i = 0; i < 14; ++i) REQUIRE(dst.words[i] == 0xabc00 + i);
}

TEST_CASE("verbs_gpu many host threads post to one QP, the ring wraps many times", "[verbs][sq][model]") {
  for (auto mode : {vg::cq_mode::collapsed, vg::cq_mode::owner_bit}) {
    vm::nic n;
    qp_pair p(n, 6, mode, 3);  // 64 WQEBBs, 8 CQEs in owner-bit mode
    auto& sq = p.sq();
    sq.ring_step = 4;
    constexpr unsigned threads = 6, per_thread = 1500;
    host_buffer src(n, p.pd_a, threads * per_thread), dst(n, p.pd_b, threads * per_thread);
    for (std::size_t i = 0; i < src.words.size(); ++i) src.words[i] = (i * 0x9e3779b97f4a7c15ull) | 1;
    n.start();
    std::vector<std::thread> ts;
    std::atomic<int> failures{0};
    for (unsigned t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        for (unsigned k = 0; k < per_thread; ++k) {
          std::uint32_t const i = t * per_thread + k;
          // Mixed shapes: inline writes of 8 bytes, pointer writes, 2-WQEBB slots, deferred rings.
          vg::status st;
          if (k % 3 == 0) {
            st = post_one(sq, 1, [&, i](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write_inline(s, &src.words[i], 8, dst.remote(i));
            });
          } else if (k % 3 == 1) {
            st = post_one(
                sq, 2,
                [&, i](vg::wqe_slot const& s, std::uint32_t) {
                  return vg::build_rdma_write(s, src.local(i, 8), dst.remote(i));
                },
                vg::post_flags::defer_doorbell);
          } else {
            st = post_one(sq, 1, [&, i](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, src.local(i, 8), dst.remote(i));
            });
          }
          if (st != vg::status::ok) ++failures;
        }
        if (sq.quiet() != vg::status::ok) ++failures;
      });
    }
    for (auto& t : ts) t.join();
    REQUIRE(sq.quiet() == vg::status::ok);
    n.stop();
    REQUIRE(failures == 0);
    for (std::size_t i = 0; i < dst.words.size(); ++i) REQUIRE(dst.words[i] == src.words[i]);
    auto& c = p.a->counters();
    CHECK(c.reserved > 40 * 64);  // wrapped the 64-WQEBB ring dozens of times
    CHECK(c.ready == c.reserved);
    CHECK(c.producer == c.ready);
    CHECK(n.stats().error_cqes == 0);
  }
}

TEST_CASE("verbs_gpu group posting from a team of host threads", "[verbs][sq][model]") {
  vm::nic n;
  qp_pair p(n, 7, vg::cq_mode::owner_bit, 4);
  auto& sq = p.sq();
  sq.ring_step = 16;
  constexpr unsigned teams = 3, team_size = 4, batches = 150;
  // Batch sizes that are not multiples of the team size or of the ring step.
  auto batch_size = [](unsigned b) { return 1 + (b * 7) % 29; };
  std::size_t per_team = 0;
  for (unsigned b = 0; b < batches; ++b) per_team += batch_size(b);
  host_buffer src(n, p.pd_a, teams * per_team), dst(n, p.pd_b, teams * per_team);
  for (std::size_t i = 0; i < src.words.size(); ++i) src.words[i] = ~i;
  n.start();
  std::vector<std::unique_ptr<team_state>> states;
  for (unsigned t = 0; t < teams; ++t) states.push_back(std::make_unique<team_state>(team_size));
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < teams; ++t) {
    for (unsigned r = 0; r < team_size; ++r) {
      ts.emplace_back([&, t, r] {
        host_team const g{states[t].get(), r};
        std::size_t offset = t * per_team;
        for (unsigned b = 0; b < batches; ++b) {
          std::uint32_t const nw = batch_size(b);
          auto f = [&, offset](vg::wqe_slot const& s, std::uint32_t i) {
            return vg::build_rdma_write(s, src.local(offset + i, 8), dst.remote(offset + i));
          };
          vg::status const st =
              sq.post(g, 1, nw, make_builder(f), (b % 4 == 3) ? vg::post_flags::none : vg::post_flags::defer_doorbell);
          if (st != vg::status::ok) ++failures;
          offset += nw;
        }
        if (r == 0 && sq.quiet() != vg::status::ok) ++failures;
      });
    }
  }
  for (auto& t : ts) t.join();
  n.stop();
  REQUIRE(failures == 0);
  for (std::size_t i = 0; i < dst.words.size(); ++i) REQUIRE(dst.words[i] == src.words[i]);
  CHECK(p.a->counters().reserved > 10 * 128);
}

TEST_CASE("verbs_gpu post rejects batches the ring cannot hold", "[verbs][sq]") {
  vm::nic n;
  vm::host_queue_pair qp(n, n.alloc_pd(), 4, vg::cq_mode::collapsed);
  auto nop = make_builder([](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); });
  CHECK(qp.sq().post(vg::detail::one_thread{}, 1, 9, nop) == vg::status::invalid);  // > depth / 2
  CHECK(qp.sq().post(vg::detail::one_thread{}, 5, 1, nop) == vg::status::invalid);  // > max WQE size
  CHECK(qp.sq().post(vg::detail::one_thread{}, 1, 0, nop) == vg::status::invalid);
  CHECK(qp.counters().reserved == 0);
}
