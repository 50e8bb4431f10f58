/* sae.c — the SAE's weights and its forward stages (sae.h): SAELens's
 * standard / topk / jumprelu inference SAEs and run-time normalisations,
 * written once for the splice into a model, the bindings and training. */
#include "sae.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

static const char *const arch_names[MP_SAE_ARCH_COUNT] = {"standard", "topk", "jumprelu"};
static const char *const norm_names[MP_SAE_NORM_COUNT] = {"none", "expected_average_only_in",
                                                          "constant_norm_rescale", "layer_norm"};

const char *mp_sae_arch_name(mp_sae_arch a) { return (unsigned)a < MP_SAE_ARCH_COUNT ? arch_names[a] : "?"; }
const char *mp_sae_norm_name(mp_sae_norm n) { return (unsigned)n < MP_SAE_NORM_COUNT ? norm_names[n] : "?"; }

int mp_sae_arch_named(const char *name) {
    for (int i = 0; name && i < MP_SAE_ARCH_COUNT; i++)
        if (!strcmp(name, arch_names[i])) return i;
    return -1;
}

int mp_sae_norm_named(const char *name) {
    for (int i = 0; name && i < MP_SAE_NORM_COUNT; i++)
        if (!strcmp(name, norm_names[i])) return i;
    return -1;
}

mp_status mp_sae_new(mp_sae **out, mp_sae_arch arch, int d_in, int d_sae, int k) {
    *out = NULL;
    if ((unsigned)arch >= MP_SAE_ARCH_COUNT) return mp_error(MP_ERR_ARG, "SAE: unknown architecture %d", (int)arch);
    if (d_in < 1) return mp_error(MP_ERR_ARG, "SAE: d_in must be >= 1, got %d", d_in);
    if (d_sae < 1) return mp_error(MP_ERR_ARG, "SAE: d_sae must be >= 1, got %d", d_sae);
    if (arch == MP_SAE_TOPK && (k < 1 || k > d_sae))
        return mp_error(MP_ERR_ARG, "SAE: topk's k must be in [1, d_sae = %d], got %d", d_sae, k);
    size_t din = (size_t)d_in, dsae = (size_t)d_sae;
    if (din * dsae > (SIZE_MAX / sizeof(float) - 4 * dsae - 2 * din) / 2)
        return mp_error(MP_ERR_NOMEM, "SAE: d_in %d x d_sae %d is too large", d_in, d_sae);
    size_t n = 2 * din * dsae + dsae + din + (arch == MP_SAE_JUMPRELU ? dsae : 0);
    mp_sae *s = mp_calloc(1, sizeof *s, "SAE");
    if (!s) return MP_ERR_NOMEM;
    s->block = mp_calloc(n, sizeof(float), "SAE weights");
    if (!s->block) {
        free(s);
        return MP_ERR_NOMEM;
    }
    s->n_floats = n;
    s->arch = arch;
    s->d_in = d_in;
    s->d_sae = d_sae;
    s->k = arch == MP_SAE_TOPK ? k : 0;
    s->apply_b_dec_to_input = 1;
    s->normalize = MP_SAE_NORM_NONE;
    s->hook_layer = -1;
    s->W_enc = s->block;
    s->b_enc = s->W_enc + din * dsae;
    s->W_dec = s->b_enc + dsae;
    s->b_dec = s->W_dec + dsae * din;
    s->threshold = arch == MP_SAE_JUMPRELU ? s->b_dec + din : NULL;
    *out = s;
    return MP_OK;
}

void mp_sae_free(mp_sae *s) {
    if (!s) return;
    free(s->block);
    free(s);
}

int mp_sae_n_weights(const mp_sae *s) { return s->threshold ? 5 : 4; }

