/* sae_train.c — SAELens's SAE training (standard: ReLU + decoder-norm
 * weighted L1; topk: MSE + AuxK) with hand-written gradients, its
 * initialisation and schedulers, the training loop, and a shuffle buffer over
 * any row producer; see sae_train.h. The forward reuses sae.c's stages; the
 * products whose operand is sparse (the features of a topk SAE, or a trained
 * ReLU SAE's) run over the active entries only, the others through OpenBLAS. */
#include "sae_train.h"

#include <cblas.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <omp.h>

/* Below this share of active features the decoder-side products run sparse. */
#define SPARSE_DENSITY 0.08

mp_status mp_sae_init_weights(mp_sae *s, uint64_t seed, float decoder_init_norm) {
    const int D = s->d_in, F = s->d_sae;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) return mp_error(MP_ERR_NOMEM, "SAE init: out of memory for the random generator");
    gsl_rng_set(r, (unsigned long)seed);
    /* torch.nn.init.kaiming_uniform_ (a = 0, fan_in = W_dec.size(1) = d_in):
     * bound = sqrt(2) * sqrt(3 / fan_in) */
    const double bound = sqrt(6.0 / D);
    for (size_t i = 0; i < (size_t)F * D; i++) s->W_dec[i] = (float)((2.0 * gsl_rng_uniform(r) - 1.0) * bound);
    gsl_rng_free(r);
    if (decoder_init_norm > 0.0f)
        for (int j = 0; j < F; j++) {
            float *w = s->W_dec + (size_t)j * D;
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)w[i] * w[i];
            float c = ss > 0 ? (float)(decoder_init_norm / sqrt(ss)) : 0.0f;
            for (int i = 0; i < D; i++) w[i] *= c;
        }
    for (int j = 0; j < F; j++)
        for (int i = 0; i < D; i++) s->W_enc[(size_t)i * F + j] = s->W_dec[(size_t)j * D + i];
    memset(s->b_enc, 0, (size_t)F * sizeof(float));
    memset(s->b_dec, 0, (size_t)D * sizeof(float));
    if (s->threshold) memset(s->threshold, 0, (size_t)F * sizeof(float));
    return MP_OK;
}

/* ---- the gradient ---- */

/* One sparse entry of a row's features: feature j, its value a (the decoder's
 * input), its pre-activation gradient dp, and which output gradient it
 * decodes against (0: the reconstruction's, 1: AuxK's). */
typedef struct {
    int r, j;
    float a, dp;
    int src;
} entry;

struct mp_sae_grad_ws {
    size_t cap_nd, cap_nf, cap_e;
    float *xc, *out, *dout, *daux, *aux;   /* [N, D] */
    float *pre, *acts, *dacts;             /* [N, F] */
    float *wn, *dbenc, *tmpT;              /* [F], [F], [F, D] */
    entry *e, *e2;                         /* entries (row order), by feature */
    int *rowc, *colp;                      /* [N+1], [F+1] */
    int *deadlist;                         /* [F] */
    int *heaps;                            /* per thread k_aux */
    size_t cap_heaps;
    long nnz_main;
};

mp_sae_grad_ws *mp_sae_grad_ws_new(void) { return mp_calloc(1, sizeof(mp_sae_grad_ws), "SAE gradient workspace"); }

void mp_sae_grad_ws_free(mp_sae_grad_ws *w) {
    if (!w) return;
    free(w->xc); free(w->out); free(w->dout); free(w->daux); free(w->aux);
    free(w->pre); free(w->acts); free(w->dacts);
    free(w->wn); free(w->dbenc); free(w->tmpT);
    free(w->e); free(w->e2); free(w->rowc); free(w->colp); free(w->deadlist); free(w->heaps);
    free(w);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem, const char *what) {
    if (need <= *cap) return 0;
    void *q = realloc(*p, need * elem);
    if (!q) return mp_error(MP_ERR_NOMEM, "out of memory for %s (%zu bytes)", what, need * elem), -1;
    *p = q;
    *cap = need;
    return 0;
}

