/* test_shape_gguf.c — bench/shape_gguf.c, the real-shape random GGUF writer
 * behind bench_gen --mode make-shape (bench/peers_scale.sh): the tiny shape in
 * each type it writes (F32, F16, BF16, Q8_0) is checked against the recipe in
 * shape_gguf.h, regenerated here row by row with GSL (mt19937 seeded per row,
 * Gaussian ziggurat, sd 0.02), within each type's rounding (F32 exact, F16
 * half an f16 ulp, BF16 half a bf16 ulp, Q8_0 half a quantisation step); the
 * sample statistics of all weights (mean within 4 standard errors of 0, sd
 * within 0.5% of 0.02); the metadata and tensor types and shapes; the planned
 * file size against the file; rows made in blocks against rows made one by
 * one; and the files load in mechprobe with the shape's config, their logits
 * within each type's rounding of the F32 file's. */
#include "formats.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "shape_gguf.h"
#include "testutil.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SEED = 7, NTOK = 8 };

/* the recipe, written out: row r of tensor t */
static void ref_row(int t, uint64_t r, float *x, size_t n) {
    const uint32_t base = (uint32_t)(((uint64_t)SEED * 0x9E3779B97F4A7C15ull) >> 32);
    gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(g, (uint32_t)(base + ((uint32_t)t << 17) + (uint32_t)r));
    for (size_t i = 0; i < n; i++) x[i] = (float)gsl_ran_gaussian_ziggurat(g, 0.02);
    gsl_rng_free(g);
}

/* |got - want| allowed for one value of a row in `type` (amax: the row's 32-block max |x| for Q8_0) */
static double tol(uint32_t type, double want, double amax) {
    switch (type) {
    case MP_GGML_F32: return 0.0;
    case MP_GGML_F16: return fabs(want) * 0x1p-11 + 0x1p-25;
    case MP_GGML_BF16: return fabs(want) * 0x1p-8;
    default: return 0.5 * amax / 127 + amax * 0x1p-11; /* half a step, and d rounded to f16 */
    }
}

