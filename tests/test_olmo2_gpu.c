/* test_olmo2_gpu.c — the CUDA backend's forward of OLMo 2 against the CPU's
 * (tests/olmo2.cmake): built against the CUDA emulation (tests/cuda_emu,
 * test_olmo2_gpu_emu) and, with the toolkit, for a device (test_olmo2_gpu,
 * SKIP 77 where none is). The test model of tests/tools/make_arch_ref_olmo2.py
 * (no pre-norms, post-norms, the q/k norm over the whole projections), from
 * its HF folder and its GGUF file, moves to the device in fp32: every hook
 * point ("*": the post-norm and q/k norm points included, no ln1 / ln2) and
 * the logits equal the CPU's within TOL_REL of the tensor's largest
 * magnitude, for one query block and blocks of 4 rows; the KV-cached decode's
 * last logits equal the CPU's prefill; the device's training step refuses the
 * block without pre-norms by name. */
#include "model.h"
#include "mp_cuda.h"
#include "testutil.h"
#include "tu_arch.h"

#include <stdio.h>

/* fp32 on both sides; products summed in other orders (cuBLAS vs OpenBLAS) */
#define TOL_REL 2e-5

static void compare(const char *path, const char *label) {
    const tu_cuda_opts o = {.tol_rel = TOL_REL, .count = {"_post.hook_", "_norm.hook_normalized"},
                            .absent = {".ln1.", ".ln2."}, .train_refusal = {"OLMo 2", "pre_norms"}};
    tu_cuda_result r = tu_cuda_compare(path, label, &o);
    for (int k = 0; r.ok && k < 2; k++)
        CHECK(r.counted[k][0] == 4 * r.cfg.n_layer && r.counted[k][1] == 2 * r.cfg.n_layer,
              "%s: %d post-norm and %d q/k norm points compared", label, r.counted[k][0], r.counted[k][1]);
}

int main(void) {
    if (mp_cuda_available() != MP_OK) {
        printf("SKIP: %s\n", mp_last_error());
        return 77;
    }
    compare(tu_data("arch_olmo2"), "olmo2");
    compare(tu_data("arch_olmo2.gguf"), "olmo2 GGUF");
    return tu_finish("test_olmo2_gpu");
}
