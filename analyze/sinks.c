/* sinks.c — attention-sink statistics over causal attention patterns (alpha_k,
 * sink rate, first-token attention by query position, row entropy), key-norm
 * outliers, the largest q.k per query, and massive-activation detection. */
#include "sinks.h"

#include <gsl/gsl_cblas.h> /* CBLAS prototypes; the symbols come from OpenBLAS (not gslcblas) */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_statistics_float.h>

mp_sink_params mp_analyze_sink_params_default(void) {
    mp_sink_params p = {.eps = 0.3, .bins = 0};
    return p;
}

mp_massive_params mp_analyze_massive_params_default(void) {
    mp_massive_params p = {.abs_min = 100.0, .rel_min = 1000.0, .max_hits = 100000};
    return p;
}

static mp_status check_pattern(const char *what, const float *A, size_t P, size_t T) {
    size_t n;
    if (P < 1 || T < 1) return mp_error(MP_ERR_ARG, "%s: empty pattern (%zu pairs x %zu positions)", what, P, T);
    if (!A) return mp_error(MP_ERR_ARG, "%s: NULL pattern", what);
    if (mp_mul_size(T, T, &n) || mp_mul_size(n, P, &n))
        return mp_error(MP_ERR_ARG, "%s: pattern size %zu x %zu x %zu overflows", what, P, T, T);
    return MP_OK;
}

static mp_status bad_entry(const char *what, const float *A, size_t T, size_t idx) {
    size_t p = idx / (T * T), q = idx / T % T, k = idx % T;
    return mp_error(MP_ERR_ARG, "%s: pattern[%zu, %zu, %zu] = %g is not a probability "
                    "(entries must be finite and >= 0)", what, p, q, k, (double)A[idx]);
}

/* Per pair p: alpha over keys, entropy of each row, and the column-0 sum by query.
 * Returns the flat index of the first invalid entry of the pair, or SIZE_MAX. */
static size_t pair_stats(const float *A, size_t T, double *alpha, double *ent) {
    for (size_t k = 0; k < T; k++) alpha[k] = 0;
    for (size_t q = 0; q < T; q++) {
        const float *row = A + q * T;
        double h = 0;
        for (size_t k = 0; k <= q; k++) {
            double a = row[k];
            if (!(a >= 0) || !isfinite(a)) return q * T + k;
            alpha[k] += a;
            if (a > 0) h -= a * log(a);
        }
        if (ent) ent[q] = h;
    }
    for (size_t k = 0; k < T; k++) alpha[k] /= (double)(T - k);
    return SIZE_MAX;
}

void mp_analyze_sinks_free(mp_sinks *s) {
    if (!s) return;
    free(s->alpha);
    free(s->first_by_pos);
    free(s->bin_lo);
    free(s->entropy);
    memset(s, 0, sizeof *s);
}

