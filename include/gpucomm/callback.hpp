#pragma once
// gpucomm::callback<R(Args...)>: the callables a world keeps (a load-store filter, a bootstrap's
// allgather and barrier, the transports' hooks). It behaves as std::function does for these
// uses: assignable from any callable with a matching call, empty by default, copied deeply
// (each copy owns its own copy of the callable), and calling an empty one is an error. It exists
// so that the host headers need not include <functional>, which pulls in the whole of
// <unordered_map> and <bits/stl_algo.h> and costs every file that includes gpucomm a measurable
// share of its compile time. A std::function may be assigned to it like any other callable.

#include <cstddef>
#include <type_traits>
#include <utility>

#include "error.hpp"

namespace gpucomm {

template <class Signature>
class callback;

namespace detail {
/// Whether `f(args...)` is well formed for an lvalue f and gives something convertible to R.
template <class F, class R, class... Args>
concept callable_as = requires(F& f, Args&&... args) {
  {f(static_cast<Args&&>(args)...)};
}
&&(std::is_void_v<R> || std::is_convertible_v<decltype(std::declval<F&>()(std::declval<Args>()...)), R>);
}  // namespace detail

template <class R, class... Args>
class callback<R(Args...)> {
 public:
  callback() = default;
  callback(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): as std::function
  /// Any callable `f` with `f(args...)` convertible to R (or any f when R is void); member
  /// pointers are not callables here (wrap them in a lambda). A null function pointer gives an
  /// empty callback, as it does for std::function.
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, callback> && detail::callable_as<std::decay_t<F>, R, Args...>)
      callback(F&& f) {  // NOLINT(google-explicit-constructor): as std::function
    using stored = std::decay_t<F>;
    if constexpr (std::is_pointer_v<std::remove_reference_t<F>>) {  // a function's name is never null
      if (f == nullptr) return;
    }
    target_ = new holder<stored>(std::forward<F>(f));
  }
  callback(callback const& other) : target_(other.target_ ? other.target_->clone() : nullptr) {}
  callback(callback&& other) noexcept : target_(other.target_) { other.target_ = nullptr; }
  callback& operator=(callback const& other) {
    callback(other).swap(*this);  // a clone that throws leaves this callback as it was
    return *this;
  }
  callback& operator=(callback&& other) noexcept {
    callback(static_cast<callback&&>(other)).swap(*this);
    return *this;
  }
  ~callback() { delete target_; }

  /// Exchanges the two callables, as std::function::swap does.
  void swap(callback& other) noexcept {
    base* const mine = target_;
    target_ = other.target_;
    other.target_ = mine;
  }

  explicit operator bool() const { return target_ != nullptr; }
  friend bool operator==(callback const& c, std::nullptr_t) { return !c; }

  /// Calls the callable; an empty callback throws gpucomm::error (std::function throws
  /// std::bad_function_call).
  R operator()(Args... args) const {
    if (!target_) throw error("gpucomm::callback", -1, "called while empty");
    return target_->call(std::forward<Args>(args)...);
  }

 private:
  struct base {
    virtual ~base() = default;
    virtual R call(Args&&... args) = 0;
    virtual base* clone() const = 0;  // a new copy, owned by the caller
  };
  template <class F>
  struct holder final : base {
    template <class G>
    explicit holder(G&& g) : f(std::forward<G>(g)) {}
    R call(Args&&... args) override {
      if constexpr (std::is_void_v<R>)
        static_cast<void>(f(std::forward<Args>(args)...));
      else
        return f(std::forward<Args>(args)...);
    }
    base* clone() const override { return new holder(f); }
    F f;
  };
  // Called through a const callback, as std::function's operator() is const while it calls its
  // callable as non-const; the callable is owned, so this is the same contract. A plain owning
  // pointer rather than std::unique_ptr: each unique_ptr<holder<F>> is one more set of templates
  // that every file including gpucomm instantiates for each callable the host headers store.
  base* target_ = nullptr;
};

}  // namespace gpucomm
