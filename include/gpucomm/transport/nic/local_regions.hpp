#pragma once
// A PE's device table of the buffers registered with world::register_buffer (detail/staging.hpp),
// as the host halves of the transports with a NIC path (IBGDAPost, ProxyQueue) keep it. Host only.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../../detail/staging.hpp"
#include "../../error.hpp"
#include "../../host/detail/device_guard.hpp"

namespace gpucomm::detail {

/// Writes `list` whole into the table at `table`, in GPU `device`'s memory, for local PE `pe`
/// (errors name it). No kernel of that PE may read the table meanwhile, as world::register_buffer
/// says. Throws gpucomm::error.
inline void upload_local_regions(local_regions* table, std::vector<local_region> const& list, int device, int pe) {
  if (list.size() > local_regions::capacity) {
    throw error("world::register_buffer", pe,
                "PE " + std::to_string(pe) + " would have more than " + std::to_string(local_regions::capacity) +
                    " registered buffers",
                "unregister_buffer one it no longer needs");
  }
  current_device_guard const keep;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
  local_regions copy{};
  copy.count = static_cast<std::uint32_t>(list.size());
  std::copy(list.begin(), list.end(), copy.entries);
  GPUCOMM_CUDA_CHECK(cudaMemcpy(table, &copy, sizeof(copy), cudaMemcpyHostToDevice), pe);
}

}  // namespace gpucomm::detail
