/* mpy_hooks.c — the Model's calls that run with hook points: run_with_cache
 * (activations into numpy arrays) and run_with_hooks (Python functions at hook
 * points, TransformerLens's fn(act, hook) contract), their backward
 * counterparts (loss=, incl_bwd=, bwd_hooks=: runtime/grad.h, as lua/lgrad.c),
 * attribution patching, and the C arithmetic behind the ActivationCache's
 * helpers (runtime/act_cache.h, as lua/lcache.c), over the C core's hook
 * registry (hooks/mp_hooks.h).
 *
 * Arrays: the cache's arrays are allocated by numpy and the core's reader
 * callbacks copy each hook point's view straight into them (no copy after the
 * pass), so they belong to Python and outlive the model. A Python hook gets
 * its own numpy array (copy-in / copy-out around the call): the activation
 * lives in the forward's scratch memory, which is reused as soon as the hook
 * returns, so the function may keep `act` (or any view of it) safely.
 *
 * Threads: the GIL is released while the core runs; a Python hook re-acquires
 * it for its call (PyGILState_Ensure). self->busy keeps the model's other
 * calls (and close) out meanwhile, hooks included. */
#include "mpy.h"
#include "mpy_extra.h"

#include "act_cache.h"
#include "grad.h"
#include "mp_hooks.h"
#include "sae_splice.h"

#include <limits.h>
#include <string.h>

/* ---- Python hook functions ---- */

/* One call's state shared by its Python hooks: the first exception a hook
 * raised (re-raised after the core returns MP_ERR_HOOK). */
typedef struct {
    PyObject *etype, *evalue, *etb;
    PyObject *hook_point; /* mechprobe.hooks.HookPoint */
} run_errs;

typedef struct {
    PyObject *fn; /* borrowed: the list it came from is kept alive by the call */
    run_errs *errs;
} pyhook;

struct mpy_pyhooks {
    mp_hooks *hs;   /* made by mp_hooks_new_model / _bwd: the attached SAEs' splice in it */
    int base;       /* the splice's own registrations (before the list's) */
    pyhook *h; /* one per list entry (stable addresses: the registry points at them) */
    int n;
    PyObject *list; /* the entries (a new reference): keeps the functions alive */
    run_errs errs;
};

static PyObject *lazy_attr(const char *module, const char *name) {
    PyObject *m = PyImport_ImportModule(module);
    if (!m) return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

static void errs_clear(run_errs *e) {
    Py_CLEAR(e->etype);
    Py_CLEAR(e->evalue);
    Py_CLEAR(e->etb);
    Py_CLEAR(e->hook_point);
}

/* Shape as "(a, b, c)" into buf. */
static const char *shape_str(char *buf, size_t n, int nd, const npy_intp *s) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%zd", i ? ", " : "", (Py_ssize_t)s[i]);
    if (o < n) snprintf(buf + o, n - o, "%s)", nd == 1 ? "," : "");
    return buf;
}

/* The call itself (GIL held): act in, a replacement or in-place edits out. */
static int hook_call(pyhook *h, const mp_hook_info *info, float *data) {
    npy_intp dims[4];
    for (int i = 0; i < info->ndim; i++) dims[i] = (npy_intp)info->shape[i];
    PyArrayObject *act = (PyArrayObject *)PyArray_SimpleNew(info->ndim, dims, NPY_FLOAT32);
    if (!act) return -1;
    memcpy(PyArray_DATA(act), data, info->numel * sizeof(float));
    PyObject *full = PyTuple_New(info->ndim);
    for (int i = 0; full && i < info->ndim; i++) PyTuple_SET_ITEM(full, i, PyLong_FromLongLong(info->full[i]));
    PyObject *hp = full ? PyObject_CallFunction(h->errs->hook_point, "siiLiO", info->name, info->layer, info->axis,
                                                (long long)info->offset, info->pos0, full)
                        : NULL;
    Py_XDECREF(full);
    if (!hp) {
        Py_DECREF(act);
        return -1;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(h->fn, (PyObject *)act, hp, NULL);
    Py_DECREF(hp);
    int rc = 0;
    if (!r) rc = -1;
    else if (r == Py_None || r == (PyObject *)act) {
        memcpy(data, PyArray_DATA(act), info->numel * sizeof(float)); /* in-place edits (if any) */
    } else {
        PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(r, NPY_FLOAT32, 0, 0, NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST);
        if (!a) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "hook at %s returned a %s; a float array of the activation's shape %s or "
                         "None expected", info->name, Py_TYPE(r)->tp_name,
                         shape_str((char[96]){0}, 96, info->ndim, dims));
            rc = -1;
        } else {
            int same = PyArray_NDIM(a) == info->ndim;
            for (int i = 0; same && i < info->ndim; i++) same = PyArray_DIM(a, i) == dims[i];
            if (!same) {
                char got[96], want[96];
                PyErr_Format(PyExc_ValueError, "hook at %s returned an array of shape %s for an activation of shape %s",
                             info->name, shape_str(got, sizeof got, PyArray_NDIM(a), PyArray_DIMS(a)),
                             shape_str(want, sizeof want, info->ndim, dims));
                rc = -1;
            } else {
                memcpy(data, PyArray_DATA(a), info->numel * sizeof(float));
            }
            Py_DECREF(a);
        }
        Py_DECREF(r);
        r = NULL;
    }
    Py_XDECREF(r);
    Py_DECREF(act);
    return rc;
}

/* The core's callback: runs the Python function with the GIL. An exception is
 * kept (the first one) and aborts the pass with MP_ERR_HOOK. */
static int py_hook_cb(void *user, const mp_hook_info *info, float *data) {
    pyhook *h = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = hook_call(h, info, data);
    if (rc) {
        if (!h->errs->etype) {
            PyErr_Fetch(&h->errs->etype, &h->errs->evalue, &h->errs->etb);
            PyErr_NormalizeException(&h->errs->etype, &h->errs->evalue, &h->errs->etb);
            if (h->errs->etb && h->errs->evalue) PyException_SetTraceback(h->errs->evalue, h->errs->etb);
        } else {
            PyErr_Clear();
        }
        mp_error(MP_ERR_HOOK, "a Python hook raised an exception");
    }
    PyGILState_Release(g);
    return rc ? 1 : 0;
}

void mpy_pyhooks_free(mpy_pyhooks *p) {
    if (!p) return;
    mp_hooks_free(p->hs);
    PyMem_Free(p->h);
    Py_XDECREF(p->list);
    errs_clear(&p->errs);
    PyMem_Free(p);
}

const mp_hooks *mpy_pyhooks_registry(const mpy_pyhooks *p) {
    return p && mp_hooks_count(p->hs) ? p->hs : NULL;
}

