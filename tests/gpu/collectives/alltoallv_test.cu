// The collectives suite (every transport under test): alltoallv with counts computed on the device
// (some zero, a gap between the blocks of src), on every team shape, with one and two parts, small
// and large workspace blocks; every received element, every count and the untouched rest of dst
// checked against the host's recomputation of the counts.
#include "shapes.cuh"

using namespace gpucomm::test::coll;

namespace {

constexpr int max_members = 64;
constexpr std::size_t gap = 3;  // elements between consecutive blocks of src

/// Elements team rank s sends team rank r: 0 to `most`, a fifth of them 0.
__host__ __device__ inline std::size_t pair_count(std::uint64_t salt, int s, int r, std::size_t most) {
  std::uint64_t const m = mix(salt, static_cast<std::uint64_t>(s), static_cast<std::uint64_t>(r));
  return (m % 5 == 0) ? 0 : static_cast<std::size_t>(m / 5 % (most + 1));
}
/// Where rank s's block for rank r starts in s's src.
__host__ __device__ inline std::size_t send_offset(std::uint64_t salt, int s, int r, std::size_t most) {
  std::size_t at = 0;
  for (int q = 0; q < r; ++q) at += pair_count(salt, s, q, most) + gap;
  return at;
}

struct v_args {
  comm_t c;
  collective_workspace ws;
  int* dst;
  std::size_t* recv_counts;
  std::size_t capacity;
  int const* src;
  std::size_t most;
  std::uint64_t salt;
};

template <class M>
__global__ void alltoallv_kernel(v_args a) {
  __shared__ std::size_t counts[max_members], offsets[max_members];
  auto const g0 = M::make();
  collective_workspace const ws = block_workspace(a.ws);
  int const me = ws.members.rank_of(a.c.my_pe());
  // The counts and offsets, computed on the device as a dispatch kernel would.
  for (int r = static_cast<int>(threadIdx.x); r < ws.members.size; r += static_cast<int>(blockDim.x)) {
    counts[r] = pair_count(a.salt, me, r, a.most);
    offsets[r] = send_offset(a.salt, me, r, a.most);
  }
  __syncthreads();
  if (!M::active() || M::index() != 0) return;
  auto const g = with_test_staging<M>(g0);
  gpucomm::alltoallv(a.c, g, ws, a.dst, a.recv_counts, a.capacity, a.src, counts, offsets);
}

template <class M>
void check_alltoallv(team const& t, std::size_t most, workspace_options wo, std::uint64_t salt) {
  auto& w = gpucomm::test::the_world();
  REQUIRE(t.size <= max_members);
  int const s = t.size;
  std::size_t src_len = 1, capacity = 1;  // the largest any member needs
  for (int q = 0; q < s; ++q) {
    src_len = std::max(src_len, send_offset(salt, q, s, most));
    std::size_t in = 0;
    for (int r = 0; r < s; ++r) in += pair_count(salt, r, q, most);
    capacity = std::max(capacity, in);
  }
  team_workspace ws(w, t, small_steps(wo));
  auto src = w.alloc<int>(src_len);
  auto dst = w.alloc<int>(capacity + guard_elements);
  auto counts = w.alloc<std::size_t>(static_cast<std::size_t>(s));
  for (int pe : w.local_pes()) {
    std::vector<int> in(src_len);
    for (std::size_t i = 0; i < src_len; ++i) in[i] = value_of<int>(salt, pe, i);
    upload(w, pe, src.ptr(pe), in);
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
    fill_bytes(w, pe, counts.ptr(pe).get(), poison_byte, counts.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    if (!t.contains(pe)) return;
    int const q = t.rank_of(pe);
    std::size_t in = 0;  // this member's exact total: the capacity it is given
    for (int r = 0; r < s; ++r) in += pair_count(salt, r, q, most);
    v_args a{w.comm<transport_under_test>(pe),
             ws.view(pe),
             dst.ptr(pe).get(),
             counts.ptr(pe).get(),
             in,
             src.ptr(pe).get(),
             most,
             salt};
    auto kernel = alltoallv_kernel<M>;
    std::size_t const smem = prepare_staging<M>(w, kernel, test_block);
    kernel<<<static_cast<unsigned>(wo.parts), test_block, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  int poison;
  std::memset(&poison, poison_byte, sizeof(int));
  for (int pe : w.local_pes()) {
    if (!t.contains(pe)) continue;
    int const q = t.rank_of(pe);
    auto const got = download(w, pe, dst.ptr(pe), capacity + guard_elements);
    auto const got_counts = download(w, pe, counts.ptr(pe), static_cast<std::size_t>(s));
    std::size_t bad = 0, at = 0;
    for (int r = 0; r < s; ++r) {
      std::size_t const n = pair_count(salt, r, q, most);
      bad += got_counts[static_cast<std::size_t>(r)] != n;
      std::size_t const from = send_offset(salt, r, q, most);
      for (std::size_t i = 0; i < n; ++i) bad += got[at + i] != value_of<int>(salt, t.pe_of(r), from + i);
      at += n;
    }
    for (std::size_t i = at; i < got.size(); ++i) bad += got[i] != poison;
    INFO("alltoallv most=" << most << " team(" << t.start << "," << t.stride << "," << t.size
                           << ") block_bytes=" << wo.block_bytes << " parts=" << wo.parts << " group " << M::name
                           << ": PE " << pe << ", " << bad << " wrong");
    CHECK(bad == 0);
  }
  w.barrier();
}

}  // namespace

TEST_CASE("alltoallv with counts computed on the device, on every team shape", "[gpu][collectives][alltoallv]") {
  team_set const set;
  std::uint64_t salt = 300;
  for (team const& t : set.teams) {
    for (std::size_t most :
         {std::size_t{0}, std::size_t{1}, std::size_t{37}, 1000 / static_cast<std::size_t>(model_slowdown)}) {
      check_alltoallv<mk_block>(t, most, {.block_bytes = 256, .parts = 1}, salt++);
      check_alltoallv<mk_bar64>(t, most, {.block_bytes = 1000, .parts = 2}, salt++);
    }
  }
  auto& w = gpucomm::test::the_world();
  check_alltoallv<mk_tile<32>>(w.team_world(), 20000 / static_cast<std::size_t>(model_slowdown),
                               {.block_bytes = 64 << 10, .parts = 1}, salt++);
}
