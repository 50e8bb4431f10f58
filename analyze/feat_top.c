/* feat_top.c — streaming top-n contexts per feature (feat_top.h): one
 * bounded min-heap per feature whose root is the worst context kept, so a
 * new value is compared once and inserted in O(log n); the windows live in
 * fixed slots, only the small heap entries move. Features are independent,
 * so a batch is spread over them with OpenMP. */
#include "feat_top.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float v;
    int pos;
    int64_t seq;
    int slot;   /* its window: win + slot * W */
} entry;

typedef struct {
    int feature;
    int n;          /* entries in the heap */
    entry *heap;    /* [top_n] min-heap: heap[0] is the worst kept */
    float *win;     /* [top_n * W] */
    mp_feat_stats st;
} feat;

struct mp_feat_top {
    int nf, d_sae, top_n, before, after, W;
    float floor;
    feat *f;
};

/* a ranks above b: larger value, then earlier (seq, pos). */
static int better(const entry *a, const entry *b) {
    if (a->v != b->v) return a->v > b->v;
    if (a->seq != b->seq) return a->seq < b->seq;
    return a->pos < b->pos;
}

static void sift_down(entry *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        entry tmp = h[i];
        h[i] = h[w];
        h[w] = tmp;
        i = w;
    }
}

static void sift_up(entry *h, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!better(&h[p], &h[i])) return;
        entry tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

mp_status mp_feat_top_new(mp_feat_top **out, const int *features, int n_features, int d_sae, int top_n, int before,
                          int after, float floor) {
    *out = NULL;
    if (d_sae < 1) return mp_error(MP_ERR_ARG, "feature top contexts: d_sae = %d must be >= 1", d_sae);
    if (n_features < 1 || !features)
        return mp_error(MP_ERR_ARG, "feature top contexts: no features given (n_features = %d)", n_features);
    if (top_n < 1 || top_n > (1 << 20))
        return mp_error(MP_ERR_ARG, "feature top contexts: top = %d must be in [1, %d]", top_n, 1 << 20);
    if (before < 0 || after < 0 || before > 4096 || after > 4096)
        return mp_error(MP_ERR_ARG, "feature top contexts: window {%d, %d} must be two counts in [0, 4096]", before,
                        after);
    if (isnan(floor)) return mp_error(MP_ERR_ARG, "feature top contexts: floor is NaN");
    for (int j = 0; j < n_features; j++) {
        if (features[j] < 0 || features[j] >= d_sae)
            return mp_error(MP_ERR_ARG, "feature top contexts: features[%d] = %d is outside 0..%d", j, features[j],
                            d_sae - 1);
        for (int i = 0; i < j; i++)
            if (features[i] == features[j])
                return mp_error(MP_ERR_ARG, "feature top contexts: feature %d is listed twice (features[%d] and [%d])",
                                features[j], i, j);
    }
    int W = before + 1 + after;
    if ((size_t)n_features * (size_t)top_n * (size_t)W > ((size_t)1 << 34))
        return mp_error(MP_ERR_ARG, "feature top contexts: %d features x %d contexts x %d tokens is too large",
                        n_features, top_n, W);
    mp_feat_top *t = mp_calloc(1, sizeof *t, "feature top contexts");
    if (!t) return MP_ERR_NOMEM;
    t->nf = n_features;
    t->d_sae = d_sae;
    t->top_n = top_n;
    t->before = before;
    t->after = after;
    t->W = W;
    t->floor = floor;
    t->f = mp_calloc((size_t)n_features, sizeof *t->f, "feature top contexts");
    if (!t->f) goto nomem;
    for (int j = 0; j < n_features; j++) {
        feat *f = &t->f[j];
        f->feature = features[j];
        f->st.max = NAN;
        f->heap = mp_malloc((size_t)top_n * sizeof *f->heap, "feature top contexts");
        f->win = mp_malloc((size_t)top_n * W * sizeof(float), "feature top contexts windows");
        if (!f->heap || !f->win) goto nomem;
    }
    *out = t;
    return MP_OK;
nomem:
    mp_feat_top_free(t);
    return MP_ERR_NOMEM;
}

void mp_feat_top_free(mp_feat_top *t) {
    if (!t) return;
    if (t->f)
        for (int j = 0; j < t->nf; j++) {
            free(t->f[j].heap);
            free(t->f[j].win);
        }
    free(t->f);
    free(t);
}

static mp_status check_batch(const mp_feat_top *t, int n_seq, int T, int64_t seq0, const char *fn) {
    if (n_seq < 0 || T < 0 || (n_seq > 0 && T < 1))
        return mp_error(MP_ERR_ARG, "%s: %d sequences of %d tokens", fn, n_seq, T);
    if (seq0 < 0) return mp_error(MP_ERR_ARG, "%s: seq0 = %lld must be >= 0", fn, (long long)seq0);
    (void)t;
    return MP_OK;
}

