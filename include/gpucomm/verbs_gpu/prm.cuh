#pragma once
// mlx5 PRM layer: opcodes, WQE segments, the 64-byte CQE, and builders for each segment.
//
// Layouts follow rdma-core's <infiniband/mlx5dv.h> (the mlx5 "programmer's reference manual" as
// rdma-core exposes it); field names are rdma-core's. Every field of every structure here holds
// the value in *wire order* (big-endian) exactly as the NIC reads it, so a structure can be copied
// into the work queue verbatim. The builders take host-order values and return wire structures;
// the host tests compare each builder byte for byte with rdma-core's own helpers and structs.
//
// Everything in this header is constexpr-friendly, `__host__ __device__`, and needs no CUDA
// runtime: host code (the NIC model, the tests) uses the same builders as the kernels.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "detail/endian.cuh"

namespace gpucomm::verbs_gpu {

// ---- units ----------------------------------------------------------------------------------------

/// Send WQE basic block: the work queue is an array of these; a WQE is 1..4 of them here.
inline constexpr std::uint32_t wqebb_size = 64;
inline constexpr std::uint32_t wqebb_shift = 6;
/// One "DS" (data segment unit): the granule of WQE sizes; ctrl_seg.qpn_ds counts these.
inline constexpr std::uint32_t ds_size = 16;
inline constexpr std::uint32_t ds_per_wqebb = wqebb_size / ds_size;
/// Largest WQE the builders here produce (and the NIC model accepts): 4 WQEBBs = 16 DS.
inline constexpr std::uint32_t max_wqe_wqebbs = 4;
inline constexpr std::uint32_t max_wqe_ds = max_wqe_wqebbs * ds_per_wqebb;
/// Largest send-queue depth (WQEBBs) for which the 16-bit wqe_counter of a CQE is decidable.
inline constexpr std::uint32_t max_sq_depth = 32768;

/// WQEBBs occupied by a WQE of `ds` 16-byte units.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t wqebbs_for_ds(std::uint32_t ds) noexcept {
  return (ds + ds_per_wqebb - 1) / ds_per_wqebb;
}

// ---- opcodes (mlx5dv.h MLX5_OPCODE_*) ----------------------------------------------------------

/// Send-WQE opcodes, ctrl_seg.opmod_idx_opcode[7:0].
enum class opcode : std::uint8_t {
  nop = 0x00,
  send_inval = 0x01,
  rdma_write = 0x08,
  rdma_write_imm = 0x09,
  send = 0x0a,
  send_imm = 0x0b,
  rdma_read = 0x10,
  atomic_cs = 0x11,
  atomic_fa = 0x12,
  atomic_masked_cs = 0x14,
  atomic_masked_fa = 0x15,
};

/// ctrl_seg opmod for masked ("extended") atomics: the operand size.
inline constexpr std::uint8_t opmod_ext_atomic_4b = 0x08;
inline constexpr std::uint8_t opmod_ext_atomic_8b = 0x09;

/// ctrl_seg.fm_ce_se bits (mlx5dv.h MLX5_WQE_CTRL_*).
inline constexpr std::uint8_t ctrl_cq_update = 2u << 2;  ///< CE = "always generate a CQE"
inline constexpr std::uint8_t ctrl_solicited = 1u << 1;
/// Fence modes, fm_ce_se[7:5]. rdma-core's IBV_SEND_FENCE emits `ctrl_fence` (value 4).
inline constexpr std::uint8_t ctrl_initiator_small_fence = 1u << 5;
inline constexpr std::uint8_t ctrl_fence_mode_fence = 2u << 5;
inline constexpr std::uint8_t ctrl_strong_ordering = 3u << 5;
inline constexpr std::uint8_t ctrl_fence = 4u << 5;

