/* test_qmodel.c — whole models with quantized weights (load_gguf.c keeps
 * Q8_0/Q4_0/Q4_K/Q6_K weights quantized, and F16/BF16 weights as stored;
 * model_quant.c; qdot.c) against the same models in float32. Half models
 * (llama and gpt2 again, F16 and BF16 tensors alternating) decode within float32
 * rounding too (<= 1e-4 of the largest |logit|), their activations not being
 * quantized. For llama (untied, GQA), qwen2 (q/k/v biases, rows
 * permuted from the half-split layout, tied) and gpt2 (fused attn_qkv,
 * LayerNorm, biases, learned positions), a GGUF is written with random
 * blocks, the types mixed across tensors and layers, and a second GGUF with
 * the same weights decoded to F32 here (mp_quant_dequantize), which loads the
 * float32 way (an independent path: float rows permuted by
 * mp_rope_permute_rows, fused QKV copied):
 *   - a 40-token prefill (> 32 rows: dequantized weight panels + sgemm) gives
 *     the float32 logits to float32 rounding: <= 1e-4 of the largest |logit|;
 *   - token-by-token decoding (one row: the quantized dot kernels, 8-bit
 *     activations) gives them within what the activation quantization
 *     allows: each product has a relative rms error of 0.5-1% (test_qdot
 *     states and checks it), which these random models (2 layers, 15
 *     products per token, softmax) amplify to a few percent of the logits:
 *     bound: mean |diff| <= 10% of the mean |logit|, max <= 30% of the
 *     largest. The kernels themselves are checked tightly in test_qdot; this
 *     checks the wiring (a wrong layer, row, bias or type gives ~100%);
 *   - mp_model_dequantized_copy has bit-identical float32 weights, and saving
 *     the quantized model (.h5: dequantized on demand) and reloading it gives
 *     the float32 logits exactly; mp_model_make_owned (training) dequantizes
 *     in place;
 *   - memory: the quantized model's weights are the file's bytes (m->q->bytes
 *     equals the sum of the tensors' bytes: nothing decoded but the F32 ones);
 *   - a file with general.alignment 1 or 2 whose F32 weights lie at addresses
 *     that are not multiples of 4 loads them aligned (copied) and computes the
 *     aligned file's logits exactly (no misaligned float* under UBSan);
 *   - Hugging Face folders (tests/data/arch_qwen2: untied, q/k/v biases;
 *     arch_qwen3: tied, q/k norms; arch_olmo2: full q/k norms, no pre-norms;
 *     arch_gemma2: norm offset, soft caps) rewritten here with every 2-D
 *     tensor in BF16 (then F16), beside the same rounded values in F32: the
 *     half folder keeps its linear weights as stored (its bytes: 2 per
 *     weight) and gives the F32 folder's logits and every hook point: a
 *     prefill (widened panels through the same sgemm) within 1e-4 absolute
 *     (0 here), decoding (the dot kernels) within float32 rounding (<= 1e-4
 *     of the largest |logit|). */
#include "checkpoint.h"
#include "h5io.h"
#include "gguf.h"
#include "formats.h"
#include "safetensors.h"
#include "model.h"
#include "mp_hooks.h"
#include "mp_cuda.h"
#include "qdot.h"
#include "quant.h"
#include "testutil.h"
#include "tu_arch.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t rs = 88172645u;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 17; rs ^= rs << 5; return rs; }
static float unif(void) { return (float)(rnd() >> 8) / 16777216.0f; }

enum { D = 256, H = 4, DH = 64, M = 512, V = 300, L = 2, CTX = 64 };

typedef struct {
    mp_gguf_writer *wq, *wf; /* quantized file, float32 file */
    void *keep[128];         /* data the writers borrow */
    int nkeep;
    uint64_t qbytes;         /* bytes of the quantized file's 2-D weights */
} files;