static mp_status ws_size(mp_sae_grad_ws *w, int N, int D, int F) {
    size_t nd = (size_t)N * D, nf = (size_t)N * F, c;
    if (nd > w->cap_nd) {
        float **bufs[] = {&w->xc, &w->out, &w->dout, &w->daux, &w->aux};
        for (int i = 0; i < 5; i++) {
            c = w->cap_nd;
            if (grow((void **)bufs[i], &c, nd, sizeof(float), "SAE training buffers")) return MP_ERR_NOMEM;
        }
        w->cap_nd = nd;
    }
    if (nf > w->cap_nf) {
        float **bufs[] = {&w->pre, &w->acts, &w->dacts};
        for (int i = 0; i < 3; i++) {
            c = w->cap_nf;
            if (grow((void **)bufs[i], &c, nf, sizeof(float), "SAE training feature buffers")) return MP_ERR_NOMEM;
        }
        w->rowc = realloc(w->rowc, ((size_t)N + 1) * sizeof(int));
        if (!w->rowc) return mp_error(MP_ERR_NOMEM, "out of memory for SAE training row counts");
        w->cap_nf = nf;
    }
    if (!w->wn) {
        w->wn = mp_malloc((size_t)F * sizeof(float), "SAE decoder norms");
        w->dbenc = mp_malloc((size_t)F * sizeof(float), "SAE b_enc gradient");
        w->tmpT = mp_malloc((size_t)F * D * sizeof(float), "SAE W_enc gradient (transposed)");
        w->colp = mp_malloc(((size_t)F + 1) * sizeof(int), "SAE feature offsets");
        w->deadlist = mp_malloc((size_t)F * sizeof(int), "SAE dead features");
        if (!w->wn || !w->dbenc || !w->tmpT || !w->colp || !w->deadlist) return MP_ERR_NOMEM;
    }
    return MP_OK;
}

/* Heap of indices into v (min at the top) for AuxK: the k largest of the
 * candidates cand[0..n). */
static void aux_sift(const float *v, int *h, int n, int at) {
    for (;;) {
        int l = 2 * at + 1, w = at;
        if (l < n && v[h[l]] < v[h[w]]) w = l;
        if (l + 1 < n && v[h[l + 1]] < v[h[w]]) w = l + 1;
        if (w == at) return;
        int t = h[at];
        h[at] = h[w];
        h[w] = t;
        at = w;
    }
}

static void aux_topk(const float *v, const int *cand, int n, int k, int *h) {
    for (int i = 0; i < k; i++) h[i] = cand[i];
    for (int i = k / 2 - 1; i >= 0; i--) aux_sift(v, h, k, i);
    for (int i = k; i < n; i++) {
        int c = cand[i];
        if (!(v[c] > v[h[0]])) continue;
        h[0] = c;
        aux_sift(v, h, k, 0);
    }
}

static double sumsq_diff(const float *a, const float *b, size_t n, float scale, float *d) {
    double ss = 0;
#pragma omp parallel for reduction(+ : ss) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float t = a[i] - b[i];
        ss += (double)t * t;
        d[i] = scale * t;
    }
    return ss;
}

