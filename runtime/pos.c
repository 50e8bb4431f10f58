/* pos.c — the positional schemes, the one place that knows them (model.h):
 * the angular frequency of every channel pair for rope, half_rope, high_freq
 * and rope_id, the inference-time scaling of RoPE frequencies (PI, NTK-aware,
 * YaRN), the per-query logit factor (rope_id's length temperature, YaRN's
 * attention temperature), the cos/sin tables and their application to q/k
 * (forward, and the transpose for the backward pass), and the second set of
 * tables of the windowed layers when they have their own base (rope_local_theta). */
#include "model.h"
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int mp_pos_rotates(const mp_config *c) { return c->pos != MP_POS_NONE && c->pos != MP_POS_LEARNED; }

/* rotated channels of half_rope / rope_id */
static int rot_dims(const mp_config *c) { return c->rope_dims > 0 ? c->rope_dims : 2 * (c->d_head / 4); }

/* YaRN's effective scale factor s (1 when off or not above 1) */
static double yarn_factor(const mp_config *c) {
    return c->rope_scaling == MP_ROPE_SCALING_YARN && c->rope_factor > 1.0f ? (double)c->rope_factor : 1.0;
}

/* Number of rotated pairs and the channels d the theta exponent runs over. */
static int rotated_pairs(const mp_config *c, int *d) {
    if (!mp_pos_rotates(c)) return 0;
    *d = c->d_head;
    if (c->pos == MP_POS_HALF_ROPE || c->pos == MP_POS_ROPE_ID) *d = rot_dims(c);
    return *d / 2;
}

/* The frequency of pair i (0 for unrotated pairs). */
static double pair_freq(const mp_config *c, int i) {
    int d = 0, n = rotated_pairs(c, &d);
    if (i >= n) return 0.0;
    if (c->pos == MP_POS_HIGH_FREQ || c->pos == MP_POS_ROPE_ID) {
        /* log-spaced from one turn per 32 tokens to two turns per ctx */
        const double hi = 2.0 * M_PI / 32.0, lo = 2.0 * 2.0 * M_PI / (double)c->ctx;
        return n == 1 ? hi : hi * pow(lo / hi, (double)i / (double)(n - 1));
    }
    /* rope, half_rope: theta^(-2i/d), NTK-aware theta scaling first */
    double theta = (double)c->rope_theta, s = c->rope_factor > 0.0f ? (double)c->rope_factor : 1.0;
    if (c->rope_scaling == MP_ROPE_SCALING_NTK && d > 2) theta *= pow(s, (double)d / (double)(d - 2));
    double f = 1.0 / pow(theta, (double)(2 * i) / (double)d);
    if (c->n_rope_freqs) f /= (double)c->rope_freqs[i];
    if (c->rope_scaling == MP_ROPE_SCALING_PI) {
        f /= s;
    } else if (c->rope_scaling == MP_ROPE_SCALING_YARN) {
        const double L0 = c->rope_orig_ctx > 0 ? c->rope_orig_ctx : c->ctx;
        const double bf = c->yarn_beta_fast > 0.0f ? c->yarn_beta_fast : 32.0;
        const double bs = c->yarn_beta_slow > 0.0f ? c->yarn_beta_slow : 1.0;
        double r = L0 * f / (2.0 * M_PI);   /* rotations over the original context */
        double g = (r - bs) / (bf - bs);
        g = g < 0.0 ? 0.0 : g > 1.0 ? 1.0 : g;
        f = (1.0 - g) * f / s + g * f;
    }
    return f;
}

int mp_pos_freqs(const mp_config *c, double *freq) {
    int d = 0, n = rotated_pairs(c, &d);
    for (int i = 0; i < c->d_head / 2; i++) freq[i] = pair_freq(c, i);
    return n;
}

/* 1 when some query may get a logit factor other than 1 */
int mp_pos_has_logit_scale(const mp_config *c) {
    return (c->pos == MP_POS_ROPE_ID && !c->pos_no_temp) || yarn_factor(c) > 1.0;
}

double mp_pos_logit_scale(const mp_config *c, int pos) {
    double f = 1.0;
    if (c->pos == MP_POS_ROPE_ID && !c->pos_no_temp) {
        double t = (double)pos + 1.0, L = (double)c->ctx;
        double a = 1.0 + 0.1 * log((t > L ? t : L) / L);
        f *= a * a;
    }
    double s = yarn_factor(c);
    if (s > 1.0) {
        double m = 0.1 * log(s) + 1.0;
        f *= m * m;
    }
    return f;
}

int mp_pos_tables(const mp_config *c, float *cos_t, float *sin_t, float *q_scale, int pos0, int T) {
    if (!mp_pos_rotates(c)) return 0;
    const int half = c->d_head / 2;
    /* legacy linear scaling of loaded models: positions divided by rope_scale */
    const double pos_scale = c->rope_scale > 0.0f && c->rope_scale != 1.0f ? 1.0 / (double)c->rope_scale : 1.0;
    for (int i = 0; i < half; i++) {
        const double f = pair_freq(c, i);
        for (int t = 0; t < T; t++) {
            const double p = (double)(pos0 + t);
            double ang = pos_scale == 1.0 ? p * f : p * pos_scale * f;
            cos_t[(size_t)t * half + i] = (float)cos(ang);
            sin_t[(size_t)t * half + i] = (float)sin(ang);
        }
    }
    if (q_scale)
        for (int t = 0; t < T; t++) q_scale[t] = (float)mp_pos_logit_scale(c, pos0 + t);
    return mp_pos_has_logit_scale(c);
}

