# device.cmake — device selection (runtime/device.h, backends/cuda/mp_cuda.h): host-side tests in the
# normal suite, and the `gpu` comparisons against the CPU (SKIP where no CUDA device exists).
mp_lua_test(test_device "lua;unit" lua/test_device.lua)
mp_c_test(test_device_c "unit" test_device.c)   # host side of device selection, the dispatch seam
mp_c_test(test_gpu "gpu" test_gpu.c)   # the CUDA forward against the CPU: SKIP (77) without a device
mp_lua_test(test_gpu_lua "gpu;lua" lua/test_gpu.lua)
# The same comparisons with the CPU on both sides: the gpu tests' own set-up, checked where no device is.
add_test(NAME test_gpu_dry COMMAND test_gpu --dry)
set_tests_properties(test_gpu_dry PROPERTIES LABELS "unit")
mp_lua_test(test_gpu_lua_dry "lua;unit" lua/test_gpu.lua --dry)

# The CUDA backend on the CPU (tests/cuda_emu): backends/cuda's host code and kernels, built against
# an emulation of the CUDA runtime and cuBLAS instead of the device, run by test_gpu's comparisons
# with the CPU. Checks the backend's logic everywhere the toolkit's headers are; the device checks
# the rest (concurrency, timing, speed).
if(MP_HAVE_CUDA)
  add_library(mp_cuda_emu OBJECT ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_model.c
              ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_select.c
              ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/kernels_emu.cpp ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/train_kernels_emu.cpp
              ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/cuda_emu.cpp)
  # the kernels' registers and shared memory as ptxas gives them, for the emulator's launch checks
  list(GET CMAKE_CUDA_ARCHITECTURES 0 _mp_arch)
  string(REGEX REPLACE "[^0-9].*" "" _mp_arch "${_mp_arch}")
  set(_mp_cu ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_kernels.cu ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_train_kernels.cu)
  add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/cuda_resources.txt
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/resources.sh ${CMAKE_CUDA_COMPILER} ${_mp_arch}
            ${CMAKE_CURRENT_BINARY_DIR}/cuda_resources.txt ${_mp_cu}
    DEPENDS ${_mp_cu} ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_common.cuh ${CMAKE_SOURCE_DIR}/backends/cuda/cuda_kernels.h
            ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/resources.sh
    COMMENT "ptxas resource usage of the CUDA kernels (sm_${_mp_arch}) for the emulator's launch checks")
  add_custom_target(mp_cuda_resources DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/cuda_resources.txt)
  add_dependencies(mp_cuda_emu mp_cuda_resources)
  target_compile_definitions(mp_cuda_emu PRIVATE MP_HAVE_CUDA=1 MP_CUDA_EMU=1
                             MP_CUDA_EMU_RESOURCES_FILE="${CMAKE_CURRENT_BINARY_DIR}/cuda_resources.txt")
  target_include_directories(mp_cuda_emu PRIVATE ${CMAKE_SOURCE_DIR}/backends/cuda ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu
                             ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(mp_cuda_emu PRIVATE mp_runtime PkgConfig::OPENBLAS)
  set_target_properties(mp_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_compile_options(mp_cuda_emu PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>)
  # the emulation's objects come first: they define what mp_cuda's would (nothing of libcudart is pulled)
  add_executable(test_gpu_emu test_gpu.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_gpu_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_gpu_emu PRIVATE MP_SHARED_DIR="${MP_SHARED_DIR}" MP_TESTDATA="${MP_TESTDATA}")
  set_target_properties(test_gpu_emu PROPERTIES LINKER_LANGUAGE CXX)
  # the emulator's own strictness, each shown on a planted defect (tests/cuda_emu/test_cuda_emu.cpp)
  add_executable(test_cuda_emu ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/test_cuda_emu.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu/cuda_emu.cpp)
  target_compile_definitions(test_cuda_emu PRIVATE MP_CUDA_EMU=1)
  target_include_directories(test_cuda_emu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(test_cuda_emu PRIVATE PkgConfig::OPENBLAS)
  set_target_properties(test_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  add_test(NAME test_cuda_emu COMMAND test_cuda_emu)
  set_tests_properties(test_cuda_emu PROPERTIES LABELS "unit")
  # the training kernels against ops_backward.c / optim.c: on a device (gpu) and emulated (unit)
  mp_c_test(test_cuda_train_ops "gpu" test_cuda_train_ops.c)
  target_include_directories(test_cuda_train_ops PRIVATE ${CMAKE_SOURCE_DIR}/backends/cuda ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(test_cuda_train_ops PRIVATE CUDA::cudart_static)
  add_executable(test_cuda_train_ops_emu test_cuda_train_ops.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_include_directories(test_cuda_train_ops_emu PRIVATE ${CMAKE_SOURCE_DIR}/backends/cuda ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(test_cuda_train_ops_emu PRIVATE mp_testutil mechprobe_lua)
  set_target_properties(test_cuda_train_ops_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_cuda_train_ops_emu COMMAND test_cuda_train_ops_emu)
  set_tests_properties(test_cuda_train_ops_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77)
  # training steps on the device against the CPU's: on a device (gpu) and emulated (unit)
  mp_c_test(test_gpu_train "gpu" test_gpu_train.c)
  add_executable(test_gpu_train_emu test_gpu_train.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(test_gpu_train_emu PRIVATE mp_testutil mechprobe_lua)
  target_compile_definitions(test_gpu_train_emu PRIVATE BF16_STEPS=40)  # 200 on a device
  set_target_properties(test_gpu_train_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_gpu_train_emu COMMAND test_gpu_train_emu)
  set_tests_properties(test_gpu_train_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77)
  add_test(NAME test_gpu_emu COMMAND test_gpu_emu)
  set_tests_properties(test_gpu_emu PROPERTIES LABELS "unit" SKIP_RETURN_CODE 77
                       WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  # mechprobe itself on the emulated device: the Lua API's device paths (test_gpu.lua)
  add_executable(mechprobe_emu ${CMAKE_SOURCE_DIR}/lua/main.c $<TARGET_OBJECTS:mp_cuda_emu>)
  target_link_libraries(mechprobe_emu PRIVATE mechprobe_lua)
  target_compile_definitions(mechprobe_emu PRIVATE MP_PROBE_DIR="${MP_PROBE_DIR}")
  set_target_properties(mechprobe_emu PROPERTIES LINKER_LANGUAGE CXX)
  add_test(NAME test_gpu_lua_emu COMMAND mechprobe_emu ${CMAKE_CURRENT_SOURCE_DIR}/lua/test_gpu.lua)
  set_tests_properties(test_gpu_lua_emu PROPERTIES LABELS "lua;unit" SKIP_RETURN_CODE 77
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
      ENVIRONMENT "MP_SHARED_DIR=${MP_SHARED_DIR};MP_TESTDATA=${MP_TESTDATA};MP_SRC=${CMAKE_SOURCE_DIR}")
endif()
