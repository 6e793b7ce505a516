#pragma once
// The bodies of host.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

template <class World>
proxy_queue_host_of<World>::proxy_queue_host_of(World& w, proxy_options const& options) : world_(&w) {
  int const first = w.local_pes().front();
  log_depth_ = proxy_log_depth_from(options.log_depth, first);
  int const cpu = proxy_cpu_from(options.cpu, first);
  proxy_threads const threads = proxy_threads_from(options.threads, first);
  proxy_backends const backends = proxy_backends_from(options.backends, first);
  proxy_network const network = proxy_network_from(options.network, first);
  network_ = network;
  issue_delay_ = std::chrono::microseconds(options.issue_delay_us);
  store_path_bytes_ = proxy_store_path_bytes_from(options.store_path_bytes, first);
  paths_ = choose_paths(w, backends);
  // The NIC set-up is linked in, or every process says so before any exchange.
  proxy_nic_factory const make_nic =
      !paths_.empty() && network != proxy_network::engine
          ? require_nic_setup<proxy_nic_factory>("world::comm<ProxyQueue> (proxy_network::nic)", first)
          : nullptr;
  // The copy engines serve the peers the heap maps: a copy queued behind a kernel that waits for
  // it would never run, so the GPUs' hardware queues must be widened (collective).
  if (backends != proxy_backends::nic) w.require_hardware_queues("world::comm<ProxyQueue>");
  for (int pe : w.local_pes()) locals_.push_back(make_local(pe));
  if (!paths_.empty()) {
    for (auto& l : locals_) make_device_tables(*l);
    if (network == proxy_network::engine) {
      set_up_engines(options);
    } else {
      set_up_nic(make_nic, options);
    }
    for (registered_buffer const& b : w.registered_buffers()) {
      if (w.is_local(b.pe)) on_register_buffer(b);
    }
  }
  try {
    if (threads == proxy_threads::per_pe) {
      for (std::size_t i = 0; i < locals_.size(); ++i) {
        threads_.push_back(std::make_unique<proxy_thread>(std::vector<proxy_ring*>{&locals_[i]->ring},
                                                          cpu < 0 ? -1 : cpu + static_cast<int>(i)));
      }
    } else {
      std::vector<proxy_ring*> rings;
      for (auto& l : locals_) rings.push_back(&l->ring);
      threads_.push_back(std::make_unique<proxy_thread>(std::move(rings), cpu));
    }
  } catch (...) {
    // A thread that could not start (or be pinned): the NIC model already serves, and reads the
    // queues and registered memory that go with nic_ and locals_, so it stops first, as in the
    // destructor.
    threads_.clear();
    if (nic_) nic_->stop();
    throw;
  }
}

template <class World>
proxy_queue_host_of<World>::~proxy_queue_host_of() {
  current_device_guard const keep;
  for (int pe : world_->local_pes()) {
    cudaSetDevice(world_->device(pe));
    cudaStreamSynchronize(world_->stream(pe));
  }
  std::string const left = drain(std::chrono::seconds(10));
  if (!left.empty()) std::fprintf(stderr, "gpucomm: ProxyQueue teardown: %s\n", left.c_str());
  if (world_->one_process_per_gpu())
    teardown_barrier([this] { world_->bootstrap().barrier(); }, failures_, world_->local_pes().front());
  threads_.clear();
  if (nic_) nic_->stop();  // the model, before the queues and registered memory it reads go
  std::uint64_t count = 0;
  if (auto const f = failures_.take(count)) std::fprintf(stderr, "%s\n", describe(*f, count).c_str());
}

template <class World>
proxy_queue_state proxy_queue_host_of<World>::device_state_for(int pe) const {
  local const& l = local_of(pe);
  proxy_queue_state s;
  s.ring.slots = l.slots.get();
  s.ring.log_depth = log_depth_;
  s.ring.counters = l.counters.get();
  s.ring.producers = l.producers.get();
  s.ring.timeout_ns = world_->wait_timeout_word();  // the world's bound on device waits
  s.stride = world_->heap_layout().stride;
  s.paths = l.paths.get();
  s.results = l.results.get();
  s.result_claims = l.claims.get();
  s.result_slots = l.results ? static_cast<std::uint32_t>(std::size_t{1} << log_depth_) : 0;
  s.store_path_bytes = store_path_bytes_;
  s.staging = l.staging.get();
  s.staging_slots = l.staging_slots.get();
  s.regions = l.regions.get();
  s.network_reads_global = !paths_.empty() && network_ == proxy_network::engine;
  return s;
}

