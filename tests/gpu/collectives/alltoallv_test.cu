// The collectives suite (every transport under test): alltoallv with counts computed on the device
// (some zero, a gap between the blocks of src), on every team shape, with one and two parts, small
// and large workspace blocks (so that one call has pairs in the packet epoch and pairs in steps on
// the load/store transports), element types of 1, 4, 12 and 16 bytes, and three calls back to back
// in one kernel (the packet slots reused); every received element, every count and the untouched
// rest of dst checked against the host's recomputation of the counts.
#include "shapes.cuh"

using namespace gpucomm::test::coll;

namespace {

constexpr int max_members = 64;
constexpr int max_calls = 3;
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
/// Elements team rank q receives in all: its exact capacity.
__host__ __device__ inline std::size_t received(std::uint64_t salt, int q, int size, std::size_t most) {
  std::size_t in = 0;
  for (int r = 0; r < size; ++r) in += pair_count(salt, r, q, most);
  return in;
}

template <class T>
struct v_args {
  comm_t c;
  collective_workspace ws;
  T* dst;                    // call k's destination at dst + k * stride
  std::size_t* recv_counts;  // call k's at recv_counts + k * max_members
  std::size_t stride;
  T const* src;
  std::size_t most;
  std::uint64_t salt;  // call k's counts: salt + k
  int calls;
};

template <class M, class T>
__global__ void alltoallv_kernel(v_args<T> a) {
  __shared__ std::size_t counts[max_calls][max_members], offsets[max_calls][max_members];
  auto const g0 = M::make();
  collective_workspace const ws = block_workspace(a.ws);
  int const me = ws.members.rank_of(a.c.my_pe());
  // The counts and offsets, computed on the device as a dispatch kernel would.
  for (int k = 0; k < a.calls; ++k)
    for (int r = static_cast<int>(threadIdx.x); r < ws.members.size; r += static_cast<int>(blockDim.x)) {
      counts[k][r] = pair_count(a.salt + k, me, r, a.most);
      offsets[k][r] = send_offset(a.salt + k, me, r, a.most);
    }
  __syncthreads();
  if (!M::active() || M::index() != 0) return;
  auto const g = with_test_staging<M>(g0);
  for (int k = 0; k < a.calls; ++k)
    gpucomm::alltoallv(a.c, g, ws, a.dst + k * a.stride, a.recv_counts + k * max_members,
                       received(a.salt + k, me, ws.members.size, a.most), a.src, counts[k], offsets[k]);
}

template <class M, class T = int>
void check_alltoallv(team const& t, std::size_t most, workspace_options wo, std::uint64_t salt, int calls = 1) {
  auto& w = gpucomm::test::the_world();
  REQUIRE(t.size <= max_members);
  REQUIRE(calls <= max_calls);
  int const s = t.size;
  std::size_t src_len = 1, stride = 1;  // the largest any member and call needs
  for (int k = 0; k < calls; ++k)
    for (int q = 0; q < s; ++q) {
      src_len = std::max(src_len, send_offset(salt + k, q, s, most));
      stride = std::max(stride, received(salt + k, q, s, most) + guard_elements);
    }
  team_workspace ws(w, t, small_steps(wo));
  auto src = w.alloc<T>(src_len);
  auto dst = w.alloc<T>(stride * static_cast<std::size_t>(calls));
  auto counts = w.alloc<std::size_t>(static_cast<std::size_t>(max_members * calls));
  for (int pe : w.local_pes()) {
    auto const in = std::make_unique<T[]>(src_len);
    for (std::size_t i = 0; i < src_len; ++i) in[i] = value_of<T>(salt, pe, i);
    upload(w, pe, src.ptr(pe).get(), in.get(), src_len);
    fill_bytes(w, pe, dst.ptr(pe).get(), poison_byte, dst.size_bytes());
    fill_bytes(w, pe, counts.ptr(pe).get(), poison_byte, counts.size_bytes());
  }
  w.barrier();
  for_each_local_pe(w, [&](int pe) {
    if (!t.contains(pe)) return;
    v_args<T> a{w.comm<transport_under_test>(pe),
                ws.view(pe),
                dst.ptr(pe).get(),
                counts.ptr(pe).get(),
                stride,
                src.ptr(pe).get(),
                most,
                salt,
                calls};
    auto kernel = alltoallv_kernel<M, T>;
    std::size_t const smem = prepare_staging<M>(w, kernel, test_block);
    kernel<<<static_cast<unsigned>(wo.parts), test_block, smem, w.stream(pe)>>>(a);
  });
  finish(w);
  w.barrier();
  T poison;
  std::memset(static_cast<void*>(&poison), poison_byte, sizeof(T));
  for (int pe : w.local_pes()) {
    if (!t.contains(pe)) continue;
    int const q = t.rank_of(pe);
    auto const got = download(w, pe, dst.ptr(pe), stride * static_cast<std::size_t>(calls));
    auto const got_counts = download(w, pe, counts.ptr(pe), static_cast<std::size_t>(max_members * calls));
    for (int k = 0; k < calls; ++k) {
      std::size_t bad = 0, at = static_cast<std::size_t>(k) * stride;
      for (int r = 0; r < s; ++r) {
        std::size_t const n = pair_count(salt + k, r, q, most);
        bad += got_counts[static_cast<std::size_t>(k * max_members + r)] != n;
        std::size_t const from = send_offset(salt + k, r, q, most);
        for (std::size_t i = 0; i < n; ++i) bad += !same_bits(got[at + i], value_of<T>(salt, t.pe_of(r), from + i));
        at += n;
      }
      for (std::size_t i = at; i < static_cast<std::size_t>(k + 1) * stride; ++i) bad += !same_bits(got[i], poison);
      INFO("alltoallv most=" << most << " team(" << t.start << "," << t.stride << "," << t.size
                             << ") block_bytes=" << wo.block_bytes << " parts=" << wo.parts << " group " << M::name
                             << " element bytes " << sizeof(T) << " call " << k << " of " << calls << ": PE " << pe
                             << ", " << bad << " wrong");
      CHECK(bad == 0);
    }
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

TEST_CASE("alltoallv of 1-, 12- and 16-byte elements, three calls back to back in one kernel",
          "[gpu][collectives][alltoallv]") {
  auto& w = gpucomm::test::the_world();
  team const t = w.team_world();
  std::uint64_t salt = 900;
  // 256-byte blocks hold 14 lines after the counts: the calls mix pairs in the packet epoch and
  // pairs in steps (every 12-byte pair goes in steps); 16 KiB blocks take these pairs whole.
  for (std::size_t most : {std::size_t{37}, std::size_t{300} / static_cast<std::size_t>(model_slowdown)}) {
    for (std::size_t block : {std::size_t{256}, std::size_t{16} << 10}) {
      workspace_options const wo{.block_bytes = block, .parts = 2};
      check_alltoallv<mk_block, std::uint8_t>(t, most, wo, salt++, 3);
      check_alltoallv<mk_block, triple>(t, most, wo, salt++, 3);
      check_alltoallv<mk_bar64, stats>(t, most, wo, salt++, 3);
      check_alltoallv<mk_block, int>(t, most, wo, salt++, 3);
    }
  }
}
