/* model.h — the transformer: config, parameters (named float buffers with shape
 * comments, llm.c style), per-layer activations, KV cache, the instrumented
 * forward pass and incremental decoding.
 *
 * Architectures: RMSNorm or LayerNorm (weight and bias), RoPE on adjacent
 * channel pairs (2i, 2i+1) (with linear position scaling and per-frequency
 * divisors: llama.cpp's rope_freqs / Llama 3 scaling), learned absolute
 * positions (GPT-2) or no positions, grouped-query causal attention with
 * optional q/k/v biases (Qwen2) and biases on every linear (GPT-2), an
 * optional RMSNorm of q and k before RoPE (qk_norm: Qwen3 per head, OLMo 2
 * over the whole projection), SwiGLU,
 * GELU (exact erf, or the tanh approximation of GPT-2) or no MLP
 * (attention-only), tied or untied classifier; Gemma's quirks (config.h:
 * (1 + w) norms held as the factor, the sqrt(d_model) embedding scale, GeGLU;
 * Gemma 2's post-norms, soft caps and query scale; OLMo 2's block without
 * pre-norms). The same forward serves
 * inference (one layer's buffers, blocked attention) and training (every
 * layer's activations kept in an mp_acts store for the backward pass,
 * runtime/train.h).
 *
 * Loaders (by content: mp_model_load in io/model_io.h): llama2.c
 * (llama2c.c), GGUF llama / qwen2 / qwen3 / gemma / gemma2 / olmo2 / gpt2 / gptneox /
 * phi3 (load_gguf.c), Hugging Face folders llama / mistral / qwen2 / qwen3 / gemma /
 * gemma2 / olmo2 / gpt2 / gpt_neox / phi3 (load_hf.c); writers: llama2.c, GGUF (export_gguf.c),
 * HF safetensors folders (load_hf.c). Half-split (NeoX / HF) q/k rows are
 * permuted to adjacent pairs on load, so the runtime has one RoPE convention
 * and hook_q / hook_k channels are in adjacent-pair order. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

#include "config.h"
#include "device.h"
#include "mp_common.h"
#include "mp_hooks.h"

/* Parameters: pointers into one allocation (or into a memory-mapped file).
 * Linear weights in PyTorch nn.Linear layout [out, in]. */
typedef struct {
    float *embed;    /* [V, D] */
    float *ln1_w;    /* [L, D]  NULL without pre-norms (no_pre_norms, OLMo 2), as ln2_w */
    float *ln1_b;    /* [L, D]  LayerNorm only, else NULL */
    float *wq;       /* [L, H*Dh, D] */
    float *wk;       /* [L, K*Dh, D] */
    float *wv;       /* [L, K*Dh, D] */
    float *wo;       /* [L, D, H*Dh] */
    float *ln2_w;    /* [L, D]  NULL without MLP */
    float *ln2_b;    /* [L, D]  LayerNorm with MLP only */
    float *w1;       /* [L, M, D]  gate (SwiGLU) / up (GELU); NULL without MLP */
    float *w3;       /* [L, M, D]  up (SwiGLU only) */
    float *w2;       /* [L, D, M]  down */
    float *lnf_w;    /* [D] */
    float *lnf_b;    /* [D]  LayerNorm only */
    float *unembed;  /* [V, D]  == embed when tied */
    float *pos_embed;/* [ctx, D] learned positions only, else NULL */
    float *bq;       /* [L, H*Dh] qkv_bias only, else NULL */
    float *bk;       /* [L, K*Dh] */
    float *bv;       /* [L, K*Dh] */
    float *bo;       /* [L, D]    linear_bias only */
    float *b1;       /* [L, M]    linear_bias with MLP */
    float *b3;       /* [L, M]    linear_bias with SwiGLU */
    float *b2;       /* [L, D]    linear_bias with MLP */
    /* attention-variant parameters (absent: NULL; init in mp_model_new, see attn_variants.h) */
    float *ssmax_s;  /* [L, H] ssmax: the scale s per head */
    float *as_delta; /* [L, H] asentmax: delta, beta, gamma per head */
    float *as_beta;  /* [L, H] */
    float *as_gamma; /* [L, H] */
    /* q/k norm weights (qk_norm head: [L, Dh] each, shared by the heads; full:
     * [L, H*Dh] and [L, K*Dh]; none: NULL), in adjacent-pair channel order */
    float *q_norm;
    float *k_norm;
    /* Gemma 2's post-norms (post_norms; RMSNorm weights, held as 1 + w with norm_offset) */
    float *ln1p_w;   /* [L, D] of the attention output */
    float *ln2p_w;   /* [L, D] of the MLP output */
    /* Shaw's relative values (rel_values R > 0, else NULL): row k < R is the vector of distance i - j = k,
     * row R the one of every distance >= R, shared by the heads of a layer (runtime/relv.h) */
    float *rel_v;    /* [L, R+1, Dh] */
} mp_params;

