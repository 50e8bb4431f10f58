/* mp_hooks.c — hook-point names and shapes (from the X-macro table), glob
 * selection, and the callback registry fired by the runtime. */
#include "mp_hooks.h"
#include "config.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const mp_hook_suffix[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) name,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};
const int mp_hook_per_layer[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) per_layer,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};
const mp_shape_kind mp_hook_shape_kind[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) shape,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};

static const mp_hook_when hook_when[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) when,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};
static const unsigned char hook_opt_in[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) opt_in,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};
static const unsigned char hook_grad[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) grad,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};
static const unsigned char hook_device[MP_HOOK_COUNT] = {
#define MP_X(id, name, per_layer, shape, when, opt_in, grad, device) device,
    MP_HOOK_TABLE(MP_X)
#undef MP_X
};

int mp_hook_exists(const mp_config *cfg, mp_hook_id id) {
    switch (hook_when[id]) {
    case MP_WHEN_MLP: return cfg->mlp != MP_MLP_NONE;
    case MP_WHEN_SWIGLU: return cfg->mlp == MP_MLP_SWIGLU;
    case MP_WHEN_LEARNED_POS: return cfg->pos == MP_POS_LEARNED;
    case MP_WHEN_QK_NORM: return cfg->qk_norm != MP_QK_NORM_NONE;
    case MP_WHEN_SERIAL: return !cfg->parallel_attn;
    case MP_WHEN_POST_NORMS: return cfg->post_norms;
    case MP_WHEN_POST_NORMS_MLP: return cfg->post_norms && cfg->mlp != MP_MLP_NONE;
    case MP_WHEN_PRE_NORMS: return !cfg->no_pre_norms;
    case MP_WHEN_PRE_NORMS_MLP: return !cfg->no_pre_norms && cfg->mlp != MP_MLP_NONE;
    case MP_WHEN_ALWAYS: break;
    }
    return 1;
}

const char *mp_hook_absent_why(const mp_config *cfg, const char *name, char *buf, size_t n) {
    static const char *const on[] = {
        [MP_WHEN_MLP] = "a model with an MLP (this one has mlp = none)",
        [MP_WHEN_SWIGLU] = "a SwiGLU MLP",
        [MP_WHEN_LEARNED_POS] = "a model with learned positions (pos = learned)",
        [MP_WHEN_QK_NORM] = "a model with a q/k norm (this one has qk_norm = none)",
        [MP_WHEN_SERIAL] = "a serial block (this one is parallel_attn: no resid_mid)",
        [MP_WHEN_POST_NORMS] = "a model with post-norms (post_norms)",
        [MP_WHEN_POST_NORMS_MLP] = "a model with post-norms (post_norms) and an MLP",
        [MP_WHEN_PRE_NORMS] = "a block with pre-norms (this one has pre_norms = false: attention reads the residual)",
        [MP_WHEN_PRE_NORMS_MLP] = "a block with pre-norms and an MLP (this one has pre_norms = false or no MLP)"};
    const char *rest = name;
    if (n) buf[0] = '\0';
    if (strncmp(name, "blocks.", 7) == 0) {
        char *end;
        long v = strtol(name + 7, &end, 10);
        if (end == name + 7 || *end != '.' || v < 0) return buf;
        rest = end + 1;
        if (v >= cfg->n_layer) { /* a per-layer point's name past the last block */
            for (int i = 0; i < MP_HOOK_COUNT; i++)
                if (mp_hook_per_layer[i] && strcmp(rest, mp_hook_suffix[i]) == 0)
                    snprintf(buf, n, " (layer %ld out of range: the model has %d layers (0..%d))", v, cfg->n_layer,
                             cfg->n_layer - 1);
            return buf;
        }
    }
    for (int i = 0; i < MP_HOOK_COUNT; i++)
        if ((rest != name) == (mp_hook_per_layer[i] != 0) && strcmp(rest, mp_hook_suffix[i]) == 0 &&
            !mp_hook_exists(cfg, (mp_hook_id)i) && hook_when[i] != MP_WHEN_ALWAYS)
            snprintf(buf, n, " (%s exists only on %s)", mp_hook_suffix[i], on[hook_when[i]]);
    return buf;
}

