// bench_cuda: the physical references, in the same run and on the same GPUs as the libraries.
//   ce_copy        cudaMemcpyPeerAsync GPU 0 -> GPU 1 (copy engine), uni and bidir, GB/s.
//   sm_store       a plain SM loop of 16-byte stores into peer memory (cudaMalloc on GPU 1,
//                  cudaDeviceEnablePeerAccess), 1..132 CTAs of 1024 threads, no grid barrier;
//                  variant "copy" loads the data from local memory first (an SM copy kernel).
//   flag_pingpong  one thread per GPU: store a flag in the peer's memory, spin on the own flag;
//                  volatile and release/acquire (system scope) flags; round trip / 2.
//   machine        not a benchmark: one JSON line describing the GPUs (for the results file).
//   *_limits       the isolating variants behind docs/contributing/benchmarks.md's "What limits it" (limits.cu).
// Usage: bench_cuda --case NAME --out rows.jsonl [--quick] [--budget-s S]
#include <cuda/atomic>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../harness/device_buffer.hpp"
#include "../harness/harness.hpp"
#include "common.hpp"

namespace {

constexpr int threads_per_cta = 1024;

bench::row base(char const* case_name, char const* transport) {
  bench::row r;
  r.case_name = case_name;
  r.library = "cuda";
  r.transport = transport;
  r.npes = 2;
  return r;
}

/// ce_copy on a one-GPU machine: cudaMemcpyAsync between two buffers of GPU 0 (smoke), the raw
/// reference for ProxyQueue's put_bw with both PEs on that GPU. The driver picks the engine for a
/// copy within one GPU, so this is what cudaMemcpyAsync does there, not a copy-engine link figure.
void ce_copy_local(bench::session& s) {
  auto const& o = s.opt();
  constexpr std::size_t max_size = bench::GiB;
  bench::device_buffer<std::byte> src(0, max_size), dst(0, max_size);
  cudaStream_t st{};
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  bench::event_timer timer(0);
  bench::plan const plan = bench::bandwidth_plan(o);
  std::vector<std::size_t> const sizes = o.quick ? std::vector<std::size_t>{bench::MiB, 64 * bench::MiB, bench::GiB}
                                                 : bench::geometric(4 * bench::KiB, max_size, 4);
  for (std::size_t const size : sizes) {
    bench::row where = base("ce_copy", "copy-engine");
    where.variant = "uni";
    where.size = size;
    where.metric = "bandwidth";
    where.unit = "GB/s";
    where.note = "one GPU: local -> local cudaMemcpyAsync (smoke), iterations = copies between the events";
    s.point(where, [&] {
      auto run = [&](int iters) {
        BENCH_CUDA(cudaSetDevice(0));
        timer.start(st);
        for (int i = 0; i < iters; ++i)
          BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), size, cudaMemcpyDeviceToDevice, st));
        timer.stop(st);
        return std::vector<double>{timer.ms()};
      };
      auto value = [&](std::vector<double> const& ms, int iters) {
        return bench::gbps(static_cast<double>(size), ms[0], iters);
      };
      return finish(where, bench::measure(plan, s.coll(), run, value));
    });
  }
  BENCH_CUDA(cudaStreamDestroy(st));
}

void ce_copy(bench::session& s) {
  auto const& o = s.opt();
  int count = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  if (count == 1) return ce_copy_local(s);
  bench_cuda::require_peer_access();
  constexpr std::size_t max_size = bench::GiB;
  bench::device_buffer<std::byte> src[2] = {{0, max_size}, {1, max_size}};
  bench::device_buffer<std::byte> dst[2] = {{0, max_size}, {1, max_size}};
  bench_cuda::stream_pair st;
  bench::event_timer timer[2] = {bench::event_timer(0), bench::event_timer(1)};
  bench::plan const plan = bench::bandwidth_plan(o);
  std::vector<std::size_t> const sizes = o.quick ? std::vector<std::size_t>{bench::MiB, 64 * bench::MiB, bench::GiB}
                                                 : bench::geometric(4 * bench::KiB, max_size, 4);
  for (bool const bidir : {false, true}) {
    int const senders = bidir ? 2 : 1;
    for (std::size_t const size : sizes) {
      bench::row where = base("ce_copy", "copy-engine");
      where.variant = bidir ? "bidir" : "uni";
      where.size = size;
      where.metric = "bandwidth";
      where.unit = "GB/s";
      where.note = "cudaMemcpyPeerAsync, iterations = copies between the events";
      s.point(where, [&] {
        auto run = [&](int iters) {
          for (int d = 0; d < senders; ++d) {
            BENCH_CUDA(cudaSetDevice(d));
            timer[d].start(st.s[d]);
            for (int i = 0; i < iters; ++i)
              BENCH_CUDA(cudaMemcpyPeerAsync(dst[1 - d].get(), 1 - d, src[d].get(), d, size, st.s[d]));
            timer[d].stop(st.s[d]);
          }
          std::vector<double> ms;
          for (int d = 0; d < senders; ++d) ms.push_back(timer[d].ms());
          return ms;
        };
        auto value = [&](std::vector<double> const& ms, int iters) {
          double total = 0;
          for (double const t : ms) total += bench::gbps(static_cast<double>(size), t, iters);
          return total;
        };
        return finish(where, bench::measure(plan, s.coll(), run, value));
      });
    }
  }
}

