/* test_cfg_attrs.c — issue 38: a checkpoint's /config and a run file's /model
 * carry the same attributes with the same values (mlp = "gelu_tanh" for a
 * gelu_tanh model in both, no longer "gelu" + gelu_tanh = 1 in /config), and
 * checkpoints written before (mlp = "gelu", gelu_tanh = 1) still load as
 * gelu_tanh models; mlp = "gelu_tanh" with gelu_tanh = 0 is refused. */
#include "checkpoint.h"
#include "h5io.h"
#include "h5run.h"
#include "model.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const mp_h5_attr *find(const mp_h5_attr *a, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(a[i].name, name)) return &a[i];
    return NULL;
}

static int same_value(const mp_h5_attr *x, const mp_h5_attr *y) {
    if (x->kind != y->kind) return 0;
    switch (x->kind) {
    case MP_H5_ATTR_INT: return x->i == y->i;
    case MP_H5_ATTR_FLOAT: return x->f == y->f;
    case MP_H5_ATTR_STRING: return !strcmp(x->s, y->s);
    case MP_H5_ATTR_INT_ARRAY: return x->n == y->n && !memcmp(x->iv, y->iv, x->n * sizeof *x->iv);
    case MP_H5_ATTR_FLOAT_ARRAY: return x->n == y->n && !memcmp(x->fv, y->fv, x->n * sizeof *x->fv);
    default: return 0;
    }
}

static void set_attrs(const char *path, const char *mlp, int gelu_tanh) {
    hid_t f;
    CHECK(mp_h5_open(&f, path, MP_H5_RDWR) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_attr_set_string(f, "/config", "mlp", mlp) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_attr_set_int(f, "/config", "gelu_tanh", gelu_tanh) == MP_OK, "%s", mp_last_error());
    H5Fclose(f);
}

