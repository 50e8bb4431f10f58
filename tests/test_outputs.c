/* test_outputs.c — issue #17 items 1, 10 and 11 (tokenizer mode): every writer
 * (run file, checkpoint, llama2.c .bin, GGUF, safetensors, HF folder,
 * tokenizer, figure) refuses a destination that is a character device, a FIFO,
 * a directory or a symbolic link, leaving it as it was and no temporary
 * behind; writes with the permissions of a plain create (0666 & ~umask);
 * removes stale temporaries of dead processes of this host and keeps those of
 * live ones and of other hosts (the host name in the temporary's name);
 * and a temporary is removed when the process dies of SIGINT, SIGTERM, SIGHUP
 * or SIGXFSZ (exit status: the signal), both for mp_out directly and for a
 * capture run by the mechprobe binary, killed while it writes. */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "h5io.h"
#include "figure.h"
#include "gguf.h"
#include "h5run.h"
#include "formats.h"
#include "model.h"
#include "safetensors.h"
#include "testutil.h"
#include "tok_llama2c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];
static mp_model *model;

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
static mp_status w_gguf(const char *path) { return mp_model_save_gguf(model, NULL, path, MP_GGML_F32); }
static mp_status w_st(const char *path) {
    static const float x[4] = {1, 2, 3, 4};
    static const uint64_t shape[1] = {4};
    mp_st_entry e = {"x", 1, shape, x};
    return mp_safetensors_write(path, &e, 1, NULL);
}
static mp_status w_tok(const char *path) { return mp_tokenizer_save_bytelevel(path); }
static mp_status w_fig(const char *path) {
    mp_figure *f;
    mp_figure_params p = mp_figure_params_default();
    mp_status st = mp_figure_new(1, 1, &p, &f);
    if (st) return st;
    st = mp_figure_save(f, path, 64, 48, 72);
    mp_figure_free(f);
    return st;
}
/* The HF writer's outputs are DIR/config.json and DIR/model.safetensors: the
 * destination given here is one of those two; the folder is its parent. */
static mp_status w_hf(const char *path) {
    char d[512];
    snprintf(d, sizeof d, "%s", path);
    *strrchr(d, '/') = '\0';
    return mp_model_save_hf(model, d);
}

typedef struct {
    const char *kind, *ext;
    writer_fn fn;
} writer;
static const writer writers[] = {
    {"run file", ".h5", w_run},       {"checkpoint", ".h5", w_ckpt},        {"llama2.c", ".bin", w_bin},
    {"GGUF", ".gguf", w_gguf},        {"safetensors", ".safetensors", w_st}, {"tokenizer", ".tok", w_tok},
    {"figure", ".png", w_fig},
};
#define N_WRITERS (int)(sizeof writers / sizeof *writers)

/* ---- helpers ---- */

/* Number of entries of folder d whose name contains ".tmp." */
static int count_tmp(const char *d) {
    DIR *h = opendir(d);
    int n = 0;
    if (!h) return -1;
    for (struct dirent *e; (e = readdir(h));)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(h);
    return n;
}

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

/* A pid that no process has: a child that exited and was reaped. */
static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

/* ---- item 1: non-regular destinations ---- */

typedef enum { D_CHAR, D_FIFO, D_LINK, D_DANGLING, D_DIR, N_DEST } dest_kind;
static const char *dest_words[N_DEST] = {"is a character device", "is a FIFO", "is a symbolic link",
                                         "is a symbolic link", "is a directory"};

/* Makes the destination of kind k at path; returns 0, or -1 when it cannot be
 * made here (a device node needs CAP_MKNOD). */
static int make_dest(dest_kind k, const char *path, char *target, size_t tn) {
    snprintf(target, tn, "%s.target", path);
    switch (k) {
    case D_CHAR: return mknod(path, S_IFCHR | 0666, makedev(1, 3)); /* a node like /dev/null */
    case D_FIFO: return mkfifo(path, 0666);
    case D_LINK: spit(target, "keep"); return symlink(target, path);
    case D_DANGLING: return symlink(target, path);
    case D_DIR: return mkdir(path, 0777);
    default: return -1;
    }
}

/* Is the destination still what make_dest made (same kind, target untouched)? */
static int dest_intact(dest_kind k, const char *path, const char *target) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    switch (k) {
    case D_CHAR: return S_ISCHR(sb.st_mode) && major(sb.st_rdev) == 1 && minor(sb.st_rdev) == 3;
    case D_FIFO: return S_ISFIFO(sb.st_mode);
    case D_LINK: return S_ISLNK(sb.st_mode) && file_is(target, "keep");
    case D_DANGLING: return S_ISLNK(sb.st_mode) && !exists(target);
    case D_DIR: return S_ISDIR(sb.st_mode);
    default: return 0;
    }
}

