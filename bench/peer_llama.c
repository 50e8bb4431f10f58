/* peer_llama.c — the llama.cpp side of bench/peers.sh, built by peers.sh
 * against a llama.cpp source snapshot (never by mechprobe's CMake): the same
 * loops as bench_gen.c through llama.cpp's public API, so both are timed
 * alike. decode: from an empty context, BOS (id 256) then the argmax of each
 * step's logits, n llama_decode calls of one token (llama-bench's tg n);
 * --dump writes the n x V logits (float32). prefill: T tokens in one
 * llama_decode, logits of the last only (llama-bench's pp T). Prints
 * key=value lines like bench_gen.
 *
 *   peer_llama --mode decode|prefill --model F.gguf [-n 128] [-T 1024] [--reps R] [--threads N] [--dump FILE]
 *              [--kv-f32 1]   (the KV cache in F32 instead of llama.cpp's default F16: for the equality check) */
#include "bench_load.h"
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    const char *mode = NULL, *path = NULL, *dump = NULL;
    int n = 128, T = 1024, reps = 5, threads = 2, kv_f32 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "--dump")) dump = v;
        else if (!strcmp(a, "-n")) n = atoi(v);
        else if (!strcmp(a, "-T")) T = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--kv-f32")) kv_f32 = atoi(v);
        else { fprintf(stderr, "peer_llama: unknown option %s\n", a); return 2; }
    }
    if (!mode || !path || n < 1 || T < 1 || reps < 1 || threads < 1) {
        fprintf(stderr, "usage: peer_llama --mode decode|prefill --model F.gguf [-n N] [-T N] [--reps R] [--threads N] [--dump FILE]\n");
        return 2;
    }
    const int decode = !strcmp(mode, "decode");
    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "peer_llama: cannot load %s\n", path); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(decode ? n : T);
    cp.n_batch = cp.n_ubatch = (uint32_t)(decode ? 1 : T);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "peer_llama: cannot create a context\n"); return 1; }
    printf("threads=%d\nload_rss_mib=%.1f\n", threads, bl_peak_rss_mib());
    float *dl = dump && decode ? malloc((size_t)n * V * sizeof(float)) : NULL;
    int *toks = malloc((size_t)(decode ? n : T) * sizeof(int));
    double *t = malloc((size_t)reps * sizeof(double));
    bl_probe lp;
    int rc = 0;
    for (int r = -1; r < reps && !rc; r++) {
        if (r == 0) bl_sample(&lp);
        llama_kv_cache_clear(ctx);
        double t0 = bl_now();
        if (decode) {
            llama_token tok = 256 < V ? 256 : 0;
            for (int i = 0; i < n; i++) {
                toks[i] = tok;
                if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) { rc = 1; break; }
                const float *lg = llama_get_logits_ith(ctx, -1);
                if (dl && r == -1) memcpy(dl + (size_t)i * V, lg, (size_t)V * sizeof(float));
                tok = argmax(lg, V);
            }
        } else {
            for (int i = 0; i < T; i++) toks[i] = i == 0 && V > 256 ? 256 : (i * 7 + 3) % (V < 256 ? V : 256);
            if (llama_decode(ctx, llama_batch_get_one(toks, T))) rc = 1;
            (void)llama_get_logits_ith(ctx, -1);
        }
        if (r >= 0) t[r] = bl_now() - t0;
    }
    if (rc) { fprintf(stderr, "peer_llama: llama_decode failed\n"); return 1; }
    double other = bl_other(&lp), med = bl_median(t, reps);
    const int cnt = decode ? n : T;
    printf("%s=%d\nreps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\nmaxrss_mib=%.1f\n", decode ? "n" : "T", cnt,
           reps, med, cnt / med, other, bl_peak_rss_mib());
    if (decode) {
        printf("tokens=");
        for (int i = 0; i < n; i++) printf("%d%s", toks[i], i + 1 < n ? "," : "\n");
    }
    if (dl) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(dl, sizeof(float), (size_t)n * V, f) != (size_t)n * V) { perror(dump); rc = 1; }
        if (f) fclose(f);
    }
    printf("system_info=%s\n", llama_print_system_info());
    free(dl);
    free(toks);
    free(t);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
