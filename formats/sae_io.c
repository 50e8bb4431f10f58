/* sae_io.c — SAELens folders (cfg.json + sae_weights.safetensors) read into an
 * mp_sae and written back in SAELens v6's form (sae_io.h). cfg.json is read
 * with base/json (strict, every key checked), the weights with the validating
 * safetensors reader; cfg.json is written as a jansson tree, the weights with
 * mp_safetensors_write, both into a temporary folder renamed into place. */
#define _GNU_SOURCE /* renameat2 */
#include "sae_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "safetensors.h"

#define CFG_NAME "cfg.json"
#define WEIGHTS_NAME "sae_weights.safetensors"

/* ---- cfg.json ---- */

typedef struct {
    int arch, d_in, d_sae, k, apply, norm, hook_z, hook_layer, fold_scaling;
    char hook_name[128], model_name[128];
} sae_cfg;

/* A metadata key: in "metadata" / "meta" (v6), else at the top level (v5). */
static const mp_json *meta_get(const mp_json *root, const mp_json *meta, const char *key) {
    const mp_json *v = mp_json_get(meta, key);
    return v && mp_json_type_of(v) != MP_JSON_NULL ? v : mp_json_get(root, key);
}

static int is_null(const mp_json *v) { return !v || mp_json_type_of(v) == MP_JSON_NULL; }

static mp_status get_int(const char *f, const mp_json *v, const char *key, int lo, int hi, int *out) {
    int64_t x;
    if (mp_json_int64(v, &x) || x < lo || x > hi)
        return mp_error(MP_ERR_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]", f, key, lo, hi);
    *out = (int)x;
    return MP_OK;
}

static mp_status get_str(const char *f, const mp_json *v, const char *key, char *dst, size_t n) {
    size_t len;
    const char *s = mp_json_string(v, &len);
    if (!s) return mp_error(MP_ERR_FORMAT, "%s: \"%s\" must be a string (got %s)", f, key,
                            mp_json_type_name(mp_json_type_of(v)));
    if (len >= n || strlen(s) != len)
        return mp_error(MP_ERR_FORMAT, "%s: \"%s\" is too long (at most %zu bytes, no NUL)", f, key, n - 1);
    memcpy(dst, s, len + 1);
    return MP_OK;
}

static mp_status get_bool(const char *f, const mp_json *v, const char *key, int *out) {
    if (mp_json_type_of(v) != MP_JSON_BOOL) return mp_error(MP_ERR_FORMAT, "%s: \"%s\" must be true or false", f, key);
    *out = mp_json_bool(v);
    return MP_OK;
}

/* "blocks.N." at the start of a hook name: N, else -1. */
static int layer_of_hook(const char *h) {
    if (strncmp(h, "blocks.", 7)) return -1;
    const char *p = h + 7;
    long n = 0;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9' && n < (1 << 20)) n = n * 10 + (*p++ - '0');
    return *p == '.' && n < (1 << 20) ? (int)n : -1;
}

