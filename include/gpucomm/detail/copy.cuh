#pragma once
// Group-cooperative memory copy with the widest vector the two addresses allow.
//
// A copy of at most 64 bytes goes in the widest word that divides both addresses and the length.
// A longer one is split into an exact byte head (up to the destination's vector alignment), a body
// of V-sized vectors, and an exact byte tail. V is the widest of 16/8/4/2/1 bytes for which source
// and destination are equally misaligned, so 16-byte loads and stores carry any copy whose
// addresses agree modulo 16. Vector i of the body goes to thread i % size: consecutive threads
// touch consecutive addresses (coalesced).
//
// Each part is one group-stride loop that takes two elements per thread at a time: both loads,
// then both stores. Two is the depth put_bw chose against NVSHMEM (docs/contributing/benchmarks.md, "The copy
// loop"): one element at a time falls behind once the source comes from HBM, and eight loads then
// eight stores fall behind on small and medium sizes. copy_depth::deep (four) is for the
// collectives' channel steps.
//
// Everything here is inline, the compiler free to unroll: out-of-line loops and copies cost
// block-scope put_signal latency at 8-64 bytes.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../group.cuh"

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Copy `count` V-sized elements, element i by the group's thread i % size.
/// Loads each thread keeps in flight in a group copy: two (pair), the default, or four (deep), for
/// the collectives' channel steps, where a CTA of 1024 threads copies up to a few hundred KiB per
/// step and two loads in flight leave it bound by the loads' latency.
enum class copy_depth { pair, deep };

template <class V, copy_depth Depth = copy_depth::pair, group G>
__device__ GPUCOMM_FORCEINLINE void copy_vectors(G const& g, V* dst, V const* src, std::size_t count) {
  std::size_t const size = group_size(g);
  std::size_t i = group_rank(g);
  if constexpr (Depth == copy_depth::deep) {
    constexpr std::size_t k = 4;
    for (; i + (k - 1) * size < count; i += k * size) {
      V v[k];
#pragma unroll
      for (std::size_t j = 0; j < k; ++j) v[j] = src[i + j * size];
#pragma unroll
      for (std::size_t j = 0; j < k; ++j) dst[i + j * size] = v[j];
    }
  }
  for (; i + size < count; i += 2 * size) {
    V const first = src[i];
    V const second = src[i + size];
    dst[i] = first;
    dst[i + size] = second;
  }
  if (i < count) dst[i] = src[i];
}

template <class V, copy_depth Depth = copy_depth::pair, group G>
__device__ GPUCOMM_FORCEINLINE void copy_aligned_as(G const& g, unsigned char* dst, unsigned char const* src,
                                                    std::size_t bytes) {
  constexpr std::size_t width = sizeof(V);
  std::size_t head = (width - (reinterpret_cast<std::uintptr_t>(dst) & (width - 1))) & (width - 1);
  if (head > bytes) head = bytes;
  std::size_t const count = (bytes - head) / width;
  std::size_t const tail_at = head + count * width;
  copy_vectors(g, dst, src, head);
  copy_vectors<V, Depth>(g, reinterpret_cast<V*>(dst + head), reinterpret_cast<V const*>(src + head), count);
  copy_vectors(g, dst + tail_at, src + tail_at, bytes - tail_at);
}

/// Call `f(V{})` with V the widest of 16/8/4/2/1-byte words whose size divides `bits`.
template <class F>
__device__ GPUCOMM_FORCEINLINE void with_widest_word(std::uintptr_t bits, F&& f) {
  if ((bits & 15) == 0)
    f(uint4{});
  else if ((bits & 7) == 0)
    f(static_cast<unsigned long long>(0));
  else if ((bits & 3) == 0)
    f(0u);
  else if ((bits & 1) == 0)
    f(static_cast<unsigned short>(0));
  else
    f(static_cast<unsigned char>(0));
}

/// Copy `bytes` bytes from `src` to `dst` (which must not overlap), shared by g's threads.
/// Either address may be local or a peer's mapping. Returns without synchronising the group.
template <copy_depth Depth = copy_depth::pair, group G>
__device__ GPUCOMM_FORCEINLINE void group_copy(G const& g, void* dst, void const* src, std::size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  auto const* s = static_cast<unsigned char const*>(src);
  auto const d_bits = reinterpret_cast<std::uintptr_t>(d);
  auto const s_bits = reinterpret_cast<std::uintptr_t>(s);
  if (bytes <= 64) {
    // Short copies: the widest word dividing both addresses and the length moves it with no head
    // or tail (an aligned 8-byte put is one 8-byte store, not eight byte stores).
    with_widest_word(d_bits | s_bits | bytes, [&](auto word) {
      using V = decltype(word);
      copy_vectors(g, reinterpret_cast<V*>(d), reinterpret_cast<V const*>(s), bytes / sizeof(V));
    });
    return;
  }
  // Longer copies: the widest word for which both addresses are equally misaligned, with an
  // exact head and tail around the aligned body.
  with_widest_word(d_bits ^ s_bits, [&](auto word) { copy_aligned_as<decltype(word), Depth>(g, d, s, bytes); });
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
