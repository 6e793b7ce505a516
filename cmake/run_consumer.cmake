# ctest driver: build tests/consumer against gpucomm the way MODE says (find_package from a fresh
# install of BUILD, or add_subdirectory of SOURCE).
file(REMOVE_RECURSE ${WORK})
set(extra)
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install failed")
  endif()
  set(extra -DCMAKE_PREFIX_PATH=${WORK}/prefix)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/consumer -B ${WORK}/build -G ${GENERATOR}
                        -DCMAKE_CUDA_COMPILER=${NVCC} -DGPUCOMM_CONSUME=${MODE} -DGPUCOMM_SOURCE_DIR=${SOURCE} ${extra}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer (${MODE}) failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer (${MODE}) failed")
endif()
# The NIC set-up's registration unit came with gpucomm::nic and installed its hooks (no GPU needed).
execute_process(COMMAND ${WORK}/build/consumer_nic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer (${MODE}) linking gpucomm::nic has no NIC set-up installed")
endif()
