/* bench_gpu.c — the measuring program of bench/gpu_check.sh (a lent GPU): a
 * d_model 768, 12-layer, 12-head Llama (GPT-2 small size; d_mlp 2048, vocab
 * 32000, seeded random weights, saved as a llama2.c file for the PyTorch peer)
 * and the prefill of T tokens (default 2048, B = 1, logits of the last
 * position) on the CUDA device: tokens/s in fp32 and in bf16, and the capture overhead of hook_q, hook_k and hook_pattern of
 * every layer streamed to an HDF5 run file, against the plain forward; the
 * overlap of the copy stream (--overlap-T, default 512): the same points
 * captured to host memory by reader hooks (no disk) against the plain forward
 * and against the time the copies alone take at the device-to-host bandwidth
 * measured here (one pinned cudaMemcpy of the same bytes); with
 * --train-T, training steps (mp_train_step on the device, fp32 and bf16 mixed
 * precision: forward, backward, clipping, AdamW, weights copied back) of the same model on
 * --train-B sequences of --train-T tokens: tokens/s and the model FLOPs per
 * token, 6 N + 12 L H Q T as in the PaLM paper's appendix B (N the parameters
 * without the embedding table, the classifier included; L layers, H query heads
 * of size Q, T the sequence length: the attention's two products over all T
 * keys, forward and backward, with no halving for the causal mask), from which
 * gpu_check.sh computes MFU against the GEMM ceiling.
 * Prints key=value lines (line-buffered, so a killed run keeps what it
 * printed); times are the best of --reps after one warm-up.
 *
 *   bench_gpu --save MODEL.bin [--T 2048] [--reps 3] [--capture-dir DIR] [--dump PREFIX]
 *             [--overlap-T 512] [--train-T 1024 --train-B 4]
 *
 * --dump PREFIX writes PREFIX.tokens.i32 and PREFIX.logits.f32 (the fp32 last-
 * position logits) for the peer's agreement check. --overlap-T 0 skips the
 * overlap measurement (its T is at most --T). Without a CUDA device it
 * prints `skip=<reason>` and exits 77. */
#include "bench_load.h"
#include "formats.h"
#include "h5run.h"
#include "mp_cuda.h"
#include "train.h"

#include <string.h>

#ifdef MP_BENCH_CUDART /* bench/CMakeLists.txt and gpu_check.sh's source build: the runtime, for the plain copy */
#include <cuda_runtime_api.h>
#endif

static mp_status prefill(const mp_model *m, const int *tok, int T, const mp_hooks *hs, float *logits, double *sec) {
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_LAST;
    fp.hooks = hs;
    double t0 = bl_now();
    mp_status st = mp_model_forward(m, tok, 1, T, &fp, logits); /* returns after the device work is done */
    *sec = bl_now() - t0;
    return st;
}

static double best_of(const mp_model *m, const int *tok, int T, int reps, float *logits, mp_status *st) {
    double best = 1e30, s;
    if ((*st = prefill(m, tok, T, NULL, logits, &s))) return 0; /* warm-up */
    for (int r = 0; r < reps; r++) {
        if ((*st = prefill(m, tok, T, NULL, logits, &s))) return 0;
        if (s < best) best = s;
    }
    return best;
}

/* one capture of q, k and the pattern of every layer into DIR/capture.h5 */
static mp_status capture_once(const mp_model *m, const int *tok, int T, const char *dir, float *logits, double *sec) {
    char path[1024];
    snprintf(path, sizeof path, "%s/capture.h5", dir);
    mp_h5run *run = NULL;
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_status st = hs ? mp_h5run_create(&run, path, NULL) : MP_ERR_NOMEM;
    double t0 = bl_now();
    if (!st) st = mp_h5run_capture(run, hs, &m->cfg, "blocks.*.attn.hook_q,blocks.*.attn.hook_k,blocks.*.attn.hook_pattern",
                                   1, T);
    double s = 0;
    if (!st) st = prefill(m, tok, T, hs, logits, &s);
    if (!st) st = mp_h5run_flush(run);
    *sec = bl_now() - t0;
    mp_hooks_free(hs);
    if (run) {
        if (st) mp_h5run_abort(run);
        else st = mp_h5run_commit(run);
    }
    remove(path);
    return st;
}

