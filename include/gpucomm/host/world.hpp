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
// Before the first launch, w.prepare(kernel, ...) with every kernel they run loads them and
// reserves their stack, which a launch would otherwise do while the others' kernels wait for it.
//
// Hardware queues: the world sets CUDA_DEVICE_MAX_CONNECTIONS=32 when the program has not set it,
// so that work queued behind a kernel on another stream of its GPU need not wait for it; a
// one-process-per-GPU world that the MPS daemon serves keeps CUDA's default (8) instead, since
// MPS's clients share one pool of queues per GPU and 32 each would leave too few for several
// processes per GPU. CUDA reads the variable early: a GPU whose CUDA context existed before the
// first world keeps the program's queues. The world then throws where that can hang (PEs of this
// process sharing the GPU; ProxyQueue's copy engines) and warns on standard error elsewhere. A
// program calls request_hardware_queues() (below) before its first CUDA call, or sets the
// variable in its environment (a PyTorch program, which starts CUDA before gpucomm).
//
// Teams (team.hpp): team_world(), team_node(pe), team_shared_gpu(pe), and team_split() for
// strided subsets, made collectively; every barrier takes one.
//
// Several worlds may live in one process; each has its own heap, PEs and teams.
//
// The options (world_options), and what a transport's host half must offer (host_transport), are
// in world_options.hpp; the machinery behind each group of members is in detail/.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../detail/control_block.hpp"
#include "../error.hpp"
#include "../sym_ptr.hpp"
#include "../team.hpp"
#include "../transport_concept.hpp"
#include "bootstrap.hpp"
#include "detail/device_guard.hpp"
#include "detail/hardware_queues.hpp"
#include "detail/heap.hpp"
#include "detail/kernel_preload.hpp"
#include "detail/pe_placement.hpp"
#include "detail/pe_streams.hpp"
#include "detail/team_table.hpp"
#include "detail/transport_registry.hpp"
#include "detail/world_env.hpp"
#include "detail/world_memory.hpp"
#include "world_options.hpp"

namespace gpucomm {

/// Before the program's first CUDA call: sets CUDA_DEVICE_MAX_CONNECTIONS, unless the environment
/// sets it, to the hardware queues gpucomm's worlds ask for (see "Hardware queues" above);
/// `one_pe_per_process` for a process that makes one-process-per-GPU worlds (a launcher's rank).
inline void request_hardware_queues(bool one_pe_per_process = false) {
  detail::ask_hardware_queues(one_pe_per_process);
}

template <transport Transport>
class comm;
template <class T>
class sym_array;

class world {
 public:
  /// A single-process world with one PE per GPU in `devices` (PE i on devices[i]); all visible
  /// GPUs when empty. Throws when several PEs share a GPU whose CUDA context predates the world
  /// without CUDA_DEVICE_MAX_CONNECTIONS=32 (see above).
  explicit world(std::vector<int> devices = {}, world_options options = {});

  /// A one-process-per-GPU world: this process is PE boot.rank() of boot.size(), on GPU `device`,
  /// which becomes the calling thread's current device.
  template <bootstrap B>
  requires(!std::is_convertible_v<B, std::vector<int>>) world(B&& boot, int device, world_options options = {})
      : boot_(std::forward<B>(boot)) {
    constexpr char const* call = "world (one process per GPU)";
    detail::widen_hardware_queues(true);
    // No current_device_guard: this process's GPU, `device`, is its current device afterwards.
    int const rank = boot_.rank();
    // Checks that need no GPU come first, and are collective, so every process fails together.
    detail::check_pe_count(options, boot_.size(), "the launcher");
    std::string const problem = detail::one_process_problem(device, rank, boot_.size());
    detail::all_ok_or_throw(boot_, problem.empty(), problem, call,
                            "give each process a GPU that exists, and a bootstrap whose ranks are 0 to size - 1");
    // Where every PE runs: ranks may share a GPU (the device argument repeats across ranks); their
    // kernels then need MPS to run at the same time (README, "Several PEs per GPU").
    places_ = detail::pe_placement::one_process_per_gpu(boot_, rank, device);
    detail::check_hardware_queues(places_.locals(), call);  // one PE here: a warning at most
    init(options);
  }

