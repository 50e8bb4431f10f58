/* mpy_extra.c — the rest of the Model's methods in Python: interventions,
 * capture to HDF5, weights in TransformerLens's shapes, weight processing,
 * saving, training steps and the analyses, each over the C function the Lua
 * binding calls (lua/lintervene.c, lcapture.c, lweights.c, lmodel.c's save,
 * ltrain.c, lanalyze.c, lprobe.c). The pure-Python parts (mechprobe.load with
 * the weight-processing keywords, mechprobe.ablate, mechprobe.analyze) are in
 * mechprobe/extra.py and mechprobe/analyze.py.
 *
 * Weights come out as copies (numpy arrays that own their memory): an array
 * read before m.close() or `del m` stays valid after it, and a memory-mapped
 * llama2.c model reads like any other. Writes go through m.set_weight /
 * m.set_param, refused where the Lua binding refuses its views (quantized or
 * memory-mapped read-only parameters).
 *
 * The training state (the AdamW optimizer, its step buffers and the loss
 * curve) lives beside the Model in a table keyed by the model object, freed by
 * a weak-reference callback when the model goes; m.save(".h5") writes it into
 * the checkpoint and mechprobe.load restores it (mechprobe._core._restore_train_state). */
#include "mpy_extra.h"

#include "capture.h"
#include "checkpoint.h"
#include "formats.h"
#include "geometry.h"
#include "intervene.h"
#include "model_io.h"
#include "optim.h"
#include "probe.h"
#include "sae_splice.h"
#include "sinks.h"
#include "stats.h"
#include "tensor.h"
#include "train.h"
#include "trainloop.h"
#include "weights_process.h"
#include "weights_tl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* Raises the exception mpy_fail would, with "fn: " in front of the message
 * (unless the message already starts with it). Returns NULL. MP_ERR_HOOK is a
 * ValueError here: the only hooks of this file's calls are the C
 * interventions, which fail for an argument that does not fit the hook (a
 * head out of range, a source of the wrong size). */
static PyObject *fail_in(mp_status st, const char *fn) {
    if (PyErr_Occurred()) return NULL;
    PyObject *kind = st == MP_ERR_ARG || st == MP_ERR_HOOK ? PyExc_ValueError
                   : st == MP_ERR_NOMEM ? PyExc_MemoryError
                   : st == MP_ERR_IO ? PyExc_OSError
                   : mpy_error;
    const char *msg = mp_last_error();
    size_t n = strlen(fn);
    if (strncmp(msg, fn, n) == 0 && msg[n] == ':') PyErr_SetString(kind, msg);
    else PyErr_Format(kind, "%s: %s", fn, msg);
    return NULL;
}

/* An int32 array [B, T] of integers in [lo, hi) from a list / list of lists /
 * integer array of 1 or 2 dims (1 dim: B = 1). */
static PyArrayObject *int_array(PyObject *obj, const char *what, long lo, long hi) {
    PyArrayObject *in = (PyArrayObject *)PyArray_FROMANY(obj, NPY_NOTYPE, 0, 0, 0);
    if (!in) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a list of integers or an integer array", what);
        return NULL;
    }
    if (PyArray_SIZE(in) > 0 && !PyArray_ISINTEGER(in)) {
        PyErr_Format(PyExc_TypeError, "%s: expected integers (got an array of %s)", what,
                     PyArray_DESCR(in)->typeobj->tp_name);
        Py_DECREF(in);
        return NULL;
    }
    int nd = PyArray_NDIM(in);
    if (nd != 1 && nd != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected 1 or 2 dimensions ([T] or [B, T]), got %d", what, nd);
        Py_DECREF(in);
        return NULL;
    }
    npy_intp dims[2] = {nd == 2 ? PyArray_DIM(in, 0) : 1, PyArray_DIM(in, nd - 1)};
    if (dims[0] < 1 || dims[1] < 1 || dims[0] > INT_MAX / 2 || dims[1] > INT_MAX / 2 ||
        dims[0] * dims[1] > INT_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: shape [%zd, %zd] is empty or too large", what, (Py_ssize_t)dims[0],
                     (Py_ssize_t)dims[1]);
        Py_DECREF(in);
        return NULL;
    }
    PyArrayObject *i64 = (PyArrayObject *)PyArray_FROMANY((PyObject *)in, NPY_INT64, 0, 0, NPY_ARRAY_CARRAY);
    Py_DECREF(in);
    if (!i64) return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!a) {
        Py_DECREF(i64);
        return NULL;
    }
    const int64_t *src = PyArray_DATA(i64);
    int *dst = PyArray_DATA(a);
    for (npy_intp i = 0; i < dims[0] * dims[1]; i++) {
        if (src[i] < lo || src[i] >= hi) {
            PyErr_Format(PyExc_ValueError, "%s: value %lld at position %zd is out of range [%ld, %ld)", what,
                         (long long)src[i], (Py_ssize_t)i, lo, hi);
            Py_DECREF(i64);
            Py_DECREF(a);
            return NULL;
        }
        dst[i] = (int)src[i];
    }
    Py_DECREF(i64);
    return a;
}

static PyObject *doubles_array(int nd, const npy_intp *dims, const double *v) {
    PyObject *a = PyArray_SimpleNew(nd, (npy_intp *)dims, NPY_FLOAT64);
    if (a) memcpy(PyArray_DATA((PyArrayObject *)a), v, (size_t)PyArray_SIZE((PyArrayObject *)a) * sizeof(double));
    return a;
}

static PyObject *floats_array(int nd, const npy_intp *dims, const float *v) {
    PyObject *a = PyArray_SimpleNew(nd, (npy_intp *)dims, NPY_FLOAT32);
    if (a) memcpy(PyArray_DATA((PyArrayObject *)a), v, (size_t)PyArray_SIZE((PyArrayObject *)a) * sizeof(float));
    return a;
}

/* Sets d[key] = v (stealing v); -1 on failure (v NULL included). */
static int dset(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return r;
}

/* An optional path argument: None -> NULL, else PyUnicode_FSConverter's bytes. */
static int fs_opt(PyObject *o, void *out) {
    PyObject **b = out;
    if (o == Py_None) {
        *b = NULL;
        return 1;
    }
    return PyUnicode_FSConverter(o, b);
}

/* ---- interventions (hooks/intervene.h; the Lua side is lua/lintervene.c) ---- */

typedef struct {
    PyObject_HEAD
    mp_intervention iv;
    PyObject *data; /* the float32 array iv.data points into (NULL: none) */
} mpy_iv;

static void iv_dealloc(mpy_iv *self) {
    mp_intervention_free(&self->iv);
    Py_CLEAR(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *iv_repr(mpy_iv *self) {
    char pos[32] = "";
    if (self->iv.npos) snprintf(pos, sizeof pos, ", %d position%s", self->iv.npos, self->iv.npos > 1 ? "s" : "");
    if (self->iv.head >= 0)
        return PyUnicode_FromFormat("<mechprobe.Intervention %s of head %d%s>", mp_intervention_name(self->iv.kind),
                                    self->iv.head, pos);
    return PyUnicode_FromFormat("<mechprobe.Intervention %s%s>", mp_intervention_name(self->iv.kind), pos);
}

static PyObject *iv_get_kind(mpy_iv *self, void *c) {
    (void)c;
    static const char *const names[] = {"zero", "mean", "patch", "steer", "scale"};
    return PyUnicode_FromString(names[self->iv.kind]);
}
static PyObject *iv_get_head(mpy_iv *self, void *c) {
    (void)c;
    if (self->iv.head < 0) Py_RETURN_NONE;
    return PyLong_FromLong(self->iv.head);
}
static PyObject *iv_get_positions(mpy_iv *self, void *c) {
    (void)c;
    if (!self->iv.npos) Py_RETURN_NONE;
    PyObject *l = PyList_New(self->iv.npos);
    for (int i = 0; l && i < self->iv.npos; i++) PyList_SET_ITEM(l, i, PyLong_FromLong(self->iv.pos[i]));
    return l;
}
static PyObject *iv_get_scale(mpy_iv *self, void *c) {
    (void)c;
    return PyFloat_FromDouble(self->iv.scale);
}

static PyGetSetDef iv_getset[] = {
    {"kind", (getter)iv_get_kind, NULL, "'zero', 'mean', 'patch', 'steer' or 'scale'", NULL},
    {"head", (getter)iv_get_head, NULL, "the one head it touches (0-based), or None: all", NULL},
    {"positions", (getter)iv_get_positions, NULL, "the positions it touches (0-based), or None: all", NULL},
    {"scale", (getter)iv_get_scale, NULL, "steer's factor; scale's factor", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject mpy_iv_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mechprobe.Intervention",
    .tp_basicsize = sizeof(mpy_iv),
    .tp_dealloc = (destructor)iv_dealloc,
    .tp_repr = (reprfunc)iv_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An intervention run in C at hook points (mechprobe.ablate.zero/mean, patch, steer, scale); use it "
              "as the function of a fwd_hooks entry (name, intervention).",
    .tp_getset = iv_getset,
};

int mpy_is_intervention(PyObject *o) { return PyObject_TypeCheck(o, &mpy_iv_type); }

/* A new Intervention of `kind` with head= / positions= read (fn names the
 * function in errors). */
static mpy_iv *iv_new(mp_intervention_kind kind, PyObject *head, PyObject *positions, const char *fn) {
    if (PyType_Ready(&mpy_iv_type) < 0) return NULL;
    mpy_iv *self = (mpy_iv *)mpy_iv_type.tp_alloc(&mpy_iv_type, 0);
    if (!self) return NULL;
    memset(&self->iv, 0, sizeof self->iv);
    self->iv.kind = kind;
    self->iv.head = -1;
    self->iv.scale = 1.0f;
    if (head && head != Py_None) {
        long h = PyLong_AsLong(head);
        if ((h == -1 && PyErr_Occurred()) || h < 0 || h > INT_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: head must be a non-negative integer (0-based) or None", fn);
            goto fail;
        }
        self->iv.head = (int)h;
    }
    if (positions && positions != Py_None) {
        int pos[MP_INTERVENTION_MAX_POS], n = 0;
        if (PyLong_Check(positions)) {
            long p = PyLong_AsLong(positions);
            if ((p == -1 && PyErr_Occurred()) || p < -INT_MAX || p > INT_MAX) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "%s: positions must be integers (0-based; negative from the end)", fn);
                goto fail;
            }
            pos[n++] = (int)p;
        } else {
            PyObject *seq = PySequence_Fast(positions, "positions");
            if (!seq) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s: positions must be an integer or a list of integers", fn);
                goto fail;
            }
            Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
            if (k > MP_INTERVENTION_MAX_POS) {
                Py_DECREF(seq);
                PyErr_Format(PyExc_ValueError, "%s: positions has %zd entries (at most %d)", fn, k,
                             MP_INTERVENTION_MAX_POS);
                goto fail;
            }
            for (Py_ssize_t i = 0; i < k; i++) {
                PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
                long p = PyLong_Check(it) ? PyLong_AsLong(it) : LONG_MIN;
                if (p < -INT_MAX || p > INT_MAX) {
                    PyErr_Clear();
                    Py_DECREF(seq);
                    PyErr_Format(PyExc_ValueError, "%s: positions[%zd] must be an integer (0-based; negative from the "
                                 "end)", fn, i);
                    goto fail;
                }
                pos[n++] = (int)p;
            }
            Py_DECREF(seq);
        }
        if (mp_intervention_set_positions(&self->iv, pos, n)) {
            fail_in(MP_ERR_ARG, fn);
            goto fail;
        }
    }
    return self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* Points the intervention at a float32 copy (or the array itself) of obj. */
static int iv_set_data(mpy_iv *self, PyObject *obj, int min_nd, const char *fn, const char *what) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s: %s", fn, what);
    PyArrayObject *a = mpy_floats(obj, -1, buf);
    if (!a) return -1;
    if (PyArray_NDIM(a) < min_nd || PyArray_NDIM(a) > MP_INTERVENTION_MAX_DIM || PyArray_SIZE(a) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be a non-empty array of %d to %d dimensions (got %d)", fn, what,
                     min_nd, MP_INTERVENTION_MAX_DIM, PyArray_NDIM(a));
        Py_DECREF(a);
        return -1;
    }
    self->data = (PyObject *)a;
    self->iv.data = PyArray_DATA(a);
    self->iv.n_data = (size_t)PyArray_SIZE(a);
    self->iv.data_ndim = PyArray_NDIM(a);
    for (int i = 0; i < PyArray_NDIM(a); i++) self->iv.data_shape[i] = PyArray_DIM(a, i);
    return 0;
}

