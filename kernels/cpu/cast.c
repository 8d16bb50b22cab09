/* Casts between any two dtypes, and fill. Float <-> float goes through
 * f32 (f32 -> f16/bf16 rounds to nearest even, NaN kept, overflow to
 * inf). Float -> integer truncates toward zero and saturates; NaN gives 0
 * (PyTorch leaves these undefined). Integer -> float rounds to nearest. */
#include "config.h"
#include <string.h>
#include "kernels/cpu/cpu.h"

static int64_t f2i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

static int32_t f2i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

PX_INLINE void px_cast_ff(void *dst, int dt, const void *src, int st, int64_t n)
{
    for (int64_t i = 0; i < n; i++) px_st(dst, dt, i, px_ld(src, st, i));
}

PX_INLINE double px_ld_any(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case PHX_I32: return (double)((const int32_t *)p)[i];
    case PHX_I64: return (double)((const int64_t *)p)[i];
    default: return (double)px_ld(p, dt, i);
    }
}

/* f32 <-> f16 with the F16C instructions where the CPU has them: the same
 * bits as phx_f32_to_f16 / phx_f16_to_f32 (round to nearest even,
 * subnormals kept, as long as MXCSR's FTZ/DAZ are off, which Phalanx
 * never sets). NaNs differ in the quiet bit only (the hardware quiets a
 * signalling NaN), so a block of 8 holding a NaN goes the portable way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define PX_HAVE_F16C 1

static int have_f16c(void)
{
    static int known = -1; /* a benign race: every thread computes the same */
    if (known < 0) known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return known;
}

__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(s + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) d[i + k] = phx_f32_to_f16(s[i + k]);
        else
            _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) d[i] = phx_f32_to_f16(s[i]);
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
        /* |h| > inf as signed 16-bit: a NaN */
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf)))
            for (int k = 0; k < 8; k++) d[i + k] = phx_f16_to_f32(s[i + k]);
        else
            _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) d[i] = phx_f16_to_f32(s[i]);
}
#else
#define PX_HAVE_F16C 0
#endif

static int valid(phx_dtype dt)
{
    return dt >= PHX_F32 && dt <= PHX_I64;
}

PX_CLONES phx_status px_cpu_cast(int dev, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    (void)dev;
    PX_CHECK_N("cast", n);
    if (!valid(dt) || !valid(st))
        return phx_error(PHX_EINVAL, "cast: dtypes %d -> %d, expected f32, f16, bf16, i32 or i64", (int)st, (int)dt);
    if (dt == st) {
        if (dst != src) memmove(dst, src, (size_t)n * phx_dtype_size(dt));
        return PHX_OK;
    }
#if PX_HAVE_F16C
    if (dt == PHX_F16 && st == PHX_F32 && have_f16c()) {
        f32_to_f16_f16c(dst, src, n);
        return PHX_OK;
    }
    if (dt == PHX_F32 && st == PHX_F16 && have_f16c()) {
        f16_to_f32_f16c(dst, src, n);
        return PHX_OK;
    }
#endif
    if (phx_dtype_is_float(dt) && phx_dtype_is_float(st)) {
        PX_FLOAT_DISPATCH_AS("cast", dt, D, PX_FLOAT_DISPATCH_AS("cast", st, S, px_cast_ff(dst, D, src, S, n)));
        return PHX_OK;
    }
    if (dt == PHX_I64 && st == PHX_I32) {
        for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
        return PHX_OK;
    }
    if (dt == PHX_I32 && st == PHX_I64) { /* wraps modulo 2^32, as PyTorch */
        for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)(uint32_t)((const int64_t *)src)[i];
        return PHX_OK;
    }
    /* one side integer, the other float */
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case PHX_I32: ((int32_t *)dst)[i] = f2i32(px_ld_any(src, st, i)); break;
        case PHX_I64: ((int64_t *)dst)[i] = f2i64(px_ld_any(src, st, i)); break;
        default:
            /* i64 -> f32 rounds once (int -> float), then to f16/bf16 */
            px_st(dst, dt, i, st == PHX_I64 ? (float)((const int64_t *)src)[i] : (float)((const int32_t *)src)[i]);
            break;
        }
    }
    return PHX_OK;
}

PX_INLINE void px_fill_u16(uint16_t *d, int64_t n, uint16_t v)
{
    for (int64_t i = 0; i < n; i++) d[i] = v;
}

phx_status px_cpu_fill(int dev, void *dst, phx_dtype dt, int64_t n, double value)
{
    (void)dev;
    PX_CHECK_N("fill", n);
    switch (dt) {
    case PHX_F32: {
        float v = (float)value, *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    case PHX_F16: px_fill_u16(dst, n, phx_f32_to_f16((float)value)); return PHX_OK;
    case PHX_BF16: px_fill_u16(dst, n, phx_f32_to_bf16((float)value)); return PHX_OK;
    case PHX_I32: {
        int32_t v = f2i32(value), *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    case PHX_I64: {
        int64_t v = f2i64(value), *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    }
    return phx_error(PHX_EINVAL, "fill: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
}
