#pragma once
// route<Legs...>: its device side (the policy a kernel names) and its host half. Include the legs'
// headers too (nvlink_store.cuh, ibgda_post.cuh, ...); kernels-only translation units may include
// route/device.cuh and the legs' device.cuh alone.

#include "route/device.cuh"
#include "route/host.hpp"
