#pragma once
// Bit positions of the mlx5 firmware commands verbs_gpu issues through DEVX (QUERY_HCA_CAP,
// CREATE_CQ, CREATE_QP, RST2INIT / INIT2RTR / RTR2RTS). Installed rdma-core has no public mlx5_ifc.h, so the
// offsets the host setup needs are written out here, from the PRM layouts that rdma-core's
// providers/mlx5/mlx5_ifc.h and DPDK's drivers/common/mlx5/mlx5_prm.h (BSD-3) describe
// (struct mlx5_ifc_cqc_bits, mlx5_ifc_qpc_bits, mlx5_ifc_ads_bits, mlx5_ifc_create_*_in_bits).
//
// A command is an array of big-endian 32-bit words; a field is (bit offset, bit width) counted
// from the most significant bit of word 0, exactly like rdma-core's DEVX_SET / MLX5_SET.
//
// tests/host/prm_layout/check_prm_layout.py checks every field here by name, offset and width
// against the Linux kernel's include/linux/mlx5/mlx5_ifc.h (an independent source); the few
// DEVX-only fields, which the kernel leaves reserved, must lie inside one reserved member there.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../detail/endian.cuh"

namespace gpucomm::verbs_gpu::host::prm {

/// A field of a PRM command: bit offset from the start, bit width (<= 32, or 64 when aligned).
struct field {
  std::uint32_t bit;
  std::uint32_t width;
};

/// Sets a field in a command buffer (big-endian words).
inline void set(void* buf, field f, std::uint64_t value) noexcept {
  auto* words = static_cast<std::uint32_t*>(buf);
  if (f.width == 64) {
    set(buf, {f.bit, 32}, value >> 32);
    set(buf, {f.bit + 32, 32}, value & 0xffffffffu);
    return;
  }
  std::uint32_t const w = f.bit / 32;
  std::uint32_t const shift = 32 - (f.bit % 32) - f.width;
  std::uint32_t const mask = (f.width == 32 ? 0xffffffffu : ((1u << f.width) - 1u)) << shift;
  std::uint32_t v = from_be32(words[w]);
  v = (v & ~mask) | ((static_cast<std::uint32_t>(value) << shift) & mask);
  words[w] = to_be32(v);
}
/// Reads a field (width <= 32).
inline std::uint32_t get(void const* buf, field f) noexcept {
  auto const* words = static_cast<std::uint32_t const*>(buf);
  std::uint32_t const shift = 32 - (f.bit % 32) - f.width;
  std::uint32_t const mask = f.width == 32 ? 0xffffffffu : ((1u << f.width) - 1u);
  return (from_be32(words[f.bit / 32]) >> shift) & mask;
}
/// Copies bytes into a byte-aligned field (GIDs, MACs).
inline void set_bytes(void* buf, std::uint32_t bit, void const* src, std::size_t n) noexcept {
  std::memcpy(static_cast<unsigned char*>(buf) + bit / 8, src, n);
}

// ---- command opcodes ----------------------------------------------------------------------------
inline constexpr std::uint16_t op_query_hca_cap = 0x100;
inline constexpr std::uint16_t op_create_cq = 0x400;
inline constexpr std::uint16_t op_create_qp = 0x500;
inline constexpr std::uint16_t op_rst2init_qp = 0x502;
inline constexpr std::uint16_t op_init2rtr_qp = 0x503;
inline constexpr std::uint16_t op_rtr2rts_qp = 0x504;

// ---- asynchronous event types (event queue entries: DEVX event channels deliver them) -----------
inline constexpr std::uint16_t event_cq_error = 0x04;
inline constexpr std::uint16_t event_wq_catas_error = 0x05;
inline constexpr std::uint16_t event_path_mig_failed = 0x07;
inline constexpr std::uint16_t event_internal_error = 0x08;
inline constexpr std::uint16_t event_port_change = 0x09;
inline constexpr std::uint16_t event_wq_inval_req_error = 0x10;
inline constexpr std::uint16_t event_wq_access_error = 0x11;

// ---- common header ------------------------------------------------------------------------------
inline constexpr field in_opcode{0x00, 16};
inline constexpr field in_op_mod{0x30, 16};
inline constexpr field out_status{0x00, 8};
inline constexpr field out_syndrome{0x20, 32};
inline constexpr field out_obj_number{0x48, 24};  ///< cqn / qpn in CREATE_CQ / CREATE_QP output
inline constexpr std::size_t out_bytes = 16;

// ---- QUERY_HCA_CAP (mlx5_ifc_query_hca_cap_in_bits / _out_bits) ---------------------------------
// op_mod = (capability type << 1) | mode; the capability page (a union) at bit 0x80 of the output.
inline constexpr std::size_t query_hca_cap_in_bytes = 0x80 / 8;
inline constexpr std::size_t query_hca_cap_out_bytes = 0x8080 / 8;
inline constexpr std::uint32_t hca_cap_general = 0x0;  ///< cmd_hca_cap
inline constexpr std::uint32_t hca_cap_atomic = 0x3;   ///< atomic_caps
inline constexpr std::uint32_t hca_cap_roce = 0x4;     ///< roce_cap
inline constexpr std::uint32_t hca_cap_current = 0x1;  ///< mode: current values (0: maximum)
inline constexpr std::uint32_t hca_cap = 0x80;
// cmd_hca_cap
inline constexpr field cap_log_max_qp_sz{hca_cap + 0x88, 8};
inline constexpr field cap_log_max_qp{hca_cap + 0x9b, 5};
inline constexpr field cap_log_max_cq_sz{hca_cap + 0xc8, 8};
inline constexpr field cap_log_max_cq{hca_cap + 0xdb, 5};
inline constexpr field cap_log_max_ra_req_qp{hca_cap + 0x14a, 6};
inline constexpr field cap_log_max_ra_res_qp{hca_cap + 0x15a, 6};
inline constexpr field cap_port_type{hca_cap + 0x1b6, 2};
inline constexpr field cap_log_max_msg{hca_cap + 0x1c3, 5};
inline constexpr field cap_cqe_version{hca_cap + 0x1fc, 4};
inline constexpr field cap_roce{hca_cap + 0x21d, 1};
inline constexpr field cap_atomic{hca_cap + 0x21e, 1};
inline constexpr field cap_cq_oi{hca_cap + 0x220, 1};
inline constexpr field cap_rc{hca_cap + 0x23f, 1};
inline constexpr field cap_bf{hca_cap + 0x260, 1};
inline constexpr field cap_log_bf_reg_size{hca_cap + 0x26b, 5};
inline constexpr field cap_sq_ts_format{hca_cap + 0x440, 2};
// roce_cap
inline constexpr field roce_cap_qp_ts_format{hca_cap + 0x1e, 2};
// atomic_caps
inline constexpr field atomic_cap_operations{hca_cap + 0x90, 16};
inline constexpr field atomic_cap_size_qp{hca_cap + 0xb0, 16};

inline constexpr std::uint32_t port_type_eth = 0x1;
inline constexpr std::uint32_t ts_cap_free_running = 0x0;
inline constexpr std::uint32_t ts_cap_real_time = 0x1;
inline constexpr std::uint32_t ts_cap_free_running_and_real_time = 0x2;
inline constexpr std::uint32_t atomic_op_cmp_swap = 0x1;
inline constexpr std::uint32_t atomic_op_fetch_add = 0x2;
inline constexpr std::uint32_t atomic_op_masked_cmp_swap = 0x4;
inline constexpr std::uint32_t atomic_op_masked_fetch_add = 0x8;
inline constexpr std::uint32_t atomic_size_4 = 0x4;
inline constexpr std::uint32_t atomic_size_8 = 0x8;

// ---- CREATE_CQ (mlx5_ifc_create_cq_in_bits, cqc at 0x80) ---------------------------------------
inline constexpr std::uint32_t cqc = 0x80;
inline constexpr field cqc_dbr_umem_valid{cqc + 0x06, 1};
inline constexpr field cqc_cqe_sz{cqc + 0x08, 3};  ///< 0 = 64-byte CQEs
inline constexpr field cqc_cc{cqc + 0x0b, 1};      ///< collapsed CQ
inline constexpr field cqc_oi{cqc + 0x0e, 1};      ///< overrun ignore
inline constexpr field cqc_dbr_umem_id{cqc + 0x20, 32};
inline constexpr field cqc_page_offset{cqc + 0x54, 6};
inline constexpr field cqc_log_cq_size{cqc + 0x63, 5};
inline constexpr field cqc_uar_page{cqc + 0x68, 24};
inline constexpr field cqc_c_eqn{cqc + 0xa0, 32};  ///< c_eqn_or_apu_element: the EQ number
inline constexpr field cqc_log_page_size{cqc + 0xc3, 5};
inline constexpr field cqc_dbr_addr{cqc + 0x1c0, 64};  ///< offset in the DBR UMEM
inline constexpr field cq_umem_offset{0x280, 64};
inline constexpr field cq_umem_id{0x2c0, 32};
inline constexpr field cq_umem_valid{0x2e0, 1};
inline constexpr std::size_t create_cq_in_bytes = 0x880 / 8;
static_assert(cqc + 0x200 == 0x280, "cqc is 0x200 bits");

// ---- QP context (mlx5_ifc_qpc_bits) and address path (mlx5_ifc_ads_bits) -------------------------
inline constexpr std::uint32_t qpc = 0xc0;           ///< qpc offset in CREATE_QP and in every *2*_QP command
inline constexpr std::uint32_t ads = qpc + 0xc0;     ///< primary address path
inline constexpr field qpc_st{qpc + 0x08, 8};        ///< 0 = RC
inline constexpr field qpc_pm_state{qpc + 0x13, 2};  ///< 3 = migrated
inline constexpr field qpc_pd{qpc + 0x28, 24};
inline constexpr field qpc_mtu{qpc + 0x40, 3};
inline constexpr field qpc_log_msg_max{qpc + 0x43, 5};
inline constexpr field qpc_log_rq_size{qpc + 0x49, 4};
inline constexpr field qpc_log_rq_stride{qpc + 0x4d, 3};
inline constexpr field qpc_no_sq{qpc + 0x50, 1};
inline constexpr field qpc_log_sq_size{qpc + 0x51, 4};
inline constexpr field qpc_ts_format{qpc + 0x58, 2};
inline constexpr field qpc_counter_set_id{qpc + 0x60, 8};
inline constexpr field qpc_uar_page{qpc + 0x68, 24};
inline constexpr field qpc_user_index{qpc + 0x88, 24};
inline constexpr field qpc_log_page_size{qpc + 0xa3, 5};
inline constexpr field qpc_remote_qpn{qpc + 0xa8, 24};
inline constexpr field ads_pkey_index{ads + 0x10, 16};
inline constexpr field ads_grh{ads + 0x28, 1};
inline constexpr field ads_rlid{ads + 0x30, 16};
inline constexpr field ads_ack_timeout{ads + 0x40, 5};
inline constexpr field ads_src_addr_index{ads + 0x48, 8};
inline constexpr field ads_hop_limit{ads + 0x58, 8};
inline constexpr field ads_tclass{ads + 0x64, 8};
inline constexpr std::uint32_t ads_rgid_rip_bit = ads + 0x80;  ///< 16 bytes
inline constexpr field ads_dscp{ads + 0x10a, 6};               ///< RoCE v2
inline constexpr field ads_udp_sport{ads + 0x110, 16};
inline constexpr field ads_eth_prio{ads + 0x121, 3};  ///< RoCE: the Ethernet priority (the SL of IB)
inline constexpr field ads_sl{ads + 0x124, 4};
inline constexpr field ads_vhca_port_num{ads + 0x128, 8};
inline constexpr std::uint32_t ads_rmac_bit = ads + 0x130;  ///< 6 bytes (rmac_47_32, rmac_31_0)
inline constexpr field qpc_log_ack_req_freq{qpc + 0x380, 4};
inline constexpr field qpc_log_sra_max{qpc + 0x388, 3};
inline constexpr field qpc_retry_count{qpc + 0x38d, 3};
inline constexpr field qpc_rnr_retry{qpc + 0x390, 3};
inline constexpr field qpc_next_send_psn{qpc + 0x3c8, 24};
inline constexpr field qpc_cqn_snd{qpc + 0x3e8, 24};
inline constexpr field qpc_log_rra_max{qpc + 0x488, 3};
inline constexpr field qpc_atomic_mode{qpc + 0x48c, 4};
inline constexpr field qpc_rre{qpc + 0x490, 1};
inline constexpr field qpc_rwe{qpc + 0x491, 1};
inline constexpr field qpc_rae{qpc + 0x492, 1};
inline constexpr field qpc_page_offset{qpc + 0x494, 6};
inline constexpr field qpc_min_rnr_nak{qpc + 0x4a3, 5};
inline constexpr field qpc_next_rcv_psn{qpc + 0x4a8, 24};
inline constexpr field qpc_cqn_rcv{qpc + 0x4e8, 24};
inline constexpr field qpc_dbr_addr{qpc + 0x500, 64};
inline constexpr field qpc_rq_type{qpc + 0x565, 3};  ///< 3 = zero-length RQ
inline constexpr field qpc_dbr_umem_valid{qpc + 0x683, 1};
inline constexpr field qpc_dbr_umem_id{qpc + 0x720, 32};
static_assert(qpc + 0x740 == 0x800, "qpc is 0x740 bits and ends at 0x800 in the QP commands");

// ---- CREATE_QP (mlx5_ifc_create_qp_in_bits) ------------------------------------------------------
inline constexpr field wq_umem_offset{0x800, 64};
inline constexpr field wq_umem_id{0x840, 32};
inline constexpr field wq_umem_valid{0x860, 1};
inline constexpr std::size_t create_qp_in_bytes = 0x880 / 8;

// ---- state transitions (mlx5_ifc_rst2init_qp_in_bits and friends) --------------------------------
inline constexpr field modify_qpn{0x48, 24};
inline constexpr field modify_opt_param_mask{0x80, 32};
inline constexpr std::size_t modify_qp_in_bytes = 0x880 / 8;

inline constexpr std::uint32_t qp_st_rc = 0x0;
inline constexpr std::uint32_t qp_pm_migrated = 0x3;
inline constexpr std::uint32_t rq_type_zero_length = 0x3;
inline constexpr std::uint32_t atomic_mode_up_to_8b = 0x3;  ///< atomics of up to 8 bytes (the kernel's UP_TO_8B)
inline constexpr std::uint32_t ts_format_free_running = 0x0;
inline constexpr std::uint32_t ts_format_default = 0x1;

}  // namespace gpucomm::verbs_gpu::host::prm
