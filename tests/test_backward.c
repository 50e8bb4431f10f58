/* test_backward.c — the one backward walk (runtime/backward.c) with both of
 * its switches on: weight gradients and backward hooks together, which no
 * public entry point combines yet. For six configs (RMSNorm/SwiGLU/RoPE,
 * LayerNorm/GELU/learned positions/biases, GQA with tanh GELU, ssmax, MQA
 * asentmax, no MLP), from the same random d logits:
 *  1. reader hooks with no edit at every point whose step keeps the arithmetic
 *     of the unhooked walk (all but those of 3.) leave the weight gradients and the embedding
 *     gradient bit-identical to the walk without hooks;
 *  2. the last block's hook_resid_post multiplied by 2 doubles every weight
 *     gradient below it exactly (the backward is linear in the gradient, and
 *     scaling by 2 commutes with float rounding) and leaves the classifier's
 *     and the final norm's unchanged;
 *  3. with the points whose step has arithmetic of its own hooked (pattern,
 *     scores, the hook_scale points, hook_mlp_in, attn.hook_result), no edit,
 *     the weight gradients (the attention variant's per-head parameters
 *     included) agree with the unhooked walk to 1e-4 of each tensor's largest
 *     entry (float summation order only), and the final norm's weights, whose
 *     gradient is taken before any of them, exactly. */
#include "backward.h"
#include "grad.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 0.5);
}

static int noop_cb(void *u, const mp_hook_info *info, float *d) { (void)u; (void)info; (void)d; return 0; }
static int double_cb(void *u, const mp_hook_info *info, float *d) {
    (void)u;
    for (size_t i = 0; i < info->numel; i++) d[i] *= 2.0f;
    return 0;
}

/* points whose backward step is the unhooked one with the hook in between
 * (hook_mlp_in's branch sum rounds once more: no fused multiply-add into the
 * residual's gradient) */
static int plain_step(mp_hook_id id) {
    return id != MP_HOOK_PATTERN && id != MP_HOOK_ATTN_SCORES && id != MP_HOOK_LN1_SCALE && id != MP_HOOK_LN2_SCALE &&
           id != MP_HOOK_LNF_SCALE && id != MP_HOOK_RESULT && id != MP_HOOK_MLP_IN;
}
static void add_plain(void *u, mp_hook_id id, int layer, const char *name) {
    (void)name;
    if (plain_step(id)) mp_hooks_add_reader_at(u, id, layer, noop_cb, NULL);
}

