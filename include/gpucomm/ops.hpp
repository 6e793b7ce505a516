#pragma once
// Vocabulary shared by every operation: signal words, signal updates, wait comparisons.

#include <cstdint>

#include "config.hpp"

namespace gpucomm {

/// A signal word: a 64-bit unsigned integer in the symmetric heap, updated by `signal` and
/// `put_signal` and waited on by `wait_until`.
using signal_t = std::uint64_t;

/// How a signal update changes the word at the target PE.
enum class signal_op : int {
  set,  ///< the word becomes `value`
  add,  ///< `value` is added to the word (wraps modulo 2^64)
};

/// Comparison of `wait_until(sig, cmp, value)`: wait until `*sig <cmp> value`.
enum class cmp : int { eq, ne, lt, le, gt, ge };

/// `lhs <c> rhs`.
template <class T>
GPUCOMM_HD constexpr bool compare(cmp c, T lhs, T rhs) noexcept {
  switch (c) {
    case cmp::eq:
      return lhs == rhs;
    case cmp::ne:
      return lhs != rhs;
    case cmp::lt:
      return lhs < rhs;
    case cmp::le:
      return lhs <= rhs;
    case cmp::gt:
      return lhs > rhs;
    case cmp::ge:
      return lhs >= rhs;
  }
  return false;
}

/// The comparison as its C++ operator ("==", "!=", ...), for reports.
GPUCOMM_HD constexpr char const* cmp_name(cmp c) noexcept {
  switch (c) {
    case cmp::eq:
      return "==";
    case cmp::ne:
      return "!=";
    case cmp::lt:
      return "<";
    case cmp::le:
      return "<=";
    case cmp::gt:
      return ">";
    case cmp::ge:
      return ">=";
  }
  return "?";
}

}  // namespace gpucomm