template <bool Copy>
__global__ void __launch_bounds__(threads_per_cta, 1)
    sm_store_kernel(uint4* remote, uint4 const* local, std::size_t n, int iters) {
  std::size_t const first = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  for (int it = 0; it < iters; ++it) {
    if constexpr (Copy) {
      constexpr int unroll = 4;
      std::size_t i = first;
      for (; i + (unroll - 1) * stride < n; i += unroll * stride) {
        uint4 v[unroll];
#pragma unroll
        for (int u = 0; u < unroll; ++u) v[u] = local[i + u * stride];
#pragma unroll
        for (int u = 0; u < unroll; ++u) remote[i + u * stride] = v[u];
      }
      for (; i < n; i += stride) remote[i] = local[i];
    } else {
      uint4 const v{static_cast<unsigned>(it), 1u, 2u, 3u};
      for (std::size_t i = first; i < n; i += stride) remote[i] = v;
    }
  }
}

void sm_store(bench::session& s) {
  auto const& o = s.opt();
  bench_cuda::require_peer_access();
  constexpr std::size_t max_size = bench::GiB;
  bench::device_buffer<uint4> buf[2] = {{0, max_size / 16}, {1, max_size / 16}};
  bench::device_buffer<uint4> local[2] = {{0, max_size / 16}, {1, max_size / 16}};
  bench_cuda::stream_pair st;
  bench::event_timer timer[2] = {bench::event_timer(0), bench::event_timer(1)};
  bench::plan const plan = bench::bandwidth_plan(o);
  std::vector<std::size_t> const sizes =
      o.quick ? std::vector<std::size_t>{256 * bench::MiB} : std::vector<std::size_t>{64 * bench::MiB, bench::GiB};
  std::vector<int> const grid = o.quick ? std::vector<int>{1, 4, 8, 16, 132} : std::vector<int>{1, 4, 8, 16, 32, 132};
  for (bool const copy : {false, true}) {
    for (bool const bidir : {false, true}) {
      if (o.quick && copy && bidir) continue;
      int const senders = bidir ? 2 : 1;
      for (int const ctas : grid) {
        for (std::size_t const size : sizes) {
          bench::row where = base("sm_store", copy ? "sm-copy" : "sm-store");
          where.variant = std::string(copy ? "copy" : "store") + (bidir ? "-bidir" : "-uni");
          where.scope = "block";
          where.ctas = ctas;
          where.threads = threads_per_cta;
          where.size = size;
          where.metric = "bandwidth";
          where.unit = "GB/s";
          s.point(where, [&] {
            auto run = [&](int iters) {
              for (int d = 0; d < senders; ++d) {
                BENCH_CUDA(cudaSetDevice(d));
                timer[d].start(st.s[d]);
                if (copy)
                  sm_store_kernel<true>
                      <<<ctas, threads_per_cta, 0, st.s[d]>>>(buf[1 - d].get(), local[d].get(), size / 16, iters);
                else
                  sm_store_kernel<false>
                      <<<ctas, threads_per_cta, 0, st.s[d]>>>(buf[1 - d].get(), local[d].get(), size / 16, iters);
                BENCH_CUDA(cudaGetLastError());
                timer[d].stop(st.s[d]);
              }
              std::vector<double> ms;
              for (int d = 0; d < senders; ++d) ms.push_back(timer[d].ms());
              return ms;
            };
            auto value = [&](std::vector<double> const& ms, int iters) {
              double total = 0;
              for (double const t : ms) total += bench::gbps(static_cast<double>(size), t, iters);
              return total;
            };
            return finish(where, bench::measure(plan, s.coll(), run, value));
          });
        }
      }
    }
  }
}

