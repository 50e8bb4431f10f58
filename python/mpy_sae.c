/* mpy_sae.c — sparse autoencoders in Python: mechprobe.SAE over the C core
 * runtime/sae.h and formats/sae_io.h, the calls the Lua binding makes
 * (lua/lsae.c, lua/lsae_io.c):
 *
 *     sae = mechprobe.SAE.load("path/to/sae")          # an SAELens folder
 *     sae = mechprobe.SAE(architecture="topk", d_in=512, d_sae=4096, k=32)
 *     acts = sae.encode(x)                            # float32 [..., d_in] -> [..., d_sae]
 *     out = sae.decode(acts)                          # -> [..., d_in]
 *     out = sae.forward(x)  (or sae(x))               # decode(encode(x)), the norm undone
 *     sae.W_enc, b_enc, W_dec, b_dec, threshold       # numpy views of the SAE's weights
 *     sae.cfg; sae.save("dir"); sae.close()
 *
 * The weight arrays share the SAE's memory (writes reach the SAE). The first
 * one handed out moves the weight block into a capsule that every such array
 * holds, so an array stays valid after sae.close() or `del sae`. encode /
 * decode / forward run with the GIL released; close() meanwhile is refused.
 * Other files reach the mp_sae through mpy_sae_get (mpy.h). */
#include "mpy.h"

#include <limits.h>
#include <string.h>

#include "sae.h"
#include "sae_io.h"

typedef struct {
    PyObject_HEAD
    mp_sae *s;          /* NULL once closed */
    PyObject *block;    /* capsule owning s->block once a weight view exists, else NULL */
    int busy;           /* calls running with the GIL released */
    int attached;       /* models it is attached to (mpy_sae_splice.c) */
    PyObject *weakrefs;
} mpy_sae;

static PyTypeObject mpy_sae_type;

