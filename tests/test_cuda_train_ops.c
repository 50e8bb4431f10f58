/* test_cuda_train_ops.c — the CUDA backend's training kernels (cuda_kernels.h,
 * backends/cuda/cuda_train_kernels.cu) against the CPU's ops_backward.c and
 * optim.c on random inputs: embedding, RMSNorm and LayerNorm (dx, dw, db;
 * dw and db over several chunks of rows and tiles of columns, the same bits
 * on a second run),
 * linear bias, RoPE with a logit factor, SwiGLU, GELU (erf, tanh), causal
 * attention's row kernels (the softmax of a block of rows with their
 * log-sum-exp, the pattern recomputed from it, the softmax backward on a
 * block and on rows of a stored pattern; the products are cuBLAS's, checked
 * by test_gpu_train), cross-entropy (loss and
 * dlogits, ignored rows, in place), the squared-norm partial sums and
 * clipping, and three AdamW steps on every parameter tensor of a model (decay
 * where the CPU decays). Every gradient output starts non-zero, so
 * accumulation (+=) is checked too. Tolerance: max |device - cpu| <= 1e-5 of
 * the tensor's largest |value| (float32 sums in another order); the norm
 * exactly to 1e-12 relative (double sums).
 *
 * Built twice: test_cuda_train_ops on the device (label gpu; SKIP, exit 77,
 * without one) and test_cuda_train_ops_emu on the tests' CPU emulation
 * (tests/cuda_emu, label unit). */
#include "cuda_kernels.h"
#include "mp_cuda.h"
#include "ops.h"
#include "optim.h"
#include "testutil.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

static unsigned long long rng = 0x9E3779B97F4A7C15ull;
static float urand(void) { /* xorshift64*: uniform in [-1, 1) */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *rnd(size_t n, float a) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = a * urand();
    return x;
}
/* a device copy of n floats (or ints) */
static void *dev(const void *x, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    if (x && cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
    return d;
}
static void back(void *h, const void *d, size_t bytes) {
    CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
}

static void near(const char *what, const float *ref, const float *d_got, size_t n) {
    float *got = malloc(n * sizeof(float));
    back(got, d_got, n * sizeof(float));
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
        const double e = fabs((double)ref[i] - got[i]);
        if (!(e <= err)) err = e; /* NaN counts */
    }
    CHECK(err <= TOL * (scale > 0 ? scale : 1), "%s: max error %.3g, scale %.3g", what, err, scale);
    free(got);
}

#define OK(call) CHECK((call) == cudaSuccess, "%s", #call)

