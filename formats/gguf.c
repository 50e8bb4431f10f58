/* gguf.c — the GGUF reader: memory-maps a file (or takes a buffer), validates
 * header, metadata, tensor infos and the data section against the file size
 * before anything is used, and keeps decoded metadata (strings NUL-terminated,
 * arrays as packed C arrays) in an arena owned by the handle. Lookups by key
 * and by tensor name use sorted indices, which also find duplicates. The
 * writer lives in gguf_write.c. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian files by memcpy and needs a little-endian host"
#endif

#define GGUF_MAX_NESTING 8        /* arrays of arrays of ... */
#define GGUF_MAX_KEY 65535        /* spec: keys are at most 2^16-1 bytes */

typedef struct { mp_gguf_string key; mp_gguf_value val; } gguf_kv;

typedef struct arena_chunk { struct arena_chunk *next; size_t used, cap; } arena_chunk;

struct mp_gguf {
    char *path;
    const unsigned char *base;
    size_t size;
    int mapped;
    uint32_t version, alignment;
    uint64_t data_start;
    size_t n_kv, n_tensors;
    gguf_kv *kv;
    size_t *kv_order;             /* kv indices sorted by key */
    mp_gguf_tensor *tensors;
    size_t *t_order;              /* tensor indices sorted by name */
    arena_chunk *arena;
};

/* ---- arena for decoded metadata and names ---- */

static void *g_alloc(mp_gguf *g, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_chunk *c = g->arena;
    size_t hdr = (sizeof(arena_chunk) + 15) & ~(size_t)15;
    if (!c || c->cap - c->used < n) {
        size_t n_chunks = 0;
        for (arena_chunk *k = g->arena; k; k = k->next) n_chunks++;
        size_t grow = (size_t)16384 << (n_chunks < 6 ? n_chunks : 6);   /* 16 KiB .. 1 MiB */
        size_t cap = n > grow ? n : grow, total;
        if (mp_add_size(cap, hdr, &total)) return NULL;
        c = malloc(total);
        if (!c) return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    void *p = (char *)c + hdr + c->used;
    c->used += n;
    return p;
}

/* ---- bounded cursor over the file ---- */

typedef struct { const unsigned char *b; size_t pos, size; const char *path; } cursor;

static mp_status truncated(const cursor *c, const char *what, uint64_t need) {
    return mp_error(MP_ERR_FORMAT, "%s: truncated: %s at offset %zu needs %llu bytes but the file "
                    "ends at %zu", c->path, what, c->pos, (unsigned long long)need, c->size);
}

static mp_status rd(cursor *c, void *dst, size_t n, const char *what) {
    if (c->size - c->pos < n) return truncated(c, what, n);
    memcpy(dst, c->b + c->pos, n);
    c->pos += n;
    return MP_OK;
}

static mp_status rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static mp_status rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* A string into the arena; what describes it for messages. */
static mp_status rd_string(mp_gguf *g, cursor *c, mp_gguf_string *s, const char *what) {
    uint64_t len = 0;
    mp_status st = rd_u64(c, &len, what);
    if (st) return st;
    if (len > c->size - c->pos)
        return mp_error(MP_ERR_FORMAT, "%s: %s at offset %zu has length %llu, past the end of the file "
                        "(%zu bytes)", c->path, what, c->pos - 8, (unsigned long long)len, c->size);
    char *p = g_alloc(g, (size_t)len + 1);
    if (!p) return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %s", c->path, what);
    memcpy(p, c->b + c->pos, (size_t)len);
    p[len] = 0;
    c->pos += (size_t)len;
    s->str = p;
    s->len = len;
    return MP_OK;
}

size_t mp_gguf_vtype_size(mp_gguf_vtype t) {
    switch (t) {
    case MP_GGUF_UINT8: case MP_GGUF_INT8: case MP_GGUF_BOOL: return 1;
    case MP_GGUF_UINT16: case MP_GGUF_INT16: return 2;
    case MP_GGUF_UINT32: case MP_GGUF_INT32: case MP_GGUF_FLOAT32: return 4;
    case MP_GGUF_UINT64: case MP_GGUF_INT64: case MP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *mp_gguf_vtype_name(mp_gguf_vtype t) {
    static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return (unsigned)t < 13 ? names[t] : "unknown";
}

static mp_status rd_value(mp_gguf *g, cursor *c, mp_gguf_vtype type, mp_gguf_value *v,
                          const char *key, int depth);

/* Decodes one scalar from p (already bounds-checked) into v. */
static mp_status decode_scalar(const cursor *c, const unsigned char *p, mp_gguf_vtype t,
                               mp_gguf_value *v, const char *key) {
    v->type = t;
    switch (t) {
    case MP_GGUF_UINT8: v->v.u = p[0]; break;
    case MP_GGUF_INT8: v->v.i = (int8_t)p[0]; break;
    case MP_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u = x; break; }
    case MP_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i = x; break; }
    case MP_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u = x; break; }
    case MP_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i = x; break; }
    case MP_GGUF_UINT64: { uint64_t x; memcpy(&x, p, 8); v->v.u = x; break; }
    case MP_GGUF_INT64: { int64_t x; memcpy(&x, p, 8); v->v.i = x; break; }
    case MP_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f = x; break; }
    case MP_GGUF_FLOAT64: { double x; memcpy(&x, p, 8); v->v.f = x; break; }
    case MP_GGUF_BOOL:
        if (p[0] > 1)
            return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': bool byte %u at offset %zu (must be 0 or 1)",
                            c->path, key, p[0], (size_t)(p - c->b));
        v->v.b = p[0];
        break;
    default: break;
    }
    return MP_OK;
}

