#pragma once
// host::backend on a real mlx5 NIC: a thin forwarder to rdma-core (libibverbs, libmlx5) and, for
// the doorbell mapping and the control memory, the CUDA runtime. Each call names the rdma-core call
// it makes in backend.hpp's table; this file adds only the translation of types and errors.
//
// Optional rdma-core features are guarded so that the header builds against older rdma-core (the
// first release with each: docs/guide/mlx5-setup-references.md section 8). Only the UAR flag is a macro;
// the others are functions and enumerators, found by CMake's check_source_compiles in
// cmake/GpucommVerbs.cmake, which defines on gpucomm::verbs:
//   GPUCOMM_RDMA_HAS_QUERY_GID_EX   ibv_query_gid_ex (v32); without: ibv_query_gid and the entry's
//                                   type from sysfs (ports/<p>/gid_attrs/types/<i>)
//   GPUCOMM_RDMA_HAS_REG_DMABUF_MR  ibv_reg_dmabuf_mr (v34); without: dma-buf MRs are refused
//                                   (EOPNOTSUPP) and the set-up registers through peer memory
//   GPUCOMM_RDMA_HAS_UMEM_REG_EX    mlx5dv_devx_umem_reg_ex (v35); without: mlx5dv_devx_umem_reg,
//                                   whose page sizes are rdma-core's own (every size from 4 KiB)
//   GPUCOMM_RDMA_HAS_UMEM_DMABUF    MLX5DV_UMEM_MASK_DMABUF (v43); without: dma-buf UMEMs are
//                                   refused (EOPNOTSUPP) and the set-up uses peer memory
//   MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (v45, a macro): without it, NC_DEDICATED UARs are refused
//                                   (EOPNOTSUPP) and the set-up takes a BlueFlame or the NC UAR
// Without CMake, define the GPUCOMM_RDMA_HAS_* your rdma-core has, or get the fallbacks.
//
// Never run on hardware in this project (docs/guide/verbs_gpu.md, "Running on a real mlx5 NIC").

#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend.hpp"
#include "gpu_memory.hpp"
#include "prm_cmd.hpp"

