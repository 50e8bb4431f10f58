/* test_sae_train.c — SAE training (runtime/sae_train.h): the hand-written
 * gradients against central finite differences of an independent
 * double-precision loss (standard dense and sparse paths, topk with and
 * without AuxK), the schedulers against SAELens's formulas, recovery of a
 * planted dictionary, the metrics against a hand computation, and CE loss
 * recovered = 1 for an exact SAE and 0 for the zero SAE on a small model. */
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sae.h"
#include "sae_train.h"
#include "testutil.h"

/* ---- the reference loss, in double ---- */
typedef struct {
    int D, F, k, arch, apply;
    double *We, *be, *Wd, *bd; /* SAELens's shapes */
} dsae;

static void topk_idx(const double *v, const int *cand, int n, int k, int *out) {
    /* k largest by selection (tiny sizes) */
    char *used = calloc((size_t)n, 1);
    for (int q = 0; q < k; q++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && (best < 0 || v[cand[i]] > v[cand[best]])) best = i;
        used[best] = 1;
        out[q] = cand[best];
    }
    free(used);
}

/* loss of params p (layout W_enc, b_enc, W_dec, b_dec) on x; residual (if
 * non-NULL, the detached x - out of AuxK) is written when `write_res`. */
static double ref_loss(const dsae *s0, const double *p, const float *x, int N, double l1c, const uint8_t *dead,
                       double *res, int write_res) {
    const int D = s0->D, F = s0->F;
    const double *We = p, *be = p + D * F, *Wd = be + F, *bd = Wd + F * D;
    double *pre = calloc((size_t)F, sizeof(double)), *acts = calloc((size_t)F, sizeof(double));
    double *out = calloc((size_t)D, sizeof(double));
    int *cand = malloc((size_t)F * sizeof(int)), *sel = malloc((size_t)F * sizeof(int));
    double mse = 0, aux = 0, l1 = 0;
    int n_dead = 0;
    for (int j = 0; j < F; j++)
        if (dead && dead[j]) n_dead++;
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * D;
        for (int j = 0; j < F; j++) {
            double t = be[j];
            for (int i = 0; i < D; i++) t += ((double)xr[i] - (s0->apply ? bd[i] : 0.0)) * We[i * F + j];
            pre[j] = t;
        }
        for (int j = 0; j < F; j++) acts[j] = 0;
        if (s0->arch == MP_SAE_STANDARD) {
            for (int j = 0; j < F; j++) acts[j] = pre[j] > 0 ? pre[j] : 0;
        } else {
            for (int j = 0; j < F; j++) cand[j] = j;
            topk_idx(pre, cand, F, s0->k, sel);
            for (int q = 0; q < s0->k; q++) acts[sel[q]] = pre[sel[q]] > 0 ? pre[sel[q]] : 0;
        }
        for (int i = 0; i < D; i++) {
            double t = bd[i];
            for (int j = 0; j < F; j++) t += acts[j] * Wd[j * D + i];
            out[i] = t;
            mse += (t - xr[i]) * (t - xr[i]);
            if (write_res) res[(size_t)r * D + i] = xr[i] - t;
        }
        if (s0->arch == MP_SAE_STANDARD)
            for (int j = 0; j < F; j++) {
                double nn = 0;
                for (int i = 0; i < D; i++) nn += Wd[j * D + i] * Wd[j * D + i];
                l1 += acts[j] * sqrt(nn);
            }
        if (s0->arch == MP_SAE_TOPK && n_dead > 0 && D / 2 > 0) {
            int half = D / 2, ka = half < n_dead ? half : n_dead, nc = 0;
            double scale = fmin((double)n_dead / half, 1.0);
            for (int j = 0; j < F; j++)
                if (dead[j]) cand[nc++] = j;
            topk_idx(pre, cand, nc, ka, sel);
            for (int i = 0; i < D; i++) {
                double t = bd[i];
                for (int q = 0; q < ka; q++) t += pre[sel[q]] * Wd[sel[q] * D + i];
                double e = t - res[(size_t)r * D + i];
                aux += scale * e * e;
            }
        }
    }
    free(pre); free(acts); free(out); free(cand); free(sel);
    return mse / N + aux / N + l1c * l1 / N;
}

