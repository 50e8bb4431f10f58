/* lmp.c — the Lua module `mp` (also `require "mechprobe"`): assembles the parts
 * registered by the other binding files and holds the shared helpers. */
#include "mp_lua.h"

#include <errno.h>
#include <lualib.h>
#include <string.h>
#include <sys/stat.h>

int mp_lua_fail(lua_State *L, mp_status s) {
    (void)s;
    return luaL_error(L, "%s", mp_last_error());
}

static int l_version(lua_State *L) {
    lua_pushstring(L, MP_VERSION);
    return 1;
}

/* mp.mkdir(path): creates a directory and its parents (like mkdir -p). */
static int l_mkdir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return luaL_argerror(L, 1, "bad directory path");
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return luaL_error(L, "%s: cannot create directory: %s", buf, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return luaL_error(L, "%s: exists and is not a directory", path);
    lua_pushstring(L, path);
    return 1;
}

int luaopen_mechprobe(lua_State *L) {
    mp_init();
    lua_newtable(L);
    lua_pushstring(L, MP_VERSION);
    lua_setfield(L, -2, "VERSION");
    lua_pushcfunction(L, l_version);
    lua_setfield(L, -2, "version");
    lua_pushcfunction(L, l_mkdir);
    lua_setfield(L, -2, "mkdir");
    mp_lua_open_tensor(L);
    mp_lua_open_h5(L);
    mp_lua_open_model(L);
    mp_lua_open_tasks(L);
    mp_lua_open_analyze(L);
    mp_lua_open_plot(L);
    mp_lua_open_probe(L);
    mp_lua_open_mirror(L);
    mp_lua_open_mpi(L);
    return 1;
}
