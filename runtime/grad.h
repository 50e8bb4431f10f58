/* grad.h — gradients of a scalar metric with respect to the hook points'
 * activations (TransformerLens's backward hooks and `incl_bwd` caches), and the
 * arithmetic of attribution patching.
 *
 * Flow: a training-mode forward (mp_forward_params.acts) keeps every
 * activation; the caller computes its metric from acts->logits and its
 * gradient dlogits [B,T,V] (C knows no metric); mp_model_backward_acts then
 * runs the backward from dlogits, firing the callbacks of a backward registry
 * (an mp_hooks of its own) with d metric / d activation at each hook point, in
 * reverse firing order. A callback may edit the gradient in place and the edit
 * propagates upstream, as TL's backward hooks can. Parameter gradients are
 * not computed; the walk is the training step's (runtime/backward.c), each
 * keeping the bytes it has always had.
 *
 * Conventions: the gradient at a hook has the hook's shape. A forward hook's
 * edit is treated as part of the input (the backward runs through the edited
 * values, the hook itself as the identity). At attn.hook_attn_scores and
 * attn.hook_pattern the entries above the diagonal (keys a query does not see)
 * get gradient 0. */
#ifndef MP_GRAD_H
#define MP_GRAD_H

#include "model.h"
#include "mp_hooks.h"

/* 1 when the backward computes a gradient at hook point id: the grad column of
 * MP_HOOK_TABLE (mp_hook_has_grad); 0 for the per-head input copies. */
int mp_grad_has_hook(mp_hook_id id);

/* Backward from dlogits [B,T,V] (read only) through the activations in A (the
 * store of a forward with fp.acts = A on the same model; its scratch buffers
 * are overwritten). bwd may be NULL (then nothing is observable: callers pass
 * one). MP_ERR_HOOK when a callback aborts; MP_ERR_NOMEM. */
mp_status mp_model_backward_acts(const mp_model *m, mp_acts *A, const float *dlogits, const mp_hooks *bwd);
/* The same for a padded batch: mask [B, T] is the attention mask its forward
 * ran with (fp.attn_mask with fp.acts; ragged.c). Each row's real positions
 * get the gradients of that row run alone (what flows into a pad's
 * activations from dlogits 0 at the pads is 0), the entries of
 * attn.hook_pattern / hook_attn_scores at keys a query does not see 0. Give
 * dlogits 0 at pad positions (mp_mask_targets, mp_grad_logit_diff_masked). */
mp_status mp_model_backward_acts_masked(const mp_model *m, mp_acts *A, const float *dlogits, const mp_hooks *bwd,
                                        const int *mask);

/* ---- the metrics the bindings name (loss = "ce", {logit_diff = ...}) ----
 * Both bindings (lua/lgrad.c, python/mpy_hooks.c) evaluate them here, so the
 * values and gradients they report cannot differ. */

/* The mean cross-entropy of logits [N, V] against targets [N] (-1: ignored),
 * as m:loss reports it (rounded to float), into *value; with dl non-NULL its
 * gradient d value / d logits [N, V] (dl may alias nothing else). rows: N
 * floats of scratch. MP_ERR_ARG when every target is -1; MP_ERR_NOMEM. */
mp_status mp_grad_ce(const float *logits, const int *targets, int N, int V, float *dl, float *rows, double *value);
/* The mean over the B rows of logits [B, T, V] of logit[correct[b]] -
 * logit[wrong[b]] at the last position (TransformerLens's logit difference),
 * into *value; with dl non-NULL its gradient [B, T, V]. Ids must be in [0, V). */
void mp_grad_logit_diff(const float *logits, int B, int T, int V, const int *correct, const int *wrong, float *dl,
                        double *value);
/* The same at each row's last real token of a padded batch (mask [B, T];
 * NULL: position T - 1, as mp_grad_logit_diff). */
void mp_grad_logit_diff_masked(const float *logits, int B, int T, int V, const int *correct, const int *wrong,
                               const int *mask, float *dl, double *value);

/* ---- attribution patching ----
 * For one hook point with activations clean and corrupt and the metric's
 * gradient grad at the corrupted run (each of the hook's full shape for B x T
 * tokens), the first-order estimate of patching clean into the corrupted run,
 * (clean - corrupt) * grad, summed over every axis but those `per` keeps:
 *   POSITION       [T]     (for attention maps: the query position)
 *   HEAD           [nh]    hooks with a head axis (q/k/v/z, scores, pattern)
 *   HEAD_POSITION  [nh, T] the same
 *   NEURON         [D] / [M] residual-width and MLP hooks (the last axis)
 *   ALL            [1]     the total */
typedef enum { MP_ATTR_POSITION, MP_ATTR_HEAD, MP_ATTR_HEAD_POSITION, MP_ATTR_NEURON, MP_ATTR_ALL } mp_attr_per;

/* The shape of the result (returns its ndim, 1 or 2), or 0 when `per` does not
 * apply to the hook (HEAD of a [B,T,D] hook, NEURON of a per-head one). */
int mp_grad_attr_shape(const struct mp_config *c, mp_hook_id id, int T, mp_attr_per per, int64_t shape[2]);
/* Writes the estimate into out (mp_grad_attr_shape's shape); sums in double.
 * MP_ERR_ARG when per does not apply to the hook; MP_ERR_NOMEM. */
mp_status mp_grad_attribution(const struct mp_config *c, mp_hook_id id, int B, int T, const float *clean,
                              const float *corrupt, const float *grad, mp_attr_per per, float *out);
/* The same for a point of registry hs, its own points included (an SAE's
 * sub-points, [B, T, width]: position, neuron = feature, all). */
int mp_grad_attr_shape_hs(const mp_hooks *hs, const struct mp_config *c, mp_hook_id id, int T, mp_attr_per per,
                          int64_t shape[2]);
mp_status mp_grad_attribution_hs(const mp_hooks *hs, const struct mp_config *c, mp_hook_id id, int B, int T,
                                 const float *clean, const float *corrupt, const float *grad, mp_attr_per per,
                                 float *out);

#endif
