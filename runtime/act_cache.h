/* act_cache.h — the arithmetic behind an activation cache's helpers
 * (TransformerLens's ActivationCache: apply_ln_to_stack, stack_head_results,
 * logit_attrs) on plain float arrays and a model's weights; lua/lcache.c
 * gathers the cached tensors and calls these. */
#ifndef MP_ACT_CACHE_H
#define MP_ACT_CACHE_H

#include "model.h"

/* A residual stack x [C, R, D] (C components, R rows) normalized as a norm
 * does with a cached scale [R] (its hook_scale): each component is divided by
 * the scale of its row, after subtracting its own mean over D for LayerNorm
 * (center != 0), so that the components sum to (x - mean) / scale. The
 * norm's weight and bias are not applied. In place. */
void mp_cache_apply_ln(float *x, int C, size_t R, int D, const float *scale, int center);

/* Per-head outputs of block l: out [H, N, D] (head-major, as a stack) =
 * z[:, h, :] @ W_O[:, h*Dh..(h+1)*Dh)^T for z [N, H, Dh] (hook_z), without
 * the bias b_O. MP_ERR_ARG for a model whose W_O is kept quantized. */
mp_status mp_cache_head_results(const mp_model *m, int l, const float *z, int N, float *out);

/* Direct logit attribution: out [C, B, T] = stack [C, B, T, D] . dir_b with
 * dir_b = w_lnf * (W_U[tok[b]] - W_U[inc[b]]) (inc NULL: no subtraction), the
 * final norm's weight applied here (apply_ln_to_stack leaves it out); bias
 * [B] (may be NULL) = b_lnf . (W_U[tok[b]] - W_U[inc[b]]), the constant the
 * final LayerNorm's bias adds to every position's logit difference (0 for
 * RMSNorm). With the stack a decomposition of the final residual normalized
 * by the cached ln_final scale, sum_c out[c,b,t] + bias[b] is the model's
 * logit (difference). MP_ERR_ARG for a token out of range or a quantized
 * unembedding. */
mp_status mp_cache_logit_attrs(const mp_model *m, const float *stack, int C, int B, int T, const int *tok,
                               const int *inc, float *out, float *bias);

#endif