static mp_status rd_array(mp_gguf *g, cursor *c, mp_gguf_value *v, const char *key, int depth) {
    uint32_t et = 0;
    uint64_t n = 0;
    mp_status st;
    size_t at = c->pos;
    if ((st = rd_u32(c, &et, "array element type")) || (st = rd_u64(c, &n, "array length"))) return st;
    if (et > MP_GGUF_FLOAT64)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': array at offset %zu has unknown element "
                        "type %u", c->path, key, at, (unsigned)et);
    if (et == MP_GGUF_ARRAY && depth + 1 >= GGUF_MAX_NESTING)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': arrays nested deeper than %d levels",
                        c->path, key, GGUF_MAX_NESTING);
    /* Smallest encoding of one element: a scalar's size, 8 for a string's
     * length, 12 for a nested array's type and count. */
    size_t min = mp_gguf_vtype_size((mp_gguf_vtype)et);
    if (!min) min = et == MP_GGUF_STRING ? 8 : 12;
    if (n > (c->size - c->pos) / min)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': array of %llu %s at offset %zu cannot fit in "
                        "the %zu bytes left in the file", c->path, key, (unsigned long long)n,
                        mp_gguf_vtype_name((mp_gguf_vtype)et), at, c->size - c->pos);
    v->type = MP_GGUF_ARRAY;
    v->v.arr.elem_type = (mp_gguf_vtype)et;
    v->v.arr.n = n;
    v->v.arr.data = NULL;
    if (mp_gguf_vtype_size((mp_gguf_vtype)et)) {
        size_t bytes = (size_t)n * min;    /* <= bytes left in the file */
        unsigned char *d = g_alloc(g, bytes ? bytes : 1);
        if (!d) return mp_error(MP_ERR_NOMEM, "%s: out of memory reading metadata '%s'", c->path, key);
        memcpy(d, c->b + c->pos, bytes);
        if (et == MP_GGUF_BOOL)
            for (size_t i = 0; i < bytes; i++)
                if (d[i] > 1)
                    return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': bool byte %u at offset %zu (must "
                                    "be 0 or 1)", c->path, key, d[i], c->pos + i);
        c->pos += bytes;
        v->v.arr.data = d;
        return MP_OK;
    }
    if (et == MP_GGUF_STRING) {
        mp_gguf_string *s = g_alloc(g, (size_t)n * sizeof *s + 1);
        if (!s) return mp_error(MP_ERR_NOMEM, "%s: out of memory reading metadata '%s'", c->path, key);
        char what[96];
        snprintf(what, sizeof what, "string in array '%.60s'", key);
        for (uint64_t i = 0; i < n; i++)
            if ((st = rd_string(g, c, &s[i], what))) return st;
        v->v.arr.data = s;
        return MP_OK;
    }
    mp_gguf_value *a = g_alloc(g, (size_t)n * sizeof *a + 1);
    if (!a) return mp_error(MP_ERR_NOMEM, "%s: out of memory reading metadata '%s'", c->path, key);
    for (uint64_t i = 0; i < n; i++)
        if ((st = rd_value(g, c, MP_GGUF_ARRAY, &a[i], key, depth + 1))) return st;
    v->v.arr.data = a;
    return MP_OK;
}

