/* test_pos.c — the positional schemes and the inference-time RoPE scalings
 * (runtime/pos.c):
 *  - frequencies of every scheme and scaling against closed forms written here
 *    from the definitions (rope theta^(-2i/Dh); half_rope theta^(-2i/r) on r
 *    channels; high_freq / rope_id log-spaced from 2pi/32 to 4pi/ctx; PI
 *    theta_i/s; NTK base s^(d/(d-2)), whose lowest frequency is exactly
 *    theta_last/s; YaRN's ramp (Peng et al. 2023, eq. 19-22)), the logit
 *    factors, and the rotation angles the tables produce (|err| <= 1e-6);
 *  - half_rope with every channel rotated gives exactly rope's logits;
 *  - rope_id with the temperature off gives exactly the same logits inside the
 *    training length, and different ones past it;
 *  - golden: logits, loss and every parameter gradient of one model under ten
 *    schemes against an independent PyTorch float64 implementation
 *    (tests/data/pos_ref.h5, tests/tools/make_pos_ref.py), T = 20 > 2 ctx:
 *    logits |err| <= 1e-4 (1 + |ref|), loss 1e-5, gradients
 *    |err| <= 2e-5 + 1e-3 max|ref|;
 *  - whole-model finite differences of the loss (rope_id with temperature,
 *    YaRN), |an - fd| <= 2e-3 + 5e-2 |fd| as in test_grad;
 *  - the KV cache: token-by-token decoding equals the batched forward past ctx;
 *  - checkpoints keep every scheme field; bad configs are refused. */
#include "checkpoint.h"
#include "h5io.h"
#include "model.h"
#include "train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mp_config base_cfg(void) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 1; c.d_head = 8; c.d_mlp = 16; c.vocab = 13;
    c.ctx = 8; c.rope_theta = 100.0f;
    return c;
}

/* ---- closed forms ---- */
static void test_freqs(void) {
    mp_config c = base_cfg();
    c.d_head = 16;
    double f[8];
    const double th = 100.0, hi = 2 * M_PI / 32, lo = 4 * M_PI / 8;   /* ctx 8 */
    double err = 0;
    /* rope */
    CHECK(mp_pos_freqs(&c, f) == 8, "rope rotates every pair");
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - pow(th, -2.0 * i / 16)));
    /* half_rope: r = 8 channels (default half) */
    c.pos = MP_POS_HALF_ROPE;
    CHECK(mp_pos_freqs(&c, f) == 4, "half_rope rotates half the pairs");
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - (i < 4 ? pow(th, -2.0 * i / 8) : 0.0)));
    c.rope_dims = 16;
    mp_pos_freqs(&c, f);
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - pow(th, -2.0 * i / 16)));
    c.rope_dims = 0;
    /* high_freq: 8 pairs log-spaced hi..lo */
    c.pos = MP_POS_HIGH_FREQ;
    CHECK(mp_pos_freqs(&c, f) == 8, "high_freq rotates every pair");
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - exp(log(hi) + (log(lo) - log(hi)) * i / 7.0)));
    CHECK_NEAR(f[0], 2 * M_PI / 32, 1e-15, "high_freq: fastest pair turns once per 32 tokens");
    CHECK_NEAR(f[7] * c.ctx / (2 * M_PI), 2.0, 1e-12, "high_freq: slowest pair turns twice per ctx");
    /* rope_id: 4 pairs of the band, 4 unrotated */
    c.pos = MP_POS_ROPE_ID;
    CHECK(mp_pos_freqs(&c, f) == 4, "rope_id rotates half the pairs");
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - (i < 4 ? exp(log(hi) + (log(lo) - log(hi)) * i / 3.0) : 0)));
    c.pos = MP_POS_NONE;
    CHECK(mp_pos_freqs(&c, f) == 0, "none rotates nothing");
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i]));
    CHECK(err < 1e-13, "scheme frequencies vs closed forms: max error %.3g", err);
    printf("  scheme frequencies vs closed forms: max |err| %.3g\n", err);

    /* logit factors: rope_id (1 + 0.1 ln(max(t,L)/L))^2, t = pos + 1 */
    c.pos = MP_POS_ROPE_ID;
    double e2 = 0;
    for (int p = 0; p < 64; p++) {
        double t = p + 1.0, a = 1 + 0.1 * log(fmax(t, 8.0) / 8.0);
        e2 = fmax(e2, fabs(mp_pos_logit_scale(&c, p) - a * a));
    }
    CHECK(e2 < 1e-14, "rope_id temperature: max error %.3g", e2);
    CHECK(mp_pos_logit_scale(&c, 7) == 1.0 && mp_pos_logit_scale(&c, 8) > 1.0, "temperature is 1 up to t = ctx");
    c.pos_no_temp = 1;
    CHECK(mp_pos_logit_scale(&c, 40) == 1.0 && !mp_pos_has_logit_scale(&c), "temperature switched off");
}

