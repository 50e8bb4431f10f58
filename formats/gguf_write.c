/* gguf_write.c — the GGUF v3 writer: metadata of every value type (deep-copied
 * at set time), tensors from float32 (stored F32, F16 or Q8_0, converted while
 * streaming), pre-encoded bytes, or rows made by a callback during the write
 * (files larger than memory), alignment 32. The file is written to a
 * temporary name in the destination folder and renamed on success, so an
 * interrupted write never leaves a file that looks complete. */
#include "gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define W_ALIGN 32u

typedef struct { char *key; mp_gguf_value val; } wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    uint64_t dims[MP_GGUF_MAX_DIMS];
    uint64_t n_elements, n_bytes;
    const float *f32;             /* borrowed float source, or */
    const void *raw;              /* borrowed pre-encoded bytes, or */
    mp_gguf_rows_fn rows;         /* rows made during the write (with rows_user) */
    void *rows_user;
} wtensor;

struct mp_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

mp_status mp_gguf_writer_new(mp_gguf_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? MP_OK : mp_error(MP_ERR_NOMEM, "out of memory creating a GGUF writer");
}

static void free_value(mp_gguf_value *v) {
    if (v->type == MP_GGUF_STRING) { free((void *)v->v.s.str); return; }
    if (v->type != MP_GGUF_ARRAY) return;
    if (v->v.arr.elem_type == MP_GGUF_STRING) {
        mp_gguf_string *s = (mp_gguf_string *)v->v.arr.data;
        for (uint64_t i = 0; s && i < v->v.arr.n; i++) free((void *)s[i].str);
    } else if (v->v.arr.elem_type == MP_GGUF_ARRAY) {
        mp_gguf_value *a = (mp_gguf_value *)v->v.arr.data;
        for (uint64_t i = 0; a && i < v->v.arr.n; i++) free_value(&a[i]);
    }
    free((void *)v->v.arr.data);
}

void mp_gguf_writer_free(mp_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free_value(&w->kv[i].val); }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static char *dup_bytes(const char *s, uint64_t len) {
    if (len >= SIZE_MAX) return NULL;
    char *p = malloc((size_t)len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, (size_t)len);
    p[len] = 0;
    return p;
}

