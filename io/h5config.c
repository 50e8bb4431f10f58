/* h5config.c — the model config as HDF5 attributes (see h5config.h): one
 * loop over MP_CONFIG_TABLE writes /config and /model and reads /config. */
#include "h5config.h"
#include "h5io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double mp_h5_float_decimal(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

mp_status mp_h5_config_write(hid_t f, const char *obj, const mp_config *c, const char *tokenizer) {
    mp_status st = MP_OK;
    for (int i = 0; !st && i < mp_config_n_fields; i++) {
        const mp_config_field *fd = &mp_config_fields[i];
        if (!mp_config_written(c, i)) continue;
        double v = mp_config_value(c, i);
        switch (fd->type) {
        case MP_CF_INT:
        case MP_CF_BOOL:
        case MP_CF_NOTBOOL: st = mp_h5_attr_set_int(f, obj, fd->attr, (int64_t)v); break;
        case MP_CF_FLOAT: st = mp_h5_attr_set_float(f, obj, fd->attr, mp_h5_float_decimal((float)v)); break;
        case MP_CF_KIND: st = mp_h5_attr_set_string(f, obj, fd->attr, mp_config_kind_name(c, i, 1)); break;
        case MP_CF_FLOATS: {
            int n;
            const float *x = mp_config_floats(c, i, &n);
            double d[MP_ROPE_FREQS_MAX];
            for (int k = 0; k < n; k++) d[k] = x[k];
            st = mp_h5_attr_set_floats(f, obj, fd->attr, d, (size_t)n);
            break;
        }
        }
    }
    if (!st && tokenizer && tokenizer[0]) st = mp_h5_attr_set_string(f, obj, "tokenizer", tokenizer);
    return st;
}

mp_status mp_h5_attr_get_i32(hid_t f, const char *obj, const char *key, int *out, const char *path) {
    mp_h5_attr a;
    mp_status st = mp_h5_attr_get(f, obj, key, &a);
    if (st) return st;
    if (a.kind != MP_H5_ATTR_INT || a.i < INT32_MIN || a.i > INT32_MAX)
        st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be an integer", path, obj, key);
    else *out = (int)a.i;
    mp_h5_attr_clear(&a);
    return st;
}

mp_status mp_h5_attr_get_f32(hid_t f, const char *obj, const char *key, float *out, const char *path) {
    mp_h5_attr a;
    mp_status st = mp_h5_attr_get(f, obj, key, &a);
    if (st) return st;
    if (a.kind == MP_H5_ATTR_FLOAT) *out = (float)a.f;
    else if (a.kind == MP_H5_ATTR_INT) *out = (float)a.i;
    else st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be a number", path, obj, key);
    mp_h5_attr_clear(&a);
    return st;
}

/* Field i from its attribute (present: checked by the caller). */
static mp_status read_field(hid_t f, const char *obj, mp_config *c, int i, const char *path) {
    const mp_config_field *fd = &mp_config_fields[i];
    mp_h5_attr a;
    mp_status st = MP_OK;
    int iv = 0;
    float fv = 0.0f;
    switch (fd->type) {
    case MP_CF_INT:
    case MP_CF_BOOL:
    case MP_CF_NOTBOOL:
        if ((st = mp_h5_attr_get_i32(f, obj, fd->attr, &iv, path))) return st;
        if (fd->type != MP_CF_INT && iv != 0 && iv != 1)
            return mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be 0 or 1", path, obj, fd->attr);
        mp_config_set(c, i, iv);
        return MP_OK;
    case MP_CF_FLOAT:
        if ((st = mp_h5_attr_get_f32(f, obj, fd->attr, &fv, path))) return st;
        mp_config_set(c, i, fv);
        return MP_OK;
    case MP_CF_KIND:
        if ((st = mp_h5_attr_get(f, obj, fd->attr, &a))) return st;
        /* label = 1: mlp "gelu_tanh" (files since issue 38) sets gelu_tanh; older
         * /config groups say "gelu" and carry gelu_tanh = 1 */
        if (a.kind != MP_H5_ATTR_STRING || mp_config_set_kind(c, i, a.s, 1) < 0)
            st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' is not one of the known kinds", path, obj, fd->attr);
        mp_h5_attr_clear(&a);
        return st;
    case MP_CF_FLOATS:
        if ((st = mp_h5_attr_get(f, obj, fd->attr, &a))) return st;
        if (a.kind != MP_H5_ATTR_FLOAT_ARRAY || a.n == 0 || a.n > MP_ROPE_FREQS_MAX)
            st = mp_error(MP_ERR_FORMAT, "%s: %s attribute '%s' must be 1..%d floats", path, obj, fd->attr,
                          MP_ROPE_FREQS_MAX);
        else
            st = mp_config_set_floats(c, i, a.fv, a.n);
        mp_h5_attr_clear(&a);
        return st;
    }
    return MP_OK;
}

mp_status mp_h5_config_read(hid_t f, const char *obj, mp_config *c, const char *path) {
    const mp_config dflt = mp_config_default();
    mp_status st = MP_OK;
    *c = dflt;
    for (int i = 0; !st && i < mp_config_n_fields; i++) {
        /* optional: absent in files of older versions and of configs that do not use it */
        if (!mp_config_written(&dflt, i) && H5Aexists_by_name(f, obj, mp_config_fields[i].attr, H5P_DEFAULT) <= 0)
            continue;
        st = read_field(f, obj, c, i, path);
    }
    if (!st && c->mlp == MP_MLP_GELU && !c->gelu_tanh) {   /* mlp "gelu_tanh" with gelu_tanh = 0 */
        mp_h5_attr a;
        if (mp_h5_attr_get(f, obj, "mlp", &a) == MP_OK) {
            if (a.kind == MP_H5_ATTR_STRING && !strcmp(a.s, "gelu_tanh"))
                st = mp_error(MP_ERR_FORMAT, "%s: %s attribute 'mlp' is \"gelu_tanh\" but 'gelu_tanh' is 0", path, obj);
            mp_h5_attr_clear(&a);
        }
    }
    return st;
}
