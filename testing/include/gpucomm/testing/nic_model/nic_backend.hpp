#pragma once
// The firmware model driving the software NIC: a host::backend with which verbs_gpu's set-up
// (host/setup.hpp) builds QPs that really run. A TEST AND DEVELOPMENT TOOL, as both models are.
//
//   model::model_gpu_memory   control memory for the set-up's rings, CQs and doorbell records: GPU
//                             memory from cudaMalloc, where hardware keeps them (the model reads and
//                             writes it with cudaMemcpy, as a NIC does over PCIe, so no dma-buf)
//   model::model_network      what the contexts of one process share: the model::nic that executes
//                             every QP's work, and where devices modelled by other processes listen
//   model::nic_backend        one device context: every call goes to a firmware_model (the control
//                             path: it decodes and validates each command, firmware.hpp), and what
//                             the firmware accepted is mirrored into the nic (the data path):
//
//     umem_reg            the UMEM's address, and whether it is GPU memory, is remembered
//     CREATE_CQ           a nic CQ on the UMEMs the command named (entries, doorbell record), in
//                         the mode the CQ context asked for (cc: collapsed), with its oi bit
//     RTR2RTS             a nic QP under the firmware's QP number, on the ring and doorbell record
//                         UMEMs the CREATE_QP named and the doorbell register of its UAR page; then
//                         connected to the QP its RTR path named: on this process's nic once both
//                         ends are ready, or, for a device another process models
//                         (firmware_config::remote), over the fabric to that process's nic
//     reg_mr              a nic region with the firmware's keys, in the PD's namespace; GPU memory
//                         of a declared range (gpu_range: the symmetric heap, reserved and mapped
//                         block by block) must be mapped in full, as hardware needs to pin or
//                         export it
//     map_doorbell        GPU control memory: mapped pinned host memory stands for the host page
//                         the set-up maps (the GPU writes the registers there; the nic watches
//                         them); host memory: the firmware's own pages
//     destroy, dereg      the nic object goes first, so nothing runs on memory being released
//     async_events        a CQ error event for each CQ of the context the nic saw overrun
//
// So the QPs that kernels post to are exactly those the set-up configured, at the addresses and
// with the numbers and keys the firmware gave: a wrong UMEM, offset, UAR page, CQ number or key in
// the set-up shows up as WQEs the nic never sees, or as error CQEs. The nic identifies a QP from the
// doorbell value (its QP number), as hardware does for a shared register.
//
// Limits (besides the two models' own): 2ERR and 2RST of an RTS QP leave the nic's QP running;
// shared doorbell registers (several QPs on one NC page) can lose a ring when two QPs write it
// between two looks of the nic, which the device side recovers from by ringing again
// (send_queue.cuh, "Lost doorbells"), slowly.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gpucomm/verbs_gpu/host/backend.hpp>
#include <gpucomm/verbs_gpu/host/gpu_memory.hpp>
#include "firmware.hpp"
#include "nic_model.hpp"

namespace gpucomm::verbs_gpu::model {

/// GPU control memory for the models: cudaMalloc'd as on hardware (host::cuda_control_memory), but
/// offering no dma-buf: the NIC model reads it with cudaMemcpy, as peer memory would reach it.
class model_gpu_memory final : public host::control_memory {
 public:
  char const* name() const noexcept override { return "GPU memory"; }
  bool gpu() const noexcept override { return true; }
  void* allocate(std::size_t bytes, std::size_t alignment, std::string* error) override {
    return inner_.allocate(bytes, alignment, error);
  }
  void deallocate(void* p) noexcept override { inner_.deallocate(p); }
  bool fill(void* p, unsigned char value, std::size_t bytes, std::string* error) override {
    return inner_.fill(p, value, bytes, error);
  }
  int dmabuf_fd(void const*, std::size_t) override { return -1; }
  bool dmabuf_supported() override { return false; }
  bool peer_memory() override { return true; }
  std::string pci_bus_id() override { return inner_.pci_bus_id(); }