  world(world const&) = delete;
  world& operator=(world const&) = delete;

  ~world();

  /// Number of PEs.
  int npes() const noexcept { return places_.npes(); }
  /// Whether each PE is its own process.
  bool one_process_per_gpu() const noexcept { return boot_.size() > 1; }
  /// The PEs this process owns: all of them in a single-process world, one otherwise.
  std::vector<int> const& local_pes() const noexcept { return places_.local_pes(); }
  bool is_local(int pe) const noexcept { return streams_.contains(pe); }
  /// The GPU of local PE `pe`.
  int device(int pe) const { return places_.device(pe); }
  /// A non-blocking stream on local PE `pe`'s GPU, owned by the world.
  cudaStream_t stream(int pe) const { return streams_.get(pe); }
  /// Whether PE `from` can load and store PE `to`'s symmetric memory.
  bool can_load_store(int from, int to) const;
  /// Whether PEs a and b run on the same host.
  bool same_host(int a, int b) const { return places_.same_host(a, b); }
  /// Whether PEs a and b run on the same GPU (the same PCI device of the same host).
  bool same_gpu(int a, int b) const { return places_.same_gpu(a, b); }

  /// Makes `kernels` ready to run beside kernels they wait on, on every local PE's GPU: loads each
  /// (CUDA loads a kernel's code at its first launch by default, and that load waits for the
  /// kernels running on the GPU) and reserves the GPU's per-thread stack for the largest (a launch
  /// that needs more stack than the kernels before it grows the reservation, which waits too). With
  /// several PEs on a GPU, call it before the first launch with every kernel they run; where they
  /// run different kernels that wait on each other, skipping it can deadlock. Not collective: each
  /// process prepares its own GPUs. Raising the stack limit waits for the GPU's work: call it
  /// before launching.
  ///
  ///   w.prepare(produce, consume);          // the stack the kernels' attributes ask for
  ///   w.prepare(8192, produce, consume);    // at least 8 KiB, e.g. for calls through pointers,
  ///                                         // whose stack the attributes do not count
  template <class... Kernel>
  requires(std::is_function_v<Kernel>&&...) void prepare(Kernel*... kernels) { prepare(std::size_t{0}, kernels...); }
  /// prepare(kernels...), reserving at least `stack_bytes` of stack per thread.
  template <class... Kernel>
  requires(std::is_function_v<Kernel>&&...) void prepare(std::size_t stack_bytes, Kernel*... kernels) {
    detail::preload_kernels(places_.locals(), {reinterpret_cast<void const*>(kernels)...}, stack_bytes);
  }

  // ---- symmetric memory (collective: every PE, same sizes, same order) --------------------------

  /// n elements of T on every PE, freed when the returned object goes.
  template <class T>
  sym_array<T> alloc(std::size_t n);

