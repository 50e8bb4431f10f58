/* bench_forward.c — the foundation benchmark's measuring program: prefill
 * throughput of mp_model_forward, the cost of capturing hooks to an HDF5 run
 * file, the cost of hook dispatch, and the OpenBLAS sgemm ceiling it is judged
 * against. One measurement per process (so each peak RSS is its own); bench/run.sh
 * runs the modes beside the PyTorch peer and prints the table.
 *
 *   bench_forward --mode sgemm [--shapes MxNxK,...]
 *   bench_forward --mode make-random --out FILE.bin        (the large random model)
 *   bench_forward --mode forward  --model FILE -B 8 -T 128 [--dump PREFIX] [--hooks GLOBS]
 *                 [--write-bytes N --out FILE]  (each forward beside an O_DIRECT write of N bytes + fdatasync)
 *   bench_forward --mode capture  --model FILE -B 1 -T 1024 --hooks GLOBS --out FILE.h5
 *   bench_forward --mode dispatch --model FILE -B 8 -T 128
 *   common: --reps R (timed repetitions, default 5) --warmup W (default 1) --seed S
 *
 * Output: one `key=value` per line (times in seconds, FLOP/s in GFLOP/s, peak
 * RSS in MiB from getrusage; other_cores: CPU other processes used meanwhile),
 * meant to be read by run.sh. FLOPs are counted
 * analytically: 2 x the multiply-adds of every matmul (q, k, v, o, gate, up,
 * down, classifier) plus causal attention 2*2*H*Dh*T*(T+1)/2 per sequence and
 * layer (QK^T and PV on the lower triangle). */
#define _GNU_SOURCE /* O_DIRECT */
#include "omp_env.h"
#include "bench_load.h"
#include "h5io.h"
#include "h5run.h"
#include "h5stream.h"
#include "formats.h"
#include "model.h"
#include "mp_hooks.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *mode, *model, *out, *hooks, *dump, *shapes;
    int B, T, reps, warmup;
    long chunk_kib; /* capture: run-file chunk target (0: the library's default) */
    long long write_bytes; /* forward: bytes written with O_DIRECT to --out beside each forward */
    uint64_t seed;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_forward --mode sgemm|make-random|forward|capture|dispatch [options]\n"
            "  --model FILE     llama2.c checkpoint (forward, capture, dispatch)\n"
            "  -B N, -T N       batch and sequence length\n"
            "  --hooks GLOBS    hook names to capture (capture), or to read with a no-op reader (forward)\n"
            "  --out FILE       run file (capture) or checkpoint (make-random)\n"
            "  --dump PREFIX    write PREFIX.tokens.i32 and PREFIX.logits.f32 (forward)\n"
            "  --shapes LIST    sgemm shapes MxNxK,... (C[M,N] = A[M,K] B[K,N])\n"
            "  --chunk-kib N    capture: HDF5 chunk target in KiB (default: the library's 1 MiB)\n"
            "  --write-bytes N  forward: write N bytes to --out with O_DIRECT (4 MiB writes) and fdatasync\n"
            "                   beside each forward (a perfect overlap of a capture's writes)\n"
            "  --reps R --warmup W --seed S\n");
}

/* CPU used by other processes during a measurement, in cores: the machine's busy
 * time (/proc/stat: user, nice, system, irq, softirq, steal) minus our own
 * (getrusage), over the wall time (bench_load.h). Noise from other tenants shows here. */
static void print_other_load(const bl_probe *a) {
    bl_probe b;
    bl_sample(&b);
    if (a->busy < 0 || b.busy < 0 || b.wall <= a->wall) return; /* unknown: no line */
    printf("other_cores=%.2f\n", bl_other(a));
}

static int threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Analytical FLOPs of one prefill over B x T tokens with all logits. */
static double forward_flops(const mp_config *c, int B, int T) {
    double D = c->d_model, HD = (double)c->n_head * c->d_head, KD = (double)c->n_kv_head * c->d_head;
    double M = c->d_mlp, V = c->vocab, L = c->n_layer;
    double per_tok_layer = D * HD + 2.0 * D * KD + HD * D + 3.0 * D * M; /* multiply-adds */
    double mm = 2.0 * ((double)B * T) * (L * per_tok_layer + D * V);
    double attn = (double)B * L * 2.0 * 2.0 * HD * (double)T * (T + 1.0) / 2.0;
    return mm + attn;
}

