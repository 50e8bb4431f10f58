/* cuda_model.c — the CUDA backend's host side (built with CUDA only): a model's
 * device copy (its weights in one cudaMalloc laid out as mp_params, a stream,
 * a cuBLAS handle, a workspace grown on demand, pinned staging memory) and the
 * forward pass on the device: its op table (cu_exec) walked by the same
 * mp_block_forward as the CPU's (runtime/exec.c: the order of the steps and
 * of the hook points is there, not here), with the same hook points fired
 * through the same dispatch on host copies.
 * An active point whose callbacks are all C interventions runs them as device
 * kernels (dev_interventions: nothing leaves the device). One whose callbacks
 * all only read (readers: captures, caches) is snapshotted on the device and
 * copied to pinned memory on a copy stream while the forward goes on; the
 * readers get it as the copy completes, in order, before the call returns
 * (rd_push). Any other active point is copied to pinned host memory, its
 * callbacks see and may edit it, and it is copied back before the next step
 * reads it (after the pending readers). Inactive points cost nothing.
 * Matrix products: cuBLAS sgemm in its default math mode, which does not use
 * TF32 (the fp32 reference path). Precision bf16: the linear weights get a
 * bfloat16 copy, each product's input is rounded to bfloat16 (once for the
 * products that share it: q, k and v; the MLP's gate and up; bf16_input) and
 * cublasGemmEx multiplies them with fp32 accumulation and an fp32 result; everything else
 * (the residual stream, norms and their statistics, positions, softmax and
 * the attention, hook views) stays fp32. cuBLAS is loaded with dlopen when a model
 * first moves to the device (blas_load): linked, its 600 MB would load into
 * every mechprobe process, CPU-only ones included. Kernels: cuda_kernels.cu.
 *
 * Training (cu_train_step, behind mp_train_step): the forward in training mode
 * keeps every activation the backward reads in an mp_acts store laid out in
 * device memory (model.h's layout), hooks live on the stored tensors; the
 * classifier, loss and dlogits in chunks of rows (train_head: the logits
 * never exist whole), the backward as backward.c's walk over the device's
 * operations (cu_bwd_ops: cuBLAS for the products' input and weight
 * gradients, cuda_train_kernels.cu for the rest; the attention, by blocks
 * of query rows with its products in cuBLAS, recomputes the pattern from
 * each row's log-sum-exp (attn_blocked), or, where a hook shows the scores
 * or the pattern, runs over the stored one), the
 * global norm, clipping and AdamW (moments on the device, uploaded when the
 * optimiser's state changed on the host). The updated weights and moments
 * stay on the device (stale): cu_sync copies them back when the host needs
 * them (mp_model_sync: saves, moves, CPU fallbacks, the Lua API after m:train
 * and m:train_step), and after every step that has hooks, whose callbacks may
 * read the host weights. Precision bf16:
 * every product of the forward and the backward takes bfloat16 operands (the
 * weights' copy, refreshed after each update; inputs and output gradients
 * rounded) with fp32 accumulation into fp32; the master weights, AdamW's
 * moments, activations, norms, softmax and every reduction stay fp32.
 *
 * A KV cache keeps a device copy of its keys and values (mp_kvcache.dev),
 * where the forward appends each call's rows; the host copy is brought up to
 * date lazily (cu_kv_sync, installed as mp_kvcache.dev_sync): only when the
 * host needs it, through mp_kvcache_sync, which the CPU forward calls before
 * it reads or extends the cache (the CPU fallback, mp_cuda_cpu_reason, or the
 * model moved to the CPU), as must any other reader of the host k/v. A cache
 * whose host rows are newer than the device's (the CPU extended it) is
 * uploaded whole on the next device call (kv_get). Decoding thus copies
 * nothing back per token. */
#include "cuda_internal.h"
#include "cuda_kernels.h"
#include "exec.h"
#include "intervene.h"
#include "backward.h"
#include "train.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- cuBLAS, loaded on first use ---- */

#define MP_STR2(x) #x
#define MP_STR(x) MP_STR2(x)
typedef struct {
    void *lib;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_sb)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
                              const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
                              cublasGemmAlgo_t);
    const char *(*status_string)(cublasStatus_t);
} blas_api;
static blas_api blas;
static char blas_err[512];
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* The library of the major version we were compiled against, then the
 * unversioned name, then cuBLAS 12 (PyTorch's cu12 wheels carry it): the
 * functions used here have the same C ABI in 12 and 13. */
static void blas_open(void) {
#ifdef MP_CUDA_EMU /* the tests' CPU emulation (tests/cuda_emu) defines the functions itself */
    blas = (blas_api){(void *)&blas, cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, cublasSetMathMode,
                      cublasSgemm_v2, cublasGemmEx, cublasGemmStridedBatchedEx, cublasGetStatusString};
#else
    static const char *const names[] = {"libcublas.so." MP_STR(CUBLAS_VER_MAJOR), "libcublas.so", "libcublas.so.12"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(blas_err, sizeof blas_err, "cannot load cuBLAS (%s): %s", names[0], e ? e : "not found");
        return;
    }
    struct { void **fn; const char *sym; } want[] = {
        {(void **)&blas.create, "cublasCreate_v2"},         {(void **)&blas.destroy, "cublasDestroy_v2"},
        {(void **)&blas.set_stream, "cublasSetStream_v2"},  {(void **)&blas.set_math_mode, "cublasSetMathMode"},
        {(void **)&blas.sgemm, "cublasSgemm_v2"},           {(void **)&blas.status_string, "cublasGetStatusString"},
        {(void **)&blas.gemm_ex, "cublasGemmEx"},          {(void **)&blas.gemm_sb, "cublasGemmStridedBatchedEx"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].fn = dlsym(lib, want[i].sym))) {
            snprintf(blas_err, sizeof blas_err, "cuBLAS (%s) lacks %s", names[0], want[i].sym);
            dlclose(lib);
            memset(&blas, 0, sizeof blas);
            return;
        }
    blas.lib = lib;
#endif
}

static mp_status blas_load(void) {
    pthread_once(&blas_once, blas_open);
    return blas.lib ? MP_OK : mp_error(MP_ERR_CUDA, "%s", blas_err);
}

/* Reader-only points in flight: at most RD_SLOTS, and RD_FLOATS floats on the
 * device and as many pinned (mp_cuda_reader_floats changes it; a larger tensor
 * goes the synchronous way). */
#define RD_SLOTS 16
#define RD_FLOATS ((size_t)1 << 26)

typedef struct {
    float *dev;             /* the point's tensor, snapshotted on the stream */
    float *host;            /* pinned: the copy stream's copy of dev */
    size_t cap;             /* floats of each */
    cudaEvent_t done;       /* recorded on the copy stream after the copy */
    mp_hook_info info;      /* what the readers are handed */
} rd_slot;

typedef struct {
    cudaStream_t stream;
    cublasHandle_t blas;
    float *params;          /* device: mp_config_n_params floats in mp_params order */
    mp_params p;            /* device pointers into params */
    int bf16;               /* precision bf16: the products below */
    unsigned short *pbf;    /* bf16: params rounded to bfloat16 (the same layout; the linear weights are read) */
    unsigned short *abf;    /* bf16: a product's input rounded to bfloat16 */
    size_t abf_n;
    unsigned short *gbf;    /* bf16 training: a product's output gradient rounded to bfloat16 */
    size_t gbf_n;
    float *ws;              /* device workspace of one forward call */
    size_t ws_n;            /* floats */
    int *tok;               /* device token ids */
    size_t tok_n;
    float *host;            /* pinned staging: positional tables, hook views */
    size_t host_n;          /* floats */
    int depth;              /* > 0 while a forward runs (a hook may not start another on this model) */
    /* training (cu_train_step), allocated on first use */
    mp_acts acts;           /* the activation store in device memory (model.h's layout; its rstd fields hold
                             * the norms' scales, 1 / rstd, as k_norm_scale writes them) */
    float *grads;           /* [n params] in mp_params order */
    mp_params g;            /* device pointers into grads */
    float *om, *ov;         /* AdamW's moments [n params] */
    mp_adamw *opt;          /* the optimiser whose moments om/ov hold, at step opt_step */
    long opt_step;
    int stale;              /* the host's weights and opt's moments are older than params, om, ov (cu_sync) */
    int ce_rows;            /* rows per chunk of the classifier + loss (train_head); 0: CE_FLOATS / vocab */
    int att_rows;           /* query rows per block of attn_blocked; 0: ATT_FLOATS / (B H S) */
    float *ablk;            /* the blocked training attention's P and dP [B, H, rows, <= T] each (attn_blocked) */
    size_t ablk_n;          /* floats */
    double *part;           /* the gradient norm's partial sums */
    int *tgt;               /* targets [B*T] */
    int *pos_ids;           /* learned positions: the rows grouped by t (mp_cuk_embed_groups: 3 N + 1 ints), for
                             * pos_embed's gradient */
    int pos_ng;             /* its groups (T) */
    size_t tgt_n;           /* rows both hold */
    int pos_T;              /* the T of pos_ids */
    int *tok_groups;        /* the micro-batch's rows grouped by token (mp_cuk_embed_groups), for embed's gradient */
    size_t tok_groups_n;    /* ints */
    int tok_ng;             /* its groups */
    int *hgroups;           /* host scratch of mp_cuk_embed_groups */
    size_t hgroups_n;       /* ints */
    /* reader-only hook points (every callback there a reader: captures, caches):
     * their tensors are snapshotted on the stream and copied to pinned memory
     * on the copy stream while the forward goes on; the readers get them in
     * order as the copies complete, all before the forward returns (rd_push) */
    cudaStream_t copy;      /* device -> pinned host copies of the snapshots (created on first use) */
    cudaEvent_t snap;       /* recorded on stream after a snapshot; the copy stream waits for it */
    rd_slot rd[RD_SLOTS];   /* a ring: rd_n pending from rd_head on, the rest idle (buffers kept) */
    int rd_head, rd_n;
    size_t rd_floats;       /* held by all slots (each side: device and pinned) */
    size_t rd_max;          /* their bound (mp_cuda_reader_floats; 0: RD_FLOATS) */
    float *ivsrc;           /* a C intervention's data on the device: patch source, mean, steering vector */
    size_t ivsrc_n;         /* floats */
} cu_model;

typedef struct {
    float *k, *v;           /* device [L, B, K, cap, Dh] each, as the host's (mp_kv_offset) */
    int dev_len;            /* positions 0..dev_len-1 of the device copy hold the cache's rows; -1: none (the
                             * host's are complete, kv_get uploads them) */
    int host_len;           /* positions 0..host_len-1 of the host copy equal the device's (host_len <= dev_len);
                             * the device's later rows reach the host in cu_kv_sync, when the host needs them */
    int L, K, Dh;           /* layers, kv heads, channels per head */
} cu_kv;

/* Failing calls become MP_ERR_CUDA messages that name the call. The runtime
 * keeps a failed call's error (an out-of-memory cudaMalloc's too) as its last
 * error, which every launcher returns (cudaGetLastError): reported here, it is
 * cleared, so the next kernel does not fail with it. */
#define CU(fn, args)                                                                                 \
    do {                                                                                             \
        cudaError_t e_ = fn args;                                                                    \
        if (e_ != cudaSuccess) {                                                                     \
            st = mp_error(MP_ERR_CUDA, "CUDA: %s: %s", #fn, cudaGetErrorString(e_));                \
            (void)cudaGetLastError(); /* reported: not again by the next launch's check */           \
            goto cleanup;                                                                            \
        }                                                                                            \
    } while (0)
#define CB(fn, args)                                                                                 \
    do {                                                                                             \
        cublasStatus_t e_ = fn args;                                                                 \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                           \
            st = mp_error(MP_ERR_CUDA, "cuBLAS: %s: %s", #fn, blas.status_string(e_));              \
            (void)cudaGetLastError(); /* whatever the runtime kept of it (see CU) */                  \
            goto cleanup;                                                                            \
        }                                                                                            \
    } while (0)
#define TRY(expr)                                                                                    \
    do {                                                                                             \
        if ((st = (expr)) != MP_OK) goto cleanup;                                                    \
    } while (0)

mp_status mp_cuda_probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return mp_error(MP_ERR_CUDA, "no CUDA device: %s", cudaGetErrorString(e));
    }
    if (n <= 0) return mp_error(MP_ERR_CUDA, "no CUDA device: cudaGetDeviceCount found 0 devices");
    return MP_OK;
}

