/* test_ragged.c — the C side of padded batches (model.h, runtime/ragged.c):
 * an all-ones mask gives the unmasked forward's logits bit for bit (the mask
 * path degenerates exactly, and the unmasked path is the old one); the
 * position ids of left / right / holed masks against hand-written ones; a
 * right-padded row's real logits equal the unpadded batch's for every
 * positional scheme, with a KV cache decoding the row afterwards; a mask
 * over a KV cache (prefill, then a step whose mask covers the cached keys)
 * against the padded batch run at once; training mode with a mask; the
 * refusals (ssmax or asentmax, a value other than 0/1), each naming the
 * problem. (The row-against-single-
 * run golden checks, hooks and loss are in tests/lua/test_ragged.lua.) */
#include "model.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static mp_config cfg_of(mp_pos_kind pos) {
    mp_config c = mp_config_default();
    c.d_model = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.d_head = 4;
    c.d_mlp = 32;
    c.vocab = 24;
    c.ctx = 16;
    c.pos = pos;
    if (pos == MP_POS_LEARNED) {
        c.norm = MP_NORM_LAYER;
        c.mlp = MP_MLP_GELU;
    }
    return c;
}

enum { B = 2, T = 6 };
static const int TOK[B * T] = {1, 5, 9, 2, 23, 7, 7, 0, 11, 3, 19, 4};

static void expect_refused(mp_status st, const char *msg, const char *label) {
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), msg), "%s: status %d, '%s' (expected '%s')", label, (int)st,
          mp_last_error(), msg);
}

