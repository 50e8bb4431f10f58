/* test_hooks.c — the hook layer: names and globs against the DESIGN.md table,
 * every hook point writable (a perturbation changes the logits; writing back
 * the captured values leaves them bit-identical), block delivery of attention
 * maps, aborting from a callback, unknown names, and readers (read-only
 * points). Uses the committed
 * reference model tests/data/ref_gqa_untied.bin (GQA, untied classifier). */
#include "formats.h"
#include "model.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void test_names(const mp_config *c) {
    char buf[128];
    /* every name parses back to itself */
    int n = 0;
    for (int l = -1; l < c->n_layer; l++)
        for (int i = 0; i < MP_HOOK_COUNT; i++) {
            if ((l >= 0) != (mp_hook_per_layer[i] != 0) || !mp_hook_exists(c, (mp_hook_id)i)) continue;
            mp_hook_id id;
            int layer;
            mp_hook_name((mp_hook_id)i, l, buf, sizeof buf);
            CHECK(mp_hook_parse(c, buf, &id, &layer) == 0 && id == (mp_hook_id)i && layer == l, "parse %s", buf);
            n++;
        }
    /* rotary SwiGLU model: no hook_pos_embed; 26 points per block, 5 of them
     * opt-in (the per-head copies and results: only a glob that spells them) */
    CHECK(n == 3 + 26 * c->n_layer, "hook count %d", n);
    CHECK(mp_hook_select(c, MP_HOOK_GLOB_ALL, NULL, NULL, NULL, 0) == n, "MP_HOOK_GLOB_ALL selects every hook");
    CHECK(mp_hook_select(c, "*", NULL, NULL, NULL, 0) == 3 + 21 * c->n_layer, "'*' leaves the opt-in points out");
    CHECK(mp_hook_select(c, "blocks.*.attn.hook_rot_k", NULL, NULL, NULL, 0) == c->n_layer, "rot_k of every layer");
    CHECK(mp_hook_select(c, "blocks.1.*", NULL, NULL, NULL, 0) == 21, "all of block 1 but the opt-in points");
    CHECK(mp_hook_select(c, "blocks.1.*hook_result,blocks.*.attn.hook_?_input", NULL, NULL, NULL, 0) == 1,
          "an opt-in point needs its name spelled");
    CHECK(mp_hook_select(c, "*hook_q_input,*.hook_k_input,blocks.0.hook_attn_in", NULL, NULL, NULL, 0) ==
              2 * c->n_layer + 1, "opt-in points by name");
    CHECK(mp_hook_select(c, "*.hook_scale", NULL, NULL, NULL, 0) == 2 * c->n_layer + 1, "every norm's scale");
    CHECK(mp_hook_parse(c, "hook_pos_embed", &(mp_hook_id){0}, &(int){0}) != 0, "no hook_pos_embed with RoPE");
    CHECK(mp_hook_select(c, "*hook_pattern, hook_embed", NULL, NULL, NULL, 0) == c->n_layer + 1, "list of globs");
    CHECK(mp_hook_select(c, "*.hook_normalized", NULL, NULL, NULL, 0) == 2 * c->n_layer + 1, "normalized");
    char bad[64];
    CHECK(mp_hook_select(c, "hook_embed,blocks.9.hook_z", NULL, NULL, bad, sizeof bad) == 1 &&
              strcmp(bad, "blocks.9.hook_z") == 0, "unmatched glob reported: '%s'", bad);
    mp_hook_id id;
    int layer;
    CHECK(mp_hook_parse(c, "blocks.2.hook_resid_pre", &id, &layer) != 0, "layer out of range");
    CHECK(mp_hook_parse(c, "blocks.0.hook_embed", &id, &layer) != 0, "embed is not per-layer");
    CHECK(mp_hook_parse(c, "blocks.x.hook_z", &id, &layer) != 0, "bad layer number");
    CHECK(mp_glob_match("a*b?d", "aXXbcd") && !mp_glob_match("a*b?d", "aXXbd"), "glob ? and *");
    CHECK(mp_glob_match("a*d", "a.b.d") && mp_glob_match("a\\*", "a\\x") && !mp_glob_match("a\\*", "a*"), "'*' crosses dots, '\\' is literal");
    CHECK(mp_hook_select(c, "blocks.[01].hook_resid_pre", NULL, NULL, NULL, 0) == 2 &&
              mp_hook_select(c, "blocks.[!0].attn.hook_z", NULL, NULL, NULL, 0) == 1, "bracket sets");
    mp_hooks *hs = mp_hooks_new(c);
    mp_status st = mp_hooks_add(hs, "blocks.0.attn.hook_patern", NULL, NULL);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "blocks.0.attn.hook_patern"), "unknown name: %s",
          mp_last_error());
    mp_hooks_free(hs);
}

