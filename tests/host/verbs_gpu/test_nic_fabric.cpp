// The NIC model's fabric: several nics in one process, each listening on its own abstract unix
// socket, QPs connected across them with connect_remote(). Data, atomics and errors are checked
// against references computed here, byte by byte; the responder side runs in the responder nic's
// server (its stats count what it served).
#include <catch2/catch.hpp>

#include "fixture.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace verbs_test;
using namespace std::chrono_literals;

namespace {

std::string unique_address() {
  static std::atomic<int> counter{0};
  return "gpucomm-fabric-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

/// One nic with everything it reads: its queue pairs and buffers live here so that the nic
/// (stopped and destroyed first) never outlives the memory its threads touch.
struct node {
  std::string address = unique_address();
  std::vector<std::unique_ptr<vm::host_queue_pair>> qps;
  std::vector<std::unique_ptr<host_buffer>> bufs;
  std::unique_ptr<vm::nic> nic;
  std::uint32_t pd = 0;

  explicit node(vm::nic_config cfg = {}, bool start = true) : nic(std::make_unique<vm::nic>(cfg)) {
    nic->listen(address);
    pd = nic->alloc_pd();
    if (start) nic->start();
  }
  node(node const&) = delete;
  node& operator=(node const&) = delete;
  ~node() { nic.reset(); }

  vm::host_queue_pair& qp(vg::cq_mode mode = vg::cq_mode::owner_bit, std::uint32_t log_depth = 6,
                          std::uint32_t log_ncqe = 4) {
    qps.push_back(std::make_unique<vm::host_queue_pair>(*nic, pd, log_depth, mode, log_ncqe));
    return *qps.back();
  }
  host_buffer& buf(std::size_t words, std::uint32_t access = vm::all_access, std::uint32_t in_pd = 0) {
    bufs.push_back(std::make_unique<host_buffer>(*nic, in_pd == 0 ? pd : in_pd, words, access));
    return *bufs.back();
  }
};

/// Connects QP a of node A and QP b of node B across the fabric, both ways.
void connect_across(node& A, vm::host_queue_pair& a, node& B, vm::host_queue_pair& b) {
  A.nic->connect_remote(a.qpn(), B.address, b.qpn());
  B.nic->connect_remote(b.qpn(), A.address, a.qpn());
}

/// Polls until the WQE at `idx` completed or the queue reports an error; bounded, so a lost
/// completion fails the test instead of hanging it (send_queue's own waits are bounded only in
/// debug builds).
vg::status wait_for(vg::send_queue const& sq, std::uint64_t idx, std::chrono::seconds limit = 30s) {
  auto const deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (sq.counters->consumer > idx) return vg::status::ok;
    if (sq.poll() == vg::status::error) return vg::status::error;
    if (std::chrono::steady_clock::now() > deadline) return vg::status::timeout;
    std::this_thread::yield();
  }
}

/// Posts one WQE of `wqebbs` WQEBBs and waits for it.
template <class F>
vg::status run(vg::send_queue const& sq, std::uint32_t wqebbs, F f) {
  std::uint64_t idx = 0;
  vg::status const st = post_one(sq, wqebbs, f, vg::post_flags::none, &idx);
  if (st != vg::status::ok) return st;
  return wait_for(sq, idx);
}

/// RDMA WRITE gathering from several local buffers (DS 2 + n).
std::uint32_t build_gather_write(vg::wqe_slot const& s, std::vector<vg::local_buf> const& src, vg::remote_buf dst) {
  auto const ds = static_cast<std::uint8_t>(2 + src.size());
  s.put(0, s.ctrl(vg::opcode::rdma_write, ds));
  s.put(1, vg::make_raddr_seg(dst.addr, dst.rkey));
  for (std::size_t k = 0; k < src.size(); ++k) {
    s.put(static_cast<std::uint32_t>(2 + k), vg::make_data_seg(src[k].length, src[k].lkey, src[k].addr));
  }
  return ds;
}
/// RDMA READ scattering into several local buffers (DS 2 + n).
std::uint32_t build_scatter_read(vg::wqe_slot const& s, std::vector<vg::local_buf> const& dst, vg::remote_buf src) {
  auto const ds = static_cast<std::uint8_t>(2 + dst.size());
  s.put(0, s.ctrl(vg::opcode::rdma_read, ds));
  s.put(1, vg::make_raddr_seg(src.addr, src.rkey));
  for (std::size_t k = 0; k < dst.size(); ++k) {
    s.put(static_cast<std::uint32_t>(2 + k), vg::make_data_seg(dst[k].length, dst[k].lkey, dst[k].addr));
  }
  return ds;
}

unsigned char* bytes(host_buffer& b) { return reinterpret_cast<unsigned char*>(b.words.data()); }
std::size_t size_bytes(host_buffer const& b) { return b.words.size() * 8; }
void randomize(host_buffer& b, std::mt19937_64& rng) {
  for (auto& w : b.words) w = rng();
}

/// Masked fetch-add reference, independent of the model: a set boundary bit i ends a field at bit
/// i; each field is added on its own, modulo its width, from the lowest bit up.
template <class T>
T ref_masked_add(T x, T y, T boundary) {
  constexpr int bits = sizeof(T) * 8;
  T result = 0;
  int lo = 0;
  for (int hi = 0; hi < bits; ++hi) {
    bool const field_end = ((boundary >> hi) & 1u) != 0 || hi == bits - 1;
    if (!field_end) continue;
    int const width = hi - lo + 1;
    T const mask = width == bits ? static_cast<T>(~T{0}) : static_cast<T>((T{1} << width) - 1);
    T const sum = static_cast<T>((((x >> lo) & mask) + ((y >> lo) & mask)) & mask);
    result = static_cast<T>(result | static_cast<T>(sum << lo));
    lo = hi + 1;
  }
  return result;
}

}  // namespace