  /// n elements of T on every PE; returns the first local PE's view (see view()). Free with deallocate.
  template <class T>
  sym_ptr<T> allocate(std::size_t n) {
    detail::current_device_guard const keep;  // mapping the block visits every local GPU
    detail::allocation_bytes const asked = detail::allocation_bytes_of(n, sizeof(T));
    std::size_t const offset = heap_->allocate(asked.bytes, "world::allocate", asked.problem);
    // Transports with a NIC register the new block. A hook that fails throws on every process
    // together (each agrees first), so the block is freed collectively again.
    std::size_t const bytes = heap_->block_bytes(offset);
    try {
      transports_.on_heap_block(offset, bytes);
    } catch (...) {
      heap_->deallocate(offset, "world::allocate");
      throw;
    }
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(local_pes().front()) + offset));
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
    detail::checked_on_every_rank(boot_, "world::deallocate", [&] { transports_.on_deallocate(); });
    heap_->deallocate(detail::offset_in_local_slots(*heap_, local_pes(), p.get()), "world::deallocate",
                      [&](std::size_t offset, std::size_t bytes) { transports_.on_heap_block_freed(offset, bytes); });
  }

  /// Local PE `pe`'s view of the symmetric object `p` (given as any local PE's view, and pointing
  /// into a live allocation: its rounded size, a multiple of the heap's granularity).
  template <class T>
  sym_ptr<T> view(sym_ptr<T> p, int pe) const {
    stream(pe);  // throws for a PE this process does not own
    std::size_t const offset = detail::live_offset(*heap_, local_pes(), p.get(), pe);
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(pe) + offset));
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
  void register_buffer(int pe, void const* ptr, std::size_t bytes);

  /// Undoes register_buffer(pe, ptr, ...), once the kernels that use the buffer have finished.
  void unregister_buffer(int pe, void const* ptr);

  /// The buffers registered so far (a transport set up later registers them too).
  std::vector<registered_buffer> const& registered_buffers() const noexcept { return buffers_; }
  static constexpr int max_registered_buffers = 64;

  // ---- teams (team.hpp) ------------------------------------------------------------------------------

  /// Every PE; team rank = world PE.
  team team_world() const { return teams_.world(); }
  /// The PEs on local PE `pe`'s host. Throws if they are not evenly spaced in the world (launchers
  /// number each host's ranks contiguously; a team is start + i * stride).
  team team_node(int pe) const;
  /// The PEs on local PE `pe`'s GPU (just `pe` when it has the GPU to itself). Throws if they are
  /// not evenly spaced in the world.
  team team_shared_gpu(int pe) const;

  /// Collective over the whole world (every process calls it, in the same order, with the same
  /// arguments): a new team of parent's ranks start, start + stride, ... (size of them), as
  /// OpenSHMEM's team_split_strided. Every PE gets the same value; a PE that is not a member sees
  /// `t.contains(pe) == false` and must not use it in a barrier. Throws on every PE, naming what is
  /// wrong, for a start outside the parent, a stride below 1, a size below 1 or one that runs past
  /// the parent, arguments that differ between processes (teams made in a different order), or
  /// more teams than the control block holds.
  team team_split(team const& parent, int start, int stride, int size);

  /// Collective over the whole world: the team's slot may be reused by a later team_split. No
  /// kernel may use the team any more (this waits for the local streams first).
  void team_destroy(team const& t);

  /// How many teams may exist at once, predefined ones included.
  int max_teams() const noexcept { return teams_.max_teams(); }

  /// Whether `t` is a team of this world that is alive: a predefined one, or one team_split made
  /// and team_destroy has not destroyed. A destroyed team's value is refused even after a later
  /// split reuses its slot, unless the new team has the same PEs (then the two are the same team).
  bool is_live(team const& t) const { return teams_.is_live(t); }

  // ---- transports ----------------------------------------------------------------------------------

  /// The device handle of local PE `pe` for Transport. The transport's host half is set up on
  /// first use (and may throw, e.g. NVLinkStore when some peer cannot be reached by load/store).
  template <host_transport Transport>
  gpucomm::comm<Transport> comm(int pe) {
    stream(pe);
    return gpucomm::comm<Transport>(pe, npes(), team_states(pe), transport_host<Transport>().device_state_for(pe));
  }

  /// Whether Transport carries PE `from_pe`'s operations to PE `to_pe` (any two PEs of the world):
  /// NVLinkStore and P2PCopy where `from_pe` can load and store `to_pe`'s heap (can_load_store),
  /// IBGDAPost always, ProxyQueue for every pair it serves, route<Legs...> where some leg does.
  /// Sets the transport's host half up on first use, as comm<Transport>() does (collective then),
  /// so configure<Transport> comes first; a route whose legs leave some pair unreached throws
  /// there. A route sends each pair through its first leg for which this is true; comm<NVLinkStore>
  /// (and P2PCopy's) for PE pe throws unless it is true from pe to every PE.
  template <host_transport Transport>
  bool reaches(int from_pe, int to_pe) {
    static_assert(reach_reporting<Transport>,
                  "this transport's host half has no `bool reaches(int from, int to) const`, so the world cannot "
                  "say which PEs it reaches");
    places_.place(from_pe);  // throws for a PE outside the world
    places_.place(to_pe);
    return transport_host<Transport>().reaches(from_pe, to_pe);
  }

  /// Set Transport's options (`Transport::options`, e.g. IBGDAPost's NIC) before its first use in
  /// this world; every process gives the same. Afterwards it throws: the host half already exists.
  template <host_transport Transport>
  requires requires { typename Transport::options; }
  void configure(typename Transport::options const& options) {
    transports_.configure<Transport>(options, local_pes().front());
  }

  /// Transport's host half in this world, set up on first use (collective then, in the order the
  /// processes first ask). One per world: composite transports share their parts' host halves.
  template <host_transport Transport>
  typename Transport::host_state& transport_host() {
    return transports_.host<Transport>(*this);
  }

  // ---- host-side synchronisation -------------------------------------------------------------------

  /// Wait for the work on every local PE's stream, then for what the transports still hold (a NIC's
  /// queued operations: IBGDAPost quiets every queue), so the host sees every effect of the
  /// kernels. Throws if a kernel failed (naming every local PE whose stream failed, after waiting
  /// for them all), or if a transport recorded a failed operation (an error completion of
  /// IBGDAPost: PE, peer, operation, syndrome).
  void synchronize() const;
  /// synchronize(), then wait until every process has done so. Where synchronize throws on some
  /// process, every process throws its error: none is left waiting for one that gave up.
  void barrier();

  // ---- for transport implementers -----------------------------------------------------------------

  detail::heap_layout const& heap_layout() const { return heap_->layout(); }
  /// Every block of the symmetric heap now allocated (gpucomm's control block first), at the same
  /// offsets in every PE's slot; each is its own physical allocation.
  std::vector<detail::symmetric_heap::block> heap_blocks() const { return heap_->blocks(); }
  /// The heap's granularity: every block's offset and size are multiples of it.
  std::size_t heap_granularity() const { return heap_->granularity(); }
  /// Local PE `pe`'s control block at its first team slot, in this process's address space (what
  /// comm takes; detail/control_block.hpp).
  std::uint64_t* team_states(int pe) const;
  detail::any_bootstrap& bootstrap() { return boot_; }
  /// The options the world was built with.
  world_options const& options() const { return options_; }
  /// How long a device-side wait may take, in nanoseconds (world_options::wait_timeout or
  /// GPUCOMM_WAIT_TIMEOUT_MS, else 20 s); release builds apply it only when one of those is set
  /// (detail/bounded_wait.cuh's timeout rule).
  std::uint64_t wait_timeout_ns() const { return wait_timeout_word_ & ~detail::wait_timeout_requested; }
  /// The same as device code takes it: the nanoseconds and whether the program asked for them, in
  /// one word (detail::wait_timeout_word). Transports put it into the states their waits read.
  std::uint64_t wait_timeout_word() const { return wait_timeout_word_; }
  /// Same on every process of the world; 0 in a single-process world. Names host-local sockets.
  std::uint64_t session_id() const { return heap_->session(); }
  /// For a host half whose work a kernel waits for from another stream of the same GPU
  /// (ProxyQueue's copy engines). Collective: when some process has a GPU whose context predates
  /// its first world without CUDA_DEVICE_MAX_CONNECTIONS=32 (see above), every process throws.
  void require_hardware_queues(char const* call);

 private:
  void init(world_options const& options);

  /// The control block's header at local PE `pe` (detail/control_block.hpp), read by device code
  /// in debug reports.
  void write_control_header(int pe);

  /// Zeroes team slot `slot` at every local PE, then waits for every process: a new team starts
  /// from epoch 0 with no flag set, whatever team had the slot before.
  void reset_team_slot(int slot);

  detail::any_bootstrap boot_;
  detail::pe_placement places_;
  detail::pe_streams streams_;
  std::unique_ptr<detail::symmetric_heap> heap_;
  detail::transport_registry transports_;  // after heap_: its host halves go first
  detail::team_table teams_;
  std::vector<registered_buffer> buffers_;
  world_options options_;
  std::uint64_t wait_timeout_word_ = 20'000'000'000;  // debug builds' 20 s, not asked for
  // Expires when the world goes: a sym_array that outlives its world finds nothing left to free.
  std::shared_ptr<int const> lifetime_ = std::make_shared<int const>(0);
  template <class>
  friend class sym_array;
};

}  // namespace gpucomm

// sym_array, world::alloc's result: after the world, whose members it calls.
#include "sym_array.hpp"

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/world.inl"
#endif
