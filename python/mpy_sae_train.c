/* mpy_sae_train.c — SAE training and metrics from Python, over
 * runtime/sae_train.h and io/sae_data.h, as lua/lsae_train.c:
 *
 *     sae, res = mechprobe.train_sae(data=rows, d_sae=64, steps=100, ...)        # numpy rows [N, d_in]
 *     sae, res = mechprobe.train_sae(dataset=["run.h5"], hook="blocks.0.hook_resid_post", ...)
 *     sae, res = mechprobe.train_sae(model=m, hook=..., tokens=ids, ...)         # live activations
 *     sae.evaluate(model=m, tokens=ids, hook=None) / sae.evaluate(data=rows) -> metrics dict
 *
 * The keyword options are mp.sae.train's (SAELens's names). The C core runs
 * with the GIL released; on_checkpoint(sae, step, tokens) takes it back for
 * its call. While a call runs, the SAE cannot be closed (its attached count
 * is held, mpy_sae_attached) and the model is busy. */
#include "mpy.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sae.h"
#include "sae_data.h"
#include "sae_io.h"
#include "sae_train.h"

/* The checkpoint callback (GIL released around it): saves <path>/<tokens>
 * when checkpoint_path is given, then calls on_checkpoint(sae, step, tokens). */
typedef struct {
    PyObject *fn, *sae; /* fn NULL: none */
    const char *path;
    PyObject *etype, *evalue, *etb; /* the callback's exception */
} ckpt_ctx;

static mp_status py_ckpt(void *user, const mp_sae *s, long step, long tokens) {
    ckpt_ctx *c = user;
    if (c->path) {
        char dir[4096];
        if (snprintf(dir, sizeof dir, "%s/%ld", c->path, tokens) >= (int)sizeof dir)
            return mp_error(MP_ERR_ARG, "train_sae: checkpoint_path is too long");
        mp_status st = mp_sae_save(s, dir);
        if (st) return st;
    }
    if (!c->fn) return MP_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(c->fn, "Oll", c->sae, step, tokens);
    mp_status st = MP_OK;
    if (!r) {
        PyErr_Fetch(&c->etype, &c->evalue, &c->etb);
        PyErr_NormalizeException(&c->etype, &c->evalue, &c->etb);
        st = mp_error(MP_ERR_ARG, "on_checkpoint raised an exception");
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

static int dset(PyObject *d, const char *k, PyObject *v) {
    int rc = v ? PyDict_SetItemString(d, k, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* File names from dataset=: a path or a list of paths (new bytes objects in *keep). */
static int dataset_paths(PyObject *obj, PyObject **keep, const char ***paths, int *n) {
    PyObject *l = PyUnicode_Check(obj) || PyBytes_Check(obj) || PyObject_HasAttrString(obj, "__fspath__")
                      ? Py_BuildValue("[O]", obj)
                      : PySequence_List(obj);
    if (!l) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "train_sae: dataset must be a file name or a list of them");
        return -1;
    }
    *n = (int)PyList_GET_SIZE(l);
    if (*n < 1) {
        Py_DECREF(l);
        PyErr_SetString(PyExc_ValueError, "train_sae: dataset is an empty list");
        return -1;
    }
    *keep = PyList_New(*n);
    *paths = PyMem_Calloc((size_t)*n, sizeof(char *));
    if (!*keep || !*paths) {
        Py_DECREF(l);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < *n; i++) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(PyList_GET_ITEM(l, i), &b)) {
            Py_DECREF(l);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "train_sae: dataset[%d] must be a file name", i);
            return -1;
        }
        PyList_SET_ITEM(*keep, i, b);
        (*paths)[i] = PyBytes_AS_STRING(b);
    }
    Py_DECREF(l);
    return 0;
}

static int opt_int_range(PyObject *kw, long v, long lo, long hi, const char *name) {
    (void)kw;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "train_sae: %s must be in [%ld, %ld], got %ld", name, lo, hi, v);
        return -1;
    }
    return 0;
}

