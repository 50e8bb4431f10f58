# python_extra.cmake — pytest files of the Python module's API beyond hooks
# (tests/python/test_extra_*.py: interventions, capture, weights, saving,
# training, analyses), each a ctest `python_extra_<name>` that runs
# /usr/bin/python3 -m pytest on it with the built package on PYTHONPATH, the
# shared models' folder and the mechprobe binary (the Lua reference) in the
# environment. Under MP_SANITIZE the extension is ASan-instrumented and python
# is not: the ASan runtime is preloaded (LD_PRELOAD) and leak detection is off
# (CPython's own allocations would be reported). Registered only when the module
# is built (MP_HAVE_PYTHON); tests that need ../shared's model skip without it.
if(MP_HAVE_PYTHON)
  set(_mpx_env "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "MP_SHARED_DIR=${MP_SHARED_DIR}"
               "MECHPROBE_BIN=$<TARGET_FILE:mechprobe>" "PYTHONDONTWRITEBYTECODE=1")
  if(MP_SANITIZE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _mpx_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND _mpx_env "LD_PRELOAD=${_mpx_asan}" "ASAN_OPTIONS=detect_leaks=0"
                         "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  file(GLOB _mpx_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/test_extra_*.py)
  foreach(_f ${_mpx_tests})
    get_filename_component(_n ${_f} NAME_WE)
    string(REGEX REPLACE "^test_extra_" "" _n ${_n})
    add_test(NAME python_extra_${_n}
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${_f})
    set_tests_properties(python_extra_${_n} PROPERTIES LABELS "python" ENVIRONMENT "${_mpx_env}"
                         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} TIMEOUT 600)
  endforeach()
endif()
