// expect: P2PCopy takes its own staging type
// A group's staging shapes P2PCopy's pipeline at compile time: a comm<P2PCopy> (5 x 8 KiB) given
// another policy's stages (3 x 256 B) is refused, not run with the wrong shape.
#include <gpucomm/gpucomm.cuh>
__global__ void k(gpucomm::comm<gpucomm::P2PCopy> c, gpucomm::sym_ptr<int> dst, int const* src) {
  __shared__ gpucomm::P2PCopy::staging own;
  c.put(gpucomm::with_staging(gpucomm::this_thread(), own), dst, src, 1024, 0);
#if GPUCOMM_MISUSE
  __shared__ gpucomm::BasicP2PCopy<256, 3>::staging foreign;
  c.put(gpucomm::with_staging(gpucomm::this_thread(), foreign), dst, src, 1024, 0);
#endif
}
