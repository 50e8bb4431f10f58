/* relv.c — Shaw's relative values (rel_values, see relv.h): the term
 * sum_j a_ij rel_v[min(i - j, R)] of each head's output in the forward, and
 * its backward into the pattern's gradient and into rel_v's. */
#include "relv.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* the distance class of query position qp and key position kp */
static inline int rel_class(int qp, int kp, int R) {
    const int d = qp - kp;
    return d < 0 ? 0 : d > R ? R : d;
}

void mp_relv_row(const float *rel_v, int R, int Dh, const float *a, int lo, int qi, const int *kpos, float *z) {
    double rest = 0.0; /* the mass of the clipped class R */
    if (!kpos) {
        /* explicit lags 0..R-1 (keys qi..qi-R+1), then every older key */
        for (int k = 0; k < R && qi - k >= lo; k++) {
            const float w = a[qi - k];
            if (w == 0.0f) continue;
            const float *r = rel_v + (size_t)k * Dh;
            for (int e = 0; e < Dh; e++) z[e] += w * r[e];
        }
        for (int j = lo; j <= qi - R; j++) rest += a[j];
    } else {
        for (int j = lo; j <= qi; j++) {
            const float w = a[j];
            if (w == 0.0f) continue;
            const int k = rel_class(kpos[qi], kpos[j], R);
            if (k == R) {
                rest += w;
                continue;
            }
            const float *r = rel_v + (size_t)k * Dh;
            for (int e = 0; e < Dh; e++) z[e] += w * r[e];
        }
    }
    if (rest != 0.0) {
        const float w = (float)rest, *r = rel_v + (size_t)R * Dh;
        for (int e = 0; e < Dh; e++) z[e] += w * r[e];
    }
}

mp_status mp_relv_backward(const mp_config *c, const float *rel_v, float *drel_v, const float *att, const float *dz,
                           float *datt, int B, int T, int window, const int *mask) {
    const int R = c->rel_values, H = c->n_head, Dh = c->d_head, HD = H * Dh;
    /* classes that occur: distances are at most T - 1 */
    const int nk = (R < T - 1 ? R : T - 1) + 1;
    const size_t TT = (size_t)T * T;
    int nthr = 1;
#ifdef _OPENMP
    nthr = omp_get_max_threads();
#endif
    /* per thread: the dots g [nk]; with drel_v the masses [nk] and rel_v's gradient [nk, Dh] in double */
    const size_t nd = drel_v ? (size_t)nk * (1 + (size_t)Dh) : 0;
    float *gw = mp_malloc((size_t)nthr * nk * sizeof(float), "relative values' backward scratch");
    double *dw = nd && gw ? mp_calloc((size_t)nthr * nd, sizeof(double), "relative values' gradient scratch") : NULL;
    int *pos = NULL;
    if (!gw || (nd && !dw)) {
        free(gw);
        return MP_ERR_NOMEM;
    }
    if (mask) {
        if (!(pos = mp_malloc((size_t)B * T * sizeof(int), "positions of a padded batch"))) {
            free(gw);
            free(dw);
            return MP_ERR_NOMEM;
        }
        mp_mask_positions(mask, B, T, pos);
    }
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        float *g = gw + (size_t)t * nk;
        double *mass = dw ? dw + (size_t)t * nd : NULL, *acc = dw ? mass + nk : NULL;
        const int b = bh / H, h = bh % H;
        const int *pb = pos ? pos + (size_t)b * T : NULL;
        for (int i = 0; i < T; i++) {
            const float *dzi = dz + ((size_t)b * T + i) * HD + (size_t)h * Dh;
            const float *ar = att + (size_t)bh * TT + (size_t)i * T;
            float *dr = datt + (size_t)bh * TT + (size_t)i * T;
            const int lo = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
            int top = rel_class(i, lo, R); /* the largest class of the row */
            if (pb) {
                top = 0;
                for (int j = lo; j <= i; j++) {
                    const int k = rel_class(pb[i], pb[j], R);
                    if (k > top) top = k;
                }
            }
            for (int k = 0; k <= top; k++) {
                const float *r = rel_v + (size_t)k * Dh;
                float s = 0.0f;
                for (int e = 0; e < Dh; e++) s += dzi[e] * r[e];
                g[k] = s;
            }
            if (mass)
                for (int k = 0; k <= top; k++) mass[k] = 0.0;
            for (int j = lo; j <= i; j++) {
                const int k = pb ? rel_class(pb[i], pb[j], R) : rel_class(i, j, R);
                dr[j] += g[k];
                if (mass) mass[k] += ar[j];
            }
            if (acc)
                for (int k = 0; k <= top; k++) {
                    if (mass[k] == 0.0) continue;
                    double *ak = acc + (size_t)k * Dh;
                    for (int e = 0; e < Dh; e++) ak[e] += mass[k] * dzi[e];
                }
        }
    }
    if (drel_v)
        for (int t = 0; t < nthr; t++) {
            const double *acc = dw + (size_t)t * nd + nk;
            for (size_t x = 0; x < (size_t)nk * Dh; x++) drel_v[x] += (float)acc[x];
        }
    free(pos);
    free(gw);
    free(dw);
    return MP_OK;
}
