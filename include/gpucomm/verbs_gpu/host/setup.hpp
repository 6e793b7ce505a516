#pragma once
// Host set-up of GPU-posted mlx5 RC QPs: the objects whose device views (send_queue,
// completion_queue) kernels use. Follows shared/reference/ibgda-notes.md section 3, "Host setup, in
// order", with the corrections collected in docs/mlx5-setup-references.md (cited below as "refs"
// with their section); each block names its step.
//
//   verbs_gpu::host::device   steps 1-4: choose the NIC (by name, else the mlx5 device closest to
//                             the GPU in the PCI tree), open it with DEVX, QUERY_HCA_CAP and check
//                             what verbs_gpu needs, pick the RoCE GID, decide dma-buf or peer
//                             memory, allocate the PD; the per-page count of mapped doorbells
//   verbs_gpu::host::qp       steps 5-12, 14: the SQ ring, CQ and both doorbell records in control
//                             memory, one UMEM each; the CQ and RC QP through DEVX, the UAR mapped
//                             into the GPU, RESET -> INIT -> RTR -> RTS for IB and RoCE, the device view
//   verbs_gpu::host::memory_region   step 13: an MR, dma-buf first
//   verbs_gpu::host::region_registry step 13: an MR per heap allocation and the (base, length, rkey)
//                             table peers exchange
//   verbs_gpu::host::exchange step 11: connection data through any allgather
//   verbs_gpu::host::host_qp  an RC QP a host thread posts to (ProxyQueue's NIC backend): made with
//                             ordinary verbs (ibv_create_qp, no DEVX) where the backend has them, its
//                             rings taken from mlx5dv_init_obj; on the firmware model, a qp above
//                             with its queues in host memory and the host ringing the UAR itself
//
// Everything goes through host::backend (backend.hpp): rdma_core_backend.hpp on a real NIC, the
// firmware model (model/firmware.hpp) in tests; the control memory through host::control_memory (GPU
// memory on hardware, host memory in tests). This header itself needs neither rdma-core nor the CUDA
// runtime, so the host tests run all of it against the model.
//
// Every failure throws verbs_gpu::host::setup_error naming the call, its error and what to do. This
// code (host_qp's ordinary-verbs path included) has run against the firmware model only, never on a NIC; see
// docs/verbs_gpu.md, "Running on a real mlx5 NIC".

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../completion_queue.cuh"
#include "../send_queue.cuh"
#include "backend.hpp"
#include "pci_path.hpp"
#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

/// A setup step failed; what() names the call, the error and what to do.
class setup_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void fail(std::string const& what, std::string const& hint = {}) {
  throw setup_error("gpucomm::verbs_gpu: " + what + (hint.empty() ? "" : " -- " + hint));
}
inline std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }
inline std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
/// The backend's own words on its last failure, as " [...]", or nothing.
inline std::string said(backend const& be) {
  std::string const d = be.diagnostic();
  return d.empty() ? std::string() : " [" + std::string(be.name()) + ": " + d + "]";
}
/// log2 of v rounded up to a power of two.
inline unsigned log2_ceil(std::uint64_t v) {
  unsigned l = 0;
  while ((std::uint64_t{1} << l) < v) ++l;
  return l;
}
inline std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

/// The firmware's status names (the kernel's MLX5_CMD_STAT_*, refs section 9).
inline char const* status_name(std::uint32_t s) {
  switch (s) {
    case 0x0:
      return "OK";
    case 0x1:
      return "internal error";
    case 0x2:
      return "bad operation";
    case 0x3:
      return "bad parameter";
    case 0x4:
      return "bad system state";
    case 0x5:
      return "bad resource";
    case 0x6:
      return "resource busy";
    case 0x7:
      return "not ready";
    case 0x8:
      return "limits exceeded";
    case 0x9:
      return "bad resource state";
    case 0xa:
      return "bad index";
    case 0xf:
      return "no resources";
    case 0x10:
      return "bad QP state";
    case 0x30:
      return "bad packet";
    case 0x40:
      return "bad size of outstanding CQEs";
    case 0x50:
      return "bad input length";
    case 0x51:
      return "bad output length";
    default:
      return "unknown status";
  }
}

/// Throws unless a firmware command succeeded: `rc` is what the backend returned, `out` the
/// command's output (status, syndrome).
inline void check_cmd(backend const& be, int rc, void const* out, std::string const& what) {
  std::uint32_t const status = prm::get(out, prm::out_status);
  if (rc == 0 && status == 0) return;
  std::string const verdict = " (firmware status " + hex(status) + " " + status_name(status) + ", syndrome " +
                              hex(prm::get(out, prm::out_syndrome)) + ")";
  if (rc == EREMOTEIO || (rc == 0 && status != 0)) {
    fail(what + " was rejected by the firmware" + verdict + said(be),
         "the kernel does not log failed DEVX commands, so this status and syndrome are the only record: the "
         "syndrome names the failed check (NVIDIA's firmware tools decode it); check the field named above "
         "against the PRM");
  }
  fail(what + " was refused before the firmware saw it: " + errno_text(rc) + said(be),
       "EPERM: DEVX objects may need CAP_NET_RAW; EINVAL/EOPNOTSUPP: the kernel's DEVX layer refused the "
       "command or the rdma-core in use lacks the call");
}

// ---- the NIC closest to the GPU (pci_path.hpp's rule, as gpucomm::detail::closest_nic uses it,
// applied to the backend's devices and their PCI addresses, so that model devices can be placed in a
// fake sysfs tree) ----------------------------------------------------------------------------------
/// Of `candidates` (mlx5 devices), the one whose PCI path under `sysfs` shares the most components
/// with the GPU's (bus id `gpu`); ties, an unknown GPU and unknown NIC paths: the first name in order.
inline device_entry const& closest_device(std::string const& gpu, std::vector<device_entry const*> const& candidates,
                                          std::string const& sysfs) {
  std::string const gpu_path =
      gpu.empty() ? std::string() : pci::real_path(sysfs + "/bus/pci/devices/" + pci::sysfs_bus_id(gpu));
  device_entry const* best = nullptr;
  std::size_t best_score = 0;
  for (device_entry const* d : candidates) {
    std::string const nic = d->pci_bus_id.empty()
                                ? std::string()
                                : pci::real_path(sysfs + "/bus/pci/devices/" + pci::sysfs_bus_id(d->pci_bus_id));
    std::size_t const score = gpu_path.empty() || nic.empty() ? 0 : pci::common_components(gpu_path, nic);
    if (best == nullptr || score > best_score || (score == best_score && d->name < best->name)) {
      best = d;
      best_score = score;
    }
  }
  return *best;
}

// ---- RoCE v2 UDP source port (the kernel's mlx5_set_path_udp_sport; refs section 5) ----------------
/// rdma_calc_flow_label: a flow label both ends of a connection compute alike.
constexpr std::uint32_t flow_label(std::uint32_t lqpn, std::uint32_t rqpn) noexcept {
  std::uint64_t v = std::uint64_t{lqpn} * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<std::uint32_t>(v & 0xfffffu);
}
/// rdma_flow_label_to_udp_sport: 14 bits of the label in the RoCE v2 source port range 0xc000-0xffff.
constexpr std::uint16_t udp_sport(std::uint32_t fl) noexcept {
  std::uint32_t const low = (fl & 0x3fffu) ^ ((fl & 0xfc000u) >> 14);
  return static_cast<std::uint16_t>(low | 0xc000u);
}
}  // namespace detail

/// The address family of the RoCE GID to use.
enum class ip_family : std::uint8_t { ipv4, ipv6 };

/// How to open the NIC and address its peers.
struct device_options {
  /// The ibv device name ("mlx5_0"); it always wins. Empty: the mlx5 device closest to the GPU in
  /// the PCI tree (the GPU of `gpu_pci_bus_id`, else the one the control memory is on), else the
  /// first mlx5 device.
  std::string name{};
  std::uint8_t port = 1;
  /// RoCE: the GID index to use. -1: the first RoCE v2 entry of `gid_family` (refs section 5,
  /// NVSHMEM's rule); empty entries are skipped.
  int gid_index = -1;
  ip_family gid_family = ip_family::ipv4;
  /// InfiniBand: the service level. RoCE: the Ethernet priority (sl & 7, as the kernel does; 0-7).
  std::uint8_t sl = 0;
  /// RoCE: the GRH traffic class; RoCE v2 sends its upper six bits as the DSCP.
  std::uint8_t traffic_class = 0;
  /// RoCE v2: the DSCP (0-63) if not -1; it replaces the upper six bits of traffic_class.
  int dscp = -1;
  /// Index into the port's P_Key table (RST2INIT).
  std::uint16_t pkey_index = 0;
  /// The GPU the QPs serve, for choosing the NIC ("0000:17:00.0"); empty: the control memory's GPU.
  std::string gpu_pci_bus_id{};
  /// Where the PCI tree is read (a fake tree in tests).
  std::string sysfs = "/sys";
  /// Control memory for the QPs' rings, CQs and doorbell records; nullptr: the backend's default
  /// (GPU memory with rdma-core, host memory with the firmware model). Must outlive the device.
  control_memory* memory = nullptr;
  /// The host's page size, the unit in which doorbell registers are mapped into the GPU; 0: the
  /// system's (sysconf). Tests set 65536 to act out a 64 KiB-page host on a 4 KiB one.
  std::size_t host_page_bytes = 0;
  /// Open with DEVX (GPU-posted qps). false: an ordinary verbs context (ibv_open_device) for
  /// host_qps, which then work wherever rdma-core's mlx5 provider does, without DEVX's permissions;
  /// the firmware capabilities are not queried (QUERY_HCA_CAP is a DEVX command) and the port and
  /// ibv_query_device say what is needed. A backend without ordinary verbs (the model) still opens
  /// with DEVX and queries, since its host_qps are DEVX QPs.
  bool devx = true;
};

