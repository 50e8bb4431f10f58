/* test_sae_view.c — the SAE feature view: analyze/feat_top.c's streaming
 * top-n contexts against a brute-force sort of every token (ties, NaN,
 * padding, batches of varying sizes, the column API), a planted SAE feature
 * (runtime/sae.c) that fires on one token id only, and the figure of its
 * contexts (plots/feature_view.c): written as PNG / SVG / PDF, the PNG read
 * back by cairo at the expected size with the full shade drawn. */
#include "feat_top.h"
#include "feature_view.h"
#include "sae.h"
#include "testutil.h"

#include <cairo.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct {
    float v;
    int64_t seq;
    int pos;
} ref_ctx;

/* The reference order: value descending, then (seq, pos) ascending. */
static int ref_cmp(const void *a, const void *b) {
    const ref_ctx *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

enum { NSEQ = 37, T = 23, DSAE = 50, TOP = 9, BEF = 3, AFT = 2 };

/* Checks the tracker slot j (feature f) against a sort of every token. */
static void check_against_sort(const mp_feat_top *t, int j, int f, const float *acts, const unsigned char *valid,
                               float floor, const char *label) {
    ref_ctx *all = malloc(sizeof *all * NSEQ * T);
    int n = 0;
    int64_t ntok = 0, nact = 0;
    double mx = NAN, sum = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int p = 0; p < T; p++) {
            size_t r = (size_t)s * T + p;
            if (valid && !valid[r]) continue;
            float v = acts[r * DSAE + f];
            ntok++;
            if (isnan(v)) continue;
            sum += v;
            if (v > 0) nact++;
            if (isnan(mx) || v > mx) mx = v;
            if (v > floor) all[n++] = (ref_ctx){v, s, p};
        }
    qsort(all, (size_t)n, sizeof *all, ref_cmp);
    mp_feat_ctx got[TOP];
    int k = mp_feat_top_sorted(t, j, got);
    CHECK(k == (n < TOP ? n : TOP), "%s feature %d: %d contexts, expected %d", label, f, k, n < TOP ? n : TOP);
    for (int i = 0; i < k && i < n; i++) {
        CHECK(got[i].value == all[i].v && got[i].seq == all[i].seq && got[i].pos == all[i].pos,
              "%s feature %d rank %d: (%g, seq %lld, pos %d) vs sort (%g, seq %lld, pos %d)", label, f, i,
              got[i].value, (long long)got[i].seq, got[i].pos, all[i].v, (long long)all[i].seq, all[i].pos);
        for (int w = -BEF; w <= AFT; w++) {
            int q = got[i].pos + w;
            size_t r = (size_t)got[i].seq * T + q;
            float want = (q < 0 || q >= T || (valid && !valid[r])) ? NAN : acts[r * DSAE + f];
            float have = got[i].window[w + BEF];
            CHECK((isnan(want) && isnan(have)) || want == have, "%s feature %d rank %d window %+d: %g vs %g", label,
                  f, i, w, have, want);
        }
    }
    mp_feat_stats st = mp_feat_top_stats(t, j);
    CHECK(st.n_tokens == ntok && st.n_active == nact, "%s feature %d: tokens %lld/%lld active %lld/%lld", label, f,
          (long long)st.n_tokens, (long long)ntok, (long long)st.n_active, (long long)nact);
    CHECK((isnan(mx) && isnan(st.max)) || st.max == mx, "%s feature %d: max %g vs %g", label, f, st.max, mx);
    CHECK_NEAR(st.sum, sum, 1e-9 * (1 + fabs(sum)), "%s feature %d: sum", label, f);
    free(all);
}

