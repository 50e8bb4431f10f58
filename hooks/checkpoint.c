/* checkpoint.c — HDF5 training checkpoints (see checkpoint.h): save (atomic),
 * load with validation of every dataset shape against /config, optimizer state
 * and loss curve; format detection for mp_model_load / mp_model_save. */
#include "checkpoint.h"
#include "h5io.h"
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "mechprobe.checkpoint"
#define CKPT_VERSION 1

static const char *norm_name(mp_norm_kind k) { return k == MP_NORM_LAYER ? "layer" : "rms"; }
static const char *mlp_name(mp_mlp_kind k) { return k == MP_MLP_GELU ? "gelu" : k == MP_MLP_NONE ? "none" : "swiglu"; }

/* shortest decimal that round-trips to the float (so h5py shows 10000.0, 1e-05) */
static double f2d(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

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
    struct { const char *k; int v; } ints[] = {
        {"d_model", c->d_model}, {"n_layer", c->n_layer}, {"n_head", c->n_head}, {"n_kv_head", c->n_kv_head},
        {"d_head", c->d_head},   {"d_mlp", c->d_mlp},     {"vocab", c->vocab},   {"ctx", c->ctx},
        {"tied", c->tied}};
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++) st = mp_h5_attr_set_int(f, "/config", ints[i].k, ints[i].v);
    if (!st) st = mp_h5_attr_set_float(f, "/config", "rope_theta", f2d(c->rope_theta));
    if (!st) st = mp_h5_attr_set_float(f, "/config", "norm_eps", f2d(c->norm_eps));
    if (!st) st = mp_h5_attr_set_string(f, "/config", "norm", norm_name(c->norm));
    if (!st) st = mp_h5_attr_set_string(f, "/config", "mlp", mlp_name(c->mlp));
    if (!st) st = mp_h5_attr_set_string(f, "/config", "pos", mp_pos_name(c->pos));
    if (!st && m->tokenizer[0]) st = mp_h5_attr_set_string(f, "/config", "tokenizer", m->tokenizer);
    /* real-architecture settings: written only when used, so older readers
     * still read plain models */
    if (!st && c->qkv_bias) st = mp_h5_attr_set_int(f, "/config", "qkv_bias", 1);
    if (!st && c->linear_bias) st = mp_h5_attr_set_int(f, "/config", "linear_bias", 1);
    if (!st && c->gelu_tanh) st = mp_h5_attr_set_int(f, "/config", "gelu_tanh", 1);
    if (!st && c->rope_scale > 0.0f && c->rope_scale != 1.0f)
        st = mp_h5_attr_set_float(f, "/config", "rope_scale", f2d(c->rope_scale));
    if (!st && c->n_rope_freqs) {
        double fr[MP_ROPE_FREQS_MAX];
        for (int i = 0; i < c->n_rope_freqs; i++) fr[i] = c->rope_freqs[i];
        st = mp_h5_attr_set_floats(f, "/config", "rope_freqs", fr, (size_t)c->n_rope_freqs);
    }
    /* positional-scheme settings: written only when used */
    if (!st && c->rope_dims) st = mp_h5_attr_set_int(f, "/config", "rope_dims", c->rope_dims);
    if (!st && c->pos_no_temp) st = mp_h5_attr_set_int(f, "/config", "pos_temp", 0);
    if (!st && c->rope_scaling) {
        st = mp_h5_attr_set_string(f, "/config", "rope_scaling", mp_rope_scaling_name(c->rope_scaling));
        if (!st) st = mp_h5_attr_set_float(f, "/config", "rope_factor", f2d(c->rope_factor));
        if (!st && c->rope_orig_ctx) st = mp_h5_attr_set_int(f, "/config", "rope_orig_ctx", c->rope_orig_ctx);
        if (!st && c->yarn_beta_fast > 0.0f) st = mp_h5_attr_set_float(f, "/config", "yarn_beta_fast", f2d(c->yarn_beta_fast));
        if (!st && c->yarn_beta_slow > 0.0f) st = mp_h5_attr_set_float(f, "/config", "yarn_beta_slow", f2d(c->yarn_beta_slow));
    }
    /* attention variant: written only when not softmax */
    if (!st && c->attn != MP_ATTN_SOFTMAX) {
        st = mp_h5_attr_set_string(f, "/config", "attn", mp_attn_name(c->attn));
        if (!st && (c->attn == MP_ATTN_ENTMAX || c->attn == MP_ATTN_ASENTMAX))
            st = mp_h5_attr_set_float(f, "/config", "attn_alpha", f2d((float)mp_attn_alpha(c)));
    }
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
                st = mp_h5_attr_set_float(f, "/optim", fl[i].k, f2d(fl[i].v));
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
    mp_h5_attr a;
    mp_status st = mp_h5_attr_get(f, obj, key, &a);
    if (st) return st;
    if (a.kind != MP_H5_ATTR_INT || a.i < INT32_MIN || a.i > INT32_MAX)
        st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be an integer", path, obj, key);
    else *out = (int)a.i;
    mp_h5_attr_clear(&a);
    return st;
}