mp_status mp_sae_loss_grad(const mp_sae *s, const float *x, int N, float l1c, const uint8_t *dead,
                           mp_sae_grad_ws *w, float *grad, double losses[2], int *n_active) {
    const int D = s->d_in, F = s->d_sae;
    const size_t nd = (size_t)N * D, nf = (size_t)N * F;
    if (N < 1) return mp_error(MP_ERR_ARG, "SAE training: a batch needs at least 1 row");
    if (s->arch == MP_SAE_JUMPRELU) return mp_error(MP_ERR_ARG, "SAE training: architecture jumprelu is not supported (standard, topk)");
    if (s->normalize != MP_SAE_NORM_NONE)
        return mp_error(MP_ERR_ARG, "SAE training: normalize_activations '%s' is not supported (none)",
                        mp_sae_norm_name(s->normalize));
    mp_status st = ws_size(w, N, D, F);
    if (st) return st;
    float *gWenc = grad, *gbenc = grad + (size_t)D * F, *gWdec = gbenc + F, *gbdec = gWdec + (size_t)F * D;
    const int standard = s->arch == MP_SAE_STANDARD;
    const int big = nf > 65536; /* worth a parallel region */

    /* forward: xc = x - b_dec, pre, acts, out */
    const float *xc = s->apply_b_dec_to_input ? w->xc : x;
    mp_sae_hidden_pre(s, x, N, w->pre, w->xc);
    if ((st = mp_sae_activate(s, w->pre, N, w->acts))) return st;
    float *acts = w->acts, *pre = w->pre;
    /* the active entries (acts > 0: where the gradient reaches pre) */
    long nnz = 0;
#pragma omp parallel for schedule(static) reduction(+ : nnz) if (big)
    for (int r = 0; r < N; r++) {
        int c = 0;
        const float *a = acts + (size_t)r * F;
        for (int j = 0; j < F; j++) c += a[j] > 0;
        w->rowc[r] = c;
        nnz += c;
    }
    if (n_active) *n_active = (int)(nnz > 2147483647 ? 2147483647 : nnz);
    const int sparse = (double)nnz < SPARSE_DENSITY * (double)nf;
    if (!standard) memset(w->wn, 0, (size_t)F * sizeof(float)); /* no L1 term (0 * stale NaN would be NaN) */
    if (standard)
        for (int j = 0; j < F; j++) {
            const float *wr = s->W_dec + (size_t)j * D;
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)wr[i] * wr[i];
            w->wn[j] = (float)sqrt(ss);
        }

    /* AuxK's dead features (topk) */
    int n_dead = 0, k_aux = 0;
    float aux_scale = 0.0f;
    if (!standard && dead) {
        for (int j = 0; j < F; j++)
            if (dead[j]) w->deadlist[n_dead++] = j;
        int half = D / 2;
        if (n_dead > 0 && half > 0) {
            aux_scale = (float)fmin((double)n_dead / half, 1.0);
            k_aux = half < n_dead ? half : n_dead;
        }
    }
    long n_aux = (long)N * k_aux;

    /* the entries, row by row (row offsets in rowc, prefix sums) */
    size_t need_e = 0;
    if (sparse || n_aux) {
        int run = 0;
        for (int r = 0; r < N; r++) {
            int c = w->rowc[r];
            w->rowc[r] = run;
            run += c;
        }
        w->rowc[N] = run;
        need_e = (size_t)nnz + (size_t)n_aux;
        size_t c1 = w->cap_e, c2 = w->cap_e;
        if (grow((void **)&w->e, &c1, need_e ? need_e : 1, sizeof(entry), "SAE training entries") ||
            grow((void **)&w->e2, &c2, need_e ? need_e : 1, sizeof(entry), "SAE training entries"))
            return MP_ERR_NOMEM;
        w->cap_e = c1;
#pragma omp parallel for schedule(static) if (big)
        for (int r = 0; r < N; r++) {
            entry *e = w->e + w->rowc[r];
            const float *a = acts + (size_t)r * F;
            for (int j = 0; j < F; j++)
                if (a[j] > 0) *e++ = (entry){r, j, a[j], 0.0f, 0};
        }
    }

    /* out = acts W_dec + b_dec; dout = 2/N (out - x); mse */
    if (sparse) {
#pragma omp parallel for schedule(static) if (big)
        for (int r = 0; r < N; r++) {
            float *o = w->out + (size_t)r * D;
            memcpy(o, s->b_dec, (size_t)D * sizeof(float));
            for (int q = w->rowc[r]; q < w->rowc[r + 1]; q++)
                cblas_saxpy(D, w->e[q].a, s->W_dec + (size_t)w->e[q].j * D, 1, o, 1);
        }
    } else {
        mp_sae_decode_raw(s, acts, N, w->out);
    }
    losses[0] = sumsq_diff(w->out, x, nd, 2.0f / N, w->dout) / N;
    losses[1] = 0.0;

    /* AuxK: the k_aux largest pre-activations among the dead features, decoded
     * (with b_dec) against the detached residual x - out */
    if (n_aux) {
        int nt = omp_get_max_threads();
        if (grow((void **)&w->heaps, &w->cap_heaps, (size_t)nt * k_aux, sizeof(int), "SAE AuxK heaps"))
            return MP_ERR_NOMEM;
        entry *ea = w->e + nnz;
        double ss = 0;
#pragma omp parallel num_threads(nt) reduction(+ : ss) if (big)
        {
            int *h = w->heaps + (size_t)omp_get_thread_num() * k_aux;
#pragma omp for schedule(static)
            for (int r = 0; r < N; r++) {
                const float *p = pre + (size_t)r * F;
                aux_topk(p, w->deadlist, n_dead, k_aux, h);
                float *ar = w->aux + (size_t)r * D, *dr = w->daux + (size_t)r * D;
                memcpy(ar, s->b_dec, (size_t)D * sizeof(float));
                for (int q = 0; q < k_aux; q++) {
                    ea[(size_t)r * k_aux + q] = (entry){r, h[q], p[h[q]], 0.0f, 1};
                    cblas_saxpy(D, p[h[q]], s->W_dec + (size_t)h[q] * D, 1, ar, 1);
                }
                const float *xr = x + (size_t)r * D, *orow = w->out + (size_t)r * D;
                for (int i = 0; i < D; i++) {
                    float t = ar[i] - (xr[i] - orow[i]);
                    ss += (double)t * t;
                    dr[i] = aux_scale * 2.0f / N * t;
                }
            }
        }
        losses[1] = aux_scale * ss / N;
    }

    /* standard's L1: (c/N) sum acts_rj |W_dec_j| */
    if (standard) {
        double l1 = 0;
#pragma omp parallel for reduction(+ : l1) schedule(static) if (big)
        for (int r = 0; r < N; r++) {
            const float *a = acts + (size_t)r * F;
            double t = 0;
            for (int j = 0; j < F; j++) t += (double)a[j] * w->wn[j];
            l1 += t;
        }
        losses[1] = (double)l1c * l1 / N;
    }
    const float l1s = standard ? l1c / N : 0.0f;

    memset(grad, 0, s->n_floats * sizeof(float));
    /* db_dec from the decoder(s) */
    for (int r = 0; r < N; r++) {
        const float *d = w->dout + (size_t)r * D;
        for (int i = 0; i < D; i++) gbdec[i] += d[i];
        if (n_aux) {
            const float *da = w->daux + (size_t)r * D;
            for (int i = 0; i < D; i++) gbdec[i] += da[i];
        }
    }
    memset(w->dbenc, 0, (size_t)F * sizeof(float));

    if (!sparse) {
        /* dense: dacts = dout W_dec^T (+ L1), dpre = dacts [acts > 0] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, F, D, 1.0f, w->dout, D, s->W_dec, D, 0.0f, w->dacts, F);
#pragma omp parallel for schedule(static) if (big)
        for (int r = 0; r < N; r++) {
            float *g = w->dacts + (size_t)r * F;
            const float *a = acts + (size_t)r * F;
            for (int j = 0; j < F; j++) g[j] = a[j] > 0 ? g[j] + l1s * w->wn[j] : 0.0f;
        }
        /* AuxK entries add their pre-activation gradient (no ReLU) */
        for (long q = 0; q < n_aux; q++) {
            entry *e = &w->e[nnz + q];
            e->dp = cblas_sdot(D, w->daux + (size_t)e->r * D, 1, s->W_dec + (size_t)e->j * D, 1);
            w->dacts[(size_t)e->r * F + e->j] += e->dp;
        }
        /* dW_dec = acts^T dout (+ AuxK) ; dW_enc = xc^T dpre */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, F, D, N, 1.0f, acts, F, w->dout, D, 0.0f, gWdec, D);
        for (long q = 0; q < n_aux; q++) {
            const entry *e = &w->e[nnz + q];
            cblas_saxpy(D, e->a, w->daux + (size_t)e->r * D, 1, gWdec + (size_t)e->j * D, 1);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, F, N, 1.0f, xc, D, w->dacts, F, 0.0f, gWenc, F);
        for (int r = 0; r < N; r++) {
            const float *g = w->dacts + (size_t)r * F;
            for (int j = 0; j < F; j++) w->dbenc[j] += g[j];
        }
    } else {
        /* sparse: each entry's pre-activation gradient, then per feature */
        long ne = nnz + n_aux;
#pragma omp parallel for schedule(static) if (big)
        for (long q = 0; q < ne; q++) {
            entry *e = &w->e[q];
            const float *g = (e->src ? w->daux : w->dout) + (size_t)e->r * D;
            e->dp = cblas_sdot(D, g, 1, s->W_dec + (size_t)e->j * D, 1) + (e->src ? 0.0f : l1s * w->wn[e->j]);
        }
        /* bucket by feature */
        for (int j = 0; j <= F; j++) w->colp[j] = 0;
        for (long q = 0; q < ne; q++) w->colp[w->e[q].j + 1]++;
        for (int j = 0; j < F; j++) w->colp[j + 1] += w->colp[j];
        int *fill = w->deadlist; /* reused as cursors (AuxK is done with it) */
        for (int j = 0; j < F; j++) fill[j] = w->colp[j];
        for (long q = 0; q < ne; q++) w->e2[fill[w->e[q].j]++] = w->e[q];
#pragma omp parallel for schedule(dynamic, 16) if (big)
        for (int j = 0; j < F; j++) {
            float *gd = gWdec + (size_t)j * D, *ge = w->tmpT + (size_t)j * D;
            memset(ge, 0, (size_t)D * sizeof(float));
            float db = 0.0f;
            for (int q = w->colp[j]; q < w->colp[j + 1]; q++) {
                const entry *e = &w->e2[q];
                const float *g = (e->src ? w->daux : w->dout) + (size_t)e->r * D;
                cblas_saxpy(D, e->a, g, 1, gd, 1);
                cblas_saxpy(D, e->dp, xc + (size_t)e->r * D, 1, ge, 1);
                db += e->dp;
            }
            w->dbenc[j] = db;
        }
        /* dW_enc [D, F] = tmpT^T */
        const int B = 64;
#pragma omp parallel for schedule(static) collapse(2) if (big)
        for (int j0 = 0; j0 < F; j0 += B)
            for (int i0 = 0; i0 < D; i0 += B)
                for (int j = j0; j < j0 + B && j < F; j++)
                    for (int i = i0; i < i0 + B && i < D; i++) gWenc[(size_t)i * F + j] = w->tmpT[(size_t)j * D + i];
    }
    /* standard's L1 on the decoder norms: d/dW_dec_j (c/N) S_j |W_dec_j| */
    if (standard && l1s != 0.0f) {
        float *S = w->tmpT; /* column sums of acts; tmpT is free now */
        memset(S, 0, (size_t)F * sizeof(float));
        for (int r = 0; r < N; r++) {
            const float *a = acts + (size_t)r * F;
            for (int j = 0; j < F; j++) S[j] += a[j];
        }
        for (int j = 0; j < F; j++)
            if (S[j] != 0.0f && w->wn[j] > 0.0f)
                cblas_saxpy(D, l1s * S[j] / w->wn[j], s->W_dec + (size_t)j * D, 1, gWdec + (size_t)j * D, 1);
    }
    memcpy(gbenc, w->dbenc, (size_t)F * sizeof(float));
    /* b_dec through xc = x - b_dec: - sum_r dpre_r W_enc^T = - W_enc dbenc */
    if (s->apply_b_dec_to_input) cblas_sgemv(CblasRowMajor, CblasNoTrans, D, F, -1.0f, s->W_enc, F, w->dbenc, 1, 1.0f, gbdec, 1);
    w->nnz_main = nnz;
    return MP_OK;
}

