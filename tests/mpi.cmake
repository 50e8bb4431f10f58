# mpi.cmake — the MPI layer under `mpirun -np 2 --oversubscribe` (label mpi):
# data-parallel training, sweeps, split captures into one HDF5 file, and a
# failing or killed rank. Each test SKIPs (77) when mechprobe is built without
# MPI or mpirun cannot start two ranks here (tests/mpi/lib.sh).
function(mp_mpi_test name script)
  add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${script} $<TARGET_FILE:mechprobe>)
  set_tests_properties(${name} PROPERTIES LABELS "mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
      ENVIRONMENT "MP_SHARED_DIR=${MP_SHARED_DIR};MP_TESTDATA=${MP_TESTDATA};MP_SRC=${CMAKE_SOURCE_DIR}")
endfunction()
mp_mpi_test(test_mpi_dp test_dp.sh)
mp_mpi_test(test_mpi_capture test_capture.sh)
mp_mpi_test(test_mpi_faults test_faults.sh)
mp_mpi_test(test_mpi_create_fault test_create_fault.sh)
mp_mpi_test(test_mpi_sweep test_sweep.sh)
mp_mpi_test(test_mpi_probe_sweep test_probe_sweep.sh)
# The dataset capture without mpirun runs in every build (label lua).
add_test(NAME test_capture_serial COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_capture_serial.sh $<TARGET_FILE:mechprobe>)
set_tests_properties(test_capture_serial PROPERTIES LABELS "lua;fault" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
