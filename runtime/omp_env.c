/* omp_env.c — a bounded spin for idle OpenMP threads by default (omp_env.h):
 * sleeping at once (PASSIVE) makes every parallel region of a decode step wait
 * for a futex wake-up, spinning long (libgomp's default) starves a busy
 * neighbour's cores. And the thread count of a decoding step by its work:
 * a tiny model's step is a few microseconds of arithmetic per region, less
 * than the threads' fork and join. */
#include "omp_env.h"

#include <stdlib.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void mp_omp_env_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", MP_GOMP_SPINCOUNT, 1) != 0) return;
    execv("/proc/self/exe", argv); /* on failure, carry on with the default policy */
}

int mp_omp_threads_for(double flops) {
#ifdef _OPENMP
    const int max = omp_get_max_threads();
    const char *env = getenv("OMP_NUM_THREADS");
    if ((env && env[0]) || !(flops >= 0)) return max; /* the user's count wins */
    const double want = flops / MP_OMP_GRAIN;
    if (want >= (double)max) return max;
    return want < 1.0 ? 1 : (int)want;
#else
    (void)flops;
    return 1;
#endif
}

int mp_omp_decode_begin(double flops) {
#ifdef _OPENMP
    const int now = omp_get_max_threads(), n = mp_omp_threads_for(flops);
    if (n >= now) return 0;
    omp_set_num_threads(n);
    return now;
#else
    (void)flops;
    return 0;
#endif
}

void mp_omp_decode_end(int restore) {
#ifdef _OPENMP
    if (restore > 0) omp_set_num_threads(restore);
#else
    (void)restore;
#endif
}