/* Deterministic tokens in [0, V): splitmix64 of the seed. */
static void make_tokens(int *tok, size_t n, int V, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        tok[i] = (int)(z % (uint64_t)V);
    }
}

static mp_status write_raw(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) return mp_error(MP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, bytes, f);
    int rc = fclose(f);
    if (w != bytes || rc != 0) return mp_error(MP_ERR_IO, "%s: write failed", path);
    return MP_OK;
}

static void print_common(const mp_model *m, const opts *o) {
    const mp_config *c = &m->cfg;
    printf("threads=%d\n", threads());
    printf("openblas=%s\n", openblas_get_config());
    printf("openblas_core=%s\n", openblas_get_corename());
    printf("model=%s\nformat=%s\n", m->source, m->format);
    printf("config=d_model %d, %d layers, %d heads (%d kv), d_head %d, d_mlp %d, vocab %d, ctx %d, %s\n",
           c->d_model, c->n_layer, c->n_head, c->n_kv_head, c->d_head, c->d_mlp, c->vocab, c->ctx,
           c->tied ? "tied classifier" : "untied classifier");
    printf("B=%d\nT=%d\nreps=%d\nwarmup=%d\n", o->B, o->T, o->reps, o->warmup);
}

/* Prints the timing summary of `reps` runs of `flops` each over B*T tokens. */
static void print_times(const char *prefix, double *t, int reps, double flops, double tokens) {
    double mn = t[0];
    for (int i = 1; i < reps; i++) mn = t[i] < mn ? t[i] : mn;
    double med = bl_median(t, reps);
    printf("%smedian_s=%.6f\n%smin_s=%.6f\n%smax_s=%.6f\n", prefix, med, prefix, mn, prefix, t[reps - 1]);
    printf("%stok_s=%.1f\n", prefix, tokens / med);
    if (flops > 0) printf("%sgflops=%.2f\n", prefix, flops / med * 1e-9);
}

