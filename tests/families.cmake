# tests/families.cmake — the sinks probe on every model family (tests/sinks_families.sh,
# a few seconds): each family's tiny reference model from tests/data, HF and GGUF.
add_test(NAME test_sinks_families
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sinks_families.sh $<TARGET_FILE:mechprobe>
                 ${CMAKE_CURRENT_SOURCE_DIR}/data ${CMAKE_CURRENT_BINARY_DIR}/sinks_families)
set_tests_properties(test_sinks_families PROPERTIES LABELS "lua")
