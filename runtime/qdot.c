/* qdot.c — quantized-weight products (see qdot.h): Q8_K activation quantizer,
 * the scalar reference dot kernels (written from the block layouts in quant.h
 * and ggml's dequantize_row_* / vec_dot_*_ref), their AVX2 and AVX-512 forms,
 * run-time ISA choice, and the matmul that uses them. Blocks are read through
 * byte pointers (memcpy for the scales), so rows need no alignment. */
#include "qdot.h"
#include "quant.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MP_QDOT_X86 1
#include <immintrin.h>
#endif

static inline float f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return mp_quant_f16_to_f32(h);
}

/* ---- activations ---- */

void mp_qdot_quantize_q8_k(const float *x, void *dst, size_t n) {
    unsigned char *out = dst;
    for (size_t b = 0; b < n / 256; b++, x += 256, out += MP_Q8K_BYTES) {
        float mx = 0.0f, amax = 0.0f;
        for (int j = 0; j < 256; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; mx = x[j]; }
        }
        int8_t *qs = (int8_t *)(out + 4);
        int16_t bs[16];
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(qs, 0, 256);
            memset(bs, 0, sizeof bs);
        } else {
            const float iscale = -127.0f / mx;
            for (int j = 0; j < 256; j++) {
                int v = (int)lrintf(iscale * x[j]);
                qs[j] = (int8_t)(v > 127 ? 127 : v);
            }
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += qs[16 * j + i];
                bs[j] = (int16_t)s;
            }
            d = 1.0f / iscale;
        }
        memcpy(out, &d, 4);
        memcpy(out + 260, bs, sizeof bs);
    }
}

int mp_qdot_supported(uint32_t t) {
    return t == MP_GGML_Q8_0 || t == MP_GGML_Q4_0 || t == MP_GGML_Q4_K || t == MP_GGML_Q6_K || mp_qdot_is_half(t);
}

int mp_qdot_is_half(uint32_t t) { return t == MP_GGML_F16 || t == MP_GGML_BF16; }

uint32_t mp_qdot_act_type(uint32_t t) {
    return mp_qdot_is_half(t) ? MP_GGML_F32 : t == MP_GGML_Q4_K || t == MP_GGML_Q6_K ? MP_GGML_Q8_K : MP_GGML_Q8_0;
}

size_t mp_qdot_act_bytes(uint32_t t, size_t n) {
    const uint32_t a = mp_qdot_act_type(t);
    return a == MP_GGML_F32 ? n * sizeof(float) : a == MP_GGML_Q8_K ? n / 256 * MP_Q8K_BYTES : n / 32 * 34;
}

/* Q8_0 activations as ggml's quantize_row_q8_0 (d = max|x| / 127 stored as
 * f16, q = x / d rounded), vectorizable: rounding to nearest even (what ggml's
 * SIMD quantizers do; the reference rounds halves away from zero). */
static void quantize_act_q8_0(const float *x, unsigned char *out, size_t n) {
    for (size_t b = 0; b < n / 32; b++, x += 32, out += 34) {
        float amax = 0.0f;
#pragma omp simd reduction(max : amax)
        for (int j = 0; j < 32; j++) {
            const float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = mp_quant_f32_to_f16(d);
        memcpy(out, &h, 2);
        int8_t *q = (int8_t *)(out + 2);
#pragma omp simd
        for (int j = 0; j < 32; j++) q[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

void mp_qdot_quantize_act(uint32_t t, const float *x, void *dst, size_t n) {
    const uint32_t a = mp_qdot_act_type(t);
    if (a == MP_GGML_F32) memcpy(dst, x, n * sizeof(float)); /* half weights: activations stay float32 */
    else if (a == MP_GGML_Q8_K) mp_qdot_quantize_q8_k(x, dst, n);
    else quantize_act_q8_0(x, dst, n);
}

/* ---- scalar reference kernels ---- */

static float dot_q8_0_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    float sum = 0.0f;
    for (size_t i = 0; i < n / 32; i++, a += 34, b += 34) {
        const int8_t *qa = (const int8_t *)(a + 2), *qb = (const int8_t *)(b + 2);
        int s = 0;
        for (int j = 0; j < 32; j++) s += qa[j] * qb[j];
        sum += (float)s * (f16(a) * f16(b));
    }
    return sum;
}

static float dot_q4_0_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    float sum = 0.0f;
    for (size_t i = 0; i < n / 32; i++, a += 18, b += 34) {
        const int8_t *qb = (const int8_t *)(b + 2);
        int s = 0;
        for (int j = 0; j < 16; j++) s += ((a[2 + j] & 0xF) - 8) * qb[j] + ((a[2 + j] >> 4) - 8) * qb[j + 16];
        sum += (float)s * (f16(a) * f16(b));
    }
    return sum;
}

/* The 6-bit scales and mins of the eight 32-value sub-blocks of a Q4_K block
 * (ggml's get_scale_min_k4). */
static void q4k_scales(const unsigned char *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = q[j] & 63;
            mn[j] = q[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
            mn[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}

static inline float q8k_d(const unsigned char *b) { float d; memcpy(&d, b, 4); return d; }

/* sum_s mins[s] * (bsums of sub-block s) for Q4_K's 8 sub-blocks of 32 */
static inline int q4k_minsum(const unsigned char *b, const uint8_t mn[8]) {
    int16_t bs[16];
    memcpy(bs, b + 260, sizeof bs);
    int s = 0;
    for (int j = 0; j < 8; j++) s += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
    return s;
}

static float dot_q4_k_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    float sum = 0.0f;
    for (size_t i = 0; i < n / 256; i++, a += 144, b += MP_Q8K_BYTES) {
        uint8_t sc[8], mn[8];
        q4k_scales(a + 4, sc, mn);
        const unsigned char *qs = a + 16;
        const int8_t *x = (const int8_t *)(b + 4);
        int sumi = 0;
        for (int j = 0; j < 4; j++) {
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (qs[32 * j + l] & 0xF) * x[64 * j + l];
                s1 += (qs[32 * j + l] >> 4) * x[64 * j + 32 + l];
            }
            sumi += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
        }
        const float xd = q8k_d(b);
        sum += f16(a) * xd * (float)sumi - f16(a + 2) * xd * (float)q4k_minsum(b, mn);
    }
    return sum;
}

static float dot_q6_k_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    float sum = 0.0f;
    for (size_t i = 0; i < n / 256; i++, a += 210, b += MP_Q8K_BYTES) {
        const unsigned char *ql = a, *qh = a + 128;
        const int8_t *sc = (const int8_t *)(a + 192);
        const int8_t *x = (const int8_t *)(b + 4);
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const unsigned char *l0 = ql + 64 * h, *hh = qh + 32 * h;
            const int8_t *xx = x + 128 * h, *s = sc + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                int q1 = ((l0[l] & 0xF) | (((hh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((l0[l + 32] & 0xF) | (((hh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((l0[l] >> 4) | (((hh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((l0[l + 32] >> 4) | (((hh[l] >> 6) & 3) << 4)) - 32;
                sumi += s[is] * q1 * xx[l] + s[is + 2] * q2 * xx[l + 32] + s[is + 4] * q3 * xx[l + 64] +
                        s[is + 6] * q4 * xx[l + 96];
            }
        }
        sum += f16(a + 208) * q8k_d(b) * (float)sumi;
    }
    return sum;
}

/* Half-precision weights (F16, BF16) times float32 activations: each weight
 * widened exactly to float32, products summed in float32 in 8 interleaved
 * partial sums (the order the SIMD kernels use, so all ISAs agree closely). */
static inline float half_sum8(const float s[8]) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static float dot_f16_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w;
    const float *x = xq;
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += f16(a + 2 * (i + j)) * x[i + j];
    for (; i < n; i++) s[0] += f16(a + 2 * i) * x[i];
    return half_sum8(s);
}

static inline float bf16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return mp_quant_bf16_to_f32(h);
}

static float dot_bf16_scalar(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w;
    const float *x = xq;
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += bf16(a + 2 * (i + j)) * x[i + j];
    for (; i < n; i++) s[0] += bf16(a + 2 * i) * x[i];
    return half_sum8(s);
}

#ifdef MP_QDOT_X86
/* ---- AVX2 ---- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* f16 scale through F16C (the portable mp_quant_f16_to_f32 is a call per block) */
AVX2 static inline float h16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AVX2 static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 int32 partial sums of 32 products a (signed) x b (signed), via the
 * sign trick: |a| (unsigned) times b with a's sign. */
AVX2 static inline __m256i dot32_s8(__m256i a, __m256i b) {
    const __m256i ax = _mm256_sign_epi8(a, a), sb = _mm256_sign_epi8(b, a);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sb), _mm256_set1_epi16(1));
}

AVX2 static float dot_q8_0_avx2(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / 32; i++, a += 34, b += 34) {
        const __m256i qa = _mm256_loadu_si256((const __m256i *)(a + 2));
        const __m256i qb = _mm256_loadu_si256((const __m256i *)(b + 2));
        const __m256 d = _mm256_set1_ps(h16(a) * h16(b));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot32_s8(qa, qb)), acc);
    }
    return hsum256(acc);
}

/* 32 Q4_0 nibbles as signed bytes in value order: low nibbles then high, minus 8 */
AVX2 static inline __m256i q4_0_bytes(const unsigned char *q) {
    const __m128i x = _mm_loadu_si128((const __m128i *)q), m = _mm_set1_epi8(0xF);
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

AVX2 static float dot_q4_0_avx2(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / 32; i++, a += 18, b += 34) {
        const __m256i qb = _mm256_loadu_si256((const __m256i *)(b + 2));
        const __m256 d = _mm256_set1_ps(h16(a) * h16(b));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot32_s8(q4_0_bytes(a + 2), qb)), acc);
    }
    return hsum256(acc);
}

AVX2 static float dot_q4_k_avx2(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (size_t i = 0; i < n / 256; i++, a += 144, b += MP_Q8K_BYTES) {
        uint8_t sc[8], mn[8];
        q4k_scales(a + 4, sc, mn);
        const unsigned char *qs = a + 16;
        const int8_t *x = (const int8_t *)(b + 4);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + 64 * j));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 64 * j + 32));
            /* unsigned nibbles x signed activations: no sign trick needed */
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16(sc[2 * j]));
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        const float xd = q8k_d(b);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h16(a) * xd), _mm256_cvtepi32_ps(sumi), acc);
        mins += h16(a + 2) * xd * (float)q4k_minsum(b, mn);
    }
    return hsum256(acc) - mins;
}