/// Inline-data segment marker in byte_count (MLX5_INLINE_SEG).
inline constexpr std::uint32_t inline_seg_flag = 0x80000000u;
/// lkey of an empty / terminating data segment (MLX5_INVALID_LKEY).
inline constexpr std::uint32_t invalid_lkey = 0x100;

/// Doorbell-record slots (mlx5dv.h MLX5_RCV_DBR / MLX5_SND_DBR; CQ: set_ci / arm).
inline constexpr int dbr_rcv = 0;
inline constexpr int dbr_snd = 1;
inline constexpr int cq_dbr_set_ci = 0;
inline constexpr int cq_dbr_arm = 1;

// ---- WQE segments -------------------------------------------------------------------------------

/// Control segment, first 16 bytes of every WQE (struct mlx5_wqe_ctrl_seg).
struct alignas(16) ctrl_seg {
  std::uint32_t opmod_idx_opcode;         ///< BE: [31:24] opmod, [23:8] wqe index, [7:0] opcode
  std::uint32_t qpn_ds;                   ///< BE: [31:8] QP number, [5:0] DS
  std::uint8_t signature;                 ///< 0 unless WQ signatures are on
  std::uint8_t dci_stream_channel_id[2];  ///< BE16, 0 for RC
  std::uint8_t fm_ce_se;                  ///< fence mode, completion mode, solicited
  std::uint32_t imm;                      ///< immediate (already in wire order) or 0
};
static_assert(sizeof(ctrl_seg) == 16);
static_assert(offsetof(ctrl_seg, opmod_idx_opcode) == 0);
static_assert(offsetof(ctrl_seg, qpn_ds) == 4);
static_assert(offsetof(ctrl_seg, signature) == 8);
static_assert(offsetof(ctrl_seg, dci_stream_channel_id) == 9);
static_assert(offsetof(ctrl_seg, fm_ce_se) == 11);
static_assert(offsetof(ctrl_seg, imm) == 12);

/// Remote address segment (struct mlx5_wqe_raddr_seg).
struct alignas(16) raddr_seg {
  std::uint64_t raddr;     ///< BE
  std::uint32_t rkey;      ///< BE
  std::uint32_t reserved;  ///< 0
};
static_assert(sizeof(raddr_seg) == 16);
static_assert(offsetof(raddr_seg, raddr) == 0 && offsetof(raddr_seg, rkey) == 8 && offsetof(raddr_seg, reserved) == 12);

/// Scatter/gather pointer segment (struct mlx5_wqe_data_seg).
struct alignas(16) data_seg {
  std::uint32_t byte_count;  ///< BE, bit 31 clear
  std::uint32_t lkey;        ///< BE
  std::uint64_t addr;        ///< BE
};
static_assert(sizeof(data_seg) == 16);
static_assert(offsetof(data_seg, byte_count) == 0 && offsetof(data_seg, lkey) == 4 && offsetof(data_seg, addr) == 8);

/// Header of an inline-data segment (struct mlx5_wqe_inl_data_seg); the payload follows it
/// directly and the segment is padded to a multiple of 16 bytes.
struct inline_seg_header {
  std::uint32_t byte_count;  ///< BE: length | inline_seg_flag
};
static_assert(sizeof(inline_seg_header) == 4);

/// Standard 8-byte atomic operands (struct mlx5_wqe_atomic_seg). FA puts the addend in swap_add.
struct alignas(16) atomic_seg {
  std::uint64_t swap_add;  ///< BE
  std::uint64_t compare;   ///< BE
};
static_assert(sizeof(atomic_seg) == 16);
static_assert(offsetof(atomic_seg, swap_add) == 0 && offsetof(atomic_seg, compare) == 8);