/* The parameter tensors in mp_params order, with their DESIGN.md checkpoint
 * names: per-layer tensors are named with a "%d" for the layer
 * ("blocks.%d.attn.wq") and `shape` is one layer's shape. */
#define MP_PARAM_MAX 32
typedef struct {
    const char *name;  /* printf pattern ("%d" = layer) or plain name */
    float *p;          /* start (all layers) */
    size_t n;          /* floats, all layers */
    int per_layer;     /* 1: n = n_layer * (per-layer numel) */
    int ndim;          /* of one layer: 1 or 2 */
    int64_t shape[2];
    int decay;         /* 2-D weight: AdamW applies weight decay */
} mp_param_desc;

/* Fills out[] with the tensors present in this config (absent ones, e.g. the
 * biases of RMSNorm or a tied unembed, are skipped); returns their count. */
int mp_params_describe(const mp_config *c, const mp_params *p, mp_param_desc out[MP_PARAM_MAX]);
/* Points the fields of *p into `base` (mp_config_n_params(c) floats) in
 * mp_params order, as mp_model_new lays out parameters; the same layout
 * serves gradients and optimizer moments. Absent fields are NULL; a tied
 * unembed aliases embed. */
void mp_params_layout(const mp_config *c, float *base, mp_params *p);

/* One layer's slice of the parameters, or of anything laid out like them
 * (gradients, optimizer moments): the per-layer fields of mp_params at layer l,
 * NULL where the field is absent (or, for a quantized model's linear weights,
 * NULL in mp_params). The forward and the backward read a layer through it. */
typedef struct {
    float *ln1_w, *ln1_b;                 /* [D] */
    float *wq, *wk, *wv, *wo;             /* [H*Dh, D], [K*Dh, D], [K*Dh, D], [D, H*Dh] */
    float *bq, *bk, *bv, *bo;             /* [H*Dh], [K*Dh], [K*Dh], [D] */
    float *ln2_w, *ln2_b;                 /* [D] */
    float *w1, *w3, *w2;                  /* [M, D], [M, D], [D, M] */
    float *b1, *b3, *b2;                  /* [M], [M], [D] */
    float *ssmax_s, *as_delta, *as_beta, *as_gamma; /* [H] */
    float *q_norm, *k_norm;               /* [Dh] (qk_norm head) or [H*Dh], [K*Dh] (full) */
    float *ln1p_w, *ln2p_w;               /* [D] post-norms (post_norms) */
    float *rel_v;                         /* [R+1, Dh] Shaw's relative values (rel_values R > 0) */
} mp_layer_params;
mp_layer_params mp_params_layer(const mp_config *c, const mp_params *p, int l);

/* A weight matrix kept in its file encoding (quantized or half GGUF models,
 * half safetensors): OUT rows of row_bytes, each IN values of ggml type `type`
 * (Q8_0, Q4_0, Q4_K, Q6_K, F16, BF16: computed with runtime/qdot.h; F32: plain
 * floats, for a tensor of another type, decoded at load). */
typedef struct {
    uint32_t type;
    const unsigned char *data;
    size_t row_bytes;
    int bf16_products; /* BF16 weights of a model at precision "bf16" on the CPU: every product with them
                          (the forward's and the per-head hooked paths') runs mp_qdot_matmul_bf16; set by
                          mp_model_to_device (mp_model_set_bf16_products), 0 otherwise */
} mp_qmat;

/* The linear weights of a quantized model, one mp_qmat per layer (files mix
 * types across layers, e.g. Q4_K_M). Their mp_params fields (embed, unembed,
 * wq, wk, wv, wo, w1, w3, w2) are NULL; norms, biases and positions stay
 * float32 in mp_params. */
typedef struct mp_qparams {
    mp_qmat embed, unembed;                  /* [V, D]; unembed = embed when tied */
    mp_qmat *wq, *wk, *wv, *wo, *w1, *w3, *w2; /* [L] each; w1, w2 NULL without MLP, w3 without SwiGLU */
    mp_qmat *mats;                           /* storage of the [L] arrays */
    void *file;                              /* the mp_gguf / mp_safetensors whose mapping most data points into */
    void (*file_close)(void *file);          /* closes file with the model (set by the loader) */
    void *chunks;                            /* tensors decoded or permuted at load (a list) */
    size_t bytes;                            /* bytes of weight data */
} mp_qparams;

