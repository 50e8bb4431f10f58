# views.cmake — Tensor views and their storage (lua/ltensor.c): views of views of
# m:param and of a hook's view invalidated with the memory they view, logits a
# metric closes in mp.attribution_patch, ops on Tensors with no elements but a
# huge extent (a TIMEOUT turns a loop over 2^50 rows into a failure), a Tensor
# closed by a metamethod its own method runs, and the seeded random fuzzer of
# the Tensor API as a short run under a memory cap.
mp_lua_test(views_params "fault;lua" lua/views_params.lua)
mp_lua_test(views_hooks "fault;lua" lua/views_hooks.lua)
mp_lua_test(views_attr "fault;lua" lua/views_attr.lua)
mp_lua_test(views_close "fault;lua" lua/views_close.lua)
mp_lua_test(views_zero "fault;lua" lua/views_zero.lua)
set_tests_properties(views_zero PROPERTIES TIMEOUT 60)

# The fuzzer: 3000 calls or 3 s of CPU from a fixed seed, in at most 1.5 GiB of
# address space (ulimit -v) so that a huge allocation fails at once instead of
# paging; under the sanitizers (which reserve terabytes of address space) the
# cap is ASan's own: allocations past 1 GiB return NULL.
# By hand: mechprobe tests/lua/fuzz_tensor.lua --long 300 (it caps itself the same way;
# under an ASan build set ASAN_OPTIONS as below).
if(MP_SANITIZE)
  add_test(NAME fuzz_tensor COMMAND mechprobe ${CMAKE_CURRENT_SOURCE_DIR}/lua/fuzz_tensor.lua --seed 1 --calls 3000
           --seconds 3)
  set(MP_FUZZ_ENV "FUZZ_TENSOR_CAPPED=1;ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=1024:detect_leaks=1")
else()
  add_test(NAME fuzz_tensor COMMAND sh -c "ulimit -v 1500000 && exec \"$0\" \"$@\"" $<TARGET_FILE:mechprobe>
           ${CMAKE_CURRENT_SOURCE_DIR}/lua/fuzz_tensor.lua --seed 1 --calls 3000 --seconds 3)
  set(MP_FUZZ_ENV "FUZZ_TENSOR_CAPPED=1")
endif()
set_tests_properties(fuzz_tensor PROPERTIES LABELS "fault;lua" TIMEOUT 120
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
    ENVIRONMENT "MP_SHARED_DIR=${MP_SHARED_DIR};MP_TESTDATA=${MP_TESTDATA};MP_SRC=${CMAKE_SOURCE_DIR};${MP_FUZZ_ENV}")
