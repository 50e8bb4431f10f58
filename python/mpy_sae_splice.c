/* mpy_sae_splice.c — SAEs attached to a model from Python (SAELens's
 * HookedSAETransformer names), over hooks/sae_splice.h as lua/lsae_splice.c:
 *
 *     m.add_sae(sae, use_error_term=False)     # spliced into every run of m
 *     m.saes, m.acts_to_saes                   # the attached SAEs (list / {hook: sae})
 *     m.reset_saes(act_names=None)             # detach all (or those at act_names)
 *     m.run_with_saes(tokens, saes=[...], use_error_term=None, reset_saes_end=True, **forward kwargs)
 *     m.run_with_cache_with_saes(tokens, saes=[...], ..., **run_with_cache kwargs)
 *
 * The model keeps the list in C (mp_model's splice: every run path of every
 * binding sees it); self->saes holds the SAE objects while attached, and each
 * one's attached count (mpy_sae_attached) makes its close() refuse. The list
 * is rebuilt from the C list whenever it is read (as the Lua binding's). */
#include "mpy.h"

#include <string.h>

#include "sae.h"
#include "sae_splice.h"

/* Rebuilds self->saes from the model's C list: objects no longer attached
 * lose their count. 0, or -1 with an exception. */
static int sync_refs(mpy_model *self) {
    PyObject *old = self->saes, *fresh = PyList_New(0);
    if (!fresh) return -1;
    const mp_model *m = self->m;
    Py_ssize_t n_old = old ? PyList_GET_SIZE(old) : 0;
    char *used = PyMem_Calloc((size_t)(n_old ? n_old : 1), 1);
    if (!used) {
        Py_DECREF(fresh);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; m && i < mp_model_n_saes(m); i++) {
        const mp_sae *s = mp_model_sae(m, i, NULL);
        for (Py_ssize_t j = 0; j < n_old; j++) {
            PyObject *o = PyList_GET_ITEM(old, j);
            const mp_sae *os = used[j] ? NULL : mpy_sae_get(o);
            if (!os) PyErr_Clear();
            if (os == s) {
                used[j] = 1;
                if (PyList_Append(fresh, o)) {
                    PyMem_Free(used);
                    Py_DECREF(fresh);
                    return -1;
                }
                break;
            }
        }
    }
    for (Py_ssize_t j = 0; j < n_old; j++)
        if (!used[j]) mpy_sae_attached(PyList_GET_ITEM(old, j), -1);
    PyMem_Free(used);
    self->saes = fresh;
    Py_XDECREF(old);
    return 0;
}

void mpy_splice_release(mpy_model *self) {
    PyObject *l = self->saes;
    self->saes = NULL;
    for (Py_ssize_t j = 0; l && j < PyList_GET_SIZE(l); j++) mpy_sae_attached(PyList_GET_ITEM(l, j), -1);
    Py_XDECREF(l);
}

/* Attaches one SAE object; 0, or -1 with an exception naming fn. */
static int attach(mpy_model *self, PyObject *obj, int use_err, const char *fn) {
    mp_sae *s = mpy_sae_get(obj);
    if (!s) return -1;
    if (!self->saes && !(self->saes = PyList_New(0))) return -1;
    if (PyList_Append(self->saes, obj)) return -1;
    if (mp_model_add_sae(self->m, s, use_err)) {
        PyErr_Format(PyExc_ValueError, "%s: %s", fn, mp_last_error());
        PySequence_DelItem(self->saes, PyList_GET_SIZE(self->saes) - 1);
        return -1;
    }
    mpy_sae_attached(obj, +1);
    return 0;
}

/* m.add_sae(sae, use_error_term=False) -> None */
static PyObject *model_add_sae(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"sae", "use_error_term", NULL};
    PyObject *obj;
    int use_err = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:add_sae", kwlist, &obj, &use_err)) return NULL;
    if (!mpy_model_get(self, "add_sae", 0)) return NULL;
    if (sync_refs(self) || attach(self, obj, use_err, "add_sae")) return NULL;
    Py_RETURN_NONE;
}

/* m.reset_saes(act_names=None) -> None: detaches every SAE, or those whose
 * hook_name is act_names (a str or a list of them). */
static PyObject *model_reset_saes(mpy_model *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"act_names", NULL};
    PyObject *names = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:reset_saes", kwlist, &names)) return NULL;
    mp_model *m = mpy_model_get(self, "reset_saes", 0);
    if (!m) return NULL;
    if (names == Py_None) {
        mp_model_reset_saes(m);
    } else {
        PyObject *l = PyUnicode_Check(names) ? PyTuple_Pack(1, names) : PySequence_Tuple(names);
        if (!l) return NULL;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(l); j++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(l, j))) {
                Py_DECREF(l);
                return PyErr_Format(PyExc_TypeError, "reset_saes: act_names must be a hook name or a list of them");
            }
        for (int i = mp_model_n_saes(m) - 1; i >= 0; i--) {
            const char *h = mp_model_sae(m, i, NULL)->hook_name;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(l); j++)
                if (!PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(l, j), h)) {
                    mp_model_remove_sae(m, i);
                    break;
                }
        }
        Py_DECREF(l);
    }
    if (sync_refs(self)) return NULL;
    Py_RETURN_NONE;
}

/* m.saes -> [sae, ...] in attachment order (a new list) */
static PyObject *model_saes(mpy_model *self, void *closure) {
    (void)closure;
    if (!mpy_model_get(self, "saes", 1) || sync_refs(self)) return NULL;
    return PyList_GetSlice(self->saes, 0, PyList_GET_SIZE(self->saes));
}