const char *mp_sae_weight(const mp_sae *s, int i, float **data, int *ndim, int64_t shape[2]) {
    switch (i) {
    case 0: *data = s->W_enc; *ndim = 2; shape[0] = s->d_in; shape[1] = s->d_sae; return "W_enc";
    case 1: *data = s->b_enc; *ndim = 1; shape[0] = s->d_sae; return "b_enc";
    case 2: *data = s->W_dec; *ndim = 2; shape[0] = s->d_sae; shape[1] = s->d_in; return "W_dec";
    case 3: *data = s->b_dec; *ndim = 1; shape[0] = s->d_in; return "b_dec";
    case 4: if (!s->threshold) break; *data = s->threshold; *ndim = 1; shape[0] = s->d_sae; return "threshold";
    default: break;
    }
    *data = NULL;
    *ndim = 0;
    return NULL;
}

void mp_sae_norm_in(const mp_sae *s, const float *x, int N, float *xn, mp_sae_rownorm *rn) {
    const int D = s->d_in;
    const mp_sae_norm mode = s->normalize;
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = xn + (size_t)r * D;
        float a = 1.0f, b = 0.0f;
        if (mode == MP_SAE_NORM_CONSTANT_NORM_RESCALE) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
            /* SAELens divides by |x| as torch does: a zero row gives inf/nan there too. */
            float c = (float)(sqrt((double)D) / sqrt(ss));
            for (int i = 0; i < D; i++) yr[i] = xr[i] * c;
            a = 1.0f / c;
        } else if (mode == MP_SAE_NORM_LAYER_NORM) {
            double mu = 0, v = 0;
            for (int i = 0; i < D; i++) mu += xr[i];
            mu /= D;
            for (int i = 0; i < D; i++) v += ((double)xr[i] - mu) * ((double)xr[i] - mu);
            float sd = D > 1 ? (float)sqrt(v / (D - 1)) : NAN; /* torch.std: unbiased (nan for one element) */
            float inv = 1.0f / (sd + 1e-5f);
            for (int i = 0; i < D; i++) yr[i] = (xr[i] - (float)mu) * inv;
            a = sd;
            b = (float)mu;
        } else if (yr != xr) {
            memcpy(yr, xr, (size_t)D * sizeof(float));
        }
        if (rn) rn[r] = (mp_sae_rownorm){a, b};
    }
}

void mp_sae_hidden_pre(const mp_sae *s, const float *xn, int N, float *pre, float *scratch) {
    const int D = s->d_in, F = s->d_sae;
    const float *in = xn;
    if (s->apply_b_dec_to_input) {
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
        for (int r = 0; r < N; r++)
            for (int i = 0; i < D; i++) scratch[(size_t)r * D + i] = xn[(size_t)r * D + i] - s->b_dec[i];
        in = scratch;
    }
    for (int r = 0; r < N; r++) memcpy(pre + (size_t)r * F, s->b_enc, (size_t)F * sizeof(float));
    if (N > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, F, D, 1.0f, in, D, s->W_enc, F, 1.0f, pre, F);
}

/* Heap order for topk: entry i is "worse" than j when smaller, or equal with a
 * larger index (so ties keep the lower index, as a stable sort would). */
static int worse(const float *v, int i, int j) { return v[i] < v[j] || (v[i] == v[j] && i > j); }

static void sift_down(const float *v, int *h, int n, int at) {
    for (;;) {
        int l = 2 * at + 1, w = at;
        if (l < n && worse(v, h[l], h[w])) w = l;
        if (l + 1 < n && worse(v, h[l + 1], h[w])) w = l + 1;
        if (w == at) return;
        int t = h[at];
        h[at] = h[w];
        h[w] = t;
        at = w;
    }
}

/* The k best entries of row v[0..F) (a min-heap of their indices in h). NaN
 * entries rank below every number. */
static void topk_row(const float *v, int F, int k, int *h) {
    for (int i = 0; i < k; i++) h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(v, h, k, i);
    for (int i = k; i < F; i++) {
        if (isnan(v[i]) || !worse(v, h[0], i)) continue;
        h[0] = i;
        sift_down(v, h, k, 0);
    }
}