/* max |a - b| over n floats, relative to max |b| (0 when b is all zero) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        md = fmax(md, fabs((double)a[i] - b[i]));
    }
    return mx > 0 ? md / mx : md;
}

static int in(const float *p, const float *base, size_t n) { return base && p >= base && p < base + n; }

static void run(const char *name, mp_config c, int B, int T) {
    mp_model *m = NULL;
    CHECK(mp_model_new_init(&m, &c, 1234, 0.05f) == MP_OK, "%s: init: %s", name, mp_last_error());
    if (!m) return;
    const int N = B * T, D = c.d_model, V = c.vocab;
    int *tok = malloc((size_t)N * sizeof(int));
    float *dl = malloc((size_t)N * V * sizeof(float));
    for (int i = 0; i < N; i++) tok[i] = (int)((i * 7919u + 13) % (unsigned)V);
    for (size_t i = 0; i < (size_t)N * V; i++) dl[i] = frand();
    mp_acts A;
    memset(&A, 0, sizeof A);
    mp_grads G0, G;
    CHECK(mp_acts_init(&A, &c, B, T) == MP_OK && mp_grads_init(&G0, &c) == MP_OK && mp_grads_init(&G, &c) == MP_OK,
          "%s: buffers", name);
    mp_forward_params fp = mp_forward_params_default();
    fp.acts = &A;
    CHECK(mp_model_forward(m, tok, B, T, &fp, NULL) == MP_OK, "%s: forward: %s", name, mp_last_error());
    const size_t n = G.n, nx = (size_t)N * D;
    float *dres0 = malloc(nx * sizeof(float));
    mp_backward_params bp = {&G0, tok, NULL, NULL};
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "%s: backward: %s", name, mp_last_error());
    memcpy(dres0, A.dresid, nx * sizeof(float));

    /* 1. no-edit readers at the plain steps: the same bytes */
    mp_hooks *hs = mp_hooks_new(&c);
    mp_hook_select(&c, MP_HOOK_GLOB_ALL, add_plain, hs, NULL, 0);
    CHECK(mp_hooks_count(hs) > 10 * c.n_layer, "%s: hooks registered (%d)", name, mp_hooks_count(hs));
    bp.grads = &G;
    bp.hooks = hs;
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "%s: backward with hooks: %s", name, mp_last_error());
    CHECK(memcmp(G.mem, G0.mem, n * sizeof(float)) == 0, "%s: weight gradients with no-edit hooks", name);
    CHECK(memcmp(A.dresid, dres0, nx * sizeof(float)) == 0, "%s: embedding gradient with no-edit hooks", name);
    mp_hooks_free(hs);

    /* 2. the top block's residual gradient doubled */
    hs = mp_hooks_new(&c);
    mp_hooks_add_at(hs, MP_HOOK_RESID_POST, c.n_layer - 1, double_cb, NULL);
    mp_grads_zero(&G);
    bp.hooks = hs;
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "%s: backward x2: %s", name, mp_last_error());
    size_t bad = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        const float *p = G.mem + i;
        const int above = in(p, G.g.unembed, (size_t)V * D) || in(p, G.g.lnf_w, (size_t)D) || in(p, G.g.lnf_b, (size_t)D);
        top += above;
        if (G.mem[i] != (above ? G0.mem[i] : 2.0f * G0.mem[i])) bad++;
    }
    CHECK(bad == 0, "%s: x2 at the top block: %zu of %zu weight gradients not exactly as expected", name, bad, n);
    CHECK(top > 0 && top < n, "%s: both sides of the edit counted (%zu of %zu above)", name, top, n);
    mp_hooks_free(hs);

    /* 3. the steps with arithmetic of their own, no edit */
    hs = mp_hooks_new(&c);
    CHECK(mp_hooks_add(hs, c.mlp == MP_MLP_NONE
                               ? "*attn.hook_pattern,*attn.hook_attn_scores,*hook_scale,blocks.*.attn.hook_result"
                               : "*attn.hook_pattern,*attn.hook_attn_scores,*hook_scale,blocks.*.attn.hook_result,"
                                 "*hook_mlp_in",
                       noop_cb, NULL) == MP_OK,
          "%s: add: %s", name, mp_last_error());
    mp_grads_zero(&G);
    bp.hooks = hs;
    CHECK(mp_backward(m, &A, dl, &bp) == MP_OK, "%s: backward staged: %s", name, mp_last_error());
    CHECK(memcmp(G.g.lnf_w, G0.g.lnf_w, (size_t)D * sizeof(float)) == 0, "%s: final norm weights exact", name);
    CHECK(rel_diff(G.g.embed, G0.g.embed, (size_t)V * D) <= 1e-4, "%s: embed %.3g", name,
          rel_diff(G.g.embed, G0.g.embed, (size_t)V * D));
    for (int l = 0; l < c.n_layer; l++) {
        const mp_layer_params a = mp_params_layer(&c, &G.g, l), b = mp_params_layer(&c, &G0.g, l);
        const int H = c.n_head, HD = H * c.d_head, KD = c.n_kv_head * c.d_head;
        struct { const char *what; const float *x, *y; size_t k; } t[] = {
            {"wq", a.wq, b.wq, (size_t)HD * D}, {"wk", a.wk, b.wk, (size_t)KD * D}, {"wv", a.wv, b.wv, (size_t)KD * D},
            {"wo", a.wo, b.wo, (size_t)D * HD}, {"ln1_w", a.ln1_w, b.ln1_w, (size_t)D},
            {"ln2_w", a.ln2_w, b.ln2_w, c.mlp == MP_MLP_NONE ? 0 : (size_t)D},
            {"w1", a.w1, b.w1, c.mlp == MP_MLP_NONE ? 0 : (size_t)c.d_mlp * D},
            {"bo", a.bo, b.bo, a.bo ? (size_t)D : 0},
            {"ssmax_s", a.ssmax_s, b.ssmax_s, a.ssmax_s ? (size_t)H : 0},
            {"as_delta", a.as_delta, b.as_delta, a.as_delta ? (size_t)H : 0},
            {"as_beta", a.as_beta, b.as_beta, a.as_beta ? (size_t)H : 0},
            {"as_gamma", a.as_gamma, b.as_gamma, a.as_gamma ? (size_t)H : 0},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].k) continue;
            const double r = rel_diff(t[i].x, t[i].y, t[i].k);
            CHECK(r <= 1e-4, "%s: block %d %s: staged vs fused %.3g", name, l, t[i].what, r);
        }
    }
    mp_hooks_free(hs);
    free(dres0);
    mp_grads_free(&G0);
    mp_grads_free(&G);
    mp_acts_free(&A);
    free(dl);
    free(tok);
    mp_model_free(m);
}

int main(void) {
    mp_config base = mp_config_default();
    base.d_model = 48;
    base.n_layer = 2;
    base.n_head = 4;
    base.n_kv_head = 4;
    base.d_head = 12;
    base.d_mlp = 128;
    base.vocab = 97;
    base.ctx = 80;
    base.tied = 0; /* 2. tells the classifier's gradient from the embedding's */
    mp_config c = base;
    run("rms_swiglu_rope", c, 2, 70);
    c = base;
    c.norm = MP_NORM_LAYER, c.mlp = MP_MLP_GELU, c.pos = MP_POS_LEARNED, c.qkv_bias = 1, c.linear_bias = 1;
    run("ln_gelu_learned_bias", c, 2, 40);
    c = base;
    c.mlp = MP_MLP_GELU, c.gelu_tanh = 1, c.n_kv_head = 2;
    run("gqa_gelu_tanh", c, 2, 33);
    c = base;
    c.attn = MP_ATTN_SSMAX;
    run("ssmax", c, 2, 40);
    c = base;
    c.attn = MP_ATTN_ASENTMAX, c.n_kv_head = 1;
    run("asentmax_mqa", c, 2, 40);
    c = base;
    c.mlp = MP_MLP_NONE;
    run("mlp_none", c, 2, 40);
    return tu_finish("test_backward");
}
