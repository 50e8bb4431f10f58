/* lsae_io.c — SAELens folders from Lua: mp.sae.load(path) (a folder of
 * cfg.json + sae_weights.safetensors, or the .safetensors file with cfg.json
 * beside it) and sae:save(dir) (SAELens v6's cfg.json + F32 weights, written
 * atomically), over formats/sae_io.h; added to mp.sae and the SAE's methods
 * by mp_lua_open_sae_io, called from mp_lua_open_sae. */
#include "mp_lua.h"

#include "sae_io.h"

/* mp.sae.load(path) -> SAE */
static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    mp_sae *s = NULL;
    mp_status st = mp_sae_load(&s, path);
    if (st) return mp_lua_fail(L, st);
    mp_lua_sae_push(L, s);
    return 1;
}

/* sae:save(dir) -> sae */
static int m_save(lua_State *L) {
    mp_sae *s = mp_lua_sae_check(L, 1);
    const char *dir = luaL_checkstring(L, 2);
    mp_status st = mp_sae_save(s, dir);
    if (st) return mp_lua_fail(L, st);
    lua_settop(L, 1);
    return 1;
}

/* With the mp table on the top of the stack (mp_lua_open_sae's end). */
void mp_lua_open_sae_io(lua_State *L) {
    lua_getfield(L, -1, "sae");
    lua_pushcfunction(L, l_load);
    lua_setfield(L, -2, "load");
    lua_pop(L, 1);
    luaL_getmetatable(L, MP_SAE_MT);
    lua_getfield(L, -1, "methods");
    lua_pushcfunction(L, m_save);
    lua_setfield(L, -2, "save");
    lua_pop(L, 2);
}
