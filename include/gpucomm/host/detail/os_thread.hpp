#pragma once
// The few thread operations the host runtime needs (start, join, pin, sleep) on POSIX
// threads. std::thread would do, but <thread> brings <stop_token>, <semaphore> and the atomic
// wait machinery into every file that includes gpucomm; this header brings <pthread.h>. Host only.

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>

#include "../../error.hpp"

namespace gpucomm::detail {

/// A joinable thread running one callable; joined by its destructor if the owner did not.
class os_thread {
 public:
  os_thread() = default;
  /// Starts `f()` on a new thread; throws gpucomm::error when the system refuses one.
  template <class F>
  explicit os_thread(F&& f) {
    auto task = std::make_unique<holder<std::decay_t<F>>>(std::forward<F>(f));
    if (int const rc = pthread_create(&id_, nullptr, &holder<std::decay_t<F>>::entry, task.get()); rc != 0)
      throw error("pthread_create", -1, "could not start a thread (error " + std::to_string(rc) + ")",
                  "the process may have reached its thread limit (ulimit -u)");
    task.release();  // the thread owns it now
    joinable_ = true;
  }
  os_thread(os_thread&& o) noexcept : id_(o.id_), joinable_(std::exchange(o.joinable_, false)) {}
  os_thread& operator=(os_thread&& o) noexcept {
    if (this != &o) {
      join();
      id_ = o.id_;
      joinable_ = std::exchange(o.joinable_, false);
    }
    return *this;
  }
  os_thread(os_thread const&) = delete;
  os_thread& operator=(os_thread const&) = delete;
  ~os_thread() { join(); }

  bool joinable() const { return joinable_; }
  void join() {
    if (joinable_) pthread_join(id_, nullptr);
    joinable_ = false;
  }
  /// Binds the thread to one CPU; 0 or the error number (EINVAL for a CPU no set can name).
  int pin_to(int cpu) const {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(id_, sizeof(set), &set);
  }

 private:
  template <class F>
  struct holder {
    template <class G>
    explicit holder(G&& g) : f(std::forward<G>(g)) {}
    static void* entry(void* p) {
      std::unique_ptr<holder> const self(static_cast<holder*>(p));
      self->f();
      return nullptr;
    }
    F f;
  };
  pthread_t id_{};
  bool joinable_ = false;
};

/// Sleeps for at least `us` microseconds (std::this_thread::sleep_for).
inline void sleep_us(long long us) {
  if (us <= 0) return;
  timespec t{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

}  // namespace gpucomm::detail
