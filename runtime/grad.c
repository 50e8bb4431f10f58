/* grad.c — the backward from a caller's dlogits to every hook point's
 * activation, with backward hooks fired (and free to edit) at each point in
 * reverse firing order (backward.c's walk with weight gradients off); and the
 * sums of attribution patching. See grad.h. */
#include "grad.h"
#include "backward.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

int mp_grad_has_hook(mp_hook_id id) { return mp_hook_has_grad(id); }

mp_status mp_model_backward_acts(const mp_model *m, mp_acts *A, const float *dlogits, const mp_hooks *hs) {
    return mp_model_backward_acts_masked(m, A, dlogits, hs, NULL);
}

mp_status mp_model_backward_acts_masked(const mp_model *m, mp_acts *A, const float *dlogits, const mp_hooks *hs,
                                        const int *mask) {
    const mp_backward_params bp = {NULL, NULL, NULL, hs};
    return mask ? mp_backward_masked(m, A, dlogits, &bp, mask) : mp_backward(m, A, dlogits, &bp);
}

/* ---- metrics ---- */

mp_status mp_grad_ce(const float *logits, const int *targets, int N, int V, float *dl, float *rows, double *value) {
    const size_t n = (size_t)N * V;
    float *p = dl ? dl : mp_malloc(n * sizeof(float), "the loss's probabilities");
    if (!p) return MP_ERR_NOMEM;
    memcpy(p, logits, n * sizeof(float));
    int count = mp_crossentropy_forward(rows, p, p, targets, N, V);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += rows[i];
    if (count && dl) mp_crossentropy_backward(dl, dl, targets, N, V, 1.0f / (float)count);
    if (!dl) free(p);
    if (!count) return mp_error(MP_ERR_ARG, "loss \"ce\": every target is -1 (nothing to average)");
    *value = (float)(sum / count); /* as m:loss */
    return MP_OK;
}

void mp_grad_logit_diff(const float *logits, int B, int T, int V, const int *correct, const int *wrong, float *dl,
                        double *value) {
    mp_grad_logit_diff_masked(logits, B, T, V, correct, wrong, NULL, dl, value);
}

void mp_grad_logit_diff_masked(const float *logits, int B, int T, int V, const int *correct, const int *wrong,
                               const int *mask, float *dl, double *value) {
    const size_t n = (size_t)B * T * V;
    double sum = 0.0;
    if (dl) memset(dl, 0, n * sizeof(float));
    for (int b = 0; b < B; b++) {
        const int t = mask ? mp_mask_last_real(mask + (size_t)b * T, T) : T - 1;
        const size_t row = ((size_t)b * T + t) * V;
        sum += (double)logits[row + correct[b]] - (double)logits[row + wrong[b]];
        if (dl) {
            dl[row + correct[b]] += 1.0f / (float)B;
            dl[row + wrong[b]] -= 1.0f / (float)B;
        }
    }
    *value = sum / B;
}

/* ---- attribution patching ---- */

int mp_grad_attr_shape(const mp_config *c, mp_hook_id id, int T, mp_attr_per per, int64_t shape[2]) {
    const mp_shape_kind k = mp_hook_shape_kind[id];
    const int heads = k == MP_SHAPE_BTHD || k == MP_SHAPE_BTKD || k == MP_SHAPE_BHTS;
    const int nh = k == MP_SHAPE_BTKD ? c->n_kv_head : c->n_head;
    switch (per) {
    case MP_ATTR_ALL: shape[0] = 1; return 1;
    case MP_ATTR_POSITION: shape[0] = T; return 1;
    case MP_ATTR_HEAD:
        if (!heads) return 0;
        shape[0] = nh;
        return 1;
    case MP_ATTR_HEAD_POSITION:
        if (!heads) return 0;
        shape[0] = nh;
        shape[1] = T;
        return 2;
    case MP_ATTR_NEURON:
        if (heads) return 0;
        shape[0] = k == MP_SHAPE_BTM ? c->d_mlp : c->d_model;
        return 1;
    }
    return 0;
}