typedef struct mp_model {
    mp_config cfg;
    mp_params p;
    float *owned;       /* parameter allocation when not mapped */
    void *map;          /* mmap of the source file (llama2.c) */
    size_t map_len;
    char source[1024];  /* path it came from, or "" */
    const char *format; /* "llama2c-v0", "llama2c-v1", "random", ... */
    char tokenizer[16]; /* vocabulary hint kept in checkpoints: "" (unknown or a
                           tokenizer file) or "bytes" (ids 0..255 = bytes, 256 = BOS) */
    mp_qparams *q;      /* quantized linear weights (GGUF Q8_0/Q4_0/Q4_K/Q6_K), or NULL */
    unsigned long mem_gen; /* +1 each time the parameter memory is replaced (mp_model_dequantize,
                              mp_model_make_owned): pointers into the old memory are stale */
    /* where the forward runs (device.h): CPU, or a backend's copy of the weights
     * (m->dev, through m->dev_ops; installed by mp_model_to_device, backends/cuda).
     * The host parameters above stay the model's authoritative copy. */
    mp_device device;
    mp_precision precision;
    void *dev;
    const mp_dev_ops *dev_ops;
    struct mp_splice *splice; /* SAEs attached at hook points (hooks/sae_splice.h), or NULL */
} mp_model;

/* ---- quantized models (model_quant.c) ----
 * The forward pass computes with the quantized weights (hooks see float32
 * activations as always). Everything that reads weights as float32 decodes
 * them on demand: the writers (checkpoint, llama2.c, GGUF, HF) save a
 * dequantized copy, and training (mp_model_make_owned) dequantizes the model
 * in place first. */
/* 1 when the model keeps quantized weights. */
int mp_model_is_quantized(const mp_model *m);
/* Bytes the parameters take in memory (float32, or the quantized weights' bytes
 * plus the float32 norms, biases and positions). */
size_t mp_model_param_bytes(const mp_model *m);
/* The weight encoding for messages: "F32", "Q8_0", or "Q4_K+Q6_K" (every type used). */
void mp_model_weight_types(const mp_model *m, char *buf, size_t n);
/* Marks every BF16 weight matrix of m for BF16 products (on != 0: precision
 * "bf16" on the CPU) or float32 ones (mp_qmat.bf16_products). */
void mp_model_set_bf16_products(mp_model *m, int on);
/* Replaces the quantized weights by float32 ones (no-op for a float32 model). */
mp_status mp_model_dequantize(mp_model *m);
/* MP_OK when the model can run at precision "bf16" on the CPU: it keeps BF16
 * weights as stored and the CPU has AVX-512 BF16 (runtime/qdot.h,
 * mp_qdot_matmul_bf16: those weights then multiply activations rounded to
 * BF16; everything else stays float32). Else MP_ERR_ARG naming the reason. A
 * dequantized model goes back to fp32. */
mp_status mp_model_cpu_bf16_check(const mp_model *m);
/* A float32 copy of a model (quantized or not): caller frees it. */
mp_status mp_model_dequantized_copy(const mp_model *m, mp_model **out);
/* A model with every parameter but the linear weights (embed, unembed, wq, wk,
 * wv, wo, w1, w3, w2: NULL) allocated and zeroed (attention-variant ones at
 * their initial values), for loaders that fill m->q. */
mp_status mp_model_new_unweighted(mp_model **out, const mp_config *cfg);
/* Gives m (from mp_model_new_unweighted) an empty m->q with its per-layer
 * arrays (w1/w2 for an MLP, w3 for SwiGLU); MP_ERR_NOMEM. */
mp_status mp_qparams_new(mp_model *m);
/* Rows of the row-major encoded matrix w (rows of rb bytes), heads of Dh rows:
 * half-split rows -> adjacent pairs (mp_rope_permute_rows on encoded rows). */
mp_status mp_qmat_permute_heads(unsigned char *w, int n_heads, int Dh, size_t rb);
/* Owned storage of `bytes` for a quantized model's tensors (decoded or
 * permuted at load), freed with q; 64-byte aligned; NULL when out of memory. */
void *mp_qparams_alloc(mp_qparams *q, size_t bytes);
/* Frees q (closes the file it maps); NULL-safe. */
void mp_qparams_free(mp_qparams *q);
/* Token embedding rows of either kind: out[n] = embed[tokens[n]]. */
void mp_model_embed_rows(const mp_model *m, float *out, const int *tokens, int N);

