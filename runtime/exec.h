/* exec.h — the transformer's forward as ONE walk over a device's op table.
 * A device (the CPU in model.c, CUDA in backends/cuda/cuda_model.c) implements
 * the block's steps as an mp_exec_ops table; mp_block_forward (exec.c) walks
 * the model — embedding, each layer's attention and MLP, the final norm and
 * the head — calling those ops and firing every hook point in the order
 * DESIGN.md's hook table gives, once, for every device. A device keeps its own
 * buffer set-up and its choice of algorithm inside an op (the CPU's fused
 * decode products and quantized weights, CUDA's once-rounded bf16 inputs and
 * its attention kernels), never the order of the steps or of the hooks.
 * Registry (device.h): mp_exec_register / mp_exec_lookup. */
#ifndef MP_EXEC_H
#define MP_EXEC_H

#include "device.h"
#include "fwd_hooks.h"

/* The layout of mp_exec_ops this runtime walks; a table of another version is refused. */
#define MP_EXEC_OPS_VERSION 4

/* The block's linear weights (with their biases), as an op resolves them for layer l. */
typedef enum {
    MP_EXEC_WQ = 0, MP_EXEC_WK, MP_EXEC_WV, MP_EXEC_WO, /* attention: [H*Dh|K*Dh, D], W_O [D, H*Dh] */
    MP_EXEC_W1, MP_EXEC_W3, MP_EXEC_W2,                 /* MLP: gate / fc_in [M, D], up [M, D], down [D, M] */
    MP_EXEC_UNEMBED,                                    /* [V, D], no bias, layer ignored */
    MP_EXEC_NWEIGHT
} mp_exec_weight;

typedef struct mp_exec mp_exec;

/* The keys and values one attention call reads: position j of kv head kh of
 * sequence b at k + b*bs + kh*hs + j*rs (v alike). A call's own rows
 * [B, T, K*Dh] (no cache): bs T*K*Dh, hs Dh, rs K*Dh; a KV cache's layer
 * [B, K, cap, Dh]: bs K*cap*Dh, hs cap*Dh, rs Dh. */
typedef struct {
    const float *k, *v;
    size_t bs, hs, rs;
} mp_kv_view;

/* The view of a call's own keys and values k, v [B, T, K*Dh]. */
static inline mp_kv_view mp_kv_view_rows(const float *k, const float *v, int T, int K, int Dh) {
    const mp_kv_view w = {k, v, (size_t)T * K * Dh, (size_t)Dh, (size_t)K * Dh};
    return w;
}
/* The view of layer l of a KV cache whose keys and values (host or device
 * memory) start at k, v: B sequences, K kv heads, cap positions (mp_kv_offset). */
static inline mp_kv_view mp_kv_view_cache(const float *k, const float *v, int l, int B, int K, int cap, int Dh) {
    const size_t at = mp_kv_offset(B, K, cap, Dh, l, 0, 0, 0);
    const mp_kv_view w = {k + at, v + at, (size_t)K * cap * Dh, (size_t)cap * Dh, (size_t)Dh};
    return w;
}

/* One device's implementation of the forward's steps. Every op returns MP_OK
 * or an error whose message is set; rows N = B*T unless stated; pointers are
 * the device's memory (host for the CPU). An op that fires a hook point inside
 * it (the norm's scale, the attention's scores and pattern) does so through
 * mp_exec_fire / mp_exec_fire_block, which call `view`. */