/* Edit distance (Levenshtein) of a and b, each read up to 127 characters. */
static int edit_distance(const char *a, const char *b) {
    int row[128], n = (int)strnlen(b, 127), m = (int)strnlen(a, 127);
    for (int j = 0; j <= n; j++) row[j] = j;
    for (int i = 1; i <= m; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= n; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[n];
}

int mp_hook_nearest(const char *key, const char *const *names, int n, int k, int *out) {
    int dist[16], got = 0;
    if (k > 16) k = 16;
    for (int i = 0; i < n; i++) { /* insertion into the k best so far */
        const int d = edit_distance(key, names[i]);
        int at = got;
        while (at > 0 && (d < dist[at - 1] || (d == dist[at - 1] && strcmp(names[i], names[out[at - 1]]) < 0))) at--;
        if (at >= k) continue;
        for (int j = (got < k ? got : k - 1); j > at; j--) dist[j] = dist[j - 1], out[j] = out[j - 1];
        dist[at] = d, out[at] = i;
        if (got < k) got++;
    }
    return got;
}

int mp_hook_opt_in(mp_hook_id id) { return hook_opt_in[id]; }
int mp_hook_has_grad(mp_hook_id id) { return hook_grad[id]; }
int mp_hook_on_device(mp_hook_id id) { return hook_device[id]; }

const char *mp_hook_suffixes(int (*has)(mp_hook_id), char *buf, size_t n) {
    int k = 0, total = 0;
    for (int i = 0; i < MP_HOOK_COUNT; i++) total += has((mp_hook_id)i) != 0;
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < MP_HOOK_COUNT && len < n; i++) {
        if (!has((mp_hook_id)i)) continue;
        const char *sep = k == 0 ? "" : k == total - 1 ? " and " : ", ";
        int w = snprintf(buf + len, n - len, "%s%s", sep, mp_hook_suffix[i]);
        if (w < 0) break;
        len += (size_t)w;
        k++;
    }
    return buf;
}

const char *mp_hook_name(mp_hook_id id, int layer, char *buf, size_t n) {
    if (mp_hook_per_layer[id]) snprintf(buf, n, "blocks.%d.%s", layer, mp_hook_suffix[id]);
    else snprintf(buf, n, "%s", mp_hook_suffix[id]);
    return buf;
}

int mp_hook_parse(const mp_config *cfg, const char *name, mp_hook_id *id, int *layer) {
    int l = -1;
    const char *rest = name;
    if (strncmp(name, "blocks.", 7) == 0) {
        char *end;
        long v = strtol(name + 7, &end, 10);
        if (end == name + 7 || *end != '.' || v < 0 || v >= cfg->n_layer) return -1;
        l = (int)v;
        rest = end + 1;
    }
    for (int i = 0; i < MP_HOOK_COUNT; i++) {
        if ((l >= 0) != (mp_hook_per_layer[i] != 0)) continue;
        if (strcmp(rest, mp_hook_suffix[i]) == 0 && mp_hook_exists(cfg, (mp_hook_id)i)) {
            *id = (mp_hook_id)i;
            *layer = l;
            return 0;
        }
    }
    return -1;
}

int mp_hook_shape(const mp_config *cfg, mp_hook_id id, int B, int T, int pos0, int64_t s[4]) {
    switch (mp_hook_shape_kind[id]) {
    case MP_SHAPE_BTD: s[0] = B; s[1] = T; s[2] = cfg->d_model; return 3;
    case MP_SHAPE_BTM: s[0] = B; s[1] = T; s[2] = cfg->d_mlp; return 3;
    case MP_SHAPE_BTHD: s[0] = B; s[1] = T; s[2] = cfg->n_head; s[3] = cfg->d_head; return 4;
    case MP_SHAPE_BTKD: s[0] = B; s[1] = T; s[2] = cfg->n_kv_head; s[3] = cfg->d_head; return 4;
    case MP_SHAPE_BHTS: s[0] = B; s[1] = cfg->n_head; s[2] = T; s[3] = (int64_t)pos0 + T; return 4;
    case MP_SHAPE_BT1: s[0] = B; s[1] = T; s[2] = 1; return 3;
    case MP_SHAPE_BTHX: s[0] = B; s[1] = T; s[2] = cfg->n_head; s[3] = cfg->d_model; return 4;
    case MP_SHAPE_BTKX: s[0] = B; s[1] = T; s[2] = cfg->n_kv_head; s[3] = cfg->d_model; return 4;
    }
    return 0;
}

