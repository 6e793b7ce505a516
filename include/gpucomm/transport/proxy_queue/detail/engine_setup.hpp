#pragma once
// ProxyQueue's engine backends in a world (proxy_network::engine): one network engine per local
// PE, connected to every PE's and given every PE's heap slot, with an engine_backend for the PE's
// ring. Host only; made by proxy_queue/host.hpp, collectively across the world's processes.
//
// Set-up, every step through the world's bootstrap (MPI, or a user's allgather; no launcher of
// the engine's own):
//   1. the linked engine (engine_hook.hpp; engine_not_linked when the program did not link
//      gpucomm::ucx: every process throws it, before any exchange);
//   2. how puts and gets move their bytes (proxy_engine_data): registered GPU memory where the
//      engine can register it, through the memory agents (a bounce through host memory) where
//      it cannot;
//   3. per local PE a memory agent (cuda_memory_agent on its GPU) and an engine (rank = PE,
//      size = npes);
//   4. every PE's address to every process, then each local engine's connect(), all local
//      engines at once (each waits for every peer's round trip, its own process's included);
//   5. each local PE's heap slot registered, (PE, base, bytes, key) to every process, imported.
// A PE's commands reach its engine peers through its engine backend, whose poll() the proxy
// thread runs on every pass (the engine serves its peers' requests inside it).
//
// Lifetime: the engines and agents outlive the backends (owned by the rings), which outlive the
// proxy threads' last pass. The local engines close all at once, as they connect: closing an
// endpoint waits (bounded) for the peer's answer, which a PE of this process gives only while its
// own engine closes.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "../../../error.hpp"
#include "../../../host/bootstrap.hpp"
#include "../../../host/detail/os_thread.hpp"
#include "../../engine/cuda_memory_agent.hpp"
#include "../../engine/engine_hook.hpp"
#include "../../engine/net_engine.hpp"
#include "../options.hpp"
#include "../settings.hpp"
#include "../state.hpp"
#include "backend.hpp"
#include "engine_backend.hpp"
#include "engine_link.hpp"
#include "failures.hpp"

namespace gpucomm::detail {

class proxy_engines final : public proxy_engines_base {
 public:
  /// Sets up every local PE's engine (above); throws gpucomm::error on failure.
  proxy_engines(engine_world const& w, proxy_engine_options const& options, proxy_failures& failures)
      : failures_(&failures) {
    int const first = w.locals.front().pe;
    std::string const who = "world::comm<ProxyQueue> (proxy_network::engine)";
    // The steps each process takes alone (its options, its engines) are agreed on before the first
    // exchange, and its registrations before the second: one process's error is every process's,
    // so none is left waiting in an exchange for one that gave up.
    any_bootstrap agree(callback_bootstrap{0, w.processes, w.allgather, [] {}});
    checked_on_every_rank(agree, who.c_str(), [&] {
      auto const make = engine::require_net_engine(who, first);
      auto const probe = engine::linked_net_engine_gpu_probe();
      data_ = proxy_engine_data_from(options.data, probe != nullptr && probe(), first);
      engine::net_engine_config config;
      config.size = w.npes;
      config.connect_timeout = proxy_engine_timeout_from(options.connect_timeout, "connect_timeout", first);
      config.op_timeout = proxy_engine_timeout_from(options.op_timeout, "op_timeout", first);
      config.data_through_agents = data_ == proxy_engine_data::agents;
      for (auto const& l : w.locals) {
        auto p = std::make_unique<per_pe>();
        p->pe = l.pe;
        if (w.make_agent)
          p->agent = w.make_agent(l.device);
        else
          p->agent = std::make_unique<engine::cuda_memory_agent>(l.device);
        config.rank = l.pe;
        config.agent = p->agent.get();
        p->engine = make(config);
        pes_.push_back(std::move(p));
      }
    });
    // Addresses: every process's (PE, bytes) records; every engine connects to all of them.
    std::vector<std::vector<std::byte>> addresses(static_cast<std::size_t>(w.npes));
    std::vector<record> mine;
    for (auto const& p : pes_) mine.push_back({p->pe, 0, 0, p->engine->address()});
    for (record& r : exchange(w, mine)) addresses.at(static_cast<std::size_t>(r.pe)) = std::move(r.bytes);
    for (int pe = 0; pe < w.npes; ++pe) {
      if (addresses[static_cast<std::size_t>(pe)].empty())
        throw error(who, first, "no process gave PE " + std::to_string(pe) + "'s engine address",
                    "every process of the world must set ProxyQueue up with the same options");
    }
    at_once([&](per_pe& p) { p.engine->connect(addresses); });
    // Heap slots: registered, then (PE, base, bytes, key) to every process.
    mine.clear();
    checked_on_every_rank(agree, who.c_str(), [&] {
      for (std::size_t i = 0; i < pes_.size(); ++i) {
        auto const& l = w.locals[i];
        auto key = pes_[i]->engine->register_memory(reinterpret_cast<void*>(l.slot), w.slot_bytes);
        mine.push_back({l.pe, l.slot, w.slot_bytes, std::move(key)});
      }
    });
    std::vector<record> const regions = exchange(w, mine);
    std::vector<std::uint64_t> bases(static_cast<std::size_t>(w.npes), 0);
    for (record const& r : regions) {
      bases.at(static_cast<std::size_t>(r.pe)) = r.base;
      for (auto& p : pes_) p->engine->import_region(r.pe, r.base, r.size, r.bytes);
    }
    for (std::size_t i = 0; i < pes_.size(); ++i) {
      auto const& l = w.locals[i];
      engine_backend::placement at;
      at.pe = l.pe;
      at.npes = w.npes;
      at.slot = l.slot;
      at.slot_bytes = w.slot_bytes;
      at.bases = bases;
      at.results = l.results;
      at.result_slots = l.result_slots;
      for (std::uint8_t path : l.paths) at.peers.push_back(static_cast<std::uint8_t>(path & proxy_data_nic));
      pes_[i]->at = std::move(at);
    }
  }

