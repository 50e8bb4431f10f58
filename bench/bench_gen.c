/* bench_gen.c — mechprobe's side of bench/peers.sh (the comparison with
 * llama.cpp): writes the benchmark model as GGUF, and times decoding (one
 * token per forward over the KV cache, greedy) and prefill of a GGUF model.
 * The llama.cpp side (bench/peer_llama.c) runs the same loops through
 * llama_decode, so the two are timed alike.
 *
 *   bench_gen --mode make --out PREFIX [--d-model 512 --layers 8 --vocab 512 --seed S]
 *             writes PREFIX.f32.gguf and PREFIX.q8_0.gguf (llama architecture, byte vocabulary)
 *   bench_gen --mode decode  --model F.gguf [-n 128] [--reps R] [--dump FILE]
 *   bench_gen --mode prefill --model F.gguf [-T 1024] [--reps R]
 *
 * decode: each repetition starts from an empty cache, feeds BOS (id 256), then
 * the argmax of each step's logits, n forwards of one token in all (what
 * llama-bench's tg n runs); --dump writes the n tokens fed and the n x V logits
 * (float32) for the equality check. prefill: T tokens in one forward, logits of
 * the last position only (as llama-bench's pp). Output: key=value lines (tok_s
 * is the median over the timed repetitions after one warm-up; maxrss_mib; other_cores). */
#include "bench_load.h"
#include "model.h"
#include "quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *mode, *model, *out, *dump;
    int n, T, reps, d_model, layers, vocab;
    uint64_t seed;
} opts;

static void usage(FILE *f) {
    fprintf(f, "usage: bench_gen --mode make|decode|prefill [options]\n"
               "  --out PREFIX     make: writes PREFIX.f32.gguf and PREFIX.q8_0.gguf\n"
               "  --d-model D --layers L --vocab V --seed S   make: the random Llama (d_mlp 8/3 D, d_head 64)\n"
               "  --model FILE     GGUF model (decode, prefill)\n"
               "  -n N             decode: forwards of one token (default 128)\n"
               "  -T N             prefill: tokens (default 1024)\n"
               "  --reps R         timed repetitions after one warm-up (default 5)\n"
               "  --dump FILE      decode: tokens fed and logits of every step\n");
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int do_make(const opts *o) {
    mp_config c = mp_config_default();
    c.d_model = o->d_model;
    c.n_layer = o->layers;
    c.d_head = 64;
    c.n_head = c.n_kv_head = o->d_model / 64;
    c.d_mlp = (8 * o->d_model / 3 + 31) / 32 * 32; /* 512 -> 1376 as bench/run.sh's model */
    if (o->d_model == 512) c.d_mlp = 1376;
    c.vocab = o->vocab;
    c.ctx = 2048;
    c.tied = 0;
    mp_model *m = NULL;
    if (mp_model_new_random(&m, &c, o->seed, 0.02f)) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); return 1; }
    snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
    char path[4096];
    int rc = 0;
    const struct { const char *ext; uint32_t type; } kinds[] = {{"f32", MP_GGML_F32}, {"q8_0", MP_GGML_Q8_0}};
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(path, sizeof path, "%s.%s.gguf", o->out, kinds[k].ext);
        if (mp_model_save_gguf(m, NULL, path, kinds[k].type)) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); rc = 1; }
        else printf("wrote=%s\n", path);
    }
    mp_model_free(m);
    return rc;
}

