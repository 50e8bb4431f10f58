/* safetensors.c — safetensors reader (single files, sharded Hugging Face
 * folders with their index and config.json) and the F32 writer. Each shard is
 * memory-mapped; its JSON header is parsed by json.c and every entry checked
 * against the data section before a tensor points into the mapping. */
#include "safetensors.h"
#include "quant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian files by memcpy and needs a little-endian host"
#endif

typedef struct {
    char *path;
    const unsigned char *base;
    size_t size;
    int mapped;
    mp_json_doc *header;
    const mp_json *meta;              /* __metadata__ object or NULL */
} shard;

struct mp_safetensors {
    shard *shards;
    size_t n_shards;
    mp_st_tensor *t;
    size_t n_t, cap_t;
    size_t *order;                    /* tensor indices sorted by name */
    mp_json_doc *config;
};

static const struct { const char *name; size_t size; } DTYPES[] = {
    [MP_ST_F32] = {"F32", 4}, [MP_ST_F16] = {"F16", 2}, [MP_ST_BF16] = {"BF16", 2},
    [MP_ST_F64] = {"F64", 8}, [MP_ST_I64] = {"I64", 8}, [MP_ST_I32] = {"I32", 4},
    [MP_ST_I16] = {"I16", 2}, [MP_ST_I8] = {"I8", 1}, [MP_ST_U8] = {"U8", 1},
    [MP_ST_U16] = {"U16", 2}, [MP_ST_U32] = {"U32", 4}, [MP_ST_U64] = {"U64", 8},
    [MP_ST_BOOL] = {"BOOL", 1}, [MP_ST_F8_E4M3] = {"F8_E4M3", 1}, [MP_ST_F8_E5M2] = {"F8_E5M2", 1},
};
#define N_DTYPES (sizeof DTYPES / sizeof *DTYPES)

const char *mp_safetensors_dtype_name(mp_st_dtype t) {
    return (unsigned)t < N_DTYPES ? DTYPES[t].name : "unknown";
}

/* ---- one shard ---- */

static mp_status map_file(const char *path, shard *s) {
    mp_status st = MP_OK;
    struct stat sb;
    if ((st = mp_check_regular_file(path)) != MP_OK) return st; /* a FIFO would block the open */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if (sb.st_size < 8) {
        st = mp_error(MP_ERR_FORMAT, "%s: truncated: %lld bytes, a safetensors file starts with an 8-byte "
                      "header length", path, (long long)sb.st_size);
        goto cleanup;
    }
    s->size = (size_t)sb.st_size;
    void *m = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        st = mp_error(MP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        goto cleanup;
    }
    s->base = m;
    s->mapped = 1;
cleanup:
    close(fd);
    return st;
}

static mp_status add_tensor(mp_safetensors *st, const mp_st_tensor *t) {
    if (st->n_t == st->cap_t) {
        size_t nc = st->cap_t ? 2 * st->cap_t : 64;
        mp_st_tensor *n = realloc(st->t, nc * sizeof *n);
        if (!n) return mp_error(MP_ERR_NOMEM, "out of memory listing safetensors tensors");
        st->t = n;
        st->cap_t = nc;
    }
    st->t[st->n_t++] = *t;
    return MP_OK;
}

static int json_u64(const mp_json *v, uint64_t *out) {
    int64_t i;
    if (mp_json_int64(v, &i) || i < 0) return -1;
    *out = (uint64_t)i;
    return 0;
}

