/* weights_process.h — TransformerLens's weight processing (from_pretrained's
 * fold_ln, center_writing_weights, center_unembed, fold_value_biases) as pure
 * functions on an mp_model: each rewrites the parameters so that the logits
 * are unchanged (center_unembed: the log-probabilities; the logits move by a
 * constant per position), while hook values inside the model change as in TL.
 *
 *   fold_ln            each norm's weight w (and LayerNorm's bias b) goes into
 *                      the matrices it feeds (wq/wk/wv; w1/w3; the unembedding):
 *                      W <- W diag(w), the feeding biases c <- c + W b; weights
 *                      become 1, biases 0. A LayerNorm whose consumers have no
 *                      bias (ln_final always: mechprobe models have no b_U; ln1
 *                      without qkv biases; ln2 without linear biases) keeps
 *                      b / w as its bias (exact; refused where w_i = 0 and b_i != 0).
 *                      Post-norms (Gemma 2, OLMo 2) stay: no matrix absorbs a
 *                      weight applied after the normalization; a block without
 *                      pre-norms (OLMo 2) thus folds ln_final alone.
 *   center_writing_weights  (LayerNorm models only: every reader of the
 *                      residual is a LayerNorm, which removes the mean) every
 *                      matrix writing to the residual stream (embed, pos_embed,
 *                      wo, w2) and its bias (bo, b2) loses its mean over d_model.
 *   center_unembed     the unembedding loses its mean over the vocabulary.
 *   fold_value_biases  b_V goes into b_O (b_O += W_O b_V per head, b_V <- 0):
 *                      exact because every attention pattern row sums to 1.
 *                      Needs an attention-output bias (linear_bias); a model
 *                      without value biases has nothing to fold.
 *
 * A tied model is untied first (embed and unembed become separate copies,
 * cfg.tied = 0) when fold_ln, center_writing_weights or center_unembed is asked,
 * since each changes one of the two but not the other (as TL keeps W_U apart
 * from W_E). Memory-mapped parameters are copied first (mp_model_make_owned);
 * quantized models are refused. Replacing the memory bumps m->mem_gen. */
#ifndef MP_WEIGHTS_PROCESS_H
#define MP_WEIGHTS_PROCESS_H

#include "model.h"

typedef enum {
    MP_WP_FOLD_LN = 1,
    MP_WP_CENTER_WRITING = 2,
    MP_WP_CENTER_UNEMBED = 4,
    MP_WP_FOLD_VALUE_BIASES = 8
} mp_wp_step;

/* The TL option name of one step ("fold_ln", ...). */
const char *mp_weights_step_name(mp_wp_step s);
/* 1 when step s can be applied to m (and would change something); else 0 with
 * the reason in why (e.g. "the model uses RMSNorm, which does not remove the
 * mean (TransformerLens skips it too)"). Quantized models: 0 for every step. */
int mp_weights_step_applies(const mp_model *m, mp_wp_step s, char *why, size_t n);
/* The steps of TL's process_weights(...) options, as both bindings read them
 * (m:process_weights{...} in Lua, m.process_weights(...) in Python): opt[i]
 * for step i in TL's order (fold_ln, center_writing_weights, center_unembed,
 * fold_value_biases) is -1 when not given (TL's default True: the step is
 * asked where it applies, else skipped with the reason in why[i]), 0 (off) or
 * 1 (asked; mp_weights_process then refuses it where it does not apply).
 * Returns the mask for mp_weights_process; why[i] is "" unless skipped. */
#define MP_WP_N_STEPS 4
extern const mp_wp_step mp_wp_order[MP_WP_N_STEPS];
unsigned mp_weights_process_plan(const mp_model *m, const int opt[MP_WP_N_STEPS], char why[MP_WP_N_STEPS][512]);

/* Applies the steps in the mask `steps` in TL's order (fold_ln,
 * center_writing_weights, center_unembed, fold_value_biases). Everything is
 * checked before anything changes: MP_ERR_ARG (the model unchanged) for a step
 * that does not apply (the message starts with "process_weights: " and names
 * the step and the reason), or fold_ln on a LayerNorm that cannot be folded
 * exactly; MP_ERR_NOMEM when copying or untying fails (the model unchanged). */
mp_status mp_weights_process(mp_model *m, unsigned steps);

#endif
