/* load_hf.c — Hugging Face model folders: config.json + *.safetensors (F32 /
 * F16 / BF16, sharded through model.safetensors.index.json; safetensors.h)
 * for model_type llama, mistral, qwen2, qwen3, gemma, gemma2, olmo2, gpt2,
 * gpt_neox (Pythia) and phi3, and their tokenizer.json; and the writer of such folders
 * (F32) used by round trips and exports.
 *
 * Hugging Face stores q/k rows half-split (rotate_half: channel i pairs with
 * i + Dh/2); they are permuted to mechprobe's adjacent pairs on load
 * (mp_rope_permute_rows) and back on save, biases too, and Qwen3's q_norm /
 * k_norm weights [head_dim] within their head (OLMo 2's [H*Dh] / [K*Dh]:
 * within each head). GPT-2 stores Conv1D
 * weights [in, out] and a fused c_attn [D, 3D]: transposed and split on load.
 * GPT-NeoX fuses query_key_value per head ([H, 3, Dh] rows) and rotates only
 * the first rotary_ndims = int(Dh * rotary_pct) channels of a head (half-split
 * within them: permuted within them, pos half_rope with rope_dims); Phi-3 fuses
 * qkv_proj (q | k | v rows) and gate_up_proj (gate | up rows).
 * Gemma's RMSNorm is x * (1 + w): the folder's w is held as 1 + w in memory
 * (norm_offset), 1 added on load and subtracted on save.
 * F16 / BF16 folders of the llama family keep their linear weights as stored
 * (m->q: views of the safetensors mapping, q/k rows permuted in a copy;
 * computed with qdot.h), as GGUF files do; the other families are read as
 * float32. */
#include "json.h"
#include "formats.h"
#include "ops.h"
#include "quant.h"
#include "safetensors.h"

#include <errno.h>
#include <jansson.h> /* config.json is written with it (write_config) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const mp_safetensors *st;
    const char *path;
    const char *prefix;   /* "model." (llama), "" or "transformer." (gpt2) */
    const char *body;     /* NULL, or what a name's leading "model." reads as (a gemma3 folder's
                           * "model.language_model.") */
    mp_qparams *q;        /* non-NULL: F16/BF16 linear weights kept as stored (llama family) */
} hctx;

/* ---- config.json ---- */

static mp_status cfg_int(const mp_json *cfg, const char *path, const char *key, int required, int def, int *out) {
    const mp_json *v = mp_json_get(cfg, key);
    int64_t x;
    if (!v || mp_json_type_of(v) == MP_JSON_NULL) {
        if (required) return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" is missing", path, key);
        *out = def;
        return MP_OK;
    }
    if (mp_json_int64(v, &x) || x < 0 || x > (1 << 24))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" must be an integer in [0, 2^24]", path, key);
    *out = (int)x;
    return MP_OK;
}

static mp_status cfg_num(const mp_json *cfg, const char *path, const char *key, double def, float *out) {
    const mp_json *v = mp_json_get(cfg, key);
    if (!v || mp_json_type_of(v) == MP_JSON_NULL) { *out = (float)def; return MP_OK; }
    if (mp_json_type_of(v) != MP_JSON_NUMBER)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" must be a number", path, key);
    *out = (float)mp_json_number(v);
    return MP_OK;
}

static int cfg_bool(const mp_json *cfg, const char *key, int def) {
    const mp_json *v = mp_json_get(cfg, key);
    return mp_json_type_of(v) == MP_JSON_BOOL ? mp_json_bool(v) : def;
}

/* Sliding-window attention (config.h mp_config_window). mistral:
 * "sliding_window" (null or absent: none). qwen2: a window only with
 * "use_sliding_window": true, on the layers l >= "max_window_layers"
 * (transformers' Qwen2Config layer_types); mechprobe holds the two cases
 * that are one window for every layer or none (max_window_layers 0, or >=
 * num_hidden_layers) and refuses a split. llama has no window. */
static mp_status sliding_window(const mp_json *cfg, const char *path, const char *type, mp_config *c) {
    mp_status st;
    if (strcmp(type, "mistral") == 0) return cfg_int(cfg, path, "sliding_window", 0, 0, &c->sliding_window);
    if ((strcmp(type, "qwen2") != 0 && strcmp(type, "qwen3") != 0) || !cfg_bool(cfg, "use_sliding_window", 0))
        return MP_OK;
    int w = 0, mwl = 0;
    if ((st = cfg_int(cfg, path, "sliding_window", 0, 0, &w)) ||
        (st = cfg_int(cfg, path, "max_window_layers", 0, 0, &mwl)))
        return st;
    if (mwl >= c->n_layer) return MP_OK; /* every layer full */
    if (mwl > 0)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: use_sliding_window with max_window_layers %d of %d layers "
                        "(a window on layers %d.. only) is not supported: mechprobe's sliding_window applies to every "
                        "layer or by sliding_window_pattern", path, mwl, c->n_layer, mwl);
    c->sliding_window = w;
    return MP_OK;
}

/* Llama 3 frequency divisors (transformers' _compute_llama3_parameters). */
static void llama3_freqs(mp_config *c, double factor, double lo, double hi, double orig) {
    int half = c->d_head / 2;
    double lo_wl = orig / lo, hi_wl = orig / hi;
    for (int i = 0; i < half; i++) {
        double freq = 1.0 / pow(c->rope_theta, 2.0 * i / c->d_head), wl = 2.0 * M_PI / freq, div;
        if (wl < hi_wl) div = 1.0;
        else if (wl > lo_wl) div = factor;
        else {
            double smooth = (orig / wl - lo) / (hi - lo);
            div = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        c->rope_freqs[i] = (float)div;
    }
    c->n_rope_freqs = half;
}

/* Newer transformers (v5) hold the RoPE settings in one "rope_parameters" object ({"rope_type": "default",
 * "rope_theta": ...}, plus a scaling kind's fields) instead of "rope_theta" and "rope_scaling"; Gemma 3's, one such
 * object per layer kind, is read by gemma3_rope. The flat object, or NULL. */
static const mp_json *rope_params_flat(const mp_json *cfg) {
    const mp_json *rp = mp_json_get(cfg, "rope_parameters");
    return mp_json_type_of(rp) == MP_JSON_OBJECT && mp_json_get(rp, "rope_theta") ? rp : NULL;
}

/* The default of "rope_theta": rope_parameters' when the config has that form, else def. */
static double theta_default(const mp_json *cfg, double def) {
    const mp_json *rp = rope_params_flat(cfg), *t = rp ? mp_json_get(rp, "rope_theta") : NULL;
    return mp_json_type_of(t) == MP_JSON_NUMBER ? mp_json_number(t) : def;
}

/* "rope_scaling", or in its absence the flat rope_parameters (whose rope_type "default" is no scaling). */
static const mp_json *scaling_obj(const mp_json *cfg) {
    const mp_json *rs = mp_json_get(cfg, "rope_scaling");
    return rs && mp_json_type_of(rs) != MP_JSON_NULL ? rs : rope_params_flat(cfg);
}

static mp_status rope_scaling(const mp_json *cfg, const char *path, mp_config *c) {
    const mp_json *rs = scaling_obj(cfg);
    if (!rs || mp_json_type_of(rs) == MP_JSON_NULL) return MP_OK;
    static const char *const json_names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    if (mp_json_type_of(rs) != MP_JSON_OBJECT)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling must be null or an object such as "
                        "{\"type\": \"linear\", \"factor\": 2.0} (got %s)", path, json_names[mp_json_type_of(rs)]);
    const mp_json *tj = mp_json_get(rs, "rope_type");
    const char *tkey = "rope_type";
    if (!tj) tj = mp_json_get(rs, tkey = "type");
    const char *type = mp_json_string(tj, NULL);
    if (tj && !type)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling.%s must be a string such as \"linear\" (got %s)",
                        path, tkey, json_names[mp_json_type_of(tj)]);
    float factor = 1.0f;
    mp_status st = cfg_num(rs, path, "factor", 1.0, &factor);
    if (st) return st;
    if (!type || strcmp(type, "default") == 0) return MP_OK;
    if (strcmp(type, "linear") == 0) {
        if (!(factor > 0.0f)) return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling factor must be positive", path);
        c->rope_scale = factor;
        return MP_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        float lo = 0.0f, hi = 0.0f, orig = 0.0f;
        if ((st = cfg_num(rs, path, "low_freq_factor", 1.0, &lo)) || (st = cfg_num(rs, path, "high_freq_factor", 4.0, &hi)) ||
            (st = cfg_num(rs, path, "original_max_position_embeddings", 8192, &orig)))
            return st;
        if (!(factor > 0.0f && lo > 0.0f && hi > lo && orig > 0.0f) || c->d_head / 2 > MP_ROPE_FREQS_MAX)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: bad llama3 rope_scaling parameters", path);
        llama3_freqs(c, factor, lo, hi, orig);
        return MP_OK;
    }
    return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling type \"%s\" is not supported (linear, llama3)", path,
                    type);
}

/* A number field under either of two names (newer transformers write both). */
static mp_status cfg_num2(const mp_json *cfg, const char *path, const char *key, const char *alt, double def,
                          double *out) {
    const mp_json *v = mp_json_get(cfg, key);
    if (!v || mp_json_type_of(v) == MP_JSON_NULL) v = mp_json_get(cfg, key = alt);
    if (!v || mp_json_type_of(v) == MP_JSON_NULL) { *out = def; return MP_OK; }
    if (mp_json_type_of(v) != MP_JSON_NUMBER)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" must be a number", path, key);
    *out = mp_json_number(v);
    return MP_OK;
}

/* The rotary channels int(Dh * fraction) of a head (Python's int(): truncation) as mechprobe's positions:
 * none (0), rope (all), half_rope with rope_dims (the first ones; NeoX / Phi-3 rotate them half-split). */
static mp_status partial_rotary(const char *path, const char *key, double frac, mp_config *c) {
    if (!(frac >= 0.0 && frac <= 1.0))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" (%g) must be in [0, 1]", path, key, frac);
    int rot = (int)((double)c->d_head * frac);
    if (rot % 2)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: \"%s\" %g gives %d rotary channels of a %d-channel head; an "
                        "odd count is not supported", path, key, frac, rot, c->d_head);
    c->pos = rot == 0 ? MP_POS_NONE : rot == c->d_head ? MP_POS_ROPE : MP_POS_HALF_ROPE;
    c->rope_dims = c->pos == MP_POS_HALF_ROPE ? rot : 0;
    return MP_OK;
}

/* The channels a model's RoPE rotates per head (0: none); HF keeps them half-split. */
static int rotary_channels(const mp_config *c) {
    return c->pos == MP_POS_ROPE ? c->d_head : c->pos == MP_POS_HALF_ROPE ? c->rope_dims : 0;
}

/* Half-split rows of the first rot rows of each head <-> adjacent pairs (to_adjacent), the rest kept. */
static void permute_rotary(float *w, float *tmp, int n_heads, int Dh, int rot, size_t cols, int to_adjacent) {
    if (rot < 2) return;
    for (int h = 0; h < n_heads; h++) mp_rope_permute_rows(w + (size_t)h * Dh * cols, tmp, 1, rot, cols, to_adjacent);
}

