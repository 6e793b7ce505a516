#pragma once
// What a proxy thread drives: the backends of one ring (the copy engines, the NIC, a network
// engine) behind one small interface, so that the thread's pass is the same loop whichever of them
// a ring has. Host only.
//
// A ring holds its backends in order; each command goes to the first that takes() it. Per pass:
//   issue(c, ticket)   carries the command out or starts it; true when it is complete already
//                      (nothing to wait for, or refused and recorded in the proxy's failures);
//   mark()             after a batch of issue()s (the copy engines' completion markers, the NIC
//                      backend's one doorbell per queue);
//   busy()             whether anything issued has not completed;
//   polls_always()     whether poll() must run on every pass, busy or not: an engine that serves
//                      its peers' requests, and receives their data, only inside its progress;
//   poll(window)       completes, in `window`, every ticket that finished or failed.
// A backend is used by one proxy thread only; none of its members is called concurrently.

#include <concepts>
#include <cstdint>
#include <memory>
#include <utility>

#include "../command.cuh"
#include "../completion_window.hpp"

namespace gpucomm::detail {

/// Commands a proxy thread reads from one ring in one pass at most (between two mark()s). The
/// CUDA calls of a pass (a copy, a marker: microseconds each) are shared by its commands, so a
/// backlog is read in large passes; a ring with fewer commands published is read to its end.
inline constexpr int commands_per_pass = 512;

class proxy_backend {
 public:
  virtual ~proxy_backend() = default;
  virtual bool takes(proxy_queue::command const& c) const = 0;
  virtual bool issue(proxy_queue::command const& c, std::uint64_t ticket) = 0;
  virtual void mark() {}
  virtual bool busy() const = 0;
  virtual bool polls_always() const { return false; }
  virtual void poll(proxy_queue::completion_window& window) = 0;
};

namespace proxy_backend_traits {
/// Whether B marks its batches (has mark()), takes only some commands (has takes()), and must be
/// polled on every pass (has a static polls_every_pass equal to true).
template <class B>
concept marks = requires(B& b) {
  b.mark();
};
template <class B>
concept selects = requires(B const& b, proxy_queue::command const& c) {
  { b.takes(c) } -> std::convertible_to<bool>;
};
template <class B>
concept polled_always = requires {
  requires B::polls_every_pass;
};
}  // namespace proxy_backend_traits

/// A backend class with issue(), busy() and a template poll(done) (and, where it has them, takes()
/// and mark()) as a proxy_backend; owns it. One without takes() takes every command.
template <class B>
class proxy_backend_of final : public proxy_backend {
 public:
  explicit proxy_backend_of(std::unique_ptr<B> b) : b_(std::move(b)) {}

  bool takes(proxy_queue::command const& c) const override {
    if constexpr (proxy_backend_traits::selects<B>)
      return b_->takes(c);
    else
      return true;
  }
  bool issue(proxy_queue::command const& c, std::uint64_t ticket) override { return b_->issue(c, ticket); }
  void mark() override {
    if constexpr (proxy_backend_traits::marks<B>) b_->mark();
  }
  bool busy() const override { return b_->busy(); }
  bool polls_always() const override { return proxy_backend_traits::polled_always<B>; }
  void poll(proxy_queue::completion_window& window) override {
    b_->poll([&window](std::uint64_t t) { window.complete(t); });
  }

  B& get() noexcept { return *b_; }

 private:
  std::unique_ptr<B> b_;
};

/// A backend of class B, made from `args`, as a proxy_backend.
template <class B, class... Args>
std::unique_ptr<proxy_backend> make_proxy_backend(Args&&... args) {
  return std::make_unique<proxy_backend_of<B>>(std::make_unique<B>(std::forward<Args>(args)...));
}

}  // namespace gpucomm::detail