/* Matches the pattern p[0..n) (not NUL-terminated: a glob inside a list) against
 * s with fnmatch(3): no FNM_PATHNAME or FNM_PERIOD, so '*' runs across dots;
 * FNM_NOESCAPE keeps '\\' literal. A pattern that does not fit the stack buffer
 * is copied to the heap (if that fails, it matches nothing). */
static int glob_match_n(const char *p, size_t n, const char *s) {
    char buf[256], *pat = n < sizeof buf ? buf : malloc(n + 1);
    if (!pat) return 0;
    memcpy(pat, p, n);
    pat[n] = '\0';
    int hit = fnmatch(pat, s, FNM_NOESCAPE) == 0;
    if (pat != buf) free(pat);
    return hit;
}

int mp_glob_match(const char *p, const char *s) { return glob_match_n(p, strlen(p), s); }

/* Finds the next comma-separated glob of the list (spaces trimmed) without
 * copying it, so that a glob of any length is matched whole; returns the rest
 * of the list, or NULL after the last one. */
static const char *next_glob(const char *g, const char **pat, size_t *len) {
    const char *comma = strchr(g, ',');
    size_t n = comma ? (size_t)(comma - g) : strlen(g);
    while (n && *g == ' ') { g++; n--; }
    while (n && g[n - 1] == ' ') n--;
    *pat = g;
    *len = n;
    return comma ? comma + 1 : NULL;
}

/* The table's layout: global points [0, FIRST_PER), per-layer points
 * [FIRST_PER, END_PER), global points [END_PER, MP_HOOK_COUNT). */
#define FIRST_PER MP_HOOK_RESID_PRE
#define END_PER (MP_HOOK_RESID_POST + 1)

/* Hook points of the model in firing order: the leading globals, blocks
 * 0..L-1, the trailing globals. */
static int point_at(const mp_config *cfg, int k, mp_hook_id *id, int *layer) {
    const int per = END_PER - FIRST_PER;
    if (k < FIRST_PER) { *id = (mp_hook_id)k; *layer = -1; return 1; }
    k -= FIRST_PER;
    if (k < cfg->n_layer * per) { *id = (mp_hook_id)(FIRST_PER + k % per); *layer = k / per; return 1; }
    k -= cfg->n_layer * per;
    if (k < MP_HOOK_COUNT - END_PER) { *id = (mp_hook_id)(END_PER + k); *layer = -1; return 1; }
    return 0;
}

/* Does the glob p[0..n) match hook (id) named `name`? An opt-in point
 * (mp_hook_opt_in) needs the glob to spell its last name component too. */
static int glob_selects(const char *p, size_t n, mp_hook_id id, const char *name) {
    if (mp_hook_opt_in(id)) {
        const char *comp = strrchr(mp_hook_suffix[id], '.');
        comp = comp ? comp + 1 : mp_hook_suffix[id];
        size_t cl = strlen(comp);
        int spelled = 0;
        for (size_t i = 0; !spelled && i + cl <= n; i++) spelled = memcmp(p + i, comp, cl) == 0;
        if (!spelled) return 0;
    }
    return glob_match_n(p, n, name);
}

struct sub_point;
static int visit_selected(const mp_config *cfg, const char *globs, mp_hook_visit_fn fn, void *user,
                          const struct sub_point *sub, int nsub);

int mp_hook_select(const mp_config *cfg, const char *globs, mp_hook_visit_fn fn, void *user,
                   char *unmatched, size_t unmatched_len) {
    char name[128];
    const char *pat;
    size_t plen;
    mp_hook_id id;
    int layer, total = 0;
    if (unmatched && unmatched_len) unmatched[0] = '\0';
    /* One exact name (no comma, no wildcard): parsed, not matched against every point's
     * formatted name (a hook list of exact names then costs no fnmatch per point; fnmatch
     * is slow under a UTF-8 locale, such as an embedding Python's) */
    if (!next_glob(globs, &pat, &plen) && plen && plen < sizeof name && !memchr(pat, '*', plen) &&
        !memchr(pat, '?', plen) && !memchr(pat, '[', plen)) {
        memcpy(name, pat, plen);
        name[plen] = '\0';
        if (mp_hook_parse(cfg, name, &id, &layer) == 0) {
            mp_hook_name(id, layer, name, sizeof name); /* the canonical spelling ("blocks.03." is "blocks.3.") */
            if (glob_match_n(pat, plen, name)) {
                if (fn) fn(user, id, layer, name);
                return 1;
            }
        }
    }
    for (const char *g = globs; g;) {
        g = next_glob(g, &pat, &plen);
        if (!plen) continue;
        int hit = 0;
        for (int k = 0; !hit && point_at(cfg, k, &id, &layer); k++)
            hit = mp_hook_exists(cfg, id) && glob_selects(pat, plen, id, mp_hook_name(id, layer, name, sizeof name));
        if (!hit && unmatched && unmatched_len && !unmatched[0]) {
            if (plen < unmatched_len) snprintf(unmatched, unmatched_len, "%.*s", (int)plen, pat);
            else if (unmatched_len > 16) { /* too long for the buffer: keep both ends, elide the middle */
                int half = (int)(unmatched_len - 4) / 2;
                snprintf(unmatched, unmatched_len, "%.*s...%.*s", half, pat, half, pat + plen - (size_t)half);
            } else snprintf(unmatched, unmatched_len, "?");
        }
    }
    total = visit_selected(cfg, globs, fn, user, NULL, 0);
    return total;
}