namespace gpucomm::verbs_gpu::host {

static_assert(access::local_write == IBV_ACCESS_LOCAL_WRITE && access::remote_write == IBV_ACCESS_REMOTE_WRITE &&
              access::remote_read == IBV_ACCESS_REMOTE_READ && access::remote_atomic == IBV_ACCESS_REMOTE_ATOMIC);

/// ibv_modify_qp's attributes and mask for one step of an RC QP's connection: the attributes
/// ibv_modify_qp(3) lists as required for RESET -> INIT, INIT -> RTR and RTR -> RTS (the same
/// sets rdma-core's rc_pingpong passes), and none of the optional ones. Both sides start their
/// packet sequence at 0. Returns the mask; `a` is overwritten.
inline int verbs_qp_attributes(verbs_qp_step const& step, ibv_qp_attr& a) {
  a = ibv_qp_attr{};
  int mask = IBV_QP_STATE;
  switch (step.state) {
    case verbs_qp_step::to::init:
      a.qp_state = IBV_QPS_INIT;
      a.pkey_index = step.pkey_index;
      a.port_num = step.port;
      a.qp_access_flags = static_cast<unsigned>(step.access_flags);
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      break;
    case verbs_qp_step::to::rtr:
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = static_cast<ibv_mtu>(step.path_mtu);
      a.dest_qp_num = step.remote_qpn;
      a.rq_psn = 0;
      a.max_dest_rd_atomic = step.responder_rd_atomic;
      a.min_rnr_timer = step.min_rnr_timer;
      a.ah_attr.dlid = step.dlid;
      a.ah_attr.sl = step.sl;
      a.ah_attr.port_num = step.port;
      a.ah_attr.is_global = step.global ? 1 : 0;
      if (step.global) {
        std::memcpy(a.ah_attr.grh.dgid.raw, step.dgid, 16);
        a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(step.sgid_index);
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = step.traffic_class;
      }
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
              IBV_QP_MIN_RNR_TIMER;
      break;
    case verbs_qp_step::to::rts:
      a.qp_state = IBV_QPS_RTS;
      a.timeout = step.timeout;
      a.retry_cnt = step.retry_count;
      a.rnr_retry = step.rnr_retry;
      a.sq_psn = 0;
      a.max_rd_atomic = step.initiator_rd_atomic;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      break;
  }
  return mask;
}

/// The rings of an ordinary-verbs QP and its CQ as mlx5dv_init_obj describes them (mlx5dv.h):
/// the send queue from sq.buf, the QP's doorbell record (dbrec[1] is the send half), the doorbell
/// register bf.reg, the CQ's entries and its consumer-index record.
inline verbs_qp_handle verbs_qp_handle_of(void* impl, std::uint32_t qpn, mlx5dv_qp const& dq, mlx5dv_cq const& dc) {
  verbs_qp_handle h;
  h.impl = impl;
  h.qpn = qpn;
  h.cqn = dc.cqn;
  h.sq = dq.sq.buf;
  h.sq_wqebbs = dq.sq.wqe_cnt;
  h.sq_stride = dq.sq.stride;
  h.dbrec = reinterpret_cast<std::uint32_t*>(dq.dbrec);
  h.doorbell = static_cast<std::uint64_t*>(dq.bf.reg);
  h.cqes = dc.buf;
  h.cqe_count = dc.cqe_cnt;
  h.cqe_size = dc.cqe_size;
  h.cq_dbrec = reinterpret_cast<std::uint32_t*>(dc.dbrec);
  return h;
}

class rdma_core_backend final : public backend {
 public:
  rdma_core_backend() = default;
  rdma_core_backend(rdma_core_backend const&) = delete;
  rdma_core_backend& operator=(rdma_core_backend const&) = delete;
  ~rdma_core_backend() override {
    for (auto const& [page, reg] : mapped_) cudaHostUnregister(reg);
    if (events_ != nullptr) mlx5dv_devx_destroy_event_channel(events_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }

  char const* name() const noexcept override { return "rdma-core"; }
  /// What the last call found wrong beyond its errno value (a CUDA error, a missing rdma-core
  /// feature); empty after any other call.
  std::string diagnostic() const override { return diag_; }
  control_memory& default_memory() override { return memory_; }
  /// The open context, for callers that need more of rdma-core (nullptr before open()).
  ibv_context* context() const noexcept { return ctx_; }

  // ---- discovery and queries -----------------------------------------------------------------------
  std::vector<device_entry> devices() override {
    begin_call();
    std::vector<device_entry> out;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return out;
    for (int i = 0; i < n; ++i)
      out.push_back({ibv_get_device_name(list[i]), mlx5dv_is_supported(list[i]), pci_address(list[i]->ibdev_path)});
    ibv_free_device_list(list);
    return out;
  }
  int open(std::string const& device_name) override { return open_named(device_name, true); }
  /// ibv_open_device: no DEVX, for ordinary-verbs QPs only (create_verbs_qp). mlx5 devices only:
  /// the host posts with verbs_gpu's mlx5 WQE builders (mlx5dv_init_obj exposes the rings).
  int open_verbs(std::string const& device_name) override { return open_named(device_name, false); }
  int query_port(std::uint8_t port, port_info* out) override {
    begin_call();
    ibv_port_attr a{};
    if (int const rc = ibv_query_port(ctx_, port, &a); rc != 0) return rc > 0 ? rc : errno_or(EIO);
    *out = port_info{};
    out->active = a.state == IBV_PORT_ACTIVE;
    out->ethernet = a.link_layer == IBV_LINK_LAYER_ETHERNET;
    out->lid = a.lid;
    out->active_mtu = static_cast<std::uint32_t>(a.active_mtu);
    out->gid_table_length = a.gid_tbl_len;
    out->pkey_table_length = a.pkey_tbl_len;
    return 0;
  }
  int query_gid(std::uint8_t port, int index, gid_entry* out) override {
    begin_call();
    *out = gid_entry{};
#if defined(GPUCOMM_RDMA_HAS_QUERY_GID_EX)
    ibv_gid_entry e{};
    int const rc = ibv_query_gid_ex(ctx_, port, static_cast<std::uint32_t>(index), &e, 0);
    if (rc == ENODATA) return 0;  // "within the table but there is no data in this index": empty
    if (rc != 0) return rc;
    std::memcpy(out->gid, e.gid.raw, 16);
    out->type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? gid_type::roce_v2
                : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? gid_type::roce_v1
                                                     : gid_type::ib;
#else
    ibv_gid g{};
    if (ibv_query_gid(ctx_, port, index, &g) != 0) return errno_or(EIO);
    std::memcpy(out->gid, g.raw, 16);
    ibv_port_attr a{};
    if (ibv_query_port(ctx_, port, &a) != 0) return errno_or(EIO);
    if (a.link_layer != IBV_LINK_LAYER_ETHERNET) {
      out->type = gid_type::ib;
    } else {
      // The kernel's name for the entry's type: "IB/RoCE v1" or "RoCE v2".
      std::ifstream f("/sys/class/infiniband/" + name_ + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                      std::to_string(index));
      std::string type;
      std::getline(f, type);
      out->type = type == "RoCE v2" ? gid_type::roce_v2 : type.empty() ? gid_type::empty : gid_type::roce_v1;
    }
#endif
    bool zero = true;
    for (std::uint8_t b : out->gid) zero = zero && b == 0;
    if (zero) out->type = gid_type::empty;
    return 0;
  }
  int query_device(device_info* out) override {
    begin_call();
    ibv_device_attr a{};
    if (int const rc = ibv_query_device(ctx_, &a); rc != 0) return rc > 0 ? rc : errno_or(EIO);
    *out = device_info{};
    out->max_qp_rd_atom = a.max_qp_rd_atom;
    out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
    out->atomics = a.atomic_cap != IBV_ATOMIC_NONE;
    out->max_qp = a.max_qp;
    out->max_cq = a.max_cq;
    out->max_mr = a.max_mr;
    return 0;
  }
  int general_cmd(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) override {
    begin_call();
    return normalize(mlx5dv_devx_general_cmd(ctx_, in, in_bytes, out, out_bytes));
  }

  // ---- objects -------------------------------------------------------------------------------------
  pd_handle alloc_pd(int* error) override {
    begin_call();
    pd_handle h;
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    if (pd == nullptr) return done(error, errno_or(ENOMEM), h);
    mlx5dv_obj obj{};
    mlx5dv_pd dv{};
    obj.pd.in = pd;
    obj.pd.out = &dv;
    if (int const rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD); rc != 0) {
      ibv_dealloc_pd(pd);
      return done(error, rc > 0 ? rc : errno_or(EIO), h);
    }
    h.impl = pd;
    h.pdn = dv.pdn;
    return done(error, 0, h);
  }
  void dealloc_pd(pd_handle pd) override { ibv_dealloc_pd(static_cast<ibv_pd*>(pd.impl)); }

