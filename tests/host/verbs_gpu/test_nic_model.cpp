// The NIC model on host memory: every opcode end to end with the data checked, error CQEs and
// the QP error state, fault injection. WQEs are built by the same builders the kernels use.
#include <catch2/catch.hpp>

#include "fixture.hpp"

#include <chrono>
#include <random>
#include <thread>

using namespace verbs_test;
using namespace std::chrono_literals;

namespace {

// Reference for masked fetch-add, written independently of the model: split the word into fields
// at the boundary bits and add field by field modulo each field's width.
std::uint64_t ref_field_add(std::uint64_t x, std::uint64_t y, std::uint64_t boundary, int bits) {
  std::uint64_t result = 0;
  int lo = 0;
  for (int i = 0; i < bits; ++i) {
    if (((boundary >> i) & 1u) || i == bits - 1) {
      int const width = i - lo + 1;
      std::uint64_t const mask = width == 64 ? ~0ull : ((1ull << width) - 1);
      std::uint64_t const sum = (((x >> lo) & mask) + ((y >> lo) & mask)) & mask;
      result |= sum << lo;
      lo = i + 1;
    }
  }
  return result;
}

// Posts one WQE and runs the model until it completes; returns the post's and the wait's status.
template <class F>
vg::status run_one(vm::nic& n, vg::send_queue const& sq, std::uint32_t wqebbs, F f) {
  std::uint64_t idx = 0;
  vg::status st = post_one(sq, wqebbs, f, vg::post_flags::none, &idx);
  if (st != vg::status::ok) return st;
  n.progress();
  for (int i = 0; i < 100; ++i) {
    st = sq.poll();
    if (st == vg::status::error) return st;
    if (sq.counters->consumer > idx) return vg::status::ok;
  }
  return vg::status::pending;
}

}  // namespace

