/* test_capture_run.c — the capture workflow's C entry (mpi/capture.h)
 * without Lua: a token batch with logits, a text (bytes tokenizer, BOS), a
 * ragged --tokens-file dataset and a --text-file one, each file's datasets
 * against a plain mp_model_forward with in-memory hooks (tu_capture) on the
 * same tokens (exact: the same forward), the dataset's padding (-1 tokens, 0
 * activations) and /lengths; interventions registered by the caller apply
 * first; bad inputs (a bad line, an id outside the vocabulary, an empty file,
 * a glob matching nothing, two inputs) refused by name with no file left. */
#include "capture.h"
#include "h5io.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/mp_caprun_XXXXXX";
/* dir/name in one of 16 rotating buffers (a params struct holds several) */
static const char *in_dir(const char *name) {
    static char buf[16][512];
    static int k;
    char *b = buf[k++ % 16];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

static void write_text(const char *p, const char *s) {
    FILE *f = fopen(p, "w");
    if (f) { fputs(s, f); fclose(f); }
}

#define HOOKS "hook_embed,blocks.*.hook_resid_post,blocks.0.attn.hook_pattern"
static const char *const names[] = {"hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post",
                                    "blocks.0.attn.hook_pattern"};

/* A plain forward of tok [1, T] (or [B, T]) with hooks capturing every name into c and the logits. */
static void reference(mp_model *m, const int *tok, int B, int T, tu_capture *c, float *logits, mp_hooks *extra) {
    mp_hooks *h = extra ? extra : mp_hooks_new(&m->cfg);
    CHECK(mp_hooks_add(h, HOOKS, tu_capture_cb, c) == MP_OK, "reference hooks");
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = h;
    fp.logits = MP_LOGITS_ALL;
    CHECK(mp_model_forward(m, tok, B, T, &fp, logits) == MP_OK, "reference forward: %s", mp_last_error());
    if (!extra) mp_hooks_free(h);
}

static int halve(void *user, const mp_hook_info *info, float *data) {
    (void)user;
    for (size_t i = 0; i < info->numel; i++) data[i] *= 0.5f;
    return 0;
}

static void test_batch(mp_model *m) {
    enum { B = 2, T = 5 };
    const int V = m->cfg.vocab;
    int tok[B * T] = {1, 7, 3, 9, 12, 4, 4, 250, 0, 66};
    mp_capture_params p = mp_capture_params_default();
    p.model = m, p.out = in_dir("batch.h5"), p.hooks = HOOKS, p.logits = 1;
    p.tokens = tok, p.B = B, p.T = T;
    mp_capture_result r;
    CHECK(mp_capture_run(&p, &r) == MP_OK, "batch capture: %s", mp_last_error());
    CHECK(r.n_datasets == 5 && r.n_prompts == B && r.T == T, "batch result: %d datasets, %lld rows, T %d",
          r.n_datasets, (long long)r.n_prompts, r.T);
    tu_capture c = {0};
    float *logits = malloc((size_t)B * T * V * sizeof(float));
    reference(m, tok, B, T, &c, logits, NULL);
    hid_t f;
    if (mp_h5_open(&f, p.out, MP_H5_READ) != MP_OK) { CHECK(0, "open %s: %s", p.out, mp_last_error()); return; }
    int32_t *ft;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_i32(f, "/tokens", &ft, &info) == MP_OK && info.ndim == 2 && info.shape[0] == B &&
              info.shape[1] == T && memcmp(ft, tok, sizeof tok) == 0,
          "/tokens [B,T] as given");
    free(ft);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char ds[128];
        snprintf(ds, sizeof ds, "/acts/%s", names[k]);
        float *a;
        size_t n;
        const float *want = tu_capture_get(&c, names[k], &n);
        CHECK(want && mp_h5_read_f32(f, ds, &a, &info) == MP_OK && info.shape[0] == B && tu_max_abs_diff(a, want, n) == 0,
              "batch %s equals the plain forward's", ds);
        if (want) free(a);
    }
    float *fl;
    CHECK(mp_h5_read_f32(f, "/logits", &fl, &info) == MP_OK && tu_max_abs_diff(fl, logits, (size_t)B * T * V) == 0,
          "batch /logits equal the forward's");
    free(fl);
    mp_h5_close(&f);
    tu_capture_free(&c);
    /* an intervention registered by the caller applies before the capture reads */
    mp_hooks *iv = mp_hooks_new(&m->cfg);
    mp_hooks_add(iv, "blocks.0.hook_resid_post", halve, NULL);
    p.fwd_hooks = iv, p.out = in_dir("batch_iv.h5"), p.logits = 0;
    CHECK(mp_capture_run(&p, &r) == MP_OK && mp_hooks_count(iv) == 0, "capture with an intervention: %s (registry cleared)",
          mp_last_error());
    mp_hooks_add(iv, "blocks.0.hook_resid_post", halve, NULL);
    reference(m, tok, B, T, &c, logits, iv);
    mp_hooks_free(iv);
    if (mp_h5_open(&f, p.out, MP_H5_READ) == MP_OK) {
        float *a;
        size_t n;
        const float *want = tu_capture_get(&c, "blocks.1.hook_resid_post", &n);
        CHECK(want && mp_h5_read_f32(f, "/acts/blocks.1.hook_resid_post", &a, &info) == MP_OK &&
                  tu_max_abs_diff(a, want, n) == 0,
              "the intervention's effect is in the captured activations");
        if (want) free(a);
        mp_h5_close(&f);
    }
    tu_capture_free(&c);
    free(logits);
    /* a token outside the vocabulary: refused, no file */
    tok[3] = V;
    p.fwd_hooks = NULL, p.out = in_dir("bad_tok.h5");
    CHECK(mp_capture_run(&p, &r) == MP_ERR_ARG && strstr(mp_last_error(), "token id 257 is outside the vocabulary") &&
              !exists(p.out),
          "token outside the vocabulary: %s", mp_last_error());
}

