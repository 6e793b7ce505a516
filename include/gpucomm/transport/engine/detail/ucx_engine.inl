#pragma once
// The bodies of ucx_engine's set-up (round trip, registration), its puts and gets (RMA, or
// through the agents), its progress (events from UCX's callbacks, requests from peers answered
// through the memory agent, endpoint flushes) and its failure handling; included at the end of
// ../ucx_engine.hpp, which states the contract.

namespace gpucomm::engine {

inline void ucx_engine::connect(std::vector<std::vector<std::byte>> const& addresses) {
  if (addresses.size() != peers_.size())
    fail_setup("ucx_engine::connect",
               std::to_string(addresses.size()) + " addresses for " + std::to_string(peers_.size()) + " ranks");
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    peer_state& p = *peers_[r];
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<ucp_address_t const*>(addresses[r].data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &on_ep_error;
    ep.err_handler.arg = &p;
    if (ucs_status_t const s = ucp_ep_create(worker_, &ep, &p.ep); s != UCS_OK) {
      p.ep = nullptr;
      throw error("ucx_engine::connect", config_.rank,
                  "rank " + std::to_string(r) + "'s address gives no endpoint: ucp_ep_create failed with " +
                      ucs_status_string(s) + " (" + errc_name(errc::peer_unreachable) + ")",
                  reach_hint);
    }
  }
  // A round trip to every rank: an address nobody answers at is reported here, not at the first
  // operation. Every rank also waits for every other's hello, so that none leaves connect() (and
  // stops serving) while a peer still waits for its answer.
  std::vector<std::uint64_t> hellos;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    request_header h{};
    h.kind = kind_hello;
    posted const sent = send_request(static_cast<int>(r), h, nullptr, 0, hello_token);
    if (!sent.ok()) {
      throw error("ucx_engine::connect", config_.rank,
                  "the hello to rank " + std::to_string(r) + " failed: " + sent.what + " (" +
                      errc_name(errc::peer_unreachable) + ")",
                  reach_hint);
    }
    hellos.push_back(last_serial_);
  }
  auto const until = std::chrono::steady_clock::now() + config_.connect_timeout;
  std::vector<completion> done;
  for (;;) {
    progress(done);
    bool all = hellos_from_ == static_cast<int>(peers_.size()) && replies_out_ == 0;
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (peers_[r]->failed) {
        throw error("ucx_engine::connect", config_.rank,
                    "rank " + std::to_string(r) + " did not answer: " + *peers_[r]->failed + " (" +
                        errc_name(errc::peer_unreachable) + ")",
                    reach_hint);
      }
      all = all && ops_.count(hellos[r]) == 0;
    }
    if (all) break;
    if (std::chrono::steady_clock::now() > until) {
      std::size_t r = 0;
      while (r < peers_.size() && ops_.count(hellos[r]) == 0) ++r;
      std::string const who = r < peers_.size() ? "rank " + std::to_string(r) + " did not answer"
                                                : std::to_string(peers_.size() - hellos_from_) + " ranks sent no hello";
      throw error("ucx_engine::connect", config_.rank,
                  who + " within " + std::to_string(config_.connect_timeout.count()) + " ms (" +
                      errc_name(errc::peer_unreachable) + ")",
                  reach_hint);
    }
  }
  for (completion const& c : done) {
    if (c.code != errc::ok) throw error("ucx_engine::connect", config_.rank, "a hello failed: " + c.what, reach_hint);
  }
}