/* ---- the windowed layers' own base (rope_local_theta: Gemma 3) ---- */

int mp_pos_has_local(const mp_config *c) { return c->rope_local_theta > 0.0f && mp_pos_rotates(c); }

int mp_pos_local(const mp_config *c, int l) { return mp_pos_has_local(c) && mp_config_window(c, l) > 0; }

size_t mp_pos_tables_floats(const mp_config *c, size_t rows) {
    const size_t half = (size_t)(c->d_head / 2);
    return rows * (2 * half + 1) + (mp_pos_has_local(c) ? 2 * rows * half : 0);
}

int mp_pos_tables_all(const mp_config *c, float *tab, int pos0, int T) {
    const size_t half = (size_t)(c->d_head / 2), n = (size_t)T * half;
    const int has_scale = mp_pos_tables(c, tab, tab + n, tab + 2 * n, pos0, T);
    if (mp_pos_has_local(c)) {
        /* the windowed layers: base rope_local_theta, unscaled (rope_scale, rope_scaling and rope_freqs are the
         * global layers'); the logit factor is 1 for pos rope without YaRN, as for the global layers */
        mp_config lc = *c;
        lc.rope_theta = c->rope_local_theta;
        lc.rope_scale = 0.0f;
        lc.rope_scaling = MP_ROPE_SCALING_NONE;
        lc.rope_factor = 0.0f;
        lc.n_rope_freqs = 0;
        float *cl = tab + 2 * n + (size_t)T;
        mp_pos_tables(&lc, cl, cl + n, NULL, pos0, T);
    }
    return has_scale;
}

void mp_pos_layer_tables(const mp_config *c, int l, const float *tab, size_t rows, const float **cos_t,
                         const float **sin_t) {
    const size_t n = rows * (size_t)(c->d_head / 2);
    const float *base = mp_pos_local(c, l) ? tab + 2 * n + rows : tab;
    *cos_t = base;
    *sin_t = base + n;
}

void mp_pos_apply(const mp_config *c, const float *cos_t, const float *sin_t, const float *q_scale, float *x, int B,
                  int T, int nh, int backward) {
    if (!mp_pos_rotates(c)) return;
    if (backward) mp_rope_backward(x, cos_t, sin_t, B, T, nh, c->d_head);
    else mp_rope_forward(x, cos_t, sin_t, B, T, nh, c->d_head);
    if (!q_scale) return;
    const size_t row = (size_t)nh * c->d_head;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T > 64)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float s = q_scale[t], *v = x + ((size_t)b * T + t) * row;
            if (s != 1.0f)
                for (size_t i = 0; i < row; i++) v[i] *= s;
        }
}

/* ---- changing a model's scheme in place (mp_model_set_pos, mp_model_set_rope_scaling) ---- */

/* Installs c as m's config when it validates; the status of a failure is
 * MP_ERR_ARG (the caller's request), its message the validation's. */
static mp_status set_cfg(mp_model *m, const mp_config *c, const char *what) {
    if (mp_config_validate(c, what) != MP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        return mp_error(MP_ERR_ARG, "%s", msg);
    }
    m->cfg = *c;
    return MP_OK;
}

mp_status mp_model_set_pos(mp_model *m, mp_pos_kind pos, int rope_dims, int pos_temp) {
    if ((unsigned)pos >= MP_POS_COUNT) return mp_error(MP_ERR_ARG, "set_pos: unknown positional scheme (%d)", (int)pos);
    mp_config c = m->cfg;
    if ((pos == MP_POS_LEARNED) != (c.pos == MP_POS_LEARNED))
        return mp_error(MP_ERR_ARG, "set_pos: cannot switch to or from learned positions (the parameters differ)");
    c.pos = pos;
    c.rope_dims = rope_dims;
    c.pos_no_temp = !pos_temp;
    if (c.pos != MP_POS_ROPE && c.pos != MP_POS_HALF_ROPE) {
        c.rope_scaling = MP_ROPE_SCALING_NONE;
        c.rope_factor = 0.0f;
        c.rope_orig_ctx = 0;
        c.yarn_beta_fast = c.yarn_beta_slow = 0.0f;
    }
    if (c.pos != MP_POS_ROPE) c.n_rope_freqs = 0;
    return set_cfg(m, &c, "set_pos");
}

mp_rope_scaling_params mp_rope_scaling_params_default(void) {
    mp_rope_scaling_params p = {MP_ROPE_SCALING_NONE, 1.0f, 0, 0.0f, 0.0f};
    return p;
}

mp_status mp_model_set_rope_scaling(mp_model *m, const mp_rope_scaling_params *p) {
    if ((unsigned)p->type > MP_ROPE_SCALING_YARN)
        return mp_error(MP_ERR_ARG, "set_rope_scaling: unknown RoPE scaling kind (%d)", (int)p->type);
    mp_config c = m->cfg;
    int on = p->type != MP_ROPE_SCALING_NONE;
    c.rope_scaling = p->type;
    c.rope_factor = on ? p->factor : 0.0f;
    c.rope_orig_ctx = on ? p->original_ctx : 0;
    c.yarn_beta_fast = on ? p->beta_fast : 0.0f;
    c.yarn_beta_slow = on ? p->beta_slow : 0.0f;
    return set_cfg(m, &c, "set_rope_scaling");
}
