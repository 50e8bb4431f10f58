/* test_forward.c — golden tests of the forward pass: every hook point and the
 * logits against reference activations from an independent PyTorch
 * implementation (../shared/golden and tests/data, made by ref_llama.py), the
 * greedy continuation token for token, batch > 1, grouped-query attention, an
 * untied classifier, the v1 header, KV-cache decoding against prefill, and the
 * attention block size not changing results. Tolerance: 1e-4 absolute (values
 * of order 1-10), as the golden data's README states. */
#include "h5io.h"
#include "formats.h"
#include "model.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define TOL 1e-4

/* Compares every /acts dataset and /logits of a golden file with batch row b
 * of a capture over a batch of B. */
static void compare_golden(const char *golden, const tu_capture *cap, const float *logits, int b, int B,
                           const char *label) {
    hid_t f;
    mp_status st = mp_h5_open(&f, golden, MP_H5_READ);
    CHECK(st == MP_OK, "%s: %s", golden, mp_last_error());
    if (st) return;
    mp_h5_entry *e;
    int n;
    CHECK(mp_h5_list(f, "/acts", &e, &n) == MP_OK, "%s", mp_last_error());
    int compared = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "/acts/%s", e[i].name);
        float *ref;
        mp_h5_dsinfo info;
        CHECK(mp_h5_read_f32(f, path, &ref, &info) == MP_OK, "%s", mp_last_error());
        size_t got_n;
        const float *got = tu_capture_get(cap, e[i].name, &got_n);
        CHECK(got != NULL, "%s: hook %s was not fired", label, e[i].name);
        if (got) {
            CHECK(got_n == info.numel * (size_t)B, "%s: %s has %zu values, golden %zu x %d", label, e[i].name, got_n,
                  info.numel, B);
            double d = tu_max_abs_diff(got + (size_t)b * info.numel, ref, info.numel);
            CHECK(d <= TOL, "%s: %s max |diff| = %.3g", label, e[i].name, d);
            if (d > worst) worst = d;
            compared++;
        }
        free(ref);
    }
    mp_h5_list_free(e, n);
    float *ref;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_f32(f, "/logits", &ref, &info) == MP_OK, "%s", mp_last_error());
    double d = tu_max_abs_diff(logits + (size_t)b * info.numel, ref, info.numel);
    CHECK(d <= TOL, "%s: logits max |diff| = %.3g", label, d);
    if (d > worst) worst = d;
    free(ref);
    mp_h5_close(&f);
    printf("%s: %d hook points + logits, worst |diff| %.2e (tol %.0e)\n", label, compared, worst, TOL);
}

static int *golden_tokens(const char *path, int *T) {
    hid_t f;
    int32_t *t = NULL;
    mp_h5_dsinfo info;
    if (mp_h5_open(&f, path, MP_H5_READ) || mp_h5_read_i32(f, "/tokens", &t, &info)) {
        CHECK(0, "%s", mp_last_error());
        return NULL;
    }
    mp_h5_close(&f);
    *T = (int)info.shape[1];
    return (int *)t;
}

static void run_captured(const mp_model *m, const int *toks, int B, int T, int q_block, tu_capture *cap, float **logits) {
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(hs, "*", tu_capture_cb, cap) == MP_OK, "%s", mp_last_error());
    *logits = malloc((size_t)B * T * m->cfg.vocab * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    fp.q_block = q_block;
    mp_status st = mp_model_forward(m, toks, B, T, &fp, *logits);
    CHECK(st == MP_OK, "forward: %s", mp_last_error());
    mp_hooks_free(hs);
}

static void test_model_golden(const char *model_path, const char *golden, int q_block, const char *label) {
    mp_model *m;
    mp_status st = mp_model_load_llama2c(&m, model_path);
    CHECK(st == MP_OK, "%s", mp_last_error());
    if (st) return;
    int T;
    int *toks = golden_tokens(golden, &T);
    if (!toks) { mp_model_free(m); return; }
    tu_capture cap = {0};
    float *logits;
    run_captured(m, toks, 1, T, q_block, &cap, &logits);
    compare_golden(golden, &cap, logits, 0, 1, label);
    tu_capture_free(&cap);
    free(logits);
    free(toks);
    mp_model_free(m);
}