static void test_embed(void) {
    const int N = 40, D = 24, V = 7;
    int tok[40];
    for (int n = 0; n < N; n++) tok[n] = (n * 5 + n / 3) % V; /* repeated ids: colliding rows */
    float *dout = rnd((size_t)N * D, 1), *de = rnd((size_t)V * D, 1);
    float *d_dout = dev(dout, (size_t)N * D * 4), *d_de = dev(de, (size_t)V * D * 4);
    int groups[3 * 40 + 1];
    const int ng = mp_cuk_embed_groups(tok, N, groups);
    CHECK(ng == V, "embed groups: %d distinct ids, %d expected", ng, V);
    int *d_groups = dev(groups, sizeof groups);
    float *de0 = malloc((size_t)V * D * 4);
    memcpy(de0, de, (size_t)V * D * 4);
    mp_embed_backward(de, dout, tok, N, D);
    OK(mp_cuk_embed_backward(d_de, d_dout, d_groups, N, ng, D, NULL));
    near("embed backward", de, d_de, (size_t)V * D);
    /* deterministic: the same sum, bit for bit, from a second launch (the emulator permutes the blocks anew) */
    float *first = malloc((size_t)V * D * 4), *second = malloc((size_t)V * D * 4);
    CHECK(cudaMemcpy(first, d_de, (size_t)V * D * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    CHECK(cudaMemcpy(d_de, de0, (size_t)V * D * 4, cudaMemcpyHostToDevice) == cudaSuccess, "reset");
    OK(mp_cuk_embed_backward(d_de, d_dout, d_groups, N, ng, D, NULL));
    CHECK(cudaMemcpy(second, d_de, (size_t)V * D * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "copy back");
    CHECK(memcmp(first, second, (size_t)V * D * 4) == 0, "embed backward: two launches differ");
    cudaFree(d_dout), cudaFree(d_de), cudaFree(d_groups);
    free(dout), free(de), free(de0), free(first), free(second);
}

/* N rows of D: with N over 64 the weight gradient's rows span several chunks
 * of partial sums, with D over 32 its columns several tiles (a D not a
 * multiple of 32: a tile's last lanes idle); the gradients are also run a
 * second time from the same start and must equal the first bit for bit (the
 * partials are added in a fixed order). */
static void test_norm(int layer, int N, int D) {
    const size_t nx = (size_t)N * D;
    float *x = rnd(nx, 2), *w = rnd((size_t)D, 1), *b = rnd((size_t)D, 1), *dout = rnd(nx, 1);
    float *out = malloc(nx * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    if (layer) mp_layernorm_forward(out, mean, rstd, x, w, b, N, D, 1e-5f);
    else mp_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f);
    float *dx = rnd(nx, 1), *dw = rnd((size_t)D, 1), *db = rnd((size_t)D, 1);
    float *d_x = dev(x, nx * 4), *d_w = dev(w, (size_t)D * 4), *d_dout = dev(dout, nx * 4);
    float *scale = malloc((size_t)N * 4); /* the device kernels take the forward's scale, 1 / rstd */
    for (int n = 0; n < N; n++) scale[n] = 1.0f / rstd[n];
    float *d_mean = dev(layer ? mean : rstd, (size_t)N * 4), *d_rstd = dev(scale, (size_t)N * 4);
    float *d_dx = dev(dx, nx * 4), *d_dw = dev(dw, (size_t)D * 4), *d_db = dev(db, (size_t)D * 4);
    float *d_dw2 = dev(dw, (size_t)D * 4), *d_db2 = dev(db, (size_t)D * 4), *d_dx2 = dev(dx, nx * 4);
    float *d_work = dev(NULL, mp_cuk_norm_dw_floats(N, D) * 4);
    if (layer) mp_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, D);
    else mp_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, D);
    OK(mp_cuk_norm_backward(d_dx, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N, D, layer, d_work, NULL));
    OK(mp_cuk_norm_backward(d_dx2, d_dw2, d_db2, d_dout, d_x, d_w, d_mean, d_rstd, N, D, layer, d_work, NULL));
    char lab[64];
    snprintf(lab, sizeof lab, "%s N=%d D=%d dx", layer ? "LayerNorm" : "RMSNorm", N, D);
    near(lab, dx, d_dx, nx);
    snprintf(lab, sizeof lab, "%s N=%d D=%d dw", layer ? "LayerNorm" : "RMSNorm", N, D);
    near(lab, dw, d_dw, (size_t)D);
    snprintf(lab, sizeof lab, "LayerNorm N=%d D=%d db", N, D);
    if (layer) near(lab, db, d_db, (size_t)D);
    float *g1 = malloc((size_t)D * 4), *g2 = malloc((size_t)D * 4);
    for (int k = 0; k < 1 + layer; k++) { /* dw, then db: the second run's bits are the first's */
        back(g1, k ? d_db : d_dw, (size_t)D * 4);
        back(g2, k ? d_db2 : d_dw2, (size_t)D * 4);
        CHECK(memcmp(g1, g2, (size_t)D * 4) == 0, "%s N=%d D=%d %s: two runs differ", layer ? "LayerNorm" : "RMSNorm",
              N, D, k ? "db" : "dw");
    }
    free(g1), free(g2);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_mean), cudaFree(d_rstd), cudaFree(d_dx),
        cudaFree(d_dw), cudaFree(d_db), cudaFree(d_dw2), cudaFree(d_db2), cudaFree(d_dx2), cudaFree(d_work);
    free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(scale), free(dx), free(dw), free(db);
}

/* N rows of OUT columns: one chunk (13 rows), and 333 rows (6 chunks, the last 53) by 77 columns (the last tile
 * 13 wide); a second launch gives the same bits */
