/* lh5.c — HDF5 files from Lua: mp.h5.open(path [, mode]) returns a
 * "mechprobe.H5" handle with read/read_int/shape/attrs/list/has/write/
 * set_attr/close, built on io/h5io. Modes: "r" (default), "r+" (read-write),
 * "w" (create or replace, atomically: written under a temporary name that
 * close() or the end of a <close> scope renames over `path`; an error in that
 * scope, or a handle collected without close, leaves `path` as it was), "a"
 * (read-write, created atomically as "w" if missing). "r+" and "a" on an
 * existing file update it in place and refuse a symbolic link or a
 * non-regular file.
 * Every dataset comes back as a float32 Tensor (integers converted); read_int
 * gives small integer data such as /tokens as nested Lua tables.
 * Trust (h5guard.h): an existing file opened in any mode but "w" is first
 * checked by a guarded child process, unless this process wrote or checked it
 * already (unchanged since) or the caller says {trusted = true}; paths are at
 * most MP_H5_MAX_DEPTH groups deep; sizes are checked before allocating. */
#include "mp_lua.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5guard.h"
#include "h5io.h"

#define H5_MT "mechprobe.H5"

typedef struct {
    hid_t f;          /* H5I_INVALID_HID once closed */
    mp_h5_mode mode;
    char *path;
    int atomic;       /* f is at.file: close commits, an error or __gc aborts */
    mp_h5_atomic at;
} lh5;

/* Closes h: commits an atomic file when `commit`, else throws it away. */
static mp_status close_h5(lh5 *h, int commit) {
    if (!h->atomic) return mp_h5_close(&h->f);
    h->atomic = 0;
    h->at.file = h->f;
    h->f = H5I_INVALID_HID;
    if (commit) return mp_h5_atomic_commit(&h->at);
    mp_h5_atomic_abort(&h->at);
    return MP_OK;
}

static lh5 *check_h5(lua_State *L) {
    lh5 *h = luaL_checkudata(L, 1, H5_MT);
    if (h->f < 0) luaL_error(L, "H5 file is closed%s%s", h->path ? ": " : "", h->path ? h->path : "");
    return h;
}

static lh5 *check_writable(lua_State *L) {
    lh5 *h = check_h5(L);
    if (h->mode == MP_H5_READ)
        luaL_error(L, "%s: opened read-only (open it with mode \"r+\" or \"a\" to write)", h->path);
    return h;
}

/* A path argument: deeper than MP_H5_MAX_DEPTH groups is refused (each
 * prefix is looked up: the cost grows with the square of the depth). */
static const char *check_path(lua_State *L, lh5 *h, int idx, const char *def) {
    const char *p = def ? luaL_optstring(L, idx, def) : luaL_checkstring(L, idx);
    if (mp_h5_path_depth(p) > MP_H5_MAX_DEPTH) {
        char head[81];
        snprintf(head, sizeof head, "%s", p);
        luaL_error(L, "%s: %s...: path deeper than %d groups (refused)", h->path, head, MP_H5_MAX_DEPTH);
    }
    return p;
}

/* The read side of opening: an existing file is checked by the guarded child
 * (h5guard.h) unless trusted; then its identity is compared with the one
 * checked, so that a file replaced meanwhile is not read unchecked. */
static mp_status open_checked(lh5 *h, const char *path, mp_h5_mode mode, int trusted) {
    mp_h5_fileid id;
    int check = !trusted && mode != MP_H5_TRUNC && !(mode == MP_H5_APPEND && access(path, F_OK) != 0);
    mp_status st;
    if (check && ((st = mp_h5_fileid_of(path, &id)) != MP_OK || (st = mp_h5_validate(path, NULL)) != MP_OK)) return st;
    if ((st = mp_h5_open(&h->f, path, mode)) != MP_OK) return st;
    /* opening for writing writes to the file (its size and times change):
     * then only a replaced file (another inode) counts */
    if (check && mode != MP_H5_READ) id.size = 0, id.mtime_ns = id.ctime_ns = -1;
    if (check && mp_h5_file_is(h->f, &id) == 0) {
        mp_h5_close(&h->f);
        return mp_error(MP_ERR_IO, "%s: the file changed while it was being checked (open it again)", path);
    }
    return MP_OK;
}

