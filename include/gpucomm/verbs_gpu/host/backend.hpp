#pragma once
// The seam between verbs_gpu's host set-up (setup.hpp) and what it talks to: rdma-core on a real
// mlx5 NIC (rdma_core_backend.hpp), or the firmware model (model/firmware.hpp), which answers the
// same calls from tables of its own and decodes every firmware command with a layout taken from the
// Linux kernel's mlx5_ifc.h, independent of prm_cmd.hpp. The set-up code is the same for both; only
// the backend differs.
//
// The calls mirror rdma-core's, one for one, so the rdma-core backend is a thin forwarder:
//   devices()          ibv_get_device_list + mlx5dv_is_supported + the PCI address from sysfs
//   open()             mlx5dv_open_device(MLX5DV_CONTEXT_FLAGS_DEVX)
//   query_port()       ibv_query_port
//   query_gid()        ibv_query_gid_ex (the entry's type: IB, RoCE v1, RoCE v2; empty entries)
//   query_device()     ibv_query_device
//   general_cmd()      mlx5dv_devx_general_cmd (QUERY_HCA_CAP and other commands on no object)
//   alloc_pd()         ibv_alloc_pd + mlx5dv_init_obj(MLX5DV_OBJ_PD) for its number
//   umem_reg()         mlx5dv_devx_umem_reg_ex (dma-buf when a descriptor is given) / _reg
//   alloc_uar()        mlx5dv_devx_alloc_uar
//   query_eqn()        mlx5dv_devx_query_eqn
//   obj_create() / obj_modify() / obj_destroy()   mlx5dv_devx_obj_*
//   reg_mr()           ibv_reg_dmabuf_mr / ibv_reg_mr
//   resolve_ah()       ibv_create_ah + mlx5dv_init_obj(MLX5DV_OBJ_AH) (RoCE: the peer's MAC)
//   map_doorbell()     cudaHostRegister(IoMemory) + cudaHostGetDevicePointer of a UAR's register
//   async_events()     mlx5dv_devx_get_event on a DEVX event channel every CQ and QP is subscribed
//                      to (their errors), and ibv_get_async_event (port and device errors)
//   default_memory()   where the control memory (SQ ring, CQ, doorbell records) comes from: GPU
//                      memory for rdma-core (gpu_memory.hpp), host memory for the model
// and, for QPs a host thread posts to with ordinary verbs (no DEVX: ProxyQueue's NIC backend):
//   open_verbs()       ibv_open_device (no DEVX context)
//   create_verbs_qp()  ibv_create_cq + ibv_create_qp (RC) + mlx5dv_init_obj(QP, CQ): the rings,
//                      doorbell records and doorbell register the provider made, which the host
//                      posts to with verbs_gpu's own WQE builders
//   modify_verbs_qp()  ibv_modify_qp (RESET -> INIT -> RTR -> RTS)
//   destroy_verbs_qp() ibv_destroy_qp + ibv_destroy_cq
// The firmware model has no ordinary verbs (its QPs are made with DEVX commands, which it decodes):
// native_verbs_qps() says which, and host_qp (setup.hpp) builds a host-posted DEVX QP there.
//
// Errors: calls that rdma-core reports with errno return a non-zero errno value (or an empty
// handle with `error` set). A firmware command (general_cmd, obj_create, obj_modify) that reached
// the firmware and failed returns EREMOTEIO, what the kernel's mlx5_cmd_do hands DEVX, with the
// firmware's status and syndrome in the command's output, as on hardware; any other non-zero value
// is a refusal before the firmware saw the command (the kernel or rdma-core: EINVAL, EPERM, ...).
// diagnostic() may add the backend's own words for the last failure (the model names the check
// that failed; rdma-core's backend the CUDA error of a doorbell mapping). The set-up turns all of it
// into setup_error.
// Host-only header: no CUDA, no rdma-core includes (either backend brings its own).

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

/// One RDMA device as the backend lists it.
struct device_entry {
  std::string name;        ///< "mlx5_0"
  bool mlx5 = false;       ///< an mlx5 (ConnectX) device, which verbs_gpu can drive
  std::string pci_bus_id;  ///< "0000:17:00.0", empty when unknown
};

