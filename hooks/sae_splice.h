/* sae_splice.h — sparse autoencoders attached to a model (SAELens's
 * HookedSAETransformer: add_sae / reset_saes / run_with_saes): while an SAE
 * is attached, every forward whose hook registry was made by
 * mp_hooks_new_model runs it at its hook point (sae->hook_name), replacing
 * the activation by the SAE's output, and its backward (a registry made by
 * mp_hooks_new_bwd) turns the gradient at that point into the gradient at the
 * SAE's input (J^T g through norm_out, decode, the activation's mask,
 * hidden_pre and norm_in).
 *
 * The attached list is the model's (mp_model.splice), so every run path of
 * every binding sees it. The splice is a pair of hook callbacks per SAE over
 * runtime/sae.h's stages, in the C core; its sub-points are points of the
 * registry's own (mp_hooks_declare), so fwd/bwd hooks, caches, interventions
 * and incl_bwd accept their names as any hook name:
 *   <hook>.hook_sae_input      [B, T, d_in]   the SAE's input x
 *   <hook>.hook_sae_acts_pre   [B, T, d_sae]  hidden_pre
 *   <hook>.hook_sae_acts_post  [B, T, d_sae]  the feature activations
 *   <hook>.hook_sae_recons     [B, T, d_in]   acts @ W_dec + b_dec
 *   <hook>.hook_sae_error      [B, T, d_in]   x - recons_clean (use_error_term only)
 *   <hook>.hook_sae_output     [B, T, d_in]   what the model continues from
 * each fired in that order (SAELens's), editable; callbacks at <hook> itself
 * fire after the SAE (they see the output), and backward callbacks at <hook>
 * before its backward (they see d metric / d output).
 *
 * use_error_term: the output is x + (out - out_clean) + (err' - err), where
 * out_clean is the SAE's output on x with no sub-point hooks and err = x -
 * out_clean its error (err' the error after its hooks): with no edit the
 * activation is exactly x (the run is the clean run, bitwise), and an edit of
 * the features moves it by the change of the reconstruction. As in SAELens
 * the error is detached: the gradient upstream is J^T g, the error node's g.
 *
 * Shapes: rows are B*T; d_in must be the point's size per position (D for
 * [B,T,D] points, H*Dh for attn.hook_z etc.). Attention scores and patterns
 * are refused. On a CUDA model the SAE runs on the CPU, inside its hook
 * callback: the device forward stops at the point as for any writing hook. */
#ifndef MP_SAE_SPLICE_H
#define MP_SAE_SPLICE_H

#include "model.h"
#include "mp_hooks.h"
#include "sae.h"

/* Attaches sae at sae->hook_name (the caller keeps sae alive while attached).
 * MP_ERR_ARG naming the problem: an unknown hook name, a scores/pattern point,
 * d_in not the point's per-position size (both numbers), a point that has an
 * SAE already; MP_ERR_NOMEM. */
mp_status mp_model_add_sae(mp_model *m, mp_sae *sae, int use_error_term);
/* Detaches every SAE. */
void mp_model_reset_saes(mp_model *m);
/* Detaches the SAE at index i (attachment order). */
void mp_model_remove_sae(mp_model *m, int i);
/* How many are attached; the i-th (use_error_term into *use_err, may be NULL). */
int mp_model_n_saes(const mp_model *m);
mp_sae *mp_model_sae(const mp_model *m, int i, int *use_err);
/* Frees the list (mp_model_free calls it). */
void mp_splice_free(struct mp_splice *sp);

/* A forward registry with the model's attached SAEs spliced in (their
 * sub-points declared, their callbacks registered first at their points):
 * what the bindings create for forward, run_with_cache / hooks, loss,
 * generate. NULL when out of memory (mp_error set). */
mp_hooks *mp_hooks_new_model(const mp_model *m);
/* The backward registry for a forward registry fwd of mp_hooks_new_model: the
 * same sub-points declared, and each splice's backward registered late at its
 * point, reading the state fwd's last forward left. NULL when out of memory. */
mp_hooks *mp_hooks_new_bwd(const mp_model *m, const mp_hooks *fwd);

/* The SAE's backward for N rows given the forward's state: from g (d metric /
 * d output, [N, d_in]) to gx (d metric / d x, [N, d_in]); x the input,
 * rec the raw reconstruction, rn the rows' norm, mask [N, d_sae] 1 where the
 * activation passed its input. Intermediate gradients go to g_rec [N, d_in],
 * g_acts, g_pre [N, d_sae] and g_xn [N, d_in] (callers may fire hooks between
 * the steps through mp_sae_bwd_step). */
typedef enum { MP_SAE_BWD_RECONS, MP_SAE_BWD_ACTS_POST, MP_SAE_BWD_ACTS_PRE, MP_SAE_BWD_INPUT } mp_sae_bwd_stage;
/* One step: RECONS g_rec = g * a; ACTS_POST g_acts = g_rec W_dec^T; ACTS_PRE
 * g_pre = g_acts * mask; INPUT gx = norm_in's and norm_out's transpose from
 * g_pre W_enc^T (g, x, rec, rn as above; g_xn scratch [N, d_in]). */
void mp_sae_bwd_step(const mp_sae *s, mp_sae_bwd_stage stage, int N, const float *g, const float *x,
                     const float *rec, const mp_sae_rownorm *rn, const unsigned char *mask, float *g_rec,
                     float *g_acts, float *g_pre, float *g_xn, float *gx);

#endif
