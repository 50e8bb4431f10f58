/* model_quant.c — models that keep their weights in the file's encoding
 * (model.h, mp_qparams: quantized or F16/BF16 GGUF, F16/BF16 safetensors;
 * loaded by load_gguf.c and load_hf.c, computed with qdot.h): the loaders'
 * shared set-up (the per-layer arrays, RoPE row permutation of encoded rows),
 * the embedding lookup from encoded rows, the weight-type summary, and
 * decoding to float32 on demand (in place for training, as a copy for the
 * writers). */
#include "model.h"
#include "qdot.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mp_model_is_quantized(const mp_model *m) { return m && m->q != NULL; }

size_t mp_model_param_bytes(const mp_model *m) {
    const mp_config *c = &m->cfg;
    const size_t all = mp_config_n_params(c) * sizeof(float);
    if (!m->q) return all;
    const size_t D = (size_t)c->d_model, V = (size_t)c->vocab, L = (size_t)c->n_layer;
    const size_t HD = (size_t)c->n_head * c->d_head, KD = (size_t)c->n_kv_head * c->d_head;
    const size_t M = c->mlp == MP_MLP_NONE ? 0 : (size_t)c->d_mlp, nmlp = c->mlp == MP_MLP_SWIGLU ? 3 : 2;
    const size_t linear = V * D * (c->tied ? 1 : 2) + L * (2 * HD * D + 2 * KD * D + nmlp * M * D);
    return all - linear * sizeof(float) + m->q->bytes;
}

/* Adds type t to the "+"-separated list in buf unless it is there. */
static void add_type(char *buf, size_t n, uint32_t t) {
    const char *name = mp_quant_type_name(t);
    const size_t k = strlen(name);
    for (const char *p = buf; (p = strstr(p, name)); p += k)
        if ((p == buf || p[-1] == '+') && (p[k] == 0 || p[k] == '+')) return;
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "%s%s", len ? "+" : "", name);
}

/* fn(each weight matrix of m's quantized or kept weights): the embedding, the
 * unembedding (a copy of the embedding's mp_qmat when tied: the classifier's
 * products read its own), then every layer's */
static void each_qmat(const mp_model *m, void (*fn)(mp_qmat *, void *), void *ctx) {
    mp_qparams *q = m->q;
    fn(&q->embed, ctx);
    fn(&q->unembed, ctx);
    mp_qmat *fam[] = {q->wq, q->wk, q->wv, q->wo, q->w1, q->w3, q->w2};
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++)
        for (int l = 0; fam[f] && l < m->cfg.n_layer; l++) fn(&fam[f][l], ctx);
}

typedef struct { char *buf; size_t n; } types_ctx;
static void add_type_of(mp_qmat *qm, void *ctx) { add_type(((types_ctx *)ctx)->buf, ((types_ctx *)ctx)->n, qm->type); }

void mp_model_weight_types(const mp_model *m, char *buf, size_t n) {
    if (!n) return;
    buf[0] = 0;
    if (!m->q) { snprintf(buf, n, "F32"); return; }
    types_ctx t = {buf, n};
    each_qmat(m, add_type_of, &t);
}

static void set_bf16(mp_qmat *qm, void *on) { qm->bf16_products = qm->type == MP_GGML_BF16 && *(const int *)on; }

void mp_model_set_bf16_products(mp_model *m, int on) {
    if (m->q) each_qmat(m, set_bf16, &on);
}

void mp_model_embed_rows(const mp_model *m, float *out, const int *tokens, int N) {
    const int D = m->cfg.d_model;
    if (!m->q) {
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * D, m->p.embed + (size_t)tokens[n] * D, (size_t)D * sizeof(float));
        return;
    }
    const mp_qmat *e = &m->q->embed;
    for (int n = 0; n < N; n++) {
        const unsigned char *row = e->data + (size_t)tokens[n] * e->row_bytes;
        if (e->type == MP_GGML_F32) memcpy(out + (size_t)n * D, row, (size_t)D * sizeof(float));
        else mp_quant_dequantize(e->type, row, out + (size_t)n * D, (size_t)D);
    }
}

mp_status mp_qparams_new(mp_model *m) {
    const size_t L = (size_t)m->cfg.n_layer;
    if (!(m->q = mp_calloc(1, sizeof *m->q, "quantized weights")) ||
        !(m->q->mats = mp_calloc(7 * L, sizeof(mp_qmat), "quantized weights")))
        return MP_ERR_NOMEM;
    mp_qparams *q = m->q;
    q->wq = q->mats;
    q->wk = q->wq + L;
    q->wv = q->wk + L;
    q->wo = q->wv + L;
    if (m->cfg.mlp != MP_MLP_NONE) {
        q->w1 = q->wo + L;
        q->w2 = q->w1 + L;
        if (m->cfg.mlp == MP_MLP_SWIGLU) q->w3 = q->w2 + L;
    }
    return MP_OK;
}

mp_status mp_qmat_permute_heads(unsigned char *w, int n_heads, int Dh, size_t rb) {
    unsigned char *tmp = mp_malloc((size_t)Dh * rb, "a RoPE permutation");
    if (!tmp) return MP_ERR_NOMEM;
    const int half = Dh / 2;
    for (int h = 0; h < n_heads; h++) {
        unsigned char *head = w + (size_t)h * Dh * rb;
        memcpy(tmp, head, (size_t)Dh * rb);
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++) memcpy(head + (size_t)(2 * i + j) * rb, tmp + (size_t)(j * half + i) * rb, rb);
    }
    free(tmp);
    return MP_OK;
}

typedef struct chunk { struct chunk *next; } chunk;