static mp_status rd_value(mp_gguf *g, cursor *c, mp_gguf_vtype type, mp_gguf_value *v,
                          const char *key, int depth) {
    memset(v, 0, sizeof *v);
    if (type == MP_GGUF_STRING) {
        char what[96];
        snprintf(what, sizeof what, "string value of '%.60s'", key);
        v->type = type;
        return rd_string(g, c, &v->v.s, what);
    }
    if (type == MP_GGUF_ARRAY) return rd_array(g, c, v, key, depth);
    size_t n = mp_gguf_vtype_size(type);
    if (!n)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': unknown value type %u at offset %zu",
                        c->path, key, (unsigned)type, c->pos - 4);
    if (c->size - c->pos < n) return truncated(c, "metadata value", n);
    mp_status st = decode_scalar(c, c->b + c->pos, type, v, key);
    c->pos += n;
    return st;
}

/* ---- sorting helpers (indices into the kv / tensor arrays) ---- */

static _Thread_local const mp_gguf *sort_g;

static int cmp_str(const char *a, uint64_t la, const char *b, uint64_t lb) {
    size_t n = (size_t)(la < lb ? la : lb);
    int c = memcmp(a, b, n);
    return c ? c : (la < lb ? -1 : la > lb);
}

static int kv_cmp(const void *a, const void *b) {
    const gguf_kv *x = &sort_g->kv[*(const size_t *)a], *y = &sort_g->kv[*(const size_t *)b];
    return cmp_str(x->key.str, x->key.len, y->key.str, y->key.len);
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(sort_g->tensors[*(const size_t *)a].name, sort_g->tensors[*(const size_t *)b].name);
}