/* ---- parameters and schedules ---- */

mp_sae_train_params mp_sae_train_params_default(void) {
    mp_sae_train_params p;
    memset(&p, 0, sizeof p);
    p.lr = 3e-4f;
    p.adam_beta1 = 0.9f;
    p.adam_beta2 = 0.999f;
    p.lr_end = -1.0f;
    p.l1_coefficient = 1.0f;
    p.batch_size = 4096;
    p.steps = 1000;
    p.dead_feature_window = 1000;
    p.grad_clip = 1.0f;
    p.init = 1;
    p.seed = 42;
    p.decoder_init_norm = 0.1f;
    return p;
}

mp_status mp_sae_train_params_check(const mp_sae_train_params *p) {
    const char *fn = "SAE training";
    if (!(p->lr > 0.0f) || !isfinite(p->lr)) return mp_error(MP_ERR_ARG, "%s: lr must be > 0, got %g", fn, p->lr);
    if (!(p->adam_beta1 >= 0 && p->adam_beta1 < 1)) return mp_error(MP_ERR_ARG, "%s: adam_beta1 must be in [0,1), got %g", fn, p->adam_beta1);
    if (!(p->adam_beta2 >= 0 && p->adam_beta2 < 1)) return mp_error(MP_ERR_ARG, "%s: adam_beta2 must be in [0,1), got %g", fn, p->adam_beta2);
    if (p->lr_scheduler < 0 || p->lr_scheduler > 1) return mp_error(MP_ERR_ARG, "%s: unknown lr_scheduler %d", fn, p->lr_scheduler);
    if (p->lr_warm_up_steps < 0 || p->lr_decay_steps < 0 || p->l1_warm_up_steps < 0)
        return mp_error(MP_ERR_ARG, "%s: warm-up and decay steps must be >= 0", fn);
    if (!isfinite(p->lr_end)) return mp_error(MP_ERR_ARG, "%s: lr_end must be finite", fn);
    if (p->lr_decay_steps > 0 && p->lr_end == 0.0f)
        return mp_error(MP_ERR_ARG, "%s: lr_decay_steps needs lr_end > 0 (SAELens: a decay from 0 to 0)", fn);
    if ((long)p->lr_warm_up_steps + p->lr_decay_steps > p->steps)
        return mp_error(MP_ERR_ARG, "%s: lr_warm_up_steps + lr_decay_steps (%d + %d) exceed steps (%ld)", fn,
                        p->lr_warm_up_steps, p->lr_decay_steps, p->steps);
    if (!(p->l1_coefficient >= 0.0f) || !isfinite(p->l1_coefficient))
        return mp_error(MP_ERR_ARG, "%s: l1_coefficient must be >= 0, got %g", fn, p->l1_coefficient);
    if (p->batch_size < 1) return mp_error(MP_ERR_ARG, "%s: batch_size must be >= 1, got %d", fn, p->batch_size);
    if (p->steps < 1) return mp_error(MP_ERR_ARG, "%s: steps must be >= 1, got %ld", fn, p->steps);
    if (p->dead_feature_window < 1) return mp_error(MP_ERR_ARG, "%s: dead_feature_window must be >= 1, got %d", fn, p->dead_feature_window);
    if (!(p->grad_clip >= 0.0f)) return mp_error(MP_ERR_ARG, "%s: grad_clip must be >= 0, got %g", fn, p->grad_clip);
    if (p->checkpoint_every < 0) return mp_error(MP_ERR_ARG, "%s: checkpoint_every must be >= 0", fn);
    if (!isfinite(p->decoder_init_norm)) return mp_error(MP_ERR_ARG, "%s: decoder_init_norm must be finite", fn);
    return MP_OK;
}