/// Masked fetch-add, 4-byte operand (opmod_ext_atomic_4b). A set bit i in field_boundary stops
/// the carry out of bit i: 0 is an ordinary add, ~0 is XOR.
struct alignas(16) masked_fa32_seg {
  std::uint32_t add_data;        ///< BE
  std::uint32_t field_boundary;  ///< BE
  std::uint64_t reserved;        ///< 0
};
static_assert(sizeof(masked_fa32_seg) == 16);
static_assert(offsetof(masked_fa32_seg, add_data) == 0 && offsetof(masked_fa32_seg, field_boundary) == 4 &&
              offsetof(masked_fa32_seg, reserved) == 8);

/// Masked fetch-add, 8-byte operand (opmod_ext_atomic_8b).
struct alignas(16) masked_fa64_seg {
  std::uint64_t add_data;        ///< BE
  std::uint64_t field_boundary;  ///< BE
};
static_assert(sizeof(masked_fa64_seg) == 16);
static_assert(offsetof(masked_fa64_seg, add_data) == 0 && offsetof(masked_fa64_seg, field_boundary) == 8);

/// Masked compare-and-swap, 4-byte operand: swaps when (old ^ compare) & compare_mask == 0,
/// writing (old & ~swap_mask) | (swap & swap_mask).
struct alignas(16) masked_cs32_seg {
  std::uint32_t swap;          ///< BE
  std::uint32_t compare;       ///< BE
  std::uint32_t swap_mask;     ///< BE
  std::uint32_t compare_mask;  ///< BE
};
static_assert(sizeof(masked_cs32_seg) == 16);
static_assert(offsetof(masked_cs32_seg, swap) == 0 && offsetof(masked_cs32_seg, compare) == 4 &&
              offsetof(masked_cs32_seg, swap_mask) == 8 && offsetof(masked_cs32_seg, compare_mask) == 12);

/// Masked compare-and-swap, 8-byte operand: two segments, values then masks (DS 5 WQE).
struct alignas(16) masked_cs64_data_seg {
  std::uint64_t swap;     ///< BE
  std::uint64_t compare;  ///< BE
};
struct alignas(16) masked_cs64_mask_seg {
  std::uint64_t swap_mask;     ///< BE
  std::uint64_t compare_mask;  ///< BE
};
static_assert(sizeof(masked_cs64_data_seg) == 16 && sizeof(masked_cs64_mask_seg) == 16);
static_assert(offsetof(masked_cs64_data_seg, compare) == 8 && offsetof(masked_cs64_mask_seg, compare_mask) == 8);

/// Any 16-byte segment as four 32-bit words, the unit of the 16-byte vector stores.
struct alignas(16) seg16 {
  std::uint32_t w[4];
};
static_assert(sizeof(seg16) == 16);

// ---- CQE ----------------------------------------------------------------------------------------

/// CQE opcodes, cqe64.op_own[7:4] (mlx5dv.h MLX5_CQE_*).
enum class cqe_opcode : std::uint8_t {
  req = 0,
  resp_wr_imm = 1,
  resp_send = 2,
  resp_send_imm = 3,
  resp_send_inv = 4,
  resize_cq = 5,
  no_packet = 6,
  sig_err = 12,
  req_err = 13,
  resp_err = 14,
  invalid = 15,
};

/// Error syndromes of error CQEs (mlx5dv.h MLX5_CQE_SYNDROME_*).
enum class cqe_syndrome : std::uint8_t {
  local_length_err = 0x01,
  local_qp_op_err = 0x02,
  local_prot_err = 0x04,
  wr_flush_err = 0x05,
  mw_bind_err = 0x06,
  bad_resp_err = 0x10,
  local_access_err = 0x11,
  remote_inval_req_err = 0x12,
  remote_access_err = 0x13,
  remote_op_err = 0x14,
  transport_retry_exc_err = 0x15,
  rnr_retry_exc_err = 0x16,
  remote_aborted_err = 0x22,
};

