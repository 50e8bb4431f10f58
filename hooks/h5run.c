/* h5run.c — the HDF5 run-file writer: atomic creation, root and /model
 * attributes, /tokens, float32 datasets chunked along T and written in blocks,
 * and the capture adapter that streams hook views into /acts/<hook name>. */
#include "h5run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "model.h"

struct mp_h5ds {
    mp_h5run *run;
    hid_t id;
    hid_t fspace;  /* the dataset's file dataspace (selection reset per write) */
    char *path;
    int ndim;
    int64_t shape[MP_H5_MAXDIM];
    int t_axis;    /* axis chunked along / placed at pos0 by the capture */
    mp_h5ds *next;
};

struct mp_h5run {
    mp_h5_atomic at;
    mp_h5run_params p;
    mp_h5ds *ds;   /* every dataset created, newest first */
};

mp_h5run_params mp_h5run_params_default(void) {
    mp_h5run_params p;
    memset(&p, 0, sizeof p);
    p.chunk_bytes = (size_t)1 << 20;
    return p;
}

hid_t mp_h5run_file(mp_h5run *run) { return run ? run->at.file : H5I_INVALID_HID; }
const char *mp_h5run_path(const mp_h5run *run) { return run && run->at.path ? run->at.path : "?"; }

/* Closes every dataset; returns 0, or -1 when a close failed (closing
 * writes the chunks HDF5 still caches: a full disk shows up here). */
static int free_datasets(mp_h5run *run) {
    int bad = 0;
    for (mp_h5ds *d = run->ds, *next; d; d = next) {
        next = d->next;
        if (d->fspace >= 0) H5Sclose(d->fspace);
        if (d->id >= 0 && H5Dclose(d->id) < 0 && !bad) bad = -1;
        free(d->path);
        free(d);
    }
    run->ds = NULL;
    return bad;
}

void mp_h5run_abort(mp_h5run *run) {
    if (!run) return;
    /* closing a dataset writes its cached chunks: into memory from here on, so
     * no close fails (libhdf5 leaks the chunks of a close that failed) */
    mp_h5_discard_writes(run->at.file);
    free_datasets(run);
    mp_h5_atomic_abort(&run->at);
    free(run);
}

mp_status mp_h5run_commit(mp_h5run *run) {
    if (!run) return mp_error(MP_ERR_ARG, "mp_h5run_commit: no run");
    /* write the cached chunks while a failure (full disk) can still be undone */
    for (mp_h5ds *d = run->ds; d; d = d->next) {
        if (d->id >= 0 && H5Dflush(d->id) < 0) {
            mp_status st = mp_h5_error(MP_ERR_IO, "%s: cannot write (%s)", mp_h5run_path(run), d->path);
            mp_h5run_abort(run);
            return st;
        }
    }
    if (free_datasets(run) < 0) {
        mp_status st = mp_h5_error(MP_ERR_IO, "%s: cannot write (closing its datasets)", mp_h5run_path(run));
        mp_h5run_abort(run);
        return st;
    }
    mp_status st = mp_h5_atomic_commit(&run->at);
    free(run);
    return st;
}

mp_status mp_h5run_create(mp_h5run **out, const char *path, const mp_h5run_params *p) {
    mp_status st;
    *out = NULL;
    mp_h5run_params def = mp_h5run_params_default();
    if (!p) p = &def;
    if (p->compress < 0 || p->compress > 9)
        return mp_error(MP_ERR_ARG, "%s: compression level %d outside 0..9", path ? path : "?", p->compress);
    mp_h5run *run = mp_calloc(1, sizeof *run, "a run file");
    if (!run) return MP_ERR_NOMEM;
    run->p = *p;
    if (!run->p.chunk_bytes) run->p.chunk_bytes = def.chunk_bytes;
    if ((st = mp_h5_atomic_create(&run->at, path)) != MP_OK) goto cleanup;
    hid_t f = run->at.file;
    if ((st = mp_h5_attr_set_string(f, "/", "format", "mechprobe.run")) != MP_OK) goto cleanup;
    if ((st = mp_h5_attr_set_int(f, "/", "version", 1)) != MP_OK) goto cleanup;
    if ((st = mp_h5_attr_set_string(f, "/", "mechprobe_version", MP_VERSION)) != MP_OK) goto cleanup;
    if (p->has_seed && (st = mp_h5_attr_set_int(f, "/", "seed", p->seed)) != MP_OK) goto cleanup;
cleanup:
    if (st != MP_OK) {
        mp_h5run_abort(run);
        return st;
    }
    *out = run;
    return MP_OK;
}

