/* test_outputs2.c — the output race and the temporaries (reliability issue,
 * "the output race and writes"):
 *  - a temporary swapped for a symbolic link right after its exclusive create
 *    (a fixed interleaving: mp_out_test_hook, which mp_out calls at "created"
 *    and "commit") is never written through and never published: the write
 *    is refused, the link's target is untouched, the destination is not a
 *    link; the same for a temporary swapped for another regular file just
 *    before the rename; for every kind of writer (HDF5 run file, checkpoint,
 *    dataset capture, stdio writers);
 *  - the stale-temporary cleanup keeps a temporary whose pid does not exist
 *    here while a live process (another PID namespace) holds its lock, and
 *    removes it once the lock is free;
 *  - an output name of 250 bytes is written (the temporary gets a short name);
 *  - mp_h5_open for writing ("w", "a", "r+") refuses a symbolic link;
 *  - mp_out_check_inputs refuses an output that is one of the inputs. */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "h5capture.h"
#include "h5io.h"
#include "h5run.h"
#include "formats.h"
#include "model.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];
static mp_model *model;

/* ---- the hook: what to do to the temporary, and when ---- */

typedef enum { SWAP_NONE, SWAP_LINK_CREATED, SWAP_FILE_COMMIT } swap_kind;
static swap_kind swap;
static char victim[512]; /* the link's target: must never change */
static int swapped;

void mp_out_test_hook(const char *step, const mp_out *o) {
    char side[700];
    if (swap == SWAP_LINK_CREATED && !strcmp(step, "created")) {
        /* another user replaces the temporary by a link to a file of theirs */
        snprintf(side, sizeof side, "%s.evil", o->tmp);
        if (symlink(victim, side) == 0 && rename(side, o->tmp) == 0) swapped++;
    } else if (swap == SWAP_FILE_COMMIT && !strcmp(step, "commit")) {
        snprintf(side, sizeof side, "%s.evil", o->tmp);
        FILE *f = fopen(side, "wb");
        if (f) {
            fputs("planted", f);
            fclose(f);
            if (rename(side, o->tmp) == 0) swapped++;
        }
    }
}

/* ---- helpers ---- */

static void spit(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) { fputs(s, f); fclose(f); }
}

static int file_is(const char *path, const char *s) {
    char buf[256] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(s) && memcmp(buf, s, n) == 0;
}

static int exists(const char *p) { struct stat sb; return lstat(p, &sb) == 0; }
static int is_link(const char *p) { struct stat sb; return lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode); }

/* Entries of dir whose name contains ".tmp." (or starts with ".mp"). */
static int count_tmp(void) {
    DIR *h = opendir(dir);
    int n = 0;
    if (!h) return -1;
    for (struct dirent *e; (e = readdir(h));)
        if (strstr(e->d_name, ".tmp.") || !strncmp(e->d_name, ".mp", 3)) n++;
    closedir(h);
    return n;
}

static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