/* Deep copy of src into dst (validated); dst is zeroed on failure. */
static mp_status copy_value(mp_gguf_value *dst, const mp_gguf_value *src, const char *key, int depth) {
    memset(dst, 0, sizeof *dst);
    if ((unsigned)src->type > MP_GGUF_FLOAT64)
        return mp_error(MP_ERR_ARG, "GGUF metadata '%s': unknown value type %d", key, (int)src->type);
    if (src->type == MP_GGUF_BOOL && src->v.b != 0 && src->v.b != 1)
        return mp_error(MP_ERR_ARG, "GGUF metadata '%s': bool must be 0 or 1", key);
    if (src->type == MP_GGUF_STRING) {
        if (!src->v.s.str && src->v.s.len)
            return mp_error(MP_ERR_ARG, "GGUF metadata '%s': NULL string", key);
        char *s = dup_bytes(src->v.s.str ? src->v.s.str : "", src->v.s.len);
        if (!s) return mp_error(MP_ERR_NOMEM, "out of memory copying GGUF metadata '%s'", key);
        dst->type = MP_GGUF_STRING;
        dst->v.s.str = s;
        dst->v.s.len = src->v.s.len;
        return MP_OK;
    }
    if (src->type != MP_GGUF_ARRAY) { *dst = *src; return MP_OK; }
    mp_gguf_vtype et = src->v.arr.elem_type;
    uint64_t n = src->v.arr.n;
    if ((unsigned)et > MP_GGUF_FLOAT64)
        return mp_error(MP_ERR_ARG, "GGUF metadata '%s': unknown array element type %d", key, (int)et);
    if (et == MP_GGUF_ARRAY && depth >= 7)
        return mp_error(MP_ERR_ARG, "GGUF metadata '%s': arrays nested too deeply", key);
    if (n && !src->v.arr.data) return mp_error(MP_ERR_ARG, "GGUF metadata '%s': NULL array data", key);
    size_t es = mp_gguf_vtype_size(et);
    size_t unit = es ? es : et == MP_GGUF_STRING ? sizeof(mp_gguf_string) : sizeof(mp_gguf_value), bytes;
    if (n > SIZE_MAX || mp_mul_size((size_t)n, unit, &bytes))
        return mp_error(MP_ERR_NOMEM, "GGUF metadata '%s': array too large", key);
    void *data = calloc(bytes ? bytes : 1, 1);
    if (!data) return mp_error(MP_ERR_NOMEM, "out of memory copying GGUF metadata '%s'", key);
    dst->type = MP_GGUF_ARRAY;
    dst->v.arr.elem_type = et;
    dst->v.arr.n = 0;
    dst->v.arr.data = data;
    if (es) {
        if (bytes) memcpy(data, src->v.arr.data, bytes);
        dst->v.arr.n = n;
        if (et == MP_GGUF_BOOL)
            for (size_t i = 0; i < bytes; i++)
                if (((unsigned char *)data)[i] > 1) {
                    free_value(dst);
                    memset(dst, 0, sizeof *dst);
                    return mp_error(MP_ERR_ARG, "GGUF metadata '%s': bool array element not 0 or 1", key);
                }
        return MP_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        mp_status st;
        if (et == MP_GGUF_STRING) {
            const mp_gguf_string *s = &((const mp_gguf_string *)src->v.arr.data)[i];
            mp_gguf_value sv = {.type = MP_GGUF_STRING}, dv;
            sv.v.s = *s;
            st = copy_value(&dv, &sv, key, depth + 1);
            if (!st) ((mp_gguf_string *)data)[i] = dv.v.s;
        } else {
            const mp_gguf_value *e = &((const mp_gguf_value *)src->v.arr.data)[i];
            if (e->type != MP_GGUF_ARRAY)
                st = mp_error(MP_ERR_ARG, "GGUF metadata '%s': element %llu of an array of arrays has type %s",
                              key, (unsigned long long)i, mp_gguf_vtype_name(e->type));
            else
                st = copy_value(&((mp_gguf_value *)data)[i], e, key, depth + 1);
        }
        if (st) { free_value(dst); memset(dst, 0, sizeof *dst); return st; }
        dst->v.arr.n = i + 1;
    }
    return MP_OK;
}

mp_status mp_gguf_writer_set(mp_gguf_writer *w, const char *key, const mp_gguf_value *v) {
    if (!key || !*key || strlen(key) > 65535) return mp_error(MP_ERR_ARG, "GGUF metadata key is empty or too long");
    if (!strcmp(key, "general.alignment") && (v->type != MP_GGUF_UINT32 || v->v.u != W_ALIGN))
        return mp_error(MP_ERR_ARG, "general.alignment: the GGUF writer uses alignment %u", W_ALIGN);
    mp_gguf_value copy;
    mp_status st = copy_value(&copy, v, key, 0);
    if (st) return st;
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            free_value(&w->kv[i].val);
            w->kv[i].val = copy;
            return MP_OK;
        }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *nk = realloc(w->kv, nc * sizeof *nk);
        if (!nk) { free_value(&copy); return mp_error(MP_ERR_NOMEM, "out of memory adding GGUF metadata"); }
        w->kv = nk;
        w->cap_kv = nc;
    }
    char *k = strdup(key);
    if (!k) { free_value(&copy); return mp_error(MP_ERR_NOMEM, "out of memory adding GGUF metadata"); }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].val = copy;
    w->n_kv++;
    return MP_OK;
}

