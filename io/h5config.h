/* h5config.h — the model config as HDF5 attributes, generated from
 * MP_CONFIG_TABLE (runtime/config.h): the checkpoint's /config (written and
 * read, io/checkpoint.c) and the run file's /model (written, io/h5run.c and
 * mpi/h5capture.c) are the same loop, so they carry the same fields. */
#ifndef MP_H5CONFIG_H
#define MP_H5CONFIG_H

#include <hdf5.h>

#include "config.h"
#include "mp_common.h"

/* The shortest decimal that reads back as the same float, as a double, so
 * that h5py shows norm_eps as 1e-05 rather than 9.99999975e-06. */
double mp_h5_float_decimal(float f);

/* The attributes of c on group obj (which must exist): every field whose
 * `written` column holds, with the value in force; KIND fields by name, mlp
 * under its label ("gelu_tanh" for a gelu_tanh model, with gelu_tanh = 1 too);
 * then tokenizer when non-empty. /config and /model get the same values. */
mp_status mp_h5_config_write(hid_t f, const char *obj, const mp_config *c, const char *tokenizer);

/* Reads c from the attributes of obj over mp_config_default(): the fields
 * written for every config (those the default config writes) are required,
 * the others optional; types, kind names, 0/1 flags and list lengths checked
 * (MP_ERR_FORMAT naming path, obj and the attribute). mlp "gelu_tanh" and the
 * older mlp "gelu" + gelu_tanh = 1 both read as a gelu_tanh model; "gelu_tanh"
 * with gelu_tanh = 0 is refused. Does not validate. */
mp_status mp_h5_config_read(hid_t f, const char *obj, mp_config *c, const char *path);

/* A scalar attribute as an int32 (an integer attribute in range) or as a
 * float (a number); MP_ERR_FORMAT naming path, obj and key otherwise. */
mp_status mp_h5_attr_get_i32(hid_t f, const char *obj, const char *key, int *out, const char *path);
mp_status mp_h5_attr_get_f32(hid_t f, const char *obj, const char *key, float *out, const char *path);

#endif
