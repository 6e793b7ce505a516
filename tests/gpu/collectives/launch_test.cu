// The collectives suite (every transport under test): the host launchers, over every local PE
// with symmetric arrays and per PE on a stream, captured in a CUDA graph and replayed with the
// destination poisoned before each replay; a launcher called for a PE outside the team is refused.
#include "shapes.cuh"

using namespace gpucomm::test::coll;
using gpucomm::test::error_of;

namespace {

/// Counts the elements of local PE pe's dst that differ from the allreduce(sum) of every member's
/// value_of<float>(salt, member, i).
std::size_t allreduce_misses(gpucomm::world& w, team const& t, int pe, float const* dst, std::size_t n,
                             std::uint64_t salt) {
  auto const got = download(w, pe, dst, n);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> inputs;
    for (int r = 0; r < t.size; ++r) inputs.push_back(value_of<float>(salt, t.pe_of(r), i));
    bad += !matches_fold<reduction::sum>(inputs, got[i]);
  }
  return bad;
}

}  // namespace

TEST_CASE("host launchers run the collectives on every local PE, also from a CUDA graph", "[gpu][collectives]") {
  auto& w = gpucomm::test::the_world();
  team const world_team = w.team_world();
  std::size_t const n = 3000 / static_cast<std::size_t>(model_slowdown) + 1;
  team_workspace ws(w, world_team, {.block_bytes = 2048, .parts = 2});
  auto src = w.alloc<float>(n);
  auto dst = w.alloc<float>(n * static_cast<std::size_t>(w.npes()));
  std::uint64_t const salt = 71;
  for (int pe : w.local_pes()) {
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = value_of<float>(salt, pe, i);
    upload(w, pe, src.ptr(pe), in);
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
  }
  w.barrier();

  SECTION("every local PE, symmetric arrays") {
    gpucomm::allreduce<transport_under_test>(w, ws, dst, src, n, reduction::sum{});
    finish(w);
    for (int pe : w.local_pes()) {
      INFO("PE " << pe);
      CHECK(allreduce_misses(w, world_team, pe, dst.ptr(pe).get(), n, salt) == 0);
    }
    w.barrier();
    gpucomm::allgather<transport_under_test>(w, ws, dst, src, n);
    finish(w);
    for (int pe : w.local_pes()) {
      auto const got = download(w, pe, dst.ptr(pe), n * static_cast<std::size_t>(w.npes()));
      std::size_t bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        bad += got[i] != value_of<float>(salt, static_cast<int>(i / n), i % n);
      INFO("PE " << pe);
      CHECK(bad == 0);
    }
  }

  SECTION("one PE on a stream, captured in a graph and replayed") {
    std::map<int, cudaGraphExec_t> execs;
    for_each_local_pe(w, [&](int pe) {
      cudaStream_t const s = w.stream(pe);
      cudaGraph_t graph = nullptr;
      GPUCOMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      gpucomm::allreduce<transport_under_test, gpucomm::allreduce_algorithm::two_shot>(
          w, ws, pe, dst.ptr(pe).get(), src.ptr(pe).get(), n, reduction::sum{}, s);
      GPUCOMM_TEST_CUDA(cudaStreamEndCapture(s, &graph));
      cudaGraphExec_t exec = nullptr;
      GPUCOMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      GPUCOMM_TEST_CUDA(cudaGraphDestroy(graph));
      execs[pe] = exec;
    });
    for (int replay = 0; replay < 3; ++replay) {
      for_each_local_pe(w, [&](int pe) {
        GPUCOMM_TEST_CUDA(cudaMemsetAsync(dst.ptr(pe).get(), poison_byte, dst.size_bytes(), w.stream(pe)));
        GPUCOMM_TEST_CUDA(cudaGraphLaunch(execs[pe], w.stream(pe)));
      });
      finish(w);
      for (int pe : w.local_pes()) {
        INFO("PE " << pe << ", replay " << replay);
        CHECK(allreduce_misses(w, world_team, pe, dst.ptr(pe).get(), n, salt) == 0);
      }
      w.barrier();
    }
    for (auto const& [pe, exec] : execs) GPUCOMM_TEST_CUDA(cudaGraphExecDestroy(exec));
  }
  w.barrier();
}

TEST_CASE("a host launcher for a PE outside the team is refused", "[gpu][collectives][errors]") {
  auto& w = gpucomm::test::the_world();
  if (w.npes() < 2) return;
  team const last = w.team_split(w.team_world(), w.npes() - 1, 1, 1);
  {
    team_workspace ws(w, last);
    auto buf = w.alloc<int>(4);
    for (int pe : w.local_pes()) {
      if (last.contains(pe)) continue;
      INFO("PE " << pe);
      CHECK_THAT(error_of([&] {
                   gpucomm::allgather<transport_under_test>(w, ws, pe, buf.ptr(pe).get(), buf.ptr(pe).get(), 1,
                                                            w.stream(pe));
                 }),
                 Catch::Contains("not a member of the workspace's team"));
    }
    w.barrier();
  }
  w.team_destroy(last);
}
