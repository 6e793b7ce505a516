// What compute-sanitizer's racecheck makes of bulk loads into one shared-memory buffer, so that the
// GPU round can tell its reports on P2PCopy from real hazards (scripts/lib/racecheck-bulk.sh,
// docs/guide/p2p_copy.md "Sanitizers").
//
// One thread bulk loads buffer A into shared memory, waits for the load's mbarrier phase, then
// bulk loads buffer B into the same shared memory and waits again; the kernel then copies the
// shared memory out, and the host checks it holds B. The first load has completed, and the thread
// has observed it, before the second is issued: there is no race. Two variants:
//   "one mbarrier re-initialised": between the loads the mbarrier is invalidated and initialised
//       again (mbarrier.inval, mbarrier.init), as P2PCopy's pipeline does from one call to the
//       next. racecheck (CUDA 13.0) reports a write-write hazard between the two loads here:
//       it loses the ordering the completed phase gave once the mbarrier is re-initialised.
//   "two mbarriers": the second load completes on another mbarrier, nothing re-initialised.
//       racecheck reports nothing.
// Both pass as plain tests (the data is right); the round runs each under racecheck on its own.
#include <cstdint>
#include <vector>

#include <gpucomm/detail/bulk_copy.cuh>

#include "../harness.cuh"

namespace {

constexpr unsigned probe_bytes = 1024;

/// P2PCopy's own bulk load (detail::bulk_load), then its wait for the phase.
__device__ void load_and_wait(unsigned char* dst, unsigned char const* src, std::uint64_t* bar, std::uint32_t parity) {
  gpucomm::detail::bulk_load(dst, src, probe_bytes, bar);
  gpucomm::detail::wait_mbarrier(bar, parity);
}

__global__ void reload_kernel(bool reinitialise, unsigned char const* a, unsigned char const* b, unsigned char* out) {
  __shared__ alignas(128) unsigned char buffer[probe_bytes];
  __shared__ std::uint64_t bars[2];
  if (threadIdx.x != 0) return;
  gpucomm::detail::init_mbarriers(bars, 2);
  load_and_wait(buffer, a, &bars[0], 0);
  if (reinitialise) {
    gpucomm::detail::inval_mbarriers(bars, 1);
    gpucomm::detail::init_mbarriers(bars, 1);
    load_and_wait(buffer, b, &bars[0], 0);
  } else {
    load_and_wait(buffer, b, &bars[1], 0);
  }
  for (unsigned k = 0; k < probe_bytes; ++k) out[k] = buffer[k];
}

void run_probe(bool reinitialise) {
  auto& w = gpucomm::test::the_world();
  int const pe = w.local_pes().front();
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  std::vector<unsigned char> a(probe_bytes), b(probe_bytes), got(probe_bytes, 0);
  for (unsigned k = 0; k < probe_bytes; ++k) {
    a[k] = static_cast<unsigned char>(k * 7 + 1);
    b[k] = static_cast<unsigned char>(k * 13 + 5);
  }
  unsigned char *da = nullptr, *db = nullptr, *dout = nullptr;
  GPUCOMM_TEST_CUDA(cudaMalloc(&da, probe_bytes));
  GPUCOMM_TEST_CUDA(cudaMalloc(&db, probe_bytes));
  GPUCOMM_TEST_CUDA(cudaMalloc(&dout, probe_bytes));
  GPUCOMM_TEST_CUDA(cudaMemcpy(da, a.data(), probe_bytes, cudaMemcpyHostToDevice));
  GPUCOMM_TEST_CUDA(cudaMemcpy(db, b.data(), probe_bytes, cudaMemcpyHostToDevice));
  GPUCOMM_TEST_CUDA(cudaMemset(dout, 0xEE, probe_bytes));
  reload_kernel<<<1, 32>>>(reinitialise, da, db, dout);
  GPUCOMM_TEST_CUDA(cudaGetLastError());
  GPUCOMM_TEST_CUDA(cudaDeviceSynchronize());
  GPUCOMM_TEST_CUDA(cudaMemcpy(got.data(), dout, probe_bytes, cudaMemcpyDeviceToHost));
  std::size_t bad = 0;
  for (unsigned k = 0; k < probe_bytes; ++k) bad += got[k] != b[k];
  CHECK(bad == 0);
  GPUCOMM_TEST_CUDA(cudaFree(da));
  GPUCOMM_TEST_CUDA(cudaFree(db));
  GPUCOMM_TEST_CUDA(cudaFree(dout));
}

}  // namespace

TEST_CASE("racecheck probe: two bulk loads into one buffer, one mbarrier re-initialised",
          "[gpu][p2p][racecheck-probe-reinit]") {
  run_probe(true);
}

TEST_CASE("racecheck probe: two bulk loads into one buffer, two mbarriers", "[gpu][p2p][racecheck-probe-control]") {
  run_probe(false);
}
