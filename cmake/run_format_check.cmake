# ctest driver: every C++/CUDA source under include/, testing/, src/, examples/, tests/ and benchmarks/ is formatted
# as .clang-format says (clang-format --dry-run --Werror lists what is not).
file(GLOB_RECURSE sources ${SOURCE}/include/*.hpp ${SOURCE}/include/*.cuh ${SOURCE}/include/*.inl
     ${SOURCE}/testing/*.hpp ${SOURCE}/testing/*.inl ${SOURCE}/testing/*.cpp ${SOURCE}/src/*.cpp
     ${SOURCE}/examples/*.cu ${SOURCE}/tests/*.hpp ${SOURCE}/tests/*.cuh ${SOURCE}/tests/*.cu ${SOURCE}/tests/*.cpp
     ${SOURCE}/benchmarks/*.hpp ${SOURCE}/benchmarks/*.cuh ${SOURCE}/benchmarks/*.cu ${SOURCE}/benchmarks/*.cpp)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${sources} RESULT_VARIABLE rc ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "not formatted (run clang-format -i on these):\n${out}")
endif()