  proxy_engines(proxy_engines const&) = delete;
  proxy_engines& operator=(proxy_engines const&) = delete;

  ~proxy_engines() override {
    try {
      at_once([](per_pe& p) { p.engine.reset(); });
    } catch (...) {  // a thread the system refused: the engines left close one at a time below
    }
  }

  /// PE pe's engine backend, for its ring (once per PE).
  std::unique_ptr<proxy_backend> backend_for(int pe) override {
    for (auto& p : pes_) {
      if (p->pe == pe) return make_proxy_backend<engine_backend>(*p->engine, *p->agent, std::move(p->at), *failures_);
    }
    throw error("ProxyQueue", pe, "PE " + std::to_string(pe) + " has no engine in this process",
                "ask only for the PEs in local_pes()");
  }

  /// How the engines move puts' and gets' bytes.
  proxy_engine_data data() const noexcept override { return data_; }
  /// The engine's name (library and version), for messages.
  std::string name() const override { return pes_.empty() ? std::string() : pes_.front()->engine->name(); }

 private:
  struct per_pe {
    int pe = 0;
    std::unique_ptr<engine::memory_agent> agent;  // before engine: outlives it
    std::unique_ptr<engine::net_engine> engine;
    engine_backend::placement at;
  };

  /// A PE's bytes (an address, or a region's key with its range).
  struct record {
    int pe = 0;
    std::uint64_t base = 0;
    std::uint64_t size = 0;
    std::vector<std::byte> bytes;
  };
  struct record_head {
    std::int64_t pe;
    std::uint64_t base, size, bytes;
  };

  /// Every process's records, through the bootstrap: sizes first, then the records padded to the
  /// largest.
  static std::vector<record> exchange(engine_world const& w, std::vector<record> const& mine) {
    std::vector<std::byte> packed;
    for (record const& r : mine) {
      record_head const h{r.pe, r.base, r.size, r.bytes.size()};
      auto const at = packed.size();
      packed.resize(at + sizeof h + r.bytes.size());
      std::memcpy(packed.data() + at, &h, sizeof h);
      if (!r.bytes.empty()) std::memcpy(packed.data() + at + sizeof h, r.bytes.data(), r.bytes.size());
    }
    auto const n = static_cast<std::size_t>(w.processes);
    std::uint64_t const size = packed.size();
    std::vector<std::uint64_t> sizes(n);
    w.allgather(&size, sizes.data(), sizeof size);
    std::uint64_t largest = 0;
    for (auto s : sizes) largest = largest < s ? s : largest;
    packed.resize(largest);
    std::vector<std::byte> all(largest * n);
    if (largest != 0) w.allgather(packed.data(), all.data(), largest);
    std::vector<record> out;
    for (std::size_t p = 0; p < n; ++p) {
      std::byte const* at = all.data() + p * largest;
      std::byte const* const end = at + sizes[p];
      while (at + sizeof(record_head) <= end) {
        record_head h{};
        std::memcpy(&h, at, sizeof h);
        at += sizeof h;
        record r{static_cast<int>(h.pe), h.base, h.size, std::vector<std::byte>(at, at + h.bytes)};
        at += h.bytes;
        out.push_back(std::move(r));
      }
    }
    return out;
  }

  /// f(p) for every local PE's p at once, each on a thread of its own (one PE: on this thread):
  /// an engine progresses only its own worker, so a step that waits for an answer from a PE of
  /// this process (connect's round trip, close's handshake) ends only while that PE's engine runs
  /// the same step. Rethrows the first error once every thread has ended.
  template <class F>
  void at_once(F const& f) {
    if (pes_.size() == 1) {
      f(*pes_.front());
      return;
    }
    std::vector<std::exception_ptr> errors(pes_.size());
    {
      std::vector<os_thread> threads;  // joined when this scope ends, also on an error
      for (std::size_t i = 0; i < pes_.size(); ++i) {
        threads.emplace_back([&, i] {
          try {
            f(*pes_[i]);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        });
      }
    }
    for (auto const& e : errors)
      if (e) std::rethrow_exception(e);
  }

  proxy_failures* failures_;
  proxy_engine_data data_ = proxy_engine_data::agents;
  std::vector<std::unique_ptr<per_pe>> pes_;
};

}  // namespace gpucomm::detail
