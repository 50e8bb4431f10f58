/* export_gguf.c — writes a model as a GGUF file that llama.cpp can run
 * (gguf.h writer): general.architecture llama / qwen2 / qwen3 / gpt2 with its
 * hyper-parameters, llama.cpp tensor names (token_embd.weight,
 * blk.N.attn_q.weight, ..., output_norm.weight, output.weight), and the
 * tokenizer (tokenizer.ggml.*) gathered from its source file.
 *
 * RoPE: llama.cpp's llama architecture rotates adjacent pairs (its "normal"
 * RoPE), mechprobe's layout: q/k rows are written as they are. qwen2 uses the
 * NeoX (half-split) RoPE, so q/k rows and biases are permuted back to
 * half-split. qwen3 (qk_norm head) is qwen2's layout plus attn_q_norm /
 * attn_k_norm [head size], permuted back within the head like the rows.
 * olmo2 (pre_norms = false, post_norms, qk_norm full) is qwen2's layout
 * without attn_norm / ffn_norm, with post_attention_norm / post_ffw_norm and
 * attn_q_norm [H*Dh] / attn_k_norm [K*Dh] permuted back within each head.
 * gpt2 has no RoPE; its q/k/v are fused into attn_qkv.
 * gptneox (LayerNorm, exact GELU, biases, parallel or serial blocks) and phi3
 * (RMSNorm, SwiGLU, no biases; chosen for a partial rotation or a model read
 * from Phi-3 files) rotate the first rope.dimension_count channels NeoX-style:
 * rows permuted back to half-split within them; q | k | v fused into attn_qkv,
 * phi3's gate | up into ffn_up.
 * gemma / gemma2 / gemma3: NeoX rows; the norm weights (q/k norms
 * included) held as 1 + w, written as is (llama.cpp's converter adds the 1).
 * gemma3 (qk_norm head, post_norms): llama.cpp hard-codes what Hugging Face's
 * config holds (every 6th layer global, the sliding layers' base 10000, the
 * query scale), so the file also carries the pattern as
 * gemma3.attention.sliding_window_pattern (the period), the sliding
 * layers' base as gemma3.rope.freq_base_swa and mechprobe's own
 * gemma3.attention.query_pre_attn_scalar (load_gguf.c reads them). */
#include "gguf.h"
#include "json.h"
#include "formats.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mp_gguf_writer *w;
    uint32_t type;
    float **owned;   /* copies that must live until the write */
    size_t n_owned, cap_owned;
} ex;

static float *keep(ex *x, size_t n) {
    if (x->n_owned == x->cap_owned) {
        size_t nc = x->cap_owned ? 2 * x->cap_owned : 64;
        float **o = realloc(x->owned, nc * sizeof *o);
        if (!o) return NULL;
        x->owned = o;
        x->cap_owned = nc;
    }
    float *p = mp_malloc((n ? n : 1) * sizeof(float), "a tensor copy");
    if (p) x->owned[x->n_owned++] = p;
    return p;
}

/* A PyTorch [rows, cols] weight (cols == 0: a vector [rows]) as ggml dims
 * {cols, rows}; 2-D weights in x->type (Q8_0 needs cols % 32 == 0, else F16). */
static mp_status add(ex *x, const char *fmt, int l, const float *data, uint64_t rows, uint64_t cols) {
    char name[128];
    snprintf(name, sizeof name, fmt, l);
    if (!cols) {
        uint64_t d[1] = {rows};
        return mp_gguf_writer_add_tensor(x->w, name, MP_GGML_F32, 1, d, data);
    }
    uint64_t d[2] = {cols, rows};
    uint32_t t = x->type;
    if (t == MP_GGML_Q8_0 && cols % 32 != 0) t = MP_GGML_F16;
    return mp_gguf_writer_add_tensor(x->w, name, t, 2, d, data);
}

/* ---- tokenizers ---- */

