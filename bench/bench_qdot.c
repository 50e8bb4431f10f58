/* bench_qdot.c — where the two paths of mp_qdot_matmul cross for weights kept
 * as stored (qdot.h): for N input rows, (a) the dot kernels over the stored
 * rows (OpenMP over output rows, as the few-rows path runs them) and (b) panels
 * of 256 rows decoded to float32 + OpenBLAS sgemm (the many-rows path), and
 * mp_qdot_matmul itself, on one layer shape (default Llama-3.2-1B's MLP up
 * projection: IN 2048, OUT 8192). Chooses the few-rows limits in qdot.c
 * (QDOT_FEW_ROWS, QDOT_HALF_FEW_ROWS).
 *
 *   bench_qdot [--type bf16|f16|q8_0|q4_k|q6_k] [--in 2048] [--out 8192] [--reps 5]
 *   bench_qdot --train [--reps 3]     a training step's products in fp32 against BF16 (see train_shapes)
 *
 * Prints one line per N: ms of (a), (b) and mp_qdot_matmul (median of reps); for BF16 on a CPU with
 * AVX-512 BF16 also mp_qdot_matmul_bf16 (precision "bf16": activations rounded to BF16) and its GFLOP/s. */
#include "omp_env.h"
#include "qdot.h"
#include "quant.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NMAX 512 /* the most input rows timed */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --train: the three products of a training step's linear layer (forward Y = X W^T, dX = dY W, dW = dY^T X)
 * in float32 sgemm against BF16 products (mp_qdot_matmul_bf16, activations and weights rounded to BF16, float32
 * sums), at the shapes of a d 512 model's layer (q, k, v, o 512 x 512, MLP 512 -> 2048 twice, 2048 -> 512) over
 * N = 8192 tokens (batch 16 x 512). The BF16 side pays every conversion and transposition a step would: W and
 * W^T rounded to BF16 (the FP32 master weights change each step), dY^T (cblas_somatcopy), X^T rounded. */
static int train_shapes(int reps) {
    const int N = 8192, shapes[7][2] = {{512, 512}, {512, 512}, {512, 512}, {512, 512}, {512, 2048}, {512, 2048},
                                        {2048, 512}};
    const size_t big = (size_t)N * 2048;
    float *x = malloc(big * 4), *dy = malloc(big * 4), *y = malloc(big * 4), *dx = malloc(big * 4),
          *w = malloc((size_t)2048 * 512 * 4), *dw = malloc((size_t)2048 * 512 * 4), *tmp = malloc(big * 4);
    uint16_t *wb = malloc((size_t)2048 * 512 * 2), *wtb = malloc((size_t)2048 * 512 * 2), *xtb = malloc(big * 2);
    if (!x || !dy || !y || !dx || !w || !dw || !tmp || !wb || !wtb || !xtb) { fprintf(stderr, "bench_qdot: out of memory\n"); return 1; }
    srand(2);
    for (size_t i = 0; i < big; i++) x[i] = (float)rand() / RAND_MAX - 0.5f, dy[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)2048 * 512; i++) w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.04f;
    printf("bench_qdot --train: one layer of a d 512 model (q k v o 512x512, MLP 512->2048 x2, 2048->512), N %d tokens,\n"
           "  forward + dX + dW of each linear, %d threads; ms (median of %d)\n", N, omp_get_max_threads(), reps);
    printf("%12s %10s %10s %8s %8s\n", "IN x OUT", "fp32 sgemm", "bf16", "ratio", "GFLOP/s");
    double tot32 = 0, tot16 = 0, flops = 0;
    double *ta = malloc(reps * sizeof(double)), *tb = malloc(reps * sizeof(double));
    for (int s = 0; s < 7; s++) {
        const int IN = shapes[s][0], OUT = shapes[s][1];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f, x, IN, w, IN, 0.0f, y, OUT);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT, 1.0f, dy, OUT, w, IN, 0.0f, dx, IN);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f, dy, OUT, x, IN, 0.0f, dw, IN);
            ta[r] = now() - t0;
            t0 = now();
            mp_qdot_round_bf16(w, wb, (size_t)OUT * IN);                       /* W [OUT][IN] */
            cblas_somatcopy(CblasRowMajor, CblasTrans, OUT, IN, 1.0f, w, IN, tmp, OUT);
            mp_qdot_round_bf16(tmp, wtb, (size_t)OUT * IN);                    /* W^T [IN][OUT] */
            if (mp_qdot_matmul_bf16(y, x, wb, (size_t)IN * 2, NULL, N, IN, OUT) ||      /* Y = X W^T */
                mp_qdot_matmul_bf16(dx, dy, wtb, (size_t)OUT * 2, NULL, N, OUT, IN)) {   /* dX = dY W */
                fprintf(stderr, "bench_qdot: %s\n", mp_last_error());
                return 1;
            }
            cblas_somatcopy(CblasRowMajor, CblasTrans, N, IN, 1.0f, x, IN, tmp, N);
            mp_qdot_round_bf16(tmp, xtb, (size_t)N * IN);                      /* X^T [IN][N] */
            cblas_somatcopy(CblasRowMajor, CblasTrans, N, OUT, 1.0f, dy, OUT, tmp, N); /* dY^T [OUT][N] */
            if (mp_qdot_matmul_bf16(dw, tmp, xtb, (size_t)N * 2, NULL, OUT, N, IN)) {    /* dW = dY^T X */
                fprintf(stderr, "bench_qdot: %s\n", mp_last_error());
                return 1;
            }
            tb[r] = now() - t0;
        }
        qsort(ta, reps, sizeof *ta, cmp);
        qsort(tb, reps, sizeof *tb, cmp);
        const double a = ta[reps / 2], b = tb[reps / 2], f = 3.0 * 2.0 * N * IN * OUT;
        tot32 += a, tot16 += b, flops += f;
        printf("%5d x %4d %10.2f %10.2f %7.2fx %8.0f\n", IN, OUT, 1e3 * a, 1e3 * b, a / b, f / b * 1e-9);
    }
    printf("%12s %10.2f %10.2f %7.2fx %8.0f   (fp32: %.0f GFLOP/s)\n", "layer", 1e3 * tot32, 1e3 * tot16, tot32 / tot16,
           flops / tot16 * 1e-9, flops / tot32 * 1e-9);
    free(ta); free(tb); free(x); free(dy); free(y); free(dx); free(w); free(dw); free(tmp); free(wb); free(wtb); free(xtb);
    return 0;
}

