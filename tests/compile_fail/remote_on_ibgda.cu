// expect: missing=gpucomm::capability::load_store
// IBGDAPost has no load/store path to its peers.
#include <gpucomm/gpucomm.cuh>
__global__ void k(gpucomm::comm<gpucomm::IBGDAPost> c, gpucomm::sym_ptr<int> p) {
  c.put(gpucomm::this_thread(), p, p.get(), 1, 0);
#if GPUCOMM_MISUSE
  *c.remote(p, 0) = 1;
#endif
}
