// MoE dispatch given an expert id past the plan's experts, in a debug build (the test binaries are):
// the kernel traps with a message naming the problem (read it in the log), the other members'
// waits give up after the world's wait timeout (1 s here) and trap, and world::synchronize throws.
// A trap loses the CUDA context for the rest of the process, so the case is hidden and runs alone
// in a fresh process, by hand: `gpucomm_gpu_tests_coll "[moe_failure]"` (its world is never
// destroyed).
#include <cstdio>
#include <string>

#include <gpucomm/host/moe.cuh>

#include "shapes.cuh"

using namespace gpucomm::test::coll;

TEST_CASE("moe failure: an expert id past the plan's experts traps, naming it", "[.failure][moe_failure][gpu]") {
  auto options = gpucomm::test::test_world_options();
  options.wait_timeout = std::chrono::milliseconds(1000);
  auto& w = *gpucomm::test::make_world(std::move(options)).release();  // never destroyed
  gpucomm::moe_shape const s{.experts_per_rank = 2, .hidden = 128, .top_k = 2, .max_tokens = 4, .max_recv_rows = 64};
  gpucomm::moe_plan plan(w, w.team_world(), s);
  gpucomm::moe_prepare<transport_under_test>(w);
  auto tokens = w.alloc<std::uint16_t>(4 * 128);
  auto ids = w.alloc<int>(8);
  auto weights = w.alloc<float>(8);
  auto rows = w.alloc<std::uint16_t>(64 * 128);
  auto counts = w.alloc<int>(2);
  int const experts = 2 * w.npes();
  for (int pe : w.local_pes()) {
    std::vector<int> id(8, 0);
    if (pe == 0) id[3] = experts;  // one past the last expert
    upload(w, pe, ids.ptr(pe), id);
    fill_bytes(w, pe, tokens.ptr(pe).get(), 0, tokens.size_bytes());
    fill_bytes(w, pe, weights.ptr(pe).get(), 0, weights.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    gpucomm::moe_dispatch<transport_under_test>(w, plan, pe,
                                                {.tokens = reinterpret_cast<__nv_bfloat16 const*>(tokens.ptr(pe).get()),
                                                 .topk_ids = ids.ptr(pe).get(),
                                                 .topk_weights = weights.ptr(pe).get(),
                                                 .num_tokens = 4,
                                                 .recv_rows = rows.ptr(pe).get(),
                                                 .recv_counts = counts.ptr(pe).get()},
                                                w.stream(pe));
  });
  // The trapping PE prints "gpucomm::moe_dispatch: an expert id outside [-1, experts_per_rank x
  // members) ..." (in the log); the waiting PEs print their wait reports. Every process throws.
  std::string const error = gpucomm::test::error_of([&] { w.synchronize(); });
  std::printf("synchronize: %s\n", error.c_str());
  CHECK(error != "(no error)");
  w.bootstrap().barrier();
}
