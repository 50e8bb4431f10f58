/* h5io.h — the small HDF5 layer every mechprobe file format is built on:
 * opening/creating files (including atomic "temporary name + rename" creation),
 * listing groups, reading numeric datasets as float32/int32 with their shape,
 * reading and writing attributes as tagged values, and writing float32/int32
 * datasets (intermediate groups created, an existing dataset replaced).
 *
 * Every function silences HDF5's automatic error printing (once per thread) and
 * turns HDF5 failures into mp_status with a message naming the file and the
 * object, followed by the innermost description on HDF5's error stack, e.g.
 * "run.h5: /acts/hook_embed: cannot write: ...". Sizes read from files are
 * validated (rank <= MP_H5_MAXDIM, element counts overflow-checked) before use. */
#ifndef MP_H5IO_H
#define MP_H5IO_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "mp_common.h"

#define MP_H5_MAXDIM 8

/* Turns off HDF5's automatic error printing for the calling thread. Called by
 * every function below (and by the io layer's other entry points before their
 * first HDF5 call); idempotent and cheap. */
void mp_h5_init(void);
/* The io layer's initialisation, for programs: mp_init() and mp_h5_init() on
 * the calling thread, so that HDF5 called directly before any io function
 * prints nothing either. The CLI and the tests that use HDF5 call it first. */
void mp_io_init(void);

/* Sets an mp_error message "<what>: <innermost HDF5 error description>" and
 * returns s. Call it right after the failing HDF5 call (any other HDF5 call
 * clears the error stack). For other modules that call HDF5 directly. */
