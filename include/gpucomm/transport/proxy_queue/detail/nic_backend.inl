#pragma once
// The bodies of nic_backend.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline nic_backend::nic_backend(std::vector<verbs_gpu::send_queue> const& queues, placement p, proxy_failures& failures)
    : at_(std::move(p)), failures_(&failures) {
  for (verbs_gpu::send_queue const& sq : queues) queues_.push_back(std::make_unique<queue>(sq));
}

inline bool nic_backend::takes(proxy_queue::command const& c) const {
  using proxy_queue::command_op;
  if (c.op == command_op::signal || c.op == command_op::atomic) return true;
  if (c.pe < 0 || c.pe >= at_.npes) return false;  // the copy engine refuses it
  return (at_.paths[static_cast<std::size_t>(c.pe)] & proxy_data_nic) != 0 &&
         (c.op == command_op::put || c.op == command_op::get || c.op == command_op::put_signal);
}

inline bool nic_backend::issue(proxy_queue::command const& c, std::uint64_t ticket) {
  using proxy_queue::command_op;
  if (c.pe < 0 || c.pe >= at_.npes) return refuse(c, ticket, "its target PE is outside the world");
  queue& q = *queues_[static_cast<std::size_t>(c.pe)];
  if (q.sq.has_error()) return refuse(c, ticket, "the queue to this PE is in error since an earlier failure");
  std::uint64_t last = 0;
  switch (c.op) {
    case command_op::put:
    case command_op::put_signal: {
      if (!reachable(c.dst, c.bytes)) return refuse(c, ticket, not_in_heap("destination"));
      std::uint32_t const lkey = local_lkey(c.src, c.bytes);
      if (c.bytes != 0 && lkey == heap_keys::none) return refuse(c, ticket, not_registered("source"));
      if (c.op == command_op::put_signal && !is_word(c.signal, 8))
        return refuse(c, ticket, "its signal word is not an aligned word of this PE's symmetric heap");
      if (c.bytes != 0 && !post_chunks(q, c, ticket, last, true, lkey)) return true;
      if (c.op == command_op::put_signal && !post_signal(q, c, ticket, last)) return true;
      if (c.op == command_op::put && c.bytes == 0) return true;
      break;
    }
    case command_op::get: {
      if (!reachable(c.src, c.bytes)) return refuse(c, ticket, not_in_heap("source"));
      std::uint32_t const lkey = local_lkey(c.dst, c.bytes);
      if (c.bytes != 0 && lkey == heap_keys::none) return refuse(c, ticket, not_registered("destination"));
      if (c.bytes == 0) return true;
      if (!post_chunks(q, c, ticket, last, false, lkey)) return true;
      break;
    }
    case command_op::signal:
      if (!is_word(c.signal, 8))
        return refuse(c, ticket, "its signal word is not an aligned word of this PE's symmetric heap");
      if (!post_signal(q, c, ticket, last)) return true;
      break;
    case command_op::atomic:
      if ((c.bytes != 4 && c.bytes != 8) || !is_word(c.dst, c.bytes))
        return refuse(c, ticket, "its target is not an aligned 4- or 8-byte word of this PE's symmetric heap");
      if (c.atomic_op > static_cast<std::uint8_t>(atomic_op::set))
        return refuse(c, ticket, "its atomic operation is unknown");
      if (c.src != 0 && !is_result_slot(c.src)) return refuse(c, ticket, "its result slot is not one of this PE's");
      if (!post_atomic(q, c, ticket, last)) return true;
      break;
    default:
      return refuse(c, ticket, "the NIC backend does not carry this operation");
  }
  if (q.pending.empty()) q.since = std::chrono::steady_clock::now();
  q.pending.push_back({last, ticket, c.op, c.bytes});
  return false;
}

inline void nic_backend::mark() {
  for (auto const& q : queues_) q->sq.announce_published();
}

inline bool nic_backend::busy() const {
  for (auto const& q : queues_)
    if (!q->pending.empty()) return true;
  return false;
}

inline bool nic_backend::in_slot(std::uint64_t address, std::uint64_t bytes) const {
  return address >= at_.slot && address - at_.slot <= at_.slot_bytes && bytes <= at_.slot_bytes - (address - at_.slot);
}

inline std::uint32_t nic_backend::block_lkey(std::uint64_t address, std::uint64_t bytes) const {
  if (!in_slot(address, bytes)) return heap_keys::none;
  std::uint64_t const first = address - at_.slot, last = first + (bytes == 0 ? 0 : bytes - 1);
  std::uint32_t const key = at_.keys.lkey_wire(first);
  // Different blocks are different regions with different keys.
  return at_.keys.lkey_wire(last) == key ? key : heap_keys::none;
}

inline bool nic_backend::reachable(std::uint64_t address, std::uint64_t bytes) const {
  return bytes == 0 ? in_slot(address, 0) : block_lkey(address, bytes) != heap_keys::none;
}

inline std::uint32_t nic_backend::local_lkey(std::uint64_t address, std::uint64_t bytes) const {
  std::uint32_t const key = block_lkey(address, bytes);
  if (key != heap_keys::none || !at_.buffers) return key;
  return at_.buffers->lkey_wire(address, bytes);
}

inline bool nic_backend::is_word(std::uint64_t address, std::uint64_t bytes) const {
  return address % bytes == 0 && reachable(address, bytes);
}

inline std::string nic_backend::not_in_heap(char const* what) {
  return std::string("its ") + what +
         " is not in this PE's symmetric heap, in one live allocation: that is all the NIC reaches";
}

