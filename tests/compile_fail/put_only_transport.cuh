#pragma once
// A user transport that can only put: the front end must reject every other operation by name.
#include <gpucomm/comm.cuh>
#include <gpucomm/host/world.hpp>

struct PutOnly {
  static constexpr char const* name = "PutOnly";
  static constexpr gpucomm::capabilities caps{.put = true};
  struct device_state {};
  struct host_state {
    explicit host_state(gpucomm::world&) {}
    device_state device_state_for(int) const { return {}; }
  };
  template <class G, class T>
  __device__ static void put(gpucomm::comm<PutOnly> const&, G const&, gpucomm::sym_ptr<T>, T const*, std::size_t, int,
                             bool) {}
};
static_assert(gpucomm::transport<PutOnly>);
