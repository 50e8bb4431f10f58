/* mp_hooks.h — the hook-point table (TransformerLens names, one X-macro so names,
 * shapes, HDF5 paths and Lua keys cannot drift), glob selection of hook names,
 * and the callback registry the runtime fires at every hook point.
 *
 * A callback sees a float view of the activation (contiguous, row-major, in the
 * DESIGN.md shape) and may edit it in place: the runtime continues from the
 * edited values. Attention scores/patterns are delivered in blocks of query rows
 * (info->axis == 2, info->offset = first query row), so that capturing the maps
 * of a long run never holds a T x T matrix. During incremental decoding every
 * view covers positions [pos0, pos0 + T) of the sequence. */
#ifndef MP_HOOKS_H
#define MP_HOOKS_H

#include "mp_common.h"

struct mp_config;

/* Shape kinds. B batch, T positions, D d_model, H n_head, K n_kv_head,
 * Dh d_head, M d_mlp; S is the number of key positions (pos0 + T). */
typedef enum {
    MP_SHAPE_BTD,  /* [B,T,D] */
    MP_SHAPE_BTHD, /* [B,T,H,Dh] */
    MP_SHAPE_BTKD, /* [B,T,K,Dh] */
    MP_SHAPE_BHTS, /* [B,H,T,S] */
    MP_SHAPE_BTM,  /* [B,T,M] */
    MP_SHAPE_BT1,  /* [B,T,1]   a norm's scale */
    MP_SHAPE_BTHX, /* [B,T,H,D] per-head copies / results in d_model */
    MP_SHAPE_BTKX  /* [B,T,K,D] per-kv-head copies in d_model */
} mp_shape_kind;

/* Which models have a hook point (the "when" column). */
typedef enum {
    MP_WHEN_ALWAYS,      /* every model */
    MP_WHEN_MLP,         /* a model with an MLP (mlp != none) */
    MP_WHEN_SWIGLU,      /* a SwiGLU MLP (its second input projection) */
    MP_WHEN_LEARNED_POS, /* learned absolute positions */
    MP_WHEN_QK_NORM,     /* a q/k norm (qk_norm != none) */
    MP_WHEN_SERIAL,      /* a block whose MLP reads the residual after attention (not parallel_attn) */
    MP_WHEN_POST_NORMS,  /* Gemma 2's post-norms (post_norms): the attention output's */
    MP_WHEN_POST_NORMS_MLP, /* and the MLP output's (post_norms with an MLP) */
    MP_WHEN_PRE_NORMS,   /* a block with pre-norms (not no_pre_norms, OLMo 2): ln1 */
    MP_WHEN_PRE_NORMS_MLP /* and ln2 (with an MLP) */
} mp_hook_when;

/* X(ID, name, per_layer, shape kind, when, opt_in, grad, device)
 * One row per hook point; everything the code knows about a point is a
 * column here, read through the functions below, so adding a point is one
 * row (plus its fire in the forward and its step in the backward).
 *   name      per-layer names are "blocks.<L>.<name>"
 *   per_layer 1: one point per block; 0: a global point
 *   shape     its tensor (mp_shape_kind)
 *   when      which models have it (mp_hook_exists)
 *   opt_in    1: selected only by a glob that spells its name (the per-head
 *             copies, H x d_model floats per position; mp_hook_opt_in)
 *   grad      1: the backward forms a gradient there (backward hooks,
 *             incl_bwd, attribution; mp_hook_has_grad)
 *   device    1: the CUDA forward fires it; 0: a forward hooking it runs on
 *             the CPU (mp_hook_on_device)
 * Order = order of firing: the global points before the first per-layer one
 * fire before block 0, those after the last one after the last block. An
 * unhooked point costs nothing; hook_pos_embed, hook_mlp_in, the hook_scale
 * points and the opt-in ones have a path of their own (runtime/fwd_hooks.c)
 * that the forward takes only when they are hooked. */