/* the copy-stream overlap: readers that only count and touch what reaches host memory */
typedef struct {
    size_t bytes;
    int points;
    double touch;
} mem_reader;

static int mem_read(void *user, const mp_hook_info *info, float *data) {
    mem_reader *r = user;
    r->bytes += info->numel * sizeof(float);
    r->points++;
    if (info->numel) r->touch += (double)data[0] + (double)data[info->numel - 1];
    return 0;
}

/* the best of reps (after a warm-up: the pinned buffers) of a forward over T tokens whose hook_q, hook_k and
 * hook_pattern of every layer go to readers in host memory; *bytes: what one forward handed them */
static mp_status capture_mem(const mp_model *m, const int *tok, int T, int reps, float *logits, double *sec,
                             size_t *bytes) {
    mem_reader r = {0, 0, 0};
    mp_hooks *hs = mp_hooks_new(&m->cfg);
    mp_status st = hs ? mp_hooks_add_reader(hs, "blocks.*.attn.hook_q,blocks.*.attn.hook_k,blocks.*.attn.hook_pattern",
                                            mem_read, &r)
                      : MP_ERR_NOMEM;
    double best = 1e30, s = 0;
    for (int i = 0; i <= reps && !st; i++) { /* i = 0: the warm-up */
        r.bytes = 0;
        st = prefill(m, tok, T, hs, logits, &s);
        if (i && s < best) best = s;
    }
    mp_hooks_free(hs);
    *sec = best;
    *bytes = r.bytes;
    return st;
}

/* the device-to-host bandwidth (bytes/s) of one pinned cudaMemcpy of `bytes`, the best of reps after a warm-up;
 * 0 with *why when it cannot be measured */
static double d2h_bandwidth(size_t bytes, int reps, const char **why) {
#ifdef MP_BENCH_CUDART
    void *d = NULL, *h = NULL;
    double best = 1e30;
    *why = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMallocHost(&h, bytes) != cudaSuccess) {
        *why = "cudaMalloc / cudaMallocHost failed";
    } else if (cudaMemset(d, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        *why = "cudaMemset failed";
    } else {
        for (int i = 0; i <= reps && !*why; i++) { /* i = 0: the warm-up */
            const double t0 = bl_now();
            if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) *why = "cudaMemcpy failed";
            const double s = bl_now() - t0;
            if (i && s < best) best = s;
        }
    }
    if (d) cudaFree(d);
    if (h) cudaFreeHost(h);
    cudaGetLastError();
    return *why ? 0 : (double)bytes / best;
#else
    (void)bytes;
    (void)reps;
    *why = "bench_gpu built without the CUDA runtime (MP_BENCH_CUDART)";
    return 0;
#endif
}

