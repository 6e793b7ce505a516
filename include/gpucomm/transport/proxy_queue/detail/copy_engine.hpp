#pragma once
// ProxyQueue's copy-engine backend: carries out one local PE's commands to the peers it reaches
// through the mapped heap (same host, same GPU included). Host only; run by a proxy thread.
//
// One stream per peer on the PE's GPU, so one PE's commands to a peer are carried out after the
// ones it posted before (up to the batching below), and commands to different peers overlap; or,
// where the streams would outnumber the GPU's hardware queues (host.hpp decides), one stream per PE
// for all its peers. A stream that shares a hardware queue with a kernel's stream waits behind
// that kernel, and a kernel that waits for the copy would then never end:
//   put         a copy (peer's dst <- src) on the peer's stream;
//   get         a copy (dst <- peer's src) on the peer's stream;
//   put_signal  the put, then cuStreamWriteValue64(peer's signal word, value) on the same stream:
//               the write's default memory barrier orders the copy's writes before it.
// Copies are gathered per stream while the proxy reads a batch of commands, and go out as one
// cudaMemcpyBatchAsync (one cudaMemcpyAsync when there is one): a CUDA call costs microseconds of
// the proxy's time, which would otherwise cap the command rate at a few hundred thousand per
// second. Gathered copies that continue one another (the next one's destination and source start
// where one before it ends; merge_copies.hpp) go as one copy, and bytes gathered twice from the
// same place (the same words put again before the first put completed) are copied once: the copy
// engine's cost per copy, not per byte, is what bounds many small puts to neighbouring words. The
// copies of one batch may run in any order among themselves, which the contract allows: puts to a
// PE are ordered only by fence and quiet, and ProxyQueue's fence is a quiet (device.cuh), so no two
// copies that must stay ordered are ever in flight together. Whatever must follow copies (a
// put_signal's signal write, the completion marker) is issued after the gathered copies go out, so
// stream order puts it after them. Addresses come as this PE's view of the symmetric heap; the
// peer's copy is `(peer - pe) * stride` bytes away in this process (host/detail/heap.hpp). A
// command whose heap range lies outside this PE's slot, whose local buffer (outside the heap) is
// not memory CUDA knows, whose PE is out of range, or whose operation this backend does not carry,
// is refused and recorded, never carried out: an address CUDA does not know would otherwise be
// copied as pageable host memory.
//
// Completion: after a batch of commands, one cuStreamWriteValue64 per stream that received work
// writes the batch's last ticket + 1 into that stream's word in mapped host memory (again after
// the copies, by the default memory barrier). The proxy polls those words: a ticket is complete
// once its stream's word is above it. A stream has at most one marker in flight: work sent while
// its last marker is still queued gets its own once that one has landed (poll()), so a backlog of
// copies runs with few markers between them (each waits for the copies before it to be
// visible) and the proxy spends fewer calls on them. A command sent to an idle stream is marked
// in its own pass; under a backlog its completion may be seen one marker later. A stream that
// reports an error (cudaStreamQuery) fails every ticket still on it, so a GPU never waits on a
// copy that will not finish.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cuda/atomic>

#include "../../../detail/fifo.hpp"
#include "../../../error.hpp"
#include "../../../host/detail/driver.hpp"
#include "../command.cuh"
#include "backend.hpp"
#include "failures.hpp"
#include "merge_copies.hpp"

namespace gpucomm::detail {

class copy_engine_backend {
 public:
  struct placement {
    int pe = 0;                   ///< the local PE whose commands this backend carries out
    int device = 0;               ///< its GPU
    int npes = 0;                 ///< PEs in the world
    char* heap = nullptr;         ///< PE 0's heap slot in this process (heap_layout::base)
    std::size_t stride = 0;       ///< bytes between PEs' slots
    bool stream_per_peer = true;  ///< one stream per peer, or one for all
  };

  copy_engine_backend(placement const& p, proxy_failures& failures);

  copy_engine_backend(copy_engine_backend const&) = delete;
  copy_engine_backend& operator=(copy_engine_backend const&) = delete;

  ~copy_engine_backend() { release(); }

  /// Carries out command `c` with ticket `ticket` (the proxy's thread, GPU current). Returns true
  /// when it is complete already: nothing to wait for, or refused or failed (and recorded).
  bool issue(proxy_queue::command const& c, std::uint64_t ticket);

  /// After a batch of issue(): the gathered copies, then one completion marker, on every stream
  /// that received work.
  void mark();

