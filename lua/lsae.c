/* lsae.c — sparse autoencoders from Lua: mp.sae.new{...} makes a
 * "mechprobe.SAE" handle over the C core runtime/sae.h, with SAELens's
 * methods encode / decode / forward, its weights as Tensor views (sae.W_enc,
 * b_enc, W_dec, b_dec, threshold: edits reach the SAE), sae.cfg (a table of
 * its settings, SAELens's names) and close. Loading, saving, splicing into a
 * model and training add their functions through mp_lua_sae_* (mp_lua.h). */
#include "mp_lua.h"

#include <stdlib.h>
#include <string.h>

#include "sae.h"

typedef struct {
    mp_sae *s;       /* NULL once closed */
    mp_storage *st;  /* over s->block, for the weight views; NULL until one is asked for */
} lsae;

static const char *const arch_names[] = {"standard", "topk", "jumprelu", NULL};
static const char *const norm_names[] = {"none", "expected_average_only_in", "constant_norm_rescale", "layer_norm",
                                         NULL};

mp_sae *mp_lua_sae_check(lua_State *L, int idx) {
    lsae *u = luaL_checkudata(L, idx, MP_SAE_MT);
    if (!u->s) luaL_error(L, "SAE is closed");
    return u->s;
}

mp_sae *mp_lua_sae_peek(lua_State *L, int idx) {
    lsae *u = luaL_checkudata(L, idx, MP_SAE_MT);
    return u->s;
}

void mp_lua_sae_push(lua_State *L, mp_sae *s) {
    lsae *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->s = NULL;
    u->st = NULL;
    luaL_setmetatable(L, MP_SAE_MT);
    u->s = s;
}

static void sae_close(lsae *u) {
    if (u->st) {
        mp_lua_storage_invalidate(u->st, "the SAE was closed");
        mp_lua_storage_release(u->st);
        u->st = NULL;
    }
    mp_sae_free(u->s);
    u->s = NULL;
}

/* mp.sae.new{architecture = "standard"|"topk"|"jumprelu", d_in =, d_sae =, k =,
 *            apply_b_dec_to_input = true, normalize_activations = "none",
 *            hook_name =, hook_layer =, model_name =} — every weight 0. */
static int l_new(lua_State *L) {
    static const char *const known[] = {"architecture", "d_in", "d_sae", "k", "apply_b_dec_to_input",
                                        "normalize_activations", "hook_name", "hook_layer", "model_name", NULL};
    const char *fn = "mp.sae.new";
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_lua_opt_check(L, 1, fn, known);
    int arch = mp_lua_opt_enum(L, 1, fn, "architecture", MP_SAE_STANDARD, arch_names);
    lua_getfield(L, 1, "d_in");
    lua_getfield(L, 1, "d_sae");
    if (lua_isnil(L, -2) || lua_isnil(L, -1)) return luaL_error(L, "%s: options 'd_in' and 'd_sae' are required", fn);
    lua_pop(L, 2);
    int d_in = (int)mp_lua_opt_int(L, 1, fn, "d_in", 0, 1, 1 << 24);
    int d_sae = (int)mp_lua_opt_int(L, 1, fn, "d_sae", 0, 1, 1 << 26);
    int k = 0;
    if (arch == MP_SAE_TOPK) {
        lua_getfield(L, 1, "k");
        if (lua_isnil(L, -1)) return luaL_error(L, "%s: architecture \"topk\" needs option 'k'", fn);
        lua_pop(L, 1);
        k = (int)mp_lua_opt_int(L, 1, fn, "k", 0, 1, d_sae);
    } else if (lua_getfield(L, 1, "k") != LUA_TNIL) {
        return luaL_error(L, "%s: option 'k' is for architecture \"topk\" (this is \"%s\")", fn, arch_names[arch]);
    }
    int norm = mp_lua_opt_enum(L, 1, fn, "normalize_activations", MP_SAE_NORM_NONE, norm_names);
    int apply = mp_lua_opt_bool(L, 1, fn, "apply_b_dec_to_input", 1);
    const char *hook = mp_lua_opt_str(L, 1, fn, "hook_name", "");
    const char *model = mp_lua_opt_str(L, 1, fn, "model_name", "");
    int layer = (int)mp_lua_opt_int(L, 1, fn, "hook_layer", -1, -1, 1 << 20);
    if (strlen(hook) >= sizeof ((mp_sae *)0)->hook_name) return luaL_error(L, "%s: option 'hook_name' is too long", fn);
    if (strlen(model) >= sizeof ((mp_sae *)0)->model_name)
        return luaL_error(L, "%s: option 'model_name' is too long", fn);
    mp_sae *s;
    mp_status st = mp_sae_new(&s, (mp_sae_arch)arch, d_in, d_sae, k);
    if (st) return mp_lua_fail(L, st);
    s->normalize = (mp_sae_norm)norm;
    s->apply_b_dec_to_input = apply;
    strcpy(s->hook_name, hook);
    strcpy(s->model_name, model);
    s->hook_layer = layer;
    mp_lua_sae_push(L, s);
    return 1;
}

