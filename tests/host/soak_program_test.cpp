// The differential soak's generator and host reference (tests/gpu/soak/program.hpp), without a GPU:
// programs are reproducible by seed and valid by the rules of that header (checked by validate(),
// written apart from the generator); the reference gives hand-worked results on small programs;
// a serial execution of generated programs (one valid interleaving, written here independently)
// matches the reference exactly, and one flipped byte, counter or fetched value is reported with
// the op that wrote it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../gpu/soak/program.hpp"

namespace soak = gpucomm::test::soak;
using gpucomm::signal_t;
using soak::op;
using soak::op_kind;

namespace {

/// A hand-made program: npes PEs of one lane each, 256-byte arenas, 4 words of each kind.
soak::program hand_program(int npes, std::uint64_t seed = 5) {
  soak::program prog;
  prog.p.npes = npes;
  prog.p.seed = seed;
  prog.p.data_bytes = 256;
  prog.p.max_bytes = 64;
  prog.p.n64 = prog.p.n32 = prog.p.nsig = 4;
  prog.kinds.assign(static_cast<std::size_t>(npes), soak::lane_kind::block);
  prog.code.assign(static_cast<std::size_t>(npes), std::vector<std::vector<op>>(1));
  prog.nresults.assign(static_cast<std::size_t>(npes), 0);
  prog.epochs.push_back(soak::scope::world);
  return prog;
}
std::uint32_t add(soak::program& prog, int pe, op o) {
  auto& list = prog.code[static_cast<std::size_t>(pe)][0];
  prog.order.push_back(
      {pe, 0, static_cast<std::uint32_t>(list.size()), static_cast<std::uint32_t>(prog.epochs.size() - 1)});
  if (o.result != soak::no_result) o.result = prog.nresults[static_cast<std::size_t>(pe)]++;
  list.push_back(o);
  return static_cast<std::uint32_t>(prog.order.size() - 1);
}
op copy_op(op_kind k, int peer, std::uint64_t src, std::uint64_t dst, std::uint32_t n, std::uint8_t elem = 1) {
  op o;
  o.kind = k;
  o.pe = peer;
  o.src = src;
  o.dst = dst;
  o.n = n;
  o.elem = elem;
  return o;
}
op atomic_op(soak::atom a, int peer, std::uint8_t width, std::uint32_t word, std::uint64_t value,
             std::uint64_t compare = 0) {
  op o;
  o.kind = op_kind::atomic;
  o.aux = static_cast<std::uint8_t>(a);
  o.pe = peer;
  o.elem = width;
  o.index = word;
  o.value = value;
  o.compare = compare;
  if (soak::is_fetching(a)) o.result = 0;  // add() numbers it
  return o;
}

using results_t = std::vector<std::vector<std::uint64_t>>;

std::vector<std::uint8_t> init_data(soak::program const& prog, int pe) {
  return soak::initial_data(prog.p.seed, pe, prog.p.data_bytes);
}

/// The final state of a serial execution of `prog` in its global order, with the results it fetched.
struct serial_state {
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<std::vector<std::uint64_t>> c64;
  std::vector<std::vector<std::uint32_t>> c32;
  std::vector<std::vector<signal_t>> sig;
  results_t results;
  int unsatisfied_waits = 0;
};

serial_state serial_run(soak::program const& prog) {
  serial_state s;
  auto const& p = prog.p;
  for (int pe = 0; pe < p.npes; ++pe) {
    s.data.push_back(init_data(prog, pe));
    s.c64.emplace_back();
    s.c32.emplace_back();
    s.sig.emplace_back();
    for (std::uint32_t i = 0; i < p.n64; ++i) s.c64.back().push_back(soak::initial_c64(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.n32; ++i) s.c32.back().push_back(soak::initial_c32(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.nsig; ++i) s.sig.back().push_back(soak::initial_sig(p.seed, pe, i));
    s.results.emplace_back(prog.nresults[static_cast<std::size_t>(pe)], 0);
  }
  for (std::uint32_t id = 0; id < prog.order.size(); ++id) {
    auto const me = static_cast<std::size_t>(prog.order[id].pe);
    op const& o = prog.at(id);
    auto const peer = static_cast<std::size_t>(o.pe);
    switch (o.kind) {
      case op_kind::put:
      case op_kind::put_nbi:
      case op_kind::put_signal:
      case op_kind::put_signal_nbi:
        std::memmove(s.data[peer].data() + o.dst, s.data[me].data() + o.src, o.bytes());
        if (o.kind == op_kind::put_signal || o.kind == op_kind::put_signal_nbi) {
          if (o.aux == static_cast<std::uint8_t>(gpucomm::signal_op::set))
            s.sig[peer][o.index] = o.value;
          else
            s.sig[peer][o.index] += o.value;
        }
        break;
      case op_kind::get:
      case op_kind::get_nbi:
        std::memmove(s.data[me].data() + o.dst, s.data[peer].data() + o.src, o.bytes());
        break;
      case op_kind::signal:
        if (o.aux == static_cast<std::uint8_t>(gpucomm::signal_op::set))
          s.sig[peer][o.index] = o.value;
        else
          s.sig[peer][o.index] += o.value;
        break;
      case op_kind::flag_set:
        s.sig[peer][o.index] = o.value;
        break;
      case op_kind::wait:
        if (!gpucomm::compare(static_cast<gpucomm::cmp>(o.aux), s.sig[me][o.index], o.value)) ++s.unsatisfied_waits;
        s.results[me][o.result] = s.sig[me][o.index];
        break;
      case op_kind::atomic: {
        auto run = [&](auto& w) {
          using W = std::remove_reference_t<decltype(w)>;
          W const old = w, v = static_cast<W>(o.value);
          switch (static_cast<soak::atom>(o.aux)) {
            case soak::atom::fetch_add:
            case soak::atom::add:
              w = static_cast<W>(old + v);
              break;
            case soak::atom::fetch_and:
              w = old & v;
              break;
            case soak::atom::fetch_or:
              w = old | v;
              break;
            case soak::atom::fetch_xor:
              w = old ^ v;
              break;
            case soak::atom::swap:
            case soak::atom::set:
              w = v;
              break;
            case soak::atom::compare_swap:
              if (old == static_cast<W>(o.compare)) w = v;
              break;
            case soak::atom::fetch:
              break;
          }
          if (o.result != soak::no_result) s.results[me][o.result] = old;
        };
        if (o.elem == 8)
          run(s.c64[peer][o.index]);
        else
          run(s.c32[peer][o.index]);
        break;
      }
      default:
        break;
    }
  }
  return s;
}

soak::params some_params(int npes, std::uint64_t seed) {
  soak::params p;
  p.npes = npes;
  p.seed = seed;
  p.ops = 600;
  p.max_bytes = 8192;
  p.data_bytes = 1 << 16;
  return p;
}

}  // namespace

TEST_CASE("soak programs are reproducible by seed", "[soak]") {
  for (int npes : {1, 2, 4}) {
    auto const a = soak::generate(some_params(npes, 11));
    auto const b = soak::generate(some_params(npes, 11));
    auto const c = soak::generate(some_params(npes, 12));
    REQUIRE(a.order.size() == b.order.size());
    bool same = a.kinds == b.kinds && a.nresults == b.nresults && a.counted == b.counted;
    for (std::uint32_t id = 0; same && id < a.order.size(); ++id)
      same = std::memcmp(&a.at(id), &b.at(id), sizeof(op)) == 0 && a.order[id].pe == b.order[id].pe &&
             a.order[id].lane == b.order[id].lane;
    CHECK(same);
    bool differs = a.order.size() != c.order.size();
    for (std::uint32_t id = 0; !differs && id < a.order.size(); ++id)
      differs = std::memcmp(&a.at(id), &c.at(id), sizeof(op)) != 0;
    CHECK(differs);
  }
}

TEST_CASE("soak programs are valid, use every kind of op, and reach their op count", "[soak]") {
  std::vector<int> kinds(13, 0), atoms(9, 0), modes(5, 0), cmps(6, 0), elems(9, 0);
  int zero = 0, one_thread = 0, teams = 0;
  for (int npes : {1, 2, 3, 4}) {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      auto const prog = soak::generate(some_params(npes, seed));
      auto const bad = soak::validate(prog);
      INFO(npes << " PEs, seed " << seed << (bad.empty() ? std::string() : ": " + bad.front()));
      CHECK(bad.empty());
      CHECK(prog.counted >= prog.p.ops);
      for (std::uint32_t id = 0; id < prog.order.size(); ++id) {
        op const& o = prog.at(id);
        ++kinds[static_cast<std::size_t>(o.kind)];
        if (o.kind == op_kind::atomic) ++atoms[o.aux];
        if (o.kind == op_kind::wait) ++cmps[o.aux];
        if (soak::is_put(o.kind) || soak::is_get(o.kind)) {
          ++elems[o.elem];
          zero += o.n == 0;
          CHECK(o.bytes() <= prog.p.max_bytes);
        }
        one_thread += o.group == soak::grp::one;
        teams += o.kind == op_kind::barrier && o.aux != 0;
      }
      for (auto const& g : prog.groups) ++modes[static_cast<std::size_t>(g.mode)];
      // A serial run is one valid interleaving: every wait it reaches is already released.
      CHECK(serial_run(prog).unsatisfied_waits == 0);
    }
  }
  for (int k = 0; k < 13; ++k) CHECK(kinds[static_cast<std::size_t>(k)] > 0);
  for (int a : atoms) CHECK(a > 0);
  for (int m : modes) CHECK(m > 0);
  for (int c : cmps) CHECK(c > 0);
  for (int e : {1, 2, 4, 8}) CHECK(elems[static_cast<std::size_t>(e)] > 0);
  CHECK(zero > 0);
  CHECK(one_thread > 0);
  CHECK(teams > 0);
}

TEST_CASE("validate catches conflicting writes, racing reads, unsatisfiable waits", "[soak]") {
  auto prog = hand_program(2);
  add(prog, 0, copy_op(op_kind::put, 1, 0, 16, 8));
  CHECK(soak::validate(prog).empty());
  add(prog, 1, copy_op(op_kind::put, 1, 100, 20, 4));  // PE 1 into its own bytes 20..23: unordered
  CHECK(!soak::validate(prog).empty());

  auto reads = hand_program(2);
  add(reads, 0, copy_op(op_kind::put, 1, 0, 16, 8));
  add(reads, 1, copy_op(op_kind::get, 0, 4, 200, 4));  // PE 0's bytes 4..7 are not written: fine
  CHECK(soak::validate(reads).empty());
  add(reads, 0, copy_op(op_kind::get, 1, 18, 100, 2));  // reads PE 1's bytes 18..19 while they are put
  CHECK(!soak::validate(reads).empty());

  auto waits = hand_program(2);
  op s = copy_op(op_kind::put_signal, 1, 0, 0, 4);
  s.index = 2;
  s.aux = static_cast<std::uint8_t>(gpucomm::signal_op::add);
  s.value = 5;
  add(waits, 0, s);
  op w;
  w.kind = op_kind::wait;
  w.pe = 1;
  w.index = 2;
  w.aux = static_cast<std::uint8_t>(gpucomm::cmp::ge);
  w.value = soak::initial_sig(waits.p.seed, 1, 2) + 5;
  w.result = 0;
  add(waits, 1, w);
  CHECK(soak::validate(waits).empty());
  waits.code[1][0][0].value += 1;  // waits for more than the update brings
  CHECK(!soak::validate(waits).empty());
}

TEST_CASE("the reference on hand-made programs", "[soak]") {
  SECTION("put, get, and an overwrite ordered by fence") {
    auto prog = hand_program(2);
    add(prog, 0, copy_op(op_kind::put, 1, 0, 16, 8));          // PE 0 [0, 8) -> PE 1 [16, 24)
    add(prog, 1, copy_op(op_kind::get_nbi, 0, 32, 64, 2, 2));  // PE 0 [32, 36) -> PE 1 [64, 68)
    add(prog, 0, copy_op(op_kind::put_nbi, 0, 100, 120, 10));  // PE 0 [100, 110) -> PE 0 [120, 130)
    op f;
    f.kind = op_kind::fence;
    add(prog, 0, f);
    add(prog, 0, copy_op(op_kind::put, 0, 140, 126, 2, 2));  // PE 0 [140, 144) -> PE 0 [126, 130), after
    auto const bad = soak::validate(prog);
    INFO((bad.empty() ? std::string() : bad.front()));
    REQUIRE(bad.empty());
    auto const ex = soak::simulate(prog, results_t(2));
    auto want0 = init_data(prog, 0), want1 = init_data(prog, 1);
    auto const src0 = init_data(prog, 0);
    for (int k = 0; k < 8; ++k) want1[16 + k] = src0[k];
    for (int k = 0; k < 4; ++k) want1[64 + k] = src0[32 + k];
    for (int k = 0; k < 10; ++k) want0[120 + k] = src0[100 + k];
    for (int k = 0; k < 4; ++k) want0[126 + k] = src0[140 + k];
    CHECK(ex.data[0] == want0);
    CHECK(ex.data[1] == want1);
    CHECK(ex.result_mismatches == 0);
  }
  SECTION("signals: put_signal add, signal set, and the wait's result") {
    auto prog = hand_program(2);
    signal_t const base = soak::initial_sig(prog.p.seed, 1, 0);
    op s = copy_op(op_kind::put_signal_nbi, 1, 0, 0, 0);
    s.index = 0;
    s.aux = static_cast<std::uint8_t>(gpucomm::signal_op::add);
    s.value = 7;
    add(prog, 0, s);
    add(prog, 1, s);  // a second sender adds 7 too
    op t;
    t.kind = op_kind::signal;
    t.pe = 0;
    t.index = 3;
    t.aux = static_cast<std::uint8_t>(gpucomm::signal_op::set);
    t.value = 12345;
    add(prog, 1, t);
    op q;
    q.kind = op_kind::quiet;
    add(prog, 1, q);  // a lane quiets before it waits
    op w;
    w.kind = op_kind::wait;
    w.pe = 1;
    w.index = 0;
    w.aux = static_cast<std::uint8_t>(gpucomm::cmp::eq);
    w.value = base + 14;
    w.result = 0;
    add(prog, 1, w);
    auto const bad = soak::validate(prog);
    INFO((bad.empty() ? std::string() : bad.front()));
    REQUIRE(bad.empty());
    results_t r{{}, {base + 14}};
    auto ex = soak::simulate(prog, r);
    CHECK(ex.sig[1][0] == base + 14);
    CHECK(ex.sig[0][3] == 12345);
    CHECK(ex.result_mismatches == 0);
    r[1][0] = base + 7;  // released after only one update
    ex = soak::simulate(prog, r);
    CHECK(ex.result_mismatches == 1);
    CHECK_THAT(ex.first_result_mismatch, Catch::Contains("wait_until"));
  }
  SECTION("count mode: fetch_adds fetch distinct multiples of the increment") {
    auto prog = hand_program(2);
    std::uint64_t const init = soak::initial_c64(prog.p.seed, 1, 2);
    soak::atomic_group g;
    g.pe = 1;
    g.width = 8;
    g.word = 2;
    g.mode = soak::amode::count;
    g.d = 3;
    g.ops.push_back(add(prog, 0, atomic_op(soak::atom::fetch_add, 1, 8, 2, 3)));
    g.ops.push_back(add(prog, 1, atomic_op(soak::atom::fetch_add, 1, 8, 2, 3)));
    g.ops.push_back(add(prog, 1, atomic_op(soak::atom::add, 1, 8, 2, 3)));
    prog.groups.push_back(g);
    auto ex = soak::simulate(prog, {{init + 6}, {init}});
    CHECK(ex.c64[1][2] == init + 9);
    CHECK(ex.result_mismatches == 0);
    ex = soak::simulate(prog, {{init + 3}, {init + 3}});  // the same value twice
    CHECK(ex.result_mismatches == 1);
    ex = soak::simulate(prog, {{init + 9}, {init}});  // past the last add
    CHECK(ex.result_mismatches == 1);
  }
  SECTION("32-bit bits mode: own bit and untouched bits exact, final value from every op") {
    auto prog = hand_program(1);
    std::uint32_t const init = soak::initial_c32(prog.p.seed, 0, 1);
    soak::atomic_group g;
    g.width = 4;
    g.word = 1;
    g.mode = soak::amode::bits;
    g.ops.push_back(add(prog, 0, atomic_op(soak::atom::fetch_or, 0, 4, 1, 1u << 0, 1u << 0)));
    g.ops.push_back(add(prog, 0, atomic_op(soak::atom::fetch_and, 0, 4, 1, ~(1u << 1), 1u << 1)));
    g.ops.push_back(add(prog, 0, atomic_op(soak::atom::fetch_xor, 0, 4, 1, 1u << 2, 1u << 2)));
    prog.groups.push_back(g);
    std::uint32_t const after = ((init | 1u) & ~2u) ^ 4u;
    // Fetched in the order xor, or, and: each sees the others' bits changed or not; all fine.
    std::uint32_t const f_xor = init, f_or = init ^ 4u, f_and = (init ^ 4u) | 1u;
    auto ex = soak::simulate(prog, {{f_or, f_and, f_xor}});
    CHECK(ex.c32[0][1] == after);
    CHECK(ex.result_mismatches == 0);
    ex = soak::simulate(prog, {{f_or ^ 8u, f_and, f_xor}});  // bit 3 is nobody's: it must not change
    CHECK(ex.result_mismatches == 1);
  }
  SECTION("swap chain and compare_swap winner") {
    auto prog = hand_program(2);
    std::uint64_t const i0 = soak::initial_c64(prog.p.seed, 0, 0), i1 = soak::initial_c64(prog.p.seed, 0, 1);
    soak::atomic_group s;
    s.word = 0;
    s.mode = soak::amode::swap;
    s.ops.push_back(add(prog, 0, atomic_op(soak::atom::swap, 0, 8, 0, 100)));
    s.ops.push_back(add(prog, 1, atomic_op(soak::atom::swap, 0, 8, 0, 200)));
    prog.groups.push_back(s);
    soak::atomic_group c;
    c.word = 1;
    c.mode = soak::amode::cas;
    c.ops.push_back(add(prog, 0, atomic_op(soak::atom::compare_swap, 0, 8, 1, 300, i1)));
    c.ops.push_back(add(prog, 1, atomic_op(soak::atom::compare_swap, 0, 8, 1, 400, i1)));
    prog.groups.push_back(c);
    // PE 1 swapped first (got i0), then PE 0 (got 200): 100 stays. PE 1's compare_swap won.
    auto ex = soak::simulate(prog, {{200, 400}, {i0, i1}});
    CHECK(ex.c64[0][0] == 100);
    CHECK(ex.c64[0][1] == 400);
    CHECK(ex.result_mismatches == 0);
    ex = soak::simulate(prog, {{200, i1}, {i0, i1}});  // both compare_swaps succeeded
    CHECK(ex.result_mismatches >= 1);
    ex = soak::simulate(prog, {{i0, 400}, {i0, i1}});  // the initial value fetched twice
    CHECK(ex.result_mismatches == 1);
  }
}

TEST_CASE("a serial run of generated programs matches the reference; one flipped value is reported", "[soak]") {
  for (int npes : {1, 2, 4}) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      auto const prog = soak::generate(some_params(npes, seed * 31));
      auto const run = serial_run(prog);
      auto const ex = soak::simulate(prog, run.results);
      INFO(npes << " PEs, seed " << seed * 31 << ": " << ex.first_result_mismatch);
      CHECK(ex.result_mismatches == 0);
      for (int pe = 0; pe < npes; ++pe) {
        auto const q = static_cast<std::size_t>(pe);
        auto const r = soak::compare_pe(prog, ex, pe, run.data[q], run.c64[q], run.c32[q], run.sig[q]);
        INFO("PE " << pe << ": " << r.first);
        CHECK(r.mismatches == 0);
      }
      // One byte flipped where some op wrote: reported once, naming that op.
      for (std::uint32_t id = 0; id < prog.order.size(); ++id) {
        op const& o = prog.at(id);
        if (!soak::is_put(o.kind) || o.n == 0) continue;
        auto data = run.data[static_cast<std::size_t>(o.pe)];
        std::uint64_t const at = o.dst + o.bytes() - 1;
        data[at] ^= 0x40;
        auto const q = static_cast<std::size_t>(o.pe);
        auto const r = soak::compare_pe(prog, ex, o.pe, data, run.c64[q], run.c32[q], run.sig[q]);
        CHECK(r.mismatches == 1);
        CHECK_THAT(r.first, Catch::Contains("offset " + std::to_string(at)) && Catch::Contains("last written by op #"));
        break;
      }
      // A counter one off, and a fetched value one off.
      auto c64 = run.c64[0];
      c64[0] += 1;
      CHECK(soak::compare_pe(prog, ex, 0, run.data[0], c64, run.c32[0], run.sig[0]).mismatches == 1);
      for (int pe = 0; pe < npes; ++pe) {
        if (run.results[static_cast<std::size_t>(pe)].empty()) continue;
        auto results = run.results;
        results[static_cast<std::size_t>(pe)][0] += 1;
        CHECK(soak::simulate(prog, results).result_mismatches >= 1);
        break;
      }
    }
  }
}

