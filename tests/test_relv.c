/* test_relv.c — Shaw relative values (rel_values, runtime/relv.h) in C: the
 * parameter's description (name, shape [R+1, Dh], no weight decay, drawn by
 * mp_model_new_init), central finite differences of the float32 loss against
 * the backward for every entry of layer 0's rel_v and some of its wq and wv
 * (relative tolerance 2e-2), a whole-model check of every tensor
 * (tu_fd_model), a sliding-window model's rel_v, and the CUDA backend's
 * host-side routing (every forward of such a model on the CPU, naming
 * rel_values). Built again as test_relv_emu (MP_RELV_EMU) against the emulated
 * CUDA runtime: the move, the routed forward, the refused training step. */
#include "model.h"
#include "mp_cuda.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mp_config cfg(int R, int window) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 1; c.d_head = 8; c.d_mlp = 32; c.vocab = 13;
    c.ctx = 16; c.rope_theta = 100.0f; c.rel_values = R; c.sliding_window = window;
    return c;
}

static const mp_param_desc *find(const mp_param_desc *d, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(d[i].name, name)) return &d[i];
    return NULL;
}

/* FD of the loss w.r.t. entries idx[0..n) of tensor `name` (layer-0 slice) against the gradient */
static double fd_check(const char *label, mp_model *m, const char *name, const size_t *idx, int n, const int *tok,
                       const int *tgt, int B, int T) {
    const mp_config *c = &m->cfg;
    mp_acts A;
    mp_grads G;
    float loss;
    CHECK(mp_acts_init(&A, c, B, T) == MP_OK && mp_grads_init(&G, c) == MP_OK, "alloc: %s", mp_last_error());
    CHECK(mp_model_forward_backward(m, tok, tgt, B, T, NULL, &A, &G, 1.0f, &loss, NULL) == MP_OK, "%s: %s", label,
          mp_last_error());
    mp_param_desc d[MP_PARAM_MAX], gd[MP_PARAM_MAX];
    const int nd = mp_params_describe(c, &m->p, d);
    mp_params_describe(c, &G.g, gd);
    const mp_param_desc *p = find(d, nd, name), *g = find(gd, nd, name);
    double worst = 0.0;
    CHECK(p && g, "%s: no tensor %s", label, name);
    for (int s = 0; p && g && s < n; s++) {
        const float eps = 1e-2f, save = p->p[idx[s]];
        float lp, lm;
        p->p[idx[s]] = save + eps;
        mp_model_loss(m, tok, tgt, B, T, NULL, &lp);
        p->p[idx[s]] = save - eps;
        mp_model_loss(m, tok, tgt, B, T, NULL, &lm);
        p->p[idx[s]] = save;
        const double fd = ((double)lp - lm) / (2.0 * eps), an = g->p[idx[s]];
        const double tol = 2e-2 * fmax(fabs(fd), fabs(an)) + 2e-4; /* + the float32 loss's noise / (2 eps) */
        if (fabs(an - fd) / tol > worst) worst = fabs(an - fd) / tol;
        CHECK(fabs(an - fd) <= tol, "%s: %s[%zu]: analytic %.6g vs fd %.6g", label, name, idx[s], an, fd);
    }
    mp_acts_free(&A);
    mp_grads_free(&G);
    return worst;
}

static void test_gradients(int window) {
    enum { R = 3, B = 2, T = 11 }; /* T > R + 1: the clipped row gets mass */
    mp_config c = cfg(R, window);
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 7, 0.4f) == MP_OK, "model: %s", mp_last_error());
    if (!m) return;
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 5 + 2) % c.vocab;
        tgt[i] = i % 5 == 4 ? -1 : (i * 7 + 1) % c.vocab;
    }
    const char *label = window ? "window 4" : "full";
    size_t idx[(R + 1) * 8];
    for (int i = 0; i < (R + 1) * 8; i++) idx[i] = (size_t)i; /* every entry of layer 0's rel_v */
    double w1 = fd_check(label, m, "blocks.%d.attn.rel_v", idx, (R + 1) * 8, tok, tgt, B, T);
    size_t some[8];
    for (int i = 0; i < 8; i++) some[i] = (size_t)(i * 37 + 5) % (2 * 8 * 16);
    double w2 = fd_check(label, m, "blocks.%d.attn.wq", some, 8, tok, tgt, B, T);
    for (int i = 0; i < 8; i++) some[i] = (size_t)(i * 29 + 3) % (8 * 16);
    double w3 = fd_check(label, m, "blocks.%d.attn.wv", some, 8, tok, tgt, B, T);
    printf("  %-8s finite differences, worst error / tolerance: rel_v %.3f, wq %.3f, wv %.3f\n", label, w1, w2, w3);
    if (!window) {
        tu_fd_result r = tu_fd_model("relv", m, tok, tgt, B, T, 1e-2f, 4, 0, 4321);
        printf("  every tensor (tu_fd_model): %d checked, worst error / tolerance %.3f\n", r.checked, r.worst);
    }
    mp_model_free(m);
}