/// The capabilities the set-up reads with QUERY_HCA_CAP (current values; refs section 2).
struct device_caps {
  // cmd_hca_cap
  unsigned cqe_version = 0, log_max_qp_sz = 0, log_max_qp = 0, log_max_cq_sz = 0, log_max_cq = 0;
  unsigned log_max_ra_req_qp = 0, log_max_ra_res_qp = 0, log_max_msg = 0, port_type = 0;
  unsigned log_bf_reg_size = 0, sq_ts_format = 0;
  bool roce = false, atomic = false, cq_oi = false, rc = false, bf = false;
  // roce_cap (when roce)
  unsigned roce_qp_ts_format = 0;
  // atomic_caps
  unsigned atomic_operations = 0, atomic_size_qp = 0;
};

/// What a peer needs to connect to one of our QPs (exchanged through the bootstrap).
struct connection_info {
  std::uint32_t qpn = 0;
  std::uint16_t lid = 0;
  std::uint8_t port = 1;
  std::uint8_t link_layer = 0;   ///< 1 InfiniBand, 2 Ethernet (RoCE), as IBV_LINK_LAYER_*
  std::uint8_t gid[16] = {};     ///< RoCE: the GID the QP sends from
  std::uint32_t mtu = 0;         ///< the port's active MTU, an ibv_mtu value
  std::uint8_t log_rra_max = 0;  ///< RDMA reads/atomics this QP answers at once (log2): caps the peer's log_sra_max
  std::uint8_t reserved[3] = {};
};
static_assert(std::is_trivially_copyable_v<connection_info> && sizeof(connection_info) == 32);
inline constexpr std::uint8_t link_layer_infiniband = 1, link_layer_ethernet = 2;

/// An opened mlx5 device with DEVX and a protection domain (steps 1-4). One backend per device.
class device {
 public:
  explicit device(backend& be, device_options opt = {})
      : be_(be), opt_(std::move(opt)), mem_(opt_.memory != nullptr ? opt_.memory : &be.default_memory()) {
    if (std::size_t const p = opt_.host_page_bytes; p != 0 && (p < 4096 || (p & (p - 1)) != 0))
      detail::fail("device_options::host_page_bytes = " + std::to_string(p) + " is no page size",
                   "a power of two of at least 4096, or 0 for the system's");
    open_device();
    query_port_and_caps();
    if (port_.ethernet) choose_gid();
    check_memory();
    // ---- Step 4: protection domain and its number ------------------------------------------------
    int e = 0;
    pd_ = be_.alloc_pd(&e);
    if (!pd_) detail::fail("alloc_pd on " + name_ + " failed: " + detail::errno_text(e) + detail::said(be_));
  }
  device(device const&) = delete;
  device& operator=(device const&) = delete;
  ~device() {
    // A QP or CQ the firmware would not destroy still holds the PD: keep it too.
    if (pd_ && kept_ == 0) be_.dealloc_pd(pd_);
  }

  backend& nic() const noexcept { return be_; }
  control_memory& memory() const noexcept { return *mem_; }
  std::string const& name() const noexcept { return name_; }
  std::string const& pci_bus_id() const noexcept { return pci_; }
  std::uint8_t port() const noexcept { return opt_.port; }
  port_info const& port_attr() const noexcept { return port_; }
  device_caps const& caps() const noexcept { return caps_; }
  device_options const& options() const noexcept { return opt_; }
  pd_handle pd() const noexcept { return pd_; }
  std::uint32_t pdn() const noexcept { return pd_.pdn; }
  gid_entry const& gid() const noexcept { return gid_; }
  int gid_index() const noexcept { return gid_index_; }
  bool dmabuf() const noexcept { return dmabuf_; }
  bool peermem() const noexcept { return peermem_; }

  /// The GPU's pointer to the doorbell register of `uar` (`reg_bytes` long). Registers are mapped a
  /// whole host page at a time: the first register of a host page maps the page, later ones share
  /// that mapping and are reached at their offset in it. Several registers share a host page: rdma-
  /// core hands one NC page to every NC request and puts several dedicated registers in one UAR
  /// page, and a 64 KiB host page holds 16 UAR pages of 4 KiB with different page ids; a second
  /// cudaHostRegister of a page fails (refs section 6).
  std::uint64_t* map_doorbell(uar_handle const& uar, std::size_t reg_bytes) {
    std::size_t const page = host_page_bytes();
    auto const reg = reinterpret_cast<std::uintptr_t>(uar.reg_addr);
    std::uintptr_t const first = reg & ~(std::uintptr_t{page} - 1);
    if (reg + reg_bytes > first + page)
      detail::fail("the doorbell register of UAR page " + detail::hex(uar.page_id) + " (" + std::to_string(reg_bytes) +
                   " bytes at " + detail::hex(reg) + ") crosses a host page boundary");
    auto it = doorbells_.find(first);
    if (it == doorbells_.end()) {
      void* dev = nullptr;
      int const e = be_.map_doorbell(page_of(uar, first), page, &dev);
      if (e != 0) {
        detail::fail("mapping the host page " + detail::hex(first) + " of the doorbell register of UAR page " +
                         detail::hex(uar.page_id) + " (" + std::to_string(page) +
                         " bytes) into the GPU failed: " + detail::errno_text(e) + detail::said(be_),
                     "GPU-rung doorbells need the driver to allow I/O-memory mappings (cudaHostRegisterIoMemory; "
                     "e.g. NVreg_RegistryDwords=\"PeerMappingOverride=1;\"); a CPU proxy (ProxyQueue's NIC backend) "
                     "avoids GPU doorbells");
      }
      it = doorbells_.emplace(first, mapped_page{0, dev}).first;
    }
    ++it->second.users;
    return reinterpret_cast<std::uint64_t*>(static_cast<unsigned char*>(it->second.device) + (reg - first));
  }
  /// Drops one user of the host page of `uar`'s register; the last one unmaps the page.
  void unmap_doorbell(uar_handle const& uar) noexcept {
    std::uintptr_t const first =
        reinterpret_cast<std::uintptr_t>(uar.reg_addr) & ~(std::uintptr_t{host_page_bytes()} - 1);
    auto it = doorbells_.find(first);
    if (it == doorbells_.end()) return;
    if (--it->second.users == 0) {
      be_.unmap_doorbell(page_of(uar, first));
      doorbells_.erase(it);
    }
  }
  /// QPs whose objects the firmware refused to destroy (obj_destroy failed): their memory, UMEMs,
  /// UARs and doorbell mapping, and this device's PD, are kept rather than released under an
  /// object the NIC may still use. Nothing else reports it (destructors do not throw).
  std::size_t kept_qps() const noexcept { return kept_; }
  /// Called by a qp whose objects could not be destroyed.
  void keep_qp() noexcept { ++kept_; }

  /// The path MTU (an ibv_mtu value) from QP `qpn` to the peer's QP: the least of `wanted`, the
  /// peer's and this port's; setup_error when the link layers differ.
  std::uint32_t path_mtu(std::uint32_t qpn, connection_info const& peer, std::uint32_t wanted) const {
    bool const roce = port_.ethernet;
    if (peer.link_layer != (roce ? link_layer_ethernet : link_layer_infiniband))
      detail::fail("connect: QP " + detail::hex(qpn) + " is on " + (roce ? "RoCE" : "InfiniBand") +
                       " but the peer's QP " + detail::hex(peer.qpn) + " is not",
                   "connect ports of the same link layer");
    std::uint32_t const mtu = std::min({wanted, peer.mtu, port_.active_mtu});
    if (mtu < 1 || mtu > 5)
      detail::fail("connect: path MTU " + std::to_string(mtu) + " is no ibv_mtu value (1-5)",
                   "check qp_options::mtu and the peer's connection_info");
    return mtu;
  }
  /// RoCE: the GRH traffic class (device_options::dscp, if set, in its upper six bits).
  std::uint8_t traffic_class() const noexcept {
    return opt_.dscp >= 0 ? static_cast<std::uint8_t>((opt_.dscp << 2) | (opt_.traffic_class & 3)) : opt_.traffic_class;
  }
  /// The read/atomic depth (log2) a QP uses either way: log_max_ra_req_qp and log_max_ra_res_qp
  /// both cap it, since the PRM field names pair them with sra/rra one way and the kernel's mlx5
  /// driver the other (qp.c caps max_dest_rd_atomic by log_max_ra_req_qp); 3-bit fields.
  unsigned ra_cap() const noexcept { return std::min({caps_.log_max_ra_res_qp, caps_.log_max_ra_req_qp, 7u}); }
  /// What a peer needs to connect to our QP `qpn` (step 11).
  connection_info info_for(std::uint32_t qpn) const {
    connection_info c;
    c.qpn = qpn;
    c.lid = port_.lid;
    c.port = opt_.port;
    c.link_layer = port_.ethernet ? link_layer_ethernet : link_layer_infiniband;
    if (port_.ethernet) std::memcpy(c.gid, gid_.gid, 16);
    c.mtu = port_.active_mtu;
    c.log_rra_max = static_cast<std::uint8_t>(ra_cap());
    return c;
  }

