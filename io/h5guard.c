/* h5guard.c — validating untrusted HDF5 files before mp.h5.open reads them
 * in-process (h5guard.h). libhdf5 can crash or loop on a corrupt file (a bad
 * B-tree, heap or object header), which no check in this process can bound,
 * so a child process walks the file first: a fresh image of this program
 * (/proc/self/exe, found by the constructor below; a fork where it cannot be
 * started) with an address-space limit, a time limit and no HDF5 plugins. It
 * visits every object reachable by hard links (at most MP_H5_MAX_OBJECTS, at
 * most MP_H5_MAX_DEPTH groups deep), lists each group, reads each object's
 * attributes and each dataset's header through the same functions the
 * in-process reader uses, and reads each dataset's data in blocks (or, for a
 * file over MP_H5_CHECK_FULL_MAX, walks its chunk index). The parent turns a
 * child that crashed, ran out of time or broke off into an error naming the
 * file (the child process and its supervision: sandbox.c). Files that passed, and files this process wrote, are remembered by
 * identity (device, inode, size, modification and change times). */
#define _GNU_SOURCE
#include "h5guard.h"
#include "guard_spawn.h"
#include "h5io_priv.h"
#include "sandbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define H5G_MAGIC 0x4b484d4du             /* "MHK" */
#define H5G_BLOCK ((size_t)4 << 20)      /* bytes of data read at a time by the walk */
#define H5G_ENV "MECHPROBE_H5_VALIDATOR"

/* ---- file identity and the files this process trusts ---- */