/// The 64-byte completion queue entry (struct mlx5_cqe64), only the fields a requester or an
/// RDMA-write-with-immediate responder reads; the first 32 bytes are opaque here.
struct alignas(64) cqe64 {
  std::uint8_t rsvd0[32];
  std::uint32_t srqn_uidx;       ///< BE
  std::uint32_t imm_inval_pkey;  ///< BE: immediate of RESP_WR_IMM / RESP_SEND_IMM
  std::uint8_t app;
  std::uint8_t app_op;
  std::uint16_t app_info;      ///< BE
  std::uint32_t byte_cnt;      ///< BE
  std::uint64_t timestamp;     ///< BE
  std::uint32_t sop_drop_qpn;  ///< BE: [31:24] opcode of the SQ WQE, [23:0] QPN
  std::uint16_t wqe_counter;   ///< BE: first WQEBB index (16 bits) of the completed WQE
  std::uint8_t signature;
  std::uint8_t op_own;  ///< [7:4] cqe_opcode, [3:2] format, [1] SE, [0] owner
};
static_assert(sizeof(cqe64) == 64);
static_assert(offsetof(cqe64, srqn_uidx) == 32 && offsetof(cqe64, imm_inval_pkey) == 36 && offsetof(cqe64, app) == 40 &&
              offsetof(cqe64, app_op) == 41 && offsetof(cqe64, app_info) == 42 && offsetof(cqe64, byte_cnt) == 44 &&
              offsetof(cqe64, timestamp) == 48 && offsetof(cqe64, sop_drop_qpn) == 56 &&
              offsetof(cqe64, wqe_counter) == 60 && offsetof(cqe64, signature) == 62 && offsetof(cqe64, op_own) == 63);

/// The same 64 bytes as an error CQE (struct mlx5_err_cqe).
struct alignas(64) err_cqe64 {
  std::uint8_t rsvd0[32];
  std::uint32_t srqn;  ///< BE
  std::uint8_t rsvd1[18];
  std::uint8_t vendor_err_synd;
  std::uint8_t syndrome;           ///< cqe_syndrome
  std::uint32_t s_wqe_opcode_qpn;  ///< BE: [31:24] opcode of the failed WQE, [23:0] QPN
  std::uint16_t wqe_counter;       ///< BE
  std::uint8_t signature;
  std::uint8_t op_own;
};
static_assert(sizeof(err_cqe64) == 64);
static_assert(offsetof(err_cqe64, srqn) == 32 && offsetof(err_cqe64, vendor_err_synd) == 54 &&
              offsetof(err_cqe64, syndrome) == 55 && offsetof(err_cqe64, s_wqe_opcode_qpn) == 56 &&
              offsetof(err_cqe64, wqe_counter) == 60 && offsetof(err_cqe64, signature) == 62 &&
              offsetof(err_cqe64, op_own) == 63);

/// Byte offset of the 32-bit word {wqe_counter, signature, op_own} that pollers load in one go.
inline constexpr std::size_t cqe_tail_word_offset = 60;

/// Fields of the CQE tail word (bytes 60..63 loaded as one little-endian 32-bit value).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint8_t cqe_tail_op_own(std::uint32_t tail) noexcept {
  return static_cast<std::uint8_t>(tail >> 24);
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr cqe_opcode cqe_tail_opcode(std::uint32_t tail) noexcept {
  return static_cast<cqe_opcode>(tail >> 28);
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint16_t cqe_tail_wqe_counter(std::uint32_t tail) noexcept {
  return from_be16(static_cast<std::uint16_t>(tail & 0xffffu));
}
/// The tail word a CQE with these fields has (what the NIC model stores last, in one store).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t make_cqe_tail(std::uint16_t wqe_counter, std::uint8_t signature,
                                                                     std::uint8_t op_own) noexcept {
  return static_cast<std::uint32_t>(to_be16(wqe_counter)) | (static_cast<std::uint32_t>(signature) << 16) |
         (static_cast<std::uint32_t>(op_own) << 24);
}
/// op_own byte for an opcode and owner bit (format 0, no SE).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint8_t make_op_own(cqe_opcode op, unsigned owner) noexcept {
  return static_cast<std::uint8_t>((static_cast<unsigned>(op) << 4) | (owner & 1u));
}

