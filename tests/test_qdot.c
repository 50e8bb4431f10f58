/* test_qdot.c — the quantized-weight dot products (runtime/qdot.c) against
 * dequantize-then-float dots computed here in double:
 *   - every kernel (Q8_0, Q4_0, Q4_K, Q6_K) on every ISA path this machine has
 *     (scalar, AVX2, AVX-512), on random blocks (random codes, scales and mins)
 *     and random activations of mixed magnitude;
 *   - (1) against the dot of the dequantized weights with the dequantized
 *     quantized activations: the same integer sums, so only float32 rounding
 *     differs: |err| <= 2e-6 * sum |w_i x_i| + 1e-30;
 *   - (2) against the exact float activations: the error is the activation
 *     quantization's, |x_i - xq_i| <= 0.5 d_b (round to nearest; Q8_0's d is
 *     stored as f16, whose rounding adds at most 127 * 2^-11 d_b), so
 *     |err| <= sum_i |w_i| * 0.57 d_b(i) plus (1)'s rounding;
 *   - ISA paths agree with the scalar reference to (1)'s tolerance;
 *   - mp_qdot_matmul for few rows (quantized kernel) and many rows
 *     (dequantized panels + sgemm), with a bias, against the same references;
 *   - the relative rms error of a one-row product with Gaussian activations
 *     (the error model of 8-bit activations, test_rms_error);
 *   - the Q8_K quantizer matches ggml's reference rules (d = -max/127, the
 *     largest-magnitude value maps to -127, bsums are sums of 16 codes);
 *   - half weights (F16, BF16; test_half): the fast widening of
 *     mp_quant_dequantize equals the scalar conversion for all 65536 codes;
 *     every ISA's dot (float32 activations, tails of every length mod 32) and
 *     mp_qdot_matmul (dot path and sgemm panels) against the double dot of
 *     the widened weights, within the worst-case float32 summation bound
 *     (n/8 + 8) * 2^-24 * sum |w_i x_i| (8 to 32 interleaved partial sums;
 *     sgemm: (n + 9) * 2^-24 * sum |w_i x_i|, one sequence per output). */
#include "qdot.h"
#include "quant.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rs = 2463534242u;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 17; rs ^= rs << 5; return rs; }
static float unif(void) { return (float)(rnd() >> 8) / 16777216.0f; }

