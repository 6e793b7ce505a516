// IBGDAPost through the software NIC model: MODEL FIGURES, not NIC figures.
//   ibgda_post_cost     device-side cost of one operation: what the posting thread spends to
//                       reserve, build, publish and ring (no completion waited for). This part
//                       is the same code on a real NIC, apart from where the doorbell goes.
//   ibgda_model_latency put + quiet and fetch_add round trips, which include the model's host
//                       thread executing the WQE with cudaMemcpy: they describe the model only.
//   ibgda_local_buffer  a blocking put from, and get into, a local buffer of 4 KiB to 1 MiB by one
//                       block, with the buffer in the heap, in registered cudaMalloc'd memory and
//                       in unregistered cudaMalloc'd memory (staged): what staging costs on top,
//                       through the model (its copies dominate: compare the variants, not NICs).
// One process owns GPUs 0 and 1 (or GPU 0 alone: PE 0 to itself); one thread of PE 0 works.
// Writes the benchmark harness's rows (JSON lines) to <out.jsonl>.
//
// usage: bench_ibgda_model <out.jsonl>
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <gpucomm/gpucomm.cuh>

#include "../harness/harness.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using comm_t = gpucomm::comm<gpucomm::IBGDAPost>;

enum op_kind : int { put_inline_8 = 0, put_heap_64 = 1, signal_add = 2, atomic_add = 3 };

__device__ std::uint64_t now() { return cuda::ptx::get_sreg_globaltimer(); }

/// One thread posts `n` operations of one kind back to back (nothing waits for completion);
/// ns[0] = total time.
__global__ void post_cost(comm_t c, int kind, int n, int to, gpucomm::sym_ptr<std::uint64_t> buf,
                          unsigned long long* ns) {
  auto const one = gpucomm::this_thread();
  std::uint64_t const t0 = now();
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case put_inline_8:
        c.put_nbi(one, buf + i % 64, buf.get() + 64 + i % 64, 1, to);
        break;
      case put_heap_64:
        c.put_nbi(one, buf + 8 * (i % 8), buf.get() + 128, 8, to);
        break;
      case signal_add:
        c.signal(one, buf + 200, 1, gpucomm::signal_op::add, to);
        break;
      default:
        c.add(one, buf + 201, std::uint64_t{1}, to);
        break;
    }
  }
  ns[0] = now() - t0;
}

/// Round trips: put (8 B) + quiet, or fetch_add; ns[i] per iteration.
__global__ void round_trip(comm_t c, int kind, int n, int to, gpucomm::sym_ptr<std::uint64_t> buf,
                           unsigned long long* ns) {
  auto const one = gpucomm::this_thread();
  for (int i = 0; i < n; ++i) {
    std::uint64_t const t0 = now();
    if (kind == 0) {
      c.put(one, buf + 300, buf.get() + 301, 1, to);
      c.quiet(one);
    } else {
      (void)c.fetch_add(one, buf + 302, std::uint64_t{1}, to);
    }
    ns[i] = now() - t0;
  }
}

/// One block moves `bytes` between `local` and `remote` at PE `to`, blocking, n times: a put from
/// local, or a get into it; ns[i] per op.
__global__ void local_buffer_round(comm_t c, bool get, unsigned char* local, gpucomm::sym_ptr<unsigned char> remote,
                                   std::size_t bytes, int n, int to, unsigned long long* ns) {
  auto const block = cooperative_groups::this_thread_block();
  for (int i = 0; i < n; ++i) {
    std::uint64_t const t0 = now();
    if (get) {
      c.get(block, local, gpucomm::sym_ptr<unsigned char const>(remote), bytes, to);
    } else {
      c.put(block, remote, local, bytes, to);
    }
    if (threadIdx.x == 0) ns[i] = now() - t0;
  }
}

