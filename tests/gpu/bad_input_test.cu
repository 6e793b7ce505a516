// Bad input to the host API, and to device operations in debug builds: every case of
// docs/guide/reliability.md's table that needs a GPU. Each host case checks the error's text (what is
// wrong, and what to do), that nothing changed (heap bytes in use, live blocks and teams), and
// that the world still works afterwards. Cases whose processes pass different arguments do
// something only under mpirun, where a process that threw alone used to leave the others waiting:
// here every process must throw. Device misuse traps, which leaves the CUDA context unusable, so
// those cases run in a child process (this binary again, running one hidden case) and check its
// output and exit status.
#include "harness.cuh"

#include <gpucomm/host/collectives.cuh>
#include <gpucomm/host/team_workspace.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using gpucomm::test::error_of;
using gpucomm::test::finish;
using gpucomm::test::for_each_local_pe;

/// The PE this process's first local PE is: differs between processes under mpirun.
int first_local(gpucomm::world& w) { return w.local_pes().front(); }

/// A world like the test world but with `options` (the heap small, so tests can build several).
std::unique_ptr<gpucomm::world> small_world(gpucomm::world_options options = {}) {
  if (options.heap_bytes == 0 && !std::getenv("GPUCOMM_HEAP_BYTES")) options.heap_bytes = std::size_t{64} << 20;
  return gpucomm::test::make_world(std::move(options));
}

/// Sets an environment variable for one scope, and restores it.
class scoped_env {
 public:
  scoped_env(char const* name, char const* value) : name_(name) {
    if (char const* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (old_.empty())
      ::unsetenv(name_);
    else
      ::setenv(name_, old_.c_str(), 1);
  }

 private:
  char const* name_;
  std::string old_;
};

}  // namespace