/* mechprobe.train_sae(**options) -> (sae, results) */
static PyObject *py_train_sae(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static const char *fn = "train_sae";
    static char *kwlist[] = {"sae", "architecture", "d_sae", "k", "apply_b_dec_to_input", "model", "hook", "tokens",
                             "seqs_per_forward", "dataset", "chunk_rows", "data", "epochs", "l1_coefficient",
                             "l1_warm_up_steps", "lr", "lr_scheduler", "lr_warm_up_steps", "lr_decay_steps", "lr_end",
                             "adam_beta1", "adam_beta2", "batch_size", "steps", "training_tokens",
                             "dead_feature_window", "normalize_decoder", "decoder_init_norm", "seed", "grad_clip",
                             "shuffle_buffer", "checkpoint_every", "on_checkpoint", "checkpoint_path", "progress",
                             "init", NULL};
    mp_sae_train_params p = mp_sae_train_params_default();
    PyObject *saeobj = Py_None, *kobj = Py_None, *modelobj = Py_None, *tokobj = Py_None, *dsobj = Py_None,
             *dataobj = Py_None, *stepsobj = Py_None, *ttobj = Py_None, *ckfn = Py_None, *ckpath = Py_None,
             *shufobj = Py_None, *initobj = Py_None;
    const char *arch_name = "standard", *hook = "", *sched = "constant";
    int d_sae = 0, apply = 1, spf = 8, chunk = 65536, epochs = 0, l1w = 0, lrw = 0, lrd = 0, bs = p.batch_size,
        dfw = p.dead_feature_window, normdec = 0, progress = 0;
    long long seed = 42, ck_every = 0;
    double lr = p.lr, lr_end = -1.0, b1 = p.adam_beta1, b2 = p.adam_beta2, l1 = p.l1_coefficient,
           dinit = p.decoder_init_norm, clip = p.grad_clip;
    if (args && PyTuple_GET_SIZE(args))
        return PyErr_Format(PyExc_TypeError, "%s: keyword arguments only (mp.sae.train's options)", fn);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$" "OsiOpOsOiOiOi" "didsiiddd" "iOOipdLdOLOOpO" ":train_sae", kwlist, &saeobj,
                                     &arch_name, &d_sae, &kobj, &apply, &modelobj, &hook, &tokobj, &spf, &dsobj,
                                     &chunk, &dataobj, &epochs, &l1, &l1w, &lr, &sched, &lrw, &lrd, &lr_end, &b1, &b2,
                                     &bs, &stepsobj, &ttobj, &dfw, &normdec, &dinit, &seed, &clip, &shufobj,
                                     &ck_every, &ckfn, &ckpath, &progress, &initobj))
        return NULL;
    if (opt_int_range(kw, bs, 1, 1 << 24, "batch_size") ||
        opt_int_range(kw, dfw, 1, 1 << 30, "dead_feature_window") ||
        opt_int_range(kw, l1w, 0, 1 << 30, "l1_warm_up_steps") ||
        opt_int_range(kw, lrw, 0, 1 << 30, "lr_warm_up_steps") ||
        opt_int_range(kw, lrd, 0, 1 << 30, "lr_decay_steps") || opt_int_range(kw, epochs, 0, 1 << 30, "epochs") ||
        opt_int_range(kw, spf, 1, 1 << 20, "seqs_per_forward") ||
        opt_int_range(kw, chunk, 1, 1 << 24, "chunk_rows"))
        return NULL;
    if (seed < 0 || ck_every < 0)
        return PyErr_Format(PyExc_ValueError, "%s: %s must be >= 0", fn, seed < 0 ? "seed" : "checkpoint_every");
    if (!strcmp(sched, "constant")) p.lr_scheduler = 0;
    else if (!strcmp(sched, "cosineannealing")) p.lr_scheduler = 1;
    else return PyErr_Format(PyExc_ValueError, "%s: lr_scheduler: \"constant\" or \"cosineannealing\" expected, got "
                             "\"%s\"", fn, sched);
    p.lr = (float)lr;
    p.adam_beta1 = (float)b1;
    p.adam_beta2 = (float)b2;
    p.lr_warm_up_steps = lrw;
    p.lr_decay_steps = lrd;
    p.lr_end = (float)lr_end;
    p.l1_coefficient = (float)l1;
    p.l1_warm_up_steps = l1w;
    p.batch_size = bs;
    p.dead_feature_window = dfw;
    p.normalize_decoder = normdec;
    p.decoder_init_norm = (float)dinit;
    p.seed = (uint64_t)seed;
    p.grad_clip = (float)clip;
    p.checkpoint_every = (long)ck_every;
    p.progress = progress;
    if ((stepsobj == Py_None) == (ttobj == Py_None))
        return PyErr_Format(PyExc_ValueError, "%s: give exactly one of steps= and training_tokens=", fn);
    long long nv = PyLong_AsLongLong(stepsobj != Py_None ? stepsobj : ttobj);
    if (nv == -1 && PyErr_Occurred()) return NULL;
    if (nv < 1)
        return PyErr_Format(PyExc_ValueError, "%s: %s must be >= 1, got %lld", fn,
                            stepsobj != Py_None ? "steps" : "training_tokens", nv);
    p.steps = (long)(stepsobj != Py_None ? nv : nv / p.batch_size);
    if (p.steps < 1) return PyErr_Format(PyExc_ValueError, "%s: training_tokens is less than one batch (%d)", fn, bs);
    if (ckfn != Py_None && !PyCallable_Check(ckfn))
        return PyErr_Format(PyExc_TypeError, "%s: on_checkpoint must be a function (sae, step, tokens)", fn);

    /* everything the call owns, freed at `done` */
    PyObject *ret = NULL, *pathb = NULL, *dskeep = NULL, *sae = NULL, *res = NULL;
    PyArrayObject *x = NULL, *tok = NULL;
    const char **paths = NULL;
    mp_sae_h5src *h5 = NULL;
    mp_sae_live *live = NULL;
    mp_sae_shuffler *sh = NULL;
    mpy_model *model = NULL;
    int pinned = 0;
    mp_sae_rows mr;
    const char *ckpt_path = NULL;
    mp_status st;
    if (ckpath != Py_None) {
        if (!PyUnicode_FSConverter(ckpath, &pathb)) return NULL;
        ckpt_path = PyBytes_AS_STRING(pathb);
        if (!p.checkpoint_every) {
            PyErr_Format(PyExc_ValueError, "%s: checkpoint_path needs checkpoint_every", fn);
            goto done;
        }
        if (mkdir(ckpt_path, 0777) && errno != EEXIST) {
            PyErr_Format(PyExc_OSError, "%s: checkpoint_path %s: cannot create: %s", fn, ckpt_path, strerror(errno));
            goto done;
        }
    }

    /* the data */
    int n_src = (modelobj != Py_None) + (dsobj != Py_None) + (dataobj != Py_None);
    if (n_src != 1) {
        PyErr_Format(PyExc_ValueError, "%s: give exactly one data source: model= (+ hook=, tokens=), dataset= (+ "
                     "hook=) or data=", fn);
        goto done;
    }
    int d = 0;
    mp_sae_produce_fn produce;
    void *puser;
    if (dataobj != Py_None) {
        if (!(x = mpy_floats(dataobj, 2, "train_sae: data"))) goto done;
        if (PyArray_DIM(x, 0) < 1 || PyArray_DIM(x, 1) < 1) {
            PyErr_Format(PyExc_ValueError, "%s: data must be rows [N, d_in] with N, d_in >= 1", fn);
            goto done;
        }
        mr = (mp_sae_rows){PyArray_DATA(x), (long)PyArray_DIM(x, 0), 0, (int)PyArray_DIM(x, 1)};
        d = mr.d;
        produce = mp_sae_rows_produce;
        puser = &mr;
    } else if (dsobj != Py_None) {
        int n;
        if (dataset_paths(dsobj, &dskeep, &paths, &n)) goto done;
        if (!*hook) {
            PyErr_Format(PyExc_ValueError, "%s: dataset= needs hook= (the /acts/<hook> to read)", fn);
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        st = mp_sae_h5src_open(&h5, paths, n, hook, epochs, chunk, &d);
        Py_END_ALLOW_THREADS
        if (st) {
            mpy_fail(st);
            goto done;
        }
        produce = mp_sae_h5src_produce;
        puser = h5;
    } else {
        if (!PyObject_TypeCheck(modelobj, &mpy_model_type)) {
            PyErr_Format(PyExc_TypeError, "%s: model must be a mechprobe.Model, got %s", fn,
                         Py_TYPE(modelobj)->tp_name);
            goto done;
        }
        model = (mpy_model *)modelobj;
        if (!mpy_model_get(model, fn, 0)) goto done;
        if (!*hook) {
            PyErr_Format(PyExc_ValueError, "%s: model= needs hook=", fn);
            goto done;
        }
        if (tokobj == Py_None) {
            PyErr_Format(PyExc_ValueError, "%s: model= needs tokens=", fn);
            goto done;
        }
        if (!(tok = mpy_tokens(model, tokobj, "train_sae: tokens"))) goto done;
        int S = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
        mp_hook_id id;
        int layer;
        if (mp_hook_parse(&model->m->cfg, hook, &id, &layer)) {
            PyErr_Format(PyExc_ValueError, "%s: '%s' is not a hook point of this model", fn, hook);
            goto done;
        }
        int64_t shape[4];
        int nd = mp_hook_shape(&model->m->cfg, id, 1, T, 0, shape);
        if (nd < 3 || shape[0] != 1 || shape[1] != T) {
            PyErr_Format(PyExc_ValueError, "%s: '%s' is not a per-token hook point ([B, T, ...])", fn, hook);
            goto done;
        }
        d = 1;
        for (int k = 2; k < nd; k++) d *= (int)shape[k];
        if ((st = mp_sae_live_new(&live, model->m, hook, d, PyArray_DATA(tok), S, T, spf, epochs))) {
            mpy_fail(st);
            goto done;
        }
        produce = mp_sae_live_produce;
        puser = live;
    }

    /* the SAE: given, or new */
    mp_sae *s;
    if (saeobj != Py_None) {
        if (!(s = mpy_sae_get(saeobj))) goto done;
        if (strcmp(arch_name, "standard") || d_sae || kobj != Py_None || !apply) {
            PyErr_Format(PyExc_ValueError, "%s: architecture=, d_sae=, k= and apply_b_dec_to_input= are for a new SAE, "
                         "not with sae=", fn);
            goto done;
        }
        if (s->d_in != d) {
            PyErr_Format(PyExc_ValueError, "%s: the SAE's d_in (%d) differs from the data's (%d)", fn, s->d_in, d);
            goto done;
        }
        p.init = initobj != Py_None && PyObject_IsTrue(initobj) > 0;
        sae = Py_NewRef(saeobj);
    } else {
        if (strcmp(arch_name, "standard") && strcmp(arch_name, "topk")) {
            PyErr_Format(PyExc_ValueError, "%s: architecture: \"standard\" or \"topk\" expected (trainable), got "
                         "\"%s\"", fn, arch_name);
            goto done;
        }
        if (d_sae < 1 || d_sae > (1 << 26)) {
            PyErr_Format(PyExc_ValueError, "%s: d_sae is required (in [1, %d])", fn, 1 << 26);
            goto done;
        }
        if (initobj != Py_None && PyObject_IsTrue(initobj) <= 0) {
            PyErr_Format(PyExc_ValueError, "%s: init=False is for sae= (a new SAE is always initialised)", fn);
            goto done;
        }
        PyObject *core = PyImport_ImportModule("mechprobe._core");
        PyObject *type = core ? PyObject_GetAttrString(core, "SAE") : NULL;
        Py_XDECREF(core);
        PyObject *kwa = type ? Py_BuildValue("{s:s,s:i,s:i,s:O,s:O}", "architecture", arch_name, "d_in", d, "d_sae",
                                             d_sae, "k", kobj, "apply_b_dec_to_input", apply ? Py_True : Py_False)
                             : NULL;
        if (kwa && *hook && strlen(hook) < sizeof ((mp_sae *)0)->hook_name) {
            PyObject *h = PyUnicode_FromString(hook);
            if (!h || PyDict_SetItemString(kwa, "hook_name", h)) Py_CLEAR(kwa);
            Py_XDECREF(h);
            if (kwa && !strncmp(hook, "blocks.", 7) && dset(kwa, "hook_layer", PyLong_FromLong(atol(hook + 7))))
                Py_CLEAR(kwa);
        }
        PyObject *empty = kwa ? PyTuple_New(0) : NULL;
        sae = empty ? PyObject_Call(type, empty, kwa) : NULL;
        Py_XDECREF(empty);
        Py_XDECREF(kwa);
        Py_XDECREF(type);
        if (!sae || !(s = mpy_sae_get(sae))) goto done;
        p.init = 1;
    }
    long cap = 4L * p.batch_size;
    if (shufobj != Py_None) {
        cap = PyLong_AsLong(shufobj);
        if (cap == -1 && PyErr_Occurred()) goto done;
        if (opt_int_range(kw, cap, 1, 1 << 30, "shuffle_buffer")) goto done;
    }
    if ((st = mp_sae_shuffler_new(&sh, d, (int)cap, p.seed + 1, produce, puser))) {
        mpy_fail(st);
        goto done;
    }
    ckpt_ctx cc = {ckfn == Py_None ? NULL : ckfn, sae, ckpt_path, NULL, NULL, NULL};
    mp_sae_train_result r;
    mpy_sae_attached(sae, +1); /* close() refused meanwhile */
    pinned = 1;
    if (model) model->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_train(s, &p, mp_sae_shuffle_next, sh, cc.fn || ckpt_path ? py_ckpt : NULL, &cc, &r);
    Py_END_ALLOW_THREADS
    if (model) model->busy--;
    if (st) {
        if (cc.etype) PyErr_Restore(cc.etype, cc.evalue, cc.etb);
        else mpy_fail(st);
        goto done;
    }
    if (!(res = PyDict_New()) || dset(res, "steps", PyLong_FromLong(r.steps)) ||
        dset(res, "tokens", PyLong_FromLong(r.tokens)) || dset(res, "mse_loss", PyFloat_FromDouble(r.mse)) ||
        dset(res, s->arch == MP_SAE_TOPK ? "auxiliary_reconstruction_loss" : "l1_loss", PyFloat_FromDouble(r.aux)) ||
        dset(res, "l0", PyFloat_FromDouble(r.l0)) ||
        dset(res, "explained_variance", PyFloat_FromDouble(r.explained_variance)) ||
        dset(res, "dead_features", PyLong_FromLong(r.n_dead)) || dset(res, "seconds", PyFloat_FromDouble(r.seconds)) ||
        dset(res, "tokens_per_second", PyFloat_FromDouble(r.seconds > 0 ? r.tokens / r.seconds : 0)) ||
        dset(res, "steady_tokens_per_second",
             PyFloat_FromDouble(r.steady_seconds > 0 ? (double)(r.tokens - p.batch_size) / r.steady_seconds : NAN)))
        goto done;
    ret = PyTuple_Pack(2, sae, res);
done:
    if (pinned) mpy_sae_attached(sae, -1);
    mp_sae_shuffler_free(sh);
    mp_sae_h5src_close(h5);
    mp_sae_live_free(live);
    PyMem_Free(paths);
    Py_XDECREF(dskeep);
    Py_XDECREF(pathb);
    Py_XDECREF(x);
    Py_XDECREF(tok);
    Py_XDECREF(sae);
    Py_XDECREF(res);
    return ret;
}

