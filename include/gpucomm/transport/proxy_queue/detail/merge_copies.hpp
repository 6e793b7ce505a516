#pragma once
// Joining copies that continue one another, for ProxyQueue's copy-engine backend: a copy engine
// pays per copy, so many small puts to neighbouring words cost as many copies unless they go as
// one. Host only and free of CUDA, so the host tests check it.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace gpucomm::detail {

/// One copy: `bytes` from `src` to `dst`.
struct copy_range {
  std::uintptr_t dst = 0;
  std::uintptr_t src = 0;
  std::size_t bytes = 0;
};

/// Sorts `ranges` by destination (then source) and joins each run in which every copy starts,
/// at both ends, where the one before it ends; the joined copies are the first entries of
/// `ranges`, and their count is returned. The order of copies is not kept: only copies that may
/// run in any order among themselves may be joined (one batch of ProxyQueue's, which no fence
/// divides). Overlapping copies stay separate; empty ones are dropped.
std::size_t merge_contiguous(std::vector<copy_range>& ranges);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "merge_copies.inl"
#endif