static mp_status read_config_neox(const mp_json *cfg, const char *path, mp_config *c) {
    mp_status st;
    double pct = 0.25, base = 10000.0;
    if ((st = cfg_int(cfg, path, "hidden_size", 1, 0, &c->d_model)) ||
        (st = cfg_int(cfg, path, "num_hidden_layers", 1, 0, &c->n_layer)) ||
        (st = cfg_int(cfg, path, "num_attention_heads", 1, 0, &c->n_head)) ||
        (st = cfg_int(cfg, path, "intermediate_size", 1, 0, &c->d_mlp)) ||
        (st = cfg_int(cfg, path, "vocab_size", 1, 0, &c->vocab)) ||
        (st = cfg_int(cfg, path, "max_position_embeddings", 0, 2048, &c->ctx)) ||
        (st = cfg_num(cfg, path, "layer_norm_eps", 1e-5, &c->norm_eps)) ||
        (st = cfg_num2(cfg, path, "rotary_emb_base", "rope_theta", theta_default(cfg, 10000.0), &base)) ||
        (st = cfg_num2(cfg, path, "rotary_pct", "partial_rotary_factor", 0.25, &pct)))
        return st;
    if (c->n_head <= 0 || c->d_model % c->n_head)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_size %d is not divisible by num_attention_heads %d",
                        path, c->d_model, c->n_head);
    c->n_kv_head = c->n_head;
    c->d_head = c->d_model / c->n_head;
    c->rope_theta = (float)base;
    if ((st = partial_rotary(path, mp_json_get(cfg, "rotary_pct") ? "rotary_pct" : "partial_rotary_factor", pct, c)))
        return st;
    const char *act = mp_json_string(mp_json_get(cfg, "hidden_act"), NULL);
    if (act && strcmp(act, "gelu") && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") &&
        strcmp(act, "gelu_fast"))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_act \"%s\" is not supported (gelu, gelu_new, "
                        "gelu_pytorch_tanh, gelu_fast)", path, act);
    c->norm = MP_NORM_LAYER;
    c->mlp = MP_MLP_GELU;
    c->gelu_tanh = act && strcmp(act, "gelu") != 0; /* gelu (the default): exact, erf */
    c->parallel_attn = cfg_bool(cfg, "use_parallel_residual", 1);
    /* attention_bias false: no q/k/v biases, and dense's bias is zero (the MLP's are always there) */
    c->qkv_bias = cfg_bool(cfg, "attention_bias", 1);
    c->linear_bias = 1;
    c->tied = cfg_bool(cfg, "tie_word_embeddings", 0);
    return rope_scaling(cfg, path, c);
}

static mp_status read_config_phi3(const mp_json *cfg, const char *path, mp_config *c) {
    mp_status st;
    double frac = 1.0;
    if ((st = cfg_int(cfg, path, "hidden_size", 1, 0, &c->d_model)) ||
        (st = cfg_int(cfg, path, "num_hidden_layers", 1, 0, &c->n_layer)) ||
        (st = cfg_int(cfg, path, "num_attention_heads", 1, 0, &c->n_head)) ||
        (st = cfg_int(cfg, path, "intermediate_size", 1, 0, &c->d_mlp)) ||
        (st = cfg_int(cfg, path, "vocab_size", 1, 0, &c->vocab)) ||
        (st = cfg_int(cfg, path, "max_position_embeddings", 0, 4096, &c->ctx)) ||
        (st = cfg_num(cfg, path, "rms_norm_eps", 1e-5, &c->norm_eps)) ||
        (st = cfg_num(cfg, path, "rope_theta", theta_default(cfg, 10000.0), &c->rope_theta)) ||
        (st = cfg_num2(cfg, path, "partial_rotary_factor", "partial_rotary_factor", 1.0, &frac)))
        return st;
    if (c->n_head <= 0 || c->d_model % c->n_head)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_size %d is not divisible by num_attention_heads %d",
                        path, c->d_model, c->n_head);
    if ((st = cfg_int(cfg, path, "num_key_value_heads", 0, c->n_head, &c->n_kv_head))) return st;
    c->d_head = c->d_model / c->n_head;
    if ((st = partial_rotary(path, "partial_rotary_factor", frac, c))) return st;
    const char *act = mp_json_string(mp_json_get(cfg, "hidden_act"), NULL);
    if (act && strcmp(act, "silu"))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_act \"%s\" is not supported (silu)", path, act);
    const mp_json *rs = scaling_obj(cfg);
    if (rs && mp_json_type_of(rs) != MP_JSON_NULL) {
        const char *t = mp_json_string(mp_json_get(rs, "type"), NULL);
        if (!t) t = mp_json_string(mp_json_get(rs, "rope_type"), NULL);
        if (!t || strcmp(t, "default"))
            return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling \"%s\" is not supported (Phi-3 loads with "
                            "rope_scaling null: the 4k models; LongRoPE / su / yarn are not implemented)", path,
                            t ? t : "(no type)");
    }
    /* the sliding window on every layer (Phi-3-mini-4k: 2047), masked as Mistral's: W keys */
    if ((st = cfg_int(cfg, path, "sliding_window", 0, 0, &c->sliding_window))) return st;
    if (cfg_bool(cfg, "attention_bias", 0) || cfg_bool(cfg, "mlp_bias", 0))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: attention_bias / mlp_bias are not supported for phi3", path);
    c->tied = cfg_bool(cfg, "tie_word_embeddings", 0);
    return MP_OK;
}

/* Gemma (1) and Gemma 2: the activation (hidden_activation, else hidden_act:
 * gelu_pytorch_tanh; Gemma 1's legacy "gelu" with no hidden_activation is
 * the tanh approximation, as transformers and vLLM run it), head_dim (256
 * when absent, the config class's default), and Gemma 2's soft caps, query
 * scale and post-norms (the class defaults when absent: 50, 30, 256), and its
 * sliding window on every other layer (sliding_window_pattern 2). */
static mp_status gemma_config(const mp_json *cfg, const char *path, const char *type, mp_config *c) {
    mp_status st;
    const int g2 = strcmp(type, "gemma2") == 0;
    const char *hact = mp_json_string(mp_json_get(cfg, "hidden_activation"), NULL);
    const char *act = mp_json_string(mp_json_get(cfg, "hidden_act"), NULL);
    if (hact) {
        if (strcmp(hact, "gelu_pytorch_tanh"))
            return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_activation \"%s\" is not supported for %s "
                            "(gelu_pytorch_tanh)", path, hact, type);
    } else if (act && strcmp(act, "gelu_pytorch_tanh") && (g2 || strcmp(act, "gelu"))) {
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_act \"%s\" is not supported for %s "
                        "(gelu_pytorch_tanh)", path, act, type);
    }
    if (!mp_json_get(cfg, "head_dim")) c->d_head = 256; /* the config class's default */
    c->mlp = MP_MLP_SWIGLU;
    c->gelu_tanh = 1; /* GeGLU */
    c->norm_offset = 1;
    c->embed_scale = 1;
    if (!g2) return MP_OK;
    c->post_norms = 1;
    if ((st = cfg_num(cfg, path, "attn_logit_softcapping", 50.0, &c->attn_softcap)) ||
        (st = cfg_num(cfg, path, "final_logit_softcapping", 30.0, &c->final_softcap)) ||
        (st = cfg_num(cfg, path, "query_pre_attn_scalar", 256.0, &c->query_pre_attn_scalar)))
        return st;
    const mp_json *sj = mp_json_get(cfg, "attn_logit_softcapping"), *fj = mp_json_get(cfg, "final_logit_softcapping");
    if (sj && mp_json_type_of(sj) == MP_JSON_NULL) c->attn_softcap = 0.0f;
    if (fj && mp_json_type_of(fj) == MP_JSON_NULL) c->final_softcap = 0.0f;
    if (!(c->query_pre_attn_scalar > 0.0f))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: query_pre_attn_scalar must be positive", path);
    if (c->query_pre_attn_scalar == (float)c->d_head) c->query_pre_attn_scalar = 0.0f; /* the default scale */
    /* the sliding window on every other layer (HF's Gemma2: layer i windowed when (i + 1) % 2 != 0) */
    if ((st = cfg_int(cfg, path, "sliding_window", 0, 0, &c->sliding_window))) return st;
    if (c->sliding_window > 0) c->sliding_window_pattern = 2;
    return MP_OK;
}

/* Gemma 3's RoPE of one layer kind: its base and linear factor (1: none), from rope_parameters[kind] (newer
 * configs) or from rope_theta / rope_scaling (global layers) and rope_local_base_freq (local ones, unscaled). */
static mp_status gemma3_rope(const mp_json *cfg, const char *path, int local, float *theta, float *factor) {
    mp_status st;
    const mp_json *rp = mp_json_get(cfg, "rope_parameters"), *rs;
    const char *kind = local ? "sliding_attention" : "full_attention", *where;
    char key[64];
    *factor = 1.0f;
    if (mp_json_type_of(rp) == MP_JSON_OBJECT) {
        const mp_json *k = mp_json_get(rp, kind);
        if (mp_json_type_of(k) != MP_JSON_OBJECT)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_parameters has no \"%s\" object", path, kind);
        if ((st = cfg_num(k, path, "rope_theta", local ? 10000.0 : 1000000.0, theta))) return st;
        rs = k;
        snprintf(key, sizeof key, "rope_parameters.%s", kind);
        where = key;
    } else {
        if ((st = cfg_num(cfg, path, local ? "rope_local_base_freq" : "rope_theta", local ? 10000.0 : 1000000.0, theta)))
            return st;
        if (local) return MP_OK; /* the local layers are never scaled (Gemma3RotaryEmbedding's rope_local) */
        rs = mp_json_get(cfg, "rope_scaling");
        where = "rope_scaling";
        if (!rs || mp_json_type_of(rs) == MP_JSON_NULL) return MP_OK;
        if (mp_json_type_of(rs) != MP_JSON_OBJECT)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: rope_scaling must be null or an object", path);
    }
    if (!(*theta > 0.0f)) return mp_error(MP_ERR_FORMAT, "%s/config.json: %s's RoPE base must be positive", path, where);
    const mp_json *tj = mp_json_get(rs, "rope_type");
    if (!tj) tj = mp_json_get(rs, "type");
    const char *type = mp_json_string(tj, NULL);
    if (!type || strcmp(type, "default") == 0) return MP_OK;
    if (strcmp(type, "linear") || local)
        return mp_error(MP_ERR_FORMAT, "%s/config.json: %s type \"%s\" is not supported for gemma3_text (linear on "
                        "the global layers, none on the sliding ones)", path, where, type);
    if ((st = cfg_num(rs, path, "factor", 1.0, factor))) return st;
    if (!(*factor > 0.0f)) return mp_error(MP_ERR_FORMAT, "%s/config.json: %s factor must be positive", path, where);
    return MP_OK;
}

/* Gemma 3 (model_type gemma3_text, or a gemma3 folder's text_config): Gemma 2's blocks (without its caps unless
 * given) plus the per-head q/k norm and the sliding layers' own RoPE base; keys absent from config.json take
 * Gemma3TextConfig's defaults (a multimodal folder's text_config lists only some). The layer kinds: layer_types
 * (a period's pattern: every P-th layer full_attention) or sliding_window_pattern (6). */
