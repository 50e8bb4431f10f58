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
#include "model_io.h"
#include "mp_cuda.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 on both sides; products summed in other orders (cuBLAS vs OpenBLAS) */
#define TOL_REL 2e-5

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static float *run(const mp_model *m, const int *toks, int T, int q_block, tu_capture *cap) {
    float *logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = q_block;
    CHECK(mp_model_forward(m, toks, 1, T, &fp, logits) == MP_OK, "forward: %s", mp_last_error());
    mp_hooks_free(hs);
    return logits;
}

static void compare(const char *path, const char *label) {
    mp_model *m = NULL;
    if (mp_model_load(&m, path)) {
        CHECK(0, "load %s: %s", path, mp_last_error());
        return;
    }
    const int T = 12, V = m->cfg.vocab;
    int toks[12] = {3, 17, 42, 5, 5, 63, 0, 28, 11, 50, 7, 33};
    static tu_capture cc[2], cg[2];
    memset(cc, 0, sizeof cc);
    memset(cg, 0, sizeof cg);
    float *lc[2], *lg[2];
    const int qbs[2] = {0, 4};
    for (int k = 0; k < 2; k++) lc[k] = run(m, toks, T, qbs[k], &cc[k]);
    float *full = lc[0];
    mp_status st = mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32);
    CHECK(st == MP_OK, "%s: to cuda: %s", label, mp_last_error());
    if (st) goto done;
    {
        mp_hooks *hs = mp_hooks_new(&m->cfg);
        mp_hooks_add(hs, "*", tu_capture_cb, &cg[0]);
        mp_forward_params fp = mp_forward_params_default();
        fp.hooks = hs;
        CHECK(mp_model_forward_device(m, &fp) == MP_DEVICE_CUDA, "%s: a forward hooking \"*\" runs on the device",
              label);
        mp_hooks_free(hs);
        tu_capture_free(&cg[0]);
        memset(&cg[0], 0, sizeof cg[0]);
    }
    for (int k = 0; k < 2; k++) {
        lg[k] = run(m, toks, T, qbs[k], &cg[k]);
        CHECK(cc[k].n == cg[k].n, "%s: %d points on the CPU, %d on the device", label, cc[k].n, cg[k].n);
        double worst = 0;
        int post = 0;
        for (int i = 0; i < cc[k].n; i++) {
            size_t n;
            const float *g = tu_capture_get(&cg[k], cc[k].name[i], &n);
            CHECK(g && n == cc[k].numel[i], "%s: %s missing on the device", label, cc[k].name[i]);
            if (!g || n != cc[k].numel[i]) continue;
            const double d = tu_max_abs_diff(g, cc[k].buf[i], n) / fmax(1.0, max_abs(cc[k].buf[i], n));
            CHECK(d <= TOL_REL, "%s (q_block %d): %s relative |diff| %.3g", label, qbs[k], cc[k].name[i], d);
            if (d > worst) worst = d;
            post += strstr(cc[k].name[i], "_post.hook_") != NULL;
        }
        const double d = tu_max_abs_diff(lg[k], lc[k], (size_t)T * V) / fmax(1.0, max_abs(lc[k], (size_t)T * V));
        CHECK(d <= TOL_REL, "%s (q_block %d): logits relative |diff| %.3g", label, qbs[k], d);
        if (d > worst) worst = d;
        CHECK(!m->cfg.post_norms || post == 4 * m->cfg.n_layer, "%s: %d post-norm points compared", label, post);
        printf("%s (q_block %d): %d hook points + logits, cuda vs cpu worst relative |diff| %.2e (tol %.0e)\n",
               label, qbs[k], cc[k].n, worst, TOL_REL);
        free(lg[k]);
    }
    { /* decoding on the device: prefill 5, then one token at a time (last logits) */
        mp_kvcache kc;
        CHECK(mp_kvcache_init(&kc, &m->cfg, 1, T) == MP_OK, "%s", mp_last_error());
        float *step = malloc((size_t)5 * V * sizeof(float));
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kc;
        CHECK(mp_model_forward(m, toks, 1, 5, &fp, step) == MP_OK, "%s", mp_last_error());
        const double scale = fmax(1.0, max_abs(full, (size_t)T * V));
        double worst = tu_max_abs_diff(step, full, (size_t)5 * V) / scale;
        fp.logits = MP_LOGITS_LAST;
        for (int t = 5; t < T; t++) {
            CHECK(mp_model_forward(m, toks + t, 1, 1, &fp, step) == MP_OK, "%s", mp_last_error());
            const double d = tu_max_abs_diff(step, full + (size_t)t * V, V) / scale;
            if (d > worst) worst = d;
        }
        CHECK(worst <= TOL_REL, "%s: device decode vs CPU prefill relative |diff| %.3g", label, worst);
        printf("%s: device decode vs CPU prefill: relative |diff| %.2e\n", label, worst);
        free(step);
        mp_kvcache_free(&kc);
    }
    { /* the device's training step refuses the quirks by name */
        mp_adamw o;
        mp_train_ws w;
        memset(&o, 0, sizeof o);
        memset(&w, 0, sizeof w);
        o.hp = mp_adamw_params_default();
        int tgt[12];
        for (int i = 0; i < T; i++) tgt[i] = toks[(i + 1) % T];
        float loss = 0;
        st = mp_train_step(m, &o, &w, toks, tgt, 1, T, 1, NULL, &loss);
        CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "Gemma"), "%s: device train step: %s", label,
              st ? mp_last_error() : "trained");
        mp_train_ws_free(&w);
        mp_adamw_free(&o);
    }
done:
    for (int k = 0; k < 2; k++) {
        free(lc[k]);
        tu_capture_free(&cc[k]);
        tu_capture_free(&cg[k]);
    }
    mp_model_free(m);
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
