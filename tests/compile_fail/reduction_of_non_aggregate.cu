// expect: reduction_needs_plain_aggregate<T> [with T=meter]
// A class with a constructor is not a plain aggregate: no field-wise reduction, and the error says so.
#include <gpucomm/aggregate.cuh>
#include <gpucomm/gpucomm.cuh>
struct meter {
  __host__ __device__ meter() : value(0) {}
  float value;
};
struct plain {
  float value;
};
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::collective_workspace ws, meter* dst, meter const* src,
                  plain* pdst) {
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, pdst, pdst, 8, gpucomm::reduction::sum{});
#if GPUCOMM_MISUSE
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, gpucomm::reduction::sum{});
#endif
}