TEST_CASE("verbs_gpu model: every opcode end to end on host memory", "[verbs][model]") {
  for (auto mode : {vg::cq_mode::collapsed, vg::cq_mode::owner_bit}) {
    vm::nic n;
    qp_pair p(n, 5, mode, 2);
    auto& sq = p.sq();
    host_buffer la(n, p.pd_a, 512), rb(n, p.pd_b, 512);
    std::mt19937_64 rng(17);
    std::uint64_t recv_ci = 0;
    for (int round = 0; round < 60; ++round) {
      for (auto& w : la.words) w = rng();
      for (auto& w : rb.words) w = rng();
      auto const la0 = la.words, rb0 = rb.words;
      std::size_t const i = rng() % 200, j = rng() % 200, len = 1 + rng() % 40;  // words
      std::uint64_t const v1 = rng(), v2 = rng();
      switch (round % 12) {
        case 0: {  // RDMA WRITE, pointer segment
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_write(s, la.local(i, len * 8), rb.remote(j));
                  }) == vg::status::ok);
          for (std::size_t k = 0; k < 512; ++k) {
            REQUIRE(rb.words[k] == ((k >= j && k < j + len) ? la0[i + k - j] : rb0[k]));
          }
          break;
        }
        case 1: {  // RDMA READ
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_read(s, la.local(i, len * 8), rb.remote(j));
                  }) == vg::status::ok);
          for (std::size_t k = 0; k < 512; ++k) {
            REQUIRE(la.words[k] == ((k >= i && k < i + len) ? rb0[j + k - i] : la0[k]));
          }
          break;
        }
        case 2: {  // inline write of every length up to the maximum, unaligned destination
          std::uint32_t const bytes = static_cast<std::uint32_t>(rng() % (vg::max_inline_write + 1));
          std::uint32_t const off = static_cast<std::uint32_t>(rng() % 8);
          std::vector<unsigned char> payload(bytes);
          for (auto& b : payload) b = static_cast<unsigned char>(rng());
          vg::remote_buf dst{rb.addr(j) + off, rb.key.rkey};
          REQUIRE(run_one(n, sq, 4, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_write_inline(s, payload.data(), bytes, dst);
                  }) == vg::status::ok);
          auto const* got = reinterpret_cast<unsigned char const*>(rb.words.data());
          auto const* was = reinterpret_cast<unsigned char const*>(rb0.data());
          for (std::size_t k = 0; k < 512 * 8; ++k) {
            std::size_t const at = j * 8 + off;
            REQUIRE(got[k] == ((k >= at && k < at + bytes) ? payload[k - at] : was[k]));
          }
          break;
        }
        case 3: {  // RDMA WRITE with immediate: data, then a RESP_WR_IMM CQE at the responder
          std::uint32_t const imm = static_cast<std::uint32_t>(v1);
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_write_imm(s, la.local(i, len * 8), rb.remote(j), imm);
                  }) == vg::status::ok);
          for (std::size_t k = 0; k < len; ++k) REQUIRE(rb.words[j + k] == la0[i + k]);
          auto& ci = recv_ci;
          vg::recv_completion rc;
          REQUIRE(vg::poll_recv_cq(p.recv_b->cq(), ci, rc) == vg::status::ok);
          CHECK(rc.opcode == vg::cqe_opcode::resp_wr_imm);
          CHECK(rc.imm == imm);
          CHECK(rc.byte_count == len * 8);
          CHECK(rc.qpn == p.b->qpn());
          CHECK(vg::poll_recv_cq(p.recv_b->cq(), ci, rc) == vg::status::pending);
          break;
        }
        case 4: {  // 8-byte CAS, both outcomes
          bool const hit = rng() & 1;
          std::uint64_t const cmp = hit ? rb0[j] : rb0[j] ^ 1;
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_atomic_cs(s, la.local(i, 8), rb.remote(j), cmp, v2);
                  }) == vg::status::ok);
          CHECK(la.words[i] == rb0[j]);
          CHECK(rb.words[j] == (hit ? v2 : rb0[j]));
          break;
        }
        case 5: {  // 8-byte fetch-add
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_atomic_fa(s, la.local(i, 8), rb.remote(j), v1);
                  }) == vg::status::ok);
          CHECK(la.words[i] == rb0[j]);
          CHECK(rb.words[j] == rb0[j] + v1);
          break;
        }
        case 6: {  // masked fetch-add, 8 bytes, random field boundaries (0 = add, ~0 = xor included)
          std::uint64_t const boundary = (round % 3 == 0) ? 0 : (round % 3 == 1) ? ~0ull : v2;
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_masked_fa64(s, la.local(i, 8), rb.remote(j), v1, boundary);
                  }) == vg::status::ok);
          CHECK(la.words[i] == rb0[j]);
          CHECK(rb.words[j] == ref_field_add(rb0[j], v1, boundary, 64));
          if (boundary == ~0ull) CHECK(rb.words[j] == (rb0[j] ^ v1));
          if (boundary == 0) CHECK(rb.words[j] == rb0[j] + v1);
          break;
        }
        case 7: {  // masked fetch-add, 4 bytes; the fetched value arrives big-endian
          auto* r32 = reinterpret_cast<std::uint32_t*>(rb.words.data());
          auto const* r32_0 = reinterpret_cast<std::uint32_t const*>(rb0.data());
          std::size_t const w = 2 * j + (round & 1);
          std::uint32_t const add = static_cast<std::uint32_t>(v1), boundary = static_cast<std::uint32_t>(v2);
          vg::remote_buf const dst{reinterpret_cast<std::uint64_t>(r32 + w), rb.key.rkey};
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_masked_fa32(s, la.local(i, 4), dst, add, boundary);
                  }) == vg::status::ok);
          CHECK(vg::fetched32(static_cast<std::uint32_t>(la.words[i])) == r32_0[w]);
          CHECK(r32[w] == static_cast<std::uint32_t>(ref_field_add(r32_0[w], add, boundary, 32)));
          CHECK(static_cast<std::uint32_t>(la.words[i] >> 32) == static_cast<std::uint32_t>(la0[i] >> 32));
          break;
        }
        case 8: {  // masked CAS, 8 bytes: AND, OR, SET, and a masked compare
          std::uint64_t swap = 0, swap_mask = 0, cmp = 0, cmp_mask = 0;
          std::uint64_t expect = 0;
          switch ((round / 12) % 4) {
            case 0:
              swap = 0;
              swap_mask = ~v1;
              expect = rb0[j] & v1;
              break;  // AND v1
            case 1:
              swap = v1;
              swap_mask = v1;
              expect = rb0[j] | v1;
              break;  // OR v1
            case 2:
              swap = v1;
              swap_mask = ~0ull;
              expect = v1;
              break;  // SET v1
            case 3:   // compare low half only
              cmp = rb0[j] ^ 0xffff'0000'0000'0000ull;
              cmp_mask = 0x0000'ffff'ffff'ffffull;
              swap = v1;
              swap_mask = ~0ull;
              expect = v1;
              break;
          }
          REQUIRE(run_one(n, sq, 2, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_masked_cs64(s, la.local(i, 8), rb.remote(j), cmp, swap, cmp_mask, swap_mask);
                  }) == vg::status::ok);
          CHECK(la.words[i] == rb0[j]);
          CHECK(rb.words[j] == expect);
          break;
        }
        case 9: {  // masked CAS, 4 bytes, compare fails on a masked bit
          auto* r32 = reinterpret_cast<std::uint32_t*>(rb.words.data());
          std::uint32_t const old = r32[2 * j];
          bool const hit = rng() & 1;
          std::uint32_t const cmp = hit ? (old ^ 0x80000000u) : (old ^ 1u);  // bit 31 is not compared
          vg::remote_buf const dst{reinterpret_cast<std::uint64_t>(r32 + 2 * j), rb.key.rkey};
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_masked_cs32(s, la.local(i, 4), dst, cmp, static_cast<std::uint32_t>(v1),
                                                 0x7fffffffu, 0xffffffffu);
                  }) == vg::status::ok);
          CHECK(vg::fetched32(static_cast<std::uint32_t>(la.words[i])) == old);
          CHECK(r32[2 * j] == (hit ? static_cast<std::uint32_t>(v1) : old));
          break;
        }
        case 10: {  // NOP changes no memory
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) ==
                  vg::status::ok);
          CHECK(la.words == la0);
          CHECK(rb.words == rb0);
          break;
        }
        case 11: {  // zero-length write: no data moves, the WQE completes
          REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_rdma_write(s, la.local(i, 0), rb.remote(j));
                  }) == vg::status::ok);
          CHECK(rb.words == rb0);
          break;
        }
      }
    }
    CHECK(n.state(p.a->qpn()) == vm::qp_state::rts);
    CHECK(n.stats().error_cqes == 0);
    CHECK(n.stats().atomics == 30);
  }
}

