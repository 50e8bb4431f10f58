/* test_sae_io.c — SAELens folders in and out (formats/sae_io.h): each golden
 * folder under tests/data/sae (written by tests/tools/make_sae_ref.py from
 * SAELens's definitions, float64 numpy) loads with the right settings and its
 * encode / forward / decode match the reference to 1e-5 (|got - want| <=
 * 1e-5 (|want| + max|want|)); bad folders fail with a message naming the file
 * and the key; save -> load is bit-identical and refuses to replace a folder
 * holding other files. */
#include "sae_io.h"
#include "safetensors.h"
#include "testutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static double rel_err(const float *got, const float *want, size_t n) {
    double mx = 0, worst = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]) / (fabs(want[i]) + mx));
    return worst;
}

static float *ref_tensor(mp_safetensors *t, const char *name, size_t n) {
    const mp_st_tensor *x = mp_safetensors_find(t, name);
    CHECK(x && x->n_elements == n, "ref tensor %s", name);
    if (!x || x->n_elements != n) return NULL;
    float *d = malloc(n * sizeof(float));
    CHECK(mp_safetensors_read_f32(t, x, d, n) == MP_OK, "%s", mp_last_error());
    return d;
}

typedef struct {
    const char *name;
    mp_sae_arch arch;
    int k, apply;
    mp_sae_norm norm;
    const char *hook;
    int layer;
} golden;

static void check_golden(const golden *g) {
    char dir[1024], ref[1024];
    snprintf(dir, sizeof dir, "%s", tu_data("sae"));
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", g->name);
    snprintf(ref, sizeof ref, "%s.ref.safetensors", dir);
    mp_sae *s = NULL;
    mp_status st = mp_sae_load(&s, dir);
    CHECK(st == MP_OK, "%s: %s", g->name, mp_last_error());
    if (st) return;
    CHECK(s->arch == g->arch && s->d_in == 16 && s->d_sae == 48, "%s: arch %d d_in %d d_sae %d", g->name, s->arch,
          s->d_in, s->d_sae);
    CHECK(s->k == g->k && s->apply_b_dec_to_input == g->apply && s->normalize == g->norm, "%s: k %d apply %d norm %d",
          g->name, s->k, s->apply_b_dec_to_input, s->normalize);
    CHECK(!strcmp(s->hook_name, g->hook) && s->hook_layer == g->layer && !strcmp(s->model_name, "tiny-ref") &&
              !s->reshape_hook_z,
          "%s: hook %s layer %d model %s", g->name, s->hook_name, s->hook_layer, s->model_name);
    mp_safetensors *t = NULL;
    CHECK(mp_safetensors_open(ref, &t) == MP_OK, "%s", mp_last_error());
    if (!t) {
        mp_sae_free(s);
        return;
    }
    const int N = 8, D = 16, F = 48;
    float *x = ref_tensor(t, "x", (size_t)N * D), *acts = ref_tensor(t, "feature_acts", (size_t)N * F);
    float *out = ref_tensor(t, "sae_out", (size_t)N * D), *raw = ref_tensor(t, "decode_raw", (size_t)N * D);
    float *ga = malloc((size_t)N * F * sizeof(float)), *go = malloc((size_t)N * D * sizeof(float));
    float *gr = malloc((size_t)N * D * sizeof(float));
    if (x && acts && out && raw) {
        CHECK(mp_sae_encode(s, x, N, ga, NULL) == MP_OK, "encode");
        double e = rel_err(ga, acts, (size_t)N * F);
        CHECK(e <= 1e-5, "%s: encode rel err %.3g", g->name, e);
        for (size_t i = 0; i < (size_t)N * F; i++)
            CHECK((ga[i] != 0) == (acts[i] != 0), "%s: feature %zu active %g vs %g", g->name, i, ga[i], acts[i]);
        CHECK(mp_sae_forward(s, x, N, go, ga) == MP_OK, "forward");
        e = rel_err(go, out, (size_t)N * D);
        CHECK(e <= 1e-5, "%s: forward rel err %.3g", g->name, e);
        printf("%-14s encode/forward/decode max rel err %.2g / %.2g / ", g->name, rel_err(ga, acts, (size_t)N * F), e);
        mp_sae_decode(s, acts, N, NULL, gr);
        e = rel_err(gr, raw, (size_t)N * D);
        CHECK(e <= 1e-5, "%s: decode rel err %.3g", g->name, e);
        printf("%.2g\n", e);
    }
    free(x), free(acts), free(out), free(raw), free(ga), free(go), free(gr);
    mp_safetensors_close(t);

    /* save -> load: bit-identical weights and settings; the .safetensors path form too */
    char tmp[] = "/tmp/mp_sae_io_XXXXXX", sub[1100];
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    snprintf(sub, sizeof sub, "%s/saved", tmp);
    CHECK(mp_sae_save(s, sub) == MP_OK, "save: %s", mp_last_error());
    CHECK(mp_sae_save(s, sub) == MP_OK, "save over an SAE folder: %s", mp_last_error());
    mp_sae *r = NULL;
    char wf[1200];
    snprintf(wf, sizeof wf, "%s/sae_weights.safetensors", sub);
    st = mp_sae_load(&r, wf);
    CHECK(st == MP_OK, "reload: %s", mp_last_error());
    if (r) {
        CHECK(r->arch == s->arch && r->k == s->k && r->apply_b_dec_to_input == s->apply_b_dec_to_input &&
                  r->normalize == s->normalize && r->hook_layer == s->hook_layer &&
                  !strcmp(r->hook_name, s->hook_name) && !strcmp(r->model_name, s->model_name) &&
                  r->n_floats == s->n_floats,
              "%s: settings after the round trip", g->name);
        CHECK(r->n_floats == s->n_floats && !memcmp(r->block, s->block, s->n_floats * sizeof(float)),
              "%s: weights not bit-identical after save -> load", g->name);
        mp_sae_free(r);
    }
    /* a folder with another file is not replaced */
    char extra[1200];
    snprintf(extra, sizeof extra, "%s/notes.txt", sub);
    FILE *f = fopen(extra, "w");
    if (f) fclose(f);
    st = mp_sae_save(s, sub);
    CHECK(st == MP_ERR_IO && strstr(mp_last_error(), "notes.txt"), "save over a folder with notes.txt: %s",
          mp_last_error());
    unlink(extra);
    snprintf(extra, sizeof extra, "%s/cfg.json", sub), unlink(extra);
    unlink(wf);
    rmdir(sub);
    /* nothing left over beside it */
    CHECK(rmdir(tmp) == 0, "%s not empty after the saves: %s", tmp, strerror(errno));
    mp_sae_free(s);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n, "write %s", path);
    if (f) fclose(f);
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    p[*n] = 0;
    fclose(f);
    return p;
}