void *mp_qparams_alloc(mp_qparams *q, size_t bytes) {
    chunk *c = NULL;
    if (bytes > SIZE_MAX - 64 || posix_memalign((void **)&c, 64, 64 + bytes)) {
        mp_error(MP_ERR_NOMEM, "out of memory for %zu bytes of model weights", bytes);
        return NULL;
    }
    c->next = q->chunks;
    q->chunks = c;
    return (unsigned char *)c + 64;
}

void mp_qparams_free(mp_qparams *q) {
    if (!q) return;
    for (chunk *c = q->chunks; c;) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    if (q->file && q->file_close) q->file_close(q->file);
    free(q->mats);
    free(q);
}

/* Decodes rows x cols of qm into dst. */
static void decode(const mp_qmat *qm, float *dst, size_t rows, size_t cols) {
    if (qm->type == MP_GGML_F32) memcpy(dst, qm->data, rows * cols * sizeof(float));
    else mp_quant_dequantize(qm->type, qm->data, dst, rows * cols);
}

/* Writes every quantized matrix of m, decoded, into the float32 params p
 * (laid out for m->cfg by mp_model_new). */
static void decode_all(const mp_model *m, const mp_params *p) {
    const mp_config *c = &m->cfg;
    const mp_qparams *q = m->q;
    const size_t D = (size_t)c->d_model, V = (size_t)c->vocab, M = (size_t)c->d_mlp;
    const size_t HD = (size_t)c->n_head * c->d_head, KD = (size_t)c->n_kv_head * c->d_head;
    decode(&q->embed, p->embed, V, D);
    if (!c->tied) decode(&q->unembed, p->unembed, V, D);
    for (int l = 0; l < c->n_layer; l++) {
        decode(&q->wq[l], p->wq + (size_t)l * HD * D, HD, D);
        decode(&q->wk[l], p->wk + (size_t)l * KD * D, KD, D);
        decode(&q->wv[l], p->wv + (size_t)l * KD * D, KD, D);
        decode(&q->wo[l], p->wo + (size_t)l * D * HD, D, HD);
        if (q->w1) decode(&q->w1[l], p->w1 + (size_t)l * M * D, M, D);
        if (q->w3) decode(&q->w3[l], p->w3 + (size_t)l * M * D, M, D);
        if (q->w2) decode(&q->w2[l], p->w2 + (size_t)l * D * M, D, M);
    }
}

/* The float32 parameters of m in a fresh allocation: the small ones copied,
 * the matrices decoded. */
static mp_status f32_params(const mp_model *m, mp_model **out) {
    mp_model *f = NULL;
    mp_status st = mp_model_new(&f, &m->cfg);
    if (st) return mp_error_prefix(st, "dequantizing %s", m->source[0] ? m->source : "a quantized model");
    mp_param_desc src[MP_PARAM_MAX], dst[MP_PARAM_MAX];
    int n = mp_params_describe(&m->cfg, &m->p, src);
    mp_params_describe(&m->cfg, &f->p, dst);
    for (int i = 0; i < n; i++)
        if (src[i].p) memcpy(dst[i].p, src[i].p, src[i].n * sizeof(float));
    decode_all(m, &f->p);
    *out = f;
    return MP_OK;
}

mp_status mp_model_dequantize(mp_model *m) {
    if (!m->q) return MP_OK;
    mp_model *f = NULL;
    mp_status st = f32_params(m, &f);
    if (st) return st;
    free(m->owned);
    m->owned = f->owned;
    m->p = f->p;
    f->owned = NULL;
    m->mem_gen++;
    mp_model_free(f);
    mp_qparams_free(m->q);
    m->q = NULL;
    if (m->device == MP_DEVICE_CPU) m->precision = MP_PRECISION_FP32; /* no BF16 weights left to multiply in BF16 */
    return MP_OK;
}

/* precision "bf16" on the CPU: BF16 weights kept as stored, AVX-512 BF16 */
mp_status mp_model_cpu_bf16_check(const mp_model *m) {
    char types[64]; /* the weight types, "+"-joined (mp_model_weight_types) */
    mp_model_weight_types(m, types, sizeof types);
    if (!strstr(types, "BF16")) {
        return mp_error(MP_ERR_ARG,
                        "precision \"bf16\" on the CPU multiplies BF16 weights kept as stored (a BF16 GGUF or "
                        "Hugging Face folder); this model's weights are %s: use device \"cuda\" or fp32",
                        types);
    }
    if (!mp_qdot_has_bf16())
        return mp_error(MP_ERR_ARG, "precision \"bf16\" on the CPU needs AVX-512 BF16, which this CPU lacks%s",
                        getenv("MP_QDOT_ISA") ? " (or MP_QDOT_ISA caps it)" : "");
    return MP_OK;
}

mp_status mp_model_dequantized_copy(const mp_model *m, mp_model **out) {
    *out = NULL;
    mp_model *f = NULL;
    mp_status st;
    if (m->q) {
        if ((st = f32_params(m, &f))) return st;
    } else {
        if ((st = mp_model_new(&f, &m->cfg))) return st;
        mp_param_desc src[MP_PARAM_MAX], dst[MP_PARAM_MAX];
        int n = mp_params_describe(&m->cfg, &m->p, src);
        mp_params_describe(&m->cfg, &f->p, dst);
        for (int i = 0; i < n; i++) memcpy(dst[i].p, src[i].p, src[i].n * sizeof(float));
    }
    memcpy(f->source, m->source, sizeof f->source);
    memcpy(f->tokenizer, m->tokenizer, sizeof f->tokenizer);
    f->format = m->format;
    *out = f;
    return MP_OK;
}
