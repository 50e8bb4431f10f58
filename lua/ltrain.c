/* ltrain.c — training from Lua: the Model's methods train_step, train (with
 * its progress bar and checkpoints) and loss, and the optimizer type
 * mp.optim.adamw{lr=, beta1=,
 * beta2=, eps=, weight_decay=, warmup=, total_steps=, min_lr=, grad_clip=}
 * returns an Optimizer (AdamW as torch.optim.AdamW, runtime/optim.h) whose
 * moments are sized by the first m:train_step that uses it. Fields readable
 * from Lua: lr, beta1, beta2, eps, weight_decay, warmup, total_steps, min_lr,
 * grad_clip, step; opt:lr_at(step) gives the scheduled rate (0-based step).
 * With `params = {t1, t2, ...}` (Tensors that require grad, lua/lautograd.c)
 * the same type steps those Tensors instead, as torch.optim does:
 * opt:step() from their .grad (the AdamW update of runtime/optim.h,
 * mp_adamw_step; weight decay on every Tensor, global-norm clipping by
 * grad_clip, the lr schedule) and opt:zero_grad(); mp.optim.sgd{params=, lr=,
 * momentum=, dampening=, weight_decay=, nesterov=} is torch.optim.SGD.
 * opt.steps counts the updates taken (opt.step too, except for an optimizer
 * over script Tensors, where it is the method).
 *
 * m:train is a binding of the C training loop (mpi/trainloop.h: options over
 * mp_train_params_default, the task and on_step as its callbacks) and
 * m:train_step of its logged step. Under mpirun (mpi/mp_mpi.h) both are data
 * parallel: every rank gets the same global batch, keeps its contiguous share
 * of the rows and the gradients are summed across ranks, so the parameters
 * stay identical; rank 0 alone draws the progress line and writes checkpoints. */
#include "lmodel.h"
#include "sae_splice.h"
#include "lautograd.h"
#include "optim.h"
#include "trainloop.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

/* The Optimizer userdata: the mp_adamw first (m:train and m:train_step use
 * it as one), then what an optimizer over script Tensors adds; user value 1:
 * the list of those Tensors. */
enum { OPT_MODEL, OPT_ADAMW, OPT_SGD };
typedef struct {
    mp_adamw a;
    int kind;          /* OPT_MODEL: mp.optim.adamw{} for m:train */
    size_t n;          /* floats over every parameter (moments laid out in the list's order) */
    float momentum, dampening, sgd_wd;
    int nesterov;
} lopt;
typedef struct mp_adamw ladamw;

struct mp_adamw *mp_lua_optim_check(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, MP_OPTIM_MT);
}

struct mp_adamw *mp_lua_optim_push(lua_State *L, const struct mp_adamw *state) {
    lopt *o = lua_newuserdatauv(L, sizeof *o, 1);
    memset(o, 0, sizeof *o);
    o->a = *state;
    luaL_setmetatable(L, MP_OPTIM_MT);
    return &o->a;
}

/* Reads opts.params at t: a non-empty list of Tensors that require grad and
 * are leaves, stored as the Optimizer's (at top) user value; returns their
 * total element count. */
static size_t read_params(lua_State *L, int t, const char *fn) {
    int o = lua_gettop(L);
    if (lua_getfield(L, t, "params") != LUA_TTABLE)
        luaL_error(L, "%s: option 'params' must be a list of Tensors that require grad, got %s", fn,
                   luaL_typename(L, -1));
    int pt = lua_gettop(L);
    lua_Integer np = (lua_Integer)lua_rawlen(L, pt);
    if (np == 0) luaL_error(L, "%s: option 'params' is an empty list", fn);
    lua_createtable(L, (int)np, 0);
    size_t n = 0;
    for (lua_Integer i = 1; i <= np; i++) {
        lua_rawgeti(L, pt, i);
        mp_lua_tensor_ud *u = luaL_testudata(L, -1, MP_TENSOR_MT);
        if (!u) luaL_error(L, "%s: params[%d] is a %s, expected a Tensor", fn, (int)i, luaL_typename(L, -1));
        mp_lua_tensor_check(L, -1);
        if (!u->ag || !mp_ag_is_leaf(u->ag))
            luaL_error(L, "%s: params[%d] %s (call t:requires_grad_() on the parameter)", fn, (int)i,
                       u->ag ? "is the result of an op, not a leaf" : "does not require grad");
        n += u->t.numel;
        lua_rawseti(L, -2, i);
    }
    lua_setiuservalue(L, o, 1);
    lua_settop(L, o);
    return n;
}

