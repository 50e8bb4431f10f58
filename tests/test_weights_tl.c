/* test_weights_tl.c — TransformerLens's weight layout (runtime/weights_tl.h)
 * against the raw parameter arrays: each TL tensor read element by element
 * from mp_params with the offsets of model.h's layout ([L, out, in] per
 * weight, [L, n] per bias) written out here from the config's dims, on a GQA
 * SwiGLU model with every bias and on a GELU model with learned positions;
 * writes (one layer, all layers) land where the same offsets say; and the
 * refusals (unknown names, b_U, what the config lacks, repeated GQA heads,
 * a layer out of range) name the weight and the reason. */
#include "model.h"
#include "weights_tl.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* Reads `name` (layer l, or all layers stacked for l < 0) into a new buffer;
 * checks the shape against want[nd]. */
static float *get(const mp_model *m, const char *name, int l, int nd, const int64_t *want) {
    mp_tl_weight w;
    mp_status st = mp_tl_weight_info(m, name, &w);
    CHECK(st == MP_OK, "%s: info: %s", name, mp_last_error());
    if (st) return NULL;
    int64_t shape[4];
    int n = mp_tl_weight_shape(m, &w, l, shape);
    int same = n == nd;
    for (int i = 0; same && i < nd; i++) same = shape[i] == want[i];
    CHECK(same, "%s: shape of %d dims [%lld, %lld, ...]", name, n, (long long)shape[0], (long long)shape[1]);
    size_t numel = 1;
    for (int i = 0; i < n; i++) numel *= (size_t)shape[i];
    float *out = malloc(numel * sizeof(float));
    st = mp_tl_weight_get(m, &w, l, out);
    CHECK(st == MP_OK, "%s: get: %s", name, mp_last_error());
    return out;
}

static void expect_error(const mp_model *m, const char *name, const char *msg) {
    mp_tl_weight w;
    mp_status st = mp_tl_weight_info(m, name, &w);
    CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), msg), "%s: status %d, '%s' (expected '%s')", name, (int)st,
          mp_last_error(), msg);
}