/* mp.h5.open(path [, mode] [, {trusted = true}]), or mp.h5.open(path, {mode = m, trusted = b}) */
static int l_open(lua_State *L) {
    static const char *const modes[] = {"r", "r+", "w", "a", NULL};
    static const mp_h5_mode mv[] = {MP_H5_READ, MP_H5_RDWR, MP_H5_TRUNC, MP_H5_APPEND};
    static const char *const known[] = {"mode", "trusted", NULL};
    const char *path = luaL_checkstring(L, 1);
    lua_settop(L, 3);
    int oi = lua_istable(L, 2) ? 2 : 3;
    if (oi == 2 && !lua_isnil(L, 3)) return luaL_argerror(L, 3, "unexpected after an options table");
    mp_lua_opt_check(L, oi, "mp.h5.open", known);
    int m;
    if (oi == 2) m = mp_lua_opt_enum(L, 2, "mp.h5.open", "mode", 0, modes);
    else m = luaL_checkoption(L, 2, "r", modes);
    int trusted = mp_lua_opt_bool(L, oi, "mp.h5.open", "trusted", 0);
    lh5 *h = lua_newuserdatauv(L, sizeof *h, 0);
    h->f = H5I_INVALID_HID;
    h->mode = mv[m];
    h->path = NULL;
    h->atomic = 0;
    luaL_setmetatable(L, H5_MT);
    h->path = strdup(path);
    if (!h->path) return luaL_error(L, "out of memory");
    struct stat sb;
    mp_status st = mp_check_regular_file(path); /* a FIFO would block, a device is no HDF5 file */
    if (st == MP_OK && (mv[m] == MP_H5_TRUNC || (mv[m] == MP_H5_APPEND && lstat(path, &sb) != 0 && errno == ENOENT))) {
        if ((st = mp_h5_atomic_create(&h->at, path)) == MP_OK) { /* refuses a link, a FIFO, a device */
            h->f = h->at.file;
            h->atomic = 1;
        }
    } else if (st == MP_OK) { /* an existing file: checked first (h5guard.h) unless trusted */
        st = open_checked(h, path, mv[m], trusted);
    }
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 1;
}

/* f:read(name) -> Tensor (a number for a scalar dataset) */
static int m_read(lua_State *L) {
    lh5 *h = check_h5(L);
    const char *name = check_path(L, h, 2, NULL);
    mp_h5_dsinfo info;
    mp_status st = mp_h5_dataset_info(h->f, name, &info);
    if (st == MP_OK) st = mp_h5_check_held(h->f, name, &info); /* before allocating */
    if (st != MP_OK) return mp_lua_fail(L, st);
    if (info.ndim == 0) {
        float v;
        if ((st = mp_h5_read_f32_into(h->f, name, &v, 1)) != MP_OK) return mp_lua_fail(L, st);
        lua_pushnumber(L, v);
        return 1;
    }
    mp_tensor *t = mp_lua_tensor_new(L, info.ndim, info.shape);
    if ((st = mp_h5_read_f32_into(h->f, name, t->data, t->numel)) != MP_OK) return mp_lua_fail(L, st);
    return 1;
}

static void push_ints(lua_State *L, const int32_t *d, int ndim, const int64_t *shape) {
    lua_createtable(L, (int)shape[0], 0);
    size_t stride = 1;
    for (int i = 1; i < ndim; i++) stride *= (size_t)shape[i];
    for (int64_t i = 0; i < shape[0]; i++) {
        if (ndim == 1) lua_pushinteger(L, d[i]);
        else push_ints(L, d + (size_t)i * stride, ndim - 1, shape + 1);
        lua_rawseti(L, -2, i + 1);
    }
}

/* f:read_int(name) -> nested tables of integers ([B][T] for /tokens) */
static int m_read_int(lua_State *L) {
    lh5 *h = check_h5(L);
    const char *name = check_path(L, h, 2, NULL);
    mp_h5_dsinfo info;
    mp_status st = mp_h5_dataset_info(h->f, name, &info);
    if (st == MP_OK) st = mp_h5_check_held(h->f, name, &info); /* before allocating */
    if (st != MP_OK) return mp_lua_fail(L, st);
    /* The buffer is a userdata so that a Lua error while building the
     * tables cannot leak it. */
    int32_t *buf = lua_newuserdatauv(L, (info.numel ? info.numel : 1) * sizeof(int32_t), 0);
    if ((st = mp_h5_read_i32_into(h->f, name, buf, info.numel)) != MP_OK) return mp_lua_fail(L, st);
    if (info.ndim == 0) lua_pushinteger(L, buf[0]);
    else push_ints(L, buf, info.ndim, info.shape);
    return 1;
}