/* Checks a dataset file against per-prompt forwards of rows[i] (len[i] tokens). */
static void check_dataset(mp_model *m, const char *out, int n, const int *const *rows, const int *len, const char *label) {
    const int V = m->cfg.vocab;
    int tmax = 0;
    for (int i = 0; i < n; i++) tmax = len[i] > tmax ? len[i] : tmax;
    hid_t f;
    if (mp_h5_open(&f, out, MP_H5_READ) != MP_OK) { CHECK(0, "%s: open %s: %s", label, out, mp_last_error()); return; }
    int32_t *lens, *tok;
    mp_h5_dsinfo info;
    CHECK(mp_h5_read_i32(f, "/lengths", &lens, &info) == MP_OK && info.shape[0] == n, "%s: /lengths [%d]", label, n);
    CHECK(mp_h5_read_i32(f, "/tokens", &tok, &info) == MP_OK && info.shape[0] == n && info.shape[1] == tmax,
          "%s: /tokens [%d,%d]", label, n, tmax);
    float *acts[4] = {0}, *logits = NULL;
    mp_h5_dsinfo ai[4];
    for (int k = 0; k < 4; k++) {
        char ds[128];
        snprintf(ds, sizeof ds, "/acts/%s", names[k]);
        CHECK(mp_h5_read_f32(f, ds, &acts[k], &ai[k]) == MP_OK && ai[k].shape[0] == n, "%s: %s", label, ds);
    }
    CHECK(mp_h5_read_f32(f, "/logits", &logits, &info) == MP_OK, "%s: /logits", label);
    mp_h5_close(&f);
    if (!lens || !tok || !logits || !acts[0] || !acts[1] || !acts[2] || !acts[3]) return;
    float *lg = malloc((size_t)tmax * V * sizeof(float));
    for (int i = 0; i < n; i++) {
        const int L = len[i];
        int tok_ok = lens[i] == L;
        for (int t = 0; t < tmax; t++) tok_ok &= tok[(size_t)i * tmax + t] == (t < L ? rows[i][t] : -1);
        CHECK(tok_ok, "%s: prompt %d: length %d and tokens (padded with -1)", label, i, L);
        tu_capture c = {0};
        reference(m, rows[i], 1, L, &c, lg, NULL);
        for (int k = 0; k < 3; k++) { /* [N, Tmax, D]: the prompt's rows, then zeros */
            size_t nn;
            const float *want = tu_capture_get(&c, names[k], &nn);
            const size_t D = nn / (size_t)L;
            const float *row = acts[k] + (size_t)i * tmax * D;
            int pad0 = 1;
            for (size_t j = (size_t)L * D; j < (size_t)tmax * D; j++) pad0 &= row[j] == 0.0f;
            CHECK(want && tu_max_abs_diff(row, want, nn) == 0 && pad0, "%s: prompt %d: %s equals its own forward's", label,
                  i, names[k]);
        }
        { /* pattern [N, H, Tmax, Tmax]: the [H, L, L] block */
            size_t nn;
            const float *want = tu_capture_get(&c, names[3], &nn);
            const int H = m->cfg.n_head;
            double worst = 0;
            for (int h = 0; h < H && want; h++)
                for (int q = 0; q < L; q++)
                    for (int s = 0; s < L; s++) {
                        double d = acts[3][(((size_t)i * H + h) * tmax + q) * tmax + s] - want[((size_t)h * L + q) * L + s];
                        worst = d < 0 ? (-d > worst ? -d : worst) : (d > worst ? d : worst);
                    }
            CHECK(want && worst == 0, "%s: prompt %d: pattern block equals its own forward's", label, i);
        }
        CHECK(tu_max_abs_diff(logits + (size_t)i * tmax * V, lg, (size_t)L * V) == 0, "%s: prompt %d: logits", label, i);
        tu_capture_free(&c);
    }
    free(lg);
    free(lens), free(tok), free(logits);
    for (int k = 0; k < 4; k++) free(acts[k]);
}

