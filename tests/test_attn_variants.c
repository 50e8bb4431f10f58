/* test_attn_variants.c — the attention variants (runtime/attn_variants.c):
 *  - closed forms: alpha = 2 entmax equals the Euclidean projection onto the
 *    simplex (computed here by the sort-and-threshold algorithm, in double),
 *    |err| <= 1e-6; alpha -> 1 tends to softmax (max |err| falls with alpha - 1
 *    and is <= 2e-3 at alpha 1.001); entmax15 (sort) equals the bisection
 *    solver at alpha 1.5 (|err| <= 1e-6) and meets its optimality conditions
 *    (sqrt(p_j) - z_j/2 constant on the support, z_j/2 below it off the
 *    support); rows sum to 1 (1e-5); peaked rows give exact zeros; -inf
 *    scores get zero weight;
 *  - finite differences of each variant's row map in isolation (gradient with
 *    respect to the scores and to s / delta / beta / gamma), skipping the
 *    coordinates where the map has a kink (one-sided slopes disagree),
 *    |an - fd| <= 2e-3 + 2e-2 |fd|;
 *  - whole-model finite differences of the loss for every variant, same kink
 *    rule, |an - fd| <= 2e-3 + 5e-2 |fd| (test_grad's tolerance);
 *  - golden: logits, loss and every gradient (including the variant
 *    parameters) against an independent PyTorch float64 implementation
 *    (tests/data/attn_ref.h5 from tests/tools/make_attn_ref.py), T = 20 > 2 ctx:
 *    logits |err| <= 1e-4 (1 + |ref|), loss 1e-5, gradients
 *    |err| <= 2e-5 + 1e-3 max|ref|;
 *  - hook_pattern of sparse variants holds exact zeros and rows summing to 1;
 *    blocked queries (q_block 4) and token-by-token KV-cache decoding equal
 *    the one-block forward (5e-5: sgemm's summation order moves the entmax
 *    threshold slightly);
 *  - checkpoints keep attn, alpha and the variant parameters; GGUF, HF and
 *    llama2.c exports refuse non-softmax models; bad configs are refused. */
#include "attn_variants.h"
#include "checkpoint.h"
#include "h5io.h"
#include "formats.h"
#include "model.h"
#include "quant.h"
#include "train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned rng_state = 2024;
static double urand(void) { /* uniform in [0, 1) */
    rng_state = rng_state * 1103515245u + 12345u;
    return ((rng_state >> 8) & 0xffffff) / (double)0x1000000;
}
static double nrand(void) { return sqrt(-2 * log(1 - urand())) * cos(2 * M_PI * urand()); }

/* ---- closed forms ---- */