/* Q6_K: the four 32-value chunks of one 128-value half as unsigned 6-bit codes */
#define Q6K_CHUNKS(ql, qh, v0, v1, v2, v3)                                                           \
    do {                                                                                             \
        const __m256i L0 = _mm256_loadu_si256((const __m256i *)(ql));                                \
        const __m256i L1 = _mm256_loadu_si256((const __m256i *)((ql) + 32));                         \
        const __m256i H = _mm256_loadu_si256((const __m256i *)(qh));                                 \
        const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);                     \
        v0 = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30)); \
        v1 = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30)); \
        v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m30)); \
        v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),                         \
                             _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));                        \
    } while (0)

/* sum_s sc[s] * bsums[s] over the 16 sub-blocks (the -32 offset of Q6_K codes) */
static inline int q6k_offset(const unsigned char *a, const unsigned char *b) {
    const int8_t *sc = (const int8_t *)(a + 192);
    int16_t bs[16];
    memcpy(bs, b + 260, sizeof bs);
    int s = 0;
    for (int j = 0; j < 16; j++) s += sc[j] * bs[j];
    return s;
}

AVX2 static float dot_q6_k_avx2(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    __m256 acc = _mm256_setzero_ps();
    for (size_t i = 0; i < n / 256; i++, a += 210, b += MP_Q8K_BYTES) {
        const int8_t *sc = (const int8_t *)(a + 192);
        const int8_t *x = (const int8_t *)(b + 4);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i v[4];
            Q6K_CHUNKS(a + 64 * h, a + 128 + 32 * h, v[0], v[1], v[2], v[3]);
            for (int k = 0; k < 4; k++) {
                const __m256i xx = _mm256_loadu_si256((const __m256i *)(x + 128 * h + 32 * k));
                const int s = 8 * h + 2 * k;
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(v[k], xx), scv));
            }
        }
        const float d = h16(a + 208) * q8k_d(b);
        const int off = 32 * q6k_offset(a, b);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, _mm256_setr_epi32(off, 0, 0, 0, 0, 0, 0, 0))), acc);
    }
    return hsum256(acc);
}

/* F16 / BF16 rows: 16 weights per step widened to float32 (F16C; BF16 by a
 * 16-bit shift, exact), two 8-lane FMA accumulators; scalar tail. */
AVX2 static inline __m256 bf16x8(const unsigned char *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

AVX2 static inline __m256 f16x8(const unsigned char *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

#define HALF_DOT_AVX2(NAME, LOAD, ONE)                                                                  \
    AVX2 static float NAME(const void *w, const void *xq, size_t n) {                                  \
        const unsigned char *a = w;                                                                      \
        const float *x = xq;                                                                             \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                                      \
        size_t i = 0;                                                                                    \
        for (; i + 16 <= n; i += 16) {                                                                   \
            s0 = _mm256_fmadd_ps(LOAD(a + 2 * i), _mm256_loadu_ps(x + i), s0);                           \
            s1 = _mm256_fmadd_ps(LOAD(a + 2 * i + 16), _mm256_loadu_ps(x + i + 8), s1);                  \
        }                                                                                                \
        float t = hsum256(_mm256_add_ps(s0, s1));                                                        \
        for (; i < n; i++) t += ONE(a + 2 * i) * x[i];                                                   \
        return t;                                                                                        \
    }
HALF_DOT_AVX2(dot_f16_avx2, f16x8, h16)
HALF_DOT_AVX2(dot_bf16_avx2, bf16x8, bf16)

/* ---- AVX-512 (BW, VL): two 32-value blocks per 512-bit register ---- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* 16 int32 partial sums (8 per 32-value half) of signed a x signed b */
AVX512 static inline __m512i dot64_s8(__m512i a, __m512i b) {
    const __m512i ax = _mm512_abs_epi8(a);
    const __m512i sb = _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(a), _mm512_setzero_si512(), b);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sb), _mm512_set1_epi16(1));
}

AVX512 static inline __m512 scale2(float d0, float d1) {
    return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castps_si512(_mm512_set1_ps(d0)),
                                                  _mm256_castps_si256(_mm256_set1_ps(d1)), 1));
}

