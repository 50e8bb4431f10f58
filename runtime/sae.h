/* sae.h — sparse autoencoders (SAEs) as SAELens defines them: the weights, the
 * three inference architectures (standard = ReLU, topk, jumprelu), the
 * run-time input normalisations, and the forward written once as the stages
 * SAELens names with hook points, so that a splice into a model
 * (<hook>.hook_sae_input, hook_sae_acts_pre, hook_sae_acts_post,
 * hook_sae_recons, hook_sae_output, hook_sae_error) and training call the same
 * code. Loading and saving SAELens folders is formats/ (sae_io), training
 * runtime/sae_train.
 *
 * Shapes (SAELens's): W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in],
 * b_dec [d_in], threshold [d_sae] (jumprelu only). Activations are rows: an
 * input of N rows is [N, d_in], feature activations [N, d_sae].
 *
 * The forward of one row x, as SAELens's SAE.forward / encode / decode:
 *   xn   = norm_in(x)                       (hook_sae_input sees x, before it)
 *   pre  = (xn - b_dec * apply_b_dec_to_input) @ W_enc + b_enc   (acts_pre)
 *   acts = act(pre)                         (acts_post)
 *       standard: relu(pre); topk: the k largest entries of pre, relu'd, the
 *       others 0; jumprelu: pre where pre > threshold (and > 0), else 0
 *   rec  = acts @ W_dec + b_dec             (recons)
 *   out  = norm_out(rec)                    (the output)
 * norm_in / norm_out by `normalize_activations`:
 *   none, expected_average_only_in: identity at run time (SAELens folds or
 *     applies the dataset scale outside the SAE);
 *   constant_norm_rescale: xn = x * sqrt(d_in) / |x|,  out = rec * |x| / sqrt(d_in);
 *   layer_norm: xn = (x - mu) / (std + 1e-5) with std unbiased (torch.std),
 *     out = rec * std + mu.
 * Each row's denormalisation is kept as out = rec * a + b (mp_sae_rownorm). */
#ifndef MP_SAE_H
#define MP_SAE_H

#include <stddef.h>

#include "mp_common.h"

typedef enum { MP_SAE_STANDARD, MP_SAE_TOPK, MP_SAE_JUMPRELU, MP_SAE_ARCH_COUNT } mp_sae_arch;

typedef enum {
    MP_SAE_NORM_NONE,
    MP_SAE_NORM_EXPECTED_AVERAGE_ONLY_IN,
    MP_SAE_NORM_CONSTANT_NORM_RESCALE,
    MP_SAE_NORM_LAYER_NORM,
    MP_SAE_NORM_COUNT
} mp_sae_norm;

/* SAELens's spellings ("standard", "topk", "jumprelu"; "none",
 * "expected_average_only_in", "constant_norm_rescale", "layer_norm"). */
const char *mp_sae_arch_name(mp_sae_arch a);
const char *mp_sae_norm_name(mp_sae_norm n);
/* -1 for a name that is not one. */
int mp_sae_arch_named(const char *name);
int mp_sae_norm_named(const char *name);

typedef struct mp_sae {
    mp_sae_arch arch;
    int d_in, d_sae;
    int k;                    /* topk: features kept per row (1..d_sae) */
    int apply_b_dec_to_input; /* SAELens's default: 1 */
    mp_sae_norm normalize;
    /* Metadata SAELens keeps with the SAE ("" / -1 when unknown): where it
     * reads its input. */
    char hook_name[128];
    int hook_layer;
    char model_name[128];
    /* SAELens's reshape_activations "hook_z": the input is an attention hook_z
     * [..., n_heads, d_head] read as rows of n_heads * d_head = d_in (the same
     * memory, row-major); 0 for "none". Set by formats/sae_io's loader. */
    int reshape_hook_z;
    /* The weights, in one owned block. */
    float *W_enc, *b_enc, *W_dec, *b_dec;
    float *threshold;         /* jumprelu only; NULL otherwise */
    float *block;
    size_t n_floats;          /* floats in block */
} mp_sae;

/* A new SAE with every weight 0 (threshold too), apply_b_dec_to_input 1,
 * normalize none, no metadata. k is read for topk only. MP_ERR_ARG naming the
 * argument for d_in/d_sae < 1, k outside 1..d_sae, an unknown arch;
 * MP_ERR_NOMEM. */
mp_status mp_sae_new(mp_sae **out, mp_sae_arch arch, int d_in, int d_sae, int k);
void mp_sae_free(mp_sae *s);
/* The weights' names, in SAELens's state_dict order, with their shapes: i in
 * 0..mp_sae_n_weights(s)-1 ("W_enc", "b_enc", "W_dec", "b_dec", "threshold").
 * Returns the name and sets *data, ndim, shape. */
int mp_sae_n_weights(const mp_sae *s);
const char *mp_sae_weight(const mp_sae *s, int i, float **data, int *ndim, int64_t shape[2]);

/* Per-row denormalisation of the run-time norm: out = rec * a + b. */
typedef struct {
    float a, b;
} mp_sae_rownorm;

/* ---- the stages (each over N rows; OpenMP over rows, OpenBLAS products) ---- */
/* xn = norm_in(x) and each row's (a, b) into rn (N entries); xn may alias x. */
void mp_sae_norm_in(const mp_sae *s, const float *x, int N, float *xn, mp_sae_rownorm *rn);
/* pre = (xn - b_dec * apply) @ W_enc + b_enc. scratch: N*d_in floats when
 * apply_b_dec_to_input, else may be NULL. */
void mp_sae_hidden_pre(const mp_sae *s, const float *xn, int N, float *pre, float *scratch);
/* acts = act(pre) (may alias pre). TopK keeps the k largest entries of each row
 * (ties: the lower index; NaN ranks last), then relu. MP_ERR_NOMEM (topk's
 * per-thread heaps). */
mp_status mp_sae_activate(const mp_sae *s, const float *pre, int N, float *acts);
/* rec = acts @ W_dec + b_dec. */
void mp_sae_decode_raw(const mp_sae *s, const float *acts, int N, float *rec);
/* out = rec * a + b per row (rn NULL: identity); out may alias rec. */
void mp_sae_norm_out(const mp_sae *s, const float *rec, int N, const mp_sae_rownorm *rn, float *out);

/* ---- whole passes (SAELens's encode / decode / forward) ----
 * encode: x [N,d_in] -> acts [N,d_sae]; rn (N entries, may be NULL) receives
 * the rows' denormalisation for a later decode. MP_ERR_NOMEM. */
mp_status mp_sae_encode(const mp_sae *s, const float *x, int N, float *acts, mp_sae_rownorm *rn);
/* decode: acts -> out [N,d_in] (rn from the encode, or NULL: no denormalisation). */
void mp_sae_decode(const mp_sae *s, const float *acts, int N, const mp_sae_rownorm *rn, float *out);
/* forward: x -> out (the reconstruction; SAELens's forward without the error
 * term); acts [N,d_sae] may be NULL. MP_ERR_NOMEM. */
mp_status mp_sae_forward(const mp_sae *s, const float *x, int N, float *out, float *acts);

#endif
