#pragma once
// The bodies of world.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm {

inline world::world(std::vector<int> devices, world_options options) {
  constexpr char const* call = "world (single process)";
  detail::widen_hardware_queues(false);
  detail::current_device_guard const keep;  // set-up visits every GPU listed
  int const count = detail::visible_gpus(call);
  if (devices.empty()) {
    for (int d = 0; d < count; ++d) devices.push_back(d);
  }
  detail::check_pe_count(options, static_cast<int>(devices.size()), "the device list");
  // A GPU may be listed several times: its PEs share it (for development and for testing
  // multi-PE code on one GPU; see the co-residency rule in the README).
  places_ = detail::pe_placement::single_process(devices, count, call);
  detail::check_hardware_queues(places_.locals(), call);
  init(options);
}

inline world::~world() {
  detail::current_device_guard const keep;  // tear-down visits every local GPU
  transports_.clear();                      // transports' host halves go before the heap they use
  heap_.reset();
  // Each stream's destruction visits its GPU; done here, inside `keep`'s scope, rather than by
  // the members' destructors after it.
  streams_.clear();
}

inline bool world::can_load_store(int from, int to) const {
  places_.place(from);  // throws for a PE outside the world
  places_.place(to);
  return heap_->can_load_store(from, to);
}

inline void world::register_buffer(int pe, void const* ptr, std::size_t bytes) {
  char const* const call = "world::register_buffer";
  int const gpu = device(pe);  // throws for a PE this process does not own
  // A transport registers the buffer on pe's GPU; the caller's current device stays.
  detail::current_device_guard const keep;
  detail::check_new_buffer(call, pe, ptr, bytes, heap_layout(), npes(), buffers_, max_registered_buffers);
  registered_buffer const b{pe, ptr, bytes, detail::buffer_device(call, pe, ptr, gpu)};
  transports_.on_register_buffer(b);
  buffers_.push_back(b);
}

inline void world::unregister_buffer(int pe, void const* ptr) {
  detail::current_device_guard const keep;
  device(pe);
  auto it = buffers_.begin();
  while (it != buffers_.end() && !(it->pe == pe && it->ptr == ptr)) ++it;
  if (it == buffers_.end()) {
    throw error("world::unregister_buffer", pe, "the buffer is not registered for PE " + std::to_string(pe),
                "pass the pointer that register_buffer took, once");
  }
  transports_.on_unregister_buffer(*it);
  buffers_.erase(it);
}

inline team world::team_node(int pe) const {
  stream(pe);  // throws for a PE this process does not own
  return teams_.node(pe);
}

inline team world::team_shared_gpu(int pe) const {
  stream(pe);
  return teams_.shared_gpu(pe);
}

inline team world::team_split(team const& parent, int start, int stride, int size) {
  team const t = teams_.plan_split(boot_, local_pes().front(), parent, start, stride, size);
  reset_team_slot(t.slot);
  teams_.add(t);
  return t;
}

inline void world::team_destroy(team const& t) {
  teams_.check_destroy(boot_, t);
  detail::checked_on_every_rank(boot_, "world::team_destroy", [&] { synchronize(); });  // waits for every process
  teams_.remove(t);
}

inline void world::synchronize() const {
  detail::current_device_guard const keep;  // the caller's current device stays as it was
  // The transports' own checks would wait on the failed GPUs: the kernels' failure comes first.
  streams_.synchronize();
  transports_.on_synchronize();
}

inline void world::barrier() {
  detail::checked_on_every_rank(boot_, "world::barrier", [&] { synchronize(); });
}

inline std::uint64_t* world::team_states(int pe) const {
  stream(pe);  // throws for a PE this process does not own: its slot is not mapped here
  return reinterpret_cast<std::uint64_t*>(heap_->slot(pe)) + detail::control_block_layout::header_words;
}

inline void world::require_hardware_queues(char const* call) {
  detail::checked_on_every_rank(boot_, call, [&] {
    for (auto const& l : places_.locals()) detail::require_hardware_queues(call, l.pe, l.device);
  });
}

inline void world::init(world_options const& options) {
  options_ = options;
  // The options and environment first, on every process together: a process that throws here
  // alone would leave the others waiting in the agreements below.
  std::size_t bytes = 0;
  int max_teams = 0;
  detail::checked_on_every_rank(boot_, "world", [&] {
    bytes = detail::heap_bytes_from(options);
    max_teams = detail::max_teams_from(options);
    wait_timeout_word_ = detail::wait_timeout_word_from(options);
  });
  detail::agree(boot_, bytes, "world", "the heap size", "give every process the same world_options::heap_bytes");
  // The first CUDA call on each GPU (it makes the context): a process that fails here alone (a GPU
  // out of memory, MPS out of clients) would leave the others waiting in the agreements below.
  detail::checked_on_every_rank(boot_, "world", [&] {
    for (auto const& l : places_.locals()) streams_.create(l.pe, l.device);
  });
  detail::agree(boot_, max_teams, "world", "the team limit", "give every process the same world_options::max_teams");
  detail::agree(boot_, wait_timeout_word_, "world", "the wait timeout",
                "give every process the same world_options::wait_timeout (or GPUCOMM_WAIT_TIMEOUT_MS)");
  auto allow = options.load_store_filter ? options.load_store_filter : [](int, int) { return true; };
  heap_ = std::make_unique<detail::symmetric_heap>(boot_, places_.locals(), npes(), bytes,
                                                   detail::control_block_layout::bytes(npes(), max_teams), allow,
                                                   places_.hosts());
  teams_ = detail::team_table(places_, max_teams);
  for (int pe : local_pes()) write_control_header(pe);
}

inline void world::write_control_header(int pe) {
  auto const header = teams_.control_header(pe, wait_timeout_word_);
  GPUCOMM_CUDA_CHECK(cudaSetDevice(device(pe)), pe);
  GPUCOMM_CUDA_CHECK(cudaMemcpy(heap_->slot(pe), header.data(), sizeof(header), cudaMemcpyHostToDevice), pe);
}

inline void world::reset_team_slot(int slot) {
  detail::current_device_guard const keep;
  std::size_t const words = detail::control_block_layout::slot_words(npes());
  // A failure on one process throws on all of them, which also waits for every process.
  detail::checked_on_every_rank(boot_, "world::team_split", [&] {
    for (int pe : local_pes()) {
      // On the legacy default stream, which the world's non-blocking streams do not wait for: a
      // kernel still running on them (using other teams) neither delays this nor is disturbed.
      GPUCOMM_CUDA_CHECK(cudaSetDevice(device(pe)), pe);
      GPUCOMM_CUDA_CHECK(cudaMemset(team_states(pe) + static_cast<std::size_t>(slot) * words, 0, words * 8), pe);
      GPUCOMM_CUDA_CHECK(cudaStreamSynchronize(nullptr), pe);
    }
  });
}

}  // namespace gpucomm
