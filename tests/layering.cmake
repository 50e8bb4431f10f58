# tests/layering.cmake — the build enforces the layering: each layer library
# sees only its own headers and those of the layers below it (CMakeLists.txt).
# Each case compiles `#include "HEADER"` with a layer library's include
# directories: a higher layer's header must be missing, an own or lower one found.
set(_mp_layer_cases
  mp_base    fail model.h      mp_base    fail mp_hooks.h   mp_base   ok   mp_common.h
  mp_runtime ok   model.h      mp_runtime ok   mp_hooks.h   mp_runtime fail h5io.h
  mp_runtime fail checkpoint.h mp_runtime fail figure.h     mp_runtime fail mp_lua.h
  mp_runtime fail mp_mpi.h     mp_runtime fail stats.h      mp_runtime fail algebra.h
  mp_runtime fail mp_cuda.h    mp_base    fail mp_cuda.h    mp_cuda   ok   mp_cuda.h
  mp_cuda    ok   model.h      mp_cuda    ok   mp_hooks.h   mp_cuda   fail h5io.h
  mp_cuda    fail mp_lua.h     mp_cuda    fail mp_mpi.h     mp_cuda   fail figure.h
  mp_io      fail mp_cuda.h
  mp_io      ok   h5run.h      mp_io      ok   model.h      mp_io     fail mp_mpi.h
  mp_io      fail mp_lua.h     mp_io      fail figure.h
  mp_tasks   ok   algebra.h    mp_tasks   fail model.h      mp_tasks  fail h5io.h
  mp_analyze ok   stats.h      mp_analyze fail model.h      mp_analyze fail h5io.h
  mp_plots   ok   figure.h     mp_plots   fail model.h      mp_plots  fail h5io.h
  mechprobe_mpi ok h5run.h     mechprobe_mpi fail mp_lua.h
  mechprobe_lua ok mp_mpi.h     mechprobe_lua ok mp_cuda.h
  mp_base    ok   json.h       mp_base    fail tok.h        mp_base   fail formats.h
  mp_tokenizers ok tok.h       mp_tokenizers ok json.h      mp_tokenizers fail model.h
  mp_tokenizers fail formats.h mp_runtime fail tok.h        mp_runtime fail formats.h
  mp_runtime fail gguf.h       mp_runtime fail safetensors.h
  mp_formats ok   formats.h    mp_formats ok   model.h      mp_formats ok   tok.h
  mp_formats fail h5io.h       mp_formats fail mp_cuda.h    mp_formats fail mp_lua.h
  mp_cuda    fail formats.h    mp_io      ok   formats.h    mp_io     ok   sandbox.h
  mp_runtime fail sandbox.h    mp_io      fail trainloop.h  mechprobe_mpi ok trainloop.h
  mp_analyze ok   tensor.h     mp_runtime fail tensor.h     mechprobe_lua ok tensor.h
  mp_view    ok   view.h       mp_view    ok   h5io.h       mp_view   ok   geometry.h
  mp_view    fail mp_lua.h     mp_view    fail mp_mpi.h     mp_view   fail figure.h
  mp_io      fail view.h       mp_analyze fail view.h       mp_plots  fail view.h
  mechprobe_mpi fail view.h
  mechprobe_lua ok view.h)
set(_mp_layer_args)
list(LENGTH _mp_layer_cases _n)
math(EXPR _last "${_n} - 1")
foreach(i RANGE 0 ${_last} 3)
  math(EXPR j "${i} + 1")
  math(EXPR k "${i} + 2")
  list(GET _mp_layer_cases ${i} _lib)
  list(GET _mp_layer_cases ${j} _exp)
  list(GET _mp_layer_cases ${k} _hdr)
  list(APPEND _mp_layer_args ${_lib} ${_exp} ${_hdr}
       "$<JOIN:$<TARGET_PROPERTY:${_lib},INCLUDE_DIRECTORIES>,:>")
endforeach()
add_test(NAME layering COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/layering.sh ${_mp_layer_args})
set_tests_properties(layering PROPERTIES LABELS "unit" ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
# ... and no quoted include reaches around it by a relative path ("../io/x.h", "runtime/x.h")
add_test(NAME layering_includes COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/layering_includes.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(layering_includes PROPERTIES LABELS "unit")
