#pragma once
// A transport written only against the contract (contract.cuh), for the tests: proof that
// the contract is enough. MinimalStore provides the primitives in their plainest form and nothing
// else: put and get copy with ordinary loads and stores (8 bytes at a time where source,
// destination and length allow, else bytes), signal and the integer atomics are CUDA atomics at
// system scope on the peer's word, and quiet is a system-scope fence in every thread of the group.
// It does not expose remote() and has no float add. put_signal, fence, barrier (on every team)
// and wait_until come from the contract. The op suite runs on it as gpucomm_gpu_tests_minimal
// (GPUCOMM_TEST_TRANSPORT=4).
//
// It reaches peers the way the heap lays them out (host/detail/heap.hpp): PE j's copy of a local
// symmetric address p is p + (j - me) * stride, valid wherever PE j's memory is mapped here, which
// its host half checks (PEs on one GPU, or GPUs with peer access).

#include <gpucomm/comm.cuh>
#include <gpucomm/host/world.hpp>

#include <cuda/atomic>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpucomm::test {

struct MinimalStore {
  static constexpr char const* name = "MinimalStore";
  static constexpr capabilities caps{.put = true, .get = true, .signal = true, .atomics = true, .quiet = true};

  struct device_state {
    std::size_t stride = 0;  // bytes between PEs' heap slots
  };

  class host_state {
   public:
    explicit host_state(world& w) : world_(&w) {}
    device_state device_state_for(int pe) const {
      for (int to = 0; to < world_->npes(); ++to) {
        if (!world_->can_load_store(pe, to))
          throw error("world::comm<MinimalStore>", pe, "PE " + std::to_string(to) + " is not mapped here",
                      "run MinimalStore only where every PE reaches every other by load/store");
      }
      return {world_->heap_layout().stride};
    }

   private:
    world* world_;
  };

#if defined(__CUDACC__)
  template <group G, class T>
  __device__ static void put(comm<MinimalStore> const& c, G const& g, sym_ptr<T> dst, T const* src, std::size_t n,
                             int pe, bool blocking) {
    copy(g, at(c, dst.get(), pe), src, n * sizeof(T));
    if (blocking) group_sync(g);
  }

  template <group G, class T>
  __device__ static void get(comm<MinimalStore> const& c, G const& g, T* dst, sym_ptr<T const> src, std::size_t n,
                             int pe, bool blocking) {
    copy(g, dst, at(c, src.get(), pe), n * sizeof(T));
    if (blocking) group_sync(g);
  }

  template <group G>
  __device__ static void signal(comm<MinimalStore> const& c, G const& g, sym_ptr<signal_t> sig, signal_t value,
                                signal_op op, int pe) {
    // The sync orders the group's earlier writes before the leader's release (CTA scope); the
    // release at system scope is cumulative over them.
    group_sync(g);
    if (is_leader(g)) {
      cuda::atomic_ref<signal_t, cuda::thread_scope_system> word(*at(c, sig.get(), pe));
      if (op == signal_op::set)
        word.store(value, cuda::memory_order_release);
      else
        word.fetch_add(value, cuda::memory_order_release);
    }
  }

  template <atomic_op Op, class T>
  __device__ static T atomic(comm<MinimalStore> const& c, sym_ptr<T> target, T value, T compare, int pe) {
    cuda::atomic_ref<T, cuda::thread_scope_system> word(*at(c, target.get(), pe));
    constexpr auto relaxed = cuda::memory_order_relaxed;
    switch (Op) {
      case atomic_op::fetch_add:
      case atomic_op::add:
        return word.fetch_add(value, relaxed);
      case atomic_op::fetch_and:
        return word.fetch_and(value, relaxed);
      case atomic_op::fetch_or:
        return word.fetch_or(value, relaxed);
      case atomic_op::fetch_xor:
        return word.fetch_xor(value, relaxed);
      case atomic_op::swap:
        return word.exchange(value, relaxed);
      case atomic_op::compare_swap:
        word.compare_exchange_strong(compare, value, relaxed, relaxed);
        return compare;  // the old value either way
      case atomic_op::fetch:
        return word.load(relaxed);
      case atomic_op::set:
        word.store(value, relaxed);
        return T{};
    }
    return T{};
  }

  template <group G>
  __device__ static void quiet(comm<MinimalStore> const&, G const& g) {
    // Each thread's own fence at system scope orders its earlier stores before anything it does
    // later; the syncs make every thread's fence happen before any thread's next operation.
    group_sync(g);
    cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
    group_sync(g);
  }

 private:
  /// PE pe's copy of the local symmetric address p.
  template <class T>
  __device__ static T* at(comm<MinimalStore> const& c, T* p, int pe) {
    auto const distance = static_cast<std::ptrdiff_t>(pe - c.my_pe()) * static_cast<std::ptrdiff_t>(c.state().stride);
    return reinterpret_cast<T*>(reinterpret_cast<char*>(const_cast<std::remove_const_t<T>*>(p)) + distance);
  }

  template <group G>
  __device__ static void copy(G const& g, void* dst, void const* src, std::size_t bytes) {
    unsigned const rank = group_rank(g), size = group_size(g);
    auto const d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
    if (((d | s | bytes) & 7u) == 0) {
      auto* to = static_cast<std::uint64_t*>(dst);
      auto const* from = static_cast<std::uint64_t const*>(src);
      for (std::size_t i = rank; i < bytes / 8; i += size) to[i] = from[i];
    } else {
      auto* to = static_cast<unsigned char*>(dst);
      auto const* from = static_cast<unsigned char const*>(src);
      for (std::size_t i = rank; i < bytes; i += size) to[i] = from[i];
    }
  }
#endif  // __CUDACC__
};

static_assert(transport<MinimalStore> && host_transport<MinimalStore>);

}  // namespace gpucomm::test
