#pragma once
// The firmware model's tables and command handling (included at the end of firmware.hpp).
//
// Layout of this file: the object tables (one device_state per device of a fabric), the verdicts a
// command can end with, firmware_engine (command decoding and every check, one function per
// command), then the member functions of firmware_fabric and firmware_model.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ifc.hpp"

namespace gpucomm::verbs_gpu::model {
namespace detail {

namespace k = ifc::kernel;

inline std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
inline std::string gid_text(std::uint8_t const (&g)[16]) {
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    char b[8];
    std::snprintf(b, sizeof b, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
    s += b;
  }
  return s;
}

/// What a handle's impl points at: the kind of object and its number on the device.
struct handle_rec {
  enum class kind : std::uint8_t { pd, umem, uar, cq, qp, mr } what;
  std::uint32_t id;
};

// ---- the tables ----------------------------------------------------------------------------------
// Every record names the context (firmware_model) that owns it: firmware refuses objects of another
// user id, and a context's objects go when it does.
struct pd_rec {
  std::uint64_t owner;
  int users = 0;  ///< QPs and MRs on it
};
struct umem_rec {
  std::uint64_t owner;
  std::uint64_t addr, bytes;
  int access, dmabuf_fd;
  std::uint64_t page_size_bitmap;
  int users = 0;  ///< CQ and QP buffers and doorbell records in it
};
struct uar_rec {
  std::uint64_t owner;
  host::uar_type type;
  unsigned char* page;  ///< 4 KiB in the device's UAR blocks; the doorbell register at reg_offset
  std::size_t reg_bytes;
  int handles = 0;  ///< alloc_uar handles naming this page (nc pages are shared)
  int users = 0;    ///< CQs and QPs naming it as uar_page
  static constexpr std::size_t reg_offset = 0x800;
  static constexpr std::size_t page_bytes = 4096;
};
/// UAR pages sit 16 to a 64 KiB-aligned block, as the kernel maps UARs a system page at a time:
/// on a 64 KiB-page host several UAR pages share one host page.
struct uar_block_free {
  void operator()(unsigned char* p) const noexcept { std::free(p); }
};
inline constexpr std::size_t uar_block_bytes = 65536;
/// A host range a context mapped for the GPU (map_doorbell), whole host pages.
struct mapped_range {
  std::uint64_t owner;
  std::uintptr_t first;
  std::size_t bytes;
};
struct cq_rec {
  std::uint64_t owner;
  unsigned log_size, cqe_bytes;
  bool collapsed, overrun_ignore;
  std::uint32_t uar_page, eqn, umem, dbr_umem;
  std::uint64_t umem_offset, dbr_offset;
  int users = 0;  ///< QPs completing to it
};
struct qp_rec {
  std::uint64_t owner;
  qp_state state = qp_state::reset;
  std::uint32_t pd, cqn_snd, cqn_rcv, uar_page, wq_umem, dbr_umem;
  std::uint64_t wq_offset, dbr_offset;
  unsigned log_sq_size, log_rq_size, rq_type;
  bool no_sq;
  // Set by the transitions.
  std::uint8_t port = 0;
  std::uint16_t pkey_index = 0;
  bool rre = false, rwe = false, rae = false;
  unsigned atomic_mode = 0, mtu = 0, log_msg_max = 0, log_rra_max = 0, log_sra_max = 0;
  std::uint32_t remote_qpn = 0, next_rcv_psn = 0, next_send_psn = 0;
  std::size_t peer_device = static_cast<std::size_t>(-1);
  bool grh = false;
  std::uint16_t rlid = 0;
  std::uint8_t rgid[16] = {}, rmac[6] = {};
};
struct mr_rec {
  std::uint64_t owner;
  std::uint32_t pd;
  std::uint64_t addr, bytes;
  int access, dmabuf_fd;
  std::uint64_t dmabuf_offset;
};

struct device_state {
  firmware_config cfg;
  hca_caps const& max_caps() const { return cfg.max_caps ? *cfg.max_caps : cfg.caps; }
  bool roce() const {
    return std::any_of(cfg.ports.begin(), cfg.ports.end(), [](port_config const& p) { return p.ethernet; });
  }
  std::map<std::uint32_t, pd_rec> pds;
  std::map<std::uint32_t, umem_rec> umems;
  std::map<std::uint32_t, uar_rec> uars;
  std::vector<std::unique_ptr<unsigned char, uar_block_free>> uar_blocks;
  std::size_t uar_pages_made = 0;  ///< UAR pages carved from the blocks (never reused)
  std::vector<mapped_range> mapped;
  std::map<std::uint64_t, std::uint32_t> nc_uar;  ///< context -> its shared nc page
  std::map<std::uint32_t, cq_rec> cqs;
  std::map<std::uint32_t, qp_rec> qps;
  std::map<std::uint32_t, mr_rec> mrs;  ///< by key
  std::uint32_t next_pdn = 1, next_umem = 1, next_uar = 1, next_cqn = 0x80, next_mkey = 1;
};

struct fabric_state {
  std::mutex mutex;
  std::vector<std::unique_ptr<device_state>> devices;
  std::uint32_t next_qpn = 0x100;  ///< fabric-wide, so that a QP number names one QP in the fabric
  std::uint64_t next_context = 1;
};

// ---- verdicts --------------------------------------------------------------------------------------
/// A firmware status other than OK: thrown by a check, turned into the command's output.
struct verdict {
  std::uint32_t status;
  std::string check, reason;
};
[[noreturn]] inline void reject(std::uint32_t status, std::string check, std::string reason) {
  throw verdict{status, std::move(check), std::move(reason)};
}
/// A refusal of the kernel or rdma-core, before firmware sees the command: an errno value.
struct refusal {
  int error;
  std::string reason;
};
[[noreturn]] inline void refuse(int error, std::string reason) { throw refusal{error, std::move(reason)}; }

inline char const* status_name(std::uint32_t s) {
  switch (s) {
    case k::MLX5_CMD_STAT_OK:
      return "OK";
    case k::MLX5_CMD_STAT_BAD_OP_ERR:
      return "bad operation";
    case k::MLX5_CMD_STAT_BAD_PARAM_ERR:
      return "bad parameter";
    case k::MLX5_CMD_STAT_BAD_SYS_STATE_ERR:
      return "bad system state";
    case k::MLX5_CMD_STAT_BAD_RES_ERR:
      return "bad resource";
    case k::MLX5_CMD_STAT_LIM_ERR:
      return "limits exceeded";
    case k::MLX5_CMD_STAT_BAD_RES_STATE_ERR:
      return "bad resource state";
    case k::MLX5_CMD_STAT_NO_RES_ERR:
      return "no resources";
    case k::MLX5_CMD_STAT_BAD_INP_LEN_ERR:
      return "bad input length";
    case k::MLX5_CMD_STAT_BAD_OUTP_LEN_ERR:
      return "bad output length";
    default:
      return "error";
  }
}
inline char const* state_name(qp_state s) {
  switch (s) {
    case qp_state::reset:
      return "RESET";
    case qp_state::init:
      return "INIT";
    case qp_state::rtr:
      return "RTR";
    case qp_state::rts:
      return "RTS";
    case qp_state::error:
      return "ERR";
  }
  return "?";
}

/// Writes a capability value into a QUERY_HCA_CAP output; std::invalid_argument when a configured
/// value does not fit its field (caught when the device is added to the fabric).
inline void put_cap(void* out, ifc::field f, std::uint64_t value) {
  if (!ifc::fits(f, value))
    throw std::invalid_argument("firmware_config: " + std::string(f.path) + " = " + std::to_string(value) +
                                " does not fit its " + std::to_string(f.width) + "-bit field");
  ifc::set(out, f, value);
}

/// The capability page of `type` (MLX5_SET_HCA_CAP_OP_MOD_*) into a query_hca_cap_out buffer.
inline void encode_caps(device_state const& d, hca_caps const& c, std::uint32_t type, void* out) {
  constexpr auto& s = ifc::query_hca_cap_out;
  if (type == k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE) {
    general_caps const& g = c.general;
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_qp_sz"), g.log_max_qp_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_qp"), g.log_max_qp);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_cq_sz"), g.log_max_cq_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_cq"), g.log_max_cq);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_eq_sz"), g.log_max_eq_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_mkey"), g.log_max_mkey);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_eq"), g.log_max_eq);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_mrw_sz"), g.log_max_mrw_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_ra_req_qp"), g.log_max_ra_req_qp);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_ra_res_qp"), g.log_max_ra_res_qp);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.port_type"),
            d.cfg.ports.at(0).ethernet ? k::MLX5_CAP_PORT_TYPE_ETH : k::MLX5_CAP_PORT_TYPE_IB);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.num_ports"), d.cfg.ports.size());
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_msg"), g.log_max_msg);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.cqe_version"), g.cqe_version);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.cqe_compression"), g.cqe_compression);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.apu"), g.apu);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.roce"), d.roce());
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.atomic"), g.atomic);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.cq_oi"), g.cq_oi);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.rc"), g.rc);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.uar_4k"), g.uar_4k);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.uar_sz"), g.uar_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_pg_sz"), g.log_pg_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.bf"), g.bf);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_bf_reg_size"), g.log_bf_reg_size);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_pd"), g.log_max_pd);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.sq_ts_format"), static_cast<unsigned>(g.sq_ts_format));
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.rq_ts_format"), static_cast<unsigned>(g.rq_ts_format));
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_max_umem"), g.log_max_umem);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.log_uar_page_sz"), g.log_uar_page_sz);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.num_of_uars_per_page"), g.num_of_uars_per_page);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.max_num_eqs"), g.max_num_eqs);
    put_cap(out, ifc::at(s, "capability.cmd_hca_cap.umem_uid_0"), g.umem_uid_0);
  } else if (type == k::MLX5_SET_HCA_CAP_OP_MOD_ROCE) {
    roce_caps const& r = c.roce;
    put_cap(out, ifc::at(s, "capability.roce_cap.qp_ts_format"), static_cast<unsigned>(r.qp_ts_format));
    put_cap(out, ifc::at(s, "capability.roce_cap.l3_type"), r.l3_type);
    put_cap(out, ifc::at(s, "capability.roce_cap.roce_version"), r.roce_version);
    put_cap(out, ifc::at(s, "capability.roce_cap.r_roce_dest_udp_port"), r.r_roce_dest_udp_port);
    put_cap(out, ifc::at(s, "capability.roce_cap.r_roce_max_src_udp_port"), r.r_roce_max_src_udp_port);
    put_cap(out, ifc::at(s, "capability.roce_cap.r_roce_min_src_udp_port"), r.r_roce_min_src_udp_port);
    put_cap(out, ifc::at(s, "capability.roce_cap.roce_address_table_size"), r.roce_address_table_size);
  } else if (type == k::MLX5_SET_HCA_CAP_OP_MOD_ATOMIC) {
    atomic_caps const& a = c.atomic;
    put_cap(out, ifc::at(s, "capability.atomic_caps.atomic_req_8B_endianness_mode"), a.atomic_req_8B_endianness_mode);
    put_cap(out, ifc::at(s, "capability.atomic_caps.supported_atomic_req_8B_endianness_mode_1"),
            a.supported_atomic_req_8B_endianness_mode_1);
    put_cap(out, ifc::at(s, "capability.atomic_caps.atomic_operations"), a.atomic_operations);
    put_cap(out, ifc::at(s, "capability.atomic_caps.atomic_size_qp"), a.atomic_size_qp);
    put_cap(out, ifc::at(s, "capability.atomic_caps.atomic_size_dc"), a.atomic_size_dc);
  }
}

