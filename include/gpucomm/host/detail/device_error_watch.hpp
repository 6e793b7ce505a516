#pragma once
// How world::synchronize reports errors that device code counts in words of device memory (MoE
// dispatch's dropped rows: host/moe.cuh), without a hook of its own in the world: a transport
// policy in name only, with no capabilities (no comm of it can do anything), whose host half the
// world owns like any transport's and calls on every synchronize (transport_registry's
// on_synchronize). A feature registers the words it counts, per local PE, with a report that reads
// them after the streams are done and throws gpucomm::error for what it finds.
//
//   auto& watch = w.transport_host<gpucomm::detail::device_error_watch>();
//   int const key = watch.add(pe, words, 8, [](int pe, std::vector<std::uint64_t> const& now) { ... });
//   ...
//   watch.remove(key);   // before the words' memory goes

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <vector>

#include "../../callback.hpp"
#include "../../error.hpp"
#include "../../transport_concept.hpp"
#include "../world.hpp"
#include "device_guard.hpp"

namespace gpucomm::detail {

struct device_error_watch {
  static constexpr char const* name = "device_error_watch";
  static constexpr capabilities caps{};
  struct device_state {};

  class host_state {
   public:
    /// Reads the words as they are after synchronize's stream waits; throws to report.
    using report = callback<void(int pe, std::vector<std::uint64_t> const& words)>;

    explicit host_state(world& w) : world_(&w) {}
    device_state device_state_for(int) const { return {}; }
    bool reaches(int, int) const { return false; }

    /// Watches `count` words at `words` (device memory of local PE pe's GPU); returns the key
    /// remove takes.
    int add(int pe, std::uint64_t const* words, std::size_t count, report r);
    /// Stops watching (does not throw).
    void remove(int key) noexcept { watched_.erase(key); }

    /// Every watched set of words, read and reported in the order added; every report sees its
    /// words (so each counts from what it saw last), then the first error is thrown.
    void on_synchronize() const;

   private:
    struct entry {
      int pe;
      std::uint64_t const* words;
      std::size_t count;
      report check;
    };
    world* world_;
    int next_ = 0;
    std::map<int, entry> watched_;
  };
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "device_error_watch.inl"
#endif
