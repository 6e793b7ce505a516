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
//
// Errors: calls that rdma-core reports with errno return a non-zero errno value (or an empty
// handle with `error` set); the firmware's own verdict on a command comes back in the command's
// output (status, syndrome), as on hardware. The set-up turns both into setup_error.
// Host-only header: no CUDA, no rdma-core includes (either backend brings its own).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

/// Access flags, as IBV_ACCESS_* (the same bit values).
namespace access {
inline constexpr int local_write = 1, remote_write = 2, remote_read = 4, remote_atomic = 8;
}

/// The calls set-up makes. Every handle is released by the set-up in reverse order of creation.
class backend {
 public:
  virtual ~backend() = default;
  /// "rdma-core" or "firmware model", for messages.
  virtual char const* name() const noexcept = 0;

  // ---- discovery and queries (open() first, except devices()) -------------------------------
  virtual std::vector<device_entry> devices() = 0;
  /// Opens `name` with DEVX. Returns 0 or an errno value.
  virtual int open(std::string const& name) = 0;
  virtual int query_port(std::uint8_t port, port_info* out) = 0;
  virtual int query_gid(std::uint8_t port, int index, gid_entry* out) = 0;
  virtual int query_device(device_info* out) = 0;
  /// A firmware command on no object (QUERY_HCA_CAP, ...). 0, or an errno value (the firmware's
  /// status and syndrome are in `out` either way).
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
  /// A device pointer to `bytes` bytes of the UAR's doorbell register (reg_addr). Not counted:
  /// the set-up calls it once per UAR page and counts the page's users itself, since UARs may be
  /// shared (rdma-core hands out one page for every NC request of a context) and a second
  /// cudaHostRegister of the same page fails.
  virtual int map_doorbell(uar_handle uar, std::size_t bytes, void** device_pointer) = 0;
  virtual void unmap_doorbell(uar_handle uar) = 0;
};

}  // namespace gpucomm::verbs_gpu::host