static void fd_case(const char *label, mp_sae_arch arch, int D, int F, int k, int N, int apply, float benc,
                    int with_dead, int want_sparse, unsigned seed) {
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, arch, D, F, k) == MP_OK, "%s", mp_last_error());
    if (!s) return;
    s->apply_b_dec_to_input = apply;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    for (size_t i = 0; i < s->n_floats; i++) s->block[i] = (float)gsl_ran_gaussian(r, 0.5);
    for (int j = 0; j < F; j++) s->b_enc[j] += benc;
    float *x = malloc((size_t)N * D * sizeof(float));
    for (int i = 0; i < N * D; i++) x[i] = (float)gsl_ran_gaussian(r, 1.0);
    uint8_t *dead = calloc((size_t)F, 1);
    if (with_dead)
        for (int j = 0; j < F; j++) dead[j] = gsl_rng_uniform(r) < 0.5;
    gsl_rng_free(r);
    const double l1c = arch == MP_SAE_STANDARD ? 0.7 : 0.0;
    float *g = malloc(s->n_floats * sizeof(float));
    mp_sae_grad_ws *w = mp_sae_grad_ws_new();
    double losses[2];
    int nact = 0;
    CHECK(mp_sae_loss_grad(s, x, N, (float)l1c, with_dead ? dead : NULL, w, g, losses, &nact) == MP_OK, "%s: %s",
          label, mp_last_error());
    int sparse = nact < 0.08 * N * F;
    CHECK(sparse == want_sparse, "%s: expected the %s path (active %d of %d)", label, want_sparse ? "sparse" : "dense",
          nact, N * F);
    dsae ds = {D, F, k, arch, apply, NULL, NULL, NULL, NULL};
    double *p = malloc(s->n_floats * sizeof(double)), *res = malloc((size_t)N * D * sizeof(double));
    for (size_t i = 0; i < s->n_floats; i++) p[i] = s->block[i];
    double L0 = ref_loss(&ds, p, x, N, l1c, with_dead ? dead : NULL, res, 1);
    CHECK_NEAR(losses[0] + losses[1], L0, 1e-4 * fmax(1, fabs(L0)), "%s: loss", label);
    double worst = 0;
    size_t wi = 0;
    const double h = 1e-5;
    for (size_t i = 0; i < s->n_floats; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double lp = ref_loss(&ds, p, x, N, l1c, with_dead ? dead : NULL, res, 0);
        p[i] = keep - h;
        double lm = ref_loss(&ds, p, x, N, l1c, with_dead ? dead : NULL, res, 0);
        p[i] = keep;
        double fd = (lp - lm) / (2 * h), err = fabs(fd - g[i]) / fmax(1.0, fabs(fd));
        if (err > worst) worst = err, wi = i;
    }
    CHECK(worst < 2e-4, "%s: gradient vs finite differences: worst relative error %.3g at %zu", label, worst, wi);
    printf("%-34s loss %.6f  grad max rel err %.2g  (%s path, %d active)\n", label, L0, worst,
           sparse ? "sparse" : "dense", nact);
    free(p); free(res); free(x); free(dead); free(g);
    mp_sae_grad_ws_free(w);
    mp_sae_free(s);
}