static mp_status get_float(hid_t f, const char *obj, const char *key, float *out, const char *path) {
    mp_h5_attr a;
    mp_status st = mp_h5_attr_get(f, obj, key, &a);
    if (st) return st;
    if (a.kind == MP_H5_ATTR_FLOAT) *out = (float)a.f;
    else if (a.kind == MP_H5_ATTR_INT) *out = (float)a.i;
    else st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be a number", path, obj, key);
    mp_h5_attr_clear(&a);
    return st;
}

static mp_status get_kind(hid_t f, const char *key, const char *const *names, int n, int *out, const char *path) {
    mp_h5_attr a;
    mp_status st = mp_h5_attr_get(f, "/config", key, &a);
    if (st) return st;
    st = mp_error(MP_ERR_FORMAT, "%s: /config attribute '%s' is not one of the known kinds", path, key);
    if (a.kind == MP_H5_ATTR_STRING)
        for (int i = 0; i < n; i++)
            if (strcmp(a.s, names[i]) == 0) { *out = i; st = MP_OK; }
    mp_h5_attr_clear(&a);
    return st;
}

static mp_status read_config(hid_t f, mp_config *c, const char *path) {
    static const char *norms[] = {"rms", "layer"}, *mlps[] = {"swiglu", "gelu", "none"},
                      *poss[] = {"rope", "none", "learned", "half_rope", "high_freq", "rope_id"},
                      *scalings[] = {"none", "pi", "ntk", "yarn"};
    *c = mp_config_default();
    mp_status st = MP_OK;
    struct { const char *k; int *v; } ints[] = {
        {"d_model", &c->d_model}, {"n_layer", &c->n_layer}, {"n_head", &c->n_head}, {"n_kv_head", &c->n_kv_head},
        {"d_head", &c->d_head},   {"d_mlp", &c->d_mlp},     {"vocab", &c->vocab},   {"ctx", &c->ctx},
        {"tied", &c->tied}};
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++) st = get_int(f, "/config", ints[i].k, ints[i].v, path);
    if (!st) st = get_float(f, "/config", "rope_theta", &c->rope_theta, path);
    if (!st) st = get_float(f, "/config", "norm_eps", &c->norm_eps, path);
    int k = 0;
    if (!st && !(st = get_kind(f, "norm", norms, 2, &k, path))) c->norm = (mp_norm_kind)k;
    if (!st && !(st = get_kind(f, "mlp", mlps, 3, &k, path))) c->mlp = (mp_mlp_kind)k;
    if (!st && !(st = get_kind(f, "pos", poss, MP_POS_COUNT, &k, path))) c->pos = (mp_pos_kind)k;
    /* optional (absent in older checkpoints) */
    struct { const char *k; int *v; } opt[] = {
        {"qkv_bias", &c->qkv_bias}, {"linear_bias", &c->linear_bias}, {"gelu_tanh", &c->gelu_tanh}};
    for (size_t i = 0; !st && i < sizeof opt / sizeof opt[0]; i++)
        if (H5Aexists_by_name(f, "/config", opt[i].k, H5P_DEFAULT) > 0) st = get_int(f, "/config", opt[i].k, opt[i].v, path);
    int pos_temp = 1;
    struct { const char *k; int *v; } opt2[] = {
        {"rope_dims", &c->rope_dims}, {"pos_temp", &pos_temp}, {"rope_orig_ctx", &c->rope_orig_ctx}};
    for (size_t i = 0; !st && i < sizeof opt2 / sizeof opt2[0]; i++)
        if (H5Aexists_by_name(f, "/config", opt2[i].k, H5P_DEFAULT) > 0) st = get_int(f, "/config", opt2[i].k, opt2[i].v, path);
    if (!st && pos_temp != 0 && pos_temp != 1)
        st = mp_error(MP_ERR_FORMAT, "%s: /config attribute 'pos_temp' must be 0 or 1", path);
    c->pos_no_temp = !pos_temp;
    if (!st && H5Aexists_by_name(f, "/config", "rope_scaling", H5P_DEFAULT) > 0 &&
        !(st = get_kind(f, "rope_scaling", scalings, 4, &k, path)))
        c->rope_scaling = (mp_rope_scaling)k;
    struct { const char *k; float *v; } optf[] = {
        {"rope_factor", &c->rope_factor}, {"yarn_beta_fast", &c->yarn_beta_fast}, {"yarn_beta_slow", &c->yarn_beta_slow}};
    for (size_t i = 0; !st && i < sizeof optf / sizeof optf[0]; i++)
        if (H5Aexists_by_name(f, "/config", optf[i].k, H5P_DEFAULT) > 0) st = get_float(f, "/config", optf[i].k, optf[i].v, path);
    if (!st && H5Aexists_by_name(f, "/config", "attn", H5P_DEFAULT) > 0) {
        static const char *attns[MP_ATTN_COUNT] = {"softmax", "ssmax", "entmax15", "entmax", "asentmax"};
        if (!(st = get_kind(f, "attn", attns, MP_ATTN_COUNT, &k, path))) c->attn = (mp_attn_kind)k;
    }
    if (!st && H5Aexists_by_name(f, "/config", "attn_alpha", H5P_DEFAULT) > 0)
        st = get_float(f, "/config", "attn_alpha", &c->attn_alpha, path);
    if (!st && H5Aexists_by_name(f, "/config", "rope_scale", H5P_DEFAULT) > 0)
        st = get_float(f, "/config", "rope_scale", &c->rope_scale, path);
    if (!st && H5Aexists_by_name(f, "/config", "rope_freqs", H5P_DEFAULT) > 0) {
        mp_h5_attr a;
        if (!(st = mp_h5_attr_get(f, "/config", "rope_freqs", &a))) {
            if (a.kind != MP_H5_ATTR_FLOAT_ARRAY || a.n == 0 || a.n > MP_ROPE_FREQS_MAX)
                st = mp_error(MP_ERR_FORMAT, "%s: /config attribute 'rope_freqs' must be 1..%d floats", path,
                              MP_ROPE_FREQS_MAX);
            else {
                c->n_rope_freqs = (int)a.n;
                for (size_t i = 0; i < a.n; i++) c->rope_freqs[i] = (float)a.fv[i];
            }
            mp_h5_attr_clear(&a);
        }
    }
    if (!st) st = mp_config_validate(c, path);
    return st;
}

