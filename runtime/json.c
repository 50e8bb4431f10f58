/* json.c — JSON documents (see json.h). Debian's jansson parses (strict RFC 8259,
 * UTF-8 checked, duplicate keys refused); the tree is then copied into an arena
 * of mp_json nodes, with each object's members in document order and a
 * key-sorted index for lookups, and jansson's tree is freed. The copy is what
 * keeps mp_json_at / mp_json_key_at O(1) on objects (jansson has no indexed
 * access to members) and NUL-terminated strings with exact lengths. */
#include "json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct { const char *s; size_t len; } jstr;

struct mp_json {
    mp_json_type type;
    int is_int;
    size_t n;                 /* elements / members / string length */
    union {
        int b;
        struct { double d; int64_t i; } num;
        const char *s;
        mp_json *items;       /* array */
        struct { mp_json *vals; jstr *keys; size_t *order; } obj;
    } u;
};

typedef struct chunk { struct chunk *next; size_t used, cap; } chunk;

struct mp_json_doc {
    chunk *chunks;
    mp_json root;
};

/* ---- arena ---- */

static void *arena_alloc(mp_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t n_chunks = 0;
        for (chunk *k = d->chunks; k; k = k->next) n_chunks++;
        size_t grow = (size_t)16384 << (n_chunks < 6 ? n_chunks : 6);   /* 16 KiB .. 1 MiB */
        size_t cap = n > grow ? n : grow, total;
        if (mp_add_size(cap, sizeof(chunk) + 16, &total)) return NULL;
        chunk *nc = malloc(total);
        if (!nc) return NULL;
        nc->next = d->chunks;
        nc->used = 0;
        nc->cap = cap;
        d->chunks = nc;
        c = nc;
    }
    char *base = (char *)c + ((sizeof(chunk) + 15) & ~(size_t)15);
    void *p = base + c->used;
    c->used += n;
    return p;
}

/* ---- jansson's tree into the arena ---- */

static int key_cmp(const jstr *a, const jstr *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static _Thread_local const jstr *tl_keys;   /* qsort has no context argument */
static int order_cmp(const void *a, const void *b) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = key_cmp(&tl_keys[i], &tl_keys[j]);
    return c ? c : (i < j ? -1 : i > j);
}

/* A copy of s[0..n) with a terminating NUL in the arena. */
static const char *arena_str(mp_json_doc *d, const char *s, size_t n) {
    size_t bytes;
    if (mp_add_size(n, 1, &bytes)) return NULL;
    char *c = arena_alloc(d, bytes);
    if (!c) return NULL;
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

static mp_status nomem(const char *what) { return mp_error(MP_ERR_NOMEM, "%s: out of memory parsing JSON", what); }

static mp_status convert(mp_json_doc *d, const json_t *j, mp_json *v, int depth, const char *what) {
    memset(v, 0, sizeof *v);
    switch (json_typeof(j)) {
    case JSON_NULL: v->type = MP_JSON_NULL; return MP_OK;
    case JSON_TRUE: case JSON_FALSE: v->type = MP_JSON_BOOL; v->u.b = json_is_true(j); return MP_OK;
    case JSON_INTEGER:
        v->type = MP_JSON_NUMBER;
        v->is_int = 1;
        v->u.num.i = (int64_t)json_integer_value(j);
        v->u.num.d = (double)v->u.num.i;
        return MP_OK;
    case JSON_REAL: v->type = MP_JSON_NUMBER; v->u.num.d = json_real_value(j); return MP_OK;
    case JSON_STRING:
        v->type = MP_JSON_STRING;
        v->n = json_string_length(j);
        return (v->u.s = arena_str(d, json_string_value(j), v->n)) ? MP_OK : nomem(what);
    case JSON_ARRAY: case JSON_OBJECT: break;
    }
    if (depth >= MP_JSON_MAX_DEPTH)
        return mp_error(MP_ERR_FORMAT, "%s: invalid JSON: nesting deeper than %d levels", what, MP_JSON_MAX_DEPTH);
    const int is_obj = json_is_object(j);
    const size_t n = is_obj ? json_object_size(j) : json_array_size(j);
    size_t bytes;
    mp_status st;
    v->type = is_obj ? MP_JSON_OBJECT : MP_JSON_ARRAY;
    v->n = n;
    if (!n) return MP_OK;
    if (mp_mul_size(n, sizeof(mp_json), &bytes)) return nomem(what);
    mp_json *items = arena_alloc(d, bytes);
    if (!items) return nomem(what);
    if (!is_obj) {
        v->u.items = items;
        for (size_t i = 0; i < n; i++)
            if ((st = convert(d, json_array_get(j, i), &items[i], depth + 1, what))) return st;
        return MP_OK;
    }
    /* members in document order (jansson iterates in insertion order) */
    jstr *keys = arena_alloc(d, n * sizeof(jstr));
    size_t *order = arena_alloc(d, n * sizeof(size_t)), i = 0;
    if (!keys || !order) return nomem(what);
    for (void *it = json_object_iter((json_t *)j); it && i < n; it = json_object_iter_next((json_t *)j, it), i++) {
        keys[i].len = json_object_iter_key_len(it);
        if (!(keys[i].s = arena_str(d, json_object_iter_key(it), keys[i].len))) return nomem(what);
        if ((st = convert(d, json_object_iter_value(it), &items[i], depth + 1, what))) return st;
        order[i] = i;
    }
    tl_keys = keys;
    if (n > 1) qsort(order, n, sizeof *order, order_cmp);
    v->u.obj.vals = items;
    v->u.obj.keys = keys;
    v->u.obj.order = order;
    return MP_OK;
}

void mp_json_free(mp_json_doc *doc) {
    if (!doc) return;
    chunk *c = doc->chunks;
    while (c) { chunk *n = c->next; free(c); c = n; }
    free(doc);
}

mp_status mp_json_parse(const char *text, size_t len, const char *what, mp_json_doc **out) {
    mp_status st = MP_OK;
    *out = NULL;
    if (!what) what = "JSON";
    json_error_t err;
    /* any value at the top; \u0000 kept in strings (jansson refuses it in keys) */
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!j) {
        if (json_error_code(&err) == json_error_out_of_memory) return nomem(what);
        return mp_error(MP_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", what, err.line, err.column,
                        err.text);
    }
    mp_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) {
        st = nomem(what);
        goto cleanup;
    }
    if ((st = convert(doc, j, &doc->root, 0, what))) goto cleanup;
    *out = doc;
    doc = NULL;
