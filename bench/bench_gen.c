/* bench_gen.c — mechprobe's side of bench/peers.sh and bench/peers_scale.sh
 * (the comparisons with llama.cpp): writes the benchmark models as GGUF (the
 * d 512 toy, or real shapes streamed by shape_gguf.c), and times decoding (one
 * token per forward over the KV cache, greedy) and prefill of a GGUF model.
 * The llama.cpp side (bench/peer_llama.c) runs the same loops through
 * llama_decode, so the two are timed alike.
 *
 *   bench_gen --mode make --out PREFIX [--d-model 512 --layers 8 --vocab 512 --seed S]
 *             writes PREFIX.f32.gguf and PREFIX.q8_0.gguf (llama architecture, byte vocabulary)
 *   bench_gen --mode make-shape --shape NAME --type f32|f16|bf16|q8_0 --out FILE.gguf [--seed S] [--dry-run]
 *             a random Llama in a real model's shape (tiny, llama3.2-1b, llama3-8b: shape_gguf.h), made
 *             and written a block of rows at a time (never the whole model in memory); --dry-run
 *             prints its tensors, parameters and file size, the free space, and times the making of
 *             some rows to estimate the time, writing nothing
 *   bench_gen --mode decode  --model F.gguf [-n 128] [--ctx N] [--reps R] [--warmup W] [--dump FILE]
 *   bench_gen --mode prefill --model F.gguf [-T 1024] [--reps R] [--warmup W]
 *             [--capture GLOBS --capture-out FILE.h5]   every forward captures those hook points
 *             to an HDF5 run file (bench_forward's capture; the time includes create and commit)
 *   bench_gen --mode membw [--mib 1024] [--reps 5]   the memory's read rate at this moment: the threads
 *             sum a buffer of that many MiB (each its own static share, touched first by the thread that
 *             reads it) after one untimed pass; read_gbs is the median of the timed passes. peers_scale.sh
 *             runs it beside each decode row, whose rate follows the memory's (it reads every weight a token)
 *   bench_gen --mode compare --a FILE --b FILE [--vocab V] [-n STEPS]   two decode dumps (the first
 *             STEPS steps): max |diff|, largest |logit|
 *   bench_gen --mode train-gpt2 --out PREFIX [--d-model 512 --layers 8 --vocab 512 -B 4 -T 512 --steps S]
 *             a GPT-2 (LayerNorm, GELU-tanh, learned positions, biases, tied; d_mlp 4 D; N(0, 0.02)
 *             init, seed S) written as llm.c's checkpoint PREFIX.llmc.bin (version 3) with its batch
 *             PREFIX.tokens.i32 (B x (T+1) ids), then trained here: AdamW steps timed after one
 *             warm-up (tok_s = B*T over the median step); loss0 is the first step's loss
 *
 * decode: each repetition starts from an empty cache, feeds BOS (id 256), then
 * the argmax of each step's logits, n forwards of one token in all (what
 * llama-bench's tg n runs); --dump writes the n tokens fed and the n x V logits
 * (float32) of the first run for the equality check. --ctx N: first, untimed, a
 * prefill of N tokens (prefill's tokens, in chunks of 512, into the cache);
 * each repetition then cuts the cache back to those N positions and decodes
 * n tokens from the argmax of the prefill's last logits (decoding at context
 * N). prefill: T tokens in one forward, logits of the last position only (as
 * llama-bench's pp): BOS, then (7 i + 3) mod 256. Output: key=value lines
 * (tok_s is the median over the timed repetitions after W warm-up runs,
 * default 1; maxrss_mib; other_cores). */
#include "omp_env.h"
#include "bench_load.h"
#include "formats.h"
#include "model.h"
#include "mp_cuda.h"
#include "optim.h"
#include "h5io.h"
#include "h5run.h"
#include "mp_hooks.h"
#include "qdot.h"
#include "quant.h"
#include "shape_gguf.h"
#include "train.h"

#include <cblas.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *mode, *model, *out, *dump, *a, *b;
    int n, T, reps, d_model, layers, vocab, B, steps;
    uint64_t seed;
    const char *shape, *type, *capture, *capture_out, *precision;
    int ctx, warmup, dry_run, mib;
} opts;

