/* omp_env.c — a bounded spin for idle OpenMP threads by default (omp_env.h):
 * sleeping at once (PASSIVE) makes every parallel region of a decode step wait
 * for a futex wake-up, spinning long (libgomp's default) starves a busy
 * neighbour's cores. */
#include "omp_env.h"

#include <stdlib.h>
#include <unistd.h>

void mp_omp_env_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", MP_GOMP_SPINCOUNT, 1) != 0) return;
    execv("/proc/self/exe", argv); /* on failure, carry on with the default policy */
}