/* Validates one header entry and appends the tensor. */
static mp_status parse_entry(mp_safetensors *st, const shard *s, const char *name, size_t name_len,
                             const mp_json *e, uint64_t data_size, const unsigned char *data) {
    const char *p = s->path;
    mp_st_tensor t = {.name = name, .file = s->path};
    if (strlen(name) != name_len || name_len == 0)
        return mp_error(MP_ERR_FORMAT, "%s: a tensor name is empty or holds a NUL character", p);
    if (mp_json_type_of(e) != MP_JSON_OBJECT)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': header entry is not an object (JSON %s)", p, name,
                        mp_json_type_name(mp_json_type_of(e)));
    const char *dt = mp_json_string(mp_json_get(e, "dtype"), NULL);
    const mp_json *shape = mp_json_get(e, "shape"), *offs = mp_json_get(e, "data_offsets");
    if (!dt) return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", p, name);
    size_t k;
    for (k = 0; k < N_DTYPES; k++)
        if (!strcmp(dt, DTYPES[k].name)) break;
    if (k == N_DTYPES) return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", p, name, dt);
    t.dtype = (mp_st_dtype)k;
    if (mp_json_type_of(shape) != MP_JSON_ARRAY)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", p, name);
    if (mp_json_len(shape) > MP_ST_MAX_DIMS)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' has %zu dimensions (at most %d)", p, name,
                        mp_json_len(shape), MP_ST_MAX_DIMS);
    t.n_dims = (uint32_t)mp_json_len(shape);
    uint64_t n = 1;
    int overflow = 0;
    for (uint32_t d = 0; d < t.n_dims; d++) {
        if (json_u64(mp_json_at(shape, d), &t.shape[d]))
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': shape[%u] is not a non-negative integer", p, name,
                            (unsigned)d);
        if (t.shape[d] && n > UINT64_MAX / t.shape[d]) overflow = 1;
        else n *= t.shape[d];
    }
    if (overflow && n)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': the element count of its shape overflows", p, name);
    t.n_elements = overflow ? 0 : n;
    if (t.n_elements > UINT64_MAX / DTYPES[k].size)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': its byte size overflows", p, name);
    t.n_bytes = t.n_elements * DTYPES[k].size;
    uint64_t b, en;
    if (mp_json_type_of(offs) != MP_JSON_ARRAY || mp_json_len(offs) != 2 ||
        json_u64(mp_json_at(offs, 0), &b) || json_u64(mp_json_at(offs, 1), &en))
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" must be two non-negative integers "
                        "[begin, end]", p, name);
    if (b > en)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p,
                        name, (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' data_offsets [%llu, %llu] run past the end of the data "
                        "section (%llu bytes)", p, name, (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)data_size);
    if (en - b != t.n_bytes)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': %llu %s elements take %llu bytes but data_offsets "
                        "[%llu, %llu] span %llu", p, name, (unsigned long long)t.n_elements, DTYPES[k].name,
                        (unsigned long long)t.n_bytes, (unsigned long long)b, (unsigned long long)en,
                        (unsigned long long)(en - b));
    t.data = data + b;
    return add_tensor(st, &t);
}

static _Thread_local const mp_st_tensor *sort_t;

static int by_data(const void *a, const void *b) {
    const mp_st_tensor *x = &sort_t[*(const size_t *)a], *y = &sort_t[*(const size_t *)b];
    const unsigned char *px = x->data, *py = y->data;
    return px < py ? -1 : px > py;
}

static int by_name(const void *a, const void *b) {
    return strcmp(sort_t[*(const size_t *)a].name, sort_t[*(const size_t *)b].name);
}

