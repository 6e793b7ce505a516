# verbs_gpu: rdma-core for the host setup (gpucomm::verbs), with the NIC set-up (gpucomm::nic).
# include()d by the top-level CMakeLists.txt after target gpucomm exists.

find_path(GPUCOMM_MLX5DV_INCLUDE_DIR NAMES infiniband/mlx5dv.h)
find_library(GPUCOMM_IBVERBS_LIBRARY NAMES ibverbs)
find_library(GPUCOMM_MLX5_LIBRARY NAMES mlx5)

if(GPUCOMM_MLX5DV_INCLUDE_DIR AND GPUCOMM_IBVERBS_LIBRARY AND GPUCOMM_MLX5_LIBRARY)
  message(STATUS "gpucomm: rdma-core found (${GPUCOMM_IBVERBS_LIBRARY}, ${GPUCOMM_MLX5_LIBRARY}): gpucomm::verbs enabled")
  add_library(gpucomm_verbs INTERFACE)
  add_library(gpucomm::verbs ALIAS gpucomm_verbs)
  set_target_properties(gpucomm_verbs PROPERTIES EXPORT_NAME verbs)
  target_include_directories(gpucomm_verbs INTERFACE $<BUILD_INTERFACE:${GPUCOMM_MLX5DV_INCLUDE_DIR}>)
  # Link by name in the exported interface, so an installed gpucomm finds the system libraries.
  # The NIC set-up (gpucomm::nic) comes with it, built against rdma-core (GPUCOMM_HAVE_RDMA_CORE).
  target_link_libraries(gpucomm_verbs INTERFACE gpucomm gpucomm_nic
    $<BUILD_INTERFACE:${GPUCOMM_IBVERBS_LIBRARY}> $<BUILD_INTERFACE:${GPUCOMM_MLX5_LIBRARY}>
    $<INSTALL_INTERFACE:ibverbs> $<INSTALL_INTERFACE:mlx5>)
  target_compile_definitions(gpucomm_verbs INTERFACE GPUCOMM_HAVE_RDMA_CORE=1)
  # Optional rdma-core features that are functions or enumerators, not macros, so the rdma-core
  # backend (verbs_gpu/host/rdma_core_backend.hpp) can only learn of them from the build: each test
  # compiles and links a use of the feature (first releases: docs/guide/mlx5-setup-references.md, section 8).
  include(CheckSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${GPUCOMM_MLX5DV_INCLUDE_DIR})
  set(CMAKE_REQUIRED_LIBRARIES ${GPUCOMM_IBVERBS_LIBRARY} ${GPUCOMM_MLX5_LIBRARY})
  set(CMAKE_REQUIRED_QUIET ON)
  set(gpucomm_rdma_prologue "#include <infiniband/mlx5dv.h>\n#include <infiniband/verbs.h>\n")
  check_source_compiles(CXX "${gpucomm_rdma_prologue}
    int main() { ibv_gid_entry e{}; return ibv_query_gid_ex(nullptr, 1, 0, &e, 0); }" GPUCOMM_RDMA_HAS_QUERY_GID_EX)
  check_source_compiles(CXX "${gpucomm_rdma_prologue}
    int main() { return ibv_reg_dmabuf_mr(nullptr, 0, 0, 0, -1, 0) != nullptr; }" GPUCOMM_RDMA_HAS_REG_DMABUF_MR)
  check_source_compiles(CXX "${gpucomm_rdma_prologue}
    int main() { mlx5dv_devx_umem_in in{}; in.pgsz_bitmap = 0; return mlx5dv_devx_umem_reg_ex(nullptr, &in) != nullptr; }"
    GPUCOMM_RDMA_HAS_UMEM_REG_EX)
  check_source_compiles(CXX "${gpucomm_rdma_prologue}
    int main() { mlx5dv_devx_umem_in in{}; in.comp_mask = MLX5DV_UMEM_MASK_DMABUF; in.dmabuf_fd = -1;
                 return mlx5dv_devx_umem_reg_ex(nullptr, &in) != nullptr; }" GPUCOMM_RDMA_HAS_UMEM_DMABUF)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_QUIET)
  set(gpucomm_rdma_features)
  foreach(feature QUERY_GID_EX REG_DMABUF_MR UMEM_REG_EX UMEM_DMABUF)
    if(GPUCOMM_RDMA_HAS_${feature})
      target_compile_definitions(gpucomm_verbs INTERFACE GPUCOMM_RDMA_HAS_${feature}=1)
      list(APPEND gpucomm_rdma_features ${feature})
    endif()
  endforeach()
  message(STATUS "gpucomm: rdma-core features: ${gpucomm_rdma_features}")
else()
  message(STATUS "gpucomm: rdma-core (libibverbs-dev: infiniband/mlx5dv.h, libibverbs, libmlx5) not found: "
                 "gpucomm::verbs disabled")
endif()