PyObject *mpy_pyhooks_fail(mpy_pyhooks *p, mp_status st) {
    if (p && p->errs.etype) {
        PyErr_Restore(p->errs.etype, p->errs.evalue, p->errs.etb);
        p->errs.etype = p->errs.evalue = p->errs.etb = NULL;
        return NULL;
    }
    return mpy_fail(st);
}

typedef struct {
    PyObject *filter;
    PyObject *names; /* list of the names it picked */
} filter_ctx;

static void filter_visit(void *u, mp_hook_id id, int layer, const char *name) {
    (void)id;
    (void)layer;
    filter_ctx *f = u;
    if (!f->names) return; /* an earlier error */
    PyObject *s = PyUnicode_FromString(name);
    PyObject *r = s ? PyObject_CallOneArg(f->filter, s) : NULL;
    int yes = r ? PyObject_IsTrue(r) : -1;
    if (yes > 0 && PyList_Append(f->names, s)) yes = -1;
    if (yes < 0) Py_CLEAR(f->names);
    Py_XDECREF(r);
    Py_XDECREF(s);
}

/* The names (in firing order) of the model's hook points for which filter(name)
 * is true, as a list; over "*" as the Lua binding's names filter. */
static PyObject *filter_names(const mp_hooks *hs, PyObject *filter) {
    filter_ctx f = {filter, PyList_New(0)};
    if (!f.names) return NULL;
    mp_hooks_select(hs, "*", filter_visit, &f, NULL, 0); /* the attached SAEs' sub-points too */
    return f.names;
}

/* A comma-separated glob list from a str, a list/tuple of str, or a callable
 * filter (its picks); a new str. *filtered: 1 for a filter. */
static PyObject *globs_from(const mp_hooks *hs, PyObject *obj, const char *what, int *filtered) {
    *filtered = 0;
    if (PyUnicode_Check(obj)) {
        Py_INCREF(obj);
        return obj;
    }
    PyObject *list;
    if (PyCallable_Check(obj)) {
        *filtered = 1;
        list = filter_names(hs, obj);
        if (!list) return NULL;
    } else if (PyList_Check(obj) || PyTuple_Check(obj)) {
        list = PySequence_List(obj);
        if (!list) return NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
            if (!PyUnicode_Check(PyList_GET_ITEM(list, i))) {
                PyErr_Format(PyExc_TypeError, "%s: a list of hook names must hold strings; item %zd is a %s", what, i,
                             Py_TYPE(PyList_GET_ITEM(list, i))->tp_name);
                Py_DECREF(list);
                return NULL;
            }
    } else {
        return PyErr_Format(PyExc_TypeError, "%s: a hook name or glob (str, comma-separated globs allowed), a list "
                            "of them or a function name -> bool expected, got %s", what, Py_TYPE(obj)->tp_name);
    }
    PyObject *sep = PyUnicode_FromString(",");
    PyObject *s = sep ? PyUnicode_Join(sep, list) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(list);
    return s;
}

/* Checks that every glob of `globs` names a hook point of the model (or of
 * the registry hs: an attached SAE's sub-points). */
static int check_globs(const mp_hooks *hs, const mp_config *cfg, const char *globs, const char *what) {
    char bad[256] = "";
    if (globs[0]) mp_hooks_select(hs, globs, NULL, NULL, bad, sizeof bad);
    if (bad[0]) {
        char why[192];
        PyErr_Format(PyExc_ValueError, "%s: unknown hook name '%s'%s (m.hook_names() lists this model's)", what, bad,
                     mp_hook_absent_why(cfg, bad, why, sizeof why));
        return -1;
    }
    return 0;
}

/* fwd NULL: a forward registry (mp_hooks_new_model: the attached SAEs spliced
 * in); else the backward registry for the forward registry fwd. */
static mpy_pyhooks *pyhooks_new(mpy_model *self, PyObject *list, const char *what, const mp_hooks *fwd) {
    const mp_config *cfg = &self->m->cfg;
    mpy_pyhooks *p = PyMem_Calloc(1, sizeof *p);
    if (!p) return (mpy_pyhooks *)PyErr_NoMemory();
    if (!(p->hs = fwd ? mp_hooks_new_bwd(self->m, fwd) : mp_hooks_new_model(self->m))) {
        PyMem_Free(p);
        return (mpy_pyhooks *)PyErr_NoMemory();
    }
    p->base = mp_hooks_count(p->hs);
    if (!list || list == Py_None) return p;
    if (!(p->list = PySequence_List(list))) {
        PyErr_Format(PyExc_TypeError, "%s: a list of (name, function) pairs expected, got %s", what,
                     Py_TYPE(list)->tp_name);
        goto fail;
    }
    p->n = (int)PyList_GET_SIZE(p->list);
    if (p->n && !(p->h = PyMem_Calloc((size_t)p->n, sizeof *p->h))) {
        PyErr_NoMemory();
        goto fail;
    }
    if (p->n && !(p->errs.hook_point = lazy_attr("mechprobe.hooks", "HookPoint"))) goto fail;
    for (int i = 0; i < p->n; i++) {
        PyObject *e = PyList_GET_ITEM(p->list, i), *name, *fn;
        char where[64];
        snprintf(where, sizeof where, "%s[%d]", what, i);
        if (!PyTuple_Check(e) && !PyList_Check(e)) {
            PyErr_Format(PyExc_TypeError, "%s: a (name, function) pair expected, got %s", where, Py_TYPE(e)->tp_name);
            goto fail;
        }
        if (PySequence_Size(e) != 2) {
            PyErr_Format(PyExc_TypeError, "%s: a (name, function) pair expected (%zd items)", where,
                         PySequence_Size(e));
            goto fail;
        }
        name = PySequence_Fast_GET_ITEM(e, 0); /* a tuple or a list */
        fn = PySequence_Fast_GET_ITEM(e, 1);
        if (mpy_is_intervention(fn)) { /* a C intervention (mpy_extra.c): runs without the GIL */
            int filtered;
            PyObject *g = globs_from(p->hs, name, where, &filtered);
            if (!g) goto fail;
            const char *globs = PyUnicode_AsUTF8(g);
            int bad = !globs || (!filtered && check_globs(p->hs, cfg, globs, where)) ||
                      (globs[0] && mpy_intervention_add(p->hs, globs, fn, 0, where));
            Py_DECREF(g);
            if (bad) goto fail;
            continue;
        }
        if (!PyCallable_Check(fn)) {
            PyErr_Format(PyExc_TypeError, "%s: the hook must be a function fn(act, hook) or an intervention "
                                          "(mechprobe.ablate.zero(), ...), got %s", where,
                         Py_TYPE(fn)->tp_name);
            goto fail;
        }
        p->h[i].fn = fn;
        p->h[i].errs = &p->errs;
        int filtered;
        PyObject *g = globs_from(p->hs, name, where, &filtered);
        if (!g) goto fail;
        const char *globs = PyUnicode_AsUTF8(g);
        if (!globs || (!filtered && check_globs(p->hs, cfg, globs, where))) {
            Py_DECREF(g);
            goto fail;
        }
        mp_status st = globs[0] ? mp_hooks_add(p->hs, globs, py_hook_cb, &p->h[i]) : MP_OK;
        Py_DECREF(g);
        if (st) {
            PyErr_Format(st == MP_ERR_ARG ? PyExc_ValueError : mpy_error, "%s: %s", where, mp_last_error());
            goto fail;
        }
    }
    return p;
fail:
    mpy_pyhooks_free(p);
    return NULL;
}

