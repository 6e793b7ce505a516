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

/// Joins copies that continue one another (the next one starts, at both ends, where one before it
/// ends) into as few copies as it can; the joined copies are the first entries of `ranges`, in
/// order of destination, and their count is returned. The order of copies is not kept: only
/// copies that may run in any order among themselves may be joined (one batch of ProxyQueue's,
/// which no fence divides). Bytes copied more than once from the same place (a batch that puts
/// the same run twice, or runs that overlap) are copied once: copies that move bytes from the same
/// place (the same distance between destination and source) and overlap or touch become one. That
/// leaves the same bytes only while no source changes before the batch's copies are made:
/// ProxyQueue's sources stay unchanged until the put completes, by the contract. Copies to the
/// same bytes from other places, and other overlapping copies, stay separate; empty ones are
/// dropped.
///
/// Cost: linear when the copies come mostly in order of destination (runs that continue one
/// another are joined before anything is sorted); a sort of what is left otherwise. `open` is
/// scratch, kept by the caller so that no call allocates once it has grown.
std::size_t merge_contiguous(std::vector<copy_range>& ranges, std::vector<std::size_t>& open);

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "merge_copies.inl"
#endif
