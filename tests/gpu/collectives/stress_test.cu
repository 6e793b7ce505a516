// The collectives suite (every transport under test): slot reuse under stress. Thousands of
// back-to-back allreduces through the host launcher, on the default workspace, of sizes that change
// from call to call, so that the algorithm (packets, one_shot, two_shot) and the CTA count switch
// between calls on the same parts; in place and out of place, 8-byte aligned and not; with random
// delays on some members before some calls, so that members run out of step; plainly and replayed
// from CUDA graphs; and the same with allgather, reduce_scatter and alltoall mixed in, so that every
// protocol's steps follow each other's on the same parts. Every destination is poisoned first, and
// every element of every call, and the guard behind each, is checked against a host reference.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shapes.cuh"

using namespace gpucomm::test::coll;

namespace {

/// Holds this PE's stream for `ns` nanoseconds (one thread), so that its next call starts late.
/// Loaded before the first call (world::prepare): loading it lazily, at its first launch, would wait
/// for the collectives already running on the GPU, which may be waiting for this PE's next call.
__global__ void delay_kernel(std::uint64_t ns) {
  std::uint64_t const start = gpucomm::detail::now_ns();
  while (gpucomm::detail::now_ns() - start < ns) {
  }
}

enum class stress_kind { allreduce, allgather, reduce_scatter, alltoall };

/// One call of the plan: collective k on n ints (allreduce: n of the src pool at src_at, or in
/// place of the dst pool, reduced into the dst pool at dst_at; the others as their headers say,
/// src and dst of team size x n where the collective has them so).
struct stress_call {
  stress_kind k = stress_kind::allreduce;
  std::size_t n = 0;
  std::size_t src_at = 0;
  std::size_t dst_at = 0;
  bool in_place = false;
  std::uint64_t salt = 0;
};

/// A batch of calls with the pools they need (the same plan in every process).
struct stress_plan {
  std::vector<stress_call> calls;
  std::size_t src_elements = 0;
  std::size_t dst_elements = 0;
};

/// Counts spread over both protocols and many CTA counts: mostly packet sizes (up to 256 KiB of
/// ints at two members), the rest one_shot and two_shot sizes; odd counts everywhere.
std::size_t pick_count(std::uint64_t m) {
  static std::size_t const small[] = {1,    2,    3,    5,    16,   31,    255,   256,   257,   1000,
                                      1025, 2051, 4096, 8191, 8193, 16384, 32771, 49999, 65536, 65537};
  static std::size_t const large[] = {100003, 131072, 262147, 400001};
  if (m % 8 < 6) return small[(m >> 8) % (sizeof(small) / sizeof(small[0]))];
  return large[(m >> 8) % (sizeof(large) / sizeof(large[0]))] / static_cast<std::size_t>(model_slowdown) + 1;
}

/// Elements of src and of dst a call takes, on a team of `size`.
std::size_t src_count(stress_call const& c, int size) {
  bool const wide = c.k == stress_kind::reduce_scatter || c.k == stress_kind::alltoall;
  return wide ? static_cast<std::size_t>(size) * c.n : c.n;
}
std::size_t dst_count(stress_call const& c, int size) {
  bool const wide = c.k == stress_kind::allgather || c.k == stress_kind::alltoall;
  return wide ? static_cast<std::size_t>(size) * c.n : c.n;
}

/// `count` calls, allreduces only or (`family`) a mix of the four kinds (allreduce in place at
/// times; the others out of place), on a team of `size`.
stress_plan make_plan(std::uint64_t seed, int count, int size, bool family = false) {
  stress_plan p;
  for (int i = 0; i < count; ++i) {
    std::uint64_t const m = gpucomm::test::mix(seed, 0, static_cast<std::uint64_t>(i));
    stress_call c;
    if (family) c.k = static_cast<stress_kind>((m >> 28) % 4);
    c.n = pick_count(m);
    if (c.k != stress_kind::allreduce) c.n = c.n / 4 + 1;  // team size x n: keep the pools in bounds
    c.salt = seed * 100000 + static_cast<std::uint64_t>(i);
    c.in_place = c.k == stress_kind::allreduce && (m >> 20) % 5 == 0;
    std::size_t const skew = (m >> 24) % 3 == 0 ? 1 : 0;  // an odd element offset: not 8-byte aligned
    if (!c.in_place) {
      c.src_at = p.src_elements + skew;
      p.src_elements = c.src_at + src_count(c, size);
    }
    c.dst_at = p.dst_elements + skew;
    p.dst_elements = c.dst_at + dst_count(c, size) + guard_elements;
    p.calls.push_back(c);
  }
  p.src_elements += 1;
  return p;
}

constexpr int poison_int = static_cast<int>(0xA5A5A5A5u);

/// What PE pe's dst pool holds before the calls: poison, and the inputs of the in-place calls.
std::vector<int> dst_before(stress_plan const& p, int pe) {
  std::vector<int> v(p.dst_elements, poison_int);
  for (stress_call const& c : p.calls)
    if (c.in_place)
      for (std::size_t i = 0; i < c.n; ++i) v[c.dst_at + i] = value_of<int>(c.salt, pe, i);
  return v;
}

std::vector<int> src_of(stress_plan const& p, int pe, int size) {
  std::vector<int> v(p.src_elements, 0);
  for (stress_call const& c : p.calls)
    if (!c.in_place)
      for (std::size_t i = 0; i < src_count(c, size); ++i) v[c.src_at + i] = value_of<int>(c.salt, pe, i);
  return v;
}

/// Launches call `k` of the plan for PE pe on its stream, after a delay on some (call, PE) pairs.
void issue(gpucomm::world& w, team_workspace const& ws, stress_plan const& p, std::size_t k, int pe,
           sym_array<int> const& src, sym_array<int> const& dst) {
  stress_call const& c = p.calls[k];
  std::uint64_t const m = gpucomm::test::mix(c.salt, static_cast<std::uint64_t>(pe), 77);
  if (m % 4 == 0) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    delay_kernel<<<1, 1, 0, w.stream(pe)>>>((m >> 8) % 20000);
    GPUCOMM_TEST_CUDA(cudaGetLastError());
  }
  int* const d = dst.ptr(pe).get() + c.dst_at;
  int const* const s = c.in_place ? d : src.ptr(pe).get() + c.src_at;
  switch (c.k) {
    case stress_kind::allreduce:
      gpucomm::allreduce<transport_under_test>(w, ws, pe, d, s, c.n, reduction::sum{}, w.stream(pe));
      break;
    case stress_kind::allgather:
      gpucomm::allgather<transport_under_test>(w, ws, pe, d, s, c.n, w.stream(pe));
      break;
    case stress_kind::reduce_scatter:
      gpucomm::reduce_scatter<transport_under_test>(w, ws, pe, d, s, c.n, reduction::sum{}, w.stream(pe));
      break;
    case stress_kind::alltoall:
      gpucomm::alltoall<transport_under_test>(w, ws, pe, d, s, c.n, w.stream(pe));
      break;
  }
}

