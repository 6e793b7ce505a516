// The collectives suite (every transport under test): plain aggregates through Boost.PFR
// (aggregate.cuh). Reductions field by field, with one operation for every field and with
// reduction::per_field (nested aggregates and 16-bit float fields included), on every reduction
// collective and form, checked field by field against the host reference of common.cuh; and
// add_fields, field-wise atomic adds from many groups of every PE into every PE, checked exactly.
#include "shapes.cuh"

using namespace gpucomm::test::coll;
namespace cg = cooperative_groups;

namespace {

using spread = reduction::per_field<reduction::sum, reduction::max, reduction::min>;
using nested_ops = reduction::per_field<reduction::per_field<reduction::sum, reduction::max>, reduction::bit_xor>;

}  // namespace

TEST_CASE("aggregates reduce field by field", "[gpu][collectives][aggregate]") {
  auto& w = gpucomm::test::the_world();
  team_set const shapes;
  std::uint64_t salt = 300;
  for (kind k : reductions) {
    for (std::size_t n : test_counts()) {
      team const t = shapes.teams[(salt + n) % shapes.teams.size()];
      int const root = static_cast<int>(n % static_cast<std::size_t>(t.size));
      check_collective<mk_block, stats, spread>({t, k, n, root, {.block_bytes = 256, .parts = 1}, ++salt});
      if constexpr (full_sample) {
        check_collective<mk_tile<32>, nested, nested_ops>({t, k, n, root, {.block_bytes = 384, .parts = 2}, ++salt});
        check_collective<mk_bar64, stats, reduction::sum>({w.team_world(), k, n, 0, {}, ++salt});
      }
    }
  }
}

// ---- add_fields -----------------------------------------------------------------------------------

namespace {

/// Integer fields, one of them a nested aggregate: every transport adds these.
struct tallies {
  unsigned long long bytes;
  int hits;
  struct extent {
    unsigned lo;
    long long hi;
  } span;
};
/// Floating fields: only transports with float add take these.
struct weights {
  float w;
  double d;
  unsigned n;
};

/// What group `g` of PE `pe` adds in iteration `k`: small integers, so that float sums of all of
/// them are exact in any order.
template <class A>
__host__ __device__ A addend(int pe, unsigned g, int k) {
  unsigned const v = 1 + (static_cast<unsigned>(pe) * 7u + g * 3u + static_cast<unsigned>(k)) % 13u;
  if constexpr (std::is_same_v<A, tallies>)
    return {v * 1000000007ull, static_cast<int>(v) - 7, {v, -static_cast<long long>(v) << 33}};
  else
    return {static_cast<float>(v), static_cast<double>(v) / 4, v};
}

template <class A>
__global__ void add_fields_kernel(comm_t c, sym_ptr<A> target, int iters) {
  auto const tile = cg::tiled_partition<32>(cg::this_thread_block());
  unsigned const g = blockIdx.x * (blockDim.x / 32) + tile.meta_group_rank();
  for (int k = 0; k < iters; ++k)
    for (int d = 0; d < c.npes(); ++d)
      gpucomm::add_fields(c, tile, target, addend<A>(c.my_pe(), g, k), (c.my_pe() + d) % c.npes());
  c.quiet(tile);
}

template <class A>
void check_add_fields() {
  auto& w = gpucomm::test::the_world();
  unsigned const blocks = 2, threads = 128, groups = blocks * threads / 32;
  int const iters = 8 / model_slowdown + 1;
  auto target = w.alloc<A>(1);
  fill_all(w, target, A{});
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    add_fields_kernel<A><<<blocks, threads, 0, w.stream(pe)>>>(w.comm<transport_under_test>(pe), target.ptr(pe), iters);
  });
  finish(w);
  w.barrier();
  A want{};
  for (int pe = 0; pe < w.npes(); ++pe)
    for (unsigned g = 0; g < groups; ++g)
      for (int k = 0; k < iters; ++k) {
        A const a = addend<A>(pe, g, k);
        if constexpr (std::is_same_v<A, tallies>) {
          want.bytes += a.bytes, want.hits += a.hits, want.span.lo += a.span.lo, want.span.hi += a.span.hi;
        } else {
          want.w += a.w, want.d += a.d, want.n += a.n;
        }
      }
  for (int pe : w.local_pes()) {
    A const got = download(w, pe, target.ptr(pe), 1)[0];
    INFO("PE " << pe);
    if constexpr (std::is_same_v<A, tallies>) {
      CHECK(got.bytes == want.bytes);
      CHECK(got.hits == want.hits);
      CHECK(got.span.lo == want.span.lo);
      CHECK(got.span.hi == want.span.hi);
    } else {
      CHECK(got.w == want.w);
      CHECK(got.d == want.d);
      CHECK(got.n == want.n);
    }
  }
  w.barrier();
}

}  // namespace

TEST_CASE("add_fields adds every field of an aggregate atomically", "[gpu][collectives][aggregate]") {
  check_add_fields<tallies>();
  if constexpr (gpucomm::can_float_add<transport_under_test>) check_add_fields<weights>();
}