/* A folder dir with cfg text and weights bytes; then loading must fail with
 * status want and a message holding every string in needles (NULL-ended). */
static void expect_bad(const char *root, const char *label, const char *cfg, const void *w, size_t wn, mp_status want,
                       const char *const *needles) {
    char dir[1100], p[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, label);
    mkdir(dir, 0777);
    if (cfg) snprintf(p, sizeof p, "%s/cfg.json", dir), write_file(p, cfg, strlen(cfg));
    if (w) snprintf(p, sizeof p, "%s/sae_weights.safetensors", dir), write_file(p, w, wn);
    mp_sae *s = NULL;
    mp_status st = mp_sae_load(&s, dir);
    CHECK(st == want && !s, "%s: status %d (want %d): %s", label, st, want, mp_last_error());
    for (int i = 0; needles[i]; i++)
        CHECK(strstr(mp_last_error(), needles[i]) != NULL, "%s: message lacks \"%s\": %s", label, needles[i],
              mp_last_error());
    printf("bad %-16s -> %s\n", label, mp_last_error());
    mp_sae_free(s);
    snprintf(p, sizeof p, "%s/cfg.json", dir), unlink(p);
    snprintf(p, sizeof p, "%s/sae_weights.safetensors", dir), unlink(p);
    rmdir(dir);
}

static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    CHECK(at != NULL, "\"%s\" in the golden cfg", from);
    if (!at) return strdup(s);
    size_t n = strlen(s) - strlen(from) + strlen(to);
    char *r = malloc(n + 1);
    memcpy(r, s, (size_t)(at - s));
    strcpy(r + (at - s), to);
    strcat(r, at + strlen(from));
    return r;
}

/* A safetensors file of the topk golden's settings with one tensor's shape changed or dropped. */
static void *weights_with(const mp_sae *s, const char *skip, const char *reshape, size_t *n) {
    char tmp[] = "/tmp/mp_sae_w_XXXXXX";
    int fd = mkstemp(tmp);
    close(fd);
    mp_st_entry e[5];
    uint64_t shapes[5][2];
    size_t m = 0;
    for (int i = 0; i < mp_sae_n_weights(s); i++) {
        float *d;
        int nd;
        int64_t sh[2];
        const char *name = mp_sae_weight(s, i, &d, &nd, sh);
        if (skip && !strcmp(name, skip)) continue;
        shapes[m][0] = (uint64_t)sh[0];
        shapes[m][1] = nd > 1 ? (uint64_t)sh[1] : 0;
        if (reshape && !strcmp(name, reshape)) shapes[m][0] = 12, shapes[m][1] = (uint64_t)(sh[0] * sh[1] / 12);
        e[m] = (mp_st_entry){name, (uint32_t)nd, shapes[m], d};
        m++;
    }
    CHECK(mp_safetensors_write(tmp, e, m, NULL) == MP_OK, "%s", mp_last_error());
    void *p = read_all(tmp, n);
    unlink(tmp);
    return p;
}