static mp_status parse_cfg(const char *f, const mp_json *root, sae_cfg *c) {
    mp_status st;
    memset(c, 0, sizeof *c);
    c->hook_layer = -1;
    if (mp_json_type_of(root) != MP_JSON_OBJECT) return mp_error(MP_ERR_FORMAT, "%s: not a JSON object", f);
    const mp_json *meta = mp_json_get(root, "metadata");
    const char *meta_key = "metadata";
    if (!meta) {
        meta = mp_json_get(root, "meta");
        meta_key = "meta";
    }
    if (meta && mp_json_type_of(meta) != MP_JSON_OBJECT)
        return mp_error(MP_ERR_FORMAT, "%s: \"%s\" must be an object", f, meta_key);

    /* architecture (v5 default: standard), then the activation of flat configs */
    const mp_json *a = mp_json_get(root, "architecture");
    char arch[64] = "standard";
    if (!is_null(a) && (st = get_str(f, a, "architecture", arch, sizeof arch))) return st;
    static const char *const training[] = {"batchtopk", "matryoshka_batchtopk", NULL};
    for (int i = 0; training[i]; i++)
        if (!strcmp(arch, training[i]))
            return mp_error(MP_ERR_FORMAT, "%s: architecture \"%s\" is SAELens's training form; mechprobe runs "
                            "the inference SAE it saves (jumprelu, via save_inference_model)", f, arch);
    if (!strcmp(arch, "gated"))
        return mp_error(MP_ERR_FORMAT, "%s: architecture \"gated\" is not supported (standard, topk, jumprelu)", f);
    if (strstr(arch, "transcoder") || !strcmp(arch, "clt") || !is_null(mp_json_get(root, "d_out")))
        return mp_error(MP_ERR_FORMAT, "%s: architecture \"%s\" is a transcoder (d_out); mechprobe runs SAEs "
                        "(standard, topk, jumprelu)", f, arch);
    c->arch = mp_sae_arch_named(arch);
    if (c->arch < 0)
        return mp_error(MP_ERR_FORMAT, "%s: unknown architecture \"%s\" (standard, topk, jumprelu)", f, arch);
    const char *act_key = "activation_fn_str";
    const mp_json *act = mp_json_get(root, act_key);
    if (is_null(act)) act = mp_json_get(root, act_key = "activation_fn");
    if (!is_null(act)) {
        char an[64];
        if ((st = get_str(f, act, act_key, an, sizeof an))) return st;
        if (!strcmp(an, "topk")) {
            if (c->arch == MP_SAE_JUMPRELU)
                return mp_error(MP_ERR_FORMAT, "%s: \"%s\" \"topk\" with architecture \"jumprelu\"", f, act_key);
            c->arch = MP_SAE_TOPK;
        } else if (strcmp(an, "relu")) {
            return mp_error(MP_ERR_FORMAT, "%s: \"%s\" \"%s\" is not supported (relu, topk)", f, act_key, an);
        }
    }

    const mp_json *v = mp_json_get(root, "d_in");
    if (!v) return mp_error(MP_ERR_FORMAT, "%s: \"d_in\" is missing", f);
    if ((st = get_int(f, v, "d_in", 1, 1 << 24, &c->d_in))) return st;
    if (!(v = mp_json_get(root, "d_sae"))) return mp_error(MP_ERR_FORMAT, "%s: \"d_sae\" is missing", f);
    if ((st = get_int(f, v, "d_sae", 1, 1 << 26, &c->d_sae))) return st;
    if (c->arch == MP_SAE_TOPK) {
        const char *kk = "k";
        v = mp_json_get(root, "k");
        if (is_null(v)) {
            v = mp_json_get(mp_json_get(root, "activation_fn_kwargs"), "k");
            kk = "activation_fn_kwargs.k";
        }
        if (is_null(v)) return mp_error(MP_ERR_FORMAT, "%s: a topk SAE needs \"k\" (or activation_fn_kwargs.k)", f);
        if ((st = get_int(f, v, kk, 1, c->d_sae, &c->k))) return st;
        int rescale = 0;
        v = mp_json_get(root, "rescale_acts_by_decoder_norm");
        if (!is_null(v) && (st = get_bool(f, v, "rescale_acts_by_decoder_norm", &rescale))) return st;
        if (rescale)
            return mp_error(MP_ERR_FORMAT, "%s: \"rescale_acts_by_decoder_norm\": true is not supported", f);
    }

    c->apply = 1;
    v = mp_json_get(root, "apply_b_dec_to_input");
    if (!is_null(v) && (st = get_bool(f, v, "apply_b_dec_to_input", &c->apply))) return st;

    v = mp_json_get(root, "normalize_activations");
    c->norm = MP_SAE_NORM_NONE;
    if (mp_json_type_of(v) == MP_JSON_BOOL) {
        c->norm = mp_json_bool(v) ? MP_SAE_NORM_EXPECTED_AVERAGE_ONLY_IN : MP_SAE_NORM_NONE;
    } else if (!is_null(v)) {
        char nn[64];
        if ((st = get_str(f, v, "normalize_activations", nn, sizeof nn))) return st;
        if ((c->norm = mp_sae_norm_named(nn)) < 0)
            return mp_error(MP_ERR_FORMAT, "%s: normalize_activations \"%s\" is not supported (none, "
                            "expected_average_only_in, constant_norm_rescale, layer_norm)", f, nn);
    }

    /* metadata */
    v = meta_get(root, meta, "hook_name");
    if (is_null(v)) v = mp_json_get(root, "hook_point");
    if (!is_null(v) && (st = get_str(f, v, "hook_name", c->hook_name, sizeof c->hook_name))) return st;
    v = meta_get(root, meta, "model_name");
    if (!is_null(v) && (st = get_str(f, v, "model_name", c->model_name, sizeof c->model_name))) return st;
    const char *lk = "hook_layer";
    v = meta_get(root, meta, lk);
    if (is_null(v)) v = mp_json_get(root, lk = "hook_point_layer");
    if (!is_null(v)) {
        if ((st = get_int(f, v, lk, 0, 1 << 20, &c->hook_layer))) return st;
    } else {
        c->hook_layer = layer_of_hook(c->hook_name);
    }

    v = mp_json_get(root, "reshape_activations");
    if (is_null(v)) {
        c->hook_z = strstr(c->hook_name, "hook_z") != NULL; /* SAELens's default for older configs */
    } else {
        char r[64];
        if ((st = get_str(f, v, "reshape_activations", r, sizeof r))) return st;
        if (!strcmp(r, "hook_z"))
            c->hook_z = 1;
        else if (strcmp(r, "none"))
            return mp_error(MP_ERR_FORMAT, "%s: reshape_activations \"%s\" is not supported (none, hook_z)", f, r);
    }

    v = mp_json_get(root, "finetuning_scaling_factor");
    if (!is_null(v) && (st = get_bool(f, v, "finetuning_scaling_factor", &c->fold_scaling))) return st;
    return MP_OK;
}

