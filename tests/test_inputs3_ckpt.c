/* test_inputs3_ckpt.c — the checkpoint loader's default time limit scales with
 * the file (reliability issue, "inputs3"): a small checkpoint whose reader
 * hangs (the simulated fault) fails after 5 s (20 s under a sanitizer), not
 * the 30 s of before, and the message says the limit; an explicit
 * MECHPROBE_LOAD_TIMEOUT still wins; a valid file loads under the default. */
#include "checkpoint.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    const char *p = tu_data("train_ref_c.h5");
    const double limit = TU_SANITIZED ? 20.0 : 5.0;
    char want[64];
    snprintf(want, sizeof want, "timed out after %g s", limit);
    unsetenv("MECHPROBE_LOAD_TIMEOUT");
    {   /* the default limit of a small file */
        mp_model *m = NULL;
        mp_checkpoint_guard g = {0, MP_CKPT_FAULT_HANG, 0};
        double t0 = now_s();
        mp_status st = mp_checkpoint_load_guarded(p, &m, NULL, NULL, &g);
        double dt = now_s() - t0;
        CHECK(st != MP_OK && !m && strstr(mp_last_error(), want) && strstr(mp_last_error(), p),
              "a hanging reader of a small file: %s", mp_last_error());
        CHECK(dt >= limit - 0.5 && dt < limit + 4.0, "it failed after %.1f s (limit %g s)", dt, limit);
    }
    {   /* MECHPROBE_LOAD_TIMEOUT overrides it */
        setenv("MECHPROBE_LOAD_TIMEOUT", "1", 1);
        mp_model *m = NULL;
        mp_checkpoint_guard g = {0, MP_CKPT_FAULT_HANG, 0};
        double t0 = now_s();
        mp_status st = mp_checkpoint_load_guarded(p, &m, NULL, NULL, &g);
        double dt = now_s() - t0;
        CHECK(st != MP_OK && strstr(mp_last_error(), "timed out after 1 s"), "MECHPROBE_LOAD_TIMEOUT=1: %s",
              mp_last_error());
        CHECK(dt < 4.0, "MECHPROBE_LOAD_TIMEOUT=1 took %.1f s", dt);
        unsetenv("MECHPROBE_LOAD_TIMEOUT");
    }
    for (int i = 0; i < 5; i++) { /* valid loads under the default limit */
        mp_model *m = NULL;
        mp_status st = mp_checkpoint_load(p, &m, NULL, NULL);
        CHECK(st == MP_OK && m, "load %d of a valid checkpoint: %s", i, st ? mp_last_error() : "");
        mp_model_free(m);
    }
    return tu_finish("test_inputs3_ckpt");
}