static void check_bad(void) {
    char dir[1100], p[1200];
    snprintf(dir, sizeof dir, "%s/topk_k5", tu_data("sae"));
    snprintf(p, sizeof p, "%s/cfg.json", dir);
    size_t cn, wn;
    char *cfg = read_all(p, &cn);
    snprintf(p, sizeof p, "%s/sae_weights.safetensors", dir);
    char *w = read_all(p, &wn);
    mp_sae *s = NULL;
    CHECK(cfg && w && mp_sae_load(&s, dir) == MP_OK, "golden topk_k5: %s", mp_last_error());
    if (!s) return;
    char root[] = "/tmp/mp_sae_bad_XXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp");

    expect_bad(root, "no_cfg", NULL, w, wn, MP_ERR_IO, (const char *[]){"no_cfg/cfg.json", "cannot open", NULL});
    expect_bad(root, "no_weights", cfg, NULL, 0, MP_ERR_IO,
               (const char *[]){"no_weights/sae_weights.safetensors", "cannot open", NULL});
    size_t n;
    void *x = weights_with(s, "b_dec", NULL, &n);
    expect_bad(root, "missing_tensor", cfg, x, n, MP_ERR_FORMAT,
               (const char *[]){"missing_tensor/sae_weights.safetensors", "tensor \"b_dec\" is missing", NULL});
    free(x);
    x = weights_with(s, NULL, "W_dec", &n);
    expect_bad(root, "wrong_shape", cfg, x, n, MP_ERR_FORMAT,
               (const char *[]){"wrong_shape/sae_weights.safetensors", "\"W_dec\" has shape [12, 64]",
                                "expected [48, 16]", NULL});
    free(x);
    expect_bad(root, "truncated", cfg, w, wn - 100, MP_ERR_FORMAT,
               (const char *[]){"truncated/sae_weights.safetensors", NULL});
    char *c = replace(cfg, "\"architecture\": \"topk\"", "\"architecture\": \"gated\"");
    expect_bad(root, "gated", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"gated/cfg.json", "\"gated\" is not supported", NULL});
    free(c);
    c = replace(cfg, "\"architecture\": \"topk\"", "\"architecture\": \"wavelet\"");
    expect_bad(root, "unknown_arch", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"unknown_arch/cfg.json", "unknown architecture \"wavelet\"", NULL});
    free(c);
    c = replace(cfg, "\"architecture\": \"topk\"", "\"architecture\": \"batchtopk\"");
    expect_bad(root, "batchtopk", c, w, wn, MP_ERR_FORMAT, (const char *[]){"batchtopk/cfg.json", "training", NULL});
    free(c);
    c = replace(cfg, "\"architecture\": \"topk\"", "\"architecture\": \"transcoder\"");
    expect_bad(root, "transcoder", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"transcoder/cfg.json", "transcoder", NULL});
    free(c);
    c = replace(cfg, "\"normalize_activations\": \"none\"", "\"normalize_activations\": \"whiten\"");
    expect_bad(root, "unknown_norm", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"unknown_norm/cfg.json", "normalize_activations \"whiten\"", NULL});
    free(c);
    c = replace(cfg, "\"reshape_activations\": \"none\"", "\"reshape_activations\": \"hook_q\"");
    expect_bad(root, "reshape", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"reshape/cfg.json", "reshape_activations \"hook_q\"", NULL});
    free(c);
    c = replace(cfg, "\"d_in\": 16,", "");
    expect_bad(root, "no_d_in", c, w, wn, MP_ERR_FORMAT, (const char *[]){"no_d_in/cfg.json", "\"d_in\" is missing",
                                                                         NULL});
    free(c);
    c = replace(cfg, "\"k\": 5", "\"k\": 49");
    expect_bad(root, "big_k", c, w, wn, MP_ERR_FORMAT, (const char *[]){"big_k/cfg.json", "\"k\"", "[1, 48]", NULL});
    free(c);
    c = replace(cfg, "\"d_sae\": 48", "\"d_sae\": 40");
    expect_bad(root, "d_sae_mismatch", c, w, wn, MP_ERR_FORMAT,
               (const char *[]){"sae_weights.safetensors", "\"W_enc\" has shape [16, 48], expected [16, 40]", NULL});
    free(c);
    expect_bad(root, "not_json", "{\"d_in\": 16,", w, wn, MP_ERR_FORMAT, (const char *[]){"not_json/cfg.json", NULL});
    /* a threshold in a topk SAE: not a part of it */
    {
        mp_sae *j = NULL;
        CHECK(mp_sae_new(&j, MP_SAE_JUMPRELU, 16, 48, 0) == MP_OK, "new");
        x = weights_with(j, NULL, NULL, &n);
        expect_bad(root, "extra_tensor", cfg, x, n, MP_ERR_FORMAT,
                   (const char *[]){"extra_tensor/sae_weights.safetensors", "unexpected tensor \"threshold\"", NULL});
        free(x);
        mp_sae_free(j);
    }
    /* the path of something that is neither */
    mp_sae *t = NULL;
    snprintf(p, sizeof p, "%s/cfg.json", dir);
    CHECK(mp_sae_load(&t, p) == MP_ERR_ARG && strstr(mp_last_error(), "cfg.json"), "%s", mp_last_error());
    /* from memory: the same checks */
    CHECK(mp_sae_load_memory(&t, cfg, cn, w, wn, "mem") == MP_OK && t, "%s", mp_last_error());
    CHECK(t && !memcmp(t->block, s->block, s->n_floats * sizeof(float)), "memory load = file load");
    mp_sae_free(t);
    CHECK(mp_sae_load_memory(&t, cfg, cn, w, wn - 1, "mem") == MP_ERR_FORMAT &&
              strstr(mp_last_error(), "mem/sae_weights.safetensors"),
          "%s", mp_last_error());
    CHECK(rmdir(root) == 0, "%s left non-empty", root);
    free(cfg);
    free(w);
    mp_sae_free(s);
}

