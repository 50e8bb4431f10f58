/* task_rng.h — seeded random streams for the synthetic task generators.
 *
 * Every random draw of tasks/ goes through a gsl_rng of type gsl_rng_mt19937
 * made here. A generator derives independent streams from one user seed (e.g.
 * stream 0 draws a task's fixed parameters, stream 1 its batches) by hashing
 * (seed, stream) with splitmix64 into MT19937's 32-bit seed, so the same seed
 * always gives the same bytes and different streams do not share a sequence. */
#ifndef MP_TASK_RNG_H
#define MP_TASK_RNG_H

#include <stdint.h>
#include <gsl/gsl_rng.h>

#include "mp_common.h"

/* A new gsl_rng_mt19937 seeded from (seed, stream); NULL with an MP_ERR_NOMEM
 * message naming `what` on failure. Free with gsl_rng_free. */
gsl_rng *mp_task_rng_new(uint64_t seed, uint64_t stream, const char *what);

/* Re-seeds an existing generator from (seed, stream), as mp_task_rng_new does. */
void mp_task_rng_seed(gsl_rng *r, uint64_t seed, uint64_t stream);

#endif
