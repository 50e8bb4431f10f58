/* h5io.c — the small HDF5 layer of mechprobe: files (plain and atomic), group
 * listing, numeric dataset reading as float32/int32, attributes as tagged
 * values, dataset writing. HDF5 failures become mp_status messages that name
 * the file and object and end with the innermost HDF5 error description. */
#include "h5io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- errors ---- */

/* mp_common.c calls this from mp_init() when set (runtime stays HDF5-free). */
extern void (*mp_init_hdf5_hook)(void);

void mp_h5_init(void) {
    /* The automatic-printing setting belongs to the per-thread error stack in
     * thread-safe builds, so remember it per thread. */
    static _Thread_local int done = 0;
    if (done) return;
    done = 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

__attribute__((constructor)) static void h5io_register(void) { mp_init_hdf5_hook = mp_h5_init; }

typedef struct {
    char desc[320];
} walk_ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *u) {
    (void)n;
    walk_ctx *c = u;
    if (c->desc[0]) return 0;
    if (e->desc && e->desc[0]) {
        snprintf(c->desc, sizeof c->desc, "%s", e->desc);
    } else {
        char msg[256];
        if (H5Eget_msg(e->min_num, NULL, msg, sizeof msg) > 0) snprintf(c->desc, sizeof c->desc, "%s", msg);
    }
    return 0;
}

/* Innermost description on the current error stack (walked upward: the first
 * entry is where the error was detected), then clears the stack. */
static void h5_innermost(char *buf, size_t n) {
    walk_ctx c;
    c.desc[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &c);
    H5Eclear2(H5E_DEFAULT);
    snprintf(buf, n, "%s", c.desc);
}

mp_status mp_h5_error(mp_status s, const char *fmt, ...) {
    char desc[320], what[1024];
    h5_innermost(desc, sizeof desc);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (desc[0]) return mp_error(s, "%s: %s", what, desc);
    return mp_error(s, "%s", what);
}

const char *mp_h5_filename(hid_t loc, char *buf, size_t n) {
    if (n == 0) return buf;
    ssize_t r = loc >= 0 ? H5Fget_name(loc, buf, n) : -1;
    if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        snprintf(buf, n, "?");
    }
    return buf;
}

/* "<file>: <obj>: <what>[: <hdf5 description>]". with_desc: the failure came
 * from HDF5 (read the error stack before anything clears it). */
static mp_status vfail(mp_status s, int with_desc, hid_t loc, const char *obj, const char *fmt, va_list ap) {
    char desc[320], what[768], file[512];
    desc[0] = '\0';
    if (with_desc) h5_innermost(desc, sizeof desc);
    else H5Eclear2(H5E_DEFAULT);
    vsnprintf(what, sizeof what, fmt, ap);
    mp_h5_filename(loc, file, sizeof file);
    if (desc[0]) return mp_error(s, "%s: %s: %s: %s", file, obj, what, desc);
    return mp_error(s, "%s: %s: %s", file, obj, what);
}

__attribute__((format(printf, 4, 5)))
static mp_status fail_h5(mp_status s, hid_t loc, const char *obj, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mp_status r = vfail(s, 1, loc, obj, fmt, ap);
    va_end(ap);
    return r;
}

__attribute__((format(printf, 4, 5)))
static mp_status fail_plain(mp_status s, hid_t loc, const char *obj, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mp_status r = vfail(s, 0, loc, obj, fmt, ap);
    va_end(ap);
    return r;
}

static const char *objname(const char *p) { return (p && *p) ? p : "."; }

/* ---- files ---- */

/* File access properties: closing the file closes every object still open in
 * it, so close/commit/abort never leave a half-open file behind. */
static hid_t strong_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

mp_status mp_h5_open(hid_t *out, const char *path, mp_h5_mode mode) {
    mp_h5_init();
    *out = H5I_INVALID_HID;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "HDF5 file name is empty");
    mp_status st = MP_OK;
    hid_t fapl = strong_fapl();
    if (fapl < 0) return mp_h5_error(MP_ERR_HDF5, "%s: cannot open", path);
    int exists = access(path, F_OK) == 0;
    int err = errno;
    if (mode == MP_H5_TRUNC || (mode == MP_H5_APPEND && !exists)) {
        *out = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        if (*out < 0) st = mp_h5_error(MP_ERR_IO, "%s: cannot create", path);
        goto cleanup;
    }
    if (!exists) {
        st = mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        goto cleanup;
    }
    htri_t is = H5Fis_hdf5(path);
    if (is == 0) {
        st = mp_error(MP_ERR_FORMAT, "%s: cannot open: not an HDF5 file", path);
        goto cleanup;
    }
    if (is < 0) {
        err = access(path, R_OK) == 0 ? 0 : errno;
        if (err) st = mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(err));
        else st = mp_h5_error(MP_ERR_IO, "%s: cannot open", path);
        goto cleanup;
    }
    *out = H5Fopen(path, mode == MP_H5_READ ? H5F_ACC_RDONLY : H5F_ACC_RDWR, fapl);
    if (*out < 0) st = mp_h5_error(MP_ERR_IO, "%s: cannot open%s", path, mode == MP_H5_READ ? "" : " for writing");