 private:
  host::cuda_control_memory inner_;
};

/// What the firmware-model contexts of one process share: the nic that executes their QPs' work
/// (one per process, so every operation on this process's memory is executed by its nic: one
/// atomicity domain) and the addresses where devices modelled by other processes are served.
class model_network {
 public:
  explicit model_network(nic_config config = {}) : nic_(config) {}
  model_network(model_network const&) = delete;
  model_network& operator=(model_network const&) = delete;

  model::nic& data_path() noexcept { return nic_; }
  /// Device `name`, a firmware_config::remote device of this process's fabric, is modelled by the
  /// process whose nic listens at `address` (nic::listen).
  void add_remote(std::string const& name, std::string const& address) {
    std::lock_guard<std::mutex> lock(mu_);
    remote_[name] = address;
  }

 private:
  friend class nic_backend;
  std::mutex mu_;
  std::map<std::string, std::string> remote_;
  std::map<std::uint32_t, std::uint32_t> waiting_;  ///< QP in the nic -> its local peer, not there yet
  model::nic nic_;
};

/// One device context of the firmware model whose QPs run on a model_network's nic.
class nic_backend final : public host::backend {
 public:
  /// A context on `fabric`; `memory` is default_memory() (model_gpu_memory for GPU tests,
  /// host::host_control_memory for host tests). Both must outlive it.
  nic_backend(firmware_fabric fabric, model_network& network, host::control_memory& memory)
      : fw_(std::move(fabric)), net_(network), memory_(memory) {}
  ~nic_backend() override {
    // Whatever the set-up left: the nic stops using it before the firmware context releases it.
    for (std::uint32_t const qpn : qps_) net_.nic_.destroy_qp(qpn);
    for (auto const& [page, m] : mirrors_) cudaFreeHost(m.host);
  }
  nic_backend(nic_backend const&) = delete;
  nic_backend& operator=(nic_backend const&) = delete;

  /// Declares [base, base + bytes) GPU memory of `cuda_device`, for registrations the runtime cannot
  /// describe: a reserved address range mapped piece by piece (the symmetric heap). Other ranges
  /// are classified with cudaPointerGetAttributes.
  void gpu_range(void const* base, std::size_t bytes, int cuda_device) {
    gpu_ranges_.push_back({reinterpret_cast<std::uintptr_t>(base), bytes, cuda_device});
  }

  /// The firmware context behind this backend (for tests: its tables and checks).
  firmware_model& firmware() noexcept { return fw_; }

  char const* name() const noexcept override { return "firmware model + NIC model"; }
  std::string diagnostic() const override { return diag_.empty() ? fw_.diagnostic() : diag_; }
  host::control_memory& default_memory() override { return memory_; }

  // ---- forwarded as they are -------------------------------------------------------------------
  std::vector<host::device_entry> devices() override { return fw_.devices(); }
  int open(std::string const& name) override { return clear(), fw_.open(name); }
  int query_port(std::uint8_t port, host::port_info* out) override { return clear(), fw_.query_port(port, out); }
  int query_gid(std::uint8_t port, int index, host::gid_entry* out) override {
    return clear(), fw_.query_gid(port, index, out);
  }
  int query_device(host::device_info* out) override { return clear(), fw_.query_device(out); }
  int general_cmd(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes) override {
    return clear(), fw_.general_cmd(in, in_bytes, out, out_bytes);
  }
  host::pd_handle alloc_pd(int* error) override { return clear(), fw_.alloc_pd(error); }
  void dealloc_pd(host::pd_handle pd) override { fw_.dealloc_pd(pd); }
  int query_eqn(std::uint32_t vector, std::uint32_t* eqn) override { return clear(), fw_.query_eqn(vector, eqn); }
  int resolve_ah(host::pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16], int sgid_index,
                 host::ah_info* out) override {
    return clear(), fw_.resolve_ah(pd, port, dgid, sgid_index, out);
  }
  void free_uar(host::uar_handle uar) override { fw_.free_uar(uar); }

