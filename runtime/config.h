/* config.h — the model config (mp_config) and MP_CONFIG_TABLE, the one list
 * of its fields from which every copy is generated: validation and defaults
 * (runtime/config.c), the run file's /model attributes (io/h5run.c), the
 * checkpoint's /config attributes, written and read (io/checkpoint.c), the Lua
 * config table m.config and mp.model.new's options (lua/lmodel.c). The kind
 * names (norm, mlp, pos, rope_scaling, attn, qk_norm) are here too, one table each.
 *
 * Adding a field: a member in mp_config, a row in MP_CONFIG_TABLE, a check in
 * mp_config_validate; every path then carries it (tests/lua/test_config.lua
 * fails until its samples give the field a non-default value). */
#ifndef MP_CONFIG_H
#define MP_CONFIG_H

#include "mp_common.h"

typedef enum { MP_NORM_RMS = 0, MP_NORM_LAYER } mp_norm_kind;
#define MP_NORM_COUNT 2
typedef enum { MP_MLP_SWIGLU = 0, MP_MLP_GELU, MP_MLP_NONE } mp_mlp_kind;
#define MP_MLP_COUNT 3
/* Positional schemes (runtime/pos.c; the values are stable: checkpoints store
 * names, mp_pos_name / mp_pos_parse): rope (theta); none (NoPE); learned
 * (GPT-2 table); half_rope (RoPE on the first rope_dims channels with
 * frequencies theta^(-2i/rope_dims), the rest unrotated); high_freq (every
 * pair at a high frequency, log-spaced from one turn per 32 tokens to two
 * turns per ctx); rope_id (the high_freq band on the first rope_dims channels,
 * the rest unrotated, and the logit temperature (1 + 0.1 ln(max(t,ctx)/ctx))^2
 * for the query at 1-based position t, unless pos_no_temp). DroPE is a
 * procedure on a rope model (set pos to none, recalibrate), not a scheme. */
typedef enum {
    MP_POS_ROPE = 0, MP_POS_NONE, MP_POS_LEARNED, MP_POS_HALF_ROPE, MP_POS_HIGH_FREQ, MP_POS_ROPE_ID
} mp_pos_kind;
#define MP_POS_COUNT 6
/* Inference-time scaling of RoPE frequencies (rope and half_rope only):
 * PI divides every frequency by rope_factor; NTK raises theta to
 * theta * factor^(d/(d-2)) (d = rotated channels); YaRN (Peng et al. 2023,
 * eq. 19-22) blends interpolated and original frequencies with the ramp
 * gamma(r) = clamp((r - beta_slow) / (beta_fast - beta_slow), 0, 1) of
 * r_i = orig_ctx / wavelength_i, and multiplies the logits by
 * (0.1 ln(factor) + 1)^2. */
typedef enum { MP_ROPE_SCALING_NONE = 0, MP_ROPE_SCALING_PI, MP_ROPE_SCALING_NTK, MP_ROPE_SCALING_YARN } mp_rope_scaling;
#define MP_ROPE_SCALING_COUNT 4
/* Attention variants (runtime/attn_variants.c; the values are stable:
 * checkpoints store names, mp_attn_name / mp_attn_parse). Each maps a query's
 * scores u over the n keys it sees to the pattern: softmax; ssmax (scalable
 * softmax, Nakanishi 2025: softmax(s_h log(n) u), s_h learnable per head);
 * entmax15 (1.5-entmax, the exact sort-based algorithm of Peters et al. 2019);
 * entmax (alpha-entmax for any alpha > 1 by bisection); asentmax (adaptive-
 * scalable entmax, Vasylenko et al. 2025: alpha-entmax of
 * (delta_h + beta_h (log n)^gamma_h) u, delta/beta/gamma learnable per head).
 * The entmax kinds give exact zeros. */