mpy_pyhooks *mpy_pyhooks_new(mpy_model *self, PyObject *list, const char *what) {
    return pyhooks_new(self, list, what, NULL);
}

mpy_pyhooks *mpy_pyhooks_new_bwd(mpy_model *self, PyObject *list, const char *what, const mp_hooks *fwd) {
    return pyhooks_new(self, list, what, fwd);
}

int mpy_pyhooks_own(const mpy_pyhooks *p) { return p ? mp_hooks_count(p->hs) - p->base : 0; }

/* ---- captures into numpy arrays ---- */

static int copy_cb(void *user, const mp_hook_info *info, float *data) {
    mp_hook_view_copy(info, user, data, 1);
    return 0;
}

typedef struct {
    PyObject *dict;      /* receives name + suffix -> array */
    const char *suffix;
    mp_hooks *hs;
    const mp_config *cfg;
    int B, T;
    int need_grad, named; /* skip points without a gradient; named: that is an error */
    char nograd[96];
    int failed;           /* a Python error is set */
    mp_status st;
} cap_ctx;

static void cap_visit(void *u, mp_hook_id id, int layer, const char *name) {
    cap_ctx *c = u;
    if (c->failed || c->st || c->nograd[0]) return;
    if (c->need_grad && !mp_hooks_has_grad(c->hs, id)) {
        if (c->named) snprintf(c->nograd, sizeof c->nograd, "%s", name);
        return;
    }
    int64_t s[4];
    npy_intp dims[4];
    int nd = mp_hooks_shape(c->hs, id, c->B, c->T, 0, s); /* an SAE's sub-points too */
    for (int i = 0; i < nd; i++) dims[i] = (npy_intp)s[i];
    PyObject *a = PyArray_ZEROS(nd, dims, NPY_FLOAT32, 0);
    char key[128];
    snprintf(key, sizeof key, "%s%s", name, c->suffix);
    if (!a || PyDict_SetItemString(c->dict, key, a)) {
        Py_XDECREF(a);
        c->failed = 1;
        return;
    }
    c->st = mp_hooks_add_reader_at(c->hs, id, layer, copy_cb, PyArray_DATA((PyArrayObject *)a));
    Py_DECREF(a); /* the dict keeps it */
}

static int no_grad(mp_hook_id id) { return !mp_hook_has_grad(id); }

/* Registers copies of the points `globs` selects into dict[name + suffix]. */
static int capture(PyObject *dict, const char *globs, const char *suffix, mp_hooks *hs, const mp_config *cfg, int B,
                   int T, int need_grad, int filtered, const char *fn) {
    cap_ctx c = {dict, suffix, hs, cfg, B, T, need_grad, !filtered && !strpbrk(globs, "*?["), "", 0, MP_OK};
    if (globs[0]) mp_hooks_select(hs, globs, cap_visit, &c, NULL, 0);
    if (c.failed) return -1;
    if (c.nograd[0]) {
        char none[256];
        PyErr_Format(PyExc_ValueError, "%s: no gradient at hook %s yet (%s have none)", fn, c.nograd,
                     mp_hook_suffixes(no_grad, none, sizeof none));
        return -1;
    }
    if (c.st) return mpy_fail(c.st), -1;
    return 0;
}

/* ---- metrics (runtime/grad.h) ---- */

enum { LOSS_NONE, LOSS_CE, LOSS_LOGIT_DIFF, LOSS_FN };
#define LOSS_FORMS "\"ce\" (with targets=), {\"logit_diff\": (correct, wrong)} or a function logits -> (value, dlogits)"

typedef struct {
    int kind;
    PyObject *fn;            /* LOSS_FN (borrowed) */
    PyArrayObject *targets;  /* LOSS_CE: int32 [B, T] */
    int *ids;                /* LOSS_LOGIT_DIFF: correct [B] then wrong [B] (PyMem) */
    const int *mask;         /* [B, T] a padded batch's attention mask (the caller's array), or NULL */
} loss_spec;

static void loss_free(loss_spec *ls) {
    Py_CLEAR(ls->targets);
    PyMem_Free(ls->ids);
    ls->ids = NULL;
}

/* targets: ids in [-1, V) of the tokens' shape ([T] for one row). */
static PyArrayObject *targets_arg(PyObject *obj, int B, int T, int V, const char *fn) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, NPY_INT64, 1, 2, NPY_ARRAY_CARRAY);
    if (!a) {
        PyErr_Clear();
        return (PyArrayObject *)PyErr_Format(PyExc_TypeError, "%s: targets: token ids [B, T] (-1 where ignored) "
                                             "expected", fn);
    }
    int nd = PyArray_NDIM(a);
    npy_intp b = nd == 2 ? PyArray_DIM(a, 0) : 1, t = PyArray_DIM(a, nd - 1);
    if (b != B || t != T) {
        Py_DECREF(a);
        return (PyArrayObject *)PyErr_Format(PyExc_ValueError, "%s: targets: shape [%zd, %zd] differs from the "
                                             "tokens' [%d, %d]", fn, (Py_ssize_t)b, (Py_ssize_t)t, B, T);
    }
    npy_intp dims[2] = {B, T};
    PyArrayObject *o = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    const int64_t *src = PyArray_DATA(a);
    for (npy_intp i = 0; o && i < (npy_intp)B * T; i++) {
        if (src[i] < -1 || src[i] >= V) {
            PyErr_Format(PyExc_ValueError, "%s: targets: id %lld at position %zd is out of range [-1, %d)", fn,
                         (long long)src[i], (Py_ssize_t)i, V);
            Py_CLEAR(o);
            break;
        }
        ((int *)PyArray_DATA(o))[i] = (int)src[i];
    }
    Py_DECREF(a);
    return o;
}

