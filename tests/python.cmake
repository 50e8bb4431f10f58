# python.cmake — the Python module's tests (tests/python/test_*.py, pytest),
# each a ctest running `python -m pytest -q FILE` against the module built in
# ${CMAKE_BINARY_DIR}/python, only when the module is built (MP_HAVE_PYTHON) and
# pytest and h5py import. Environment: PYTHONPATH, MP_SHARED_DIR (the models;
# a test whose model is absent skips), MP_CLI (the mechprobe binary: the tests
# compare with the Lua binding's results).
#
# Under MP_SANITIZE the extension is instrumented but python is not: the ASan
# runtime must be loaded first (LD_PRELOAD=$(cc -print-file-name=libasan.so)),
# and leak checking is off (the interpreter keeps its allocations at exit).
if(MP_HAVE_PYTHON)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pytest, h5py" RESULT_VARIABLE MP_PY_TESTS_RC
                  OUTPUT_QUIET ERROR_QUIET)
  if(NOT MP_PY_TESTS_RC EQUAL 0)
    message(STATUS "mechprobe: Python tests off (${Python3_EXECUTABLE} lacks pytest or h5py: Debian's python3-pytest "
                   "python3-h5py)")
  else()
    set(MP_PY_ENV "PYTHONPATH=${CMAKE_BINARY_DIR}/python" "PYTHONDONTWRITEBYTECODE=1"
                  "MP_SHARED_DIR=${MP_SHARED_DIR}" "MP_CLI=$<TARGET_FILE:mechprobe>")
    if(MP_SANITIZE)
      execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE MP_LIBASAN
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      list(APPEND MP_PY_ENV "LD_PRELOAD=${MP_LIBASAN}" "ASAN_OPTIONS=detect_leaks=0"
                             "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    endif()
    # Each tests/python/test_NAME.py is the ctest test_python_NAME.
    file(GLOB MP_PY_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/test_*.py)
    foreach(f ${MP_PY_TESTS})
      get_filename_component(n ${f} NAME_WE)
      string(REGEX REPLACE "^test_" "" n ${n})
      add_test(NAME test_python_${n} COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${f})
      set_tests_properties(test_python_${n} PROPERTIES LABELS "python" ENVIRONMENT "${MP_PY_ENV}"
                           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} TIMEOUT 600)
    endforeach()
  endif()
endif()