int main(void) {
    mp_init();
    /* position ids */
    {
        const int mask[3 * 5] = {0, 0, 1, 1, 1, /**/ 1, 1, 1, 0, 0, /**/ 1, 0, 1, 1, 0};
        const int want[3 * 5] = {0, 0, 0, 1, 2, /**/ 0, 1, 2, 0, 0, /**/ 0, 0, 1, 2, 0};
        int pos[15];
        mp_mask_positions(mask, 3, 5, pos);
        CHECK(memcmp(pos, want, sizeof pos) == 0, "position ids of left, right and holed rows");
        CHECK(mp_mask_last_real(mask, 5) == 4 && mp_mask_last_real(mask + 5, 5) == 2 &&
                  mp_mask_last_real(mask + 10, 5) == 3, "last real tokens");
    }
    const mp_pos_kind kinds[] = {MP_POS_ROPE, MP_POS_LEARNED, MP_POS_NONE, MP_POS_ROPE_ID};
    const size_t n = (size_t)B * T * 24;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        mp_config c = cfg_of(kinds[k]);
        mp_model *m = NULL;
        if (mp_model_new_random(&m, &c, 11 + k, 0.4f) != MP_OK) {
            CHECK(0, "%s", mp_last_error());
            continue;
        }
        const char *name = mp_pos_name(kinds[k]);
        mp_forward_params fp = mp_forward_params_default();
        CHECK(mp_model_forward(m, TOK, B, T, &fp, ref) == MP_OK, "%s", mp_last_error());
        int ones[B * T];
        for (int i = 0; i < B * T; i++) ones[i] = 1;
        fp.attn_mask = ones;
        CHECK(mp_model_forward(m, TOK, B, T, &fp, got) == MP_OK, "%s", mp_last_error());
        CHECK(memcmp(ref, got, n * sizeof(float)) == 0, "%s: an all-ones mask changes the logits", name);
        /* right padding of row 1 after 4 tokens: its first 4 logits are the
         * unpadded ones (causal: the pads come later), row 0 is untouched */
        int right[B * T] = {1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, 0};
        int tok2[B * T];
        memcpy(tok2, TOK, sizeof tok2);
        tok2[10] = tok2[11] = 2; /* pads */
        fp.attn_mask = right;
        CHECK(mp_model_forward(m, tok2, B, T, &fp, got) == MP_OK, "%s", mp_last_error());
        CHECK(tu_max_abs_diff(ref, got, (size_t)(T + 4) * 24) == 0.0, "%s: right padding moves the real rows", name);
        for (size_t i = (size_t)(T + 4) * 24; i < n; i++)
            CHECK(isfinite(got[i]), "%s: a pad position's logit %zu is not finite", name, i);
        /* with a KV cache (the mask covers cached and new keys, [B, len + T]):
         * the prefill gives the cacheless logits, and a decoding step after
         * the padded rows gives the logits of the longer padded batch run
         * at once (row 1 is padded in the middle then: its pads stay masked) */
        const int T1 = T + 1;
        int tok3[B * T1], mask3[B * T1];
        for (int b = 0; b < B; b++) {
            memcpy(tok3 + b * T1, tok2 + b * T, T * sizeof(int));
            memcpy(mask3 + b * T1, right + b * T, T * sizeof(int));
            tok3[b * T1 + T] = 4 + b;
            mask3[b * T1 + T] = 1;
        }
        float *full = malloc((size_t)B * T1 * 24 * sizeof(float)), *step = malloc((size_t)B * 24 * sizeof(float));
        fp.attn_mask = mask3;
        CHECK(mp_model_forward(m, tok3, B, T1, &fp, full) == MP_OK, "%s", mp_last_error());
        mp_kvcache kv;
        CHECK(mp_kvcache_init(&kv, &c, B, T1) == MP_OK, "%s", mp_last_error());
        fp.cache = &kv;
        fp.attn_mask = right;
        CHECK(mp_model_forward(m, tok2, B, T, &fp, ref) == MP_OK, "%s", mp_last_error());
        CHECK(tu_max_abs_diff(ref, got, n) <= 1e-5, "%s: a masked prefill over a KV cache differs", name);
        const int next[B] = {tok3[T], tok3[T1 + T]};
        fp.attn_mask = mask3; /* all T + 1 keys */
        CHECK(mp_model_forward(m, next, B, 1, &fp, step) == MP_OK, "%s", mp_last_error());
        for (int b = 0; b < B; b++)
            CHECK(tu_max_abs_diff(step + b * 24, full + ((size_t)b * T1 + T) * 24, 24) <= 1e-5,
                  "%s: row %d's decoding step over a masked cache differs from the padded batch", name, b);
        mp_kvcache_free(&kv);
        fp.cache = NULL;
        free(full);
        free(step);
        /* training mode (an activation store) takes the mask: the stored logits are the masked forward's */
        mp_acts acts;
        CHECK(mp_acts_init(&acts, &c, B, T) == MP_OK, "%s", mp_last_error());
        fp.acts = &acts;
        fp.attn_mask = right;
        CHECK(mp_model_forward(m, tok2, B, T, &fp, NULL) == MP_OK, "%s", mp_last_error());
        CHECK(tu_max_abs_diff(acts.logits, got, n) <= 1e-5, "%s: training mode with a mask differs", name);
        mp_acts_free(&acts);
        fp.acts = NULL;
        right[3] = 2;
        expect_refused(mp_model_forward(m, tok2, B, T, &fp, got), "attention_mask[1][4] = 2", name);
        mp_model_free(m);
    }
    for (int a = 0; a < 2; a++) {
        mp_config c = cfg_of(MP_POS_ROPE);
        c.attn = a ? MP_ATTN_ASENTMAX : MP_ATTN_SSMAX;
        if (a) c.attn_alpha = 1.5f;
        mp_model *m = NULL;
        if (mp_model_new_random(&m, &c, 3, 0.4f) != MP_OK) {
            CHECK(0, "%s", mp_last_error());
            continue;
        }
        int ones[B * T];
        for (int i = 0; i < B * T; i++) ones[i] = 1;
        mp_forward_params fp = mp_forward_params_default();
        fp.attn_mask = ones;
        expect_refused(mp_model_forward(m, TOK, B, T, &fp, got), a ? "not supported with attn = asentmax"
                                                                    : "not supported with attn = ssmax", "variant");
        mp_model_free(m);
    }
    free(ref);
    free(got);
    return tu_finish("test_ragged_c");
}