static void test_bias(int N, int OUT) {
    float *dout = rnd((size_t)N * OUT, 1), *db = rnd(OUT, 1);
    float *d_dout = dev(dout, (size_t)N * OUT * 4), *d_db = dev(db, OUT * 4), *d_db2 = dev(db, OUT * 4);
    float *d_work = dev(NULL, mp_cuk_bias_bwd_floats(N, OUT) * 4);
    for (int o = 0; o < OUT; o++)
        for (int n = 0; n < N; n++) db[o] += dout[(size_t)n * OUT + o];
    OK(mp_cuk_bias_backward(d_db, d_dout, N, OUT, d_work, NULL));
    OK(mp_cuk_bias_backward(d_db2, d_dout, N, OUT, d_work, NULL));
    char lab[64];
    snprintf(lab, sizeof lab, "bias backward N=%d OUT=%d", N, OUT);
    near(lab, db, d_db, OUT);
    float *g1 = malloc((size_t)OUT * 4), *g2 = malloc((size_t)OUT * 4);
    back(g1, d_db, (size_t)OUT * 4);
    back(g2, d_db2, (size_t)OUT * 4);
    CHECK(memcmp(g1, g2, (size_t)OUT * 4) == 0, "%s: two runs differ", lab);
    CHECK(mp_cuk_bias_backward(d_db, d_dout, N, OUT, NULL, NULL) == cudaErrorInvalidValue, "%s: no workspace", lab);
    cudaFree(d_dout), cudaFree(d_db), cudaFree(d_db2), cudaFree(d_work);
    free(dout), free(db), free(g1), free(g2);
}

static void test_rope(void) {
    const int B = 2, T = 11, nh = 3, Dh = 10, half = Dh / 2;
    const size_t n = (size_t)B * T * nh * Dh;
    float *x = rnd(n, 1), *cs = malloc((size_t)T * half * 4), *sn = malloc((size_t)T * half * 4), *qs = rnd(T, 1);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double a = t * pow(100.0, -2.0 * i / Dh);
            cs[t * half + i] = (float)cos(a);
            sn[t * half + i] = (float)sin(a);
        }
    float *d_x = dev(x, n * 4), *d_c = dev(cs, (size_t)T * half * 4), *d_s = dev(sn, (size_t)T * half * 4);
    float *d_q = dev(qs, (size_t)T * 4);
    mp_rope_backward(x, cs, sn, B, T, nh, Dh);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < nh * Dh; i++) x[((size_t)b * T + t) * nh * Dh + i] *= qs[t];
    OK(mp_cuk_rope_backward(d_x, d_c, d_s, d_q, B, T, nh, Dh, NULL));
    near("rope backward with logit factor", x, d_x, n);
    cudaFree(d_x), cudaFree(d_c), cudaFree(d_s), cudaFree(d_q);
    free(x), free(cs), free(sn), free(qs);
}

static void test_mlp(void) {
    const size_t n = 777;
    float *g = rnd(n, 3), *u = rnd(n, 2), *dout = rnd(n, 1), *dg = rnd(n, 1), *du = rnd(n, 1);
    float *d_g = dev(g, n * 4), *d_u = dev(u, n * 4), *d_o = dev(dout, n * 4), *d_dg = dev(dg, n * 4),
          *d_du = dev(du, n * 4);
    mp_swiglu_backward(dg, du, dout, g, u, n);
    OK(mp_cuk_swiglu_backward(d_dg, d_du, d_o, d_g, d_u, n, NULL));
    near("swiglu dgate", dg, d_dg, n);
    near("swiglu dup", du, d_du, n);
    for (int th = 0; th < 2; th++) {
        float *dx = rnd(n, 1), *d_dx = dev(dx, n * 4);
        if (th) mp_gelu_tanh_backward(dx, dout, g, n);
        else mp_gelu_backward(dx, dout, g, n);
        OK(mp_cuk_gelu_backward(d_dx, d_o, d_g, n, th, NULL));
        near(th ? "gelu_tanh backward" : "gelu backward", dx, d_dx, n);
        cudaFree(d_dx);
        free(dx);
    }
    cudaFree(d_g), cudaFree(d_u), cudaFree(d_o), cudaFree(d_dg), cudaFree(d_du);
    free(g), free(u), free(dout), free(dg), free(du);
}