/* Euclidean projection of z onto the simplex (sparsemax), in double */
static void simplex_proj(double *p, const double *z, int n) {
    double s[64], cum = 0, tau = 0;
    memcpy(s, z, (size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && s[j] > s[j - 1]; j--) { double t = s[j]; s[j] = s[j - 1]; s[j - 1] = t; }
    for (int k = 1; k <= n; k++) {
        cum += s[k - 1];
        double t = (cum - 1) / k;
        if (s[k - 1] > t) tau = t;
    }
    for (int i = 0; i < n; i++) p[i] = z[i] > tau ? z[i] - tau : 0;
}

static void test_closed_forms(void) {
    enum { N = 12 };
    float z[N], p[N], q[N], work[N];
    double zd[N], pd[N];
    double e2 = 0, e15 = 0, kkt = 0, esum = 0;
    double esoft[3] = {0, 0, 0};
    const double alphas[3] = {1.1, 1.01, 1.001};
    for (int trial = 0; trial < 40; trial++) {
        const int n = 2 + trial % (N - 1);
        const double spread = 0.3 + 0.2 * (trial % 8);
        for (int j = 0; j < n; j++) { z[j] = (float)(spread * nrand()); zd[j] = z[j]; }
        /* alpha = 2 is sparsemax */
        mp_entmax_bisect(p, z, n, 2.0);
        simplex_proj(pd, zd, n);
        for (int j = 0; j < n; j++) e2 = fmax(e2, fabs(p[j] - pd[j]));
        /* entmax15 by sorting vs bisection at 1.5, and its optimality conditions */
        mp_entmax15(q, z, n, work);
        mp_entmax_bisect(p, z, n, 1.5);
        double s = 0, c = NAN;
        for (int j = 0; j < n; j++) {
            e15 = fmax(e15, fabs(p[j] - q[j]));
            s += q[j];
            if (q[j] > 1e-4f) {
                double v = sqrt(q[j]) - z[j] / 2.0;   /* = -tau on the support */
                if (isnan(c)) c = v;
                kkt = fmax(kkt, fabs(v - c));
            }
        }
        for (int j = 0; j < n; j++)
            if (q[j] == 0.0f) kkt = fmax(kkt, fmax(0.0, z[j] / 2.0 + c));   /* z/2 <= tau off the support */
        esum = fmax(esum, fabs(s - 1));
        /* alpha -> 1 tends to softmax */
        double mx = -1e300, zs = 0;
        for (int j = 0; j < n; j++) mx = fmax(mx, zd[j]);
        for (int j = 0; j < n; j++) zs += exp(zd[j] - mx);
        for (int a = 0; a < 3; a++) {
            mp_entmax_bisect(p, z, n, alphas[a]);
            for (int j = 0; j < n; j++) esoft[a] = fmax(esoft[a], fabs(p[j] - exp(zd[j] - mx) / zs));
        }
    }
    CHECK(e2 <= 1e-6, "alpha = 2 vs the simplex projection: %.3g", e2);
    CHECK(e15 <= 1e-6, "entmax15 (sort) vs bisection at 1.5: %.3g", e15);
    CHECK(kkt <= 1e-4, "entmax15 optimality conditions violated by %.3g", kkt);
    CHECK(esum <= 1e-5, "entmax15 rows sum to 1 within %.3g", esum);
    CHECK(esoft[0] > esoft[1] && esoft[1] > esoft[2] && esoft[2] <= 2e-3,
          "alpha -> 1 does not approach softmax: %.3g %.3g %.3g", esoft[0], esoft[1], esoft[2]);
    printf("  closed forms: sparsemax |err| %.1e; entmax15 vs bisection %.1e, KKT %.1e, sum %.1e; "
           "vs softmax at alpha 1.1/1.01/1.001: %.1e %.1e %.1e\n", e2, e15, kkt, esum, esoft[0], esoft[1], esoft[2]);
    /* peaked rows: exact zeros; -inf entries: zero weight */
    float pk[6] = {4.0f, 0.0f, -1.0f, 3.5f, -INFINITY, 0.5f};
    mp_entmax15(q, pk, 6, work);
    CHECK(q[1] == 0.0f && q[2] == 0.0f && q[4] == 0.0f && q[5] == 0.0f && q[0] > q[3] && q[3] > 0.0f,
          "entmax15 of a peaked row: %g %g %g %g %g %g", q[0], q[1], q[2], q[3], q[4], q[5]);
    mp_entmax_bisect(p, pk, 6, 1.3);
    CHECK(p[4] == 0.0f && p[2] == 0.0f && fabs(p[0] + p[1] + p[3] + p[5] - 1) < 1e-5, "entmax 1.3 of a peaked row");
    float one[1] = {-3.0f};
    mp_entmax15(q, one, 1, work);
    mp_entmax_bisect(p, one, 1, 1.7);
    CHECK(q[0] == 1.0f && fabs(p[0] - 1.0f) < 1e-6, "a single key gets weight 1 (%g, %g)", q[0], p[0]);
}

/* ---- one row of each variant in isolation ---- */
typedef struct {
    const char *name;
    mp_attn_kind kind;
    float alpha;
} variant;
static const variant VARS[] = {
    {"softmax", MP_ATTN_SOFTMAX, 0}, {"ssmax", MP_ATTN_SSMAX, 0},        {"entmax15", MP_ATTN_ENTMAX15, 0},
    {"entmax13", MP_ATTN_ENTMAX, 1.3f}, {"sparsemax", MP_ATTN_ENTMAX, 2.0f}, {"entmax25", MP_ATTN_ENTMAX, 2.5f},
    {"asentmax", MP_ATTN_ASENTMAX, 0}, {"asentmax13", MP_ATTN_ASENTMAX, 1.3f},
};
enum { NV = sizeof VARS / sizeof VARS[0] };

enum { RN = 11 };
typedef struct {
    const variant *v;
    float z[RN], g[RN];   /* scores (some -inf), upstream gradient */
    float prm[4];         /* s | delta, beta, gamma */
    int n0;               /* keys the row sees (its n for the factor) */
} row_ctx;

static mp_attn_layer row_layer(const row_ctx *r) {
    mp_config c = mp_config_default();
    c.attn = r->v->kind;
    c.attn_alpha = r->v->alpha;
    mp_attn_layer a;
    memset(&a, 0, sizeof a);
    a.kind = c.attn;
    a.alpha = mp_attn_alpha(&c);
    if (a.kind == MP_ATTN_SSMAX) a.s = &r->prm[0];
    if (a.kind == MP_ATTN_ASENTMAX) { a.delta = &r->prm[1]; a.beta = &r->prm[2]; a.gamma = &r->prm[3]; }
    return a;
}

static double row_obj(const row_ctx *r) {
    mp_attn_layer a = row_layer(r);
    float x[RN], work[RN];
    memcpy(x, r->z, sizeof x);
    mp_attn_normalize_rows(&a, 0, x, 1, RN, RN, r->n0, work);
    double s = 0;
    for (int j = 0; j < RN; j++) s += (double)r->g[j] * x[j];
    return s;
}

/* central difference with a kink test; returns 0 when the map is not smooth there */
static int fd_coord(row_ctx *r, float *x, float eps, double *fd, double *tol_an) {
    float save = *x;
    double j0 = row_obj(r);
    *x = save + eps;
    double jp = row_obj(r);
    *x = save - eps;
    double jm = row_obj(r);
    *x = save;
    double sp = (jp - j0) / eps, sm = (j0 - jm) / eps;
    *fd = (jp - jm) / (2 * eps);
    (void)tol_an;
    return fabs(sp - sm) <= 2e-3 + 2e-2 * fabs(*fd);
}

static void test_rows_fd(void) {
    for (int k = 0; k < NV; k++) {
        int checked = 0, skipped = 0;
        double worst = 0;
        for (int trial = 0; trial < 6; trial++) {
            row_ctx r;
            memset(&r, 0, sizeof r);
            r.v = &VARS[k];
            r.n0 = 7 + trial;  /* the row sees min(n0, RN) keys; factor uses n0 */
            for (int j = 0; j < RN; j++) {
                r.z[j] = (float)(1.2 * nrand());
                r.g[j] = (float)nrand();
            }
            if (trial % 2) r.z[2] = -INFINITY;   /* a masked key inside the row */
            r.prm[0] = 0.45f;
            r.prm[1] = 0.9f;
            r.prm[2] = 0.35f;
            r.prm[3] = 0.8f;
            const int n = r.n0 < RN ? r.n0 : RN;
            /* analytic */
            mp_attn_layer a = row_layer(&r);
            float p[RN], d[RN], work[RN];
            memcpy(p, r.z, sizeof p);
            mp_attn_normalize_rows(&a, 0, p, 1, RN, RN, r.n0, work);
            double sum = 0;
            for (int j = 0; j < n; j++) sum += p[j];
            CHECK(fabs(sum - 1) < 1e-5, "%s: row sums to %.7f", r.v->name, sum);
            for (int j = n; j < RN; j++) CHECK(p[j] == 0.0f, "%s: key %d beyond the row is not 0", r.v->name, j);
            memcpy(d, r.g, sizeof d);
            mp_attn_normalize_backward(&a, d, p, n);
            const double f = mp_attn_row_factor(&a, 0, r.n0);
            float dfac = 0, dprm[4] = {0, 0, 0, 0};
            double df = 0;
            for (int j = 0; j < n; j++)
                if (p[j] > 0.0f) df += (double)d[j] * r.z[j];
            dfac = (float)df;
            mp_attn_factor_backward(&a, &dprm[0], &dprm[1], &dprm[2], &dprm[3], &dfac, 1, 1, 1, r.n0);
            /* scores */
            for (int j = 0; j < n; j++) {
                if (r.z[j] == -INFINITY) continue;
                double fd, an = f * d[j];
                if (!fd_coord(&r, &r.z[j], 1e-3f, &fd, NULL)) { skipped++; continue; }
                checked++;
                worst = fmax(worst, fabs(an - fd) / (2e-3 + 2e-2 * fabs(fd)));
                CHECK(fabs(an - fd) <= 2e-3 + 2e-2 * fabs(fd), "%s: d score %d: analytic %.6g vs fd %.6g", r.v->name,
                      j, an, fd);
            }
            /* parameters */
            int i0 = a.kind == MP_ATTN_SSMAX ? 0 : 1, i1 = a.kind == MP_ATTN_SSMAX ? 1 : 4;
            if (!mp_attn_has_factor(a.kind)) i1 = 0;
            for (int i = i0; i < i1; i++) {
                double fd;
                if (!fd_coord(&r, &r.prm[i], 1e-3f, &fd, NULL)) { skipped++; continue; }
                checked++;
                worst = fmax(worst, fabs(dprm[i] - fd) / (2e-3 + 2e-2 * fabs(fd)));
                CHECK(fabs(dprm[i] - fd) <= 2e-3 + 2e-2 * fabs(fd), "%s: d param %d: analytic %.6g vs fd %.6g",
                      r.v->name, i, dprm[i], fd);
            }
        }
        CHECK(checked >= 3 * skipped && checked > 20, "%s: only %d coordinates checked (%d at kinks)", VARS[k].name,
              checked, skipped);
        printf("  row map %-10s %3d coordinates (%d kinks skipped), worst error / tolerance %.3f\n", VARS[k].name,
               checked, skipped, worst);
    }
}

/* ---- whole model ---- */
static mp_config base_cfg(void) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 1; c.d_head = 8; c.d_mlp = 16; c.vocab = 13;
    c.ctx = 8; c.rope_theta = 100.0f;
    return c;
}