AVX512 static inline __m512i load2x32(const unsigned char *p0, const unsigned char *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

AVX512 static float dot_q8_0_avx512(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    const size_t nb = n / 32;
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 1 < nb; i += 2, a += 68, b += 68) {
        const __m512i qa = load2x32(a + 2, a + 36), qb = load2x32(b + 2, b + 36);
        const __m512 d = scale2(h16(a) * h16(b), h16(a + 34) * h16(b + 34));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot64_s8(qa, qb)), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) sum += dot_q8_0_avx2(a, b, 32);
    return sum;
}

AVX512 static float dot_q4_0_avx512(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    const size_t nb = n / 32;
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 1 < nb; i += 2, a += 36, b += 68) {
        const __m512i qa = _mm512_inserti64x4(_mm512_castsi256_si512(q4_0_bytes(a + 2)), q4_0_bytes(a + 20), 1);
        const __m512i qb = load2x32(b + 2, b + 36);
        const __m512 d = scale2(h16(a) * h16(b), h16(a + 18) * h16(b + 34));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot64_s8(qa, qb)), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) sum += dot_q4_0_avx2(a, b, 32);
    return sum;
}

/* Q4_K's 6-bit scales and mins (q4k_scales) unpacked in general registers:
 * the bytes of u[0], u[1] are the scales 0-7, of u[2], u[3] the mins 0-7 (no
 * trip through memory: a vector load of bytes just stored stalls) */
static inline void q4k_scales_u32(const unsigned char *q, uint32_t u[4]) {
    uint32_t w[3];
    memcpy(w, q, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    u[0] = w[0] & m6;                                       /* scales 0-3 */
    u[1] = (w[2] & m4) | (((w[0] >> 6) & m2) << 4);         /* scales 4-7 */
    u[2] = w[1] & m6;                                       /* mins 0-3 */
    u[3] = ((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4);  /* mins 4-7 */
}

/* The scale vectors of a Q4_K block's two 64-value groups h = 0, 1: s0[h] holds
 * scale 4h in int16 lanes 0-15 and 4h + 2 in 16-31 (the low nibbles of 64 code
 * bytes), s1[h] scales 4h + 1 and 4h + 3 (the high nibbles): one word
 * permutation each from the eight scales widened to int16. */
AVX512 static inline __m512i q4k_pair_idx(int a, int b) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}
AVX512 static inline void q4k_scale_vecs(const uint32_t u[4], __m512i s0[2], __m512i s1[2]) {
    const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)((uint64_t)u[1] << 32 | u[0]))));
    for (int h = 0; h < 2; h++) {
        s0[h] = _mm512_permutexvar_epi16(q4k_pair_idx(4 * h, 4 * h + 2), sc);
        s1[h] = _mm512_permutexvar_epi16(q4k_pair_idx(4 * h + 1, 4 * h + 3), sc);
    }
}

/* the eight mins as 16 int16 lanes (min s in lanes 2s and 2s + 1) */
AVX512 static inline __m256i q4k_mins16(const uint32_t u[4]) {
    const __m128i m = _mm_cvtsi64_si128((long long)((uint64_t)u[3] << 32 | u[2]));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
}

/* the eight products min_s x (bsums of sub-block s), as float32 lanes (exact:
 * 63 x 2 x 16 x 127 < 2^18) */
AVX512 static inline __m256 q4k_minprod(const unsigned char *b, __m256i mn16) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)(b + 260))));
}

AVX512 static float dot_q4_k_avx512(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc = _mm512_setzero_ps();
    __m256 mins = _mm256_setzero_ps(); /* the min terms, summed per sub-block pair lane */
    for (size_t i = 0; i < n / 256; i++, a += 144, b += MP_Q8K_BYTES) {
        uint32_t u[4];
        q4k_scales_u32(a + 4, u);
        const unsigned char *qs = a + 16;
        const unsigned char *x = b + 4;
        __m512i sumi = _mm512_setzero_si512(), s0[2], s1[2];
        q4k_scale_vecs(u, s0, s1);
        for (int j = 0; j < 4; j += 2) { /* two 64-value groups: 128 codes = 64 bytes */
            const __m512i q = _mm512_loadu_si512((const void *)(qs + 32 * j));
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            /* lo holds sub-blocks 2j (bytes 0-31) and 2j+2 (32-63); hi 2j+1 and 2j+3 */
            const __m512i x0 = load2x32(x + 64 * j, x + 64 * (j + 1));
            const __m512i x1 = load2x32(x + 64 * j + 32, x + 64 * (j + 1) + 32);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(lo, x0), s0[j / 2]));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(hi, x1), s1[j / 2]));
        }
        const float xd = q8k_d(b);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(h16(a) * xd), _mm512_cvtepi32_ps(sumi), acc);
        mins = _mm256_fmadd_ps(_mm256_set1_ps(h16(a + 2) * xd), q4k_minprod(b, q4k_mins16(u)), mins);
    }
    return _mm512_reduce_add_ps(acc) - hsum256(mins);
}

/* Tiles: one weight row against C <= QDOT_TILE activation rows (the matmul).
 * The weight blocks are loaded and unpacked once for all of them; each output
 * is computed with the very operations, in the very order, of the row's dot
 * kernel above, so a tile's outputs equal the dot kernel's bit for bit
 * (test_qdot). The kernels are inlined for each C (TILE_SWITCH), so their
 * per-row arrays live in registers. */
#define QDOT_TILE 4
/* with AVX-512 VNNI: vpdpwssd adds the scaled pair sums in one instruction
 * (madd + add) and vpdpbusd the byte products (maddubs + madd); the integers
 * are the same */
#define AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define AVX512_INLINE AVX512VNNI static inline __attribute__((always_inline))
#define TILE_SWITCH(BODY, C)        \
    switch (C) {                    \
    case 4: BODY(4); break;         \
    case 3: BODY(3); break;         \
    case 2: BODY(2); break;         \
    default: BODY(1); break;        \
    }

/* Q8_0 and Q4_0 weights (q4: 0 / 1; blocks of 32 values, 34 / 18 bytes) */
AVX512_INLINE void tile_q8_q4_0_c(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, const int C,
                                  const int q4) {
    const unsigned char *a = w;
    const size_t nb = n / 32, wb = q4 ? 18 : 34;
    __m512 acc[QDOT_TILE];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 1 < nb; i += 2, a += 2 * wb) {
        const __m512i qa = q4 ? _mm512_inserti64x4(_mm512_castsi256_si512(q4_0_bytes(a + 2)), q4_0_bytes(a + 20), 1)
                              : load2x32(a + 2, a + 36);
        const __m512i ax = _mm512_abs_epi8(qa);
        const __mmask64 neg = _mm512_movepi8_mask(qa);
        const float d0 = h16(a), d1 = h16(a + wb);
        for (int c = 0; c < C; c++) {
            const unsigned char *b = xq + (size_t)c * ab + i * 34;
            const __m512i qb = load2x32(b + 2, b + 36);
            const __m512i sb = _mm512_mask_sub_epi8(qb, neg, _mm512_setzero_si512(), qb);
            /* (no int16 saturation in the dot kernels' maddubs: 2 x 128 x 127 < 32768) */
            const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sb);
            acc[c] = _mm512_fmadd_ps(scale2(d0 * h16(b), d1 * h16(b + 34)), _mm512_cvtepi32_ps(s), acc[c]);
        }
    }
    for (int c = 0; c < C; c++) {
        out[c] = _mm512_reduce_add_ps(acc[c]);
        if (i < nb) {
            const unsigned char *b = xq + (size_t)c * ab + i * 34;
            out[c] += q4 ? dot_q4_0_avx2(a, b, 32) : dot_q8_0_avx2(a, b, 32);
        }
    }
}

