/* bench_analyze.c — benchmark of analyze/ and plots/: PCA (k components with the
 * projections) and stable rank of a seeded random 1,000,000 x 64 cloud, and a
 * 100,000-point scatter coloured by value (viridis, with colorbar) rendered to a
 * PNG. bench/peer_analyze.py runs this program beside numpy/matplotlib doing the
 * same work and prints both times and their ratio.
 *
 *   bench_analyze [--n 1000000] [--d 64] [--k 8] [--points 100000] [--reps 3]
 *                 [--seed 1] [--out DIR] [--width 432] [--height 324] [--dpi 150]
 *
 * The cloud: x_ij = s_j z_ij + m_j with z ~ N(0,1) (gsl ziggurat), s_j = 1/(1+j/4),
 * m_j = 0.5 (so the spectrum is spread and the mean is not zero). Timings are the
 * median of --reps runs, in seconds; output is one key=value per line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "figure.h"
#include "geometry.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    long n = 1000000, d = 64, k = 8, points = 100000, reps = 3, seed = 1;
    double width = 432, height = 324, dpi = 150;
    const char *out = "/tmp";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "bench_analyze: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--n")) n = atol(v);
        else if (!strcmp(a, "--d")) d = atol(v);
        else if (!strcmp(a, "--k")) k = atol(v);
        else if (!strcmp(a, "--points")) points = atol(v);
        else if (!strcmp(a, "--reps")) reps = atol(v);
        else if (!strcmp(a, "--seed")) seed = atol(v);
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--width")) width = atof(v);
        else if (!strcmp(a, "--height")) height = atof(v);
        else if (!strcmp(a, "--dpi")) dpi = atof(v);
        else { fprintf(stderr, "bench_analyze: unknown option %s\n", a); return 2; }
        i++;
    }
    if (n < 2 || d < 1 || k < 1 || k > d || points < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "bench_analyze: bad sizes\n");
        return 2;
    }
    mp_init();
    float *X = malloc((size_t)n * (size_t)d * sizeof *X);
    float *px = malloc((size_t)points * 3 * sizeof *px);
    double *t = malloc((size_t)reps * sizeof *t);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!X || !px || !t || !rng) { fprintf(stderr, "bench_analyze: out of memory\n"); return 1; }
    gsl_rng_set(rng, (unsigned long)seed);
    for (long i = 0; i < n; i++)
        for (long j = 0; j < d; j++)
            X[i * d + j] = (float)(gsl_ran_gaussian_ziggurat(rng, 1.0) / (1.0 + j / 4.0) + 0.5);

    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("n=%ld\nd=%ld\nk=%ld\nthreads=%d\n", n, d, k, threads);

    mp_pca p;
    for (long r = 0; r < reps; r++) {
        double t0 = mp_now();
        if (mp_analyze_pca(X, (size_t)n, (size_t)d, (size_t)k, 1, &p) != MP_OK) {
            fprintf(stderr, "bench_analyze: %s\n", mp_last_error());
            return 1;
        }
        t[r] = mp_now() - t0;
        if (r + 1 < reps) mp_analyze_pca_free(&p);
    }
    printf("pca_s=%.6f\npca_method=%s\npca_ratio1=%.6f\npca_explained1=%.6f\n", median(t, (int)reps),
           p.method == MP_PCA_SVD ? "svd" : "cov", p.ratio[0], p.explained[0]);
    mp_analyze_pca_free(&p);

    mp_spectrum s;
    for (long r = 0; r < reps; r++) {
        double t0 = mp_now();
        if (mp_analyze_spectrum(X, (size_t)n, (size_t)d, &s) != MP_OK) {
            fprintf(stderr, "bench_analyze: %s\n", mp_last_error());
            return 1;
        }
        t[r] = mp_now() - t0;
    }
    printf("srank_s=%.6f\nsrank=%.6f\n", median(t, (int)reps), s.stable_rank);

    /* Scatter: the first two coordinates of the first `points` rows, coloured by the third. */
    for (long i = 0; i < points; i++) {
        px[i] = X[(i % n) * d];
        px[points + i] = X[(i % n) * d + (d > 1)];
        px[2 * points + i] = X[(i % n) * d + (d > 2 ? 2 : 0)];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_scatter.png", out);
    for (long r = 0; r < reps; r++) {
        double t0 = mp_now();
        mp_figure *f;
        mp_scatter_style st = mp_scatter_style_default();
        st.color = px + 2 * points;
        mp_status rc = mp_figure_new(1, 1, NULL, &f);
        mp_axes *ax = rc == MP_OK ? mp_figure_axes(f, 0, 0) : NULL;
        if (rc == MP_OK) rc = mp_axes_scatter(ax, px, px + points, (size_t)points, &st);
        if (rc == MP_OK) rc = mp_figure_save(f, path, width, height, dpi);
        if (rc != MP_OK) { fprintf(stderr, "bench_analyze: %s\n", mp_last_error()); return 1; }
        mp_figure_free(f);
        t[r] = mp_now() - t0;
    }
    printf("scatter_points=%ld\nscatter_s=%.6f\nscatter_png=%s\npng_w=%ld\npng_h=%ld\n", points, median(t, (int)reps), path,
           lround(width * dpi / 72), lround(height * dpi / 72));
    free(X);
    free(px);
    free(t);
    gsl_rng_free(rng);
    return 0;
}