/* Reads every tensor under prefix into base (parameter layout), checking shapes. */
static mp_status read_tensors(hid_t f, const char *prefix, const mp_model *m, float *base, const char *path) {
    const mp_config *c = &m->cfg;
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
            mp_status st = mp_h5_dataset_info(f, ds, &info);
            if (st) return mp_error_prefix(st, "%s: missing or unreadable %s", path, ds);
            int ok = info.ndim == d[k].ndim && info.is_float;
            for (int i = 0; ok && i < info.ndim; i++) ok = info.shape[i] == d[k].shape[i];
            if (!ok) {
                char want[64];
                if (d[k].ndim == 2) snprintf(want, sizeof want, "[%lld,%lld]", (long long)d[k].shape[0], (long long)d[k].shape[1]);
                else snprintf(want, sizeof want, "[%lld]", (long long)d[k].shape[0]);
                return mp_error(MP_ERR_FORMAT, "%s: %s has the wrong shape or type (the config needs float %s)", path,
                                ds, want);
            }
            if ((st = mp_h5_read_f32_into(f, ds, d[k].p + (size_t)l * per, per))) return st;
        }
    }
    return MP_OK;
}

static mp_status read_curve_i32(hid_t f, const char *ds, int32_t **out, size_t *n) {
    mp_h5_dsinfo info;
    mp_status st = mp_h5_read_i32(f, ds, out, &info);
    if (!st) *n = info.ndim == 0 ? 1 : info.numel;
    return st;
}

static mp_status read_log(hid_t f, mp_train_log *log, const char *path) {
    memset(log, 0, sizeof *log);
    if (!mp_h5_exists(f, "/train/step", NULL)) return MP_OK;
    size_t n = 0, ne = 0;
    mp_h5_dsinfo info;
    mp_status st = read_curve_i32(f, "/train/step", &log->step, &n);
    log->n = log->cap = n;
    struct { const char *name; float **dst; } fl[] = {{"/train/loss", &log->loss}, {"/train/lr", &log->lr}};
    for (size_t i = 0; !st && i < 2; i++) {
        st = mp_h5_read_f32(f, fl[i].name, fl[i].dst, &info);
        if (!st && info.numel != n) st = mp_error(MP_ERR_FORMAT, "%s: %s has %zu entries, /train/step %zu", path, fl[i].name, info.numel, n);
    }
    double **dd[2] = {&log->tokens, &log->wall};
    const char *dn[2] = {"/train/tokens", "/train/wall_s"};
    for (int i = 0; !st && i < 2; i++) {
        if (!(*dd[i] = mp_calloc(n ? n : 1, sizeof(double), "the loss curve"))) { st = MP_ERR_NOMEM; break; }
        if ((st = mp_h5_dataset_info(f, dn[i], &info))) break;
        if (info.numel != n) { st = mp_error(MP_ERR_FORMAT, "%s: %s has %zu entries, /train/step %zu", path, dn[i], info.numel, n); break; }
        hid_t ds = H5Dopen2(f, dn[i], H5P_DEFAULT);
        if (ds < 0 || (n && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, *dd[i]) < 0))
            st = mp_h5_error(MP_ERR_HDF5, "%s: %s: cannot read", path, dn[i]);
        if (ds >= 0) H5Dclose(ds);
    }
    if (!st && mp_h5_exists(f, "/train/eval_step", NULL)) {
        st = read_curve_i32(f, "/train/eval_step", &log->eval_step, &ne);
        if (!st) st = mp_h5_read_f32(f, "/train/eval_loss", &log->eval_loss, &info);
        if (!st && info.numel != ne) st = mp_error(MP_ERR_FORMAT, "%s: /train/eval_loss and eval_step differ in length", path);
        log->n_eval = log->cap_eval = ne;
    }
    if (st) mp_train_log_free(log);
    return st;
}

