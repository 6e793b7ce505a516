# verbs_gpu: rdma-core for the host setup (gpucomm::verbs).
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
  target_link_libraries(gpucomm_verbs INTERFACE gpucomm
    $<BUILD_INTERFACE:${GPUCOMM_IBVERBS_LIBRARY}> $<BUILD_INTERFACE:${GPUCOMM_MLX5_LIBRARY}>
    $<INSTALL_INTERFACE:ibverbs> $<INSTALL_INTERFACE:mlx5>)
  target_compile_definitions(gpucomm_verbs INTERFACE GPUCOMM_HAVE_RDMA_CORE=1)
else()
  message(STATUS "gpucomm: rdma-core (libibverbs-dev: infiniband/mlx5dv.h, libibverbs, libmlx5) not found: "
                 "gpucomm::verbs disabled")
endif()
