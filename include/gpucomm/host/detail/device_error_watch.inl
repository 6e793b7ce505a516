#pragma once
// The bodies of device_error_watch.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline int device_error_watch::host_state::add(int pe, std::uint64_t const* words, std::size_t count, report r) {
  int const key = next_++;
  watched_.emplace(key, entry{pe, words, count, std::move(r)});
  return key;
}

inline void device_error_watch::host_state::on_synchronize() const {
  current_device_guard const keep;
  std::exception_ptr first;
  for (auto const& [key, e] : watched_) {
    std::vector<std::uint64_t> now(e.count);
    GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(e.pe)), e.pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(now.data(), e.words, e.count * 8, cudaMemcpyDeviceToHost), e.pe);
    try {
      e.check(e.pe, now);
    } catch (error const&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace gpucomm::detail