  // ---- forwarded and mirrored -------------------------------------------------------------------
  host::umem_handle umem_reg(void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                             std::uint64_t page_size_bitmap, int* error) override {
    clear();
    if (dmabuf_fd >= 0) {
      diag_ = "umem_reg: the NIC model reads control memory by address, not through a dma-buf";
      if (error != nullptr) *error = EOPNOTSUPP;
      return {};
    }
    host::umem_handle const u = fw_.umem_reg(addr, bytes, access_flags, dmabuf_fd, page_size_bitmap, error);
    if (u) umems_[u.id] = {static_cast<unsigned char*>(addr), device_of(addr)};
    return u;
  }
  void umem_dereg(host::umem_handle umem) override {
    umems_.erase(umem.id);
    fw_.umem_dereg(umem);
  }

  host::uar_handle alloc_uar(host::uar_type type, int* error) override {
    clear();
    host::uar_handle const u = fw_.alloc_uar(type, error);
    if (u) uars_[u.page_id] = u;
    return u;
  }

  host::obj_handle obj_create(void const* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
                              int* error) override {
    clear();
    host::obj_handle const obj = fw_.obj_create(in, in_bytes, out, out_bytes, error);
    if (!obj) return obj;
    auto const [cq, number] = fw_.object_of(obj);
    if (!cq) return obj;  // a QP reaches the nic at RTS
    std::optional<cq_description> const d = fw_.describe_cq(number);
    try {
      umem const& entries = umems_.at(d->umem);
      umem const& record = umems_.at(d->dbr_umem);
      cq_config c;
      c.mode = d->collapsed ? cq_mode::collapsed : cq_mode::owner_bit;
      c.cqes = reinterpret_cast<cqe64*>(entries.addr + d->umem_offset);
      c.log_ncqe = d->log_size;
      c.dbrec = reinterpret_cast<std::uint32_t*>(record.addr + d->dbr_offset);
      c.cuda_device = entries.cuda_device;
      c.overrun_ignore = d->overrun_ignore;
      cqs_[number] = net_.nic_.create_cq(c);
    } catch (std::exception const& e) {
      fw_.obj_destroy(obj);
      diag_ = std::string("the NIC model refused CQ ") + std::to_string(number) + ": " + e.what();
      if (error != nullptr) *error = EINVAL;
      return {};
    }
    return obj;
  }

  int obj_modify(host::obj_handle obj, void const* in, std::size_t in_bytes, void* out,
                 std::size_t out_bytes) override {
    clear();
    int const rc = fw_.obj_modify(obj, in, in_bytes, out, out_bytes);
    if (rc != 0) return rc;
    auto const [cq, number] = fw_.object_of(obj);
    if (cq || qps_.count(number) != 0) return 0;
    std::optional<qp_description> const d = fw_.describe_qp(number);
    if (!d || d->state != qp_state::rts) return 0;
    try {
      bring_up(number, *d);
    } catch (std::exception const& e) {
      diag_ = std::string("the NIC model could not run QP ") + std::to_string(number) + ": " + e.what();
      return EIO;
    }
    return 0;
  }

  int obj_destroy(host::obj_handle obj) override {
    clear();
    auto const [cq, number] = fw_.object_of(obj);
    if (!cq && qps_.erase(number) != 0) {
      net_.nic_.destroy_qp(number);
      std::lock_guard<std::mutex> lock(net_.mu_);
      net_.waiting_.erase(number);
    }
    int const rc = fw_.obj_destroy(obj);
    if (rc == 0 && cq) {
      if (auto it = cqs_.find(number); it != cqs_.end()) {
        net_.nic_.destroy_cq(it->second);
        cqs_.erase(it);
      }
    }
    return rc;
  }