/* Parses the header of s (mapped) and appends its tensors. */
static mp_status parse_shard(mp_safetensors *st, shard *s) {
    const char *p = s->path;
    uint64_t hlen;
    mp_status rc;
    if (s->size < 8)
        return mp_error(MP_ERR_FORMAT, "%s: truncated: %zu bytes, a safetensors file starts with an 8-byte "
                        "header length", p, s->size);
    memcpy(&hlen, s->base, 8);
    if (hlen > s->size - 8)
        return mp_error(MP_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)", p,
                        (unsigned long long)hlen, s->size);
    if (hlen < 2)
        return mp_error(MP_ERR_FORMAT, "%s: header length %llu is too short for a JSON object", p,
                        (unsigned long long)hlen);
    char what[4200];
    snprintf(what, sizeof what, "%s: header", p);
    if ((rc = mp_json_parse((const char *)s->base + 8, (size_t)hlen, what, &s->header))) return rc;
    const mp_json *root = mp_json_root(s->header);
    if (mp_json_type_of(root) != MP_JSON_OBJECT)
        return mp_error(MP_ERR_FORMAT, "%s: the safetensors header is not a JSON object (JSON %s)", p,
                        mp_json_type_name(mp_json_type_of(root)));
    uint64_t data_size = s->size - 8 - hlen;
    const unsigned char *data = s->base + 8 + hlen;
    size_t first = st->n_t;
    mp_json_member e, m;
    for (mp_json_first(root, &e); e.value; mp_json_next(&e)) {
        const mp_json *v = e.value;
        if (!strcmp(e.key, "__metadata__")) {
            if (mp_json_type_of(v) != MP_JSON_OBJECT)
                return mp_error(MP_ERR_FORMAT, "%s: __metadata__ is a %s, not an object of strings", p,
                                mp_json_type_name(mp_json_type_of(v)));
            for (mp_json_first(v, &m); m.value; mp_json_next(&m))
                if (mp_json_type_of(m.value) != MP_JSON_STRING)
                    return mp_error(MP_ERR_FORMAT, "%s: __metadata__ value of '%.60s' is not a string", p, m.key);
            s->meta = v;
            continue;
        }
        if ((rc = parse_entry(st, s, e.key, e.key_len, v, data_size, data))) return rc;
    }
    /* No two tensors of this shard may share bytes. */
    size_t n = st->n_t - first;
    size_t *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) return mp_error(MP_ERR_NOMEM, "%s: out of memory checking offsets", p);
    for (size_t i = 0; i < n; i++) ord[i] = i;
    sort_t = n ? st->t + first : NULL;
    qsort(ord, n, sizeof *ord, by_data);
    rc = MP_OK;
    for (size_t i = 1; i < n && !rc; i++) {
        const mp_st_tensor *a = &st->t[first + ord[i - 1]], *b = &st->t[first + ord[i]];
        if (a->n_bytes && b->n_bytes && (const unsigned char *)a->data + a->n_bytes > (const unsigned char *)b->data)
            rc = mp_error(MP_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section", p, a->name,
                          b->name);
    }
    free(ord);
    return rc;
}

static mp_status add_shard(mp_safetensors *st, const char *path, const void *mem, size_t size) {
    shard *ns = realloc(st->shards, (st->n_shards + 1) * sizeof *ns);
    if (!ns) return mp_error(MP_ERR_NOMEM, "out of memory opening %s", path);
    st->shards = ns;
    shard *s = &st->shards[st->n_shards];
    memset(s, 0, sizeof *s);
    if (!(s->path = strdup(path))) return mp_error(MP_ERR_NOMEM, "out of memory opening %s", path);
    st->n_shards++;
    if (mem) {
        s->base = mem;
        s->size = size;
    } else {
        mp_status rc = map_file(path, s);
        if (rc) return rc;
    }
    return parse_shard(st, s);
}

/* Sorted name index and the uniqueness check across shards. */
static mp_status index_names(mp_safetensors *st) {
    st->order = malloc((st->n_t ? st->n_t : 1) * sizeof *st->order);
    if (!st->order) return mp_error(MP_ERR_NOMEM, "out of memory indexing safetensors tensors");
    for (size_t i = 0; i < st->n_t; i++) st->order[i] = i;
    sort_t = st->t;
    qsort(st->order, st->n_t, sizeof *st->order, by_name);
    for (size_t i = 1; i < st->n_t; i++) {
        const mp_st_tensor *a = &st->t[st->order[i - 1]], *b = &st->t[st->order[i]];
        if (!strcmp(a->name, b->name))
            return mp_error(MP_ERR_FORMAT, "%s: duplicate tensor '%s' (also in %s)", b->file, b->name, a->file);
    }
    return MP_OK;
}

void mp_safetensors_close(mp_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shards; i++) {
        shard *s = &st->shards[i];
        if (s->mapped) munmap((void *)s->base, s->size);
        mp_json_free(s->header);
        free(s->path);
    }
    free(st->shards);
    free(st->t);
    free(st->order);
    mp_json_free(st->config);
    free(st);
}