inline std::vector<std::byte> ucx_engine::register_memory(void* base, std::size_t bytes) {
  if (config_.data_through_agents) {  // the agents move the bytes: nothing for UCX to map
    local_regions_.push_back({reinterpret_cast<std::uint64_t>(base), bytes, nullptr});
    return {};
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = base;
  mp.length = bytes;
  mp.memory_type = memory_type_of(base);  // a UCX without CUDA refuses GPU memory here, by name
  ucp_mem_h memh = nullptr;
  check_setup(ucp_mem_map(context_, &mp, &memh), "ucp_mem_map");
  void* packed = nullptr;
  std::size_t n = 0;
  if (ucs_status_t const s = ucp_rkey_pack(context_, memh, &packed, &n); s != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    check_setup(s, "ucp_rkey_pack");
  }
  std::vector<std::byte> key(n);
  std::memcpy(key.data(), packed, n);
  ucp_rkey_buffer_release(packed);
  local_regions_.push_back({reinterpret_cast<std::uint64_t>(base), bytes, memh});
  return key;
}

inline void ucx_engine::import_region(int peer, std::uint64_t base, std::size_t bytes, std::span<std::byte const> key) {
  if (peer < 0 || peer >= config_.size || peers_[static_cast<std::size_t>(peer)]->ep == nullptr)
    fail_setup("ucx_engine::import_region", "rank " + std::to_string(peer) + " is not connected");
  ucp_rkey_h rkey = nullptr;
  if (!config_.data_through_agents) {
    check_setup(ucp_ep_rkey_unpack(peers_[static_cast<std::size_t>(peer)]->ep, key.data(), &rkey),
                "ucp_ep_rkey_unpack");
  }
  peers_[static_cast<std::size_t>(peer)]->regions.push_back({base, bytes, rkey});
}

inline posted ucx_engine::put(int peer, void const* src, std::uint64_t dst, std::size_t bytes, token t) {
  ucp_rkey_h rkey = nullptr;
  if (posted p = check_rma(peer, dst, bytes, rkey, "destination"); !p.ok()) return p;
  if (bytes == 0) return finish_now(t);
  if (config_.data_through_agents) {
    std::vector<std::byte> payload(bytes);
    if (std::string const why = config_.agent->read(payload.data(), src, bytes); !why.empty())
      return {errc::refused, "reading the source: " + why};
    request_header h{};
    h.kind = kind_put_data;
    h.dst = dst;
    h.bytes = bytes;
    return send_request(peer, h, std::move(payload), t);
  }
  std::uint64_t const serial = add_op(peer, kind_put, t);
  peer_state& ps = *peers_[static_cast<std::size_t>(peer)];
  void* const r = ucp_put_nbx(ps.ep, src, bytes, dst, rkey, with_local(callback_param(serial, event_put), src, bytes));
  if (posted p = started(r, serial, "ucp_put_nbx"); !p.ok()) return p;
  ps.unflushed.push_back(serial);
  return {};
}

inline posted ucx_engine::get(int peer, void* dst, std::uint64_t src, std::size_t bytes, token t) {
  ucp_rkey_h rkey = nullptr;
  if (posted p = check_rma(peer, src, bytes, rkey, "source"); !p.ok()) return p;
  if (bytes == 0) return finish_now(t);
  if (config_.data_through_agents) {
    request_header h{};
    h.kind = kind_get_data;
    h.dst = src;  // the peer's address to read
    h.bytes = bytes;
    posted p = send_request(peer, h, {}, t);
    if (p.ok()) ops_[last_serial_].get_dst = dst;
    return p;
  }
  std::uint64_t const serial = add_op(peer, kind_get, t);
  void* const r = ucp_get_nbx(peers_[static_cast<std::size_t>(peer)]->ep, dst, bytes, src, rkey,
                              with_local(callback_param(serial, event_get), dst, bytes));
  if (posted p = started(r, serial, "ucp_get_nbx"); !p.ok()) return p;
  if (r == nullptr) complete(serial, errc::ok, {});
  return {};
}

inline ucs_status_t ucx_engine::on_request(void* arg, void const* header, std::size_t header_bytes, void* data,
                                           std::size_t bytes, ucp_am_recv_param_t const* param) {
  auto* self = static_cast<ucx_engine*>(arg);
  if (header_bytes != sizeof(request_header)) return UCS_OK;  // not ours: dropped
  auto in = std::make_unique<inbound>();
  std::memcpy(&in->h, header, sizeof(request_header));
  bool const rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  in->data.resize(bytes);
  if (rndv) {
    in->rndv = data;
  } else {
    if (bytes != 0) std::memcpy(in->data.data(), data, bytes);
    in->ready = true;
  }
  if (in->h.kind == kind_hello) ++self->hellos_from_;
  self->inbox_.emplace(++self->last_inbound_, std::move(in));
  return rndv ? UCS_INPROGRESS : UCS_OK;
}

inline ucs_status_t ucx_engine::on_reply(void* arg, void const* header, std::size_t header_bytes, void* data,
                                         std::size_t bytes, ucp_am_recv_param_t const* param) {
  auto* self = static_cast<ucx_engine*>(arg);
  if (header_bytes != sizeof(reply_header)) return UCS_OK;
  reply_header h;
  std::memcpy(&h, header, sizeof h);
  auto const it = self->ops_.find(h.serial);
  if (it == self->ops_.end()) return UCS_OK;  // failed already
  op& o = it->second;
  o.fetched = h.fetched;
  bool const rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (h.code != 0) {
    o.code = static_cast<errc>(h.code);
    o.what =
        rndv ? std::string("the peer's refusal could not be read") : std::string(static_cast<char const*>(data), bytes);
  } else if (o.kind == kind_get_data) {  // the bytes of a get
    if (bytes != o.header.bytes) {
      o.code = errc::engine_failed;
      o.what = "the reply carries " + std::to_string(bytes) + " bytes, not the " + std::to_string(o.header.bytes) +
               " asked for";
    } else if (rndv) {
      o.reply_rndv = data;
      self->events_.push_back({h.serial, event_reply_rndv, UCS_OK});
      return UCS_INPROGRESS;
    } else {
      o.payload.assign(static_cast<std::byte const*>(data), static_cast<std::byte const*>(data) + bytes);
    }
  }
  self->events_.push_back({h.serial, event_replied, UCS_OK});
  return UCS_OK;
}

inline void ucx_engine::start_reply_receive(std::uint64_t serial, op& o) {
  void* const desc = o.reply_rndv;
  o.reply_rndv = nullptr;
  std::size_t const bytes = o.header.bytes;
  auto* ctx = new callback_ctx{this, serial, event_reply_data, std::make_unique<std::byte[]>(bytes)};
  std::byte* const into = ctx->reply.get();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &on_recv;
  p.user_data = ctx;
  void* const r = ucp_am_recv_data_nbx(worker_, desc, into, bytes, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) return;  // on_recv moves the bytes into the operation
  if (UCS_PTR_IS_ERR(r)) {
    o.code = errc::engine_failed;
    o.what = std::string("ucp_am_recv_data_nbx (a get's reply) failed with ") + ucs_status_string(UCS_PTR_STATUS(r));
  } else {
    o.payload.assign(into, into + bytes);  // received at once
  }
  delete ctx;
  replied(serial, o);
}

inline void ucx_engine::replied(std::uint64_t serial, op& o) {
  if (o.kind == kind_get_data && o.code == errc::ok) {
    std::string why = config_.agent->write(o.get_dst, o.payload.data(), o.payload.size());
    if (why.empty()) why = config_.agent->commit();
    if (!why.empty()) {
      o.code = errc::engine_failed;
      o.what = "writing the get's bytes: " + why;
    }
  }
  o.replied = true;
  if (o.sent) complete(serial, o.code, o.what);
}

inline void ucx_engine::handle_events() {
  for (auto const& [peer, status] : failed_now_) {
    fail_peer(peer, errc::peer_failed, std::string("UCX reported ") + ucs_status_string(status) + " on the endpoint");
  }
  failed_now_.clear();
  std::vector<event> events;
  events.swap(events_);
  for (event const& e : events) {
    if (e.kind == event_ep_flush) {
      peer_state& p = *peers_[e.serial];
      p.flushing = false;
      for (std::uint64_t s : p.in_flush) put_flushed(s, e.status);
      p.in_flush.clear();
      continue;
    }
    if (e.kind == event_recv) {
      if (auto it = inbox_.find(e.serial); it != inbox_.end()) {
        it->second->ready = true;
        if (e.status != UCS_OK) it->second->h.kind = kind_lost;  // answered with an error
      }
      continue;
    }
    if (e.kind == event_reply_sent) continue;
    auto const it = ops_.find(e.serial);
    if (it == ops_.end()) continue;  // failed already
    op& o = it->second;
    if (e.status != UCS_OK && o.code == errc::ok) {
      o.code = is_peer_error(e.status) ? errc::peer_failed : errc::engine_failed;
      o.what = std::string("UCX completed it with ") + ucs_status_string(e.status);
    }
    if (e.kind == event_get) complete(e.serial, o.code, o.what);
    if (e.kind == event_reply_rndv) start_reply_receive(e.serial, o);
    // An active message completes once sent and answered (or failed); a put with its endpoint flush.
    if (e.kind == event_replied || e.kind == event_reply_data) {
      replied(e.serial, o);
    } else if (e.kind == event_send) {
      o.sent = true;
      if (o.replied || o.code != errc::ok) complete(e.serial, o.code, o.what);
    }
  }
}

inline void ucx_engine::put_flushed(std::uint64_t serial, ucs_status_t status) {
  auto const it = ops_.find(serial);
  if (it == ops_.end()) return;
  op& o = it->second;
  if (status != UCS_OK && o.code == errc::ok) {
    o.code = is_peer_error(status) ? errc::peer_failed : errc::engine_failed;
    o.what = std::string("the endpoint flush completed with ") + ucs_status_string(status);
  }
  complete(serial, o.code, o.what);
}

inline void ucx_engine::start_ep_flush(peer_state& p) {
  if (p.flushing || p.unflushed.empty() || p.failed) return;
  p.in_flush.swap(p.unflushed);
  p.unflushed.clear();
  void* const r = ucp_ep_flush_nbx(p.ep, callback_param(static_cast<std::uint64_t>(p.index), event_ep_flush));
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete pending_ctx_;
    pending_ctx_ = nullptr;
    ucs_status_t const s = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
    for (std::uint64_t serial : p.in_flush) put_flushed(serial, s);
    p.in_flush.clear();
    return;
  }
  pending_ctx_ = nullptr;
  p.flushing = true;
}