/* Frees device memory (pinned host memory: host = 1) that work queued on d's
 * streams may still read or write: after that work. cudaFree's reference does
 * not promise to wait for a non-blocking stream. Buffers are freed only when
 * they grow or the model goes, so the wait costs nothing that matters. */
static void cu_free_after(cu_model *d, void *p, int host) {
    if (!p) return;
    if (d->stream) cudaStreamSynchronize(d->stream);
    if (d->copy) cudaStreamSynchronize(d->copy);
    if (host) cudaFreeHost(p);
    else cudaFree(p);
}

static void cu_free(cu_model *d) {
    if (!d) return;
    if (d->stream) cudaStreamSynchronize(d->stream);
    if (d->copy) cudaStreamSynchronize(d->copy);
    cudaFree(d->params);
    cudaFree(d->pbf);
    cudaFree(d->abf);
    cudaFree(d->gbf);
    cudaFree(d->ws);
    cudaFree(d->tok);
    cudaFree(d->acts.mem);
    cudaFree(d->grads);
    cudaFree(d->om);
    cudaFree(d->ov);
    cudaFree(d->part);
    cudaFree(d->tgt);
    cudaFree(d->pos_ids);
    cudaFree(d->tok_groups);
    free(d->hgroups);
    cudaFree(d->ablk);
    cudaFree(d->ivsrc);
    if (d->host) cudaFreeHost(d->host);
    for (int i = 0; i < RD_SLOTS; i++) {
        cudaFree(d->rd[i].dev);
        if (d->rd[i].host) cudaFreeHost(d->rd[i].host);
        if (d->rd[i].done) cudaEventDestroy(d->rd[i].done);
    }
    if (d->snap) cudaEventDestroy(d->snap);
    if (d->copy) cudaStreamDestroy(d->copy);
    if (d->blas) blas.destroy(d->blas);
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d);
}

static void cu_kv_free(void *p) {
    cu_kv *kv = p;
    if (!kv) return;
    cudaDeviceSynchronize(); /* the cache's owner has no stream of ours: whatever may still read it is done */
    cudaFree(kv->k);
    cudaFree(kv->v);
    free(kv);
}

static void cu_release(mp_model *m) {
    cu_free(m->dev);
    m->dev = NULL;
    m->dev_ops = NULL;
}

/* Grows the device buffer *p (holding *have elements of `size` bytes) to at
 * least `need` elements; its contents are not kept. */
static mp_status dev_grow(cu_model *d, void **p, size_t *have, size_t need, size_t size) {
    mp_status st = MP_OK;
    if (*have >= need) return MP_OK;
    cu_free_after(d, *p, 0);
    *p = NULL;
    *have = 0;
    CU(cudaMalloc, (p, need * size));
    *have = need;
cleanup:
    return st;
}

/* Grows the workspace / token buffer / pinned staging to at least the sizes given. */
static mp_status reserve(cu_model *d, size_t ws_n, size_t tok_n, size_t host_n) {
    mp_status st = MP_OK;
    TRY(dev_grow(d, (void **)&d->ws, &d->ws_n, ws_n, sizeof(float)));
    TRY(dev_grow(d, (void **)&d->tok, &d->tok_n, tok_n, sizeof(int)));
    if (d->host_n < host_n) {
        cu_free_after(d, d->host, 1);
        d->host = NULL;
        d->host_n = 0;
        CU(cudaMallocHost, ((void **)&d->host, host_n * sizeof(float)));
        d->host_n = host_n;
    }
cleanup:
    return st;
}

/* ---- hooks: device tensor -> pinned host -> callbacks -> device ---- */

/* Fires the oldest pending reader-only point if its copy is complete (wait:
 * after waiting for it); *fired says whether it did. */
static mp_status rd_fire_one(cu_model *d, const mp_fwd_ctx *f, int wait, int *fired) {
    mp_status st = MP_OK;
    *fired = 0;
    rd_slot *r = &d->rd[d->rd_head];
    if (wait) CU(cudaEventSynchronize, (r->done));
    else {
        cudaError_t e = cudaEventQuery(r->done);
        if (e == cudaErrorNotReady) { /* not an error, but the runtime may keep it as the last one, which the */
            (void)cudaGetLastError(); /* next launcher's cudaGetLastError would report: every launch is checked */
            return MP_OK;             /* at once, so nothing else is pending there */
        }
        if (e != cudaSuccess) {
            st = mp_error(MP_ERR_CUDA, "CUDA: cudaEventQuery: %s", cudaGetErrorString(e));
            (void)cudaGetLastError(); /* reported (see CU) */
            goto cleanup;
        }
    }
    d->rd_head = (d->rd_head + 1) % RD_SLOTS;
    d->rd_n--;
    *fired = 1;
    TRY(mp_hooks_fire(f->hs, &r->info, r->host));
cleanup:
    return st;
}

/* The pending reader-only points, in order: those whose copies are complete
 * (rd_poll), or all of them, waiting (rd_drain). */
static mp_status rd_poll(cu_model *d, const mp_fwd_ctx *f) {
    mp_status st = MP_OK;
    int fired = 1;
    while (d->rd_n > 0 && fired) TRY(rd_fire_one(d, f, 0, &fired));
cleanup:
    return st;
}
static mp_status rd_drain(cu_model *d, const mp_fwd_ctx *f) {
    mp_status st = MP_OK;
    int fired;
    while (d->rd_n > 0) TRY(rd_fire_one(d, f, 1, &fired));
cleanup:
    return st;
}
/* After a failure: the pending points are dropped once their copies are done (their buffers are reused). */
static void rd_discard(cu_model *d) {
    if (d->copy) cudaStreamSynchronize(d->copy);
    d->rd_head = d->rd_n = 0;
}

/* A reader-only point: info's tensor at dptr is snapshotted on the stream (a
 * device copy, in order with what wrote it and what overwrites it next) and
 * copied to pinned memory on the copy stream while the forward goes on;
 * rd_poll hands it to the readers when the copy is complete. *queued = 0 when
 * the tensor is over RD_FLOATS: the caller fires it the synchronous way. */