template <bool Atomic>
__global__ void flag_kernel(unsigned long long* mine, unsigned long long* theirs, int iters, bool initiator) {
  for (int i = 1; i <= iters; ++i) {
    auto const v = static_cast<unsigned long long>(i);
    auto post = [&] {
      if constexpr (Atomic) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(*theirs).store(v, cuda::memory_order_release);
      } else {
        *static_cast<unsigned long long volatile*>(theirs) = v;
      }
    };
    auto wait = [&] {
      if constexpr (Atomic) {
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> f(*mine);
        while (f.load(cuda::memory_order_acquire) < v) {
        }
      } else {
        while (*static_cast<unsigned long long volatile*>(mine) < v) {
        }
      }
    };
    if (initiator) {
      post();
      wait();
    } else {
      wait();
      post();
    }
  }
}

void flag_pingpong(bench::session& s) {
  auto const& o = s.opt();
  bench_cuda::require_peer_access();
  bench::device_buffer<unsigned long long> flag[2] = {{0, 1}, {1, 1}};
  bench_cuda::stream_pair st;
  bench::event_timer timer(0);
  bench::plan const plan = bench::latency_plan(o, 1000, 200);
  for (bool const atomic : {false, true}) {
    bench::row where = base("flag_pingpong", "peer-flag");
    where.variant = atomic ? "release-acquire" : "volatile";
    where.scope = "thread";
    where.ctas = 1;
    where.threads = 1;
    where.size = 8;
    where.metric = "one_way_latency";
    where.unit = "us";
    where.note = "round trip / 2";
    s.point(where, [&] {
      auto run = [&](int iters) {
        for (int d = 0; d < 2; ++d) flag[d].zero(st.s[d]);
        for (int d = 0; d < 2; ++d) {
          BENCH_CUDA(cudaSetDevice(d));
          BENCH_CUDA(cudaStreamSynchronize(st.s[d]));
        }
        return bench_cuda::time_initiator(st, timer, [&](int d, cudaStream_t stream) {
          if (atomic)
            flag_kernel<true><<<1, 1, 0, stream>>>(flag[d].get(), flag[1 - d].get(), iters, d == 0);
          else
            flag_kernel<false><<<1, 1, 0, stream>>>(flag[d].get(), flag[1 - d].get(), iters, d == 0);
        });
      };
      auto value = [](std::vector<double> const& ms, int iters) { return bench::us_per_iter(ms[0], iters) / 2; };
      return finish(where, bench::measure(plan, s.coll(), run, value));
    });
  }
}

/// One JSON line: what the GPUs are (no host name).
int describe_machine(std::string const& path) {
  int count = 0, driver = 0, runtime = 0;
  BENCH_CUDA(cudaGetDeviceCount(&count));
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  std::string j = "{\"gpu_count\":" + std::to_string(count) + ",\"cuda_driver_version\":" + std::to_string(driver) +
                  ",\"cuda_runtime_version\":" + std::to_string(runtime) + ",\"gpus\":[";
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    BENCH_CUDA(cudaGetDeviceProperties(&p, d));
    j += std::string(d ? "," : "") + "{\"name\":\"" + bench::json_escape(p.name) +
         "\",\"sm_count\":" + std::to_string(p.multiProcessorCount) +
         ",\"memory_bytes\":" + std::to_string(p.totalGlobalMem) + ",\"cc\":\"" + std::to_string(p.major) + "." +
         std::to_string(p.minor) + "\",\"peer_access\":[";
    for (int e = 0; e < count; ++e) {
      int can = e == d;
      if (e != d) BENCH_CUDA(cudaDeviceCanAccessPeer(&can, d, e));
      j += std::string(e ? "," : "") + std::to_string(can);
    }
    j += "]}";
  }
  j += "]}";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return 1;
  std::fprintf(f, "%s\n", j.c_str());
  std::fclose(f);
  std::printf("%s\n", j.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--case" && std::string(argv[2]) == "machine" &&
      std::string(argv[3]) == "--out") {
    try {
      return describe_machine(argv[4]);
    } catch (std::exception const& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  std::vector<bench::case_entry> cases{
      {"ce_copy", ce_copy},
      {"sm_store", sm_store},
      {"flag_pingpong", flag_pingpong},
  };
  for (auto& c : bench_cuda::limit_cases()) cases.push_back(std::move(c));
  return bench::run_main(argc, argv, "cuda", cases, {}, /*writer=*/true, {0, 1});
}
