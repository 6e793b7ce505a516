// Aggregates field by field (Boost.PFR): every PE summarises its data in a plain struct, one
// allreduce with one operation per field combines the summaries of all PEs, and add_fields keeps
// world-wide counters at PE 0 with one atomic per field. Runs in one process with `pes_per_gpu`
// PEs on every visible GPU (argument 1, default 2).
#include <gpucomm/aggregate.cuh>
#include <gpucomm/gpucomm.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;
namespace red = gpucomm::reduction;
using comm_t = gpucomm::comm<gpucomm::NVLinkStore>;

struct summary {  // a plain aggregate: no constructors, public fields
  double sum;
  double squares;
  float largest;
  unsigned long long count;
};
using combine_summaries = red::per_field<red::sum, red::sum, red::max, red::sum>;

struct counters {
  unsigned long long elements;
  int kernels;
};

__global__ void __launch_bounds__(1024)
    summarise(comm_t c, gpucomm::collective_workspace ws, float const* data, std::size_t n, summary* mine, summary* all,
              gpucomm::sym_ptr<counters> totals) {
  auto block = cg::this_thread_block();
  __shared__ summary part[1024];
  summary s{0, 0, -INFINITY, 0};
  for (std::size_t i = block.thread_rank(); i < n; i += block.num_threads())
    s = {s.sum + data[i], s.squares + double(data[i]) * data[i], fmaxf(s.largest, data[i]), s.count + 1};
  part[block.thread_rank()] = s;
  block.sync();
  if (block.thread_rank() == 0) {
    for (unsigned t = 1; t < block.num_threads(); ++t)
      s = {s.sum + part[t].sum, s.squares + part[t].squares, fmaxf(s.largest, part[t].largest),
           s.count + part[t].count};
    *mine = s;
  }
  block.sync();
  gpucomm::allreduce(c, block, ws, all, mine, 1, combine_summaries{});  // field by field, every PE
  gpucomm::add_fields(c, block, totals, counters{n, 1}, 0);             // one atomic add per field
  c.quiet(block);
}

int main(int argc, char** argv) try {
  int const pes_per_gpu = argc > 1 ? std::atoi(argv[1]) : 2;
  int gpus = 0;
  GPUCOMM_CUDA_CHECK(cudaGetDeviceCount(&gpus), -1);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d)
    for (int k = 0; k < pes_per_gpu; ++k) devices.push_back(d);
  gpucomm::world w(devices);
  w.prepare(summarise);  // PEs sharing a GPU: load the kernel and reserve its stack before any launch
  gpucomm::team_workspace ws(w, w.team_world(), {.block_bytes = 1 << 10});
  std::size_t const n = 10000;
  auto data = w.alloc<float>(n);
  auto mine = w.alloc<summary>(1);
  auto all = w.alloc<summary>(1);
  auto totals = w.alloc<counters>(1);
  for (int pe : w.local_pes()) {  // PE p holds p, p + 1, ... (mod 100)
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float((std::size_t(pe) + i) % 100);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(data.ptr(pe).get(), v.data(), n * sizeof(float), cudaMemcpyHostToDevice), pe);
    GPUCOMM_CUDA_CHECK(cudaMemset(totals.ptr(pe).get(), 0, sizeof(counters)), pe);
  }
  w.barrier();
  for (int pe : w.local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(w.device(pe)), pe);
    summarise<<<1, 1024, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), ws.view(pe), data.ptr(pe).get(), n,
                                            mine.ptr(pe).get(), all.ptr(pe).get(), totals.ptr(pe));
    GPUCOMM_CUDA_CHECK(cudaGetLastError(), pe);
  }
  w.synchronize();
  w.barrier();
  // The host's own summary of every PE's data.
  double sum = 0, squares = 0;
  for (int pe = 0; pe < w.npes(); ++pe)
    for (std::size_t i = 0; i < n; ++i) {
      double const x = double((std::size_t(pe) + i) % 100);
      sum += x, squares += x * x;
    }
  unsigned long long const count = n * std::size_t(w.npes());
  bool ok = true;
  for (int pe : w.local_pes()) {
    summary s;
    GPUCOMM_CUDA_CHECK(cudaMemcpy(&s, all.ptr(pe).get(), sizeof s, cudaMemcpyDeviceToHost), pe);
    ok = ok && s.count == count && s.largest == 99.f && std::fabs(s.sum - sum) <= 1e-9 * sum &&
         std::fabs(s.squares - squares) <= 1e-9 * squares;
    if (pe == 0) {
      counters t;
      GPUCOMM_CUDA_CHECK(cudaMemcpy(&t, totals.ptr(pe).get(), sizeof t, cudaMemcpyDeviceToHost), pe);
      ok = ok && t.elements == count && t.kernels == w.npes();
    }
  }
  double const mean = sum / double(count);
  std::printf("%llu values over %d PE(s): mean %.3f, variance %.3f, max 99: %s\n", count, w.npes(), mean,
              squares / double(count) - mean * mean, ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
} catch (gpucomm::error const& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
