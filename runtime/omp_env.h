/* omp_env.h — the OpenMP waiting policy every mechprobe program starts with,
 * and the thread count of small work (decoding steps). */
#ifndef MP_OMP_ENV_H
#define MP_OMP_ENV_H

/* Spin count of an idle OpenMP thread before it sleeps, when the user set
 * neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT (measured on 2 cores, 2026-12-02:
 * F32 decode of a d 512, 8-layer model 300 tok/s against 109-130 with
 * OMP_WAIT_POLICY=PASSIVE, Q8_0 910-1400 against 155-167; training 21.3k tok/s
 * against 19.1k quiet, 10.8k against 11.3k beside a busy process, where
 * libgomp's default of 300000 spins fell to 6.2k). */
#define MP_GOMP_SPINCOUNT "1000"

/* Sets GOMP_SPINCOUNT=MP_GOMP_SPINCOUNT and re-executes the program once
 * (/proc/self/exe with argv: libgomp reads its environment when it loads,
 * before main) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is already set. On a
 * failed exec it returns and the program carries on with libgomp's default. */
void mp_omp_env_default(char **argv);

/* Floating-point operations per thread below which another thread costs more
 * (its fork/join at each of a step's ~10 parallel regions per layer) than it
 * saves: a decoding step of `flops` runs on flops / MP_OMP_GRAIN threads (at
 * least 1, at most the default). See the measurements in omp_env.c. */
#define MP_OMP_GRAIN 4.0e6

/* The threads for parallel work of `flops` per step: the default count
 * (omp_get_max_threads) when the user set OMP_NUM_THREADS (an explicit
 * setting wins) or the work is large, fewer for small work; 1 without OpenMP. */
int mp_omp_threads_for(double flops);
/* Sets the calling thread's count for a decoding loop of `flops` per step
 * (mp_omp_threads_for) and returns the count to restore (0: unchanged);
 * mp_omp_decode_end(that) restores it. */
int mp_omp_decode_begin(double flops);
void mp_omp_decode_end(int restore);

#endif
