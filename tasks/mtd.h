/* mtd.h — Mixture of Transition Distributions (MTD) sequences with their ground
 * truth, for the mirror-descent / in-context estimation experiments.
 *
 * Model. Vocabulary {0..q-1}, m lags. The task owns one fixed q x q transition
 * matrix pi* whose rows are drawn i.i.d. from Dirichlet(c * 1_q) with the task
 * seed. Each sequence draws its own mixture weights lambda ~ Dirichlet(1_m);
 * its first m tokens y_0..y_{m-1} are uniform, then for t >= m
 *
 *     y_t ~ sum_{g=1..m} lambda_g * pi*(y_{t-g}, .)
 *
 * (sampled as: lag g ~ Categorical(lambda), then y_t ~ pi*(y_{t-g}, .)).
 *
 * Indexing convention (positions are 0-based, as in tokens[b*T + t]):
 *   tokens[t]   = y_t, t = 0..T-1; one more token y_T is drawn and used only as
 *                 the target of the last position.
 *   next[t][v]  = P(y_{t+1} = v | y_0..y_t), the true next-token distribution AT
 *                 position t (what a model's logits at t should predict):
 *                   t <  m-1 : 1/q (y_{t+1} is one of the uniform start tokens)
 *                   t >= m-1 : sum_g lambda_g pi*(y_{t+1-g}, v)
 *   targets[t]  = y_{t+1} (next-token training), or -1 (ignored):
 *     MP_MTD_TARGET_ALL  : positions t = m-1 .. T-1 (every position whose next
 *                          token is MTD-generated); t < m-1 get -1
 *     MP_MTD_TARGET_LAST : only t = T-1
 * A batch needs T >= m. Every draw goes through the task's seeded MT19937
 * stream: the same params (seed) give the same pi* and the same batches.
 * A task object is not thread-safe (it owns its random stream). */
#ifndef MP_MTD_H
#define MP_MTD_H

#include <stdint.h>

#include "mp_common.h"

typedef enum { MP_MTD_TARGET_ALL = 0, MP_MTD_TARGET_LAST } mp_mtd_target;

typedef struct {
    int q;                /* vocabulary size, 2..4096 */
    int m;                /* number of lags, 1..1024 */
    double c;             /* Dirichlet concentration of pi*'s rows, > 0 */
    mp_mtd_target target; /* which positions carry a target */
    uint64_t seed;        /* draws pi* (stream 0) and seeds the batch stream (stream 1) */
} mp_mtd_params;

typedef struct mp_mtd mp_mtd;

/* q = 8, m = 3, c = 1, target ALL, seed 1. */
mp_mtd_params mp_mtd_params_default(void);

/* Validates the params and draws pi*. MP_ERR_ARG names a bad field. */
mp_status mp_mtd_new(mp_mtd **out, const mp_mtd_params *p);
void mp_mtd_free(mp_mtd *t);  /* NULL-safe */

/* Restarts the batch stream from `seed` (pi* is unchanged), e.g. to draw a
 * fixed validation set from the same task. */
void mp_mtd_seed(mp_mtd *t, uint64_t seed);

const mp_mtd_params *mp_mtd_get_params(const mp_mtd *t);
/* pi*, row-major [q, q]: pi[u*q + v] = P(next = v | lagged token = u). */
const double *mp_mtd_pi(const mp_mtd *t);

/* Samples B sequences of T tokens (fresh lambda per sequence, the task's pi*).
 *   tokens, targets : int32 [B, T] (caller-provided)
 *   lambda          : double [B, m] mixture weights, or NULL
 *   next            : double [B, T, q] true next-token distributions, or NULL
 * MP_ERR_ARG when B < 1 or T < m, MP_ERR_NOMEM on overflow, MP_ERR_GSL if GSL
 * fails to build a sampling table. */
mp_status mp_mtd_sample(mp_mtd *t, int B, int T, int32_t *tokens, int32_t *targets,
                        double *lambda, double *next);

/* The mixture sum_g lambda[g-1] * pi*(hist[len-g], .) into out[q]: the true
 * distribution of the token following hist[0..len-1] (len >= m). */
void mp_mtd_mixture(const mp_mtd *t, const double *lambda, const int32_t *hist, int len,
                    double *out);

#endif