typedef struct {
    int mode;            /* 0 capture, 1 write back, 2 perturb */
    float *saved;        /* full tensor */
    size_t n;
    int calls;
} writer;

static int write_cb(void *user, const mp_hook_info *info, float *data) {
    writer *w = user;
    w->calls++;
    if (w->mode == 0) {
        if (!w->saved) {
            w->n = 1;
            for (int i = 0; i < info->ndim; i++) w->n *= (size_t)info->full[i];
            w->saved = malloc(w->n * sizeof(float));
        }
        mp_hook_view_copy(info, w->saved, data, 1);
    } else if (w->mode == 1) {
        /* overwrite with garbage first, then restore: the restore must be complete */
        for (size_t i = 0; i < info->numel; i++) data[i] = 12345.0f;
        mp_hook_view_copy(info, w->saved, data, 0);
    } else {
        for (size_t i = 0; i < info->numel; i++)
            if (isfinite(data[i])) data[i] += 0.05f * (float)((i % 7) + 1);
    }
    return 0;
}

static int abort_cb(void *user, const mp_hook_info *info, float *data) {
    (void)user;
    (void)data;
    mp_error(MP_ERR_HOOK, "stop at %s", info->name);
    return 1;
}

static void test_writable(const mp_model *m) {
    const mp_config *c = &m->cfg;
    const int B = 2, T = 9, V = c->vocab;
    int toks[18];
    for (int i = 0; i < B * T; i++) toks[i] = (i * 5 + 1) % V;
    size_t nl = (size_t)B * T * V;
    float *base = malloc(nl * sizeof(float)), *out = malloc(nl * sizeof(float));
    mp_forward_params fp = mp_forward_params_default();
    fp.q_block = 4; /* attention maps arrive in three blocks */
    CHECK(mp_model_forward(m, toks, B, T, &fp, base) == MP_OK, "%s", mp_last_error());
    char name[128];
    int tested = 0;
    for (int l = -1; l < c->n_layer; l++)
        for (int i = 0; i < MP_HOOK_COUNT; i++) {
            if ((l >= 0) != (mp_hook_per_layer[i] != 0) || !mp_hook_exists(c, (mp_hook_id)i)) continue;
            mp_hook_name((mp_hook_id)i, l, name, sizeof name);
            /* the per-head input path projects head by head: its sums round
             * otherwise than the fused product's (every other point is exact) */
            const int split = i == MP_HOOK_ATTN_IN || i == MP_HOOK_Q_INPUT || i == MP_HOOK_K_INPUT ||
                              i == MP_HOOK_V_INPUT;
            writer w = {0};
            mp_hooks *hs = mp_hooks_new(c);
            CHECK(mp_hooks_add(hs, name, write_cb, &w) == MP_OK, "%s", mp_last_error());
            fp.hooks = hs;
            CHECK(mp_model_forward(m, toks, B, T, &fp, out) == MP_OK, "%s", mp_last_error());
            CHECK(split ? tu_max_abs_diff(out, base, nl) <= 1e-5 : memcmp(out, base, nl * sizeof(float)) == 0,
                  "%s: a read-only hook changed the logits", name);
            int expect_calls = mp_hook_shape_kind[i] == MP_SHAPE_BHTS ? 3 : 1;
            CHECK(w.calls == expect_calls, "%s: fired %d times, expected %d", name, w.calls, expect_calls);
            w.mode = 1;
            CHECK(mp_model_forward(m, toks, B, T, &fp, out) == MP_OK, "%s", mp_last_error());
            CHECK(split ? tu_max_abs_diff(out, base, nl) <= 1e-5 : memcmp(out, base, nl * sizeof(float)) == 0,
                  "%s: writing back the captured values changed logits", name);
            w.mode = 2;
            CHECK(mp_model_forward(m, toks, B, T, &fp, out) == MP_OK, "%s", mp_last_error());
            double d = tu_max_abs_diff(out, base, nl);
            CHECK(d > 1e-4, "%s: writing the hook did not change the logits (max diff %.3g)", name, d);
            free(w.saved);
            mp_hooks_free(hs);
            tested++;
        }
    printf("writable hook points tested: %d\n", tested);
    /* a callback can abort the pass with its own message */
    mp_hooks *hs = mp_hooks_new(c);
    mp_hooks_add(hs, "blocks.1.hook_resid_mid", abort_cb, NULL);
    fp.hooks = hs;
    mp_status st = mp_model_forward(m, toks, B, T, &fp, out);
    CHECK(st == MP_ERR_HOOK && strstr(mp_last_error(), "stop at blocks.1.hook_resid_mid"), "abort: %s",
          mp_last_error());
    mp_hooks_free(hs);
    /* bad tokens are refused with their position */
    toks[3] = V;
    fp.hooks = NULL;
    st = mp_model_forward(m, toks, B, T, &fp, out);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), "outside the vocabulary"), "bad token: %s", mp_last_error());
    free(base);
    free(out);
}