/* The golden tokens are a greedy continuation of BOS: generation must agree. */
static void test_greedy(const char *model_path, const char *golden) {
    mp_model *m;
    if (mp_model_load_llama2c(&m, model_path)) { CHECK(0, "%s", mp_last_error()); return; }
    int T;
    int *toks = golden_tokens(golden, &T);
    int *out = malloc((size_t)T * sizeof(int)), n_out;
    mp_sampler_params sp = {0.0f, 1.0f, 0};
    mp_status st = mp_model_generate(m, toks, 1, T - 1, &sp, NULL, -1, NULL, NULL, out, &n_out);
    CHECK(st == MP_OK, "generate: %s", mp_last_error());
    CHECK(n_out == T, "generated %d tokens, expected %d", n_out, T);
    int first_bad = -1;
    for (int i = 0; i < T && i < n_out; i++)
        if (out[i] != toks[i]) { first_bad = i; break; }
    CHECK(first_bad < 0, "%s: greedy continuation differs at position %d", golden, first_bad);
    printf("greedy continuation of %s: %d/%d tokens agree\n", model_path, first_bad < 0 ? T : first_bad, T);
    free(out);
    free(toks);
    mp_model_free(m);
}

/* Batch of two different sequences against two single-sequence references. */
static void test_batch(const char *model_path, const char *ga, const char *gb, const char *label) {
    mp_model *m;
    if (mp_model_load_llama2c(&m, model_path)) { CHECK(0, "%s", mp_last_error()); return; }
    int Ta, Tb;
    int *a = golden_tokens(ga, &Ta), *b = golden_tokens(gb, &Tb);
    CHECK(Ta == Tb, "reference sequences must have equal length");
    int *toks = malloc(2 * (size_t)Ta * sizeof(int));
    memcpy(toks, a, (size_t)Ta * sizeof(int));
    memcpy(toks + Ta, b, (size_t)Ta * sizeof(int));
    tu_capture cap = {0};
    float *logits;
    run_captured(m, toks, 2, Ta, 5, &cap, &logits);
    char l[256];
    snprintf(l, sizeof l, "%s batch row 0", label);
    compare_golden(ga, &cap, logits, 0, 2, l);
    snprintf(l, sizeof l, "%s batch row 1", label);
    compare_golden(gb, &cap, logits, 1, 2, l);
    tu_capture_free(&cap);
    free(logits);
    free(toks);
    free(a);
    free(b);
    mp_model_free(m);
}

/* Decoding one token at a time over the KV cache gives the prefill's logits at
 * every position. B sequences, the first P positions prefilled through the
 * cache, then one token per step: B = 1 steps take sgemv, B <= 8 the
 * weight-streaming few-row kernel, larger B sgemm (ops.h), and the full
 * prefill sgemm, so the logits agree to float32 rounding of other summation
 * orders: 1e-5 of the largest |logit| (a wrong cache row or position differs
 * by ~0.1-1). threads > 0 runs at that many OpenMP threads: a step's attention
 * takes the query heads that share a KV head together when the KV heads (times
 * B) are at least the threads, and one query head at a time when they are fewer
 * (the path of MQA with one sequence), so both are tested on one model. */
