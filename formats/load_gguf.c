/* load_gguf.c — models and tokenizers from GGUF files (llama.cpp): the
 * architectures llama, qwen2, qwen3 and gpt2, hyper-parameters from <arch>.*
 * metadata, llama.cpp tensor names mapped onto mp_params (ggml dims {in, out}
 * = PyTorch [out, in]), every tensor's shape checked against the config. A file
 * with Q8_0 / Q4_0 / Q4_K / Q6_K / F16 / BF16 weights keeps its linear weights in the
 * file's encoding (views of the mapping, which the model keeps open: m->q,
 * computed with qdot.h), decoding to float32 only tensors of other types;
 * any other file is dequantised to float32 (gguf.h / quant.h).
 *
 * RoPE layouts: llama.cpp's convert_hf_to_gguf permutes the q/k rows of llama
 * models into adjacent pairs (llama.cpp's "normal" RoPE, LLAMA_ROPE_TYPE_NORM,
 * which rotates x[2i], x[2i+1]) — mechprobe's convention, loaded as is. qwen2
 * keeps the Hugging Face half-split rows (LLAMA_ROPE_TYPE_NEOX: x[i] with
 * x[i + n_rot/2]); they are permuted here (mp_rope_permute_rows), biases too.
 * qwen3 is qwen2's layout with a per-head RMSNorm on q and k (attn_q_norm /
 * attn_k_norm [head size], qk_norm head) and no q/k/v biases; its norm
 * weights are permuted within the head as the rows they scale.
 * gpt2: fused attn_qkv split into wq/wk/wv, learned positions, biases,
 * LayerNorm, GELU with the tanh approximation (ggml_gelu).
 * gptneox (Pythia) and phi3: NeoX RoPE on the first rope.dimension_count
 * channels of a head (permuted within them); gptneox's attn_qkv holds q | k | v
 * (llama.cpp's converter reorders NeoX's per-head rows), with biases, LayerNorm,
 * exact GELU (Pythia's; llama.cpp computes ggml_gelu's tanh form) and
 * gptneox.use_parallel_residual; phi3's attn_qkv holds q | k | v and its ffn_up
 * gate | up. Both are read as float32 (quantized tensors dequantised).
 * gemma / gemma2: NeoX (half-split) q/k rows as qwen2; the norm weights are
 * stored with Gemma's +1 already added by convert_hf_to_gguf (mechprobe's
 * norm_offset layout: loaded as is); GeGLU, the sqrt(d_model) embedding
 * scale; gemma2's post_attention_norm / post_ffw_norm, soft caps
 * (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping) and query
 * scale: llama.cpp's rule (head size; d_model / head_count for the 27B shape,
 * 46 blocks) unless mechprobe's own key gemma2.attention.query_pre_attn_scalar
 * says otherwise (written by export_gguf.c; llama.cpp ignores it); gemma2's
 * sliding window on every other layer (layers 0, 2, ...: llama.cpp's
 * set_swa_pattern(2) for LLM_ARCH_GEMMA2, which writes no pattern key).
 * olmo2: NeoX (half-split) rows as qwen2, no attn_norm / ffn_norm (no
 * pre-norms), post_attention_norm / post_ffw_norm, attn_q_norm [H*Dh] and
 * attn_k_norm [K*Dh] over the whole projections (qk_norm full; permuted
 * within each head); llama.cpp's olmo2 with a sliding window (OLMo 3) is
 * refused.
 * gemma3: gemma2's layout (its caps only where the file has them) plus
 * attn_q_norm / attn_k_norm [head size] (+1 already added by the converter,
 * as every "norm.weight"), qk_norm head; llama.cpp's hard-coded rules, each
 * unless a key says otherwise: every 6th layer global (set_swa_pattern(6);
 * gemma3.attention.sliding_window_pattern), the sliding layers' RoPE base
 * 10000 unscaled (gemma3.rope.freq_base_swa, llama.cpp's
 * LLM_KV_ROPE_FREQ_BASE_SWA name: rope_local_theta), the query scale
 * (head size; d_model / head_count for the 27B shape, 62 blocks;
 * mechprobe's gemma3.attention.query_pre_attn_scalar); the global layers'
 * rope.freq_base and linear rope.scaling. */
#include "formats.h"
#include "gguf.h"
#include "ops.h"
#include "qdot.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const mp_gguf *g;
    const char *path;
    const char *arch;
    mp_qparams *q;   /* quantized mode: linear weights stay in the file's encoding */
} gctx;

/* mp_qparams.file_close: the GGUF file a quantized model maps */
static void close_gguf(void *file) { mp_gguf_close(file); }