static void test_schedules(void) {
    mp_sae_train_params p = mp_sae_train_params_default();
    p.steps = 100;
    p.lr = 1e-3f;
    p.lr_warm_up_steps = 10;
    p.lr_decay_steps = 20;
    p.lr_end = 1e-4f;
    p.lr_scheduler = 1;
    /* warm-up (s+1)/W; cosine over [10, 80) to lr_end; linear lr_end -> 0 over [80, 100) */
    CHECK_NEAR(mp_sae_lr_at(&p, 0), 1e-4, 1e-10, "warm-up start");
    CHECK_NEAR(mp_sae_lr_at(&p, 9), 1e-3, 1e-9, "warm-up end");
    CHECK_NEAR(mp_sae_lr_at(&p, 10), 1e-3, 1e-9, "cosine start");
    CHECK_NEAR(mp_sae_lr_at(&p, 45), 1e-4 + 0.9e-3 * 0.5, 1e-9, "cosine middle");
    CHECK_NEAR(mp_sae_lr_at(&p, 80), 1e-4, 1e-9, "decay start");
    CHECK_NEAR(mp_sae_lr_at(&p, 90), 0.5e-4, 1e-9, "decay middle");
    p.lr_scheduler = 0;
    CHECK_NEAR(mp_sae_lr_at(&p, 50), 1e-3, 1e-9, "constant");
    CHECK_NEAR(mp_sae_lr_at(&p, 90), 0.5e-3, 1e-9, "constant's decay starts at lr");
    p.l1_coefficient = 2.0f;
    p.l1_warm_up_steps = 4;
    CHECK_NEAR(mp_sae_l1_at(&p, 0), 0.0, 0, "l1 step 0");
    CHECK_NEAR(mp_sae_l1_at(&p, 1), 0.5, 1e-12, "l1 step 1");
    CHECK_NEAR(mp_sae_l1_at(&p, 4), 2.0, 1e-12, "l1 step 4");
    CHECK_NEAR(mp_sae_l1_at(&p, 40), 2.0, 1e-12, "l1 after");
    p.steps = 10;
    CHECK(mp_sae_train_params_check(&p) != MP_OK, "warm-up + decay > steps must fail");
}

static void test_init(void) {
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, MP_SAE_STANDARD, 50, 30, 0) == MP_OK, "new");
    CHECK(mp_sae_init_weights(s, 7, 0.1f) == MP_OK, "init");
    double worst = 0;
    for (int j = 0; j < 30; j++) {
        double nn = 0;
        for (int i = 0; i < 50; i++) {
            nn += (double)s->W_dec[j * 50 + i] * s->W_dec[j * 50 + i];
            CHECK(s->W_enc[i * 30 + j] == s->W_dec[j * 50 + i], "W_enc = W_dec^T at %d,%d", i, j);
        }
        worst = fmax(worst, fabs(sqrt(nn) - 0.1));
    }
    CHECK(worst < 1e-6, "decoder rows have norm 0.1 (worst %.3g)", worst);
    CHECK(mp_sae_init_weights(s, 7, 0.0f) == MP_OK, "init");
    float mx = 0;
    for (int i = 0; i < 1500; i++) mx = fmaxf(mx, fabsf(s->W_dec[i]));
    CHECK(mx <= sqrtf(6.0f / 50) && mx > 0.9f * sqrtf(6.0f / 50), "kaiming bound sqrt(6/d_in): max %g", mx);
    mp_sae_free(s);
}

/* ---- planted dictionary ---- */
typedef struct {
    const float *x;
    long n, at;
    int d;
} rows_src;

static mp_status rows_next(void *u, float *x, int N, int *got) {
    rows_src *r = u;
    for (int i = 0; i < N; i++) {
        memcpy(x + (size_t)i * r->d, r->x + (size_t)r->at * r->d, (size_t)r->d * sizeof(float));
        r->at = (r->at + 1) % r->n;
    }
    *got = N;
    return MP_OK;
}

static int ckpt_calls;
static mp_status count_ckpt(void *u, const mp_sae *s, long step, long tokens) {
    (void)u; (void)s; (void)tokens;
    ckpt_calls++;
    CHECK(step % 500 == 0 || step == 1500, "checkpoint at step %ld", step);
    return MP_OK;
}