static void set_variant_params(mp_model *m) {
    const int n = m->cfg.n_layer * m->cfg.n_head;
    for (int i = 0; i < n; i++) {
        if (m->p.ssmax_s) m->p.ssmax_s[i] = 0.4f + 0.15f * (float)i;
        if (m->p.as_delta) {
            m->p.as_delta[i] = 0.8f + 0.1f * (float)i;
            m->p.as_beta[i] = 0.2f + 0.05f * (float)i;
            m->p.as_gamma[i] = 0.7f + 0.2f * (float)i;
        }
    }
}

static void fd_model(const variant *v) {
    mp_config c = base_cfg();
    c.attn = v->kind;
    c.attn_alpha = v->alpha;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 9, 0.3f) == MP_OK, "%s: %s", v->name, mp_last_error());
    if (!m) return;
    set_variant_params(m);
    enum { B = 2, T = 13 };   /* past ctx = 8 */
    int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 5 + 1) % c.vocab;
        tgt[i] = i % 4 == 3 ? -1 : (i * 3 + 2) % c.vocab;
    }
    /* eps 3e-3: entmax's kinks are closer together than softmax's curvature scale */
    tu_fd_result r = tu_fd_model(v->name, m, tok, tgt, B, T, 3e-3f, 6, 1, 12345);
    CHECK(r.checked >= 4 * r.kinks, "%s: %d checked, %d at kinks", v->name, r.checked, r.kinks);
    printf("  model finite differences %-10s loss %.4f, %d checked (%d kinks), worst error / tolerance %.3f\n",
           v->name, r.loss, r.checked, r.kinks, r.worst);
    mp_model_free(m);
}