static mp_status meta_int(const gctx *x, const char *key, int required, int64_t def, int64_t lo, int64_t hi,
                          int *out) {
    char k[128];
    int64_t v;
    snprintf(k, sizeof k, "%s.%s", x->arch, key);
    mp_gguf_lookup r = mp_gguf_get_int(x->g, k, &v);
    if (r == MP_GGUF_WRONG_TYPE) return mp_error(MP_ERR_FORMAT, "%s: metadata %s is not an integer", x->path, k);
    if (r == MP_GGUF_MISSING) {
        if (required) return mp_error(MP_ERR_FORMAT, "%s: metadata %s is missing", x->path, k);
        v = def;
    }
    if (v < lo || v > hi)
        return mp_error(MP_ERR_FORMAT, "%s: metadata %s = %lld is out of range [%lld, %lld]", x->path, k,
                        (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return MP_OK;
}

static mp_status meta_float(const gctx *x, const char *key, double def, float *out) {
    char k[128];
    double v;
    snprintf(k, sizeof k, "%s.%s", x->arch, key);
    mp_gguf_lookup r = mp_gguf_get_float(x->g, k, &v);
    if (r == MP_GGUF_WRONG_TYPE) return mp_error(MP_ERR_FORMAT, "%s: metadata %s is not a float", x->path, k);
    *out = (float)(r == MP_GGUF_MISSING ? def : v);
    return MP_OK;
}

/* The tensor `name` with ggml dims {d0} (d1 == 0) or {d0, d1}; NULL with *st
 * MP_OK when absent and optional. */
static const mp_gguf_tensor *find_t(const gctx *x, const char *name, uint64_t d0, uint64_t d1, int required,
                                    mp_status *st) {
    *st = MP_OK;
    const mp_gguf_tensor *t = mp_gguf_find_tensor(x->g, name);
    if (!t) {
        if (required) *st = mp_error(MP_ERR_FORMAT, "%s: tensor %s is missing", x->path, name);
        return NULL;
    }
    int ok = t->dims[0] == d0 && t->dims[1] == (d1 ? d1 : 1) && t->dims[2] == 1 && t->dims[3] == 1;
    if (!ok) {
        char want[64];
        if (d1) snprintf(want, sizeof want, "{%llu, %llu}", (unsigned long long)d0, (unsigned long long)d1);
        else snprintf(want, sizeof want, "{%llu}", (unsigned long long)d0);
        *st = mp_error(MP_ERR_FORMAT, "%s: tensor %s has dims {%llu, %llu, %llu, %llu}; the config needs %s",
                       x->path, name, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                       (unsigned long long)t->dims[2], (unsigned long long)t->dims[3], want);
        return NULL;
    }
    return t;
}

/* Reads tensor (fmt, layer) into dst; *found (may be NULL: required) tells
 * whether it existed. */
static mp_status read_t(const gctx *x, float *dst, uint64_t d0, uint64_t d1, int *found, const char *fmt, int l) {
    char name[160];
    mp_status st;
    snprintf(name, sizeof name, fmt, l);
    const mp_gguf_tensor *t = find_t(x, name, d0, d1, found == NULL, &st);
    if (found) *found = t != NULL;
    if (!t) return st;
    if ((st = mp_gguf_read_f32(x->g, t, dst, t->n_elements))) return mp_error_prefix(st, "%s", x->path);
    return MP_OK;
}

/* A linear weight {d0 = in, d1 = out}: float32 mode reads it into dst;
 * quantized mode points *qm at the file's rows when their type has a
 * quantized kernel (or is F32, when aligned for float), else decodes it to
 * owned float32 rows; with permute_heads > 0 (qwen2 q/k) the rows are copied
 * and permuted. */
static mp_status read_w(const gctx *x, float *dst, mp_qmat *qm, uint64_t d0, uint64_t d1, int permute_heads,
                        const char *fmt, int l) {
    if (!x->q) return read_t(x, dst, d0, d1, NULL, fmt, l);
    char name[160];
    mp_status st;
    snprintf(name, sizeof name, fmt, l);
    const mp_gguf_tensor *t = find_t(x, name, d0, d1, 1, &st);
    if (!t) return st;
    if (mp_qdot_supported(t->type) || t->type == MP_GGML_F32) {
        qm->type = t->type;
        qm->row_bytes = (size_t)(t->n_bytes / d1);
        qm->data = t->data;
        /* float rows are read as float*: a file with general.alignment 1 or 2
         * may place them at any byte; such a tensor is copied (the quantized
         * kernels read through byte pointers and need no alignment) */
        const int misaligned = t->type == MP_GGML_F32 && (uintptr_t)t->data % _Alignof(float) != 0;
        if (permute_heads > 0 || misaligned) {
            unsigned char *own = mp_qparams_alloc(x->q, (size_t)t->n_bytes);
            if (!own) return MP_ERR_NOMEM;
            memcpy(own, t->data, (size_t)t->n_bytes);
            qm->data = own;
        }
    } else {
        float *f = mp_qparams_alloc(x->q, (size_t)(d0 * d1) * sizeof(float));
        if (!f) return MP_ERR_NOMEM;
        if ((st = mp_gguf_read_f32(x->g, t, f, t->n_elements))) return mp_error_prefix(st, "%s", x->path);
        qm->type = MP_GGML_F32;
        qm->row_bytes = (size_t)d0 * sizeof(float);
        qm->data = (const unsigned char *)f;
    }
    x->q->bytes += qm->row_bytes * (size_t)d1;
    if (permute_heads > 0) {
        const int Dh = (int)(d1 / (uint64_t)permute_heads);
        return mp_qmat_permute_heads((unsigned char *)qm->data, permute_heads, Dh, qm->row_bytes);
    }
    return MP_OK;
}

/* Half-split rows of the first rot rows of each head -> adjacent pairs (gptneox, phi3). */
static void permute_rotary(float *w, float *tmp, int n_heads, int Dh, int rot, size_t cols) {
    if (rot < 2) return;
    for (int h = 0; h < n_heads; h++) mp_rope_permute_rows(w + (size_t)h * Dh * cols, tmp, 1, rot, cols, 1);
}

static int has_t(const gctx *x, const char *fmt, int l) {
    char name[160];
    snprintf(name, sizeof name, fmt, l);
    return mp_gguf_find_tensor(x->g, name) != NULL;
}

/* Sliding-window attention (config.h mp_config_window), llama.cpp's keys:
 * <arch>.attention.sliding_window (LLM_KV_ATTENTION_SLIDING_WINDOW, the
 * window W; absent or 0: none) and <arch>.attention.sliding_window_pattern
 * (LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN), either a period P (llama.cpp's
 * set_swa_pattern: layer il windowed when il % P < P - 1, that is
 * (il + 1) % P != 0, mechprobe's sliding_window_pattern) or one bool per
 * layer (true: windowed), read when it is such a period's pattern. */
static mp_status read_window(const gctx *x, mp_config *c) {
    mp_status st;
    if ((st = meta_int(x, "attention.sliding_window", 0, 0, 0, INT32_MAX, &c->sliding_window))) return st;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", x->arch);
    const mp_gguf_value *v = mp_gguf_get(x->g, k);
    if (!v || c->sliding_window == 0) return MP_OK;
    if (v->type != MP_GGUF_ARRAY) {
        int p;
        if ((st = meta_int(x, "attention.sliding_window_pattern", 0, 0, 0, INT32_MAX, &p))) return st;
        c->sliding_window_pattern = p; /* 1: every layer global, in both rules */
        return MP_OK;
    }
    const mp_gguf_vtype et = v->v.arr.elem_type;
    if ((et != MP_GGUF_BOOL && et != MP_GGUF_UINT8 && et != MP_GGUF_INT8) || v->v.arr.n != (uint64_t)c->n_layer)
        return mp_error(MP_ERR_FORMAT, "%s: metadata %s must be a period or %d bools (one per layer)", x->path, k,
                        c->n_layer);
    const uint8_t *b = v->v.arr.data;
    int P = 0;
    while (P < c->n_layer && b[P]) P++;
    if (P == c->n_layer) return MP_OK; /* every layer windowed */
    P++;                               /* the first global layer is P - 1 */
    for (int l = 0; l < c->n_layer; l++)
        if ((b[l] != 0) != ((l + 1) % P != 0))
            return mp_error(MP_ERR_FORMAT, "%s: metadata %s: the windowed layers are not those of a period (every "
                            "%d-th layer global, as sliding_window_pattern holds them); layer %d differs", x->path, k,
                            P, l);
    c->sliding_window_pattern = P; /* 1: no layer windowed */
    return MP_OK;
}

/* qwen2 and qwen3: Hugging Face's half-split q/k rows (NeoX RoPE) over every channel */
static int is_qwen(const gctx *x) { return strcmp(x->arch, "qwen2") == 0 || strcmp(x->arch, "qwen3") == 0; }

/* rope.dimension_count as mechprobe's positions: rope (all channels), half_rope (the first rot), none (0). */
static mp_status rotary_dims(const gctx *x, mp_config *c) {
    int rot = 0;
    mp_status st = meta_int(x, "rope.dimension_count", 0, c->d_head, 0, c->d_head, &rot);
    if (st) return st;
    if (rot % 2)
        return mp_error(MP_ERR_FORMAT, "%s: %s.rope.dimension_count %d is odd", x->path, x->arch, rot);
    c->pos = rot == 0 ? MP_POS_NONE : rot == c->d_head ? MP_POS_ROPE : MP_POS_HALF_ROPE;
    c->rope_dims = c->pos == MP_POS_HALF_ROPE ? rot : 0;
    return MP_OK;
}

/* gemma / gemma2 (see the top): GeGLU, (1 + w) norms, the scaled embedding; gemma2's post-norms, caps, query
 * scale (its sliding window: read_window, and gemma2_window). */
static mp_status gemma_config(const gctx *x, mp_config *c, int gen) {
    mp_status st;
    c->mlp = MP_MLP_SWIGLU;
    c->gelu_tanh = 1;
    c->norm_offset = 1;
    c->embed_scale = 1;
    if (c->qkv_bias) return mp_error(MP_ERR_FORMAT, "%s: %s with attention biases is not supported", x->path, x->arch);
    if (gen == 1) return MP_OK;
    c->post_norms = 1;
    float qpas = 0.0f;
    if ((st = meta_float(x, "attn_logit_softcapping", gen == 2 ? 50.0 : 0.0, &c->attn_softcap)) ||
        (st = meta_float(x, "final_logit_softcapping", gen == 2 ? 30.0 : 0.0, &c->final_softcap)) ||
        (st = meta_float(x, "attention.query_pre_attn_scalar", 0.0, &qpas)))
        return st;
    /* llama.cpp: Gemma 2 27B (46 blocks), Gemma 3 27B (62 blocks) scale by d_model / head_count */
    if (qpas == 0.0f && c->n_layer == (gen == 2 ? 46 : 62)) qpas = (float)(c->d_model / c->n_head);
    if (qpas < 0.0f || !isfinite(qpas))
        return mp_error(MP_ERR_FORMAT, "%s: metadata %s.attention.query_pre_attn_scalar must be positive", x->path,
                        x->arch);
    c->query_pre_attn_scalar = qpas == (float)c->d_head ? 0.0f : qpas;
    return MP_OK;
}

static mp_status read_config(const gctx *x, mp_config *c) {
    mp_status st;
    const int is_gpt2 = strcmp(x->arch, "gpt2") == 0, is_qwen2 = is_qwen(x);
    const int is_neox = strcmp(x->arch, "gptneox") == 0, is_phi3 = strcmp(x->arch, "phi3") == 0;
    const int is_gemma = strcmp(x->arch, "gemma") == 0, is_gemma2 = strcmp(x->arch, "gemma2") == 0;
    const int is_gemma3 = strcmp(x->arch, "gemma3") == 0;
    const int BIG = 1 << 24;
    *c = mp_config_default();
    if ((st = meta_int(x, "embedding_length", 1, 0, 1, BIG, &c->d_model)) ||
        (st = meta_int(x, "block_count", 1, 0, 1, 4096, &c->n_layer)) ||
        (st = meta_int(x, "attention.head_count", 1, 0, 1, 65536, &c->n_head)) ||
        (st = meta_int(x, "attention.head_count_kv", 0, c->n_head, 1, 65536, &c->n_kv_head)) ||
        (st = meta_int(x, "feed_forward_length", 1, 0, 1, BIG, &c->d_mlp)) ||
        (st = meta_int(x, "context_length", 1, 0, 1, BIG, &c->ctx)))
        return st;
    char kl[128];
    snprintf(kl, sizeof kl, "%s.attention.key_length", x->arch);
    if (c->d_model % c->n_head && !mp_gguf_get(x->g, kl))
        return mp_error(MP_ERR_FORMAT, "%s: embedding_length %d is not divisible by head_count %d", x->path,
                        c->d_model, c->n_head);
    if ((st = meta_int(x, "attention.key_length", 0, c->d_model / c->n_head, 1, BIG, &c->d_head))) return st;
    int vlen;
    if ((st = meta_int(x, "attention.value_length", 0, c->d_head, 1, BIG, &vlen))) return st;
    if (vlen != c->d_head)
        return mp_error(MP_ERR_FORMAT, "%s: key_length %d != value_length %d is not supported", x->path, c->d_head,
                        vlen);
    const mp_gguf_tensor *emb = mp_gguf_find_tensor(x->g, "token_embd.weight");
    if (!emb) return mp_error(MP_ERR_FORMAT, "%s: tensor token_embd.weight is missing", x->path);
    if (emb->n_dims != 2 || emb->dims[0] != (uint64_t)c->d_model || emb->dims[1] == 0 || emb->dims[1] > (uint64_t)BIG)
        return mp_error(MP_ERR_FORMAT, "%s: token_embd.weight has dims {%llu, %llu}; needs {%d, vocab}", x->path,
                        (unsigned long long)emb->dims[0], (unsigned long long)emb->dims[1], c->d_model);
    c->vocab = (int)emb->dims[1];
    {   /* a declared vocabulary size must agree with the embedding's rows */
        char kv[128];
        int64_t vs;
        snprintf(kv, sizeof kv, "%s.vocab_size", x->arch);
        mp_gguf_lookup r = mp_gguf_get_int(x->g, kv, &vs);
        if (r == MP_GGUF_WRONG_TYPE) return mp_error(MP_ERR_FORMAT, "%s: metadata %s is not an integer", x->path, kv);
        if (r == MP_GGUF_FOUND && vs != (int64_t)c->vocab)
            return mp_error(MP_ERR_FORMAT, "%s: metadata %s = %lld but token_embd.weight has %d rows (one per token); "
                            "the file is inconsistent", x->path, kv, (long long)vs, c->vocab);
    }
    c->tied = mp_gguf_find_tensor(x->g, "output.weight") == NULL;
    if (is_neox) {
        c->norm = MP_NORM_LAYER;
        c->mlp = MP_MLP_GELU; /* exact, as Pythia was trained (llama.cpp: the tanh form) */
        c->qkv_bias = has_t(x, "blk.%d.attn_qkv.bias", 0);
        c->linear_bias = 1;
        int par;
        char k[128];
        snprintf(k, sizeof k, "%s.use_parallel_residual", x->arch);
        mp_gguf_lookup r = mp_gguf_get_bool(x->g, k, &par);
        if (r != MP_GGUF_FOUND)
            return mp_error(MP_ERR_FORMAT, "%s: metadata %s is %s", x->path, k,
                            r == MP_GGUF_MISSING ? "missing" : "not a boolean");
        c->parallel_attn = par != 0;
        if ((st = meta_float(x, "attention.layer_norm_epsilon", 1e-5, &c->norm_eps)) ||
            (st = meta_float(x, "rope.freq_base", 10000.0, &c->rope_theta)) || (st = rotary_dims(x, c)))
            return st;
        const char *type = NULL;
        snprintf(k, sizeof k, "%s.rope.scaling.type", x->arch);
        mp_gguf_get_str(x->g, k, &type);
        float factor = 0.0f;
        if ((st = meta_float(x, "rope.scaling.factor", 0.0, &factor))) return st;
        if (type && strcmp(type, "none") != 0 && strcmp(type, "linear") != 0)
            return mp_error(MP_ERR_FORMAT, "%s: %s is \"%s\"; not supported (none or linear)", x->path, k, type);
        if (type && strcmp(type, "linear") == 0 && factor > 0.0f && factor != 1.0f) c->rope_scale = factor;
    } else if (is_gpt2) {
        c->norm = MP_NORM_LAYER;
        c->mlp = MP_MLP_GELU;
        c->gelu_tanh = 1;
        c->pos = MP_POS_LEARNED;
        c->qkv_bias = c->linear_bias = 1;
        if ((st = meta_float(x, "attention.layer_norm_epsilon", 1e-5, &c->norm_eps))) return st;
    } else {
        const int is_olmo2 = strcmp(x->arch, "olmo2") == 0;
        if ((st = meta_float(x, "attention.layer_norm_rms_epsilon", is_qwen2 || is_gemma || is_gemma2 || is_gemma3 ? 1e-6 : 1e-5,
                             &c->norm_eps)) ||
            (st = meta_float(x, "rope.freq_base", 10000.0, &c->rope_theta)))
            return st;
        if (is_phi3) { /* partial rotation (its sliding window: read_window below), no LongRoPE */
            if ((st = rotary_dims(x, c))) return st;
            if (mp_gguf_find_tensor(x->g, "rope_factors_long.weight") || mp_gguf_find_tensor(x->g, "rope_factors_short.weight"))
                return mp_error(MP_ERR_FORMAT, "%s: tensor rope_factors_long/short.weight: Phi-3's LongRoPE scaling is "
                                "not supported", x->path);
            if (has_t(x, "blk.%d.attn_qkv.bias", 0) || has_t(x, "blk.%d.attn_output.bias", 0) ||
                has_t(x, "blk.%d.ffn_up.bias", 0))
                return mp_error(MP_ERR_FORMAT, "%s: phi3 with linear biases is not supported", x->path);
        }
        int rot = c->d_head;
        if (!is_phi3 && (st = meta_int(x, "rope.dimension_count", 0, c->d_head, 0, BIG, &rot))) return st;
        if (rot != c->d_head)
            return mp_error(MP_ERR_FORMAT, "%s: partial RoPE (rope.dimension_count %d < head size %d) is not "
                            "supported", x->path, rot, c->d_head);
        c->qkv_bias = has_t(x, "blk.%d.attn_q.bias", 0);
        if (strcmp(x->arch, "qwen3") == 0 || is_gemma3)
            c->qk_norm = MP_QK_NORM_HEAD; /* attn_q_norm / attn_k_norm [head size] */
        else if (is_olmo2) { /* post-norms only; attn_q_norm / attn_k_norm over the whole projections */
            if (c->qkv_bias) return mp_error(MP_ERR_FORMAT, "%s: olmo2 with attention biases is not supported", x->path);
            c->qk_norm = MP_QK_NORM_FULL;
            c->no_pre_norms = c->post_norms = 1;
        } else if (has_t(x, "blk.%d.attn_q_norm.weight", 0))
            return mp_error(MP_ERR_FORMAT, "%s: %s with attn_q_norm (a q/k norm) is not supported", x->path, x->arch);
        if ((is_gemma || is_gemma2 || is_gemma3) && (st = gemma_config(x, c, is_gemma3 ? 3 : is_gemma2 ? 2 : 1)))
            return st;
        if (has_t(x, "blk.%d.attn_output.bias", 0) || has_t(x, "blk.%d.ffn_up.bias", 0))
            return mp_error(MP_ERR_FORMAT, "%s: %s with attention-output or MLP biases is not supported", x->path,
                            x->arch);
        /* rope scaling */
        char k[128];
        const char *type = NULL;
        snprintf(k, sizeof k, "%s.rope.scaling.type", x->arch);
        mp_gguf_get_str(x->g, k, &type);
        float factor = 0.0f;
        if ((st = meta_float(x, "rope.scaling.factor", 0.0, &factor))) return st;
        if (factor == 0.0f && (st = meta_float(x, "rope.scale_linear", 0.0, &factor))) return st;
        if (type && strcmp(type, "none") != 0 && strcmp(type, "linear") != 0)
            return mp_error(MP_ERR_FORMAT, "%s: rope.scaling.type \"%s\" is not supported (none or linear)",
                            x->path, type);
        if ((!type || strcmp(type, "linear") == 0) && factor > 0.0f && factor != 1.0f) c->rope_scale = factor;
        const mp_gguf_tensor *rf = mp_gguf_find_tensor(x->g, "rope_freqs.weight");
        if (rf) {
            if (rf->n_elements != (uint64_t)(c->d_head / 2) || c->d_head / 2 > MP_ROPE_FREQS_MAX)
                return mp_error(MP_ERR_FORMAT, "%s: rope_freqs.weight has %llu values; needs head size / 2 = %d",
                                x->path, (unsigned long long)rf->n_elements, c->d_head / 2);
            if ((st = mp_gguf_read_f32(x->g, rf, c->rope_freqs, rf->n_elements))) return st;
            c->n_rope_freqs = c->d_head / 2;
        }
    }
    if ((st = read_window(x, c))) return st;
    if (strcmp(x->arch, "olmo2") == 0 && c->sliding_window > 0) /* llama.cpp runs OLMo 3 as olmo2 with one */
        return mp_error(MP_ERR_FORMAT, "%s: olmo2 with olmo2.attention.sliding_window (OLMo 3's local attention) is "
                        "not supported", x->path);
    if (strcmp(x->arch, "gemma2") == 0 && c->sliding_window > 0 && c->sliding_window_pattern == 0) {
        char k[64];
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", x->arch);
        if (!mp_gguf_get(x->g, k)) c->sliding_window_pattern = 2; /* Gemma 2 alternates: every 2nd layer global */
    }
    if (strcmp(x->arch, "gemma3") == 0) { /* llama.cpp's set_swa_pattern(6), base 10000 unless the keys say */
        char k[64];
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", x->arch);
        if (c->sliding_window > 0 && !mp_gguf_get(x->g, k)) c->sliding_window_pattern = 6;
        if (c->sliding_window_pattern == 1) c->sliding_window = c->sliding_window_pattern = 0; /* none windowed */
        if (c->sliding_window_pattern > c->n_layer) c->sliding_window_pattern = 0;          /* all windowed */
        if ((st = meta_float(x, "rope.freq_base_swa", 10000.0, &c->rope_local_theta))) return st;
        if (!(c->rope_local_theta > 0.0f) || !isfinite(c->rope_local_theta))
            return mp_error(MP_ERR_FORMAT, "%s: metadata gemma3.rope.freq_base_swa must be positive", x->path);
        if (c->sliding_window == 0) c->rope_local_theta = 0.0f; /* no sliding layer */
    }
    return mp_config_validate(c, x->path);
}

static mp_status read_weights(const gctx *x, mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_params *p = &m->p;
    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    const uint64_t HD = (uint64_t)c->n_head * c->d_head, KD = (uint64_t)c->n_kv_head * c->d_head;
    const int is_gpt2 = strcmp(x->arch, "gpt2") == 0;
    /* NeoX (half-split) q/k rows over every channel: qwen2, qwen3, gemma, gemma2 */
    const int is_qwen2 = is_qwen(x) || strcmp(x->arch, "gemma") == 0 || strcmp(x->arch, "gemma2") == 0 ||
                         strcmp(x->arch, "gemma3") == 0 || strcmp(x->arch, "olmo2") == 0;
    const int is_neox = strcmp(x->arch, "gptneox") == 0, is_phi3 = strcmp(x->arch, "phi3") == 0;
    const int rot = c->pos == MP_POS_ROPE ? c->d_head : c->pos == MP_POS_HALF_ROPE ? c->rope_dims : 0;
    mp_qparams *Q = x->q;
    mp_status st;
    float *tmp = NULL;
#define QM(field) (Q ? &Q->field : NULL)
#define LP(field, n) (p->field ? p->field + (size_t)l * (n) : NULL) /* float32 mode: layer l's slot */
    if ((st = read_w(x, p->embed, QM(embed), D, V, 0, "token_embd.weight", 0))) goto cleanup;
    if (!c->tied && (st = read_w(x, p->unembed, QM(unembed), D, V, 0, "output.weight", 0))) goto cleanup;
    if (Q && c->tied) Q->unembed = Q->embed;
    if ((st = read_t(x, p->lnf_w, D, 0, NULL, "output_norm.weight", 0))) goto cleanup;
    if (p->lnf_b && (st = read_t(x, p->lnf_b, D, 0, NULL, "output_norm.bias", 0))) goto cleanup;
    if (p->pos_embed && (st = read_t(x, p->pos_embed, D, (uint64_t)c->ctx, NULL, "position_embd.weight", 0)))
        goto cleanup;
    const int fused = (is_gpt2 || is_neox) && has_t(x, "blk.%d.attn_qkv.weight", 0);
    if (fused) { /* float32 mode: weights then bias; quantized mode: the bias only */
        size_t n3 = Q ? 0 : (size_t)(3 * D * D);
        if (!(tmp = mp_malloc((n3 + 3 * D) * sizeof(float), "the fused QKV weights"))) { st = MP_ERR_NOMEM; goto cleanup; }
    } else if (is_phi3) { /* phi3 (float32 only): attn_qkv or ffn_up, the larger */
        const uint64_t n = (HD + 2 * KD) * D > 2 * M * D ? (HD + 2 * KD) * D : 2 * M * D;
        if (!(tmp = mp_malloc((size_t)n * sizeof(float), "the fused Phi-3 weights"))) { st = MP_ERR_NOMEM; goto cleanup; }
    }
    for (int l = 0; l < c->n_layer; l++) {
        const size_t lD = (size_t)l * D;
        if (p->ln1_w && (st = read_t(x, p->ln1_w + lD, D, 0, NULL, "blk.%d.attn_norm.weight", l))) goto cleanup;
        if (p->ln1_b && (st = read_t(x, p->ln1_b + lD, D, 0, NULL, "blk.%d.attn_norm.bias", l))) goto cleanup;
        float *wq = LP(wq, HD * D), *wk = LP(wk, KD * D), *wv = LP(wv, KD * D);
        if (fused && Q) { /* gpt2, quantized: views of the fused rows q | k | v */
            mp_qmat f = {0};
            if ((st = read_w(x, NULL, &f, D, 3 * D, 0, "blk.%d.attn_qkv.weight", l)) ||
                (st = read_t(x, tmp, 3 * D, 0, NULL, "blk.%d.attn_qkv.bias", l)))
                goto cleanup;
            Q->wq[l] = Q->wk[l] = Q->wv[l] = f;
            Q->wk[l].data = f.data + (size_t)D * f.row_bytes;
            Q->wv[l].data = f.data + 2 * (size_t)D * f.row_bytes;
            memcpy(p->bq + (size_t)l * HD, tmp, D * sizeof(float));
            memcpy(p->bk + (size_t)l * KD, tmp + D, D * sizeof(float));
            memcpy(p->bv + (size_t)l * KD, tmp + 2 * D, D * sizeof(float));
        } else if (fused) { /* gpt2, gptneox: attn_qkv {D, 3D} = rows q | k | v, bias [3D] */
            if ((st = read_t(x, tmp, D, 3 * D, NULL, "blk.%d.attn_qkv.weight", l)) ||
                (c->qkv_bias && (st = read_t(x, tmp + 3 * D * D, 3 * D, 0, NULL, "blk.%d.attn_qkv.bias", l))))
                goto cleanup;
            memcpy(wq, tmp, D * D * sizeof(float));
            memcpy(wk, tmp + D * D, D * D * sizeof(float));
            memcpy(wv, tmp + 2 * D * D, D * D * sizeof(float));
            if (c->qkv_bias) {
                memcpy(p->bq + (size_t)l * HD, tmp + 3 * D * D, D * sizeof(float));
                memcpy(p->bk + (size_t)l * KD, tmp + 3 * D * D + D, D * sizeof(float));
                memcpy(p->bv + (size_t)l * KD, tmp + 3 * D * D + 2 * D, D * sizeof(float));
            }
        } else if (is_phi3) { /* attn_qkv {D, HD + 2 KD} = rows q | k | v */
            if ((st = read_t(x, tmp, D, HD + 2 * KD, NULL, "blk.%d.attn_qkv.weight", l))) goto cleanup;
            memcpy(wq, tmp, HD * D * sizeof(float));
            memcpy(wk, tmp + HD * D, KD * D * sizeof(float));
            memcpy(wv, tmp + (HD + KD) * D, KD * D * sizeof(float));
        } else {
            const int ph = is_qwen2 && Q; /* quantized qwen2: rows permuted as they are copied */
            if ((st = read_w(x, wq, QM(wq[l]), D, HD, ph ? c->n_head : 0, "blk.%d.attn_q.weight", l)) ||
                (st = read_w(x, wk, QM(wk[l]), D, KD, ph ? c->n_kv_head : 0, "blk.%d.attn_k.weight", l)) ||
                (st = read_w(x, wv, QM(wv[l]), D, KD, 0, "blk.%d.attn_v.weight", l)))
                goto cleanup;
            if (c->qkv_bias &&
                ((st = read_t(x, p->bq + (size_t)l * HD, HD, 0, NULL, "blk.%d.attn_q.bias", l)) ||
                 (st = read_t(x, p->bk + (size_t)l * KD, KD, 0, NULL, "blk.%d.attn_k.bias", l)) ||
                 (st = read_t(x, p->bv + (size_t)l * KD, KD, 0, NULL, "blk.%d.attn_v.bias", l))))
                goto cleanup;
        }
        if (c->qk_norm == MP_QK_NORM_HEAD &&
            ((st = read_t(x, p->q_norm + (size_t)l * c->d_head, (uint64_t)c->d_head, 0, NULL, "blk.%d.attn_q_norm.weight",
                          l)) ||
             (st = read_t(x, p->k_norm + (size_t)l * c->d_head, (uint64_t)c->d_head, 0, NULL, "blk.%d.attn_k_norm.weight",
                          l))))
            goto cleanup;
        if (c->qk_norm == MP_QK_NORM_FULL && /* olmo2: [H*Dh] and [K*Dh] */
            ((st = read_t(x, p->q_norm + (size_t)l * HD, HD, 0, NULL, "blk.%d.attn_q_norm.weight", l)) ||
             (st = read_t(x, p->k_norm + (size_t)l * KD, KD, 0, NULL, "blk.%d.attn_k_norm.weight", l))))
            goto cleanup;
        if ((st = read_w(x, LP(wo, D * HD), QM(wo[l]), HD, D, 0, "blk.%d.attn_output.weight", l))) goto cleanup;
        int has_bo = 1; /* gptneox without attention biases: a zero bias */
        if (p->bo && (st = read_t(x, p->bo + lD, D, 0, is_neox ? &has_bo : NULL, "blk.%d.attn_output.bias", l)))
            goto cleanup;
        if (!has_bo) memset(p->bo + lD, 0, D * sizeof(float));
        if (p->ln2_w && (st = read_t(x, p->ln2_w + lD, D, 0, NULL, "blk.%d.ffn_norm.weight", l))) goto cleanup;
        if (p->ln1p_w && ((st = read_t(x, p->ln1p_w + lD, D, 0, NULL, "blk.%d.post_attention_norm.weight", l)) ||
                          (st = read_t(x, p->ln2p_w + lD, D, 0, NULL, "blk.%d.post_ffw_norm.weight", l))))
            goto cleanup;
        if (p->ln2_b && (st = read_t(x, p->ln2_b + lD, D, 0, NULL, "blk.%d.ffn_norm.bias", l))) goto cleanup;
        const size_t lM = (size_t)l * M;
        if (is_phi3) { /* ffn_up {D, 2M} = rows gate | up */
            if ((st = read_t(x, tmp, D, 2 * M, NULL, "blk.%d.ffn_up.weight", l))) goto cleanup;
            memcpy(p->w1 + lM * D, tmp, M * D * sizeof(float));
            memcpy(p->w3 + lM * D, tmp + M * D, M * D * sizeof(float));
        } else if (c->mlp == MP_MLP_SWIGLU) {
            if ((st = read_w(x, LP(w1, M * D), QM(w1[l]), D, M, 0, "blk.%d.ffn_gate.weight", l)) ||
                (st = read_w(x, LP(w3, M * D), QM(w3[l]), D, M, 0, "blk.%d.ffn_up.weight", l)))
                goto cleanup;
        } else {
            if ((st = read_w(x, LP(w1, M * D), QM(w1[l]), D, M, 0, "blk.%d.ffn_up.weight", l))) goto cleanup;
            if (p->b1 && (st = read_t(x, p->b1 + lM, M, 0, NULL, "blk.%d.ffn_up.bias", l))) goto cleanup;
        }
        if ((st = read_w(x, LP(w2, D * M), QM(w2[l]), M, D, 0, "blk.%d.ffn_down.weight", l))) goto cleanup;
        if (p->b2 && (st = read_t(x, p->b2 + lD, D, 0, NULL, "blk.%d.ffn_down.bias", l))) goto cleanup;
        if (is_neox || is_phi3) { /* NeoX half-split rows within the rotated channels -> adjacent pairs */
            float *t2 = mp_malloc((size_t)c->d_head * D * sizeof(float), "a RoPE permutation");
            if (!t2) { st = MP_ERR_NOMEM; goto cleanup; }
            permute_rotary(wq, t2, c->n_head, c->d_head, rot, D);
            permute_rotary(wk, t2, c->n_kv_head, c->d_head, rot, D);
            if (p->bq) {
                permute_rotary(p->bq + (size_t)l * HD, t2, c->n_head, c->d_head, rot, 1);
                permute_rotary(p->bk + (size_t)l * KD, t2, c->n_kv_head, c->d_head, rot, 1);
            }
            free(t2);
        }
        if (is_qwen2) { /* NeoX half-split rows -> adjacent pairs (quantized weights: done by read_w) */
            float *t2 = mp_malloc((size_t)c->d_head * D * sizeof(float), "a RoPE permutation");
            if (!t2) { st = MP_ERR_NOMEM; goto cleanup; }
            if (!Q) {
                mp_rope_permute_rows(wq, t2, c->n_head, c->d_head, D, 1);
                mp_rope_permute_rows(wk, t2, c->n_kv_head, c->d_head, D, 1);
            }
            if (p->bq) {
                mp_rope_permute_rows(p->bq + (size_t)l * HD, t2, c->n_head, c->d_head, 1, 1);
                mp_rope_permute_rows(p->bk + (size_t)l * KD, t2, c->n_kv_head, c->d_head, 1, 1);
            }
            if (p->q_norm && c->qk_norm == MP_QK_NORM_HEAD) { /* one head's channels, as the rows they scale */
                mp_rope_permute_rows(p->q_norm + (size_t)l * c->d_head, t2, 1, c->d_head, 1, 1);
                mp_rope_permute_rows(p->k_norm + (size_t)l * c->d_head, t2, 1, c->d_head, 1, 1);
            } else if (p->q_norm) { /* olmo2: every head's channels */
                mp_rope_permute_rows(p->q_norm + (size_t)l * HD, t2, c->n_head, c->d_head, 1, 1);
                mp_rope_permute_rows(p->k_norm + (size_t)l * KD, t2, c->n_kv_head, c->d_head, 1, 1);
            }
            free(t2);
        }
    }
#undef QM
#undef LP
cleanup:
    free(tmp);
    return st;
}

mp_status mp_model_load_gguf(mp_model **out, const char *path) {
    mp_gguf *g = NULL;
    mp_model *m = NULL;
    mp_config c;
    *out = NULL;
    mp_status st = mp_gguf_open(path, &g);
    if (st) return st;
    gctx x = {g, path, NULL, NULL};
    if (mp_gguf_get_str(g, "general.architecture", &x.arch) != MP_GGUF_FOUND) {
        st = mp_error(MP_ERR_FORMAT, "%s: general.architecture is missing or not a string", path);
        goto cleanup;
    }
    const int f32_only = !strcmp(x.arch, "gptneox") || !strcmp(x.arch, "phi3"); /* fused rows: read as float32 */
    if (strcmp(x.arch, "llama") && strcmp(x.arch, "qwen2") && strcmp(x.arch, "qwen3") && strcmp(x.arch, "gpt2") &&
        strcmp(x.arch, "gemma") && strcmp(x.arch, "gemma2") && strcmp(x.arch, "gemma3") && strcmp(x.arch, "olmo2") &&
        !f32_only) {
        st = mp_error(MP_ERR_FORMAT, "%s: unknown architecture \"%s\" (mechprobe reads llama, qwen2, qwen3, gemma, "
                      "gemma2, gemma3, olmo2, gpt2, gptneox and phi3)", path, x.arch);
        goto cleanup;
    }
    if ((st = read_config(&x, &c))) goto cleanup;
    /* quantized and half (F16, BF16) weights stay as stored when there is a kernel for them */
    int quant = 0, other = 0;
    for (size_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        if (t->n_dims == 2 && mp_qdot_supported(t->type) && !f32_only) quant = 1;
        else if (t->type != MP_GGML_F32) other = 1;
    }
    if (quant) {
        if ((st = mp_model_new_unweighted(&m, &c)) || (st = mp_qparams_new(m))) goto cleanup;
        x.q = m->q;
    } else if ((st = mp_model_new(&m, &c))) {
        goto cleanup;
    }
    if ((st = read_weights(&x, m))) goto cleanup;
    snprintf(m->source, sizeof m->source, "%s", path);
    m->format = strcmp(x.arch, "llama") == 0   ? "gguf-llama"
              : strcmp(x.arch, "qwen2") == 0   ? "gguf-qwen2"
              : strcmp(x.arch, "qwen3") == 0   ? "gguf-qwen3"
              : strcmp(x.arch, "gemma") == 0   ? "gguf-gemma"
              : strcmp(x.arch, "gemma2") == 0  ? "gguf-gemma2"
              : strcmp(x.arch, "gemma3") == 0  ? "gguf-gemma3"
              : strcmp(x.arch, "olmo2") == 0   ? "gguf-olmo2"
              : strcmp(x.arch, "gptneox") == 0 ? "gguf-gptneox"
              : strcmp(x.arch, "phi3") == 0    ? "gguf-phi3"
                                               : "gguf-gpt2";
    if (quant) {
        m->q->file = g; /* the weights point into its mapping: closed with the model */
        m->q->file_close = close_gguf;
        g = NULL;
    } else if (other) { /* report what dequantising cost when the file was not float32 */
        fprintf(stderr, "mechprobe: %s: %.1f MiB of tensor data dequantised to %.1f MiB of float32\n", path,
                (double)mp_gguf_data_bytes(g) / 1048576.0,
                (double)mp_config_n_params(&c) * sizeof(float) / 1048576.0);
    }
    *out = m;
    m = NULL;
cleanup:
    mp_model_free(m);
    mp_gguf_close(g);
    return mp_error_name_path(st, path); /* e.g. out of memory for the parameters */
}

/* ---- tokenizer from tokenizer.ggml.* ---- */

mp_status mp_tok_load_gguf(mp_tok **out, const char *path) { return mp_tok_load_gguf_ex(out, path, NULL); }

mp_status mp_tok_load_gguf_ex(mp_tok **out, const char *path, int *absent) {
    mp_gguf *g = NULL;
    const char **toks = NULL, **merges = NULL;
    *out = NULL;
    if (absent) *absent = 0;
    mp_status st = mp_gguf_open(path, &g);
    if (st) return st;
    mp_tok_params tp = mp_tok_params_default();
    tp.source = path;
    const mp_gguf_string *ts = NULL, *ms = NULL;
    uint64_t nt = 0, nm = 0, n;
    if (mp_gguf_get_str(g, "tokenizer.ggml.model", &tp.model) != MP_GGUF_FOUND) {
        st = mp_error(MP_ERR_FORMAT, "%s: no tokenizer (tokenizer.ggml.model is missing)", path);
        if (absent) *absent = 1;
        goto cleanup;
    }
    if (mp_gguf_get_str_array(g, "tokenizer.ggml.tokens", &ts, &nt) != MP_GGUF_FOUND || nt == 0 || nt > (1u << 24)) {
        st = mp_error(MP_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing, empty or not a string array", path);
        goto cleanup;
    }
    if (!(toks = mp_malloc(nt * sizeof *toks, "token strings"))) { st = MP_ERR_NOMEM; goto cleanup; }
    for (uint64_t i = 0; i < nt; i++) toks[i] = ts[i].str;
    tp.n_tokens = (int)nt;
    tp.tokens = toks;
    if (mp_gguf_get_f32_array(g, "tokenizer.ggml.scores", &tp.scores, &n) == MP_GGUF_FOUND && n != nt) {
        st = mp_error(MP_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens", path,
                      (unsigned long long)n, (unsigned long long)nt);
        goto cleanup;
    }
    if (mp_gguf_get_i32_array(g, "tokenizer.ggml.token_type", &tp.token_type, &n) == MP_GGUF_FOUND && n != nt) {
        st = mp_error(MP_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", path,
                      (unsigned long long)n, (unsigned long long)nt);
        goto cleanup;
    }
    if (mp_gguf_get_str_array(g, "tokenizer.ggml.merges", &ms, &nm) == MP_GGUF_FOUND && nm) {
        if (nm > (1u << 24)) { st = mp_error(MP_ERR_FORMAT, "%s: too many merges", path); goto cleanup; }
        if (!(merges = mp_malloc(nm * sizeof *merges, "merges"))) { st = MP_ERR_NOMEM; goto cleanup; }
        for (uint64_t i = 0; i < nm; i++) merges[i] = ms[i].str;
        tp.merges = merges;
        tp.n_merges = (int)nm;
    }
    mp_gguf_get_str(g, "tokenizer.ggml.pre", &tp.pre);
    int64_t v;
    int b;
    if (mp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v) == MP_GGUF_FOUND) tp.bos = v >= 0 && v < (int64_t)nt ? (int)v : -1;
    if (mp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) == MP_GGUF_FOUND) tp.eos = v >= 0 && v < (int64_t)nt ? (int)v : -1;
    if (mp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == MP_GGUF_FOUND) tp.add_bos = b;
    if (mp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == MP_GGUF_FOUND) tp.add_eos = b;
    if (mp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == MP_GGUF_FOUND) tp.add_space_prefix = b;
    st = mp_tok_new(out, &tp);
cleanup:
    free(toks);
    free(merges);
    mp_gguf_close(g);
    return st;
}
