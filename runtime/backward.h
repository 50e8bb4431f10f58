/* backward.h — internal to runtime/ and its backends: the one backward of the
 * model, a walk in reverse over the activations a training-mode forward
 * stored (mp_acts), from a gradient at the logits down to the embeddings,
 * over a table of operations (mp_bwd_ops) that a backend implements: the
 * walk owns the order of the steps and the hook points, the ops how each
 * step runs. The CPU's table is mp_bwd_ops_cpu (backward_cpu.c); the CUDA
 * backend's is in backends/cuda/cuda_model.c. Two switches: weight gradients
 * (accumulated into a gradient layout, as a training step needs) and backward
 * hooks (fired, and free to edit, at every hook point in reverse firing
 * order, as mp_model_backward_acts needs). train.c and grad.c call
 * mp_backward (the CPU's); the CUDA training step calls mp_backward_walk. */
#ifndef MP_BACKWARD_H
#define MP_BACKWARD_H

#include "attn_variants.h"
#include "train.h"

typedef struct {
    mp_grads *grads;            /* weight gradients accumulate here; NULL: input gradients only */
    const int *tokens;          /* [B*T] the forward's tokens (token embedding gradient; with grads) */
    const mp_grad_sync *sync;   /* with grads: each block's gradients handed to sync->ready once final */
    const mp_hooks *hooks;      /* backward hooks; NULL: none */
} mp_backward_params;

/* The operations of the walk. ctx is the backend's state, handed through
 * unchanged; every pointer is the backend's memory (the store A, the weights
 * p, the gradients g as the walk was given them). N = B*T rows, D = d_model.
 * "+=" accumulates; the walk zeroes what an op accumulates into. An op
 * returns MP_OK or the error (the backend's message set).
 *
 * Entries the walk needs only with backward hooks (fire, copy, add, the norm
 * split, the result pair) or without weight gradients (the attention stages;
 * alloc/release also with hooks) may be NULL in a table that serves neither:
 * the walk then refuses such a call with an error naming the table. A table
 * without attn_factor serves only configurations whose attention variant
 * has no row factor (mp_attn_has_factor). */