/* mechprobe.ablate.zero(head=None, positions=None) */
static PyObject *py_ablate_zero(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"head", "positions", NULL};
    PyObject *head = Py_None, *pos = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OO:ablate.zero", kwlist, &head, &pos)) return NULL;
    return (PyObject *)iv_new(MP_INTERVENTION_ZERO, head, pos, "ablate.zero");
}

/* mechprobe.ablate.mean(reference, head=None, positions=None): the hook's
 * activation captured on other inputs ([B, T, ...], or [B, H, T, S] for
 * patterns); its mean over batch and positions replaces the activation. */
static PyObject *py_ablate_mean(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"reference", "head", "positions", NULL};
    PyObject *ref, *head = Py_None, *pos = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OO:ablate.mean", kwlist, &ref, &head, &pos)) return NULL;
    mpy_iv *iv = iv_new(MP_INTERVENTION_MEAN, head, pos, "ablate.mean");
    if (iv && iv_set_data(iv, ref, 3, "ablate.mean", "reference (a captured activation [B, T, ...] or pattern "
                                                     "[B, H, T, S])")) Py_CLEAR(iv);
    return (PyObject *)iv;
}

/* mechprobe.patch(source, head=None, positions=None): values from a cached run */
static PyObject *py_patch(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"source", "head", "positions", NULL};
    PyObject *src, *head = Py_None, *pos = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OO:patch", kwlist, &src, &head, &pos)) return NULL;
    mpy_iv *iv = iv_new(MP_INTERVENTION_PATCH, head, pos, "patch");
    if (iv && iv_set_data(iv, src, 1, "patch", "source")) Py_CLEAR(iv);
    return (PyObject *)iv;
}

/* mechprobe.steer(vector, scale=1.0, head=None, positions=None): adds scale * vector */
static PyObject *py_steer(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"vector", "scale", "head", "positions", NULL};
    PyObject *vec, *head = Py_None, *pos = Py_None;
    double scale = 1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|d$OO:steer", kwlist, &vec, &scale, &head, &pos)) return NULL;
    mpy_iv *iv = iv_new(MP_INTERVENTION_STEER, head, pos, "steer");
    if (!iv) return NULL;
    iv->iv.scale = (float)scale;
    if (iv_set_data(iv, vec, 1, "steer", "vector")) Py_CLEAR(iv);
    return (PyObject *)iv;
}

/* mechprobe.scale(factor, head=None, positions=None): multiplies the activation */
static PyObject *py_scale(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"factor", "head", "positions", NULL};
    PyObject *head = Py_None, *pos = Py_None;
    double f;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "d|$OO:scale", kwlist, &f, &head, &pos)) return NULL;
    mpy_iv *iv = iv_new(MP_INTERVENTION_SCALE, head, pos, "scale");
    if (iv) iv->iv.scale = (float)f;
    return (PyObject *)iv;
}

int mpy_intervention_add(mp_hooks *hooks, const char *name, PyObject *obj, int n_pos, const char *what) {
    if (!mpy_is_intervention(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: an intervention (mechprobe.ablate.zero(), mechprobe.patch(...), ...) "
                                      "expected, got %s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    mpy_iv *iv = (mpy_iv *)obj;
    for (int k = 0; n_pos > 0 && k < iv->iv.npos; k++)
        if (iv->iv.pos[k] >= n_pos || iv->iv.pos[k] < -n_pos) {
            PyErr_Format(PyExc_ValueError, "%s: %s at position %d, but the input has T = %d positions (0..%d, "
                                           "or -%d..-1 from the end)", what, mp_intervention_name(iv->iv.kind),
                         iv->iv.pos[k], n_pos, n_pos - 1, n_pos);
            return -1;
        }
    mp_status st = mp_hooks_add(hooks, name, mp_intervention_apply, &iv->iv);
    if (st) {
        fail_in(st, what);
        return -1;
    }
    return 0;
}

/* Reads fwd_hooks = [(name, Intervention), ...] (None: none) into hooks; *keep
 * gets a new list holding the Interventions for the whole call. */
static int add_fwd_hooks(mp_hooks *hooks, PyObject *list, int n_pos, const char *fn, PyObject **keep) {
    *keep = PyList_New(0);
    if (!*keep) return -1;
    if (!list || list == Py_None) return 0;
    PyObject *seq = PySequence_Fast(list, "fwd_hooks");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: fwd_hooks must be a list of (hook name, intervention) pairs", fn);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        char what[96];
        snprintf(what, sizeof what, "%s: fwd_hooks[%zd]", fn, i);
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *pair = PySequence_Check(e) && !PyUnicode_Check(e) ? PySequence_Tuple(e) : NULL;
        if (!pair || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            Py_XDECREF(pair);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: expected a pair (hook name, intervention)", what);
            goto fail;
        }
        PyObject *fnobj = PyTuple_GET_ITEM(pair, 1);
        if (!mpy_is_intervention(fnobj) && PyCallable_Check(fnobj)) {
            Py_DECREF(pair);
            PyErr_Format(PyExc_TypeError, "%s: a Python function; %s runs the C interventions (mechprobe.ablate.zero(), "
                                          "mechprobe.patch(...), ...) without the GIL: use m.run_with_hooks for "
                                          "Python hook functions", what, fn);
            goto fail;
        }
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0));
        int r = name ? mpy_intervention_add(hooks, name, fnobj, n_pos, what) : -1;
        if (!r) r = PyList_Append(*keep, fnobj);
        Py_DECREF(pair);
        if (r) goto fail;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

static int logits_mode(const char *s, mp_logits_mode *mode, const char *fn) {
    if (!strcmp(s, "all")) *mode = MP_LOGITS_ALL;
    else if (!strcmp(s, "last")) *mode = MP_LOGITS_LAST;
    else if (!strcmp(s, "none")) *mode = MP_LOGITS_NONE;
    else {
        PyErr_Format(PyExc_ValueError, "%s: logits: \"all\", \"last\" or \"none\" expected, got \"%s\"", fn, s);
        return -1;
    }
    return 0;
}

/* m.run_with_interventions(tokens, fwd_hooks=[(name, intervention), ...],
 * logits="all", attention_mask=None) -> logits (as m:forward(tokens,
 * {fwd_hooks=...}) in Lua); the GIL is released while it runs. */
static PyObject *model_run_with_interventions(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "run_with_interventions";
    static char *kwlist[] = {"tokens", "fwd_hooks", "logits", "attention_mask", NULL};
    PyObject *tokobj, *hl = Py_None, *maskobj = Py_None, *keep = NULL, *out = NULL;
    const char *lm = "all";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OsO:run_with_interventions", kwlist, &tokobj, &hl, &lm, &maskobj))
        return NULL;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) return NULL;
    mp_forward_params fp = mp_forward_params_default();
    if (logits_mode(lm, &fp.logits, fn)) return NULL;
    PyArrayObject *tok = mpy_tokens(self, tokobj, "run_with_interventions: tokens"), *mask = NULL;
    if (!tok) return NULL;
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    mp_hooks *hooks = mp_hooks_new_model(m); /* with the attached SAEs (sae_splice.h) */
    if (!hooks) {
        PyErr_NoMemory();
        goto done;
    }
    if (maskobj != Py_None) {
        if (!(mask = int_array(maskobj, "run_with_interventions: attention_mask", 0, 2))) goto done;
        if (PyArray_DIM(mask, 0) != B || PyArray_DIM(mask, 1) != T) {
            PyErr_Format(PyExc_ValueError, "%s: attention_mask must have the tokens' shape [%d, %d]", fn, B, T);
            goto done;
        }
        fp.attn_mask = PyArray_DATA(mask);
    }
    if (add_fwd_hooks(hooks, hl, T, fn, &keep)) goto done;
    fp.hooks = mp_hooks_count(hooks) ? hooks : NULL;
    if (fp.logits != MP_LOGITS_NONE) {
        npy_intp dims[3] = {B, fp.logits == MP_LOGITS_ALL ? T : m->cfg.vocab, m->cfg.vocab};
        if (!(out = PyArray_SimpleNew(fp.logits == MP_LOGITS_ALL ? 3 : 2, dims, NPY_FLOAT32))) goto done;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_forward(m, PyArray_DATA(tok), B, T, &fp, out ? PyArray_DATA((PyArrayObject *)out) : NULL);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st) {
        Py_CLEAR(out);
        fail_in(st, fn);
        goto done;
    }
    if (!out) {
        out = Py_None;
        Py_INCREF(out);
    }
done:
    if (PyErr_Occurred()) Py_CLEAR(out);
    mp_hooks_free(hooks);
    Py_XDECREF(keep);
    Py_DECREF(tok);
    Py_XDECREF(mask);
    return out;
}

/* ---- the training state beside each model ---- */

typedef struct {
    mp_adamw opt;      /* n == 0 and !has_opt: none yet */
    int has_opt;
    int training;      /* a train / train_step runs without the GIL (in another thread): reads are refused */
    mp_train_ws ws;
    mp_train_log log;
} train_state;

#define STATE_CAPSULE "mechprobe._train_state"

static PyObject *states; /* {id(model): (weakref with callback, capsule)} */

static void state_free(PyObject *cap) {
    train_state *s = PyCapsule_GetPointer(cap, STATE_CAPSULE);
    if (!s) return;
    mp_adamw_free(&s->opt);
    mp_train_ws_free(&s->ws);
    mp_train_log_free(&s->log);
    free(s);
}

/* The weakref callback: self is the key. */
static PyObject *state_gone(PyObject *key, PyObject *wr) {
    (void)wr;
    if (states && PyDict_DelItem(states, key)) PyErr_Clear();
    Py_RETURN_NONE;
}
static PyMethodDef state_gone_def = {"_train_state_gone", state_gone, METH_O, NULL};

/* The model's training state (created when `create`), or NULL (with an
 * exception when it could not be made). */
static train_state *get_state(mpy_model *self, int create) {
    if (!states && !(states = PyDict_New())) return NULL;
    PyObject *key = PyLong_FromVoidPtr(self);
    if (!key) return NULL;
    PyObject *v = PyDict_GetItemWithError(states, key);
    if (v) {
        Py_DECREF(key);
        return PyCapsule_GetPointer(PyTuple_GET_ITEM(v, 1), STATE_CAPSULE);
    }
    if (PyErr_Occurred() || !create) {
        Py_DECREF(key);
        return NULL;
    }
    train_state *s = calloc(1, sizeof *s);
    PyObject *cap = s ? PyCapsule_New(s, STATE_CAPSULE, state_free) : NULL, *cb = NULL, *wr = NULL, *tup = NULL;
    if (!cap) {
        free(s);
        s = NULL;
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    if (!(cb = PyCFunction_New(&state_gone_def, key)) || !(wr = PyWeakref_NewRef((PyObject *)self, cb)) ||
        !(tup = PyTuple_Pack(2, wr, cap)) || PyDict_SetItem(states, key, tup))
        s = NULL;
done:
    Py_XDECREF(tup);
    Py_XDECREF(wr);
    Py_XDECREF(cb);
    Py_XDECREF(cap);
    Py_DECREF(key);
    return s;
}

/* Drops the optimizer (its moments no longer match the parameters). */
static void drop_optimizer(mpy_model *self) {
    train_state *s = get_state(self, 0);
    PyErr_Clear();
    if (!s) return;
    mp_adamw_free(&s->opt);
    memset(&s->opt, 0, sizeof s->opt);
    s->has_opt = 0;
}

/* The model for a call that reads its weights while it may be busy (from a
 * hook of its own forward, which is paused meanwhile), or NULL with an
 * exception: refused while another thread trains it (training may replace the
 * parameter memory under the read). */
static mp_model *model_for_read(mpy_model *self, const char *fn) {
    mp_model *m = mpy_model_get(self, fn, 1);
    if (!m) return NULL;
    train_state *s = get_state(self, 0);
    if (PyErr_Occurred()) return NULL;
    if (s && s->training) {
        PyErr_Format(PyExc_RuntimeError, "%s: the model is being trained (m.train / m.train_step in another thread)",
                     fn);
        return NULL;
    }
    return m;
}

/* ---- weights (runtime/weights_tl.h; the Lua side is lua/lweights.c) ---- */

/* Raises exc with "fn: " before mp_last_error() unless it starts with it. */
static PyObject *raise_in(PyObject *exc, const char *fn) {
    const char *msg = mp_last_error();
    size_t n = strlen(fn);
    if (strncmp(msg, fn, n) == 0 && msg[n] == ':') return PyErr_Format(exc, "%s", msg);
    return PyErr_Format(exc, "%s: %s", fn, msg);
}

static PyObject *tl_copy(mp_model *m, const char *name, int layer, PyObject *exc, const char *fn) {
    mp_tl_weight w;
    if (mp_tl_weight_info(m, name, &w)) return raise_in(exc, fn);
    int64_t shape[4];
    int nd = mp_tl_weight_shape(m, &w, layer, shape);
    npy_intp dims[4];
    for (int i = 0; i < nd; i++) dims[i] = (npy_intp)shape[i];
    PyObject *a = PyArray_SimpleNew(nd, dims, NPY_FLOAT32);
    if (!a) return NULL;
    if (mp_tl_weight_get(m, &w, layer, PyArray_DATA((PyArrayObject *)a))) {
        Py_DECREF(a);
        return raise_in(exc, fn);
    }
    return a;
}

/* m.W_Q etc.: a copy of every layer stacked [n_layer, ...] in TL's shape (as
 * TransformerLens's model.W_Q); m.W_E, m.W_pos, m.W_U: the one tensor. A
 * weight this model lacks raises AttributeError saying why. */
static PyObject *get_tl(mpy_model *self, void *closure) {
    const char *name = closure;
    mp_model *m = model_for_read(self, name);
    if (!m) return NULL;
    return tl_copy(m, name, -1, PyExc_AttributeError, name);
}

static int layer_of(PyObject *o, const mp_model *m, const char *fn) {
    if (!o || o == Py_None) return -1;
    long l = PyLong_Check(o) ? PyLong_AsLong(o) : -2;
    if (l < 0 || l >= m->cfg.n_layer) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: layer must be an integer in 0..%d (0-based) or None (all layers)", fn,
                     m->cfg.n_layer - 1);
        return -2;
    }
    return (int)l;
}

