/* json.h — strict JSON (RFC 8259) documents for the files of Hugging Face
 * model folders: safetensors headers, config.json, tokenizer.json and
 * model.safetensors.index.json. Parsed by jansson (json.c).
 *
 * Strict: one value with optional whitespace around it; no comments, trailing
 * commas, NaN/Infinity, leading zeros or '+'; strings must be valid UTF-8
 * without raw control characters, escapes are decoded (surrogate pairs joined,
 * lone surrogates refused); duplicate object keys, object keys containing
 * \u0000 and integer literals beyond int64 are refused; nesting is limited to
 * MP_JSON_MAX_DEPTH. Errors name the input and give line and column.
 *
 * A document is jansson's own tree (json.c is a thin adapter over json_t, no
 * copy); it lives until mp_json_free. Accessors accept NULL and nodes of the
 * wrong kind and then return NULL / 0, so lookups chain:
 * mp_json_get(mp_json_get(root, "a"), "b"). Members of an object are visited
 * in document order with mp_json_first / mp_json_next. */
#ifndef MP_JSON_H
#define MP_JSON_H

#include "mp_common.h"

#define MP_JSON_MAX_DEPTH 128

typedef enum {
    MP_JSON_NULL = 0, MP_JSON_BOOL, MP_JSON_NUMBER, MP_JSON_STRING, MP_JSON_ARRAY, MP_JSON_OBJECT
} mp_json_type;

typedef struct mp_json mp_json;          /* a value (node) */
typedef struct mp_json_doc mp_json_doc;  /* a parsed document */

/* Parses text[0..len) (need not be NUL-terminated). `what` names the input in
 * error messages (a file name). MP_ERR_FORMAT on malformed input. */
mp_status mp_json_parse(const char *text, size_t len, const char *what, mp_json_doc **out);
/* Reads and parses a file (at most 1 GiB). */
mp_status mp_json_parse_file(const char *path, mp_json_doc **out);
void mp_json_free(mp_json_doc *doc);
const mp_json *mp_json_root(const mp_json_doc *doc);

mp_json_type mp_json_type_of(const mp_json *v);   /* MP_JSON_NULL for NULL */
const char *mp_json_type_name(mp_json_type t);    /* "object", "string", ... */

/* Arrays and objects: number of elements / members (0 for other kinds). */
size_t mp_json_len(const mp_json *v);
/* Element i of an array (NULL for other kinds and out of range). */
const mp_json *mp_json_at(const mp_json *v, size_t i);
/* Member of an object by key (hash lookup), NULL when absent. */
const mp_json *mp_json_get(const mp_json *obj, const char *key);

/* One member of an object, visited in document order:
 *     mp_json_member m;
 *     for (mp_json_first(obj, &m); m.value; mp_json_next(&m)) use(m.key, m.key_len, m.value);
 * key is NUL-terminated (keys never hold NUL: the parser refuses them);
 * value is NULL past the last member, and at once when obj is not an object. */
typedef struct {
    const char *key;
    size_t key_len;
    const mp_json *value;
    size_t index;                  /* 0, 1, ... in document order */
    const mp_json *obj_; void *it_;   /* private */
} mp_json_member;
void mp_json_first(const mp_json *obj, mp_json_member *m);
void mp_json_next(mp_json_member *m);

/* Strings: NUL-terminated UTF-8 (an escaped \u0000 is kept; *len is exact). */
const char *mp_json_string(const mp_json *v, size_t *len);
int mp_json_bool(const mp_json *v);               /* 1 for true, else 0 */
double mp_json_number(const mp_json *v);          /* 0 for non-numbers */
/* 0 and *out when v is a number written as an integer that fits int64
 * (no fraction or exponent), else -1. */
int mp_json_int64(const mp_json *v, int64_t *out);

#endif
