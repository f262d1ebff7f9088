# One helper registers every multi-rank and whole-job test, so the mpirun line, the processor
# count, labels and timeouts are the same everywhere (docs/testing.md).
set(LFT_MPIEXEC_FLAGS --oversubscribe --bind-to none CACHE STRING "Flags for mpirun in tests")
set(LFT_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")

# lft_add_mpi_test(NAME n NP ranks COMMAND exe args... [LABELS l...] [TIMEOUT s] [ENV K=V...]
#                  [EXPECT_EXIT code|nonzero] [EXPECT_OUTPUT regex...] [REJECT_OUTPUT regex...])
# NP 0 runs the command without a launcher (a singleton). Without EXPECT_*/REJECT_* the test
# passes when the command exits 0; with them, tests/e2e/expect.sh checks the exit status, that
# every EXPECT regex occurs in the combined output and that no REJECT regex does.
function(lft_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;NP;TIMEOUT;EXPECT_EXIT"
                        "COMMAND;LABELS;ENV;EXPECT_OUTPUT;REJECT_OUTPUT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(T_NP EQUAL 0)
    set(launch ${T_COMMAND})
    set(procs 1)
  else()
    set(launch ${MPIEXEC_EXECUTABLE} ${LFT_MPIEXEC_FLAGS} -np ${T_NP} ${T_COMMAND})
    set(procs ${T_NP})
  endif()
  if(DEFINED T_EXPECT_EXIT OR T_EXPECT_OUTPUT OR T_REJECT_OUTPUT)
    if(NOT DEFINED T_EXPECT_EXIT)
      set(T_EXPECT_EXIT 0)
    endif()
    set(patterns)
    foreach(p IN LISTS T_EXPECT_OUTPUT)
      list(APPEND patterns --expect "${p}")
    endforeach()
    foreach(p IN LISTS T_REJECT_OUTPUT)
      list(APPEND patterns --reject "${p}")
    endforeach()
    set(launch ${CMAKE_SOURCE_DIR}/tests/e2e/expect.sh --exit ${T_EXPECT_EXIT} ${patterns} -- ${launch})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${launch} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${T_NAME} PROPERTIES PROCESSORS ${procs} LABELS "${T_LABELS}"
                       TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${LFT_TEST_ENV};${T_ENV}")
endfunction()