static mp_status read_config_gemma3(const mp_json *cfg, const char *path, mp_config *c) {
    mp_status st;
    if ((st = cfg_int(cfg, path, "hidden_size", 0, 2304, &c->d_model)) ||
        (st = cfg_int(cfg, path, "num_hidden_layers", 0, 26, &c->n_layer)) ||
        (st = cfg_int(cfg, path, "num_attention_heads", 0, 8, &c->n_head)) ||
        (st = cfg_int(cfg, path, "num_key_value_heads", 0, 4, &c->n_kv_head)) ||
        (st = cfg_int(cfg, path, "head_dim", 0, 256, &c->d_head)) ||
        (st = cfg_int(cfg, path, "intermediate_size", 0, 9216, &c->d_mlp)) ||
        (st = cfg_int(cfg, path, "vocab_size", 0, 262208, &c->vocab)) ||
        (st = cfg_int(cfg, path, "max_position_embeddings", 0, 131072, &c->ctx)) ||
        (st = cfg_num(cfg, path, "rms_norm_eps", 1e-6, &c->norm_eps)) ||
        (st = cfg_num(cfg, path, "query_pre_attn_scalar", 256.0, &c->query_pre_attn_scalar)) ||
        (st = cfg_num(cfg, path, "attn_logit_softcapping", 0.0, &c->attn_softcap)) ||
        (st = cfg_num(cfg, path, "final_logit_softcapping", 0.0, &c->final_softcap)) ||
        (st = cfg_int(cfg, path, "sliding_window", 0, 4096, &c->sliding_window)))
        return st;
    const char *hact = mp_json_string(mp_json_get(cfg, "hidden_activation"), NULL);
    if (hact && strcmp(hact, "gelu_pytorch_tanh"))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_activation \"%s\" is not supported for gemma3_text "
                        "(gelu_pytorch_tanh)", path, hact);
    if (cfg_bool(cfg, "attention_bias", 0))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: attention_bias is not supported for gemma3_text", path);
    if (cfg_bool(cfg, "use_bidirectional_attention", 0))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: use_bidirectional_attention (an encoder's mask) is not "
                        "supported for gemma3_text; mechprobe's attention is causal", path);
    if (!(c->query_pre_attn_scalar > 0.0f))
        return mp_error(MP_ERR_FORMAT, "%s/config.json: query_pre_attn_scalar must be positive", path);
    if (c->query_pre_attn_scalar == (float)c->d_head) c->query_pre_attn_scalar = 0.0f; /* the default scale */
    c->tied = cfg_bool(cfg, "tie_word_embeddings", 1);
    c->mlp = MP_MLP_SWIGLU;
    c->gelu_tanh = 1; /* GeGLU */
    c->norm_offset = c->embed_scale = c->post_norms = 1;
    c->qk_norm = MP_QK_NORM_HEAD; /* Gemma3RMSNorm (1 + w) of each head's q and k */
    float gscale, lscale;
    if ((st = gemma3_rope(cfg, path, 0, &c->rope_theta, &gscale)) ||
        (st = gemma3_rope(cfg, path, 1, &c->rope_local_theta, &lscale)))
        return st;
    if (gscale != 1.0f) c->rope_scale = gscale; /* linear: positions / factor on the global layers */
    /* the period: every P-th layer full attention (layer l global when (l + 1) % P == 0) */
    int P = 6;
    const mp_json *lt = mp_json_get(cfg, "layer_types");
    if (mp_json_type_of(lt) == MP_JSON_ARRAY) {
        if (mp_json_len(lt) != (size_t)c->n_layer)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: layer_types has %zu entries for %d layers", path,
                            mp_json_len(lt), c->n_layer);
        P = 0;
        for (int l = 0; l < c->n_layer; l++) {
            const char *k = mp_json_string(mp_json_at(lt, (size_t)l), NULL);
            const int full = k && strcmp(k, "full_attention") == 0;
            if (!k || (!full && strcmp(k, "sliding_attention")))
                return mp_error(MP_ERR_FORMAT, "%s/config.json: layer_types[%d] is \"%s\" (full_attention or "
                                "sliding_attention)", path, l, k ? k : "(not a string)");
            if (full && !P) P = l + 1;
        }
        if (!P) P = c->n_layer + 1; /* every layer sliding */
        for (int l = 0; l < c->n_layer; l++) {
            const int full = strcmp(mp_json_string(mp_json_at(lt, (size_t)l), NULL), "full_attention") == 0;
            if (full != ((l + 1) % P == 0))
                return mp_error(MP_ERR_FORMAT, "%s/config.json: layer_types is not a regular pattern (every %d-th "
                                "layer full_attention, as from its first one); layer %d is \"%s\": mechprobe holds "
                                "the layer kinds as sliding_window_pattern", path, P, l,
                                full ? "full_attention" : "sliding_attention");
        }
    } else if ((st = cfg_int(cfg, path, "sliding_window_pattern", 0, 6, &P))) {
        return st;
    }
    if (P < 1) return mp_error(MP_ERR_FORMAT, "%s/config.json: sliding_window_pattern must be >= 1", path);
    if (P == 1 || c->sliding_window == 0) { /* no sliding layer: one kind of layer, the global one */
        c->sliding_window = c->sliding_window_pattern = 0;
        c->rope_local_theta = 0.0f;
    } else {
        c->sliding_window_pattern = P > c->n_layer ? 0 : P; /* 0: every layer windowed */
    }
    return MP_OK;
}

static mp_status read_config(const mp_json *cfg, const char *path, const char *type, mp_config *c) {
    mp_status st;
    *c = mp_config_default();
    if (strcmp(type, "gemma3_text") == 0) {
        if ((st = read_config_gemma3(cfg, path, c))) return st;
    } else if (strcmp(type, "gpt_neox") == 0) {
        if ((st = read_config_neox(cfg, path, c))) return st;
    } else if (strcmp(type, "phi3") == 0) {
        if ((st = read_config_phi3(cfg, path, c))) return st;
    } else if (strcmp(type, "gpt2") == 0) {
        if ((st = cfg_int(cfg, path, "n_embd", 1, 0, &c->d_model)) || (st = cfg_int(cfg, path, "n_layer", 1, 0, &c->n_layer)) ||
            (st = cfg_int(cfg, path, "n_head", 1, 0, &c->n_head)) || (st = cfg_int(cfg, path, "vocab_size", 1, 0, &c->vocab)) ||
            (st = cfg_int(cfg, path, "n_positions", 1, 0, &c->ctx)) ||
            (st = cfg_num(cfg, path, "layer_norm_epsilon", 1e-5, &c->norm_eps)))
            return st;
        if (c->n_head <= 0 || c->d_model % c->n_head)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: n_embd %d is not divisible by n_head %d", path, c->d_model,
                            c->n_head);
        if ((st = cfg_int(cfg, path, "n_inner", 0, 4 * c->d_model, &c->d_mlp))) return st;
        const char *act = mp_json_string(mp_json_get(cfg, "activation_function"), NULL);
        if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu"))
            return mp_error(MP_ERR_FORMAT, "%s/config.json: activation_function \"%s\" is not supported", path, act);
        c->n_kv_head = c->n_head;
        c->d_head = c->d_model / c->n_head;
        c->norm = MP_NORM_LAYER;
        c->mlp = MP_MLP_GELU;
        c->gelu_tanh = !act || strcmp(act, "gelu") != 0;
        c->pos = MP_POS_LEARNED;
        c->qkv_bias = c->linear_bias = 1;
        c->tied = cfg_bool(cfg, "tie_word_embeddings", 1);
    } else {
        if ((st = cfg_int(cfg, path, "hidden_size", 1, 0, &c->d_model)) ||
            (st = cfg_int(cfg, path, "num_hidden_layers", 1, 0, &c->n_layer)) ||
            (st = cfg_int(cfg, path, "num_attention_heads", 1, 0, &c->n_head)) ||
            (st = cfg_int(cfg, path, "intermediate_size", 1, 0, &c->d_mlp)) ||
            (st = cfg_int(cfg, path, "vocab_size", 1, 0, &c->vocab)) ||
            (st = cfg_int(cfg, path, "max_position_embeddings", 0, 2048, &c->ctx)) ||
            (st = cfg_num(cfg, path, "rms_norm_eps", 1e-6, &c->norm_eps)) ||
            (st = cfg_num(cfg, path, "rope_theta", theta_default(cfg, 10000.0), &c->rope_theta)))
            return st;
        if ((st = cfg_int(cfg, path, "num_key_value_heads", 0, c->n_head, &c->n_kv_head))) return st;
        if (c->n_head <= 0) return mp_error(MP_ERR_FORMAT, "%s/config.json: num_attention_heads must be positive", path);
        if ((st = cfg_int(cfg, path, "head_dim", 0, c->d_model / c->n_head, &c->d_head))) return st;
        if (!mp_json_get(cfg, "head_dim") && c->d_model % c->n_head)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_size %d is not divisible by num_attention_heads %d",
                            path, c->d_model, c->n_head);
        const int gemma = strcmp(type, "gemma") == 0 || strcmp(type, "gemma2") == 0;
        const char *act = mp_json_string(mp_json_get(cfg, "hidden_act"), NULL);
        if (gemma) {
            if ((st = gemma_config(cfg, path, type, c))) return st;
        } else if (act && strcmp(act, "silu")) {
            return mp_error(MP_ERR_FORMAT, "%s/config.json: hidden_act \"%s\" is not supported (silu)", path, act);
        }
        if (strcmp(type, "olmo2") == 0) { /* OLMo 2: norms after attention and MLP only, q/k norm over the whole
                                           * projections; rms_norm_eps's class default 1e-5 */
            if (cfg_bool(cfg, "attention_bias", 0))
                return mp_error(MP_ERR_FORMAT, "%s/config.json: attention_bias is not supported for olmo2 (biases on "
                                "q, k, v and o_proj without the MLP's have no mechprobe form)", path);
            if ((st = cfg_num(cfg, path, "rms_norm_eps", 1e-5, &c->norm_eps))) return st;
            c->no_pre_norms = c->post_norms = 1;
            c->qk_norm = MP_QK_NORM_FULL;
        }
        c->qkv_bias = strcmp(type, "qwen2") == 0 ? 1 : cfg_bool(cfg, "attention_bias", 0);
        if (strcmp(type, "qwen2") != 0 && cfg_bool(cfg, "mlp_bias", 0))
            return mp_error(MP_ERR_FORMAT, "%s/config.json: mlp_bias is not supported", path);
        c->tied = cfg_bool(cfg, "tie_word_embeddings", gemma); /* Gemma's default: tied */
        if (gemma && c->qkv_bias)
            return mp_error(MP_ERR_FORMAT, "%s/config.json: attention_bias is not supported for %s", path, type);
        if (c->d_head > 0 && (st = rope_scaling(cfg, path, c))) return st;
        if ((st = sliding_window(cfg, path, type, c))) return st;
        if (strcmp(type, "qwen3") == 0) { /* RMSNorm of each head's q and k (q_norm / k_norm [head_dim]) */
            c->qk_norm = MP_QK_NORM_HEAD;
            /* layer_types (newer configs) must agree with the window read above: every layer
             * "sliding_attention" with one (use_sliding_window, max_window_layers 0), else "full_attention" */
            const char *want = c->sliding_window > 0 ? "sliding_attention" : "full_attention";
            const mp_json *lt = mp_json_get(cfg, "layer_types");
            for (size_t i = 0; mp_json_type_of(lt) == MP_JSON_ARRAY && i < mp_json_len(lt); i++) {
                const char *k = mp_json_string(mp_json_at(lt, i), NULL);
                if (!k || strcmp(k, want) != 0)
                    return mp_error(MP_ERR_FORMAT, "%s/config.json: layer_types[%zu] is \"%s\"; with this config "
                                    "mechprobe runs every layer as %s", path, i, k ? k : "(not a string)", want);
            }
        }
    }
    return mp_config_validate(c, path);
}

/* ---- tensors ---- */

/* The tensor prefix+name (layer l), checked to have PyTorch shape [s0]
 * (s1 == 0) or [s0, s1]; NULL with *st set (MP_OK when absent and found is
 * non-NULL: optional). */
static const mp_st_tensor *find_t(const hctx *x, uint64_t s0, uint64_t s1, int *found, const char *fmt, int l,
                                  mp_status *st) {
    char name[200], full[240];
    *st = MP_OK;
    snprintf(name, sizeof name, fmt, l);
    if (x->body && strncmp(name, "model.", 6) == 0) snprintf(full, sizeof full, "%s%s%s", x->prefix, x->body, name + 6);
    else snprintf(full, sizeof full, "%s%s", x->prefix, name);
    const mp_st_tensor *t = mp_safetensors_find(x->st, full);
    if (found) *found = t != NULL;
    if (!t) {
        if (!found) *st = mp_error(MP_ERR_FORMAT, "%s: tensor %s is missing", x->path, full);
        return NULL;
    }
    int ok = t->n_dims == (s1 ? 2u : 1u) && t->shape[0] == s0 && (!s1 || t->shape[1] == s1);
    if (!ok) {
        char want[64], got[96] = "";
        if (s1) snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)s0, (unsigned long long)s1);
        else snprintf(want, sizeof want, "[%llu]", (unsigned long long)s0);
        for (uint32_t i = 0; i < t->n_dims && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
        *st = mp_error(MP_ERR_FORMAT, "%s: tensor %s has shape [%s]; the config needs %s", x->path, full, got, want);
        return NULL;
    }
    return t;
}

/* Reads prefix+name (layer l) with PyTorch shape [s0] (s1 == 0) or [s0, s1];
 * *found (NULL = required). */
static mp_status read_t(const hctx *x, float *dst, uint64_t s0, uint64_t s1, int *found, const char *fmt, int l) {
    mp_status st;
    const mp_st_tensor *t = find_t(x, s0, s1, found, fmt, l, &st);
    if (!t) return st;
    st = mp_safetensors_read_f32(x->st, t, dst, t->n_elements);
    return st ? mp_error_prefix(st, "%s", x->path) : MP_OK;
}

/* A linear weight [s0 = out, s1 = in] of the llama family. Float32 mode
 * (x->q NULL) reads it into dst; kept mode points *qm at the file's mapping
 * when the tensor is F16 or BF16 (F32 when aligned for float), else decodes it
 * to owned float32 rows. permute_heads > 0 (q and k): the half-split rows of
 * each head go to adjacent pairs (kept rows are copied first); tmp holds
 * s0 / permute_heads * s1 floats. */