double mp_sae_lr_at(const mp_sae_train_params *p, long s) {
    const double lr = p->lr, lr_end = p->lr_end < 0 ? lr / 10.0 : p->lr_end;
    const long W = p->lr_warm_up_steps, Dd = p->lr_decay_steps, T = p->steps;
    if (s < W) return lr * (double)(s + 1) / (double)W; /* LinearLR(1/W -> 1 over W-1 iterations) */
    if (Dd > 0 && s >= T - Dd) {                          /* LinearLR(lr_end/lr -> 0 over Dd) */
        double end = p->lr_scheduler == 0 ? lr : lr_end;
        return end * (1.0 - (double)(s - (T - Dd)) / (double)Dd);
    }
    if (p->lr_scheduler == 0) return lr;
    long main = T - W - Dd, t = s - W;                   /* CosineAnnealingLR(T_max = main, eta_min = lr_end) */
    if (main <= 0) return lr;
    return lr_end + (lr - lr_end) * 0.5 * (1.0 + cos(M_PI * (double)t / (double)main));
}

double mp_sae_l1_at(const mp_sae_train_params *p, long s) {
    if (p->l1_warm_up_steps <= 0) return p->l1_coefficient;
    long w = p->l1_warm_up_steps;
    return p->l1_coefficient * (double)(s < w ? s : w) / (double)w;
}

