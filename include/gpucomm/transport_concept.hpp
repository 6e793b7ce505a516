#pragma once
// The transport concept: how a comm<Transport> moves bytes. Device-side vocabulary only; the host
// half's requirements are `host_transport` (host/world_options.hpp).
//
// A transport is a policy type (never instantiated) with
//   - `static constexpr char const* name`;
//   - `static constexpr capabilities caps`: what it implements itself (see `capabilities`);
//   - `device_state`: trivially copyable, everything its device code needs, carried by value
//     inside comm<Transport>;
//   - `host_state`: the host half the world owns (it may be only declared here: device code never
//     needs it complete);
//   - static device functions, one per capability it sets, each taking the comm first. Their exact
//     signatures are checked by the capability concepts of contract.cuh, and
//     docs/design/architecture.md walks through writing one.
// Operations a transport does not provide itself are built by the contract from those it does
// (put_signal from put + fence + signal, fence from quiet, the epoch barrier from signal + quiet,
// wait_until from a local acquire spin), so a new transport writes only its primitives.

#include <concepts>
#include <type_traits>

#include "config.hpp"

namespace gpucomm {

/// What a transport implements itself. Primitives (put, get, signal, atomics, float_add, quiet,
/// load_store): without them the operation does not exist for the transport. Overrides
/// (put_signal, fence, barrier): the contract builds a generic version from the primitives when
/// the transport sets them false, and uses the transport's own when true.
struct capabilities {
  bool put = false;         ///< put, put_nbi
  bool get = false;         ///< get, get_nbi
  bool put_signal = false;  ///< its own put_signal (else: put, fence, signal)
  bool signal = false;      ///< signal (set, add)
  bool atomics = false;     ///< 32- and 64-bit integer atomics
  bool float_add = false;   ///< fetch_add / add on float and double
  bool fence = false;       ///< its own fence (else: quiet)
  bool quiet = false;       ///< quiet
  bool barrier = false;     ///< its own team barrier (else: the contract's epoch barrier)
  bool load_store = false;  ///< remote(p, pe): a pointer to PE pe's copy that threads may load and store
};

/// The operations of comm<Transport>, by the capability each needs.
enum class capability : int { put, get, put_signal, signal, atomics, float_add, fence, quiet, barrier, load_store };

/// The requirements on a transport policy that device code has.
template <class T>
concept transport = requires {
  typename T::device_state;
  typename T::host_state;
  { T::name } -> std::convertible_to<char const*>;
  { T::caps } -> std::convertible_to<capabilities>;
}
&&std::is_trivially_copyable_v<typename T::device_state>;

/// Names for the atomic operations, passed to a transport's `atomic<op>` as a template argument.
enum class atomic_op : int { fetch_add, add, fetch_and, fetch_or, fetch_xor, swap, compare_swap, fetch, set };

/// What a call of an operation the transport lacks returns: a type no expression can hold (its
/// destructor is deleted). So `requires { c.get(g, ...); }` is false for such a transport, and a
/// call fails to compile with a message that names the capability (nvcc 13):
///   function "gpucomm::transport_lacks<missing>::~transport_lacks() [with missing=gpucomm::capability::get]"
///   ... cannot be referenced -- it is a deleted function
/// (A static_assert in a fallback's body cannot do this: the fallback would make the requires-
/// expression true, since a probe and a call resolve the same overloads and only a call
/// instantiates the body.)
template <capability missing>
struct transport_lacks {
  transport_lacks() = delete;
  ~transport_lacks() = delete;
};

}  // namespace gpucomm