cleanup:
    H5Pclose(fapl);
    return st;
}

mp_status mp_h5_close(hid_t *f) {
    if (!f || *f < 0) return MP_OK;
    mp_h5_init();
    char file[512];
    mp_h5_filename(*f, file, sizeof file);
    herr_t r = H5Fclose(*f);
    *f = H5I_INVALID_HID;
    if (r < 0) return mp_h5_error(MP_ERR_HDF5, "%s: cannot close (data may be incomplete)", file);
    return MP_OK;
}

mp_status mp_h5_atomic_create(mp_h5_atomic *a, const char *path) {
    mp_h5_init();
    mp_status st = MP_OK;
    hid_t fapl = H5I_INVALID_HID;
    int fd = -1;
    memset(a, 0, sizeof *a);
    a->file = H5I_INVALID_HID;
    if (!path || !*path) return mp_error(MP_ERR_ARG, "HDF5 file name is empty");
    size_t len = strlen(path);
    a->path = mp_malloc(len + 1, "a file name");
    a->tmp = mp_malloc(len + 16, "a file name");
    if (!a->path || !a->tmp) { st = MP_ERR_NOMEM; goto cleanup; }
    memcpy(a->path, path, len + 1);
    snprintf(a->tmp, len + 16, "%s.tmp.XXXXXX", path);
    fd = mkstemp(a->tmp);
    if (fd < 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot create (a temporary file in its directory): %s", path, strerror(errno));
        free(a->tmp);
        a->tmp = NULL;
        goto cleanup;
    }
    /* mkstemp makes 0600; give the result the permissions of a plain create.
     * (umask can only be read by setting it; done once, briefly.) */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot set permissions of %s: %s", path, a->tmp, strerror(errno));
        goto cleanup;
    }
    close(fd);
    fd = -1;
    fapl = strong_fapl();
    if (fapl < 0) { st = mp_h5_error(MP_ERR_HDF5, "%s: cannot create", path); goto cleanup; }
    a->file = H5Fcreate(a->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (a->file < 0) st = mp_h5_error(MP_ERR_IO, "%s: cannot create %s", path, a->tmp);
cleanup:
    if (fd >= 0) close(fd);
    if (fapl >= 0) H5Pclose(fapl);
    if (st != MP_OK) mp_h5_atomic_abort(a);
    return st;
}

/* fsync of a file or directory by name; returns errno or 0. */
static int sync_path(const char *p, int dir) {
    int fd = open(p, dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) return errno;
    int r = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return r;
}

mp_status mp_h5_atomic_commit(mp_h5_atomic *a) {
    mp_status st = MP_OK;
    int e;
    mp_h5_init();
    if (!a->tmp || a->file < 0) {
        st = mp_error(MP_ERR_ARG, "%s: atomic commit of a file that is not open", a->path ? a->path : "?");
        goto cleanup;
    }
    herr_t r = H5Fclose(a->file);
    a->file = H5I_INVALID_HID;
    if (r < 0) { st = mp_h5_error(MP_ERR_HDF5, "%s: cannot write (closing %s)", a->path, a->tmp); goto cleanup; }
    if ((e = sync_path(a->tmp, 0)) != 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot sync %s: %s", a->path, a->tmp, strerror(e));
        goto cleanup;
    }
    if (rename(a->tmp, a->path) != 0) {
        st = mp_error(MP_ERR_IO, "%s: cannot rename %s to it: %s", a->path, a->tmp, strerror(errno));
        goto cleanup;
    }
    free(a->tmp);
    a->tmp = NULL;
    /* Make the rename itself durable (best effort: some filesystems refuse). */
    char *d = strdup(a->path);
    if (d) { sync_path(dirname(d), 1); free(d); }
cleanup:
    mp_h5_atomic_abort(a);
    return st;
}

void mp_h5_atomic_abort(mp_h5_atomic *a) {
    if (!a) return;
    if (a->file >= 0) {
        mp_h5_init();
        H5Fclose(a->file);
        H5Eclear2(H5E_DEFAULT);
    }
    a->file = H5I_INVALID_HID;
    if (a->tmp) unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    a->tmp = a->path = NULL;
}

/* ---- groups ---- */

static int is_self(const char *p) { return !p || !*p || strcmp(p, ".") == 0 || strspn(p, "/") == strlen(p); }

/* Does every link along `path` exist? (H5Lexists fails, rather than answering
 * 0, when an intermediate group is missing, so walk the prefixes.) */
