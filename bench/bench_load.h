/* bench_load.h — what bench/peers.sh's measuring programs share (ours,
 * bench_gen.c, and the llama.cpp peer, peer_llama.c, which is built against
 * llama.cpp and so cannot link mechprobe): the wall clock, peak RSS, and the
 * CPU that other processes used during a measurement (/proc/stat busy time
 * minus our own getrusage time, over the wall time, in cores), printed as
 * `key=value` lines; and the fixed random training batch that bench_train and
 * bench_gen (and through its token file, each trainer's peer) use.
 * Header-only: plain C11 + POSIX. */
#ifndef MP_BENCH_LOAD_H
#define MP_BENCH_LOAD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline double bl_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline double bl_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

typedef struct { double wall, busy, own; } bl_probe;

static inline void bl_sample(bl_probe *p) {
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    p->busy = -1;
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) == 8)
            p->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
        fclose(f);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    p->own = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
             1e-6 * (double)ru.ru_stime.tv_usec;
    p->wall = bl_now();
}

/* other cores since a (0 when unknown) */
static inline double bl_other(const bl_probe *a) {
    bl_probe b;
    bl_sample(&b);
    if (a->busy < 0 || b.busy < 0 || b.wall <= a->wall) return 0.0;
    double other = ((b.busy - a->busy) - (b.own - a->own)) / (b.wall - a->wall);
    return other < 0 ? 0.0 : other;
}

static inline int bl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double bl_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bl_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* B sequences of T + 1 pseudo-random ids below vocab (LCG, seed 42) into seq
 * [B, T+1]; tok [B, T] are their first T ids and tgt [B, T] the next ones. */
static inline void bl_fixed_batch(int B, int T, int vocab, int *seq, int *tok, int *tgt) {
    const size_t n = (size_t)B * (T + 1);
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        seq[i] = (int)((s >> 33) % (uint64_t)vocab);
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = seq[b * (T + 1) + t];
            tgt[b * T + t] = seq[b * (T + 1) + t + 1];
        }
}

#endif