static void put_f16(unsigned char *p, float f) {
    uint16_t h = mp_quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* n values of random blocks of type t */
static void random_blocks(uint32_t t, unsigned char *w, size_t n) {
    size_t bv, bb;
    mp_quant_block(t, &bv, &bb);
    for (size_t b = 0; b < n / bv; b++) {
        unsigned char *p = w + b * bb;
        for (size_t i = 0; i < bb; i++) p[i] = (unsigned char)rnd();
        float d = (0.2f + unif()) * 0.01f * (rnd() & 1 ? 1.0f : -1.0f);
        if (t == MP_GGML_Q8_0 || t == MP_GGML_Q4_0) put_f16(p, d);
        if (t == MP_GGML_Q4_K) { put_f16(p, fabsf(d) * 0.1f); put_f16(p + 2, fabsf(d) * 0.05f); }
        if (t == MP_GGML_Q6_K) put_f16(p + 208, d * 0.1f);
    }
}

/* the activations as the kernel sees them (dequantized quantized blocks) */
static void act_dequant(uint32_t wt, const unsigned char *xq, double *x, double *dblk, size_t n) {
    if (mp_qdot_act_type(wt) == MP_GGML_Q8_0) {
        for (size_t b = 0; b < n / 32; b++) {
            uint16_t h;
            memcpy(&h, xq + 34 * b, 2);
            double d = mp_quant_f16_to_f32(h);
            for (int j = 0; j < 32; j++) x[32 * b + j] = d * (int8_t)xq[34 * b + 2 + j], dblk[32 * b + j] = d;
        }
    } else {
        for (size_t b = 0; b < n / 256; b++) {
            const unsigned char *p = xq + MP_Q8K_BYTES * b;
            float d;
            memcpy(&d, p, 4);
            for (int j = 0; j < 256; j++) x[256 * b + j] = (double)d * (int8_t)p[4 + j], dblk[256 * b + j] = fabs(d);
        }
    }
}

static void test_q8_k_quantizer(void) {
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = (unif() - 0.5f) * (i < 256 ? 3.0f : 0.01f);
    x[77] = -4.0f; /* the largest magnitude of block 0, negative */
    unsigned char q[2 * MP_Q8K_BYTES];
    mp_qdot_quantize_q8_k(x, q, 512);
    float d;
    memcpy(&d, q, 4);
    CHECK_NEAR(d, 4.0 / 127.0, 1e-7, "Q8_K d = -max/127 with max = -4");
    CHECK((int8_t)q[4 + 77] == -127, "the largest-magnitude value maps to -127 (got %d)", (int8_t)q[4 + 77]);
    int worst = 0;
    for (int b = 0; b < 2; b++) {
        const unsigned char *p = q + b * MP_Q8K_BYTES;
        int16_t bs[16];
        memcpy(bs, p + 260, 32);
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += (int8_t)p[4 + 16 * j + i];
            if (s != bs[j]) worst = 1;
        }
    }
    CHECK(!worst, "Q8_K bsums are the sums of 16 codes");
    float z[256] = {0};
    mp_qdot_quantize_q8_k(z, q, 256);
    memcpy(&d, q, 4);
    CHECK(d == 0.0f && q[4] == 0 && q[259] == 0, "an all-zero block quantizes to d = 0, codes 0");
}

static void test_kernels(void) {
    const uint32_t types[] = {MP_GGML_Q8_0, MP_GGML_Q4_0, MP_GGML_Q4_K, MP_GGML_Q6_K};
    const size_t sizes[] = {256, 1024, 2816};   /* 2816 = 11 x 256: odd block counts for the 2-block paths */
    for (int ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti];
        mp_qdot_fn ref = mp_qdot_kernel(t, MP_QDOT_SCALAR);
        CHECK(ref != NULL, "%s has a scalar kernel", mp_quant_type_name(t));
        for (int si = 0; si < 3; si++) {
            size_t n = sizes[si] + (t == MP_GGML_Q8_0 || t == MP_GGML_Q4_0 ? 32 : 0); /* Q8_0/Q4_0: odd 32-blocks */
            if (t != MP_GGML_Q8_0 && t != MP_GGML_Q4_0) n = sizes[si];
            size_t bv, bb;
            mp_quant_block(t, &bv, &bb);
            unsigned char *w = malloc(n / bv * bb), *xq = malloc(mp_qdot_act_bytes(t, n));
            float *wf = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
            double *xd = malloc(n * sizeof(double)), *db = malloc(n * sizeof(double));
            for (int rep = 0; rep < 4; rep++) {
                random_blocks(t, w, n);
                mp_quant_dequantize(t, w, wf, n);
                for (size_t i = 0; i < n; i++) x[i] = (unif() - 0.5f) * (i % 97 < 5 ? 20.0f : 1.0f);
                mp_qdot_quantize_act(t, x, xq, n);
                act_dequant(t, xq, xd, db, n);
                double same = 0, mag = 0, exact = 0, bound = 0;
                for (size_t i = 0; i < n; i++) {
                    same += (double)wf[i] * xd[i];
                    mag += fabs((double)wf[i] * xd[i]);
                    exact += (double)wf[i] * x[i];
                    bound += fabs((double)wf[i]) * 0.57 * db[i];
                }
                const double tol1 = 2e-6 * mag + 1e-30;
                float r = ref(w, xq, n);
                for (int isa = MP_QDOT_SCALAR; isa <= MP_QDOT_AVX512; isa++) {
                    mp_qdot_fn k = mp_qdot_kernel(t, (mp_qdot_isa)isa);
                    if (!k) continue;
                    float got = k(w, xq, n);
                    const char *nm = mp_qdot_isa_name((mp_qdot_isa)isa);
                    CHECK(fabs(got - same) <= tol1, "%s %s n %zu: %.9g vs dequantized dot %.9g (tol %.3g)",
                          mp_quant_type_name(t), nm, n, got, same, tol1);
                    CHECK(fabs(got - exact) <= bound + tol1, "%s %s n %zu: %.9g vs float activations %.9g "
                          "(bound %.3g)", mp_quant_type_name(t), nm, n, got, exact, bound + tol1);
                    CHECK(fabs(got - r) <= tol1, "%s %s agrees with scalar (%.9g vs %.9g)", mp_quant_type_name(t),
                          nm, got, r);
                    if (rep == 0 && si == 1)
                        printf("%-5s %-7s n %5zu: |k - deq dot| %.2e (tol %.2e), |k - float dot| %.2e (bound %.2e)\n",
                               mp_quant_type_name(t), nm, n, fabs(got - same), tol1, fabs(got - exact), bound + tol1);
                }
            }
            free(w); free(xq); free(wf); free(x); free(xd); free(db);
        }
    }
}