inline std::string nic_backend::not_registered(char const* what) {
  return std::string("its ") + what +
         " is neither in this PE's symmetric heap, in one live allocation, nor in one registered buffer: that is all "
         "the NIC reaches (the device stages every other local buffer)";
}

inline verbs_gpu::remote_buf nic_backend::remote(int peer, std::uint64_t address) const {
  std::uint64_t const offset = address - at_.slot;
  return {at_.bases[static_cast<std::size_t>(peer)] + offset, at_.keys.rkey_wire(offset, peer), true};
}

inline bool nic_backend::is_result_slot(std::uint64_t address) const {
  auto const first = reinterpret_cast<std::uint64_t>(at_.results);
  return address >= first && address % 8 == 0 && (address - first) / 8 < at_.result_slots;
}

inline verbs_gpu::local_buf nic_backend::result_at(std::uint64_t address, std::uint32_t bytes) const {
  if (address == 0) address = reinterpret_cast<std::uint64_t>(at_.results + at_.result_slots);
  return {address, bytes, at_.results_lkey, false};
}

inline bool nic_backend::post_chunks(queue& q, proxy_queue::command const& c, std::uint64_t ticket, std::uint64_t& last,
                                     bool write, std::uint32_t lkey) {
  std::uint64_t const chunks = (c.bytes + max_message_bytes - 1) / max_message_bytes;
  std::uint64_t const per_batch = q.sq.depth() / 4;
  for (std::uint64_t first = 0; first < chunks; first += per_batch) {
    auto const n = static_cast<std::uint32_t>(chunks - first < per_batch ? chunks - first : per_batch);
    auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t i) {
      std::uint64_t const at = (first + i) * max_message_bytes;
      auto const len = static_cast<std::uint32_t>(c.bytes - at < max_message_bytes ? c.bytes - at : max_message_bytes);
      if (write) return verbs_gpu::build_rdma_write(s, {c.src + at, len, lkey, true}, remote(c.pe, c.dst + at));
      return verbs_gpu::build_rdma_read(s, {c.dst + at, len, lkey, true}, remote(c.pe, c.src + at));
    };
    if (!posted(
            q, c, ticket,
            q.sq.post(verbs_gpu::detail::one_thread{}, 1, n, build, verbs_gpu::post_flags::defer_doorbell, &last))) {
      return false;
    }
    last += n - 1;  // post() gave the batch's first WQE
  }
  return true;
}

inline bool nic_backend::post_signal(queue& q, proxy_queue::command const& c, std::uint64_t ticket,
                                     std::uint64_t& last) {
  auto const op = static_cast<signal_op>(c.signal_op);
  auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t) {
    return build_nic_signal(op, s, result_at(0, 8), remote(c.pe, c.signal), c.value);
  };
  return posted(q, c, ticket,
                q.sq.post(verbs_gpu::detail::one_thread{}, nic_signal_wqebbs(op), 1, build,
                          verbs_gpu::post_flags::fence | verbs_gpu::post_flags::defer_doorbell, &last));
}

inline bool nic_backend::post_atomic(queue& q, proxy_queue::command const& c, std::uint64_t ticket,
                                     std::uint64_t& last) {
  auto const op = static_cast<atomic_op>(c.atomic_op);
  auto const bytes = static_cast<std::uint32_t>(c.bytes);
  auto build = [&](verbs_gpu::wqe_slot const& s, std::uint32_t) {
    verbs_gpu::local_buf const result = result_at(c.src, bytes);
    verbs_gpu::remote_buf const to = remote(c.pe, c.dst);
    if (bytes == 8) return build_nic_atomic<std::uint64_t>(op, s, result, to, c.value, c.aux);
    return build_nic_atomic<std::uint32_t>(op, s, result, to, static_cast<std::uint32_t>(c.value),
                                           static_cast<std::uint32_t>(c.aux));
  };
  return posted(q, c, ticket,
                q.sq.post(verbs_gpu::detail::one_thread{}, nic_atomic_wqebbs(op, bytes), 1, build,
                          verbs_gpu::post_flags::defer_doorbell, &last));
}

inline bool nic_backend::posted(queue& q, proxy_queue::command const& c, std::uint64_t ticket, verbs_gpu::status st) {
  switch (st) {
    case verbs_gpu::status::ok:
      return true;
    case verbs_gpu::status::error:
      fail(c, ticket, "the queue to PE " + std::to_string(c.pe) + " went to error: " + error_text(q));
      return false;
    case verbs_gpu::status::timeout:
      fail(c, ticket, "the send queue to PE " + std::to_string(c.pe) + " had no room for 20 s");
      return false;
    default:
      fail(c, ticket, "the command does not fit the send queue");
      return false;
  }
}

inline void nic_backend::make_visible(pending_command const& p, int peer, bool& flushed) {
  using proxy_queue::command_op;
  if (flushed || !at_.flush_gpu_writes || (p.op != command_op::get && p.op != command_op::atomic)) return;
  flushed = true;
  if (std::string const why = at_.flush_gpu_writes(); !why.empty())
    failures_->record({at_.pe, peer, p.op, p.ticket, p.bytes, why});
}

inline std::string nic_backend::error_text(queue& q) {
  verbs_gpu::cq_error const e = q.sq.last_error();
  return std::string(e.wqe_opcode_str()) + " completed with " + e.opcode_str() + ", syndrome " + e.syndrome_str();
}

inline bool nic_backend::refuse(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why) {
  fail(c, ticket, "refused: " + why);
  return true;
}

inline void nic_backend::fail(proxy_queue::command const& c, std::uint64_t ticket, std::string const& why) {
  failures_->record({at_.pe, c.pe, c.op, ticket, c.bytes, why});
}

}  // namespace gpucomm::detail