static void test_scaling(void) {
    mp_config c = base_cfg();
    c.d_head = 16;
    c.rope_theta = 10000.0f;
    double f0[8], f[8], err = 0;
    mp_pos_freqs(&c, f0);
    /* PI: every frequency / s */
    c.rope_scaling = MP_ROPE_SCALING_PI;
    c.rope_factor = 4.0f;
    mp_pos_freqs(&c, f);
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - f0[i] / 4.0) / f0[i]);
    CHECK(mp_pos_logit_scale(&c, 100) == 1.0, "PI has no temperature");
    /* NTK-aware: base' = base * s^(d/(d-2)) */
    c.rope_scaling = MP_ROPE_SCALING_NTK;
    mp_pos_freqs(&c, f);
    double base2 = 10000.0 * pow(4.0, 16.0 / 14.0);
    for (int i = 0; i < 8; i++) err = fmax(err, fabs(f[i] - pow(base2, -2.0 * i / 16)) / f0[i]);
    CHECK(fabs(f[0] - f0[0]) < 1e-15, "NTK keeps the highest frequency");
    CHECK(fabs(f[7] - f0[7] / 4.0) / f0[7] < 1e-12, "NTK divides the lowest frequency by s exactly");
    /* YaRN with the paper's defaults alpha = 1, beta = 32, L0 = 1024 */
    c.rope_scaling = MP_ROPE_SCALING_YARN;
    c.rope_orig_ctx = 1024;
    mp_pos_freqs(&c, f);
    int n_interp = 0, n_extrap = 0, n_ramp = 0;
    for (int i = 0; i < 8; i++) {
        double lambda = 2 * M_PI / f0[i], r = 1024.0 / lambda;
        double g = r < 1 ? 0 : r > 32 ? 1 : (r - 1) / 31.0;
        double want = (1 - g) * f0[i] / 4.0 + g * f0[i];
        err = fmax(err, fabs(f[i] - want) / f0[i]);
        n_interp += g == 0;
        n_extrap += g == 1;
        n_ramp += g > 0 && g < 1;
    }
    CHECK(n_interp > 0 && n_extrap > 0 && n_ramp > 0, "the YaRN test covers all three bands (%d/%d/%d)", n_interp,
          n_ramp, n_extrap);
    double m = 0.1 * log(4.0) + 1;
    CHECK_NEAR(mp_pos_logit_scale(&c, 3), m * m, 1e-14, "YaRN attention temperature (0.1 ln s + 1)^2");
    CHECK(err < 1e-12, "scaled frequencies vs closed forms: max relative error %.3g", err);
    printf("  PI / NTK / YaRN frequencies vs the published formulas: max rel |err| %.3g (YaRN bands %d/%d/%d)\n", err,
           n_interp, n_ramp, n_extrap);

    /* angles the tables and the rotation produce: e_{2i} at position p -> (cos, sin)(p w_i) */
    mp_config schemes[4];
    for (int k = 0; k < 4; k++) schemes[k] = base_cfg();
    schemes[1].pos = MP_POS_HALF_ROPE;
    schemes[2].pos = MP_POS_ROPE_ID;
    schemes[3].rope_scaling = MP_ROPE_SCALING_YARN;
    schemes[3].rope_factor = 3.0f;
    double aerr = 0;
    for (int k = 0; k < 4; k++) {
        const mp_config *s = &schemes[k];
        enum { T = 40, Dh = 8, H2 = 4 };
        float cs[T * H2], sn[T * H2], qs[T], x[T * Dh];
        double fr[H2];
        mp_pos_freqs(s, fr);
        mp_pos_tables(s, cs, sn, qs, 5, T);   /* positions 5..44 */
        for (int i = 0; i < H2; i++) {
            memset(x, 0, sizeof x);
            for (int t = 0; t < T; t++) x[t * Dh + 2 * i] = 1.0f;
            mp_pos_apply(s, cs, sn, NULL, x, 1, T, 1, 0);
            for (int t = 0; t < T; t++) {
                double a = (5.0 + t) * fr[i];
                aerr = fmax(aerr, fabs(x[t * Dh + 2 * i] - cos(a)));
                aerr = fmax(aerr, fabs(x[t * Dh + 2 * i + 1] - sin(a)));
            }
        }
    }
    CHECK(aerr < 2e-6, "rotation angles: max error %.3g", aerr);
    printf("  rotation angles of rope/half_rope/rope_id/yarn tables at positions 5..44: max |err| %.3g\n", aerr);
}