TEST_CASE("bad PEs given to the host API are refused, naming the PE", "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  int const n = w.npes();
  std::size_t const before = w.heap_bytes_in_use();
  auto arr = w.alloc<int>(16);
  std::size_t const with_arr = w.heap_bytes_in_use();
  for (int bad : {-1, n, n + 7}) {
    INFO("PE " << bad);
    std::string const owned = "PE " + std::to_string(bad) + " is not owned by this process";
    CHECK_THAT(error_of([&] { w.stream(bad); }), Catch::Contains(owned) && Catch::Contains("local_pes()"));
    CHECK_THAT(error_of([&] { w.device(bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { w.comm<gpucomm::NVLinkStore>(bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { w.view(arr.get(), bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { arr.ptr(bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { w.team_node(bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { w.team_shared_gpu(bad); }), Catch::Contains(owned));
    CHECK_THAT(error_of([&] { w.team_states(bad); }), Catch::Contains(owned));
    std::string const outside = "PE " + std::to_string(bad) + " is outside the world of " + std::to_string(n);
    CHECK_THAT(error_of([&] { w.same_host(0, bad); }), Catch::Contains(outside));
    CHECK_THAT(error_of([&] { w.same_gpu(bad, 0); }), Catch::Contains(outside));
    CHECK_THAT(error_of([&] { w.can_load_store(0, bad); }), Catch::Contains(outside));
    CHECK_THAT(error_of([&] { w.can_load_store(bad, 0); }), Catch::Contains(outside));
  }
  // Under mpirun: another process's PE is a PE of the world, but not this process's.
  for (int pe = 0; pe < n; ++pe) {
    if (w.is_local(pe)) continue;
    CHECK_THAT(error_of([&] { w.stream(pe); }), Catch::Contains("is not owned by this process"));
    CHECK_THAT(error_of([&] { arr.ptr(pe); }), Catch::Contains("is not owned by this process"));
    CHECK(error_of([&] { w.can_load_store(first_local(w), pe); }) == "(no error)");
  }
  // Nothing changed, and the world works.
  CHECK(w.heap_bytes_in_use() == with_arr);
  arr.reset();
  CHECK(w.heap_bytes_in_use() == before);
  auto again = w.alloc<int>(16);
  CHECK(again.ptr(first_local(w)).get() != nullptr);
}

TEST_CASE("null, foreign and freed pointers are refused by deallocate and view on every PE",
          "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  int const me = first_local(w);
  std::size_t const before = w.heap_bytes_in_use();

  // Null: unlike free(NULL), not a no-op, since a null sym_ptr is never what allocate returned.
  CHECK_THAT(error_of([&] { w.deallocate(gpucomm::sym_ptr<int>{}); }),
             Catch::Contains("world::deallocate") && Catch::Contains("not in this world's symmetric heap") &&
                 Catch::Contains("free each allocation exactly once"));
  CHECK_THAT(error_of([&] { w.view(gpucomm::sym_ptr<int>{}, me); }),
             Catch::Contains("world::view") && Catch::Contains("not in this world's symmetric heap"));

  // gpucomm's own control block, at the heap's base.
  auto const control = gpucomm::sym_ptr<char>(w.heap_layout().base);
  CHECK_THAT(error_of([&] { w.deallocate(control); }), Catch::Contains("gpucomm's own control block"));

  // Another world's pointer.
  auto other = small_world();
  auto theirs = other->alloc<int>(8);
  CHECK_THAT(error_of([&] { w.deallocate(theirs.get()); }), Catch::Contains("not in this world's symmetric heap"));
  CHECK_THAT(error_of([&] { w.view(theirs.get(), me); }), Catch::Contains("not in this world's symmetric heap"));

  // Freed: view refuses it (it would point into unmapped memory); a second free is a double free.
  auto p = w.allocate<int>(1000);
  CHECK(w.view(p + 999, me) == w.view(p, me) + 999);
  w.deallocate(p);
  CHECK_THAT(error_of([&] { w.view(p, me); }), Catch::Contains("in no live allocation"));
  CHECK_THAT(error_of([&] { w.deallocate(p); }), Catch::Contains("double free"));

  // Under mpirun, one process passes a foreign pointer and the others a good one: every process
  // throws (none is left waiting), and the good block stays allocated until freed properly.
  if (w.one_process_per_gpu()) {
    auto q = w.allocate<int>(100);
    int* foreign = nullptr;
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(me)));
    GPUCOMM_TEST_CUDA(cudaMalloc(&foreign, 64));
    gpucomm::sym_ptr<int> const mine = me == 1 ? gpucomm::sym_ptr<int>(foreign) : q;
    CHECK_THAT(error_of([&] { w.deallocate(mine); }),
               Catch::Contains("on PE 1") && Catch::Contains("not in this world's symmetric heap"));
    GPUCOMM_TEST_CUDA(cudaFree(foreign));
    CHECK(w.heap_bytes_in_use() > before);
    CHECK_NOTHROW(w.deallocate(q));
  }
  CHECK(w.heap_bytes_in_use() == before);
  theirs.reset();
  other.reset();
}

TEST_CASE("register_buffer refuses what the NIC cannot take, and the registrations stay usable",
          "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  int const me = first_local(w);
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(me)));
  char* buffer = nullptr;
  GPUCOMM_TEST_CUDA(cudaMalloc(&buffer, 4096));
  auto const registered = [&] { return w.registered_buffers().size(); };
  std::size_t const before = registered();
  CHECK_THAT(error_of([&] { w.register_buffer(me, nullptr, 64); }),
             Catch::Contains("world::register_buffer") && Catch::Contains("null"));
  CHECK_THAT(error_of([&] { w.register_buffer(me, buffer, 0); }), Catch::Contains("has no bytes"));
  CHECK_THAT(error_of([&] { w.register_buffer(w.npes(), buffer, 64); }), Catch::Contains("not owned by this process"));
  CHECK_THAT(error_of([&] { w.register_buffer(me, w.heap_layout().base + 64, 64); }),
             Catch::Contains("overlaps the symmetric heap"));
  std::vector<char> pageable(4096);
  CHECK_THAT(error_of([&] { w.register_buffer(me, pageable.data(), pageable.size()); }),
             Catch::Contains("pageable host memory") && Catch::Contains("cannot reach"));
  CHECK(registered() == before);
  w.register_buffer(me, buffer, 2048);
  CHECK_THAT(error_of([&] { w.register_buffer(me, buffer + 1024, 2048); }),
             Catch::Contains("overlaps one registered before"));
  CHECK_THAT(error_of([&] { w.unregister_buffer(me, buffer + 1); }),
             Catch::Contains("world::unregister_buffer") && Catch::Contains("not registered"));
  CHECK_NOTHROW(w.register_buffer(me, buffer + 2048, 2048));  // the next bytes: no overlap
  CHECK(registered() == before + 2);
  w.unregister_buffer(me, buffer);
  CHECK_THAT(error_of([&] { w.unregister_buffer(me, buffer); }), Catch::Contains("not registered"));
  w.unregister_buffer(me, buffer + 2048);
  CHECK(registered() == before);
  GPUCOMM_TEST_CUDA(cudaFree(buffer));
}

TEST_CASE("sizes that overflow or exceed the heap are refused, and the heap is unchanged",
          "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  std::size_t const before = w.heap_bytes_in_use();
  // 2^61 eight-byte elements are 2^64 bytes: the product wraps to 0 in a size_t.
  CHECK_THAT(error_of([&] { w.allocate<std::uint64_t>(std::size_t{1} << 61); }),
             Catch::Contains("more bytes than a size_t holds"));
  CHECK_THAT(error_of([&] { w.alloc<char>(std::numeric_limits<std::size_t>::max()); }),
             Catch::Contains("symmetric heap exhausted"));
  CHECK_THAT(error_of([&] { w.alloc<char>(w.heap_capacity() - w.heap_bytes_in_use() + 1); }),
             Catch::Contains("symmetric heap exhausted") && Catch::Contains("heap_bytes"));
  CHECK(w.heap_bytes_in_use() == before);

  // A workspace whose size would wrap, or exceed the heap; a zero block; parts out of range.
  auto const t = w.team_world();
  CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, t, {.block_bytes = std::size_t{1} << 62}); }),
             Catch::Contains("need more than the heap's"));
  CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, t, {.block_bytes = 0}); }), Catch::Contains("block_bytes 0"));
  CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, t, {.parts = 0}); }), Catch::Contains("parts 0"));
  CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, t, {.parts = 4097}); }), Catch::Contains("parts 4097"));
  CHECK(w.heap_bytes_in_use() == before);
  gpucomm::team_workspace ok(w, t);
  CHECK(ok.size_bytes() > 0);
}

