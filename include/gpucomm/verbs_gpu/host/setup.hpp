#pragma once
// Host setup of GPU-posted mlx5 RC QPs with rdma-core: the objects whose device views
// (send_queue, completion_queue) kernels use. Follows shared/reference/ibgda-notes.md section 3,
// "Host setup, in order"; each block below names its step.
//
//   verbs_gpu::host::device   steps 1-4: open the mlx5 device with DEVX, check capabilities,
//                             decide dmabuf or peer memory, allocate the PD
//   verbs_gpu::host::qp       steps 5-12, 14: GPU-resident SQ ring, CQ and doorbell records as
//                             one DEVX UMEM, CQ and RC QP through DEVX, the UAR mapped into the
//                             GPU, RESET -> INIT -> RTR -> RTS for IB and RoCE, the device view
//   verbs_gpu::host::memory_region   step 13: MR registration, dmabuf first
//   verbs_gpu::host::exchange step 11: connection data through any allgather
//
// Every failure throws verbs_gpu::host::setup_error naming the call, its error and what to do.
// This code needs an mlx5 NIC (ConnectX-5 or newer) and has not run on hardware in this project's
// CI; see docs/verbs_gpu.md, "Running on a real mlx5 NIC".

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "../completion_queue.cuh"
#include "../send_queue.cuh"
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
inline void cuda_ok(cudaError_t e, char const* call, std::string const& hint = {}) {
  if (e != cudaSuccess) fail(std::string(call) + " failed: " + cudaGetErrorString(e), hint);
}
/// A CUDA driver API entry point, looked up through the runtime so that nothing links libcuda
/// (binaries must start on machines without a GPU driver). nullptr if unavailable.
template <class Fn>
Fn driver_fn(char const* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}
using cu_device_get_attribute_fn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using cu_mem_get_handle_fn = CUresult (*)(void*, CUdeviceptr, std::size_t, CUmemRangeHandleType, unsigned long long);
using cu_pointer_set_attribute_fn = CUresult (*)(void const*, CUpointer_attribute, CUdeviceptr);

inline unsigned log2_exact(std::uint64_t v) {
  unsigned l = 0;
  while ((std::uint64_t{1} << l) < v) ++l;
  return l;
}
/// Runs a DEVX command and checks the firmware status in its output.
inline void check_cmd(int rc, void const* out, char const* what) {
  if (rc != 0) {
    fail(
        std::string(what) + " failed: " + errno_text(rc < 0 ? -rc : (errno ? errno : rc)) + ", firmware status " +
            std::to_string(prm::get(out, prm::out_status)) + " syndrome 0x" +
            [&] {
              char b[16];
              std::snprintf(b, sizeof b, "%x", prm::get(out, prm::out_syndrome));
              return std::string(b);
            }(),
        "check dmesg for the mlx5 command error; DEVX needs CAP_NET_RAW or a recent kernel with DEVX user contexts");
  }
}
}  // namespace detail

/// How to open the NIC.
struct device_options {
  std::string name;  ///< ibv device name ("mlx5_0"); empty: the first mlx5 device
  std::uint8_t port = 1;
  int gid_index = -1;  ///< RoCE GID index; -1: 3 if it exists (RoCE v2 IPv4 on most setups), else 0
};

/// What a peer needs to connect to one of our QPs (exchanged through the bootstrap).
struct connection_info {
  std::uint32_t qpn = 0;
  std::uint16_t lid = 0;
  std::uint8_t port = 1;
  std::uint8_t link_layer = 0;  ///< IBV_LINK_LAYER_*
  std::uint8_t gid[16] = {};
  std::uint32_t mtu = 0;  ///< ibv_mtu enum value
};
static_assert(std::is_trivially_copyable_v<connection_info>);