typedef struct mp_exec_ops {
    int version;      /* MP_EXEC_OPS_VERSION */
    const char *name; /* "cpu", "cuda": the registry's key */
    mp_device device;
    /* -- required -- */
    /* Hands the view `info` of the tensor at data to the active point's hooks
     * (they may edit it; it must hold their edits when this returns, for the
     * next step to read). */
    mp_status (*view)(const mp_exec *e, mp_hook_info *info, float *data);
    /* x [N, D] = the token embeddings of tokens [N] (host ids). */
    mp_status (*embed)(const mp_exec *e, float *x, const int *tokens);
    /* Learned positions: add ? x += : x = the position rows of each token [N, D]. */
    mp_status (*learned_pos)(const mp_exec *e, float *x, int add);
    /* The configured norm of x [N, D] into out, with the weights of the norm
     * whose scale point is sid (LN1_SCALE / LN2_SCALE of layer l, LNF_SCALE);
     * with that point active, scale, fire (mp_exec_fire), apply. mean, rstd:
     * the training store's slots for the statistics, or NULL (inference). */
    mp_status (*norm)(const mp_exec *e, mp_hook_id sid, int l, float *out, float *mean, float *rstd, const float *x);
    /* out [rows, OUT] = in [rows, IN] @ W^T + b for weight w of layer l. */
    mp_status (*linear)(const mp_exec *e, mp_exec_weight w, int l, float *out, const float *in, int rows);
    /* The n products out[i] = in @ w[i]^T + b[i] that share one input
     * (q, k, v; the MLP's gate and up), no hook between them: a device may
     * fuse them or prepare the input once. */
    mp_status (*linears)(const mp_exec *e, int n, const mp_exec_weight *w, int l, float *const *out, const float *in,
                         int rows);
    /* The positional scheme of layer l on q [N, H*Dh] and k [N, K*Dh]
     * (rotations, a query scale; nothing for learned or no positions); a
     * windowed layer of a model with rope_local_theta rotates by its own
     * tables (mp_pos_local). */
    mp_status (*pos_apply)(const mp_exec *e, int l, float *q, float *k);
    /* Appends k, v [B, T, K*Dh] of layer l to the call's KV cache at its
     * positions pos0..; *kv: the layer's cached keys and values that
     * attention reads. Called only with a cache. */
    mp_status (*kv_append)(const mp_exec *e, int l, const float *k, const float *v, mp_kv_view *kv);
    /* Causal attention of layer l: a->q (positioned) into a->z over the keys
     * and values of kv (positions 0..pos0+T-1), in blocks of qb
     * query rows wherever the scores or the pattern are shown (a->att holds
     * a block; hook_attn_scores then hook_pattern fire per block through
     * mp_exec_fire_block) or stored (training); otherwise any algorithm. */
    mp_status (*attention)(const mp_exec *e, int l, const mp_layer_acts *a, const mp_kv_view *kv, int qb);
    /* post [N, M] = the configured activation of pre (SwiGLU: of pre and up). */
    mp_status (*act)(const mp_exec *e, float *post, const float *pre, const float *up);
    /* dst = src; x += y (n floats). */
    mp_status (*copy)(const mp_exec *e, float *dst, const float *src, size_t n);
    mp_status (*add)(const mp_exec *e, float *x, const float *y, size_t n);
    /* The classifier of the final norm's output xn [N, D]: all rows' logits
     * [N, V] (MP_LOGITS_ALL) or each sequence's last (real) row's [B, V]
     * (MP_LOGITS_LAST), into the caller's buffer (host memory); with
     * final_softcap (Gemma 2), cap tanh(logits / cap). */
    mp_status (*head)(const mp_exec *e, const float *xn, mp_logits_mode mode, float *logits);
    /* The q/k norm (c->qk_norm) of layer l on x [N, nh*Dh] in place: nh = H
     * for id MP_HOOK_Q_NORM (weight q_norm), K for MP_HOOK_K_NORM (k_norm);
     * RMSNorm over each head's Dh channels (head) or over the whole row
     * (full), eps = norm_eps. In training x_in (the store's q_in / k_in)
     * receives the input first and rstd each group's statistic (the
     * device's convention, as for norm); both NULL in inference. */
    mp_status (*qk_norm)(const mp_exec *e, mp_hook_id id, int l, float *x, float *x_in, float *rstd);
    /* -- optional: NULL where the device's cpu_reason sends such calls to the CPU -- */
    /* hook_attn_in, hook_q_input / k_input / v_input (fired in that order
     * through mp_exec_fire), then q, k, v of each head from its own input. */
    mp_status (*split_qkv)(const mp_exec *e, int l, const float *in, float *q, float *k, float *v);
    /* attn.hook_result: each head's output through its slice of W_O fired as
     * [B,T,H,D]; out (the fused W_O product) then gets the edits' difference. */
    mp_status (*result)(const mp_exec *e, int l, const float *z, float *out);
    /* -- the backward -- */
    /* The same device's backward steps, walked by mp_backward_walk in reverse
     * (runtime/backward.h: linear, norm, activation, attention, positions,
     * embeddings; hooks and the staged attention where the device has them),
     * or NULL for a device that cannot train. One table per device, both ways. */
    const struct mp_bwd_ops *bwd;
} mp_exec_ops;