inline void validate_config(firmware_config const& c) {
  auto bad = [&](std::string const& what) { throw std::invalid_argument("firmware_config " + c.name + ": " + what); };
  if (c.name.empty()) bad("the device needs a name");
  if (c.host_page_bytes < 4096 || c.host_page_bytes > uar_block_bytes || (c.host_page_bytes & (c.host_page_bytes - 1)))
    bad("host_page_bytes is a power of two from 4096 to 65536");
  if (c.ports.empty() || c.ports.size() > 255) bad("a device has 1 to 255 ports");
  for (std::size_t p = 0; p < c.ports.size(); ++p) {
    port_config const& pc = c.ports[p];
    std::string const port = "port " + std::to_string(p + 1) + ": ";
    if (!pc.ethernet && (pc.lid == 0 || pc.lid >= 0xc000)) bad(port + "an InfiniBand port needs a unicast LID");
    if (pc.active_mtu < 1 || pc.active_mtu > 5) bad(port + "active_mtu is an ibv_mtu value, 1 to 5");
    if (pc.gids.empty() || pc.gids.size() > 256) bad(port + "the GID table has 1 to 256 entries");
    if (pc.pkey_table_length == 0) bad(port + "the P_Key table has at least one entry");
    for (host::gid_entry const& g : pc.gids)
      if (g.type != host::gid_type::empty && (pc.ethernet == (g.type == host::gid_type::ib)))
        bad(port + "GID entries are of type ib on InfiniBand ports and roce_v1/v2 on Ethernet ports");
  }
  if (c.caps.general.log_bf_reg_size > 11) bad("log_bf_reg_size > 11: the register would not fit its 4 KiB page");
}

// ---- the engine ----------------------------------------------------------------------------------
/// Decodes and executes commands for one firmware_model; every check is here.
struct firmware_engine {
  enum class call : std::uint8_t { general, create, modify, destroy };

  firmware_model& m;
  fabric_state& fab;
  device_state& dev;

  hca_caps const& caps() const { return dev.cfg.caps; }

  /// A fresh 4 KiB UAR page, zeroed, carved from the device's 64 KiB blocks.
  unsigned char* new_uar_page() {
    constexpr std::size_t per_block = uar_block_bytes / uar_rec::page_bytes;
    std::size_t const slot = dev.uar_pages_made++;
    if (slot / per_block >= dev.uar_blocks.size()) {
      auto* block = static_cast<unsigned char*>(std::aligned_alloc(uar_block_bytes, uar_block_bytes));
      if (block == nullptr) throw std::bad_alloc();
      std::memset(block, 0, uar_block_bytes);
      dev.uar_blocks.emplace_back(block);
    }
    return dev.uar_blocks[slot / per_block].get() + (slot % per_block) * uar_rec::page_bytes;
  }
  /// The range this context mapped that holds `addr`, or nullptr.
  mapped_range const* mapped_range_of(std::uintptr_t addr) const {
    for (mapped_range const& r : dev.mapped)
      if (r.owner == m.context_ && addr >= r.first && addr - r.first < r.bytes) return &r;
    return nullptr;
  }

  // ---- object look-ups: BAD_RES (0x5) for a number that names nothing of this context ------------
  template <class Map>
  auto& owned(Map& map, std::uint64_t id, std::string check, char const* what) {
    auto it = map.find(static_cast<std::uint32_t>(id));
    if (it == map.end())
      reject(k::MLX5_CMD_STAT_BAD_RES_ERR, std::move(check), std::string(what) + " " + hex(id) + " does not exist");
    if (it->second.owner != m.context_)
      reject(k::MLX5_CMD_STAT_BAD_RES_ERR, std::move(check),
             std::string(what) + " " + hex(id) + " belongs to another context (user id)");
    return it->second;
  }