/* ---- model-level identities ---- */
static void logits_of(const mp_model *m, const int *tok, int T, float *out) {
    mp_forward_params fp = mp_forward_params_default();
    fp.q_block = 7;   /* several attention blocks */
    CHECK(mp_model_forward(m, tok, 1, T, &fp, out) == MP_OK, "forward: %s", mp_last_error());
}

static void test_identities(void) {
    mp_config c = base_cfg();
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 3, 0.5f) == MP_OK, "model");
    enum { T = 24 };
    int tok[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 7 + 3) % c.vocab;
    const size_t n = (size_t)T * c.vocab;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    /* half_rope with every channel rotated == rope */
    logits_of(m, tok, T, a);
    m->cfg.pos = MP_POS_HALF_ROPE;
    m->cfg.rope_dims = c.d_head;
    logits_of(m, tok, T, b);
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    CHECK(d == 0.0, "half_rope with rope_dims = d_head differs from rope by %.3g", d);
    printf("  half_rope(rope_dims = d_head) vs rope: max |logit diff| %.3g\n", d);
    /* rope_id: the temperature changes nothing inside ctx, something past it */
    m->cfg.pos = MP_POS_ROPE_ID;
    m->cfg.rope_dims = 0;
    logits_of(m, tok, T, a);
    m->cfg.pos_no_temp = 1;
    logits_of(m, tok, T, b);
    double in = 0, out = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (i < (size_t)c.ctx * c.vocab) in = fmax(in, e);
        else out = fmax(out, e);
    }
    CHECK(in == 0.0, "rope_id temperature changes logits inside ctx by %.3g", in);
    CHECK(out > 1e-4, "rope_id temperature changes nothing past ctx (%.3g)", out);
    printf("  rope_id temperature on vs off: max |diff| %.3g inside ctx, %.3g past it\n", in, out);
    /* rope_id vs half_rope (same channels rotated, other angles): differ inside ctx */
    m->cfg.pos = MP_POS_HALF_ROPE;
    logits_of(m, tok, T, a);
    double ang = 0;
    for (size_t i = 0; i < (size_t)c.ctx * c.vocab; i++) ang = fmax(ang, fabs(a[i] - b[i]));
    CHECK(ang > 1e-4, "rope_id and half_rope angles differ (%.3g)", ang);

    /* KV cache: decoding one token at a time equals the batched forward past ctx */
    const mp_pos_kind kinds[] = {MP_POS_ROPE_ID, MP_POS_ROPE, MP_POS_HIGH_FREQ};
    for (int k = 0; k < 3; k++) {
        m->cfg = c;
        m->cfg.pos = kinds[k];
        if (kinds[k] == MP_POS_ROPE) {
            m->cfg.rope_scaling = MP_ROPE_SCALING_YARN;
            m->cfg.rope_factor = 4.0f;
            m->cfg.rope_orig_ctx = 64;
        }
        logits_of(m, tok, T, a);
        mp_kvcache kv;
        CHECK(mp_kvcache_init(&kv, &m->cfg, 1, T) == MP_OK, "cache");
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &kv;
        fp.logits = MP_LOGITS_LAST;
        for (int t = 0; t < T; t++) CHECK(mp_model_forward(m, tok + t, 1, 1, &fp, b + (size_t)t * c.vocab) == MP_OK, "step");
        /* decoding takes sgemv, the batched forward sgemm: float32 sums in
         * another order, so the difference is rounding: <= 1e-5 of the largest
         * logit (~80 float32 ulps; a wrong position or cache row gives ~0.1-1) */
        double e = 0, big = 0;
        for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i])), big = fmax(big, fabs(a[i]));
        CHECK(e < 1e-5 * big, "%s: cached decoding differs by %.3g (largest |logit| %.3g)", mp_pos_name(kinds[k]), e, big);
        printf("  %s%s: token-by-token decoding vs batched forward: max |diff| %.3g (largest |logit| %.3g)\n",
               mp_pos_name(kinds[k]), kinds[k] == MP_POS_ROPE ? "+yarn" : "", e, big);
        mp_kvcache_free(&kv);
    }
    free(a);
    free(b);
    mp_model_free(m);
}

