/* test_quant.c — ggml type geometry, half/bfloat16 conversion and block
 * dequantisation (runtime/quant.c) against references computed here: every
 * binary16 value decoded by the IEEE formula in double, narrowing checked by a
 * nearest-value search over the ordered codes (and the compiler's _Float16
 * where it has one), and quantised blocks packed in the test with ggml's
 * quantiser layout and expected values computed in double. */
#include "quant.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng_state = 12345u;
static uint32_t rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5; return rng_state; }
static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* binary16 by the formula: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024. */
static double ref_half(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

static double ref_bf16(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -133);
    else v = ldexp(128.0 + m, e - 134);
    return s ? -v : v;
}

/* Nearest code (ties to even) among the ordered finite positive codes
 * 0..maxcode of a format decoded by dec; inf past the overflow threshold. */
static uint16_t ref_narrow(double x, double (*dec)(uint16_t), uint16_t maxcode, uint16_t inf, int man_bits) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    double top = dec(maxcode), thr = top + ldexp(1.0, ilogb(top) - man_bits - 1);
    if (a >= thr) return sign | inf;
    uint32_t lo = 0, hi = maxcode;               /* largest code with value <= a */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (dec((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
    }
    if (lo == maxcode) return sign | (uint16_t)lo;
    double dl = a - dec((uint16_t)lo), dh = dec((uint16_t)(lo + 1)) - a;
    uint32_t c = dl < dh ? lo : dh < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    return sign | (uint16_t)c;
}

static void test_f16(void) {
    int bad = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mp_quant_f16_to_f32((uint16_t)h);
        double r = ref_half((uint16_t)h);
        if (isnan(r) ? !isnan(f) : ((double)f != r || !signbit(f) != !signbit(r))) bad++;
        uint16_t back = mp_quant_f32_to_f16(f);
        if (isnan(r) ? ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff)) : back != h) bad_rt++;
    }
    CHECK(bad == 0, "%d of 65536 halves decode differently from the IEEE formula", bad);
    CHECK(bad_rt == 0, "%d halves do not survive f16->f32->f16", bad_rt);
    /* Hand-picked narrowing cases. */
    struct { float x; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {1.0f + 0x1p-11f, 0x3c00} /* tie -> even */, {1.0f + 3 * 0x1p-11f, 0x3c02},
        {65504.0f, 0x7bff}, {65519.99f, 0x7bff}, {65520.0f, 0x7c00}, {1e9f, 0x7c00}, {-1e9f, 0xfc00},
        {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000} /* tie -> even zero */, {0x1.0001p-25f, 0x0001},
        {3 * 0x1p-26f, 0x0002 - 1}, {0x1p-14f, 0x0400}, {0x1.ff8p-15f, 0x03ff}, {0x1.ffcp-15f, 0x0400} /* tie rounds up to normal */,
        {-0.0f, 0x8000}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {1e-30f, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(mp_quant_f32_to_f16(cases[i].x) == cases[i].h, "f32_to_f16(%a) = 0x%04x, expected 0x%04x",
              (double)cases[i].x, mp_quant_f32_to_f16(cases[i].x), cases[i].h);
    CHECK(isnan(mp_quant_f16_to_f32(mp_quant_f32_to_f16(NAN))), "NaN stays NaN");
    /* Random floats over the whole range against the nearest-code search. */
    bad = 0;
    int bad_hw = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd();
        if (i % 2) u = (u & 0x807fffffu) | ((100u + rnd() % 50u) << 23);   /* half's range */
        float x = bits_f(u);
        if (isnan(x)) continue;
        uint16_t want = ref_narrow(x, ref_half, 0x7bff, 0x7c00, 10), got = mp_quant_f32_to_f16(x);
        if (want != got && bad++ < 5) fprintf(stderr, "f16(%a): got 0x%04x want 0x%04x\n", (double)x, got, want);
#ifdef __FLT16_MAX__
        _Float16 hw = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &hw, 2);
        if (hb != got) bad_hw++;
#endif
    }
    CHECK(bad == 0, "%d random floats narrow differently from the nearest-even search", bad);
    CHECK(bad_hw == 0, "%d random floats narrow differently from the compiler's _Float16", bad_hw);
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mp_quant_bf16_to_f32((uint16_t)h);
        double r = ref_bf16((uint16_t)h);
        if (isnan(r) ? !isnan(f) : (double)f != r) bad++;
        if (!isnan(r) && mp_quant_f32_to_bf16(f) != h) bad++;
    }
    CHECK(bad == 0, "%d bfloat16 codes decode or round-trip wrongly", bad);
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = bits_f(rnd());
        if (isnan(x)) continue;
        uint16_t want = ref_narrow(x, ref_bf16, 0x7f7f, 0x7f80, 7), got = mp_quant_f32_to_bf16(x);
        if (want != got && bad++ < 5) fprintf(stderr, "bf16(%a): got 0x%04x want 0x%04x\n", (double)x, got, want);
    }
    CHECK(bad == 0, "%d random floats narrow to bfloat16 differently from the nearest-even search", bad);
    CHECK(mp_quant_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "bf16 tie to even (down)");
    CHECK(mp_quant_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "bf16 tie to even (up)");
    CHECK(mp_quant_f32_to_bf16(bits_f(0x7f7fffffu)) == 0x7f80, "bf16 overflow to inf");
    CHECK(isnan(mp_quant_bf16_to_f32(mp_quant_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
    CHECK(mp_quant_f32_to_bf16(bits_f(0x00010000u)) == 0x0001, "bf16 subnormal kept");
}

static void put_f16(unsigned char *p, uint16_t h) { p[0] = (unsigned char)(h & 0xff); p[1] = (unsigned char)(h >> 8); }

/* Compares n decoded values to expected doubles within rel * max(1, |e|). */
static void compare(const char *what, const float *got, const double *want, size_t n, double rel) {
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]), tol = rel * fmax(1.0, fabs(want[i]));
        if (err > tol) { if (bad++ < 3) fprintf(stderr, "%s[%zu]: %.9g vs %.9g\n", what, i, got[i], want[i]); }
        if (err > worst) worst = err;
    }
    CHECK(bad == 0, "%s: %d of %zu values off (worst %.3g)", what, bad, n, worst);
}

