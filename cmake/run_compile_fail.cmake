# ctest driver for one compile-fail case: compile SOURCE with the misuse switched on and require
# both a failed compile and EXPECT in the compiler's output; then compile it with the misuse off
# and require success, so the failure is the misuse's and not some unrelated error.
execute_process(COMMAND ${COMPILER} ${FLAGS} -DGPUCOMM_MISUSE=1 -c ${SOURCE} -o ${OUTPUT}
                RESULT_VARIABLE bad_rc OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_err)
if(bad_rc EQUAL 0)
  message(FATAL_ERROR "the misuse in ${SOURCE} compiled; it must not")
endif()
string(FIND "${bad_out}${bad_err}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the compiler rejected ${SOURCE} but without the message\n  ${EXPECT}\nit said:\n${bad_out}${bad_err}")
endif()
execute_process(COMMAND ${COMPILER} ${FLAGS} -c ${SOURCE} -o ${OUTPUT}
                RESULT_VARIABLE good_rc OUTPUT_VARIABLE good_out ERROR_VARIABLE good_err)
if(NOT good_rc EQUAL 0)
  message(FATAL_ERROR "the control build of ${SOURCE} (misuse off) failed:\n${good_out}${good_err}")
endif()