AVX512VNNI static void tile_q8_0_avx512(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, int C) {
#define T(K) tile_q8_q4_0_c(w, xq, ab, n, out, K, 0)
    TILE_SWITCH(T, C)
#undef T
}

AVX512VNNI static void tile_q4_0_avx512(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, int C) {
#define T(K) tile_q8_q4_0_c(w, xq, ab, n, out, K, 1)
    TILE_SWITCH(T, C)
#undef T
}

/* BODY(RW, RX) with constant RW, RX <= 4 (weight rows, activation rows), so
 * that an inlined block kernel keeps its accumulators in registers */
#define BLOCK_SWITCH(BODY, RW, RX)                                                                        \
    switch ((RW) * 4 + (RX)) {                                                                            \
    case 20: BODY(4, 4); break;                                                                           \
    case 19: BODY(4, 3); break;                                                                           \
    case 18: BODY(4, 2); break;                                                                           \
    case 17: BODY(4, 1); break;                                                                           \
    case 16: BODY(3, 4); break;                                                                           \
    case 15: BODY(3, 3); break;                                                                           \
    case 14: BODY(3, 2); break;                                                                           \
    case 13: BODY(3, 1); break;                                                                           \
    case 12: BODY(2, 4); break;                                                                           \
    case 11: BODY(2, 3); break;                                                                           \
    case 10: BODY(2, 2); break;                                                                           \
    case 9: BODY(2, 1); break;                                                                            \
    case 8: BODY(1, 4); break;                                                                            \
    case 7: BODY(1, 3); break;                                                                            \
    case 6: BODY(1, 2); break;                                                                            \
    default: BODY(1, 1); break;                                                                           \
    }

/* Q8_0 blocks of 4 weight rows by 4 activation rows (the prefill of Q8_0
 * weights). The activations are laid out once per pair of blocks (Q8X_PAIR
 * bytes): their 64 codes; 128 x the sum of each 4 codes (int32 x 16); their two
 * scales widened (float x 16, 8 lanes each). The weights' codes, XORed with
 * 0x80, are unsigned (w + 128), so one vpdpbusd gives sum (w + 128) x and the
 * stored 128 sum x takes the offset off: each int32 lane is the dot kernel's
 * exactly, and the scales, the FMA and the sums run in its order, so the
 * outputs equal dot_q8_0_avx512's bit for bit, with no sign transfer or scale
 * conversion per pair of rows. */
#define Q8X_PAIR 192

AVX512VNNI static void q8_0_tile_layout(const unsigned char *xq, unsigned char *xt, size_t n) {
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    for (size_t i = 0; i + 1 < n / 32; i += 2, xq += 68, xt += Q8X_PAIR) {
        const __m512i q = load2x32(xq + 2, xq + 36);
        _mm512_storeu_si512(xt, q);
        _mm512_storeu_si512(xt + 64, _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, q));
        _mm512_storeu_ps(xt + 128, scale2(h16(xq), h16(xq + 34)));
    }
}

/* out[c * os + r] = weight row r . activation row c (r < RW, c < RX <= 4); w rows rb bytes apart, the laid-out
 * activations xs bytes apart, the Q8_0 activations (for an odd last block) ab bytes apart */
AVX512_INLINE void q8_0_block(const unsigned char *w, size_t rb, const unsigned char *xt, size_t xs,
                              const unsigned char *xq, size_t ab, size_t n, float *out, size_t os, const int RW,
                              const int RX) {
    const size_t nb = n / 32;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[4][4];
    for (int r = 0; r < RW; r++)
        for (int c = 0; c < RX; c++) acc[r][c] = _mm512_setzero_ps();
    size_t i = 0;
    for (size_t p = 0; i + 1 < nb; i += 2, p++) {
        __m512i wu[4];
        float d0[4], d1[4];
        for (int r = 0; r < RW; r++) {
            const unsigned char *a = w + r * rb + i * 34;
            wu[r] = _mm512_xor_si512(load2x32(a + 2, a + 36), flip);
            d0[r] = h16(a), d1[r] = h16(a + 34);
        }
        for (int c = 0; c < RX; c++) {
            const unsigned char *b = xt + c * xs + p * Q8X_PAIR;
            const __m512i q = _mm512_loadu_si512(b), off = _mm512_loadu_si512(b + 64);
            const __m512 dx = _mm512_loadu_ps(b + 128);
            for (int r = 0; r < RW; r++) {
                const __m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wu[r], q), off);
                acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(scale2(d0[r], d1[r]), dx), _mm512_cvtepi32_ps(s), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < RW; r++)
        for (int c = 0; c < RX; c++) {
            float s = _mm512_reduce_add_ps(acc[r][c]);
            if (i < nb) s += dot_q8_0_avx2(w + r * rb + i * 34, xq + c * ab + i * 34, 32);
            out[c * os + r] = s;
        }
}

AVX512VNNI static void q8_0_block_any(const unsigned char *w, size_t rb, const unsigned char *xt, size_t xs,
                                      const unsigned char *xq, size_t ab, size_t n, float *out, size_t os, int RW,
                                      int RX) {
#define B(RW_, RX_) q8_0_block(w, rb, xt, xs, xq, ab, n, out, os, RW_, RX_)
    BLOCK_SWITCH(B, RW, RX)
#undef B
}

/* The tiles' Q8_K layout for Q4_K weights: in each 128-value half of a block
 * the 32-value chunks 1 and 2 swap places, so that the activations that meet
 * the low and the high nibbles of 64 code bytes are each one 64-byte load (the
 * dot kernel gathers them with two loads and an insert). */
static void q4k_tile_layout(unsigned char *xq, size_t n) {
    for (size_t b = 0; b < n / 256; b++)
        for (int h = 0; h < 2; h++) {
            unsigned char *x = xq + b * MP_Q8K_BYTES + 4 + 128 * h, t[32];
            memcpy(t, x + 32, 32);
            memcpy(x + 32, x + 64, 32);
            memcpy(x + 64, t, 32);
        }
}

AVX512_INLINE void tile_q4_k_c(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, const int C) {
    const unsigned char *a = w;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc[QDOT_TILE];
    __m256 mins[QDOT_TILE];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), mins[c] = _mm256_setzero_ps();
    for (size_t i = 0; i < n / 256; i++, a += 144) {
        uint32_t u[4];
        q4k_scales_u32(a + 4, u);
        const unsigned char *qs = a + 16;
        __m512i lo[2], hi[2], s0[2], s1[2];
        q4k_scale_vecs(u, s0, s1);
        for (int h = 0; h < 2; h++) { /* the row's two 64-value groups, as dot_q4_k_avx512 splits them */
            const __m512i q = _mm512_loadu_si512((const void *)(qs + 64 * h));
            lo[h] = _mm512_and_si512(q, m4);
            hi[h] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        }
        const float dw = h16(a), dmin = h16(a + 2);
        const __m256i mn16 = q4k_mins16(u);
        for (int c = 0; c < C; c++) {
            const unsigned char *b = xq + (size_t)c * ab + i * MP_Q8K_BYTES, *x = b + 4;
            __m512i sumi = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++) { /* q4k_tile_layout: one load each */
                const __m512i x0 = _mm512_loadu_si512((const void *)(x + 128 * h));
                const __m512i x1 = _mm512_loadu_si512((const void *)(x + 128 * h + 64));
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(lo[h], x0), s0[h]);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(hi[h], x1), s1[h]);
            }
            const float xd = q8k_d(b);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * xd), _mm512_cvtepi32_ps(sumi), acc[c]);
            mins[c] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * xd), q4k_minprod(b, mn16), mins[c]);
        }
    }
    for (int c = 0; c < C; c++) out[c] = _mm512_reduce_add_ps(acc[c]) - hsum256(mins[c]);
}

