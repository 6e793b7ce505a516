#pragma once
// world: the PEs, their symmetric heap and their transports, seen from the host.
//
// Two ways to build one; the device code is the same for both.
//
//   // One process owns every listed GPU (all visible GPUs when the list is empty), one PE each.
//   gpucomm::world w;                                   // or gpucomm::world w({0, 1});
//
//   // One process per GPU: this process is PE boot.rank() of boot.size(), on GPU `device`.
//   gpucomm::world w(gpucomm::mpi_bootstrap(MPI_COMM_WORLD), local_rank);
//
// Then allocate symmetric memory (collective: every PE, same sizes, same order), hand a device
// handle per PE to your kernels, and launch on each local PE's stream:
//
//   auto buf = w.alloc<float>(1 << 20);                 // RAII; freed collectively
//   for (int pe : w.local_pes())
//     my_kernel<<<grid, block, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe));
//   w.synchronize();
//
// Several PEs may share a GPU (a device list that names it several times, or ranks given the same
// device): they reach each other by load/store. Kernels of PEs that share a GPU and wait on each
// other must be resident at the same time; across processes that needs the MPS control daemon.
//
// Teams (team.hpp): team_world(), team_node(pe), team_shared_gpu(pe), and team_split() for
// strided subsets, made collectively; every barrier takes one.
//
// Several worlds may live in one process; each has its own heap, PEs and teams.

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include "../detail/control_block.hpp"
#include "../error.hpp"
#include "../sym_ptr.hpp"
#include "../team.hpp"
#include "../transport_concept.hpp"
#include "bootstrap.hpp"
#include "detail/device_guard.hpp"
#include "detail/env_count.hpp"
#include "detail/heap.hpp"