mp_status mp_analyze_sinks(const float *A, size_t P, size_t T, const mp_sink_params *prm, mp_sinks *out) {
    mp_status st;
    mp_sink_params def = mp_analyze_sink_params_default();
    double *col0 = NULL;
    if (!prm) prm = &def;
    memset(out, 0, sizeof *out);
    if ((st = check_pattern("sinks", A, P, T)) != MP_OK) return st;
    if (!isfinite(prm->eps)) return mp_error(MP_ERR_ARG, "sinks: eps = %g must be finite", prm->eps);
    size_t bins = prm->bins ? prm->bins : (T < 32 ? T : 32);
    if (bins > T) bins = T;
    out->P = P; out->T = T; out->bins = bins;
    out->alpha = mp_malloc(P * T * sizeof *out->alpha, "sink alpha");
    out->entropy = mp_malloc(P * T * sizeof *out->entropy, "attention entropy");
    out->first_by_pos = mp_calloc(bins, sizeof *out->first_by_pos, "first-token curve");
    out->bin_lo = mp_malloc((bins + 1) * sizeof *out->bin_lo, "first-token bins");
    col0 = mp_calloc(T, sizeof *col0, "first-token column");
    if (!out->alpha || !out->entropy || !out->first_by_pos || !out->bin_lo || !col0) { st = MP_ERR_NOMEM; goto cleanup; }
    size_t bad = SIZE_MAX;
    #pragma omp parallel for schedule(dynamic) if (P > 1 && T > 64)
    for (size_t p = 0; p < P; p++) {
        const float *Ap = A + p * T * T;
        size_t b = pair_stats(Ap, T, out->alpha + p * T, out->entropy + p * T);
        if (b != SIZE_MAX) {
            #pragma omp critical(mp_sinks_bad)
            if (p * T * T + b < bad) bad = p * T * T + b;
        }
    }
    if (bad != SIZE_MAX) { st = bad_entry("sinks", A, T, bad); goto cleanup; }
    for (size_t p = 0; p < P; p++) {
        if (out->alpha[p * T] > prm->eps) out->sink_heads++;
        for (size_t q = 0; q < T; q++) col0[q] += A[p * T * T + q * T];
    }
    out->sink_rate = (double)out->sink_heads / (double)P;
    for (size_t b = 0; b <= bins; b++) out->bin_lo[b] = b * T / bins;
    for (size_t b = 0; b < bins; b++) {
        double s = 0;
        for (size_t q = out->bin_lo[b]; q < out->bin_lo[b + 1]; q++) s += col0[q];
        out->first_by_pos[b] = s / ((double)P * (double)(out->bin_lo[b + 1] - out->bin_lo[b]));
    }
cleanup:
    free(col0);
    if (st != MP_OK) mp_analyze_sinks_free(out);
    return st;
}

mp_status mp_analyze_attn_entropy(const float *A, size_t P, size_t T, double *H) {
    mp_status st;
    if ((st = check_pattern("attention entropy", A, P, T)) != MP_OK) return st;
    double *alpha = mp_malloc(T * sizeof *alpha, "entropy scratch");
    if (!alpha) return MP_ERR_NOMEM;
    for (size_t p = 0; p < P; p++) {
        size_t b = pair_stats(A + p * T * T, T, alpha, H + p * T);
        if (b != SIZE_MAX) { st = bad_entry("attention entropy", A, T, p * T * T + b); break; }
    }
    free(alpha);
    return st;
}

mp_status mp_analyze_key_norm_ratio(const float *k, size_t T, size_t d, double *ratio) {
    size_t n;
    if (!k || T < 1 || d < 1 || mp_mul_size(T, d, &n))
        return mp_error(MP_ERR_ARG, "key norm ratio: keys must be a non-empty [T, d] array (T = %zu, d = %zu)", T, d);
    double sum = 0, k0 = 0;
    for (size_t t = 0; t < T; t++) {
        double s = 0;
        for (size_t j = 0; j < d; j++) s += (double)k[t * d + j] * k[t * d + j];
        if (!isfinite(s)) return mp_error(MP_ERR_ARG, "key norm ratio: key %zu is not finite", t);
        s = sqrt(s);
        if (t == 0) k0 = s;
        sum += s;
    }
    *ratio = sum > 0 ? k0 / (sum / (double)T) : 0;
    return MP_OK;
}

#define QK_BLOCK 256

mp_status mp_analyze_max_qk(const float *q, const float *k, size_t T, size_t d, int causal,
                            float *max_out, int64_t *argmax) {
    size_t n;
    if (!q || !k || !max_out || T < 1 || d < 1 || mp_mul_size(T, d, &n) || mp_mul_size(T, QK_BLOCK, &n))
        return mp_error(MP_ERR_ARG, "max q.k: q and k must be non-empty [T, d] arrays (T = %zu, d = %zu)", T, d);
    if (T > INT_MAX || d > INT_MAX) return mp_error(MP_ERR_ARG, "max q.k: T = %zu or d = %zu too large", T, d);
    float *S = mp_malloc(QK_BLOCK * T * sizeof *S, "q.k scores");
    if (!S) return MP_ERR_NOMEM;
    for (size_t q0 = 0; q0 < T; q0 += QK_BLOCK) {
        size_t qb = T - q0 < QK_BLOCK ? T - q0 : QK_BLOCK;
        size_t nk = causal ? q0 + qb : T;  /* keys any query of the block can see */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)qb, (int)nk, (int)d, 1.0f, q + q0 * d, (int)d,
                    k, (int)d, 0.0f, S, (int)nk);
        for (size_t i = 0; i < qb; i++) {
            size_t last = causal ? q0 + i + 1 : nk;
            const float *row = S + i * nk;
            size_t best = 0;
            for (size_t s = 1; s < last; s++)
                if (row[s] > row[best] || isnan(row[best])) best = s;
            max_out[q0 + i] = row[best];
            if (argmax) argmax[q0 + i] = (int64_t)best;
        }
    }
    free(S);
    return MP_OK;
}

