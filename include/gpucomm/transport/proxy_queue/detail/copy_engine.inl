#pragma once
// The bodies of copy_engine.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline copy_engine_backend::copy_engine_backend(placement const& p, proxy_failures& failures)
    : at_(p), failures_(&failures) {
  try {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(p.device), p.pe);
    std::size_t const lanes = p.stream_per_peer ? static_cast<std::size_t>(p.npes) : 1;
    GPUCOMM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&done_), lanes * words_per_line * sizeof(std::uint64_t),
                                     cudaHostAllocMapped | cudaHostAllocPortable),
                       p.pe);
    for (std::size_t i = 0; i < lanes * words_per_line; ++i) done_[i] = 0;
    lanes_.resize(lanes);
    for (auto& l : lanes_) GPUCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), p.pe);
  } catch (...) {
    release();  // what was made before the failing call
    throw;
  }
}

inline bool copy_engine_backend::issue(proxy_queue::command const& c, std::uint64_t ticket) {
  using proxy_queue::command_op;
  if (c.op == command_op::nop) return true;
  if (c.pe < 0 || c.pe >= at_.npes) return refuse(c, ticket, "its target PE is outside the world");
  std::size_t const lane_index = at_.stream_per_peer ? static_cast<std::size_t>(c.pe) : 0;
  lane& l = lanes_[lane_index];
  std::uint64_t const to_peer =
      static_cast<std::uint64_t>(static_cast<std::int64_t>(c.pe - at_.pe) * static_cast<std::int64_t>(at_.stride));
  switch (c.op) {
    case command_op::put:
    case command_op::put_signal:
      if (!in_slot(c.dst, c.bytes)) return refuse(c, ticket, "its destination is not in this PE's symmetric heap");
      if (c.op == command_op::put_signal && (!in_slot(c.signal, 8) || c.signal % 8 != 0))
        return refuse(c, ticket, "its signal word is not an aligned word of this PE's symmetric heap");
      if (c.bytes != 0 && !in_slot(c.src, c.bytes) && !known_to_cuda(c.src))
        return refuse(c, ticket, "its source is not memory CUDA knows (device, or pinned and mapped host memory)");
      if (c.bytes != 0) l.gather(c.dst + to_peer, c.src, c.bytes, ticket);
      if (c.op == command_op::put_signal) {
        // The data (and every copy gathered before it) first, then the signal, in stream order.
        if (!l.gathered.empty() && !send_gathered(lane_index)) {
          if (c.bytes != 0) return false;  // recorded with the batch; poll() completes its ticket
          return fail(c, ticket, "refused", "the copies before it failed");
        }
        CUresult const cu = driver().cuStreamWriteValue64(l.stream, static_cast<CUdeviceptr>(c.signal + to_peer),
                                                          c.value, CU_STREAM_WRITE_VALUE_DEFAULT);
        if (cu != CUDA_SUCCESS) return fail(c, ticket, "cuStreamWriteValue64", cu_error_text(cu));
        if (c.bytes != 0) l.tickets.pop_back();  // the put's entry becomes the whole command's, below
      } else if (c.bytes == 0) {
        return true;
      } else {
        if (l.gathered.size() >= max_gathered) send_gathered(lane_index);
        return false;  // tracked through the gathered copy
      }
      break;
    case command_op::get:
      if (!in_slot(c.src, c.bytes)) return refuse(c, ticket, "its source is not in this PE's symmetric heap");
      if (!in_slot(c.dst, c.bytes) && !known_to_cuda(c.dst))
        return refuse(c, ticket, "its destination is not memory CUDA knows (device, or pinned and mapped host memory)");
      if (c.bytes == 0) return true;
      l.gather(c.dst, c.src + to_peer, c.bytes, ticket);
      if (l.gathered.size() >= max_gathered) send_gathered(lane_index);
      return false;
    default:
      return refuse(c, ticket, "the copy-engine backend does not carry this operation (the GPU does it itself)");
  }
  // A put_signal, sent: tracked like a copy.
  if (l.tickets.empty()) l.since = std::chrono::steady_clock::now();
  l.tickets.push_back(ticket);
  l.unmarked = true;
  return false;
}

inline void copy_engine_backend::mark() {
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    lane& l = lanes_[i];
    if (!l.gathered.empty()) send_gathered(i);
    if (!l.unmarked) continue;
    // Relaxed: only whether the last marker landed is asked here; poll() acquires what it completes.
    std::uint64_t const word =
        cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*done_word(i)).load(cuda::memory_order_relaxed);
    if (marker_due(l, word)) mark_lane(i);
  }
}

inline void copy_engine_backend::mark_lane(std::size_t i) {
  lane& l = lanes_[i];
  l.unmarked = false;
  l.marked = l.tickets.back() + 1;
  CUresult const cu = driver().cuStreamWriteValue64(l.stream, reinterpret_cast<CUdeviceptr>(done_word(i)), l.marked,
                                                    CU_STREAM_WRITE_VALUE_DEFAULT);
  if (cu != CUDA_SUCCESS) {
    // Without its marker the batch's completion cannot be seen: wait for the stream instead.
    cudaError_t const rc = cudaStreamSynchronize(l.stream);
    std::string what = "cuStreamWriteValue64 (completion marker): " + cu_error_text(cu);
    if (rc != cudaSuccess) what += "; then cudaStreamSynchronize: " + std::string(cudaGetErrorName(rc));
    fail_lane(i, what);
    l.marked = 0;  // none in flight: the lane's next work is marked at once
  }
}