static mp_status read_lin(const hctx *x, float *dst, mp_qmat *qm, uint64_t s0, uint64_t s1, int permute_heads,
                          float *tmp, const char *fmt, int l) {
    mp_status st;
    const int Dh = permute_heads > 0 ? (int)(s0 / (uint64_t)permute_heads) : 0;
    if (!x->q) {
        if ((st = read_t(x, dst, s0, s1, NULL, fmt, l))) return st;
        if (permute_heads > 0) mp_rope_permute_rows(dst, tmp, permute_heads, Dh, (size_t)s1, 1);
        return MP_OK;
    }
    const mp_st_tensor *t = find_t(x, s0, s1, NULL, fmt, l, &st);
    if (!t) return st;
    const int aligned_f32 = t->dtype == MP_ST_F32 && (uintptr_t)t->data % _Alignof(float) == 0;
    if (t->dtype == MP_ST_F16 || t->dtype == MP_ST_BF16 || aligned_f32) {
        qm->type = t->dtype == MP_ST_F16 ? MP_GGML_F16 : t->dtype == MP_ST_BF16 ? MP_GGML_BF16 : MP_GGML_F32;
        qm->row_bytes = (size_t)(t->n_bytes / s0);
        qm->data = t->data;
        if (permute_heads > 0) { /* the mapping is read-only: permute a copy */
            unsigned char *own = mp_qparams_alloc(x->q, (size_t)t->n_bytes);
            if (!own) return MP_ERR_NOMEM;
            memcpy(own, t->data, (size_t)t->n_bytes);
            if ((st = mp_qmat_permute_heads(own, permute_heads, Dh, qm->row_bytes))) return st;
            qm->data = own;
        }
    } else {
        float *f = mp_qparams_alloc(x->q, (size_t)(s0 * s1) * sizeof(float));
        if (!f) return MP_ERR_NOMEM;
        if ((st = mp_safetensors_read_f32(x->st, t, f, t->n_elements))) return mp_error_prefix(st, "%s", x->path);
        if (permute_heads > 0) mp_rope_permute_rows(f, tmp, permute_heads, Dh, (size_t)s1, 1);
        qm->type = MP_GGML_F32;
        qm->row_bytes = (size_t)s1 * sizeof(float);
        qm->data = (const unsigned char *)f;
    }
    x->q->bytes += qm->row_bytes * (size_t)s0;
    return MP_OK;
}

static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* w += 1 over n floats: Gemma's norm weight w held as the factor 1 + w (norm_offset); sign -1 undoes it */
static void norm_offset(float *w, size_t n, float sign) {
    if (w)
        for (size_t i = 0; i < n; i++) w[i] += sign;
}

static mp_status read_llama(const hctx *x, mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_params *p = &m->p;
    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    const uint64_t HD = (uint64_t)c->n_head * c->d_head, KD = (uint64_t)c->n_kv_head * c->d_head;
    mp_qparams *Q = x->q;
    mp_status st;
    float *tmp = mp_malloc((size_t)c->d_head * D * sizeof(float), "a RoPE permutation");
    if (!tmp) return MP_ERR_NOMEM;
/* the float32 destination of a linear weight (none when kept), its mp_qmat (none in float32 mode) */
#define FW(base, off) (Q ? NULL : (base) + (off))
#define QW(f, l) (Q ? &Q->f[l] : NULL)
    if ((st = read_lin(x, p->embed, Q ? &Q->embed : NULL, V, D, 0, tmp, "model.embed_tokens.weight", 0))) goto cleanup;
    if ((st = read_t(x, p->lnf_w, D, 0, NULL, "model.norm.weight", 0))) goto cleanup;
    if (!c->tied && (st = read_lin(x, p->unembed, Q ? &Q->unembed : NULL, V, D, 0, tmp, "lm_head.weight", 0)))
        goto cleanup;
    if (Q && c->tied) Q->unembed = Q->embed;
    for (int l = 0; l < c->n_layer; l++) {
        const size_t lM = (size_t)l * M * D;
        const int pre = !c->no_pre_norms; /* OLMo 2: no input_layernorm / pre-MLP norm */
        if ((pre && (st = read_t(x, p->ln1_w + (size_t)l * D, D, 0, NULL, "model.layers.%d.input_layernorm.weight", l))) ||
            (st = read_lin(x, FW(p->wq, (size_t)l * HD * D), QW(wq, l), HD, D, c->n_head, tmp,
                           "model.layers.%d.self_attn.q_proj.weight", l)) ||
            (st = read_lin(x, FW(p->wk, (size_t)l * KD * D), QW(wk, l), KD, D, c->n_kv_head, tmp,
                           "model.layers.%d.self_attn.k_proj.weight", l)) ||
            (st = read_lin(x, FW(p->wv, (size_t)l * KD * D), QW(wv, l), KD, D, 0, tmp,
                           "model.layers.%d.self_attn.v_proj.weight", l)) ||
            (st = read_lin(x, FW(p->wo, (size_t)l * D * HD), QW(wo, l), D, HD, 0, tmp,
                           "model.layers.%d.self_attn.o_proj.weight", l)) ||
            (pre && (st = read_t(x, p->ln2_w + (size_t)l * D, D, 0, NULL,
                                 c->post_norms ? "model.layers.%d.pre_feedforward_layernorm.weight"
                                               : "model.layers.%d.post_attention_layernorm.weight", l))) ||
            (c->post_norms && ((st = read_t(x, p->ln1p_w + (size_t)l * D, D, 0, NULL,
                                            "model.layers.%d.post_attention_layernorm.weight", l)) ||
                               (st = read_t(x, p->ln2p_w + (size_t)l * D, D, 0, NULL,
                                            "model.layers.%d.post_feedforward_layernorm.weight", l)))) ||
            (st = read_lin(x, FW(p->w1, lM), QW(w1, l), M, D, 0, tmp, "model.layers.%d.mlp.gate_proj.weight", l)) ||
            (st = read_lin(x, FW(p->w3, lM), QW(w3, l), M, D, 0, tmp, "model.layers.%d.mlp.up_proj.weight", l)) ||
            (st = read_lin(x, FW(p->w2, lM), QW(w2, l), D, M, 0, tmp, "model.layers.%d.mlp.down_proj.weight", l)))
            goto cleanup;
#undef FW
#undef QW
        if (c->qk_norm == MP_QK_NORM_HEAD) { /* Qwen3: one head's channels, permuted as the rows they scale */
            float *qn = p->q_norm + (size_t)l * c->d_head, *kn = p->k_norm + (size_t)l * c->d_head;
            if ((st = read_t(x, qn, (uint64_t)c->d_head, 0, NULL, "model.layers.%d.self_attn.q_norm.weight", l)) ||
                (st = read_t(x, kn, (uint64_t)c->d_head, 0, NULL, "model.layers.%d.self_attn.k_norm.weight", l)))
                goto cleanup;
            mp_rope_permute_rows(qn, tmp, 1, c->d_head, 1, 1);
            mp_rope_permute_rows(kn, tmp, 1, c->d_head, 1, 1);
        } else if (c->qk_norm == MP_QK_NORM_FULL) { /* OLMo 2: the whole projection's, each head's channels permuted */
            float *qn = p->q_norm + (size_t)l * HD, *kn = p->k_norm + (size_t)l * KD;
            if ((st = read_t(x, qn, HD, 0, NULL, "model.layers.%d.self_attn.q_norm.weight", l)) ||
                (st = read_t(x, kn, KD, 0, NULL, "model.layers.%d.self_attn.k_norm.weight", l)))
                goto cleanup;
            mp_rope_permute_rows(qn, tmp, c->n_head, c->d_head, 1, 1);
            mp_rope_permute_rows(kn, tmp, c->n_kv_head, c->d_head, 1, 1);
        }
        if (c->qkv_bias) {
            float *bq = p->bq + (size_t)l * HD, *bk = p->bk + (size_t)l * KD;
            if ((st = read_t(x, bq, HD, 0, NULL, "model.layers.%d.self_attn.q_proj.bias", l)) ||
                (st = read_t(x, bk, KD, 0, NULL, "model.layers.%d.self_attn.k_proj.bias", l)) ||
                (st = read_t(x, p->bv + (size_t)l * KD, KD, 0, NULL, "model.layers.%d.self_attn.v_proj.bias", l)))
                goto cleanup;
            mp_rope_permute_rows(bq, tmp, c->n_head, c->d_head, 1, 1);
            mp_rope_permute_rows(bk, tmp, c->n_kv_head, c->d_head, 1, 1);
        }
    }
    if (c->norm_offset) { /* Gemma: x * (1 + w) */
        const size_t LD = (size_t)c->n_layer * D;
        norm_offset(p->ln1_w, LD, 1.0f);
        norm_offset(p->ln2_w, LD, 1.0f);
        norm_offset(p->lnf_w, D, 1.0f);
        norm_offset(p->ln1p_w, LD, 1.0f);
        norm_offset(p->ln2p_w, LD, 1.0f);
        if (c->qk_norm == MP_QK_NORM_HEAD) { /* Gemma 3: Gemma3RMSNorm's (1 + w) on q and k too */
            norm_offset(p->q_norm, (size_t)c->n_layer * c->d_head, 1.0f);
            norm_offset(p->k_norm, (size_t)c->n_layer * c->d_head, 1.0f);
        }
    }
cleanup:
    free(tmp);
    return st;
}

static mp_status read_gpt2(const hctx *x, mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_params *p = &m->p;
    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    mp_status st;
    size_t big = (size_t)(3 * D * D > 2 * D * M ? 3 * D * D : 2 * D * M);
    float *tmp = mp_malloc((big + 3 * D) * sizeof(float), "GPT-2 Conv1D weights");
    if (!tmp) return MP_ERR_NOMEM;
    if ((st = read_t(x, p->embed, V, D, NULL, "wte.weight", 0)) ||
        (st = read_t(x, p->pos_embed, (uint64_t)c->ctx, D, NULL, "wpe.weight", 0)) ||
        (st = read_t(x, p->lnf_w, D, 0, NULL, "ln_f.weight", 0)) || (st = read_t(x, p->lnf_b, D, 0, NULL, "ln_f.bias", 0)))
        goto cleanup;
    if (!c->tied) {
        hctx top = *x;
        top.prefix = "";
        if ((st = read_t(&top, p->unembed, V, D, NULL, "lm_head.weight", 0))) goto cleanup;
    }
    for (int l = 0; l < c->n_layer; l++) {
        const size_t lD = (size_t)l * D, lDD = (size_t)l * D * D, lM = (size_t)l * M;
        float *bias = tmp + big;
        if ((st = read_t(x, p->ln1_w + lD, D, 0, NULL, "h.%d.ln_1.weight", l)) ||
            (st = read_t(x, p->ln1_b + lD, D, 0, NULL, "h.%d.ln_1.bias", l)) ||
            (st = read_t(x, tmp, D, 3 * D, NULL, "h.%d.attn.c_attn.weight", l)) ||
            (st = read_t(x, bias, 3 * D, 0, NULL, "h.%d.attn.c_attn.bias", l)))
            goto cleanup;
        /* Conv1D [D, 3D] (in, out): column block j of the output is q | k | v */
        for (int j = 0; j < 3; j++) {
            float *w = j == 0 ? p->wq : j == 1 ? p->wk : p->wv;
            float *b = j == 0 ? p->bq : j == 1 ? p->bk : p->bv;
            for (uint64_t o = 0; o < D; o++)
                for (uint64_t i = 0; i < D; i++) w[lDD + o * D + i] = tmp[i * 3 * D + j * D + o];
            memcpy(b + lD, bias + j * D, D * sizeof(float));
        }
        if ((st = read_t(x, tmp, D, D, NULL, "h.%d.attn.c_proj.weight", l)) ||
            (st = read_t(x, p->bo + lD, D, 0, NULL, "h.%d.attn.c_proj.bias", l)))
            goto cleanup;
        transpose(p->wo + lDD, tmp, D, D);
        if ((st = read_t(x, p->ln2_w + lD, D, 0, NULL, "h.%d.ln_2.weight", l)) ||
            (st = read_t(x, p->ln2_b + lD, D, 0, NULL, "h.%d.ln_2.bias", l)) ||
            (st = read_t(x, tmp, D, M, NULL, "h.%d.mlp.c_fc.weight", l)) ||
            (st = read_t(x, p->b1 + lM, M, 0, NULL, "h.%d.mlp.c_fc.bias", l)))
            goto cleanup;
        transpose(p->w1 + lM * D, tmp, D, M);
        if ((st = read_t(x, tmp, M, D, NULL, "h.%d.mlp.c_proj.weight", l)) ||
            (st = read_t(x, p->b2 + lD, D, 0, NULL, "h.%d.mlp.c_proj.bias", l)))
            goto cleanup;
        transpose(p->w2 + lM * D, tmp, M, D);
    }
cleanup:
    free(tmp);
    return st;
}

