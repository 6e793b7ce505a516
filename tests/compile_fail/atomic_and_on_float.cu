// expect: gpucomm: atomics other than add take a 32- or 64-bit integer
#include <gpucomm/gpucomm.cuh>
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<float> f) {
  c.fetch_add(gpucomm::this_thread(), f, 1.0f, 0);
#if GPUCOMM_MISUSE
  c.fetch_and(gpucomm::this_thread(), gpucomm::sym_ptr_cast<float>(f), 1.0f, 0);
#endif
}