/* The rows of x [..., n] as (N, leading shape): checks the last extent. */
static int rows_of(lua_State *L, const mp_tensor *x, int n, const char *fn, const char *what) {
    char sh[64];
    mp_tensor_shape_str(x->ndim, x->shape, sh, sizeof sh);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != n)
        luaL_error(L, "%s: %s must have last dim %d, got shape %s", fn, what, n, sh);
    size_t N = x->numel / (size_t)n;
    if (N > (size_t)(1 << 30)) luaL_error(L, "%s: %s has too many rows (%zu)", fn, what, N);
    return (int)N;
}

/* A new Tensor of x's shape with the last extent replaced by n. */
static mp_tensor *push_like(lua_State *L, const mp_tensor *x, int64_t n) {
    int64_t shape[MP_MAXDIM];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = n;
    return mp_lua_tensor_new(L, x->ndim, shape);
}

/* sae:encode(x) -> feature activations [..., d_sae] (SAELens's encode). */
static int m_encode(lua_State *L) {
    mp_sae *s = mp_lua_sae_check(L, 1);
    mp_tensor *x = mp_lua_tensor_arg(L, 2);
    int N = rows_of(L, x, s->d_in, "SAE:encode", "x");
    mp_tensor *a = push_like(L, x, s->d_sae);
    mp_status st = mp_sae_encode(s, x->data, N, a->data, NULL);
    if (st) return mp_lua_fail(L, st);
    return 1;
}

/* sae:decode(acts [, x]) -> [..., d_in]; with x (the encoded input) the
 * run-time normalisation of x's rows is undone, as SAELens's decode after its
 * encode does. */
static int m_decode(lua_State *L) {
    mp_sae *s = mp_lua_sae_check(L, 1);
    mp_tensor *a = mp_lua_tensor_arg(L, 2);
    int N = rows_of(L, a, s->d_sae, "SAE:decode", "acts");
    mp_sae_rownorm *rn = NULL;
    if (!lua_isnoneornil(L, 3)) {
        mp_tensor *x = mp_lua_tensor_arg(L, 3);
        if (rows_of(L, x, s->d_in, "SAE:decode", "x") != N)
            return luaL_error(L, "SAE:decode: x has %d rows, acts %d", rows_of(L, x, s->d_in, "SAE:decode", "x"), N);
        rn = lua_newuserdatauv(L, (size_t)(N ? N : 1) * sizeof *rn, 0);
        float *tmp = lua_newuserdatauv(L, (size_t)(N ? N : 1) * s->d_in * sizeof(float), 0);
        mp_sae_norm_in(s, x->data, N, tmp, rn);
        lua_pop(L, 1);
    }
    mp_tensor *out = push_like(L, a, s->d_in);
    mp_sae_decode(s, a->data, N, rn, out->data);
    return 1;
}

/* sae:forward(x) -> reconstruction [..., d_in], feature activations [..., d_sae]. */
static int m_forward(lua_State *L) {
    mp_sae *s = mp_lua_sae_check(L, 1);
    mp_tensor *x = mp_lua_tensor_arg(L, 2);
    int N = rows_of(L, x, s->d_in, "SAE:forward", "x");
    mp_tensor *out = push_like(L, x, s->d_in);
    mp_tensor *a = push_like(L, x, s->d_sae);
    mp_status st = mp_sae_forward(s, x->data, N, out->data, a->data);
    if (st) return mp_lua_fail(L, st);
    return 2;
}

static int m_close(lua_State *L) {
    lsae *u = luaL_checkudata(L, 1, MP_SAE_MT);
    sae_close(u);
    return 0;
}

static int mt_gc(lua_State *L) {
    lsae *u = luaL_checkudata(L, 1, MP_SAE_MT);
    sae_close(u); /* idempotent */
    return 0;
}

