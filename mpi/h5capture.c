/* h5capture.c — the dataset capture writer (see h5capture.h): prompts split
 * across ranks, ragged lengths, one HDF5 file written with collective
 * parallel HDF5 (the MPI-IO driver) when several ranks share it, committed
 * atomically by rank 0 after every rank agreed. Rank 0 names the temporary
 * through mp_out (destination checks, "<out>.tmp.<pid>.<n>" name, signal and
 * stale-temporary cleanup); the file is closed with h5io's checked close and,
 * when it is thrown away, with its writes discarded (a full disk). A step that
 * fails on one rank only never leaves the others waiting in a collective call:
 * every rank carries its status to the next point where all agree. */
#include "h5capture.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "h5io.h"
#include "h5stream.h"
#include "h5run.h"
#include "config.h"
#include "mp_mpi.h"

#ifdef MP_HAVE_MPI
#include <mpi.h>
#endif

typedef struct cap_ds {
    struct mp_h5cap *cap;
    hid_t id, fspace;
    char path[200];
    int ndim, t_axis;
    struct cap_ds *next;
} cap_ds;

struct mp_h5cap {
    char tmp[PATH_MAX], out[PATH_MAX];
    mp_out o;           /* rank 0: the temporary, its checks and cleanup */
    char fail_at[200];  /* test hook (MP_TEST_HOOKS): the step this rank fails at */
    hid_t file;
    int rank, size;
    int n_mine;
    int64_t row0, n_total, tmax;
    int32_t *len_mine;  /* this rank's lengths */
    int64_t row;        /* row of the prompt running now */
    int64_t vocab;
    cap_ds *ds;         /* every dataset (newest first) */
    cap_ds *tokens, *logits;
    mp_status hook_st;
};

static void close_datasets(mp_h5cap *c) {
    for (cap_ds *d = c->ds, *n; d; d = n) {
        n = d->next;
        if (d->fspace >= 0) H5Sclose(d->fspace);
        if (d->id >= 0) H5Dclose(d->id);
        free(d);
    }
    c->ds = c->tokens = c->logits = NULL;
}

/* The file is thrown away: its pending writes go nowhere, so the closes
 * cannot fail (collective under MPI-IO: every rank calls it together). */
static void discard_file(mp_h5cap *c) {
    if (c->file < 0) return;
    mp_h5_discard_writes(c->file);
    close_datasets(c);
    mp_h5_discard_close(c->file);
    c->file = H5I_INVALID_HID;
}

static void free_cap(mp_h5cap *c) {
    if (!c) return;
    discard_file(c);
    mp_out_abort(&c->o); /* rank 0: removes the temporary; others: no-op */
    free(c->len_mine);
    free(c);
}

/* Test hook: MP_TEST_H5CAP_FAIL="<rank>:<step>" makes that rank fail at that
 * step of mp_h5cap_create (a dataset path, or "write:/lengths" for rank 0's
 * write of the lengths), to test that the other ranks do not wait for it. */
static mp_status test_fail(const mp_h5cap *c, const char *step) {
#ifdef MP_TEST_HOOKS
    if (c->fail_at[0] && strcmp(c->fail_at, step) == 0)
        return mp_error(MP_ERR_IO, "%s: %s: injected failure (MP_TEST_H5CAP_FAIL)", c->out, step);
#else
    (void)c;
    (void)step;
#endif
    return MP_OK;
}

/* Before a collective HDF5 call: st if this rank failed, else the error of the
 * lowest rank that did (every rank gets a status, none enters the call alone
 * or waits in it for a rank that gave up). */
static mp_status agree(const mp_h5cap *c, mp_status st) {
    int first = mp_mpi_first_failed(st != MP_OK);
    if (st || first < 0) return st;
    return mp_error(MP_ERR_IO, "%s: not written: rank %d of %d failed (its message says why)", c->out, first, c->size);
}

