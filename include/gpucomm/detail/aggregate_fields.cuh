#pragma once
// The fields of a plain aggregate, for the parts of gpucomm that work field by field (aggregate
// reductions, field-wise atomics). Boost.PFR counts the fields and names their types; the fields
// themselves are reached through structured bindings, which work in device code as they are
// (boost::pfr::get is a constexpr host function, callable from device code only with
// --expt-relaxed-constexpr, which gpucomm never asks of its users).

#include <boost/pfr/core.hpp>
#include <boost/pfr/tuple_size.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "../config.hpp"

namespace gpucomm::detail {

/// The most fields with_fields binds (structured bindings need the count spelled out).
inline constexpr std::size_t max_aggregate_fields = 32;

/// A class type Boost.PFR reflects: an aggregate, not a union.
template <class T>
concept plain_aggregate = std::is_class_v<T> && std::is_aggregate_v<T> && !std::is_union_v<T>;

/// Converts to any type; only named in unevaluated operands, to count initializers.
struct any_field_value {
  template <class U>
  operator U() const;
};

template <class T>
inline constexpr bool takes_two_initializers = requires {
  T{any_field_value{}, any_field_value{}};
};

template <class T>
consteval std::size_t count_fields() {
  if constexpr (std::is_empty_v<T>)
    return 0;
  else if constexpr (!takes_two_initializers<T>)
    // One field. Boost.PFR's check that the first field is not a base misfires for one-field
    // aggregates under nvcc's front end (a hard error), so this case is counted here.
    return 1;
  else
    return boost::pfr::tuple_size_v<T>;
}

/// The type of a one-field aggregate's field (unevaluated: only its declaration is used).
template <class T>
auto only_field_type(T& value) {
  auto& [field] = value;
  return std::type_identity<std::remove_cvref_t<decltype(field)>>{};
}

template <std::size_t I, class T, std::size_t Count>
struct field_type {
  using type = boost::pfr::tuple_element_t<I, T>;
};
template <class T>
struct field_type<0, T, 1> {
  using type = typename decltype(only_field_type(std::declval<T&>()))::type;
};

/// Number of fields of aggregate T.
template <plain_aggregate T>
inline constexpr std::size_t field_count = count_fields<T>();

/// The type of field I of aggregate T.
template <std::size_t I, plain_aggregate T>
using field_t = typename field_type<I, T, field_count<T>>::type;

/// visit(fields...) with a reference to every field of `value` (const when `value` is), in
/// declaration order; returns what visit returns.
/// (`visit` may be a device-only lambda: the execution-space check is left to its own callers.)
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Aggregate, class Visit>
GPUCOMM_HD GPUCOMM_FORCEINLINE decltype(auto) with_fields(Aggregate& value, Visit&& visit) {
  constexpr std::size_t count = field_count<std::remove_cv_t<Aggregate>>;
  static_assert(count >= 1 && count <= max_aggregate_fields,
                "gpucomm: field-wise operations take aggregates of 1 to 32 fields");
  if constexpr (count == 1) {
    auto& [f0] = value;
    return visit(f0);
  } else if constexpr (count == 2) {
    auto& [f0, f1] = value;
    return visit(f0, f1);
  } else if constexpr (count == 3) {
    auto& [f0, f1, f2] = value;
    return visit(f0, f1, f2);
  } else if constexpr (count == 4) {
    auto& [f0, f1, f2, f3] = value;
    return visit(f0, f1, f2, f3);
  } else if constexpr (count == 5) {
    auto& [f0, f1, f2, f3, f4] = value;
    return visit(f0, f1, f2, f3, f4);
  } else if constexpr (count == 6) {
    auto& [f0, f1, f2, f3, f4, f5] = value;
    return visit(f0, f1, f2, f3, f4, f5);
  } else if constexpr (count == 7) {
    auto& [f0, f1, f2, f3, f4, f5, f6] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6);
  } else if constexpr (count == 8) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7);
  } else if constexpr (count == 9) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8);
  } else if constexpr (count == 10) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9);
  } else if constexpr (count == 11) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10);
  } else if constexpr (count == 12) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11);
  } else if constexpr (count == 13) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12);
  } else if constexpr (count == 14) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13);
  } else if constexpr (count == 15) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14);
  } else if constexpr (count == 16) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15);
  } else if constexpr (count == 17) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16);
  } else if constexpr (count == 18) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17);
  } else if constexpr (count == 19) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18);
  } else if constexpr (count == 20) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19);
  } else if constexpr (count == 21) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20);
  } else if constexpr (count == 22) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21);
  } else if constexpr (count == 23) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22] =
        value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22);
  } else if constexpr (count == 24) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22,
           f23] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23);
  } else if constexpr (count == 25) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24);
  } else if constexpr (count == 26) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25);
  } else if constexpr (count == 27) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26);
  } else if constexpr (count == 28) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26, f27] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26, f27);
  } else if constexpr (count == 29) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26, f27, f28] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26, f27, f28);
  } else if constexpr (count == 30) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26, f27, f28, f29] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26, f27, f28, f29);
  } else if constexpr (count == 31) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26, f27, f28, f29, f30] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26, f27, f28, f29, f30);
  } else if constexpr (count == 32) {
    auto& [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21, f22, f23,
           f24, f25, f26, f27, f28, f29, f30, f31] = value;
    return visit(f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, f21,
                 f22, f23, f24, f25, f26, f27, f28, f29, f30, f31);
  }
}

}  // namespace gpucomm::detail
