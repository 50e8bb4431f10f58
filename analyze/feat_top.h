/* feat_top.h — the top-activating contexts of chosen features (of an SAE, or
 * any [tokens, features] activations), in one streaming pass: for each
 * requested feature a bounded min-heap of its n largest activations with where
 * they are (sequence, position) and the feature's activations in a window of
 * tokens around them, plus the feature's density (fraction of tokens where it
 * is > 0, SAELens's "feature density") and max. Memory is O(features x n x
 * window), whatever the number of tokens and batches. The figure of the result
 * is plots/feature_view.h; lua/lsae_view.c runs a model and an SAE into it.
 *
 * Order (and ties): a context ranks above another when its value is larger;
 * equal values rank by (sequence, position), the earlier first. NaN values
 * count as tokens but are never active and never a context. Only values >
 * `floor` become contexts (0 for "the contexts where the feature fires";
 * -INFINITY for every finite value). */
#ifndef MP_ANALYZE_FEAT_TOP_H
#define MP_ANALYZE_FEAT_TOP_H

#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

typedef struct {
    float value;          /* the feature's activation there */
    int64_t seq;          /* sequence index (0-based, over every batch added) */
    int pos;              /* position in the sequence (0-based) */
    const float *window;  /* [before + 1 + after]: the feature's activations at
                           * pos - before .. pos + after; NaN past either end of
                           * the sequence or at a token marked invalid (padding) */
} mp_feat_ctx;

typedef struct {
    int64_t n_tokens;     /* valid tokens seen */
    int64_t n_active;     /* of which the feature was > 0 */
    double max;           /* largest value (NaN before any finite one) */
    double sum;           /* sum of the finite values */
} mp_feat_stats;

typedef struct mp_feat_top mp_feat_top;

/* A tracker of n_features features (indices into 0..d_sae-1, each at most
 * once), top_n >= 1 contexts each, windows of before / after tokens (>= 0).
 * MP_ERR_ARG naming the argument; MP_ERR_NOMEM. */
mp_status mp_feat_top_new(mp_feat_top **out, const int *features, int n_features, int d_sae, int top_n, int before,
                          int after, float floor);
void mp_feat_top_free(mp_feat_top *t);

/* Adds n_seq whole sequences of T tokens: acts [n_seq * T, ld] row-major
 * (row s * T + p is sequence seq0 + s, position p; feature f in column f,
 * ld >= d_sae). valid [n_seq * T] (NULL: every token) marks the real tokens
 * (0: padding, skipped). Sequences must be added whole (a window never spans
 * two calls); seq0 is the caller's numbering (usually the running count). */
mp_status mp_feat_top_add(mp_feat_top *t, const float *acts, int64_t ld, int n_seq, int T, int64_t seq0,
                          const unsigned char *valid);
/* The same for one tracked feature (slot j in 0..n_features-1) from its
 * column alone: its value at row r is col[r * stride]. */
mp_status mp_feat_top_add_column(mp_feat_top *t, int j, const float *col, int64_t stride, int n_seq, int T,
                                 int64_t seq0, const unsigned char *valid);

int mp_feat_top_n_features(const mp_feat_top *t);
int mp_feat_top_feature(const mp_feat_top *t, int j);   /* the feature index of slot j */
int mp_feat_top_window(const mp_feat_top *t, int *before, int *after); /* returns before + 1 + after */
mp_feat_stats mp_feat_top_stats(const mp_feat_top *t, int j);
/* The contexts of slot j, best first, into out (top_n entries room); returns
 * how many (< top_n when fewer values passed the floor). The windows point
 * into the tracker: valid until the next add or free. */
int mp_feat_top_sorted(const mp_feat_top *t, int j, mp_feat_ctx *out);

#endif