  host::mr_handle reg_mr(host::pd_handle pd, void* addr, std::size_t bytes, int access_flags, int dmabuf_fd,
                         std::uint64_t dmabuf_offset, int* error) override {
    clear();
    if (std::string const hole = unmapped_in(addr, bytes); !hole.empty()) {
      diag_ = "the range holds unmapped GPU memory at " + hole +
              ": a NIC cannot register it (peer memory pins the pages behind the range; a dma-buf is exported "
              "from a mapped range)";
      if (error != nullptr) *error = EFAULT;
      return {};
    }
    host::mr_handle const mr = fw_.reg_mr(pd, addr, bytes, access_flags, dmabuf_fd, dmabuf_offset, error);
    if (!mr) return mr;
    // ibv_access_flags and the nic's access bits have the same values.
    static_assert(host::access::local_write == local_write && host::access::remote_write == remote_write &&
                  host::access::remote_read == remote_read && host::access::remote_atomic == remote_atomic);
    try {
      net_.nic_.register_memory(nic_pd(pd.pdn), addr, bytes, static_cast<std::uint32_t>(access_flags) & all_access,
                                nullptr, device_of(addr), memory_key{mr.lkey, mr.rkey});
    } catch (std::exception const& e) {
      fw_.dereg_mr(mr);
      diag_ = std::string("the NIC model refused the MR: ") + e.what();
      if (error != nullptr) *error = EINVAL;
      return {};
    }
    return mr;
  }
  void dereg_mr(host::mr_handle mr) override {
    net_.nic_.deregister_memory(mr.lkey);
    fw_.dereg_mr(mr);
  }

  int map_doorbell(host::uar_handle uar, std::size_t bytes, void** device_pointer) override {
    clear();
    void* firmware_view = nullptr;
    if (int const e = fw_.map_doorbell(uar, bytes, &firmware_view); e != 0) return e;
    if (!memory_.gpu()) {
      *device_pointer = firmware_view;  // host tests: producers are host threads
      return 0;
    }
    // What cudaHostRegister(IoMemory) of the host page gives on hardware: memory the GPU can store
    // to. Here it is mapped pinned host memory of the same size, which the nic watches instead of
    // the firmware's pages.
    void* page = nullptr;
    cudaError_t e = cudaHostAlloc(&page, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) {
      std::memset(page, 0, bytes);
      e = cudaHostGetDevicePointer(device_pointer, page, 0);
      if (e != cudaSuccess) cudaFreeHost(page);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      fw_.unmap_doorbell(uar);
      diag_ = std::string("a mapped page for the doorbell: ") + cudaGetErrorString(e);
      return EIO;
    }
    mirrors_[reinterpret_cast<std::uintptr_t>(uar.reg_addr)] = {static_cast<unsigned char*>(page), bytes};
    return 0;
  }
  void unmap_doorbell(host::uar_handle uar) override {
    if (auto it = mirrors_.find(reinterpret_cast<std::uintptr_t>(uar.reg_addr)); it != mirrors_.end()) {
      cudaFreeHost(it->second.host);
      mirrors_.erase(it);
    }
    fw_.unmap_doorbell(uar);
  }

  /// A CQ error event for each of this context's CQs that the nic saw overrun (a collapsed CQ
  /// without overrun-ignore), once: what the firmware raises on hardware.
  std::vector<host::async_event> async_events() override {
    std::vector<host::async_event> out;
    for (std::uint32_t const overran : net_.nic_.overrun_cqns()) {
      for (auto const& [number, nic_cqn] : cqs_) {
        if (nic_cqn == overran && reported_cqs_.insert(number).second)
          out.push_back({host::async_event::kind::cq_error, number});
      }
    }
    return out;
  }

 private:
  struct umem {
    unsigned char* addr = nullptr;
    int cuda_device = -1;
  };
  struct range {
    std::uintptr_t base;
    std::size_t bytes;
    int cuda_device;
  };
  struct mirror {
    unsigned char* host;  ///< pinned, mapped: where the GPU's doorbell stores land
    std::size_t bytes;
  };