/* The column of feature slot f over n_seq x T rows (value of row r at col[r * stride]). */
static void add_col(const mp_feat_top *t, feat *f, const float *col, int64_t stride, int n_seq, int T, int64_t seq0,
                    const unsigned char *valid) {
    const int W = t->W, before = t->before, after = t->after;
    for (int s = 0; s < n_seq; s++) {
        const size_t r0 = (size_t)s * (size_t)T;
        for (int p = 0; p < T; p++) {
            const size_t r = r0 + (size_t)p;
            if (valid && !valid[r]) continue;
            float v = col[(int64_t)r * stride];
            f->st.n_tokens++;
            if (isnan(v)) continue;
            f->st.sum += v;
            if (v > 0) f->st.n_active++;
            if (!(f->st.max >= v)) f->st.max = v;
            if (!(v > t->floor)) continue;
            entry e = {v, p, seq0 + s, 0};
            if (f->n == t->top_n && !better(&e, &f->heap[0])) continue;
            const int replace = f->n == t->top_n;   /* the worst kept goes */
            e.slot = replace ? f->heap[0].slot : f->n;
            float *w = f->win + (size_t)e.slot * W;
            for (int k = -before; k <= after; k++) {
                int q = p + k;
                w[k + before] = (q < 0 || q >= T || (valid && !valid[r0 + (size_t)q]))
                                    ? NAN
                                    : col[(int64_t)(r0 + (size_t)q) * stride];
            }
            if (replace) {
                f->heap[0] = e;
                sift_down(f->heap, f->n, 0);
            } else {
                f->heap[f->n] = e;
                sift_up(f->heap, f->n++);
            }
        }
    }
}

mp_status mp_feat_top_add(mp_feat_top *t, const float *acts, int64_t ld, int n_seq, int T, int64_t seq0,
                          const unsigned char *valid) {
    mp_status st = check_batch(t, n_seq, T, seq0, "feature top contexts");
    if (st) return st;
    if (ld < t->d_sae)
        return mp_error(MP_ERR_ARG, "feature top contexts: row stride %lld is less than d_sae = %d", (long long)ld,
                        t->d_sae);
    if (n_seq == 0) return MP_OK;
    if (!acts) return mp_error(MP_ERR_ARG, "feature top contexts: no activations");
#pragma omp parallel for schedule(dynamic, 1) if (t->nf > 1 && (int64_t)n_seq * T * t->nf > 65536)
    for (int j = 0; j < t->nf; j++)
        add_col(t, &t->f[j], acts + t->f[j].feature, ld, n_seq, T, seq0, valid);
    return MP_OK;
}

mp_status mp_feat_top_add_column(mp_feat_top *t, int j, const float *col, int64_t stride, int n_seq, int T,
                                 int64_t seq0, const unsigned char *valid) {
    mp_status st = check_batch(t, n_seq, T, seq0, "feature top contexts");
    if (st) return st;
    if (j < 0 || j >= t->nf)
        return mp_error(MP_ERR_ARG, "feature top contexts: slot %d is outside 0..%d", j, t->nf - 1);
    if (stride < 1) return mp_error(MP_ERR_ARG, "feature top contexts: column stride %lld < 1", (long long)stride);
    if (n_seq == 0) return MP_OK;
    if (!col) return mp_error(MP_ERR_ARG, "feature top contexts: no column");
    add_col(t, &t->f[j], col, stride, n_seq, T, seq0, valid);
    return MP_OK;
}

int mp_feat_top_n_features(const mp_feat_top *t) { return t->nf; }
int mp_feat_top_feature(const mp_feat_top *t, int j) { return j >= 0 && j < t->nf ? t->f[j].feature : -1; }

int mp_feat_top_window(const mp_feat_top *t, int *before, int *after) {
    if (before) *before = t->before;
    if (after) *after = t->after;
    return t->W;
}

mp_feat_stats mp_feat_top_stats(const mp_feat_top *t, int j) {
    mp_feat_stats z = {0, 0, NAN, 0};
    return j >= 0 && j < t->nf ? t->f[j].st : z;
}

static int ctx_better(const mp_feat_ctx *a, const mp_feat_ctx *b) {
    if (a->value != b->value) return a->value > b->value;
    if (a->seq != b->seq) return a->seq < b->seq;
    return a->pos < b->pos;
}

static int cmp_best_first(const void *a, const void *b) {
    const mp_feat_ctx *x = a, *y = b;
    return ctx_better(x, y) ? -1 : ctx_better(y, x) ? 1 : 0;
}

int mp_feat_top_sorted(const mp_feat_top *t, int j, mp_feat_ctx *out) {
    if (j < 0 || j >= t->nf) return 0;
    const feat *f = &t->f[j];
    for (int i = 0; i < f->n; i++)
        out[i] = (mp_feat_ctx){f->heap[i].v, f->heap[i].seq, f->heap[i].pos, f->win + (size_t)f->heap[i].slot * t->W};
    qsort(out, (size_t)f->n, sizeof *out, cmp_best_first);
    return f->n;
}