template <class World>
void proxy_queue_host_of<World>::on_register_buffer(registered_buffer const& b) {
  if (paths_.empty()) return;
  local& l = local_of(b.pe);
  if (nic_) nic_->add_buffer(b);
  l.registered.push_back({reinterpret_cast<std::uint64_t>(b.ptr), b.bytes, 0, 0});
  try {
    upload_local_regions(l.regions.get(), l.registered, l.ring.device, l.pe);
  } catch (...) {
    l.registered.pop_back();
    if (nic_) nic_->remove_buffer(b);
    throw;
  }
}

template <class World>
void proxy_queue_host_of<World>::on_unregister_buffer(registered_buffer const& b) {
  if (paths_.empty()) return;
  local& l = local_of(b.pe);
  auto const base = reinterpret_cast<std::uint64_t>(b.ptr);
  for (std::size_t i = 0; i < l.registered.size(); ++i) {
    if (l.registered[i].base != base) continue;
    l.registered.erase(l.registered.begin() + static_cast<std::ptrdiff_t>(i));
    upload_local_regions(l.regions.get(), l.registered, l.ring.device, l.pe);
    break;
  }
  // Commands posted before may still read or write the buffer: they finish first.
  if (std::string const left = drain(std::chrono::seconds(60)); !left.empty()) {
    throw error("world::unregister_buffer (ProxyQueue)", b.pe, left,
                "a kernel that took a ticket must publish it: did a kernel trap while posting?");
  }
  if (nic_) nic_->remove_buffer(b);
}

template <class World>
void proxy_queue_host_of<World>::on_deallocate() const {
  current_device_guard const keep;
  for (int pe : world_->local_pes()) {
    GPUCOMM_CUDA_CHECK(cudaSetDevice(world_->device(pe)), pe);
    GPUCOMM_CUDA_CHECK(cudaDeviceSynchronize(), pe);
  }
  if (std::string const left = drain(std::chrono::seconds(60)); !left.empty()) {
    throw error("world::deallocate (ProxyQueue)", world_->local_pes().front(), left,
                "a kernel that took a ticket must publish it: did a kernel trap while posting?");
  }
}

template <class World>
void proxy_queue_host_of<World>::on_heap_block(std::size_t offset, std::size_t bytes) {
  if (nic_) nic_->add_heap_block(offset, bytes);
}

template <class World>
void proxy_queue_host_of<World>::on_heap_block_freed(std::size_t offset, std::size_t bytes) noexcept {
  if (nic_) nic_->remove_heap_block(offset, bytes);
}

template <class World>
void proxy_queue_host_of<World>::on_synchronize() const {
  // Errors no completion carries (a CQ overrun, a QP in error, a port down) first: commands on
  // such a queue may never complete.
  if (nic_) nic_->check_async_events();
  std::string const left = drain(std::chrono::seconds(60));
  if (!left.empty()) {
    throw error("world::synchronize (ProxyQueue)", world_->local_pes().front(), left,
                "a kernel that took a ticket must publish it: did a kernel trap while posting?");
  }
  std::uint64_t count = 0;
  if (auto const f = failures_.take(count)) {
    throw error("ProxyQueue", f->pe, describe(*f, count),
                "the command was completed without effect so that the GPU did not wait on it; pass addresses "
                "of this world's symmetric heap and local buffers in global memory");
  }
}