static void check_file(const char *path, uint32_t type, const char *tname, float *logits_f32, float *logits) {
    const sg_shape *s = sg_shape_find("tiny");
    sg_plan dry, plan;
    CHECK(sg_write(s, type, SEED, path, 1, &dry) == MP_OK, "%s dry run: %s", tname, mp_last_error());
    struct stat sb;
    CHECK(stat(path, &sb) != 0, "%s: a dry run writes nothing", tname);
    CHECK(sg_write(s, type, SEED, path, 0, &plan) == MP_OK, "%s: %s", tname, mp_last_error());
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == plan.file_bytes && plan.file_bytes == dry.file_bytes,
          "%s: file %lld bytes, planned %llu", tname, (long long)sb.st_size, (unsigned long long)plan.file_bytes);
    const uint64_t D = 256, M = 512, V = 1024, HD = 8 * 32, KD = 2 * 32;
    const uint64_t params = V * D + 2 * (D + HD * D + 2 * KD * D + D * HD + D + 3 * M * D) + D;
    CHECK(plan.n_tensors == 20 && plan.params == params, "%s: %d tensors, %llu params (want 20, %llu)", tname,
          plan.n_tensors, (unsigned long long)plan.params, (unsigned long long)params);

    mp_gguf *g = NULL;
    CHECK(mp_gguf_open(path, &g) == MP_OK, "%s: open: %s", tname, mp_last_error());
    if (!g) return;
    const char *sv = NULL;
    int64_t iv = 0;
    double fv = 0;
    CHECK(mp_gguf_get_str(g, "general.architecture", &sv) == MP_GGUF_FOUND && !strcmp(sv, "llama"), "arch");
    const struct { const char *key; int64_t want; } ints[] = {
        {"llama.embedding_length", 256}, {"llama.block_count", 2}, {"llama.feed_forward_length", 512},
        {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", 2}, {"llama.rope.dimension_count", 32},
        {"llama.vocab_size", 1024}, {"tokenizer.ggml.bos_token_id", 256}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        CHECK(mp_gguf_get_int(g, ints[i].key, &iv) == MP_GGUF_FOUND && iv == ints[i].want, "%s: %s = %lld", tname,
              ints[i].key, (long long)iv);
    CHECK(mp_gguf_get_float(g, "llama.rope.freq_base", &fv) == MP_GGUF_FOUND && fv == 500000.0, "theta %g", fv);
    CHECK(mp_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &fv) == MP_GGUF_FOUND && fv == (double)1e-5f,
          "eps %g", fv);
    const mp_gguf_string *toks = NULL;
    uint64_t nt = 0;
    CHECK(mp_gguf_get_str_array(g, "tokenizer.ggml.tokens", &toks, &nt) == MP_GGUF_FOUND && nt == V &&
          !strcmp(toks[65].str, "A") && !strcmp(toks[256].str, "<s>") && !strcmp(toks[1023].str, "<unused1023>"),
          "%s: vocabulary", tname);
    CHECK(mp_gguf_n_tensors(g) == 20 && !mp_gguf_find_tensor(g, "output.weight") && !mp_gguf_find_tensor(g, "rope_freqs.weight"),
          "%s: 20 tensors, tied, no rope_freqs", tname);

    double sum = 0, sum2 = 0;
    uint64_t n_w = 0;
    int bad_rows = 0, bad_norms = 0, bad_types = 0;
    float *ref = malloc(M * sizeof *ref), *all = NULL;
    for (size_t ti = 0; ti < mp_gguf_n_tensors(g); ti++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, ti);
        const int norm = t->n_dims == 1;
        if (t->type != (norm ? MP_GGML_F32 : type)) bad_types++;
        all = realloc(all, (size_t)t->n_elements * sizeof *all);
        CHECK(mp_gguf_read_f32(g, t, all, t->n_elements) == MP_OK, "%s: read %s", tname, t->name);
        if (norm) {
            for (uint64_t i = 0; i < t->n_elements; i++) bad_norms += all[i] != 1.0f;
            continue;
        }
        const uint64_t cols = t->dims[0], rows = t->dims[1];
        for (uint64_t i = 0; i < t->n_elements; i++) { sum += all[i]; sum2 += (double)all[i] * all[i]; }
        n_w += t->n_elements;
        /* rows 0, 1, the middle and the last against the recipe */
        const uint64_t pick[4] = {0, 1, rows / 2, rows - 1};
        for (int k = 0; k < 4; k++) {
            const float *got = all + pick[k] * cols;
            ref_row((int)ti, pick[k], ref, (size_t)cols);
            int bad = 0;
            for (uint64_t c = 0; c < cols; c++) {
                double amax = 0;
                for (uint64_t j = c / 32 * 32; j < c / 32 * 32 + 32; j++) amax = fmax(amax, fabs(ref[j]));
                if (fabs((double)got[c] - ref[c]) > tol(type, ref[c], amax)) bad++;
            }
            if (bad) {
                bad_rows++;
                fprintf(stderr, "%s: %s row %llu: %d values differ from the recipe\n", tname, t->name,
                        (unsigned long long)pick[k], bad);
            }
        }
        CHECK(memcmp(all, all + cols, cols * sizeof *all) != 0, "%s: %s rows 0 and 1 differ", tname, t->name);
    }
    CHECK(bad_types == 0 && bad_norms == 0 && bad_rows == 0, "%s: %d tensors of the wrong type, %d norm values not 1, "
          "%d rows off the recipe", tname, bad_types, bad_norms, bad_rows);
    const double mean = sum / (double)n_w, sd = sqrt(sum2 / (double)n_w - mean * mean);
    CHECK(fabs(mean) < 4 * 0.02 / sqrt((double)n_w), "%s: mean %.3g over %llu weights", tname, mean, (unsigned long long)n_w);
    CHECK(fabs(sd / 0.02 - 1) < 0.005, "%s: sd %.6f (want 0.02 within 0.5%%)", tname, sd);
    free(all);
    free(ref);
    mp_gguf_close(g);

    /* mechprobe loads it as the shape's config; same logits as the F32 file within the type's rounding */
    mp_model *m = NULL;
    CHECK(mp_model_load_gguf(&m, path) == MP_OK, "%s: load: %s", tname, mp_last_error());
    if (!m) return;
    const mp_config *c = &m->cfg;
    CHECK(c->d_model == 256 && c->n_layer == 2 && c->n_head == 8 && c->n_kv_head == 2 && c->d_head == 32 &&
          c->d_mlp == 512 && c->vocab == 1024 && c->tied && c->rope_theta == 500000.0f && c->norm_eps == 1e-5f &&
          c->n_rope_freqs == 0, "%s: config as the tiny shape", tname);
    int tok[NTOK] = {256, 72, 101, 108, 108, 111, 32, 119};
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_ALL;
    CHECK(mp_model_forward(m, tok, 1, NTOK, &fp, logits) == MP_OK, "%s: forward: %s", tname, mp_last_error());
    if (type == MP_GGML_F32) memcpy(logits_f32, logits, NTOK * V * sizeof *logits);
    double big = 0;
    for (size_t i = 0; i < NTOK * V; i++) big = fmax(big, fabs(logits_f32[i]));
    const double rel = type == MP_GGML_F32 ? 0 : type == MP_GGML_F16 ? 2e-3 : 2e-2; /* weights rounded 2^-11, 2^-8, ~2^-8 */
    CHECK(isfinite(big) && big > 0 && tu_max_abs_diff(logits, logits_f32, NTOK * V) <= rel * big,
          "%s: logits differ from F32's by %.3g (largest |logit| %.3g)", tname, tu_max_abs_diff(logits, logits_f32, NTOK * V), big);
    mp_model_free(m);
    unlink(path);
}