  /// Whether the device is a DEVX context (device_options::devx, or a backend without ordinary
  /// verbs, whose host_qps are DEVX qps).
  bool uses_devx() const noexcept { return opt_.devx || !be_.native_verbs_qps(); }

  /// The host page size doorbells are mapped in (device_options::host_page_bytes, else sysconf).
  std::size_t host_page_bytes() const noexcept {
    return opt_.host_page_bytes != 0 ? opt_.host_page_bytes : static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  }

 private:
  // ---- Step 1: the device: by name, else by PCI closeness; open with DEVX ---------------------------
  void open_device() {
    std::vector<device_entry> const list = be_.devices();
    if (list.empty()) {
      detail::fail(std::string("no RDMA device found (") + be_.name() + " lists none)",
                   "install rdma-core's providers and load the NIC driver (mlx5_core, mlx5_ib); `ibv_devices` must "
                   "list the NIC");
    }
    std::string names;
    std::vector<device_entry const*> mlx5;
    device_entry const* chosen = nullptr;
    for (device_entry const& d : list) {
      names += (names.empty() ? "" : ", ") + d.name;
      if (d.mlx5) mlx5.push_back(&d);
      if (!opt_.name.empty() && d.name == opt_.name) chosen = &d;
    }
    if (!opt_.name.empty()) {
      if (chosen == nullptr)
        detail::fail("no RDMA device named " + opt_.name + " (have: " + names + ")",
                     "set device_options::name to one of them, or leave it empty for the mlx5 device closest to the "
                     "GPU");
      if (!chosen->mlx5)
        detail::fail("device " + opt_.name + " is not an mlx5 device",
                     "verbs_gpu builds mlx5 WQEs and needs a ConnectX (mlx5) NIC (ProxyQueue's NIC backend posts the "
                     "same WQEs from the host; ibv_post_send for other NICs is not written)");
    } else {
      if (mlx5.empty())
        detail::fail("no mlx5 device among the RDMA devices (" + names + ")",
                     "verbs_gpu builds mlx5 WQEs and needs a ConnectX (mlx5) NIC");
      std::string const gpu = opt_.gpu_pci_bus_id.empty() ? mem_->pci_bus_id() : opt_.gpu_pci_bus_id;
      chosen = &detail::closest_device(gpu, mlx5, opt_.sysfs);
    }
    name_ = chosen->name;
    pci_ = chosen->pci_bus_id;
    if (!uses_devx()) {
      if (int const e = be_.open_verbs(name_); e != 0)
        detail::fail("opening " + name_ + " (ibv_open_device) failed: " + detail::errno_text(e) + detail::said(be_),
                     "check permission to use the device (/dev/infiniband/uverbs*)");
      return;
    }
    if (int const e = be_.open(name_); e != 0) {
      detail::fail(
          "opening " + name_ + " with DEVX (mlx5dv_open_device) failed: " + detail::errno_text(e) + detail::said(be_),
          "DEVX user contexts need kernel support (Linux >= 5.1 with mlx5_ib) and permission to use the "
          "device (/dev/infiniband/uverbs*)");
    }
  }

  /// One QUERY_HCA_CAP page (current values) into `out` (prm::query_hca_cap_out_bytes).
  void query_caps(std::uint32_t type, char const* page, std::vector<std::uint32_t>& out) {
    std::uint32_t in[prm::query_hca_cap_in_bytes / 4] = {};
    out.assign(prm::query_hca_cap_out_bytes / 4, 0);
    prm::set(in, prm::in_opcode, prm::op_query_hca_cap);
    prm::set(in, prm::in_op_mod, (type << 1) | prm::hca_cap_current);
    int const rc = be_.general_cmd(in, sizeof in, out.data(), out.size() * 4);
    detail::check_cmd(be_, rc, out.data(), std::string("QUERY_HCA_CAP (") + page + ") on " + name_);
  }

  // ---- Steps 1-2: port, capabilities, and the checks of what verbs_gpu needs (refs section 2) ----------
  void query_port_and_caps() {
    if (int const e = be_.query_port(opt_.port, &port_); e != 0)
      detail::fail("query_port(" + name_ + ", port " + std::to_string(opt_.port) +
                       ") failed: " + detail::errno_text(e) + detail::said(be_),
                   "device_options::port counts from 1");
    if (!port_.active)
      detail::fail("port " + std::to_string(opt_.port) + " of " + name_ + " is not active",
                   "check the cable and `ibstat`");
    if (!uses_devx()) {
      verbs_caps();
      check_port_options();
      return;
    }
    std::vector<std::uint32_t> page;
    query_caps(prm::hca_cap_general, "general", page);
    auto const get = [&](prm::field f) { return prm::get(page.data(), f); };
    caps_.cqe_version = get(prm::cap_cqe_version);
    caps_.log_max_qp_sz = get(prm::cap_log_max_qp_sz);
    caps_.log_max_qp = get(prm::cap_log_max_qp);
    caps_.log_max_cq_sz = get(prm::cap_log_max_cq_sz);
    caps_.log_max_cq = get(prm::cap_log_max_cq);
    caps_.log_max_ra_req_qp = get(prm::cap_log_max_ra_req_qp);
    caps_.log_max_ra_res_qp = get(prm::cap_log_max_ra_res_qp);
    caps_.log_max_msg = get(prm::cap_log_max_msg);
    caps_.port_type = get(prm::cap_port_type);
    caps_.log_bf_reg_size = get(prm::cap_log_bf_reg_size);
    caps_.sq_ts_format = get(prm::cap_sq_ts_format);
    caps_.roce = get(prm::cap_roce) != 0;
    caps_.atomic = get(prm::cap_atomic) != 0;
    caps_.cq_oi = get(prm::cap_cq_oi) != 0;
    caps_.rc = get(prm::cap_rc) != 0;
    caps_.bf = get(prm::cap_bf) != 0;
    if (caps_.roce) {
      query_caps(prm::hca_cap_roce, "RoCE", page);
      caps_.roce_qp_ts_format = get(prm::roce_cap_qp_ts_format);
    }
    query_caps(prm::hca_cap_atomic, "atomic", page);
    caps_.atomic_operations = get(prm::atomic_cap_operations);
    caps_.atomic_size_qp = get(prm::atomic_cap_size_qp);

    std::string const where = "device " + name_ + " ";
    std::string const upgrade = "verbs_gpu needs a ConnectX-5 or newer with current firmware";
    if (caps_.cqe_version != 1)
      detail::fail(where + "reports cqe_version = " + std::to_string(caps_.cqe_version) +
                       " (QUERY_HCA_CAP); verbs_gpu reads version-1 CQEs, as NVSHMEM requires",
                   upgrade);
    if (!caps_.rc) detail::fail(where + "cannot create RC QPs (cmd_hca_cap.rc = 0)", upgrade);
    // The WQE builders post compare-and-swap and fetch-and-add, plain and masked, on 4 and 8 bytes
    // (NVSHMEM rejects devices without them; refs section 2), with atomic_mode UP_TO_8B.
    std::uint32_t const ops = prm::atomic_op_cmp_swap | prm::atomic_op_fetch_add | prm::atomic_op_masked_cmp_swap |
                              prm::atomic_op_masked_fetch_add;
    std::uint32_t const sizes = prm::atomic_size_4 | prm::atomic_size_8;
    if (!caps_.atomic || (caps_.atomic_operations & ops) != ops || (caps_.atomic_size_qp & sizes) != sizes) {
      std::string lacks;
      auto lack = [&](bool missing, char const* what) {
        if (missing) lacks += (lacks.empty() ? "" : ", ") + std::string(what);
      };
      lack(!caps_.atomic, "atomics (cmd_hca_cap.atomic = 0)");
      lack(!(caps_.atomic_operations & prm::atomic_op_cmp_swap), "compare-and-swap");
      lack(!(caps_.atomic_operations & prm::atomic_op_fetch_add), "fetch-and-add");
      lack(!(caps_.atomic_operations & prm::atomic_op_masked_cmp_swap), "masked compare-and-swap");
      lack(!(caps_.atomic_operations & prm::atomic_op_masked_fetch_add), "masked fetch-and-add");
      lack(!(caps_.atomic_size_qp & prm::atomic_size_4), "4-byte operands");
      lack(!(caps_.atomic_size_qp & prm::atomic_size_8), "8-byte operands");
      detail::fail(where + "lacks the atomics verbs_gpu posts: " + lacks +
                       " (atomic_caps: atomic_operations = " + detail::hex(caps_.atomic_operations) +
                       ", atomic_size_qp = " + detail::hex(caps_.atomic_size_qp) + ")",
                   upgrade);
    }
    if ((caps_.port_type == prm::port_type_eth) != port_.ethernet)
      detail::fail(where + "reports port_type " + std::to_string(caps_.port_type) + " but port " +
                       std::to_string(opt_.port) + "'s link layer is " + (port_.ethernet ? "Ethernet" : "InfiniBand"),
                   "a mixed-protocol device: pick the port whose protocol the device reports");
    check_port_options();
  }