int main(void) {
    mp_init();
    enum { D = 8, L = 3, H = 4, K = 2, Dh = 6, M = 10, V = 11, CTX = 7, REP = H / K };
    mp_config c = mp_config_default();
    c.d_model = D, c.n_layer = L, c.n_head = H, c.n_kv_head = K, c.d_head = Dh, c.d_mlp = M, c.vocab = V, c.ctx = CTX;
    c.qkv_bias = 1, c.linear_bias = 1, c.mlp = MP_MLP_SWIGLU, c.tied = 0;
    mp_model *m = NULL;
    if (mp_model_new_random(&m, &c, 7, 0.5f) != MP_OK) {
        fprintf(stderr, "model: %s\n", mp_last_error());
        return 1;
    }
    const mp_params *p = &m->p;
    /* biases start at 0: give them values to find */
    for (size_t i = 0; i < (size_t)L * K * Dh; i++) p->bk[i] = 0.25f * (float)i + 1, p->bv[i] = -0.5f * (float)i;
    for (size_t i = 0; i < (size_t)L * H * Dh; i++) p->bq[i] = 0.125f * (float)i;
    for (size_t i = 0; i < (size_t)L * M; i++) p->b1[i] = (float)i, p->b3[i] = 100.0f + (float)i;
    for (size_t i = 0; i < (size_t)L * D; i++) p->b2[i] = -(float)i, p->bo[i] = 1000.0f + (float)i;
    int bad = 0;
#define EXPECT_EQ(got, want) do { if ((got) != (want)) bad++; } while (0)
    { /* W_Q [H, D, Dh], layer 2: wq[l][(h Dh + e)][d] */
        const int l = 2;
        int64_t s[] = {H, D, Dh};
        float *t = get(m, "W_Q", l, 3, s);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++)
                for (int e = 0; e < Dh; e++)
                    EXPECT_EQ(t[(h * D + d) * Dh + e], p->wq[(size_t)l * H * Dh * D + (size_t)(h * Dh + e) * D + d]);
        CHECK(bad == 0, "W_Q: %d elements differ", bad);
        free(t);
    }
    { /* W_K [H, D, Dh] repeats each of the K heads over H / K query heads; _W_K [K, D, Dh] does not */
        const int l = 1;
        int64_t s[] = {H, D, Dh}, su[] = {K, D, Dh};
        float *t = get(m, "W_K", l, 3, s), *u = get(m, "_W_K", l, 3, su);
        bad = 0;
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++)
                for (int e = 0; e < Dh; e++)
                    EXPECT_EQ(t[(h * D + d) * Dh + e], p->wk[(size_t)l * K * Dh * D + (size_t)((h / REP) * Dh + e) * D + d]);
        for (int h = 0; h < K; h++)
            for (int d = 0; d < D; d++)
                for (int e = 0; e < Dh; e++)
                    EXPECT_EQ(u[(h * D + d) * Dh + e], p->wk[(size_t)l * K * Dh * D + (size_t)(h * Dh + e) * D + d]);
        CHECK(bad == 0, "W_K / _W_K: %d elements differ", bad);
        free(t);
        free(u);
    }
    { /* _W_V, all layers stacked [L, K, D, Dh] */
        int64_t s[] = {L, K, D, Dh};
        float *t = get(m, "_W_V", -1, 4, s);
        bad = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < K; h++)
                for (int d = 0; d < D; d++)
                    for (int e = 0; e < Dh; e++)
                        EXPECT_EQ(t[(((size_t)l * K + h) * D + d) * Dh + e],
                                  p->wv[(size_t)l * K * Dh * D + (size_t)(h * Dh + e) * D + d]);
        CHECK(bad == 0, "_W_V (all layers): %d elements differ", bad);
        free(t);
    }
    { /* W_O [H, Dh, D]: wo[l][d][h Dh + e] */
        const int l = 1;
        int64_t s[] = {H, Dh, D};
        float *t = get(m, "W_O", l, 3, s);
        bad = 0;
        for (int h = 0; h < H; h++)
            for (int e = 0; e < Dh; e++)
                for (int d = 0; d < D; d++)
                    EXPECT_EQ(t[(h * Dh + e) * D + d], p->wo[(size_t)l * D * H * Dh + (size_t)d * H * Dh + h * Dh + e]);
        CHECK(bad == 0, "W_O: %d elements differ", bad);
        free(t);
    }
    { /* SwiGLU: W_in [D, M] is the up projection w3 transposed, W_gate w1's; W_out [M, D] is w2's */
        const int l = 2;
        int64_t s[] = {D, M}, so[] = {M, D};
        float *in = get(m, "W_in", l, 2, s), *gate = get(m, "W_gate", l, 2, s), *out = get(m, "W_out", l, 2, so);
        bad = 0;
        for (int d = 0; d < D; d++)
            for (int j = 0; j < M; j++) {
                EXPECT_EQ(in[d * M + j], p->w3[(size_t)l * M * D + (size_t)j * D + d]);
                EXPECT_EQ(gate[d * M + j], p->w1[(size_t)l * M * D + (size_t)j * D + d]);
                EXPECT_EQ(out[j * D + d], p->w2[(size_t)l * D * M + (size_t)d * M + j]);
            }
        CHECK(bad == 0, "W_in / W_gate / W_out: %d elements differ", bad);
        free(in);
        free(gate);
        free(out);
    }
    { /* W_E [V, D] as stored, W_U [D, V] the unembedding transposed */
        int64_t se[] = {V, D}, su[] = {D, V};
        float *e = get(m, "W_E", -1, 2, se), *u = get(m, "W_U", -1, 2, su);
        bad = 0;
        for (int v = 0; v < V; v++)
            for (int d = 0; d < D; d++) {
                EXPECT_EQ(e[v * D + d], p->embed[(size_t)v * D + d]);
                EXPECT_EQ(u[d * V + v], p->unembed[(size_t)v * D + d]);
            }
        CHECK(bad == 0, "W_E / W_U: %d elements differ", bad);
        free(e);
        free(u);
    }
    { /* biases: b_Q [H, Dh]; b_K [H, Dh] repeated; _b_V [K, Dh]; b_in = b3 (SwiGLU), b_gate = b1; b_out, b_O */
        const int l = 2;
        int64_t sq[] = {H, Dh}, sk[] = {K, Dh}, sm[] = {M}, sd[] = {D};
        float *bq = get(m, "b_Q", l, 2, sq), *bk = get(m, "b_K", l, 2, sq), *bv = get(m, "_b_V", l, 2, sk);
        float *bi = get(m, "b_in", l, 1, sm), *bg = get(m, "b_gate", l, 1, sm), *bout = get(m, "b_out", l, 1, sd),
              *bo = get(m, "b_O", l, 1, sd);
        bad = 0;
        for (int h = 0; h < H; h++)
            for (int e = 0; e < Dh; e++) {
                EXPECT_EQ(bq[h * Dh + e], 0.125f * (float)(l * H * Dh + h * Dh + e));
                EXPECT_EQ(bk[h * Dh + e], 0.25f * (float)(l * K * Dh + (h / REP) * Dh + e) + 1);
            }
        for (int h = 0; h < K; h++)
            for (int e = 0; e < Dh; e++) EXPECT_EQ(bv[h * Dh + e], -0.5f * (float)(l * K * Dh + h * Dh + e));
        for (int j = 0; j < M; j++) {
            EXPECT_EQ(bi[j], 100.0f + (float)(l * M + j));
            EXPECT_EQ(bg[j], (float)(l * M + j));
        }
        for (int d = 0; d < D; d++) {
            EXPECT_EQ(bout[d], -(float)(l * D + d));
            EXPECT_EQ(bo[d], 1000.0f + (float)(l * D + d));
        }
        CHECK(bad == 0, "biases: %d elements differ", bad);
        free(bq), free(bk), free(bv), free(bi), free(bg), free(bout), free(bo);
    }
    { /* writes: _W_K into layer 1 only; W_out into every layer */
        mp_tl_weight w;
        CHECK(mp_tl_weight_info(m, "_W_K", &w) == MP_OK, "_W_K info");
        float src[K * D * Dh];
        for (int i = 0; i < K * D * Dh; i++) src[i] = 0.5f * (float)i - 7;
        float before0 = p->wk[0], before2 = p->wk[(size_t)2 * K * Dh * D];
        CHECK(mp_tl_weight_set(m, &w, 1, src) == MP_OK, "_W_K set: %s", mp_last_error());
        bad = 0;
        for (int h = 0; h < K; h++)
            for (int d = 0; d < D; d++)
                for (int e = 0; e < Dh; e++)
                    EXPECT_EQ(p->wk[(size_t)1 * K * Dh * D + (size_t)(h * Dh + e) * D + d], src[(h * D + d) * Dh + e]);
        CHECK(bad == 0 && p->wk[0] == before0 && p->wk[(size_t)2 * K * Dh * D] == before2,
              "_W_K set: layer 1 written (%d differ), layers 0 and 2 untouched", bad);
        CHECK(mp_tl_weight_info(m, "W_out", &w) == MP_OK, "W_out info");
        float *all = malloc((size_t)L * M * D * sizeof(float));
        for (int i = 0; i < L * M * D; i++) all[i] = (float)i;
        CHECK(mp_tl_weight_set(m, &w, -1, all) == MP_OK, "W_out set: %s", mp_last_error());
        bad = 0;
        for (int l = 0; l < L; l++)
            for (int j = 0; j < M; j++)
                for (int d = 0; d < D; d++)
                    EXPECT_EQ(p->w2[(size_t)l * D * M + (size_t)d * M + j], all[((size_t)l * M + j) * D + d]);
        CHECK(bad == 0, "W_out set (all layers): %d elements differ", bad);
        free(all);
        /* refusals */
        CHECK(mp_tl_weight_info(m, "W_V", &w) == MP_OK, "W_V info");
        CHECK(mp_tl_weight_set(m, &w, 0, src) == MP_ERR_ARG &&
                  strstr(mp_last_error(), "W_V is repeated over the 2 query heads of each key/value head (n_kv_head = 2)"),
              "W_V set refused: %s", mp_last_error());
        float tmp[H * D * Dh];
        CHECK(mp_tl_weight_info(m, "W_Q", &w) == MP_OK && mp_tl_weight_get(m, &w, L, tmp) == MP_ERR_ARG &&
                  strstr(mp_last_error(), "layer 3 is out of range"), "layer 3: %s", mp_last_error());
    }
    expect_error(m, "W_X", "unknown weight \"W_X\" (W_E, W_pos");
    expect_error(m, "b_U", "b_U: mechprobe models have no unembedding bias");
    expect_error(m, "W_pos", "W_pos: the model has no learned positions (pos = \"rope\")");
    mp_model_free(m);

    /* GELU, learned positions, no biases */
    mp_config g = c;
    g.mlp = MP_MLP_GELU, g.pos = MP_POS_LEARNED, g.norm = MP_NORM_LAYER, g.qkv_bias = 0, g.linear_bias = 0;
    g.n_kv_head = H;
    if (mp_model_new_random(&m, &g, 9, 0.5f) != MP_OK) {
        fprintf(stderr, "model: %s\n", mp_last_error());
        return 1;
    }
    {
        int64_t sp[] = {CTX, D}, s[] = {D, M};
        float *pos = get(m, "W_pos", -1, 2, sp), *in = get(m, "W_in", 0, 2, s);
        bad = 0;
        for (size_t i = 0; i < (size_t)CTX * D; i++) EXPECT_EQ(pos[i], m->p.pos_embed[i]);
        for (int d = 0; d < D; d++)
            for (int j = 0; j < M; j++) EXPECT_EQ(in[d * M + j], m->p.w1[(size_t)j * D + d]);
        CHECK(bad == 0, "GELU: W_pos / W_in (= w1): %d elements differ", bad);
        free(pos);
        free(in);
    }
    expect_error(m, "W_gate", "W_gate: the model's MLP (mlp = \"gelu\") has no gate (SwiGLU only)");
    expect_error(m, "b_K", "b_K: the model has no query/key/value biases (qkv_bias = false)");
    expect_error(m, "b_O", "b_O: the model has no linear-layer biases (linear_bias = false)");
    expect_error(m, "b_in", "b_in: the model has no linear-layer biases (linear_bias = false)");
    mp_model_free(m);
    g.mlp = MP_MLP_NONE, g.d_mlp = 0;
    if (mp_model_new_random(&m, &g, 9, 0.5f) != MP_OK) {
        fprintf(stderr, "model: %s\n", mp_last_error());
        return 1;
    }
    expect_error(m, "W_out", "W_out: the model has no MLP (mlp = \"none\")");
    mp_model_free(m);
    return tu_finish("test_weights_tl");
}