/* ---- golden against PyTorch ---- */
typedef struct {
    const char *name;
    mp_pos_kind pos;
    int rope_dims, no_temp;
    mp_rope_scaling sc;
    float factor;
    int orig;
} scheme;
static const scheme SCHEMES[] = {
    {"rope", MP_POS_ROPE, 0, 0, 0, 0, 0},
    {"none", MP_POS_NONE, 0, 0, 0, 0, 0},
    {"half_rope", MP_POS_HALF_ROPE, 0, 0, 0, 0, 0},
    {"half_rope6", MP_POS_HALF_ROPE, 6, 0, 0, 0, 0},
    {"high_freq", MP_POS_HIGH_FREQ, 0, 0, 0, 0, 0},
    {"rope_id", MP_POS_ROPE_ID, 0, 0, 0, 0, 0},
    {"rope_id_notemp", MP_POS_ROPE_ID, 0, 1, 0, 0, 0},
    {"rope_pi", MP_POS_ROPE, 0, 0, MP_ROPE_SCALING_PI, 2.0f, 0},
    {"rope_ntk", MP_POS_ROPE, 0, 0, MP_ROPE_SCALING_NTK, 4.0f, 0},
    {"rope_yarn", MP_POS_ROPE, 0, 0, MP_ROPE_SCALING_YARN, 4.0f, 256},
};
enum { NS = sizeof SCHEMES / sizeof SCHEMES[0] };

static void apply_scheme(mp_config *c, const scheme *s) {
    c->pos = s->pos;
    c->rope_dims = s->rope_dims;
    c->pos_no_temp = s->no_temp;
    c->rope_scaling = s->sc;
    c->rope_factor = s->factor;
    c->rope_orig_ctx = s->orig;
}

