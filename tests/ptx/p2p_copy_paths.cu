// Kernels whose PTX tests/ptx/check_p2p_copy_ptx.py inspects: which of them issue P2PCopy's L2
// prefetch, and which call the debug note for an unstaged copy. Compiled to PTX only, twice:
// with GPUCOMM_DEBUG=1 and =0. Every kernel is extern "C", so the script finds it by name.
#include <cooperative_groups.h>

#include <gpucomm/comm.cuh>
#include <gpucomm/transport/p2p_copy.cuh>

using prefetching = gpucomm::BasicP2PCopy<8192, 5, 1, 2>;

/// A staged put with the default policy: no prefetch.
extern "C" __global__ void staged_default(gpucomm::comm<gpucomm::P2PCopy> c, gpucomm::sym_ptr<float> d, float const* s,
                                          std::size_t n) {
  __shared__ gpucomm::P2PCopy::staging st;
  c.put(gpucomm::with_staging(cooperative_groups::this_thread_block(), st), d, s, n, 1);
}

/// A staged put with PrefetchAhead = 2: the prefetch.
extern "C" __global__ void staged_prefetch(gpucomm::comm<prefetching> c, gpucomm::sym_ptr<float> d, float const* s,
                                           std::size_t n) {
  __shared__ prefetching::staging st;
  c.put(gpucomm::with_staging(cooperative_groups::this_thread_block(), st), d, s, n, 1);
}

/// A get with PrefetchAhead = 2: gets are never prefetched (their source is the peer).
extern "C" __global__ void staged_prefetch_get(gpucomm::comm<prefetching> c, float* d, gpucomm::sym_ptr<float const> s,
                                               std::size_t n) {
  __shared__ prefetching::staging st;
  c.get(gpucomm::with_staging(cooperative_groups::this_thread_block(), st), d, s, n, 1);
}

/// Unstaged put and get with a plain group: the note, in debug builds.
extern "C" __global__ void plain_put(gpucomm::comm<gpucomm::P2PCopy> c, gpucomm::sym_ptr<float> d, float const* s,
                                     std::size_t n) {
  c.put(cooperative_groups::this_thread_block(), d, s, n, 1);
}
extern "C" __global__ void plain_get(gpucomm::comm<gpucomm::P2PCopy> c, float* d, gpucomm::sym_ptr<float const> s,
                                     std::size_t n) {
  c.get(cooperative_groups::this_thread_block(), d, s, n, 1);
}

/// The same through without_staging: no note.
extern "C" __global__ void chosen_put(gpucomm::comm<gpucomm::P2PCopy> c, gpucomm::sym_ptr<float> d, float const* s,
                                      std::size_t n) {
  c.put(gpucomm::without_staging(cooperative_groups::this_thread_block()), d, s, n, 1);
}
extern "C" __global__ void chosen_get(gpucomm::comm<gpucomm::P2PCopy> c, float* d, gpucomm::sym_ptr<float const> s,
                                      std::size_t n) {
  c.get(gpucomm::without_staging(cooperative_groups::this_thread_block()), d, s, n, 1);
}