mp_status mp_safetensors_open_memory(const void *data, size_t size, const char *name, mp_safetensors **out) {
    *out = NULL;
    mp_safetensors *st = calloc(1, sizeof *st);
    if (!st) return mp_error(MP_ERR_NOMEM, "out of memory");
    mp_status rc = add_shard(st, name ? name : "<memory>", data, size);
    if (!rc) rc = index_names(st);
    if (rc) { mp_safetensors_close(st); return rc; }
    *out = st;
    return MP_OK;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int exists(const char *path) { struct stat sb; return stat(path, &sb) == 0; }

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard name from the index: a plain file name in the folder. */
static int safe_name(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static mp_status open_indexed(mp_safetensors *st, const char *dir, const char *index_path) {
    mp_json_doc *idx = NULL;
    char **files = NULL, *path = NULL;
    size_t nf = 0;
    mp_status rc = mp_json_parse_file(index_path, &idx);
    if (rc) return rc;
    const mp_json *map = mp_json_get(mp_json_root(idx), "weight_map");
    if (mp_json_type_of(map) != MP_JSON_OBJECT) {
        rc = mp_error(MP_ERR_FORMAT, "%s: missing \"weight_map\" object", index_path);
        goto cleanup;
    }
    size_t n = mp_json_len(map);
    if (!(files = calloc(n ? n : 1, sizeof *files))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    mp_json_member m;
    for (mp_json_first(map, &m); m.value; mp_json_next(&m)) {
        const char *f = mp_json_string(m.value, NULL);
        if (!f || !safe_name(f)) {
            rc = mp_error(MP_ERR_FORMAT, "%s: weight_map entry '%.60s' is not a file name in the folder",
                          index_path, m.key);
            goto cleanup;
        }
        files[nf++] = (char *)f;
    }
    qsort(files, nf, sizeof *files, cmp_cstr);
    for (size_t i = 0; i < nf; i++) {
        if (i && !strcmp(files[i], files[i - 1])) continue;
        if (!(path = join(dir, files[i]))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
        if ((rc = add_shard(st, path, NULL, 0))) goto cleanup;
        free(path);
        path = NULL;
    }
    if ((rc = index_names(st))) goto cleanup;
    for (mp_json_first(map, &m); m.value; mp_json_next(&m)) {
        const char *name = m.key, *f = mp_json_string(m.value, NULL);
        const mp_st_tensor *t = mp_safetensors_find(st, name);
        const char *base = t ? strrchr(t->file, '/') : NULL;
        if (!t || strcmp(base ? base + 1 : t->file, f)) {
            rc = mp_error(MP_ERR_FORMAT, "%s: weight_map puts tensor '%.80s' in %s, which does not hold it",
                          index_path, name, f);
            goto cleanup;
        }
    }
cleanup:
    free(path);
    free(files);
    mp_json_free(idx);
    return rc;
}

static mp_status open_listing(mp_safetensors *st, const char *dir) {
    DIR *d = opendir(dir);
    char **names = NULL, *path = NULL;
    size_t n = 0, cap = 0;
    mp_status rc = MP_OK;
    if (!d) return mp_error(MP_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 12 || strcmp(e->d_name + l - 12, ".safetensors") || e->d_name[0] == '.') continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
        n++;
    }
    if (!n) {
        rc = mp_error(MP_ERR_FORMAT, "%s: no .safetensors file in the folder", dir);
        goto cleanup;
    }
    qsort(names, n, sizeof *names, cmp_cstr);
    for (size_t i = 0; i < n; i++) {
        if (!(path = join(dir, names[i]))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
        if ((rc = add_shard(st, path, NULL, 0))) goto cleanup;
        free(path);
        path = NULL;
    }
    rc = index_names(st);
cleanup:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(path);
    closedir(d);
    return rc;
}

mp_status mp_safetensors_open(const char *path, mp_safetensors **out) {
    struct stat sb;
    mp_status rc = MP_OK;
    char *p = NULL;
    *out = NULL;
    if (stat(path, &sb)) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mp_safetensors *st = calloc(1, sizeof *st);
    if (!st) return mp_error(MP_ERR_NOMEM, "out of memory");
    if (!S_ISDIR(sb.st_mode)) {
        rc = add_shard(st, path, NULL, 0);
        if (!rc) rc = index_names(st);
        goto cleanup;
    }
    if (!(p = join(path, "config.json"))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    if (exists(p) && (rc = mp_json_parse_file(p, &st->config))) goto cleanup;
    free(p);
    if (!(p = join(path, "model.safetensors.index.json"))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    if (exists(p)) { rc = open_indexed(st, path, p); goto cleanup; }
    free(p);
    if (!(p = join(path, "model.safetensors"))) { rc = mp_error(MP_ERR_NOMEM, "out of memory"); goto cleanup; }
    if (exists(p)) {
        rc = add_shard(st, p, NULL, 0);
        if (!rc) rc = index_names(st);
        goto cleanup;
    }
    rc = open_listing(st, path);
cleanup:
    free(p);
    if (rc) mp_safetensors_close(st);
    else *out = st;
    return rc;
}

/* ---- queries ---- */

size_t mp_safetensors_n_tensors(const mp_safetensors *st) { return st->n_t; }

const mp_st_tensor *mp_safetensors_tensor_at(const mp_safetensors *st, size_t i) {
    return i < st->n_t ? &st->t[i] : NULL;
}

const mp_st_tensor *mp_safetensors_find(const mp_safetensors *st, const char *name) {
    size_t lo = 0, hi = st->n_t;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const mp_st_tensor *t = &st->t[st->order[mid]];
        int c = strcmp(t->name, name);
        if (!c) return t;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

mp_status mp_safetensors_read_f32(const mp_safetensors *st, const mp_st_tensor *t, float *dst, uint64_t n) {
    (void)st;
    if (n != t->n_elements)
        return mp_error(MP_ERR_ARG, "%s: tensor '%s' has %llu elements, the buffer %llu", t->file, t->name,
                        (unsigned long long)t->n_elements, (unsigned long long)n);
    if (n > SIZE_MAX / sizeof(float))
        return mp_error(MP_ERR_NOMEM, "%s: tensor '%s' is too large for this machine", t->file, t->name);
    switch (t->dtype) {
    case MP_ST_F32: mp_quant_dequantize(MP_GGML_F32, t->data, dst, (size_t)n); return MP_OK;
    case MP_ST_F16: mp_quant_dequantize(MP_GGML_F16, t->data, dst, (size_t)n); return MP_OK;
    case MP_ST_BF16: mp_quant_dequantize(MP_GGML_BF16, t->data, dst, (size_t)n); return MP_OK;
    default:
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' has dtype %s; mechprobe reads F32, F16 and BF16 "
                        "tensors", t->file, t->name, mp_safetensors_dtype_name(t->dtype));
    }
}

mp_status mp_safetensors_read_tensor(const mp_safetensors *st, const char *name, float *dst, uint64_t n) {
    const mp_st_tensor *t = mp_safetensors_find(st, name);
    if (!t)
        return mp_error(MP_ERR_FORMAT, "%s: no tensor '%s'", st->n_shards ? st->shards[0].path : "safetensors",
                        name);
    return mp_safetensors_read_f32(st, t, dst, n);
}

uint64_t mp_safetensors_f32_bytes(const mp_safetensors *st) {
    uint64_t s = 0;
    for (size_t i = 0; i < st->n_t; i++) {
        uint64_t b = st->t[i].n_elements > UINT64_MAX / 4 ? UINT64_MAX : st->t[i].n_elements * 4;
        s = s > UINT64_MAX - b ? UINT64_MAX : s + b;
    }
    return s;
}

const char *mp_safetensors_metadata(const mp_safetensors *st, const char *key) {
    for (size_t i = 0; i < st->n_shards; i++) {
        const char *v = mp_json_string(mp_json_get(st->shards[i].meta, key), NULL);
        if (v) return v;
    }
    return NULL;
}

const mp_json *mp_safetensors_config(const mp_safetensors *st) {
    return st->config ? mp_json_root(st->config) : NULL;
}

/* ---- writer ---- */

typedef struct { char *s; size_t len, cap; int oom; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n + 1) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc - b->len < n + 1) {
            if (nc > SIZE_MAX / 2) { b->oom = 1; return; }
            nc *= 2;
        }
        char *ns = realloc(b->s, nc);
        if (!ns) { b->oom = 1; return; }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; sb_add(b, e, 2); }
        else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); sb_add(b, e, 6); }
        else sb_add(b, (const char *)&c, 1);
    }
    sb_add(b, "\"", 1);
}