typedef enum { MP_ATTN_SOFTMAX = 0, MP_ATTN_SSMAX, MP_ATTN_ENTMAX15, MP_ATTN_ENTMAX, MP_ATTN_ASENTMAX } mp_attn_kind;
#define MP_ATTN_COUNT 5
/* RMSNorm on the queries and keys after their projections (and biases),
 * before the positional scheme (the values are stable: checkpoints store
 * names, mp_qk_norm_name / mp_qk_norm_parse): none; head (each head's d_head
 * channels normalized on their own, one weight [d_head] shared by the heads:
 * Qwen3, Gemma 3); full (the whole projection of a position normalized at
 * once, weights [H*d_head] and [K*d_head]: OLMo 2). eps = norm_eps. */
typedef enum { MP_QK_NORM_NONE = 0, MP_QK_NORM_HEAD, MP_QK_NORM_FULL } mp_qk_norm_kind;
#define MP_QK_NORM_COUNT 3

#define MP_ROPE_FREQS_MAX 256   /* d_head up to 512 with frequency divisors */
#define MP_REL_VALUES_MAX 4096  /* rel_values: the largest clipping distance R */

typedef struct mp_config {
    int d_model;   /* D */
    int n_layer;   /* L */
    int n_head;    /* H */
    int n_kv_head; /* K (divides H) */
    int d_head;    /* Dh (H*Dh need not equal D) */
    int d_mlp;     /* M */
    int vocab;     /* V */
    int ctx;       /* training context length */
    float rope_theta;
    float norm_eps;
    int tied;      /* classifier shares the embedding */
    mp_norm_kind norm;
    mp_mlp_kind mlp;
    mp_pos_kind pos;
    /* appended for real models (zero = the older behaviour) */
    int qkv_bias;      /* q/k/v projections have biases bq, bk, bv (Qwen2, GPT-2) */
    int linear_bias;   /* wo, w1, w3, w2 have biases bo, b1, b3, b2 (GPT-2) */
    int gelu_tanh;     /* GELU MLP uses the tanh approximation (GPT-2 gelu_new) */
    float rope_scale;  /* linear RoPE scaling: positions divided by it (0 or 1: off) */
    int n_rope_freqs;  /* 0, or d_head/2: RoPE frequency i is divided by rope_freqs[i] */
    float rope_freqs[MP_ROPE_FREQS_MAX];
    /* appended for the positional schemes (zero = the older behaviour / the default) */
    int rope_dims;     /* half_rope, rope_id: rotated channels (even, 2..d_head); 0: 2*floor(d_head/4) */
    int pos_no_temp;   /* rope_id: 1 switches the length-dependent logit temperature off */
    mp_rope_scaling rope_scaling; /* inference-time scaling of rope / half_rope (0: none) */
    float rope_factor;    /* its factor s (> 0; 1 = no change) */
    int rope_orig_ctx;    /* YaRN: the original training length (0: ctx) */
    float yarn_beta_fast; /* YaRN ramp ends in rotations per orig_ctx (0: 32) */
    float yarn_beta_slow; /* (0: 1) */
    /* appended for the attention variants (zero = softmax, the older behaviour) */
    mp_attn_kind attn;    /* how scores become the pattern */
    float attn_alpha;     /* entmax / asentmax: alpha in (1, 8] (0: 1.5); 0 for the other kinds */
    /* appended for sliding-window attention (zero = full causal attention, the older behaviour) */
    int sliding_window;         /* W > 0: a windowed layer's query at i sees keys i-W < j <= i (mp_config_window) */
    int sliding_window_pattern; /* P: 0 every layer windowed; P > 0 layer l is global when (l+1) % P == 0 */
    /* appended for the q/k norm (zero = none, the older behaviour) */
    mp_qk_norm_kind qk_norm; /* RMSNorm of q and k before the positional scheme */
    /* appended for GPT-NeoX / Pythia (zero = the older behaviour) */
    int parallel_attn;    /* attention and MLP both read resid_pre: x + attn(ln1(x)) + mlp(ln2(x)) (NeoX's
                           * use_parallel_residual); the block has no hook_resid_mid (TransformerLens's
                           * parallel_attn_mlp) */
    /* appended for Gemma and Gemma 2 (zero = the older behaviour). mlp swiglu with
     * gelu_tanh is GeGLU: gelu_tanh(gate) * up. */
    int norm_offset;      /* RMSNorm weights are Gemma's x * (1 + w): in memory the norm weights hold the
                           * factor 1 + w (as TransformerLens and llama.cpp keep them); Hugging Face folders
                           * store w, so their reader adds 1 and their writer subtracts it */
    int embed_scale;      /* hook_embed = sqrt(d_model) * the token's embedding row (the unembedding is not scaled) */
    int post_norms;       /* Gemma 2: RMSNorms ln1_post / ln2_post of the attention / MLP output before it is
                           * added to the residual (weights ln1p_w, ln2p_w) */
    float attn_softcap;   /* > 0: scores = cap * tanh(scores / cap) before the mask (0: off) */
    float final_softcap;  /* > 0: logits = cap * tanh(logits / cap) (0: off) */
    float query_pre_attn_scalar; /* > 0: scores scaled by its ^-1/2 instead of d_head^-1/2 (0: d_head) */
    /* appended for OLMo 2 (zero = the older behaviour) */
    int no_pre_norms;     /* the block has no ln1 / ln2: attention and MLP read the residual itself (attribute
                           * pre_norms = false; needs post_norms, which then hold the block's norms) */
    /* appended for Gemma 3 (zero = the older behaviour) */
    float rope_local_theta; /* > 0: the windowed layers (mp_config_window > 0) rotate with this base and no RoPE
                             * scaling (rope_scale, rope_scaling, rope_freqs apply to the global layers only);
                             * pos rope with a sliding_window only (mp_pos_local) */
    /* appended for Shaw relative values (zero = the older behaviour) */
    int rel_values;       /* R > 0: every layer adds to each head's output the learned vector rel_v[l][min(i-j, R)]
                           * weighted by the pattern: z_i = sum_j a_ij (v_j + r_clip(i-j)) (Shaw et al. 2018, on
                           * the values only; runtime/relv.h); scores unchanged. 0..4096 */
} mp_config;

