/* mpy_module.c — the Python module mechprobe._core: module init, errors, the
 * Model type (mechprobe.load, mechprobe.Model(config)), its config, the
 * tokenizer (to_tokens, to_string, to_str_tokens), forward, loss and generate.
 * Hook-running calls are in mpy_hooks.c, the rest of the Model's methods in
 * mpy_extra.c; the package mechprobe/__init__.py re-exports all of it. */
#define MPY_IMPORT_ARRAY
#include "mpy.h"

#include "config.h"
#include "formats.h"
#include "model_io.h"
#include "mp_hooks.h"
#include "sae_splice.h"
#include "train.h"

#include <limits.h>
#include <string.h>

PyObject *mpy_error;

/* ---- errors ---- */

PyObject *mpy_fail(mp_status st) {
    PyObject *kind = st == MP_ERR_ARG ? PyExc_ValueError
                   : st == MP_ERR_NOMEM ? PyExc_MemoryError
                   : st == MP_ERR_IO ? PyExc_OSError
                   : mpy_error;
    if (!PyErr_Occurred()) PyErr_SetString(kind, mp_last_error());
    return NULL;
}

mp_model *mpy_model_get(mpy_model *self, const char *fn, int busy_ok) {
    if (!self->m) {
        PyErr_Format(PyExc_ValueError, "%s: the model is closed", fn);
        return NULL;
    }
    if (self->busy && !busy_ok) {
        PyErr_Format(PyExc_RuntimeError, "%s: the model is running a forward pass (called from one of its hooks?)", fn);
        return NULL;
    }
    return self->m;
}

/* ---- arrays ---- */

PyObject *mpy_array_copy(const float *src, int nd, const int64_t *shape) {
    npy_intp dims[8];
    size_t n = 1;
    for (int i = 0; i < nd; i++) {
        dims[i] = (npy_intp)shape[i];
        n *= (size_t)shape[i];
    }
    PyObject *a = PyArray_SimpleNew(nd, dims, NPY_FLOAT32);
    if (a && n) memcpy(PyArray_DATA((PyArrayObject *)a), src, n * sizeof(float));
    return a;
}

PyArrayObject *mpy_floats(PyObject *obj, int nd, const char *what) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED |
                                                                              NPY_ARRAY_FORCECAST);
    if (!a) {
        PyErr_Format(PyExc_TypeError, "%s: expected an array of numbers", what);
        return NULL;
    }
    if (nd >= 0 && PyArray_NDIM(a) != nd) {
        PyErr_Format(PyExc_ValueError, "%s: expected %d dimensions, got %d", what, nd, PyArray_NDIM(a));
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

int mpy_encode(mpy_model *self, const char *text, Py_ssize_t len, int flags, int **ids, int *n) {
    if (!self->tok) {
        PyErr_SetString(PyExc_ValueError, "this model has no tokenizer: load it with mechprobe.load(path, "
                                          "tokenizer=\"tokenizer.bin\"), or tokenizer=\"bytes\" for a byte-level model");
        return -1;
    }
    if (mp_tok_get_kind(self->tok) == MP_TOK_KIND_BYTES) flags &= ~MP_TOK_EOS; /* bytes have no EOS (as m:to_tokens) */
    mp_status st = mp_tok_encode(self->tok, text, (size_t)len, flags, ids, n);
    if (st) {
        mpy_fail(st);
        return -1;
    }
    if (!*ids && !(*ids = malloc(sizeof(int)))) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int wants_bos(const mpy_model *self) {
    return self->tok && mp_tok_add_bos(self->tok) && mp_tok_bos(self->tok) >= 0;
}

PyArrayObject *mpy_tokens(mpy_model *self, PyObject *obj, const char *what) {
    const int V = self->m->cfg.vocab;
    PyArrayObject *a;
    if (PyUnicode_Check(obj)) {
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(obj, &len);
        if (!text) return NULL;
        int *ids, n;
        if (mpy_encode(self, text, len, wants_bos(self) ? MP_TOK_BOS : 0, &ids, &n)) return NULL;
        if (n == 0) {
            free(ids);
            PyErr_Format(PyExc_ValueError, "%s: the text encodes to no tokens", what);
            return NULL;
        }
        npy_intp dims[2] = {1, n};
        a = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
        if (a) memcpy(PyArray_DATA(a), ids, (size_t)n * sizeof(int));
        free(ids);
        return a;
    }
    PyArrayObject *in = (PyArrayObject *)PyArray_FROMANY(obj, NPY_NOTYPE, 0, 0, 0);
    if (!in) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a string, a list of token ids, a list of equal-length lists or an "
                                      "integer array", what);
        return NULL;
    }
    if (PyArray_SIZE(in) > 0 && !PyArray_ISINTEGER(in) && !PyArray_ISBOOL(in)) {
        PyErr_Format(PyExc_TypeError, "%s: token ids must be integers (got an array of %s)", what,
                     PyArray_DESCR(in)->typeobj->tp_name);
        Py_DECREF(in);
        return NULL;
    }
    int nd = PyArray_NDIM(in);
    if (nd != 1 && nd != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected 1 or 2 dimensions ([T] or [B, T]), got %d (a ragged list of "
                                       "lists? pad it with m.to_tokens)", what, nd);
        Py_DECREF(in);
        return NULL;
    }
    npy_intp dims[2] = {nd == 2 ? PyArray_DIM(in, 0) : 1, PyArray_DIM(in, nd - 1)};
    if (dims[0] < 1 || dims[1] < 1) {
        PyErr_Format(PyExc_ValueError, "%s: empty (shape [%zd, %zd])", what, (Py_ssize_t)dims[0], (Py_ssize_t)dims[1]);
        Py_DECREF(in);
        return NULL;
    }
    if (dims[0] > INT_MAX / 2 || dims[1] > INT_MAX / 2 || dims[0] * dims[1] > INT_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: too many tokens", what);
        Py_DECREF(in);
        return NULL;
    }
    PyArrayObject *i64 = (PyArrayObject *)PyArray_FROMANY((PyObject *)in, NPY_INT64, 0, 0, NPY_ARRAY_CARRAY);
    Py_DECREF(in);
    if (!i64) return NULL;
    a = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!a) {
        Py_DECREF(i64);
        return NULL;
    }
    const int64_t *src = PyArray_DATA(i64);
    int *dst = PyArray_DATA(a);
    for (npy_intp i = 0; i < dims[0] * dims[1]; i++) {
        if (src[i] < 0 || src[i] >= V) {
            PyErr_Format(PyExc_ValueError, "%s: token id %lld at position %zd is out of range [0, %d)", what,
                         (long long)src[i], (Py_ssize_t)i, V);
            Py_DECREF(i64);
            Py_DECREF(a);
            return NULL;
        }
        dst[i] = (int)src[i];
    }
    Py_DECREF(i64);
    return a;
}

/* ---- the Model type ---- */

static void model_release(mpy_model *self) {
    mp_model_free(self->m); /* detaches the SAEs (sae_splice.h) */
    self->m = NULL;
    mpy_splice_release(self);
    mp_tok_free(self->tok);
    self->tok = NULL;
}

