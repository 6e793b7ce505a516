// The collectives suite (every transport under test): collectives replayed 1000 times in a CUDA
// graph with no reset between replays, fresh inputs each replay and every result checked on the
// device; two teams' collectives running at the same time on one PE (two groups, a workspace
// each); team_workspace's refusals.
#include "shapes.cuh"

using namespace gpucomm::test::coll;
using gpucomm::test::error_of;

namespace {

/// Expected allreduce(sum) of value_of<int>(salt, pe, i) + round over the team, for round 0: the
/// kernels add team size * round (wrapping, as int sum does).
std::vector<int> expected_sums(team const& t, std::uint64_t salt, std::size_t n) {
  std::vector<int> e(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t acc = 0;
    for (int r = 0; r < t.size; ++r) acc += static_cast<std::uint32_t>(value_of<int>(salt, t.pe_of(r), i));
    e[i] = static_cast<int>(acc);
  }
  return e;
}

struct rounds_args {
  comm_t c;
  collective_workspace ws[2];
  int* base[2];      // local: this PE's inputs for round 0
  int* src[2];       // heap
  int* dst[2];       // heap
  int* expected[2];  // local
  std::size_t n;
  int rounds;
  unsigned* replays;  // local: replays so far (graph test)
  unsigned long long* errors;
};

/// Warp k runs `rounds` collectives on a.ws[k] (if this PE is a member): inputs base + round (+
/// the replay number), allreduce one_shot, then two_shot, then automatic, each checked against expected + size *
/// round; dst poisoned after each check.
__global__ void rounds_kernel(rounds_args a, int warps) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  int const k = static_cast<int>(threadIdx.x / 32);
  if (k >= warps) return;
  collective_workspace const& ws = a.ws[k];
  int const size = ws.members.size;
  if (!ws.members.contains(a.c.my_pe())) return;
  unsigned const replay = a.replays ? *a.replays : 0;
  unsigned long long bad = 0;
  for (int r = 0; r < a.rounds; ++r) {
    auto const shift = static_cast<unsigned>(r) + replay * static_cast<unsigned>(a.rounds);
    for (std::size_t i = warp.thread_rank(); i < a.n; i += 32)
      a.src[k][i] = static_cast<int>(static_cast<unsigned>(a.base[k][i]) + shift);
    warp.sync();
    for (int algo = 0; algo < 3; ++algo) {
      if (algo == 0)
        gpucomm::allreduce<gpucomm::allreduce_algorithm::one_shot>(a.c, warp, ws, a.dst[k], a.src[k], a.n,
                                                                   reduction::sum{});
      else if (algo == 1)
        gpucomm::allreduce<gpucomm::allreduce_algorithm::two_shot>(a.c, warp, ws, a.dst[k], a.src[k], a.n,
                                                                   reduction::sum{});
      else  // packet rounds where the transport has load/store, between the other two's rounds
        gpucomm::allreduce(a.c, warp, ws, a.dst[k], a.src[k], a.n, reduction::sum{});
      for (std::size_t i = warp.thread_rank(); i < a.n; i += 32) {
        auto const want =
            static_cast<int>(static_cast<unsigned>(a.expected[k][i]) + shift * static_cast<unsigned>(size));
        bad += a.dst[k][i] != want;
        a.dst[k][i] = 0x5a5a5a5a;
      }
      warp.sync();
    }
  }
  report(a.errors, bad);
  warp.sync();
  if (a.replays && k == 0 && warp.thread_rank() == 0) ++*a.replays;
}

/// Buffers of one team's rounds at every PE.
struct team_buffers {
  team t;
  team_workspace ws;
  sym_array<int> base, src, dst, expected;
  team_buffers(gpucomm::world& w, team const& tt, std::size_t n, std::uint64_t salt)
      : t(tt),
        ws(w, tt, {.block_bytes = 256, .parts = 1}),
        base(w.alloc<int>(n)),
        src(w.alloc<int>(n)),
        dst(w.alloc<int>(n)),
        expected(w.alloc<int>(n)) {
    auto const e = expected_sums(tt, salt, n);
    for (int pe : w.local_pes()) {
      std::vector<int> in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = value_of<int>(salt, pe, i);
      upload(w, pe, base.ptr(pe), in);
      upload(w, pe, expected.ptr(pe), e);
    }
  }
};

}  // namespace