/// Every call's result at team rank q, at the call's place in the dst pool (sums wrap as int sum
/// does), poison in the guards.
std::vector<int> expected_dst(team const& t, stress_plan const& p, int q) {
  std::vector<int> v(p.dst_elements, poison_int);
  auto input = [&](stress_call const& c, int r, std::size_t i) { return value_of<int>(c.salt, t.pe_of(r), i); };
  auto sum = [&](stress_call const& c, std::size_t i) {
    std::uint32_t acc = 0;
    for (int r = 0; r < t.size; ++r) acc += static_cast<std::uint32_t>(input(c, r, i));
    return static_cast<int>(acc);
  };
  auto const qn = [&](stress_call const& c) { return static_cast<std::size_t>(q) * c.n; };
  for (stress_call const& c : p.calls) {
    for (std::size_t i = 0; i < c.n; ++i) {
      for (int r = 0; r < t.size; ++r) {
        std::size_t const rn = static_cast<std::size_t>(r) * c.n;
        if (c.k == stress_kind::allgather) v[c.dst_at + rn + i] = input(c, r, i);
        if (c.k == stress_kind::alltoall) v[c.dst_at + rn + i] = input(c, r, qn(c) + i);
      }
      if (c.k == stress_kind::allreduce) v[c.dst_at + i] = sum(c, i);
      if (c.k == stress_kind::reduce_scatter) v[c.dst_at + i] = sum(c, qn(c) + i);
    }
  }
  return v;
}

/// Counts the elements of every call, and of the guard behind each, that differ from `want` at
/// PE pe; names the first.
std::size_t check_plan(gpucomm::world& w, stress_plan const& p, std::vector<int> const& want, int pe,
                       sym_array<int> const& dst, std::string& first) {
  auto const got = download(w, pe, dst.ptr(pe), p.dst_elements);
  std::size_t bad = 0;
  static char const* const names[] = {"allreduce", "allgather", "reduce_scatter", "alltoall"};
  for (std::size_t k = 0; k < p.calls.size(); ++k) {
    stress_call const& c = p.calls[k];
    for (std::size_t i = 0; i < dst_count(c, w.npes()) + guard_elements; ++i) {
      std::size_t const at = c.dst_at + i;
      if (got[at] != want[at] && bad++ == 0) {
        first = "call " + std::to_string(k) + " (" + names[static_cast<int>(c.k)] + ", n=" + std::to_string(c.n) +
                (c.in_place ? ", in place" : "") + ", dst offset " + std::to_string(c.dst_at) + ") element " +
                std::to_string(i) + ": got " + std::to_string(got[at]) + ", want " + std::to_string(want[at]);
      }
    }
  }
  return bad;
}

/// Uploads the plan's inputs and poisoned outputs at every local PE, then waits for every process.
void prepare(gpucomm::world& w, stress_plan const& p, sym_array<int> const& src, sym_array<int> const& dst) {
  for (int pe : w.local_pes()) {
    upload(w, pe, src.ptr(pe), src_of(p, pe, w.npes()));
    upload(w, pe, dst.ptr(pe), dst_before(p, pe));
  }
  w.barrier();
}