TEST_CASE("destroyed, stale and foreign teams are refused on every PE", "[gpu][world][errors][bad_input][teams]") {
  auto& w = gpucomm::test::the_world();
  int const n = w.npes();
  std::size_t const before = w.heap_bytes_in_use();
  auto const world_team = w.team_world();
  CHECK(w.is_live(world_team));
  CHECK_FALSE(w.is_live(gpucomm::team{}));

  gpucomm::team const first = w.team_split(world_team, 0, 1, n);
  w.team_destroy(first);
  CHECK_FALSE(w.is_live(first));
  // The slot goes to a team of another shape (stride 2): the old value must not pass for it.
  gpucomm::team const second = w.team_split(world_team, 0, 2, 1);
  REQUIRE(second.slot == first.slot);
  CHECK(w.is_live(second));
  CHECK_FALSE(w.is_live(first));
  CHECK_THAT(error_of([&] { w.team_destroy(first); }), Catch::Contains("not a live team of this world"));
  CHECK_THAT(error_of([&] { w.team_split(first, 0, 1, 1); }), Catch::Contains("parent is not a live team"));
  CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, first); }), Catch::Contains("not a live team of this world"));
  CHECK(w.is_live(second));  // untouched by the refused calls

  // A team made in another world: its slot is live there, not here.
  auto other = small_world();
  gpucomm::team const foreign = other->team_split(other->team_world(), 0, 1, n);
  gpucomm::team const here = w.team_split(world_team, 0, 2, (n + 1) / 2);
  CHECK_FALSE(w.is_live(foreign));
  gpucomm::team const shifted{foreign.start, foreign.stride, foreign.size, foreign.slot + 1};
  CHECK_THAT(error_of([&] { w.team_destroy(shifted); }), Catch::Contains("not a live team of this world"));
  CHECK_THAT(error_of([&] { w.team_split(world_team, 0, 1, n + 1); }), Catch::Contains("runs past the parent"));
  CHECK_THAT(error_of([&] { w.team_destroy(world_team); }), Catch::Contains("cannot be destroyed"));

  // Under mpirun, one process names a dead team and the others a live one: all throw.
  if (w.one_process_per_gpu()) {
    gpucomm::team const chosen = first_local(w) == 1 ? first : second;
    CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, chosen); }),
               Catch::Contains("on PE 1") && Catch::Contains("not a live team"));
    gpucomm::team const twin = w.team_split(world_team, 0, 1, n);
    gpucomm::team const mixed = first_local(w) == 1 ? twin : second;
    CHECK_THAT(error_of([&] { gpucomm::team_workspace(w, mixed); }), Catch::Contains("differ from PE 0's"));
    CHECK_THAT(error_of([&] {
                 gpucomm::team_workspace(w, world_team, {.block_bytes = 4096u << (first_local(w) == 1 ? 1 : 0)});
               }),
               Catch::Contains("differ from PE 0's"));
    w.team_destroy(twin);
  }
  CHECK(w.heap_bytes_in_use() == before);
  w.team_destroy(second);
  w.team_destroy(here);
  other->team_destroy(foreign);
}