  int clear() {
    diag_.clear();
    return 0;
  }
  /// PD numbers are per device; the nic holds the PDs of every device of the process.
  std::uint32_t nic_pd(std::uint32_t pdn) const {
    return static_cast<std::uint32_t>((fw_.device_index() + 1) << 24) | (pdn & 0xffffffu);
  }
  /// Where the nic watches a doorbell register: in the mirror of its host page (GPU control
  /// memory), else at the register itself.
  std::uint64_t* watched(void* reg_addr) const {
    auto const reg = reinterpret_cast<std::uintptr_t>(reg_addr);
    for (auto const& [first, m] : mirrors_)
      if (reg >= first && reg - first < m.bytes) return reinterpret_cast<std::uint64_t*>(m.host + (reg - first));
    return static_cast<std::uint64_t*>(reg_addr);
  }
  /// -1 for host memory, else the GPU the memory is on.
  int device_of(void const* p) const {
    auto const a = reinterpret_cast<std::uintptr_t>(p);
    for (range const& r : gpu_ranges_)
      if (a >= r.base && a - r.base < r.bytes) return r.cuda_device;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // no GPU (host tests): host memory
      return -1;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
  }
  /// The first address of [addr, addr + bytes) inside a declared GPU range that no allocation is
  /// mapped at (hex), or "" when there is none or the driver cannot say (no GPU: host tests).
  /// Looked at every 64 KiB, the smallest page a GPU maps.
  std::string unmapped_in(void const* addr, std::size_t bytes) const {
    using get_attribute_fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
    static get_attribute_fn const get = host::detail::driver_fn<get_attribute_fn>("cuPointerGetAttribute");
    auto const first = reinterpret_cast<std::uintptr_t>(addr);
    bool declared = false;
    for (range const& r : gpu_ranges_) declared = declared || (first >= r.base && first - r.base < r.bytes);
    if (!declared || get == nullptr || bytes == 0) return {};
    constexpr std::uintptr_t step = 65536;
    for (std::uintptr_t at = first; at - first < bytes; at = (at & ~(step - 1)) + step) {
      unsigned mapped = 0;
      if (get(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, static_cast<CUdeviceptr>(at)) != CUDA_SUCCESS || mapped == 0) {
        char text[24];
        std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(at));
        return text;
      }
    }
    return {};
  }

  /// The nic QP for QP qpn at RTS, connected to its peer.
  void bring_up(std::uint32_t qpn, qp_description const& d) {
    umem const& ring = umems_.at(d.wq_umem);
    umem const& record = umems_.at(d.dbr_umem);
    host::uar_handle const& uar = uars_.at(d.uar_page);
    qp_config c;
    c.pd = nic_pd(d.pd);
    c.ring = reinterpret_cast<std::byte*>(ring.addr + d.wq_offset);
    c.log_depth = d.log_sq_size;
    c.dbrec_snd = reinterpret_cast<std::uint32_t*>(record.addr + d.dbr_offset) + dbr_snd;
    c.doorbell = watched(uar.reg_addr);
    c.send_cqn = cqs_.at(d.cqn_snd);
    c.cuda_device = ring.cuda_device;
    c.qpn = qpn;
    net_.nic_.create_qp(c);
    qps_.insert(qpn);
    if (d.peer_remote) {
      std::string address;
      {
        std::lock_guard<std::mutex> lock(net_.mu_);
        auto it = net_.remote_.find(d.peer_device);
        if (it == net_.remote_.end())
          throw std::runtime_error("no address for " + d.peer_device +
                                   ", a device another process models "
                                   "(model_network::add_remote)");
        address = it->second;
      }
      net_.nic_.connect_remote(qpn, address, d.remote_qpn);
      return;
    }
    if (d.remote_qpn == qpn) {
      net_.nic_.connect(qpn, qpn);  // loopback
      return;
    }
    std::lock_guard<std::mutex> lock(net_.mu_);
    auto it = net_.waiting_.find(d.remote_qpn);
    if (it != net_.waiting_.end() && it->second == qpn) {
      net_.waiting_.erase(it);
      net_.nic_.connect(qpn, d.remote_qpn);
    } else {
      net_.waiting_[qpn] = d.remote_qpn;  // the peer connects both when it reaches RTS
    }
  }

  firmware_model fw_;
  model_network& net_;
  host::control_memory& memory_;
  std::string diag_;
  std::map<std::uint32_t, umem> umems_;             ///< by UMEM id
  std::map<std::uint32_t, host::uar_handle> uars_;  ///< by page id
  std::map<std::uintptr_t, mirror> mirrors_;        ///< by the host page they stand for
  std::map<std::uint32_t, std::uint32_t> cqs_;      ///< firmware CQ number -> nic CQ number
  std::set<std::uint32_t> qps_;                     ///< QPs in the nic
  std::set<std::uint32_t> reported_cqs_;            ///< CQ error events already reported
  std::vector<range> gpu_ranges_;
};

}  // namespace gpucomm::verbs_gpu::model