/// An opened mlx5 device with DEVX and a protection domain (steps 1-4).
class device {
 public:
  explicit device(device_options opt = {}) : opt_(std::move(opt)) {
    // ---- Step 1: device list, mlx5 check, open with DEVX, port and GID queries ------------------
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) {
      if (list) ibv_free_device_list(list);
      detail::fail("no RDMA device found (ibv_get_device_list returned none)",
                   "install rdma-core's providers and load the NIC driver (mlx5_core, mlx5_ib); `ibv_devices` must "
                   "list the NIC");
    }
    ibv_device* chosen = nullptr;
    std::string names;
    for (int i = 0; i < n; ++i) {
      std::string const nm = ibv_get_device_name(list[i]);
      names += (names.empty() ? "" : ", ") + nm;
      if (!opt_.name.empty() ? nm == opt_.name : (chosen == nullptr && mlx5dv_is_supported(list[i]))) chosen = list[i];
    }
    if (chosen == nullptr) {
      ibv_free_device_list(list);
      detail::fail(opt_.name.empty() ? "no mlx5 device among the RDMA devices (" + names + ")"
                                     : "no RDMA device named " + opt_.name + " (have: " + names + ")",
                   "verbs_gpu builds mlx5 WQEs and needs a ConnectX (mlx5) NIC");
    }
    if (!mlx5dv_is_supported(chosen)) {
      std::string const nm = ibv_get_device_name(chosen);
      ibv_free_device_list(list);
      detail::fail("device " + nm + " is not an mlx5 device",
                   "verbs_gpu builds mlx5 WQEs and needs a ConnectX (mlx5) NIC; other NICs can use the ProxyQueue "
                   "transport");
    }
    mlx5dv_context_attr attr{};
    attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
    ctx_ = mlx5dv_open_device(chosen, &attr);
    std::string const nm = ibv_get_device_name(chosen);
    ibv_free_device_list(list);
    if (ctx_ == nullptr) {
      detail::fail("mlx5dv_open_device(" + nm + ", DEVX) failed: " + detail::errno_text(errno),
                   "DEVX user contexts need kernel support (Linux >= 5.1 with mlx5_ib) and permission to use the "
                   "device (/dev/infiniband/uverbs*)");
    }
    if (ibv_query_port(ctx_, opt_.port, &port_attr_) != 0) {
      detail::fail("ibv_query_port(" + nm + ", port " + std::to_string(opt_.port) +
                   ") failed: " + detail::errno_text(errno));
    }
    if (port_attr_.state != IBV_PORT_ACTIVE) {
      detail::fail("port " + std::to_string(opt_.port) + " of " + nm + " is not active",
                   "check the cable and `ibstat`");
    }
    if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
      gid_index_ = opt_.gid_index >= 0 ? opt_.gid_index : (port_attr_.gid_tbl_len > 3 ? 3 : 0);
      if (ibv_query_gid(ctx_, opt_.port, gid_index_, &gid_) != 0) {
        detail::fail("ibv_query_gid(index " + std::to_string(gid_index_) + ") failed: " + detail::errno_text(errno),
                     "pick a RoCE v2 GID index with `show_gids`");
      }
    }
    // ---- Step 2: capabilities (through verbs; the DEVX QUERY_HCA_CAP bits are not needed for RC
    // with 64-byte CQEs): atomics and the RDMA read depth.
    if (ibv_query_device(ctx_, &dev_attr_) != 0) detail::fail("ibv_query_device failed: " + detail::errno_text(errno));
    if (dev_attr_.atomic_cap == IBV_ATOMIC_NONE) {
      detail::fail("device " + nm + " reports no atomic support", "atomics need IBV_ATOMIC_HCA or IBV_ATOMIC_GLOB");
    }
    // ---- Step 3: dmabuf (CUDA >= 11.7 driver support) or peer memory (nvidia-peermem) -----------
    int dev = 0;
    detail::cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
    int dmabuf = 0;
    auto const get_attr = detail::driver_fn<detail::cu_device_get_attribute_fn>("cuDeviceGetAttribute");
    if (get_attr != nullptr &&
        get_attr(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, static_cast<CUdevice>(dev)) == CUDA_SUCCESS) {
      dmabuf_ =
          dmabuf != 0 && detail::driver_fn<detail::cu_mem_get_handle_fn>("cuMemGetHandleForAddressRange") != nullptr;
    }
    peermem_ = access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
               access("/sys/kernel/mm/memory_peers/nvidia-peermem/version", F_OK) == 0 ||
               access("/sys/module/nvidia_peermem/version", F_OK) == 0;
    if (!dmabuf_ && !peermem_) {
      detail::fail(
          "GPU memory cannot be registered with the NIC: the CUDA driver reports no dma-buf support and "
          "nvidia-peermem is not loaded",
          "use a driver with dma-buf support (open kernel modules, CUDA >= 11.7) or `modprobe nvidia-peermem`");
    }
    // ---- Step 4: protection domain and its number ------------------------------------------------
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) detail::fail("ibv_alloc_pd failed: " + detail::errno_text(errno));
    mlx5dv_obj obj{};
    mlx5dv_pd dv_pd{};
    obj.pd.in = pd_;
    obj.pd.out = &dv_pd;
    if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD) != 0)
      detail::fail("mlx5dv_init_obj(PD) failed: " + detail::errno_text(errno));
    pdn_ = dv_pd.pdn;
  }
  device(device const&) = delete;
  device& operator=(device const&) = delete;
  ~device() {
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
  }

  ibv_context* context() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_; }
  std::uint32_t pdn() const noexcept { return pdn_; }
  std::uint8_t port() const noexcept { return opt_.port; }
  ibv_port_attr const& port_attr() const noexcept { return port_attr_; }
  ibv_device_attr const& device_attr() const noexcept { return dev_attr_; }
  ibv_gid const& gid() const noexcept { return gid_; }
  int gid_index() const noexcept { return gid_index_; }
  bool dmabuf() const noexcept { return dmabuf_; }
  bool peermem() const noexcept { return peermem_; }

 private:
  device_options opt_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::uint32_t pdn_ = 0;
  ibv_port_attr port_attr_{};
  ibv_device_attr dev_attr_{};
  ibv_gid gid_{};
  int gid_index_ = 0;
  bool dmabuf_ = false, peermem_ = false;
};

