#pragma once
// The transports' host halves a world owns: one per transport type, made on first use from the
// world (and the options world::configure stored), type-erased in a map; and the hooks through
// which the world tells them of its events (synchronize, a heap block allocated or freed, a local
// buffer registered). A host half takes part in an event by having the member function for it.

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../callback.hpp"
#include "../../error.hpp"
#include "../world_options.hpp"
#include "device_guard.hpp"

namespace gpucomm::detail {

/// One address per type, the registry's key for it (std::type_index without <typeindex> or RTTI).
template <class T>
struct type_key {
  static constexpr char id = 0;
};
template <class T>
void const* key_of() noexcept {
  return &type_key<T>::id;
}

class transport_registry {
 public:
  transport_registry() = default;
  transport_registry(transport_registry const&) = delete;
  transport_registry& operator=(transport_registry const&) = delete;
  ~transport_registry() { clear(); }

  /// Stores Transport's options for its set-up; throws once its host half exists. `pe`: the PE
  /// the error names.
  template <host_transport Transport>
  requires requires { typename Transport::options; }
  void configure(typename Transport::options const& options, int pe) {
    void const* const key = key_of<Transport>();
    if (hosts_.count(key) != 0) {
      throw error("world::configure", pe,
                  std::string(Transport::name) + " is already set up in this world (a comm of it was handed out)",
                  "configure a transport before the first world::comm of it, or of a route that uses it");
    }
    options_[key] = std::make_shared<typename Transport::options>(options);
  }

  /// Transport's host half in world `w`, made on first use. A host half whose construction throws
  /// is not kept: a later call tries again.
  template <host_transport Transport>
  typename Transport::host_state& host(world& w) {
    using host = typename Transport::host_state;
    auto& slot = hosts_[key_of<Transport>()];
    if (!slot) {
      current_device_guard const keep;  // set-up visits every local GPU
      std::shared_ptr<host> made;
      try {
        if constexpr (requires { typename Transport::options; }) {
          auto const it = options_.find(key_of<Transport>());
          typename Transport::options const options =
              it == options_.end() ? typename Transport::options{}
                                   : *static_cast<typename Transport::options const*>(it->second.get());
          made = std::make_shared<host>(w, options);
        } else {
          made = std::make_shared<host>(w);
        }
      } catch (...) {
        hosts_.erase(key_of<Transport>());  // a later call may try again
        throw;
      }
      add_hooks(made.get());
      slot = std::move(made);
    }
    return *static_cast<host*>(slot.get());
  }

  /// world::synchronize(), after the streams: each host half's own completion and failure checks.
  void on_synchronize() const;
  /// world::deallocate(), before the block goes: host halves that still move bytes finish.
  void on_deallocate() const;
  /// A new heap block: every host half with a NIC registers it. When one throws, those that did
  /// undo it (in reverse order) and the error passes on.
  void on_heap_block(std::size_t offset, std::size_t bytes) const;
  /// A heap block going: its registrations go, in reverse order. Does not throw.
  void on_heap_block_freed(std::size_t offset, std::size_t bytes) const;
  void on_register_buffer(registered_buffer const& b) const;
  void on_unregister_buffer(registered_buffer const& b) const;

  /// The hooks, then the host halves (before the heap they use goes).
  void clear();

 private:
  template <class Host>
  void add_hooks(Host* h) {
    // A host half with work to finish after the kernels (completing operations a NIC still
    // holds, reporting failed ones) does it in synchronize().
    if constexpr (requires(Host const& c) { c.on_synchronize(); }) {
      sync_hooks_.push_back([h] { h->on_synchronize(); });
    }
    // A host half that moves bytes on its own after the kernels (ProxyQueue's proxy) finishes
    // that work before a block of the heap is freed.
    if constexpr (requires(Host const& c) { c.on_deallocate(); }) {
      free_hooks_.push_back([h] { h->on_deallocate(); });
    }
    // A host half with a NIC registers the buffers that world::register_buffer gets later.
    if constexpr (requires(Host & c, registered_buffer const& b) {
                    c.on_register_buffer(b);
                    c.on_unregister_buffer(b);
                  }) {
      buffer_hooks_.push_back({[h](registered_buffer const& b) { h->on_register_buffer(b); },
                               [h](registered_buffer const& b) { h->on_unregister_buffer(b); }});
    }
    // A host half with a NIC registers each block of the symmetric heap allocated later (those
    // that exist when it is made, it registers itself: world::heap_blocks()).
    if constexpr (requires(Host & c, std::size_t offset, std::size_t bytes) {
                    c.on_heap_block(offset, bytes);
                    c.on_heap_block_freed(offset, bytes);
                  }) {
      block_hooks_.push_back({[h](std::size_t offset, std::size_t bytes) { h->on_heap_block(offset, bytes); },
                              [h](std::size_t offset, std::size_t bytes) { h->on_heap_block_freed(offset, bytes); }});
    }
  }

  std::map<void const*, std::shared_ptr<void>> hosts_;
  std::map<void const*, std::shared_ptr<void>> options_;
  std::vector<callback<void()>> sync_hooks_;
  std::vector<callback<void()>> free_hooks_;
  struct buffer_hook {
    callback<void(registered_buffer const&)> add, remove;
  };
  std::vector<buffer_hook> buffer_hooks_;
  struct block_hook {
    // remove must not throw: it runs where the block is going whatever happens.
    callback<void(std::size_t, std::size_t)> add, remove;
  };
  std::vector<block_hook> block_hooks_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "transport_registry.inl"
#endif
