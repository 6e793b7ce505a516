#pragma once
// The calling-group scopes of NVSHMEM's perftests (-s thread|warp|block), shared by every library's
// cases: which group does one operation, and how the grid's bytes are split among the groups.

#include <cstddef>

namespace bench {

enum class scope { thread, warp, block };

inline constexpr scope all_scopes[] = {scope::thread, scope::warp, scope::block};

inline char const* name(scope s) {
  switch (s) {
    case scope::thread:
      return "thread";
    case scope::warp:
      return "warp";
    case scope::block:
      return "block";
  }
  return "?";
}

/// Threads of one group of scope s in a CTA of `threads` threads.
inline int group_threads(scope s, int threads) { return s == scope::thread ? 1 : s == scope::warp ? 32 : threads; }

/// CTA size of the single-CTA latency cases: one thread, one warp, or a 1024-thread block.
inline int latency_threads(scope s) { return s == scope::thread ? 1 : s == scope::warp ? 32 : 1024; }

#if defined(__CUDACC__)
/// Index of the calling thread's group in the grid (groups numbered CTA by CTA).
template <scope S>
__device__ std::size_t group_index() {
  if constexpr (S == scope::thread)
    return std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  else if constexpr (S == scope::warp)
    return std::size_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32;
  else
    return blockIdx.x;
}
#endif

/// Call f.template operator()<S>() with S the run-time scope as a compile-time constant.
template <class F>
decltype(auto) with_scope(scope s, F&& f) {
  switch (s) {
    case scope::thread:
      return f.template operator()<scope::thread>();
    case scope::warp:
      return f.template operator()<scope::warp>();
    default:
      return f.template operator()<scope::block>();
  }
}

}  // namespace bench
