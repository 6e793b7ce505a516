#pragma once
// A software model of an mlx5 NIC's firmware command interface (and of the kernel and rdma-core
// calls around it), for running verbs_gpu's host set-up where no NIC exists. A test and development
// tool: it implements host::backend (host/backend.hpp), so the set-up runs against it unchanged.
//
//   model::firmware_config   one device: name, PCI address, ports (link layer, LID, MTU, GID table)
//                            and a capability set (ConnectX-7-like by default)
//   model::firmware_fabric   the devices that can reach each other; shared by every firmware_model
//                            opened on it, so QPs on two models ("two hosts") can be connected
//   model::firmware_model    one open device context: PDs, UMEMs, UARs, EQs, CQs, QPs, MRs, AHs
//
// Every firmware command (QUERY_HCA_CAP, CREATE_CQ, CREATE_QP, RST2INIT / INIT2RTR / RTR2RTS,
// 2RST / 2ERR, and the DESTROY_* the kernel issues when an object is destroyed) is decoded with
// layouts generated from the Linux kernel's include/linux/mlx5/mlx5_ifc.h
// (detail/mlx5_ifc_layout.hpp), never with host/prm_cmd.hpp, so a wrong offset in the set-up's own
// table shows up here as a rejected or misread command. The model checks what firmware checks:
// known opcode, input and output length, reserved bits zero, defined enumeration values, capability
// limits, object existence and ownership, UMEM bounds, doorbell-record alignment, legal QP state
// transitions, access flags and atomic mode against the capabilities. It checks a few things
// hardware does not check but a working connection needs, marked "model check" in its messages:
// RTR's path leads to an existing port and QP of the fabric (rlid, rgid, rmac, remote_qpn), the two
// ends point at each other, and their PSNs and read/atomic depths agree; grh is 0 on RoCE ports (a
// RoCE packet always has a GRH: rdma-core calls the bit reserved there and the kernel never sets
// it); a CQ or work queue buffer at a UMEM offset lies on a page boundary of every page size the
// kernel may pick for that UMEM (from its page_size_bitmap and length, as devx_umem_find_best_pgsize
// does), since firmware addresses it through the UMEM's pages.
//
// Verdicts come back as on hardware: the command's output holds the firmware status (the kernel's
// MLX5_CMD_STAT_* values) and a syndrome, and the call returns EREMOTEIO (what mlx5_cmd_do returns
// to DEVX for a failed command). The syndrome is the model's own: the 32-bit FNV-1a hash of the
// name of the check that failed, e.g. "create_qp_in.qpc.log_sq_size" (syndrome_of() computes it), so
// tests can say which check fired. last_error() says the same in words. Calls the kernel or
// rdma-core would refuse before firmware sees them return an errno value, also explained there.
// Statuses: BAD_OP_ERR (0x2) an opcode the model does not know; BAD_INP_LEN_ERR / BAD_OUTP_LEN_ERR
// (0x50 / 0x51) a buffer shorter than the command's structure; BAD_PARAM_ERR (0x3) a reserved bit
// set, an undefined or unsupported value, a buffer past its UMEM, a misaligned doorbell record, and
// the model checks; BAD_RES_ERR (0x5) a number that names no object of this context; LIM_ERR (0x8) a
// size or depth above its capability; BAD_RES_STATE_ERR (0x9) a transition from the wrong QP state,
// a CQ destroyed while a QP uses it; NO_RES_ERR (0xf) a full table. As the kernel's DEVX layer
// does, CREATE_CQ / CREATE_QP are taken with cq_umem_valid, dbr_umem_valid and wq_umem_valid set.
//
// Host-only: no CUDA, no rdma-core. The UAR "doorbell register" is a plain host buffer, and
// map_doorbell() hands back its host address (there is no GPU to map it into). Work requests are
// not executed here; model::nic (nic_model.hpp) is the data path.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gpucomm/verbs_gpu/host/backend.hpp>
#include "qp_state.hpp"

