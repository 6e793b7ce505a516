#pragma once
// The bodies of pe_streams.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline owned_stream::~owned_stream() {
  if (s_) {
    cudaSetDevice(device_);
    cudaStreamDestroy(s_);
  }
}

inline void pe_streams::create(int pe, int device) {
  GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
  GPUCOMM_CUDA_CHECK(cudaFree(nullptr), pe);  // create the primary context before the driver calls
  cudaStream_t s{};
  GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), pe);
  streams_.emplace(pe, owned_stream(s, device));
}

inline cudaStream_t pe_streams::get(int pe) const {
  auto const it = streams_.find(pe);
  if (it == streams_.end()) {
    throw error("world::stream", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }
  return it->second.get();
}

inline void pe_streams::synchronize() const {
  current_device_guard const keep;
  std::string failed;
  int first = -1;
  for (auto const& [pe, s] : streams_) {
    cudaError_t rc = cudaSetDevice(s.device());
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(s.get());
    if (rc == cudaSuccess) continue;
    if (first < 0) first = pe;
    failed += (failed.empty() ? "PE " : "; PE ") + std::to_string(pe) + ": " + cudaGetErrorName(rc) + " (" +
              cudaGetErrorString(rc) + ")";
  }
  if (first >= 0) {
    throw error("world::synchronize", first, "a kernel on the world's streams failed: " + failed,
                "a gpucomm check or a wait that gave up (world_options::wait_timeout) prints a "
                "\"gpucomm: ...\" line on standard output naming the PE, the operation and the address before it "
                "traps; a kernel's fault loses the CUDA context of its GPU, so no later CUDA call there can "
                "succeed: destroy the world and end the process (docs/guide/reliability.md)");
  }
}

}  // namespace gpucomm::detail