static int link_exists(hid_t loc, const char *path) {
    if (is_self(path)) return 1;
    size_t n = strlen(path);
    char *buf = malloc(n + 1);
    if (!buf) return 0;
    memcpy(buf, path, n + 1);
    int ok = 1;
    for (size_t i = 1; ok && i <= n; i++) {
        if (i < n && buf[i] != '/') continue;
        if (buf[i - 1] == '/') continue; /* "//" or leading "/" */
        char c = buf[i];
        buf[i] = '\0';
        ok = H5Lexists(loc, buf, H5P_DEFAULT) > 0;
        buf[i] = c;
    }
    free(buf);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

static mp_h5_kind kind_of(hid_t obj) {
    switch (H5Iget_type(obj)) {
    case H5I_GROUP:
    case H5I_FILE: return MP_H5_GROUP;
    case H5I_DATASET: return MP_H5_DATASET;
    default: return MP_H5_OTHER;
    }
}

int mp_h5_exists(hid_t loc, const char *path, mp_h5_kind *kind) {
    mp_h5_init();
    if (!link_exists(loc, path)) return 0;
    hid_t o = H5Oopen(loc, is_self(path) ? "." : path, H5P_DEFAULT);
    if (o < 0) { H5Eclear2(H5E_DEFAULT); return 0; }
    if (kind) *kind = kind_of(o);
    H5Oclose(o);
    return 1;
}

void mp_h5_list_free(mp_h5_entry *e, int n) {
    if (!e) return;
    for (int i = 0; i < n; i++) free(e[i].name);
    free(e);
}

mp_status mp_h5_list(hid_t loc, const char *group, mp_h5_entry **out, int *n) {
    mp_h5_init();
    mp_status st = MP_OK;
    mp_h5_entry *e = NULL;
    int count = 0;
    hid_t g = H5I_INVALID_HID;
    const char *gname = is_self(group) ? "." : group;
    mp_h5_kind kind;
    *out = NULL;
    *n = 0;
    if (!mp_h5_exists(loc, gname, &kind)) return fail_plain(MP_ERR_ARG, loc, objname(group), "no such group");
    if (kind != MP_H5_GROUP) return fail_plain(MP_ERR_ARG, loc, objname(group), "not a group");
    g = H5Oopen(loc, gname, H5P_DEFAULT);
    H5G_info_t gi;
    if (g < 0 || H5Gget_info(g, &gi) < 0) { st = fail_h5(MP_ERR_HDF5, loc, gname, "cannot open group"); goto cleanup; }
    if (gi.nlinks > (hsize_t)(1 << 30)) { st = fail_plain(MP_ERR_FORMAT, loc, gname, "too many links"); goto cleanup; }
    e = mp_calloc((size_t)gi.nlinks, sizeof *e, "a group listing");
    if (!e) { st = MP_ERR_NOMEM; goto cleanup; }
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
        if (len < 0) { st = fail_h5(MP_ERR_HDF5, loc, gname, "cannot list link %llu", (unsigned long long)i); goto cleanup; }
        char *name = mp_malloc((size_t)len + 1, "a link name");
        if (!name) { st = MP_ERR_NOMEM; goto cleanup; }
        if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)len + 1, H5P_DEFAULT) < 0) {
            free(name);
            st = fail_h5(MP_ERR_HDF5, loc, gname, "cannot list link %llu", (unsigned long long)i);
            goto cleanup;
        }
        e[count].name = name;
        e[count].kind = MP_H5_OTHER;
        count++;
        hid_t o = H5Oopen(g, name, H5P_DEFAULT);
        if (o >= 0) { e[count - 1].kind = kind_of(o); H5Oclose(o); }
        else H5Eclear2(H5E_DEFAULT); /* dangling soft/external link */
    }
cleanup:
    if (g >= 0) H5Oclose(g);
    if (st != MP_OK) { mp_h5_list_free(e, count); return st; }
    *out = e;
    *n = count;
    return MP_OK;
}

/* ---- datasets ---- */