/* ---- weights ---- */

static mp_status read_weight(const char *wf, const mp_safetensors *t, const char *name, int ndim, const int64_t *shape,
                             float *dst) {
    const mp_st_tensor *x = mp_safetensors_find(t, name);
    if (!x) return mp_error(MP_ERR_FORMAT, "%s: tensor \"%s\" is missing", wf, name);
    int ok = x->n_dims == (uint32_t)ndim;
    for (int i = 0; ok && i < ndim; i++) ok = x->shape[i] == (uint64_t)shape[i];
    if (!ok) {
        char got[160] = "[", want[64];
        for (uint32_t i = 0; i < x->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
                     (unsigned long long)x->shape[i]);
        strcat(got, "]");
        if (ndim == 2)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)shape[0]);
        return mp_error(MP_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, expected %s (from " CFG_NAME "'s d_in and "
                        "d_sae)", wf, name, got, want);
    }
    mp_status st = mp_safetensors_read_f32(t, x, dst, x->n_elements);
    return st ? mp_error_name_path(st, wf) : MP_OK;
}

static mp_status build(mp_sae **out, const sae_cfg *c, const mp_safetensors *t, const char *wf) {
    mp_sae *s;
    mp_status st = mp_sae_new(&s, (mp_sae_arch)c->arch, c->d_in, c->d_sae, c->k);
    if (st) return mp_error_name_path(st, wf);
    s->apply_b_dec_to_input = c->apply;
    s->normalize = (mp_sae_norm)c->norm;
    s->reshape_hook_z = c->hook_z;
    s->hook_layer = c->hook_layer;
    strcpy(s->hook_name, c->hook_name);
    strcpy(s->model_name, c->model_name);
    const int n = mp_sae_n_weights(s);
    for (int i = 0; i < n; i++) {
        float *data;
        int nd;
        int64_t shape[2];
        const char *name = mp_sae_weight(s, i, &data, &nd, shape);
        if ((st = read_weight(wf, t, name, nd, shape, data))) goto fail;
    }
    /* scaling_factor: folded into W_dec's rows (SAELens decodes (acts * sf) @ W_dec) */
    const mp_st_tensor *sf = mp_safetensors_find(t, "scaling_factor");
    if (c->fold_scaling && !sf) {
        st = mp_error(MP_ERR_FORMAT, "%s: tensor \"scaling_factor\" is missing (" CFG_NAME
                      " says finetuning_scaling_factor: true)", wf);
        goto fail;
    }
    if (sf) {
        float *v = mp_malloc((size_t)c->d_sae * sizeof(float), "SAE scaling_factor");
        if (!v) {
            st = MP_ERR_NOMEM;
            goto fail;
        }
        int64_t shape[1] = {c->d_sae};
        if ((st = read_weight(wf, t, "scaling_factor", 1, shape, v))) {
            free(v);
            goto fail;
        }
        int ones = 1;
        for (int j = 0; j < c->d_sae; j++) ones &= v[j] == 1.0f;
        if (!ones && !c->fold_scaling) {
            free(v);
            st = mp_error(MP_ERR_FORMAT, "%s: tensor \"scaling_factor\" is not all ones but " CFG_NAME
                          " has no finetuning_scaling_factor: true", wf);
            goto fail;
        }
        for (int j = 0; j < c->d_sae && !ones; j++)
            for (int i = 0; i < c->d_in; i++) s->W_dec[(size_t)j * c->d_in + i] *= v[j];
        free(v);
    }
    /* nothing else: SAELens loads its state_dict strictly */
    for (size_t i = 0; i < mp_safetensors_n_tensors(t); i++) {
        const char *name = mp_safetensors_tensor_at(t, i)->name;
        int known = !strcmp(name, "scaling_factor");
        for (int j = 0; j < n && !known; j++) {
            float *d;
            int nd;
            int64_t sh[2];
            known = !strcmp(name, mp_sae_weight(s, j, &d, &nd, sh));
        }
        if (!known) {
            st = mp_error(MP_ERR_FORMAT, "%s: unexpected tensor \"%s\" (a %s SAE has W_enc, b_enc, W_dec, b_dec%s)", wf,
                          name, mp_sae_arch_name(s->arch), s->threshold ? ", threshold" : "");
            goto fail;
        }
    }
    *out = s;
    return MP_OK;
fail:
    mp_sae_free(s);
    return st;
}

