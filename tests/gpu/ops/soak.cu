// The op suite (every transport under test): the differential soak of issue #19. Random valid
// programs of puts, gets, put_signal / wait_until chains, signals, fetching and non-fetching atomics
// on shared counters, fences, quiets and barriers on the world and on split teams
// (tests/gpu/soak/program.hpp says what valid means) run on every PE, one CTA each, whose lanes
// (warps, or the whole CTA) interpret their op lists; afterwards every byte of every PE's arena,
// every counter and signal word, and every fetched value and wait result is checked against the
// host reference. On the NIC-model transports (IBGDAPost, route, ProxyQueue's NIC backend) the
// model injects faults: delayed doorbells and completions, duplicated and dropped doorbells (which
// the send queues' waits recover by ringing again).
//
// Quick by default (a few thousand ops); long on request:
//   GPUCOMM_SOAK_OPS=N        at least N ops in all (default 3000), in rounds of at most 20000
//   GPUCOMM_SOAK_SEED=S       the seed (default 19); round r runs the program of hash(S, r)
//   GPUCOMM_SOAK_MAX_BYTES=B  largest put / get (default 64 KiB; 1 MiB when N >= 100000)
//   GPUCOMM_SOAK_FAULTS=0     no fault injection
//   GPUCOMM_SOAK_DROP=P       probability of a dropped doorbell (default 0.05)
// Each run prints one line: "gpucomm soak: transport=... pes=... seed=... ops=... faults=...
// mismatches=... seconds=...". A mismatch names the seed, the round, the PE, the offset and the op
// that last wrote it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "../soak/program.hpp"
#include "common.cuh"

using namespace gpucomm::test::ops;
namespace soak = gpucomm::test::soak;

