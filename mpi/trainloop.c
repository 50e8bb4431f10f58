/* trainloop.c — the training loop (see trainloop.h): m:train's loop, moved
 * from lua/ltrain.c into C unchanged in arithmetic (the same steps, schedule,
 * evaluation weighting and loss-curve entries), so that a run from Lua and one
 * from C with the same data give the same bits. */
#include "trainloop.h"

#include "checkpoint.h"
#include "mp_mpi.h"

#include <stdio.h>
#include <unistd.h>

mp_train_params mp_train_params_default(int steps) {
    mp_train_params p = {0};
    p.steps = steps;
    p.batch = 8;
    p.seq_len = 0;
    p.accum = 1;
    p.eval_every = 0;
    p.eval_batches = 4;
    p.checkpoint = NULL;
    p.checkpoint_every = 0;
    p.data_parallel = 1;
    p.progress = 1;
    p.log_every = steps >= 20 ? steps / 20 : 1;
    p.hooks = NULL;
    p.opt = mp_adamw_params_default();
    p.opt.total_steps = steps > 0 ? steps : 0;
    return p;
}

mp_status mp_train_params_check(const mp_train_params *p) {
    struct { const char *k; int v, lo; } f[] = {{"steps", p->steps, 1}, {"batch", p->batch, 1},
                                                 {"seq_len", p->seq_len, 0}, {"accum", p->accum, 1},
                                                 {"eval_every", p->eval_every, 0}, {"eval_batches", p->eval_batches, 1},
                                                 {"checkpoint_every", p->checkpoint_every, 0},
                                                 {"log_every", p->log_every, 1}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo) return mp_error(MP_ERR_ARG, "train: %s (%d) must be >= %d", f[i].k, f[i].v, f[i].lo);
    return mp_adamw_params_check(&p->opt);
}

mp_status mp_train_optim_init(mp_adamw *o, const mp_train_params *p) { return mp_adamw_init(o, &p->opt, 0); }

/* This rank's rows of a global batch of B rows under data parallelism
 * (sync != NULL: mp_mpi_grad_sync()); the whole batch otherwise. */
typedef struct {
    const mp_grad_sync *sync;
    int first, rows;
} shard;

static mp_status shard_of(int B, int accum, int dp, const char *what, shard *s) {
    s->sync = dp ? mp_mpi_grad_sync() : NULL;
    s->first = 0;
    s->rows = B;
    if (!s->sync) return MP_OK;
    int size = mp_mpi_size();
    if (accum < 1 || B % (size * accum) != 0)
        return mp_error(MP_ERR_ARG, "%s: the global batch (%d) must split evenly over the %d ranks and accum (%d) "
                        "micro-batches (a multiple of %d)", what, B, size, accum, size * (accum < 1 ? 1 : accum));
    s->rows = B / size;
    s->first = mp_mpi_rank() * s->rows;
    return MP_OK;
}

/* One step on this rank's shard of tok/tgt [B, T]; appends to the loss curve
 * (tokens counted over the global batch). */
static mp_status step_on(mp_model *m, mp_adamw *o, mp_train_ws *ws, mp_train_log *log, const int *tok, const int *tgt,
                         int B, int T, int accum, const mp_hooks *hooks, shard sh, float *loss) {
    double t0 = mp_now();
    const size_t off = (size_t)sh.first * T;
    ws->sync = sh.sync;
    mp_status st = mp_train_step(m, o, ws, tok + off, tgt + off, sh.rows, T, accum, hooks, loss);
    ws->sync = NULL;
    if (st) return st;
    double wall = (log->n ? log->wall[log->n - 1] : 0.0) + (mp_now() - t0);
    double tokens = (log->n ? log->tokens[log->n - 1] : 0.0) + (double)B * T;
    return mp_train_log_add(log, (int32_t)o->step, *loss, (float)ws->lr, tokens, wall);
}

mp_status mp_train_step_logged(mp_model *m, mp_adamw *opt, mp_train_ws *ws, mp_train_log *log, const int *tokens,
                               const int *targets, int B, int T, int accum, const mp_hooks *hooks, int data_parallel,
                               const char *what, float *loss) {
    shard sh;
    mp_status st = shard_of(B, accum, data_parallel, what, &sh);
    if (st) return st;
    return step_on(m, opt, ws, log, tokens, targets, B, T, accum, hooks, sh, loss);
}

/* The mean loss of p->eval_batches evaluation batches; data parallel: each
 * rank its rows, weighted by their counted targets. */
