// expect: gpucomm::reduction::sum, gpucomm::reduction::max>, Aggregate=stats]
#include <gpucomm/aggregate.cuh>
#include <gpucomm/gpucomm.cuh>
struct stats {
  float sum;
  int count;
  double sq;
};
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::collective_workspace ws, stats* dst,
                  stats const* src) {
  namespace red = gpucomm::reduction;
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, red::per_field<red::sum, red::max, red::min>{});
#if GPUCOMM_MISUSE
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, red::per_field<red::sum, red::max>{});
#endif
}