  /// A buffer of `bytes` at `offset` of UMEM `id` must lie inside it.
  umem_rec& umem_range(std::uint64_t id, std::uint64_t offset, std::uint64_t bytes, std::string const& id_check,
                       std::string const& offset_check, char const* what) {
    umem_rec& u = owned(dev.umems, id, id_check, "UMEM");
    if (offset > u.bytes || bytes > u.bytes - offset)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, offset_check,
             std::string(what) + " [" + hex(offset) + ", " + hex(offset + bytes) + ") runs past the end of UMEM " +
                 hex(id) + " (" + hex(u.bytes) + " bytes)");
    return u;
  }
  /// A queue buffer at `offset` of UMEM `id` must start on a page of the UMEM whatever page size the
  /// kernel picked for it: devx_umem_find_best_pgsize takes the largest size of page_size_bitmap
  /// (0 here: any from 4 KiB) up to the UMEM's length rounded up to a power of two that the
  /// memory's layout allows, so the model assumes the largest (a model check: hardware would
  /// accept the command and read the buffer from the wrong place).
  void page_aligned(umem_rec const& u, std::uint64_t id, std::uint64_t offset, std::string const& offset_check,
                    char const* what) {
    if (offset == 0) return;
    unsigned top = 12;
    while (top < 63 && (std::uint64_t{1} << top) < u.bytes) ++top;  // order_base_2(length), at least 12
    std::uint64_t const allowed = (u.page_size_bitmap == 0 ? ~std::uint64_t{0} : u.page_size_bitmap) &
                                  ~std::uint64_t{0xfff} & ((std::uint64_t{2} << top) - 1);
    if (allowed == 0) return;  // umem_reg refuses such a bitmap
    unsigned highest = 63;
    while (((allowed >> highest) & 1u) == 0) --highest;
    std::uint64_t const page = std::uint64_t{1} << highest;
    if (offset % page != 0)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, offset_check,
             std::string("(model check) ") + what + " at offset " + hex(offset) + " of UMEM " + hex(id) +
                 " is not page aligned if the kernel gives that UMEM pages of " + hex(page) +
                 " bytes, which its page_size_bitmap " + hex(u.page_size_bitmap) + " and length " + hex(u.bytes) +
                 " allow: register one UMEM per buffer at offset 0, or allow only pages the offset is aligned to");
  }
  /// A doorbell record: 8 bytes, 8-byte aligned (the record is written as 64-bit words by the GPU
  /// and by the NIC), inside its UMEM.
  umem_rec& dbr(std::uint64_t id, std::uint64_t offset, std::string const& prefix, std::string const& id_field,
                std::string const& addr_field) {
    if (offset % 8 != 0)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, prefix + addr_field,
             addr_field + " = " + hex(offset) + ": doorbell records are 8-byte aligned");
    return umem_range(id, offset, 8, prefix + id_field, prefix + addr_field, "the doorbell record");
  }

  /// ts_format against what the device supports; the kernel's rule (mlx5_get_qp_default_ts): DEFAULT
  /// only where the device reports more than free-running. The kernel only chooses by this rule;
  /// whether firmware rejects DEFAULT on a free-running-only device is not known, so the refusal
  /// of that case is a model check (its message says so).
  void check_ts(std::uint64_t fmt, ts_formats cap, std::string const& check, char const* cap_name) {
    if (fmt > k::MLX5_TIMESTAMP_FORMAT_REAL_TIME)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, check,
             "qpc.ts_format = " + std::to_string(fmt) + " is no MLX5_TIMESTAMP_FORMAT_* value");
    bool const fr = cap != ts_formats::real_time, rt = cap != ts_formats::free_running;
    bool const ok = fmt == k::MLX5_TIMESTAMP_FORMAT_FREE_RUNNING ? fr
                    : fmt == k::MLX5_TIMESTAMP_FORMAT_REAL_TIME  ? rt
                                                                 : cap != ts_formats::free_running;
    if (!ok)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, check,
             "qpc.ts_format = " + std::to_string(fmt) + " is not supported (model check): " + cap_name + " = " +
                 std::to_string(static_cast<unsigned>(cap)) + " (MLX5_TIMESTAMP_FORMAT_CAP_*)");
  }

  /// rae and atomic_mode against the atomic capabilities (as the kernel's get_atomic_mode derives
  /// the mode it programs: IB_SPEC needs plain compare-and-swap and fetch-and-add on 8 bytes,
  /// UP_TO_<2^m>B needs masked ("extended") atomics and 2^m-byte operands).
  void check_atomics(bool rae, std::uint64_t mode, std::string const& prefix) {
    atomic_caps const& a = caps().atomic;
    if (rae && !caps().general.atomic)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, prefix + "qpc.rae",
             "rae = 1 but the device has no atomics (cmd_hca_cap.atomic = 0)");
    if (mode > k::MLX5_QPC_ATOMIC_MODE_UP_TO_256B)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, prefix + "qpc.atomic_mode",
             "qpc.atomic_mode = " + std::to_string(mode) + " is no MLX5_QPC_ATOMIC_MODE_* value");
    if (mode == 0) return;  // unset: the kernel leaves it 0 on QPs without remote atomic access
    bool const basic = (a.atomic_operations & (k::MLX5_ATOMIC_OPS_CMP_SWAP | k::MLX5_ATOMIC_OPS_FETCH_ADD)) ==
                       (k::MLX5_ATOMIC_OPS_CMP_SWAP | k::MLX5_ATOMIC_OPS_FETCH_ADD);
    bool const masked =
        (a.atomic_operations & (k::MLX5_ATOMIC_OPS_EXTENDED_CMP_SWAP | k::MLX5_ATOMIC_OPS_EXTENDED_FETCH_ADD)) != 0;
    bool const has8 = (a.atomic_size_qp & k::MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES) != 0;
    std::string why;
    if (!caps().general.atomic)
      why = "the device has no atomics (cmd_hca_cap.atomic = 0)";
    else if (mode == k::MLX5_QPC_ATOMIC_MODE_IB_SPEC && !(basic && has8))
      why = "IB_SPEC needs 8-byte compare-and-swap and fetch-and-add";
    else if (mode == k::MLX5_QPC_ATOMIC_MODE_ONLY_8B && !((basic || masked) && has8))
      why = "ONLY_8B needs 8-byte atomics";
    else if (mode >= k::MLX5_QPC_ATOMIC_MODE_UP_TO_8B && !masked)
      why = "UP_TO_* modes need masked atomics (MLX5_ATOMIC_OPS_EXTENDED_*)";
    else if (mode >= k::MLX5_QPC_ATOMIC_MODE_UP_TO_8B && !((a.atomic_size_qp >> mode) & 1u))
      why = "atomic_size_qp = " + hex(a.atomic_size_qp) + " has no " + std::to_string(1u << mode) + "-byte operands";
    if (!why.empty())
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, prefix + "qpc.atomic_mode",
             "qpc.atomic_mode = " + std::to_string(mode) + " is beyond the atomic capabilities: " + why);
  }

  void limit(std::uint64_t value, unsigned cap, std::string const& check, std::string const& field,
             char const* cap_name) {
    if (value > cap)
      reject(k::MLX5_CMD_STAT_LIM_ERR, check,
             field + " = " + std::to_string(value) + " exceeds " + cap_name + " = " + std::to_string(cap));
  }

  // ---- QUERY_HCA_CAP ---------------------------------------------------------------------------------
  void query_hca_cap(void const* in, void* out) {
    constexpr auto& s = ifc::query_hca_cap_in;
    if (ifc::get(in, ifc::at(s, "other_function")) || ifc::get(in, ifc::at(s, "ec_vf_function")) ||
        ifc::get(in, ifc::at(s, "function_id")))
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, "query_hca_cap_in.other_function",
             "the model has one function: other_function, ec_vf_function and function_id must be 0");
    auto const op_mod = ifc::get(in, ifc::in_op_mod);
    auto const type = static_cast<std::uint32_t>(op_mod >> 1);
    bool const current = (op_mod & 1u) == k::HCA_CAP_OPMOD_GET_CUR;
    if (type != k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE && type != k::MLX5_SET_HCA_CAP_OP_MOD_ATOMIC &&
        type != k::MLX5_SET_HCA_CAP_OP_MOD_ROCE)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, "query_hca_cap_in.op_mod",
             "op_mod = " + hex(op_mod) + " asks for capability type " + hex(type) +
                 ", which the model does not report (general 0x0, atomic 0x3, RoCE 0x4)");
    if (type == k::MLX5_SET_HCA_CAP_OP_MOD_ROCE && !dev.roce())
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, "query_hca_cap_in.op_mod",
             "RoCE capabilities asked of a device without an Ethernet port (cmd_hca_cap.roce = 0)");
    encode_caps(dev, current ? dev.cfg.caps : dev.max_caps(), type, out);
  }

  // ---- CREATE_CQ ---------------------------------------------------------------------------------------
  void create_cq(void const* in, void* out) {
    constexpr auto& s = ifc::create_cq_in;
    auto get = [&](ifc::field f) { return ifc::get(in, f); };
    std::string const p = "create_cq_in.";
    general_caps const& g = caps().general;
    auto const cqe_sz = get(ifc::at(s, "cq_context.cqe_sz"));
    if (cqe_sz != k::MLX5_CQC_CQE_SZ_64_BYTES && cqe_sz != k::MLX5_CQC_CQE_SZ_128_BYTES &&
        cqe_sz != k::CQE_STRIDE_128_PAD)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "cq_context.cqe_sz",
             "cq_context.cqe_sz = " + std::to_string(cqe_sz) + " is no CQE size (0: 64 B, 1: 128 B, 2: 128 B padded)");
    if (get(ifc::at(s, "cq_context.cqe_comp_en")) && !g.cqe_compression)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "cq_context.cqe_comp_en",
             "cqe_comp_en = 1 but the device has no CQE compression (cmd_hca_cap.cqe_compression = 0)");
    if (get(ifc::at(s, "cq_context.apu_cq")) && !g.apu)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "cq_context.apu_cq", "apu_cq = 1 but the device has no APU");
    bool const cc = get(ifc::at(s, "cq_context.cc")) != 0, oi = get(ifc::at(s, "cq_context.oi")) != 0;
    if (oi && !g.cq_oi)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "cq_context.oi",
             "oi = 1 but the device cannot ignore CQ overrun (cmd_hca_cap.cq_oi = 0)");
    auto const log_size = get(ifc::at(s, "cq_context.log_cq_size"));
    limit(log_size, g.log_max_cq_sz, p + "cq_context.log_cq_size", "cq_context.log_cq_size",
          "cmd_hca_cap.log_max_cq_sz");
    auto const uar = get(ifc::at(s, "cq_context.uar_page"));
    uar_rec& u = owned(dev.uars, uar, p + "cq_context.uar_page", "UAR page");
    auto const eqn = get(ifc::at(s, "cq_context.c_eqn_or_apu_element"));
    if (eqn < firmware_model::first_comp_eqn || eqn >= firmware_model::first_comp_eqn + dev.cfg.num_comp_vectors)
      reject(k::MLX5_CMD_STAT_BAD_RES_ERR, p + "cq_context.c_eqn_or_apu_element",
             "c_eqn = " + hex(eqn) + " is no completion EQ (query_eqn answers " + hex(firmware_model::first_comp_eqn) +
                 " ... " + hex(firmware_model::first_comp_eqn + dev.cfg.num_comp_vectors - 1) + ")");
    // The kernel's DEVX layer sets cq_umem_valid and dbr_umem_valid (devx_set_umem_valid), so the
    // buffer and the doorbell record always come from UMEMs, whatever the command says.
    unsigned const cqe_bytes = cqe_sz == k::MLX5_CQC_CQE_SZ_64_BYTES ? 64 : 128;
    auto const buf_id = get(ifc::at(s, "cq_umem_id")), buf_off = get(ifc::at(s, "cq_umem_offset"));
    umem_rec& buf = umem_range(buf_id, buf_off, std::uint64_t{cqe_bytes} << log_size, p + "cq_umem_id",
                               p + "cq_umem_offset", "the CQ buffer");
    page_aligned(buf, buf_id, buf_off, p + "cq_umem_offset", "the CQ buffer");
    auto const dbr_id = get(ifc::at(s, "cq_context.dbr_umem_id")), dbr_off = get(ifc::at(s, "cq_context.dbr_addr"));
    umem_rec& rec = dbr(dbr_id, dbr_off, p, "cq_context.dbr_umem_id", "cq_context.dbr_addr");
    if (dev.cqs.size() >= (std::size_t{1} << g.log_max_cq))
      reject(k::MLX5_CMD_STAT_NO_RES_ERR, p + "cqn", "the device has 2^log_max_cq CQs already");
    while (dev.cqs.count(dev.next_cqn) || dev.next_cqn == 0) dev.next_cqn = (dev.next_cqn + 1) & 0xffffffu;
    std::uint32_t const cqn = dev.next_cqn++;
    dev.cqs[cqn] = cq_rec{m.context_,
                          static_cast<unsigned>(log_size),
                          cqe_bytes,
                          cc,
                          oi,
                          static_cast<std::uint32_t>(uar),
                          static_cast<std::uint32_t>(eqn),
                          static_cast<std::uint32_t>(buf_id),
                          static_cast<std::uint32_t>(dbr_id),
                          buf_off,
                          dbr_off};
    ++u.users, ++buf.users, ++rec.users;
    ifc::set(out, ifc::at(ifc::create_cq_out, "cqn"), cqn);
  }

  // ---- CREATE_QP ---------------------------------------------------------------------------------------
  void create_qp(void const* in, void* out) {
    constexpr auto& s = ifc::create_qp_in;
    auto get = [&](ifc::field f) { return ifc::get(in, f); };
    std::string const p = "create_qp_in.";
    general_caps const& g = caps().general;
    if (get(ifc::at(s, "qpc_ext")))
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc_ext", "qpc_ext = 1: the model has no QPC extension");
    if (get(ifc::at(s, "input_qpn")))
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "input_qpn", "input_qpn: the model chooses QP numbers itself");
    auto const st = get(ifc::at(s, "qpc.st"));
    if (st != k::MLX5_QPC_ST_RC && st != k::MLX5_QPC_ST_UC && st != k::MLX5_QPC_ST_UD && st != k::MLX5_QPC_ST_XRC &&
        st != k::MLX5_QPC_ST_DCI && st != k::MLX5_QPC_ST_QP0 && st != k::MLX5_QPC_ST_QP1 &&
        st != k::MLX5_QPC_ST_RAW_DATAGRAM && st != k::MLX5_QPC_ST_REG_UMR)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.st", "qpc.st = " + hex(st) + " is no MLX5_QPC_ST_* value");
    if (st != k::MLX5_QPC_ST_RC)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.st", "qpc.st = " + hex(st) + ": the model implements RC only");
    if (!g.rc) reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.st", "RC QPs, but cmd_hca_cap.rc = 0");
    auto const pm = get(ifc::at(s, "qpc.pm_state"));
    if (pm == k::MLX5_QPC_PM_STATE_RESERVED)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.pm_state", "qpc.pm_state = 2 is reserved");
    auto const pdn = get(ifc::at(s, "qpc.pd"));
    pd_rec& pd = owned(dev.pds, pdn, p + "qpc.pd", "PD");

    bool const no_sq = get(ifc::at(s, "qpc.no_sq")) != 0;
    auto const rq_type = get(ifc::at(s, "qpc.rq_type"));
    if (rq_type > k::MLX5_ZERO_LEN_RQ)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.rq_type",
             "qpc.rq_type = " + std::to_string(rq_type) + " is undefined");
    if (rq_type == k::MLX5_SRQ_RQ || rq_type == k::MLX5_CRQ_RQ)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.rq_type",
             "qpc.rq_type = " + std::to_string(rq_type) + ": the model has regular and zero-length RQs only");
    bool const rq = rq_type == k::MLX5_NON_ZERO_RQ;
    auto const ts = get(ifc::at(s, "qpc.ts_format"));
    if (dev.roce()) check_ts(ts, caps().roce.qp_ts_format, p + "qpc.ts_format", "roce_cap.qp_ts_format");
    if (!no_sq) check_ts(ts, g.sq_ts_format, p + "qpc.ts_format", "cmd_hca_cap.sq_ts_format");
    if (rq) check_ts(ts, g.rq_ts_format, p + "qpc.ts_format", "cmd_hca_cap.rq_ts_format");

    auto const log_sq = get(ifc::at(s, "qpc.log_sq_size")), log_rq = get(ifc::at(s, "qpc.log_rq_size"));
    std::uint64_t sq_bytes = 0, rq_bytes = 0;
    if (!no_sq) {
      limit(log_sq, g.log_max_qp_sz, p + "qpc.log_sq_size", "qpc.log_sq_size", "cmd_hca_cap.log_max_qp_sz");
      sq_bytes = std::uint64_t{64} << log_sq;
    }
    if (rq) {
      limit(log_rq, g.log_max_qp_sz, p + "qpc.log_rq_size", "qpc.log_rq_size", "cmd_hca_cap.log_max_qp_sz");
      rq_bytes = (std::uint64_t{16} << get(ifc::at(s, "qpc.log_rq_stride"))) << log_rq;
    }
    auto const cqn_snd = get(ifc::at(s, "qpc.cqn_snd")), cqn_rcv = get(ifc::at(s, "qpc.cqn_rcv"));
    cq_rec* snd = nullptr;
    cq_rec* rcv = nullptr;
    if (!no_sq || cqn_snd) snd = &owned(dev.cqs, cqn_snd, p + "qpc.cqn_snd", "CQ");
    if (rq || cqn_rcv) rcv = &owned(dev.cqs, cqn_rcv, p + "qpc.cqn_rcv", "CQ");
    auto const uar = get(ifc::at(s, "qpc.uar_page"));
    uar_rec& u = owned(dev.uars, uar, p + "qpc.uar_page", "UAR page");
    // As for CQs, the kernel forces wq_umem_valid and dbr_umem_valid. The RQ comes first in the
    // work queue buffer, the SQ after it.
    auto const wq_id = get(ifc::at(s, "wq_umem_id")), wq_off = get(ifc::at(s, "wq_umem_offset"));
    umem_rec& wq = umem_range(wq_id, wq_off, rq_bytes + sq_bytes, p + "wq_umem_id", p + "wq_umem_offset",
                              "the work queue buffer (RQ then SQ)");
    page_aligned(wq, wq_id, wq_off, p + "wq_umem_offset", "the work queue buffer");
    auto const dbr_id = get(ifc::at(s, "qpc.dbr_umem_id")), dbr_off = get(ifc::at(s, "qpc.dbr_addr"));
    umem_rec& rec = dbr(dbr_id, dbr_off, p, "qpc.dbr_umem_id", "qpc.dbr_addr");
    if (dev.qps.size() >= (std::size_t{1} << g.log_max_qp))
      reject(k::MLX5_CMD_STAT_NO_RES_ERR, p + "qpn", "the device has 2^log_max_qp QPs already");

    std::uint32_t qpn = 0;
    do {
      qpn = fab.next_qpn;
      fab.next_qpn = fab.next_qpn >= 0xfffffeu ? 0x100 : fab.next_qpn + 1;
    } while (std::any_of(fab.devices.begin(), fab.devices.end(), [&](auto const& d) { return d->qps.count(qpn); }));
    qp_rec q{};
    q.owner = m.context_;
    q.pd = static_cast<std::uint32_t>(pdn);
    q.cqn_snd = snd ? static_cast<std::uint32_t>(cqn_snd) : 0;
    q.cqn_rcv = rcv ? static_cast<std::uint32_t>(cqn_rcv) : 0;
    q.uar_page = static_cast<std::uint32_t>(uar);
    q.wq_umem = static_cast<std::uint32_t>(wq_id);
    q.dbr_umem = static_cast<std::uint32_t>(dbr_id);
    q.wq_offset = wq_off;
    q.dbr_offset = dbr_off;
    q.log_sq_size = static_cast<unsigned>(log_sq);
    q.log_rq_size = static_cast<unsigned>(log_rq);
    q.rq_type = static_cast<unsigned>(rq_type);
    q.no_sq = no_sq;
    dev.qps[qpn] = q;
    ++pd.users, ++u.users, ++wq.users, ++rec.users;
    if (snd) ++snd->users;
    if (rcv) ++rcv->users;
    ifc::set(out, ifc::at(ifc::create_qp_out, "qpn"), qpn);
  }

  // ---- QP state transitions -----------------------------------------------------------------------------
  qp_rec& qp_in_state(std::uint64_t qpn, qp_state want, std::string const& p, char const* command) {
    qp_rec& q = owned(dev.qps, qpn, p + "qpn", "QP");
    if (q.state != want)
      reject(k::MLX5_CMD_STAT_BAD_RES_STATE_ERR, p + "qpn",
             std::string("QP ") + hex(qpn) + " is in " + state_name(q.state) + "; " + command + " needs " +
                 state_name(want));
    return q;
  }
  /// opt_param_mask against the optional parameters the kernel allows for an RC transition
  /// (mlx5_ib's opt_mask table); the alternate path (APM) is not modelled.
  void check_opt(std::uint64_t mask, std::uint64_t allowed, std::string const& p) {
    if (mask & k::MLX5_QP_OPTPAR_ALT_ADDR_PATH & allowed)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "opt_param_mask",
             "opt_param_mask asks for an alternate path: the model has no automatic path migration");
    if (mask & ~allowed)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "opt_param_mask",
             "opt_param_mask = " + hex(mask) + " names parameters this transition does not take (" +
                 hex(mask & ~allowed) + ")");
  }
  /// The QP state transitions share one layout (the generator wrote one table for the three), so
  /// their common fields are read through one of them.
  static constexpr ifc::structure const& qp_modify = ifc::init2rtr_qp_in;
  static_assert(ifc::rst2init_qp_in.fields.data() == qp_modify.fields.data() &&
                    ifc::rtr2rts_qp_in.fields.data() == qp_modify.fields.data(),
                "RST2INIT, INIT2RTR and RTR2RTS no longer share a layout");

  /// The access flags and atomic mode of a transition that takes them (RST2INIT always, the others
  /// under their opt_param_mask bits).
  void read_access(void const* in, qp_rec& q, std::uint64_t opt, bool all, std::string const& p) {
    bool const atomics = all || (opt & k::MLX5_QP_OPTPAR_RAE);
    bool const rae = atomics ? ifc::get(in, ifc::at(qp_modify, "qpc.rae")) != 0 : q.rae;
    std::uint64_t const mode = atomics ? ifc::get(in, ifc::at(qp_modify, "qpc.atomic_mode")) : q.atomic_mode;
    check_atomics(rae, mode, p);
    if (all || (opt & k::MLX5_QP_OPTPAR_RRE)) q.rre = ifc::get(in, ifc::at(qp_modify, "qpc.rre")) != 0;
    if (all || (opt & k::MLX5_QP_OPTPAR_RWE)) q.rwe = ifc::get(in, ifc::at(qp_modify, "qpc.rwe")) != 0;
    q.rae = rae;
    q.atomic_mode = static_cast<unsigned>(mode);
  }
  void check_pm_state(void const* in, std::string const& p) {
    if (ifc::get(in, ifc::at(qp_modify, "qpc.pm_state")) == k::MLX5_QPC_PM_STATE_RESERVED)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.pm_state", "qpc.pm_state = 2 is reserved");
  }

  void rst2init(void const* in) {
    constexpr auto& s = ifc::rst2init_qp_in;
    std::string const p = "rst2init_qp_in.";
    qp_rec& q = qp_in_state(ifc::get(in, ifc::at(s, "qpn")), qp_state::reset, p, "RST2INIT");
    check_opt(ifc::get(in, ifc::at(s, "opt_param_mask")), 0, p);
    check_pm_state(in, p);
    auto const port = ifc::get(in, ifc::at(s, "qpc.primary_address_path.vhca_port_num"));
    if (port < 1 || port > dev.cfg.ports.size())
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.primary_address_path.vhca_port_num",
             "vhca_port_num = " + std::to_string(port) + ": the device has ports 1 to " +
                 std::to_string(dev.cfg.ports.size()));
    port_config const& pc = dev.cfg.ports[port - 1];
    auto const pkey = ifc::get(in, ifc::at(s, "qpc.primary_address_path.pkey_index"));
    if (pkey >= pc.pkey_table_length)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.primary_address_path.pkey_index",
             "pkey_index = " + std::to_string(pkey) + " is past the port's P_Key table (" +
                 std::to_string(pc.pkey_table_length) + " entries)");
    qp_rec next = q;
    read_access(in, next, 0, true, p);
    next.port = static_cast<std::uint8_t>(port);
    next.pkey_index = static_cast<std::uint16_t>(pkey);
    next.state = qp_state::init;
    q = next;
  }

  struct port_ref {
    std::size_t device;
    std::uint8_t port;  ///< 1-based
  };
  std::optional<port_ref> port_by_lid(std::uint64_t lid) const {
    for (std::size_t d = 0; d < fab.devices.size(); ++d)
      for (std::size_t p = 0; p < fab.devices[d]->cfg.ports.size(); ++p) {
        port_config const& pc = fab.devices[d]->cfg.ports[p];
        if (!pc.ethernet && pc.lid == lid) return port_ref{d, static_cast<std::uint8_t>(p + 1)};
      }
    return std::nullopt;
  }
  std::optional<port_ref> port_by_gid(std::uint8_t const (&gid)[16], host::gid_type type) const {
    for (std::size_t d = 0; d < fab.devices.size(); ++d)
      for (std::size_t p = 0; p < fab.devices[d]->cfg.ports.size(); ++p)
        for (host::gid_entry const& e : fab.devices[d]->cfg.ports[p].gids)
          if (e.type == type && std::memcmp(e.gid, gid, 16) == 0) return port_ref{d, static_cast<std::uint8_t>(p + 1)};
    return std::nullopt;
  }
  std::size_t device_index() const { return m.device_; }

  void init2rtr(void const* in) {
    constexpr auto& s = ifc::init2rtr_qp_in;
    auto get = [&](ifc::field f) { return ifc::get(in, f); };
    std::string const p = "init2rtr_qp_in.";
    std::string const ap = p + "qpc.primary_address_path.";
    auto const qpn = get(ifc::at(s, "qpn"));
    qp_rec& q = qp_in_state(qpn, qp_state::init, p, "INIT2RTR");
    auto const opt = get(ifc::at(s, "opt_param_mask"));
    check_opt(opt,
              k::MLX5_QP_OPTPAR_ALT_ADDR_PATH | k::MLX5_QP_OPTPAR_RRE | k::MLX5_QP_OPTPAR_RAE | k::MLX5_QP_OPTPAR_RWE |
                  k::MLX5_QP_OPTPAR_PKEY_INDEX | k::MLX5_QP_OPTPAR_LAG_TX_AFF,
              p);
    qp_rec next = q;
    auto const port = get(ifc::at(s, "qpc.primary_address_path.vhca_port_num"));
    if (port != 0 && port != q.port)
      reject(
          k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "vhca_port_num",
          "vhca_port_num = " + std::to_string(port) + " but RST2INIT bound the QP to port " + std::to_string(q.port));
    port_config const& pc = dev.cfg.ports[q.port - 1];
    if (opt & k::MLX5_QP_OPTPAR_PKEY_INDEX) {
      auto const pkey = get(ifc::at(s, "qpc.primary_address_path.pkey_index"));
      if (pkey >= pc.pkey_table_length)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "pkey_index",
               "pkey_index = " + std::to_string(pkey) + " is past the port's P_Key table");
      next.pkey_index = static_cast<std::uint16_t>(pkey);
    }
    read_access(in, next, opt, false, p);
    auto const mtu = get(ifc::at(s, "qpc.mtu"));
    if (mtu < k::MLX5_QPC_MTU_256_BYTES || mtu > k::MLX5_QPC_MTU_4K_BYTES)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.mtu",
             "qpc.mtu = " + std::to_string(mtu) + " is no path MTU of an RC QP (MLX5_QPC_MTU_*: 1 to 5)");
    if (mtu > pc.active_mtu)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.mtu",
             "qpc.mtu = " + std::to_string(mtu) + " exceeds port " + std::to_string(q.port) + "'s active MTU " +
                 std::to_string(pc.active_mtu));
    auto const log_msg_max = get(ifc::at(s, "qpc.log_msg_max"));
    limit(log_msg_max, caps().general.log_max_msg, p + "qpc.log_msg_max", "qpc.log_msg_max", "cmd_hca_cap.log_max_msg");
    auto const log_rra = get(ifc::at(s, "qpc.log_rra_max"));
    limit(log_rra, caps().general.log_max_ra_res_qp, p + "qpc.log_rra_max", "qpc.log_rra_max",
          "cmd_hca_cap.log_max_ra_res_qp");
    next.mtu = static_cast<unsigned>(mtu);
    next.log_msg_max = static_cast<unsigned>(log_msg_max);
    next.log_rra_max = static_cast<unsigned>(log_rra);
    next.next_rcv_psn = static_cast<std::uint32_t>(get(ifc::at(s, "qpc.next_rcv_psn")));
    next.remote_qpn = static_cast<std::uint32_t>(get(ifc::at(s, "qpc.remote_qpn")));

    // ---- the primary path: it must lead to a port of the fabric (model checks from here on,
    // unless said otherwise: hardware would accept the path and fail at run time) --------------------
    next.grh = get(ifc::at(s, "qpc.primary_address_path.grh")) != 0;
    next.rlid = static_cast<std::uint16_t>(get(ifc::at(s, "qpc.primary_address_path.rlid")));
    ifc::get_bytes(in, ifc::at(s, "qpc.primary_address_path.rgid_rip"), next.rgid);
    ifc::get_bytes(in, ifc::at(s, "qpc.primary_address_path.rmac"), next.rmac);
    std::optional<port_ref> peer_port;
    host::gid_type sgid_type = host::gid_type::empty;
    if (next.grh || pc.ethernet) {
      auto const sgid = get(ifc::at(s, "qpc.primary_address_path.src_addr_index"));
      if (sgid >= pc.gids.size() || pc.gids[sgid].type == host::gid_type::empty)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "src_addr_index",
               "src_addr_index = " + std::to_string(sgid) + " is no filled entry of port " + std::to_string(q.port) +
                   "'s GID table (" + std::to_string(pc.gids.size()) + " entries)");
      sgid_type = pc.gids[sgid].type;
    }
    if (pc.ethernet) {
      // RoCE packets always carry a GRH; the path's grh bit is InfiniBand's "add a GRH" and is
      // reserved on RoCE (rdma-core's mlx5_create_ah; the kernel's mlx5_set_path sets it for IB only).
      if (next.grh)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "grh",
               "(model check) grh = 1 on a RoCE port: the bit is reserved for RoCE (every RoCE packet has a GRH; "
               "rdma-core and the kernel leave it 0)");
      peer_port = port_by_gid(next.rgid, sgid_type);
      if (!peer_port)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "rgid_rip",
               "(model check) rgid " + gid_text(next.rgid) + " is no GID of that type on any port of the fabric");
      host::ah_info const mac = firmware_model::mac_of(next.rgid);
      if (std::memcmp(mac.rmac, next.rmac, 6) != 0)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "rmac",
               "(model check) rmac is not the MAC of the port holding rgid (resolve_ah gives it)");
    } else {
      peer_port = port_by_lid(next.rlid);
      if (!peer_port)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "rlid",
               "(model check) rlid " + hex(next.rlid) + " is the LID of no InfiniBand port of the fabric");
      if (next.grh) {
        port_config const& rp = fab.devices[peer_port->device]->cfg.ports[peer_port->port - 1];
        bool const found = std::any_of(rp.gids.begin(), rp.gids.end(), [&](host::gid_entry const& e) {
          return e.type == host::gid_type::ib && std::memcmp(e.gid, next.rgid, 16) == 0;
        });
        if (!found)
          reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, ap + "rgid_rip",
                 "(model check) rgid " + gid_text(next.rgid) + " is no GID of the port with LID " + hex(next.rlid));
      }
    }
    device_state& pdev = *fab.devices[peer_port->device];
    port_config const& rp = pdev.cfg.ports[peer_port->port - 1];
    std::string const where = pdev.cfg.name + " port " + std::to_string(peer_port->port);
    if (mtu > rp.active_mtu)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.mtu",
             "(model check) qpc.mtu = " + std::to_string(mtu) + " exceeds the active MTU of " + where);
    if (pdev.cfg.remote) {
      // Another process models that device and its QPs: it checks the peer's side of the pair.
      next.peer_device = peer_port->device;
      next.state = qp_state::rtr;
      q = next;
      return;
    }
    auto pit = pdev.qps.find(next.remote_qpn);
    if (pit == pdev.qps.end()) {
      std::string elsewhere;
      for (auto const& d : fab.devices)
        if (d->qps.count(next.remote_qpn)) elsewhere = " (it is a QP of " + d->cfg.name + ")";
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.remote_qpn",
             "(model check) remote_qpn " + hex(next.remote_qpn) + " is no QP of " + where + ", where the path leads" +
                 elsewhere);
    }
    qp_rec const& peer = pit->second;
    if (peer.port != 0 && peer.port != peer_port->port)
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.remote_qpn",
             "(model check) remote_qpn " + hex(next.remote_qpn) + " is bound to port " + std::to_string(peer.port) +
                 " of " + pdev.cfg.name + ", the path leads to port " + std::to_string(peer_port->port));
    bool const self = &peer == &q;
    if (!self && (peer.state == qp_state::rtr || peer.state == qp_state::rts) &&
        (peer.remote_qpn != qpn || peer.peer_device != device_index()))
      reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.remote_qpn",
             "(model check) QP " + hex(next.remote_qpn) + " is connected to QP " + hex(peer.remote_qpn) +
                 ", not to this one");
    if (!self && peer.state == qp_state::rts) {
      if (peer.next_send_psn != next.next_rcv_psn)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.next_rcv_psn",
               "(model check) next_rcv_psn = " + hex(next.next_rcv_psn) + " but the peer QP sends from PSN " +
                   hex(peer.next_send_psn));
      if (peer.log_sra_max > next.log_rra_max)
        reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.log_rra_max",
               "(model check) log_rra_max = " + std::to_string(next.log_rra_max) +
                   " is below the peer's log_sra_max = " + std::to_string(peer.log_sra_max));
    }
    next.peer_device = peer_port->device;
    next.state = qp_state::rtr;
    q = next;
  }

  void rtr2rts(void const* in) {
    constexpr auto& s = ifc::rtr2rts_qp_in;
    auto get = [&](ifc::field f) { return ifc::get(in, f); };
    std::string const p = "rtr2rts_qp_in.";
    qp_rec& q = qp_in_state(get(ifc::at(s, "qpn")), qp_state::rtr, p, "RTR2RTS");
    auto const opt = get(ifc::at(s, "opt_param_mask"));
    check_opt(opt,
              k::MLX5_QP_OPTPAR_ALT_ADDR_PATH | k::MLX5_QP_OPTPAR_RRE | k::MLX5_QP_OPTPAR_RAE | k::MLX5_QP_OPTPAR_RWE |
                  k::MLX5_QP_OPTPAR_PM_STATE | k::MLX5_QP_OPTPAR_RNR_TIMEOUT,
              p);
    if (opt & k::MLX5_QP_OPTPAR_PM_STATE) check_pm_state(in, p);
    qp_rec next = q;
    read_access(in, next, opt, false, p);
    auto const log_sra = get(ifc::at(s, "qpc.log_sra_max"));
    limit(log_sra, caps().general.log_max_ra_req_qp, p + "qpc.log_sra_max", "qpc.log_sra_max",
          "cmd_hca_cap.log_max_ra_req_qp");
    next.log_sra_max = static_cast<unsigned>(log_sra);
    next.next_send_psn = static_cast<std::uint32_t>(get(ifc::at(s, "qpc.next_send_psn")));
    // The other end, if it still exists and has a receive side: its expected PSN and responder
    // depth must match what this side sends (model checks).
    if (next.peer_device < fab.devices.size()) {
      auto& pq = fab.devices[next.peer_device]->qps;
      auto it = pq.find(next.remote_qpn);
      if (it != pq.end()) {
        qp_rec const& peer = &it->second == &q ? next : it->second;
        if (peer.state == qp_state::rtr || peer.state == qp_state::rts) {
          if (peer.next_rcv_psn != next.next_send_psn)
            reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.next_send_psn",
                   "(model check) next_send_psn = " + hex(next.next_send_psn) + " but the peer QP expects PSN " +
                       hex(peer.next_rcv_psn));
          if (next.log_sra_max > peer.log_rra_max)
            reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, p + "qpc.log_sra_max",
                   "(model check) log_sra_max = " + std::to_string(next.log_sra_max) +
                       " exceeds the peer's log_rra_max = " + std::to_string(peer.log_rra_max));
        }
      }
    }
    next.state = qp_state::rts;
    q = next;
  }

  void to_reset_or_error(void const* in, bool reset) {
    constexpr auto& s = ifc::qp_2rst_in;  // qp_2err_in has the same layout (one generated table)
    static_assert(ifc::qp_2rst_in.fields.data() == ifc::qp_2err_in.fields.data());
    qp_rec& q = owned(dev.qps, ifc::get(in, ifc::at(s, "qpn")), reset ? "qp_2rst_in.qpn" : "qp_2err_in.qpn", "QP");
    if (reset) {
      qp_rec fresh = q;
      fresh.state = qp_state::reset;
      fresh.port = 0;
      fresh.remote_qpn = fresh.next_rcv_psn = fresh.next_send_psn = 0;
      fresh.peer_device = static_cast<std::size_t>(-1);
      q = fresh;
    } else {
      q.state = qp_state::error;
    }
  }

  void release_qp(std::uint32_t qpn) {
    qp_rec& q = dev.qps.at(qpn);
    auto drop = [](auto& map, std::uint32_t id) {
      auto it = map.find(id);
      if (it != map.end()) --it->second.users;
    };
    drop(dev.pds, q.pd);
    drop(dev.uars, q.uar_page);
    drop(dev.umems, q.wq_umem);
    drop(dev.umems, q.dbr_umem);
    if (q.cqn_snd) drop(dev.cqs, q.cqn_snd);
    if (q.cqn_rcv) drop(dev.cqs, q.cqn_rcv);
    dev.qps.erase(qpn);
  }
  void release_cq(std::uint32_t cqn) {
    cq_rec& c = dev.cqs.at(cqn);
    auto drop = [](auto& map, std::uint32_t id) {
      auto it = map.find(id);
      if (it != map.end()) --it->second.users;
    };
    drop(dev.uars, c.uar_page);
    drop(dev.umems, c.umem);
    drop(dev.umems, c.dbr_umem);
    dev.cqs.erase(cqn);
  }
  void destroy_qp(void const* in) {
    std::uint64_t const qpn = ifc::get(in, ifc::at(ifc::destroy_qp_in, "qpn"));
    owned(dev.qps, qpn, "destroy_qp_in.qpn", "QP");
    release_qp(static_cast<std::uint32_t>(qpn));
  }
  void destroy_cq(void const* in) {
    std::uint64_t const cqn = ifc::get(in, ifc::at(ifc::destroy_cq_in, "cqn"));
    cq_rec& c = owned(dev.cqs, cqn, "destroy_cq_in.cqn", "CQ");
    if (c.users)
      reject(k::MLX5_CMD_STAT_BAD_RES_STATE_ERR, "destroy_cq_in.cqn",
             "CQ " + hex(cqn) + " still has " + std::to_string(c.users) + " QP(s) completing to it");
    release_cq(static_cast<std::uint32_t>(cqn));
  }

  // ---- dispatch ----------------------------------------------------------------------------------------
  struct command {
    std::uint32_t opcode;
    char const* name;
    call via;
    ifc::structure const* in;
    ifc::structure const* out;
  };
  static command const* find(std::uint32_t opcode) {
    static command const table[] = {
        {k::MLX5_CMD_OP_QUERY_HCA_CAP, "QUERY_HCA_CAP", call::general, &ifc::query_hca_cap_in, &ifc::query_hca_cap_out},
        {k::MLX5_CMD_OP_CREATE_CQ, "CREATE_CQ", call::create, &ifc::create_cq_in, &ifc::create_cq_out},
        {k::MLX5_CMD_OP_DESTROY_CQ, "DESTROY_CQ", call::destroy, &ifc::destroy_cq_in, &ifc::destroy_cq_out},
        {k::MLX5_CMD_OP_CREATE_QP, "CREATE_QP", call::create, &ifc::create_qp_in, &ifc::create_qp_out},
        {k::MLX5_CMD_OP_DESTROY_QP, "DESTROY_QP", call::destroy, &ifc::destroy_qp_in, &ifc::destroy_qp_out},
        {k::MLX5_CMD_OP_RST2INIT_QP, "RST2INIT_QP", call::modify, &ifc::rst2init_qp_in, &ifc::rst2init_qp_out},
        {k::MLX5_CMD_OP_INIT2RTR_QP, "INIT2RTR_QP", call::modify, &ifc::init2rtr_qp_in, &ifc::init2rtr_qp_out},
        {k::MLX5_CMD_OP_RTR2RTS_QP, "RTR2RTS_QP", call::modify, &ifc::rtr2rts_qp_in, &ifc::rtr2rts_qp_out},
        {k::MLX5_CMD_OP_2RST_QP, "2RST_QP", call::modify, &ifc::qp_2rst_in, &ifc::qp_2rst_out},
        {k::MLX5_CMD_OP_2ERR_QP, "2ERR_QP", call::modify, &ifc::qp_2err_in, &ifc::qp_2err_out},
    };
    for (command const& c : table)
      if (c.opcode == opcode) return &c;
    return nullptr;
  }
  static char const* via_name(call c) {
    switch (c) {
      case call::general:
        return "general_cmd";
      case call::create:
        return "obj_create";
      case call::modify:
        return "obj_modify";
      case call::destroy:
        return "obj_destroy";
    }
    return "?";
  }

  /// Runs one command: 0, EREMOTEIO with the firmware's verdict in `out`, or another errno value
  /// for a refusal before firmware. `target`: the object of obj_modify / obj_destroy; `created`:
  /// the number of what obj_create made.
  int run(call via, handle_rec const* target, void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
          std::uint32_t* created) {
    if (in == nullptr || out == nullptr || out_bytes < 8)
      refuse(EINVAL, std::string(via_name(via)) + ": the output must hold at least status and syndrome (8 bytes)");
    std::memset(out, 0, std::min<std::size_t>(out_bytes, 16));
    std::string name = "command";
    try {
      if (in_bytes < 8)
        reject(k::MLX5_CMD_STAT_BAD_INP_LEN_ERR, "cmd.in_length",
               std::to_string(in_bytes) + " input bytes do not hold the command header (8 bytes)");
      auto const opcode = static_cast<std::uint32_t>(ifc::get(in, ifc::in_opcode));
      command const* c = find(opcode);
      if (c == nullptr)
        reject(k::MLX5_CMD_STAT_BAD_OP_ERR, "cmd.opcode",
               "opcode " + hex(opcode) +
                   " is no command the model implements (QUERY_HCA_CAP, CREATE_CQ, CREATE_QP, "
                   "RST2INIT_QP, INIT2RTR_QP, RTR2RTS_QP, 2RST_QP, 2ERR_QP)");
      name = c->name;
      if (c->via != via)
        refuse(EINVAL, name + " through " + via_name(via) + ": the kernel's DEVX layer takes it only through " +
                           via_name(c->via));
      if (in_bytes < ifc::bytes(*c->in))
        reject(k::MLX5_CMD_STAT_BAD_INP_LEN_ERR, "cmd.in_length",
               std::to_string(in_bytes) + " input bytes; " + std::string(c->in->name) + " is " +
                   std::to_string(ifc::bytes(*c->in)));
      if (out_bytes < ifc::bytes(*c->out))
        reject(k::MLX5_CMD_STAT_BAD_OUTP_LEN_ERR, "cmd.out_length",
               std::to_string(out_bytes) + " output bytes; " + std::string(c->out->name) + " is " +
                   std::to_string(ifc::bytes(*c->out)));
      if (via == call::modify) {
        // The kernel checks that a modify command names the object it is issued on
        // (devx_is_valid_obj_id) before firmware sees it.
        auto const qpn = ifc::get(in, ifc::member(*c->in, "qpn"));
        if (target->what != handle_rec::kind::qp || target->id != qpn)
          refuse(EINVAL, name + " names QP " + hex(qpn) + ", but obj_modify was called on another object");
      }
      for (ifc::field const& r : c->in->reserved) {
        long const at = ifc::first_set(in, r);
        if (at >= 0)
          reject(k::MLX5_CMD_STAT_BAD_PARAM_ERR, std::string(c->in->name) + "." + std::string(r.path),
                 "reserved bit " + hex(r.bit + static_cast<std::uint64_t>(at)) + " (in " + std::string(r.path) +
                     ") is set");
      }
      std::memset(out, 0, ifc::bytes(*c->out));
      switch (opcode) {
        case k::MLX5_CMD_OP_QUERY_HCA_CAP:
          query_hca_cap(in, out);
          break;
        case k::MLX5_CMD_OP_CREATE_CQ:
          create_cq(in, out);
          break;
        case k::MLX5_CMD_OP_CREATE_QP:
          create_qp(in, out);
          break;
        case k::MLX5_CMD_OP_RST2INIT_QP:
          rst2init(in);
          break;
        case k::MLX5_CMD_OP_INIT2RTR_QP:
          init2rtr(in);
          break;
        case k::MLX5_CMD_OP_RTR2RTS_QP:
          rtr2rts(in);
          break;
        case k::MLX5_CMD_OP_2RST_QP:
          to_reset_or_error(in, true);
          break;
        case k::MLX5_CMD_OP_2ERR_QP:
          to_reset_or_error(in, false);
          break;
        case k::MLX5_CMD_OP_DESTROY_QP:
          destroy_qp(in);
          break;
        case k::MLX5_CMD_OP_DESTROY_CQ:
          destroy_cq(in);
          break;
        default:
          break;
      }
      if (created != nullptr)
        *created = static_cast<std::uint32_t>(
            ifc::get(out, ifc::member(*c->out, opcode == k::MLX5_CMD_OP_CREATE_CQ ? "cqn" : "qpn")));
      return 0;
    } catch (verdict const& v) {
      std::memset(out, 0, std::min<std::size_t>(out_bytes, 16));
      ifc::set(out, ifc::out_status, v.status);
      ifc::set(out, ifc::out_syndrome, firmware_model::syndrome_of(v.check));
      m.last_error_ = name + ": " + v.reason + " [status " + hex(v.status) + " " + status_name(v.status) +
                      ", syndrome " + hex(firmware_model::syndrome_of(v.check)) + " = " + v.check + "]";
      return EREMOTEIO;
    }
  }

  // ---- handles -----------------------------------------------------------------------------------------
  handle_rec* handle(void const* impl, std::initializer_list<handle_rec::kind> kinds, char const* what) {
    for (auto const& h : m.handles_)
      if (h.get() == impl && std::find(kinds.begin(), kinds.end(), h->what) != kinds.end()) return h.get();
    refuse(EINVAL, std::string(what) + ": not a live handle of this context");
  }
  handle_rec* make_handle(handle_rec::kind what, std::uint32_t id) {
    m.handles_.push_back(std::make_unique<handle_rec>(handle_rec{what, id}));
    return m.handles_.back().get();
  }
  void drop_handle(handle_rec const* h) {
    m.handles_.erase(std::find_if(m.handles_.begin(), m.handles_.end(), [&](auto const& p) { return p.get() == h; }));
  }
  /// An object released while in use: firmware refuses, the backend call has no way to say so.
  void lifetime_error(std::string reason) {
    ++m.lifetime_errors_;
    m.last_error_ = std::move(reason) + " (kept until the context closes)";
  }

  /// Runs `fn(engine)` under the fabric's lock with the device open; refusals become errno values.
  template <class Fn>
  static int guarded(firmware_model& m, Fn&& fn) {
    std::lock_guard<std::mutex> lock(m.fabric_.state_->mutex);
    m.last_error_.clear();
    try {
      if (m.device_ >= m.fabric_.state_->devices.size()) refuse(ENODEV, "no device is open: call open() first");
      firmware_engine e{m, *m.fabric_.state_, *m.fabric_.state_->devices[m.device_]};
      return fn(e);
    } catch (refusal const& r) {
      m.last_error_ = r.reason;
      return r.error;
    }
  }

  /// Releases everything this context still holds, users before what they use (a process exit).
  void release_all() {
    std::uint64_t const me = m.context_;
    for (auto it = dev.qps.begin(); it != dev.qps.end();) {
      auto const qpn = it++->first;
      if (dev.qps.at(qpn).owner == me) release_qp(qpn);
    }
    for (auto it = dev.cqs.begin(); it != dev.cqs.end();) {
      auto const cqn = it++->first;
      if (dev.cqs.at(cqn).owner == me) release_cq(cqn);
    }
    auto erase_owned = [me](auto& map) {
      for (auto it = map.begin(); it != map.end();) it = it->second.owner == me ? map.erase(it) : std::next(it);
    };
    erase_owned(dev.mrs);
    erase_owned(dev.uars);
    erase_owned(dev.umems);
    erase_owned(dev.pds);
    dev.nc_uar.erase(me);
    m.handles_.clear();
  }
};

}  // namespace detail
}  // namespace gpucomm::verbs_gpu::model