static void test_matmul(void) {
    const uint32_t types[] = {MP_GGML_Q8_0, MP_GGML_Q4_0, MP_GGML_Q4_K, MP_GGML_Q6_K};
    const int OUT = 301; /* the Q8_0 blocks' 4-row remainder */
    for (int ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti];
        size_t bv, bb;
        mp_quant_block(t, &bv, &bb);
        const int IN = bv == 32 ? 544 : 512; /* Q8_0 / Q4_0: an odd number of blocks, the kernels' tail */
        const size_t rb = IN / bv * bb;
        unsigned char *w = malloc(rb * OUT);
        random_blocks(t, w, (size_t)IN * OUT);
        float *wf = malloc((size_t)IN * OUT * sizeof(float)), bias[301];
        mp_quant_dequantize(t, w, wf, (size_t)IN * OUT);
        for (int o = 0; o < OUT; o++) bias[o] = unif() - 0.5f;
        const int Ns[] = {1, 3, 37, 40};
        const int tiles = mp_qdot_tiles(t);
        for (int k = 0; k < 4; k++) {
            const int N = Ns[k];
            float *in = malloc((size_t)N * IN * sizeof(float)), *out = malloc((size_t)N * OUT * sizeof(float));
            for (int i = 0; i < N * IN; i++) in[i] = unif() - 0.5f;
            CHECK(mp_qdot_matmul(out, in, t, w, rb, bias, N, IN, OUT) == MP_OK, "%s", mp_last_error());
            double worst = 0, worst_rel = 0;
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OUT; o++) {
                    double s = bias[o], mag = 0;
                    for (int i = 0; i < IN; i++) {
                        s += (double)wf[(size_t)o * IN + i] * in[(size_t)n * IN + i];
                        mag += fabs((double)wf[(size_t)o * IN + i]) * (fabs(in[(size_t)n * IN + i]) + 1e-3);
                    }
                    double e = fabs(out[(size_t)n * OUT + o] - s);
                    worst = fmax(worst, e);
                    worst_rel = fmax(worst_rel, e / mag);
                }
            /* few rows (any number, for the types with tiles): 8-bit activations, |x - xq| <= 0.57 d <= 0.57
             * max|x|/127 ~ 0.5/127 * 0.57 relative to the row's magnitude; many rows: float32 sgemm of the
             * dequantized weights, rounding only */
            const int quantized = N <= 32 || tiles;
            const double tol = quantized ? 0.57 * 0.5 / 127.0 * 2 : 1e-5;
            if (quantized) { /* the tiles (N >= 4) and the dot kernel give the same bits */
                const size_t ab = mp_qdot_act_bytes(t, IN);
                unsigned char *xq = malloc(ab);
                const mp_qdot_fn dot = mp_qdot_kernel(t, mp_qdot_isa_active());
                int same = 1;
                for (int n = 0; n < N; n++) {
                    mp_qdot_quantize_act(t, in + (size_t)n * IN, xq, IN);
                    for (int o = 0; o < OUT; o++)
                        same &= out[(size_t)n * OUT + o] == dot(w + (size_t)o * rb, xq, IN) + bias[o];
                }
                CHECK(same, "%s matmul N %d%s: an output differs from the dot kernel's", mp_quant_type_name(t), N,
                      tiles ? " (tiles)" : "");
                free(xq);
            }
            CHECK(worst_rel <= tol, "%s matmul N %d: worst error %.3g relative to sum |w|(|x|+1e-3) %.3g > %.3g",
                  mp_quant_type_name(t), N, worst, worst_rel, tol);
            free(in);
            free(out);
        }
        free(w);
        free(wf);
    }
}

