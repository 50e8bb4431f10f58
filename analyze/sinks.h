/* sinks.h — attention-sink and massive-activation statistics.
 *
 * Attention patterns are row-major float [P, T, T] where P counts (layer, head)
 * pairs (any leading dims flattened: [H,T,T] for one layer, [L*H,T,T] for a model),
 * rows are queries, columns keys, and the pattern is causal (key k <= query q).
 * Keys/queries are [T, d]; hidden states [L, T, D]. Indices are 0-based. */
#ifndef MP_ANALYZE_SINKS_H
#define MP_ANALYZE_SINKS_H

#include <stddef.h>
#include <stdint.h>
#include "mp_common.h"

typedef struct {
    double eps;   /* a head is a sink head when alpha_0 > eps (Gu et al. use 0.3) */
    size_t bins;  /* query-position bins for the first-token curve (0: min(T, 32)) */
} mp_sink_params;
mp_sink_params mp_analyze_sink_params_default(void);

typedef struct {
    size_t P, T, bins;
    /* alpha[p*T + k] = mean attention key k receives from the queries that can see it
     * (q >= k): alpha_k = sum_{q>=k} A[p,q,k] / (T - k)  (Gu et al., "When attention sink emerges") */
    double *alpha;
    size_t sink_heads;    /* pairs with alpha_0 > eps */
    double sink_rate;     /* sink_heads / P */
    /* first_by_pos[b] = mean of A[p,q,0] over all pairs p and the queries q of bin b;
     * bin b holds queries [bin_lo[b], bin_lo[b+1]) with bin_lo[bins] = T (bins of equal size
     * up to rounding). */
    double *first_by_pos;
    size_t *bin_lo;       /* [bins + 1] */
    double *entropy;      /* [P, T] attention entropy of each query row, in nats */
} mp_sinks;

/* All the pattern statistics above in one pass. Entries must be finite and >= 0
 * (MP_ERR_ARG naming the first bad one); entries above the diagonal are ignored. */
mp_status mp_analyze_sinks(const float *pattern, size_t P, size_t T, const mp_sink_params *p, mp_sinks *out);
void mp_analyze_sinks_free(mp_sinks *s);

/* H[p*T + q] = -sum_{k<=q} A log A (0 log 0 = 0); a uniform row gives log(q + 1). */
mp_status mp_analyze_attn_entropy(const float *pattern, size_t P, size_t T, double *H);

/* ||k_0|| / mean_t ||k_t|| over all T keys of k [T, d] (sink keys are often outliers). */
mp_status mp_analyze_key_norm_ratio(const float *k, size_t T, size_t d, double *ratio);

/* For each query t of q [T, d]: the largest q_t . k_s over keys s of k [T, d]
 * (s <= t when causal), and its index s (argmax may be NULL). Raw dot products, no
 * 1/sqrt(d). Blocked sgemm: O(T^2 d) flops, O(T) extra memory per block of queries. */
mp_status mp_analyze_max_qk(const float *q, const float *k, size_t T, size_t d, int causal,
                            float *max_out, int64_t *argmax);

typedef struct {
    double abs_min;   /* |h| must exceed this (Sun et al. use 100) */
    double rel_min;   /* ... and be >= rel_min x the layer's median |h| (1000) */
    size_t max_hits;  /* at most this many hits are listed (n_hits_total counts all) */
} mp_massive_params;
mp_massive_params mp_analyze_massive_params_default(void);

typedef struct {
    size_t layer, pos, channel;
    float value;      /* signed activation */
} mp_massive_hit;

typedef struct {
    size_t L, T;
    double *ratio;         /* [L, T] max_c |h[l,t,c]| / median_c |h[l,t,c]| (inf if the median is 0) */
    double *layer_median;  /* [L] median of |h| over the layer's T x D entries */
    mp_massive_hit *hits;  /* |h| > abs_min and |h| >= rel_min * layer_median, by (layer, pos, channel) */
    size_t n_hits, n_hits_total;
} mp_massive;

/* Massive activations (Sun et al., "Massive activations in LLMs") of h [L, T, D]. */
mp_status mp_analyze_massive(const float *h, size_t L, size_t T, size_t D, const mp_massive_params *p,
                             mp_massive *out);
void mp_analyze_massive_free(mp_massive *m);

#endif
