/* sae_train.h — training sparse autoencoders (runtime/sae.h) as SAELens's
 * trainer does, with hand-written gradients (OpenBLAS products, sparse
 * products where the features are sparse), and the metrics SAELens reports.
 *
 * Loss of a batch of N rows x (SAELens's TrainingSAE.training_forward_pass):
 *   mse  = (1/N) sum_r |out_r - x_r|^2          (summed over d_in, mean over rows)
 *   standard: + l1 = (c/N) sum_r sum_j acts_rj |W_dec_j|   (lp_norm 1, the
 *     decoder-row-norm weighted L1; c warms up linearly from 0 over
 *     l1_warm_up_steps as SAELens's CoefficientScheduler: c_s = l1 min(s, W)/W)
 *   topk: + auxk = scale (1/N) sum_r |aux_r - (x_r - out_r)|^2 (TopKTrainingSAE's
 *     AuxK: aux = decode of the k_aux = min(d_in/2, n_dead) largest
 *     pre-activations among the dead features (no ReLU), the residual detached,
 *     scale = min(n_dead / (d_in/2), 1)).
 * A step: gradients, [normalize_decoder: remove each W_dec row's gradient
 * component parallel to the row], global-norm clipping at grad_clip (SAELens:
 * 1.0), Adam (torch's, no weight decay) at the step's learning rate,
 * [normalize_decoder: W_dec rows back to unit norm]. Dead features: a feature
 * is dead when it has not fired (acts > 0) in the last dead_feature_window
 * steps (SAELens counts steps, not tokens). Learning rate: SAELens's
 * get_lr_scheduler (linear warm-up lr (s+1)/W, then constant or cosine
 * annealing to lr_end, then a linear decay lr_end -> 0 over lr_decay_steps).
 *
 * Only normalize_activations none is trained (the SAE's other run-time norms
 * are MP_ERR_ARG). Data come from a callback, so this layer needs no HDF5:
 * io/sae_data.h streams capture files, mp_sae_live_* below runs a model. */
#ifndef MP_SAE_TRAIN_H
#define MP_SAE_TRAIN_H

#include <stdint.h>

#include "model.h"
#include "optim.h"
#include "sae.h"

/* ---- initialisation (SAELens's TrainingSAE.initialize_weights) ----
 * W_dec [d_sae, d_in] ~ kaiming_uniform (U(-sqrt(6/d_in), sqrt(6/d_in)), GSL
 * mt19937 seeded with seed, row-major draw order), rows rescaled to norm
 * decoder_init_norm when it is > 0 (SAELens's default 0.1), W_enc = W_dec^T,
 * b_enc = b_dec = 0 (threshold, jumprelu: 0). MP_ERR_NOMEM. */
mp_status mp_sae_init_weights(mp_sae *s, uint64_t seed, float decoder_init_norm);

/* ---- one loss and its gradient ----
 * grad has the layout of s->block (W_enc, b_enc, W_dec, b_dec: s->n_floats
 * floats) and is overwritten. dead (d_sae bytes, 1 = dead; NULL: none) feeds
 * AuxK (topk); l1_coefficient: this step's (standard). Outputs: losses[0]
 * mse, [1] l1 (standard) or auxk (topk); *n_active (may be NULL) the number of
 * active (acts > 0) entries of the batch. A workspace serves one SAE shape.
 * MP_ERR_ARG for jumprelu or a normalize_activations other than none. */
typedef struct mp_sae_grad_ws mp_sae_grad_ws;
mp_sae_grad_ws *mp_sae_grad_ws_new(void);
void mp_sae_grad_ws_free(mp_sae_grad_ws *w);
mp_status mp_sae_loss_grad(const mp_sae *s, const float *x, int N, float l1_coefficient, const uint8_t *dead,
                           mp_sae_grad_ws *w, float *grad, double losses[2], int *n_active);

typedef struct {
    float lr;                  /* 3e-4 */
    float adam_beta1, adam_beta2; /* 0.9, 0.999 (SAELens's defaults) */
    int lr_scheduler;          /* 0 constant, 1 cosineannealing */
    int lr_warm_up_steps, lr_decay_steps;
    float lr_end;              /* < 0: lr / 10 (SAELens) */
    float l1_coefficient;      /* standard: 1.0 */
    int l1_warm_up_steps;
    int batch_size;            /* rows per step: 4096 */
    long steps;                /* number of steps (> 0) */
    int dead_feature_window;   /* 1000 steps */
    float grad_clip;           /* 1.0; 0: none */
    int normalize_decoder;     /* 0 (SAELens today); 1: unit-norm W_dec rows */
    int init;                  /* 1: mp_sae_init_weights first; 0: train the weights given */
    uint64_t seed;             /* init's seed: 42 */
    float decoder_init_norm;   /* 0.1; <= 0: leave kaiming's row norms */
    long checkpoint_every;     /* steps between checkpoint callbacks (0: none) */
    int progress;              /* 1: a progress line on stderr (as m:train's) */
} mp_sae_train_params;

mp_sae_train_params mp_sae_train_params_default(void);
/* MP_ERR_ARG naming the first out-of-range field. */
mp_status mp_sae_train_params_check(const mp_sae_train_params *p);
/* The learning rate / the L1 coefficient SAELens's schedulers give step s (0-based). */
double mp_sae_lr_at(const mp_sae_train_params *p, long s);
double mp_sae_l1_at(const mp_sae_train_params *p, long s);

/* Data: fill x [N, d_in] with the next N rows; *got < N (0 included) means the
 * data are exhausted (the rows written are used). Non-zero status aborts. */
