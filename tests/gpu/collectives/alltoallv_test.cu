// The collectives suite (every transport under test): alltoallv with counts computed on the device
// (some zero, a gap between the blocks of src), on every team shape, with one and two parts, small
// and large workspace blocks (so that one call has pairs in the packet epoch and pairs in steps on
// the load/store transports), element types of 1, 4, 12 and 16 bytes, and three calls back to back
// in one kernel (the packet slots reused); the host launcher, three calls back to back on a stream
// after a kernel that writes the counts, and its refusals; every received element, every count and
// the untouched rest of dst checked against the host's recomputation of the counts.
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

/// A router as a user's would be: writes this member's counts and offsets of every call into device
/// memory, for the host launcher's calls that follow it on the stream.
__global__ void route_kernel(std::size_t* counts, std::size_t* offsets, int me, int size, std::uint64_t salt,
                             std::size_t most, int calls) {
  for (int k = 0; k < calls; ++k)
    for (int r = static_cast<int>(threadIdx.x); r < size; r += static_cast<int>(blockDim.x)) {
      counts[k * max_members + r] = pair_count(salt + k, me, r, most);
      offsets[k * max_members + r] = send_offset(salt + k, me, r, most);
    }
}

/// How the calls are made: from a kernel of ours (M's groups), or by the host launcher.
enum class caller { kernel, launcher };

template <class M, class T = int>
void check_alltoallv(team const& t, std::size_t most, workspace_options wo, std::uint64_t salt, int calls = 1,
                     caller how = caller::kernel) {
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
  auto routed = w.alloc<std::size_t>(static_cast<std::size_t>(2 * max_members * calls));  // the launcher's
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
    if (how == caller::launcher) {
      int const me = t.rank_of(pe);
      std::size_t* const send_counts = routed.ptr(pe).get();
      std::size_t* const send_offsets = send_counts + max_members * calls;
      route_kernel<<<1, 64, 0, w.stream(pe)>>>(send_counts, send_offsets, me, s, salt, most, calls);
      GPUCOMM_TEST_CUDA(cudaGetLastError());
      // The bound picks the launch only: call 1 gives one its pairs exceed (a shape for fewer).
      for (int k = 0; k < calls; ++k)
        gpucomm::alltoallv<transport_under_test>(
            w, ws, pe, dst.ptr(pe).get() + k * stride, counts.ptr(pe).get() + k * max_members,
            received(salt + k, me, s, most), src.ptr(pe).get(), send_counts + k * max_members,
            send_offsets + k * max_members, k == 1 ? most / 8 : most, w.stream(pe));
      return;
    }
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
                             << ") block_bytes=" << wo.block_bytes << " parts=" << wo.parts << " group "
                             << (how == caller::launcher ? "host launcher" : M::name) << " element bytes " << sizeof(T)
                             << " call " << k << " of " << calls << ": PE " << pe << ", " << bad << " wrong");
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

TEST_CASE("alltoallv from the host launcher, counts written by a kernel before it", "[gpu][collectives][alltoallv]") {
  auto& w = gpucomm::test::the_world();
  team_set const set;
  std::uint64_t salt = 1300;
  for (team const& t : set.teams) {
    // Pairs in the packet epoch and pairs in steps, each launch shaped for its bound.
    for (std::size_t most : {std::size_t{1}, std::size_t{37}, 1000 / static_cast<std::size_t>(model_slowdown)}) {
      check_alltoallv<mk_block>(t, most, {.block_bytes = 256, .parts = 2}, salt++, 3, caller::launcher);
      check_alltoallv<mk_block>(t, most, {.block_bytes = 16 << 10, .parts = 1}, salt++, 3, caller::launcher);
    }
  }
  check_alltoallv<mk_block, triple>(w.team_world(), 300 / static_cast<std::size_t>(model_slowdown),
                                    {.block_bytes = 1000, .parts = 2}, salt++, 3, caller::launcher);
}

TEST_CASE("the alltoallv launcher refuses null counts and overlapping buffers", "[gpu][collectives][errors]") {
  auto& w = gpucomm::test::the_world();
  team_workspace ws(w, w.team_world());
  auto buf = w.alloc<int>(64);
  auto counts = w.alloc<std::size_t>(3 * static_cast<std::size_t>(max_members));
  for (int pe : w.local_pes()) {
    int* const b = buf.ptr(pe).get();
    std::size_t* const c = counts.ptr(pe).get();
    auto const call = [&](int* dst, std::size_t* recv, int const* src, std::size_t const* send) {
      return gpucomm::test::error_of([&] {
        gpucomm::alltoallv<transport_under_test>(w, ws, pe, dst, recv, 32, src, send, c + 2 * max_members, 4,
                                                 w.stream(pe));
      });
    };
    INFO("PE " << pe);
    CHECK_THAT(call(b, c, b + 32, nullptr), Catch::Contains("gpucomm::alltoallv") && Catch::Contains("is null"));
    CHECK_THAT(call(b, nullptr, b + 32, c + max_members), Catch::Contains("is null"));
    CHECK_THAT(call(nullptr, c, b + 32, c + max_members), Catch::Contains("dst is null, for dst_capacity 32"));
    CHECK_THAT(call(b, c, nullptr, c + max_members), Catch::Contains("src is null"));
    CHECK_THAT(call(b, c, b, c + max_members), Catch::Contains("must not overlap"));
  }
  finish(w);
  w.barrier();
}