static void model_dealloc(mpy_model *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    model_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static mpy_model *model_alloc(void) {
    mpy_model *self = (mpy_model *)mpy_model_type.tp_alloc(&mpy_model_type, 0);
    return self;
}

static int attach_tokenizer(mpy_model *self, const char *spec) {
    mp_tok *t;
    mp_status st;
    if (strcmp(spec, "bytes") == 0) {
        if (self->m->cfg.vocab < MP_TOK_BYTES_BOS + 1) {
            PyErr_Format(PyExc_ValueError, "tokenizer \"bytes\" needs a vocabulary of at least 257 (ids 0..255 and "
                                           "BOS 256); this model has %d", self->m->cfg.vocab);
            return -1;
        }
        if ((st = mp_tok_new_bytes(&t))) return mpy_fail(st), -1;
        mp_tok_free(self->tok);
        self->tok = t;
        self->tok_path[0] = '\0';
        snprintf(self->m->tokenizer, sizeof self->m->tokenizer, "bytes");
        return 0;
    }
    if ((st = mp_tok_load_for(&t, spec, self->m->cfg.vocab))) return mpy_fail(st), -1;
    mp_tok_free(self->tok);
    self->tok = t;
    snprintf(self->tok_path, sizeof self->tok_path, "%s", spec);
    self->m->tokenizer[0] = '\0';
    return 0;
}

/* mechprobe.load(path, tokenizer=None, *, copy=False) — every format mp.load
 * reads (detected by content); the tokenizer as mp.load finds it
 * (formats/tok_find.c); copy=True copies a llama2.c file's memory-mapped
 * weights into the model's own memory (writable: set_param, set_weight). */
static PyObject *py_load(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"path", "tokenizer", "copy", NULL};
    PyObject *pathobj;
    const char *tokspec = NULL;
    int copy = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|z$p:load", kwlist, PyUnicode_FSConverter, &pathobj, &tokspec,
                                     &copy))
        return NULL;
    const char *path = PyBytes_AS_STRING(pathobj);
    mpy_model *self = model_alloc();
    if (!self) {
        Py_DECREF(pathobj);
        return NULL;
    }
    mp_model_load_params lp = mp_model_load_params_default();
    mp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_load_with(&self->m, path, &lp);
    if (!st && copy) st = mp_model_make_owned(self->m); /* the file's read-only map -> the model's own memory */
    Py_END_ALLOW_THREADS
    if (st) goto fail;
    if (tokspec) {
        if (attach_tokenizer(self, tokspec)) goto fail_set;
    } else {
        mp_tok_found f;
        st = mp_tok_discover(path, lp.tok_source, self->m->tokenizer, self->m->cfg.vocab, &f);
        if (f.own_failed) {
            if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "%s: tokenizer not loaded: %s", path, f.why)) goto fail_set;
        }
        if (st) goto fail;
        if (f.tok) {
            self->tok = f.tok;
            snprintf(self->tok_path, sizeof self->tok_path, "%s", f.source);
        } else if (f.origin == MP_TOK_FROM_BYTES && attach_tokenizer(self, "bytes")) {
            goto fail_set;
        }
    }
    Py_DECREF(pathobj);
    return (PyObject *)self;
fail:
    mpy_fail(st);
fail_set:
    Py_DECREF(pathobj);
    Py_DECREF(self);
    return NULL;
}

/* A config from a dict keyed as mp.model.new's options (MP_CONFIG_TABLE's Lua
 * keys); the derived defaults as mp_config_derive fills them. */
static int config_from_dict(PyObject *d, mp_config *c, const char *fn) {
    *c = mp_config_default();
    int given[128] = {0};
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!k) {
            PyErr_Format(PyExc_TypeError, "%s: config keys must be strings", fn);
            return -1;
        }
        int i = mp_config_field_find(k);
        if (i < 0 || strcmp(mp_config_fields[i].lua, k) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: unknown config field '%s' (mechprobe.config_fields() lists them)", fn, k);
            return -1;
        }
        const mp_config_field *f = &mp_config_fields[i];
        if (i < 128) given[i] = 1;
        switch (f->type) {
        case MP_CF_INT: {
            long v = PyLong_AsLong(val);
            if (v == -1 && PyErr_Occurred()) goto bad;
            if (!PyLong_Check(val) || v < 0 || v > INT_MAX) {
                PyErr_Format(PyExc_ValueError, "%s: '%s' must be a non-negative integer", fn, k);
                return -1;
            }
            mp_config_set(c, i, (double)v);
            break;
        }
        case MP_CF_FLOAT: {
            double v = PyFloat_AsDouble(val);
            if (v == -1.0 && PyErr_Occurred()) goto bad;
            mp_config_set(c, i, v);
            break;
        }
        case MP_CF_BOOL:
        case MP_CF_NOTBOOL:
            if (!PyBool_Check(val)) {
                PyErr_Format(PyExc_TypeError, "%s: '%s' must be True or False", fn, k);
                return -1;
            }
            mp_config_set(c, i, val == Py_True);
            break;
        case MP_CF_KIND: {
            const char *s = PyUnicode_Check(val) ? PyUnicode_AsUTF8(val) : NULL;
            if (!s || mp_config_set_kind(c, i, s, 1) < 0) {
                PyErr_Format(PyExc_ValueError, "%s: '%s' must be one of the names mechprobe.config_fields() lists for "
                                               "it", fn, k);
                return -1;
            }
            break;
        }
        case MP_CF_FLOATS: {
            PyObject *seq = PySequence_Fast(val, "a list of numbers");
            if (!seq) goto bad;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            double v[MP_ROPE_FREQS_MAX];
            if (n > MP_ROPE_FREQS_MAX) {
                Py_DECREF(seq);
                PyErr_Format(PyExc_ValueError, "%s: '%s' has %zd values (at most %d)", fn, k, n, MP_ROPE_FREQS_MAX);
                return -1;
            }
            for (Py_ssize_t j = 0; j < n; j++) {
                v[j] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, j));
                if (v[j] == -1.0 && PyErr_Occurred()) {
                    Py_DECREF(seq);
                    goto bad;
                }
            }
            Py_DECREF(seq);
            if (mp_config_set_floats(c, i, v, (size_t)n)) return mpy_fail(MP_ERR_ARG), -1;
            break;
        }
        }
        continue;
    bad:
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: config field '%s' has the wrong type", fn, k);
        return -1;
    }
    for (int i = 0; i < mp_config_n_fields && i < 128; i++)
        if (!given[i] && (mp_config_fields[i].flags & MP_CF_REQ)) {
            PyErr_Format(PyExc_ValueError, "%s: '%s' is required", fn, mp_config_fields[i].lua);
            return -1;
        }
    mp_config_derive(c, given[mp_config_field_find("n_kv_head")], given[mp_config_field_find("d_head")],
                     given[mp_config_field_find("d_mlp")]);
    return 0;
}

/* mechprobe.Model(config, seed=0, init_std=0.02, tokenizer=None): a new model
 * at the start of training, as mp.model.new. */