TEST_CASE("empty, moved-from and orphaned arrays and workspaces throw instead of crashing",
          "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  int const me = first_local(w);
  std::size_t const before = w.heap_bytes_in_use();
  gpucomm::sym_array<int> empty;
  CHECK_THAT(error_of([&] { empty.ptr(me); }), Catch::Contains("sym_array::ptr") && Catch::Contains("holds nothing"));
  CHECK_NOTHROW(empty.reset());

  auto a = w.alloc<int>(10);
  auto b = std::move(a);
  CHECK_THAT(error_of([&] { a.ptr(me); }), Catch::Contains("holds nothing"));
  CHECK(b.ptr(me).get() != nullptr);
  b.reset();
  CHECK_THAT(error_of([&] { b.ptr(me); }), Catch::Contains("holds nothing"));
  CHECK(w.heap_bytes_in_use() == before);

  gpucomm::team_workspace ws(w, w.team_world());
  gpucomm::team_workspace moved(std::move(ws));
  CHECK_THAT(error_of([&] { ws.view(me); }), Catch::Contains("team_workspace::view") && Catch::Contains("moved from"));
  CHECK(moved.view(me).valid());

  // An array that outlives its world: using it throws, and destroying it frees nothing (the world
  // released its memory). Before, its destructor freed into a destroyed world.
  gpucomm::sym_array<int> orphan;
  {
    auto short_lived = small_world();
    orphan = short_lived->alloc<int>(10);
  }
  CHECK_THAT(error_of([&] { orphan.ptr(me); }), Catch::Contains("world is destroyed"));
  CHECK_NOTHROW(orphan.reset());
}

TEST_CASE("frees in different orders fail on every process and leak nothing", "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  if (!w.one_process_per_gpu()) {
    SUCCEED("one process frees for every PE at once: orders cannot differ");
    return;
  }
  std::size_t const before = w.heap_bytes_in_use();
  auto a = w.alloc<int>(100);
  auto b = w.alloc<int>(100);
  bool const swap = first_local(w) == 1;
  CHECK_THAT(error_of([&] { (swap ? b : a).reset(); }), Catch::Contains("differs across PEs"));
  // Both arrays still hold their blocks, so freeing in the same order works.
  CHECK(a.ptr(first_local(w)).get() != nullptr);
  CHECK(b.ptr(first_local(w)).get() != nullptr);
  a.reset();
  b.reset();
  CHECK(w.heap_bytes_in_use() == before);
}