TEST_CASE("verbs_gpu fabric: RDMA WRITE (gather, inline) and READ (scatter) across nics", "[verbs][model][fabric]") {
  node A, B;
  auto& qa = A.qp();
  auto& qb = B.qp();
  connect_across(A, qa, B, qb);
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto& la = A.buf((mib + 4096) / 8);
  auto& rb = B.buf((mib + 4096) / 8);
  std::mt19937_64 rng(7);

  SECTION("gather WRITE and scatter READ, 0 bytes to 1 MiB") {
    for (std::size_t const size : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{100},
                                   std::size_t{4096}, std::size_t{65537}, mib}) {
      INFO("size " << size);
      // --- WRITE, gathered from three pieces of A's buffer into B's at an unaligned offset.
      randomize(la, rng);
      randomize(rb, rng);
      std::vector<unsigned char> const a0(bytes(la), bytes(la) + size_bytes(la));
      std::vector<unsigned char> const b0(bytes(rb), bytes(rb) + size_bytes(rb));
      std::size_t const dst_off = rng() % 64;
      std::size_t const cut1 = size / 3, cut2 = size - size / 4;  // pieces [0,cut1) [cut1,cut2) [cut2,size)
      std::size_t const src_off[3] = {rng() % 512, 1024 + rng() % 512, 2048 + rng() % 512};
      std::size_t const piece[3] = {cut1, cut2 - cut1, size - cut2};
      // Pieces from anywhere in A, non-overlapping: the big one goes last in the buffer.
      std::vector<vg::local_buf> src;
      std::vector<unsigned char> expect_payload;
      std::size_t at = 0;
      for (int k = 0; k < 3; ++k) {
        std::size_t const off = size < 4096 ? src_off[k] : at;
        src.push_back({la.addr() + off, static_cast<std::uint32_t>(piece[k]), la.key.lkey});
        expect_payload.insert(expect_payload.end(), a0.begin() + static_cast<std::ptrdiff_t>(off),
                              a0.begin() + static_cast<std::ptrdiff_t>(off + piece[k]));
        at += piece[k];
      }
      REQUIRE(expect_payload.size() == size);
      vg::remote_buf const dst{rb.addr() + dst_off, rb.key.rkey};
      REQUIRE(run(qa.sq(), 2, [&](vg::wqe_slot const& s, std::uint32_t) { return build_gather_write(s, src, dst); }) ==
              vg::status::ok);
      for (std::size_t i = 0; i < size_bytes(rb); ++i) {
        unsigned char const want = (i >= dst_off && i < dst_off + size) ? expect_payload[i - dst_off] : b0[i];
        if (bytes(rb)[i] != want)
          FAIL_CHECK("WRITE: byte " << i << " is " << int(bytes(rb)[i]) << ", want " << int(want));
      }
      REQUIRE(std::equal(bytes(la), bytes(la) + size_bytes(la), a0.begin()));  // the source is untouched

      // --- READ, B's bytes at an unaligned offset scattered into three pieces of A's buffer.
      randomize(la, rng);
      randomize(rb, rng);
      std::vector<unsigned char> const a1(bytes(la), bytes(la) + size_bytes(la));
      std::vector<unsigned char> const b1(bytes(rb), bytes(rb) + size_bytes(rb));
      std::size_t const src_remote = rng() % 64;
      std::vector<vg::local_buf> dsts;
      std::vector<std::size_t> dst_offs;
      at = 0;
      for (int k = 0; k < 3; ++k) {
        std::size_t const off = size < 4096 ? src_off[k] : at;
        dsts.push_back({la.addr() + off, static_cast<std::uint32_t>(piece[k]), la.key.lkey});
        dst_offs.push_back(off);
        at += piece[k];
      }
      REQUIRE(run(qa.sq(), 2, [&](vg::wqe_slot const& s, std::uint32_t) {
                return build_scatter_read(s, dsts, {rb.addr() + src_remote, rb.key.rkey});
              }) == vg::status::ok);
      std::vector<unsigned char> expect_a = a1;
      std::size_t from = src_remote;
      for (int k = 0; k < 3; ++k) {
        std::copy_n(b1.begin() + static_cast<std::ptrdiff_t>(from), piece[k],
                    expect_a.begin() + static_cast<std::ptrdiff_t>(dst_offs[k]));
        from += piece[k];
      }
      for (std::size_t i = 0; i < size_bytes(la); ++i) {
        if (bytes(la)[i] != expect_a[i]) FAIL_CHECK("READ: byte " << i);
      }
      REQUIRE(std::equal(bytes(rb), bytes(rb) + size_bytes(rb), b1.begin()));  // the source is untouched
    }
    CHECK(B.nic->stats().served == 16);  // B's server did the responder's half of every WQE
    CHECK(A.nic->stats().remote_ops == 16);
  }

  SECTION("inline writes of every size class up to the maximum") {
    for (std::uint32_t const len : {0u, 1u, 5u, 12u, 13u, 16u, 28u, 29u, 100u, vg::max_inline_write}) {
      INFO("inline length " << len);
      randomize(rb, rng);
      std::vector<unsigned char> const b0(bytes(rb), bytes(rb) + 512);
      std::vector<unsigned char> payload(len);
      for (auto& c : payload) c = static_cast<unsigned char>(rng());
      std::size_t const off = 1 + rng() % 63;
      std::uint32_t const wqebbs = vg::wqebbs_for_ds(vg::inline_write_ds(len));
      REQUIRE(run(qa.sq(), wqebbs, [&](vg::wqe_slot const& s, std::uint32_t) {
                return vg::build_rdma_write_inline(s, payload.data(), len, {rb.addr() + off, rb.key.rkey});
              }) == vg::status::ok);
      for (std::size_t i = 0; i < 512; ++i) {
        unsigned char const want = (i >= off && i < off + len) ? payload[i - off] : b0[i];
        REQUIRE(bytes(rb)[i] == want);
      }
    }
  }
  SECTION("the other direction: B writes into and reads from A") {
    auto& lb = B.buf(64);
    auto& ra = A.buf(64);
    randomize(lb, rng);
    randomize(ra, rng);
    auto const lb0 = lb.words, ra0 = ra.words;
    REQUIRE(run(qb.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, lb.local(0, 32 * 8), ra.remote(16));
            }) == vg::status::ok);
    for (std::size_t k = 0; k < 64; ++k) REQUIRE(ra.words[k] == ((k >= 16 && k < 48) ? lb0[k - 16] : ra0[k]));
    REQUIRE(run(qb.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_read(s, lb.local(40, 8 * 8), ra.remote(0));
            }) == vg::status::ok);
    for (std::size_t k = 0; k < 64; ++k) REQUIRE(lb.words[k] == ((k >= 40 && k < 48) ? ra.words[k - 40] : lb0[k]));
  }
  SECTION("a zero-length write checks no rkey") {
    REQUIRE(run(qa.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, la.local(0, 0), {rb.addr(), rb.key.rkey ^ 0x5000});
            }) == vg::status::ok);
  }
  SECTION("a nic reaching its own server, both QPs in it") {
    auto& q1 = A.qp();
    auto& q2 = A.qp();
    A.nic->connect_remote(q1.qpn(), A.address, q2.qpn());
    auto& src = A.buf(16);
    auto& dstb = A.buf(16);
    randomize(src, rng);
    REQUIRE(run(q1.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, src.local(0, 128), dstb.remote(0));
            }) == vg::status::ok);
    CHECK(dstb.words == src.words);
  }
  CHECK(A.nic->state(qa.qpn()) == vm::qp_state::rts);
  CHECK(A.nic->stats().error_cqes == 0);
}