/* m.weight(name, layer=None) -> TL-shaped copy of one layer (None: all, stacked) */
static PyObject *model_weight(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"name", "layer", NULL};
    const char *name;
    PyObject *lo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O:weight", kwlist, &name, &lo)) return NULL;
    mp_model *m = model_for_read(self, "weight");
    if (!m) return NULL;
    int l = layer_of(lo, m, "weight");
    if (l == -2) return NULL;
    mp_tl_weight w;
    if (mp_tl_weight_info(m, name, &w)) return fail_in(MP_ERR_ARG, "weight");
    if (l >= 0 && !w.per_layer) return PyErr_Format(PyExc_ValueError, "weight: %s has no layers", name);
    return tl_copy(m, name, l, PyExc_ValueError, "weight");
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *s) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && at < n; i++) at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)s[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* m.set_weight(name, array, layer=None): writes a TL-shaped array into the
 * model (layer None on a per-layer weight: all layers stacked), as
 * m:set_weight in Lua. */
static PyObject *model_set_weight(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"name", "value", "layer", NULL};
    const char *name;
    PyObject *val, *lo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|O:set_weight", kwlist, &name, &val, &lo)) return NULL;
    mp_model *m = mpy_model_get(self, "set_weight", 0);
    if (!m) return NULL;
    int l = layer_of(lo, m, "set_weight");
    if (l == -2) return NULL;
    mp_tl_weight w;
    if (mp_tl_weight_info(m, name, &w)) return fail_in(MP_ERR_ARG, "set_weight");
    if (l >= 0 && !w.per_layer) return PyErr_Format(PyExc_ValueError, "set_weight: %s has no layers", name);
    if (mp_tl_weight_settable(m, &w)) return fail_in(MP_ERR_ARG, "set_weight");
    int64_t want[4];
    int nd = mp_tl_weight_shape(m, &w, l, want);
    PyArrayObject *a = mpy_floats(val, -1, "set_weight: value");
    if (!a) return NULL;
    int same = PyArray_NDIM(a) == nd;
    for (int i = 0; same && i < nd; i++) same = PyArray_DIM(a, i) == want[i];
    if (!same) {
        char x[96], y[96];
        int64_t got[NPY_MAXDIMS];
        for (int i = 0; i < PyArray_NDIM(a); i++) got[i] = PyArray_DIM(a, i);
        shape_str(x, sizeof x, nd, want);
        shape_str(y, sizeof y, PyArray_NDIM(a), got);
        Py_DECREF(a);
        return PyErr_Format(PyExc_ValueError, "set_weight: %s%s must be %s (TransformerLens's shape), got %s", name,
                            w.per_layer && l < 0 ? " (all layers)" : "", x, y);
    }
    mp_status st = mp_tl_weight_set(m, &w, l, PyArray_DATA(a));
    Py_DECREF(a);
    if (st) return fail_in(st, "set_weight");
    Py_RETURN_NONE;
}

/* Finds parameter `name` ("embed", "blocks.3.attn.wq", ...); 0 when absent. */
/* The parameter names in checkpoint order (as m:params()). */
static PyObject *param_names(const mp_model *m) {
    mp_param_desc d[MP_PARAM_MAX];
    int n = mp_params_describe(&m->cfg, &m->p, d);
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < n; i++) {
        int layers = d[i].per_layer ? m->cfg.n_layer : 1;
        for (int k = 0; k < layers; k++) {
            char buf[96];
            if (d[i].per_layer) snprintf(buf, sizeof buf, d[i].name, k);
            else snprintf(buf, sizeof buf, "%s", d[i].name);
            PyObject *s = PyUnicode_FromString(buf);
            if (!s || PyList_Append(l, s)) Py_CLEAR(l);
            Py_XDECREF(s);
            if (!l) break;
        }
    }
    return l;
}

static PyObject *model_params(mpy_model *self, PyObject *unused) {
    (void)unused;
    mp_model *m = model_for_read(self, "params");
    return m ? param_names(m) : NULL;
}

/* Where parameter `name` is: its floats and shape; -1 with an exception. */
static int param_at(mp_model *m, const char *name, const char *fn, float **p, int *nd, npy_intp dims[2]) {
    mp_param_desc d;
    int layer;
    const int found = mp_param_find(m, name, &d, &layer); /* or TL's name of a norm weight ("blocks.0.ln1.w") */
    if (found <= 0) {
        if (found < 0) PyErr_Format(PyExc_KeyError, "%s: %s", fn, mp_last_error());
        else PyErr_Format(PyExc_KeyError, "%s: no parameter \"%s\" in this model (m.params() lists them)", fn, name);
        return -1;
    }
    if (mp_model_is_quantized(m) || !d.p) {
        PyErr_Format(PyExc_ValueError, "%s: \"%s\": the model has quantized weights; call m.dequantize() first", fn,
                     name);
        return -1;
    }
    size_t per = d.per_layer ? d.n / (size_t)m->cfg.n_layer : d.n;
    *p = d.p + (layer > 0 ? (size_t)layer * per : 0);
    *nd = d.ndim;
    dims[0] = (npy_intp)d.shape[0];
    dims[1] = (npy_intp)d.shape[1];
    return 0;
}

/* m.param(name) -> a copy of the parameter (nn.Linear layout [out, in]) */
static PyObject *model_param(mpy_model *self, PyObject *arg) {
    mp_model *m = model_for_read(self, "param");
    if (!m) return NULL;
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!name) return PyErr_Format(PyExc_TypeError, "param: the parameter's name (a str) expected");
    float *p;
    int nd;
    npy_intp dims[2];
    if (param_at(m, name, "param", &p, &nd, dims)) return NULL;
    return floats_array(nd, dims, p);
}

/* m.state_dict() -> {name: copy} in checkpoint order */
static PyObject *model_state_dict(mpy_model *self, PyObject *unused) {
    (void)unused;
    mp_model *m = model_for_read(self, "state_dict");
    if (!m) return NULL;
    PyObject *names = param_names(m), *d = names ? PyDict_New() : NULL;
    for (Py_ssize_t i = 0; d && i < PyList_GET_SIZE(names); i++) {
        float *p;
        int nd;
        npy_intp dims[2];
        PyObject *key = PyList_GET_ITEM(names, i), *v;
        if (param_at(m, PyUnicode_AsUTF8(key), "state_dict", &p, &nd, dims) || !(v = floats_array(nd, dims, p))) {
            Py_CLEAR(d);
            break;
        }
        int rc = PyDict_SetItem(d, key, v);
        Py_DECREF(v);
        if (rc) Py_CLEAR(d);
    }
    Py_XDECREF(names);
    return d;
}

/* m.set_param(name, array): writes the parameter (its shape exactly).
 * Refused, as m:param's views in Lua, for quantized weights and for
 * parameters memory-mapped read-only from a llama2.c file. */
static PyObject *model_set_param(mpy_model *self, PyObject *args) {
    const char *name;
    PyObject *val;
    if (!PyArg_ParseTuple(args, "sO:set_param", &name, &val)) return NULL;
    mp_model *m = mpy_model_get(self, "set_param", 0);
    if (!m) return NULL;
    float *p;
    int nd;
    npy_intp dims[2];
    if (param_at(m, name, "set_param", &p, &nd, dims)) return NULL;
    size_t per = (size_t)dims[0] * (nd == 2 ? (size_t)dims[1] : 1), total = mp_config_n_params(&m->cfg);
    if (!m->owned || p < m->owned || p + per > m->owned + total)
        return PyErr_Format(PyExc_ValueError, "set_param: \"%s\" is read-only: the weights are the read-only "
                                              "memory map of %s; " MP_TL_COPY_HINT, name,
                            m->source[0] ? m->source : "its file");
    PyArrayObject *a = mpy_floats(val, -1, "set_param: value");
    if (!a) return NULL;
    int same = PyArray_NDIM(a) == nd && PyArray_DIM(a, 0) == dims[0] && (nd == 1 || PyArray_DIM(a, 1) == dims[1]);
    if (!same) {
        Py_DECREF(a);
        if (nd == 1) return PyErr_Format(PyExc_ValueError, "set_param: \"%s\" has shape [%zd]", name, (Py_ssize_t)dims[0]);
        return PyErr_Format(PyExc_ValueError, "set_param: \"%s\" has shape [%zd, %zd]", name, (Py_ssize_t)dims[0],
                            (Py_ssize_t)dims[1]);
    }
    memcpy(p, PyArray_DATA(a), per * sizeof(float));
    Py_DECREF(a);
    Py_RETURN_NONE;
}

/* m.process_weights(fold_ln=None, center_writing_weights=None,
 * center_unembed=None, fold_value_biases=None) -> {"applied": [...],
 * "skipped": {name: why}}, as m:process_weights in Lua: an option not given
 * defaults to TransformerLens's True and is skipped (with the reason) where
 * it does not apply; an explicit True that does not apply is an error. */
static PyObject *model_process_weights(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"fold_ln", "center_writing_weights", "center_unembed", "fold_value_biases", NULL};
    PyObject *o[4] = {Py_None, Py_None, Py_None, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:process_weights", kwlist, &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    mp_model *m = mpy_model_get(self, "process_weights", 0);
    if (!m) return NULL;
    if (mp_model_is_quantized(m)) {
        char why[512];
        mp_weights_step_applies(m, MP_WP_FOLD_LN, why, sizeof why);
        return PyErr_Format(PyExc_ValueError, "process_weights: %s", why);
    }
    PyObject *applied = PyList_New(0), *skipped = PyDict_New(), *r = NULL;
    int opt[MP_WP_N_STEPS];
    for (int i = 0; i < MP_WP_N_STEPS; i++) {
        opt[i] = -1;
        if (o[i] != Py_None && (opt[i] = PyObject_IsTrue(o[i])) < 0) goto done;
    }
    char why[MP_WP_N_STEPS][512];
    unsigned mask = mp_weights_process_plan(m, opt, why); /* the defaults, shared with the Lua binding */
    if (!applied || !skipped) goto done;
    for (int i = 0; i < MP_WP_N_STEPS; i++) {
        if (why[i][0]) {
            if (dset(skipped, kwlist[i], PyUnicode_FromString(why[i]))) goto done;
        } else if (mask & mp_wp_order[i]) {
            PyObject *s = PyUnicode_FromString(kwlist[i]);
            if (!s || PyList_Append(applied, s)) {
                Py_XDECREF(s);
                goto done;
            }
            Py_DECREF(s);
        }
    }
    size_t n_before = mp_config_n_params(&m->cfg);
    mp_status st = mp_weights_process(m, mask);
    if (mp_config_n_params(&m->cfg) != n_before) drop_optimizer(self); /* sized for the tied layout */
    if (st) {
        fail_in(st, "process_weights");
        goto done;
    }
    r = Py_BuildValue("{sOsO}", "applied", applied, "skipped", skipped);
done:
    Py_XDECREF(applied);
    Py_XDECREF(skipped);
    return r;
}

/* m.dequantize(): float32 weights (as m:dequantize() in Lua) */
static PyObject *model_dequantize(mpy_model *self, PyObject *unused) {
    (void)unused;
    mp_model *m = mpy_model_get(self, "dequantize", 0);
    if (!m) return NULL;
    mp_status st = mp_model_dequantize(m);
    if (st) return fail_in(st, "dequantize");
    Py_RETURN_NONE;
}

