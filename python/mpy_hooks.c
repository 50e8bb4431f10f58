/* mpy_hooks.c — the Model's calls that run with hook points: run_with_cache
 * (activations into numpy arrays) and run_with_hooks (Python functions at hook
 * points, TransformerLens's fn(act, hook) contract), their backward
 * counterparts, over the C core's hook registry (hooks/mp_hooks.h). */
#include "mpy.h"

PyMethodDef mpy_hooks_methods[] = {
    {NULL, NULL, 0, NULL}};
