/* test_bwdops.c — the backward walk over an operations table (runtime/
 * backward.h mp_bwd_ops), with the entries a table may leave out. The CUDA
 * backend's table has only the training steps (zero, linear, norm, act,
 * attn, pos, embed) and runs the classifier's backward itself (dlogits NULL);
 * this checks, on the CPU, that the walk serves such a table, for five
 * softmax configs (RMSNorm/SwiGLU/RoPE, LayerNorm/GELU/learned positions/
 * biases, GQA with tanh GELU, MQA, no MLP), from the same random d logits:
 *  1. the CPU's table reduced to those entries (each wrapped to count its
 *     calls), weight gradients on, no hooks: every weight gradient and the
 *     embedding gradient bit-identical to mp_backward, and no entry outside
 *     the reduced set called (they are NULL: a call would crash);
 *  2. the same with the classifier's backward run first by the caller
 *     (ops->linear into A->dxn and the classifier's gradient) and the walk
 *     entered with dlogits NULL: the same bytes;
 *  3. the reduced table refuses what it cannot do with MP_ERR_ARG and a
 *     message naming it: backward hooks, input gradients only, and an
 *     attention variant with a row factor (ssmax). */
#include "backward.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 0.5);
}

/* the reduced table: the CPU's entries, counted */
enum { OP_ZERO, OP_LINEAR, OP_NORM, OP_ACT, OP_ATTN, OP_POS, OP_EMBED, OP_N };
static long calls[OP_N];

static mp_status r_zero(void *ctx, float *x, size_t n) {
    calls[OP_ZERO]++;
    return mp_bwd_ops_cpu.zero(ctx, x, n);
}
static mp_status r_linear(void *ctx, float *din, float beta, float *dw, float *db, const float *dout, const float *in,
                          const float *w, int N, int IN, int OUT) {
    calls[OP_LINEAR]++;
    return mp_bwd_ops_cpu.linear(ctx, din, beta, dw, db, dout, in, w, N, IN, OUT);
}
static mp_status r_norm(void *ctx, const mp_config *c, float *dx, float *dw, float *db, const float *dout,
                        const float *x, const float *w, const float *mean, const float *rstd, int N) {
    calls[OP_NORM]++;
    return mp_bwd_ops_cpu.norm(ctx, c, dx, dw, db, dout, x, w, mean, rstd, N);
}
static mp_status r_act(void *ctx, const mp_config *c, float *dpre, float *dup, const float *dpost, const float *pre,
                       const float *up, size_t n) {
    calls[OP_ACT]++;
    return mp_bwd_ops_cpu.act(ctx, c, dpre, dup, dpost, pre, up, n);
}
static mp_status r_attn(void *ctx, const mp_config *c, const mp_acts *A, int l, const mp_layer_acts *a,
                        const mp_attn_layer *av, const float *dz, float *dq, float *dk, float *dv, float *datt,
                        float *dfac) {
    calls[OP_ATTN]++;
    return mp_bwd_ops_cpu.attn(ctx, c, A, l, a, av, dz, dq, dk, dv, datt, dfac);
}
static mp_status r_pos(void *ctx, const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale,
                       float *x, int B, int T, int nh) {
    calls[OP_POS]++;
    return mp_bwd_ops_cpu.pos(ctx, c, cos_t, sin_t, q_scale, x, B, T, nh);
}
static mp_status r_embed(void *ctx, const mp_config *c, float *dembed, float *dpos_embed, const float *dres,
                         const float *dpos, const int *tokens, int B, int T) {
    calls[OP_EMBED]++;
    return mp_bwd_ops_cpu.embed(ctx, c, dembed, dpos_embed, dres, dpos, tokens, B, T);
}
static const mp_bwd_ops reduced = {
    .name = "reduced", .zero = r_zero, .linear = r_linear, .norm = r_norm, .act = r_act,
    .attn = r_attn, .pos = r_pos, .embed = r_embed,
};

static int noop_cb(void *u, const mp_hook_info *info, float *d) { (void)u; (void)info; (void)d; return 0; }