static void usage(FILE *f) {
    fprintf(f, "usage: bench_gen --mode make|make-shape|decode|prefill|membw|compare|train-gpt2 [options]\n"
               "  --out PREFIX     make: writes PREFIX.f32.gguf and PREFIX.q8_0.gguf; make-shape: the file\n"
               "  --d-model D --layers L --vocab V --seed S   make: the random Llama (d_mlp 8/3 D, d_head 64)\n"
               "  --shape NAME     make-shape: %s\n"
               "  --type T         make-shape: f32, f16, bf16 or q8_0 (2-D weights; norms f32)\n"
               "  --dry-run        make-shape: print the plan and an estimate, write nothing\n"
               "  --model FILE     GGUF model (decode, prefill)\n"
               "  -n N             decode: forwards of one token (default 128)\n"
               "  --ctx N          decode: an untimed prefill of N tokens first (default 0)\n"
               "  -T N             prefill: tokens (default 1024)\n"
               "  --reps R         timed repetitions (default 5)\n"
               "  --mib M          membw: the buffer read, MiB (default 1024)\n"
               "  --warmup W       untimed runs before them (default 1)\n"
               "  --dump FILE      decode: tokens fed and logits of every step (first run)\n"
               "  --capture GLOBS --capture-out FILE.h5   prefill: capture these hook points each run\n"
               "  --precision fp32|bf16   decode, prefill: bf16 multiplies BF16 weights with activations rounded\n"
               "                   to BF16 (AVX-512 BF16; runtime/qdot.h), fp32 (default) exactly\n",
            sg_shape_names());
}

/* --mode membw: GB/s of plain reads over o->mib MiB on the OpenMP threads (median of o->reps passes after
 * one untimed one). 32-byte vectors added into four accumulators a thread: the loop is loads and little
 * else, so it runs at the rate the memory delivers to these cores now. */
