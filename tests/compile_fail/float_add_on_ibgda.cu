// expect: missing=gpucomm::capability::float_add
// mlx5 NICs have no floating-point atomics: IBGDAPost (and a route through it) refuses them.
#include <gpucomm/gpucomm.cuh>
using routed = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
__global__ void k(gpucomm::comm<routed> c, gpucomm::sym_ptr<unsigned> u, gpucomm::sym_ptr<float> f) {
  c.fetch_add(gpucomm::this_thread(), u, 1u, 0);
#if GPUCOMM_MISUSE
  c.fetch_add(gpucomm::this_thread(), f, 1.0f, 0);
#endif
}