TEST_CASE("verbs_gpu model: error CQEs, error state and flush", "[verbs][model][error]") {
  // Each case: a fresh QP pair, one good write, then the faulty WQE, then two more good writes
  // that must be flushed. The poster sees status::error, never a hang or "not yet".
  for (auto mode : {vg::cq_mode::collapsed, vg::cq_mode::owner_bit}) {
    for (int c = 0; c < 13; ++c) {
      vm::nic n;
      qp_pair p(n, 5, mode, 3);
      auto& sq = p.sq();
      host_buffer la(n, p.pd_a, 64), rb(n, p.pd_b, 64);
      host_buffer ro(n, p.pd_b, 64, vm::remote_read);       // responder memory without write/atomic
      host_buffer nolocal(n, p.pd_a, 64, vm::remote_read);  // local memory without LOCAL_WRITE
      host_buffer other_pd(n, p.pd_b, 64);                  // lkey from the wrong PD for A
      for (auto& w : la.words) w = 0x5555;
      REQUIRE(run_one(n, sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_rdma_write(s, la.local(0, 8), rb.remote(0));
              }) == vg::status::ok);
      error_case ec{};
      auto bad = [&](vg::wqe_slot const& s, std::uint32_t) -> std::uint32_t {
        switch (c) {
          case 0:
            ec = {"bad lkey", vg::cqe_syndrome::local_prot_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, {la.addr(0), 8, 0xdead00}, rb.remote(1));
          case 1:
            ec = {"lkey of another PD", vg::cqe_syndrome::local_prot_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, other_pd.local(0, 8), rb.remote(1));
          case 2:
            ec = {"local out of bounds", vg::cqe_syndrome::local_prot_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, la.local(60, 64), rb.remote(1));
          case 3:
            ec = {"READ into memory without LOCAL_WRITE", vg::cqe_syndrome::local_prot_err, vg::opcode::rdma_read};
            return vg::build_rdma_read(s, nolocal.local(0, 8), rb.remote(1));
          case 4:
            ec = {"bad rkey", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, la.local(0, 8), {rb.addr(1), 0xbad0});
          case 5:
            ec = {"remote out of bounds", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, la.local(0, 16), rb.remote(63));
          case 6:
            ec = {"write to read-only", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
            return vg::build_rdma_write(s, la.local(0, 8), ro.remote(0));
          case 7:
            ec = {"atomic without REMOTE_ATOMIC", vg::cqe_syndrome::remote_access_err, vg::opcode::atomic_fa};
            return vg::build_atomic_fa(s, la.local(0, 8), ro.remote(0), 1);
          case 8:
            ec = {"misaligned atomic", vg::cqe_syndrome::remote_inval_req_err, vg::opcode::atomic_fa};
            return vg::build_atomic_fa(s, la.local(0, 8), {rb.addr(1) + 4, rb.key.rkey}, 1);
          case 9: {  // malformed: wrong QPN in the control segment
            ec = {"wrong QPN", vg::cqe_syndrome::local_qp_op_err, vg::opcode::nop};
            vg::wqe_slot t = s;
            t.qpn = s.qpn ^ 0x10;
            return vg::build_nop(t);
          }
          case 10: {  // malformed: wrong wqe index
            ec = {"wrong wqe index", vg::cqe_syndrome::local_qp_op_err, vg::opcode::nop};
            vg::wqe_slot t = s;
            vg::ctrl_seg const ctrl =
                vg::make_ctrl_seg(static_cast<std::uint16_t>(s.index + 1), 0, 0, s.qpn, s.fm_ce_se, 1);
            t.put(0, ctrl);
            return 1;
          }
          case 11: {  // malformed: unknown opcode
            ec = {"unknown opcode", vg::cqe_syndrome::local_qp_op_err, static_cast<vg::opcode>(0x3e)};
            s.put(0, vg::make_ctrl_seg(static_cast<std::uint16_t>(s.index), 0x3e, 0, s.qpn, s.fm_ce_se, 1));
            return 1;
          }
          default:  // SEND: no receive queue in the model
            ec = {"SEND without a receive queue", vg::cqe_syndrome::rnr_retry_exc_err, vg::opcode::send};
            return vg::build_send(s, la.local(0, 8));
        }
      };
      std::uint64_t const bad_idx = post_bad_then_two_writes(sq, bad, la, rb);
      n.progress();
      INFO(ec.name << (mode == vg::cq_mode::collapsed ? " (collapsed CQ)" : " (owner-bit CQ)"));
      // Owner-bit CQ: the error CQE comes first and is recorded; collapsed CQ: the newest entry is a
      // flush error, recorded as such. Either way the queue reports error, not "not yet".
      vg::status st = vg::status::pending;
      for (int t = 0; t < 10 && st != vg::status::error; ++t) st = sq.poll();
      REQUIRE(st == vg::status::error);
      REQUIRE(sq.has_error());
      vg::cq_error const e = sq.last_error();
      CHECK(e.opcode == vg::cqe_opcode::req_err);
      if (mode == vg::cq_mode::owner_bit) {
        CHECK(e.syndrome == static_cast<std::uint8_t>(ec.syndrome));
        CHECK(e.wqe_counter == static_cast<std::uint16_t>(bad_idx));
        CHECK(e.wqe_opcode == static_cast<std::uint8_t>(ec.wqe_opcode));
        CHECK(e.vendor_syndrome == 0x51);
        CHECK(std::string(e.syndrome_str()) == vg::cqe_syndrome_name(static_cast<std::uint8_t>(ec.syndrome)));
      } else {
        CHECK(e.syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::wr_flush_err));
        CHECK(std::string(e.syndrome_str()) == "WR_FLUSH_ERR");
        CHECK(e.wqe_counter == static_cast<std::uint16_t>(bad_idx + 2));
      }
      CHECK(n.state(p.a->qpn()) == vm::qp_state::error);
      CHECK(n.stats().error_cqes == 3);  // the faulty WQE and two flushed ones
      CHECK(n.stats().flushed == 2);
      CHECK(rb.words[2] == 0);  // flushed writes moved no data
      CHECK(rb.words[3] == 0);
      CHECK(rb.words[0] == 0x5555);
      // Everything afterwards reports the error at once.
      CHECK(sq.quiet() == vg::status::error);
      CHECK(sq.wait_complete(bad_idx) == vg::status::error);
      CHECK(post_one(sq, 1, [](vg::wqe_slot const& s, std::uint32_t) { return vg::build_nop(s); }) ==
            vg::status::error);
    }
  }
}

