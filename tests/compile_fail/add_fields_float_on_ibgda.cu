// expect: Transport=gpucomm::IBGDAPost, Aggregate=counters, Index=1UL, Field=float]
// NIC atomics have no float add: add_fields names the field that needs it.
#include <gpucomm/aggregate.cuh>
#include <gpucomm/gpucomm.cuh>
struct counters {
  unsigned long long bytes;
  float weight;
};
struct integers {
  unsigned long long bytes;
  int hits;
};
__global__ void k(gpucomm::comm<gpucomm::IBGDAPost> c, gpucomm::sym_ptr<counters> f, gpucomm::sym_ptr<integers> i) {
  gpucomm::add_fields(c, gpucomm::this_thread(), i, integers{1, 2}, 0);
#if GPUCOMM_MISUSE
  gpucomm::add_fields(c, gpucomm::this_thread(), f, counters{1, 2.f}, 0);
#endif
}
