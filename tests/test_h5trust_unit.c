/* test_h5trust_unit.c — the trust registry and checker of io/h5guard.c in C:
 * a file this process commits through mp_h5_atomic is trusted until it
 * changes; mp_h5_validate passes the valid base files of tests/h5trust_gen.c
 * and remembers them; and both the spawned checker and the forked one (the
 * fallback where the program image cannot be started) turn libhdf5 crashing
 * or looping on a file into an error naming the file, this process surviving. */
#include "h5guard.h"
#include "h5io.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    mp_io_init();
    char path[512];
    snprintf(path, sizeof path, "h5trust/unit_%d.h5", (int)getpid());
    mp_h5_atomic a;
    CHECK(mp_h5_atomic_create(&a, path) == MP_OK, "%s", mp_last_error());
    float x[3] = {1, 2, 3};
    CHECK(mp_h5_write_f32(a.file, "/x", 1, (int64_t[]){3}, x, 0) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_atomic_commit(&a) == MP_OK, "%s", mp_last_error());
    mp_h5_fileid id;
    CHECK(mp_h5_fileid_of(path, &id) == MP_OK && mp_h5_trust_known(&id), "a committed file is trusted");
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "touch");
    CHECK(mp_h5_fileid_of(path, &id) == MP_OK && !mp_h5_trust_known(&id), "a changed file is not");
    unlink(path);

    CHECK(mp_h5_validate("h5trust/base_old.h5", NULL) == MP_OK, "%s", mp_last_error());
    CHECK(mp_h5_fileid_of("h5trust/base_old.h5", &id) == MP_OK && mp_h5_trust_known(&id), "validated: known");
    mp_h5_guard fork_only = {0, 1};
    CHECK(mp_h5_validate("h5trust/base_new.h5", &fork_only) == MP_OK, "%s", mp_last_error());

    /* two real fuzzing finds (tests/data): libhdf5 crashes on the first, loops on the second */
    const char *bad[2] = {MP_TESTDATA "/ckpt_hostile_crash.h5", MP_TESTDATA "/ckpt_hostile_hang.h5"};
    /* under AddressSanitizer the child reports libhdf5's bad memcpy and exits 1 instead */
    const char *why[2] = {TU_SANITIZED ? "corrupt HDF5 file: the" : "the HDF5 library crashed reading it (signal 11",
                          "checking the HDF5 file timed out after 2 s"};
    for (int k = 0; k < 2; k++)
        for (int fk = 0; fk < 2; fk++) {
            mp_h5_guard gd = {2.0, fk};
            CHECK(mp_h5_validate(bad[k], &gd) == MP_ERR_FORMAT && strstr(mp_last_error(), bad[k]) &&
                      strstr(mp_last_error(), why[k]),
                  "%s (%s): %s", bad[k], fk ? "forked" : "spawned", mp_last_error());
            CHECK(mp_h5_fileid_of(bad[k], &id) == MP_OK && !mp_h5_trust_known(&id), "a refused file is not trusted");
        }
    return tu_finish("test_h5trust_unit");
}
