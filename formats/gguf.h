/* gguf.h — GGUF files (llama.cpp / ggml), versions 2 and 3, little-endian:
 * a validating reader (memory-mapped, read-only) with typed metadata getters,
 * tensor lookup and dequantisation to float32, and a writer (version 3,
 * alignment 32, F32 / F16 / Q8_0 or pre-encoded tensors, atomic temp+rename).
 *
 * Layout (ggml docs/gguf.md): "GGUF" u32 version, u64 tensor_count,
 * u64 kv_count; kv_count x (string key, u32 value type, value); tensor_count x
 * (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset);
 * padding to general.alignment (default 32); the data section. A string is a
 * u64 length and its bytes; an array is a u32 element type, a u64 count and
 * the elements. Offsets are relative to the data section and aligned.
 *
 * Every count, length, offset and size is checked against the file size with
 * overflow-checked arithmetic before use: a malformed file gives
 * MP_ERR_FORMAT naming the file and what is wrong, never a crash.
 *
 * Dimensions are in ggml order: dims[0] varies fastest (the row length). A
 * PyTorch [out, in] weight is stored with dims {in, out}. */
#ifndef MP_GGUF_H
#define MP_GGUF_H

#include "mp_common.h"
#include "quant.h"

#define MP_GGUF_MAX_DIMS 4
#define MP_GGUF_DEFAULT_ALIGNMENT 32

typedef enum {
    MP_GGUF_UINT8 = 0, MP_GGUF_INT8 = 1, MP_GGUF_UINT16 = 2, MP_GGUF_INT16 = 3,
    MP_GGUF_UINT32 = 4, MP_GGUF_INT32 = 5, MP_GGUF_FLOAT32 = 6, MP_GGUF_BOOL = 7,
    MP_GGUF_STRING = 8, MP_GGUF_ARRAY = 9, MP_GGUF_UINT64 = 10, MP_GGUF_INT64 = 11,
    MP_GGUF_FLOAT64 = 12
} mp_gguf_vtype;

/* A string: NUL-terminated copy; len is exact (the bytes may hold a NUL). */
typedef struct { const char *str; uint64_t len; } mp_gguf_string;

/* A metadata value. Scalars are widened into u / i / f / b by their type.
 * Arrays: elem_type, n and data, where data is a packed C array of the element
 * type (uint8_t[] ... double[]; bool as uint8_t 0/1), mp_gguf_string[] for
 * strings, mp_gguf_value[] for nested arrays. */
typedef struct mp_gguf_value {
    mp_gguf_vtype type;
    union {
        uint64_t u;           /* UINT8, UINT16, UINT32, UINT64 */
        int64_t i;            /* INT8, INT16, INT32, INT64 */
        double f;             /* FLOAT32, FLOAT64 */
        int b;                /* BOOL */
        mp_gguf_string s;     /* STRING */
        struct { mp_gguf_vtype elem_type; uint64_t n; const void *data; } arr;
    } v;
} mp_gguf_value;

typedef struct {
    const char *name;             /* NUL-terminated */
    uint32_t type;                /* mp_ggml_type */
    uint32_t n_dims;              /* 1..4 (0 is read as a scalar) */
    uint64_t dims[MP_GGUF_MAX_DIMS]; /* ggml order; unused dims are 1 */
    uint64_t n_elements;
    uint64_t offset;              /* within the data section */
    uint64_t n_bytes;
    const void *data;             /* into the mapping */
} mp_gguf_tensor;

typedef struct mp_gguf mp_gguf;

/* Result of a typed metadata getter. */
typedef enum { MP_GGUF_FOUND = 0, MP_GGUF_MISSING = 1, MP_GGUF_WRONG_TYPE = 2 } mp_gguf_lookup;

/* Opens and validates a file (mmap, read-only). */
mp_status mp_gguf_open(const char *path, mp_gguf **out);
/* Parses a buffer that the caller keeps alive until mp_gguf_close; `name`
 * names it in messages. Used by tests and fuzz targets. */
mp_status mp_gguf_open_memory(const void *data, size_t size, const char *name, mp_gguf **out);
void mp_gguf_close(mp_gguf *g);

const char *mp_gguf_path(const mp_gguf *g);
uint32_t mp_gguf_version(const mp_gguf *g);
uint32_t mp_gguf_alignment(const mp_gguf *g);

/* Metadata in file order. */
size_t mp_gguf_n_kv(const mp_gguf *g);
const char *mp_gguf_kv_key(const mp_gguf *g, size_t i);
const mp_gguf_value *mp_gguf_kv_value(const mp_gguf *g, size_t i);
/* By key: NULL when absent. */
const mp_gguf_value *mp_gguf_get(const mp_gguf *g, const char *key);

/* Typed getters: MP_GGUF_FOUND and *out, MP_GGUF_MISSING, or
 * MP_GGUF_WRONG_TYPE (out untouched). get_int accepts every integer type whose
 * value fits int64; get_float accepts FLOAT32 and FLOAT64. */
mp_gguf_lookup mp_gguf_get_int(const mp_gguf *g, const char *key, int64_t *out);
mp_gguf_lookup mp_gguf_get_float(const mp_gguf *g, const char *key, double *out);
mp_gguf_lookup mp_gguf_get_bool(const mp_gguf *g, const char *key, int *out);
mp_gguf_lookup mp_gguf_get_str(const mp_gguf *g, const char *key, const char **out);
/* Arrays of one element type (tokenizer.ggml.tokens / merges, scores, token_type). */
mp_gguf_lookup mp_gguf_get_str_array(const mp_gguf *g, const char *key,
                                     const mp_gguf_string **out, uint64_t *n);