/* save -> cfg.json holds SAELens v6's keys; hook_z survives; a save over a file fails */
static void check_save_form(void) {
    mp_sae *s = NULL;
    CHECK(mp_sae_new(&s, MP_SAE_TOPK, 8, 16, 3) == MP_OK, "new");
    for (size_t i = 0; i < s->n_floats; i++) s->block[i] = (float)((i * 2654435761u) % 1000) / 997.0f - 0.5f;
    s->reshape_hook_z = 1;
    strcpy(s->hook_name, "blocks.3.attn.hook_z");
    s->hook_layer = 3;
    char tmp[] = "/tmp/mp_sae_form_XXXXXX", d[1100], p[1200];
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    snprintf(d, sizeof d, "%s/z", tmp);
    CHECK(mp_sae_save(s, d) == MP_OK, "%s", mp_last_error());
    snprintf(p, sizeof p, "%s/cfg.json", d);
    size_t n;
    char *txt = read_all(p, &n);
    CHECK(txt && strstr(txt, "\"architecture\": \"topk\"") && strstr(txt, "\"k\": 3") &&
              strstr(txt, "\"reshape_activations\": \"hook_z\"") && strstr(txt, "\"sae_lens_version\": \"6.0.0\"") &&
              strstr(txt, "\"metadata\"") && strstr(txt, "\"hook_name\": \"blocks.3.attn.hook_z\""),
          "cfg.json: %s", txt ? txt : "(none)");
    free(txt);
    mp_sae *r = NULL;
    CHECK(mp_sae_load(&r, d) == MP_OK && r && r->reshape_hook_z == 1 && r->hook_layer == 3, "%s", mp_last_error());
    mp_sae_free(r);
    /* a file where the folder should go */
    snprintf(p, sizeof p, "%s/file", tmp);
    write_file(p, "x", 1);
    CHECK(mp_sae_save(s, p) == MP_ERR_IO && strstr(mp_last_error(), "not an SAE folder"), "%s", mp_last_error());
    unlink(p);
    snprintf(p, sizeof p, "%s/cfg.json", d), unlink(p);
    snprintf(p, sizeof p, "%s/sae_weights.safetensors", d), unlink(p);
    rmdir(d);
    CHECK(rmdir(tmp) == 0, "%s left non-empty", tmp);
    mp_sae_free(s);
}

int main(void) {
    mp_init();
    const golden g[] = {
        {"standard_cnr", MP_SAE_STANDARD, 0, 1, MP_SAE_NORM_CONSTANT_NORM_RESCALE, "blocks.1.hook_resid_pre", 1},
        {"topk_k5", MP_SAE_TOPK, 5, 0, MP_SAE_NORM_NONE, "blocks.0.hook_mlp_out", 0},
        {"jumprelu_ln", MP_SAE_JUMPRELU, 0, 1, MP_SAE_NORM_LAYER_NORM, "blocks.2.hook_resid_post", 2},
        {"legacy_topk", MP_SAE_TOPK, 6, 1, MP_SAE_NORM_NONE, "blocks.1.hook_resid_mid", 1},
        {"standard_bf16", MP_SAE_STANDARD, 0, 1, MP_SAE_NORM_NONE, "blocks.0.hook_resid_post", 0},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) check_golden(&g[i]);
    check_bad();
    check_save_form();
    return tu_finish("test_sae_io");
}
