# backward.cmake — the one backward walk (runtime/backward.c) with weight
# gradients and backward hooks together: no-edit hooks give the unhooked bytes,
# an edit propagates exactly into the weight gradients, and the staged steps
# agree with the fused ones.
mp_c_test(test_backward "grad;unit" test_backward.c)