/* Opens dataset `name` and fills info; *ds stays open for the caller. */
static mp_status open_dataset(hid_t loc, const char *name, mp_h5_dsinfo *info, hid_t *ds) {
    mp_status st = MP_OK;
    hid_t space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    mp_h5_kind kind;
    *ds = H5I_INVALID_HID;
    memset(info, 0, sizeof *info);
    if (!name || !*name) return fail_plain(MP_ERR_ARG, loc, "?", "empty dataset name");
    if (!mp_h5_exists(loc, name, &kind)) return fail_plain(MP_ERR_FORMAT, loc, name, "no such dataset");
    if (kind != MP_H5_DATASET) return fail_plain(MP_ERR_FORMAT, loc, name, "is a group, not a dataset");
    *ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (*ds < 0) { st = fail_h5(MP_ERR_HDF5, loc, name, "cannot open dataset"); goto cleanup; }
    type = H5Dget_type(*ds);
    space = H5Dget_space(*ds);
    if (type < 0 || space < 0) { st = fail_h5(MP_ERR_HDF5, loc, name, "cannot read dataset header"); goto cleanup; }
    H5T_class_t cls = H5Tget_class(type);
    info->is_int = cls == H5T_INTEGER;
    info->is_float = cls == H5T_FLOAT;
    if (!info->is_int && !info->is_float) {
        st = fail_plain(MP_ERR_FORMAT, loc, name, "not a numeric dataset (HDF5 type class %d)", (int)cls);
        goto cleanup;
    }
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    if (sc == H5S_NULL) { st = fail_plain(MP_ERR_FORMAT, loc, name, "dataset has no data (null dataspace)"); goto cleanup; }
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 0) { st = fail_h5(MP_ERR_HDF5, loc, name, "cannot read dataset shape"); goto cleanup; }
    if (nd > MP_H5_MAXDIM) {
        st = fail_plain(MP_ERR_FORMAT, loc, name, "rank %d exceeds the maximum of %d", nd, MP_H5_MAXDIM);
        goto cleanup;
    }
    hsize_t dims[MP_H5_MAXDIM];
    if (H5Sget_simple_extent_dims(space, dims, NULL) < 0) { st = fail_h5(MP_ERR_HDF5, loc, name, "cannot read dataset shape"); goto cleanup; }
    size_t numel = 1;
    info->ndim = nd;
    for (int i = 0; i < nd; i++) {
        if (dims[i] > (hsize_t)INT64_MAX || mp_mul_size(numel, (size_t)dims[i], &numel) ||
            mp_mul_size(numel, sizeof(double), &(size_t){0})) {
            st = fail_plain(MP_ERR_FORMAT, loc, name, "dataset size overflows");
            goto cleanup;
        }
        info->shape[i] = (int64_t)dims[i];
    }
    info->numel = numel;
cleanup:
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (st != MP_OK && *ds >= 0) { H5Dclose(*ds); *ds = H5I_INVALID_HID; }
    return st;
}

mp_status mp_h5_dataset_info(hid_t loc, const char *name, mp_h5_dsinfo *info) {
    mp_h5_init();
    hid_t ds;
    mp_status st = open_dataset(loc, name, info, &ds);
    if (st == MP_OK) H5Dclose(ds);
    return st;
}

/* The first filter in ds's pipeline that this libhdf5 cannot apply (h5py's
 * LZF, say) as "HDF5 filter LZF (id 32000) is not available ..." in what;
 * returns 0 when every filter is there. Without this a read of such a
 * dataset fails with a plugin loader's "can't open directory". */
static int missing_filter(hid_t ds, char *what, size_t n) {
    hid_t dcpl = H5Dget_create_plist(ds);
    int found = 0;
    int nf = dcpl < 0 ? 0 : H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf && !found; i++) {
        unsigned flags = 0;
        size_t nel = 0;
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nel, NULL, sizeof fname, fname, NULL);
        if (id < 0 || H5Zfilter_avail(id) > 0) continue;
        const char *label = id == 32000 ? "LZF" : id == 32001 ? "BLOSC" : id == 32004 ? "LZ4" : id == 307 ? "BZIP2"
                          : id == 32015 ? "Zstandard" : fname[0] ? fname : "unknown";
        snprintf(what, n, "HDF5 filter %s (id %d) is not available in this libhdf5, so the dataset cannot be read "
                 "(re-save it uncompressed or with gzip)", label, (int)id);
        found = 1;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Eclear2(H5E_DEFAULT);
    return found;
}