static mp_status evaluate(mp_model *m, const mp_train_params *p, const mp_train_data *d, int B, int T, float *out) {
    double sum = 0.0;
    for (int e = 0; e < p->eval_batches; e++) {
        const int *tok, *tgt;
        int b, t;
        float el;
        mp_status st = d->sample(d->user, 1, B, T, &tok, &tgt, &b, &t);
        if (st) return st;
        shard sh;
        if ((st = shard_of(b, 1, p->data_parallel, "train (evaluation)", &sh))) return st;
        const size_t off = (size_t)sh.first * t;
        if ((st = mp_model_loss(m, tok + off, tgt + off, sh.rows, t, p->hooks, &el))) return st;
        if (sh.sync) {
            double part[2] = {0.0, 0.0};
            for (size_t k = 0; k < (size_t)sh.rows * t; k++) part[1] += tgt[off + k] >= 0;
            part[0] = (double)el * part[1];
            if ((st = mp_mpi_sum_f64(part, 2))) return st;
            el = part[1] > 0 ? (float)(part[0] / part[1]) : 0.0f;
        }
        sum += el;
    }
    *out = (float)(sum / (p->eval_batches > 0 ? p->eval_batches : 1));
    return MP_OK;
}

mp_status mp_train_run(mp_model *m, mp_adamw *opt, mp_train_ws *ws, mp_train_log *log, const mp_train_params *p,
                       const mp_train_data *d, mp_train_result *r) {
    mp_status st = mp_train_params_check(p);
    if (st) return st;
    if (!d || !d->sample) return mp_error(MP_ERR_ARG, "train: no data source (sample)");
    const int steps = p->steps, B = p->batch, T = p->seq_len > 0 ? p->seq_len : m->cfg.ctx;
    const int root = mp_mpi_rank() == 0, show = p->progress && root, tty = isatty(2);
    const char *ckpt = p->checkpoint && *p->checkpoint ? p->checkpoint : NULL;
    const size_t first = log->n, first_eval = log->n_eval;
    const double t_start = mp_now();
    float loss = 0.0f;
    if (r) {
        r->first = first;
        r->first_eval = first_eval;
        r->n = r->n_eval = 0;
    }
    for (int i = 1; i <= steps && !st; i++) {
        const int *tok, *tgt;
        int b, t;
        if ((st = d->sample(d->user, 0, B, T, &tok, &tgt, &b, &t))) break;
        if ((st = mp_train_step_logged(m, opt, ws, log, tok, tgt, b, t, p->accum, p->hooks, p->data_parallel, "train",
                                       &loss)))
            break;
        const int gstep = (int)opt->step;
        if (p->eval_every > 0 && (i % p->eval_every == 0 || i == steps)) {
            float el;
            if ((st = evaluate(m, p, d, B, T, &el)) || (st = mp_train_log_add_eval(log, gstep, el))) break;
        }
        if (ckpt && root && p->checkpoint_every > 0 && i % p->checkpoint_every == 0 && i != steps &&
            (st = mp_checkpoint_save(ckpt, m, opt, log)))
            break;
        if (d->on_step) {
            int stop = 0;
            if ((st = mp_model_sync(m)) || (st = d->on_step(d->user, gstep, loss, &stop))) break; /* it may read the weights */
            if (stop) break;
        }
        if (show && (tty || i % p->log_every == 0 || i == steps)) {
            double el = mp_now() - t_start;
            double tps = el > 0 ? (double)i * B * T / el : 0.0;
            char met[32];
            snprintf(met, sizeof met, "loss %.4f", (double)loss);
            mp_progress_line(tty, i, steps, met, tps, el / i * (steps - i), el, 0);
        }
    }
    const double took = mp_now() - t_start;
    const size_t n_run = log->n - first;
    if (r) {
        r->n = n_run;
        r->n_eval = log->n_eval - first_eval;
        r->final_loss = loss;
        r->seconds = took;
        r->tokens_per_s = took > 0 ? (double)n_run * B * T / took : 0.0;
    }
    if (st) return st;
    if (show && tty) {
        char met[32];
        snprintf(met, sizeof met, "loss %.4f", (double)loss);
        mp_progress_line(tty, (long)n_run, steps, met, took > 0 ? (double)n_run * B * T / took : 0, 0, took, 1);
    }
    if (ckpt && root && (st = mp_checkpoint_save(ckpt, m, opt, log))) return st;
    return MP_OK;
}