static int mt_tostring(lua_State *L) {
    lsae *u = luaL_checkudata(L, 1, MP_SAE_MT);
    if (!u->s) {
        lua_pushstring(L, "mechprobe.SAE (closed)");
        return 1;
    }
    const mp_sae *s = u->s;
    if (s->arch == MP_SAE_TOPK)
        lua_pushfstring(L, "mechprobe.SAE(topk, k=%d, d_in=%d, d_sae=%d%s%s)", s->k, s->d_in, s->d_sae,
                        *s->hook_name ? ", hook_name=" : "", s->hook_name);
    else
        lua_pushfstring(L, "mechprobe.SAE(%s, d_in=%d, d_sae=%d%s%s)", mp_sae_arch_name(s->arch), s->d_in, s->d_sae,
                        *s->hook_name ? ", hook_name=" : "", s->hook_name);
    return 1;
}

/* sae.cfg: a new table of the settings, SAELens's names. */
static void push_cfg(lua_State *L, const mp_sae *s) {
    lua_newtable(L);
    lua_pushstring(L, mp_sae_arch_name(s->arch));
    lua_setfield(L, -2, "architecture");
    lua_pushinteger(L, s->d_in);
    lua_setfield(L, -2, "d_in");
    lua_pushinteger(L, s->d_sae);
    lua_setfield(L, -2, "d_sae");
    if (s->arch == MP_SAE_TOPK) {
        lua_pushinteger(L, s->k);
        lua_setfield(L, -2, "k");
    }
    lua_pushboolean(L, s->apply_b_dec_to_input);
    lua_setfield(L, -2, "apply_b_dec_to_input");
    lua_pushstring(L, mp_sae_norm_name(s->normalize));
    lua_setfield(L, -2, "normalize_activations");
    lua_pushstring(L, s->reshape_hook_z ? "hook_z" : "none");
    lua_setfield(L, -2, "reshape_activations");
    if (*s->hook_name) {
        lua_pushstring(L, s->hook_name);
        lua_setfield(L, -2, "hook_name");
    }
    if (s->hook_layer >= 0) {
        lua_pushinteger(L, s->hook_layer);
        lua_setfield(L, -2, "hook_layer");
    }
    if (*s->model_name) {
        lua_pushstring(L, s->model_name);
        lua_setfield(L, -2, "model_name");
    }
}

static const luaL_Reg methods[] = {
    {"encode", m_encode}, {"decode", m_decode}, {"forward", m_forward}, {"close", m_close}, {NULL, NULL},
};

/* __index: methods, then cfg / the weights (views on the SAE's memory, which
 * keep the handle alive and die with close). */
static int mt_index(lua_State *L) {
    lsae *u = luaL_checkudata(L, 1, MP_SAE_MT);
    const char *k = luaL_checkstring(L, 2);
    if (lua_getfield(L, lua_upvalueindex(1), k) != LUA_TNIL) return 1; /* a method */
    lua_pop(L, 1);
    if (!u->s) return luaL_error(L, "SAE is closed");
    if (!strcmp(k, "cfg")) {
        push_cfg(L, u->s);
        return 1;
    }
    for (int i = 0; i < mp_sae_n_weights(u->s); i++) {
        float *data;
        int ndim;
        int64_t shape[2];
        const char *name = mp_sae_weight(u->s, i, &data, &ndim, shape);
        if (strcmp(name, k)) continue;
        if (!u->st) u->st = mp_lua_storage_external(L, u->s->block, u->s->n_floats);
        mp_lua_tensor_on(L, u->st, (size_t)(data - u->s->block), ndim, shape);
        lua_pushvalue(L, 1); /* the view keeps the handle alive */
        lua_setiuservalue(L, -2, 1);
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

void mp_lua_open_sae(lua_State *L) {
    luaL_newmetatable(L, MP_SAE_MT);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "methods"); /* mt.methods: where load/save/splice/train add theirs */
    lua_pushcclosure(L, mt_index, 1);
    lua_setfield(L, -2, "__index");
    static const luaL_Reg meta[] = {{"__gc", mt_gc}, {"__close", mt_gc}, {"__tostring", mt_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_new);
    lua_setfield(L, -2, "new");
    mp_lua_open_sae_train(L); /* lsae_train.c: mp.sae.train, mp.sae.evaluate, sae:evaluate */
    lua_setfield(L, -2, "sae");
    mp_lua_open_sae_view(L);
    mp_lua_open_sae_io(L); /* lsae_io.c: mp.sae.load, sae:save */
    mp_lua_open_sae_splice(L); /* m:add_sae etc. (lsae_splice.c) */
}