typedef uint64_t bw_vec __attribute__((vector_size(32)));
static int do_membw(const opts *o) {
    const size_t bytes = (size_t)o->mib << 20, nv = bytes / sizeof(bw_vec);
    bw_vec *buf = aligned_alloc(64, bytes);
    double *t = malloc((size_t)o->reps * sizeof(double));
    if (!buf || !t) {
        fprintf(stderr, "bench_gen: membw: cannot allocate %d MiB\n", o->mib);
        free(buf);
        free(t);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nv; i++) buf[i] = (bw_vec){i, i + 1, i + 2, i + 3};
    uint64_t sink = 0;
    bl_probe p;
    bl_sample(&p);
    for (int r = -1; r < o->reps; r++) {
        const double t0 = bl_now();
        uint64_t x = 0;
#pragma omp parallel reduction(+ : x)
        {
            bw_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
#pragma omp for schedule(static) nowait
            for (size_t i = 0; i < nv / 4; i++) {
                a0 += buf[4 * i], a1 += buf[4 * i + 1], a2 += buf[4 * i + 2], a3 += buf[4 * i + 3];
            }
            const bw_vec a = a0 + a1 + a2 + a3;
            x += a[0] + a[1] + a[2] + a[3];
        }
        sink += x;
        if (r >= 0) t[r] = bytes / (bl_now() - t0) / 1e9;
    }
    const double other = bl_other(&p);
    printf("mib=%d\nreps=%d\nread_gbs=%.1f\nother_cores=%.2f\nchecksum=%llu\n", o->mib, o->reps,
           bl_median(t, o->reps), other, (unsigned long long)sink);
    free(buf);
    free(t);
    return 0;
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

static int do_make_shape(const opts *o) {
    const sg_shape *s = sg_shape_find(o->shape);
    uint32_t type;
    if (!s) { fprintf(stderr, "bench_gen: --shape '%s': not one of %s\n", o->shape ? o->shape : "", sg_shape_names()); return 2; }
    if (!o->type || sg_type_parse(o->type, &type)) {
        fprintf(stderr, "bench_gen: --type '%s': not f32, f16, bf16 or q8_0 (Q4_K: quantize a bf16 file with "
                        "llama.cpp's llama-quantize --pure, as bench/peers_scale.sh does)\n", o->type ? o->type : "");
        return 2;
    }
    sg_plan plan;
    double t0 = bl_now();
    mp_status st = sg_write(s, type, o->seed, o->out, o->dry_run, &plan);
    if (st) { fprintf(stderr, "bench_gen: %s: %s\n", o->out, mp_last_error()); return 1; }
    printf("shape=%s\ntype=%s\ntensors=%d\nparams=%llu\nfile_bytes=%llu\n", s->name, mp_quant_type_name(type),
           plan.n_tensors, (unsigned long long)plan.params, (unsigned long long)plan.file_bytes);
    if (!o->dry_run) {
        struct stat sb;
        if (stat(o->out, &sb) || (uint64_t)sb.st_size != plan.file_bytes) {
            fprintf(stderr, "bench_gen: %s: the file written is not the planned %llu bytes\n", o->out,
                    (unsigned long long)plan.file_bytes);
            return 1;
        }
        printf("wrote=%s\nseconds=%.1f\n", o->out, bl_now() - t0);
        return 0;
    }
    /* the dry run: free space beside the file, and the making of blk.0.ffn_gate's first rows timed */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o->out);
    struct statvfs vs;
    for (;;) { /* the file's folder, or the nearest one above it that exists */
        char *slash = strrchr(dir, '/');
        if (!slash) { snprintf(dir, sizeof dir, "."); break; }
        *slash = 0;
        if (!dir[0]) { snprintf(dir, sizeof dir, "/"); break; }
        if (statvfs(dir, &vs) == 0) break;
    }
    if (statvfs(dir, &vs) == 0) {
        unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
        printf("free_bytes=%llu\nfree_in=%s\nfits=%d\n", avail, dir, avail > plan.file_bytes);
    }
    const uint64_t D = (uint64_t)s->d_model, rows = 256 < s->d_mlp ? 256 : (uint64_t)s->d_mlp;
    uint64_t rb = 0;
    mp_quant_bytes(type, D, &rb);
    void *buf = malloc((size_t)(rows * rb));
    if (!buf) { fprintf(stderr, "bench_gen: out of memory for the sample rows\n"); return 1; }
    double g0 = bl_now();
    st = sg_make_rows(type, o->seed, 7 /* blk.0.ffn_gate */, D, 0, rows, buf);
    double dt = bl_now() - g0;
    free(buf);
    if (st) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); return 1; }
    printf("sample_values=%llu\nsample_s=%.4f\nest_make_s=%.0f\n", (unsigned long long)(rows * D), dt,
           dt > 0 ? dt * (double)plan.params / (double)(rows * D) : 0.0);
    return 0;
}

static int do_compare(const opts *o) {
    FILE *fa = fopen(o->a, "rb"), *fb = fopen(o->b, "rb");
    if (!fa || !fb) { fprintf(stderr, "bench_gen: compare: cannot open %s\n", !fa ? o->a : o->b); return 1; }
    double maxd = 0, big = 0;
    size_t n = 0, rows_close = 0, rows = 0, in_row = 0;
    double row_max = 0;
    float x, y;
    const size_t limit = (size_t)o->n * (size_t)o->vocab;
    while (n < limit && fread(&x, 4, 1, fa) == 1 && fread(&y, 4, 1, fb) == 1) {
        double d = fabs((double)x - y);
        maxd = d > maxd ? d : maxd;
        big = fabs(y) > big ? fabs(y) : big;
        row_max = d > row_max ? d : row_max;
        n++;
        if (++in_row == (size_t)o->vocab) { rows++; rows_close += row_max <= 1e-3; in_row = 0; row_max = 0; }
    }
    fclose(fa);
    fclose(fb);
    printf("values=%zu\nmax_abs_diff=%.3g\nlargest_abs=%.3g\nsteps=%zu\n", n, maxd, big, rows);
    return n ? 0 : 1;
}

/* llm.c's GPT-2 checkpoint (gpt2_build_from_checkpoint, version 3): header of
 * 256 int32 (magic 20240326, version, maxT, V, L, NH, C, Vp), then wte [Vp,C],
 * wpe [maxT,C], ln1w, ln1b [L,C], qkvw [L,3C,C], qkvb [L,3C], attprojw [L,C,C],
 * attprojb [L,C], ln2w, ln2b, fcw [L,4C,C], fcb [L,4C], fcprojw [L,C,4C],
 * fcprojb [L,C], lnfw, lnfb [C]. */
