/* json.c — JSON documents (see json.h): a thin adapter over Debian's jansson.
 * jansson parses (strict RFC 8259, UTF-8 checked, duplicate keys and NUL in
 * keys refused, integers beyond int64 refused) and its json_t tree is the
 * document: an mp_json is a json_t, an mp_json_doc is the root json_t, and
 * nothing is copied. Only the nesting limit (MP_JSON_MAX_DEPTH, below
 * jansson's own) is checked here, on the parsed tree. */
#include "json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* mp_json and mp_json_doc are never defined: their pointers are json_t pointers. */
#define J(v) ((json_t *)(v))
#define MJ(j) ((const mp_json *)(j))

static mp_status nomem(const char *what) { return mp_error(MP_ERR_NOMEM, "%s: out of memory parsing JSON", what); }

/* 1 when containers nest deeper than MP_JSON_MAX_DEPTH below j (at depth). */
static int too_deep(json_t *j, int depth) {
    if (json_is_array(j)) {
        if (depth >= MP_JSON_MAX_DEPTH) return 1;
        size_t i, n = json_array_size(j);
        for (i = 0; i < n; i++) {
            json_t *c = json_array_get(j, i);
            if ((json_is_array(c) || json_is_object(c)) && too_deep(c, depth + 1)) return 1;
        }
    } else if (json_is_object(j)) {
        if (depth >= MP_JSON_MAX_DEPTH) return 1;
        for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
            json_t *c = json_object_iter_value(it);
            if ((json_is_array(c) || json_is_object(c)) && too_deep(c, depth + 1)) return 1;
        }
    }
    return 0;
}

void mp_json_free(mp_json_doc *doc) { json_decref(J(doc)); }

mp_status mp_json_parse(const char *text, size_t len, const char *what, mp_json_doc **out) {
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
    if (too_deep(j, 0)) {
        json_decref(j);
        return mp_error(MP_ERR_FORMAT, "%s: invalid JSON: nesting deeper than %d levels", what, MP_JSON_MAX_DEPTH);
    }
    *out = (mp_json_doc *)j;
    return MP_OK;
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

const mp_json *mp_json_root(const mp_json_doc *doc) { return (const mp_json *)doc; }

mp_json_type mp_json_type_of(const mp_json *v) {
    if (!v) return MP_JSON_NULL;
    switch (json_typeof(J(v))) {
    case JSON_OBJECT: return MP_JSON_OBJECT;
    case JSON_ARRAY: return MP_JSON_ARRAY;
    case JSON_STRING: return MP_JSON_STRING;
    case JSON_INTEGER: case JSON_REAL: return MP_JSON_NUMBER;
    case JSON_TRUE: case JSON_FALSE: return MP_JSON_BOOL;
    case JSON_NULL: return MP_JSON_NULL;
    }
    return MP_JSON_NULL;
}

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
    if (!v) return 0;
    if (json_is_array(J(v))) return json_array_size(J(v));
    if (json_is_object(J(v))) return json_object_size(J(v));
    return 0;
}

const mp_json *mp_json_at(const mp_json *v, size_t i) { return v ? MJ(json_array_get(J(v), i)) : NULL; }

const mp_json *mp_json_get(const mp_json *obj, const char *key) {
    return obj && key ? MJ(json_object_get(J(obj), key)) : NULL;
}

static void member_fill(mp_json_member *m) {
    if (!m->it_) {
        m->key = NULL;
        m->key_len = 0;
        m->value = NULL;
        return;
    }
    m->key = json_object_iter_key(m->it_);
    m->key_len = json_object_iter_key_len(m->it_);
    m->value = MJ(json_object_iter_value(m->it_));
}

void mp_json_first(const mp_json *obj, mp_json_member *m) {
    m->obj_ = obj;
    m->index = 0;
    m->it_ = obj ? json_object_iter(J(obj)) : NULL;   /* NULL for non-objects */
    member_fill(m);
}

void mp_json_next(mp_json_member *m) {
    if (!m->it_) return;
    m->it_ = json_object_iter_next(J(m->obj_), m->it_);
    m->index++;
    member_fill(m);
}

const char *mp_json_string(const mp_json *v, size_t *len) {
    if (!v || !json_is_string(J(v))) return NULL;
    if (len) *len = json_string_length(J(v));
    return json_string_value(J(v));
}

int mp_json_bool(const mp_json *v) { return v && json_is_true(J(v)); }

double mp_json_number(const mp_json *v) { return v ? json_number_value(J(v)) : 0.0; }

int mp_json_int64(const mp_json *v, int64_t *out) {
    if (!v || !json_is_integer(J(v))) return -1;
    *out = (int64_t)json_integer_value(J(v));
    return 0;
}