TEST_CASE("allreduce replayed 1000 times in a CUDA graph, every replay checked", "[gpu][collectives][graph]") {
  auto& w = gpucomm::test::the_world();
  std::size_t const n = 100;  // two rounds of 256-byte blocks one_shot
  team_buffers b(w, w.team_world(), n, 31);
  auto errors = make_counters(w);
  auto replays = w.alloc<unsigned>(1);
  fill_all(w, replays, 0u);
  w.barrier();
  int const replay_count = 1000 / model_slowdown;
  std::map<int, cudaGraphExec_t> execs;
  for_each_local_pe(w, [&](int pe) {
    rounds_args a{w.comm<transport_under_test>(pe),
                  {b.ws.view(pe), b.ws.view(pe)},
                  {b.base.ptr(pe).get(), nullptr},
                  {b.src.ptr(pe).get(), nullptr},
                  {b.dst.ptr(pe).get(), nullptr},
                  {b.expected.ptr(pe).get(), nullptr},
                  n,
                  1,
                  replays.ptr(pe).get(),
                  errors.ptr(pe).get()};
    cudaStream_t const s = w.stream(pe);
    cudaGraph_t graph = nullptr;
    GPUCOMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    rounds_kernel<<<1, 32, 0, s>>>(a, 1);
    GPUCOMM_TEST_CUDA(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    GPUCOMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    GPUCOMM_TEST_CUDA(cudaGraphDestroy(graph));
    execs[pe] = exec;
  });
  for (int r = 0; r < replay_count; ++r)
    for_each_local_pe(w, [&](int pe) { GPUCOMM_TEST_CUDA(cudaGraphLaunch(execs[pe], w.stream(pe))); });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    INFO("PE " << pe);
    CHECK(download(w, pe, replays.ptr(pe), 1)[0] == static_cast<unsigned>(replay_count));
    CHECK(download(w, pe, errors.ptr(pe), 1)[0] == 0);
    GPUCOMM_TEST_CUDA(cudaGraphExecDestroy(execs[pe]));
  }
  w.barrier();
}

TEST_CASE("two teams' collectives at the same time on one PE", "[gpu][collectives][teams]") {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  std::size_t const n = 77;
  team const evens = w.team_split(w.team_world(), 0, 2, (npes + 1) / 2);
  {
    team_buffers a(w, w.team_world(), n, 41);
    team_buffers b(w, evens, n, 42);
    auto errors = make_counters(w);
    w.barrier();
    int const rounds = 50 / model_slowdown + 1;
    for_each_local_pe(w, [&](int pe) {
      rounds_args r{w.comm<transport_under_test>(pe),
                    {a.ws.view(pe), b.ws.view(pe)},
                    {a.base.ptr(pe).get(), b.base.ptr(pe).get()},
                    {a.src.ptr(pe).get(), b.src.ptr(pe).get()},
                    {a.dst.ptr(pe).get(), b.dst.ptr(pe).get()},
                    {a.expected.ptr(pe).get(), b.expected.ptr(pe).get()},
                    n,
                    rounds,
                    nullptr,
                    errors.ptr(pe).get()};
      rounds_kernel<<<1, 64, 0, w.stream(pe)>>>(r, 2);
    });
    finish(w);
    w.barrier();
    for (int pe : w.local_pes()) {
      INFO("PE " << pe);
      CHECK(download(w, pe, errors.ptr(pe), 1)[0] == 0);
    }
    w.barrier();
  }
  w.team_destroy(evens);
}

TEST_CASE("team_workspace refuses bad input", "[gpu][collectives][errors]") {
  auto& w = gpucomm::test::the_world();
  CHECK_THAT(error_of([&] { team_workspace ws(w, team{}); }), Catch::Contains("not a live team"));
  CHECK_THAT(error_of([&] { team_workspace ws(w, w.team_world(), {.block_bytes = 256, .parts = 0}); }),
             Catch::Contains("parts 0"));
  CHECK_THAT(error_of([&] { team_workspace ws(w, w.team_world(), {.block_bytes = 0, .parts = 1}); }),
             Catch::Contains("block_bytes 0"));
  if (w.npes() > 1) {  // one member has no channel slots: any channel block takes no memory
    CHECK_THAT(error_of([&] {
                 team_workspace ws(w, w.team_world(),
                                   {.block_bytes = 256, .parts = 1, .channel_block_bytes = 1ull << 50});
               }),
               Catch::Contains("channel blocks"));
  }
  team_workspace ws(w, w.team_world(), {.block_bytes = 1000, .parts = 2});
  CHECK(ws.block_bytes() == 1024);
  std::size_t const channel = gpucomm::collective_workspace::automatic_channel_block_bytes(w.npes(), 1024, 2);
  CHECK(ws.channel_block_bytes() == channel);
  CHECK(ws.size_bytes() == gpucomm::collective_workspace::bytes(w.npes(), 1024, channel, 2));
  CHECK(ws.size_bytes() == team_workspace::size_for(w.npes(), {.block_bytes = 1000, .parts = 2}));
  team_workspace asked(w, w.team_world(), {.block_bytes = 1000, .parts = 2, .channel_block_bytes = 5000});
  CHECK(asked.channel_block_bytes() == 5120);
}