static void test_describe(void) {
    mp_config c = cfg(3, 0);
    mp_model *m = NULL, *plain = NULL;
    CHECK(mp_model_new_init(&m, &c, 1, 0.02f) == MP_OK, "init: %s", mp_last_error());
    mp_config c0 = cfg(0, 0);
    CHECK(mp_model_new_init(&plain, &c0, 1, 0.02f) == MP_OK, "init plain: %s", mp_last_error());
    if (!m || !plain) return;
    mp_param_desc d[MP_PARAM_MAX], d0[MP_PARAM_MAX];
    const int n = mp_params_describe(&m->cfg, &m->p, d), n0 = mp_params_describe(&plain->cfg, &plain->p, d0);
    const mp_param_desc *r = find(d, n, "blocks.%d.attn.rel_v");
    CHECK(n == n0 + 1 && !find(d0, n0, "blocks.%d.attn.rel_v"), "one more tensor (%d vs %d)", n, n0);
    CHECK(r && r->per_layer && r->ndim == 2 && r->shape[0] == 4 && r->shape[1] == 8 && r->n == 2 * 4 * 8,
          "rel_v [L, R+1, Dh]");
    CHECK(r && r->decay == 0, "rel_v has no weight decay");
    CHECK(mp_config_n_params(&c) == mp_config_n_params(&c0) + 2 * 4 * 8, "parameter count");
    if (r) {
        double ss = 0.0;
        for (size_t i = 0; i < r->n; i++) ss += (double)r->p[i] * r->p[i];
        const double sd = sqrt(ss / r->n);
        CHECK(sd > 0.01 && sd < 0.03, "rel_v drawn with the init std 0.02 (sample std %.4f)", sd);
    }
    /* the other tensors are drawn as before (rel_v comes last in the generator's order) */
    for (int i = 0; i < n0; i++)
        CHECK(!memcmp(d0[i].p, find(d, n, d0[i].name)->p, d0[i].n * sizeof(float)), "%s as without rel_values",
              d0[i].name);
    /* the CUDA backend's host side: every forward of such a model stays on the CPU, naming the field */
    mp_forward_params fp = mp_forward_params_default();
    const char *why = mp_cuda_cpu_reason(m, &fp);
    CHECK(why && strstr(why, "rel_values (Shaw relative values) runs on the CPU only"), "cpu reason: %s",
          why ? why : "(none)");
    CHECK(mp_cuda_cpu_reason(plain, &fp) == NULL, "a plain model's call may run on the device");
    mp_model_free(m);
    mp_model_free(plain);
}

#ifdef MP_RELV_EMU
/* On the CUDA backend built against the emulated runtime (tests/cuda_emu): the model moves to the device, its
 * forward calls run on the CPU (the same logits as a CPU copy, to the bit), a training step is refused naming
 * rel_values, and the model is left as it was. */
static void test_device_emu(void) {
    mp_config c = cfg(2, 0);
    mp_model *m = NULL, *cpu = NULL;
    CHECK(mp_model_new_random(&m, &c, 3, 0.3f) == MP_OK && mp_model_new_random(&cpu, &c, 3, 0.3f) == MP_OK,
          "models: %s", mp_last_error());
    if (!m || !cpu) return;
    mp_status st = mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32);
    CHECK(st == MP_OK && m->device == MP_DEVICE_CUDA, "to cuda (emulated): %s", mp_last_error());
    enum { B = 2, T = 9 };
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % c.vocab, tgt[i] = (i * 5 + 1) % c.vocab;
    float lg[B * T * 13], lc[B * T * 13];
    mp_forward_params fp = mp_forward_params_default();
    CHECK(mp_model_forward_device(m, &fp) == MP_DEVICE_CPU, "the forward is routed to the CPU");
    CHECK(mp_model_forward(m, tok, B, T, NULL, lg) == MP_OK && mp_model_forward(cpu, tok, B, T, NULL, lc) == MP_OK,
          "forward: %s", mp_last_error());
    CHECK(!memcmp(lg, lc, sizeof lg), "a cuda model's logits are the CPU's");
    mp_adamw opt; /* sized by the first step */
    memset(&opt, 0, sizeof opt);
    opt.hp = mp_adamw_params_default();
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    float loss = -1.0f;
    st = mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &loss);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "rel_values (Shaw relative values) runs on the CPU only"),
          "training on cuda refused: %s", mp_last_error());
    CHECK(mp_model_forward(m, tok, B, T, NULL, lg) == MP_OK && !memcmp(lg, lc, sizeof lg), "the model unchanged");
    CHECK(mp_model_to_device(m, MP_DEVICE_CPU, MP_PRECISION_FP32) == MP_OK, "back to the CPU");
    st = mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &loss);
    CHECK(st == MP_OK && loss > 0.0f, "on the CPU it trains: %s", st ? mp_last_error() : "");
    printf("  emulated cuda: forward on the CPU, training refused there, a CPU step's loss %.4f\n", loss);
    mp_train_ws_free(&ws);
    mp_adamw_free(&opt);
    mp_model_free(m);
    mp_model_free(cpu);
}
#endif

int main(void) {
#ifdef MP_RELV_EMU
    test_device_emu();
    return tu_finish("test_relv_emu");
#endif
    test_describe();
    test_gradients(0);
    test_gradients(4);
    return tu_finish("test_relv");
}