static PyObject *model_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)type;
    static char *kwlist[] = {"config", "seed", "init_std", "tokenizer", NULL};
    PyObject *cfg;
    unsigned long long seed = 0;
    double std = 0.02;
    const char *tokspec = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|Kdz:Model", kwlist, &PyDict_Type, &cfg, &seed, &std, &tokspec))
        return NULL;
    mp_config c;
    if (config_from_dict(cfg, &c, "Model")) return NULL;
    mpy_model *self = model_alloc();
    if (!self) return NULL;
    mp_status st = mp_model_new_init(&self->m, &c, (uint64_t)seed, (float)std);
    if (st) {
        PyErr_Format(PyExc_ValueError, "Model: %s", mp_last_error());
        Py_DECREF(self);
        return NULL;
    }
    if (tokspec && attach_tokenizer(self, tokspec)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *model_close(mpy_model *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "close: the model is running a forward pass (called from one of its hooks?)");
        return NULL;
    }
    model_release(self);
    Py_RETURN_NONE;
}

static PyObject *model_enter(mpy_model *self, PyObject *unused) {
    (void)unused;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *model_exit(mpy_model *self, PyObject *args) {
    (void)args;
    return model_close(self, NULL);
}

static PyObject *model_repr(mpy_model *self) {
    if (!self->m) return PyUnicode_FromString("<mechprobe.Model (closed)>");
    const mp_config *c = &self->m->cfg;
    return PyUnicode_FromFormat("<mechprobe.Model %s: d_model %d, %d layers, %d heads, vocab %d>",
                                self->m->source[0] ? self->m->source : self->m->format, c->d_model, c->n_layer,
                                c->n_head, c->vocab);
}

/* m.config: a dict as m.config in Lua (the fields MP_CONFIG_TABLE shows, then
 * tokenizer, format, source, n_params, memory). */
static PyObject *model_config(mpy_model *self, void *closure) {
    (void)closure;
    mp_model *m = mpy_model_get(self, "config", 1);
    if (!m) return NULL;
    const mp_config *c = &m->cfg;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < mp_config_n_fields; i++) {
        const mp_config_field *f = &mp_config_fields[i];
        if (!mp_config_shown(c, i)) continue;
        double v = mp_config_value(c, i);
        PyObject *o = NULL;
        switch (f->type) {
        case MP_CF_INT: o = PyLong_FromLongLong((long long)v); break;
        case MP_CF_FLOAT: o = PyFloat_FromDouble(v); break;
        case MP_CF_BOOL:
        case MP_CF_NOTBOOL: o = PyBool_FromLong(v != 0.0); break;
        case MP_CF_KIND: o = PyUnicode_FromString(mp_config_kind_name(c, i, 1)); break;
        case MP_CF_FLOATS: {
            int n;
            const float *x = mp_config_floats(c, i, &n);
            o = PyList_New(n);
            for (int k = 0; o && k < n; k++) PyList_SET_ITEM(o, k, PyFloat_FromDouble(x[k]));
            break;
        }
        }
        if (!o || PyDict_SetItemString(d, f->lua, o)) {
            Py_XDECREF(o);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(o);
    }
    PyObject *extra[][2] = {
        {PyUnicode_FromString("n_rope_freqs"), PyLong_FromLong(c->n_rope_freqs)},
        {PyUnicode_FromString("format"), PyUnicode_FromString(m->format)},
        {PyUnicode_FromString("source"), PyUnicode_FromString(m->source)},
        {PyUnicode_FromString("n_params"), PyLong_FromSize_t(mp_config_n_params(c))},
        {PyUnicode_FromString("memory"), PyLong_FromSize_t(mp_model_param_bytes(m))},
        {m->tokenizer[0] ? PyUnicode_FromString("tokenizer") : NULL,
         m->tokenizer[0] ? PyUnicode_FromString(m->tokenizer) : NULL},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        if (extra[i][0] && extra[i][1]) ok = ok && PyDict_SetItem(d, extra[i][0], extra[i][1]) == 0;
        Py_XDECREF(extra[i][0]);
        Py_XDECREF(extra[i][1]);
    }
    if (!ok) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *model_tokenizer(mpy_model *self, void *closure) {
    (void)closure;
    if (!self->tok) Py_RETURN_NONE;
    if (mp_tok_get_kind(self->tok) == MP_TOK_KIND_BYTES) return PyUnicode_FromString("bytes");
    return PyUnicode_FromString(self->tok_path);
}

/* m.set_tokenizer("bytes" | path) */
static PyObject *model_set_tokenizer(mpy_model *self, PyObject *arg) {
    if (!mpy_model_get(self, "set_tokenizer", 0)) return NULL;
    PyObject *b;
    if (!PyUnicode_FSConverter(arg, &b)) return NULL;
    int r = attach_tokenizer(self, PyBytes_AS_STRING(b));
    Py_DECREF(b);
    if (r) return NULL;
    Py_RETURN_NONE;
}

/* m.to_tokens(text | [texts], prepend_bos=None, eos=False, padding_side="right")
 * -> int32 [1, T]; for a list of texts, (tokens [B, T], attention_mask [B, T])
 * padded as m:to_tokens pads them (runtime/ragged.c mp_pad_batch). An entry
 * may be a list (or 1-D array) of ids instead: taken as it is, padded alike. */
static PyObject *model_to_tokens(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"text", "prepend_bos", "eos", "padding_side", NULL};
    PyObject *text, *pbos = Py_None;
    int eos = 0;
    const char *side = "right";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Ops:to_tokens", kwlist, &text, &pbos, &eos, &side)) return NULL;
    if (!mpy_model_get(self, "to_tokens", 1)) return NULL;
    if (strcmp(side, "right") && strcmp(side, "left"))
        return PyErr_Format(PyExc_ValueError, "to_tokens: padding_side must be \"right\" or \"left\", got \"%s\"", side);
    int bos = pbos == Py_None ? wants_bos(self) : PyObject_IsTrue(pbos);
    int flags = (bos ? MP_TOK_BOS : 0) | (eos ? MP_TOK_EOS : 0);
    if (PyUnicode_Check(text)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(text, &len);
        int *ids, n;
        if (!s || mpy_encode(self, s, len, flags, &ids, &n)) return NULL;
        npy_intp dims[2] = {1, n};
        PyObject *a = PyArray_SimpleNew(2, dims, NPY_INT32);
        if (a && n) memcpy(PyArray_DATA((PyArrayObject *)a), ids, (size_t)n * sizeof(int));
        free(ids);
        return a;
    }
    PyObject *seq = PySequence_Fast(text, "to_tokens: expected a string or a list of strings");
    if (!seq) return NULL;
    Py_ssize_t B = PySequence_Fast_GET_SIZE(seq);
    if (B <= 0 || B > INT_MAX / 2) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "to_tokens: the list of texts is empty");
    }
    int **rows = calloc((size_t)B, sizeof *rows), *lens = calloc((size_t)B, sizeof *lens), *flat = NULL;
    PyObject *res = NULL;
    if (!rows || !lens) {
        PyErr_NoMemory();
        goto out;
    }
    size_t total = 0;
    for (Py_ssize_t b = 0; b < B; b++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, b);
        Py_ssize_t len;
        if (!PyUnicode_Check(it) && !PyBytes_Check(it) && PySequence_Check(it)) {
            /* a row of ids, taken as it is (no BOS / EOS added), padded as texts are (m:to_tokens in Lua) */
            PyObject *ids = PySequence_Fast(it, "to_tokens: a row of ids");
            if (!ids) goto out;
            Py_ssize_t k = PySequence_Fast_GET_SIZE(ids);
            if (k <= 0 || k > INT_MAX || !(rows[b] = malloc((size_t)k * sizeof(int)))) {
                Py_DECREF(ids);
                if (k > 0 && k <= INT_MAX) PyErr_NoMemory();
                else PyErr_Format(PyExc_ValueError, "to_tokens: texts[%zd] is an empty list of ids: a row needs at "
                                                    "least one real token", b);
                goto out;
            }
            int vocab = self->m->cfg.vocab;
            for (Py_ssize_t i = 0; i < k; i++) {
                PyObject *ix = PyNumber_Index(PySequence_Fast_GET_ITEM(ids, i));
                long v = ix ? PyLong_AsLong(ix) : -1;
                Py_XDECREF(ix);
                if (!ix || (v == -1 && PyErr_Occurred()) || v < 0 || v >= vocab) {
                    PyErr_Clear();
                    Py_DECREF(ids);
                    PyErr_Format(PyExc_ValueError, "to_tokens: texts[%zd][%zd] must be a token id in 0..%d", b, i,
                                 vocab - 1);
                    goto out;
                }
                rows[b][i] = (int)v;
            }
            Py_DECREF(ids);
            lens[b] = (int)k;
            total += (size_t)k;
            continue;
        }
        const char *s = PyUnicode_Check(it) ? PyUnicode_AsUTF8AndSize(it, &len) : NULL;
        if (!s) {
            PyErr_Format(PyExc_TypeError, "to_tokens: texts[%zd] is a %s, not a string or a list of token ids", b,
                         Py_TYPE(it)->tp_name);
            goto out;
        }
        if (mpy_encode(self, s, len, flags, &rows[b], &lens[b])) goto out;
        if (lens[b] == 0) {
            PyErr_Format(PyExc_ValueError, "to_tokens: texts[%zd] encodes to no tokens (an empty text without BOS): a "
                                           "row needs at least one real token", b);
            goto out;
        }
        total += (size_t)lens[b];
    }
    if (!(flat = malloc(total * sizeof(int)))) {
        PyErr_NoMemory();
        goto out;
    }
    total = 0;
    for (Py_ssize_t b = 0; b < B; b++) {
        memcpy(flat + total, rows[b], (size_t)lens[b] * sizeof(int));
        total += (size_t)lens[b];
    }
    int T = mp_pad_width(lens, (int)B);
    npy_intp dims[2] = {B, T};
    PyObject *tok = PyArray_SimpleNew(2, dims, NPY_INT32), *mask = PyArray_SimpleNew(2, dims, NPY_INT32);
    if (tok && mask) {
        mp_pad_batch(flat, lens, (int)B, T, mp_tok_pad_id(self->tok), side[0] == 'l',
                     PyArray_DATA((PyArrayObject *)tok), PyArray_DATA((PyArrayObject *)mask));
        res = PyTuple_Pack(2, tok, mask);
    }
    Py_XDECREF(tok);
    Py_XDECREF(mask);