TEST_CASE("verbs_gpu fabric: atomics across nics (8-byte CS/FA, masked CS/FA on 4 and 8 bytes)",
          "[verbs][model][fabric]") {
  for (bool const be32 : {true, false}) {
    vm::nic_config cfg;
    cfg.fetch32_big_endian = be32;  // the requester's setting decides how 4-byte results land
    node A(cfg), B;
    auto& qa = A.qp(vg::cq_mode::collapsed);
    auto& qb = B.qp();
    connect_across(A, qa, B, qb);
    auto& la = A.buf(64);
    auto& rb = B.buf(64);
    auto& sq = qa.sq();
    std::mt19937_64 rng(be32 ? 11 : 12);
    std::uint64_t const atomics0 = B.nic->stats().atomics;
    int n_atomics = 0;
    for (int round = 0; round < 120; ++round) {
      randomize(la, rng);
      randomize(rb, rng);
      auto const la0 = la.words, rb0 = rb.words;
      std::size_t const i = rng() % 64, j = rng() % 64;
      std::uint64_t const v1 = rng(), v2 = rng(), v3 = rng(), v4 = rng();
      bool const hit = (rng() & 1) != 0;
      std::uint64_t want_old = rb0[j], want_new = rb0[j];
      vg::status st = vg::status::ok;
      auto* r32 = reinterpret_cast<std::uint32_t*>(rb.words.data());
      auto const* r32_0 = reinterpret_cast<std::uint32_t const*>(rb0.data());
      std::size_t const w = 2 * j + (rng() & 1);
      vg::remote_buf const dst32{reinterpret_cast<std::uint64_t>(r32 + w), rb.key.rkey};
      std::uint32_t want32_old = r32_0[w], want32_new = r32_0[w];
      bool four = false;
      INFO("round " << round);
      switch (round % 6) {
        case 0: {  // CAS, hit or miss
          std::uint64_t const cmp = hit ? rb0[j] : rb0[j] ^ (1ull << (v3 % 64));
          want_new = hit ? v2 : rb0[j];
          st = run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_atomic_cs(s, la.local(i, 8), rb.remote(j), cmp, v2);
          });
          break;
        }
        case 1: {  // fetch-add, wrapping
          want_new = rb0[j] + v1;
          st = run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_atomic_fa(s, la.local(i, 8), rb.remote(j), v1);
          });
          break;
        }
        case 2: {  // masked fetch-add, 8 bytes: plain add, xor, random fields
          std::uint64_t const boundary = (round % 3 == 0) ? 0 : (round % 3 == 1) ? ~0ull : v2;
          want_new = ref_masked_add<std::uint64_t>(rb0[j], v1, boundary);
          if (boundary == 0) REQUIRE(want_new == rb0[j] + v1);
          if (boundary == ~0ull) REQUIRE(want_new == (rb0[j] ^ v1));
          st = run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_masked_fa64(s, la.local(i, 8), rb.remote(j), v1, boundary);
          });
          break;
        }
        case 3: {  // masked CAS, 8 bytes: the compare sees only cmp_mask's bits, the swap only swap_mask's
          std::uint64_t const cmp_mask = v3, swap_mask = v4;
          std::uint64_t const cmp = hit ? ((rb0[j] & cmp_mask) | (v1 & ~cmp_mask)) : rb0[j] ^ (cmp_mask & -cmp_mask);
          bool const match = ((rb0[j] ^ cmp) & cmp_mask) == 0;
          if (cmp_mask != 0) REQUIRE(match == hit);
          want_new = match ? ((rb0[j] & ~swap_mask) | (v2 & swap_mask)) : rb0[j];
          st = run(sq, 2, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_masked_cs64(s, la.local(i, 8), rb.remote(j), cmp, v2, cmp_mask, swap_mask);
          });
          break;
        }
        case 4: {  // masked fetch-add, 4 bytes
          four = true;
          auto const add = static_cast<std::uint32_t>(v1), boundary = static_cast<std::uint32_t>(v2 >> (round % 33));
          want32_new = ref_masked_add<std::uint32_t>(r32_0[w], add, boundary);
          st = run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_masked_fa32(s, la.local(i, 4), dst32, add, boundary);
          });
          break;
        }
        default: {  // masked CAS, 4 bytes
          four = true;
          auto const cmp_mask = static_cast<std::uint32_t>(v3), swap_mask = static_cast<std::uint32_t>(v4);
          std::uint32_t const old = r32_0[w];
          std::uint32_t const cmp = hit ? old : old ^ (cmp_mask & (0u - cmp_mask));
          bool const match = ((old ^ cmp) & cmp_mask) == 0;
          want32_new = match ? ((old & ~swap_mask) | (static_cast<std::uint32_t>(v2) & swap_mask)) : old;
          st = run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
            return vg::build_masked_cs32(s, la.local(i, 4), dst32, cmp, static_cast<std::uint32_t>(v2), cmp_mask,
                                         swap_mask);
          });
          break;
        }
      }
      REQUIRE(st == vg::status::ok);
      ++n_atomics;
      if (four) {
        auto const got = static_cast<std::uint32_t>(la.words[i]);  // the low 4 bytes (little-endian host)
        CHECK((be32 ? vg::fetched32(got) : got) == want32_old);
        CHECK(static_cast<std::uint32_t>(la.words[i] >> 32) == static_cast<std::uint32_t>(la0[i] >> 32));
        for (std::size_t k = 0; k < 128; ++k) REQUIRE(r32[k] == (k == w ? want32_new : r32_0[k]));
      } else {
        CHECK(la.words[i] == want_old);
        for (std::size_t k = 0; k < 64; ++k) REQUIRE(rb.words[k] == (k == j ? want_new : rb0[k]));
      }
      for (std::size_t k = 0; k < 64; ++k) {
        if (k != i) REQUIRE(la.words[k] == la0[k]);
      }
    }
    CHECK(B.nic->stats().atomics - atomics0 == static_cast<std::uint64_t>(n_atomics));  // counted by the responder
    CHECK(A.nic->stats().atomics == 0);
    CHECK(A.nic->stats().remote_ops == static_cast<std::uint64_t>(n_atomics));
  }
}

