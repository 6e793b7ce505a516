// expect: gpucomm: atomics other than add take a 32- or 64-bit integer
#include <gpucomm/gpucomm.cuh>
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<short> s, gpucomm::sym_ptr<int> i) {
  c.swap(gpucomm::this_thread(), i, 1, 0);
#if GPUCOMM_MISUSE
  c.swap(gpucomm::this_thread(), s, short{1}, 0);
#endif
}
