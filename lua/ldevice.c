/* ldevice.c — device selection in Lua: the device= / precision= options of
 * mp.load and mp.model.new, m:to(device [, {precision=}]), m.device and
 * m.precision, and mp.cuda.available() / mp.cuda.built. Bindings only: the
 * checks and the move are backends/cuda's (mp_cuda.h). */
#include "lmodel.h"
#include "mp_cuda.h"

#include <stdio.h>
#include <string.h>

/* cuda needs a device (asked for at once, before any file is read or
 * written); bf16 on the CPU needs the model's BF16 weights, checked by the move
 * (mp_model_cpu_bf16_check). */
static void check_choice(lua_State *L, const char *fn, mp_device d, mp_precision p) {
    (void)p;
    if (d == MP_DEVICE_CUDA && mp_cuda_available() != MP_OK) luaL_error(L, "%s: %s", fn, mp_last_error());
}

void mp_lua_device_read(lua_State *L, int opt, const char *fn, mp_device *d, mp_precision *p) {
    char what[128];
    const char *ds = mp_lua_opt_str(L, opt, fn, "device", "cpu");
    snprintf(what, sizeof what, "%s: option 'device'", fn);
    if (mp_device_parse(ds, what, d)) luaL_error(L, "%s", mp_last_error());
    const char *ps = mp_lua_opt_str(L, opt, fn, "precision", "fp32");
    snprintf(what, sizeof what, "%s: option 'precision'", fn);
    if (mp_precision_parse(ps, what, p)) luaL_error(L, "%s", mp_last_error());
    lua_pop(L, 2); /* the two values mp_lua_opt_str left */
    check_choice(L, fn, *d, *p);
}

void mp_lua_device_move(lua_State *L, lmodel *lm, const char *fn, mp_device d, mp_precision p) {
    if (d == lm->m->device && d == MP_DEVICE_CPU && p == lm->m->precision) return;
    if (mp_model_to_device(lm->m, d, p) != MP_OK) luaL_error(L, "%s: %s", fn, mp_last_error());
}

/* m:to(device [, {precision="fp32"|"bf16"}]) -> m. Moving to "cuda" again
 * re-uploads the weights (after editing them in place on the host). */
static int model_to(lua_State *L) {
    lua_settop(L, 3);
    lmodel *lm = mp_lua_model_busy(L, 1, "to", 1); /* not from inside its own forward: it frees the device copy */
    static const char *const known[] = {"precision", NULL};
    mp_device d;
    mp_precision p;
    if (mp_device_parse(luaL_checkstring(L, 2), "to: argument #1", &d)) return luaL_error(L, "%s", mp_last_error());
    mp_lua_opt_check(L, 3, "to", known);
    const char *ps = mp_lua_opt_str(L, lua_istable(L, 3) ? 3 : 0, "to", "precision", "fp32");
    if (mp_precision_parse(ps, "to: option 'precision'", &p)) return luaL_error(L, "%s", mp_last_error());
    check_choice(L, "to", d, p);
    mp_lua_device_move(L, lm, "to", d, p);
    lua_pushvalue(L, 1);
    return 1;
}

int mp_lua_device_index(lua_State *L, lmodel *lm, const char *k) {
    if (strcmp(k, "device") == 0) {
        lua_pushstring(L, mp_device_name(lm->m->device));
        return 1;
    }
    if (strcmp(k, "precision") == 0) {
        lua_pushstring(L, mp_precision_name(lm->m->precision));
        return 1;
    }
    return 0;
}

const luaL_Reg mp_lua_device_methods[] = {{"to", model_to}, {NULL, NULL}};

/* mp.cuda.available() -> true, or false and the reason ("no CUDA device: ...",
 * "this build has no CUDA support (...)") */
static int l_cuda_available(lua_State *L) {
    if (mp_cuda_available() == MP_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, mp_last_error());
    return 2;
}

void mp_lua_open_device(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, l_cuda_available);
    lua_setfield(L, -2, "available");
    lua_pushboolean(L, mp_cuda_built());
    lua_setfield(L, -2, "built");
    lua_setfield(L, -2, "cuda");
}