/* GPT-NeoX (Pythia): gpt_neox.* and embed_out; query_key_value rows [H, 3, Dh] (per head q, k, v). */
static mp_status read_neox(const hctx *x, mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_params *p = &m->p;
    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    const int H = c->n_head, Dh = c->d_head, rot = rotary_channels(c);
    mp_status st;
    float *tmp = mp_malloc((size_t)(3 * D * D + 3 * D + (uint64_t)Dh * D) * sizeof(float), "the fused QKV weights");
    if (!tmp) return MP_ERR_NOMEM;
    float *bias = tmp + 3 * D * D, *perm = bias + 3 * D;
    if ((st = read_t(x, p->embed, V, D, NULL, "gpt_neox.embed_in.weight", 0)) ||
        (st = read_t(x, p->lnf_w, D, 0, NULL, "gpt_neox.final_layer_norm.weight", 0)) ||
        (st = read_t(x, p->lnf_b, D, 0, NULL, "gpt_neox.final_layer_norm.bias", 0)) ||
        (!c->tied && (st = read_t(x, p->unembed, V, D, NULL, "embed_out.weight", 0))))
        goto cleanup;
    for (int l = 0; l < c->n_layer; l++) {
        const size_t lD = (size_t)l * D, lDD = (size_t)l * D * D, lM = (size_t)l * M;
        if ((st = read_t(x, p->ln1_w + lD, D, 0, NULL, "gpt_neox.layers.%d.input_layernorm.weight", l)) ||
            (st = read_t(x, p->ln1_b + lD, D, 0, NULL, "gpt_neox.layers.%d.input_layernorm.bias", l)) ||
            (st = read_t(x, tmp, 3 * D, D, NULL, "gpt_neox.layers.%d.attention.query_key_value.weight", l)))
            goto cleanup;
        if (c->qkv_bias && (st = read_t(x, bias, 3 * D, 0, NULL, "gpt_neox.layers.%d.attention.query_key_value.bias", l)))
            goto cleanup;
        for (int h = 0; h < H; h++)
            for (int j = 0; j < 3; j++) {
                float *w = (j == 0 ? p->wq : j == 1 ? p->wk : p->wv) + lDD + (size_t)h * Dh * D;
                memcpy(w, tmp + (size_t)(3 * h + j) * Dh * D, (size_t)Dh * D * sizeof(float));
                if (c->qkv_bias)
                    memcpy((j == 0 ? p->bq : j == 1 ? p->bk : p->bv) + lD + (size_t)h * Dh, bias + (size_t)(3 * h + j) * Dh,
                           (size_t)Dh * sizeof(float));
            }
        permute_rotary(p->wq + lDD, perm, H, Dh, rot, D, 1);
        permute_rotary(p->wk + lDD, perm, H, Dh, rot, D, 1);
        if (c->qkv_bias) {
            permute_rotary(p->bq + lD, perm, H, Dh, rot, 1, 1);
            permute_rotary(p->bk + lD, perm, H, Dh, rot, 1, 1);
        }
        int has_bo = 1;
        if ((st = read_t(x, p->wo + lDD, D, D, NULL, "gpt_neox.layers.%d.attention.dense.weight", l)) ||
            (st = read_t(x, p->bo + lD, D, 0, c->qkv_bias ? NULL : &has_bo, "gpt_neox.layers.%d.attention.dense.bias", l)) ||
            (st = read_t(x, p->ln2_w + lD, D, 0, NULL, "gpt_neox.layers.%d.post_attention_layernorm.weight", l)) ||
            (st = read_t(x, p->ln2_b + lD, D, 0, NULL, "gpt_neox.layers.%d.post_attention_layernorm.bias", l)) ||
            (st = read_t(x, p->w1 + lM * D, M, D, NULL, "gpt_neox.layers.%d.mlp.dense_h_to_4h.weight", l)) ||
            (st = read_t(x, p->b1 + lM, M, 0, NULL, "gpt_neox.layers.%d.mlp.dense_h_to_4h.bias", l)) ||
            (st = read_t(x, p->w2 + lM * D, D, M, NULL, "gpt_neox.layers.%d.mlp.dense_4h_to_h.weight", l)) ||
            (st = read_t(x, p->b2 + lD, D, 0, NULL, "gpt_neox.layers.%d.mlp.dense_4h_to_h.bias", l)))
            goto cleanup;
        if (!has_bo) memset(p->bo + lD, 0, D * sizeof(float)); /* attention_bias false */
    }
cleanup:
    free(tmp);
    return st;
}

/* Phi-3: model.* as Llama's, with qkv_proj rows q | k | v and gate_up_proj rows gate | up. */
static mp_status read_phi3(const hctx *x, mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_params *p = &m->p;
    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    const uint64_t HD = (uint64_t)c->n_head * c->d_head, KD = (uint64_t)c->n_kv_head * c->d_head;
    const int rot = rotary_channels(c);
    mp_status st;
    const uint64_t big = (HD + 2 * KD) * D > 2 * M * D ? (HD + 2 * KD) * D : 2 * M * D;
    float *tmp = mp_malloc((size_t)(big + (uint64_t)c->d_head * D) * sizeof(float), "the fused Phi-3 weights");
    if (!tmp) return MP_ERR_NOMEM;
    float *perm = tmp + big;
    if ((st = read_t(x, p->embed, V, D, NULL, "model.embed_tokens.weight", 0)) ||
        (st = read_t(x, p->lnf_w, D, 0, NULL, "model.norm.weight", 0)) ||
        (!c->tied && (st = read_t(x, p->unembed, V, D, NULL, "lm_head.weight", 0))))
        goto cleanup;
    for (int l = 0; l < c->n_layer; l++) {
        float *wq = p->wq + (size_t)l * HD * D, *wk = p->wk + (size_t)l * KD * D;
        const size_t lM = (size_t)l * M * D;
        if ((st = read_t(x, p->ln1_w + (size_t)l * D, D, 0, NULL, "model.layers.%d.input_layernorm.weight", l)) ||
            (st = read_t(x, tmp, HD + 2 * KD, D, NULL, "model.layers.%d.self_attn.qkv_proj.weight", l)))
            goto cleanup;
        memcpy(wq, tmp, HD * D * sizeof(float));
        memcpy(wk, tmp + HD * D, KD * D * sizeof(float));
        memcpy(p->wv + (size_t)l * KD * D, tmp + (HD + KD) * D, KD * D * sizeof(float));
        permute_rotary(wq, perm, c->n_head, c->d_head, rot, D, 1);
        permute_rotary(wk, perm, c->n_kv_head, c->d_head, rot, D, 1);
        if ((st = read_t(x, p->wo + (size_t)l * D * HD, D, HD, NULL, "model.layers.%d.self_attn.o_proj.weight", l)) ||
            (st = read_t(x, p->ln2_w + (size_t)l * D, D, 0, NULL, "model.layers.%d.post_attention_layernorm.weight", l)) ||
            (st = read_t(x, tmp, 2 * M, D, NULL, "model.layers.%d.mlp.gate_up_proj.weight", l)) ||
            (st = read_t(x, p->w2 + lM, D, M, NULL, "model.layers.%d.mlp.down_proj.weight", l)))
            goto cleanup;
        memcpy(p->w1 + lM, tmp, M * D * sizeof(float));
        memcpy(p->w3 + lM, tmp + M * D, M * D * sizeof(float));
    }
cleanup:
    free(tmp);
    return st;
}

static void close_st(void *st) { mp_safetensors_close(st); }

mp_status mp_model_load_hf(mp_model **out, const char *dir) {
    mp_safetensors *st = NULL;
    mp_json_doc *doc = NULL;
    mp_model *m = NULL;
    mp_config c;
    char path[4096];
    *out = NULL;
    /* config.json first: an unknown architecture is reported before any weights are read */
    snprintf(path, sizeof path, "%s/config.json", dir);
    mp_status s = mp_json_parse_file(path, &doc);
    if (s) return s;
    const mp_json *cfg = mp_json_root(doc);
    if (mp_json_type_of(cfg) != MP_JSON_OBJECT) {
        s = mp_error(MP_ERR_FORMAT, "%s: not a JSON object", path);
        goto cleanup;
    }
    const char *type = mp_json_string(mp_json_get(cfg, "model_type"), NULL);
    if (!type) { s = mp_error(MP_ERR_FORMAT, "%s/config.json: \"model_type\" is missing", dir); goto cleanup; }
    /* gemma3 (Gemma3ForConditionalGeneration): its text model, from text_config and the language model's
     * tensors (the vision tower and projector are not read) */
    const int g3mm = strcmp(type, "gemma3") == 0;
    if (g3mm) {
        cfg = mp_json_get(cfg, "text_config");
        const char *tt = mp_json_string(mp_json_get(cfg, "model_type"), NULL);
        if (mp_json_type_of(cfg) != MP_JSON_OBJECT || (tt && strcmp(tt, "gemma3_text"))) {
            s = mp_error(MP_ERR_FORMAT, "%s/config.json: model_type \"gemma3\" (Gemma3ForConditionalGeneration): "
                         "mechprobe reads its text model, which needs a \"text_config\" object of model_type "
                         "gemma3_text", dir);
            goto cleanup;
        }
        type = "gemma3_text";
    }
    int gpt2 = strcmp(type, "gpt2") == 0, neox = strcmp(type, "gpt_neox") == 0, phi3 = strcmp(type, "phi3") == 0;
    if (!gpt2 && !neox && !phi3 && strcmp(type, "llama") && strcmp(type, "mistral") && strcmp(type, "qwen2") &&
        strcmp(type, "qwen3") && strcmp(type, "gemma") && strcmp(type, "gemma2") && strcmp(type, "gemma3_text") &&
        strcmp(type, "olmo2")) {
        s = mp_error(MP_ERR_FORMAT, "%s/config.json: unknown model_type \"%s\" (mechprobe reads llama, mistral, qwen2, "
                     "qwen3, gemma, gemma2, gemma3_text, gemma3's text model, olmo2, gpt2, gpt_neox, phi3)", dir, type);
        goto cleanup;
    }
    if ((s = read_config(cfg, dir, type, &c))) goto cleanup;
    if ((s = mp_safetensors_open(dir, &st))) goto cleanup;
    /* the llama family's F16/BF16 linear weights stay as stored (views of the mapping, which the model
     * keeps open); GPT-2's Conv1D, NeoX's and Phi-3's fused weights are rearranged, so read as float32 */
    int keep = 0;
    for (size_t i = 0; !gpt2 && !neox && !phi3 && i < mp_safetensors_n_tensors(st); i++) {
        const mp_st_tensor *t = mp_safetensors_tensor_at(st, i);
        if (t->n_dims == 2 && (t->dtype == MP_ST_F16 || t->dtype == MP_ST_BF16)) keep = 1;
    }
    if (keep) {
        if ((s = mp_model_new_unweighted(&m, &c)) || (s = mp_qparams_new(m))) goto cleanup;
    } else if ((s = mp_model_new(&m, &c))) {
        goto cleanup;
    }
    hctx x = {st, dir, "", NULL, keep ? m->q : NULL};
    if (g3mm) { /* the language model's tensors: language_model.model.* (older) or model.language_model.* */
        if (mp_safetensors_find(st, "language_model.model.embed_tokens.weight")) x.prefix = "language_model.";
        else x.body = "model.language_model.";
    }
    if (gpt2) {
        if (mp_safetensors_find(st, "transformer.wte.weight")) x.prefix = "transformer.";
        s = read_gpt2(&x, m);
    } else if (neox) {
        s = read_neox(&x, m);
    } else if (phi3) {
        s = read_phi3(&x, m);
    } else {
        s = read_llama(&x, m);
    }
    if (s) goto cleanup;
    if (keep) { /* the weights point into its mappings: closed with the model */
        m->q->file = st;
        m->q->file_close = close_st;
        st = NULL;
    }
    snprintf(m->source, sizeof m->source, "%s", dir);
    m->format = gpt2 ? "hf-gpt2" : neox ? "hf-gpt_neox" : phi3 ? "hf-phi3" : strcmp(type, "qwen2") == 0 ? "hf-qwen2"
              : strcmp(type, "qwen3") == 0 ? "hf-qwen3" : strcmp(type, "gemma") == 0 ? "hf-gemma"
              : strcmp(type, "gemma2") == 0 ? "hf-gemma2" : strcmp(type, "gemma3_text") == 0 ? "hf-gemma3"
              : strcmp(type, "olmo2") == 0 ? "hf-olmo2" : "hf-llama";
    *out = m;
    m = NULL;
cleanup:
    mp_model_free(m);
    mp_safetensors_close(st);
    mp_json_free(doc);
    return mp_error_name_path(s, dir); /* e.g. out of memory for the parameters */
}