  /// Options checked against the port, where the firmware's (or ibv_modify_qp's) answer would be
  /// less clear.
  void check_port_options() const {
    if (opt_.pkey_index >= port_.pkey_table_length)
      detail::fail("device_options::pkey_index = " + std::to_string(opt_.pkey_index) + " is past the " +
                       std::to_string(port_.pkey_table_length) + "-entry P_Key table of " + name_ + " port " +
                       std::to_string(opt_.port),
                   "`show_gids`/`ibv_devinfo -v` lists the table; RoCE ports have one entry");
    if (port_.ethernet ? opt_.sl > 7 : opt_.sl > 15)
      detail::fail("device_options::sl = " + std::to_string(opt_.sl) + " is out of range",
                   port_.ethernet ? "on RoCE it is the Ethernet priority, 0-7" : "InfiniBand service levels are 0-15");
    if (opt_.dscp > 63) detail::fail("device_options::dscp = " + std::to_string(opt_.dscp) + " is past 63");
  }

  /// An ordinary verbs context: what host_qp needs, from ibv_query_device (no QUERY_HCA_CAP).
  void verbs_caps() {
    device_info info;
    if (int const e = be_.query_device(&info); e != 0)
      detail::fail("query_device(" + name_ + ") failed: " + detail::errno_text(e) + detail::said(be_));
    if (!info.atomics)
      detail::fail("device " + name_ + " offers no atomics (ibv_query_device: atomic_cap = IBV_ATOMIC_NONE)",
                   "ProxyQueue's NIC backend posts RDMA atomics for signals and atomics");
    // RDMA reads and atomics in flight per QP, both ways (3-bit fields in the QP context).
    auto const log2_floor = [](int v) {
      unsigned l = 0;
      while (v > 1 && l < 7) v >>= 1, ++l;
      return l;
    };
    caps_.log_max_ra_req_qp = log2_floor(info.max_qp_init_rd_atom);
    caps_.log_max_ra_res_qp = log2_floor(info.max_qp_rd_atom);
    caps_.atomic = true;
    caps_.rc = true;
    caps_.roce = port_.ethernet;
  }

  // ---- Step 1 (RoCE): the GID: a RoCE v2 entry of the wanted address family (refs section 5) ---------
  void choose_gid() {
    auto const family_ok = [&](gid_entry const& g) {
      return opt_.gid_family == ip_family::ipv4 ? g.ipv4_mapped() : !g.ipv4_mapped();
    };
    if (opt_.gid_index >= 0) {
      int const e = be_.query_gid(opt_.port, opt_.gid_index, &gid_);
      if (e != 0 || (gid_.type != gid_type::roce_v1 && gid_.type != gid_type::roce_v2))
        detail::fail("device_options::gid_index = " + std::to_string(opt_.gid_index) + " of " + name_ + " port " +
                         std::to_string(opt_.port) + " is " +
                         (e != 0 ? "unreadable: " + detail::errno_text(e) + detail::said(be_)
                                 : std::string("no RoCE entry (empty or InfiniBand)")),
                     "pick a RoCE v2 GID index with `show_gids`, or leave it at -1 to scan the table");
      gid_index_ = opt_.gid_index;
      return;
    }
    std::string seen;
    for (int i = 0; i < port_.gid_table_length; ++i) {
      gid_entry g;
      if (be_.query_gid(opt_.port, i, &g) != 0 || g.type == gid_type::empty) continue;
      seen += (seen.empty() ? "" : ", ") + std::to_string(i) +
              (g.type == gid_type::roce_v2   ? " v2"
               : g.type == gid_type::roce_v1 ? " v1"
                                             : " IB") +
              (g.ipv4_mapped() ? " IPv4" : " IPv6");
      if (g.type == gid_type::roce_v2 && family_ok(g)) {
        gid_ = g;
        gid_index_ = i;
        return;
      }
    }
    detail::fail("no RoCE v2 GID with an " + std::string(opt_.gid_family == ip_family::ipv4 ? "IPv4" : "IPv6") +
                     " address on " + name_ + " port " + std::to_string(opt_.port) +
                     " (filled entries: " + (seen.empty() ? "none" : seen) + ")",
                 "give the NIC's network interface an address of that family, or set device_options::gid_family "
                 "or gid_index (`show_gids` lists the table)");
  }

  // ---- Step 3: how the NIC reaches GPU control memory: dma-buf or peer memory (nvidia-peermem) ------
  void check_memory() {
    // Asked whatever the control memory is: MRs of GPU buffers (memory_region) use dma-buf too.
    dmabuf_ = mem_->dmabuf_supported();
    peermem_ = mem_->peer_memory();
    if (mem_->gpu() && !dmabuf_ && !peermem_) {
      detail::fail(
          "GPU memory cannot be registered with the NIC: the CUDA driver reports no dma-buf support and "
          "nvidia-peermem is not loaded",
          "use a driver with dma-buf support (open kernel modules, CUDA >= 11.7) or `modprobe nvidia-peermem`");
    }
  }

  struct mapped_page {
    int users;
    void* device;  ///< the GPU's address of the page
  };
  /// `uar` naming the whole host page at `first` (what backend::map_doorbell maps).
  static uar_handle page_of(uar_handle uar, std::uintptr_t first) noexcept {
    uar.reg_addr = uar.base_addr = reinterpret_cast<void*>(first);
    return uar;
  }

  backend& be_;
  device_options opt_;
  control_memory* mem_;
  std::string name_, pci_;
  port_info port_{};
  device_caps caps_{};
  gid_entry gid_{};
  int gid_index_ = 0;
  bool dmabuf_ = false, peermem_ = false;
  pd_handle pd_{};
  std::map<std::uintptr_t, mapped_page> doorbells_;  ///< by host page (its address)
  std::size_t kept_ = 0;                             ///< keep_qp()
};

/// A memory region the NIC may access (step 13): GPU memory through dma-buf first, then through
/// peer memory (a plain registration of the device pointer, which needs nvidia-peermem); host
/// memory with a plain registration. Keys are host order (the WQE builders swap them).
class memory_region {
 public:
  static constexpr int default_access =
      access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
  memory_region(device& dev, void* ptr, std::size_t bytes, bool gpu_memory, int flags = default_access)
      : be_(&dev.nic()), addr_(reinterpret_cast<std::uintptr_t>(ptr)), bytes_(bytes) {
    int e = 0;
    if (gpu_memory && dev.dmabuf()) {
      // dma-buf handles cover whole pages: export the page-aligned range, keep ptr as the iova.
      auto const page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      std::uintptr_t const base = addr_ & ~(page - 1);
      std::size_t const len = ((addr_ + bytes + page - 1) & ~(page - 1)) - base;
      int const fd = dev.memory().dmabuf_fd(reinterpret_cast<void const*>(base), len);
      if (fd >= 0) {
        mr_ = be_->reg_mr(dev.pd(), ptr, bytes, flags, fd, addr_ - base, &e);
        ::close(fd);
      }
    }
    if (!mr_) mr_ = be_->reg_mr(dev.pd(), ptr, bytes, flags, -1, 0, &e);
    if (!mr_) {
      detail::fail("registering " + std::to_string(bytes) + " bytes of " + (gpu_memory ? "GPU" : "host") +
                       " memory at " + detail::hex(addr_) + " on " + dev.name() + " failed: " + detail::errno_text(e) +
                       detail::said(*be_),
                   gpu_memory ? "GPU memory needs dma-buf support or nvidia-peermem, and BAR1 space"
                              : "check `ulimit -l` (locked memory)");
    }
  }
  memory_region(memory_region const&) = delete;
  memory_region& operator=(memory_region const&) = delete;
  ~memory_region() {
    if (mr_) be_->dereg_mr(mr_);
  }
  std::uint32_t lkey() const noexcept { return mr_.lkey; }
  std::uint32_t rkey() const noexcept { return mr_.rkey; }
  std::uint64_t addr() const noexcept { return addr_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  backend* be_;
  std::uintptr_t addr_;
  std::size_t bytes_;
  mr_handle mr_{};
};

/// One registered allocation as its peers see it: the wire format of region_registry::exchange.
/// Fixed layout (24 bytes, host byte order; every PE of a job runs on the same architecture).
struct region_entry {
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  std::uint32_t rkey = 0;
  std::uint32_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<region_entry> && sizeof(region_entry) == 24);

/// An MR per heap allocation and every PE's table of them (step 13; refs section 7, NVSHMEM keeps a
/// key per heap chunk): add() registers an allocation, exchange() gathers the tables of all PEs,
/// find() gives the rkey covering a remote range. IBGDAPost registers each symmetric heap block
/// here and exchanges its rkeys as the block is allocated; its kernels find them by heap offset in
/// a device table (transport/nic/heap_keys.hpp).
class region_registry {
 public:
  explicit region_registry(device& dev) : dev_(dev) {}