static void host_part(char *out, size_t n) {
    char h[256] = "";
    if (gethostname(h, sizeof h) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
    h[sizeof h - 1] = '\0';
    size_t i = 0;
    for (; h[i] && i < 64 && i + 1 < n; i++)
        out[i] = (h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z') || (h[i] >= '0' && h[i] <= '9') ||
                         h[i] == '-' ? h[i] : '_';
    out[i] = '\0';
}

/* ---- the writers ---- */

typedef mp_status (*writer_fn)(const char *path);

static mp_status w_run(const char *path) {
    mp_h5run *run;
    mp_status st = mp_h5run_create(&run, path, NULL);
    if (st) return st;
    int tok[3] = {1, 2, 3};
    if ((st = mp_h5run_write_tokens(run, tok, 1, 3))) { mp_h5run_abort(run); return st; }
    return mp_h5run_commit(run);
}
static mp_status w_ckpt(const char *path) { return mp_checkpoint_save(path, model, NULL, NULL); }
static mp_status w_bin(const char *path) { return mp_model_save_llama2c(model, path, 0); }
static mp_status w_capture(const char *path) { /* the dataset capture (capture --tokens-file) */
    mp_h5cap *c;
    mp_h5cap_params p = {0};
    p.out = path;
    int32_t len[1] = {3};
    int tok[3] = {1, 2, 3};
    int64_t n_total;
    int n_ds;
    mp_status st = mp_h5cap_create(&c, &p, &model->cfg, len, 1, NULL, &n_total, &n_ds);
    if (st) return st;
    st = mp_h5cap_begin(c, 0, tok);
    return mp_h5cap_finish(c, st);
}

typedef struct {
    const char *kind;
    writer_fn fn;
} writer;
static const writer writers[] = {
    {"run file", w_run}, {"checkpoint", w_ckpt}, {"dataset capture", w_capture}, {"llama2.c", w_bin},
};
#define N_WRITERS (int)(sizeof writers / sizeof *writers)

/* ---- the race ---- */

static void test_swap(swap_kind k, const char *what) {
    for (int i = 0; i < N_WRITERS; i++) {
        char out[600];
        snprintf(out, sizeof out, "%s/race_%d_%d.out", dir, (int)k, i);
        snprintf(victim, sizeof victim, "%s/victim_%d_%d", dir, (int)k, i);
        spit(victim, "precious");
        swap = k;
        swapped = 0;
        mp_status st = writers[i].fn(out);
        swap = SWAP_NONE;
        CHECK(swapped == 1, "%s, %s: the hook swapped the temporary (%d)", writers[i].kind, what, swapped);
        CHECK(file_is(victim, "precious"), "%s, %s: the link's target was written through", writers[i].kind, what);
        CHECK(!is_link(out), "%s, %s: the output is a symbolic link (capture reported %s)", writers[i].kind, what,
              st == MP_OK ? "success" : "an error");
        CHECK(st != MP_OK, "%s, %s: the swapped temporary was not refused", writers[i].kind, what);
        CHECK(st == MP_OK || !exists(out), "%s, %s: a refused output exists", writers[i].kind, what);
        CHECK(st == MP_OK || strstr(mp_last_error(), "was replaced"), "%s, %s: message: %s", writers[i].kind, what,
              mp_last_error());
        CHECK(count_tmp() == 0, "%s, %s: %d temporaries left", writers[i].kind, what, count_tmp());
        unlink(out);
        unlink(victim);
    }
}

/* ---- stale temporaries across PID namespaces ---- */

static void test_stale_locked(void) {
    char out[600], tmp[900], host[80];
    host_part(host, sizeof host);
    snprintf(out, sizeof out, "%s/locked.bin", dir);
    pid_t ghost = dead_pid(); /* the writer's pid in its own namespace: no process here */
    snprintf(tmp, sizeof tmp, "%s.tmp.%s.%d.0", out, host, (int)ghost);
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0) { CHECK(0, "pipe: %s", strerror(errno)); return; }
    pid_t child = fork();
    if (child == 0) { /* a live writer: its temporary, locked, as mp_out keeps it */
        int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL, 0666);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET}; /* the lock mp_out holds (mp_out.c) */
        char c = fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0 && write(fd, "partial", 7) == 7 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1) _exit(2);
        if (read(go[0], &c, 1) < 0) _exit(3);
        _exit(0);
    }
    char c = 'n';
    if (read(ready[0], &c, 1) != 1 || c != 'y') CHECK(0, "the child could not make its temporary");
    CHECK(kill(ghost, 0) != 0 && errno == ESRCH, "pid %d should not exist", (int)ghost);
    CHECK(w_bin(out) == MP_OK, "writing %s: %s", out, mp_last_error());
    CHECK(exists(tmp), "the locked temporary of a live writer (pid %d unknown here) was removed", (int)ghost);
    if (write(go[1], "x", 1) != 1) { /* the child then exits on EOF */ }
    close(go[1]);
    waitpid(child, NULL, 0);
    CHECK(w_bin(out) == MP_OK, "writing %s again: %s", out, mp_last_error());
    CHECK(!exists(tmp), "the temporary of a dead writer (lock free) was not removed");
    unlink(tmp);
    unlink(out);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
}

/* ---- names near NAME_MAX ---- */