/* The value types of config fields, as files and Lua see them:
 * INT: integer attribute / Lua integer; FLOAT: float attribute (the shortest
 * decimal that reads back as the float) / Lua number; BOOL: integer 0/1
 * attribute / Lua boolean; NOTBOOL: BOOL whose member holds the negation
 * (pos_temp vs pos_no_temp); KIND: string attribute naming an enum value /
 * Lua string; FLOATS: float-array attribute / Lua list (rope_freqs, whose
 * length is n_rope_freqs). */
typedef enum { MP_CF_INT, MP_CF_FLOAT, MP_CF_BOOL, MP_CF_NOTBOOL, MP_CF_KIND, MP_CF_FLOATS } mp_cfield_type;
/* Flags: REQ, mp.model.new requires the option (no default, no derivation). */
#define MP_CF_REQ 1

/* The one list of config fields, in the order files and tables show them.
 * X(member, type, attr, lua, names, n_names, dflt, flags, value, written, shown)
 *   member   the mp_config member (MP_CF_FLOATS: the count n_rope_freqs of rope_freqs)
 *   attr     the attribute name in /config and /model (stable: never rename)
 *   lua      the key in m.config and mp.model.new's options
 *   names    KIND: the table of names, index = enum value (else NULL, 0)
 *   dflt     mp_config_default's member value (dims 0: the caller sets them)
 *   value    the value in force (an expression of `c`): written to files and
 *            shown in m.config; e.g. rope_orig_ctx 0 is shown as ctx
 *   written  when /config and /model carry the attribute (older readers
 *            still read files of plain models: optional ones only when used)
 *   shown    when m.config carries the key
 * mlp is a KIND whose label in /config, /model and m.config is "gelu_tanh"
 * for a gelu_tanh model (mp_mlp_label), with gelu_tanh = 1 as well; /config of
 * files before issue 38 says mlp="gelu" with gelu_tanh=1 (still read). */