  umem_handle umem_reg(void* addr, std::size_t bytes, int access_flags, int dmabuf_fd, std::uint64_t page_size_bitmap,
                       int* error) override {
    begin_call();
    umem_handle h;
    mlx5dv_devx_umem* u = nullptr;
    if (dmabuf_fd >= 0) {
#if defined(GPUCOMM_RDMA_HAS_UMEM_DMABUF)
      mlx5dv_devx_umem_in in{};
      in.addr = addr;  // the offset into the dma-buf
      in.size = bytes;
      in.access = static_cast<std::uint32_t>(access_flags);
      in.pgsz_bitmap = page_size_bitmap;
      in.comp_mask = MLX5DV_UMEM_MASK_DMABUF;
      in.dmabuf_fd = dmabuf_fd;
      u = mlx5dv_devx_umem_reg_ex(ctx_, &in);
#else
      diag_ = "this rdma-core has no dma-buf UMEMs (MLX5DV_UMEM_MASK_DMABUF, rdma-core v43)";
      return done(error, EOPNOTSUPP, h);
#endif
    } else {
#if defined(GPUCOMM_RDMA_HAS_UMEM_REG_EX)
      mlx5dv_devx_umem_in in{};
      in.addr = addr;
      in.size = bytes;
      in.access = static_cast<std::uint32_t>(access_flags);
      in.pgsz_bitmap = page_size_bitmap;
      u = mlx5dv_devx_umem_reg_ex(ctx_, &in);
#else
      (void)page_size_bitmap;  // rdma-core's own: every page size from 4 KiB
      u = mlx5dv_devx_umem_reg(ctx_, addr, bytes, static_cast<std::uint32_t>(access_flags));
#endif
    }
    if (u == nullptr) return done(error, errno_or(EIO), h);
    h.impl = u;
    h.id = u->umem_id;
    return done(error, 0, h);
  }
  void umem_dereg(umem_handle umem) override { mlx5dv_devx_umem_dereg(static_cast<mlx5dv_devx_umem*>(umem.impl)); }