cleanup:
    json_decref(j);
    mp_json_free(doc);
    return st;
}

mp_status mp_json_parse_file(const char *path, mp_json_doc **out) {
    mp_status st = MP_OK;
    char *buf = NULL;
    struct stat sb;
    *out = NULL;
    if ((st = mp_check_regular_file(path)) != MP_OK) return st; /* a FIFO would block the open */
    FILE *f = fopen(path, "rb");
    if (!f) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        st = mp_error(MP_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if (sb.st_size > (1LL << 30)) {
        st = mp_error(MP_ERR_FORMAT, "%s: %lld bytes is too large for a JSON file (limit 1 GiB)", path,
                      (long long)sb.st_size);
        goto cleanup;
    }
    size_t n = (size_t)sb.st_size;
    if (!(buf = mp_malloc(n ? n : 1, path))) { st = MP_ERR_NOMEM; goto cleanup; }
    if (n && fread(buf, 1, n, f) != n) {
        st = mp_error(MP_ERR_IO, "%s: read failed", path);
        goto cleanup;
    }
    st = mp_json_parse(buf, n, path, out);
cleanup:
    free(buf);
    fclose(f);
    return st;
}

const mp_json *mp_json_root(const mp_json_doc *doc) { return doc ? &doc->root : NULL; }

mp_json_type mp_json_type_of(const mp_json *v) { return v ? v->type : MP_JSON_NULL; }

const char *mp_json_type_name(mp_json_type t) {
    switch (t) {
    case MP_JSON_NULL: return "null";
    case MP_JSON_BOOL: return "boolean";
    case MP_JSON_NUMBER: return "number";
    case MP_JSON_STRING: return "string";
    case MP_JSON_ARRAY: return "array";
    case MP_JSON_OBJECT: return "object";
    }
    return "?";
}

size_t mp_json_len(const mp_json *v) {
    return v && (v->type == MP_JSON_ARRAY || v->type == MP_JSON_OBJECT) ? v->n : 0;
}

const mp_json *mp_json_at(const mp_json *v, size_t i) {
    if (!v || i >= mp_json_len(v)) return NULL;
    return v->type == MP_JSON_ARRAY ? &v->u.items[i] : &v->u.obj.vals[i];
}

const char *mp_json_key_at(const mp_json *v, size_t i, size_t *len) {
    if (!v || v->type != MP_JSON_OBJECT || i >= v->n) return NULL;
    if (len) *len = v->u.obj.keys[i].len;
    return v->u.obj.keys[i].s;
}

const mp_json *mp_json_get(const mp_json *obj, const char *key) {
    if (!obj || obj->type != MP_JSON_OBJECT || !key) return NULL;
    jstr k = {key, strlen(key)};
    size_t lo = 0, hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, idx = obj->u.obj.order[mid];
        int c = key_cmp(&obj->u.obj.keys[idx], &k);
        if (c == 0) return &obj->u.obj.vals[idx];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

const char *mp_json_string(const mp_json *v, size_t *len) {
    if (!v || v->type != MP_JSON_STRING) return NULL;
    if (len) *len = v->n;
    return v->u.s;
}

int mp_json_bool(const mp_json *v) { return v && v->type == MP_JSON_BOOL && v->u.b; }

double mp_json_number(const mp_json *v) { return v && v->type == MP_JSON_NUMBER ? v->u.num.d : 0.0; }

int mp_json_int64(const mp_json *v, int64_t *out) {
    if (!v || v->type != MP_JSON_NUMBER || !v->is_int) return -1;
    *out = v->u.num.i;
    return 0;
}
