#pragma once
// Umbrella header: everything a CUDA translation unit needs for comm<NVLinkStore>.

#include "comm.cuh"
#include "config.hpp"
#include "error.hpp"
#include "group.cuh"
#include "host/bootstrap.hpp"
#include "host/world.hpp"
#include "ops.hpp"
#include "sym_ptr.hpp"
#include "transport/nvlink_store.cuh"
#include "transport/transport.hpp"