template <class World>
auto proxy_queue_host_of<World>::make_local(int pe) -> std::unique_ptr<local> {
  auto l = std::make_unique<local>();
  l->pe = pe;
  int const device = world_->device(pe);
  GPUCOMM_CUDA_CHECK(cudaSetDevice(device), pe);
  l->slots.reset(host_mapped<proxy_queue::command>(std::size_t{1} << log_depth_, pe));
  l->counters.reset(host_mapped<proxy_queue::ring_counters>(1, pe));
  proxy_queue::producer_words* words = nullptr;
  GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&words), sizeof(*words)), pe);
  l->producers = std::unique_ptr<proxy_queue::producer_words, device_free<proxy_queue::producer_words>>(
      words, device_free<proxy_queue::producer_words>{device});
  GPUCOMM_CUDA_CHECK(cudaMemset(words, 0, sizeof(*words)), pe);
  // Mapped pinned memory has the same address on the device (unified addressing).
  proxy_queue::command_ring ring;
  ring.slots = l->slots.get();
  ring.log_depth = log_depth_;
  ring.counters = l->counters.get();
  ring.producers = words;
  l->ring.pe = pe;
  l->ring.device = device;
  l->ring.reader = proxy_queue::ring_reader(ring);
  l->ring.failures = &failures_;
  l->ring.issue_delay = issue_delay_;
  // The copy engines last: a network backend, set up later, is offered each command first.
  l->ring.backends.push_back(make_proxy_backend<copy_engine_backend>(
      copy_engine_backend::placement{pe, device, world_->npes(), world_->heap_layout().base,
                                     world_->heap_layout().stride, stream_per_peer()},
      failures_));
  return l;
}

template <class World>
std::vector<std::uint8_t> proxy_queue_host_of<World>::choose_paths(World const& w, proxy_backends backends) {
  auto const npes = static_cast<std::size_t>(w.npes());
  std::vector<std::uint8_t> paths(npes * npes, 0);
  bool any = false;
  for (std::size_t from = 0; from < npes; ++from) {
    for (std::size_t to = 0; to < npes; ++to) {
      if (backends == proxy_backends::nic || !w.can_load_store(static_cast<int>(from), static_cast<int>(to))) {
        paths[from * npes + to] = proxy_data_nic;
        any = true;
      }
    }
  }
  if (!any) return {};
  for (std::size_t to = 0; to < npes; ++to) {
    bool nic_domain = false;
    for (std::size_t from = 0; from < npes; ++from) nic_domain |= (paths[from * npes + to] & proxy_data_nic) != 0;
    if (!nic_domain) continue;
    for (std::size_t from = 0; from < npes; ++from) paths[from * npes + to] |= proxy_atomics_nic;
  }
  return paths;
}

template <class World>
void proxy_queue_host_of<World>::make_device_tables(local& l) {
  auto const npes = static_cast<std::size_t>(world_->npes());
  std::size_t const depth = std::size_t{1} << log_depth_;
  current_device_guard const keep;
  GPUCOMM_CUDA_CHECK(cudaSetDevice(l.ring.device), l.pe);
  std::vector<std::uint8_t> const mine(paths_.begin() + static_cast<std::ptrdiff_t>(l.pe * npes),
                                       paths_.begin() + static_cast<std::ptrdiff_t>((l.pe + 1) * npes));
  l.paths = device_copy(mine, l.pe, l.ring.device);
  l.results = device_copy(std::vector<std::uint64_t>(depth + 1, 0), l.pe, l.ring.device);
  l.claims = device_copy(std::vector<std::uint32_t>(depth, 0), l.pe, l.ring.device);
  unsigned char* staging = nullptr;
  GPUCOMM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&staging), staging_layout::bytes), l.pe);
  l.staging =
      std::unique_ptr<unsigned char[], device_free<unsigned char>>(staging, device_free<unsigned char>{l.ring.device});
  l.staging_slots = device_copy(std::vector<staging_slot>(staging_layout::slots), l.pe, l.ring.device);
  l.regions = device_copy(std::vector<local_regions>(1), l.pe, l.ring.device);
}