/* ---- the decoder-norm constraint ---- */
static void decoder_unit_rows(mp_sae *s) {
    const int D = s->d_in;
#pragma omp parallel for schedule(static) if ((size_t)s->d_sae * D > 65536)
    for (int j = 0; j < s->d_sae; j++) {
        float *w = s->W_dec + (size_t)j * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)w[i] * w[i];
        if (ss > 0) {
            float c = (float)(1.0 / sqrt(ss));
            for (int i = 0; i < D; i++) w[i] *= c;
        }
    }
}

/* SAELens's remove_gradient_parallel_to_decoder_directions: g_j -= (g_j . w_j) w_j. */
static void remove_parallel(const mp_sae *s, float *gWdec) {
    const int D = s->d_in;
#pragma omp parallel for schedule(static) if ((size_t)s->d_sae * D > 65536)
    for (int j = 0; j < s->d_sae; j++) {
        const float *w = s->W_dec + (size_t)j * D;
        float *g = gWdec + (size_t)j * D;
        float c = cblas_sdot(D, g, 1, w, 1);
        cblas_saxpy(D, -c, w, 1, g, 1);
    }
}

mp_status mp_sae_train(mp_sae *s, const mp_sae_train_params *p, mp_sae_next_fn next, void *next_user,
                       mp_sae_ckpt_fn ckpt, void *ckpt_user, mp_sae_train_result *res) {
    mp_sae_train_result r0;
    memset(&r0, 0, sizeof r0);
    if (res) *res = r0;
    mp_status st = mp_sae_train_params_check(p);
    if (st) return st;
    if (s->arch == MP_SAE_JUMPRELU) return mp_error(MP_ERR_ARG, "SAE training: architecture jumprelu is not supported (standard, topk)");
    if (s->normalize != MP_SAE_NORM_NONE)
        return mp_error(MP_ERR_ARG, "SAE training: normalize_activations '%s' is not supported (none)",
                        mp_sae_norm_name(s->normalize));
    const int D = s->d_in, F = s->d_sae, N = p->batch_size;
    if ((size_t)N * (F > D ? F : D) > (size_t)1 << 33)
        return mp_error(MP_ERR_ARG, "SAE training: batch_size %d x d_sae %d is too large", N, F);
    mp_adamw opt;
    memset(&opt, 0, sizeof opt);
    mp_adamw_params hp = {p->lr, p->adam_beta1, p->adam_beta2, 1e-8f, 0.0f, 0.0f, 0, 0, 0.0f};
    float *x = mp_malloc((size_t)N * D * sizeof(float), "SAE training batch");
    float *grad = mp_malloc(s->n_floats * sizeof(float), "SAE gradient");
    long *since = mp_calloc((size_t)F, sizeof(long), "SAE dead-feature counters");
    uint8_t *dead = mp_calloc((size_t)F, 1, "SAE dead-feature mask");
    mp_sae_grad_ws *w = mp_sae_grad_ws_new();
    if (!x || !grad || !since || !dead || !w) {
        st = MP_ERR_NOMEM;
        goto done;
    }
    if ((st = mp_adamw_init(&opt, &hp, s->n_floats))) goto done;
    if (p->init && (st = mp_sae_init_weights(s, p->seed, p->decoder_init_norm))) goto done;
    if (p->normalize_decoder) decoder_unit_rows(s);
    const int tty = isatty(2);
    const double t0 = mp_now();
    double last_print = t0, t1 = t0;
    long every = p->steps / 10 > 0 ? p->steps / 10 : 1;
    mp_sae_train_result R = r0;
    for (long step = 0; step < p->steps; step++) {
        int got = 0;
        if ((st = next(next_user, x, N, &got))) goto done;
        if (got < N) break;
        for (int j = 0; j < F; j++) dead[j] = since[j] > p->dead_feature_window;
        double losses[2];
        if ((st = mp_sae_loss_grad(s, x, N, (float)mp_sae_l1_at(p, step), dead, w, grad, losses, NULL))) goto done;
        /* did each feature fire on this batch (SAELens: acts > 0 on some row) */
        long nnz = 0;
        {
            uint8_t *fired = dead; /* reuse: the mask is rebuilt next step */
            memset(fired, 0, (size_t)F);
            for (int r = 0; r < N; r++) {
                const float *a = w->acts + (size_t)r * F;
                for (int j = 0; j < F; j++)
                    if (a[j] > 0) fired[j] = 1, nnz++;
            }
            for (int j = 0; j < F; j++) since[j] = fired[j] ? 0 : since[j] + 1;
        }
        if (p->normalize_decoder) remove_parallel(s, grad + (size_t)D * F + F);
        if (p->grad_clip > 0) mp_grad_clip(grad, s->n_floats, p->grad_clip);
        opt.step++;
        mp_adamw_step(&opt.hp, opt.step, mp_sae_lr_at(p, step), s->block, opt.m, opt.v, grad, 1.0f, s->n_floats, 0);
        if (p->normalize_decoder) decoder_unit_rows(s);
        R.steps = step + 1;
        R.tokens += N;
        if (step == 0) t1 = mp_now();
        R.mse = losses[0];
        R.aux = losses[1];
        R.l0 = (double)nnz / N;
        {   /* explained variance of this batch: 1 - N mse / sum |x - mean|^2 */
            double tv = 0;
            for (int i = 0; i < D; i++) {
                double m = 0, q = 0;
                for (int r = 0; r < N; r++) m += x[(size_t)r * D + i];
                m /= N;
                for (int r = 0; r < N; r++) {
                    double t = x[(size_t)r * D + i] - m;
                    q += t * t;
                }
                tv += q;
            }
            R.explained_variance = tv > 0 ? 1.0 - losses[0] * N / tv : NAN;
        }
        double now = mp_now();
        if (p->progress && (step + 1 == p->steps || (tty ? now - last_print > 0.2 : (step + 1) % every == 0))) {
            double el = now - t0, tps = el > 0 ? R.tokens / el : 0;
            char met[64];
            snprintf(met, sizeof met, "loss %.4f  L0 %.1f", losses[0] + losses[1], R.l0);
            mp_progress_line(tty, step + 1, p->steps, met, tps, el / (step + 1) * (p->steps - step - 1), el,
                             step + 1 == p->steps);
            last_print = now;
        }
        if (ckpt && p->checkpoint_every > 0 && (step + 1) % p->checkpoint_every == 0 && step + 1 < p->steps &&
            (st = ckpt(ckpt_user, s, step + 1, R.tokens)))
            goto done;
    }
    if (p->progress && R.steps < p->steps && R.steps > 0) {
        double el = mp_now() - t0;
        char met[64];
        snprintf(met, sizeof met, "loss %.4f  L0 %.1f", R.mse + R.aux, R.l0);
        mp_progress_line(tty, R.steps, p->steps, met, el > 0 ? R.tokens / el : 0, 0, el, 1);
    }
    R.seconds = mp_now() - t0;
    R.steady_seconds = R.steps > 1 ? mp_now() - t1 : 0.0;
    for (int j = 0; j < F; j++) R.n_dead += since[j] > p->dead_feature_window;
    if (res) *res = R;
    if (R.steps == 0) {
        st = mp_error(MP_ERR_ARG, "SAE training: the data ended before the first batch of %d rows", N);
        goto done;
    }
    if (ckpt) st = ckpt(ckpt_user, s, R.steps, R.tokens);
done:
    free(x);
    free(grad);
    free(since);
    free(dead);
    mp_sae_grad_ws_free(w);
    mp_adamw_free(&opt);
    return st;
}