inline void ucx_engine::finish_flushes(peer_state& p) {
  while (!p.flushes.empty() && (p.outstanding.empty() || *p.outstanding.begin() > p.flushes.front())) {
    std::uint64_t const serial = p.flushes.front();
    p.flushes.pop_front();
    auto const it = ops_.find(serial);
    if (it != ops_.end()) complete(serial, p.failed ? errc::peer_failed : errc::ok, p.failed.value_or(""));
  }
}

inline void ucx_engine::serve_inbox() {
  for (auto it = inbox_.begin(); it != inbox_.end();) {
    inbound& in = *it->second;
    if (in.rndv != nullptr) {
      void* const desc = in.rndv;
      in.rndv = nullptr;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = &on_recv;
      auto* ctx = new callback_ctx{this, it->first, event_recv, nullptr};
      p.user_data = ctx;
      void* const r = ucp_am_recv_data_nbx(worker_, desc, in.data.data(), in.data.size(), &p);
      if (r == nullptr || UCS_PTR_IS_ERR(r)) {
        delete ctx;
        in.ready = true;
        if (UCS_PTR_IS_ERR(r)) in.h.kind = kind_lost;
      }
    }
    if (!in.ready) {
      ++it;
      continue;
    }
    answer(in);
    it = inbox_.erase(it);
  }
}

