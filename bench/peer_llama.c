/* peer_llama.c — the llama.cpp side of bench/peers.sh and peers_scale.sh, built
 * by them against a llama.cpp source snapshot (never by mechprobe's CMake): the same
 * loops as bench_gen.c through llama.cpp's public API, so both are timed
 * alike. decode: from an empty context, BOS (id 256) then the argmax of each
 * step's logits, n llama_decode calls of one token (llama-bench's tg n);
 * --dump writes the n x V logits (float32). prefill: T tokens in one
 * llama_decode, logits of the last only (llama-bench's pp T). Prints
 * key=value lines like bench_gen. decode --ctx N (as bench_gen's): first,
 * untimed, N prompt tokens (prefill's) in batches of 512; each repetition
 * then removes the cache's positions from N on (llama_memory_seq_rm) and
 * decodes n tokens from the argmax of the prompt's last logits.
 *
 *   peer_llama --mode decode|prefill --model F.gguf [-n 128] [-T 1024] [--ctx N] [--reps R] [--warmup W]
 *              [--threads N] [--dump FILE] [--ubatch U] [--fa auto|on|off]
 *              [--kv-f32 1]   (the equality check's settings: the KV cache in F32 instead of llama.cpp's
 *                              default F16, and flash attention off where it is on by default, as it
 *                              casts F32 K/V to F16; see no_fa)
 *   --warmup W: untimed runs first (default 1); --dump: the first run's logits. --ubatch U: prefill's
 *   physical batch (default T: one pass, as before; llama.cpp's own default is 512). --fa: flash
 *   attention (default: llama.cpp's, auto = on for the CPU since 2025); needs PEER_HAS_FA_TYPE. */
#include "bench_load.h"
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* The KV cache emptied: llama_memory_clear since mid-2025 (the snapshots that
 * define LLAMA_STATE_SEQ_FLAGS_*), llama_kv_cache_clear before. */
static void clear_cache(struct llama_context *ctx) {
#if defined(LLAMA_STATE_SEQ_FLAGS_SWA_ONLY) || defined(LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
    llama_memory_clear(llama_get_memory(ctx), true);
#else
    llama_kv_cache_clear(ctx);
#endif
}

/* Flash attention off. llama.cpp's flash_attn_type (auto: on for the CPU) came in
 * 2025; its build scripts define PEER_HAS_FA_TYPE when llama.h has it. Before,
 * flash_attn was a bool, off by default. With it on, llama-graph.cpp's
 * build_attn_mha casts an F32 K/V to F16 (~1e-3 relative on the logits). */
static void no_fa(struct llama_context_params *cp) {
#ifdef PEER_HAS_FA_TYPE
    cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
#else
    (void)cp;
#endif
}

/* --fa auto|on|off: 0 when set (or left as llama.cpp's default for auto), -1 when this llama.cpp has no switch */
static int set_fa(struct llama_context_params *cp, const char *fa) {
    if (!fa) return 0;
#ifdef PEER_HAS_FA_TYPE
    if (!strcmp(fa, "auto")) cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else if (!strcmp(fa, "on")) cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (!strcmp(fa, "off")) cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else return -1;
    return 0;
#else
    (void)cp;
    return -1;
#endif
}

/* Positions p0.. of sequence 0 removed from the KV cache (see clear_cache for the two APIs). */
static void cut_cache(struct llama_context *ctx, int p0) {
#if defined(LLAMA_STATE_SEQ_FLAGS_SWA_ONLY) || defined(LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
    llama_memory_seq_rm(llama_get_memory(ctx), 0, p0, -1);
#else
    llama_kv_cache_seq_rm(ctx, 0, p0, -1);
#endif
}

