/* shape_gguf.c — random Llama GGUF files in the shapes of real models, made a
 * block of rows at a time while the file is written (see shape_gguf.h for the
 * shapes and the generation recipe). */
#include "shape_gguf.h"

#include "gguf.h"
#include "quant.h"
#include "tok.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Llama 3.2 1B and Llama 3 8B as their config.json give them (rope_scaling
 * left out: no frequency factors on either side); tiny for tests and dry runs. */
static const sg_shape shapes[] = {
    {"tiny", 256, 2, 8, 2, 32, 512, 1024, 32768, 1, 1e-5f, 500000.0f},
    {"llama3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 1, 1e-5f, 500000.0f},
    {"llama3-8b", 4096, 32, 32, 8, 128, 14336, 128256, 8192, 0, 1e-5f, 500000.0f},
};

const sg_shape *sg_shape_find(const char *name) {
    for (size_t i = 0; name && i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

const char *sg_shape_names(void) { return "tiny, llama3.2-1b, llama3-8b"; }

int sg_type_parse(const char *s, uint32_t *type) {
    static const struct { const char *name; uint32_t type; } t[] = {
        {"f32", MP_GGML_F32}, {"f16", MP_GGML_F16}, {"bf16", MP_GGML_BF16}, {"q8_0", MP_GGML_Q8_0}};
    for (size_t i = 0; s && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, s)) { *type = t[i].type; return 0; }
    return -1;
}

uint32_t sg_row_seed(uint64_t seed, int t, uint64_t r) {
    const uint32_t base = (uint32_t)((seed * 0x9E3779B97F4A7C15ull) >> 32);
    return base + ((uint32_t)t << 17) + (uint32_t)r;
}

typedef struct {
    uint32_t type;
    uint64_t seed, cols;
    int t, norm;
} rows_job;

static size_t row_bytes(uint32_t type, uint64_t cols) {
    uint64_t b = 0;
    mp_quant_bytes(type, cols, &b);
    return (size_t)b;
}

/* the rows callback of mp_gguf_writer_add_rows */
static mp_status make_rows(void *user, uint64_t row0, uint64_t n, void *dst) {
    const rows_job *j = user;
    const size_t rb = row_bytes(j->type, j->cols), cols = (size_t)j->cols;
    int failed = 0;
#pragma omp parallel
    {
        gsl_rng *rng = j->norm ? NULL : gsl_rng_alloc(gsl_rng_mt19937);
        float *x = malloc(cols * sizeof *x);
        if (!x || (!j->norm && !rng)) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < (int64_t)n; i++) {
            if (!x || (!j->norm && !rng)) continue;
            if (j->norm) {
                for (size_t c = 0; c < cols; c++) x[c] = 1.0f;
            } else {
                gsl_rng_set(rng, sg_row_seed(j->seed, j->t, row0 + (uint64_t)i));
                for (size_t c = 0; c < cols; c++) x[c] = (float)gsl_ran_gaussian_ziggurat(rng, 0.02);
            }
            unsigned char *out = (unsigned char *)dst + (size_t)i * rb;
            switch (j->type) {
            case MP_GGML_F32: memcpy(out, x, cols * sizeof *x); break;
            case MP_GGML_F16:
            case MP_GGML_BF16:
                for (size_t c = 0; c < cols; c++) {
                    uint16_t h = j->type == MP_GGML_F16 ? mp_quant_f32_to_f16(x[c]) : mp_quant_f32_to_bf16(x[c]);
                    memcpy(out + 2 * c, &h, 2);
                }
                break;
            default: mp_quant_quantize_q8_0(x, out, cols); break;
            }
        }
        free(x);
        if (rng) gsl_rng_free(rng);
    }
    return failed ? mp_error(MP_ERR_NOMEM, "out of memory making rows of tensor %d", j->t) : MP_OK;
}

mp_status sg_make_rows(uint32_t type, uint64_t seed, int t, uint64_t cols, uint64_t row0, uint64_t n, void *dst) {
    rows_job j = {type, seed, cols, t, 0};
    return make_rows(&j, row0, n, dst);
}

/* The "bytes" tokenizer of export_gguf.c for V >= 257 ids. */
static mp_status set_tokenizer(mp_gguf_writer *w, int V) {
    char *buf = malloc((size_t)V * 24);
    const char **toks = malloc((size_t)V * sizeof *toks);
    int32_t *types = malloc((size_t)V * sizeof *types);
    mp_status st = MP_OK;
    if (!buf || !toks || !types) { st = mp_error(MP_ERR_NOMEM, "out of memory for a %d-token vocabulary", V); goto done; }
    for (int i = 0; i < V; i++) {
        char *s = buf + (size_t)i * 24;
        memset(s, 0, 24);
        if (i < 256) {
            uint32_t cp = mp_bpe_byte_to_cp((unsigned char)i);
            if (cp < 0x80) s[0] = (char)cp;
            else { s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); }
            types[i] = MP_TOK_TYPE_NORMAL;
        } else {
            snprintf(s, 24, i == 256 ? "<s>" : "<unused%d>", i);
            types[i] = i == 256 ? MP_TOK_TYPE_CONTROL : MP_TOK_TYPE_UNUSED;
        }
        toks[i] = s;
    }
    if ((st = mp_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2")) ||
        (st = mp_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default")) ||
        (st = mp_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, (uint64_t)V)) ||
        (st = mp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MP_GGUF_INT32, types, (uint64_t)V)) ||
        (st = mp_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", NULL, 0)) ||
        (st = mp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256)) ||
        (st = mp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1)))
        goto done;