/* A llama2.c tokenizer.bin: model "llama" with U+2581 for spaces. */
static mp_status tok_llama2c(ex *x, const char *path, int vocab) {
    FILE *f = fopen(path, "rb");
    if (!f) return mp_error(MP_ERR_IO, "%s: cannot open the tokenizer", path);
    mp_status st = MP_OK;
    char **toks = mp_calloc((size_t)vocab, sizeof *toks, "tokens");
    float *scores = mp_calloc((size_t)vocab, sizeof *scores, "scores");
    int32_t *types = mp_calloc((size_t)vocab, sizeof *types, "token types");
    int max_len;
    if (!toks || !scores || !types) { st = MP_ERR_NOMEM; goto cleanup; }
    if (fread(&max_len, 4, 1, f) != 1 || max_len <= 0 || max_len > 65536) {
        st = mp_error(MP_ERR_FORMAT, "%s: bad tokenizer header", path);
        goto cleanup;
    }
    for (int i = 0; i < vocab; i++) {
        int len;
        if (fread(&scores[i], 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1 || len < 0 || len > max_len) {
            st = mp_error(MP_ERR_FORMAT, "%s: token %d is truncated or too long", path, i);
            goto cleanup;
        }
        char buf[65537];
        if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
            st = mp_error(MP_ERR_FORMAT, "%s: token %d is truncated", path, i);
            goto cleanup;
        }
        buf[len] = '\0';
        /* ' ' -> U+2581 (3 bytes) */
        size_t spaces = 0;
        for (int k = 0; k < len; k++) spaces += buf[k] == ' ';
        char *s = toks[i] = mp_malloc((size_t)len + 2 * spaces + 1, "a token");
        if (!s) { st = MP_ERR_NOMEM; goto cleanup; }
        for (int k = 0; k < len; k++) {
            if (buf[k] == ' ') { *s++ = (char)0xE2; *s++ = (char)0x96; *s++ = (char)0x81; }
            else *s++ = buf[k];
        }
        *s = '\0';
        unsigned hx;
        char tail;
        types[i] = i == 0 ? MP_TOK_TYPE_UNKNOWN : i <= 2 ? MP_TOK_TYPE_CONTROL
                 : (len == 6 && sscanf(buf, "<0x%2X%c", &hx, &tail) == 2 && tail == '>') ? MP_TOK_TYPE_BYTE
                 : MP_TOK_TYPE_NORMAL;
    }
    if ((st = mp_gguf_writer_set_str(x->w, "tokenizer.ggml.model", "llama")) ||
        (st = mp_gguf_writer_set_str_array(x->w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_array(x->w, "tokenizer.ggml.scores", MP_GGUF_FLOAT32, scores, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_array(x->w, "tokenizer.ggml.token_type", MP_GGUF_INT32, types, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.eos_token_id", 2)) ||
        (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = mp_gguf_writer_set_bool(x->w, "tokenizer.ggml.add_bos_token", 1)) ||
        (st = mp_gguf_writer_set_bool(x->w, "tokenizer.ggml.add_eos_token", 0)))
        goto cleanup;
cleanup:
    if (toks)
        for (int i = 0; i < vocab; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    fclose(f);
    return st;
}

/* Every tokenizer.ggml.* key of a GGUF file. */
static mp_status tok_copy_gguf(ex *x, const char *path) {
    mp_gguf *g = NULL;
    mp_status st = mp_gguf_open(path, &g);
    if (st) return st;
    for (size_t i = 0; i < mp_gguf_n_kv(g) && !st; i++) {
        const char *k = mp_gguf_kv_key(g, i);
        if (strncmp(k, "tokenizer.", 10) == 0) st = mp_gguf_writer_set(x->w, k, mp_gguf_kv_value(g, i));
    }
    mp_gguf_close(g);
    return st;
}

/* A byte-level BPE tokenizer.json: vocab (id order), merges, added tokens. */
static mp_status tok_hf(ex *x, const char *path, const mp_tok *tok, int vocab) {
    mp_json_doc *doc = NULL;
    mp_status st = mp_json_parse_file(path, &doc);
    if (st) return st;
    const mp_json *model = mp_json_get(mp_json_root(doc), "model"), *mj = mp_json_get(model, "merges");
    size_t nm = mp_json_len(mj);
    const char **toks = mp_calloc((size_t)vocab, sizeof *toks, "tokens");
    int32_t *types = mp_calloc((size_t)vocab, sizeof *types, "token types");
    char **merges = mp_calloc(nm ? nm : 1, sizeof *merges, "merges");
    if (!toks || !types || !merges) { st = MP_ERR_NOMEM; goto cleanup; }
    for (int i = 0; i < vocab; i++) {
        toks[i] = mp_tok_piece(tok, i);
        types[i] = MP_TOK_TYPE_NORMAL;
    }
    const mp_json *added = mp_json_get(mp_json_root(doc), "added_tokens");
    for (size_t i = 0; i < mp_json_len(added); i++) {
        int64_t id;
        const mp_json *a = mp_json_at(added, i);
        if (mp_json_int64(mp_json_get(a, "id"), &id) == 0 && id >= 0 && id < vocab)
            types[id] = mp_json_bool(mp_json_get(a, "special")) ? MP_TOK_TYPE_CONTROL : MP_TOK_TYPE_USER_DEFINED;
    }
    for (size_t i = 0; i < nm; i++) {
        const mp_json *v = mp_json_at(mj, i);
        const char *a, *b;
        if (mp_json_type_of(v) == MP_JSON_STRING) {
            a = mp_json_string(v, NULL);
            merges[i] = a ? strdup(a) : NULL;
        } else if ((a = mp_json_string(mp_json_at(v, 0), NULL)) && (b = mp_json_string(mp_json_at(v, 1), NULL))) {
            size_t la = strlen(a), lb = strlen(b);
            if ((merges[i] = malloc(la + lb + 2))) {
                memcpy(merges[i], a, la);
                merges[i][la] = ' ';
                memcpy(merges[i] + la + 1, b, lb + 1);
            }
        }
        if (!merges[i]) { st = mp_error(MP_ERR_FORMAT, "%s: merge %zu is malformed", path, i); goto cleanup; }
    }
    for (int i = 0; i < vocab; i++)
        if (!toks[i]) { /* a model vocabulary larger than the tokenizer's (padding) */
            st = mp_error(MP_ERR_ARG, "%s: the tokenizer has %d tokens, the model %d; cannot export", path,
                          mp_tok_vocab(tok), vocab);
            goto cleanup;
        }
    const char *pre = mp_tok_pre(tok);
    if ((st = mp_gguf_writer_set_str(x->w, "tokenizer.ggml.model", "gpt2")) ||
        (st = mp_gguf_writer_set_str(x->w, "tokenizer.ggml.pre", pre && strcmp(pre, "custom") ? pre : "default")) ||
        (st = mp_gguf_writer_set_str_array(x->w, "tokenizer.ggml.tokens", toks, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_array(x->w, "tokenizer.ggml.token_type", MP_GGUF_INT32, types, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_str_array(x->w, "tokenizer.ggml.merges", (const char *const *)merges, nm)) ||
        (st = mp_gguf_writer_set_bool(x->w, "tokenizer.ggml.add_bos_token", mp_tok_add_bos(tok))))
        goto cleanup;
    if (mp_tok_bos(tok) >= 0 && (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.bos_token_id", (uint32_t)mp_tok_bos(tok))))
        goto cleanup;
    if (mp_tok_eos(tok) >= 0 && (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.eos_token_id", (uint32_t)mp_tok_eos(tok))))
        goto cleanup;
cleanup:
    if (merges)
        for (size_t i = 0; i < nm; i++) free(merges[i]);
    free(merges);
    free(toks);
    free(types);
    mp_json_free(doc);
    return st;
}

/* "bytes" models: ids 0..255 are the bytes (GPT-2's byte-to-unicode spelling,
 * no merges, so every byte stays one token), 256 is BOS, the rest unused. */
static mp_status tok_bytes(ex *x, int vocab) {
    char (*s)[24] = mp_calloc((size_t)vocab, 24, "tokens");
    const char **toks = mp_calloc((size_t)vocab, sizeof *toks, "tokens");
    int32_t *types = mp_calloc((size_t)vocab, sizeof *types, "token types");
    mp_status st = MP_OK;
    if (!s || !toks || !types) { st = MP_ERR_NOMEM; goto cleanup; }
    for (int i = 0; i < vocab; i++) {
        if (i < 256) {
            uint32_t cp = mp_bpe_byte_to_cp((unsigned char)i);
            if (cp < 0x80) s[i][0] = (char)cp;
            else { s[i][0] = (char)(0xC0 | (cp >> 6)); s[i][1] = (char)(0x80 | (cp & 0x3F)); }
            types[i] = MP_TOK_TYPE_NORMAL;
        } else {
            snprintf(s[i], 24, i == 256 ? "<s>" : "<unused%d>", i);
            types[i] = i == 256 ? MP_TOK_TYPE_CONTROL : MP_TOK_TYPE_UNUSED;
        }
        toks[i] = s[i];
    }
    if ((st = mp_gguf_writer_set_str(x->w, "tokenizer.ggml.model", "gpt2")) ||
        (st = mp_gguf_writer_set_str(x->w, "tokenizer.ggml.pre", "default")) ||
        (st = mp_gguf_writer_set_str_array(x->w, "tokenizer.ggml.tokens", toks, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_array(x->w, "tokenizer.ggml.token_type", MP_GGUF_INT32, types, (uint64_t)vocab)) ||
        (st = mp_gguf_writer_set_str_array(x->w, "tokenizer.ggml.merges", NULL, 0)) ||
        (st = mp_gguf_writer_set_u32(x->w, "tokenizer.ggml.bos_token_id", 256)) ||
        (st = mp_gguf_writer_set_bool(x->w, "tokenizer.ggml.add_bos_token", 1)))
        goto cleanup;
cleanup:
    free(s);
    free(toks);
    free(types);
    return st;
}

static mp_status write_tokenizer(ex *x, const mp_model *m, const char *src) {
    const int V = m->cfg.vocab;
    if (!src) return strcmp(m->tokenizer, "bytes") == 0 && V >= 257 ? tok_bytes(x, V) : MP_OK;
    mp_model_format f = mp_model_detect(src);
    if (f == MP_FORMAT_GGUF) return tok_copy_gguf(x, src);
    char path[4096];
    if (f == MP_FORMAT_HF) snprintf(path, sizeof path, "%s/tokenizer.json", src);
    else snprintf(path, sizeof path, "%s", src);
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) {
        mp_tok *t = NULL;
        mp_status st = f == MP_FORMAT_HF ? mp_tok_load_hf_dir(&t, src) : mp_tok_load_hf(&t, path);
        if (!st) st = tok_hf(x, path, t, V);
        mp_tok_free(t);
        return st;
    }
    return tok_llama2c(x, path, V);
}

mp_status mp_model_save_gguf(const mp_model *m, const char *tok_source, const char *path, uint32_t type) {
    if (m->q) { /* quantized weights: save a float32 copy (decoded on demand) */
        mp_model *f32 = NULL;
        mp_status qs = mp_model_dequantized_copy(m, &f32);
        if (!qs) qs = mp_model_save_gguf(f32, tok_source, path, type);
        mp_model_free(f32);
        return qs;
    }
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    if (c->rel_values > 0)
        return mp_error(MP_ERR_ARG, "%s: rel_values (Shaw relative values, R = %d) has no GGUF / llama.cpp form; save "
                        "as .h5", path, c->rel_values);
    if (type != MP_GGML_F32 && type != MP_GGML_F16 && type != MP_GGML_Q8_0)
        return mp_error(MP_ERR_ARG, "%s: GGUF export type must be f32, f16 or q8_0", path);
    /* gptneox, phi3: the NeoX-RoPE architectures with a partial rotation (see the header) */
    const int rope_ok = c->pos == MP_POS_ROPE || c->pos == MP_POS_HALF_ROPE;
    const int to_neox = c->norm == MP_NORM_LAYER && c->mlp == MP_MLP_GELU && !c->gelu_tanh &&
                        (rope_ok || c->pos == MP_POS_NONE) && c->qkv_bias && c->linear_bias && !c->n_rope_freqs &&
                        c->n_kv_head == c->n_head && c->n_head * c->d_head == c->d_model &&
                        c->qk_norm == MP_QK_NORM_NONE;
    const int to_phi3 = !to_neox && c->qk_norm == MP_QK_NORM_NONE && c->norm == MP_NORM_RMS && c->mlp == MP_MLP_SWIGLU && !c->qkv_bias &&
                        !c->linear_bias && !c->parallel_attn && !c->n_rope_freqs && c->n_head * c->d_head == c->d_model &&
                        (c->pos == MP_POS_HALF_ROPE || (c->pos == MP_POS_ROPE && strstr(m->format ? m->format : "", "phi3")));
    const int rot = c->pos == MP_POS_ROPE ? c->d_head : c->pos == MP_POS_HALF_ROPE ? c->rope_dims : 0;
    if (c->rope_scaling != MP_ROPE_SCALING_NONE || (c->rope_dims && !to_neox && !to_phi3))
        return mp_error(MP_ERR_ARG, "%s: this model's inference-time RoPE scaling (PI/NTK/YaRN) or partial rotation "
                        "is not written to GGUF; turn it off (m:set_rope_scaling(nil)) or save as .h5", path);
    if (c->parallel_attn && !to_neox)
        return mp_error(MP_ERR_ARG, "%s: parallel attention and MLP (parallel_attn) has a GGUF form only as gptneox "
                        "(LayerNorm, exact GELU, RoPE, biases)", path);
    if (to_phi3 && c->rope_scale > 0.0f && c->rope_scale != 1.0f)
        return mp_error(MP_ERR_ARG, "%s: phi3 GGUF takes no linear RoPE scaling (rope_scale)", path);
    if (c->attn != MP_ATTN_SOFTMAX)
        return mp_error(MP_ERR_ARG, "%s: attention variant %s has no GGUF / llama.cpp form (softmax only); save as .h5",
                        path, mp_attn_name(c->attn));
    /* OLMo 2: Llama's SwiGLU and RoPE without pre-norms, with post-norms and the q/k norm over the whole
     * projections (attn_q_norm [H*Dh], attn_k_norm [K*Dh]), NeoX (half-split) rows; none of Gemma's other fields */
    const int olmo2 = c->no_pre_norms && c->post_norms && c->qk_norm == MP_QK_NORM_FULL && c->norm == MP_NORM_RMS &&
                      c->mlp == MP_MLP_SWIGLU && !c->gelu_tanh && c->pos == MP_POS_ROPE && !c->qkv_bias &&
                      !c->linear_bias && !c->norm_offset && !c->embed_scale && c->attn_softcap == 0.0f &&
                      c->final_softcap == 0.0f && c->query_pre_attn_scalar == 0.0f && !c->parallel_attn &&
                      c->sliding_window == 0;
    if (c->no_pre_norms && !olmo2)
        return mp_error(MP_ERR_ARG, "%s: a block without pre-norms (pre_norms = false) has a GGUF form only as olmo2 "
                        "(RMSNorm, SwiGLU, RoPE, post_norms, qk_norm full, no biases, no window, none of Gemma's "
                        "fields); save as .h5", path);
    if (c->qk_norm == MP_QK_NORM_FULL && !olmo2)
        return mp_error(MP_ERR_ARG, "%s: the q/k norm over the whole projection (qk_norm full) has a GGUF form only as "
                        "olmo2 (pre_norms = false, post_norms); save as .h5", path);
    const char *arch;
    /* Gemma: (1 + w) norms (held so in memory: written as is, as llama.cpp's converter stores them), the scaled
     * embedding, GeGLU; Gemma 2 with its post-norms */
    const int gemma = c->norm_offset && c->embed_scale && c->mlp == MP_MLP_SWIGLU && c->gelu_tanh && !c->qkv_bias &&
                      c->norm == MP_NORM_RMS && c->pos == MP_POS_ROPE && !c->linear_bias && !c->parallel_attn &&
                      (c->qk_norm == MP_QK_NORM_NONE || (c->qk_norm == MP_QK_NORM_HEAD && c->post_norms));
    const int gemma1 = gemma && !c->post_norms && c->attn_softcap == 0.0f && c->final_softcap == 0.0f &&
                       c->query_pre_attn_scalar == 0.0f;
    const int gemma3 = gemma && c->qk_norm == MP_QK_NORM_HEAD;
    const int any_gemma = c->norm_offset || c->embed_scale || c->post_norms || c->attn_softcap != 0.0f ||
                          c->final_softcap != 0.0f || c->query_pre_attn_scalar != 0.0f ||
                          (c->mlp == MP_MLP_SWIGLU && c->gelu_tanh) || c->rope_local_theta != 0.0f;
    if (gemma3 && c->rope_local_theta == 0.0f && c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
        c->sliding_window > 0)
        return mp_error(MP_ERR_ARG, "%s: gemma3's sliding layers take no RoPE scaling; this model scales every layer's "
                        "(rope_scale without rope_local_theta); save as .h5", path);
    if (olmo2)
        arch = "olmo2";
    else if (gemma3)
        arch = "gemma3";
    else if (gemma && c->post_norms && c->rope_local_theta == 0.0f)
        arch = "gemma2";
    else if (gemma1 && c->rope_local_theta == 0.0f)
        arch = "gemma";
    else if (any_gemma)
        return mp_error(MP_ERR_ARG, "%s: this model's Gemma fields (norm_offset, embed_scale, GeGLU, post_norms, soft "
                        "caps, query_pre_attn_scalar, qk_norm, rope_local_theta) match none of llama.cpp's gemma, "
                        "gemma2 and gemma3; save as .h5", path);
    else if (to_neox)
        arch = "gptneox";
    else if (to_phi3)
        arch = "phi3";
    else if (c->norm == MP_NORM_RMS && c->mlp == MP_MLP_SWIGLU && c->pos == MP_POS_ROPE && !c->linear_bias)
        arch = c->qk_norm == MP_QK_NORM_HEAD ? "qwen3" : c->qkv_bias ? "qwen2" : "llama";
    else if (c->norm == MP_NORM_LAYER && c->mlp == MP_MLP_GELU && c->gelu_tanh && c->pos == MP_POS_LEARNED &&
             c->qkv_bias && c->linear_bias && c->n_kv_head == c->n_head && c->n_head * c->d_head == c->d_model)
        arch = "gpt2";
    else
        return mp_error(MP_ERR_ARG, "%s: llama.cpp has no architecture for this model (GGUF export takes "
                        "Llama/Qwen2-style RMSNorm+SwiGLU+RoPE or GPT-2-style LayerNorm+GELU-tanh+learned positions "
                        "with biases)", path);
    /* llama.cpp's gemma / gemma2 unembed with token_embd (an output.weight fails its tensor count; its gemma3
     * takes one), its gemma2 applies both soft caps always (a 0 divides: NaN logits), its gemma3 no attention cap */
    const int g2 = strcmp(arch, "gemma2") == 0, g3 = strcmp(arch, "gemma3") == 0;
    if (gemma && !g3 && !c->tied)
        return mp_error(MP_ERR_ARG, "%s: llama.cpp's %s unembeds with the embedding (it takes no output.weight); "
                        "this model is untied (tied = false): save as .h5 or a Hugging Face folder", path, arch);
    if (g2 && (c->attn_softcap <= 0.0f || c->final_softcap <= 0.0f))
        return mp_error(MP_ERR_ARG, "%s: llama.cpp's gemma2 always applies both soft caps; this model has "
                        "attn_softcap %g, final_softcap %g (0: none): save as .h5 or a Hugging Face folder", path,
                        (double)c->attn_softcap, (double)c->final_softcap);
    if (g3 && c->attn_softcap > 0.0f)
        return mp_error(MP_ERR_ARG, "%s: llama.cpp's gemma3 applies no attention soft cap; this model has "
                        "attn_softcap %g: save as .h5 or a Hugging Face folder", path, (double)c->attn_softcap);
    ex x;
    memset(&x, 0, sizeof x);
    x.type = type;
    mp_status st = mp_gguf_writer_new(&x.w);
    if (st) return st;
    mp_gguf_writer *w = x.w;
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    if ((st = mp_gguf_writer_set_str(w, "general.architecture", arch)) ||
        (st = mp_gguf_writer_set_str(w, "general.name", m->source[0] ? m->source : "mechprobe model")) ||
        (st = mp_gguf_writer_set_u32(w, "general.file_type", type == MP_GGML_F32 ? 0 : type == MP_GGML_F16 ? 1 : 7)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)c->ctx)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->d_model)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->n_layer)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->d_mlp)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_head)) ||
        (st = mp_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)c->vocab)))
        goto cleanup;
    if (c->d_head * c->n_head != c->d_model &&
        ((st = mp_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->d_head)) ||
         (st = mp_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->d_head))))
        goto cleanup;
    if (to_neox) {
        if ((st = mp_gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), c->norm_eps)) ||
            (st = mp_gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_theta)) ||
            (st = mp_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)rot)) ||
            (st = mp_gguf_writer_set_bool(w, KEY("use_parallel_residual"), c->parallel_attn)))
            goto cleanup;
        if (c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
            ((st = mp_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear")) ||
             (st = mp_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->rope_scale))))
            goto cleanup;
    } else if (to_phi3) {
        if ((st = mp_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->norm_eps)) ||
            (st = mp_gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_theta)) ||
            (st = mp_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)rot)))
            goto cleanup;
    } else if (strcmp(arch, "gpt2") == 0) {
        if ((st = mp_gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), c->norm_eps))) goto cleanup;
    } else {
        if ((st = mp_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->norm_eps)) ||
            (st = mp_gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_theta)) ||
            (st = mp_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)c->d_head)))
            goto cleanup;
        if (strcmp(arch, "gemma2") == 0 && /* the caps, a window as wide as the context (none), the query scale */
            ((st = mp_gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), c->attn_softcap)) ||
             (st = mp_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), c->final_softcap)) ||
             (st = mp_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->ctx)) ||
             (c->query_pre_attn_scalar > 0.0f &&
              (st = mp_gguf_writer_set_f32(w, KEY("attention.query_pre_attn_scalar"), c->query_pre_attn_scalar)))))
            goto cleanup;
        if (gemma3 && /* caps only when on; the sliding layers' base; the query scale; a window (none: ctx) */
            ((c->attn_softcap > 0.0f &&
              (st = mp_gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), c->attn_softcap))) ||
             (c->final_softcap > 0.0f &&
              (st = mp_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), c->final_softcap))) ||
             (st = mp_gguf_writer_set_f32(w, KEY("rope.freq_base_swa"),
                                          c->rope_local_theta > 0.0f ? c->rope_local_theta : c->rope_theta)) ||
             (c->query_pre_attn_scalar > 0.0f &&
              (st = mp_gguf_writer_set_f32(w, KEY("attention.query_pre_attn_scalar"), c->query_pre_attn_scalar))) ||
             (c->sliding_window <= 0 &&
              (st = mp_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->ctx)))))
            goto cleanup;
        if (c->rope_scale > 0.0f && c->rope_scale != 1.0f &&
            ((st = mp_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear")) ||
             (st = mp_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->rope_scale))))
            goto cleanup;
    }
    if (c->sliding_window > 0) { /* llama.cpp's keys, as load_gguf.c reads them: the window and the pattern's period */
        if ((st = mp_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->sliding_window)))
            goto cleanup;
        /* the period, as llama.cpp's gemma2 / gemma3 / olmo2 read it (get_key_or_arr into a scalar: a per-layer
         * array is skipped for their default, 2 / 6 / 4); 0, every layer windowed, written too, as gemma2's
         * default is not none */
        if ((st = mp_gguf_writer_set_u32(w, KEY("attention.sliding_window_pattern"),
                                         (uint32_t)c->sliding_window_pattern)))
            goto cleanup;
    }
