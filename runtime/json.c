/* json.c — strict recursive-descent JSON parser into an arena (see json.h).
 * Containers are built on a growing value stack and copied into the arena
 * when they close; object members get a key-sorted index for lookups and the
 * duplicate-key check. Numbers are converted with strtod_l in the C locale
 * (independent of the process locale); integer literals are also kept exact. */
#define _GNU_SOURCE
#include "json.h"

#include <errno.h>
#include <locale.h>
#include <stdarg.h>
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

/* ---- parser state ---- */

typedef struct {
    const char *p, *end, *start, *what;
    mp_json_doc *doc;
    mp_json *stack;           /* pending container children */
    jstr *kstack;             /* pending object keys */
    size_t sp, cap, ksp, kcap;
    char *sbuf;               /* scratch for string unescaping */
    size_t scap;
    locale_t cloc;
} parser;

static mp_status perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mp_status perr(parser *ps, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') { line++; col = 1; } else col++;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mp_error(MP_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", ps->what, line, col, msg);
}

static mp_status nomem(parser *ps) {
    return mp_error(MP_ERR_NOMEM, "%s: out of memory parsing JSON", ps->what);
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int push_val(parser *ps, const mp_json *v) {
    if (ps->sp == ps->cap) {
        size_t nc = ps->cap ? 2 * ps->cap : 64;
        mp_json *ns = realloc(ps->stack, nc * sizeof *ns);
        if (!ns) return -1;
        ps->stack = ns;
        ps->cap = nc;
    }
    ps->stack[ps->sp++] = *v;
    return 0;
}

static int push_key(parser *ps, jstr k) {
    if (ps->ksp == ps->kcap) {
        size_t nc = ps->kcap ? 2 * ps->kcap : 64;
        jstr *ns = realloc(ps->kstack, nc * sizeof *ns);
        if (!ns) return -1;
        ps->kstack = ns;
        ps->kcap = nc;
    }
    ps->kstack[ps->ksp++] = k;
    return 0;
}

static int sbuf_reserve(parser *ps, size_t n) {
    if (n <= ps->scap) return 0;
    size_t nc = ps->scap ? ps->scap : 256;
    while (nc < n) {
        if (nc > SIZE_MAX / 2) return -1;
        nc *= 2;
    }
    char *nb = realloc(ps->sbuf, nc);
    if (!nb) return -1;
    ps->sbuf = nb;
    ps->scap = nc;
    return 0;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629), 0 if malformed. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) { n = 3; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parses a string at ps->p (on the opening quote) into the arena. */
static mp_status parse_string(parser *ps, jstr *out) {
    ps->p++;
    size_t o = 0;
    for (;;) {
        if (ps->p >= ps->end) return perr(ps, "unterminated string");
        unsigned char c = (unsigned char)*ps->p;
        if (sbuf_reserve(ps, o + 8)) return nomem(ps);
        if (c == '"') { ps->p++; break; }
        if (c < 0x20) return perr(ps, "raw control character in string (must be escaped)");
        if (c != '\\') {
            size_t n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
            if (!n) return perr(ps, "invalid UTF-8 in string");
            memcpy(ps->sbuf + o, ps->p, n);
            o += n;
            ps->p += n;
            continue;
        }
        if (ps->end - ps->p < 2) return perr(ps, "unterminated escape");
        char e = ps->p[1];
        ps->p += 2;
        switch (e) {
        case '"': ps->sbuf[o++] = '"'; break;
        case '\\': ps->sbuf[o++] = '\\'; break;
        case '/': ps->sbuf[o++] = '/'; break;
        case 'b': ps->sbuf[o++] = '\b'; break;
        case 'f': ps->sbuf[o++] = '\f'; break;
        case 'n': ps->sbuf[o++] = '\n'; break;
        case 'r': ps->sbuf[o++] = '\r'; break;
        case 't': ps->sbuf[o++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) return perr(ps, "bad \\u escape (needs 4 hex digits)");
            ps->p += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) return perr(ps, "lone low surrogate in \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return perr(ps, "high surrogate not followed by a low surrogate");
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            o += put_utf8(ps->sbuf + o, cp);
            break;
        }
        default: ps->p--; return perr(ps, "invalid escape character");
        }
    }
    char *s = arena_alloc(ps->doc, o + 1);
    if (!s) return nomem(ps);
    memcpy(s, ps->sbuf, o);
    s[o] = 0;
    out->s = s;
    out->len = o;
    return MP_OK;
}

static mp_status parse_number(parser *ps, mp_json *v) {
    const char *b = ps->p, *q = ps->p;
    int is_int = 1;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || *q < '0' || *q > '9') return perr(ps, "invalid number");
    if (*q == '0') {
        q++;
        if (q < ps->end && *q >= '0' && *q <= '9') return perr(ps, "leading zero in number");
    } else {
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && *q == '.') {
        is_int = 0;
        q++;
        if (q >= ps->end || *q < '0' || *q > '9') { ps->p = q; return perr(ps, "digit expected after '.'"); }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || *q < '0' || *q > '9') { ps->p = q; return perr(ps, "digit expected in exponent"); }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    size_t n = (size_t)(q - b);
    if (sbuf_reserve(ps, n + 1)) return nomem(ps);
    memcpy(ps->sbuf, b, n);
    ps->sbuf[n] = 0;
    v->type = MP_JSON_NUMBER;
    v->u.num.d = strtod_l(ps->sbuf, NULL, ps->cloc);   /* overflow gives +-HUGE_VAL */
    v->u.num.i = 0;
    v->is_int = 0;
    if (is_int) {
        errno = 0;
        long long i = strtoll(ps->sbuf, NULL, 10);
        if (errno == 0) { v->u.num.i = (int64_t)i; v->is_int = 1; }
    }
    ps->p = q;
    return MP_OK;
}