TEST_CASE("verbs_gpu model: error CQE seen by a waiting poster (collapsed CQ, single error)", "[verbs][model][error]") {
  vm::nic n;
  qp_pair p(n, 5, vg::cq_mode::collapsed);
  host_buffer la(n, p.pd_a, 8), rb(n, p.pd_b, 8);
  auto& sq = p.sq();
  n.start();
  std::uint64_t idx = 0;
  REQUIRE(post_one(
              sq, 1,
              [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_rdma_write(s, la.local(0, 8), {rb.addr(0), rb.key.rkey ^ 0x1000});
              },
              vg::post_flags::none, &idx) == vg::status::ok);
  // The waiting poster rings a NOP after 1 ms without a completion (send_queue.cuh's
  // nop_patience_ns), and in a collapsed CQ that NOP's flush CQE would replace the error CQE: the
  // design's stated limit, for a NIC that takes over a millisecond to answer. The model's thread
  // can take that long on a loaded machine (CI builds in parallel), so the wait starts once the
  // model has written its error CQE: what is tested is how the waiting poster reports it.
  auto const give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (n.stats().error_cqes == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  REQUIRE(n.stats().error_cqes == 1);
  CHECK(sq.wait_complete(idx) == vg::status::error);
  n.stop();
  auto const e = sq.last_error();
  CHECK(e.syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::remote_access_err));
  CHECK(std::string(e.syndrome_str()) == "REMOTE_ACCESS_ERR");
  CHECK(std::string(e.opcode_str()) == "REQ_ERR");
  CHECK(std::string(e.wqe_opcode_str()) == "RDMA_WRITE");
  CHECK(e.wqe_counter == idx);
}