/// What set-up needs of a port (ibv_port_attr's subset).
struct port_info {
  bool active = false;
  bool ethernet = false;         ///< RoCE (IBV_LINK_LAYER_ETHERNET); else InfiniBand
  std::uint16_t lid = 0;         ///< InfiniBand only
  std::uint32_t active_mtu = 0;  ///< ibv_mtu value (1 = 256 B ... 5 = 4096 B)
  int gid_table_length = 0;
  std::uint16_t pkey_table_length = 0;
};

/// One GID table entry (ibv_gid_entry's subset).
enum class gid_type : std::uint8_t { empty, ib, roce_v1, roce_v2 };
struct gid_entry {
  gid_type type = gid_type::empty;
  std::uint8_t gid[16] = {};
  bool ipv4_mapped() const noexcept {  ///< ::ffff:a.b.c.d, a RoCE v2 IPv4 address
    for (int i = 0; i < 10; ++i)
      if (gid[i] != 0) return false;
    return gid[10] == 0xff && gid[11] == 0xff;
  }
};

/// What set-up needs of ibv_query_device.
struct device_info {
  int max_qp_rd_atom = 0;
  int max_qp_init_rd_atom = 0;
  bool atomics = false;  ///< atomic_cap != IBV_ATOMIC_NONE
  int max_qp = 0;
  int max_cq = 0;
  int max_mr = 0;
};

/// Opaque handles; the backend's own object behind `impl`, its number in `id` where the firmware
/// gives one (UMEM id, PD number, object number).
struct pd_handle {
  void* impl = nullptr;
  std::uint32_t pdn = 0;
  explicit operator bool() const noexcept { return impl != nullptr; }
};
struct umem_handle {
  void* impl = nullptr;
  std::uint32_t id = 0;
  explicit operator bool() const noexcept { return impl != nullptr; }
};
enum class uar_type : std::uint8_t { nc_dedicated, blue_flame, nc };
struct uar_handle {
  void* impl = nullptr;
  std::uint32_t page_id = 0;
  void* reg_addr = nullptr;   ///< host virtual address of the doorbell register in the UAR page
  void* base_addr = nullptr;  ///< host virtual address of the page
  explicit operator bool() const noexcept { return impl != nullptr; }
};
struct obj_handle {
  void* impl = nullptr;
  explicit operator bool() const noexcept { return impl != nullptr; }
};
struct mr_handle {
  void* impl = nullptr;
  std::uint32_t lkey = 0, rkey = 0;
  explicit operator bool() const noexcept { return impl != nullptr; }
};
/// A RoCE peer's L2 address as the provider resolves it from its GID.
struct ah_info {
  std::uint8_t rmac[6] = {};
};

/// An RC QP and its CQ made with ordinary verbs, as mlx5dv_init_obj describes them: what a host
/// thread needs to post with verbs_gpu's builders and poll the CQ (send_queue.cuh).
struct verbs_qp_handle {
  void* impl = nullptr;
  std::uint32_t qpn = 0, cqn = 0;
  void* sq = nullptr;                 ///< the send queue's first WQEBB (mlx5dv_qp.sq.buf)
  std::uint32_t sq_wqebbs = 0;        ///< its WQEBBs (sq.wqe_cnt), a power of two
  std::uint32_t sq_stride = 0;        ///< bytes per WQEBB (sq.stride; 64 on mlx5)
  std::uint32_t* dbrec = nullptr;     ///< the QP's doorbell record: [0] receive, [1] send (BE32)
  std::uint64_t* doorbell = nullptr;  ///< the doorbell register (bf.reg), mapped for the host
  void* cqes = nullptr;               ///< the CQ's entries (mlx5dv_cq.buf)
  std::uint32_t cqe_count = 0;        ///< cqe_cnt, a power of two
  std::uint32_t cqe_size = 0;         ///< bytes per entry (64 unless MLX5_CQE_SIZE says otherwise)
  std::uint32_t* cq_dbrec = nullptr;  ///< the CQ's doorbell record (consumer index)
  explicit operator bool() const noexcept { return impl != nullptr; }
};

