/* test_intervene.c — the C interventions of hooks/intervene.h on a tiny random
 * model (GQA, 2 layers): each kind (zero, mean, patch, steer, scale), with and
 * without a head and positions, on residual, per-head, per-KV-head, MLP and
 * attention-map hooks (maps delivered in blocks of query rows), checked
 * element by element against its closed form computed here from a clean run;
 * patching the last residual reproduces the source run's logits; absolute
 * positions during KV-cache decoding; and every refusal (head out of range or
 * on a hook without heads, sources of the wrong size, too many positions). */
#include "intervene.h"
#include "model.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 5 };
static mp_model *M;
static int TOK[B * T], TOK2[B * T];

/* A forward of tokens with q_block 2 (maps in three blocks) and, when iv is
 * non-NULL, iv at `name` followed by a capture of `name` (which sees the
 * edited values). The capture is returned (caller frees); logits optional. */
static tu_capture *run(const int *tok, const char *name, mp_intervention *iv, float *logits, mp_status *st_out) {
    tu_capture *cap = calloc(1, sizeof *cap);
    mp_hooks *hs = mp_hooks_new(&M->cfg);
    if (iv) CHECK(mp_hooks_add(hs, name, mp_intervention_apply, iv) == MP_OK, "%s", mp_last_error());
    CHECK(mp_hooks_add(hs, name, tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = 2;
    fp.logits = logits ? MP_LOGITS_ALL : MP_LOGITS_NONE;
    mp_status st = mp_model_forward(M, tok, B, T, &fp, logits);
    if (st_out) *st_out = st;
    else CHECK(st == MP_OK, "forward with an intervention at %s: %s", name, mp_last_error());
    mp_hooks_free(hs);
    return cap;
}

static const float *got(const tu_capture *c, const char *name, size_t *n) {
    const float *p = tu_capture_get(c, name, n);
    CHECK(p != NULL, "%s not captured", name);
    return p;
}

static void done(tu_capture *c) {
    tu_capture_free(c);
    free(c);
}

static int in_pos(int t, const int *pos, int npos) {
    if (!npos) return 1;
    for (int k = 0; k < npos; k++)
        if (pos[k] == t) return 1;
    return 0;
}

/* The clean activation, and the edited one, of a [B,T,n1,n2] hook (n2 = 1 for
 * 3-D hooks): the edited one must equal expect(b,t,i,j, clean) everywhere. */
typedef float (*expect_fn)(const void *ctx, int b, int t, int i, int j, float clean);

static void check_btxx(const char *label, const char *name, mp_intervention *iv, int n1, int n2, expect_fn fn,
                       const void *ctx) {
    tu_capture *clean = run(TOK, name, NULL, NULL, NULL), *edit = run(TOK, name, iv, NULL, NULL);
    size_t nc, ne;
    const float *c = got(clean, name, &nc), *e = got(edit, name, &ne);
    if (c && e) {
        CHECK(nc == (size_t)B * T * n1 * n2 && ne == nc, "%s: %zu / %zu values", label, nc, ne);
        double worst = 0;
        size_t changed = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < n1; i++)
                    for (int j = 0; j < n2; j++) {
                        size_t k = (((size_t)b * T + t) * n1 + i) * n2 + j;
                        double d = fabs((double)e[k] - fn(ctx, b, t, i, j, c[k]));
                        if (d > worst) worst = d;
                        changed += e[k] != c[k];
                    }
        CHECK(worst <= 1e-6, "%s: max |edited - closed form| = %.3g", label, worst);
        CHECK(changed > 0, "%s: nothing changed", label);
    }
    done(clean);
    done(edit);
}

typedef struct {
    int head, npos, pos[4];
    float scale;
    const float *vec;     /* steer: the vector; mean: the expected mean [n1][n2] */
    int stride;           /* mean: n2; steer: 0 for a vector over i, 1 for one head's [n2] over j */
} spec;

static int sel(const spec *s, int t, int i) { return (s->head < 0 || s->head == i) && in_pos(t, s->pos, s->npos); }

static float ex_zero(const void *x, int b, int t, int i, int j, float c) {
    (void)b; (void)j;
    return sel(x, t, i) ? 0.0f : c;
}
static float ex_mean(const void *x, int b, int t, int i, int j, float c) {
    const spec *s = x;
    (void)b;
    return sel(s, t, i) ? s->vec[i * s->stride + j] : c;
}
static float ex_steer(const void *x, int b, int t, int i, int j, float c) {
    const spec *s = x;
    (void)b;
    if (!sel(s, t, i)) return c;
    return c + s->scale * (s->stride ? s->vec[j] : s->vec[i]);
}
static float ex_scale(const void *x, int b, int t, int i, int j, float c) {
    const spec *s = x;
    (void)b; (void)j;
    return sel(s, t, i) ? c * s->scale : c;
}

static void set_pos(mp_intervention *iv, spec *s, int n, int p0, int p1) {
    int p[2] = {p0, p1};
    s->npos = n;
    s->pos[0] = p0;
    s->pos[1] = p1;
    CHECK(mp_intervention_set_positions(iv, p, n) == MP_OK, "%s", mp_last_error());
}

static void test_kinds(void) {
    const mp_config *c = &M->cfg;
    int D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, Mm = c->d_mlp;
    /* zero: residual at two positions; one head of hook_z at every position */
    mp_intervention iv = mp_intervention_zero();
    spec s = {-1, 0, {0}, 1, NULL, 0};
    set_pos(&iv, &s, 2, 1, 3);
    check_btxx("zero resid_post pos {1,3}", "blocks.0.hook_resid_post", &iv, D, 1, ex_zero, &s);
    iv = mp_intervention_zero();
    spec sh = {1, 0, {0}, 1, NULL, 0};
    iv.head = 1;
    check_btxx("zero head 1 of hook_z", "blocks.1.attn.hook_z", &iv, H, Dh, ex_zero, &sh);

    /* mean: a reference of another batch and length ([3, 7, K, Dh]) for hook_k;
     * its mean over batch and positions, computed here in double */
    enum { RB = 3, RT = 7 };
    float *ref = malloc(sizeof(float) * RB * RT * K * Dh), mean[64];
    for (int k = 0; k < RB * RT * K * Dh; k++) ref[k] = (float)((k * 37 % 101) - 50) / 25.0f;
    for (int f = 0; f < K * Dh; f++) {
        double acc = 0;
        for (int r = 0; r < RB * RT; r++) acc += ref[(size_t)r * K * Dh + f];
        mean[f] = (float)(acc / (RB * RT));
    }
    int64_t rshape[4] = {RB, RT, K, Dh};
    iv = mp_intervention_mean(ref, 4, rshape);
    spec sm = {-1, 0, {0}, 1, mean, Dh};
    set_pos(&iv, &sm, 1, 0, 0);
    check_btxx("mean of hook_k at pos 0", "blocks.0.attn.hook_k", &iv, K, Dh, ex_mean, &sm);
    mp_intervention_free(&iv);
    CHECK(iv.mean == NULL, "free clears the mean");
    mp_intervention_free(&iv); /* idempotent */
    free(ref);

    /* steer: a [D] vector at position 4 of resid_mid; a [Dh] vector into head 1 of hook_q */
    float vd[64], vh[8];
    for (int i = 0; i < D; i++) vd[i] = 0.25f * (float)(i % 5) - 0.5f;
    for (int i = 0; i < Dh; i++) vh[i] = 1.0f + (float)i;
    iv = mp_intervention_steer(vd, (size_t)D, 0.5f);
    spec ss = {-1, 0, {0}, 0.5f, vd, 0};
    set_pos(&iv, &ss, 1, 4, 0);
    check_btxx("steer resid_mid pos 4", "blocks.1.hook_resid_mid", &iv, D, 1, ex_steer, &ss);
    iv = mp_intervention_steer(vh, (size_t)Dh, -2.0f);
    iv.head = 1;
    spec sq = {1, 0, {0}, -2.0f, vh, 1};
    check_btxx("steer head 1 of hook_q", "blocks.0.attn.hook_q", &iv, H, Dh, ex_steer, &sq);

    /* scale: the MLP activation, and one KV head of hook_v at two positions */
    iv = mp_intervention_scale(-1.5f);
    spec sc = {-1, 0, {0}, -1.5f, NULL, 0};
    check_btxx("scale mlp.hook_post", "blocks.0.mlp.hook_post", &iv, Mm, 1, ex_scale, &sc);
    iv = mp_intervention_scale(3.0f);
    iv.head = 0;
    spec sv = {0, 0, {0}, 3.0f, NULL, 0};
    set_pos(&iv, &sv, 2, 0, 2);
    check_btxx("scale kv head 0 of hook_v pos {0,2}", "blocks.1.attn.hook_v", &iv, K, Dh, ex_scale, &sv);
}

/* Attention maps [B,H,T,S] arrive in blocks of query rows: a head's rows at
 * chosen query positions, scaled, zeroed, mean-ablated. */
static void test_maps(void) {
    const mp_config *c = &M->cfg;
    int H = c->n_head;
    const char *name = "blocks.1.attn.hook_pattern";
    tu_capture *clean = run(TOK, name, NULL, NULL, NULL);
    size_t nc;
    const float *cl = got(clean, name, &nc);
    /* mean reference [3, H, 4, T]: the mean over batch and query rows */
    enum { RB = 3, RQ = 4 };
    float *ref = malloc(sizeof(float) * RB * H * RQ * T), mean[8 * T];
    for (int k = 0; k < RB * H * RQ * T; k++) ref[k] = (float)(k % 11) / 10.0f;
    for (int h = 0; h < H; h++)
        for (int s = 0; s < T; s++) {
            double acc = 0;
            for (int b = 0; b < RB; b++)
                for (int q = 0; q < RQ; q++) acc += ref[(((size_t)b * H + h) * RQ + q) * T + s];
            mean[h * T + s] = (float)(acc / (RB * RQ));
        }
    int64_t rshape[4] = {RB, H, RQ, T};
    for (int kind = 0; kind < 3 && cl; kind++) {
        mp_intervention iv = kind == 0 ? mp_intervention_scale(2.0f)
                           : kind == 1 ? mp_intervention_zero() : mp_intervention_mean(ref, 4, rshape);
        iv.head = 1;
        int pos[2] = {1, 4};
        CHECK(mp_intervention_set_positions(&iv, pos, 2) == MP_OK, "%s", mp_last_error());
        tu_capture *edit = run(TOK, name, &iv, NULL, NULL);
        size_t ne;
        const float *e = got(edit, name, &ne);
        double worst = 0;
        for (int b = 0; e && b < B; b++)
            for (int h = 0; h < H; h++)
                for (int q = 0; q < T; q++)
                    for (int s = 0; s < T; s++) {
                        size_t k = (((size_t)b * H + h) * T + q) * T + s;
                        float want = cl[k];
                        if (h == 1 && (q == 1 || q == 4))
                            want = kind == 0 ? 2.0f * cl[k] : kind == 1 ? 0.0f : mean[h * T + s];
                        if (fabs((double)e[k] - want) > worst) worst = fabs((double)e[k] - want);
                    }
        CHECK(e && worst <= 1e-6, "%s of head 1, query rows {1,4}: max error %.3g", mp_intervention_name(iv.kind),
              worst);
        mp_intervention_free(&iv);
        done(edit);
    }
    free(ref);
    done(clean);
}

/* Patching: one head of hook_z at one position takes the source run's values;
 * the whole last residual stream patched gives the source run's logits. */
static void test_patch(void) {
    const mp_config *c = &M->cfg;
    int H = c->n_head, Dh = c->d_head, V = c->vocab, L = c->n_layer;
    char last[64];
    snprintf(last, sizeof last, "blocks.%d.hook_resid_post", L - 1);
    size_t nl = (size_t)B * T * V, n;
    float *lg_src = malloc(nl * sizeof(float)), *lg = malloc(nl * sizeof(float)), *lg_clean = malloc(nl * sizeof(float));
    tu_capture *src = run(TOK2, last, NULL, lg_src, NULL);
    const float *rs = got(src, last, &n);
    {
        mp_intervention iv = mp_intervention_patch(rs, n);
        done(run(TOK, last, &iv, lg, NULL));
        done(run(TOK, last, NULL, lg_clean, NULL));
        CHECK(tu_max_abs_diff(lg, lg_src, nl) <= 1e-5, "patched last residual: logits differ from the source run's "
              "by %.3g", tu_max_abs_diff(lg, lg_src, nl));
        CHECK(tu_max_abs_diff(lg_clean, lg_src, nl) > 1e-3, "the two runs differ (control)");
    }
    done(src);
    const char *z = "blocks.0.attn.hook_z";
    tu_capture *zs = run(TOK2, z, NULL, NULL, NULL), *zc = run(TOK, z, NULL, NULL, NULL);
    size_t nz;
    const float *zsrc = got(zs, z, &nz), *zcl = got(zc, z, &n);
    mp_intervention iv = mp_intervention_patch(zsrc, nz);
    iv.head = 0;
    int p = 2;
    mp_intervention_set_positions(&iv, &p, 1);
    tu_capture *ze = run(TOK, z, &iv, NULL, NULL);
    const float *e = got(ze, z, &n);
    double worst = 0;
    for (int b = 0; e && b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < Dh; d++) {
                    size_t k = (((size_t)b * T + t) * H + h) * Dh + d;
                    float want = h == 0 && t == 2 ? zsrc[k] : zcl[k];
                    if (fabs((double)e[k] - want) > worst) worst = fabs((double)e[k] - want);
                }
    CHECK(e && worst == 0.0, "patch head 0 pos 2 of hook_z: max error %.3g", worst);
    /* the same position counted from the end (2 - T): the same activations, bit for bit */
    mp_intervention ivn = mp_intervention_patch(zsrc, nz);
    ivn.head = 0;
    int pn = 2 - T;
    CHECK(mp_intervention_set_positions(&ivn, &pn, 1) == MP_OK, "negative position taken: %s", mp_last_error());
    tu_capture *zn = run(TOK, z, &ivn, NULL, NULL);
    size_t nn;
    const float *en = got(zn, z, &nn);
    CHECK(e && en && nn == n && memcmp(e, en, n * sizeof(float)) == 0, "positions %d and 2 (T = %d) differ", pn, T);
    done(zn);
    done(ze);
    done(zs);
    done(zc);
    free(lg_src);
    free(lg);
    free(lg_clean);
}

/* During KV-cache decoding positions are absolute: zeroing position 3 of the
 * embedding in a prefill of 3 tokens + a step of 1 gives the last logits of a
 * full 4-token pass with the same intervention, not those of a clean pass. */
static void test_decode_positions(void) {
    const mp_config *c = &M->cfg;
    int V = c->vocab, tok[4] = {3, 1, 4, 1};
    float full[4 * 64], clean[4 * 64], step[64];
    mp_intervention iv = mp_intervention_zero();
    int p = 3;
    mp_intervention_set_positions(&iv, &p, 1);
    mp_hooks *hs = mp_hooks_new(c);
    CHECK(mp_hooks_add(hs, "hook_embed", mp_intervention_apply, &iv) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_ALL;
    CHECK(mp_model_forward(M, tok, 1, 4, &fp, clean) == MP_OK, "%s", mp_last_error());
    fp.hooks = hs;
    CHECK(mp_model_forward(M, tok, 1, 4, &fp, full) == MP_OK, "%s", mp_last_error());
    mp_kvcache kv;
    CHECK(mp_kvcache_init(&kv, c, 1, 8) == MP_OK, "%s", mp_last_error());
    fp.cache = &kv;
    fp.logits = MP_LOGITS_LAST;
    CHECK(mp_model_forward(M, tok, 1, 3, &fp, step) == MP_OK, "%s", mp_last_error());
    CHECK(tu_max_abs_diff(step, full + 2 * V, (size_t)V) <= 1e-4, "prefill: position 2 untouched");
    CHECK(mp_model_forward(M, tok + 3, 1, 1, &fp, step) == MP_OK, "%s", mp_last_error());
    CHECK(tu_max_abs_diff(step, full + 3 * V, (size_t)V) <= 1e-4, "step at position 3: %.3g from the full pass",
          tu_max_abs_diff(step, full + 3 * V, (size_t)V));
    CHECK(tu_max_abs_diff(full + 3 * V, clean + 3 * V, (size_t)V) > 1e-3, "the intervention changes position 3");
    mp_kvcache_free(&kv);
    mp_hooks_free(hs);
}

static void expect_fail(const char *label, const char *name, mp_intervention *iv, const char *msg) {
    mp_status st;
    done(run(TOK, name, iv, NULL, &st));
    CHECK(st == MP_ERR_HOOK && strstr(mp_last_error(), msg) && strstr(mp_last_error(), name),
          "%s: status %d, message '%s' (expected '%s')", label, (int)st, mp_last_error(), msg);
    mp_intervention_free(iv);
}

static void test_refusals(void) {
    const mp_config *c = &M->cfg;
    mp_intervention iv = mp_intervention_zero();
    iv.head = 2;
    expect_fail("head out of range", "blocks.0.attn.hook_z", &iv, "head=2 out of range (0..1)");
    iv = mp_intervention_scale(2.0f);
    iv.head = 1;
    expect_fail("kv head out of range", "blocks.0.attn.hook_k", &iv, "head=1 out of range (0..0)");
    iv = mp_intervention_zero();
    iv.head = 0;
    expect_fail("no head axis", "blocks.0.hook_resid_pre", &iv, "has no head axis");
    float buf[4096] = {0};
    iv = mp_intervention_patch(buf, 7);
    expect_fail("patch size", "blocks.0.hook_resid_pre", &iv, "the source has 7 values but the activation has");
    iv = mp_intervention_patch(NULL, 0);
    expect_fail("patch without data", "blocks.0.hook_resid_pre", &iv, "the source has 0 values");
    iv = mp_intervention_steer(buf, (size_t)c->d_model + 1, 1.0f);
    expect_fail("steer size", "blocks.0.hook_resid_pre", &iv, "the vector has 17 values, expected 16");
    int64_t s3[3] = {2, 3, 5};
    iv = mp_intervention_mean(buf, 3, s3);
    expect_fail("mean features", "blocks.0.hook_resid_pre", &iv, "the reference has 5 features per position");
    int64_t s4[4] = {2, 3, 1, 16};
    iv = mp_intervention_mean(buf, 4, s4);
    expect_fail("mean dims", "blocks.0.hook_resid_pre", &iv, "the reference has 4 dims, the activation 3");
    int pos[MP_INTERVENTION_MAX_POS + 1] = {0};
    iv = mp_intervention_zero();
    CHECK(mp_intervention_set_positions(&iv, pos, MP_INTERVENTION_MAX_POS + 1) == MP_ERR_ARG && iv.npos == 0,
          "too many positions refused");
    pos[3] = -(T + 1); /* counted from the end: before the start of a T-token sequence */
    CHECK(mp_intervention_set_positions(&iv, pos, 4) == MP_OK && iv.npos == 4, "negative positions kept");
    char want[96];
    snprintf(want, sizeof want, "position %d at blocks.0.hook_resid_pre is out of range for a sequence of %d", -(T + 1),
             T);
    expect_fail("negative position before the start", "blocks.0.hook_resid_pre", &iv, want);
    CHECK(strcmp(mp_intervention_name(MP_INTERVENTION_MEAN), "mean ablation") == 0, "names");
}

int main(void) {
    mp_init();
    mp_config c = mp_config_default();
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_kv_head = 1;
    c.d_head = 4;
    c.d_mlp = 24;
    c.vocab = 32;
    c.ctx = 16;
    if (mp_model_new_random(&M, &c, 7, 0.3f) != MP_OK) {
        CHECK(0, "%s", mp_last_error());
        return tu_finish("test_intervene");
    }
    for (int i = 0; i < B * T; i++) {
        TOK[i] = (i * 7 + 3) % c.vocab;
        TOK2[i] = (i * 11 + 5) % c.vocab;
    }
    test_kinds();
    test_maps();
    test_patch();
    test_decode_positions();
    test_refusals();
    mp_model_free(M);
    return tu_finish("test_intervene");
}
