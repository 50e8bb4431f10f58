/* h5attr.c — HDF5 attributes for the small HDF5 layer (h5io.h): reading any
 * numeric or string attribute as a tagged value (fixed- and variable-length
 * strings both, since older files have variable-length ones), listing an
 * object's attributes, and writing integers, floats and fixed-length UTF-8
 * strings. Failures name the file, the object and the attribute. */
#include "h5io.h"
#include "h5io_priv.h"
#include "h5guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- attributes ---- */

void mp_h5_attr_clear(mp_h5_attr *a) {
    if (!a) return;
    free(a->name);
    free(a->s);
    free(a->iv);
    free(a->fv);
    memset(a, 0, sizeof *a);
}

void mp_h5_attrs_free(mp_h5_attr *a, int n) {
    if (!a) return;
    for (int i = 0; i < n; i++) mp_h5_attr_clear(&a[i]);
    free(a);
}

/* Integer value of `size` bytes (signed or not) at p. */
static int64_t int_at(const unsigned char *p, size_t size, int sgn) {
    switch (size) {
    case 1: return sgn ? (int64_t)*(const int8_t *)p : (int64_t)*(const uint8_t *)p;
    case 2: { int16_t s; uint16_t u; memcpy(&s, p, 2); memcpy(&u, p, 2); return sgn ? (int64_t)s : (int64_t)u; }
    case 4: { int32_t s; uint32_t u; memcpy(&s, p, 4); memcpy(&u, p, 4); return sgn ? (int64_t)s : (int64_t)u; }
    default: { int64_t s; memcpy(&s, p, 8); return s; }
    }
}