/// One step of an ordinary-verbs QP's connection (ibv_qp_attr's subset; the set-up fills it).
struct verbs_qp_step {
  enum class to : std::uint8_t { init, rtr, rts } state = to::init;
  std::uint8_t port = 1;
  std::uint16_t pkey_index = 0;
  int access_flags = 0;                  ///< INIT: what peers may do (access::*)
  std::uint32_t path_mtu = 0;            ///< RTR: an ibv_mtu value
  std::uint32_t remote_qpn = 0;          ///< RTR
  std::uint8_t responder_rd_atomic = 0;  ///< RTR: max_dest_rd_atomic
  std::uint8_t min_rnr_timer = 12;       ///< RTR
  bool global = false;                   ///< RTR: a GRH (RoCE: always)
  std::uint16_t dlid = 0;                ///< RTR, InfiniBand
  std::uint8_t sl = 0;                   ///< RTR
  std::uint8_t dgid[16] = {};            ///< RTR, global
  int sgid_index = 0;                    ///< RTR, global
  std::uint8_t traffic_class = 0;        ///< RTR, global
  std::uint8_t timeout = 20;             ///< RTS: local ACK timeout (4.096 us << timeout)
  std::uint8_t retry_count = 7;          ///< RTS
  std::uint8_t rnr_retry = 7;            ///< RTS
  std::uint8_t initiator_rd_atomic = 1;  ///< RTS: max_rd_atomic
};

/// Access flags, as IBV_ACCESS_* (the same bit values).
namespace access {
inline constexpr int local_write = 1, remote_write = 2, remote_read = 4, remote_atomic = 8;
}

/// Where the set-up's control memory lives: the SQ ring, the CQ, the doorbell records and the
/// posting counters, which the GPU (posting, polling) and the NIC (reading WQEs, writing CQEs) both
/// touch. On hardware it is GPU memory (gpu_memory.hpp: cudaMalloc, dma-buf export, the GPU's PCI
/// address); host tests with the firmware model use host memory (host_control_memory), so the whole
/// set-up runs where there is no GPU. Everything the set-up needs from CUDA is behind this class and
/// backend::map_doorbell.
class control_memory {
 public:
  virtual ~control_memory() = default;
  /// "GPU memory" or "host memory", for messages.
  virtual char const* name() const noexcept = 0;
  /// GPU memory: the NIC reaches it through dma-buf or peer memory, and posting needs only GPU-scope
  /// fences before the doorbell record (send_queue::scope).
  virtual bool gpu() const noexcept = 0;
  /// `bytes` bytes (contents unspecified) aligned to `alignment`, a power of two up to 64 KiB;
  /// nullptr with *error saying why.
  virtual void* allocate(std::size_t bytes, std::size_t alignment, std::string* error) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  /// Sets `bytes` bytes at p to `value`, done when it returns (the NIC may read them next); false
  /// with *error saying why.
  virtual bool fill(void* p, unsigned char value, std::size_t bytes, std::string* error) = 0;
  /// A dma-buf file descriptor for [p, p + bytes), page aligned, that the caller closes; -1 when
  /// the memory cannot be exported that way (host memory, a driver without dma-buf).
  virtual int dmabuf_fd(void const* p, std::size_t bytes) = 0;
  /// Whether the driver can export dma-bufs of this memory (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).
  virtual bool dmabuf_supported() = 0;
  /// Whether the NIC can reach this memory through peer memory (nvidia-peermem loaded).
  virtual bool peer_memory() = 0;
  /// The PCI address of the GPU the memory is on ("0000:17:00.0", lower case); empty for host
  /// memory. The set-up picks the NIC closest to it.
  virtual std::string pci_bus_id() = 0;
};

