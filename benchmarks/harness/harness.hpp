#pragma once
// The benchmark harness shared by every library's benchmark binary (gpucomm, raw CUDA, NVSHMEM,
// NCCL). Shaped like nvbench: a case sweeps axes (size, CTAs, scope, ...); each point is one kernel
// launch that loops `iters` times with CUDA events around it, after a warm-up launch; the reported
// value is the median of R repetitions (min and max are kept too); GB/s are decimal (1e9).
//
// Host-only and library-neutral: it knows streams and events, not PEs or transports, so a new
// library or transport is a new binary (or a new template argument) that reuses all of it.
//
// Robustness rules the driver (scripts/bench.sh) relies on:
//   - every row is appended to a JSON-lines file and flushed at once, so a crash or a timeout
//     loses only the point in flight;
//   - a point that throws becomes an "error" row and the sweep goes on, unless the CUDA context is
//     broken (sticky error), in which case the binary records that and exits with status 3;
//   - a time budget (--budget-s) turns the remaining points into one "skipped" row instead of
//     letting the driver's timeout kill the process.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "filter.hpp"

namespace bench {

// ---- errors ---------------------------------------------------------------------------------------

/// A failed CUDA (or peer library) call: names the call and where it was made.
class failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The CUDA context of some device is unusable (a trap, an illegal address): nothing after this
/// point can run in this process.
class fatal : public failure {
 public:
  using failure::failure;
};

inline void check_cuda(cudaError_t rc, char const* expr, char const* file, int line) {
  if (rc == cudaSuccess) return;
  std::string what = std::string(expr) + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ") at " +
                     file + ":" + std::to_string(line);
  // Errors that poison the context: every later call in this process would fail the same way.
  switch (rc) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      throw fatal(what);
    default:
      throw failure(what);
  }
}

}  // namespace bench

/// Check a CUDA runtime call; throws bench::failure (bench::fatal for context-killing errors).
#define BENCH_CUDA(expr) ::bench::check_cuda((expr), #expr, __FILE__, __LINE__)

namespace bench {

// ---- options --------------------------------------------------------------------------------------

struct options {
  std::string case_name;     // --case
  std::string out_path;      // --out: JSON-lines file the rows are appended to
  bool quick = false;        // --quick: the trimmed sweep
  int npes = 2;              // --npes: PEs (GPUs) for collective cases; point-to-point cases use PEs 0 and 1
  double budget_s = 0;       // --budget-s: stop sweeping after this many seconds (0: no limit)
  int reps = 0;              // --reps: repetitions per point (0: the case's default)
  std::size_t max_size = 0;  // --max-size: largest size (bytes) a case sweeps to (0: the case's default)
  bool list = false;         // --list: print the case names and exit
  point_filter only;         // --only AXIS=VALUES (repeatable): run only the matching points (filter.hpp)

  static options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
      std::string const a = argv[i];
      auto value = [&](char const* name) -> std::string {
        if (i + 1 >= argc) throw failure(std::string("missing value after ") + name);
        return argv[++i];
      };
      if (a == "--case")
        o.case_name = value("--case");
      else if (a == "--out")
        o.out_path = value("--out");
      else if (a == "--quick")
        o.quick = true;
      else if (a == "--npes")
        o.npes = std::stoi(value("--npes"));
      else if (a == "--budget-s")
        o.budget_s = std::stod(value("--budget-s"));
      else if (a == "--reps")
        o.reps = std::stoi(value("--reps"));
      else if (a == "--max-size")
        o.max_size = std::stoull(value("--max-size"));
      else if (a == "--list")
        o.list = true;
      else if (a == "--only")
        o.only.add(value("--only"));
      else
        throw failure("unknown argument " + a +
                      " (expected --case NAME --out FILE [--quick] [--npes N] "
                      "[--budget-s S] [--reps R] [--max-size BYTES] [--only AXIS=VALUES]... | --list)");
    }
    return o;
  }
};

// ---- sweeps ---------------------------------------------------------------------------------------

/// lo, lo*factor, ... up to and including hi.
inline std::vector<std::size_t> geometric(std::size_t lo, std::size_t hi, std::size_t factor) {
  std::vector<std::size_t> v;
  for (std::size_t s = lo; s <= hi; s *= factor) v.push_back(s);
  return v;
}

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