/* Creates a dataset on every rank (collective) and keeps it open. Every rank
 * calls it for every dataset, also after a failure (prev, this rank's status
 * so far): the ranks agree first, so a failure on one rank, here or since the
 * last dataset, stops them all before the same dataset, and all of them go on
 * passing the same agreement points to the end. */
static mp_status add_ds(mp_h5cap *c, const char *path, hid_t type, int ndim, const int64_t *shape, int t_axis,
                        int compress, const void *fill, mp_status prev, cap_ds **out) {
    int64_t chunk[MP_H5_MAXDIM];
    int chunked = mp_h5_chunk_dims(ndim, shape, t_axis, 4, (size_t)1 << 20, chunk) == 0;
    cap_ds *d = prev ? NULL : mp_calloc(1, sizeof *d, "a capture dataset");
    if ((prev = agree(c, prev ? prev : d ? test_fail(c, path) : MP_ERR_NOMEM))) {
        free(d);
        return prev;
    }
    d->cap = c;
    d->id = d->fspace = H5I_INVALID_HID;
    d->ndim = ndim;
    d->t_axis = t_axis;
    snprintf(d->path, sizeof d->path, "%s", path);
    d->next = c->ds;
    c->ds = d;
    mp_status st = mp_h5_create_dataset(c->file, path, type, ndim, shape, chunked ? chunk : NULL,
                                        chunked ? compress : 0, fill, &d->id);
    if (st) return mp_error_prefix(st, "%s", c->out);
    if ((d->fspace = H5Dget_space(d->id)) < 0) return mp_h5_error(MP_ERR_HDF5, "%s: %s: no dataspace", c->out, path);
    if (out) *out = d;
    return MP_OK;
}

/* The error of a failed step `what` of the capture: the deferred write error
 * of the driver in words when there is one ("no space left on device"),
 * else HDF5's. */
static mp_status deferred_error(const mp_h5cap *c, const char *what) {
    int e = c->size == 1 ? mp_h5_stream_deferred(c->file) : 0;
    if (!e) return mp_h5_error(MP_ERR_IO, "%s: cannot write (%s)", c->out, what);
    H5Eclear2(H5E_DEFAULT);
    const char *w = mp_h5_errno_words(e);
    return mp_error(MP_ERR_IO, "%s: cannot write (%s): %s", c->out, what, w ? w : strerror(e));
}