mp_status mp_tok_load_hf_dir(mp_tok **out, const char *dir) {
    char path[4096];
    mp_json_doc *doc = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    mp_status st = mp_tok_load_hf(out, path);
    if (st) return st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (mp_json_parse_file(path, &doc) == MP_OK) {
        const mp_json *r = mp_json_root(doc);
        int64_t b, e;
        int bos = mp_tok_bos(*out), eos = mp_tok_eos(*out);
        if (mp_json_int64(mp_json_get(r, "bos_token_id"), &b) == 0) bos = (int)b;
        if (mp_json_int64(mp_json_get(r, "eos_token_id"), &e) == 0) eos = (int)e;
        if ((st = mp_tok_set_bos_eos(*out, bos, eos))) {
            st = mp_error_prefix(st, "%s", path);
            mp_tok_free(*out);
            *out = NULL;
        }
        mp_json_free(doc);
    }
    return st;
}

/* ---- format detection (declared in model.h) ---- */

mp_model_format mp_model_detect(const char *path) {
    static const unsigned char h5sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    struct stat sb;
    if (stat(path, &sb) != 0) return MP_FORMAT_UNKNOWN;
    if (S_ISDIR(sb.st_mode)) {
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
        return stat(cfg, &sb) == 0 && S_ISREG(sb.st_mode) ? MP_FORMAT_HF : MP_FORMAT_UNKNOWN;
    }
    if (!S_ISREG(sb.st_mode)) return MP_FORMAT_UNKNOWN; /* never open a FIFO or device to sniff it */
    unsigned char buf[8];
    FILE *fp = fopen(path, "rb");
    if (!fp) return MP_FORMAT_UNKNOWN;
    size_t n = fread(buf, 1, 8, fp);
    fclose(fp);
    if (n == 8 && memcmp(buf, h5sig, 8) == 0) return MP_FORMAT_CHECKPOINT;
    if (n >= 4 && memcmp(buf, "GGUF", 4) == 0) return MP_FORMAT_GGUF;
    return MP_FORMAT_LLAMA2C;
}

/* ---- writer ---- */

static int is_llama_like(const mp_config *c) {
    return c->norm == MP_NORM_RMS && c->mlp == MP_MLP_SWIGLU && c->pos == MP_POS_ROPE && !c->linear_bias;
}
/* Gemma (1): (1 + w) norms, the scaled embedding, GeGLU; Gemma 2 adds the post-norms (and may have soft caps
 * and its query scale); Gemma 3 the per-head q/k norm (and the sliding layers' own RoPE base).
 * 0: not Gemma, 1: gemma, 2: gemma2, 3: gemma3_text. */
static int gemma_kind(const mp_config *c) {
    if (!(c->norm_offset && c->embed_scale && c->mlp == MP_MLP_SWIGLU && c->gelu_tanh && !c->qkv_bias)) return 0;
    if (c->post_norms && c->pos == MP_POS_ROPE)
        return c->qk_norm == MP_QK_NORM_HEAD ? 3 : c->qk_norm == MP_QK_NORM_NONE && c->rope_local_theta == 0.0f ? 2 : 0;
    if (c->post_norms) return 0;
    return c->attn_softcap == 0.0f && c->final_softcap == 0.0f && c->query_pre_attn_scalar == 0.0f ? 1 : 0;
}
/* Any of the Gemma fields (mp_config's last rows). */
static int has_gemma_field(const mp_config *c) {
    return c->norm_offset || c->embed_scale || c->post_norms || c->attn_softcap != 0.0f || c->final_softcap != 0.0f ||
           c->query_pre_attn_scalar != 0.0f || (c->mlp == MP_MLP_SWIGLU && c->gelu_tanh) || c->rope_local_theta != 0.0f;
}
/* OLMo 2: Llama's SwiGLU and RoPE, no pre-norms, post-norms, the q/k norm over the whole projections, none of
 * Gemma's other fields, no biases, no window. */
static int is_olmo2_like(const mp_config *c) {
    return is_llama_like(c) && c->no_pre_norms && c->post_norms && c->qk_norm == MP_QK_NORM_FULL && !c->qkv_bias &&
           !c->norm_offset && !c->embed_scale && !c->gelu_tanh && c->attn_softcap == 0.0f &&
           c->final_softcap == 0.0f && c->query_pre_attn_scalar == 0.0f && c->sliding_window == 0;
}
static int is_gpt2_like(const mp_config *c) {
    return c->norm == MP_NORM_LAYER && c->mlp == MP_MLP_GELU && c->pos == MP_POS_LEARNED && c->qkv_bias &&
           c->linear_bias && c->n_kv_head == c->n_head && c->d_head * c->n_head == c->d_model;
}

/* GPT-NeoX: LayerNorm, GELU, RoPE on all or the first rope_dims channels (or none), q/k/v and linear
 * biases, one kv head per head; serial or parallel blocks. */
static int is_neox_like(const mp_config *c) {
    return c->norm == MP_NORM_LAYER && c->mlp == MP_MLP_GELU &&
           (c->pos == MP_POS_ROPE || c->pos == MP_POS_HALF_ROPE || c->pos == MP_POS_NONE) && c->qkv_bias &&
           c->linear_bias && c->n_kv_head == c->n_head && c->d_head * c->n_head == c->d_model &&
           c->qk_norm == MP_QK_NORM_NONE;
}
/* Phi-3: Llama's blocks; chosen for a partial rotation (Llama's config cannot hold it) or a model read
 * from Phi-3 files. */
static int is_phi3_like(const mp_model *m) {
    const mp_config *c = &m->cfg;
    return c->norm == MP_NORM_RMS && c->mlp == MP_MLP_SWIGLU && !c->qkv_bias && !c->linear_bias &&
           !c->parallel_attn && c->qk_norm == MP_QK_NORM_NONE && c->d_head * c->n_head == c->d_model &&
           (c->pos == MP_POS_HALF_ROPE || (c->pos == MP_POS_ROPE && m->format && strstr(m->format, "phi3")));
}
/* The fraction whose int(Dh * f) is rot (Python's truncation), rot / Dh when it reads back exactly. */
static double rotary_fraction(int rot, int Dh) {
    double f = (double)rot / Dh;
    return (int)((double)Dh * f) == rot ? f : (rot + 0.5) / Dh;
}

/* config.json, built as a jansson tree and dumped into mp_out's temporary file
 * (renamed over the final name by mp_out_commit). Reals with 9 significant
 * digits (JSON_REAL_PRECISION(9)) keep every float exact. */