struct row {
  std::string kase, variant;
  double value, max;
  int iterations, repetitions;
  std::string note;
  std::size_t size = 8;
};

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out.jsonl>\n", argv[0]);
    return 2;
  }
  int gpus = 0;
  BENCH_CUDA(cudaGetDeviceCount(&gpus));
  gpucomm::world_options o;
  o.heap_bytes = std::size_t{64} << 20;
  gpucomm::world w(gpus >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0}, o);
  w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model, .qps_per_peer = 1});
  int const to = w.npes() - 1;
  auto buf = w.alloc<std::uint64_t>(512);
  comm_t const c = w.comm<gpucomm::IBGDAPost>(0);
  BENCH_CUDA(cudaSetDevice(w.device(0)));
  unsigned long long* d_ns = nullptr;
  constexpr int max_iters = 1000;
  BENCH_CUDA(cudaMalloc(&d_ns, sizeof(unsigned long long) * max_iters));
  std::vector<row> rows;
  char const* caveat = "software NIC model (a host thread moving bytes with cudaMemcpy), not a real NIC";

  // Device-side cost per op: 7 runs (1 warm-up) of 1000 posts; the ring (4096 WQEBBs) never fills,
  // and w.synchronize() completes each run before the next.
  struct {
    op_kind kind;
    char const* name;
  } const kinds[] = {{put_inline_8, "put_nbi 8 B (inline)"},
                     {put_heap_64, "put_nbi 64 B (from the heap)"},
                     {signal_add, "signal add"},
                     {atomic_add, "add (non-fetching atomic)"}};
  for (auto const& k : kinds) {
    std::vector<double> per_op;
    int const n = k.kind == put_heap_64 ? 500 : max_iters;  // 64 B puts: 1 WQEBB each as well
    for (int rep = 0; rep < 7; ++rep) {
      post_cost<<<1, 1, 0, w.stream(0)>>>(c, k.kind, n, to, buf.ptr(0), d_ns);
      BENCH_CUDA(cudaGetLastError());
      w.synchronize();
      unsigned long long ns = 0;
      BENCH_CUDA(cudaMemcpy(&ns, d_ns, sizeof(ns), cudaMemcpyDeviceToHost));
      if (rep > 0) per_op.push_back(static_cast<double>(ns) / n / 1e3);
    }
    std::sort(per_op.begin(), per_op.end());
    rows.push_back({"ibgda_post_cost", k.name, per_op[per_op.size() / 2], per_op.back(), n, 6,
                    std::string("one thread posts ") + std::to_string(n) +
                        " back to back, %globaltimer around the loop, per op; median of 6 runs (max = slowest run); " +
                        "device-side work only (the model executes the WQEs meanwhile on its host thread); " + caveat});
    std::printf("post cost, %-30s %.3f us/op\n", k.name, rows.back().value);
  }
  // Round trips through the model.
  for (int kind = 0; kind < 2; ++kind) {
    int const n = 300;
    round_trip<<<1, 1, 0, w.stream(0)>>>(c, kind, n, to, buf.ptr(0), d_ns);
    BENCH_CUDA(cudaGetLastError());
    w.synchronize();
    std::vector<unsigned long long> ns(n);
    BENCH_CUDA(cudaMemcpy(ns.data(), d_ns, sizeof(unsigned long long) * n, cudaMemcpyDeviceToHost));
    std::sort(ns.begin() + 20, ns.end());  // the first 20 are warm-up
    double const median = ns[20 + (n - 20) / 2] / 1e3, p99 = ns[20 + static_cast<std::size_t>(0.99 * (n - 21))] / 1e3;
    rows.push_back({"ibgda_model_latency", kind == 0 ? "put 8 B + quiet" : "fetch_add", median, p99, n - 20, 1,
                    std::string("one thread, %globaltimer per round trip, median of ") + std::to_string(n - 20) +
                        " (max = p99); includes the model executing the WQE: a figure of the model, " + caveat});
    std::printf("model round trip, %-20s median %.2f us, p99 %.2f us\n", rows.back().variant.c_str(), median, p99);
  }
  // Local buffers: the same put or get with the buffer in the heap, registered, or staged.
  {
    constexpr std::size_t most = std::size_t{1} << 20;
    auto area = w.alloc<unsigned char>(2 * most);  // [0, most): the peer's side; [most, 2 most): a heap buffer
    unsigned char* registered = nullptr;
    unsigned char* staged = nullptr;
    BENCH_CUDA(cudaSetDevice(w.device(0)));  // PE 0's GPU: register_buffer refuses memory of another
    BENCH_CUDA(cudaMalloc(&registered, most));
    BENCH_CUDA(cudaMalloc(&staged, most));
    BENCH_CUDA(cudaMemset(registered, 1, most));
    BENCH_CUDA(cudaMemset(staged, 2, most));
    w.register_buffer(0, registered, most);
    struct {
      unsigned char* local;
      char const* name;
    } const places[] = {
        {area.ptr(0).get() + most, "heap"}, {registered, "registered cudaMalloc"}, {staged, "cudaMalloc, staged"}};
    int const n = 60;  // the first 10 are warm-up
    for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 10, most}) {
      for (bool get : {false, true}) {
        for (auto const& p : places) {
          local_buffer_round<<<1, 256, 0, w.stream(0)>>>(c, get, p.local, area.ptr(0), bytes, n, to, d_ns);
          BENCH_CUDA(cudaGetLastError());
          w.synchronize();
          std::vector<unsigned long long> ns(n);
          BENCH_CUDA(cudaMemcpy(ns.data(), d_ns, sizeof(unsigned long long) * n, cudaMemcpyDeviceToHost));
          std::sort(ns.begin() + 10, ns.end());
          double const median = ns[10 + (n - 10) / 2] / 1e3, slowest = ns.back() / 1e3;
          std::string const variant = std::string(get ? "get" : "put") + ", " + p.name;
          rows.push_back({"ibgda_local_buffer", variant, median, slowest, n - 10, 1,
                          std::string("one block of 256 threads, blocking, %globaltimer per op, median of ") +
                              std::to_string(n - 10) + " (max = slowest); " + caveat,
                          bytes});
          std::printf("local buffer, %-32s %8zu B median %.2f us\n", variant.c_str(), bytes, median);
        }
      }
    }
    w.unregister_buffer(0, registered);
    BENCH_CUDA(cudaFree(registered));
    BENCH_CUDA(cudaFree(staged));
  }
  BENCH_CUDA(cudaFree(d_ns));

  FILE* f = std::fopen(argv[1], "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  for (auto const& r : rows) {
    std::fprintf(f,
                 "{\"library\": \"gpucomm\", \"transport\": \"IBGDAPost, NIC model\", \"npes\": %d, \"size\": %zu, "
                 "\"grid_barrier\": false, \"case\": \"%s\", \"variant\": \"%s\", \"scope\": \"thread\", \"ctas\": 1, "
                 "\"threads\": 1, \"metric\": \"%s\", \"value\": %.6f, \"min\": null, \"max\": %.6f, \"unit\": \"us\", "
                 "\"iterations\": %d, \"repetitions\": %d, \"status\": \"ok\", \"note\": \"%s\"}\n",
                 w.npes(), r.size, r.kase.c_str(), r.variant.c_str(), r.kase == "ibgda_post_cost" ? "cost" : "latency",
                 r.value, r.max, r.iterations, r.repetitions, r.note.c_str());
  }
  std::fclose(f);
  return 0;
} catch (std::exception const& e) {  // gpucomm::error, bench::failure
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
