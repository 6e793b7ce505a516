// Local buffers anywhere (every transport: the one local-buffer rule): puts from, and gets into, memory outside the
// symmetric heap: shared memory, cudaMalloc'd memory, a local variable, and cudaMalloc'd memory registered with
// world::register_buffer, from 1 byte to 16 MiB, by a whole block, by warps and by single threads at once (each group
// with its own data, so staging slots that mixed groups up would show), every PE to every PE (itself included), as
// put / get, put_nbi / get_nbi with quiet, and put_signal. The puts' targets are checked byte for byte on the host,
// poison around them; the gets' destinations on the device against the pattern the host wrote into the source PE's
// heap, with guard bytes after them (into a local variable: by single threads, and by every group where the transport
// stages it). On IBGDAPost, and on ProxyQueue to the peers its network backend serves, these go inline, staged or
// straight to the NIC (detail/staging.cuh); those suites also check which: staging slots are used for an unregistered
// buffer and untouched for a registered one. NVLinkStore's plain loads and stores are the reference behaviour.
#include <algorithm>
#include <map>

#include "common.cuh"

using namespace gpucomm::test::ops;

// The helpers of the cases below, which exist only where local_buffers_anywhere holds: elsewhere
// nothing references them ([[maybe_unused]]).
namespace {

enum class placement { shared, device, local_variable, registered };
[[maybe_unused]] char const* placement_name(placement p) {
  switch (p) {
    case placement::shared:
      return "shared memory";
    case placement::device:
      return "cudaMalloc'd memory";
    case placement::local_variable:
      return "a local variable";
    default:
      return "a registered buffer";
  }
}

[[maybe_unused]] constexpr std::size_t local_max = 1024;  // the local variable's size
[[maybe_unused]] constexpr std::size_t guard = 16;        // poison checked after every get's destination
[[maybe_unused]] constexpr std::uint64_t source_salt = 0x77;

struct lb_args {
  comm_t c;
  sym_ptr<unsigned char> arena;   // [from PE][group][bytes]: what group g of PE `from` puts here
  sym_ptr<unsigned char> source;  // [bytes]: this PE's pattern (the host's), what the others get
  sym_ptr<signal_t> sig;          // put_signal arrivals
  unsigned char* outside;         // [group][stride]: put sources, then [group][stride]: get destinations
  unsigned long long* errors;     // [0] get bytes wrong, [1] guard bytes overwritten
  std::size_t bytes, stride;
  std::uint64_t salt;
  int variant;  // 0: put, get; 1: put_nbi, get_nbi, quiet; 2: put_signal, get
  placement where;
};

/// Whether group gi of `groups` handles target t: one group per (PE, target) pair when there are fewer groups than
/// PEs, else groups / npes of them, each with its own data.
[[maybe_unused]] __host__ __device__ bool handles(unsigned gi, unsigned groups, int me, int t, int npes) {
  auto const offset = static_cast<unsigned>((t + npes - me) % npes);
  return groups < static_cast<unsigned>(npes) ? offset % groups == gi : gi % static_cast<unsigned>(npes) == offset;
}

/// Whether the transport under test stages a local variable for a put or get to PE pe, filling
/// every thread's copy on a get: IBGDAPost always, ProxyQueue where its network backend serves pe.
/// Load/store paths have each thread move its share into its own (the contract promises only a
/// single thread's).
template <class Tr>
__device__ bool stages_to(gpucomm::comm<Tr> const& c, int pe) {
  if constexpr (std::is_same_v<Tr, gpucomm::IBGDAPost>) {
    return true;
  } else if constexpr (std::is_same_v<Tr, gpucomm::ProxyQueue>) {
    return c.state().paths != nullptr && (c.state().paths[pe] & gpucomm::detail::proxy_data_nic) != 0;
  } else {
    (void)c;
    (void)pe;
    return false;
  }
}

template <class M>
__global__ void local_buffers_kernel(lb_args a) {
  extern __shared__ __align__(16) unsigned char tile[];
  unsigned char mine[local_max + guard];  // this thread's own; dynamic indexing keeps it in local memory
  auto const g = M::make();
  unsigned const gi = M::index(), groups = M::per_block();
  unsigned const rank = g.thread_rank(), size = g.num_threads();
  int const me = a.c.my_pe(), npes = a.c.npes();
  std::size_t const n = a.bytes;
  bool const own = a.where == placement::local_variable;  // every thread fills and checks its whole copy
  unsigned char* src = mine;
  unsigned char* dst = mine;
  if (a.where == placement::shared) src = dst = tile + gi * a.stride;
  if (a.where == placement::device || a.where == placement::registered) {
    src = a.outside + gi * a.stride;
    dst = a.outside + (groups + gi) * a.stride;
  }
  for (std::size_t k = own ? 0 : rank; k < n; k += own ? 1 : size) src[k] = pattern_byte(a.salt + gi, me, k);
  gpucomm::group_sync(g);
  for (int t = 0; t < npes; ++t) {
    if (!handles(gi, groups, me, t, npes)) continue;
    auto const at = a.arena + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(me) * groups + gi) * n);
    if (a.variant == 0) a.c.put(g, at, src, n, t);
    if (a.variant == 1) a.c.put_nbi(g, at, src, n, t);
    if (a.variant == 2) a.c.put_signal(g, at, src, n, a.sig, 1, gpucomm::signal_op::add, t);
  }
  if (a.variant == 1) a.c.quiet(g);  // the sources may be overwritten now
  // A get into a local variable by a group of several threads only where the transport stages it
  // (stages_to).
  for (int t = 0; t < npes; ++t) {
    if (!handles(gi, groups, me, t, npes) || !(!own || size == 1 || stages_to(a.c, t))) continue;
    for (std::size_t k = own ? 0 : rank; k < n + guard; k += own ? 1 : size) dst[k] = poison_byte;
    gpucomm::group_sync(g);
    auto const from = gpucomm::sym_ptr<unsigned char const>(a.source);
    if (a.variant == 1) {
      a.c.get_nbi(g, dst, from, n, t);
      a.c.quiet(g);
    } else {
      a.c.get(g, dst, from, n, t);
    }
    unsigned long long wrong = 0, overwritten = 0;
    for (std::size_t k = own ? 0 : rank; k < n; k += own ? 1 : size) wrong += dst[k] != pattern_byte(source_salt, t, k);
    for (std::size_t k = n + (own ? 0 : rank); k < n + guard; k += own ? 1 : size) overwritten += dst[k] != poison_byte;
    if (wrong != 0) atomicAdd(&a.errors[0], wrong);
    if (overwritten != 0) atomicAdd(&a.errors[1], overwritten);
    gpucomm::group_sync(g);
  }
  if (a.variant == 2) {
    __syncthreads();
    // Every (PE, group) pair that handles this PE sent one put_signal here.
    auto const expected = static_cast<signal_t>(npes) * (groups < static_cast<unsigned>(npes) ? 1 : groups / npes);
    if (threadIdx.x == 0) a.c.wait_until(gpucomm::this_thread(), a.sig, gpucomm::cmp::eq, expected);
  }
}