/// The all_reduce cases' message sizes (bytes) up to `max_bytes`, the same for every library.
inline std::vector<std::size_t> all_reduce_sizes(bool quick, std::size_t max_bytes) {
  std::vector<std::size_t> const all =
      quick ? std::vector<std::size_t>{8, 64 * KiB, MiB}
            : std::vector<std::size_t>{8,         64,  512,     4 * KiB,  32 * KiB, 64 * KiB,
                                       256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB};
  std::vector<std::size_t> v;
  for (std::size_t const s : all)
    if (s <= max_bytes) v.push_back(s);
  return v;
}

/// How a point is timed.
struct plan {
  double target_ms = 1.0;  // calibrated iteration counts aim at this much time per timed launch
  int min_iters = 1;
  int max_iters = 1000;
  int fixed_iters = 0;    // > 0: no calibration, always this many (latency and ping-pong cases)
  int warmup_iters = 20;  // the warm-up launch (fixed_iters mode; one iteration before calibrating otherwise)
  int reps = 5;
};

/// Bandwidth points: calibrated so each timed launch runs about target_ms.
inline plan bandwidth_plan(options const& o) {
  plan p;
  p.target_ms = o.quick ? 0.5 : 1.0;
  p.max_iters = o.quick ? 200 : 1000;
  p.reps = o.reps ? o.reps : (o.quick ? 3 : 5);
  return p;
}

/// Latency points: a fixed count, as NVSHMEM's perftests use (-n 500 -w 50 for ping-pong).
inline plan latency_plan(options const& o, int full_iters = 500, int quick_iters = 200) {
  plan p;
  p.fixed_iters = o.quick ? quick_iters : full_iters;
  p.warmup_iters = o.quick ? 20 : 50;
  p.reps = o.reps ? o.reps : (o.quick ? 3 : 5);
  return p;
}

// ---- rows -----------------------------------------------------------------------------------------

/// One result (or one error, or one "skipped") at one point of one case.
struct row {
  std::string case_name;  // put_bw, put_latency, ...
  std::string library;    // gpucomm, nvshmem, nccl, cuda
  std::string transport;  // NVLinkStore, copy-engine, ...
  std::string variant;    // uni/bidir, atomic op, flag kind
  std::string scope;      // thread, warp, block ("" when not applicable)
  int ctas = 0;
  int threads = 0;  // threads per CTA
  int npes = 2;
  std::size_t size = 0;  // bytes per iteration (whole grid), or per message for latency
  std::string metric;    // bandwidth, latency, one_way_latency, rate
  double value = 0, min = 0, max = 0;
  std::string unit;  // GB/s, us, Mops/s
  int iterations = 0;
  int repetitions = 0;
  bool grid_barrier = false;  // a grid-wide barrier every iteration (NVSHMEM's put_bw does)
  std::string status = "ok";  // ok, error, skipped
  std::string note;
};

inline std::string json_escape(std::string const& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string to_json(row const& r) {
  auto str = [](std::string const& s) {
    std::string q(1, '"');
    q += json_escape(s);
    q += '"';
    return q;
  };
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return std::string(buf);
  };
  std::string j = "{";
  j += "\"case\":" + str(r.case_name) + ",\"library\":" + str(r.library) + ",\"transport\":" + str(r.transport);
  j += ",\"variant\":" + str(r.variant) + ",\"scope\":" + str(r.scope);
  j += ",\"ctas\":" + std::to_string(r.ctas) + ",\"threads\":" + std::to_string(r.threads);
  j += ",\"npes\":" + std::to_string(r.npes) + ",\"size\":" + std::to_string(r.size);
  j += ",\"metric\":" + str(r.metric) + ",\"value\":" + num(r.value) + ",\"min\":" + num(r.min) +
       ",\"max\":" + num(r.max) + ",\"unit\":" + str(r.unit);
  j += ",\"iterations\":" + std::to_string(r.iterations) + ",\"repetitions\":" + std::to_string(r.repetitions);
  j += std::string(",\"grid_barrier\":") + (r.grid_barrier ? "true" : "false");
  j += ",\"status\":" + str(r.status) + ",\"note\":" + str(r.note) + "}";
  return j;
}