#define ADAMW_KEYS "lr", "beta1", "beta2", "eps", "weight_decay", "min_lr", "grad_clip", "warmup", "total_steps"

/* Reads hyper-parameters from table t over defaults hp (also used by m:train, fn). */
static void adamw_params(lua_State *L, int t, const char *fn, mp_adamw_params *hp) {
    hp->lr = (float)mp_lua_opt_num(L, t, fn, "lr", hp->lr);
    hp->beta1 = (float)mp_lua_opt_num(L, t, fn, "beta1", hp->beta1);
    hp->beta2 = (float)mp_lua_opt_num(L, t, fn, "beta2", hp->beta2);
    hp->eps = (float)mp_lua_opt_num(L, t, fn, "eps", hp->eps);
    hp->weight_decay = (float)mp_lua_opt_num(L, t, fn, "weight_decay", hp->weight_decay);
    hp->min_lr = (float)mp_lua_opt_num(L, t, fn, "min_lr", hp->min_lr);
    hp->grad_clip = (float)mp_lua_opt_num(L, t, fn, "grad_clip", hp->grad_clip);
    hp->warmup = (int)mp_lua_opt_int(L, t, fn, "warmup", hp->warmup, 0, INT_MAX);
    hp->total_steps = (int)mp_lua_opt_int(L, t, fn, "total_steps", hp->total_steps, 0, INT_MAX);
}

void mp_lua_adamw_params(lua_State *L, int t, void *hpv) { adamw_params(L, t, "mp.optim.adamw", hpv); }

/* mp.optim.adamw([opts]): with opts.params an optimizer over those Tensors. */
static int l_adamw(lua_State *L) {
    mp_adamw st;
    memset(&st, 0, sizeof st);
    st.hp = mp_adamw_params_default();
    int script = 0;
    if (!lua_isnoneornil(L, 1)) {
        static const char *const known[] = {ADAMW_KEYS, "params", NULL};
        luaL_checktype(L, 1, LUA_TTABLE);
        mp_lua_opt_check(L, 1, "mp.optim.adamw", known);
        mp_lua_adamw_params(L, 1, &st.hp);
        script = mp_lua_opt_get(L, 1, "params") != LUA_TNIL;
        lua_pop(L, 1);
    }
    mp_status s = mp_adamw_params_check(&st.hp);
    if (s) return luaL_error(L, "mp.optim.adamw: %s", mp_last_error());
    lopt *o = (lopt *)mp_lua_optim_push(L, &st);
    if (script) {
        o->kind = OPT_ADAMW;
        o->n = read_params(L, 1, "mp.optim.adamw");
        if (mp_adamw_init(&o->a, &st.hp, o->n)) return mp_lua_fail(L, MP_ERR_NOMEM);
    }
    return 1;
}