/// Resets (or reads) the staging slots' control words of local PE pe, between kernels
/// (transports with has_staging_slots); none where the PE has no staging (ProxyQueue without a
/// network backend).
template <class Tr>
std::vector<gpucomm::detail::staging_slot> staging_slots(gpucomm::world& w, int pe, bool reset) {
  auto const state = w.comm<Tr>(pe).state();
  if (state.staging_slots == nullptr) return {};
  std::vector<gpucomm::detail::staging_slot> v(gpucomm::detail::staging_layout::slots);
  std::size_t const bytes = v.size() * sizeof(v[0]);
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
  if (reset) GPUCOMM_TEST_CUDA(cudaMemset(state.staging_slots, 0, bytes));
  GPUCOMM_TEST_CUDA(cudaMemcpy(v.data(), state.staging_slots, bytes, cudaMemcpyDeviceToHost));
  return v;
}

template <class M, class Tr = transport_under_test>
void run_case(placement where, std::size_t bytes, int variant, unsigned block, std::uint64_t salt) {
  auto& w = gpucomm::test::the_world();
  int const npes = w.npes();
  unsigned const groups = M::per_block(block);
  std::size_t const stride = (bytes + guard + 15) / 16 * 16;
  INFO(placement_name(where) << ", " << bytes << " bytes, " << M::name << " (" << groups << " per block), variant "
                             << variant << ", " << npes << " PEs");
  auto arena = w.alloc<unsigned char>(static_cast<std::size_t>(npes) * groups * bytes);
  auto source = w.alloc<unsigned char>(bytes);
  auto sig = w.alloc<signal_t>(1);
  auto errors = make_counters(w);
  std::map<int, unsigned char*> outside;
  std::size_t const outside_bytes = 2 * groups * stride;
  for (int pe : w.local_pes()) {
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(pe)));
    GPUCOMM_TEST_CUDA(cudaMalloc(&outside[pe], outside_bytes));
    fill_bytes(w, pe, outside[pe], poison_byte, outside_bytes);
    if (where == placement::registered) w.register_buffer(pe, outside[pe], outside_bytes);
    fill_bytes(w, pe, arena.ptr(pe).get(), poison_byte, arena.size_bytes());
    upload(w, pe, source.ptr(pe).get(), pattern_arena(source_salt, pe, bytes).data(), bytes);
    fill_bytes(w, pe, sig.ptr(pe).get(), 0, sizeof(signal_t));
    if constexpr (gpucomm::test::has_staging_slots) staging_slots<Tr>(w, pe, true);
  }
  w.barrier();
  std::size_t const smem = where == placement::shared ? groups * stride : 0;
  allow_dynamic_smem(w, local_buffers_kernel<M>, smem);
  for_each_local_pe(w, [&](int pe) {
    lb_args const a{w.comm<transport_under_test>(pe),
                    arena.ptr(pe),
                    source.ptr(pe),
                    sig.ptr(pe),
                    outside[pe],
                    errors.ptr(pe).get(),
                    bytes,
                    stride,
                    salt,
                    variant,
                    where};
    local_buffers_kernel<M><<<1, block, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  for (int pe : w.local_pes()) {
    auto const got = download(w, pe, arena.ptr(pe).get(), arena.size());
    std::size_t bad = 0;
    for (int from = 0; from < npes; ++from) {
      for (unsigned gi = 0; gi < groups; ++gi) {
        bool const sent = handles(gi, groups, from, pe, npes);
        std::size_t const base = (static_cast<std::size_t>(from) * groups + gi) * bytes;
        for (std::size_t k = 0; k < bytes; ++k) {
          bad += got[base + k] != (sent ? pattern_byte(salt + gi, from, k) : poison_byte);
        }
      }
    }
    auto const e = download(w, pe, errors.ptr(pe).get(), errors.size());
    INFO("PE " << pe);
    CHECK(bad == 0);
    CHECK(e[0] == 0);  // a get's destination byte differs from the source PE's pattern
    CHECK(e[1] == 0);  // a get wrote past its destination
    if constexpr (gpucomm::test::has_staging_slots) {
      // Which path the bytes took: the staging slots (each use adds 2 to its lock word, odd while
      // held) serve every get into a buffer the NIC does not reach, and are never used for a
      // registered one. ProxyQueue's split world sends only some peers' data through the NIC, and
      // a group may have none of them: there only that no slot stays held.
      auto const slots = staging_slots<Tr>(w, pe, false);
      bool const used = std::any_of(slots.begin(), slots.end(), [](auto const& s) { return s.lock != 0; });
      bool const held = std::any_of(slots.begin(), slots.end(), [](auto const& s) { return (s.lock & 1) != 0; });
      CHECK_FALSE(held);
      if (!slots.empty() && !gpucomm::test::proxy_split()) CHECK(used == (where != placement::registered));
    }
  }
  for (int pe : w.local_pes()) {
    if (where == placement::registered) w.unregister_buffer(pe, outside[pe]);
    GPUCOMM_TEST_CUDA(cudaFree(outside[pe]));
  }
  w.barrier();
}

[[maybe_unused]] constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

}  // namespace

