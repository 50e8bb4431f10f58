/* attn_variants.c — the attention variants (softmax, scalable softmax,
 * 1.5-entmax by sorting, alpha-entmax by bisection, adaptive-scalable entmax):
 * names, per-head parameters and their initial values, the row normalizer
 * used by the forward pass and its backward (see attn_variants.h). */
#include "attn_variants.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double mp_attn_alpha(const mp_config *c) {
    switch (c->attn) {
    case MP_ATTN_ENTMAX15: return 1.5;
    case MP_ATTN_ENTMAX:
    case MP_ATTN_ASENTMAX: return c->attn_alpha > 0.0f ? (double)c->attn_alpha : 1.5;
    default: return 1.0;
    }
}

mp_attn_layer mp_attn_layer_of(const mp_config *c, const mp_params *p, int l) {
    mp_attn_layer a;
    memset(&a, 0, sizeof a);
    a.kind = c->attn;
    a.alpha = mp_attn_alpha(c);
    a.window = mp_config_window(c, l);
    const size_t H = (size_t)c->n_head;
    if (c->attn == MP_ATTN_SSMAX && p->ssmax_s) a.s = p->ssmax_s + (size_t)l * H;
    if (c->attn == MP_ATTN_ASENTMAX && p->as_delta) {
        a.delta = p->as_delta + (size_t)l * H;
        a.beta = p->as_beta + (size_t)l * H;
        a.gamma = p->as_gamma + (size_t)l * H;
    }
    return a;
}

int mp_attn_has_factor(mp_attn_kind k) { return k == MP_ATTN_SSMAX || k == MP_ATTN_ASENTMAX; }

double mp_attn_row_factor(const mp_attn_layer *a, int h, int n) {
    const double ln = n > 1 ? log((double)n) : 0.0;
    if (a->kind == MP_ATTN_SSMAX) return (a->s ? (double)a->s[h] : 1.0) * ln;
    if (a->kind == MP_ATTN_ASENTMAX) {
        if (!a->delta) return 1.0;
        return (double)a->delta[h] + (n > 1 ? (double)a->beta[h] * pow(ln, (double)a->gamma[h]) : 0.0);
    }
    return 1.0;
}

/* 1.5-entmax by sorting: used for entmax15 and for asentmax at alpha 1.5 */
static int uses_sort(const mp_attn_layer *a) {
    return a->kind == MP_ATTN_ENTMAX15 || (a->kind == MP_ATTN_ASENTMAX && a->alpha == 1.5);
}

size_t mp_attn_work_floats(const mp_attn_layer *a, int ncols) { return uses_sort(a) ? (size_t)ncols : 0; }

void mp_attn_params_init(const mp_config *c, mp_params *p) {
    const size_t n = (size_t)c->n_layer * c->n_head;
    if (p->ssmax_s) {
        const float s = c->ctx >= 2 ? (float)(1.0 / log((double)c->ctx)) : 1.0f;
        for (size_t i = 0; i < n; i++) p->ssmax_s[i] = s;
    }
    if (p->as_delta)
        for (size_t i = 0; i < n; i++) {
            p->as_delta[i] = 1.0f;
            p->as_beta[i] = 0.0f;
            p->as_gamma[i] = 1.0f;
        }
}

/* ---- the maps on one vector ---- */

static int cmp_desc(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

void mp_entmax15(float *p, const float *z, int n, float *work) {
    /* X = (z - max) / 2 (alpha - 1 = 1/2); p = [X - tau]_+^2 with tau from the
     * sorted prefix: for the k largest, tau_k = mean_k - sqrt((1 - ss_k) / k)
     * (ss_k: their sum of squared deviations); the support is the largest k
     * with tau_k <= X_(k). Only X > -1 can be in the support (tau >= -1). */
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    if (mx == -INFINITY || isnan(mx)) {
        for (int j = 0; j < n; j++) p[j] = 0.0f;
        return;
    }
    int cnt = 0;
    for (int j = 0; j < n; j++) {
        double x = 0.5 * ((double)z[j] - mx);
        if (x > -1.0) work[cnt++] = (float)x;
    }
    qsort(work, (size_t)cnt, sizeof(float), cmp_desc);
    double sum = 0.0, sumsq = 0.0, tau = -1.0;
    for (int k = 1; k <= cnt; k++) {
        double x = work[k - 1];
        sum += x;
        sumsq += x * x;
        double mean = sum / k, ss = sumsq - sum * mean, d = (1.0 - ss) / k;
        double t = mean - sqrt(d > 0.0 ? d : 0.0);
        if (t <= x) tau = t;
    }
    for (int j = 0; j < n; j++) {
        double x = 0.5 * ((double)z[j] - mx) - tau;
        p[j] = x > 0.0 ? (float)(x * x) : 0.0f;
    }
}

void mp_entmax_bisect(float *p, const float *z, int n, double alpha) {
    /* X = (alpha - 1)(z - max); f(tau) = sum [X - tau]_+^(1/(alpha-1)) - 1 is
     * decreasing, f(-1) >= 0 >= f(-(1/n)^(alpha-1)) (n: keys seen). */
    const double am1 = alpha - 1.0, e = 1.0 / am1;
    float mx = -INFINITY;
    int nf = 0;
    for (int j = 0; j < n; j++) {
        if (z[j] > -INFINITY) nf++;
        mx = z[j] > mx ? z[j] : mx;
    }
    if (!nf || isnan(mx) || mx == INFINITY) {
        for (int j = 0; j < n; j++) p[j] = mx == INFINITY && z[j] == INFINITY ? 1.0f : 0.0f;
        return;
    }
    /* a threshold within 1e-11 moves no weight by more than ~e * 1e-11 */
    double lo = -1.0, hi = -pow(1.0 / nf, am1);
    for (int it = 0; it < 100 && hi - lo > 1e-11; it++) {
        double tau = 0.5 * (lo + hi), f = -1.0;
        for (int j = 0; j < n; j++) {
            double x = am1 * ((double)z[j] - mx) - tau;
            if (x > 0.0) f += e == 2.0 ? x * x : e == 1.0 ? x : pow(x, e);
        }
        if (f >= 0.0) lo = tau;
        else hi = tau;
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        double x = am1 * ((double)z[j] - mx) - lo;
        double v = x > 0.0 ? (e == 2.0 ? x * x : e == 1.0 ? x : pow(x, e)) : 0.0;
        p[j] = (float)v;
        sum += v;
    }
    const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (int j = 0; j < n; j++) p[j] = (float)(p[j] * inv);
}

/* softmax of f * x over n entries in place (f x of -inf entries: masked) */
static void scaled_softmax(float *x, int n, double f) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] == -INFINITY) continue;
        x[j] = (float)(f * x[j]);
        mx = x[j] > mx ? x[j] : mx;
    }
    if (mx == -INFINITY) {
        for (int j = 0; j < n; j++) x[j] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        float v = x[j] == -INFINITY ? 0.0f : expf(x[j] - mx);
        x[j] = v;
        sum += v;
    }
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) x[j] *= inv;
}

