#pragma once
// Bootstraps: how the processes of a one-process-per-GPU world find each other.
//
// A bootstrap is any type with
//   int rank() const;      // this process's index, 0 <= rank < size
//   int size() const;      // number of processes; each is one PE
//   void allgather(void const* send, void* recv, std::size_t bytes);
//                          // recv (size() * bytes) gets every rank's `bytes` in rank order
//   void barrier();        // returns once every rank has called it
// gpucomm ships mpi_bootstrap (mpi_bootstrap.hpp, target gpucomm::mpi) and callback_bootstrap,
// which adapts a user's own allgather and barrier (torch.distributed, a NCCL communicator, a job
// launcher's key-value store). Calls are made from the thread that builds or uses the world, in
// the same order on every rank.

#include <concepts>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../callback.hpp"
#include "../error.hpp"

namespace gpucomm {

/// The requirements on a bootstrap.
template <class B>
concept bootstrap = requires(B& b, B const& cb, void const* send, void* recv, std::size_t bytes) {
  { cb.rank() } -> std::convertible_to<int>;
  { cb.size() } -> std::convertible_to<int>;
  b.allgather(send, recv, bytes);
  b.barrier();
};

/// A bootstrap from a user's own collectives.
struct callback_bootstrap {
  int rank_ = 0;
  int size_ = 1;
  /// allgather(send, recv, bytes): recv gets size * bytes, rank i's bytes at offset i * bytes.
  callback<void(void const*, void*, std::size_t)> allgather_;
  callback<void()> barrier_;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void allgather(void const* send, void* recv, std::size_t bytes) { allgather_(send, recv, bytes); }
  void barrier() { barrier_(); }
};

namespace detail {

/// Type-erased bootstrap owned by a world.
class any_bootstrap {
 public:
  any_bootstrap() = default;
  template <bootstrap B>
  requires(!std::same_as<std::remove_cvref_t<B>, any_bootstrap>) explicit any_bootstrap(B&& b)
      : impl_(std::make_unique<model<std::remove_cvref_t<B>>>(std::forward<B>(b))) {}

  int rank() const { return impl_ ? impl_->rank() : 0; }
  int size() const { return impl_ ? impl_->size() : 1; }
  void allgather(void const* send, void* recv, std::size_t bytes);
  void barrier();

  /// Every rank's `value`, in rank order.
  template <class T>
  std::vector<T> allgather_value(T const& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<T> all(static_cast<std::size_t>(size()));
    allgather(&value, all.data(), sizeof(T));
    return all;
  }

 private:
  struct concept_base {
    virtual ~concept_base() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void allgather(void const*, void*, std::size_t) = 0;
    virtual void barrier() = 0;
  };
  template <class B>
  struct model final : concept_base {
    explicit model(B b) : b_(std::move(b)) {}
    int rank() const override { return b_.rank(); }
    int size() const override { return b_.size(); }
    void allgather(void const* s, void* r, std::size_t n) override { b_.allgather(s, r, n); }
    void barrier() override { b_.barrier(); }
    B b_;
  };
  std::unique_ptr<concept_base> impl_;
};

/// Collective check that every rank passed the same `value`. Every rank throws the same error
/// when they differ, naming the first rank whose value differs from rank 0's, so no rank is left
/// waiting in a later collective.
template <class T>
void agree(any_bootstrap& boot, T const& value, char const* call, char const* what, char const* hint) {
  auto const all = boot.allgather_value(value);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (!(all[r] == all[0])) {
      throw error(call, static_cast<int>(r),
                  std::string(what) + " differs across PEs: PE 0 passed " + std::to_string(all[0]) + ", PE " +
                      std::to_string(r) + " passed " + std::to_string(all[r]),
                  hint);
    }
  }
}

/// Collective: every rank learns whether any rank failed. Each rank passes its own `ok`; if any is
/// false every rank throws, naming the first failing rank and its message (`message` of that
/// rank, at most 255 bytes, travels through the bootstrap), and `hint` (what to do) from the call site.
void all_ok_or_throw(any_bootstrap& boot, bool ok, std::string const& message, char const* call, char const* hint = "");

/// Collective: runs `checks` on every rank; when it throws a gpucomm::error on some rank, every rank
/// throws (the first failing rank's error), so no rank is left waiting in a later collective call
/// for one that gave up. One rank alone: `checks`' own error passes through unchanged.
template <class Checks>
void checked_on_every_rank(any_bootstrap& boot, char const* call, Checks&& checks) {
  if (boot.size() <= 1) {
    checks();
    return;
  }
  std::string problem;
  try {
    checks();
  } catch (error const& e) {
    // What went wrong and what to do; the rethrow names the call and the rank again.
    std::string_view text = e.what();
    if (auto const colon = text.find(": ", 9); text.starts_with("gpucomm: ") && colon != text.npos)
      text.remove_prefix(colon + 2);
    problem = text;
  }
  all_ok_or_throw(boot, problem.empty(), problem, call);
}

}  // namespace detail
}  // namespace gpucomm

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/bootstrap.inl"
#endif