  /// Registers [ptr, ptr + bytes), one allocation; it must not overlap one already registered.
  region_entry const& add(void* ptr, std::size_t bytes, bool gpu_memory, int flags = memory_region::default_access) {
    auto const base = reinterpret_cast<std::uint64_t>(ptr);
    if (bytes == 0) detail::fail("region_registry::add: an empty allocation at " + detail::hex(base));
    auto next = regions_.lower_bound(base);
    bool const overlaps =
        (next != regions_.end() && next->first < base + bytes) ||
        (next != regions_.begin() && std::prev(next)->second.entry.base + std::prev(next)->second.entry.length > base);
    if (overlaps)
      detail::fail("region_registry::add: [" + detail::hex(base) + ", " + detail::hex(base + bytes) +
                       ") overlaps a registered allocation",
                   "register each heap allocation once; remove() it before its memory is reused");
    auto mr = std::make_unique<memory_region>(dev_, ptr, bytes, gpu_memory, flags);
    region_entry const e{base, bytes, mr->rkey(), 0};
    return regions_.emplace(base, held{e, std::move(mr)}).first->second.entry;
  }
  /// Deregisters the allocation that starts at ptr.
  void remove(void const* ptr) {
    if (regions_.erase(reinterpret_cast<std::uint64_t>(ptr)) == 0)
      detail::fail("region_registry::remove: no allocation registered at " +
                   detail::hex(reinterpret_cast<std::uint64_t>(ptr)));
  }
  /// Whether an allocation starting at ptr is registered.
  bool contains(void const* ptr) const { return regions_.count(reinterpret_cast<std::uint64_t>(ptr)) != 0; }
  /// This PE's table, by base address.
  std::vector<region_entry> local() const {
    std::vector<region_entry> out;
    for (auto const& [base, h] : regions_) out.push_back(h.entry);
    return out;
  }
  /// The local key of a registered range, for WQEs that read or write it; setup_error if no single
  /// allocation covers it.
  std::uint32_t lkey(void const* ptr, std::size_t bytes) const {
    auto const a = reinterpret_cast<std::uint64_t>(ptr);
    auto it = regions_.upper_bound(a);
    if (it != regions_.begin() && covers((--it)->second.entry, a, bytes)) return it->second.mr->lkey();
    detail::fail("region_registry::lkey: [" + detail::hex(a) + ", +" + std::to_string(bytes) +
                     ") is not inside one registered allocation",
                 "register the allocation with add() first");
  }

  /// Gathers every PE's table: `allgather(mine, all, bytes)` writes every rank's `bytes` bytes, in
  /// rank order, into `all` (the same contract as exchange() below). Collective: every rank calls it.
  /// Tables may differ in length; each is padded to the longest with empty entries.
  template <class AllGather>
  void exchange(AllGather&& allgather, int ranks) {
    std::uint64_t const mine = regions_.size();
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(ranks));
    allgather(static_cast<void const*>(&mine), static_cast<void*>(counts.data()), sizeof mine);
    std::size_t const most = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
    std::vector<region_entry> send = local();
    send.resize(most);
    std::vector<region_entry> all(most * static_cast<std::size_t>(ranks));
    if (most > 0)
      allgather(static_cast<void const*>(send.data()), static_cast<void*>(all.data()), most * sizeof(region_entry));
    peers_.assign(static_cast<std::size_t>(ranks), {});
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      for (std::size_t i = 0; i < most; ++i)
        if (all[r * most + i].length != 0) peers_[r].push_back(all[r * most + i]);
      std::sort(peers_[r].begin(), peers_[r].end(),
                [](region_entry const& a, region_entry const& b) { return a.base < b.base; });
    }
  }
  /// Rank `rank`'s entry holding [addr, addr + bytes), or nullptr (after exchange()).
  region_entry const* find(int rank, std::uint64_t addr, std::size_t bytes) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= peers_.size()) return nullptr;
    auto const& t = peers_[static_cast<std::size_t>(rank)];
    auto it =
        std::upper_bound(t.begin(), t.end(), addr, [](std::uint64_t a, region_entry const& e) { return a < e.base; });
    if (it == t.begin() || !covers(*--it, addr, bytes)) return nullptr;
    return &*it;
  }
  int ranks() const noexcept { return static_cast<int>(peers_.size()); }

 private:
  static bool covers(region_entry const& e, std::uint64_t addr, std::size_t bytes) noexcept {
    return addr >= e.base && bytes <= e.length && addr - e.base <= e.length - bytes;
  }
  struct held {
    region_entry entry;
    std::unique_ptr<memory_region> mr;
  };
  device& dev_;
  std::map<std::uint64_t, held> regions_;
  std::vector<std::vector<region_entry>> peers_;
};

/// Who posts to a qp: a GPU's threads (the doorbell register mapped into the GPU) or a host thread
/// (the register through the UAR's own host mapping; the queues must then be in host memory).
enum class poster : std::uint8_t { gpu, host };

/// Options of one QP.
struct qp_options {
  std::uint32_t log_sq_depth = 10;  ///< WQEBBs, at most log2(max_sq_depth) and cmd_hca_cap.log_max_qp_sz
  cq_mode mode = cq_mode::collapsed;
  std::uint32_t log_ncqe = 0;  ///< owner-bit CQs: log2 of the entries (collapsed CQs: the SQ's depth)
  std::uint32_t ring_step = 32;
  std::uint32_t mtu = 5;  ///< ibv_mtu value (5 = 4096 B), capped at both ports' active MTU
  poster posted_by = poster::gpu;
};

/// One GPU-posted RC QP with its CQ (steps 5-12, 14). Construct, exchange local_info() with the
/// peer, call connect(peer_info), then pass send_queue() to kernels.
class qp {
 public:
  qp(device& dev, qp_options opt = {}) : dev_(dev), be_(dev.nic()), mem_(dev.memory()), opt_(opt) {
    try {
      build();
    } catch (...) {
      release();
      throw;
    }
  }
  qp(qp const&) = delete;
  qp& operator=(qp const&) = delete;
  ~qp() { release(); }

  /// Step 11: what the peer needs to connect to this QP.
  connection_info local_info() const { return dev_.info_for(qpn_); }

