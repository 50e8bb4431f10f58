# trainloop.cmake — the training loop and the capture workflow as C entry
# points (mpi/trainloop.h, mpi/capture.h), tested without Lua: the loop
# against manual mp_train_step calls bit for bit, the capture's files against a
# plain forward with hooks.
mp_c_test(test_trainloop "unit;train" test_trainloop.c)
mp_c_test(test_capture_run "unit;fault" test_capture_run.c)
