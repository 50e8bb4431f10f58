/* test_mirror.c — unit tests of analyze/mirror.{h,c}: the MTD in-context
 * estimators against hand-computed small cases (responsibilities, one to three
 * mirror-descent steps, predictor, KL, posterior means in closed form), the
 * Gibbs sampler against quadrature for m = 2 and the closed form of a single
 * observation, one-step mirror descent with eta = 1/(m+1) against the Bayes mean
 * to first order, the oracle predictor's KL, the construction = one-step MD
 * identity, tuning, and argument validation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mirror.h"
#include "mtd.h"
#include "testutil.h"

/* The hand case: q = 2, m = 2, pi = [[.9,.1],[.2,.8]], y = 0 1 1 0.
 * Observation k=2 (y=1): a = (pi(1,1), pi(0,1)) = (.8, .1), gamma = (8/9, 1/9);
 * k=3 (y=0): a = (pi(1,0), pi(1,0)) = (.2, .2), gamma = (1/2, 1/2). */
static const double PI2[4] = {0.9, 0.1, 0.2, 0.8};
static const int32_t Y4[4] = {0, 1, 1, 0};

static mp_mirror_data hand(void) {
    mp_mirror_data d = {2, 2, PI2, 1, 4, Y4};
    return d;
}

static void test_hand_cases(void) {
    mp_mirror_data d = hand();
    double gamma[4], lam[2], pred[2];
    CHECK(mp_mirror_responsibilities(&d, gamma) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(gamma[0], 8.0 / 9, 1e-15, "gamma_2(1)");
    CHECK_NEAR(gamma[1], 1.0 / 9, 1e-15, "gamma_2(2)");
    CHECK_NEAR(gamma[2], 0.5, 1e-15, "gamma_3(1)");
    CHECK_NEAR(gamma[3], 0.5, 1e-15, "gamma_3(2)");

    /* one step from uniform: softmax(eta m sum_k gamma_k) = softmax(0.5*2*(25/18, 11/18)):
     * lambda_1 = 1 / (1 + exp(-14/18)) */
    CHECK(mp_mirror_descent(&d, 0.5, 1, lam) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(lam[0], 1.0 / (1.0 + exp(-14.0 / 18)), 1e-14, "one step eta=0.5");
    CHECK_NEAR(lam[0], 0.68520098, 1e-8, "one step eta=0.5 (numpy)");
    CHECK_NEAR(lam[0] + lam[1], 1.0, 1e-15, "sums to 1");
    /* two and three steps (numpy reference of lambda <- lambda exp(eta grad) / Z) */
    CHECK(mp_mirror_descent(&d, 0.5, 2, lam) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(lam[0], 0.79924786, 1e-8, "two steps eta=0.5");
    CHECK(mp_mirror_descent(&d, 0.3, 3, lam) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(lam[0], 0.77158885, 1e-8, "three steps eta=0.3");
    /* zero steps and eta = 0 stay uniform; a huge eta picks the argmax without NaN */
    CHECK(mp_mirror_descent(&d, 0.0, 3, lam) == MP_OK && lam[0] == 0.5, "eta=0 stays uniform");
    CHECK(mp_mirror_descent(&d, 1e12, 3, lam) == MP_OK && lam[0] == 1.0 && lam[1] == 0.0,
          "huge eta: argmax (%g, %g)", lam[0], lam[1]);

    /* predictor of y_4: lambda (.7,.3): .7 pi(y_3=0,.) + .3 pi(y_2=1,.) = (.69, .31) */
    double l73[2] = {0.7, 0.3};
    CHECK(mp_mirror_predict(&d, l73, pred) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(pred[0], 0.69, 1e-15, "pred 0");
    CHECK_NEAR(pred[1], 0.31, 1e-15, "pred 1");

    /* KL((.5,.5) || (.25,.75)) = .5 ln 2 + .5 ln(2/3) */
    double p[2] = {0.5, 0.5}, r[2] = {0.25, 0.75}, z[2] = {1.0, 0.0}, r0[2] = {0.0, 1.0};
    CHECK_NEAR(mp_mirror_kl(p, r, 2), 0.5 * log(2.0) + 0.5 * log(2.0 / 3), 1e-15, "KL");
    CHECK_NEAR(mp_mirror_kl(z, p, 2), log(2.0), 1e-15, "KL with a zero in p");
    CHECK(isinf(mp_mirror_kl(p, r0, 2)), "KL with r = 0 where p > 0 is +inf");

    /* Bayes: posterior density of x = lambda_1 is prop. to (.8x + .1(1-x)) * .2,
     * mean = (1/20 + 7/30) / (1/10 + 7/20) = 17/27 */
    double mean[2], rhat;
    CHECK(mp_mirror_bayes_exact(&d, mean) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(mean[0], 17.0 / 27, 1e-10, "exact posterior mean (hand)");
    mp_mirror_gibbs_params gp = mp_mirror_gibbs_params_default();
    gp.samples = 20000;
    CHECK(mp_mirror_bayes(&d, &gp, mean, &rhat) == MP_OK, "%s", mp_last_error());
    /* 4 x 20000 sweeps: Monte-Carlo error ~1e-3 */
    CHECK_NEAR(mean[0], 17.0 / 27, 4e-3, "Gibbs posterior mean (hand)");
    CHECK(rhat < 1.01, "R-hat %g", rhat);

    /* the construction: softmax(beta * mean gamma) = one MD step with eta = beta / (m N) */
    double lc[2], pc[2];
    CHECK(mp_mirror_construction(&d, 3.0, lc, pc) == MP_OK, "%s", mp_last_error());
    CHECK(mp_mirror_descent(&d, 3.0 / (2 * 2), 1, lam) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(lc[0], lam[0], 1e-14, "construction = one MD step");
    CHECK_NEAR(lc[0], 1.0 / (1.0 + exp(-3.0 * (25.0 - 11.0) / 36)), 1e-14, "construction (hand)");
    CHECK(mp_mirror_predict(&d, lc, pred) == MP_OK && fabs(pred[0] - pc[0]) < 1e-15, "construction's predictor");

    /* T = m: no observation, every estimator is uniform / the prior mean */
    mp_mirror_data d0 = {2, 2, PI2, 1, 2, Y4};
    CHECK(mp_mirror_descent(&d0, 1.0, 2, lam) == MP_OK && lam[0] == 0.5, "MD without observations");
    CHECK(mp_mirror_bayes(&d0, NULL, mean, &rhat) == MP_OK && mean[0] == 0.5 && rhat == 1.0, "Gibbs, no data");
    CHECK(mp_mirror_bayes_exact(&d0, mean) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(mean[0], 0.5, 1e-12, "exact, no data");
    CHECK(mp_mirror_construction(&d0, 5.0, lam, NULL) == MP_OK && lam[0] == 0.5, "construction, no data");
}

/* Sequences from the MTD generator with their truth. */
typedef struct {
    mp_mtd *task;
    int B, T, q, m;
    int32_t *tok, *tgt;
    double *lambda, *next, *last;  /* last [B, q] = next at position T-1 */
} sample;

static int sample_init(sample *s, int q, int m, double c, int B, int T, uint64_t seed) {
    memset(s, 0, sizeof *s);
    mp_mtd_params p = mp_mtd_params_default();
    p.q = q; p.m = m; p.c = c; p.seed = seed;
    if (mp_mtd_new(&s->task, &p) != MP_OK) return -1;
    s->B = B; s->T = T; s->q = q; s->m = m;
    s->tok = malloc(sizeof(int32_t) * B * T);
    s->tgt = malloc(sizeof(int32_t) * B * T);
    s->lambda = malloc(sizeof(double) * B * m);
    s->next = malloc(sizeof(double) * B * T * q);
    s->last = malloc(sizeof(double) * B * q);
    if (mp_mtd_sample(s->task, B, T, s->tok, s->tgt, s->lambda, s->next) != MP_OK) return -1;
    for (int b = 0; b < B; b++)
        memcpy(s->last + b * q, s->next + ((size_t)b * T + T - 1) * q, sizeof(double) * q);
    return 0;
}

static void sample_free(sample *s) {
    mp_mtd_free(s->task);
    free(s->tok); free(s->tgt); free(s->lambda); free(s->next); free(s->last);
}

static mp_mirror_data data_of(const sample *s) {
    mp_mirror_data d = {s->q, s->m, mp_mtd_pi(s->task), s->B, s->T, s->tok};
    return d;
}

/* Gibbs (4 chains x 8000 kept sweeps) against quadrature for m = 2. The
 * Rao-Blackwellised mean has a Monte-Carlo error of a few 1e-3 at most here:
 * tolerance 0.01 on each sequence, 3e-3 on the mean absolute error. */
static void test_gibbs_vs_quadrature(void) {
    const int Ts[] = {3, 6, 20, 80, 200};
    double worst = 0, sum = 0, worst_rhat = 0;
    int n = 0;
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        sample s;
        CHECK(sample_init(&s, 5, 2, 0.5, 6, Ts[i], 11 + i) == 0, "%s", mp_last_error());
        mp_mirror_data d = data_of(&s);
        double ex[12], gb[12], rh[6];
        mp_mirror_gibbs_params gp = mp_mirror_gibbs_params_default();
        gp.samples = 8000;
        gp.seed = 5;
        CHECK(mp_mirror_bayes_exact(&d, ex) == MP_OK, "%s", mp_last_error());
        CHECK(mp_mirror_bayes(&d, &gp, gb, rh) == MP_OK, "%s", mp_last_error());
        for (int b = 0; b < 6; b++) {
            double e = fabs(ex[2 * b] - gb[2 * b]);
            if (getenv("MIRROR_VERBOSE")) printf("T=%d seq %d exact %.5f gibbs %.5f rhat %.4f\n", Ts[i], b, ex[2*b], gb[2*b], rh[b]);
            CHECK(e < 0.01, "T=%d seq %d: exact %.5f Gibbs %.5f", Ts[i], b, ex[2 * b], gb[2 * b]);
            CHECK_NEAR(ex[2 * b] + ex[2 * b + 1], 1.0, 1e-12, "exact sums to 1");
            if (e > worst) worst = e;
            if (rh[b] > worst_rhat) worst_rhat = rh[b];
            sum += e;
            n++;
        }
        sample_free(&s);
    }
    CHECK(sum / n < 3e-3, "mean |Gibbs - exact| = %g", sum / n);
    CHECK(worst_rhat < 1.05, "worst R-hat %g", worst_rhat);
    printf("Gibbs vs quadrature (m=2, %d sequences, T = 3..200): max |diff| %.2e, mean %.2e, worst R-hat %.4f\n", n,
           worst, sum / n, worst_rhat);
}

/* One observation: the posterior mean is (1 + gamma(g)) / (m + 1) in closed form
 * (E[lambda_g lambda_h] = (1 + delta_gh) / (m (m+1)) under Dirichlet(1)). Gibbs
 * must find it for m = 3 and 4; quadrature for m = 2. */
static void test_single_observation_closed_form(void) {
    for (int m = 2; m <= 4; m++) {
        sample s;
        CHECK(sample_init(&s, 6, m, 0.5, 5, m + 1, 40 + m) == 0, "%s", mp_last_error());
        mp_mirror_data d = data_of(&s);
        double gamma[5 * 4], mean[5 * 4], ex[5 * 2];
        mp_mirror_gibbs_params gp = mp_mirror_gibbs_params_default();
        gp.samples = 20000;
        CHECK(mp_mirror_responsibilities(&d, gamma) == MP_OK, "%s", mp_last_error());
        CHECK(mp_mirror_bayes(&d, &gp, mean, NULL) == MP_OK, "%s", mp_last_error());
        if (m == 2) CHECK(mp_mirror_bayes_exact(&d, ex) == MP_OK, "%s", mp_last_error());
        for (int b = 0; b < 5; b++)
            for (int g = 0; g < m; g++) {
                double cf = (1.0 + gamma[b * m + g]) / (m + 1);
                CHECK_NEAR(mean[b * m + g], cf, 4e-3, "Gibbs, one observation, m=%d", m);
                if (m == 2) CHECK_NEAR(ex[b * 2 + g], cf, 1e-9, "quadrature, one observation");
            }
        sample_free(&s);
    }
}

/* One MD step from uniform with eta = 1/(m+1) agrees with the Bayes mean to
 * first order in the evidence: with pi = 1/q + eps D (rows of D sum to 0) the
 * difference is O(eps^2) (halving eps divides it by ~4), while eta = 2/(m+1)
 * leaves an O(eps) error (halving eps divides it by ~2). */
static double md_vs_bayes(double eps, double eta_scale, int m) {
    enum { Q = 4 };
    double pi[Q * Q];
    static const double D[Q * Q] = {3, -1, -1, -1, -2, 2, 1, -1, 0, -3, 2, 1, 1, 1, -1, -1};
    for (int i = 0; i < Q * Q; i++) pi[i] = 1.0 / Q + eps * D[i];
    int32_t y[8];
    double worst = 0;
    /* a handful of single-observation sequences (T = m + 1) */
    for (int seq = 0; seq < 12; seq++) {
        for (int t = 0; t <= m; t++) y[t] = (seq * 7 + t * 3 + t * t * seq) % Q;
        mp_mirror_data d = {Q, m, pi, 1, m + 1, y};
        double lam[4], gamma[4];
        if (mp_mirror_descent(&d, eta_scale / (m + 1), 1, lam) || mp_mirror_responsibilities(&d, gamma)) return NAN;
        for (int g = 0; g < m; g++) {
            double e = fabs(lam[g] - (1.0 + gamma[g]) / (m + 1));
            if (e > worst) worst = e;
        }
    }
    return worst;
}

static void test_md_first_order(void) {
    for (int m = 2; m <= 3; m++) {
        double e1 = md_vs_bayes(0.02, 1.0, m), e2 = md_vs_bayes(0.01, 1.0, m), e3 = md_vs_bayes(0.005, 1.0, m);
        CHECK(e1 > 0 && e2 > 0, "nonzero residual");
        /* at least second order (for m = 2 the logistic has no quadratic term: third) */
        CHECK(e1 / e2 > 3.5 && e2 / e3 > 3.5,
              "m=%d: eta=1/(m+1) error is of second order or higher: %.3g %.3g %.3g (ratios %.2f %.2f)", m, e1, e2,
              e3, e1 / e2, e2 / e3);
        CHECK(e3 < 1e-4, "m=%d: error at eps=0.005: %g", m, e3);
        double f1 = md_vs_bayes(0.02, 2.0, m), f2 = md_vs_bayes(0.01, 2.0, m);
        CHECK(fabs(f1 / f2 - 2.0) < 0.3, "m=%d: eta=2/(m+1) error is first order (ratio %.2f)", m, f1 / f2);
        CHECK(f2 > 10 * e2, "m=%d: the right step is much closer (%g vs %g)", m, e2, f2);
    }
}

/* The oracle predictor (true lambda) reproduces MTD's next-token truth: KL 0. */
static void test_oracle_kl_zero(void) {
    sample s;
    CHECK(sample_init(&s, 8, 3, 1.0, 16, 40, 3) == 0, "%s", mp_last_error());
    mp_mirror_data d = data_of(&s);
    double pred[16 * 8], worst = 0;
    CHECK(mp_mirror_predict(&d, s.lambda, pred) == MP_OK, "%s", mp_last_error());
    for (int b = 0; b < 16; b++) {
        double kl = mp_mirror_kl(s.last + b * 8, pred + b * 8, 8);
        if (fabs(kl) > worst) worst = fabs(kl);
    }
    CHECK(worst < 1e-12, "oracle KL %g", worst);
    /* and a wrong lambda has a positive KL */
    double uni[16 * 3];
    for (int i = 0; i < 16 * 3; i++) uni[i] = 1.0 / 3;
    CHECK(mp_mirror_predict(&d, uni, pred) == MP_OK, "%s", mp_last_error());
    double s_kl = 0;
    for (int b = 0; b < 16; b++) s_kl += mp_mirror_kl(s.last + b * 8, pred + b * 8, 8);
    CHECK(s_kl > 1e-3, "uniform lambda has KL > 0 (%g)", s_kl);
    sample_free(&s);
}

/* Tuning: the table equals direct evaluation; the refined optimum lies between
 * the best grid point's neighbours; the construction's best beta is ~ eta m N. */
static void test_tune(void) {
    sample s;
    CHECK(sample_init(&s, 8, 3, 0.5, 32, 33, 9) == 0, "%s", mp_last_error());
    mp_mirror_data d = data_of(&s);
    enum { G = 25 };
    double grid[G], kl[G], klc[G], lam[32 * 3], pred[32 * 8];
    for (int j = 0; j < G; j++) grid[j] = pow(10.0, -3.0 + 4.0 * j / (G - 1));
    mp_mirror_tuned t, tc;
    CHECK(mp_mirror_tune(&d, s.last, MP_MIRROR_MD, 1, grid, G, kl, &t) == MP_OK, "%s", mp_last_error());
    for (int j = 0; j < G; j += 6) {
        CHECK(mp_mirror_descent(&d, grid[j], 1, lam) == MP_OK && mp_mirror_predict(&d, lam, pred) == MP_OK, "eval");
        double sum = 0;
        for (int b = 0; b < 32; b++) sum += mp_mirror_kl(s.last + b * 8, pred + b * 8, 8);
        CHECK_NEAR(kl[j], sum / 32, 1e-12, "tuning table at %d", j);
    }
    for (int j = 0; j < G; j++) CHECK(kl[t.best] <= kl[j], "best is the argmin");
    CHECK(t.best > 0 && t.best < G - 1, "optimum inside the grid (%d)", t.best);
    CHECK(t.value > grid[t.best - 1] && t.value < grid[t.best + 1], "refined value %g", t.value);
    CHECK(mp_mirror_tune(&d, s.last, MP_MIRROR_CONSTRUCTION, 0, grid, G, klc, &tc) == MP_OK, "%s", mp_last_error());
    /* beta = eta m N with N = 30: beta grid point j matches eta = grid[j] / 90 */
    double eta_c = tc.value / (3.0 * 30);
    CHECK(fabs(log(eta_c / t.value)) < 0.15, "construction beta/(mN) %g vs eta %g", eta_c, t.value);
    sample_free(&s);
}

static void test_errors(void) {
    double out[8];
    mp_mirror_data d = hand();
    double bad_pi[4] = {0.9, 0.2, 0.2, 0.8};
    d.pi = bad_pi;
    CHECK(mp_mirror_descent(&d, 1, 1, out) == MP_ERR_ARG && strstr(mp_last_error(), "row 0"), "%s", mp_last_error());
    d = hand();
    int32_t bad_tok[4] = {0, 1, 2, 0};
    d.tokens = bad_tok;
    CHECK(mp_mirror_responsibilities(&d, out) == MP_ERR_ARG && strstr(mp_last_error(), "token 2"), "%s",
          mp_last_error());
    d = hand();
    d.T = 1;
    CHECK(mp_mirror_bayes(&d, NULL, out, NULL) == MP_ERR_ARG && strstr(mp_last_error(), "shorter"), "%s",
          mp_last_error());
    d = hand();
    CHECK(mp_mirror_descent(&d, -1, 1, out) == MP_ERR_ARG && strstr(mp_last_error(), "eta"), "%s", mp_last_error());
    CHECK(mp_mirror_descent(&d, NAN, 1, out) == MP_ERR_ARG, "NaN eta");
    CHECK(mp_mirror_construction(&d, INFINITY, out, NULL) == MP_ERR_ARG, "inf beta");
    mp_mirror_gibbs_params gp = mp_mirror_gibbs_params_default();
    gp.chains = 1;
    CHECK(mp_mirror_bayes(&d, &gp, out, NULL) == MP_ERR_ARG && strstr(mp_last_error(), "chains"), "%s",
          mp_last_error());
    double pi3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    int32_t y3[4] = {0, 1, 2, 2};
    mp_mirror_data d3 = {3, 2, pi3, 1, 4, y3};
    CHECK(mp_mirror_descent(&d3, 1, 1, out) == MP_ERR_ARG && strstr(mp_last_error(), "probability 0"), "%s",
          mp_last_error());
    int32_t y3ok[4] = {0, 1, 1, 1};
    d3.tokens = y3ok;
    CHECK(mp_mirror_descent(&d3, 1, 1, out) == MP_OK, "%s", mp_last_error());
    mp_mirror_data dm3 = {3, 3, pi3, 1, 4, y3ok};
    CHECK(mp_mirror_bayes_exact(&dm3, out) == MP_ERR_ARG && strstr(mp_last_error(), "m = 2"), "%s", mp_last_error());
    double grid[2] = {1, 0.5}, kl[2], truth[2] = {0.5, 0.5};
    d = hand();
    CHECK(mp_mirror_tune(&d, truth, MP_MIRROR_MD, 1, grid, 2, kl, NULL) == MP_ERR_ARG &&
          strstr(mp_last_error(), "increasing"), "%s", mp_last_error());
    double lneg[2] = {-0.1, 1.1};
    CHECK(mp_mirror_predict(&d, lneg, out) == MP_ERR_ARG, "negative lambda");
}

/* Same seed, same draws. */
static void test_determinism(void) {
    sample s;
    CHECK(sample_init(&s, 8, 3, 1.0, 8, 30, 21) == 0, "%s", mp_last_error());
    mp_mirror_data d = data_of(&s);
    double a[24], b[24], ra[8], rb[8];
    mp_mirror_gibbs_params gp = mp_mirror_gibbs_params_default();
    gp.samples = 200;
    CHECK(mp_mirror_bayes(&d, &gp, a, ra) == MP_OK && mp_mirror_bayes(&d, &gp, b, rb) == MP_OK, "%s",
          mp_last_error());
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(ra, rb, sizeof ra) == 0, "Gibbs is deterministic");
    gp.seed = 2;
    CHECK(mp_mirror_bayes(&d, &gp, b, rb) == MP_OK && memcmp(a, b, sizeof a) != 0, "another seed, other draws");
    sample_free(&s);
}

/* Power-law fit: exact for y = 3/x; by hand for (1,1), (2,4), (4,8): in units
 * of ln 2 the points are (0,0), (1,2), (2,3): slope 3/2, intercept ln2/6,
 * SSE = (ln 2)^2/6, slope SE = sqrt(SSE/(n-2) / Sxx) = sqrt(1/12), R^2 = 27/28. */
static void test_fit(void) {
    double x[5] = {4, 8, 16, 32, 64}, y[5];
    for (int i = 0; i < 5; i++) y[i] = 3.0 / x[i];
    mp_mirror_fit f;
    CHECK(mp_mirror_fit_loglog(x, y, 5, &f) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(f.slope, -1.0, 1e-12, "exact power law slope");
    CHECK_NEAR(f.intercept, log(3.0), 1e-12, "exact power law intercept");
    CHECK(f.slope_se < 1e-10 && fabs(f.r2 - 1.0) < 1e-12, "exact fit: se %g r2 %g", f.slope_se, f.r2);
    double hx[3] = {1, 2, 4}, hy[3] = {1, 4, 8};
    CHECK(mp_mirror_fit_loglog(hx, hy, 3, &f) == MP_OK, "%s", mp_last_error());
    CHECK_NEAR(f.slope, 1.5, 1e-12, "hand slope");
    CHECK_NEAR(f.intercept, log(2.0) / 6, 1e-12, "hand intercept");
    CHECK_NEAR(f.slope_se, sqrt(1.0 / 12), 1e-12, "hand slope SE");
    CHECK_NEAR(f.r2, 27.0 / 28, 1e-12, "hand R^2");
    hy[1] = 0;
    CHECK(mp_mirror_fit_loglog(hx, hy, 3, &f) == MP_ERR_ARG && strstr(mp_last_error(), "point 1"), "%s",
          mp_last_error());
    CHECK(mp_mirror_fit_loglog(hx, hy, 2, &f) == MP_ERR_ARG, "two points");
}

int main(void) {
    mp_init();
    test_hand_cases();
    test_gibbs_vs_quadrature();
    test_single_observation_closed_form();
    test_md_first_order();
    test_oracle_kl_zero();
    test_tune();
    test_errors();
    test_determinism();
    test_fit();
    return tu_finish("test_mirror");
}