#define MP_CONFIG_TABLE(X)                                                                                            \
    X(d_model, MP_CF_INT, "d_model", "d_model", NULL, 0, 0, MP_CF_REQ, c->d_model, 1, 1)                               \
    X(n_layer, MP_CF_INT, "n_layer", "n_layer", NULL, 0, 0, MP_CF_REQ, c->n_layer, 1, 1)                               \
    X(n_head, MP_CF_INT, "n_head", "n_head", NULL, 0, 0, MP_CF_REQ, c->n_head, 1, 1)                                   \
    X(n_kv_head, MP_CF_INT, "n_kv_head", "n_kv_head", NULL, 0, 0, 0, c->n_kv_head, 1, 1)                               \
    X(d_head, MP_CF_INT, "d_head", "d_head", NULL, 0, 0, 0, c->d_head, 1, 1)                                           \
    X(d_mlp, MP_CF_INT, "d_mlp", "d_mlp", NULL, 0, 0, 0, c->d_mlp, 1, 1)                                               \
    X(vocab, MP_CF_INT, "vocab", "vocab", NULL, 0, 0, MP_CF_REQ, c->vocab, 1, 1)                                       \
    X(ctx, MP_CF_INT, "ctx", "ctx", NULL, 0, 0, MP_CF_REQ, c->ctx, 1, 1)                                               \
    X(tied, MP_CF_BOOL, "tied", "tied", NULL, 0, 1, 0, c->tied, 1, 1)                                                  \
    X(rope_theta, MP_CF_FLOAT, "rope_theta", "rope_theta", NULL, 0, 10000.0f, 0, c->rope_theta, 1, 1)                  \
    X(norm_eps, MP_CF_FLOAT, "norm_eps", "norm_eps", NULL, 0, 1e-5f, 0, c->norm_eps, 1, 1)                             \
    X(norm, MP_CF_KIND, "norm", "norm", mp_norm_names, MP_NORM_COUNT, MP_NORM_RMS, 0, c->norm, 1, 1)                   \
    X(mlp, MP_CF_KIND, "mlp", "mlp", mp_mlp_names, MP_MLP_COUNT, MP_MLP_SWIGLU, 0, c->mlp, 1, 1)                       \
    X(pos, MP_CF_KIND, "pos", "pos", mp_pos_names, MP_POS_COUNT, MP_POS_ROPE, 0, c->pos, 1, 1)                         \
    X(qkv_bias, MP_CF_BOOL, "qkv_bias", "qkv_bias", NULL, 0, 0, 0, c->qkv_bias, c->qkv_bias, 1)                        \
    X(linear_bias, MP_CF_BOOL, "linear_bias", "linear_bias", NULL, 0, 0, 0, c->linear_bias, c->linear_bias, 1)         \
    X(gelu_tanh, MP_CF_BOOL, "gelu_tanh", "gelu_tanh", NULL, 0, 0, 0, c->gelu_tanh, c->gelu_tanh, 1)                   \
    X(rope_scale, MP_CF_FLOAT, "rope_scale", "rope_scale", NULL, 0, 0.0f, 0,                                           \
      c->rope_scale > 0.0f ? c->rope_scale : 1.0f, c->rope_scale > 0.0f && c->rope_scale != 1.0f, 1)                  \
    X(n_rope_freqs, MP_CF_FLOATS, "rope_freqs", "rope_freqs", NULL, 0, 0, 0, c->n_rope_freqs, c->n_rope_freqs, 1)     \
    X(rope_dims, MP_CF_INT, "rope_dims", "rope_dims", NULL, 0, 0, 0,                                                   \
      c->rope_dims ? c->rope_dims : 2 * (c->d_head / 4), c->rope_dims != 0,                                            \
      c->pos == MP_POS_HALF_ROPE || c->pos == MP_POS_ROPE_ID)                                                          \
    X(pos_no_temp, MP_CF_NOTBOOL, "pos_temp", "pos_temp", NULL, 0, 0, 0, c->pos == MP_POS_ROPE_ID && !c->pos_no_temp, \
      c->pos_no_temp, 1)                                                                                               \
    X(rope_scaling, MP_CF_KIND, "rope_scaling", "rope_scaling", mp_rope_scaling_names, MP_ROPE_SCALING_COUNT,         \
      MP_ROPE_SCALING_NONE, 0, c->rope_scaling, c->rope_scaling != MP_ROPE_SCALING_NONE, 1)                            \
    X(rope_factor, MP_CF_FLOAT, "rope_factor", "rope_factor", NULL, 0, 0.0f, 0,                                        \
      c->rope_scaling ? c->rope_factor : 1.0f, c->rope_scaling != MP_ROPE_SCALING_NONE, 1)                             \
    X(rope_orig_ctx, MP_CF_INT, "rope_orig_ctx", "rope_orig_ctx", NULL, 0, 0, 0,                                       \
      c->rope_orig_ctx ? c->rope_orig_ctx : c->ctx, c->rope_scaling && c->rope_orig_ctx, 1)                            \
    X(yarn_beta_fast, MP_CF_FLOAT, "yarn_beta_fast", "yarn_beta_fast", NULL, 0, 0.0f, 0,                               \
      c->yarn_beta_fast > 0.0f ? c->yarn_beta_fast : 32.0f, c->rope_scaling && c->yarn_beta_fast > 0.0f, 1)            \
    X(yarn_beta_slow, MP_CF_FLOAT, "yarn_beta_slow", "yarn_beta_slow", NULL, 0, 0.0f, 0,                               \
      c->yarn_beta_slow > 0.0f ? c->yarn_beta_slow : 1.0f, c->rope_scaling && c->yarn_beta_slow > 0.0f, 1)             \
    X(attn, MP_CF_KIND, "attn", "attn", mp_attn_names, MP_ATTN_COUNT, MP_ATTN_SOFTMAX, 0, c->attn,                     \
      c->attn != MP_ATTN_SOFTMAX, 1)                                                                                   \
    X(attn_alpha, MP_CF_FLOAT, "attn_alpha", "alpha", NULL, 0, 0.0f, 0, mp_attn_alpha(c),                              \
      c->attn == MP_ATTN_ENTMAX || c->attn == MP_ATTN_ASENTMAX, 1)                                                     \
    X(sliding_window, MP_CF_INT, "sliding_window", "sliding_window", NULL, 0, 0, 0, c->sliding_window,                 \
      c->sliding_window != 0, 1)                                                                                       \
    X(sliding_window_pattern, MP_CF_INT, "sliding_window_pattern", "sliding_window_pattern", NULL, 0, 0, 0,            \
      c->sliding_window_pattern, c->sliding_window_pattern != 0, c->sliding_window != 0)                                \
    X(qk_norm, MP_CF_KIND, "qk_norm", "qk_norm", mp_qk_norm_names, MP_QK_NORM_COUNT, MP_QK_NORM_NONE, 0, c->qk_norm,   \
      c->qk_norm != MP_QK_NORM_NONE, 1)                                                                                \
    X(parallel_attn, MP_CF_BOOL, "parallel_attn", "parallel_attn", NULL, 0, 0, 0, c->parallel_attn,                    \
      c->parallel_attn, 1)                                                                                             \
    X(norm_offset, MP_CF_BOOL, "norm_offset", "norm_offset", NULL, 0, 0, 0, c->norm_offset, c->norm_offset, 1)         \
    X(embed_scale, MP_CF_BOOL, "embed_scale", "embed_scale", NULL, 0, 0, 0, c->embed_scale, c->embed_scale, 1)         \
    X(post_norms, MP_CF_BOOL, "post_norms", "post_norms", NULL, 0, 0, 0, c->post_norms, c->post_norms, 1)              \
    X(attn_softcap, MP_CF_FLOAT, "attn_softcap", "attn_softcap", NULL, 0, 0.0f, 0, c->attn_softcap,                    \
      c->attn_softcap != 0.0f, 1)                                                                                      \
    X(final_softcap, MP_CF_FLOAT, "final_softcap", "final_softcap", NULL, 0, 0.0f, 0, c->final_softcap,                \
      c->final_softcap != 0.0f, 1)                                                                                     \
    X(query_pre_attn_scalar, MP_CF_FLOAT, "query_pre_attn_scalar", "query_pre_attn_scalar", NULL, 0, 0.0f, 0,          \
      c->query_pre_attn_scalar > 0.0f ? c->query_pre_attn_scalar : (float)c->d_head, c->query_pre_attn_scalar != 0.0f, 1) \
    X(no_pre_norms, MP_CF_NOTBOOL, "pre_norms", "pre_norms", NULL, 0, 0, 0, !c->no_pre_norms, c->no_pre_norms, 1)   \
    X(rope_local_theta, MP_CF_FLOAT, "rope_local_theta", "rope_local_theta", NULL, 0, 0.0f, 0, c->rope_local_theta,  \
      c->rope_local_theta != 0.0f, 1)                                                                                  \
    X(rel_values, MP_CF_INT, "rel_values", "rel_values", NULL, 0, 0, 0, c->rel_values, c->rel_values != 0, 1)

