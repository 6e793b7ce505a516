#pragma once
// Shared helpers of the GPU tests: the process's test world (in either process mode), per-PE
// launches, CUDA checks, and deterministic data every process can recompute for any PE.
#include <gpucomm/gpucomm.cuh>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#if GPUCOMM_TEST_HAVE_MPI
#include <gpucomm/host/mpi_bootstrap.hpp>
#endif

#include "minimal/minimal_transport.cuh"

namespace gpucomm::test {

inline bool under_mpi() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

/// PEs per GPU in the test world: GPUCOMM_TEST_PES_PER_GPU (default 1). scripts/gpu-round.sh sets
/// it to run every suite with several PEs sharing one GPU.
inline int pes_per_gpu() {
  char const* env = std::getenv("GPUCOMM_TEST_PES_PER_GPU");
  int const n = env ? std::atoi(env) : 1;
  if (n < 1) {
    std::fprintf(stderr, "GPUCOMM_TEST_PES_PER_GPU=%s is not a count >= 1\n", env);
    std::exit(2);
  }
  return n;
}

inline int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

/// The test world's PEs when launched plainly: every visible GPU pes_per_gpu() times, the PEs of a
/// GPU next to each other ({0, 0, 1, 1} for two GPUs and two PEs each).
inline std::vector<int> single_process_devices() {
  std::vector<int> devices;
  for (int d = 0; d < visible_gpus(); ++d)
    for (int k = 0; k < pes_per_gpu(); ++k) devices.push_back(d);
  return devices;
}

// The transport the suites run on, chosen per test binary by GPUCOMM_TEST_TRANSPORT (the build's
// one parameter; the cases ask the type's capabilities and the traits below, never the number):
// 1 NVLinkStore (gpucomm_gpu_tests), 2 IBGDAPost through the NIC model (gpucomm_gpu_tests_ibgda),
// 3 route<NVLinkStore, IBGDAPost> with a forced split: PEs in different halves of the world are not
// allowed load/store, so they go through the NIC model (gpucomm_gpu_tests_route), 4 MinimalStore,
// the test-only transport written against the contract alone (gpucomm_gpu_tests_minimal,
// tests/gpu/minimal), 5 P2PCopy with small stages (gpucomm_gpu_tests_p2p): 3 stages of 256 bytes,
// so that every group of the suite's blocks has staging of its own and large copies cycle through
// the pipeline thousands of times, 6 ProxyQueue with its copy-engine backend
// (gpucomm_gpu_tests_proxy), on rings of 64 commands so that the suite's kernels fill them and wait
// for space, 7 ProxyQueue with its NIC backend through the NIC model (gpucomm_gpu_tests_proxy_nic),
// the same rings: every peer through the NIC, or, with GPUCOMM_TEST_PROXY_SPLIT=1, the route tests'
// forced split (peers in the other half of the world through the NIC, the others by the copy
// engines; every signal and atomic through the NIC), 8 route<NVLinkStore, ProxyQueue> with
// ProxyQueue's engine backend (gpucomm_gpu_tests_route_engine; built only with gpucomm::ucx) and
// the route tests' forced split: load/store within each half, the network engine (UCX) between
// the halves.
#ifndef GPUCOMM_TEST_TRANSPORT
#define GPUCOMM_TEST_TRANSPORT 1
#endif
#if GPUCOMM_TEST_TRANSPORT == 1
using transport_under_test = gpucomm::NVLinkStore;
#elif GPUCOMM_TEST_TRANSPORT == 2
using transport_under_test = gpucomm::IBGDAPost;
#elif GPUCOMM_TEST_TRANSPORT == 3
using transport_under_test = gpucomm::route<gpucomm::NVLinkStore, gpucomm::IBGDAPost>;
#elif GPUCOMM_TEST_TRANSPORT == 4
using transport_under_test = gpucomm::test::MinimalStore;
#elif GPUCOMM_TEST_TRANSPORT == 5
using transport_under_test = gpucomm::BasicP2PCopy<256, 3>;
#elif GPUCOMM_TEST_TRANSPORT == 6 || GPUCOMM_TEST_TRANSPORT == 7
using transport_under_test = gpucomm::ProxyQueue;
#elif GPUCOMM_TEST_TRANSPORT == 8
using transport_under_test = gpucomm::route<gpucomm::NVLinkStore, gpucomm::ProxyQueue>;
#else
#error "GPUCOMM_TEST_TRANSPORT must be 1 to 8"
#endif
/// ProxyQueue's backend in this build: the NIC through the NIC model (7), or the copy engines (6).
/// One type, two builds: the rest of the suites' choices follow from the type and this.
inline constexpr bool proxy_nic_backend = GPUCOMM_TEST_TRANSPORT == 7;
/// Whether ProxyQueue's network backend is the network engine (8: proxy_network::engine).
inline constexpr bool proxy_engine_backend = GPUCOMM_TEST_TRANSPORT == 8;
/// Whether some peer's data goes through ProxyQueue's network backend (the NIC or the engine),
/// which stages the local buffers it does not reach.
inline constexpr bool proxy_network_backend = proxy_nic_backend || proxy_engine_backend;

// ---- what the cases ask of the transport under test -----------------------------------------------
// Capabilities come from contract.cuh (can_get<transport_under_test>, can_float_add<...>); the
// properties below are the ones that are not capabilities, each defined once from the type.

template <class T>
inline constexpr bool is_route = false;
template <class... Legs>
inline constexpr bool is_route<gpucomm::route<Legs...>> = true;

template <class T, class Leg>
inline constexpr bool has_leg = std::is_same_v<T, Leg>;
template <class... Legs, class Leg>
inline constexpr bool has_leg<gpucomm::route<Legs...>, Leg> = (std::is_same_v<Legs, Leg> || ...);

template <class T>
struct nic_model_of {
  using type = std::conditional_t<has_leg<T, gpucomm::IBGDAPost>, gpucomm::IBGDAPost, void>;
};
template <>
struct nic_model_of<gpucomm::ProxyQueue> {
  using type = std::conditional_t<proxy_nic_backend, gpucomm::ProxyQueue, void>;
};
/// The transport whose host half runs the NIC model in this suite (IBGDAPost, alone or as a route's
/// leg; ProxyQueue on its NIC backend), or void.
using nic_model_transport = typename nic_model_of<transport_under_test>::type;
/// Whether operations go through the NIC model, whose faults (nic_model_faults) can be injected.
inline constexpr bool has_nic_model = !std::is_void_v<nic_model_transport>;
/// Whether a host thread moves the data of some operations through the CUDA runtime (ProxyQueue's
/// proxy, the NIC model): main() then loads every kernel at start-up (CUDA_MODULE_LOADING=EAGER),
/// because a kernel's lazy first load waits for the kernels running, and they may wait for that
/// thread, whose CUDA calls wait for the load (docs/guide/collectives.md, host launchers).
inline constexpr bool host_agent = has_leg<transport_under_test, gpucomm::ProxyQueue> || has_nic_model;
/// Operations through the NIC model or the network engine cost tens of microseconds each (a host
/// thread moving bytes with cudaMemcpy, over TCP for the engine): loop-heavy tests divide their
/// round counts by this.
inline constexpr int model_slowdown = has_nic_model || proxy_engine_backend ? 10 : 1;

/// Whether remote() reaches every peer (not only some, as route's does): direct loads and stores.
inline constexpr bool load_store_everywhere = gpucomm::detail::load_stores_everywhere<transport_under_test>;

template <class T>
concept keyed_state = requires(typename T::device_state s) {
  s.keys.rows;
};
template <class T>
concept staging_state = requires(typename T::device_state s) {
  s.staging_slots;
};
/// Whether the device state holds the NIC's remote key table (heap_keys), which a test can corrupt
/// to provoke an error completion (ibgda/bad_key.cuh).
inline constexpr bool has_key_table = keyed_state<transport_under_test>;
/// Whether the device state holds staging slots for the local buffers the NIC does not reach,
/// which a test can read to see which path a put or get took.
inline constexpr bool has_staging_slots = staging_state<transport_under_test>;

template <class T>
inline constexpr bool anywhere_local_buffers = false;
template <>
inline constexpr bool anywhere_local_buffers<gpucomm::NVLinkStore> = true;
template <>
inline constexpr bool anywhere_local_buffers<gpucomm::IBGDAPost> = true;
template <>
inline constexpr bool anywhere_local_buffers<gpucomm::ProxyQueue> = true;
template <std::size_t StageBytes, unsigned Stages, unsigned StoresInFlight, unsigned PrefetchAhead>
inline constexpr bool anywhere_local_buffers<gpucomm::BasicP2PCopy<StageBytes, Stages, StoresInFlight, PrefetchAhead>> =
    true;
template <class... Legs>
inline constexpr bool anywhere_local_buffers<gpucomm::route<Legs...>> = (anywhere_local_buffers<Legs> && ...);
/// Whether puts take their source and gets their destination anywhere a kernel can address (shared
/// memory, a local variable, cudaMalloc'd memory, registered or not) by every group kind and at
/// every size, the subject of ops/local_buffers.cu: every transport (the one local-buffer rule),
/// NVLinkStore's plain loads and stores the reference; not MinimalStore, the tests' own transport
/// of the minimum contract.
inline constexpr bool local_buffers_anywhere = anywhere_local_buffers<transport_under_test>;

/// Whether the group's own threads move put and get data with vector widths chosen by element size
/// (NVLinkStore, MinimalStore), so every element size is a copy path of its own. The other
/// transports move bytes (the NIC, the copy engines, the bulk-copy unit).
inline constexpr bool width_by_element_size =
    std::is_same_v<transport_under_test, gpucomm::NVLinkStore> || std::is_same_v<transport_under_test, MinimalStore>;

/// Whether the suites take every group kind and element type of their rotations (NVLinkStore, the
/// reference and the quickest build) rather than a sample: the code under test is the same on
/// every transport, and a full sample would make the others' builds several times longer.
inline constexpr bool full_sample = std::is_same_v<transport_under_test, gpucomm::NVLinkStore>;

/// Whether the ProxyQueue NIC suite runs the forced split (GPUCOMM_TEST_PROXY_SPLIT=1).
inline bool proxy_split() {
  char const* env = std::getenv("GPUCOMM_TEST_PROXY_SPLIT");
  return env != nullptr && std::string(env) == "1";
}

/// ProxyQueue's options in the test worlds: rings of 64 commands; for the NIC suite, the NIC model
/// for every peer, or for the other half of the world (proxy_split()); for the route-engine suite,
/// the network engine for the other half of the world.
inline gpucomm::proxy_options proxy_test_options() {
  gpucomm::proxy_options o;
  o.log_depth = 6;
  if constexpr (proxy_engine_backend) o.network = gpucomm::proxy_network::engine;
  if constexpr (proxy_nic_backend) {
    o.backends = proxy_split() ? gpucomm::proxy_backends::by_reach : gpucomm::proxy_backends::nic;
    o.nic = gpucomm::nic_choice::model;
  }
  return o;
}

/// The forced split of the route tests: whether PE i may use load/store on PE j.
inline bool same_half(int npes, int i, int j) {
  int const half = (npes + 1) / 2;
  return i / half == j / half;
}

/// Whether the world forces route's split (PEs in different halves of the world not allowed
/// load/store): always for route, and for ProxyQueue's NIC backend with GPUCOMM_TEST_PROXY_SPLIT=1.
inline bool forced_split() {
  if constexpr (is_route<transport_under_test>)
    return true;
  else if constexpr (proxy_nic_backend)
    return proxy_split();
  else
    return false;
}

inline std::unique_ptr<gpucomm::world>& world_slot() {
  static std::unique_ptr<gpucomm::world> w;
  return w;
}

/// The PEs of the world make_world builds in this process's mode.
inline int test_world_npes() {
  return under_mpi() ? std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"))
                     : static_cast<int>(single_process_devices().size());
}

/// Options of the shared test world: 1 GiB of heap per PE, 160 MiB per PE of the world where that
/// is more (above 6 PEs): the largest cases hold two buffers of npes x 64 MiB (P2PCopy's 64 MiB puts
/// and gets). The heap is reserved address space; only what the tests allocate is backed.
inline gpucomm::world_options test_world_options() {
  gpucomm::world_options o;
  o.heap_bytes = std::max(std::size_t{1} << 30, static_cast<std::size_t>(test_world_npes()) * (std::size_t{160} << 20));
  return o;
}

/// The NIC of the test worlds: the NIC model, unless GPUCOMM_NIC says otherwise (GPUCOMM_NIC=hardware
/// runs the suites on a real NIC: docs/guide/ibgda.md, "Running on a real NIC").
inline gpucomm::nic_choice test_nic_choice() {
  char const* nic = std::getenv("GPUCOMM_NIC");
  bool const env_decides = nic != nullptr && *nic != '\0';
  return env_decides ? gpucomm::nic_choice::automatic : gpucomm::nic_choice::model;
}

/// Build a world in this process's mode: under MPI one PE per rank on GPU
/// local_rank / pes_per_gpu(), otherwise pes_per_gpu() PEs on every visible GPU. IBGDAPost goes
/// through the software NIC model (no machine here has a NIC) unless GPUCOMM_NIC names one.
inline std::unique_ptr<gpucomm::world> make_world(gpucomm::world_options options = test_world_options()) {
  std::unique_ptr<gpucomm::world> w;
  if (!options.load_store_filter && forced_split()) {
    int const npes = test_world_npes();
    options.load_store_filter = [npes](int i, int j) { return same_half(npes, i, j); };
  }
#if GPUCOMM_TEST_HAVE_MPI
  if (under_mpi()) {
    char const* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int const device = (local ? std::atoi(local) : 0) / pes_per_gpu();
    w = std::make_unique<gpucomm::world>(gpucomm::mpi_bootstrap(MPI_COMM_WORLD), device, std::move(options));
  }
#endif
  if (!w) w = std::make_unique<gpucomm::world>(single_process_devices(), std::move(options));
  w->configure<gpucomm::IBGDAPost>({.nic = test_nic_choice()});
  w->configure<gpucomm::ProxyQueue>(proxy_test_options());
  return w;
}

/// The world shared by the tests of this process (built on first use).
inline gpucomm::world& the_world() {
  auto& w = world_slot();
  if (!w) w = make_world();
  return *w;
}
inline void release_world() { world_slot().reset(); }

#define GPUCOMM_TEST_CUDA(expr) REQUIRE((expr) == cudaSuccess)

/// Registers Case<transport_under_test>::run as a Catch2 test case where Enabled. Elsewhere the
/// case does not exist (Catch2 neither lists nor runs it) and its body, a member of a class
/// template, is never instantiated: it may use what only the transports it runs on have.
template <bool Enabled, template <class> class Case>
struct case_registrar {
  case_registrar(Catch::NameAndTags const& name_and_tags, Catch::SourceLineInfo const& where) {
    if constexpr (Enabled) {
      [[maybe_unused]] Catch::AutoReg const registered(Catch::makeTestInvoker(&Case<transport_under_test>::run), where,
                                                       Catch::StringRef(), name_and_tags);
    }
  }
};

/// A test case that exists only where `condition` holds, a constant about the transport under test:
/// a capability (gpucomm::can_float_add<gpucomm::test::transport_under_test>) or one of the traits
/// above (gpucomm::test::has_nic_model). Name and tags as TEST_CASE's:
///   GPUCOMM_TEST_CASE_IF(gpucomm::test::load_store_everywhere, "remote(): ...", "[gpu][ops]") { ... }
/// The body is a function template of `Tr`, the transport under test: whatever only the transports
/// the case runs on have is reached through Tr (Tr::device_state, kernel<Tr>), so that it is
/// compiled only where the case exists.
#define GPUCOMM_TEST_CASE_IF(condition, name, tags) \
  GPUCOMM_TEST_CASE_IF_(condition, name, tags, INTERNAL_CATCH_UNIQUE_NAME(gpucomm_test_case_))
#define GPUCOMM_TEST_CASE_IF_(condition, name, tags, Case)                                                    \
  namespace {                                                                                                 \
  template <class Tr>                                                                                         \
  struct Case {                                                                                               \
    static void run();                                                                                        \
  };                                                                                                          \
  gpucomm::test::case_registrar<(condition), Case> const INTERNAL_CATCH_UNIQUE_NAME(gpucomm_test_registrar_){ \
      Catch::NameAndTags{name, tags}, CATCH_INTERNAL_LINEINFO};                                               \
  }                                                                                                           \
  template <class Tr>                                                                                         \
  void Case<Tr>::run()

/// Run f(pe) for every PE this process owns, with that PE's GPU current.
template <class F>
void for_each_local_pe(gpucomm::world& w, F&& f) {
  for (int pe : w.local_pes()) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    f(pe);
  }
}

/// After launching on every local PE: check the launches, wait for all PEs' streams.
inline void finish(gpucomm::world& w) {
  for_each_local_pe(w, [&](int) { GPUCOMM_TEST_CUDA(cudaGetLastError()); });
  w.synchronize();
}

/// The message of the gpucomm::error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (gpucomm::error const& e) {
    return e.what();
  }
  return "(no error)";
}

/// Deterministic 64-bit hash: the data PE `pe` writes at index i in test `salt`. Any process can
/// recompute what any PE wrote, so results are checked against an independent host reference.
inline __host__ __device__ std::uint64_t mix(std::uint64_t salt, std::uint64_t pe, std::uint64_t i) {
  std::uint64_t x = salt * 0x9E3779B97F4A7C15ull ^ (pe + 1) * 0xC2B2AE3D27D4EB4Full ^ (i + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

}  // namespace gpucomm::test