int main(int argc, char **argv) {
    const char *type = "bf16";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--train")) {
            mp_omp_env_default(argv);
            if (!mp_qdot_has_bf16()) { fprintf(stderr, "bench_qdot --train: this CPU has no AVX-512 BF16\n"); return 1; }
            return train_shapes(i + 2 < argc && !strcmp(argv[i + 1], "--reps") ? atoi(argv[i + 2]) : 3);
        }
    int IN = 2048, OUT = 8192, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--type")) type = argv[i + 1];
        else if (!strcmp(argv[i], "--in")) IN = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) OUT = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else { fprintf(stderr, "bench_qdot: unknown option %s\n", argv[i]); return 2; }
    }
    const uint32_t t = !strcmp(type, "bf16") ? MP_GGML_BF16 : !strcmp(type, "f16") ? MP_GGML_F16
                     : !strcmp(type, "q8_0") ? MP_GGML_Q8_0 : !strcmp(type, "q4_k") ? MP_GGML_Q4_K
                     : !strcmp(type, "q6_k") ? MP_GGML_Q6_K : 0;
    if (!t || IN <= 0 || OUT <= 0 || IN % 256 || reps < 1) {
        fprintf(stderr, "bench_qdot: --type bf16|f16|q8_0|q4_k|q6_k, --in a multiple of 256, --out > 0, --reps >= 1\n");
        return 2;
    }
    mp_omp_env_default(argv); /* the waiting policy of the mechprobe command */
    size_t bv, bb;
    mp_quant_block(t, &bv, &bb);
    const size_t rb = (size_t)IN / bv * bb;
    unsigned char *w = malloc(rb * OUT);
    float *wf = malloc((size_t)IN * OUT * sizeof(float)), *panel = malloc((size_t)256 * IN * sizeof(float));
    float *in = malloc((size_t)NMAX * IN * sizeof(float)), *out = malloc((size_t)NMAX * OUT * sizeof(float));
    if (!w || !wf || !panel || !in || !out) { fprintf(stderr, "bench_qdot: out of memory\n"); return 1; }
    srand(1);
    for (size_t i = 0; i < (size_t)IN * OUT; i++) wf[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.04f;
    for (int o = 0; o < OUT; o++) { /* encode row by row */
        if (t == MP_GGML_BF16 || t == MP_GGML_F16)
            for (int i = 0; i < IN; i++) {
                const uint16_t h = t == MP_GGML_BF16 ? mp_quant_f32_to_bf16(wf[(size_t)o * IN + i])
                                                     : mp_quant_f32_to_f16(wf[(size_t)o * IN + i]);
                memcpy(w + (size_t)o * rb + 2 * (size_t)i, &h, 2);
            }
        else if (t == MP_GGML_Q8_0) mp_quant_quantize_q8_0(wf + (size_t)o * IN, w + (size_t)o * rb, (size_t)IN);
        else if (t == MP_GGML_Q6_K) /* random codes and 8-bit scales, block scale d as a quantizer's */
            for (size_t b = 0; b < rb; b++) {
                w[(size_t)o * rb + b] = (unsigned char)rand();
                if (b % 210 == 209) {
                    const uint16_t d = mp_quant_f32_to_f16(0.0005f);
                    memcpy(w + (size_t)o * rb + b - 1, &d, 2);
                }
            }
        else /* Q4_K: random codes and 6-bit scales, with block scales d, dmin of the size a quantizer gives */
            for (size_t b = 0; b < rb; b++) {
                w[(size_t)o * rb + b] = (unsigned char)rand();
                if (b % 144 == 3) {
                    const uint16_t d = mp_quant_f32_to_f16(0.0005f), dmin = mp_quant_f32_to_f16(0.002f);
                    memcpy(w + (size_t)o * rb + b - 3, &d, 2);
                    memcpy(w + (size_t)o * rb + b - 1, &dmin, 2);
                }
            }
    }
    for (int i = 0; i < NMAX * IN; i++) in[i] = (float)rand() / RAND_MAX - 0.5f;
    const mp_qdot_fn dot = mp_qdot_kernel(t, mp_qdot_isa_active());
    const size_t ab = mp_qdot_act_bytes(t, (size_t)IN);
    unsigned char *xq = malloc(NMAX * ab);
    printf("bench_qdot: %s, IN %d, OUT %d, %s kernels, %d threads; ms per product (median of %d)\n", type, IN, OUT,
           mp_qdot_isa_name(mp_qdot_isa_active()), omp_get_max_threads(), reps);
    /* BF16 weights on a CPU with AVX-512 BF16: also the BF16 products (precision "bf16", qdot.h) and their GFLOP/s */
    const int bfp = t == MP_GGML_BF16 && mp_qdot_has_bf16();
    printf("%4s %10s %10s %10s%s\n", "N", "dot", "panels", "matmul", bfp ? "   bf16 prod   GFLOP/s" : "");
    const int Ns[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 512};
    double *ta = malloc(reps * sizeof(double)), *tb = malloc(reps * sizeof(double)), *tc = malloc(reps * sizeof(double)),
           *td = malloc(reps * sizeof(double));
    for (size_t k = 0; k < sizeof Ns / sizeof *Ns; k++) {
        const int N = Ns[k];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            for (int n = 0; n < N; n++) mp_qdot_quantize_act(t, in + (size_t)n * IN, xq + (size_t)n * ab, (size_t)IN);
#pragma omp parallel for schedule(static)
            for (int o = 0; o < OUT; o++)
                for (int n = 0; n < N; n++) out[(size_t)n * OUT + o] = dot(w + (size_t)o * rb, xq + (size_t)n * ab, (size_t)IN);
            ta[r] = now() - t0;
            t0 = now();
            for (int o0 = 0; o0 < OUT; o0 += 256) {
                const int rows = OUT - o0 < 256 ? OUT - o0 : 256;
                mp_quant_dequantize(t, w + (size_t)o0 * rb, panel, (size_t)rows * IN);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, IN, 1.0f, in, IN, panel, IN, 0.0f,
                            out + o0, OUT);
            }
            tb[r] = now() - t0;
            t0 = now();
            if (mp_qdot_matmul(out, in, t, w, rb, NULL, N, IN, OUT)) { fprintf(stderr, "bench_qdot: %s\n", mp_last_error()); return 1; }
            tc[r] = now() - t0;
            t0 = now();
            if (bfp && mp_qdot_matmul_bf16(out, in, w, rb, NULL, N, IN, OUT)) {
                fprintf(stderr, "bench_qdot: %s\n", mp_last_error());
                return 1;
            }
            td[r] = now() - t0;
        }
        qsort(ta, reps, sizeof *ta, cmp);
        qsort(tb, reps, sizeof *tb, cmp);
        qsort(tc, reps, sizeof *tc, cmp);
        qsort(td, reps, sizeof *td, cmp);
        printf("%4d %10.2f %10.2f %10.2f", N, 1e3 * ta[reps / 2], 1e3 * tb[reps / 2], 1e3 * tc[reps / 2]);
        if (bfp) printf(" %12.2f %9.0f", 1e3 * td[reps / 2], 2.0 * N * IN * OUT / td[reps / 2] * 1e-9);
        printf("\n");
    }
    free(ta); free(tb); free(tc); free(td); free(xq); free(w); free(wf); free(panel); free(in); free(out);
    return 0;
}