static mp_status read_into(hid_t loc, const char *name, hid_t mtype, void *buf, size_t cap, mp_h5_dsinfo *out) {
    mp_h5_init();
    mp_h5_dsinfo info;
    hid_t ds;
    mp_status st = open_dataset(loc, name, &info, &ds);
    if (st != MP_OK) return st;
    if (info.numel != cap) {
        st = fail_plain(MP_ERR_ARG, loc, name, "dataset has %zu elements, the buffer %zu", info.numel, cap);
        goto cleanup;
    }
    char nofilter[256];
    int lacks = info.numel > 0 && missing_filter(ds, nofilter, sizeof nofilter); /* before the read's error stack */
    if (info.numel > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        st = lacks ? fail_plain(MP_ERR_FORMAT, loc, name, "%s", nofilter) : fail_h5(MP_ERR_HDF5, loc, name, "cannot read");
cleanup:
    H5Dclose(ds);
    if (st == MP_OK && out) *out = info;
    return st;
}

mp_status mp_h5_read_f32_into(hid_t loc, const char *name, float *buf, size_t cap) {
    return read_into(loc, name, H5T_NATIVE_FLOAT, buf, cap, NULL);
}

mp_status mp_h5_read_i32_into(hid_t loc, const char *name, int32_t *buf, size_t cap) {
    return read_into(loc, name, H5T_NATIVE_INT32, buf, cap, NULL);
}

static mp_status read_alloc(hid_t loc, const char *name, hid_t mtype, size_t elem, void **data, mp_h5_dsinfo *info) {
    mp_h5_dsinfo tmp;
    mp_h5_dsinfo *in = info ? info : &tmp;
    *data = NULL;
    mp_status st = mp_h5_dataset_info(loc, name, in);
    if (st != MP_OK) return st;
    void *buf = mp_calloc(in->numel, elem, name);
    if (!buf) return MP_ERR_NOMEM;
    st = read_into(loc, name, mtype, buf, in->numel, in);
    if (st != MP_OK) { free(buf); return st; }
    *data = buf;
    return MP_OK;
}

mp_status mp_h5_read_f32(hid_t loc, const char *name, float **data, mp_h5_dsinfo *info) {
    return read_alloc(loc, name, H5T_NATIVE_FLOAT, sizeof(float), (void **)data, info);
}

mp_status mp_h5_read_i32(hid_t loc, const char *name, int32_t **data, mp_h5_dsinfo *info) {
    return read_alloc(loc, name, H5T_NATIVE_INT32, sizeof(int32_t), (void **)data, info);
}

int mp_h5_chunk_dims(int ndim, const int64_t *shape, int axis, size_t elem, size_t target, int64_t *chunk) {
    if (axis < 0) axis = 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return -1;
    double row = (double)elem;
    for (int i = 0; i < ndim; i++) {
        if (i < axis) chunk[i] = 1;
        else if (i > axis) { chunk[i] = shape[i]; row *= (double)shape[i]; }
    }
    if (axis < ndim) {
        double c = (double)target / row;
        int64_t tc = c < 1 ? 1 : (c > (double)shape[axis] ? shape[axis] : (int64_t)c);
        chunk[axis] = tc;
    }
    return 0;
}

static hid_t file_type_for(hid_t mtype) {
    if (H5Tequal(mtype, H5T_NATIVE_FLOAT) > 0) return H5T_IEEE_F32LE;
    if (H5Tequal(mtype, H5T_NATIVE_INT32) > 0) return H5T_STD_I32LE;
    if (H5Tequal(mtype, H5T_NATIVE_DOUBLE) > 0) return H5T_IEEE_F64LE;
    if (H5Tequal(mtype, H5T_NATIVE_INT64) > 0) return H5T_STD_I64LE;
    return mtype;
}

mp_status mp_h5_create_dataset(hid_t loc, const char *path, hid_t type, int ndim, const int64_t *shape,
                               const int64_t *chunk, int compress, const void *fill, hid_t *ds) {
    mp_h5_init();
    mp_status st = MP_OK;
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, lcpl = H5I_INVALID_HID;
    hsize_t dims[MP_H5_MAXDIM], cdims[MP_H5_MAXDIM];
    *ds = H5I_INVALID_HID;
    if (!path || !*path || is_self(path)) return fail_plain(MP_ERR_ARG, loc, objname(path), "bad dataset name");
    if (ndim < 0 || ndim > MP_H5_MAXDIM)
        return fail_plain(MP_ERR_ARG, loc, path, "rank %d outside 0..%d", ndim, MP_H5_MAXDIM);
    if (compress < 0 || compress > 9)
        return fail_plain(MP_ERR_ARG, loc, path, "compression level %d outside 0..9", compress);
    size_t esize = H5Tget_size(type), cbytes = esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fail_plain(MP_ERR_ARG, loc, path, "negative extent %lld in dim %d", (long long)shape[i], i + 1);
        dims[i] = (hsize_t)shape[i];
        if (chunk) {
            if (chunk[i] < 1 || chunk[i] > shape[i])
                return fail_plain(MP_ERR_ARG, loc, path, "chunk extent %lld outside 1..%lld in dim %d",
                                  (long long)chunk[i], (long long)shape[i], i + 1);
            cdims[i] = (hsize_t)chunk[i];
            if (mp_mul_size(cbytes, (size_t)chunk[i], &cbytes)) cbytes = SIZE_MAX;
        }
    }
    if (chunk && (ndim == 0 || cbytes >= ((size_t)1 << 32)))
        return fail_plain(MP_ERR_ARG, loc, path, "cannot chunk this dataset (chunks must be non-scalar and under 4 GiB)");

    /* Replace: unlink an existing object of that name first (HDF5 does not
     * reclaim its space; files are written once in practice). */
    if (link_exists(loc, path) && H5Ldelete(loc, path, H5P_DEFAULT) < 0) {
        st = fail_h5(MP_ERR_HDF5, loc, path, "cannot replace the existing object");
        goto cleanup;
    }
    lcpl = H5Pcreate(H5P_LINK_CREATE);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    space = ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    if (lcpl < 0 || dcpl < 0 || space < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        st = fail_h5(MP_ERR_HDF5, loc, path, "cannot create dataset");
        goto cleanup;
    }
    if (chunk) {
        if (H5Pset_chunk(dcpl, ndim, cdims) < 0 ||
            (compress > 0 && (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, (unsigned)compress) < 0))) {
            st = fail_h5(MP_ERR_HDF5, loc, path, "cannot set chunking/compression");
            goto cleanup;
        }
    }
    if (fill && H5Pset_fill_value(dcpl, type, fill) < 0) {
        st = fail_h5(MP_ERR_HDF5, loc, path, "cannot set the fill value");
        goto cleanup;
    }
    *ds = H5Dcreate2(loc, path, file_type_for(type), space, lcpl, dcpl, H5P_DEFAULT);
    if (*ds < 0) st = fail_h5(MP_ERR_HDF5, loc, path, "cannot create dataset");
