// expect: gpucomm: the first argument must be the calling group
#include <gpucomm/gpucomm.cuh>
struct not_a_group {
  unsigned size() const { return 1; }
};
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<int> i, int* local) {
  c.put(gpucomm::this_thread(), i, local, 1, 0);
#if GPUCOMM_MISUSE
  c.put(not_a_group{}, i, local, 1, 0);
#endif
}
