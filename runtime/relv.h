/* relv.h — Shaw et al. 2018 ("Self-attention with relative position
 * representations") on the values: the config field rel_values R > 0 gives
 * every layer a parameter rel_v [R+1, Dh] shared by its heads, row k < R for
 * the relative distance i - j = k and row R for every distance >= R (Shaw's
 * clipping), and each head's output at query i becomes
 *     z_i = sum_j a_ij v_j + sum_j a_ij rel_v[min(i - j, R)]
 * (i, j positions: absolute, pos0 + row with a KV cache; a padded batch's
 * per-token positions, mp_mask_positions). The scores and the pattern are the
 * model's own (RoPE etc.); the second sum is linear in the pattern, so
 * z_i - sum_j a_ij v_j = sum_k (the pattern's mass at distance class k) rel_v[k].
 * hook_z includes the term. CPU only: the forward's attention (model.c) and
 * the backward's op attn_relv (backward_cpu.c) call these. */
#ifndef MP_RELV_H
#define MP_RELV_H

#include "model.h"

/* The forward's term for one query row: z [Dh] += sum over keys j in lo..qi
 * of a[j] rel_v[class(j)], the class min(max(d, 0), R) of the distance d =
 * qi - j, or with kpos (the row's positions per key column, a padded batch)
 * kpos[qi] - kpos[j]. Keys with a[j] == 0 cost one comparison. */
void mp_relv_row(const float *rel_v, int R, int Dh, const float *a, int lo, int qi, const int *kpos, float *z);

/* The backward over a training store's layer (B sequences of T positions):
 * datt [B, H, T, T] += dz_i,h . rel_v[class(i, j)] at the keys j a query i
 * sees (j <= i, and with a sliding window W > 0, j > i - W), before the
 * normalizer's backward; with drel_v non-NULL, drel_v [R+1, Dh] += sum over
 * sequences, heads and queries of (the pattern's mass of class k) dz_i,h.
 * att: the stored pattern; mask [B, T] (a padded batch's, NULL: none) gives
 * the positions. Deterministic for a given thread count. MP_ERR_NOMEM. */
mp_status mp_relv_backward(const mp_config *c, const float *rel_v, float *drel_v, const float *att, const float *dz,
                           float *datt, int B, int T, int window, const int *mask);

#endif