/* The error model the whole-model test (test_qmodel) relies on: with
 * Gaussian activations, a block's scale is max|x|/127 (~2.1 sigma / 127 for 32
 * values, ~3 sigma / 127 for 256), the rounding error is uniform in +-d/2, so a
 * product's relative rms error is ~0.5% (Q8_0 activations) to ~0.7% (Q8_K),
 * more when the weights' mean is not 0 (Q4_K's mins): bound 1.5%. */
static void test_rms_error(void) {
    const uint32_t types[] = {MP_GGML_Q8_0, MP_GGML_Q4_0, MP_GGML_Q4_K, MP_GGML_Q6_K};
    const int IN = 512, OUT = 256;
    for (int ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti];
        size_t bv, bb;
        mp_quant_block(t, &bv, &bb);
        const size_t rb = IN / bv * bb;
        unsigned char *w = malloc(rb * OUT);
        float *wf = malloc((size_t)IN * OUT * sizeof(float)), x[512], o[256];
        random_blocks(t, w, (size_t)IN * OUT);
        mp_quant_dequantize(t, w, wf, (size_t)IN * OUT);
        for (int i = 0; i < IN; i++) x[i] = sqrtf(-2.0f * logf(1.0f - unif())) * cosf(6.2831853f * unif());
        CHECK(mp_qdot_matmul(o, x, t, w, rb, NULL, 1, IN, OUT) == MP_OK, "%s", mp_last_error());
        double e = 0, r = 0;
        for (int j = 0; j < OUT; j++) {
            double s = 0;
            for (int i = 0; i < IN; i++) s += (double)wf[(size_t)j * IN + i] * x[i];
            e += (o[j] - s) * (o[j] - s);
            r += s * s;
        }
        const double rel = sqrt(e / r);
        CHECK(rel <= 0.015, "%s: relative rms error of a product %.3g%% > 1.5%%", mp_quant_type_name(t), 100 * rel);
        printf("%-5s one-row product, Gaussian activations: relative rms error %.2f%%\n", mp_quant_type_name(t),
               100 * rel);
        free(w);
        free(wf);
    }
}

static uint16_t to_half(uint32_t t, float v) { return t == MP_GGML_F16 ? mp_quant_f32_to_f16(v) : mp_quant_f32_to_bf16(v); }
static double from_half(uint32_t t, uint16_t h) {
    return t == MP_GGML_F16 ? mp_quant_f16_to_f32(h) : mp_quant_bf16_to_f32(h);
}