void mp_hook_view_copy(const mp_hook_info *info, float *full, float *view, int to_full) {
    size_t outer = 1, inner = 1;
    for (int i = 0; i < info->axis; i++) outer *= (size_t)info->shape[i];
    for (int i = info->axis + 1; i < info->ndim; i++) inner *= (size_t)info->shape[i];
    size_t run = (size_t)info->shape[info->axis] * inner;
    for (size_t o = 0; o < outer; o++) {
        float *f = full + (o * (size_t)info->full[info->axis] + (size_t)info->offset) * inner;
        float *v = view + o * run;
        if (to_full) memcpy(f, v, run * sizeof(float));
        else memcpy(v, f, run * sizeof(float));
    }
}

/* ---- registry ---- */

typedef struct {
    mp_hook_id id;
    int layer;
    mp_hook_fn fn;
    void *user;
    int late; /* fires after the others at its point */
} hook_entry;

/* A registry's own point (mp_hooks_declare). */
typedef struct sub_point {
    char name[96];
    mp_hook_id parent;
    int layer, width, grad;
    unsigned char active; /* as a table point's byte in hs->active */
} sub_point;

typedef struct {
    void *p;
    void (*free_fn)(void *);
} owned_mem;

struct mp_hooks {
    mp_config cfg;
    hook_entry *e;
    int n, cap;
    unsigned char *active; /* [(n_layer + 1) * MP_HOOK_COUNT], slot 0 for layer -1 */
    sub_point *sub;        /* the registry's own points, ids MP_HOOK_COUNT + i */
    int nsub, capsub;
    owned_mem *own;
    int nown, capown;
};

mp_hooks *mp_hooks_new(const mp_config *cfg) {
    mp_hooks *hs = calloc(1, sizeof *hs);
    if (!hs) return NULL;
    hs->cfg = *cfg;
    hs->active = calloc((size_t)(cfg->n_layer + 1) * MP_HOOK_COUNT, 1);
    if (!hs->active) { free(hs); return NULL; }
    return hs;
}

void mp_hooks_free(mp_hooks *hs) {
    if (!hs) return;
    for (int i = hs->nown - 1; i >= 0; i--) hs->own[i].free_fn(hs->own[i].p);
    free(hs->own);
    free(hs->sub);
    free(hs->e);
    free(hs->active);
    free(hs);
}

static unsigned char *slot(const mp_hooks *hs, mp_hook_id id, int layer) {
    if (mp_hook_is_sub(id)) return &hs->sub[id - MP_HOOK_COUNT].active;
    return &hs->active[(size_t)(layer + 1) * MP_HOOK_COUNT + id];
}

/* A point's byte in hs->active: bit 0 something is registered, bit 1 some callback there may write. */
#define SLOT_ACTIVE 1
#define SLOT_WRITER 2

