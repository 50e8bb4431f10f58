/* test_h5stream.c — the stream driver of the files mechprobe writes
 * (io/h5stream.c): chunks written through its staging buffer and O_DIRECT
 * thread read back exactly (in the open file, and after commit with HDF5's own
 * POSIX driver); chunks packed into lent staging buffers (zero-copy) too,
 * a chunk rewritten and one read back while their first bytes wait in a lent
 * buffer included; the same without O_DIRECT (MECHPROBE_DIRECT_IO=0, tmpfs);
 * a write error of the I/O thread becomes the commit's error naming the file,
 * and an abort with staged data leaves nothing. */
#define _GNU_SOURCE
#include "h5io.h"
#include "h5stream.h"
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define CH 16384            /* floats per chunk: 64 KiB */
#define NCH 300             /* chunks: 18.75 MiB, more than the 16 MiB of staging */

static char dir[256];

static const char *path_in(const char *d, const char *name) {
    static char p[2][512];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", d, name);
    return p[k];
}

static float value(size_t i) { return (float)((i * 2654435761u) % 100003u) * 1e-3f - 17.0f; }

#define LENT_PER 24 /* chunks per lent buffer: 1.5 MiB */

/* Writes buf ([NCH*CH]) to chunked dataset d through buffers lent by the
 * driver (h5stream.h), LENT_PER chunks at a time: each chunk is first
 * written with wrong values (-1) from the lent buffer, then read back and
 * rewritten with the right ones from another place of the same buffer, so
 * the driver has to keep the order of two writes of the same bytes held in
 * a lent buffer. Where nothing is lent (no O_DIRECT) every write is from
 * ordinary memory. *lent_out: whether buffers were lent. 0 or -1. */
static int write_lent(hid_t f, hid_t d, const float *buf, int *lent_out, int *readback_ok) {
    mp_h5_stream *s = mp_h5_stream_of(f);
    const size_t cb = CH * sizeof(float);
    float *own = malloc(2 * LENT_PER * cb), *back = malloc(cb);
    int ok = own && back;
    *lent_out = 0;
    for (int k0 = 0; k0 < NCH && ok; k0 += LENT_PER) {
        int n = NCH - k0 < LENT_PER ? NCH - k0 : LENT_PER;
        float *lb = s ? mp_h5_stream_lend(s, 2 * (size_t)n * cb) : NULL;
        float *p = lb ? lb : own;
        *lent_out |= lb != NULL;
        for (int j = 0; j < n; j++) {
            for (size_t i = 0; i < CH; i++) p[(size_t)j * CH + i] = -1.0f; /* first write: wrong */
            memcpy(p + (size_t)(n + j) * CH, buf + (size_t)(k0 + j) * CH, cb);
        }
        for (int j = 0; j < n && ok; j++) {
            hsize_t off = (hsize_t)(k0 + j) * CH;
            ok = H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, cb, p + (size_t)j * CH) >= 0;
        }
        for (int j = 0; j < n && ok; j += 5) { /* read back while recorded in the lent buffer */
            uint32_t filters = 0;
            hsize_t off = (hsize_t)(k0 + j) * CH;
            ok = H5Dread_chunk(d, H5P_DEFAULT, &off, &filters, back) >= 0;
            if (ok && back[0] != -1.0f) *readback_ok = 0;
        }
        for (int j = 0; j < n && ok; j++) {
            hsize_t off = (hsize_t)(k0 + j) * CH;
            ok = H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, cb, p + (size_t)(n + j) * CH) >= 0;
        }
        if (lb) mp_h5_stream_hand_back(s, lb);
    }
    free(own);
    free(back);
    return ok ? 0 : -1;
}

/* Creates a [NCH*CH] dataset in 64 KiB chunks and writes it chunk by chunk
 * (H5Dwrite_chunk: one raw write per chunk, as a capture's tiles), in a
 * few H5Dwrite calls and through lent buffers (write_lent); reads part of it
 * back while the file is open. *lent: whether buffers were lent. */