int main(void) {
    char dir[] = "/tmp/mp_cfg_attrs_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char ck[128], run[128];
    snprintf(ck, sizeof ck, "%s/ck.h5", dir);
    snprintf(run, sizeof run, "%s/run.h5", dir);

    /* a GPT-2-like gelu_tanh model with the optional fields a GPT-2 writes */
    mp_config c = mp_config_default();
    c.d_model = 16; c.n_layer = 1; c.n_head = 2; c.n_kv_head = 2; c.d_head = 8; c.d_mlp = 32;
    c.vocab = 40; c.ctx = 8; c.norm = MP_NORM_LAYER; c.mlp = MP_MLP_GELU; c.gelu_tanh = 1;
    c.pos = MP_POS_LEARNED; c.qkv_bias = 1; c.linear_bias = 1; c.tied = 0;
    mp_model *m = NULL;
    CHECK(mp_model_new_random(&m, &c, 5, 0.1f) == MP_OK, "%s", mp_last_error());
    if (!m) return tu_finish("test_cfg_attrs");
    CHECK(mp_checkpoint_save(ck, m, NULL, NULL) == MP_OK, "%s", mp_last_error());
    mp_h5run *r = NULL;
    mp_h5run_params p = mp_h5run_params_default();
    CHECK(mp_h5run_create(&r, run, &p) == MP_OK, "%s", mp_last_error());
    if (r) {
        CHECK(mp_h5run_write_model(r, &m->cfg, m->source, "bytes") == MP_OK, "%s", mp_last_error());
        CHECK(mp_h5run_commit(r) == MP_OK, "%s", mp_last_error());
    }

    /* /config and /model field by field: the same names and values (/model adds
     * source; the tokenizer differs by what each was given) */
    hid_t fc, fm;
    mp_h5_attr *ac = NULL, *am = NULL;
    int nc = 0, nm = 0;
    CHECK(mp_h5_open(&fc, ck, MP_H5_READ) == MP_OK && mp_h5_attrs_read(fc, "/config", &ac, &nc) == MP_OK,
          "%s", mp_last_error());
    CHECK(mp_h5_open(&fm, run, MP_H5_READ) == MP_OK && mp_h5_attrs_read(fm, "/model", &am, &nm) == MP_OK,
          "%s", mp_last_error());
    int compared = 0;
    for (int i = 0; i < nc; i++) {
        if (!strcmp(ac[i].name, "tokenizer")) continue;
        const mp_h5_attr *b = find(am, nm, ac[i].name);
        CHECK(b && same_value(&ac[i], b), "/config %s differs from /model %s", ac[i].name, b ? b->name : "(absent)");
        compared++;
    }
    for (int i = 0; i < nm; i++)
        CHECK(!strcmp(am[i].name, "source") || !strcmp(am[i].name, "tokenizer") || find(ac, nc, am[i].name),
              "/model %s is not in /config", am[i].name);
    const mp_h5_attr *mlp = find(ac, nc, "mlp"), *gt = find(ac, nc, "gelu_tanh");
    CHECK(mlp && mlp->kind == MP_H5_ATTR_STRING && !strcmp(mlp->s, "gelu_tanh"), "/config mlp = \"gelu_tanh\"");
    CHECK(gt && gt->kind == MP_H5_ATTR_INT && gt->i == 1, "/config gelu_tanh = 1");
    CHECK(compared >= 15, "only %d fields compared", compared);
    printf("/config and /model: %d fields, the same values (mlp = \"%s\")\n", compared, mlp ? mlp->s : "?");
    mp_h5_attrs_free(ac, nc);
    mp_h5_attrs_free(am, nm);
    H5Fclose(fc);
    H5Fclose(fm);

    /* this version's checkpoint loads as gelu_tanh */
    mp_model *l = NULL;
    CHECK(mp_checkpoint_load(ck, &l, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(l && l->cfg.mlp == MP_MLP_GELU && l->cfg.gelu_tanh == 1, "new checkpoint: gelu_tanh model");
    mp_model_free(l);
    l = NULL;
    /* a checkpoint as written before issue 38: mlp = "gelu" with gelu_tanh = 1 */
    set_attrs(ck, "gelu", 1);
    CHECK(mp_checkpoint_load(ck, &l, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(l && l->cfg.mlp == MP_MLP_GELU && l->cfg.gelu_tanh == 1, "old-style /config: gelu_tanh model");
    if (l) {   /* and the same model: the logits agree exactly */
        int toks[4] = {1, 7, 3, 9};
        size_t n = (size_t)4 * c.vocab;
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        CHECK(mp_model_forward(m, toks, 1, 4, NULL, a) == MP_OK && mp_model_forward(l, toks, 1, 4, NULL, b) == MP_OK,
              "%s", mp_last_error());
        CHECK(tu_max_abs_diff(a, b, n) == 0.0, "old-style checkpoint's logits differ by %g", tu_max_abs_diff(a, b, n));
        free(a);
        free(b);
    }
    mp_model_free(l);
    l = NULL;
    /* plain GELU stays plain */
    set_attrs(ck, "gelu", 0);
    CHECK(mp_checkpoint_load(ck, &l, NULL, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(l && l->cfg.mlp == MP_MLP_GELU && l->cfg.gelu_tanh == 0, "mlp gelu, gelu_tanh 0: plain GELU");
    mp_model_free(l);
    l = NULL;
    /* a contradiction is refused, naming the file and both attributes */
    set_attrs(ck, "gelu_tanh", 0);
    CHECK(mp_checkpoint_load(ck, &l, NULL, NULL) == MP_ERR_FORMAT && !l, "gelu_tanh with gelu_tanh 0 refused");
    CHECK(strstr(mp_last_error(), ck) && strstr(mp_last_error(), "'mlp' is \"gelu_tanh\" but 'gelu_tanh' is 0"),
          "message: %s", mp_last_error());
    printf("old /config (gelu + gelu_tanh 1) loads as gelu_tanh; gelu_tanh + gelu_tanh 0: %s\n", mp_last_error());

    mp_model_free(m);
    unlink(ck);
    unlink(run);
    rmdir(dir);
    return tu_finish("test_cfg_attrs");
}
