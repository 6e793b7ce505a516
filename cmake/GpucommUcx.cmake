# gpucomm::ucx: the UCX network engine (include/gpucomm/transport/engine/ucx_engine.hpp).
# include()d by the top-level CMakeLists.txt after target gpucomm exists. Linking it compiles one
# registration unit into the program, which installs the engine behind engine/engine_hook.hpp;
# programs that do not link it never include UCX, and asking them for an engine is a
# gpucomm::error naming this target.

# GPUCOMM_UCX_ROOT: a UCX outside the system's paths, searched first and alone when given, e.g. the
# Debian packages scripts/fetch-ucx.sh unpacks into .deps/ucx (-DGPUCOMM_UCX_ROOT=$PWD/.deps/ucx/usr).
# Programs built against it find its libraries through their RPATH; UCX's own modules and libnuma
# beside them through LD_LIBRARY_PATH and UCX_MODULE_DIR (docs/guide/across_nodes.md).

set(GPUCOMM_UCX_ROOT "" CACHE PATH "A UCX installation to use instead of the system's (its usr/ folder)")
if(GPUCOMM_UCX_ROOT)
  find_path(GPUCOMM_UCP_INCLUDE_DIR NAMES ucp/api/ucp.h PATHS ${GPUCOMM_UCX_ROOT}/include NO_DEFAULT_PATH)
  foreach(lib ucp uct ucs)
    string(TOUPPER ${lib} LIB)
    find_library(GPUCOMM_${LIB}_LIBRARY NAMES ${lib} lib${lib}.so.0
                 PATHS ${GPUCOMM_UCX_ROOT}/lib/x86_64-linux-gnu ${GPUCOMM_UCX_ROOT}/lib/aarch64-linux-gnu
                       ${GPUCOMM_UCX_ROOT}/lib NO_DEFAULT_PATH)
  endforeach()
else()
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(GPUCOMM_UCX_PC QUIET ucx)
  endif()
  find_path(GPUCOMM_UCP_INCLUDE_DIR NAMES ucp/api/ucp.h HINTS ${GPUCOMM_UCX_PC_INCLUDE_DIRS})
  foreach(lib ucp uct ucs)
    string(TOUPPER ${lib} LIB)
    find_library(GPUCOMM_${LIB}_LIBRARY NAMES ${lib} HINTS ${GPUCOMM_UCX_PC_LIBRARY_DIRS})
  endforeach()
endif()

if(GPUCOMM_UCP_INCLUDE_DIR AND GPUCOMM_UCP_LIBRARY AND GPUCOMM_UCT_LIBRARY AND GPUCOMM_UCS_LIBRARY)
  message(STATUS "gpucomm: UCX found (${GPUCOMM_UCP_LIBRARY}): gpucomm::ucx enabled")
  add_library(gpucomm_ucx INTERFACE)
  add_library(gpucomm::ucx ALIAS gpucomm_ucx)
  set_target_properties(gpucomm_ucx PROPERTIES EXPORT_NAME ucx)
  target_include_directories(gpucomm_ucx INTERFACE $<BUILD_INTERFACE:${GPUCOMM_UCP_INCLUDE_DIR}>)
  # Link by name in the exported interface, so an installed gpucomm finds the system libraries.
  target_link_libraries(gpucomm_ucx INTERFACE gpucomm
    $<BUILD_INTERFACE:${GPUCOMM_UCP_LIBRARY}> $<BUILD_INTERFACE:${GPUCOMM_UCT_LIBRARY}>
    $<BUILD_INTERFACE:${GPUCOMM_UCS_LIBRARY}> $<INSTALL_INTERFACE:ucp> $<INSTALL_INTERFACE:uct>
    $<INSTALL_INTERFACE:ucs>)
  if(GPUCOMM_UCX_ROOT)
    # Its libraries' own dependencies (libucm, libnuma) beside them, for the linker; at run time
    # through LD_LIBRARY_PATH.
    get_filename_component(gpucomm_ucx_libdir "${GPUCOMM_UCP_LIBRARY}" DIRECTORY)
    target_link_options(gpucomm_ucx INTERFACE $<BUILD_INTERFACE:LINKER:-rpath-link,${gpucomm_ucx_libdir}>)
  endif()
  target_sources(gpucomm_ucx INTERFACE
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/src/ucx_engine_registration.cpp>
    $<INSTALL_INTERFACE:$<INSTALL_PREFIX>/${CMAKE_INSTALL_DATADIR}/gpucomm/ucx_engine_registration.cpp>)
  install(FILES src/ucx_engine_registration.cpp DESTINATION ${CMAKE_INSTALL_DATADIR}/gpucomm)
else()
  message(STATUS "gpucomm: UCX (Debian: libucx-dev; ucp/api/ucp.h, libucp, libuct, libucs) not found: "
                 "gpucomm::ucx disabled, the network engine unavailable")
endif()
