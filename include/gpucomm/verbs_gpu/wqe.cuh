#pragma once
// Whole-WQE builders: write one RC work request into its reserved slot of a send-queue ring.
//
// A slot names the ring, the WQE's 64-bit index (its first WQEBB), the QP number and the
// completion flags. Segment k of a WQE lives at ring + ((index * 64 + k * 16) mod ring bytes), so
// a WQE that starts in the ring's last WQEBB continues at WQEBB 0, as the NIC reads it. Every
// segment is written with one 16-byte store; inline payloads are assembled 16 bytes at a time in
// registers. Nothing here is ordered: the send queue's publish step fences before the doorbell.
//
// Keys (lkey, rkey) and addresses are host-order arguments; the builders convert to wire order.
// Each builder returns the WQE's DS; `wqebbs_for_ds(ds)` is what the slot must have reserved.

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "detail/memory.cuh"
#include "prm.cuh"

namespace gpucomm::verbs_gpu {

/// Where one WQE goes. Trivially copyable; made by send_queue::slot().
struct wqe_slot {
  std::byte* ring = nullptr;    ///< the SQ buffer (depth * 64 bytes, 64-byte aligned)
  std::uint64_t ring_mask = 0;  ///< ring bytes - 1 (ring bytes a power of two)
  std::uint64_t index = 0;      ///< first WQEBB of this WQE (64-bit, monotonic)
  std::uint32_t qpn = 0;        ///< QP number, 24 bits
  std::uint8_t fm_ce_se = 0;    ///< ctrl_cq_update to ask for a CQE, fence bits, ...

  /// Address of 16-byte segment k of this WQE (wrapping at the ring's end).
  GPUCOMM_HD GPUCOMM_FORCEINLINE void* seg(std::uint32_t k) const noexcept {
    return ring + ((index * wqebb_size + static_cast<std::uint64_t>(k) * ds_size) & ring_mask);
  }
  /// Stores segment k.
  template <class Seg>
  GPUCOMM_HD GPUCOMM_FORCEINLINE void put(std::uint32_t k, Seg const& s) const noexcept {
    detail::store16(seg(k), detail::as_seg16(s));
  }
  /// The control segment of this WQE.
  GPUCOMM_HD GPUCOMM_FORCEINLINE ctrl_seg ctrl(opcode op, std::uint8_t ds, std::uint8_t opmod = 0,
                                               std::uint32_t imm_wire = 0) const noexcept {
    return make_ctrl_seg(static_cast<std::uint16_t>(index), static_cast<std::uint8_t>(op), opmod, qpn, fm_ce_se, ds, 0,
                         imm_wire);
  }
};

/// Local buffer of an operation: address, length and lkey of the registered memory it is in. The
/// key is in host order, or already in wire order when `key_is_wire` (device states that keep
/// their keys pre-swapped, like IBGDAPost's, save the swap on every WQE).
struct local_buf {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  bool key_is_wire = false;
  GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t lkey_wire() const noexcept {
    return key_is_wire ? lkey : to_be32(lkey);
  }
};
/// Remote buffer: address and rkey at the responder (host order, or wire order when `key_is_wire`).
struct remote_buf {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  bool key_is_wire = false;
  GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t rkey_wire() const noexcept {
    return key_is_wire ? rkey : to_be32(rkey);
  }
};

/// NOP (DS 1). Useful to carry a CQE or to flush a doorbell.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_nop(wqe_slot const& s) noexcept {
  s.put(0, s.ctrl(opcode::nop, ds_nop));
  return ds_nop;
}

/// RDMA WRITE of `src` to `dst` (DS 3).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_rdma_write(wqe_slot const& s, local_buf src,
                                                              remote_buf dst) noexcept {
  s.put(0, s.ctrl(opcode::rdma_write, ds_rdma));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_data_seg_wire(src.length, src.lkey_wire(), src.addr));
  return ds_rdma;
}

/// RDMA WRITE with immediate (DS 3): the responder gets a RESP_WR_IMM CQE carrying `imm`
/// (host order here; stored in wire order).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_rdma_write_imm(wqe_slot const& s, local_buf src, remote_buf dst,
                                                                  std::uint32_t imm) noexcept {
  s.put(0, s.ctrl(opcode::rdma_write_imm, ds_rdma, 0, to_be32(imm)));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_data_seg_wire(src.length, src.lkey_wire(), src.addr));
  return ds_rdma;
}

/// RDMA READ of `src` (remote) into `dst` (local) (DS 3).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_rdma_read(wqe_slot const& s, local_buf dst,
                                                             remote_buf src) noexcept {
  s.put(0, s.ctrl(opcode::rdma_read, ds_rdma));
  s.put(1, make_raddr_seg_wire(src.addr, src.rkey_wire()));
  s.put(2, make_data_seg_wire(dst.length, dst.lkey_wire(), dst.addr));
  return ds_rdma;
}

/// SEND of `src` (DS 2); with `imm` set, SEND_IMM.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_send(wqe_slot const& s, local_buf src) noexcept {
  s.put(0, s.ctrl(opcode::send, ds_send));
  s.put(1, make_data_seg_wire(src.length, src.lkey_wire(), src.addr));
  return ds_send;
}
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_send_imm(wqe_slot const& s, local_buf src,
                                                            std::uint32_t imm) noexcept {
  s.put(0, s.ctrl(opcode::send_imm, ds_send, 0, to_be32(imm)));
  s.put(1, make_data_seg_wire(src.length, src.lkey_wire(), src.addr));
  return ds_send;
}