namespace detail {
/// A dma-buf file descriptor for a GPU range, or -1.
inline int dmabuf_fd(void* ptr, std::size_t bytes) {
  int fd = -1;
  auto const get_handle = driver_fn<cu_mem_get_handle_fn>("cuMemGetHandleForAddressRange");
  if (get_handle == nullptr || get_handle(&fd, reinterpret_cast<CUdeviceptr>(ptr), bytes,
                                          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != CUDA_SUCCESS) {
    return -1;
  }
  return fd;
}
}  // namespace detail

/// A memory region the NIC may access (step 13): GPU memory through dma-buf first, then through
/// peer memory (ibv_reg_mr on the device pointer, which needs nvidia-peermem); host memory with
/// ibv_reg_mr.
class memory_region {
 public:
  static constexpr int default_access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  memory_region(device const& dev, void* ptr, std::size_t bytes, bool gpu_memory, int access = default_access) {
    if (gpu_memory && dev.dmabuf()) {
      // dma-buf handles cover whole pages: register the page-aligned range, keep ptr as iova.
      std::uintptr_t const page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
      std::uintptr_t const base = reinterpret_cast<std::uintptr_t>(ptr) & ~(page - 1);
      std::size_t const len = ((reinterpret_cast<std::uintptr_t>(ptr) + bytes + page - 1) & ~(page - 1)) - base;
      int const fd = detail::dmabuf_fd(reinterpret_cast<void*>(base), len);
      if (fd >= 0) {
        mr_ = ibv_reg_dmabuf_mr(dev.pd(), reinterpret_cast<std::uintptr_t>(ptr) - base, bytes,
                                reinterpret_cast<std::uintptr_t>(ptr), fd, access);
        close(fd);
      }
    }
    if (mr_ == nullptr) mr_ = ibv_reg_mr(dev.pd(), ptr, bytes, access);
    if (mr_ == nullptr) {
      detail::fail("registering " + std::to_string(bytes) + " bytes of " + (gpu_memory ? "GPU" : "host") +
                       " memory failed: " + detail::errno_text(errno),
                   gpu_memory ? "GPU memory needs dma-buf support or nvidia-peermem, and BAR1 space"
                              : "check `ulimit -l` (locked memory)");
    }
  }
  memory_region(memory_region const&) = delete;
  memory_region& operator=(memory_region const&) = delete;
  ~memory_region() {
    if (mr_) ibv_dereg_mr(mr_);
  }
  std::uint32_t lkey() const noexcept { return mr_->lkey; }
  std::uint32_t rkey() const noexcept { return mr_->rkey; }
  std::uint64_t addr() const noexcept { return reinterpret_cast<std::uint64_t>(mr_->addr); }

