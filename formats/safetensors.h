/* safetensors.h — Hugging Face safetensors: a validating reader of single
 * files and of model folders (config.json + *.safetensors, sharded through
 * model.safetensors.index.json), reading F32 / F16 / BF16 tensors as float32,
 * and an F32 writer (atomic temp+rename) for round trips.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {str: str}}, then the data section; offsets are relative to
 * it. Every length, shape, offset and size is validated (offsets within the
 * data section, end - begin = numel * element size, no two tensors overlapping)
 * before use; errors are MP_ERR_FORMAT naming the file and what is wrong.
 * Shapes are in PyTorch order (the last dimension varies fastest). */
#ifndef MP_SAFETENSORS_H
#define MP_SAFETENSORS_H

#include "json.h"
#include "mp_common.h"

#define MP_ST_MAX_DIMS 8

typedef enum {
    MP_ST_F32 = 0, MP_ST_F16, MP_ST_BF16, MP_ST_F64, MP_ST_I64, MP_ST_I32, MP_ST_I16, MP_ST_I8,
    MP_ST_U8, MP_ST_U16, MP_ST_U32, MP_ST_U64, MP_ST_BOOL, MP_ST_F8_E4M3, MP_ST_F8_E5M2
} mp_st_dtype;

typedef struct {
    const char *name;
    mp_st_dtype dtype;
    uint32_t n_dims;                  /* 0 for a scalar */
    uint64_t shape[MP_ST_MAX_DIMS];
    uint64_t n_elements, n_bytes;
    const void *data;                 /* into the mapping of its file */
    const char *file;                 /* path of the file holding it */
} mp_st_tensor;

typedef struct mp_safetensors mp_safetensors;

/* Opens a .safetensors file, or a folder: with model.safetensors.index.json
 * the shards its weight_map names (each listed tensor must be in its shard),
 * else model.safetensors, else every *.safetensors in the folder; config.json
 * is parsed when present. Tensor names must be unique across shards. */
mp_status mp_safetensors_open(const char *path, mp_safetensors **out);
/* A single file held in memory by the caller (alive until close). */
mp_status mp_safetensors_open_memory(const void *data, size_t size, const char *name, mp_safetensors **out);
void mp_safetensors_close(mp_safetensors *st);

const char *mp_safetensors_dtype_name(mp_st_dtype t);
size_t mp_safetensors_n_tensors(const mp_safetensors *st);
const mp_st_tensor *mp_safetensors_tensor_at(const mp_safetensors *st, size_t i);
const mp_st_tensor *mp_safetensors_find(const mp_safetensors *st, const char *name);
/* Decodes into dst (n must equal t->n_elements); MP_ERR_FORMAT naming the
 * tensor for dtypes other than F32, F16, BF16. */
mp_status mp_safetensors_read_f32(const mp_safetensors *st, const mp_st_tensor *t, float *dst, uint64_t n);
mp_status mp_safetensors_read_tensor(const mp_safetensors *st, const char *name, float *dst, uint64_t n);
/* Bytes the tensors take as float32. */
uint64_t mp_safetensors_f32_bytes(const mp_safetensors *st);

/* "__metadata__" value of key (searched in every shard), NULL when absent. */
const char *mp_safetensors_metadata(const mp_safetensors *st, const char *key);
/* The folder's parsed config.json, NULL for a single file or when absent. */
const mp_json *mp_safetensors_config(const mp_safetensors *st);

/* ---- writer ---- */

typedef struct {
    const char *name;
    uint32_t n_dims;
    const uint64_t *shape;            /* PyTorch order */
    const float *data;                /* numel floats */
} mp_st_entry;

/* Writes an F32 safetensors file atomically. metadata: NULL or a
 * NULL-terminated list of key, value, key, value, ... strings. */
mp_status mp_safetensors_write(const char *path, const mp_st_entry *tensors, size_t n,
                               const char *const *metadata);

#endif
