#pragma once
// The barrier ProxyQueue's teardown holds across the processes of a world. Host only.

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "failures.hpp"

namespace gpucomm::detail {

/// Calls `barrier` (the world's bootstrap barrier) so that no process stops its proxies while
/// peers may still copy into its heap or ask its memory agents; returns whether it was held.
/// Skipped, with a message on stderr, once this process's commands found a peer gone
/// (`failures.lost_peer()`): a dead process never arrives, so a user's barrier would wait forever
/// and MPI's may abort. It runs in a destructor, so a barrier that throws is reported on stderr
/// and goes no further. `pe` names this process's first PE in the messages.
template <class Barrier>
bool teardown_barrier(Barrier&& barrier, proxy_failures const& failures, int pe) noexcept {
  try {
    if (std::optional<std::string> const lost = failures.lost_peer()) {
      std::fprintf(stderr, "gpucomm: ProxyQueue teardown on PE %d: no barrier with the other processes: lost %s\n", pe,
                   lost->c_str());
      return false;
    }
    barrier();
    return true;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "gpucomm: ProxyQueue teardown on PE %d: the bootstrap's barrier failed: %s\n", pe, e.what());
  } catch (...) {
    std::fprintf(stderr, "gpucomm: ProxyQueue teardown on PE %d: the bootstrap's barrier failed\n", pe);
  }
  return false;
}

}  // namespace gpucomm::detail
