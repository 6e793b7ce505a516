#pragma once
// The bodies of world_memory.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline allocation_bytes allocation_bytes_of(std::size_t n, std::size_t size) {
  if (n > std::numeric_limits<std::size_t>::max() / size) {
    return {std::numeric_limits<std::size_t>::max(),
            std::to_string(n) + " elements of " + std::to_string(size) + " bytes are more bytes than a size_t holds"};
  }
  return {n * size, {}};
}

inline std::optional<std::size_t> offset_in_local_slots(symmetric_heap const& heap, std::vector<int> const& local_pes,
                                                        void const* p) {
  auto const addr = reinterpret_cast<std::uintptr_t>(p);
  for (int pe : local_pes) {
    auto const begin = reinterpret_cast<std::uintptr_t>(heap.slot(pe));
    if (addr >= begin && addr < begin + heap.layout().stride) return addr - begin;
  }
  return std::nullopt;
}

inline std::size_t live_offset(symmetric_heap const& heap, std::vector<int> const& local_pes, void const* p, int pe) {
  auto const offset = offset_in_local_slots(heap, local_pes, p);
  if (!offset || !heap.in_live_block(*offset)) {
    throw error("world::view", pe,
                offset ? "the pointer is in this world's symmetric heap but in no live allocation (heap offset " +
                             std::to_string(*offset) + ")"
                       : std::string("the pointer is not in this world's symmetric heap"),
                "pass a pointer into an allocation of this world that is not freed");
  }
  return *offset;
}

inline void check_new_buffer(char const* call, int pe, void const* ptr, std::size_t bytes, heap_layout const& heap,
                             int npes, std::vector<registered_buffer> const& buffers, int most) {
  if (ptr == nullptr || bytes == 0) {
    throw error(call, pe, ptr == nullptr ? "the buffer is null" : "the buffer has no bytes",
                "pass the first byte and the size of a cudaMalloc'd or pinned host buffer");
  }
  auto const begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (bytes > std::numeric_limits<std::uintptr_t>::max() - begin) {
    throw error(call, pe, "the buffer's size runs past the end of the address space", "pass its real size");
  }
  auto const end = begin + bytes;
  auto const heap_begin = reinterpret_cast<std::uintptr_t>(heap.base);
  auto const heap_end = heap_begin + heap.stride * static_cast<std::size_t>(npes);
  if (begin < heap_end && heap_begin < end) {
    throw error(call, pe, "the buffer overlaps the symmetric heap",
                "memory of the symmetric heap is registered already: use it as it is");
  }
  for (auto const& b : buffers) {
    auto const b_begin = reinterpret_cast<std::uintptr_t>(b.ptr);
    if (b.pe == pe && begin < b_begin + b.bytes && b_begin < end) {
      throw error(call, pe, "the buffer overlaps one registered before (" + std::to_string(b.bytes) + " bytes)",
                  "unregister_buffer the other one first, or register each buffer once");
    }
  }
  int registered = 0;
  for (auto const& b : buffers) registered += b.pe == pe ? 1 : 0;
  if (registered >= most) {
    throw error(call, pe, "PE " + std::to_string(pe) + " has " + std::to_string(most) + " registered buffers already",
                "unregister_buffer one it no longer needs, or register one larger buffer and carve it up");
  }
}

inline int buffer_device(char const* call, int pe, void const* ptr, int device) {
  cudaPointerAttributes a{};
  cudaError_t const rc = cudaPointerGetAttributes(&a, ptr);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    throw error(call, pe, std::string("cudaPointerGetAttributes failed: ") + cudaGetErrorName(rc),
                "pass memory from cudaMalloc or cudaHostAlloc");
  }
  if (a.type == cudaMemoryTypeDevice && a.device == device) return a.device;
  if (a.type == cudaMemoryTypeHost && a.devicePointer == ptr) return -1;
  throw error(call, pe,
              a.type == cudaMemoryTypeDevice
                  ? "the buffer is memory of GPU " + std::to_string(a.device) + ", not of PE " + std::to_string(pe) +
                        "'s GPU " + std::to_string(device)
                  : std::string(a.type == cudaMemoryTypeManaged ? "the buffer is managed memory"
                                : a.type == cudaMemoryTypeHost  ? "the buffer is pinned host memory that the GPU "
                                                                  "maps at another address"
                                                                : "the buffer is pageable host memory") +
                        ", which the NIC cannot reach",
              "register memory from cudaMalloc on the PE's GPU, or pinned host memory (cudaHostAlloc with "
              "cudaHostAllocMapped, or cudaHostRegister)");
}

}  // namespace gpucomm::detail