/* mp.optim.sgd{params=, lr=, momentum=0, dampening=0, weight_decay=0, nesterov=false}: torch.optim.SGD. */
static int l_sgd(lua_State *L) {
    static const char *const known[] = {"params", "lr", "momentum", "dampening", "weight_decay", "nesterov", NULL};
    const char *fn = "mp.optim.sgd";
    luaL_checktype(L, 1, LUA_TTABLE);
    mp_lua_opt_check(L, 1, fn, known);
    double lr = mp_lua_opt_num(L, 1, fn, "lr", -1), mom = mp_lua_opt_num(L, 1, fn, "momentum", 0);
    double damp = mp_lua_opt_num(L, 1, fn, "dampening", 0), wd = mp_lua_opt_num(L, 1, fn, "weight_decay", 0);
    int nesterov = mp_lua_opt_bool(L, 1, fn, "nesterov", 0);
    if (!(lr >= 0) || !isfinite(lr)) return luaL_error(L, "%s: option 'lr' must be a number >= 0 (it has no default)", fn);
    if (!(mom >= 0) || !isfinite(mom)) return luaL_error(L, "%s: option 'momentum' (%f) must be >= 0", fn, mom);
    if (!(wd >= 0) || !isfinite(wd)) return luaL_error(L, "%s: option 'weight_decay' (%f) must be >= 0", fn, wd);
    if (!isfinite(damp)) return luaL_error(L, "%s: option 'dampening' must be finite", fn);
    if (nesterov && (mom <= 0 || damp != 0))
        return luaL_error(L, "%s: nesterov needs momentum > 0 and dampening 0 (as torch)", fn);
    mp_adamw st;
    memset(&st, 0, sizeof st);
    st.hp = mp_adamw_params_default();
    st.hp.lr = (float)lr;
    st.hp.weight_decay = 0;
    st.hp.grad_clip = 0;
    lopt *o = (lopt *)mp_lua_optim_push(L, &st);
    o->kind = OPT_SGD;
    o->momentum = (float)mom, o->dampening = (float)damp, o->sgd_wd = (float)wd, o->nesterov = nesterov;
    o->n = read_params(L, 1, fn);
    if (mom > 0 && !(o->a.m = mp_calloc(o->n, sizeof(float), "SGD momentum buffers"))) return mp_lua_fail(L, MP_ERR_NOMEM);
    return 1;
}

/* The Optimizer at idx, which must be over script Tensors (fn names the method). */
static lopt *script_opt(lua_State *L, int idx, const char *fn) {
    lopt *o = (lopt *)mp_lua_optim_check(L, idx);
    if (o->kind == OPT_MODEL)
        luaL_error(L, "%s: this Optimizer was made without params (it is for m:train / m:train_step); give "
                      "mp.optim.adamw{params = {...}} the Tensors to step", fn);
    return o;
}

/* opt:step(): one update of every parameter that has a .grad. */
static int opt_step(lua_State *L) {
    lopt *o = script_opt(L, 1, "step");
    lua_getiuservalue(L, 1, 1);
    int pt = lua_gettop(L), np = (int)lua_rawlen(L, pt);
    float coef = 1.0f;
    if (o->kind == OPT_ADAMW && o->a.hp.grad_clip > 0) { /* the global norm of every gradient, as m:train */
        double ss = 0;
        for (int i = 1; i <= np; i++) {
            lua_rawgeti(L, pt, i);
            mp_lua_tensor_ud *u = lua_touserdata(L, -1);
            mp_lua_tensor_check(L, -1);
            const mp_tensor *g = u->ag ? mp_ag_grad(u->ag) : NULL;
            for (size_t e = 0; g && e < g->numel; e++) ss += (double)g->data[e] * g->data[e];
            lua_pop(L, 1);
        }
        double norm = sqrt(ss);
        if (norm > o->a.hp.grad_clip) coef = (float)(o->a.hp.grad_clip / (norm + 1e-6));
    }
    double lr = o->kind == OPT_ADAMW ? mp_lr_at(&o->a.hp, o->a.step) : o->a.hp.lr;
    o->a.step++;
    size_t off = 0;
    for (int i = 1; i <= np; i++) {
        lua_rawgeti(L, pt, i);
        mp_lua_tensor_ud *u = lua_touserdata(L, -1);
        mp_tensor *p = mp_lua_tensor_check(L, -1);
        const mp_tensor *g = u->ag ? mp_ag_grad(u->ag) : NULL;
        if (g && g->numel == p->numel) {
            mp_ag_bump(p->st); /* an in-place update: a graph that saved p refuses its backward */
            if (o->kind == OPT_ADAMW) {
                mp_adamw_step(&o->a.hp, o->a.step, lr, p->data, o->a.m + off, o->a.v + off, g->data, coef, p->numel, 1);
            } else { /* torch.optim.SGD */
                float *buf = o->a.m ? o->a.m + off : NULL;
                for (size_t e = 0; e < p->numel; e++) {
                    float d = g->data[e] + o->sgd_wd * p->data[e];
                    if (buf) {
                        buf[e] = o->a.step == 1 ? d : o->momentum * buf[e] + (1.0f - o->dampening) * d;
                        d = o->nesterov ? d + o->momentum * buf[e] : buf[e];
                    }
                    p->data[e] -= (float)lr * d;
                }
            }
        }
        off += p->numel;
        lua_pop(L, 1);
    }
    return 0;
}

