/* checkpoint.c — HDF5 training checkpoints (see checkpoint.h): save (atomic),
 * load with validation of every dataset shape against /config, optimizer state
 * and loss curve. (Format detection and dispatch: model_io.c.)
 * Checkpoints are untrusted input: they are parsed in a child process with a
 * time and memory limit, and every declared size is checked against the data
 * the file really holds before anything is allocated. The child process
 * itself is sandbox.c's. */
#include "checkpoint.h"
#include "guard_spawn.h"
#include "sandbox.h"
#include "h5config.h"
#include "h5io.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "mechprobe.checkpoint"
#define CKPT_VERSION 1

static mp_status make_group(hid_t f, const char *path, const char *file) {
    if (mp_h5_exists(f, path, NULL)) return MP_OK;
    hid_t g = H5Gcreate2(f, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot create group", file, path);
    H5Gclose(g);
    return MP_OK;
}

/* Writes each tensor of `base` laid out like the params (per layer split) under prefix. */
static mp_status write_tensors(hid_t f, const char *prefix, const mp_config *c, const float *base,
                               const mp_model *m) {
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(c, &m->p, d);
    mp_status st = MP_OK;
    mp_params lay;
    if (base) mp_params_layout(c, (float *)base, &lay);
    mp_param_desc bd[MP_PARAM_MAX];
    if (base) mp_params_describe(c, &lay, bd);
    for (int k = 0; k < nd && !st; k++) {
        const float *src = base ? bd[k].p : d[k].p;
        int nl = d[k].per_layer ? c->n_layer : 1;
        size_t per = d[k].n / (size_t)nl;
        for (int l = 0; l < nl && !st; l++) {
            char name[160], path[200];
            snprintf(name, sizeof name, d[k].name, l);
            snprintf(path, sizeof path, "%s/%s", prefix, name);
            st = mp_h5_write_f32(f, path, d[k].ndim, d[k].shape, src + (size_t)l * per, 0);
        }
    }
    return st;
}

static mp_status write_f64(hid_t f, const char *path, const double *v, size_t n, const char *file) {
    int64_t shape[1] = {(int64_t)n};
    hid_t ds;
    mp_status st = mp_h5_create_dataset(f, path, H5T_NATIVE_DOUBLE, 1, shape, NULL, 0, NULL, &ds);
    if (st) return st;
    if (n && H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", file, path);
    H5Dclose(ds);
    return st;
}

mp_status mp_checkpoint_save(const char *path, const mp_model *m, const mp_adamw *opt, const mp_train_log *log) {
    mp_status ss = mp_model_sync(m); /* a model trained on a device: its newer weights and moments */
    if (ss) return ss;
    if (m->q) { /* quantized weights: save a float32 copy (decoded on demand) */
        mp_model *f32 = NULL;
        mp_status qs = mp_model_dequantized_copy(m, &f32);
        if (!qs) qs = mp_checkpoint_save(path, f32, opt, log);
        mp_model_free(f32);
        return qs;
    }
    mp_h5_atomic at;
    memset(&at, 0, sizeof at);
    mp_status st = mp_h5_atomic_create(&at, path);
    if (st) return st;
    hid_t f = at.file;
    const mp_config *c = &m->cfg;
    st = mp_h5_attr_set_string(f, "/", "format", CKPT_FORMAT);
    if (!st) st = mp_h5_attr_set_int(f, "/", "version", CKPT_VERSION);
    if (!st) st = mp_h5_attr_set_string(f, "/", "source", m->source);
    if (!st) st = make_group(f, "/config", path);
    if (!st) st = mp_h5_config_write(f, "/config", c, m->tokenizer);
    if (!st) st = make_group(f, "/params", path);
    if (!st) st = write_tensors(f, "/params", c, NULL, m);
    if (!st && opt && opt->n) {
        if (opt->n != mp_config_n_params(c)) {
            st = mp_error(MP_ERR_ARG, "%s: the optimizer state (%zu values) does not match the model (%zu)", path,
                          opt->n, mp_config_n_params(c));
        } else {
            const mp_adamw_params *hp = &opt->hp;
            st = make_group(f, "/optim", path);
            if (!st) st = mp_h5_attr_set_string(f, "/optim", "type", "adamw");
            if (!st) st = mp_h5_attr_set_int(f, "/optim", "step", opt->step);
            struct { const char *k; float v; } fl[] = {{"lr", hp->lr}, {"beta1", hp->beta1}, {"beta2", hp->beta2},
                                                        {"eps", hp->eps}, {"weight_decay", hp->weight_decay},
                                                        {"min_lr", hp->min_lr}, {"grad_clip", hp->grad_clip}};
            for (size_t i = 0; !st && i < sizeof fl / sizeof fl[0]; i++) {
                st = mp_h5_attr_set_float(f, "/optim", fl[i].k, mp_h5_float_decimal(fl[i].v));
            }
            if (!st) st = mp_h5_attr_set_int(f, "/optim", "warmup", hp->warmup);
            if (!st) st = mp_h5_attr_set_int(f, "/optim", "total_steps", hp->total_steps);
            if (!st) st = write_tensors(f, "/optim/m", c, opt->m, m);
            if (!st) st = write_tensors(f, "/optim/v", c, opt->v, m);
        }
    }
    if (!st && log) {
        int64_t shape[1] = {(int64_t)log->n}, es[1] = {(int64_t)log->n_eval};
        st = make_group(f, "/train", path);
        if (!st) st = mp_h5_write_i32(f, "/train/step", 1, shape, log->step, 0);
        if (!st) st = mp_h5_write_f32(f, "/train/loss", 1, shape, log->loss, 0);
        if (!st) st = mp_h5_write_f32(f, "/train/lr", 1, shape, log->lr, 0);
        if (!st) st = write_f64(f, "/train/tokens", log->tokens, log->n, path);
        if (!st) st = write_f64(f, "/train/wall_s", log->wall, log->n, path);
        if (!st) st = mp_h5_write_i32(f, "/train/eval_step", 1, es, log->eval_step, 0);
        if (!st) st = mp_h5_write_f32(f, "/train/eval_loss", 1, es, log->eval_loss, 0);
        if (!st) st = mp_h5_attr_set_int(f, "/train", "n_steps", (int64_t)log->n);
        if (!st) st = mp_h5_attr_set_float(f, "/train", "tokens", log->n ? log->tokens[log->n - 1] : 0.0);
    }
    if (st) {
        mp_h5_atomic_abort(&at);
        return st;
    }
    return mp_h5_atomic_commit(&at);
}

/* ---- loading ---- */

static mp_status get_int(hid_t f, const char *obj, const char *key, int *out, const char *path) {
    return mp_h5_attr_get_i32(f, obj, key, out, path);
}

static mp_status get_float(hid_t f, const char *obj, const char *key, float *out, const char *path) {
    return mp_h5_attr_get_f32(f, obj, key, out, path);
}

static mp_status read_config(hid_t f, mp_config *c, const char *path) {
    mp_status st = mp_h5_config_read(f, "/config", c, path);
    if (!st) st = mp_config_validate(c, path);
    return st;
}

/* ---- loading (untrusted files) ----
 * The loader reads only the objects the schema names, through hard links
 * only, and checks every dataset's declared size against the storage the
 * file really holds before anything is allocated. It runs in a child process
 * (see the supervisor below): whatever the HDF5 library does with a hostile
 * file (crash, endless loop, huge allocation) stays in the child. */

/* Longest /train curve accepted (entries): far above any run's step count,
 * and it bounds what a curve can make us allocate (28 bytes an entry). */
#define CKPT_CURVE_MAX ((size_t)1 << 22)
/* Densest compression accepted for a filtered dataset (deflate's limit is
 * about 1032:1): a few hundred bytes cannot declare gigabytes. */
#define CKPT_MAX_RATIO 1100u

typedef struct {
    const char *path;
    uint64_t fsize;                           /* bytes of the file */
    void (*reserve)(void *ctx, size_t bytes); /* told what the load will allocate, before it does */
    void *ctx;
} ckpt_ctx;

/* Opens nothing: checks that dataset ds exists through hard links, is
 * numeric, and that its storage in the file holds every declared element. */
static mp_status checked_info(hid_t f, const char *ds, mp_h5_dsinfo *info, const ckpt_ctx *cx) {
    mp_status st = mp_h5_check_links(f, ds);
    if (!st) st = mp_h5_dataset_info(f, ds, info);
    if (st) {
        if (strstr(mp_last_error(), "no such object"))
            st = mp_error(MP_ERR_FORMAT, "%s: %s is missing", cx->path, ds);
        return st;
    }
    uint64_t want = (uint64_t)info->numel * (info->elem_size ? info->elem_size : 1);
    if (info->numel == 0) return MP_OK;
    if (!info->allocated || info->storage == 0)
        return mp_error(MP_ERR_FORMAT, "%s: %s was never written (no storage for its %zu values; refused)", cx->path,
                        ds, info->numel);
    if (info->storage > cx->fsize)
        return mp_error(MP_ERR_FORMAT, "%s: %s claims %llu bytes of storage in a file of %llu bytes", cx->path, ds,
                        (unsigned long long)info->storage, (unsigned long long)cx->fsize);
    if (!info->filtered ? info->storage < want : want / CKPT_MAX_RATIO > info->storage)
        return mp_error(MP_ERR_FORMAT, "%s: %s declares %zu values (%llu bytes) but the file holds only %llu bytes of it",
                        cx->path, ds, info->numel, (unsigned long long)want, (unsigned long long)info->storage);
    return MP_OK;
}

/* Checks (pass 0) or reads (pass 1) every tensor under prefix into base,
 * the parameter layout of config c. */
static mp_status read_tensors(hid_t f, const char *prefix, const mp_config *c, float *base, int pass,
                              const ckpt_ctx *cx) {
    mp_params lay;
    mp_params_layout(c, base, &lay);
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(c, &lay, d);
    for (int k = 0; k < nd; k++) {
        int nl = d[k].per_layer ? c->n_layer : 1;
        size_t per = d[k].n / (size_t)nl;
        for (int l = 0; l < nl; l++) {
            char name[160], ds[200];
            snprintf(name, sizeof name, d[k].name, l);
            snprintf(ds, sizeof ds, "%s/%s", prefix, name);
            mp_h5_dsinfo info;
            mp_status st;
            if (pass == 1) {
                if ((st = mp_h5_read_f32_into(f, ds, d[k].p + (size_t)l * per, per))) return st;
                continue;
            }
            if ((st = checked_info(f, ds, &info, cx))) return st; /* the message names file and dataset */
            int ok = info.ndim == d[k].ndim && info.is_float;
            for (int i = 0; ok && i < info.ndim; i++) ok = info.shape[i] == d[k].shape[i];
            if (!ok) {
                char want[64];
                if (d[k].ndim == 2) snprintf(want, sizeof want, "[%lld,%lld]", (long long)d[k].shape[0], (long long)d[k].shape[1]);
                else snprintf(want, sizeof want, "[%lld]", (long long)d[k].shape[0]);
                return mp_error(MP_ERR_FORMAT, "%s: %s has the wrong shape or type (the config needs float %s)",
                                cx->path, ds, want);
            }
        }
    }
    return MP_OK;
}

/* Length of curve ds (1-D, at most CKPT_CURVE_MAX, stored in full). */
static mp_status curve_len(hid_t f, const char *ds, size_t *n, const ckpt_ctx *cx) {
    mp_h5_dsinfo info;
    mp_status st = checked_info(f, ds, &info, cx);
    if (st) return st;
    if (info.ndim > 1) return mp_error(MP_ERR_FORMAT, "%s: %s must be 1-D", cx->path, ds);
    if (info.numel > CKPT_CURVE_MAX)
        return mp_error(MP_ERR_FORMAT, "%s: %s has %zu entries (more than the %zu a checkpoint may hold)", cx->path,
                        ds, info.numel, CKPT_CURVE_MAX);
    *n = info.numel;
    return MP_OK;
}

/* Reads curve ds of n entries (the length of curve `ref`) into a new *out. */
static mp_status read_curve(hid_t f, const char *ds, const char *ref, hid_t mtype, size_t elem, size_t n,
                            void **out, const ckpt_ctx *cx) {
    size_t len = 0;
    mp_status st = curve_len(f, ds, &len, cx);
    if (st) return st;
    if (len != n) return mp_error(MP_ERR_FORMAT, "%s: %s has %zu entries, %s %zu", cx->path, ds, len, ref, n);
    if (!(*out = mp_calloc(n ? n : 1, elem, "the loss curve"))) return MP_ERR_NOMEM;
    if (!n) return MP_OK;
    if (H5Tequal(mtype, H5T_NATIVE_FLOAT) > 0) return mp_h5_read_f32_into(f, ds, *out, n);
    if (H5Tequal(mtype, H5T_NATIVE_INT32) > 0) return mp_h5_read_i32_into(f, ds, *out, n);
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    if (d < 0 || H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot read", cx->path, ds);
    if (d >= 0) H5Dclose(d);
    return st;
}

static mp_status read_log(hid_t f, mp_train_log *log, const ckpt_ctx *cx) {
    memset(log, 0, sizeof *log);
    if (!mp_h5_exists(f, "/train/step", NULL)) return MP_OK;
    size_t n = 0, ne = 0;
    mp_status st = curve_len(f, "/train/step", &n, cx);
    if (!st && mp_h5_exists(f, "/train/eval_step", NULL)) st = curve_len(f, "/train/eval_step", &ne, cx);
    if (st) return st;
    if (cx->reserve) cx->reserve(cx->ctx, n * 28 + ne * 8);
    log->n = log->cap = n;
    if (!st) st = read_curve(f, "/train/step", "/train/step", H5T_NATIVE_INT32, 4, n, (void **)&log->step, cx);
    if (!st) st = read_curve(f, "/train/loss", "/train/step", H5T_NATIVE_FLOAT, 4, n, (void **)&log->loss, cx);
    if (!st) st = read_curve(f, "/train/lr", "/train/step", H5T_NATIVE_FLOAT, 4, n, (void **)&log->lr, cx);
    if (!st) st = read_curve(f, "/train/tokens", "/train/step", H5T_NATIVE_DOUBLE, 8, n, (void **)&log->tokens, cx);
    if (!st) st = read_curve(f, "/train/wall_s", "/train/step", H5T_NATIVE_DOUBLE, 8, n, (void **)&log->wall, cx);
    if (!st && mp_h5_exists(f, "/train/eval_step", NULL)) {
        log->n_eval = log->cap_eval = ne;
        st = read_curve(f, "/train/eval_step", "/train/eval_step", H5T_NATIVE_INT32, 4, ne, (void **)&log->eval_step, cx);
        if (!st) st = read_curve(f, "/train/eval_loss", "/train/eval_step", H5T_NATIVE_FLOAT, 4, ne, (void **)&log->eval_loss, cx);
    }
    if (st) mp_train_log_free(log);
    return st;
}

/* What a load produces: config, parameters (and optimizer state, curve). */
typedef struct {
    mp_config cfg;
    char tokenizer[16];
    size_t n;              /* floats in params (and in opt.m, opt.v) */
    float *params;
    int has_opt;
    mp_adamw opt;
    int has_log;
    mp_train_log log;
} ckpt_data;

static void ckpt_data_free(ckpt_data *d) {
    free(d->params);
    mp_adamw_free(&d->opt);
    mp_train_log_free(&d->log);
    memset(d, 0, sizeof *d);
}

/* The whole load from HDF5 (in the child): want_opt / want_log say what to read. */
static mp_status load_hdf5(const ckpt_ctx *cx, int want_opt, int want_log, ckpt_data *d) {
    const char *path = cx->path;
    hid_t f = H5I_INVALID_HID;
    mp_h5_attr a;
    memset(d, 0, sizeof *d);
    mp_status st = mp_check_regular_file(path); /* a FIFO would block the open */
    if (st) return st;
    if ((st = mp_h5_open(&f, path, MP_H5_READ))) return st;
    if ((st = mp_h5_attr_get(f, "/", "format", &a))) {
        st = mp_error(MP_ERR_FORMAT, "%s: not a mechprobe checkpoint (no 'format' attribute on /)", path);
        goto cleanup;
    }
    int okfmt = a.kind == MP_H5_ATTR_STRING && strcmp(a.s, CKPT_FORMAT) == 0;
    mp_h5_attr_clear(&a);
    if (!okfmt) { st = mp_error(MP_ERR_FORMAT, "%s: format is not \"%s\"", path, CKPT_FORMAT); goto cleanup; }
    int version = 0;
    if ((st = get_int(f, "/", "version", &version, path))) goto cleanup;
    if (version != CKPT_VERSION) { st = mp_error(MP_ERR_FORMAT, "%s: unsupported checkpoint version %d (this build reads %d)", path, version, CKPT_VERSION); goto cleanup; }
    if ((st = mp_h5_check_links(f, "/config")) || (st = read_config(f, &d->cfg, path))) goto cleanup;
    const mp_config *c = &d->cfg;
    d->n = mp_config_n_params(c);
    /* every dataset checked against the file before anything is allocated */
    if ((st = read_tensors(f, "/params", c, NULL, 0, cx))) goto cleanup;
    d->has_opt = want_opt && mp_h5_exists(f, "/optim", NULL);
    if (d->has_opt && ((st = mp_h5_check_links(f, "/optim")) || (st = read_tensors(f, "/optim/m", c, NULL, 0, cx)) ||
                       (st = read_tensors(f, "/optim/v", c, NULL, 0, cx))))
        goto cleanup;
    size_t bytes;
    if (mp_mul_size(d->n, sizeof(float) * (d->has_opt ? 3 : 1), &bytes)) {
        st = mp_error(MP_ERR_FORMAT, "%s: the config's parameter count overflows", path);
        goto cleanup;
    }
    if (cx->reserve) cx->reserve(cx->ctx, bytes);
    if (!(d->params = mp_calloc(d->n, sizeof(float), path))) { st = MP_ERR_NOMEM; goto cleanup; }
    if ((st = read_tensors(f, "/params", c, d->params, 1, cx))) goto cleanup;
    {   /* optional vocabulary hint */
        mp_h5_attr t;
        if (mp_h5_attr_get(f, "/config", "tokenizer", &t) == MP_OK) {
            if (t.kind == MP_H5_ATTR_STRING && strcmp(t.s, "bytes") == 0) snprintf(d->tokenizer, sizeof d->tokenizer, "bytes");
            mp_h5_attr_clear(&t);
        }
    }
    if (d->has_opt) {
        mp_adamw_params hp = mp_adamw_params_default();
        int step = 0;
        struct { const char *k; float *v; } fl[] = {{"lr", &hp.lr}, {"beta1", &hp.beta1}, {"beta2", &hp.beta2},
                                                     {"eps", &hp.eps}, {"weight_decay", &hp.weight_decay},
                                                     {"min_lr", &hp.min_lr}, {"grad_clip", &hp.grad_clip}};
        for (size_t i = 0; !st && i < sizeof fl / sizeof fl[0]; i++) st = get_float(f, "/optim", fl[i].k, fl[i].v, path);
        if (!st) st = get_int(f, "/optim", "warmup", &hp.warmup, path);
        if (!st) st = get_int(f, "/optim", "total_steps", &hp.total_steps, path);
        if (!st) st = get_int(f, "/optim", "step", &step, path);
        if (!st && step < 0) st = mp_error(MP_ERR_FORMAT, "%s: /optim step (%d) is negative", path, step);
        if (!st && (st = mp_adamw_params_check(&hp))) st = mp_error_prefix(st, "%s: /optim", path);
        if (!st) st = mp_adamw_init(&d->opt, &hp, d->n);
        if (!st) st = read_tensors(f, "/optim/m", c, d->opt.m, 1, cx);
        if (!st) st = read_tensors(f, "/optim/v", c, d->opt.v, 1, cx);
        if (!st) d->opt.step = step;
        if (st) goto cleanup;
    }
    if (want_log) {
        if (mp_h5_exists(f, "/train", NULL) && (st = mp_h5_check_links(f, "/train"))) goto cleanup;
        if ((st = read_log(f, &d->log, cx))) goto cleanup;
        d->has_log = 1;
    }
cleanup:
    mp_h5_close(&f);
    if (st) ckpt_data_free(d);
    return st;
}

/* ---- the supervisor: the load runs in a child process (sandbox.h) ----
 * The child parses the file (time limit, address-space limit, no HDF5
 * plugins) and streams the result through a pipe: a header (magic, status),
 * then an error message, or the config, parameters, optimizer state and curve.
 * The parent never calls HDF5 on the file; it validates what it receives
 * (config, sizes) before allocating, and turns a child that crashed, ran out
 * of time or stopped mid-answer into an error naming the file. */

#define CKPT_MAGIC 0x4b43504du        /* "MPCK" */

/* Child: the address space grows by what the load is about to allocate. */
static void child_reserve(void *ctx, size_t bytes) {
    (void)ctx;
    mp_sandbox_limit(bytes);
}

static void wr_u64(int fd, uint64_t v) { mp_sandbox_write(fd, &v, sizeof v); }

static _Noreturn void child_main(int fd, const char *path, uint64_t fsize, int want_opt, int want_log,
                                 unsigned timeout, int fault) {
    mp_sandbox_child_begin(timeout);
    if (fault == MP_CKPT_FAULT_CRASH) raise(SIGSEGV);
    if (fault == MP_CKPT_FAULT_HANG)
        for (;;) pause();
    ckpt_ctx cx = {path, fsize, child_reserve, NULL};
    ckpt_data d;
    mp_status st = load_hdf5(&cx, want_opt, want_log, &d);
    uint32_t hdr[2] = {CKPT_MAGIC, (uint32_t)st};
    mp_sandbox_write(fd, hdr, sizeof hdr);
    if (st) {
        const char *msg = mp_last_error();
        size_t len = strlen(msg);
        if (len > 4000) len = 4000;
        wr_u64(fd, len);
        mp_sandbox_write(fd, msg, len);
        _exit(0);
    }
    mp_sandbox_write(fd, &d.cfg, sizeof d.cfg);
    mp_sandbox_write(fd, d.tokenizer, sizeof d.tokenizer);
    wr_u64(fd, d.n);
    mp_sandbox_write(fd, d.params, d.n * sizeof(float));
    wr_u64(fd, (uint64_t)d.has_opt);
    if (d.has_opt) {
        mp_sandbox_write(fd, &d.opt.hp, sizeof d.opt.hp);
        wr_u64(fd, (uint64_t)d.opt.step);
        mp_sandbox_write(fd, d.opt.m, d.n * sizeof(float));
        mp_sandbox_write(fd, d.opt.v, d.n * sizeof(float));
    }
    wr_u64(fd, (uint64_t)d.has_log);
    if (d.has_log) {
        const mp_train_log *l = &d.log;
        wr_u64(fd, l->n);
        wr_u64(fd, l->n_eval);
        if (l->n) {
            mp_sandbox_write(fd, l->step, l->n * 4);
            mp_sandbox_write(fd, l->loss, l->n * 4);
            mp_sandbox_write(fd, l->lr, l->n * 4);
            mp_sandbox_write(fd, l->tokens, l->n * 8);
            mp_sandbox_write(fd, l->wall, l->n * 8);
        }
        if (l->n_eval) {
            mp_sandbox_write(fd, l->eval_step, l->n_eval * 4);
            mp_sandbox_write(fd, l->eval_loss, l->n_eval * 4);
        }
    }
    wr_u64(fd, CKPT_MAGIC);
    _exit(0);
}

/* ---- the reader process ----
 * The child is a fresh image of this program (posix_spawn of /proc/self/exe),
 * not a bare fork: a forked copy of a threaded process inherits every lock
 * another thread held at the fork, and an allocator that does not take its
 * locks around fork() (GCC 12's AddressSanitizer: about one load in 100-300
 * hung with a second thread allocating) leaves the child blocked for ever. The
 * spawned image finds its task in CKPT_READER_ENV, read by the constructor
 * below before main() runs, and never returns to the program. Where the image
 * cannot be spawned, the child is a fork of this process as before
 * (sandbox.h).
 *
 * The variable cannot make an ordinary process a reader by accident (a
 * per-load token, checked through a pipe: guard_spawn.h). */
#define CKPT_READER_ENV "MECHPROBE_CHECKPOINT_READER"

__attribute__((constructor)) static void ckpt_reader_entry(void) {
    int fd, want_opt, want_log, fault, used = 0;
    unsigned timeout;
    unsigned long long fsize;
    const char *task = mp_guard_task(CKPT_READER_ENV, &fd);
    if (!task) return;
    if (sscanf(task, "%d,%d,%u,%d,%llu,%n", &want_opt, &want_log, &timeout, &fault, &fsize, &used) != 5 ||
        used == 0 || task[used] == '\0' || (want_opt | want_log) > 1 || want_opt < 0 || want_log < 0 || fault < 0 ||
        fault > MP_CKPT_FAULT_HANG || timeout > 10000000u) {
        unsetenv(CKPT_READER_ENV);
        return;
    }
    child_main(fd, task + used, (uint64_t)fsize, want_opt, want_log, timeout, fault);
}

/* The fork fallback's child (sandbox.h). */
typedef struct {
    const char *path;
    uint64_t fsize;
    int want_opt, want_log, fault;
    unsigned timeout;
} reader_task;

static void reader_run(int fd, void *arg) {
    const reader_task *t = arg;
    child_main(fd, t->path, t->fsize, t->want_opt, t->want_log, t->timeout, t->fault);
}

static int rd(mp_sandbox *r, void *buf, size_t n) { return mp_sandbox_read(r, buf, n); }
static int rd_u64(mp_sandbox *r, uint64_t *v) { return rd(r, v, sizeof *v); }

/* Parent: receives the child's answer into a model (and opt, log). Returns
 * MP_OK, the child's own error, or -1 when the stream broke off (the caller
 * then says why from the child's exit status). */
static int receive(mp_sandbox *r, const char *path, uint64_t fsize, mp_model **out, mp_adamw *opt, mp_train_log *log) {
    uint32_t hdr[2];
    uint64_t v, n;
    mp_model *m = NULL;
    mp_config c;
    char tok[16];
    if (rd(r, hdr, sizeof hdr) || hdr[0] != CKPT_MAGIC) return -1;
    if (hdr[1] != MP_OK) {
        char msg[4001];
        if (rd_u64(r, &v) || v > 4000 || rd(r, msg, v)) return -1;
        msg[v] = '\0';
        return (int)mp_error((mp_status)hdr[1], "%s", msg);
    }
    int st = -1;
    if (rd(r, &c, sizeof c) || rd(r, tok, sizeof tok) || rd_u64(r, &n)) goto fail;
    tok[sizeof tok - 1] = '\0';
    /* nothing from the child is trusted: the same checks as for a file */
    if ((st = mp_config_validate(&c, path))) goto fail;
    st = -1;
    if (n != mp_config_n_params(&c) || n / CKPT_MAX_RATIO > fsize) goto fail;
    if ((st = mp_model_new(&m, &c))) goto fail;
    st = -1;
    if (rd(r, m->owned, n * sizeof(float)) || rd_u64(r, &v) || v > 1) goto fail;
    if (v) {
        mp_adamw_params hp;
        uint64_t step;
        if (rd(r, &hp, sizeof hp) || rd_u64(r, &step) || step > (uint64_t)INT32_MAX) goto fail;
        if (!opt) goto fail;
        if ((st = mp_adamw_params_check(&hp)) || (st = mp_adamw_init(opt, &hp, n))) goto fail;
        st = -1;
        opt->step = (long)step;
        if (rd(r, opt->m, n * sizeof(float)) || rd(r, opt->v, n * sizeof(float))) goto fail;
    }
    if (rd_u64(r, &v) || v > 1 || (v && !log)) goto fail;
    if (v) {
        uint64_t nl, ne;
        if (rd_u64(r, &nl) || rd_u64(r, &ne) || nl > CKPT_CURVE_MAX || ne > CKPT_CURVE_MAX) goto fail;
        log->n = log->cap = nl;
        log->n_eval = log->cap_eval = ne;
        if (!(log->step = mp_calloc(nl ? nl : 1, 4, "the loss curve")) || !(log->loss = mp_calloc(nl ? nl : 1, 4, "the loss curve")) ||
            !(log->lr = mp_calloc(nl ? nl : 1, 4, "the loss curve")) || !(log->tokens = mp_calloc(nl ? nl : 1, 8, "the loss curve")) ||
            !(log->wall = mp_calloc(nl ? nl : 1, 8, "the loss curve"))) { st = MP_ERR_NOMEM; goto fail; }
        if (ne && (!(log->eval_step = mp_calloc(ne, 4, "the loss curve")) || !(log->eval_loss = mp_calloc(ne, 4, "the loss curve")))) {
            st = MP_ERR_NOMEM;
            goto fail;
        }
        if (nl && (rd(r, log->step, nl * 4) || rd(r, log->loss, nl * 4) || rd(r, log->lr, nl * 4) ||
                   rd(r, log->tokens, nl * 8) || rd(r, log->wall, nl * 8)))
            goto fail;
        if (ne && (rd(r, log->eval_step, ne * 4) || rd(r, log->eval_loss, ne * 4))) goto fail;
    }
    if (rd_u64(r, &v) || v != CKPT_MAGIC) goto fail;
    if (!strcmp(tok, "bytes")) snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
    *out = m;
    return MP_OK;
fail:
    mp_model_free(m);
    if (opt) mp_adamw_free(opt);
    if (log) mp_train_log_free(log);
    return st;
}

/* Seconds the child may take: g->timeout_s, else mp_guard_timeout's. */
static double load_timeout(const mp_checkpoint_guard *g, uint64_t fsize) {
    return g && g->timeout_s > 0 ? g->timeout_s : mp_guard_timeout(fsize);
}

mp_status mp_checkpoint_load_guarded(const char *path, mp_model **out, mp_adamw *opt, mp_train_log *log,
                                     const mp_checkpoint_guard *g) {
    *out = NULL;
    if (opt) memset(opt, 0, sizeof *opt);
    if (log) memset(log, 0, sizeof *log);
    mp_h5_init();
    struct stat sb;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "checkpoint file name is empty");
    if (stat(path, &sb) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return mp_error(MP_ERR_IO, "%s: cannot open: not a regular file", path);
    if (access(path, R_OK) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint64_t fsize = (uint64_t)sb.st_size;
    double timeout = load_timeout(g, fsize);
    reader_task t = {path, fsize, opt != NULL, log != NULL, g ? g->child_fault : 0, (unsigned)timeout + 1};
    size_t tlen = strlen(path) + 96;
    char *task = malloc(tlen); /* NULL: the fork fallback */
    if (task)
        snprintf(task, tlen, "%d,%d,%u,%d,%llu,%s", t.want_opt, t.want_log, t.timeout, t.fault,
                 (unsigned long long)fsize, path);
    const mp_sandbox_spec spec = {CKPT_READER_ENV, (const void *)&ckpt_reader_entry, task,
                                  "mechprobe (checkpoint reader)", g && g->fork_only, reader_run, &t,
                                  "load", "reading the HDF5 checkpoint", "HDF5 checkpoint", "loader"};
    mp_sandbox r;
    mp_status ss = mp_sandbox_start(&r, &spec, path, timeout);
    free(task);
    if (ss != MP_OK) return ss;
    int st = receive(&r, path, fsize, out, opt, log);
    if (!mp_sandbox_end(&r, st == MP_OK) && st == MP_OK) {
        mp_model_free(*out);
        *out = NULL;
        if (opt) mp_adamw_free(opt);
        if (log) mp_train_log_free(log);
        st = -1;
    }
    if (st >= 0) {
        if (st == MP_OK) {
            snprintf((*out)->source, sizeof (*out)->source, "%s", path);
            (*out)->format = "checkpoint";
        }
        return (mp_status)st;
    }
    return mp_sandbox_failure(&r);
}

mp_status mp_checkpoint_load(const char *path, mp_model **out, mp_adamw *opt, mp_train_log *log) {
    return mp_checkpoint_load_guarded(path, out, opt, log, NULL);
}

int mp_file_is_hdf5(const char *path) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char buf[8];
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0; /* never open a FIFO to sniff it */
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    size_t n = fread(buf, 1, 8, fp);
    fclose(fp);
    return n == 8 && memcmp(buf, sig, 8) == 0;
}