  /// Step 12b/c: INIT -> RTR -> RTS against the peer's connection_info (IB or RoCE).
  void connect(connection_info const& peer) {
    bool const roce = dev_.port_attr().ethernet;
    std::uint32_t const mtu = dev_.path_mtu(qpn_, peer, opt_.mtu);
    device_caps const& caps = dev_.caps();
    device_options const& o = dev_.options();
    {  // INIT -> RTR
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_init2rtr_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_mtu, mtu);
      prm::set(in, prm::qpc_log_msg_max, caps.log_max_msg);
      prm::set(in, prm::qpc_remote_qpn, peer.qpn);
      prm::set(in, prm::qpc_min_rnr_nak, 12);
      prm::set(in, prm::qpc_next_rcv_psn, 0);
      // What this QP answers; local_info() told the peer, which caps its log_sra_max by it.
      prm::set(in, prm::qpc_log_rra_max, dev_.ra_cap());
      prm::set(in, prm::ads_vhca_port_num, dev_.port());
      if (roce) {
        // grh stays 0 on RoCE (refs section 5: the bit is reserved there; every RoCE packet has a
        // GRH). The destination MAC comes from an address handle the provider resolves.
        ah_info ah;
        if (int const e = be_.resolve_ah(dev_.pd(), dev_.port(), peer.gid, dev_.gid_index(), &ah); e != 0)
          detail::fail(
              "resolving the RoCE peer's MAC (ibv_create_ah) failed: " + detail::errno_text(e) + detail::said(be_),
              "check the GID index and that the peer's address is reachable (ping it)");
        std::uint8_t const tclass = dev_.traffic_class();
        prm::set_bytes(in, prm::ads_rmac_bit, ah.rmac, 6);
        prm::set_bytes(in, prm::ads_rgid_rip_bit, peer.gid, 16);
        prm::set(in, prm::ads_hop_limit, 255);
        prm::set(in, prm::ads_src_addr_index, static_cast<std::uint32_t>(dev_.gid_index()));
        prm::set(in, prm::ads_tclass, tclass);
        prm::set(in, prm::ads_eth_prio, o.sl & 7u);  // the kernel's mlx5_set_path: eth_prio = sl & 7
        if (dev_.gid().type == gid_type::roce_v2) {
          prm::set(in, prm::ads_dscp, tclass >> 2);
          prm::set(in, prm::ads_udp_sport, detail::udp_sport(detail::flow_label(qpn_, peer.qpn)));
        }
      } else {
        prm::set(in, prm::ads_grh, 0);
        prm::set(in, prm::ads_rlid, peer.lid);
        prm::set(in, prm::ads_sl, o.sl);
      }
      int const rc = be_.obj_modify(qp_obj_, in, sizeof in, out, sizeof out);
      detail::check_cmd(be_, rc, out,
                        "DEVX INIT2RTR_QP (QP " + detail::hex(qpn_) + " to " + detail::hex(peer.qpn) + ")");
    }
    {  // RTR -> RTS
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_rtr2rts_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_log_ack_req_freq, 0);
      prm::set(in, prm::qpc_log_sra_max, std::min({dev_.ra_cap(), unsigned{peer.log_rra_max}}));
      prm::set(in, prm::qpc_next_send_psn, 0);
      prm::set(in, prm::qpc_retry_count, 7);
      prm::set(in, prm::qpc_rnr_retry, 7);
      prm::set(in, prm::ads_ack_timeout, 20);
      int const rc = be_.obj_modify(qp_obj_, in, sizeof in, out, sizeof out);
      detail::check_cmd(be_, rc, out, "DEVX RTR2RTS_QP (QP " + detail::hex(qpn_) + ")");
    }
  }

  /// Step 14: the device view kernels post through (valid after connect()).
  verbs_gpu::send_queue send_queue() const noexcept {
    verbs_gpu::send_queue sq{};
    sq.ring = static_cast<std::byte*>(ring_.ptr);
    sq.log_depth = opt_.log_sq_depth;
    sq.qpn = qpn_;
    sq.dbrec = static_cast<std::uint32_t*>(qp_dbr_.ptr) + dbr_snd;
    sq.doorbell = doorbell_;
    sq.counters = static_cast<qp_counters*>(counters_.ptr);
    sq.cq = completion_queue{static_cast<cqe64*>(cq_.ptr), static_cast<std::uint32_t*>(cq_dbr_.ptr),
                             opt_.mode == cq_mode::collapsed ? 0 : opt_.log_ncqe, opt_.mode, cqn_};
    sq.ring_step = opt_.ring_step;
    // GPU memory: the NIC reads ring and doorbell record where the GPU wrote them, so GPU-scope
    // release fences order the WQEs before the record; host memory needs system scope.
    sq.scope = mem_.gpu() ? nic_scope::gpu : nic_scope::system;
    return sq;
  }
  std::uint32_t qpn() const noexcept { return qpn_; }
  std::uint32_t cqn() const noexcept { return cqn_; }
  /// log2 of the CQ's entries as created (collapsed: the SQ's depth, refs section 3).
  std::uint32_t log_cq_size() const noexcept { return log_cq_; }

 private:
  /// One buffer of control memory and its UMEM.
  struct block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    umem_handle umem{};
  };

  /// Control memory for one object: `bytes` rounded up to 4 KiB, filled with `value`.
  void allocate(block& b, std::size_t bytes, unsigned char value, char const* what) {
    // Whole host pages: dma-buf exports (cuMemGetHandleForAddressRange) need the host page size,
    // 64 KiB on some hosts.
    b.bytes = detail::round_up(bytes, std::max<std::size_t>(4096, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))));
    std::string why;
    b.ptr = mem_.allocate(b.bytes, 4096, &why);
    if (b.ptr == nullptr)
      detail::fail(
          "allocating " + std::to_string(b.bytes) + " bytes of " + mem_.name() + " for the " + what + " failed: " + why,
          "free memory on the GPU, or use fewer or shallower QPs");
    if (!mem_.fill(b.ptr, value, b.bytes, &why))
      detail::fail(std::string("initialising the ") + what + " (" + mem_.name() + ") failed: " + why);
  }

  /// Step 6: a UMEM of its own for one object, dma-buf first (refs section 4: NVSHMEM and DOCA give
  /// the CQ ring, CQ doorbell record, WQ and QP doorbell record a UMEM each, at offset 0, so the
  /// page size the kernel picks for a UMEM can never misalign an object inside it).
  void register_umem(block& b, char const* what) {
    // Every page size from 4 KiB up, as rdma-core's mlx5dv_devx_umem_reg passes; the kernel picks
    // the largest the memory allows (devx_umem_find_best_pgsize).
    std::uint64_t const page_sizes = ~std::uint64_t{0xfff};
    int e = 0;
    if (mem_.gpu() && dev_.dmabuf()) {
      int const fd = mem_.dmabuf_fd(b.ptr, b.bytes);
      if (fd >= 0) {
        b.umem = be_.umem_reg(nullptr, b.bytes, access::local_write, fd, page_sizes, &e);  // nullptr: offset 0
        ::close(fd);
      }
    }
    if (!b.umem) b.umem = be_.umem_reg(b.ptr, b.bytes, access::local_write, -1, page_sizes, &e);
    if (!b.umem)
      detail::fail(std::string("registering the ") + what + " (" + std::to_string(b.bytes) + " bytes of " +
                       mem_.name() + ") as a DEVX UMEM failed: " + detail::errno_text(e) + detail::said(be_),
                   "GPU-resident queues need dma-buf (EFAULT here often means dma-buf is refused for this "
                   "allocation) or nvidia-peermem");
  }

  void build() {
    device_caps const& caps = dev_.caps();
    std::string const on = " on " + dev_.name();
    if (opt_.log_sq_depth > 15 || (1u << opt_.log_sq_depth) > max_sq_depth)  // no shift past 31
      detail::fail("qp_options::log_sq_depth = " + std::to_string(opt_.log_sq_depth) +
                       ": the SQ is at most max_sq_depth (32768) WQEBBs",
                   "the 16-bit wqe_counter must stay unambiguous (completion_queue.cuh)");
    if (opt_.log_sq_depth > caps.log_max_qp_sz)
      detail::fail("qp_options::log_sq_depth = " + std::to_string(opt_.log_sq_depth) + " exceeds" + on +
                       "'s log_max_qp_sz = " + std::to_string(caps.log_max_qp_sz) + " (QUERY_HCA_CAP)",
                   "ask for a shallower SQ");
    // ---- refs section 3: a collapsed CQ as NVSHMEM and DOCA make it: cc = 1, oi = 1, as many
    // entries as the SQ has WQEBBs (log_cq_size = log2 of the depth rounded up to a power of two,
    // the whole ring allocated and 0xff-filled although only entry 0 is written).
    bool const collapsed = opt_.mode == cq_mode::collapsed;
    log_cq_ = collapsed ? detail::log2_ceil(std::uint64_t{1} << opt_.log_sq_depth) : opt_.log_ncqe;
    if (log_cq_ > caps.log_max_cq_sz)
      detail::fail("a CQ of 2^" + std::to_string(log_cq_) + " entries exceeds" + on +
                       "'s log_max_cq_sz = " + std::to_string(caps.log_max_cq_sz) + " (QUERY_HCA_CAP)",
                   collapsed ? "ask for a shallower SQ" : "ask for fewer CQ entries (qp_options::log_ncqe)");
    if (collapsed && !caps.cq_oi)
      detail::fail("a collapsed CQ needs overrun-ignore, which" + on + " lacks (cmd_hca_cap.cq_oi = 0)",
                   "use qp_options::mode = cq_mode::owner_bit");
    if (opt_.posted_by == poster::host && mem_.gpu())
      detail::fail("a QP the host posts to needs its rings in memory the host writes, not " + std::string(mem_.name()),
                   "give device_options::memory host memory (host_control_memory)");

    // ---- Step 5: control memory, one allocation per object (0xff marks CQEs invalid) ----------------
    allocate(ring_, std::size_t{wqebb_size} << opt_.log_sq_depth, 0, "SQ ring");
    allocate(cq_, sizeof(cqe64) << log_cq_, 0xff, "CQ");
    allocate(cq_dbr_, 64, 0, "CQ doorbell record");
    allocate(qp_dbr_, 64, 0, "QP doorbell record");
    allocate(counters_, sizeof(qp_counters), 0, "posting counters");
    // ---- Step 6: a UMEM each -------------------------------------------------------------------------
    register_umem(ring_, "SQ ring");
    register_umem(cq_, "CQ");
    register_umem(cq_dbr_, "CQ doorbell record");
    register_umem(qp_dbr_, "QP doorbell record");

    // ---- Step 7: the CQ (an NC UAR it names but the GPU never rings, EQ of vector 0) ------------------
    std::uint32_t eqn = 0;
    if (int const e = be_.query_eqn(0, &eqn); e != 0)
      detail::fail("query_eqn(0)" + on + " failed: " + detail::errno_text(e) + detail::said(be_));
    int e = 0;
    cq_uar_ = be_.alloc_uar(uar_type::nc, &e);
    if (!cq_uar_)
      detail::fail("alloc_uar(NC) for the CQ" + on + " failed: " + detail::errno_text(e) + detail::said(be_));
    {
      std::uint32_t in[prm::create_cq_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_cq);
      prm::set(in, prm::cqc_cqe_sz, 0);  // 64-byte CQEs
      prm::set(in, prm::cqc_cc, collapsed ? 1 : 0);
      prm::set(in, prm::cqc_oi, collapsed ? 1 : 0);
      prm::set(in, prm::cqc_log_cq_size, log_cq_);
      prm::set(in, prm::cqc_uar_page, cq_uar_.page_id);
      prm::set(in, prm::cqc_c_eqn, eqn);
      // With cq_umem_valid the firmware takes the page size from the UMEM (DOCA sets 0 and says so;
      // NVSHMEM's 4 matches its 64 KiB GPU pages; refs section 3).
      prm::set(in, prm::cqc_log_page_size, 0);
      prm::set(in, prm::cqc_page_offset, 0);
      prm::set(in, prm::cqc_dbr_umem_valid, 1);
      prm::set(in, prm::cqc_dbr_umem_id, cq_dbr_.umem.id);
      prm::set(in, prm::cqc_dbr_addr, 0);
      prm::set(in, prm::cq_umem_valid, 1);
      prm::set(in, prm::cq_umem_id, cq_.umem.id);
      prm::set(in, prm::cq_umem_offset, 0);
      cq_obj_ = be_.obj_create(in, sizeof in, out, sizeof out, &e);
      if (!cq_obj_) detail::check_cmd(be_, e != 0 ? e : EIO, out, "DEVX CREATE_CQ" + on);
      cqn_ = prm::get(out, prm::out_obj_number);
    }

    // ---- Step 8: the SQ doorbell UAR, mapped into the GPU (refs section 6) ----------------------------
    for (uar_type const t : {uar_type::nc_dedicated, uar_type::blue_flame, uar_type::nc}) {
      qp_uar_ = be_.alloc_uar(t, &e);
      if (qp_uar_) {
        qp_uar_type_ = t;
        break;
      }
    }
    if (!qp_uar_)
      detail::fail("alloc_uar for the SQ doorbell" + on +
                   " failed for NC_DEDICATED, BF and NC: " + detail::errno_text(e) + detail::said(be_));
    if (opt_.posted_by == poster::host) {
      doorbell_ = static_cast<std::uint64_t*>(qp_uar_.reg_addr);  // the host rings through the UAR's own mapping
    } else {
      // A BlueFlame register is 1 << log_bf_reg_size bytes (NVSHMEM maps all of it); NC registers 8.
      std::size_t const reg_bytes = qp_uar_type_ == uar_type::blue_flame ? std::size_t{1} << caps.log_bf_reg_size : 8;
      doorbell_ = dev_.map_doorbell(qp_uar_, reg_bytes);
      db_mapped_ = true;
    }

    // ---- Steps 9 and 10: CREATE_QP on the ring and QP doorbell record UMEMs ------------------------------
    {
      std::uint32_t in[prm::create_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_qp);
      prm::set(in, prm::qpc_st, prm::qp_st_rc);
      prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
      prm::set(in, prm::qpc_pd, dev_.pdn());
      prm::set(in, prm::qpc_uar_page, qp_uar_.page_id);
      prm::set(in, prm::qpc_ts_format, ts_format());
      prm::set(in, prm::qpc_log_sq_size, opt_.log_sq_depth);
      prm::set(in, prm::qpc_rq_type, prm::rq_type_zero_length);
      prm::set(in, prm::qpc_cqn_snd, cqn_);
      prm::set(in, prm::qpc_cqn_rcv, cqn_);
      prm::set(in, prm::qpc_log_page_size, 0);  // from the UMEM, as for the CQ
      prm::set(in, prm::qpc_page_offset, 0);
      prm::set(in, prm::qpc_dbr_umem_valid, 1);
      prm::set(in, prm::qpc_dbr_umem_id, qp_dbr_.umem.id);
      prm::set(in, prm::qpc_dbr_addr, 0);
      prm::set(in, prm::wq_umem_valid, 1);
      prm::set(in, prm::wq_umem_id, ring_.umem.id);
      prm::set(in, prm::wq_umem_offset, 0);
      qp_obj_ = be_.obj_create(in, sizeof in, out, sizeof out, &e);
      if (!qp_obj_) detail::check_cmd(be_, e != 0 ? e : EIO, out, "DEVX CREATE_QP" + on);
      qpn_ = prm::get(out, prm::out_obj_number);
    }
    // ---- Step 12a: RESET -> INIT --------------------------------------------------------------------
    {
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_rst2init_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
      prm::set(in, prm::qpc_rwe, 1);
      prm::set(in, prm::qpc_rre, 1);
      prm::set(in, prm::qpc_rae, 1);
      prm::set(in, prm::qpc_atomic_mode, prm::atomic_mode_up_to_8b);
      prm::set(in, prm::ads_vhca_port_num, dev_.port());
      prm::set(in, prm::ads_pkey_index, dev_.options().pkey_index);
      prm::set(in, prm::qpc_counter_set_id, 0);
      int const rc = be_.obj_modify(qp_obj_, in, sizeof in, out, sizeof out);
      detail::check_cmd(be_, rc, out, "DEVX RST2INIT_QP (QP " + detail::hex(qpn_) + ")");
    }
  }

  /// refs section 1: the kernel's rule for user QPs (get_qp_ts_format): FREE_RUNNING when the
  /// device supports it (capability FREE_RUNNING or FREE_RUNNING_AND_REAL_TIME), else DEFAULT. Every
  /// capability that applies must allow it: roce_cap.qp_ts_format on RoCE devices, and
  /// cmd_hca_cap.sq_ts_format for the send queue.
  std::uint32_t ts_format() const noexcept {
    auto const free_running = [](unsigned cap) {
      return cap == prm::ts_cap_free_running || cap == prm::ts_cap_free_running_and_real_time;
    };
    device_caps const& c = dev_.caps();
    bool const fr = free_running(c.sq_ts_format) && (!c.roce || free_running(c.roce_qp_ts_format));
    return fr ? prm::ts_format_free_running : prm::ts_format_default;
  }

  /// Releases what exists, users before what they use (also after a constructor failed halfway).
  /// A QP or CQ the firmware refuses to destroy may still be read and written by the NIC: then
  /// nothing it uses is released (device::kept_qps() counts it), rather than freed under it.
  void release() noexcept {
    bool const qp_gone = !qp_obj_ || be_.obj_destroy(qp_obj_) == 0;
    bool const cq_gone = qp_gone && (!cq_obj_ || be_.obj_destroy(cq_obj_) == 0);
    qp_obj_ = cq_obj_ = obj_handle{};
    if (!qp_gone || !cq_gone) {
      dev_.keep_qp();
      return;
    }
    if (db_mapped_) dev_.unmap_doorbell(qp_uar_);  // before the UAR is freed
    db_mapped_ = false;
    if (qp_uar_) be_.free_uar(qp_uar_);
    if (cq_uar_) be_.free_uar(cq_uar_);
    qp_uar_ = cq_uar_ = uar_handle{};
    for (block* b : {&qp_dbr_, &cq_dbr_, &cq_, &ring_, &counters_}) {
      if (b->umem) be_.umem_dereg(b->umem);
      if (b->ptr) mem_.deallocate(b->ptr);
      *b = block{};
    }
  }

  device& dev_;
  backend& be_;
  control_memory& mem_;
  qp_options opt_;
  block ring_, cq_, cq_dbr_, qp_dbr_, counters_;
  std::uint32_t log_cq_ = 0;
  uar_handle cq_uar_{}, qp_uar_{};
  uar_type qp_uar_type_ = uar_type::nc;
  bool db_mapped_ = false;
  std::uint64_t* doorbell_ = nullptr;  ///< the GPU's mapping of the register, or the host's (poster::host)
  obj_handle cq_obj_{}, qp_obj_{};
  std::uint32_t cqn_ = 0, qpn_ = 0;
};

