#pragma once
// The network engine (net_engine.hpp) on UCX's UCP API: RMA for puts and gets, active messages
// for what the target's memory agent applies. Host only; needs UCX (Debian 12: libucx-dev 1.13)
// and is compiled only in programs that link the CMake target gpucomm::ucx, whose registration
// unit installs make_ucx_engine behind engine/engine_hook.hpp. UCX picks its transports from the
// environment (UCX_TLS, UCX_NET_DEVICES: docs/guide/across_nodes.md).
//
// How each operation travels (to `peer`, whose regions were imported with their packed rkeys):
//   put         ucp_put_nbx into the peer's registered memory; the engine then flushes the
//               endpoint (ucp_ep_flush_nbx, one flush for every put issued since the last one)
//               and the put completes with that flush: its data is in the peer's memory;
//   get         ucp_get_nbx; completes with the request;
//   signal, put_signal, atomic
//               an active message (header: the operation; payload: a put_signal's data, eager or
//               rendezvous as UCX chooses) that the peer's engine, inside its progress(), checks
//               against its registered memory and applies through its memory agent (data, then
//               signal, then commit) before it answers with a reply message (an error, or an
//               atomic's old value); the operation completes when the reply is here and its own
//               send request has completed. Rendezvous payloads are received into a buffer and
//               written by the agent: the agent writes every byte a put_signal carries, which is
//               also how data reaches memory UCX cannot register (GPU memory on a UCX without
//               CUDA support).
// With net_engine_config::data_through_agents (memory UCX cannot register: GPU memory on a UCX
// without CUDA), puts and gets are active messages too, and register_memory maps nothing:
//   put         this process's agent reads the source into the operation's buffer (host memory),
//               which travels as the payload; the peer's agent writes it and commits, then replies;
//   put_signal  its data read by this process's agent the same way (UCX never reads the source);
//   get         a request; the peer's agent reads the source and the reply carries the bytes
//               (eager, or rendezvous into the operation's buffer), which this process's agent
//               writes to the destination and commits before the get completes.
// Peer failure: every endpoint uses UCP_ERR_HANDLING_MODE_PEER with an error callback; a peer
// whose connection breaks (its process killed: the kernel resets its sockets) is marked failed at
// the next progress() after UCX reports it, its endpoint is closed by force, and its operations
// complete with errc::peer_failed. An operation older than op_timeout fails its peer with
// errc::timed_out, which bounds the report when no error comes at all (a partitioned network).
// Threading: the worker is UCS_THREAD_MODE_SINGLE: set-up on one thread, then every call from the
// proxy thread.

#include <cuda_runtime_api.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../error.hpp"
#include "memory_agent.hpp"
#include "net_engine.hpp"

