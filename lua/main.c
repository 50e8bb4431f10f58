/* main.c — the `mechprobe` command: runs a Lua probe script with the module
 * `mp` preloaded (global `mp`, and `require "mechprobe"`).
 *
 *   mechprobe script.lua [args...]   run a script (args in the global `arg`)
 *   mechprobe NAME [args...]         run the shipped probe probes/NAME.lua
 *   mechprobe -e 'lua code'          run a chunk
 *   mechprobe --help | --version
 *
 * A script error prints "file:line: message" and a traceback on stderr and the
 * exit status is 1. A bad input file or argument reported by the library
 * (mp_lua_fail) prints just "mechprobe: message" (the traceback only with
 * MECHPROBE_TRACEBACK=1). Started by mpirun / srun, each rank runs the script;
 * an error on one rank prints "rank R of N: ..." and ends the job on every rank
 * (mpi/mp_mpi.h). */
#include "mp_lua.h"
#include "mp_mpi.h"
#include "omp_env.h"

#include <lualib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MP_PROBE_DIR
#define MP_PROBE_DIR "probes"
#endif

static const char *usage =
    "usage: mechprobe script.lua [args...]   run a probe script\n"
    "       mechprobe NAME [args...]         run the shipped probe probes/NAME.lua\n"
    "       mechprobe -e 'lua code'          run a chunk\n"
    "       mechprobe --help | --version\n"
    "\n"
    "Scripts see the module as the global `mp` (also require \"mechprobe\").\n"
    "Shipped probes: quickstart, capture, generate, sinks, mirror_descent, group_arith,\n"
    "rope_id, view (run `mechprobe NAME --help`).\n"
    "Probe directory: $MECHPROBE_PROBES, else " MP_PROBE_DIR "\n";

static int shipped_probe; /* the script is one of probes/NAME.lua */

/* "chunk.lua:12: message" -> "message" */
static void strip_where(lua_State *L) {
    const char *s = lua_tostring(L, -1), *p = strstr(s, ".lua:");
    if (!p || memchr(s, ' ', (size_t)(p - s))) return;
    p += 5;
    if (*p < '0' || *p > '9') return;
    while (*p >= '0' && *p <= '9') p++;
    if (p[0] != ':' || p[1] != ' ') return;
    lua_pushstring(L, p + 2);
    lua_replace(L, -2);
}

static int msghandler(lua_State *L) {
    const char *tb = getenv("MECHPROBE_TRACEBACK");
    if (lua_type(L, 1) == LUA_TSTRING && !(tb && *tb && strcmp(tb, "0"))) {
        lua_getfield(L, LUA_REGISTRYINDEX, MP_LUA_INPUT_ERROR);
        int input = lua_rawequal(L, 1, -1);
        lua_pop(L, 1);
        if (input) { /* the message alone (what in a shipped probe raised it is of no use to its user) */
            lua_settop(L, 1);
            if (shipped_probe) strip_where(L);
            return 1;
        }
    }
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static const char *probe_dir(void) {
    const char *env = getenv("MECHPROBE_PROBES");
    return env && *env ? env : MP_PROBE_DIR;
}

/* Resolves NAME to probes/NAME.lua when it is not an existing file. */
static const char *resolve_script(const char *name, char *buf, size_t n) {
    struct stat sb; /* a folder of that name (e.g. ./view beside `mechprobe view`) is not a script */
    if (stat(name, &sb) == 0 && !S_ISDIR(sb.st_mode)) return name;
    size_t len = strlen(name);
    if (len > 4 && strcmp(name + len - 4, ".lua") == 0) return name; /* let loadfile report it */
    if (strchr(name, '/')) return name;
    snprintf(buf, n, "%s/%s.lua", probe_dir(), name);
    if (access(buf, F_OK) == 0) {
        shipped_probe = 1;
        return buf;
    }
    return NULL;
}

static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (mp_mpi_world_size() > 1)
            fprintf(stderr, "mechprobe: rank %d of %d: %s\n", mp_mpi_world_rank(), mp_mpi_world_size(),
                    msg ? msg : "(error object is not a string)");
        else
            fprintf(stderr, "mechprobe: %s\n", msg ? msg : "(error object is not a string)");
        fflush(stderr);
        lua_pop(L, 1);
    }
    return status;
}

static int run_chunk(lua_State *L, int nargs) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int st = lua_pcall(L, nargs, 0, base);
    lua_remove(L, base);
    return report(L, st);
}

static int preload_mechprobe(lua_State *L) {
    lua_getglobal(L, "mp");
    return 1;
}

static void setup_state(lua_State *L) {
    luaL_openlibs(L);
    luaL_requiref(L, "mechprobe", luaopen_mechprobe, 0);
    lua_setglobal(L, "mp");
    /* require "mechprobe" returns the same table; probe libraries in probes/lib */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, preload_mechprobe);
    lua_setfield(L, -2, "mechprobe");
    lua_pop(L, 1);
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/lib/?.lua;%s", probe_dir(), lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}


/* The process exit: under MPI, a failure ends every rank (MPI_Abort), success
 * waits for the others in MPI_Finalize. */
static int finish(int code) {
    if (code != 0) mp_mpi_abort(code);
    mp_mpi_finalize();
    return code;
}

static int run(int argc, char **argv);

int main(int argc, char **argv) {
    /* idle OpenMP threads spin briefly, then sleep (runtime/omp_env.h): long
     * spinning starves a busy neighbour, sleeping at once slows decoding 2-6x */
    mp_omp_env_default(argv);
    if (mp_mpi_init(&argc, &argv)) {
        fprintf(stderr, "mechprobe: %s\n", mp_last_error());
        return 1;
    }
    return finish(run(argc, argv));
}

static int run(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("mechprobe %s (%s)\n", MP_VERSION, LUA_RELEASE);
        return 0;
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        fputs("mechprobe: cannot create the Lua state (out of memory)\n", stderr);
        return 1;
    }
    setup_state(L);
    int status;
    if (strcmp(argv[1], "-e") == 0) {
        if (argc < 3) {
            fputs("mechprobe: -e needs a chunk of Lua code\n", stderr);
            lua_close(L);
            return 2;
        }
        lua_createtable(L, argc, 0);
        for (int i = 3; i < argc; i++) { lua_pushstring(L, argv[i]); lua_rawseti(L, -2, i - 2); }
        lua_setglobal(L, "arg");
        status = luaL_loadbuffer(L, argv[2], strlen(argv[2]), "=(command line)");
        if (status == LUA_OK) status = run_chunk(L, 0);
        else report(L, status);
    } else {
        char buf[PATH_MAX];
        const char *script = resolve_script(argv[1], buf, sizeof buf);
        if (!script) {
            fprintf(stderr, "mechprobe: '%s' is neither a file nor a shipped probe (looked for %s/%s.lua)\n", argv[1],
                    probe_dir(), argv[1]);
            lua_close(L);
            return 2;
        }
        lua_createtable(L, argc, 2);
        lua_pushstring(L, argv[0]); /* arg[-1]: the interpreter, as lua.c does */
        lua_rawseti(L, -2, -1);
        lua_pushstring(L, script);
        lua_rawseti(L, -2, 0);
        for (int i = 2; i < argc; i++) { lua_pushstring(L, argv[i]); lua_rawseti(L, -2, i - 1); }
        lua_setglobal(L, "arg");
        status = luaL_loadfile(L, script);
        if (status == LUA_OK) {
            for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
            status = run_chunk(L, argc - 2);
        } else {
            report(L, status);
        }
    }
    lua_close(L);
    return status == LUA_OK ? 0 : 1;
}