static void test_long_name(void) {
    char name[251], out[600];
    memset(name, 'n', 250);
    memcpy(name + 246, ".bin", 4);
    name[250] = '\0';
    snprintf(out, sizeof out, "%s/%s", dir, name);
    CHECK(w_bin(out) == MP_OK, "a 250-byte name: %s", mp_last_error());
    struct stat sb;
    CHECK(stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0, "the 250-byte output exists");
    CHECK(count_tmp() == 0, "temporaries left: %d", count_tmp());
    unlink(out);
    memcpy(name + 246, ".h5\0", 4); /* 249 bytes */
    snprintf(out, sizeof out, "%s/%s", dir, name);
    CHECK(w_run(out) == MP_OK, "a 249-byte run file name: %s", mp_last_error());
    CHECK(exists(out), "the run file with a long name exists");
    CHECK(count_tmp() == 0, "temporaries left: %d", count_tmp());
    unlink(out);
}

/* ---- mp_h5_open for writing ---- */

static void test_h5_open_links(void) {
    char target[600], link[600];
    snprintf(target, sizeof target, "%s/target.h5", dir);
    snprintf(link, sizeof link, "%s/link.h5", dir);
    CHECK(w_run(target) == MP_OK, "%s", mp_last_error());
    struct stat before, after;
    stat(target, &before);
    CHECK(symlink(target, link) == 0, "symlink: %s", strerror(errno));
    static const mp_h5_mode modes[] = {MP_H5_TRUNC, MP_H5_APPEND, MP_H5_RDWR};
    static const char *names[] = {"w", "a", "r+"};
    for (int i = 0; i < 3; i++) {
        hid_t f = H5I_INVALID_HID;
        mp_status st = mp_h5_open(&f, link, modes[i]);
        CHECK(st != MP_OK && strstr(mp_last_error(), "symbolic link"), "mode %s through a link: %s", names[i],
              st ? mp_last_error() : "opened");
        if (f >= 0) mp_h5_close(&f);
        stat(target, &after);
        CHECK(after.st_size == before.st_size && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec &&
                  after.st_mtim.tv_sec == before.st_mtim.tv_sec,
              "mode %s changed the link's target", names[i]);
    }
    hid_t f = H5I_INVALID_HID;
    CHECK(mp_h5_open(&f, target, MP_H5_RDWR) == MP_OK, "r+ on the regular file: %s", mp_last_error());
    mp_h5_close(&f);
    unlink(link);
    unlink(target);
}

/* ---- outputs that are inputs ---- */

static void test_same_file(void) {
    char in[600], alias[600], other[600], fresh[600];
    snprintf(in, sizeof in, "%s/model.bin", dir);
    snprintf(alias, sizeof alias, "%s/./model.bin", dir);
    snprintf(other, sizeof other, "%s/other.bin", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.h5", dir);
    spit(in, "model");
    const char *inputs[3] = {NULL, other, in};
    CHECK(mp_out_check_inputs(in, inputs, 3) != MP_OK && strstr(mp_last_error(), "same file as the input"),
          "output = input: %s", mp_last_error());
    CHECK(mp_out_check_inputs(alias, inputs, 3) != MP_OK, "output = input by another name");
    const char *fin[1] = {fresh};
    CHECK(mp_out_check_inputs(fresh, fin, 1) != MP_OK, "a missing output named as a missing input");
    CHECK(mp_out_check_inputs(other, inputs + 2, 1) == MP_OK, "another file: %s", mp_last_error());
    CHECK(file_is(in, "model"), "the input is unchanged");
    unlink(in);
}

int main(void) {
    mp_io_init();
    snprintf(dir, sizeof dir, "/tmp/mp_outputs2.XXXXXX");
    if (!mkdtemp(dir)) { fprintf(stderr, "mkdtemp: %s\n", strerror(errno)); return 1; }
    if (mp_model_load_llama2c(&model, tu_data("ref_tied.bin")) != MP_OK) {
        fprintf(stderr, "%s\n", mp_last_error());
        return 1;
    }
    CHECK(mp_model_make_owned(model) == MP_OK, "%s", mp_last_error());
    test_swap(SWAP_LINK_CREATED, "a link swapped in after the create");
    test_swap(SWAP_FILE_COMMIT, "another file swapped in before the rename");
    test_stale_locked();
    test_long_name();
    test_h5_open_links();
    test_same_file();
    mp_model_free(model);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_outputs2");
}