/// One RC QP a host thread posts to with verbs_gpu's builders (ProxyQueue's NIC backend), with an
/// owner-bit CQ of its own, at least as many entries as the SQ has WQEBBs, so no completion is overwritten
/// before it is polled. Construct, exchange local_info(), connect(), then post through send_queue()
/// from one host thread.
///
/// Made with ordinary verbs where the backend has them (rdma-core; device_options::devx = false
/// opens the device without DEVX): ibv_create_cq and ibv_create_qp, whose rings, doorbell records
/// and doorbell register mlx5dv_init_obj exposes, connected with ibv_modify_qp. The firmware model
/// has no ordinary verbs: there it is a qp (above) with its rings in the device's control memory,
/// which must be host memory, and the host ringing the UAR's register itself (poster::host); the
/// posting, polling and connection data are the same either way.
class host_qp {
 public:
  host_qp(device& dev, std::uint32_t log_sq_depth) : dev_(dev) {
    if (!dev.nic().native_verbs_qps()) {
      qp_options o;
      o.log_sq_depth = log_sq_depth;
      o.mode = cq_mode::owner_bit;
      o.log_ncqe = log_sq_depth;
      o.posted_by = poster::host;
      devx_ = std::make_unique<qp>(dev, o);
      return;
    }
    // Every WQE may ask for a completion, so the CQ needs an entry per WQEBB of the ring, and the
    // provider sizes the ring by work request: mlx5's reserves its largest default RC WQE for each
    // (256 bytes, 4 WQEBBs, with the memory-window operations it enables by default). A CQ of 4
    // entries per work request covers that; a provider that made a larger ring gets a QP again
    // with a CQ of the ring's size.
    create(log_sq_depth, log_sq_depth + 2);
    if (h_.cqe_count < h_.sq_wqebbs) {
      std::uint32_t const log_ring = detail::log2_ceil(h_.sq_wqebbs);
      release();
      create(log_sq_depth, log_ring);
    }
    try {
      // What the builders and the poller assume of the rings rdma-core's provider made.
      auto const power_of_two = [](std::uint32_t v) { return v != 0 && (v & (v - 1)) == 0; };
      if (h_.sq_stride != wqebb_size || !power_of_two(h_.sq_wqebbs) || h_.sq_wqebbs < (1u << log_sq_depth) ||
          h_.sq_wqebbs > max_sq_depth)
        detail::fail("the provider's send queue has " + std::to_string(h_.sq_wqebbs) + " WQEBBs of " +
                     std::to_string(h_.sq_stride) +
                     " bytes; verbs_gpu posts 64-byte WQEBBs to a ring of a power "
                     "of two, at least 2^" +
                     std::to_string(log_sq_depth) + ", at most " + std::to_string(max_sq_depth));
      if (h_.cqe_size != sizeof(cqe64) || !power_of_two(h_.cqe_count))
        detail::fail("the provider's CQ has " + std::to_string(h_.cqe_count) + " entries of " +
                         std::to_string(h_.cqe_size) + " bytes; verbs_gpu reads 64-byte CQEs",
                     "unset MLX5_CQE_SIZE (or set it to 64)");
      if (h_.cqe_count < h_.sq_wqebbs)
        detail::fail("the provider's CQ has " + std::to_string(h_.cqe_count) + " entries for a send queue of " +
                         std::to_string(h_.sq_wqebbs) +
                         " WQEBBs: completions could be overwritten before the proxy polls them",
                     "the device's CQs cannot hold an entry per WQEBB of its send queues (`ibv_devinfo -v`: max_cqe), "
                     "which verbs_gpu's posting needs");
      counters_ = std::make_unique<qp_counters>();
      verbs_qp_step init;
      init.state = verbs_qp_step::to::init;
      init.port = dev.port();
      init.pkey_index = dev.options().pkey_index;
      init.access_flags = access::local_write | access::remote_write | access::remote_read | access::remote_atomic;
      step(init, "RESET -> INIT");
    } catch (...) {
      release();
      throw;
    }
  }
  host_qp(host_qp const&) = delete;
  host_qp& operator=(host_qp const&) = delete;
  ~host_qp() { release(); }