/* The table as data, for the loops of each path. */
typedef struct {
    const char *attr, *lua;   /* see MP_CONFIG_TABLE */
    mp_cfield_type type;
    const char *const *names; /* KIND */
    int n_names;
    int flags;                /* MP_CF_REQ */
} mp_config_field;
extern const mp_config_field mp_config_fields[];
extern const int mp_config_n_fields;

/* Field i of c: the member's value as stored in files (KIND: the enum
 * value; NOTBOOL: the negated member, e.g. pos_temp; FLOATS: the count), the value in force
 * (`value` column), whether files carry it, whether m.config shows it. */
double mp_config_get(const mp_config *c, int i);
double mp_config_value(const mp_config *c, int i);
int mp_config_written(const mp_config *c, int i);
int mp_config_shown(const mp_config *c, int i);
/* Sets field i from a file or Lua value v (NOTBOOL: v is the attribute /
 * option, e.g. pos_temp, so the member gets !v; FLOATS: use
 * mp_config_set_floats). */
void mp_config_set(mp_config *c, int i, double v);
/* FLOATS: the array and its length (n values; MP_ERR_ARG beyond MP_ROPE_FREQS_MAX). */
const float *mp_config_floats(const mp_config *c, int i, int *n);
mp_status mp_config_set_floats(mp_config *c, int i, const double *v, size_t n);
/* The name a KIND field is written and shown as: label = 1 (what /config,
 * /model and m.config carry) gives "gelu_tanh" for mlp of a gelu_tanh model;
 * label = 0 the kind's own name (names[value]). */