/* A model with normal(0, std) weights and unit norm weights, zero norm biases
 * (seeded), for tests and benchmarks. */
mp_status mp_model_new_random(mp_model **out, const mp_config *cfg, uint64_t seed, float std);
/* The start of training (mp.model.new): weights ~ normal(0, std), the residual
 * output projections (wo, w2) further scaled by 1/sqrt(2 n_layer), norm weights
 * 1, norm biases 0. Seeded (GSL mt19937), so the same seed gives the same model. */
mp_status mp_model_new_init(mp_model **out, const mp_config *cfg, uint64_t seed, float std);
/* Copy-on-train: a model whose parameters are a read-only file mapping gets
 * its own copy (m->owned) and drops the mapping; a quantized model is
 * dequantized to float32; no-op for owned float32 models. */
mp_status mp_model_make_owned(mp_model *m);
/* A model with every parameter zeroed (except the attention-variant ones, at
 * their initial values: mp_attn_params_init): validates cfg, then
 * allocates one float buffer (m->owned) laid out in mp_params order; unembed is
 * a separate block only when !cfg->tied, else it aliases embed. */
mp_status mp_model_new(mp_model **out, const mp_config *cfg);
/* Frees the owned parameters, unmaps a mapped file; NULL-safe. */
void mp_model_free(mp_model *m);

/* KV cache for incremental decoding: post-positional keys and values of every
 * layer for B sequences of up to `cap` positions, and the forward pass's
 * working buffers of its calls (kept between decoding steps, so a step
 * allocates nothing; a call needing more than MP_KV_SCRATCH_KEEP floats, a
 * long prefill, allocates its own). A model on a device keeps the cache's
 * rows in a device copy (dev) and brings the host k/v up to date only when
 * asked: call mp_kvcache_sync before reading (or writing) k/v on the host
 * after a device forward (the CPU forward does). */
#define MP_KV_SCRATCH_KEEP ((size_t)1 << 22)
typedef struct mp_kvcache_s {
    int B, cap, len;   /* len: positions filled */
    float *k;          /* [L, B, K, cap, Dh]: a kv head's positions contiguous (mp_kv_offset) */
    float *v;          /* [L, B, K, cap, Dh] */
    float *scratch;    /* forward-pass buffers reused across calls (owned) */
    size_t scratch_n;  /* floats in scratch */
    void *dev;         /* a backend's device copy of k/v (its rows may be newer than the host's), or NULL */
    void (*dev_free)(void *dev); /* frees dev (mp_kvcache_free calls it) */
    /* copies dev's rows 0..len-1 that the host k/v lack back to them (mp_kvcache_sync calls it), or NULL */
    mp_status (*dev_sync)(struct mp_kvcache_s *c);
} mp_kvcache;

/* The float offset of layer l, sequence b, kv head kh, position pos in a
 * cache of B sequences, K kv heads and cap positions of Dh channels. A step
 * reads each kv head's keys as one run, not as pieces K*Dh apart. */
static inline size_t mp_kv_offset(int B, int K, int cap, int Dh, int l, int b, int kh, int pos) {
    return ((((size_t)l * B + b) * K + kh) * cap + pos) * Dh;
}

mp_status mp_kvcache_init(mp_kvcache *c, const mp_config *cfg, int B, int cap);
void mp_kvcache_free(mp_kvcache *c);
/* The host k/v brought up to date with a device copy's rows 0..len-1 (after
 * forward calls on a device); MP_OK at once when they are current. */
mp_status mp_kvcache_sync(mp_kvcache *c);

/* Options of one forward call. */
typedef enum { MP_LOGITS_NONE = 0, MP_LOGITS_ALL, MP_LOGITS_LAST } mp_logits_mode;

/* Training-mode activation store: every layer's activations for a forward of
 * B x T tokens (N = B*T rows), kept for the backward pass (llm.c style: named
 * pointers into one allocation), plus the backward's scratch buffers. The
 * stored values are those after any hook edits (what the next op consumed). */
