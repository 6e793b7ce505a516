#pragma once
// Umbrella header: the core, and every transport (NVLinkStore, IBGDAPost, route<...>).

#include "comm.cuh"
#include "config.hpp"
#include "error.hpp"
#include "group.cuh"
#include "host/bootstrap.hpp"
#include "host/world.hpp"
#include "ops.hpp"
#include "sym_ptr.hpp"
#include "transport/ibgda_post.cuh"
#include "transport/nvlink_store.cuh"
#include "transport/route.cuh"
#include "transport/transport.hpp"