/* opt:zero_grad(): every parameter's .grad cleared (torch's set_to_none). */
static int opt_zero_grad(lua_State *L) {
    script_opt(L, 1, "zero_grad");
    lua_getiuservalue(L, 1, 1);
    int pt = lua_gettop(L), np = (int)lua_rawlen(L, pt);
    for (int i = 1; i <= np; i++) {
        lua_rawgeti(L, pt, i);
        mp_lua_tensor_ud *u = lua_touserdata(L, -1);
        if (u->ag) mp_ag_set_grad(u->ag, NULL);
        lua_pop(L, 1);
    }
    return 0;
}

static int opt_gc(lua_State *L) {
    mp_adamw_free(mp_lua_optim_check(L, 1));
    return 0;
}

static int opt_lr_at(lua_State *L) {
    ladamw *o = mp_lua_optim_check(L, 1);
    lua_pushnumber(L, mp_lr_at(&o->hp, (long)mp_lua_arg_optint(L, 2, "lr_at", "step", o->step, 0, LONG_MAX)));
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
    int script = ((lopt *)o)->kind != OPT_MODEL;
    if (strcmp(k, "step") == 0) {
        if (script) lua_pushcfunction(L, opt_step);
        else lua_pushinteger(L, o->step);
        return 1;
    }
    if (strcmp(k, "steps") == 0) { lua_pushinteger(L, o->step); return 1; }
    if (strcmp(k, "zero_grad") == 0 && script) { lua_pushcfunction(L, opt_zero_grad); return 1; }
    if (strcmp(k, "lr_at") == 0) { lua_pushcfunction(L, opt_lr_at); return 1; }
    return 0;
}

static int opt_tostring(lua_State *L) {
    ladamw *o = mp_lua_optim_check(L, 1);
    const lopt *lo = (const lopt *)o;
    if (lo->kind == OPT_SGD) {
        lua_pushfstring(L, "Optimizer(sgd lr=%f momentum=%f weight_decay=%f step=%d)", (double)o->hp.lr,
                        (double)lo->momentum, (double)lo->sgd_wd, (int)o->step);
        return 1;
    }
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
    lua_pushcfunction(L, l_sgd); lua_setfield(L, -2, "sgd");
    lua_setfield(L, -2, "optim");
}

/* ---- training ---- */

/* Reads tokens and targets (tables or Tensors of the same [B,T] shape) into
 * the guards' buffers. */
static void read_batch(lua_State *L, int vocab, int ti, int gi, guard *gt, guard *gg, int *B, int *T) {
    int B2, T2;
    free(gt->ints);
    free(gg->ints);
    gt->ints = gg->ints = NULL;
    mp_lua_read_tokens(L, ti, gt, B, T, "tokens", vocab, 0);
    mp_lua_read_tokens(L, gi, gg, &B2, &T2, "targets", vocab, 1);
    if (B2 != *B || T2 != *T)
        luaL_error(L, "targets: shape [%d,%d] differs from the tokens' [%d,%d]", B2, T2, *B, *T);
}

/* m:train_step(opt, tokens, targets [, {fwd_hooks=, accum=1, data_parallel=true}]) -> loss, grad_norm */
static int model_train_step(lua_State *L) {
    lua_settop(L, 5);
    lmodel *lm = mp_lua_model_busy(L, 1, "train_step", 1);
    mp_adamw *o = mp_lua_optim_check(L, 2);
    if (((lopt *)o)->kind != OPT_MODEL)
        return luaL_error(L, "train_step: this Optimizer steps script Tensors (made with params); give m:train_step "
                             "one made by mp.optim.adamw{...} without params");
    static const char *const known[] = {"accum", "data_parallel", "fwd_hooks", NULL};
    mp_lua_opt_check(L, 5, "train_step", known);
    int opt = lua_istable(L, 5) ? 5 : 0;
    guard *gt = mp_lua_guard_push(L), *gg = mp_lua_guard_push(L);
    int B, T;
    read_batch(L, lm->m->cfg.vocab, 3, 4, gt, gg, &B, &T);
    gt->hooks = mp_hooks_new(&lm->m->cfg);
    if (!gt->hooks) return luaL_error(L, "out of memory");
    int ftbl = mp_lua_add_fwd_hooks(L, opt, gt, T);
    int accum = (int)mp_lua_opt_int(L, opt, "train_step", "accum", 1, 1, INT_MAX);
    int dp = mp_lua_opt_bool(L, opt, "train_step", "data_parallel", 1);
    float loss;
    mp_status st = mp_train_step_logged(lm->m, o, &lm->ws, &lm->log, gt->ints, gg->ints, B, T, accum,
                                        mp_hooks_count(gt->hooks) ? gt->hooks : NULL, dp, "train_step", &loss);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, 1, 1);
    lua_pushnumber(L, loss);
    lua_pushnumber(L, lm->ws.grad_norm);
    return 2;
}