static void test_kvcache(const char *model_path, int B, int P, int T, int threads) {
    mp_model *m;
    if (mp_model_load_llama2c(&m, model_path)) { CHECK(0, "%s", mp_last_error()); return; }
#ifdef _OPENMP
    const int threads0 = omp_get_max_threads();
    if (threads > 0) omp_set_num_threads(threads);
#else
    if (threads > 1) printf("test_kvcache: built without OpenMP: %d threads not tested\n", threads);
#endif
    const int V = m->cfg.vocab;
    int *toks = malloc((size_t)B * T * sizeof(int)), *pre = malloc((size_t)B * P * sizeof(int));
    int *col = malloc((size_t)B * sizeof(int));
    for (int i = 0; i < B * T; i++) toks[i] = (i * 7 + 3) % V;
    float *full = malloc((size_t)B * T * V * sizeof(float)), *step = malloc((size_t)B * V * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    CHECK(mp_model_forward(m, toks, B, T, &fp, full) == MP_OK, "%s", mp_last_error());
    double big = 0;
    for (size_t i = 0; i < (size_t)B * T * V; i++) big = fmax(big, fabs(full[i]));
    mp_kvcache cache;
    CHECK(mp_kvcache_init(&cache, &m->cfg, B, T) == MP_OK, "%s", mp_last_error());
    fp.cache = &cache;
    fp.logits = MP_LOGITS_LAST;
    for (int b = 0; b < B; b++) memcpy(pre + b * P, toks + b * T, (size_t)P * sizeof(int));
    CHECK(mp_model_forward(m, pre, B, P, &fp, step) == MP_OK, "%s", mp_last_error());
    double worst = 0;
    for (int b = 0; b < B; b++) {
        double d = tu_max_abs_diff(step + (size_t)b * V, full + ((size_t)b * T + P - 1) * V, (size_t)V);
        worst = d > worst ? d : worst;
    }
    for (int t = P; t < T; t++) {
        for (int b = 0; b < B; b++) col[b] = toks[b * T + t];
        CHECK(mp_model_forward(m, col, B, 1, &fp, step) == MP_OK, "%s", mp_last_error());
        for (int b = 0; b < B; b++) {
            double d = tu_max_abs_diff(step + (size_t)b * V, full + ((size_t)b * T + t) * V, (size_t)V);
            worst = d > worst ? d : worst;
        }
    }
    CHECK(worst <= 1e-5 * big,
          "KV-cache decoding (B %d, prefill %d of %d, threads %d) differs from prefill by %.3g (largest |logit| %.3g)", B,
          P, T, threads, worst, big);
    printf("KV cache vs prefill (%s, B %d, prefill %d, then one token per step to %d, threads %d): worst |diff| "
           "%.2e (largest |logit| %.3g)\n",
           model_path, B, P, T, threads, worst, big);
    for (int b = 0; b < B; b++) col[b] = 0;
    mp_status st = mp_model_forward(m, col, B, 1, &fp, step);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "full"), "a full cache must be refused: %s", mp_last_error());
    mp_kvcache_free(&cache);
    free(full);
    free(step);
    free(toks);
    free(pre);
    free(col);
    mp_model_free(m);
#ifdef _OPENMP
    omp_set_num_threads(threads0);
#endif
}

int main(int argc, char **argv) {
    mp_io_init();
    if (argc > 1 && strcmp(argv[1], "shared") == 0) {
        /* the real third-party model in ../shared (skips when absent) */
        const char *model = tu_shared("models/aidreams260K.bin");
        const char *golden = tu_shared("golden/aidreams260K_greedy96.h5");
        test_model_golden(model, golden, 64, "aidreams260K");
        test_model_golden(model, golden, 17, "aidreams260K (q_block 17)");
        test_greedy(model, golden);
        return tu_finish("test_forward shared");
    }
    /* committed references */
    test_model_golden(tu_data("ref_gqa_untied.bin"), tu_data("ref_gqa_untied_a.h5"), 64, "gqa+untied v0");
    test_model_golden(tu_data("ref_gqa_untied_v1.bin"), tu_data("ref_gqa_untied_a.h5"), 3, "gqa+untied v1 (q_block 3)");
    test_batch(tu_data("ref_gqa_untied.bin"), tu_data("ref_gqa_untied_a.h5"), tu_data("ref_gqa_untied_b.h5"),
               "gqa+untied");
    test_model_golden(tu_data("ref_tied.bin"), tu_data("ref_tied.h5"), 64, "tied");
    test_greedy(tu_data("ref_tied.bin"), tu_data("ref_tied.h5"));
    /* ref_gqa_untied: 4 query heads on 2 KV heads */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 2, 7, 20, 0);
    test_kvcache(tu_data("ref_gqa_untied.bin"), 1, 1, 20, 0); /* every position by sgemv steps */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 5, 1, 20, 0); /* the few-row kernel */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 9, 3, 20, 0); /* above it: sgemm steps */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 1, 1, 20, 1); /* attention: 2 query heads per KV head at once */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 1, 1, 20, 3); /* 2 KV heads < 3 threads: one query head at a time */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 2, 3, 20, 5); /* 4 (B x KV heads) < 5 threads: the same */
    /* steps at 1091..1100 cached positions: a kv head's keys read in two chunks (DECODE_CHUNK 1024), both paths */
    test_kvcache(tu_data("ref_gqa_untied.bin"), 1, 1090, 1100, 1);
    test_kvcache(tu_data("ref_gqa_untied.bin"), 1, 1090, 1100, 3);
    return tu_finish("test_forward");
}