out:
    if (rows)
        for (Py_ssize_t b = 0; b < B; b++) free(rows[b]);
    free(rows);
    free(lens);
    free(flat);
    Py_DECREF(seq);
    return res;
}

/* m.to_string(ids) -> str (ids: a list or a 1-d array; [1, T] too) */
static PyObject *model_to_string(mpy_model *self, PyObject *arg) {
    if (!mpy_model_get(self, "to_string", 1)) return NULL;
    if (!self->tok) return PyErr_Format(PyExc_ValueError, "to_string: this model has no tokenizer");
    PyArrayObject *t = mpy_tokens(self, arg, "to_string: ids");
    if (!t) return NULL;
    if (PyArray_DIM(t, 0) != 1) {
        Py_DECREF(t);
        return PyErr_Format(PyExc_ValueError, "to_string: one row of ids expected (got %zd)", (Py_ssize_t)PyArray_DIM(t, 0));
    }
    char *s;
    size_t len;
    mp_status st = mp_tok_decode(self->tok, PyArray_DATA(t), (int)PyArray_DIM(t, 1), &s, &len);
    Py_DECREF(t);
    if (st) return mpy_fail(st);
    PyObject *r = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
    free(s);
    return r;
}

/* m.to_str_tokens(text | ids) -> list of str, one per token (the bytes each adds) */
static PyObject *model_to_str_tokens(mpy_model *self, PyObject *arg) {
    if (!mpy_model_get(self, "to_str_tokens", 1)) return NULL;
    if (!self->tok) return PyErr_Format(PyExc_ValueError, "to_str_tokens: this model has no tokenizer");
    PyArrayObject *t = mpy_tokens(self, arg, "to_str_tokens");
    if (!t) return NULL;
    if (PyArray_DIM(t, 0) != 1) {
        Py_DECREF(t);
        return PyErr_Format(PyExc_ValueError, "to_str_tokens: one row expected");
    }
    int n = (int)PyArray_DIM(t, 1);
    const int *ids = PyArray_DATA(t);
    PyObject *l = PyList_New(n);
    char buf[512];
    for (int i = 0; l && i < n; i++) {
        int k = mp_tok_token_bytes(self->tok, i ? ids[i - 1] : -1, ids[i], buf, sizeof buf);
        if (k < 0) k = 0;
        if (k >= (int)sizeof buf) k = (int)sizeof buf - 1;
        PyObject *s = PyUnicode_DecodeUTF8(buf, k, "replace");
        if (!s) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, s);
    }
    Py_DECREF(t);
    return l;
}

static int logits_mode(const char *s, mp_logits_mode *mode) {
    if (!strcmp(s, "all")) *mode = MP_LOGITS_ALL;
    else if (!strcmp(s, "last")) *mode = MP_LOGITS_LAST;
    else if (!strcmp(s, "none")) *mode = MP_LOGITS_NONE;
    else {
        PyErr_Format(PyExc_ValueError, "logits: \"all\", \"last\" or \"none\" expected, got \"%s\"", s);
        return -1;
    }
    return 0;
}

/* m.forward(tokens, logits="all", attention_mask=None) -> float32 [B, T, V]
 * ("last": [B, V]; "none": None). The GIL is released while it runs. */