/* ---- the shuffle buffer ---- */
struct mp_sae_shuffler {
    int d, cap, n, exhausted;
    float *pool;
    gsl_rng *rng;
    mp_sae_produce_fn produce;
    void *user;
};

mp_status mp_sae_shuffler_new(mp_sae_shuffler **out, int d, int capacity, uint64_t seed, mp_sae_produce_fn produce,
                              void *user) {
    *out = NULL;
    if (d < 1 || capacity < 1) return mp_error(MP_ERR_ARG, "SAE shuffle buffer: d (%d) and capacity (%d) must be >= 1", d, capacity);
    mp_sae_shuffler *sh = mp_calloc(1, sizeof *sh, "SAE shuffle buffer");
    if (!sh) return MP_ERR_NOMEM;
    sh->pool = mp_malloc((size_t)capacity * d * sizeof(float), "SAE shuffle buffer rows");
    sh->rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!sh->pool || !sh->rng) {
        mp_sae_shuffler_free(sh);
        return mp_error(MP_ERR_NOMEM, "out of memory for the SAE shuffle buffer (%d rows of %d)", capacity, d);
    }
    gsl_rng_set(sh->rng, (unsigned long)seed);
    sh->d = d;
    sh->cap = capacity;
    sh->produce = produce;
    sh->user = user;
    *out = sh;
    return MP_OK;
}