/* plain forward, capture to memory, the bytes and the copies alone at T tokens (key=value lines overlap_*) */
static mp_status overlap_bench(const mp_model *m, const int *tok, int T, int reps, float *logits) {
    mp_status st;
    const double plain = best_of(m, tok, T, reps, logits, &st);
    if (st) return printf("overlap=error: plain forward: %s\n", mp_last_error()), st;
    double cap = 0;
    size_t bytes = 0;
    if ((st = capture_mem(m, tok, T, reps, logits, &cap, &bytes)))
        return printf("overlap=error: capture to memory: %s\n", mp_last_error()), st;
    printf("overlap_T=%d\noverlap_points=hook_q, hook_k, hook_pattern of %d layers to reader hooks in host memory "
           "(no disk)\noverlap_plain_s=%.4f\noverlap_capture_s=%.4f\noverlap_bytes=%zu\n",
           T, m->cfg.n_layer, plain, cap, bytes);
    const char *why = NULL;
    const double bw = bytes ? d2h_bandwidth(bytes, reps, &why) : 0;
    if (!bw) {
        printf("overlap_d2h=unavailable: %s\noverlap_capture_over_plain=%.2f\n", why ? why : "no bytes", cap / plain);
        return MP_OK;
    }
    const double copy = (double)bytes / bw, bound = plain > copy ? plain : copy;
    printf("overlap_d2h_GBps=%.1f (one pinned cudaMemcpy of the same bytes)\noverlap_copy_s=%.4f\n"
           "overlap_capture_over_plain=%.2f\noverlap_capture_over_bound=%.2f (capture / max(plain, copy); aim <= 1.2)\n"
           "overlap_capture_over_serial=%.2f (capture / (plain + copy); 1 = no overlap at all)\n",
           bw / 1e9, copy, cap / plain, cap / bound, cap / (plain + copy));
    return MP_OK;
}

/* training steps of m (on the device) on B x T tokens: the best step time of reps after one warm-up */
static mp_status train_bench(mp_model *m, const mp_config *c, int B, int T, int reps, const char *prec) {
    const size_t n = (size_t)B * T;
    int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
    if (!tok || !tgt) return MP_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) tok[i] = (int)((1103515245u * (unsigned)i + 12345u) % (unsigned)c->vocab);
    for (size_t i = 0; i < n; i++) tgt[i] = (i + 1) % (size_t)T ? tok[i + 1] : -1;
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);
    opt.hp = mp_adamw_params_default();
    opt.hp.lr = 1e-4f;
    opt.hp.grad_clip = 1.0f;
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    float loss = 0;
    double best = 1e30;
    mp_status st = MP_OK;
    for (int r = 0; r <= reps && !st; r++) { /* r = 0: the warm-up (allocations) */
        const double t0 = bl_now();
        st = mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &loss);
        const double s = bl_now() - t0;
        if (r && s < best) best = s;
    }
    if (st) {
        printf("train_%s=error: %s\n", prec, mp_last_error());
    } else {
        const double N = (double)mp_config_n_params(c) - (double)c->vocab * c->d_model; /* without the embedding */
        /* PaLM appendix B: 6 N + 12 L H Q T (no causal halving; the classifier is in N, the lookup is not) */
        const double flops_tok = 6.0 * N + 12.0 * c->n_layer * (double)c->n_head * c->d_head * (double)T;
        printf("train_model=the same model, B=%d T=%d, %s, AdamW, clip 1\ntrain_%s_step_s=%.4f\ntrain_%s_tok_s=%.0f\n"
               "train_flops_per_token=%.4g\ntrain_%s_loss=%.4f\n", B, T, prec, prec, best, prec, n / best, flops_tok, prec,
               loss);
    }
    mp_train_ws_free(&ws);
    mp_adamw_free(&opt);
    free(tok);
    free(tgt);
    return st;
}

