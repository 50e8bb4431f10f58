/* trainloop.h — the training loop in C (what m:train runs): batches drawn
 * from a data source, optimizer steps (runtime/train.h), the learning-rate
 * schedule of the optimizer (runtime/optim.h), periodic evaluation, the loss
 * curve, checkpoints (io/checkpoint.h), a progress line and a per-step
 * callback; data parallel under mpirun (mpi/mp_mpi.h): every rank draws the
 * same global batch, keeps its contiguous share of the rows, and the gradients
 * are summed over the ranks, so the parameters stay identical; rank 0 alone
 * draws the progress line and writes checkpoints.
 *
 * One function gives the defaults of the whole configuration, optimizer
 * included: mp_train_params_default(steps). Its optimizer part is
 * mp_adamw_params_default() (lr 1e-3, betas (0.9, 0.95), eps 1e-8,
 * weight_decay 0.1, grad_clip 1.0, min_lr 0.1 lr) with the cosine decay over
 * the run (total_steps = steps).
 *
 *   mp_train_params p = mp_train_params_default(200);
 *   p.batch = 16, p.seq_len = 64, p.opt.lr = 3e-3f;
 *   mp_adamw opt = {0};  mp_train_ws ws = {0};  mp_train_log log = {0};
 *   mp_train_optim_init(&opt, &p);
 *   mp_train_data d = {my_state, my_sample, NULL};
 *   mp_train_result r;
 *   st = mp_train_run(model, &opt, &ws, &log, &p, &d, &r);
 *   ... mp_adamw_free(&opt); mp_train_ws_free(&ws); mp_train_log_free(&log); */
#ifndef MP_TRAINLOOP_H
#define MP_TRAINLOOP_H

#include "optim.h"
#include "train.h"

typedef struct {
    int steps;            /* optimizer steps of this run (>= 1) */
    int batch;            /* rows asked of the data source (8) */
    int seq_len;          /* positions asked of it; 0: the model's ctx */
    int accum;            /* micro-batches per step (1) */
    int eval_every;       /* evaluate every N steps and after the last (0: never) */
    int eval_batches;     /* batches per evaluation (4) */
    const char *checkpoint; /* NULL: none; else written every checkpoint_every steps and at the end */
    int checkpoint_every; /* 0: at the end only */
    int data_parallel;    /* under mpirun: each rank its rows of every batch (1) */
    int progress;         /* draw the progress line on stderr (rank 0) (1) */
    int log_every;        /* not a terminal: a line every N steps (steps/20, at least 1) */
    const mp_hooks *hooks; /* forward hooks live during training and evaluation (NULL: none) */
    mp_adamw_params opt;  /* a fresh optimizer's hyper-parameters (mp_train_optim_init) */
} mp_train_params;

/* The defaults of a run of `steps` steps (see the fields; opt as above). */
mp_train_params mp_train_params_default(int steps);
/* MP_ERR_ARG naming the first field out of range (opt included). */
mp_status mp_train_params_check(const mp_train_params *p);
/* A fresh optimizer with p->opt: *o must be zeroed (or initialised) before. */
mp_status mp_train_optim_init(mp_adamw *o, const mp_train_params *p);

/* The data source and the per-step callback. sample: a batch for B rows of
 * T positions (eval != 0: for an evaluation), *tokens and *targets [*b, *t]
 * (owned by the source, valid until its next call; targets -1 are not
 * counted). on_step (may be NULL): after each step with the optimizer's step
 * count and the step's loss, the weights readable on the host; *stop = 1 ends
 * the run there. A non-MP_OK status from either ends the run with it. */
typedef struct {
    void *user;
    mp_status (*sample)(void *user, int eval, int B, int T, const int **tokens, const int **targets, int *b, int *t);
    mp_status (*on_step)(void *user, int step, float loss, int *stop);
} mp_train_data;

/* What a run added to the log (log entries [first, first + n), evaluations
 * [first_eval, first_eval + n_eval)), its last loss, time and throughput
 * (tokens of the steps taken over the run's seconds). */
typedef struct {
    size_t first, n, first_eval, n_eval;
    float final_loss;
    double seconds, tokens_per_s;
} mp_train_result;

/* Runs p->steps steps (fewer when on_step stops it) of opt on m, continuing
 * opt (its schedule position is opt->step), appending to log (wall time
 * cumulative over runs); ws: the step's buffers, reusable across runs. A
 * device model's weights are synced to the host before each on_step
 * (mp_model_sync; call it yourself before reading them afterwards). Errors:
 * the first failing step, sample, on_step, evaluation or checkpoint (the
 * steps before it stay applied and logged). r may be NULL. */
mp_status mp_train_run(mp_model *m, mp_adamw *opt, mp_train_ws *ws, mp_train_log *log, const mp_train_params *p,
                       const mp_train_data *d, mp_train_result *r);

/* One step of the loop on tokens/targets [B, T] (the global batch): under
 * mpirun with data_parallel this rank's rows (B must split evenly over the
 * ranks and accum: MP_ERR_ARG naming `what`), then the loss curve entry.
 * m:train_step is this. */
mp_status mp_train_step_logged(mp_model *m, mp_adamw *opt, mp_train_ws *ws, mp_train_log *log, const int *tokens,
                               const int *targets, int B, int T, int accum, const mp_hooks *hooks, int data_parallel,
                               const char *what, float *loss);

#endif
