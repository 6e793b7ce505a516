#pragma once
// Reduction operations of reduce, allreduce and reduce_scatter, and the element types they take.
//
//   gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{});
//
// The operations are types (tags), passed by value:
//   reduction::sum, reduction::prod        every arithmetic type but bool, __half, __nv_bfloat16
//   reduction::min, reduction::max         every arithmetic type, __half, __nv_bfloat16
//   reduction::bit_and, bit_or, bit_xor    integral types (bool included)
// (arithmetic: bool, the character and integer types up to 64 bits, float, double; long double is
// not a device type). An operation a type cannot take is a compile error whose text names both, as
// gpucomm::reduction_cannot_take<Op, T>.
//
// Plain aggregates of such fields (struct stats { float sum; int count; double sq; }) reduce field
// by field, with one operation for every field or reduction::per_field<Ops...>, one per field:
// include <gpucomm/aggregate.cuh>, which needs Boost.PFR (element_reduction below is the point it
// specialises). A class type that is not such an aggregate is a compile error naming it.
//
// Accumulation: a reduction of k inputs folds them in team-rank order, 0 first, in the
// accumulator type: float for __half and __nv_bfloat16 (one rounding to the element type at the
// end, not k), the element type itself otherwise. Every member folds in the same order, so every
// member's result is bitwise the same. Integer sum and prod wrap modulo 2^bits, signed types
// included (computed in unsigned 64-bit arithmetic, then converted: no signed overflow).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <concepts>
#include <type_traits>

#include "../config.hpp"

namespace gpucomm {

namespace reduction {
struct sum {};
struct prod {};
struct min {};
struct max {};
struct bit_and {};
struct bit_or {};
struct bit_xor {};
}  // namespace reduction

/// The 16-bit floating-point element types.
template <class T>
concept half_precision = std::same_as<T, __half> || std::same_as<T, __nv_bfloat16>;

/// The element types reductions take: arithmetic types (but long double), __half, __nv_bfloat16.
template <class T>
concept reducible_element =
    (std::is_arithmetic_v<T> && !std::same_as<std::remove_cv_t<T>, long double>) || half_precision<T>;

namespace detail {
/// Whether reduction Op takes the scalar element type T.
template <class Op, class T>
inline constexpr bool scalar_takes = false;
template <class T>
inline constexpr bool scalar_takes<reduction::sum, T> = reducible_element<T> && !std::same_as<T, bool>;
template <class T>
inline constexpr bool scalar_takes<reduction::prod, T> = reducible_element<T> && !std::same_as<T, bool>;
template <class T>
inline constexpr bool scalar_takes<reduction::min, T> = reducible_element<T>;
template <class T>
inline constexpr bool scalar_takes<reduction::max, T> = reducible_element<T>;
template <class T>
inline constexpr bool scalar_takes<reduction::bit_and, T> = std::is_integral_v<T>;
template <class T>
inline constexpr bool scalar_takes<reduction::bit_or, T> = std::is_integral_v<T>;
template <class T>
inline constexpr bool scalar_takes<reduction::bit_xor, T> = std::is_integral_v<T>;
}  // namespace detail

/// Whether Op is a reduction operation (aggregate.cuh adds reduction::per_field).
template <class Op>
inline constexpr bool is_reduction_op = false;
template <>
inline constexpr bool is_reduction_op<reduction::sum> = true;
template <>
inline constexpr bool is_reduction_op<reduction::prod> = true;
template <>
inline constexpr bool is_reduction_op<reduction::min> = true;
template <>
inline constexpr bool is_reduction_op<reduction::max> = true;
template <>
inline constexpr bool is_reduction_op<reduction::bit_and> = true;
template <>
inline constexpr bool is_reduction_op<reduction::bit_or> = true;
template <>
inline constexpr bool is_reduction_op<reduction::bit_xor> = true;

/// The reduction operation types.
template <class Op>
concept reduction_op = is_reduction_op<Op>;

/// Instantiated only where Op cannot take T: the compiler's message names both.
template <class Op, class T>
struct reduction_cannot_take {
  static_assert(detail::scalar_takes<Op, T>,
                "gpucomm: this reduction operation cannot take this element type; the pair is "
                "gpucomm::reduction_cannot_take<Op, T> above (collectives/reduction.cuh lists what each takes)");
};

/// Instantiated only for a class type that no reduction takes: the message names it.
template <class T>
struct reduction_needs_plain_aggregate {
  static_assert(!std::is_class_v<T>,
                "gpucomm: a class element type reduces field by field only when it is a plain aggregate (no "
                "constructors, bases, private or virtual members) of reducible fields and <gpucomm/aggregate.cuh> "
                "(Boost.PFR) is included; the type is gpucomm::reduction_needs_plain_aggregate<T> above");
};

/// How reductions treat element type T: which operations it takes, the type it accumulates in
/// and the fold step. This primary template covers the scalar element types; aggregate.cuh
/// specialises it for plain aggregates (field by field).
template <class T>
struct element_reduction {
  template <class Op>
  static constexpr bool takes = detail::scalar_takes<Op, T>;
  using accumulator = std::conditional_t<half_precision<T>, float, T>;