static int write_llmc(const mp_model *m, const char *path) {
    const mp_config *c = &m->cfg;
    const mp_params *p = &m->p;
    const size_t C = (size_t)c->d_model, L = (size_t)c->n_layer, V = (size_t)c->vocab, T = (size_t)c->ctx;
    const size_t Vp = (V + 127) / 128 * 128, F = (size_t)c->d_mlp;
    int32_t h[256] = {20240326, 3, (int32_t)T, (int32_t)V, (int32_t)L, c->n_head, (int32_t)C, (int32_t)Vp};
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    int bad = fwrite(h, sizeof h, 1, f) != 1;
    float *zero = calloc((Vp - V) * C + 1, sizeof(float));
#define W(ptr, n) (bad |= fwrite((ptr), sizeof(float), (n), f) != (n))
    W(p->embed, V * C);
    W(zero, (Vp - V) * C);
    W(p->pos_embed, T * C);
    W(p->ln1_w, L * C);
    W(p->ln1_b, L * C);
    for (size_t l = 0; l < L; l++) { /* q | k | v rows */
        W(p->wq + l * C * C, C * C);
        W(p->wk + l * C * C, C * C);
        W(p->wv + l * C * C, C * C);
    }
    for (size_t l = 0; l < L; l++) {
        W(p->bq + l * C, C);
        W(p->bk + l * C, C);
        W(p->bv + l * C, C);
    }
    W(p->wo, L * C * C);
    W(p->bo, L * C);
    W(p->ln2_w, L * C);
    W(p->ln2_b, L * C);
    W(p->w1, L * F * C);
    W(p->b1, L * F);
    W(p->w2, L * C * F);
    W(p->b2, L * C);
    W(p->lnf_w, C);
    W(p->lnf_b, C);
#undef W
    free(zero);
    return fclose(f) != 0 || bad;
}

static int do_train_gpt2(const opts *o) {
    mp_config c = mp_config_default();
    c.d_model = o->d_model;
    c.n_layer = o->layers;
    c.d_head = 64;
    c.n_head = c.n_kv_head = o->d_model / 64;
    c.d_mlp = 4 * o->d_model;
    c.vocab = o->vocab;
    c.ctx = o->T;
    c.tied = 1;
    c.norm = MP_NORM_LAYER;
    c.mlp = MP_MLP_GELU;
    c.gelu_tanh = 1;
    c.pos = MP_POS_LEARNED;
    c.qkv_bias = c.linear_bias = 1;
    mp_model *m = NULL;
    if (mp_model_new_init(&m, &c, o->seed, 0.02f)) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); return 1; }
    char path[4096];
    snprintf(path, sizeof path, "%s.llmc.bin", o->out);
    if (write_llmc(m, path)) { fprintf(stderr, "bench_gen: cannot write %s\n", path); return 1; }
    const int B = o->B, T = o->T;
    const size_t n = (size_t)B * (T + 1);
    int *seq = malloc(n * sizeof(int)), *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    bl_fixed_batch(B, T, c.vocab, seq, tok, tgt);
    snprintf(path, sizeof path, "%s.tokens.i32", o->out);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seq, sizeof(int), n, f) != n || fclose(f)) { fprintf(stderr, "bench_gen: cannot write %s\n", path); return 1; }
    mp_adamw_params hp = mp_adamw_params_default();
    hp.lr = 1e-4f; /* llm.c's train_gpt2.c: lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay, no clipping */
    hp.beta2 = 0.999f;
    hp.weight_decay = 0.0f;
    hp.grad_clip = 0.0f;
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);
    mp_adamw_init(&opt, &hp, 0);
    mp_train_ws ws;
    memset(&ws, 0, sizeof ws);
    double *t = malloc((size_t)o->steps * sizeof(double));
    float loss = 0, loss0 = 0;
    bl_probe lp;
    int rc = 0;
    for (int i = -1; i < o->steps; i++) {
        if (i == 0) bl_sample(&lp);
        double t0 = bl_now();
        if (mp_train_step(m, &opt, &ws, tok, tgt, B, T, 1, NULL, &loss)) {
            fprintf(stderr, "bench_gen: %s\n", mp_last_error());
            rc = 1;
            break;
        }
        if (i == -1) loss0 = loss;
        else t[i] = bl_now() - t0;
    }
    if (!rc) {
        double other = bl_other(&lp), med = bl_median(t, o->steps);
        printf("loss0=%.6f\nloss_last=%.6f\nsteps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\nmaxrss_mib=%.1f\n",
               loss0, loss, o->steps, med, B * T / med, other, bl_peak_rss_mib());
    }
    mp_train_ws_free(&ws);
    mp_adamw_free(&opt);
    mp_model_free(m);
    free(seq);
    free(tok);
    free(tgt);
    free(t);
    return rc;
}

