#pragma once
// The bodies of transport_registry.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline void transport_registry::on_synchronize() const {
  for (auto const& check : sync_hooks_) check();
}

inline void transport_registry::on_deallocate() const {
  for (auto const& finish : free_hooks_) finish();
}

inline void transport_registry::on_heap_block(std::size_t offset, std::size_t bytes) const {
  std::size_t added = 0;
  try {
    for (; added < block_hooks_.size(); ++added) block_hooks_[added].add(offset, bytes);
  } catch (...) {
    while (added-- > 0) block_hooks_[added].remove(offset, bytes);
    throw;
  }
}

inline void transport_registry::on_heap_block_freed(std::size_t offset, std::size_t bytes) const {
  for (auto it = block_hooks_.rbegin(); it != block_hooks_.rend(); ++it) it->remove(offset, bytes);
}

inline void transport_registry::on_register_buffer(registered_buffer const& b) const {
  for (auto const& h : buffer_hooks_) h.add(b);
}

inline void transport_registry::on_unregister_buffer(registered_buffer const& b) const {
  for (auto const& h : buffer_hooks_) h.remove(b);
}

inline void transport_registry::clear() {
  sync_hooks_.clear();
  free_hooks_.clear();
  buffer_hooks_.clear();
  block_hooks_.clear();
  hosts_.clear();
}

}  // namespace gpucomm::detail