static void test_golden(void) {
    const char *path = tu_data("pos_ref.h5");
    mp_model *m = NULL;
    hid_t f = H5I_INVALID_HID;
    CHECK(mp_checkpoint_load(path, &m, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_open(&f, path, MP_H5_READ) == MP_OK, "%s", mp_last_error());
    if (!m || f < 0) return;
    const mp_config c0 = m->cfg;
    int32_t *tok = NULL, *tgt = NULL;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_i32(f, "/ref/tokens", &tok, &info) == MP_OK && info.ndim == 2, "tokens");
    const int B = (int)info.shape[0], T = (int)info.shape[1], V = c0.vocab;
    CHECK(mp_h5_read_i32(f, "/ref/targets", &tgt, &info) == MP_OK, "targets");
    mp_h5_attr names;
    CHECK(mp_h5_attr_get(f, "/ref", "names", &names) == MP_OK && names.kind == MP_H5_ATTR_STRING, "names");
    float *lg = malloc((size_t)B * T * V * sizeof(float));
    for (int k = 0; k < NS; k++) {
        const scheme *s = &SCHEMES[k];
        char p[128];
        m->cfg = c0;
        apply_scheme(&m->cfg, s);
        CHECK(mp_config_validate(&m->cfg, s->name) == MP_OK, "%s", mp_last_error());
        float *rl = NULL, *rg = NULL;
        snprintf(p, sizeof p, "/ref/%s/logits", s->name);
        CHECK(mp_h5_read_f32(f, p, &rl, &info) == MP_OK && info.numel == (size_t)B * T * V, "%s", p);
        snprintf(p, sizeof p, "/ref/%s/grad", s->name);
        CHECK(mp_h5_read_f32(f, p, &rg, &info) == MP_OK, "%s", p);
        const size_t ng = info.numel;
        mp_h5_attr la;
        snprintf(p, sizeof p, "/ref/%s", s->name);
        CHECK(mp_h5_attr_get(f, p, "loss", &la) == MP_OK, "loss attr");
        /* logits */
        mp_forward_params fp = mp_forward_params_default();
        fp.q_block = 6;
        CHECK(mp_model_forward(m, tok, B, T, &fp, lg) == MP_OK, "%s", mp_last_error());
        double el = 0;
        for (size_t i = 0; i < (size_t)B * T * V; i++) el = fmax(el, fabs(lg[i] - rl[i]) / (1 + fabs(rl[i])));
        /* loss and gradients */
        mp_acts A;
        mp_grads G;
        float loss = 0;
        CHECK(mp_acts_init(&A, &m->cfg, B, T) == MP_OK && mp_grads_init(&G, &m->cfg) == MP_OK, "alloc");
        CHECK(mp_model_forward_backward(m, tok, tgt, B, T, NULL, &A, &G, 1.0f, &loss, NULL) == MP_OK, "%s",
              mp_last_error());
        mp_param_desc gd[MP_PARAM_MAX];
        int nd = mp_params_describe(&m->cfg, &G.g, gd);
        /* walk the reference's name list: each tensor's slice of the flat gradient */
        double eg = 0, gmax = 0;
        size_t off = 0;
        char *list = strdup(names.s), *save = NULL;
        for (char *nm = strtok_r(list, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
            const float *an = NULL;
            size_t cnt = 0;
            for (int d = 0; d < nd && !an; d++) {
                int nl = gd[d].per_layer ? m->cfg.n_layer : 1;
                for (int l = 0; l < nl; l++) {
                    char full[160];
                    snprintf(full, sizeof full, gd[d].name, l);
                    if (strcmp(full, nm) == 0) {
                        cnt = gd[d].n / (size_t)nl;
                        an = gd[d].p + (size_t)l * cnt;
                    }
                }
            }
            CHECK(an && off + cnt <= ng, "%s: gradient %s not found or reference too short", s->name, nm);
            if (!an || off + cnt > ng) break;
            for (size_t i = 0; i < cnt; i++) {
                eg = fmax(eg, fabs(an[i] - rg[off + i]));
                gmax = fmax(gmax, fabs(rg[off + i]));
            }
            off += cnt;
        }
        free(list);
        CHECK(off == ng, "%s: %zu of %zu reference gradient values matched", s->name, off, ng);
        CHECK(el <= 1e-4, "%s: logits differ by %.3g (relative)", s->name, el);
        CHECK(fabs(loss - la.f) <= 1e-5, "%s: loss %.7f vs %.7f", s->name, loss, la.f);
        CHECK(eg <= 2e-5 + 1e-3 * gmax, "%s: gradients differ by %.3g (max |grad| %.3g)", s->name, eg, gmax);
        printf("  golden %-15s logits rel|err| %.2e  loss %.6f (|err| %.1e)  grads |err| %.2e of max %.2f\n", s->name,
               el, loss, fabs(loss - la.f), eg, gmax);
        mp_h5_attr_clear(&la);
        mp_acts_free(&A);
        mp_grads_free(&G);
        free(rl);
        free(rg);
    }
    mp_h5_attr_clear(&names);
    free(lg);
    free(tok);
    free(tgt);
    mp_h5_close(&f);
    mp_model_free(m);
}

/* ---- finite differences of the float loss (testutil's whole-model check) ---- */
static void fd_model(const char *label, mp_config c) {
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 9, 0.3f) == MP_OK, "%s: %s", label, mp_last_error());
    if (!m) return;
    enum { B = 2, T = 13 };   /* past ctx = 8 */
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 5 + 1) % c.vocab;
        tgt[i] = i % 4 == 3 ? -1 : (i * 3 + 2) % c.vocab;
    }
    tu_fd_result r = tu_fd_model(label, m, tok, tgt, B, T, 1e-2f, 6, 0, 12345);
    printf("  finite differences %-18s loss %.4f, worst error / tolerance %.3f\n", label, r.loss, r.worst);
    mp_model_free(m);
}