TEST_CASE("verbs_gpu fabric: responder errors come back as the requester's error CQEs", "[verbs][model][fabric]") {
  node A, B;
  auto& la = A.buf(64);
  auto& rb = B.buf(64);
  auto& ro = B.buf(64, vm::remote_read);                          // no REMOTE_WRITE, no REMOTE_ATOMIC
  auto& other_pd = B.buf(64, vm::all_access, B.nic->alloc_pd());  // rkey valid at B, wrong PD
  auto& a_own = A.buf(64);                                        // rkey valid at A only
  for (auto& w : la.words) w = 0x5555;
  for (int c = 0; c < 11; ++c) {
    auto& qa = A.qp(vg::cq_mode::owner_bit, 5, 3);
    auto& qb = B.qp();
    connect_across(A, qa, B, qb);
    auto& sq = qa.sq();
    std::fill(rb.words.begin(), rb.words.end(), 0);
    REQUIRE(run(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, la.local(0, 8), rb.remote(0));
            }) == vg::status::ok);
    CHECK(rb.words[0] == 0x5555);
    if (c == 10) A.nic->connect_remote(qa.qpn(), B.address, 0xabcdef);  // no such QP at B
    error_case ec{};
    auto bad = [&](vg::wqe_slot const& s, std::uint32_t) -> std::uint32_t {
      switch (c) {
        case 0:
          ec = {"bad rkey", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
          return vg::build_rdma_write(s, la.local(0, 8), {rb.addr(1), rb.key.rkey ^ 0x7000});
        case 1:
          ec = {"rkey of another PD at the responder", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
          return vg::build_rdma_write(s, la.local(0, 8), other_pd.remote(0));
        case 2:
          ec = {"rkey of the requester's own nic", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_read};
          return vg::build_rdma_read(s, la.local(0, 8), a_own.remote(0));
        case 3:
          ec = {"remote write out of bounds", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
          return vg::build_rdma_write(s, la.local(0, 16), rb.remote(63));
        case 4:
          ec = {"remote read out of bounds", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_read};
          return vg::build_rdma_read(s, la.local(0, 16), {rb.addr() - 8, rb.key.rkey});
        case 5:
          ec = {"write to read-only", vg::cqe_syndrome::remote_access_err, vg::opcode::rdma_write};
          return vg::build_rdma_write(s, la.local(0, 8), ro.remote(0));
        case 6:
          ec = {"atomic without REMOTE_ATOMIC", vg::cqe_syndrome::remote_access_err, vg::opcode::atomic_fa};
          return vg::build_atomic_fa(s, la.local(0, 8), ro.remote(0), 1);
        case 7:
          ec = {"misaligned 8-byte atomic", vg::cqe_syndrome::remote_inval_req_err, vg::opcode::atomic_cs};
          return vg::build_atomic_cs(s, la.local(0, 8), {rb.addr(1) + 4, rb.key.rkey}, 0, 1);
        case 8:
          ec = {"misaligned 4-byte masked atomic", vg::cqe_syndrome::remote_inval_req_err,
                vg::opcode::atomic_masked_fa};
          return vg::build_masked_fa32(s, la.local(0, 4), {rb.addr(1) + 2, rb.key.rkey}, 1, 0);
        case 9:
          ec = {"RDMA WRITE with immediate to a remote peer", vg::cqe_syndrome::rnr_retry_exc_err,
                vg::opcode::rdma_write_imm};
          return vg::build_rdma_write_imm(s, la.local(0, 8), rb.remote(1), 7);
        default:
          ec = {"responder QP that does not exist", vg::cqe_syndrome::transport_retry_exc_err, vg::opcode::rdma_write};
          return vg::build_rdma_write(s, la.local(0, 8), rb.remote(1));
      }
    };
    std::uint64_t const flushed0 = A.nic->stats().flushed;
    std::uint64_t const bad_idx = post_bad_then_two_writes(sq, bad, la, rb);
    INFO(ec.name);
    REQUIRE(wait_for(sq, bad_idx + 2) == vg::status::error);
    vg::cq_error const e = sq.last_error();
    CHECK(e.opcode == vg::cqe_opcode::req_err);
    CHECK(e.syndrome == static_cast<std::uint8_t>(ec.syndrome));
    CHECK(e.wqe_counter == static_cast<std::uint16_t>(bad_idx));
    CHECK(e.wqe_opcode == static_cast<std::uint8_t>(ec.wqe_opcode));
    CHECK(A.nic->state(qa.qpn()) == vm::qp_state::error);
    // The two writes behind it are flushed, not executed.
    auto const deadline = std::chrono::steady_clock::now() + 10s;
    while (A.nic->stats().flushed < flushed0 + 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    CHECK(A.nic->stats().flushed == flushed0 + 2);
    CHECK(rb.words[1] == 0);
    CHECK(rb.words[2] == 0);
    CHECK(rb.words[3] == 0);
    CHECK(ro.words == std::vector<std::uint64_t>(64, 0));
    CHECK(sq.quiet() == vg::status::error);
  }
  CHECK(B.nic->state(B.qps.front()->qpn()) == vm::qp_state::rts);  // responders are not moved to error
}

TEST_CASE("verbs_gpu fabric: a failure of the model's own memory access is an error CQE that internal_fault() explains",
          "[verbs][model][fabric]") {
  // Memory marked as GPU memory of a device that exists nowhere: every copy the model makes of it
  // throws (the stream or the device cannot be had, with or without a GPU in the machine).
  constexpr int no_such_device = 1 << 20;
  node A, B;
  auto& la = A.buf(64);
  auto& rb = B.buf(64);
  std::vector<std::uint64_t> remote_words(64, 0), local_words(64, 0x77);
  vm::memory_key const remote_key =
      B.nic->register_memory(B.pd, remote_words.data(), 64 * 8, vm::all_access, nullptr, no_such_device);
  vm::memory_key const local_key =
      A.nic->register_memory(A.pd, local_words.data(), 64 * 8, vm::all_access, nullptr, no_such_device);
  CHECK(A.nic->internal_fault().empty());
  CHECK(B.nic->internal_fault().empty());
  for (int c = 0; c < 2; ++c) {
    auto& qa = A.qp(vg::cq_mode::owner_bit, 5, 3);
    auto& qb = B.qp();
    connect_across(A, qa, B, qb);
    auto& sq = qa.sq();
    error_case ec{};
    auto bad = [&](vg::wqe_slot const& s, std::uint32_t) -> std::uint32_t {
      if (c == 0) {
        ec = {"responder memory the model cannot copy", vg::cqe_syndrome::remote_op_err, vg::opcode::atomic_fa};
        return vg::build_atomic_fa(s, la.local(0, 8),
                                   {reinterpret_cast<std::uint64_t>(remote_words.data()), remote_key.rkey}, 1);
      }
      ec = {"local memory the model cannot copy", vg::cqe_syndrome::local_prot_err, vg::opcode::rdma_write};
      return vg::build_rdma_write(s, {reinterpret_cast<std::uint64_t>(local_words.data()), 8, local_key.lkey},
                                  rb.remote(1));
    };
    std::uint64_t const bad_idx = post_bad_then_two_writes(sq, bad, la, rb);
    INFO(ec.name);
    REQUIRE(wait_for(sq, bad_idx + 2) == vg::status::error);
    vg::cq_error const e = sq.last_error();
    CHECK(e.syndrome == static_cast<std::uint8_t>(ec.syndrome));
    CHECK(e.wqe_counter == static_cast<std::uint16_t>(bad_idx));
    CHECK(e.wqe_opcode == static_cast<std::uint8_t>(ec.wqe_opcode));
    CHECK(remote_words == std::vector<std::uint64_t>(64, 0));
    CHECK(rb.words[1] == 0);
    // The nic whose copy failed says why, naming the CUDA call, its role and the syndrome it
    // reported; the first fault stays (the local one, second, is A's first).
    std::string const at_b = B.nic->internal_fault(), at_a = A.nic->internal_fault();
    INFO("B: " << at_b << "; A: " << at_a);
    CHECK(at_b.find("answering a request of another nic: cuda") == 0);
    CHECK(at_b.find("(completed with REMOTE_OP_ERR)") != std::string::npos);
    if (c == 0) {
      CHECK(at_a.empty());
    } else {
      CHECK(at_a.find("executing a WQE: cuda") == 0);
      CHECK(at_a.find("(completed with LOCAL_PROT_ERR)") != std::string::npos);
    }
  }
}

TEST_CASE("verbs_gpu fabric: one atomicity domain per responder nic, remote and loopback requesters",
          "[verbs][model][fabric]") {
  // B's word is hit by fetch-adds from two QPs of nic A, one QP of nic C (remote), and B's own
  // loopback QP, each driven by its own host thread. Every add must land once, and the fetched
  // values must be exactly 0 .. total-1, each once.
  node A, B, C;
  auto& target = B.buf(1);
  constexpr std::uint32_t per_thread = 3072, batch = 16;  // a whole number of batches
  static_assert(per_thread % batch == 0);
  struct poster {
    vm::host_queue_pair* qp;
    host_buffer* results;
  };
  std::vector<poster> posters;
  for (int k = 0; k < 2; ++k) {
    auto& qa = A.qp(vg::cq_mode::owner_bit, 8, 5);
    auto& qb = B.qp();
    connect_across(A, qa, B, qb);
    posters.push_back({&qa, &A.buf(per_thread)});
  }
  {
    auto& qc = C.qp(vg::cq_mode::owner_bit, 8, 5);
    auto& qb = B.qp();
    connect_across(C, qc, B, qb);
    posters.push_back({&qc, &C.buf(per_thread)});
  }
  {
    auto& ql = B.qp(vg::cq_mode::collapsed, 8);
    B.nic->connect(ql.qpn(), ql.qpn());
    posters.push_back({&ql, &B.buf(per_thread)});
  }
  std::atomic<int> ready{0};
  std::vector<vg::status> results(posters.size(), vg::status::ok);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < posters.size(); ++t) {
    threads.emplace_back([&, t] {
      poster const p = posters[t];
      vg::send_queue const& sq = p.qp->sq();
      ready.fetch_add(1);
      while (ready.load() < static_cast<int>(posters.size())) std::this_thread::yield();
      for (std::uint32_t base = 0; base < per_thread; base += batch) {
        vg::status const st =
            sq.post(vg::detail::one_thread{}, 1, batch, make_builder([&](vg::wqe_slot const& s, std::uint32_t i) {
                      return vg::build_atomic_fa(s, p.results->local(base + i, 8), target.remote(0), 1);
                    }));
        if (st != vg::status::ok) {
          results[t] = st;
          return;
        }
      }
      results[t] = sq.quiet();
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t t = 0; t < posters.size(); ++t) {
    INFO("poster " << t << ": " << posters[t].qp->sq().last_error().syndrome_str());
    REQUIRE(results[t] == vg::status::ok);
  }
  std::uint64_t const total = per_thread * posters.size();
  CHECK(target.words[0] == total);
  std::vector<std::uint64_t> fetched;
  for (auto const& p : posters) fetched.insert(fetched.end(), p.results->words.begin(), p.results->words.end());
  std::sort(fetched.begin(), fetched.end());
  std::vector<std::uint64_t> expect(total);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(fetched == expect);
  CHECK(B.nic->stats().atomics == total);
  CHECK(B.nic->stats().served == 3 * per_thread);
}

TEST_CASE("verbs_gpu fabric: a destroyed responder fails the requester's WQEs, never hangs it",
          "[verbs][model][fabric]") {
  SECTION("the next WQE after the responder is gone") {
    node A;
    auto B = std::make_unique<node>(vm::nic_config{}, false);  // a responder needs no start()
    auto& qa = A.qp();
    auto& qa2 = A.qp();
    auto& qb = B->qp();
    connect_across(A, qa, *B, qb);
    A.nic->connect_remote(qa2.qpn(), B->address, qb.qpn());  // shares qa's connection
    auto& la = A.buf(8);
    auto& rb = B->buf(8);
    la.words[0] = 42;
    REQUIRE(run(qa.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, la.local(0, 8), rb.remote(0));
            }) == vg::status::ok);
    CHECK(rb.words[0] == 42);
    vg::remote_buf const gone = rb.remote(1);
    B.reset();
    auto const t0 = std::chrono::steady_clock::now();
    REQUIRE(run(qa.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_atomic_fa(s, la.local(1, 8), gone, 1);
            }) == vg::status::error);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(qa.sq().last_error().syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::transport_retry_exc_err));
    CHECK(std::string(qa.sq().last_error().syndrome_str()) == "TRANSPORT_RETRY_EXC_ERR");
    CHECK(A.nic->state(qa.qpn()) == vm::qp_state::error);
    // The other QP on the same, now broken, connection fails the same way, at once.
    REQUIRE(run(qa2.sq(), 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_read(s, la.local(2, 8), gone);
            }) == vg::status::error);
    CHECK(qa2.sq().last_error().syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::transport_retry_exc_err));
    CHECK(A.nic->state(qa2.qpn()) == vm::qp_state::error);
    CHECK(la.words[2] == 0);
  }
  SECTION("the responder destroyed while the requester keeps writing and adding") {
    node A;
    auto B = std::make_unique<node>();
    auto& qa = A.qp(vg::cq_mode::owner_bit, 6, 4);
    auto& qb = B->qp();
    connect_across(A, qa, *B, qb);
    auto& la = A.buf(1 << 14);
    auto& rb = B->buf(1 << 14);
    vg::remote_buf const dst = rb.remote(0), word = rb.remote(100);
    std::atomic<std::uint64_t> done{0};
    vg::status last = vg::status::ok;
    std::thread writer([&] {
      auto const deadline = std::chrono::steady_clock::now() + 30s;
      while (std::chrono::steady_clock::now() < deadline) {
        std::uint64_t idx = 0;
        vg::status st =
            qa.sq().post(vg::detail::one_thread{}, 1, 4, make_builder([&](vg::wqe_slot const& s, std::uint32_t i) {
                           return i % 2 == 0 ? vg::build_rdma_write(s, la.local(0, 64 * 1024), dst)
                                             : vg::build_atomic_fa(s, la.local(i, 8), word, 1);
                         }),
                         vg::post_flags::none, &idx);
        if (st == vg::status::ok) st = wait_for(qa.sq(), idx + 3);
        if (st != vg::status::ok) {
          last = st;
          return;
        }
        done.fetch_add(1);
      }
      last = vg::status::timeout;
    });
    while (done.load() < 20) std::this_thread::yield();
    B.reset();
    writer.join();
    CHECK(last == vg::status::error);
    CHECK(qa.sq().last_error().syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::transport_retry_exc_err));
    CHECK(A.nic->state(qa.qpn()) == vm::qp_state::error);
  }
}