 private:
  ibv_mr* mr_ = nullptr;
};

/// Options of one QP.
struct qp_options {
  std::uint32_t log_sq_depth = 10;  ///< WQEBBs, at most log2(max_sq_depth)
  cq_mode mode = cq_mode::collapsed;
  std::uint32_t log_ncqe = 0;  ///< owner-bit CQs: log2 of the entries
  std::uint32_t ring_step = 32;
  ibv_mtu mtu = IBV_MTU_4096;  ///< capped at the port's active MTU
};

/// One GPU-posted RC QP with its CQ (steps 5-12, 14). Construct, exchange local_info() with the
/// peer, call connect(peer_info), then pass send_queue() to kernels.
class qp {
 public:
  qp(device& dev, qp_options opt = {}) : dev_(dev), opt_(opt) {
    if ((1u << opt_.log_sq_depth) > max_sq_depth) detail::fail("SQ depth above max_sq_depth (32768 WQEBBs)");
    std::size_t const ring_bytes = std::size_t{wqebb_size} << opt_.log_sq_depth;
    std::uint32_t const ncqe = opt_.mode == cq_mode::collapsed ? 1u : (1u << opt_.log_ncqe);
    std::size_t const cq_bytes = std::size_t{ncqe} * sizeof(cqe64);
    // ---- Step 5: GPU control memory, one 64 KiB-aligned block: [ring][CQ][DBRs] -----------------
    cq_off_ = ring_bytes;
    dbr_off_ = (cq_off_ + cq_bytes + 63) & ~std::size_t{63};
    block_bytes_ = ((dbr_off_ + 128 + 65535) & ~std::size_t{65535});
    detail::cuda_ok(cudaMalloc(&raw_, block_bytes_ + 65536), "cudaMalloc(QP control memory)");
    block_ =
        reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(raw_) + 65535) & ~std::uintptr_t{65535});
    {
      // SYNC_MEMOPS: the NIC's and the GPU's accesses to this block are not reordered by copies.
      unsigned one = 1;
      if (auto const set_attr = detail::driver_fn<detail::cu_pointer_set_attribute_fn>("cuPointerSetAttribute")) {
        set_attr(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, reinterpret_cast<CUdeviceptr>(block_));
      }
    }
    detail::cuda_ok(cudaMemset(block_, 0, block_bytes_), "cudaMemset(ring, DBR)");
    detail::cuda_ok(cudaMemset(block_ + cq_off_, 0xff, cq_bytes), "cudaMemset(CQ, 0xff)");  // opcode INVALID
    detail::cuda_ok(cudaMalloc(&counters_, sizeof(qp_counters)), "cudaMalloc(counters)");
    detail::cuda_ok(cudaMemset(counters_, 0, sizeof(qp_counters)), "cudaMemset(counters)");
    // ---- Step 6: register the block as a DEVX UMEM: dma-buf first, then peer memory -------------
    if (dev_.dmabuf()) {
      int const fd = detail::dmabuf_fd(block_, block_bytes_);
      if (fd >= 0) {
        mlx5dv_devx_umem_in in{};
        in.addr = nullptr;  // offset into the dma-buf
        in.size = block_bytes_;
        in.access = IBV_ACCESS_LOCAL_WRITE;
        in.pgsz_bitmap = ~static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE) - 1);
        in.comp_mask = MLX5DV_UMEM_MASK_DMABUF;
        in.dmabuf_fd = fd;
        umem_ = mlx5dv_devx_umem_reg_ex(dev_.context(), &in);
        close(fd);
      }
    }
    if (umem_ == nullptr) umem_ = mlx5dv_devx_umem_reg(dev_.context(), block_, block_bytes_, IBV_ACCESS_LOCAL_WRITE);
    if (umem_ == nullptr) {
      detail::fail("mlx5dv_devx_umem_reg of GPU memory failed: " + detail::errno_text(errno),
                   "GPU-resident queues need dma-buf (EFAULT here often means dma-buf is refused for this "
                   "allocation) or nvidia-peermem");
    }
    // ---- Step 7: the CQ -------------------------------------------------------------------------
    std::uint32_t eqn = 0;
    if (mlx5dv_devx_query_eqn(dev_.context(), 0, &eqn) != 0)
      detail::fail("mlx5dv_devx_query_eqn failed: " + detail::errno_text(errno));
    cq_uar_ = mlx5dv_devx_alloc_uar(dev_.context(), MLX5DV_UAR_ALLOC_TYPE_NC);
    if (cq_uar_ == nullptr) detail::fail("mlx5dv_devx_alloc_uar(NC) for the CQ failed: " + detail::errno_text(errno));
    {
      std::uint32_t in[prm::create_cq_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_cq);
      prm::set(in, prm::cqc_cqe_sz, 0);
      prm::set(in, prm::cqc_cc, opt_.mode == cq_mode::collapsed ? 1 : 0);
      prm::set(in, prm::cqc_oi, opt_.mode == cq_mode::collapsed ? 1 : 0);
      prm::set(in, prm::cqc_log_cq_size, opt_.mode == cq_mode::collapsed ? 0 : opt_.log_ncqe);
      prm::set(in, prm::cqc_uar_page, cq_uar_->page_id);
      prm::set(in, prm::cqc_c_eqn, eqn);
      prm::set(in, prm::cqc_log_page_size, detail::log2_exact(65536) - 12);
      prm::set(in, prm::cqc_page_offset, 0);
      prm::set(in, prm::cqc_dbr_umem_valid, 1);
      prm::set(in, prm::cqc_dbr_umem_id, umem_->umem_id);
      prm::set(in, prm::cqc_dbr_addr, dbr_off_ + 64);
      prm::set(in, prm::cq_umem_valid, 1);
      prm::set(in, prm::cq_umem_id, umem_->umem_id);
      prm::set(in, prm::cq_umem_offset, cq_off_);
      cq_obj_ = mlx5dv_devx_obj_create(dev_.context(), in, sizeof(in), out, sizeof(out));
      if (cq_obj_ == nullptr) detail::check_cmd(errno ? errno : -1, out, "DEVX CREATE_CQ");
      cqn_ = prm::get(out, prm::out_obj_number);
    }
    // ---- Step 8: the SQ doorbell UAR, mapped into the GPU -----------------------------------------