/* The shortest decimal that reads back as the same float, as a double, so
 * that h5py shows norm_eps as 1e-05 rather than 9.99999975e-06. */
static double float_as_decimal(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static const char *norm_name(mp_norm_kind k) { return k == MP_NORM_LAYER ? "layer" : "rms"; }
static const char *mlp_name(const mp_config *c) {
    return c->mlp == MP_MLP_GELU ? (c->gelu_tanh ? "gelu_tanh" : "gelu") : c->mlp == MP_MLP_NONE ? "none" : "swiglu";
}

mp_status mp_h5run_write_model(mp_h5run *run, const mp_config *c, const char *source) {
    return mp_h5_write_model_attrs(run->at.file, run->at.path, c, source);
}

mp_status mp_h5_write_model_attrs(hid_t f, const char *what, const mp_config *c, const char *source) {
    mp_status st = MP_OK;
    if (!mp_h5_exists(f, "/model", NULL)) {
        hid_t g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) return mp_h5_error(MP_ERR_HDF5, "%s: /model: cannot create group", what);
        H5Gclose(g);
    }
    struct { const char *k; int v; } ints[] = {
        {"d_model", c->d_model}, {"n_layer", c->n_layer}, {"n_head", c->n_head}, {"n_kv_head", c->n_kv_head},
        {"d_head", c->d_head},   {"d_mlp", c->d_mlp},     {"vocab", c->vocab},   {"ctx", c->ctx},
        {"tied", c->tied},
    };
    for (size_t i = 0; st == MP_OK && i < sizeof ints / sizeof ints[0]; i++)
        st = mp_h5_attr_set_int(f, "/model", ints[i].k, ints[i].v);
    if (st == MP_OK) st = mp_h5_attr_set_float(f, "/model", "rope_theta", float_as_decimal(c->rope_theta));
    if (st == MP_OK) st = mp_h5_attr_set_float(f, "/model", "norm_eps", float_as_decimal(c->norm_eps));
    if (st == MP_OK) st = mp_h5_attr_set_string(f, "/model", "norm", norm_name(c->norm));
    if (st == MP_OK) st = mp_h5_attr_set_string(f, "/model", "mlp", mlp_name(c));
    if (st == MP_OK) st = mp_h5_attr_set_string(f, "/model", "pos", mp_pos_name(c->pos));
    if (st == MP_OK && c->attn != MP_ATTN_SOFTMAX) {
        st = mp_h5_attr_set_string(f, "/model", "attn", mp_attn_name(c->attn));
        if (st == MP_OK && (c->attn == MP_ATTN_ENTMAX || c->attn == MP_ATTN_ASENTMAX))
            st = mp_h5_attr_set_float(f, "/model", "attn_alpha", mp_attn_alpha(c));
    }
    if (st == MP_OK && c->rope_scaling != MP_ROPE_SCALING_NONE) {
        st = mp_h5_attr_set_string(f, "/model", "rope_scaling", mp_rope_scaling_name(c->rope_scaling));
        if (st == MP_OK) st = mp_h5_attr_set_float(f, "/model", "rope_factor", float_as_decimal(c->rope_factor));
    }
    if (st == MP_OK) st = mp_h5_attr_set_string(f, "/model", "source", source ? source : "");
    return st;
}