namespace gpucomm::verbs_gpu::model {

/// The timestamp formats a device supports (cmd_hca_cap.sq_ts_format / rq_ts_format,
/// roce_cap.qp_ts_format; the kernel's MLX5_TIMESTAMP_FORMAT_CAP_*).
enum class ts_formats : std::uint8_t { free_running = 0, real_time = 1, free_running_and_real_time = 2 };

/// General device capabilities (the cmd_hca_cap fields the model reports and enforces). The
/// defaults resemble a ConnectX-7; port_type, num_ports and roce follow from the ports.
struct general_caps {
  std::uint8_t cqe_version = 1;
  std::uint8_t log_max_qp = 17;     ///< QPs per device
  std::uint8_t log_max_qp_sz = 15;  ///< WQEs (SQ: 64-byte basic blocks) per queue
  std::uint8_t log_max_cq = 24;
  std::uint8_t log_max_cq_sz = 22;  ///< CQEs per CQ
  std::uint8_t log_max_eq = 7;
  std::uint8_t log_max_eq_sz = 22;
  std::uint8_t log_max_pd = 23;
  std::uint8_t log_max_mkey = 24;
  std::uint8_t log_max_mrw_sz = 64;  ///< largest memory region
  std::uint8_t log_max_msg = 30;
  std::uint8_t log_max_ra_req_qp = 4;  ///< RDMA reads/atomics outstanding as requester (log_sra_max)
  std::uint8_t log_max_ra_res_qp = 4;  ///< ... as responder (log_rra_max)
  std::uint8_t log_max_umem = 24;
  ts_formats sq_ts_format = ts_formats::free_running_and_real_time;
  ts_formats rq_ts_format = ts_formats::free_running_and_real_time;
  bool atomic = true;
  bool cq_oi = true;  ///< CQs may ignore overrun (cqc.oi)
  bool rc = true;
  bool cqe_compression = false;
  bool apu = false;
  bool bf = true;      ///< BlueFlame UARs
  bool uar_4k = true;  ///< 4 KiB UARs
  bool umem_uid_0 = true;
  std::uint8_t log_bf_reg_size = 9;  ///< BlueFlame register: 512 bytes (two 256-byte halves)
  std::uint8_t uar_sz = 0;
  std::uint8_t log_pg_sz = 12;
  std::uint16_t log_uar_page_sz = 0;  ///< UAR pages of 4 KiB << this
  std::uint32_t num_of_uars_per_page = 1;
  std::uint16_t max_num_eqs = 256;
};

/// RoCE capabilities (roce_cap), reported for devices with an Ethernet port.
struct roce_caps {
  ts_formats qp_ts_format = ts_formats::free_running_and_real_time;
  std::uint8_t l3_type = 0x6;       ///< IPv4 and IPv6 (MLX5_ROCE_L3_TYPE_*_CAP)
  std::uint8_t roce_version = 0x5;  ///< RoCE v1 and v2 (MLX5_ROCE_VERSION_*_CAP)
  std::uint16_t r_roce_dest_udp_port = 4791;
  std::uint16_t r_roce_min_src_udp_port = 0xc000;
  std::uint16_t r_roce_max_src_udp_port = 0xffff;
  std::uint16_t roce_address_table_size = 255;
};

/// Atomic capabilities (atomic_caps). The defaults: compare-and-swap and fetch-and-add, plain and
/// masked ("extended"), on 4 and 8 bytes, responses in host byte order.
struct atomic_caps {
  std::uint16_t atomic_operations = 0xf;  ///< MLX5_ATOMIC_OPS_* bits
  std::uint16_t atomic_size_qp = 0xc;     ///< bit k: 2^k-byte operands
  std::uint16_t atomic_size_dc = 0xc;
  std::uint8_t atomic_req_8B_endianness_mode = 1;
  bool supported_atomic_req_8B_endianness_mode_1 = true;
};

/// The three capability pages QUERY_HCA_CAP answers for.
struct hca_caps {
  general_caps general;
  roce_caps roce;
  atomic_caps atomic;
};

/// One port of a modelled device.
struct port_config {
  bool ethernet = false;  ///< RoCE; else InfiniBand
  bool active = true;
  std::uint16_t lid = 0;         ///< InfiniBand: unique in the fabric, not 0
  std::uint32_t active_mtu = 5;  ///< ibv_mtu value (1 = 256 B ... 5 = 4096 B)
  std::uint16_t pkey_table_length = 128;
  std::vector<host::gid_entry> gids;  ///< the GID table, empty entries included

