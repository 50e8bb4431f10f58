/* h5stream.c — the HDF5 file driver of the files mechprobe writes (see
 * h5stream.h): POSIX reads and writes as in HDF5's sec2 driver, and large
 * aligned raw-data writes staged (copied, or recorded in place in buffers
 * lent to the writer) and written with O_DIRECT by an I/O thread, with
 * fdatasyncs along the way by a sync thread.
 * A file-access property list may carry an open descriptor (driver info
 * st_info): the driver then writes that file (through duplicates of the
 * descriptor) and never looks its name up. */
#define _GNU_SOURCE /* O_DIRECT */
#include "h5stream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ST_ALIGN ((size_t)4096)     /* O_DIRECT: offsets, lengths and buffers */
#define ST_BYTES ((size_t)4 << 20)  /* one staging buffer */
#define ST_N 8                      /* staging buffers: at most 32 MiB held */
#define ST_SEGS 128                 /* contiguous runs per buffer */
#define ST_SYNC ((size_t)16 << 20)  /* bytes written between two fdatasyncs of the sync thread */

typedef struct {
    haddr_t addr;
    size_t off, len;
} st_seg;

/* FREE -> FILLING (open: copies of writes are appended) -> QUEUED ->
 * WRITING (the I/O thread) -> FREE. mp_h5_stream_lend turns the open stage,
 * or a FREE one, LENT: the holder packs data into its end, and writes that
 * point there are recorded, not copied; handed back it is open again (or
 * queued, when another stage is open). An open stage is queued when full,
 * on a flush, and whenever the I/O thread is idle: the disk never waits
 * for a stage to fill, and a busy disk gets large writes. */
enum { ST_FREE = 0, ST_FILLING, ST_QUEUED, ST_WRITING, ST_LENT };

typedef struct {
    char *buf; /* ST_BYTES, page-aligned, from the pool on first use */
    size_t used;
    size_t lent_lo; /* LENT: the lent part is [lent_lo, used) */
    int nseg, state;
    int copying;    /* FILLING: a write is being copied in (without the lock) */
    st_seg seg[ST_SEGS];
} st_stage;

typedef struct {
    H5FD_t pub; /* first: HDF5 sees this */
    int fd;     /* buffered descriptor: reads, metadata, small writes */
    int dfd;    /* O_DIRECT descriptor of the same file, or -1 */
    haddr_t eoa, eof;
    dev_t dev;
    ino_t ino;
    pthread_mutex_t mu;
    pthread_cond_t job, done;
    st_stage st[ST_N];
    int filling;         /* the stage being filled, or -1 */
    int lent_segs;       /* segments recorded in lent stages (not yet queued) */
    int q[ST_N], qh, qn; /* submitted stages, oldest first */
    int started, stop, writing;
    pthread_t thr;
    size_t unsynced;     /* bytes the I/O thread wrote since it last asked for an fdatasync */
    pthread_t sthr;      /* the sync thread (started on the first request) */
    pthread_cond_t sjob; /* a request for it */
    int sstarted, swant, sstop;
    int err; /* first errno of the I/O thread, until reported */
    int defer;    /* mp_h5_stream_defer_errors: write errors are kept, not reported to HDF5 */
    int deferred; /* the first such error */
} st_file;

static unsigned long long stat_staged, stat_direct, stat_plain, stat_lent, stat_wait_ns;

void mp_h5_stream_get_stats(mp_h5_stream_stats *out) {
    out->staged_bytes = __atomic_load_n(&stat_staged, __ATOMIC_RELAXED);
    out->direct_bytes = __atomic_load_n(&stat_direct, __ATOMIC_RELAXED);
    out->plain_bytes = __atomic_load_n(&stat_plain, __ATOMIC_RELAXED);
    out->lent_bytes = __atomic_load_n(&stat_lent, __ATOMIC_RELAXED);
    out->wait_s = (double)__atomic_load_n(&stat_wait_ns, __ATOMIC_RELAXED) * 1e-9;
}

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* With f->mu held: waits for a stage to change state (a writer waiting for
 * a free staging buffer, the disk behind: counted in wait_s). */
