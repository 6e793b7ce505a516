#pragma once
// sym_ptr<T>: a typed pointer into the symmetric heap.
//
// A sym_ptr is the address of a symmetric object *as this PE sees its own copy*: dereference it,
// hand `get()` to CUB, Thrust or plain code, and it works on local memory. Every PE holds the same
// object at the same offset of its own heap, so the same sym_ptr also names the copy at any other
// PE; `comm::remote(p, pe)` turns it into a pointer to PE `pe`'s copy where the transport can load
// and store, and every remote operation (`put`, `get`, atomics, signals) takes it with the target
// PE. It is trivially copyable and a pointer in size, so kernels take it by value.

#include <compare>
#include <cstddef>
#include <type_traits>

#include "config.hpp"

namespace gpucomm {

template <class T>
class sym_ptr {
  static_assert(std::is_trivially_copyable_v<std::remove_cv_t<T>>,
                "gpucomm::sym_ptr<T>: T must be trivially copyable, because its bytes are copied "
                "between GPUs as they are");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using difference_type = std::ptrdiff_t;

  sym_ptr() = default;
  /// Wrap this PE's address of a symmetric object. Only the heap hands these out; wrapping any
  /// other address gives a sym_ptr that remote operations will mistranslate.
  GPUCOMM_HD constexpr explicit sym_ptr(T* local) noexcept : local_(local) {}
  /// sym_ptr<T> converts to sym_ptr<T const>.
  template <class U>
  requires(std::is_same_v<T, U const>) GPUCOMM_HD constexpr sym_ptr(sym_ptr<U> other) noexcept : local_(other.get()) {}

  /// This PE's copy, as a plain pointer.
  GPUCOMM_HD constexpr T* get() const noexcept { return local_; }
  GPUCOMM_HD constexpr explicit operator T*() const noexcept { return local_; }
  GPUCOMM_HD constexpr explicit operator bool() const noexcept { return local_ != nullptr; }

  GPUCOMM_HD constexpr T& operator*() const noexcept { return *local_; }
  GPUCOMM_HD constexpr T* operator->() const noexcept { return local_; }
  GPUCOMM_HD constexpr T& operator[](std::ptrdiff_t i) const noexcept { return local_[i]; }

  GPUCOMM_HD constexpr sym_ptr& operator+=(std::ptrdiff_t i) noexcept {
    local_ += i;
    return *this;
  }
  GPUCOMM_HD constexpr sym_ptr& operator-=(std::ptrdiff_t i) noexcept {
    local_ -= i;
    return *this;
  }
  GPUCOMM_HD constexpr sym_ptr& operator++() noexcept {
    ++local_;
    return *this;
  }
  GPUCOMM_HD constexpr sym_ptr& operator--() noexcept {
    --local_;
    return *this;
  }
  GPUCOMM_HD constexpr sym_ptr operator++(int) noexcept {
    sym_ptr old = *this;
    ++local_;
    return old;
  }
  GPUCOMM_HD constexpr sym_ptr operator--(int) noexcept {
    sym_ptr old = *this;
    --local_;
    return old;
  }

  GPUCOMM_HD friend constexpr sym_ptr operator+(sym_ptr p, std::ptrdiff_t i) noexcept { return p += i; }
  GPUCOMM_HD friend constexpr sym_ptr operator+(std::ptrdiff_t i, sym_ptr p) noexcept { return p += i; }
  GPUCOMM_HD friend constexpr sym_ptr operator-(sym_ptr p, std::ptrdiff_t i) noexcept { return p -= i; }
  GPUCOMM_HD friend constexpr std::ptrdiff_t operator-(sym_ptr a, sym_ptr b) noexcept { return a.local_ - b.local_; }
  GPUCOMM_HD friend constexpr bool operator==(sym_ptr a, sym_ptr b) noexcept { return a.local_ == b.local_; }
  GPUCOMM_HD friend constexpr auto operator<=>(sym_ptr a, sym_ptr b) noexcept { return a.local_ <=> b.local_; }

 private:
  T* local_ = nullptr;
};

/// Reinterpret a symmetric pointer as another trivially copyable type (same address).
template <class U, class T>
GPUCOMM_HD constexpr sym_ptr<U> sym_ptr_cast(sym_ptr<T> p) noexcept {
  return sym_ptr<U>(reinterpret_cast<U*>(p.get()));
}

static_assert(std::is_trivially_copyable_v<sym_ptr<int>> && sizeof(sym_ptr<int>) == sizeof(int*));

}  // namespace gpucomm