/* logit_diff's correct / wrong: one id for every row or a sequence of B. */
static int ids_arg(PyObject *obj, int *out, int B, int V, const char *fn, const char *what) {
    if (PyIndex_Check(obj)) { /* an int or a numpy integer */
        Py_ssize_t v = PyNumber_AsSsize_t(obj, PyExc_OverflowError);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 0 || v >= V) {
            PyErr_Format(PyExc_ValueError, "%s: loss logit_diff: %s id %zd is out of range [0, %d)", fn, what, v, V);
            return -1;
        }
        for (int b = 0; b < B; b++) out[b] = (int)v;
        return 0;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, NPY_INT64, 1, 1, NPY_ARRAY_CARRAY);
    if (!a) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: loss logit_diff: %s must be a token id or a list of %d ids", fn, what, B);
        return -1;
    }
    int rc = 0;
    if (PyArray_DIM(a, 0) != B) {
        PyErr_Format(PyExc_ValueError, "%s: loss logit_diff: '%s' has %zd ids for a batch of %d rows", fn, what,
                     (Py_ssize_t)PyArray_DIM(a, 0), B);
        rc = -1;
    }
    for (int b = 0; !rc && b < B; b++) {
        int64_t v = ((int64_t *)PyArray_DATA(a))[b];
        if (v < 0 || v >= V) {
            PyErr_Format(PyExc_ValueError, "%s: loss logit_diff: %s[%d] = %lld is out of range [0, %d)", fn, what, b,
                         (long long)v, V);
            rc = -1;
        }
        out[b] = (int)v;
    }
    Py_DECREF(a);
    return rc;
}

/* Reads a loss spec (obj: None -> LOSS_NONE; then targets must be None too). */
static int loss_arg(PyObject *obj, PyObject *targets, int B, int T, int V, const char *fn, const char *key,
                    loss_spec *ls) {
    memset(ls, 0, sizeof *ls);
    if (obj == Py_None) {
        if (targets != Py_None) {
            PyErr_Format(PyExc_ValueError, "%s: targets= is for %s=\"ce\", but no %s is given", fn, key, key);
            return -1;
        }
        return 0;
    }
    if (PyUnicode_Check(obj)) {
        if (PyUnicode_CompareWithASCIIString(obj, "ce") != 0) {
            PyErr_Format(PyExc_ValueError, "%s: unknown %s %R (%s)", fn, key, obj, LOSS_FORMS);
            return -1;
        }
        if (targets == Py_None) {
            PyErr_Format(PyExc_ValueError, "%s: %s=\"ce\" needs targets= (token ids [B, T], -1 where ignored, as "
                         "m.loss)", fn, key);
            return -1;
        }
        ls->kind = LOSS_CE;
        return (ls->targets = targets_arg(targets, B, T, V, fn)) ? 0 : -1;
    }
    if (targets != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: targets= is for %s=\"ce\"", fn, key);
        return -1;
    }
    if (PyDict_Check(obj)) {
        PyObject *spec = PyDict_GetItemString(obj, "logit_diff");
        if (!spec || PyDict_Size(obj) != 1) {
            PyErr_Format(PyExc_ValueError, "%s: unknown %s %R (%s)", fn, key, obj, LOSS_FORMS);
            return -1;
        }
        if (!PySequence_Check(spec) || PySequence_Size(spec) != 2) {
            PyErr_Format(PyExc_ValueError, "%s: loss logit_diff needs (correct, wrong): token ids, or lists of one "
                         "per row", fn);
            return -1;
        }
        ls->kind = LOSS_LOGIT_DIFF;
        if (!(ls->ids = PyMem_Malloc(2 * (size_t)B * sizeof(int)))) return PyErr_NoMemory(), -1;
        for (int k = 0; k < 2; k++) {
            PyObject *it = PySequence_GetItem(spec, k);
            int rc = it ? ids_arg(it, ls->ids + k * B, B, V, fn, k ? "wrong" : "correct") : -1;
            Py_XDECREF(it);
            if (rc) return -1;
        }
        return 0;
    }
    if (PyCallable_Check(obj)) {
        ls->kind = LOSS_FN;
        ls->fn = obj;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s: %s must be %s; got %s", fn, key, LOSS_FORMS, Py_TYPE(obj)->tp_name);
    return -1;
}

/* The metric on logits [B,T,V] (a numpy array: a Python metric receives it)
 * and, with dl, its gradient. 0 or -1 with an exception. */
static int loss_eval(const loss_spec *ls, PyArrayObject *logits, float *dl, float *rows, const char *fn,
                     double *value) {
    const int B = (int)PyArray_DIM(logits, 0), T = (int)PyArray_DIM(logits, 1), V = (int)PyArray_DIM(logits, 2);
    const float *lt = PyArray_DATA(logits);
    switch (ls->kind) {
    case LOSS_CE: {
        mp_status st = mp_grad_ce(lt, PyArray_DATA(ls->targets), B * T, V, dl, rows, value);
        if (st == MP_ERR_ARG) return PyErr_Format(PyExc_ValueError, "%s: %s", fn, mp_last_error()), -1;
        return st ? (mpy_fail(st), -1) : 0;
    }
    case LOSS_LOGIT_DIFF:
        mp_grad_logit_diff_masked(lt, B, T, V, ls->ids, ls->ids + B, ls->mask, dl, value);
        return 0;
    default: {
        PyObject *r = PyObject_CallOneArg(ls->fn, (PyObject *)logits);
        if (!r) return -1;
        int rc = -1;
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
            PyErr_Format(PyExc_TypeError, "%s: the loss function must return (value, dlogits): a number and d value / "
                         "d logits, an array [%d, %d, %d]; it returned %s", fn, B, T, V, Py_TYPE(r)->tp_name);
            goto out;
        }
        *value = PyFloat_AsDouble(PyTuple_GET_ITEM(r, 0));
        if (*value == -1.0 && PyErr_Occurred()) goto out;
        if (dl) {
            PyArrayObject *g = mpy_floats(PyTuple_GET_ITEM(r, 1), -1, "the loss function's dlogits");
            if (!g) goto out;
            if (PyArray_NDIM(g) != 3 || PyArray_DIM(g, 0) != B || PyArray_DIM(g, 1) != T || PyArray_DIM(g, 2) != V) {
                char got[96];
                PyErr_Format(PyExc_ValueError, "%s: the loss function's dlogits has shape %s; the logits' is (%d, %d, "
                             "%d)", fn, shape_str(got, sizeof got, PyArray_NDIM(g), PyArray_DIMS(g)), B, T, V);
                Py_DECREF(g);
                goto out;
            }
            memcpy(dl, PyArray_DATA(g), (size_t)B * T * V * sizeof(float));
            Py_DECREF(g);
        }
        rc = 0;
    out:
        Py_DECREF(r);
        return rc;
    }
    }
}

/* A padded batch (mask [B, T], kept alive by the caller): the mask into ls,
 * and "ce"'s targets -1 at pads and before one, as m.loss counts them
 * (mp_mask_targets, into a new array). 0, or -1 with an exception. */
