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
// Code size: the short copy and the longer copy between 16-byte aligned addresses (tensors, heap
// buffers) are inline; a longer copy at any other alignment is a function of its own, one per group
// type (group_copy_bulk), since its five word widths of head, body and tail at every call site were
// most of a kernel's code. Out of line for every long copy cost up to 15 % on block-scope puts of
// 256 B to 4 KiB (latency A/B, 2 PEs on one H100; the register saving around the call is the
// likely cause, not a measured one), so the aligned case stays inline.
//
// Each part is one group-stride loop that takes two elements per thread at a time: both loads,
// then both stores. How deep to go was measured on 2 x H200 with put_bw, each candidate loop
// against NVSHMEM in the same run, 150 block-scope points from 16 KiB to 256 MiB
// (benchmarks/results/2026-11-22-NVIDIA-H200-2gpu-copy-loop/, run 2; docs/benchmarks.md, "The
// copy loop"):
//   - one element at a time (16 KB in flight per 1024-thread CTA) is enough while the source sits
//     in L2, but once it comes from HBM (64 MiB and more, 1 to 4 CTAs) it only matches NVSHMEM,
//     and is 14-18 % slower than two or eight;
//   - eight loads then eight stores, the loop before, was below NVSHMEM, outside the rounds'
//     spread, at 33 points from 16 KiB to 2 MiB (by 0.1-2.7 %), even where no group of eight ran;
//   - two were below NVSHMEM outside the spread at none of them.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../group.cuh"

namespace gpucomm::detail {

#if defined(__CUDACC__)

/// Copy `count` V-sized elements, element i by the group's thread i % size, two per thread at a
/// time (both loads, then both stores). Short: a head, a tail or a copy of at most 64 bytes, whose
/// loop stays a loop. Left to itself the compiler unrolls such a loop in full wherever the group's
/// size is a constant, at every call site (several times the code, for nothing: the unrolled
/// copy keeps the same two loads in flight, since a load may not pass an earlier store that can
/// alias it). The body's loop is left to the compiler, as measured.
template <bool Short, class V, group G>
__device__ GPUCOMM_FORCEINLINE void copy_vectors(G const& g, V* dst, V const* src, std::size_t count) {
  std::size_t const size = group_size(g);
  std::size_t i = group_rank(g);
  auto const two = [&] {
    V const first = src[i];
    V const second = src[i + size];
    dst[i] = first;
    dst[i + size] = second;
  };
  if constexpr (Short) {
#pragma unroll 1
    for (; i + size < count; i += 2 * size) two();
  } else {
    for (; i + size < count; i += 2 * size) two();
  }
  if (i < count) dst[i] = src[i];
}

/// V-sized vectors between dst and src (both V-aligned), then the last bytes % sizeof(V) bytes.
template <class V, group G>
__device__ GPUCOMM_FORCEINLINE void copy_body_and_tail(G const& g, unsigned char* dst, unsigned char const* src,
                                                       std::size_t bytes) {
  std::size_t const count = bytes / sizeof(V);
  std::size_t const tail_at = count * sizeof(V);
  copy_vectors<false>(g, reinterpret_cast<V*>(dst), reinterpret_cast<V const*>(src), count);
  copy_vectors<true>(g, dst + tail_at, src + tail_at, bytes - tail_at);
}

/// The bytes before dst's first V boundary, then the V-aligned rest.
template <class V, group G>
__device__ GPUCOMM_FORCEINLINE void copy_aligned_as(G const& g, unsigned char* dst, unsigned char const* src,
                                                    std::size_t bytes) {
  constexpr std::size_t width = sizeof(V);
  std::size_t head = (width - (reinterpret_cast<std::uintptr_t>(dst) & (width - 1))) & (width - 1);
  if (head > bytes) head = bytes;
  copy_vectors<true>(g, dst, src, head);
  copy_body_and_tail<V>(g, dst + head, src + head, bytes - head);
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

/// A copy of more than 64 bytes: the widest word for which both addresses are equally misaligned,
/// with an exact head and tail around the aligned body.
template <group G>
__device__ GPUCOMM_NOINLINE void group_copy_bulk(G const& g, unsigned char* d, unsigned char const* s,
                                                 std::size_t bytes) {
  auto const d_bits = reinterpret_cast<std::uintptr_t>(d);
  auto const s_bits = reinterpret_cast<std::uintptr_t>(s);
  with_widest_word(d_bits ^ s_bits, [&](auto word) { copy_aligned_as<decltype(word)>(g, d, s, bytes); });
}

/// Copy `bytes` bytes from `src` to `dst` (which must not overlap), shared by g's threads.
/// Either address may be local or a peer's mapping. Returns without synchronising the group.
template <group G>
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
      copy_vectors<true>(g, reinterpret_cast<V*>(d), reinterpret_cast<V const*>(s), bytes / sizeof(V));
    });
    return;
  }
  // Both addresses 16-byte aligned (tensors, heap buffers: the common case): 16-byte vectors,
  // inline, and no head to work out; the tail is the length's last 0 to 15 bytes. Any other
  // alignment: out of line.
  if (((d_bits | s_bits) & 15) == 0) {
    copy_body_and_tail<uint4>(g, d, s, bytes);
    return;
  }
  group_copy_bulk(g, d, s, bytes);
}

#endif  // __CUDACC__

}  // namespace gpucomm::detail
