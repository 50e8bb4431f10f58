/* weights_tl.h — TransformerLens's names and shapes for a model's weights:
 * which mechprobe parameter each TL weight (W_E, W_pos, W_U, W_Q, W_K, W_V,
 * _W_K, _W_V, W_O, W_in, W_gate, W_out, b_Q, b_K, b_V, _b_K, _b_V, b_O, b_in,
 * b_gate, b_out) reads, its TL shape, and copies between the two layouts.
 *
 *   mechprobe (nn.Linear [out, in])     TransformerLens
 *   embed [V, D]                        W_E [V, D]
 *   pos_embed [ctx, D]                  W_pos [ctx, D]
 *   unembed [V, D]                      W_U [D, V]             (a transpose)
 *   wq [H*Dh, D]                        W_Q [H, D, Dh]
 *   wk, wv [K*Dh, D]                    W_K, W_V [H, D, Dh]    (query head h reads
 *                                                              key/value head h / (H/K))
 *                                       _W_K, _W_V [K, D, Dh]  (the K heads as stored)
 *   wo [D, H*Dh]                        W_O [H, Dh, D]
 *   w1 (GELU: up; SwiGLU: gate) [M, D]  W_in (GELU) / W_gate (SwiGLU) [D, M]
 *   w3 (SwiGLU: up) [M, D]              W_in (SwiGLU) [D, M]
 *   w2 [D, M]                           W_out [M, D]
 *   bq [H*Dh], bk, bv [K*Dh]            b_Q [H, Dh], b_K, b_V [H, Dh], _b_K, _b_V [K, Dh]
 *   bo [D], b1/b3 [M], b2 [D]           b_O [D], b_in / b_gate [M], b_out [D]
 *
 * Per-layer weights have one such tensor per layer; "all layers" stacks them
 * [n_layer, ...]. b_U does not exist (logits = ln_final(x) W_U). The Lua
 * binding (lua/lweights.c: m.W_E, m:W_Q(l), m:set_weight) is a thin layer
 * over these. */
#ifndef MP_WEIGHTS_TL_H
#define MP_WEIGHTS_TL_H

#include "model.h"

typedef enum {
    MP_TL_PLAIN,      /* the same values, TL's shape (biases [D], W_E [V, D]) */
    MP_TL_T,          /* a transpose: source [rows, cols] -> [cols, rows] */
    MP_TL_HEADS_IN,   /* source [nh*Dh, D] -> [TH, D, Dh]; TL head h reads source head h / rep */
    MP_TL_HEADS_OUT,  /* source [D, H*Dh] -> [H, Dh, D] */
    MP_TL_BIAS_HEADS  /* source [nh*Dh] -> [TH, Dh]; TL head h reads source head h / rep */
} mp_tl_kind;

/* A TL weight resolved on a model: layer 0's source in the model's memory
 * (the next layer's `stride` floats further) and one layer's TL shape. */
typedef struct {
    const char *name;  /* TL's name (static storage) */
    float *p;          /* source of layer 0 (or of the global tensor) */
    size_t stride;     /* floats between consecutive layers' sources (per_layer) */
    size_t numel;      /* of one layer's TL tensor */
    mp_tl_kind kind;
    int per_layer;     /* 1: one tensor per layer */
    int rep;           /* query heads per source head (W_K, W_V, b_K, b_V of a GQA model), else 1 */
    int rows, cols;    /* the source matrix (MP_TL_T, MP_TL_HEADS_*) */
    int ndim;          /* of one layer's TL tensor: 1..3 */
    int64_t shape[3];
} mp_tl_weight;

/* The TL names, NULL-terminated, in the table's order. */
extern const char *const mp_tl_weight_names[];

/* Resolves `name` on m. MP_ERR_ARG, with a message naming the weight and what
 * the model's config lacks, for an unknown name ("unknown weight \"x\" (W_E,
 * ...)"), b_U, W_pos without learned positions, an MLP weight without MLP,
 * W_gate / b_gate without SwiGLU, a q/k/v bias without qkv_bias, a linear bias
 * without linear_bias, and a weight kept quantized (call mp_model_dequantize).
 * Messages have no function prefix: callers add theirs. */
mp_status mp_tl_weight_info(const mp_model *m, const char *name, mp_tl_weight *out);

/* The TL shape of layer `layer` (layer < 0 on a per-layer weight: all layers,
 * [n_layer, ...]) into shape[4]; returns the number of dims. */
int mp_tl_weight_shape(const mp_model *m, const mp_tl_weight *w, int layer, int64_t shape[4]);

/* Copies layer `layer` (< 0: all layers, stacked) of w out of the model into
 * dst, in TL's layout (mp_tl_weight_shape's numel floats). MP_ERR_ARG for a
 * layer out of range. */
mp_status mp_tl_weight_get(const mp_model *m, const mp_tl_weight *w, int layer, float *dst);

/* MP_OK when w can be written into m: MP_ERR_ARG when its values repeat over
 * query heads (rep > 1: write "_W_K" etc. instead), when the model is
 * quantized, or when the parameters are memory-mapped read-only. */
mp_status mp_tl_weight_settable(const mp_model *m, const mp_tl_weight *w);

/* Writes src (TL's layout, mp_tl_weight_shape's numel floats) into layer
 * `layer` (< 0: all layers) of w; checks mp_tl_weight_settable first. */
mp_status mp_tl_weight_set(mp_model *m, const mp_tl_weight *w, int layer, const float *src);

/* The end of the message for a write into a memory-mapped model: how to load
 * a copy that can be written (the Lua and Python spellings). */
#define MP_TL_COPY_HINT "load it with copy = true (Lua: mp.load(path, {copy = true}); Python: " \
                        "mechprobe.load(path, copy=True)) to write them"

/* TransformerLens's state_dict names of the norm weights: "blocks.L.ln1.w",
 * "blocks.L.ln1.b", "blocks.L.ln2.w", "blocks.L.ln2.b", "blocks.L.ln1_post.w",
 * "blocks.L.ln2_post.w", "blocks.L.attn.q_norm.w", "blocks.L.attn.k_norm.w",
 * "ln_final.w", "ln_final.b". For such a name: 1 with the checkpoint name it
 * stands for ("blocks.L.ln1.weight", ...: m:param's names) in ckpt[n] when the
 * model has that parameter; -1 (mp_error set, naming the TL name and what the
 * config lacks, or the layer out of range) when it has not. 0 for any other
 * name. The values are the model's as stored, which are TL's (a norm_offset
 * model, Gemma, keeps the factor 1 + w, as TL's converted weights do). */
int mp_tl_norm_param(const mp_model *m, const char *tl, char *ckpt, size_t n);
/* m:param's lookup (both bindings): a parameter by its checkpoint name
 * ("embed", "blocks.L.ln1.weight": mp_params_describe's names with the layer)
 * or TransformerLens's norm name (mp_tl_norm_param). 1 with its description
 * and layer (-1 for a whole-model parameter); 0 when the model has no such
 * name; -1 (mp_error set) for a TL norm name the model lacks. */
int mp_param_find(const mp_model *m, const char *name, mp_param_desc *out, int *layer);

#endif
