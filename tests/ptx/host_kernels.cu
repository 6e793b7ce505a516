// Host code that launches or registers every kind of kernel gpucomm's host side launches, one
// case per translation unit (HOST_KERNELS_CASE, 1 to 7) because a kernel compiled for one case
// would hide its absence from another: each transport's and each route's set-up with
// synchronize (IBGDAPost's host half runs a kernel of its own there), and the collectives' and the
// MoE launchers. Never run: check_host_kernels.py compiles each case and checks that every kernel
// its host code names was compiled for the device too. A kernel named only in a body that the
// device pass does not read (the bodies in detail/*.inl are read by the host pass only) would be
// launched at run time as an invalid device function.
#include <gpucomm/gpucomm.cuh>

#include <cstddef>

#ifndef HOST_KERNELS_CASE
#define HOST_KERNELS_CASE 1
#endif

namespace {

template <class Tr>
void set_up(gpucomm::world& w) {
  gpucomm::comm<Tr> const c = w.comm<Tr>(0);
  static_cast<void>(c);
  w.synchronize();
}

}  // namespace

void every_host_launch(float* f, int* i, std::size_t* counts, cudaStream_t s) {
  using namespace gpucomm;
  // Made here rather than taken by reference so that their constructors and destructors are
  // compiled into this file too: a kernel one of them named would be checked as well.
  world w;
  team_workspace ws(w, w.team_world());
  moe_plan plan(w, w.team_world(), moe_shape{});
#if HOST_KERNELS_CASE == 1
  set_up<NVLinkStore>(w);
#elif HOST_KERNELS_CASE == 2
  set_up<P2PCopy>(w);
#elif HOST_KERNELS_CASE == 3
  set_up<IBGDAPost>(w);
#elif HOST_KERNELS_CASE == 4
  set_up<ProxyQueue>(w);
#elif HOST_KERNELS_CASE == 5
  set_up<route<NVLinkStore, IBGDAPost> >(w);
#elif HOST_KERNELS_CASE == 6
  set_up<route<NVLinkStore, ProxyQueue> >(w);
#else
  broadcast(w, ws, 0, f, f, 8, 0, s);
  allgather(w, ws, 0, f, f, 8, s);
  alltoall(w, ws, 0, i, i, 8, s);
  alltoallv(w, ws, 0, i, counts, 64, i, counts, counts, 8, s);
  reduce(w, ws, 0, f, f, 8, reduction::sum{}, 0, s);
  allreduce(w, ws, 0, f, f, 8, reduction::sum{}, s);
  reduce_scatter(w, ws, 0, i, i, 8, reduction::sum{}, s);
  moe_handle const h = moe_dispatch(w, plan, 0, moe_dispatch_args{}, s);
  moe_combine(w, plan, 0, h, moe_combine_args{}, s);
#endif
  static_cast<void>(f), static_cast<void>(i), static_cast<void>(counts), static_cast<void>(s);
}