static int loss_set_mask(loss_spec *ls, PyArrayObject *mask, int B, int T) {
    if (!mask) return 0;
    ls->mask = PyArray_DATA(mask);
    if (ls->kind != LOSS_CE) return 0;
    npy_intp dims[2] = {B, T};
    PyArrayObject *t = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!t) return -1;
    mp_mask_targets(ls->mask, PyArray_DATA(ls->targets), B, T, PyArray_DATA(t));
    Py_SETREF(ls->targets, t);
    return 0;
}

/* A training-mode forward (fwd hooks fh), logits into `logits` [B,T,V], the
 * metric into *value; then with bh non-NULL the backward firing bh. The GIL is
 * released while the core runs. 0, or -1 with an exception. */
static int fwd_bwd(mpy_model *self, const int *tokens, int B, int T, mpy_pyhooks *fh, const mp_hooks *fextra,
                   mpy_pyhooks *bh, const mp_hooks *bextra, const loss_spec *ls, PyArrayObject *logits,
                   const char *fn, double *value) {
    const mp_model *m = self->m;
    if (m->q) {
        PyErr_Format(PyExc_ValueError, "%s: gradients need float32 weights; %s keeps them quantized (dequantize it "
                     "first)", fn, m->source[0] ? m->source : "this model");
        return -1;
    }
    mp_acts A;
    memset(&A, 0, sizeof A);
    mp_status st = mp_acts_init(&A, &m->cfg, B, T);
    if (st) return mpy_fail(st), -1;
    const size_t n = (size_t)B * T;
    float *dl = PyMem_Malloc(n * (size_t)m->cfg.vocab * sizeof(float)), *rows = PyMem_Malloc(n * sizeof(float));
    int rc = -1;
    if (!dl || !rows) {
        PyErr_NoMemory();
        goto out;
    }
    mp_forward_params fp = mp_forward_params_default();
    fp.hooks = fextra;
    fp.acts = &A;
    fp.attn_mask = ls->mask; /* a padded batch (ragged.c) */
    Py_BEGIN_ALLOW_THREADS
    st = mp_model_forward(m, tokens, B, T, &fp, NULL);
    Py_END_ALLOW_THREADS
    if (st) {
        mpy_pyhooks_fail(fh, st);
        goto out;
    }
    memcpy(PyArray_DATA(logits), A.logits, n * (size_t)m->cfg.vocab * sizeof(float));
    if (loss_eval(ls, logits, bextra ? dl : NULL, rows, fn, value)) goto out;
    if (bextra) {
        Py_BEGIN_ALLOW_THREADS
        st = mp_model_backward_acts_masked(m, &A, dl, bextra, ls->mask);
        Py_END_ALLOW_THREADS
        if (st) {
            mpy_pyhooks_fail(bh, st);
            goto out;
        }
    }
    rc = 0;
out:
    mp_acts_free(&A);
    PyMem_Free(dl);
    PyMem_Free(rows);
    return rc;
}

/* ---- run_with_cache / run_with_hooks / forward with hooks ---- */

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

/* A bwd_hooks entry naming (without a wildcard) a point that has no gradient
 * is an error (as lua/lgrad.c); a glob never fires there. */
static int check_bwd_names(const mp_hooks *hs, PyObject *list, const char *fn) {
    if (!list || list == Py_None) return 0;
    PyObject *l = PySequence_List(list);
    if (!l) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++) {
        PyObject *e = PyList_GET_ITEM(l, i), *name = NULL;
        if ((PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2)) name = PyTuple_GET_ITEM(e, 0);
        else if (PyList_Check(e) && PyList_GET_SIZE(e) == 2) name = PyList_GET_ITEM(e, 0);
        const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        char one[128];
        while (s && *s) {
            size_t k = strcspn(s, ",");
            snprintf(one, sizeof one, "%.*s", (int)(k < sizeof one - 1 ? k : sizeof one - 1), s);
            mp_hook_id id;
            int layer;
            if (!strpbrk(one, "*?[") && mp_hooks_parse(hs, one, &id, &layer) == 0 &&
                !mp_hooks_has_grad(hs, id)) {
                PyErr_Format(PyExc_ValueError, "%s: bwd_hooks[%zd]: no gradient at hook %s yet", fn, i, one);
                Py_DECREF(l);
                return -1;
            }
            s += k + (s[k] == ',');
        }
    }
    Py_DECREF(l);
    return 0;
}

enum { RUN_FORWARD, RUN_HOOKS, RUN_CACHE };