#define MP_HOOK_TABLE(X)                                                                         \
    X(EMBED,          "hook_embed",               0, MP_SHAPE_BTD,  MP_WHEN_ALWAYS,     0, 1, 1) \
    X(POS_EMBED,      "hook_pos_embed",           0, MP_SHAPE_BTD,  MP_WHEN_LEARNED_POS, 0, 1, 1) \
    X(RESID_PRE,      "hook_resid_pre",           1, MP_SHAPE_BTD,  MP_WHEN_ALWAYS,     0, 1, 1) \
    X(LN1_SCALE,      "ln1.hook_scale",           1, MP_SHAPE_BT1,  MP_WHEN_PRE_NORMS,  0, 1, 1) \
    X(LN1,            "ln1.hook_normalized",      1, MP_SHAPE_BTD,  MP_WHEN_PRE_NORMS,  0, 1, 1) \
    X(ATTN_IN,        "hook_attn_in",             1, MP_SHAPE_BTHX, MP_WHEN_ALWAYS,     1, 0, 0) \
    X(Q_INPUT,        "attn.hook_q_input",        1, MP_SHAPE_BTHX, MP_WHEN_ALWAYS,     1, 0, 0) \
    X(K_INPUT,        "attn.hook_k_input",        1, MP_SHAPE_BTKX, MP_WHEN_ALWAYS,     1, 0, 0) \
    X(V_INPUT,        "attn.hook_v_input",        1, MP_SHAPE_BTKX, MP_WHEN_ALWAYS,     1, 0, 0) \
    X(Q,              "attn.hook_q",              1, MP_SHAPE_BTHD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(K,              "attn.hook_k",              1, MP_SHAPE_BTKD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(V,              "attn.hook_v",              1, MP_SHAPE_BTKD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(Q_NORM,         "attn.q_norm.hook_normalized", 1, MP_SHAPE_BTHD, MP_WHEN_QK_NORM, 0, 1, 1) \
    X(K_NORM,         "attn.k_norm.hook_normalized", 1, MP_SHAPE_BTKD, MP_WHEN_QK_NORM, 0, 1, 1) \
    X(ROT_Q,          "attn.hook_rot_q",          1, MP_SHAPE_BTHD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(ROT_K,          "attn.hook_rot_k",          1, MP_SHAPE_BTKD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(ATTN_SCORES,    "attn.hook_attn_scores",    1, MP_SHAPE_BHTS, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(PATTERN,        "attn.hook_pattern",        1, MP_SHAPE_BHTS, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(Z,              "attn.hook_z",              1, MP_SHAPE_BTHD, MP_WHEN_ALWAYS,     0, 1, 1) \
    X(RESULT,         "attn.hook_result",         1, MP_SHAPE_BTHX, MP_WHEN_ALWAYS,     1, 1, 0) \
    X(LN1_POST_SCALE, "ln1_post.hook_scale",      1, MP_SHAPE_BT1,  MP_WHEN_POST_NORMS, 0, 1, 1) \
    X(LN1_POST,       "ln1_post.hook_normalized", 1, MP_SHAPE_BTD,  MP_WHEN_POST_NORMS, 0, 1, 1) \
    X(ATTN_OUT,       "hook_attn_out",            1, MP_SHAPE_BTD,  MP_WHEN_ALWAYS,     0, 1, 1) \
    X(RESID_MID,      "hook_resid_mid",           1, MP_SHAPE_BTD,  MP_WHEN_SERIAL,     0, 1, 1) \
    X(MLP_IN,         "hook_mlp_in",              1, MP_SHAPE_BTD,  MP_WHEN_MLP,        0, 1, 1) \
    X(LN2_SCALE,      "ln2.hook_scale",           1, MP_SHAPE_BT1,  MP_WHEN_PRE_NORMS_MLP, 0, 1, 1) \
    X(LN2,            "ln2.hook_normalized",      1, MP_SHAPE_BTD,  MP_WHEN_PRE_NORMS_MLP, 0, 1, 1) \
    X(MLP_PRE,        "mlp.hook_pre",             1, MP_SHAPE_BTM,  MP_WHEN_MLP,        0, 1, 1) \
    X(MLP_PRE_LINEAR, "mlp.hook_pre_linear",      1, MP_SHAPE_BTM,  MP_WHEN_SWIGLU,     0, 1, 1) \
    X(MLP_POST,       "mlp.hook_post",            1, MP_SHAPE_BTM,  MP_WHEN_MLP,        0, 1, 1) \
    X(LN2_POST_SCALE, "ln2_post.hook_scale",      1, MP_SHAPE_BT1,  MP_WHEN_POST_NORMS_MLP, 0, 1, 1) \
    X(LN2_POST,       "ln2_post.hook_normalized", 1, MP_SHAPE_BTD,  MP_WHEN_POST_NORMS_MLP, 0, 1, 1) \
    X(MLP_OUT,        "hook_mlp_out",             1, MP_SHAPE_BTD,  MP_WHEN_MLP,        0, 1, 1) \
    X(RESID_POST,     "hook_resid_post",          1, MP_SHAPE_BTD,  MP_WHEN_ALWAYS,     0, 1, 1) \
    X(LNF_SCALE,      "ln_final.hook_scale",      0, MP_SHAPE_BT1,  MP_WHEN_ALWAYS,     0, 1, 1) \
    X(LN_FINAL,       "ln_final.hook_normalized", 0, MP_SHAPE_BTD,  MP_WHEN_ALWAYS,     0, 1, 1)

typedef enum {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) MP_HOOK_##id,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
    MP_HOOK_COUNT
} mp_hook_id;

/* The per-head copies (hook_attn_in, attn.hook_q_input / k_input / v_input)
 * and attn.hook_result hold H x d_model floats per position, as
 * TransformerLens's use_attn_in / use_split_qkv_input / use_attn_result points,
 * which exist only when asked for: a glob selects them (the opt_in column)
 * only when its text spells the point's last name component
 * ("blocks.*.attn.hook_result", "*hook_q_input"), so "*" or "blocks.0.*" leave
 * them (and their cost) out. MP_HOOK_GLOB_ALL selects every point, these
 * included ("*" and "*<name>" for each opt-in row). */
#define MP_HOOK_GLOB_OPT_0(name)
#define MP_HOOK_GLOB_OPT_1(name) ",*" name
#define MP_HOOK_GLOB_X(id, name, per_layer, shape, when, opt_in, grad, device) MP_HOOK_GLOB_OPT_##opt_in(name)
#define MP_HOOK_GLOB_ALL "*" MP_HOOK_TABLE(MP_HOOK_GLOB_X)
/* The table's columns. */
int mp_hook_opt_in(mp_hook_id id);    /* 1 for an opt-in point */
int mp_hook_has_grad(mp_hook_id id);  /* 1 where the backward forms a gradient */
int mp_hook_on_device(mp_hook_id id); /* 1 where the CUDA forward fires it */
/* The names (suffixes) of the points whose column `has` gives 1, as
 * "a, b and c" into buf (truncated to n); returns buf. */
const char *mp_hook_suffixes(int (*has)(mp_hook_id), char *buf, size_t n);

extern const char *const mp_hook_suffix[MP_HOOK_COUNT];
extern const int mp_hook_per_layer[MP_HOOK_COUNT];
extern const mp_shape_kind mp_hook_shape_kind[MP_HOOK_COUNT];

/* What a callback is told about the view it receives. */
typedef struct {
    mp_hook_id id;
    int layer;          /* -1 for the global points (hook_embed, hook_pos_embed, ln_final.*) */
    const char *name;   /* full name, e.g. "blocks.3.attn.hook_pattern" */
    int ndim;           /* 3 or 4 */
    int64_t shape[4];   /* shape of this view */
    int64_t full[4];    /* shape of the whole tensor in this forward call */
    int axis;           /* axis along which the view is a slice of `full` */
    int64_t offset;     /* first index of the view along `axis` */
    int pos0;           /* absolute position of row 0 along T (KV-cache decode) */
    size_t numel;       /* number of floats in this view */
    char namebuf[96];   /* storage behind `name` */
} mp_hook_info;

/* Returns 0 to continue; non-zero aborts the forward pass with MP_ERR_HOOK
 * (the callback sets the message with mp_error first). */
typedef int (*mp_hook_fn)(void *user, const mp_hook_info *info, float *data);

/* Does this hook point exist for the model (e.g. no MLP hooks without an MLP)? */
int mp_hook_exists(const struct mp_config *cfg, mp_hook_id id);
/* Full name of (id, layer) into buf; returns buf. */
const char *mp_hook_name(mp_hook_id id, int layer, char *buf, size_t n);
/* Parses a full name; returns 0 and sets id/layer, or -1 when it is not a hook
 * point of this model. */
int mp_hook_parse(const struct mp_config *cfg, const char *name, mp_hook_id *id, int *layer);
/* Why `name` (one name, not a glob) is not a hook point of this model when it
 * is one of other models: " (ln1.hook_normalized exists only on ...)", or a
 * layer past the last block: " (layer 9 out of range: the model has 8 layers
 * (0..7))", into buf, to append to an "unknown hook name" message; ""
 * otherwise. Returns buf. */
const char *mp_hook_absent_why(const struct mp_config *cfg, const char *name, char *buf, size_t n);
/* The (at most) k names of names[0..n) nearest to key by edit distance
 * (Levenshtein, over each name's first 127 characters; ties by name, so the
 * answer does not depend on the order of names): their indices into out, the
 * nearest first. Returns how many (min(k, n)). For "no such hook" messages. */
int mp_hook_nearest(const char *key, const char *const *names, int n, int k, int *out);
/* Full shape of hook (id) for a forward over B x T tokens at pos0. */
int mp_hook_shape(const struct mp_config *cfg, mp_hook_id id, int B, int T, int pos0, int64_t shape[4]);

/* Shell glob (fnmatch(3)): '*' any run of characters, dots included, '?' one
 * character, [...] one of a set ("blocks.[0-3].hook_z"); '\\' is literal. */
int mp_glob_match(const char *pattern, const char *name);

/* Calls fn(user, id, layer, name) for every hook point of the model whose name
 * matches one of the comma-separated globs, in firing order. Returns the
 * number of matches; with `unmatched` non-NULL, the first glob that matched
 * nothing is copied there (so callers can report it; a glob longer than the
 * buffer keeps its two ends around "..."). Globs may have any length. */
typedef void (*mp_hook_visit_fn)(void *user, mp_hook_id id, int layer, const char *name);
int mp_hook_select(const struct mp_config *cfg, const char *globs, mp_hook_visit_fn fn,
                   void *user, char *unmatched, size_t unmatched_len);

/* Copies between a view (as delivered to a callback) and the whole tensor it
 * is a block of: to_full != 0 copies view -> full, else full -> view. */
void mp_hook_view_copy(const mp_hook_info *info, float *full, float *view, int to_full);

/* ---- registry ---- */
typedef struct mp_hooks mp_hooks;

mp_hooks *mp_hooks_new(const struct mp_config *cfg);
void mp_hooks_free(mp_hooks *hs);
/* Registers fn at every hook point matching `globs` (comma-separated). An
 * unknown name or a glob matching nothing is MP_ERR_ARG naming it. */
mp_status mp_hooks_add(mp_hooks *hs, const char *globs, mp_hook_fn fn, void *user);
/* Registers fn at one hook point. */
mp_status mp_hooks_add_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user);
/* Registers fn at one hook point as a reader: it only reads the data (a
 * capture, a cache), never writes it. Where every callback at a point is a
 * reader, a device backend need not stop the forward pass for them: it may
 * hand them a copy later in the same pass (in registration and point order,
 * all before the pass returns), and it copies nothing back. */
mp_status mp_hooks_add_reader_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user);
/* mp_hooks_add for readers: fn at every point matching `globs`, as a reader. */
mp_status mp_hooks_add_reader(mp_hooks *hs, const char *globs, mp_hook_fn fn, void *user);
void mp_hooks_clear(mp_hooks *hs);
int mp_hooks_count(const mp_hooks *hs);

/* Runtime side: is anything registered at (id, layer)? One byte read, so a
 * forward pass with no hooks pays nothing measurable. hs may be NULL. */
int mp_hooks_active(const mp_hooks *hs, mp_hook_id id, int layer);
/* The callbacks at (id, layer) in registration order: fills fns / users with
 * up to max of them and returns how many there are (0 when none; hs may be NULL). */
int mp_hooks_at(const mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn *fns, void **users, int max);
/* Whether something is registered at (id, layer) and every callback there is a reader. */
int mp_hooks_readonly(const mp_hooks *hs, mp_hook_id id, int layer);
/* Fires every callback at info->id/info->layer in registration order (those
 * added with mp_hooks_add_late_at after the others). */
mp_status mp_hooks_fire(const mp_hooks *hs, mp_hook_info *info, float *data);

/* ---- a registry's own points (sub-points) ----
 * A registry may declare named points of its own beside the table's: the
 * sub-points of an SAE spliced in at a point (hooks/sae_splice.h,
 * "blocks.0.hook_resid_post.hook_sae_acts_post"). Each is [B, T, width] for
 * the forward it fires in, belongs to a parent point (id, layer) and is fired
 * by a callback at that parent (whoever declared it), with an id >=
 * MP_HOOK_COUNT (mp_hook_is_sub). Everything that takes a registry accepts
 * them: mp_hooks_add / add_at / add_reader / the select, parse and shape
 * functions below, which answer for the table's points as their mp_hook_*
 * counterparts do and also for the registry's own points. A glob such as "*"
 * selects them (each right after its parent, in declaration order). */
#define mp_hook_is_sub(id) ((int)(id) >= MP_HOOK_COUNT)
/* Declares `name` (unique, < 96 characters) under (parent, layer). Returns
 * its id via *id. MP_ERR_ARG for a duplicate or bad name; MP_ERR_NOMEM. */
mp_status mp_hooks_declare(mp_hooks *hs, const char *name, mp_hook_id parent, int layer, int width, int has_grad,
                           mp_hook_id *id);
/* mp_hook_select over the table's points and the registry's own. */
int mp_hooks_select(const mp_hooks *hs, const char *globs, mp_hook_visit_fn fn, void *user, char *unmatched,
                    size_t unmatched_len);
/* mp_hook_parse, the registry's own names included. */
int mp_hooks_parse(const mp_hooks *hs, const char *name, mp_hook_id *id, int *layer);
/* mp_hook_shape, for the registry's own points too ([B, T, width], 3). */
int mp_hooks_shape(const mp_hooks *hs, mp_hook_id id, int B, int T, int pos0, int64_t shape[4]);
/* mp_hook_has_grad, for the registry's own points too. */
int mp_hooks_has_grad(const mp_hooks *hs, mp_hook_id id);
/* The shape kind of a point (MP_SHAPE_BTD for a registry's own: [B, T, width]). */
mp_shape_kind mp_hook_kind(mp_hook_id id);
/* The full name of a point (the table's or the registry's own) into buf. */
const char *mp_hooks_name(const mp_hooks *hs, mp_hook_id id, int layer, char *buf, size_t n);
/* The parent (id, layer) of a registry's own point; -1 for a table's point. */
int mp_hooks_parent(const mp_hooks *hs, mp_hook_id id, mp_hook_id *parent, int *layer);
/* mp_hooks_add_at for a callback that fires after every other one at its
 * point, whenever it was added (a splice's backward, which turns the gradient
 * of the point's output into its input's). */
mp_status mp_hooks_add_late_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user);
/* Memory the registry frees (free_fn(p)) when it is freed (a splice's state). */
mp_status mp_hooks_own(mp_hooks *hs, void *p, void (*free_fn)(void *));

#endif