namespace gpucomm::engine {

class ucx_engine final : public net_engine {
 public:
  explicit ucx_engine(net_engine_config const& config) : config_(config) {
    if (config_.agent == nullptr) fail_setup("ucx_engine", "the configuration names no memory agent");
    if (config_.size < 1 || config_.rank < 0 || config_.rank >= config_.size)
      fail_setup("ucx_engine", "rank " + std::to_string(config_.rank) + " of " + std::to_string(config_.size));
    ucp_config_t* cfg = nullptr;
    check_setup(ucp_config_read(nullptr, nullptr, &cfg), "ucp_config_read");
    // UCX registers the whole CUDA allocation around a range it is given by default, and finds
    // none around the heap's (mapped by the driver's virtual memory calls: an empty range, which
    // ucp_mem_map refuses). Registering just the range given works for every allocation. A
    // setting from the environment wins; a UCX that has no such setting (before 1.14) is left as is.
    if (std::getenv("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES") == nullptr)
      ucp_config_modify(cfg, "MEMTYPE_REG_WHOLE_ALLOC_TYPES", "");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    ucs_status_t const st = ucp_init(&params, cfg, &context_);
    ucp_config_release(cfg);
    check_setup(st, "ucp_init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucs_status_t const s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) {
      ucp_cleanup(context_);
      check_setup(s, "ucp_worker_create");
    }
    for (unsigned id : {am_request, am_reply}) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.cb = id == am_request ? &on_request : &on_reply;
      hp.arg = this;
      if (ucs_status_t const s = ucp_worker_set_am_recv_handler(worker_, &hp); s != UCS_OK) {
        ucp_worker_destroy(worker_);
        ucp_cleanup(context_);
        check_setup(s, "ucp_worker_set_am_recv_handler");
      }
    }
    peers_.resize(static_cast<std::size_t>(config_.size));
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      peers_[i] = std::make_unique<peer_state>();
      peers_[i]->owner = this;
      peers_[i]->index = static_cast<int>(i);
    }
  }

  ucx_engine(ucx_engine const&) = delete;
  ucx_engine& operator=(ucx_engine const&) = delete;

  ~ucx_engine() override {
    for (auto& p : peers_) {
      for (auto& r : p->regions)
        if (r.rkey != nullptr) ucp_rkey_destroy(r.rkey);
      p->regions.clear();
    }
    std::vector<void*> closing;
    for (auto& p : peers_) {
      if (p->ep == nullptr) continue;
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = p->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      void* const r = ucp_ep_close_nbx(p->ep, &rp);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
      p->ep = nullptr;
    }
    // A peer that is gone answers no close: bounded, then the requests are released regardless.
    auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (void* r : closing) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
        ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
    for (auto& m : local_regions_)
      if (m.memh != nullptr) ucp_mem_unmap(context_, m.memh);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  std::string name() const override { return std::string("UCX ") + ucp_get_version_string(); }

  std::vector<std::byte> address() const override {
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    check_setup(ucp_worker_get_address(worker_, &a, &n), "ucp_worker_get_address");
    std::vector<std::byte> out(n);
    std::memcpy(out.data(), a, n);
    ucp_worker_release_address(worker_, a);
    return out;
  }

  void connect(std::vector<std::vector<std::byte>> const& addresses) override;

  std::vector<std::byte> register_memory(void* base, std::size_t bytes) override;

  void import_region(int peer, std::uint64_t base, std::size_t bytes, std::span<std::byte const> key) override;

  posted put(int peer, void const* src, std::uint64_t dst, std::size_t bytes, token t) override;

  posted get(int peer, void* dst, std::uint64_t src, std::size_t bytes, token t) override;

  posted signal(int peer, std::uint64_t word, signal_op op, std::uint64_t value, token t) override {
    request_header h{};
    h.kind = kind_signal;
    h.word = word;
    h.op = static_cast<std::uint8_t>(op);
    h.value = value;
    return send_request(peer, h, nullptr, 0, t);
  }

  posted put_signal(int peer, void const* src, std::uint64_t dst, std::size_t bytes, std::uint64_t word, signal_op op,
                    std::uint64_t value, token t) override {
    request_header h{};
    h.kind = kind_put_signal;
    h.dst = dst;
    h.bytes = bytes;
    h.word = word;
    h.op = static_cast<std::uint8_t>(op);
    h.value = value;
    if (config_.data_through_agents && bytes != 0) {
      // As a put's: the source may be memory only the agent reaches (GPU memory, which UCX
      // without CUDA would read as host memory: a fault, or a send() that fails with EFAULT).
      std::vector<std::byte> payload(bytes);
      if (std::string const why = config_.agent->read(payload.data(), src, bytes); !why.empty())
        return {errc::refused, "reading the source: " + why};
      return send_request(peer, h, std::move(payload), t);
    }
    return send_request(peer, h, src, bytes, t);
  }

  posted atomic(int peer, std::uint64_t word, unsigned width, atomic_op op, std::uint64_t operand,
                std::uint64_t compare, token t) override {
    if (width != 4 && width != 8) return {errc::refused, "an atomic of " + std::to_string(width) + " bytes"};
    request_header h{};
    h.kind = kind_atomic;
    h.word = word;
    h.width = static_cast<std::uint8_t>(width);
    h.op = static_cast<std::uint8_t>(op);
    h.value = operand;
    h.compare = compare;
    return send_request(peer, h, nullptr, 0, t);
  }

  posted flush(int peer, token t) override {
    if (posted p = check_peer(peer); !p.ok()) return p;
    std::uint64_t const serial = add_op(peer, kind_flush, t);
    peers_[static_cast<std::size_t>(peer)]->outstanding.erase(serial);  // a flush waits, it is not waited for
    peers_[static_cast<std::size_t>(peer)]->flushes.push_back(serial);
    return {};
  }

  void progress(std::vector<completion>& done) override {
    ucp_worker_progress(worker_);
    handle_events();
    serve_inbox();
    for (auto& p : peers_) {
      start_ep_flush(*p);
      finish_flushes(*p);
    }
    check_timeouts();
    done.insert(done.end(), std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
    ready_.clear();
  }

  bool busy() const override { return !ops_.empty() || !inbox_.empty() || !ready_.empty() || replies_out_ != 0; }

  std::optional<std::string> peer_failure(int peer) const override {
    if (peer < 0 || peer >= config_.size) return "rank " + std::to_string(peer) + " is out of range";
    return peers_[static_cast<std::size_t>(peer)]->failed;
  }

 private:
  static constexpr unsigned am_request = 0x67;  // ids of the engine's active messages
  static constexpr unsigned am_reply = 0x68;
  static constexpr token hello_token = ~token{0};
  static constexpr char const* reach_hint =
      "check that every rank can reach every other over the network UCX uses (UCX_TLS, UCX_NET_DEVICES; "
      "docs/guide/across_nodes.md) and that all ranks called connect()";

  enum : std::uint8_t {
    kind_put,
    kind_get,
    kind_signal,
    kind_put_signal,
    kind_atomic,
    kind_flush,
    kind_hello,
    kind_lost,
    kind_put_data,  // data_through_agents: a put's bytes as the payload
    kind_get_data   // data_through_agents: a get, its bytes in the reply
  };
  enum : std::uint8_t {
    event_put,
    event_get,
    event_send,
    event_replied,
    event_recv,
    event_reply_sent,
    event_ep_flush,
    event_reply_rndv,  // a reply whose payload comes by rendezvous: its receive is to start
    event_reply_data   // that receive finished
  };

  /// What an active-message request carries besides a put_signal's data.
  struct request_header {
    std::uint64_t serial = 0;  // the sender's operation, echoed in the reply
    std::uint64_t dst = 0, bytes = 0, word = 0, value = 0, compare = 0;
    std::int32_t from = 0;
    std::uint8_t kind = 0, op = 0, width = 0, pad = 0;
  };
  struct reply_header {
    std::uint64_t serial = 0;
    std::uint64_t fetched = 0;
    std::int32_t code = 0;
    std::uint32_t what_bytes = 0;  // the reason's text follows as the payload
  };
  static_assert(sizeof(request_header) == 56 && sizeof(reply_header) == 24);

  struct remote_region {
    std::uint64_t base = 0, bytes = 0;
    ucp_rkey_h rkey = nullptr;
  };
  struct local_region {
    std::uint64_t base = 0, bytes = 0;
    ucp_mem_h memh = nullptr;
  };
  struct peer_state {
    ucx_engine* owner = nullptr;
    int index = 0;
    ucp_ep_h ep = nullptr;
    std::vector<remote_region> regions;
    std::optional<std::string> failed;
    std::set<std::uint64_t> outstanding;   // serials of its operations (flushes aside), oldest first
    std::vector<std::uint64_t> unflushed;  // puts issued since the last endpoint flush started
    std::vector<std::uint64_t> in_flush;   // puts the endpoint flush in progress covers
    bool flushing = false;
    std::deque<std::uint64_t> flushes;  // flush operations, in order
  };
  struct op {
    token id = 0;
    int peer = 0;
    std::uint8_t kind = 0;
    std::chrono::steady_clock::time_point since;
    bool sent = false, replied = false;  // active messages: both before it completes
    errc code = errc::ok;
    std::string what;
    std::uint64_t fetched = 0;
    request_header header;           // an active message's header, alive until its send completes
    std::vector<std::byte> payload;  // data_through_agents: a put's bytes (until sent), a get's (once replied)
    void* get_dst = nullptr;         // data_through_agents: where a get's bytes go
    void* reply_rndv = nullptr;      // a rendezvous reply's descriptor, until its receive starts
  };
  /// A request from a peer, received and not yet applied.
  struct inbound {
    request_header h;
    std::vector<std::byte> data;
    void* rndv = nullptr;  // the rendezvous descriptor, until its receive starts
    bool ready = false;
  };
  /// What a UCX callback passes back: which operation or request, and what happened.
  struct callback_ctx {
    ucx_engine* engine = nullptr;
    std::uint64_t serial = 0;
    std::uint8_t event = 0;
    std::unique_ptr<std::byte[]> reply;  // a reply's header and text, alive until it is sent
  };
  struct event {
    std::uint64_t serial = 0;
    std::uint8_t kind = 0;
    ucs_status_t status = UCS_OK;
  };

  [[noreturn]] void fail_setup(std::string const& call, std::string const& what) const {
    throw error(call, config_.rank, what + " (" + errc_name(errc::engine_failed) + ")");
  }
  void check_setup(ucs_status_t s, char const* call) const {
    if (s != UCS_OK) fail_setup(call, std::string("failed with ") + ucs_status_string(s));
  }

  posted check_peer(int peer) const {
    if (peer < 0 || peer >= config_.size)
      return {errc::refused, "rank " + std::to_string(peer) + " is outside 0.." + std::to_string(config_.size - 1)};
    peer_state const& p = *peers_[static_cast<std::size_t>(peer)];
    if (p.failed) return {errc::peer_failed, "rank " + std::to_string(peer) + " failed earlier: " + *p.failed};
    if (p.ep == nullptr) return {errc::refused, "rank " + std::to_string(peer) + " is not connected"};
    return {};
  }
  posted check_rma(int peer, std::uint64_t address, std::size_t bytes, ucp_rkey_h& rkey, char const* what) const {
    if (posted p = check_peer(peer); !p.ok()) return p;
    for (remote_region const& r : peers_[static_cast<std::size_t>(peer)]->regions) {
      if (address >= r.base && address - r.base <= r.bytes && bytes <= r.bytes - (address - r.base)) {
        rkey = r.rkey;
        return {};
      }
    }
    return {errc::refused, std::string("the ") + what + " [" + hex(address) + ", +" + std::to_string(bytes) +
                               ") is not in memory rank " + std::to_string(peer) + " registered"};
  }
  local_region const* local_region_of(std::uint64_t address, std::uint64_t bytes) const {
    for (local_region const& r : local_regions_)
      if (address >= r.base && address - r.base <= r.bytes && bytes <= r.bytes - (address - r.base)) return &r;
    return nullptr;
  }
  bool in_local_region(std::uint64_t address, std::uint64_t bytes) const {
    return local_region_of(address, bytes) != nullptr;
  }
  /// Memory CUDA knows as its device's (or managed) is UCX's CUDA memory; anything else is host
  /// memory, including every address of a process without a usable GPU.
  static ucs_memory_type_t memory_type_of(void const* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it for the program's next CUDA call
      return UCS_MEMORY_TYPE_HOST;
    }
    if (a.type == cudaMemoryTypeDevice) return UCS_MEMORY_TYPE_CUDA;
    if (a.type == cudaMemoryTypeManaged) return UCS_MEMORY_TYPE_CUDA_MANAGED;
    return UCS_MEMORY_TYPE_HOST;
  }
  /// Tells UCX, in the parameters callback_param() just made, what an RMA's local buffer is: its
  /// memory handle where it lies in memory registered here, else its memory type. Left to guess,
  /// UCX takes GPU memory it has not seen allocated (the heap's, mapped by the driver's virtual
  /// memory calls) for host memory and reads it as such.
  ucp_request_param_t const* with_local(ucp_request_param_t const* param, void const* buffer, std::size_t bytes) {
    if (local_region const* r = local_region_of(reinterpret_cast<std::uint64_t>(buffer), bytes);
        r != nullptr && r->memh != nullptr) {
      param_.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param_.memh = r->memh;
    } else {
      param_.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param_.memory_type = memory_type_of(buffer);
    }
    return param;
  }
  static std::string hex(std::uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
  }

  std::uint64_t add_op(int peer, std::uint8_t kind, token t) {
    std::uint64_t const serial = ++last_serial_;
    op& o = ops_[serial];
    o.id = t;
    o.peer = peer;
    o.kind = kind;
    o.since = std::chrono::steady_clock::now();
    peers_[static_cast<std::size_t>(peer)]->outstanding.insert(serial);
    return serial;
  }
  /// An operation that has nothing to move: complete at the next progress().
  posted finish_now(token t) {
    ready_.push_back({t, errc::ok, 0, {}});
    return {};
  }

  ucp_request_param_t const* callback_param(std::uint64_t serial, std::uint8_t ev) {
    param_ = ucp_request_param_t{};
    param_.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param_.cb.send = &on_send;
    pending_ctx_ = new callback_ctx{this, serial, ev, nullptr};
    param_.user_data = pending_ctx_;
    return &param_;
  }
  /// After a call given callback_param(): the request's fate. An error removes the operation
  /// (it was never accepted); no request means it completed at once and no callback will come.
  posted started(void* r, std::uint64_t serial, char const* call) {
    if (r == nullptr || UCS_PTR_IS_ERR(r)) delete pending_ctx_;
    pending_ctx_ = nullptr;
    if (!UCS_PTR_IS_ERR(r)) return {};
    ucs_status_t const s = UCS_PTR_STATUS(r);
    int const peer = ops_[serial].peer;
    forget(serial);
    return {is_peer_error(s) ? errc::peer_failed : errc::engine_failed,
            std::string(call) + " to rank " + std::to_string(peer) + " failed with " + ucs_status_string(s)};
  }
  static bool is_peer_error(ucs_status_t s) {
    return s == UCS_ERR_CONNECTION_RESET || s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_UNREACHABLE ||
           s == UCS_ERR_CANCELED || s == UCS_ERR_REJECTED || s == UCS_ERR_TIMED_OUT;
  }

  posted send_request(int peer, request_header h, void const* data, std::size_t bytes, token t) {
    return send_request(peer, h, data, bytes, {}, t);
  }
  /// The same with a payload the operation keeps until it is sent.
  posted send_request(int peer, request_header h, std::vector<std::byte> owned, token t) {
    std::size_t const bytes = owned.size();
    return send_request(peer, h, nullptr, bytes, std::move(owned), t);
  }
  posted send_request(int peer, request_header h, void const* data, std::size_t bytes, std::vector<std::byte> owned,
                      token t) {
    if (posted p = check_peer(peer); !p.ok()) return p;
    std::uint64_t const serial = add_op(peer, h.kind, t);
    op& o = ops_[serial];
    o.header = h;
    o.header.serial = serial;
    o.header.from = config_.rank;
    if (!owned.empty()) {
      o.payload = std::move(owned);
      data = o.payload.data();
    }
    void* const r = ucp_am_send_nbx(peers_[static_cast<std::size_t>(peer)]->ep, am_request, &o.header,
                                    sizeof(request_header), data, bytes, callback_param(serial, event_send));
    if (posted p = started(r, serial, "ucp_am_send_nbx"); !p.ok()) return p;
    if (r == nullptr) o.sent = true;
    return {};
  }

  static void on_send(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<callback_ctx*>(user_data);
    ctx->engine->events_.push_back({ctx->serial, ctx->event, status});
    if (ctx->event == event_reply_sent) --ctx->engine->replies_out_;
    delete ctx;
    ucp_request_free(request);
  }
  static void on_recv(void* request, ucs_status_t status, std::size_t, void* user_data) {
    auto* ctx = static_cast<callback_ctx*>(user_data);
    if (ctx->event == event_reply_data) {  // a get's bytes, into its operation if it is still open
      if (auto const it = ctx->engine->ops_.find(ctx->serial); it != ctx->engine->ops_.end() && status == UCS_OK)
        it->second.payload.assign(ctx->reply.get(), ctx->reply.get() + it->second.header.bytes);
    }
    ctx->engine->events_.push_back({ctx->serial, ctx->event, status});
    delete ctx;
    ucp_request_free(request);
  }
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* p = static_cast<peer_state*>(arg);
    if (!p->failed) p->owner->failed_now_.push_back({p->index, status});
  }

  static ucs_status_t on_request(void* arg, void const* header, std::size_t header_bytes, void* data, std::size_t bytes,
                                 ucp_am_recv_param_t const* param);
  static ucs_status_t on_reply(void* arg, void const* header, std::size_t header_bytes, void* data, std::size_t bytes,
                               ucp_am_recv_param_t const*);

  void handle_events();

  void put_flushed(std::uint64_t serial, ucs_status_t status);

  void start_ep_flush(peer_state& p);

  void finish_flushes(peer_state& p);

  /// Applies ready requests (agent: data, signal, atomic; commit), answers each; starts the
  /// receives of rendezvous payloads.
  void serve_inbox();

  void answer(inbound const& in);

  void send_reply(int to, reply_header r, std::string const& why, std::vector<std::byte> data = {});

  /// Starts receiving a rendezvous reply's payload (a get's bytes) for operation o.
  void start_reply_receive(std::uint64_t serial, op& o);

  /// A reply arrived for operation o (its payload in o.payload for a get): a get's bytes written
  /// by the agent; then it completes once its request was sent too.
  void replied(std::uint64_t serial, op& o);

  void complete(std::uint64_t serial, errc code, std::string what);
  void forget(std::uint64_t serial);

  /// Marks `peer` failed, closes its endpoint by force and fails everything still open to it.
  void fail_peer(int peer, errc code, std::string const& why);

  /// Every 100 ms: a peer with an operation older than op_timeout is failed.
  void check_timeouts();

  net_engine_config config_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<std::unique_ptr<peer_state>> peers_;  // [rank]; stable addresses: the error callback's argument
  std::vector<local_region> local_regions_;
  std::vector<ucp_rkey_h> abandoned_keys_;     // a failed peer's keys (fail_peer)
  std::unordered_map<std::uint64_t, op> ops_;  // by serial; element addresses stay put (active-message headers)
  std::map<std::uint64_t, std::unique_ptr<inbound>> inbox_;  // by arrival
  std::vector<event> events_;                                // from callbacks, handled after the progress call
  std::vector<std::pair<int, ucs_status_t>> failed_now_;     // from the error callback
  std::vector<completion> ready_;
  ucp_request_param_t param_{};
  callback_ctx* pending_ctx_ = nullptr;
  std::uint64_t last_serial_ = 0, last_inbound_ = 0;
  int hellos_from_ = 0;
  int replies_out_ = 0;
  std::chrono::steady_clock::time_point last_timeout_check_{};
};

/// The factory gpucomm::ucx's registration unit installs (engine_hook.hpp).
inline std::unique_ptr<net_engine> make_ucx_engine(net_engine_config const& config) {
  return std::make_unique<ucx_engine>(config);
}

}  // namespace gpucomm::engine

#include "detail/ucx_engine.inl"