namespace {

/// soak.cu's parameters (tests/gpu/ops/soak.cu: 128-thread CTAs, a round of 1500 ops).
soak::params soak_cu_params(int npes, std::uint64_t round, bool all_elems) {
  soak::params p;
  p.npes = npes;
  p.seed = soak::hash64(19, round, 0x50A4);
  p.ops = 1500;
  p.max_bytes = 64u << 10;
  p.data_bytes = 1u << 20;
  p.warp_lanes = 4;
  p.elems = all_elems ? (1u << 1 | 1u << 2 | 1u << 4 | 1u << 8) : (1u << 1 | 1u << 8);
  p.teams = npes >= 2;
  return p;
}

op wait_op(int pe, std::uint32_t index, gpucomm::cmp c, signal_t value) {
  op w;
  w.kind = op_kind::wait;
  w.pe = pe;
  w.index = index;
  w.aux = static_cast<std::uint8_t>(c);
  w.value = value;
  w.result = 0;
  return w;
}
op signal_add(int peer, std::uint32_t index, signal_t value) {
  op s;
  s.kind = op_kind::signal;
  s.pe = peer;
  s.index = index;
  s.aux = static_cast<std::uint8_t>(gpucomm::signal_op::add);
  s.value = value;
  return s;
}

}  // namespace

