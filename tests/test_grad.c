/* test_grad.c — gradient checks. Every backward kernel of ops_backward.c
 * against central finite differences of an independent double-precision
 * reference forward written here (scalar objective sum(out * R) with random
 * R; eps 1e-5 in double, so the FD error is ~1e-9): embedding, linear with
 * bias, RMSNorm, LayerNorm, RoPE, SwiGLU, exact GELU, grouped-query causal
 * attention, masked cross-entropy. Tolerance: max |analytic - FD| <= 2e-5 *
 * max(1, max |FD|) (float32 kernels). Then whole-model gradients of the
 * training backward (mp_model_forward_backward) for four configs (RMS/SwiGLU/
 * RoPE/GQA/tied, LayerNorm/GELU/no positions/untied, attention-only, MHA)
 * against central differences of the float forward loss (eps 1e-2 on weights
 * of scale 0.3; the loss is computed in float, so the FD error is ~1e-4):
 * every parameter tensor, 6 entries each, |an - fd| <= 2e-3 + 5e-2 |fd|. */
#include "model.h"
#include "ops.h"
#include "train.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return (double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static void fill(double *x, size_t n, double s) { for (size_t i = 0; i < n; i++) x[i] = s * urand(); }
static void to_f(float *y, const double *x, size_t n) { for (size_t i = 0; i < n; i++) y[i] = (float)x[i]; }

/* reference objective of the packed inputs theta */
typedef double (*objective)(const double *theta, void *ctx);

/* Compares analytic gradient an[n] with central differences of f. */
static void fd_check(const char *what, objective f, void *ctx, double *theta, const float *an, size_t n) {
    double maxfd = 0, maxerr = 0;
    const double eps = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double save = theta[i];
        theta[i] = save + eps;
        double fp = f(theta, ctx);
        theta[i] = save - eps;
        double fm = f(theta, ctx);
        theta[i] = save;
        double fd = (fp - fm) / (2 * eps);
        if (fabs(fd) > maxfd) maxfd = fabs(fd);
        if (fabs(fd - an[i]) > maxerr) maxerr = fabs(fd - an[i]);
    }
    double tol = 2e-5 * (maxfd > 1 ? maxfd : 1);
    printf("  %-28s max|grad| %.3e  max|an-fd| %.3e\n", what, maxfd, maxerr);
    CHECK(maxerr <= tol, "%s: max error %.3e > %.3e", what, maxerr, tol);
}

/* ---- linear: theta = [in N*IN | w OUT*IN | b OUT] ---- */
enum { LN_N = 5, LN_IN = 7, LN_OUT = 6 };
static double R_lin[LN_N * LN_OUT];
static double obj_linear(const double *th, void *ctx) {
    (void)ctx;
    const double *in = th, *w = th + LN_N * LN_IN, *b = w + LN_OUT * LN_IN;
    double s = 0;
    for (int n = 0; n < LN_N; n++)
        for (int o = 0; o < LN_OUT; o++) {
            double y = b[o];
            for (int i = 0; i < LN_IN; i++) y += in[n * LN_IN + i] * w[o * LN_IN + i];
            s += y * R_lin[n * LN_OUT + o];
        }
    return s;
}
static void test_linear(void) {
    const size_t n = LN_N * LN_IN + LN_OUT * LN_IN + LN_OUT;
    double th[LN_N * LN_IN + LN_OUT * LN_IN + LN_OUT];
    fill(th, n, 1.0);
    fill(R_lin, LN_N * LN_OUT, 1.0);
    float f[sizeof th / sizeof *th], an[sizeof th / sizeof *th], R[LN_N * LN_OUT];
    to_f(f, th, n);
    to_f(R, R_lin, LN_N * LN_OUT);
    memset(an, 0, sizeof an);
    mp_matmul_backward(an, an + LN_N * LN_IN, an + LN_N * LN_IN + LN_OUT * LN_IN, R, f, f + LN_N * LN_IN, LN_N,
                       LN_IN, LN_OUT);
    fd_check("linear (in, w, bias)", obj_linear, NULL, th, an, n);
}

