/* omp_env.h — the OpenMP waiting policy every mechprobe program starts with. */
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

#endif