/* ---- saving (io/model_io.h; the Lua side is lmodel.c's model_save) ---- */

/* m.save(path, format=None, type=None, version=0): an HDF5 checkpoint for a
 * path ending in ".h5" (parameters, the optimizer state and loss curve of
 * m.train / m.train_step), GGUF for ".gguf" (type "f32", "f16" or "q8_0"), a
 * Hugging Face folder with format="hf", else llama2.c (version 0 or 1). An
 * explicit format ("hf", "gguf", "h5", "llama2c") wins over the path. */
static PyObject *model_save(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "format", "type", "version", NULL};
    PyObject *pathobj;
    const char *format = NULL, *type = NULL;
    int version = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|zzi:save", kwlist, PyUnicode_FSConverter, &pathobj, &format, &type,
                                     &version))
        return NULL;
    const char *path = PyBytes_AS_STRING(pathobj);
    PyObject *r = NULL;
    mp_model *m = mpy_model_get(self, "save", 0);
    if (!m) goto done;
    mp_model_save_params sp = mp_model_save_params_default();
    if (format) {
        sp.format = mp_model_format_named(format); /* the names m:save takes in Lua */
        if (sp.format == MP_FORMAT_UNKNOWN) {
            PyErr_Format(PyExc_ValueError, "save: format must be \"hf\", \"gguf\", \"h5\" or \"llama2c\" (got \"%s\")",
                         format);
            goto done;
        }
    }
    sp.format = mp_model_save_format(path, sp.format);
    if (type && sp.format != MP_FORMAT_GGUF) {
        PyErr_Format(PyExc_ValueError, "save: type= applies to GGUF files only (%s is not saved as GGUF)", path);
        goto done;
    }
    if (version && sp.format != MP_FORMAT_LLAMA2C) {
        PyErr_Format(PyExc_ValueError, "save: version= applies to llama2.c files only (%s is not saved as one)", path);
        goto done;
    }
    int bytes = self->tok && mp_tok_get_kind(self->tok) == MP_TOK_KIND_BYTES;
    if (sp.format == MP_FORMAT_GGUF) {
        const char *t = type ? type : "f32";
        long g = mp_gguf_type_named(t);
        if (g < 0) {
            PyErr_Format(PyExc_ValueError, "save: type must be \"f32\", \"f16\" or \"q8_0\" (got \"%s\")", t);
            goto done;
        }
        sp.gguf_type = (uint32_t)g;
        sp.tok_source = self->tok && !bytes && self->tok_path[0] ? self->tok_path : NULL;
    } else if (sp.format == MP_FORMAT_HF) {
        sp.tok_source = self->tok && !bytes && self->tok_path[0] ? self->tok_path : NULL;
    } else if (sp.format == MP_FORMAT_CHECKPOINT) {
        train_state *s = get_state(self, 0);
        if (PyErr_Occurred()) goto done;
        if (s) {
            sp.opt = s->has_opt && s->opt.n ? &s->opt : NULL;
            sp.log = s->log.n ? &s->log : NULL;
        }
    } else if (sp.format == MP_FORMAT_LLAMA2C) {
        if (version < 0 || version > 1) {
            PyErr_Format(PyExc_ValueError, "save: version must be 0 or 1 (got %d)", version);
            goto done;
        }
        sp.llama2c_version = version;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_save_with(m, path, &sp);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st) {
        fail_in(st, "save");
        goto done;
    }
    r = Py_None;
    Py_INCREF(r);
done:
    Py_DECREF(pathobj);
    return r;
}

/* mechprobe._core._restore_train_state(m, path): a checkpoint's optimizer
 * state and loss curve onto m (what mp.load keeps on the model); other
 * formats: nothing. The package's mechprobe.load calls it. */
static PyObject *py_restore_train_state(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *pathobj;
    mpy_model *self;
    if (!PyArg_ParseTuple(args, "O!O&:_restore_train_state", &mpy_model_type, &self, PyUnicode_FSConverter, &pathobj))
        return NULL;
    const char *path = PyBytes_AS_STRING(pathobj);
    PyObject *r = NULL;
    if (!mpy_model_get(self, "load", 0)) goto done;
    if (mp_model_detect(path) != MP_FORMAT_CHECKPOINT) {
        r = Py_None;
        Py_INCREF(r);
        goto done;
    }
    mp_adamw o;
    mp_train_log log;
    memset(&o, 0, sizeof o);
    memset(&log, 0, sizeof log);
    mp_model *tmp = NULL;
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_checkpoint_load(path, &tmp, &o, &log);
    Py_END_ALLOW_THREADS
    mp_model_free(tmp);
    if (st) {
        mp_adamw_free(&o);
        mp_train_log_free(&log);
        fail_in(st, "load");
        goto done;
    }
    train_state *s = get_state(self, 1);
    if (!s) {
        mp_adamw_free(&o);
        mp_train_log_free(&log);
        goto done;
    }
    mp_adamw_free(&s->opt);
    mp_train_log_free(&s->log);
    s->opt = o;
    s->has_opt = o.n > 0;
    s->log = log;
    r = Py_None;
    Py_INCREF(r);
done:
    Py_DECREF(pathobj);
    return r;
}

/* ---- training (runtime/train.h, mpi/trainloop.h; the Lua side is lua/ltrain.c) ---- */

static const char *const adamw_keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay", "min_lr", "grad_clip",
                                         "warmup", "total_steps", NULL};

/* Reads the AdamW keywords present in kw over hp; *given counts them. */
static int adamw_from_kw(PyObject *kw, mp_adamw_params *hp, const char *fn, int *given) {
    *given = 0;
    if (!kw) return 0;
    for (int i = 0; adamw_keys[i]; i++) {
        PyObject *v = PyDict_GetItemString(kw, adamw_keys[i]);
        if (!v || v == Py_None) continue;
        (*given)++;
        if (i >= 7) {
            long x = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
            if (x < 0 || x > INT_MAX) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "%s: %s must be a non-negative integer", fn, adamw_keys[i]);
                return -1;
            }
            if (i == 7) hp->warmup = (int)x;
            else hp->total_steps = (int)x;
            continue;
        }
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: %s must be a number", fn, adamw_keys[i]);
            return -1;
        }
        float *f[] = {&hp->lr, &hp->beta1, &hp->beta2, &hp->eps, &hp->weight_decay, &hp->min_lr, &hp->grad_clip};
        *f[i] = (float)x;
    }
    return 0;
}

/* Takes the keywords in `keys` out of kw into a new dict (the rest stays). */
static PyObject *split_kw(PyObject *kw, const char *const *keys) {
    PyObject *d = PyDict_New();
    if (!d || !kw) return d;
    for (int i = 0; keys[i]; i++) {
        PyObject *v = PyDict_GetItemString(kw, keys[i]);
        if (!v) continue;
        if (PyDict_SetItemString(d, keys[i], v) || PyDict_DelItemString(kw, keys[i])) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* m.train_step(tokens, targets, accum=1, data_parallel=True, fwd_hooks=None,
 * lr=, beta1=, beta2=, eps=, weight_decay=, min_lr=, grad_clip=, warmup=,
 * total_steps=) -> (loss, grad_norm): one AdamW step (m:train_step in Lua).
 * The optimizer lives on the model: the first step makes it (the AdamW
 * keywords over mp.optim.adamw's defaults), later steps continue it (AdamW
 * keywords given then change its hyper-parameters, the moments stay).
 * Targets of -1 are not counted. */
static PyObject *model_train_step(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "train_step";
    PyObject *kwc = kw ? PyDict_Copy(kw) : PyDict_New();
    if (!kwc) return NULL;
    PyObject *hpkw = split_kw(kwc, adamw_keys), *r = NULL, *keep = NULL;
    PyArrayObject *tok = NULL, *tgt = NULL;
    mp_hooks *hooks = NULL;
    static char *kwlist[] = {"tokens", "targets", "accum", "data_parallel", "fwd_hooks", NULL};
    PyObject *tokobj, *tgtobj, *hl = Py_None;
    int accum = 1, dp = 1;
    if (!hpkw || !PyArg_ParseTupleAndKeywords(args, kwc, "OO|ipO:train_step", kwlist, &tokobj, &tgtobj, &accum, &dp, &hl))
        goto done;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) goto done;
    if (accum < 1) {
        PyErr_Format(PyExc_ValueError, "train_step: accum must be >= 1 (got %d)", accum);
        goto done;
    }
    train_state *s = get_state(self, 1);
    if (!s) goto done;
    mp_adamw_params hp = s->has_opt ? s->opt.hp : mp_adamw_params_default();
    int given;
    if (adamw_from_kw(hpkw, &hp, fn, &given)) goto done;
    if (mp_adamw_params_check(&hp)) {
        fail_in(MP_ERR_ARG, fn);
        goto done;
    }
    if (!(tok = mpy_tokens(self, tokobj, "train_step: tokens"))) goto done;
    if (!(tgt = int_array(tgtobj, "train_step: targets", -1, m->cfg.vocab))) goto done;
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    if (PyArray_DIM(tgt, 0) != B || PyArray_DIM(tgt, 1) != T) {
        PyErr_Format(PyExc_ValueError, "train_step: targets: shape [%zd, %zd] differs from the tokens' [%d, %d]",
                     (Py_ssize_t)PyArray_DIM(tgt, 0), (Py_ssize_t)PyArray_DIM(tgt, 1), B, T);
        goto done;
    }
    if (!(hooks = mp_hooks_new(&m->cfg))) {
        PyErr_NoMemory();
        goto done;
    }
    if (add_fwd_hooks(hooks, hl, T, fn, &keep)) goto done;
    if (!s->has_opt) {
        memset(&s->opt, 0, sizeof s->opt);
        s->has_opt = 1;
    }
    s->opt.hp = hp;
    float loss;
    mp_status st;
    self->busy++;
    s->training++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_train_step_logged(m, &s->opt, &s->ws, &s->log, PyArray_DATA(tok), PyArray_DATA(tgt), B, T, accum,
                              mp_hooks_count(hooks) ? hooks : NULL, dp, "train_step", &loss);
    if (!st) st = mp_model_sync(m);
    Py_END_ALLOW_THREADS
    s->training--;
    self->busy--;
    if (st) {
        fail_in(st, fn);
        goto done;
    }
    r = Py_BuildValue("(dd)", (double)loss, s->ws.grad_norm);
done:
    mp_hooks_free(hooks);
    Py_XDECREF(keep);
    Py_XDECREF(tok);
    Py_XDECREF(tgt);
    Py_XDECREF(hpkw);
    Py_DECREF(kwc);
    return r;
}

/* m.train's callbacks into Python: the loop runs without the GIL; each
 * callback takes it. A Python exception ends the run and is raised as it was. */
typedef struct {
    mpy_model *self;
    train_state *state; /* its `training` mark is lifted while a callback runs: the loop is paused, the
                         * weights are readable (as in Lua's on_step) */
    PyObject *task, *on_step;
    PyArrayObject *tok, *tgt; /* the last batch (the loop reads it until the next sample) */
    PyObject *exc_type, *exc_val, *exc_tb;
} train_cb;

static mp_status train_sample(void *user, int eval, int B, int T, const int **tokens, const int **targets, int *b,
                              int *t) {
    train_cb *c = user;
    PyGILState_STATE g = PyGILState_Ensure();
    c->state->training--;
    mp_status st = MP_ERR_HOOK;
    PyObject *res = NULL;
    const char *meth = eval && PyObject_HasAttrString(c->task, "eval_sample") ? "eval_sample" : "sample";
    if (PyCallable_Check(c->task) && !PyObject_HasAttrString(c->task, "sample"))
        res = PyObject_CallFunction(c->task, "ii", B, T);
    else
        res = PyObject_CallMethod(c->task, meth, "ii", B, T);
    if (!res) goto done;
    PyObject *a, *bb;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
        PyErr_SetString(PyExc_TypeError, "train: task.sample(B, T) must return (tokens, targets)");
        goto done;
    }
    a = PyTuple_GET_ITEM(res, 0);
    bb = PyTuple_GET_ITEM(res, 1);
    Py_CLEAR(c->tok);
    Py_CLEAR(c->tgt);
    if (!(c->tok = mpy_tokens(c->self, a, "train: task.sample: tokens"))) goto done;
    if (!(c->tgt = int_array(bb, "train: task.sample: targets", -1, c->self->m->cfg.vocab))) goto done;
    if (PyArray_DIM(c->tgt, 0) != PyArray_DIM(c->tok, 0) || PyArray_DIM(c->tgt, 1) != PyArray_DIM(c->tok, 1)) {
        PyErr_SetString(PyExc_ValueError, "train: task.sample: targets differ in shape from the tokens");
        goto done;
    }
    *tokens = PyArray_DATA(c->tok);
    *targets = PyArray_DATA(c->tgt);
    *b = (int)PyArray_DIM(c->tok, 0);
    *t = (int)PyArray_DIM(c->tok, 1);
    st = MP_OK;
done:
    Py_XDECREF(res);
    if (st) {
        if (!c->exc_type) PyErr_Fetch(&c->exc_type, &c->exc_val, &c->exc_tb);
        else PyErr_Clear();
        mp_error(MP_ERR_HOOK, "train: task.sample failed");
    }
    c->state->training++;
    PyGILState_Release(g);
    return st;
}

