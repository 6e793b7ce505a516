// expect: gpucomm: collectives need a transport with put_signal, signal and quiet
#include <gpucomm/collectives.cuh>

#include "put_only_transport.cuh"
__global__ void k(gpucomm::comm<PutOnly> c, gpucomm::collective_workspace ws, int* dst, int const* src) {
  (void)c;
#if GPUCOMM_MISUSE
  gpucomm::allgather(c, gpucomm::this_thread(), ws, dst, src, 8);
#else
  (void)ws, (void)dst, (void)src;
#endif
}
