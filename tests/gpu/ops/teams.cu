// The op suite (every transport under test): teams. Host side: the predefined teams match where the
// PEs run, rank translation both ways, every team shape team_split makes (contiguous, strided,
// single PE, a split of a split, the whole world again), and every bad input, refused on every PE
// with a message naming it (PE outside the world, stride 0, size past the parent, size 0, a team
// that is not live, different arguments on different processes, more teams than the control block
// holds). Device side: two groups of each PE in barriers on different teams at the same time, with
// data written through put before each barrier and checked after it by every member, and the team
// barrier on each team shape.
#include "common.cuh"

using namespace gpucomm::test::ops;
using gpucomm::team;
using gpucomm::test::error_of;

namespace {

/// The PEs of t, by team rank, computed from its fields alone.
std::vector<int> members(team const& t) {
  std::vector<int> pes;
  for (int r = 0; r < t.size; ++r) pes.push_back(t.start + r * t.stride);
  return pes;
}

/// Checks pe_of / rank_of / contains against the member list, for every world PE.
void check_translation(team const& t, int npes) {
  auto const pes = members(t);
  for (int r = 0; r < t.size; ++r) CHECK(t.pe_of(r) == pes[static_cast<std::size_t>(r)]);
  for (int pe = 0; pe < npes; ++pe) {
    auto const it = std::find(pes.begin(), pes.end(), pe);
    int const expected = it == pes.end() ? -1 : static_cast<int>(it - pes.begin());
    INFO("PE " << pe);
    CHECK(t.rank_of(pe) == expected);
    CHECK(t.contains(pe) == (expected >= 0));
  }
}

constexpr int W = 4;  // words each member writes to each member per round

__host__ __device__ inline std::uint64_t tval(std::uint64_t salt, int round, int from, int to, int w) {
  return mix(salt + static_cast<std::uint64_t>(round), static_cast<std::uint64_t>(from * 1024 + to),
             static_cast<std::uint64_t>(w));
}

struct team_args {
  comm_t c;
  team t[2];                     // group k of the block runs rounds on team t[k] (if a member)
  sym_ptr<std::uint64_t> slots;  // [2 teams][2 buffers][npes writers][W]
  std::uint64_t* stage;          // local [2][npes][W]
  int rounds;
  std::uint64_t salt;
  unsigned long long* errors;  // local [2]
};

/// Blocks of 64 threads, two warps: warp k runs `rounds` rounds on team t[k]: every member puts the
/// round's words into every member's slot, one team barrier, every member checks every member's
/// words. Double-buffered, so the next round's puts also test that the barrier ordered the reads.
__global__ void team_rounds(team_args a) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  unsigned const k = threadIdx.x / 32;
  team const t = a.t[k];
  int const me = a.c.my_pe(), npes = a.c.npes();
  int const my_rank = t.rank_of(me);
  if (my_rank < 0) return;
  unsigned long long bad = 0;
  for (int r = 0; r < a.rounds; ++r) {
    int const buf = r & 1;
    auto const mine = a.slots + static_cast<std::ptrdiff_t>(((k * 2 + buf) * npes + my_rank) * W);
    std::uint64_t* stage = a.stage + static_cast<std::size_t>(k) * npes * W;
    for (int i = static_cast<int>(warp.thread_rank()); i < t.size * W; i += 32)
      stage[i] = tval(a.salt + k, r, me, t.pe_of(i / W), i % W);
    warp.sync();
    for (int q = 0; q < t.size; ++q) a.c.put(warp, mine, stage + q * W, W, t.pe_of(q));
    a.c.barrier(warp, t);
    for (int i = static_cast<int>(warp.thread_rank()); i < t.size * W; i += 32) {
      std::uint64_t const got = a.slots[((k * 2 + buf) * npes + i / W) * W + i % W];
      bad += got != tval(a.salt + k, r, t.pe_of(i / W), me, i % W);
    }
  }
  report(a.errors + k, bad);
}