typedef mp_status (*mp_sae_next_fn)(void *user, float *x, int N, int *got);
/* Checkpoint: called every checkpoint_every steps and after the last step
 * with the SAE as trained so far. Non-zero status aborts. */
typedef mp_status (*mp_sae_ckpt_fn)(void *user, const mp_sae *s, long step, long tokens);

typedef struct {
    long steps, tokens;        /* done */
    double mse, aux;           /* last step's losses */
    double l0;                 /* last step's mean active features per row */
    double explained_variance; /* last step's (on its batch) */
    int n_dead;                /* dead features (window) at the end */
    double seconds;            /* wall time of the loop */
    double steady_seconds;     /* of the steps after the first (which pays the
                                * first touch of every buffer) */
} mp_sae_train_result;

/* Trains s in place for p->steps steps (fewer when the data end first; a
 * short last batch is dropped). */
mp_status mp_sae_train(mp_sae *s, const mp_sae_train_params *p, mp_sae_next_fn next, void *next_user,
                       mp_sae_ckpt_fn ckpt, void *ckpt_user, mp_sae_train_result *res);

/* ---- a shuffle buffer over any row producer ----
 * produce(user, dst, max_rows, &got) writes up to max_rows rows of d floats;
 * got 0 means exhausted. mp_sae_shuffle_next (an mp_sae_next_fn, user = the
 * shuffler) keeps the pool topped up to `capacity` rows and draws each output
 * row uniformly from it without replacement (GSL mt19937, seed). */
typedef mp_status (*mp_sae_produce_fn)(void *user, float *dst, int max_rows, int *got);
typedef struct mp_sae_shuffler mp_sae_shuffler;
mp_status mp_sae_shuffler_new(mp_sae_shuffler **out, int d, int capacity, uint64_t seed, mp_sae_produce_fn produce,
                              void *user);
void mp_sae_shuffler_free(mp_sae_shuffler *sh);
mp_status mp_sae_shuffle_next(void *shuffler, float *x, int N, int *got);

/* ---- rows in memory: x [n, d], handed out cyclically for ever ----
 * mp_sae_rows_produce is an mp_sae_produce_fn (user = an mp_sae_rows). */
typedef struct {
    const float *x;
    long n, at; /* rows; the next one */
    int d;
} mp_sae_rows;
mp_status mp_sae_rows_produce(void *user, float *dst, int max_rows, int *got);

/* ---- a live source: a model's activations at one hook point ----
 * tokens [S, T] (copied); each produce call runs the model over the next
 * seqs_per_forward sequences (cycling over the S sequences for `epochs`
 * passes, 0: forever) and hands out the hook's rows ([B, T, d] views as rows
 * of d = the SAE's d_in, taken by a reader callback at the point). The point's
 * trailing size must be d (blocks.L.attn.hook_z: n_heads * d_head).
 * mp_sae_live_produce is an mp_sae_produce_fn (user = the source). */
typedef struct mp_sae_live mp_sae_live;
mp_status mp_sae_live_new(mp_sae_live **out, const mp_model *m, const char *hook, int d, const int *tokens, int S,
                          int T, int seqs_per_forward, int epochs);
void mp_sae_live_free(mp_sae_live *lv);
mp_status mp_sae_live_produce(void *live, float *dst, int max_rows, int *got);

/* ---- metrics (SAELens's evals) ----
 * Accumulate batches of x and their reconstructions, then read:
 *   l0 = mean over rows of the number of features > 0;
 *   explained_variance = 1 - sum |x - xhat|^2 / sum |x - mean(x)|^2 (mean over
 *     every row evaluated; sums in double);
 *   mse = sum |x - xhat|^2 / (rows d_in);  dead_fraction = the share of features
 *   that never fired on the rows evaluated. */
typedef struct {
    int d_in, d_sae;
    long rows;
    double sse, l0_sum;
    double *sum, *sumsq;  /* [d_in] */
    uint8_t *fired;       /* [d_sae] */
} mp_sae_metrics_acc;
typedef struct {
    long rows;
    double l0, explained_variance, mse, dead_fraction;
    /* CE loss recovered (mp_sae_evaluate only; NAN otherwise):
     * (ce_zero - ce_sae) / (ce_zero - ce_clean) */
    double ce_clean, ce_sae, ce_zero, ce_loss_recovered;
} mp_sae_metrics;
mp_status mp_sae_metrics_init(mp_sae_metrics_acc *a, int d_in, int d_sae);
void mp_sae_metrics_free(mp_sae_metrics_acc *a);
/* x, xhat [N, d_in], acts [N, d_sae]. */
void mp_sae_metrics_add(mp_sae_metrics_acc *a, const float *x, const float *xhat, const float *acts, int N);
void mp_sae_metrics_get(const mp_sae_metrics_acc *a, mp_sae_metrics *out);
/* The metrics of s over the rows of x [N, d_in] (the CE fields NAN). */
mp_status mp_sae_metrics_rows(const mp_sae *s, const float *x, int N, mp_sae_metrics *out);

/* Every metric on a model: tokens [B, T] run three times through the model
 * (mp_model_loss: next-token cross-entropy) — clean, with the hook's
 * activation replaced by the SAE's output (SAELens's CE with the SAE
 * spliced), and with it replaced by zeros — and the L0 / variance / MSE /
 * dead metrics over the hook's rows of the spliced pass. hook: the SAE's
 * hook_name when NULL or "". */
mp_status mp_sae_evaluate(const mp_sae *s, const mp_model *m, const char *hook, const int *tokens, int B, int T,
                          mp_sae_metrics *out);

#endif
