/* attn_variants.h — the attention variants (model option `attn`, mp_attn_kind
 * in model.h): the one place that turns a query row's scores into its
 * attention pattern, forward and backward, for both the inference forward
 * (model.c, blocked over query rows) and the training backward (ops_backward.c
 * mp_attention_backward_variant, train.c).
 *
 * For the query that sees n keys (n = its 0-based position + 1) with scores
 * u_j = q.k_j / sqrt(Dh) (what hook_attn_scores shows, after any positional
 * logit factor), the pattern (hook_pattern) is
 *   softmax   softmax(u)
 *   ssmax     softmax(f u),  f = s_h log n                  (s_h learnable)
 *   entmax15  1.5-entmax(u)  (exact, sort-based)
 *   entmax    alpha-entmax(u) (bisection on the threshold)
 *   asentmax  alpha-entmax(f u), f = delta_h + beta_h (log n)^gamma_h
 * where alpha-entmax(z)_j = [(alpha-1) z_j - tau]_+^(1/(alpha-1)), tau such
 * that the row sums to 1 (Peters, Niculae, Martins 2019); alpha = 2 is
 * sparsemax, alpha -> 1 tends to softmax. Keys with p = 0 get exact zeros.
 * (log n)^gamma is taken as 0 for n = 1 (one key: the pattern is 1 anyway.)
 * Scores of -inf (the causal mask, or a hook's edit) are keys the query does
 * not see.
 *
 * Initial values (mp_model_new, so every new model starts there; loaders
 * overwrite them): s = 1 / log(ctx) (ctx >= 2; else 1), so that ssmax equals
 * softmax for a query seeing exactly ctx keys; delta = 1, beta = 0,
 * gamma = 1, so that asentmax starts as plain alpha-entmax at every length.
 *
 * Backward: d u_j = s_j (d p_j - sum_i s_i d p_i / sum_i s_i) with
 * s_j = p_j^(2 - alpha) where p_j > 0, else 0 (the entmax Jacobian; alpha = 1:
 * the softmax one). With a row factor f: d scores = f d u, and
 * d f = sum_j d u_j * scores_j feeds the per-head parameters. */
#ifndef MP_ATTN_VARIANTS_H
#define MP_ATTN_VARIANTS_H

#include "model.h"

/* One layer's variant: its kind, alpha and per-head parameters [H] (NULL when
 * the kind has none). */
typedef struct mp_attn_layer {
    mp_attn_kind kind;
    double alpha;
    const float *s;                    /* ssmax */
    const float *delta, *beta, *gamma; /* asentmax */
    int window;                        /* sliding window W (mp_config_window), 0: none */
} mp_attn_layer;

/* The variant of layer l of a model with parameters p. */
mp_attn_layer mp_attn_layer_of(const mp_config *c, const mp_params *p, int l);
/* 1 when the kind multiplies each row by a learnable factor (ssmax, asentmax). */
int mp_attn_has_factor(mp_attn_kind k);
/* The factor on the scores of a query seeing n keys, head h (1 without one). */
double mp_attn_row_factor(const mp_attn_layer *a, int h, int n);
/* Floats of scratch mp_attn_normalize_rows needs for rows of up to ncols keys
 * (the sort of entmax15; 0 for the others). */
size_t mp_attn_work_floats(const mp_attn_layer *a, int ncols);

/* Sets the variant parameters of a freshly allocated model (p from
 * mp_params_layout) to their initial values (above); no-op for softmax. */
void mp_attn_params_init(const mp_config *c, mp_params *p);

/* In place on rows x [rows, ld] of head h: row i sees the keys
 * 0 .. n0 + i - 1 (clamped to ncols), with a window W only the last W of them
 * (n0 + i - W .. n0 + i - 1); it becomes the pattern over them, and the other
 * entries up to ncols - 1 become 0 whatever they held (neither the causal
 * mask nor the window depends on -inf being there; without a window,
 * softmax rows are bit-identical to mp_softmax_rows over -inf-masked rows). work: mp_attn_work_floats(a, ncols)
 * floats (may be NULL when that is 0). */
void mp_attn_normalize_rows(const mp_attn_layer *a, int h, float *x, int rows, int ncols, int ld, int n0,
                            float *work);
/* Backward of the normalizer on one row of n keys: d holds dL/dpattern on
 * entry and dL/d(normalizer input) on return (the row factor not applied);
 * p is the forward's pattern. */
void mp_attn_normalize_backward(const mp_attn_layer *a, float *d, const float *p, int n);
/* Accumulates the per-head parameter gradients (ds for ssmax; ddelta, dbeta,
 * dgamma for asentmax; [H] each, of this layer) from dfac [B, H, T], the
 * gradient of each query row's factor, for rows that see t + n0 keys
 * (n0 = 1 in training). Serial (deterministic). */
void mp_attn_factor_backward(const mp_attn_layer *a, float *ds, float *ddelta, float *dbeta, float *dgamma,
                             const float *dfac, int B, int H, int T, int n0);

/* ---- the maps themselves on one vector (tests use them directly) ---- */
/* p = 1.5-entmax(z) over n entries (z may hold -inf: p = 0 there); work: n floats. */
void mp_entmax15(float *p, const float *z, int n, float *work);
/* p = alpha-entmax(z) by bisection (double precision, then renormalised). */
void mp_entmax_bisect(float *p, const float *z, int n, double alpha);

#endif