mp_sae *mpy_sae_get(PyObject *o) {
    if (!PyObject_TypeCheck(o, &mpy_sae_type)) {
        PyErr_Format(PyExc_TypeError, "expected a mechprobe.SAE, got %s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    mpy_sae *self = (mpy_sae *)o;
    if (!self->s) {
        PyErr_SetString(PyExc_ValueError, "the SAE is closed");
        return NULL;
    }
    return self->s;
}

int mpy_sae_attached(PyObject *o, int delta) {
    if (!PyObject_TypeCheck(o, &mpy_sae_type)) return 0;
    return ((mpy_sae *)o)->attached += delta;
}

static PyObject *wrap(mp_sae *s) {
    mpy_sae *self = PyObject_New(mpy_sae, &mpy_sae_type);
    if (!self) {
        mp_sae_free(s);
        return NULL;
    }
    self->s = s;
    self->block = NULL;
    self->busy = 0;
    self->attached = 0;
    self->weakrefs = NULL;
    return (PyObject *)self;
}

static void release(mpy_sae *self) {
    if (self->s && self->block) self->s->block = NULL; /* the capsule frees it */
    mp_sae_free(self->s);
    self->s = NULL;
    Py_CLEAR(self->block);
}

static void sae_dealloc(mpy_sae *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    release(self);
    PyObject_Del(self);
}

/* SAE(architecture="standard", d_in=, d_sae=, k=None, apply_b_dec_to_input=True,
 *     normalize_activations="none", hook_name="", hook_layer=-1, model_name="") — weights 0 */
static PyObject *sae_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)type;
    static char *kwlist[] = {"architecture", "d_in", "d_sae", "k", "apply_b_dec_to_input", "normalize_activations",
                             "hook_name", "hook_layer", "model_name", NULL};
    const char *arch = "standard", *norm = "none", *hook = "", *model = "";
    int d_in = 0, d_sae = 0, apply = 1, layer = -1;
    PyObject *kobj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$siiOpssis:SAE", kwlist, &arch, &d_in, &d_sae, &kobj, &apply, &norm,
                                     &hook, &layer, &model))
        return NULL;
    int a = mp_sae_arch_named(arch), n = mp_sae_norm_named(norm);
    if (a < 0) return PyErr_Format(PyExc_ValueError, "SAE: unknown architecture \"%s\" (standard, topk, jumprelu)", arch);
    if (n < 0)
        return PyErr_Format(PyExc_ValueError, "SAE: unknown normalize_activations \"%s\" (none, "
                            "expected_average_only_in, constant_norm_rescale, layer_norm)", norm);
    if (d_in < 1 || d_sae < 1) return PyErr_Format(PyExc_ValueError, "SAE: d_in and d_sae are required (>= 1)");
    int k = 0;
    if (a == MP_SAE_TOPK) {
        if (kobj == Py_None) return PyErr_Format(PyExc_ValueError, "SAE: architecture \"topk\" needs k");
        long kl = PyLong_AsLong(kobj);
        if (kl == -1 && PyErr_Occurred()) return NULL;
        if (kl < 1 || kl > d_sae) return PyErr_Format(PyExc_ValueError, "SAE: k must be in [1, d_sae = %d], got %ld", d_sae, kl);
        k = (int)kl;
    } else if (kobj != Py_None) {
        return PyErr_Format(PyExc_ValueError, "SAE: k is for architecture \"topk\" (this is \"%s\")", arch);
    }
    if (layer < -1) return PyErr_Format(PyExc_ValueError, "SAE: hook_layer must be >= 0 (or -1: unknown)");
    if (strlen(hook) >= sizeof ((mp_sae *)0)->hook_name) return PyErr_Format(PyExc_ValueError, "SAE: hook_name is too long");
    if (strlen(model) >= sizeof ((mp_sae *)0)->model_name)
        return PyErr_Format(PyExc_ValueError, "SAE: model_name is too long");
    mp_sae *s;
    mp_status st = mp_sae_new(&s, (mp_sae_arch)a, d_in, d_sae, k);
    if (st) return mpy_fail(st);
    s->apply_b_dec_to_input = apply;
    s->normalize = (mp_sae_norm)n;
    strcpy(s->hook_name, hook);
    strcpy(s->model_name, model);
    s->hook_layer = layer;
    return wrap(s);
}

/* SAE.load(path) */
static PyObject *sae_load(PyObject *cls, PyObject *arg) {
    (void)cls;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) return NULL;
    mp_sae *s = NULL;
    mp_status st;
    const char *path = PyBytes_AS_STRING(bytes);
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_load(&s, path);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (st) return mpy_fail(st);
    return wrap(s);
}

static mp_sae *get(mpy_sae *self) { return mpy_sae_get((PyObject *)self); }

/* x as a float32 C array whose last extent is n: the array (new ref) and its rows. */
static PyArrayObject *rows_of(PyObject *obj, int n, const char *what, int *N) {
    PyArrayObject *a = mpy_floats(obj, -1, what);
    if (!a) return NULL;
    int nd = PyArray_NDIM(a);
    if (nd < 1 || PyArray_DIM(a, nd - 1) != n) {
        if (nd < 1) PyErr_Format(PyExc_ValueError, "%s: the last dimension must be %d, got a scalar", what, n);
        else PyErr_Format(PyExc_ValueError, "%s: the last dimension must be %d, got %ld", what, n,
                          (long)PyArray_DIM(a, nd - 1));
        Py_DECREF(a);
        return NULL;
    }
    npy_intp rows = PyArray_SIZE(a) / n;
    if (rows > INT_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: too many rows (%ld)", what, (long)rows);
        Py_DECREF(a);
        return NULL;
    }
    *N = (int)rows;
    return a;
}

/* A new float32 array of x's shape with the last extent n. */
static PyArrayObject *like(PyArrayObject *x, int n) {
    npy_intp dims[NPY_MAXDIMS];
    int nd = PyArray_NDIM(x);
    memcpy(dims, PyArray_DIMS(x), sizeof(npy_intp) * (size_t)nd);
    dims[nd - 1] = n;
    return (PyArrayObject *)PyArray_SimpleNew(nd, dims, NPY_FLOAT32);
}