mp_status mp_sae_load_memory(mp_sae **out, const char *cfg, size_t cfg_len, const void *weights, size_t size,
                             const char *name) {
    *out = NULL;
    char cf[1100], wf[1100];
    snprintf(cf, sizeof cf, "%s/" CFG_NAME, name ? name : "<memory>");
    snprintf(wf, sizeof wf, "%s/" WEIGHTS_NAME, name ? name : "<memory>");
    mp_json_doc *doc = NULL;
    mp_status st = mp_json_parse(cfg, cfg_len, cf, &doc);
    if (st) return st;
    sae_cfg c;
    st = parse_cfg(cf, mp_json_root(doc), &c);
    mp_json_free(doc);
    if (st) return st;
    mp_safetensors *t = NULL;
    if ((st = mp_safetensors_open_memory(weights, size, wf, &t))) return st;
    st = build(out, &c, t, wf);
    mp_safetensors_close(t);
    return st;
}

mp_status mp_sae_load(mp_sae **out, const char *path) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb)) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char dir[4096], cf[4200], wf[4200];
    size_t n = strlen(path);
    if (n >= sizeof dir) return mp_error(MP_ERR_ARG, "%s: path too long", path);
    if (S_ISDIR(sb.st_mode)) {
        memcpy(dir, path, n + 1);
        while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
        snprintf(wf, sizeof wf, "%s/" WEIGHTS_NAME, dir);
    } else {
        if (n < 12 || strcmp(path + n - 12, ".safetensors"))
            return mp_error(MP_ERR_ARG, "%s: an SAE is a folder with " CFG_NAME " and " WEIGHTS_NAME
                            ", or a .safetensors file with " CFG_NAME " beside it", path);
        memcpy(dir, path, n + 1);
        char *slash = strrchr(dir, '/');
        if (!slash) strcpy(dir, ".");
        else if (slash == dir) dir[1] = 0;
        else *slash = 0;
        snprintf(wf, sizeof wf, "%s", path);
    }
    snprintf(cf, sizeof cf, "%s%s" CFG_NAME, dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
    if (stat(cf, &sb))
        return mp_error(MP_ERR_IO, "%s: cannot open: %s (an SAELens folder has "
                        CFG_NAME " and " WEIGHTS_NAME ")", cf, strerror(errno));
    mp_status st = mp_check_regular_file(cf);
    if (st) return st;
    mp_json_doc *doc = NULL;
    if ((st = mp_json_parse_file(cf, &doc))) return st;
    sae_cfg c;
    st = parse_cfg(cf, mp_json_root(doc), &c);
    mp_json_free(doc);
    if (st) return st;
    if ((st = mp_check_regular_file(wf))) return st;
    if (stat(wf, &sb)) return mp_error(MP_ERR_IO, "%s: cannot open: %s", wf, strerror(errno));
    mp_safetensors *t = NULL;
    if ((st = mp_safetensors_open(wf, &t))) return st;
    st = build(out, &c, t, wf);
    mp_safetensors_close(t);
    return st;
}