inline bool copy_engine_backend::busy() const {
  if (!failed_.empty()) return true;
  for (auto const& l : lanes_)
    if (!l.tickets.empty()) return true;
  return false;
}

inline void copy_engine_backend::lane::gather(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes,
                                              std::uint64_t ticket) {
  dsts.push_back(reinterpret_cast<void*>(dst));
  srcs.push_back(reinterpret_cast<void const*>(src));
  sizes.push_back(static_cast<std::size_t>(bytes));
  gathered.push_back(ticket);
}

inline void copy_engine_backend::lane::merge() {
  if (dsts.size() < 2) return;
  ranges.resize(dsts.size());
  for (std::size_t i = 0; i < ranges.size(); ++i)
    ranges[i] = {reinterpret_cast<std::uintptr_t>(dsts[i]), reinterpret_cast<std::uintptr_t>(srcs[i]), sizes[i]};
  std::size_t const n = merge_contiguous(ranges, open);
  dsts.resize(n);
  srcs.resize(n);
  sizes.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    dsts[i] = reinterpret_cast<void*>(ranges[i].dst);
    srcs[i] = reinterpret_cast<void const*>(ranges[i].src);
    sizes[i] = ranges[i].bytes;
  }
}

inline bool copy_engine_backend::send_gathered(std::size_t i) {
  lane& l = lanes_[i];
  cudaError_t rc = cudaSuccess;
  char const* call = "cudaMemcpyAsync";
  l.merge();
  if (l.dsts.size() == 1) {
    rc = cudaMemcpyAsync(l.dsts[0], l.srcs[0], l.sizes[0], cudaMemcpyDefault, l.stream);
  } else {
    call = "cudaMemcpyBatchAsync";
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // after the stream's earlier work
    std::size_t first = 0;
    rc = cudaMemcpyBatchAsync(l.dsts.data(), l.srcs.data(), l.sizes.data(), l.dsts.size(), &attributes, &first, 1,
                              l.stream);
  }
  bool const sent = rc == cudaSuccess;
  if (sent) {
    if (l.tickets.empty()) l.since = std::chrono::steady_clock::now();
    l.tickets.append(l.gathered.begin(), l.gathered.end());
    l.unmarked = true;
  } else {
    cudaGetLastError();  // a non-sticky error must not fail the proxy's next call
    std::uint64_t bytes = 0;
    for (std::size_t b : l.sizes) bytes += b;
    failures_->record({at_.pe, peer_of_lane(i), proxy_queue::command_op::nop, l.gathered.front(), bytes,
                       std::string(call) + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ") for " +
                           std::to_string(l.gathered.size()) + " commands from ticket " +
                           std::to_string(l.gathered.front())});
    failed_.append(l.gathered.begin(), l.gathered.end());
  }
  l.dsts.clear();
  l.srcs.clear();
  l.sizes.clear();
  l.gathered.clear();
  return sent;
}

inline void copy_engine_backend::release() noexcept {
  cudaSetDevice(at_.device);
  for (auto& l : lanes_) {
    if (l.stream != nullptr) {
      cudaStreamSynchronize(l.stream);
      cudaStreamDestroy(l.stream);
      l.stream = nullptr;
    }
  }
  if (done_ != nullptr) cudaFreeHost(done_);
  done_ = nullptr;
}

inline bool copy_engine_backend::in_slot(std::uint64_t address, std::uint64_t bytes) const {
  auto const begin = reinterpret_cast<std::uintptr_t>(at_.heap) + static_cast<std::uintptr_t>(at_.pe) * at_.stride;
  return address >= begin && address <= begin + at_.stride && bytes <= begin + at_.stride - address;
}

inline bool copy_engine_backend::known_to_cuda(std::uint64_t address) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, reinterpret_cast<void const*>(address)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type != cudaMemoryTypeUnregistered;
}

inline std::string copy_engine_backend::cu_error_text(CUresult cu) {
  char const* name = nullptr;
  driver().cuGetErrorName(cu, &name);
  return name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(cu));
}

inline bool copy_engine_backend::refuse(proxy_queue::command const& c, std::uint64_t ticket, char const* why) {
  return fail(c, ticket, "refused", why);
}

inline bool copy_engine_backend::fail(proxy_queue::command const& c, std::uint64_t ticket, char const* call,
                                      std::string const& why) {
  failures_->record({at_.pe, c.pe, c.op, ticket, c.bytes, std::string(call) + ": " + why});
  return true;
}

inline void copy_engine_backend::fail_lane(std::size_t i, std::string const& what) {
  lane& l = lanes_[i];
  if (l.tickets.empty()) return;
  failures_->record({at_.pe, peer_of_lane(i), proxy_queue::command_op::nop, l.tickets.front(), 0,
                     what + " (" + std::to_string(l.tickets.size()) + " commands on the stream)"});
  for (std::uint64_t t : l.tickets) failed_.push_back(t);
  l.tickets.clear();
}

}  // namespace gpucomm::detail