static mp_status add_entry(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user, int writer,
                           int late) {
    const int sub_ok = mp_hook_is_sub(id) && (int)id - MP_HOOK_COUNT < hs->nsub &&
                       hs->sub[id - MP_HOOK_COUNT].layer == layer;
    if (!sub_ok && ((int)id < 0 || id >= MP_HOOK_COUNT || layer < -1 || layer >= hs->cfg.n_layer ||
                    (layer >= 0) != (mp_hook_per_layer[id] != 0)))
        return mp_error(MP_ERR_ARG, "invalid hook point (id %d, layer %d)", (int)id, layer);
    if (hs->n == hs->cap) {
        int cap = hs->cap ? hs->cap * 2 : 16;
        hook_entry *e = realloc(hs->e, (size_t)cap * sizeof *e);
        if (!e) return mp_error(MP_ERR_NOMEM, "out of memory registering a hook");
        hs->e = e;
        hs->cap = cap;
    }
    hs->e[hs->n++] = (hook_entry){id, layer, fn, user, late};
    *slot(hs, id, layer) |= (unsigned char)(SLOT_ACTIVE | (writer ? SLOT_WRITER : 0));
    return MP_OK;
}

mp_status mp_hooks_add_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user) {
    return add_entry(hs, id, layer, fn, user, 1, 0);
}

mp_status mp_hooks_add_reader_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user) {
    return add_entry(hs, id, layer, fn, user, 0, 0);
}

mp_status mp_hooks_add_late_at(mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn fn, void *user) {
    return add_entry(hs, id, layer, fn, user, 1, 1);
}

typedef struct {
    mp_hooks *hs;
    mp_hook_fn fn;
    void *user;
    int writer;
    mp_status st;
} add_ctx;

static void add_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)name;
    add_ctx *c = u;
    if (c->st == MP_OK) c->st = add_entry(c->hs, id, layer, c->fn, c->user, c->writer, 0);
}

/* Does the glob match an opt-in point by fnmatch alone (but not spell it)? */
static int opt_in_only(const mp_config *cfg, const char *glob) {
    char name[128];
    mp_hook_id id;
    int layer;
    for (int k = 0; point_at(cfg, k, &id, &layer); k++)
        if (mp_hook_opt_in(id) && mp_hook_exists(cfg, id) && mp_glob_match(glob, mp_hook_name(id, layer, name, sizeof name)))
            return 1;
    return 0;
}

static mp_status add_globs(mp_hooks *hs, const char *globs, mp_hook_fn fn, void *user, int writer) {
    char bad[256];
    if (!globs || !*globs) return mp_error(MP_ERR_ARG, "empty hook name");
    int n = mp_hooks_select(hs, globs, NULL, NULL, bad, sizeof bad);
    if (bad[0] && opt_in_only(&hs->cfg, bad)) {
        char names[256];
        return mp_error(MP_ERR_ARG,
                        "hook name '%s' matches only opt-in points (%s), which a glob selects only when it spells "
                        "their name ('blocks.*.attn.hook_result')",
                        bad, mp_hook_suffixes(mp_hook_opt_in, names, sizeof names));
    }
    char why[192];
    if (bad[0] && mp_hook_absent_why(&hs->cfg, bad, why, sizeof why)[0])
        return mp_error(MP_ERR_ARG, "unknown hook name '%s': it matches no hook point of this model%s", bad, why);
    if (bad[0])
        return mp_error(MP_ERR_ARG,
                        "unknown hook name '%s': it matches no hook point of this model "
                        "(names look like 'blocks.0.attn.hook_pattern'; '*' matches any run of characters)",
                        bad);
    if (n == 0) return mp_error(MP_ERR_ARG, "hook names '%s' match no hook point", globs);
    add_ctx c = {hs, fn, user, writer, MP_OK};
    mp_hooks_select(hs, globs, add_visit, &c, NULL, 0);
    return c.st;
}

mp_status mp_hooks_add(mp_hooks *hs, const char *globs, mp_hook_fn fn, void *user) {
    return add_globs(hs, globs, fn, user, 1);
}

mp_status mp_hooks_add_reader(mp_hooks *hs, const char *globs, mp_hook_fn fn, void *user) {
    return add_globs(hs, globs, fn, user, 0);
}

void mp_hooks_clear(mp_hooks *hs) {
    hs->n = 0;
    for (int i = 0; i < hs->nsub; i++) hs->sub[i].active = 0;
    memset(hs->active, 0, (size_t)(hs->cfg.n_layer + 1) * MP_HOOK_COUNT);
}

int mp_hooks_count(const mp_hooks *hs) { return hs ? hs->n : 0; }

int mp_hooks_active(const mp_hooks *hs, mp_hook_id id, int layer) {
    return hs && *slot(hs, id, layer);
}