static void planted(mp_sae_arch arch) {
    enum { D = 32, FT = 48, S = 3, NR = 16384 };
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 11);
    static float dict[FT * D];
    for (int j = 0; j < FT; j++) {
        double nn = 0;
        for (int i = 0; i < D; i++) {
            dict[j * D + i] = (float)gsl_ran_gaussian(r, 1.0);
            nn += (double)dict[j * D + i] * dict[j * D + i];
        }
        for (int i = 0; i < D; i++) dict[j * D + i] /= (float)sqrt(nn);
    }
    float *x = calloc((size_t)NR * D, sizeof(float));
    for (int n = 0; n < NR; n++) {
        int chosen[S];
        for (int q = 0; q < S; q++) {
            int j, dup;
            do {
                j = (int)gsl_rng_uniform_int(r, FT);
                dup = 0;
                for (int t = 0; t < q; t++) dup |= chosen[t] == j;
            } while (dup);
            chosen[q] = j;
            float c = (float)(1.0 + gsl_rng_uniform(r));
            for (int i = 0; i < D; i++) x[(size_t)n * D + i] += c * dict[j * D + i];
        }
    }
    gsl_rng_free(r);
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, arch, D, 2 * FT, S) == MP_OK, "new");
    mp_sae_train_params p = mp_sae_train_params_default();
    p.lr = 4e-3f;
    p.batch_size = 256;
    p.steps = 1500;
    p.l1_coefficient = 0.6f;
    p.l1_warm_up_steps = 100;
    p.dead_feature_window = 200;
    p.lr_decay_steps = 300;
    p.checkpoint_every = 500;
    rows_src src = {x, NR, 0, D};
    mp_sae_train_result res;
    ckpt_calls = 0;
    CHECK(mp_sae_train(s, &p, rows_next, &src, count_ckpt, NULL, &res) == MP_OK, "%s", mp_last_error());
    CHECK(ckpt_calls == 3, "checkpoints at 500, 1000 and the end: %d calls", ckpt_calls);
    CHECK(res.steps == 1500 && res.tokens == 1500L * 256, "steps %ld tokens %ld", res.steps, res.tokens);
    int found = 0;
    double mean_best = 0;
    for (int j = 0; j < FT; j++) {
        double best = -1;
        for (int f = 0; f < 2 * FT; f++) {
            const float *w = s->W_dec + (size_t)f * D;
            double dot = 0, nn = 0;
            for (int i = 0; i < D; i++) dot += (double)w[i] * dict[j * D + i], nn += (double)w[i] * w[i];
            if (nn > 0) best = fmax(best, dot / sqrt(nn));
        }
        found += best > 0.9;
        mean_best += best / FT;
    }
    mp_sae_metrics m;
    CHECK(mp_sae_metrics_rows(s, x, 4096, &m) == MP_OK, "metrics");
    printf("planted %-8s: %d/%d directions recovered (cos > 0.9, mean best %.3f), EV %.4f, L0 %.2f (planted %d), "
           "%.3g tok/s\n", mp_sae_arch_name(arch), found, FT, mean_best, m.explained_variance, m.l0, S,
           res.tokens / res.seconds);
    CHECK(found >= FT * 9 / 10, "%s: recovered %d of %d planted directions", mp_sae_arch_name(arch), found, FT);
    CHECK(m.explained_variance > 0.9, "%s: explained variance %.4f", mp_sae_arch_name(arch), m.explained_variance);
    /* topk keeps exactly S; the L1 penalty of standard trades sparsity for
     * reconstruction (here about 2 S at this coefficient) */
    if (arch == MP_SAE_TOPK) CHECK(fabs(m.l0 - S) < 0.05, "topk: L0 %.2f vs planted %d", m.l0, S);
    else CHECK(m.l0 > S - 0.5 && m.l0 < 2.5 * S, "standard: L0 %.2f vs planted %d", m.l0, S);
    free(x);
    mp_sae_free(s);
}

static void test_metrics_hand(void) {
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, MP_SAE_STANDARD, 2, 3, 0) == MP_OK, "new");
    s->W_enc[0 * 3 + 0] = 1; s->W_enc[1 * 3 + 1] = 1;
    s->W_dec[0 * 2 + 0] = 1; s->W_dec[1 * 2 + 1] = 1;
    const float x[6] = {1, 2, 3, -1, 0, 0};
    mp_sae_metrics m;
    CHECK(mp_sae_metrics_rows(s, x, 3, &m) == MP_OK, "metrics");
    /* xhat = relu(x): sse 1; mean (4/3, 1/3): total 84/9; L0 (2+1+0)/3; feature 3 never fires */
    CHECK_NEAR(m.explained_variance, 1.0 - 9.0 / 84.0, 1e-12, "explained variance");
    CHECK_NEAR(m.mse, 1.0 / 6.0, 1e-12, "mse");
    CHECK_NEAR(m.l0, 1.0, 1e-12, "l0");
    CHECK_NEAR(m.dead_fraction, 1.0 / 3.0, 1e-12, "dead fraction");
    CHECK(m.rows == 3, "rows");
    mp_sae_free(s);
}

