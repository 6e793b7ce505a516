// expect: Op=gpucomm::reduction::bit_or, Aggregate=sample, Index=1UL, Field=float]
// A field-wise reduction names the field that cannot take the operation: its index and type.
#include <gpucomm/aggregate.cuh>
#include <gpucomm/gpucomm.cuh>
struct sample {
  unsigned mask;
  float weight;
};
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::collective_workspace ws, sample* dst,
                  sample const* src) {
  using ok = gpucomm::reduction::per_field<gpucomm::reduction::bit_or, gpucomm::reduction::max>;
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, ok{});
#if GPUCOMM_MISUSE
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, gpucomm::reduction::bit_or{});
#endif
}