int mp_hooks_at(const mp_hooks *hs, mp_hook_id id, int layer, mp_hook_fn *fns, void **users, int max) {
    if (!mp_hooks_active(hs, id, layer)) return 0;
    int n = 0;
    for (int i = 0; i < hs->n; i++) {
        const hook_entry *e = &hs->e[i];
        if (e->id != id || e->layer != layer) continue;
        if (n < max) fns[n] = e->fn, users[n] = e->user;
        n++;
    }
    return n;
}

int mp_hooks_readonly(const mp_hooks *hs, mp_hook_id id, int layer) {
    return hs && *slot(hs, id, layer) == SLOT_ACTIVE;
}

mp_status mp_hooks_fire(const mp_hooks *hs, mp_hook_info *info, float *data) {
    const char *name = info->name = mp_hooks_name(hs, info->id, info->layer, info->namebuf, sizeof info->namebuf);
    for (int k = 0; k < 2 * hs->n; k++) { /* the others, then the late ones */
        const hook_entry *e = &hs->e[k % hs->n];
        if (e->id != info->id || e->layer != info->layer || e->late != (k >= hs->n)) continue;
        if (e->fn(e->user, info, data) != 0) {
            const char *msg = mp_last_error();
            if (!msg[0]) mp_error(MP_ERR_HOOK, "hook at %s aborted the forward pass", name);
            else mp_error_prefix(MP_ERR_HOOK, "hook at %s", name);
            return MP_ERR_HOOK;
        }
    }
    return MP_OK;
}

_Static_assert(MP_HOOK_EMBED == 0 && MP_HOOK_POS_EMBED + 1 == FIRST_PER && END_PER == MP_HOOK_LNF_SCALE &&
                   MP_HOOK_LN_FINAL == MP_HOOK_COUNT - 1,
               "point_at() relies on the global points at both ends of MP_HOOK_TABLE, the per-layer ones between");

/* ---- a registry's own points ---- */

mp_status mp_hooks_declare(mp_hooks *hs, const char *name, mp_hook_id parent, int layer, int width, int has_grad,
                           mp_hook_id *id) {
    mp_hook_id pid;
    int pl;
    if (!name || !*name || strlen(name) >= sizeof hs->sub[0].name)
        return mp_error(MP_ERR_ARG, "hook point name '%s' is empty or too long", name ? name : "");
    if (mp_hooks_parse(hs, name, &pid, &pl) == 0)
        return mp_error(MP_ERR_ARG, "hook point '%s' exists already", name);
    if (hs->nsub == hs->capsub) {
        int cap = hs->capsub ? hs->capsub * 2 : 8;
        sub_point *p = realloc(hs->sub, (size_t)cap * sizeof *p);
        if (!p) return mp_error(MP_ERR_NOMEM, "out of memory declaring a hook point");
        hs->sub = p;
        hs->capsub = cap;
    }
    sub_point *p = &hs->sub[hs->nsub];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->parent = parent;
    p->layer = layer;
    p->width = width;
    p->grad = has_grad;
    *id = (mp_hook_id)(MP_HOOK_COUNT + hs->nsub++);
    return MP_OK;
}

mp_status mp_hooks_own(mp_hooks *hs, void *p, void (*free_fn)(void *)) {
    if (hs->nown == hs->capown) {
        int cap = hs->capown ? hs->capown * 2 : 4;
        owned_mem *o = realloc(hs->own, (size_t)cap * sizeof *o);
        if (!o) {
            free_fn(p);
            return mp_error(MP_ERR_NOMEM, "out of memory registering a hook's state");
        }
        hs->own = o;
        hs->capown = cap;
    }
    hs->own[hs->nown++] = (owned_mem){p, free_fn};
    return MP_OK;
}

static const sub_point *sub_of(const mp_hooks *hs, mp_hook_id id) {
    int i = (int)id - MP_HOOK_COUNT;
    return hs && i >= 0 && i < hs->nsub ? &hs->sub[i] : NULL;
}

const char *mp_hooks_name(const mp_hooks *hs, mp_hook_id id, int layer, char *buf, size_t n) {
    if (!mp_hook_is_sub(id)) return mp_hook_name(id, layer, buf, n);
    const sub_point *p = sub_of(hs, id);
    snprintf(buf, n, "%s", p ? p->name : "?");
    return buf;
}

