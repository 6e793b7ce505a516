#pragma once
// A bad remote key for IBGDAPost's error-path tests (ibgda_test.cu, ../ops/failure.cu): PE pe's
// device state with every rkey it uses for PE target corrupted, so the NIC (model) answers that
// PE's writes to target with a remote access error.
#include <vector>

#include "../harness.cuh"

namespace gpucomm::test {

/// Points `state.keys.rows` at a copy of its key table, on PE pe's GPU, whose rkeys of PE `target`
/// are bad in every row; returns the copy, to cudaFree once the kernels using it are done.
inline void* corrupt_rkey(gpucomm::world& w, int pe, int target, gpucomm::IBGDAPost::device_state& state) {
  gpucomm::detail::heap_keys& keys = state.keys;
  std::vector<std::uint32_t> rows(keys.pages * keys.row_words);
  std::size_t const bytes = rows.size() * sizeof(rows[0]);
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));  // PE pe's kernel reads it
  GPUCOMM_TEST_CUDA(cudaMemcpy(rows.data(), keys.rows, bytes, cudaMemcpyDeviceToHost));
  for (std::uint64_t page = 0; page < keys.pages; ++page) {
    std::uint32_t& rkey = rows[page * keys.row_words + 1 + static_cast<std::uint64_t>(target)];
    if (rkey != gpucomm::detail::heap_keys::none) rkey ^= 0x00700000u;
  }
  void* table = nullptr;
  GPUCOMM_TEST_CUDA(cudaMalloc(&table, bytes));
  GPUCOMM_TEST_CUDA(cudaMemcpy(table, rows.data(), bytes, cudaMemcpyHostToDevice));
  keys.rows = static_cast<std::uint32_t const*>(table);
  return table;
}

}  // namespace gpucomm::test
