#pragma once
// Steps 1-4 of the host set-up: host::device chooses the NIC (by name, else the mlx5 device closest
// to the GPU in the PCI tree), opens it with DEVX (or as an ordinary verbs context for host_qps),
// queries the port and QUERY_HCA_CAP and checks what verbs_gpu needs, picks the RoCE GID, decides
// dma-buf or peer memory, allocates the PD, and maps doorbell registers into the GPU a host page at
// a time. It also says what a peer needs to connect to a QP on it (connection_info, info_for) and
// the limits both ends of a connection agree on (path_mtu, ra_cap, traffic_class).
//
//   host::device dev(nic, {.name = "mlx5_0"});   // nic: a host::backend; {}: the NIC closest to the GPU

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "detail/setup_common.hpp"
#include "pci_path.hpp"
#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

namespace detail {
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

}  // namespace gpucomm::verbs_gpu::host
