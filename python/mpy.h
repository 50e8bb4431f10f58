/* mpy.h — internals shared by the files of the Python module
 * (`import mechprobe`, the extension mechprobe._core): the Model object, the
 * numpy conversions and the error mapping. The module calls the C core's API
 * (runtime/, hooks/, formats/, io/, mpi/, analyze/) as the Lua bindings do;
 * nothing here goes through Lua. Not a public header. */
#ifndef MPY_H
#define MPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define PY_ARRAY_UNIQUE_SYMBOL mpy_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#ifndef MPY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "model.h"
#include "tok.h"

/* The Model: an mp_model, its tokenizer and where that came from. `busy` > 0
 * while a call that runs Python code (hooks) uses the model: closing it or
 * starting another such call then is refused (a hook cannot free its model). */
typedef struct {
    PyObject_HEAD
    mp_model *m;
    mp_tok *tok;          /* NULL: none */
    char tok_path[1024];  /* its source ("" for bytes or none) */
    int busy;
    PyObject *weakrefs;
    PyObject *saes;       /* mpy_sae_splice.c: the attached SAE objects (a list, NULL: none yet) */
} mpy_model;

extern PyTypeObject mpy_model_type;
extern PyObject *mpy_error;          /* mechprobe.Error (a RuntimeError) */

/* Raises mechprobe.Error (ValueError for MP_ERR_ARG, MemoryError for
 * MP_ERR_NOMEM, OSError for MP_ERR_IO) with mp_last_error()'s text; returns NULL. */
PyObject *mpy_fail(mp_status st);
/* The model of `self`, or NULL with an exception (closed, or busy when busy_ok is 0). */
mp_model *mpy_model_get(mpy_model *self, const char *fn, int busy_ok);

/* Tokens from a str (encoded with the model's tokenizer, BOS as it wants), a
 * list of ints, a list of equal-length lists, or a numpy integer array of 1 or 2
 * dims: a new C-contiguous int32 array [B, T] with every id in [0, vocab), or
 * NULL with an exception naming `what`. */
PyArrayObject *mpy_tokens(mpy_model *self, PyObject *obj, const char *what);
/* A new float32 numpy array that copies n floats of shape [nd]. */
PyObject *mpy_array_copy(const float *src, int nd, const int64_t *shape);
/* A float32 C-contiguous array from any array-like (a new reference), checked to
 * have exactly `nd` dims (nd < 0: any); NULL with an exception naming what. */
PyArrayObject *mpy_floats(PyObject *obj, int nd, const char *what);

/* Encodes text with the model's tokenizer (flags: MP_TOK_*); *ids malloc'ed. */
int mpy_encode(mpy_model *self, const char *text, Py_ssize_t len, int flags, int **ids, int *n);

/* mpy_hooks.c: Python hook functions (TransformerLens's fn(act, hook)) in a
 * registry of their own. mpy_pyhooks_new reads a list [(name | globs | list of
 * names | filter function, fn)] (None: empty) into a new registry, or returns
 * NULL with an exception naming what[i]; mpy_pyhooks_registry is the registry to
 * pass to the core (NULL when empty). Run the core with the GIL released (the
 * hooks take it for their calls) and self->busy raised. After a failed call,
 * mpy_pyhooks_fail re-raises the exception a hook raised (MP_ERR_HOOK), else
 * mpy_fail(st); returns NULL. */
typedef struct mpy_pyhooks mpy_pyhooks;
mpy_pyhooks *mpy_pyhooks_new(mpy_model *self, PyObject *list, const char *what);
const struct mp_hooks *mpy_pyhooks_registry(const mpy_pyhooks *p);
PyObject *mpy_pyhooks_fail(mpy_pyhooks *p, mp_status st);
void mpy_pyhooks_free(mpy_pyhooks *p);
/* The backward counterpart: a registry made by mp_hooks_new_bwd for the forward
 * registry fwd (the attached SAEs' backward in it); mpy_pyhooks_own counts the
 * registrations the list made (not the SAEs' own). */
mpy_pyhooks *mpy_pyhooks_new_bwd(mpy_model *self, PyObject *list, const char *what, const struct mp_hooks *fwd);
int mpy_pyhooks_own(const mpy_pyhooks *p);
/* m.forward(...) with fwd_hooks=, bwd_hooks=, loss= or targets= (run_with_hooks's body). */
PyObject *mpy_run_hooked(mpy_model *self, PyObject *args, PyObject *kw);

/* mpy_sae.c: mechprobe.SAE. The open SAE of a mechprobe.SAE object, or NULL
 * with an exception (TypeError for another object, ValueError once closed).
 * mpy_sae_add adds the type to the module (-1 with an exception). */
struct mp_sae *mpy_sae_get(PyObject *o);
int mpy_sae_add(PyObject *mod);
/* How many models the SAE is attached to, changed by delta (mpy_sae_splice.c
 * keeps it); close() is refused while it is > 0. */
int mpy_sae_attached(PyObject *o, int delta);

/* mpy_sae_splice.c: m.add_sae / reset_saes / saes / run_with_saes ...;
 * mpy_splice_release drops the model's SAE objects (when its mp_model is freed). */
extern PyMethodDef mpy_sae_splice_methods[];
extern PyGetSetDef mpy_sae_splice_getset[];
void mpy_splice_release(mpy_model *self);
/* mpy_sae_train.c: mechprobe.train_sae and sae.evaluate. */
extern PyMethodDef mpy_sae_train_functions[];
PyObject *mpy_sae_evaluate(PyObject *sae, PyObject *args, PyObject *kw);

/* Method and attribute tables of the other files, joined into the Model type at
 * module init; each ends with a {NULL} sentinel. */
extern PyMethodDef mpy_hooks_methods[];   /* mpy_hooks.c: run_with_cache, run_with_hooks, ... */
extern PyMethodDef mpy_extra_methods[];   /* mpy_extra.c: interventions, capture, weights, training ... */
extern PyGetSetDef mpy_extra_getset[];
/* Module-level functions of the other files. */
extern PyMethodDef mpy_extra_functions[];

#endif
