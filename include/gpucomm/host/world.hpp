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
// Several worlds may live in one process; each has its own heap and PEs.

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include "../error.hpp"
#include "../sym_ptr.hpp"
#include "../transport/transport.hpp"
#include "bootstrap.hpp"
#include "nic_choice.hpp"
#include "detail/control_block.hpp"
#include "detail/device_guard.hpp"
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
  /// The NIC of IBGDAPost (see nic_choice). Asking for hardware never falls back to the model.
  nic_choice nic = nic_choice::automatic;
  /// RC QPs from each PE to each PE (IBGDAPost); a calling group always uses the same one per
  /// peer (ibgda_post.cuh says which). 0: GPUCOMM_QPS_PER_PEER if set, else 2.
  int qps_per_peer = 0;
};

template <class T>
class sym_array;

class world {
 public:
  /// A single-process world with one PE per GPU in `devices` (PE i on devices[i]); all visible
  /// GPUs when empty.
  explicit world(std::vector<int> devices = {}, world_options options = {}) {
    constexpr char const* call = "world (single process)";
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

  /// A one-process-per-GPU world: this process is PE boot.rank() of boot.size(), on GPU `device`.
  template <bootstrap B>
  requires(!std::is_convertible_v<B, std::vector<int>>) world(B&& boot, int device, world_options options = {})
      : boot_(std::forward<B>(boot)) {
    constexpr char const* call = "world (one process per GPU)";
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
    detail::all_ok_or_throw(boot_, problem.empty(), problem, call);
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
    sync_hooks_.clear();
    transports_.clear();  // transports' host halves go before the heap they use
    heap_.reset();
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
  bool can_load_store(int from, int to) const { return heap_->can_load_store(from, to); }
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
    std::size_t const offset = heap_->allocate(n * sizeof(T), "world::allocate");
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(local_pe_ids_.front()) + offset));
  }

  /// Free what allocate returned (any local PE's view of it). A pointer this heap did not hand
  /// out, or a second free, throws and changes nothing.
  template <class T>
  void deallocate(sym_ptr<T> p) {
    heap_->deallocate(offset_in_any_local_slot(p.get(), "world::deallocate"), "world::deallocate");
  }

  /// Local PE `pe`'s view of the symmetric object `p` (given as any local PE's view).
  template <class T>
  sym_ptr<T> view(sym_ptr<T> p, int pe) const {
    stream(pe);  // throws for a PE this process does not own
    std::size_t const offset = offset_in_any_local_slot(p.get(), "world::view");
    return sym_ptr<T>(reinterpret_cast<T*>(heap_->slot(pe) + offset));
  }

  /// Bytes of symmetric heap per PE in use by allocations, and available in all.
  std::size_t heap_bytes_in_use() const { return heap_->bytes_in_use(); }
  std::size_t heap_capacity() const { return heap_->capacity(); }

  // ---- device handles ----------------------------------------------------------------------------

  /// The device handle of local PE `pe` for Transport. The transport's host half is set up on
  /// first use (and may throw, e.g. NVLinkStore when some peer cannot be reached by load/store).
  template <transport Transport>
  gpucomm::comm<Transport> comm(int pe) {
    stream(pe);
    return gpucomm::comm<Transport>(pe, npes_, transport_host<Transport>().device_state_for(pe));
  }

  /// Transport's host half in this world, set up on first use (collective then, in the order the
  /// processes first ask). One per world: composite transports share their parts' host halves.
  template <transport Transport>
  typename Transport::host_state& transport_host() {
    using host = typename Transport::host_state;
    auto& slot = transports_[std::type_index(typeid(Transport))];
    if (!slot) {
      detail::current_device_guard const keep;  // set-up visits every local GPU
      auto made = std::make_shared<host>(*this);
      // A host half with work to finish after the kernels (completing operations a NIC still
      // holds, reporting failed ones) does it in synchronize().
      if constexpr (requires(host const& h) { h.on_synchronize(); }) {
        sync_hooks_.push_back([h = made.get()] { h->on_synchronize(); });
      }
      slot = std::move(made);
    }
    return *static_cast<host*>(slot.get());
  }

  // ---- host-side synchronisation -------------------------------------------------------------------

  /// Wait for the work on every local PE's stream, then for what the transports still hold (a NIC's
  /// queued operations: IBGDAPost quiets every queue), so the host sees every effect of the
  /// kernels. Throws if a kernel failed, or if a transport recorded a failed operation (an error
  /// completion of IBGDAPost: PE, peer, operation, syndrome).
  void synchronize() const {
    detail::current_device_guard const keep;  // the caller's current device stays as it was
    for (auto const& [pe, s] : streams_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(device(pe)), pe);
      GPUCOMM_CUDA_CHECK(cudaStreamSynchronize(s.get()), pe);
    }
    for (auto const& check : sync_hooks_) check();
  }
  /// synchronize(), then wait until every process has done so.
  void barrier() {
    synchronize();
    boot_.barrier();
  }

  // ---- for transport implementers -----------------------------------------------------------------

  detail::heap_layout const& heap_layout() const { return heap_->layout(); }
  /// Local PE `pe`'s control block, in this process's address space.
  detail::control_block_view control_block(int pe) const { return detail::control_block_at(heap_->slot(pe)); }
  detail::any_bootstrap& bootstrap() { return boot_; }
  /// The options the world was built with.
  world_options const& options() const { return options_; }
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

  static std::uint64_t host_id() {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the host name
    for (char const* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    return h;
  }

  static std::size_t heap_bytes_from(world_options const& options) {
    if (options.heap_bytes) return options.heap_bytes;
    if (char const* env = std::getenv("GPUCOMM_HEAP_BYTES")) {
      char* end = nullptr;
      unsigned long long const v = std::strtoull(env, &end, 0);
      if (end == env || *end != '\0' || v == 0) {
        throw error("world", -1, std::string("GPUCOMM_HEAP_BYTES=") + env + " is not a positive byte count",
                    "set it to a number of bytes, e.g. 4294967296");
      }
      return static_cast<std::size_t>(v);
    }
    return std::size_t{1} << 30;
  }

  void init(world_options const& options, std::vector<std::uint64_t> const& hosts) {
    options_ = options;
    std::size_t const bytes = heap_bytes_from(options);
    detail::agree(boot_, bytes, "world", "the heap size", "give every process the same world_options::heap_bytes");
    for (auto const& l : locals_) {
      GPUCOMM_CUDA_CHECK(cudaSetDevice(l.device), l.pe);
      GPUCOMM_CUDA_CHECK(cudaFree(nullptr), l.pe);  // create the primary context before the driver calls
      cudaStream_t s{};
      GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), l.pe);
      streams_.emplace(l.pe, owned_stream(s, l.device));
      local_pe_ids_.push_back(l.pe);
    }
    auto allow = options.load_store_filter ? options.load_store_filter : [](int, int) { return true; };
    heap_ = std::make_unique<detail::symmetric_heap>(boot_, locals_, npes_, bytes, allow, hosts);
  }

  std::size_t offset_in_any_local_slot(void const* p, char const* call) const {
    auto const addr = reinterpret_cast<std::uintptr_t>(p);
    for (int pe : local_pe_ids_) {
      auto const begin = reinterpret_cast<std::uintptr_t>(heap_->slot(pe));
      if (addr >= begin && addr < begin + heap_->layout().stride) return addr - begin;
    }
    throw error(call, local_pe_ids_.front(), "the pointer is not in this world's symmetric heap",
                "pass a pointer that this world's allocate or alloc returned");
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

  /// Where a PE runs: its host (a hash of the host name) and its GPU's PCI bus id.
  struct pe_place {
    std::uint64_t host;
    char bus_id[32];
  };
  pe_place const& place(int pe) const {
    if (pe < 0 || pe >= npes_) {
      throw error("world", pe, "PE " + std::to_string(pe) + " is outside the world of " + std::to_string(npes_) + " PEs",
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
  std::vector<std::function<void()>> sync_hooks_;
  world_options options_;
};

/// A symmetric array owned by the host: n elements of T on every PE, freed collectively when it
/// goes out of scope (so every PE must destroy its arrays in the same order). Move-only.
template <class T>
class sym_array {
 public:
  sym_array() = default;
  sym_array(world& w, std::size_t n) : world_(&w), first_(w.allocate<T>(n)), size_(n) {}
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

  /// Free now (collective).
  void reset() {
    if (world_ && first_) {
      world* w = std::exchange(world_, nullptr);
      w->deallocate(std::exchange(first_, sym_ptr<T>{}));
    }
  }

  /// Local PE `pe`'s view.
  sym_ptr<T> ptr(int pe) const { return world_->view(first_, pe); }
  /// The view of the only local PE (one-process-per-GPU worlds), or of the first local PE.
  sym_ptr<T> get() const { return first_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }

  void swap(sym_array& o) noexcept {
    std::swap(world_, o.world_);
    std::swap(first_, o.first_);
    std::swap(size_, o.size_);
  }

 private:
  world* world_ = nullptr;
  sym_ptr<T> first_{};
  std::size_t size_ = 0;
};

template <class T>
sym_array<T> world::alloc(std::size_t n) {
  return sym_array<T>(*this, n);
}

}  // namespace gpucomm