static PyObject *model_forward(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"tokens", "logits", "attention_mask", NULL};
    PyObject *tokobj, *maskobj = Py_None;
    const char *lm = "all";
    static const char *const hooked[] = {"fwd_hooks", "bwd_hooks", "loss", "targets"};
    for (int i = 0; kw && i < 4; i++) /* hooks or a loss: mpy_hooks.c's run */
        if (PyDict_GetItemString(kw, hooked[i])) return mpy_run_hooked(self, args, kw);
    if (self->m && mp_model_n_saes(self->m)) return mpy_run_hooked(self, args, kw); /* the SAEs' splice */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sO:forward", kwlist, &tokobj, &lm, &maskobj)) return NULL;
    mp_model *m = mpy_model_get(self, "forward", 0);
    if (!m) return NULL;
    mp_forward_params fp = mp_forward_params_default();
    if (logits_mode(lm, &fp.logits)) return NULL;
    PyArrayObject *tok = mpy_tokens(self, tokobj, "forward: tokens"), *mask = NULL;
    if (!tok) return NULL;
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    if (maskobj != Py_None) {
        mask = mpy_tokens(self, maskobj, "forward: attention_mask");
        if (!mask) goto fail;
        if (PyArray_DIM(mask, 0) != B || PyArray_DIM(mask, 1) != T) {
            PyErr_Format(PyExc_ValueError, "forward: attention_mask must have the tokens' shape [%d, %d]", B, T);
            goto fail;
        }
        fp.attn_mask = PyArray_DATA(mask);
    }
    PyObject *out = Py_None;
    Py_INCREF(out);
    if (fp.logits != MP_LOGITS_NONE) {
        Py_DECREF(out);
        npy_intp dims[3] = {B, fp.logits == MP_LOGITS_ALL ? T : m->cfg.vocab, m->cfg.vocab};
        out = PyArray_SimpleNew(fp.logits == MP_LOGITS_ALL ? 3 : 2, dims, NPY_FLOAT32);
        if (!out) goto fail;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_forward(m, PyArray_DATA(tok), B, T, &fp,
                          out == Py_None ? NULL : PyArray_DATA((PyArrayObject *)out));
    Py_END_ALLOW_THREADS
    self->busy--;
    Py_DECREF(tok);
    Py_XDECREF(mask);
    if (st) {
        Py_DECREF(out);
        return mpy_fail(st);
    }
    return out;
fail:
    Py_DECREF(tok);
    Py_XDECREF(mask);
    return NULL;
}

/* m.loss(tokens, targets=None) -> mean cross-entropy (as m:loss). Without
 * targets, TransformerLens's next-token loss: inputs tokens[:, :-1], targets
 * tokens[:, 1:]. */
static PyObject *model_loss(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"tokens", "targets", "fwd_hooks", NULL};
    PyObject *tokobj, *tgtobj = Py_None, *fwd = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$O:loss", kwlist, &tokobj, &tgtobj, &fwd)) return NULL;
    mp_model *m = mpy_model_get(self, "loss", 0);
    if (!m) return NULL;
    PyArrayObject *tok = mpy_tokens(self, tokobj, "loss: tokens"), *tgt = NULL;
    if (!tok) return NULL;
    mpy_pyhooks *fh = mpy_pyhooks_new(self, fwd, "fwd_hooks");
    if (!fh) {
        Py_DECREF(tok);
        return NULL;
    }
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    int *in = PyArray_DATA(tok), *tg, *shifted_in = NULL, *shifted_tg = NULL;
    if (tgtobj != Py_None) {
        if (!(tgt = mpy_tokens(self, tgtobj, "loss: targets"))) goto fail;
        if (PyArray_DIM(tgt, 0) != B || PyArray_DIM(tgt, 1) != T) {
            PyErr_Format(PyExc_ValueError, "loss: targets must have the tokens' shape [%d, %d]", B, T);
            goto fail;
        }
        tg = PyArray_DATA(tgt);
    } else {
        if (T < 2) {
            PyErr_SetString(PyExc_ValueError, "loss: next-token loss needs at least 2 tokens per row (or pass targets)");
            goto fail;
        }
        shifted_in = malloc((size_t)B * (T - 1) * sizeof(int));
        shifted_tg = malloc((size_t)B * (T - 1) * sizeof(int));
        if (!shifted_in || !shifted_tg) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int b = 0; b < B; b++) {
            memcpy(shifted_in + (size_t)b * (T - 1), in + (size_t)b * T, (size_t)(T - 1) * sizeof(int));
            memcpy(shifted_tg + (size_t)b * (T - 1), in + (size_t)b * T + 1, (size_t)(T - 1) * sizeof(int));
        }
        in = shifted_in;
        tg = shifted_tg;
        T--;
    }
    float loss;
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_loss(m, in, tg, B, T, mpy_pyhooks_registry(fh), &loss);
    Py_END_ALLOW_THREADS
    self->busy--;
    free(shifted_in);
    free(shifted_tg);
    Py_DECREF(tok);
    Py_XDECREF(tgt);
    if (st) {
        mpy_pyhooks_fail(fh, st);
        mpy_pyhooks_free(fh);
        return NULL;
    }
    mpy_pyhooks_free(fh);
    return PyFloat_FromDouble(loss);
fail:
    mpy_pyhooks_free(fh);
    free(shifted_in);
    free(shifted_tg);
    Py_DECREF(tok);
    Py_XDECREF(tgt);
    return NULL;
}

/* The rows of a batched prompt: a list of texts, a list of token lists (any
 * lengths; more than one), tokens [B, T] with B > 1 or an attention_mask
 * (each row's real tokens, in order), or the (tokens, attention_mask) pair
 * m.to_tokens returns for a list. Returns 1 with *ids (the rows
 * concatenated) and *lens [*B] malloc'ed, 0 for one prompt (nothing
 * allocated), -1 with an exception set. */