cleanup:
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (lcpl >= 0) H5Pclose(lcpl);
    return st;
}

static mp_status write_whole(hid_t loc, const char *path, hid_t type, size_t elem, int ndim,
                             const int64_t *shape, const void *data, int compress) {
    int64_t chunk[MP_H5_MAXDIM];
    int chunked = compress > 0 && ndim > 0 &&
                  mp_h5_chunk_dims(ndim, shape, 0, elem, (size_t)1 << 20, chunk) == 0;
    hid_t ds;
    mp_status st = mp_h5_create_dataset(loc, path, type, ndim, shape, chunked ? chunk : NULL, compress, NULL, &ds);
    if (st != MP_OK) return st;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (numel > 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        st = fail_h5(MP_ERR_HDF5, loc, path, "cannot write");
    H5Dclose(ds);
    return st;
}

mp_status mp_h5_write_f32(hid_t loc, const char *path, int ndim, const int64_t *shape, const float *data, int compress) {
    return write_whole(loc, path, H5T_NATIVE_FLOAT, sizeof(float), ndim, shape, data, compress);
}

mp_status mp_h5_write_i32(hid_t loc, const char *path, int ndim, const int64_t *shape, const int32_t *data, int compress) {
    return write_whole(loc, path, H5T_NATIVE_INT32, sizeof(int32_t), ndim, shape, data, compress);
}

/* ---- attributes ---- */

void mp_h5_attr_clear(mp_h5_attr *a) {
    if (!a) return;
    free(a->name);
    free(a->s);
    free(a->iv);
    free(a->fv);
    memset(a, 0, sizeof *a);
}

void mp_h5_attrs_free(mp_h5_attr *a, int n) {
    if (!a) return;
    for (int i = 0; i < n; i++) mp_h5_attr_clear(&a[i]);
    free(a);
}

/* Integer value of `size` bytes (signed or not) at p. */
static int64_t int_at(const unsigned char *p, size_t size, int sgn) {
    switch (size) {
    case 1: return sgn ? (int64_t)*(const int8_t *)p : (int64_t)*(const uint8_t *)p;
    case 2: { int16_t s; uint16_t u; memcpy(&s, p, 2); memcpy(&u, p, 2); return sgn ? (int64_t)s : (int64_t)u; }
    case 4: { int32_t s; uint32_t u; memcpy(&s, p, 4); memcpy(&u, p, 4); return sgn ? (int64_t)s : (int64_t)u; }
    default: { int64_t s; memcpy(&s, p, 8); return s; }
    }
}

/* Reads the open attribute `aid` (named key, on object obj) into *out. */
static mp_status read_attr(hid_t loc, const char *obj, hid_t aid, const char *key, mp_h5_attr *out) {
    mp_status st = MP_OK;
    hid_t type = H5Aget_type(aid), space = H5Aget_space(aid), mtype = H5I_INVALID_HID;
    void *buf = NULL;
    memset(out, 0, sizeof *out);
    out->kind = MP_H5_ATTR_UNSUPPORTED;
    out->name = strdup(key);
    if (!out->name) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
    if (type < 0 || space < 0) { st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    hssize_t np = H5Sget_simple_extent_npoints(space);
    if (sc == H5S_NULL || np < 0) goto cleanup; /* unsupported: no value */
    int scalar = sc == H5S_SCALAR;
    H5T_class_t cls = H5Tget_class(type);
    if ((cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) && (size_t)np > MP_H5_ATTR_MAXN) {
        st = fail_plain(MP_ERR_FORMAT, loc, obj, "attribute '%s' has %lld values (more than %u)", key, (long long)np,
                        MP_H5_ATTR_MAXN);
        goto cleanup;
    }
    size_t n = (size_t)np;
    if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
        int isint = cls == H5T_INTEGER;
        void *dst;
        if (isint) dst = out->iv = mp_calloc(n, sizeof(int64_t), key);
        else dst = out->fv = mp_calloc(n, sizeof(double), key);
        if (!dst) { st = MP_ERR_NOMEM; goto cleanup; }
        if (n && H5Aread(aid, isint ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, dst) < 0) {
            st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
            goto cleanup;
        }
        out->n = n;
        if (scalar) {
            if (isint) { out->kind = MP_H5_ATTR_INT; out->i = out->iv[0]; out->f = (double)out->i; }
            else { out->kind = MP_H5_ATTR_FLOAT; out->f = out->fv[0]; }
        } else {
            out->kind = isint ? MP_H5_ATTR_INT_ARRAY : MP_H5_ATTR_FLOAT_ARRAY;
        }
    } else if (cls == H5T_ENUM) {
        /* Booleans written by h5py/numpy are enums over int8: read the raw
         * native integers behind the enum. */
        hid_t base = H5Tget_super(type);
        H5T_sign_t sg = base >= 0 ? H5Tget_sign(base) : H5T_SGN_ERROR;
        if (base >= 0) H5Tclose(base);
        mtype = H5Tget_native_type(type, H5T_DIR_ASCEND);
        size_t sz = mtype >= 0 ? H5Tget_size(mtype) : 0;
        if (sg == H5T_SGN_ERROR || (sz != 1 && sz != 2 && sz != 4 && sz != 8)) goto cleanup;
        buf = mp_calloc(n, sz, key);
        out->iv = mp_calloc(n, sizeof(int64_t), key);
        if (!buf || !out->iv) { st = MP_ERR_NOMEM; goto cleanup; }
        if (n && H5Aread(aid, mtype, buf) < 0) { st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
        for (size_t i = 0; i < n; i++) out->iv[i] = int_at((unsigned char *)buf + i * sz, sz, sg == H5T_SGN_2);
        out->n = n;
        if (scalar) { out->kind = MP_H5_ATTR_INT; out->i = out->iv[0]; out->f = (double)out->i; }
        else out->kind = MP_H5_ATTR_INT_ARRAY;
    } else if (cls == H5T_STRING && n == 1) {
        mtype = H5Tcopy(H5T_C_S1);
        if (mtype < 0) { st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key); goto cleanup; }
        H5Tset_cset(mtype, H5Tget_cset(type));
        if (H5Tis_variable_str(type) > 0) {
            char *p = NULL;
            if (H5Tset_size(mtype, H5T_VARIABLE) < 0 || H5Aread(aid, mtype, &p) < 0) {
                st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
                goto cleanup;
            }
            out->s = strdup(p ? p : "");
            if (p) H5free_memory(p);
        } else {
            size_t sz = H5Tget_size(type);
            if (sz == 0 || sz > MP_H5_ATTR_MAXN) goto cleanup;
            out->s = calloc(sz + 1, 1);
            if (!out->s) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
            if (H5Tset_size(mtype, sz + 1) < 0 || H5Tset_strpad(mtype, H5T_STR_NULLTERM) < 0 ||
                H5Aread(aid, mtype, out->s) < 0) {
                st = fail_h5(MP_ERR_HDF5, loc, obj, "cannot read attribute '%s'", key);
                goto cleanup;
            }
            out->s[sz] = '\0';
            if (H5Tget_strpad(type) == H5T_STR_SPACEPAD) {
                size_t l = strlen(out->s);
                while (l && out->s[l - 1] == ' ') out->s[--l] = '\0';
            }
        }
        if (!out->s) { st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); goto cleanup; }
        out->kind = MP_H5_ATTR_STRING;
    }
cleanup:
    free(buf);
    if (mtype >= 0) H5Tclose(mtype);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (st != MP_OK) mp_h5_attr_clear(out);
    return st;
}