typedef struct {
    int B, T;
    float *resid;      /* [L+1, N, D] residual entering block l; [L]: after the last block */
    float *resid_mid;  /* [L, N, D] residual after attention */
    float *ln1;        /* [L, N, D] attention-norm output */
    float *ln1_mean;   /* [L, N] (LayerNorm) */
    float *ln1_rstd;   /* [L, N] */
    float *q;          /* [L, N, H*Dh] after the positional scheme */
    float *k;          /* [L, N, K*Dh] after the positional scheme */
    float *v;          /* [L, N, K*Dh] */
    float *att;        /* [L, B, H, T, T] attention pattern */
    float *z;          /* [L, N, H*Dh] */
    float *ln2;        /* [L, N, D] MLP-norm output */
    float *ln2_mean;   /* [L, N] */
    float *ln2_rstd;   /* [L, N] */
    float *pre;        /* [L, N, M] gate (SwiGLU) / pre-activation (GELU) */
    float *up;         /* [L, N, M] up projection (SwiGLU) */
    float *post;       /* [L, N, M] activation */
    float *lnf;        /* [N, D] final-norm output */
    float *lnf_mean;   /* [N] */
    float *lnf_rstd;   /* [N] */
    float *logits;     /* [logit_rows, V] (the backward turns them into dlogits) */
    /* backward scratch */
    float *dresid;     /* [N, D] */
    float *dxn;        /* [N, D] */
    float *dq;         /* [N, H*Dh] */
    float *dk;         /* [N, K*Dh] */
    float *dv;         /* [N, K*Dh] */
    float *dz;         /* [N, H*Dh] */
    float *datt;       /* [B, H, T, T] */
    float *dpre;       /* [N, M] */
    float *dup;        /* [N, M] */
    float *dpost;      /* [N, M] */
    float *pos_tab;    /* positional tables of the T positions: cos [T, Dh/2], sin [T, Dh/2], q scale [T] */
    float *dfac;       /* [B, H, T] backward scratch: gradient of each query row's attention-variant factor */
    float *lse;        /* [L, B, H, T] each query row's log-sum-exp (a backend's store without att/datt), or NULL */
    /* the q/k norm (qk_norm != none; else NULL): its inputs, the projections
     * (with biases, after any hook_q / hook_k edit), and each normalized
     * group's 1/rms (head: one per head; full: one per row, in [L, N, 1..]) */
    float *q_in;       /* [L, N, H*Dh] */
    float *k_in;       /* [L, N, K*Dh] */
    float *q_rstd;     /* [L, N, H] */
    float *k_rstd;     /* [L, N, K] */
    /* post_norms (Gemma 2), else NULL: the attention / MLP output before its post-norm and the norm's 1/rms */
    float *attn_raw;   /* [L, N, D] */
    float *ln1p_rstd;  /* [L, N] */
    float *mlp_raw;    /* [L, N, D] (with an MLP) */
    float *ln2p_rstd;  /* [L, N] */
    float *dnr;        /* [N, D] backward scratch: the gradient of a post-norm's input */
    /* final_softcap, else NULL: d capped / d raw logits = 1 - (logit / cap)^2 per logit, and the backward's
     * scratch for the raw logits' gradient */
    float *logit_dcap; /* [logit_rows, V] */
    float *dlogits_raw;/* [logit_rows, V] */
    float *mem;
    size_t n_floats;
    int logit_rows;    /* rows `logits` holds: N, or a chunk's (a backend that fuses the classifier with the loss) */
} mp_acts;

/* One layer's slots of the activation store (N = B*T rows; NULL where the
 * store has no such field, e.g. up without SwiGLU): what the training forward
 * writes and the backward reads. The forward in inference mode uses the same
 * struct over its one layer's scratch buffers. */
typedef struct {
    float *resid_in;   /* [N, D] residual entering the block */
    float *resid_mid;  /* [N, D] after attention */
    float *resid_out;  /* [N, D] after the MLP (the next block's resid_in) */
    float *ln1, *ln1_mean, *ln1_rstd;     /* [N, D], [N], [N] */
    float *q, *k, *v, *z;                 /* [N, H*Dh], [N, K*Dh], [N, K*Dh], [N, H*Dh] */
    float *att;                           /* [B, H, T, T] */
    float *ln2, *ln2_mean, *ln2_rstd;     /* [N, D], [N], [N] */
    float *pre, *up, *post;               /* [N, M] */
    float *q_in, *k_in, *q_rstd, *k_rstd; /* the q/k norm's (mp_acts); NULL without one, and in inference */
    float *attn_raw, *ln1p_rstd;          /* [N, D], [N] post_norms: the attention output before ln1_post */
    float *mlp_raw, *ln2p_rstd;           /* [N, D], [N] the MLP output before ln2_post */
} mp_layer_acts;
mp_layer_acts mp_acts_layer(const mp_config *c, const mp_acts *a, int l);

/* Allocates the store for B x T tokens (T may exceed ctx; the [L,B,H,T,T]
 * pattern limits T to a few hundred in practice). */