/* The CPU's table (runtime/model.c; its backward, mp_bwd_ops_cpu, in
 * backward_cpu.c), registered from the start. */
extern const mp_exec_ops mp_exec_cpu;

/* One forward call on one device: the table, the device's state for this call
 * (handed to every op), and what the hook points need to know. */
struct mp_exec {
    const mp_exec_ops *ops;
    void *dev;
    mp_fwd_ctx f; /* config, hooks, B, T, pos0, mask, position ids */
};

/* The call's buffers, set up by the device (their aliasing is its choice). */
typedef struct {
    const int *tokens;     /* [B*T] host token ids */
    const mp_acts *A;      /* training: the store every layer writes (scratch unused), or NULL */
    mp_layer_acts scratch; /* inference: every layer's buffers (resid_in may equal resid_mid and resid_out: the
                            * residual updated in place; ln1 = ln2, post = pre likewise); mean/rstd NULL */
    float *out;            /* [N, D] the attention / MLP output */
    float *buf;            /* [N, D] hook_pos_embed's rows and hook_mlp_in's copy (may equal out) */
    int cache;             /* a KV cache takes this call's keys and values (ops->kv_append) */
    int qb;                /* query rows per attention block */
    mp_logits_mode logits_mode; /* what ops->head writes (MP_LOGITS_NONE: nothing) */
    float *logits;         /* where */
} mp_exec_bufs;

/* The forward pass: embedding (+ learned positions), every layer, the final
 * norm, the head; every hook point fired in order. The KV cache's length and
 * whatever the device must finish (waits, pending readers) stay the caller's. */
mp_status mp_block_forward(const mp_exec *e, const mp_exec_bufs *b);

/* For ops: fire the whole [B,T,...] point (id, l) on data / a scores or
 * pattern block [B,H,rows,S] of query rows q0.. (no-op when inactive). */
mp_status mp_exec_fire(const mp_exec *e, mp_hook_id id, int l, float *data);
mp_status mp_exec_fire_block(const mp_exec *e, mp_hook_id id, int l, int q0, int rows, float *data);

/* For ops: the float32 weight and bias (may be NULL) of w in layer l among
 * params p (host or device pointers alike), and its input and output widths. */
void mp_exec_weight_of(const mp_config *c, const mp_params *p, mp_exec_weight w, int l, const float **W,
                       const float **bias, int *in, int *out);
/* For ops: the q/k norm of id (MP_HOOK_Q_NORM / MP_HOOK_K_NORM) in layer l
 * among params p: its weight, and the rows and width it normalizes x [N,
 * nh*Dh] as (head: N*nh rows of Dh sharing the weight; full: N rows of nh*Dh). */
void mp_exec_qk_norm_of(const mp_config *c, const mp_params *p, mp_hook_id id, int l, int N, const float **w,
                        int *rows, int *width);
/* For ops: the weight and bias (may be NULL) of the norm whose scale point is
 * sid (MP_HOOK_LN1_SCALE / LN2_SCALE of layer l, MP_HOOK_LNF_SCALE). */
void mp_exec_norm_of(const mp_config *c, const mp_params *p, mp_hook_id sid, int l, const float **w,
                     const float **bias);

#endif