/* ---- norms: theta = [x N*D | w D | b D] ---- */
enum { NM_N = 4, NM_D = 9 };
static double R_nm[NM_N * NM_D];
static double obj_norm(const double *th, void *ctx) {
    int layer = *(int *)ctx;
    const double *x = th, *w = th + NM_N * NM_D, *b = w + NM_D;
    double s = 0, eps = 1e-5;
    for (int n = 0; n < NM_N; n++) {
        const double *r = x + n * NM_D;
        double mu = 0, v = 0;
        if (layer) {
            for (int i = 0; i < NM_D; i++) mu += r[i];
            mu /= NM_D;
        }
        for (int i = 0; i < NM_D; i++) v += (r[i] - mu) * (r[i] - mu);
        double rstd = 1 / sqrt(v / NM_D + eps);
        for (int i = 0; i < NM_D; i++) s += ((r[i] - mu) * rstd * w[i] + (layer ? b[i] : 0)) * R_nm[n * NM_D + i];
    }
    return s;
}
static void test_norm(int layer) {
    const size_t n = NM_N * NM_D + 2 * NM_D;
    double th[NM_N * NM_D + 2 * NM_D];
    fill(th, n, 1.0);
    for (int i = 0; i < NM_D; i++) th[NM_N * NM_D + i] += 1.0;
    fill(R_nm, NM_N * NM_D, 1.0);
    float f[sizeof th / sizeof *th], an[sizeof th / sizeof *th], R[NM_N * NM_D], out[NM_N * NM_D], mean[NM_N],
        rstd[NM_N];
    to_f(f, th, n);
    to_f(R, R_nm, NM_N * NM_D);
    memset(an, 0, sizeof an);
    const float *x = f, *w = f + NM_N * NM_D, *b = w + NM_D;
    if (layer) {
        mp_layernorm_forward(out, mean, rstd, x, w, b, NM_N, NM_D, 1e-5f);
        mp_layernorm_backward(an, an + NM_N * NM_D, an + NM_N * NM_D + NM_D, R, x, w, mean, rstd, NM_N, NM_D);
        fd_check("layernorm (x, w, b)", obj_norm, &layer, th, an, n);
    } else {
        mp_rmsnorm_forward(out, rstd, x, w, NM_N, NM_D, 1e-5f);
        mp_rmsnorm_backward(an, an + NM_N * NM_D, R, x, w, rstd, NM_N, NM_D);
        fd_check("rmsnorm (x, w)", obj_norm, &layer, th, an, n - NM_D);
    }
}

/* ---- RoPE: theta = x [B,T,nh,Dh] ---- */
enum { RP_B = 2, RP_T = 5, RP_H = 3, RP_DH = 8 };
static double R_rp[RP_B * RP_T * RP_H * RP_DH];
static double obj_rope(const double *x, void *ctx) {
    (void)ctx;
    double s = 0;
    for (int b = 0; b < RP_B; b++)
        for (int t = 0; t < RP_T; t++)
            for (int h = 0; h < RP_H; h++)
                for (int i = 0; i < RP_DH / 2; i++) {
                    double ang = (t + 3) * pow(500.0, -2.0 * i / RP_DH);
                    size_t o = (((size_t)b * RP_T + t) * RP_H + h) * RP_DH + 2 * i;
                    double y0 = x[o] * cos(ang) - x[o + 1] * sin(ang), y1 = x[o] * sin(ang) + x[o + 1] * cos(ang);
                    s += y0 * R_rp[o] + y1 * R_rp[o + 1];
                }
    return s;
}
static void test_rope(void) {
    enum { n = RP_B * RP_T * RP_H * RP_DH };
    double th[n];
    float an[n], ct[RP_T * RP_DH / 2], st[RP_T * RP_DH / 2];
    fill(th, n, 1.0);
    fill(R_rp, n, 1.0);
    mp_rope_table(ct, st, 3, RP_T, RP_DH, 500.0);
    to_f(an, R_rp, n);
    mp_rope_backward(an, ct, st, RP_B, RP_T, RP_H, RP_DH);
    fd_check("rope (pos0 3, theta 500)", obj_rope, NULL, th, an, n);
}

/* ---- SwiGLU / GELU: theta = [gate n | up n] or x n ---- */
enum { EW_N = 40 };
static double R_ew[EW_N];
static double obj_swiglu(const double *th, void *ctx) {
    (void)ctx;
    double s = 0;
    for (int i = 0; i < EW_N; i++) s += th[i] / (1 + exp(-th[i])) * th[EW_N + i] * R_ew[i];
    return s;
}
static double obj_gelu(const double *th, void *ctx) {
    (void)ctx;
    double s = 0;
    for (int i = 0; i < EW_N; i++) s += 0.5 * th[i] * (1 + erf(th[i] / sqrt(2.0))) * R_ew[i];
    return s;
}
static void test_elementwise(void) {
    double th[2 * EW_N];
    float f[2 * EW_N], an[2 * EW_N], R[EW_N];
    fill(th, 2 * EW_N, 3.0);
    fill(R_ew, EW_N, 1.0);
    to_f(f, th, 2 * EW_N);
    to_f(R, R_ew, EW_N);
    memset(an, 0, sizeof an);
    mp_swiglu_backward(an, an + EW_N, R, f, f + EW_N, EW_N);
    fd_check("swiglu (gate, up)", obj_swiglu, NULL, th, an, 2 * EW_N);
    memset(an, 0, sizeof an);
    mp_gelu_backward(an, R, f, EW_N);
    fd_check("gelu (exact erf)", obj_gelu, NULL, th, an, EW_N);
    /* forward agreement with the reference too */
    float out[EW_N];
    mp_gelu_forward(out, f, EW_N);
    double md = 0;
    for (int i = 0; i < EW_N; i++) {
        double r = 0.5 * f[i] * (1 + erf(f[i] / sqrt(2.0)));
        if (fabs(out[i] - r) > md) md = fabs(out[i] - r);
    }
    CHECK(md < 1e-6, "gelu forward differs by %g", md);
}