namespace gpucomm::verbs_gpu::model {

// ---- ports -----------------------------------------------------------------------------------------
inline port_config port_config::infiniband(std::uint16_t lid, std::uint64_t guid) {
  port_config p;
  p.ethernet = false;
  p.lid = lid;
  p.pkey_table_length = 128;
  p.gids.resize(4);
  p.gids[0].type = host::gid_type::ib;
  p.gids[0].gid[0] = 0xfe;
  p.gids[0].gid[1] = 0x80;
  for (int i = 0; i < 8; ++i) p.gids[0].gid[8 + i] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
  return p;
}

inline port_config port_config::roce(std::uint32_t ipv4, std::uint64_t interface_id) {
  port_config p;
  p.ethernet = true;
  p.lid = 0;
  p.pkey_table_length = 1;
  p.gids.resize(8);
  host::gid_type const types[2] = {host::gid_type::roce_v1, host::gid_type::roce_v2};
  for (int v = 0; v < 2; ++v) {
    host::gid_entry& link_local = p.gids[v];
    link_local.type = types[v];
    link_local.gid[0] = 0xfe;
    link_local.gid[1] = 0x80;
    for (int i = 0; i < 8; ++i) link_local.gid[8 + i] = static_cast<std::uint8_t>(interface_id >> (56 - 8 * i));
    host::gid_entry& mapped = p.gids[2 + v];
    mapped.type = types[v];
    mapped.gid[10] = mapped.gid[11] = 0xff;
    for (int i = 0; i < 4; ++i) mapped.gid[12 + i] = static_cast<std::uint8_t>(ipv4 >> (24 - 8 * i));
  }
  return p;
}

// ---- firmware_fabric -------------------------------------------------------------------------------------
inline firmware_fabric::firmware_fabric() : state_(std::make_shared<detail::fabric_state>()) {}

inline firmware_fabric::firmware_fabric(std::vector<firmware_config> devices) : firmware_fabric() {
  for (firmware_config& d : devices) add_device(std::move(d));
}

inline void firmware_fabric::add_device(firmware_config config) {
  detail::validate_config(config);
  auto dev = std::make_unique<detail::device_state>();
  dev->cfg = std::move(config);
  // Encode every capability page once: a configured value too wide for its field throws here.
  std::vector<unsigned char> scratch(detail::ifc::bytes(detail::ifc::query_hca_cap_out));
  for (hca_caps const* c : {static_cast<hca_caps const*>(&dev->cfg.caps), &dev->max_caps()})
    for (std::uint32_t type : {detail::k::MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE,
                               detail::k::MLX5_SET_HCA_CAP_OP_MOD_ATOMIC, detail::k::MLX5_SET_HCA_CAP_OP_MOD_ROCE})
      detail::encode_caps(*dev, *c, type, scratch.data());

  std::lock_guard<std::mutex> lock(state_->mutex);
  // Names, IB LIDs and GIDs must each lead to one place: RTR's path checks find ports by them.
  std::vector<detail::device_state const*> all;
  for (auto const& d : state_->devices) all.push_back(d.get());
  all.push_back(dev.get());
  for (std::size_t a = 0; a < all.size(); ++a)
    for (std::size_t b = a; b < all.size(); ++b) {
      if (a != b && all[a]->cfg.name == all[b]->cfg.name)
        throw std::invalid_argument("firmware_fabric: two devices named " + all[a]->cfg.name);
      for (std::size_t pa = 0; pa < all[a]->cfg.ports.size(); ++pa)
        for (std::size_t pb = (a == b ? pa + 1 : 0); pb < all[b]->cfg.ports.size(); ++pb) {
          port_config const& x = all[a]->cfg.ports[pa];
          port_config const& y = all[b]->cfg.ports[pb];
          std::string const where = all[a]->cfg.name + " port " + std::to_string(pa + 1) + " and " + all[b]->cfg.name +
                                    " port " + std::to_string(pb + 1);
          if (!x.ethernet && !y.ethernet && x.lid == y.lid)
            throw std::invalid_argument("firmware_fabric: " + where + " have the same LID");
          for (host::gid_entry const& gx : x.gids)
            for (host::gid_entry const& gy : y.gids)
              if (gx.type != host::gid_type::empty && gx.type == gy.type && std::memcmp(gx.gid, gy.gid, 16) == 0)
                throw std::invalid_argument("firmware_fabric: " + where + " have the same GID");
        }
    }
  state_->devices.push_back(std::move(dev));
}

inline std::vector<host::device_entry> firmware_fabric::devices() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<host::device_entry> out;
  for (auto const& d : state_->devices)
    if (!d->cfg.remote) out.push_back({d->cfg.name, d->cfg.mlx5, d->cfg.pci_bus_id});
  return out;
}