/* --mode logits: the ids of `tokens` (int32) in one batch, every position's logits to `dump`. */
static int run_logits(struct llama_model *model, const char *tokens, const char *dump, int threads, int kv_f32) {
    FILE *f = fopen(tokens, "rb");
    if (!f) { perror(tokens); return 1; }
    int cap = 4096, T = 0;
    llama_token *ids = malloc((size_t)cap * sizeof *ids);
    int32_t extra;
    while (T < cap && fread(&ids[T], sizeof(int32_t), 1, f) == 1) T++;
    const int more = T == cap && fread(&extra, sizeof extra, 1, f) == 1;
    fclose(f);
    if (more) { fprintf(stderr, "peer_llama: %s: more than %d token ids\n", tokens, cap); free(ids); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (T < 1) { fprintf(stderr, "peer_llama: %s: no token ids\n", tokens); free(ids); return 1; }
    for (int i = 0; i < T; i++)
        if (ids[i] < 0 || ids[i] >= V) { fprintf(stderr, "peer_llama: %s: id %d at %d is not in [0, %d)\n", tokens, ids[i], i, V); free(ids); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)T;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (kv_f32) {
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        no_fa(&cp);
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "peer_llama: cannot create a context\n"); free(ids); return 1; }
    struct llama_batch b = llama_batch_init(T, 0, 1);
    for (int i = 0; i < T; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = T;
    int rc = llama_decode(ctx, b) != 0;
    if (rc) fprintf(stderr, "peer_llama: llama_decode failed\n");
    FILE *o = rc ? NULL : fopen(dump, "wb");
    for (int i = 0; i < T && !rc; i++) {
        const float *lg = o ? llama_get_logits_ith(ctx, i) : NULL;
        if (!lg || fwrite(lg, sizeof(float), (size_t)V, o) != (size_t)V) { perror(dump); rc = 1; }
    }
    if (o && fclose(o)) { perror(dump); rc = 1; }
    if (!rc) printf("T=%d\nvocab=%d\nsystem_info=%s\n", T, V, llama_print_system_info());
    llama_batch_free(b);
    llama_free(ctx);
    free(ids);
    return rc;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    const char *mode = NULL, *path = NULL, *dump = NULL, *tokens = NULL, *fa = NULL;
    int n = 128, T = 1024, reps = 5, threads = 2, kv_f32 = 0, ctxn = 0, warmup = 1, ubatch = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--model")) path = v;
        else if (!strcmp(a, "--dump")) dump = v;
        else if (!strcmp(a, "--tokens")) tokens = v;
        else if (!strcmp(a, "-n")) n = atoi(v);
        else if (!strcmp(a, "-T")) T = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--kv-f32")) kv_f32 = atoi(v);
        else if (!strcmp(a, "--ctx")) ctxn = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--ubatch")) ubatch = atoi(v);
        else if (!strcmp(a, "--fa")) fa = v;
        else { fprintf(stderr, "peer_llama: unknown option %s\n", a); return 2; }
    }
    const int logits = mode && !strcmp(mode, "logits");
    if (!mode || !path || n < 1 || T < 1 || reps < 1 || threads < 1 || ctxn < 0 || warmup < 0 || ubatch < 0 ||
        (logits && (!tokens || !dump))) {
        fprintf(stderr, "usage: peer_llama --mode decode|prefill --model F.gguf [-n N] [-T N] [--ctx N] [--reps R] [--warmup W]\n"
                        "                  [--threads N] [--dump FILE] [--ubatch U] [--fa auto|on|off] [--kv-f32 1]\n"
                        "       peer_llama --mode logits --model F.gguf --tokens IDS.i32 --dump FILE [--threads N] [--kv-f32 1]\n");
        return 2;
    }
    const int decode = !strcmp(mode, "decode");
    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "peer_llama: cannot load %s\n", path); return 1; }
    if (logits) {
        int lrc = run_logits(model, tokens, dump, threads, kv_f32);
        llama_model_free(model);
        llama_backend_free();
        return lrc;
    }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params cp = llama_context_default_params();
    const int pb = ctxn < 512 ? ctxn : 512; /* the context's batches */
    cp.n_ctx = (uint32_t)(decode ? ctxn + n : T);
    cp.n_batch = cp.n_ubatch = (uint32_t)(decode ? (pb > 1 ? pb : 1) : T);
    if (!decode && ubatch > 0 && ubatch < T) cp.n_ubatch = (uint32_t)ubatch;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (set_fa(&cp, fa)) {
        fprintf(stderr, "peer_llama: --fa %s: auto, on or off, with a llama.cpp that has flash_attn_type\n", fa);
        return 2;
    }
    if (kv_f32) {
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        no_fa(&cp);
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "peer_llama: cannot create a context\n"); return 1; }
    printf("threads=%d\nload_rss_mib=%.1f\n", threads, bl_peak_rss_mib());
#ifdef PEER_HAS_FA_TYPE
    printf("flash_attn_type=%s\nn_ubatch=%u\n", llama_flash_attn_type_name(cp.flash_attn_type), cp.n_ubatch);
#endif
    float *dl = dump && decode ? malloc((size_t)n * V * sizeof(float)) : NULL;
    const int nt = decode ? (n > ctxn ? n : ctxn) : T;
    int *toks = malloc((size_t)nt * sizeof(int));
    double *t = malloc((size_t)reps * sizeof(double)), tp = 0;
    bl_probe lp;
    int rc = 0;
    llama_token first = 256 < V ? 256 : 0;
    if (decode && ctxn > 0) { /* the context, untimed */
        clear_cache(ctx);
        tp = bl_now();
        for (int i = 0; i < ctxn; i++) toks[i] = i == 0 && V > 256 ? 256 : (i * 7 + 3) % (V < 256 ? V : 256);
        for (int i = 0; i < ctxn && !rc; i += pb)
            if (llama_decode(ctx, llama_batch_get_one(toks + i, ctxn - i < pb ? ctxn - i : pb))) rc = 1;
        if (!rc) first = argmax(llama_get_logits_ith(ctx, -1), V);
        tp = bl_now() - tp;
    }
    for (int r = -warmup; r < reps && !rc; r++) {
        if (r == 0) bl_sample(&lp);
        if (decode && ctxn > 0) cut_cache(ctx, ctxn);
        else clear_cache(ctx);
        double t0 = bl_now();
        if (decode) {
            llama_token tok = first;
            for (int i = 0; i < n; i++) {
                toks[i] = tok;
                if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) { rc = 1; break; }
                const float *lg = llama_get_logits_ith(ctx, -1);
                if (dl && r == -warmup) memcpy(dl + (size_t)i * V, lg, (size_t)V * sizeof(float));
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
    if (decode) printf("ctx=%d\nprefill_s=%.3f\n", ctxn, tp);
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
