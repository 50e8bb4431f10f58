# inputs3.cmake — inputs that never end and the process environment (reliability
# issue, "inputs3"), label fault, each with a TIMEOUT so that a hang fails:
# FIFOs, /dev/zero and folders given as --text-file / --tokens-file / --corpus,
# command-line numbers that wrap or are out of range, a stray
# MECHPROBE_CHECKPOINT_READER, the loader's time limit scaled to the file, an
# unreadable model, a llama2.c file truncated while loaded, and (under mpirun,
# label mpi too) a stopped rank.
mp_lua_test(test_inputs3 "fault;lua" lua/test_inputs3.lua)
set_tests_properties(test_inputs3 PROPERTIES TIMEOUT 900)
mp_c_test(test_inputs3_ckpt "unit;fault" test_inputs3_ckpt.c)
set_tests_properties(test_inputs3_ckpt PROPERTIES TIMEOUT 120)
add_test(NAME test_inputs3_mpi_stopped COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_stopped_rank.sh $<TARGET_FILE:mechprobe>)
set_tests_properties(test_inputs3_mpi_stopped PROPERTIES LABELS "mpi;fault" SKIP_RETURN_CODE 77 TIMEOUT 200
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
    ENVIRONMENT "MP_SHARED_DIR=${MP_SHARED_DIR};MP_TESTDATA=${MP_TESTDATA};MP_SRC=${CMAKE_SOURCE_DIR}")