// ---- firmware_model: discovery and queries ---------------------------------------------------------------
inline firmware_model::firmware_model(firmware_fabric fabric) : fabric_(std::move(fabric)) {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  context_ = fabric_.state_->next_context++;
}

inline firmware_model::firmware_model(firmware_config config)
    : firmware_model(firmware_fabric(std::vector<firmware_config>{std::move(config)})) {}

inline firmware_model::~firmware_model() {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  if (device_ < fabric_.state_->devices.size())
    detail::firmware_engine{*this, *fabric_.state_, *fabric_.state_->devices[device_]}.release_all();
}

inline std::vector<host::device_entry> firmware_model::devices() { return fabric_.devices(); }

inline int firmware_model::open(std::string const& name) {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  last_error_.clear();
  auto const& devs = fabric_.state_->devices;
  if (device_ < devs.size()) {
    last_error_ = "open(" + name + "): this context already has " + devs[device_]->cfg.name + " open";
    return EBUSY;
  }
  for (std::size_t i = 0; i < devs.size(); ++i)
    if (devs[i]->cfg.name == name && !devs[i]->cfg.remote) {
      if (!devs[i]->cfg.mlx5) {
        last_error_ = "open(" + name + "): not an mlx5 device (mlx5dv_open_device fails)";
        return EOPNOTSUPP;
      }
      device_ = i;
      return 0;
    }
  last_error_ = "open(" + name + "): no such device in the fabric";
  return ENODEV;
}