  /// Calls done(ticket) for every ticket whose copies have finished, or whose stream failed.
  template <class Done>
  void poll(Done&& done) {
    auto const now = std::chrono::steady_clock::now();
    for (; !failed_.empty(); failed_.pop_front()) done(failed_.front());
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      lane& l = lanes_[i];
      if (l.tickets.empty()) continue;
      // Acquire: the stream's write of the word comes after the copies (its memory barrier).
      std::uint64_t const below =
          cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*done_word(i)).load(cuda::memory_order_acquire);
      bool progressed = false;
      while (!l.tickets.empty() && l.tickets.front() < below) {
        done(l.tickets.front());
        l.tickets.pop_front();
        progressed = true;
      }
      if (marker_due(l, below)) {
        cudaSetDevice(at_.device);  // a pass that read nothing has not set it
        mark_lane(i);
      }
      if (progressed) {
        l.since = now;
      } else if (now - l.since > stall_check) {
        // Nothing finished for a while: ask the stream whether it failed.
        l.since = now;
        cudaError_t const rc = cudaStreamQuery(l.stream);
        if (rc != cudaSuccess && rc != cudaErrorNotReady) {
          fail_lane(i, std::string("the stream failed: ") + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
          for (; !failed_.empty(); failed_.pop_front()) done(failed_.front());
        } else if (rc == cudaSuccess) {
          // The stream is idle, so its last marker has been written: tickets still below it
          // mean a marker was never sent for them. Never expected; reported, not waited on.
          std::uint64_t const now_below = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*done_word(i))
                                              .load(cuda::memory_order_acquire);
          if (!l.tickets.empty() && l.tickets.front() >= now_below) {
            fail_lane(i, "the stream is idle but its completion word (" + std::to_string(now_below) +
                             ") is not above ticket " + std::to_string(l.tickets.front()) + " (last " +
                             std::to_string(l.tickets.back()) + ", unmarked " + std::to_string(l.unmarked) +
                             ", gathered " + std::to_string(l.gathered.size()) + ")");
            for (; !failed_.empty(); failed_.pop_front()) done(failed_.front());
          }
        }
      }
    }
  }

  /// Commands issued and not yet complete.
  bool busy() const;

 private:
  static constexpr std::size_t words_per_line = 8;  // each stream's word on its own cache line
  static constexpr auto stall_check = std::chrono::milliseconds(100);

  /// Copies gathered on one stream before they go out as one call: one pass's commands.
  static constexpr std::size_t max_gathered = commands_per_pass;

  struct lane {
    cudaStream_t stream = nullptr;
    fifo<std::uint64_t> tickets;  // sent on this stream, not yet complete, in order
    bool unmarked = false;        // work sent since the last marker
    std::uint64_t marked = 0;     // the value of the last marker sent (landed once the word has it)
    std::chrono::steady_clock::time_point since{};
    // Gathered copies, not yet sent: cudaMemcpyBatchAsync's operands, and each copy's ticket.
    std::vector<void*> dsts;
    std::vector<void const*> srcs;
    std::vector<std::size_t> sizes;
    std::vector<std::uint64_t> gathered;
    std::vector<copy_range> ranges;  // merge()'s scratch
    std::vector<std::size_t> open;   // merge_contiguous()'s scratch

    void gather(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes, std::uint64_t ticket);

    /// Joins the gathered copies that continue one another into one (merge_contiguous).
    void merge();
  };

  /// Whether lane `l` has work sent without a marker and its last marker has landed (its word
  /// holds `word`): then its next marker goes now, else once poll() sees the last one land.
  static bool marker_due(lane const& l, std::uint64_t word) {
    return l.unmarked && !l.tickets.empty() && word >= l.marked;
  }

  /// Sends lane `i`'s marker: its last ticket + 1, after the work sent before it (marker_due).
  void mark_lane(std::size_t i);

  /// Sends lane `i`'s gathered copies as one call; their tickets are then tracked (or, if the
  /// call failed, recorded as failed and completed by the next poll()). Returns whether it worked.
  bool send_gathered(std::size_t i);

  /// Waits for and destroys the streams, frees the completion words.
  void release() noexcept;

  std::uint64_t* done_word(std::size_t lane) const { return done_ + lane * words_per_line; }
  /// The peer lane `i` serves, or -1 when one lane serves them all.
  int peer_of_lane(std::size_t i) const { return at_.stream_per_peer ? static_cast<int>(i) : -1; }

  bool in_slot(std::uint64_t address, std::uint64_t bytes) const;

  /// Whether `address` lies in memory CUDA allocated or registered, which the copy engine reaches.
  static bool known_to_cuda(std::uint64_t address);

  static std::string cu_error_text(CUresult cu);

  bool refuse(proxy_queue::command const& c, std::uint64_t ticket, char const* why);

  bool fail(proxy_queue::command const& c, std::uint64_t ticket, char const* call, std::string const& why);

  /// Every ticket still on lane `i` fails (recorded once, with how many); poll() completes them.
  void fail_lane(std::size_t i, std::string const& what);

  placement at_;
  proxy_failures* failures_;
  std::uint64_t* done_ = nullptr;  // [peer * words_per_line]: mapped host memory
  std::vector<lane> lanes_;        // [peer]
  fifo<std::uint64_t> failed_;
};

}  // namespace gpucomm::detail

// The bodies of the functions above: host code, which the device pass (__CUDA_ARCH__ defined)
// has no use for, so only the host pass reads them.
#if !defined(__CUDA_ARCH__)
#include "copy_engine.inl"
#endif
