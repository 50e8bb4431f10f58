/* optim.c — AdamW (torch.optim.AdamW semantics), warmup + cosine schedule and
 * global-norm clipping; see optim.h. The scalar factors are computed in double
 * precision as PyTorch's Python-side arithmetic does; elementwise in float. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mp_adamw_params mp_adamw_params_default(void) {
    return (mp_adamw_params){1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, -1.0f, 0, 0, 1.0f};
}

mp_status mp_adamw_params_check(const mp_adamw_params *hp) {
    if (!(hp->lr >= 0.0f) || !isfinite(hp->lr)) return mp_error(MP_ERR_ARG, "AdamW: lr (%g) must be >= 0", hp->lr);
    if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f)) return mp_error(MP_ERR_ARG, "AdamW: beta1 (%g) must be in [0,1)", hp->beta1);
    if (!(hp->beta2 >= 0.0f && hp->beta2 < 1.0f)) return mp_error(MP_ERR_ARG, "AdamW: beta2 (%g) must be in [0,1)", hp->beta2);
    if (!(hp->eps >= 0.0f) || !isfinite(hp->eps)) return mp_error(MP_ERR_ARG, "AdamW: eps (%g) must be >= 0", hp->eps);
    if (!(hp->weight_decay >= 0.0f) || !isfinite(hp->weight_decay))
        return mp_error(MP_ERR_ARG, "AdamW: weight_decay (%g) must be >= 0", hp->weight_decay);
    if (hp->warmup < 0) return mp_error(MP_ERR_ARG, "AdamW: warmup (%d) must be >= 0", hp->warmup);
    if (hp->total_steps < 0) return mp_error(MP_ERR_ARG, "AdamW: total_steps (%d) must be >= 0", hp->total_steps);
    if (!(hp->grad_clip >= 0.0f)) return mp_error(MP_ERR_ARG, "AdamW: grad_clip (%g) must be >= 0", hp->grad_clip);
    if (!isfinite(hp->min_lr)) return mp_error(MP_ERR_ARG, "AdamW: min_lr must be finite");
    return MP_OK;
}

mp_status mp_adamw_init(mp_adamw *o, const mp_adamw_params *hp, size_t n) {
    mp_status st = mp_adamw_params_check(hp);
    if (st) return st;
    if (o->n != n) {
        free(o->m);
        free(o->v);
        o->m = o->v = NULL;
        o->n = 0;
        if (n && (!(o->m = mp_calloc(n, sizeof(float), "AdamW first moments")) ||
                  !(o->v = mp_calloc(n, sizeof(float), "AdamW second moments")))) {
            free(o->m);
            o->m = NULL;
            return MP_ERR_NOMEM;
        }
        o->n = n;
    } else if (n) {
        memset(o->m, 0, n * sizeof(float));
        memset(o->v, 0, n * sizeof(float));
    }
    o->hp = *hp;
    o->step = 0;
    return MP_OK;
}

void mp_adamw_free(mp_adamw *o) {
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

double mp_lr_at(const mp_adamw_params *hp, long step) {
    double lr = hp->lr, min_lr = hp->min_lr < 0.0f ? 0.1 * lr : hp->min_lr;
    if (hp->warmup > 0 && step < hp->warmup) return lr * (double)(step + 1) / (double)hp->warmup;
    if (hp->total_steps <= hp->warmup) return lr;
    double prog = (double)(step - hp->warmup) / (double)(hp->total_steps - hp->warmup);
    if (prog > 1.0) prog = 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * prog));
}

double mp_grad_clip(float *g, size_t n, float max_norm) {
    double ss = 0.0;
#pragma omp parallel for reduction(+ : ss) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    double norm = sqrt(ss);
    if (max_norm > 0.0f && norm > max_norm) {
        float coef = (float)(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) g[i] *= coef;
    }
    return norm;
}

void mp_adamw_step(const mp_adamw_params *hp, long step, double lr, float *p, float *mm, float *vv, const float *gg,
                   float gscale, size_t n, int decay) {
    const double bc1 = 1.0 - pow((double)hp->beta1, (double)step);
    const double bc2 = 1.0 - pow((double)hp->beta2, (double)step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    const float dfac = (float)(1.0 - lr * hp->weight_decay);
    const int dec = decay && hp->weight_decay != 0.0f;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        if (dec) pi *= dfac;
        float gi = gg[i] * gscale;
        float mi = mm[i] * b1 + (1.0f - b1) * gi; /* torch: m.lerp_(g, 1-b1) */
        float vi = vv[i] * b2 + (1.0f - b2) * gi * gi;
        mm[i] = mi;
        vv[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * (mi / denom);
    }
}

void mp_adamw_update(mp_adamw *o, mp_model *m, const float *g, double lr) {
    o->step++;
    mp_param_desc d[MP_PARAM_MAX];
    int nd = mp_params_describe(&m->cfg, &m->p, d);
    for (int k = 0; k < nd; k++) {
        size_t off = (size_t)(d[k].p - m->owned);
        mp_adamw_step(&o->hp, o->step, lr, d[k].p, o->m + off, o->v + off, g + off, 1.0f, d[k].n, d[k].decay);
    }
}
