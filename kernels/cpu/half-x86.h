/* f16 <-> f32 in registers for the AVX-512 f16 loops of the CPU kernels
 * (batchnorm.c, layernorm.c): 16 values widened with vcvtph2ps and rounded
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

/* the first k (1..16) values of s widened, lanes k.. zero */
PX_T512 static inline __m512 px_h16_ld(const uint16_t *s, int64_t k)
{
    __m256i h;
    if (k == 16)
        h = _mm256_loadu_si256((const __m256i *)s);
    else { /* through a buffer: masked 16-bit loads need AVX512BW */
        uint16_t t[16] = {0};
        memcpy(t, s, (size_t)k * 2);
        h = _mm256_loadu_si256((const __m256i *)t);
    }
    __m512 v = _mm512_cvtph_ps(h);
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
    __m256i h = _mm512_cvtps_ph(v, PX_H16_RNE);
    if (k == 16)
        _mm256_storeu_si256((__m256i *)d, h);
    else {
        uint16_t t[16];
        _mm256_storeu_si256((__m256i *)t, h);
        memcpy(d, t, (size_t)k * 2);
    }
}

#endif
#endif