typedef struct mp_bwd_ops {
    const char *name;
    /* x [n] = 0 */
    mp_status (*zero)(void *ctx, float *x, size_t n);
    /* dst [n] = src (hooks) */
    mp_status (*copy)(void *ctx, float *dst, const float *src, size_t n);
    /* dst [n] += src (hooks) */
    mp_status (*add)(void *ctx, float *dst, const float *src, size_t n);
    /* A linear layer out [N,OUT] = in [N,IN] @ w^T + b, backward: din [N,IN]
     * = beta din + dout @ w (beta 0 or 1); with dw: dw += dout^T in and, with
     * db, db += dout's column sums. */
    mp_status (*linear)(void *ctx, float *din, float beta, float *dw, float *db, const float *dout, const float *in,
                        const float *w, int N, int IN, int OUT);
    /* The norm (c->norm) y = norm(x) * w (+ b): dx += its input gradient, dw
     * (and db, LayerNorm) += the weights' (never NULL: without weight
     * gradients the walk hands a discarded [2 D]). mean, rstd: the forward's. */
    mp_status (*norm)(void *ctx, const mp_config *c, float *dx, float *dw, float *db, const float *dout, const float *x,
                      const float *w, const float *mean, const float *rstd, int N);
    /* Its hook_scale point split in two (hooks): dsc [N] = d scale of each
     * row (= -rstd * sum_d dout_d w_d xhat_d); then dx += the input gradient
     * with the scale held fixed plus dsc * d scale/dx (= xhat / D). */
    mp_status (*norm_dscale)(void *ctx, const mp_config *c, float *dsc, const float *dout, const float *x,
                             const float *w, const float *mean, const float *rstd, int N);
    mp_status (*norm_dx_scaled)(void *ctx, const mp_config *c, float *dx, const float *dsc, const float *dout,
                                const float *x, const float *w, const float *mean, const float *rstd, int N);
    /* The q/k norm (RMSNorm of rows rows of width floats, one weight w
     * [width] shared by the rows; x, rstd: the forward's input and
     * statistics in the store): d [rows, width], the gradient at its output,
     * becomes the gradient at its input; tmp: scratch of as many floats; dw
     * += the weight's gradient (NULL: none). */
    mp_status (*qk_norm)(void *ctx, const mp_config *c, float *d, float *tmp, float *dw, const float *x,
                         const float *w, const float *rstd, int rows, int width);
    /* The MLP's activation (c->mlp, c->gelu_tanh) over n values: dpre +=
     * from dpost and the stored pre (and up: SwiGLU, whose dup += too). */
    mp_status (*act)(void *ctx, const mp_config *c, float *dpre, float *dup, const float *dpost, const float *pre,
                     const float *up, size_t n);
    /* The attention of layer l (its stored a, the variant av) in one step,
     * with weight gradients and neither attention map hooked: dq, dk, dv +=
     * from dz; datt: scratch (NULL where the store has no pattern); dfac [B,
     * H, T]: each query row's factor gradient (written; variants with one). */
    mp_status (*attn)(void *ctx, const mp_config *c, const mp_acts *A, int l, const mp_layer_acts *a,
                      const mp_attn_layer *av, const float *dz, float *dq, float *dk, float *dv, float *datt,
                      float *dfac);
    /* The same in the three stages whose results are hook points: datt = d
     * pattern (0 above the diagonal and, with av's sliding window, before
     * it) and dv = sum over the group of P^T dz (both written); datt in place through the normalizer and the row factor
     * to d scores (dfac written when non-NULL); dq = scale dS k, dk = scale
     * sum over the group of dS^T q (both written). */
    mp_status (*attn_dpattern)(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av, int B,
                               int T, const float *dz, float *datt, float *dv);
    mp_status (*attn_dscores)(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av, int B,
                              int T, float *datt, float *dfac);
    mp_status (*attn_dqk)(void *ctx, const mp_config *c, const mp_layer_acts *a, int B, int T, const float *datt,
                          float *dq, float *dk);
    /* Shaw's relative values (rel_values > 0; runtime/relv.h), between attn_dpattern and the pattern's
     * hook: datt += dz_i,h . rel_v[class(i, j)] at the keys a query sees (av's window); with drel_v,
     * drel_v [R+1, Dh] += the pattern's mass of each class times dz. mask: a padded batch's [B, T] (host
     * memory) or NULL. Optional: NULL in a table whose backend does not train such models (the walk
     * refuses them). */
    mp_status (*attn_relv)(void *ctx, const mp_config *c, const mp_layer_acts *a, const mp_attn_layer *av,
                           const float *rel_v, float *drel_v, int B, int T, const float *dz, float *datt,
                           const int *mask);
    /* The variant's per-head parameters += from dfac [B, H, T]. */
    mp_status (*attn_factor)(void *ctx, const mp_attn_layer *av, float *ds, float *ddelta, float *dbeta, float *dgamma,
                             const float *dfac, int B, int H, int T);
    /* The positional scheme's rotation undone in place on x [B, T, nh, Dh]
     * by the forward's tables (q_scale: queries' per-position factor or NULL). */
    mp_status (*pos)(void *ctx, const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale,
                     float *x, int B, int T, int nh);
    /* hook_result (hooks): dres_h [N, H, D] = dout for every head; then dz
     * [N, H*Dh] = each head's d result @ its slice of wo, with dwo: dwo's
     * slices += d result_h^T z_h and, with dbo, dbo += dout's column sums. */
    mp_status (*result_spread)(void *ctx, const mp_config *c, float *dres_h, const float *dout, int N);
    mp_status (*result_back)(void *ctx, const mp_config *c, float *dz, float *dwo, float *dbo, const float *dres_h,
                             const float *dout, const float *z, const float *wo, int N);
    /* The embeddings (weight gradients): dembed [tokens[n]] += dres [n];
     * with dpos_embed (learned positions) dpos_embed [t] += dpos rows at t. */
    mp_status (*embed)(void *ctx, const mp_config *c, float *dembed, float *dpos_embed, const float *dres,
                       const float *dpos, const int *tokens, int B, int T);
    /* dst [n] = a * b elementwise (Gemma 2's final soft cap: its gradient; optional, NULL: such a model
     * does not train on the backend). */
    mp_status (*mul)(void *ctx, float *dst, const float *a, const float *b, size_t n);
    /* The backward callbacks of hs at info on grad (the whole tensor), which
     * they may edit (hooks). */
    mp_status (*fire)(void *ctx, const mp_hooks *hs, mp_hook_info *info, float *grad);
    /* n zeroed floats of scratch (what is named by `what` in an error), and
     * their release (hooks, or no weight gradients). */
    float *(*alloc)(void *ctx, size_t n, const char *what);
    void (*release)(void *ctx, float *p);
} mp_bwd_ops;

/* The CPU's operations (ctx unused: NULL): ops_backward.c's kernels,
 * OpenBLAS, and the hooks fired on host memory. */
extern const mp_bwd_ops mp_bwd_ops_cpu;

/* The walk: backward from dlogits [B,T,V] (read only; may be A->logits)
 * through the store A of a training-mode forward with weights p (its scratch
 * buffers are overwritten), by ops (with ctx). dlogits NULL: the caller ran
 * the classifier's backward itself (a backend's chunked loss head): A->dxn
 * holds the final norm output's gradient and g->unembed has its share. g:
 * the gradients accumulated (+=, the layout of p), NULL: input gradients
 * only. bp: tokens (with g), sync (with g; bp->grads is what sync->ready is
 * handed) and hooks; bp->grads is not otherwise read. MP_ERR_HOOK when a
 * callback aborts, MP_ERR_NOMEM, what sync->ready or an op returns, or
 * MP_ERR_ARG when the table lacks an entry this call needs. */
mp_status mp_backward_walk(const mp_bwd_ops *ops, void *ctx, const mp_config *c, const mp_params *p,
                           const mp_params *g, mp_acts *A, const float *dlogits, const mp_backward_params *bp);

/* The CPU's backward on model m: mp_backward_walk with mp_bwd_ops_cpu, the
 * model's weights and bp->grads (NULL: input gradients only). */
mp_status mp_backward(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp);
/* The same for a padded batch: mask [B, T] is the attention mask its
 * training-mode forward ran with (ragged.c); input gradients only (bp->grads
 * NULL: MP_ERR_ARG otherwise). The rotation's transpose takes each token's
 * positional tables from the mask, and the gradient at hook_pattern is 0 at
 * the keys a query does not see (mp_mask_grad_pattern). */
mp_status mp_backward_masked(const mp_model *m, mp_acts *A, const float *dlogits, const mp_backward_params *bp,
                             const int *mask);

#endif