static void test_half(void) {
    const uint32_t types[] = {MP_GGML_F16, MP_GGML_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t t = types[ti];
        const char *nm = mp_quant_type_name(t);
        CHECK(mp_qdot_supported(t) && mp_qdot_is_half(t) && mp_qdot_act_type(t) == MP_GGML_F32,
              "%s: kept as stored, float32 activations", nm);
        /* widening: all codes, fast path (OpenMP pieces, SIMD) vs the scalar conversion */
        uint16_t *codes = malloc(65536 * 2);
        float *wide = malloc(65536 * sizeof(float));
        for (int h = 0; h < 65536; h++) codes[h] = (uint16_t)h;
        mp_quant_dequantize(t, codes, wide, 65536);
        int bad = 0;
        for (int h = 0; h < 65536; h++) {
            const float r = (float)from_half(t, (uint16_t)h);
            if (isnan(r) ? !isnan(wide[h]) : memcmp(&r, &wide[h], 4) != 0) bad++;
        }
        CHECK(bad == 0, "%s: %d of 65536 codes widen differently from the scalar conversion", nm, bad);
        free(codes);
        free(wide);
        /* dots: every ISA, lengths with every kind of tail */
        const size_t sizes[] = {1, 7, 31, 33, 1000, 2051};
        double worst = 0;
        for (int si = 0; si < 6; si++) {
            const size_t n = sizes[si];
            uint16_t *w = malloc(n * 2);
            float *x = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) {
                w[i] = to_half(t, (unif() - 0.5f) * (i % 13 == 0 ? 8.0f : 0.1f));
                x[i] = (unif() - 0.5f) * (i % 97 < 5 ? 20.0f : 1.0f);
            }
            /* exact: the float32 activations; exact_b: rounded to BF16 (RNE), what the avx512bf16 kernel multiplies */
            double exact = 0, exact_b = 0, mag = 0;
            for (size_t i = 0; i < n; i++) {
                exact += from_half(t, w[i]) * x[i];
                exact_b += from_half(t, w[i]) * mp_quant_bf16_to_f32(mp_quant_f32_to_bf16(x[i]));
                mag += fabs(from_half(t, w[i]) * x[i]);
            }
            const double tol = ((double)n / 8 + 8) * 0x1p-24 * mag + 1e-30;
            for (int isa = MP_QDOT_SCALAR; isa <= MP_QDOT_AVX512 + 1; isa++) { /* + 1: the BF16 products */
                const int bact = isa > MP_QDOT_AVX512;
                mp_qdot_fn k = !bact ? mp_qdot_kernel(t, (mp_qdot_isa)isa) : t == MP_GGML_BF16 ? mp_qdot_bf16_kernel() : NULL;
                if (!k) continue;
                const double e = fabs(k(w, x, n) - (bact ? exact_b : exact));
                if (bact) /* the activations' rounding itself: at most u = 2^-8 of each product (8-bit significand) */
                    CHECK(fabs(exact_b - exact) <= 0x1p-8 * mag, "%s n %zu: BF16 activations move the dot %.3g > 2^-8 sum|wx|",
                          nm, n, fabs(exact_b - exact));
                worst = fmax(worst, e / tol);
                CHECK(e <= tol, "%s %s n %zu: |dot - exact| %.3g > %.3g", nm,
                      bact ? "bf16 products" : mp_qdot_isa_name((mp_qdot_isa)isa), n, e, tol);
            }
            free(w);
            free(x);
        }
        /* matmul: dot path (N <= 32) and widened panels + sgemm, with a bias; then, BF16 on a CPU with AVX-512
         * BF16, the BF16 products: activations rounded to BF16, 4 x 4 blocks whose outputs equal the one-row
         * kernel's bit for bit */
        const mp_qdot_fn dot = mp_qdot_bf16_kernel();
        const int IN = 515, OUT = 301, Ns[] = {1, 4, 32, 40, 67};
        uint16_t *w = malloc((size_t)IN * OUT * 2);
        float bias[301];
        for (size_t i = 0; i < (size_t)IN * OUT; i++) w[i] = to_half(t, (unif() - 0.5f) * 0.2f);
        for (int o = 0; o < OUT; o++) bias[o] = unif() - 0.5f;
        for (int bact = 0; bact <= (t == MP_GGML_BF16 && dot != NULL); bact++) {
            for (int k = 0; k < 5; k++) {
                const int N = Ns[k];
                float *in = malloc((size_t)N * IN * sizeof(float)), *out = malloc((size_t)N * OUT * sizeof(float));
                for (int i = 0; i < N * IN; i++) in[i] = unif() - 0.5f;
                CHECK((bact ? mp_qdot_matmul_bf16(out, in, w, (size_t)IN * 2, bias, N, IN, OUT)
                            : mp_qdot_matmul(out, in, t, w, (size_t)IN * 2, bias, N, IN, OUT)) == MP_OK,
                      "%s", mp_last_error());
                int over = 0, differ = 0;
                for (int n = 0; n < N; n++)
                    for (int o = 0; o < OUT; o++) {
                        double s = bias[o], mag = fabs(bias[o]);
                        for (int i = 0; i < IN; i++) {
                            const float xi = in[(size_t)n * IN + i];
                            const double xr = bact ? mp_quant_bf16_to_f32(mp_quant_f32_to_bf16(xi)) : xi;
                            const double p = from_half(t, w[(size_t)o * IN + i]) * xr;
                            s += p;
                            mag += fabs(p);
                        }
                        /* sgemm (N > 32) may sum each output's IN products in one sequence: (IN + 9) u */
                        const double tol = ((N <= 32 || bact ? (double)IN / 8 : (double)IN) + 9) * 0x1p-24 * mag + 1e-30;
                        const double e = fabs(out[(size_t)n * OUT + o] - s);
                        worst = fmax(worst, e / tol);
                        if (e > tol) over++;
                        if (bact && out[(size_t)n * OUT + o] != dot(w + (size_t)o * IN, in + (size_t)n * IN, IN) + bias[o])
                            differ++;
                    }
                CHECK(over == 0, "%s matmul N %d: %d outputs beyond the float32 summation bound", nm, N, over);
                CHECK(differ == 0, "%s matmul N %d (BF16 products): %d outputs differ from the one-row kernel's", nm, N,
                      differ);
                free(in);
                free(out);
            }
        }
        if (t == MP_GGML_BF16) { /* the rounding of the BF16 products, alone: nearest even, as the scalar conversion */
            const size_t n = 200003; /* pieces of 65536 and a tail */
            float *x = malloc(n * sizeof(float));
            uint16_t *r = malloc(n * 2);
            for (size_t i = 0; i < n; i++) x[i] = (unif() - 0.5f) * (i % 7 == 0 ? 1e4f : i % 5 == 0 ? 1e-4f : 1.0f);
            x[0] = 1.0f + 0x1p-8f; /* a tie: rounds to even (1.0) */
            x[1] = 1.0f + 0x1p-8f + 0x1p-7f; /* a tie: rounds to even (1 + 2^-6) */
            mp_qdot_round_bf16(x, r, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += r[i] != mp_quant_f32_to_bf16(x[i]);
            CHECK(bad == 0 && r[0] == 0x3f80 && r[1] == 0x3f82, "mp_qdot_round_bf16: %zu of %zu differ from RNE", bad, n);
            free(x);
            free(r);
        }
        if (t == MP_GGML_BF16 && !dot) {
            float o1[301], x1[515] = {0};
            CHECK(mp_qdot_matmul_bf16(o1, x1, w, (size_t)IN * 2, NULL, 1, IN, OUT) == MP_ERR_ARG,
                  "BF16 products without AVX-512 BF16: refused");
        }
        free(w);
        printf("%-5s dots and matmuls: worst error %.3f of the float32 summation bound\n", nm, worst);
    }
}