static PyObject *run_common(mpy_model *self, PyObject *args, PyObject *kw, int kind, const char *fn) {
    static char *kwlist[] = {"tokens", "fwd_hooks", "bwd_hooks", "names", "names_filter", "logits", "attention_mask",
                             "incl_bwd", "loss", "targets", NULL};
    PyObject *tokobj, *fwd = Py_None, *bwd = Py_None, *names = Py_None, *nfilter = Py_None, *maskobj = Py_None,
                      *lossobj = Py_None, *tgtobj = Py_None;
    const char *lm = "all";
    int incl_bwd = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOOOsOpOO", kwlist, &tokobj, &fwd, &bwd, &names, &nfilter, &lm,
                                     &maskobj, &incl_bwd, &lossobj, &tgtobj))
        return NULL;
    if (kind != RUN_CACHE && (names != Py_None || nfilter != Py_None || incl_bwd))
        return PyErr_Format(PyExc_TypeError, "%s: names=, names_filter= and incl_bwd= are run_with_cache's", fn);
    if (names != Py_None && nfilter != Py_None)
        return PyErr_Format(PyExc_TypeError, "%s: give names= or its alias names_filter=, not both", fn);
    if (nfilter != Py_None) names = nfilter;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) return NULL;
    const mp_config *cfg = &m->cfg;
    mp_forward_params fp = mp_forward_params_default();
    if (logits_mode(lm, &fp.logits, fn)) return NULL;
    const int grad = lossobj != Py_None || tgtobj != Py_None || incl_bwd || bwd != Py_None;
    PyArrayObject *tok = mpy_tokens(self, tokobj, fn), *mask = NULL;
    if (!tok) return NULL;
    int B = (int)PyArray_DIM(tok, 0), T = (int)PyArray_DIM(tok, 1);
    PyObject *out = NULL, *cache = NULL, *globs = NULL, *ret = NULL;
    mpy_pyhooks *fh = NULL, *bh = NULL;
    loss_spec ls = {0};
    if (maskobj != Py_None) { /* with a gradient, the loss carries it (loss_set_mask) */
        if (!(mask = mpy_tokens(self, maskobj, "attention_mask"))) goto done;
        if (PyArray_DIM(mask, 0) != B || PyArray_DIM(mask, 1) != T) {
            PyErr_Format(PyExc_ValueError, "%s: attention_mask must have the tokens' shape [%d, %d]", fn, B, T);
            goto done;
        }
        fp.attn_mask = PyArray_DATA(mask);
    }
    if (!(fh = mpy_pyhooks_new(self, fwd, "fwd_hooks"))) goto done;
    int filtered = 0;
    if (kind == RUN_CACHE) {
        if (!(globs = names == Py_None ? PyUnicode_FromString("*") : globs_from(fh->hs, names, "names", &filtered)))
            goto done;
        const char *g = PyUnicode_AsUTF8(globs);
        if (!g || (!filtered && check_globs(fh->hs, cfg, g, "names"))) goto done;
        if (!(cache = PyDict_New())) goto done;
        /* after the fwd hooks: the cache holds what they left */
        if (capture(cache, g, "", fh->hs, cfg, B, T, 0, filtered, fn)) goto done;
    }
    if (fp.logits != MP_LOGITS_NONE || grad) {
        if (grad && fp.logits != MP_LOGITS_ALL) {
            PyErr_Format(PyExc_ValueError, "%s: logits must be \"all\" with a loss (the metric reads the logits)", fn);
            goto done;
        }
        npy_intp dims[3] = {B, fp.logits == MP_LOGITS_ALL ? T : cfg->vocab, cfg->vocab};
        if (!(out = PyArray_SimpleNew(fp.logits == MP_LOGITS_ALL ? 3 : 2, dims, NPY_FLOAT32))) goto done;
    } else {
        out = Py_NewRef(Py_None);
    }
    double value = 0.0;
    self->busy++;
    if (grad) {
        if (loss_arg(lossobj, tgtobj, B, T, cfg->vocab, fn, "loss", &ls)) goto busy_done;
        if (loss_set_mask(&ls, mask, B, T)) goto busy_done;
        if (ls.kind == LOSS_NONE) {
            PyErr_Format(PyExc_ValueError, "%s: %s needs a loss= (%s): the gradients are those of that metric", fn,
                         incl_bwd ? "incl_bwd=True" : "bwd_hooks", LOSS_FORMS);
            goto busy_done;
        }
        if (check_bwd_names(fh->hs, bwd, fn)) goto busy_done;
        /* the backward registry of fh's: the attached SAEs' backward (sae_splice.h) */
        if (!(bh = mpy_pyhooks_new_bwd(self, bwd, "bwd_hooks", fh->hs))) goto busy_done;
        if (incl_bwd && capture(cache, PyUnicode_AsUTF8(globs), "_grad", bh->hs, cfg, B, T, 1, filtered, fn))
            goto busy_done;
        const int backward = incl_bwd || mpy_pyhooks_own(bh) > 0;
        if (fwd_bwd(self, PyArray_DATA(tok), B, T, fh, mpy_pyhooks_registry(fh), bh,
                    backward ? bh->hs : NULL, &ls, (PyArrayObject *)out, fn, &value))
            goto busy_done;
    } else {
        fp.hooks = mpy_pyhooks_registry(fh);
        mp_status st;
        Py_BEGIN_ALLOW_THREADS
        st = mp_model_forward(m, PyArray_DATA(tok), B, T, &fp,
                              out == Py_None ? NULL : PyArray_DATA((PyArrayObject *)out));
        Py_END_ALLOW_THREADS
        if (st) {
            mpy_pyhooks_fail(fh, st);
            goto busy_done;
        }
    }
    if (kind == RUN_CACHE) {
        PyObject *cls = lazy_attr("mechprobe.cache", "ActivationCache");
        PyObject *c = cls ? PyObject_CallFunction(cls, "OOii", cache, (PyObject *)self, B, T) : NULL;
        Py_XDECREF(cls);
        if (c && ls.kind != LOSS_NONE) {
            PyObject *v = PyFloat_FromDouble(value);
            if (!v || PyObject_SetAttrString(c, "loss", v)) Py_CLEAR(c);
            Py_XDECREF(v);
        }
        if (c) ret = PyTuple_Pack(2, out, c);
        Py_XDECREF(c);
    } else if (ls.kind != LOSS_NONE) {
        ret = Py_BuildValue("(Od)", out, value);
    } else {
        ret = Py_NewRef(out);
    }
busy_done:
    self->busy--;
done:
    loss_free(&ls);
    mpy_pyhooks_free(fh);
    mpy_pyhooks_free(bh);
    Py_DECREF(tok);
    Py_XDECREF(mask);
    Py_XDECREF(out);
    Py_XDECREF(cache);
    Py_XDECREF(globs);
    return ret;
}

PyObject *mpy_run_hooked(mpy_model *self, PyObject *args, PyObject *kw) {
    return run_common(self, args, kw, RUN_FORWARD, "forward");
}

static PyObject *model_run_with_hooks(mpy_model *self, PyObject *args, PyObject *kw) {
    return run_common(self, args, kw, RUN_HOOKS, "run_with_hooks");
}

static PyObject *model_run_with_cache(mpy_model *self, PyObject *args, PyObject *kw) {
    return run_common(self, args, kw, RUN_CACHE, "run_with_cache");
}

/* ---- attribution patching ---- */

/* m.attribution_patch(clean, corrupt, names, metric, per="position", targets=None)
 * -> ({name: estimate}, {"clean": metric, "corrupt": metric}) as mp.attribution_patch */
