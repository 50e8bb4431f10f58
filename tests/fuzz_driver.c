/* fuzz_driver.c — a plain-executable driver for the libFuzzer targets
 * (fuzz_gguf.c, fuzz_safetensors.c, fuzz_checkpoint.c) for machines without clang/libFuzzer:
 * a bounded, deterministic mutation loop over seed files (seeded xorshift
 * RNG; bit flips, byte sets, 32/64-bit length-field overwrites with boundary
 * values, truncations, chunk insertions/deletions, structural characters),
 * each mutant passed to LLVMFuzzerTestOneInput in an exact-size heap buffer so
 * AddressSanitizer sees any overread.
 *
 *   fuzz_gguf [-n ITERATIONS] [-s SEED] [-t SECONDS] seed_file...
 *
 * Exits 0 when every input returned (a crash or sanitizer report aborts). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern long fuzz_accepted;   /* defined by the target: inputs its parser accepted */

static uint64_t rs;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

typedef struct { unsigned char *p; size_t n; } seed;

static int read_file(const char *path, seed *s) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    s->p = malloc(n > 0 ? (size_t)n : 1);
    s->n = n > 0 && fread(s->p, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return 0;
}

/* Positions favour the first 2 KiB, where headers, metadata and indices live. */
static size_t pick(size_t n) {
    if (!n) return 0;
    if (rnd() % 4 && n > 2048) return (size_t)(rnd() % 2048);
    return (size_t)(rnd() % n);
}

static const uint64_t BOUNDARY[] = {0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256,
                                    0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffffull, 0x80000000ull, 0xffffffffull,
                                    1ull << 32, 1ull << 40, 1ull << 53, 1ull << 60, 1ull << 62, 1ull << 63,
                                    UINT64_MAX, UINT64_MAX - 7};

static size_t mutate(unsigned char *b, size_t n, size_t cap) {
    int k = 1 + (int)(rnd() % 4);
    for (int m = 0; m < k; m++) {
        size_t pos = pick(n);
        uint64_t v = BOUNDARY[rnd() % (sizeof BOUNDARY / sizeof *BOUNDARY)];
        switch (rnd() % 10) {
        case 0: if (n) b[pos] ^= (unsigned char)(1u << (rnd() % 8)); break;
        case 1: if (n) b[pos] = (unsigned char)((const unsigned char[]){0, 1, 0x7f, 0x80, 0xff, '"', '{', '['}[rnd() % 8]); break;
        case 2: if (n) b[pos] = (unsigned char)rnd(); break;
        case 3: if (pos + 4 <= n) { uint32_t x = (uint32_t)(rnd() % 2 ? v : v + n); memcpy(b + pos, &x, 4); } break;
        case 4: if (pos + 8 <= n) { uint64_t x = rnd() % 3 ? v : (uint64_t)n - v; memcpy(b + pos, &x, 8); } break;
        case 5: if (n >= 8) { size_t p8 = pick(n / 8) * 8; if (p8 + 8 <= n) memcpy(b + p8, &v, 8); } break;
        case 6: n = n ? (size_t)(rnd() % n) : 0; break;                       /* truncate */
        case 7: if (n && n < cap) {                                          /* insert a copy of a chunk */
                    size_t len = 1 + (size_t)(rnd() % 16), src = pick(n);
                    if (len > cap - n) len = cap - n;
                    if (src + len > n) len = n - src;
                    memmove(b + pos + len, b + pos, n - pos);
                    memmove(b + pos, b + src + (src >= pos ? len : 0), len);
                    n += len;
                } break;
        case 8: if (n) { size_t len = 1 + (size_t)(rnd() % 16); if (pos + len > n) len = n - pos;   /* delete */
                    memmove(b + pos, b + pos + len, n - pos - len); n -= len; } break;
        case 9: if (n) b[pos] = (unsigned char)("{}[]\",:0123456789-.eE\\u \n"[rnd() % 26]); break;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    long iters = 20000;
    double limit = 0;
    uint64_t seed_value = 20240605;
    seed *seeds = calloc((size_t)argc, sizeof *seeds);
    int ns = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) seed_value = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) limit = atof(argv[++i]);
        else if (read_file(argv[i], &seeds[ns]) == 0) ns++;
        else { fprintf(stderr, "%s: cannot read seed file %s\n", argv[0], argv[i]); return 2; }
    }
    if (!ns) { fprintf(stderr, "usage: %s [-n N] [-s SEED] [-t SECONDS] seed_file...\n", argv[0]); return 2; }
    rs = seed_value ? seed_value : 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t cap = 0;
    for (int i = 0; i < ns; i++) if (seeds[i].n + 4096 > cap) cap = seeds[i].n + 4096;
    unsigned char *work = malloc(cap);
    long done = 0;
    for (int i = 0; i < ns; i++) {           /* the seeds themselves first */
        unsigned char *exact = malloc(seeds[i].n ? seeds[i].n : 1);
        memcpy(exact, seeds[i].p, seeds[i].n);
        LLVMFuzzerTestOneInput(exact, seeds[i].n);
        free(exact);
    }
    for (; done < iters; done++) {
        const seed *s = &seeds[done % ns];
        memcpy(work, s->p, s->n);
        size_t n = mutate(work, s->n, cap);
        unsigned char *exact = malloc(n ? n : 1);
        memcpy(exact, work, n);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        if (limit > 0 && done % 16 == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > limit) { done++; break; }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %ld mutated inputs from %d seed(s) (%ld accepted by the parser) in %.2f s, no crash\n",
           argv[0], done, ns, fuzz_accepted,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    for (int i = 0; i < ns; i++) free(seeds[i].p);
    free(seeds);
    free(work);
    return 0;
}
