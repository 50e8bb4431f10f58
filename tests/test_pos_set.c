/* test_pos_set.c — the runtime setters of a model's positional scheme
 * (mp_model_set_pos, mp_model_set_rope_scaling): the frequencies they give
 * against the closed forms (rope theta^(-2i/d), half_rope on rope_dims
 * channels, PI s-fold slower, NTK's raised theta, YaRN's logit factor
 * (0.1 ln s + 1)^2), a switched model computing what a model built with that
 * scheme computes, switching back restoring the logits bit for bit, and the
 * refusals (to or from learned, odd rope_dims, scaling without RoPE, factor
 * <= 0, beta_fast <= beta_slow, unknown kinds), which leave the config as it
 * was. */
#include "model.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static mp_config base_cfg(void) {
    mp_config c = mp_config_default();
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_kv_head = 2;
    c.d_head = 8;
    c.d_mlp = 32;
    c.vocab = 24;
    c.ctx = 16;
    c.rope_theta = 10000.0f;
    return c;
}

enum { T = 12 };
static const int TOK[T] = {1, 5, 9, 2, 23, 7, 7, 0, 11, 3, 19, 4};

static void logits_of(const mp_model *m, float *out) {
    mp_forward_params fp = mp_forward_params_default();
    fp.logits = MP_LOGITS_ALL;
    CHECK(mp_model_forward(m, TOK, 1, T, &fp, out) == MP_OK, "%s", mp_last_error());
}

static void check_freqs(const mp_model *m, const double *want, const char *label) {
    double f[8];
    mp_pos_freqs(&m->cfg, f);
    double worst = 0;
    for (int i = 0; i < m->cfg.d_head / 2; i++)
        if (fabs(f[i] - want[i]) > worst) worst = fabs(f[i] - want[i]);
    CHECK(worst <= 1e-12, "%s: frequencies off by %.3g", label, worst);
}

static void expect_refused(mp_status st, const mp_model *m, const mp_config *before, const char *msg,
                           const char *label) {
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), msg), "%s: status %d, '%s' (expected '%s')", label, (int)st,
          mp_last_error(), msg);
    CHECK(memcmp(&m->cfg, before, sizeof *before) == 0, "%s: the config changed", label);
}

