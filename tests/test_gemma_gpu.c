/* test_gemma_gpu.c — the CUDA backend's forward of Gemma and Gemma 2 against
 * the CPU's (tests/gemma.cmake): built against the CUDA emulation
 * (tests/cuda_emu, test_gemma_gpu_emu) and, with the toolkit, for a device
 * (test_gemma_gpu, SKIP 77 where none is). The test models of
 * tests/tools/make_arch_ref_gemma.py (the scaled embedding, GeGLU, (1 + w)
 * norms; Gemma 2's post-norms, soft caps, query scale) move to the device
 * in fp32: every hook point ("*": the post-norm points included) and the
 * logits equal the CPU's within TOL_REL of the tensor's largest magnitude,
 * for one query block and blocks of 4 rows; the KV-cached decode's last
 * logits equal the CPU's prefill; the device's training step refuses the
 * Gemma quirks by name. */
#include "model.h"
#include "mp_cuda.h"
#include "testutil.h"
#include "tu_arch.h"

#include <stdio.h>

/* fp32 on both sides; products summed in other orders (cuBLAS vs OpenBLAS) */
#define TOL_REL 2e-5

static void compare(const char *path, const char *label) {
    const tu_cuda_opts o = {.tol_rel = TOL_REL, .count = {"_post.hook_"}, .train_refusal = {"Gemma"}};
    tu_cuda_result r = tu_cuda_compare(path, label, &o);
    for (int k = 0; r.ok && k < 2; k++)
        CHECK(!r.cfg.post_norms || r.counted[k][0] == 4 * r.cfg.n_layer, "%s: %d post-norm points compared", label,
              r.counted[k][0]);
}

int main(void) {
    if (mp_cuda_available() != MP_OK) {
        printf("SKIP: %s\n", mp_last_error());
        return 77;
    }
    compare(tu_data("arch_gemma"), "gemma");
    compare(tu_data("arch_gemma2"), "gemma2");
    compare(tu_data("arch_gemma3"), "gemma3"); /* q/k norms, the sliding layers' own RoPE base, a window of 4 */
    return tu_finish("test_gemma_gpu");
}