/// Control memory in the host's own memory: for tests with the firmware model (no GPU, no NIC).
class host_control_memory final : public control_memory {
 public:
  char const* name() const noexcept override { return "host memory"; }
  bool gpu() const noexcept override { return false; }
  void* allocate(std::size_t bytes, std::size_t alignment, std::string* error) override {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      if (error) *error = "alignment " + std::to_string(alignment) + " is not a power of two";
      return nullptr;
    }
    // std::aligned_alloc wants a size that is a multiple of the alignment.
    std::size_t const size = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, size == 0 ? alignment : size);
    if (p == nullptr && error) *error = "std::aligned_alloc(" + std::to_string(size) + " bytes) failed";
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  bool fill(void* p, unsigned char value, std::size_t bytes, std::string*) override {
    std::memset(p, value, bytes);
    return true;
  }
  int dmabuf_fd(void const*, std::size_t) override { return -1; }
  bool dmabuf_supported() override { return false; }
  bool peer_memory() override { return false; }
  std::string pci_bus_id() override { return {}; }
};

/// An asynchronous event the device reported: an error that no completion carries. On mlx5 the
/// firmware raises these as event queue entries; `kind` is the entry's type (prm_cmd.hpp, checked
/// against the kernel's enum mlx5_event).
struct async_event {
  enum class kind : std::uint16_t {
    cq_error = prm::event_cq_error,                      ///< a CQ overran, or its context is bad
    qp_fatal = prm::event_wq_catas_error,                ///< the QP went to error
    path_migration_failed = prm::event_path_mig_failed,  ///<
    device_fatal = prm::event_internal_error,            ///< ibv: IBV_EVENT_DEVICE_FATAL
    port_change = prm::event_port_change,                ///< ibv: IBV_EVENT_PORT_ERR
    qp_invalid_request = prm::event_wq_inval_req_error,  ///< a work request the NIC could not parse
    qp_access_error = prm::event_wq_access_error,        ///< a local access error
  };
  kind what = kind::device_fatal;
  std::uint32_t object = 0;  ///< the CQ or QP number, or the port

  /// What happened, in words, e.g. "CQ 0x12 error (overrun or bad context)".
  std::string text() const {
    char number[16];
    std::snprintf(number, sizeof(number), "0x%x", object);
    switch (what) {
      case kind::cq_error:
        return std::string("CQ ") + number + " error (an overrun, or a bad CQ context)";
      case kind::qp_fatal:
        return std::string("QP ") + number + " catastrophic error (the QP is in error)";
      case kind::path_migration_failed:
        return std::string("QP ") + number + " path migration failed";
      case kind::qp_invalid_request:
        return std::string("QP ") + number + " invalid request (a work request the NIC could not parse)";
      case kind::qp_access_error:
        return std::string("QP ") + number + " local access error";
      case kind::port_change:
        return "port " + std::to_string(object) + " went down";
      case kind::device_fatal:
        break;
    }
    return "fatal device error (the device must be reset)";
  }
};

/// The calls set-up makes. Every handle is released by the set-up in reverse order of creation.
/// One backend serves one opened device (open() once).
class backend {
 public:
  virtual ~backend() = default;
  /// "rdma-core" or "firmware model", for messages.
  virtual char const* name() const noexcept = 0;
  /// The backend's own explanation of its last failed call, or empty (see the header comment).
  virtual std::string diagnostic() const { return {}; }
  /// The control memory the set-up uses unless device_options::memory names another.
  virtual control_memory& default_memory() = 0;

  // ---- discovery and queries (open() first, except devices()) -------------------------------
  virtual std::vector<device_entry> devices() = 0;
  /// Opens `name` with DEVX. Returns 0 or an errno value.
  virtual int open(std::string const& name) = 0;
  virtual int query_port(std::uint8_t port, port_info* out) = 0;
  virtual int query_gid(std::uint8_t port, int index, gid_entry* out) = 0;
  virtual int query_device(device_info* out) = 0;
  /// A firmware command on no object (QUERY_HCA_CAP, ...). 0, EREMOTEIO with the firmware's status
  /// and syndrome in `out`, or another errno value for a refusal before the firmware.
  virtual int general_cmd(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) = 0;

