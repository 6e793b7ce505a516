#pragma once
// What a world is built with (world_options), what it records of a registered local buffer
// (registered_buffer), and what a transport's host half must offer to be owned by a world
// (host_transport). Included by host/world.hpp, the header users include.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <type_traits>

#include "../callback.hpp"
#include "../transport_concept.hpp"

namespace gpucomm {

class world;

struct world_options {
  /// Bytes of symmetric heap per PE. 0: the environment variable GPUCOMM_HEAP_BYTES if set, else 1 GiB.
  std::size_t heap_bytes = 0;
  /// The number of PEs the program expects; 0 accepts what the launcher (or device list) gives.
  /// A different count is an error, caught before any GPU work.
  int expected_pes = 0;
  /// load_store_filter(i, j): whether PE i may reach PE j's memory by load and store, when the
  /// hardware can. Empty: every pair the hardware allows. Must give the same answers on every
  /// process. Use it to send some peers through another transport on purpose (route<> sends each
  /// peer through its first leg that reaches it, so the filter is how its split is chosen).
  ///
  /// The filter also decides which GPUs may access each PE's heap at all, not only which transport
  /// a kernel uses: PE j's memory is accessible only from its own GPU and the GPUs of the PEs that
  /// may load and store it. A host-side copy of PE p's symmetric memory (cudaMemcpy from or to
  /// sym_array::ptr(p), a cudaMemset of it) must therefore run with PE p's own GPU current
  /// (cudaSetDevice(w.device(p))); from another GPU it fails where the filter (or the hardware)
  /// keeps that GPU out.
  callback<bool(int, int)> load_store_filter;
  /// How many teams may exist at once, the three predefined ones included (each has its barrier
  /// state in the control block: 64 + 8 * npes bytes per PE, npes rounded up to a multiple of 8).
  /// 0: GPUCOMM_MAX_TEAMS if set, else 32.
  int max_teams = 0;
  /// How long a device-side wait (wait_until, a barrier or a collective waiting for a peer, a send
  /// queue or command ring waiting for room or completion) may wait before it prints what it
  /// waited for (PE, operation, address) and traps; the host then gets the failure from
  /// synchronize(). 0: the environment variable GPUCOMM_WAIT_TIMEOUT_MS if set. Debug builds
  /// (GPUCOMM_DEBUG is 1: a macro fixed at compile time, not an environment variable; 1 unless
  /// NDEBUG is defined, and -DGPUCOMM_DEBUG=0 or =1 overrides) always bound waits, by 20 s when
  /// neither is set; release builds (GPUCOMM_DEBUG 0) bound them only when one is set, with the
  /// same report (docs/guide/reliability.md). The same on every process.
  std::chrono::milliseconds wait_timeout{0};
  // A transport's own settings (IBGDAPost's NIC and QPs per peer) are that transport's options:
  // world::configure<Transport>(options) before its first use.
};

/// A local buffer registered with the world's NICs (world::register_buffer).
struct registered_buffer {
  int pe = 0;                 ///< the local PE whose kernels use it
  void const* ptr = nullptr;  ///< its first byte, as kernels address it
  std::size_t bytes = 0;
  int cuda_device = -1;  ///< the GPU whose memory it is, or -1 for pinned host memory
};

/// A transport the world can set up: its host half is built from the world (and the transport's
/// `options`, when it has them) and hands out each local PE's device state.
template <class T>
concept host_transport = transport<T> && requires(typename T::host_state const& h, int pe) {
  { h.device_state_for(pe) } -> std::same_as<typename T::device_state>;
} &&(std::is_constructible_v<typename T::host_state, world&> || requires {
  typename T::options;
  requires std::is_constructible_v<typename T::host_state, world&, typename T::options const&>;
});

/// A transport whose host half says which pairs of PEs it reaches (world::reaches): every
/// transport of gpucomm's, and a user's that has `bool reaches(int from, int to) const`.
template <class T>
concept reach_reporting = host_transport<T> && requires(typename T::host_state const& h, int from, int to) {
  { h.reaches(from, to) } -> std::convertible_to<bool>;
};

}  // namespace gpucomm
