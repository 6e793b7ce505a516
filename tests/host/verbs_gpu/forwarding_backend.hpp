#pragma once
// A host::backend that forwards every call to another backend, for tests that watch or alter a few
// calls (override those) of a backend they wrap: the firmware model, the NIC model's backend.
#include <gpucomm/verbs_gpu/host/backend.hpp>

#include <string>
#include <vector>

namespace verbs_test {

class forwarding_backend : public gpucomm::verbs_gpu::host::backend {
 public:
  using backend = gpucomm::verbs_gpu::host::backend;
  /// `inner` must outlive this; a derived class may pass one of its members (it is not used here
  /// before the derived class is constructed).
  explicit forwarding_backend(backend& inner) : inner_(&inner) {}

  char const* name() const noexcept override { return inner_->name(); }
  std::string diagnostic() const override { return inner_->diagnostic(); }
  gpucomm::verbs_gpu::host::control_memory& default_memory() override { return inner_->default_memory(); }
  std::vector<gpucomm::verbs_gpu::host::device_entry> devices() override { return inner_->devices(); }
  int open(std::string const& n) override { return inner_->open(n); }
  int query_port(std::uint8_t p, gpucomm::verbs_gpu::host::port_info* o) override { return inner_->query_port(p, o); }
  int query_gid(std::uint8_t p, int i, gpucomm::verbs_gpu::host::gid_entry* o) override {
    return inner_->query_gid(p, i, o);
  }
  int query_device(gpucomm::verbs_gpu::host::device_info* o) override { return inner_->query_device(o); }
  int general_cmd(void const* in, std::size_t ib, void* out, std::size_t ob) override {
    return inner_->general_cmd(in, ib, out, ob);
  }
  gpucomm::verbs_gpu::host::pd_handle alloc_pd(int* e) override { return inner_->alloc_pd(e); }
  void dealloc_pd(gpucomm::verbs_gpu::host::pd_handle pd) override { inner_->dealloc_pd(pd); }
  gpucomm::verbs_gpu::host::umem_handle umem_reg(void* addr, std::size_t bytes, int access, int fd, std::uint64_t pages,
                                                 int* e) override {
    return inner_->umem_reg(addr, bytes, access, fd, pages, e);
  }
  void umem_dereg(gpucomm::verbs_gpu::host::umem_handle u) override { inner_->umem_dereg(u); }
  gpucomm::verbs_gpu::host::uar_handle alloc_uar(gpucomm::verbs_gpu::host::uar_type t, int* e) override {
    return inner_->alloc_uar(t, e);
  }
  void free_uar(gpucomm::verbs_gpu::host::uar_handle u) override { inner_->free_uar(u); }
  int query_eqn(std::uint32_t v, std::uint32_t* eqn) override { return inner_->query_eqn(v, eqn); }
  gpucomm::verbs_gpu::host::obj_handle obj_create(void const* in, std::size_t ib, void* out, std::size_t ob,
                                                  int* e) override {
    return inner_->obj_create(in, ib, out, ob, e);
  }
  int obj_modify(gpucomm::verbs_gpu::host::obj_handle o, void const* in, std::size_t ib, void* out,
                 std::size_t ob) override {
    return inner_->obj_modify(o, in, ib, out, ob);
  }
  int obj_destroy(gpucomm::verbs_gpu::host::obj_handle o) override { return inner_->obj_destroy(o); }
  gpucomm::verbs_gpu::host::mr_handle reg_mr(gpucomm::verbs_gpu::host::pd_handle pd, void* a, std::size_t b, int acc,
                                             int fd, std::uint64_t off, int* e) override {
    return inner_->reg_mr(pd, a, b, acc, fd, off, e);
  }
  void dereg_mr(gpucomm::verbs_gpu::host::mr_handle mr) override { inner_->dereg_mr(mr); }
  int resolve_ah(gpucomm::verbs_gpu::host::pd_handle pd, std::uint8_t port, std::uint8_t const (&dgid)[16], int sgid,
                 gpucomm::verbs_gpu::host::ah_info* o) override {
    return inner_->resolve_ah(pd, port, dgid, sgid, o);
  }
  int map_doorbell(gpucomm::verbs_gpu::host::uar_handle u, std::size_t bytes, void** d) override {
    return inner_->map_doorbell(u, bytes, d);
  }
  void unmap_doorbell(gpucomm::verbs_gpu::host::uar_handle u) override { inner_->unmap_doorbell(u); }
  std::vector<gpucomm::verbs_gpu::host::async_event> async_events() override { return inner_->async_events(); }
  bool native_verbs_qps() const noexcept override { return inner_->native_verbs_qps(); }
  int open_verbs(std::string const& n) override { return inner_->open_verbs(n); }
  gpucomm::verbs_gpu::host::verbs_qp_handle create_verbs_qp(gpucomm::verbs_gpu::host::pd_handle pd, std::uint32_t sq,
                                                            std::uint32_t cqes, int* e) override {
    return inner_->create_verbs_qp(pd, sq, cqes, e);
  }
  int modify_verbs_qp(gpucomm::verbs_gpu::host::verbs_qp_handle const& qp,
                      gpucomm::verbs_gpu::host::verbs_qp_step const& step) override {
    return inner_->modify_verbs_qp(qp, step);
  }
  int destroy_verbs_qp(gpucomm::verbs_gpu::host::verbs_qp_handle qp) override { return inner_->destroy_verbs_qp(qp); }

 private:
  backend* inner_;
};

}  // namespace verbs_test