static void test_destinations(void) {
    int refused = 0, cases = 0;
    char sub[512], path[600], target[700];
    for (int w = 0; w <= N_WRITERS; w++) { /* N_WRITERS: the HF folder writer */
        for (int k = 0; k < N_DEST; k++) {
            for (int hf_file = 0; hf_file < (w == N_WRITERS ? 2 : 1); hf_file++) {
                snprintf(sub, sizeof sub, "%s/d%d_%d_%d", dir, w, k, hf_file);
                mkdir(sub, 0777);
                if (w == N_WRITERS) snprintf(path, sizeof path, "%s/%s", sub, hf_file ? "model.safetensors" : "config.json");
                else snprintf(path, sizeof path, "%s/out%s", sub, writers[w].ext);
                const char *kind = w == N_WRITERS ? "HF folder" : writers[w].kind;
                if (make_dest((dest_kind)k, path, target, sizeof target) != 0) {
                    if (k == D_CHAR) { /* no CAP_MKNOD: /dev/null itself is safe only when refused */
                        if (w == 0) printf("note: no device node here (%s); that case is skipped\n", strerror(errno));
                        continue;
                    }
                    CHECK(0, "%s: cannot make %s: %s", kind, path, strerror(errno));
                    continue;
                }
                cases++;
                mp_status st = (w == N_WRITERS ? w_hf : writers[w].fn)(path);
                const char *msg = mp_last_error();
                int ok = st != MP_OK && strstr(msg, path) && strstr(msg, dest_words[k]);
                CHECK(ok, "%s over %s: status %d, message '%s'", kind, dest_words[k], (int)st, msg);
                CHECK(dest_intact((dest_kind)k, path, target), "%s: the destination %s (%s) was changed", kind,
                      path, dest_words[k]);
                CHECK(count_tmp(sub) == 0, "%s: a temporary file was left in %s", kind, sub);
                if (ok && dest_intact((dest_kind)k, path, target)) refused++;
            }
        }
    }
    printf("non-regular destinations refused and left intact: %d of %d\n", refused, cases);
}

/* ---- item 11: permissions of a plain create ---- */

static void test_modes(void) {
    char path[600];
    mode_t old = umask(027);
    int right = 0;
    for (int w = 0; w < N_WRITERS; w++) {
        snprintf(path, sizeof path, "%s/mode%d%s", dir, w, writers[w].ext);
        mp_status st = writers[w].fn(path);
        CHECK(st == MP_OK, "%s: %s", writers[w].kind, mp_last_error());
        struct stat sb;
        int mode = stat(path, &sb) == 0 ? (int)(sb.st_mode & 0777) : -1;
        CHECK(mode == 0640, "%s: mode %o under umask 027, expected 640 (0666 & ~umask)", writers[w].kind, mode);
        right += mode == 0640;
        /* and replacing an existing regular file works */
        st = writers[w].fn(path);
        CHECK(st == MP_OK && stat(path, &sb) == 0 && sb.st_size > 0, "%s: rewriting %s: %s", writers[w].kind, path,
              mp_last_error());
    }
    umask(old);
    CHECK(count_tmp(dir) == 0, "temporaries left after successful writes");
    printf("writers creating with 0666 & ~umask: %d of %d\n", right, N_WRITERS);
}

/* ---- item 10: stale temporaries ---- */

/* The host part of a temporary's name, as docs/trust.md states it: the host name with
 * characters other than [A-Za-z0-9-] replaced by '_' (at most 64). */
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