static void test_legacy_blocks(void) {
    unsigned char b[4 * 34];
    float y[128];
    double e[128];
    /* Q4_0: d = 0.5 (0x3800); byte j holds j (low) and 15-j (high). */
    put_f16(b, 0x3800);
    for (int j = 0; j < 16; j++) b[2 + j] = (unsigned char)(j | ((15 - j) << 4));
    mp_quant_dequantize(MP_GGML_Q4_0, b, y, 32);
    for (int j = 0; j < 16; j++) { e[j] = (j - 8) * 0.5; e[j + 16] = (15 - j - 8) * 0.5; }
    compare("Q4_0", y, e, 32, 0);
    /* Q4_1: d = 0.25 (0x3400), m = -1.5 (0xbe00). */
    put_f16(b, 0x3400);
    put_f16(b + 2, 0xbe00);
    for (int j = 0; j < 16; j++) b[4 + j] = (unsigned char)(((j * 7) & 15) | (((j * 3 + 1) & 15) << 4));
    mp_quant_dequantize(MP_GGML_Q4_1, b, y, 32);
    for (int j = 0; j < 16; j++) { e[j] = ((j * 7) & 15) * 0.25 - 1.5; e[j + 16] = ((j * 3 + 1) & 15) * 0.25 - 1.5; }
    compare("Q4_1", y, e, 32, 0);
    /* Q5_0: d = 0.125 (0x3000); high bits 0xA5A5F00F (bit i = 5th bit of value i). */
    uint32_t qh = 0xA5A5F00Fu;
    put_f16(b, 0x3000);
    memcpy(b + 2, &qh, 4);
    for (int j = 0; j < 16; j++) b[6 + j] = (unsigned char)((j & 15) | (((j + 5) & 15) << 4));
    mp_quant_dequantize(MP_GGML_Q5_0, b, y, 32);
    for (int i = 0; i < 32; i++) {
        int lo = i < 16 ? (i & 15) : ((i - 16 + 5) & 15);
        e[i] = ((lo | (int)(((qh >> i) & 1) << 4)) - 16) * 0.125;
    }
    compare("Q5_0", y, e, 32, 0);
    /* Q5_1: d = 2 (0x4000), m = 0.5 (0x3800). */
    put_f16(b, 0x4000);
    put_f16(b + 2, 0x3800);
    memcpy(b + 4, &qh, 4);
    for (int j = 0; j < 16; j++) b[8 + j] = (unsigned char)((j & 15) | (((j + 5) & 15) << 4));
    mp_quant_dequantize(MP_GGML_Q5_1, b, y, 32);
    for (int i = 0; i < 32; i++) {
        int lo = i < 16 ? (i & 15) : ((i - 16 + 5) & 15);
        e[i] = (lo | (int)(((qh >> i) & 1) << 4)) * 2.0 + 0.5;
    }
    compare("Q5_1", y, e, 32, 0);
    /* Q8_0, two blocks: d = 0x2e66 (about 0.0999) and 1/128 (0x2000); q = -128..127 spread. */
    put_f16(b, 0x2e66);
    put_f16(b + 34, 0x2000);
    for (int j = 0; j < 32; j++) { b[2 + j] = (unsigned char)(int8_t)(j * 8 - 128); b[36 + j] = (unsigned char)(int8_t)(127 - j); }
    mp_quant_dequantize(MP_GGML_Q8_0, b, y, 64);
    for (int j = 0; j < 32; j++) { e[j] = (j * 8 - 128) * ref_half(0x2e66); e[32 + j] = (127 - j) / 128.0; }
    compare("Q8_0", y, e, 64, 1e-7);
}