static void test_brute_force(void) {
    /* Quantised values (many ties), negatives, zeros, a few NaN; feature 49
     * almost never positive (fewer contexts than TOP). */
    float *acts = malloc(sizeof(float) * NSEQ * T * DSAE);
    unsigned char *valid = malloc(NSEQ * T);
    for (int r = 0; r < NSEQ * T; r++) {
        valid[r] = urand() > 0.1;
        for (int f = 0; f < DSAE; f++) {
            float v = (float)(floor(urand() * 12) / 4 - 1);
            if (f == 49) v = urand() < 0.01 ? 2.0f : -1.0f;
            if (urand() < 0.01) v = NAN;
            acts[(size_t)r * DSAE + f] = v;
        }
    }
    const int feats[] = {7, 0, 49, 13, 48};
    const int nf = 5;
    const int batches[] = {1, 5, 13, 18}; /* 37 sequences */
    for (int variant = 0; variant < 3; variant++) {
        const unsigned char *vm = variant == 1 ? valid : NULL;
        float floor = variant == 2 ? -INFINITY : 0.0f;
        mp_feat_top *t = NULL, *tc = NULL;
        CHECK(mp_feat_top_new(&t, feats, nf, DSAE, TOP, BEF, AFT, floor) == MP_OK, "new");
        CHECK(mp_feat_top_new(&tc, feats, nf, DSAE, TOP, BEF, AFT, floor) == MP_OK, "new (columns)");
        if (!t || !tc) return;
        int s0 = 0;
        for (int b = 0; b < 4; b++) {
            const float *a = acts + (size_t)s0 * T * DSAE;
            const unsigned char *v = vm ? vm + (size_t)s0 * T : NULL;
            CHECK(mp_feat_top_add(t, a, DSAE, batches[b], T, s0, v) == MP_OK, "add batch %d", b);
            for (int j = 0; j < nf; j++)
                CHECK(mp_feat_top_add_column(tc, j, a + feats[j], DSAE, batches[b], T, s0, v) == MP_OK, "add column");
            s0 += batches[b];
        }
        const char *label = variant == 0 ? "plain" : variant == 1 ? "padded" : "floor -inf";
        for (int j = 0; j < nf; j++) {
            CHECK(mp_feat_top_feature(t, j) == feats[j], "slot %d", j);
            check_against_sort(t, j, feats[j], acts, vm, floor, label);
            check_against_sort(tc, j, feats[j], acts, vm, floor, "columns");
        }
        mp_feat_top_free(t);
        mp_feat_top_free(tc);
    }
    /* bad arguments */
    mp_feat_top *t = NULL;
    const int dup[] = {3, 3}, out[] = {50};
    CHECK(mp_feat_top_new(&t, dup, 2, DSAE, TOP, BEF, AFT, 0) == MP_ERR_ARG && !t, "a feature twice");
    CHECK(strstr(mp_last_error(), "listed twice") != NULL, "message: %s", mp_last_error());
    CHECK(mp_feat_top_new(&t, out, 1, DSAE, TOP, BEF, AFT, 0) == MP_ERR_ARG && !t, "feature out of range");
    CHECK(strstr(mp_last_error(), "outside 0..49") != NULL, "message: %s", mp_last_error());
    CHECK(mp_feat_top_new(&t, feats, 1, DSAE, 0, BEF, AFT, 0) == MP_ERR_ARG, "top 0");
    CHECK(mp_feat_top_new(&t, feats, 1, DSAE, 1, -1, AFT, 0) == MP_ERR_ARG, "negative window");
    CHECK(mp_feat_top_new(&t, feats, 1, DSAE, 2, 1, 1, 0) == MP_OK, "new");
    CHECK(mp_feat_top_add(t, acts, DSAE - 1, 1, T, 0, NULL) == MP_ERR_ARG, "row stride below d_sae");
    mp_feat_top_free(t);
    free(acts);
    free(valid);
}

/* ---- the planted feature and its figure ---- */
enum { V = 12, PLANT = 5, PSEQ = 40, PT = 30, PDSAE = 6, PTOP = 8 };

static const char *const words[V] = {" the", " cat", "\n", " sat", " on", " mat", "\t", "&<>", "\xff\xfe",
                                     "",     " a",   "."};