static PyObject *sae_encode(mpy_sae *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", NULL};
    PyObject *xo;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:encode", kwlist, &xo)) return NULL;
    mp_sae *s = get(self);
    if (!s) return NULL;
    int N;
    PyArrayObject *x = rows_of(xo, s->d_in, "SAE.encode: x", &N);
    if (!x) return NULL;
    PyArrayObject *a = like(x, s->d_sae);
    if (!a) {
        Py_DECREF(x);
        return NULL;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_encode(s, PyArray_DATA(x), N, PyArray_DATA(a), NULL);
    Py_END_ALLOW_THREADS
    self->busy--;
    Py_DECREF(x);
    if (st) {
        Py_DECREF(a);
        return mpy_fail(st);
    }
    return (PyObject *)a;
}

/* decode(feature_acts, x=None): with x (the encoded input), its rows' run-time
 * normalisation is undone, as SAELens's decode after its encode. */
static PyObject *sae_decode(mpy_sae *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"feature_acts", "x", NULL};
    PyObject *ao, *xo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:decode", kwlist, &ao, &xo)) return NULL;
    mp_sae *s = get(self);
    if (!s) return NULL;
    int N, NX = 0;
    PyArrayObject *a = rows_of(ao, s->d_sae, "SAE.decode: feature_acts", &N), *x = NULL, *out = NULL;
    if (!a) return NULL;
    if (xo != Py_None) {
        if (!(x = rows_of(xo, s->d_in, "SAE.decode: x", &NX))) goto done;
        if (NX != N) {
            PyErr_Format(PyExc_ValueError, "SAE.decode: x has %d rows, feature_acts %d", NX, N);
            goto done;
        }
    }
    if (!(out = like(a, s->d_in))) goto done;
    mp_sae_rownorm *rn = NULL;
    float *tmp = NULL;
    if (x) {
        rn = PyMem_RawMalloc((size_t)(N ? N : 1) * sizeof *rn);
        tmp = PyMem_RawMalloc((size_t)(N ? N : 1) * s->d_in * sizeof(float));
        if (!rn || !tmp) {
            PyMem_RawFree(rn);
            PyMem_RawFree(tmp);
            Py_CLEAR(out);
            PyErr_NoMemory();
            goto done;
        }
    }
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    if (x) mp_sae_norm_in(s, PyArray_DATA(x), N, tmp, rn);
    mp_sae_decode(s, PyArray_DATA(a), N, rn, PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    self->busy--;
    PyMem_RawFree(rn);
    PyMem_RawFree(tmp);
done:
    Py_DECREF(a);
    Py_XDECREF(x);
    return (PyObject *)out;
}

/* forward(x, return_feature_acts=False) -> out, or (out, feature_acts) */
static PyObject *sae_forward(mpy_sae *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"x", "return_feature_acts", NULL};
    PyObject *xo;
    int want_acts = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$p:forward", kwlist, &xo, &want_acts)) return NULL;
    mp_sae *s = get(self);
    if (!s) return NULL;
    int N;
    PyArrayObject *x = rows_of(xo, s->d_in, "SAE.forward: x", &N);
    if (!x) return NULL;
    PyArrayObject *out = like(x, s->d_in), *a = want_acts ? like(x, s->d_sae) : NULL;
    if (!out || (want_acts && !a)) {
        Py_DECREF(x);
        Py_XDECREF(out);
        Py_XDECREF(a);
        return NULL;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_forward(s, PyArray_DATA(x), N, PyArray_DATA(out), a ? PyArray_DATA(a) : NULL);
    Py_END_ALLOW_THREADS
    self->busy--;
    Py_DECREF(x);
    if (st) {
        Py_DECREF(out);
        Py_XDECREF(a);
        return mpy_fail(st);
    }
    if (!a) return (PyObject *)out;
    return Py_BuildValue("(NN)", out, a);
}

static PyObject *sae_call(PyObject *self, PyObject *args, PyObject *kw) {
    return sae_forward((mpy_sae *)self, args, kw);
}

static PyObject *sae_save(mpy_sae *self, PyObject *arg) {
    mp_sae *s = get(self);
    if (!s) return NULL;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) return NULL;
    mp_status st;
    const char *dir = PyBytes_AS_STRING(bytes);
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_sae_save(s, dir);
    Py_END_ALLOW_THREADS
    self->busy--;
    Py_DECREF(bytes);
    if (st) return mpy_fail(st);
    Py_RETURN_NONE;
}