done:
    free(buf);
    free(toks);
    free(types);
    return st;
}

/* the tensors added so far, in file order */
typedef struct {
    mp_gguf_writer *w;
    rows_job *jobs;
    int t;
    uint64_t params;
    uint32_t type;
    uint64_t seed;
} plan_ctx;

/* Tensor number p->t: rows x cols in p->type, or (cols == 0) a norm [rows] of ones in F32. */
static mp_status add_t(plan_ctx *p, const char *name, uint64_t rows, uint64_t cols) {
    const int norm = cols == 0;
    rows_job *j = &p->jobs[p->t];
    *j = (rows_job){norm ? MP_GGML_F32 : p->type, p->seed, norm ? rows : cols, p->t, norm};
    const uint64_t dims[2] = {norm ? rows : cols, rows};
    mp_status st = mp_gguf_writer_add_rows(p->w, name, j->type, norm ? 1 : 2, dims, make_rows, j);
    if (st) return st;
    p->params += norm ? rows : rows * cols;
    p->t++;
    return MP_OK;
}

static mp_status add_l(plan_ctx *p, const char *fmt, int l, uint64_t rows, uint64_t cols) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    return add_t(p, name, rows, cols);
}

mp_status sg_write(const sg_shape *s, uint32_t type, uint64_t seed, const char *path, int dry_run, sg_plan *plan) {
    if (type != MP_GGML_F32 && type != MP_GGML_F16 && type != MP_GGML_BF16 && type != MP_GGML_Q8_0)
        return mp_error(MP_ERR_ARG, "shape %s: type %s: takes f32, f16, bf16 or q8_0", s->name, mp_quant_type_name(type));
    if (s->vocab < 257 || s->vocab > (1 << 17) || s->d_mlp > (1 << 17) || s->d_model % 32 || s->d_mlp % 32)
        return mp_error(MP_ERR_ARG, "shape %s: vocab 257..131072, d_mlp <= 131072, d_model and d_mlp multiples of 32",
                        s->name);
    const uint64_t D = (uint64_t)s->d_model, V = (uint64_t)s->vocab, M = (uint64_t)s->d_mlp;
    const uint64_t HD = (uint64_t)s->n_head * s->d_head, KD = (uint64_t)s->n_kv_head * s->d_head;
    const int n_t = 1 + 9 * s->n_layer + 1 + !s->tied;
    rows_job *jobs = calloc((size_t)n_t, sizeof *jobs);
    mp_gguf_writer *w = NULL;
    mp_status st = jobs ? mp_gguf_writer_new(&w) : mp_error(MP_ERR_NOMEM, "out of memory planning %s", s->name);
    if (st) { free(jobs); return st; }
    const uint32_t ftype = type == MP_GGML_F32 ? 0 : type == MP_GGML_F16 ? 1 : type == MP_GGML_Q8_0 ? 7 : 32;
    char name[160];
    snprintf(name, sizeof name, "mechprobe random %s (N(0, 0.02), seed %llu)", s->name, (unsigned long long)seed);
    if ((st = mp_gguf_writer_set_str(w, "general.architecture", "llama")) ||
        (st = mp_gguf_writer_set_str(w, "general.name", name)) ||
        (st = mp_gguf_writer_set_u32(w, "general.file_type", ftype)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)s->ctx)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)D)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)s->n_layer)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)M)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_head)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_kv_head)) ||
        (st = mp_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", s->norm_eps)) ||
        (st = mp_gguf_writer_set_f32(w, "llama.rope.freq_base", s->rope_theta)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)s->d_head)) ||
        (st = mp_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)V)))
        goto done;
    if (HD != D && ((st = mp_gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)s->d_head)) ||
                    (st = mp_gguf_writer_set_u32(w, "llama.attention.value_length", (uint32_t)s->d_head))))
        goto done;
    if ((st = set_tokenizer(w, s->vocab))) goto done;
    plan_ctx pc = {w, jobs, 0, 0, type, seed};
    if ((st = add_t(&pc, "token_embd.weight", V, D))) goto done;
    for (int l = 0; l < s->n_layer && !st; l++)
        if ((st = add_l(&pc, "blk.%d.attn_norm.weight", l, D, 0)) || (st = add_l(&pc, "blk.%d.attn_q.weight", l, HD, D)) ||
            (st = add_l(&pc, "blk.%d.attn_k.weight", l, KD, D)) || (st = add_l(&pc, "blk.%d.attn_v.weight", l, KD, D)) ||
            (st = add_l(&pc, "blk.%d.attn_output.weight", l, D, HD)) || (st = add_l(&pc, "blk.%d.ffn_norm.weight", l, D, 0)) ||
            (st = add_l(&pc, "blk.%d.ffn_gate.weight", l, M, D)) || (st = add_l(&pc, "blk.%d.ffn_up.weight", l, M, D)) ||
            (st = add_l(&pc, "blk.%d.ffn_down.weight", l, D, M)))
            goto done;
    if ((st = add_t(&pc, "output_norm.weight", D, 0)) || (!s->tied && (st = add_t(&pc, "output.weight", V, D)))) goto done;
    if (plan) {
        plan->n_tensors = pc.t;
        plan->params = pc.params;
        plan->file_bytes = mp_gguf_writer_file_bytes(w);
    }
    if (!dry_run) st = mp_gguf_writer_write(w, path);
done:
    mp_gguf_writer_free(w);
    free(jobs);
    return st;
}
