// expect: reduction_cannot_take<Op, T> [with Op=gpucomm::reduction::bit_xor, T=float]
#include <gpucomm/gpucomm.cuh>
__global__ void k(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::collective_workspace ws, float* dst,
                  float const* src) {
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, gpucomm::reduction::sum{});
#if GPUCOMM_MISUSE
  gpucomm::allreduce(c, gpucomm::this_thread(), ws, dst, src, 8, gpucomm::reduction::bit_xor{});
#endif
}