mp_status mp_gguf_writer_set_u32(mp_gguf_writer *w, const char *key, uint32_t x) {
    mp_gguf_value v = {.type = MP_GGUF_UINT32, .v.u = x};
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_i32(mp_gguf_writer *w, const char *key, int32_t x) {
    mp_gguf_value v = {.type = MP_GGUF_INT32, .v.i = x};
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_u64(mp_gguf_writer *w, const char *key, uint64_t x) {
    mp_gguf_value v = {.type = MP_GGUF_UINT64, .v.u = x};
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_f32(mp_gguf_writer *w, const char *key, float x) {
    mp_gguf_value v = {.type = MP_GGUF_FLOAT32, .v.f = x};
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_bool(mp_gguf_writer *w, const char *key, int x) {
    mp_gguf_value v = {.type = MP_GGUF_BOOL, .v.b = x != 0};
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_str(mp_gguf_writer *w, const char *key, const char *s) {
    if (!s) return mp_error(MP_ERR_ARG, "GGUF metadata '%s': NULL string", key ? key : "?");
    mp_gguf_value v = {.type = MP_GGUF_STRING};
    v.v.s.str = s;
    v.v.s.len = strlen(s);
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_array(mp_gguf_writer *w, const char *key, mp_gguf_vtype elem_type,
                                   const void *data, uint64_t n) {
    if (!mp_gguf_vtype_size(elem_type))
        return mp_error(MP_ERR_ARG, "GGUF metadata '%s': set_array takes a scalar element type, not %s",
                        key ? key : "?", mp_gguf_vtype_name(elem_type));
    mp_gguf_value v = {.type = MP_GGUF_ARRAY};
    v.v.arr.elem_type = elem_type;
    v.v.arr.n = n;
    v.v.arr.data = data;
    return mp_gguf_writer_set(w, key, &v);
}

mp_status mp_gguf_writer_set_str_array(mp_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    size_t bytes;
    if (n > SIZE_MAX || mp_mul_size((size_t)n, sizeof(mp_gguf_string), &bytes))
        return mp_error(MP_ERR_NOMEM, "GGUF metadata '%s': array too large", key ? key : "?");
    mp_gguf_string *s = malloc(bytes ? bytes : 1);
    if (!s) return mp_error(MP_ERR_NOMEM, "out of memory adding GGUF metadata");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) { free(s); return mp_error(MP_ERR_ARG, "GGUF metadata '%s': NULL string", key ? key : "?"); }
        s[i].str = strs[i];
        s[i].len = strlen(strs[i]);
    }
    mp_gguf_value v = {.type = MP_GGUF_ARRAY};
    v.v.arr.elem_type = MP_GGUF_STRING;
    v.v.arr.n = n;
    v.v.arr.data = s;
    mp_status st = mp_gguf_writer_set(w, key, &v);
    free(s);
    return st;
}

static mp_status add(mp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                     const uint64_t *dims, const float *f32, const void *raw, uint64_t raw_bytes,
                     mp_gguf_rows_fn rows, void *rows_user) {
    if (!name || !*name || strlen(name) > 65535) return mp_error(MP_ERR_ARG, "GGUF tensor name is empty or too long");
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return mp_error(MP_ERR_ARG, "GGUF tensor '%s' added twice", name);
    if (n_dims < 1 || n_dims > MP_GGUF_MAX_DIMS)
        return mp_error(MP_ERR_ARG, "GGUF tensor '%s': %u dimensions (1 to %d)", name, (unsigned)n_dims,
                        MP_GGUF_MAX_DIMS);
    size_t bv, bb;
    if (mp_quant_block(type, &bv, &bb)) return mp_error(MP_ERR_ARG, "GGUF tensor '%s': unknown type %u", name, (unsigned)type);
    wtensor t = {.type = type, .n_dims = n_dims, .f32 = f32, .raw = raw, .rows = rows, .rows_user = rows_user};
    uint64_t n = 1;
    for (int d = 0; d < MP_GGUF_MAX_DIMS; d++) t.dims[d] = (uint32_t)d < n_dims ? dims[d] : 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (t.dims[d] > (uint64_t)INT64_MAX || (t.dims[d] && n > (uint64_t)INT64_MAX / t.dims[d]))
            return mp_error(MP_ERR_ARG, "GGUF tensor '%s': shape overflows", name);
        n *= t.dims[d];
    }
    if (t.dims[0] % bv)
        return mp_error(MP_ERR_ARG, "GGUF tensor '%s': row length %llu is not a multiple of the %s block size %zu",
                        name, (unsigned long long)t.dims[0], mp_quant_type_name(type), bv);
    t.n_elements = n;
    mp_status st = mp_quant_bytes(type, n, &t.n_bytes);
    if (st) return mp_error_prefix(st, "GGUF tensor '%s'", name);
    if (raw && raw_bytes != t.n_bytes)
        return mp_error(MP_ERR_ARG, "GGUF tensor '%s': %llu bytes given, %s of this shape takes %llu", name,
                        (unsigned long long)raw_bytes, mp_quant_type_name(type), (unsigned long long)t.n_bytes);
    if (!raw && !f32 && !rows && n) return mp_error(MP_ERR_ARG, "GGUF tensor '%s': NULL data", name);
    if (f32 && type == MP_GGML_Q8_0)
        for (uint64_t i = 0; i < n; i++)
            if (!isfinite(f32[i]))
                return mp_error(MP_ERR_ARG, "GGUF tensor '%s': element %llu is not finite (Q8_0 needs finite "
                                "values)", name, (unsigned long long)i);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return mp_error(MP_ERR_NOMEM, "out of memory adding GGUF tensor");
        w->t = nt;
        w->cap_t = nc;
    }
    if (!(t.name = strdup(name))) return mp_error(MP_ERR_NOMEM, "out of memory adding GGUF tensor");
    w->t[w->n_t++] = t;
    return MP_OK;
}

mp_status mp_gguf_writer_add_tensor(mp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const uint64_t *dims, const float *data) {
    if (type != MP_GGML_F32 && type != MP_GGML_F16 && type != MP_GGML_Q8_0)
        return mp_error(MP_ERR_ARG, "GGUF tensor '%s': the writer converts float32 to F32, F16 or Q8_0, not %s",
                        name ? name : "?", mp_quant_type_name(type));
    return add(w, name, type, n_dims, dims, data, NULL, 0, NULL, NULL);
}

mp_status mp_gguf_writer_add_raw(mp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                 const uint64_t *dims, const void *data, uint64_t nbytes) {
    if (!data && nbytes) return mp_error(MP_ERR_ARG, "GGUF tensor '%s': NULL data", name ? name : "?");
    return add(w, name, type, n_dims, dims, NULL, data ? data : "", nbytes, NULL, NULL);
}

mp_status mp_gguf_writer_add_rows(mp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                  const uint64_t *dims, mp_gguf_rows_fn fn, void *user) {
    if (!fn) return mp_error(MP_ERR_ARG, "GGUF tensor '%s': NULL row function", name ? name : "?");
    return add(w, name, type, n_dims, dims, NULL, NULL, 0, fn, user);
}

/* ---- serialisation ---- */

static int put(FILE *f, const void *p, size_t n) { return n && fwrite(p, 1, n, f) != n ? -1 : 0; }
static int put_u32(FILE *f, uint32_t x) { return put(f, &x, 4); }
static int put_u64(FILE *f, uint64_t x) { return put(f, &x, 8); }
static int put_str(FILE *f, const char *s, uint64_t len) { return put_u64(f, len) || put(f, s, (size_t)len); }

static int put_pad(FILE *f, uint64_t pos) {
    static const unsigned char zeros[W_ALIGN];
    return put(f, zeros, (size_t)((W_ALIGN - pos % W_ALIGN) % W_ALIGN));
}

static int put_scalar(FILE *f, const mp_gguf_value *v) {
    switch (v->type) {
    case MP_GGUF_UINT8: { uint8_t x = (uint8_t)v->v.u; return put(f, &x, 1); }
    case MP_GGUF_INT8: { int8_t x = (int8_t)v->v.i; return put(f, &x, 1); }
    case MP_GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u; return put(f, &x, 2); }
    case MP_GGUF_INT16: { int16_t x = (int16_t)v->v.i; return put(f, &x, 2); }
    case MP_GGUF_UINT32: { uint32_t x = (uint32_t)v->v.u; return put(f, &x, 4); }
    case MP_GGUF_INT32: { int32_t x = (int32_t)v->v.i; return put(f, &x, 4); }
    case MP_GGUF_UINT64: return put(f, &v->v.u, 8);
    case MP_GGUF_INT64: return put(f, &v->v.i, 8);
    case MP_GGUF_FLOAT32: { float x = (float)v->v.f; return put(f, &x, 4); }
    case MP_GGUF_FLOAT64: return put(f, &v->v.f, 8);
    case MP_GGUF_BOOL: { uint8_t x = v->v.b ? 1 : 0; return put(f, &x, 1); }
    default: return -1;
    }
}

/* Value body (without its type tag). */
static int put_value(FILE *f, const mp_gguf_value *v) {
    if (v->type == MP_GGUF_STRING) return put_str(f, v->v.s.str, v->v.s.len);
    if (v->type != MP_GGUF_ARRAY) return put_scalar(f, v);
    mp_gguf_vtype et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    if (put_u32(f, (uint32_t)et) || put_u64(f, n)) return -1;
    size_t es = mp_gguf_vtype_size(et);
    if (es) return put(f, v->v.arr.data, (size_t)n * es);
    for (uint64_t i = 0; i < n; i++) {
        int r = et == MP_GGUF_STRING
                    ? put_str(f, ((const mp_gguf_string *)v->v.arr.data)[i].str,
                              ((const mp_gguf_string *)v->v.arr.data)[i].len)
                    : put_value(f, &((const mp_gguf_value *)v->v.arr.data)[i]);
        if (r) return -1;
    }
    return 0;
}

/* Tensor data, converting float32 in chunks. */
static int put_tensor(FILE *f, const wtensor *t) {
    if (t->raw) return put(f, t->raw, (size_t)t->n_bytes);
    if (t->type == MP_GGML_F32) return put(f, t->f32, (size_t)t->n_elements * 4);
    enum { CHUNK = 8192 };                  /* multiple of 32 */
    unsigned char buf[CHUNK / 32 * 34 > CHUNK * 2 ? CHUNK / 32 * 34 : CHUNK * 2];
    for (uint64_t i = 0; i < t->n_elements; i += CHUNK) {
        size_t n = (size_t)(t->n_elements - i < CHUNK ? t->n_elements - i : CHUNK), bytes;
        if (t->type == MP_GGML_F16) {
            for (size_t j = 0; j < n; j++) {
                uint16_t h = mp_quant_f32_to_f16(t->f32[i + j]);
                memcpy(buf + 2 * j, &h, 2);
            }
            bytes = 2 * n;
        } else {
            mp_quant_quantize_q8_0(t->f32 + i, buf, n);
            bytes = n / 32 * 34;
        }
        if (put(f, buf, bytes)) return -1;
    }
    return 0;
}

/* Tensor data made by its row function, a block of whole rows (about 16 MiB) at a time. */
static mp_status put_rows(FILE *f, const wtensor *t, const char *path) {
    uint64_t row_bytes = 0;
    if (!t->n_elements || mp_quant_bytes(t->type, t->dims[0], &row_bytes) || !row_bytes) return MP_OK;
    const uint64_t n_rows = t->n_elements / t->dims[0];
    uint64_t per = ((uint64_t)16 << 20) / row_bytes;
    per = per < 1 ? 1 : per > n_rows ? n_rows : per;
    if (per * row_bytes > SIZE_MAX) return mp_error(MP_ERR_NOMEM, "GGUF tensor '%s': a row is too large", t->name);
    unsigned char *buf = malloc((size_t)(per * row_bytes));
    if (!buf) return mp_error(MP_ERR_NOMEM, "out of memory for a block of rows of GGUF tensor '%s'", t->name);
    mp_status st = MP_OK;
    for (uint64_t r = 0; r < n_rows && !st; r += per) {
        const uint64_t n = n_rows - r < per ? n_rows - r : per;
        if ((st = t->rows(t->rows_user, r, n, buf))) break;
        if (put(f, buf, (size_t)(n * row_bytes)))
            st = mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    free(buf);
    return st;
}

/* Bytes of a value's body, as put_value writes it. */
static uint64_t value_bytes(const mp_gguf_value *v) {
    if (v->type == MP_GGUF_STRING) return 8 + v->v.s.len;
    if (v->type != MP_GGUF_ARRAY) return mp_gguf_vtype_size(v->type);
    const size_t es = mp_gguf_vtype_size(v->v.arr.elem_type);
    uint64_t b = 4 + 8;
    if (es) return b + v->v.arr.n * es;
    for (uint64_t i = 0; i < v->v.arr.n; i++)
        b += v->v.arr.elem_type == MP_GGUF_STRING ? 8 + ((const mp_gguf_string *)v->v.arr.data)[i].len
                                                  : value_bytes(&((const mp_gguf_value *)v->v.arr.data)[i]);
    return b;
}

uint64_t mp_gguf_writer_file_bytes(const mp_gguf_writer *w) {
    uint64_t b = 4 + 4 + 8 + 8, data = 0;
    for (size_t i = 0; i < w->n_kv; i++) b += 8 + strlen(w->kv[i].key) + 4 + value_bytes(&w->kv[i].val);
    for (size_t i = 0; i < w->n_t; i++) {
        b += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
        data += w->t[i].n_bytes + (W_ALIGN - w->t[i].n_bytes % W_ALIGN) % W_ALIGN;
    }
    return b + (W_ALIGN - b % W_ALIGN) % W_ALIGN + data;
}

mp_status mp_gguf_writer_write(const mp_gguf_writer *w, const char *path) {
    mp_out out;
    mp_status st = mp_out_begin(&out, path);
    if (st != MP_OK) return st;
    FILE *f = mp_out_fdopen(&out);
    if (!f) { mp_out_abort(&out); return MP_ERR_IO; }
    int bad = put(f, "GGUF", 4) || put_u32(f, 3) || put_u64(f, w->n_t) || put_u64(f, w->n_kv);
    for (size_t i = 0; i < w->n_kv && !bad; i++)
        bad = put_str(f, w->kv[i].key, strlen(w->kv[i].key)) || put_u32(f, (uint32_t)w->kv[i].val.type) ||
              put_value(f, &w->kv[i].val);
    uint64_t off = 0;   /* offset within the data section, each tensor aligned */
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        const wtensor *t = &w->t[i];
        bad = put_str(f, t->name, strlen(t->name)) || put_u32(f, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !bad; d++) bad = put_u64(f, t->dims[d]);
        bad = bad || put_u32(f, t->type) || put_u64(f, off);
        off += t->n_bytes + (W_ALIGN - t->n_bytes % W_ALIGN) % W_ALIGN;
    }
    long pos = bad ? 0 : ftell(f);
    bad = bad || pos < 0 || put_pad(f, (uint64_t)pos);
    for (size_t i = 0; i < w->n_t && !bad && !st; i++) {
        if (w->t[i].rows) st = put_rows(f, &w->t[i], path);
        else bad = put_tensor(f, &w->t[i]);
        bad = bad || (!st && put_pad(f, w->t[i].n_bytes));
    }
    if (bad || st) {
        if (!st) st = mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        mp_out_abort(&out);
        return st;
    }
    return mp_out_commit(&out, 1);   /* fflush, fsync, close, rename */
}