/* ---- attention: theta = [q B*T*H*Dh | k B*T*K*Dh | v B*T*K*Dh] ---- */
enum { AT_B = 2, AT_T = 6, AT_H = 4, AT_K = 2, AT_DH = 4 };
enum { AT_NQ = AT_B * AT_T * AT_H * AT_DH, AT_NK = AT_B * AT_T * AT_K * AT_DH };
static double R_at[AT_NQ];
/* reference: z[b,t,h,:] = sum_s P[b,h,t,s] v[b,s,h/g,:], causal; P also out */
static double attn_ref(const double *th, double *P) {
    const double *q = th, *k = th + AT_NQ, *v = k + AT_NK;
    const int g = AT_H / AT_K;
    double s = 0, sc = 1 / sqrt((double)AT_DH);
    for (int b = 0; b < AT_B; b++)
        for (int h = 0; h < AT_H; h++)
            for (int t = 0; t < AT_T; t++) {
                double w[AT_T], mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double d = 0;
                    for (int i = 0; i < AT_DH; i++)
                        d += q[((b * AT_T + t) * AT_H + h) * AT_DH + i] * k[((b * AT_T + u) * AT_K + h / g) * AT_DH + i];
                    w[u] = d * sc;
                    if (w[u] > mx) mx = w[u];
                }
                for (int u = 0; u <= t; u++) { w[u] = exp(w[u] - mx); sum += w[u]; }
                for (int u = 0; u < AT_T; u++) {
                    double pv = u <= t ? w[u] / sum : 0;
                    if (P) P[((b * AT_H + h) * AT_T + t) * AT_T + u] = pv;
                }
                for (int i = 0; i < AT_DH; i++) {
                    double z = 0;
                    for (int u = 0; u <= t; u++) z += w[u] / sum * v[((b * AT_T + u) * AT_K + h / g) * AT_DH + i];
                    s += z * R_at[((b * AT_T + t) * AT_H + h) * AT_DH + i];
                }
            }
    return s;
}
static double obj_attn(const double *th, void *ctx) { (void)ctx; return attn_ref(th, NULL); }
static void test_attention(void) {
    enum { n = AT_NQ + 2 * AT_NK };
    static double th[n], P[AT_B * AT_H * AT_T * AT_T];
    static float f[n], an[n], R[AT_NQ], Pf[AT_B * AT_H * AT_T * AT_T], scratch[AT_B * AT_H * AT_T * AT_T];
    fill(th, n, 1.5);
    fill(R_at, AT_NQ, 1.0);
    attn_ref(th, P);
    to_f(f, th, n);
    to_f(R, R_at, AT_NQ);
    to_f(Pf, P, sizeof P / sizeof *P);
    memset(an, 0, sizeof an);
    mp_attention_backward(an, an + AT_NQ, an + AT_NQ + AT_NK, scratch, R, f, f + AT_NQ, f + AT_NQ + AT_NK, Pf, AT_B,
                          AT_T, AT_H, AT_K, AT_DH);
    fd_check("attention (GQA 4/2, causal)", obj_attn, NULL, th, an, n);
}

/* ---- cross-entropy with ignored targets: theta = logits N*V ---- */
enum { CE_N = 6, CE_V = 7 };
static const int ce_t[CE_N] = {3, -1, 0, 6, -1, 2};
static double obj_ce(const double *l, void *ctx) {
    (void)ctx;
    double s = 0;
    int c = 0;
    for (int n = 0; n < CE_N; n++) {
        if (ce_t[n] < 0) continue;
        double mx = -1e300, z = 0;
        for (int i = 0; i < CE_V; i++) mx = l[n * CE_V + i] > mx ? l[n * CE_V + i] : mx;
        for (int i = 0; i < CE_V; i++) z += exp(l[n * CE_V + i] - mx);
        s += log(z) + mx - l[n * CE_V + ce_t[n]];
        c++;
    }
    return s / c;
}
static void test_ce(void) {
    double th[CE_N * CE_V];
    float f[CE_N * CE_V], losses[CE_N];
    fill(th, CE_N * CE_V, 3.0);
    to_f(f, th, CE_N * CE_V);
    int c = mp_crossentropy_forward(losses, f, f, ce_t, CE_N, CE_V);
    CHECK(c == 4, "counted %d targets, expected 4", c);
    double mean = 0;
    for (int n = 0; n < CE_N; n++) mean += losses[n];
    mean /= c;
    CHECK_NEAR(mean, obj_ce(th, NULL), 1e-5, "cross-entropy value");
    CHECK(losses[1] == 0 && losses[4] == 0, "ignored rows contribute 0");
    mp_crossentropy_backward(f, f, ce_t, CE_N, CE_V, 1.0f / c);
    fd_check("cross-entropy (2 of 6 ignored)", obj_ce, NULL, th, f, CE_N * CE_V);
}