  /// Checks Op at compile time, naming the pair (or the class type) when it fails.
  template <class Op>
  GPUCOMM_HD static constexpr void require() {
    if constexpr (takes<Op>)
      return;
    else if constexpr (std::is_class_v<T> && !half_precision<T>)
      (void)sizeof(reduction_needs_plain_aggregate<T>);
    else
      (void)sizeof(reduction_cannot_take<Op, T>);
  }
  GPUCOMM_HD static GPUCOMM_FORCEINLINE accumulator to_accumulator(T v);
  GPUCOMM_HD static GPUCOMM_FORCEINLINE T from_accumulator(accumulator v);
  template <class Op>
  GPUCOMM_HD static GPUCOMM_FORCEINLINE accumulator combine(accumulator a, accumulator b);
};

/// Whether reduction Op takes element type T.
template <class Op, class T>
inline constexpr bool reduction_takes = element_reduction<T>::template takes<Op>;

/// Checks Op on T at compile time, naming both when it fails.
template <class Op, class T>
GPUCOMM_HD constexpr void require_reduction() {
  static_assert(reduction_op<Op>,
                "gpucomm: a reduction needs one of gpucomm::reduction::sum, prod, min, max, bit_and, bit_or, bit_xor "
                "(or, for aggregates, reduction::per_field<...> of aggregate.cuh)");
  element_reduction<T>::template require<Op>();
}

/// The type a reduction of T accumulates in.
template <class T>
using accumulator_t = typename element_reduction<T>::accumulator;

namespace detail {

/// T to its accumulator type and back (exact, except the final rounding of float to 16 bits).
template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE accumulator_t<T> to_accumulator(T v) {
  if constexpr (std::same_as<T, __half>)
    return __half2float(v);
  else if constexpr (std::same_as<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return v;
}
template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE T from_accumulator(accumulator_t<T> v) {
  if constexpr (std::same_as<T, __half>)
    return __float2half_rn(v);
  else if constexpr (std::same_as<T, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return v;
}

/// a op b in the accumulator type A.
template <class Op, class A>
GPUCOMM_HD GPUCOMM_FORCEINLINE A combine(A a, A b) {
  using wide = unsigned long long;
  if constexpr (std::same_as<Op, reduction::sum>) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wide>(a) + static_cast<wide>(b));
    else
      return a + b;
  } else if constexpr (std::same_as<Op, reduction::prod>) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wide>(a) * static_cast<wide>(b));
    else
      return a * b;
  } else if constexpr (std::same_as<Op, reduction::min>) {
    return b < a ? b : a;
  } else if constexpr (std::same_as<Op, reduction::max>) {
    return a < b ? b : a;
  } else if constexpr (std::same_as<Op, reduction::bit_and>) {
    return static_cast<A>(a & b);
  } else if constexpr (std::same_as<Op, reduction::bit_or>) {
    return static_cast<A>(a | b);
  } else {
    return static_cast<A>(a ^ b);
  }
}

}  // namespace detail

template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE auto element_reduction<T>::to_accumulator(T v) -> accumulator {
  return detail::to_accumulator(v);
}
template <class T>
GPUCOMM_HD GPUCOMM_FORCEINLINE T element_reduction<T>::from_accumulator(accumulator v) {
  return detail::from_accumulator<T>(v);
}
template <class T>
template <class Op>
GPUCOMM_HD GPUCOMM_FORCEINLINE auto element_reduction<T>::combine(accumulator a, accumulator b) -> accumulator {
  return detail::combine<Op>(a, b);
}

}  // namespace gpucomm
