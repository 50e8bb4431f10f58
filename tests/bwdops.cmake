# bwdops.cmake — the backward walk over an operations table (runtime/backward.h mp_bwd_ops): a table
# with only the training steps (the CUDA backend's shape) gives mp_backward's bytes, entered at the
# logits or (the caller's classifier) at the final norm, and refuses hooks, input-gradient-only calls
# and row-factor variants with a message. The CUDA table itself: test_gpu_train_emu, test_gpu_train.
mp_c_test(test_bwdops "grad;unit" test_bwdops.c)