  /// An InfiniBand port: LID `lid`, GID 0 the link-local fe80::`guid` (type IB), entries 1-3 empty.
  static port_config infiniband(std::uint16_t lid, std::uint64_t guid);
  /// A RoCE port as Linux fills its GID table: 0/1 link-local fe80::`interface_id` (RoCE v1/v2),
  /// 2/3 the IPv4-mapped ::ffff:`ipv4` (v1/v2; ipv4 in host order, 0x0a000001 = 10.0.0.1),
  /// 4-7 empty.
  static port_config roce(std::uint32_t ipv4, std::uint64_t interface_id);
};

/// One modelled device.
struct firmware_config {
  std::string name = "mlx5_0";  ///< unique in its fabric
  bool mlx5 = true;             ///< false: listed, but open() fails as for a non-mlx5 device
  std::string pci_bus_id = "0000:17:00.0";
  std::vector<port_config> ports = {port_config::infiniband(1, 0x0002c90300a1b2c3)};
  hca_caps caps;                       ///< the current capabilities (QUERY_HCA_CAP "current"; enforced)
  std::optional<hca_caps> max_caps;    ///< QUERY_HCA_CAP "maximum"; empty: the same as caps
  std::uint32_t num_comp_vectors = 8;  ///< completion vectors query_eqn() answers for
  bool nc_dedicated_uar = true;        ///< supports MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
  /// The host page size the model acts out (4096 to 65536): map_doorbell maps whole host pages and,
  /// as cudaHostRegister does, refuses (EEXIST) a page this context has mapped already. UAR pages
  /// sit 16 to a 64 KiB block, so with 65536 several UARs share a host page.
  std::size_t host_page_bytes = 4096;
  /// Modelled by another process (a NIC of another host or process, which has its own fabric
  /// object): its ports answer RTR's path checks, but its QPs are not known here, so the checks
  /// that need the peer QP (it exists, points back, PSNs and depths agree) are left to that
  /// process's model. Not listed by devices() and not openable here.
  bool remote = false;
};

/// A CQ as its creator configured it (what a data path needs: nic_backend.hpp).
struct cq_description {
  bool collapsed = false, overrun_ignore = false;
  unsigned log_size = 0;
  std::uint32_t umem = 0, dbr_umem = 0;  ///< UMEM ids of the entries and of the doorbell record
  std::uint64_t umem_offset = 0, dbr_offset = 0;
};

/// A QP as created and moved so far.
struct qp_description {
  qp_state state = qp_state::reset;
  std::uint32_t pd = 0, cqn_snd = 0, cqn_rcv = 0, uar_page = 0;
  std::uint32_t wq_umem = 0, dbr_umem = 0;  ///< UMEM ids of the SQ ring and of the doorbell record
  std::uint64_t wq_offset = 0, dbr_offset = 0;
  unsigned log_sq_size = 0;
  bool rae = false, rre = false, rwe = false;
  std::uint32_t remote_qpn = 0;  ///< after RTR
  std::string peer_device;       ///< after RTR: the device the path leads to
  bool peer_remote = false;      ///< ... which another process models (firmware_config::remote)
};

namespace detail {
struct fabric_state;
struct firmware_engine;
struct handle_rec;
}  // namespace detail

/// The devices that can reach each other: a value handle, copies share the same devices. Every
/// device's ports are on one network: an IB path's rlid, a RoCE path's rgid finds its port here.
/// Thread-safe: models opened on one fabric may be used from different threads.
class firmware_fabric {
 public:
  firmware_fabric();
  explicit firmware_fabric(std::vector<firmware_config> devices);
  /// Adds a device. std::invalid_argument when its name, an IB LID or a GID is already taken, or a
  /// value does not fit its capability field.
  void add_device(firmware_config config);
  /// Every device, as host::backend::devices() lists them.
  std::vector<host::device_entry> devices() const;

 private:
  friend class firmware_model;
  friend struct detail::firmware_engine;
  std::shared_ptr<detail::fabric_state> state_;
};

/// One device context ("one process's mlx5dv_open_device"), answering host::backend's calls from
/// the model's tables. Objects it creates are released when it is destroyed, like a process exit.
class firmware_model final : public host::backend {
 public:
  /// A context on `fabric`; open() picks the device.
  explicit firmware_model(firmware_fabric fabric);
  /// A context on a fabric of its own with the one device `config`.
  explicit firmware_model(firmware_config config = {});
  ~firmware_model() override;
  firmware_model(firmware_model const&) = delete;
  firmware_model& operator=(firmware_model const&) = delete;

  char const* name() const noexcept override { return "firmware model"; }
  /// last_error(): the check that failed, in words.
  std::string diagnostic() const override { return last_error_; }
  /// Host memory: the model keeps no rings in GPU memory (a GPU-less host test runs the set-up).
  host::control_memory& default_memory() override { return memory_; }