mp_status mp_sae_activate(const mp_sae *s, const float *pre, int N, float *acts) {
    const int F = s->d_sae;
    if (s->arch == MP_SAE_TOPK) {
        const int k = s->k, nt = omp_get_max_threads();
        int *hs = mp_malloc((size_t)nt * k * sizeof(int), "SAE topk heaps");
        float *ks = mp_malloc((size_t)nt * k * sizeof(float), "SAE topk values");
        if (!hs || !ks) {
            free(hs);
            free(ks);
            return MP_ERR_NOMEM;
        }
#pragma omp parallel num_threads(nt)
        {
            int *h = hs + (size_t)omp_get_thread_num() * k;
            float *keep = ks + (size_t)omp_get_thread_num() * k;
#pragma omp for schedule(static)
            for (int r = 0; r < N; r++) {
                const float *p = pre + (size_t)r * F;
                float *a = acts + (size_t)r * F;
                topk_row(p, F, k, h);
                for (int j = 0; j < k; j++) keep[j] = p[h[j]] > 0 ? p[h[j]] : 0.0f;
                memset(a, 0, (size_t)F * sizeof(float)); /* a may alias p: read first */
                for (int j = 0; j < k; j++) a[h[j]] = keep[j];
            }
        }
        free(hs);
        free(ks);
        return MP_OK;
    }
    const float *th = s->threshold;
#pragma omp parallel for schedule(static) if ((size_t)N * F > 65536)
    for (int r = 0; r < N; r++) {
        const float *p = pre + (size_t)r * F;
        float *a = acts + (size_t)r * F;
        if (th)
            for (int i = 0; i < F; i++) a[i] = (p[i] > th[i] && p[i] > 0) ? p[i] : 0.0f;
        else
            for (int i = 0; i < F; i++) a[i] = p[i] > 0 ? p[i] : 0.0f;
    }
    return MP_OK;
}

void mp_sae_decode_raw(const mp_sae *s, const float *acts, int N, float *rec) {
    const int D = s->d_in, F = s->d_sae;
    for (int r = 0; r < N; r++) memcpy(rec + (size_t)r * D, s->b_dec, (size_t)D * sizeof(float));
    if (N > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, D, F, 1.0f, acts, F, s->W_dec, D, 1.0f, rec, D);
}

void mp_sae_norm_out(const mp_sae *s, const float *rec, int N, const mp_sae_rownorm *rn, float *out) {
    const int D = s->d_in;
    if (!rn) {
        if (out != rec) memcpy(out, rec, (size_t)N * D * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int r = 0; r < N; r++)
        for (int i = 0; i < D; i++) out[(size_t)r * D + i] = rec[(size_t)r * D + i] * rn[r].a + rn[r].b;
}

mp_status mp_sae_encode(const mp_sae *s, const float *x, int N, float *acts, mp_sae_rownorm *rn) {
    size_t nd = (size_t)N * s->d_in;
    float *xn = mp_malloc((nd ? nd : 1) * 2 * sizeof(float), "SAE encode buffers");
    if (!xn) return MP_ERR_NOMEM;
    mp_sae_norm_in(s, x, N, xn, rn);
    mp_sae_hidden_pre(s, xn, N, acts, xn + nd);
    mp_status st = mp_sae_activate(s, acts, N, acts);
    free(xn);
    return st;
}

void mp_sae_decode(const mp_sae *s, const float *acts, int N, const mp_sae_rownorm *rn, float *out) {
    mp_sae_decode_raw(s, acts, N, out);
    mp_sae_norm_out(s, out, N, rn, out);
}

mp_status mp_sae_forward(const mp_sae *s, const float *x, int N, float *out, float *acts) {
    float *own = NULL;
    mp_sae_rownorm *rn = mp_malloc((size_t)(N > 0 ? N : 1) * sizeof *rn, "SAE forward norms");
    if (!rn) return MP_ERR_NOMEM;
    if (!acts) {
        own = mp_malloc((size_t)(N > 0 ? N : 1) * s->d_sae * sizeof(float), "SAE feature activations");
        if (!own) {
            free(rn);
            return MP_ERR_NOMEM;
        }
        acts = own;
    }
    mp_status st = mp_sae_encode(s, x, N, acts, rn);
    if (!st) mp_sae_decode(s, acts, N, rn, out);
    free(rn);
    free(own);
    return st;
}