static int gen_batch_rows(mpy_model *self, PyObject *prompt, PyObject *maskobj, int **ids, int **lens, int *B) {
    *ids = *lens = NULL;
    if (PyTuple_Check(prompt) && PyTuple_GET_SIZE(prompt) == 2 && PyArray_Check(PyTuple_GET_ITEM(prompt, 0)) &&
        PyArray_Check(PyTuple_GET_ITEM(prompt, 1)) && maskobj == Py_None) { /* m.to_tokens(list) */
        maskobj = PyTuple_GET_ITEM(prompt, 1);
        prompt = PyTuple_GET_ITEM(prompt, 0);
    }
    const int list = PyList_Check(prompt) || PyTuple_Check(prompt);
    const Py_ssize_t n = list ? PySequence_Size(prompt) : 0;
    PyObject *first = list && n > 0 ? PySequence_Fast_GET_ITEM(prompt, 0) : NULL;
    const int texts = first && PyUnicode_Check(first);
    const int rows = first && !texts && maskobj == Py_None && n > 1 &&
                     (PyList_Check(first) || PyTuple_Check(first) || PyArray_Check(first));
    if (texts || rows) { /* one row at a time through mpy_tokens (a text: [1, n], BOS as to_tokens) */
        size_t total = 0, cap = 256;
        *lens = malloc((size_t)n * sizeof(int));
        *ids = malloc(cap * sizeof(int));
        if (!*lens || !*ids) goto nomem;
        for (Py_ssize_t b = 0; b < n; b++) {
            PyObject *it = PySequence_Fast_GET_ITEM(prompt, b);
            if (texts != (PyUnicode_Check(it) != 0)) {
                PyErr_Format(PyExc_TypeError, "generate: prompt[%zd] is a %s (a list of %s expected)", b,
                             Py_TYPE(it)->tp_name, texts ? "strings" : "token lists");
                goto fail;
            }
            PyArrayObject *r = mpy_tokens(self, it, "generate: prompt");
            if (!r) goto fail;
            if (PyArray_DIM(r, 0) != 1) {
                Py_DECREF(r);
                PyErr_Format(PyExc_ValueError, "generate: prompt[%zd] is not one row of tokens", b);
                goto fail;
            }
            const int k = (int)PyArray_DIM(r, 1);
            if (total + (size_t)k > cap) {
                while (total + (size_t)k > cap) cap *= 2;
                int *grown = realloc(*ids, cap * sizeof(int));
                if (!grown) {
                    Py_DECREF(r);
                    goto nomem;
                }
                *ids = grown;
            }
            memcpy(*ids + total, PyArray_DATA(r), (size_t)k * sizeof(int));
            total += (size_t)k;
            (*lens)[b] = k;
            Py_DECREF(r);
        }
        *B = (int)n;
        return 1;
    }
    if (maskobj == Py_None && (!PyArray_Check(prompt) || PyArray_NDIM((PyArrayObject *)prompt) < 2 ||
                               PyArray_DIM((PyArrayObject *)prompt, 0) == 1) &&
        !(list && n > 1 && first && (PyList_Check(first) || PyTuple_Check(first))))
        return 0; /* a text, a flat list, [1, T]: one prompt */
    PyArrayObject *tok = mpy_tokens(self, prompt, "generate: prompt"), *mask = NULL;
    if (!tok) return -1;
    const int Bt = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    if (maskobj == Py_None && Bt == 1) {
        Py_DECREF(tok);
        return 0;
    }
    if (maskobj != Py_None) {
        if (!(mask = mpy_tokens(self, maskobj, "generate: attention_mask"))) {
            Py_DECREF(tok);
            return -1;
        }
        if (PyArray_DIM(mask, 0) != Bt || PyArray_DIM(mask, 1) != T) {
            PyErr_Format(PyExc_ValueError, "generate: attention_mask must have the tokens' shape [%d, %d]", Bt, T);
            Py_DECREF(tok);
            Py_DECREF(mask);
            return -1;
        }
    }
    *lens = malloc((size_t)Bt * sizeof(int));
    *ids = malloc(((size_t)Bt * T > 0 ? (size_t)Bt * T : 1) * sizeof(int));
    if (*lens && *ids) {
        const int *t = PyArray_DATA(tok), *mk = mask ? PyArray_DATA(mask) : NULL;
        int off = 0;
        for (int b = 0; b < Bt; b++) {
            (*lens)[b] = 0;
            for (int i = 0; i < T; i++) {
                const size_t k = (size_t)b * T + i;
                if (mk && mk[k] != 0 && mk[k] != 1) {
                    PyErr_Format(PyExc_ValueError, "generate: attention_mask[%d][%d] = %d: expected 1 (a real "
                                 "token) or 0 (a pad)", b, i, mk[k]);
                    Py_DECREF(tok);
                    Py_XDECREF(mask);
                    goto fail;
                }
                if (!mk || mk[k]) (*ids)[off++] = t[k], (*lens)[b]++;
            }
        }
    }
    Py_DECREF(tok);
    Py_XDECREF(mask);
    if (!*lens || !*ids) goto nomem;
    *B = Bt;
    return 1;
nomem:
    PyErr_NoMemory();
fail:
    free(*ids);
    free(*lens);
    *ids = *lens = NULL;
    return -1;
}

/* m.generate(prompts, ...) for a batch: mp_model_generate_batch (GIL
 * released) -> (list of texts or None, list of int32 arrays). seedobj: an
 * int for every row, or a sequence of B. */
static PyObject *generate_batch(mpy_model *self, mp_model *m, const int *ids, const int *lens, int B, int max_new,
                                mp_sampler_params sp, PyObject *seedobj, int stop, PyObject *fwd) {
    const int P = mp_pad_width(lens, B);
    if (max_new > INT_MAX / 2 - P) max_new = INT_MAX / 2 - P;
    const int W = P + max_new;
    uint64_t *seeds = malloc((size_t)B * sizeof(uint64_t));
    int *out = malloc((size_t)B * W * sizeof(int)), *n_out = malloc((size_t)B * sizeof(int));
    PyObject *res = NULL, *texts = NULL, *toks = NULL;
    mpy_pyhooks *fh = NULL;
    if (!seeds || !out || !n_out) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyIndex_Check(seedobj)) { /* an int (or numpy integer) for every row */
        unsigned long long v = PyLong_AsUnsignedLongLongMask(seedobj);
        if (PyErr_Occurred()) goto done;
        for (int b = 0; b < B; b++) seeds[b] = v; /* each row as its prompt alone with this seed */
    } else {
        PyObject *fast = PySequence_Fast(seedobj, "generate: seed must be an int or a list of one int per prompt");
        if (!fast) goto done;
        if (PySequence_Fast_GET_SIZE(fast) != B) {
            PyErr_Format(PyExc_ValueError, "generate: seed: %zd seeds for %d prompts", PySequence_Fast_GET_SIZE(fast),
                         B);
            Py_DECREF(fast);
            goto done;
        }
        for (int b = 0; b < B; b++) {
            seeds[b] = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(fast, b));
            if (PyErr_Occurred()) {
                Py_DECREF(fast);
                goto done;
            }
        }
        Py_DECREF(fast);
    }
    if (!(fh = mpy_pyhooks_new(self, fwd, "fwd_hooks"))) goto done;
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_generate_batch(m, ids, lens, B, max_new, &sp, seeds, mpy_pyhooks_registry(fh), stop, out, n_out);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (st) {
        mpy_pyhooks_fail(fh, st);
        goto done;
    }
    if (!(toks = PyList_New(B))) goto done;
    if (self->tok && !(texts = PyList_New(B))) goto done;
    for (int b = 0; b < B; b++) {
        npy_intp dims[1] = {n_out[b]};
        PyObject *a = PyArray_SimpleNew(1, dims, NPY_INT32);
        if (!a) goto done;
        memcpy(PyArray_DATA((PyArrayObject *)a), out + (size_t)b * W, (size_t)n_out[b] * sizeof(int));
        PyList_SET_ITEM(toks, b, a);
        if (texts) {
            char *s;
            size_t len;
            if ((st = mp_tok_decode(self->tok, out + (size_t)b * W, n_out[b], &s, &len))) {
                mpy_fail(st);
                goto done;
            }
            PyObject *u = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
            free(s);
            if (!u) goto done;
            PyList_SET_ITEM(texts, b, u);
        }
    }
    res = PyTuple_Pack(2, texts ? texts : Py_None, toks);
done:
    if (fh) mpy_pyhooks_free(fh);
    Py_XDECREF(texts);
    Py_XDECREF(toks);
    free(seeds);
    free(out);
    free(n_out);
    return res;
}

