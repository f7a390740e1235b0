# Runs one test of a test binary in two processes, with FLEXKIT_NUM_THREADS=1 and then 3 (the CPU
# backend cuts its work by the thread count, which is fixed for a process): the first records
# its results in FILE, the second compares its own against them.
#   cmake -DEXE=<test binary> -DFILTER=<gtest filter> -DFILE=<scratch file> -P <this file>
file(REMOVE "${FILE}")
foreach(step "1;record" "3;compare")
  list(GET step 0 threads)
  list(GET step 1 mode)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env FLEXKIT_NUM_THREADS=${threads}
            FLEXKIT_TEST_RESULTS_FILE=${FILE} FLEXKIT_TEST_RESULTS_MODE=${mode}
            "${EXE}" --device=cpu "--gtest_filter=${FILTER}"
    RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    file(REMOVE "${FILE}")
    message(FATAL_ERROR "${FILTER} failed with FLEXKIT_NUM_THREADS=${threads} (${mode}):\n${output}")
  endif()
  # A filter that matches nothing passes in gtest; here it must fail, as must a record step
  # that wrote nothing for the compare step to check against.
  string(REGEX MATCH "\\[  PASSED  \\] ([0-9]+) test" passed "${output}")
  if(NOT passed OR CMAKE_MATCH_1 EQUAL 0)
    file(REMOVE "${FILE}")
    message(FATAL_ERROR "${FILTER} ran no test with FLEXKIT_NUM_THREADS=${threads}:\n${output}")
  endif()
  if(mode STREQUAL "record" AND NOT EXISTS "${FILE}")
    message(FATAL_ERROR "${FILTER} recorded no results in ${FILE}")
  endif()
endforeach()
file(REMOVE "${FILE}")