  std::uint32_t qpn() const noexcept { return devx_ ? devx_->qpn() : h_.qpn; }
  connection_info local_info() const { return devx_ ? devx_->local_info() : dev_.info_for(h_.qpn); }

  /// INIT -> RTR -> RTS against the peer's connection_info (IB or RoCE), as qp::connect.
  void connect(connection_info const& peer) {
    if (devx_) {
      devx_->connect(peer);
      return;
    }
    bool const roce = dev_.port_attr().ethernet;
    verbs_qp_step rtr;
    rtr.state = verbs_qp_step::to::rtr;
    rtr.port = dev_.port();
    rtr.path_mtu = dev_.path_mtu(h_.qpn, peer, 5);
    rtr.remote_qpn = peer.qpn;
    rtr.responder_rd_atomic = static_cast<std::uint8_t>(1u << dev_.ra_cap());  // what local_info() offered
    rtr.min_rnr_timer = 12;
    rtr.sl = roce ? static_cast<std::uint8_t>(dev_.options().sl & 7u) : dev_.options().sl;
    if (roce) {
      rtr.global = true;  // every RoCE packet has a GRH; the provider resolves the MAC
      std::memcpy(rtr.dgid, peer.gid, 16);
      rtr.sgid_index = dev_.gid_index();
      rtr.traffic_class = dev_.traffic_class();
    } else {
      rtr.dlid = peer.lid;
    }
    step(rtr, "INIT -> RTR (to QP " + detail::hex(peer.qpn) + ")");
    verbs_qp_step rts;
    rts.state = verbs_qp_step::to::rts;
    rts.port = dev_.port();
    rts.initiator_rd_atomic = static_cast<std::uint8_t>(1u << std::min(dev_.ra_cap(), unsigned{peer.log_rra_max}));
    step(rts, "RTR -> RTS");
  }

  /// The view the host thread posts and polls through (valid after connect()).
  verbs_gpu::send_queue send_queue() const noexcept {
    if (devx_) return devx_->send_queue();
    verbs_gpu::send_queue sq{};
    sq.ring = static_cast<std::byte*>(h_.sq);
    sq.log_depth = detail::log2_ceil(h_.sq_wqebbs);
    sq.qpn = h_.qpn;
    sq.dbrec = h_.dbrec + dbr_snd;
    sq.doorbell = h_.doorbell;
    sq.counters = counters_.get();
    sq.cq = completion_queue{static_cast<cqe64*>(h_.cqes), h_.cq_dbrec, detail::log2_ceil(h_.cqe_count),
                             cq_mode::owner_bit, h_.cqn};
    sq.scope = nic_scope::system;  // host memory, written by a host thread
    return sq;
  }

 private:
  /// ibv_create_cq + ibv_create_qp through the backend, into h_.
  void create(std::uint32_t log_send_wrs, std::uint32_t log_cqes) {
    backend& be = dev_.nic();
    int e = 0;
    h_ = be.create_verbs_qp(dev_.pd(), log_send_wrs, log_cqes, &e);
    if (!h_)
      detail::fail("ibv_create_cq (" + std::to_string(1u << log_cqes) + " entries) + ibv_create_qp (RC, " +
                       std::to_string(1u << log_send_wrs) + " send WRs) on " + dev_.name() +
                       " failed: " + detail::errno_text(e) + detail::said(be),
                   "check `ulimit -l` (locked memory) and the device's QP and CQ limits");
  }
  void step(verbs_qp_step const& s, std::string const& what) {
    if (int const e = dev_.nic().modify_verbs_qp(h_, s); e != 0)
      detail::fail("ibv_modify_qp " + what + " of QP " + detail::hex(h_.qpn) + " on " + dev_.name() +
                       " failed: " + detail::errno_text(e) + detail::said(dev_.nic()),
                   "check the port, the peer's connection data and the device's read/atomic limits");
  }
  /// A QP rdma-core refuses to destroy may still be used by the NIC: then its counters are kept too.
  void release() noexcept {
    if (h_ && dev_.nic().destroy_verbs_qp(h_) != 0) {
      dev_.keep_qp();
      (void)counters_.release();
    }
    h_ = verbs_qp_handle{};
  }

  device& dev_;
  std::unique_ptr<qp> devx_;               ///< the firmware model's way
  verbs_qp_handle h_{};                    ///< rdma-core's way
  std::unique_ptr<qp_counters> counters_;  ///< the posting counters (rdma-core's way; the qp has its own)
};

/// Step 11: exchanges connection_info through any allgather: `allgather(mine, all, bytes)` writes
/// every rank's `bytes` bytes, in rank order, into `all` (an MPI_Allgather, a bootstrap's
/// allgather, torch.distributed through a callback).
template <class AllGather>
std::vector<connection_info> exchange(AllGather&& allgather, connection_info const& mine, int ranks) {
  std::vector<connection_info> all(static_cast<std::size_t>(ranks));
  allgather(static_cast<void const*>(&mine), static_cast<void*>(all.data()), sizeof(connection_info));
  return all;
}

}  // namespace gpucomm::verbs_gpu::host