/// Runs team_rounds with groups on teams a and b at once on every PE; every PE checks its counts.
void run_two_teams(gpucomm::world& w, team const& ta, team const& tb, int rounds, std::uint64_t salt) {
  int const npes = w.npes();
  auto slots = w.alloc<std::uint64_t>(static_cast<std::size_t>(4 * npes * W));
  auto stage = w.alloc<std::uint64_t>(static_cast<std::size_t>(2 * npes * W));
  auto errors = w.alloc<unsigned long long>(2);
  for (int pe : w.local_pes()) {
    fill_bytes(w, pe, slots.ptr(pe).get(), poison_byte, slots.size_bytes());
    fill_bytes(w, pe, errors.ptr(pe).get(), 0, errors.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    team_args a{w.comm<transport_under_test>(pe),
                {ta, tb},
                slots.ptr(pe),
                stage.ptr(pe).get(),
                rounds,
                salt,
                errors.ptr(pe).get()};
    team_rounds<<<1, 64, 0, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const e = download(w, pe, errors.ptr(pe), 2);
    INFO("PE " << pe << ", teams (" << ta.start << "," << ta.stride << "," << ta.size << ") and (" << tb.start << ","
               << tb.stride << "," << tb.size << ")");
    CHECK(e[0] == 0);
    CHECK(e[1] == 0);
  }
  w.barrier();
}

}  // namespace

TEST_CASE("the predefined teams match where the PEs run", "[gpu][teams]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  team const world_team = w.team_world();
  CHECK(world_team == team{0, 1, npes, 0});
  check_translation(world_team, npes);
  for (int pe : w.local_pes()) {
    CHECK(w.comm<transport_under_test>(pe).world_team() == world_team);
    team const node = w.team_node(pe);
    team const gpu = w.team_shared_gpu(pe);
    check_translation(node, npes);
    check_translation(gpu, npes);
    for (int q = 0; q < npes; ++q) {
      INFO("PE " << pe << ", PE " << q);
      CHECK(node.contains(q) == w.same_host(pe, q));
      CHECK(gpu.contains(q) == w.same_gpu(pe, q));
    }
    CHECK(gpu.contains(pe));
    CHECK(gpu.size == gpucomm::test::pes_per_gpu());
  }
}

TEST_CASE("team_split makes every team shape, and refuses bad input on every PE", "[gpu][teams][errors]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  team const world_team = w.team_world();

  SECTION("shapes") {
    std::vector<team> made;
    auto split = [&](team const& parent, int start, int stride, int size) {
      team const t = w.team_split(parent, start, stride, size);
      CHECK(t.valid());
      CHECK(t.slot >= 3);
      for (auto const& m : made) CHECK(t.slot != m.slot);  // live teams never share state
      made.push_back(t);
      return t;
    };
    team const all = split(world_team, 0, 1, npes);
    CHECK(members(all) == members(world_team));
    team const last = split(world_team, npes - 1, 1, 1);
    CHECK(members(last) == std::vector<int>{npes - 1});
    team const evens = split(world_team, 0, 2, (npes + 1) / 2);
    for (int r = 0; r < evens.size; ++r) CHECK(evens.pe_of(r) == 2 * r);
    check_translation(evens, npes);
    if (npes >= 2) {
      team const odds = split(world_team, 1, 2, npes / 2);
      check_translation(odds, npes);
      for (int pe = 0; pe < npes; ++pe) CHECK(evens.contains(pe) != odds.contains(pe));
      team const tail = split(world_team, npes / 2, 1, npes - npes / 2);  // contiguous, not from 0
      check_translation(tail, npes);
    }
    // A split of a split: ranks of the parent, not world PEs.
    team const sub = split(evens, evens.size - 1, 1, 1);
    CHECK(members(sub) == std::vector<int>{2 * (evens.size - 1)});
    if (evens.size >= 2) {
      team const every_other = split(evens, 0, 2, (evens.size + 1) / 2);
      for (int r = 0; r < every_other.size; ++r) CHECK(every_other.pe_of(r) == 4 * r);
    }
    for (auto it = made.rbegin(); it != made.rend(); ++it) w.team_destroy(*it);
    // Destroyed slots are reused, and a reused slot starts from a clean state (checked on the
    // device by the barrier cases below, which run after many splits and destroys).
    team const again = w.team_split(world_team, 0, 1, npes);
    CHECK(again.slot == made.front().slot);
    w.team_destroy(again);
  }

  SECTION("bad input") {
    auto refused = [&](int start, int stride, int size) {
      return error_of([&] { w.team_split(world_team, start, stride, size); });
    };
    CHECK_THAT(refused(0, 0, 1), Catch::Contains("stride 0"));
    CHECK_THAT(refused(0, -1, 1), Catch::Contains("stride -1"));
    CHECK_THAT(refused(0, 1, 0), Catch::Contains("size 0"));
    CHECK_THAT(refused(-1, 1, 1), Catch::Contains("start -1 is outside the parent team"));
    CHECK_THAT(refused(npes, 1, 1), Catch::Contains("no such PE in the world"));
    CHECK_THAT(refused(0, 1, npes + 1), Catch::Contains("runs past the parent team"));
    CHECK_THAT(refused(npes - 1, 1, 2), Catch::Contains("past the world's last PE"));
    CHECK_THAT(refused(0, npes, 2), Catch::Contains("runs past the parent team"));
    CHECK_THAT(error_of([&] { w.team_split(team{}, 0, 1, 1); }), Catch::Contains("not a live team"));
    CHECK_THAT(error_of([&] { w.team_destroy(world_team); }), Catch::Contains("cannot be destroyed"));
    team const t = w.team_split(world_team, 0, 1, 1);
    w.team_destroy(t);
    CHECK_THAT(error_of([&] { w.team_destroy(t); }), Catch::Contains("not a live team"));
    CHECK_THAT(error_of([&] { w.team_split(t, 0, 1, 1); }), Catch::Contains("not a live team"));
  }

  SECTION("arguments that differ between processes") {
    if (!w.one_process_per_gpu()) {
      SUCCEED("one process asks for all its PEs at once");
      return;
    }
    // PE 0 asks for a team of 1, the others for a team of 2: every PE must refuse.
    int const size = w.local_pes().front() == 0 ? 1 : std::min(2, npes);
    std::string const e = error_of([&] { w.team_split(world_team, 0, 1, size); });
    CHECK_THAT(e, Catch::Contains("make teams on every process in the same order"));
    // Nothing was made: the next split agrees everywhere and gets the first free slot.
    team const ok = w.team_split(world_team, 0, 1, 1);
    CHECK(ok.slot == 3);
    w.team_destroy(ok);
  }
}

