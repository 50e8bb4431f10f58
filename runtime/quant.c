/* quant.c — ggml tensor types: geometry table, half/bfloat16 conversion,
 * block dequantisers (written from the layouts of ggml-common.h and the
 * reference dequantize_row_* of ggml-quants.c) and the Q8_0 quantiser. All
 * reads go through byte pointers and memcpy, so blocks need no alignment. */
#include "quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

typedef struct { uint32_t id; const char *name; uint16_t values, bytes; unsigned char ok; } type_info;

/* Every type ggml defines that a GGUF file may carry (ggml.h, ggml-common.h). */
static const type_info TYPES[] = {
    {MP_GGML_F32, "F32", 1, 4, 1},          {MP_GGML_F16, "F16", 1, 2, 1},
    {MP_GGML_Q4_0, "Q4_0", 32, 18, 1},      {MP_GGML_Q4_1, "Q4_1", 32, 20, 1},
    {MP_GGML_Q5_0, "Q5_0", 32, 22, 1},      {MP_GGML_Q5_1, "Q5_1", 32, 24, 1},
    {MP_GGML_Q8_0, "Q8_0", 32, 34, 1},      {MP_GGML_Q8_1, "Q8_1", 32, 36, 0},
    {MP_GGML_Q2_K, "Q2_K", 256, 84, 0},     {MP_GGML_Q3_K, "Q3_K", 256, 110, 0},
    {MP_GGML_Q4_K, "Q4_K", 256, 144, 1},    {MP_GGML_Q5_K, "Q5_K", 256, 176, 0},
    {MP_GGML_Q6_K, "Q6_K", 256, 210, 1},    {MP_GGML_Q8_K, "Q8_K", 256, 292, 0},
    {MP_GGML_IQ2_XXS, "IQ2_XXS", 256, 66, 0}, {MP_GGML_IQ2_XS, "IQ2_XS", 256, 74, 0},
    {MP_GGML_IQ3_XXS, "IQ3_XXS", 256, 98, 0}, {MP_GGML_IQ1_S, "IQ1_S", 256, 50, 0},
    {MP_GGML_IQ4_NL, "IQ4_NL", 32, 18, 0},  {MP_GGML_IQ3_S, "IQ3_S", 256, 110, 0},
    {MP_GGML_IQ2_S, "IQ2_S", 256, 82, 0},   {MP_GGML_IQ4_XS, "IQ4_XS", 256, 136, 0},
    {MP_GGML_I8, "I8", 1, 1, 0},            {MP_GGML_I16, "I16", 1, 2, 0},
    {MP_GGML_I32, "I32", 1, 4, 0},          {MP_GGML_I64, "I64", 1, 8, 0},
    {MP_GGML_F64, "F64", 1, 8, 0},          {MP_GGML_IQ1_M, "IQ1_M", 256, 56, 0},
    {MP_GGML_BF16, "BF16", 1, 2, 1},        {MP_GGML_TQ1_0, "TQ1_0", 256, 54, 0},
    {MP_GGML_TQ2_0, "TQ2_0", 256, 66, 0},   {MP_GGML_MXFP4, "MXFP4", 32, 17, 0},
};

static const type_info *find_type(uint32_t id) {
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
        if (TYPES[i].id == id) return &TYPES[i];
    return NULL;
}

const char *mp_quant_type_name(uint32_t type) {
    const type_info *t = find_type(type);
    return t ? t->name : "unknown";
}

int mp_quant_block(uint32_t type, size_t *block_values, size_t *block_bytes) {
    const type_info *t = find_type(type);
    if (!t) return -1;
    *block_values = t->values;
    *block_bytes = t->bytes;
    return 0;
}

int mp_quant_supported(uint32_t type) {
    const type_info *t = find_type(type);
    return t && t->ok;
}

mp_status mp_quant_bytes(uint32_t type, uint64_t n, uint64_t *bytes) {
    const type_info *t = find_type(type);
    if (!t) return mp_error(MP_ERR_FORMAT, "unknown ggml type %u", (unsigned)type);
    if (n % t->values)
        return mp_error(MP_ERR_FORMAT, "%llu values are not a whole number of %s blocks of %u",
                        (unsigned long long)n, t->name, (unsigned)t->values);
    uint64_t blocks = n / t->values;
    if (blocks > UINT64_MAX / t->bytes)
        return mp_error(MP_ERR_NOMEM, "%llu %s values overflow a 64-bit byte count",
                        (unsigned long long)n, t->name);
    *bytes = blocks * t->bytes;
    return MP_OK;
}

