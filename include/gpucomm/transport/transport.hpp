#pragma once
// The transport concept: how a comm<Transport> moves bytes.
//
// A transport is a type (a policy, never instantiated) with
//   - `static constexpr char const* name`;
//   - `static constexpr capabilities caps`: which operations it implements. comm<Transport>
//     rejects a call to anything else at compile time with a message that names the operation;
//   - `device_state`: trivially copyable, everything its device code needs, carried by value
//     inside comm<Transport>;
//   - `host_state`: an RAII object the world owns, built as `host_state(world&)` the first time
//     a comm of this transport is asked for, with `device_state device_state_for(int pe) const`;
//   - static device functions, one per capability, each taking the comm first:
//       put(c, g, dst, src, n, pe), get(c, g, dst, src, n, pe), put_signal(...), signal(...),
//       atomic<op>(c, g, target, value, compare, pe), fence(c, g), quiet(c, g), barrier(c, g),
//       remote(c, p, pe)   (see nvlink_store.cuh for the exact signatures).
// Users may write their own transport against this concept.

#include <concepts>
#include <type_traits>

#include "../config.hpp"

namespace gpucomm {

class world;

/// What a transport implements. comm<Transport> static_asserts each before use.
struct capabilities {
  bool put = false;         ///< put, put_nbi
  bool get = false;         ///< get, get_nbi
  bool put_signal = false;  ///< put_signal, put_signal_nbi
  bool signal = false;      ///< signal (set, add)
  bool atomics = false;     ///< 32- and 64-bit integer atomics
  bool float_add = false;   ///< fetch_add / add on float and double
  bool fence = false;       ///< fence
  bool quiet = false;       ///< quiet
  bool barrier = false;     ///< barrier over all PEs
  bool load_store = false;  ///< remote(p, pe): a pointer to PE pe's copy that threads may load and store
};

/// The requirements on a transport policy.
template <class T>
concept transport = requires {
  typename T::device_state;
  typename T::host_state;
  { T::name } -> std::convertible_to<char const*>;
  { T::caps } -> std::convertible_to<capabilities>;
}
&&std::is_trivially_copyable_v<typename T::device_state>&&
    std::is_constructible_v<typename T::host_state, world&>&& requires(typename T::host_state const& h, int pe) {
  { h.device_state_for(pe) } -> std::same_as<typename T::device_state>;
};

/// Names for the atomic operations, passed to a transport's `atomic<op>` as a template argument.
enum class atomic_op : int { fetch_add, add, fetch_and, fetch_or, fetch_xor, swap, compare_swap, fetch, set };

}  // namespace gpucomm
