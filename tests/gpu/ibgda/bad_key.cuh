#pragma once
// A bad remote key for IBGDAPost's error-path tests (ibgda_test.cu, ../ops/failure.cu): PE pe's
// device state with the rkey it uses for PE target corrupted, so the NIC (model) answers that
// PE's writes to target with a remote access error.
#include <vector>

#include "../harness.cuh"

namespace gpucomm::test {

/// Points `state.peers` at a copy of its table, on PE pe's GPU, whose entry for `target` has a bad
/// rkey; returns the copy, to cudaFree once the kernels using it are done.
inline void* corrupt_rkey(gpucomm::world& w, int pe, int target, gpucomm::IBGDAPost::device_state& state) {
  std::vector<gpucomm::detail::ibgda_peer> peers(static_cast<std::size_t>(w.npes()));
  std::size_t const bytes = peers.size() * sizeof(peers[0]);
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));  // PE pe's kernel reads it
  GPUCOMM_TEST_CUDA(cudaMemcpy(peers.data(), state.peers, bytes, cudaMemcpyDeviceToHost));
  peers[static_cast<std::size_t>(target)].rkey_wire ^= 0x00700000u;
  void* table = nullptr;
  GPUCOMM_TEST_CUDA(cudaMalloc(&table, bytes));
  GPUCOMM_TEST_CUDA(cudaMemcpy(table, peers.data(), bytes, cudaMemcpyHostToDevice));
  state.peers = static_cast<gpucomm::detail::ibgda_peer const*>(table);
  return table;
}

}  // namespace gpucomm::test