mp_status mp_acts_init(mp_acts *a, const mp_config *c, int B, int T);
/* The store's layout: *n_floats receives its size; with mem non-NULL (n_floats
 * floats, e.g. device memory of a backend) the fields point into it. logits
 * holds logit_rows rows (<= 0 or > B*T: all B*T). With no_pattern (a backend
 * whose backward recomputes the pattern) att and datt are absent (NULL) and
 * lse is laid out instead; the CPU's store has att, datt and no lse. */
mp_status mp_acts_layout(mp_acts *a, const mp_config *c, int B, int T, int logit_rows, int no_pattern, float *mem,
                         size_t *n_floats);
void mp_acts_free(mp_acts *a);

typedef struct {
    const mp_hooks *hooks;   /* may be NULL */
    mp_kvcache *cache;       /* NULL: positions 0..T-1, no cache */
    mp_logits_mode logits;   /* what to write into `logits` */
    int q_block;             /* query rows per attention block (0: default 64) */
    mp_acts *acts;           /* training mode: keep every activation here (B, T
                              * must match it; no cache); all logits go to
                              * acts->logits and `logits` is ignored */
    const int *attn_mask;    /* [B, T] 1 = real token, 0 = pad, or NULL (no
                              * padding: every token real). See "ragged batches". */
} mp_forward_params;

mp_forward_params mp_forward_params_default(void);

/* Runs tokens [B, T] (row-major, ids in [0, V)) through the model. With a cache,
 * the tokens occupy positions [cache->len, cache->len + T) and the cache grows.
 * logits: [B, T, V] (ALL) or [B, V] (LAST), or NULL with MP_LOGITS_NONE.
 * Fails with MP_ERR_ARG on a bad token id or a full cache, MP_ERR_HOOK when a
 * callback aborts. */
mp_status mp_model_forward(const mp_model *m, const int *tokens, int B, int T,
                           const mp_forward_params *fp, float *logits);

/* Brings the host copy of a model on a device up to date: training steps on
 * the device (mp_train_step) leave the updated weights, and the moments of the
 * optimiser they used, on the device, and this copies them back (into m's
 * parameters and that optimiser's m and v, which must still be alive). MP_OK at
 * once for a model on the CPU or a host already current. Checkpoint and model
 * saves, moves between devices and forward calls that fall back to the CPU
 * call it themselves; call it before reading the weights or the moments
 * yourself (the Lua API does, after m:train and each m:train_step). */
mp_status mp_model_sync(const mp_model *m);

/* Where mp_model_forward runs this call (fp may be NULL): the model's device,
 * or MP_DEVICE_CPU for a model on the CPU and for a call its backend leaves to
 * the CPU (mp_cuda_cpu_reason in backends/cuda/mp_cuda.h). */
mp_device mp_model_forward_device(const mp_model *m, const mp_forward_params *fp);

/* ---- ragged batches (runtime/ragged.c) ----
 * A padded batch runs with mp_forward_params.attn_mask [B, T] (1 real, 0 pad):
 * no query attends to a pad key (its score is -inf, its pattern 0, as the
 * causal mask); a pad query attends to itself only (pattern 1 on its own key),
 * so every value stays finite; each row's positions come from the mask
 * (mp_mask_positions), so a row's real tokens get the outputs of that prompt
 * run alone, whether it is padded on the left or the right. MP_LOGITS_LAST
 * then takes each row's last real token. With a KV cache the mask covers
 * every key, cached and new: [B, cache->len + T] (Hugging Face's convention
 * for generation; the cached columns must be those of the earlier calls),
 * and a new token's position is the count of real keys before it in its row.
 * In training mode (an activation store) the mask is [B, T] as without a
 * cache, and mp_model_backward_acts_masked runs the backward of that batch.
 * Softmax, entmax15 and entmax attention (MP_ERR_ARG otherwise). */
/* MP_ERR_ARG unless mask [B, W] holds only 0/1 and the attention variant can take one. */
mp_status mp_mask_check(const mp_config *c, const int *mask, int B, int W);
/* Position ids [B, T]: cumsum(mask) - 1 along each row at real tokens, 0 at pads. */
void mp_mask_positions(const int *mask, int B, int T, int *pos);
/* The same for the columns pos0..pos0+T-1 of a mask [B, W] (W >= pos0 + T):
 * pos [B, T] counts the real tokens of the row from column 0. */
void mp_mask_positions_at(const int *mask, int B, int W, int pos0, int T, int *pos);
/* Per-token positional tables for positions pos[0..N) in the layout of
 * mp_pos_tables_floats(c, N) (cos [N, Dh/2], sin [N, Dh/2], q_scale [N], then
 * the windowed layers' cos, sin), each row the values mp_pos_tables_all
 * gives that position; *has_scale as its return. Nothing is written for a
 * scheme without rotation. MP_ERR_NOMEM. */