static int offset_cmp(const void *a, const void *b) {
    const mp_gguf_tensor *x = &sort_g->tensors[*(const size_t *)a], *y = &sort_g->tensors[*(const size_t *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ---- parsing ---- */

static mp_status parse_header(mp_gguf *g, cursor *c, uint64_t *n_tensors, uint64_t *n_kv) {
    unsigned char magic[4];
    mp_status st;
    if (c->size < 4) return truncated(c, "the magic \"GGUF\"", 4);
    memcpy(magic, c->b, 4);
    if (memcmp(magic, "GGUF", 4))
        return mp_error(MP_ERR_FORMAT, "%s: not a GGUF file (starts with bytes %02x %02x %02x %02x, "
                        "expected \"GGUF\")", c->path, magic[0], magic[1], magic[2], magic[3]);
    c->pos = 4;
    if ((st = rd_u32(c, &g->version, "the version"))) return st;
    if (g->version == 1)
        return mp_error(MP_ERR_FORMAT, "%s: GGUF version 1 (32-bit counts, 2023) is not supported; "
                        "convert the model again with a current llama.cpp (versions 2 and 3 are read)", c->path);
    if (g->version != 2 && g->version != 3) {
        if (g->version && !(g->version & 0xffff))
            return mp_error(MP_ERR_FORMAT, "%s: big-endian GGUF (version field 0x%08x) is not supported",
                            c->path, (unsigned)g->version);
        return mp_error(MP_ERR_FORMAT, "%s: unsupported GGUF version %u (mechprobe reads 2 and 3)",
                        c->path, (unsigned)g->version);
    }
    if ((st = rd_u64(c, n_tensors, "the tensor count")) || (st = rd_u64(c, n_kv, "the metadata count")))
        return st;
    size_t left = c->size - c->pos;
    /* Smallest kv: 8-byte key length, 1-byte key, 4-byte type, 1-byte value;
     * smallest tensor info: 8 + 1 (name) + 4 (n_dims) + 4 (type) + 8 (offset). */
    if (*n_kv > left / 14)
        return mp_error(MP_ERR_FORMAT, "%s: header claims %llu metadata entries but only %zu bytes follow "
                        "the header", c->path, (unsigned long long)*n_kv, left);
    if (*n_tensors > left / 25)
        return mp_error(MP_ERR_FORMAT, "%s: header claims %llu tensors but only %zu bytes follow the header",
                        c->path, (unsigned long long)*n_tensors, left);
    return MP_OK;
}

static mp_status parse_kv(mp_gguf *g, cursor *c) {
    mp_status st;
    for (size_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        uint32_t type = 0;
        size_t at = c->pos;
        if ((st = rd_string(g, c, &kv->key, "metadata key"))) return st;
        if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY || strlen(kv->key.str) != kv->key.len)
            return mp_error(MP_ERR_FORMAT, "%s: metadata key %zu at offset %zu is empty, longer than %d bytes "
                            "or holds a NUL byte", c->path, i, at, GGUF_MAX_KEY);
        if ((st = rd_u32(c, &type, "metadata value type"))) return st;
        if (type > MP_GGUF_FLOAT64)
            return mp_error(MP_ERR_FORMAT, "%s: metadata '%s' has unknown value type %u", c->path,
                            kv->key.str, (unsigned)type);
        if ((st = rd_value(g, c, (mp_gguf_vtype)type, &kv->val, kv->key.str, 0))) return st;
    }
    for (size_t i = 0; i < g->n_kv; i++) g->kv_order[i] = i;
    sort_g = g;
    qsort(g->kv_order, g->n_kv, sizeof(size_t), kv_cmp);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!kv_cmp(&g->kv_order[i - 1], &g->kv_order[i]))
            return mp_error(MP_ERR_FORMAT, "%s: duplicate metadata key '%s'", c->path,
                            g->kv[g->kv_order[i]].key.str);
    g->alignment = MP_GGUF_DEFAULT_ALIGNMENT;
    const mp_gguf_value *al = mp_gguf_get(g, "general.alignment");
    if (al) {
        if (al->type != MP_GGUF_UINT32)
            return mp_error(MP_ERR_FORMAT, "%s: general.alignment has type %s (must be uint32)", c->path,
                            mp_gguf_vtype_name(al->type));
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            return mp_error(MP_ERR_FORMAT, "%s: general.alignment is %llu (must be a power of two)", c->path,
                            (unsigned long long)al->v.u);
        g->alignment = (uint32_t)al->v.u;
    }
    return MP_OK;
}

static mp_status parse_tensor_info(mp_gguf *g, cursor *c, size_t i) {
    mp_gguf_tensor *t = &g->tensors[i];
    mp_gguf_string name = {NULL, 0};
    uint32_t nd = 0, type = 0;
    mp_status st;
    size_t at = c->pos;
    if ((st = rd_string(g, c, &name, "tensor name"))) return st;
    if (name.len == 0 || name.len > GGUF_MAX_KEY || strlen(name.str) != name.len)
        return mp_error(MP_ERR_FORMAT, "%s: tensor %zu at offset %zu: name is empty, longer than %d bytes "
                        "or holds a NUL byte", c->path, i, at, GGUF_MAX_KEY);
    t->name = name.str;
    if ((st = rd_u32(c, &nd, "tensor n_dims"))) return st;
    if (nd > MP_GGUF_MAX_DIMS)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (at most %d)", c->path, t->name,
                        (unsigned)nd, MP_GGUF_MAX_DIMS);
    t->n_dims = nd;
    uint64_t n = 1;
    int overflow = 0;
    for (int d = 0; d < MP_GGUF_MAX_DIMS; d++) t->dims[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if ((st = rd_u64(c, &t->dims[d], "tensor dimension"))) return st;
        if (t->dims[d] > (uint64_t)INT64_MAX)
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' dimension %u is %llu (negative as int64)",
                            c->path, t->name, (unsigned)d, (unsigned long long)t->dims[d]);
        if (t->dims[d] && n > (uint64_t)INT64_MAX / t->dims[d]) overflow = 1;
        else n *= t->dims[d];
    }
    if (overflow && n != 0)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': the element count of its shape overflows int64",
                        c->path, t->name);
    t->n_elements = overflow ? 0 : n;
    if ((st = rd_u32(c, &type, "tensor type"))) return st;
    size_t bv, bb;
    if (mp_quant_block(type, &bv, &bb))
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' has unknown ggml type %u", c->path, t->name,
                        (unsigned)type);
    t->type = type;
    if (t->dims[0] % bv)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': row length %llu is not a multiple of the %s block "
                        "size %zu", c->path, t->name, (unsigned long long)t->dims[0], mp_quant_type_name(type), bv);
    if (t->n_elements / bv > UINT64_MAX / bb)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s': %llu %s values overflow a 64-bit byte count", c->path,
                        t->name, (unsigned long long)t->n_elements, mp_quant_type_name(type));
    t->n_bytes = t->n_elements / bv * bb;
    if ((st = rd_u64(c, &t->offset, "tensor data offset"))) return st;
    if (t->offset % g->alignment)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' data offset %llu is not a multiple of the alignment %u",
                        c->path, t->name, (unsigned long long)t->offset, (unsigned)g->alignment);
    return MP_OK;
}