TEST_CASE("environment variables with bad values are refused, naming the variable, on every process",
          "[gpu][world][errors][bad_input]") {
  bool const several = gpucomm::test::the_world().one_process_per_gpu();
  int const me = first_local(gpucomm::test::the_world());
  gpucomm::world_options env_only;  // heap_bytes and max_teams 0: read from the environment
  for (char const* bad : {"-1", "abc", "4G", " 5", "+5", "0x10", "0", "18446744073709551617", "999999999999999"}) {
    INFO("GPUCOMM_HEAP_BYTES=" << bad);
    // Under mpirun only PE 1 has the bad value: every process must still throw.
    scoped_env const env("GPUCOMM_HEAP_BYTES", !several || me == 1 ? bad : "67108864");
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(env_only); }), Catch::Contains("GPUCOMM_HEAP_BYTES=") &&
                                                                           Catch::Contains("is not a decimal count") &&
                                                                           Catch::Contains("e.g. 4294967296"));
  }
  for (char const* bad : {"2", "x", "-5", "1048577", "32 "}) {
    INFO("GPUCOMM_MAX_TEAMS=" << bad);
    scoped_env const heap("GPUCOMM_HEAP_BYTES", "67108864");
    scoped_env const env("GPUCOMM_MAX_TEAMS", !several || me == 1 ? bad : "32");
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(env_only); }),
               Catch::Contains("GPUCOMM_MAX_TEAMS=") && Catch::Contains("is not a decimal count from 3"));
  }
  for (char const* bad : {"0", "-1", "1s", "86400001", " 5", "0x10"}) {
    INFO("GPUCOMM_WAIT_TIMEOUT_MS=" << bad);
    scoped_env const heap("GPUCOMM_HEAP_BYTES", "67108864");
    scoped_env const env("GPUCOMM_WAIT_TIMEOUT_MS", !several || me == 1 ? bad : "20000");
    CHECK_THAT(
        error_of([&] { gpucomm::test::make_world(env_only); }),
        Catch::Contains("GPUCOMM_WAIT_TIMEOUT_MS=") && Catch::Contains("is not a decimal count from 1 to 86400000"));
  }
  {
    gpucomm::world_options negative;
    negative.heap_bytes = std::size_t{64} << 20;
    negative.wait_timeout = std::chrono::milliseconds(!several || me == 1 ? -1 : 0);
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(negative); }),
               Catch::Contains("world_options::wait_timeout is -1 ms"));
  }
  {
    // Good values are taken: leading zeros are decimal, not octal.
    scoped_env const heap("GPUCOMM_HEAP_BYTES", "067108864");
    scoped_env const teams("GPUCOMM_MAX_TEAMS", "5");
    scoped_env const wait("GPUCOMM_WAIT_TIMEOUT_MS", "0300");
    auto w = gpucomm::test::make_world(env_only);
    CHECK(w->heap_capacity() >= (std::size_t{67108864} / 2));
    CHECK(w->heap_capacity() <= std::size_t{67108864} + (std::size_t{2} << 20));
    CHECK(w->max_teams() == 5);
    CHECK(w->wait_timeout_ns() == 300'000'000);
  }
  if (several) {
    // Good values that differ between processes: the heaps and control blocks would not match.
    scoped_env const heap("GPUCOMM_HEAP_BYTES", me == 1 ? "134217728" : "67108864");
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(env_only); }), Catch::Contains("the heap size differs"));
    scoped_env const same("GPUCOMM_HEAP_BYTES", "67108864");
    scoped_env const teams("GPUCOMM_MAX_TEAMS", me == 1 ? "40" : "32");
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(env_only); }), Catch::Contains("the team limit differs"));
    scoped_env const same_teams("GPUCOMM_MAX_TEAMS", "32");
    scoped_env const wait("GPUCOMM_WAIT_TIMEOUT_MS", me == 1 ? "5000" : "20000");
    CHECK_THAT(error_of([&] { gpucomm::test::make_world(env_only); }), Catch::Contains("the wait timeout differs"));
  }
  gpucomm::world_options huge;
  huge.heap_bytes = std::size_t{1} << 60;
  CHECK_THAT(error_of([&] { gpucomm::test::make_world(huge); }), Catch::Contains("2^47 bytes"));
}

TEST_CASE("load/store filters that differ across processes fail on every process", "[gpu][world][errors][bad_input]") {
  auto& w = gpucomm::test::the_world();
  if (!w.one_process_per_gpu()) {
    SUCCEED("one process has one filter");
    return;
  }
  gpucomm::world_options o;
  o.heap_bytes = std::size_t{64} << 20;
  bool const strict = first_local(w) == 1;
  o.load_store_filter = [strict](int from, int to) { return !(strict && from == 0 && to == 1); };
  CHECK_THAT(error_of([&] { gpucomm::test::make_world(o); }),
             Catch::Contains("load/store filter") && Catch::Contains("same world_options::load_store_filter"));
}

TEST_CASE("collective launchers refuse a root outside the team and null buffers before launching",
          "[gpu][world][errors][bad_input][collectives]") {
  auto& w = gpucomm::test::the_world();
  int const me = first_local(w);
  int const n = w.npes();
  gpucomm::team_workspace ws(w, w.team_world());
  auto buf = w.alloc<float>(64);
  float* const p = buf.ptr(me).get();
  cudaStream_t const s = w.stream(me);
  for (int root : {-1, n}) {
    std::string const expected = "root " + std::to_string(root) + " is not a rank of the team";
    CHECK_THAT(error_of([&] { gpucomm::broadcast(w, ws, me, p, p, 64, root, s); }), Catch::Contains(expected));
    CHECK_THAT(error_of([&] { gpucomm::reduce(w, ws, me, p, p, 64, gpucomm::reduction::sum{}, root, s); }),
               Catch::Contains(expected));
  }
  CHECK_THAT(error_of([&] {
               gpucomm::allreduce(w, ws, me, static_cast<float*>(nullptr), p, 64, gpucomm::reduction::sum{}, s);
             }),
             Catch::Contains("dst is null, for 64 elements"));
  CHECK_THAT(error_of([&] { gpucomm::allgather(w, ws, me, p, static_cast<float const*>(nullptr), 64, s); }),
             Catch::Contains("src is null"));
  // What may be null is accepted: src away from a broadcast's root, dst away from a reduce's root.
  using gpucomm::detail::launch_problem;
  gpucomm::team const t = w.team_world();
  CHECK(launch_problem(gpucomm::detail::broadcast_call<float>{p, nullptr, 64, 0}, t, 1).empty());
  CHECK_FALSE(launch_problem(gpucomm::detail::broadcast_call<float>{p, nullptr, 64, 0}, t, 0).empty());
  CHECK(launch_problem(gpucomm::detail::reduce_call<float, gpucomm::reduction::sum>{nullptr, p, 64, 0}, t, 1).empty());
  CHECK(launch_problem(gpucomm::detail::allgather_call<float>{nullptr, nullptr, 0}, t, 0).empty());
  finish(w);  // nothing was launched, and the streams are fine
}