/* m:train's callbacks into Lua (mpi/trainloop.h's mp_train_data). Each runs
 * its Lua under lua_pcall, so that no Lua error unwinds through the C loop: a
 * failure leaves the error object on top of the stack (err: its index) and
 * the loop returns; model_train raises it unchanged. */
typedef struct {
    lua_State *L;
    int task, on_step; /* absolute stack indices in model_train's frame */
    int vocab, err;
    guard *gt, *gg;
} train_cb;

/* Under lua_pcall with (train_cb, task, eval, B, T): calls task:sample(B, T)
 * (or task:eval_sample when eval and present) and reads the tokens and
 * targets it returns into the guards. */
static int sample_body(lua_State *L) {
    train_cb *c = lua_touserdata(L, 1);
    const int eval = lua_toboolean(L, 3);
    const lua_Integer B = lua_tointeger(L, 4), T = lua_tointeger(L, 5);
    lua_settop(L, 2);
    if (!eval || lua_getfield(L, 2, "eval_sample") == LUA_TNIL) {
        if (eval) lua_pop(L, 1);
        if (lua_getfield(L, 2, "sample") == LUA_TNIL) luaL_error(L, "train: the task has no sample(B, T) method");
    }
    lua_pushvalue(L, 2);
    lua_pushinteger(L, B);
    lua_pushinteger(L, T);
    lua_call(L, 3, 2);
    if (lua_isnil(L, -1)) luaL_error(L, "train: task:sample(B, T) must return tokens and targets");
    int b, t;
    read_batch(L, c->vocab, 3, 4, c->gt, c->gg, &b, &t);
    lua_pushinteger(L, b);
    lua_pushinteger(L, t);
    return 2;
}

static mp_status train_sample(void *user, int eval, int B, int T, const int **tokens, const int **targets, int *b,
                              int *t) {
    train_cb *c = user;
    lua_State *L = c->L;
    if (!lua_checkstack(L, 8)) return mp_error(MP_ERR_NOMEM, "train: out of memory for the Lua stack");
    lua_pushcfunction(L, sample_body);
    lua_pushlightuserdata(L, c);
    lua_pushvalue(L, c->task);
    lua_pushboolean(L, eval);
    lua_pushinteger(L, B);
    lua_pushinteger(L, T);
    if (lua_pcall(L, 5, 2, 0) != LUA_OK) {
        c->err = lua_gettop(L);
        return mp_error(MP_ERR_HOOK, "train: task:sample failed");
    }
    *b = (int)lua_tointeger(L, -2);
    *t = (int)lua_tointeger(L, -1);
    lua_pop(L, 2);
    *tokens = c->gt->ints;
    *targets = c->gg->ints;
    return MP_OK;
}

static mp_status train_on_step(void *user, int step, float loss, int *stop) {
    train_cb *c = user;
    lua_State *L = c->L;
    if (!lua_checkstack(L, 4)) return mp_error(MP_ERR_NOMEM, "train: out of memory for the Lua stack");
    lua_pushvalue(L, c->on_step);
    lua_pushinteger(L, step);
    lua_pushnumber(L, loss);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
        c->err = lua_gettop(L);
        return mp_error(MP_ERR_HOOK, "train: on_step failed");
    }
    *stop = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return MP_OK;
}