static void test_ce(void) {
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 2; c.n_kv_head = 2; c.d_head = 8; c.d_mlp = 32; c.vocab = 23; c.ctx = 16;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 5, 0.3f) == MP_OK, "%s", mp_last_error());
    if (!m) return;
    enum { B = 3, T = 10 };
    int tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % c.vocab;
    mp_sae *id = NULL, *zero = NULL;
    CHECK(mp_sae_new(&id, MP_SAE_STANDARD, 16, 32, 0) == MP_OK, "new");
    CHECK(mp_sae_new(&zero, MP_SAE_STANDARD, 16, 8, 0) == MP_OK, "new");
    for (int i = 0; i < 16; i++) {
        id->W_enc[i * 32 + i] = 1; id->W_enc[i * 32 + 16 + i] = -1;
        id->W_dec[i * 16 + i] = 1; id->W_dec[(16 + i) * 16 + i] = -1;
    }
    strcpy(id->hook_name, "blocks.0.hook_resid_post");
    mp_sae_metrics a, z;
    CHECK(mp_sae_evaluate(id, m, NULL, tok, B, T, &a) == MP_OK, "%s", mp_last_error());
    CHECK(mp_sae_evaluate(zero, m, "blocks.0.hook_resid_post", tok, B, T, &z) == MP_OK, "%s", mp_last_error());
    printf("CE: clean %.5f, identity SAE %.5f, zero ablation %.5f -> recovered %.6f; zero SAE %.6f\n", a.ce_clean,
           a.ce_sae, a.ce_zero, a.ce_loss_recovered, z.ce_loss_recovered);
    CHECK(fabs(a.ce_zero - a.ce_clean) > 1e-3, "zero ablation changes the loss");
    CHECK_NEAR(a.ce_loss_recovered, 1.0, 1e-5, "an exact SAE recovers all");
    CHECK_NEAR(a.explained_variance, 1.0, 1e-6, "an exact SAE explains all");
    CHECK(a.rows == B * T, "rows %ld", a.rows);
    CHECK_NEAR(z.ce_loss_recovered, 0.0, 1e-6, "the zero SAE recovers nothing");
    CHECK_NEAR(z.dead_fraction, 1.0, 0, "the zero SAE's features never fire");
    CHECK(mp_sae_evaluate(zero, m, "blocks.9.hook_resid_post", tok, B, T, &z) == MP_ERR_ARG, "bad hook");
    CHECK(strstr(mp_last_error(), "blocks.9.hook_resid_post") != NULL, "names the hook: %s", mp_last_error());
    /* the live source hands out the point's rows */
    mp_sae_live *lv = NULL;
    CHECK(mp_sae_live_new(&lv, m, "blocks.1.hook_resid_pre", 16, tok, B, T, 2, 1) == MP_OK, "%s", mp_last_error());
    float buf[100 * 16];
    int got = 0, total = 0;
    do {
        CHECK(mp_sae_live_produce(lv, buf, 7, &got) == MP_OK, "%s", mp_last_error());
        total += got;
    } while (got > 0 && total < 1000);
    CHECK(total == B * T, "one epoch of the live source: %d rows", total);
    mp_sae_live_free(lv);
    mp_sae_free(id);
    mp_sae_free(zero);
    mp_model_free(m);
}

int main(void) {
    mp_init();
    fd_case("standard dense, apply_b_dec", MP_SAE_STANDARD, 6, 10, 0, 5, 1, 0.0f, 0, 0, 1);
    fd_case("standard dense, no apply_b_dec", MP_SAE_STANDARD, 6, 10, 0, 5, 0, 0.0f, 0, 0, 2);
    fd_case("standard sparse", MP_SAE_STANDARD, 6, 60, 0, 8, 1, -2.2f, 0, 1, 3);
    fd_case("topk k=3 sparse", MP_SAE_TOPK, 6, 40, 3, 6, 1, 0.0f, 0, 1, 4);
    fd_case("topk k=3 sparse + AuxK", MP_SAE_TOPK, 6, 40, 3, 6, 1, 0.0f, 1, 1, 5);
    fd_case("topk k=10 dense + AuxK", MP_SAE_TOPK, 8, 40, 10, 6, 1, 0.0f, 1, 0, 6);
    test_schedules();
    test_init();
    test_metrics_hand();
    test_ce();
    planted(MP_SAE_TOPK);
    planted(MP_SAE_STANDARD);
    return tu_finish("test_sae_train");
}