static mp_status parse_tensors(mp_gguf *g, cursor *c) {
    mp_status st;
    for (size_t i = 0; i < g->n_tensors; i++)
        if ((st = parse_tensor_info(g, c, i))) return st;
    uint64_t pad = (g->alignment - c->pos % g->alignment) % g->alignment;
    g->data_start = (uint64_t)c->pos + pad;
    if (g->n_tensors && g->data_start > c->size)
        return mp_error(MP_ERR_FORMAT, "%s: truncated: the data section starts at offset %llu but the file "
                        "has %zu bytes", c->path, (unsigned long long)g->data_start, c->size);
    uint64_t room = g->data_start <= c->size ? c->size - g->data_start : 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        mp_gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->n_bytes > room - t->offset)
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' data [offset %llu, %llu bytes] runs past the end "
                            "of the file (%zu bytes)", c->path, t->name,
                            (unsigned long long)(g->data_start + (t->offset < room ? t->offset : room)),
                            (unsigned long long)t->n_bytes, c->size);
        t->data = c->b + g->data_start + t->offset;
    }
    for (size_t i = 0; i < g->n_tensors; i++) g->t_order[i] = i;
    sort_g = g;
    qsort(g->t_order, g->n_tensors, sizeof(size_t), name_cmp);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!name_cmp(&g->t_order[i - 1], &g->t_order[i]))
            return mp_error(MP_ERR_FORMAT, "%s: duplicate tensor name '%s'", c->path,
                            g->tensors[g->t_order[i]].name);
    /* Overlap check on a temporary offset order. */
    size_t *ord = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *ord);
    if (!ord) return mp_error(MP_ERR_NOMEM, "%s: out of memory checking tensor offsets", c->path);
    for (size_t i = 0; i < g->n_tensors; i++) ord[i] = i;
    qsort(ord, g->n_tensors, sizeof *ord, offset_cmp);
    st = MP_OK;
    for (size_t i = 1; i < g->n_tensors && !st; i++) {
        const mp_gguf_tensor *a = &g->tensors[ord[i - 1]], *b = &g->tensors[ord[i]];
        if (a->n_bytes && b->n_bytes && a->offset + a->n_bytes > b->offset)
            st = mp_error(MP_ERR_FORMAT, "%s: tensors '%s' [offset %llu, %llu bytes] and '%s' [offset %llu] "
                          "overlap", c->path, a->name, (unsigned long long)a->offset,
                          (unsigned long long)a->n_bytes, b->name, (unsigned long long)b->offset);
    }
    free(ord);
    return st;
}

static mp_status parse(mp_gguf *g) {
    cursor c = {g->base, 0, g->size, g->path};
    uint64_t nt = 0, nkv = 0;
    mp_status st;
    if ((st = parse_header(g, &c, &nt, &nkv))) return st;
    g->n_kv = (size_t)nkv;
    g->n_tensors = (size_t)nt;
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->kv_order = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv_order);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->t_order = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->t_order);
    if (!g->kv || !g->kv_order || !g->tensors || !g->t_order)
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for %zu metadata entries and %zu tensors", g->path,
                        g->n_kv, g->n_tensors);
    if ((st = parse_kv(g, &c))) return st;
    return parse_tensors(g, &c);
}

void mp_gguf_close(mp_gguf *g) {
    if (!g) return;
    if (g->mapped && g->base) munmap((void *)g->base, g->size);
    arena_chunk *c = g->arena;
    while (c) { arena_chunk *n = c->next; free(c); c = n; }
    free(g->kv);
    free(g->kv_order);
    free(g->tensors);
    free(g->t_order);
    free(g->path);
    free(g);
}

