// bench_nvshmem: the same cases as bench_gpucomm, written against NVSHMEM 3.4 with the semantics
// of NVSHMEM's own perftests (shmem_put_bw, shmem_put_latency, shmem_p_latency,
// shmem_atomic_latency, shmem_atomic_bw, shmem_put_signal_ping_pong_latency, barrier_latency),
// run in the same harness so every row is timed the same way as gpucomm's.
// One process per GPU, launched by mpirun; MPI only broadcasts NVSHMEM's unique id:
//   mpirun -np 2 bench_nvshmem --case put_bw --out rows.jsonl [--quick] [--budget-s S]
// Point-to-point cases use PEs 0 and 1 (other PEs idle); barrier uses every PE launched.
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../harness/device.cuh"
#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"
#include "../harness/scope.cuh"

namespace {

using bench::scope;

constexpr int threads_per_cta = 1024;
int my_pe = 0, n_pes = 1, my_device = 0;
cudaStream_t stream = nullptr;

bench::row base(char const* case_name, int npes = 2) {
  bench::row r;
  r.case_name = case_name;
  r.library = "nvshmem";
  r.transport = "NVSHMEM 3.4 (p2p)";
  r.npes = npes;
  return r;
}

/// Symmetric memory, freed collectively.
template <class T>
struct sym {
  T* p = nullptr;
  explicit sym(std::size_t n) {
    p = static_cast<T*>(nvshmem_malloc(n * sizeof(T)));
    if (!p)
      throw bench::failure("nvshmem_malloc(" + std::to_string(n * sizeof(T)) +
                           ") failed (NVSHMEM_SYMMETRIC_SIZE too small?)");
    BENCH_CUDA(cudaMemset(p, 0, n * sizeof(T)));
    BENCH_CUDA(cudaDeviceSynchronize());
    nvshmem_barrier_all();
  }
  sym(sym const&) = delete;
  sym& operator=(sym const&) = delete;
  ~sym() { nvshmem_free(p); }
};

/// Every PE's stream idle, then every process at the same point.
void host_sync() {
  BENCH_CUDA(cudaStreamSynchronize(stream));
  MPI_Barrier(MPI_COMM_WORLD);
}

/// One timed launch on this PE if `active`; returns its milliseconds (none when idle).
template <class Launch>
std::vector<double> timed(bench::event_timer& timer, bool active, Launch&& launch) {
  host_sync();
  if (!active) return {};
  timer.start(stream);
  launch();
  BENCH_CUDA(cudaGetLastError());
  timer.stop(stream);
  return {timer.ms()};
}

void collective_launch(void const* kernel, int threads, void** args) {
  int const rc = nvshmemx_collective_launch(kernel, dim3(1), dim3(threads), args, 0, stream);
  if (rc != 0) throw bench::failure("nvshmemx_collective_launch failed with status " + std::to_string(rc));
}

/// A group's leader is thread 0 of its warp (warp scope), of the CTA (block scope), or itself.
template <scope S>
__device__ void group_sync() {
  if constexpr (S == scope::warp)
    __syncwarp();
  else if constexpr (S == scope::block)
    __syncthreads();
}
template <scope S>
__device__ bool leader() {
  if constexpr (S == scope::warp)
    return threadIdx.x % 32 == 0;
  else if constexpr (S == scope::block)
    return threadIdx.x == 0;
  else
    return true;
}

// ---- put_bw / get_bw ---------------------------------------------------------------------------------

template <scope S, bool Get>
__global__ void __launch_bounds__(threads_per_cta, 1)
    bw_kernel(char* buf, std::size_t chunk, int peer, int iters, unsigned* counter) {
  char* const p = buf + bench::group_index<S>() * chunk;
  for (int i = 0; i < iters; ++i) {
    if constexpr (Get) {
      if constexpr (S == scope::block)
        nvshmemx_getmem_nbi_block(p, p, chunk, peer);
      else if constexpr (S == scope::warp)
        nvshmemx_getmem_nbi_warp(p, p, chunk, peer);
      else
        nvshmem_getmem_nbi(p, p, chunk, peer);
    } else {
      if constexpr (S == scope::block)
        nvshmemx_putmem_nbi_block(p, p, chunk, peer);
      else if constexpr (S == scope::warp)
        nvshmemx_putmem_nbi_warp(p, p, chunk, peer);
      else
        nvshmem_putmem_nbi(p, p, chunk, peer);
    }
    bench::grid_barrier(counter, static_cast<unsigned>(i + 1) * gridDim.x);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

void bandwidth(bench::session& s, char const* case_name, bool get) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = bench::GiB;
  sym<char> buf(max_size);
  bench::device_buffer<unsigned> counter(my_device, 1);
  bench::event_timer timer(my_device);
  std::vector<std::size_t> const sizes = bench::geometric(4, max_size, o.quick ? 16 : 2);
  std::vector<int> const grid = o.quick ? std::vector<int>{1, 4, 32, 132} : std::vector<int>{1, 4, 16, 32, 132};
  bench::plan const plan = bench::bandwidth_plan(o);
  for (bool const bidir : {false, true}) {
    bool const active = my_pe == 0 || (bidir && my_pe == 1);
    int const peer = my_pe < 2 ? 1 - my_pe : my_pe;
    for (scope const sc : bench::all_scopes) {
      bench::with_scope(sc, [&]<scope S>() {
        auto const k = get ? bw_kernel<S, true> : bw_kernel<S, false>;
        int const resident = s.coll().max_int(bench::max_resident_ctas(k, threads_per_cta, my_device));
        for (int const ctas : grid) {
          std::size_t const units =
              static_cast<std::size_t>(ctas) * (threads_per_cta / bench::group_threads(sc, threads_per_cta));
          for (std::size_t const size : sizes) {
            std::size_t const chunk = size / units / 8 * 8;
            if (chunk == 0) continue;
            bench::row where = base(case_name);
            where.variant = bidir ? "bidir" : "uni";
            where.scope = bench::name(sc);
            where.ctas = ctas;
            where.threads = threads_per_cta;
            where.size = size;
            where.metric = "bandwidth";
            where.unit = "GB/s";
            where.grid_barrier = true;
            if (ctas > resident) continue;
            std::size_t const moved = chunk * units;
            s.point(where, [&] {
              auto run = [&](int iters) {
                counter.zero(stream);
                return timed(timer, active, [&] {
                  k<<<ctas, threads_per_cta, 0, stream>>>(buf.p, chunk, peer, iters, counter.get());
                });
              };
              auto value = [&](std::vector<double> const& ms, int iters) {
                double const mine = ms.empty() ? 0.0 : bench::gbps(static_cast<double>(moved), ms[0], iters);
                return s.coll().sum(mine);  // bidir: both PEs' GB/s, as the perftest sums them
              };
              bench::row r = finish(where, bench::measure(plan, s.coll(), run, value));
              r.note = "message " + std::to_string(chunk) + " B per " + bench::name(sc) +
                       (moved != size ? ", " + std::to_string(moved) + " B moved per iteration" : std::string());
              return r;
            });
          }
        }
      });
    }
  }
}

void put_bw(bench::session& s) { bandwidth(s, "put_bw", false); }
void get_bw(bench::session& s) { bandwidth(s, "get_bw", true); }

// ---- latencies -----------------------------------------------------------------------------------------

template <scope S>
__global__ void __launch_bounds__(1024, 1) put_latency_kernel(char* buf, std::size_t n, int peer, int iters) {
  for (int i = 0; i < iters; ++i) {
    if constexpr (S == scope::block)
      nvshmemx_putmem_nbi_block(buf, buf, n, peer);
    else if constexpr (S == scope::warp)
      nvshmemx_putmem_nbi_warp(buf, buf, n, peer);
    else
      nvshmem_putmem_nbi(buf, buf, n, peer);
    group_sync<S>();
    if (leader<S>()) nvshmem_quiet();
    group_sync<S>();
  }
}

__global__ void __launch_bounds__(1024, 1) p_latency_kernel(int* buf, std::size_t n, int peer, int iters) {
  for (int i = 0; i < iters; ++i) {
    for (std::size_t j = threadIdx.x; j < n; j += blockDim.x) nvshmem_int_p(buf + j, static_cast<int>(j) + i, peer);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
    __syncthreads();
  }
}

enum class amo { fetch_add, fetch, compare_swap, swap, add, set };
constexpr amo all_amos[] = {amo::fetch_add, amo::fetch, amo::compare_swap, amo::swap, amo::add, amo::set};
constexpr char const* amo_name(amo a) {
  switch (a) {
    case amo::fetch_add:
      return "fetch_add";
    case amo::fetch:
      return "fetch";
    case amo::compare_swap:
      return "compare_swap";
    case amo::swap:
      return "swap";
    case amo::add:
      return "add";
    case amo::set:
      return "set";
  }
  return "?";
}
__host__ __device__ constexpr bool fetching(amo a) { return a != amo::add && a != amo::set; }

template <amo A>
__global__ void atomic_latency_kernel(std::uint64_t* word, int peer, int iters, std::uint64_t* sink) {
  std::uint64_t acc = 0;
  for (int i = 0; i < iters; ++i) {
    auto const v = static_cast<std::uint64_t>(i);
    if constexpr (A == amo::fetch_add)
      acc += nvshmem_uint64_atomic_fetch_add(word, 1, peer);
    else if constexpr (A == amo::fetch)
      acc += nvshmem_uint64_atomic_fetch(word, peer);
    else if constexpr (A == amo::compare_swap)
      acc += nvshmem_uint64_atomic_compare_swap(word, v, v + 1, peer);
    else if constexpr (A == amo::swap)
      acc += nvshmem_uint64_atomic_swap(word, v, peer);
    else if constexpr (A == amo::add)
      nvshmem_uint64_atomic_add(word, 1, peer);
    else
      nvshmem_uint64_atomic_set(word, v, peer);
    if constexpr (!fetching(A)) nvshmem_quiet();
  }
  if constexpr (fetching(A)) nvshmem_quiet();
  bench::keep(acc, sink, iters < 0);
}

__global__ void __launch_bounds__(1024, 1)
    atomic_rate_kernel(std::uint64_t* words, std::size_t n, int peer, int iters, unsigned* counter) {
  std::size_t const first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  for (int i = 0; i < iters; ++i) {
    for (std::size_t j = first; j < n; j += stride) nvshmem_uint64_atomic_add(words + j, 1, peer);
    bench::grid_barrier(counter, static_cast<unsigned>(i + 1) * gridDim.x);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

auto const latency_value = [](std::vector<double> const& ms, int iters) {
  return ms.empty() ? 0.0 : bench::us_per_iter(ms[0], iters);
};

void put_latency(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = 64 * bench::KiB;
  sym<char> buf(max_size);
  bench::event_timer timer(my_device);
  bench::plan const plan = bench::latency_plan(o, 200, 100);
  for (scope const sc : bench::all_scopes) {
    int const threads = bench::latency_threads(sc);
    for (std::size_t const size : bench::geometric(4, max_size, o.quick ? 4 : 2)) {
      bench::row where = base("put_latency");
      where.variant = "put_nbi+quiet";
      where.scope = bench::name(sc);
      where.ctas = 1;
      where.threads = threads;
      where.size = size;
      where.metric = "latency";
      where.unit = "us";
      s.point(where, [&] {
        auto const m = bench::with_scope(sc, [&]<scope S>() {
          auto run = [&](int iters) {
            return timed(timer, my_pe == 0,
                         [&] { put_latency_kernel<S><<<1, threads, 0, stream>>>(buf.p, size, 1, iters); });
          };
          return bench::measure(plan, s.coll(), run, latency_value);
        });
        return finish(where, m);
      });
    }
  }
}

void p_latency(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = 64 * bench::KiB;
  constexpr int threads = 512;
  sym<int> buf(max_size / sizeof(int));
  bench::event_timer timer(my_device);
  bench::plan const plan = bench::latency_plan(o, 200, 100);
  for (std::size_t const size : bench::geometric(4, max_size, o.quick ? 4 : 2)) {
    bench::row where = base("p_latency");
    where.variant = "p+quiet";
    where.scope = "block";
    where.ctas = 1;
    where.threads = threads;
    where.size = size;
    where.metric = "latency";
    where.unit = "us";
    where.note = "nvshmem_int_p per element";
    s.point(where, [&] {
      auto run = [&](int iters) {
        return timed(timer, my_pe == 0,
                     [&] { p_latency_kernel<<<1, threads, 0, stream>>>(buf.p, size / sizeof(int), 1, iters); });
      };
      return finish(where, bench::measure(plan, s.coll(), run, latency_value));
    });
  }
}

void atomic_latency(bench::session& s) {
  auto const& o = s.opt();
  sym<std::uint64_t> word(1);
  bench::device_buffer<std::uint64_t> sink(my_device, 1);
  bench::event_timer timer(my_device);
  bench::plan const plan = bench::latency_plan(o, 500, 200);
  for (amo const a : all_amos) {
    bench::row where = base("atomic_latency");
    where.variant = amo_name(a);
    where.scope = "thread";
    where.ctas = 1;
    where.threads = 1;
    where.size = 8;
    where.metric = "latency";
    where.unit = "us";
    where.note =
        fetching(a) ? "fetching: back to back, one quiet at the end" : "non-fetching: op + quiet per iteration";
    s.point(where, [&] {
      auto run = [&](int iters) {
        return timed(timer, my_pe == 0, [&] {
          switch (a) {
            case amo::fetch_add:
              atomic_latency_kernel<amo::fetch_add><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
            case amo::fetch:
              atomic_latency_kernel<amo::fetch><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
            case amo::compare_swap:
              atomic_latency_kernel<amo::compare_swap><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
            case amo::swap:
              atomic_latency_kernel<amo::swap><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
            case amo::add:
              atomic_latency_kernel<amo::add><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
            case amo::set:
              atomic_latency_kernel<amo::set><<<1, 1, 0, stream>>>(word.p, 1, iters, sink.get());
              break;
          }
        });
      };
      return finish(where, bench::measure(plan, s.coll(), run, latency_value));
    });
  }
}

void atomic_rate(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = 512 * bench::KiB;
  sym<std::uint64_t> words(max_size / 8);
  bench::device_buffer<unsigned> counter(my_device, 1);
  bench::event_timer timer(my_device);
  bench::plan const plan = bench::bandwidth_plan(o);
  int const resident = s.coll().max_int(bench::max_resident_ctas(atomic_rate_kernel, threads_per_cta, my_device));
  for (int const ctas : o.quick ? std::vector<int>{4} : std::vector<int>{1, 4, 32}) {
    if (ctas > resident) continue;
    for (std::size_t const size :
         o.quick ? std::vector<std::size_t>{64 * bench::KiB} : bench::geometric(8 * bench::KiB, max_size, 4)) {
      std::size_t const n = size / 8;
      bench::row where = base("atomic_rate");
      where.variant = "add";
      where.scope = "thread";
      where.ctas = ctas;
      where.threads = threads_per_cta;
      where.size = size;
      where.metric = "rate";
      where.unit = "Mops/s";
      where.grid_barrier = true;
      s.point(where, [&] {
        auto run = [&](int iters) {
          counter.zero(stream);
          return timed(timer, my_pe == 0, [&] {
            atomic_rate_kernel<<<ctas, threads_per_cta, 0, stream>>>(words.p, n, 1, iters, counter.get());
          });
        };
        auto value = [&](std::vector<double> const& ms, int iters) {
          return ms.empty() || ms[0] <= 0 ? 0.0 : n * iters / (ms[0] * 1e3);
        };
        return finish(where, bench::measure(plan, s.coll(), run, value));
      });
    }
  }
}

// ---- put_signal ping-pong and barrier ------------------------------------------------------------------

template <scope S>
__global__ void __launch_bounds__(1024, 1)
    pingpong_kernel(char* data, std::size_t n, std::uint64_t* sig, int iters, int me) {
  int const peer = 1 - me;
  auto put = [&](std::uint64_t v) {
    if constexpr (S == scope::block)
      nvshmemx_putmem_signal_nbi_block(data, data, n, sig, v, NVSHMEM_SIGNAL_SET, peer);
    else if constexpr (S == scope::warp)
      nvshmemx_putmem_signal_nbi_warp(data, data, n, sig, v, NVSHMEM_SIGNAL_SET, peer);
    else
      nvshmem_putmem_signal_nbi(data, data, n, sig, v, NVSHMEM_SIGNAL_SET, peer);
  };
  auto wait = [&](std::uint64_t v) {
    if (leader<S>()) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
    group_sync<S>();
  };
  for (int i = 1; i <= iters; ++i) {
    auto const v = static_cast<std::uint64_t>(i);
    if (me == 0) {
      put(v);
      wait(v);
    } else {
      wait(v);
      put(v);
    }
  }
}

void put_signal_pingpong(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = bench::MiB;
  sym<char> data(max_size);
  sym<std::uint64_t> sig(1);
  bench::event_timer timer(my_device);
  for (scope const sc : bench::all_scopes) {
    int const threads = bench::latency_threads(sc);
    for (std::size_t const size : bench::geometric(8, max_size, o.quick ? 8 : 2)) {
      bench::plan const plan =
          bench::latency_plan(o, size >= 64 * bench::KiB ? 100 : 500, size >= 64 * bench::KiB ? 50 : 200);
      bench::row where = base("put_signal_pingpong");
      where.variant = "set";
      where.scope = bench::name(sc);
      where.ctas = 1;
      where.threads = threads;
      where.size = size;
      where.metric = "one_way_latency";
      where.unit = "us";
      where.note = "round trip / 2";
      s.point(where, [&] {
        auto const m = bench::with_scope(sc, [&]<scope S>() {
          auto run = [&](int iters) {
            BENCH_CUDA(cudaMemsetAsync(sig.p, 0, sizeof(std::uint64_t), stream));
            std::size_t n = size;
            int me = my_pe;
            void* args[] = {&data.p, &n, &sig.p, &iters, &me};
            host_sync();
            if (my_pe > 1) return std::vector<double>{};
            if (my_pe == 0) timer.start(stream);
            collective_launch(reinterpret_cast<void const*>(pingpong_kernel<S>), threads, args);
            if (my_pe == 0) timer.stop(stream);
            BENCH_CUDA(cudaStreamSynchronize(stream));
            return my_pe == 0 ? std::vector<double>{timer.ms()} : std::vector<double>{};
          };
          auto value = [](std::vector<double> const& ms, int iters) {
            return ms.empty() ? 0.0 : bench::us_per_iter(ms[0], iters) / 2;
          };
          return bench::measure(plan, s.coll(), run, value);
        });
        return finish(where, m);
      });
    }
  }
}

template <scope S>
__global__ void __launch_bounds__(1024, 1) barrier_kernel(int iters) {
  for (int i = 0; i < iters; ++i) {
    if constexpr (S == scope::block)
      nvshmemx_barrier_all_block();
    else if constexpr (S == scope::warp)
      nvshmemx_barrier_all_warp();
    else
      nvshmem_barrier_all();
  }
}

void barrier_latency(bench::session& s) {
  auto const& o = s.opt();
  bench::event_timer timer(my_device);
  bench::plan const plan = bench::latency_plan(o, 1000, 200);
  for (scope const sc : bench::all_scopes) {
    int const threads = bench::latency_threads(sc);
    bench::row where = base("barrier", n_pes);
    where.variant = "barrier";
    where.scope = bench::name(sc);
    where.ctas = 1;
    where.threads = threads;
    where.metric = "latency";
    where.unit = "us";
    s.point(where, [&] {
      auto const m = bench::with_scope(sc, [&]<scope S>() {
        auto run = [&](int iters) {
          void* args[] = {&iters};
          host_sync();
          if (my_pe == 0) timer.start(stream);
          collective_launch(reinterpret_cast<void const*>(barrier_kernel<S>), threads, args);
          if (my_pe == 0) timer.stop(stream);
          BENCH_CUDA(cudaStreamSynchronize(stream));
          return my_pe == 0 ? std::vector<double>{timer.ms()} : std::vector<double>{};
        };
        return bench::measure(plan, s.coll(), run, latency_value);
      });
      return finish(where, m);
    });
  }
}

int local_rank(int rank) {
  for (char const* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (char const* v = std::getenv(var)) return std::atoi(v);
  }
  return rank;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_pe);
  MPI_Comm_size(MPI_COMM_WORLD, &n_pes);
  bool const list_only = argc == 2 && std::string(argv[1]) == "--list";
  int status = 0;
  bool nvshmem_up = false;
  try {
    if (!list_only) {
      int count = 0;
      BENCH_CUDA(cudaGetDeviceCount(&count));
      if (count == 0) throw bench::failure("no GPU visible");
      my_device = local_rank(my_pe) % count;
      BENCH_CUDA(cudaSetDevice(my_device));
      BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      // Room for the 1 GiB points plus NVSHMEM's own allocations, unless the user said otherwise.
      setenv("NVSHMEM_SYMMETRIC_SIZE", "1610612736", 0);
      nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
      if (my_pe == 0 && nvshmemx_get_uniqueid(&id) != 0) throw bench::failure("nvshmemx_get_uniqueid failed");
      MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
      nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
      if (nvshmemx_set_attr_uniqueid_args(my_pe, n_pes, &id, &attr) != 0)
        throw bench::failure("nvshmemx_set_attr_uniqueid_args failed");
      if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0)
        throw bench::failure("nvshmemx_init_attr failed");
      nvshmem_up = true;
      if (nvshmem_my_pe() != my_pe || nvshmem_n_pes() != n_pes)
        throw bench::failure("NVSHMEM's PE numbering differs from MPI's");
    }
    bench::collective coll;
    coll.max_int = [](int v) {
      MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      return v;
    };
    coll.all = [](bool v) {
      int x = v ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      return x != 0;
    };
    coll.sum = [](double v) {
      MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      return v;
    };
    std::vector<bench::case_entry> const cases{
        {"put_bw", put_bw},
        {"get_bw", get_bw},
        {"put_latency", put_latency},
        {"p_latency", p_latency},
        {"atomic_latency", atomic_latency},
        {"atomic_rate", atomic_rate},
        {"put_signal_pingpong", put_signal_pingpong},
        {"barrier", barrier_latency},
    };
    if (!list_only && n_pes < 2) throw bench::failure("launch at least 2 processes (mpirun -np 2)");
    status = bench::run_main(argc, argv, "nvshmem", cases, coll, /*writer=*/my_pe == 0, {my_device});
  } catch (std::exception const& e) {
    std::fprintf(stderr, "bench_nvshmem (PE %d): %s\n", my_pe, e.what());
    status = 1;
  }
  if (nvshmem_up) nvshmem_finalize();
  if (stream) cudaStreamDestroy(stream);
  MPI_Finalize();
  return status;
}