static void test_stale(void) {
    char out[600], p[8][800], host[80];
    pid_t dead = dead_pid(), live = getppid();
    CHECK(kill(dead, 0) != 0 && errno == ESRCH, "pid %d should be dead", (int)dead);
    host_part(host, sizeof host);
    snprintf(out, sizeof out, "%s/stale.bin", dir);
    /* the temporary carries this host's name and this process's pid */
    mp_out o;
    char want[800];
    snprintf(want, sizeof want, "%s.tmp.%s.%d.", out, host, (int)getpid());
    CHECK(mp_out_begin(&o, out) == MP_OK, "%s", mp_last_error());
    CHECK(o.tmp && strncmp(o.tmp, want, strlen(want)) == 0, "temporary %s, expected %s<n>", o.tmp ? o.tmp : "(none)",
          want);
    mp_out_abort(&o);
    snprintf(p[0], sizeof p[0], "%s.tmp.%s.%d.0", out, host, (int)dead);                              /* removed */
    snprintf(p[1], sizeof p[1], "%s.tmp.%s.%d.1.tmp.%s.%d.2", out, host, (int)dead, host, (int)dead); /* removed (nested) */
    snprintf(p[2], sizeof p[2], "%s.tmp.%s.%d.3", out, host, (int)live);                     /* kept: alive */
    snprintf(p[3], sizeof p[3], "%s.tmp.%s.%d.4", out, host, (int)getpid());                  /* kept: ours */
    snprintf(p[4], sizeof p[4], "%s.tmp.%s.%d.5.notes", out, host, (int)dead);               /* kept: not our name */
    snprintf(p[5], sizeof p[5], "%s.tmp.other-host.%d.6", out, (int)dead);                   /* kept: another host */
    snprintf(p[6], sizeof p[6], "%s.tmp.%d.7", out, (int)dead);           /* kept: no host (another host's, maybe) */
    snprintf(p[7], sizeof p[7], "%s.tmp.%sx.%d.8", out, host, (int)dead); /* kept: a host whose name extends ours */
    for (int i = 0; i < 8; i++) spit(p[i], "x");
    CHECK(w_bin(out) == MP_OK, "writing %s: %s", out, mp_last_error());
    CHECK(!exists(p[0]) && !exists(p[1]), "stale temporaries of dead pid %d were not removed", (int)dead);
    CHECK(exists(p[2]), "the temporary of live pid %d was removed", (int)live);
    CHECK(exists(p[3]) && exists(p[4]), "a temporary of this process or a foreign name was removed");
    CHECK(exists(p[5]) && exists(p[6]) && exists(p[7]),
          "a temporary of another host (pid %d is dead only here) was removed", (int)dead);
    for (int i = 2; i < 8; i++) unlink(p[i]);
}

/* With its own host name (a UTS namespace, where the test may make one): a
 * name with dots is written with '_', and the temporaries of the machine's
 * real host name count as another host's. */
static void test_stale_other_host(void) {
    char real[80], out[600], mine[800], theirs[800];
    host_part(real, sizeof real);
    snprintf(out, sizeof out, "%s/hosts.bin", dir);
    pid_t dead = dead_pid();
    snprintf(mine, sizeof mine, "%s.tmp.node-1_example_org.%d.0", out, (int)dead);
    snprintf(theirs, sizeof theirs, "%s.tmp.%s.%d.1", out, real, (int)dead);
    spit(mine, "x");
    spit(theirs, "x");
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWUTS) != 0 || sethostname("node-1.example.org", 18) != 0) _exit(77);
        mp_out o;
        if (mp_out_begin(&o, out) != MP_OK) _exit(3);
        char want[800];
        snprintf(want, sizeof want, "%s.tmp.node-1_example_org.%d.", out, (int)getpid());
        int ok = strncmp(o.tmp, want, strlen(want)) == 0;
        mp_out_abort(&o);
        _exit(ok ? 0 : 4);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        printf("SKIP other host name: no UTS namespace here (%s)\n", "unshare/sethostname refused");
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "host node-1.example.org: temporary name (status %d)",
              status);
        CHECK(!exists(mine), "host node-1.example.org: its stale temporary was not removed");
        CHECK(exists(theirs), "host node-1.example.org removed the temporary of host %s", real);
    }
    unlink(mine);
    unlink(theirs);
}

/* ---- item 10: signals ---- */

/* Forks a child that begins an output (with `sig` ignored when ignore) and
 * waits; kills it with sig once it is writing; returns its wait status. */
static int signal_child(int sig, int ignore, const char *out) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (ignore) signal(sig, SIG_IGN); /* else the handler this process installed on its first output */
        close(fds[0]);
        mp_out o;
        if (mp_out_begin(&o, out) != MP_OK) _exit(3);
        FILE *f = mp_out_fdopen(&o);
        if (!f || fputs("partial", f) < 0 || fflush(f) != 0) _exit(4);
        if (write(fds[1], "r", 1) != 1) _exit(5);
        for (;;) pause();
    }
    close(fds[1]);
    char c;
    int status = -1;
    if (read(fds[0], &c, 1) == 1) {
        kill(pid, sig);
        if (ignore) { /* still alive after an ignored signal: it is left alone */
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
            CHECK(waitpid(pid, &status, WNOHANG) == 0, "the child died of signal %d that it ignores", sig);
            kill(pid, SIGKILL);
        }
    } else {
        kill(pid, SIGKILL);
    }
    waitpid(pid, &status, 0);
    close(fds[0]);
    return status;
}

