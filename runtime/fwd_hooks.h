/* fwd_hooks.h — internal to runtime/ (and its backends): what the forward
 * knows when it fires a hook point (mp_fwd_ctx) and the views it hands, and
 * the CPU's optional hook-point paths that cost something only when a hook is
 * registered there (the norms' hook_scale, the per-head q/k/v inputs and
 * attn.hook_result), which the CPU's ops (model.c, exec.h) call; each one is
 * the fast path unchanged when its points are inactive. */
#ifndef MP_FWD_HOOKS_H
#define MP_FWD_HOOKS_H

#include "model.h"

/* What the forward knows when it fires a hook. */
typedef struct {
    const mp_config *c;
    const mp_hooks *hs;
    int B, T, pos0;
    const int *mask;    /* [B, pos0 + T] attention mask (the cached keys' columns first), or NULL (ragged.c) */
    const int *pos_ids; /* [B*T] per-token positions of a padded batch, or NULL (pos0 + t) */
} mp_fwd_ctx;

/* The view of the whole [B,T,...] point (id, l), as mp_fwd_fire hands it. */
void mp_fwd_whole_info(const mp_fwd_ctx *f, mp_hook_id id, int l, mp_hook_info *info);
/* Fires hook (id, l) on a whole [B,T,...] view (no-op when inactive). */
mp_status mp_fwd_fire(const mp_fwd_ctx *f, mp_hook_id id, int l, float *data);
/* The view of a scores/pattern block [B,H,rows,S] of query rows q0.. (axis 2,
 * offset q0), and firing hook (id, l) on it (no-op when inactive). */
void mp_fwd_block_info(const mp_fwd_ctx *f, mp_hook_id id, int l, int q0, int rows, mp_hook_info *info);
mp_status mp_fwd_fire_block(const mp_fwd_ctx *f, mp_hook_id id, int l, int q0, int rows, float *data);

/* Scratch memory of one forward call for these paths, grown on demand. */
typedef struct {
    float *mem;
    size_t n;
} mp_fwd_ws;
void mp_fwd_ws_free(mp_fwd_ws *ws);

/* A linear layer through model.c's float32 / quantized dispatch. */
mp_status mp_fwd_linear(float *out, const float *in, const float *w, const mp_qmat *qm, const float *bias, int N,
                        int IN, int OUT);

/* The configured norm of N = B*T rows; with its scale point (sid, l) active,
 * in two steps around it (mp_norm_scale, fire, mp_norm_apply: the edited
 * scale is what normalizes). mean/rstd (may be NULL) receive the statistics
 * actually used (training mode keeps them). */
mp_status mp_fwd_norm(const mp_fwd_ctx *f, mp_hook_id sid, int l, float *out, float *mean, float *rstd,
                      const float *x, const float *w, const float *b, mp_fwd_ws *ws);

/* 1 when one of hook_attn_in / hook_q_input / hook_k_input / hook_v_input of
 * layer l is active (the per-head projection path is needed). */
int mp_fwd_split_active(const mp_fwd_ctx *f, int l);

/* The per-head projection path: hook_attn_in [B,T,H,D] = a copy of ln1 for
 * every query head; hook_q_input = hook_attn_in; hook_k_input / hook_v_input
 * [B,T,K,D] start from hook_attn_in of the first query head of each kv
 * group (with K = H, the same head); then q/k/v of each head from its own
 * input row. q [N,H*Dh], k, v [N,K*Dh] as the fused projections write them. */
mp_status mp_fwd_split_qkv(const mp_fwd_ctx *f, int l, const mp_model *m, const float *ln1, float *q, float *k,
                           float *v, mp_fwd_ws *ws);

/* attn.hook_result: with it active, each head's output through its slice of
 * W_O (no bias) is fired as [B,T,H,D]; out [N,D] (the fused W_O product plus
 * bias) then gets the edits' difference, so that it is the sum of the
 * written results plus the bias (bit-identical when nothing was written). */
mp_status mp_fwd_result(const mp_fwd_ctx *f, int l, const mp_model *m, const float *z, float *out, mp_fwd_ws *ws);

#endif