  // ---- host::backend ---------------------------------------------------------------------------
  std::vector<host::device_entry> devices() override;
  int open(std::string const& name) override;
  int query_port(std::uint8_t port, host::port_info* out) override;
  /// Empty entries answer 0 with type gid_type::empty.
  int query_gid(std::uint8_t port, int index, host::gid_entry* out) override;
  int query_device(host::device_info* out) override;
  int general_cmd(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) override;
  host::pd_handle alloc_pd(int* error) override;
  void dealloc_pd(host::pd_handle pd) override;
  /// dmabuf_fd is recorded, not read; page_size_bitmap 0 means any page size.
  host::umem_handle umem_reg(void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                             std::uint64_t page_size_bitmap, int* error) override;
  void umem_dereg(host::umem_handle umem) override;
  /// Every nc request of a context gets the same page (as rdma-core does); nc_dedicated and
  /// blue_flame requests get a page each. The page is 4 KiB of host memory with the doorbell
  /// register at offset 0x800, 8 bytes (nc, nc_dedicated) or 1 << log_bf_reg_size (blue_flame);
  /// pages sit 16 to a 64 KiB-aligned block (firmware_config::host_page_bytes).
  host::uar_handle alloc_uar(host::uar_type type, int* error) override;
  void free_uar(host::uar_handle uar) override;
  /// Vector v < num_comp_vectors answers EQ number first_comp_eqn + v.
  int query_eqn(std::uint32_t vector, std::uint32_t* eqn) override;
  host::obj_handle obj_create(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
                              int* error) override;
  int obj_modify(host::obj_handle obj, void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) override;
  /// Runs the DESTROY_CQ / DESTROY_QP the kernel keeps for the object. EBUSY (nothing destroyed)
  /// when firmware refuses, e.g. a CQ that a QP still uses.
  int obj_destroy(host::obj_handle obj) override;
  /// lkey == rkey, as on mlx5.
  host::mr_handle reg_mr(host::pd_handle pd, void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                         std::uint64_t dmabuf_offset, int* error) override;
  void dereg_mr(host::mr_handle mr) override;
  /// RoCE: the MAC of the port holding dgid (mac_of(dgid)); EHOSTUNREACH when no port of the
  /// fabric has it. InfiniBand ports: 0 with a zero MAC (no L2 address).
  int resolve_ah(host::pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16], int sgid_index,
                 host::ah_info* out) override;
  /// Host-only model: *device_pointer is uar.reg_addr, the start of the range asked for, which must
  /// cover the UAR's doorbell register (EINVAL). EEXIST when a host page of the range is already
  /// mapped by this context (a second cudaHostRegister of it fails too). unmap_doorbell drops the
  /// range that starts on uar.reg_addr's host page.
  int map_doorbell(host::uar_handle uar, std::size_t bytes, void** device_pointer) override;
  void unmap_doorbell(host::uar_handle uar) override;

  // ---- the model's own view ----------------------------------------------------------------------
  /// Why the last call failed, in words naming the field; empty after a call that succeeded.
  std::string const& last_error() const noexcept { return last_error_; }
  /// The syndrome the model reports when `check` fails: FNV-1a (32 bits) of the check's name.
  static constexpr std::uint32_t syndrome_of(std::string_view check) noexcept {
    std::uint32_t h = 2166136261u;
    for (char c : check) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    return h;
  }
  /// The MAC the model gives the RoCE port holding `gid`: 02:00 and the IPv4 address for an
  /// IPv4-mapped GID, else 02 and five bytes of FNV-1a of the GID.
  static host::ah_info mac_of(std::uint8_t const (&gid)[16]) noexcept;
  /// First EQ number of the completion vectors.
  static constexpr std::uint32_t first_comp_eqn = 0x20;

  /// A collapsed CQ (cc = 1) created without overrun-ignore (oi = 0): its single CQE slot is
  /// rewritten by every completion, which firmware counts as an overrun from the second one on
  /// unless the consumer index moves. std::out_of_range for a CQ this context does not have.
  bool cq_overrun_possible(std::uint32_t cqn) const;
  /// The state of QP qpn of this device; empty when there is none.
  std::optional<qp_state> query_qp_state(std::uint32_t qpn) const;
  /// What `obj` (an obj_create handle of this context) is: a CQ (true) or QP, and its number.
  std::pair<bool, std::uint32_t> object_of(host::obj_handle obj) const;
  /// CQ cqn / QP qpn of this context; empty when it has none.
  std::optional<cq_description> describe_cq(std::uint32_t cqn) const;
  std::optional<qp_description> describe_qp(std::uint32_t qpn) const;
  /// The opened device's index in its fabric (order of addition); -1 before open().
  std::size_t device_index() const noexcept { return device_; }
  /// Objects released out of order (a PD, UMEM or UAR still used by a CQ, QP or MR, a mapped UAR
  /// freed): counted and kept alive, as firmware refuses to release them.
  std::size_t lifetime_errors() const noexcept { return lifetime_errors_; }
  /// The objects this context holds now (PDs, UMEMs, UARs, CQs, QPs, MRs: every live handle). The
  /// model releases what is left when the context closes, so a leak shows only here.
  std::size_t live_objects() const noexcept { return handles_.size(); }
  firmware_fabric const& fabric() const noexcept { return fabric_; }

 private:
  friend struct detail::firmware_engine;
  firmware_fabric fabric_;
  std::uint64_t context_ = 0;
  std::size_t device_ = static_cast<std::size_t>(-1);         ///< index in the fabric; -1 until open()
  std::vector<std::unique_ptr<detail::handle_rec>> handles_;  ///< what this context's handles' impl point at
  std::string last_error_;
  std::size_t lifetime_errors_ = 0;
  host::host_control_memory memory_;
};

}  // namespace gpucomm::verbs_gpu::model

#include "detail/firmware.inl"