/* activations in q4k_tile_layout */
AVX512VNNI static void tile_q4_k_avx512(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, int C) {
#define T(K) tile_q4_k_c(w, xq, ab, n, out, K)
    TILE_SWITCH(T, C)
#undef T
}

/* sum_j sc[j] * bsums[j] (q6k_offset) with one multiply-add: the same integer */
AVX512 static inline int q6k_offset16(__m256i sc16, const unsigned char *b) {
    const __m256i p = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(b + 260)));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Q6_K's scales s..s+3 (16 int8) for one 512-bit step: int16 lanes 0-7 scale s,
 * 8-15 s + 1, 16-23 s + 2, 24-31 s + 3; sc16 holds the 16 scales widened. */
AVX512 static inline __m512i q6k_scale_vec(__m512i sc16, int s) {
    const __m512i idx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(s + 1)), _mm_set1_epi16((short)s))),
        _mm256_set_m128i(_mm_set1_epi16((short)(s + 3)), _mm_set1_epi16((short)(s + 2))), 1);
    return _mm512_permutexvar_epi16(idx, sc16);
}

AVX512 static float dot_q6_k_avx512(const void *w, const void *xq, size_t n) {
    const unsigned char *a = w, *b = xq;
    __m512 acc = _mm512_setzero_ps();
    float offs = 0.0f;
    for (size_t i = 0; i < n / 256; i++, a += 210, b += MP_Q8K_BYTES) {
        const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + 192)));
        const __m512i sc16 = _mm512_castsi256_si512(sc16y);
        const unsigned char *x = b + 4;
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m256i v[4];
            Q6K_CHUNKS(a + 64 * h, a + 128 + 32 * h, v[0], v[1], v[2], v[3]);
            for (int k = 0; k < 4; k += 2) {
                const __m512i vv = _mm512_inserti64x4(_mm512_castsi256_si512(v[k]), v[k + 1], 1);
                const __m512i xx = _mm512_loadu_si512((const void *)(x + 128 * h + 32 * k));
                const __m512i scv = q6k_scale_vec(sc16, 8 * h + 2 * k);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(vv, xx), scv));
            }
        }
        const float d = h16(a + 208) * q8k_d(b);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        offs += d * (float)(32 * q6k_offset16(sc16y, b));
    }
    return _mm512_reduce_add_ps(acc) - offs;
}

AVX512_INLINE void tile_q6_k_c(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, const int C) {
    const unsigned char *a = w;
    __m512 acc[QDOT_TILE];
    float offs[QDOT_TILE];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), offs[c] = 0.0f;
    for (size_t i = 0; i < n / 256; i++, a += 210) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + 192)));
        const __m512i sc16z = _mm512_castsi256_si512(sc16);
        __m512i vv[4], scv[4];
        for (int h = 0; h < 2; h++) { /* as dot_q6_k_avx512 unpacks them */
            __m256i v[4];
            Q6K_CHUNKS(a + 64 * h, a + 128 + 32 * h, v[0], v[1], v[2], v[3]);
            for (int k = 0; k < 4; k += 2) {
                vv[2 * h + k / 2] = _mm512_inserti64x4(_mm512_castsi256_si512(v[k]), v[k + 1], 1);
                scv[2 * h + k / 2] = q6k_scale_vec(sc16z, 8 * h + 2 * k);
            }
        }
        const float dw = h16(a + 208);
        for (int c = 0; c < C; c++) {
            const unsigned char *b = xq + (size_t)c * ab + i * MP_Q8K_BYTES, *x = b + 4;
            __m512i sumi = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 4; k += 2) {
                    const __m512i xx = _mm512_loadu_si512((const void *)(x + 128 * h + 32 * k));
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(vv[2 * h + k / 2], xx), scv[2 * h + k / 2]);
                }
            const float d = dw * q8k_d(b);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc[c]);
            offs[c] += d * (float)(32 * q6k_offset16(sc16, b));
        }
    }
    for (int c = 0; c < C; c++) out[c] = _mm512_reduce_add_ps(acc[c]) - offs[c];
}

AVX512VNNI static void tile_q6_k_avx512(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, int C) {
#define T(K) tile_q6_k_c(w, xq, ab, n, out, K)
    TILE_SWITCH(T, C)
#undef T
}

/* F16 / BF16 rows: 32 weights per step, two 16-lane FMA accumulators. */
AVX512 static inline __m512 bf16x16(const unsigned char *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

AVX512 static inline __m512 f16x16(const unsigned char *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

#define HALF_DOT_AVX512(NAME, LOAD, ONE)                                                                \
    AVX512 static float NAME(const void *w, const void *xq, size_t n) {                                \
        const unsigned char *a = w;                                                                      \
        const float *x = xq;                                                                             \
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();                                      \
        size_t i = 0;                                                                                    \
        for (; i + 32 <= n; i += 32) {                                                                   \
            s0 = _mm512_fmadd_ps(LOAD(a + 2 * i), _mm512_loadu_ps(x + i), s0);                           \
            s1 = _mm512_fmadd_ps(LOAD(a + 2 * i + 32), _mm512_loadu_ps(x + i + 16), s1);                 \
        }                                                                                                \
        float t = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));                                           \
        for (; i < n; i++) t += ONE(a + 2 * i) * x[i];                                                   \
        return t;                                                                                        \
    }
HALF_DOT_AVX512(dot_f16_avx512, f16x16, h16)
HALF_DOT_AVX512(dot_bf16_avx512, bf16x16, bf16)

/* BF16 rows times activations rounded to BF16 (AVX-512 BF16: vdpbf16ps adds
 * two exact products to a float32 lane per step, as llama.cpp's BF16 path and
 * a PyTorch bf16 matmul round their inputs). One accumulator per (weight row,
 * activation row) pair, 32 values a step, a masked step for the tail, then one
 * horizontal sum: the dot kernel (float32 activations rounded on the fly) and
 * the RW x RX blocks of the matmul (activations rounded once) add the same
 * products in the same order, so their outputs are equal bit for bit. */
#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

AVX512BF16 static inline __m512bh bf16_round32(const float *x, __mmask32 m) {
    const __m512 lo = _mm512_maskz_loadu_ps((__mmask16)m, x), hi = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), x + 16);
    return _mm512_cvtne2ps_pbh(hi, lo);
}

AVX512BF16 static inline __mmask32 tail_mask(size_t r) { return r >= 32 ? 0xffffffffu : (1u << r) - 1u; }

/* The lane sum of v[k] for 16 vectors at once, lane 4 (k % 4) + k / 4 of the
 * result: quarters q0 + q2 and q1 + q3, then their sum, then within the
 * quarter (e0 + e2) + (e1 + e3). bf16_sum1 adds one vector in that very order
 * (the one-row kernel), so both give the same bits. */
