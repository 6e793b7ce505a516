#pragma once
// IBGDAPost's settings that an option or an environment variable gives, read strictly
// (host/detail/env_count.hpp): an option that is set wins; a bad value of either throws a
// gpucomm::error naming it. Host only, apart from the host half so that host tests reach them.

#include "../../error.hpp"
#include "../../host/detail/env_count.hpp"

namespace gpucomm::detail {

/// IBGDAPost's RC QPs per peer: ibgda_options::qps_per_peer when > 0, else GPUCOMM_QPS_PER_PEER
/// (1 to 64), else 2.
inline int qps_per_peer_from(int option, int pe) {
  if (option > 0) return option;
  if (option < 0)
    throw error("IBGDAPost", pe, "ibgda_options::qps_per_peer is negative", "give 0 (default) or a count >= 1");
  auto const env =
      env_count("GPUCOMM_QPS_PER_PEER", 1, 64, "IBGDAPost", "set it to the number of RC QPs per peer, e.g. 2", pe);
  return env ? static_cast<int>(*env) : 2;
}

}  // namespace gpucomm::detail