GPUCOMM_TEST_CASE_IF(gpucomm::test::local_buffers_anywhere,
                     "local buffers in global memory, registered or not, from 1 B to 16 MiB, both ways",
                     "[gpu][ops][put][get][local_buffers]") {
  std::size_t const block_sizes[] = {1, 7, 28, 29, 1000, 64 * KiB, 64 * KiB + 1, 192 * KiB + 3, MiB + 5, 16 * MiB};
  std::size_t const warp_sizes[] = {29, 4099, 64 * KiB + 100};
  std::size_t const thread_sizes[] = {1, 29, 333};
  std::uint64_t salt = 9100;
  for (placement where : {placement::device, placement::registered}) {
    int variant = 0;
    for (std::size_t b : block_sizes) run_case<mk_block>(where, b, variant++ % 3, 256, ++salt);
    for (std::size_t b : warp_sizes) run_case<mk_tile<32>>(where, b, variant++ % 3, 256, ++salt);
    for (std::size_t b : thread_sizes) run_case<mk_single>(where, b, variant++ % 3, 64, ++salt);
  }
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::local_buffers_anywhere,
                     "local buffers in shared memory and in local variables, both ways",
                     "[gpu][ops][put][get][local_buffers]") {
  std::uint64_t salt = 9200;
  int variant = 0;
  for (std::size_t b : {std::size_t{1}, std::size_t{29}, std::size_t{4099}, std::size_t{40000}, 100 * KiB}) {
    run_case<mk_block>(placement::shared, b, variant++ % 3, 256, ++salt);
  }
  for (std::size_t b : {std::size_t{1}, std::size_t{28}, std::size_t{29}, local_max}) {
    run_case<mk_block>(placement::local_variable, b, variant++ % 3, 128, ++salt);
    run_case<mk_tile<32>>(placement::local_variable, b, variant++ % 3, 128, ++salt);
    run_case<mk_single>(placement::local_variable, b, variant++ % 3, 32, ++salt);
  }
}

GPUCOMM_TEST_CASE_IF(gpucomm::test::local_buffers_anywhere,
                     "local buffers: a small staged put and get under compute-sanitizer", "[local_buffers][sanitize]") {
  run_case<mk_block>(placement::device, 70 * KiB, 1, 128, 9300);
  run_case<mk_tile<32>>(placement::shared, 100, 2, 64, 9301);
  run_case<mk_single>(placement::local_variable, 200, 0, 4, 9302);
}