static PyObject *metrics_dict(const mp_sae_metrics *m) {
    PyObject *d = PyDict_New();
    if (!d || dset(d, "rows", PyLong_FromLong(m->rows)) || dset(d, "l0", PyFloat_FromDouble(m->l0)) ||
        dset(d, "explained_variance", PyFloat_FromDouble(m->explained_variance)) ||
        dset(d, "mse", PyFloat_FromDouble(m->mse)) || dset(d, "dead_fraction", PyFloat_FromDouble(m->dead_fraction)))
        goto fail;
    if (!isnan(m->ce_clean) &&
        (dset(d, "ce_loss_clean", PyFloat_FromDouble(m->ce_clean)) ||
         dset(d, "ce_loss_with_sae", PyFloat_FromDouble(m->ce_sae)) ||
         dset(d, "ce_loss_zero_ablation", PyFloat_FromDouble(m->ce_zero)) ||
         dset(d, "ce_loss_recovered", PyFloat_FromDouble(m->ce_loss_recovered))))
        goto fail;
    return d;
fail:
    Py_XDECREF(d);
    return NULL;
}

/* sae.evaluate(model=, tokens=, hook=None) or sae.evaluate(data=rows [..., d_in]) -> metrics */
PyObject *mpy_sae_evaluate(PyObject *self, PyObject *args, PyObject *kw) {
    static const char *fn = "SAE.evaluate";
    static char *kwlist[] = {"model", "tokens", "hook", "data", NULL};
    PyObject *modelobj = Py_None, *tokobj = Py_None, *dataobj = Py_None;
    const char *hook = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOzO:evaluate", kwlist, &modelobj, &tokobj, &hook, &dataobj))
        return NULL;
    if (!hook) hook = "";
    mp_sae *s = mpy_sae_get(self);
    if (!s) return NULL;
    mp_sae_metrics m;
    mp_status st;
    if (dataobj != Py_None) {
        if (modelobj != Py_None || tokobj != Py_None)
            return PyErr_Format(PyExc_ValueError, "%s: give data=, or model= and tokens=, not both", fn);
        PyArrayObject *x = mpy_floats(dataobj, -1, "SAE.evaluate: data");
        if (!x) return NULL;
        int nd = PyArray_NDIM(x);
        npy_intp N = nd ? PyArray_SIZE(x) / s->d_in : 0;
        if (nd < 1 || PyArray_DIM(x, nd - 1) != s->d_in || N < 1 || N > (npy_intp)1 << 30) {
            Py_DECREF(x);
            return PyErr_Format(PyExc_ValueError, "%s: data must be rows [..., d_in = %d] (at least one)", fn,
                                s->d_in);
        }
        mpy_sae_attached(self, +1);
        Py_BEGIN_ALLOW_THREADS
        st = mp_sae_metrics_rows(s, PyArray_DATA(x), (int)N, &m);
        Py_END_ALLOW_THREADS
        mpy_sae_attached(self, -1);
        Py_DECREF(x);
        if (st) return mpy_fail(st);
        return metrics_dict(&m);
    }
    if (modelobj == Py_None) return PyErr_Format(PyExc_ValueError, "%s: give model= and tokens=, or data=", fn);
    if (!PyObject_TypeCheck(modelobj, &mpy_model_type))
        return PyErr_Format(PyExc_TypeError, "%s: model must be a mechprobe.Model, got %s", fn,
                            Py_TYPE(modelobj)->tp_name);
    mpy_model *model = (mpy_model *)modelobj;
    mp_model *mm = mpy_model_get(model, "evaluate", 0);
    if (!mm) return NULL;
    if (tokobj == Py_None) return PyErr_Format(PyExc_ValueError, "%s: model= needs tokens=", fn);
    PyArrayObject *tok = mpy_tokens(model, tokobj, "SAE.evaluate: tokens");
    if (!tok) return NULL;
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    mpy_sae_attached(self, +1);
    model->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_evaluate(s, mm, hook, PyArray_DATA(tok), B, T, &m);
    Py_END_ALLOW_THREADS
    model->busy--;
    mpy_sae_attached(self, -1);
    Py_DECREF(tok);
    if (st) return mpy_fail(st);
    return metrics_dict(&m);
}

PyMethodDef mpy_sae_train_functions[] = {
    {"train_sae", (PyCFunction)(void (*)(void))py_train_sae, METH_VARARGS | METH_KEYWORDS,
     "train_sae(*, data= rows [N, d_in] | dataset= paths + hook= | model= + hook= + tokens=, d_sae=, "
     "architecture='standard', k=None, steps= | training_tokens=, lr=3e-4, l1_coefficient=1.0, batch_size=4096, ... "
     "(mp.sae.train's options)) -> (sae, results)"},
    {NULL, NULL, 0, NULL}};