static PyObject *model_attribution_patch(mpy_model *self, PyObject *args, PyObject *kw) {
    static const char *fn = "attribution_patch";
    static char *kwlist[] = {"clean", "corrupt", "names", "metric", "per", "targets", "attention_mask", NULL};
    static const char *const pers[] = {"position", "head", "head_position", "neuron", "all", NULL};
    PyObject *cobj, *xobj, *names, *metric, *tgt = Py_None, *maskobj = Py_None;
    const char *pername = "position";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|sO$O:attribution_patch", kwlist, &cobj, &xobj, &names, &metric,
                                     &pername, &tgt, &maskobj))
        return NULL;
    mp_model *m = mpy_model_get(self, fn, 0);
    if (!m) return NULL;
    const mp_config *cfg = &m->cfg;
    int per = -1;
    for (int i = 0; pers[i]; i++)
        if (!strcmp(pername, pers[i])) per = i;
    if (per < 0)
        return PyErr_Format(PyExc_ValueError, "%s: per: \"position\", \"head\", \"head_position\", \"neuron\" or "
                            "\"all\" expected, got \"%s\"", fn, pername);
    PyArrayObject *tc = mpy_tokens(self, cobj, "attribution_patch: clean tokens"), *tx = NULL, *amask = NULL;
    if (!tc) return NULL;
    PyObject *acts = NULL, *globs = NULL, *lc = NULL, *lx = NULL, *res = NULL, *ret = NULL;
    mp_hooks *hc = NULL, *hx = NULL, *hb = NULL;
    loss_spec ls = {0};
    int B = (int)PyArray_DIM(tc, 0), T = (int)PyArray_DIM(tc, 1);
    if (!(tx = mpy_tokens(self, xobj, "attribution_patch: corrupt tokens"))) goto done;
    if (PyArray_DIM(tx, 0) != B || PyArray_DIM(tx, 1) != T) {
        PyErr_Format(PyExc_ValueError, "%s: the clean tokens are [%d, %d] but the corrupt tokens [%zd, %zd] (they "
                     "must match)", fn, B, T, (Py_ssize_t)PyArray_DIM(tx, 0), (Py_ssize_t)PyArray_DIM(tx, 1));
        goto done;
    }
    if (loss_arg(metric, tgt, B, T, cfg->vocab, fn, "metric", &ls)) goto done;
    if (ls.kind == LOSS_NONE) {
        PyErr_Format(PyExc_ValueError, "%s: metric is required (%s)", fn, LOSS_FORMS);
        goto done;
    }
    if (maskobj != Py_None) { /* a padded batch: both runs with this mask */
        if (!(amask = mpy_tokens(self, maskobj, "attribution_patch: attention_mask"))) goto done;
        if (PyArray_DIM(amask, 0) != B || PyArray_DIM(amask, 1) != T) {
            PyErr_Format(PyExc_ValueError, "%s: attention_mask must have the tokens' shape [%d, %d]", fn, B, T);
            goto done;
        }
        if (loss_set_mask(&ls, amask, B, T)) goto done;
    }
    /* with the attached SAEs: their sub-points are names too (sae_splice.h) */
    if (!(hc = mp_hooks_new_model(m)) || !(hx = mp_hooks_new_model(m)) || !(hb = mp_hooks_new_bwd(m, hx))) {
        PyErr_NoMemory();
        goto done;
    }
    int filtered;
    if (!(globs = globs_from(hc, names, "names", &filtered))) goto done;
    const char *g = PyUnicode_AsUTF8(globs);
    if (!g || check_globs(hc, cfg, g, "attribution_patch: names")) goto done;
    if (!(acts = PyDict_New())) goto done;
    if (capture(acts, g, "|clean", hc, cfg, B, T, 1, filtered, fn)) goto done;
    if (PyDict_Size(acts) == 0) {
        char none[256];
        PyErr_Format(PyExc_ValueError, "%s: names '%s' selects no hook point with a gradient (%s have none yet)", fn,
                     g, mp_hook_suffixes(no_grad, none, sizeof none));
        goto done;
    }
    if (capture(acts, g, "|corrupt", hx, cfg, B, T, 1, filtered, fn) ||
        capture(acts, g, "|grad", hb, cfg, B, T, 1, filtered, fn))
        goto done;
    npy_intp ld[3] = {B, T, cfg->vocab};
    if (!(lc = PyArray_SimpleNew(3, ld, NPY_FLOAT32)) || !(lx = PyArray_SimpleNew(3, ld, NPY_FLOAT32))) goto done;
    double vc, vx;
    self->busy++;
    int rc = fwd_bwd(self, PyArray_DATA(tc), B, T, NULL, hc, NULL, NULL, &ls, (PyArrayObject *)lc, fn, &vc);
    if (!rc) rc = fwd_bwd(self, PyArray_DATA(tx), B, T, NULL, hx, NULL, hb, &ls, (PyArrayObject *)lx, fn, &vx);
    self->busy--;
    if (rc || !(res = PyDict_New())) goto done;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(acts, &pos, &key, &val)) { /* insertion order: firing order */
        Py_ssize_t kl;
        const char *k = PyUnicode_AsUTF8AndSize(key, &kl);
        if (!k || kl < 7 || strcmp(k + kl - 6, "|clean")) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(kl - 6), k);
        mp_hook_id id;
        int layer;
        mp_hooks_parse(hc, name, &id, &layer);
        int64_t os[2];
        int ond = mp_grad_attr_shape_hs(hc, cfg, id, T, (mp_attr_per)per, os);
        if (!ond) {
            PyErr_Format(PyExc_ValueError, "%s: per=\"%s\" does not apply to %s (%s)", fn, pers[per], name,
                         per == MP_ATTR_NEURON ? "it has a head axis: use \"head\", \"head_position\" or \"position\""
                                               : "it has no head axis: use \"position\", \"neuron\" or \"all\"");
            goto done;
        }
        char kx[140], kg[140];
        snprintf(kx, sizeof kx, "%s|corrupt", name);
        snprintf(kg, sizeof kg, "%s|grad", name);
        PyArrayObject *ax = (PyArrayObject *)PyDict_GetItemString(acts, kx),
                      *ag = (PyArrayObject *)PyDict_GetItemString(acts, kg);
        npy_intp od[2] = {(npy_intp)os[0], ond == 2 ? (npy_intp)os[1] : 0};
        PyObject *o = PyArray_SimpleNew(ond, od, NPY_FLOAT32);
        if (!o) goto done;
        mp_status st = mp_grad_attribution_hs(hc, cfg, id, B, T, PyArray_DATA((PyArrayObject *)val), PyArray_DATA(ax),
                                           PyArray_DATA(ag), (mp_attr_per)per, PyArray_DATA((PyArrayObject *)o));
        if (st || PyDict_SetItemString(res, name, o)) {
            Py_DECREF(o);
            if (st) mpy_fail(st);
            goto done;
        }
        Py_DECREF(o);
    }
    ret = Py_BuildValue("(O{s:d,s:d})", res, "clean", vc, "corrupt", vx);
done:
    loss_free(&ls);
    mp_hooks_free(hc);
    mp_hooks_free(hx);
    mp_hooks_free(hb);
    Py_DECREF(tc);
    Py_XDECREF(tx);
    Py_XDECREF(amask);
    Py_XDECREF(acts);
    Py_XDECREF(globs);
    Py_XDECREF(lc);
    Py_XDECREF(lx);
    Py_XDECREF(res);
    return ret;
}

/* ---- the ActivationCache's arithmetic (runtime/act_cache.h, as lua/lcache.c) ---- */

/* m._cache_apply_ln(stack [C, R, D] float32 C-contiguous, scale [R]): in place,
 * mp_cache_apply_ln with centering for a LayerNorm model. */