AVX512BF16 static inline __m512 bf16_sum16(const __m512 v[16]) {
    __m512 u[8], w[4];
    for (int k = 0; k < 8; k++)
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xee));
    for (int k = 0; k < 4; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xdd));
    const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
    const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xee));
}

AVX512BF16 static inline float bf16_sum1(__m512 v) {
    const __m128 q0 = _mm512_castps512_ps128(v), q1 = _mm512_extractf32x4_ps(v, 1), q2 = _mm512_extractf32x4_ps(v, 2),
                 q3 = _mm512_extractf32x4_ps(v, 3);
    const __m128 s = _mm_add_ps(_mm_add_ps(q0, q2), _mm_add_ps(q1, q3));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s)); /* e0 + e2, e1 + e3 */
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

AVX512BF16 static float dot_bf16_dp(const void *w, const void *xq, size_t n) {
    const uint16_t *a = w;
    const float *x = xq;
    __m512 s = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_loadu_si512(a + i), bf16_round32(x + i, 0xffffffffu));
    if (i < n) {
        const __mmask32 m = tail_mask(n - i);
        s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_maskz_loadu_epi16(m, a + i), bf16_round32(x + i, m));
    }
    return bf16_sum1(s);
}

/* out[c * os + r] = weight row r . activation row c (r < RW, c < RX <= 4), the
 * weight rows ws and the BF16 activation rows xs values apart */
AVX512BF16 static inline __attribute__((always_inline)) void
bf16_block(const uint16_t *w, size_t ws, const uint16_t *x, size_t xs, size_t n, float *out, size_t os, int RW, int RX) {
    __m512 acc[4][4];
    for (int r = 0; r < RW; r++)
        for (int c = 0; c < RX; c++) acc[r][c] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh xv[4];
        for (int c = 0; c < RX; c++) xv[c] = (__m512bh)_mm512_loadu_si512(x + c * xs + i);
        for (int r = 0; r < RW; r++) {
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + r * ws + i);
            for (int c = 0; c < RX; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
        }
    }
    if (i < n) {
        const __mmask32 m = tail_mask(n - i);
        __m512bh xv[4];
        for (int c = 0; c < RX; c++) xv[c] = (__m512bh)_mm512_maskz_loadu_epi16(m, x + c * xs + i);
        for (int r = 0; r < RW; r++) {
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * ws + i);
            for (int c = 0; c < RX; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
        }
    }
    __m512 v[16];
    for (int k = 0; k < 16; k++) v[k] = k / 4 < RW && k % 4 < RX ? acc[k / 4][k % 4] : _mm512_setzero_ps();
    float sums[16]; /* lane 4 c + r: weight row r, activation row c */
    _mm512_storeu_ps(sums, bf16_sum16(v));
    for (int c = 0; c < RX; c++)
        for (int r = 0; r < RW; r++) out[c * os + r] = sums[4 * c + r];
}

AVX512BF16 static void bf16_block_any(const uint16_t *w, size_t ws, const uint16_t *x, size_t xs, size_t n, float *out,
                                      size_t os, int RW, int RX) {
#define B(RW_, RX_) bf16_block(w, ws, x, xs, n, out, os, RW_, RX_)
    BLOCK_SWITCH(B, RW, RX)
#undef B
}

/* activations rounded to BF16 as dot_bf16_dp rounds them (row of n values) */
AVX512BF16 static void bf16_round_row(const float *x, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) _mm512_storeu_si512(dst + i, (__m512i)bf16_round32(x + i, 0xffffffffu));
    if (i < n) {
        const __mmask32 m = tail_mask(n - i);
        _mm512_mask_storeu_epi16(dst + i, m, (__m512i)bf16_round32(x + i, m));
    }
}

/* The BF16 matmul: OpenMP over panels of weight rows (at most 256 KiB, so a
 * panel stays in L2 while every activation row passes by 4 at a time; the
 * rounded activations, 2 bytes a value, stay in L3), blocks of 4 weight rows
 * by 4 activation rows. */
#define PANEL_L2_BYTES ((size_t)256 << 10) /* a panel of weight rows (BF16 and Q8_0 blocks) */
/* activation rows per pass over the weights (BF16 and Q8_0 blocks): 8 MiB of them, so that they stay in L3
 * while every panel passes; one pass for all rows re-read them from memory once per panel (at T 4096 the Q8_0
 * prefill of the 1B took 1.5x as long a token as at T 512) */
#define ACT_L3_BYTES ((size_t)8 << 20)
static int act_chunk(size_t row_bytes) {
    const size_t c = ACT_L3_BYTES / row_bytes / 4 * 4;
    return c < 4 ? 4 : c > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)c;
}

/* One block: out rows n.. (RX of them, os apart), columns o.. (RW). */
typedef void (*block_fn)(const void *ctx, int o, int n, float *dst, size_t os, int RW, int RX);

/* The blocks' driver (BF16 and Q8_0): passes over the weights per ACT_L3_BYTES of activation rows (xb bytes
 * a row); in each, OpenMP over panels of weight rows (wb bytes a row, PANEL_L2_BYTES a panel), every
 * activation row passing each panel 4 at a time; then the bias. */
static void blocks_run(block_fn fn, const void *ctx, size_t wb, size_t xb, const float *bias, float *out, int N,
                       int OUT) {
    int P = (int)(PANEL_L2_BYTES / wb) / 4 * 4;
    P = P < 4 ? 4 : P > 128 ? 128 : P;
    const int panels = (OUT + P - 1) / P, NC = act_chunk(xb);
    for (int n0 = 0; n0 < N; n0 += NC) {
        const int n1 = N - n0 < NC ? N : n0 + NC;
#pragma omp parallel for schedule(static) if ((size_t)OUT * wb > 32768)
        for (int p = 0; p < panels; p++) {
            const int o0 = p * P, o1 = OUT - o0 < P ? OUT : o0 + P;
            for (int n = n0; n < n1; n += 4) {
                const int RX = n1 - n < 4 ? n1 - n : 4;
                for (int o = o0; o < o1; o += 4) {
                    const int RW = o1 - o < 4 ? o1 - o : 4;
                    float *dst = out + (size_t)n * OUT + o;
                    fn(ctx, o, n, dst, (size_t)OUT, RW, RX);
                    if (bias)
                        for (int c = 0; c < RX; c++)
                            for (int r = 0; r < RW; r++) dst[(size_t)c * OUT + r] += bias[o + r];
                }
            }
        }
    }
}

typedef struct {
    const uint16_t *w;
    size_t ws;
    const uint16_t *x;
    size_t n;
} bf16_ctx;

/* the longest input rows a one-activation-row BF16 product takes one weight row at a time (the 8B's down
 * projection, 14336 long, read its weights at 35-49 GB/s in the 4-row blocks (47-49 in 3 of 4 rounds)
 * against 30-36 one row at a time; its other matrices, 4096 long, 33-41 against 33-49: a throwaway
 * microbenchmark over the 8B's 225 matrices from the page cache, 2 threads, 2026-12-07) */
#define BF16_ONE_ROW_MAX_IN 8192