inline int firmware_model::query_port(std::uint8_t port, host::port_info* out) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    if (port < 1 || port > e.dev.cfg.ports.size() || out == nullptr)
      detail::refuse(EINVAL, "query_port(" + std::to_string(port) + "): no such port");
    port_config const& p = e.dev.cfg.ports[port - 1];
    *out = host::port_info{};
    out->active = p.active;
    out->ethernet = p.ethernet;
    out->lid = p.ethernet ? 0 : p.lid;
    out->active_mtu = p.active_mtu;
    out->gid_table_length = static_cast<int>(p.gids.size());
    out->pkey_table_length = p.pkey_table_length;
    return 0;
  });
}

inline int firmware_model::query_gid(std::uint8_t port, int index, host::gid_entry* out) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    if (port < 1 || port > e.dev.cfg.ports.size() || out == nullptr)
      detail::refuse(EINVAL, "query_gid: no port " + std::to_string(port));
    auto const& gids = e.dev.cfg.ports[port - 1].gids;
    if (index < 0 || static_cast<std::size_t>(index) >= gids.size())
      detail::refuse(EINVAL, "query_gid: index " + std::to_string(index) + " is past the GID table (" +
                                 std::to_string(gids.size()) + " entries)");
    *out = gids[static_cast<std::size_t>(index)];
    return 0;
  });
}