mp_status mp_mask_pos_tables(const mp_config *c, const int *pos, size_t N, float *tab, int *has_scale);
/* Sets to -inf the scores a[i, j] (row stride ld) of query rows q0..q0+rows-1
 * of one sequence (mask_row [T]) on pad keys j < q; a pad query's row keeps
 * only its own key. Keys j >= q are left to the causal mask. */
void mp_mask_scores(const int *mask_row, float *a, int rows, int q0, size_t ld);
/* Zeroes the gradient d [B, H, T, T] of a padded batch's pattern at the
 * entries a query does not see: pad keys, and every key of a pad query
 * (the backward's hook_pattern, as the causal mask's upper triangle). */
void mp_mask_grad_pattern(const int *mask, int B, int H, int T, float *d);
/* The targets a padded batch's loss counts (mp_model_loss_masked's rule):
 * out[n] = targets[n] where position n and the next are real tokens, else
 * -1; mask NULL: a copy. */
void mp_mask_targets(const int *mask, const int *targets, int B, int T, int *out);
/* The index of the last real token of a mask row (T - 1 when there is none). */
int mp_mask_last_real(const int *mask_row, int T);
/* Pads B token rows to one length (HF's padding, m:to_tokens of a list): row b
 * has n[b] ids, the rows concatenated in ids; mp_pad_width is T = max n[b].
 * tokens [B, T] gets each row's ids after its padding (left) or before it
 * (right), the padding being pad; mask [B, T] is 1 on real tokens, 0 on pads. */
int mp_pad_width(const int *n, int B);
void mp_pad_batch(const int *ids, const int *n, int B, int T, int pad, int left, int *tokens, int *mask);
/* mp_model_loss of a padded batch (mask NULL: every token real): a position
 * counts when it and the next position are real tokens (TransformerLens's
 * rule: the target is the next token, so a pad target is not counted) and its
 * target is not -1. */
mp_status mp_model_loss_masked(const mp_model *m, const int *tokens, const int *targets, const int *mask, int B,
                               int T, const mp_hooks *hooks, float *loss);

/* ---- positional scheme (runtime/pos.c: the one place that knows it; names in config.h) ---- */
/* Changes the positional scheme of a model in place, as m:set_pos does:
 * schemes with the same parameters only (not to or from learned); rope_dims
 * (half_rope / rope_id: rotated channels, 0 = default) and pos_temp (rope_id's
 * length temperature, 1 = on); leaving rope / half_rope drops any RoPE
 * scaling, leaving rope its frequency divisors. DroPE is set_pos(none) and a
 * short recalibration. MP_ERR_ARG (the config unchanged) when the result does
 * not validate; the message starts with "set_pos: ". Not while a forward pass
 * or a KV cache of the model is in use. */
mp_status mp_model_set_pos(mp_model *m, mp_pos_kind pos, int rope_dims, int pos_temp);
/* Inference-time RoPE scaling (rope and half_rope models). */
typedef struct {
    mp_rope_scaling type;  /* NONE switches scaling off (the other fields are ignored) */
    float factor;          /* s > 0 (1: no change) */
    int original_ctx;      /* YaRN: the training length (0: ctx) */
    float beta_fast;       /* YaRN ramp ends in rotations per original_ctx (0: 32) */
    float beta_slow;       /* (0: 1) */
} mp_rope_scaling_params;
/* type NONE, factor 1, the rest 0 (defaults). */
mp_rope_scaling_params mp_rope_scaling_params_default(void);
/* Sets (or with NONE clears) the scaling of m in place, as m:set_rope_scaling
 * does: MP_ERR_ARG (the config unchanged) when it does not validate (a scheme
 * without RoPE, factor <= 0, beta_fast <= beta_slow, ...); the message starts
 * with "set_rope_scaling: ". Not while a forward pass of the model runs. */
mp_status mp_model_set_rope_scaling(mp_model *m, const mp_rope_scaling_params *p);
/* 1 when the scheme rotates q and k (every kind but none and learned). */
int mp_pos_rotates(const mp_config *c);
/* The angular frequency (radians per position) of each channel pair i in
 * [0, d_head/2), after any inference-time scaling; 0 for unrotated pairs.
 * Computed in double. Returns the number of rotated pairs (0: no rotation). */
int mp_pos_freqs(const mp_config *c, double *freq);
/* The factor on the logits of the query at 0-based position pos (rope_id's
 * temperature times YaRN's (0.1 ln s + 1)^2; 1 for other schemes). */