static void put_f16(unsigned char *p, float f) {
    uint16_t h = mp_quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* A 2-D weight {in, out} of type t (random blocks, scales ~ 0.03 / sqrt(in)) in
 * both files. */
static void weight(files *f, const char *name, uint32_t t, uint64_t in, uint64_t out) {
    size_t bv, bb;
    mp_quant_block(t, &bv, &bb);
    const size_t n = (size_t)(in * out), bytes = n / bv * bb;
    unsigned char *q = malloc(bytes);
    const float s = 1.0f / sqrtf((float)in);
    for (size_t b = 0; t == MP_GGML_F32 && b < n; b++) {
        const float v = 0.05f * s * (unif() - 0.5f);
        memcpy(q + b * 4, &v, 4);
    }
    for (size_t b = 0; mp_qdot_is_half(t) && b < n; b++) { /* F16 / BF16: the rounded float value */
        const float v = 0.05f * s * (unif() - 0.5f);
        const uint16_t h = t == MP_GGML_F16 ? mp_quant_f32_to_f16(v) : mp_quant_f32_to_bf16(v);
        memcpy(q + b * 2, &h, 2);
    }
    for (size_t b = 0; t != MP_GGML_F32 && !mp_qdot_is_half(t) && b < n / bv; b++) {
        unsigned char *p = q + b * bb;
        for (size_t i = 0; i < bb; i++) p[i] = (unsigned char)rnd();
        const float d = (0.5f + unif()) * s;
        if (t == MP_GGML_Q8_0) put_f16(p, d / 64.0f);
        if (t == MP_GGML_Q4_0) put_f16(p, d / 4.0f);
        if (t == MP_GGML_Q4_K) { put_f16(p, d / 40.0f); put_f16(p + 2, d / 40.0f); }
        if (t == MP_GGML_Q6_K) put_f16(p + 208, d / 1024.0f);
    }
    float *x = malloc(n * sizeof(float));
    mp_quant_dequantize(t, q, x, n);
    const uint64_t dims[2] = {in, out};
    CHECK(mp_gguf_writer_add_raw(f->wq, name, t, 2, dims, q, bytes) == MP_OK, "%s", mp_last_error());
    CHECK(mp_gguf_writer_add_tensor(f->wf, name, MP_GGML_F32, 2, dims, x) == MP_OK, "%s", mp_last_error());
    f->qbytes += bytes;
    f->keep[f->nkeep++] = q; /* both writers borrow their data until written */
    f->keep[f->nkeep++] = x;
}

/* A float tensor {n, n1} (n1 = 1: 1-D; norm weight ~ 1, bias ~ 0) in both files. */
static void vec2(files *f, const char *name, uint64_t n, uint64_t n1, float base) {
    float *x = malloc(n * n1 * sizeof(float));
    for (uint64_t i = 0; i < n * n1; i++) x[i] = base + 0.1f * (unif() - 0.5f);
    const uint64_t dims[2] = {n, n1};
    CHECK(mp_gguf_writer_add_tensor(f->wq, name, MP_GGML_F32, n1 > 1 ? 2 : 1, dims, x) == MP_OK, "%s", mp_last_error());
    CHECK(mp_gguf_writer_add_tensor(f->wf, name, MP_GGML_F32, n1 > 1 ? 2 : 1, dims, x) == MP_OK, "%s", mp_last_error());
    f->keep[f->nkeep++] = x;
}
static void vec(files *f, const char *name, uint64_t n, float base) { vec2(f, name, n, 1, base); }

static void meta(mp_gguf_writer *w, const char *arch, int kv) {
    char k[128];
#define U32(key, v) (snprintf(k, sizeof k, "%s." key, arch), mp_gguf_writer_set_u32(w, k, (v)))
    mp_gguf_writer_set_str(w, "general.architecture", arch);
    U32("embedding_length", D);
    U32("block_count", L);
    U32("attention.head_count", H);
    U32("attention.head_count_kv", kv);
    U32("feed_forward_length", M);
    U32("context_length", CTX);
#undef U32
}

static const uint32_t TYPES[4] = {MP_GGML_Q8_0, MP_GGML_Q4_0, MP_GGML_Q4_K, MP_GGML_Q6_K};
static const uint32_t HALF[2] = {MP_GGML_F16, MP_GGML_BF16};
static int with_f32; /* every other linear weight F32 (kept as a view in quantized mode) */
static int halves;   /* F16 and BF16 weights instead of the quantized types */
static uint32_t pick(int i) { return with_f32 && i % 2 ? MP_GGML_F32 : halves ? HALF[i % 2] : TYPES[i % 4]; }

/* Writes PREFIX.q.gguf and PREFIX.f.gguf for arch "llama", "qwen2" or "gpt2". */
static uint64_t write_pair(const char *arch, const char *qpath, const char *fpath) {
    files f;
    memset(&f, 0, sizeof f);
    mp_gguf_writer_new(&f.wq);
    mp_gguf_writer_new(&f.wf);
    const int gpt2 = !strcmp(arch, "gpt2"), qwen2 = !strcmp(arch, "qwen2");
    const int KV = gpt2 ? H : 2, KD = KV * DH;
    meta(f.wq, arch, KV);
    meta(f.wf, arch, KV);
    int ti = (int)(rnd() % 4);
    weight(&f, "token_embd.weight", pick(ti++), D, V);
    if (!qwen2) weight(&f, "output.weight", pick(ti++), D, V);
    vec(&f, "output_norm.weight", D, 1.0f);
    if (gpt2) {
        vec(&f, "output_norm.bias", D, 0.0f);
        vec2(&f, "position_embd.weight", D, CTX, 0.0f);
    }
    char n[128];
    for (int l = 0; l < L; l++) {
#define NM(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        vec(&f, NM("attn_norm.weight"), D, 1.0f);
        vec(&f, NM("ffn_norm.weight"), D, 1.0f);
        if (gpt2) {
            vec(&f, NM("attn_norm.bias"), D, 0.0f);
            vec(&f, NM("ffn_norm.bias"), D, 0.0f);
            weight(&f, NM("attn_qkv.weight"), pick(ti++), D, 3 * D);
            vec(&f, NM("attn_qkv.bias"), 3 * D, 0.0f);
            vec(&f, NM("attn_output.bias"), D, 0.0f);
            weight(&f, NM("ffn_up.weight"), pick(ti++), D, M);
            vec(&f, NM("ffn_up.bias"), M, 0.0f);
            vec(&f, NM("ffn_down.bias"), D, 0.0f);
        } else {
            weight(&f, NM("attn_q.weight"), pick(ti++), D, H * DH);
            weight(&f, NM("attn_k.weight"), pick(ti++), D, KD);
            weight(&f, NM("attn_v.weight"), pick(ti++), D, KD);
            if (qwen2) {
                vec(&f, NM("attn_q.bias"), H * DH, 0.0f);
                vec(&f, NM("attn_k.bias"), KD, 0.0f);
                vec(&f, NM("attn_v.bias"), KD, 0.0f);
            }
            weight(&f, NM("ffn_gate.weight"), pick(ti++), D, M);
            weight(&f, NM("ffn_up.weight"), pick(ti++), D, M);
        }
        weight(&f, NM("attn_output.weight"), pick(ti++), H * DH, D);
        weight(&f, NM("ffn_down.weight"), pick(ti++), M, D);
#undef NM
    }
    CHECK(mp_gguf_writer_write(f.wq, qpath) == MP_OK, "%s", mp_last_error());
    CHECK(mp_gguf_writer_write(f.wf, fpath) == MP_OK, "%s", mp_last_error());
    mp_gguf_writer_free(f.wq);
    mp_gguf_writer_free(f.wf);
    for (int i = 0; i < f.nkeep; i++) free(f.keep[i]);
    return f.qbytes;
}

/* a hook that changes nothing (it makes the forward take the point's path) */
static int noop_hook(void *user, const mp_hook_info *info, float *data) {
    (void)user, (void)info, (void)data;
    return 0;
}

static void logits_all(const mp_model *m, const int *tok, int T, float *out) {
    mp_forward_params fp = mp_forward_params_default();
    CHECK(mp_model_forward(m, tok, 1, T, &fp, out) == MP_OK, "%s", mp_last_error());
}

static void logits_steps(const mp_model *m, const int *tok, int T, float *out) {
    mp_kvcache kc;
    CHECK(mp_kvcache_init(&kc, &m->cfg, 1, T) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.cache = &kc;
    fp.logits = MP_LOGITS_LAST;
    for (int t = 0; t < T; t++)
        CHECK(mp_model_forward(m, tok + t, 1, 1, &fp, out + (size_t)t * (size_t)m->cfg.vocab) == MP_OK, "%s", mp_last_error());
    mp_kvcache_free(&kc);
}

static void stats(const float *a, const float *b, size_t n, double *maxd, double *meand, double *big, double *meanabs) {
    *maxd = *meand = *big = *meanabs = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        *maxd = fmax(*maxd, d);
        *meand += d / (double)n;
        *big = fmax(*big, fabs(b[i]));
        *meanabs += fabs(b[i]) / (double)n;
    }
}

static void test_arch(const char *arch) {
    char qp[256], fp[256], hp[256];
    snprintf(qp, sizeof qp, "/tmp/mp_test_qmodel_%d_%s.q.gguf", (int)getpid(), arch);
    snprintf(fp, sizeof fp, "/tmp/mp_test_qmodel_%d_%s.f.gguf", (int)getpid(), arch);
    snprintf(hp, sizeof hp, "/tmp/mp_test_qmodel_%d_%s.h5", (int)getpid(), arch);
    const uint64_t qbytes = write_pair(arch, qp, fp);
    mp_model *mq = NULL, *mf = NULL, *mc = NULL, *mh = NULL;
    if (mp_model_load_gguf(&mq, qp) || mp_model_load_gguf(&mf, fp)) {
        CHECK(0, "%s: %s", arch, mp_last_error());
        goto done;
    }
    char types[64];
    mp_model_weight_types(mq, types, sizeof types);
    CHECK(mp_model_is_quantized(mq) && !mp_model_is_quantized(mf), "%s: the quantized file loads quantized (%s)", arch, types);
    CHECK(mq->q->bytes == qbytes, "%s: quantized weights take the file's %llu bytes (got %zu)", arch,
          (unsigned long long)qbytes, mq->q->bytes);
    enum { T = 40 };
    int tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int)(rnd() % V);
    float *a = malloc((size_t)T * V * sizeof(float)), *b = malloc((size_t)T * V * sizeof(float));
    double maxd, meand, big, meanabs;
    /* prefill: panels + sgemm (float32 products of the decoded weights), or on a CPU with tiles for the
     * quantized types (mp_qdot_tiles) 8-bit activations as in decoding */
    const int tiled = !halves && mp_qdot_tiles(MP_GGML_Q8_0);
    float *p = malloc((size_t)T * V * sizeof(float));
    logits_all(mq, tok, T, p);
    logits_all(mf, tok, T, b);
    stats(p, b, (size_t)T * V, &maxd, &meand, &big, &meanabs);
    if (tiled)
        CHECK(maxd <= 0.3 * big && meand <= 0.1 * meanabs,
              "%s prefill (tiles): quantized vs float32 logits: max |diff| %.3g (bound %.3g), mean %.3g (bound %.3g)",
              arch, maxd, 0.3 * big, meand, 0.1 * meanabs);
    else
        CHECK(maxd <= 1e-4 * big, "%s prefill: quantized vs float32 logits differ by %.3g (largest %.3g)", arch, maxd,
              big);
    printf("%-5s [%s] prefill T %d%s: max |diff| %.2e (largest |logit| %.3g)\n", arch, types, T,
           tiled ? " (8-bit tiles)" : "", maxd, big);
    /* decoding: quantized kernels with 8-bit activations (half weights: float32
     * activations, each weight widened exactly, so float32 rounding only) */
    logits_steps(mq, tok, T, a);
    stats(a, b, (size_t)T * V, &maxd, &meand, &big, &meanabs);
    if (halves)
        CHECK(maxd <= 1e-4 * big, "%s decode: half vs float32 logits differ by %.3g (largest %.3g)", arch, maxd, big);
    CHECK(maxd <= 0.3 * big && meand <= 0.1 * meanabs,
          "%s decode: quantized vs float32 logits: max |diff| %.3g (bound %.3g), mean %.3g (bound %.3g)", arch, maxd,
          0.3 * big, meand, 0.1 * meanabs);
    printf("%-5s decode (%s kernels): max |diff| %.2e = %.2f%% of the largest |logit|, mean %.2e = %.2f%% of the mean\n",
           arch, mp_qdot_isa_name(mp_qdot_isa_active()), maxd, 100 * maxd / big, meand, 100 * meand / meanabs);
    if (tiled) { /* the same 8-bit products row by row: prefill and decoding agree but for float32 rounding
                  * elsewhere (attention, norms), which may flip an 8-bit code now and then */
        double pd, pmean, pbig, pmeanabs;
        stats(p, a, (size_t)T * V, &pd, &pmean, &pbig, &pmeanabs);
        CHECK(pd <= 0.05 * pbig && pmean <= 1e-3 * pmeanabs,
              "%s prefill (tiles) vs decode: max |diff| %.3g (bound %.3g), mean %.3g (bound %.3g)", arch, pd, 0.05 * pbig,
              pmean, 1e-3 * pmeanabs);
        printf("%-5s prefill (tiles) vs decode: max |diff| %.2e, mean %.2e (mean |logit| %.3g)\n", arch, pd, pmean,
               pmeanabs);
    }
    free(p);
    /* decoded copy = the float32 file's weights, bit for bit */
    CHECK(mp_model_dequantized_copy(mq, &mc) == MP_OK, "%s", mp_last_error());
    if (mc) {
        mp_param_desc dc[MP_PARAM_MAX], df[MP_PARAM_MAX];
        int nc = mp_params_describe(&mc->cfg, &mc->p, dc), nf = mp_params_describe(&mf->cfg, &mf->p, df), same = nc == nf;
        for (int i = 0; same && i < nc; i++) same = dc[i].n == df[i].n && !memcmp(dc[i].p, df[i].p, dc[i].n * sizeof(float));
        CHECK(same, "%s: the dequantized copy's parameters equal the float32 file's", arch);
    }
    /* writers dequantize on demand */
    CHECK(mp_checkpoint_save(hp, mq, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(mp_model_load(&mh, hp) == MP_OK, "%s", mp_last_error());
    if (mh) {
        logits_all(mh, tok, T, a);
        logits_all(mf, tok, T, b);
        CHECK(tu_max_abs_diff(a, b, (size_t)T * V) == 0.0, "%s: the saved (dequantized) model computes the float32 logits", arch);
    }
    /* training dequantizes in place */
    mp_acts acts;
    CHECK(mp_acts_init(&acts, &mq->cfg, 1, 4) == MP_OK, "%s", mp_last_error());
    mp_forward_params tp = mp_forward_params_default();
    tp.acts = &acts;
    CHECK(mp_model_forward(mq, tok, 1, 4, &tp, NULL) == MP_ERR_ARG && strstr(mp_last_error(), "quantized"),
          "%s: training mode on quantized weights is refused with a message: %s", arch, mp_last_error());
    CHECK(mp_model_make_owned(mq) == MP_OK && !mp_model_is_quantized(mq), "%s: make_owned dequantizes", arch);
    CHECK(mp_model_forward(mq, tok, 1, 4, &tp, NULL) == MP_OK, "%s", mp_last_error());
    mp_acts_free(&acts);
    logits_all(mq, tok, T, a);
    logits_all(mf, tok, T, b);
    CHECK(tu_max_abs_diff(a, b, (size_t)T * V) == 0.0, "%s: the dequantized model computes the float32 logits", arch);
    free(a);
    free(b);
done:
    mp_model_free(mq);
    mp_model_free(mf);
    mp_model_free(mc);
    mp_model_free(mh);
    unlink(qp);
    unlink(fp);
    unlink(hp);
}

/* ---- general.alignment 1 and 2 (review finding 7) ----
 * The writer always aligns to 32, so the file is laid out again here, by hand
 * (GGUF v3: header, key/values, tensor infos, data), with general.alignment
 * `align` and every tensor's data at an address that is 1 (align 1) or 2
 * (align 2) mod 4. */

static void put(FILE *f, const void *p, size_t n) { CHECK(fwrite(p, 1, n, f) == n, "short write"); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s) { put_u64(f, strlen(s)); put(f, s, strlen(s)); }
static void kv_u32(FILE *f, const char *k, uint32_t v) { put_str(f, k); put_u32(f, MP_GGUF_UINT32); put_u32(f, v); }

static void relayout(const char *src, const char *dst, uint32_t align, int kv_heads) {
    mp_gguf *g = NULL;
    CHECK(mp_gguf_open(src, &g) == MP_OK, "%s", mp_last_error());
    if (!g) return;
    const size_t nt = mp_gguf_n_tensors(g);
    uint64_t *off = calloc(nt, sizeof *off);
    for (int pass = 0; pass < 2; pass++) { /* 1: sizes (offsets do not change them); 2: the file */
        FILE *f = pass ? fopen(dst, "wb") : tmpfile();
        CHECK(f != NULL, "%s", dst);
        put(f, "GGUF", 4);
        put_u32(f, 3);
        put_u64(f, nt);
        put_u64(f, 8);
        put_str(f, "general.architecture");
        put_u32(f, MP_GGUF_STRING);
        put_str(f, "llama");
        kv_u32(f, "general.alignment", align);
        kv_u32(f, "llama.embedding_length", D);
        kv_u32(f, "llama.block_count", L);
        kv_u32(f, "llama.attention.head_count", H);
        kv_u32(f, "llama.attention.head_count_kv", (uint32_t)kv_heads);
        kv_u32(f, "llama.feed_forward_length", M);
        kv_u32(f, "llama.context_length", CTX);
        for (size_t i = 0; i < nt; i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
            put_str(f, t->name);
            put_u32(f, t->n_dims);
            for (uint32_t d = 0; d < t->n_dims; d++) put_u64(f, t->dims[d]);
            put_u32(f, t->type);
            put_u64(f, off[i]);
        }
        const uint64_t start = ((uint64_t)ftell(f) + align - 1) / align * align; /* the data section */
        if (!pass) { /* each tensor at an address = align (mod 4): never a multiple of 4 */
            uint64_t end = 0;
            for (size_t i = 0; i < nt; i++) {
                uint64_t o = end + 1;
                while ((start + o) % 4 != align % 4) o++;
                off[i] = o;
                end = o + mp_gguf_tensor_at(g, i)->n_bytes;
            }
        } else {
            for (uint64_t p = (uint64_t)ftell(f); p < start; p++) fputc(0, f);
            uint64_t pos = 0;
            for (size_t i = 0; i < nt; i++) {
                const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
                for (; pos < off[i]; pos++) fputc(0, f);
                put(f, t->data, t->n_bytes);
                pos += t->n_bytes;
            }
        }
        CHECK(fclose(f) == 0, "%s", dst);
    }
    free(off);
    mp_gguf_close(g);
}

static void test_alignment(void) {
    char qp[256], fp[256], ap[256];
    snprintf(qp, sizeof qp, "/tmp/mp_test_qmodel_%d_al.q.gguf", (int)getpid());
    snprintf(fp, sizeof fp, "/tmp/mp_test_qmodel_%d_al.f.gguf", (int)getpid());
    snprintf(ap, sizeof ap, "/tmp/mp_test_qmodel_%d_al.a.gguf", (int)getpid());
    with_f32 = 1;
    write_pair("llama", qp, fp);
    with_f32 = 0;
    mp_model *mq = NULL;
    CHECK(mp_model_load_gguf(&mq, qp) == MP_OK, "%s", mp_last_error());
    enum { T = 40 };
    int tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int)(rnd() % V);
    float *a = malloc((size_t)T * V * sizeof(float)), *b = malloc((size_t)T * V * sizeof(float));
    float *a1 = malloc((size_t)T * V * sizeof(float)), *b1 = malloc((size_t)T * V * sizeof(float));
    if (mq) {
        logits_all(mq, tok, T, a);
        logits_steps(mq, tok, T, b);
    }
    for (uint32_t align = 1; mq && align <= 2; align++) {
        relayout(qp, ap, align, 2);
        mp_gguf *g = NULL;
        int odd_f32 = 0;
        CHECK(mp_gguf_open(ap, &g) == MP_OK && mp_gguf_alignment(g) == align, "%s", mp_last_error());
        for (size_t i = 0; g && i < mp_gguf_n_tensors(g); i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
            odd_f32 += t->type == MP_GGML_F32 && t->n_dims == 2 && (uintptr_t)t->data % 4 != 0;
        }
        mp_gguf_close(g);
        CHECK(odd_f32 >= 4, "align %u: the file has F32 weights at addresses that are not multiples of 4 (%d)", align,
              odd_f32);
        mp_model *mm = NULL;
        CHECK(mp_model_load_gguf(&mm, ap) == MP_OK, "align %u: %s", align, mp_last_error());
        if (!mm) continue;
        int f32 = 0, misaligned = 0;
        for (size_t i = 0; i < 7 * (size_t)L; i++) {
            const mp_qmat *qm = &mm->q->mats[i];
            if (qm->data && qm->type == MP_GGML_F32) f32++, misaligned += (uintptr_t)qm->data % _Alignof(float) != 0;
        }
        const mp_qmat *ends[2] = {&mm->q->embed, &mm->q->unembed};
        for (int i = 0; i < 2; i++)
            if (ends[i]->type == MP_GGML_F32) f32++, misaligned += (uintptr_t)ends[i]->data % _Alignof(float) != 0;
        CHECK(f32 >= 4 && misaligned == 0, "align %u: %d F32 weights held, %d of them at misaligned addresses", align,
              f32, misaligned);
        logits_all(mm, tok, T, a1);
        logits_steps(mm, tok, T, b1);
        CHECK(tu_max_abs_diff(a, a1, (size_t)T * V) == 0.0 && tu_max_abs_diff(b, b1, (size_t)T * V) == 0.0,
              "align %u: the logits equal the aligned file's (prefill %.3g, decode %.3g)", align,
              tu_max_abs_diff(a, a1, (size_t)T * V), tu_max_abs_diff(b, b1, (size_t)T * V));
        printf("alignment %u: %d F32 weights (at addresses %u mod 4 in the file) held aligned; logits as the aligned file's\n",
               align, f32, align);
        mp_model_free(mm);
    }
    free(a);
    free(b);
    free(a1);
    free(b1);
    mp_model_free(mq);
    unlink(qp);
    unlink(fp);
    unlink(ap);
}

/* ---- Hugging Face folders in BF16 / F16 ---- */

/* Writes DIR/model.safetensors with every tensor of src, 2-D ones as `half`
 * (F16 or BF16, 2 bytes each), others F32; and FDIR/model.safetensors with the
 * same values in F32 (2-D ones rounded through the half type); both get src's
 * config.json. Returns the half file's bytes of 2-D tensors. */
static uint64_t write_half_folder(const char *src, const char *dir, const char *fdir, uint32_t half) {
    char path[512];
    snprintf(path, sizeof path, "%s", src);
    mp_safetensors *st = NULL;
    CHECK(mp_safetensors_open(path, &st) == MP_OK, "%s", mp_last_error());
    if (!st) return 0;
    const size_t n = mp_safetensors_n_tensors(st);
    float **vals = calloc(n, sizeof *vals);
    mp_st_entry *ent = calloc(n, sizeof *ent);
    char *hdr = malloc(1 << 20);
    size_t hl = 0, off = 0;
    uint64_t half_bytes = 0;
    hl += (size_t)snprintf(hdr + hl, (1 << 20) - hl, "{");
    for (size_t i = 0; i < n; i++) {
        const mp_st_tensor *t = mp_safetensors_tensor_at(st, i);
        vals[i] = malloc((size_t)t->n_elements * sizeof(float));
        CHECK(mp_safetensors_read_f32(st, t, vals[i], t->n_elements) == MP_OK, "%s", mp_last_error());
        const int h = t->n_dims == 2;
        if (h)
            for (uint64_t k = 0; k < t->n_elements; k++)
                vals[i][k] = half == MP_GGML_F16 ? mp_quant_f16_to_f32(mp_quant_f32_to_f16(vals[i][k]))
                                                 : mp_quant_bf16_to_f32(mp_quant_f32_to_bf16(vals[i][k]));
        const size_t bytes = (size_t)t->n_elements * (h ? 2 : 4);
        hl += (size_t)snprintf(hdr + hl, (1 << 20) - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t->name,
                               h ? (half == MP_GGML_F16 ? "F16" : "BF16") : "F32");
        for (uint32_t d = 0; d < t->n_dims; d++)
            hl += (size_t)snprintf(hdr + hl, (1 << 20) - hl, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        hl += (size_t)snprintf(hdr + hl, (1 << 20) - hl, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
        if (h) half_bytes += bytes;
        ent[i] = (mp_st_entry){t->name, t->n_dims, t->shape, vals[i]};
    }
    hl += (size_t)snprintf(hdr + hl, (1 << 20) - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s && cp %s/config.json %s/ && cp %s/config.json %s/", dir, fdir, src, dir,
             src, fdir);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/model.safetensors", fdir);
    CHECK(mp_safetensors_write(path, ent, n, NULL) == MP_OK, "%s", mp_last_error());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) {
        const uint64_t len = hl;
        put(f, &len, 8);
        put(f, hdr, hl);
        for (size_t i = 0; i < n; i++) {
            const mp_st_tensor *t = mp_safetensors_tensor_at(st, i);
            for (uint64_t k = 0; k < t->n_elements; k++) {
                if (t->n_dims == 2) {
                    const uint16_t v = half == MP_GGML_F16 ? mp_quant_f32_to_f16(vals[i][k]) : mp_quant_f32_to_bf16(vals[i][k]);
                    put(f, &v, 2);
                } else {
                    put(f, &vals[i][k], 4);
                }
            }
        }
        fclose(f);
    }
    for (size_t i = 0; i < n; i++) free(vals[i]);
    free(vals);
    free(ent);
    free(hdr);
    mp_safetensors_close(st);
    return half_bytes;
}

static void test_hf_half(const char *arch, uint32_t half) {
    char dir[256], fdir[256], cmd[600];
    snprintf(dir, sizeof dir, "/tmp/mp_test_qmodel_%d_hf_%s_h", (int)getpid(), arch);
    snprintf(fdir, sizeof fdir, "/tmp/mp_test_qmodel_%d_hf_%s_f", (int)getpid(), arch);
    const uint64_t hbytes = write_half_folder(tu_data(arch), dir, fdir, half);
    mp_model *mh = NULL, *mf = NULL;
    if (mp_model_load(&mh, dir) || mp_model_load(&mf, fdir)) {
        CHECK(0, "%s: %s", arch, mp_last_error());
        goto done;
    }
    char types[64];
    mp_model_weight_types(mh, types, sizeof types);
    CHECK(mp_model_is_quantized(mh) && !mp_model_is_quantized(mf) && !strcmp(types, mp_quant_type_name(half)),
          "%s: the %s folder keeps its weights as stored (%s)", arch, mp_quant_type_name(half), types);
    /* the kept bytes: 2 per linear weight (the embedding once when tied) */
    const mp_config *c = &mh->cfg;
    const uint64_t Dm = (uint64_t)c->d_model, HD = (uint64_t)c->n_head * c->d_head, KD = (uint64_t)c->n_kv_head * c->d_head;
    const uint64_t lin = (uint64_t)c->vocab * Dm * (c->tied ? 1 : 2) +
                         (uint64_t)c->n_layer * (2 * HD * Dm + 2 * KD * Dm + 3 * (uint64_t)c->d_mlp * Dm);
    CHECK(mh->q->bytes == 2 * lin && hbytes >= 2 * lin, "%s: kept weights take %zu bytes, 2 x %llu weights expected",
          arch, mh->q->bytes, (unsigned long long)lin);
    enum { T = 40 }; /* > 32 rows: the prefill takes the panels, the decode the dot kernels */
    int tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int)(rnd() % (unsigned)c->vocab);
    const double d = tu_compare_models(mh, mf, tok, T, arch);
    const size_t VV = (size_t)c->vocab;
    float *a = malloc(T * VV * sizeof(float)), *b = malloc(T * VV * sizeof(float));
    mp_kvcache kc;
    CHECK(mp_kvcache_init(&kc, c, 1, T) == MP_OK, "%s", mp_last_error());
    mp_forward_params fp = mp_forward_params_default();
    fp.cache = &kc;
    fp.logits = MP_LOGITS_LAST;
    for (int t = 0; t < T; t++) CHECK(mp_model_forward(mh, tok + t, 1, 1, &fp, a + (size_t)t * VV) == MP_OK, "%s", mp_last_error());
    mp_kvcache_free(&kc);
    fp = mp_forward_params_default();
    CHECK(mp_model_forward(mf, tok, 1, T, &fp, b) == MP_OK, "%s", mp_last_error());
    double maxd, meand, big, meanabs;
    stats(a, b, T * VV, &maxd, &meand, &big, &meanabs);
    CHECK(d <= 1e-4 && maxd <= 1e-4 * big, "%s %s: prefill max |diff| %.3g over logits and hook points (scaled), "
          "decode %.3g of the largest |logit| %.3g", arch, mp_quant_type_name(half), d, maxd, big);
    printf("hf %-11s %-4s kept (%zu bytes): logits and every hook point vs F32: %.2e; decode %.2e (largest |logit| %.3g)\n",
           arch, mp_quant_type_name(half), mh->q->bytes, d, maxd, big);
    /* precision "bf16" on the CPU: the BF16 weights multiply activations rounded to BF16 (u = 2^-8 relative to
     * each product's input, float32 sums; runtime/qdot.h). A prefill's products equal a decode's bit for bit,
     * so prefill and decode differ only where float32 rounding elsewhere (attention, norms) moves an activation
     * across a BF16 step; against the float32 model the error is that rounding carried through the layers. */
    const mp_status bs = mp_model_to_device(mh, MP_DEVICE_CPU, MP_PRECISION_BF16);
    if (half != MP_GGML_BF16 || !mp_qdot_has_bf16()) {
        CHECK(bs == MP_ERR_ARG && mh->precision == MP_PRECISION_FP32, "%s %s: precision bf16 refused (%s)", arch,
              mp_quant_type_name(half), mp_last_error());
    } else {
        CHECK(bs == MP_OK && mh->precision == MP_PRECISION_BF16, "%s: precision bf16: %s", arch, mp_last_error());
        /* every BF16 product takes the BF16 path, the classifier's too (a tied model's unembedding is a copy
         * of the embedding's matrix) */
        CHECK(mh->q->unembed.bf16_products && mh->q->wq[0].bf16_products && mh->q->w2[c->n_layer - 1].bf16_products,
              "%s (tied %d): the classifier and the layers' BF16 weights multiply in BF16", arch, c->tied);
        float *p = malloc(T * VV * sizeof(float)), *s = malloc(T * VV * sizeof(float));
        logits_all(mh, tok, T, p);
        logits_steps(mh, tok, T, s);
        double pd, pmean, pbig, pmeanabs;
        stats(p, s, T * VV, &pd, &pmean, &pbig, &pmeanabs);
        CHECK(pd <= 0.02 * pbig && pmean <= 1e-3 * pmeanabs,
              "%s bf16: prefill vs decode: max |diff| %.3g (bound %.3g), mean %.3g (bound %.3g)", arch, pd, 0.02 * pbig,
              pmean, 1e-3 * pmeanabs);
        double fd, fmean, fbig, fmeanabs;
        stats(p, b, T * VV, &fd, &fmean, &fbig, &fmeanabs);
        /* measured 1.0-1.3% of the largest logit, mean 0.3-0.5% of the mean (qwen2, qwen3, gemma2): bounds 4x */
        CHECK(fd <= 0.05 * fbig && fmean <= 0.02 * fmeanabs,
              "%s bf16: vs the float32 model: max |diff| %.3g (bound %.3g), mean %.3g (bound %.3g)", arch, fd,
              0.05 * fbig, fmean, 0.02 * fmeanabs);
        printf("hf %-11s bf16 products: prefill vs decode max |diff| %.2e, mean %.2e; vs F32 max %.2e = %.2f%% of the "
               "largest |logit|, mean %.2f%% of the mean\n", arch, pd, pmean, fd, 100 * fd / fbig, 100 * fmean / fmeanabs);
        /* the per-head paths (hook_q_input / k_input / v_input split the projections by head) multiply at
         * the model's precision too: each BF16 product is the same whatever the block it falls in, so the
         * hooked forward gives the plain one's logits bit for bit (float32 products there would move them
         * by the BF16 rounding, about 1% of the largest logit) */
        mp_hooks *hs = mp_hooks_new(c);
        CHECK(hs && mp_hooks_add(hs, "blocks.*.hook_q_input,blocks.*.hook_k_input,blocks.*.hook_v_input", noop_hook,
                                 NULL) == MP_OK, "%s", mp_last_error());
        fp = mp_forward_params_default();
        fp.hooks = hs;
        CHECK(mp_model_forward(mh, tok, 1, T, &fp, s) == MP_OK, "%s", mp_last_error());
        double hd, hmean, hbig, hmeanabs;
        stats(s, p, T * VV, &hd, &hmean, &hbig, &hmeanabs);
        CHECK(hd == 0, "%s bf16: with the q/k/v input points hooked, logits differ by %.3g (largest |logit| %.3g)",
              arch, hd, hbig);
        mp_hooks_free(hs);
        /* back to fp32: the float32 products again, the very logits of before */
        CHECK(mp_model_to_device(mh, MP_DEVICE_CPU, MP_PRECISION_FP32) == MP_OK, "%s", mp_last_error());
        logits_steps(mh, tok, T, s);
        CHECK(memcmp(s, a, T * VV * sizeof(float)) == 0, "%s: back at fp32, the decode's logits of before", arch);
        CHECK(!mh->q->unembed.bf16_products && !mh->q->wq[0].bf16_products, "%s: back at fp32, float32 products", arch);
        free(p);
        free(s);
    }
    free(a);
    free(b);
done:
    mp_model_free(mh);
    mp_model_free(mf);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, fdir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

int main(void) {
    mp_io_init();
    test_arch("llama");
    test_arch("qwen2");
    test_arch("gpt2");
    halves = 1; /* F16 and BF16 weights kept as stored */
    test_arch("llama");
    test_arch("gpt2");
    halves = 0;
    test_alignment();
    test_hf_half("arch_qwen2", MP_GGML_BF16);
    test_hf_half("arch_qwen3", MP_GGML_BF16);
    test_hf_half("arch_olmo2", MP_GGML_F16);
    test_hf_half("arch_gemma2", MP_GGML_BF16);
    return tu_finish("test_qmodel");
}