/* m:train{task=, steps=, batch=8, seq_len=ctx, lr=1e-3, warmup=0, min_lr=0.1 lr,
 *         weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0,
 *         accum=1, optimizer=, eval_every=0, eval_batches=4, checkpoint=PATH,
 *         checkpoint_every=0, progress=true, log_every=, fwd_hooks=, on_step=fn,
 *         data_parallel=true}
 * -> {step=, loss=, lr=, tokens=, time=, eval_step=, eval_loss=, final_loss=, tokens_per_s=}
 * The options over mp_train_params_default(steps) (mpi/trainloop.h), then
 * mp_train_run with the task and on_step as its callbacks. Continues the
 * model's optimizer (from a loaded checkpoint or an earlier train) unless
 * optimizer= or resume=false is given. */
static int model_train(lua_State *L) {
    lua_settop(L, 2);
    lmodel *lm = mp_lua_model_busy(L, 1, "train", 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const known[] = {"task", "steps", "batch", "seq_len", "accum", "eval_every", "eval_batches",
                                        "checkpoint_every", "data_parallel", "progress", "log_every", "checkpoint",
                                        "optimizer", "resume", "on_step", "fwd_hooks", ADAMW_KEYS, NULL};
    mp_lua_opt_check(L, 2, "train", known);
    if (lua_getfield(L, 2, "task") == LUA_TNIL) return luaL_error(L, "train: option 'task' is required");
    int task = lua_gettop(L);
    if (mp_lua_opt_int(L, 2, "train", "steps", 0, 0, INT_MAX) == 0)
        return luaL_error(L, "train: option 'steps' (a positive integer) is required");
    const int steps = (int)mp_lua_opt_int(L, 2, "train", "steps", 0, 1, INT_MAX);
    mp_train_params tp = mp_train_params_default(steps);
    tp.batch = (int)mp_lua_opt_int(L, 2, "train", "batch", tp.batch, 1, INT_MAX);
    tp.seq_len = (int)mp_lua_opt_int(L, 2, "train", "seq_len", lm->m->cfg.ctx, 1, INT_MAX);
    tp.accum = (int)mp_lua_opt_int(L, 2, "train", "accum", tp.accum, 1, INT_MAX);
    tp.eval_every = (int)mp_lua_opt_int(L, 2, "train", "eval_every", tp.eval_every, 0, INT_MAX);
    tp.eval_batches = (int)mp_lua_opt_int(L, 2, "train", "eval_batches", tp.eval_batches, 1, INT_MAX);
    tp.checkpoint_every = (int)mp_lua_opt_int(L, 2, "train", "checkpoint_every", tp.checkpoint_every, 0, INT_MAX);
    tp.data_parallel = mp_lua_opt_bool(L, 2, "train", "data_parallel", tp.data_parallel);
    tp.progress = mp_lua_opt_bool(L, 2, "train", "progress", tp.progress);
    tp.log_every = (int)mp_lua_opt_int(L, 2, "train", "log_every", tp.log_every, 1, INT_MAX);
    tp.checkpoint = mp_lua_opt_str(L, 2, "train", "checkpoint", NULL); /* stays on the stack */
    /* the optimizer */
    mp_adamw *o = NULL;
    if (lua_getfield(L, 2, "optimizer") != LUA_TNIL) {
        o = mp_lua_optim_check(L, -1);
    } else {
        lua_pop(L, 1);
        lua_getiuservalue(L, 1, 1);
        o = mp_lua_opt_bool(L, 2, "train", "resume", 1) ? luaL_testudata(L, -1, MP_OPTIM_MT) : NULL;
        if (!o) {
            lua_pop(L, 1);
            mp_adamw fresh;
            memset(&fresh, 0, sizeof fresh);
            adamw_params(L, 2, "train", &tp.opt);
            if (mp_adamw_params_check(&tp.opt)) return luaL_error(L, "train: %s", mp_last_error());
            fresh.hp = tp.opt;
            o = mp_lua_optim_push(L, &fresh);
        }
    }
    int oi = lua_gettop(L);
    mp_status st = mp_model_sync(lm->m); /* the optimizer it replaces: its moments */
    if (st) return mp_lua_fail(L, st);
    lua_pushvalue(L, oi);
    lua_setiuservalue(L, 1, 1);
    int on_step = mp_lua_opt_type(L, 2, "train", "on_step", LUA_TFUNCTION) ? lua_gettop(L) : 0;
    guard *gt = mp_lua_guard_push(L), *gg = mp_lua_guard_push(L);
    gt->hooks = mp_hooks_new(&lm->m->cfg);
    if (!gt->hooks) return luaL_error(L, "out of memory");
    const int ftbl = mp_lua_add_fwd_hooks(L, 2, gt, tp.seq_len);
    tp.hooks = mp_hooks_count(gt->hooks) ? gt->hooks : NULL;
    train_cb cb = {L, task, on_step, lm->m->cfg.vocab, 0, gt, gg};
    mp_train_data data = {&cb, train_sample, on_step ? train_on_step : NULL};
    mp_train_result r;
    st = mp_train_run(lm->m, o, &lm->ws, &lm->log, &tp, &data, &r);
    if (cb.err) { /* a Lua error in task:sample or on_step: raised as it was */
        lua_pushvalue(L, cb.err);
        return lua_error(L);
    }
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    /* result: this run's part of the curve */
    lua_createtable(L, 0, 9);
    const char *keys[] = {"step", "loss", "lr", "tokens", "time"};
    for (int k = 0; k < 5; k++) {
        lua_createtable(L, (int)r.n, 0);
        for (size_t j = 0; j < r.n; j++) {
            size_t at = r.first + j;
            switch (k) {
            case 0: lua_pushinteger(L, lm->log.step[at]); break;
            case 1: lua_pushnumber(L, lm->log.loss[at]); break;
            case 2: lua_pushnumber(L, lm->log.lr[at]); break;
            case 3: lua_pushnumber(L, lm->log.tokens[at]); break;
            default: lua_pushnumber(L, lm->log.wall[at]); break;
            }
            lua_rawseti(L, -2, (lua_Integer)j + 1);
        }
        lua_setfield(L, -2, keys[k]);
    }
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 0);
    for (size_t j = 0; j < r.n_eval; j++) {
        lua_pushinteger(L, lm->log.eval_step[r.first_eval + j]);
        lua_rawseti(L, -3, (lua_Integer)j + 1);
        lua_pushnumber(L, lm->log.eval_loss[r.first_eval + j]);
        lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -3, "eval_loss");
    lua_setfield(L, -2, "eval_step");
    lua_pushnumber(L, r.final_loss);
    lua_setfield(L, -2, "final_loss");
    lua_pushnumber(L, r.tokens_per_s);
    lua_setfield(L, -2, "tokens_per_s");
    return 1;
}