TEST_CASE("soak programs run to completion in every schedule (no deadlock at any PE count)", "[soak]") {
  for (int npes : {1, 2, 3, 4}) {
    for (std::uint64_t round = 0; round < 40; ++round) {
      auto const prog = soak::generate(soak_cu_params(npes, round, round % 2 == 0));
      auto const bad = soak::check_executable(prog);
      INFO(npes << " PEs, round " << round << " (seed " << prog.p.seed << ")"
                << (bad.empty() ? std::string() : ": " + bad.front()));
      CHECK(bad.empty());
    }
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      auto const prog = soak::generate(some_params(npes, seed));
      auto const bad = soak::check_executable(prog, {8, seed});
      INFO(npes << " PEs, seed " << seed << (bad.empty() ? std::string() : ": " + bad.front()));
      CHECK(bad.empty());
    }
  }
}

TEST_CASE("check_executable catches deadlocks and waits that can be missed", "[soak]") {
  // A wait nothing releases: a deadlock, named by PE, lane, op and the word's value.
  {
    auto prog = soak::generate(soak_cu_params(4, 0, false));
    REQUIRE(soak::check_executable(prog).empty());
    bool changed = false;
    for (std::uint32_t id = 0; id < prog.order.size() && !changed; ++id) {
      auto const& at = prog.order[id];
      op& o = prog.code[static_cast<std::size_t>(at.pe)][static_cast<std::size_t>(at.lane)][at.index];
      if (o.kind != op_kind::wait) continue;
      o.aux = static_cast<std::uint8_t>(gpucomm::cmp::eq);
      o.value = 12345;  // below every signal value (they start at 2^40)
      changed = true;
    }
    REQUIRE(changed);
    auto const bad = soak::check_executable(prog);
    REQUIRE(!bad.empty());
    CHECK(bad.front().find("deadlock") != std::string::npos);
    CHECK(bad.front().find("wait_until") != std::string::npos);
  }
  // Team barriers that do not pair up: PE 3 takes the parity team where its half waits for it.
  {
    auto prog = soak::generate(soak_cu_params(4, 0, false));
    bool changed = false;
    for (auto& lane : prog.code[3])
      for (op& o : lane)
        if (o.kind == op_kind::barrier && o.aux == static_cast<std::uint8_t>(soak::scope::halves)) {
          o.aux = static_cast<std::uint8_t>(soak::scope::parity);
          changed = true;
        }
    REQUIRE(changed);
    auto const bad = soak::check_executable(prog);
    REQUIRE(!bad.empty());
    CHECK(bad.front().find("deadlock") != std::string::npos);
    CHECK(bad.front().find("barrier") != std::string::npos);
  }
  // One lane of a PE skips a barrier the others reach: the CTA never gathers.
  {
    auto prog = soak::generate(soak_cu_params(2, 1, false));
    int pe = prog.kinds[0] == soak::lane_kind::warp ? 0 : 1;
    if (prog.kinds[static_cast<std::size_t>(pe)] != soak::lane_kind::warp) pe = -1;
    if (pe >= 0) {
      auto& lane = prog.code[static_cast<std::size_t>(pe)][1];
      for (std::size_t i = 0; i < lane.size(); ++i)
        if (lane[i].kind == op_kind::barrier) {
          lane.erase(lane.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      CHECK(!soak::check_executable(prog).empty());
    }
  }
  // '==' on an intermediate value of a word still being added to: true, then false again.
  {
    auto prog = hand_program(2);
    signal_t const base = soak::initial_sig(prog.p.seed, 0, 1);
    op q;
    q.kind = op_kind::quiet;  // an update lands at the latest at its sender's quiet
    add(prog, 1, signal_add(0, 1, 5));
    add(prog, 1, signal_add(0, 1, 5));
    add(prog, 1, q);
    add(prog, 0, wait_op(0, 1, gpucomm::cmp::eq, base + 5));
    auto const bad = soak::check_executable(prog);
    REQUIRE(!bad.empty());
    CHECK((bad.front().find("window") != std::string::npos || bad.front().find("deadlock") != std::string::npos));
    prog.code[0][0][0].value = base + 10;  // the final value: fine
    CHECK(soak::check_executable(prog).empty());
  }
  // A signal that is never quieted before its sender waits on the receiver: lands only lazily.
  {
    auto prog = hand_program(2);
    signal_t const b0 = soak::initial_sig(prog.p.seed, 0, 0), b1 = soak::initial_sig(prog.p.seed, 1, 0);
    add(prog, 0, signal_add(1, 0, 1));
    add(prog, 0, wait_op(0, 0, gpucomm::cmp::ge, b0 + 1));
    add(prog, 1, wait_op(1, 0, gpucomm::cmp::ge, b1 + 1));
    op q;
    q.kind = op_kind::quiet;
    add(prog, 1, signal_add(0, 0, 1));
    add(prog, 1, q);
    auto bad = soak::check_executable(prog);
    REQUIRE(!bad.empty());
    CHECK(bad.front().find("lazy delivery") != std::string::npos);
    prog.code[0][0].insert(prog.code[0][0].begin() + 1, q);  // quiet before the wait: fine
    CHECK(soak::check_executable(prog).empty());
  }
}
