/* f16 and bf16 <-> f32 in registers for the AVX-512 half loops of the CPU
 * kernels (batchnorm.c, layernorm.c). f16: 16 values widened with vcvtph2ps and rounded
 * with vcvtps2ph (round to nearest even), the bits of kernels/math.h's
 * phx_f16_to_f32 / phx_f32_to_f16 and of the cast kernel (cast-x86.c):
 * vectors holding a NaN lane go through math.h's formulas (the
 * instructions quiet a signalling NaN; math.h keeps its payload). Short
 * vectors go through a stack buffer: masked 16-bit loads and stores need
 * AVX512BW, the kernels' AVX-512 level is F. */
#ifndef PX_CPU_HALF_X86_H
#define PX_CPU_HALF_X86_H
#include "kernels/cpu/cpu.h"
#if PX_HAVE_X86
#include <immintrin.h>
#include <string.h>

#define PX_T512 __attribute__((target("avx512f,f16c")))
#define PX_H16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* lanes 0 .. k - 1 set (k = 1..16) */
PX_INLINE __mmask16 px_h16_mask(int64_t k)
{
    return k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
}

/* the first k (1..16) 16-bit values of s, lanes k.. zero; short vectors
 * through a buffer (masked 16-bit loads need AVX512BW) */
PX_T512 static inline __m256i px_u16_ld(const uint16_t *s, int64_t k)
{
    if (k == 16) return _mm256_loadu_si256((const __m256i *)s);
    uint16_t t[16] = {0};
    memcpy(t, s, (size_t)k * 2);
    return _mm256_loadu_si256((const __m256i *)t);
}

/* the first k (1..16) 16-bit lanes of h stored to d */
PX_T512 static inline void px_u16_st(uint16_t *d, __m256i h, int64_t k)
{
    if (k == 16) {
        _mm256_storeu_si256((__m256i *)d, h);
        return;
    }
    uint16_t t[16];
    _mm256_storeu_si256((__m256i *)t, h);
    memcpy(d, t, (size_t)k * 2);
}

/* the first k (1..16) values of s widened, lanes k.. zero */
PX_T512 static inline __m512 px_h16_ld(const uint16_t *s, int64_t k)
{
    __m512 v = _mm512_cvtph_ps(px_u16_ld(s, k));
    if (__builtin_expect(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0, 0)) {
        float f[16] = {0};
        for (int64_t i = 0; i < k; i++) f[i] = phx_f16_to_f32(s[i]);
        v = _mm512_loadu_ps(f);
    }
    return v;
}

/* the first k (1..16) lanes of v rounded to d */
PX_T512 static inline void px_h16_st(uint16_t *d, __m512 v, int64_t k)
{
    __mmask16 m = k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
    if (__builtin_expect(_mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q) != 0, 0)) {
        float f[16];
        _mm512_storeu_ps(f, v);
        for (int64_t i = 0; i < k; i++) d[i] = phx_f32_to_f16(f[i]);
        return;
    }
    px_u16_st(d, _mm512_cvtps_ph(v, PX_H16_RNE), k);
}

/* bf16: the first k (1..16) values of s widened (exact: the bits shifted
 * up, as phx_bf16_to_f32), lanes k.. zero */
PX_T512 static inline __m512 px_b16_ld(const uint16_t *s, int64_t k)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(px_u16_ld(s, k)), 16));
}

/* bf16: v rounded by phx_f32_to_bf16's formula in integer lanes (round
 * to nearest even; a NaN keeps its top bits, quieted where they would
 * read as inf): no AVX512-BF16 needed, and subnormals round as math.h
 * rounds them */
PX_T512 static inline __m256i px_b16_round(__m512 v)
{
    __m512i x = _mm512_castps_si512(v), one = _mm512_set1_epi32(1);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    if (__builtin_expect(nan != 0, 0)) {
        __m512i hi = _mm512_srli_epi32(x, 16);
        __mmask16 bare = _mm512_mask_testn_epi32_mask(nan, hi, _mm512_set1_epi32(0x7f));
        r = _mm512_mask_mov_epi32(r, nan, hi);
        r = _mm512_mask_or_epi32(r, bare, hi, _mm512_set1_epi32(0x40));
    }
    return _mm512_cvtepi32_epi16(r);
}

/* bf16: the first k (1..16) lanes of v rounded to d (px_b16_round) */
PX_T512 static inline void px_b16_st(uint16_t *d, __m512 v, int64_t k)
{
    px_u16_st(d, px_b16_round(v), k);
}

/* either format: bf 1 for bf16, 0 for f16 */
PX_T512 static inline __m512 px_half_ld(int bf, const uint16_t *s, int64_t k)
{
    return bf ? px_b16_ld(s, k) : px_h16_ld(s, k);
}
PX_T512 static inline void px_half_st(int bf, uint16_t *d, __m512 v, int64_t k)
{
    if (bf)
        px_b16_st(d, v, k);
    else
        px_h16_st(d, v, k);
}

/* Masked 16-bit loads and stores, for callers on AVX512BW and VL
 * (conv-winograd.c): lanes mk of s widened, zeros elsewhere; lanes mk of
 * v rounded to d, nothing else written. The bits of px_half_ld/st. */
#define PX_T512BW __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

PX_T512BW static inline __m512 px_half_mask_ld(int bf, const uint16_t *s, __mmask16 mk)
{
    __m256i h = _mm256_maskz_loadu_epi16(mk, s);
    if (bf) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    __m512 v = _mm512_cvtph_ps(h);
    if (__builtin_expect(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0, 0)) {
        float f[16] = {0};
        for (int i = 0; i < 16; i++)
            if (mk >> i & 1) f[i] = phx_f16_to_f32(s[i]);
        v = _mm512_loadu_ps(f);
    }
    return v;
}

PX_T512BW static inline void px_half_mask_st(int bf, uint16_t *d, __mmask16 mk, __m512 v)
{
    if (bf) {
        _mm256_mask_storeu_epi16(d, mk, px_b16_round(v));
        return;
    }
    if (__builtin_expect(_mm512_mask_cmp_ps_mask(mk, v, v, _CMP_UNORD_Q) != 0, 0)) {
        float f[16];
        _mm512_storeu_ps(f, v);
        for (int i = 0; i < 16; i++)
            if (mk >> i & 1) d[i] = phx_f32_to_f16(f[i]);
        return;
    }
    _mm256_mask_storeu_epi16(d, mk, _mm512_cvtps_ph(v, PX_H16_RNE));
}

#endif
#endif