/* m:loss(tokens, targets [, {fwd_hooks=, attention_mask=}]) -> mean masked cross-entropy (no update);
 * a padded batch counts its real positions whose next token is real (mp_model_loss_masked) */
static int model_loss(lua_State *L) {
    lua_settop(L, 4);
    lmodel *lm = mp_lua_model_busy(L, 1, "loss", 0);
    static const char *const known[] = {"fwd_hooks", "attention_mask", NULL};
    mp_lua_opt_check(L, 4, "loss", known);
    int opt = lua_istable(L, 4) ? 4 : 0;
    guard *gt = mp_lua_guard_push(L), *gg = mp_lua_guard_push(L);
    int B, T;
    read_batch(L, lm->m->cfg.vocab, 2, 3, gt, gg, &B, &T);
    gt->hooks = mp_hooks_new_model(lm->m); /* with the attached SAEs (sae_splice.h) */
    if (!gt->hooks) return luaL_error(L, "out of memory");
    const int *mask = mp_lua_opt_mask(L, opt, "loss", B, T);
    int ftbl = mp_lua_add_fwd_hooks(L, opt, gt, T);
    float loss;
    const mp_hooks *hk = mp_hooks_count(gt->hooks) ? gt->hooks : NULL;
    mp_status st = mask ? mp_model_loss_masked(lm->m, gt->ints, gg->ints, mask, B, T, hk, &loss)
                        : mp_model_loss(lm->m, gt->ints, gg->ints, B, T, hk, &loss);
    if (st) {
        mp_lua_hooks_rethrow(L, ftbl);
        return mp_lua_fail(L, st);
    }
    lua_pushnumber(L, loss);
    return 1;
}

const luaL_Reg mp_lua_train_methods[] = {
    {"train_step", model_train_step},
    {"train", model_train},
    {"loss", model_loss},
    {NULL, NULL}};