/* More activation rows than one pass over the weights holds (8 MiB of them: 2048 BF16 rows or 1365 laid-out
 * Q8_0 rows at IN 2048): every output still equals the one-row kernel's bit for bit. */
static void test_passes(void) {
    const int IN = 2048, OUT = 9, N = 2100;
    float *in = malloc((size_t)N * IN * sizeof(float)), *out = malloc((size_t)N * OUT * sizeof(float));
    for (size_t i = 0; i < (size_t)N * IN; i++) in[i] = unif() - 0.5f;
    const mp_qdot_fn bdot = mp_qdot_bf16_kernel();
    if (bdot) {
        uint16_t *w = malloc((size_t)IN * OUT * 2);
        for (size_t i = 0; i < (size_t)IN * OUT; i++) w[i] = mp_quant_f32_to_bf16((unif() - 0.5f) * 0.1f);
        CHECK(mp_qdot_matmul_bf16(out, in, w, (size_t)IN * 2, NULL, N, IN, OUT) == MP_OK, "%s", mp_last_error());
        int differ = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) differ += out[(size_t)n * OUT + o] != bdot(w + (size_t)o * IN, in + (size_t)n * IN, IN);
        CHECK(differ == 0, "BF16 products over %d rows (2 passes): %d outputs differ from the one-row kernel's", N, differ);
        free(w);
        /* one activation row over rows longer than the one-row limit (qdot.c: 8192) takes the 4-row blocks: the
         * same bits as the one-row kernel, with the bias added after the sum on both sides */
        const int LIN = 14343, LOUT = 13;
        float *lx = malloc((size_t)LIN * sizeof(float)), lout[13], lbias[13];
        uint16_t *lw = malloc((size_t)LIN * LOUT * 2);
        for (int i = 0; i < LIN; i++) lx[i] = unif() - 0.5f;
        for (size_t i = 0; i < (size_t)LIN * LOUT; i++) lw[i] = mp_quant_f32_to_bf16((unif() - 0.5f) * 0.1f);
        for (int o = 0; o < LOUT; o++) lbias[o] = 0.25f;
        CHECK(mp_qdot_matmul_bf16(lout, lx, lw, (size_t)LIN * 2, lbias, 1, LIN, LOUT) == MP_OK, "%s", mp_last_error());
        differ = 0;
        for (int o = 0; o < LOUT; o++) differ += lout[o] != bdot(lw + (size_t)o * LIN, lx, LIN) + 0.25f;
        CHECK(differ == 0, "BF16 products, one row of %d: %d of %d outputs differ from the one-row kernel's", LIN,
              differ, LOUT);
        free(lx);
        free(lw);
    }
    if (mp_qdot_tiles(MP_GGML_Q8_0)) {
        const size_t rb = (size_t)IN / 32 * 34, ab = mp_qdot_act_bytes(MP_GGML_Q8_0, IN);
        unsigned char *w = malloc(rb * OUT), *xq = malloc(ab);
        random_blocks(MP_GGML_Q8_0, w, (size_t)IN * OUT);
        CHECK(mp_qdot_matmul(out, in, MP_GGML_Q8_0, w, rb, NULL, N, IN, OUT) == MP_OK, "%s", mp_last_error());
        const mp_qdot_fn dot = mp_qdot_kernel(MP_GGML_Q8_0, mp_qdot_isa_active());
        int differ = 0;
        for (int n = 0; n < N; n++) {
            mp_qdot_quantize_act(MP_GGML_Q8_0, in + (size_t)n * IN, xq, IN);
            for (int o = 0; o < OUT; o++) differ += out[(size_t)n * OUT + o] != dot(w + (size_t)o * rb, xq, IN);
        }
        CHECK(differ == 0, "Q8_0 blocks over %d rows (2 passes): %d outputs differ from the dot kernel's", N, differ);
        free(w);
        free(xq);
    }
    free(in);
    free(out);
}

int main(void) {
    mp_init();
    printf("active ISA: %s\n", mp_qdot_isa_name(mp_qdot_isa_active()));
    test_q8_k_quantizer();
    test_kernels();
    test_matmul();
    test_passes();
    test_rms_error();
    test_half();
    return tu_finish("test_qdot");
}
