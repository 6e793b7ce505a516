#pragma once
// The CUDA driver functions gpucomm's host code calls, looked up through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linked: programs using gpucomm need no -lcuda,
// and they start, and fail with a clear message, on machines without a driver.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "../../error.hpp"

namespace gpucomm::detail {

struct driver_api {
// clang-format off
#define GPUCOMM_DRIVER_FUNCTIONS(X)                                                                      \
  X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemAddressReserve)      \
  X(cuMemAddressFree) X(cuMemGetAllocationGranularity) X(cuMemExportToShareableHandle)                    \
  X(cuMemImportFromShareableHandle) X(cuMemsetD8) X(cuDeviceGetAttribute) X(cuGetErrorName)                \
  X(cuGetErrorString) X(cuStreamWriteValue64) X(cuDeviceGet) X(cuDevicePrimaryCtxGetState)                \
  X(cuCtxGetCurrent) X(cuCtxGetDevice)
// clang-format on
#define GPUCOMM_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  GPUCOMM_DRIVER_FUNCTIONS(GPUCOMM_DRIVER_MEMBER)
#undef GPUCOMM_DRIVER_MEMBER
};

/// The driver's functions; throws gpucomm::error if the driver cannot provide them.
inline driver_api const& driver() {
  static driver_api const api = [] {
    driver_api a;
    // 12000: the ABI of each function as of CUDA 12.0, the oldest these calls are used with.
#define GPUCOMM_DRIVER_LOAD(name)                                                                           \
  {                                                                                                         \
    cudaDriverEntryPointQueryResult found{};                                                                \
    void* fn = nullptr;                                                                                     \
    cudaError_t const rc = cudaGetDriverEntryPointByVersion(#name, &fn, 12000, cudaEnableDefault, &found);  \
    if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {                                 \
      throw error("cudaGetDriverEntryPointByVersion(" #name ")", -1,                                        \
                  std::string("the CUDA driver does not provide " #name " (") + cudaGetErrorName(rc) + ")", \
                  "install an NVIDIA driver that supports CUDA 13");                                        \
    }                                                                                                       \
    a.name = reinterpret_cast<decltype(a.name)>(fn);                                                        \
  }
    GPUCOMM_DRIVER_FUNCTIONS(GPUCOMM_DRIVER_LOAD)
#undef GPUCOMM_DRIVER_LOAD
    return a;
  }();
  return api;
}
#undef GPUCOMM_DRIVER_FUNCTIONS

inline void check_cu(CUresult rc, char const* call, int pe) {
  if (rc == CUDA_SUCCESS) return;
  char const* name = nullptr;
  char const* text = nullptr;
  driver().cuGetErrorName(rc, &name);
  driver().cuGetErrorString(rc, &text);
  throw error(call, pe, std::string(name ? name : "unknown CUresult") + " (" + (text ? text : "?") + ")",
              "check that the GPU is visible to this process and that its driver supports CUDA 13");
}

}  // namespace gpucomm::detail

/// Check a CUDA driver call; throws gpucomm::error naming the call and the PE.
#define GPUCOMM_CU_CHECK(expr, pe) ::gpucomm::detail::check_cu((expr), #expr, (pe))