static mp_status train_on_step(void *user, int step, float loss, int *stop) {
    train_cb *c = user;
    PyGILState_STATE g = PyGILState_Ensure();
    c->state->training--;
    mp_status st = MP_OK;
    PyObject *res = PyObject_CallFunction(c->on_step, "id", step, (double)loss);
    int yes = res ? PyObject_IsTrue(res) : -1;
    Py_XDECREF(res);
    if (yes < 0) {
        if (!c->exc_type) PyErr_Fetch(&c->exc_type, &c->exc_val, &c->exc_tb);
        else PyErr_Clear();
        st = mp_error(MP_ERR_HOOK, "train: on_step failed");
    } else {
        *stop = yes;
    }
    c->state->training++;
    PyGILState_Release(g);
    return st;
}

static PyObject *list_of(size_t n, int kind, const mp_train_log *log, size_t first) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t j = 0; l && j < n; j++) {
        size_t at = first + j;
        PyObject *v = kind == 0 ? PyLong_FromLong(log->step[at]) : kind == 1 ? PyFloat_FromDouble(log->loss[at])
                    : kind == 2 ? PyFloat_FromDouble(log->lr[at]) : kind == 3 ? PyFloat_FromDouble(log->tokens[at])
                    : kind == 4 ? PyFloat_FromDouble(log->wall[at]) : kind == 5 ? PyLong_FromLong(log->eval_step[at])
                    : PyFloat_FromDouble(log->eval_loss[at]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)j, v);
    }
    return l;
}

/* m.train(task, steps, batch=8, seq_len=None (ctx), accum=1, eval_every=0,
 * eval_batches=4, checkpoint=None, checkpoint_every=0, progress=True,
 * log_every=None, resume=True, on_step=None, fwd_hooks=None,
 * data_parallel=True, lr=1e-3, warmup=0, min_lr=0.1 lr, weight_decay=0.1,
 * beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0, total_steps=steps)
 * -> {step, loss, lr, tokens, time, eval_step, eval_loss, final_loss,
 * tokens_per_s}: m:train in Lua. `task` has sample(B, T) -> (tokens,
 * targets) (and optionally eval_sample), or is such a function. The run
 * continues the model's optimizer unless resume=False (then a fresh one from
 * the AdamW keywords, cosine decay over the run). The progress line goes to
 * stderr as in Lua. */
static PyObject *model_train(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "train";
    PyObject *kwc = kw ? PyDict_Copy(kw) : PyDict_New();
    if (!kwc) return NULL;
    PyObject *hpkw = split_kw(kwc, adamw_keys), *r = NULL, *keep = NULL;
    mp_hooks *hooks = NULL;
    static char *kwlist[] = {"task", "steps", "batch", "seq_len", "accum", "eval_every", "eval_batches", "checkpoint",
                             "checkpoint_every", "progress", "log_every", "resume", "on_step", "fwd_hooks",
                             "data_parallel", NULL};
    PyObject *task, *seqobj = Py_None, *logobj = Py_None, *on_step = Py_None, *hl = Py_None, *ckobj = NULL;
    int steps, progress = 1, resume = 1, dp = 1;
    mp_train_params tp = mp_train_params_default(1);
    int batch = tp.batch, accum = tp.accum, eval_every = tp.eval_every, eval_batches = tp.eval_batches,
        ck_every = tp.checkpoint_every;
    train_cb cb = {self, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (!hpkw || !PyArg_ParseTupleAndKeywords(args, kwc, "Oi|iOiiiO&ipOpOOp:train", kwlist, &task, &steps, &batch,
                                              &seqobj, &accum, &eval_every, &eval_batches, fs_opt,
                                              &ckobj, &ck_every, &progress, &logobj, &resume, &on_step, &hl, &dp))
        goto done;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) goto done;
    if (steps < 1) {
        PyErr_Format(PyExc_ValueError, "train: steps must be a positive integer (got %d)", steps);
        goto done;
    }
    if (on_step != Py_None && !PyCallable_Check(on_step)) {
        PyErr_SetString(PyExc_TypeError, "train: on_step must be a function (step, loss) -> stop or None");
        goto done;
    }
    if (!PyCallable_Check(task) && !PyObject_HasAttrString(task, "sample")) {
        PyErr_SetString(PyExc_TypeError, "train: task must have a sample(B, T) method (or be such a function) "
                                         "returning (tokens, targets)");
        goto done;
    }
    tp = mp_train_params_default(steps);
    tp.batch = batch;
    tp.seq_len = m->cfg.ctx;
    if (seqobj != Py_None) {
        long v = PyLong_Check(seqobj) ? PyLong_AsLong(seqobj) : -1;
        if (v < 1 || v > INT_MAX) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "train: seq_len must be a positive integer");
            goto done;
        }
        tp.seq_len = (int)v;
    }
    if (logobj != Py_None) {
        long v = PyLong_Check(logobj) ? PyLong_AsLong(logobj) : -1;
        if (v < 1 || v > INT_MAX) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "train: log_every must be a positive integer");
            goto done;
        }
        tp.log_every = (int)v;
    }
    tp.accum = accum;
    tp.eval_every = eval_every;
    tp.eval_batches = eval_batches;
    tp.checkpoint = ckobj ? PyBytes_AS_STRING(ckobj) : NULL;
    tp.checkpoint_every = ck_every;
    tp.progress = progress;
    tp.data_parallel = dp;
    int given;
    if (adamw_from_kw(hpkw, &tp.opt, fn, &given)) goto done;
    if (mp_train_params_check(&tp)) {
        fail_in(MP_ERR_ARG, fn);
        goto done;
    }
    train_state *s = get_state(self, 1);
    if (!s) goto done;
    if (!resume || !s->has_opt) {
        mp_adamw_free(&s->opt);
        memset(&s->opt, 0, sizeof s->opt);
        s->opt.hp = tp.opt;
        s->has_opt = 1;
    } else if (given) {
        PyErr_SetString(PyExc_ValueError, "train: the model has an optimizer from an earlier m.train / m.train_step "
                                          "(or its checkpoint), which this run continues: pass resume=False for a "
                                          "fresh one with these hyper-parameters");
        goto done;
    }
    if (!(hooks = mp_hooks_new(&m->cfg))) {
        PyErr_NoMemory();
        goto done;
    }
    if (add_fwd_hooks(hooks, hl, tp.seq_len, fn, &keep)) goto done;
    tp.hooks = mp_hooks_count(hooks) ? hooks : NULL;
    cb.state = s;
    cb.task = task;
    cb.on_step = on_step == Py_None ? NULL : on_step;
    mp_train_data data = {&cb, train_sample, cb.on_step ? train_on_step : NULL};
    mp_train_result res;
    mp_status st;
    self->busy++;
    s->training++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_sync(m);
    if (!st) st = mp_train_run(m, &s->opt, &s->ws, &s->log, &tp, &data, &res);
    if (!st) st = mp_model_sync(m);
    Py_END_ALLOW_THREADS
    s->training--;
    self->busy--;
    if (cb.exc_type) {
        PyErr_Restore(cb.exc_type, cb.exc_val, cb.exc_tb);
        cb.exc_type = cb.exc_val = cb.exc_tb = NULL;
        goto done;
    }
    if (st) {
        fail_in(st, fn);
        goto done;
    }
    const mp_train_log *log = &s->log;
    r = PyDict_New();
    if (!r || dset(r, "step", list_of(res.n, 0, log, res.first)) || dset(r, "loss", list_of(res.n, 1, log, res.first)) ||
        dset(r, "lr", list_of(res.n, 2, log, res.first)) || dset(r, "tokens", list_of(res.n, 3, log, res.first)) ||
        dset(r, "time", list_of(res.n, 4, log, res.first)) ||
        dset(r, "eval_step", list_of(res.n_eval, 5, log, res.first_eval)) ||
        dset(r, "eval_loss", list_of(res.n_eval, 6, log, res.first_eval)) ||
        dset(r, "final_loss", PyFloat_FromDouble(res.final_loss)) ||
        dset(r, "tokens_per_s", PyFloat_FromDouble(res.tokens_per_s)))
        Py_CLEAR(r);
done:
    Py_XDECREF(cb.tok);
    Py_XDECREF(cb.tgt);
    Py_XDECREF(cb.exc_type);
    Py_XDECREF(cb.exc_val);
    Py_XDECREF(cb.exc_tb);
    mp_hooks_free(hooks);
    Py_XDECREF(keep);
    Py_XDECREF(ckobj);
    Py_XDECREF(hpkw);
    Py_DECREF(kwc);
    return r;
}

/* m.optimizer -> {lr, beta1, beta2, eps, weight_decay, min_lr, grad_clip,
 * warmup, total_steps, step} of the model's AdamW, or None before training */
static PyObject *get_optimizer(mpy_model *self, void *c) {
    (void)c;
    train_state *s = get_state(self, 0);
    if (PyErr_Occurred()) return NULL;
    if (!s || !s->has_opt) Py_RETURN_NONE;
    const mp_adamw_params *h = &s->opt.hp;
    return Py_BuildValue("{sdsdsdsdsdsdsdsisisl}", "lr", (double)h->lr, "beta1", (double)h->beta1, "beta2",
                         (double)h->beta2, "eps", (double)h->eps, "weight_decay", (double)h->weight_decay, "min_lr",
                         (double)(h->min_lr < 0 ? 0.1f * h->lr : h->min_lr), "grad_clip", (double)h->grad_clip,
                         "warmup", h->warmup, "total_steps", h->total_steps, "step", s->opt.step);
}

/* m.reset_optimizer(): forgets the optimizer (the next step makes a fresh one) */
static PyObject *model_reset_optimizer(mpy_model *self, PyObject *unused) {
    (void)unused;
    if (!mpy_model_get(self, "reset_optimizer", 0)) return NULL;
    drop_optimizer(self);
    Py_RETURN_NONE;
}

/* ---- capture (mpi/capture.h; the Lua side is lua/lcapture.c) ---- */

static PyObject *run_capture(mpy_model *self, mp_capture_params *p, PyObject *hl, int n_pos, const char *fn,
                             mp_capture_result *r) {
    mp_hooks *hooks = mp_hooks_new_model(p->model); /* with the attached SAEs (sae_splice.h) */
    PyObject *keep = NULL;
    if (!hooks) return PyErr_NoMemory();
    if (add_fwd_hooks(hooks, hl, n_pos, fn, &keep)) {
        mp_hooks_free(hooks);
        Py_XDECREF(keep);
        return NULL;
    }
    p->fwd_hooks = hooks;
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_capture_run(p, r);
    Py_END_ALLOW_THREADS
    self->busy--;
    mp_hooks_free(hooks);
    Py_XDECREF(keep);
    if (st) return fail_in(st, fn);
    Py_RETURN_NONE;
}

/* m.capture(tokens, out, hooks="*", logits=False, compress=0, fwd_hooks=None,
 * attention_mask=None) -> number of datasets written: one batch into a run
 * file (/tokens, /acts/<hook>, /logits), as m:capture in Lua. */
static PyObject *model_capture(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "capture";
    static char *kwlist[] = {"tokens", "out", "hooks", "logits", "compress", "fwd_hooks", "attention_mask", NULL};
    PyObject *tokobj, *outobj, *hl = Py_None, *maskobj = Py_None, *r = NULL;
    const char *hooks = "*";
    int logits = 0, compress = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|spiOO:capture", kwlist, &tokobj, PyUnicode_FSConverter, &outobj,
                                     &hooks, &logits, &compress, &hl, &maskobj))
        return NULL;
    PyArrayObject *tok = NULL, *mask = NULL;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) goto done;
    if (compress < 0 || compress > 9) {
        PyErr_Format(PyExc_ValueError, "capture: compress must be in 0..9 (got %d)", compress);
        goto done;
    }
    if (!(tok = mpy_tokens(self, tokobj, "capture: tokens"))) goto done;
    mp_capture_params p = mp_capture_params_default();
    p.model = m;
    p.tokens = PyArray_DATA(tok);
    p.B = (int)PyArray_DIM(tok, 0);
    p.T = (int)PyArray_DIM(tok, 1);
    if (maskobj != Py_None) {
        if (!(mask = int_array(maskobj, "capture: attention_mask", 0, 2))) goto done;
        if (PyArray_DIM(mask, 0) != p.B || PyArray_DIM(mask, 1) != p.T) {
            PyErr_Format(PyExc_ValueError, "capture: attention_mask must have the tokens' shape [%d, %d]", p.B, p.T);
            goto done;
        }
        p.mask = PyArray_DATA(mask);
    }
    p.out = PyBytes_AS_STRING(outobj);
    p.hooks = hooks;
    p.logits = logits;
    p.compress = compress;
    mp_capture_result res;
    if (!(r = run_capture(self, &p, hl, p.T, fn, &res))) goto done;
    Py_DECREF(r);
    r = PyLong_FromLong(res.n_datasets);
