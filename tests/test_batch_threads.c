/* test_batch_threads.c — the thread count of decoding steps by their work
 * (runtime/omp_env.h): without OMP_NUM_THREADS a step of F floating-point
 * operations gets floor(F / MP_OMP_GRAIN) threads, at least 1 and at most the
 * default count; with OMP_NUM_THREADS set the default count whatever the work
 * (the user's setting wins); mp_omp_decode_begin lowers the calling thread's
 * count for a small step and mp_omp_decode_end restores it, and a large step
 * leaves it alone. */
#include "omp_env.h"
#include "testutil.h"

#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int main(void) {
#ifndef _OPENMP
    fprintf(stderr, "test_batch_threads: built without OpenMP: skipped\n");
    return 77;
#else
    unsetenv("OMP_NUM_THREADS");
    omp_set_num_threads(4); /* a known default */
    CHECK(mp_omp_threads_for(1e3) == 1, "tiny work: 1 thread, got %d", mp_omp_threads_for(1e3));
    CHECK(mp_omp_threads_for(0.99 * MP_OMP_GRAIN) == 1, "under one grain: 1 thread");
    CHECK(mp_omp_threads_for(3.5 * MP_OMP_GRAIN) == 3, "3.5 grains: 3 threads, got %d",
          mp_omp_threads_for(3.5 * MP_OMP_GRAIN));
    CHECK(mp_omp_threads_for(1e12) == 4, "large work: the default 4, got %d", mp_omp_threads_for(1e12));
    int restore = mp_omp_decode_begin(2.0 * MP_OMP_GRAIN);
    CHECK(restore == 4 && omp_get_max_threads() == 2, "begin: 2 threads (restore %d, now %d)", restore,
          omp_get_max_threads());
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    CHECK(team == 2, "a parallel region in the decoding loop runs 2 threads, got %d", team);
    mp_omp_decode_end(restore);
    CHECK(omp_get_max_threads() == 4, "end restores 4, got %d", omp_get_max_threads());
    restore = mp_omp_decode_begin(1e12);
    CHECK(restore == 0 && omp_get_max_threads() == 4, "large work leaves the count alone");
    mp_omp_decode_end(restore);
    setenv("OMP_NUM_THREADS", "4", 1); /* the user's count */
    CHECK(mp_omp_threads_for(1e3) == 4, "OMP_NUM_THREADS set: the default count for tiny work, got %d",
          mp_omp_threads_for(1e3));
    restore = mp_omp_decode_begin(1e3);
    CHECK(restore == 0 && omp_get_max_threads() == 4, "OMP_NUM_THREADS set: begin changes nothing");
    return tu_finish("test_batch_threads");
#endif
}