int main(void) {
    mp_init();
    char dir[] = "test_shape_gguf_XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    const struct { const char *name; uint32_t type; } types[] = {
        {"f32", MP_GGML_F32}, {"f16", MP_GGML_F16}, {"bf16", MP_GGML_BF16}, {"q8_0", MP_GGML_Q8_0}};
    float *l32 = calloc(NTOK * 1024, sizeof *l32), *l = calloc(NTOK * 1024, sizeof *l);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        uint32_t ty = 0;
        CHECK(sg_type_parse(types[i].name, &ty) == 0 && ty == types[i].type, "type name %s", types[i].name);
        check_file(path, types[i].type, types[i].name, l32, l);
    }
    free(l32);
    free(l);

    /* rows made in one block are the rows made one at a time (the writer's blocks and threads do not matter) */
    enum { COLS = 256, R0 = 5, NR = 40 };
    uint64_t rb = 0;
    mp_quant_bytes(MP_GGML_Q8_0, COLS, &rb);
    unsigned char *blk = malloc(NR * rb), *one = malloc(NR * rb);
    CHECK(sg_make_rows(MP_GGML_Q8_0, SEED, 7, COLS, R0, NR, blk) == MP_OK, "block of rows");
    for (int r = 0; r < NR; r++) CHECK(sg_make_rows(MP_GGML_Q8_0, SEED, 7, COLS, R0 + r, 1, one + r * rb) == MP_OK, "row");
    CHECK(memcmp(blk, one, NR * rb) == 0, "a block of rows equals its rows made one by one");
    free(blk);
    free(one);

    /* the shapes and the refusals */
    const sg_shape *b1 = sg_shape_find("llama3.2-1b"), *b8 = sg_shape_find("llama3-8b");
    CHECK(b1 && b1->d_model == 2048 && b1->n_layer == 16 && b1->n_head == 32 && b1->n_kv_head == 8 && b1->d_head == 64 &&
          b1->d_mlp == 8192 && b1->vocab == 128256 && b1->tied, "llama3.2-1b");
    CHECK(b8 && b8->d_model == 4096 && b8->n_layer == 32 && b8->n_head == 32 && b8->n_kv_head == 8 && b8->d_head == 128 &&
          b8->d_mlp == 14336 && b8->vocab == 128256 && !b8->tied, "llama3-8b");
    sg_plan p8;
    CHECK(b8 && sg_write(b8, MP_GGML_BF16, 1, "unused.gguf", 1, &p8) == MP_OK && p8.n_tensors == 291 &&
          p8.params == 8030261248ull, "llama3-8b plan: %d tensors, %llu params", p8.n_tensors, (unsigned long long)p8.params);
    uint32_t ty;
    CHECK(!sg_shape_find("llama3-70b") && sg_type_parse("q4_k", &ty) == -1, "unknown shape and type");
    CHECK(sg_write(sg_shape_find("tiny"), MP_GGML_Q4_K, 1, path, 0, NULL) == MP_ERR_ARG, "Q4_K refused");
    CHECK(sg_write(sg_shape_find("tiny"), MP_GGML_F32, 1, "/nonexistent/x.gguf", 0, NULL) != MP_OK &&
              strstr(mp_last_error(), "/nonexistent"), "missing folder named: %s", mp_last_error());
    rmdir(dir);
    return tu_finish("test_shape_gguf");
}