typedef struct {
    hid_t loc;
    const char *obj;
    mp_h5_attr *a;
    int n, cap;
    mp_status st;
} attr_ctx;

static herr_t attr_cb(hid_t o, const char *name, const H5A_info_t *ai, void *u) {
    (void)ai;
    attr_ctx *c = u;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        mp_h5_attr *a = realloc(c->a, (size_t)cap * sizeof *a);
        if (!a) { c->st = mp_error(MP_ERR_NOMEM, "out of memory reading attributes"); return -1; }
        c->a = a;
        c->cap = cap;
    }
    hid_t aid = H5Aopen(o, name, H5P_DEFAULT);
    if (aid < 0) { c->st = fail_h5(MP_ERR_HDF5, c->loc, c->obj, "cannot open attribute '%s'", name); return -1; }
    c->st = read_attr(c->loc, c->obj, aid, name, &c->a[c->n]);
    H5Aclose(aid);
    if (c->st != MP_OK) return -1;
    c->n++;
    return 0;
}

static mp_status open_object(hid_t loc, const char *obj, hid_t *o) {
    const char *name = is_self(obj) ? "." : obj;
    *o = H5I_INVALID_HID;
    if (!mp_h5_exists(loc, name, NULL)) return fail_plain(MP_ERR_FORMAT, loc, objname(obj), "no such object");
    *o = H5Oopen(loc, name, H5P_DEFAULT);
    if (*o < 0) return fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot open");
    return MP_OK;
}

