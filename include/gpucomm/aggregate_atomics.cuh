#pragma once
// Field-wise atomic add on a plain aggregate at a PE (Boost.PFR), built on the transport's atomics.
//
//   struct counters { unsigned long long bytes; int hits; float weight; };
//   gpucomm::add_fields(c, block, totals, counters{n, 1, w}, pe);  // totals: sym_ptr<counters>
//
// Every field of the aggregate at `target` on PE `pe` gets its field of `value` added by one
// atomic add of the transport (comm::add): fields one by one, each atomic on its own, the aggregate
// as a whole not (a reader may see some fields added and not yet others). Nested plain aggregates
// are added field by field in turn. The semantics are comm::add's: relaxed, system scope, performed
// by g's leader, complete after quiet, and in the transport's atomicity domain.
//
// Fields: what the transport adds atomically: 32- and 64-bit integers, and float and double where
// the transport has float add (NVLinkStore does; NIC atomics do not). Any other field is a compile
// error naming the aggregate, the field's index and its type
// (gpucomm::aggregate_field_cannot_add<Transport, Aggregate, Index, Field>).

#include <cstddef>
#include <type_traits>
#include <utility>

#include "comm.cuh"
#include "detail/aggregate_fields.cuh"
#include "group.cuh"
#include "sym_ptr.hpp"

namespace gpucomm {

/// Whether transport Tr adds a T atomically: an integer, or a float where it has float add.
template <class Tr, class T>
inline constexpr bool atomically_addable = can_atomics<Tr> &&
                                           (atomic_integer<T> || ((std::is_same_v<T, float> ||
                                                                   std::is_same_v<T, double>)&&can_float_add<Tr>));

/// Instantiated only where field Index (of type Field) of Aggregate cannot be added atomically on
/// Transport: the message names all four.
template <class Transport, class Aggregate, std::size_t Index, class Field>
struct aggregate_field_cannot_add {
  static_assert(atomically_addable<Transport, Field>,
                "gpucomm: add_fields: a field of this aggregate cannot be added atomically on this transport (32- "
                "and 64-bit integers always; float and double where the transport has float add); the transport, "
                "the aggregate, the field's index (0 = first declared) and its type are "
                "gpucomm::aggregate_field_cannot_add<Transport, Aggregate, Index, Field> above");
};

#if defined(__CUDACC__)

/// Adds `value` to the aggregate at `target` on PE `pe`, one atomic add per field (see above).
template <class Tr, group G, detail::plain_aggregate T>
__device__ void add_fields(comm<Tr> const& c, G const& g, sym_ptr<T> target, T const& value, int pe) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    // Only the fields' addresses are taken at the local copy (symmetric: the same offsets at pe).
    detail::with_fields(*target.get(), [&](auto&... at) {
      detail::with_fields(value, [&](auto const&... v) {
        auto add_one = [&]<std::size_t Index, class F>(F& field_at, F const& field_value) {
          if constexpr (detail::plain_aggregate<F>)
            add_fields(c, g, sym_ptr<F>(&field_at), field_value, pe);
          else if constexpr (!atomically_addable<Tr, F>)
            (void)sizeof(aggregate_field_cannot_add<Tr, T, Index, F>);
          else
            c.add(g, sym_ptr<F>(&field_at), field_value, pe);
        };
        (add_one.template operator()<I>(at, v), ...);
      });
    });
  }
  (std::make_index_sequence<detail::field_count<T>>{});
}

#endif  // __CUDACC__

}  // namespace gpucomm