  // ---- objects --------------------------------------------------------------------------------
  virtual pd_handle alloc_pd(int* error) = 0;
  virtual void dealloc_pd(pd_handle pd) = 0;
  /// Registers [addr, addr + bytes) as a UMEM. dmabuf_fd >= 0: through that dma-buf, addr being
  /// the offset into it. page_size_bitmap: the page sizes the kernel may use (bit k: 2^k bytes).
  virtual umem_handle umem_reg(void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                               std::uint64_t page_size_bitmap, int* error) = 0;
  virtual void umem_dereg(umem_handle umem) = 0;
  virtual uar_handle alloc_uar(uar_type type, int* error) = 0;
  virtual void free_uar(uar_handle uar) = 0;
  virtual int query_eqn(std::uint32_t vector, std::uint32_t* eqn) = 0;
  virtual obj_handle obj_create(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes, int* error) = 0;
  virtual int obj_modify(obj_handle obj, void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) = 0;
  virtual int obj_destroy(obj_handle obj) = 0;
  /// A memory region on pd. dmabuf_fd >= 0: through that dma-buf from dmabuf_offset, with addr
  /// as the I/O virtual address.
  virtual mr_handle reg_mr(pd_handle pd, void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                           std::uint64_t dmabuf_offset, int* error) = 0;
  virtual void dereg_mr(mr_handle mr) = 0;
  /// RoCE: the L2 address of the peer with GID dgid, reached from our GID at sgid_index.
  virtual int resolve_ah(pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16], int sgid_index,
                         ah_info* out) = 0;

  // ---- the doorbell register, as the GPU sees it ---------------------------------------------
  /// A device pointer to the `bytes` bytes at uar.reg_addr, which the set-up sets to a whole host
  /// page holding the UAR's doorbell register (reg_addr = base_addr = the page). Not counted: the
  /// set-up calls it once per host page and counts the page's users itself, since registers share
  /// host pages (rdma-core hands out one page for every NC request of a context and several
  /// dedicated NC registers from one UAR page, and a 64 KiB host page holds 16 UAR pages) and a
  /// second cudaHostRegister of the same page fails. unmap_doorbell gets the same page, named
  /// through a handle of any UAR in it.
  virtual int map_doorbell(uar_handle uar, std::size_t bytes, void** device_pointer) = 0;
  virtual void unmap_doorbell(uar_handle uar) = 0;

  // ---- QPs posted by a host thread, with ordinary verbs (no DEVX) -------------------------------
  /// Whether this backend makes QPs with ordinary verbs (create_verbs_qp); the model does not.
  virtual bool native_verbs_qps() const noexcept { return false; }
  /// Opens `name` without DEVX (ibv_open_device), for ordinary verbs only. Backends without
  /// ordinary verbs open as open() does.
  virtual int open_verbs(std::string const& name) { return open(name); }
  /// An RC QP for 2^log_send_wrs send work requests (at least) and no receive queue, with a CQ of at
  /// least 2^log_cqes entries, on pd and port. The provider sizes the ring: a work request may
  /// take several WQEBBs (verbs_qp_handle::sq_wqebbs says how many the ring has).
  virtual verbs_qp_handle create_verbs_qp(pd_handle pd, std::uint32_t log_send_wrs, std::uint32_t log_cqes,
                                          int* error) {
    (void)pd, (void)log_send_wrs, (void)log_cqes;
    if (error != nullptr) *error = EOPNOTSUPP;
    return {};
  }
  /// One step of the QP's connection; 0 or an errno value.
  virtual int modify_verbs_qp(verbs_qp_handle const& qp, verbs_qp_step const& step) {
    (void)qp, (void)step;
    return EOPNOTSUPP;
  }
  /// The QP, then its CQ; 0 or the errno value of the first refusal (then nothing is freed: the NIC
  /// may still use the rings).
  virtual int destroy_verbs_qp(verbs_qp_handle qp) {
    (void)qp;
    return EOPNOTSUPP;
  }

  // ---- errors no completion carries ------------------------------------------------------------
  /// The asynchronous events of this context's CQs and QPs, and of its ports and device, reported
  /// since the last call; each once. Never blocks.
  virtual std::vector<async_event> async_events() { return {}; }
};

}  // namespace gpucomm::verbs_gpu::host