/* Q4_K block packed as ggml's quantize_row_q4_K stores it. */
static void pack_q4_k(unsigned char *b, uint16_t d, uint16_t dmin, const int sc[8], const int mn[8], const int L[256]) {
    memset(b, 0, 144);
    put_f16(b, d);
    put_f16(b + 2, dmin);
    unsigned char *s = b + 4, *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        if (j < 4) { s[j] = (unsigned char)sc[j]; s[j + 4] = (unsigned char)mn[j]; }
        else {
            s[j + 4] = (unsigned char)((sc[j] & 0xf) | ((mn[j] & 0xf) << 4));
            s[j - 4] |= (unsigned char)((sc[j] >> 4) << 6);
            s[j] |= (unsigned char)((mn[j] >> 4) << 6);
        }
    }
    for (int j = 0; j < 256; j += 64)
        for (int l = 0; l < 32; l++) qs[j / 2 + l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 4));
}

/* Q6_K block packed as ggml's quantize_row_q6_K stores it (L in 0..63 = q + 32). */
static void pack_q6_k(unsigned char *b, uint16_t d, const int sc[16], const int L[256]) {
    memset(b, 0, 210);
    unsigned char *ql = b, *qh = b + 128;
    for (int j = 0; j < 256; j += 128) {
        for (int l = 0; l < 32; l++) {
            int q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf, q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;
            ql[l] = (unsigned char)(q1 | (q3 << 4));
            ql[l + 32] = (unsigned char)(q2 | (q4 << 4));
            qh[l] = (unsigned char)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                    ((L[j + l + 96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
    for (int i = 0; i < 16; i++) b[192 + i] = (unsigned char)(int8_t)sc[i];
    put_f16(b + 208, d);
}

static void test_k_blocks(void) {
    unsigned char b[2 * 210];
    float y[512];
    double e[512];
    int sc[16], mn[8], L[512];
    /* Q4_K, block 1 with power-of-two scales (exact), block 2 with a random one. */
    for (int blk = 0; blk < 2; blk++) {
        uint16_t d = blk ? 0x2a1f : 0x3800 /* 0.5 */, dmin = blk ? 0x1e3d : 0x3400 /* 0.25 */;
        for (int j = 0; j < 8; j++) { sc[j] = blk ? (int)(rnd() % 64) : (j * 9 + 1) % 64; mn[j] = blk ? (int)(rnd() % 64) : 63 - j * 7; }
        for (int k = 0; k < 256; k++) L[k] = blk ? (int)(rnd() % 16) : (k * 5 + k / 7) % 16;
        pack_q4_k(b + 144 * blk, d, dmin, sc, mn, L);
        for (int k = 0; k < 256; k++)
            e[256 * blk + k] = ref_half(d) * sc[k / 32] * L[k] - ref_half(dmin) * mn[k / 32];
    }
    mp_quant_dequantize(MP_GGML_Q4_K, b, y, 512);
    compare("Q4_K exact block", y, e, 256, 0);
    compare("Q4_K random block", y + 256, e + 256, 256, 1e-6);
    /* Q6_K: negative and positive 8-bit scales, all 6-bit codes. */
    for (int blk = 0; blk < 2; blk++) {
        uint16_t d = blk ? 0x1c9b : 0x2000 /* 1/128 */;
        for (int i = 0; i < 16; i++) sc[i] = blk ? (int)(rnd() % 256) - 128 : (i * 17) % 256 - 128;
        for (int k = 0; k < 256; k++) L[k] = blk ? (int)(rnd() % 64) : (k * 11 + 3) % 64;
        pack_q6_k(b + 210 * blk, d, sc, L);
        for (int k = 0; k < 256; k++) e[256 * blk + k] = ref_half(d) * sc[k / 16] * (L[k] - 32);
    }
    mp_quant_dequantize(MP_GGML_Q6_K, b, y, 512);
    compare("Q6_K exact block", y, e, 256, 0);
    compare("Q6_K random block", y + 256, e + 256, 256, 1e-6);
}

static void test_q8_0_quantiser(void) {
    enum { N = 32 * 64 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    unsigned char *q = malloc(N / 32 * 34);
    for (int i = 0; i < N; i++) {
        double u = (rnd() + 0.5) / 4294967296.0;
        x[i] = (float)((u - 0.5) * ldexp(1.0, (int)(i / 32 % 12) - 6));   /* scale varies per block */
    }
    for (int i = 0; i < 32; i++) x[32 * 5 + i] = 0.0f;                   /* an all-zero block */
    mp_quant_quantize_q8_0(x, q, N);
    mp_quant_dequantize(MP_GGML_Q8_0, q, y, N);
    int bad = 0, bad_q = 0;
    for (int blk = 0; blk < N / 32; blk++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[32 * blk + j]));
        double d = (float)(amax / 127.0), d16 = ref_half((uint16_t)(q[34 * blk] | q[34 * blk + 1] << 8));
        for (int j = 0; j < 32; j++) {
            int qv = (int8_t)q[34 * blk + 2 + j];
            /* ggml: roundf(x * (1/d)) with d in float; ties are measure-zero here */
            long want = d ? lround((double)x[32 * blk + j] * (double)(1.0f / (float)d)) : 0;
            if (qv != want) bad_q++;
            double err = fabs((double)y[32 * blk + j] - x[32 * blk + j]);
            if (err > 0.5 * d + 127 * fabs(d - d16) + 1e-12) bad++;
        }
    }
    CHECK(bad_q == 0, "%d Q8_0 codes differ from round(x / d)", bad_q);
    CHECK(bad == 0, "%d Q8_0 round-trip errors exceed half a step plus the f16 scale error", bad);
    for (int j = 0; j < 32; j++) CHECK(y[32 * 5 + j] == 0.0f, "zero block decodes to zeros");
    free(x);
    free(y);
    free(q);
}

static void test_geometry(void) {
    size_t bv, bb;
    uint64_t bytes;
    CHECK(mp_quant_block(MP_GGML_Q4_K, &bv, &bb) == 0 && bv == 256 && bb == 144, "Q4_K geometry");
    CHECK(mp_quant_block(MP_GGML_Q6_K, &bv, &bb) == 0 && bv == 256 && bb == 210, "Q6_K geometry");
    CHECK(mp_quant_block(MP_GGML_Q5_K, &bv, &bb) == 0 && bv == 256 && bb == 176, "Q5_K geometry");
    CHECK(mp_quant_block(4, &bv, &bb) == -1, "removed type 4 is unknown");
    CHECK(mp_quant_block(1000, &bv, &bb) == -1, "type 1000 is unknown");
    CHECK(!strcmp(mp_quant_type_name(MP_GGML_BF16), "BF16"), "BF16 name");
    CHECK(!strcmp(mp_quant_type_name(77), "unknown"), "unknown name");
    CHECK(mp_quant_supported(MP_GGML_Q6_K) && !mp_quant_supported(MP_GGML_Q5_K) &&
          !mp_quant_supported(MP_GGML_IQ2_XXS), "supported set");
    CHECK(mp_quant_bytes(MP_GGML_Q8_0, 64, &bytes) == MP_OK && bytes == 68, "Q8_0 bytes");
    CHECK(mp_quant_bytes(MP_GGML_Q8_0, 33, &bytes) == MP_ERR_FORMAT, "partial block refused");
    CHECK(mp_quant_bytes(MP_GGML_F64, UINT64_MAX / 4, &bytes) == MP_ERR_NOMEM, "byte overflow refused");
    CHECK(mp_quant_bytes(99, 1, &bytes) == MP_ERR_FORMAT && strstr(mp_last_error(), "unknown ggml type 99"),
          "unknown type message: %s", mp_last_error());
}

/* Large tensor: the parallel path must equal block-by-block decoding. */
static void test_parallel(void) {
    size_t nb = 70000, n = nb * 32;
    unsigned char *q = malloc(nb * 18);
    float *a = malloc(n * sizeof *a), *b = malloc(32 * sizeof *b);
    for (size_t i = 0; i < nb * 18; i++) q[i] = (unsigned char)rnd();
    for (size_t i = 0; i < nb; i++) put_f16(q + 18 * i, (uint16_t)(0x2000 + (rnd() & 0x1fff)));
    mp_quant_dequantize(MP_GGML_Q4_0, q, a, n);
    int bad = 0;
    for (size_t i = 0; i < nb; i += 997) {
        mp_quant_dequantize(MP_GGML_Q4_0, q + 18 * i, b, 32);
        if (memcmp(a + 32 * i, b, 32 * sizeof *b)) bad++;
    }
    CHECK(bad == 0, "%d blocks differ between the parallel and the single-block decode", bad);
    free(q);
    free(a);
    free(b);
}

int main(void) {
    test_f16();
    test_bf16();
    test_legacy_blocks();
    test_k_blocks();
    test_q8_0_quantiser();
    test_geometry();
    test_parallel();
    (void)f_bits;
    return tu_finish("test_quant");
}