static mp_status rd_push(cu_model *d, const mp_fwd_ctx *f, const mp_hook_info *info, const float *dptr, int *queued) {
    mp_status st = MP_OK;
    const size_t n = info->numel, bound = d->rd_max ? d->rd_max : RD_FLOATS;
    *queued = 0;
    if (n > bound) return MP_OK;
    if (!d->copy) { /* the copy stream carries copies only: its priority (the highest) matters to no kernel */
        int least = 0, greatest = 0;
        CU(cudaDeviceGetStreamPriorityRange, (&least, &greatest));
        CU(cudaStreamCreateWithPriority, (&d->copy, cudaStreamNonBlocking, greatest));
        CU(cudaEventCreateWithFlags, (&d->snap, cudaEventDisableTiming));
    }
    if (d->rd_n == RD_SLOTS) {
        int fired;
        TRY(rd_fire_one(d, f, 1, &fired));
    }
    rd_slot *r = &d->rd[(d->rd_head + d->rd_n) % RD_SLOTS];
    if (!r->done) CU(cudaEventCreateWithFlags, (&r->done, cudaEventDisableTiming));
    if (r->cap < n) {
        if (d->rd_floats - r->cap + n > bound) { /* over the bound: empty the queue, free the idle buffers */
            TRY(rd_drain(d, f)); /* (r stays the free slot: the head moves to it) */
            for (int i = 0; i < RD_SLOTS; i++)
                if (&d->rd[i] != r && d->rd[i].cap) {
                    cu_free_after(d, d->rd[i].dev, 0);
                    cu_free_after(d, d->rd[i].host, 1);
                    d->rd_floats -= d->rd[i].cap;
                    d->rd[i].dev = d->rd[i].host = NULL;
                    d->rd[i].cap = 0;
                }
        }
        cu_free_after(d, r->dev, 0);
        cu_free_after(d, r->host, 1);
        d->rd_floats -= r->cap;
        r->dev = r->host = NULL;
        r->cap = 0;
        CU(cudaMalloc, ((void **)&r->dev, n * sizeof(float)));
        CU(cudaMallocHost, ((void **)&r->host, n * sizeof(float)));
        r->cap = n;
        d->rd_floats += n;
    }
    CU(cudaMemcpyAsync, (r->dev, dptr, n * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
    CU(cudaEventRecord, (d->snap, d->stream));
    CU(cudaStreamWaitEvent, (d->copy, d->snap, 0));
    CU(cudaMemcpyAsync, (r->host, r->dev, n * sizeof(float), cudaMemcpyDeviceToHost, d->copy));
    CU(cudaEventRecord, (r->done, d->copy));
    r->info = *info;
    d->rd_n++;
    *queued = 1;
    TRY(rd_poll(d, f));
cleanup:
    return st;
}

/* A point whose callbacks are all C interventions (mp_intervention_apply, at
 * most IV_MAX): the device applies them in registration order as kernels on
 * the view at dptr, which never leaves the device (*done = 1; a fault is the
 * message mp_hooks_fire would give). *done = 0: the point has other hooks. */
#define IV_MAX 8
static mp_status dev_interventions(cu_model *d, const mp_fwd_ctx *f, mp_hook_info *info, float *dptr, int *done) {
    mp_status st = MP_OK;
    mp_hook_fn fns[IV_MAX];
    void *users[IV_MAX];
    *done = 0;
    const int n = mp_hooks_at(f->hs, info->id, info->layer, fns, users, IV_MAX);
    if (n < 1 || n > IV_MAX) return MP_OK;
    for (int i = 0; i < n; i++)
        if (fns[i] != mp_intervention_apply) return MP_OK;
    *done = 1;
    const char *name = info->name = mp_hook_name(info->id, info->layer, info->namebuf, sizeof info->namebuf);
    for (int i = 0; i < n; i++) {
        mp_intervention_plan pl;
        if (mp_intervention_prepare(users[i], info, &pl)) {
            if (!mp_last_error()[0]) return mp_error(MP_ERR_HOOK, "hook at %s aborted the forward pass", name);
            mp_error_prefix(MP_ERR_HOOK, "hook at %s", name);
            return MP_ERR_HOOK;
        }
        mp_cuk_iv k = {(int)pl.kind, pl.head, pl.hax, pl.pax, pl.ndim, pl.axis, pl.npos, pl.pos0, pl.use_within,
                       (long long)pl.offset, {0}, {0}, {0}, pl.scale};
        for (int j = 0; j < 4; j++) k.s[j] = pl.s[j], k.f[j] = pl.f[j];
        memcpy(k.pos, pl.pos, sizeof k.pos);
        if (pl.nsrc) { /* in stream order: the previous intervention's kernel has read the buffer before this copy */
            TRY(dev_grow(d, (void **)&d->ivsrc, &d->ivsrc_n, pl.nsrc, sizeof(float)));
            CU(cudaMemcpyAsync, (d->ivsrc, pl.src, pl.nsrc * sizeof(float), cudaMemcpyHostToDevice, d->stream));
        }
        CU(mp_cuk_intervene, (dptr, pl.nsrc ? d->ivsrc : NULL, &k, info->numel, d->stream));
    }
cleanup:
    return st;
}

/* Fires the hooks of the view info at dptr (device): C interventions alone as
 * device kernels, readers alone from the copy stream (rd_push), anything else
 * on a host copy that is copied back, after the pending readers. */
static mp_status hook_view(cu_model *d, const mp_fwd_ctx *f, mp_hook_info *info, float *dptr) {
    mp_status st = MP_OK;
    int handled = 0;
    if (mp_hooks_readonly(f->hs, info->id, info->layer)) TRY(rd_push(d, f, info, dptr, &handled));
    else TRY(dev_interventions(d, f, info, dptr, &handled));
    if (handled) return MP_OK;
    TRY(rd_drain(d, f)); /* the points before this one reach their readers first */
    TRY(reserve(d, 0, 0, info->numel));
    CU(cudaMemcpyAsync, (d->host, dptr, info->numel * sizeof(float), cudaMemcpyDeviceToHost, d->stream));
    CU(cudaStreamSynchronize, (d->stream));
    TRY(mp_hooks_fire(f->hs, info, d->host));
    CU(cudaMemcpyAsync, (dptr, d->host, info->numel * sizeof(float), cudaMemcpyHostToDevice, d->stream));
    CU(cudaStreamSynchronize, (d->stream)); /* the staging buffer is reused by the next point */
cleanup:
    return st;
}

/* *buf (grown to n, *cap tracking its size) = x rounded to bfloat16 */
static mp_status to_bf16(cu_model *d, unsigned short **buf, size_t *cap, const float *x, size_t n) {
    mp_status st = MP_OK;
    if (*cap < n) {
        cu_free_after(d, *buf, 0);
        *buf = NULL;
        *cap = 0;
        CU(cudaMalloc, ((void **)buf, n * sizeof(unsigned short)));
        *cap = n;
    }
    CU(mp_cuk_to_bf16, (*buf, x, n, d->stream));
cleanup:
    return st;
}

/* Precision bf16: *inb = the n floats of `in` rounded to bfloat16 (in
 * d->abf), for the products that share that input (q, k and v; the MLP's
 * gate and up; the classifier's forward and backward): one rounding instead
 * of one per product. They must follow at once: every product that rounds
 * its own input (inb NULL) writes d->abf, and a hook between them could edit
 * `in`. fp32: *inb = NULL. */
static mp_status bf16_input(cu_model *d, const float *in, size_t n, const unsigned short **inb) {
    *inb = NULL;
    if (!d->bf16) return MP_OK;
    mp_status st = to_bf16(d, &d->abf, &d->abf_n, in, n);
    if (st == MP_OK) *inb = d->abf;
    return st;
}

/* out [N, OUT] = in [N, IN] @ w^T (+ bias): row-major operands read as the
 * column-major transposes cuBLAS sees (out^T = w @ in^T). bf16: inb, the
 * input already rounded (bf16_input), or NULL to round it here. */
static mp_status linear_pre(cu_model *d, float *out, const float *in, const unsigned short *inb, const float *w,
                            const float *bias, int N, int IN, int OUT) {
    mp_status st = MP_OK;
    const float one = 1.0f, zero = 0.0f;
    if (d->bf16) { /* bf16 operands (the weight's copy, the input rounded), fp32 accumulation and result */
        if (!inb) TRY(bf16_input(d, in, (size_t)N * IN, &inb));
        const unsigned short *wb = d->pbf + (w - d->params);
        CB(blas.gemm_ex, (d->blas, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, &one, wb, CUDA_R_16BF, IN, inb, CUDA_R_16BF,
                          IN, &zero, out, CUDA_R_32F, OUT, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        CB(blas.sgemm, (d->blas, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, &one, w, IN, in, IN, &zero, out, OUT));
    }
    if (bias) CU(mp_cuk_add_bias, (out, bias, N, OUT, d->stream));
cleanup:
    return st;
}
static mp_status linear(cu_model *d, float *out, const float *in, const float *w, const float *bias, int N, int IN,
                        int OUT) {
    return linear_pre(d, out, in, NULL, w, bias, N, IN, OUT);
}

/* The host copy of a KV cache brought up to date with its device copy
 * (mp_kvcache.dev_sync, called through mp_kvcache_sync by whatever reads or
 * writes the host k/v: the CPU forward continuing from the cache, a hook or
 * caller that reads it): rows host_len..min(len, dev_len)-1 of every layer
 * and sequence copied back, synchronously. The device forward writes the
 * cache only on its own stream and synchronizes it before it returns, so the
 * device rows of every completed call are final (a call in progress has not
 * yet counted its rows in len: they are not copied). Afterwards the device
 * copy counts no rows past len (dev_len <= len): a caller that rewound len
 * and writes new rows on the host makes kv_get upload them. */
static mp_status cu_kv_sync(struct mp_kvcache_s *cache) {
    mp_status st = MP_OK;
    cu_kv *kv = cache->dev;
    if (!kv || kv->dev_len < 0) return MP_OK; /* the host's rows are the only ones */
    const int upto = cache->len < kv->dev_len ? cache->len : kv->dev_len;
    if (kv->host_len < upto) {
        /* one run of rows per layer, sequence and kv head, cap positions apart: one 2-D copy each of k and v */
        const size_t at = mp_kv_offset(cache->B, kv->K, cache->cap, kv->Dh, 0, 0, 0, kv->host_len);
        const size_t run = (size_t)(upto - kv->host_len) * kv->Dh * sizeof(float);
        const size_t pitch = (size_t)cache->cap * kv->Dh * sizeof(float), runs = (size_t)kv->L * cache->B * kv->K;
        CU(cudaMemcpy2D, (cache->k + at, pitch, kv->k + at, pitch, run, runs, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy2D, (cache->v + at, pitch, kv->v + at, pitch, run, runs, cudaMemcpyDeviceToHost));
    }
    kv->host_len = upto;
    kv->dev_len = upto;
cleanup:
    return st;
}

/* The device copy of a host KV cache, created or brought up to the cache's
 * rows: kept when it holds exactly len positions (the device wrote them, the
 * host copy may lag: cu_kv_sync), else (rows written on the host by the CPU
 * forward, or len rewound) the host copy, completed first, uploaded whole. */
static mp_status kv_get(mp_kvcache *cache, const mp_config *c, cu_kv **out, cudaStream_t s) {
    mp_status st = MP_OK;
    const size_t n = (size_t)c->n_layer * cache->B * cache->cap * c->n_kv_head * c->d_head;
    cu_kv *kv = cache->dev;
    if (cache->dev && cache->dev_free != cu_kv_free)
        return mp_error(MP_ERR_ARG, "forward: this KV cache holds another backend's device copy");
    if (!kv) { /* attached to the cache only once both buffers exist */
        cu_kv *fresh = mp_calloc(1, sizeof *fresh, "the KV cache's device copy");
        if (!fresh) return MP_ERR_NOMEM;
        cudaError_t e = cudaMalloc((void **)&fresh->k, n * sizeof(float));
        if (e == cudaSuccess) e = cudaMalloc((void **)&fresh->v, n * sizeof(float));
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* reported below (see CU) */
            cu_kv_free(fresh);
            return mp_error(MP_ERR_CUDA, "CUDA: cudaMalloc: %s (the KV cache's device copy, 2 x %zu floats)",
                            cudaGetErrorString(e), n);
        }
        kv = fresh;
        kv->dev_len = kv->host_len = 0; /* no rows yet: a cache the CPU filled is uploaded below */
        kv->L = c->n_layer;
        kv->K = c->n_kv_head;
        kv->Dh = c->d_head;
        cache->dev = kv;
        cache->dev_free = cu_kv_free;
        cache->dev_sync = cu_kv_sync;
    }
    if (kv->dev_len != cache->len) { /* filled elsewhere (the CPU) or rewound: take the host's rows */
        TRY(cu_kv_sync(cache));  /* the device's rows the host lacks, first */
        kv->dev_len = -1;        /* until the upload is complete */
        CU(cudaMemcpyAsync, (kv->k, cache->k, n * sizeof(float), cudaMemcpyHostToDevice, s));
        CU(cudaMemcpyAsync, (kv->v, cache->v, n * sizeof(float), cudaMemcpyHostToDevice, s));
        CU(cudaStreamSynchronize, (s));
        kv->dev_len = kv->host_len = cache->len;
    }
    *out = kv;
cleanup:
    return st;
}

/* C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i < batch (cuBLAS's strided
 * batch, column-major, fp32 operands): the blocked attention's products. TF32
 * in precision bf16 (whose products are rounded further anyway), fp32 else. */
static mp_status gemm_sb(cu_model *d, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                         const float *A, int lda, long long sa, const float *B, int ldb, long long sb, float beta,
                         float *C, int ldc, long long sc, int batch) {
    mp_status st = MP_OK;
    CB(blas.gemm_sb, (d->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, &beta, C,
                      CUDA_R_32F, ldc, sc, batch, d->bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
cleanup:
    return st;
}

/* The materialised path's products for query rows q0..q0+rows-1 (att [B, H,
 * rows, S], S = pos0 + T), batched over the kv heads per sequence and head
 * group member as attn_blocked's: the scaled scores of keys 0..Tk-1 (Tk =
 * pos0+q0+rows), then -inf past each row's last key and before its sliding
 * window (mp_cuk_attn_mask; window 0: none), what hook_attn_scores shows. */
static mp_status pattern_scores(cu_model *d, float *att, const float *q, const mp_kv_view *kv, int B, int T, int H,
                                int K, int Dh, int pos0, float scale, int q0, int rows, int window) {
    mp_status st = MP_OK;
    const int group = H / K, HD = H * Dh, S = pos0 + T, Tk = pos0 + q0 + rows;
    const long long sP = (long long)group * rows * S;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < group; g++)
            TRY(gemm_sb(d, CUBLAS_OP_T, CUBLAS_OP_N, Tk, rows, Dh, scale, kv->k + b * kv->bs, (int)kv->rs,
                        (long long)kv->hs,
                        q + ((size_t)b * T + q0) * HD + (size_t)g * Dh, HD, (long long)group * Dh, 0.0f,
                        att + ((size_t)b * H + g) * rows * S, S, sP, K));
    CU(mp_cuk_attn_mask, (att, B, H, S, pos0, q0, rows, window, d->stream));
cleanup:
    return st;
}

/* z rows q0.. = pattern @ V over the keys model.c's product reads: its
 * sub-blocks of 64 rows (r0..) read keys 0..pos0+q0+r0+rr-1 (entries past a
 * row's own last key are 0 unless a pattern hook wrote there; then both
 * devices use them alike). */
static mp_status pattern_pv(cu_model *d, float *z, const float *att, const mp_kv_view *kv, int B, int T, int H,
                            int K, int Dh, int pos0, int q0, int rows) {
    mp_status st = MP_OK;
    const int group = H / K, HD = H * Dh, S = pos0 + T;
    const long long sP = (long long)group * rows * S;
    for (int r0 = 0; r0 < rows; r0 += 64) {
        const int rr = rows - r0 < 64 ? rows - r0 : 64, lim = pos0 + q0 + r0 + rr;
        for (int b = 0; b < B; b++)
            for (int g = 0; g < group; g++)
                TRY(gemm_sb(d, CUBLAS_OP_N, CUBLAS_OP_N, Dh, rr, lim, 1.0f, kv->v + b * kv->bs, (int)kv->rs,
                            (long long)kv->hs,
                            att + (((size_t)b * H + g) * rows + r0) * S, S, sP, 0.0f,
                            z + ((size_t)b * T + q0 + r0) * HD + (size_t)g * Dh, HD, (long long)group * Dh, K));
    }
cleanup:
    return st;
}

/* P and dP of one block of query rows: at most this many floats each (256 MiB). */
#define ATT_FLOATS ((size_t)1 << 26)
/* Calls of at least this many query rows run the blocked attention (shorter
 * ones, decoding above all, the decode kernel: a block per query row, its
 * warps on slices of the keys). */
#define BLOCKED_MIN_T 16

/* Causal grouped-query attention without a stored pattern, by blocks of R
 * query rows (R x S x B x H <= ATT_FLOATS, S = pos0 + T keys, at least one
 * row): block rows q0..q0+rows-1 (positions pos0+q0..) see keys 0..Tk-1, Tk =
 * pos0+q0+rows, and every product runs in cuBLAS, batched over the kv heads
 * for each sequence and each member of a head group (a query head h =
 * kh*group + g reads kv head kh). Keys and values: kv's (exec.h: a KV
 * cache's, or the call's own rows; training's gradients dk, dv are [B,T,K*Dh]
 * as the call's own keys).
 * Forward (z non-NULL): P = softmax(scale Q K^T) of the block (0 past each
 * row's key; with lse, training, the row's log-sum-exp to lse), z rows = P V.
 * Backward (dq non-NULL; training: pos0 0): P recomputed from lse, dP = dz
 * V^T, dS = scale P (dP - rowsum(P dP)) (the rowsum from the pattern itself,
 * so an edit of z by a hook does not enter it, as in the CPU's backward), dq
 * += dS K, dk += dS^T Q, dv += P^T dz. q, z [B,T,H,Dh]; lse [B,H,T]. With a
 * sliding window (window > 0) P is 0 before each row's window, both ways (the
 * products still run over keys 0..Tk-1). */
static mp_status attn_blocked(cu_model *d, float *z, float *lse, float *dq, float *dk, float *dv, const float *dz,
                              const float *q, const mp_kv_view *kv, int B, int T, int H, int K, int Dh, int pos0,
                              int window) {
    mp_status st = MP_OK;
    const cudaStream_t s = d->stream;
    const int group = H / K, HD = H * Dh, KD = K * Dh, RS = (int)kv->rs;
    const long long HS = (long long)kv->hs;
    const float scale = 1.0f / sqrtf((float)Dh);
    const size_t per_row = (size_t)B * H * (pos0 + T);
    const size_t want = d->att_rows > 0 ? (size_t)d->att_rows : ATT_FLOATS / per_row;
    const int R = want < 1 ? 1 : want > (size_t)T ? T : (int)want;
    TRY(dev_grow(d, (void **)&d->ablk, &d->ablk_n, (dq ? 2 : 1) * per_row * (size_t)R, sizeof(float)));
    const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
    for (int q0 = 0; q0 < T; q0 += R) {
        const int rows = T - q0 < R ? T - q0 : R, Tk = pos0 + q0 + rows;
        float *P = d->ablk, *dP = d->ablk + (size_t)B * H * rows * Tk;
        const long long sP = (long long)group * rows * Tk; /* from kv head kh to kh+1 within a group member */
        for (int b = 0; b < B; b++)
            for (int g = 0; g < group; g++) {
                const float *kb = kv->k + b * kv->bs, *qb = q + ((size_t)b * T + q0) * HD + (size_t)g * Dh;
                float *Pb = P + ((size_t)b * H + g) * rows * Tk;
                /* scores: (P^T = K Q^T) column-major [Tk, rows] */
                TRY(gemm_sb(d, T_, N_, Tk, rows, Dh, scale, kb, RS, HS, qb, HD, (long long)group * Dh, 0.0f, Pb, Tk,
                            sP, K));
            }
        if (z) {
            CU(mp_cuk_attn_softmax, (P, lse, B, H, Tk, T, pos0, q0, rows, window, s));
        } else {
            CU(mp_cuk_attn_recompute, (P, lse, B, H, T, Tk, q0, rows, window, s));
            for (int b = 0; b < B; b++)
                for (int g = 0; g < group; g++) {
                    const float *vb = kv->v + b * kv->bs, *dzb = dz + ((size_t)b * T + q0) * HD + (size_t)g * Dh;
                    float *dPb = dP + ((size_t)b * H + g) * rows * Tk;
                    TRY(gemm_sb(d, T_, N_, Tk, rows, Dh, 1.0f, vb, RS, HS, dzb, HD, (long long)group * Dh, 0.0f, dPb,
                                Tk, sP, K));
                }
            CU(mp_cuk_attn_softmax_bwd, (dP, P, B, H, (size_t)rows * Tk, Tk, Tk, q0, rows, scale, s));
        }
        for (int b = 0; b < B; b++)
            for (int g = 0; g < group; g++) {
                const size_t qo = ((size_t)b * T + q0) * HD + (size_t)g * Dh, ko = b * kv->bs;
                const size_t go = (size_t)b * T * KD; /* dk, dv [B,T,K*Dh] */
                const float *Pb = P + ((size_t)b * H + g) * rows * Tk, *dSb = dP + ((size_t)b * H + g) * rows * Tk;
                const long long sq = (long long)group * Dh;
                if (z) { /* z^T = V^T P^T */
                    TRY(gemm_sb(d, N_, N_, Dh, rows, Tk, 1.0f, kv->v + ko, RS, HS, Pb, Tk, sP, 0.0f, z + qo, HD, sq, K));
                    continue;
                }
                /* dq^T += K^T dS^T; dk^T += Q^T dS; dv^T += dz^T P */
                TRY(gemm_sb(d, N_, N_, Dh, rows, Tk, 1.0f, kv->k + ko, RS, HS, dSb, Tk, sP, 1.0f, dq + qo, HD, sq, K));
                TRY(gemm_sb(d, N_, T_, Dh, Tk, rows, 1.0f, q + qo, HD, sq, dSb, Tk, sP, 1.0f, dk + go, KD, Dh, K));
                TRY(gemm_sb(d, N_, T_, Dh, Tk, rows, 1.0f, dz + qo, HD, sq, Pb, Tk, sP, 1.0f, dv + go, KD, Dh, K));
            }
    }
cleanup:
    return st;
}

/* The attention backward over a stored pattern att [B,H,T,T] (a hook showed
 * it), ops_backward.c mp_attention_backward's products in cuBLAS, by
 * sub-blocks of 64 query rows r0.. over keys 0..kk-1 (kk = r0 + rows): dP = dz
 * V^T and dv += P^T dz (the pattern's entries up to kk, as the CPU reads
 * them), dS = scale P (dP - rowsum) on keys j <= i and 0 past them (into
 * datt), dq += dS K, dk += dS^T Q. Batched as attn_blocked's. */
static mp_status attn_stored_bwd(cu_model *d, float *dq, float *dk, float *dv, float *datt, const float *dz,
                                 const float *q, const float *k, const float *v, const float *att, int B, int T, int H,
                                 int K, int Dh) {
    mp_status st = MP_OK;
    const int group = H / K, HD = H * Dh, KD = K * Dh;
    const float scale = 1.0f / sqrtf((float)Dh);
    const long long sTT = (long long)group * T * T, sq = (long long)group * Dh;
    const cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;
    for (int r0 = 0; r0 < T; r0 += 64) {
        const int rr = T - r0 < 64 ? T - r0 : 64, kk = r0 + rr;
        for (int pass = 0; pass < 2; pass++) {
            if (pass) CU(mp_cuk_attn_softmax_bwd, (datt + (size_t)r0 * T, att + (size_t)r0 * T, B, H, (size_t)T * T, T,
                                                   kk, r0, rr, scale, d->stream));
            for (int b = 0; b < B; b++)
                for (int g = 0; g < group; g++) {
                    const size_t bh = ((size_t)b * H + g) * T * T + (size_t)r0 * T;
                    const size_t qo = ((size_t)b * T + r0) * HD + (size_t)g * Dh, ko = (size_t)b * T * KD;
                    if (!pass) { /* dP^T = V dz^T; dv^T += dz^T P */
                        TRY(gemm_sb(d, T_, N_, kk, rr, Dh, 1.0f, v + ko, KD, Dh, dz + qo, HD, sq, 0.0f, datt + bh, T,
                                    sTT, K));
                        TRY(gemm_sb(d, N_, T_, Dh, kk, rr, 1.0f, dz + qo, HD, sq, att + bh, T, sTT, 1.0f, dv + ko, KD,
                                    Dh, K));
                    } else { /* dq^T += K^T dS^T; dk^T += Q^T dS */
                        TRY(gemm_sb(d, N_, N_, Dh, rr, kk, 1.0f, k + ko, KD, Dh, datt + bh, T, sTT, 1.0f, dq + qo, HD,
                                    sq, K));
                        TRY(gemm_sb(d, N_, T_, Dh, kk, rr, 1.0f, q + qo, HD, sq, datt + bh, T, sTT, 1.0f, dk + ko, KD,
                                    Dh, K));
                    }
                }
        }
    }
cleanup:
    return st;
}

/* ---- the forward on the device: the op table the walk runs (exec.h) ---- */

/* The device's state of one forward call, handed to its ops (mp_exec.dev). */
typedef struct {
    cu_model *d;
    const mp_acts *A;       /* training: the device store, or NULL */
    mp_kvcache *cache;      /* or NULL */
    cu_kv *kv;              /* the cache's device copy */
    const float *cos_t, *sin_t, *q_scale; /* the positional tables (rot), q_scale NULL without a query scale */
    const float *cos_l, *sin_l; /* the windowed layers' own (rope_local_theta: mp_pos_local), or NULL */
    int rot;                /* the positional scheme rotates q and k */
    float *sc;              /* [2N] a norm's scale and mean outside training (hook_scale) */
    float *dlog;            /* logits [N, V], or [B, V] then the last rows [B, D] */
} cu_fwd;

#define CUF(e) ((cu_fwd *)(e)->dev)

/* Fires the hooks of a view on the device (hook_view). */
static mp_status cu_view(const mp_exec *e, mp_hook_info *info, float *data) {
    return hook_view(CUF(e)->d, &e->f, info, data);
}

static mp_status cu_embed(const mp_exec *e, float *x, const int *tokens) {
    mp_status st = MP_OK;
    cu_model *d = CUF(e)->d;
    const int N = e->f.B * e->f.T;
    CU(cudaMemcpyAsync, (d->tok, tokens, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, d->stream));
    CU(mp_cuk_embed, (x, d->tok, d->p.embed, N, e->f.c->d_model, d->stream));
    if (e->f.c->embed_scale) /* Gemma: sqrt(d_model) in float32, as the CPU's */
        CU(mp_cuk_scale, (x, (size_t)N * e->f.c->d_model, sqrtf((float)e->f.c->d_model), d->stream));
cleanup:
    return st;
}

/* add: x += rows pos0.. of the table in each sequence; else x = them */
static mp_status cu_learned_pos(const mp_exec *e, float *x, int add) {
    mp_status st = MP_OK;
    cu_model *d = CUF(e)->d;
    const int B = e->f.B, T = e->f.T, D = e->f.c->d_model, pos0 = e->f.pos0;
    if (add) {
        CU(mp_cuk_add_pos, (x, d->p.pos_embed, B, T, D, pos0, d->stream));
    } else {
        for (int bb = 0; bb < B; bb++)
            CU(cudaMemcpyAsync, (x + (size_t)bb * T * D, d->p.pos_embed + (size_t)pos0 * D,
                                 (size_t)T * D * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
    }
cleanup:
    return st;
}

/* The configured norm of x into out; with its scale point (sid, l) active, or
 * in training (rstd given: the scale and mean are kept there for the
 * backward; the store's rstd slots hold the scale, 1 / rstd), in two steps
 * around it (as fwd_hooks.c mp_fwd_norm): the edited scale normalizes. */
static mp_status cu_norm(const mp_exec *e, mp_hook_id sid, int l, float *out, float *mean, float *rstd,
                         const float *x) {
    mp_status st = MP_OK;
    cu_fwd *u = CUF(e);
    cu_model *d = u->d;
    const mp_config *c = e->f.c;
    const int N = e->f.B * e->f.T, D = c->d_model, ln = c->norm == MP_NORM_LAYER;
    const float *w, *b;
    mp_exec_norm_of(c, &d->p, sid, l, &w, &b);
    if (!rstd && !mp_hooks_active(e->f.hs, sid, l)) {
        CU(mp_cuk_norm, (out, x, w, b, N, D, c->norm_eps, ln, d->stream));
        return MP_OK;
    }
    float *scale = rstd ? rstd : u->sc, *mu = rstd ? mean : u->sc + N;
    CU(mp_cuk_norm_scale, (scale, mu, x, N, D, c->norm_eps, ln, d->stream));
    TRY(mp_exec_fire(e, sid, l, scale));
    CU(mp_cuk_norm_apply, (out, x, mu, scale, w, b, N, D, ln, d->stream));
cleanup:
    return st;
}

/* The q/k norm (exec.h) by the norm kernels over its rows (N*nh rows of Dh
 * sharing the weight, or N rows of nh*Dh: mp_exec_qk_norm_of), in place; in
 * training the input is kept in x_in and each row's scale (1 / rstd, as
 * cu_norm's store) in rstd for the backward. */
static mp_status cu_qk_norm(const mp_exec *e, mp_hook_id id, int l, float *x, float *x_in, float *rstd) {
    mp_status st = MP_OK;
    cu_model *d = CUF(e)->d;
    const mp_config *c = e->f.c;
    const float *w;
    int rows, width;
    mp_exec_qk_norm_of(c, &d->p, id, l, e->f.B * e->f.T, &w, &rows, &width);
    if (!x_in) { /* one block per row reads the row before it writes it: in place is safe */
        CU(mp_cuk_norm, (x, x, w, NULL, rows, width, c->norm_eps, 0, d->stream));
        return MP_OK;
    }
    CU(cudaMemcpyAsync, (x_in, x, (size_t)rows * width * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
    CU(mp_cuk_norm_scale, (rstd, NULL, x_in, rows, width, c->norm_eps, 0, d->stream));
    CU(mp_cuk_norm_apply, (x, x_in, NULL, rstd, w, NULL, rows, width, 0, d->stream));
cleanup:
    return st;
}

static mp_status cu_linear(const mp_exec *e, mp_exec_weight w, int l, float *out, const float *in, int rows) {
    cu_model *d = CUF(e)->d;
    const float *W, *bias;
    int IN, OUT;
    mp_exec_weight_of(e->f.c, &d->p, w, l, &W, &bias, &IN, &OUT);
    return linear(d, out, in, W, bias, rows, IN, OUT);
}

/* bf16: the shared input rounded once for all n products (bf16_input) */
static mp_status cu_linears(const mp_exec *e, int n, const mp_exec_weight *w, int l, float *const *out,
                            const float *in, int rows) {
    mp_status st = MP_OK;
    cu_model *d = CUF(e)->d;
    const float *W, *bias;
    int IN, OUT;
    const unsigned short *inb;
    mp_exec_weight_of(e->f.c, &d->p, w[0], l, &W, &bias, &IN, &OUT);
    TRY(bf16_input(d, in, (size_t)rows * IN, &inb));
    for (int i = 0; i < n; i++) {
        mp_exec_weight_of(e->f.c, &d->p, w[i], l, &W, &bias, &IN, &OUT);
        TRY(linear_pre(d, out[i], in, inb, W, bias, rows, IN, OUT));
    }
cleanup:
    return st;
}

static mp_status cu_pos_apply(const mp_exec *e, int l, float *q, float *k) {
    mp_status st = MP_OK;
    const cu_fwd *u = CUF(e);
    const mp_config *c = e->f.c;
    if (!u->rot) return MP_OK;
    const int loc = mp_pos_local(c, l);
    const float *cs = loc ? u->cos_l : u->cos_t, *sn = loc ? u->sin_l : u->sin_t;
    CU(mp_cuk_rope, (q, cs, sn, u->q_scale, e->f.B, e->f.T, c->n_head, c->d_head, u->d->stream));
    CU(mp_cuk_rope, (k, cs, sn, NULL, e->f.B, e->f.T, c->n_kv_head, c->d_head, u->d->stream));
cleanup:
    return st;
}

/* this call's rows into the device cache (the host's follows lazily: cu_kv_sync) */
static mp_status cu_kv_append(const mp_exec *e, int l, const float *k, const float *v, mp_kv_view *kv) {
    mp_status st = MP_OK;
    const cu_fwd *u = CUF(e);
    const int B = e->f.B, K = e->f.c->n_kv_head, Dh = e->f.c->d_head, cap = u->cache->cap;
    const size_t at = mp_kv_offset(B, K, cap, Dh, l, 0, 0, 0);
    CU(mp_cuk_kv_append, (u->kv->k + at, u->kv->v + at, k, v, B, e->f.T, K, Dh, cap, e->f.pos0, u->d->stream));
    *kv = mp_kv_view_cache(u->kv->k, u->kv->v, l, B, K, cap, Dh);
cleanup:
    return st;
}

/* Where a hook shows the scores or the pattern, or training stores it: the
 * pattern by blocks of qb query rows, as on the CPU. Training without it: the
 * rows' log-sum-exp, from which the backward recomputes it. Prefill: the
 * blocked products in cuBLAS. Decoding and short calls: a block per query row,
 * the keys split across its warps. */
static mp_status cu_attention(const mp_exec *e, int l, const mp_layer_acts *a, const mp_kv_view *kv, int qb) {
    mp_status st = MP_OK;
    const cu_fwd *u = CUF(e);
    cu_model *d = u->d;
    const mp_fwd_ctx *f = &e->f;
    const mp_config *c = f->c;
    const int B = f->B, T = f->T, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, pos0 = f->pos0, S = pos0 + T;
    const float scale = mp_attn_scale(c);
    const int tr = u->A != NULL, W = mp_config_window(c, l); /* the layer's sliding window, 0: none */
    const int show = mp_hooks_active(f->hs, MP_HOOK_ATTN_SCORES, l) || mp_hooks_active(f->hs, MP_HOOK_PATTERN, l);
    /* Gemma 2's soft cap or query scale: the materialised path (the fused kernels know neither) */
    const int gemma2 = c->attn_softcap > 0.0f || c->query_pre_attn_scalar > 0.0f;
    if (tr && gemma2)
        return mp_error(MP_ERR_ARG, "train step: the cuda device does not train Gemma 2's attention (soft cap, query "
                        "scale) yet; train on the CPU (m:to(\"cpu\"))");
    if (tr && !a->att && show)
        return mp_error(MP_ERR_ARG, "train step: layer %d's scores or pattern hook needs a store with the pattern", l);
    if ((tr && a->att) || show || gemma2) {
        for (int q0 = 0; q0 < T; q0 += qb) {
            const int rows = T - q0 < qb ? T - q0 : qb;
            TRY(pattern_scores(d, a->att, a->q, kv, B, T, H, K, Dh, pos0, scale, q0, rows, W));
            if (c->attn_softcap > 0.0f) /* before the mask: its -inf stay */
                CU(mp_cuk_softcap, (a->att, (size_t)B * H * rows * S, c->attn_softcap, d->stream));
            TRY(mp_exec_fire_block(e, MP_HOOK_ATTN_SCORES, l, q0, rows, a->att));
            CU(mp_cuk_attn_softmax, (a->att, NULL, B, H, S, T, pos0, q0, rows, W, d->stream));
            TRY(mp_exec_fire_block(e, MP_HOOK_PATTERN, l, q0, rows, a->att));
            TRY(pattern_pv(d, a->z, a->att, kv, B, T, H, K, Dh, pos0, q0, rows));
        }
    } else if (tr) {
        TRY(attn_blocked(d, a->z, u->A->lse + (size_t)l * B * H * T, NULL, NULL, NULL, NULL, a->q, kv, B, T, H, K, Dh,
                         0, W));
    } else if (T >= BLOCKED_MIN_T) {
        TRY(attn_blocked(d, a->z, NULL, NULL, NULL, NULL, NULL, a->q, kv, B, T, H, K, Dh, pos0, W));
    } else {
        CU(mp_cuk_attn_flash, (a->z, a->q, kv->k, kv->v, B, T, H, K, Dh, pos0, kv->bs, kv->hs, kv->rs, scale, W,
                               d->stream));
    }
cleanup:
    return st;
}

static mp_status cu_act(const mp_exec *e, float *post, const float *pre, const float *up) {
    mp_status st = MP_OK;
    const mp_config *c = e->f.c;
    const size_t n = (size_t)e->f.B * e->f.T * c->d_mlp;
    if (c->mlp == MP_MLP_SWIGLU && c->gelu_tanh) CU(mp_cuk_geglu, (post, pre, up, n, CUF(e)->d->stream));
    else if (c->mlp == MP_MLP_SWIGLU) CU(mp_cuk_swiglu, (post, pre, up, n, CUF(e)->d->stream));
    else CU(mp_cuk_gelu, (post, pre, n, c->gelu_tanh, CUF(e)->d->stream));
cleanup:
    return st;
}

static mp_status cu_copy(const mp_exec *e, float *dst, const float *src, size_t n) {
    mp_status st = MP_OK;
    CU(cudaMemcpyAsync, (dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, CUF(e)->d->stream));
cleanup:
    return st;
}

static mp_status cu_add(const mp_exec *e, float *x, const float *y, size_t n) {
    mp_status st = MP_OK;
    CU(mp_cuk_add, (x, y, n, CUF(e)->d->stream));
cleanup:
    return st;
}

/* the logits on the device (dlog), copied to the caller's host buffer on the stream (forward_dev waits) */
static mp_status cu_head(const mp_exec *e, const float *xn, mp_logits_mode mode, float *logits) {
    mp_status st = MP_OK;
    const cu_fwd *u = CUF(e);
    const cudaStream_t s = u->d->stream;
    const int B = e->f.B, T = e->f.T, D = e->f.c->d_model, V = e->f.c->vocab;
    const float cap = e->f.c->final_softcap; /* Gemma 2: logits = cap tanh(logits / cap) */
    if (mode == MP_LOGITS_ALL) {
        TRY(cu_linear(e, MP_EXEC_UNEMBED, -1, u->dlog, xn, B * T));
        if (cap > 0.0f) CU(mp_cuk_softcap, (u->dlog, (size_t)B * T * V, cap, s));
        CU(cudaMemcpyAsync, (logits, u->dlog, (size_t)B * T * V * sizeof(float), cudaMemcpyDeviceToHost, s));
        return MP_OK;
    }
    float *last = u->dlog + (size_t)B * V;
    for (int bb = 0; bb < B; bb++)
        CU(cudaMemcpyAsync, (last + (size_t)bb * D, xn + ((size_t)bb * T + T - 1) * D, (size_t)D * sizeof(float),
                             cudaMemcpyDeviceToDevice, s));
    TRY(cu_linear(e, MP_EXEC_UNEMBED, -1, u->dlog, last, B));
    if (cap > 0.0f) CU(mp_cuk_softcap, (u->dlog, (size_t)B * V, cap, s));
    CU(cudaMemcpyAsync, (logits, u->dlog, (size_t)B * V * sizeof(float), cudaMemcpyDeviceToHost, s));
cleanup:
    return st;
}

/* The device's op table. The per-head q/k/v inputs and attn.hook_result have
 * no device path: mp_cuda_cpu_reason sends calls that hook them to the CPU. */
static const mp_bwd_ops cu_bwd_ops; /* below, with the training step */
static const mp_exec_ops cu_exec = {
    .version = MP_EXEC_OPS_VERSION, .name = "cuda", .device = MP_DEVICE_CUDA,
    .view = cu_view, .embed = cu_embed, .learned_pos = cu_learned_pos, .norm = cu_norm,
    .linear = cu_linear, .linears = cu_linears, .pos_apply = cu_pos_apply, .kv_append = cu_kv_append,
    .attention = cu_attention, .act = cu_act, .copy = cu_copy, .add = cu_add, .head = cu_head,
    .qk_norm = cu_qk_norm, .split_qkv = NULL, .result = NULL, .bwd = &cu_bwd_ops};

/* The forward on the device: its buffers, then the walk (exec.c) over cu_exec.
 * With A (a device activation store of B x T; training: no cache, no logits
 * here: train_head computes them with the loss) every activation the backward
 * reads is kept there, as model.c keeps it in its training mode: each layer's
 * residual entering it, after attention and after the MLP, the norms'
 * outputs, scales and means, rotated q and k, v, the full pattern
 * (materialised in one block of T rows), z, the MLP's pre-activation, up
 * projection and activation; hooks fire on (and edit) the stored tensors. */
static mp_status forward_dev(const mp_model *m, const int *tokens, int B, int T, const mp_forward_params *fp,
                             float *logits, const mp_acts *A) {
    cu_model *d = m->dev;
    if (d->depth > 0)
        return mp_error(MP_ERR_ARG, "forward: a model on the cuda device cannot run a forward pass from inside one "
                        "of its own hooks");
    mp_status st = MP_OK;
    d->depth++;
    const mp_config *c = &m->cfg;
    const cudaStream_t s = d->stream;
    const int D = c->d_model, H = c->n_head, K = c->n_kv_head, Dh = c->d_head, V = c->vocab;
    const int M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp, HD = H * Dh, KD = K * Dh, N = B * T;
    const int half = Dh / 2;
    mp_kvcache *cache = fp->cache;
    const int pos0 = cache ? cache->len : 0, S = pos0 + T;
    const int tr = A != NULL;
    const int qb = tr ? T : fp->q_block > 0 ? (fp->q_block < T ? fp->q_block : T) : (T < 64 ? T : 64);
    cu_fwd u = {d, A, cache, NULL, NULL, NULL, NULL, NULL, NULL, mp_pos_rotates(c), NULL, NULL};
    const mp_exec e = {&cu_exec, &u, {c, fp->hooks, B, T, pos0, NULL, NULL}};
    const mp_fwd_ctx *f = &e.f;

    int show_any = 0; /* some layer's scores/pattern hook: that layer materialises its pattern blocks */
    for (int l = 0; l < c->n_layer && !tr; l++)
        show_any |= mp_hooks_active(f->hs, MP_HOOK_ATTN_SCORES, l) || mp_hooks_active(f->hs, MP_HOOK_PATTERN, l);
    show_any |= !tr && (c->attn_softcap > 0.0f || c->query_pre_attn_scalar > 0.0f); /* cu_attention's Gemma 2 path */
    /* the workspace, in order */
    const size_t n_x = (size_t)N * D, n_q = (size_t)N * HD, n_k = (size_t)N * KD, n_h = (size_t)N * M;
    const size_t n_up = c->mlp == MP_MLP_SWIGLU ? n_h : 0, n_att = show_any ? (size_t)B * H * qb * S : 0;
    const size_t n_pos = mp_pos_tables_floats(c, (size_t)T); /* + the windowed layers' own (rope_local_theta) */
    const size_t n_log = tr ? 0 : fp->logits == MP_LOGITS_ALL ? (size_t)N * V
                       : fp->logits == MP_LOGITS_LAST ? (size_t)B * V + (size_t)B * D : 0;
    const size_t n_sc = 2 * (size_t)N; /* a norm's scale and mean (hook_scale) */
    const size_t n_par = c->parallel_attn ? n_x : 0; /* a parallel block's resid_mid, apart from resid_pre */
    const size_t n_raw = c->post_norms && !tr ? n_x : 0; /* Gemma 2: a branch's output before its post-norm */
    const size_t total = 4 * n_x + 2 * n_q + 2 * n_k + n_h + n_up + n_att + n_pos + n_log + n_sc + n_par + n_raw;
    TRY(reserve(d, total, (size_t)N, n_pos));
    /* inference: every layer in the same buffers (the residual updated in place, one norm output, the
     * activation written over the gate); training: the store's */
    mp_exec_bufs b = {.tokens = tokens, .A = A, .cache = cache != NULL, .qb = qb,
                      .logits_mode = tr ? MP_LOGITS_NONE : fp->logits, .logits = logits};
    float *cur = d->ws;
    b.scratch.resid_in = b.scratch.resid_mid = b.scratch.resid_out = cur; cur += n_x;
    b.scratch.ln1 = b.scratch.ln2 = cur; cur += n_x;
    b.out = cur; cur += n_x;
    b.buf = cur; cur += n_x;              /* hook_pos_embed's rows, hook_mlp_in's copy */
    u.sc = cur; cur += n_sc;
    b.scratch.q = cur; cur += n_q;
    b.scratch.z = cur; cur += n_q;
    b.scratch.k = cur; cur += n_k;
    b.scratch.v = cur; cur += n_k;
    b.scratch.pre = b.scratch.post = cur; cur += n_h;
    b.scratch.up = cur; cur += n_up;
    b.scratch.att = cur; cur += n_att;    /* one block of pattern rows [B, H, qb, S] */
    if (n_par) b.scratch.resid_mid = cur, cur += n_par;
    b.scratch.attn_raw = b.scratch.mlp_raw = n_raw ? cur : NULL;
    cur += n_raw;
    float *cos_t = tr ? A->pos_tab : cur; /* training: the backward rotates back by the same tables */
    cur += n_pos;
    u.dlog = cur;                         /* logits [N, V], or [B, V] then the last rows [B, D] */
    u.cos_t = cos_t;
    u.sin_t = cos_t + (size_t)T * half;
    if (u.rot) { /* the CPU's own tables (PI / NTK / YaRN / rope_id included), uploaded */
        float *h = d->host;
        const int has_scale = mp_pos_tables_all(c, h, pos0, T);
        u.q_scale = has_scale ? cos_t + 2 * (size_t)T * half : NULL;
        if (mp_pos_has_local(c)) {
            u.cos_l = cos_t + 2 * (size_t)T * half + (size_t)T;
            u.sin_l = u.cos_l + (size_t)T * half;
        }
        CU(cudaMemcpyAsync, (cos_t, h, n_pos * sizeof(float), cudaMemcpyHostToDevice, s));
        CU(cudaStreamSynchronize, (s)); /* the staging buffer is reused by hooks */
    }
    if (cache) TRY(kv_get(cache, c, &u.kv, s));

    TRY(mp_block_forward(&e, &b));
    CU(cudaStreamSynchronize, (s));
    TRY(rd_drain(d, f)); /* the reader-only points still in flight */
    if (cache) {
        cache->len += T;
        u.kv->dev_len = cache->len; /* the host copy still ends at host_len */
    }
cleanup:
    if (st != MP_OK) {
        cudaStreamSynchronize(s); /* nothing of this call may still be running */
        rd_discard(d);
        /* kv: only rows from len on were written, which len does not count: dev_len and host_len stay */
    }
    d->depth--;
    return st;
}

static mp_status cu_forward(const mp_model *m, const int *tokens, int B, int T, const void *fpv, float *logits) {
    const mp_forward_params *fp = fpv;
    if (fp->acts)
        return mp_error(MP_ERR_ARG, "forward: a model on the cuda device trains through mp_train_step (m:train, "
                        "m:train_step), which keeps its activations on the device");
    return forward_dev(m, tokens, B, T, fp, logits, NULL);
}

/* ---- training: the step of train.c on the device ---- */

/* din [N,IN] += dout [N,OUT] @ w [OUT,IN] (din may be NULL); dw [OUT,IN] +=
 * dout^T @ in [N,IN]; dbias [OUT] += column sums of dout (may be NULL): ops_backward.c
 * mp_matmul_backward, row-major operands read as cuBLAS's column-major transposes. */
static mp_status linear_bwd_pre(cu_model *d, float *din, float *dw, float *dbias, const float *dout, const float *in,
                                const unsigned short *inb, const float *w, int N, int IN, int OUT) {
    mp_status st = MP_OK;
    const float one = 1.0f;
    if (d->bf16) { /* bf16 operands (dout and in rounded, the weight's copy), fp32 accumulation into fp32 */
        TRY(to_bf16(d, &d->gbf, &d->gbf_n, dout, (size_t)N * OUT));
        if (din) {
            const unsigned short *wb = d->pbf + (w - d->params);
            CB(blas.gemm_ex, (d->blas, CUBLAS_OP_N, CUBLAS_OP_N, IN, N, OUT, &one, wb, CUDA_R_16BF, IN, d->gbf,
                              CUDA_R_16BF, OUT, &one, din, CUDA_R_32F, IN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
        if (!inb) TRY(bf16_input(d, in, (size_t)N * IN, &inb)); /* (after gbf: d->abf is not written there) */
        CB(blas.gemm_ex, (d->blas, CUBLAS_OP_N, CUBLAS_OP_T, IN, OUT, N, &one, inb, CUDA_R_16BF, IN, d->gbf,
                          CUDA_R_16BF, OUT, &one, dw, CUDA_R_32F, IN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        if (dbias) CU(mp_cuk_bias_backward, (dbias, dout, N, OUT, d->ws, d->stream)); /* ws: see cu_backward */
        return MP_OK;
    }
    if (din) CB(blas.sgemm, (d->blas, CUBLAS_OP_N, CUBLAS_OP_N, IN, N, OUT, &one, w, IN, dout, OUT, &one, din, IN));
    CB(blas.sgemm, (d->blas, CUBLAS_OP_N, CUBLAS_OP_T, IN, OUT, N, &one, in, IN, dout, OUT, &one, dw, IN));
    if (dbias) CU(mp_cuk_bias_backward, (dbias, dout, N, OUT, d->ws, d->stream)); /* ws: see cu_backward */
cleanup:
    return st;
}

#define ZERO(ptr, n) CU(cudaMemsetAsync, ((ptr), 0, (size_t)(n) * sizeof(float), s))

/* The classifier, the cross-entropy and the start of their backward, R =
 * A->logit_rows rows at a time, so that the [N, V] logits never exist whole:
 * per chunk the logits (a product of the final norm's rows), each row's loss
 * and dlogits in place (k_xent; scale = 1 / (accum * counted targets)), then
 * that chunk's rows of dxn and its part of the classifier's gradient.
 * losses: [N] on the device. */
static mp_status train_head(const mp_model *m, const mp_acts *A, float *losses, float scale) {
    cu_model *d = m->dev;
    const mp_config *c = &m->cfg;
    const int N = A->B * A->T, D = c->d_model, V = c->vocab, R = A->logit_rows;
    const cudaStream_t s = d->stream;
    mp_status st = MP_OK;
    ZERO(A->dxn, (size_t)N * D);
    for (int r0 = 0; r0 < N; r0 += R) {
        const int rc = N - r0 < R ? N - r0 : R;
        const float *xn = A->lnf + (size_t)r0 * D;
        const unsigned short *xb; /* bf16: the chunk's rows rounded once for the product and its backward */
        TRY(bf16_input(d, xn, (size_t)rc * D, &xb));
        TRY(linear_pre(d, A->logits, xn, xb, d->p.unembed, NULL, rc, D, V));
        CU(mp_cuk_xent, (A->logits, losses + r0, A->logits, d->tgt + r0, rc, V, scale, s));
        TRY(linear_bwd_pre(d, A->dxn + (size_t)r0 * D, d->g.unembed, NULL, A->logits, xn, xb, d->p.unembed, rc, D,
                           V));
    }
cleanup:
    return st;
}

/* The backward on the device: the walk of backward.c (mp_backward_walk) over
 * this table, cu_bwd_ops. Each entry runs its step on the model's stream:
 * cuBLAS for the products' input and weight gradients (bf16: bfloat16
 * operands, fp32 accumulation), cuda_train_kernels.cu for the rest, the
 * attention by blocks of query rows recomputing the pattern from each row's
 * log-sum-exp (attn_blocked) or over the stored one where a forward hook
 * showed it (attn_stored_bwd). The device's training backward has no
 * backward hooks and always takes weight gradients (mp_cuda_cpu_reason keeps
 * the training-mode forward of backward hooks on the CPU), and the device
 * runs softmax attention only (mp_cuda_check_model): the entries of the hooks
 * (fire, copy, add, the norm's hook_scale split, hook_result's pair, the
 * scratch), of the staged attention and of the variant factor are NULL, and
 * the walk refuses a call that would need them. */
typedef struct {
    cu_model *d;
    /* bf16: the stored activation whose rounding d->abf holds, so that the
     * products sharing an input (q, k, v; the MLP's gate and up) round it
     * once. The walk never writes the stored activations it hands as inputs,
     * and only cb_linear writes d->abf during the walk. */
    const float *abf_of;
    size_t abf_n;
} cu_bwd;

static mp_status cb_zero(void *ctx, float *x, size_t n) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    CU(cudaMemsetAsync, (x, 0, n * sizeof(float), d->stream));
cleanup:
    return st;
}

/* din: beta 0 is cleared, then accumulated into (train.c's arithmetic) */
static mp_status cb_linear(void *ctx, float *din, float beta, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int N, int IN, int OUT) {
    cu_bwd *b = ctx;
    cu_model *d = b->d;
    mp_status st = MP_OK;
    const size_t n = (size_t)N * IN;
    if (!dw) return mp_error(MP_ERR_ARG, "backward on the cuda device: weight gradients only");
    if (beta == 0.0f) TRY(cb_zero(ctx, din, (size_t)N * IN));
    const unsigned short *inb = NULL;
    if (d->bf16) {
        if (b->abf_of == in && b->abf_n == n) {
            inb = d->abf;
        } else {
            b->abf_of = NULL;
            TRY(bf16_input(d, in, n, &inb));
            b->abf_of = in;
            b->abf_n = n;
        }
    }
    TRY(linear_bwd_pre(d, din, dw, db, dout, in, inb, w, N, IN, OUT));
cleanup:
    return st;
}

static mp_status cb_norm(void *ctx, const mp_config *c, float *dx, float *dw, float *db, const float *dout,
                         const float *x, const float *w, const float *mean, const float *rstd, int N) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    /* partial sums in the forward's workspace (cu_backward reserved it) */
    CU(mp_cuk_norm_backward, (dx, dw, db, dout, x, w, mean, rstd, N, c->d_model, c->norm == MP_NORM_LAYER, d->ws,
                              d->stream));
cleanup:
    return st;
}

/* The q/k norm's backward: tmp = the input gradient (the norm kernels over
 * the forward's rows; scales in the store, as cu_qk_norm kept them), then
 * copied over d; dw's partial sums in the workspace (cu_backward sized it). */
static mp_status cb_qk_norm(void *ctx, const mp_config *c, float *dg, float *tmp, float *dw, const float *x,
                            const float *w, const float *rstd, int rows, int width) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    const size_t n = (size_t)rows * width;
    (void)c;
    CU(cudaMemsetAsync, (tmp, 0, n * sizeof(float), d->stream));
    CU(mp_cuk_norm_backward, (tmp, dw, NULL, dg, x, w, NULL, rstd, rows, width, 0, d->ws, d->stream));
    CU(cudaMemcpyAsync, (dg, tmp, n * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
cleanup:
    return st;
}

static mp_status cb_act(void *ctx, const mp_config *c, float *dpre, float *dup, const float *dpost, const float *pre,
                        const float *up, size_t n) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    if (c->mlp == MP_MLP_SWIGLU) CU(mp_cuk_swiglu_backward, (dpre, dup, dpost, pre, up, n, d->stream));
    else CU(mp_cuk_gelu_backward, (dpre, dpost, pre, n, c->gelu_tanh, d->stream));
cleanup:
    return st;
}

static mp_status cb_attn(void *ctx, const mp_config *c, const mp_acts *A, int l, const mp_layer_acts *a,
                         const mp_attn_layer *av, const float *dz, float *dq, float *dk, float *dv, float *datt,
                         float *dfac) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    const int B = A->B, T = A->T, H = c->n_head, K = c->n_kv_head, Dh = c->d_head;
    (void)av, (void)dfac; /* softmax only: no row factor */
    if (a->att) /* the stored pattern (a forward hook showed it) */
        return attn_stored_bwd(d, dq, dk, dv, datt, dz, a->q, a->k, a->v, a->att, B, T, H, K, Dh);
    /* the pattern recomputed from the rows' log-sum-exp */
    const mp_kv_view kv = mp_kv_view_rows(a->k, a->v, T, K, Dh);
    return attn_blocked(d, NULL, A->lse + (size_t)l * B * H * T, dq, dk, dv, dz, a->q, &kv, B, T, H, K, Dh, 0,
                        mp_config_window(c, l));
}

static mp_status cb_pos(void *ctx, const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale,
                        float *x, int B, int T, int nh) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    CU(mp_cuk_rope_backward, (x, cos_t, sin_t, q_scale, B, T, nh, c->d_head, d->stream));
cleanup:
    return st;
}

/* the rows grouped by token (token_groups) and by position (train_reserve): tokens is not read */
static mp_status cb_embed(void *ctx, const mp_config *c, float *dembed, float *dpos_embed, const float *dres,
                          const float *dpos, const int *tokens, int B, int T) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    const int N = B * T, D = c->d_model;
    mp_status st = MP_OK;
    (void)tokens;
    CU(mp_cuk_embed_backward, (dembed, dres, d->tok_groups, N, d->tok_ng, D, d->stream));
    if (dpos_embed) CU(mp_cuk_embed_backward, (dpos_embed, dpos, d->pos_ids, N, d->pos_ng, D, d->stream));
cleanup:
    return st;
}

/* a parallel block's (parallel_attn) residual sum and its [N, D] buffer, the walk's only other needs */
static mp_status cb_add(void *ctx, float *dst, const float *src, size_t n) {
    cu_model *d = ((cu_bwd *)ctx)->d;
    mp_status st = MP_OK;
    CU(mp_cuk_add, (dst, src, n, d->stream));
cleanup:
    return st;
}

static float *cb_alloc(void *ctx, size_t n, const char *what) {
    (void)ctx;
    float *p = NULL;
    if (cudaMalloc((void **)&p, n * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        mp_error(MP_ERR_NOMEM, "out of GPU memory for %s (%zu floats)", what, n);
        return NULL;
    }
    return p;
}

static void cb_release(void *ctx, float *p) { cu_free_after(((cu_bwd *)ctx)->d, p, 0); }

static const mp_bwd_ops cu_bwd_ops = {
    .name = "cuda",
    .zero = cb_zero,
    .add = cb_add,
    .alloc = cb_alloc,
    .release = cb_release,
    .linear = cb_linear,
    .norm = cb_norm,
    .qk_norm = cb_qk_norm,
    .act = cb_act,
    .attn = cb_attn,
    .pos = cb_pos,
    .embed = cb_embed,
};

/* The backward over the device store A from dxn of the final norm's output
 * (train_head ran the classifier's): every parameter's gradient accumulated
 * into d->g. The shell around the walk: the workspace reservation. */
static mp_status cu_backward(const mp_model *m, mp_acts *A) {
    cu_model *d = m->dev;
    const mp_config *c = &m->cfg;
    const int N = A->B * A->T, D = c->d_model, M = c->mlp == MP_MLP_NONE ? 0 : c->d_mlp;
    const int HD = c->n_head * c->d_head, KD = c->n_kv_head * c->d_head;
    mp_status st = MP_OK;
    /* the norms' weight gradients and the biases' take their partial sums in the forward's workspace, idle
     * during the backward (stream order: the forward's kernels that used it are done before these run) */
    size_t wide = (size_t)D;
    const size_t outs[3] = {(size_t)M, (size_t)HD, (size_t)KD};
    for (int i = 0; i < 3; i++) wide = outs[i] > wide ? outs[i] : wide;
    size_t nw = mp_cuk_norm_dw_floats(N, D);
    const size_t nb = mp_cuk_bias_bwd_floats(N, (int)wide);
    if (c->qk_norm != MP_QK_NORM_NONE) { /* the q/k norm's weight gradients: rows of Dh, or of H*Dh / K*Dh */
        const int H = c->n_head, K = c->n_kv_head, Dh = c->d_head, full = c->qk_norm == MP_QK_NORM_FULL;
        const size_t wq = full ? mp_cuk_norm_dw_floats(N, HD) : mp_cuk_norm_dw_floats(N * H, Dh);
        const size_t wk = full ? mp_cuk_norm_dw_floats(N, KD) : mp_cuk_norm_dw_floats(N * K, Dh);
        nw = wq > nw ? wq : nw;
        nw = wk > nw ? wk : nw;
    }
    TRY(reserve(d, nw > nb ? nw : nb, 0, 0));
    cu_bwd b = {d, NULL, 0};
    const mp_backward_params bp = {NULL, NULL, NULL, NULL};
    st = mp_backward_walk(cu_exec.bwd, &b, c, &d->p, &d->g, A, NULL, &bp);
cleanup:
    return st;
}

/* The logits of one chunk of train_head: at most this many floats (128 MiB)
 * unless a chunk of 64 rows needs more. */
#define CE_FLOATS ((size_t)1 << 25)

void mp_cuda_set_knob_dev(mp_model *m, int which, int value) {
    cu_model *d = m->dev;
    if (which == 2) d->rd_max = (size_t)value;
    else *(which ? &d->att_rows : &d->ce_rows) = value;
}

/* Device buffers of a step on micro-batches of mb x T: the store, the
 * gradients and moments (n floats each), targets and position ids. */
static mp_status train_reserve(cu_model *d, const mp_config *c, int mb, int T, int no_pattern) {
    mp_status st = MP_OK;
    const size_t n = mp_config_n_params(c), N = (size_t)mb * T;
    const size_t auto_rows = CE_FLOATS / (size_t)c->vocab;
    const size_t want = d->ce_rows > 0 ? (size_t)d->ce_rows : auto_rows < 64 ? 64 : auto_rows;
    const int R = want < N ? (int)want : (int)N; /* as mp_acts_layout clamps it */
    if (d->acts.B != mb || d->acts.T != T || d->acts.logit_rows != R ||
        (d->acts.lse != NULL) != (no_pattern != 0)) {
        cu_free_after(d, d->acts.mem, 0);
        memset(&d->acts, 0, sizeof d->acts);
        size_t nf;
        mp_acts probe;
        TRY(mp_acts_layout(&probe, c, mb, T, R, no_pattern, NULL, &nf));
        float *mem = NULL;
        CU(cudaMalloc, ((void **)&mem, nf * sizeof(float)));
        TRY(mp_acts_layout(&d->acts, c, mb, T, R, no_pattern, mem, &nf));
    }
    if (!d->grads) {
        CU(cudaMalloc, ((void **)&d->grads, (n ? n : 1) * sizeof(float)));
        mp_params_layout(c, d->grads, &d->g);
        CU(cudaMalloc, ((void **)&d->om, (n ? n : 1) * sizeof(float)));
        CU(cudaMalloc, ((void **)&d->ov, (n ? n : 1) * sizeof(float)));
        CU(cudaMalloc, ((void **)&d->part, 1024 * sizeof(double)));
        d->opt = NULL;
    }
    if (d->tgt_n < N || d->pos_T != T) { /* position ids: t of every row, for a learned table's gradient */
        cu_free_after(d, d->tgt, 0);
        cu_free_after(d, d->pos_ids, 0);
        d->tgt = d->pos_ids = NULL;
        d->tgt_n = 0;
        CU(cudaMalloc, ((void **)&d->tgt, N * sizeof(int)));
        CU(cudaMalloc, ((void **)&d->pos_ids, (3 * N + 1) * sizeof(int)));
        TRY(reserve(d, 0, 0, 4 * N + 1));
        int *ids = (int *)d->host, *groups = ids + N;
        for (size_t i = 0; i < N; i++) ids[i] = (int)(i % (size_t)T);
        d->pos_ng = mp_cuk_embed_groups(ids, (int)N, groups);
        if (d->pos_ng < 0) {
            st = mp_error(MP_ERR_NOMEM, "out of memory grouping the position rows (%zu)", N);
            goto cleanup;
        }
        CU(cudaMemcpyAsync, (d->pos_ids, groups, (3 * N + 1) * sizeof(int), cudaMemcpyHostToDevice, d->stream));
        CU(cudaStreamSynchronize, (d->stream));
        d->tgt_n = N;
        d->pos_T = T;
    }
cleanup:
    return st;
}

/* Copies between the host parameter layout (m->p; opt's moments follow it)
 * and the device's, tensor by tensor: dir 0 host -> device, 1 device -> host. */
static mp_status params_copy(const mp_model *m, float *dev_base, float *host_base, int dir) {
    mp_status st = MP_OK;
    cu_model *d = m->dev;
    mp_param_desc hs[MP_PARAM_MAX], ds[MP_PARAM_MAX];
    const int nh = mp_params_describe(&m->cfg, &m->p, hs);
    mp_params_describe(&m->cfg, &d->p, ds);
    for (int i = 0; i < nh; i++) {
        float *hp = host_base + (hs[i].p - m->owned), *dp = dev_base + (ds[i].p - d->params);
        if (dir) CU(cudaMemcpyAsync, (hp, dp, hs[i].n * sizeof(float), cudaMemcpyDeviceToHost, d->stream));
        else CU(cudaMemcpyAsync, (dp, hp, hs[i].n * sizeof(float), cudaMemcpyHostToDevice, d->stream));
    }
    CU(cudaStreamSynchronize, (d->stream));
cleanup:
    return st;
}

/* The host copy brought up to date (mp_model_sync): after device steps, the
 * weights into m's own memory and the moments into the optimiser that took
 * them (alive: the caller's contract, model.h). */
static mp_status cu_sync(const mp_model *m) {
    cu_model *d = m->dev;
    mp_status st = MP_OK;
    if (!d->stale) return MP_OK;
    TRY(params_copy(m, d->params, m->owned, 1));
    if (d->opt) {
        TRY(params_copy(m, d->om, d->opt->m, 1));
        TRY(params_copy(m, d->ov, d->opt->v, 1));
    }
    d->stale = 0;
cleanup:
    return st;
}

/* The micro-batch's rows grouped by token on the device (d->tok_groups, d->tok_ng): the embedding gradient
 * adds each token's rows in one block, in row order (deterministic: no atomics). */
static mp_status token_groups(cu_model *d, const int *tok, int N) {
    mp_status st = MP_OK;
    const size_t need = 3 * (size_t)N + 1;
    if (d->hgroups_n < need) {
        int *h = realloc(d->hgroups, need * sizeof(int));
        if (!h) return mp_error(MP_ERR_NOMEM, "out of memory grouping %d token rows", N);
        d->hgroups = h;
        d->hgroups_n = need;
    }
    d->tok_ng = mp_cuk_embed_groups(tok, N, d->hgroups);
    if (d->tok_ng < 0) return mp_error(MP_ERR_NOMEM, "out of memory grouping %d token rows", N);
    TRY(dev_grow(d, (void **)&d->tok_groups, &d->tok_groups_n, need, sizeof(int)));
    /* pageable source: the runtime stages it before returning, so hgroups may be reused at once */
    CU(cudaMemcpyAsync, (d->tok_groups, d->hgroups, need * sizeof(int), cudaMemcpyHostToDevice, d->stream));
cleanup:
    return st;
}

/* One step of train.c's mp_train_step on the device: per micro-batch the
 * training forward (hooks live), the loss and dlogits (k_xent), the backward;
 * then the global gradient norm (double partial sums), clipping and AdamW on
 * the device; the updated parameters and moments copied back to the host, which
 * stays authoritative (a checkpoint, the CPU, a later step read them there). */
static mp_status cu_train_step(mp_model *m, mp_adamw *opt, void *wsv, const int *tokens, const int *targets, int B,
                               int T, int accum, const void *hooks, float *loss) {
    mp_train_ws *ws = wsv;
    cu_model *d = m->dev;
    const mp_config *c = &m->cfg;
    mp_status st = MP_OK;
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hooks;
    if (c->rel_values > 0)
        return mp_error(MP_ERR_ARG, "train step: %s; move the model there first (m:to(\"cpu\"))", MP_CUDA_RELV_CPU);
    const char *why = mp_cuda_cpu_reason(m, &fp); /* the hook points only the CPU forward has */
    if (why)
        return mp_error(MP_ERR_ARG, "train step: hook point %s is not on the cuda device; train on the CPU "
                        "(m:to(\"cpu\")) to hook it", why);
    if ((why = mp_cuda_train_gemma(c)))
        return mp_error(MP_ERR_ARG, "train step: the cuda device does not train %s yet; train on the CPU "
                        "(m:to(\"cpu\"))", why);
    const int mb = B / accum, N = mb * T;
    const size_t n = mp_config_n_params(c);
    const cudaStream_t s = d->stream;
    int no_pattern = 1; /* the [T, T] pattern is stored only where a hook shows the scores or the pattern */
    for (int l = 0; l < c->n_layer; l++)
        if (mp_hooks_active(hooks, MP_HOOK_ATTN_SCORES, l) || mp_hooks_active(hooks, MP_HOOK_PATTERN, l)) no_pattern = 0;
    TRY(train_reserve(d, c, mb, T, no_pattern));
    mp_acts *A = &d->acts;
    if (d->opt != opt || d->opt_step != opt->step) { /* another optimiser, or its state changed on the host */
        if (d->opt != opt) TRY(cu_sync(m)); /* the previous optimiser's moments first */
        TRY(params_copy(m, d->om, opt->m, 0));
        TRY(params_copy(m, d->ov, opt->v, 0));
        d->opt = opt;
        d->opt_step = opt->step;
    }
    ZERO(d->grads, n);
    double total = 0.0;
    float *losses = A->dfac; /* [B*H*T] >= N floats of scratch */
    for (int a = 0; a < accum; a++) {
        const int *tok = tokens + (size_t)a * N, *tgt = targets + (size_t)a * N;
        int count = 0;
        for (int i = 0; i < N; i++) count += tgt[i] >= 0;
        TRY(forward_dev(m, tok, mb, T, &fp, NULL, A));
        if (!count) continue; /* no target counted: no loss, no gradient (the forward ran for its hooks) */
        TRY(token_groups(d, tok, N));
        CU(cudaMemcpyAsync, (d->tgt, tgt, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, s));
        TRY(train_head(m, A, losses, 1.0f / (float)accum / (float)count));
        TRY(reserve(d, 0, 0, (size_t)N));
        CU(cudaMemcpyAsync, (d->host, losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, s));
        CU(cudaStreamSynchronize, (s));
        double sum = 0.0;
        for (int i = 0; i < N; i++) sum += d->host[i];
        total += (float)(sum / count);
        TRY(cu_backward(m, A));
    }
    *loss = (float)(total / accum);
    /* global norm, clipping (optim.c mp_grad_clip), AdamW (mp_adamw_update) */
    const unsigned nb = mp_cuk_sumsq_blocks(n);
    CU(mp_cuk_sumsq, (d->part, d->grads, n, s));
    double part[1024], ss = 0.0;
    CU(cudaMemcpyAsync, (part, d->part, nb * sizeof(double), cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize, (s));
    for (unsigned i = 0; i < nb; i++) ss += part[i];
    const double norm = sqrt(ss);
    const float max_norm = opt->hp.grad_clip;
    if (max_norm > 0.0f && norm > max_norm) CU(mp_cuk_scale, (d->grads, n, (float)(max_norm / (norm + 1e-6)), s));
    ws->grad_norm = norm;
    ws->lr = mp_lr_at(&opt->hp, opt->step);
    const mp_adamw_params *hp = &opt->hp;
    opt->step++;
    const double bc1 = 1.0 - pow((double)hp->beta1, (double)opt->step);
    const double bc2 = 1.0 - pow((double)hp->beta2, (double)opt->step);
    mp_param_desc ds[MP_PARAM_MAX];
    const int nd = mp_params_describe(c, &d->p, ds);
    for (int i = 0; i < nd; i++) {
        const size_t off = (size_t)(ds[i].p - d->params);
        CU(mp_cuk_adamw, (ds[i].p, d->om + off, d->ov + off, d->grads + off, ds[i].n, hp->beta1, hp->beta2, hp->eps,
                          (float)(ws->lr / bc1), (float)sqrt(bc2), (float)(1.0 - ws->lr * hp->weight_decay),
                          ds[i].decay && hp->weight_decay != 0.0f, s));
    }
    if (d->bf16) CU(mp_cuk_to_bf16, (d->pbf, d->params, n, s)); /* the products' copy of the new weights */
    d->opt_step = opt->step;
    d->stale = 1;
    if (hooks) TRY(cu_sync(m)); /* the next step's callbacks may read the weights on the host */
cleanup:
    if (st != MP_OK) cudaStreamSynchronize(s);
    return st;
}
#undef ZERO

static const char *cu_cpu_reason(const mp_model *m, const void *fp) { return mp_cuda_cpu_reason(m, fp); }

static const mp_dev_ops cu_ops = {MP_DEV_OPS_VERSION, "cuda", &cu_exec, cu_cpu_reason, cu_forward, cu_release,
                                  cu_train_step, cu_sync};

mp_status mp_cuda_attach(mp_model *m, mp_precision prec) {
    mp_status st = MP_OK;
    mp_model *f32 = NULL;
    const mp_model *src = m;
    cu_model *d = mp_calloc(1, sizeof *d, "the CUDA model state");
    if (!d) return MP_ERR_NOMEM;
    if (m->q) { /* quantized weights: the device gets their float32 values */
        TRY(mp_model_dequantized_copy(m, &f32));
        src = f32;
    }
    const size_t n = mp_config_n_params(&m->cfg);
    TRY(blas_load());
    TRY(mp_exec_register(&cu_exec)); /* the device's op table, for mp_exec_lookup("cuda") */
    CU(cudaStreamCreateWithFlags, (&d->stream, cudaStreamNonBlocking));
    CB(blas.create, (&d->blas));
    CB(blas.set_stream, (d->blas, d->stream));
    CB(blas.set_math_mode, (d->blas, CUBLAS_DEFAULT_MATH)); /* no TF32: the fp32 reference path */
    CU(cudaMalloc, ((void **)&d->params, (n ? n : 1) * sizeof(float)));
    mp_params_layout(&m->cfg, d->params, &d->p);
    mp_param_desc hs[MP_PARAM_MAX], ds[MP_PARAM_MAX];
    const int nh = mp_params_describe(&m->cfg, &src->p, hs), nd = mp_params_describe(&m->cfg, &d->p, ds);
    if (nh != nd) {
        st = mp_error(MP_ERR_ARG, "to cuda: parameter lists differ (%d host, %d device)", nh, nd);
        goto cleanup;
    }
    for (int i = 0; i < nh; i++) {
        if (!hs[i].p) {
            st = mp_error(MP_ERR_ARG, "to cuda: parameter %s has no host data", hs[i].name);
            goto cleanup;
        }
        /* on the model's stream, which every kernel of it runs on: a cudaMemcpy would go to the legacy
         * stream, which this non-blocking stream never waits for */
        CU(cudaMemcpyAsync, (ds[i].p, hs[i].p, hs[i].n * sizeof(float), cudaMemcpyHostToDevice, d->stream));
    }
    if (prec == MP_PRECISION_BF16) { /* the bfloat16 copy the products read */
        d->bf16 = 1;
        CU(cudaMalloc, ((void **)&d->pbf, (n ? n : 1) * sizeof(unsigned short)));
        CU(mp_cuk_to_bf16, (d->pbf, d->params, n, d->stream));
    }
    CU(cudaStreamSynchronize, (d->stream)); /* the weights are on the device before the host's may change */
    if (m->dev && m->dev_ops) m->dev_ops->release(m);
    m->dev = d;
    m->dev_ops = &cu_ops;
    d = NULL;
cleanup:
    cu_free(d);
    mp_model_free(f32);
    return st;
}