namespace gpucomm {

template <transport Transport>
class comm;

struct world_options {
  /// Bytes of symmetric heap per PE. 0: the environment variable GPUCOMM_HEAP_BYTES if set, else 1 GiB.
  std::size_t heap_bytes = 0;
  /// The number of PEs the program expects; 0 accepts what the launcher (or device list) gives.
  /// A different count is an error, caught before any GPU work.
  int expected_pes = 0;
  /// load_store_filter(i, j): whether PE i may reach PE j's memory by load and store, when the
  /// hardware can. Empty: every pair the hardware allows. Must give the same answers on every
  /// process. Use it to send some peers through another transport on purpose.
  std::function<bool(int, int)> load_store_filter;
  /// How many teams may exist at once, the three predefined ones included (each has its barrier
  /// state in the control block: 64 + 8 * npes bytes per PE, npes rounded up to a multiple of 8).
  /// 0: GPUCOMM_MAX_TEAMS if set, else 32.
  int max_teams = 0;
  /// Debug builds (GPUCOMM_DEBUG): how long a device-side wait (wait_until, a barrier or a
  /// collective waiting for a peer, a send queue or command ring waiting for room or completion)
  /// may wait before it prints what it waited for (PE, operation, address) and traps; the host
  /// then gets the failure from synchronize(). 0: GPUCOMM_WAIT_TIMEOUT_MS if set, else 20 s.
  /// Release builds never give up (docs/reliability.md). The same on every process.
  std::chrono::milliseconds wait_timeout{0};
  // A transport's own settings (IBGDAPost's NIC and QPs per peer) are that transport's options:
  // world::configure<Transport>(options) before its first use.
};

template <class T>
class sym_array;
class world;

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

class world {
 public:
  /// A single-process world with one PE per GPU in `devices` (PE i on devices[i]); all visible
  /// GPUs when empty.
  explicit world(std::vector<int> devices = {}, world_options options = {}) {
    constexpr char const* call = "world (single process)";
    widen_hardware_queues();
    detail::current_device_guard const keep;  // set-up visits every GPU listed
    int count = 0;
    cudaError_t const rc = cudaGetDeviceCount(&count);
    if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || (rc == cudaSuccess && count == 0)) {
      throw error(call, -1, "no CUDA GPU is visible to this process",
                  "run on a machine with an NVIDIA GPU and its driver");
    }
    GPUCOMM_CUDA_CHECK(rc, -1);
    if (devices.empty()) {
      for (int d = 0; d < count; ++d) devices.push_back(d);
    }
    check_pe_count(options, static_cast<int>(devices.size()), "the device list");
    // A GPU may be listed several times: its PEs share it (for development and for testing
    // multi-PE code on one GPU; see the co-residency rule in the README).
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] < 0 || devices[i] >= count) {
        throw error(call, static_cast<int>(i),
                    "GPU " + std::to_string(devices[i]) + " does not exist; " + std::to_string(count) + " are visible",
                    "list devices between 0 and " + std::to_string(count - 1));
      }
    }
    npes_ = static_cast<int>(devices.size());
    std::uint64_t const host = host_id();
    for (int pe = 0; pe < npes_; ++pe) {
      int const d = devices[static_cast<std::size_t>(pe)];
      locals_.push_back({pe, d});
      pe_place p{host, {}};
      GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(p.bus_id, sizeof(p.bus_id), d), pe);
      places_.push_back(p);
    }
    init(options, std::vector<std::uint64_t>(static_cast<std::size_t>(npes_), host));
  }

  /// A one-process-per-GPU world: this process is PE boot.rank() of boot.size(), on GPU `device`,
  /// which becomes the calling thread's current device.
  template <bootstrap B>
  requires(!std::is_convertible_v<B, std::vector<int>>) world(B&& boot, int device, world_options options = {})
      : boot_(std::forward<B>(boot)) {
    constexpr char const* call = "world (one process per GPU)";
    widen_hardware_queues();
    // No current_device_guard: this process's GPU, `device`, is its current device afterwards.
    int const rank = boot_.rank();
    npes_ = boot_.size();
    // Checks that need no GPU come first, and are collective, so every process fails together.
    check_pe_count(options, npes_, "the launcher");
    int count = 0;
    cudaError_t const rc = cudaGetDeviceCount(&count);
    std::string problem;
    if (rc != cudaSuccess || count == 0)
      problem = "no CUDA GPU is visible to this process";
    else if (device < 0 || device >= count)
      problem = "GPU " + std::to_string(device) + " does not exist; " + std::to_string(count) + " are visible";
    else if (rank < 0 || rank >= npes_)
      problem = "the bootstrap says this process is rank " + std::to_string(rank) + " of " + std::to_string(npes_);
    detail::all_ok_or_throw(boot_, problem.empty(), problem, call,
                            "give each process a GPU that exists, and a bootstrap whose ranks are 0 to size - 1");
    // Where every PE runs: ranks may share a GPU (the device argument repeats across ranks); their
    // kernels then need MPS to run at the same time (README, "Several PEs per GPU").
    pe_place mine{host_id(), {}};
    GPUCOMM_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device), rank);
    places_ = boot_.allgather_value(mine);
    std::vector<std::uint64_t> hosts;
    for (auto const& p : places_) hosts.push_back(p.host);
    locals_.push_back({rank, device});
    init(options, hosts);
  }

  world(world const&) = delete;
  world& operator=(world const&) = delete;

  ~world() {
    detail::current_device_guard const keep;  // tear-down visits every local GPU
    sync_hooks_.clear();
    free_hooks_.clear();
    buffer_hooks_.clear();
    block_hooks_.clear();
    transports_.clear();  // transports' host halves go before the heap they use
    heap_.reset();
    // Each stream's destruction visits its GPU; done here, inside `keep`'s scope, rather than by
    // the members' destructors after it.
    streams_.clear();
  }

  /// Number of PEs.
  int npes() const noexcept { return npes_; }
  /// Whether each PE is its own process.
  bool one_process_per_gpu() const noexcept { return boot_.size() > 1; }
  /// The PEs this process owns: all of them in a single-process world, one otherwise.
  std::vector<int> const& local_pes() const noexcept { return local_pe_ids_; }
  bool is_local(int pe) const noexcept { return streams_.count(pe) != 0; }
  /// The GPU of local PE `pe`.
  int device(int pe) const {
    for (auto const& l : locals_)
      if (l.pe == pe) return l.device;
    throw error("world::device", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                "ask only for the PEs in local_pes()");
  }
  /// A non-blocking stream on local PE `pe`'s GPU, owned by the world.
  cudaStream_t stream(int pe) const {
    auto const it = streams_.find(pe);
    if (it == streams_.end()) {
      throw error("world::stream", pe, "PE " + std::to_string(pe) + " is not owned by this process",
                  "ask only for the PEs in local_pes()");
    }
    return it->second.get();
  }
  /// Whether PE `from` can load and store PE `to`'s symmetric memory.
  bool can_load_store(int from, int to) const {
    place(from);  // throws for a PE outside the world
    place(to);
    return heap_->can_load_store(from, to);
  }
  /// Whether PEs a and b run on the same host.
  bool same_host(int a, int b) const { return place(a).host == place(b).host; }
  /// Whether PEs a and b run on the same GPU (the same PCI device of the same host).
  bool same_gpu(int a, int b) const {
    return same_host(a, b) && std::string(place(a).bus_id) == std::string(place(b).bus_id);
  }

  // ---- symmetric memory (collective: every PE, same sizes, same order) --------------------------

  /// n elements of T on every PE, freed when the returned object goes.
  template <class T>
  sym_array<T> alloc(std::size_t n);

  /// n elements of T on every PE; returns the first local PE's view (see view()). Free with deallocate.
  template <class T>
  sym_ptr<T> allocate(std::size_t n) {
    detail::current_device_guard const keep;  // mapping the block visits every local GPU
    // n * sizeof(T) past SIZE_MAX would wrap to a small block that kernels then overrun.
    bool const overflows = n > std::numeric_limits<std::size_t>::max() / sizeof(T);
    std::size_t const offset =
        heap_->allocate(overflows ? std::numeric_limits<std::size_t>::max() : n * sizeof(T), "world::allocate",
                        overflows ? std::to_string(n) + " elements of " + std::to_string(sizeof(T)) +
                                        " bytes are more bytes than a size_t holds"
                                  : std::string());
    // Transports with a NIC register the new block. A hook that fails throws on every process
    // together (each agrees first), so the block is freed collectively again.
    std::size_t const bytes = heap_->block_bytes(offset);
    std::size_t added = 0;
    try {
      for (; added < block_hooks_.size(); ++added) block_hooks_[added].add(offset, bytes);
    } catch (...) {
      while (added-- > 0) block_hooks_[added].remove(offset, bytes);
      heap_->deallocate(offset, "world::allocate");
      throw;
    }
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(local_pe_ids_.front()) + offset));
  }

  /// Free what allocate returned (any local PE's view of it). A pointer this heap did not hand
  /// out (null included), or a second free, throws on every PE and changes nothing. A pointer
  /// freed and then handed out again by a later allocate is the new block's: freeing the stale
  /// copy frees the new block, as with free().
  template <class T>
  void deallocate(sym_ptr<T> p) {
    detail::current_device_guard const keep;
    // A proxy's copies may still read the block: they finish first. Where that fails on some
    // process (its GPU lost its context), every process throws here, before the heap's agreement,
    // which the failed one would otherwise never join.
    detail::checked_on_every_rank(boot_, "world::deallocate", [&] {
      for (auto const& finish : free_hooks_) finish();
    });
    heap_->deallocate(offset_in_any_local_slot(p.get()), "world::deallocate",
                      [&](std::size_t offset, std::size_t bytes) {
                        for (auto it = block_hooks_.rbegin(); it != block_hooks_.rend(); ++it)
                          it->remove(offset, bytes);
                      });
  }

  /// Local PE `pe`'s view of the symmetric object `p` (given as any local PE's view, and pointing
  /// into a live allocation: its rounded size, a multiple of the heap's granularity).
  template <class T>
  sym_ptr<T> view(sym_ptr<T> p, int pe) const {
    stream(pe);  // throws for a PE this process does not own
    auto const offset = offset_in_any_local_slot(p.get());
    if (!offset || !heap_->in_live_block(*offset)) {
      throw error("world::view", pe,
                  offset ? "the pointer is in this world's symmetric heap but in no live allocation (heap offset " +
                               std::to_string(*offset) + ")"
                         : std::string("the pointer is not in this world's symmetric heap"),
                  "pass a pointer into an allocation of this world that is not freed");
    }
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(pe) + *offset));
  }

  /// Bytes of symmetric heap per PE in use by allocations, and available in all.
  std::size_t heap_bytes_in_use() const { return heap_->bytes_in_use(); }
  std::size_t heap_capacity() const { return heap_->capacity(); }

  // ---- local buffers the NIC reaches directly (not collective) -----------------------------------

  /// Registers [ptr, ptr + bytes) with the NIC of every transport of this world that has one
  /// (IBGDAPost, and route through it), for local PE `pe`'s kernels: puts from it and gets into it
  /// then go straight to the NIC, with no staging copy (as nvshmemx_buffer_register). The buffer is
  /// GPU memory of pe's GPU (cudaMalloc) or pinned host memory (cudaHostAlloc,
  /// cudaHostRegister); it may not overlap the symmetric heap or another registered buffer of pe.
  /// Only this process's PE is concerned: other PEs need not call it. Register before launching
  /// the kernels that use the buffer; up to 64 buffers per PE.
  void register_buffer(int pe, void const* ptr, std::size_t bytes) {
    char const* const call = "world::register_buffer";
    device(pe);  // throws for a PE this process does not own

    // A transport registers the buffer on pe's GPU; the caller's current device stays.
    detail::current_device_guard const keep;
    if (ptr == nullptr || bytes == 0) {
      throw error(call, pe, ptr == nullptr ? "the buffer is null" : "the buffer has no bytes",
                  "pass the first byte and the size of a cudaMalloc'd or pinned host buffer");
    }
    auto const begin = reinterpret_cast<std::uintptr_t>(ptr);
    if (bytes > std::numeric_limits<std::uintptr_t>::max() - begin) {
      throw error(call, pe, "the buffer's size runs past the end of the address space", "pass its real size");
    }
    auto const end = begin + bytes;
    auto const heap_begin = reinterpret_cast<std::uintptr_t>(heap_layout().base);
    auto const heap_end = heap_begin + heap_layout().stride * static_cast<std::size_t>(npes_);
    if (begin < heap_end && heap_begin < end) {
      throw error(call, pe, "the buffer overlaps the symmetric heap",
                  "memory of the symmetric heap is registered already: use it as it is");
    }
    for (auto const& b : buffers_) {
      auto const b_begin = reinterpret_cast<std::uintptr_t>(b.ptr);
      if (b.pe == pe && begin < b_begin + b.bytes && b_begin < end) {
        throw error(call, pe, "the buffer overlaps one registered before (" + std::to_string(b.bytes) + " bytes)",
                    "unregister_buffer the other one first, or register each buffer once");
      }
    }
    if (std::count_if(buffers_.begin(), buffers_.end(), [&](auto const& b) { return b.pe == pe; }) >=
        max_registered_buffers) {
      throw error(
          call, pe,
          "PE " + std::to_string(pe) + " has " + std::to_string(max_registered_buffers) + " registered buffers already",
          "unregister_buffer one it no longer needs, or register one larger buffer and carve it up");
    }
    registered_buffer const b{pe, ptr, bytes, buffer_device(pe, ptr, call)};
    for (auto const& h : buffer_hooks_) h.add(b);
    buffers_.push_back(b);
  }

  /// Undoes register_buffer(pe, ptr, ...), once the kernels that use the buffer have finished.
  void unregister_buffer(int pe, void const* ptr) {
    detail::current_device_guard const keep;
    device(pe);
    auto const it =
        std::find_if(buffers_.begin(), buffers_.end(), [&](auto const& b) { return b.pe == pe && b.ptr == ptr; });
    if (it == buffers_.end()) {
      throw error("world::unregister_buffer", pe, "the buffer is not registered for PE " + std::to_string(pe),
                  "pass the pointer that register_buffer took, once");
    }
    for (auto const& h : buffer_hooks_) h.remove(*it);
    buffers_.erase(it);
  }

  /// The buffers registered so far (a transport set up later registers them too).
  std::vector<registered_buffer> const& registered_buffers() const noexcept { return buffers_; }
  static constexpr int max_registered_buffers = 64;

  // ---- teams (team.hpp) ------------------------------------------------------------------------------

  /// Every PE; team rank = world PE.
  team team_world() const { return {0, 1, npes_, detail::control_block_layout::world_slot}; }
  /// The PEs on local PE `pe`'s host. Throws if they are not evenly spaced in the world (launchers
  /// number each host's ranks contiguously; a team is start + i * stride).
  team team_node(int pe) const { return predefined_team(node_teams_, pe, "world::team_node", "host"); }
  /// The PEs on local PE `pe`'s GPU (just `pe` when it has the GPU to itself). Throws if they are
  /// not evenly spaced in the world.
  team team_shared_gpu(int pe) const { return predefined_team(gpu_teams_, pe, "world::team_shared_gpu", "GPU"); }

  /// Collective over the whole world (every process calls it, in the same order, with the same
  /// arguments): a new team of parent's ranks start, start + stride, ... (size of them), as
  /// OpenSHMEM's team_split_strided. Every PE gets the same value; a PE that is not a member sees
  /// `t.contains(pe) == false` and must not use it in a barrier. Throws on every PE, naming what is
  /// wrong, for a start outside the parent, a stride below 1, a size below 1 or one that runs past
  /// the parent, arguments that differ between processes (teams made in a different order), or
  /// more teams than the control block holds.
  team team_split(team const& parent, int start, int stride, int size) {
    constexpr char const* call = "world::team_split";
    int const me = local_pe_ids_.front();
    struct request {
      team parent;
      int start, stride, size;
      std::uint64_t sequence;
    };
    request const mine{parent, start, stride, size, team_sequence_};
    if (boot_.size() > 1) {
      auto const all = boot_.allgather_value(mine);
      for (std::size_t i = 0; i < all.size(); ++i) {
        request const& r = all[i];
        if (r.parent != parent || r.start != start || r.stride != stride || r.size != size ||
            r.sequence != team_sequence_) {
          throw error(call, me,
                      "PE " + std::to_string(i) + " asked for " + describe_split(r.parent, r.start, r.stride, r.size) +
                          " as its team split number " + std::to_string(r.sequence) + ", this PE for " +
                          describe_split(parent, start, stride, size) + " as number " + std::to_string(team_sequence_),
                      "make teams on every process in the same order with the same arguments");
        }
      }
    }
    std::string problem;
    if (!is_live(parent))
      problem = "the parent is not a live team of this world";
    else if (stride < 1)
      problem = "stride " + std::to_string(stride) + " (a team's ranks are start + i * stride with stride >= 1)";
    else if (size < 1)
      problem = "size " + std::to_string(size) + " (a team has at least one PE)";
    else if (start < 0 || start >= parent.size)
      problem = "start " + std::to_string(start) + " is outside the parent team (ranks 0.." +
                std::to_string(parent.size - 1) + ")" + (parent.slot == 0 ? ": no such PE in the world" : "");
    else if (static_cast<long long>(start) + static_cast<long long>(size - 1) * stride >= parent.size)
      problem = "size " + std::to_string(size) + " with stride " + std::to_string(stride) + " from rank " +
                std::to_string(start) + " runs past the parent team: its last rank would be " +
                std::to_string(static_cast<long long>(start) + static_cast<long long>(size - 1) * stride) + " of " +
                std::to_string(parent.size) + (parent.slot == 0 ? " (past the world's last PE)" : "");
    if (!problem.empty()) throw error(call, me, problem, "give a start, stride and size that stay inside the parent");
    int slot = -1;
    for (int k = detail::control_block_layout::predefined_slots; k < max_teams_ && slot < 0; ++k)
      if (!split_teams_[static_cast<std::size_t>(k)].valid()) slot = k;
    if (slot < 0) {
      throw error(call, me,
                  "more teams than the control block holds: " + std::to_string(max_teams_) +
                      " at once, the 3 predefined ones included",
                  "destroy teams you no longer need (world::team_destroy), or raise world_options::max_teams "
                  "(or GPUCOMM_MAX_TEAMS)");
    }
    team const t{parent.pe_of(start), parent.stride * stride, size, slot};
    reset_team_slot(slot);
    split_teams_[static_cast<std::size_t>(slot)] = t;
    ++team_sequence_;
    return t;
  }

  /// Collective over the whole world: the team's slot may be reused by a later team_split. No
  /// kernel may use the team any more (this waits for the local streams first).
  void team_destroy(team const& t) {
    constexpr char const* call = "world::team_destroy";
    std::string problem;
    if (!is_live(t))
      problem = "the team is not a live team of this world";
    else if (t.slot < detail::control_block_layout::predefined_slots)
      problem = "the world, node and shared-GPU teams cannot be destroyed";
    detail::all_ok_or_throw(boot_, problem.empty(), problem, call);
    detail::agree(boot_, t.slot, call, "the destroyed team", "destroy teams on every process in the same order");
    detail::checked_on_every_rank(boot_, call, [&] { synchronize(); });  // also waits for every process
    split_teams_[static_cast<std::size_t>(t.slot)] = team{};
  }

  /// How many teams may exist at once, predefined ones included.
  int max_teams() const noexcept { return max_teams_; }

  /// Whether `t` is a team of this world that is alive: a predefined one, or one team_split made
  /// and team_destroy has not destroyed. A destroyed team's value is refused even after a later
  /// split reuses its slot, unless the new team has the same PEs (then the two are the same team).
  bool is_live(team const& t) const {
    if (!t.valid() || t.slot >= max_teams_) return false;
    switch (t.slot) {
      case detail::control_block_layout::world_slot:
        return t == team_world();
      case detail::control_block_layout::node_slot:
        return std::any_of(node_teams_.begin(), node_teams_.end(), [&](auto const& e) { return e.second == t; });
      case detail::control_block_layout::shared_gpu_slot:
        return std::any_of(gpu_teams_.begin(), gpu_teams_.end(), [&](auto const& e) { return e.second == t; });
      default:
        return split_teams_[static_cast<std::size_t>(t.slot)] == t;
    }
  }

  // ---- device handles ----------------------------------------------------------------------------

  /// The device handle of local PE `pe` for Transport. The transport's host half is set up on
  /// first use (and may throw, e.g. NVLinkStore when some peer cannot be reached by load/store).
  template <host_transport Transport>
  gpucomm::comm<Transport> comm(int pe) {
    stream(pe);
    return gpucomm::comm<Transport>(pe, npes_, team_states(pe), transport_host<Transport>().device_state_for(pe));
  }

  /// Set Transport's options (`Transport::options`, e.g. IBGDAPost's NIC) before its first use in
  /// this world; every process gives the same. Afterwards it throws: the host half already exists.
  template <host_transport Transport>
  requires requires { typename Transport::options; }
  void configure(typename Transport::options const& options) {
    std::type_index const key(typeid(Transport));
    if (transports_.count(key) != 0) {
      throw error("world::configure", local_pe_ids_.front(),
                  std::string(Transport::name) + " is already set up in this world (a comm of it was handed out)",
                  "configure a transport before the first world::comm of it, or of a route that uses it");
    }
    transport_options_[key] = std::make_shared<typename Transport::options>(options);
  }

  /// Transport's host half in this world, set up on first use (collective then, in the order the
  /// processes first ask). One per world: composite transports share their parts' host halves.
  template <host_transport Transport>
  typename Transport::host_state& transport_host() {
    using host = typename Transport::host_state;
    auto& slot = transports_[std::type_index(typeid(Transport))];
    if (!slot) {
      detail::current_device_guard const keep;  // set-up visits every local GPU
      std::shared_ptr<host> made;
      try {
        if constexpr (requires { typename Transport::options; }) {
          auto const it = transport_options_.find(std::type_index(typeid(Transport)));
          typename Transport::options const options =
              it == transport_options_.end() ? typename Transport::options{}
                                             : *static_cast<typename Transport::options const*>(it->second.get());
          made = std::make_shared<host>(*this, options);
        } else {
          made = std::make_shared<host>(*this);
        }
      } catch (...) {
        transports_.erase(std::type_index(typeid(Transport)));  // a later call may try again
        throw;
      }
      // A host half with work to finish after the kernels (completing operations a NIC still
      // holds, reporting failed ones) does it in synchronize().
      if constexpr (requires(host const& h) { h.on_synchronize(); }) {
        sync_hooks_.push_back([h = made.get()] { h->on_synchronize(); });
      }
      // A host half that moves bytes on its own after the kernels (ProxyQueue's proxy) finishes
      // that work before a block of the heap is freed.
      if constexpr (requires(host const& h) { h.on_deallocate(); }) {
        free_hooks_.push_back([h = made.get()] { h->on_deallocate(); });
      }
      // A host half with a NIC registers the buffers that world::register_buffer gets later.
      if constexpr (requires(host & h, registered_buffer const& b) {
                      h.on_register_buffer(b);
                      h.on_unregister_buffer(b);
                    }) {
        buffer_hooks_.push_back({[h = made.get()](registered_buffer const& b) { h->on_register_buffer(b); },
                                 [h = made.get()](registered_buffer const& b) { h->on_unregister_buffer(b); }});
      }
      // A host half with a NIC registers each block of the symmetric heap allocated later (those
      // that exist when it is made, it registers itself: heap_blocks()).
      if constexpr (requires(host & h, std::size_t offset, std::size_t bytes) {
                      h.on_heap_block(offset, bytes);
                      h.on_heap_block_freed(offset, bytes);
                    }) {
        block_hooks_.push_back(
            {[h = made.get()](std::size_t offset, std::size_t bytes) { h->on_heap_block(offset, bytes); },
             [h = made.get()](std::size_t offset, std::size_t bytes) { h->on_heap_block_freed(offset, bytes); }});
      }
      slot = std::move(made);
    }
    return *static_cast<host*>(slot.get());
  }

  // ---- host-side synchronisation -------------------------------------------------------------------

  /// Wait for the work on every local PE's stream, then for what the transports still hold (a NIC's
  /// queued operations: IBGDAPost quiets every queue), so the host sees every effect of the
  /// kernels. Throws if a kernel failed (naming every local PE whose stream failed, after waiting
  /// for them all), or if a transport recorded a failed operation (an error completion of
  /// IBGDAPost: PE, peer, operation, syndrome).
  void synchronize() const {
    detail::current_device_guard const keep;  // the caller's current device stays as it was
    std::string failed;
    int first = -1;
    for (auto const& [pe, s] : streams_) {
      cudaError_t rc = cudaSetDevice(device(pe));
      if (rc == cudaSuccess) rc = cudaStreamSynchronize(s.get());
      if (rc == cudaSuccess) continue;
      if (first < 0) first = pe;
      failed += (failed.empty() ? "PE " : "; PE ") + std::to_string(pe) + ": " + cudaGetErrorName(rc) + " (" +
                cudaGetErrorString(rc) + ")";
    }
    if (first >= 0) {
      // The transports' own checks would wait on the failed GPUs: the kernels' failure comes first.
      throw error("world::synchronize", first, "a kernel on the world's streams failed: " + failed,
                  "a gpucomm check or a debug-build wait that gave up (world_options::wait_timeout) prints a "
                  "\"gpucomm: ...\" line on standard output naming the PE, the operation and the address before it "
                  "traps; a kernel's fault loses the CUDA context of its GPU, so no later CUDA call there can "
                  "succeed: destroy the world and end the process (docs/reliability.md)");
    }
    for (auto const& check : sync_hooks_) check();
  }
  /// synchronize(), then wait until every process has done so. Where synchronize throws on some
  /// process, every process throws its error: none is left waiting for one that gave up.
  void barrier() {
    detail::checked_on_every_rank(boot_, "world::barrier", [&] { synchronize(); });
  }

  // ---- for transport implementers -----------------------------------------------------------------

  detail::heap_layout const& heap_layout() const { return heap_->layout(); }
  /// Every block of the symmetric heap now allocated (gpucomm's control block first), at the same
  /// offsets in every PE's slot; each is its own physical allocation.
  std::vector<detail::symmetric_heap::block> heap_blocks() const { return heap_->blocks(); }
  /// The heap's granularity: every block's offset and size are multiples of it.
  std::size_t heap_granularity() const { return heap_->granularity(); }
  /// Local PE `pe`'s control block at its first team slot, in this process's address space (what
  /// comm takes; detail/control_block.hpp).
  std::uint64_t* team_states(int pe) const {
    stream(pe);  // throws for a PE this process does not own: its slot is not mapped here
    return reinterpret_cast<std::uint64_t*>(heap_->slot(pe)) + detail::control_block_layout::header_words;
  }
  detail::any_bootstrap& bootstrap() { return boot_; }
  /// The options the world was built with.
  world_options const& options() const { return options_; }
  /// Debug builds: how long a device-side wait may take, in nanoseconds (world_options::wait_timeout
  /// or GPUCOMM_WAIT_TIMEOUT_MS, else 20 s). Transports bound their own waits with it.
  std::uint64_t wait_timeout_ns() const { return wait_timeout_ns_; }
  /// Same on every process of the world; 0 in a single-process world. Names host-local sockets.
  std::uint64_t session_id() const { return heap_->session(); }

 private:
  static void check_pe_count(world_options const& options, int actual, char const* source) {
    if (options.expected_pes != 0 && options.expected_pes != actual) {
      throw error("world", -1,
                  "the program expects " + std::to_string(options.expected_pes) + " PEs but " + source + " gives " +
                      std::to_string(actual),
                  "launch as many processes (or list as many GPUs) as world_options::expected_pes says");
    }
  }

  /// CUDA_DEVICE_MAX_CONNECTIONS = 32 (the most) unless the program set it: CUDA multiplexes
  /// streams onto that many hardware queues per context (default 8), and work queued behind a
  /// kernel in a shared queue waits for it. A proxy's copy queued behind a kernel that waits for
  /// that copy (ProxyQueue) would never run. Read when a context is created, so this takes effect
  /// only if no CUDA context exists yet in the process.
  static void widen_hardware_queues() { ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

  static std::uint64_t host_id() {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the host name
    for (char const* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    return h;
  }

  /// The largest heap per PE: every PE's slot must fit one reservation of the address space
  /// (2^47 bytes of virtual addresses on current GPUs, far above any GPU's memory).
  static constexpr std::size_t max_heap_bytes = std::size_t{1} << 47;

  static std::size_t heap_bytes_from(world_options const& options) {
    std::size_t const bytes =
        options.heap_bytes
            ? options.heap_bytes
            : detail::env_count("GPUCOMM_HEAP_BYTES", 1, max_heap_bytes, "world",
                                "set it to a number of bytes in decimal digits, e.g. 4294967296, or unset it")
                  .value_or(std::size_t{1} << 30);
    if (bytes > max_heap_bytes) {
      throw error("world", -1,
                  "world_options::heap_bytes is " + std::to_string(bytes) +
                      ", more than the 2^47 bytes of address space a PE's slot may take",
                  "give a heap size below the GPU's memory");
    }
    return bytes;
  }

  void init(world_options const& options, std::vector<std::uint64_t> const& hosts) {
    options_ = options;
    // The options and environment first, on every process together: a process that throws here
    // alone would leave the others waiting in the agreements below.
    std::size_t bytes = 0;
    detail::checked_on_every_rank(boot_, "world", [&] {
      bytes = heap_bytes_from(options);
      max_teams_ = max_teams_from(options);
      wait_timeout_ns_ = wait_timeout_from(options);
    });
    detail::agree(boot_, bytes, "world", "the heap size", "give every process the same world_options::heap_bytes");
    for (auto const& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      GPUCOMM_CUDA_CHECK(cudaFree(nullptr), l.pe);  // create the primary context before the driver calls
      cudaStream_t s{};
      GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), l.pe);
      streams_.emplace(l.pe, owned_stream(s, l.device));
      local_pe_ids_.push_back(l.pe);
    }
    detail::agree(boot_, max_teams_, "world", "the team limit", "give every process the same world_options::max_teams");
    detail::agree(boot_, wait_timeout_ns_, "world", "the wait timeout",
                  "give every process the same world_options::wait_timeout (or GPUCOMM_WAIT_TIMEOUT_MS)");
    auto allow = options.load_store_filter ? options.load_store_filter : [](int, int) { return true; };
    heap_ = std::make_unique<detail::symmetric_heap>(
        boot_, locals_, npes_, bytes, detail::control_block_layout::bytes(npes_, max_teams_), allow, hosts);
    split_teams_.assign(static_cast<std::size_t>(max_teams_), team{});
    for (int pe : local_pe_ids_) {
      node_teams_[pe] = strided_team([&](int q) { return same_host(pe, q); }, detail::control_block_layout::node_slot);
      gpu_teams_[pe] =
          strided_team([&](int q) { return same_gpu(pe, q); }, detail::control_block_layout::shared_gpu_slot);
      write_control_header(pe);
    }
  }

  static int max_teams_from(world_options const& options) {
    constexpr int most = 1 << 20;
    int const n =
        options.max_teams
            ? options.max_teams
            : static_cast<int>(detail::env_count("GPUCOMM_MAX_TEAMS", detail::control_block_layout::predefined_slots,
                                                 most, "world",
                                                 "set it to a count of at least 3 (the predefined teams), "
                                                 "e.g. 64, or unset it")
                                   .value_or(32));
    if (n < detail::control_block_layout::predefined_slots) {
      throw error("world", -1, "world_options::max_teams is " + std::to_string(n) + ", below the 3 predefined teams",
                  "give 0 (default: 32) or a count of at least 3");
    }
    if (n > most) {
      throw error("world", -1,
                  "world_options::max_teams is " + std::to_string(n) + ", above the most, " + std::to_string(most),
                  "give a count the control block can hold, e.g. 64");
    }
    return n;
  }

  /// The longest wait timeout: a day.
  static constexpr std::uint64_t max_wait_timeout_ms = 86'400'000;

  static std::uint64_t wait_timeout_from(world_options const& options) {
    if (options.wait_timeout.count() < 0 ||
        static_cast<std::uint64_t>(options.wait_timeout.count()) > max_wait_timeout_ms) {
      throw error("world", -1,
                  "world_options::wait_timeout is " + std::to_string(options.wait_timeout.count()) +
                      " ms, outside 0 to a day (86400000 ms)",
                  "give 0 (default: 20 s) or a positive number of milliseconds up to a day");
    }
    std::uint64_t const ms =
        options.wait_timeout.count() != 0
            ? static_cast<std::uint64_t>(options.wait_timeout.count())
            : detail::env_count("GPUCOMM_WAIT_TIMEOUT_MS", 1, max_wait_timeout_ms, "world",
                                "set it to a number of milliseconds in decimal digits, e.g. 5000, or unset it")
                  .value_or(20'000);
    return ms * 1'000'000;
  }

  /// The members (PEs q with member(q)) as a strided team in `slot`, or an empty team (size 0)
  /// when they are not evenly spaced.
  template <class Member>
  team strided_team(Member const& member, int slot) const {
    std::vector<int> pes;
    for (int q = 0; q < npes_; ++q)
      if (member(q)) pes.push_back(q);
    int const stride = pes.size() > 1 ? pes[1] - pes[0] : 1;
    for (std::size_t i = 1; i < pes.size(); ++i)
      if (pes[i] - pes[i - 1] != stride) return {pes.front(), 1, 0, -1};
    return {pes.front(), stride, static_cast<int>(pes.size()), slot};
  }

  team predefined_team(std::map<int, team> const& teams, int pe, char const* call, char const* what) const {
    stream(pe);  // throws for a PE this process does not own
    team const t = teams.at(pe);
    if (!t.valid()) {
      throw error(call, pe,
                  std::string("the PEs on PE ") + std::to_string(pe) + "'s " + what +
                      " are not evenly spaced in the world, so they form no team (a team is start + i * stride)",
                  std::string("place the PEs of each ") + what + " at evenly spaced ranks, e.g. consecutive ones");
    }
    return t;
  }

  /// The control block's header at local PE `pe` (detail/control_block.hpp), read by device code
  /// in debug reports.
  void write_control_header(int pe) {
    namespace cb = detail;
    std::uint64_t header[cb::control_block_layout::header_words] = {};
    team const gpu = gpu_teams_.at(pe);
    header[cb::control_block_layout::header_pe] = static_cast<std::uint64_t>(pe);
    header[cb::control_block_layout::header_npes] = static_cast<std::uint64_t>(npes_);
    header[cb::control_block_layout::header_max_teams] = static_cast<std::uint64_t>(max_teams_);
    header[cb::control_block_layout::header_gpu_team + 0] = static_cast<std::uint64_t>(gpu.start);
    header[cb::control_block_layout::header_gpu_team + 1] = static_cast<std::uint64_t>(gpu.stride);
    header[cb::control_block_layout::header_gpu_team + 2] = static_cast<std::uint64_t>(gpu.size);
    header[cb::control_block_layout::header_wait_timeout] = wait_timeout_ns_;
    GPUCOMM_CUDA_CHECK(cudaSetDevice(device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaMemcpy(heap_->slot(pe), header, sizeof(header), cudaMemcpyHostToDevice), pe);
  }

  /// Zeroes team slot `slot` at every local PE, then waits for every process: a new team starts
  /// from epoch 0 with no flag set, whatever team had the slot before.
  void reset_team_slot(int slot) {
    detail::current_device_guard const keep;
    std::size_t const words = detail::control_block_layout::slot_words(npes_);
    // A failure on one process throws on all of them, which also waits for every process.
    detail::checked_on_every_rank(boot_, "world::team_split", [&] {
      for (int pe : local_pe_ids_) {
        // On the legacy default stream, which the world's non-blocking streams do not wait for: a
        // kernel still running on them (using other teams) neither delays this nor is disturbed.
        GPUCOMM_CUDA_CHECK(cudaSetDevice(device(pe)), pe);
        GPUCOMM_CUDA_CHECK(cudaMemset(team_states(pe) + static_cast<std::size_t>(slot) * words, 0, words * 8), pe);
        GPUCOMM_CUDA_CHECK(cudaStreamSynchronize(nullptr), pe);
      }
    });
  }

  static std::string describe_split(team const& parent, int start, int stride, int size) {
    return "(parent in slot " + std::to_string(parent.slot) + ", start " + std::to_string(start) + ", stride " +
           std::to_string(stride) + ", size " + std::to_string(size) + ")";
  }

  /// The heap offset of `p` in whichever local PE's slot holds it; nothing when none does.
  std::optional<std::size_t> offset_in_any_local_slot(void const* p) const {
    auto const addr = reinterpret_cast<std::uintptr_t>(p);
    for (int pe : local_pe_ids_) {
      auto const begin = reinterpret_cast<std::uintptr_t>(heap_->slot(pe));
      if (addr >= begin && addr < begin + heap_->layout().stride) return addr - begin;
    }
    return std::nullopt;
  }

  /// A stream destroyed with the world (also when a constructor throws half way).
  class owned_stream {
   public:
    owned_stream(cudaStream_t s, int device) : s_(s), device_(device) {}
    owned_stream(owned_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)), device_(o.device_) {}
    owned_stream& operator=(owned_stream&&) = delete;
    ~owned_stream() {
      if (s_) {
        cudaSetDevice(device_);
        cudaStreamDestroy(s_);
      }
    }
    cudaStream_t get() const { return s_; }

   private:
    cudaStream_t s_;
    int device_;
  };

  /// The GPU whose memory `ptr` is (it must be pe's), or -1 for pinned host memory the GPU maps at
  /// the same address; anything else (pageable or managed memory) throws.
  int buffer_device(int pe, void const* ptr, char const* call) const {
    cudaPointerAttributes a{};
    cudaError_t const rc = cudaPointerGetAttributes(&a, ptr);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      throw error(call, pe, std::string("cudaPointerGetAttributes failed: ") + cudaGetErrorName(rc),
                  "pass memory from cudaMalloc or cudaHostAlloc");
    }
    if (a.type == cudaMemoryTypeDevice && a.device == device(pe)) return a.device;
    if (a.type == cudaMemoryTypeHost && a.devicePointer == ptr) return -1;
    throw error(call, pe,
                a.type == cudaMemoryTypeDevice
                    ? "the buffer is memory of GPU " + std::to_string(a.device) + ", not of PE " + std::to_string(pe) +
                          "'s GPU " + std::to_string(device(pe))
                    : std::string(a.type == cudaMemoryTypeManaged ? "the buffer is managed memory"
                                  : a.type == cudaMemoryTypeHost  ? "the buffer is pinned host memory that the GPU "
                                                                    "maps at another address"
                                                                  : "the buffer is pageable host memory") +
                          ", which the NIC cannot reach",
                "register memory from cudaMalloc on the PE's GPU, or pinned host memory (cudaHostAlloc with "
                "cudaHostAllocMapped, or cudaHostRegister)");
  }

  /// Where a PE runs: its host (a hash of the host name) and its GPU's PCI bus id.
  struct pe_place {
    std::uint64_t host;
    char bus_id[32];
  };
  pe_place const& place(int pe) const {
    if (pe < 0 || pe >= npes_) {
      throw error("world", pe,
                  "PE " + std::to_string(pe) + " is outside the world of " + std::to_string(npes_) + " PEs",
                  "pass a PE between 0 and npes() - 1");
    }
    return places_[static_cast<std::size_t>(pe)];
  }

  detail::any_bootstrap boot_;
  int npes_ = 0;
  std::vector<pe_place> places_;  // [pe]
  std::vector<detail::local_pe> locals_;
  std::vector<int> local_pe_ids_;
  std::map<int, owned_stream> streams_;
  std::unique_ptr<detail::symmetric_heap> heap_;
  std::map<std::type_index, std::shared_ptr<void>> transports_;
  std::map<std::type_index, std::shared_ptr<void>> transport_options_;
  int max_teams_ = 0;
  std::vector<team> split_teams_;    // [slot]: the live team_split team there, or team{} (predefined slots: unused)
  std::uint64_t team_sequence_ = 0;  // team_split calls so far: must agree across processes
  std::map<int, team> node_teams_;   // [local PE]
  std::map<int, team> gpu_teams_;    // [local PE]
  std::vector<std::function<void()>> sync_hooks_;
  std::vector<std::function<void()>> free_hooks_;
  struct buffer_hook {
    std::function<void(registered_buffer const&)> add, remove;
  };
  std::vector<buffer_hook> buffer_hooks_;
  struct block_hook {
    // remove must not throw: it runs where the block is going whatever happens.
    std::function<void(std::size_t, std::size_t)> add, remove;
  };
  std::vector<block_hook> block_hooks_;
  std::vector<registered_buffer> buffers_;
  world_options options_;
  std::uint64_t wait_timeout_ns_ = 20'000'000'000;
  // Expires when the world goes: a sym_array that outlives its world finds nothing left to free.
  std::shared_ptr<int const> lifetime_ = std::make_shared<int const>(0);
  template <class>
  friend class sym_array;
};

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