static void test_attention(int B, int T, int H, int K, int Dh) {
    const int HD = H * Dh, KD = K * Dh;
    const size_t nq = (size_t)B * T * HD, nk = (size_t)B * T * KD, na = (size_t)B * H * T * T;
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *dz = rnd(nq, 1), *att = calloc(na, 4);
    const float scale = 1.0f / sqrtf((float)Dh);
    for (int b = 0; b < B; b++) /* the causal softmax pattern of q k^T scale */
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                float *row = att + (((size_t)b * H + h) * T + i) * T;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < Dh; d++)
                        s += (double)q[((size_t)b * T + i) * HD + h * Dh + d] *
                             k[((size_t)b * T + j) * KD + (h / (H / K)) * Dh + d];
                    row[j] = (float)(s * scale);
                }
                mp_softmax_rows(row, 1, i + 1, T);
            }
    float *d_q = dev(q, nq * 4), *d_k = dev(k, nk * 4), *d_att = dev(att, na * 4);
    /* the softmax backward over the stored pattern [B,H,T,T]: rows r0.. (the CPU's 64-row sub-blocks
     * start there), keys up to the end, 0 past each row's own key */
    char lab[96];
    const int r0 = T / 2, rr = T - r0;
    float *gS = rnd(na, 1), *refS = malloc(na * 4), *d_gS = dev(gS, na * 4);
    memcpy(refS, gS, na * 4);
    for (size_t bh = 0; bh < (size_t)B * H; bh++)
        for (int i = r0; i < T; i++) {
            const float *pr = att + (bh * T + i) * T;
            float *dr = refS + (bh * T + i) * T;
            double dot = 0;
            for (int j = 0; j <= i; j++) dot += (double)pr[j] * dr[j];
            for (int j = 0; j < T; j++) dr[j] = j <= i ? (float)(scale * pr[j] * (dr[j] - dot)) : 0.0f;
        }
    OK(mp_cuk_attn_softmax_bwd(d_gS + (size_t)r0 * T, d_att + (size_t)r0 * T, B, H, (size_t)T * T, T, T, r0, rr,
                               scale, NULL));
    snprintf(lab, sizeof lab, "softmax backward over the stored pattern B%d T%d H%d, rows %d..", B, T, H, r0);
    near(lab, refS, d_gS, na);
    cudaFree(d_gS);
    free(gS), free(refS);
    /* the blocked attention's kernels on query rows q0.. (keys 0..T-1): the softmax with each row's
     * log-sum-exp, the pattern recomputed from it, and the softmax backward with the scale */
    const int q0 = T / 3, rows = T - q0, Tk = T;
    const size_t nb = (size_t)B * H * rows * Tk, nl = (size_t)B * H * T;
    float *S = malloc(nb * 4), *Pref = malloc(nb * 4), *lref = calloc(nl, 4), *gP = rnd(nb, 1), *dS = malloc(nb * 4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < rows; i++) {
                const int t = q0 + i;
                const size_t o = (((size_t)b * H + h) * rows + i) * Tk;
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int j = 0; j < Tk; j++) {
                    double sc = 0;
                    for (int d = 0; d < Dh; d++)
                        sc += (double)q[((size_t)b * T + t) * HD + h * Dh + d] *
                              k[((size_t)b * T + j) * KD + (h / (H / K)) * Dh + d];
                    S[o + j] = (float)(sc * scale);
                    if (j <= t) mx = fmax(mx, S[o + j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(S[o + j] - mx);
                lref[((size_t)b * H + h) * T + t] = (float)(mx + log(sum));
                for (int j = 0; j < Tk; j++) Pref[o + j] = att[(((size_t)b * H + h) * T + t) * T + j];
                for (int j = 0; j < Tk; j++) dot += (double)Pref[o + j] * gP[o + j];
                for (int j = 0; j < Tk; j++) dS[o + j] = (float)(scale * Pref[o + j] * (gP[o + j] - dot));
            }
    float *d_P = dev(S, nb * 4), *d_P2 = dev(S, nb * 4), *d_lse = dev(NULL, nl * 4), *d_gP = dev(gP, nb * 4);
    float *lrows = malloc(nl * 4);
    CHECK(cudaMemset(d_lse, 0, nl * 4) == cudaSuccess, "memset");
    OK(mp_cuk_attn_softmax(d_P, d_lse, B, H, Tk, T, 0, q0, rows, 0, NULL));
    snprintf(lab, sizeof lab, "blocked softmax B%d T%d H%d K%d Dh%d rows %d..: pattern", B, T, H, K, Dh, q0);
    near(lab, Pref, d_P, nb);
    back(lrows, d_lse, nl * 4);
    double lerr = 0;
    for (size_t i = 0; i < nl; i++) lerr = fmax(lerr, fabs((double)lrows[i] - lref[i]));
    CHECK(lerr <= 1e-5 * (1 + log((double)T)), "blocked softmax: log-sum-exp max error %.3g", lerr);
    OK(mp_cuk_attn_recompute(d_P2, d_lse, B, H, T, Tk, q0, rows, 0, NULL));
    snprintf(lab, sizeof lab, "pattern recomputed from the log-sum-exp B%d T%d H%d", B, T, H);
    near(lab, Pref, d_P2, nb);
    OK(mp_cuk_attn_softmax_bwd(d_gP, d_P2, B, H, (size_t)rows * Tk, Tk, Tk, q0, rows, scale, NULL));
    snprintf(lab, sizeof lab, "softmax backward B%d T%d H%d", B, T, H);
    near(lab, dS, d_gP, nb);
    cudaFree(d_P), cudaFree(d_P2), cudaFree(d_lse), cudaFree(d_gP);
    free(S), free(Pref), free(lref), free(gP), free(dS), free(lrows);
    cudaFree(d_q), cudaFree(d_k), cudaFree(d_att);
    free(q), free(k), free(v), free(dz), free(att);
}

static void test_xent(void) {
    const int N = 12, V = 301;
    const float sc = 1.0f / 9.0f;
    int tg[12];
    for (int n = 0; n < N; n++) tg[n] = n % 4 == 3 ? -1 : (n * 37) % V;
    float *lg = rnd((size_t)N * V, 6), *ref = malloc((size_t)N * V * 4), lref[12];
    for (int n = 0; n < N; n++) { /* loss in double, then the CPU's dlogits from its softmax */
        const float *l = lg + (size_t)n * V;
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, l[i]);
        for (int i = 0; i < V; i++) s += exp(l[i] - mx);
        lref[n] = tg[n] < 0 ? 0.0f : (float)(log(s) + mx - l[tg[n]]);
    }
    memcpy(ref, lg, (size_t)N * V * 4);
    mp_softmax_rows(ref, N, V, V);
    mp_crossentropy_backward(ref, ref, tg, N, V, sc);
    float *d_lg = dev(lg, (size_t)N * V * 4), *d_loss = dev(NULL, N * 4);
    int *d_tg = dev(tg, sizeof tg);
    OK(mp_cuk_xent(d_lg, d_loss, d_lg, d_tg, N, V, sc, NULL)); /* in place */
    near("cross-entropy dlogits (in place)", ref, d_lg, (size_t)N * V);
    near("cross-entropy loss per row", lref, d_loss, N);
    cudaFree(d_lg), cudaFree(d_loss), cudaFree(d_tg);
    free(lg), free(ref);
}

