# tests/gguf.cmake — the model-file layer: ggml types and dequantisation
# (runtime/quant.c), GGUF reader/writer (formats/gguf.c, gguf_write.c; the
# real-shape random models of bench/shape_gguf.c), strict
# JSON and safetensors (base/json.c, formats/safetensors.c), and bounded
# fuzzing sessions of both parsers (tests/fuzz_*.c; the plain driver runs a
# deterministic mutation loop; see the headers of fuzz_gguf.c and
# fuzz_safetensors.c for the libFuzzer build with clang).
mp_c_test(test_quant "unit" test_quant.c)
mp_c_test(test_qdot "unit;golden" test_qdot.c)
mp_c_test(test_qmodel "unit;golden" test_qmodel.c)
mp_c_test(test_gguf "unit;fault" test_gguf.c)
mp_c_test(test_safetensors "unit;fault" test_safetensors.c)
# bench_gen --mode make-shape's writer (bench/shape_gguf.c), built into the test
mp_c_test(test_shape_gguf "unit" test_shape_gguf.c ${CMAKE_SOURCE_DIR}/bench/shape_gguf.c)
target_include_directories(test_shape_gguf PRIVATE ${CMAKE_SOURCE_DIR}/bench)

foreach(target gguf safetensors)
  add_executable(fuzz_${target} fuzz_${target}.c fuzz_driver.c)
  target_link_libraries(fuzz_${target} PRIVATE mechprobe_core)
endforeach()
add_test(NAME fuzz_gguf COMMAND fuzz_gguf -n 400000 -t 8
         ${MP_TESTDATA}/gguf_fixture.gguf ${MP_TESTDATA}/gguf_fixture_small.gguf)
add_test(NAME fuzz_safetensors COMMAND fuzz_safetensors -n 400000 -t 8 ${MP_TESTDATA}/gguf_fixture.safetensors)
set_tests_properties(fuzz_gguf fuzz_safetensors PROPERTIES LABELS "fault" TIMEOUT 120
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