done:
    Py_XDECREF(tok);
    Py_XDECREF(mask);
    Py_DECREF(outobj);
    return r;
}

/* m.capture_prompts(prompts, out, hooks="*", logits=False, compress=0,
 * fwd_hooks=None) -> (n_datasets, n_prompts): prompts of ragged lengths (each
 * a str or a list of ids) into one file (/lengths, /tokens padded with -1,
 * /acts/<hook> [N, Tmax, ...]), each run alone, as m:capture_prompts. */
static PyObject *model_capture_prompts(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "capture_prompts";
    static char *kwlist[] = {"prompts", "out", "hooks", "logits", "compress", "fwd_hooks", NULL};
    PyObject *pobj, *outobj, *hl = Py_None, *r = NULL, *seq = NULL;
    const char *hooks = "*";
    int logits = 0, compress = 0;
    int *all = NULL;
    int32_t *len = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|spiO:capture_prompts", kwlist, &pobj, PyUnicode_FSConverter,
                                     &outobj, &hooks, &logits, &compress, &hl))
        return NULL;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) goto done;
    if (compress < 0 || compress > 9) {
        PyErr_Format(PyExc_ValueError, "capture_prompts: compress must be in 0..9 (got %d)", compress);
        goto done;
    }
    if (!(seq = PySequence_Fast(pobj, "capture_prompts: prompts must be a list"))) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "capture_prompts: too many prompts");
        goto done;
    }
    len = malloc((size_t)(n ? n : 1) * sizeof *len);
    size_t total = 0;
    int tmax = 1;
    if (!len) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "capture_prompts: prompt %zd", i);
        PyArrayObject *t = mpy_tokens(self, PySequence_Fast_GET_ITEM(seq, i), what);
        if (!t) goto done;
        if (PyArray_DIM(t, 0) != 1) {
            Py_DECREF(t);
            PyErr_Format(PyExc_ValueError, "%s is a batch; give one sequence per prompt", what);
            goto done;
        }
        int T = (int)PyArray_DIM(t, 1);
        int *q = realloc(all, (total + (size_t)T) * sizeof *q);
        if (!q) {
            Py_DECREF(t);
            PyErr_NoMemory();
            goto done;
        }
        all = q;
        memcpy(all + total, PyArray_DATA(t), (size_t)T * sizeof(int));
        Py_DECREF(t);
        len[i] = T;
        total += (size_t)T;
        if (T > tmax) tmax = T;
    }
    mp_capture_params p = mp_capture_params_default();
    p.model = m;
    p.out = PyBytes_AS_STRING(outobj);
    p.hooks = hooks;
    p.logits = logits;
    p.compress = compress;
    p.prompts = all ? all : (int[]){0};
    p.lengths = len;
    p.n_prompts = (int)n;
    mp_capture_result res;
    if (!(r = run_capture(self, &p, hl, tmax, fn, &res))) goto done;
    Py_DECREF(r);
    r = Py_BuildValue("(iL)", res.n_datasets, (long long)res.n_prompts);
done:
    free(all);
    free(len);
    Py_XDECREF(seq);
    Py_DECREF(outobj);
    return r;
}

/* mechprobe.capture(model, out, text=None, tokens=None, text_file=None,
 * tokens_file=None, hooks="*", logits=False, compress=0, fwd_hooks=None,
 * what=None) -> (n_datasets, n_prompts, T): `mechprobe capture` in one call
 * (mp.capture in Lua); exactly one of the four inputs. */
static PyObject *py_capture(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static const char *fn = "mechprobe.capture";
    static char *kwlist[] = {"model", "out", "text", "tokens", "text_file", "tokens_file", "hooks", "logits",
                             "compress", "fwd_hooks", "what", NULL};
    mpy_model *self;
    PyObject *outobj, *tokobj = Py_None, *tfobj = NULL, *kfobj = NULL, *hl = Py_None, *r = NULL;
    const char *text = NULL, *hooks = "*", *what = NULL;
    int logits = 0, compress = 0;
    PyArrayObject *tok = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O&|$zOO&O&spiOz:capture", kwlist, &mpy_model_type, &self,
                                     PyUnicode_FSConverter, &outobj, &text, &tokobj, fs_opt, &tfobj,
                                     fs_opt, &kfobj, &hooks, &logits, &compress, &hl, &what))
        return NULL;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) goto done;
    if (compress < 0 || compress > 9) {
        PyErr_Format(PyExc_ValueError, "%s: compress must be in 0..9 (got %d)", fn, compress);
        goto done;
    }
    mp_capture_params p = mp_capture_params_default();
    p.model = m;
    p.tok = self->tok;
    p.out = PyBytes_AS_STRING(outobj);
    p.hooks = hooks;
    p.logits = logits;
    p.compress = compress;
    p.text = text;
    p.text_file = tfobj ? PyBytes_AS_STRING(tfobj) : NULL;
    p.tokens_file = kfobj ? PyBytes_AS_STRING(kfobj) : NULL;
    p.file_what = what ? what : p.text_file ? "text_file" : "tokens_file";
    if (tokobj != Py_None) {
        if (!(tok = mpy_tokens(self, tokobj, "mechprobe.capture: tokens"))) goto done;
        p.tokens = PyArray_DATA(tok);
        p.B = (int)PyArray_DIM(tok, 0);
        p.T = (int)PyArray_DIM(tok, 1);
    }
    if ((p.text != NULL) + (p.tokens != NULL) + (p.text_file != NULL) + (p.tokens_file != NULL) != 1) {
        PyErr_Format(PyExc_ValueError, "%s: give exactly one of text, tokens, text_file and tokens_file", fn);
        goto done;
    }
    if (p.text && !self->tok) {
        PyErr_Format(PyExc_ValueError, "%s: text needs a tokenizer and this model has none", fn);
        goto done;
    }
    mp_capture_result res;
    if (!(r = run_capture(self, &p, hl, p.tokens ? p.T : 0, fn, &res))) goto done;
    Py_DECREF(r);
    r = Py_BuildValue("(iLi)", res.n_datasets, (long long)res.n_prompts, res.T);
done:
    Py_XDECREF(tok);
    Py_XDECREF(tfobj);
    Py_XDECREF(kfobj);
    Py_DECREF(outobj);
    return r;
}

/* ---- analyses (analyze/ headers; the Lua side is lua/lanalyze.c, lprobe.c) ----
 * Point clouds: arrays whose last dim is d, leading dims flattened into n
 * points. Indices in results are 0-based (Lua's are 1-based). */

static PyArrayObject *cloud(PyObject *o, const char *fn, const char *what, size_t *n, size_t *d) {
    char buf[96];
    snprintf(buf, sizeof buf, "analyze.%s: %s", fn, what);
    PyArrayObject *a = mpy_floats(o, -1, buf);
    if (!a) return NULL;
    if (PyArray_NDIM(a) < 2 || PyArray_DIM(a, PyArray_NDIM(a) - 1) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: expected points [n, d] (an array of 2 or more dims), got %d dim(s)", buf,
                     PyArray_NDIM(a));
        Py_DECREF(a);
        return NULL;
    }
    *d = (size_t)PyArray_DIM(a, PyArray_NDIM(a) - 1);
    *n = (size_t)PyArray_SIZE(a) / *d;
    return a;
}

static PyObject *an_fail(mp_status st, const char *fn) {
    char buf[64];
    snprintf(buf, sizeof buf, "analyze.%s", fn);
    return fail_in(st, buf);
}

/* analyze.pca(X, k=None, proj=True) */
static PyObject *py_pca(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"X", "k", "proj", NULL};
    PyObject *xo, *ko = Py_None;
    int want_proj = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op:pca", kwlist, &xo, &ko, &want_proj)) return NULL;
    size_t n, d;
    PyArrayObject *X = cloud(xo, "pca", "X", &n, &d);
    if (!X) return NULL;
    size_t k = d;
    if (ko != Py_None) {
        long v = PyLong_Check(ko) ? PyLong_AsLong(ko) : -1;
        if (v < 1 || (size_t)v > d) {
            PyErr_Clear();
            Py_DECREF(X);
            return PyErr_Format(PyExc_ValueError, "analyze.pca: k must be an integer in 1..%zu", d);
        }
        k = (size_t)v;
    }
    mp_pca p;
    memset(&p, 0, sizeof p);
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_pca(PyArray_DATA(X), n, d, k, want_proj, &p);
    Py_END_ALLOW_THREADS
    Py_DECREF(X);
    if (st) {
        mp_analyze_pca_free(&p);
        return an_fail(st, "pca");
    }
    PyObject *r = PyDict_New();
    npy_intp kd[2] = {(npy_intp)p.k, (npy_intp)d}, kk[1] = {(npy_intp)p.k}, dd[1] = {(npy_intp)d},
             nk[2] = {(npy_intp)n, (npy_intp)p.k};
    if (!r || dset(r, "components", floats_array(2, kd, p.components)) ||
        dset(r, "explained", doubles_array(1, kk, p.explained)) || dset(r, "ratio", doubles_array(1, kk, p.ratio)) ||
        dset(r, "mean", floats_array(1, dd, p.mean)) || (p.proj && dset(r, "proj", floats_array(2, nk, p.proj))) ||
        dset(r, "total_var", PyFloat_FromDouble(p.total_var)) ||
        dset(r, "method", PyUnicode_FromString(p.method == MP_PCA_SVD ? "svd" : "cov")) ||
        dset(r, "n", PyLong_FromSize_t(n)) || dset(r, "d", PyLong_FromSize_t(d)) || dset(r, "k", PyLong_FromSize_t(p.k)))
        Py_CLEAR(r);
    mp_analyze_pca_free(&p);
    return r;
}

static int spectrum_of(PyObject *o, const char *fn, mp_spectrum *s) {
    size_t n, d;
    PyArrayObject *X = cloud(o, fn, "X", &n, &d);
    if (!X) return -1;
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_spectrum(PyArray_DATA(X), n, d, s);
    Py_END_ALLOW_THREADS
    Py_DECREF(X);
    if (st) {
        an_fail(st, fn);
        return -1;
    }
    return 0;
}

static PyObject *py_stable_rank(PyObject *mod, PyObject *o) {
    (void)mod;
    mp_spectrum s;
    return spectrum_of(o, "stable_rank", &s) ? NULL : PyFloat_FromDouble(s.stable_rank);
}

static PyObject *py_sigma1_share(PyObject *mod, PyObject *o) {
    (void)mod;
    mp_spectrum s;
    return spectrum_of(o, "sigma1_share", &s) ? NULL : PyFloat_FromDouble(s.sigma1_share);
}

static PyObject *py_spectrum(PyObject *mod, PyObject *o) {
    (void)mod;
    mp_spectrum s;
    if (spectrum_of(o, "spectrum", &s)) return NULL;
    return Py_BuildValue("{sdsdsdsd}", "fro2", s.fro2, "sigma1", s.sigma1, "stable_rank", s.stable_rank,
                         "sigma1_share", s.sigma1_share);
}

/* analyze.separation(A, B, ridge=1e-4) */
static PyObject *py_separation(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"A", "B", "ridge", NULL};
    PyObject *ao, *bo;
    mp_separation_params p = mp_analyze_separation_params_default();
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|d:separation", kwlist, &ao, &bo, &p.ridge_rel)) return NULL;
    size_t na, da, nb, db;
    PyArrayObject *A = cloud(ao, "separation", "A", &na, &da), *B = A ? cloud(bo, "separation", "B", &nb, &db) : NULL;
    if (!B) {
        Py_XDECREF(A);
        return NULL;
    }
    PyObject *r = NULL;
    mp_separation s;
    if (da != db) {
        PyErr_Format(PyExc_ValueError, "analyze.separation: the clouds have dimensions %zu and %zu", da, db);
    } else {
        mp_status st;
        Py_BEGIN_ALLOW_THREADS
        st = mp_analyze_separation(PyArray_DATA(A), na, PyArray_DATA(B), nb, da, &p, &s);
        Py_END_ALLOW_THREADS
        if (st) an_fail(st, "separation");
        else
            r = Py_BuildValue("{sdsdsdsdsdsdsd}", "cos", s.cos_means, "centroid_dist", s.centroid_dist, "spread",
                              s.spread, "dist_over_spread", s.dist_over_spread, "fisher_j", s.fisher_j, "fisher_acc",
                              s.fisher_acc, "ridge", s.ridge);
    }
    Py_DECREF(A);
    Py_DECREF(B);
    return r;
}