static void test_norm_clip(void) {
    const size_t n = 300001;
    float *g = rnd(n, 1);
    float *d_g = dev(g, n * 4);
    const unsigned nb = mp_cuk_sumsq_blocks(n);
    double *d_part = dev(NULL, nb * sizeof(double)), *part = malloc(nb * sizeof(double));
    OK(mp_cuk_sumsq(d_part, d_g, n, NULL));
    back(part, d_part, nb * sizeof(double));
    double ss = 0;
    for (unsigned i = 0; i < nb; i++) ss += part[i];
    const double norm_dev = sqrt(ss), norm_cpu = mp_grad_clip(g, n, 10.0f); /* clips g on the CPU */
    CHECK(fabs(norm_dev - norm_cpu) <= 1e-12 * norm_cpu, "gradient norm: device %.17g, cpu %.17g", norm_dev, norm_cpu);
    OK(mp_cuk_scale(d_g, n, (float)(10.0 / (norm_dev + 1e-6)), NULL));
    near("clipped gradient", g, d_g, n);
    cudaFree(d_g), cudaFree(d_part);
    free(g), free(part);
}

static void test_adamw(void) {
    mp_config c = mp_config_default();
    c.d_model = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_head = 8, c.d_mlp = 48, c.vocab = 40, c.ctx = 16;
    c.norm = MP_NORM_LAYER, c.linear_bias = 1, c.tied = 0;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 5, 0.2f) == MP_OK, "%s", mp_last_error());
    if (!m) return;
    const size_t n = mp_config_n_params(&c);
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 3e-3f, hp.weight_decay = 0.1f, hp.eps = 1e-2f; /* a large eps: its place in the formula shows */
    mp_adamw o;
    memset(&o, 0, sizeof o);
    CHECK(mp_adamw_init(&o, &hp, n) == MP_OK, "adamw init");
    float *d_p = dev(m->owned, n * 4), *d_m = dev(NULL, n * 4), *d_v = dev(NULL, n * 4), *g = malloc(n * 4);
    CHECK(cudaMemset(d_m, 0, n * 4) == cudaSuccess && cudaMemset(d_v, 0, n * 4) == cudaSuccess, "zero moments");
    float *d_g = dev(NULL, n * 4);
    mp_param_desc d[MP_PARAM_MAX];
    const int nd = mp_params_describe(&m->cfg, &m->p, d);
    int decayed = 0;
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = urand() * 0.5f;
        OK(cudaMemcpy(d_g, g, n * 4, cudaMemcpyHostToDevice));
        const double lr = mp_lr_at(&hp, step);
        mp_adamw_update(&o, m, g, lr); /* the CPU: o.step is now step + 1 */
        const double bc1 = 1.0 - pow(hp.beta1, (double)o.step), bc2 = 1.0 - pow(hp.beta2, (double)o.step);
        for (int t = 0; t < nd; t++) {
            const size_t off = (size_t)(d[t].p - m->owned);
            const int dec = d[t].decay && hp.weight_decay != 0.0f;
            decayed += dec;
            OK(mp_cuk_adamw(d_p + off, d_m + off, d_v + off, d_g + off, d[t].n, hp.beta1, hp.beta2, hp.eps,
                            (float)(lr / bc1), (float)sqrt(bc2), (float)(1.0 - lr * hp.weight_decay), dec, NULL));
        }
    }
    CHECK(decayed > 0 && decayed < 3 * nd, "some tensors decayed, some not (%d of %d)", decayed, 3 * nd);
    near("AdamW: parameters after 3 steps", m->owned, d_p, n);
    near("AdamW: first moments", o.m, d_m, n);
    near("AdamW: second moments", o.v, d_v, n);
    cudaFree(d_p), cudaFree(d_m), cudaFree(d_v), cudaFree(d_g);
    free(g);
    mp_adamw_free(&o);
    mp_model_free(m);
}

int main(void) {
    if (mp_cuda_available() != MP_OK) {
        printf("SKIP: %s\n", mp_last_error());
        return 77;
    }
    test_embed();
    test_norm(0, 9, 64);
    test_norm(0, 9, 300);
    test_norm(1, 9, 64);
    test_norm(1, 9, 300);
    test_norm(0, 333, 77);   /* 6 chunks of 56 rows (the last 53), 3 column tiles (the last 13 wide) */
    test_norm(1, 333, 77);
    test_norm(1, 9000, 40);  /* at most 128 chunks: 127 of 71 rows (the last 54) */
    test_bias(13, 300);
    test_bias(333, 77);
    test_rope();
    test_mlp();
    test_attention(1, 5, 2, 2, 4);
    test_attention(2, 37, 4, 2, 16);
    test_attention(1, 70, 2, 1, 40);
    test_xent();
    test_norm_clip();
    test_adamw();
    return tu_finish("test_cuda_train_ops");
}