const char *mp_config_kind_name(const mp_config *c, int i, int label);
/* Sets a KIND field from a name (label = 1 also accepts "gelu_tanh" for mlp,
 * setting gelu_tanh); -1 (nothing set) when the name is not one of the kind's. */
int mp_config_set_kind(mp_config *c, int i, const char *name, int label);
/* Index of the field with that attribute or Lua key, or -1. */
int mp_config_field_find(const char *key);

/* The kind names, index = enum value. */
extern const char *const mp_norm_names[MP_NORM_COUNT];
extern const char *const mp_mlp_names[MP_MLP_COUNT];
extern const char *const mp_pos_names[MP_POS_COUNT];
extern const char *const mp_rope_scaling_names[MP_ROPE_SCALING_COUNT];
extern const char *const mp_attn_names[MP_ATTN_COUNT];
extern const char *const mp_qk_norm_names[MP_QK_NORM_COUNT];
/* "rms", "layer"; "swiglu", "gelu", "none"; mp_mlp_label: "gelu_tanh" for a
 * gelu_tanh GELU model, else mp_mlp_name. */
const char *mp_norm_name(mp_norm_kind k);
const char *mp_mlp_name(mp_mlp_kind k);
const char *mp_mlp_label(const mp_config *c);
/* "rope", "none", "learned", "half_rope", "high_freq", "rope_id". */
const char *mp_pos_name(mp_pos_kind k);
/* The kind of a name, or -1. */
int mp_pos_parse(const char *name);
/* "none", "pi", "ntk", "yarn"; mp_rope_scaling_parse: the kind, or -1. */
const char *mp_rope_scaling_name(mp_rope_scaling k);
int mp_rope_scaling_parse(const char *name);
/* "softmax", "ssmax", "entmax15", "entmax", "asentmax"; mp_attn_parse: the kind, or -1. */
const char *mp_attn_name(mp_attn_kind k);
int mp_attn_parse(const char *name);
/* "none", "head", "full"; mp_qk_norm_parse: the kind, or -1. */
const char *mp_qk_norm_name(mp_qk_norm_kind k);
int mp_qk_norm_parse(const char *name);
/* The alpha the kind uses: 1 (softmax, ssmax), 1.5 (entmax15), attn_alpha or
 * 1.5 when 0 (entmax, asentmax). */
