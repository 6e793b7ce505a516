#pragma once
// The memory agent: how a network engine writes what peers send into this process's memory.
// Host only. The engine calls it from the thread that runs its progress() (the proxy thread), one
// call at a time, for every signal, atomic and put_signal a peer sends, and for the data of a
// put_signal; with net_engine_config::data_through_agents, for the data of every put and get too
// (read at the source, written at the destination). Puts and gets that the engine's library
// carries as RMA into registered memory do not pass through it.
//
// Contract, for one agent:
//   write(dst, src, n)   n bytes to this process's memory at dst;
//   read(dst, src, n)    n bytes of this process's memory at src into dst (host memory), as they
//                        are after every earlier write() (a put's source, a get's data served);
//   signal(w, op, v)     the 64-bit word w set to v or increased by v, ordered after every earlier
//                        write(): a reader that sees the new value (acquire) sees their data;
//   atomic(...)          a read-modify-write of a 4- or 8-byte word; returns the old value;
//   commit()             everything above is visible to the memory's readers (a GPU kernel
//                        included): the engine acknowledges to the peer only after it.
// Each returns an empty string on success, else what failed (the engine reports it to the peer
// as errc::remote_refused).
//
// Atomicity domain: the agent applies every atomic and signal the engine carries to this
// process's memory, serialised on one thread, so those words are atomic with respect to each
// other's updates through the agent only. A word that peers update through the engine must not
// also be updated by the GPU's or a NIC's atomics: the engine's agent is its atomicity domain,
// as the NIC is for words updated through a NIC (docs/guide/ibgda.md, "One atomicity domain per word";
// docs/guide/proxyqueue.md, "Atomicity domain").
//
// host_memory_agent below serves memory the CPU reaches (tests, host-resident buffers):
// std::memcpy and std::atomic_ref. The GPU's is cuda_memory_agent.hpp.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "../../host/detail/os_thread.hpp"
#include "../../ops.hpp"
#include "../../transport_concept.hpp"

namespace gpucomm::engine {

class memory_agent {
 public:
  virtual ~memory_agent() = default;
  virtual std::string write(void* dst, void const* src, std::size_t bytes) = 0;
  virtual std::string read(void* dst, void const* src, std::size_t bytes) = 0;
  virtual std::string signal(std::uint64_t* word, signal_op op, std::uint64_t value) = 0;
  /// `operand`: the value (compare_swap: the new value); `compare`: compare_swap's expected one.
  virtual std::string atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand, std::uint64_t compare,
                             std::uint64_t& old) = 0;
  virtual std::string commit() = 0;
};

namespace detail {
/// The read-modify-write `op` on `w` through std::atomic_ref (sequentially consistent); the old value.
template <class U>
U apply_atomic(U& w, atomic_op op, U operand, U compare) noexcept {
  std::atomic_ref<U> a(w);
  switch (op) {
    case atomic_op::fetch_add:
    case atomic_op::add:
      return a.fetch_add(operand);
    case atomic_op::fetch_and:
      return a.fetch_and(operand);
    case atomic_op::fetch_or:
      return a.fetch_or(operand);
    case atomic_op::fetch_xor:
      return a.fetch_xor(operand);
    case atomic_op::swap:
    case atomic_op::set:
      return a.exchange(operand);
    case atomic_op::compare_swap:
      a.compare_exchange_strong(compare, operand);
      return compare;  // the old value either way
    case atomic_op::fetch:
      return a.load();
  }
  return a.load();
}
}  // namespace detail

/// The agent for memory the CPU reaches. `write_delay` holds every write() back by that long
/// before it copies: a test hook that widens the window in which a reordered signal would be seen
/// before its data.
class host_memory_agent final : public memory_agent {
 public:
  explicit host_memory_agent(std::chrono::microseconds write_delay = {}) : delay_(write_delay) {}

  std::string write(void* dst, void const* src, std::size_t bytes) override;

  std::string read(void* dst, void const* src, std::size_t bytes) override;

  std::string signal(std::uint64_t* word, signal_op op, std::uint64_t value) override;

  std::string atomic(void* word, unsigned width, atomic_op op, std::uint64_t operand, std::uint64_t compare,
                     std::uint64_t& old) override;

  std::string commit() override { return {}; }  // every call above is visible once it returns

 private:
  std::chrono::microseconds delay_;
};

}  // namespace gpucomm::engine

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "detail/memory_agent.inl"
#endif
