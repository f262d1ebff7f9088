# One helper registers every multi-rank and whole-job test, so the mpirun line, the processor
# count, labels and timeouts are the same everywhere (docs/testing.md).
set(LFT_MPIEXEC_FLAGS --oversubscribe --bind-to none CACHE STRING "Flags for mpirun in tests")
set(LFT_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")

# lft_add_mpi_test(NAME n NP ranks COMMAND exe args... [LABELS l...] [TIMEOUT s]
#                  [EXPECT_EXIT code] [EXPECT_OUTPUT regex...])
# Without EXPECT_* the test passes when mpirun exits 0. With them, tests/e2e/expect.sh checks the
# exit status and that every regex occurs in the combined output.
function(lft_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;NP;TIMEOUT;EXPECT_EXIT" "COMMAND;LABELS;EXPECT_OUTPUT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(launch ${MPIEXEC_EXECUTABLE} ${LFT_MPIEXEC_FLAGS} -np ${T_NP} ${T_COMMAND})
  if(DEFINED T_EXPECT_EXIT OR T_EXPECT_OUTPUT)
    if(NOT DEFINED T_EXPECT_EXIT)
      set(T_EXPECT_EXIT 0)
    endif()
    set(patterns)
    foreach(p IN LISTS T_EXPECT_OUTPUT)
      list(APPEND patterns --expect "${p}")
    endforeach()
    set(launch ${CMAKE_SOURCE_DIR}/tests/e2e/expect.sh --exit ${T_EXPECT_EXIT} ${patterns} -- ${launch})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${launch} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${T_NAME} PROPERTIES PROCESSORS ${T_NP} LABELS "${T_LABELS}"
                       TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${LFT_TEST_ENV}")
endfunction()