mp_gguf_lookup mp_gguf_get_f32_array(const mp_gguf *g, const char *key, const float **out, uint64_t *n);
mp_gguf_lookup mp_gguf_get_i32_array(const mp_gguf *g, const char *key, const int32_t **out, uint64_t *n);
const char *mp_gguf_vtype_name(mp_gguf_vtype t);
/* Bytes of one scalar of the type (1, 2, 4 or 8); 0 for STRING, ARRAY and unknown types. */
size_t mp_gguf_vtype_size(mp_gguf_vtype t);

/* Tensors in file order, and by name (binary search). */
size_t mp_gguf_n_tensors(const mp_gguf *g);
const mp_gguf_tensor *mp_gguf_tensor_at(const mp_gguf *g, size_t i);
const mp_gguf_tensor *mp_gguf_find_tensor(const mp_gguf *g, const char *name);

/* Decodes a tensor into dst (n must equal t->n_elements). MP_ERR_FORMAT
 * naming the tensor and its type when the type is not one mechprobe reads
 * (Q5_K, IQ*, ...); MP_ERR_ARG on a size mismatch. */
mp_status mp_gguf_read_f32(const mp_gguf *g, const mp_gguf_tensor *t, float *dst, uint64_t n);
/* Same by name; MP_ERR_FORMAT "no tensor 'x'" when absent. */
mp_status mp_gguf_read_tensor(const mp_gguf *g, const char *name, float *dst, uint64_t n);
/* Bytes of the tensor data on disk, and bytes the tensors take as float32
 * (what loading them dequantised costs). */
uint64_t mp_gguf_data_bytes(const mp_gguf *g);
uint64_t mp_gguf_f32_bytes(const mp_gguf *g);

/* ---- writer ---- */

typedef struct mp_gguf_writer mp_gguf_writer;

mp_status mp_gguf_writer_new(mp_gguf_writer **out);
void mp_gguf_writer_free(mp_gguf_writer *w);

/* Sets key (replacing an earlier value of the same key) to a deep copy of v.
 * MP_ERR_ARG for an empty key, a bad type, or "general.alignment" other than 32. */
mp_status mp_gguf_writer_set(mp_gguf_writer *w, const char *key, const mp_gguf_value *v);
mp_status mp_gguf_writer_set_u32(mp_gguf_writer *w, const char *key, uint32_t x);
mp_status mp_gguf_writer_set_i32(mp_gguf_writer *w, const char *key, int32_t x);
mp_status mp_gguf_writer_set_u64(mp_gguf_writer *w, const char *key, uint64_t x);
mp_status mp_gguf_writer_set_f32(mp_gguf_writer *w, const char *key, float x);
mp_status mp_gguf_writer_set_bool(mp_gguf_writer *w, const char *key, int x);
mp_status mp_gguf_writer_set_str(mp_gguf_writer *w, const char *key, const char *s);
/* Array of a scalar element type; data is a packed C array of that type. */
mp_status mp_gguf_writer_set_array(mp_gguf_writer *w, const char *key, mp_gguf_vtype elem_type,
                                   const void *data, uint64_t n);
mp_status mp_gguf_writer_set_str_array(mp_gguf_writer *w, const char *key,
                                       const char *const *strs, uint64_t n);

/* Adds a tensor from float32 data, stored as `type` (F32, F16 or Q8_0; Q8_0
 * needs dims[0] % 32 == 0 and finite values). The data is borrowed: it must
 * stay valid until mp_gguf_writer_write. MP_ERR_ARG on a duplicate name, bad
 * dims or type. */
mp_status mp_gguf_writer_add_tensor(mp_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const uint64_t *dims, const float *data);
/* Adds pre-encoded data of any type mp_quant_block knows (nbytes must match). */
mp_status mp_gguf_writer_add_raw(mp_gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const uint64_t *dims, const void *data, uint64_t nbytes);
/* Makes the encoded bytes of rows [row0, row0 + n) of a tensor added with
 * mp_gguf_writer_add_rows into dst (a row: dims[0] values in the tensor's
 * type; rows in file order). Returns MP_OK, or a status whose message it set
 * with mp_error (the write then fails with that status). */
typedef mp_status (*mp_gguf_rows_fn)(void *user, uint64_t row0, uint64_t n, void *dst);
/* Adds a tensor of any type mp_quant_block knows whose bytes `fn` makes while
 * mp_gguf_writer_write writes the data, a block of whole rows (about 16 MiB)
 * at a time, so a file larger than memory can be written. `user` is borrowed
 * until the write. MP_ERR_ARG on a duplicate name, bad dims or type, NULL fn. */
mp_status mp_gguf_writer_add_rows(mp_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *dims, mp_gguf_rows_fn fn, void *user);
/* Bytes of the file mp_gguf_writer_write would write with the metadata and
 * tensors added so far (header, metadata, tensor infos, padding, data). */
uint64_t mp_gguf_writer_file_bytes(const mp_gguf_writer *w);
/* Writes the file atomically (a temporary in the same folder, renamed). */
mp_status mp_gguf_writer_write(const mp_gguf_writer *w, const char *path);

#endif