TEST_CASE("more teams than the control block holds is an error that says the limit", "[gpu][teams][errors]") {
  gpucomm::world_options o = gpucomm::test::test_world_options();
  o.heap_bytes = std::size_t{16} << 20;
  o.max_teams = 5;
  auto w = gpucomm::test::make_world(o);
  CHECK(w->max_teams() == 5);
  team const a = w->team_split(w->team_world(), 0, 1, 1);
  team const b = w->team_split(w->team_world(), 0, 1, 1);
  std::string const e = error_of([&] { w->team_split(w->team_world(), 0, 1, 1); });
  CHECK_THAT(e, Catch::Contains("more teams than the control block holds: 5"));
  CHECK_THAT(e, Catch::Contains("world_options::max_teams"));
  w->team_destroy(a);
  team const c = w->team_split(w->team_world(), 0, 1, 1);  // a's slot, free again
  CHECK(c.slot == a.slot);
  w->team_destroy(b);
  w->team_destroy(c);
  o.max_teams = 2;
  CHECK_THAT(error_of([&] { gpucomm::test::make_world(o); }), Catch::Contains("below the 3 predefined teams"));
}

TEST_CASE("groups of one PE are in barriers on different teams at the same time", "[gpu][teams][sanitize]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  team const world_team = w.team_world();
  int const rounds = 200 / model_slowdown;
  // The world team and a user team with the same PEs: two teams, two slots, one PE set.
  team const all = w.team_split(world_team, 0, 1, npes);
  run_two_teams(w, world_team, all, rounds, 401);
  // Evens and odds: each PE's second group has no team (it is in one of them only), and the two
  // teams' barriers run side by side on different PEs.
  team const evens = w.team_split(world_team, 0, 2, (npes + 1) / 2);
  if (npes >= 2) {
    team const odds = w.team_split(world_team, 1, 2, npes / 2);
    run_two_teams(w, evens, odds, rounds, 402);
    w.team_destroy(odds);
  }
  // The shared-GPU team (this process's first PE's: every PE passes the same value in a
  // single-process world, each GPU's PEs their own under MPI) next to a user team.
  run_two_teams(w, w.team_shared_gpu(w.local_pes().front()), evens, rounds, 403);
  // A single PE's team (the last PE) and a split of a split.
  team const last = w.team_split(world_team, npes - 1, 1, 1);
  team const sub = w.team_split(evens, 0, 1, std::max(1, evens.size - 1));
  run_two_teams(w, last, sub, rounds, 404);
  w.team_destroy(sub);
  w.team_destroy(last);
  w.team_destroy(evens);
  w.team_destroy(all);
}