/// A row's value of one of point_filter's axes, as text.
inline std::string axis_value(row const& r, std::string const& axis) {
  if (axis == "variant") return r.variant;
  if (axis == "scope") return r.scope;
  if (axis == "transport") return r.transport;
  if (axis == "ctas") return std::to_string(r.ctas);
  if (axis == "threads") return std::to_string(r.threads);
  if (axis == "npes") return std::to_string(r.npes);
  if (axis == "size") return std::to_string(r.size);
  throw failure("no row axis named " + axis);
}

/// Where rows go: appended to the --out file (one JSON object a line, flushed each time) and
/// echoed to stdout. Only one process of a multi-process run writes (`enabled`).
class sink {
 public:
  sink(std::string const& path, bool enabled) : enabled_(enabled) {
    if (enabled_ && !path.empty()) {
      file_ = std::fopen(path.c_str(), "a");
      if (!file_) throw failure("cannot open " + path + " for appending: " + std::strerror(errno));
    }
  }
  sink(sink const&) = delete;
  sink& operator=(sink const&) = delete;
  ~sink() {
    if (file_) std::fclose(file_);
  }

  void write(row const& r) {
    if (!enabled_) return;
    if (file_) {
      std::fprintf(file_, "%s\n", to_json(r).c_str());
      std::fflush(file_);
    }
    if (r.status == "ok") {
      std::printf("%-22s %-8s %-6s %-6s ctas=%-3d npes=%d size=%-11zu %-16s %12.3f %-6s (iters %d, reps %d)\n",
                  r.case_name.c_str(), r.library.c_str(), r.variant.c_str(), r.scope.c_str(), r.ctas, r.npes, r.size,
                  r.metric.c_str(), r.value, r.unit.c_str(), r.iterations, r.repetitions);
    } else {
      std::printf("%-22s %-8s %-6s %-6s ctas=%-3d npes=%d size=%-11zu %s: %s\n", r.case_name.c_str(), r.library.c_str(),
                  r.variant.c_str(), r.scope.c_str(), r.ctas, r.npes, r.size, r.status.c_str(), r.note.c_str());
    }
    std::fflush(stdout);
  }

 private:
  bool enabled_;
  std::FILE* file_ = nullptr;
};

// ---- timing ---------------------------------------------------------------------------------------

/// A pair of CUDA events on one device: start/stop recorded on a stream, elapsed ms read after
/// the stream is synchronised.
class event_timer {
 public:
  explicit event_timer(int device) : device_(device) {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaEventCreate(&start_));
    if (cudaError_t const rc = cudaEventCreate(&stop_); rc != cudaSuccess) {
      cudaEventDestroy(start_);
      BENCH_CUDA(rc);
    }
  }
  event_timer(event_timer&& o) noexcept
      : device_(o.device_), start_(std::exchange(o.start_, nullptr)), stop_(std::exchange(o.stop_, nullptr)) {}
  event_timer(event_timer const&) = delete;
  event_timer& operator=(event_timer const&) = delete;
  ~event_timer() {
    if (start_) {
      cudaSetDevice(device_);
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
  }
  void start(cudaStream_t s) {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaEventRecord(start_, s));
  }
  void stop(cudaStream_t s) {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaEventRecord(stop_, s));
  }
  /// Milliseconds between start and stop; waits for stop.
  double ms() {
    BENCH_CUDA(cudaSetDevice(device_));
    BENCH_CUDA(cudaEventSynchronize(stop_));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start_, stop_));
    return t;
  }

 private:
  int device_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

struct stats {
  double median = 0, min = 0, max = 0;
};

inline stats summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  std::size_t const n = v.size();
  double const median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {median, v.front(), v.back()};
}

/// Collective hooks: identity in a single process; MPI reductions when one process per PE, so all
/// processes take the same decisions (iteration counts, skip, error) and never deadlock on them.
struct collective {
  std::function<int(int)> max_int = [](int v) { return v; };
  std::function<bool(bool)> all = [](bool v) { return v; };
  std::function<double(double)> sum = [](double v) { return v; };
};

struct measured {
  stats value;  // of the per-repetition values
  int iters = 0;
  int reps = 0;
};

/// `r` with the measured point filled in: the median as its value, min, max and the counts.
inline row finish(row r, measured const& m) {
  r.value = m.value.median;
  r.min = m.value.min;
  r.max = m.value.max;
  r.iterations = m.iters;
  r.repetitions = m.reps;
  return r;
}

