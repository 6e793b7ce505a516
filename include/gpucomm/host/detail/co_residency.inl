#pragma once
// The bodies of co_residency.hpp's functions, read by the host pass only (see the end of that header).

namespace gpucomm::detail {

inline int smallest_sm_count(world& w) {
  int fewest = 0;
  for (int pe : w.local_pes()) {
    int sms = 0;
    GPUCOMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, w.device(pe)), pe);
    fewest = fewest == 0 || sms < fewest ? sms : fewest;
  }
  for (int const sms : w.bootstrap().allgather_value(fewest)) fewest = sms < fewest ? sms : fewest;
  return fewest;
}

inline int most_members_per_gpu(world const& w, team const& t) {
  int most = 1;
  for (int i = 0; i < t.size; ++i) {
    int sharing = 0;
    for (int j = 0; j < t.size; ++j) sharing += w.same_gpu(t.pe_of(i), t.pe_of(j)) ? 1 : 0;
    most = sharing > most ? sharing : most;
  }
  return most;
}

}  // namespace gpucomm::detail