void check_all(gpucomm::world& w, team const& t, stress_plan const& p, sym_array<int> const& dst,
               std::string const& when) {
  for (int pe : w.local_pes()) {
    std::string first;
    std::size_t const bad = check_plan(w, p, expected_dst(t, p, t.rank_of(pe)), pe, dst, first);
    INFO(when << ": PE " << pe << ", " << bad << " elements wrong; first: " << first);
    CHECK(bad == 0);
  }
  w.barrier();
}

}  // namespace

TEST_CASE("thousands of back-to-back allreduces of changing sizes, every result checked",
          "[gpu][collectives][stress]") {
  auto& w = gpucomm::test::the_world();
  w.prepare(delay_kernel);
  team const t = w.team_world();
  team_workspace ws(w, t);  // the default: what the launchers are tuned for
  // Fewer where a host thread moves the data (ProxyQueue's copies serve every PE of the GPU in turn).
  int const batches = (gpucomm::test::host_agent ? 6 : 20) / model_slowdown;
  int const per_batch = 100;
  std::set<std::pair<int, int>> shapes;  // (CTAs, threads) the launcher chose
  for (int b = 0; b < batches; ++b) {
    stress_plan const p = make_plan(1000 + static_cast<std::uint64_t>(b), per_batch, t.size);
    auto src = w.alloc<int>(p.src_elements);
    auto dst = w.alloc<int>(p.dst_elements);
    prepare(w, p, src, dst);
    for (std::size_t k = 0; k < p.calls.size(); ++k) {
      gpucomm::launch_shape const s = gpucomm::allreduce_launch_shape<int, transport_under_test>(ws, p.calls[k].n);
      shapes.insert({s.ctas, s.threads});
      for_each_local_pe(w, [&](int pe) { issue(w, ws, p, k, pe, src, dst); });
    }
    finish(w);
    check_all(w, t, p, dst, "batch " + std::to_string(b));
  }
  // The calls took both protocols and several CTA counts (where packets exist and the cap allows).
  if constexpr (gpucomm::detail::load_stores_everywhere<transport_under_test>) {
    INFO("launch shapes seen: " << shapes.size() << ", CTA limit " << ws.cta_limit());
    if (ws.cta_limit() > 2 && ws.members().size > 1) CHECK(shapes.size() >= 3);
  }
}

TEST_CASE("allreduces of changing sizes replayed from CUDA graphs, every replay checked",
          "[gpu][collectives][stress][graph]") {
  auto& w = gpucomm::test::the_world();
  w.prepare(delay_kernel);
  team const t = w.team_world();
  team_workspace ws(w, t);
  stress_plan const p = make_plan(77, 60 / model_slowdown + 2, t.size);
  auto src = w.alloc<int>(p.src_elements);
  auto dst = w.alloc<int>(p.dst_elements);
  prepare(w, p, src, dst);
  std::map<int, cudaGraphExec_t> execs;
  for_each_local_pe(w, [&](int pe) {
    cudaStream_t const s = w.stream(pe);
    cudaGraph_t graph = nullptr;
    GPUCOMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (std::size_t k = 0; k < p.calls.size(); ++k) issue(w, ws, p, k, pe, src, dst);
    GPUCOMM_TEST_CUDA(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    GPUCOMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    GPUCOMM_TEST_CUDA(cudaGraphDestroy(graph));
    execs[pe] = exec;
  });
  for (int replay = 0; replay < 5; ++replay) {
    // Fresh poison (and in-place inputs) before every replay: each replay must write every result.
    for (int pe : w.local_pes()) upload(w, pe, dst.ptr(pe), dst_before(p, pe));
    w.barrier();
    for_each_local_pe(w, [&](int pe) { GPUCOMM_TEST_CUDA(cudaGraphLaunch(execs[pe], w.stream(pe))); });
    finish(w);
    check_all(w, t, p, dst, "replay " + std::to_string(replay));
  }
  for (auto const& [pe, exec] : execs) GPUCOMM_TEST_CUDA(cudaGraphExecDestroy(exec));
  w.barrier();
}

TEST_CASE("allgathers, reduce_scatters, alltoalls and allreduces mixed back to back, every result checked",
          "[gpu][collectives][stress]") {
  auto& w = gpucomm::test::the_world();
  w.prepare(delay_kernel);
  team const t = w.team_world();
  team_workspace ws(w, t);
  int const batches = (gpucomm::test::host_agent ? 3 : 10) / model_slowdown + 1;
  for (int b = 0; b < batches; ++b) {
    stress_plan const p = make_plan(5000 + static_cast<std::uint64_t>(b), 100, t.size, /*family=*/true);
    auto src = w.alloc<int>(p.src_elements);
    auto dst = w.alloc<int>(p.dst_elements);
    prepare(w, p, src, dst);
    for (std::size_t k = 0; k < p.calls.size(); ++k)
      for_each_local_pe(w, [&](int pe) { issue(w, ws, p, k, pe, src, dst); });
    finish(w);
    check_all(w, t, p, dst, "batch " + std::to_string(b));
  }
}