static void test_signals(void) {
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
    char sub[512], out[600];
    int clean = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(sub, sizeof sub, "%s/sig%d", dir, sigs[i]);
        mkdir(sub, 0777);
        snprintf(out, sizeof out, "%s/out.bin", sub);
        int status = signal_child(sigs[i], 0, out);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sigs[i], "signal %d: child status %#x, expected death by it",
              sigs[i], status);
        int n = count_tmp(sub);
        CHECK(n == 0 && !exists(out), "signal %d (%s): %d temporaries left", sigs[i], strsignal(sigs[i]), n);
        clean += n == 0;
    }
    printf("catchable signals leaving no temporary: %d of 4\n", clean);
    /* An ignored SIGHUP (nohup) is left ignored; SIGKILL then leaves the
     * temporary, which the next writer of that output removes (dead pid). */
    snprintf(sub, sizeof sub, "%s/sigkill", dir);
    mkdir(sub, 0777);
    snprintf(out, sizeof out, "%s/out.bin", sub);
    int status = signal_child(SIGHUP, 1, out);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "SIGKILL: child status %#x", status);
    CHECK(count_tmp(sub) == 1, "SIGKILL should leave the temporary (%d found)", count_tmp(sub));
    CHECK(w_bin(out) == MP_OK, "rewriting %s: %s", out, mp_last_error());
    CHECK(count_tmp(sub) == 0, "the next writer did not remove the dead process's temporary");
}

/* A capture by the mechprobe binary killed while its forward hook runs (the
 * run file is being written): no temporary left, the exit status is the signal.
 * The fourth run is a dataset capture (m:capture_prompts, the writer of
 * capture --text-file/--tokens-file), whose temporary used to be left. */
static void test_cli_signals(void) {
    /* the third run starts with SIGHUP ignored (nohup): a SIGHUP must not stop
     * it, then SIGTERM does */
    const int sigs[] = {SIGINT, SIGTERM, SIGTERM, SIGINT};
    char sub[512], script[600], ready[600], out[600];
    for (int i = 0; i < 4; i++) {
        snprintf(sub, sizeof sub, "%s/cli%d", dir, i);
        mkdir(sub, 0777);
        snprintf(script, sizeof script, "%s/busy.lua", sub);
        snprintf(ready, sizeof ready, "%s/ready", sub);
        snprintf(out, sizeof out, "%s/o.h5", sub);
        FILE *f = fopen(script, "w");
        if (!f) { CHECK(0, "cannot write %s", script); return; }
        fprintf(f, "local m = mp.load(%s%s%s)\n", "[[", tu_data("ref_tied.bin"), "]]");
        fprintf(f, "m:%s, {out = [[%s]], hooks = '*', fwd_hooks = {{'blocks.1.hook_resid_pre',\n"
                   "  function() local r = io.open([[%s]], 'w'); r:close()\n"
                   "    local t = os.clock(); while os.clock() - t < 60 do end end}}})\n",
                i == 3 ? "capture_prompts({{1, 2, 3}, {4, 5}}" : "capture({1, 2, 3}", out, ready);
        fclose(f);
        pid_t pid = fork();
        if (pid == 0) {
            signal(sigs[i], SIG_DFL);
            signal(SIGHUP, i == 2 ? SIG_IGN : SIG_DFL);
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0) { dup2(null, 1); dup2(null, 2); }
            execl(MP_EXE, MP_EXE, script, (char *)NULL);
            _exit(127);
        }
        int status = -1, seen = 0;
        for (int k = 0; k < 6000 && !(seen = exists(ready)); k++) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (waitpid(pid, &status, WNOHANG) == pid) break;
        }
        CHECK(seen, "the capture never reached its hook (status %#x)", status);
        if (seen) {
            CHECK(count_tmp(sub) == 1, "the capture should be writing a temporary (%d found)", count_tmp(sub));
            if (i == 2) {
                kill(pid, SIGHUP);
                struct timespec ts = {0, 200 * 1000 * 1000};
                nanosleep(&ts, NULL);
                CHECK(waitpid(pid, &status, WNOHANG) == 0, "a capture that ignores SIGHUP died of it (%#x)", status);
            }
            kill(pid, sigs[i]);
            waitpid(pid, &status, 0);
        } else {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sigs[i], "capture killed by %d: status %#x", sigs[i], status);
        CHECK(count_tmp(sub) == 0 && !exists(out), "capture killed by %s left a temporary or an output",
              strsignal(sigs[i]));
    }
}

int main(void) {
    mp_io_init();
    snprintf(dir, sizeof dir, "/tmp/mp_outputs.XXXXXX");
    if (!mkdtemp(dir)) { fprintf(stderr, "mkdtemp: %s\n", strerror(errno)); return 1; }
    if (mp_model_load_llama2c(&model, tu_data("ref_tied.bin")) != MP_OK) {
        fprintf(stderr, "%s\n", mp_last_error());
        return 1;
    }
    mp_status st = mp_model_make_owned(model);
    CHECK(st == MP_OK, "%s", mp_last_error());
    test_destinations();
    test_modes();
    test_stale();
    test_stale_other_host();
    test_signals();
    test_cli_signals();
    mp_model_free(model);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return tu_finish("test_outputs");
}