mp_status mp_h5_attrs_read(hid_t loc, const char *obj, mp_h5_attr **out, int *n) {
    mp_h5_init();
    hid_t o;
    *out = NULL;
    *n = 0;
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    attr_ctx c = {loc, objname(obj), NULL, 0, 0, MP_OK};
    herr_t r = H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, NULL, attr_cb, &c);
    if (c.st == MP_OK && r < 0) c.st = fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot list attributes");
    H5Oclose(o);
    if (c.st != MP_OK) { mp_h5_attrs_free(c.a, c.n); return c.st; }
    *out = c.a;
    *n = c.n;
    return MP_OK;
}

mp_status mp_h5_attr_get(hid_t loc, const char *obj, const char *key, mp_h5_attr *out) {
    mp_h5_init();
    hid_t o, aid = H5I_INVALID_HID;
    memset(out, 0, sizeof *out);
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    htri_t ex = H5Aexists(o, key);
    if (ex <= 0) {
        st = ex < 0 ? fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot look up attribute '%s'", key)
                    : fail_plain(MP_ERR_FORMAT, loc, objname(obj), "missing attribute '%s'", key);
        goto cleanup;
    }
    aid = H5Aopen(o, key, H5P_DEFAULT);
    if (aid < 0) { st = fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot open attribute '%s'", key); goto cleanup; }
    st = read_attr(loc, objname(obj), aid, key, out);
cleanup:
    if (aid >= 0) H5Aclose(aid);
    H5Oclose(o);
    return st;
}

/* Creates (replacing) attribute key on obj and writes buf. */
static mp_status attr_write(hid_t loc, const char *obj, const char *key, hid_t ftype, hid_t mtype,
                            hid_t space, const void *buf) {
    mp_h5_init();
    hid_t o, aid = H5I_INVALID_HID;
    if (!key || !*key) return fail_plain(MP_ERR_ARG, loc, objname(obj), "empty attribute name");
    mp_status st = open_object(loc, obj, &o);
    if (st != MP_OK) return st;
    htri_t ex = H5Aexists(o, key);
    if (ex < 0 || (ex > 0 && H5Adelete(o, key) < 0)) {
        st = fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot replace attribute '%s'", key);
        goto cleanup;
    }
    aid = H5Acreate2(o, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (aid < 0 || H5Awrite(aid, mtype, buf) < 0)
        st = fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot write attribute '%s'", key);
cleanup:
    if (aid >= 0) H5Aclose(aid);
    H5Oclose(o);
    return st;
}

static mp_status attr_write_n(hid_t loc, const char *obj, const char *key, hid_t ftype, hid_t mtype,
                              const void *buf, size_t n, int scalar) {
    mp_h5_init();
    hsize_t d = (hsize_t)n;
    hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &d, NULL);
    if (space < 0) return fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot write attribute '%s'", key);
    mp_status st = attr_write(loc, obj, key, ftype, mtype, space, buf);
    H5Sclose(space);
    return st;
}

mp_status mp_h5_attr_set_int(hid_t loc, const char *obj, const char *key, int64_t v) {
    return attr_write_n(loc, obj, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, 1, 1);
}

mp_status mp_h5_attr_set_float(hid_t loc, const char *obj, const char *key, double v) {
    return attr_write_n(loc, obj, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, 1);
}

mp_status mp_h5_attr_set_ints(hid_t loc, const char *obj, const char *key, const int64_t *v, size_t n) {
    return attr_write_n(loc, obj, key, H5T_STD_I64LE, H5T_NATIVE_INT64, v, n, 0);
}

mp_status mp_h5_attr_set_floats(hid_t loc, const char *obj, const char *key, const double *v, size_t n) {
    return attr_write_n(loc, obj, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, n, 0);
}

mp_status mp_h5_attr_set_string(hid_t loc, const char *obj, const char *key, const char *v) {
    mp_h5_init();
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        if (t >= 0) H5Tclose(t);
        return fail_h5(MP_ERR_HDF5, loc, objname(obj), "cannot write attribute '%s'", key);
    }
    const char *p = v ? v : "";
    mp_status st = attr_write_n(loc, obj, key, t, t, &p, 1, 1);
    H5Tclose(t);
    return st;
}