void mp_attn_normalize_rows(const mp_attn_layer *a, int h, float *x, int rows, int ncols, int ld, int n0,
                            float *work) {
    for (int i = 0; i < rows; i++) {
        float *row = x + (size_t)i * ld;
        int n = n0 + i < ncols ? n0 + i : ncols;
        if (n < 0) n = 0;
        /* a sliding window: keys before lo are not seen (0); the row is normalized over lo .. n-1 (no variant
         * with a row factor takes a window: mp_config_validate) */
        const int lo = a->window > 0 && n0 + i - a->window > 0 ? (n0 + i - a->window < n ? n0 + i - a->window : n) : 0;
        int nc = ncols;
        if (lo > 0) {
            for (int j = 0; j < lo; j++) row[j] = 0.0f;
            row += lo;
            n -= lo;
            nc -= lo;
        }
        const double f = mp_attn_row_factor(a, h, n0 + i);
        switch (a->kind) {
        case MP_ATTN_SOFTMAX: mp_softmax_rows(row, 1, n, ld); break;
        case MP_ATTN_SSMAX: scaled_softmax(row, n, f); break;
        case MP_ATTN_ASENTMAX:
            for (int j = 0; j < n; j++)
                if (row[j] != -INFINITY) row[j] = (float)(f * row[j]);
            /* fall through */
        default:
            if (uses_sort(a)) mp_entmax15(row, row, n, work);
            else mp_entmax_bisect(row, row, n, a->alpha);
            break;
        }
        for (int j = n; j < nc; j++) row[j] = 0.0f;
    }
}

void mp_attn_normalize_backward(const mp_attn_layer *a, float *d, const float *p, int n) {
    /* d u_j = s_j (d p_j - sum_i s_i d p_i / sum_i s_i), s = p^(2 - alpha) on the support */
    const double alpha = a->alpha, ex = 2.0 - alpha;
    double ss = 0.0, sd = 0.0;
    for (int j = 0; j < n; j++) {
        if (!(p[j] > 0.0f)) continue;
        double s = alpha == 1.0 ? p[j] : alpha == 1.5 ? sqrt((double)p[j]) : pow((double)p[j], ex);
        ss += s;
        sd += s * d[j];
    }
    const double q = ss > 0.0 ? sd / ss : 0.0;
    for (int j = 0; j < n; j++) {
        if (!(p[j] > 0.0f)) {
            d[j] = 0.0f;
            continue;
        }
        double s = alpha == 1.0 ? p[j] : alpha == 1.5 ? sqrt((double)p[j]) : pow((double)p[j], ex);
        d[j] = (float)(s * (d[j] - q));
    }
}

void mp_attn_factor_backward(const mp_attn_layer *a, float *ds, float *ddelta, float *dbeta, float *dgamma,
                             const float *dfac, int B, int H, int T, int n0) {
    if (!mp_attn_has_factor(a->kind)) return;
    for (int h = 0; h < H; h++) {
        double gs = 0.0, gd = 0.0, gb = 0.0, gg = 0.0;
        for (int b = 0; b < B; b++) {
            const float *df = dfac + ((size_t)b * H + h) * T;
            for (int t = 0; t < T; t++) {
                const int n = n0 + t;
                const double ln = n > 1 ? log((double)n) : 0.0, g = df[t];
                if (a->kind == MP_ATTN_SSMAX) {
                    gs += g * ln;
                } else {
                    gd += g;
                    if (n > 1) {
                        double lg = pow(ln, (double)a->gamma[h]);
                        gb += g * lg;
                        gg += g * (double)a->beta[h] * lg * log(ln);
                    }
                }
            }
        }
        if (a->kind == MP_ATTN_SSMAX) {
            if (ds) ds[h] += (float)gs;
        } else {
            if (ddelta) ddelta[h] += (float)gd;
            if (dbeta) dbeta[h] += (float)gb;
            if (dgamma) dgamma[h] += (float)gg;
        }
    }
}
