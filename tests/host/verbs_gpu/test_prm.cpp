// verbs_gpu PRM layer against rdma-core: every builder byte for byte equal to what
// <infiniband/mlx5dv.h>'s inline helpers and structs produce, over random inputs.
#include <catch2/catch.hpp>

#if __has_include(<infiniband/mlx5dv.h>)
#include <infiniband/mlx5dv.h>

#include <gpucomm/verbs_gpu/completion_queue.cuh>
#include <gpucomm/verbs_gpu/prm.cuh>
#include <gpucomm/verbs_gpu/wqe.cuh>

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace vg = gpucomm::verbs_gpu;

namespace {

constexpr int kTrials = 4000;

template <class A, class B>
bool same_bytes(A const& a, B const& b) {
  static_assert(sizeof(A) == sizeof(B));
  return std::memcmp(&a, &b, sizeof(A)) == 0;
}

// ---- independent big-endian encoders for segments rdma-core has no struct for --------------------
void put_be32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
void put_be64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}

// A ring of `nbb` WQEBBs and a reference twin, written segment by segment with wrap as rdma-core's
// qp.c does (a segment past the end of the queue continues at the start).
struct ring_pair {
  std::size_t nbb;
  std::vector<std::byte> mine, ref;
  explicit ring_pair(std::size_t n) : nbb(n), mine(n * 64 + 64), ref(n * 64 + 64) {
    // Both start with the same garbage, so bytes the builders must not touch are checked too.
    std::mt19937 g(7);
    for (std::size_t i = 0; i < n * 64; ++i) mine_base()[i] = ref_base()[i] = static_cast<std::byte>(g());
  }
  std::byte* mine_base() { return align(mine.data()); }
  std::byte* ref_base() { return align(ref.data()); }
  static std::byte* align(std::byte* p) {
    auto const v = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<std::byte*>((v + 63) & ~std::uintptr_t{63});
  }
  vg::wqe_slot slot(std::uint64_t index, std::uint32_t qpn, std::uint8_t fm) {
    return vg::wqe_slot{mine_base(), nbb * 64 - 1, index, qpn, fm};
  }
  // Reference segment k of the WQE at `index`.
  void* ref_seg(std::uint64_t index, std::uint32_t k) { return ref_base() + ((index * 64 + k * 16) % (nbb * 64)); }
  bool equal() { return std::memcmp(mine_base(), ref_base(), nbb * 64) == 0; }
};

}  // namespace