double mp_attn_alpha(const mp_config *c);

/* Sliding-window attention (Mistral's sliding_window; Gemma 2/3's per-layer
 * pattern): the window of layer l, 0 when the layer attends to every earlier
 * key. A windowed layer's query at position i sees the keys j with
 * i - W < j <= i (W keys, itself included): Hugging Face transformers'
 * masking_utils.py sliding_window_overlay, `kv_idx > q_idx - sliding_window`
 * under the causal `kv_idx <= q_idx`, which modeling_mistral uses. With
 * sliding_window_pattern P > 0 layer l is global (full causal) when
 * (l + 1) % P == 0, else windowed: HF's configuration_gemma2.py
 * (`"sliding_attention" if bool((i + 1) % 2)`, P = 2: layers 0, 2, ...
 * windowed) and configuration_gemma3.py (the same with
 * sliding_window_pattern = 6: every 6th layer global). */
int mp_config_window(const mp_config *c, int l);
/* The attention's logit scale: query_pre_attn_scalar^-1/2, or d_head^-1/2 (float32, as every device uses it). */
float mp_attn_scale(const mp_config *c);
/* x = cap * tanh(x / cap) over n floats (cap > 0; Gemma 2's soft caps). */
void mp_softcap(float *x, size_t n, float cap);

/* Default config values (theta 10000, eps 1e-5, rms, swiglu, rope, tied):
 * the table's dflt column. */
mp_config mp_config_default(void);
/* Checks every field (positive, divisible, no overflow of any buffer size);
 * MP_ERR_FORMAT with a message prefixed by `what` (usually the file name). */
mp_status mp_config_validate(const mp_config *c, const char *what);
/* The defaults derived from other fields, for those a caller was not given
 * (mp.model.new, mechprobe.Model): n_kv_head = n_head, d_head = d_model / n_head,
 * d_mlp = 4 d_model (0 without an MLP). */
void mp_config_derive(mp_config *c, int kv_given, int dh_given, int mlp_given);
/* Total number of parameters (floats), or 0 on overflow. */
size_t mp_config_n_params(const mp_config *c);

#endif
