/* ltrain.c — training from Lua: the Model's methods train_step, train (with
 * its progress bar and checkpoints) and loss, and the optimizer type
 * mp.optim.adamw{lr=, beta1=,
 * beta2=, eps=, weight_decay=, warmup=, total_steps=, min_lr=, grad_clip=}
 * returns an Optimizer (AdamW as torch.optim.AdamW, runtime/optim.h) whose
 * moments are sized by the first m:train_step that uses it. Fields readable
 * from Lua: lr, beta1, beta2, eps, weight_decay, warmup, total_steps, min_lr,
 * grad_clip, step; opt:lr_at(step) gives the scheduled rate (0-based step).
 *
 * Under mpirun (mpi/mp_mpi.h) train_step and train are data parallel: every
 * rank gets the same global batch, keeps its contiguous share of the rows and
 * the gradients are summed across ranks, so the parameters stay identical;
 * rank 0 alone draws the progress line and writes checkpoints. */
#include "lmodel.h"
#include "checkpoint.h"
#include "mp_mpi.h"
#include "optim.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

static int l_adamw(lua_State *L) {
    mp_adamw st;
    memset(&st, 0, sizeof st);
    st.hp = mp_adamw_params_default();
    if (!lua_isnoneornil(L, 1)) {
        static const char *const known[] = {ADAMW_KEYS, NULL};
        luaL_checktype(L, 1, LUA_TTABLE);
        mp_lua_opt_check(L, 1, "mp.optim.adamw", known);
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

/* This rank's rows of a global batch of B rows under data parallelism
 * (sync != NULL: mp_mpi_grad_sync()); the whole batch otherwise. */
typedef struct {
    const mp_grad_sync *sync;
    int first, rows;
} shard;

static shard shard_of(lua_State *L, int B, int accum, int dp, const char *what) {
    shard s = {dp ? mp_mpi_grad_sync() : NULL, 0, B};
    if (!s.sync) return s;
    int size = mp_mpi_size();
    if (accum < 1 || B % (size * accum) != 0)
        luaL_error(L, "%s: the global batch (%d) must split evenly over the %d ranks and accum (%d) micro-batches "
                      "(a multiple of %d)", what, B, size, accum, size * (accum < 1 ? 1 : accum));
    s.rows = B / size;
    s.first = mp_mpi_rank() * s.rows;
    return s;
}

/* One step with the model's buffers on this rank's shard of tok/tgt [B, T];
 * appends to the loss curve (tokens counted over the global batch). */
static mp_status lm_step(lmodel *lm, mp_adamw *o, const int *tok, const int *tgt, int B, int T, int accum,
                         const mp_hooks *hooks, shard sh, float *loss) {
    double t0 = mp_now();
    const size_t off = (size_t)sh.first * T;
    lm->ws.sync = sh.sync;
    mp_status st = mp_train_step(lm->m, o, &lm->ws, tok + off, tgt + off, sh.rows, T, accum, hooks, loss);
    lm->ws.sync = NULL;
    if (st) return st;
    double wall = (lm->log.n ? lm->log.wall[lm->log.n - 1] : 0.0) + (mp_now() - t0);
    double tokens = (lm->log.n ? lm->log.tokens[lm->log.n - 1] : 0.0) + (double)B * T;
    return mp_train_log_add(&lm->log, (int32_t)o->step, *loss, (float)lm->ws.lr, tokens, wall);
}

/* m:train_step(opt, tokens, targets [, {fwd_hooks=, accum=1, data_parallel=true}]) -> loss, grad_norm */
static int model_train_step(lua_State *L) {
    lua_settop(L, 5);
    lmodel *lm = mp_lua_model_busy(L, 1, "train_step", 1);
    mp_adamw *o = mp_lua_optim_check(L, 2);
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
    shard sh = shard_of(L, B, accum, mp_lua_opt_bool(L, opt, "train_step", "data_parallel", 1), "train_step");
    float loss;
    mp_status st = lm_step(lm, o, gt->ints, gg->ints, B, T, accum, mp_hooks_count(gt->hooks) ? gt->hooks : NULL,
                           sh, &loss);
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

static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) { snprintf(buf, n, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* The progress line: step, bar, loss, tokens/s, ETA. */
static void progress(int tty, int step, int total, float loss, double tps, double eta, double elapsed, int done) {
    char e[32], el[32];
    fmt_time(e, sizeof e, eta);
    fmt_time(el, sizeof el, elapsed);
    if (tty) {
        char bar[31];
        int fill = total ? (int)(30.0 * step / total) : 30;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[30] = '\0';
        fprintf(stderr, "\r%*d/%d [%s] loss %.4f | %.3g tok/s | %s %s\033[K", (int)snprintf(NULL, 0, "%d", total),
                step, total, bar, (double)loss, tps, done ? "took" : "ETA", done ? el : e);
        if (done) fputc('\n', stderr);
    } else {
        fprintf(stderr, "step %d/%d  loss %.4f  %.3g tok/s  %s %s\n", step, total, (double)loss, tps,
                done ? "took" : "ETA", done ? el : e);
    }
    fflush(stderr);
}

/* Calls task:sample(B, T) (or task:eval_sample when eval and present),
 * leaving tokens and targets on the stack. */
static void sample_task(lua_State *L, int task, int B, int T, int eval) {
    if (!eval || lua_getfield(L, task, "eval_sample") == LUA_TNIL) {
        if (eval) lua_pop(L, 1);
        if (lua_getfield(L, task, "sample") == LUA_TNIL) luaL_error(L, "train: the task has no sample(B, T) method");
    }
    lua_pushvalue(L, task);
    lua_pushinteger(L, B);
    lua_pushinteger(L, T);
    lua_call(L, 3, 2);
    if (lua_isnil(L, -1)) luaL_error(L, "train: task:sample(B, T) must return tokens and targets");
}

/* m:train{task=, steps=, batch=8, seq_len=ctx, lr=1e-3, warmup=0, min_lr=0.1 lr,
 *         weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0,
 *         accum=1, optimizer=, eval_every=0, eval_batches=4, checkpoint=PATH,
 *         checkpoint_every=0, progress=true, log_every=, fwd_hooks=, on_step=fn,
 *         data_parallel=true}
 * -> {step=, loss=, lr=, tokens=, time=, eval_step=, eval_loss=, final_loss=, tokens_per_s=}
 * Continues the model's optimizer (from a loaded checkpoint or an earlier
 * train) unless optimizer= or resume=false is given. */
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
    const int B = (int)mp_lua_opt_int(L, 2, "train", "batch", 8, 1, INT_MAX);
    const int T = (int)mp_lua_opt_int(L, 2, "train", "seq_len", lm->m->cfg.ctx, 1, INT_MAX);
    const int accum = (int)mp_lua_opt_int(L, 2, "train", "accum", 1, 1, INT_MAX);
    const int eval_every = (int)mp_lua_opt_int(L, 2, "train", "eval_every", 0, 0, INT_MAX);
    const int eval_batches = (int)mp_lua_opt_int(L, 2, "train", "eval_batches", 4, 1, INT_MAX);
    const int ck_every = (int)mp_lua_opt_int(L, 2, "train", "checkpoint_every", 0, 0, INT_MAX);
    const int dp = mp_lua_opt_bool(L, 2, "train", "data_parallel", 1), root = mp_mpi_rank() == 0;
    const int show = mp_lua_opt_bool(L, 2, "train", "progress", 1) && root, tty = isatty(2);
    const int log_every = (int)mp_lua_opt_int(L, 2, "train", "log_every", steps >= 20 ? steps / 20 : 1, 1, INT_MAX);
    const char *ckpt = mp_lua_opt_str(L, 2, "train", "checkpoint", NULL); /* stays on the stack */
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
            fresh.hp = mp_adamw_params_default();
            fresh.hp.weight_decay = 0.1f;
            fresh.hp.beta2 = 0.95f;
            fresh.hp.grad_clip = 1.0f;
            fresh.hp.total_steps = steps;
            adamw_params(L, 2, "train", &fresh.hp);
            if (mp_adamw_params_check(&fresh.hp)) return luaL_error(L, "train: %s", mp_last_error());
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
    const int ftbl = mp_lua_add_fwd_hooks(L, 2, gt, T);
    const mp_hooks *hooks = mp_hooks_count(gt->hooks) ? gt->hooks : NULL;
    const size_t first = lm->log.n, first_eval = lm->log.n_eval;
    const double t_start = mp_now();
    const int top = lua_gettop(L);
    float loss = 0.0f;
    for (int i = 1; i <= steps; i++) {
        int b, t;
        sample_task(L, task, B, T, 0);
        read_batch(L, lm->m->cfg.vocab, top + 1, top + 2, gt, gg, &b, &t);
        lua_settop(L, top);
        shard sh = shard_of(L, b, accum, dp, "train");
        if ((st = lm_step(lm, o, gt->ints, gg->ints, b, t, accum, hooks, sh, &loss))) {
            mp_lua_hooks_rethrow(L, ftbl);
            return mp_lua_fail(L, st);
        }
        const int gstep = (int)o->step;
        if (eval_every > 0 && (i % eval_every == 0 || i == steps)) {
            double sum = 0.0;
            for (int e = 0; e < eval_batches; e++) {
                float el;
                sample_task(L, task, B, T, 1);
                read_batch(L, lm->m->cfg.vocab, top + 1, top + 2, gt, gg, &b, &t);
                lua_settop(L, top);
                /* data parallel: each rank its rows, weighted by their counted targets */
                shard sh = shard_of(L, b, 1, dp, "train (evaluation)");
                const size_t off = (size_t)sh.first * t;
                if ((st = mp_model_loss(lm->m, gt->ints + off, gg->ints + off, sh.rows, t, hooks, &el))) {
                    mp_lua_hooks_rethrow(L, ftbl);
                    return mp_lua_fail(L, st);
                }
                if (sh.sync) {
                    double part[2] = {0.0, 0.0};
                    for (size_t k = 0; k < (size_t)sh.rows * t; k++) part[1] += gg->ints[off + k] >= 0;
                    part[0] = (double)el * part[1];
                    if ((st = mp_mpi_sum_f64(part, 2))) return mp_lua_fail(L, st);
                    el = part[1] > 0 ? (float)(part[0] / part[1]) : 0.0f;
                }
                sum += el;
            }
            if ((st = mp_train_log_add_eval(&lm->log, gstep, (float)(sum / (eval_batches > 0 ? eval_batches : 1)))))
                return mp_lua_fail(L, st);
        }
        if (ckpt && root && ck_every > 0 && i % ck_every == 0 && i != steps &&
            (st = mp_checkpoint_save(ckpt, lm->m, o, &lm->log)))
            return mp_lua_fail(L, st);
        if (on_step) {
            if ((st = mp_model_sync(lm->m))) return mp_lua_fail(L, st); /* the callback may read the weights */
            lua_pushvalue(L, on_step);
            lua_pushinteger(L, gstep);
            lua_pushnumber(L, loss);
            lua_call(L, 2, 1);
            int stop = lua_toboolean(L, -1);
            lua_settop(L, top);
            if (stop) break;
        }
        if (show && (tty || i % log_every == 0 || i == steps)) {
            double el = mp_now() - t_start;
            double tps = el > 0 ? (double)i * B * T / el : 0.0;
            progress(tty, i, steps, loss, tps, el / i * (steps - i), el, 0);
        }
    }
    double took = mp_now() - t_start;
    size_t n_run = lm->log.n - first;
    if (show && tty) progress(tty, (int)n_run, steps, loss, took > 0 ? (double)n_run * B * T / took : 0, 0, took, 1);
    if (ckpt && root && (st = mp_checkpoint_save(ckpt, lm->m, o, &lm->log))) return mp_lua_fail(L, st);
    /* result: this run's part of the curve */
    lua_createtable(L, 0, 9);
    const char *keys[] = {"step", "loss", "lr", "tokens", "time"};
    for (int k = 0; k < 5; k++) {
        lua_createtable(L, (int)n_run, 0);
        for (size_t j = 0; j < n_run; j++) {
            size_t at = first + j;
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
    for (size_t j = first_eval; j < lm->log.n_eval; j++) {
        lua_pushinteger(L, lm->log.eval_step[j]);
        lua_rawseti(L, -3, (lua_Integer)(j - first_eval) + 1);
        lua_pushnumber(L, lm->log.eval_loss[j]);
        lua_rawseti(L, -2, (lua_Integer)(j - first_eval) + 1);
    }
    lua_setfield(L, -3, "eval_loss");
    lua_setfield(L, -2, "eval_step");
    lua_pushnumber(L, loss);
    lua_setfield(L, -2, "final_loss");
    lua_pushnumber(L, took > 0 ? (double)n_run * B * T / took : 0.0);
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
    gt->hooks = mp_hooks_new(&lm->m->cfg);
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