static void bf16_one_block(const void *ctx, int o, int n, float *dst, size_t os, int RW, int RX) {
    const bf16_ctx *b = ctx;
    bf16_block_any(b->w + (size_t)o * b->ws, b->ws, b->x + (size_t)n * b->n, b->n, b->n, dst, os, RW, RX);
}
static mp_status matmul_bf16_dp(float *out, const float *in, const uint16_t *w, size_t ws, const float *bias, int N,
                                int IN, int OUT) {
    uint16_t stack[8192], *xb = stack;
    if ((size_t)N * IN > sizeof stack / 2 && !(xb = mp_malloc((size_t)N * IN * 2, "BF16 activations")))
        return MP_ERR_NOMEM;
    mp_qdot_round_bf16(in, xb, (size_t)N * IN); /* elementwise: the rows' rounding, all at once */
    if (N == 1 && IN <= BF16_ONE_ROW_MAX_IN) {
        /* one activation row (a decoding step): one weight row at a time, each thread reading its share of
         * the rows as one stream, rather than 4 rows side by side (bench_gen, 1B BF16 at precision bf16,
         * decode 64 at context 64, 2 threads, 8 runs alternating with the 4-row blocks, 2026-12-07: 11.2-16.9
         * tok/s, median 12.6, against 9.2-12.2, median 11.1; the same products in the same order, so the
         * same bits). Longer rows keep the blocks: there 4 weight rows share each load of the activations.
         * Not blocks_run with 1-row blocks: that measured 5-10% slower here (7 alternating runs, 2026-12-07) */
#pragma omp parallel for schedule(static) if ((size_t)OUT * ws * 2 > 32768)
        for (int o = 0; o < OUT; o++) {
            bf16_block_any(w + (size_t)o * ws, ws, xb, (size_t)IN, (size_t)IN, out + o, 1, 1, 1);
            if (bias) out[o] += bias[o];
        }
    } else {
        const bf16_ctx ctx = {w, ws, xb, (size_t)IN};
        blocks_run(bf16_one_block, &ctx, ws * 2, (size_t)IN * 2, bias, out, N, OUT);
    }
    if (xb != stack) free(xb);
    return MP_OK;
}
#endif /* MP_QDOT_X86 */

/* ---- dispatch ---- */

