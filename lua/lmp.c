/* lmp.c — the Lua module `mp` (also `require "mechprobe"`): assembles the parts
 * registered by the other binding files and holds the shared helpers. */
#include "mp_lua.h"
#include "h5io.h"
#include "mp_input.h"

#include <errno.h>
#include <lualib.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mp_lua_fail(lua_State *L, mp_status s) {
    (void)s;
    luaL_where(L, 1);
    lua_pushstring(L, mp_last_error());
    lua_concat(L, 2);
    /* an input or environment error, not a bug in the script: the CLI prints
     * it without a traceback when it reaches the top unchanged */
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, MP_LUA_INPUT_ERROR);
    return lua_error(L);
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

/* Options of mp.read_file / mp.input_size: {max_bytes = N, what = "--corpus"}. */
static void input_opts(lua_State *L, const char *fn, uint64_t *max, const char **what) {
    static const char *const known[] = {"max_bytes", "what", NULL};
    mp_lua_opt_check(L, 2, fn, known);
    *max = (uint64_t)mp_lua_opt_int(L, 2, fn, "max_bytes", (lua_Integer)MP_INPUT_DEFAULT_MAX, 0,
                                    (lua_Integer)1 << 40);
    *what = mp_lua_opt_str(L, 2, fn, "what", NULL);
}

/* mp.read_file(path [, {max_bytes = N, what = "--text-file"}]) -> string: the
 * whole of an input file; a FIFO, device or directory is refused before it is
 * opened, and so is a file over max_bytes (default 1 GiB); errors name `what`
 * and the file. */
static int l_read_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    uint64_t max;
    const char *what;
    input_opts(L, "mp.read_file", &max, &what);
    char *buf;
    size_t n;
    mp_status st = mp_read_input(path, what, max, &buf, &n);
    if (st != MP_OK) return mp_lua_fail(L, st);
    lua_pushlstring(L, buf, n);
    free(buf);
    return 1;
}

/* mp.input_size(path [, opts]) -> bytes: the checks of mp.read_file without
 * reading (for a file a C reader reads later, e.g. mp.tasks.text's corpus). */
static int l_input_size(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    uint64_t max, size;
    const char *what;
    int fd;
    input_opts(L, "mp.input_size", &max, &what);
    mp_status st = mp_open_input(path, what, max, &fd, &size);
    if (st != MP_OK) return mp_lua_fail(L, st);
    close(fd);
    lua_pushinteger(L, (lua_Integer)size);
    return 1;
}

/* mp.clock() -> seconds of a monotonic wall clock (CLOCK_MONOTONIC): for
 * timing (os.clock counts the process's CPU time, every thread's). */
static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

int luaopen_mechprobe(lua_State *L) {
    mp_io_init();
    lua_newtable(L);
    lua_pushstring(L, MP_VERSION);
    lua_setfield(L, -2, "VERSION");
    lua_pushcfunction(L, l_version);
    lua_setfield(L, -2, "version");
    lua_pushcfunction(L, l_mkdir);
    lua_setfield(L, -2, "mkdir");
    lua_pushcfunction(L, l_read_file);
    lua_setfield(L, -2, "read_file");
    lua_pushcfunction(L, l_input_size);
    lua_setfield(L, -2, "input_size");
    lua_pushcfunction(L, l_clock);
    lua_setfield(L, -2, "clock");
    mp_lua_open_tensor(L);
    mp_lua_open_factored(L);
    mp_lua_open_h5(L);
    mp_lua_open_output(L);
    mp_lua_open_model(L);
    mp_lua_open_sae(L);
    mp_lua_open_capture(L);
    mp_lua_open_tasks(L);
    mp_lua_open_analyze(L);
    mp_lua_open_plot(L);
    mp_lua_open_probe(L);
    mp_lua_open_mirror(L);
    mp_lua_open_mpi(L);
    mp_lua_open_view(L);
    return 1;
}