/* m.acts_to_saes -> {hook_name: sae} (SAELens's attribute; a new dict) */
static PyObject *model_acts_to_saes(mpy_model *self, void *closure) {
    (void)closure;
    mp_model *m = mpy_model_get(self, "acts_to_saes", 1);
    if (!m || sync_refs(self)) return NULL;
    PyObject *d = PyDict_New();
    for (Py_ssize_t j = 0; d && j < PyList_GET_SIZE(self->saes); j++) {
        const mp_sae *s = mp_model_sae(m, (int)j, NULL);
        if (PyDict_SetItemString(d, s->hook_name, PyList_GET_ITEM(self->saes, j))) Py_CLEAR(d);
    }
    return d;
}

/* run_with_saes / run_with_cache_with_saes: the SAEs attached for this one
 * call (SAELens's), then detached (unless reset_saes_end=False). */
static PyObject *run_with(mpy_model *self, PyObject *args, PyObject *kw, const char *method, const char *fn) {
    if (!mpy_model_get(self, fn, 0)) return NULL;
    PyObject *pass = kw ? PyDict_Copy(kw) : PyDict_New();
    if (!pass) return NULL;
    PyObject *saes = NULL, *ret = NULL, *list = NULL, *bound = NULL;
    int use_err = 0, reset_end = 1;
    saes = PyDict_GetItemString(pass, "saes");
    Py_XINCREF(saes);
    PyObject *v;
    if ((v = PyDict_GetItemString(pass, "use_error_term")) && v != Py_None && (use_err = PyObject_IsTrue(v)) < 0)
        goto done;
    if ((v = PyDict_GetItemString(pass, "reset_saes_end")) && (reset_end = PyObject_IsTrue(v)) < 0) goto done;
    const char *drop[] = {"saes", "use_error_term", "reset_saes_end"};
    for (int i = 0; i < 3; i++)
        if (PyDict_GetItemString(pass, drop[i]) && PyDict_DelItemString(pass, drop[i])) goto done;
    if (!saes || saes == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: saes= (an SAE or a list of SAEs) is required", fn);
        goto done;
    }
    list = PyList_Check(saes) || PyTuple_Check(saes) ? PySequence_List(saes) : Py_BuildValue("[O]", saes);
    if (!list) goto done;
    if (!PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_ValueError, "%s: saes= is an empty list", fn);
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
        if (!mpy_sae_get(PyList_GET_ITEM(list, i))) {
            PyErr_Format(PyExc_TypeError, "%s: saes[%zd] is not an open mechprobe.SAE", fn, i);
            goto done;
        }
    if (sync_refs(self)) goto done;
    const int before = mp_model_n_saes(self->m);
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(list); i++)
        ok = attach(self, PyList_GET_ITEM(list, i), use_err, fn) == 0;
    if (ok && (bound = PyObject_GetAttrString((PyObject *)self, method))) ret = PyObject_Call(bound, args, pass);
    if (self->m && (!ret || reset_end))
        while (mp_model_n_saes(self->m) > before) mp_model_remove_sae(self->m, mp_model_n_saes(self->m) - 1);
    if (sync_refs(self)) Py_CLEAR(ret);
done:
    Py_XDECREF(bound);
    Py_XDECREF(list);
    Py_XDECREF(saes);
    Py_DECREF(pass);
    return ret;
}

static PyObject *model_run_with_saes(mpy_model *self, PyObject *args, PyObject *kw) {
    return run_with(self, args, kw, "forward", "run_with_saes");
}

static PyObject *model_run_with_cache_with_saes(mpy_model *self, PyObject *args, PyObject *kw) {
    return run_with(self, args, kw, "run_with_cache", "run_with_cache_with_saes");
}

PyMethodDef mpy_sae_splice_methods[] = {
    {"add_sae", (PyCFunction)(void (*)(void))model_add_sae, METH_VARARGS | METH_KEYWORDS,
     "add_sae(sae, use_error_term=False): splice the SAE in at its hook_name in every later run (SAELens's "
     "HookedSAETransformer); its sub-points <hook>.hook_sae_acts_post etc. become hook names"},
    {"reset_saes", (PyCFunction)(void (*)(void))model_reset_saes, METH_VARARGS | METH_KEYWORDS,
     "reset_saes(act_names=None): detach every SAE (or those at the hook names act_names)"},
    {"run_with_saes", (PyCFunction)(void (*)(void))model_run_with_saes, METH_VARARGS | METH_KEYWORDS,
     "run_with_saes(tokens, saes=[...], use_error_term=None, reset_saes_end=True, **forward kwargs): forward with "
     "the SAEs attached for this call"},
    {"run_with_cache_with_saes", (PyCFunction)(void (*)(void))model_run_with_cache_with_saes,
     METH_VARARGS | METH_KEYWORDS,
     "run_with_cache_with_saes(tokens, saes=[...], use_error_term=None, reset_saes_end=True, **run_with_cache "
     "kwargs) -> (logits, ActivationCache) with the SAEs attached for this call"},
    {NULL, NULL, 0, NULL}};

PyGetSetDef mpy_sae_splice_getset[] = {
    {"saes", (getter)model_saes, NULL, "the attached SAEs in attachment order (a new list)", NULL},
    {"acts_to_saes", (getter)model_acts_to_saes, NULL, "the attached SAEs by hook name (SAELens's; a new dict)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};
