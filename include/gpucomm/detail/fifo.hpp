#pragma once
// detail::fifo<T>: a first-in first-out queue on one std::vector, for the proxy's bookkeeping
// (tickets in flight, the completion window). It takes std::deque's place because <deque> is a
// large header for the few operations needed here. Pushing at the back and popping at the front
// are amortised O(1): popped slots are reclaimed when they are at least half of the vector.

#include <cstddef>
#include <vector>

namespace gpucomm::detail {

template <class T>
class fifo {
 public:
  bool empty() const noexcept { return head_ == items_.size(); }
  std::size_t size() const noexcept { return items_.size() - head_; }

  T& front() { return items_[head_]; }
  T const& front() const { return items_[head_]; }
  T& back() { return items_.back(); }
  T const& back() const { return items_.back(); }
  /// The i-th element from the front.
  T& operator[](std::size_t i) { return items_[head_ + i]; }
  T const& operator[](std::size_t i) const { return items_[head_ + i]; }

  void push_back(T const& v) { items_.push_back(v); }
  /// Appends [first, last) in order.
  template <class It>
  void append(It first, It last) {
    items_.insert(items_.end(), first, last);
  }
  void pop_front() {
    ++head_;
    if (head_ == items_.size()) {
      clear();
    } else if (head_ >= 32 && 2 * head_ >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  void pop_back() {
    items_.pop_back();
    if (head_ == items_.size()) clear();
  }
  void clear() noexcept {
    items_.clear();
    head_ = 0;
  }

  auto begin() const { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  auto end() const { return items_.end(); }

 private:
  std::vector<T> items_;
  std::size_t head_ = 0;
};

}  // namespace gpucomm::detail
