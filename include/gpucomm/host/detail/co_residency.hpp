#pragma once
// What the co-residency cap of a team's collectives is made from (collectives/launch_shape.hpp,
// detail::co_residency_cap): the fewest SMs of any GPU of the world, and the most members of the
// team on one GPU. Used by team_workspace and moe_plan.

#include <cuda_runtime_api.h>

#include "../../error.hpp"
#include "../../team.hpp"
#include "../world.hpp"

namespace gpucomm::detail {

/// The fewest SMs of any GPU of the world (collective: every process agrees).
int smallest_sm_count(world& w);

/// The most members of t on one GPU.
int most_members_per_gpu(world const& w, team const& t);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "co_residency.inl"
#endif