/* ---- saving ---- */

static json_t *cfg_json(const mp_sae *s) {
    /* only keys every v6 SAEMetadata takes (early v6 had a fixed dataclass) */
    json_t *meta = json_pack("{s:s, s:s}", "sae_lens_version", "6.0.0", "sae_lens_training_version", "6.0.0");
    if (!meta) return NULL;
    if ((*s->hook_name && json_object_set_new(meta, "hook_name", json_string(s->hook_name))) ||
        (s->hook_layer >= 0 && json_object_set_new(meta, "hook_layer", json_integer(s->hook_layer))) ||
        (*s->model_name && json_object_set_new(meta, "model_name", json_string(s->model_name)))) {
        json_decref(meta);
        return NULL;
    }
    json_t *j = json_pack("{s:s, s:i, s:i, s:s, s:s, s:b, s:s, s:s, s:o}", "architecture", mp_sae_arch_name(s->arch),
                          "d_in", s->d_in, "d_sae", s->d_sae, "dtype", "float32", "device", "cpu",
                          "apply_b_dec_to_input", s->apply_b_dec_to_input, "normalize_activations",
                          mp_sae_norm_name(s->normalize), "reshape_activations", s->reshape_hook_z ? "hook_z" : "none",
                          "metadata", meta);
    if (j && s->arch == MP_SAE_TOPK && json_object_set_new(j, "k", json_integer(s->k))) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

static mp_status write_cfg(const mp_sae *s, const char *path) {
    json_t *j = cfg_json(s);
    if (!j) return mp_error(MP_ERR_NOMEM, "%s: out of memory building the JSON", path);
    mp_out o;
    mp_status st = mp_out_begin(&o, path);
    if (st) {
        json_decref(j);
        return st;
    }
    FILE *fp = mp_out_fdopen(&o);
    int bad = !fp || json_dumpf(j, fp, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) || fputc('\n', fp) == EOF;
    json_decref(j);
    if (bad) {
        mp_out_abort(&o);
        return mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    }
    return mp_out_commit(&o, 1);
}

/* Removes a folder this file made (its two files, then the folder). */
static void remove_folder(const char *dir) {
    char p[8192];
    snprintf(p, sizeof p, "%s/" CFG_NAME, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" WEIGHTS_NAME, dir);
    unlink(p);
    rmdir(dir);
}

/* An existing destination must be a folder with nothing but an SAE's files. */
static mp_status check_replaceable(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb)) return errno == ENOENT ? MP_OK : mp_error(MP_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mp_error(MP_ERR_IO, "%s: exists and is %s, not an SAE folder", dir, mp_file_kind(sb.st_mode));
    DIR *d = opendir(dir);
    if (!d) return mp_error(MP_ERR_IO, "%s: cannot read: %s", dir, strerror(errno));
    struct dirent *e;
    mp_status st = MP_OK;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, CFG_NAME) ||
            !strcmp(e->d_name, WEIGHTS_NAME))
            continue;
        st = mp_error(MP_ERR_IO, "%s: exists and holds \"%s\"; an SAE is saved only into a new folder or over an "
                      "SAE folder (" CFG_NAME " and " WEIGHTS_NAME " alone)", dir, e->d_name);
        break;
    }
    closedir(d);
    return st;
}