/* ---- checkpoints and validation ---- */
static void test_checkpoint(void) {
    char dir[] = "/tmp/mp_test_pos_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "tmpdir");
    snprintf(path, sizeof path, "%s/m.h5", dir);
    for (int k = 0; k < NS; k++) {
        mp_config c = base_cfg();
        apply_scheme(&c, &SCHEMES[k]);
        c.yarn_beta_fast = SCHEMES[k].sc == MP_ROPE_SCALING_YARN ? 24.0f : 0.0f;
        mp_model *m = NULL, *m2 = NULL;
        CHECK(mp_model_new_random(&m, &c, 1, 0.1f) == MP_OK, "model");
        CHECK(mp_checkpoint_save(path, m, NULL, NULL) == MP_OK, "save: %s", mp_last_error());
        CHECK(mp_checkpoint_load(path, &m2, NULL, NULL) == MP_OK, "load: %s", mp_last_error());
        if (m2) {
            const mp_config *a = &m->cfg, *b = &m2->cfg;
            CHECK(a->pos == b->pos && a->rope_dims == b->rope_dims && a->pos_no_temp == b->pos_no_temp &&
                      a->rope_scaling == b->rope_scaling && a->rope_factor == b->rope_factor &&
                      a->rope_orig_ctx == b->rope_orig_ctx && a->yarn_beta_fast == b->yarn_beta_fast,
                  "%s: the checkpoint does not keep the scheme", SCHEMES[k].name);
        }
        mp_model_free(m);
        mp_model_free(m2);
    }
    unlink(path);
    rmdir(dir);
    /* refused configs */
    mp_config c = base_cfg();
    c.pos = MP_POS_HALF_ROPE;
    c.rope_dims = 5;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT && strstr(mp_last_error(), "rope_dims"), "odd rope_dims");
    c.rope_dims = 10;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "rope_dims > d_head");
    c = base_cfg();
    c.pos = MP_POS_ROPE_ID;
    c.rope_scaling = MP_ROPE_SCALING_NTK;
    c.rope_factor = 2.0f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT && strstr(mp_last_error(), "scaling"), "scaling rope_id");
    c = base_cfg();
    c.rope_scaling = MP_ROPE_SCALING_YARN;
    c.rope_factor = -1.0f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "negative factor");
    c.rope_factor = 2.0f;
    c.yarn_beta_fast = 0.5f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT && strstr(mp_last_error(), "beta"), "beta_fast < beta_slow");
    c = base_cfg();
    c.pos = (mp_pos_kind)MP_POS_COUNT;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "unknown pos");
    CHECK(mp_pos_parse("rope_id") == MP_POS_ROPE_ID && mp_pos_parse("drope") == -1, "names");
    CHECK(strcmp(mp_pos_name(MP_POS_HIGH_FREQ), "high_freq") == 0, "names");
}

int main(void) {
    mp_io_init();
    printf("closed forms:\n");
    test_freqs();
    test_scaling();
    printf("identities:\n");
    test_identities();
    printf("golden against PyTorch (tests/data/pos_ref.h5):\n");
    test_golden();
    printf("whole-model gradients vs finite differences:\n");
    mp_config c = base_cfg();
    c.pos = MP_POS_ROPE_ID;
    fd_model("rope_id+temperature", c);
    c.pos = MP_POS_HALF_ROPE;
    c.rope_dims = 6;
    fd_model("half_rope(6)", c);
    c = base_cfg();
    c.rope_scaling = MP_ROPE_SCALING_YARN;
    c.rope_factor = 4.0f;
    c.rope_orig_ctx = 64;
    fd_model("rope+yarn", c);
    c = base_cfg();
    c.pos = MP_POS_HIGH_FREQ;
    fd_model("high_freq", c);
    printf("checkpoints and validation:\n");
    test_checkpoint();
    return tu_finish("test_pos");
}
