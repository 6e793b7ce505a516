#pragma once
// Reductions of plain aggregates, field by field (Boost.PFR): reduce, allreduce and reduce_scatter
// take them as they take scalars.
//
//   struct stats { float sum; int count; double sq; };
//   gpucomm::allreduce(c, block, ws, dst, src, n, gpucomm::reduction::sum{});      // every field summed
//   using op = gpucomm::reduction::per_field<gpucomm::reduction::sum, gpucomm::reduction::max,
//                                            gpucomm::reduction::min>;
//   gpucomm::allreduce(c, block, ws, dst, src, n, op{});                           // one op per field
//
// An element type here is a plain aggregate (no constructors, bases, private or virtual members;
// what Boost.PFR reflects) of 1 to 32 fields, each a type the operation takes: a scalar of
// reduction.cuh, __half, __nv_bfloat16, or a plain aggregate again (reduced field by field in turn,
// by the same operation or a per_field of its own). One operation applies to every field;
// per_field<Ops...> gives one per field, in declaration order, as many as there are fields.
//
// Accumulation is per field, in the field's accumulator type (float for 16-bit floats), in the
// team-rank order of every reduction, so results stay bitwise the same at every member. A field the
// operation cannot take is a compile error naming the aggregate, the field's index and its type
// (gpucomm::aggregate_field_cannot_take<Op, Aggregate, Index, Field>); a per_field of the wrong
// length names both (gpucomm::per_field_length_mismatch<...>).

#include <cuda/std/tuple>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "../config.hpp"
#include "../detail/aggregate_fields.cuh"
#include "reduction.cuh"

namespace gpucomm {

namespace reduction {
/// One reduction operation per field of an aggregate, in declaration order.
template <class... Ops>
struct per_field {};
}  // namespace reduction

template <class... Ops>
inline constexpr bool is_reduction_op<reduction::per_field<Ops...>> = sizeof...(Ops) > 0 &&
                                                                      (is_reduction_op<Ops> && ...);

namespace detail {

/// The operation field I of an aggregate gets from Op: Op itself, or per_field's I-th.
template <class Op, std::size_t I>
struct field_op {
  using type = Op;
};
template <class... Ops, std::size_t I>
struct field_op<reduction::per_field<Ops...>, I> {
  using type = cuda::std::tuple_element_t<I, cuda::std::tuple<Ops...>>;
};

/// Whether Op has the right length for aggregate T (a single operation always has).
template <class Op, class T>
inline constexpr bool fits_fields = true;
template <class... Ops, class T>
inline constexpr bool fits_fields<reduction::per_field<Ops...>, T> = sizeof...(Ops) == field_count<T>;

template <class T, class Fields = std::make_index_sequence<field_count<T>>>
struct aggregate_accumulator;
template <class T, std::size_t... I>
struct aggregate_accumulator<T, std::index_sequence<I...>> {
  using type = cuda::std::tuple<accumulator_t<field_t<I, T>>...>;
};

/// Whether Op fits aggregate T and every field takes its operation.
template <class Op, class T>
constexpr bool aggregate_takes() {
  if constexpr (!fits_fields<Op, T>)
    return false;  // per_field's I-th operation exists only for a fitting length
  else
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (reduction_takes<typename field_op<Op, I>::type, field_t<I, T>> && ...);
    }
  (std::make_index_sequence<field_count<T>>{});
}

}  // namespace detail

/// Instantiated only where field Index (of type Field) of Aggregate cannot take operation Op: the
/// compiler's message names all four.
template <class Op, class Aggregate, std::size_t Index, class Field>
struct aggregate_field_cannot_take {
  static_assert(reduction_takes<Op, Field>,
                "gpucomm: a field of this aggregate cannot take the reduction operation; the operation, the "
                "aggregate, the field's index (0 = first declared) and its type are "
                "gpucomm::aggregate_field_cannot_take<Op, Aggregate, Index, Field> above");
};

/// Instantiated only where a per_field's length differs from the aggregate's field count.
template <class PerField, class Aggregate>
struct per_field_length_mismatch {
  static_assert(detail::fits_fields<PerField, Aggregate>,
                "gpucomm: reduction::per_field<...> needs exactly one operation per field of the aggregate; both are "
                "gpucomm::per_field_length_mismatch<PerField, Aggregate> above");
};

/// Plain aggregates reduce field by field (see the top of this header).
template <detail::plain_aggregate T>
struct element_reduction<T> {
 private:
  static constexpr std::size_t count = detail::field_count<T>;
  using fields = std::make_index_sequence<count>;
  template <std::size_t I>
  using field = detail::field_t<I, T>;
  template <class Op, std::size_t I>
  using op_of = typename detail::field_op<Op, I>::type;

 public:
  template <class Op>
  static constexpr bool takes = detail::aggregate_takes<Op, T>();
  using accumulator = typename detail::aggregate_accumulator<T>::type;

  /// Checks Op at compile time; a failure names the first field that cannot take it.
  template <class Op>
  GPUCOMM_HD static constexpr void require() {
    if constexpr (!detail::fits_fields<Op, T>)
      (void)sizeof(per_field_length_mismatch<Op, T>);
    else
      [&]<std::size_t... I>(std::index_sequence<I...>) { (require_field<op_of<Op, I>, I>(), ...); }
    (fields{});
  }

  GPUCOMM_HD static GPUCOMM_FORCEINLINE accumulator to_accumulator(T const& v) {
    return detail::with_fields(v, [](auto const&... f) {
      return accumulator{element_reduction<std::remove_cvref_t<decltype(f)>>::to_accumulator(f)...};
    });
  }

  GPUCOMM_HD static GPUCOMM_FORCEINLINE T from_accumulator(accumulator const& a) {
    T out{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      detail::with_fields(
          out, [&](auto&... f) { ((f = element_reduction<field<I>>::from_accumulator(cuda::std::get<I>(a))), ...); });
    }
    (fields{});
    return out;
  }

  template <class Op>
  GPUCOMM_HD static GPUCOMM_FORCEINLINE accumulator combine(accumulator a, accumulator const& b) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((cuda::std::get<I>(a) =
            element_reduction<field<I>>::template combine<op_of<Op, I>>(cuda::std::get<I>(a), cuda::std::get<I>(b))),
       ...);
    }
    (fields{});
    return a;
  }

 private:
  template <class Op, std::size_t I>
  GPUCOMM_HD static constexpr void require_field() {
    if constexpr (!reduction_takes<Op, field<I>>) (void)sizeof(aggregate_field_cannot_take<Op, T, I, field<I>>);
  }
};

}  // namespace gpucomm
