# tests/models.cmake — real-model formats and architectures (formats/load_gguf.c,
# load_hf.c, export_gguf.c): Qwen2 / GPT-2 golden activations from HF folders and
# GGUF files (tests/tools/make_arch_ref.py), round trips through the GGUF
# (F32/F16/Q8_0) and safetensors writers, exported tokenizers, gradients of the
# new parameters, malformed files. "shared" runs the aidreams260K round trip
# (SKIP without ../shared). The Lua test covers mp.load detection and tokenizers.
mp_c_test(test_models "unit;golden;fault" test_models.c)
add_test(NAME test_models_shared COMMAND test_models shared)
set_tests_properties(test_models_shared PROPERTIES LABELS "golden" SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
mp_lua_test(test_models_lua "lua;unit" lua/test_models.lua)