/* ---- golden against PyTorch ---- */
static const variant GOLD[] = {
    {"softmax", MP_ATTN_SOFTMAX, 0}, {"ssmax", MP_ATTN_SSMAX, 0},          {"entmax15", MP_ATTN_ENTMAX15, 0},
    {"entmax13", MP_ATTN_ENTMAX, 1.3f}, {"sparsemax", MP_ATTN_ENTMAX, 2.0f}, {"asentmax", MP_ATTN_ASENTMAX, 0},
    {"asentmax13", MP_ATTN_ASENTMAX, 1.3f},
};

/* the tensor named nm among the descriptors (one layer's slice) */
static float *find_param(const mp_param_desc *d, int nd, int L, const char *nm, size_t *cnt) {
    for (int k = 0; k < nd; k++) {
        int nl = d[k].per_layer ? L : 1;
        for (int l = 0; l < nl; l++) {
            char full[160];
            snprintf(full, sizeof full, d[k].name, l);
            if (strcmp(full, nm) == 0) {
                *cnt = d[k].n / (size_t)nl;
                return d[k].p + (size_t)l * *cnt;
            }
        }
    }
    return NULL;
}

static void test_golden(void) {
    const char *path = tu_data("attn_ref.h5");
    mp_model *base = NULL;
    hid_t f = H5I_INVALID_HID;
    CHECK(mp_checkpoint_load(path, &base, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_open(&f, path, MP_H5_READ) == MP_OK, "%s", mp_last_error());
    if (!base || f < 0) return;
    int32_t *tok = NULL, *tgt = NULL;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_i32(f, "/ref/tokens", &tok, &info) == MP_OK && info.ndim == 2, "tokens");
    const int B = (int)info.shape[0], T = (int)info.shape[1], V = base->cfg.vocab, L = base->cfg.n_layer;
    CHECK(mp_h5_read_i32(f, "/ref/targets", &tgt, &info) == MP_OK, "targets");
    float *lg = malloc((size_t)B * T * V * sizeof(float));
    for (size_t k = 0; k < sizeof GOLD / sizeof GOLD[0]; k++) {
        const variant *v = &GOLD[k];
        char p[160];
        mp_config c = base->cfg;
        c.attn = v->kind;
        c.attn_alpha = v->alpha;
        mp_model *m = NULL;
        CHECK(mp_model_new(&m, &c) == MP_OK, "%s: %s", v->name, mp_last_error());
        if (!m) continue;
        mp_param_desc sd[MP_PARAM_MAX], dd[MP_PARAM_MAX];
        int ns = mp_params_describe(&base->cfg, &base->p, sd), ndd = mp_params_describe(&c, &m->p, dd);
        for (int i = 0; i < ns; i++) memcpy(dd[i].p, sd[i].p, sd[i].n * sizeof(float));   /* same order, extras last */
        for (int i = ns; i < ndd; i++)
            for (int l = 0; l < L; l++) {
                char nm[128];
                snprintf(nm, sizeof nm, dd[i].name, l);
                snprintf(p, sizeof p, "/ref/%s/params/%s", v->name, nm);
                size_t per = dd[i].n / (size_t)L;
                CHECK(mp_h5_read_f32_into(f, p, dd[i].p + (size_t)l * per, per) == MP_OK, "%s", mp_last_error());
            }
        float *rl = NULL, *rg = NULL;
        snprintf(p, sizeof p, "/ref/%s/logits", v->name);
        CHECK(mp_h5_read_f32(f, p, &rl, &info) == MP_OK && info.numel == (size_t)B * T * V, "%s", p);
        snprintf(p, sizeof p, "/ref/%s/grad", v->name);
        CHECK(mp_h5_read_f32(f, p, &rg, &info) == MP_OK, "%s", p);
        const size_t ng = info.numel;
        mp_h5_attr la, names;
        snprintf(p, sizeof p, "/ref/%s", v->name);
        CHECK(mp_h5_attr_get(f, p, "loss", &la) == MP_OK, "loss attr");
        CHECK(mp_h5_attr_get(f, p, "names", &names) == MP_OK && names.kind == MP_H5_ATTR_STRING, "names attr");
        mp_forward_params fp = mp_forward_params_default();
        fp.q_block = 6;
        CHECK(mp_model_forward(m, tok, B, T, &fp, lg) == MP_OK, "%s", mp_last_error());
        double el = 0;
        for (size_t i = 0; rl && i < (size_t)B * T * V; i++) el = fmax(el, fabs(lg[i] - rl[i]) / (1 + fabs(rl[i])));
        mp_acts A;
        mp_grads G;
        float loss = 0;
        CHECK(mp_acts_init(&A, &c, B, T) == MP_OK && mp_grads_init(&G, &c) == MP_OK, "alloc");
        CHECK(mp_model_forward_backward(m, tok, tgt, B, T, NULL, &A, &G, 1.0f, &loss, NULL) == MP_OK, "%s",
              mp_last_error());
        mp_param_desc gd[MP_PARAM_MAX];
        int nd = mp_params_describe(&c, &G.g, gd);
        double eg = 0, gmax = 0, evar = 0;
        size_t off = 0;
        char *list = strdup(names.s), *save = NULL;
        for (char *nm = strtok_r(list, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
            size_t cnt = 0;
            const float *an = find_param(gd, nd, L, nm, &cnt);
            CHECK(an && off + cnt <= ng, "%s: gradient %s not found or reference too short", v->name, nm);
            if (!an || off + cnt > ng) break;
            int extra = strstr(nm, "ssmax_s") || strstr(nm, "as_");
            for (size_t i = 0; i < cnt; i++) {
                eg = fmax(eg, fabs(an[i] - rg[off + i]));
                gmax = fmax(gmax, fabs(rg[off + i]));
                if (extra) evar = fmax(evar, fabs(an[i] - rg[off + i]));
            }
            off += cnt;
        }
        free(list);
        CHECK(off == ng, "%s: %zu of %zu reference gradient values matched", v->name, off, ng);
        CHECK(el <= 1e-4, "%s: logits differ by %.3g (relative)", v->name, el);
        CHECK(fabs(loss - la.f) <= 1e-5, "%s: loss %.7f vs %.7f", v->name, loss, la.f);
        CHECK(eg <= 2e-5 + 1e-3 * gmax, "%s: gradients differ by %.3g (max |grad| %.3g)", v->name, eg, gmax);
        printf("  golden %-10s logits rel|err| %.2e  loss %.6f (|err| %.1e)  grads |err| %.2e of max %.2f "
               "(variant params %.1e)\n", v->name, el, loss, fabs(loss - la.f), eg, gmax, evar);
        mp_h5_attr_clear(&la);
        mp_h5_attr_clear(&names);
        mp_acts_free(&A);
        mp_grads_free(&G);
        free(rl);
        free(rg);
        mp_model_free(m);
    }
    free(lg);
    free(tok);
    free(tgt);
    mp_h5_close(&f);
    mp_model_free(base);
}

/* ---- hooks, blocks, KV cache ---- */
static void test_forward_paths(void) {
    for (int k = 0; k < NV; k++) {
        const variant *v = &VARS[k];
        mp_config c = base_cfg();
        c.attn = v->kind;
        c.attn_alpha = v->alpha;
        mp_model *m = NULL;
        CHECK(mp_model_new_random(&m, &c, 3, 0.5f) == MP_OK, "%s", mp_last_error());
        if (!m) continue;
        set_variant_params(m);
        enum { T = 15 };
        const int V = c.vocab, H = c.n_head;
        int tok[T];
        for (int t = 0; t < T; t++) tok[t] = (t * 7 + 3) % V;
        float *full = malloc(sizeof(float) * T * V), *blk = malloc(sizeof(float) * T * V),
              *inc = malloc(sizeof(float) * T * V);
        /* one block, with the pattern captured */
        tu_capture cap;
        memset(&cap, 0, sizeof cap);
        mp_hooks *hs = mp_hooks_new(&c);
        CHECK(mp_hooks_add(hs, "blocks.*.attn.hook_pattern", tu_capture_cb, &cap) == MP_OK, "%s", mp_last_error());
        mp_forward_params fp = mp_forward_params_default();
        fp.hooks = hs;
        fp.q_block = T;
        CHECK(mp_model_forward(m, tok, 1, T, &fp, full) == MP_OK, "%s", mp_last_error());
        size_t np = 0;
        const float *pat = tu_capture_get(&cap, "blocks.0.attn.hook_pattern", &np);
        int zeros = 0;
        double esum = 0, eabove = 0;
        for (int h = 0; pat && h < H; h++)
            for (int i = 0; i < T; i++) {
                double s = 0;
                for (int j = 0; j < T; j++) {
                    float a = pat[((size_t)h * T + i) * T + j];
                    if (j <= i) { s += a; zeros += a == 0.0f; }
                    else eabove = fmax(eabove, fabs(a));
                }
                esum = fmax(esum, fabs(s - 1));
            }
        CHECK(pat && np == (size_t)H * T * T, "%s: pattern captured", v->name);
        CHECK(esum <= 1e-5 && eabove == 0.0, "%s: pattern rows sum to 1 within %.3g, %.3g above the diagonal",
              v->name, esum, eabove);
        int sparse = v->kind == MP_ATTN_ENTMAX15 || v->kind == MP_ATTN_ENTMAX || v->kind == MP_ATTN_ASENTMAX;
        if (sparse) CHECK(zeros > 0, "%s: no exact zeros in hook_pattern", v->name);
        else CHECK(zeros == 0, "%s: %d zeros in a dense pattern", v->name, zeros);
        mp_hooks_free(hs);
        tu_capture_free(&cap);
        /* blocks of 4 query rows */
        fp = mp_forward_params_default();
        fp.q_block = 4;
        CHECK(mp_model_forward(m, tok, 1, T, &fp, blk) == MP_OK, "%s", mp_last_error());
        /* token by token through the KV cache */
        mp_kvcache kc;
        CHECK(mp_kvcache_init(&kc, &c, 1, T) == MP_OK, "cache");
        fp.cache = &kc;
        for (int t = 0; t < T; t++) CHECK(mp_model_forward(m, tok + t, 1, 1, &fp, inc + (size_t)t * V) == MP_OK, "step");
        mp_kvcache_free(&kc);
        double eb = tu_max_abs_diff(full, blk, (size_t)T * V), ei = tu_max_abs_diff(full, inc, (size_t)T * V);
        CHECK(eb <= 5e-5 && ei <= 5e-5, "%s: blocked %.3g, cached %.3g from the one-block forward", v->name, eb, ei);
        printf("  forward %-10s layer-0 pattern zeros %3d of %d, blocked |err| %.1e, KV cache |err| %.1e\n", v->name,
               zeros, H * T * (T + 1) / 2, eb, ei);
        free(full);
        free(blk);
        free(inc);
        mp_model_free(m);
    }
}

/* ---- checkpoints, exports, validation ---- */
static void test_checkpoint(void) {
    char dir[] = "/tmp/mp_test_attn_XXXXXX", path[96];
    CHECK(mkdtemp(dir) != NULL, "tmpdir");
    snprintf(path, sizeof path, "%s/m.h5", dir);
    for (int k = 0; k < NV; k++) {
        mp_config c = base_cfg();
        c.attn = VARS[k].kind;
        c.attn_alpha = VARS[k].alpha;
        mp_model *m = NULL, *m2 = NULL;
        CHECK(mp_model_new_random(&m, &c, 1, 0.1f) == MP_OK, "model");
        if (!m) continue;
        /* initial values */
        if (m->p.ssmax_s) CHECK_NEAR(m->p.ssmax_s[3], 1.0 / log(8.0), 1e-6, "ssmax s starts at 1/log(ctx)");
        if (m->p.as_delta)
            CHECK(m->p.as_delta[0] == 1.0f && m->p.as_beta[1] == 0.0f && m->p.as_gamma[2] == 1.0f,
                  "asentmax starts at delta 1, beta 0, gamma 1");
        set_variant_params(m);
        CHECK(mp_checkpoint_save(path, m, NULL, NULL) == MP_OK, "save: %s", mp_last_error());
        CHECK(mp_checkpoint_load(path, &m2, NULL, NULL) == MP_OK, "load: %s", mp_last_error());
        if (m2) {
            CHECK(m2->cfg.attn == c.attn && mp_attn_alpha(&m2->cfg) == mp_attn_alpha(&c),
                  "%s: the checkpoint does not keep the variant", VARS[k].name);
            size_t n = mp_config_n_params(&c);
            CHECK(n == mp_config_n_params(&m2->cfg) && memcmp(m->owned, m2->owned, n * sizeof(float)) == 0,
                  "%s: parameters differ after the round trip", VARS[k].name);
        }
        if (c.attn != MP_ATTN_SOFTMAX) {
            char out[128];
            snprintf(out, sizeof out, "%s/m.gguf", dir);
            CHECK(mp_model_save_gguf(m, NULL, out, MP_GGML_F32) == MP_ERR_ARG, "%s: GGUF export accepted",
                  VARS[k].name);
            snprintf(out, sizeof out, "%s/hf", dir);
            CHECK(mp_model_save_hf(m, out) == MP_ERR_ARG, "%s: HF export accepted", VARS[k].name);
            snprintf(out, sizeof out, "%s/m.bin", dir);
            CHECK(mp_model_save(m, out) == MP_ERR_ARG, "%s: llama2.c export accepted", VARS[k].name);
        }
        mp_model_free(m);
        mp_model_free(m2);
    }
    unlink(path);
    rmdir(dir);
    /* names and validation */
    for (int k = 0; k < MP_ATTN_COUNT; k++) CHECK(mp_attn_parse(mp_attn_name((mp_attn_kind)k)) == k, "name %d", k);
    CHECK(mp_attn_parse("nope") == -1, "unknown name");
    mp_config c = base_cfg();
    CHECK(c.attn == MP_ATTN_SOFTMAX && mp_attn_alpha(&c) == 1.0, "softmax is the default");
    c.attn = MP_ATTN_ENTMAX;
    c.attn_alpha = 1.0f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "alpha 1 refused");
    c.attn_alpha = 9.0f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "alpha 9 refused");
    c.attn = MP_ATTN_SSMAX;
    c.attn_alpha = 1.5f;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "alpha with ssmax refused");
    c.attn = (mp_attn_kind)7;
    c.attn_alpha = 0;
    CHECK(mp_config_validate(&c, "t") == MP_ERR_FORMAT, "unknown kind refused");
    c = base_cfg();
    size_t n0 = mp_config_n_params(&c);
    c.attn = MP_ATTN_ASENTMAX;
    CHECK(mp_config_n_params(&c) == n0 + 3 * (size_t)c.n_layer * c.n_head, "asentmax adds 3 L H parameters");
}

int main(void) {
    mp_io_init();
    test_closed_forms();
    test_rows_fd();
    for (int k = 0; k < NV; k++) fd_model(&VARS[k]);
    test_golden();
    test_forward_paths();
    test_checkpoint();
    return tu_finish("test_attn_variants");
}
