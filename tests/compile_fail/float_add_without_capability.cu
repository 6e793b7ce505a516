// expect: missing=gpucomm::capability::float_add
#include <gpucomm/gpucomm.cuh>
// A transport with integer atomics only.
struct IntegerAtomicsOnly {
  static constexpr char const* name = "IntegerAtomicsOnly";
  static constexpr gpucomm::capabilities caps{.atomics = true};
  struct device_state {};
  struct host_state {
    explicit host_state(gpucomm::world&) {}
    device_state device_state_for(int) const { return {}; }
  };
  template <gpucomm::atomic_op Op, class T>
  __device__ static T atomic(gpucomm::comm<IntegerAtomicsOnly> const&, gpucomm::sym_ptr<T>, T value, T, int) {
    return value;
  }
};
__global__ void k(gpucomm::comm<IntegerAtomicsOnly> c, gpucomm::sym_ptr<float> f, gpucomm::sym_ptr<int> i) {
  c.fetch_add(gpucomm::this_thread(), i, 1, 0);
#if GPUCOMM_MISUSE
  c.fetch_add(gpucomm::this_thread(), f, 1.0f, 0);
#endif
}
