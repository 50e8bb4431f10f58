/* mpy_extra.h — what mpy_extra.c offers the other files of the Python module:
 * the C interventions (mechprobe.Intervention objects, hooks/intervene.h) so
 * that any call that takes `fwd_hooks` (run_with_hooks in mpy_hooks.c too)
 * can register an entry (name, Intervention) in its hook registry, where the
 * intervention runs in C without the GIL. Not a public header. */
#ifndef MPY_EXTRA_H
#define MPY_EXTRA_H

#include "mpy.h"

/* 1 when o is a mechprobe.Intervention. */
int mpy_is_intervention(PyObject *o);

/* Registers the Intervention iv at the hook names / globs `name` in hooks.
 * n_pos > 0: its positions are checked to be < n_pos. `what` names the entry
 * in errors ("run_with_hooks: fwd_hooks[2]"). The Intervention must stay
 * referenced (and its data alive) until the forward is over: the caller keeps
 * its fwd_hooks list. Returns 0, or -1 with a Python exception set. */
int mpy_intervention_add(mp_hooks *hooks, const char *name, PyObject *iv, int n_pos, const char *what);

#endif