inline int firmware_model::query_device(host::device_info* out) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    if (out == nullptr) detail::refuse(EINVAL, "query_device: no output");
    hca_caps const& c = e.caps();
    namespace k = detail::k;
    // As mlx5_ib_query_device derives them (it reads the two log_max_ra_* the other way round from
    // their names; so does the model).
    *out = host::device_info{};
    out->max_qp_rd_atom = 1 << c.general.log_max_ra_req_qp;
    out->max_qp_init_rd_atom = 1 << c.general.log_max_ra_res_qp;
    std::uint32_t const both = k::MLX5_ATOMIC_OPS_CMP_SWAP | k::MLX5_ATOMIC_OPS_FETCH_ADD;
    out->atomics = c.general.atomic && (c.atomic.atomic_operations & both) == both &&
                   (c.atomic.atomic_size_qp & k::MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES) &&
                   c.atomic.atomic_req_8B_endianness_mode != 0;
    out->max_qp = 1 << c.general.log_max_qp;
    out->max_cq = 1 << c.general.log_max_cq;
    out->max_mr = 1 << c.general.log_max_mkey;
    return 0;
  });
}

inline int firmware_model::general_cmd(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    return e.run(detail::firmware_engine::call::general, nullptr, in, in_bytes, out, out_bytes, nullptr);
  });
}

// ---- firmware_model: objects ---------------------------------------------------------------------------
namespace detail {
template <class Map>
std::uint32_t next_free(Map const& map, std::uint32_t& next, std::uint32_t mask = 0xffffffu) {
  while (next == 0 || map.count(next)) next = (next + 1) & mask;
  return next++;
}
inline void set_error(int* error, int value) {
  if (error != nullptr) *error = value;
}
}  // namespace detail

inline host::pd_handle firmware_model::alloc_pd(int* error) {
  host::pd_handle pd;
  detail::set_error(error, detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
                      if (e.dev.pds.size() >= (std::size_t{1} << e.caps().general.log_max_pd))
                        detail::refuse(ENOMEM, "alloc_pd: the device has 2^log_max_pd PDs already");
                      std::uint32_t const pdn = detail::next_free(e.dev.pds, e.dev.next_pdn);
                      e.dev.pds[pdn] = detail::pd_rec{context_};
                      pd.impl = e.make_handle(detail::handle_rec::kind::pd, pdn);
                      pd.pdn = pdn;
                      return 0;
                    }));
  return pd;
}

inline void firmware_model::dealloc_pd(host::pd_handle pd) {
  detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h = e.handle(pd.impl, {detail::handle_rec::kind::pd}, "dealloc_pd");
    detail::pd_rec const& rec = e.dev.pds.at(h->id);
    if (rec.users)
      e.lifetime_error("dealloc_pd: PD " + detail::hex(h->id) + " still has " + std::to_string(rec.users) +
                       " QP(s) or MR(s)");
    else
      e.dev.pds.erase(h->id);
    e.drop_handle(h);
    return 0;
  });
}

inline host::umem_handle firmware_model::umem_reg(void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                                                  std::uint64_t page_size_bitmap, int* error) {
  host::umem_handle umem;
  detail::set_error(error, detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
                      if (bytes == 0) detail::refuse(EINVAL, "umem_reg: zero bytes");
                      if (addr == nullptr && dmabuf_fd < 0)
                        detail::refuse(EINVAL, "umem_reg: no address and no dma-buf");
                      if (page_size_bitmap != 0 && (page_size_bitmap >> 12) == 0)
                        detail::refuse(EINVAL, "umem_reg: page_size_bitmap " + detail::hex(page_size_bitmap) +
                                                   " allows no page size of 4 KiB or more");
                      if (e.dev.umems.size() >= (std::size_t{1} << e.caps().general.log_max_umem))
                        detail::refuse(ENOMEM, "umem_reg: the device has 2^log_max_umem UMEMs already");
                      std::uint32_t const id = detail::next_free(e.dev.umems, e.dev.next_umem);
                      e.dev.umems[id] = detail::umem_rec{context_,  reinterpret_cast<std::uintptr_t>(addr),
                                                         bytes,     access_flags,
                                                         dmabuf_fd, page_size_bitmap};
                      umem.impl = e.make_handle(detail::handle_rec::kind::umem, id);
                      umem.id = id;
                      return 0;
                    }));
  return umem;
}

inline void firmware_model::umem_dereg(host::umem_handle umem) {
  detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h = e.handle(umem.impl, {detail::handle_rec::kind::umem}, "umem_dereg");
    detail::umem_rec const& rec = e.dev.umems.at(h->id);
    if (rec.users)
      e.lifetime_error("umem_dereg: UMEM " + detail::hex(h->id) + " still holds " + std::to_string(rec.users) +
                       " CQ or QP buffer(s) or doorbell record(s)");
    else
      e.dev.umems.erase(h->id);
    e.drop_handle(h);
    return 0;
  });
}

inline host::uar_handle firmware_model::alloc_uar(host::uar_type type, int* error) {
  host::uar_handle uar;
  detail::set_error(error, detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
                      if (type == host::uar_type::nc_dedicated && !e.dev.cfg.nc_dedicated_uar)
                        detail::refuse(EOPNOTSUPP,
                                       "alloc_uar: the device has no dedicated non-cached UARs (use blue_flame)");
                      if (type == host::uar_type::blue_flame && !e.caps().general.bf)
                        detail::refuse(EOPNOTSUPP, "alloc_uar: the device has no BlueFlame (cmd_hca_cap.bf = 0)");
                      std::uint32_t page_id = 0;
                      auto shared = e.dev.nc_uar.find(context_);
                      if (type == host::uar_type::nc && shared != e.dev.nc_uar.end()) {
                        page_id = shared->second;
                      } else {
                        page_id = detail::next_free(e.dev.uars, e.dev.next_uar);
                        detail::uar_rec rec{context_, type, e.new_uar_page(), 8};
                        if (type == host::uar_type::blue_flame)
                          rec.reg_bytes = std::size_t{1} << e.caps().general.log_bf_reg_size;
                        e.dev.uars[page_id] = std::move(rec);
                        if (type == host::uar_type::nc) e.dev.nc_uar[context_] = page_id;
                      }
                      detail::uar_rec& rec = e.dev.uars.at(page_id);
                      ++rec.handles;
                      unsigned char* const base = rec.page;
                      uar.impl = e.make_handle(detail::handle_rec::kind::uar, page_id);
                      uar.page_id = page_id;
                      uar.base_addr = base;
                      uar.reg_addr = base + detail::uar_rec::reg_offset;
                      return 0;
                    }));
  return uar;
}

inline void firmware_model::free_uar(host::uar_handle uar) {
  detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h = e.handle(uar.impl, {detail::handle_rec::kind::uar}, "free_uar");
    detail::uar_rec& rec = e.dev.uars.at(h->id);
    e.drop_handle(h);
    if (--rec.handles > 0) return 0;
    // Still mapped: its host page is, and no other UAR page of this context keeps that page alive
    // (the kernel unmaps a UAR's memory a host page at a time, when its last UAR goes).
    detail::mapped_range const* range = e.mapped_range_of(reinterpret_cast<std::uintptr_t>(rec.page));
    bool const mapped = range != nullptr && std::none_of(e.dev.uars.begin(), e.dev.uars.end(), [&](auto const& u) {
                          auto const at = reinterpret_cast<std::uintptr_t>(u.second.page);
                          return u.first != uar.page_id && u.second.owner == context_ && at >= range->first &&
                                 at - range->first < range->bytes;
                        });
    if (rec.users || mapped)
      e.lifetime_error("free_uar: UAR page " + detail::hex(uar.page_id) +
                       (mapped ? " is still mapped (unmap_doorbell first)"
                               : " is still named by " + std::to_string(rec.users) + " CQ(s) or QP(s)"));
    else {
      if (rec.type == host::uar_type::nc) e.dev.nc_uar.erase(context_);
      e.dev.uars.erase(uar.page_id);
    }
    return 0;
  });
}

inline int firmware_model::query_eqn(std::uint32_t vector, std::uint32_t* eqn) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    if (vector >= e.dev.cfg.num_comp_vectors || eqn == nullptr)
      detail::refuse(EINVAL, "query_eqn: vector " + std::to_string(vector) + " is past the device's " +
                                 std::to_string(e.dev.cfg.num_comp_vectors) + " completion vectors");
    *eqn = first_comp_eqn + vector;
    return 0;
  });
}

inline host::obj_handle firmware_model::obj_create(void const* in, std::size_t in_bytes, void* out,
                                                   std::size_t out_bytes, int* error) {
  host::obj_handle obj;
  detail::set_error(
      error, detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
        std::uint32_t id = 0;
        int const rc = e.run(detail::firmware_engine::call::create, nullptr, in, in_bytes, out, out_bytes, &id);
        if (rc == 0) {
          bool const cq = detail::ifc::get(in, detail::ifc::in_opcode) == detail::k::MLX5_CMD_OP_CREATE_CQ;
          obj.impl = e.make_handle(cq ? detail::handle_rec::kind::cq : detail::handle_rec::kind::qp, id);
        }
        return rc;
      }));
  return obj;
}

