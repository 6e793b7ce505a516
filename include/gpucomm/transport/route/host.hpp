#pragma once
// route<Legs...>, host half: decides once which leg carries each PE's operations to each peer and
// which leg is the atomicity domain of each PE's memory (route/device.cuh says the rules), checks
// that the choice is possible, and puts the tables on each local PE's GPU.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../../error.hpp"
#include "../../host/world.hpp"
#include "device.cuh"

namespace gpucomm::detail {

/// The state a composite transport hands to a leg: routed_state_for when the leg has it (no
/// check that it reaches every PE), else device_state_for.
template <class Host>
auto routed_state(Host const& h, int pe) {
  if constexpr (requires { h.routed_state_for(pe); })
    return h.routed_state_for(pe);
  else
    return h.device_state_for(pe);
}

template <class... Legs>
class route_host {
 public:
  explicit route_host(world& w);
  route_host(route_host const&) = delete;
  route_host& operator=(route_host const&) = delete;
  ~route_host();

  /// Whether some leg carries PE from's operations to PE to (world::reaches).
  bool reaches(int from, int to) const { return first_reaching(from, to) >= 0; }
  /// The leg that carries PE from's operations to PE to.
  int leg_of(int from, int to) const { return leg_[static_cast<std::size_t>(from) * world_->npes() + to]; }
  /// The leg of every atomic and signal on PE to's memory.
  int domain_of(int to) const { return domain_[static_cast<std::size_t>(to)]; }

  using device_state = typename route<Legs...>::device_state;

  device_state device_state_for(int pe) const;

 private:
  struct table {
    int pe;
    int device;
    std::uint8_t* table;  // [npes] leg_of, then [npes] domain_of
  };

  template <std::size_t I, class States>
  void fill(States& s, int pe) const {
    if constexpr (I < sizeof...(Legs)) {
      s.head = detail::routed_state(*std::get<I>(hosts_), pe);
      fill<I + 1>(s.tail, pe);
    }
  }

  bool reaches(int l, int from, int to) const;
  int first_reaching(int from, int to) const;

  world* world_;
  std::tuple<typename Legs::host_state*...> hosts_;
  std::vector<table> tables_;
  std::vector<std::uint8_t> leg_;
  std::vector<std::uint8_t> domain_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/host.inl"
#endif