/* ---- sgemm ceiling ---- */
static int mode_sgemm(const opts *o) {
    const char *list = o->shapes ? o->shapes : "1024x1376x512,1024x512x1376,1024x512x512,1024x1024x1024";
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    printf("threads=%d\nopenblas=%s\nopenblas_core=%s\n", threads(), openblas_get_config(), openblas_get_corename());
    double best = 0;
    char best_shape[64] = "";
    bl_probe lp;
    bl_sample(&lp);
    for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        int M, N, K;
        if (sscanf(s, "%dx%dx%d", &M, &N, &K) != 3 || M <= 0 || N <= 0 || K <= 0) {
            fprintf(stderr, "bench_forward: --shapes: '%s' is not MxNxK\n", s);
            return 2;
        }
        float *a = mp_malloc((size_t)M * K * sizeof(float), "sgemm A");
        float *b = mp_malloc((size_t)N * K * sizeof(float), "sgemm B");
        float *c = mp_malloc((size_t)M * N * sizeof(float), "sgemm C");
        if (!a || !b || !c) {
            fprintf(stderr, "bench_forward: %s\n", mp_last_error());
            free(a); free(b); free(c);
            return 1;
        }
        for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)((i * 7919u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)((i * 104729u) % 1000) * 1e-3f - 0.5f;
        /* The layout of mp_matmul_forward: C[M,N] = A[M,K] W[N,K]^T. */
        double flops = 2.0 * M * N * K, t[64];
        int reps = o->reps > 64 ? 64 : o->reps;
        /* enough calls per sample to last ~20 ms, so timer noise does not matter */
        int inner = 1;
        double t0 = mp_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double one = mp_now() - t0;
        if (one < 0.02) inner = (int)(0.02 / (one > 1e-6 ? one : 1e-6)) + 1;
        for (int w = 0; w < o->warmup; w++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        for (int r = 0; r < reps; r++) {
            t0 = mp_now();
            for (int i = 0; i < inner; i++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
            t[r] = (mp_now() - t0) / inner;
        }
        double g = flops / bl_median(t, reps) * 1e-9;
        printf("sgemm_%dx%dx%d_gflops=%.2f\n", M, N, K, g);
        if (g > best) { best = g; snprintf(best_shape, sizeof best_shape, "%dx%dx%d", M, N, K); }
        free(a); free(b); free(c);
    }
    print_other_load(&lp);
    printf("sgemm_best_gflops=%.2f\nsgemm_best_shape=%s\n", best, best_shape);
    return 0;
}

/* ---- the large random model, written once for both implementations ---- */
static int mode_make_random(const opts *o) {
    if (!o->out) { fprintf(stderr, "bench_forward: make-random needs --out FILE\n"); return 2; }
    mp_config c = mp_config_default();
    c.d_model = 512; c.n_layer = 8; c.n_head = 8; c.n_kv_head = 8; c.d_head = 64;
    c.d_mlp = 1376; c.vocab = 512; c.ctx = 1024; c.tied = 0;
    mp_model *m = NULL;
    mp_status st = mp_model_new_random(&m, &c, o->seed, 0.02f);
    if (!st) st = mp_model_save_llama2c(m, o->out, 0);
    mp_model_free(m);
    if (st) { fprintf(stderr, "bench_forward: %s\n", mp_last_error()); return 1; }
    printf("wrote=%s\n", o->out);
    return 0;
}

/* ---- plain forward ---- */

/* --write-bytes: a thread writing the bytes of a capture with O_DIRECT and
 * making them durable, the least a capture's writes can cost the disk. */
typedef struct {
    const char *path;
    long long bytes;
    const char *buf; /* 4 MiB, page-aligned */
    double t0, t_done; /* t_done: when the fdatasync returned (mp_now) */
    int err;
} dd_job;

static void *dd_main(void *u) {
    dd_job *j = u;
    const size_t blk = (size_t)4 << 20;
    int fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    j->err = fd < 0 ? errno : 0;
    for (long long off = 0; !j->err && off < j->bytes; off += (long long)blk) {
        size_t n = j->bytes - off < (long long)blk ? (size_t)(j->bytes - off) : blk;
        n = (n + 4095) / 4096 * 4096; /* O_DIRECT: whole pages */
        if (pwrite(fd, j->buf, n, (off_t)off) != (ssize_t)n) j->err = errno ? errno : EIO;
    }
    if (!j->err && fdatasync(fd) != 0) j->err = errno;
    if (fd >= 0) close(fd);
    j->t_done = mp_now();
    return NULL;
}

static int noop_reader(void *user, const mp_hook_info *info, float *data) {
    (void)user; (void)info; (void)data;
    return 0;
}

/* With --hooks: the hook points a capture would read, each with a no-op
 * reader: the cost of exposing them (e.g. the full-width pattern rows), no
 * writes. */
static int mode_forward(const mp_model *m, const opts *o, const int *tok, float *logits) {
    const mp_config *c = &m->cfg;
    mp_forward_params fp = mp_forward_params_default();
    mp_status st = MP_OK;
    mp_hooks *hooks = NULL;
    if (o->hooks) {
        if (!(hooks = mp_hooks_new(c)) || mp_hooks_add_reader(hooks, o->hooks, noop_reader, NULL) != MP_OK) {
            fprintf(stderr, "bench_forward: --hooks: %s\n", mp_last_error());
            mp_hooks_free(hooks);
            return 1;
        }
        fp.hooks = hooks;
    }
    double *t = calloc((size_t)o->reps, sizeof *t), *tw = calloc((size_t)o->reps, sizeof *tw),
           *tf = calloc((size_t)o->reps, sizeof *tf);
    char *wbuf = NULL;
    if (o->write_bytes > 0) {
        if (!o->out) { fprintf(stderr, "bench_forward: --write-bytes needs --out FILE\n"); st = MP_ERR_ARG; }
        else if (posix_memalign((void **)&wbuf, 4096, (size_t)4 << 20) != 0) wbuf = NULL;
        else for (size_t i = 0; i < ((size_t)4 << 20); i++) wbuf[i] = (char)(i * 2654435761u >> 13);
    }
    if (!t || !tw || !tf || st || (o->write_bytes > 0 && !wbuf)) {
        free(t); free(tw); free(tf); free(wbuf);
        mp_hooks_free(hooks);
        return 1;
    }
    for (int w = 0; w < o->warmup && !st; w++) st = mp_model_forward(m, tok, o->B, o->T, &fp, logits);
    if (!st && o->dump) {
        char path[4096];
        snprintf(path, sizeof path, "%s.tokens.i32", o->dump);
        st = write_raw(path, tok, (size_t)o->B * o->T * sizeof(int));
        snprintf(path, sizeof path, "%s.logits.f32", o->dump);
        if (!st) st = write_raw(path, logits, (size_t)o->B * o->T * c->vocab * sizeof(float));
    }
    bl_probe lp;
    bl_sample(&lp);
    for (int r = 0; r < o->reps && !st; r++) {
        dd_job job = {o->out, o->write_bytes, wbuf, 0, 0, 0};
        pthread_t th;
        int dd = 0;
        if (wbuf) {
            unlink(o->out); /* a new file each time, as a capture's */
            job.t0 = mp_now();
            dd = pthread_create(&th, NULL, dd_main, &job) == 0;
        }
        double t0 = mp_now();
        st = mp_model_forward(m, tok, o->B, o->T, &fp, logits);
        double t1 = mp_now();
        tf[r] = t1 - t0;
        if (dd) {
            pthread_join(th, NULL);
            if (job.err) { fprintf(stderr, "bench_forward: %s: %s\n", o->out, strerror(job.err)); st = MP_ERR_IO; }
            tw[r] = job.t_done - job.t0;
            t1 = job.t_done > t1 ? job.t_done : t1; /* both done */
        }
        t[r] = t1 - t0;
    }
    mp_hooks_free(hooks);
    free(wbuf);
    if (o->write_bytes > 0) unlink(o->out);
    if (st) { fprintf(stderr, "bench_forward: forward: %s\n", mp_last_error()); free(t); free(tw); free(tf); return 1; }
    print_other_load(&lp);
    printf("flops=%.6g\n", forward_flops(c, o->B, o->T));
    print_times("", t, o->reps, forward_flops(c, o->B, o->T), (double)o->B * o->T);
    if (o->write_bytes > 0) { /* median_s: until both are done; fwd_: the forward; write_: the write + fdatasync */
        printf("write_bytes=%lld\n", o->write_bytes);
        print_times("fwd_", tf, o->reps, 0, (double)o->B * o->T);
        print_times("write_", tw, o->reps, 0, (double)o->B * o->T);
    }
    free(t);
    free(tw);
    free(tf);
    return 0;
}

/* ---- forward with a capture to an HDF5 run file ---- */
static mp_status capture_once(const mp_model *m, const opts *o, const int *tok, float *logits, double *t_fwd,
                              double *t_commit) {
    const mp_config *c = &m->cfg;
    mp_h5run *run = NULL;
    mp_hooks *hooks = NULL;
    mp_h5run_params hp = mp_h5run_params_default();
    if (o->chunk_kib > 0) hp.chunk_bytes = (size_t)o->chunk_kib << 10;
    mp_status st = mp_h5run_create(&run, o->out, &hp);
    if (st) return st;
    if ((st = mp_h5run_write_model(run, c, m->source, m->tokenizer))) goto cleanup;
    if ((st = mp_h5run_write_tokens(run, tok, o->B, o->T))) goto cleanup;
    if (!(hooks = mp_hooks_new(c))) { st = mp_error(MP_ERR_NOMEM, "out of memory for the hook registry"); goto cleanup; }
    if ((st = mp_h5run_capture(run, hooks, c, o->hooks, o->B, o->T))) goto cleanup;
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    double t0 = mp_now();
    st = mp_model_forward(m, tok, o->B, o->T, &fp, logits);
    *t_fwd = mp_now() - t0;
    if (st) goto cleanup;
    mp_hooks_free(hooks);   /* the callbacks point into run */
    hooks = NULL;
    t0 = mp_now();
    st = mp_h5run_commit(run);
    *t_commit = mp_now() - t0;
    run = NULL;
cleanup:
    mp_hooks_free(hooks);
    mp_h5run_abort(run);
    return st;
}

static int mode_capture(const mp_model *m, const opts *o, const int *tok, float *logits) {
    if (!o->out || !o->hooks) { fprintf(stderr, "bench_forward: capture needs --out FILE.h5 and --hooks GLOBS\n"); return 2; }
    double *t = calloc((size_t)o->reps, sizeof *t), *tf = calloc((size_t)o->reps, sizeof *tf),
           *tc = calloc((size_t)o->reps, sizeof *tc), dummy, dummy2;
    mp_status st = MP_OK;
    if (!t || !tf || !tc) { free(t); free(tf); free(tc); return 1; }
    for (int w = 0; w < o->warmup && !st; w++) st = capture_once(m, o, tok, logits, &dummy, &dummy2);
    bl_probe lp;
    bl_sample(&lp);
    for (int r = 0; r < o->reps && !st; r++) {
        /* each rep writes a new file: replacing the last one would add the
         * release of its blocks (~50 ms for 192 MiB on ext4) to the rename */
        unlink(o->out);
        double t0 = mp_now();
        st = capture_once(m, o, tok, logits, &tf[r], &tc[r]);
        t[r] = mp_now() - t0;
    }
    if (st) { fprintf(stderr, "bench_forward: capture: %s\n", mp_last_error()); free(t); free(tf); free(tc); return 1; }
    print_other_load(&lp);
    struct stat sb;
    if (stat(o->out, &sb) == 0) printf("file_bytes=%lld\n", (long long)sb.st_size);
    mp_h5_stream_stats ss;
    mp_h5_stream_get_stats(&ss); /* every rep's bytes: O_DIRECT through the staging buffer / plain pwrite */
    unsigned long long all = ss.plain_bytes + ss.staged_bytes;
    printf("direct_share=%.3f\n", all ? (double)ss.direct_bytes / (double)all : 0.0);
    /* packed straight into the driver's lent staging buffers (no second copy) */
    printf("lent_share=%.3f\n", all ? (double)ss.lent_bytes / (double)all : 0.0);
    /* per capture: the time writes waited for a free staging buffer (the disk behind the forward) */
    printf("stage_wait_s=%.6f\n", ss.wait_s / (o->reps + o->warmup));
    printf("hooks=%s\n", o->hooks);
    printf("chunk_kib=%ld\n", o->chunk_kib > 0 ? o->chunk_kib : (long)(mp_h5run_params_default().chunk_bytes >> 10));
    printf("flops=%.6g\n", forward_flops(&m->cfg, o->B, o->T));
    /* total: create + capture + forward + commit (fsync); fwd_: the forward call alone; commit_: the commit */
    print_times("", t, o->reps, forward_flops(&m->cfg, o->B, o->T), (double)o->B * o->T);
    print_times("fwd_", tf, o->reps, 0, (double)o->B * o->T);
    /* commit: the writes still staged, HDF5's metadata, the fsync and the rename */
    print_times("commit_", tc, o->reps, 0, (double)o->B * o->T);
    free(t);
    free(tf);
    free(tc);
    return 0;
}

/* ---- hook dispatch cost ---- */
static int noop_hook(void *user, const mp_hook_info *info, float *data) {
    (void)info; (void)data;
    ++*(long *)user;
    return 0;
}

static int mode_dispatch(const mp_model *m, const opts *o, const int *tok, float *logits) {
    const mp_config *c = &m->cfg;
    mp_hooks *empty = mp_hooks_new(c), *one = mp_hooks_new(c);
    long calls = 0;
    mp_status st = MP_OK;
    double *t[3] = {calloc((size_t)o->reps, sizeof(double)), calloc((size_t)o->reps, sizeof(double)),
                    calloc((size_t)o->reps, sizeof(double))};
    int rc = 1;
    if (!empty || !one || !t[0] || !t[1] || !t[2]) { fprintf(stderr, "bench_forward: out of memory\n"); goto cleanup; }
    if ((st = mp_hooks_add(one, "blocks.0.hook_resid_pre", noop_hook, &calls))) goto fail;
    mp_forward_params fp[3];
    for (int k = 0; k < 3; k++) fp[k] = mp_forward_params_default();
    fp[0].hooks = NULL;
    fp[1].hooks = empty;
    fp[2].hooks = one;
    for (int w = 0; w < o->warmup; w++)
        for (int k = 0; k < 3 && !st; k++) st = mp_model_forward(m, tok, o->B, o->T, &fp[k], logits);
    /* interleaved, rotating which variant goes first, so drift hits all three alike */
    bl_probe lp;
    bl_sample(&lp);
    for (int r = 0; r < o->reps && !st; r++)
        for (int j = 0; j < 3 && !st; j++) {
            int k = (r + j) % 3;
            double t0 = mp_now();
            st = mp_model_forward(m, tok, o->B, o->T, &fp[k], logits);
            t[k][r] = mp_now() - t0;
        }
    if (st) goto fail;
    print_other_load(&lp);
    const char *names[3] = {"null", "empty", "one"};
    double med[3];
    for (int k = 0; k < 3; k++) {
        char pfx[16];
        snprintf(pfx, sizeof pfx, "%s_", names[k]);
        print_times(pfx, t[k], o->reps, forward_flops(c, o->B, o->T), (double)o->B * o->T);
        med[k] = bl_median(t[k], o->reps);
    }
    printf("empty_vs_null_pct=%+.2f\none_vs_null_pct=%+.2f\n", 100.0 * (med[1] / med[0] - 1.0),
           100.0 * (med[2] / med[0] - 1.0));
    printf("noop_calls=%ld\n", calls);
    rc = 0;
    goto cleanup;
fail:
    fprintf(stderr, "bench_forward: dispatch: %s\n", mp_last_error());
cleanup:
    for (int k = 0; k < 3; k++) free(t[k]);
    mp_hooks_free(empty);
    mp_hooks_free(one);
    return rc;
}

int main(int argc, char **argv) {
    mp_omp_env_default(argv); /* the waiting policy of the mechprobe command */
    opts o = {0};
    o.B = 1;
    o.T = 128;
    o.reps = 5;
    o.warmup = 1;
    o.seed = 1234;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "bench_forward: %s needs a value\n", a); usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--mode")) o.mode = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--hooks")) o.hooks = v;
        else if (!strcmp(a, "--dump")) o.dump = v;
        else if (!strcmp(a, "--shapes")) o.shapes = v;
        else if (!strcmp(a, "-B")) o.B = atoi(v);
        else if (!strcmp(a, "-T")) o.T = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
        else if (!strcmp(a, "--chunk-kib")) o.chunk_kib = atol(v);
        else if (!strcmp(a, "--write-bytes")) o.write_bytes = atoll(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else { fprintf(stderr, "bench_forward: unknown option %s\n", a); usage(stderr); return 2; }
    }
    if (!o.mode) { usage(stderr); return 2; }
    if (o.B < 1 || o.T < 1 || o.reps < 1 || o.warmup < 0) {
        fprintf(stderr, "bench_forward: -B, -T and --reps must be positive, --warmup non-negative\n");
        return 2;
    }
    mp_io_init();
    if (!strcmp(o.mode, "sgemm")) return mode_sgemm(&o);
    if (!strcmp(o.mode, "make-random")) return mode_make_random(&o);
    if (strcmp(o.mode, "forward") && strcmp(o.mode, "capture") && strcmp(o.mode, "dispatch")) {
        fprintf(stderr, "bench_forward: unknown mode '%s'\n", o.mode);
        return 2;
    }
    if (!o.model) { fprintf(stderr, "bench_forward: --mode %s needs --model FILE\n", o.mode); return 2; }

    mp_model *m = NULL;
    int *tok = NULL;
    float *logits = NULL;
    int rc = 1;
    if (mp_model_load_llama2c(&m, o.model)) { fprintf(stderr, "bench_forward: %s\n", mp_last_error()); return 1; }
    size_t n_tok = (size_t)o.B * o.T, n_logits;
    if (mp_mul_size(n_tok, (size_t)m->cfg.vocab, &n_logits)) { fprintf(stderr, "bench_forward: B*T*V overflows\n"); goto done; }
    tok = mp_malloc(n_tok * sizeof(int), "tokens");
    logits = tok ? mp_malloc(n_logits * sizeof(float), "logits") : NULL;
    if (!tok || !logits) { fprintf(stderr, "bench_forward: %s\n", mp_last_error()); goto done; }
    make_tokens(tok, n_tok, m->cfg.vocab, o.seed);
    print_common(m, &o);
    if (!strcmp(o.mode, "forward")) rc = mode_forward(m, &o, tok, logits);
    else if (!strcmp(o.mode, "capture")) rc = mode_capture(m, &o, tok, logits);
    else rc = mode_dispatch(m, &o, tok, logits);
    printf("maxrss_mib=%.1f\n", bl_peak_rss_mib());
done:
    free(tok);
    free(logits);
    mp_model_free(m);
    return rc;
}