inline int firmware_model::obj_modify(host::obj_handle obj, void const* in, std::size_t in_bytes, void* out,
                                      std::size_t out_bytes) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h =
        e.handle(obj.impl, {detail::handle_rec::kind::cq, detail::handle_rec::kind::qp}, "obj_modify");
    return e.run(detail::firmware_engine::call::modify, h, in, in_bytes, out, out_bytes, nullptr);
  });
}

inline int firmware_model::obj_destroy(host::obj_handle obj) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h =
        e.handle(obj.impl, {detail::handle_rec::kind::cq, detail::handle_rec::kind::qp}, "obj_destroy");
    // The destroy command the kernel builds at creation (devx_obj_build_destroy_cmd), run as any other.
    bool const cq = h->what == detail::handle_rec::kind::cq;
    auto const& in_layout = cq ? detail::ifc::destroy_cq_in : detail::ifc::destroy_qp_in;
    std::vector<unsigned char> in(detail::ifc::bytes(in_layout)), out(16);
    detail::ifc::set(in.data(), detail::ifc::in_opcode,
                     cq ? detail::k::MLX5_CMD_OP_DESTROY_CQ : detail::k::MLX5_CMD_OP_DESTROY_QP);
    detail::ifc::set(in.data(), detail::ifc::member(in_layout, cq ? "cqn" : "qpn"), h->id);
    int const rc =
        e.run(detail::firmware_engine::call::destroy, h, in.data(), in.size(), out.data(), out.size(), nullptr);
    if (rc != 0) return EBUSY;
    e.drop_handle(h);
    return 0;
  });
}

inline host::mr_handle firmware_model::reg_mr(host::pd_handle pd, void* addr, std::size_t bytes, int access_flags,
                                              int dmabuf_fd, std::uint64_t dmabuf_offset, int* error) {
  host::mr_handle mr;
  detail::set_error(
      error, detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
        detail::handle_rec const* p = e.handle(pd.impl, {detail::handle_rec::kind::pd}, "reg_mr");
        if (bytes == 0) detail::refuse(EINVAL, "reg_mr: zero bytes");
        if ((access_flags & (host::access::remote_write | host::access::remote_atomic)) &&
            !(access_flags & host::access::local_write))
          detail::refuse(EINVAL, "reg_mr: remote write or atomic access needs local write access too (verbs rule)");
        if (e.dev.mrs.size() >= (std::size_t{1} << e.caps().general.log_max_mkey))
          detail::refuse(ENOMEM, "reg_mr: the device has 2^log_max_mkey memory keys already");
        // An mlx5 key is the mkey index << 8 with a variant byte in the low bits.
        std::uint32_t index = 0, key = 0;
        do {
          index = e.dev.next_mkey;
          e.dev.next_mkey = (e.dev.next_mkey + 1) & 0xffffffu;
          key = (index << 8) | ((index * 0x3bu + 0x11u) & 0xffu);
        } while (index == 0 || e.dev.mrs.count(key));
        e.dev.mrs[key] = detail::mr_rec{
            context_, p->id, reinterpret_cast<std::uintptr_t>(addr), bytes, access_flags, dmabuf_fd, dmabuf_offset};
        ++e.dev.pds.at(p->id).users;
        mr.impl = e.make_handle(detail::handle_rec::kind::mr, key);
        mr.lkey = mr.rkey = key;
        return 0;
      }));
  return mr;
}

inline void firmware_model::dereg_mr(host::mr_handle mr) {
  detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h = e.handle(mr.impl, {detail::handle_rec::kind::mr}, "dereg_mr");
    auto pd = e.dev.pds.find(e.dev.mrs.at(h->id).pd);
    if (pd != e.dev.pds.end()) --pd->second.users;
    e.dev.mrs.erase(h->id);
    e.drop_handle(h);
    return 0;
  });
}

inline host::ah_info firmware_model::mac_of(std::uint8_t const (&gid)[16]) noexcept {
  host::ah_info out;
  out.rmac[0] = 0x02;  // locally administered, unicast
  bool mapped = true;
  for (int i = 0; i < 12; ++i) mapped = mapped && gid[i] == (i >= 10 ? 0xff : 0);
  if (mapped) {
    for (int i = 0; i < 4; ++i) out.rmac[2 + i] = gid[12 + i];
    return out;
  }
  std::uint64_t h = 14695981039346656037ull;
  for (std::uint8_t b : gid) h = (h ^ b) * 1099511628211ull;
  for (int i = 0; i < 5; ++i) out.rmac[1 + i] = static_cast<std::uint8_t>(h >> (8 * i));
  return out;
}

inline int firmware_model::resolve_ah(host::pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16],
                                      int sgid_index, host::ah_info* out) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    e.handle(pd.impl, {detail::handle_rec::kind::pd}, "resolve_ah");
    if (port < 1 || port > e.dev.cfg.ports.size() || out == nullptr)
      detail::refuse(EINVAL, "resolve_ah: no port " + std::to_string(port));
    port_config const& pc = e.dev.cfg.ports[port - 1];
    *out = host::ah_info{};
    if (!pc.ethernet) return 0;
    if (sgid_index < 0 || static_cast<std::size_t>(sgid_index) >= pc.gids.size() ||
        pc.gids[static_cast<std::size_t>(sgid_index)].type == host::gid_type::empty)
      detail::refuse(EINVAL, "resolve_ah: sgid_index " + std::to_string(sgid_index) + " is no filled GID entry");
    if (!e.port_by_gid(dgid, pc.gids[static_cast<std::size_t>(sgid_index)].type))
      detail::refuse(EHOSTUNREACH, "resolve_ah: no port of the fabric has GID " + detail::gid_text(dgid) +
                                       " (of the source GID's type)");
    *out = mac_of(dgid);
    return 0;
  });
}

inline int firmware_model::map_doorbell(host::uar_handle uar, std::size_t bytes, void** device_pointer) {
  return detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    detail::handle_rec const* h = e.handle(uar.impl, {detail::handle_rec::kind::uar}, "map_doorbell");
    detail::uar_rec& rec = e.dev.uars.at(h->id);
    auto const at = reinterpret_cast<std::uintptr_t>(uar.reg_addr);
    auto const reg = reinterpret_cast<std::uintptr_t>(rec.page) + detail::uar_rec::reg_offset;
    if (device_pointer == nullptr || bytes == 0 || at > reg || at + bytes < reg + rec.reg_bytes)
      detail::refuse(EINVAL, "map_doorbell: " + std::to_string(bytes) + " bytes at " + detail::hex(at) +
                                 " do not cover the doorbell register of UAR page " + detail::hex(h->id) + " (" +
                                 std::to_string(rec.reg_bytes) + " bytes at " + detail::hex(reg) + ")");
    // cudaHostRegister pins whole host pages and refuses a page it already has.
    std::size_t const hp = e.dev.cfg.host_page_bytes;
    std::uintptr_t const first = at & ~(std::uintptr_t{hp} - 1);
    std::size_t const span = ((at + bytes + hp - 1) & ~(std::uintptr_t{hp} - 1)) - first;
    for (detail::mapped_range const& m : e.dev.mapped)
      if (m.owner == context_ && first < m.first + m.bytes && m.first < first + span)
        detail::refuse(EEXIST, "map_doorbell: the host page " + detail::hex(std::max(first, m.first)) +
                                   " is already mapped (a second cudaHostRegister of it fails)");
    e.dev.mapped.push_back({context_, first, span});
    *device_pointer = uar.reg_addr;
    return 0;
  });
}

inline void firmware_model::unmap_doorbell(host::uar_handle uar) {
  detail::firmware_engine::guarded(*this, [&](detail::firmware_engine& e) {
    e.handle(uar.impl, {detail::handle_rec::kind::uar}, "unmap_doorbell");
    auto const at = reinterpret_cast<std::uintptr_t>(uar.reg_addr) & ~(std::uintptr_t{e.dev.cfg.host_page_bytes} - 1);
    auto& m = e.dev.mapped;
    m.erase(std::remove_if(m.begin(), m.end(),
                           [&](detail::mapped_range const& r) { return r.owner == context_ && r.first == at; }),
            m.end());
    return 0;
  });
}

// ---- firmware_model: the model's own view ---------------------------------------------------------------
inline bool firmware_model::cq_overrun_possible(std::uint32_t cqn) const {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  if (device_ < fabric_.state_->devices.size()) {
    auto const& cqs = fabric_.state_->devices[device_]->cqs;
    auto it = cqs.find(cqn);
    if (it != cqs.end() && it->second.owner == context_) return it->second.collapsed && !it->second.overrun_ignore;
  }
  throw std::out_of_range("firmware_model::cq_overrun_possible: this context has no CQ " + detail::hex(cqn));
}

inline std::optional<qp_state> firmware_model::query_qp_state(std::uint32_t qpn) const {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  if (device_ >= fabric_.state_->devices.size()) return std::nullopt;
  auto const& qps = fabric_.state_->devices[device_]->qps;
  auto it = qps.find(qpn);
  if (it == qps.end()) return std::nullopt;
  return it->second.state;
}

inline std::pair<bool, std::uint32_t> firmware_model::object_of(host::obj_handle obj) const {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  for (auto const& h : handles_)
    if (h.get() == obj.impl && (h->what == detail::handle_rec::kind::cq || h->what == detail::handle_rec::kind::qp))
      return {h->what == detail::handle_rec::kind::cq, h->id};
  throw std::out_of_range("firmware_model::object_of: not a CQ or QP handle of this context");
}

inline std::optional<cq_description> firmware_model::describe_cq(std::uint32_t cqn) const {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  if (device_ >= fabric_.state_->devices.size()) return std::nullopt;
  auto const& cqs = fabric_.state_->devices[device_]->cqs;
  auto it = cqs.find(cqn);
  if (it == cqs.end() || it->second.owner != context_) return std::nullopt;
  detail::cq_rec const& c = it->second;
  return cq_description{c.collapsed, c.overrun_ignore, c.log_size, c.umem, c.dbr_umem, c.umem_offset, c.dbr_offset};
}

inline std::optional<qp_description> firmware_model::describe_qp(std::uint32_t qpn) const {
  std::lock_guard<std::mutex> lock(fabric_.state_->mutex);
  auto const& devs = fabric_.state_->devices;
  if (device_ >= devs.size()) return std::nullopt;
  auto it = devs[device_]->qps.find(qpn);
  if (it == devs[device_]->qps.end() || it->second.owner != context_) return std::nullopt;
  detail::qp_rec const& q = it->second;
  qp_description d;
  d.state = q.state;
  d.pd = q.pd;
  d.cqn_snd = q.cqn_snd;
  d.cqn_rcv = q.cqn_rcv;
  d.uar_page = q.uar_page;
  d.wq_umem = q.wq_umem;
  d.dbr_umem = q.dbr_umem;
  d.wq_offset = q.wq_offset;
  d.dbr_offset = q.dbr_offset;
  d.log_sq_size = q.log_sq_size;
  d.rae = q.rae;
  d.rre = q.rre;
  d.rwe = q.rwe;
  d.remote_qpn = q.remote_qpn;
  if (q.peer_device < devs.size()) {
    d.peer_device = devs[q.peer_device]->cfg.name;
    d.peer_remote = devs[q.peer_device]->cfg.remote;
  }
  return d;
}

}  // namespace gpucomm::verbs_gpu::model