static void test_dataset(mp_model *m, mp_tok *bytes) {
    /* --tokens-file: ragged lines, spaces, \r\n, hex */
    write_text(in_dir("toks.txt"), "1,2,3\n 4 , 5\r\n6,7,8,9,10,11\n0x10\n");
    static const int r0[] = {1, 2, 3}, r1[] = {4, 5}, r2[] = {6, 7, 8, 9, 10, 11}, r3[] = {16};
    const int *rows[] = {r0, r1, r2, r3};
    const int len[] = {3, 2, 6, 1};
    mp_capture_params p = mp_capture_params_default();
    p.model = m, p.out = in_dir("toks.h5"), p.hooks = HOOKS, p.logits = 1, p.tokens_file = in_dir("toks.txt");
    p.file_what = "--tokens-file";
    mp_capture_result r;
    CHECK(mp_capture_run(&p, &r) == MP_OK, "tokens-file capture: %s", mp_last_error());
    CHECK(r.n_datasets == 5 && r.n_prompts == 4 && r.T == 6, "tokens-file result: %d datasets, %lld prompts, Tmax %d",
          r.n_datasets, (long long)r.n_prompts, r.T);
    check_dataset(m, p.out, 4, rows, len, "tokens-file");
    /* the same prompts given directly as this rank's prompts: the same file content */
    int all[12];
    int32_t l32[4];
    for (int i = 0, o = 0; i < 4; i++) {
        memcpy(all + o, rows[i], (size_t)len[i] * sizeof(int));
        o += len[i];
        l32[i] = len[i];
    }
    mp_capture_params q = p;
    q.tokens_file = NULL, q.prompts = all, q.lengths = l32, q.n_prompts = 4, q.out = in_dir("prompts.h5");
    CHECK(mp_capture_run(&q, &r) == MP_OK && r.n_prompts == 4, "prompts capture: %s", mp_last_error());
    check_dataset(m, q.out, 4, rows, len, "prompts");
    /* --text-file with the bytes tokenizer: BOS 256 then the bytes */
    write_text(in_dir("text.txt"), "Hi\nabc\r\n\nxyz");
    static const int t0[] = {256, 'H', 'i'}, t1[] = {256, 'a', 'b', 'c'}, t2[] = {256}, t3[] = {256, 'x', 'y', 'z'};
    const int *trows[] = {t0, t1, t2, t3};
    const int tlen[] = {3, 4, 1, 4};
    p.tokens_file = NULL, p.text_file = in_dir("text.txt"), p.tok = bytes, p.out = in_dir("text.h5");
    CHECK(mp_capture_run(&p, &r) == MP_OK && r.n_prompts == 4 && r.T == 4, "text-file capture: %s", mp_last_error());
    check_dataset(m, p.out, 4, trows, tlen, "text-file");
    /* bad inputs: the file and line named, no file left */
    struct { const char *text, *want; } bad[] = {
        {"1,2\n4,x,5\n", "bad.txt:2: 'x' is not a token id"},
        {"1,2\n3,1.5\n", "bad.txt:2: '1.5' is not a token id"},
        {"1\n2\n10,9999\n", "bad.txt:3: token id 9999 is outside the vocabulary (0..256)"},
        {"1,2,\n", "bad.txt:1: '' is not a token id"},
        {"", "bad.txt: no prompts (the file is empty)"},
    };
    p.text_file = NULL, p.tokens_file = in_dir("bad.txt"), p.out = in_dir("bad.h5");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(in_dir("bad.txt"), bad[i].text);
        mp_status st = mp_capture_run(&p, &r);
        CHECK(st == MP_ERR_ARG && strstr(mp_last_error(), bad[i].want) && !exists(in_dir("bad.h5")),
              "bad tokens file %zu: %s", i, mp_last_error());
    }
    p.tokens_file = in_dir("toks.txt"), p.hooks = "blocks.9.*";
    CHECK(mp_capture_run(&p, &r) == MP_ERR_ARG && strstr(mp_last_error(), "blocks.9.*") && !exists(in_dir("bad.h5")),
          "a glob matching nothing: %s", mp_last_error());
    p.hooks = "*", p.text = "two inputs";
    CHECK(mp_capture_run(&p, &r) == MP_ERR_ARG && strstr(mp_last_error(), "exactly one input"), "two inputs: %s",
          mp_last_error());
    p.text = NULL, p.tokens_file = in_dir("missing.txt");
    CHECK(mp_capture_run(&p, &r) != MP_OK && strstr(mp_last_error(), "missing.txt") && strstr(mp_last_error(), "--tokens-file"),
          "a missing file named with its option: %s", mp_last_error());
}