/// Name of a CQE opcode ("REQ", "REQ_ERR", ...), or "UNKNOWN".
GPUCOMM_HD constexpr char const* cqe_opcode_name(cqe_opcode op) noexcept {
  switch (op) {
    case cqe_opcode::req:
      return "REQ";
    case cqe_opcode::resp_wr_imm:
      return "RESP_WR_IMM";
    case cqe_opcode::resp_send:
      return "RESP_SEND";
    case cqe_opcode::resp_send_imm:
      return "RESP_SEND_IMM";
    case cqe_opcode::resp_send_inv:
      return "RESP_SEND_INV";
    case cqe_opcode::resize_cq:
      return "RESIZE_CQ";
    case cqe_opcode::no_packet:
      return "NO_PACKET";
    case cqe_opcode::sig_err:
      return "SIG_ERR";
    case cqe_opcode::req_err:
      return "REQ_ERR";
    case cqe_opcode::resp_err:
      return "RESP_ERR";
    case cqe_opcode::invalid:
      return "INVALID";
  }
  return "UNKNOWN";
}

/// Name of an error syndrome, as rdma-core spells it after MLX5_CQE_SYNDROME_, or "UNKNOWN".
GPUCOMM_HD constexpr char const* cqe_syndrome_name(std::uint8_t syndrome) noexcept {
  switch (static_cast<cqe_syndrome>(syndrome)) {
    case cqe_syndrome::local_length_err:
      return "LOCAL_LENGTH_ERR";
    case cqe_syndrome::local_qp_op_err:
      return "LOCAL_QP_OP_ERR";
    case cqe_syndrome::local_prot_err:
      return "LOCAL_PROT_ERR";
    case cqe_syndrome::wr_flush_err:
      return "WR_FLUSH_ERR";
    case cqe_syndrome::mw_bind_err:
      return "MW_BIND_ERR";
    case cqe_syndrome::bad_resp_err:
      return "BAD_RESP_ERR";
    case cqe_syndrome::local_access_err:
      return "LOCAL_ACCESS_ERR";
    case cqe_syndrome::remote_inval_req_err:
      return "REMOTE_INVAL_REQ_ERR";
    case cqe_syndrome::remote_access_err:
      return "REMOTE_ACCESS_ERR";
    case cqe_syndrome::remote_op_err:
      return "REMOTE_OP_ERR";
    case cqe_syndrome::transport_retry_exc_err:
      return "TRANSPORT_RETRY_EXC_ERR";
    case cqe_syndrome::rnr_retry_exc_err:
      return "RNR_RETRY_EXC_ERR";
    case cqe_syndrome::remote_aborted_err:
      return "REMOTE_ABORTED_ERR";
  }
  return "UNKNOWN";
}

/// Name of a send-WQE opcode ("RDMA_WRITE", ...), or "UNKNOWN".
GPUCOMM_HD constexpr char const* opcode_name(std::uint8_t op) noexcept {
  switch (static_cast<opcode>(op)) {
    case opcode::nop:
      return "NOP";
    case opcode::send_inval:
      return "SEND_INVAL";
    case opcode::rdma_write:
      return "RDMA_WRITE";
    case opcode::rdma_write_imm:
      return "RDMA_WRITE_IMM";
    case opcode::send:
      return "SEND";
    case opcode::send_imm:
      return "SEND_IMM";
    case opcode::rdma_read:
      return "RDMA_READ";
    case opcode::atomic_cs:
      return "ATOMIC_CS";
    case opcode::atomic_fa:
      return "ATOMIC_FA";
    case opcode::atomic_masked_cs:
      return "ATOMIC_MASKED_CS";
    case opcode::atomic_masked_fa:
      return "ATOMIC_MASKED_FA";
  }
  return "UNKNOWN";
}