mp_status mp_h5_error(mp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Words for a system error met while writing ("no space left on device"), or
 * NULL for errors without such words (use strerror). HDF5 driver errors that
 * carry an errno are reported with these words by every function below. */
const char *mp_h5_errno_words(int err);

/* Name of the file holding object `loc` into buf (or "?" when unknown). */
const char *mp_h5_filename(hid_t loc, char *buf, size_t n);

/* ---- files ---- */
typedef enum {
    MP_H5_READ = 0, /* "r":  existing file, read-only */
    MP_H5_RDWR,     /* "r+": existing file, read-write */
    MP_H5_TRUNC,    /* "w":  create, truncating an existing file */
    MP_H5_APPEND    /* "a":  read-write, created when missing */
} mp_h5_mode;

/* Opens `path`. A missing file is MP_ERR_IO "path: cannot open: No such file
 * or directory"; a file that is not HDF5 is MP_ERR_FORMAT. *out is set to
 * H5I_INVALID_HID on failure. The writing modes work in place (not atomic:
 * see mp_h5_atomic_*) and refuse a symbolic link or non-regular `path`
 * (opened with O_NOFOLLOW; HDF5 is handed that descriptor, not the name). */
mp_status mp_h5_open(hid_t *out, const char *path, mp_h5_mode mode);
/* Closes the file (and, with it, any object still open in it) and sets *f to
 * H5I_INVALID_HID; a no-op when *f is already invalid. Returns the H5Fclose
 * status (MP_ERR_HDF5 if flushing failed). */
mp_status mp_h5_close(hid_t *f);

/* Atomic creation through mp_out (mp_common.h): the file is written under
 * "<path>.tmp.<pid>.<n>" in the same directory and renamed to `path` by
 * commit, so a crash never leaves a file that looks complete; a destination
 * that is not a regular file (or is a symbolic link) is refused. */
typedef struct {
    hid_t file;          /* H5I_INVALID_HID when not open */
    char *path;          /* final name (owned by out), NULL when released */
    mp_out out;          /* the temporary and its signal registration */
} mp_h5_atomic;

/* Creates the temporary file (mode 0666 & ~umask). An unwritable or missing
 * directory is MP_ERR_IO naming `path`; nothing is left behind on failure. */
mp_status mp_h5_atomic_create(mp_h5_atomic *a, const char *path);
/* An atomic update of an existing HDF5 file: its content is copied into the
 * temporary (a symbolic link or non-regular `path` is refused; the copy keeps
 * the file's permissions), which is opened read-write; commit renames it over
 * `path`, abort leaves `path` as it was. A missing `path`: as
 * mp_h5_atomic_create. */
mp_status mp_h5_atomic_update(mp_h5_atomic *a, const char *path);
/* Closes every object of the file, fsyncs and renames it to the final name.
 * On failure the temporary file is removed. Always releases `a`. */
mp_status mp_h5_atomic_commit(mp_h5_atomic *a);
/* Closes and unlinks the temporary file; safe on a zeroed struct, after a
 * failed create and after commit. Always releases `a`. Pending writes are
 * discarded (mp_h5_discard_writes), so the close cannot fail. */
void mp_h5_atomic_abort(mp_h5_atomic *a);
/* File f is being thrown away: every later write to it goes to memory and
 * cannot fail (a full disk, a soft file-size limit), so its objects and then
 * the file close cleanly. Call before closing the objects of a file that
 * mp_h5_atomic_abort will close. Only for sec2 (default driver) files. */
void mp_h5_discard_writes(hid_t f);
/* mp_h5_discard_writes, then closes f (its objects first when the file was
 * opened with the strong close degree); cannot fail. For writers that own a
 * file outside mp_h5_atomic (the dataset capture). f < 0: no-op. */
void mp_h5_discard_close(hid_t f);
/* Closes f, whose content must reach the disk: reserves the space the final
 * flush writes into (fallocate, sec2 files), flushes, closes. A full disk or a
 * file-size limit met there is MP_ERR_IO "<what>: no space left on device"
 * and the file is closed discarding its writes (HDF5 1.10 cannot recover from
 * a failed close). Close the file's datasets first. */
mp_status mp_h5_close_checked(hid_t f, const char *what);

/* ---- background writer threads and fork ----
 * A thread that calls HDF5 in the background (the capture's writer thread)
 * holds this process-wide lock for reading around each of its HDF5 calls. A
 * fork() (pthread_atfork, registered on first use) takes it for writing first:
 * it waits until no background thread is inside HDF5, so the child never
 * inherits the thread-safe library's global lock held by a thread that does not
 * exist in the child (its first HDF5 call, e.g. the checkpoint loader's, would
 * block for ever). */
void mp_h5_bg_lock(void);
void mp_h5_bg_unlock(void);

/* ---- groups ---- */
typedef enum { MP_H5_GROUP = 0, MP_H5_DATASET, MP_H5_OTHER } mp_h5_kind;

typedef struct {
    char *name;
    mp_h5_kind kind;
} mp_h5_entry;

/* Children of `group` (relative to loc; "/" or "." for loc itself) in name
 * order. *out is an array of *n entries, freed with mp_h5_list_free. A missing
 * group or a path that is not a group is MP_ERR_ARG naming it; a group of more
 * than MP_H5_MAX_OBJECTS links (h5guard.h) is MP_ERR_FORMAT. */
mp_status mp_h5_list(hid_t loc, const char *group, mp_h5_entry **out, int *n);
void mp_h5_list_free(mp_h5_entry *e, int n);

/* Does every component of `path` exist (a link to an object)? 1 / 0. With
 * kind non-NULL, the kind of the object is stored there. Links that leave the
 * file (external, user-defined) count as missing: they are never followed. */
int mp_h5_exists(hid_t loc, const char *path, mp_h5_kind *kind);
/* Removes the link `path` (a dataset, or a group with everything under it) from
 * a file open for writing. A missing path is MP_ERR_ARG naming it; "/" cannot be
 * removed. The space is not reclaimed (HDF5 keeps the file's size). */
mp_status mp_h5_delete(hid_t loc, const char *path);
/* MP_OK when every link along `path` is a hard link (no soft, external or
 * user-defined link on the way), else MP_ERR_FORMAT naming the object. For
 * readers of untrusted files that read only the objects their schema names. */
mp_status mp_h5_check_links(hid_t loc, const char *path);

/* ---- datasets ---- */
typedef struct {
    int ndim;                    /* 0 for a scalar dataset */
    int64_t shape[MP_H5_MAXDIM];
    size_t numel;                /* product of shape (1 for a scalar) */
    int is_int;                  /* stored as an integer type */
    int is_float;                /* stored as a floating-point type */
    size_t elem_size;            /* bytes per element in the file */
    int filtered;                /* stored through filters (compression...) */
    int allocated;               /* storage allocated for every element (written) */
    uint64_t storage;            /* bytes of storage in the file (H5Dget_storage_size) */
} mp_h5_dsinfo;

/* Shape and type class of dataset `name`. A missing name, a non-numeric type,
 * a rank above MP_H5_MAXDIM or an empty dataset whose other extents multiply
 * past MP_H5_EMPTY_MAX (h5guard.h) is an error naming file and dataset; so is a
 * dataset whose data would come from outside the file (external storage,
 * a virtual dataset, an external link on the way): every reader refuses those. */
mp_status mp_h5_dataset_info(hid_t loc, const char *name, mp_h5_dsinfo *info);
/* A dataset declaring more than 64 MiB of data (numel x elem_size) that the
 * file does not hold (storage, compressed: 1100 times it) is MP_ERR_FORMAT
 * naming file and dataset. Every reader calls it before allocating. */
mp_status mp_h5_check_held(hid_t loc, const char *name, const mp_h5_dsinfo *info);
/* Reads the whole dataset converted to float32 / int32 into buf, which holds
 * `cap` elements (must equal the dataset's numel). Conversion is HDF5's,
 * except that a value outside int32's range (or a NaN/infinity) read as int32
 * is MP_ERR_FORMAT naming the dataset and the value, not saturated. */
mp_status mp_h5_read_f32_into(hid_t loc, const char *name, float *buf, size_t cap);
mp_status mp_h5_read_i32_into(hid_t loc, const char *name, int32_t *buf, size_t cap);
/* Allocating variants: *data (free()) and the shape in *info. */
mp_status mp_h5_read_f32(hid_t loc, const char *name, float **data, mp_h5_dsinfo *info);
mp_status mp_h5_read_i32(hid_t loc, const char *name, int32_t **data, mp_h5_dsinfo *info);

/* Creates dataset `path` (intermediate groups created; an existing link of
 * that name is replaced) of HDF5 memory type `type` (H5T_NATIVE_FLOAT or
 * H5T_NATIVE_INT32; stored little-endian). chunk NULL: contiguous layout and
 * `compress` ignored; otherwise chunked with shuffle+deflate when compress is
 * 1..9. fill (may be NULL) is the fill value for never-written elements.
 * *ds receives the open dataset (H5Dclose it). */
mp_status mp_h5_create_dataset(hid_t loc, const char *path, hid_t type, int ndim,
                               const int64_t *shape, const int64_t *chunk, int compress,
                               const void *fill, hid_t *ds);
/* Creates and writes a whole float32 / int32 dataset. compress 0: contiguous;
 * 1..9: chunked along axis 0 (about 1 MiB per chunk) with shuffle+deflate. */
mp_status mp_h5_write_f32(hid_t loc, const char *path, int ndim, const int64_t *shape,
                          const float *data, int compress);
mp_status mp_h5_write_i32(hid_t loc, const char *path, int ndim, const int64_t *shape,
                          const int32_t *data, int compress);

/* Chunk shape of about `target` bytes split along `axis` (axis < 0: 0): the
 * axes before it get 1, the axes after it their full extent, `axis` itself
 * max(1, min(extent, target / (elem * product of later extents))). Returns 0,
 * or -1 when some extent is 0 (use a contiguous layout then). */
int mp_h5_chunk_dims(int ndim, const int64_t *shape, int axis, size_t elem, size_t target,
                     int64_t *chunk);

/* ---- attributes ---- */
typedef enum {
    MP_H5_ATTR_INT = 0,     /* scalar integer (or boolean/enum) -> i */
    MP_H5_ATTR_FLOAT,       /* scalar float -> f */
    MP_H5_ATTR_STRING,      /* scalar string (fixed or variable length) -> s */
    MP_H5_ATTR_INT_ARRAY,   /* 1-D+ integer array -> iv[n] (flattened) */
    MP_H5_ATTR_FLOAT_ARRAY, /* 1-D+ float array -> fv[n] (flattened) */
    MP_H5_ATTR_UNSUPPORTED  /* any other type (compound, string array...) */
} mp_h5_attr_kind;

#define MP_H5_ATTR_MAXN (1u << 20) /* larger numeric arrays are rejected */

typedef struct {
    char *name;
    mp_h5_attr_kind kind;
    int64_t i;
    double f;
    char *s;
    size_t n;
    int64_t *iv;
    double *fv;
} mp_h5_attr;

/* All attributes of object `obj` (relative to loc; "/" or "." for loc). */
mp_status mp_h5_attrs_read(hid_t loc, const char *obj, mp_h5_attr **out, int *n);
void mp_h5_attrs_free(mp_h5_attr *a, int n);
/* One attribute; a missing one is MP_ERR_FORMAT naming file, object and key.
 * Free with mp_h5_attr_clear. */
mp_status mp_h5_attr_get(hid_t loc, const char *obj, const char *key, mp_h5_attr *out);
void mp_h5_attr_clear(mp_h5_attr *a);

/* Writers (replace an existing attribute of that name). Integers are stored
 * as int64, floats as float64, strings as fixed-length UTF-8 of their length
 * (h5py reads them as bytes: .decode()). Files are created with HDF5 1.8+
 * format objects (checksummed metadata). Reading accepts fixed- and
 * variable-length strings. */
mp_status mp_h5_attr_set_int(hid_t loc, const char *obj, const char *key, int64_t v);
mp_status mp_h5_attr_set_float(hid_t loc, const char *obj, const char *key, double v);
mp_status mp_h5_attr_set_string(hid_t loc, const char *obj, const char *key, const char *v);
mp_status mp_h5_attr_set_ints(hid_t loc, const char *obj, const char *key, const int64_t *v, size_t n);
mp_status mp_h5_attr_set_floats(hid_t loc, const char *obj, const char *key, const double *v, size_t n);

#endif