static mp_status write_file(mp_h5_atomic *a, const char *path, int *readback_ok, int *lent) {
    mp_status st = mp_h5_atomic_create(a, path);
    if (st) return st;
    hsize_t n = (hsize_t)NCH * CH, c = CH;
    hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &c);
    hid_t d1 = H5Dcreate2(a->file, "/tiles", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t d2 = H5Dcreate2(a->file, "/rows", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t d3 = H5Dcreate2(a->file, "/lent", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    float *buf = malloc((size_t)n * sizeof *buf), *back = malloc((size_t)CH * 8 * sizeof *back);
    for (size_t i = 0; i < n; i++) buf[i] = value(i);
    int ok = d1 >= 0 && d2 >= 0 && d3 >= 0;
    for (int k = 0; k < NCH && ok; k++) {
        hsize_t off = (hsize_t)k * CH;
        ok = H5Dwrite_chunk(d1, H5P_DEFAULT, 0, &off, CH * sizeof(float), buf + off) >= 0;
        if (!ok) st = mp_h5_error(MP_ERR_IO, "%s: writing chunk %d", path, k); /* before the stack is cleared */
    }
    /* the same data through the library's own path (chunk cache, 1 MiB) */
    for (int k = 0; k < 4 && ok; k++) {
        hsize_t off = (hsize_t)k * (n / 4), cnt = n / 4;
        hid_t ms = H5Screate_simple(1, &cnt, NULL);
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, &off, NULL, &cnt, NULL);
        ok = H5Dwrite(d2, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, buf + off) >= 0;
        if (!ok) st = mp_h5_error(MP_ERR_IO, "%s: writing rows %d", path, k);
        H5Sclose(ms);
    }
    *readback_ok = ok;
    if (ok && write_lent(a->file, d3, buf, lent, readback_ok) != 0) {
        ok = 0;
        st = mp_h5_error(MP_ERR_IO, "%s: writing through lent buffers", path);
    }
    /* read back chunks just written (still staged or in flight) */
    for (int k = NCH - 8; k < NCH && ok; k++) {
        uint32_t filters = 0;
        hsize_t off = (hsize_t)k * CH;
        if (H5Dread_chunk(d1, H5P_DEFAULT, &off, &filters, back) < 0 || memcmp(back, buf + off, CH * sizeof(float)))
            *readback_ok = 0;
    }
    if (d1 >= 0) H5Dclose(d1);
    if (d2 >= 0) H5Dclose(d2);
    if (d3 >= 0) H5Dclose(d3);
    H5Pclose(dcpl);
    H5Sclose(sp);
    free(buf);
    free(back);
    if (!ok) {
        if (st == MP_OK) st = mp_error(MP_ERR_IO, "%s: creating the datasets", path);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        mp_h5_atomic_abort(a);
        return mp_error(st, "%s", msg);
    }
    return MP_OK;
}

/* Reads the datasets with HDF5's default driver; 1 when all hold value(i). */
static int check_file(const char *path) {
    hid_t f;
    if (mp_h5_open(&f, path, MP_H5_READ) != MP_OK) return 0;
    size_t n = (size_t)NCH * CH;
    float *got = malloc(n * sizeof *got);
    int ok = 1;
    const char *names[] = {"/tiles", "/rows", "/lent"};
    for (int j = 0; j < 3; j++) {
        hid_t d = H5Dopen2(f, names[j], H5P_DEFAULT);
        ok = ok && d >= 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0;
        for (size_t i = 0; ok && i < n; i++) ok = got[i] == value(i);
        if (d >= 0) H5Dclose(d);
    }
    free(got);
    mp_h5_close(&f);
    return ok;
}

static int count_in(const char *d) {
    DIR *dp = opendir(d);
    int n = 0;
    for (struct dirent *e; dp && (e = readdir(dp));) n += e->d_name[0] != '.';
    if (dp) closedir(dp);
    return n;
}

/* One round trip in folder d; prints and returns the bytes written directly. */
static unsigned long long round_trip(const char *d, const char *label) {
    mp_h5_stream_stats s0, s1;
    mp_h5_stream_get_stats(&s0);
    mp_h5_atomic a;
    int readback = 0, lent = 0;
    const char *p = path_in(d, "rt.h5");
    mp_status st = write_file(&a, p, &readback, &lent);
    CHECK(st == MP_OK, "%s: write: %s", label, st ? mp_last_error() : "");
    CHECK(readback, "%s: chunks read back while staged equal what was written", label);
    if (st == MP_OK) {
        st = mp_h5_atomic_commit(&a);
        CHECK(st == MP_OK, "%s: commit: %s", label, st ? mp_last_error() : "");
    }
    CHECK(check_file(p), "%s: both datasets read back exactly with HDF5's POSIX driver", label);
    mp_h5_stream_get_stats(&s1);
    unsigned long long staged = s1.staged_bytes - s0.staged_bytes, direct = s1.direct_bytes - s0.direct_bytes;
    unsigned long long lent_b = s1.lent_bytes - s0.lent_bytes;
    printf("  %-34s staged %6.2f MiB (lent %6.2f), O_DIRECT %6.2f MiB, plain %6.2f MiB\n", label,
           staged / 1048576.0, lent_b / 1048576.0, direct / 1048576.0, (s1.plain_bytes - s0.plain_bytes) / 1048576.0);
    /* each chunk of /lent written twice from its lent buffer: 2 x 18.75 MiB recorded, none copied */
    if (lent)
        CHECK(lent_b == 2ull * NCH * CH * sizeof(float), "%s: the lent chunks were recorded, not copied (%llu bytes)",
              label, lent_b);
    else
        CHECK(lent_b == 0 && (direct == 0 || mp_h5_stream_lend_max() < 2 * LENT_PER * CH * sizeof(float)),
              "%s: nothing lent only where nothing is written directly", label);
    unlink(p);
    return direct;
}

/* Child (this program run again): a 1 MiB file-size limit, SIGXFSZ ignored,
 * so the I/O thread's O_DIRECT write fails with EFBIG. Exit 0 when the error
 * came back naming the file, and nothing was left in the folder. */
static int limited_child(void) {
    /* (the hard limit above the soft one: raising the soft limit below needs no privilege) */
    struct rlimit rl = {1 << 20, 4 << 20};
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
    mp_h5_atomic a;
    int readback, lent;
    const char *p = path_in(dir, "limited.h5");
    mp_status st = write_file(&a, p, &readback, &lent);
    if (st == MP_OK) st = mp_h5_atomic_commit(&a);
    if (st == MP_OK) { fprintf(stderr, "child: commit succeeded despite the limit\n"); return 3; }
    const char *msg = mp_last_error();
    fprintf(stderr, "child: %s\n", msg);
    if (!strstr(msg, p)) return 4;
    if (!strstr(msg, "too large") && !strstr(msg, "no space")) return 5;
    if (count_in(dir) != 0) return 6;
    /* an abort with staged data: nothing left, no signal */
    rl.rlim_cur = rl.rlim_max = 4 << 20;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 9;
    signal(SIGXFSZ, SIG_DFL);
    if (mp_h5_atomic_create(&a, p) != MP_OK) return 7;
    hsize_t n = (hsize_t)64 * CH, c = CH;
    hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &c);
    hid_t d = H5Dcreate2(a.file, "/x", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    float *buf = calloc(CH, sizeof *buf);
    for (int k = 0; k < 40 && d >= 0; k++) { /* 2.5 MiB staged: under the limit */
        hsize_t off = (hsize_t)k * CH;
        H5Dwrite_chunk(d, H5P_DEFAULT, 0, &off, CH * sizeof(float), buf);
    }
    free(buf);
    mp_h5_discard_writes(a.file);
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    mp_h5_atomic_abort(&a);
    return count_in(dir) == 0 ? 0 : 8;
}

int main(int argc, char **argv) {
    mp_io_init();
    if (argc == 3 && !strcmp(argv[1], "--limited")) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        fflush(NULL);
        _exit(limited_child());
    }
    snprintf(dir, sizeof dir, "/tmp/mp_h5stream_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    CHECK(mp_h5_stream_driver() >= 0, "the driver registers");

    /* 1. the staged path: where the file system takes O_DIRECT, chunks go that way */
    int fd = open(path_in(dir, "probe"), O_CREAT | O_WRONLY | O_DIRECT, 0600);
    int direct_ok = fd >= 0;
    if (fd >= 0) close(fd);
    unlink(path_in(dir, "probe"));
    unsigned long long direct = round_trip(dir, "/tmp (staged)");
    if (direct_ok)
        CHECK(direct >= (unsigned long long)NCH * CH * sizeof(float),
              "the chunks went through O_DIRECT (%llu bytes)", direct);
    else
        printf("  (O_DIRECT refused in %s: every write went through the page cache)\n", dir);

    /* 2. MECHPROBE_DIRECT_IO=0: sec2's behaviour, same file */
    setenv("MECHPROBE_DIRECT_IO", "0", 1);
    CHECK(round_trip(dir, "MECHPROBE_DIRECT_IO=0") == 0, "no O_DIRECT write when it is turned off");
    unsetenv("MECHPROBE_DIRECT_IO");

    /* 3. tmpfs (O_DIRECT refused at open before Linux 6.6: plain writes) */
    char shm[] = "/dev/shm/mp_h5stream_XXXXXX";
    if (access("/dev/shm", W_OK) == 0 && mkdtemp(shm)) {
        round_trip(shm, "/dev/shm (tmpfs)");
        rmdir(shm);
    }

    /* 4. an I/O error of the thread is the commit's error; abort leaves nothing */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_h5stream", "--limited", dir, (char *)NULL);
        _exit(127);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a write error of the I/O thread fails the commit naming the file; nothing left (child %s %d)",
          WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    if (tu_failures == 0) rmdir(dir);
    else fprintf(stderr, "files kept in %s\n", dir);
    return tu_finish("test_h5stream");
}