static PyObject *sae_close(mpy_sae *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "SAE.close: the SAE is running in another thread");
        return NULL;
    }
    if (self->attached && self->s) {
        PyErr_Format(PyExc_RuntimeError, "SAE.close: the SAE%s%s is attached to a model (m.reset_saes() before "
                     "closing it) or in use by a running call (train_sae, evaluate)", *self->s->hook_name ? " at " : "",
                     self->s->hook_name);
        return NULL;
    }
    release(self);
    Py_RETURN_NONE;
}

static PyObject *sae_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    if (!get((mpy_sae *)self)) return NULL;
    Py_INCREF(self);
    return self;
}

static PyObject *sae_exit(mpy_sae *self, PyObject *args) {
    (void)args;
    return sae_close(self, NULL);
}

/* cfg: SAELens's names, as the Lua binding's sae.cfg (+ reshape_activations) */
static PyObject *sae_cfg(mpy_sae *self, void *closure) {
    (void)closure;
    mp_sae *s = get(self);
    if (!s) return NULL;
    PyObject *d = Py_BuildValue("{s:s, s:i, s:i, s:O, s:s, s:s}", "architecture", mp_sae_arch_name(s->arch), "d_in",
                                s->d_in, "d_sae", s->d_sae, "apply_b_dec_to_input",
                                s->apply_b_dec_to_input ? Py_True : Py_False, "normalize_activations",
                                mp_sae_norm_name(s->normalize), "reshape_activations",
                                s->reshape_hook_z ? "hook_z" : "none");
    if (!d) return NULL;
    PyObject *v;
#define PUT(key, expr) do { if (!(v = (expr)) || PyDict_SetItemString(d, key, v)) { Py_XDECREF(v); Py_DECREF(d); return NULL; } Py_DECREF(v); } while (0)
    if (s->arch == MP_SAE_TOPK) PUT("k", PyLong_FromLong(s->k));
    if (*s->hook_name) PUT("hook_name", PyUnicode_FromString(s->hook_name));
    if (s->hook_layer >= 0) PUT("hook_layer", PyLong_FromLong(s->hook_layer));
    if (*s->model_name) PUT("model_name", PyUnicode_FromString(s->model_name));
#undef PUT
    return d;
}

static void free_block(PyObject *cap) { free(PyCapsule_GetPointer(cap, "mechprobe.SAE.block")); }

/* A weight as a numpy view on the SAE's memory (None for an absent threshold). */
static PyObject *sae_weight(mpy_sae *self, void *closure) {
    mp_sae *s = get(self);
    if (!s) return NULL;
    int want = (int)(intptr_t)closure;
    if (want >= mp_sae_n_weights(s)) Py_RETURN_NONE;
    float *data;
    int nd;
    int64_t shape[2];
    mp_sae_weight(s, want, &data, &nd, shape);
    if (!self->block && !(self->block = PyCapsule_New(s->block, "mechprobe.SAE.block", free_block))) return NULL;
    npy_intp dims[2] = {(npy_intp)shape[0], nd > 1 ? (npy_intp)shape[1] : 0};
    PyObject *a = PyArray_SimpleNewFromData(nd, dims, NPY_FLOAT32, data);
    if (!a) return NULL;
    Py_INCREF(self->block);
    if (PyArray_SetBaseObject((PyArrayObject *)a, self->block)) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static PyObject *sae_closed(mpy_sae *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->s == NULL);
}