mp_status mp_safetensors_write(const char *path, const mp_st_entry *tensors, size_t n,
                               const char *const *metadata) {
    sbuf h = {0};
    mp_status rc = MP_OK;
    char num[64];
    mp_out out;
    FILE *f = NULL;
    uint64_t off = 0;
    mp_out_init(&out);
    sb_str(&h, "{");
    int first = 1;
    if (metadata && metadata[0]) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; metadata[i]; i += 2) {
            if (!metadata[i + 1]) { rc = mp_error(MP_ERR_ARG, "%s: metadata key '%s' has no value", path, metadata[i]); goto cleanup; }
            if (i) sb_str(&h, ",");
            sb_json_string(&h, metadata[i]);
            sb_str(&h, ":");
            sb_json_string(&h, metadata[i + 1]);
        }
        sb_str(&h, "}");
        first = 0;
    }
    for (size_t i = 0; i < n; i++) {
        const mp_st_entry *t = &tensors[i];
        if (!t->name || !*t->name || !strcmp(t->name, "__metadata__") || t->n_dims > MP_ST_MAX_DIMS) {
            rc = mp_error(MP_ERR_ARG, "%s: tensor %zu has an empty or reserved name or more than %d dims", path, i,
                          MP_ST_MAX_DIMS);
            goto cleanup;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(tensors[j].name, t->name)) {
                rc = mp_error(MP_ERR_ARG, "%s: tensor '%s' given twice", path, t->name);
                goto cleanup;
            }
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (t->shape[d] && numel > UINT64_MAX / 4 / t->shape[d]) {
                rc = mp_error(MP_ERR_ARG, "%s: tensor '%s': shape overflows", path, t->name);
                goto cleanup;
            }
            numel *= t->shape[d];
        }
        if (numel && !t->data) {
            rc = mp_error(MP_ERR_ARG, "%s: tensor '%s': NULL data", path, t->name);
            goto cleanup;
        }
        if (!first) sb_str(&h, ",");
        first = 0;
        sb_json_string(&h, t->name);
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (uint32_t d = 0; d < t->n_dims; d++) {
            snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            sb_str(&h, num);
        }
        if (off > UINT64_MAX - numel * 4) { rc = mp_error(MP_ERR_ARG, "%s: total size overflows", path); goto cleanup; }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + numel * 4));
        sb_str(&h, num);
        off += numel * 4;
    }
    sb_str(&h, "}");
    while (!h.oom && h.len % 8) sb_str(&h, " ");   /* data section 8-byte aligned, as the reference does */
    if (h.oom) { rc = mp_error(MP_ERR_NOMEM, "%s: out of memory building the header", path); goto cleanup; }
    if ((rc = mp_out_begin(&out, path)) != MP_OK) goto cleanup;
    if (!(f = mp_out_fdopen(&out))) { rc = MP_ERR_IO; goto cleanup; }
    uint64_t hl = h.len;
    int bad = fwrite(&hl, 8, 1, f) != 1 || fwrite(h.s, 1, h.len, f) != h.len;
    for (size_t i = 0; i < n && !bad; i++) {
        uint64_t numel = 1;
        for (uint32_t d = 0; d < tensors[i].n_dims; d++) numel *= tensors[i].shape[d];
        if (numel && fwrite(tensors[i].data, 4, (size_t)numel, f) != numel) bad = 1;
    }
    if (bad) {
        rc = mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        goto cleanup;
    }
    rc = mp_out_commit(&out, 1);   /* fflush, fsync, close, rename */
cleanup:
    mp_out_abort(&out);
    free(h.s);
    return rc;
}