/* Reads the open attribute `aid` (named key, on object obj) into *out. */
static mp_status read_attr(hid_t loc, const char *obj, hid_t aid, const char *key, mp_h5_attr *out) {
    mp_status st = MP_OK;
    hid_t type = H5Aget_type(aid), space = H5Aget_space(aid), mtype = H5I_INVALID_HID;
    void *buf = NULL;
    memset(out, 0, sizeof *out);
    out->kind = MP_H5_ATTR_UNSUPPORTED;
    out->name = strdup(key);
    if (!out->name) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
    if (type < 0 || space < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    hssize_t np = H5Sget_simple_extent_npoints(space);
    if (sc == H5S_NULL || np < 0) goto cleanup; /* unsupported: no value */
    int scalar = sc == H5S_SCALAR;
    H5T_class_t cls = H5Tget_class(type);
    if ((cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) && (size_t)np > MP_H5_ATTR_MAXN) {
        st = mp_h5_fail_plain(MP_ERR_FORMAT, loc, obj, "attribute '%s' has %lld values (more than %u)", key, (long long)np,
                        MP_H5_ATTR_MAXN);
        goto cleanup;
    }
    size_t n = (size_t)np;
    if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
        int isint = cls == H5T_INTEGER;
        void *dst;
        if (isint) dst = out->iv = mp_calloc(n, sizeof(int64_t), key);
        else dst = out->fv = mp_calloc(n, sizeof(double), key);
        if (!dst) { st = MP_ERR_NOMEM; goto cleanup; }
        if (n && H5Aread(aid, isint ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, dst) < 0) {
            st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
            goto cleanup;
        }
        out->n = n;
        if (scalar) {
            if (isint) { out->kind = MP_H5_ATTR_INT; out->i = out->iv[0]; out->f = (double)out->i; }
            else { out->kind = MP_H5_ATTR_FLOAT; out->f = out->fv[0]; }
        } else {
            out->kind = isint ? MP_H5_ATTR_INT_ARRAY : MP_H5_ATTR_FLOAT_ARRAY;
        }
    } else if (cls == H5T_ENUM) {
        /* Booleans written by h5py/numpy are enums over int8: read the raw
         * native integers behind the enum. */
        hid_t base = H5Tget_super(type);
        H5T_sign_t sg = base >= 0 ? H5Tget_sign(base) : H5T_SGN_ERROR;
        if (base >= 0) H5Tclose(base);
        mtype = H5Tget_native_type(type, H5T_DIR_ASCEND);
        size_t sz = mtype >= 0 ? H5Tget_size(mtype) : 0;
        if (sg == H5T_SGN_ERROR || (sz != 1 && sz != 2 && sz != 4 && sz != 8)) goto cleanup;
        buf = mp_calloc(n, sz, key);
        out->iv = mp_calloc(n, sizeof(int64_t), key);
        if (!buf || !out->iv) { st = MP_ERR_NOMEM; goto cleanup; }
        if (n && H5Aread(aid, mtype, buf) < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
        for (size_t i = 0; i < n; i++) out->iv[i] = int_at((unsigned char *)buf + i * sz, sz, sg == H5T_SGN_2);
        out->n = n;
        if (scalar) { out->kind = MP_H5_ATTR_INT; out->i = out->iv[0]; out->f = (double)out->i; }
        else out->kind = MP_H5_ATTR_INT_ARRAY;
    } else if (cls == H5T_STRING && n == 1) {
        mtype = H5Tcopy(H5T_C_S1);
        if (mtype < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
        H5Tset_cset(mtype, H5Tget_cset(type));
        if (H5Tis_variable_str(type) > 0) {
            char *p = NULL;
            if (H5Tset_size(mtype, H5T_VARIABLE) < 0 || H5Aread(aid, mtype, &p) < 0) {
                st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
                goto cleanup;
            }
            out->s = strdup(p ? p : "");
            if (p) H5free_memory(p);
        } else {
            size_t sz = H5Tget_size(type);
            if (sz == 0 || sz > MP_H5_ATTR_MAXN) goto cleanup;
            out->s = calloc(sz + 1, 1);
            if (!out->s) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
            if (H5Tset_size(mtype, sz + 1) < 0 || H5Tset_strpad(mtype, H5T_STR_NULLTERM) < 0 ||
                H5Aread(aid, mtype, out->s) < 0) {
                st = mp_h5_fail(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
                goto cleanup;
            }
            out->s[sz] = '\0';
            if (H5Tget_strpad(type) == H5T_STR_SPACEPAD) {
                size_t l = strlen(out->s);
                while (l && out->s[l - 1] == ' ') out->s[--l] = '\0';
            }
        }
        if (!out->s) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
        out->kind = MP_H5_ATTR_STRING;
    }
cleanup:
    free(buf);
    if (mtype >= 0) H5Tclose(mtype);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (st != MP_OK) mp_h5_attr_clear(out);
    return st;
}

typedef struct {
    hid_t loc;
    const char *obj;
    mp_h5_attr *a;
    int n, cap;
    mp_status st;
} attr_ctx;

static herr_t attr_cb(hid_t o, const char *name, const H5A_info_t *ai, void *u) {
    (void)ai;
    attr_ctx *c = u;
    if (c->n >= MP_H5_MAX_ATTRS) {
        c->st = mp_h5_fail_plain(MP_ERR_FORMAT, c->loc, c->obj, "more than %d attributes (refused)", MP_H5_MAX_ATTRS);
        return -1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        mp_h5_attr *a = realloc(c->a, (size_t)cap * sizeof *a);
        if (!a) { c->st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); return -1; }
        c->a = a;
        c->cap = cap;
    }
    hid_t aid = H5Aopen(o, name, H5P_DEFAULT);
    if (aid < 0) { c->st = mp_h5_fail(MP_ERR_HDF5, c->loc, c->obj, "cannot open attribute '%s'", name); return -1; }
    c->st = read_attr(c->loc, c->obj, aid, name, &c->a[c->n]);
    H5Aclose(aid);
    if (c->st != MP_OK) return -1;
    c->n++;
    return 0;
}

static mp_status open_object(hid_t loc, const char *obj, hid_t *o) {
    const char *name = mp_h5_is_self(obj) ? "." : obj;
    *o = H5I_INVALID_HID;
    if (!mp_h5_exists(loc, name, NULL)) return mp_h5_fail_plain(MP_ERR_FORMAT, loc, mp_h5_objname(obj), "no such object");
    *o = H5Oopen(loc, name, H5P_DEFAULT);
    if (*o < 0) return mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot open");
    return MP_OK;
}

mp_status mp_h5_attrs_read(hid_t loc, const char *obj, mp_h5_attr **out, int *n) {
    mp_h5_init();
    hid_t o;
    *out = NULL;
    *n = 0;
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    attr_ctx c = {loc, mp_h5_objname(obj), NULL, 0, 0, MP_OK};
    herr_t r = H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, NULL, attr_cb, &c);
    if (c.st == MP_OK && r < 0) c.st = mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot list attributes");
    H5Oclose(o);
    if (c.st != MP_OK) { mp_h5_attrs_free(c.a, c.n); return c.st; }
    *out = c.a;
    *n = c.n;
    return MP_OK;
}

mp_status mp_h5_attr_get(hid_t loc, const char *obj, const char *key, mp_h5_attr *out) {
    mp_h5_init();
    hid_t o, aid = H5I_INVALID_HID;
    memset(out, 0, sizeof *out);
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    htri_t ex = H5Aexists(o, key);
    if (ex <= 0) {
        st = ex < 0 ? mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot look up attribute '%s'", key)
                    : mp_h5_fail_plain(MP_ERR_FORMAT, loc, mp_h5_objname(obj), "missing attribute '%s'", key);
        goto cleanup;
    }
    aid = H5Aopen(o, key, H5P_DEFAULT);
    if (aid < 0) { st = mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot open attribute '%s'", key); goto cleanup; }
    st = read_attr(loc, mp_h5_objname(obj), aid, key, out);
cleanup:
    if (aid >= 0) H5Aclose(aid);
    H5Oclose(o);
    return st;
}

/* Creates (replacing) attribute key on obj and writes buf. */
static mp_status attr_write(hid_t loc, const char *obj, const char *key, hid_t ftype, hid_t mtype,
                            hid_t space, const void *buf) {
    mp_h5_init();
    hid_t o, aid = H5I_INVALID_HID;
    if (!key || !*key) return mp_h5_fail_plain(MP_ERR_ARG, loc, mp_h5_objname(obj), "empty attribute name");
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    htri_t ex = H5Aexists(o, key);
    if (ex < 0 || (ex > 0 && H5Adelete(o, key) < 0)) {
        st = mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot replace attribute '%s'", key);
        goto cleanup;
    }
    aid = H5Acreate2(o, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (aid < 0 || H5Awrite(aid, mtype, buf) < 0)
        st = mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot write attribute '%s'", key);
cleanup:
    if (aid >= 0) H5Aclose(aid);
    H5Oclose(o);
    return st;
}

static mp_status attr_write_n(hid_t loc, const char *obj, const char *key, hid_t ftype, hid_t mtype,
                              const void *buf, size_t n, int scalar) {
    mp_h5_init();
    hsize_t d = (hsize_t)n;
    hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &d, NULL);
    if (space < 0) return mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot write attribute '%s'", key);
    mp_status st = attr_write(loc, obj, key, ftype, mtype, space, buf);
    H5Sclose(space);
    return st;
}

mp_status mp_h5_attr_set_int(hid_t loc, const char *obj, const char *key, int64_t v) {
    return attr_write_n(loc, obj, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, 1, 1);
}

mp_status mp_h5_attr_set_float(hid_t loc, const char *obj, const char *key, double v) {
    return attr_write_n(loc, obj, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, 1);
}

mp_status mp_h5_attr_set_ints(hid_t loc, const char *obj, const char *key, const int64_t *v, size_t n) {
    return attr_write_n(loc, obj, key, H5T_STD_I64LE, H5T_NATIVE_INT64, v, n, 0);
}

mp_status mp_h5_attr_set_floats(hid_t loc, const char *obj, const char *key, const double *v, size_t n) {
    return attr_write_n(loc, obj, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, n, 0);
}

mp_status mp_h5_attr_set_string(hid_t loc, const char *obj, const char *key, const char *v) {
    mp_h5_init();
    /* Fixed-length (the length of the string, NUL-padded), not variable-length:
     * reading a variable-length string goes through the global heap, the part
     * of the HDF5 library most fragile against a corrupted file. */
    const char *p = v ? v : "";
    size_t len = strlen(p);
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, len ? len : 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        if (t >= 0) H5Tclose(t);
        return mp_h5_fail(MP_ERR_HDF5, loc, mp_h5_objname(obj), "cannot write attribute '%s'", key);
    }
    char *buf = calloc(len + 1, 1);
    if (!buf) { H5Tclose(t); return mp_error(MP_ERR_NOMEM, "out of memory writing attribute '%s'", key); }
    memcpy(buf, p, len);
    mp_status st = attr_write_n(loc, obj, key, t, t, buf, 1, 1);
    free(buf);
    H5Tclose(t);
    return st;
}