int main(void) {
    mp_init();
    mp_config c = base_cfg();
    mp_model *m = NULL, *h = NULL;
    if (mp_model_new_random(&m, &c, 5, 0.2f) != MP_OK) { CHECK(0, "%s", mp_last_error()); return tu_finish("test_pos_set"); }
    const int Dh = c.d_head, V = c.vocab;
    double want[8];
    float *l_rope = malloc(sizeof(float) * T * V), *l = malloc(sizeof(float) * T * V),
          *l_ref = malloc(sizeof(float) * T * V);
    logits_of(m, l_rope);
    for (int i = 0; i < Dh / 2; i++) want[i] = pow(10000.0, -2.0 * i / Dh);
    check_freqs(m, want, "rope");

    /* half_rope on 4 channels: the first two pairs at theta^(-2i/4), the rest still */
    CHECK(mp_model_set_pos(m, MP_POS_HALF_ROPE, 4, 1) == MP_OK, "%s", mp_last_error());
    CHECK(m->cfg.pos == MP_POS_HALF_ROPE && m->cfg.rope_dims == 4, "half_rope set");
    for (int i = 0; i < Dh / 2; i++) want[i] = i < 2 ? pow(10000.0, -2.0 * i / 4) : 0.0;
    check_freqs(m, want, "half_rope 4");
    /* ... and it computes what a model built as half_rope with the same weights does */
    mp_config ch = c;
    ch.pos = MP_POS_HALF_ROPE;
    ch.rope_dims = 4;
    CHECK(mp_model_new_random(&h, &ch, 5, 0.2f) == MP_OK, "%s", mp_last_error());
    CHECK(h && memcmp(h->p.wq, m->p.wq, sizeof(float) * (size_t)c.n_layer * Dh * c.n_head * c.d_model) == 0,
          "same weights");
    logits_of(m, l);
    if (h) logits_of(h, l_ref);
    CHECK(h && tu_max_abs_diff(l, l_ref, (size_t)T * V) == 0.0, "switched model = built half_rope model (%.3g)",
          tu_max_abs_diff(l, l_ref, (size_t)T * V));
    CHECK(tu_max_abs_diff(l, l_rope, (size_t)T * V) > 1e-4, "half_rope changes the logits");
    mp_model_free(h);

    /* rope_id without its temperature: no logit factor; with it, (1 + 0.1 ln(t/ctx))^2 past ctx */
    CHECK(mp_model_set_pos(m, MP_POS_ROPE_ID, 0, 0) == MP_OK && m->cfg.pos_no_temp == 1, "%s", mp_last_error());
    CHECK_NEAR(mp_pos_logit_scale(&m->cfg, 40), 1.0, 0.0, "rope_id without temperature");
    CHECK(mp_model_set_pos(m, MP_POS_ROPE_ID, 0, 1) == MP_OK && m->cfg.pos_no_temp == 0, "%s", mp_last_error());
    double tq = 1.0 + 0.1 * log(41.0 / c.ctx);
    CHECK_NEAR(mp_pos_logit_scale(&m->cfg, 40), tq * tq, 1e-6, "rope_id temperature at position 40");

    /* back to rope: the original logits exactly */
    CHECK(mp_model_set_pos(m, MP_POS_ROPE, 0, 1) == MP_OK, "%s", mp_last_error());
    logits_of(m, l);
    CHECK(tu_max_abs_diff(l, l_rope, (size_t)T * V) == 0.0, "rope again: the same logits");

    /* scaling: PI divides every frequency by s; NTK raises theta to theta s^(d/(d-2)) */
    mp_rope_scaling_params sp = mp_rope_scaling_params_default();
    sp.type = MP_ROPE_SCALING_PI;
    sp.factor = 4.0f;
    CHECK(mp_model_set_rope_scaling(m, &sp) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < Dh / 2; i++) want[i] = pow(10000.0, -2.0 * i / Dh) / 4.0;
    check_freqs(m, want, "PI x4");
    sp.type = MP_ROPE_SCALING_NTK;
    CHECK(mp_model_set_rope_scaling(m, &sp) == MP_OK, "%s", mp_last_error());
    double th = 10000.0 * pow(4.0, (double)Dh / (Dh - 2));
    for (int i = 0; i < Dh / 2; i++) want[i] = pow(th, -2.0 * i / Dh);
    check_freqs(m, want, "NTK x4");
    sp.type = MP_ROPE_SCALING_YARN;
    sp.original_ctx = 8;
    CHECK(mp_model_set_rope_scaling(m, &sp) == MP_OK && m->cfg.rope_orig_ctx == 8, "%s", mp_last_error());
    double ys = 0.1 * log(4.0) + 1.0;
    CHECK_NEAR(mp_pos_logit_scale(&m->cfg, 3), ys * ys, 1e-6, "YaRN attention temperature");
    /* set_pos to none drops the scaling */
    CHECK(mp_model_set_pos(m, MP_POS_NONE, 0, 1) == MP_OK, "%s", mp_last_error());
    CHECK(m->cfg.rope_scaling == MP_ROPE_SCALING_NONE && m->cfg.rope_factor == 0.0f, "none drops the scaling");
    CHECK(mp_model_set_pos(m, MP_POS_ROPE, 0, 1) == MP_OK, "%s", mp_last_error());
    sp.type = MP_ROPE_SCALING_PI;
    CHECK(mp_model_set_rope_scaling(m, &sp) == MP_OK, "%s", mp_last_error());
    sp = mp_rope_scaling_params_default(); /* NONE: off, whatever the other fields say */
    sp.factor = 9.0f;
    CHECK(mp_model_set_rope_scaling(m, &sp) == MP_OK && m->cfg.rope_scaling == MP_ROPE_SCALING_NONE &&
              m->cfg.rope_factor == 0.0f && m->cfg.rope_orig_ctx == 0, "none switches it off");
    logits_of(m, l);
    CHECK(tu_max_abs_diff(l, l_rope, (size_t)T * V) == 0.0, "scaling off: the same logits");

    /* refusals leave the config untouched */
    mp_config before = m->cfg;
    expect_refused(mp_model_set_pos(m, MP_POS_LEARNED, 0, 1), m, &before, "cannot switch to or from learned",
                   "rope -> learned");
    expect_refused(mp_model_set_pos(m, MP_POS_HALF_ROPE, 3, 1), m, &before, "set_pos: rope_dims (3) must be even",
                   "odd rope_dims");
    expect_refused(mp_model_set_pos(m, MP_POS_ROPE, 4, 1), m, &before, "set_pos: rope_dims (4) applies to",
                   "rope_dims with rope");
    expect_refused(mp_model_set_pos(m, (mp_pos_kind)MP_POS_COUNT, 0, 1), m, &before, "unknown positional scheme",
                   "unknown scheme");
    sp.type = MP_ROPE_SCALING_PI;
    sp.factor = 0.0f;
    expect_refused(mp_model_set_rope_scaling(m, &sp), m, &before, "set_rope_scaling:", "factor 0");
    sp.type = MP_ROPE_SCALING_YARN;
    sp.factor = 2.0f;
    sp.beta_fast = 1.0f;
    sp.beta_slow = 2.0f;
    expect_refused(mp_model_set_rope_scaling(m, &sp), m, &before, "must exceed beta_slow", "beta order");
    sp.type = (mp_rope_scaling)7;
    expect_refused(mp_model_set_rope_scaling(m, &sp), m, &before, "unknown RoPE scaling kind", "unknown kind");
    CHECK(mp_model_set_pos(m, MP_POS_HIGH_FREQ, 0, 1) == MP_OK, "%s", mp_last_error());
    before = m->cfg;
    sp = mp_rope_scaling_params_default();
    sp.type = MP_ROPE_SCALING_NTK;
    sp.factor = 2.0f;
    expect_refused(mp_model_set_rope_scaling(m, &sp), m, &before, "set_rope_scaling:", "scaling high_freq");
    mp_model_free(m);

    /* a learned-position model cannot leave learned positions */
    c.pos = MP_POS_LEARNED;
    CHECK(mp_model_new_random(&m, &c, 5, 0.2f) == MP_OK, "%s", mp_last_error());
    before = m->cfg;
    expect_refused(mp_model_set_pos(m, MP_POS_NONE, 0, 1), m, &before, "cannot switch to or from learned",
                   "learned -> none");
    CHECK(mp_model_set_pos(m, MP_POS_LEARNED, 0, 1) == MP_OK, "learned -> learned: %s", mp_last_error());
    mp_model_free(m);
    free(l_rope);
    free(l);
    free(l_ref);
    return tu_finish("test_pos_set");
}