static int count_cb(void *user, const mp_hook_info *info, float *data) {
    (void)info, (void)data;
    ++*(int *)user;
    return 0;
}

/* Readers (mp_hooks_add_reader_at): a point is read-only while every callback
 * there is one; a writer added beside them, or nothing registered, is not;
 * clearing forgets both; the readers fire like any callback (the CPU forward
 * hands them the tensor in place). */
static void test_readers(const mp_model *m) {
    const mp_config *c = &m->cfg;
    mp_hooks *hs = mp_hooks_new(c);
    int n = 0, other = 0;
    CHECK(!mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 0), "nothing registered: not read-only");
    CHECK(mp_hooks_add_reader_at(hs, MP_HOOK_RESID_PRE, 0, count_cb, &n) == MP_OK &&
              mp_hooks_add_reader_at(hs, MP_HOOK_RESID_PRE, 0, count_cb, &n) == MP_OK,
          "%s", mp_last_error());
    CHECK(mp_hooks_active(hs, MP_HOOK_RESID_PRE, 0) && mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 0),
          "two readers: active and read-only");
    CHECK(!mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 1), "another layer: not read-only");
    CHECK(mp_hooks_add_at(hs, MP_HOOK_RESID_PRE, 0, count_cb, &n) == MP_OK, "%s", mp_last_error());
    CHECK(mp_hooks_active(hs, MP_HOOK_RESID_PRE, 0) && !mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 0),
          "a writer beside the readers: not read-only");
    {
        mp_hook_fn fns[2];
        void *users[2];
        mp_hooks_add_at(hs, MP_HOOK_RESID_MID, 0, count_cb, &other);
        CHECK(mp_hooks_at(hs, MP_HOOK_RESID_PRE, 0, fns, users, 2) == 3 && fns[0] == count_cb && users[1] == &n,
              "mp_hooks_at: three callbacks at resid_pre 0, the first two listed");
        CHECK(mp_hooks_at(hs, MP_HOOK_RESID_MID, 0, fns, users, 2) == 1 && users[0] == &other &&
                  mp_hooks_at(hs, MP_HOOK_RESID_POST, 0, fns, users, 2) == 0 && mp_hooks_at(NULL, MP_HOOK_RESID_PRE, 0,
                                                                                            fns, users, 2) == 0,
              "mp_hooks_at: one at resid_mid, none at resid_post or in no registry");
    }
    CHECK(mp_hooks_add_reader_at(hs, MP_HOOK_RESID_PRE, c->n_layer, count_cb, &n) == MP_ERR_ARG,
          "a reader at a layer past the model is refused");
    int toks[6] = {1, 2, 3, 4, 5, 6};
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = hs;
    float *out = malloc((size_t)6 * c->vocab * sizeof(float));
    CHECK(out && mp_model_forward(m, toks, 1, 6, &fp, out) == MP_OK && n == 3 && other == 1,
          "readers and writer fired %d times (3), resid_mid's %d (1)", n, other);
    mp_hooks_clear(hs);
    CHECK(!mp_hooks_active(hs, MP_HOOK_RESID_PRE, 0) && !mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 0), "cleared");
    CHECK(mp_hooks_add_reader_at(hs, MP_HOOK_RESID_PRE, 0, count_cb, &n) == MP_OK &&
              mp_hooks_readonly(hs, MP_HOOK_RESID_PRE, 0), "a reader after clearing: read-only");
    free(out);
    mp_hooks_free(hs);
}

int main(void) {
    mp_init();
    mp_model *m;
    mp_status st = mp_model_load_llama2c(&m, tu_data("ref_gqa_untied.bin"));
    CHECK(st == MP_OK, "%s", mp_last_error());
    if (st) return tu_finish("test_hooks");
    test_names(&m->cfg);
    test_writable(m);
    test_readers(m);
    mp_model_free(m);
    return tu_finish("test_hooks");
}