static int do_decode(const opts *o, mp_model *m) {
    const int V = m->cfg.vocab, n = o->n;
    float *logits = malloc((size_t)V * sizeof(float)), *dump = o->dump ? malloc((size_t)n * V * sizeof(float)) : NULL;
    int *fed = malloc((size_t)n * sizeof(int));
    double *t = malloc((size_t)(o->reps + 1) * sizeof(double));
    int rc = 0;
    bl_probe lp;
    for (int r = -1; r < o->reps && !rc; r++) {
        if (r == 0) bl_sample(&lp);
        mp_kvcache cache;
        if (mp_kvcache_init(&cache, &m->cfg, 1, n)) { rc = 1; break; }
        mp_forward_params fp = mp_forward_params_default();
        fp.cache = &cache;
        fp.logits = MP_LOGITS_LAST;
        int tok = 256 < V ? 256 : 0;
        double t0 = bl_now();
        for (int i = 0; i < n && !rc; i++) {
            fed[i] = tok;
            if (mp_model_forward(m, &tok, 1, 1, &fp, logits)) { rc = 1; break; }
            if (dump && r == -1) memcpy(dump + (size_t)i * V, logits, (size_t)V * sizeof(float));
            tok = argmax(logits, V);
        }
        if (r >= 0) t[r] = bl_now() - t0;
        mp_kvcache_free(&cache);
    }
    if (rc) fprintf(stderr, "bench_gen: decode: %s\n", mp_last_error());
    else {
        double other = bl_other(&lp), med = bl_median(t, o->reps);
        printf("n=%d\nreps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\n", n, o->reps, med, n / med, other);
        printf("tokens=");
        for (int i = 0; i < n; i++) printf("%d%s", fed[i], i + 1 < n ? "," : "\n");
        if (dump) {
            FILE *f = fopen(o->dump, "wb");
            if (!f || fwrite(dump, sizeof(float), (size_t)n * V, f) != (size_t)n * V) { perror(o->dump); rc = 1; }
            if (f) fclose(f);
        }
    }
    free(logits);
    free(dump);
    free(fed);
    free(t);
    return rc;
}

static int do_prefill(const opts *o, mp_model *m) {
    const int V = m->cfg.vocab, T = o->T;
    int *tok = malloc((size_t)T * sizeof(int));
    float *logits = malloc((size_t)V * sizeof(float));
    double *t = malloc((size_t)(o->reps + 1) * sizeof(double));
    for (int i = 0; i < T; i++) tok[i] = i == 0 && V > 256 ? 256 : (i * 7 + 3) % (V < 256 ? V : 256);
    int rc = 0;
    bl_probe lp;
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_LAST;
    for (int r = -1; r < o->reps; r++) {
        if (r == 0) bl_sample(&lp);
        double t0 = bl_now();
        if (mp_model_forward(m, tok, 1, T, &fp, logits)) { rc = 1; break; }
        if (r >= 0) t[r] = bl_now() - t0;
    }
    if (rc) fprintf(stderr, "bench_gen: prefill: %s\n", mp_last_error());
    else {
        double other = bl_other(&lp), med = bl_median(t, o->reps);
        printf("T=%d\nreps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\n", T, o->reps, med, T / med, other);
    }
    free(tok);
    free(logits);
    free(t);
    return rc;
}

int main(int argc, char **argv) {
    opts o = {NULL, NULL, NULL, NULL, 128, 1024, 5, 512, 8, 512, 1234};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "bench_gen: %s needs a value\n", a); usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--mode")) o.mode = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--dump")) o.dump = v;
        else if (!strcmp(a, "-n")) o.n = atoi(v);
        else if (!strcmp(a, "-T")) o.T = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--d-model")) o.d_model = atoi(v);
        else if (!strcmp(a, "--layers")) o.layers = atoi(v);
        else if (!strcmp(a, "--vocab")) o.vocab = atoi(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "bench_gen: unknown option %s\n", a); usage(stderr); return 2; }
    }
    if (!o.mode || o.n < 1 || o.T < 1 || o.reps < 1 || o.d_model < 64 || o.d_model % 64 || o.layers < 1 || o.vocab < 257) {
        fprintf(stderr, "bench_gen: --mode is required; -n, -T, --reps, --layers >= 1; --d-model a multiple of 64; "
                        "--vocab >= 257\n");
        return 2;
    }
    mp_init();
    if (!strcmp(o.mode, "make")) {
        if (!o.out) { fprintf(stderr, "bench_gen: make needs --out PREFIX\n"); return 2; }
        return do_make(&o);
    }
    if (strcmp(o.mode, "decode") && strcmp(o.mode, "prefill")) { fprintf(stderr, "bench_gen: unknown mode %s\n", o.mode); return 2; }
    if (!o.model) { fprintf(stderr, "bench_gen: %s needs --model FILE.gguf\n", o.mode); return 2; }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    mp_model *m = NULL;
    if (mp_model_load_gguf(&m, o.model)) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); return 1; }
    printf("threads=%d\nload_rss_mib=%.1f\n", threads, bl_peak_rss_mib());
    int rc = !strcmp(o.mode, "decode") ? do_decode(&o, m) : do_prefill(&o, m);
    printf("maxrss_mib=%.1f\n", bl_peak_rss_mib());
    mp_model_free(m);
    return rc;
}