/* f:shape(name) -> table of extents */
static int m_shape(lua_State *L) {
    lh5 *h = check_h5(L);
    mp_h5_dsinfo info;
    mp_status st = mp_h5_dataset_info(h->f, check_path(L, h, 2, NULL), &info);
    if (st != MP_OK) return mp_lua_fail(L, st);
    lua_createtable(L, info.ndim, 0);
    for (int i = 0; i < info.ndim; i++) {
        lua_pushinteger(L, info.shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static void push_attr(lua_State *L, const mp_h5_attr *a) {
    switch (a->kind) {
    case MP_H5_ATTR_INT: lua_pushinteger(L, a->i); break;
    case MP_H5_ATTR_FLOAT: lua_pushnumber(L, a->f); break;
    case MP_H5_ATTR_STRING: lua_pushstring(L, a->s); break;
    case MP_H5_ATTR_INT_ARRAY:
    case MP_H5_ATTR_FLOAT_ARRAY:
        lua_createtable(L, (int)a->n, 0);
        for (size_t i = 0; i < a->n; i++) {
            if (a->kind == MP_H5_ATTR_INT_ARRAY) lua_pushinteger(L, a->iv[i]);
            else lua_pushnumber(L, a->fv[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    default: lua_pushnil(L); break;
    }
}

/* f:attrs([obj]) -> {key = value}; unsupported attribute types are left out */
static int m_attrs(lua_State *L) {
    lh5 *h = check_h5(L);
    const char *obj = check_path(L, h, 2, "/");
    mp_h5_attr *a;
    int n;
    mp_status st = mp_h5_attrs_read(h->f, obj, &a, &n);
    if (st != MP_OK) return mp_lua_fail(L, st);
    /* (Only a Lua out-of-memory error while copying could leak the array.) */
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        if (a[i].kind == MP_H5_ATTR_UNSUPPORTED) continue;
        push_attr(L, &a[i]);
        lua_setfield(L, -2, a[i].name);
    }
    mp_h5_attrs_free(a, n);
    return 1;
}

/* f:list([group]) -> sorted table of child names */
static int m_list(lua_State *L) {
    lh5 *h = check_h5(L);
    const char *g = check_path(L, h, 2, "/");
    mp_h5_entry *e;
    int n;
    mp_status st = mp_h5_list(h->f, g, &e, &n);
    if (st != MP_OK) return mp_lua_fail(L, st);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, e[i].name);
        lua_rawseti(L, -2, i + 1);
    }
    mp_h5_list_free(e, n);
    return 1;
}

/* f:has(name) -> boolean, plus "group"/"dataset"/"other" when present */
static int m_has(lua_State *L) {
    lh5 *h = check_h5(L);
    mp_h5_kind k;
    int ok = mp_h5_exists(h->f, check_path(L, h, 2, NULL), &k);
    lua_pushboolean(L, ok);
    if (!ok) return 1;
    lua_pushstring(L, k == MP_H5_GROUP ? "group" : k == MP_H5_DATASET ? "dataset" : "other");
    return 2;
}

/* f:delete(name): removes a dataset or a group with everything under it */
static int m_delete(lua_State *L) {
    lh5 *h = check_writable(L);
    mp_status st = mp_h5_delete(h->f, luaL_checkstring(L, 2));
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

/* f:write(name, tensor_or_table [, {compress = N, int32 = true}]); int32: stored
 * as int32, every value an integer in int32's range (else an error, nothing written) */
static int m_write(lua_State *L) {
    lh5 *h = check_writable(L);
    const char *name = luaL_checkstring(L, 2);
    lua_settop(L, 4); /* a table converted below is pushed at 5 */
    mp_tensor *t = mp_lua_tensor_arg(L, 3);
    static const char *const known[] = {"compress", "int32", NULL};
    mp_lua_opt_check(L, 4, "h5:write", known);
    int compress = (int)mp_lua_opt_int(L, 4, "h5:write", "compress", 0, 0, 9);
    int as_int = mp_lua_opt_bool(L, 4, "h5:write", "int32", 0);
    mp_status st;
    if (as_int) {
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        int32_t *buf = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *buf, 0);
        for (int64_t i = 0; i < n; i++) {
            float v = t->data[i];
            if (!(v == floorf(v) && v >= -2147483648.0f && v < 2147483648.0f))
                return luaL_error(L, "f:write('%s', {int32 = true}): element %d is %f, not an int32 integer", name,
                                  (int)i, (double)v);
            buf[i] = (int32_t)v;
        }
        st = mp_h5_write_i32(h->f, name, t->ndim, t->shape, buf, compress);
    } else {
        st = mp_h5_write_f32(h->f, name, t->ndim, t->shape, t->data, compress);
    }
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

/* f:set_attr(obj, key, value): integer, float, boolean (stored 0/1), string,
 * or a table/1-D Tensor of numbers (integers if all are integers). */
static int m_set_attr(lua_State *L) {
    lh5 *h = check_writable(L);
    const char *obj = luaL_checkstring(L, 2);
    const char *key = luaL_checkstring(L, 3);
    mp_status st = MP_OK;
    switch (lua_type(L, 4)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, 4)) st = mp_h5_attr_set_int(h->f, obj, key, lua_tointeger(L, 4));
        else st = mp_h5_attr_set_float(h->f, obj, key, lua_tonumber(L, 4));
        break;
    case LUA_TBOOLEAN: st = mp_h5_attr_set_int(h->f, obj, key, lua_toboolean(L, 4)); break;
    case LUA_TSTRING: st = mp_h5_attr_set_string(h->f, obj, key, lua_tostring(L, 4)); break;
    case LUA_TTABLE: {
        size_t n = lua_rawlen(L, 4);
        if (n == 0 || n > MP_H5_ATTR_MAXN) luaL_argerror(L, 4, "array attribute needs 1.. entries");
        int64_t *iv = lua_newuserdatauv(L, n * sizeof(int64_t), 0);
        double *fv = lua_newuserdatauv(L, n * sizeof(double), 0);
        int all_int = 1;
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, 4, (lua_Integer)i + 1);
            int ok;
            fv[i] = lua_tonumberx(L, -1, &ok);
            if (!ok) luaL_argerror(L, 4, lua_pushfstring(L, "entry %d is not a number", (int)i + 1));
            if (lua_isinteger(L, -1)) iv[i] = lua_tointeger(L, -1);
            else all_int = 0;
            lua_pop(L, 1);
        }
        st = all_int ? mp_h5_attr_set_ints(h->f, obj, key, iv, n) : mp_h5_attr_set_floats(h->f, obj, key, fv, n);
        break;
    }
    default: {
        mp_tensor *t = mp_lua_tensor_test(L, 4);
        if (!t) return luaL_typeerror(L, 4, "number, string, boolean, table or Tensor");
        double *fv = lua_newuserdatauv(L, (t->numel ? t->numel : 1) * sizeof(double), 0);
        for (size_t i = 0; i < t->numel; i++) fv[i] = t->data[i];
        st = mp_h5_attr_set_floats(h->f, obj, key, fv, t->numel);
        break;
    }
    }
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

static int m_close(lua_State *L) {
    lh5 *h = luaL_checkudata(L, 1, H5_MT);
    mp_status st = close_h5(h, 1);
    if (st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

static int mt_gc(lua_State *L) {
    lh5 *h = luaL_checkudata(L, 1, H5_MT);
    close_h5(h, 0); /* never closed: an atomic file is not committed */
    free(h->path);
    h->path = NULL;
    return 0;
}

/* __close(h, err): the end of a <close> scope commits an atomic file, unless
 * the scope ends by an error (then it is thrown away). */
static int mt_close(lua_State *L) {
    lh5 *h = luaL_checkudata(L, 1, H5_MT);
    int ok = lua_isnoneornil(L, 2);
    mp_status st = close_h5(h, ok);
    if (ok && st != MP_OK) return mp_lua_fail(L, st);
    return 0;
}

static int mt_tostring(lua_State *L) {
    static const char *const names[] = {"r", "r+", "w", "a"};
    lh5 *h = luaL_checkudata(L, 1, H5_MT);
    lua_pushfstring(L, "H5(%s, %s)", h->path ? h->path : "?", h->f < 0 ? "closed" : names[h->mode]);
    return 1;
}

void mp_lua_open_h5(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"read", m_read},       {"read_int", m_read_int}, {"shape", m_shape}, {"attrs", m_attrs},
        {"list", m_list},       {"has", m_has},           {"write", m_write}, {"set_attr", m_set_attr},
        {"delete", m_delete},
        {"close", m_close},     {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__gc", mt_gc}, {"__close", mt_close}, {"__tostring", mt_tostring}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, H5_MT)) {
        luaL_setfuncs(L, meta, 0);
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_open);
    lua_setfield(L, -2, "open");
    lua_setfield(L, -2, "h5");
}