TEST_CASE("verbs_gpu constants equal rdma-core's", "[verbs][prm]") {
  using vg::opcode;
  CHECK(static_cast<int>(opcode::nop) == MLX5_OPCODE_NOP);
  CHECK(static_cast<int>(opcode::send_inval) == MLX5_OPCODE_SEND_INVAL);
  CHECK(static_cast<int>(opcode::rdma_write) == MLX5_OPCODE_RDMA_WRITE);
  CHECK(static_cast<int>(opcode::rdma_write_imm) == MLX5_OPCODE_RDMA_WRITE_IMM);
  CHECK(static_cast<int>(opcode::send) == MLX5_OPCODE_SEND);
  CHECK(static_cast<int>(opcode::send_imm) == MLX5_OPCODE_SEND_IMM);
  CHECK(static_cast<int>(opcode::rdma_read) == MLX5_OPCODE_RDMA_READ);
  CHECK(static_cast<int>(opcode::atomic_cs) == MLX5_OPCODE_ATOMIC_CS);
  CHECK(static_cast<int>(opcode::atomic_fa) == MLX5_OPCODE_ATOMIC_FA);
  CHECK(static_cast<int>(opcode::atomic_masked_cs) == MLX5_OPCODE_ATOMIC_MASKED_CS);
  CHECK(static_cast<int>(opcode::atomic_masked_fa) == MLX5_OPCODE_ATOMIC_MASKED_FA);

  using vg::cqe_opcode;
  CHECK(static_cast<int>(cqe_opcode::req) == MLX5_CQE_REQ);
  CHECK(static_cast<int>(cqe_opcode::resp_wr_imm) == MLX5_CQE_RESP_WR_IMM);
  CHECK(static_cast<int>(cqe_opcode::resp_send) == MLX5_CQE_RESP_SEND);
  CHECK(static_cast<int>(cqe_opcode::resp_send_imm) == MLX5_CQE_RESP_SEND_IMM);
  CHECK(static_cast<int>(cqe_opcode::resp_send_inv) == MLX5_CQE_RESP_SEND_INV);
  CHECK(static_cast<int>(cqe_opcode::resize_cq) == MLX5_CQE_RESIZE_CQ);
  CHECK(static_cast<int>(cqe_opcode::no_packet) == MLX5_CQE_NO_PACKET);
  CHECK(static_cast<int>(cqe_opcode::sig_err) == MLX5_CQE_SIG_ERR);
  CHECK(static_cast<int>(cqe_opcode::req_err) == MLX5_CQE_REQ_ERR);
  CHECK(static_cast<int>(cqe_opcode::resp_err) == MLX5_CQE_RESP_ERR);
  CHECK(static_cast<int>(cqe_opcode::invalid) == MLX5_CQE_INVALID);

  using vg::cqe_syndrome;
  CHECK(static_cast<int>(cqe_syndrome::local_length_err) == MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
  CHECK(static_cast<int>(cqe_syndrome::local_qp_op_err) == MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  CHECK(static_cast<int>(cqe_syndrome::local_prot_err) == MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  CHECK(static_cast<int>(cqe_syndrome::wr_flush_err) == MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  CHECK(static_cast<int>(cqe_syndrome::mw_bind_err) == MLX5_CQE_SYNDROME_MW_BIND_ERR);
  CHECK(static_cast<int>(cqe_syndrome::bad_resp_err) == MLX5_CQE_SYNDROME_BAD_RESP_ERR);
  CHECK(static_cast<int>(cqe_syndrome::local_access_err) == MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
  CHECK(static_cast<int>(cqe_syndrome::remote_inval_req_err) == MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
  CHECK(static_cast<int>(cqe_syndrome::remote_access_err) == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  CHECK(static_cast<int>(cqe_syndrome::remote_op_err) == MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  CHECK(static_cast<int>(cqe_syndrome::transport_retry_exc_err) == MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  CHECK(static_cast<int>(cqe_syndrome::rnr_retry_exc_err) == MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
  CHECK(static_cast<int>(cqe_syndrome::remote_aborted_err) == MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);

  CHECK(vg::ctrl_cq_update == MLX5_WQE_CTRL_CQ_UPDATE);
  CHECK(vg::ctrl_solicited == MLX5_WQE_CTRL_SOLICITED);
  CHECK(vg::ctrl_fence == MLX5_WQE_CTRL_FENCE);
  CHECK(vg::ctrl_initiator_small_fence == MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
  CHECK(vg::wqebb_size == MLX5_SEND_WQE_BB);
  CHECK(vg::wqebb_shift == MLX5_SEND_WQE_SHIFT);
  CHECK(vg::inline_seg_flag == MLX5_INLINE_SEG);
  CHECK(vg::invalid_lkey == MLX5_INVALID_LKEY);
  CHECK(vg::dbr_rcv == MLX5_RCV_DBR);
  CHECK(vg::dbr_snd == MLX5_SND_DBR);
}

TEST_CASE("verbs_gpu segment and CQE layouts equal rdma-core's structs", "[verbs][prm]") {
  CHECK(sizeof(vg::ctrl_seg) == sizeof(mlx5_wqe_ctrl_seg));
  CHECK(offsetof(vg::ctrl_seg, opmod_idx_opcode) == offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode));
  CHECK(offsetof(vg::ctrl_seg, qpn_ds) == offsetof(mlx5_wqe_ctrl_seg, qpn_ds));
  CHECK(offsetof(vg::ctrl_seg, signature) == offsetof(mlx5_wqe_ctrl_seg, signature));
  CHECK(offsetof(vg::ctrl_seg, dci_stream_channel_id) == offsetof(mlx5_wqe_ctrl_seg, dci_stream_channel_id));
  CHECK(offsetof(vg::ctrl_seg, fm_ce_se) == offsetof(mlx5_wqe_ctrl_seg, fm_ce_se));
  CHECK(offsetof(vg::ctrl_seg, imm) == offsetof(mlx5_wqe_ctrl_seg, imm));

  CHECK(sizeof(vg::raddr_seg) == sizeof(mlx5_wqe_raddr_seg));
  CHECK(offsetof(vg::raddr_seg, raddr) == offsetof(mlx5_wqe_raddr_seg, raddr));
  CHECK(offsetof(vg::raddr_seg, rkey) == offsetof(mlx5_wqe_raddr_seg, rkey));
  CHECK(offsetof(vg::raddr_seg, reserved) == offsetof(mlx5_wqe_raddr_seg, reserved));

  CHECK(sizeof(vg::data_seg) == sizeof(mlx5_wqe_data_seg));
  CHECK(offsetof(vg::data_seg, byte_count) == offsetof(mlx5_wqe_data_seg, byte_count));
  CHECK(offsetof(vg::data_seg, lkey) == offsetof(mlx5_wqe_data_seg, lkey));
  CHECK(offsetof(vg::data_seg, addr) == offsetof(mlx5_wqe_data_seg, addr));

  CHECK(sizeof(vg::atomic_seg) == sizeof(mlx5_wqe_atomic_seg));
  CHECK(offsetof(vg::atomic_seg, swap_add) == offsetof(mlx5_wqe_atomic_seg, swap_add));
  CHECK(offsetof(vg::atomic_seg, compare) == offsetof(mlx5_wqe_atomic_seg, compare));
  CHECK(sizeof(vg::inline_seg_header) == sizeof(mlx5_wqe_inl_data_seg));

  CHECK(sizeof(vg::cqe64) == sizeof(mlx5_cqe64));
  CHECK(offsetof(vg::cqe64, srqn_uidx) == offsetof(mlx5_cqe64, srqn_uidx));
  CHECK(offsetof(vg::cqe64, imm_inval_pkey) == offsetof(mlx5_cqe64, imm_inval_pkey));
  CHECK(offsetof(vg::cqe64, app) == offsetof(mlx5_cqe64, app));
  CHECK(offsetof(vg::cqe64, app_op) == offsetof(mlx5_cqe64, app_op));
  CHECK(offsetof(vg::cqe64, app_info) == offsetof(mlx5_cqe64, app_info));
  CHECK(offsetof(vg::cqe64, byte_cnt) == offsetof(mlx5_cqe64, byte_cnt));
  CHECK(offsetof(vg::cqe64, timestamp) == offsetof(mlx5_cqe64, timestamp));
  CHECK(offsetof(vg::cqe64, sop_drop_qpn) == offsetof(mlx5_cqe64, sop_drop_qpn));
  CHECK(offsetof(vg::cqe64, wqe_counter) == offsetof(mlx5_cqe64, wqe_counter));
  CHECK(offsetof(vg::cqe64, signature) == offsetof(mlx5_cqe64, signature));
  CHECK(offsetof(vg::cqe64, op_own) == offsetof(mlx5_cqe64, op_own));

  CHECK(sizeof(vg::err_cqe64) == sizeof(mlx5_err_cqe));
  CHECK(offsetof(vg::err_cqe64, srqn) == offsetof(mlx5_err_cqe, srqn));
  CHECK(offsetof(vg::err_cqe64, vendor_err_synd) == offsetof(mlx5_err_cqe, vendor_err_synd));
  CHECK(offsetof(vg::err_cqe64, syndrome) == offsetof(mlx5_err_cqe, syndrome));
  CHECK(offsetof(vg::err_cqe64, s_wqe_opcode_qpn) == offsetof(mlx5_err_cqe, s_wqe_opcode_qpn));
  CHECK(offsetof(vg::err_cqe64, wqe_counter) == offsetof(mlx5_err_cqe, wqe_counter));
  CHECK(offsetof(vg::err_cqe64, signature) == offsetof(mlx5_err_cqe, signature));
  CHECK(offsetof(vg::err_cqe64, op_own) == offsetof(mlx5_err_cqe, op_own));
}

TEST_CASE("verbs_gpu endian helpers equal htobe/betoh", "[verbs][prm]") {
  std::mt19937_64 rng(1);
  for (int i = 0; i < kTrials; ++i) {
    std::uint64_t const v = rng();
    CHECK(vg::to_be16(static_cast<std::uint16_t>(v)) == htobe16(static_cast<std::uint16_t>(v)));
    CHECK(vg::to_be32(static_cast<std::uint32_t>(v)) == htobe32(static_cast<std::uint32_t>(v)));
    CHECK(vg::to_be64(v) == htobe64(v));
    CHECK(vg::from_be32(static_cast<std::uint32_t>(v)) == be32toh(static_cast<std::uint32_t>(v)));
    CHECK(vg::from_be64(v) == be64toh(v));
  }
}

TEST_CASE("verbs_gpu segment builders equal rdma-core byte for byte", "[verbs][prm]") {
  std::mt19937_64 rng(2024);
  for (int i = 0; i < kTrials; ++i) {
    auto const r = rng();
    auto const pi = static_cast<std::uint16_t>(r);
    auto const op = static_cast<std::uint8_t>(r >> 16);
    auto const opmod = static_cast<std::uint8_t>(r >> 24);
    auto const qpn = static_cast<std::uint32_t>(r >> 32) & 0xffffffu;
    auto const fm = static_cast<std::uint8_t>(r >> 56);
    auto const r2 = rng();
    auto const ds = static_cast<std::uint8_t>(r2 & 0x3f);
    auto const sig = static_cast<std::uint8_t>(r2 >> 8);
    auto const imm = static_cast<std::uint32_t>(r2 >> 32);

    mlx5_wqe_ctrl_seg ref_ctrl;
    std::memset(&ref_ctrl, 0, sizeof(ref_ctrl));
    mlx5dv_set_ctrl_seg(&ref_ctrl, pi, op, opmod, qpn, fm, ds, sig, imm);
    vg::ctrl_seg const c = vg::make_ctrl_seg(pi, op, opmod, qpn, fm, ds, sig, imm);
    REQUIRE(same_bytes(c, ref_ctrl));

    auto const len = static_cast<std::uint32_t>(rng()) & 0x7fffffffu;
    auto const lkey = static_cast<std::uint32_t>(rng());
    auto const addr = rng();
    mlx5_wqe_data_seg ref_data;
    mlx5dv_set_data_seg(&ref_data, len, lkey, static_cast<std::uintptr_t>(addr));
    REQUIRE(same_bytes(vg::make_data_seg(len, lkey, addr), ref_data));

    auto const raddr = rng();
    auto const rkey = static_cast<std::uint32_t>(rng());
    mlx5_wqe_raddr_seg ref_raddr;  // as qp.c:set_raddr_seg fills it
    ref_raddr.raddr = htobe64(raddr);
    ref_raddr.rkey = htobe32(rkey);
    ref_raddr.reserved = 0;
    REQUIRE(same_bytes(vg::make_raddr_seg(raddr, rkey), ref_raddr));

    auto const swap = rng();
    auto const cmp = rng();
    mlx5_wqe_atomic_seg ref_cs;  // as qp.c:_set_atomic_seg fills it for CMP_AND_SWP
    ref_cs.swap_add = htobe64(swap);
    ref_cs.compare = htobe64(cmp);
    REQUIRE(same_bytes(vg::make_atomic_cs_seg(swap, cmp), ref_cs));
    mlx5_wqe_atomic_seg ref_fa;  // FETCH_AND_ADD: the addend in swap_add
    ref_fa.swap_add = htobe64(cmp);
    ref_fa.compare = 0;
    REQUIRE(same_bytes(vg::make_atomic_fa_seg(cmp), ref_fa));

    // Masked atomics: rdma-core has no struct; compare with an explicit big-endian encoding.
    unsigned char b[16];
    auto const a32 = static_cast<std::uint32_t>(swap), b32 = static_cast<std::uint32_t>(cmp);
    auto const c32 = static_cast<std::uint32_t>(raddr), d32 = static_cast<std::uint32_t>(addr);
    put_be32(b, a32);
    put_be32(b + 4, b32);
    std::memset(b + 8, 0, 8);
    REQUIRE(std::memcmp(b, &static_cast<vg::masked_fa32_seg const&>(vg::make_masked_fa32_seg(a32, b32)), 16) == 0);
    put_be64(b, swap);
    put_be64(b + 8, cmp);
    auto const fa64 = vg::make_masked_fa64_seg(swap, cmp);
    REQUIRE(std::memcmp(b, &fa64, 16) == 0);
    auto const csd = vg::make_masked_cs64_data_seg(swap, cmp);
    REQUIRE(std::memcmp(b, &csd, 16) == 0);
    auto const csm = vg::make_masked_cs64_mask_seg(swap, cmp);
    REQUIRE(std::memcmp(b, &csm, 16) == 0);
    put_be32(b, a32);
    put_be32(b + 4, b32);
    put_be32(b + 8, c32);
    put_be32(b + 12, d32);
    auto const cs32 = vg::make_masked_cs32_seg(a32, b32, c32, d32);
    REQUIRE(std::memcmp(b, &cs32, 16) == 0);

    // Doorbell: the first 8 bytes of a ctrl segment naming the next WQEBB and the QP.
    mlx5_wqe_ctrl_seg db_ctrl;
    mlx5dv_set_ctrl_seg(&db_ctrl, pi, 0, 0, qpn, 0, 0, 0, 0);
    std::uint64_t ref_db;
    std::memcpy(&ref_db, &db_ctrl, 8);
    REQUIRE(vg::make_doorbell(r2 << 16 | pi, qpn) == ref_db);
    REQUIRE(vg::doorbell_index(ref_db) == pi);
    REQUIRE(vg::doorbell_qpn(ref_db) == qpn);
  }
}

TEST_CASE("verbs_gpu CQE decoding equals rdma-core's accessors", "[verbs][prm]") {
  std::mt19937_64 rng(99);
  for (int i = 0; i < kTrials; ++i) {
    mlx5_cqe64 ref;
    auto* raw = reinterpret_cast<unsigned char*>(&ref);
    for (std::size_t k = 0; k < sizeof(ref); ++k) raw[k] = static_cast<unsigned char>(rng());
    vg::cqe64 mine;
    std::memcpy(&mine, &ref, sizeof(mine));
    std::uint32_t tail;
    std::memcpy(&tail, raw + vg::cqe_tail_word_offset, 4);
    REQUIRE(static_cast<int>(vg::cqe_tail_opcode(tail)) == mlx5dv_get_cqe_opcode(&ref));
    REQUIRE((vg::cqe_tail_op_own(tail) & 1u) == mlx5dv_get_cqe_owner(&ref));
    REQUIRE(vg::cqe_tail_wqe_counter(tail) == be16toh(ref.wqe_counter));
    REQUIRE(vg::make_cqe_tail(be16toh(ref.wqe_counter), ref.signature, ref.op_own) == tail);
    REQUIRE(vg::from_be32(mine.byte_cnt) == be32toh(ref.byte_cnt));
    REQUIRE(vg::from_be32(mine.imm_inval_pkey) == be32toh(ref.imm_inval_pkey));

    mlx5_err_cqe const& ref_err = reinterpret_cast<mlx5_err_cqe const&>(ref);
    vg::err_cqe64 err;
    std::memcpy(&err, &ref, sizeof(err));
    vg::cq_error const e = vg::decode_error_cqe(err);
    REQUIRE(e.syndrome == ref_err.syndrome);
    REQUIRE(e.vendor_syndrome == ref_err.vendor_err_synd);
    REQUIRE(e.wqe_opcode == (be32toh(ref_err.s_wqe_opcode_qpn) >> 24));
    REQUIRE(e.wqe_counter == be16toh(ref_err.wqe_counter));
    REQUIRE(static_cast<int>(e.opcode) == (ref_err.op_own >> 4));
    REQUIRE(vg::cq_error::unpack(e.pack()).pack() == e.pack());
  }
  CHECK(std::strcmp(vg::cqe_syndrome_name(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), "REMOTE_ACCESS_ERR") == 0);
  CHECK(std::strcmp(vg::cqe_syndrome_name(MLX5_CQE_SYNDROME_WR_FLUSH_ERR), "WR_FLUSH_ERR") == 0);
  CHECK(std::strcmp(vg::cqe_syndrome_name(0x77), "UNKNOWN") == 0);
  CHECK(std::strcmp(vg::cqe_opcode_name(vg::cqe_opcode::req_err), "REQ_ERR") == 0);
  CHECK(std::strcmp(vg::opcode_name(MLX5_OPCODE_ATOMIC_MASKED_FA), "ATOMIC_MASKED_FA") == 0);
}

TEST_CASE("verbs_gpu whole-WQE builders equal rdma-core, wrapping past the ring's end", "[verbs][prm][wqe]") {
  std::mt19937_64 rng(5);
  constexpr std::size_t nbb = 8;
  for (int t = 0; t < kTrials; ++t) {
    ring_pair rp(nbb);
    // Indices near and past the 16-bit and ring boundaries: the WQE often starts in the last WQEBB.
    std::uint64_t const index = (t % 3 == 0) ? (0xfff8ull + t % 16) : rng() % (1ull << 40);
    auto const qpn = static_cast<std::uint32_t>(rng()) & 0xffffffu;
    std::uint8_t const fm = (t & 1) ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
    vg::local_buf const l{rng(), static_cast<std::uint32_t>(rng()) & 0x7fffffffu, static_cast<std::uint32_t>(rng())};
    vg::remote_buf const r{rng(), static_cast<std::uint32_t>(rng())};
    auto const v1 = rng(), v2 = rng(), v3 = rng(), v4 = rng();
    auto const imm = static_cast<std::uint32_t>(rng());
    auto const pi = static_cast<std::uint16_t>(index);
    auto* c = static_cast<mlx5_wqe_ctrl_seg*>(rp.ref_seg(index, 0));
    // qp.c zeroes the ctrl segment's second half (signature, dci stream, fm_ce_se) before
    // mlx5dv_set_ctrl_seg-equivalent writes; mlx5dv_set_ctrl_seg itself leaves dci_stream alone.
    std::memset(c, 0, sizeof(*c));
    auto set_raddr = [&](std::uint32_t k) {
      auto* s = static_cast<mlx5_wqe_raddr_seg*>(rp.ref_seg(index, k));
      s->raddr = htobe64(r.addr);
      s->rkey = htobe32(r.rkey);
      s->reserved = 0;
    };
    auto set_data = [&](std::uint32_t k, std::uint32_t len) {
      mlx5dv_set_data_seg(static_cast<mlx5_wqe_data_seg*>(rp.ref_seg(index, k)), len, l.lkey, l.addr);
    };
    auto const s = rp.slot(index, qpn, fm);
    std::uint32_t ds = 0;
    switch (t % 11) {
      case 0:
        ds = vg::build_nop(s);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_NOP, 0, qpn, fm, 1, 0, 0);
        break;
      case 1:
        ds = vg::build_rdma_write(s, l, r);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_RDMA_WRITE, 0, qpn, fm, 3, 0, 0);
        set_raddr(1);
        set_data(2, l.length);
        break;
      case 2:
        ds = vg::build_rdma_write_imm(s, l, r, imm);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_RDMA_WRITE_IMM, 0, qpn, fm, 3, 0, htobe32(imm));
        set_raddr(1);
        set_data(2, l.length);
        break;
      case 3:
        ds = vg::build_rdma_read(s, l, r);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_RDMA_READ, 0, qpn, fm, 3, 0, 0);
        set_raddr(1);
        set_data(2, l.length);
        break;
      case 4:
        ds = vg::build_send(s, l);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_SEND, 0, qpn, fm, 2, 0, 0);
        set_data(1, l.length);
        break;
      case 5:
        ds = vg::build_send_imm(s, l, imm);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_SEND_IMM, 0, qpn, fm, 2, 0, htobe32(imm));
        set_data(1, l.length);
        break;
      case 6: {
        ds = vg::build_atomic_cs(s, l, r, v1, v2);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_CS, 0, qpn, fm, 4, 0, 0);
        set_raddr(1);
        auto* a = static_cast<mlx5_wqe_atomic_seg*>(rp.ref_seg(index, 2));
        a->swap_add = htobe64(v2);
        a->compare = htobe64(v1);
        set_data(3, 8);
        break;
      }
      case 7: {
        ds = vg::build_atomic_fa(s, l, r, v1);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_FA, 0, qpn, fm, 4, 0, 0);
        set_raddr(1);
        auto* a = static_cast<mlx5_wqe_atomic_seg*>(rp.ref_seg(index, 2));
        a->swap_add = htobe64(v1);
        a->compare = 0;
        set_data(3, 8);
        break;
      }
      case 8: {
        ds = vg::build_masked_fa32(s, l, r, static_cast<std::uint32_t>(v1), static_cast<std::uint32_t>(v2));
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_MASKED_FA, 0x08, qpn, fm, 4, 0, 0);
        set_raddr(1);
        auto* p = static_cast<unsigned char*>(rp.ref_seg(index, 2));
        put_be32(p, static_cast<std::uint32_t>(v1));
        put_be32(p + 4, static_cast<std::uint32_t>(v2));
        std::memset(p + 8, 0, 8);
        set_data(3, 4);
        break;
      }
      case 9: {
        ds = vg::build_masked_fa64(s, l, r, v1, v2);
        mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_MASKED_FA, 0x09, qpn, fm, 4, 0, 0);
        set_raddr(1);
        auto* p = static_cast<unsigned char*>(rp.ref_seg(index, 2));
        put_be64(p, v1);
        put_be64(p + 8, v2);
        set_data(3, 8);
        break;
      }
      case 10: {
        if (t & 2) {
          ds = vg::build_masked_cs32(s, l, r, static_cast<std::uint32_t>(v1), static_cast<std::uint32_t>(v2),
                                     static_cast<std::uint32_t>(v3), static_cast<std::uint32_t>(v4));
          mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x08, qpn, fm, 4, 0, 0);
          set_raddr(1);
          auto* p = static_cast<unsigned char*>(rp.ref_seg(index, 2));
          put_be32(p, static_cast<std::uint32_t>(v2));       // swap
          put_be32(p + 4, static_cast<std::uint32_t>(v1));   // compare
          put_be32(p + 8, static_cast<std::uint32_t>(v4));   // swap mask
          put_be32(p + 12, static_cast<std::uint32_t>(v3));  // compare mask
          set_data(3, 4);
        } else {
          ds = vg::build_masked_cs64(s, l, r, v1, v2, v3, v4);
          mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_ATOMIC_MASKED_CS, 0x09, qpn, fm, 5, 0, 0);
          set_raddr(1);
          auto* p = static_cast<unsigned char*>(rp.ref_seg(index, 2));
          put_be64(p, v2);
          put_be64(p + 8, v1);
          auto* q = static_cast<unsigned char*>(rp.ref_seg(index, 3));
          put_be64(q, v4);
          put_be64(q + 8, v3);
          set_data(4, 8);
        }
        break;
      }
    }
    INFO("case " << t % 11 << " index " << index);
    REQUIRE(ds == (be32toh(c->qpn_ds) & 0x3f));
    REQUIRE(rp.equal());
  }
}