#if defined(MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED)
    qp_uar_ = mlx5dv_devx_alloc_uar(dev_.context(), MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED);
#endif
    if (qp_uar_ == nullptr) qp_uar_ = mlx5dv_devx_alloc_uar(dev_.context(), MLX5DV_UAR_ALLOC_TYPE_BF);
    if (qp_uar_ == nullptr) qp_uar_ = mlx5dv_devx_alloc_uar(dev_.context(), MLX5DV_UAR_ALLOC_TYPE_NC);
    if (qp_uar_ == nullptr)
      detail::fail("mlx5dv_devx_alloc_uar for the SQ doorbell failed: " + detail::errno_text(errno));
    {
      cudaError_t const e = cudaHostRegister(
          qp_uar_->reg_addr, 8, cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory);
      if (e != cudaSuccess) {
        cudaGetLastError();
        detail::fail(std::string("the GPU refused to map the NIC's doorbell page: cudaHostRegister(UAR, "
                                 "cudaHostRegisterIoMemory) failed: ") +
                         cudaGetErrorString(e),
                     "GPU-rung doorbells need the driver to allow I/O-memory mappings (e.g. NVreg_RegistryDwords="
                     "\"PeerMappingOverride=1;\"); otherwise use a CPU proxy (ProxyQueue)");
      }
      uar_registered_ = true;
      void* dptr = nullptr;
      detail::cuda_ok(cudaHostGetDevicePointer(&dptr, qp_uar_->reg_addr, 0), "cudaHostGetDevicePointer(UAR)");
      db_dev_ = static_cast<std::uint64_t*>(dptr);
    }
    // ---- Steps 9 and 10: the QP buffers (in the UMEM above) and CREATE_QP ------------------------
    {
      std::uint32_t in[prm::create_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_create_qp);
      prm::set(in, prm::qpc_st, prm::qp_st_rc);
      prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
      prm::set(in, prm::qpc_pd, dev_.pdn());
      prm::set(in, prm::qpc_uar_page, qp_uar_->page_id);
      prm::set(in, prm::qpc_ts_format, prm::ts_format_default);
      prm::set(in, prm::qpc_log_sq_size, opt_.log_sq_depth);
      prm::set(in, prm::qpc_rq_type, prm::rq_type_zero_length);
      prm::set(in, prm::qpc_cqn_snd, cqn_);
      prm::set(in, prm::qpc_cqn_rcv, cqn_);
      prm::set(in, prm::qpc_log_page_size, detail::log2_exact(65536) - 12);
      prm::set(in, prm::qpc_page_offset, 0);
      prm::set(in, prm::qpc_dbr_umem_valid, 1);
      prm::set(in, prm::qpc_dbr_umem_id, umem_->umem_id);
      prm::set(in, prm::qpc_dbr_addr, dbr_off_);
      prm::set(in, prm::wq_umem_valid, 1);
      prm::set(in, prm::wq_umem_id, umem_->umem_id);
      prm::set(in, prm::wq_umem_offset, 0);
      qp_obj_ = mlx5dv_devx_obj_create(dev_.context(), in, sizeof(in), out, sizeof(out));
      if (qp_obj_ == nullptr) detail::check_cmd(errno ? errno : -1, out, "DEVX CREATE_QP");
      qpn_ = prm::get(out, prm::out_obj_number);
    }
    // ---- Step 12a: RESET -> INIT ------------------------------------------------------------------
    {
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_rst2init_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_pm_state, prm::qp_pm_migrated);
      prm::set(in, prm::qpc_rwe, 1);
      prm::set(in, prm::qpc_rre, 1);
      prm::set(in, prm::qpc_rae, 1);
      prm::set(in, prm::qpc_atomic_mode, prm::atomic_mode_up_to_64);
      prm::set(in, prm::ads_vhca_port_num, dev_.port());
      prm::set(in, prm::ads_pkey_index, 0);
      prm::set(in, prm::qpc_counter_set_id, 0);
      detail::check_cmd(mlx5dv_devx_obj_modify(qp_obj_, in, sizeof(in), out, sizeof(out)), out, "DEVX RST2INIT_QP");
    }
  }
  qp(qp const&) = delete;
  qp& operator=(qp const&) = delete;
  ~qp() {
    if (qp_obj_) mlx5dv_devx_obj_destroy(qp_obj_);
    if (cq_obj_) mlx5dv_devx_obj_destroy(cq_obj_);
    if (uar_registered_) cudaHostUnregister(qp_uar_->reg_addr);
    if (qp_uar_) mlx5dv_devx_free_uar(qp_uar_);
    if (cq_uar_) mlx5dv_devx_free_uar(cq_uar_);
    if (umem_) mlx5dv_devx_umem_dereg(umem_);
    if (counters_) cudaFree(counters_);
    if (raw_) cudaFree(raw_);
  }

  /// Step 11: what the peer needs to connect to this QP.
  connection_info local_info() const {
    connection_info c;
    c.qpn = qpn_;
    c.lid = dev_.port_attr().lid;
    c.port = dev_.port();
    c.link_layer = dev_.port_attr().link_layer;
    std::memcpy(c.gid, dev_.gid().raw, 16);
    c.mtu = static_cast<std::uint32_t>(dev_.port_attr().active_mtu);
    return c;
  }

  /// Step 12b/c: INIT -> RTR -> RTS against the peer's connection_info (IB or RoCE).
  void connect(connection_info const& peer) {
    unsigned const rd_atom = dev_.device_attr().max_qp_rd_atom > 0 ? dev_.device_attr().max_qp_rd_atom : 1;
    std::uint32_t const mtu = std::min<std::uint32_t>(
        {static_cast<std::uint32_t>(opt_.mtu), peer.mtu, static_cast<std::uint32_t>(dev_.port_attr().active_mtu)});
    {  // INIT -> RTR
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_init2rtr_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_mtu, mtu);
      prm::set(in, prm::qpc_log_msg_max, 30);
      prm::set(in, prm::qpc_remote_qpn, peer.qpn);
      prm::set(in, prm::qpc_min_rnr_nak, 12);
      prm::set(in, prm::qpc_next_rcv_psn, 0);
      prm::set(in, prm::qpc_log_rra_max, detail::log2_exact(rd_atom));
      prm::set(in, prm::ads_vhca_port_num, dev_.port());
      if (dev_.port_attr().link_layer == IBV_LINK_LAYER_ETHERNET) {
        // RoCE: the destination MAC comes from an address handle the provider resolves.
        ibv_ah_attr ah{};
        ah.is_global = 1;
        ah.port_num = dev_.port();
        std::memcpy(ah.grh.dgid.raw, peer.gid, 16);
        ah.grh.sgid_index = static_cast<std::uint8_t>(dev_.gid_index());
        ah.grh.hop_limit = 255;
        ibv_ah* handle = ibv_create_ah(dev_.pd(), &ah);
        if (handle == nullptr) {
          detail::fail("ibv_create_ah for the RoCE peer failed: " + detail::errno_text(errno),
                       "check the GID index and that the peer's address is reachable");
        }
        mlx5dv_obj obj{};
        mlx5dv_ah dv_ah{};
        obj.ah.in = handle;
        obj.ah.out = &dv_ah;
        if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH) != 0) {
          ibv_destroy_ah(handle);
          detail::fail("mlx5dv_init_obj(AH) failed: " + detail::errno_text(errno));
        }
        prm::set(in, prm::ads_grh, 1);
        prm::set_bytes(in, prm::ads_rmac_bit, dv_ah.av->rmac, 6);
        prm::set_bytes(in, prm::ads_rgid_rip_bit, peer.gid, 16);
        prm::set(in, prm::ads_hop_limit, 255);
        prm::set(in, prm::ads_src_addr_index, static_cast<std::uint32_t>(dev_.gid_index()));
        prm::set(in, prm::ads_udp_sport, 0xc000u | (qpn_ & 0x3fffu));
        prm::set(in, prm::ads_tclass, dv_ah.av->tclass);
        ibv_destroy_ah(handle);
      } else {
        prm::set(in, prm::ads_grh, 0);
        prm::set(in, prm::ads_rlid, peer.lid);
        prm::set(in, prm::ads_sl, 0);
      }
      detail::check_cmd(mlx5dv_devx_obj_modify(qp_obj_, in, sizeof(in), out, sizeof(out)), out, "DEVX INIT2RTR_QP");
    }
    {  // RTR -> RTS
      std::uint32_t in[prm::modify_qp_in_bytes / 4] = {};
      std::uint32_t out[prm::out_bytes / 4] = {};
      prm::set(in, prm::in_opcode, prm::op_rtr2rts_qp);
      prm::set(in, prm::modify_qpn, qpn_);
      prm::set(in, prm::qpc_log_ack_req_freq, 0);
      prm::set(in, prm::qpc_log_sra_max, detail::log2_exact(rd_atom));
      prm::set(in, prm::qpc_next_send_psn, 0);
      prm::set(in, prm::qpc_retry_count, 7);
      prm::set(in, prm::qpc_rnr_retry, 7);
      prm::set(in, prm::ads_ack_timeout, 20);
      detail::check_cmd(mlx5dv_devx_obj_modify(qp_obj_, in, sizeof(in), out, sizeof(out)), out, "DEVX RTR2RTS_QP");
    }
  }

  /// Step 14: the device view kernels post through (valid after connect()).
  verbs_gpu::send_queue send_queue() const noexcept {
    verbs_gpu::send_queue sq{};
    sq.ring = reinterpret_cast<std::byte*>(block_);
    sq.log_depth = opt_.log_sq_depth;
    sq.qpn = qpn_;
    sq.dbrec = reinterpret_cast<std::uint32_t*>(block_ + dbr_off_) + dbr_snd;
    sq.doorbell = db_dev_;
    sq.counters = static_cast<qp_counters*>(counters_);
    sq.cq = completion_queue{reinterpret_cast<cqe64*>(block_ + cq_off_),
                             reinterpret_cast<std::uint32_t*>(block_ + dbr_off_ + 64),
                             opt_.mode == cq_mode::collapsed ? 0 : opt_.log_ncqe, opt_.mode, cqn_};
    sq.ring_step = opt_.ring_step;
    sq.scope = nic_scope::gpu;  // ring and doorbell records are in GPU memory
    return sq;
  }
  std::uint32_t qpn() const noexcept { return qpn_; }

 private:
  device& dev_;
  qp_options opt_;
  void* raw_ = nullptr;
  unsigned char* block_ = nullptr;
  std::size_t block_bytes_ = 0, cq_off_ = 0, dbr_off_ = 0;
  void* counters_ = nullptr;
  mlx5dv_devx_umem* umem_ = nullptr;
  mlx5dv_devx_uar* cq_uar_ = nullptr;
  mlx5dv_devx_uar* qp_uar_ = nullptr;
  bool uar_registered_ = false;
  std::uint64_t* db_dev_ = nullptr;
  mlx5dv_devx_obj* cq_obj_ = nullptr;
  mlx5dv_devx_obj* qp_obj_ = nullptr;
  std::uint32_t cqn_ = 0, qpn_ = 0;
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