TEST_CASE("verbs_gpu model: dropped, duplicated and delayed doorbells, slow completions", "[verbs][model][faults]") {
  SECTION("dropped doorbells: later doorbells cover the WQEs; nothing runs twice") {
    vm::nic_config cfg;
    cfg.fault.drop_doorbell = 0.5;
    cfg.fault.seed = 42;
    vm::nic n(cfg);
    qp_pair p(n, 6, vg::cq_mode::owner_bit, 4);
    auto& sq = p.sq();
    host_buffer la(n, p.pd_a, 8), rb(n, p.pd_b, 8);
    constexpr int posts = 200;
    for (int k = 0; k < posts; ++k) {
      REQUIRE(post_one(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_atomic_fa(s, la.local(0, 8), rb.remote(0), 1);
              }) == vg::status::ok);
      n.progress();
      sq.poll();
    }
    // Recover from a dropped last doorbell the way a producer must: flush again (a NOP rings).
    std::uint64_t nop = 0;
    for (int tries = 0; tries < 64 && !(p.a->counters().consumer > nop && nop != 0); ++tries) {
      REQUIRE(sq.flush(&nop) == vg::status::ok);
      n.progress();
      while (sq.poll() == vg::status::ok) {
      }
    }
    REQUIRE(p.a->counters().consumer > nop);
    CHECK(rb.words[0] == posts);
    auto const st = n.stats();
    CHECK(st.doorbells_dropped > 20);
    CHECK(st.atomics == posts);
  }
  SECTION("dropped doorbells: waits for space and for completions ring again on their own") {
    vm::nic_config cfg;
    cfg.fault.drop_doorbell = 0.5;
    cfg.fault.seed = 11;
    vm::nic n(cfg);
    // A 16-WQEBB ring: most posts wait for space behind a dropped doorbell.
    qp_pair p(n, 4, vg::cq_mode::collapsed);
    auto& sq = p.sq();
    host_buffer la(n, p.pd_a, 8), rb(n, p.pd_b, 8);
    n.start();
    constexpr int posts = 600;
    for (int k = 0; k < posts; ++k) {
      std::uint64_t idx = 0;
      REQUIRE(post_one(
                  sq, 1,
                  [&](vg::wqe_slot const& s, std::uint32_t) {
                    return vg::build_atomic_fa(s, la.local(0, 8), rb.remote(0), 1);
                  },
                  vg::post_flags::none, &idx) == vg::status::ok);
      if (k % 50 == 49) REQUIRE(sq.wait_complete(idx) == vg::status::ok);
    }
    REQUIRE(sq.quiet() == vg::status::ok);
    n.stop();
    CHECK(rb.words[0] == posts);
    auto const st = n.stats();
    CHECK(st.doorbells_dropped > 20);
    CHECK(st.atomics == posts);
  }
  SECTION("duplicated doorbells are harmless") {
    vm::nic_config cfg;
    cfg.fault.duplicate_doorbell = 1.0;
    vm::nic n(cfg);
    qp_pair p(n, 6, vg::cq_mode::collapsed);
    auto& sq = p.sq();
    host_buffer la(n, p.pd_a, 8), rb(n, p.pd_b, 8);
    for (int k = 0; k < 100; ++k) {
      REQUIRE(post_one(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_atomic_fa(s, la.local(0, 8), rb.remote(0), 3);
              }) == vg::status::ok);
      n.progress();
    }
    n.start();
    REQUIRE(sq.quiet() == vg::status::ok);
    n.stop();
    CHECK(rb.words[0] == 300);
    CHECK(n.stats().doorbells_duplicated >= 100);
    CHECK(n.stats().atomics == 100);
  }
  SECTION("delayed doorbells and slow completions: posters wait, results arrive") {
    vm::nic_config cfg;
    cfg.fault.doorbell_delay = 300us;
    cfg.fault.completion_delay = 200us;
    vm::nic n(cfg);
    qp_pair p(n, 4, vg::cq_mode::owner_bit, 2);  // small ring and CQ: back-pressure both ways
    auto& sq = p.sq();
    host_buffer la(n, p.pd_a, 64), rb(n, p.pd_b, 64);
    for (std::size_t k = 0; k < 64; ++k) la.words[k] = k * 7 + 1;
    n.start();
    auto const t0 = std::chrono::steady_clock::now();
    for (std::uint32_t k = 0; k < 40; ++k) {
      REQUIRE(post_one(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_rdma_write(s, la.local(k, 8), rb.remote(k));
              }) == vg::status::ok);
    }
    REQUIRE(sq.quiet() == vg::status::ok);
    auto const elapsed = std::chrono::steady_clock::now() - t0;
    n.stop();
    for (std::size_t k = 0; k < 40; ++k) REQUIRE(rb.words[k] == k * 7 + 1);
    CHECK(elapsed >= 41 * 200us);  // every signaled WQE's CQE was delayed
  }
}
