#pragma once
// Epilogues: what allreduce stores in place of each reduced element, computed as it is stored, in
// the same kernel (no second pass over the message).
//
//   struct add_bias_relu {
//     float const* bias;  // the same at every member
//     __device__ float operator()(std::size_t i, float v) const { return fmaxf(v + bias[i % 4096], 0.f); }
//   };
//   gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{}, add_bias_relu{bias});
//
// An epilogue is a trivially copyable functor with `T operator()(std::size_t i, T v) const`
// (__device__): i is the element's index in the message (0 <= i < n) and v the reduced element,
// bitwise what allreduce without an epilogue stores there; allreduce stores what it returns into
// dst[i]. It is called once per element at each member that folds that element: every member for
// packets and one_shot, the member that owns the element's block for two_shot (the others receive
// its result). So it must give the same result for the same (i, v) at every member: read only
// data that every member holds alike (a bias, a scale, a residual replicated across the team), and
// nothing that allreduce writes (dst). It runs on the threads of the calling group, in no order
// between elements. Host launchers take epilogues too (host/collectives.cuh): there the functor
// travels to the kernel by value.
//
// For an epilogue that needs a whole row at once (a norm over the hidden dimension), see
// allreduce_rows.cuh.

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "../config.hpp"

namespace gpucomm {

/// The epilogue of a plain allreduce: stores the reduced element.
struct identity_epilogue {
  template <class T>
  GPUCOMM_HD GPUCOMM_FORCEINLINE T operator()(std::size_t, T v) const {
    return v;
  }
};

/// Whether E is an epilogue for elements of T (the contract above).
template <class E, class T>
concept epilogue_for = std::is_trivially_copyable_v<E> && requires(E const& e, std::size_t i, T v) {
  { e(i, v) } -> std::same_as<T>;
};

namespace detail {
/// Says, at compile time, what an epilogue must be when E is not one for T.
template <class E, class T>
consteval void require_epilogue() {
  static_assert(epilogue_for<E, T>,
                "gpucomm: an allreduce epilogue is a trivially copyable functor with T operator()(std::size_t i, T v) "
                "const, T the element type (collectives/epilogue.cuh)");
}
}  // namespace detail

}  // namespace gpucomm