static mp_gguf *new_handle(const char *name) {
    mp_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name))) {
        free(g);
        mp_error(MP_ERR_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    return g;
}

mp_status mp_gguf_open_memory(const void *data, size_t size, const char *name, mp_gguf **out) {
    *out = NULL;
    if (!name) name = "<memory>";
    mp_gguf *g = new_handle(name);
    if (!g) return MP_ERR_NOMEM;
    g->base = data;
    g->size = size;
    mp_status st = parse(g);
    if (st) { mp_gguf_close(g); return st; }
    *out = g;
    return MP_OK;
}

mp_status mp_gguf_open(const char *path, mp_gguf **out) {
    mp_status st = MP_OK;
    struct stat sb;
    mp_gguf *g = NULL;
    *out = NULL;
    if ((st = mp_check_regular_file(path)) != MP_OK) return st; /* a FIFO would block the open */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if (sb.st_size == 0) {
        st = mp_error(MP_ERR_FORMAT, "%s: empty file (not a GGUF file)", path);
        goto cleanup;
    }
    if (!(g = new_handle(path))) { st = MP_ERR_NOMEM; goto cleanup; }
    g->size = (size_t)sb.st_size;
    void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        st = mp_error(MP_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        goto cleanup;
    }
    g->base = m;
    g->mapped = 1;
    if ((st = parse(g))) goto cleanup;
    *out = g;
    g = NULL;
cleanup:
    mp_gguf_close(g);
    close(fd);
    return st;
}

/* ---- queries ---- */

const char *mp_gguf_path(const mp_gguf *g) { return g->path; }
uint32_t mp_gguf_version(const mp_gguf *g) { return g->version; }
uint32_t mp_gguf_alignment(const mp_gguf *g) { return g->alignment; }
size_t mp_gguf_n_kv(const mp_gguf *g) { return g->n_kv; }
const char *mp_gguf_kv_key(const mp_gguf *g, size_t i) { return i < g->n_kv ? g->kv[i].key.str : NULL; }
const mp_gguf_value *mp_gguf_kv_value(const mp_gguf *g, size_t i) { return i < g->n_kv ? &g->kv[i].val : NULL; }

const mp_gguf_value *mp_gguf_get(const mp_gguf *g, const char *key) {
    size_t lo = 0, hi = g->n_kv, kl = strlen(key);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const gguf_kv *kv = &g->kv[g->kv_order[mid]];
        int c = cmp_str(kv->key.str, kv->key.len, key, kl);
        if (c == 0) return &kv->val;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

mp_gguf_lookup mp_gguf_get_int(const mp_gguf *g, const char *key, int64_t *out) {
    const mp_gguf_value *v = mp_gguf_get(g, key);
    if (!v) return MP_GGUF_MISSING;
    switch (v->type) {
    case MP_GGUF_UINT8: case MP_GGUF_UINT16: case MP_GGUF_UINT32: case MP_GGUF_UINT64:
        if (v->v.u > (uint64_t)INT64_MAX) return MP_GGUF_WRONG_TYPE;
        *out = (int64_t)v->v.u;
        return MP_GGUF_FOUND;
    case MP_GGUF_INT8: case MP_GGUF_INT16: case MP_GGUF_INT32: case MP_GGUF_INT64:
        *out = v->v.i;
        return MP_GGUF_FOUND;
    default: return MP_GGUF_WRONG_TYPE;
    }
}

mp_gguf_lookup mp_gguf_get_float(const mp_gguf *g, const char *key, double *out) {
    const mp_gguf_value *v = mp_gguf_get(g, key);
    if (!v) return MP_GGUF_MISSING;
    if (v->type != MP_GGUF_FLOAT32 && v->type != MP_GGUF_FLOAT64) return MP_GGUF_WRONG_TYPE;
    *out = v->v.f;
    return MP_GGUF_FOUND;
}

mp_gguf_lookup mp_gguf_get_bool(const mp_gguf *g, const char *key, int *out) {
    const mp_gguf_value *v = mp_gguf_get(g, key);
    if (!v) return MP_GGUF_MISSING;
    if (v->type != MP_GGUF_BOOL) return MP_GGUF_WRONG_TYPE;
    *out = v->v.b;
    return MP_GGUF_FOUND;
}

mp_gguf_lookup mp_gguf_get_str(const mp_gguf *g, const char *key, const char **out) {
    const mp_gguf_value *v = mp_gguf_get(g, key);
    if (!v) return MP_GGUF_MISSING;
    if (v->type != MP_GGUF_STRING) return MP_GGUF_WRONG_TYPE;
    *out = v->v.s.str;
    return MP_GGUF_FOUND;
}

static mp_gguf_lookup get_array(const mp_gguf *g, const char *key, mp_gguf_vtype et,
                                const void **out, uint64_t *n) {
    const mp_gguf_value *v = mp_gguf_get(g, key);
    if (!v) return MP_GGUF_MISSING;
    if (v->type != MP_GGUF_ARRAY || v->v.arr.elem_type != et) return MP_GGUF_WRONG_TYPE;
    *out = v->v.arr.data;
    *n = v->v.arr.n;
    return MP_GGUF_FOUND;
}

mp_gguf_lookup mp_gguf_get_str_array(const mp_gguf *g, const char *key, const mp_gguf_string **out,
                                     uint64_t *n) {
    return get_array(g, key, MP_GGUF_STRING, (const void **)out, n);
}

mp_gguf_lookup mp_gguf_get_f32_array(const mp_gguf *g, const char *key, const float **out, uint64_t *n) {
    return get_array(g, key, MP_GGUF_FLOAT32, (const void **)out, n);
}

mp_gguf_lookup mp_gguf_get_i32_array(const mp_gguf *g, const char *key, const int32_t **out, uint64_t *n) {
    return get_array(g, key, MP_GGUF_INT32, (const void **)out, n);
}

size_t mp_gguf_n_tensors(const mp_gguf *g) { return g->n_tensors; }

const mp_gguf_tensor *mp_gguf_tensor_at(const mp_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const mp_gguf_tensor *mp_gguf_find_tensor(const mp_gguf *g, const char *name) {
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const mp_gguf_tensor *t = &g->tensors[g->t_order[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

mp_status mp_gguf_read_f32(const mp_gguf *g, const mp_gguf_tensor *t, float *dst, uint64_t n) {
    if (n != t->n_elements)
        return mp_error(MP_ERR_ARG, "%s: tensor '%s' has %llu elements, the buffer %llu", g->path, t->name,
                        (unsigned long long)t->n_elements, (unsigned long long)n);
    if (!mp_quant_supported(t->type))
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' has unsupported tensor type %s (ggml type %u); "
                        "mechprobe dequantises F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K",
                        g->path, t->name, mp_quant_type_name(t->type), (unsigned)t->type);
    if (n > SIZE_MAX / sizeof(float))
        return mp_error(MP_ERR_NOMEM, "%s: tensor '%s' is too large for this machine", g->path, t->name);
    mp_quant_dequantize(t->type, t->data, dst, (size_t)n);
    if (g->mapped) { /* the copy is what the model keeps: let the file's pages go (a later read faults them
                      * back in), so a float32 load peaks at the model's size, not twice it */
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)t->data;
        const uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + (uintptr_t)t->n_bytes) / pg * pg;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return MP_OK;
}

mp_status mp_gguf_read_tensor(const mp_gguf *g, const char *name, float *dst, uint64_t n) {
    const mp_gguf_tensor *t = mp_gguf_find_tensor(g, name);
    if (!t) return mp_error(MP_ERR_FORMAT, "%s: no tensor '%s'", g->path, name);
    return mp_gguf_read_f32(g, t, dst, n);
}

uint64_t mp_gguf_data_bytes(const mp_gguf *g) {
    uint64_t s = 0;
    for (size_t i = 0; i < g->n_tensors; i++) s += g->tensors[i].n_bytes;   /* each <= file size */
    return s;
}

uint64_t mp_gguf_f32_bytes(const mp_gguf *g) {
    uint64_t s = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        uint64_t b = g->tensors[i].n_elements;
        b = b > UINT64_MAX / 4 ? UINT64_MAX : b * 4;
        s = s > UINT64_MAX - b ? UINT64_MAX : s + b;
    }
    return s;
}
