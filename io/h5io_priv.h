/* h5io_priv.h — helpers shared by the files of the HDF5 layer (h5io.c,
 * h5attr.c) and nothing else: error messages that name the file and object. */
#ifndef MP_H5IO_PRIV_H
#define MP_H5IO_PRIV_H

#include "h5io.h"

#include <string.h>

/* "<file>: <obj>: <what>: <innermost HDF5 error description>" (the failure came from HDF5) */
__attribute__((format(printf, 4, 5)))
mp_status mp_h5_fail(mp_status s, hid_t loc, const char *obj, const char *fmt, ...);
/* "<file>: <obj>: <what>" (our own check failed; HDF5's error stack is cleared) */
__attribute__((format(printf, 4, 5)))
mp_status mp_h5_fail_plain(mp_status s, hid_t loc, const char *obj, const char *fmt, ...);

static inline const char *mp_h5_objname(const char *p) { return (p && *p) ? p : "."; }
/* the path names the location itself ("", ".", "/", "//") */
static inline int mp_h5_is_self(const char *p) { return !p || !*p || strcmp(p, ".") == 0 || strspn(p, "/") == strlen(p); }

/* The descriptor of open file f (sec2 or mechprobe's stream driver), or -1. */
int mp_h5_file_fd(hid_t f);

#endif