TEST_CASE("verbs_gpu fabric: setup errors", "[verbs][model][fabric]") {
  vm::nic_config cfg;
  cfg.connect_timeout = 200ms;
  vm::nic n(cfg);
  std::uint32_t const pd = n.alloc_pd();
  vm::host_queue_pair q(n, pd, 4, vg::cq_mode::collapsed);
  std::string const address = unique_address();
  n.listen(address);
  CHECK_THROWS_AS(n.listen(unique_address()), std::logic_error);
  {
    vm::nic other;
    CHECK_THROWS_AS(other.listen(address), std::runtime_error);  // taken
    CHECK_THROWS_AS(other.listen(""), std::invalid_argument);
    CHECK_THROWS_AS(other.listen(std::string(200, 'x')), std::invalid_argument);
  }
  auto const t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(n.connect_remote(q.qpn(), unique_address(), 1), std::runtime_error);  // nobody listens
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THROWS_AS(n.connect_remote(0x7777, address, 1), std::invalid_argument);  // no such local QP
  n.stop();
  n.listen(address);  // after stop() the nic may listen again, even at the same address

  SECTION("a responder that starts listening late is waited for") {
    vm::nic late;
    std::string const late_address = unique_address();
    std::thread t([&] {
      std::this_thread::sleep_for(100ms);
      late.listen(late_address);
    });
    vm::nic patient;  // default connect_timeout: 20 s
    vm::host_queue_pair pq(patient, patient.alloc_pd(), 4, vg::cq_mode::collapsed);
    CHECK_NOTHROW(patient.connect_remote(pq.qpn(), late_address, 1));
    t.join();
  }
}
