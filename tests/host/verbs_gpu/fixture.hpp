#pragma once
// Helpers shared by the verbs_gpu host tests: a host "group" of std::threads, a connected pair of
// QPs on one NIC model with registered host buffers, and the error-case posting step.
#include <catch2/catch.hpp>
#include <gpucomm/testing/nic_model/nic_model.hpp>
#include <gpucomm/verbs_gpu/send_queue.cuh>
#include <gpucomm/verbs_gpu/wqe.cuh>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace verbs_test {

namespace vg = gpucomm::verbs_gpu;
namespace vm = gpucomm::verbs_gpu::model;

/// A group of host threads with the members send_queue::post needs (num_threads, thread_rank,
/// sync, shfl), so the group-posting path runs on the host exactly as on the device.
struct team_state {
  explicit team_state(unsigned n) : bar(static_cast<std::ptrdiff_t>(n)), size(n) {}
  std::barrier<> bar;
  std::atomic<std::uint64_t> slot{0};
  unsigned size;
};
struct host_team {
  team_state* st;
  unsigned rank;
  unsigned num_threads() const { return st->size; }
  unsigned thread_rank() const { return rank; }
  void sync() const { st->bar.arrive_and_wait(); }
  template <class T>
  T shfl(T v, unsigned src) const {
    static_assert(sizeof(T) <= 8);
    if (rank == src) {
      std::uint64_t w = 0;
      std::memcpy(&w, &v, sizeof(T));
      st->slot.store(w);
    }
    sync();
    std::uint64_t const w = st->slot.load();
    sync();
    T out;
    std::memcpy(&out, &w, sizeof(T));
    return out;
  }
};

/// A registered host buffer.
struct host_buffer {
  std::vector<std::uint64_t> words;
  vm::memory_key key{};
  host_buffer(vm::nic& n, std::uint32_t pd, std::size_t n_words, std::uint32_t access = vm::all_access)
      : words(n_words, 0) {
    key = n.register_memory(pd, words.data(), n_words * 8, access);
  }
  std::uint64_t addr(std::size_t i = 0) const { return reinterpret_cast<std::uint64_t>(words.data() + i); }
  vg::local_buf local(std::size_t i, std::uint32_t bytes) const { return {addr(i), bytes, key.lkey}; }
  vg::remote_buf remote(std::size_t i) const { return {addr(i), key.rkey}; }
};

/// Two QPs (requester A, responder B) on one model, each in its own PD, connected as RC.
struct qp_pair {
  vm::nic& nic;
  std::uint32_t pd_a, pd_b;
  std::unique_ptr<vm::host_recv_cq> recv_b;
  std::unique_ptr<vm::host_queue_pair> a, b;
  qp_pair(vm::nic& n, std::uint32_t log_depth, vg::cq_mode mode, std::uint32_t log_ncqe = 4)
      : nic(n), pd_a(n.alloc_pd()), pd_b(n.alloc_pd()) {
    recv_b = std::make_unique<vm::host_recv_cq>(n, 6);
    a = std::make_unique<vm::host_queue_pair>(n, pd_a, log_depth, mode, log_ncqe);
    b = std::make_unique<vm::host_queue_pair>(n, pd_b, log_depth, mode, log_ncqe, recv_b->cqn());
    n.connect(a->qpn(), b->qpn());
  }
  vg::send_queue& sq() { return a->sq(); }
};

/// A builder functor from a lambda-like callable (host only).
template <class F>
struct builder {
  F f;
  std::uint32_t operator()(vg::wqe_slot const& s, std::uint32_t i) const { return f(s, i); }
};
template <class F>
builder<F> make_builder(F f) {
  return builder<F>{f};
}

/// Posts one WQE from the calling thread alone.
template <class F>
vg::status post_one(vg::send_queue const& sq, std::uint32_t wqebbs, F f, vg::post_flags flags = vg::post_flags::none,
                    std::uint64_t* index = nullptr) {
  return sq.post(vg::detail::one_thread{}, wqebbs, 1, make_builder(f), flags, index);
}

/// A faulty WQE a test posts, and the error CQE it expects for it.
struct error_case {
  char const* name;
  vg::cqe_syndrome syndrome;
  vg::opcode wqe_opcode;
};

/// Posts the faulty WQE `bad` with the doorbell deferred, then two good 8-byte writes from `src`
/// word 0 to `dst` words 2 and 3 (which ring it), so an error leaves two WQEs behind it to flush.
/// Returns the faulty WQE's index.
template <class F>
std::uint64_t post_bad_then_two_writes(vg::send_queue const& sq, F bad, host_buffer const& src,
                                       host_buffer const& dst) {
  std::uint64_t bad_idx = 0;
  REQUIRE(post_one(sq, 1, bad, vg::post_flags::defer_doorbell, &bad_idx) == vg::status::ok);
  for (std::size_t k = 0; k < 2; ++k) {
    REQUIRE(post_one(sq, 1, [&](vg::wqe_slot const& s, std::uint32_t) {
              return vg::build_rdma_write(s, src.local(0, 8), dst.remote(2 + k));
            }) == vg::status::ok);
  }
  return bad_idx;
}

}  // namespace verbs_test
