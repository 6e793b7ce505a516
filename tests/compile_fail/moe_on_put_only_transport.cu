// expect: gpucomm: MoE dispatch and combine need a transport with put, signal and quiet
#include <gpucomm/collectives/moe.cuh>

#include "put_only_transport.cuh"
__global__ void k(gpucomm::comm<PutOnly> c, gpucomm::moe_view v, gpucomm::moe_dispatch_args a, int* scratch) {
  (void)c;
#if GPUCOMM_MISUSE
  gpucomm::moe_dispatch(c, cooperative_groups::this_thread_block(), v, a, scratch);
#else
  (void)v, (void)a, (void)scratch;
#endif
}