/* prefill's tokens: BOS (256, when the vocabulary has it), then (7 i + 3) mod 256 */
static void prompt_tokens(int *tok, int T, int V) {
    for (int i = 0; i < T; i++) tok[i] = i == 0 && V > 256 ? 256 : (i * 7 + 3) % (V < 256 ? V : 256);
}

static int do_decode(const opts *o, mp_model *m) {
    const int V = m->cfg.vocab, n = o->n, ctx = o->ctx;
    float *logits = malloc((size_t)V * sizeof(float)), *dump = o->dump ? malloc((size_t)n * V * sizeof(float)) : NULL;
    int *fed = malloc((size_t)n * sizeof(int)), *prompt = malloc((size_t)(ctx > 0 ? ctx : 1) * sizeof(int));
    double *t = malloc((size_t)(o->reps + 1) * sizeof(double));
    int rc = 0, first = 256 < V ? 256 : 0;
    mp_kvcache cache;
    if (!logits || !fed || !prompt || !t || (o->dump && !dump) || mp_kvcache_init(&cache, &m->cfg, 1, ctx + n)) {
        fprintf(stderr, "bench_gen: decode: out of memory (%s)\n", mp_last_error());
        free(logits); free(dump); free(fed); free(prompt); free(t);
        return 1;
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.cache = &cache;
    fp.logits = MP_LOGITS_LAST;
    double tp = bl_now();
    if (ctx > 0) { /* the context, untimed, in chunks of 512 */
        prompt_tokens(prompt, ctx, V);
        for (int i = 0; i < ctx && !rc; i += 512)
            if (mp_model_forward(m, prompt + i, 1, ctx - i < 512 ? ctx - i : 512, &fp, logits)) rc = 1;
        if (!rc) first = argmax(logits, V);
    }
    tp = bl_now() - tp;
    bl_probe lp;
    for (int r = -o->warmup; r < o->reps && !rc; r++) {
        if (r == 0) bl_sample(&lp);
        cache.len = ctx; /* back to the context alone */
        int tok = first;
        double t0 = bl_now();
        for (int i = 0; i < n && !rc; i++) {
            fed[i] = tok;
            if (mp_model_forward(m, &tok, 1, 1, &fp, logits)) { rc = 1; break; }
            if (dump && r == -o->warmup) memcpy(dump + (size_t)i * V, logits, (size_t)V * sizeof(float));
            tok = argmax(logits, V);
        }
        if (r >= 0) t[r] = bl_now() - t0;
    }
    mp_kvcache_free(&cache);
    if (rc) fprintf(stderr, "bench_gen: decode: %s\n", mp_last_error());
    else {
        double other = bl_other(&lp), med = bl_median(t, o->reps);
        printf("n=%d\nctx=%d\nprefill_s=%.3f\nreps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\n", n, ctx, tp,
               o->reps, med, n / med, other);
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
    free(prompt);
    free(t);
    return rc;
}

/* One prefill that captures o->capture into a new run file o->capture_out (as bench_forward's capture:
 * create, /model and /tokens, the forward, commit with its fsync); *t_fwd: the forward call alone. */
static mp_status capture_once(const mp_model *m, const opts *o, const int *tok, float *logits, double *t_fwd) {
    const mp_config *c = &m->cfg;
    mp_h5run *run = NULL;
    mp_hooks *hooks = NULL;
    mp_h5run_params hp = mp_h5run_params_default();
    unlink(o->capture_out); /* a new file each run (replacing one adds its blocks' release to the rename) */
    mp_status st = mp_h5run_create(&run, o->capture_out, &hp);
    if (st) return st;
    if ((st = mp_h5run_write_model(run, c, m->source, m->tokenizer))) goto cleanup;
    if ((st = mp_h5run_write_tokens(run, tok, 1, o->T))) goto cleanup;
    if (!(hooks = mp_hooks_new(c))) { st = mp_error(MP_ERR_NOMEM, "out of memory for the hook registry"); goto cleanup; }
    if ((st = mp_h5run_capture(run, hooks, c, o->capture, 1, o->T))) goto cleanup;
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_LAST;
    fp.hooks = hooks;
    double t0 = bl_now();
    st = mp_model_forward(m, tok, 1, o->T, &fp, logits);
    *t_fwd = bl_now() - t0;
    if (st) goto cleanup;
    mp_hooks_free(hooks); /* the callbacks point into run */
    hooks = NULL;
    st = mp_h5run_commit(run);
    run = NULL;
cleanup:
    mp_hooks_free(hooks);
    mp_h5run_abort(run);
    return st;
}

static int do_prefill(const opts *o, mp_model *m) {
    const int V = m->cfg.vocab, T = o->T;
    int *tok = malloc((size_t)T * sizeof(int));
    float *logits = malloc((size_t)V * sizeof(float));
    double *t = malloc((size_t)(o->reps + 1) * sizeof(double)), *tf = malloc((size_t)(o->reps + 1) * sizeof(double));
    if (!tok || !logits || !t || !tf) {
        fprintf(stderr, "bench_gen: prefill: out of memory\n");
        free(tok); free(logits); free(t); free(tf);
        return 1;
    }
    prompt_tokens(tok, T, V);
    int rc = 0;
    bl_probe lp;
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_LAST;
    for (int r = -o->warmup; r < o->reps; r++) {
        if (r == 0) bl_sample(&lp);
        double t0 = bl_now(), t_fwd = 0;
        if (o->capture ? capture_once(m, o, tok, logits, &t_fwd) != MP_OK
                       : mp_model_forward(m, tok, 1, T, &fp, logits) != MP_OK) { rc = 1; break; }
        if (r >= 0) { t[r] = bl_now() - t0; tf[r] = t_fwd; }
    }
    if (rc) fprintf(stderr, "bench_gen: prefill: %s\n", mp_last_error());
    else {
        double other = bl_other(&lp), med = bl_median(t, o->reps);
        printf("T=%d\nreps=%d\nmedian_s=%.6f\ntok_s=%.1f\nother_cores=%.2f\n", T, o->reps, med, T / med, other);
        if (o->capture) {
            struct stat sb;
            printf("capture=%s\nfwd_median_s=%.6f\n", o->capture, bl_median(tf, o->reps));
            if (stat(o->capture_out, &sb) == 0) printf("file_bytes=%lld\n", (long long)sb.st_size);
        }
    }
    free(tok);
    free(logits);
    free(t);
    free(tf);
    return rc;
}

int main(int argc, char **argv) {
    mp_omp_env_default(argv); /* the waiting policy of the mechprobe command */
    opts o = {NULL, NULL, NULL, NULL, NULL, NULL, 128, 1024, 5, 512, 8, 512, 4, 10, 1234, NULL, NULL, NULL, NULL, NULL, 0, 1, 0, 1024};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--dry-run")) { o.dry_run = 1; continue; }
        if (!v) { fprintf(stderr, "bench_gen: %s needs a value\n", a); usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--mode")) o.mode = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--dump")) o.dump = v;
        else if (!strcmp(a, "--a")) o.a = v;
        else if (!strcmp(a, "--b")) o.b = v;
        else if (!strcmp(a, "-B")) o.B = atoi(v);
        else if (!strcmp(a, "--steps")) o.steps = atoi(v);
        else if (!strcmp(a, "-n")) o.n = atoi(v);
        else if (!strcmp(a, "-T")) o.T = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--d-model")) o.d_model = atoi(v);
        else if (!strcmp(a, "--layers")) o.layers = atoi(v);
        else if (!strcmp(a, "--vocab")) o.vocab = atoi(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--shape")) o.shape = v;
        else if (!strcmp(a, "--type")) o.type = v;
        else if (!strcmp(a, "--ctx")) o.ctx = atoi(v);
        else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
        else if (!strcmp(a, "--capture")) o.capture = v;
        else if (!strcmp(a, "--capture-out")) o.capture_out = v;
        else if (!strcmp(a, "--precision")) o.precision = v;
        else if (!strcmp(a, "--mib")) o.mib = atoi(v);
        else { fprintf(stderr, "bench_gen: unknown option %s\n", a); usage(stderr); return 2; }
    }
    if (!o.mode || o.n < 1 || o.T < 1 || o.reps < 1 || o.d_model < 64 || o.d_model % 64 || o.layers < 1 ||
        o.vocab < 257 || o.B < 1 || o.steps < 1 || o.ctx < 0 || o.warmup < 0) {
        fprintf(stderr, "bench_gen: --mode is required; -n, -T, -B, --reps, --steps, --layers >= 1; --d-model a "
                        "multiple of 64; --vocab >= 257; --ctx, --warmup >= 0\n");
        return 2;
    }
    if (!strcmp(o.mode, "membw")) {
        if (o.mib < 1 || o.mib > 65536) { fprintf(stderr, "bench_gen: --mib must be 1..65536 (MiB)\n"); return 2; }
        return do_membw(&o);
    }
    if (!o.capture != !o.capture_out) { fprintf(stderr, "bench_gen: --capture and --capture-out go together\n"); return 2; }
    mp_io_init(); /* mp_init, and HDF5 quiet (the prefill's capture) */
    if (!strcmp(o.mode, "make-shape")) {
        if (!o.out) { fprintf(stderr, "bench_gen: make-shape needs --out FILE.gguf\n"); return 2; }
        return do_make_shape(&o);
    }
    if (!strcmp(o.mode, "make") || !strcmp(o.mode, "train-gpt2")) {
        if (!o.out) { fprintf(stderr, "bench_gen: %s needs --out PREFIX\n", o.mode); return 2; }
        return !strcmp(o.mode, "make") ? do_make(&o) : do_train_gpt2(&o);
    }
    if (!strcmp(o.mode, "compare")) {
        if (!o.a || !o.b) { fprintf(stderr, "bench_gen: compare needs --a FILE --b FILE\n"); return 2; }
        return do_compare(&o);
    }
    if (strcmp(o.mode, "decode") && strcmp(o.mode, "prefill")) { fprintf(stderr, "bench_gen: unknown mode %s\n", o.mode); return 2; }
    if (!o.model) { fprintf(stderr, "bench_gen: %s needs --model FILE.gguf\n", o.mode); return 2; }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    mp_model *m = NULL;
    const double rss0 = bl_peak_rss_mib(); /* the process before the model: code, libraries */
    if (mp_model_load_gguf(&m, o.model)) { fprintf(stderr, "bench_gen: %s\n", mp_last_error()); return 1; }
    if (o.precision) {
        mp_precision prec;
        if (mp_precision_parse(o.precision, "bench_gen: --precision", &prec) ||
            mp_model_to_device(m, MP_DEVICE_CPU, prec)) {
            fprintf(stderr, "bench_gen: %s\n", mp_last_error());
            mp_model_free(m);
            return 1;
        }
    }
    char wt[64];
    mp_model_weight_types(m, wt, sizeof wt);
    printf("precision=%s\n", mp_precision_name(m->precision));
    printf("threads=%d\nweights=%s\nqdot_isa=%s\nopenblas_core=%s\nbase_rss_mib=%.1f\nload_rss_mib=%.1f\n", threads,
           wt, mp_qdot_isa_name(mp_qdot_isa_active()), openblas_get_corename(), rss0, bl_peak_rss_mib());
    int rc = !strcmp(o.mode, "decode") ? do_decode(&o, m) : do_prefill(&o, m);
    printf("maxrss_mib=%.1f\n", bl_peak_rss_mib());
    mp_model_free(m);
    return rc;
}
