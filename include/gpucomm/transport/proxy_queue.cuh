#pragma once
// ProxyQueue: its device side (the policy a kernel names) and its host half (the rings and proxy
// threads world::comm sets up). Kernels-only translation units may include proxy_queue/device.cuh
// alone.

#include "proxy_queue/device.cuh"
#include "proxy_queue/host.hpp"