TEST_CASE("verbs_gpu inline RDMA write: every length, padding and DS, with wrap", "[verbs][prm][wqe]") {
  std::mt19937_64 rng(11);
  constexpr std::size_t nbb = 8;
  for (std::uint32_t len = 0; len <= vg::max_inline_write; ++len) {
    for (std::uint64_t index :
         {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{7}, std::uint64_t{0xffff}, std::uint64_t{0x1234567}}) {
      ring_pair rp(nbb);
      std::vector<unsigned char> payload(len + 1);
      for (auto& b : payload) b = static_cast<unsigned char>(rng());
      auto const qpn = static_cast<std::uint32_t>(rng()) & 0xffffffu;
      vg::remote_buf const r{rng(), static_cast<std::uint32_t>(rng())};
      std::uint32_t const ds = vg::build_rdma_write_inline(rp.slot(index, qpn, 0), payload.data(), len, r);

      // Reference, as qp.c:set_data_inl_seg lays it out: header, payload wrapping at the queue's
      // end, DS = ctrl + raddr + ALIGN(4 + len, 16) / 16. rdma-core leaves the padding as it was;
      // the builder zeroes it, which the reference writes explicitly.
      std::uint32_t const inl_ds = (4 + len + 15) / 16;
      REQUIRE(ds == 2 + inl_ds);
      std::memset(rp.ref_seg(index, 0), 0, 16);
      mlx5dv_set_ctrl_seg(static_cast<mlx5_wqe_ctrl_seg*>(rp.ref_seg(index, 0)), static_cast<std::uint16_t>(index),
                          MLX5_OPCODE_RDMA_WRITE, 0, qpn, 0, static_cast<std::uint8_t>(2 + inl_ds), 0, 0);
      auto* ra = static_cast<mlx5_wqe_raddr_seg*>(rp.ref_seg(index, 1));
      ra->raddr = htobe64(r.addr);
      ra->rkey = htobe32(r.rkey);
      ra->reserved = 0;
      std::vector<unsigned char> stream(inl_ds * 16, 0);
      mlx5_wqe_inl_data_seg hdr;
      hdr.byte_count = htobe32(len | MLX5_INLINE_SEG);
      std::memcpy(stream.data(), &hdr, 4);
      std::memcpy(stream.data() + 4, payload.data(), len);
      for (std::uint32_t k = 0; k < inl_ds; ++k) std::memcpy(rp.ref_seg(index, 2 + k), stream.data() + 16 * k, 16);
      INFO("len " << len << " index " << index);
      REQUIRE(rp.equal());
      // DS fits the one-WQEBB budgets the notes give: 12 bytes at DS 3, 28 at DS 4.
      if (len <= 12) REQUIRE(ds == 3);
      if (len > 12 && len <= 28) REQUIRE(ds == 4);
    }
  }
}

#endif  // __has_include(<infiniband/mlx5dv.h>)
