// expect: missing=gpucomm::capability::atomics
#include "put_only_transport.cuh"
__global__ void k(gpucomm::comm<PutOnly> c, gpucomm::sym_ptr<int> p, int* local) {
  c.put(gpucomm::this_thread(), p, local, 1, 0);
#if GPUCOMM_MISUSE
  c.fetch_add(gpucomm::this_thread(), p, 1, 0);
#endif
}