// ---- device misuse: traps, run in a child process ------------------------------------------------

namespace {

__global__ void put_to_pe(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<int> dst, int const* src, int pe) {
  c.put(gpucomm::this_thread(), dst, src, 1, pe);
}

/// Set in the child's environment: the hidden cases trap only there, never when a filter that
/// names no tags (an exclusion such as "~[verbs]") happens to select them.
constexpr char const* child_marker = "GPUCOMM_TEST_DEATH_CHILD";

/// The output and exit status of this binary running the one hidden case `name` (one process).
struct child_result {
  int status = -1;
  std::string output;
};
child_result run_hidden_case(std::string const& name) {
  char path[] = "/tmp/gpucomm-death-XXXXXX";
  int const fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  std::string self = "/proc/self/exe";
  std::vector<char*> argv = {self.data(), const_cast<char*>(name.c_str()), nullptr};
  pid_t pid = 0;
  ::setenv(child_marker, "1", 1);
  int const rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  ::unsetenv(child_marker);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  REQUIRE(rc == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  child_result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  r.output = text.str();
  ::unlink(path);
  return r;
}

/// In the child: runs `launch` on PE 0 and ends the process with 42 when the kernel failed (the
/// expected trap), 0 when it did not.
template <class Launch>
void expect_trap(Launch const& launch) {
  if (!std::getenv(child_marker)) {
    SUCCEED("runs only in the child process of its visible case");
    return;
  }
  auto& w = gpucomm::test::the_world();
  int const pe = w.local_pes().front();
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  launch(w, pe);
  cudaError_t const launched = cudaGetLastError();
  cudaError_t const done = cudaStreamSynchronize(w.stream(pe));
  std::printf("kernel: launch %s, end %s\n", cudaGetErrorName(launched), cudaGetErrorName(done));
  std::fflush(stdout);
  std::_Exit(launched == cudaSuccess && done != cudaSuccess ? 42 : 0);
}

void check_child_trapped(std::string const& name, std::string const& message) {
  if (gpucomm::test::under_mpi()) {
    SUCCEED("a trap kills the CUDA context: run in a child process of a plain launch only");
    return;
  }
  child_result const r = run_hidden_case(name);
  INFO(r.output);
  CHECK(r.status == 42);
  CHECK_THAT(r.output, Catch::Contains(message) && Catch::Contains("trapping"));
}

}  // namespace

TEST_CASE("death: a put to a PE outside the world", "[.death]") {
  expect_trap([](gpucomm::world& w, int pe) {
    static auto buf = w.alloc<int>(1);
    put_to_pe<<<1, 1, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe), buf.ptr(pe).get(), w.npes());
  });
}

TEST_CASE("death: a put to memory outside the symmetric heap", "[.death]") {
  expect_trap([](gpucomm::world& w, int pe) {
    static auto buf = w.alloc<int>(1);
    int* outside = nullptr;
    GPUCOMM_TEST_CUDA(cudaMalloc(&outside, sizeof(int)));
    put_to_pe<<<1, 1, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), gpucomm::sym_ptr<int>(outside),
                                         buf.ptr(pe).get(), 0);
  });
}

TEST_CASE("debug builds trap on a device operation with a PE outside the world", "[gpu][errors][bad_input]") {
  check_child_trapped("death: a put to a PE outside the world", "out of range");
}

TEST_CASE("debug builds trap on a device operation with a pointer outside the symmetric heap",
          "[gpu][errors][bad_input]") {
  check_child_trapped("death: a put to memory outside the symmetric heap", "is not in this PE's symmetric heap");
}
