/* test_sample.c — nucleus (top-p) sampling: the token is always inside the
 * nucleus computed here independently (a plain descending sort of the
 * probabilities), and samplers running on several threads at once give exactly
 * the tokens they give one at a time (the sort context is per call, not a
 * global that threads overwrite). */
#include "model.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum { V = 512, STEPS = 3000, NS = 4 };

/* logits of sampler k at step i: a fixed pseudo-random table per (k, i) */
static void fill_logits(float *x, int k, int i) {
    uint32_t h = 2166136261u ^ (uint32_t)(k * 7919 + i * 104729);
    for (int j = 0; j < V; j++) {
        h = h * 1664525u + 1013904223u;
        x[j] = 4.0f * (float)(h >> 8) / (float)(1u << 24);
    }
}

/* 1 when token t lies in the smallest prefix (by descending probability) whose
 * mass reaches top_p, counting ties at the boundary as inside */
static int in_nucleus(const float *logits, float temp, float top_p, int t) {
    double p[V], sorted[V], mx = logits[0], sum = 0;
    for (int j = 1; j < V; j++) if (logits[j] > mx) mx = logits[j];
    for (int j = 0; j < V; j++) sum += p[j] = exp((logits[j] - mx) / temp);
    for (int j = 0; j < V; j++) sorted[j] = p[j] /= sum;
    for (int a = 1; a < V; a++) /* insertion sort, descending */
        for (int b = a; b > 0 && sorted[b] > sorted[b - 1]; b--) { double s = sorted[b]; sorted[b] = sorted[b - 1]; sorted[b - 1] = s; }
    double mass = 0, last = sorted[V - 1];
    for (int j = 0; j < V; j++) {
        mass += sorted[j];
        if (mass >= top_p) { last = sorted[j]; break; }
    }
    return p[t] >= last * (1 - 1e-5);
}

static void run(int k, int *out) {
    mp_sampler_params sp = {.temperature = 0.8f, .top_p = 0.9f, .seed = 100 + (uint64_t)k};
    mp_sampler *s = NULL;
    float x[V];
    if (mp_sampler_new(&s, &sp, V) != MP_OK) { out[0] = -1; return; }
    for (int i = 0; i < STEPS; i++) {
        fill_logits(x, k, i);
        out[i] = mp_sampler_sample(s, x);
    }
    mp_sampler_free(s);
}

int main(void) {
    mp_init();
    static int serial[NS][STEPS], par[NS][STEPS];
    for (int k = 0; k < NS; k++) run(k, serial[k]);
    int outside = 0;
    float x[V];
    for (int i = 0; i < 200; i++) {
        fill_logits(x, 0, i);
        outside += !in_nucleus(x, 0.8f, 0.9f, serial[0][i]);
    }
    CHECK(outside == 0, "%d of 200 tokens outside the reference nucleus", outside);
#pragma omp parallel for num_threads(NS) schedule(static, 1)
    for (int k = 0; k < NS; k++) run(k, par[k]);
    int differ = 0;
    for (int k = 0; k < NS; k++)
        for (int i = 0; i < STEPS; i++) differ += serial[k][i] != par[k][i];
    CHECK(differ == 0, "%d of %d tokens differ when %d samplers run at once", differ, NS * STEPS, NS);
    return tu_finish("test_sample");
}