int mp_hooks_parent(const mp_hooks *hs, mp_hook_id id, mp_hook_id *parent, int *layer) {
    const sub_point *p = sub_of(hs, id);
    if (!p) return -1;
    *parent = p->parent;
    *layer = p->layer;
    return 0;
}

int mp_hooks_parse(const mp_hooks *hs, const char *name, mp_hook_id *id, int *layer) {
    for (int i = 0; i < hs->nsub; i++)
        if (strcmp(name, hs->sub[i].name) == 0) {
            *id = (mp_hook_id)(MP_HOOK_COUNT + i);
            *layer = hs->sub[i].layer;
            return 0;
        }
    return mp_hook_parse(&hs->cfg, name, id, layer);
}

int mp_hooks_shape(const mp_hooks *hs, mp_hook_id id, int B, int T, int pos0, int64_t shape[4]) {
    if (!mp_hook_is_sub(id)) return mp_hook_shape(&hs->cfg, id, B, T, pos0, shape);
    const sub_point *p = sub_of(hs, id);
    shape[0] = B;
    shape[1] = T;
    shape[2] = p ? p->width : 0;
    shape[3] = 1;
    return 3;
}

int mp_hooks_has_grad(const mp_hooks *hs, mp_hook_id id) {
    if (!mp_hook_is_sub(id)) return mp_hook_has_grad(id);
    const sub_point *p = sub_of(hs, id);
    return p && p->grad;
}

mp_shape_kind mp_hook_kind(mp_hook_id id) { return mp_hook_is_sub(id) ? MP_SHAPE_BTD : mp_hook_shape_kind[id]; }

/* Does one of the comma-separated globs select the registry's own point p? */
static int sub_selected(const char *globs, const sub_point *p) {
    const char *pat;
    size_t plen;
    for (const char *g = globs; g;) {
        g = next_glob(g, &pat, &plen);
        if (plen && glob_match_n(pat, plen, p->name)) return 1;
    }
    return 0;
}

int mp_hooks_select(const mp_hooks *hs, const char *globs, mp_hook_visit_fn fn, void *user, char *unmatched,
                    size_t unmatched_len) {
    if (!hs->nsub) return mp_hook_select(&hs->cfg, globs, fn, user, unmatched, unmatched_len);
    /* the table's points' unmatched globs, less those that match a point of the registry's own */
    char bad[256];
    const char *pat;
    size_t plen;
    if (unmatched && unmatched_len) unmatched[0] = '\0';
    for (const char *g = globs; g;) {
        g = next_glob(g, &pat, &plen);
        if (!plen) continue;
        char *one = malloc(plen + 1);
        if (!one) break;
        memcpy(one, pat, plen);
        one[plen] = '\0';
        int hit = 0;
        for (int i = 0; !hit && i < hs->nsub; i++) hit = glob_match_n(pat, plen, hs->sub[i].name);
        if (!hit) {
            mp_hook_select(&hs->cfg, one, NULL, NULL, bad, sizeof bad);
            if (bad[0] && unmatched && unmatched_len && !unmatched[0]) snprintf(unmatched, unmatched_len, "%s", bad);
        }
        free(one);
    }
    return visit_selected(&hs->cfg, globs, fn, user, hs->sub, hs->nsub);
}

/* Visits, in firing order, every point of cfg that one of the globs selects,
 * each followed by the registry's own points under it (sub[0..nsub)) that
 * one selects; returns how many. */
static int visit_selected(const mp_config *cfg, const char *globs, mp_hook_visit_fn fn, void *user,
                          const sub_point *sub, int nsub) {
    char name[128];
    const char *pat;
    size_t plen;
    mp_hook_id id;
    int layer, total = 0;
    for (int k = 0; point_at(cfg, k, &id, &layer); k++) {
        if (!mp_hook_exists(cfg, id)) continue;
        mp_hook_name(id, layer, name, sizeof name);
        int match = 0;
        for (const char *g = globs; g && !match;) {
            g = next_glob(g, &pat, &plen);
            match = plen && glob_selects(pat, plen, id, name);
        }
        if (match) {
            total++;
            if (fn) fn(user, id, layer, name);
        }
        for (int i = 0; i < nsub; i++)
            if (sub[i].parent == id && sub[i].layer == layer && sub_selected(globs, &sub[i])) {
                total++;
                if (fn) fn(user, (mp_hook_id)(MP_HOOK_COUNT + i), layer, sub[i].name);
            }
    }
    return total;
}
