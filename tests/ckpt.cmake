# ckpt.cmake — untrusted HDF5 checkpoints and HDF5 write faults (issue 17):
# hostile checkpoints made with the HDF5 C API (test_ckpt_fault.c), a full
# disk / file-size limit during run-file and checkpoint writes from a Lua
# script (enospc.sh: a small tmpfs, skipped when it cannot be mounted, and a
# soft `ulimit -f`), and a bounded fuzz session of the checkpoint loader
# (fuzz_checkpoint.c with the plain mutation driver).
mp_c_test(test_ckpt_fault "unit;fault" test_ckpt_fault.c)
set_tests_properties(test_ckpt_fault PROPERTIES TIMEOUT 120)
add_test(NAME test_enospc COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/enospc.sh $<TARGET_FILE:mechprobe> ${MP_TESTDATA})
set_tests_properties(test_enospc PROPERTIES LABELS "fault" SKIP_RETURN_CODE 77 TIMEOUT 60)
add_executable(fuzz_checkpoint fuzz_checkpoint.c fuzz_driver.c)
target_link_libraries(fuzz_checkpoint PRIVATE mechprobe_core)
# seeds: a 1-layer checkpoint with /optim and /train written by this version,
# and an older one (variable-length string attributes, 1.6-era format objects)
add_test(NAME fuzz_checkpoint COMMAND fuzz_checkpoint -n 400000 -t 25
         ${MP_TESTDATA}/ckpt_fuzz_seed.h5 ${MP_TESTDATA}/train_ref_c.h5)
set_tests_properties(fuzz_checkpoint PROPERTIES LABELS "fault" TIMEOUT 120
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