static void wait_done_locked(st_file *f) {
    unsigned long long t0 = now_ns();
    pthread_cond_wait(&f->done, &f->mu);
    __atomic_add_fetch(&stat_wait_ns, now_ns() - t0, __ATOMIC_RELAXED);
}

/* An entry on HDF5's error stack worded like sec2's, which mp_h5_error reads
 * ("errno = N, error message = '...'"). */
static void push_errno(const char *func, hid_t maj, hid_t min, const char *what, int e) {
    H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, maj, min, "%s, errno = %d, error message = '%s'",
             what, e, strerror(e));
}

/* pwrite of all n bytes at off; 0 or an errno value. */
static int write_all(int fd, const char *p, size_t n, off_t off) {
    while (n) {
        ssize_t k = pwrite(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return EIO;
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* Writes the segments of stage s (O_DIRECT where the file has it; plain
 * where O_DIRECT is refused); 0 or the first errno. Adds the bytes written
 * directly to the counters. Called without f->mu by the I/O thread (the
 * stage is WRITING: nobody else touches it), with it for a lent stage. */
static int write_segs(const st_stage *s, int dfd, int fd) {
    int e = 0;
    unsigned long long direct = 0;
    for (int k = 0; k < s->nseg && !e; k++) {
        const st_seg *g = &s->seg[k];
        e = dfd >= 0 ? write_all(dfd, s->buf + g->off, g->len, (off_t)g->addr) : EINVAL;
        if (e == EINVAL) e = write_all(fd, s->buf + g->off, g->len, (off_t)g->addr); /* O_DIRECT refused */
        else if (!e) direct += g->len;
    }
    __atomic_add_fetch(&stat_direct, direct, __ATOMIC_RELAXED);
    return e;
}

/* The sync thread: an fdatasync of the file whenever the I/O thread asks
 * (after each ST_SYNC bytes it wrote), while the I/O thread goes on writing.
 * An O_DIRECT write is in the disk's cache, not yet durable: the flush that
 * makes it so (the host's write-back, on a virtual disk) then overlaps the
 * forward instead of all of it waiting in the commit's fsync. */
static void *sync_main(void *u) {
    st_file *f = u;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->swant && !f->sstop) pthread_cond_wait(&f->sjob, &f->mu);
        if (!f->swant) break;
        f->swant = 0;
        int fd = f->fd;
        pthread_mutex_unlock(&f->mu);
        int e = fdatasync(fd) == 0 ? 0 : errno;
        pthread_mutex_lock(&f->mu);
        /* (a file system without it says EINVAL: nothing to report) */
        if (e && e != EINVAL && e != EROFS && !f->err) f->err = e;
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void queue_locked(st_file *f, int i);

static void *io_main(void *u) {
    st_file *f = u;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->qn == 0 && !f->stop) pthread_cond_wait(&f->job, &f->mu);
        if (f->qn == 0) break;
        int i = f->q[f->qh];
        f->qh = (f->qh + 1) % ST_N;
        f->qn--;
        st_stage *s = &f->st[i];
        s->state = ST_WRITING;
        f->writing = 1;
        int dfd = f->dfd, fd = f->fd;
        pthread_mutex_unlock(&f->mu);
        int e = write_segs(s, dfd, fd);
        pthread_mutex_lock(&f->mu);
        f->writing = 0;
        if (e && !f->err) f->err = e;
        s->state = ST_FREE;
        for (int k = 0; k < s->nseg; k++) f->unsynced += s->seg[k].len;
        s->used = 0;
        s->nseg = 0;
        pthread_cond_broadcast(&f->done);
        /* idle: take what the open stage holds (no one copies into it now: we have the lock) */
        if (f->qn == 0 && f->filling >= 0 && !f->st[f->filling].copying && f->st[f->filling].nseg)
            queue_locked(f, f->filling);
        if (f->unsynced >= ST_SYNC && !e) {
            f->unsynced = 0;
            if (!f->sstarted) f->sstarted = pthread_create(&f->sthr, NULL, sync_main, f) == 0;
            f->swant = 1; /* (requests made while it syncs are one more fdatasync) */
            pthread_cond_signal(&f->sjob);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Staging buffers: mapped (page-aligned), and the last ST_N given back are
 * kept for the next file, already faulted in: a capture per forward would
 * otherwise fault and zero 32 MiB each time. At most ST_N buffers per open
 * file plus ST_N kept: memory stays bounded. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static char *pool[ST_N];
static int pool_n;

static char *buf_get(void) {
    char *b = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool_n) b = pool[--pool_n];
    pthread_mutex_unlock(&pool_mu);
    if (b) return b;
    void *m = mmap(NULL, ST_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void buf_put(char *b) {
    if (!b) return;
    pthread_mutex_lock(&pool_mu);
    if (pool_n < ST_N) {
        pool[pool_n++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    if (b) munmap(b, ST_BYTES);
}

/* With f->mu held: queues stage i (FILLING or LENT) for the I/O thread, or
 * frees it when it holds nothing. */
static void queue_locked(st_file *f, int i) {
    st_stage *s = &f->st[i];
    if (f->filling == i) f->filling = -1;
    if (s->state == ST_LENT) f->lent_segs -= s->nseg;
    if (s->nseg == 0) {
        s->state = ST_FREE;
        s->used = 0;
        pthread_cond_broadcast(&f->done);
        return;
    }
    s->state = ST_QUEUED;
    f->q[(f->qh + f->qn) % ST_N] = i;
    f->qn++;
    pthread_cond_signal(&f->job);
}

/* With f->mu held: queues the stage being filled. */
static void submit_locked(st_file *f) {
    if (f->filling >= 0) queue_locked(f, f->filling);
}

/* With f->mu held: writes the segments recorded in lent stages now, on this
 * thread (their data is final: HDF5 handed it over), so that a later write
 * of the same bytes, a read or a flush finds them in the file. The buffers
 * stay lent. Rare: HDF5 does not rewrite or read back the chunks it just
 * wrote. */
static void write_lent_locked(st_file *f) {
    if (f->lent_segs == 0) return;
    for (int i = 0; i < ST_N; i++) {
        st_stage *s = &f->st[i];
        if (s->state != ST_LENT || s->nseg == 0) continue;
        int e = write_segs(s, f->dfd, f->fd);
        if (e && !f->err) f->err = e;
        f->lent_segs -= s->nseg;
        s->nseg = 0;
    }
}

/* With f->mu held: waits until every staged byte is in the file. */
static void drain_locked(st_file *f) {
    write_lent_locked(f);
    for (;;) {
        /* (a stage being copied into is queued once the copy is in) */
        if (f->filling >= 0 && !f->st[f->filling].copying) submit_locked(f);
        int busy = 0;
        for (int i = 0; i < ST_N; i++) busy |= f->st[i].state != ST_FREE && f->st[i].state != ST_LENT;
        if (!busy) return;
        pthread_cond_wait(&f->done, &f->mu);
    }
}

/* With f->mu held: does [addr, addr+n) overlap data not yet in the file
 * (of the lent stages only, with lent_only)? */
static int overlaps_locked(const st_file *f, haddr_t addr, size_t n, int lent_only) {
    for (int i = 0; i < ST_N; i++) {
        const st_stage *s = &f->st[i];
        if (s->state == ST_FREE || (lent_only && s->state != ST_LENT)) continue;
        for (int k = 0; k < s->nseg; k++)
            if (addr < s->seg[k].addr + s->seg[k].len && s->seg[k].addr < addr + n) return 1;
    }
    return 0;
}

/* Waits for staged data overlapping [addr, addr+n) (all of it: simpler, and
 * rare: HDF5 does not read back the chunks it just wrote). */
static void settle(st_file *f, haddr_t addr, size_t n) {
    pthread_mutex_lock(&f->mu);
    if (overlaps_locked(f, addr, n, 0)) drain_locked(f);
    pthread_mutex_unlock(&f->mu);
}

/* Reports (and forgets) an I/O error of the thread: -1 with the error pushed. */
static int take_error(st_file *f, const char *func) {
    pthread_mutex_lock(&f->mu);
    int e = f->err;
    f->err = 0;
    if (e && f->defer) {
        if (!f->deferred) f->deferred = e;
        e = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (!e) return 0;
    push_errno(func, H5E_IO, H5E_WRITEERROR, "file write failed (staged raw data)", e);
    return -1;
}

/* The driver's property: a descriptor to use instead of opening the name
 * (-1: open the name, as sec2). */
typedef struct {
    int fd;
} st_info;

/* A second, O_DIRECT, open of the file that descriptor fd is open on,
 * through /proc/self/fd (the open file, not its name in a folder: a name
 * swapped meanwhile is not followed); -1 where that is not possible. */
static int reopen_direct(int fd) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    struct stat a, b;
    int d = open(p, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (d < 0) return -1;
    if (fstat(fd, &a) != 0 || fstat(d, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close(d);
        return -1;
    }
    return d;
}

static H5FD_t *st_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
    const st_info *info = fapl >= 0 ? H5Pget_driver_info(fapl) : NULL;
    int given = info && info->fd >= 0;
    H5Eclear2(H5E_DEFAULT);
    if ((!given && (!name || !*name)) || maxaddr == 0 || maxaddr == HADDR_UNDEF) {
        H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_ARGS, H5E_BADVALUE, "invalid file name or address");
        return NULL;
    }
    int fd;
    if (given) {
        fd = fcntl(info->fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0 && (flags & H5F_ACC_TRUNC) && ftruncate(fd, 0) != 0) {
            int e = errno;
            close(fd);
            errno = e;
            fd = -1;
        }
    } else {
        int o = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
        if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
        if (flags & H5F_ACC_CREAT) o |= O_CREAT;
        if (flags & H5F_ACC_EXCL) o |= O_EXCL;
        fd = open(name, o | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
        push_errno(__func__, H5E_FILE, H5E_CANTOPENFILE, "unable to open file", errno);
        return NULL;
    }
    struct stat sb;
    st_file *f = NULL;
    if (fstat(fd, &sb) != 0 || !(f = calloc(1, sizeof *f))) {
        int e = f ? errno : ENOMEM;
        close(fd);
        push_errno(__func__, H5E_FILE, H5E_CANTOPENFILE, "unable to open file", e);
        return NULL;
    }
    f->fd = fd;
    const char *env = getenv("MECHPROBE_DIRECT_IO"); /* "0": every write through the page cache */
    int direct = (flags & H5F_ACC_RDWR) && !(env && !strcmp(env, "0"));
    f->dfd = !direct ? -1 : given ? reopen_direct(fd) : open(name, O_WRONLY | O_DIRECT | O_CLOEXEC);
    f->eof = (haddr_t)sb.st_size;
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    f->filling = -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->job, NULL);
    pthread_cond_init(&f->done, NULL);
    pthread_cond_init(&f->sjob, NULL);
    return &f->pub;
}

static herr_t st_close(H5FD_t *file) {
    st_file *f = (st_file *)file;
    pthread_mutex_lock(&f->mu);
    drain_locked(f);
    f->stop = 1;
    pthread_cond_signal(&f->job);
    pthread_mutex_unlock(&f->mu);
    if (f->started) pthread_join(f->thr, NULL);
    pthread_mutex_lock(&f->mu);
    f->sstop = 1;
    f->swant = 0; /* the commit's fsync makes the file durable */
    pthread_cond_signal(&f->sjob);
    pthread_mutex_unlock(&f->mu);
    if (f->sstarted) pthread_join(f->sthr, NULL);
    int rc = take_error(f, __func__);
    if (close(f->fd) != 0 && rc == 0) {
        push_errno(__func__, H5E_IO, H5E_CANTCLOSEFILE, "unable to close file", errno);
        rc = -1;
    }
    if (f->dfd >= 0) close(f->dfd);
    for (int i = 0; i < ST_N; i++) buf_put(f->st[i].buf);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->job);
    pthread_cond_destroy(&f->done);
    pthread_cond_destroy(&f->sjob);
    free(f);
    return rc;
}

static int st_cmp(const H5FD_t *a, const H5FD_t *b) {
    const st_file *x = (const st_file *)a, *y = (const st_file *)b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return 0;
}

static herr_t st_query(const H5FD_t *file, unsigned long *flags) {
    (void)file;
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA | H5FD_FEAT_POSIX_COMPAT_HANDLE | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

static haddr_t st_get_eoa(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return ((const st_file *)file)->eoa;
}

static herr_t st_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr) {
    (void)type;
    ((st_file *)file)->eoa = addr;
    return 0;
}

static haddr_t st_get_eof(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return ((const st_file *)file)->eof;
}

static herr_t st_get_handle(H5FD_t *file, hid_t fapl, void **handle) {
    (void)fapl;
    *handle = &((st_file *)file)->fd;
    return 0;
}

/* [addr, addr+size) past the allocated end (or wrapping): 1, with the error pushed. */
static int out_of_range(const st_file *f, haddr_t addr, size_t size, const char *func) {
    if (addr != HADDR_UNDEF && addr + size >= addr && addr + size <= f->eoa) return 0;
    H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, H5E_ARGS, H5E_OVERFLOW,
             "addr overflow, addr = %llu, size = %zu, eoa = %llu", (unsigned long long)addr, size,
             (unsigned long long)f->eoa);
    return 1;
}

static herr_t st_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf) {
    (void)type;
    (void)dxpl;
    st_file *f = (st_file *)file;
    if (out_of_range(f, addr, size, __func__)) return -1;
    settle(f, addr, size);
    char *p = buf;
    off_t off = (off_t)addr;
    while (size) {
        ssize_t k = pread(f->fd, p, size > ((size_t)1 << 30) ? (size_t)1 << 30 : size, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            push_errno(__func__, H5E_IO, H5E_READERROR, "file read failed", errno);
            return -1;
        }
        if (k == 0) { /* past the end of the file: zeros, as sec2 */
            memset(p, 0, size);
            break;
        }
        p += k;
        size -= (size_t)k;
        off += k;
    }
    return 0;
}

/* With f->mu held: starts the I/O thread if it is not running; 0, or -1
 * when it cannot be started. */
static int start_locked(st_file *f) {
    if (!f->started) {
        if (pthread_create(&f->thr, NULL, io_main, f) != 0) return -1;
        f->started = 1;
    }
    return 0;
}

/* With f->mu held: a FREE stage with its buffer, marked `state`; waits
 * while the stages are queued or being written. -1 when none can come (no
 * memory, or every other stage is lent). */
static int take_stage_locked(st_file *f, int state) {
    for (;;) {
        int pending = 0;
        for (int i = 0; i < ST_N; i++) {
            st_stage *s = &f->st[i];
            if (s->state == ST_FREE) {
                if (!s->buf) s->buf = buf_get();
                if (!s->buf) return -1;
                s->state = state;
                s->used = 0;
                s->nseg = 0;
                return i;
            }
            pending |= s->state == ST_QUEUED || s->state == ST_WRITING;
        }
        if (!pending) return -1;
        wait_done_locked(f);
    }
}

/* With f->mu held: whether the I/O thread has nothing to write. */
static int io_idle_locked(const st_file *f) { return f->qn == 0 && !f->writing; }

/* Copies a write into the open stage (queueing it when full, or at once
 * when the I/O thread is idle). */
static int stage_write(st_file *f, haddr_t addr, size_t size, const void *buf) {
    pthread_mutex_lock(&f->mu);
    if (start_locked(f) != 0) {
        pthread_mutex_unlock(&f->mu);
        return 1; /* no thread: write it here */
    }
    /* stages are written in any order: earlier data of these bytes goes first */
    if (overlaps_locked(f, addr, size, 0)) drain_locked(f);
    if (f->filling >= 0) {
        st_stage *s = &f->st[f->filling];
        if (s->used + size > ST_BYTES || s->nseg == ST_SEGS) submit_locked(f);
    }
    if (f->filling < 0 && (f->filling = take_stage_locked(f, ST_FILLING)) < 0) {
        pthread_mutex_unlock(&f->mu);
        return 1; /* no staging: write it here */
    }
    st_stage *s = &f->st[f->filling];
    s->copying = 1; /* the I/O thread leaves it alone */
    pthread_mutex_unlock(&f->mu);
    memcpy(s->buf + s->used, buf, size);
    pthread_mutex_lock(&f->mu);
    s->copying = 0;
    pthread_cond_broadcast(&f->done);
    st_seg *last = s->nseg ? &s->seg[s->nseg - 1] : NULL;
    if (last && last->addr + last->len == addr && last->off + last->len == s->used)
        last->len += size;
    else
        s->seg[s->nseg++] = (st_seg){addr, s->used, size};
    s->used += size;
    if (io_idle_locked(f)) submit_locked(f);
    pthread_mutex_unlock(&f->mu);
    __atomic_add_fetch(&stat_staged, (unsigned long long)size, __ATOMIC_RELAXED);
    return 0;
}

/* A write whose bytes lie in a lent buffer is recorded there, not copied:
 * 0, or 1 when buf is not in a lent buffer (or the buffer has no room for
 * another segment). */
static int lent_write(st_file *f, haddr_t addr, size_t size, const void *buf) {
    const char *p = buf;
    int done = 1;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < ST_N && done; i++) {
        st_stage *s = &f->st[i];
        if (s->state != ST_LENT || p < s->buf + s->lent_lo || p + size > s->buf + s->used) continue;
        size_t off = (size_t)(p - s->buf);
        if (off % ST_ALIGN) break; /* O_DIRECT needs an aligned buffer */
        /* earlier data of these bytes, staged or lent, goes to the file first */
        if (overlaps_locked(f, addr, size, 0)) drain_locked(f);
        st_seg *last = s->nseg ? &s->seg[s->nseg - 1] : NULL;
        if (last && last->addr + last->len == addr && last->off + last->len == off) {
            last->len += size;
        } else if (s->nseg < ST_SEGS) {
            s->seg[s->nseg++] = (st_seg){addr, off, size};
            f->lent_segs++;
        } else {
            break;
        }
        done = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (!done) {
        __atomic_add_fetch(&stat_staged, (unsigned long long)size, __ATOMIC_RELAXED);
        __atomic_add_fetch(&stat_lent, (unsigned long long)size, __ATOMIC_RELAXED);
    }
    return done;
}

static herr_t st_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf) {
    (void)dxpl;
    st_file *f = (st_file *)file;
    if (out_of_range(f, addr, size, __func__)) return -1;
    if (take_error(f, __func__)) return -1;
    int direct = type == H5FD_MEM_DRAW && f->dfd >= 0 && size >= ST_ALIGN && size <= ST_BYTES &&
                 addr % ST_ALIGN == 0 && size % ST_ALIGN == 0;
    int staged = direct && (lent_write(f, addr, size, buf) == 0 || stage_write(f, addr, size, buf) == 0);
    if (!staged) {
        settle(f, addr, size);
        int e = write_all(f->fd, buf, size, (off_t)addr);
        if (e && f->defer) { /* kept for mp_h5_stream_deferred; HDF5 goes on */
            pthread_mutex_lock(&f->mu);
            if (!f->deferred) f->deferred = e;
            pthread_mutex_unlock(&f->mu);
            e = 0;
        }
        if (e) {
            push_errno(__func__, H5E_IO, H5E_WRITEERROR, "file write failed", e);
            return -1;
        }
        __atomic_add_fetch(&stat_plain, (unsigned long long)size, __ATOMIC_RELAXED);
    }
    if (addr + size > f->eof) f->eof = addr + size;
    return 0;
}

static herr_t st_flush(H5FD_t *file, hid_t dxpl, hbool_t closing) {
    (void)dxpl;
    (void)closing;
    st_file *f = (st_file *)file;
    pthread_mutex_lock(&f->mu);
    drain_locked(f);
    pthread_mutex_unlock(&f->mu);
    return take_error(f, __func__);
}

static herr_t st_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing) {
    (void)dxpl;
    (void)closing;
    st_file *f = (st_file *)file;
    pthread_mutex_lock(&f->mu);
    drain_locked(f);
    pthread_mutex_unlock(&f->mu);
    if (take_error(f, __func__)) return -1;
    if (f->eoa != f->eof) {
        if (ftruncate(f->fd, (off_t)f->eoa) != 0 && !(f->defer && (f->deferred = f->deferred ? f->deferred : errno))) {
            push_errno(__func__, H5E_IO, H5E_SEEKERROR, "unable to extend file properly", errno);
            return -1;
        }
        f->eof = f->eoa;
    }
    return 0;
}

/* Designated initializers: HDF5 1.10 (Debian 12) and 1.14 (Debian 13) lay
 * H5FD_class_t out differently. 1.14 (H5FD_CLASS_VERSION, from 1.13.2) opens
 * with a struct version and a driver value and adds read/write_vector,
 * read/write_selection, del and ctl; the callbacks below have the same
 * signatures in both, and every member not named here is NULL / 0. */
static const H5FD_class_t st_class = {
#ifdef H5FD_CLASS_VERSION
    .version = H5FD_CLASS_VERSION,
    .value = (H5FD_class_value_t)500, /* 256..511: drivers not registered with The HDF Group */
#endif
    .name = "mechprobe_stream",
    .maxaddr = (haddr_t)INT64_MAX, /* off_t */
    .fc_degree = H5F_CLOSE_WEAK,
    .terminate = NULL,
    /* no superblock driver info (sb_size, sb_encode, sb_decode): plain HDF5 files */
    .fapl_size = sizeof(st_info), /* the descriptor to use (copied as bytes) */
    .dxpl_size = 0,
    .open = st_open,
    .close = st_close,
    .cmp = st_cmp,
    .query = st_query,
    /* get_type_map, alloc, free: the library's */
    .get_eoa = st_get_eoa,
    .set_eoa = st_set_eoa,
    .get_eof = st_get_eof,
    .get_handle = st_get_handle,
    .read = st_read,
    .write = st_write,
#ifdef H5FD_CLASS_VERSION
    /* the library splits vector and selection I/O into read / write calls */
    .read_vector = NULL,
    .write_vector = NULL,
    .read_selection = NULL,
    .write_selection = NULL,
#endif
    .flush = st_flush,
    .truncate = st_truncate,
    .lock = NULL, /* lock, unlock: mechprobe writes temporary files of its own */
    .unlock = NULL,
#ifdef H5FD_CLASS_VERSION
    .del = NULL, /* H5Fdelete then fails ("no 'del' method"): mechprobe removes its files itself */
    .ctl = NULL, /* no driver-specific operations: as sec2's, an op that must be known fails */
#endif
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

static hid_t st_id = H5I_INVALID_HID;
static pthread_once_t st_once = PTHREAD_ONCE_INIT;
static void st_register(void) { st_id = H5FDregister(&st_class); }

hid_t mp_h5_stream_driver(void) {
    pthread_once(&st_once, st_register);
    return st_id;
}

herr_t mp_h5_stream_set_fd(hid_t fapl, int fd) {
    hid_t id = mp_h5_stream_driver();
    st_info info = {fd};
    if (id < 0) return -1;
    if (H5Pset_driver(fapl, id, &info) < 0) return -1;
    /* chunks of 4 KiB and more start on a 4 KiB boundary: O_DIRECT writes them */
    return H5Pset_alignment(fapl, ST_ALIGN, ST_ALIGN);
}

herr_t mp_h5_stream_set(hid_t fapl) { return mp_h5_stream_set_fd(fapl, -1); }

static st_file *file_of(hid_t f) {
    hid_t id = mp_h5_stream_driver(), fapl = H5Fget_access_plist(f);
    void *h = NULL;
    int ours = id >= 0 && fapl >= 0 && H5Pget_driver(fapl) == id;
    if (fapl >= 0) H5Pclose(fapl);
    if (ours && (H5Fget_vfd_handle(f, H5P_DEFAULT, &h) < 0 || !h)) ours = 0;
    H5Eclear2(H5E_DEFAULT);
    return ours ? (st_file *)((char *)h - offsetof(st_file, fd)) : NULL;
}

int mp_h5_stream_fd(hid_t f) {
    st_file *s = file_of(f);
    return s ? s->fd : -1;
}

int mp_h5_stream_redirect(hid_t f, int nfd) {
    st_file *s = file_of(f);
    if (!s) return -1;
    pthread_mutex_lock(&s->mu);
    /* what the thread has not started is dropped; the write in progress ends */
    for (int i = 0; i < ST_N; i++) {
        st_stage *g = &s->st[i];
        if (g->state == ST_FILLING || g->state == ST_QUEUED) {
            g->state = ST_FREE;
            g->used = 0;
            g->nseg = 0;
        }
    }
    s->filling = -1;
    s->qn = 0;
    for (int i = 0; i < ST_N; i++) /* lent buffers stay lent (their holder hands them back), emptied */
        if (s->st[i].state == ST_LENT) s->st[i].nseg = 0;
    s->lent_segs = 0;
    drain_locked(s);
    s->err = 0;
    if (nfd >= 0) {
        if (dup2(nfd, s->fd) < 0) { /* keep the original */ }
        if (s->dfd >= 0 && dup2(nfd, s->dfd) < 0) { /* idem */ }
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int mp_h5_stream_defer_errors(hid_t f, int on) {
    st_file *s = file_of(f);
    if (!s) return -1;
    pthread_mutex_lock(&s->mu);
    s->defer = on != 0;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int mp_h5_stream_deferred(hid_t f) {
    st_file *s = file_of(f);
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    if (s->defer && s->err && !s->deferred) s->deferred = s->err;
    if (s->defer) s->err = 0;
    int e = s->deferred;
    pthread_mutex_unlock(&s->mu);
    return e;
}

mp_h5_stream *mp_h5_stream_of(hid_t f) {
    st_file *s = file_of(f);
    return s && s->dfd >= 0 ? (mp_h5_stream *)s : NULL;
}

size_t mp_h5_stream_lend_max(void) { return ST_BYTES; }

void *mp_h5_stream_lend(mp_h5_stream *h, size_t bytes) {
    st_file *f = (st_file *)h;
    if (!f || bytes == 0 || bytes > ST_BYTES) return NULL;
    bytes = (bytes + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
    pthread_mutex_lock(&f->mu);
    int lent = 0, i = -1;
    size_t off = 0;
    for (int k = 0; k < ST_N; k++) lent += f->st[k].state == ST_LENT;
    if (start_locked(f) == 0) {
        if (f->filling >= 0) { /* the end of the open stage, when it has room */
            st_stage *s = &f->st[f->filling];
            off = (s->used + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
            if (off + bytes <= ST_BYTES && s->nseg < ST_SEGS && !s->copying) {
                i = f->filling;
                f->filling = -1;
                f->lent_segs += s->nseg; /* its copies count with what will be recorded in it */
            } else if (!s->copying) {
                submit_locked(f);
            }
        }
        /* one stage always stays for the copies of other writes (the
         * lender's HDF5 calls may need one while it holds its buffers) */
        if (i < 0 && lent < ST_N - 1) {
            i = take_stage_locked(f, ST_LENT);
            off = 0;
        }
    }
    if (i >= 0) {
        f->st[i].state = ST_LENT;
        f->st[i].lent_lo = off;
        f->st[i].used = off + bytes;
    }
    pthread_mutex_unlock(&f->mu);
    return i >= 0 ? f->st[i].buf + off : NULL;
}

void mp_h5_stream_hand_back(mp_h5_stream *h, void *buf) {
    st_file *f = (st_file *)h;
    if (!f || !buf) return;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < ST_N; i++) {
        st_stage *s = &f->st[i];
        if (s->state != ST_LENT || s->buf + s->lent_lo != (char *)buf) continue;
        if (f->filling < 0 && s->nseg) { /* open again: later writes are appended */
            f->lent_segs -= s->nseg; /* recorded: plain staged data from here on */
            s->state = ST_FILLING;
            f->filling = i;
            if (io_idle_locked(f)) submit_locked(f);
        } else {
            queue_locked(f, i); /* (counts its segments out of lent_segs) */
        }
        break;
    }
    pthread_mutex_unlock(&f->mu);
}