mp_status mp_h5run_write_tokens(mp_h5run *run, const int *tokens, int B, int T) {
    if (B < 0 || T < 0) return mp_error(MP_ERR_ARG, "%s: /tokens: bad shape [%d,%d]", run->at.path, B, T);
    int64_t shape[2] = {B, T};
    hid_t ds;
    mp_status st = mp_h5_create_dataset(run->at.file, "/tokens", H5T_NATIVE_INT, 2, shape, NULL, 0, NULL, &ds);
    if (st != MP_OK) return st;
    if ((int64_t)B * T > 0 && H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: /tokens: cannot write", run->at.path);
    if (H5Dclose(ds) < 0 && st == MP_OK) st = mp_h5_error(MP_ERR_HDF5, "%s: /tokens: cannot write", run->at.path);
    return st;
}

/* mp_h5run_dataset with an optional fill value for never-written elements. */
static mp_status run_dataset(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                             const float *fill, mp_h5ds **out) {
    mp_status st = MP_OK;
    int64_t chunk[MP_H5_MAXDIM];
    *out = NULL;
    if (ndim < 0 || ndim > MP_H5_MAXDIM || t_axis < -1 || t_axis >= (ndim ? ndim : 1))
        return mp_error(MP_ERR_ARG, "%s: %s: bad rank %d or T axis %d", run->at.path, path, ndim, t_axis);
    int chunked = ndim > 0 &&
                  mp_h5_chunk_dims(ndim, shape, t_axis, sizeof(float), run->p.chunk_bytes, chunk) == 0;
    mp_h5ds *d = mp_calloc(1, sizeof *d, "a run dataset");
    if (!d) return MP_ERR_NOMEM;
    d->id = d->fspace = H5I_INVALID_HID;
    d->run = run;
    d->ndim = ndim;
    d->t_axis = t_axis < 0 ? 0 : t_axis;
    memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
    d->path = strdup(path);
    if (!d->path) { st = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    /* Replacing a dataset this run created: drop our handle on the old one. */
    for (mp_h5ds **pp = &run->ds; *pp;) {
        mp_h5ds *o = *pp;
        if (strcmp(o->path, path) == 0) {
            *pp = o->next;
            if (o->fspace >= 0) H5Sclose(o->fspace);
            if (o->id >= 0) H5Dclose(o->id);
            free(o->path);
            free(o);
        } else {
            pp = &o->next;
        }
    }
    st = mp_h5_create_dataset(run->at.file, path, H5T_NATIVE_FLOAT, ndim, shape, chunked ? chunk : NULL,
                              chunked ? run->p.compress : 0, fill, &d->id);
    if (st != MP_OK) goto cleanup;
    d->fspace = H5Dget_space(d->id);
    if (d->fspace < 0) { st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot get dataspace", run->at.path, path); goto cleanup; }
cleanup:
    if (st != MP_OK) {
        if (d->fspace >= 0) H5Sclose(d->fspace);
        if (d->id >= 0) H5Dclose(d->id);
        free(d->path);
        free(d);
        return st;
    }
    d->next = run->ds;
    run->ds = d;
    *out = d;
    return MP_OK;
}

mp_status mp_h5run_dataset(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                           mp_h5ds **ds) {
    return run_dataset(run, path, ndim, shape, t_axis, NULL, ds);
}

static void fmt_block(char *buf, size_t n, int ndim, const int64_t *off, const int64_t *cnt) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld:%lld", i ? "," : "", (long long)off[i],
                              (long long)(off[i] + cnt[i]));
    if (k < n) snprintf(buf + k, n - k, "]");
}

mp_status mp_h5ds_write(mp_h5ds *ds, const int64_t *offset, const int64_t *count, const float *data) {
    hsize_t start[MP_H5_MAXDIM], cnt[MP_H5_MAXDIM];
    int64_t numel = 1;
    mp_h5_init();
    for (int i = 0; i < ds->ndim; i++) {
        if (offset[i] < 0 || count[i] < 0 || offset[i] > ds->shape[i] || count[i] > ds->shape[i] - offset[i]) {
            char blk[256], shp[160];
            int64_t zero[MP_H5_MAXDIM] = {0};
            fmt_block(blk, sizeof blk, ds->ndim, offset, count);
            fmt_block(shp, sizeof shp, ds->ndim, zero, ds->shape);
            return mp_error(MP_ERR_ARG, "%s: %s: block %s lies outside the dataset %s", ds->run->at.path, ds->path,
                            blk, shp);
        }
        start[i] = (hsize_t)offset[i];
        cnt[i] = (hsize_t)count[i];
        numel *= count[i];
    }
    if (numel == 0) return MP_OK;
    mp_status st = MP_OK;
    hid_t mspace = ds->ndim ? H5Screate_simple(ds->ndim, cnt, NULL) : H5Screate(H5S_SCALAR);
    if (mspace < 0 || (ds->ndim && H5Sselect_hyperslab(ds->fspace, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0) ||
        (!ds->ndim && H5Sselect_all(ds->fspace) < 0) ||
        H5Dwrite(ds->id, H5T_NATIVE_FLOAT, mspace, ds->fspace, H5P_DEFAULT, data) < 0)
        st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot write", ds->run->at.path, ds->path);
    if (mspace >= 0) H5Sclose(mspace);
    return st;
}

mp_status mp_h5run_write_f32(mp_h5run *run, const char *path, int ndim, const int64_t *shape, int t_axis,
                             const float *data) {
    mp_h5ds *ds;
    int64_t zero[MP_H5_MAXDIM] = {0};
    mp_status st = mp_h5run_dataset(run, path, ndim, shape, t_axis, &ds);
    if (st != MP_OK) return st;
    return mp_h5ds_write(ds, zero, shape, data);
}

/* ---- capture adapter ---- */

/* Writes one hook view at its place in /acts/<name>. */
static int capture_cb(void *user, const mp_hook_info *info, float *data) {
    mp_h5ds *ds = user;
    int64_t off[MP_H5_MAXDIM] = {0};
    if (info->ndim != ds->ndim) {
        mp_error(MP_ERR_ARG, "%s: %s: view of rank %d for a dataset of rank %d", ds->run->at.path, ds->path,
                 info->ndim, ds->ndim);
        return 1;
    }
    off[ds->t_axis] = info->pos0;
    if (info->axis >= 0 && info->axis < ds->ndim) off[info->axis] += info->offset;
    return mp_h5ds_write(ds, off, info->shape, data) != MP_OK;
}

typedef struct {
    mp_h5run *run;
    mp_hooks *hooks;
    const mp_config *cfg;
    int B, T;
    mp_status st;
} capture_ctx;

static void capture_visit(void *u, mp_hook_id id, int layer, const char *name) {
    capture_ctx *c = u;
    if (c->st != MP_OK) return;
    char path[192];
    int64_t shape[4];
    mp_h5ds *ds;
    static const float neg_inf = -INFINITY;
    snprintf(path, sizeof path, "/acts/%s", name);
    int ndim = mp_hook_shape(c->cfg, id, c->B, c->T, 0, shape);
    int t_axis = mp_hook_shape_kind[id] == MP_SHAPE_BHTS ? 2 : 1;
    /* Scores are -inf where masked: unwritten (decode-time) cells read alike. */
    const float *fill = id == MP_HOOK_ATTN_SCORES ? &neg_inf : NULL;
    c->st = run_dataset(c->run, path, ndim, shape, t_axis, fill, &ds);
    if (c->st == MP_OK) c->st = mp_hooks_add_at(c->hooks, id, layer, capture_cb, ds);
}

mp_status mp_h5run_capture(mp_h5run *run, mp_hooks *hooks, const mp_config *cfg, const char *globs, int B, int T) {
    char bad[256];
    if (!globs || !*globs) return mp_error(MP_ERR_ARG, "capture: no hook names given");
    if (B < 1 || T < 1) return mp_error(MP_ERR_ARG, "capture: bad batch shape B=%d T=%d", B, T);
    int n = mp_hook_select(cfg, globs, NULL, NULL, bad, sizeof bad);
    if (bad[0]) return mp_error(MP_ERR_ARG, "capture: hook name '%s' matches no hook point of this model", bad);
    if (n == 0) return mp_error(MP_ERR_ARG, "capture: hook names '%s' match no hook point", globs);
    capture_ctx c = {run, hooks, cfg, B, T, MP_OK};
    mp_hook_select(cfg, globs, capture_visit, &c, NULL, 0);
    return c.st;
}