static mp_status write_config(const mp_model *m, const char *dir) {
    const mp_config *c = &m->cfg;
    char path[4096];
    mp_out out;
    mp_status st;
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return mp_error(MP_ERR_ARG, "%s: path too long", dir);
    json_t *j;
    const int gk = gemma_kind(c);
    if (is_olmo2_like(c)) {
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:b, s:s}",
                      "architectures", "Olmo2ForCausalLM", "model_type", "olmo2", "hidden_size", c->d_model,
                      "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head, "num_key_value_heads",
                      c->n_kv_head, "head_dim", c->d_head, "intermediate_size", c->d_mlp, "vocab_size", c->vocab,
                      "max_position_embeddings", c->ctx, "rms_norm_eps", (double)c->norm_eps, "rope_theta",
                      (double)c->rope_theta, "hidden_act", "silu", "attention_bias", 0, "tie_word_embeddings",
                      c->tied, "torch_dtype", "float32");
        if (j && c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
            json_object_set_new(j, "rope_scaling", json_pack("{s:s, s:f}", "type", "linear", "factor",
                                                             (double)c->rope_scale)) != 0) {
            json_decref(j);
            j = NULL;
        }
    } else if (gk == 3) {
        /* Gemma 3: the period P of full-attention layers (none windowed: 1; all: n_layer + 1) as
         * sliding_window_pattern (transformers before layer_types) and as layer_types; the sliding layers' base */
        const int P = c->sliding_window <= 0 ? 1 : c->sliding_window_pattern > 0 ? c->sliding_window_pattern
                                                                                  : c->n_layer + 1;
        json_t *lt = json_array();
        for (int l = 0; lt && l < c->n_layer; l++)
            if (json_array_append_new(lt, json_string((l + 1) % P ? "sliding_attention" : "full_attention"))) {
                json_decref(lt);
                lt = NULL;
            }
        j = !lt ? NULL
                : json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:s, s:b, s:b, "
                            "s:f, s:i, s:i, s:o, s:s}",
                            "architectures", "Gemma3ForCausalLM", "model_type", "gemma3_text", "hidden_size",
                            c->d_model, "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head,
                            "num_key_value_heads", c->n_kv_head, "head_dim", c->d_head, "intermediate_size", c->d_mlp,
                            "vocab_size", c->vocab, "max_position_embeddings", c->ctx, "rms_norm_eps",
                            (double)c->norm_eps, "rope_theta", (double)c->rope_theta, "rope_local_base_freq",
                            (double)(c->rope_local_theta > 0.0f ? c->rope_local_theta : c->rope_theta),
                            "hidden_activation", "gelu_pytorch_tanh", "tie_word_embeddings", c->tied,
                            "attention_bias", 0, "query_pre_attn_scalar",
                            (double)(c->query_pre_attn_scalar > 0.0f ? c->query_pre_attn_scalar : c->d_head),
                            "sliding_window", c->sliding_window > 0 ? c->sliding_window : c->ctx,
                            "sliding_window_pattern", P, "layer_types", lt, "torch_dtype", "float32");
        if (j && (json_object_set_new(j, "attn_logit_softcapping",
                                      c->attn_softcap > 0.0f ? json_real(c->attn_softcap) : json_null()) ||
                  json_object_set_new(j, "final_logit_softcapping",
                                      c->final_softcap > 0.0f ? json_real(c->final_softcap) : json_null()) ||
                  json_object_set_new(j, "rope_scaling",
                                      c->rope_scale > 0.0f && c->rope_scale != 1.0f
                                          ? json_pack("{s:s, s:f}", "rope_type", "linear", "factor", (double)c->rope_scale)
                                          : json_null()))) {
            json_decref(j);
            j = NULL;
        }
    } else if (gk) {
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:s, s:b, s:s}",
                      "architectures", gk == 2 ? "Gemma2ForCausalLM" : "GemmaForCausalLM", "model_type",
                      gk == 2 ? "gemma2" : "gemma", "hidden_size", c->d_model, "num_hidden_layers", c->n_layer,
                      "num_attention_heads", c->n_head, "num_key_value_heads", c->n_kv_head, "head_dim", c->d_head,
                      "intermediate_size", c->d_mlp, "vocab_size", c->vocab, "max_position_embeddings", c->ctx,
                      "rms_norm_eps", (double)c->norm_eps, "rope_theta", (double)c->rope_theta, "hidden_act",
                      "gelu_pytorch_tanh", "hidden_activation", "gelu_pytorch_tanh", "tie_word_embeddings", c->tied,
                      "torch_dtype", "float32");
        /* Gemma 2: the caps (null: off), the query scale, the window of every other layer (none: as wide as the
         * context) */
        if (j && gk == 2 &&
            (json_object_set_new(j, "attn_logit_softcapping",
                                 c->attn_softcap > 0.0f ? json_real(c->attn_softcap) : json_null()) ||
             json_object_set_new(j, "final_logit_softcapping",
                                 c->final_softcap > 0.0f ? json_real(c->final_softcap) : json_null()) ||
             json_object_set_new(j, "query_pre_attn_scalar",
                                 json_real(c->query_pre_attn_scalar > 0.0f ? c->query_pre_attn_scalar : c->d_head)) ||
             json_object_set_new(j, "sliding_window", json_integer(c->sliding_window > 0 ? c->sliding_window : c->ctx)))) {
            json_decref(j);
            j = NULL;
        }
    } else if (!is_gpt2_like(c) && is_neox_like(c)) {
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:s, s:b, s:b, s:b, s:s}",
                      "architectures", "GPTNeoXForCausalLM", "model_type", "gpt_neox", "hidden_size", c->d_model,
                      "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head, "intermediate_size",
                      c->d_mlp, "vocab_size", c->vocab, "max_position_embeddings", c->ctx, "layer_norm_eps",
                      (double)c->norm_eps, "rotary_emb_base", (double)c->rope_theta, "rotary_pct",
                      rotary_fraction(rotary_channels(c), c->d_head), "hidden_act", c->gelu_tanh ? "gelu_new" : "gelu",
                      "use_parallel_residual", c->parallel_attn, "attention_bias", 1, "tie_word_embeddings", c->tied,
                      "torch_dtype", "float32");
        if (j && c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
            json_object_set_new(j, "rope_scaling", json_pack("{s:s, s:f}", "type", "linear", "factor",
                                                             (double)c->rope_scale)) != 0) {
            json_decref(j);
            j = NULL;
        }
    } else if (is_phi3_like(m)) {
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:s, s:b, s:n, s:n, s:s}",
                      "architectures", "Phi3ForCausalLM", "model_type", "phi3", "hidden_size", c->d_model,
                      "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head, "num_key_value_heads",
                      c->n_kv_head, "intermediate_size", c->d_mlp, "vocab_size", c->vocab, "max_position_embeddings",
                      c->ctx, "rms_norm_eps", (double)c->norm_eps, "rope_theta", (double)c->rope_theta,
                      "partial_rotary_factor", rotary_fraction(rotary_channels(c), c->d_head), "hidden_act", "silu",
                      "tie_word_embeddings", c->tied, "rope_scaling", "sliding_window", "torch_dtype", "float32");
        if (j && c->sliding_window > 0 &&
            json_object_set_new(j, "sliding_window", json_integer(c->sliding_window)) != 0) {
            json_decref(j);
            j = NULL;
        }
    } else if (is_gpt2_like(c)) {
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b}", "architectures", "GPT2LMHeadModel",
                      "model_type", "gpt2", "n_embd", c->d_model, "n_layer", c->n_layer, "n_head", c->n_head,
                      "n_inner", c->d_mlp, "n_positions", c->ctx, "vocab_size", c->vocab, "layer_norm_epsilon",
                      (double)c->norm_eps, "activation_function", c->gelu_tanh ? "gelu_new" : "gelu",
                      "tie_word_embeddings", c->tied);
    } else {
        /* a sliding window: mistral's "sliding_window", or qwen2's / qwen3's on every layer (max_window_layers 0) */
        const int qwen3 = c->qk_norm == MP_QK_NORM_HEAD, qwen = qwen3 || c->qkv_bias;
        const int mistral = c->sliding_window > 0 && !qwen;
        j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b}", "architectures",
                      qwen3 ? "Qwen3ForCausalLM" : c->qkv_bias ? "Qwen2ForCausalLM"
                      : mistral ? "MistralForCausalLM" : "LlamaForCausalLM",
                      "model_type", qwen3 ? "qwen3" : c->qkv_bias ? "qwen2" : mistral ? "mistral" : "llama",
                      "hidden_size", c->d_model, "num_hidden_layers", c->n_layer,
                      "num_attention_heads", c->n_head, "num_key_value_heads", c->n_kv_head, "head_dim", c->d_head,
                      "intermediate_size", c->d_mlp, "vocab_size", c->vocab, "max_position_embeddings", c->ctx,
                      "rms_norm_eps", (double)c->norm_eps, "rope_theta", (double)c->rope_theta, "hidden_act", "silu",
                      "tie_word_embeddings", c->tied);
        if (j && c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
            json_object_set_new(j, "rope_scaling", json_pack("{s:s, s:f}", "type", "linear", "factor",
                                                             (double)c->rope_scale)) != 0) {
            json_decref(j);
            j = NULL;
        }
        if (j && ((c->sliding_window > 0 &&
                   (json_object_set_new(j, "sliding_window", json_integer(c->sliding_window)) != 0 ||
                    (qwen && (json_object_set_new(j, "use_sliding_window", json_true()) != 0 ||
                              json_object_set_new(j, "max_window_layers", json_integer(0)) != 0)))) ||
                  (qwen3 && json_object_set_new(j, "attention_bias", json_boolean(c->qkv_bias)) != 0))) {
            json_decref(j);
            j = NULL;
        }
        if (j && json_object_set_new(j, "torch_dtype", json_string("float32")) != 0) {
            json_decref(j);
            j = NULL;
        }
    }
    if (!j) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    if ((st = mp_out_begin(&out, path)) != MP_OK) {
        json_decref(j);
        return st;
    }
    FILE *f = mp_out_fdopen(&out);
    if (!f) {
        json_decref(j);
        mp_out_abort(&out);
        return MP_ERR_IO;
    }
    int bad = json_dumpf(j, f, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0 || fputc('\n', f) == EOF || ferror(f);
    json_decref(j);
    if (bad) {
        mp_out_abort(&out);
        return mp_error(MP_ERR_IO, "%s: write failed", path);
    }
    return mp_out_commit(&out, 0);
}

mp_status mp_model_save_hf(const mp_model *m, const char *dir) {
    if (m->q) { /* quantized weights: save a float32 copy (decoded on demand) */
        mp_model *f32 = NULL;
        mp_status qs = mp_model_dequantized_copy(m, &f32);
        if (!qs) qs = mp_model_save_hf(f32, dir);
        mp_model_free(f32);
        return qs;
    }
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    int gpt2 = is_gpt2_like(c), neox = !gpt2 && is_neox_like(c), phi3 = !gpt2 && !neox && is_phi3_like(m);
    const int gk = gemma_kind(c), olmo2 = is_olmo2_like(c);
    if (c->rel_values > 0)
        return mp_error(MP_ERR_ARG, "%s: rel_values (Shaw relative values, R = %d) has no Hugging Face form; save as "
                        ".h5", dir, c->rel_values);
    if (c->no_pre_norms && !olmo2)
        return mp_error(MP_ERR_ARG, "%s: a block without pre-norms (pre_norms = false) has a Hugging Face form only as "
                        "OLMo 2 (RMSNorm, SwiGLU, RoPE, post_norms, qk_norm full, no biases, no window, none of "
                        "Gemma's fields); save as .h5", dir);
    if (!gk && !olmo2 && has_gemma_field(c))
        return mp_error(MP_ERR_ARG, "%s: this model's Gemma fields (norm_offset, embed_scale, GeGLU, post_norms, soft "
                        "caps, query_pre_attn_scalar, qk_norm, rope_local_theta) match none of Hugging Face's gemma, "
                        "gemma2 and gemma3_text; save as .h5", dir);
    if (gk == 3 && c->rope_local_theta == 0.0f && c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
        c->sliding_window > 0)
        return mp_error(MP_ERR_ARG, "%s: gemma3_text's sliding layers take no RoPE scaling; this model scales every "
                        "layer's (rope_scale without rope_local_theta); save as .h5 or GGUF", dir);
    if (!gpt2 && !neox && !phi3 && !is_llama_like(c))
        return mp_error(MP_ERR_ARG, "%s: only Llama/Qwen2/Phi-3/Gemma-style (RMSNorm, SwiGLU or GeGLU, RoPE), "
                        "GPT-2-style and GPT-NeoX-style (LayerNorm, GELU, partial RoPE, biases) models can be written "
                        "as Hugging Face folders", dir);
    if (c->parallel_attn && !neox)
        return mp_error(MP_ERR_ARG, "%s: parallel attention and MLP (parallel_attn) has a Hugging Face form only in "
                        "GPT-NeoX-style models (LayerNorm, GELU, RoPE, biases)", dir);
    if (c->n_rope_freqs)
        return mp_error(MP_ERR_ARG, "%s: RoPE frequency divisors cannot be expressed in config.json", dir);
    if (phi3 && c->rope_scale > 0.0f && c->rope_scale != 1.0f)
        return mp_error(MP_ERR_ARG, "%s: Phi-3's config.json takes no linear RoPE scaling (rope_scale)", dir);
    if (c->rope_scaling != MP_ROPE_SCALING_NONE || (c->rope_dims && !neox && !phi3))
        return mp_error(MP_ERR_ARG, "%s: this model's inference-time RoPE scaling (PI/NTK/YaRN) or partial rotation "
                        "is not written to config.json; turn it off or save as .h5", dir);
    if (c->attn != MP_ATTN_SOFTMAX)
        return mp_error(MP_ERR_ARG, "%s: attention variant %s has no Hugging Face form (softmax only); save as .h5", dir,
                        mp_attn_name(c->attn));
    /* config.json holds one window on every layer (mistral, qwen2/3, phi3), or Gemma 2's on every other one */
    if (c->sliding_window > 0 && gk != 3 &&
        (gpt2 || gk == 1 || olmo2 || (gk == 2 ? c->sliding_window_pattern != 2 : c->sliding_window_pattern > 0)))
        return mp_error(MP_ERR_ARG, "%s: a sliding window %s has no Hugging Face config.json form here (mistral and "
                        "qwen2 hold one window on every layer, gemma2 one on every other layer); save as .h5 or GGUF",
                        dir, gpt2 ? "on a GPT-2-style model" : gk == 1 ? "on a Gemma (1) model"
                        : "with this per-layer sliding_window_pattern");
    if (c->qk_norm == MP_QK_NORM_FULL && !olmo2)
        return mp_error(MP_ERR_ARG, "%s: the q/k norm over the whole projection (qk_norm full) has a Hugging Face "
                        "form only in OLMo 2 (pre_norms = false, post_norms); save as .h5", dir);
    if (mkdir(dir, 0777) && errno != EEXIST) return mp_error(MP_ERR_IO, "%s: cannot create folder: %s", dir, strerror(errno));
    const size_t D = (size_t)c->d_model, V = (size_t)c->vocab, M = (size_t)c->d_mlp, L = (size_t)c->n_layer;
    const size_t HD = (size_t)c->n_head * c->d_head, KD = (size_t)c->n_kv_head * c->d_head;
    size_t cap = 16 + L * 24;
    mp_st_entry *e = mp_calloc(cap, sizeof *e, "tensor list");
    char (*names)[96] = mp_calloc(cap, 96, "tensor names");
    uint64_t (*shapes)[2] = mp_calloc(cap, sizeof *shapes, "tensor shapes");
    float **owned = mp_calloc(cap, sizeof *owned, "tensor copies");
    size_t n = 0, n_own = 0; /* tensors; copies (several may precede their tensor's ADD) */
    mp_status st = MP_OK;
    if (!e || !names || !shapes || !owned) { st = MP_ERR_NOMEM; goto cleanup; }
#define ADD(nm_fmt, l, ptr, s0, s1) do { \
        { const char *f_ = nm_fmt; snprintf(names[n], 96, f_, (int)(l)); } \
        shapes[n][0] = (s0); shapes[n][1] = (s1); \
        e[n].name = names[n]; e[n].n_dims = shapes[n][1] ? 2 : 1; e[n].shape = shapes[n]; e[n].data = (ptr); n++; \
    } while (0)
