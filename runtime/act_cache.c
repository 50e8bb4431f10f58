/* act_cache.c — an activation cache's helpers on float arrays (see
 * act_cache.h): a stack normalized by a cached scale, per-head results
 * through W_O, direct logit attribution through the unembedding. */
#include "act_cache.h"
#include "quant.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

void mp_cache_apply_ln(float *x, int C, size_t R, int D, const float *scale, int center) {
#pragma omp parallel for schedule(static) if ((size_t)C * R > 64)
    for (size_t cr = 0; cr < (size_t)C * R; cr++) {
        float *v = x + cr * (size_t)D;
        const float r = 1.0f / scale[cr % R];
        float mu = 0.0f;
        if (center) {
            double s = 0.0;
            for (int d = 0; d < D; d++) s += v[d];
            mu = (float)(s / D);
        }
        for (int d = 0; d < D; d++) v[d] = (v[d] - mu) * r;
    }
}

/* The float32 W_O / unembedding of m, or NULL when kept quantized. */
static const float *plain(const float *p, const mp_qmat *qm) {
    if (p) return p;
    return qm && qm->type == MP_GGML_F32 ? (const float *)(const void *)qm->data : NULL;
}

mp_status mp_cache_head_results(const mp_model *m, int l, const float *z, int N, float *out) {
    const mp_config *c = &m->cfg;
    const int D = c->d_model, H = c->n_head, Dh = c->d_head, HD = H * Dh;
    if (l < 0 || l >= c->n_layer) return mp_error(MP_ERR_ARG, "head results: layer %d out of range (0..%d)", l, c->n_layer - 1);
    const float *wo = plain(mp_params_layer(c, &m->p, l).wo, m->q ? &m->q->wo[l] : NULL);
    if (!wo)
        return mp_error(MP_ERR_ARG, "head results from hook_z need float32 weights (this model keeps W_O quantized: "
                        "cache blocks.%d.attn.hook_result, or dequantize the model first)", l);
    for (int h = 0; h < H; h++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, D, Dh, 1.0f, z + (size_t)h * Dh, HD,
                    wo + (size_t)h * Dh, HD, 0.0f, out + (size_t)h * N * D, D);
    return MP_OK;
}

mp_status mp_cache_logit_attrs(const mp_model *m, const float *stack, int C, int B, int T, const int *tok,
                               const int *inc, float *out, float *bias) {
    const mp_config *c = &m->cfg;
    const int D = c->d_model, V = c->vocab;
    const float *U = plain(m->p.unembed, m->q ? &m->q->unembed : NULL);
    if (!U)
        return mp_error(MP_ERR_ARG, "logit_attrs needs a float32 unembedding (this model keeps it quantized: "
                        "dequantize it first)");
    for (int b = 0; b < B; b++)
        if (tok[b] < 0 || tok[b] >= V || (inc && (inc[b] < 0 || inc[b] >= V)))
            return mp_error(MP_ERR_ARG, "logit_attrs: token %d for batch row %d is outside the vocabulary (0..%d)",
                            tok[b] < 0 || tok[b] >= V ? tok[b] : inc[b], b, V - 1);
    float *dir = mp_malloc((size_t)B * D * sizeof(float), "logit directions");
    if (!dir) return MP_ERR_NOMEM;
    for (int b = 0; b < B; b++) {
        const float *u = U + (size_t)tok[b] * D, *ui = inc ? U + (size_t)inc[b] * D : NULL;
        double bs = 0.0;
        for (int d = 0; d < D; d++) {
            float du = ui ? u[d] - ui[d] : u[d];
            dir[(size_t)b * D + d] = du * m->p.lnf_w[d];
            if (m->p.lnf_b) bs += (double)du * m->p.lnf_b[d];
        }
        if (bias) bias[b] = c->norm == MP_NORM_LAYER ? (float)bs : 0.0f;
    }
    for (int ci = 0; ci < C; ci++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *v = stack + (((size_t)ci * B + b) * T + t) * D, *w = dir + (size_t)b * D;
                double s = 0.0;
                for (int d = 0; d < D; d++) s += (double)v[d] * w[d];
                out[((size_t)ci * B + b) * T + t] = (float)s;
            }
    free(dir);
    return MP_OK;
}
