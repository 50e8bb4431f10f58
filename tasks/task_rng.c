/* task_rng.c — seeded MT19937 streams for tasks/ (see task_rng.h). */
#include "task_rng.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void mp_task_rng_seed(gsl_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t h = splitmix64(splitmix64(seed) ^ (stream * 0xD1B54A32D192ED03ull));
    /* MT19937 takes a 32-bit seed (and maps 0 to its default); fold the hash. */
    unsigned long s = (unsigned long)((h ^ (h >> 32)) & 0xffffffffu);
    gsl_rng_set(r, s ? s : 0x5eed5eedUL);
}

gsl_rng *mp_task_rng_new(uint64_t seed, uint64_t stream, const char *what) {
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) {
        mp_error(MP_ERR_NOMEM, "out of memory allocating the random generator for %s", what);
        return NULL;
    }
    mp_task_rng_seed(r, seed, stream);
    return r;
}