static PyArrayObject *pattern(PyObject *o, const char *fn, size_t *P, size_t *T) {
    char buf[96];
    snprintf(buf, sizeof buf, "analyze.%s: pattern", fn);
    PyArrayObject *a = mpy_floats(o, -1, buf);
    if (!a) return NULL;
    int nd = PyArray_NDIM(a);
    if (nd < 2 || PyArray_DIM(a, nd - 1) != PyArray_DIM(a, nd - 2) || PyArray_DIM(a, nd - 1) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: expected an attention pattern [..., T, T]", buf);
        Py_DECREF(a);
        return NULL;
    }
    *T = (size_t)PyArray_DIM(a, nd - 1);
    *P = (size_t)PyArray_SIZE(a) / (*T * *T);
    return a;
}

/* analyze.sinks(pattern, eps=0.3, bins=None) */
static PyObject *py_sinks(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"pattern", "eps", "bins", NULL};
    PyObject *ao;
    mp_sink_params p = mp_analyze_sink_params_default();
    Py_ssize_t bins = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dn:sinks", kwlist, &ao, &p.eps, &bins)) return NULL;
    if (bins < 0) return PyErr_Format(PyExc_ValueError, "analyze.sinks: bins must be >= 0 (0: min(T, 32))");
    p.bins = (size_t)bins;
    size_t P, T;
    PyArrayObject *A = pattern(ao, "sinks", &P, &T);
    if (!A) return NULL;
    mp_sinks s;
    memset(&s, 0, sizeof s);
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_sinks(PyArray_DATA(A), P, T, &p, &s);
    Py_END_ALLOW_THREADS
    int lead = PyArray_NDIM(A) - 2;
    npy_intp shape[NPY_MAXDIMS];
    for (int i = 0; i < lead; i++) shape[i] = PyArray_DIM(A, i);
    shape[lead] = (npy_intp)T;
    Py_DECREF(A);
    if (st) {
        mp_analyze_sinks_free(&s);
        return an_fail(st, "sinks");
    }
    PyObject *r = PyDict_New(), *a0 = NULL;
    npy_intp one = 1, nb = (npy_intp)s.bins;
    a0 = PyArray_SimpleNew(lead ? lead : 1, lead ? shape : &one, NPY_FLOAT64);
    PyObject *b0 = PyArray_SimpleNew(1, &nb, NPY_INT64), *b1 = PyArray_SimpleNew(1, &nb, NPY_INT64);
    if (a0 && b0 && b1) {
        for (size_t i = 0; i < P; i++) ((double *)PyArray_DATA((PyArrayObject *)a0))[i] = s.alpha[i * T];
        for (size_t b = 0; b < s.bins; b++) {
            ((int64_t *)PyArray_DATA((PyArrayObject *)b0))[b] = (int64_t)s.bin_lo[b];
            ((int64_t *)PyArray_DATA((PyArrayObject *)b1))[b] = (int64_t)s.bin_lo[b + 1];
        }
    }
    if (!r || dset(r, "alpha", doubles_array(lead + 1, shape, s.alpha)) ||
        dset(r, "entropy", doubles_array(lead + 1, shape, s.entropy)) || dset(r, "alpha0", a0) ||
        dset(r, "sink_rate", PyFloat_FromDouble(s.sink_rate)) || dset(r, "sink_heads", PyLong_FromSize_t(s.sink_heads)) ||
        dset(r, "pairs", PyLong_FromSize_t(P)) || dset(r, "eps", PyFloat_FromDouble(p.eps)) ||
        dset(r, "first_by_pos", doubles_array(1, &nb, s.first_by_pos)) || dset(r, "bin_start", b0) ||
        dset(r, "bin_end", b1))
        Py_CLEAR(r);
    else
        a0 = b0 = b1 = NULL;
    (void)a0;
    mp_analyze_sinks_free(&s);
    return r;
}

/* analyze.entropy(pattern) -> [..., T] in nats */
static PyObject *py_entropy(PyObject *mod, PyObject *o) {
    (void)mod;
    size_t P, T;
    PyArrayObject *A = pattern(o, "entropy", &P, &T);
    if (!A) return NULL;
    npy_intp shape[NPY_MAXDIMS];
    for (int i = 0; i < PyArray_NDIM(A) - 1; i++) shape[i] = PyArray_DIM(A, i);
    PyObject *H = PyArray_SimpleNew(PyArray_NDIM(A) - 1, shape, NPY_FLOAT64);
    if (!H) {
        Py_DECREF(A);
        return NULL;
    }
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_attn_entropy(PyArray_DATA(A), P, T, PyArray_DATA((PyArrayObject *)H));
    Py_END_ALLOW_THREADS
    Py_DECREF(A);
    if (st) {
        Py_DECREF(H);
        return an_fail(st, "entropy");
    }
    return H;
}

static PyObject *py_key_norm_ratio(PyObject *mod, PyObject *o) {
    (void)mod;
    size_t T, d;
    PyArrayObject *k = cloud(o, "key_norm_ratio", "k", &T, &d);
    if (!k) return NULL;
    double r;
    mp_status st = mp_analyze_key_norm_ratio(PyArray_DATA(k), T, d, &r);
    Py_DECREF(k);
    return st ? an_fail(st, "key_norm_ratio") : PyFloat_FromDouble(r);
}

/* analyze.max_qk(q, k, causal=True) -> (max [T] float32, argmax [T] int64) */
static PyObject *py_max_qk(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"q", "k", "causal", NULL};
    PyObject *qo, *ko;
    int causal = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p:max_qk", kwlist, &qo, &ko, &causal)) return NULL;
    size_t tq, dq, tk, dk;
    PyArrayObject *q = cloud(qo, "max_qk", "q", &tq, &dq), *k = q ? cloud(ko, "max_qk", "k", &tk, &dk) : NULL;
    if (!k) {
        Py_XDECREF(q);
        return NULL;
    }
    PyObject *r = NULL;
    if (tq != tk || dq != dk) {
        PyErr_Format(PyExc_ValueError, "analyze.max_qk: q is [%zu, %zu] but k is [%zu, %zu]", tq, dq, tk, dk);
    } else {
        npy_intp T = (npy_intp)tq;
        PyObject *mx = PyArray_SimpleNew(1, &T, NPY_FLOAT32), *am = PyArray_SimpleNew(1, &T, NPY_INT64);
        if (mx && am) {
            mp_status st;
            Py_BEGIN_ALLOW_THREADS
            st = mp_analyze_max_qk(PyArray_DATA(q), PyArray_DATA(k), tq, dq, causal, PyArray_DATA((PyArrayObject *)mx),
                                   PyArray_DATA((PyArrayObject *)am));
            Py_END_ALLOW_THREADS
            if (st) an_fail(st, "max_qk");
            else r = PyTuple_Pack(2, mx, am);
        }
        Py_XDECREF(mx);
        Py_XDECREF(am);
    }
    Py_DECREF(q);
    Py_DECREF(k);
    return r;
}

/* analyze.massive(h, abs=100, rel=1000, max_hits=100000), h [L, T, D] or [T, D] */
static PyObject *py_massive(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"h", "abs", "rel", "max_hits", NULL};
    PyObject *ho;
    mp_massive_params p = mp_analyze_massive_params_default();
    Py_ssize_t mh = (Py_ssize_t)p.max_hits;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ddn:massive", kwlist, &ho, &p.abs_min, &p.rel_min, &mh)) return NULL;
    if (mh < 0 || mh > 1000000000) return PyErr_Format(PyExc_ValueError, "analyze.massive: max_hits must be in 0..1e9");
    p.max_hits = (size_t)mh;
    PyArrayObject *h = mpy_floats(ho, -1, "analyze.massive: h");
    if (!h) return NULL;
    int nd = PyArray_NDIM(h);
    if (nd != 2 && nd != 3) {
        Py_DECREF(h);
        return PyErr_Format(PyExc_ValueError, "analyze.massive: h: expected hidden states [L, T, D] or [T, D], got %d "
                                              "dims", nd);
    }
    size_t Ln = nd == 3 ? (size_t)PyArray_DIM(h, 0) : 1, T = (size_t)PyArray_DIM(h, nd - 2),
           D = (size_t)PyArray_DIM(h, nd - 1);
    mp_massive m;
    memset(&m, 0, sizeof m);
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_massive(PyArray_DATA(h), Ln, T, D, &p, &m);
    Py_END_ALLOW_THREADS
    Py_DECREF(h);
    if (st) {
        mp_analyze_massive_free(&m);
        return an_fail(st, "massive");
    }
    PyObject *r = PyDict_New(), *hits = PyList_New((Py_ssize_t)m.n_hits);
    npy_intp lt[2] = {(npy_intp)Ln, (npy_intp)T}, l1[1] = {(npy_intp)Ln};
    for (size_t i = 0; hits && i < m.n_hits; i++) {
        PyObject *e = Py_BuildValue("{snsnsnsd}", "layer", (Py_ssize_t)m.hits[i].layer, "pos", (Py_ssize_t)m.hits[i].pos,
                                    "channel", (Py_ssize_t)m.hits[i].channel, "value", (double)m.hits[i].value);
        if (!e) {
            Py_CLEAR(hits);
            break;
        }
        PyList_SET_ITEM(hits, (Py_ssize_t)i, e);
    }
    if (!r || !hits || dset(r, "ratio", doubles_array(2, lt, m.ratio)) ||
        dset(r, "median", doubles_array(1, l1, m.layer_median)) || PyDict_SetItemString(r, "hits", hits) ||
        dset(r, "n_hits_total", PyLong_FromSize_t(m.n_hits_total)))
        Py_CLEAR(r);
    Py_XDECREF(hits);
    mp_analyze_massive_free(&m);
    return r;
}

/* bootstrap's statistic from Python: called with a float64 array of the resample */
typedef struct {
    PyObject *fn;
    int failed;
} py_stat_ctx;

static double py_stat(const double *x, size_t n, void *vctx) {
    py_stat_ctx *c = vctx;
    if (c->failed) return NAN;
    npy_intp dn = (npy_intp)n;
    PyObject *a = doubles_array(1, &dn, x), *r = a ? PyObject_CallOneArg(c->fn, a) : NULL;
    Py_XDECREF(a);
    double v = r ? PyFloat_AsDouble(r) : -1.0;
    Py_XDECREF(r);
    if (!r || (v == -1.0 && PyErr_Occurred())) {
        c->failed = 1;
        mp_error(MP_ERR_ARG, "the statistic failed");
        return NAN;
    }
    if (isnan(v)) mp_error(MP_ERR_ARG, "the statistic returned NaN");
    return v;
}

/* analyze.bootstrap(values, n=1000, level=0.95, seed=1, stat="mean")
 * -> {estimate, lo, hi, se, n}; stat: "mean", "median" or a function of a
 * float64 array (it runs with the GIL held). */