/// Time one point. `run(iters)` performs one timed launch of `iters` iterations and returns the
/// milliseconds each timed PE measured (one entry per timed stream of this process); `value(ms,
/// iters)` turns those into the reported number (e.g. GB/s, summed over PEs; or us per iteration).
template <class Run, class Value>
measured measure(plan const& p, collective const& coll, Run&& run, Value&& value) {
  // The slowest timed PE of this process; -1 when this process timed nothing (an idle PE of a
  // one-sided case in a multi-process run), so it leaves the calibration to the others.
  auto slowest = [](std::vector<double> const& ms) {
    return ms.empty() ? -1.0 : *std::max_element(ms.begin(), ms.end());
  };
  int iters = p.fixed_iters;
  if (iters > 0) {
    run(p.warmup_iters);  // warm-up launch (caches, TLBs, clocks)
  } else {
    // Warm up with one iteration first: a kernel's first launch on a device also loads its module
    // (CUDA loads lazily), which would make the calibration launch look slow and the point run with
    // too few iterations. Then calibrate: one iteration, and 32 if one is too short to time well.
    // Every process takes the same branch and makes the same launches, whatever it measured
    // (run() may hold collective calls).
    run(1);
    // Each calibration takes the fastest of a few launches, the least disturbed: with one launch, a
    // single slow one made a point on 4 x H100 run 11 iterations where its neighbours ran ~350, so
    // the launch's fixed cost dominated and it reported 84 GB/s instead of ~214. (A slow launch of
    // one iteration also skips the 32-iteration calibration, as it no longer looks too short.)
    constexpr int calibration_launches = 3;
    auto fastest_per_iter = [&](int calibration_iters) {
      double fastest = -1;
      for (int launch = 0; launch < calibration_launches; ++launch) {
        double const t = slowest(run(calibration_iters));
        if (t >= 0 && (fastest < 0 || t < fastest)) fastest = t;
      }
      return fastest < 0 ? -1.0 : fastest / calibration_iters;
    };
    double per_iter = fastest_per_iter(1);
    bool const too_short = per_iter >= 0 && per_iter < 0.05;
    if (!coll.all(!too_short)) per_iter = fastest_per_iter(32);
    int local = 0;
    if (per_iter >= 0) {
      double const want = per_iter > 0 ? p.target_ms / per_iter : p.max_iters;
      local = static_cast<int>(std::clamp(want, static_cast<double>(p.min_iters), static_cast<double>(p.max_iters)));
    }
    iters = std::max(coll.max_int(local), p.min_iters);
  }
  std::vector<double> values;
  for (int r = 0; r < p.reps; ++r) values.push_back(value(run(iters), iters));
  return {summarize(std::move(values)), iters, p.reps};
}

/// GB/s (decimal) for `bytes` moved per iteration.
inline double gbps(double bytes, double ms, int iters) { return ms > 0 ? bytes * iters / (ms * 1e6) : 0.0; }
/// Microseconds per iteration.
inline double us_per_iter(double ms, int iters) { return iters > 0 ? ms * 1e3 / iters : 0.0; }

// ---- running points -------------------------------------------------------------------------------

/// Runs the points of one case: a time budget, and per-point error isolation.
class session {
 public:
  session(options const& o, sink& out, collective coll, std::function<void()> health)
      : opt_(o),
        out_(out),
        coll_(std::move(coll)),
        health_(std::move(health)),
        start_(std::chrono::steady_clock::now()) {}

  options const& opt() const { return opt_; }
  collective const& coll() const { return coll_; }
  sink& out() { return out_; }

  /// Whether --only lets the point `where` run; counts the points it lets through.
  bool selected(row const& where) {
    bool const yes = opt_.only.accepts([&](std::string const& axis) { return axis_value(where, axis); });
    selected_ += yes;
    return yes;
  }
  /// How many points --only let through so far.
  int points_selected() const { return selected_; }

  /// Record that the point `where` cannot run here (`why`), unless --only leaves it out anyway.
  void skip(row const& where, std::string why) {
    if (!selected(where)) return;
    row r = where;
    r.status = "skipped";
    r.note = std::move(why);
    out_.write(r);
  }