/* m.generate(prompt, max_new_tokens=64, temperature=1.0, top_p=0.9, seed=1234,
 * stop_at_eos=True, *, fwd_hooks=None, attention_mask=None) -> (text or None,
 * tokens int32 [n]) as m:generate; a batch (a list of texts or of token
 * lists, tokens [B, T] with attention_mask, or to_tokens' (tokens, mask)) ->
 * (list of texts or None, list of int32 arrays), seed an int or one per row. */
static PyObject *model_generate(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"prompt", "max_new_tokens", "temperature", "top_p", "seed", "stop_at_eos", "fwd_hooks",
                             "attention_mask", NULL};
    PyObject *prompt, *fwd = Py_None, *maskobj = Py_None, *seedobj = NULL;
    int max_new = 64, stop_eos = 1;
    double temp = 1.0, top_p = 0.9;
    unsigned long long seed = 1234;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iddOp$OO:generate", kwlist, &prompt, &max_new, &temp, &top_p,
                                     &seedobj, &stop_eos, &fwd, &maskobj))
        return NULL;
    mp_model *m = mpy_model_get(self, "generate", 0);
    if (!m) return NULL;
    if (max_new < 0) return PyErr_Format(PyExc_ValueError, "generate: max_new_tokens must be >= 0 (got %d)", max_new);
    int *bids, *blens, Bb = 0;
    const int batch = gen_batch_rows(self, prompt, maskobj, &bids, &blens, &Bb);
    if (batch < 0) return NULL;
    if (batch) {
        mp_sampler_params bsp = {(float)temp, (float)top_p, 1234};
        int bstop = stop_eos && self->tok ? mp_tok_eos(self->tok) : -1;
        PyObject *seed_default = seedobj ? NULL : PyLong_FromLong(1234);
        PyObject *r = seedobj || seed_default ? generate_batch(self, m, bids, blens, Bb, max_new, bsp,
                                                               seedobj ? seedobj : seed_default, bstop, fwd)
                                              : NULL;
        Py_XDECREF(seed_default);
        free(bids);
        free(blens);
        return r;
    }
    if (seedobj) { /* as the "K" format it had: an int, taken modulo 2^64 */
        seed = PyLong_AsUnsignedLongLongMask(seedobj);
        if (PyErr_Occurred()) return NULL;
    }
    PyArrayObject *tok = mpy_tokens(self, prompt, "generate: prompt");
    if (!tok) return NULL; /* one row: gen_batch_rows took every batch */
    int n = (int)PyArray_DIM(tok, 1);
    if (max_new > INT_MAX - n) max_new = INT_MAX - n;
    int *out = malloc(((size_t)n + (size_t)max_new) * sizeof(int)), n_out = 0;
    if (!out) {
        Py_DECREF(tok);
        return PyErr_NoMemory();
    }
    mp_sampler_params sp = {(float)temp, (float)top_p, (uint64_t)seed};
    int stop = stop_eos && self->tok ? mp_tok_eos(self->tok) : -1;
    mpy_pyhooks *fh = mpy_pyhooks_new(self, fwd, "fwd_hooks");
    if (!fh) {
        free(out);
        Py_DECREF(tok);
        return NULL;
    }
    mp_status st;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_generate(m, PyArray_DATA(tok), n, max_new, &sp, mpy_pyhooks_registry(fh), stop, NULL, NULL, out,
                           &n_out);
    Py_END_ALLOW_THREADS
    self->busy--;
    Py_DECREF(tok);
    if (st) {
        free(out);
        mpy_pyhooks_fail(fh, st);
        mpy_pyhooks_free(fh);
        return NULL;
    }
    mpy_pyhooks_free(fh);
    npy_intp dims[1] = {n_out};
    PyObject *ids = PyArray_SimpleNew(1, dims, NPY_INT32), *text = Py_None;
    if (ids) memcpy(PyArray_DATA((PyArrayObject *)ids), out, (size_t)n_out * sizeof(int));
    Py_INCREF(Py_None);
    if (ids && self->tok) {
        char *s;
        size_t len;
        if ((st = mp_tok_decode(self->tok, out, n_out, &s, &len))) {
            free(out);
            Py_DECREF(ids);
            return mpy_fail(st);
        }
        Py_DECREF(text);
        text = PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace");
        free(s);
    }
    free(out);
    if (!ids || !text) {
        Py_XDECREF(ids);
        Py_XDECREF(text);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, text, ids);
    Py_DECREF(text);
    Py_DECREF(ids);
    return r;
}

/* m.hook_names(pattern="*") -> the hook points of this model in firing order */
static void names_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)id;
    (void)layer;
    PyObject *l = u, *s = PyUnicode_FromString(name);
    if (s) PyList_Append(l, s);
    Py_XDECREF(s);
}

static PyObject *model_hook_names(mpy_model *self, PyObject *args) {
    const char *glob = "*";
    if (!PyArg_ParseTuple(args, "|s:hook_names", &glob)) return NULL;
    mp_model *m = mpy_model_get(self, "hook_names", 1);
    if (!m) return NULL;
    char bad[256] = "";
    mp_hooks *hs = mp_hooks_new_model(m); /* the attached SAEs' sub-points too, each after its point */
    if (!hs) return PyErr_NoMemory();
    mp_hooks_select(hs, glob, NULL, NULL, bad, sizeof bad);
    if (bad[0]) {
        mp_hooks_free(hs);
        return PyErr_Format(PyExc_ValueError, "hook_names: unknown hook name '%s'", bad);
    }
    PyObject *l = PyList_New(0);
    if (l) mp_hooks_select(hs, glob, names_visit, l, NULL, 0);
    mp_hooks_free(hs);
    if (PyErr_Occurred()) Py_CLEAR(l);
    return l;
}

