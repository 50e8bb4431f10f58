/* bench_view_gen.c — writes a synthetic run file for bench/view_bench.sh (the
 * size and speed of `mechprobe view` pages on a large capture):
 *
 *   bench_view_gen OUT.h5 [L=16] [H=32] [T=1024] [Dh=64] [kind=mixed|uniform]
 *
 * /tokens [1,T] (random ids < 32000), /model attrs n_layer, n_head, d_head,
 * /acts/blocks.l.attn.hook_pattern [1,H,T,T]: causal rows, each a softmax of
 * random logits, normalised (sum 1). kind "mixed" gives heads the shapes real
 * models have (a quarter sinks: +4 on key 0; a quarter local: -0.5 per token of
 * distance; the rest N(0, 2^2) logits); "uniform" draws every logit from
 * N(0, 1) (the least compressible). /acts/blocks.l.attn.hook_rot_q and
 * hook_rot_k [1,T,H,Dh] (random, keys offset along one direction) for the
 * Q/K geometry view. Written with the run writer (io/h5run.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5run.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double unif(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double gauss(void) { return sqrt(-2 * log(unif())) * cos(2 * M_PI * unif()); }

static int fail(mp_h5run *run) {
    fprintf(stderr, "bench_view_gen: %s\n", mp_last_error());
    mp_h5run_abort(run);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_view_gen OUT.h5 [L] [H] [T] [Dh] [mixed|uniform]\n");
        return 2;
    }
    mp_io_init();
    const int L = argc > 2 ? atoi(argv[2]) : 16, H = argc > 3 ? atoi(argv[3]) : 32, T = argc > 4 ? atoi(argv[4]) : 1024,
              Dh = argc > 5 ? atoi(argv[5]) : 64;
    const int uniform = argc > 6 && !strcmp(argv[6], "uniform");
    if (L < 1 || H < 1 || T < 1 || Dh < 2) return 2;
    mp_h5run *run = NULL;
    if (mp_h5run_create(&run, argv[1], NULL)) return fail(run);
    hid_t f = mp_h5run_file(run);
    hid_t g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return fail(run);
    H5Gclose(g);
    if (mp_h5_attr_set_int(f, "/model", "n_layer", L) || mp_h5_attr_set_int(f, "/model", "n_head", H) ||
        mp_h5_attr_set_int(f, "/model", "d_head", Dh) || mp_h5_attr_set_string(f, "/model", "source", "synthetic"))
        return fail(run);
    int *tok = malloc((size_t)T * sizeof *tok);
    float *pat = malloc((size_t)T * T * sizeof *pat), *qk = malloc((size_t)T * H * Dh * sizeof *qk);
    double *row = malloc((size_t)T * sizeof *row);
    if (!tok || !pat || !qk || !row) return 1;
    for (int t = 0; t < T; t++) tok[t] = t ? (int)(unif() * 32000) : 1;
    if (mp_h5run_write_tokens(run, tok, 1, T)) return fail(run);
    for (int l = 0; l < L; l++) {
        char name[128];
        snprintf(name, sizeof name, "/acts/blocks.%d.attn.hook_pattern", l);
        int64_t shape[4] = {1, H, T, T};
        mp_h5ds *ds;
        if (mp_h5run_dataset(run, name, 4, shape, 2, &ds)) return fail(run);
        for (int h = 0; h < H; h++) {
            const int type = uniform ? 3 : h % 4; /* 0: sink, 1: local, 2-3: broad */
            memset(pat, 0, (size_t)T * T * sizeof *pat);
            for (int q = 0; q < T; q++) {
                double mx = -INFINITY, s = 0;
                for (int k = 0; k <= q; k++) {
                    double x = uniform ? gauss() : 2 * gauss();
                    if (type == 0 && k == 0) x += 4 + log(q + 1.0);
                    if (type == 1) x -= 0.5 * (q - k);
                    row[k] = x;
                    if (x > mx) mx = x;
                }
                for (int k = 0; k <= q; k++) s += (row[k] = exp(row[k] - mx));
                for (int k = 0; k <= q; k++) pat[(size_t)q * T + k] = (float)(row[k] / s);
            }
            int64_t off[4] = {0, h, 0, 0}, cnt[4] = {1, 1, T, T};
            if (mp_h5ds_write(ds, off, cnt, pat)) return fail(run);
        }
        for (int which = 0; which < 2; which++) {
            snprintf(name, sizeof name, "/acts/blocks.%d.attn.hook_rot_%c", l, which ? 'k' : 'q');
            int64_t s4[4] = {1, T, H, Dh};
            for (size_t i = 0; i < (size_t)T * H * Dh; i++) qk[i] = (float)(gauss() + (which && i % Dh == 0 ? 3 : 0));
            if (mp_h5run_write_f32(run, name, 4, s4, 1, qk)) return fail(run);
        }
        fprintf(stderr, "\rlayer %d/%d", l + 1, L);
    }
    fprintf(stderr, "\n");
    if (mp_h5run_commit(run)) {
        fprintf(stderr, "bench_view_gen: %s\n", mp_last_error());
        return 1;
    }
    free(tok);
    free(pat);
    free(qk);
    free(row);
    return 0;
}