/* ---- embedding (with a repeated token): theta = embed V*D ---- */
enum { EM_V = 5, EM_D = 3, EM_N = 4 };
static const int em_tok[EM_N] = {2, 0, 2, 4};
static double R_em[EM_N * EM_D];
static double obj_embed(const double *e, void *ctx) {
    (void)ctx;
    double s = 0;
    for (int n = 0; n < EM_N; n++)
        for (int i = 0; i < EM_D; i++) s += e[em_tok[n] * EM_D + i] * R_em[n * EM_D + i];
    return s;
}
static void test_embed(void) {
    double th[EM_V * EM_D];
    float an[EM_V * EM_D] = {0}, R[EM_N * EM_D];
    fill(th, EM_V * EM_D, 1.0);
    fill(R_em, EM_N * EM_D, 1.0);
    to_f(R, R_em, EM_N * EM_D);
    mp_embed_backward(an, R, em_tok, EM_N, EM_D);
    fd_check("embedding (repeated id)", obj_embed, NULL, th, an, EM_V * EM_D);
}

/* ---- whole model ---- */
static void test_model(const char *label, mp_config c, int T) {
    mp_model *m = NULL;
    mp_status st = mp_model_new_random(&m, &c, 5, 0.3f);
    CHECK(st == MP_OK, "%s: %s", label, mp_last_error());
    if (st) return;
    /* non-trivial norm weights and biases */
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(&c, &m->p, d);
    for (int k = 0; k < nd; k++)
        if (d[k].ndim == 1)
            for (size_t i = 0; i < d[k].n; i++) d[k].p[i] += (float)(0.3 * urand());
    enum { B = 2 };
    int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    CHECK(tok && tgt, "alloc");
    if (!tok || !tgt) return;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)((urand() + 1) / 2 * c.vocab) % c.vocab;
        tgt[i] = i % 5 == 2 ? -1 : (int)((urand() + 1) / 2 * c.vocab) % c.vocab;
    }
    tu_fd_result r = tu_fd_model(label, m, tok, tgt, B, T, 1e-2f, 6, 0, 12345);
    float l2;
    CHECK(mp_model_loss(m, tok, tgt, B, T, NULL, &l2) == MP_OK, "loss");
    CHECK_NEAR(r.loss, l2, 1e-6, "%s: training and inference forward give the same loss", label);
    printf("  model %-22s loss %.4f, %d tensors, worst error / tolerance %.3f\n", label, r.loss, nd, r.worst);
    mp_model_free(m);
    free(tok);
    free(tgt);
}

int main(void) {
    mp_init();
    printf("per-op backward vs double-precision finite differences:\n");
    test_linear();
    test_norm(0);
    test_norm(1);
    test_rope();
    test_elementwise();
    test_attention();
    test_ce();
    test_embed();
    printf("whole-model gradients vs finite differences of the loss:\n");
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_head = 4; c.d_mlp = 24; c.vocab = 11;
    c.ctx = 8; c.rope_theta = 100.0f;
    test_model("rms/swiglu/rope/gqa/tied", c, 7);
    mp_config c2 = c;
    c2.norm = MP_NORM_LAYER; c2.mlp = MP_MLP_GELU; c2.pos = MP_POS_NONE; c2.tied = 0; c2.d_head = 6;
    test_model("layer/gelu/nopos/untied", c2, 7);
    mp_config c3 = c;
    c3.mlp = MP_MLP_NONE; c3.d_mlp = 0; c3.tied = 0;
    test_model("attention-only", c3, 7);
    mp_config c4 = c2;
    c4.n_kv_head = 4; c4.pos = MP_POS_ROPE; c4.d_head = 4; c4.n_layer = 3;
    test_model("layer/gelu/rope/mha/3L", c4, 7);
    /* several 64-row query blocks of the blocked attention */
    mp_config c5 = c;
    c5.ctx = 160;
    test_model("rms/swiglu/rope/gqa T=150", c5, 150);
    return tu_finish("test_grad");
}