inline void ucx_engine::answer(inbound const& in) {
  request_header const& h = in.h;
  reply_header r{};
  r.serial = h.serial;
  std::string why;
  std::vector<std::byte> data;  // a get's bytes, the reply's payload
  switch (h.kind) {
    case kind_hello:
      break;
    case kind_signal:
    case kind_put_signal:
      if (h.kind == kind_put_signal && !in_local_region(h.dst, h.bytes)) {
        why = "the destination [" + hex(h.dst) + ", +" + std::to_string(h.bytes) + ") is not in memory rank " +
              std::to_string(config_.rank) + " registered";
      } else if (h.word % 8 != 0 || !in_local_region(h.word, 8)) {
        why = "the signal word " + hex(h.word) + " is not an aligned word of memory rank " +
              std::to_string(config_.rank) + " registered";
      } else if (h.op > static_cast<std::uint8_t>(signal_op::add)) {
        why = "signal operation " + std::to_string(h.op) + " is unknown";
      } else {
        if (h.kind == kind_put_signal && h.bytes != 0)
          why = config_.agent->write(reinterpret_cast<void*>(h.dst), in.data.data(), h.bytes);
        if (why.empty())
          why = config_.agent->signal(reinterpret_cast<std::uint64_t*>(h.word), static_cast<signal_op>(h.op), h.value);
        if (why.empty()) why = config_.agent->commit();
      }
      break;
    case kind_atomic:
      if ((h.width != 4 && h.width != 8) || h.word % h.width != 0 || !in_local_region(h.word, h.width)) {
        why = "the atomic's word " + hex(h.word) + " is not an aligned " + std::to_string(h.width) +
              "-byte word of memory rank " + std::to_string(config_.rank) + " registered";
      } else if (h.op > static_cast<std::uint8_t>(atomic_op::set)) {
        why = "atomic operation " + std::to_string(h.op) + " is unknown";
      } else {
        why = config_.agent->atomic(reinterpret_cast<void*>(h.word), h.width, static_cast<atomic_op>(h.op), h.value,
                                    h.compare, r.fetched);
        if (why.empty()) why = config_.agent->commit();
      }
      break;
    case kind_put_data:
    case kind_get_data:
      if (!in_local_region(h.dst, h.bytes)) {
        why = std::string("the ") + (h.kind == kind_put_data ? "destination" : "source") + " [" + hex(h.dst) + ", +" +
              std::to_string(h.bytes) + ") is not in memory rank " + std::to_string(config_.rank) + " registered";
      } else if (h.kind == kind_put_data) {
        why = config_.agent->write(reinterpret_cast<void*>(h.dst), in.data.data(), h.bytes);
        if (why.empty()) why = config_.agent->commit();
      } else {
        data.resize(h.bytes);
        why = config_.agent->read(data.data(), reinterpret_cast<void const*>(h.dst), h.bytes);
      }
      break;
    default:
      why = "its payload could not be received";
      break;
  }
  if (!why.empty()) {
    r.code = static_cast<std::int32_t>(errc::remote_refused);
    why = "rank " + std::to_string(config_.rank) + " refused it: " + why;
    data.clear();
  }
  send_reply(h.from, r, why, std::move(data));
}

