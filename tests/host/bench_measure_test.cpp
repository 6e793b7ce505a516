// The benchmark harness's measure(): how many iterations a calibrated point runs, and that one slow
// calibration launch does not decide it.
#include "../../benchmarks/harness/harness.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

namespace {

/// A stand-in for a point's timed launch: `fixed_ms` per launch plus `per_iter_ms` per iteration,
/// except that launch number `slow_nth` (from 0) of those of `slow_iters` iterations takes `slow_ms`
/// (with 1, the warm-up is number 0). `idle`: the process times nothing (run returns no times).
struct fake_run {
  double fixed_ms = 0;
  double per_iter_ms = 0;
  int slow_iters = 0;
  int slow_nth = 0;
  double slow_ms = 0;
  bool idle = false;
  std::vector<int> launches = {};  // "= {}": initializers that name only the times warn without it

  std::vector<double> operator()(int iters) {
    int const nth = static_cast<int>(std::count(launches.begin(), launches.end(), iters));
    launches.push_back(iters);
    if (idle) return {};
    double const ms = iters == slow_iters && nth == slow_nth ? slow_ms : fixed_ms + per_iter_ms * iters;
    return {ms, 0.5 * ms};  // two timed streams; the slower one counts
  }
};

double first_ms(std::vector<double> const& ms, int) { return ms.empty() ? 0.0 : ms.front(); }

/// A point shaped like the 4 x H100 one: about 2 us fixed cost per launch and 4 us per iteration,
/// powers of two so the arithmetic is exact. One iteration is too short to time, so 32 calibrate:
/// target / ((1/512 + 32/256) / 32) = 16384 / 65 = 252.06 iterations.
constexpr double fixed_cost_ms = 1.0 / 512;
constexpr double per_iter_ms = 1.0 / 256;
constexpr int steady_iters = 252;

bench::plan bandwidth_plan() {
  bench::plan p;
  p.target_ms = 1.0;
  p.min_iters = 1;
  p.max_iters = 1000;
  p.reps = 5;
  return p;
}

}  // namespace

TEST_CASE("a point whose launches all take the same time runs target / per-iteration time iterations", "[bench]") {
  bench::plan const p = bandwidth_plan();
  fake_run run{.fixed_ms = fixed_cost_ms, .per_iter_ms = per_iter_ms};
  bench::measured const m = bench::measure(p, bench::collective{}, run, first_ms);
  CHECK(m.iters == steady_iters);
  CHECK(m.reps == p.reps);
  // Warm-up, three launches of one iteration, three of 32 (one is too short), then the repetitions.
  CHECK(run.launches == std::vector<int>{1, 1, 1, 1, 32, 32, 32, 252, 252, 252, 252, 252});

  SECTION("one iteration long enough to time needs no 32-iteration calibration") {
    fake_run long_run{.per_iter_ms = 0.25};
    CHECK(bench::measure(p, bench::collective{}, long_run, first_ms).iters == 4);
    CHECK(long_run.launches == std::vector<int>{1, 1, 1, 1, 4, 4, 4, 4, 4});
  }
}

TEST_CASE("one slow calibration launch does not set a point's iteration count", "[bench]") {
  bench::plan const p = bandwidth_plan();
  // A slow first launch of one iteration (0.09 ms) once looked long enough to time: the point
  // skipped the 32-iteration calibration and ran 1 / 0.09 = 11 iterations.
  SECTION("the first one-iteration launch") {
    fake_run run{
        .fixed_ms = fixed_cost_ms, .per_iter_ms = per_iter_ms, .slow_iters = 1, .slow_nth = 1, .slow_ms = 0.09};
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == steady_iters);
  }
  SECTION("the second one-iteration launch") {
    fake_run run{
        .fixed_ms = fixed_cost_ms, .per_iter_ms = per_iter_ms, .slow_iters = 1, .slow_nth = 2, .slow_ms = 0.09};
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == steady_iters);
  }
  SECTION("the first 32-iteration launch") {
    fake_run run{
        .fixed_ms = fixed_cost_ms, .per_iter_ms = per_iter_ms, .slow_iters = 32, .slow_nth = 0, .slow_ms = 3.0};
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == steady_iters);
  }
}

TEST_CASE("a calibrated iteration count stays within the plan's bounds", "[bench]") {
  bench::plan p = bandwidth_plan();
  p.min_iters = 4;
  p.max_iters = 200;
  SECTION("a fast point runs max_iters, even after a slow calibration launch") {
    fake_run run{.per_iter_ms = 1.0 / 1024, .slow_iters = 1, .slow_nth = 1, .slow_ms = 0.5};
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == 200);
  }
  SECTION("a slow point runs min_iters") {
    fake_run run{.per_iter_ms = 2.0};
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == 4);
  }
  SECTION("a point too fast to time runs max_iters") {
    fake_run run;
    CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == 200);
  }
}

TEST_CASE("a process that times nothing leaves the iteration count to the others", "[bench]") {
  bench::plan p = bandwidth_plan();
  p.min_iters = 2;
  std::vector<int> offered;
  bench::collective coll;
  coll.max_int = [&](int v) {
    offered.push_back(v);
    return v;
  };
  fake_run idle{.idle = true};
  bench::measured const m = bench::measure(p, coll, idle, first_ms);
  CHECK(offered == std::vector<int>{0});
  CHECK(m.iters == 2);  // max_int of 0 alone, raised to min_iters

  SECTION("and takes theirs") {
    coll.max_int = [](int) { return 300; };
    fake_run idle_again{.idle = true};
    CHECK(bench::measure(p, coll, idle_again, first_ms).iters == 300);
  }
}

TEST_CASE("every process makes the same launches whatever it measured", "[bench]") {
  // run() may hold collective calls: a process that launched once more than another would hang.
  // The collective answers are the same in every process (`all` is whether one iteration was long
  // enough to time in all of them); the times differ.
  bench::plan const p = bandwidth_plan();
  for (bool const long_enough_everywhere : {false, true}) {
    bench::collective coll;
    coll.all = [&](bool) { return long_enough_everywhere; };
    coll.max_int = [](int) { return 100; };
    fake_run timed{.fixed_ms = fixed_cost_ms, .per_iter_ms = per_iter_ms};
    fake_run slow_once{.per_iter_ms = 0.25, .slow_iters = 1, .slow_nth = 1, .slow_ms = 5.0};
    fake_run idle{.idle = true};
    bench::measure(p, coll, timed, first_ms);
    bench::measure(p, coll, slow_once, first_ms);
    bench::measure(p, coll, idle, first_ms);
    CAPTURE(long_enough_everywhere);
    CHECK(slow_once.launches == timed.launches);
    CHECK(idle.launches == timed.launches);
  }
}

TEST_CASE("a fixed-iteration point needs no calibration", "[bench]") {
  bench::plan p = bandwidth_plan();
  p.fixed_iters = 500;
  p.warmup_iters = 50;
  p.reps = 3;
  fake_run run{.per_iter_ms = 0.001};
  CHECK(bench::measure(p, bench::collective{}, run, first_ms).iters == 500);
  CHECK(run.launches == std::vector<int>{50, 500, 500, 500});
}
