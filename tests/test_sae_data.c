/* test_sae_data.c — io/sae_data.c against files h5py wrote
 * (tests/sae_data_gen.py, run first as a ctest fixture into sae_data/): the
 * real rows of /acts/<hook> in order across two files (padding past /lengths
 * skipped, a chunked+compressed file), pieces of any size, epochs, through
 * the shuffle buffer (the same multiset), and the errors naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sae_data.h"
#include "testutil.h"

static const char *HOOK = "blocks.0.hook_resid_post";

static int cmp_row(const void *a, const void *b) { return memcmp(a, b, 4 * sizeof(float)); }

int main(void) {
    mp_init();
    FILE *fe = fopen("sae_data/expected.f32", "rb");
    if (!fe) {
        fprintf(stderr, "sae_data/expected.f32 missing (the sae_data_gen fixture writes it)\n");
        return 1;
    }
    float want[64 * 4];
    size_t nw = fread(want, sizeof(float), 64 * 4, fe) / 4;
    fclose(fe);
    CHECK(nw == 5 + 2 + 4 + 6, "expected rows %zu", nw);
    const char *paths[2] = {"sae_data/a.h5", "sae_data/b.h5"};
    for (int chunk = 1; chunk <= 7; chunk += 3) {
        mp_sae_h5src *src = NULL;
        int d = 0;
        CHECK(mp_sae_h5src_open(&src, paths, 2, HOOK, 2, chunk, &d) == MP_OK, "%s", mp_last_error());
        if (!src) return tu_finish("test_sae_data");
        CHECK(d == 4 && mp_sae_h5src_rows(src) == (long)nw, "d %d rows %ld", d, mp_sae_h5src_rows(src));
        float got[128 * 4];
        int n = 0, g;
        do {
            CHECK(mp_sae_h5src_produce(src, got + (size_t)n * 4, n + 5 <= 128 ? 5 : 128 - n, &g) == MP_OK, "%s",
                  mp_last_error());
            n += g;
        } while (g > 0 && n < 128);
        CHECK(n == 2 * (int)nw, "two epochs: %d rows (chunk %d)", n, chunk);
        CHECK(!memcmp(got, want, nw * 4 * sizeof(float)) && !memcmp(got + nw * 4, want, nw * 4 * sizeof(float)),
              "rows equal h5py's, in order (chunk %d)", chunk);
        mp_sae_h5src_close(src);
    }
    /* through the shuffle buffer: a permutation of one epoch */
    {
        mp_sae_h5src *src = NULL;
        int d = 0;
        CHECK(mp_sae_h5src_open(&src, paths, 2, HOOK, 1, 3, &d) == MP_OK, "%s", mp_last_error());
        mp_sae_shuffler *sh = NULL;
        CHECK(mp_sae_shuffler_new(&sh, d, 6, 1, mp_sae_h5src_produce, src) == MP_OK, "%s", mp_last_error());
        float got[64 * 4], w2[64 * 4];
        int n = 0, g;
        do {
            CHECK(mp_sae_shuffle_next(sh, got + (size_t)n * 4, 4, &g) == MP_OK, "%s", mp_last_error());
            n += g;
        } while (g == 4);
        CHECK(n == (int)nw, "one epoch through the shuffler: %d rows", n);
        int moved = memcmp(got, want, nw * 4 * sizeof(float)) != 0;
        CHECK(moved, "the shuffler reorders");
        memcpy(w2, want, nw * 4 * sizeof(float));
        qsort(got, nw, 4 * sizeof(float), cmp_row);
        qsort(w2, nw, 4 * sizeof(float), cmp_row);
        CHECK(!memcmp(got, w2, nw * 4 * sizeof(float)), "the same rows");
        mp_sae_shuffler_free(sh);
        mp_sae_h5src_close(src);
    }
    /* errors name the file */
    mp_sae_h5src *src = NULL;
    int d;
    const char *bad1[2] = {"sae_data/a.h5", "sae_data/c.h5"};
    CHECK(mp_sae_h5src_open(&src, bad1, 2, HOOK, 1, 4, &d) != MP_OK && strstr(mp_last_error(), "c.h5"),
          "a D that differs: %s", mp_last_error());
    CHECK(mp_sae_h5src_open(&src, paths, 2, "blocks.1.hook_z", 1, 4, &d) == MP_ERR_FORMAT &&
              strstr(mp_last_error(), "a.h5") && strstr(mp_last_error(), "blocks.1.hook_z"),
          "a missing hook: %s", mp_last_error());
    const char *bad2[1] = {"sae_data/none.h5"};
    CHECK(mp_sae_h5src_open(&src, bad2, 1, HOOK, 1, 4, &d) != MP_OK && strstr(mp_last_error(), "none.h5"),
          "a missing file: %s", mp_last_error());
    CHECK(src == NULL, "nothing opened on error");
    return tu_finish("test_sae_data");
}
