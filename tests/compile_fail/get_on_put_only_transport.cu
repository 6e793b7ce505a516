// expect: missing=gpucomm::capability::get
#include "put_only_transport.cuh"
__global__ void k(gpucomm::comm<PutOnly> c, gpucomm::sym_ptr<int> p, int* local) {
  c.put(gpucomm::this_thread(), p, local, 1, 0);
#if GPUCOMM_MISUSE
  c.get(gpucomm::this_thread(), local, gpucomm::sym_ptr<int const>(p), 1, 0);
#endif
}