static void run(const char *name, mp_config c, int B, int T) {
    mp_model *m = NULL;
    CHECK(mp_model_new_init(&m, &c, 4321, 0.05f) == MP_OK, "%s: init: %s", name, mp_last_error());
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

    /* 1. the reduced table */
    memset(calls, 0, sizeof calls);
    bp.grads = &G;
    CHECK(mp_backward_walk(&reduced, NULL, &c, &m->p, &G.g, &A, dl, &bp) == MP_OK, "%s: reduced: %s", name,
          mp_last_error());
    CHECK(memcmp(G.mem, G0.mem, n * sizeof(float)) == 0, "%s: reduced table: weight gradients", name);
    CHECK(memcmp(A.dresid, dres0, nx * sizeof(float)) == 0, "%s: reduced table: embedding gradient", name);
    const int L = c.n_layer, mlp = c.mlp != MP_MLP_NONE, swi = c.mlp == MP_MLP_SWIGLU, rot = mp_pos_rotates(&c);
    /* classifier, per block wo + q k v (+ w2, w1, w3), norms lnf + ln1 (+ ln2) */
    CHECK(calls[OP_LINEAR] == 1 + L * (4 + (mlp ? 2 + swi : 0)), "%s: linear calls %ld", name, calls[OP_LINEAR]);
    CHECK(calls[OP_NORM] == 1 + L * (1 + mlp), "%s: norm calls %ld", name, calls[OP_NORM]);
    CHECK(calls[OP_ACT] == L * mlp && calls[OP_ATTN] == L && calls[OP_POS] == 2 * L * rot && calls[OP_EMBED] == 1,
          "%s: act %ld attn %ld pos %ld embed %ld calls", name, calls[OP_ACT], calls[OP_ATTN], calls[OP_POS],
          calls[OP_EMBED]);

    /* 2. the classifier's backward by the caller, the walk from dxn */
    mp_grads_zero(&G);
    CHECK(mp_bwd_ops_cpu.linear(NULL, A.dxn, 0.0f, G.g.unembed, NULL, dl, A.lnf, m->p.unembed, N, D, V) == MP_OK,
          "%s: head", name);
    memset(calls, 0, sizeof calls);
    CHECK(mp_backward_walk(&reduced, NULL, &c, &m->p, &G.g, &A, NULL, &bp) == MP_OK, "%s: from dxn: %s", name,
          mp_last_error());
    CHECK(memcmp(G.mem, G0.mem, n * sizeof(float)) == 0, "%s: from dxn: weight gradients", name);
    CHECK(memcmp(A.dresid, dres0, nx * sizeof(float)) == 0, "%s: from dxn: embedding gradient", name);
    CHECK(calls[OP_LINEAR] == L * (4 + (mlp ? 2 + swi : 0)), "%s: from dxn: linear calls %ld", name,
          calls[OP_LINEAR]);

    /* 3. what the reduced table refuses */
    mp_hooks *hs = mp_hooks_new(&c);
    mp_hooks_add_at(hs, MP_HOOK_RESID_POST, 0, noop_cb, NULL);
    bp.hooks = hs;
    mp_status st = mp_backward_walk(&reduced, NULL, &c, &m->p, &G.g, &A, dl, &bp);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "reduced") && strstr(mp_last_error(), "hooks"),
          "%s: hooks refused: %d %s", name, (int)st, mp_last_error());
    bp.hooks = NULL;
    bp.grads = NULL;
    st = mp_backward_walk(&reduced, NULL, &c, &m->p, NULL, &A, dl, &bp);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "input gradients only"), "%s: no weight gradients refused: %d %s",
          name, (int)st, mp_last_error());
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
    base.tied = 0;
    mp_config c = base;
    run("rms_swiglu_rope", c, 2, 70);
    c = base;
    c.norm = MP_NORM_LAYER, c.mlp = MP_MLP_GELU, c.pos = MP_POS_LEARNED, c.qkv_bias = 1, c.linear_bias = 1;
    run("ln_gelu_learned_bias", c, 2, 40);
    c = base;
    c.mlp = MP_MLP_GELU, c.gelu_tanh = 1, c.n_kv_head = 2;
    run("gqa_gelu_tanh", c, 2, 33);
    c = base;
    c.n_kv_head = 1;
    run("mqa", c, 2, 40);
    c = base;
    c.mlp = MP_MLP_NONE;
    run("mlp_none", c, 2, 40);

    /* an attention variant with a row factor needs attn_factor */
    c = base;
    c.attn = MP_ATTN_SSMAX;
    mp_model *m = NULL;
    CHECK(mp_model_new_init(&m, &c, 4321, 0.05f) == MP_OK, "ssmax: init: %s", mp_last_error());
    mp_acts A;
    mp_grads G;
    memset(&A, 0, sizeof A);
    CHECK(mp_acts_init(&A, &c, 1, 8) == MP_OK && mp_grads_init(&G, &c) == MP_OK, "ssmax: buffers");
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    mp_forward_params fp = mp_forward_params_default();
    fp.acts = &A;
    CHECK(mp_model_forward(m, tok, 1, 8, &fp, NULL) == MP_OK, "ssmax: forward: %s", mp_last_error());
    const mp_backward_params bp = {&G, tok, NULL, NULL};
    const mp_status st = mp_backward_walk(&reduced, NULL, &c, &m->p, &G.g, &A, A.logits, &bp);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "factor"), "ssmax: refused: %d %s", (int)st, mp_last_error());
    mp_grads_free(&G);
    mp_acts_free(&A);
    mp_model_free(m);
    return tu_finish("test_bwdops");
}
