#pragma once
// How gpucomm's atomics and signal updates become mlx5 atomic WQEs: shared by IBGDAPost, whose GPU
// threads post them, and ProxyQueue's NIC backend, whose proxy thread does (host and device).
//
//   fetch_add, add, fetch   64-bit: ATOMIC_FA; 32-bit: masked fetch-and-add with no field boundary
//                           (fetch adds 0)
//   fetch_xor               masked fetch-and-add with every carry cut (field boundary ~0)
//   compare_swap            64-bit: ATOMIC_CS; 32-bit: masked compare-and-swap, full masks
//   fetch_and / fetch_or    masked compare-and-swap with an empty compare mask: swap in 0 under
//                           the bits v lacks / ~0 under the bits v has
//   swap, set               masked compare-and-swap of every bit, empty compare mask
//   signal set / add        a 64-bit masked swap of every bit / ATOMIC_FA
// The old value lands in `result` (4-byte values in the NIC's order: verbs_gpu::fetched32).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../ops.hpp"
#include "../../verbs_gpu/wqe.cuh"
#include "../../transport_concept.hpp"

namespace gpucomm::detail {

/// WQEBBs of the WQE that carries `op` on words of `bytes` bytes: a 64-bit masked
/// compare-and-swap takes two, everything else one.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t nic_atomic_wqebbs(atomic_op op, std::size_t bytes) noexcept {
  bool const masked_swap =
      op == atomic_op::fetch_and || op == atomic_op::fetch_or || op == atomic_op::swap || op == atomic_op::set;
  return bytes == 8 && masked_swap ? 2 : 1;
}

/// Builds the WQE of atomic `op` on the word `to` with operand `v` (and `compare` for
/// compare_swap), the old value going to `result`; returns its DS. U: std::uint32_t or
/// std::uint64_t. Forced inline: with `op` known at compile time only one builder remains.
template <class U>
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_nic_atomic(atomic_op op, verbs_gpu::wqe_slot const& s,
                                                              verbs_gpu::local_buf result, verbs_gpu::remote_buf to,
                                                              U v, U compare) noexcept {
  static_assert(std::is_same_v<U, std::uint32_t> || std::is_same_v<U, std::uint64_t>);
  constexpr U all = ~U{0};
  constexpr bool wide = sizeof(U) == 8;
  if (op == atomic_op::fetch_add || op == atomic_op::add || op == atomic_op::fetch) {
    U const addend = op == atomic_op::fetch ? U{0} : v;
    if constexpr (wide)
      return verbs_gpu::build_atomic_fa(s, result, to, addend);
    else
      return verbs_gpu::build_masked_fa32(s, result, to, addend, 0);
  }
  if (op == atomic_op::fetch_xor) {
    if constexpr (wide)
      return verbs_gpu::build_masked_fa64(s, result, to, v, all);
    else
      return verbs_gpu::build_masked_fa32(s, result, to, v, all);
  }
  if constexpr (wide) {
    if (op == atomic_op::compare_swap) return verbs_gpu::build_atomic_cs(s, result, to, compare, v);
  }
  // Masked compare-and-swap: (compare, swap, compare mask, swap mask).
  U compare_v = 0, swap_v = v, compare_mask = 0, swap_mask = all;  // swap and set
  if (op == atomic_op::compare_swap) {
    compare_v = compare, compare_mask = all;
  } else if (op == atomic_op::fetch_and) {
    swap_v = 0, swap_mask = static_cast<U>(~v);  // clear the bits v lacks
  } else if (op == atomic_op::fetch_or) {
    swap_v = all, swap_mask = v;  // set the bits v has
  }
  if constexpr (wide)
    return verbs_gpu::build_masked_cs64(s, result, to, compare_v, swap_v, compare_mask, swap_mask);
  else
    return verbs_gpu::build_masked_cs32(s, result, to, compare_v, swap_v, compare_mask, swap_mask);
}

/// WQEBBs of a signal update's WQE.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t nic_signal_wqebbs(signal_op op) noexcept {
  return nic_atomic_wqebbs(op == signal_op::set ? atomic_op::set : atomic_op::add, 8);
}

/// Builds the WQE of a signal update (set: an atomic store of every bit; add: fetch-and-add);
/// returns its DS. The caller posts it with the fence flag, behind the data it signals.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_nic_signal(signal_op op, verbs_gpu::wqe_slot const& s,
                                                              verbs_gpu::local_buf result, verbs_gpu::remote_buf to,
                                                              std::uint64_t value) noexcept {
  return build_nic_atomic<std::uint64_t>(op == signal_op::set ? atomic_op::set : atomic_op::add, s, result, to, value,
                                         0);
}

}  // namespace gpucomm::detail
