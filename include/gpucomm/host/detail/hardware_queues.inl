#pragma once
// The bodies of hardware_queues.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline std::optional<long> hardware_queues_from(char const* text) {
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  long const v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) return std::nullopt;
  return v;
}

inline std::vector<char> gpus_with_context() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<char> had(static_cast<std::size_t>(count), 0);
  try {
    driver_api const& d = driver();
    std::vector<CUdevice> devices(static_cast<std::size_t>(count), CUdevice{});
    for (int i = 0; i < count; ++i) {
      unsigned flags = 0;
      int active = 0;
      if (d.cuDeviceGet(&devices[static_cast<std::size_t>(i)], i) == CUDA_SUCCESS &&
          d.cuDevicePrimaryCtxGetState(devices[static_cast<std::size_t>(i)], &flags, &active) == CUDA_SUCCESS)
        had[static_cast<std::size_t>(i)] = active != 0;
    }
    CUcontext current = nullptr;
    CUdevice device{};
    if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr &&
        d.cuCtxGetDevice(&device) == CUDA_SUCCESS) {
      for (int i = 0; i < count; ++i)
        if (devices[static_cast<std::size_t>(i)] == device) had[static_cast<std::size_t>(i)] = 1;
    }
  } catch (error const&) {
    return {};  // a driver without these functions: the heap's set-up says what is missing
  }
  return had;
}

inline bool mps_control_present() {
  char const* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  std::string const control = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st {};
  return ::stat(control.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

inline void ask_hardware_queues(bool one_pe_per_process) {
  long const n = hardware_queues_to_ask(one_pe_per_process, mps_control_present());
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(n).c_str(), 0);
}

inline hardware_queue_start const& hardware_queue_record(bool one_pe_per_process) {
  static hardware_queue_start const start = [one_pe_per_process] {
    hardware_queue_start s;
    s.set_before = hardware_queues_from(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
    ask_hardware_queues(one_pe_per_process);
    s.had_context = gpus_with_context();
    return s;
  }();
  return start;
}

inline hardware_queue_start const& widen_hardware_queues(bool one_pe_per_process) {
  hardware_queue_start const& start = hardware_queue_record(one_pe_per_process);
  ask_hardware_queues(one_pe_per_process);
  return start;
}

inline hardware_queue_verdict hardware_queues_of(int device, bool matters) {
  hardware_queue_start const& s = hardware_queue_record(false);
  bool const existed = device >= 0 && static_cast<std::size_t>(device) < s.had_context.size() &&
                       s.had_context[static_cast<std::size_t>(device)] != 0;
  return judge_hardware_queues(s.set_before, existed, matters);
}

inline std::string narrow_queues_reason(int device) {
  std::optional<long> const set = hardware_queue_record(false).set_before;
  return "GPU " + std::to_string(device) +
         " had a CUDA context before gpucomm's first world (CUDA reads CUDA_DEVICE_MAX_CONNECTIONS by the time it "
         "makes a context), and CUDA_DEVICE_MAX_CONNECTIONS was " +
         (set ? std::to_string(*set) : std::string("unset (CUDA's default: 8)")) +
         ", so that GPU's streams may share hardware queues, and work queued behind a kernel waits for it";
}

inline void check_hardware_queues(std::vector<local_pe> const& locals, char const* call) {
  std::string narrow;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    int const device = locals[i].device;
    bool seen = false;
    std::string sharing;
    for (std::size_t j = 0; j < locals.size(); ++j) {
      if (locals[j].device != device) continue;
      seen |= j < i;
      sharing += (sharing.empty() ? "" : ", ") + std::to_string(locals[j].pe);
    }
    if (seen) continue;  // each GPU once
    bool const shared = sharing.find(',') != std::string::npos;
    switch (hardware_queues_of(device, shared)) {
      case hardware_queue_verdict::fail:
        throw error(call, locals[i].pe,
                    narrow_queues_reason(device) + ": PEs " + sharing +
                        " share it, and a kernel queued behind another PE's kernel that waits for it would never start",
                    widen_queues_hint);
      case hardware_queue_verdict::warn:
        narrow += (narrow.empty() ? "" : ", ") + std::to_string(device);
        break;
      case hardware_queue_verdict::ok:
        break;
    }
  }
  if (!narrow.empty()) {
    std::fprintf(stderr,
                 "gpucomm: warning: GPU(s) %s had a CUDA context before gpucomm's first world, made without "
                 "CUDA_DEVICE_MAX_CONNECTIONS=32, so their streams may share hardware queues; a kernel that waits for "
                 "work on another stream of its GPU may then wait forever. To be safe, %s.\n",
                 narrow.c_str(), widen_queues_hint);
  }
}

inline void require_hardware_queues(char const* call, int pe, int device) {
  if (hardware_queues_of(device, true) == hardware_queue_verdict::fail) {
    throw error(
        call, pe,
        narrow_queues_reason(device) + ": a proxy copy queued behind a kernel that waits for it would never run",
        widen_queues_hint);
  }
}

}  // namespace gpucomm::detail