mp_status mp_sae_save(const mp_sae *s, const char *dir) {
    size_t n = strlen(dir);
    char d[4000], tmp[4100], p[4200], old[4200];
    if (!n || n >= sizeof d) return mp_error(MP_ERR_ARG, "%s: bad folder name", dir);
    memcpy(d, dir, n + 1);
    while (n > 1 && d[n - 1] == '/') d[--n] = 0;
    mp_status st = check_replaceable(d);
    if (st) return st;
    static int counter;
    int made = 0;
    for (int tries = 0; tries < 100 && !made; tries++) {
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%d", d, (long)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        if (!mkdir(tmp, 0777)) made = 1;
        else if (errno != EEXIST) return mp_error(MP_ERR_IO, "%s: cannot create folder: %s", tmp, strerror(errno));
    }
    if (!made) return mp_error(MP_ERR_IO, "%s: cannot create a temporary folder beside it", d);
    mp_st_entry e[5];
    uint64_t shapes[5][2];
    const int nw = mp_sae_n_weights(s);
    for (int i = 0; i < nw; i++) {
        float *data;
        int nd;
        int64_t sh[2];
        e[i].name = mp_sae_weight(s, i, &data, &nd, sh);
        for (int k = 0; k < nd; k++) shapes[i][k] = (uint64_t)sh[k];
        e[i].n_dims = (uint32_t)nd;
        e[i].shape = shapes[i];
        e[i].data = data;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    snprintf(p, sizeof p, "%s/" WEIGHTS_NAME, tmp);
    if ((st = mp_safetensors_write(p, e, (size_t)nw, meta))) goto fail;
    snprintf(p, sizeof p, "%s/" CFG_NAME, tmp);
    if ((st = write_cfg(s, p))) goto fail;
    if (!rename(tmp, d)) goto done; /* no folder there, or an empty one */
    if (errno != EEXIST && errno != ENOTEMPTY) {
        st = mp_error(MP_ERR_IO, "%s: cannot rename %s into place: %s", d, tmp, strerror(errno));
        goto fail;
    }
    /* an SAE folder there: swap the two atomically, then remove the old one */
    if ((st = check_replaceable(d))) goto fail;
    if (!renameat2(AT_FDCWD, tmp, AT_FDCWD, d, RENAME_EXCHANGE)) {
        remove_folder(tmp);
        goto done;
    }
    /* no RENAME_EXCHANGE on this file system: move the old one aside first */
    snprintf(old, sizeof old, "%s.old", tmp);
    if (rename(d, old)) {
        st = mp_error(MP_ERR_IO, "%s: cannot move the old folder aside: %s", d, strerror(errno));
        goto fail;
    }
    if (rename(tmp, d)) {
        st = mp_error(MP_ERR_IO, "%s: cannot rename %s into place: %s", d, tmp, strerror(errno));
        rename(old, d);
        goto fail;
    }
    remove_folder(old);
done:
    {
        /* the rename is durable once the parent folder is synced (best effort) */
        char parent[4000];
        memcpy(parent, d, n + 1);
        char *slash = strrchr(parent, '/');
        if (!slash) strcpy(parent, ".");
        else if (slash == parent) parent[1] = 0;
        else *slash = 0;
        int fd = open(parent, O_RDONLY | O_DIRECTORY);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    return MP_OK;
fail:
    remove_folder(tmp);
    return st;
}
