/* geometry.h — point-cloud geometry of activations (rows = points, row-major
 * float [n, d]): PCA, stable rank and the first-singular-value share, and the
 * separation of two clouds (queries vs keys): cosine of the means, centroid
 * distance over spread, Fisher linear discriminant.
 *
 * All functions are pure (no global state), never keep the caller's pointers,
 * accumulate in double and return mp_status (MP_ERR_ARG for bad shapes or
 * non-finite input, MP_ERR_NOMEM, MP_ERR_GSL) with a message naming the problem.
 * Call mp_init() first (it turns GSL's abort-on-error handler off). */
#ifndef MP_ANALYZE_GEOMETRY_H
#define MP_ANALYZE_GEOMETRY_H

#include <stddef.h>
#include "mp_common.h"

/* How mp_analyze_pca decomposed the cloud. */
typedef enum {
    MP_PCA_SVD = 0, /* one-sided Jacobi SVD of the centred cloud (small n: exact to rounding) */
    MP_PCA_COV = 1  /* eigen-decomposition of the d x d covariance (large n: one BLAS pass) */
} mp_pca_method;

/* Above this many rows mp_analyze_pca uses the covariance path. The covariance
 * is accumulated in double with dsyrk over blocks of centred rows (two passes over
 * X, O(n d^2) flops, O(d^2) memory), then gsl_eigen_symmv: for 1,000,000 x 64 this
 * is one BLAS-3 pass instead of an SVD of a 1e6 x 64 matrix. Squaring the condition
 * number only matters for eigenvalues below ~1e-12 of the largest, irrelevant here. */
#define MP_PCA_SVD_MAX_ROWS 4096

typedef struct {
    size_t n, d, k;      /* points, dimension, components kept */
    mp_pca_method method;
    float *mean;         /* [d] centroid */
    float *components;   /* [k, d] unit principal directions, by decreasing variance; sign
                          * fixed so that each row's largest-|.| entry is positive */
    double *explained;   /* [k] variance along each component (denominator n - 1) */
    double *ratio;       /* [k] explained / total variance */
    double total_var;    /* trace of the covariance (denominator n - 1) */
    float *proj;         /* [n, k] (X - mean) . components^T, or NULL if not asked for */
} mp_pca;

/* PCA of X [n, d] keeping k components (1 <= k <= d; clamped to n when n < d).
 * want_proj != 0 also fills proj. On success *out owns its arrays: free them with
 * mp_analyze_pca_free (also safe on a zeroed or failed result). */
mp_status mp_analyze_pca(const float *X, size_t n, size_t d, size_t k, int want_proj, mp_pca *out);
void mp_analyze_pca_free(mp_pca *p);

/* Singular-value summary of the UNcentred X [n, d] (as in the stable-rank papers). */
typedef struct {
    double fro2;         /* ||X||_F^2 = sum of sigma_i^2 */
    double sigma1;       /* largest singular value ||X||_2 */
    double stable_rank;  /* ||X||_F^2 / ||X||_2^2, in [1, rank] (0 for X = 0) */
    double sigma1_share; /* sigma_1^2 / sum sigma_i^2 = 1 / stable_rank (0 for X = 0) */
} mp_spectrum;

/* Computes the spectrum from the Gram matrix of the smaller side (d x d when
 * n >= d, else n x n) accumulated in double with dsyrk, and its largest eigenvalue
 * (gsl_eigen_symm). Time O(n d min(n,d) + min(n,d)^3), memory O(min(n,d)^2). */
mp_status mp_analyze_spectrum(const float *X, size_t n, size_t d, mp_spectrum *out);

typedef struct {
    double ridge_rel;    /* ridge added to Sw: ridge_rel * trace(Sw) / d (default 1e-4) */
} mp_separation_params;
mp_separation_params mp_analyze_separation_params_default(void);

typedef struct {
    double cos_means;        /* cos(mean(A), mean(B)) (0 if a mean is 0) */
    double centroid_dist;    /* ||mean(A) - mean(B)|| */
    double spread;           /* pooled RMS distance of points to their own centroid:
                              * sqrt((sum_A ||a-muA||^2 + sum_B ||b-muB||^2) / (nA + nB)) */
    double dist_over_spread; /* centroid_dist / spread (inf if spread is 0 and dist > 0) */
    double fisher_j;         /* (w.(muA-muB))^2 / (w^T Sw w), Sw = pooled within-class
                              * covariance (S_A + S_B) / (nA + nB - 2), w = (Sw + ridge I)^-1 (muA-muB):
                              * the squared Mahalanobis distance of the centroids when ridge -> 0 */
    double fisher_acc;       /* fraction of A and B points on their own side of the midpoint
                              * threshold w.(muA+muB)/2 along w (equal-prior LDA rule) */
    double ridge;            /* absolute ridge used */
} mp_separation;

/* Separation of clouds A [na, d] and B [nb, d] (na, nb >= 2). */
mp_status mp_analyze_separation(const float *A, size_t na, const float *B, size_t nb, size_t d,
                                const mp_separation_params *p, mp_separation *out);

#endif