static void test_planted_and_figure(void) {
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, MP_SAE_STANDARD, V, PDSAE, 0) == MP_OK, "sae");
    if (!s) return;
    /* feature 0 reads coordinate PLANT only; the others random */
    for (int i = 0; i < V; i++) {
        s->W_enc[(size_t)i * PDSAE + 0] = i == PLANT ? 1.0f : 0.0f;
        for (int f = 1; f < PDSAE; f++) s->W_enc[(size_t)i * PDSAE + f] = (float)(urand() - 0.5);
    }
    int ids[PSEQ * PT];
    float *x = calloc((size_t)PSEQ * PT * V, sizeof(float));
    float *acts = malloc(sizeof(float) * PSEQ * PT * PDSAE);
    int n_plant = 0;
    float top_scale = 0;
    for (int r = 0; r < PSEQ * PT; r++) {
        ids[r] = (int)(urand() * V);
        float sc = 1.0f + 0.05f * (float)((r * 7) % 23);
        x[(size_t)r * V + ids[r]] = sc; /* a one-hot "embedding", scaled */
        if (ids[r] == PLANT) {
            n_plant++;
            if (sc > top_scale) top_scale = sc;
        }
    }
    CHECK(n_plant >= PTOP, "enough planted tokens (%d)", n_plant);
    CHECK(mp_sae_encode(s, x, PSEQ * PT, acts, NULL) == MP_OK, "encode");
    const int feats[] = {0, 3};
    mp_feat_top *t = NULL;
    CHECK(mp_feat_top_new(&t, feats, 2, PDSAE, PTOP, 12, 4, 0) == MP_OK, "new");
    if (!t) return;
    for (int s0 = 0; s0 < PSEQ; s0 += 16) {
        int nb = PSEQ - s0 < 16 ? PSEQ - s0 : 16;
        CHECK(mp_feat_top_add(t, acts + (size_t)s0 * PT * PDSAE, PDSAE, nb, PT, s0, NULL) == MP_OK, "add");
    }
    mp_feat_ctx ctx[2][PTOP];
    int nc[2];
    for (int j = 0; j < 2; j++) nc[j] = mp_feat_top_sorted(t, j, ctx[j]);
    CHECK(nc[0] == PTOP, "planted feature: %d contexts", nc[0]);
    for (int c = 0; c < nc[0]; c++) {
        int id = ids[ctx[0][c].seq * PT + ctx[0][c].pos];
        CHECK(id == PLANT, "planted feature: context %d's max token is %d, not %d", c, id, PLANT);
        for (int w = 0; w < 17; w++) {
            int q = ctx[0][c].pos - 12 + w;
            if (q < 0 || q >= PT) {
                CHECK(isnan(ctx[0][c].window[w]), "past the sequence: NaN");
                continue;
            }
            int qid = ids[ctx[0][c].seq * PT + q];
            CHECK((ctx[0][c].window[w] > 0) == (qid == PLANT), "the feature fires at token %d: %g", qid,
                  ctx[0][c].window[w]);
        }
    }
    mp_feat_stats st = mp_feat_top_stats(t, 0);
    CHECK(st.n_active == n_plant && st.n_tokens == PSEQ * PT, "planted density %lld / %lld vs %d / %d",
          (long long)st.n_active, (long long)st.n_tokens, n_plant, PSEQ * PT);
    CHECK_NEAR(st.max, top_scale, 0, "planted max");
    CHECK_NEAR(ctx[0][0].value, top_scale, 0, "best context is the max");

    /* the figure */
    mp_fview_feature fv[2];
    const char *tok[2][PTOP * 17];
    float fa[2][PTOP * 17];
    for (int j = 0; j < 2; j++) {
        mp_feat_stats fs = mp_feat_top_stats(t, j);
        fv[j] = (mp_fview_feature){feats[j], (double)fs.n_active / fs.n_tokens, fs.max, nc[j], 17, 12, tok[j], fa[j]};
        for (int c = 0; c < nc[j]; c++)
            for (int w = 0; w < 17; w++) {
                int q = ctx[j][c].pos - 12 + w;
                tok[j][c * 17 + w] = q < 0 || q >= PT ? NULL : words[ids[ctx[j][c].seq * PT + q]];
                fa[j][c * 17 + w] = ctx[j][c].window[w];
            }
    }
    mp_fview_params p = mp_fview_params_default();
    p.title = "Planted feature (fires on \" mat\" only) & a random one";
    double w0, h0, w, h;
    CHECK(mp_fview_size(fv, 2, &p, &w0, &h0) == MP_OK, "natural size");
    p.width_pt = 460;
    CHECK(mp_fview_size(fv, 2, &p, &w, &h) == MP_OK, "size");
    CHECK_NEAR(w, 460, 1e-9, "width as asked");
    CHECK_NEAR(h / w, h0 / w0, 1e-9, "aspect kept when scaled");
    const char *png = "test_sae_view.png";
    double sw, sh;
    CHECK(mp_fview_save(fv, 2, &p, png, 144, &sw, &sh) == MP_OK, "save png: %s", mp_last_error());
    CHECK(sw == w && sh == h, "saved size %g x %g vs %g x %g", sw, sh, w, h);
    cairo_surface_t *img = cairo_image_surface_create_from_png(png);
    CHECK(cairo_surface_status(img) == CAIRO_STATUS_SUCCESS, "png reads back");
    if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
        int pw = cairo_image_surface_get_width(img), ph = cairo_image_surface_get_height(img);
        CHECK(pw == (int)lround(w * 2) && ph == (int)lround(h * 2), "png %d x %d, expected %ld x %ld", pw, ph,
              lround(w * 2), lround(h * 2));
        /* the best context's max token is shaded with the full colour */
        const unsigned char *d = cairo_image_surface_get_data(img);
        int stride = cairo_image_surface_get_stride(img), full = 0, white = 0;
        for (int y = 0; y < ph; y++)
            for (int xx = 0; xx < pw; xx++) {
                uint32_t px = *(const uint32_t *)(d + (size_t)y * stride + 4 * (size_t)xx);
                double r = ((px >> 16) & 255) / 255.0, g = ((px >> 8) & 255) / 255.0, b = (px & 255) / 255.0;
                if (fabs(r - p.color.r) < 0.02 && fabs(g - p.color.g) < 0.02 && fabs(b - p.color.b) < 0.02) full++;
                if (r == 1 && g == 1 && b == 1) white++;
            }
        CHECK(full > 50, "pixels of the full shade: %d", full);
        CHECK(white > pw * ph / 2, "mostly white background (%d of %d)", white, pw * ph);
    }
    cairo_surface_destroy(img);
    CHECK(mp_fview_save(fv, 2, &p, "test_sae_view.svg", 72, NULL, NULL) == MP_OK, "save svg");
    CHECK(mp_fview_save(fv, 2, &p, "test_sae_view.pdf", 72, NULL, NULL) == MP_OK, "save pdf");
    FILE *fp = fopen("test_sae_view.svg", "rb");
    char head[8] = {0};
    CHECK(fp && fread(head, 1, 5, fp) == 5 && memcmp(head, "<?xml", 5) == 0, "svg header");
    if (fp) fclose(fp);
    fp = fopen("test_sae_view.pdf", "rb");
    CHECK(fp && fread(head, 1, 5, fp) == 5 && memcmp(head, "%PDF-", 5) == 0, "pdf header");
    if (fp) fclose(fp);
    unlink("test_sae_view.bad");
    CHECK(mp_fview_save(fv, 2, &p, "test_sae_view.bad", 72, NULL, NULL) == MP_ERR_ARG, "unknown extension");
    CHECK(access("test_sae_view.bad", F_OK) != 0, "nothing written for a bad extension");
    fv[0].center = 17;
    CHECK(mp_fview_size(fv, 2, &p, &w, &h) == MP_ERR_ARG && strstr(mp_last_error(), "center"), "bad center: %s",
          mp_last_error());
    mp_feat_top_free(t);
    mp_sae_free(s);
    free(x);
    free(acts);
}

int main(void) {
    test_brute_force();
    test_planted_and_figure();
    return tu_finish("test_sae_view");
}