double mp_pos_logit_scale(const mp_config *c, int pos);
/* 1 when some query may get a logit factor other than 1 (rope_id with its
 * temperature, YaRN with factor > 1). */
int mp_pos_has_logit_scale(const mp_config *c);
/* Tables for positions pos0..pos0+T-1: cos/sin [T, Dh/2] (identity on
 * unrotated pairs) and q_scale [T] (mp_pos_logit_scale; may be NULL). Returns
 * 1 when q_scale is needed (some factor != 1 is possible for this config),
 * else 0; nothing is written for schemes without rotation and scale. */
int mp_pos_tables(const mp_config *c, float *cos_t, float *sin_t, float *q_scale, int pos0, int T);
/* The windowed layers' own RoPE base (rope_local_theta, Gemma 3): mp_pos_has_local, 1 when the model has a
 * second set of tables (rope_local_theta > 0 on a rotating scheme); mp_pos_local, 1 when layer l reads it (a
 * windowed layer, mp_config_window > 0). The tables of `rows` positions in one buffer of
 * mp_pos_tables_floats(c, rows) floats: cos [rows, Dh/2], sin [rows, Dh/2], q_scale [rows] (mp_pos_tables),
 * then with a second set the windowed layers' cos, sin [rows, Dh/2] (base rope_local_theta, no scaling); without
 * one, exactly mp_pos_tables's layout. mp_pos_tables_all fills it for positions pos0..pos0+T-1 (rows = T) and
 * returns mp_pos_tables's q_scale flag; mp_pos_layer_tables gives layer l's cos and sin in such a buffer (rows:
 * T, or N for a padded batch's per-token tables). */
int mp_pos_has_local(const mp_config *c);
int mp_pos_local(const mp_config *c, int l);
size_t mp_pos_tables_floats(const mp_config *c, size_t rows);
int mp_pos_tables_all(const mp_config *c, float *tab, int pos0, int T);
void mp_pos_layer_tables(const mp_config *c, int l, const float *tab, size_t rows, const float **cos_t,
                         const float **sin_t);
/* Applies the scheme to x [B,T,nh,Dh] in place: the rotation, then (q_scale
 * non-NULL: queries) the per-position logit factor; or (backward != 0) the
 * transpose of both to a gradient. No-op for none / learned. */
void mp_pos_apply(const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale, float *x, int B,
                  int T, int nh, int backward);

/* ---- sampling ---- */
typedef struct {
    float temperature;   /* 0: greedy */
    float top_p;         /* 1: off */
    uint64_t seed;
} mp_sampler_params;

typedef struct mp_sampler mp_sampler;
mp_status mp_sampler_new(mp_sampler **out, const mp_sampler_params *sp, int vocab);
void mp_sampler_free(mp_sampler *s);
/* Picks a token from logits [V] (modified in place: softmax). */
int mp_sampler_sample(mp_sampler *s, float *logits);

/* Generation: prefill `prompt` (n tokens, B = 1), then produce up to max_new
 * tokens, stopping after `stop_token` (-1: never). Hooks fire on every step.
 * out receives prompt + new tokens (capacity n + max_new); *n_out its length.
 * on_token (may be NULL) is called after each new token. */
typedef int (*mp_token_fn)(void *user, int token);
mp_status mp_model_generate(const mp_model *m, const int *prompt, int n, int max_new,
                            const mp_sampler_params *sp, const mp_hooks *hooks,
                            int stop_token, mp_token_fn on_token, void *user,
                            int *out, int *n_out);
/* Batched generation: B prompts of lens[b] tokens (the rows concatenated in
 * prompts) decoded together, left-padded over one KV cache with a mask of
 * the cached keys and per-row positions (ragged.c), so row b gets what
 * mp_model_generate gives its prompt alone with seed seeds[b] (seeds NULL:
 * sp->seed for every row), to float rounding. A row stops after stop_token
 * (its later steps feed a pad and sample nothing) or max_new tokens; hooks
 * fire on every call with the padded batch's shapes (the prefill [B, P, ...],
 * each step [B, 1, ...]).
 * out [B, W] with W = mp_pad_width(lens, B) + max_new: row b holds its prompt
 * and new tokens, n_out[b] of them. B = 1 is mp_model_generate. */
mp_status mp_model_generate_batch(const mp_model *m, const int *prompts, const int *lens, int B, int max_new,
                                  const mp_sampler_params *sp, const uint64_t *seeds, const mp_hooks *hooks,
                                  int stop_token, int *out, int *n_out);

#endif