template <class World>
void proxy_queue_host_of<World>::set_up_engines(proxy_options const& options) {
  World& w = *world_;
  current_device_guard const keep;  // each PE's memory agent is made on its GPU
  auto const npes = static_cast<std::size_t>(w.npes());
  engine_world at;
  at.npes = w.npes();
  at.slot_bytes = w.heap_layout().stride;
  at.processes = w.bootstrap().size();
  at.allgather = [&w](void const* send, void* recv, std::size_t bytes) { w.bootstrap().allgather(send, recv, bytes); };
  for (auto& l : locals_) {
    engine_world::local_pe p;
    p.pe = l->pe;
    p.device = l->ring.device;
    p.slot = reinterpret_cast<std::uint64_t>(w.heap_layout().base) +
             static_cast<std::uint64_t>(l->pe) * w.heap_layout().stride;
    p.results = l->results.get();
    p.result_slots = static_cast<std::uint32_t>(std::size_t{1} << log_depth_);
    p.paths.assign(paths_.begin() + static_cast<std::ptrdiff_t>(l->pe * npes),
                   paths_.begin() + static_cast<std::ptrdiff_t>((l->pe + 1) * npes));
    at.locals.push_back(std::move(p));
  }
  engines_ = make_proxy_engines(at, options.engine, failures_);
  for (auto& l : locals_) l->ring.backends.insert(l->ring.backends.begin(), engines_->backend_for(l->pe));
}

template <class World>
void proxy_queue_host_of<World>::set_up_nic(proxy_nic_factory make, proxy_options const& options) {
  auto const npes = static_cast<std::size_t>(world_->npes());
  std::vector<proxy_nic_pe> pes;
  for (auto const& l : locals_) {
    proxy_nic_pe p;
    p.pe = l->pe;
    p.device = l->ring.device;
    p.results = l->results.get();
    p.result_slots = static_cast<std::uint32_t>(std::size_t{1} << log_depth_);
    p.paths.assign(paths_.begin() + static_cast<std::ptrdiff_t>(l->pe * npes),
                   paths_.begin() + static_cast<std::ptrdiff_t>((l->pe + 1) * npes));
    p.staging = l->staging.get();
    pes.push_back(std::move(p));
  }
  nic_ = make(*world_, options, std::move(pes), failures_);
  for (auto& l : locals_) l->ring.backends.insert(l->ring.backends.begin(), nic_->backend_for(l->pe));
}

template <class World>
bool proxy_queue_host_of<World>::stream_per_peer() const {
  if (auto const forced = proxy_stream_per_peer_forced(world_->local_pes().front())) return *forced;
  long const connections = hardware_queues_from(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")).value_or(8);
  long const locals = static_cast<long>(world_->local_pes().size());
  return locals * (1 + world_->npes()) <= connections;
}

template <class World>
auto proxy_queue_host_of<World>::local_of(int pe) -> local& {
  for (auto& l : locals_)
    if (l->pe == pe) return *l;
  throw error("world::comm<ProxyQueue>", pe, "PE " + std::to_string(pe) + " is not owned by this process",
              "ask only for the PEs in local_pes()");
}

template <class World>
std::string proxy_queue_host_of<World>::drain(std::chrono::seconds limit) const {
  current_device_guard const keep;
  auto const give_up = std::chrono::steady_clock::now() + limit;
  for (auto const& l : locals_) {
    proxy_queue::producer_words words{};
    cudaSetDevice(l->ring.device);
    if (cudaError_t const rc = cudaMemcpy(&words, l->producers.get(), sizeof(words), cudaMemcpyDeviceToHost);
        rc != cudaSuccess) {
      return "PE " + std::to_string(l->pe) + "'s ticket count could not be read (" + cudaGetErrorName(rc) + ")";
    }
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> completed(l->counters->completed);
    while (completed.load(cuda::memory_order_acquire) < words.reserved) {
      if (std::chrono::steady_clock::now() > give_up) {
        return "PE " + std::to_string(l->pe) + " posted " + std::to_string(words.reserved) + " commands and " +
               std::to_string(completed.load(cuda::memory_order_acquire)) + " are complete after " +
               std::to_string(limit.count()) + " s";
      }
      spin_pause();
    }
  }
  return {};
}

template <class World>
std::string proxy_queue_host_of<World>::describe(proxy_failure const& f, std::uint64_t count) {
  return "the " + f.op_name() + " of " + std::to_string(f.bytes) + " bytes from PE " + std::to_string(f.pe) +
         (f.peer >= 0 ? " to PE " + std::to_string(f.peer) : std::string(" to its peers")) + " (ticket " +
         std::to_string(f.ticket) + ") failed: " + f.what +
         (count > 1 ? " (" + std::to_string(count - 1) + " more failed commands)" : "");
}

}  // namespace gpucomm::detail