static PyMethodDef core_methods[] = {
    {"close", (PyCFunction)model_close, METH_NOARGS, "Frees the model's memory; later calls raise ValueError."},
    {"__enter__", (PyCFunction)model_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)model_exit, METH_VARARGS, NULL},
    {"set_tokenizer", (PyCFunction)model_set_tokenizer, METH_O, "set_tokenizer('bytes' | path)"},
    {"to_tokens", (PyCFunction)(void (*)(void))model_to_tokens, METH_VARARGS | METH_KEYWORDS,
     "to_tokens(text | [texts], prepend_bos=None, eos=False, padding_side='right') -> int32 [1, T], or "
     "(tokens [B, T], attention_mask [B, T]) for a list"},
    {"to_string", (PyCFunction)model_to_string, METH_O, "to_string(ids) -> str"},
    {"to_str_tokens", (PyCFunction)model_to_str_tokens, METH_O, "to_str_tokens(text | ids) -> [str]"},
    {"forward", (PyCFunction)(void (*)(void))model_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(tokens, logits='all', attention_mask=None, fwd_hooks=None) -> float32 logits [B, T, V] ('last': [B, "
     "V]; 'none': None); with loss= (and targets=): (logits, loss value), as run_with_hooks"},
    {"loss", (PyCFunction)(void (*)(void))model_loss, METH_VARARGS | METH_KEYWORDS,
     "loss(tokens, targets=None, *, fwd_hooks=None) -> mean cross-entropy (no targets: next-token loss over tokens)"},
    {"generate", (PyCFunction)(void (*)(void))model_generate, METH_VARARGS | METH_KEYWORDS,
     "generate(prompt, max_new_tokens=64, temperature=1.0, top_p=0.9, seed=1234, stop_at_eos=True, *, "
     "fwd_hooks=None, attention_mask=None) -> (text, ids); a batch (list of texts or token lists, tokens [B, T] with "
     "attention_mask, or to_tokens' pair; seed: an int or one per row) -> ([texts], [ids])"},
    {"hook_names", (PyCFunction)model_hook_names, METH_VARARGS, "hook_names(pattern='*') -> [str] in firing order"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef core_getset[] = {
    {"config", (getter)model_config, NULL, "the config as a dict (mp.model.new's keys)", NULL},
    {"tokenizer", (getter)model_tokenizer, NULL, "the tokenizer's source, 'bytes', or None", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyObject *model_call(PyObject *self, PyObject *args, PyObject *kw) {
    return model_forward((mpy_model *)self, args, kw);
}

PyTypeObject mpy_model_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mechprobe.Model",
    .tp_basicsize = sizeof(mpy_model),
    .tp_dealloc = (destructor)model_dealloc,
    .tp_repr = (reprfunc)model_repr,
    .tp_call = model_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Model(config, seed=0, init_std=0.02, tokenizer=None): a transformer at the start of training; "
              "mechprobe.load(path) loads one.",
    .tp_weaklistoffset = offsetof(mpy_model, weakrefs),
    .tp_new = model_new,
};

/* mechprobe._core.nearest_names(key, names, k=3) -> [str]: the k names nearest to key (mp_hook_nearest), for
 * the cache's "no such hook" message */
static PyObject *py_nearest_names(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"key", "names", "k", NULL};
    const char *key;
    PyObject *seq_in;
    int k = 3;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|i", kwlist, &key, &seq_in, &k)) return NULL;
    PyObject *seq = PySequence_Fast(seq_in, "nearest_names: names must be a sequence of str");
    if (!seq) return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **names = PyMem_Calloc(n ? (size_t)n : 1, sizeof *names);
    int *near = PyMem_Calloc(k > 0 ? (size_t)k : 1, sizeof *near);
    PyObject *out = NULL;
    if (!names || !near) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(names[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i)))) goto done;
    const int got = k > 0 ? mp_hook_nearest(key, names, (int)n, k, near) : 0;
    if (!(out = PyList_New(got))) goto done;
    for (int i = 0; i < got; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(seq, near[i]);
        Py_INCREF(s);
        PyList_SET_ITEM(out, i, s);
    }
done:
    PyMem_Free(names);
    PyMem_Free(near);
    Py_DECREF(seq);
    return out;
}

/* mechprobe.config_fields() -> [{key, type, names?}] (MP_CONFIG_TABLE) */
static PyObject *py_config_fields(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    static const char *const types[] = {"int", "float", "bool", "notbool", "kind", "floats"};
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < mp_config_n_fields; i++) {
        const mp_config_field *f = &mp_config_fields[i];
        PyObject *d = Py_BuildValue("{s:s,s:s}", "key", f->lua, "type", types[f->type]);
        if (d && f->type == MP_CF_KIND) {
            PyObject *names = PyList_New(f->n_names);
            for (int k = 0; names && k < f->n_names; k++) PyList_SET_ITEM(names, k, PyUnicode_FromString(f->names[k]));
            if (names) PyDict_SetItemString(d, "names", names);
            Py_XDECREF(names);
        }
        if (!d || PyList_Append(l, d)) Py_CLEAR(l);
        Py_XDECREF(d);
    }
    return l;
}

/* Joins the method/getset tables of the files into one (static storage). */
static PyMethodDef *join_methods(PyMethodDef *const *parts, int n) {
    size_t total = 1;
    for (int i = 0; i < n; i++)
        for (PyMethodDef *d = parts[i]; d->ml_name; d++) total++;
    PyMethodDef *all = PyMem_Calloc(total, sizeof *all);
    if (!all) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (PyMethodDef *d = parts[i]; d->ml_name; d++) all[k++] = *d;
    return all;
}

static PyGetSetDef *join_getset(PyGetSetDef *const *parts, int n) {
    size_t total = 1;
    for (int i = 0; i < n; i++)
        for (PyGetSetDef *d = parts[i]; d->name; d++) total++;
    PyGetSetDef *all = PyMem_Calloc(total, sizeof *all);
    if (!all) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (PyGetSetDef *d = parts[i]; d->name; d++) all[k++] = *d;
    return all;
}

static PyMethodDef module_functions[] = {
    {"load", (PyCFunction)(void (*)(void))py_load, METH_VARARGS | METH_KEYWORDS,
     "load(path, tokenizer=None) -> Model: a llama2.c file, GGUF, Hugging Face folder or mechprobe checkpoint"},
    {"config_fields", py_config_fields, METH_NOARGS, "the config fields Model(config) takes"},
    {"nearest_names", (PyCFunction)(void (*)(void))py_nearest_names, METH_VARARGS | METH_KEYWORDS,
     "nearest_names(key, names, k=3) -> [str]: the k names nearest to key by edit distance (ties by name)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "mechprobe._core",
                                        "mechprobe's C core (use the package mechprobe)", -1, NULL, NULL, NULL, NULL,
                                        NULL};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    mp_init();
    PyMethodDef *mparts[] = {core_methods, mpy_hooks_methods, mpy_extra_methods, mpy_sae_splice_methods};
    PyGetSetDef *gparts[] = {core_getset, mpy_extra_getset, mpy_sae_splice_getset};
    mpy_model_type.tp_methods = join_methods(mparts, 4);
    mpy_model_type.tp_getset = join_getset(gparts, 3);
    if (!mpy_model_type.tp_methods || !mpy_model_type.tp_getset) return PyErr_NoMemory();
    if (PyType_Ready(&mpy_model_type) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module_def);
    if (!mod) return NULL;
    PyMethodDef *fparts[] = {module_functions, mpy_extra_functions, mpy_sae_train_functions};
    for (int i = 0; i < 3; i++)
        if (PyModule_AddFunctions(mod, fparts[i])) goto fail;
    mpy_error = PyErr_NewExceptionWithDoc("mechprobe.Error", "an error from mechprobe's C core (the message says "
                                          "which file or argument, and what is wrong)", PyExc_RuntimeError, NULL);
    if (!mpy_error || PyModule_AddObjectRef(mod, "Error", mpy_error)) goto fail;
    if (PyModule_AddObjectRef(mod, "Model", (PyObject *)&mpy_model_type)) goto fail;
    if (mpy_sae_add(mod)) goto fail; /* mpy_sae.c: mechprobe.SAE */
    return mod;
fail:
    Py_DECREF(mod);
    return NULL;
}