static void test_text(mp_model *m, mp_tok *bytes) {
    mp_capture_params p = mp_capture_params_default();
    p.model = m, p.tok = bytes, p.out = in_dir("text1.h5"), p.text = "Hello", p.hooks = "hook_embed";
    mp_capture_result r;
    CHECK(mp_capture_run(&p, &r) == MP_OK && r.n_datasets == 1 && r.n_prompts == 1 && r.T == 6,
          "text capture: %s (T %d)", mp_last_error(), r.T);
    hid_t f;
    if (mp_h5_open(&f, p.out, MP_H5_READ) == MP_OK) {
        int32_t *t;
        mp_h5_dsinfo info;
        static const int32_t want[] = {256, 'H', 'e', 'l', 'l', 'o'};
        CHECK(mp_h5_read_i32(f, "/tokens", &t, &info) == MP_OK && info.shape[0] == 1 && info.shape[1] == 6 &&
                  memcmp(t, want, sizeof want) == 0,
              "text: /tokens [1,6] = BOS + bytes");
        free(t);
        mp_h5_close(&f);
    }
    p.tok = NULL, p.out = in_dir("notok.h5");
    CHECK(mp_capture_run(&p, &r) == MP_ERR_ARG && strstr(mp_last_error(), "no tokenizer") && !exists(p.out),
          "text without a tokenizer: %s", mp_last_error());
}

int main(void) {
    if (!mkdtemp(dir)) return tu_finish("test_capture_run");
    mp_config c = mp_config_default();
    c.d_model = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_head = 8, c.d_mlp = 64, c.vocab = 257, c.ctx = 64;
    mp_model *m = NULL;
    mp_tok *bytes = NULL;
    CHECK(mp_model_new_random(&m, &c, 3, 0.1f) == MP_OK && mp_tok_new_bytes(&bytes) == MP_OK, "model, tokenizer");
    if (m && bytes) {
        test_batch(m);
        test_dataset(m, bytes);
        test_text(m, bytes);
    }
    mp_tok_free(bytes);
    mp_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_capture_run");
}