static PyObject *py_bootstrap(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"values", "n", "level", "seed", "stat", NULL};
    PyObject *vo, *stat = NULL;
    mp_bootstrap_params p = mp_analyze_bootstrap_params_default();
    Py_ssize_t nr = (Py_ssize_t)p.n_resamples;
    unsigned long long seed = p.seed;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ndKO:bootstrap", kwlist, &vo, &nr, &p.level, &seed, &stat))
        return NULL;
    if (nr < 2 || nr > 100000000) return PyErr_Format(PyExc_ValueError, "analyze.bootstrap: n = %zd resamples must be "
                                                                         "in 2..1e8", nr);
    if (seed > 4294967295ULL) return PyErr_Format(PyExc_ValueError, "analyze.bootstrap: seed must be in 0..2^32-1");
    p.n_resamples = (size_t)nr;
    p.seed = (unsigned long)seed;
    PyArrayObject *v = mpy_floats(vo, -1, "analyze.bootstrap: values"); /* float32, as the Lua Tensor */
    if (!v) return NULL;
    size_t n = (size_t)PyArray_SIZE(v);
    if (n < 1) {
        Py_DECREF(v);
        return PyErr_Format(PyExc_ValueError, "analyze.bootstrap: values: no values");
    }
    double *x = malloc(n * sizeof *x), *scratch = NULL;
    if (!x) {
        Py_DECREF(v);
        return PyErr_NoMemory();
    }
    for (size_t i = 0; i < n; i++) x[i] = ((const float *)PyArray_DATA(v))[i];
    Py_DECREF(v);
    mp_statistic_fn fn = NULL;
    void *ctx = NULL;
    py_stat_ctx pc = {stat, 0};
    PyObject *r = NULL;
    if (stat && stat != Py_None) {
        if (PyUnicode_Check(stat)) {
            const char *s = PyUnicode_AsUTF8(stat);
            if (s && !strcmp(s, "median")) {
                if (!(scratch = malloc(n * sizeof *scratch))) {
                    PyErr_NoMemory();
                    goto done;
                }
                fn = mp_tensor_stat_median;
                ctx = scratch;
            } else if (!s || strcmp(s, "mean")) {
                PyErr_Format(PyExc_ValueError, "analyze.bootstrap: stat '%s' unknown (use \"mean\", \"median\" or a "
                                               "function)", s ? s : "?");
                goto done;
            }
        } else if (PyCallable_Check(stat)) {
            fn = py_stat;
            ctx = &pc;
        } else {
            PyErr_SetString(PyExc_TypeError, "analyze.bootstrap: stat must be \"mean\", \"median\" or a function");
            goto done;
        }
    }
    mp_ci ci;
    mp_status st;
    if (fn == py_stat) {
        st = mp_analyze_bootstrap(x, n, fn, ctx, &p, &ci);
    } else {
        Py_BEGIN_ALLOW_THREADS
        st = mp_analyze_bootstrap(x, n, fn, ctx, &p, &ci);
        Py_END_ALLOW_THREADS
    }
    if (pc.failed && PyErr_Occurred()) goto done;
    if (st) {
        an_fail(st, "bootstrap");
        goto done;
    }
    r = Py_BuildValue("{sdsdsdsdsn}", "estimate", ci.estimate, "lo", ci.lo, "hi", ci.hi, "se", ci.se, "n",
                      (Py_ssize_t)ci.n_resamples);
done:
    free(x);
    free(scratch);
    return r;
}

/* analyze._probe_fit(X, y, kind="linear", ridge=0, standardize=True,
 * max_iter=100, tol=1e-8) -> dict (mechprobe.analyze.probe wraps it) */
static PyObject *py_probe_fit(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"X", "y", "kind", "ridge", "standardize", "max_iter", "tol", NULL};
    PyObject *xo, *yo;
    const char *kind = "linear";
    mp_probe_params p = mp_analyze_probe_params_default();
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|sdpid:probe", kwlist, &xo, &yo, &kind, &p.ridge, &p.standardize,
                                     &p.max_iter, &p.tol))
        return NULL;
    if (!strcmp(kind, "logistic")) p.kind = MP_PROBE_LOGISTIC;
    else if (!strcmp(kind, "linear")) p.kind = MP_PROBE_LINEAR;
    else return PyErr_Format(PyExc_ValueError, "analyze.probe: kind must be \"linear\" or \"logistic\" (got \"%s\")", kind);
    size_t n, d;
    PyArrayObject *X = cloud(xo, "probe", "X", &n, &d);
    if (!X) return NULL;
    PyArrayObject *y = (PyArrayObject *)PyArray_FROMANY(yo, NPY_FLOAT64, 0, 0, NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST);
    if (!y || (size_t)PyArray_SIZE(y) != n) {
        if (y) PyErr_Format(PyExc_ValueError, "analyze.probe: y has %zd labels for %zu rows of X", PyArray_SIZE(y), n);
        else {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "analyze.probe: y: expected an array of numbers");
        }
        Py_DECREF(X);
        Py_XDECREF(y);
        return NULL;
    }
    mp_probe pr;
    memset(&pr, 0, sizeof pr);
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_analyze_probe_fit(PyArray_DATA(X), PyArray_DATA(y), n, d, &p, &pr);
    Py_END_ALLOW_THREADS
    Py_DECREF(X);
    Py_DECREF(y);
    if (st) {
        mp_analyze_probe_free(&pr);
        return an_fail(st, "probe");
    }
    npy_intp dd = (npy_intp)d;
    PyObject *r = PyDict_New();
    if (!r || dset(r, "kind", PyUnicode_FromString(pr.kind == MP_PROBE_LOGISTIC ? "logistic" : "linear")) ||
        dset(r, "d", PyLong_FromSize_t(d)) || dset(r, "w", doubles_array(1, &dd, pr.w)) ||
        dset(r, "b", PyFloat_FromDouble(pr.b)) || dset(r, "loss", PyFloat_FromDouble(pr.loss)) ||
        dset(r, "train_acc", PyFloat_FromDouble(pr.train_acc)) || dset(r, "r2", PyFloat_FromDouble(pr.r2)) ||
        dset(r, "iterations", PyLong_FromLong(pr.iterations)) || dset(r, "converged", PyBool_FromLong(pr.converged)) ||
        dset(r, "rank", pr.kind == MP_PROBE_LINEAR ? PyLong_FromSize_t(pr.rank) : Py_NewRef(Py_None)))
        Py_CLEAR(r);
    mp_analyze_probe_free(&pr);
    return r;
}

/* analyze._probe_scores(kind, w, b, X) -> float64 [n] (mp_analyze_probe_scores) */
static PyObject *py_probe_scores(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *kind;
    PyObject *wo, *xo;
    double b;
    if (!PyArg_ParseTuple(args, "sOdO:_probe_scores", &kind, &wo, &b, &xo)) return NULL;
    PyArrayObject *w = (PyArrayObject *)PyArray_FROMANY(wo, NPY_FLOAT64, 1, 1, NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST);
    if (!w) return NULL;
    size_t n, d;
    PyArrayObject *X = cloud(xo, "probe.predict", "X", &n, &d);
    if (!X) {
        Py_DECREF(w);
        return NULL;
    }
    PyObject *r = NULL;
    if ((size_t)PyArray_SIZE(w) != d) {
        PyErr_Format(PyExc_ValueError, "analyze.probe.predict: X has %zu features, the probe %zd", d, PyArray_SIZE(w));
    } else {
        mp_probe pr;
        memset(&pr, 0, sizeof pr);
        pr.kind = !strcmp(kind, "logistic") ? MP_PROBE_LOGISTIC : MP_PROBE_LINEAR;
        pr.d = d;
        pr.w = PyArray_DATA(w);
        pr.b = b;
        npy_intp nn = (npy_intp)n;
        r = PyArray_SimpleNew(1, &nn, NPY_FLOAT64);
        if (r) mp_analyze_probe_scores(&pr, PyArray_DATA(X), n, PyArray_DATA((PyArrayObject *)r));
    }
    Py_DECREF(w);
    Py_DECREF(X);
    return r;
}

/* ---- tables ---- */

#define TL(N) {#N, (getter)get_tl, NULL, "TransformerLens's " #N " (a copy; per-layer weights stacked [n_layer, ...])", #N}

PyMethodDef mpy_extra_methods[] = {
    {"run_with_interventions", (PyCFunction)(void (*)(void))model_run_with_interventions, METH_VARARGS | METH_KEYWORDS,
     "run_with_interventions(tokens, fwd_hooks=[(name, intervention)], logits='all', attention_mask=None) -> logits"},
    {"weight", (PyCFunction)(void (*)(void))model_weight, METH_VARARGS | METH_KEYWORDS,
     "weight(name, layer=None) -> a copy of TL weight `name` (one layer, or all stacked)"},
    {"set_weight", (PyCFunction)(void (*)(void))model_set_weight, METH_VARARGS | METH_KEYWORDS,
     "set_weight(name, value, layer=None): writes a TL-shaped array"},
    {"params", (PyCFunction)model_params, METH_NOARGS, "params() -> parameter names in checkpoint order"},
    {"param", (PyCFunction)model_param, METH_O, "param(name) -> a copy of the parameter ([out, in])"},
    {"state_dict", (PyCFunction)model_state_dict, METH_NOARGS, "state_dict() -> {name: copy}"},
    {"set_param", (PyCFunction)model_set_param, METH_VARARGS, "set_param(name, value): writes a parameter"},
    {"process_weights", (PyCFunction)(void (*)(void))model_process_weights, METH_VARARGS | METH_KEYWORDS,
     "process_weights(fold_ln=, center_writing_weights=, center_unembed=, fold_value_biases=) -> {applied, skipped}"},
    {"dequantize", (PyCFunction)model_dequantize, METH_NOARGS, "dequantize(): float32 weights"},
    {"save", (PyCFunction)(void (*)(void))model_save, METH_VARARGS | METH_KEYWORDS,
     "save(path, format=None, type=None, version=0)"},
    {"train_step", (PyCFunction)(void (*)(void))model_train_step, METH_VARARGS | METH_KEYWORDS,
     "train_step(tokens, targets, accum=1, data_parallel=True, fwd_hooks=None, lr=..., ...) -> (loss, grad_norm)"},
    {"train", (PyCFunction)(void (*)(void))model_train, METH_VARARGS | METH_KEYWORDS,
     "train(task, steps, batch=8, seq_len=None, ...) -> {step, loss, lr, ...}"},
    {"reset_optimizer", (PyCFunction)model_reset_optimizer, METH_NOARGS, "reset_optimizer(): forget the AdamW state"},
    {"capture", (PyCFunction)(void (*)(void))model_capture, METH_VARARGS | METH_KEYWORDS,
     "capture(tokens, out, hooks='*', logits=False, compress=0, fwd_hooks=None, attention_mask=None) -> n_datasets"},
    {"capture_prompts", (PyCFunction)(void (*)(void))model_capture_prompts, METH_VARARGS | METH_KEYWORDS,
     "capture_prompts(prompts, out, hooks='*', logits=False, compress=0, fwd_hooks=None) -> (n_datasets, n_prompts)"},
    {NULL, NULL, 0, NULL}};

PyGetSetDef mpy_extra_getset[] = {
    TL(W_E), TL(W_pos), TL(W_U), TL(b_U), TL(W_Q), TL(W_K), TL(W_V), TL(_W_K), TL(_W_V), TL(W_O), TL(W_in),
    TL(W_gate), TL(W_out), TL(b_Q), TL(b_K), TL(b_V), TL(_b_K), TL(_b_V), TL(b_O), TL(b_in), TL(b_gate), TL(b_out),
    {"optimizer", (getter)get_optimizer, NULL, "the model's AdamW hyper-parameters and step, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyMethodDef mpy_extra_functions[] = {
    {"ablate_zero", (PyCFunction)(void (*)(void))py_ablate_zero, METH_VARARGS | METH_KEYWORDS,
     "ablate_zero(head=None, positions=None) -> Intervention"},
    {"ablate_mean", (PyCFunction)(void (*)(void))py_ablate_mean, METH_VARARGS | METH_KEYWORDS,
     "ablate_mean(reference, head=None, positions=None) -> Intervention"},
    {"patch", (PyCFunction)(void (*)(void))py_patch, METH_VARARGS | METH_KEYWORDS,
     "patch(source, head=None, positions=None) -> Intervention"},
    {"steer", (PyCFunction)(void (*)(void))py_steer, METH_VARARGS | METH_KEYWORDS,
     "steer(vector, scale=1.0, head=None, positions=None) -> Intervention"},
    {"scale", (PyCFunction)(void (*)(void))py_scale, METH_VARARGS | METH_KEYWORDS,
     "scale(factor, head=None, positions=None) -> Intervention"},
    {"capture", (PyCFunction)(void (*)(void))py_capture, METH_VARARGS | METH_KEYWORDS,
     "capture(model, out, text=|tokens=|text_file=|tokens_file=, hooks='*', ...) -> (n_datasets, n_prompts, T)"},
    {"_restore_train_state", py_restore_train_state, METH_VARARGS, NULL},
    {"analyze_pca", (PyCFunction)(void (*)(void))py_pca, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_stable_rank", py_stable_rank, METH_O, NULL},
    {"analyze_sigma1_share", py_sigma1_share, METH_O, NULL},
    {"analyze_spectrum", py_spectrum, METH_O, NULL},
    {"analyze_separation", (PyCFunction)(void (*)(void))py_separation, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_sinks", (PyCFunction)(void (*)(void))py_sinks, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_entropy", py_entropy, METH_O, NULL},
    {"analyze_key_norm_ratio", py_key_norm_ratio, METH_O, NULL},
    {"analyze_max_qk", (PyCFunction)(void (*)(void))py_max_qk, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_massive", (PyCFunction)(void (*)(void))py_massive, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_bootstrap", (PyCFunction)(void (*)(void))py_bootstrap, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_probe_fit", (PyCFunction)(void (*)(void))py_probe_fit, METH_VARARGS | METH_KEYWORDS, NULL},
    {"analyze_probe_scores", py_probe_scores, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
