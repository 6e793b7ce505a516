// verbs_gpu on the GPU, end to end through the NIC model, on every visible GPU (1, 2 or 4) in one
// process: GPU g posts to QPs whose responder memory lives on GPU (g + 1) % n.
#include <catch2/catch.hpp>

#include <cooperative_groups.h>

#include "model_fixture.cuh"

#include <cstdlib>
#include <memory>
#include <vector>

namespace cg = cooperative_groups;
using namespace verbs_gpu_test;

namespace {

bool skip_under_mpi() {
  // These tests own every visible GPU from one process; under mpirun each rank would repeat them.
  char const* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr;
}

int gpu_count() {
  int n = 0;
  VG_CUDA(cudaGetDeviceCount(&n));
  return n;
}

__host__ __device__ std::uint64_t value_of(std::uint64_t salt, std::uint64_t i) {
  std::uint64_t x = (salt + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

constexpr std::uint64_t poison = 0xdeadbeefdeadbeefull;

// ---- kernels ------------------------------------------------------------------------------------

struct write_builder {
  vg::local_buf src;  // base; WQE i writes word (first + i)
  vg::remote_buf dst;
  std::uint64_t first;
  __device__ std::uint32_t operator()(vg::wqe_slot const& s, std::uint32_t i) const {
    std::uint64_t const w = first + i;
    return vg::build_rdma_write(s, {src.addr + 8 * w, 8, src.lkey}, {dst.addr + 8 * w, dst.rkey});
  }
};

// Every warp posts `batches` batches of 32 writes (one per lane) to QP (global warp % nqp); every
// fourth batch rings, the others defer; then the warp's leader waits for everything (quiet).
__global__ void warps_post_kernel(vg::send_queue const* sqs, int nqp, vg::local_buf src, vg::remote_buf dst,
                                  int batches, vg::status* out) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  int const gw = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  vg::send_queue const sq = sqs[gw % nqp];
  vg::status st = vg::status::ok;
  for (int b = 0; b < batches && st == vg::status::ok; ++b) {
    std::uint64_t const first = (static_cast<std::uint64_t>(gw) * batches + b) * 32;
    vg::post_flags const f = (b % 4 == 3 || b == batches - 1) ? vg::post_flags::none : vg::post_flags::defer_doorbell;
    st = sq.post(warp, 1, 32, write_builder{src, dst, first}, f);
  }
  if (warp.thread_rank() == 0) {
    if (st == vg::status::ok) st = sq.quiet();
    out[gw] = st;
  }
}

// Group batches whose sizes are not multiples of the ring step or the group size: whole blocks
// post `block_n` WQEs, tiles of 8 post `tile_n`; all deferred except the group's last batch.
__global__ void odd_batches_kernel(vg::send_queue sq, vg::local_buf src, vg::remote_buf dst, int block_n, int tile_n,
                                   int rounds, vg::status* out) {
  auto const block = cg::this_thread_block();
  auto const tile = cg::tiled_partition<8>(block);
  std::uint64_t const per_block = static_cast<std::uint64_t>(rounds) * (block_n + (blockDim.x / 8) * tile_n);
  std::uint64_t next = blockIdx.x * per_block;
  vg::status st = vg::status::ok;
  for (int r = 0; r < rounds; ++r) {
    vg::post_flags const f = r == rounds - 1 ? vg::post_flags::none : vg::post_flags::defer_doorbell;
    vg::status const s1 = sq.post(block, 1, block_n, write_builder{src, dst, next}, f);
    if (s1 != vg::status::ok) st = s1;
    next += block_n;
    std::uint64_t const tile_first = next + tile.meta_group_rank() * tile_n;
    vg::status const s2 = sq.post(tile, 1, tile_n, write_builder{src, dst, tile_first}, f);
    if (s2 != vg::status::ok) st = s2;
    next += (blockDim.x / 8) * tile_n;
  }
  block.sync();
  if (block.thread_rank() == 0) {
    vg::status const q = sq.quiet();
    out[blockIdx.x] = st != vg::status::ok ? st : q;
  }
}

// Results of the one-thread, every-opcode kernel.
struct opcode_results {
  vg::status st[16];
  vg::recv_completion imm;
  vg::cq_error err;
  vg::status err_status;
};

// One thread, one WQE at a time, each waited for. `la` is local GPU memory (the requester's
// buffers), `rb` the responder's GPU memory; the layout of both is fixed by the host reference.
__global__ void every_opcode_kernel(vg::send_queue sq, vg::completion_queue recv_cq, vg::local_buf la,
                                    vg::remote_buf rb, opcode_results* res) {
  auto L = [&](int w, std::uint32_t bytes) { return vg::local_buf{la.addr + 8 * w, bytes, la.lkey}; };
  auto R = [&](int w) { return vg::remote_buf{rb.addr + 8 * w, rb.rkey}; };
  auto run = [&](int k, auto&& build, std::uint32_t wqebbs) {
    struct fn_builder {
      decltype(build)& f;
      __device__ std::uint32_t operator()(vg::wqe_slot const& s, std::uint32_t) const { return f(s); }
    };
    std::uint64_t idx = 0;
    vg::status st = sq.post(vg::detail::one_thread{}, wqebbs, 1, fn_builder{build}, vg::post_flags::none, &idx);
    if (st == vg::status::ok) st = sq.wait_complete(idx);
    res->st[k] = st;
  };
  std::uint64_t const* lw = reinterpret_cast<std::uint64_t const*>(la.addr);
  run(
      0, [&](vg::wqe_slot const& s) { return vg::build_rdma_write(s, L(0, 64), R(0)); }, 1);  // rb[0..8) = la[0..8)
  run(
      1, [&](vg::wqe_slot const& s) { return vg::build_rdma_read(s, L(16, 64), R(8)); }, 1);  // la[16..24) = rb[8..16)
  run(
      2, [&](vg::wqe_slot const& s) { return vg::build_rdma_write_inline(s, lw + 1, 20, R(20)); }, 2);  // rb[20..) 20 B
  run(
      3, [&](vg::wqe_slot const& s) { return vg::build_rdma_write_imm(s, L(2, 16), R(24), 0xfeedu); }, 1);
  run(
      4, [&](vg::wqe_slot const& s) { return vg::build_atomic_cs(s, L(30, 8), R(30), lw[40], lw[41]); }, 1);
  run(
      5, [&](vg::wqe_slot const& s) { return vg::build_atomic_fa(s, L(31, 8), R(31), lw[42]); }, 1);
  run(
      6, [&](vg::wqe_slot const& s) { return vg::build_masked_fa64(s, L(32, 8), R(32), lw[43], ~0ull); }, 1);
  run(
      7,
      [&](vg::wqe_slot const& s) {
        return vg::build_masked_fa32(s, L(33, 4), vg::remote_buf{rb.addr + 8 * 33 + 4, rb.rkey},
                                     static_cast<std::uint32_t>(lw[44]), 0u);
      },
      1);
  run(
      8, [&](vg::wqe_slot const& s) { return vg::build_masked_cs64(s, L(34, 8), R(34), 0, lw[45], 0, lw[45]); }, 2);
  run(
      9,
      [&](vg::wqe_slot const& s) {
        return vg::build_masked_cs32(s, L(35, 4), R(35), 0, 0, 0, static_cast<std::uint32_t>(~lw[46]));
      },
      1);
  run(
      10, [&](vg::wqe_slot const& s) { return vg::build_nop(s); }, 1);
  std::uint64_t ci = 0;
  vg::status st = vg::status::pending;
  for (int t = 0; t < 1000000 && st == vg::status::pending; ++t) st = vg::poll_recv_cq(recv_cq, ci, res->imm);
  res->st[11] = st;
  // Bad rkey: an error CQE, reported as an error.
  run(
      12,
      [&](vg::wqe_slot const& s) {
        return vg::build_rdma_write(s, L(0, 8), vg::remote_buf{rb.addr, rb.rkey ^ 0x7000});
      },
      1);
  res->err = sq.last_error();
  res->err_status = sq.post(vg::detail::one_thread{}, 1, 1, vg::detail::nop_builder{});
}

}  // namespace

TEST_CASE("verbs_gpu: many warps post to one QP and to several, rings wrap", "[gpu][verbs]") {
  if (skip_under_mpi()) return;
  int const ngpu = gpu_count();
  REQUIRE(ngpu >= 1);
  for (int nqp : {1, 4}) {
    vm::nic n;
    constexpr int blocks = 8, threads = 128, batches = 12;
    constexpr int warps = blocks * threads / 32;
    constexpr std::size_t words = std::size_t{warps} * batches * 32;
    struct per_gpu {
      std::unique_ptr<device_mem> src, dst, sqs, out;
      std::vector<std::unique_ptr<gpu_qp>> qps;
      vm::memory_key sk, dk;
    };
    std::vector<per_gpu> g(ngpu);
    std::uint32_t const pd = n.alloc_pd();
    for (int d = 0; d < ngpu; ++d) {
      g[d].src = std::make_unique<device_mem>(d, words * 8);
      g[d].dst = std::make_unique<device_mem>(d, words * 8);
      std::vector<std::uint64_t> init(words);
      for (std::size_t i = 0; i < words; ++i) init[i] = value_of(d, i);
      VG_CUDA(cudaMemcpy(g[d].src->ptr, init.data(), words * 8, cudaMemcpyHostToDevice));
      std::vector<std::uint64_t> poisoned(words, poison);
      VG_CUDA(cudaMemcpy(g[d].dst->ptr, poisoned.data(), words * 8, cudaMemcpyHostToDevice));
      g[d].sk = n.register_memory(pd, g[d].src->ptr, words * 8, vm::all_access, nullptr, d);
      g[d].dk = n.register_memory(pd, g[d].dst->ptr, words * 8, vm::all_access, nullptr, d);
    }
    for (int d = 0; d < ngpu; ++d) {
      std::vector<vg::send_queue> sqs;
      for (int q = 0; q < nqp; ++q) {
        g[d].qps.push_back(
            std::make_unique<gpu_qp>(n, pd, d, 8, q % 2 ? vg::cq_mode::owner_bit : vg::cq_mode::collapsed, 4));
        g[d].qps.back()->sq.ring_step = 32;
        n.connect(g[d].qps.back()->qpn, g[d].qps.back()->qpn);  // loopback pair: same PD, peer memory by key
        sqs.push_back(g[d].qps.back()->sq);
      }
      g[d].sqs = std::make_unique<device_mem>(d, sizeof(vg::send_queue) * nqp);
      VG_CUDA(cudaMemcpy(g[d].sqs->ptr, sqs.data(), sizeof(vg::send_queue) * nqp, cudaMemcpyHostToDevice));
      g[d].out = std::make_unique<device_mem>(d, sizeof(vg::status) * warps);
      VG_CUDA(cudaMemset(g[d].out->ptr, 0xff, sizeof(vg::status) * warps));
    }
    n.start();
    for (int d = 0; d < ngpu; ++d) {
      int const peer = (d + 1) % ngpu;
      VG_CUDA(cudaSetDevice(d));
      warps_post_kernel<<<blocks, threads>>>(
          static_cast<vg::send_queue const*>(g[d].sqs->ptr), nqp,
          vg::local_buf{reinterpret_cast<std::uint64_t>(g[d].src->ptr), 8, g[d].sk.lkey},
          vg::remote_buf{reinterpret_cast<std::uint64_t>(g[peer].dst->ptr), g[peer].dk.rkey}, batches,
          static_cast<vg::status*>(g[d].out->ptr));
      VG_CUDA(cudaGetLastError());
    }
    for (int d = 0; d < ngpu; ++d) {
      VG_CUDA(cudaSetDevice(d));
      VG_CUDA(cudaDeviceSynchronize());
    }
    n.stop();
    for (int d = 0; d < ngpu; ++d) {
      std::vector<vg::status> st(warps);
      VG_CUDA(cudaMemcpy(st.data(), g[d].out->ptr, sizeof(vg::status) * warps, cudaMemcpyDeviceToHost));
      for (int w = 0; w < warps; ++w) REQUIRE(st[w] == vg::status::ok);
      int const src_gpu = (d + ngpu - 1) % ngpu;  // who wrote into GPU d's dst
      std::vector<std::uint64_t> got(words);
      VG_CUDA(cudaMemcpy(got.data(), g[d].dst->ptr, words * 8, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < words; ++i) REQUIRE(got[i] == value_of(src_gpu, i));
      for (auto const& q : g[d].qps) {
        auto const c = q->read_counters();
        CHECK(c.error == 0);
        CHECK(c.ready == c.reserved);
        CHECK(c.reserved > 4 * 256 / static_cast<unsigned>(nqp));  // each ring wrapped several times
      }
    }
    CHECK(n.stats().error_cqes == 0);
  }
}

TEST_CASE("verbs_gpu: group batches not a multiple of the batching step are still rung", "[gpu][verbs]") {
  if (skip_under_mpi()) return;
  int const ngpu = gpu_count();
  vm::nic n;
  std::uint32_t const pd = n.alloc_pd();
  constexpr int blocks = 4, threads = 96, rounds = 5, block_n = 37, tile_n = 13;
  constexpr std::size_t per_block = std::size_t{rounds} * (block_n + (threads / 8) * tile_n);
  constexpr std::size_t words = blocks * per_block;
  for (int d = 0; d < ngpu; ++d) {
    int const peer = (d + 1) % ngpu;
    device_mem src(d, words * 8), dst(peer, words * 8), out(d, sizeof(vg::status) * blocks);
    std::vector<std::uint64_t> init(words), poisoned(words, poison);
    for (std::size_t i = 0; i < words; ++i) init[i] = value_of(100 + d, i);
    VG_CUDA(cudaMemcpy(src.ptr, init.data(), words * 8, cudaMemcpyHostToDevice));
    VG_CUDA(cudaMemcpy(dst.ptr, poisoned.data(), words * 8, cudaMemcpyHostToDevice));
    auto const sk = n.register_memory(pd, src.ptr, words * 8, vm::all_access, nullptr, d);
    auto const dk = n.register_memory(pd, dst.ptr, words * 8, vm::all_access, nullptr, peer);
    gpu_qp qp(n, pd, d, 9, vg::cq_mode::collapsed);
    qp.sq.ring_step = 16;
    n.connect(qp.qpn, qp.qpn);
    VG_CUDA(cudaSetDevice(d));
    VG_CUDA(cudaMemset(out.ptr, 0xff, sizeof(vg::status) * blocks));
    n.start();
    odd_batches_kernel<<<blocks, threads>>>(qp.sq, vg::local_buf{reinterpret_cast<std::uint64_t>(src.ptr), 8, sk.lkey},
                                            vg::remote_buf{reinterpret_cast<std::uint64_t>(dst.ptr), dk.rkey}, block_n,
                                            tile_n, rounds, static_cast<vg::status*>(out.ptr));
    VG_CUDA(cudaGetLastError());
    VG_CUDA(cudaDeviceSynchronize());
    n.stop();
    std::vector<vg::status> st(blocks);
    VG_CUDA(cudaMemcpy(st.data(), out.ptr, sizeof(vg::status) * blocks, cudaMemcpyDeviceToHost));
    for (auto s : st) REQUIRE(s == vg::status::ok);
    std::vector<std::uint64_t> got(words);
    VG_CUDA(cudaMemcpy(got.data(), dst.ptr, words * 8, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < words; ++i) REQUIRE(got[i] == init[i]);
    auto const c = qp.read_counters();
    CHECK(c.producer == c.reserved);  // the final batches rang everything
  }
}

TEST_CASE("verbs_gpu: every opcode end to end through the model; error CQEs surface", "[gpu][verbs]") {
  if (skip_under_mpi()) return;
  int const ngpu = gpu_count();
  for (auto mode : {vg::cq_mode::collapsed, vg::cq_mode::owner_bit}) {
    for (int d = 0; d < ngpu; ++d) {
      int const peer = (d + 1) % ngpu;
      vm::nic n;
      std::uint32_t const pd_a = n.alloc_pd(), pd_b = n.alloc_pd();
      constexpr std::size_t W = 64;
      device_mem la(d, W * 8), rb(peer, W * 8), res(d, sizeof(opcode_results));
      std::vector<std::uint64_t> l0(W), r0(W);
      for (std::size_t i = 0; i < W; ++i) {
        l0[i] = value_of(7 + d, i);
        r0[i] = value_of(77 + d, i);
      }
      r0[30] = l0[40];  // the CAS compares equal
      VG_CUDA(cudaMemcpy(la.ptr, l0.data(), W * 8, cudaMemcpyHostToDevice));
      VG_CUDA(cudaMemcpy(rb.ptr, r0.data(), W * 8, cudaMemcpyHostToDevice));
      VG_CUDA(cudaSetDevice(d));
      VG_CUDA(cudaMemset(res.ptr, 0xff, sizeof(opcode_results)));
      auto const lk = n.register_memory(pd_a, la.ptr, W * 8, vm::all_access, nullptr, d);
      auto const rk = n.register_memory(pd_b, rb.ptr, W * 8, vm::all_access, nullptr, peer);
      gpu_recv_cq rcq(n, 3);
      gpu_qp a(n, pd_a, d, 6, mode, 3), b(n, pd_b, peer, 6, mode, 3, rcq.cq.cqn);
      n.connect(a.qpn, b.qpn);
      n.start();
      VG_CUDA(cudaSetDevice(d));
      every_opcode_kernel<<<1, 1>>>(a.sq, rcq.cq, vg::local_buf{reinterpret_cast<std::uint64_t>(la.ptr), 0, lk.lkey},
                                    vg::remote_buf{reinterpret_cast<std::uint64_t>(rb.ptr), rk.rkey},
                                    static_cast<opcode_results*>(res.ptr));
      VG_CUDA(cudaGetLastError());
      VG_CUDA(cudaDeviceSynchronize());
      n.stop();
      opcode_results r{};
      VG_CUDA(cudaMemcpy(&r, res.ptr, sizeof(r), cudaMemcpyDeviceToHost));
      std::vector<std::uint64_t> l(W), rr(W);
      VG_CUDA(cudaMemcpy(l.data(), la.ptr, W * 8, cudaMemcpyDeviceToHost));
      VG_CUDA(cudaMemcpy(rr.data(), rb.ptr, W * 8, cudaMemcpyDeviceToHost));
      for (int k = 0; k <= 11; ++k) {
        INFO("step " << k);
        REQUIRE(r.st[k] == vg::status::ok);
      }
      // Independent host reference of what every step did.
      std::vector<std::uint64_t> el = l0, er = r0;
      for (int i = 0; i < 8; ++i) er[i] = l0[i];                           // WRITE
      for (int i = 0; i < 8; ++i) el[16 + i] = r0[8 + i];                  // READ
      std::memcpy(reinterpret_cast<unsigned char*>(&er[20]), &l0[1], 20);  // inline WRITE, 20 bytes
      er[24] = l0[2];                                                      // WRITE_IMM, 16 bytes
      er[25] = l0[3];
      el[30] = r0[30];  // CAS (equal): old value back, swap stored
      er[30] = l0[41];
      el[31] = r0[31];  // FA
      er[31] = r0[31] + l0[42];
      el[32] = r0[32];  // masked FA 64, boundary ~0: XOR
      er[32] = r0[32] ^ l0[43];
      {  // masked FA 32 on the upper half of word 33
        std::uint32_t hi = static_cast<std::uint32_t>(r0[33] >> 32);
        std::uint32_t const fetched_be = __builtin_bswap32(hi);
        el[33] = (l0[33] & 0xffffffff00000000ull) | fetched_be;
        hi += static_cast<std::uint32_t>(l0[44]);
        er[33] = (r0[33] & 0xffffffffull) | (static_cast<std::uint64_t>(hi) << 32);
      }
      el[34] = r0[34];  // masked CS 64 as OR
      er[34] = r0[34] | l0[45];
      {  // masked CS 32 as AND on the low half of word 35
        std::uint32_t const lo = static_cast<std::uint32_t>(r0[35]);
        el[35] = (l0[35] & 0xffffffff00000000ull) | __builtin_bswap32(lo);
        er[35] = (r0[35] & 0xffffffff00000000ull) | (lo & static_cast<std::uint32_t>(l0[46]));
      }
      for (std::size_t i = 0; i < W; ++i) {
        INFO("word " << i);
        REQUIRE(l[i] == el[i]);
        REQUIRE(rr[i] == er[i]);
      }
      CHECK(r.imm.opcode == vg::cqe_opcode::resp_wr_imm);
      CHECK(r.imm.imm == 0xfeedu);
      CHECK(r.imm.byte_count == 16);
      CHECK(r.st[12] == vg::status::error);
      CHECK(r.err.opcode == vg::cqe_opcode::req_err);
      CHECK(r.err.syndrome == static_cast<std::uint8_t>(vg::cqe_syndrome::remote_access_err));
      CHECK(r.err.wqe_opcode == static_cast<std::uint8_t>(vg::opcode::rdma_write));
      CHECK(r.err_status == vg::status::error);
      CHECK(n.state(a.qpn) == vm::qp_state::error);
    }
  }
}