void mp_analyze_massive_free(mp_massive *m) {
    if (!m) return;
    free(m->ratio);
    free(m->layer_median);
    free(m->hits);
    memset(m, 0, sizeof *m);
}

mp_status mp_analyze_massive(const float *h, size_t L, size_t T, size_t D, const mp_massive_params *prm,
                             mp_massive *out) {
    mp_status st = MP_OK;
    mp_massive_params def = mp_analyze_massive_params_default();
    size_t TD, n;
    float *buf = NULL;
    if (!prm) prm = &def;
    memset(out, 0, sizeof *out);
    if (!h || L < 1 || T < 1 || D < 1 || mp_mul_size(T, D, &TD) || mp_mul_size(TD, L, &n) || mp_mul_size(L, T, &n))
        return mp_error(MP_ERR_ARG, "massive activations: hidden states must be a non-empty [L, T, D] array "
                        "(L = %zu, T = %zu, D = %zu)", L, T, D);
    out->L = L; out->T = T;
    out->ratio = mp_malloc(L * T * sizeof *out->ratio, "massive-activation ratios");
    out->layer_median = mp_malloc(L * sizeof *out->layer_median, "layer medians");
    size_t cap = prm->max_hits < 1024 ? prm->max_hits : 1024;
    if (cap) out->hits = mp_malloc(cap * sizeof *out->hits, "massive-activation hits");
    buf = mp_malloc(TD * sizeof *buf, "massive-activation scratch");
    if (!out->ratio || !out->layer_median || (cap && !out->hits) || !buf) { st = MP_ERR_NOMEM; goto cleanup; }
    for (size_t l = 0; l < L; l++) {
        const float *hl = h + l * TD;
        for (size_t i = 0; i < TD; i++) {
            if (!isfinite(hl[i])) {
                st = mp_error(MP_ERR_ARG, "massive activations: h[%zu, %zu, %zu] = %g is not finite",
                              l, i / D, i % D, (double)hl[i]);
                goto cleanup;
            }
            buf[i] = fabsf(hl[i]);
        }
        for (size_t t = 0; t < T; t++) {   /* per-token ratio; buf rows are reordered by select */
            float *row = buf + t * D, mx = 0;
            for (size_t c = 0; c < D; c++) if (row[c] > mx) mx = row[c];
            double med = gsl_stats_float_median(row, 1, D);
            out->ratio[l * T + t] = med > 0 ? mx / med : (mx > 0 ? INFINITY : 0);
        }
        double lmed = gsl_stats_float_median(buf, 1, TD);
        out->layer_median[l] = lmed;
        double thr = prm->rel_min * lmed;
        for (size_t i = 0; i < TD; i++) {
            double a = fabs((double)hl[i]);
            if (!(a > prm->abs_min && a >= thr)) continue;
            out->n_hits_total++;
            if (out->n_hits >= prm->max_hits) continue;
            if (out->n_hits == cap) {
                size_t nc = cap * 2 < prm->max_hits ? cap * 2 : prm->max_hits;
                mp_massive_hit *nh = realloc(out->hits, nc * sizeof *nh);
                if (!nh) { st = mp_error(MP_ERR_NOMEM, "massive activations: out of memory for %zu hits", nc); goto cleanup; }
                out->hits = nh;
                cap = nc;
            }
            mp_massive_hit *x = &out->hits[out->n_hits++];
            x->layer = l; x->pos = i / D; x->channel = i % D; x->value = hl[i];
        }
    }
cleanup:
    free(buf);
    if (st != MP_OK) mp_analyze_massive_free(out);
    return st;
}