mp_status mp_h5_fileid_of(const char *path, mp_h5_fileid *id) {
    struct stat sb;
    memset(id, 0, sizeof *id);
    if (!path || stat(path, &sb) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path ? path : "?", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return mp_error(MP_ERR_IO, "%s: cannot open: not a regular file", path);
    id->dev = (uint64_t)sb.st_dev;
    id->ino = (uint64_t)sb.st_ino;
    id->size = (uint64_t)sb.st_size;
    id->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
    return MP_OK;
}

int mp_h5_fileid_same(const mp_h5_fileid *a, const mp_h5_fileid *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
           a->ctime_ns == b->ctime_ns;
}

int mp_h5_file_is(hid_t f, const mp_h5_fileid *id) {
    int fd = mp_h5_file_fd(f), r = -1; /* sec2, or mechprobe's driver given the descriptor */
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0) {
        mp_h5_fileid now = {(uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                            (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec,
                            (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec};
        if (id->size == 0 && id->mtime_ns == -1) r = now.dev == id->dev && now.ino == id->ino; /* the inode only */
        else r = mp_h5_fileid_same(&now, id);
    }
    return r;
}

#define H5G_KNOWN 256
static pthread_mutex_t known_mu = PTHREAD_MUTEX_INITIALIZER;
static mp_h5_fileid known[H5G_KNOWN];
static unsigned n_known, next_known;

static void trust_id(const mp_h5_fileid *id) {
    pthread_mutex_lock(&known_mu);
    int found = 0;
    for (unsigned i = 0; i < n_known && !found; i++) found = mp_h5_fileid_same(&known[i], id);
    if (!found) {
        known[next_known] = *id;
        next_known = (next_known + 1) % H5G_KNOWN;
        if (n_known < H5G_KNOWN) n_known++;
    }
    pthread_mutex_unlock(&known_mu);
}

void mp_h5_trust_note(const char *path) {
    mp_h5_fileid id;
    int e = errno;
    if (mp_h5_fileid_of(path, &id) == MP_OK) trust_id(&id);
    errno = e;
}

int mp_h5_trust_known(const mp_h5_fileid *id) {
    pthread_mutex_lock(&known_mu);
    int found = 0;
    for (unsigned i = 0; i < n_known && !found; i++) found = mp_h5_fileid_same(&known[i], id);
    pthread_mutex_unlock(&known_mu);
    return found;
}

int mp_h5_path_depth(const char *path) {
    int n = 0;
    for (const char *p = path; p && *p;) {
        while (*p == '/') p++;
        if (!*p) break;
        n++;
        while (*p && *p != '/') p++;
    }
    return n;
}

/* ---- the walk ---- */

typedef struct {
    hid_t f;
    const char *file;
    int full;
    unsigned nobj;
    haddr_t *seen; /* open addressing, HADDR_UNDEF = empty */
    size_t cap;
    void *buf;
    mp_status st;
    unsigned long nlinks; /* links visited */
    int stop;             /* a bound was broken: the file is refused with st */
} walk_t;

/* 1 when addr was seen before (else records it); -1 out of memory */
static int seen_before(walk_t *w, haddr_t addr) {
    if (w->nobj * 2 >= w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        haddr_t *s = malloc(cap * sizeof *s);
        if (!s) return -1;
        for (size_t i = 0; i < cap; i++) s[i] = HADDR_UNDEF;
        for (size_t i = 0; i < w->cap; i++) {
            if (w->seen[i] == HADDR_UNDEF) continue;
            size_t h = (size_t)(w->seen[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
            while (s[h] != HADDR_UNDEF) h = (h + 1) & (cap - 1);
            s[h] = w->seen[i];
        }
        free(w->seen);
        w->seen = s;
        w->cap = cap;
    }
    size_t h = (size_t)(addr * 0x9E3779B97F4A7C15ull) & (w->cap - 1);
    while (w->seen[h] != HADDR_UNDEF) {
        if (w->seen[h] == addr) return 1;
        h = (h + 1) & (w->cap - 1);
    }
    w->seen[h] = addr;
    w->nobj++;
    return 0;
}

/* Problems the in-process reader reports as a refusal of one object (an
 * unsupported type, a link leaving the file...) are not the walk's business;
 * the HDF5 library failing on the file, a bound broken or memory running out
 * is. */
static int fatal(mp_status st) { return st != MP_OK && st != MP_ERR_FORMAT && st != MP_ERR_ARG; }

typedef struct {
    walk_t *w;
    uint64_t first;
} block_ctx;

/* Reads the open dataset ds through memory type mtype in blocks of at most
 * H5G_BLOCK bytes (the whole of the last axes that fit, the first axes one
 * index at a time). */
static mp_status read_blocks(walk_t *w, const char *name, hid_t ds, const mp_h5_dsinfo *info) {
    mp_status st = MP_OK;
    const size_t elem = sizeof(double);
    int nd = info->ndim;
    if (nd == 0 || info->numel == 0) {
        double v;
        if (info->numel && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
            return mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot read");
        return MP_OK;
    }
    /* k: the first axis whose trailing block fits */
    int k = 0;
    size_t inner = info->numel;
    while (k < nd - 1 && inner * elem > H5G_BLOCK) { inner /= (size_t)info->shape[k]; k++; }
    /* inner = product of shape[k..]; the block takes c indices along k */
    size_t after = inner / (size_t)info->shape[k];
    size_t c = H5G_BLOCK / (after * elem);
    if (c < 1) c = 1;
    if (c > (size_t)info->shape[k]) c = (size_t)info->shape[k];
    if (!w->buf && !(w->buf = mp_malloc(H5G_BLOCK > c * after * elem ? H5G_BLOCK : c * after * elem, "a block of data")))
        return MP_ERR_NOMEM;
    hid_t fs = H5Dget_space(ds), ms = H5I_INVALID_HID;
    if (fs < 0) return mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot read dataset shape");
    hsize_t start[MP_H5_MAXDIM] = {0}, count[MP_H5_MAXDIM];
    for (int i = 0; i < nd; i++) count[i] = i < k ? 1 : (hsize_t)info->shape[i];
    for (;;) {
        hsize_t n = (hsize_t)info->shape[k] - start[k];
        count[k] = n < c ? n : c;
        hsize_t mcount = count[k] * after;
        ms = H5Screate_simple(1, &mcount, NULL);
        if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, w->buf) < 0) {
            st = mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot read");
            break;
        }
        H5Sclose(ms);
        ms = H5I_INVALID_HID;
        /* next block: along k, then carry into the axes before it */
        start[k] += count[k];
        int i = k;
        while (i >= 0 && start[i] >= (hsize_t)info->shape[i]) {
            start[i] = 0;
            i--;
            if (i >= 0) start[i]++;
        }
        if (i < 0) break;
    }
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    return st;
}

static mp_status walk_dataset(walk_t *w, const char *name) {
    mp_h5_dsinfo info;
    mp_status st = mp_h5_dataset_info(w->f, name, &info);
    if (st != MP_OK) return st;
    if ((st = mp_h5_check_held(w->f, name, &info)) != MP_OK) return st;
    hid_t ds = H5Dopen2(w->f, name, H5P_DEFAULT);
    if (ds < 0) return mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot open dataset");
    hid_t dcpl = H5Dget_create_plist(ds);
    int chunked = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (chunked) { /* walks the whole chunk index */
        hid_t fs = H5Dget_space(ds);
        hsize_t nchunks = 0;
        if (fs < 0 || H5Dget_num_chunks(ds, fs, &nchunks) < 0) st = mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot read the chunk index");
        if (fs >= 0) H5Sclose(fs);
    }
    if (st == MP_OK && w->full) st = read_blocks(w, name, ds, &info);
    H5Dclose(ds);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

static mp_status walk_object(walk_t *w, const char *name, H5O_type_t type, int depth);

typedef struct {
    walk_t *w;
    const char *group;
    int depth;
} iter_ctx;

static herr_t walk_link(hid_t g, const char *lname, const H5L_info_t *li, void *u) {
    (void)g;
    iter_ctx *c = u;
    walk_t *w = c->w;
    if (++w->nlinks > 4ul * MP_H5_MAX_OBJECTS) {
        w->st = mp_h5_fail_plain(MP_ERR_FORMAT, w->f, c->group, "more than %lu links in the file (refused: at most "
                                 "that many are visited)", 4ul * MP_H5_MAX_OBJECTS);
        w->stop = 1;
        return -1;
    }
    size_t gl = strlen(c->group), nl = strlen(lname);
    char *path = malloc(gl + nl + 2);
    if (!path) { w->st = mp_error(MP_ERR_NOMEM, "%s: out of memory walking the file", w->file); return -1; }
    snprintf(path, gl + nl + 2, "%s%s%s", c->group, gl && c->group[gl - 1] == '/' ? "" : "/", lname);
    mp_status st = MP_OK;
    if (li->type == H5L_TYPE_HARD) {
        H5O_info_t oi;
        if (H5Oget_info_by_name2(w->f, path, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
            st = mp_h5_fail(MP_ERR_HDF5, w->f, path, "cannot read the object header");
        } else {
            int s = seen_before(w, oi.addr);
            if (s < 0) st = mp_error(MP_ERR_NOMEM, "%s: out of memory walking the file", w->file);
            else if (s == 0 && w->nobj > MP_H5_MAX_OBJECTS) {
                st = mp_h5_fail_plain(MP_ERR_FORMAT, w->f, "/", "more than %u objects in the file (refused: at most "
                                      "that many are visited)", MP_H5_MAX_OBJECTS);
                w->stop = 1;
            } else if (s == 0 && c->depth + 1 > MP_H5_MAX_DEPTH) {
                st = mp_h5_fail_plain(MP_ERR_FORMAT, w->f, "/", "objects nested more than %d groups deep (refused)",
                                      MP_H5_MAX_DEPTH);
                w->stop = 1;
            } else if (s == 0) {
                st = walk_object(w, path, oi.type, c->depth + 1);
            }
        }
    } else if (li->type == H5L_TYPE_SOFT) {
        /* resolving it is what a reader does; its target is visited by its hard link */
        hid_t o = H5Oopen(w->f, path, H5P_DEFAULT);
        if (o >= 0) H5Oclose(o);
    } /* external and user-defined links are never followed */
    H5Eclear2(H5E_DEFAULT);
    free(path);
    if (w->stop) { if (st != MP_OK) w->st = st; return -1; }
    if (fatal(st)) { w->st = st; return -1; }
    return 0;
}

static mp_status walk_object(walk_t *w, const char *name, H5O_type_t type, int depth) {
    mp_h5_attr *a = NULL;
    int n = 0;
    mp_status st = mp_h5_attrs_read(w->f, name, &a, &n);
    mp_h5_attrs_free(a, n);
    if (fatal(st)) return st;
    if (type == H5O_TYPE_DATASET) {
        st = walk_dataset(w, name);
        return fatal(st) ? st : MP_OK;
    }
    if (type != H5O_TYPE_GROUP) return MP_OK;
    H5G_info_t gi;
    hid_t g = H5Gopen2(w->f, name, H5P_DEFAULT);
    if (g < 0 || H5Gget_info(g, &gi) < 0) {
        st = mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot open group");
        if (g >= 0) H5Gclose(g);
        return st;
    }
    if (gi.nlinks > (hsize_t)MP_H5_MAX_OBJECTS) {
        H5Gclose(g);
        w->stop = 1;
        return mp_h5_fail_plain(MP_ERR_FORMAT, w->f, name, "%llu links in one group, more than %u (refused)",
                                (unsigned long long)gi.nlinks, MP_H5_MAX_OBJECTS);
    }
    mp_h5_entry *e = NULL;
    st = mp_h5_list(w->f, name, &e, &n); /* as f:list does it */
    mp_h5_list_free(e, n);
    if (fatal(st)) { H5Gclose(g); return st; }
    iter_ctx c = {w, name, depth};
    hsize_t idx = 0;
    w->st = MP_OK;
    herr_t r = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_link, &c);
    st = w->st;
    if (r < 0 && st == MP_OK) st = mp_h5_fail(MP_ERR_HDF5, w->f, name, "cannot list the group");
    H5Gclose(g);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

mp_status mp_h5_walk(const char *path, int full_read) {
    mp_h5_init();
    walk_t w = {H5I_INVALID_HID, path, full_read, 0, NULL, 0, NULL, MP_OK, 0, 0};
    mp_status st = mp_h5_open(&w.f, path, MP_H5_READ);
    if (st != MP_OK) return st;
    H5O_info_t oi;
    if (H5Oget_info2(w.f, &oi, H5O_INFO_BASIC) < 0) st = mp_h5_fail(MP_ERR_HDF5, w.f, "/", "cannot read the root group");
    else if (seen_before(&w, oi.addr) < 0) st = mp_error(MP_ERR_NOMEM, "%s: out of memory walking the file", path);
    else st = walk_object(&w, "/", H5O_TYPE_GROUP, 0);
    free(w.seen);
    free(w.buf);
    mp_status cs = mp_h5_close(&w.f);
    if (st == MP_OK && cs != MP_OK) st = cs;
    return st;
}

/* ---- the child (sandbox.h) ---- */

static _Noreturn void child_main(int fd, const char *path, int full, unsigned timeout) {
    mp_sandbox_child_begin(timeout);
    mp_status st = mp_h5_walk(path, full);
    uint32_t hdr[2] = {H5G_MAGIC, (uint32_t)st};
    mp_sandbox_write(fd, hdr, sizeof hdr);
    const char *msg = st ? mp_last_error() : "";
    uint32_t len = (uint32_t)strlen(msg);
    if (len > 4000) len = 4000;
    mp_sandbox_write(fd, &len, sizeof len);
    mp_sandbox_write(fd, msg, len);
    _exit(0);
}

__attribute__((constructor)) static void h5_validator_entry(void) {
    int fd, full, used = 0;
    unsigned timeout;
    const char *task = mp_guard_task(H5G_ENV, &fd); /* NULL unless a genuine parent set it (guard_spawn.h) */
    if (!task) return;
    if (sscanf(task, "%d,%u,%n", &full, &timeout, &used) != 2 || used == 0 || task[used] == '\0' || full < 0 ||
        full > 1 || timeout > 10000000u) {
        unsetenv(H5G_ENV);
        return;
    }
    child_main(fd, task + used, full, timeout);
}

/* The fork fallback's child (sandbox.h). */
typedef struct {
    const char *path;
    int full;
    unsigned timeout;
} check_task;

static void check_run(int fd, void *arg) {
    const check_task *t = arg;
    child_main(fd, t->path, t->full, t->timeout);
}

/* Seconds the check may take: g->timeout_s, else the checkpoint loader's (mp_guard_timeout). */
static double check_timeout(const mp_h5_guard *g, uint64_t fsize) {
    return g && g->timeout_s > 0 ? g->timeout_s : mp_guard_timeout(fsize);
}

mp_status mp_h5_validate(const char *path, const mp_h5_guard *g) {
    mp_h5_init();
    mp_h5_fileid id;
    mp_status st = mp_h5_fileid_of(path, &id);
    if (st != MP_OK) return st;
    if (access(path, R_OK) != 0) return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (mp_h5_trust_known(&id)) return MP_OK;
    double timeout = check_timeout(g, id.size);
    check_task t = {path, id.size <= MP_H5_CHECK_FULL_MAX, (unsigned)timeout + 1};
    size_t tlen = strlen(path) + 32;
    char *task = malloc(tlen); /* NULL: the fork fallback */
    if (task) snprintf(task, tlen, "%d,%u,%s", t.full, t.timeout, path);
    const mp_sandbox_spec spec = {H5G_ENV, (const void *)&h5_validator_entry, task, "mechprobe (HDF5 file check)",
                                  g && g->fork_only, check_run, &t,
                                  "check the file", "checking the HDF5 file", "HDF5 file", "check"};
    mp_sandbox sb;
    st = mp_sandbox_start(&sb, &spec, path, timeout);
    free(task);
    if (st != MP_OK) return st;
    uint32_t hdr[2] = {0, 0}, len = 0;
    char msg[4001];
    int r = mp_sandbox_read(&sb, hdr, sizeof hdr);
    if (r == 0 && hdr[0] != H5G_MAGIC) r = -1;
    if (r == 0) r = mp_sandbox_read(&sb, &len, sizeof len);
    if (r == 0 && len > 4000) r = -1;
    if (r == 0) r = mp_sandbox_read(&sb, msg, len);
    if (mp_sandbox_end(&sb, r == 0) && r == 0) {
        if (hdr[1] == MP_OK) {
            mp_h5_fileid now;
            if (mp_h5_fileid_of(path, &now) == MP_OK && mp_h5_fileid_same(&now, &id)) trust_id(&id);
            return MP_OK;
        }
        msg[len] = '\0';
        st = (mp_status)hdr[1];
        if (st == MP_ERR_NOMEM) /* the child's address-space limit */
            return mp_error(MP_ERR_FORMAT, "%s: corrupt or hostile HDF5 file: reading it needs more memory than "
                            "the file's size justifies (%s)", path, msg);
        if (strncmp(msg, path, strlen(path)) == 0) return mp_error(MP_ERR_FORMAT, "%s", msg);
        return mp_error(MP_ERR_FORMAT, "%s: %s", path, msg);
    }
    return mp_sandbox_failure(&sb);
}