static int isa_available(mp_qdot_isa isa) {
    if (isa == MP_QDOT_SCALAR) return 1;
#ifdef MP_QDOT_X86
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (isa == MP_QDOT_AVX2) return avx2;
    if (isa == MP_QDOT_AVX512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

mp_qdot_fn mp_qdot_kernel(uint32_t t, mp_qdot_isa isa) {
    if (!mp_qdot_supported(t) || !isa_available(isa)) return NULL;
    switch (isa) {
    case MP_QDOT_SCALAR:
        return t == MP_GGML_F16 ? dot_f16_scalar : t == MP_GGML_BF16 ? dot_bf16_scalar
             : t == MP_GGML_Q8_0 ? dot_q8_0_scalar : t == MP_GGML_Q4_0 ? dot_q4_0_scalar
             : t == MP_GGML_Q4_K ? dot_q4_k_scalar : dot_q6_k_scalar;
#ifdef MP_QDOT_X86
    case MP_QDOT_AVX2:
        return t == MP_GGML_F16 ? dot_f16_avx2 : t == MP_GGML_BF16 ? dot_bf16_avx2
             : t == MP_GGML_Q8_0 ? dot_q8_0_avx2 : t == MP_GGML_Q4_0 ? dot_q4_0_avx2
             : t == MP_GGML_Q4_K ? dot_q4_k_avx2 : dot_q6_k_avx2;
    case MP_QDOT_AVX512:
        return t == MP_GGML_F16 ? dot_f16_avx512 : t == MP_GGML_BF16 ? dot_bf16_avx512
             : t == MP_GGML_Q8_0 ? dot_q8_0_avx512 : t == MP_GGML_Q4_0 ? dot_q4_0_avx512
             : t == MP_GGML_Q4_K ? dot_q4_k_avx512 : dot_q6_k_avx512;
#endif
    default:
        return NULL;
    }
}

mp_qdot_isa mp_qdot_isa_active(void) {
    static int cached = -1;
    int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (c >= 0) return (mp_qdot_isa)c;
    mp_qdot_isa cap = MP_QDOT_AVX512;
    const char *e = getenv("MP_QDOT_ISA");
    if (e && !strcmp(e, "scalar")) cap = MP_QDOT_SCALAR;
    else if (e && !strcmp(e, "avx2")) cap = MP_QDOT_AVX2;
    c = (int)cap;
    while (c > 0 && !isa_available((mp_qdot_isa)c)) c--;
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
    return (mp_qdot_isa)c;
}

const char *mp_qdot_isa_name(mp_qdot_isa isa) {
    return isa == MP_QDOT_AVX512 ? "avx512" : isa == MP_QDOT_AVX2 ? "avx2" : "scalar";
}

/* ---- matmul ---- */

/* up to here the dot kernels beat widened or dequantized panels + sgemm, for
 * the quantized and the half types alike (bench/bench_qdot.c: BF16 at IN 2048,
 * OUT 8192, 2 threads, 2026-12-06: N 16 24 ms against 47, N 32 38 against 34;
 * the panels' cost is decoding the whole matrix) */
#define QDOT_FEW_ROWS 32
#define QDOT_NBLOCK 64 /* activation rows per pass over the weights (their Q8 codes stay in L2) */
/* weight rows decoded per sgemm panel: 16 MiB of float32, 256 to 1024 rows (a
 * BF16 prefill at IN 2048, OUT 8192, N 512 takes 10-14% less time with 1024-row
 * panels than with 256, bench/bench_qdot.c) */
#define QDOT_PANEL_BYTES ((size_t)16 << 20)
#define QDOT_PANEL_MIN 256
#define QDOT_PANEL_MAX 1024

/* out[c] = row w . activation row c, c < C (1..QDOT_TILE), the rows ab bytes apart */
typedef void (*qdot_tile_fn)(const void *w, const unsigned char *xq, size_t ab, size_t n, float *out, int C);

/* The tile kernel of (wtype, isa) where the CPU has AVX-512 VNNI, else NULL.
 * The quantized types have them; with them every N goes through tiles (they
 * beat the panels at every N measured, to 512: bench/bench_qdot.c). */
static qdot_tile_fn tile_kernel(uint32_t t, mp_qdot_isa isa) {
#ifdef MP_QDOT_X86
    static int vnni = -1; /* (the products' ISA is cached too: mp_qdot_isa_active) */
    int v = __atomic_load_n(&vnni, __ATOMIC_RELAXED);
    if (v < 0) {
        v = isa_available(MP_QDOT_AVX512) && __builtin_cpu_supports("avx512vnni");
        __atomic_store_n(&vnni, v, __ATOMIC_RELAXED);
    }
    if (isa == MP_QDOT_AVX512 && v)
        return t == MP_GGML_Q8_0 ? tile_q8_0_avx512 : t == MP_GGML_Q4_0 ? tile_q4_0_avx512
             : t == MP_GGML_Q4_K ? tile_q4_k_avx512 : t == MP_GGML_Q6_K ? tile_q6_k_avx512 : NULL;
#else
    (void)t, (void)isa;
#endif
    return NULL;
}

int mp_qdot_tiles(uint32_t t) { return tile_kernel(t, mp_qdot_isa_active()) != NULL; }

/* from here on Q8_0 products take the 4 x 4 blocks: below, the one-row tiles and the dot kernel cost less
 * (bench/bench_qdot.c, IN 2048, OUT 8192, 2 threads, 2026-12-06: N 1 0.50 ms against 0.88, N 4 0.89 against
 * 0.98, N 6 1.62 against 1.40, N 512 129-133 against 71; the outputs are the same bits either way) */
#define QDOT_Q8_BLOCKS_FROM 5

#ifdef MP_QDOT_X86
/* Q8_0 weights with tiles: the activations (quantized, xq) laid out by pairs of blocks, then OpenMP over
 * panels of weight rows (at most 256 KiB, so a panel stays in L2 while the activation rows pass by), blocks
 * of 4 weight rows by 4 activation rows (q8_0_block). */
typedef struct {
    const unsigned char *w;
    size_t rb;
    const unsigned char *xt;
    size_t xs;
    const unsigned char *xq;
    size_t ab, n;
} q8_ctx;

static void q8_one_block(const void *ctx, int o, int n, float *dst, size_t os, int RW, int RX) {
    const q8_ctx *q = ctx;
    q8_0_block_any(q->w + (size_t)o * q->rb, q->rb, q->xt + (size_t)n * q->xs, q->xs, q->xq + (size_t)n * q->ab, q->ab,
                   q->n, dst, os, RW, RX);
}

static mp_status matmul_q8_0_blocks(float *out, const unsigned char *xq, size_t ab, const unsigned char *w, size_t rb,
                                    const float *bias, int N, int IN, int OUT) {
    const size_t xs = (size_t)IN / 64 * Q8X_PAIR;
    unsigned char *xt = xs ? mp_malloc((size_t)N * xs, "laid-out activations") : NULL;
    if (xs && !xt) return MP_ERR_NOMEM;
#pragma omp parallel for schedule(static) if (N >= 8)
    for (int n = 0; n < N; n++) q8_0_tile_layout(xq + (size_t)n * ab, xt + (size_t)n * xs, (size_t)IN);
    const q8_ctx ctx = {w, rb, xt, xs, xq, ab, (size_t)IN};
    blocks_run(q8_one_block, &ctx, rb, xs ? xs : 1, bias, out, N, OUT);
    free(xt);
    return MP_OK;
}
#endif

int mp_qdot_has_bf16(void) {
#ifdef MP_QDOT_X86
    static int bf = -1;
    int v = __atomic_load_n(&bf, __ATOMIC_RELAXED);
    if (v < 0) {
        v = isa_available(MP_QDOT_AVX512) && __builtin_cpu_supports("avx512bf16");
        __atomic_store_n(&bf, v, __ATOMIC_RELAXED);
    }
    return v && mp_qdot_isa_active() == MP_QDOT_AVX512;
#else
    return 0;
#endif
}

void mp_qdot_round_bf16(const float *x, uint16_t *dst, size_t n) {
#ifdef MP_QDOT_X86
    if (mp_qdot_has_bf16()) {
        const size_t piece = 1 << 16;
#pragma omp parallel for schedule(static) if (n > piece)
        for (size_t p = 0; p < (n + piece - 1) / piece; p++) {
            const size_t i0 = p * piece;
            bf16_round_row(x + i0, dst + i0, n - i0 < piece ? n - i0 : piece);
        }
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = mp_quant_f32_to_bf16(x[i]);
}

mp_qdot_fn mp_qdot_bf16_kernel(void) {
#ifdef MP_QDOT_X86
    if (mp_qdot_has_bf16()) return dot_bf16_dp;
#endif
    return NULL;
}

mp_status mp_qdot_matmul_bf16(float *out, const float *in, const void *w, size_t row_bytes, const float *bias, int N,
                              int IN, int OUT) {
#ifdef MP_QDOT_X86
    if (mp_qdot_has_bf16()) return matmul_bf16_dp(out, in, w, row_bytes / 2, bias, N, IN, OUT);
#else
    (void)out, (void)in, (void)w, (void)row_bytes, (void)bias, (void)N, (void)IN, (void)OUT;
#endif
    return mp_error(MP_ERR_ARG, "BF16 products need a CPU with AVX-512 BF16 (and MP_QDOT_ISA not capping it)");
}

mp_status mp_qdot_matmul(float *out, const float *in, uint32_t t, const void *w, size_t row_bytes,
                         const float *bias, int N, int IN, int OUT) {
    const unsigned char *wb = w;
    const mp_qdot_isa isa = mp_qdot_isa_active();
    const qdot_tile_fn tile = tile_kernel(t, isa);
    if (tile || N <= QDOT_FEW_ROWS) {
        const size_t ab = mp_qdot_act_bytes(t, (size_t)IN);
        unsigned char stack[16384], *xq = stack;
        if ((size_t)N * ab > sizeof stack &&
            !(xq = mp_malloc((size_t)N * ab, "quantized activations")))
            return MP_ERR_NOMEM;
#pragma omp parallel for schedule(static) if (N >= 8)
        for (int n = 0; n < N; n++) {
            mp_qdot_quantize_act(t, in + (size_t)n * IN, xq + (size_t)n * ab, (size_t)IN);
            if (tile && t == MP_GGML_Q4_K) q4k_tile_layout(xq + (size_t)n * ab, (size_t)IN);
        }
#ifdef MP_QDOT_X86
        if (tile && t == MP_GGML_Q8_0 && N > QDOT_Q8_BLOCKS_FROM - 1) {
            const mp_status st = matmul_q8_0_blocks(out, xq, ab, wb, row_bytes, bias, N, IN, OUT);
            if (xq != stack) free(xq);
            return st;
        }
#endif
        const mp_qdot_fn dot = mp_qdot_kernel(t, isa);
        for (int n0 = 0; n0 < N; n0 += QDOT_NBLOCK) {
            const int n1 = N - n0 < QDOT_NBLOCK ? N : n0 + QDOT_NBLOCK;
#pragma omp parallel for schedule(static) if ((size_t)OUT * row_bytes > 65536)
            for (int o = 0; o < OUT; o++) {
                const unsigned char *row = wb + (size_t)o * row_bytes;
                const float bo = bias ? bias[o] : 0.0f;
                if (tile)
                    for (int n = n0; n < n1; n += QDOT_TILE) {
                        const int C = n1 - n < QDOT_TILE ? n1 - n : QDOT_TILE;
                        float r[QDOT_TILE];
                        tile(row, xq + (size_t)n * ab, ab, (size_t)IN, r, C);
                        for (int c = 0; c < C; c++) out[(size_t)(n + c) * OUT + o] = r[c] + bo;
                    }
                else
                    for (int n = n0; n < n1; n++) out[(size_t)n * OUT + o] = dot(row, xq + (size_t)n * ab, (size_t)IN) + bo;
            }
        }
        if (xq != stack) free(xq);
        return MP_OK;
    }
    int P = (int)(QDOT_PANEL_BYTES / ((size_t)IN * sizeof(float)));
    P = P < QDOT_PANEL_MIN ? QDOT_PANEL_MIN : P > QDOT_PANEL_MAX ? QDOT_PANEL_MAX : P;
    if (OUT < P) P = OUT;
    float *panel = mp_malloc((size_t)P * IN * sizeof(float), "a dequantized weight panel");
    if (!panel) return MP_ERR_NOMEM;
    for (int o0 = 0; o0 < OUT; o0 += P) {
        const int rows = OUT - o0 < P ? OUT - o0 : P;
        mp_quant_dequantize(t, wb + (size_t)o0 * row_bytes, panel, (size_t)rows * IN);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, IN, 1.0f, in, IN, panel, IN, 0.0f, out + o0,
                    OUT);
    }
    free(panel);
    if (bias) {
#pragma omp parallel for schedule(static) if (N > 64)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) out[(size_t)n * OUT + o] += bias[o];
    }
    return MP_OK;
}