#undef KEY
    if ((st = write_tokenizer(&x, m, tok_source))) goto cleanup;

    const uint64_t D = (uint64_t)c->d_model, V = (uint64_t)c->vocab, M = (uint64_t)c->d_mlp;
    const uint64_t HD = (uint64_t)c->n_head * c->d_head, KD = (uint64_t)c->n_kv_head * c->d_head;
    if ((st = add(&x, "token_embd.weight", 0, p->embed, V, D))) goto cleanup;
    if (p->pos_embed && (st = add(&x, "position_embd.weight", 0, p->pos_embed, (uint64_t)c->ctx, D))) goto cleanup;
    if ((st = add(&x, "output_norm.weight", 0, p->lnf_w, D, 0))) goto cleanup;
    if (p->lnf_b && (st = add(&x, "output_norm.bias", 0, p->lnf_b, D, 0))) goto cleanup;
    /* llama.cpp's gptneox needs output.weight: a tied model's is the embedding (loads back untied, same logits) */
    if ((!c->tied || to_neox) && (st = add(&x, "output.weight", 0, p->unembed, V, D))) goto cleanup;
    if (c->n_rope_freqs && (st = add(&x, "rope_freqs.weight", 0, c->rope_freqs, (uint64_t)c->n_rope_freqs, 0)))
        goto cleanup;
    const int neox = strcmp(arch, "qwen2") == 0 || strcmp(arch, "qwen3") == 0 || gemma || olmo2;
    float *tmp = neox ? keep(&x, (size_t)(c->d_head * D)) : NULL;
    if (neox && !tmp) { st = MP_ERR_NOMEM; goto cleanup; }
    for (int l = 0; l < c->n_layer; l++) {
        const float *wq = p->wq + (size_t)l * HD * D, *wk = p->wk + (size_t)l * KD * D, *wv = p->wv + (size_t)l * KD * D;
        const float *bq = p->bq ? p->bq + (size_t)l * HD : NULL, *bk = p->bk ? p->bk + (size_t)l * KD : NULL;
        const float *bv = p->bv ? p->bv + (size_t)l * KD : NULL;
        if (p->ln1_w && (st = add(&x, "blk.%d.attn_norm.weight", l, p->ln1_w + (size_t)l * D, D, 0))) goto cleanup;
        if (p->ln1_b && (st = add(&x, "blk.%d.attn_norm.bias", l, p->ln1_b + (size_t)l * D, D, 0))) goto cleanup;
        if (to_neox || to_phi3) { /* attn_qkv = q | k | v, q/k half-split within the rotated channels */
            const uint64_t R = HD + 2 * KD;
            float *qkv = keep(&x, (size_t)(R * D)), *b = to_neox ? keep(&x, (size_t)R) : NULL;
            float *t2 = keep(&x, (size_t)(c->d_head * D));
            if (!qkv || !t2 || (to_neox && !b)) { st = MP_ERR_NOMEM; goto cleanup; }
            memcpy(qkv, wq, HD * D * sizeof(float));
            memcpy(qkv + HD * D, wk, KD * D * sizeof(float));
            memcpy(qkv + (HD + KD) * D, wv, KD * D * sizeof(float));
            for (int j = 0; j < 2 && rot >= 2; j++) {
                const int nh = j ? c->n_kv_head : c->n_head;
                float *blk = qkv + (j ? HD * D : 0), *bb = b ? b + (j ? HD : 0) : NULL;
                if (b) memcpy(bb, j ? bk : bq, (j ? KD : HD) * sizeof(float));
                for (int h = 0; h < nh; h++) {
                    mp_rope_permute_rows(blk + (size_t)h * c->d_head * D, t2, 1, rot, D, 0);
                    if (bb) mp_rope_permute_rows(bb + (size_t)h * c->d_head, t2, 1, rot, 1, 0);
                }
            }
            if (b && rot < 2) {
                memcpy(b, bq, HD * sizeof(float));
                memcpy(b + HD, bk, KD * sizeof(float));
            }
            if (b) memcpy(b + HD + KD, bv, KD * sizeof(float));
            if ((st = add(&x, "blk.%d.attn_qkv.weight", l, qkv, R, D)) ||
                (b && (st = add(&x, "blk.%d.attn_qkv.bias", l, b, R, 0))))
                goto cleanup;
        } else if (strcmp(arch, "gpt2") == 0) {
            float *qkv = keep(&x, (size_t)(3 * D * D)), *b = keep(&x, (size_t)(3 * D));
            if (!qkv || !b) { st = MP_ERR_NOMEM; goto cleanup; }
            memcpy(qkv, wq, D * D * sizeof(float));
            memcpy(qkv + D * D, wk, D * D * sizeof(float));
            memcpy(qkv + 2 * D * D, wv, D * D * sizeof(float));
            memcpy(b, bq, D * sizeof(float));
            memcpy(b + D, bk, D * sizeof(float));
            memcpy(b + 2 * D, bv, D * sizeof(float));
            if ((st = add(&x, "blk.%d.attn_qkv.weight", l, qkv, 3 * D, D)) ||
                (st = add(&x, "blk.%d.attn_qkv.bias", l, b, 3 * D, 0)))
                goto cleanup;
        } else {
            if (neox) { /* adjacent pairs -> NeoX half-split */
                float *q2 = keep(&x, (size_t)(HD * D)), *k2 = keep(&x, (size_t)(KD * D));
                if (!q2 || !k2) { st = MP_ERR_NOMEM; goto cleanup; }
                memcpy(q2, wq, HD * D * sizeof(float));
                memcpy(k2, wk, KD * D * sizeof(float));
                mp_rope_permute_rows(q2, tmp, c->n_head, c->d_head, D, 0);
                mp_rope_permute_rows(k2, tmp, c->n_kv_head, c->d_head, D, 0);
                wq = q2;
                wk = k2;
                if (bq) {
                    float *bq2 = keep(&x, (size_t)HD), *bk2 = keep(&x, (size_t)KD);
                    if (!bq2 || !bk2) { st = MP_ERR_NOMEM; goto cleanup; }
                    memcpy(bq2, bq, HD * sizeof(float));
                    memcpy(bk2, bk, KD * sizeof(float));
                    mp_rope_permute_rows(bq2, tmp, c->n_head, c->d_head, 1, 0);
                    mp_rope_permute_rows(bk2, tmp, c->n_kv_head, c->d_head, 1, 0);
                    bq = bq2;
                    bk = bk2;
                }
            }
            if (olmo2) { /* every head's channels, back to half-split */
                float *qn = keep(&x, (size_t)HD), *kn = keep(&x, (size_t)KD);
                if (!qn || !kn) { st = MP_ERR_NOMEM; goto cleanup; }
                memcpy(qn, p->q_norm + (size_t)l * HD, HD * sizeof(float));
                memcpy(kn, p->k_norm + (size_t)l * KD, KD * sizeof(float));
                mp_rope_permute_rows(qn, tmp, c->n_head, c->d_head, 1, 0);
                mp_rope_permute_rows(kn, tmp, c->n_kv_head, c->d_head, 1, 0);
                if ((st = add(&x, "blk.%d.attn_q_norm.weight", l, qn, HD, 0)) ||
                    (st = add(&x, "blk.%d.attn_k_norm.weight", l, kn, KD, 0)))
                    goto cleanup;
            } else if (p->q_norm) { /* qwen3: one head's channels, back to half-split */
                float *qn = keep(&x, (size_t)c->d_head), *kn = keep(&x, (size_t)c->d_head);
                if (!qn || !kn) { st = MP_ERR_NOMEM; goto cleanup; }
                memcpy(qn, p->q_norm + (size_t)l * c->d_head, (size_t)c->d_head * sizeof(float));
                memcpy(kn, p->k_norm + (size_t)l * c->d_head, (size_t)c->d_head * sizeof(float));
                mp_rope_permute_rows(qn, tmp, 1, c->d_head, 1, 0);
                mp_rope_permute_rows(kn, tmp, 1, c->d_head, 1, 0);
                if ((st = add(&x, "blk.%d.attn_q_norm.weight", l, qn, (uint64_t)c->d_head, 0)) ||
                    (st = add(&x, "blk.%d.attn_k_norm.weight", l, kn, (uint64_t)c->d_head, 0)))
                    goto cleanup;
            }
            if ((st = add(&x, "blk.%d.attn_q.weight", l, wq, HD, D)) ||
                (st = add(&x, "blk.%d.attn_k.weight", l, wk, KD, D)) ||
                (st = add(&x, "blk.%d.attn_v.weight", l, wv, KD, D)))
                goto cleanup;
            if (bq && ((st = add(&x, "blk.%d.attn_q.bias", l, bq, HD, 0)) ||
                       (st = add(&x, "blk.%d.attn_k.bias", l, bk, KD, 0)) ||
                       (st = add(&x, "blk.%d.attn_v.bias", l, bv, KD, 0))))
                goto cleanup;
        }
        if ((st = add(&x, "blk.%d.attn_output.weight", l, p->wo + (size_t)l * D * HD, D, HD))) goto cleanup;
        if (p->bo && (st = add(&x, "blk.%d.attn_output.bias", l, p->bo + (size_t)l * D, D, 0))) goto cleanup;
        if (p->ln2_w && (st = add(&x, "blk.%d.ffn_norm.weight", l, p->ln2_w + (size_t)l * D, D, 0))) goto cleanup;
        if (p->ln1p_w && ((st = add(&x, "blk.%d.post_attention_norm.weight", l, p->ln1p_w + (size_t)l * D, D, 0)) ||
                          (st = add(&x, "blk.%d.post_ffw_norm.weight", l, p->ln2p_w + (size_t)l * D, D, 0))))
            goto cleanup;
        if (p->ln2_b && (st = add(&x, "blk.%d.ffn_norm.bias", l, p->ln2_b + (size_t)l * D, D, 0))) goto cleanup;
        const size_t lM = (size_t)l * M;
        if (to_phi3) { /* ffn_up = gate | up */
            float *gu = keep(&x, (size_t)(2 * M * D));
            if (!gu) { st = MP_ERR_NOMEM; goto cleanup; }
            memcpy(gu, p->w1 + lM * D, M * D * sizeof(float));
            memcpy(gu + M * D, p->w3 + lM * D, M * D * sizeof(float));
            if ((st = add(&x, "blk.%d.ffn_up.weight", l, gu, 2 * M, D))) goto cleanup;
        } else if (c->mlp == MP_MLP_SWIGLU) {
            if ((st = add(&x, "blk.%d.ffn_gate.weight", l, p->w1 + lM * D, M, D)) ||
                (st = add(&x, "blk.%d.ffn_up.weight", l, p->w3 + lM * D, M, D)))
                goto cleanup;
        } else {
            if ((st = add(&x, "blk.%d.ffn_up.weight", l, p->w1 + lM * D, M, D))) goto cleanup;
            if (p->b1 && (st = add(&x, "blk.%d.ffn_up.bias", l, p->b1 + lM, M, 0))) goto cleanup;
        }
        if ((st = add(&x, "blk.%d.ffn_down.weight", l, p->w2 + lM * D, D, M))) goto cleanup;
        if (p->b2 && (st = add(&x, "blk.%d.ffn_down.bias", l, p->b2 + (size_t)l * D, D, 0))) goto cleanup;
    }
    st = mp_gguf_writer_write(w, path);
cleanup:
    for (size_t i = 0; i < x.n_owned; i++) free(x.owned[i]);
    free(x.owned);
    mp_gguf_writer_free(w);
    return st;
}