static mp_status write_block(cap_ds *d, hid_t type, const int64_t *off, const int64_t *cnt, const void *data) {
    hsize_t start[MP_H5_MAXDIM], count[MP_H5_MAXDIM];
    size_t numel = 1;
    for (int i = 0; i < d->ndim; i++) {
        start[i] = (hsize_t)off[i];
        count[i] = (hsize_t)cnt[i];
        numel *= (size_t)cnt[i];
    }
    if (!numel) return MP_OK;
    mp_status st = MP_OK;
    hid_t ms = H5Screate_simple(d->ndim, count, NULL);
    if (ms < 0 || H5Sselect_hyperslab(d->fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dwrite(d->id, type, ms, d->fspace, H5P_DEFAULT, data) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write row %lld", d->cap->out, d->path, (long long)off[0]);
    if (ms >= 0) H5Sclose(ms);
    if (!st && d->cap->size == 1 && mp_h5_stream_deferred(d->cap->file)) /* a chunk evicted to a full disk */
        st = deferred_error(d->cap, d->path);
    return st;
}

/* A hook view of the running prompt (B = 1) at its place in /acts/<name>. */
static int hook_cb(void *user, const mp_hook_info *info, float *data) {
    cap_ds *d = user;
    int64_t off[MP_H5_MAXDIM] = {0};
    if (info->ndim != d->ndim) {
        mp_error(MP_ERR_ARG, "%s: %s: view of rank %d for a dataset of rank %d", d->cap->out, d->path, info->ndim,
                 d->ndim);
        return 1;
    }
    off[d->t_axis] = info->pos0;
    if (info->axis >= 0 && info->axis < d->ndim) off[info->axis] += info->offset;
    off[0] += d->cap->row;
    return write_block(d, H5T_NATIVE_FLOAT, off, info->shape, data) != MP_OK;
}

typedef struct {
    mp_h5cap *c;
    const mp_config *cfg;
    mp_hooks *hooks;
    int compress, n;
    mp_status st;
} visit_ctx;

static void visit(void *u, mp_hook_id id, int layer, const char *name) {
    visit_ctx *v = u;
    char path[200];
    int64_t shape[4];
    static const float neg_inf = -INFINITY;
    snprintf(path, sizeof path, "/acts/%s", name);
    int ndim = mp_hook_shape(v->cfg, id, (int)v->c->n_total, (int)v->c->tmax, 0, shape);
    int t_axis = mp_hook_shape_kind[id] == MP_SHAPE_BHTS ? 2 : 1;
    cap_ds *d;
    v->st = add_ds(v->c, path, H5T_NATIVE_FLOAT, ndim, shape, t_axis, v->compress,
                   id == MP_HOOK_ATTN_SCORES ? &neg_inf : NULL, v->st, &d);
    if (!v->st) v->st = mp_hooks_add_at(v->hooks, id, layer, hook_cb, d);
    v->n++;
}

/* Rank 0 checks the destination and creates the temporary (mp_out: a
 * device, FIFO, directory or symbolic link is refused before anything runs;
 * the name is registered for removal on a signal, and stale temporaries of
 * dead processes are removed), then tells the others its name. */
static mp_status make_tmp(mp_h5cap *c, const char *out) {
    mp_status st0 = MP_OK;
    c->tmp[0] = '\0';
    if (c->rank == 0) {
        st0 = mp_out_begin(&c->o, out);
        if (!st0) {
            /* one process: HDF5 writes through c->o.fd (mechprobe's driver);
             * several: MPI-IO opens the name on every rank, and the commit
             * checks that the name is still the file rank 0 created */
            if (strlen(c->o.tmp) >= sizeof c->tmp) {
                st0 = mp_error(MP_ERR_ARG, "%s: file name too long", out);
                mp_out_abort(&c->o);
            } else {
                snprintf(c->tmp, sizeof c->tmp, "%s", c->o.tmp);
            }
        }
    }
    mp_status st = mp_mpi_bcast(c->tmp, sizeof c->tmp, 0);
    if (st0) return st0;
    if (st) return st;
    if (!c->tmp[0]) return mp_error(MP_ERR_IO, "%s: rank 0 could not create the file (its message says why)", out);
    return MP_OK;
}

mp_status mp_h5cap_create(mp_h5cap **out, const mp_h5cap_params *p, const mp_config *cfg, const int32_t *lengths,
                          int n_mine, mp_hooks *hooks, int64_t *n_total, int *n_datasets) {
    mp_status st = MP_OK;
    hid_t fapl = H5I_INVALID_HID;
    int64_t *counts = NULL;
    int32_t *all = NULL;
    *out = NULL;
    mp_h5_init();
    if (!p->out || !*p->out) return mp_error(MP_ERR_ARG, "capture: no output file name");
    if (strlen(p->out) + 16 > PATH_MAX) return mp_error(MP_ERR_ARG, "%s: file name too long", p->out);
    mp_h5cap *c = mp_calloc(1, sizeof *c, "a capture");
    if (!c) return MP_ERR_NOMEM;
    c->file = H5I_INVALID_HID;
    mp_out_init(&c->o);
    c->rank = mp_mpi_rank();
    c->size = mp_mpi_size();
    c->n_mine = n_mine;
    c->vocab = cfg->vocab;
    snprintf(c->out, sizeof c->out, "%s", p->out);
#ifdef MP_TEST_HOOKS
    const char *fe = getenv("MP_TEST_H5CAP_FAIL");
    char *colon = fe ? strchr(fe, ':') : NULL;
    if (colon && atoi(fe) == c->rank) snprintf(c->fail_at, sizeof c->fail_at, "%s", colon + 1);
#endif
    counts = mp_malloc((size_t)c->size * sizeof *counts, "prompt counts");
    c->len_mine = mp_malloc((size_t)(n_mine > 0 ? n_mine : 1) * sizeof *c->len_mine, "prompt lengths");
    if (!counts || !c->len_mine) { st = MP_ERR_NOMEM; goto cleanup; }
    if (n_mine) memcpy(c->len_mine, lengths, (size_t)n_mine * sizeof *lengths);
    /* who has which rows */
    if ((st = mp_mpi_allgather_i64(n_mine, counts))) goto cleanup;
    for (int r = 0; r < c->size; r++) {
        if (r < c->rank) c->row0 += counts[r];
        c->n_total += counts[r];
    }
    if (c->n_total < 1) { st = mp_error(MP_ERR_ARG, "%s: no prompts to capture", p->out); goto cleanup; }
    if (c->n_total > INT32_MAX) { st = mp_error(MP_ERR_ARG, "%s: too many prompts", p->out); goto cleanup; }
    if (!(all = mp_malloc((size_t)c->n_total * sizeof *all, "prompt lengths"))) { st = MP_ERR_NOMEM; goto cleanup; }
    if ((st = mp_mpi_allgatherv_i32(lengths, n_mine, all, counts))) goto cleanup;
    for (int64_t i = 0; i < c->n_total; i++) {
        if (all[i] < 1) {
            st = mp_error(MP_ERR_ARG, "%s: prompt %lld is empty", p->out, (long long)i + 1);
            goto cleanup;
        }
        if (all[i] > c->tmax) c->tmax = all[i];
    }
    if (p->compress < 0 || p->compress > 9) {
        st = mp_error(MP_ERR_ARG, "%s: compression level %d outside 0..9", p->out, p->compress);
        goto cleanup;
    }
    if (p->compress && c->size > 1) {
        st = mp_error(MP_ERR_ARG, "%s: compression needs every rank to write every chunk together, which ragged "
                      "prompts do not allow: capture with several ranks uncompressed, then h5repack -f SHUF -f "
                      "GZIP=%d", p->out, p->compress);
        goto cleanup;
    }
    if (p->globs && *p->globs) { /* every rank finds the same mistake: no file is made */
        char bad[256];
        int n = mp_hook_select(cfg, p->globs, NULL, NULL, bad, sizeof bad);
        if (bad[0]) { st = mp_error(MP_ERR_ARG, "capture: hook name '%s' matches no hook point of this model", bad); goto cleanup; }
        if (n == 0) { st = mp_error(MP_ERR_ARG, "capture: hook names '%s' match no hook point", p->globs); goto cleanup; }
    }
    /* the file: rank 0 names it, every rank opens it (MPI-IO when several) */
    if ((st = make_tmp(c, p->out))) goto cleanup;
    /* From here a step may fail on one rank only (a write, an allocation):
     * each rank keeps its status and skips its own work, but passes every
     * agreement point (mp_mpi_first_failed: before H5Fcreate, before each
     * collective dataset create in add_ds, at the end), so the ranks stop
     * before the same collective call and none waits in a call that a failed
     * rank never makes. (A collective HDF5 call that itself fails on one rank
     * only is beyond this: HDF5 keeps such calls consistent.) */
    if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0) st = mp_h5_error(MP_ERR_HDF5, "%s: cannot create", p->out);
#if defined(MP_HAVE_MPI) && defined(H5_HAVE_PARALLEL)
    if (!st && c->size > 1 && H5Pset_fapl_mpio(fapl, *(MPI_Comm *)mp_mpi_comm_ptr(), MPI_INFO_NULL) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: cannot use MPI-IO", p->out);
#else
    if (!st && c->size > 1) st = mp_error(MP_ERR_ARG, "%s: HDF5 without parallel support", p->out);
#endif
    if (!st && c->size == 1 && (H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
                                H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
                                mp_h5_stream_set_fd(fapl, c->o.fd) < 0))
        st = mp_h5_error(MP_ERR_HDF5, "%s: cannot create", p->out);
    if (mp_mpi_first_failed(st != MP_OK) >= 0) { /* H5Fcreate is collective */
        if (!st) st = mp_error(MP_ERR_IO, "%s: not written: another rank could not open it", p->out);
        goto cleanup;
    }
    c->file = H5Fcreate(c->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    /* one process: write errors (a full disk) are kept from HDF5 and checked
     * after each write and flush, so HDF5 never meets one it cannot recover
     * from (a failed metadata flush; chunks whose write failed leak) */
    if (c->file >= 0 && c->size == 1 && mp_h5_stream_defer_errors(c->file, 1) < 0)
        st = mp_error(MP_ERR_HDF5, "%s: not written with mechprobe's HDF5 driver", p->out);
    if (c->file < 0 && (c->rank != 0 || (st = mp_out_verify(&c->o)) == MP_OK))
        st = mp_h5_error(MP_ERR_IO, "%s: cannot create %s", p->out, c->tmp);
    if (!st && ((st = mp_h5_attr_set_string(c->file, "/", "format", "mechprobe.run")) ||
                (st = mp_h5_attr_set_int(c->file, "/", "version", 1)) ||
                (st = mp_h5_attr_set_string(c->file, "/", "mechprobe_version", MP_VERSION)) ||
                (st = mp_h5_write_model_attrs(c->file, p->out, cfg, p->source, p->tokenizer)) ||
                (p->device && (st = mp_h5_attr_set_string(c->file, "/", "device", p->device))) ||
                (p->precision && (st = mp_h5_attr_set_string(c->file, "/", "precision", p->precision)))))
        { /* st says why */ }
    int64_t nshape[1] = {c->n_total}, tshape[2] = {c->n_total, c->tmax};
    static const int32_t pad = -1;
    cap_ds *lens = NULL;
    /* every rank passes every add_ds (its agreement point), failed or not */
    st = add_ds(c, "/lengths", H5T_NATIVE_INT32, 1, nshape, 0, 0, NULL, st, &lens);
    if (!st && c->rank == 0) {
        int64_t off[1] = {0};
        if (!(st = test_fail(c, "write:/lengths"))) st = write_block(lens, H5T_NATIVE_INT32, off, nshape, all);
    }
    st = add_ds(c, "/tokens", H5T_NATIVE_INT32, 2, tshape, 1, p->compress, &pad, st, &c->tokens);
    visit_ctx v = {c, cfg, hooks, p->compress, 0, st};
    if (p->globs && *p->globs) {
        mp_hook_select(cfg, p->globs, visit, &v, NULL, 0);
        st = v.st;
    }
    if (p->logits) {
        int64_t lshape[3] = {c->n_total, c->tmax, cfg->vocab};
        if (!(st = add_ds(c, "/logits", H5T_NATIVE_FLOAT, 3, lshape, 1, p->compress, NULL, st, &c->logits))) v.n++;
    }
    st = agree(c, st); /* the last point: the ranks leave together, the file open on all or closed on all */
    if (!st) {
        *n_total = c->n_total;
        *n_datasets = v.n;
    }
cleanup:
    if (fapl >= 0) H5Pclose(fapl);
    free(counts);
    free(all);
    if (st) {
        free_cap(c); /* every rank gets here together once the file exists */
        return st;
    }
    *out = c;
    return MP_OK;
}

mp_status mp_h5cap_begin(mp_h5cap *c, int i, const int *tokens) {
    if (i < 0 || i >= c->n_mine) return mp_error(MP_ERR_ARG, "%s: prompt %d of %d", c->out, i + 1, c->n_mine);
    c->row = c->row0 + i;
    int64_t off[2] = {c->row, 0}, cnt[2] = {1, c->len_mine[i]};
    return write_block(c->tokens, H5T_NATIVE_INT, off, cnt, tokens);
}

int64_t mp_h5cap_tmax(const mp_h5cap *c) { return c->tmax; }

mp_status mp_h5cap_write_logits(mp_h5cap *c, int i, const float *logits) {
    if (!c->logits) return mp_error(MP_ERR_ARG, "%s: logits were not asked for", c->out);
    int64_t off[3] = {c->row0 + i, 0, 0}, cnt[3] = {1, c->len_mine[i], c->vocab};
    return write_block(c->logits, H5T_NATIVE_FLOAT, off, cnt, logits);
}

mp_status mp_h5cap_finish(mp_h5cap *c, mp_status failed) {
    if (!c) return MP_OK;
    char msg[1024] = "";
    mp_status st = MP_OK, cst = MP_OK;
    if (failed) snprintf(msg, sizeof msg, "%s", mp_last_error());
    /* one process: write what HDF5 still caches while a failure (a full disk)
     * can still be undone (MPI-IO writes through); the driver keeps write
     * errors from HDF5 (deferred, see create) and they are checked here */
    if (!failed && c->size == 1) {
        for (cap_ds *d = c->ds; d && !cst; d = d->next)
            if (d->id >= 0 && (H5Dflush(d->id) < 0 || mp_h5_stream_deferred(c->file))) {
                cst = deferred_error(c, d->path);
                snprintf(msg, sizeof msg, "%s", mp_last_error());
            }
        if (!cst) { /* the remaining metadata, still deferred; then the checked close */
            close_datasets(c);
            if (H5Fflush(c->file, H5F_SCOPE_LOCAL) < 0 || mp_h5_stream_deferred(c->file)) {
                char what[PATH_MAX + 32];
                snprintf(what, sizeof what, "closing %s", c->tmp);
                cst = deferred_error(c, what);
                snprintf(msg, sizeof msg, "%s", mp_last_error());
            } else {
                mp_h5_stream_defer_errors(c->file, 0);
            }
        }
    }
    int first = mp_mpi_first_failed(failed || cst);
    /* close on every rank together (collective under MPI-IO) */
    if (first >= 0) {
        discard_file(c);
    } else {
        char what[PATH_MAX * 2 + 32];
        snprintf(what, sizeof what, "%s: cannot write (closing %s)", c->out, c->tmp);
        close_datasets(c);
        cst = mp_h5_close_checked(c->file, what);
        c->file = H5I_INVALID_HID;
        if (cst) snprintf(msg, sizeof msg, "%s", mp_last_error());
    }
    int first_close = first >= 0 ? -1 : mp_mpi_first_failed(cst != MP_OK);
    /* rank 0 commits (fsync, destination checked again, rename, directory
     * sync) or removes, then says how it went */
    int32_t ce = 0;
    if (c->rank == 0) {
        if (first < 0 && first_close < 0) {
            if (mp_out_commit(&c->o, 1) != MP_OK) {
                ce = 1;
                snprintf(msg, sizeof msg, "%s", mp_last_error());
            }
        } else {
            mp_out_abort(&c->o);
        }
    }
    if (mp_mpi_bcast(&ce, sizeof ce, 0) != MP_OK) ce = 1;
    if (failed || cst) {
        st = failed ? failed : cst;
        mp_error(st, "%s", msg);
    } else if (first >= 0 || first_close >= 0) {
        st = mp_error(MP_ERR_IO, "%s: not written: rank %d of %d failed (its message says why)", c->out,
                      first >= 0 ? first : first_close, c->size);
    } else if (ce) {
        st = c->rank == 0 ? mp_error(MP_ERR_IO, "%s", msg)
                          : mp_error(MP_ERR_IO, "%s: not written: rank 0 could not commit it", c->out);
    }
    free_cap(c);
    return st;
}