namespace {

using T_ = transport_under_test;
constexpr unsigned block_threads = 128;
constexpr unsigned warp_lanes = block_threads / 32;
/// Element sizes of puts and gets (bit e: e bytes). Only the load/store transports (NVLinkStore,
/// MinimalStore: width_by_element_size) pick their vector width by element size; the NIC, the copy
/// engines and the bulk-copy unit move bytes, and every size is a copy of its own, which made the
/// IBGDAPost TU take over ten minutes to build on the GPU machine (route, through both legs,
/// longer): those take bytes and 8-byte words only (alignments and lengths still vary).
constexpr unsigned soak_elems =
    gpucomm::test::width_by_element_size ? (1u << 1 | 1u << 2 | 1u << 4 | 1u << 8) : (1u << 1 | 1u << 8);

struct soak_args {
  comm_t c;
  sym_ptr<unsigned char> data;
  sym_ptr<std::uint64_t> c64;
  sym_ptr<std::uint32_t> c32;
  sym_ptr<signal_t> sigs;
  std::uint64_t* results;           // local [slots]
  soak::op const* ops;              // local: the lanes' lists, one after another
  std::uint32_t const* lane_begin;  // local [lanes + 1]
  gpucomm::team teams[3];           // by soak::scope: the world, this PE's half, its parity
  unsigned long long* executed;     // local [0]
};

/// g with the lane's staging where the transport takes one (P2PCopy: its bulk-copy paths run).
template <class G, class T = transport_under_test>
__device__ auto staged(G const& g, unsigned slot) {
  if constexpr (takes_staging<T>) {
    extern __shared__ __align__(128) unsigned char dynamic_smem[];
    return gpucomm::with_staging(g, reinterpret_cast<typename T::staging*>(dynamic_smem)[slot]);
  } else {
    return g;
  }
}

// The per-op functions are kept out of line: inlined into the interpreter's one switch, route's two
// legs per op made ptxas take more than 15 minutes on the kernel.
template <class E, class G>
__device__ __noinline__ void copy_as(soak_args const& a, G const& g, soak::op const& o) {
  auto const dst = gpucomm::sym_ptr_cast<E>(a.data + static_cast<std::ptrdiff_t>(o.dst));
  E const* src = reinterpret_cast<E const*>(a.data.get() + o.src);
  auto const sig = a.sigs + static_cast<std::ptrdiff_t>(o.index);
  auto const sop = static_cast<gpucomm::signal_op>(o.aux);
  switch (o.kind) {
    case soak::op_kind::put:
      a.c.put(g, dst, src, o.n, o.pe);
      break;
    case soak::op_kind::put_nbi:
      a.c.put_nbi(g, dst, src, o.n, o.pe);
      break;
    case soak::op_kind::put_signal:
      if constexpr (gpucomm::can_put_signal<T_>) a.c.put_signal(g, dst, src, o.n, sig, o.value, sop, o.pe);
      break;
    case soak::op_kind::put_signal_nbi:
      if constexpr (gpucomm::can_put_signal<T_>) a.c.put_signal_nbi(g, dst, src, o.n, sig, o.value, sop, o.pe);
      break;
    case soak::op_kind::get:
    case soak::op_kind::get_nbi:
      if constexpr (gpucomm::can_get<T_>) {
        E* to = reinterpret_cast<E*>(a.data.get() + o.dst);
        auto const from = gpucomm::sym_ptr_cast<E const>(a.data + static_cast<std::ptrdiff_t>(o.src));
        if (o.kind == soak::op_kind::get)
          a.c.get(g, to, from, o.n, o.pe);
        else
          a.c.get_nbi(g, to, from, o.n, o.pe);
      }
      break;
    default:
      break;
  }
}

template <class W, class G>
__device__ __noinline__ std::uint64_t atomic_as(soak_args const& a, G const& g, soak::op const& o, sym_ptr<W> word) {
  if constexpr (gpucomm::can_atomics<T_>) {
    W const v = static_cast<W>(o.value), c = static_cast<W>(o.compare);
    switch (static_cast<soak::atom>(o.aux)) {
      case soak::atom::fetch_add:
        return a.c.fetch_add(g, word, v, o.pe);
      case soak::atom::add:
        a.c.add(g, word, v, o.pe);
        return 0;
      case soak::atom::fetch_and:
        return a.c.fetch_and(g, word, v, o.pe);
      case soak::atom::fetch_or:
        return a.c.fetch_or(g, word, v, o.pe);
      case soak::atom::fetch_xor:
        return a.c.fetch_xor(g, word, v, o.pe);
      case soak::atom::swap:
        return a.c.swap(g, word, v, o.pe);
      case soak::atom::compare_swap:
        return a.c.compare_swap(g, word, c, v, o.pe);
      case soak::atom::fetch:
        return a.c.fetch(g, word, o.pe);
      case soak::atom::set:
        a.c.set(g, word, v, o.pe);
        return 0;
    }
  }
  return 0;
}

/// One op by group g (the lane's group, or its leader alone); `slot`: the lane's staging.
template <class G>
__device__ __noinline__ void run(soak_args const& a, G const& g, soak::op const& o, unsigned slot) {
  auto const sig = a.sigs + static_cast<std::ptrdiff_t>(o.index);
  switch (o.kind) {
    case soak::op_kind::put:
    case soak::op_kind::put_nbi:
    case soak::op_kind::put_signal:
    case soak::op_kind::put_signal_nbi:
    case soak::op_kind::get:
    case soak::op_kind::get_nbi: {
      auto const sg = staged(g, slot);
      if (o.elem == 1) copy_as<std::uint8_t>(a, sg, o);
      if constexpr ((soak_elems & (1u << 2)) != 0)
        if (o.elem == 2) copy_as<std::uint16_t>(a, sg, o);
      if constexpr ((soak_elems & (1u << 4)) != 0)
        if (o.elem == 4) copy_as<std::uint32_t>(a, sg, o);
      if (o.elem == 8) copy_as<std::uint64_t>(a, sg, o);
      break;
    }
    case soak::op_kind::signal:
      if constexpr (gpucomm::can_signal<T_>) a.c.signal(g, sig, o.value, static_cast<gpucomm::signal_op>(o.aux), o.pe);
      break;
    case soak::op_kind::flag_set:
      if constexpr (gpucomm::can_atomics<T_>) a.c.set(g, sig, static_cast<signal_t>(o.value), o.pe);
      break;
    case soak::op_kind::wait: {
      auto const c = static_cast<gpucomm::cmp>(o.aux);
      signal_t seen;
      if constexpr (gpucomm::group_static_size_v<G> == 1)
        seen = a.c.wait_until(sig, c, o.value);  // the one-thread form
      else
        seen = a.c.wait_until(g, sig, c, o.value);
      if (gpucomm::is_leader(g)) a.results[o.result] = seen;
      break;
    }
    case soak::op_kind::atomic: {
      std::uint64_t const r = o.elem == 8 ? atomic_as(a, g, o, a.c64 + static_cast<std::ptrdiff_t>(o.index))
                                          : atomic_as(a, g, o, a.c32 + static_cast<std::ptrdiff_t>(o.index));
      if (o.result != soak::no_result && gpucomm::is_leader(g)) a.results[o.result] = r;
      break;
    }
    case soak::op_kind::fence:
      a.c.fence(g);
      break;
    case soak::op_kind::quiet:
      a.c.quiet(g);
      break;
    default:
      break;
  }
}

/// One CTA per PE. Warp lanes: each warp interprets its own list; block lane: the CTA one list.
template <soak::lane_kind K>
__global__ void __launch_bounds__(block_threads) soak_kernel(soak_args a) {
  auto const block = cg::this_thread_block();
  unsigned const lane = K == soak::lane_kind::warp ? threadIdx.x / 32 : 0;
  auto const lg = [&] {
    if constexpr (K == soak::lane_kind::warp)
      return cg::tiled_partition<32>(block);
    else
      return block;
  }();
  bool const leader = gpucomm::is_leader(lg);
  unsigned long long executed = 0;
  for (std::uint32_t i = a.lane_begin[lane]; i < a.lane_begin[lane + 1]; ++i) {
    soak::op const o = a.ops[i];
    if (o.kind == soak::op_kind::barrier) {
      // What the lane issued, by either group kind, is complete; then the whole CTA in the barrier.
      if (leader) a.c.quiet(gpucomm::this_thread());
      gpucomm::group_sync(lg);
      a.c.quiet(lg);
      a.c.barrier(block, a.teams[o.aux]);
      if (lane == 0) ++executed;  // one barrier per PE
      continue;
    }
    if (o.group == soak::grp::one) {
      if (leader) run(a, gpucomm::this_thread(), o, lane);
      gpucomm::group_sync(lg);
    } else {
      run(a, lg, o, lane);
    }
    ++executed;
  }
  if (leader) atomicAdd(a.executed, executed);
}

std::uint64_t env_u64(char const* name, std::uint64_t fallback) {
  char const* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long const x = std::strtoull(v, &end, 0);
  if (end == v || *end != '\0') {
    std::fprintf(stderr, "%s=%s is not a number\n", name, v);
    std::exit(2);
  }
  return x;
}
double env_double(char const* name, double fallback) {
  char const* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atof(v);
}

struct round_outcome {
  std::uint64_t executed = 0, planned = 0, mismatches = 0;
  std::string first;
};

/// Runs one program on w and checks it. Collective.
round_outcome run_round(gpucomm::world& w, soak::params const& p,
                        std::vector<std::array<gpucomm::team, 3>> const& teams, std::uint64_t round) {
  round_outcome out;
  soak::program const prog = soak::generate(p);
  std::size_t max_ops = 1, max_results = 1;
  for (int pe = 0; pe < p.npes; ++pe) {
    std::size_t n = 0;
    for (auto const& l : prog.code[static_cast<std::size_t>(pe)]) n += l.size();
    max_ops = std::max(max_ops, n);
    max_results = std::max<std::size_t>(max_results, prog.nresults[static_cast<std::size_t>(pe)]);
  }
  auto data = w.alloc<unsigned char>(p.data_bytes);
  auto c64 = w.alloc<std::uint64_t>(p.n64);
  auto c32 = w.alloc<std::uint32_t>(p.n32);
  auto sigs = w.alloc<signal_t>(p.nsig);
  auto results = w.alloc<std::uint64_t>(max_results);
  auto ops = w.alloc<soak::op>(max_ops);
  auto begins = w.alloc<std::uint32_t>(warp_lanes + 1);
  auto executed = make_counters(w);
  for (int pe : w.local_pes()) {
    auto const q = static_cast<std::size_t>(pe);
    std::vector<soak::op> flat;
    std::vector<std::uint32_t> begin{0};
    for (auto const& l : prog.code[q]) {
      flat.insert(flat.end(), l.begin(), l.end());
      begin.push_back(static_cast<std::uint32_t>(flat.size()));
    }
    std::vector<std::uint64_t> v64, r(max_results, ~std::uint64_t{0});
    std::vector<std::uint32_t> v32;
    std::vector<signal_t> vs;
    for (std::uint32_t i = 0; i < p.n64; ++i) v64.push_back(soak::initial_c64(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.n32; ++i) v32.push_back(soak::initial_c32(p.seed, pe, i));
    for (std::uint32_t i = 0; i < p.nsig; ++i) vs.push_back(soak::initial_sig(p.seed, pe, i));
    upload(w, pe, data.ptr(pe), soak::initial_data(p.seed, pe, p.data_bytes));
    upload(w, pe, c64.ptr(pe), v64);
    upload(w, pe, c32.ptr(pe), v32);
    upload(w, pe, sigs.ptr(pe), vs);
    upload(w, pe, results.ptr(pe), r);
    if (!flat.empty()) upload(w, pe, ops.ptr(pe), flat);
    upload(w, pe, begins.ptr(pe), begin);
    std::uint64_t planned = 0;
    for (std::size_t l = 0; l < prog.code[q].size(); ++l)
      for (auto const& o : prog.code[q][l]) planned += o.kind != soak::op_kind::barrier || l == 0;
    out.planned += planned;
  }
  std::size_t const smem = test_staging_bytes<mk_tile<32>>(block_threads);
  allow_dynamic_smem(w, soak_kernel<soak::lane_kind::warp>, smem);
  allow_dynamic_smem(w, soak_kernel<soak::lane_kind::block>, smem);
  // Both kernels loaded, and their stacks reserved, before any PE starts: PEs of one program run
  // different ones and wait on each other (world::prepare says why). At least 8 KiB of stack, more
  // than any kernel of the suites takes (ptxas reports up to 3.4 KiB; the two differ by a few bytes).
  w.prepare(std::size_t{8192}, soak_kernel<soak::lane_kind::warp>, soak_kernel<soak::lane_kind::block>);
  w.barrier();  // every PE initialised before any PE reaches into another
  for_each_local_pe(w, [&](int pe) {
    auto const& t = teams[static_cast<std::size_t>(pe)];
    soak_args a{w.comm<transport_under_test>(pe),
                data.ptr(pe),
                c64.ptr(pe),
                c32.ptr(pe),
                sigs.ptr(pe),
                results.ptr(pe).get(),
                ops.ptr(pe).get(),
                begins.ptr(pe).get(),
                {t[0], t[1], t[2]},
                executed.ptr(pe).get()};
    if (prog.kinds[static_cast<std::size_t>(pe)] == soak::lane_kind::warp)
      soak_kernel<soak::lane_kind::warp><<<1, block_threads, smem, w.stream(pe)>>>(a);
    else
      soak_kernel<soak::lane_kind::block><<<1, block_threads, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();  // every PE's kernel has finished writing into every other PE
  std::map<int, std::vector<std::uint64_t>> mine;
  for (int pe : w.local_pes()) mine[pe] = download(w, pe, results.ptr(pe), max_results);
  auto const all = gather_pes(w, mine, max_results);  // collective
  std::vector<std::vector<std::uint64_t>> by_pe;
  for (int pe = 0; pe < p.npes; ++pe) {
    auto const first = all.begin() + static_cast<std::ptrdiff_t>(pe) * static_cast<std::ptrdiff_t>(max_results);
    by_pe.emplace_back(first, first + static_cast<std::ptrdiff_t>(prog.nresults[static_cast<std::size_t>(pe)]));
  }
  soak::expected const ex = soak::simulate(prog, by_pe);
  std::string const where = "round " + std::to_string(round) + " (seed " + std::to_string(p.seed) + "): ";
  if (w.is_local(0) && ex.result_mismatches > 0) {  // every process sees all results: count once
    out.mismatches += ex.result_mismatches;
    out.first = where + ex.first_result_mismatch;
  }
  for (int pe : w.local_pes()) {
    auto const r =
        soak::compare_pe(prog, ex, pe, download(w, pe, data.ptr(pe), p.data_bytes), download(w, pe, c64.ptr(pe), p.n64),
                         download(w, pe, c32.ptr(pe), p.n32), download(w, pe, sigs.ptr(pe), p.nsig));
    out.mismatches += r.mismatches;
    if (out.first.empty() && r.mismatches > 0) out.first = where + r.first;
  }
  out.executed = local_counter_sum(w, executed);
  w.barrier();  // nobody frees (collectively) while a peer still checks
  return out;
}

/// The NIC model's counters in this process (zeros for transports without one).
template <class Owner = gpucomm::test::nic_model_transport>
gpucomm::nic_model_stats model_stats([[maybe_unused]] gpucomm::world& w) {
  if constexpr (std::is_void_v<Owner>)
    return {};
  else
    return w.transport_host<Owner>().model_stats();
}

}  // namespace

TEST_CASE("soak: random valid programs of one-sided operations against the host reference", "[gpu][ops][soak]") {
  std::uint64_t const total = env_u64("GPUCOMM_SOAK_OPS", 3000);
  std::uint64_t const seed = env_u64("GPUCOMM_SOAK_SEED", 19);
  std::uint64_t const max_bytes = env_u64("GPUCOMM_SOAK_MAX_BYTES", total >= 100000 ? 1u << 20 : 64u << 10);
  bool const faults = env_u64("GPUCOMM_SOAK_FAULTS", 1) != 0;

  gpucomm::world_options options = gpucomm::test::test_world_options();
  std::uint64_t const data_bytes = std::max<std::uint64_t>(1u << 20, max_bytes * 8);
  options.heap_bytes = static_cast<std::size_t>(data_bytes + (std::uint64_t{64} << 20));
  auto const wp = gpucomm::test::make_world(options);  // collective; the soak's own, with faults
  gpucomm::world& w = *wp;
  gpucomm::nic_model_faults f;
  if (gpucomm::test::has_nic_model && faults) {
    f.doorbell_delay_us = 40;
    f.doorbell_delay_probability = 0.02;
    f.completion_delay_us = 20;
    f.completion_delay_probability = 0.02;
    f.duplicate_doorbell = 0.05;
    f.drop_doorbell = env_double("GPUCOMM_SOAK_DROP", 0.05);
    f.seed = seed;
  }
  w.configure<gpucomm::IBGDAPost>({.nic = gpucomm::nic_choice::model, .qps_per_peer = 0, .model_faults = f});
  gpucomm::proxy_options po = gpucomm::test::proxy_test_options();
  po.model_faults = f;
  w.configure<gpucomm::ProxyQueue>(po);

  int const npes = w.npes();
  gpucomm::team const world_team = w.team_world();
  std::vector<std::array<gpucomm::team, 3>> teams(static_cast<std::size_t>(npes), {world_team, world_team, world_team});
  if (npes >= 2) {
    int const h = (npes + 1) / 2;
    gpucomm::team const lo = w.team_split(world_team, 0, 1, h), hi = w.team_split(world_team, h, 1, npes - h);
    gpucomm::team const even = w.team_split(world_team, 0, 2, (npes + 1) / 2);
    gpucomm::team const odd = w.team_split(world_team, 1, 2, npes / 2);
    for (int pe = 0; pe < npes; ++pe) {
      teams[static_cast<std::size_t>(pe)][1] = pe < h ? lo : hi;
      teams[static_cast<std::size_t>(pe)][2] = pe % 2 == 0 ? even : odd;
    }
  }

  std::uint64_t const per_round = std::min<std::uint64_t>(20000, std::max<std::uint64_t>(total / 2, 1));
  auto const t0 = std::chrono::steady_clock::now();
  std::uint64_t executed = 0, planned = 0, mismatches = 0, rounds = 0;
  std::string first;
  while (planned < total) {
    soak::params p;
    p.npes = npes;
    p.seed = soak::hash64(seed, rounds, 0x50A4);
    p.ops = std::min(per_round, total - planned);
    p.max_bytes = max_bytes;
    p.data_bytes = data_bytes;
    p.warp_lanes = warp_lanes;
    p.elems = soak_elems;
    p.get = gpucomm::can_get<T_>;
    p.atomics = gpucomm::can_atomics<T_>;
    p.signals = gpucomm::can_signal<T_> && gpucomm::can_put_signal<T_>;
    p.teams = npes >= 2;
    round_outcome const r = run_round(w, p, teams, rounds);
    // Planned ops are the same on every process: count them from the program, once.
    std::uint64_t const local_planned = r.planned;
    auto& boot = w.bootstrap();
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(boot.size()) * 3);
    std::uint64_t const mine[3] = {r.executed, local_planned, r.mismatches};
    boot.allgather(mine, sums.data(), sizeof(mine));
    for (std::size_t i = 0; i < sums.size(); i += 3) {
      executed += sums[i];
      planned += sums[i + 1];
      mismatches += sums[i + 2];
    }
    if (first.empty() && !r.first.empty()) {
      first = r.first;
      std::fprintf(stderr, "gpucomm soak: first mismatch: %s\n", first.c_str());
    }
    ++rounds;
  }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto const st = model_stats(w);
  std::uint64_t const local_faults[4] = {st.doorbells_delayed, st.cqes_delayed, st.doorbells_dropped,
                                         st.doorbells_duplicated};
  auto& boot = w.bootstrap();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(boot.size()) * 4);
  boot.allgather(local_faults, all.data(), sizeof(local_faults));
  std::uint64_t fault_kinds[4] = {};
  for (std::size_t i = 0; i < all.size(); ++i) fault_kinds[i % 4] += all[i];
  std::uint64_t const injected = fault_kinds[0] + fault_kinds[1] + fault_kinds[2] + fault_kinds[3];
  if (w.is_local(0)) {
    std::printf(
        "gpucomm soak: transport=%s test_transport=%d pes=%d processes=%d seed=%llu rounds=%llu ops=%llu "
        "faults=%llu (delayed_doorbells=%llu delayed_completions=%llu dropped_doorbells=%llu "
        "duplicated_doorbells=%llu) mismatches=%llu seconds=%.1f\n",
        T_::name, GPUCOMM_TEST_TRANSPORT, npes, boot.size(), static_cast<unsigned long long>(seed),
        static_cast<unsigned long long>(rounds), static_cast<unsigned long long>(executed),
        static_cast<unsigned long long>(injected), static_cast<unsigned long long>(fault_kinds[0]),
        static_cast<unsigned long long>(fault_kinds[1]), static_cast<unsigned long long>(fault_kinds[2]),
        static_cast<unsigned long long>(fault_kinds[3]), static_cast<unsigned long long>(mismatches), seconds);
    std::fflush(stdout);
  }
  INFO("seed " << seed << ", " << npes << " PEs, " << rounds << " rounds; first mismatch: " << first);
  CHECK(mismatches == 0);
  CHECK(executed == planned);  // every lane ran its whole list
  CHECK(planned >= total);
}