#define COPY(dst, cnt) do { if (n_own == cap || !(dst = owned[n_own++] = mp_malloc((cnt) * sizeof(float), "a tensor copy"))) { st = MP_ERR_NOMEM; goto cleanup; } } while (0)
    if (neox || phi3) {
        const int rot = rotary_channels(c), Dh = c->d_head, H = c->n_head;
        float *w, *tmp = NULL;
        COPY(tmp, (size_t)Dh * D); /* the permutation's scratch, freed with the copies */
        if (neox) {
            ADD("gpt_neox.embed_in.weight", 0, p->embed, V, D);
            ADD("gpt_neox.final_layer_norm.weight", 0, p->lnf_w, D, 0);
            ADD("gpt_neox.final_layer_norm.bias", 0, p->lnf_b, D, 0);
            if (!c->tied) ADD("embed_out.weight", 0, p->unembed, V, D);
        } else {
            ADD("model.embed_tokens.weight", 0, p->embed, V, D);
            ADD("model.norm.weight", 0, p->lnf_w, D, 0);
            if (!c->tied) ADD("lm_head.weight", 0, p->unembed, V, D);
        }
        for (size_t l = 0; l < L; l++) {
            float *q, *k;
            COPY(q, HD * D);
            memcpy(q, p->wq + l * HD * D, HD * D * sizeof(float));
            permute_rotary(q, tmp, H, Dh, rot, D, 0);
            COPY(k, KD * D);
            memcpy(k, p->wk + l * KD * D, KD * D * sizeof(float));
            permute_rotary(k, tmp, c->n_kv_head, Dh, rot, D, 0);
            const float *v = p->wv + l * KD * D;
            if (phi3) {
                ADD("model.layers.%d.input_layernorm.weight", l, p->ln1_w + l * D, D, 0);
                COPY(w, (HD + 2 * KD) * D);
                memcpy(w, q, HD * D * sizeof(float));
                memcpy(w + HD * D, k, KD * D * sizeof(float));
                memcpy(w + (HD + KD) * D, v, KD * D * sizeof(float));
                ADD("model.layers.%d.self_attn.qkv_proj.weight", l, w, HD + 2 * KD, D);
                ADD("model.layers.%d.self_attn.o_proj.weight", l, p->wo + l * D * HD, D, HD);
                ADD("model.layers.%d.post_attention_layernorm.weight", l, p->ln2_w + l * D, D, 0);
                COPY(w, 2 * M * D);
                memcpy(w, p->w1 + l * M * D, M * D * sizeof(float));
                memcpy(w + M * D, p->w3 + l * M * D, M * D * sizeof(float));
                ADD("model.layers.%d.mlp.gate_up_proj.weight", l, w, 2 * M, D);
                ADD("model.layers.%d.mlp.down_proj.weight", l, p->w2 + l * M * D, D, M);
                continue;
            }
            /* NeoX: rows [H, 3, Dh], the biases alike */
            float *bq, *bk, *b;
            COPY(bq, HD);
            memcpy(bq, p->bq + l * HD, HD * sizeof(float));
            permute_rotary(bq, tmp, H, Dh, rot, 1, 0);
            COPY(bk, KD);
            memcpy(bk, p->bk + l * KD, KD * sizeof(float));
            permute_rotary(bk, tmp, H, Dh, rot, 1, 0);
            COPY(w, 3 * D * D);
            COPY(b, 3 * D);
            for (int h = 0; h < H; h++)
                for (int j = 0; j < 3; j++) {
                    const float *src = j == 0 ? q : j == 1 ? k : v, *bs = j == 0 ? bq : j == 1 ? bk : p->bv + l * KD;
                    memcpy(w + (size_t)(3 * h + j) * Dh * D, src + (size_t)h * Dh * D, (size_t)Dh * D * sizeof(float));
                    memcpy(b + (size_t)(3 * h + j) * Dh, bs + (size_t)h * Dh, (size_t)Dh * sizeof(float));
                }
            ADD("gpt_neox.layers.%d.input_layernorm.weight", l, p->ln1_w + l * D, D, 0);
            ADD("gpt_neox.layers.%d.input_layernorm.bias", l, p->ln1_b + l * D, D, 0);
            ADD("gpt_neox.layers.%d.attention.query_key_value.weight", l, w, 3 * D, D);
            ADD("gpt_neox.layers.%d.attention.query_key_value.bias", l, b, 3 * D, 0);
            ADD("gpt_neox.layers.%d.attention.dense.weight", l, p->wo + l * D * D, D, D);
            ADD("gpt_neox.layers.%d.attention.dense.bias", l, p->bo + l * D, D, 0);
            ADD("gpt_neox.layers.%d.post_attention_layernorm.weight", l, p->ln2_w + l * D, D, 0);
            ADD("gpt_neox.layers.%d.post_attention_layernorm.bias", l, p->ln2_b + l * D, D, 0);
            ADD("gpt_neox.layers.%d.mlp.dense_h_to_4h.weight", l, p->w1 + l * M * D, M, D);
            ADD("gpt_neox.layers.%d.mlp.dense_h_to_4h.bias", l, p->b1 + l * M, M, 0);
            ADD("gpt_neox.layers.%d.mlp.dense_4h_to_h.weight", l, p->w2 + l * M * D, D, M);
            ADD("gpt_neox.layers.%d.mlp.dense_4h_to_h.bias", l, p->b2 + l * D, D, 0);
        }
    } else if (!gpt2) {
        ADD("model.embed_tokens.weight", 0, p->embed, V, D);
        if (gk) { /* Gemma: the file's w is the factor 1 + w less 1 */
            float *nw;
            COPY(nw, D);
            for (size_t i = 0; i < D; i++) nw[i] = p->lnf_w[i] - 1.0f;
            ADD("model.norm.weight", 0, nw, D, 0);
        } else {
            ADD("model.norm.weight", 0, p->lnf_w, D, 0);
        }
        if (!c->tied) ADD("lm_head.weight", 0, p->unembed, V, D);
        float *tmp = mp_malloc((size_t)c->d_head * D * sizeof(float), "a RoPE permutation"), *w;
        if (!tmp) { st = MP_ERR_NOMEM; goto cleanup; }
/* a norm weight of layer l: as is, or (Gemma) a copy less 1 */
#define NORM(nm_fmt, l, src) do { \
        const float *s_ = (src); \
        if (gk) { float *c_; COPY(c_, D); for (size_t i_ = 0; i_ < D; i_++) c_[i_] = s_[i_] - 1.0f; s_ = c_; } \
        ADD(nm_fmt, l, (float *)s_, D, 0); \
    } while (0)
        for (size_t l = 0; l < L; l++) {
            if (!olmo2) NORM("model.layers.%d.input_layernorm.weight", l, p->ln1_w + l * D);
            COPY(w, HD * D);
            memcpy(w, p->wq + l * HD * D, HD * D * sizeof(float));
            mp_rope_permute_rows(w, tmp, c->n_head, c->d_head, D, 0);
            ADD("model.layers.%d.self_attn.q_proj.weight", l, w, HD, D);
            COPY(w, KD * D);
            memcpy(w, p->wk + l * KD * D, KD * D * sizeof(float));
            mp_rope_permute_rows(w, tmp, c->n_kv_head, c->d_head, D, 0);
            ADD("model.layers.%d.self_attn.k_proj.weight", l, w, KD, D);
            ADD("model.layers.%d.self_attn.v_proj.weight", l, p->wv + l * KD * D, KD, D);
            if (c->qk_norm == MP_QK_NORM_HEAD) { /* back to half-split within the head (Gemma 3: less 1) */
                const size_t Dh = (size_t)c->d_head;
                COPY(w, Dh);
                memcpy(w, p->q_norm + l * Dh, Dh * sizeof(float));
                if (gk) norm_offset(w, Dh, -1.0f);
                mp_rope_permute_rows(w, tmp, 1, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.q_norm.weight", l, w, Dh, 0);
                COPY(w, Dh);
                memcpy(w, p->k_norm + l * Dh, Dh * sizeof(float));
                if (gk) norm_offset(w, Dh, -1.0f);
                mp_rope_permute_rows(w, tmp, 1, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.k_norm.weight", l, w, Dh, 0);
            } else if (olmo2) { /* the whole projections' weights, half-split within each head */
                COPY(w, HD);
                memcpy(w, p->q_norm + l * HD, HD * sizeof(float));
                mp_rope_permute_rows(w, tmp, c->n_head, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.q_norm.weight", l, w, HD, 0);
                COPY(w, KD);
                memcpy(w, p->k_norm + l * KD, KD * sizeof(float));
                mp_rope_permute_rows(w, tmp, c->n_kv_head, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.k_norm.weight", l, w, KD, 0);
            }
            if (c->qkv_bias) {
                COPY(w, HD);
                memcpy(w, p->bq + l * HD, HD * sizeof(float));
                mp_rope_permute_rows(w, tmp, c->n_head, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.q_proj.bias", l, w, HD, 0);
                COPY(w, KD);
                memcpy(w, p->bk + l * KD, KD * sizeof(float));
                mp_rope_permute_rows(w, tmp, c->n_kv_head, c->d_head, 1, 0);
                ADD("model.layers.%d.self_attn.k_proj.bias", l, w, KD, 0);
                ADD("model.layers.%d.self_attn.v_proj.bias", l, p->bv + l * KD, KD, 0);
            }
            ADD("model.layers.%d.self_attn.o_proj.weight", l, p->wo + l * D * HD, D, HD);
            if (olmo2) {
                NORM("model.layers.%d.post_attention_layernorm.weight", l, p->ln1p_w + l * D);
                NORM("model.layers.%d.post_feedforward_layernorm.weight", l, p->ln2p_w + l * D);
            } else if (gk >= 2) {
                NORM("model.layers.%d.post_attention_layernorm.weight", l, p->ln1p_w + l * D);
                NORM("model.layers.%d.pre_feedforward_layernorm.weight", l, p->ln2_w + l * D);
                NORM("model.layers.%d.post_feedforward_layernorm.weight", l, p->ln2p_w + l * D);
            } else {
                NORM("model.layers.%d.post_attention_layernorm.weight", l, p->ln2_w + l * D);
            }
            ADD("model.layers.%d.mlp.gate_proj.weight", l, p->w1 + l * M * D, M, D);
            ADD("model.layers.%d.mlp.up_proj.weight", l, p->w3 + l * M * D, M, D);
            ADD("model.layers.%d.mlp.down_proj.weight", l, p->w2 + l * M * D, D, M);
        }
        free(tmp);
    } else {
        float *w;
        ADD("wte.weight", 0, p->embed, V, D);
        ADD("wpe.weight", 0, p->pos_embed, (size_t)c->ctx, D);
        ADD("ln_f.weight", 0, p->lnf_w, D, 0);
        ADD("ln_f.bias", 0, p->lnf_b, D, 0);
        if (!c->tied) ADD("lm_head.weight", 0, p->unembed, V, D);
        for (size_t l = 0; l < L; l++) {
            ADD("h.%d.ln_1.weight", l, p->ln1_w + l * D, D, 0);
            ADD("h.%d.ln_1.bias", l, p->ln1_b + l * D, D, 0);
            COPY(w, 3 * D * D);
            for (int j = 0; j < 3; j++) {
                const float *src = (j == 0 ? p->wq : j == 1 ? p->wk : p->wv) + l * D * D;
                for (size_t o = 0; o < D; o++)
                    for (size_t i = 0; i < D; i++) w[i * 3 * D + j * D + o] = src[o * D + i];
            }
            ADD("h.%d.attn.c_attn.weight", l, w, D, 3 * D);
            COPY(w, 3 * D);
            memcpy(w, p->bq + l * D, D * sizeof(float));
            memcpy(w + D, p->bk + l * D, D * sizeof(float));
            memcpy(w + 2 * D, p->bv + l * D, D * sizeof(float));
            ADD("h.%d.attn.c_attn.bias", l, w, 3 * D, 0);
            COPY(w, D * D);
            transpose(w, p->wo + l * D * D, D, D);
            ADD("h.%d.attn.c_proj.weight", l, w, D, D);
            ADD("h.%d.attn.c_proj.bias", l, p->bo + l * D, D, 0);
            ADD("h.%d.ln_2.weight", l, p->ln2_w + l * D, D, 0);
            ADD("h.%d.ln_2.bias", l, p->ln2_b + l * D, D, 0);
            COPY(w, M * D);
            transpose(w, p->w1 + l * M * D, M, D);
            ADD("h.%d.mlp.c_fc.weight", l, w, D, M);
            ADD("h.%d.mlp.c_fc.bias", l, p->b1 + l * M, M, 0);
            COPY(w, M * D);
            transpose(w, p->w2 + l * M * D, D, M);
            ADD("h.%d.mlp.c_proj.weight", l, w, M, D);
            ADD("h.%d.mlp.c_proj.bias", l, p->b2 + l * D, D, 0);
        }
    }
#undef NORM
#undef ADD
#undef COPY
    {
        char path[4096];
        static const char *meta[] = {"format", "pt", NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if ((st = mp_safetensors_write(path, e, n, meta))) goto cleanup;
    }
    st = write_config(m, dir);
cleanup:
    if (owned)
        for (size_t i = 0; i < cap; i++) free(owned[i]);
    free(owned);
    free(e);
    free(names);
    free(shapes);
    return st;
}