inline void ucx_engine::send_reply(int to, reply_header r, std::string const& why, std::vector<std::byte> data) {
  if (to < 0 || to >= config_.size) return;
  peer_state& p = *peers_[static_cast<std::size_t>(to)];
  if (p.ep == nullptr || p.failed) return;  // nobody to answer
  // The payload: the reason's text when refused, else a get's bytes (or nothing).
  std::size_t const n = why.empty() ? data.size() : why.size();
  void const* const payload = why.empty() ? static_cast<void const*>(data.data()) : why.data();
  r.what_bytes = static_cast<std::uint32_t>(why.size());
  auto buf = std::make_unique<std::byte[]>(sizeof r + n);
  std::memcpy(buf.get(), &r, sizeof r);
  if (n != 0) std::memcpy(buf.get() + sizeof r, payload, n);
  ucp_request_param_t p2{};
  p2.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p2.cb.send = &on_send;
  auto* ctx = new callback_ctx{this, 0, event_reply_sent, std::move(buf)};
  p2.user_data = ctx;
  std::byte* const at = ctx->reply.get();
  void* const req = ucp_am_send_nbx(p.ep, am_reply, at, sizeof r, at + sizeof r, n, &p2);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    delete ctx;  // sent at once, or the peer is gone (its error callback reports it)
    return;
  }
  ++replies_out_;
}

inline void ucx_engine::complete(std::uint64_t serial, errc code, std::string what) {
  auto const it = ops_.find(serial);
  if (it == ops_.end()) return;
  op const& o = it->second;
  if (o.id != hello_token || code != errc::ok) {
    ready_.push_back({o.id, code, code == errc::ok ? o.fetched : 0, std::move(what)});
  }
  forget(serial);
}

inline void ucx_engine::forget(std::uint64_t serial) {
  auto const it = ops_.find(serial);
  if (it == ops_.end()) return;
  peers_[static_cast<std::size_t>(it->second.peer)]->outstanding.erase(serial);
  ops_.erase(it);
}

inline void ucx_engine::fail_peer(int peer, errc code, std::string const& why) {
  peer_state& p = *peers_[static_cast<std::size_t>(peer)];
  if (p.failed) return;
  p.failed = why;
  std::vector<std::uint64_t> open;
  for (auto const& [serial, o] : ops_)
    if (o.peer == peer) open.push_back(serial);
  for (std::uint64_t serial : open) complete(serial, code, "rank " + std::to_string(peer) + " failed: " + why);
  p.unflushed.clear();
  p.in_flush.clear();
  p.flushes.clear();
  // UCX wants a key destroyed after the operations that use it are flushed and before its
  // endpoint goes; neither can happen in that order for a dead peer, so its keys stay allocated
  // (unused) until the process ends.
  for (auto& r : p.regions)
    if (r.rkey != nullptr) abandoned_keys_.push_back(r.rkey);
  p.regions.clear();
  if (p.ep != nullptr) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* const r = ucp_ep_close_nbx(p.ep, &rp);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
    p.ep = nullptr;
  }
}

inline void ucx_engine::check_timeouts() {
  auto const now = std::chrono::steady_clock::now();
  if (now - last_timeout_check_ < std::chrono::milliseconds(100)) return;
  last_timeout_check_ = now;
  std::vector<int> late;
  for (auto const& [serial, o] : ops_)
    if (now - o.since > config_.op_timeout) late.push_back(o.peer);
  for (int peer : late) {
    fail_peer(peer, errc::timed_out,
              "no completion within " + std::to_string(config_.op_timeout.count()) + " ms (op_timeout)");
  }
}
}  // namespace gpucomm::engine