/* ---- scalar conversions ---- */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float mp_quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));   /* inf / NaN */
    if (exp != 0) return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return u2f(sign);                                   /* +-0 */
    uint32_t e = 113;                                                  /* subnormal: normalise */
    while (!(mant & 0x400u)) { mant <<= 1; e--; }
    return u2f(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t mp_quant_f32_to_f16(float f) {
    uint32_t x = f2u(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);       /* >= 65520: inf */
    if (a >= 0x38800000u) {                                         /* normal half */
        uint32_t r = a - 0x38000000u;                               /* rebias 127 -> 15 */
        r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;                  /* round to nearest even */
        return (uint16_t)(sign | r);
    }
    if (a <= 0x33000000u) return (uint16_t)sign;                    /* <= 2^-25: zero */
    uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;               /* may carry to normal */
    return (uint16_t)(sign | q);
}

float mp_quant_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mp_quant_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- block decoders: one block of `src` into `y` ---- */

static float rd_f16(const unsigned char *p) {
    return mp_quant_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static void deq_q4_0(const unsigned char *b, float *y) {
    float d = rd_f16(b);
    const unsigned char *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0xf) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const unsigned char *b, float *y) {
    float d = rd_f16(b), m = rd_f16(b + 2);
    const unsigned char *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0xf) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* Q5: bit j of the little-endian u32 `qh` is the 5th bit of value j (0..31). */
static void deq_q5(const unsigned char *b, float *y, int has_min) {
    float d = rd_f16(b), m = has_min ? rd_f16(b + 2) : 0.0f;
    const unsigned char *h = b + (has_min ? 4 : 2), *qs = h + 4;
    uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    int bias = has_min ? 0 : 16;
    for (int j = 0; j < 16; j++) {
        int x0 = (int)((qs[j] & 0xfu) | (((qh >> j) & 1u) << 4)) - bias;
        int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - bias;
        if (has_min) { y[j] = (float)x0 * d + m; y[j + 16] = (float)x1 * d + m; }
        else { y[j] = (float)x0 * d; y[j + 16] = (float)x1 * d; }
    }
}

static void deq_q8_0(const unsigned char *b, float *y) {
    float d = rd_f16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q4_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static void q4k_scale_min(int j, const unsigned char *q, unsigned *sc, unsigned *mn) {
    if (j < 4) {
        *sc = q[j] & 63u;
        *mn = q[j + 4] & 63u;
    } else {
        *sc = (q[j + 4] & 0xfu) | ((unsigned)(q[j - 4] >> 6) << 4);
        *mn = (unsigned)(q[j + 4] >> 4) | ((unsigned)(q[j] >> 6) << 4);
    }
}

static void deq_q4_k(const unsigned char *b, float *y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const unsigned char *scales = b + 4, *q = b + 16;
    for (int g = 0; g < 4; g++) {             /* 4 groups of 64: low nibbles then high */
        unsigned sc, mn;
        q4k_scale_min(2 * g, scales, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        q4k_scale_min(2 * g + 1, scales, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0xf) - m1;
        for (int l = 0; l < 32; l++) y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
        y += 64;
        q += 32;
    }
}

static void deq_q6_k(const unsigned char *b, float *y) {
    const unsigned char *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = rd_f16(b + 208);
    for (int half = 0; half < 2; half++) {    /* two halves of 128 values */
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xfu) | (((qh[l] >> 0) & 3u) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xfu) | (((qh[l] >> 2) & 3u) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3u) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3u) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

/* ---- half rows: widened 16 (F16C) or 8 at a time, OpenMP over 4096-value
 * pieces; the x86 paths are chosen at run time (quant.h's callers include the
 * sgemm panels of qdot.c, where this is on the prefill's critical path) ---- */

static void half_piece_scalar(uint32_t type, const unsigned char *s, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        y[i] = type == MP_GGML_BF16 ? mp_quant_bf16_to_f32(h) : mp_quant_f16_to_f32(h);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2,f16c"))) static void half_piece_avx2(uint32_t type, const unsigned char *s, float *y,
                                                                   size_t n) {
    size_t i = 0;
    if (type == MP_GGML_BF16)
        for (; i + 8 <= n; i += 8) {
            const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
            _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        }
    else
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    half_piece_scalar(type, s + 2 * i, y + i, n - i);
}

static int have_avx2_f16c(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
static void half_piece_avx2(uint32_t type, const unsigned char *s, float *y, size_t n) {
    half_piece_scalar(type, s, y, n);
}
static int have_avx2_f16c(void) { return 0; }
#endif

static void dequantize_half(uint32_t type, const unsigned char *s, float *dst, size_t n) {
    const int simd = have_avx2_f16c();
    const long long pieces = (long long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static) if (pieces > 16)
    for (long long p = 0; p < pieces; p++) {
        const size_t i0 = (size_t)p * 4096, k = n - i0 < 4096 ? n - i0 : 4096;
        if (simd) half_piece_avx2(type, s + 2 * i0, dst + i0, k);
        else half_piece_scalar(type, s + 2 * i0, dst + i0, k);
    }
}

void mp_quant_dequantize(uint32_t type, const void *src, float *dst, size_t n) {
    const type_info *t = find_type(type);
    assert(t && t->ok && n % t->values == 0);
    const unsigned char *s = src;
    if (type == MP_GGML_F32) { memcpy(dst, src, n * sizeof(float)); return; }
    if (type == MP_GGML_F16 || type == MP_GGML_BF16) { dequantize_half(type, s, dst, n); return; }
    long long n_blocks = (long long)(n / t->values);
    size_t bv = t->values, bb = t->bytes;
#pragma omp parallel for schedule(static) if (n_blocks > 65536)
    for (long long i = 0; i < n_blocks; i++) {
        const unsigned char *b = s + (size_t)i * bb;
        float *y = dst + (size_t)i * bv;
        switch (type) {
        case MP_GGML_Q4_0: deq_q4_0(b, y); break;
        case MP_GGML_Q4_1: deq_q4_1(b, y); break;
        case MP_GGML_Q5_0: deq_q5(b, y, 0); break;
        case MP_GGML_Q5_1: deq_q5(b, y, 1); break;
        case MP_GGML_Q8_0: deq_q8_0(b, y); break;
        case MP_GGML_Q4_K: deq_q4_k(b, y); break;
        case MP_GGML_Q6_K: deq_q6_k(b, y); break;
        default: break;
        }
    }
}

void mp_quant_quantize_q8_0(const float *src, void *dst, size_t n) {
    assert(n % 32 == 0);
    unsigned char *out = dst;
    for (size_t i = 0; i < n / 32; i++, src += 32, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(src[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = mp_quant_f32_to_f16(d);
        out[0] = (unsigned char)(h & 0xff);
        out[1] = (unsigned char)(h >> 8);
        for (int j = 0; j < 32; j++) out[2 + j] = (unsigned char)(int8_t)roundf(src[j] * id);
    }
}