static PyObject *model_cache_apply_ln(mpy_model *self, PyObject *args) {
    PyArrayObject *x, *sc;
    if (!PyArg_ParseTuple(args, "O!O!:_cache_apply_ln", &PyArray_Type, &x, &PyArray_Type, &sc)) return NULL;
    mp_model *m = mpy_model_get(self, "apply_ln", 1);
    if (!m) return NULL;
    const int D = m->cfg.d_model;
    if (PyArray_TYPE(x) != NPY_FLOAT32 || !PyArray_IS_C_CONTIGUOUS(x) || !PyArray_ISWRITEABLE(x) ||
        PyArray_NDIM(x) != 3 || PyArray_DIM(x, 2) != D || PyArray_TYPE(sc) != NPY_FLOAT32 ||
        !PyArray_IS_C_CONTIGUOUS(sc) || PyArray_SIZE(sc) != PyArray_DIM(x, 1))
        return PyErr_Format(PyExc_ValueError, "_cache_apply_ln: a writable float32 stack [C, R, %d] and a scale [R] "
                            "expected", D);
    mp_cache_apply_ln(PyArray_DATA(x), (int)PyArray_DIM(x, 0), (size_t)PyArray_DIM(x, 1), D, PyArray_DATA(sc),
                      m->cfg.norm == MP_NORM_LAYER);
    Py_RETURN_NONE;
}

/* m._cache_head_results(layer, z [N, H, Dh]) -> [H, N, D] (mp_cache_head_results, no b_O) */
static PyObject *model_cache_head_results(mpy_model *self, PyObject *args) {
    int l;
    PyObject *zobj;
    if (!PyArg_ParseTuple(args, "iO:_cache_head_results", &l, &zobj)) return NULL;
    mp_model *m = mpy_model_get(self, "stack_head_results", 1);
    if (!m) return NULL;
    const mp_config *c = &m->cfg;
    if (l < 0 || l >= c->n_layer) return PyErr_Format(PyExc_ValueError, "stack_head_results: layer %d out of range", l);
    PyArrayObject *z = mpy_floats(zobj, -1, "stack_head_results: hook_z");
    if (!z) return NULL;
    npy_intp n = PyArray_SIZE(z) / ((npy_intp)c->n_head * c->d_head);
    if (n * c->n_head * c->d_head != PyArray_SIZE(z) || n > INT_MAX) {
        Py_DECREF(z);
        return PyErr_Format(PyExc_ValueError, "stack_head_results: hook_z must be [..., %d, %d]", c->n_head, c->d_head);
    }
    npy_intp dims[3] = {c->n_head, n, c->d_model};
    PyObject *o = PyArray_SimpleNew(3, dims, NPY_FLOAT32);
    mp_status st = o ? mp_cache_head_results(m, l, PyArray_DATA(z), (int)n, PyArray_DATA((PyArrayObject *)o)) : MP_OK;
    Py_DECREF(z);
    if (st) {
        Py_XDECREF(o);
        return mpy_fail(st);
    }
    return o;
}

/* m._cache_logit_attrs(stack [C, B, Tn, D], tokens [B], incorrect [B] or None)
 * -> (attrs [C, B, Tn], bias [B]) (mp_cache_logit_attrs) */
static PyObject *model_cache_logit_attrs(mpy_model *self, PyObject *args) {
    PyObject *sobj, *tobj, *iobj;
    if (!PyArg_ParseTuple(args, "OOO:_cache_logit_attrs", &sobj, &tobj, &iobj)) return NULL;
    mp_model *m = mpy_model_get(self, "logit_attrs", 1);
    if (!m) return NULL;
    PyArrayObject *s = mpy_floats(sobj, 4, "logit_attrs: stack"), *t = NULL, *inc = NULL;
    PyObject *o = NULL, *bias = NULL, *ret = NULL;
    if (!s) return NULL;
    const int C = (int)PyArray_DIM(s, 0), B = (int)PyArray_DIM(s, 1), Tn = (int)PyArray_DIM(s, 2);
    if (PyArray_DIM(s, 3) != m->cfg.d_model) {
        PyErr_Format(PyExc_ValueError, "logit_attrs: the stack's last axis must be d_model = %d", m->cfg.d_model);
        goto out;
    }
    t = (PyArrayObject *)PyArray_FROMANY(tobj, NPY_INT32, 1, 1, NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST);
    if (!t) goto out;
    if (iobj != Py_None &&
        !(inc = (PyArrayObject *)PyArray_FROMANY(iobj, NPY_INT32, 1, 1, NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST)))
        goto out;
    if (PyArray_DIM(t, 0) != B || (inc && PyArray_DIM(inc, 0) != B)) {
        PyErr_Format(PyExc_ValueError, "logit_attrs: one token id per batch row (%d) expected", B);
        goto out;
    }
    npy_intp od[3] = {C, B, Tn}, bd[1] = {B};
    if (!(o = PyArray_SimpleNew(3, od, NPY_FLOAT32)) || !(bias = PyArray_SimpleNew(1, bd, NPY_FLOAT32))) goto out;
    mp_status st = mp_cache_logit_attrs(m, PyArray_DATA(s), C, B, Tn, PyArray_DATA(t), inc ? PyArray_DATA(inc) : NULL,
                                        PyArray_DATA((PyArrayObject *)o), PyArray_DATA((PyArrayObject *)bias));
    if (st) {
        mpy_fail(st);
        goto out;
    }
    ret = PyTuple_Pack(2, o, bias);
out:
    Py_DECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(inc);
    Py_XDECREF(o);
    Py_XDECREF(bias);
    return ret;
}

PyMethodDef mpy_hooks_methods[] = {
    {"run_with_cache", (PyCFunction)(void (*)(void))model_run_with_cache, METH_VARARGS | METH_KEYWORDS,
     "run_with_cache(tokens, *, names=None | names_filter=None, logits='all', attention_mask=None, fwd_hooks=None, "
     "incl_bwd=False, loss=None, targets=None, bwd_hooks=None) -> (logits, ActivationCache)"},
    {"run_with_hooks", (PyCFunction)(void (*)(void))model_run_with_hooks, METH_VARARGS | METH_KEYWORDS,
     "run_with_hooks(tokens, *, fwd_hooks=[(name | filter, fn)], bwd_hooks=None, logits='all', attention_mask=None, "
     "loss=None, targets=None) -> logits, or (logits, loss value) with a loss"},
    {"attribution_patch", (PyCFunction)(void (*)(void))model_attribution_patch, METH_VARARGS | METH_KEYWORDS,
     "attribution_patch(clean, corrupt, names, metric, per='position', targets=None) -> ({name: estimate}, "
     "{'clean': value, 'corrupt': value})"},
    {"_cache_apply_ln", (PyCFunction)model_cache_apply_ln, METH_VARARGS, NULL},
    {"_cache_head_results", (PyCFunction)model_cache_head_results, METH_VARARGS, NULL},
    {"_cache_logit_attrs", (PyCFunction)model_cache_logit_attrs, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