  uar_handle alloc_uar(uar_type type, int* error) override {
    begin_call();
    uar_handle h;
    std::uint32_t flags = MLX5DV_UAR_ALLOC_TYPE_NC;
    if (type == uar_type::blue_flame) flags = MLX5DV_UAR_ALLOC_TYPE_BF;
    if (type == uar_type::nc_dedicated) {
#if defined(MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED)
      flags = MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED;
#else
      diag_ = "this rdma-core has no dedicated NC UARs (MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED, rdma-core v45)";
      return done(error, EOPNOTSUPP, h);
#endif
    }
    mlx5dv_devx_uar* u = mlx5dv_devx_alloc_uar(ctx_, flags);
    if (u == nullptr) return done(error, errno_or(EIO), h);
    h.impl = u;
    h.page_id = u->page_id;
    h.reg_addr = u->reg_addr;
    h.base_addr = u->base_addr;
    return done(error, 0, h);
  }
  void free_uar(uar_handle uar) override { mlx5dv_devx_free_uar(static_cast<mlx5dv_devx_uar*>(uar.impl)); }
  int query_eqn(std::uint32_t vector, std::uint32_t* eqn) override {
    begin_call();
    return normalize(mlx5dv_devx_query_eqn(ctx_, vector, eqn));
  }
  obj_handle obj_create(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes, int* error) override {
    begin_call();
    obj_handle h;
    h.impl = mlx5dv_devx_obj_create(ctx_, in, in_bytes, out, out_bytes);
    if (h.impl != nullptr) subscribe(static_cast<mlx5dv_devx_obj*>(h.impl), in, out);
    return done(error, h.impl != nullptr ? 0 : errno_or(EIO), h);
  }
  int obj_modify(obj_handle obj, void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) override {
    begin_call();
    return normalize(mlx5dv_devx_obj_modify(static_cast<mlx5dv_devx_obj*>(obj.impl), in, in_bytes, out, out_bytes));
  }
  int obj_destroy(obj_handle obj) override {
    begin_call();
    return normalize(mlx5dv_devx_obj_destroy(static_cast<mlx5dv_devx_obj*>(obj.impl)));
  }
  mr_handle reg_mr(pd_handle pd, void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                   std::uint64_t dmabuf_offset, int* error) override {
    begin_call();
    mr_handle h;
    ibv_mr* mr = nullptr;
    auto* p = static_cast<ibv_pd*>(pd.impl);
    if (dmabuf_fd >= 0) {
#if defined(GPUCOMM_RDMA_HAS_REG_DMABUF_MR)
      mr = ibv_reg_dmabuf_mr(p, dmabuf_offset, bytes, reinterpret_cast<std::uint64_t>(addr), dmabuf_fd, access_flags);
#else
      (void)dmabuf_offset;
      diag_ = "this rdma-core has no ibv_reg_dmabuf_mr (rdma-core v34)";
      return done(error, EOPNOTSUPP, h);
#endif
    } else {
      mr = ibv_reg_mr(p, addr, bytes, access_flags);
    }
    if (mr == nullptr) return done(error, errno_or(EIO), h);
    h.impl = mr;
    h.lkey = mr->lkey;
    h.rkey = mr->rkey;
    return done(error, 0, h);
  }
  void dereg_mr(mr_handle mr) override { ibv_dereg_mr(static_cast<ibv_mr*>(mr.impl)); }
  int resolve_ah(pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16], int sgid_index,
                 ah_info* out) override {
    begin_call();
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.port_num = port;
    std::memcpy(attr.grh.dgid.raw, dgid, 16);
    attr.grh.sgid_index = static_cast<std::uint8_t>(sgid_index);
    attr.grh.hop_limit = 255;
    ibv_ah* ah = ibv_create_ah(static_cast<ibv_pd*>(pd.impl), &attr);
    if (ah == nullptr) return errno_or(EHOSTUNREACH);
    mlx5dv_obj obj{};
    mlx5dv_ah dv{};
    obj.ah.in = ah;
    obj.ah.out = &dv;
    int const rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH);
    if (rc == 0) std::memcpy(out->rmac, dv.av->rmac, 6);
    ibv_destroy_ah(ah);
    return rc == 0 ? 0 : (rc > 0 ? rc : errno_or(EIO));
  }

  // ---- QPs posted by a host thread, with ordinary verbs -----------------------------------------------
  bool native_verbs_qps() const noexcept override { return true; }
  verbs_qp_handle create_verbs_qp(pd_handle pd, std::uint32_t log_send_wrs, std::uint32_t log_cqes,
                                  int* error) override {
    begin_call();
    auto* objects = new verbs_objects{};
    auto fail = [&](int e) {
      if (objects->qp != nullptr) ibv_destroy_qp(objects->qp);
      if (objects->cq != nullptr) ibv_destroy_cq(objects->cq);
      delete objects;
      return done(error, e, verbs_qp_handle{});
    };
    objects->cq = ibv_create_cq(ctx_, 1 << log_cqes, nullptr, nullptr, 0);
    if (objects->cq == nullptr) return fail(errno_or(ENOMEM));
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = objects->cq;
    a.qp_type = IBV_QPT_RC;
    // Each WQE asks for its completion itself (the builders' CQ_UPDATE). Not IBV_SIGNAL_ALL_WR
    // either: with it the kernel lets the NIC scatter read and atomic responses of up to 32 bytes
    // into the CQE instead of the local buffer (mlx5's requester scatter-to-CQE).
    a.sq_sig_all = 0;
    a.cap.max_send_wr = 1u << log_send_wrs;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_wr = 1;  // the proxy posts no receives
    a.cap.max_recv_sge = 1;
    objects->qp = ibv_create_qp(static_cast<ibv_pd*>(pd.impl), &a);
    if (objects->qp == nullptr) return fail(errno_or(ENOMEM));
    mlx5dv_obj obj{};
    mlx5dv_qp dq{};
    mlx5dv_cq dc{};
    obj.qp.in = objects->qp;
    obj.qp.out = &dq;
    obj.cq.in = objects->cq;
    obj.cq.out = &dc;
    if (int const rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ); rc != 0) {
      diag_ = "mlx5dv_init_obj(QP | CQ) failed";
      return fail(rc > 0 ? rc : errno_or(EIO));
    }
    cq_numbers_[objects->cq] = dc.cqn;
    return done(error, 0, verbs_qp_handle_of(objects, objects->qp->qp_num, dq, dc));
  }
  int modify_verbs_qp(verbs_qp_handle const& qp, verbs_qp_step const& step) override {
    begin_call();
    ibv_qp_attr a;
    int const mask = verbs_qp_attributes(step, a);
    return normalize(ibv_modify_qp(static_cast<verbs_objects*>(qp.impl)->qp, &a, mask));
  }
  int destroy_verbs_qp(verbs_qp_handle qp) override {
    begin_call();
    auto* objects = static_cast<verbs_objects*>(qp.impl);
    if (objects == nullptr) return 0;
    if (objects->qp != nullptr) {
      if (int const rc = normalize(ibv_destroy_qp(objects->qp)); rc != 0) return rc;
      objects->qp = nullptr;
    }
    if (int const rc = normalize(ibv_destroy_cq(objects->cq)); rc != 0) return rc;
    cq_numbers_.erase(objects->cq);
    delete objects;
    return 0;
  }

  // ---- the doorbell register, as the GPU sees it ----------------------------------------------------
  int map_doorbell(uar_handle uar, std::size_t bytes, void** device_pointer) override {
    begin_call();
    cudaError_t e = cudaHostRegister(uar.reg_addr, bytes,
                                     cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory);
    if (e != cudaSuccess) {
      cudaGetLastError();
      diag_ = std::string("cudaHostRegister(the host page of a UAR register, cudaHostRegisterIoMemory): ") +
              cudaGetErrorString(e);
      return e == cudaErrorHostMemoryAlreadyRegistered ? EEXIST : EIO;
    }
    e = cudaHostGetDevicePointer(device_pointer, uar.reg_addr, 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      cudaHostUnregister(uar.reg_addr);
      diag_ = std::string("cudaHostGetDevicePointer(UAR register): ") + cudaGetErrorString(e);
      return EIO;
    }
    mapped_[uar.base_addr] = uar.reg_addr;
    return 0;
  }
  void unmap_doorbell(uar_handle uar) override {
    begin_call();
    // The address registered for the page, which another handle of the page may have given.
    auto it = mapped_.find(uar.base_addr);
    if (it == mapped_.end()) return;
    cudaHostUnregister(it->second);
    mapped_.erase(it);
  }

  // ---- errors no completion carries ------------------------------------------------------------------
  std::vector<async_event> async_events() override {
    std::vector<async_event> out;
    if (events_ != nullptr) {
      // The CQ and QP errors each object was subscribed to; the cookie says which object.
      mlx5dv_devx_async_event_hdr hdr{};
      while (mlx5dv_devx_get_event(events_, &hdr, sizeof(hdr)) >= static_cast<ssize_t>(sizeof(hdr)))
        out.push_back({static_cast<async_event::kind>(hdr.cookie >> 32), static_cast<std::uint32_t>(hdr.cookie)});
    }
    if (ctx_ != nullptr) {
      // Unaffiliated events on the verbs context (its descriptor is non-blocking: open()).
      ibv_async_event e{};
      while (ibv_get_async_event(ctx_, &e) == 0) {
        // Affiliated events come here for ordinary-verbs QPs and CQs (create_verbs_qp).
        switch (e.event_type) {
          case IBV_EVENT_PORT_ERR:
            out.push_back({async_event::kind::port_change, static_cast<std::uint32_t>(e.element.port_num)});
            break;
          case IBV_EVENT_DEVICE_FATAL:
            out.push_back({async_event::kind::device_fatal, 0});
            break;
          case IBV_EVENT_CQ_ERR: {
            auto const it = cq_numbers_.find(e.element.cq);
            out.push_back({async_event::kind::cq_error, it != cq_numbers_.end() ? it->second : 0});
            break;
          }
          case IBV_EVENT_QP_FATAL:
            out.push_back({async_event::kind::qp_fatal, e.element.qp->qp_num});
            break;
          case IBV_EVENT_QP_REQ_ERR:
            out.push_back({async_event::kind::qp_invalid_request, e.element.qp->qp_num});
            break;
          case IBV_EVENT_QP_ACCESS_ERR:
            out.push_back({async_event::kind::qp_access_error, e.element.qp->qp_num});
            break;
          case IBV_EVENT_PATH_MIG_ERR:
            out.push_back({async_event::kind::path_migration_failed, e.element.qp->qp_num});
            break;
          default:
            break;
        }
        ibv_ack_async_event(&e);
      }
    }
    return out;
  }

 private:
  /// Opens `device_name`: with DEVX (mlx5dv_open_device) or as an ordinary verbs context.
  int open_named(std::string const& device_name, bool devx) {
    begin_call();
    if (ctx_ != nullptr) return EBUSY;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return errno != 0 ? errno : ENODEV;
    int rc = ENODEV;
    for (int i = 0; i < n; ++i) {
      if (device_name != ibv_get_device_name(list[i])) continue;
      if (!mlx5dv_is_supported(list[i])) {
        diag_ = "verbs_gpu's WQE builders need an mlx5 device; ibv_post_send for other NICs is not written";
        rc = EOPNOTSUPP;
        break;
      }
      if (devx) {
        mlx5dv_context_attr attr{};
        attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
        ctx_ = mlx5dv_open_device(list[i], &attr);
      } else {
        ctx_ = ibv_open_device(list[i]);
      }
      rc = ctx_ != nullptr ? 0 : errno_or(EIO);
      if (ctx_ != nullptr) {
        name_ = device_name;
        open_event_channels();  // without DEVX the DEVX channel fails; the verbs events remain
      }
      break;
    }
    ibv_free_device_list(list);
    return rc;
  }

  /// The context's async descriptor made non-blocking, and a DEVX event channel (non-blocking too)
  /// for the errors of the CQs and QPs obj_create makes. Without the channel (a kernel older than
  /// DEVX events) those errors still show in the completions; only their events are missed.
  void open_event_channels() noexcept {
    int const flags = ::fcntl(ctx_->async_fd, F_GETFL);
    if (flags >= 0) ::fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK);
    events_ = mlx5dv_devx_create_event_channel(ctx_, MLX5DV_DEVX_CREATE_EVENT_CHANNEL_FLAGS_OMIT_EV_DATA);
    if (events_ != nullptr) {
      int const f = ::fcntl(events_->fd, F_GETFL);
      if (f >= 0) ::fcntl(events_->fd, F_SETFL, f | O_NONBLOCK);
    }
  }
  /// Subscribes a new CQ or QP to its error events, the cookie holding (event type << 32) | number.
  /// One subscription per event type: the cookie must name the type, which the omitted event data
  /// would otherwise carry.
  void subscribe(mlx5dv_devx_obj* obj, void const* in, void const* out) noexcept {
    if (events_ == nullptr) return;
    std::uint16_t const opcode = static_cast<std::uint16_t>(prm::get(in, prm::in_opcode));
    std::uint32_t const number = prm::get(out, prm::out_obj_number);
    std::vector<std::uint16_t> types;
    if (opcode == prm::op_create_cq) types = {prm::event_cq_error};
    if (opcode == prm::op_create_qp)
      types = {prm::event_wq_catas_error, prm::event_wq_inval_req_error, prm::event_wq_access_error,
               prm::event_path_mig_failed};
    for (std::uint16_t type : types) {
      std::uint16_t one[1] = {type};
      mlx5dv_devx_subscribe_devx_event(events_, obj, sizeof(one), one, (std::uint64_t{type} << 32) | number);
    }
  }

  /// Each call starts with no diagnostic and errno 0, so errno_or() never reports an earlier
  /// call's errno for a failure that set none.
  void begin_call() noexcept {
    diag_.clear();
    errno = 0;
  }
  static int errno_or(int fallback) noexcept { return errno != 0 ? errno : fallback; }
  /// rdma-core returns errno values from most calls, -1 with errno from some: one convention.
  static int normalize(int rc) noexcept { return rc == 0 ? 0 : rc > 0 ? rc : errno_or(EIO); }
  /// Returns handle `h`, with `value` (0 or an errno value) in *error.
  template <class Handle>
  static Handle done(int* error, int value, Handle h) noexcept {
    if (error != nullptr) *error = value;
    return h;
  }
  /// "0000:17:00.0" from /sys/class/infiniband/<dev>/device, a link into the PCI tree.
  static std::string pci_address(char const* ibdev_path) {
    char buf[PATH_MAX];
    if (::realpath((std::string(ibdev_path) + "/device").c_str(), buf) == nullptr) return {};
    std::string const p(buf);
    return p.substr(p.find_last_of('/') + 1);
  }

  /// What create_verbs_qp made for one handle.
  struct verbs_objects {
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
  };

  ibv_context* ctx_ = nullptr;
  std::map<ibv_cq*, std::uint32_t> cq_numbers_;  ///< ordinary-verbs CQs, for their error events
  mlx5dv_devx_event_channel* events_ = nullptr;  ///< CQ and QP error events (nullptr: unsupported)
  std::string name_;
  std::string diag_;
  cuda_control_memory memory_;
  std::map<void*, void*> mapped_;  ///< UAR page (base_addr) -> the register registered with CUDA
};

}  // namespace gpucomm::verbs_gpu::host
