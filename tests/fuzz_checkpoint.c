/* fuzz_checkpoint.c — fuzz target for the checkpoint loader
 * (io/checkpoint.c): each input is written to a file and loaded with
 * optimizer state and loss curve through the guarded loader, as `mp.load`
 * does. Every input must end in a model whose config validates and whose
 * sizes match, or in an error naming the file; a parse that crashes or hangs
 * inside libhdf5 must come back as such an error ("corrupt HDF5 checkpoint:
 * ..."), counted and reported at exit as findings the supervisor absorbed.
 * Built with tests/fuzz_driver.c (a bounded mutation loop run by ctest);
 * with libFuzzer: clang -fsanitize=fuzzer,address ... and link mechprobe_core. */
#include "checkpoint.h"
#include "h5io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long fuzz_accepted;   /* inputs the loader accepted (reported by fuzz_driver.c) */
static long n_crashed, n_timed_out, n_refused;
static char path[256];

static void report(void) {
    printf("fuzz_checkpoint: %ld refused cleanly, of which the child absorbed %ld crashes and %ld timeouts "
           "inside libhdf5\n", n_refused, n_crashed, n_timed_out);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        mp_io_init();
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/mp_fuzz_ckpt.%ld.h5", t && *t ? t : "/tmp", (long)getpid());
        atexit(report);
    }
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size) abort();
    fclose(fp);
    mp_model *m = NULL;
    mp_adamw opt;
    mp_train_log log;
    mp_checkpoint_guard g = {2.0, 0, 0};   /* a hang costs 2 s, not the default 30 */
    mp_status st = mp_checkpoint_load_guarded(path, &m, &opt, &log, &g);
    if (st != MP_OK) {
        const char *e = mp_last_error();
        if (m || strncmp(e, path, strlen(path)) != 0) abort();      /* errors name the file, nothing returned */
        n_refused++;
        int crashed = strstr(e, "the HDF5 library crashed") != NULL, timed_out = strstr(e, "timed out") != NULL;
        n_crashed += crashed;
        n_timed_out += timed_out;
        const char *keep = getenv("FUZZ_SAVE_DIR");   /* keep the findings to reproduce them */
        if ((crashed || timed_out) && keep && *keep) {
            char out[512];
            snprintf(out, sizeof out, "%s/%s-%ld.h5", keep, crashed ? "crash" : "hang", n_crashed + n_timed_out);
            FILE *o = fopen(out, "wb");
            if (o) { fwrite(data, 1, size, o); fclose(o); }
            fprintf(stderr, "fuzz_checkpoint: %s: %s\n", out, e);
        }
        return 0;
    }
    fuzz_accepted++;
    size_t n = mp_config_n_params(&m->cfg);
    if (mp_config_validate(&m->cfg, "fuzz") != MP_OK) abort();
    if ((opt.n && opt.n != n) || log.n > ((size_t)1 << 22) || log.n_eval > ((size_t)1 << 22)) abort();
    volatile double sink = 0;
    for (size_t i = 0; i < n; i += 7) sink += m->owned[i];
    for (size_t i = 0; i < log.n; i++) sink += log.step[i] + log.loss[i] + log.lr[i] + log.tokens[i] + log.wall[i];
    for (size_t i = 0; i < log.n_eval; i++) sink += log.eval_step[i] + log.eval_loss[i];
    (void)sink;
    mp_train_log_free(&log);
    mp_adamw_free(&opt);
    mp_model_free(m);
    return 0;
}