mp_status mp_checkpoint_load(const char *path, mp_model **out, mp_adamw *opt, mp_train_log *log) {
    hid_t f = H5I_INVALID_HID;
    mp_model *m = NULL;
    mp_config c;
    mp_h5_attr a;
    *out = NULL;
    if (opt) memset(opt, 0, sizeof *opt);
    if (log) memset(log, 0, sizeof *log);
    mp_status st = mp_h5_open(&f, path, MP_H5_READ);
    if (st) return st;
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
    if ((st = read_config(f, &c, path))) goto cleanup;
    if ((st = mp_model_alloc(&m, &c))) goto cleanup;
    if ((st = read_tensors(f, "/params", m, m->owned, path))) goto cleanup;
    {   /* optional vocabulary hint */
        mp_h5_attr t;
        if (mp_h5_attr_get(f, "/config", "tokenizer", &t) == MP_OK) {
            if (t.kind == MP_H5_ATTR_STRING && strcmp(t.s, "bytes") == 0) snprintf(m->tokenizer, sizeof m->tokenizer, "bytes");
            mp_h5_attr_clear(&t);
        }
    }
    if (opt && mp_h5_exists(f, "/optim", NULL)) {
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
        if (!st) st = mp_adamw_init(opt, &hp, mp_config_n_params(&c));
        if (!st) st = read_tensors(f, "/optim/m", m, opt->m, path);
        if (!st) st = read_tensors(f, "/optim/v", m, opt->v, path);
        if (!st) opt->step = step;
        if (st) goto cleanup;
    }
    if (log && (st = read_log(f, log, path))) goto cleanup;
    snprintf(m->source, sizeof m->source, "%s", path);
    m->format = "checkpoint";
    *out = m;
    m = NULL;
cleanup:
    if (st && opt) mp_adamw_free(opt);
    mp_model_free(m);
    mp_h5_close(&f);
    return st;
}

int mp_file_is_hdf5(const char *path) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char buf[8];
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    size_t n = fread(buf, 1, 8, fp);
    fclose(fp);
    return n == 8 && memcmp(buf, sig, 8) == 0;
}

mp_status mp_model_load(mp_model **out, const char *path) {
    switch (mp_model_detect(path)) {
    case MP_FORMAT_CHECKPOINT: return mp_checkpoint_load(path, out, NULL, NULL);
    case MP_FORMAT_GGUF: return mp_model_load_gguf(out, path);
    case MP_FORMAT_HF: return mp_model_load_hf(out, path);
    case MP_FORMAT_LLAMA2C: return mp_model_load_llama2c(out, path);
    default: break;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) return mp_error(MP_ERR_IO, "%s: cannot open (no such file or folder)", path);
    return mp_error(MP_ERR_FORMAT, "%s: a folder without config.json (not a Hugging Face model folder)", path);
}

mp_status mp_model_save(const mp_model *m, const char *path) {
    size_t n = strlen(path);
    if (n >= 3 && strcmp(path + n - 3, ".h5") == 0) return mp_checkpoint_save(path, m, NULL, NULL);
    if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) return mp_model_save_gguf(m, NULL, path, MP_GGML_F32);
    const mp_config *c = &m->cfg;
    if (c->norm != MP_NORM_RMS || c->mlp != MP_MLP_SWIGLU || c->pos != MP_POS_ROPE ||
        c->d_head * c->n_head != c->d_model || c->rope_theta != 10000.0f || c->attn != MP_ATTN_SOFTMAX)
        return mp_error(MP_ERR_ARG, "%s: llama2.c files hold only RMSNorm/SwiGLU/RoPE (theta 10000) softmax-attention "
                        "models with d_head = d_model / n_head; save this model as a .h5 checkpoint", path);
    return mp_model_save_llama2c(m, path, 0);
}
