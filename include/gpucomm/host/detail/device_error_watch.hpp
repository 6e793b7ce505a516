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
#include <functional>
#include <map>
#include <vector>

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
    using report = std::function<void(int pe, std::vector<std::uint64_t> const& words)>;

    explicit host_state(world& w) : world_(&w) {}
    device_state device_state_for(int) const { return {}; }
    bool reaches(int, int) const { return false; }

    /// Watches `count` words at `words` (device memory of local PE pe's GPU); returns the key
    /// remove takes.
    int add(int pe, std::uint64_t const* words, std::size_t count, report r) {
      int const key = next_++;
      watched_.emplace(key, entry{pe, words, count, std::move(r)});
      return key;
    }
    /// Stops watching (does not throw).
    void remove(int key) noexcept { watched_.erase(key); }

    /// Every watched set of words, read and reported in the order added; every report sees its
    /// words (so each counts from what it saw last), then the first error is thrown.
    void on_synchronize() const {
      current_device_guard const keep;
      std::exception_ptr first;
      for (auto const& [key, e] : watched_) {
        std::vector<std::uint64_t> now(e.count);
        GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(e.pe)), e.pe);
        GPUCOMM_CUDA_CHECK(cudaMemcpy(now.data(), e.words, e.count * 8, cudaMemcpyDeviceToHost), e.pe);
        try {
          e.check(e.pe, now);
        } catch (error const&) {
          if (!first) first = std::current_exception();
        }
      }
      if (first) std::rethrow_exception(first);
    }

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