mp_status mp_grad_attribution(const mp_config *c, mp_hook_id id, int B, int T, const float *clean,
                              const float *corrupt, const float *grad, mp_attr_per per, float *out) {
    int64_t s[4], os[2];
    mp_hook_shape(c, id, B, T, 0, s);
    const int ond = mp_grad_attr_shape(c, id, T, per, os);
    const size_t nout = ond == 2 ? (size_t)(os[0] * os[1]) : ond == 1 ? (size_t)os[0] : 0;
    if (!nout) return mp_error(MP_ERR_ARG, "attribution: this grouping does not apply to hook %s", mp_hook_suffix[id]);
    double *acc = mp_calloc(nout, sizeof(double), "attribution sums");
    if (!acc) return MP_ERR_NOMEM;
    const mp_shape_kind k = mp_hook_shape_kind[id];
    const int bhts = k == MP_SHAPE_BHTS, nd = k == MP_SHAPE_BTD || k == MP_SHAPE_BTM ? 3 : 4;
    const size_t n = (size_t)s[0] * s[1] * s[2] * (nd == 4 ? (size_t)s[3] : 1);
    /* the index of element e along each axis: i0..i3 of the hook's shape */
    const size_t inner = nd == 4 ? (size_t)s[3] : 1;
    for (size_t e = 0; e < n; e++) {
        const double v = ((double)clean[e] - (double)corrupt[e]) * (double)grad[e];
        size_t r = e / inner;
        const size_t i3 = e % inner, i2 = r % (size_t)s[2];
        r /= (size_t)s[2];
        const size_t i1 = r % (size_t)s[1];
        /* position (query) and head of this element */
        const size_t pos = bhts ? i2 : i1, head = bhts ? i1 : i2;
        size_t o = 0;
        switch (per) {
        case MP_ATTR_ALL: o = 0; break;
        case MP_ATTR_POSITION: o = pos; break;
        case MP_ATTR_HEAD: o = head; break;
        case MP_ATTR_HEAD_POSITION: o = head * (size_t)T + pos; break;
        case MP_ATTR_NEURON: o = nd == 4 ? i3 : i2; break;
        }
        acc[o] += v;
    }
    for (size_t i = 0; i < nout; i++) out[i] = (float)acc[i];
    free(acc);
    return MP_OK;
}

int mp_grad_attr_shape_hs(const mp_hooks *hs, const mp_config *c, mp_hook_id id, int T, mp_attr_per per,
                          int64_t shape[2]) {
    if (!mp_hook_is_sub(id)) return mp_grad_attr_shape(c, id, T, per, shape);
    int64_t s[4];
    mp_hooks_shape(hs, id, 1, T, 0, s);
    switch (per) {
    case MP_ATTR_ALL: shape[0] = 1; return 1;
    case MP_ATTR_POSITION: shape[0] = T; return 1;
    case MP_ATTR_NEURON: shape[0] = s[2]; return 1;
    default: return 0;
    }
}

mp_status mp_grad_attribution_hs(const mp_hooks *hs, const mp_config *c, mp_hook_id id, int B, int T,
                                 const float *clean, const float *corrupt, const float *grad, mp_attr_per per,
                                 float *out) {
    if (!mp_hook_is_sub(id)) return mp_grad_attribution(c, id, B, T, clean, corrupt, grad, per, out);
    int64_t s[4], os[2];
    mp_hooks_shape(hs, id, B, T, 0, s);
    char name[96];
    if (!mp_grad_attr_shape_hs(hs, c, id, T, per, os))
        return mp_error(MP_ERR_ARG, "attribution: this grouping does not apply to hook %s (it has no head axis)",
                        mp_hooks_name(hs, id, -1, name, sizeof name));
    double *acc = mp_calloc((size_t)os[0], sizeof(double), "attribution sums");
    if (!acc) return MP_ERR_NOMEM;
    const size_t W = (size_t)s[2], n = (size_t)B * T * W;
    for (size_t e = 0; e < n; e++) {
        const double v = ((double)clean[e] - (double)corrupt[e]) * (double)grad[e];
        acc[per == MP_ATTR_ALL ? 0 : per == MP_ATTR_POSITION ? (e / W) % (size_t)T : e % W] += v;
    }
    for (int64_t i = 0; i < os[0]; i++) out[i] = (float)acc[i];
    free(acc);
    return MP_OK;
}