void mp_sae_shuffler_free(mp_sae_shuffler *sh) {
    if (!sh) return;
    free(sh->pool);
    if (sh->rng) gsl_rng_free(sh->rng);
    free(sh);
}

mp_status mp_sae_shuffle_next(void *shuffler, float *x, int N, int *got) {
    mp_sae_shuffler *sh = shuffler;
    const size_t d = (size_t)sh->d;
    *got = 0;
    for (int r = 0; r < N; r++) {
        /* top up when half empty (reads come in large pieces), so each row is
         * drawn from at least capacity/2 candidates until the data end */
        while (!sh->exhausted && sh->n <= sh->cap / 2) {
            int g = 0;
            mp_status st = sh->produce(sh->user, sh->pool + (size_t)sh->n * d, sh->cap - sh->n, &g);
            if (st) return st;
            if (g <= 0) sh->exhausted = 1;
            sh->n += g > 0 ? g : 0;
            while (!sh->exhausted && g > 0 && sh->n < sh->cap) {
                if ((st = sh->produce(sh->user, sh->pool + (size_t)sh->n * d, sh->cap - sh->n, &g))) return st;
                if (g <= 0) sh->exhausted = 1;
                sh->n += g > 0 ? g : 0;
            }
        }
        if (sh->n == 0) return MP_OK;
        size_t i = (size_t)gsl_rng_uniform_int(sh->rng, (unsigned long)sh->n);
        memcpy(x + (size_t)r * d, sh->pool + i * d, d * sizeof(float));
        sh->n--;
        if (i != (size_t)sh->n) memcpy(sh->pool + i * d, sh->pool + (size_t)sh->n * d, d * sizeof(float));
        (*got)++;
    }
    return MP_OK;
}

mp_status mp_sae_rows_produce(void *user, float *dst, int max_rows, int *got) {
    mp_sae_rows *m = user;
    *got = 0;
    while (*got < max_rows) {
        long k = m->n - m->at;
        if (k > max_rows - *got) k = max_rows - *got;
        memcpy(dst + (size_t)*got * m->d, m->x + (size_t)m->at * m->d, (size_t)k * m->d * sizeof(float));
        *got += (int)k;
        m->at = (m->at + k) % m->n;
    }
    return MP_OK;
}