  /// Run one point. `where` describes it (case, library, axes); `f()` fills in and returns the
  /// measured row. Returns false when the point failed, was skipped or was left out by --only.
  template <class F>
  bool point(row const& where, F&& f) {
    if (!selected(where)) return false;
    if (!coll_.all(!over_budget())) {
      if (!skipped_) {
        row r = where;
        r.status = "skipped";
        r.note = "time budget of " + std::to_string(opt_.budget_s) + " s spent; this and later points of " +
                 where.case_name + " not run";
        out_.write(r);
        skipped_ = true;
      }
      return false;
    }
    std::string problem;
    bool is_fatal = false;
    try {
      row r = f();
      if (coll_.all(true)) {
        out_.write(r);
        return true;
      }
      problem = "another PE failed at this point";
    } catch (fatal const& e) {
      problem = e.what();
      is_fatal = true;
      coll_.all(false);
    } catch (std::exception const& e) {
      problem = e.what();
      coll_.all(false);
    }
    row r = where;
    r.status = "error";
    r.note = problem;
    out_.write(r);
    if (is_fatal) throw fatal(problem);
    health_();  // throws fatal when a device's context no longer works
    return false;
  }

  bool over_budget() const {
    if (opt_.budget_s <= 0) return false;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > opt_.budget_s;
  }

 private:
  options opt_;
  sink& out_;
  collective coll_;
  std::function<void()> health_;
  std::chrono::steady_clock::time_point start_;
  bool skipped_ = false;
  int selected_ = 0;
};

/// Throws fatal if any of `devices` has a broken context (a sticky error from an earlier kernel).
inline void check_devices(std::vector<int> const& devices) {
  for (int d : devices) {
    if (cudaSetDevice(d) != cudaSuccess) throw fatal("cudaSetDevice(" + std::to_string(d) + ") fails");
    cudaError_t const rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess) {
      throw fatal("device " + std::to_string(d) + " is unusable after an error: " + cudaGetErrorName(rc) + " (" +
                  cudaGetErrorString(rc) + ")");
    }
    cudaGetLastError();  // clear a non-sticky error left by the failed point
  }
}

/// The largest number of CTAs of `kernel` with `threads` threads that can be resident at once on
/// `device`: a grid barrier with more would deadlock, so cases skip such points.
template <class Kernel>
int max_resident_ctas(Kernel kernel, int threads, int device) {
  int per_sm = 0, sms = 0;
  BENCH_CUDA(cudaSetDevice(device));
  BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return per_sm * sms;
}

/// A case: its name and the function that runs it.
struct case_entry {
  char const* name;
  std::function<void(session&)> run;
};

/// main() of a benchmark binary: parse, run the named case, report. Exit status: 0 all points ran
/// (errors are rows, not exit codes), 2 bad usage or unknown case, 3 a broken CUDA context.
inline int run_main(int argc, char** argv, char const* library, std::vector<case_entry> const& cases, collective coll,
                    bool writer, std::vector<int> const& devices) {
  options o;
  try {
    o = options::parse(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (o.list) {
    if (writer)
      for (auto const& c : cases) std::printf("%s\n", c.name);
    return 0;
  }
  auto const it = std::find_if(cases.begin(), cases.end(), [&](case_entry const& c) { return o.case_name == c.name; });
  if (it == cases.end()) {
    if (writer) std::fprintf(stderr, "%s: unknown case '%s' (try --list)\n", library, o.case_name.c_str());
    return 2;
  }
  try {
    sink out(o.out_path, writer);
    session s(o, out, coll, [devices] { check_devices(devices); });
    try {
      it->run(s);
      if (!o.only.empty() && s.points_selected() == 0 && writer)
        std::fprintf(stderr, "%s: --only matched no point of case %s (check the values against its rows)\n", library,
                     o.case_name.c_str());
    } catch (fatal const& e) {
      row r;
      r.case_name = o.case_name;
      r.library = library;
      r.npes = o.npes;
      r.status = "error";
      r.note = std::string("stopped: ") + e.what();
      out.write(r);
      return 3;
    } catch (std::exception const& e) {
      // Set-up of the case failed (not one point): record it and report success of the binary,
      // so the driver goes on; the row says what happened.
      row r;
      r.case_name = o.case_name;
      r.library = library;
      r.npes = o.npes;
      r.status = "error";
      r.note = std::string("case set-up failed: ") + e.what();
      out.write(r);
      return 1;
    }
  } catch (std::exception const& e) {
    std::fprintf(stderr, "%s: %s\n", library, e.what());
    return 1;
  }
  return 0;
}

}  // namespace bench