static int key_cmp_ctx(const jstr *a, const jstr *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static _Thread_local const jstr *tl_keys;   /* qsort has no context argument */
static int order_cmp(const void *a, const void *b) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = key_cmp_ctx(&tl_keys[i], &tl_keys[j]);
    return c ? c : (i < j ? -1 : i > j);
}

static mp_status parse_value(parser *ps, mp_json *v, int depth);

static mp_status parse_container(parser *ps, mp_json *v, int depth, int is_obj) {
    if (depth >= MP_JSON_MAX_DEPTH) return perr(ps, "nesting deeper than %d levels", MP_JSON_MAX_DEPTH);
    char close = is_obj ? '}' : ']';
    size_t base = ps->sp, kbase = ps->ksp;
    mp_status st;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            mp_json child;
            skip_ws(ps);
            if (is_obj) {
                jstr k;
                if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "object key (a string) expected");
                if ((st = parse_string(ps, &k))) return st;
                if (push_key(ps, k)) return nomem(ps);
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return perr(ps, "':' expected after object key");
                ps->p++;
            }
            if ((st = parse_value(ps, &child, depth + 1))) return st;
            if (push_val(ps, &child)) return nomem(ps);
            skip_ws(ps);
            if (ps->p >= ps->end) return perr(ps, is_obj ? "unterminated object" : "unterminated array");
            if (*ps->p == ',') { ps->p++; continue; }
            if (*ps->p == close) { ps->p++; break; }
            return perr(ps, is_obj ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    size_t n = ps->sp - base, bytes;
    memset(v, 0, sizeof *v);
    v->type = is_obj ? MP_JSON_OBJECT : MP_JSON_ARRAY;
    v->n = n;
    if (mp_mul_size(n, sizeof(mp_json), &bytes)) return nomem(ps);
    mp_json *items = n ? arena_alloc(ps->doc, bytes) : NULL;
    if (n && !items) return nomem(ps);
    if (n) memcpy(items, ps->stack + base, bytes);
    ps->sp = base;
    if (!is_obj) {
        v->u.items = items;
        return MP_OK;
    }
    jstr *keys = n ? arena_alloc(ps->doc, n * sizeof(jstr)) : NULL;
    size_t *order = n ? arena_alloc(ps->doc, n * sizeof(size_t)) : NULL;
    if (n && (!keys || !order)) return nomem(ps);
    if (n) memcpy(keys, ps->kstack + kbase, n * sizeof(jstr));
    ps->ksp = kbase;
    for (size_t i = 0; i < n; i++) order[i] = i;
    tl_keys = keys;
    if (n > 1) qsort(order, n, sizeof *order, order_cmp);
    for (size_t i = 1; i < n; i++)
        if (!key_cmp_ctx(&keys[order[i - 1]], &keys[order[i]]))
            return perr(ps, "duplicate object key \"%.60s\"", keys[order[i]].s);
    v->u.obj.vals = items;
    v->u.obj.keys = keys;
    v->u.obj.order = order;
    return MP_OK;
}

static int match_lit(parser *ps, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n)) return 0;
    ps->p += n;
    return 1;
}

static mp_status parse_value(parser *ps, mp_json *v, int depth) {
    skip_ws(ps);
    memset(v, 0, sizeof *v);
    if (ps->p >= ps->end) return perr(ps, "value expected, found end of input");
    switch (*ps->p) {
    case '{': return parse_container(ps, v, depth, 1);
    case '[': return parse_container(ps, v, depth, 0);
    case '"': {
        jstr s;
        mp_status st = parse_string(ps, &s);
        if (st) return st;
        v->type = MP_JSON_STRING;
        v->u.s = s.s;
        v->n = s.len;
        return MP_OK;
    }
    case 't': if (match_lit(ps, "true")) { v->type = MP_JSON_BOOL; v->u.b = 1; return MP_OK; } break;
    case 'f': if (match_lit(ps, "false")) { v->type = MP_JSON_BOOL; v->u.b = 0; return MP_OK; } break;
    case 'n': if (match_lit(ps, "null")) { v->type = MP_JSON_NULL; return MP_OK; } break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
    }
    return perr(ps, "unexpected character (value expected)");
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
    parser ps = {.p = text, .end = text + len, .start = text, .what = what};
    mp_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) return mp_error(MP_ERR_NOMEM, "%s: out of memory parsing JSON", what);
    ps.doc = doc;
    ps.cloc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!ps.cloc) { st = mp_error(MP_ERR_NOMEM, "%s: cannot create the C locale", what); goto cleanup; }
    if ((st = parse_value(&ps, &doc->root, 0))) goto cleanup;
    skip_ws(&ps);
    if (ps.p != ps.end) { st = perr(&ps, "trailing characters after the JSON value"); goto cleanup; }
    *out = doc;
    doc = NULL;
cleanup:
    if (ps.cloc) freelocale(ps.cloc);
    free(ps.stack);
    free(ps.kstack);
    free(ps.sbuf);
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
        int c = key_cmp_ctx(&obj->u.obj.keys[idx], &k);
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
