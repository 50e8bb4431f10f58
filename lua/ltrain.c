/* ltrain.c — Lua bindings of the optimizer: mp.optim.adamw{lr=, beta1=,
 * beta2=, eps=, weight_decay=, warmup=, total_steps=, min_lr=, grad_clip=}
 * returns an Optimizer (AdamW as torch.optim.AdamW, runtime/optim.h) whose
 * moments are sized by the first m:train_step that uses it. Fields readable
 * from Lua: lr, beta1, beta2, eps, weight_decay, warmup, total_steps, min_lr,
 * grad_clip, step; opt:lr_at(step) gives the scheduled rate (0-based step). */
#include "mp_lua.h"
#include "optim.h"

#include <string.h>

typedef struct mp_adamw ladamw;

struct mp_adamw *mp_lua_optim_check(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, MP_OPTIM_MT);
}

struct mp_adamw *mp_lua_optim_push(lua_State *L, const struct mp_adamw *state) {
    ladamw *o = lua_newuserdatauv(L, sizeof *o, 0);
    *o = *state;
    luaL_setmetatable(L, MP_OPTIM_MT);
    return o;
}

static float num_opt(lua_State *L, int t, const char *k, float def) {
    float v = def;
    if (lua_getfield(L, t, k) != LUA_TNIL) {
        int ok;
        v = (float)lua_tonumberx(L, -1, &ok);
        if (!ok) luaL_error(L, "mp.optim.adamw: '%s' must be a number", k);
    }
    lua_pop(L, 1);
    return v;
}

/* Reads hyper-parameters from table t over defaults hp (also used by m:train). */
void mp_lua_adamw_params(lua_State *L, int t, void *hpv) {
    mp_adamw_params *hp = hpv;
    hp->lr = num_opt(L, t, "lr", hp->lr);
    hp->beta1 = num_opt(L, t, "beta1", hp->beta1);
    hp->beta2 = num_opt(L, t, "beta2", hp->beta2);
    hp->eps = num_opt(L, t, "eps", hp->eps);
    hp->weight_decay = num_opt(L, t, "weight_decay", hp->weight_decay);
    hp->min_lr = num_opt(L, t, "min_lr", hp->min_lr);
    hp->grad_clip = num_opt(L, t, "grad_clip", hp->grad_clip);
    hp->warmup = (int)num_opt(L, t, "warmup", (float)hp->warmup);
    hp->total_steps = (int)num_opt(L, t, "total_steps", (float)hp->total_steps);
}

static int l_adamw(lua_State *L) {
    mp_adamw st;
    memset(&st, 0, sizeof st);
    st.hp = mp_adamw_params_default();
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        mp_lua_adamw_params(L, 1, &st.hp);
    }
    mp_status s = mp_adamw_params_check(&st.hp);
    if (s) return luaL_error(L, "mp.optim.adamw: %s", mp_last_error());
    mp_lua_optim_push(L, &st);
    return 1;
}

static int opt_gc(lua_State *L) {
    mp_adamw_free(mp_lua_optim_check(L, 1));
    return 0;
}

static int opt_lr_at(lua_State *L) {
    ladamw *o = mp_lua_optim_check(L, 1);
    lua_pushnumber(L, mp_lr_at(&o->hp, (long)luaL_optinteger(L, 2, o->step)));
    return 1;
}

static int opt_index(lua_State *L) {
    ladamw *o = mp_lua_optim_check(L, 1);
    const char *k = luaL_checkstring(L, 2);
    const mp_adamw_params *h = &o->hp;
    struct { const char *k; double v; } f[] = {{"lr", h->lr}, {"beta1", h->beta1}, {"beta2", h->beta2},
                                               {"eps", h->eps}, {"weight_decay", h->weight_decay},
                                               {"min_lr", h->min_lr < 0 ? 0.1 * h->lr : h->min_lr},
                                               {"grad_clip", h->grad_clip}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (strcmp(k, f[i].k) == 0) { lua_pushnumber(L, f[i].v); return 1; }
    if (strcmp(k, "warmup") == 0) { lua_pushinteger(L, h->warmup); return 1; }
    if (strcmp(k, "total_steps") == 0) { lua_pushinteger(L, h->total_steps); return 1; }
    if (strcmp(k, "step") == 0) { lua_pushinteger(L, o->step); return 1; }
    if (strcmp(k, "lr_at") == 0) { lua_pushcfunction(L, opt_lr_at); return 1; }
    return 0;
}

static int opt_tostring(lua_State *L) {
    ladamw *o = mp_lua_optim_check(L, 1);
    lua_pushfstring(L, "Optimizer(adamw lr=%f betas=(%f, %f) eps=%f weight_decay=%f step=%d)", (double)o->hp.lr,
                    (double)o->hp.beta1, (double)o->hp.beta2, (double)o->hp.eps, (double)o->hp.weight_decay,
                    (int)o->step);
    return 1;
}

void mp_lua_open_train(lua_State *L) {
    luaL_newmetatable(L, MP_OPTIM_MT);
    lua_pushcfunction(L, opt_gc); lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, opt_index); lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, opt_tostring); lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_adamw); lua_setfield(L, -2, "adamw");
    lua_setfield(L, -2, "optim");
}