static PyObject *sae_repr(mpy_sae *self) {
    const mp_sae *s = self->s;
    if (!s) return PyUnicode_FromString("mechprobe.SAE (closed)");
    char k[32] = "";
    if (s->arch == MP_SAE_TOPK) snprintf(k, sizeof k, ", k=%d", s->k);
    return PyUnicode_FromFormat("mechprobe.SAE(%s%s, d_in=%d, d_sae=%d%s%s)", mp_sae_arch_name(s->arch), k, s->d_in,
                                s->d_sae, *s->hook_name ? ", hook_name=" : "", s->hook_name);
}

static PyMethodDef sae_methods[] = {
    {"load", (PyCFunction)sae_load, METH_O | METH_CLASS,
     "SAE.load(path) -> SAE: an SAELens folder (cfg.json + sae_weights.safetensors) or its .safetensors file"},
    {"encode", (PyCFunction)(void (*)(void))sae_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(x) -> feature activations [..., d_sae] (float32) of x [..., d_in]"},
    {"decode", (PyCFunction)(void (*)(void))sae_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(feature_acts, x=None) -> [..., d_in]; with x, x's run-time normalisation is undone"},
    {"forward", (PyCFunction)(void (*)(void))sae_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(x, return_feature_acts=False) -> reconstruction [..., d_in] (and the feature activations)"},
    {"save", (PyCFunction)sae_save, METH_O, "save(dir): SAELens v6's cfg.json + sae_weights.safetensors (F32), atomically"},
    {"evaluate", (PyCFunction)(void (*)(void))mpy_sae_evaluate, METH_VARARGS | METH_KEYWORDS,
     "evaluate(model=, tokens=, hook=None) or evaluate(data=) -> metrics dict (mpy_sae_train.c)"},
    {"close", (PyCFunction)sae_close, METH_NOARGS, "frees the SAE (weight arrays handed out stay valid)"},
    {"__enter__", sae_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)sae_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef sae_getset[] = {
    {"cfg", (getter)sae_cfg, NULL, "the settings, SAELens's names (a new dict)", NULL},
    {"W_enc", (getter)sae_weight, NULL, "encoder weights [d_in, d_sae] (a view: writes reach the SAE)", (void *)0},
    {"b_enc", (getter)sae_weight, NULL, "encoder bias [d_sae] (a view)", (void *)1},
    {"W_dec", (getter)sae_weight, NULL, "decoder weights [d_sae, d_in] (a view)", (void *)2},
    {"b_dec", (getter)sae_weight, NULL, "decoder bias [d_in] (a view)", (void *)3},
    {"threshold", (getter)sae_weight, NULL, "jumprelu thresholds [d_sae] (a view), None for other architectures",
     (void *)4},
    {"closed", (getter)sae_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject mpy_sae_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mechprobe.SAE",
    .tp_basicsize = sizeof(mpy_sae),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SAE(architecture=\"standard\", d_in=, d_sae=, k=None, apply_b_dec_to_input=True, "
              "normalize_activations=\"none\", hook_name=\"\", hook_layer=-1, model_name=\"\"): a sparse autoencoder "
              "as SAELens defines it (every weight 0); SAE.load(path) reads an SAELens folder",
    .tp_new = sae_new,
    .tp_dealloc = (destructor)sae_dealloc,
    .tp_call = sae_call,
    .tp_repr = (reprfunc)sae_repr,
    .tp_methods = sae_methods,
    .tp_getset = sae_getset,
    .tp_weaklistoffset = offsetof(mpy_sae, weakrefs),
};

int mpy_sae_add(PyObject *mod) {
    if (PyType_Ready(&mpy_sae_type) < 0) return -1;
    return PyModule_AddObjectRef(mod, "SAE", (PyObject *)&mpy_sae_type);
}