int main(int argc, char **argv) {
    const char *save = NULL, *capdir = NULL, *dump = NULL;
    int T = 2048, reps = 3, train_T = 0, train_B = 4, overlap_T = 512;
    setvbuf(stdout, NULL, _IOLBF, 0); /* gpu_check.sh keeps what a killed run printed */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--capture-dir") && i + 1 < argc) capdir = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(argv[i], "--train-T") && i + 1 < argc) train_T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--train-B") && i + 1 < argc) train_B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--overlap-T") && i + 1 < argc) overlap_T = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gpu --save MODEL.bin [--T N] [--reps R] [--capture-dir DIR] [--dump PREFIX] "
                            "[--overlap-T N] [--train-T N --train-B B]\n");
            return 2;
        }
    }
    if (T < 1 || reps < 1 || train_T < 0 || train_B < 1 || overlap_T < 0)
        return fprintf(stderr, "bench_gpu: --T, --reps and --train-B must be positive, --train-T and --overlap-T >= 0\n"), 2;
    mp_init();
    if (mp_cuda_available() != MP_OK) {
        printf("skip=%s\n", mp_last_error());
        return 77;
    }
    mp_config c = mp_config_default();
    c.d_model = 768;
    c.n_layer = 12;
    c.n_head = c.n_kv_head = 12;
    c.d_head = 64;
    c.d_mlp = 2048;
    c.vocab = 32000;
    c.ctx = T > train_T ? T : train_T;
    mp_model *m = NULL;
    float *logits = malloc((size_t)c.vocab * sizeof(float));
    int *tok = malloc((size_t)T * sizeof(int));
    mp_status st = logits && tok ? mp_model_new_init(&m, &c, 1, 0.02f) : MP_ERR_NOMEM;
    for (int t = 0; t < T; t++) tok[t] = (int)((1103515245u * (unsigned)t + 12345u) % (unsigned)c.vocab);
    if (!st && save) st = mp_model_save_llama2c(m, save, 0);
    if (!st) st = mp_model_to_device(m, MP_DEVICE_CUDA, MP_PRECISION_FP32);
    if (st) {
        printf("error=%s\n", mp_last_error());
        return 1;
    }
    printf("model=d768 L12 H12 Dh64 M2048 V32000 T=%d B=1 (logits of the last position)\n", T);
    double s32 = best_of(m, tok, T, reps, logits, &st);
    if (st) {
        printf("error=fp32 prefill: %s\n", mp_last_error());
        return 1;
    }
    printf("fp32_s=%.4f\nfp32_tok_s=%.0f\n", s32, T / s32);
    if (dump) {
        char p[1024];
        snprintf(p, sizeof p, "%s.tokens.i32", dump);
        FILE *f = fopen(p, "wb");
        if (f) { fwrite(tok, sizeof(int), (size_t)T, f); fclose(f); }
        snprintf(p, sizeof p, "%s.logits.f32", dump);
        f = fopen(p, "wb");
        if (f) { fwrite(logits, sizeof(float), (size_t)c.vocab, f); fclose(f); }
    }
    mp_model *b = NULL; /* bf16: a second copy of the same weights */
    if (mp_model_new_init(&b, &c, 1, 0.02f) == MP_OK && mp_model_to_device(b, MP_DEVICE_CUDA, MP_PRECISION_BF16) == MP_OK) {
        double s16 = best_of(b, tok, T, reps, logits, &st);
        if (st) printf("bf16=error: %s\n", mp_last_error());
        else printf("bf16_s=%.4f\nbf16_tok_s=%.0f\n", s16, T / s16);
    } else {
        printf("bf16=refused: %s\n", mp_last_error());
    }
    mp_model_free(b);
    if (capdir) {
        double cap = 1e30, s;
        for (int r = 0; r < 2 && !st; r++) {
            st = capture_once(m, tok, T, capdir, logits, &s);
            if (s < cap) cap = s;
        }
        if (st) printf("capture=error: %s\n", mp_last_error());
        else printf("capture_s=%.4f\ncapture_over_plain=%.2f\n", cap, cap / s32);
    }
    if (overlap_T) {
        const mp_status so = overlap_bench(m, tok, overlap_T < T ? overlap_T : T, reps, logits);
        if (!st) st = so;
    }
    if (train_T) {
        st = train_bench(m, &c, train_B, train_T, reps, "fp32");
        mp_model *tb = NULL; /* bf16 mixed precision: a fresh copy of the same initial weights */
        if (!st && mp_model_new_init(&tb, &c, 1, 0.02f) == MP_OK &&
            mp_model_to_device(tb, MP_DEVICE_CUDA, MP_PRECISION_BF16) == MP_OK)
            st = train_bench(tb, &c, train_B, train_T, reps, "bf16");
        mp_model_free(tb);
    }
    mp_model_free(m);
    free(tok);
    free(logits);
    return st ? 1 : 0;
}
