#pragma once
// sym_array<T>: n elements of T on every PE of a world, owned by the host and freed collectively
// when it goes (world::alloc). Included by host/world.hpp, after the world it needs complete;
// including this header alone includes the world too.

#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <utility>

#include "../error.hpp"
#include "../sym_ptr.hpp"
#include "world.hpp"

namespace gpucomm {

/// A symmetric array owned by the host: n elements of T on every PE, freed collectively when it
/// goes out of scope (so every PE must destroy its arrays in the same order). Move-only.
template <class T>
class sym_array {
 public:
  sym_array() = default;
  sym_array(world& w, std::size_t n) : world_(&w), alive_(w.lifetime_), first_(w.allocate<T>(n)), size_(n) {}
  sym_array(sym_array&& o) noexcept { swap(o); }
  sym_array& operator=(sym_array&& o) noexcept {
    sym_array(std::move(o)).swap(*this);
    return *this;
  }
  sym_array(sym_array const&) = delete;
  sym_array& operator=(sym_array const&) = delete;
  /// Frees collectively; an error here (a PE freeing out of order) is printed, since a destructor
  /// cannot throw. Call reset() to get it as an exception instead.
  ~sym_array() {
    try {
      reset();
    } catch (std::exception const& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
  }

  /// Free now (collective). Nothing to do once the world is gone: it released all its memory. When
  /// the free throws (the PEs free in different orders) the array still holds its memory, so a
  /// later reset in the right order frees it.
  void reset() {
    if (world_ && first_ && !alive_.expired()) world_->deallocate(first_);
    world_ = nullptr;
    alive_.reset();
    first_ = {};
    size_ = 0;
  }

  /// Local PE `pe`'s view.
  sym_ptr<T> ptr(int pe) const { return live_world("sym_array::ptr", pe).view(first_, pe); }
  /// The view of the only local PE (one-process-per-GPU worlds), or of the first local PE.
  sym_ptr<T> get() const { return first_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }

  void swap(sym_array& o) noexcept {
    std::swap(world_, o.world_);
    std::swap(alive_, o.alive_);
    std::swap(first_, o.first_);
    std::swap(size_, o.size_);
  }

 private:
  world& live_world(char const* call, int pe) const {
    if (!world_ || !first_) {
      throw error(call, pe, "the array holds nothing (made empty, moved from, or reset)",
                  "use an array that world::alloc returned and that is not moved from");
    }
    if (alive_.expired()) {
      throw error(call, pe, "the array's world is destroyed, and its memory with it",
                  "keep a world alive as long as its arrays are used");
    }
    return *world_;
  }

  world* world_ = nullptr;
  std::weak_ptr<int const> alive_;
  sym_ptr<T> first_{};
  std::size_t size_ = 0;
};

template <class T>
sym_array<T> world::alloc(std::size_t n) {
  return sym_array<T>(*this, n);
}

}  // namespace gpucomm