// ---- segment builders ---------------------------------------------------------------------------

/// Control segment; same bytes as mlx5dv_set_ctrl_seg(seg, pi, opcode, opmod, qpn, fm_ce_se, ds,
/// signature, imm). `pi` is the WQE's first WQEBB index (wraps at 0xffff); `imm` is in wire order.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr ctrl_seg make_ctrl_seg(std::uint16_t pi, std::uint8_t opcode_value,
                                                                std::uint8_t opmod, std::uint32_t qpn,
                                                                std::uint8_t fm_ce_se, std::uint8_t ds,
                                                                std::uint8_t signature = 0,
                                                                std::uint32_t imm_wire = 0) noexcept {
  ctrl_seg s{};
  s.opmod_idx_opcode =
      to_be32((static_cast<std::uint32_t>(opmod) << 24) | (static_cast<std::uint32_t>(pi) << 8) | opcode_value);
  s.qpn_ds = to_be32((qpn << 8) | ds);
  s.signature = signature;
  s.dci_stream_channel_id[0] = 0;
  s.dci_stream_channel_id[1] = 0;
  s.fm_ce_se = fm_ce_se;
  s.imm = imm_wire;
  return s;
}

/// Remote address segment.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr raddr_seg make_raddr_seg_wire(std::uint64_t raddr,
                                                                       std::uint32_t rkey_wire) noexcept {
  return raddr_seg{to_be64(raddr), rkey_wire, 0};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr raddr_seg make_raddr_seg(std::uint64_t raddr, std::uint32_t rkey) noexcept {
  return make_raddr_seg_wire(raddr, to_be32(rkey));
}

/// Pointer data segment; same bytes as mlx5dv_set_data_seg(seg, length, lkey, addr).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr data_seg make_data_seg_wire(std::uint32_t length, std::uint32_t lkey_wire,
                                                                     std::uint64_t addr) noexcept {
  return data_seg{to_be32(length), lkey_wire, to_be64(addr)};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr data_seg make_data_seg(std::uint32_t length, std::uint32_t lkey,
                                                                std::uint64_t addr) noexcept {
  return make_data_seg_wire(length, to_be32(lkey), addr);
}

/// Standard atomic operands: compare-and-swap.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr atomic_seg make_atomic_cs_seg(std::uint64_t swap,
                                                                       std::uint64_t compare) noexcept {
  return atomic_seg{to_be64(swap), to_be64(compare)};
}
/// Standard atomic operands: fetch-and-add (compare is unused and zero).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr atomic_seg make_atomic_fa_seg(std::uint64_t add) noexcept {
  return atomic_seg{to_be64(add), 0};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr masked_fa32_seg make_masked_fa32_seg(std::uint32_t add,
                                                                              std::uint32_t field_boundary) noexcept {
  return masked_fa32_seg{to_be32(add), to_be32(field_boundary), 0};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr masked_fa64_seg make_masked_fa64_seg(std::uint64_t add,
                                                                              std::uint64_t field_boundary) noexcept {
  return masked_fa64_seg{to_be64(add), to_be64(field_boundary)};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr masked_cs32_seg make_masked_cs32_seg(std::uint32_t swap, std::uint32_t compare,
                                                                              std::uint32_t swap_mask,
                                                                              std::uint32_t compare_mask) noexcept {
  return masked_cs32_seg{to_be32(swap), to_be32(compare), to_be32(swap_mask), to_be32(compare_mask)};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr masked_cs64_data_seg make_masked_cs64_data_seg(
    std::uint64_t swap, std::uint64_t compare) noexcept {
  return masked_cs64_data_seg{to_be64(swap), to_be64(compare)};
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr masked_cs64_mask_seg make_masked_cs64_mask_seg(
    std::uint64_t swap_mask, std::uint64_t compare_mask) noexcept {
  return masked_cs64_mask_seg{to_be64(swap_mask), to_be64(compare_mask)};
}

/// DS taken by an inline-data segment of `len` payload bytes (header included, padded to 16).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t inline_seg_ds(std::uint32_t len) noexcept {
  return (static_cast<std::uint32_t>(sizeof(inline_seg_header)) + len + ds_size - 1) / ds_size;
}

// ---- WQE shapes ---------------------------------------------------------------------------------

/// DS of each RC WQE shape the builders in wqe.cuh produce.
inline constexpr std::uint8_t ds_nop = 1;            ///< ctrl
inline constexpr std::uint8_t ds_rdma = 3;           ///< ctrl + raddr + data (WRITE, WRITE_IMM, READ)
inline constexpr std::uint8_t ds_send = 2;           ///< ctrl + data (SEND, SEND_IMM)
inline constexpr std::uint8_t ds_atomic = 4;         ///< ctrl + raddr + atomic + data
inline constexpr std::uint8_t ds_masked_atomic = 4;  ///< ctrl + raddr + masked seg + data
inline constexpr std::uint8_t ds_masked_cs64 = 5;    ///< ctrl + raddr + 2 masked segs + data

/// Largest inline payload of an RDMA write WQE here: ctrl + raddr + inline seg within
/// max_wqe_ds (220 bytes; 12 bytes fit a DS-3 WQE, 28 bytes a DS-4 one, both one WQEBB).
inline constexpr std::uint32_t max_inline_write = (max_wqe_ds - 2) * ds_size - sizeof(inline_seg_header);
/// DS of an inline RDMA write of `len` bytes.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t inline_write_ds(std::uint32_t len) noexcept {
  return 2 + inline_seg_ds(len);
}
static_assert(inline_write_ds(12) == 3 && inline_write_ds(13) == 4 && inline_write_ds(28) == 4 &&
              inline_write_ds(29) == 5 && inline_write_ds(max_inline_write) == max_wqe_ds);

// ---- doorbell -----------------------------------------------------------------------------------

/// The 8 bytes written to the UAR doorbell register, as one little-endian 64-bit store: the first
/// 8 bytes of a control segment naming the *next free* WQEBB index and the QP (the only fields the
/// NIC inspects on a doorbell). `ds` fills the DS field, which the NIC ignores on a doorbell
/// (rdma-core rings with the last WQE's whole control segment, DS included); a ring repeated for
/// a lost doorbell sets it so that the register's value changes (send_queue::ring_again).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint64_t make_doorbell(std::uint64_t next_index, std::uint32_t qpn,
                                                                     std::uint8_t ds = 0) noexcept {
  return static_cast<std::uint64_t>(to_be32(static_cast<std::uint32_t>(next_index & 0xffffu) << 8)) |
         (static_cast<std::uint64_t>(to_be32((qpn << 8) | (ds & 0x3fu))) << 32);
}
/// Fields of a doorbell value.
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint16_t doorbell_index(std::uint64_t db) noexcept {
  return static_cast<std::uint16_t>(from_be32(static_cast<std::uint32_t>(db)) >> 8);
}
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t doorbell_qpn(std::uint64_t db) noexcept {
  return from_be32(static_cast<std::uint32_t>(db >> 32)) >> 8;
}
static_assert(doorbell_index(make_doorbell(0x12345, 0xabcdef)) == 0x2345 &&
              doorbell_qpn(make_doorbell(0x12345, 0xabcdef)) == 0xabcdef &&
              doorbell_index(make_doorbell(0x12345, 0xabcdef, 7)) == 0x2345 &&
              doorbell_qpn(make_doorbell(0x12345, 0xabcdef, 7)) == 0xabcdef &&
              make_doorbell(0x12345, 0xabcdef, 7) != make_doorbell(0x12345, 0xabcdef));

}  // namespace gpucomm::verbs_gpu