/// RDMA WRITE with the payload inline in the WQE (DS inline_write_ds(len), len <= max_inline_write).
/// The inline segment is its 4-byte header, the payload, and zero padding to 16 bytes.
GPUCOMM_HD inline std::uint32_t build_rdma_write_inline(wqe_slot const& s, void const* data, std::uint32_t len,
                                                        remote_buf dst) noexcept {
  std::uint32_t const ds = inline_write_ds(len);
  s.put(0, s.ctrl(opcode::rdma_write, static_cast<std::uint8_t>(ds)));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  auto const* src = static_cast<unsigned char const*>(data);
  // The inline segment's byte stream: [header(4)][payload(len)][pad], cut into 16-byte chunks.
  std::uint32_t const header = to_be32(len | inline_seg_flag);
  for (std::uint32_t chunk = 0; chunk < ds - 2; ++chunk) {
    seg16 v{{0, 0, 0, 0}};
    auto* out = reinterpret_cast<unsigned char*>(v.w);
    for (std::uint32_t b = 0; b < 16; ++b) {
      std::uint32_t const pos = chunk * 16 + b;  // position in the segment's byte stream
      unsigned char byte = 0;
      if (pos < 4) {
        byte = static_cast<unsigned char>(header >> (8 * pos));
      } else if (pos - 4 < len) {
        byte = src[pos - 4];
      }
      out[b] = byte;
    }
    detail::store16(s.seg(2 + chunk), v);
  }
  return ds;
}

/// 8-byte compare-and-swap at `dst` (DS 4); the old value lands in `result` (8 bytes).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_atomic_cs(wqe_slot const& s, local_buf result, remote_buf dst,
                                                             std::uint64_t compare, std::uint64_t swap) noexcept {
  s.put(0, s.ctrl(opcode::atomic_cs, ds_atomic));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_atomic_cs_seg(swap, compare));
  s.put(3, make_data_seg_wire(8, result.lkey_wire(), result.addr));
  return ds_atomic;
}

/// 8-byte fetch-and-add at `dst` (DS 4); the old value lands in `result` (8 bytes).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_atomic_fa(wqe_slot const& s, local_buf result, remote_buf dst,
                                                             std::uint64_t add) noexcept {
  s.put(0, s.ctrl(opcode::atomic_fa, ds_atomic));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_atomic_fa_seg(add));
  s.put(3, make_data_seg_wire(8, result.lkey_wire(), result.addr));
  return ds_atomic;
}

/// Masked fetch-and-add, 4 bytes (DS 4). field_boundary 0: add; ~0: xor.
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_masked_fa32(wqe_slot const& s, local_buf result, remote_buf dst,
                                                               std::uint32_t add,
                                                               std::uint32_t field_boundary) noexcept {
  s.put(0, s.ctrl(opcode::atomic_masked_fa, ds_masked_atomic, opmod_ext_atomic_4b));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_masked_fa32_seg(add, field_boundary));
  s.put(3, make_data_seg_wire(4, result.lkey_wire(), result.addr));
  return ds_masked_atomic;
}

/// Masked fetch-and-add, 8 bytes (DS 4).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_masked_fa64(wqe_slot const& s, local_buf result, remote_buf dst,
                                                               std::uint64_t add,
                                                               std::uint64_t field_boundary) noexcept {
  s.put(0, s.ctrl(opcode::atomic_masked_fa, ds_masked_atomic, opmod_ext_atomic_8b));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_masked_fa64_seg(add, field_boundary));
  s.put(3, make_data_seg_wire(8, result.lkey_wire(), result.addr));
  return ds_masked_atomic;
}

/// Masked compare-and-swap, 4 bytes (DS 4).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_masked_cs32(wqe_slot const& s, local_buf result, remote_buf dst,
                                                               std::uint32_t compare, std::uint32_t swap,
                                                               std::uint32_t compare_mask,
                                                               std::uint32_t swap_mask) noexcept {
  s.put(0, s.ctrl(opcode::atomic_masked_cs, ds_masked_atomic, opmod_ext_atomic_4b));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_masked_cs32_seg(swap, compare, swap_mask, compare_mask));
  s.put(3, make_data_seg_wire(4, result.lkey_wire(), result.addr));
  return ds_masked_atomic;
}

/// Masked compare-and-swap, 8 bytes (DS 5, two WQEBBs).
GPUCOMM_HD GPUCOMM_FORCEINLINE std::uint32_t build_masked_cs64(wqe_slot const& s, local_buf result, remote_buf dst,
                                                               std::uint64_t compare, std::uint64_t swap,
                                                               std::uint64_t compare_mask,
                                                               std::uint64_t swap_mask) noexcept {
  s.put(0, s.ctrl(opcode::atomic_masked_cs, ds_masked_cs64, opmod_ext_atomic_8b));
  s.put(1, make_raddr_seg_wire(dst.addr, dst.rkey_wire()));
  s.put(2, make_masked_cs64_data_seg(swap, compare));
  s.put(3, make_masked_cs64_mask_seg(swap_mask, compare_mask));
  s.put(4, make_data_seg_wire(8, result.lkey_wire(), result.addr));
  return ds_masked_cs64;
}

/// Value of a 4-byte fetched result as the NIC wrote it. Hardware observed by NVSHMEM returns
/// 4-byte masked-atomic results in network order and 8-byte results in host order; the NIC model
/// does the same (model::nic_config::fetch32_big_endian).
GPUCOMM_HD GPUCOMM_FORCEINLINE constexpr std::uint32_t fetched32(std::uint32_t raw) noexcept { return from_be32(raw); }

}  // namespace gpucomm::verbs_gpu
