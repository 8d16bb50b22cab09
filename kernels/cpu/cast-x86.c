/* f32 <-> f16 and f32 <-> bf16 casts with the x86 conversion instructions
 * (F16C vcvtps2ph/vcvtph2ps, AVX512-BF16 vcvtneps2bf16), giving the same
 * bits as kernels/math.h: the instructions round to nearest even and
 * overflow to inf as math.h does, but quiet a signalling NaN (math.h keeps
 * the payload as it is) and vcvtneps2bf16 flushes subnormals; the rare
 * vectors holding such a lane are redone with math.h's formula. bf16 ->
 * f32 is a shift; without AVX512-BF16, f32 -> bf16 is math.h's integer
 * rounding, on AVX-512 BW (AVX2 where the kernels do not use it). */
#include "config.h"
#include "kernels/cpu/cpu.h"

#if PX_HAVE_X86
#include <immintrin.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,f16c")))
#define TBF16 __attribute__((target("avx512f,avx512bf16")))
#define T256 __attribute__((target("avx2,f16c")))
#define T512BW __attribute__((target("avx512f,avx512bw")))

static void f32_f16_fix(uint16_t *d, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = phx_f32_to_f16(s[i]);
}
static void f16_f32_fix(float *d, const uint16_t *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = phx_f16_to_f32(s[i]);
}
static void f32_bf16_fix(uint16_t *d, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = phx_f32_to_bf16(s[i]);
}

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* Elements before dst + i reaches a 64-byte line (streaming stores write
 * whole, aligned lines), at most n - i; dst's misaligned starts stay on
 * ordinary stores. */
static int64_t to_line(const void *dst, size_t esize, int64_t i, int64_t n)
{
    uintptr_t a = (uintptr_t)dst + (uintptr_t)i * esize;
    if (a % esize) return 0;
    int64_t h = (int64_t)((64 - a % 64) % 64 / esize);
    return h < n - i ? h : n - i;
}

/* The start of a narrowing cast to d: with *stream, the elements before
 * d's first 64-byte line by fix (math.h's formula); *stream cleared when d
 * cannot reach a line. Returns where the vector loop starts. */
static int64_t narrow_head(uint16_t *d, const float *s, int64_t n, int *stream,
                           void (*fix)(uint16_t *, const float *, int64_t))
{
    int64_t i = *stream ? to_line(d, 2, 0, n) : 0;
    fix(d, s, i);
    *stream = *stream && !((uintptr_t)(d + i) & 63);
    return i;
}

/* 64 bytes to d: streaming or not */
#define STORE64(stream, d, v) ((stream) ? _mm512_stream_si512((void *)(d), (v)) : _mm512_storeu_si512((d), (v)))

T512 static void f32_f16_512(uint16_t *d, const float *s, int64_t n, int stream)
{
    int64_t i = narrow_head(d, s, n, &stream, f32_f16_fix);
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(s + i), v1 = _mm512_loadu_ps(s + i + 16);
        if (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q))
            f32_f16_fix(d + i, s + i, 32); /* before the store: dst may overlap src's start */
        else
            STORE64(stream, d + i,
                    _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(v0, RNE)), _mm512_cvtps_ph(v1, RNE), 1));
    }
    if (stream) _mm_sfence();
    /* the tail (BatchNorm's 7x7 and 14x14 planes end in one) by the
     * instruction too, through a buffer (masked 16-bit stores need BW) */
    for (; i < n; i += 16) {
        int64_t k = n - i < 16 ? n - i : 16;
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << k) - 1), s + i);
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) {
            f32_f16_fix(d + i, s + i, k);
        } else {
            uint16_t t[16];
            _mm256_storeu_si256((__m256i *)t, _mm512_cvtps_ph(v, RNE));
            memcpy(d + i, t, (size_t)k * 2);
        }
    }
}

T512 static void f16_f32_512(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_ps(d + i, v);
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) f16_f32_fix(d + i, s + i, 16);
    }
    if (i < n) { /* the tail through a buffer, as above */
        uint16_t t[16] = {0};
        memcpy(t, s + i, (size_t)(n - i) * 2);
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)t));
        _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << (n - i)) - 1), v);
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) f16_f32_fix(d + i, s + i, n - i);
    }
}

/* NaN or subnormal lanes of v (what vcvtneps2bf16 gets other than math.h):
 * with a = bits << 1 (no sign) and w = a - 2^24, finite nonzero-normal and
 * inf give w <= 0xff000000 - 2^24, zero gives 0xff000000 */
TBF16 static inline __mmask16 bf16_odd(__m512 v)
{
    __m512i w = _mm512_sub_epi32(_mm512_slli_epi32(_mm512_castps_si512(v), 1), _mm512_set1_epi32(0x01000000));
    __mmask16 m = _mm512_cmpgt_epu32_mask(w, _mm512_set1_epi32((int)0xfe000000u));
    return _mm512_mask_cmpneq_epu32_mask(m, w, _mm512_set1_epi32((int)0xff000000u));
}

TBF16 static void f32_bf16_512(uint16_t *d, const float *s, int64_t n, int stream)
{
    int64_t i = narrow_head(d, s, n, &stream, f32_bf16_fix);
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(s + i), v1 = _mm512_loadu_ps(s + i + 16);
        if (bf16_odd(v0) | bf16_odd(v1)) { /* before the store: dst may overlap src's start */
            f32_bf16_fix(d + i, s + i, 32);
            continue;
        }
        STORE64(stream, d + i, _mm512_castps_si512((__m512)_mm512_cvtne2ps_pbh(v1, v0)));
    }
    if (stream) _mm_sfence();
    f32_bf16_fix(d + i, s + i, n - i);
}

/* math.h's phx_f32_to_bf16 on a CPU without AVX512-BF16, 32 lanes of
 * integers: (x + 0x7fff + the kept part's last bit) >> 16, two vectors
 * packed in order; a pair holding a NaN (which keeps its high half,
 * quieted) is done by math.h's formula. On an Intel Xeon of family 6 model 106 the
 * AVX2 loop below, 6-8 % of a bf16 CNN step's samples there, took about
 * twice this one's time on 4M elements (bench/kernels, PHX_CPU_ISA=avx2
 * against avx512), and packing two vectors at once (packus, permq) ran
 * the bf16 GPT step 3-15 % faster than narrowing each (vpmovdw). */
T512BW static __m512i f32_bf16_round(__m512i x)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
}

T512BW static void f32_bf16_512i(uint16_t *d, const float *s, int64_t n, int stream)
{
    const __m512i order = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0); /* packus works per 128-bit lane */
    int64_t i = narrow_head(d, s, n, &stream, f32_bf16_fix);
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(s + i), v1 = _mm512_loadu_ps(s + i + 16);
        if (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)) {
            f32_bf16_fix(d + i, s + i, 32); /* before any store: dst may overlap src's start */
            continue;
        }
        __m512i p =
            _mm512_packus_epi32(f32_bf16_round(_mm512_castps_si512(v0)), f32_bf16_round(_mm512_castps_si512(v1)));
        STORE64(stream, d + i, _mm512_permutexvar_epi64(order, p));
    }
    if (stream) _mm_sfence();
    f32_bf16_fix(d + i, s + i, n - i);
}

T512 static void bf16_f32_512(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_si512(d + i, _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++) d[i] = phx_bf16_to_f32(s[i]);
}

T256 static void f32_f16_256(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(s + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            f32_f16_fix(d + i, s + i, 8);
        else
            _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(v, RNE));
    }
    f32_f16_fix(d + i, s + i, n - i);
}

T256 static void f16_f32_256(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_ps(d + i, v);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) f16_f32_fix(d + i, s + i, 8);
    }
    f16_f32_fix(d + i, s + i, n - i);
}

/* math.h's phx_f32_to_bf16, 8 lanes */
T256 static void f32_bf16_256(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, half), _mm256_and_si256(hi, one)), 16);
        __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
        __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
        __m256i quiet = _mm256_cmpeq_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x7f)), _mm256_setzero_si256());
        __m256i nanv = _mm256_or_si256(hi, _mm256_and_si256(quiet, _mm256_set1_epi32(0x40)));
        r = _mm256_blendv_epi8(r, nanv, nan);
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* lanes 0..3, 4..7 */
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(r));
    }
    f32_bf16_fix(d + i, s + i, n - i);
}

T256 static void bf16_f32_256(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++) d[i] = phx_bf16_to_f32(s[i]);
}

/* f32 -> bf16: vcvtne2ps2bf16 where the CPU has it, else the integer
 * rounding on 32 lanes (AVX-512 BW) or 8 (AVX2) */
static void f32_bf16(uint16_t *d, const float *s, int64_t n, int wide, int stream)
{
    if (wide && px_cpu_has_avx512bf16())
        f32_bf16_512(d, s, n, stream);
    else if (wide && __builtin_cpu_supports("avx512bw"))
        f32_bf16_512i(d, s, n, stream);
    else
        f32_bf16_256(d, s, n);
}

int px_x86_cast(int isa, void *dst, int dt, const void *src, int st, int64_t n)
{
    /* Narrowing casts stream their output once large (px_cpu_streams),
     * leaving the larger input in the cache; widening ones do not: there
     * the output is the larger part, and ordinary stores measured faster
     * (bf16 -> f32 on 4M elements: 0.48-0.55 ms against 0.61 streamed). */
    return px_x86_cast_as(isa, dst, dt, src, st, n, st == PHX_F32 && px_cpu_streams(6 * n));
}

int px_x86_cast_as(int isa, void *dst, int dt, const void *src, int st, int64_t n, int stream)
{
    int wide = isa >= PX_ISA_AVX512;
    stream = stream && wide && st == PHX_F32;
    if (st == PHX_F32 && dt == PHX_F16)
        wide ? f32_f16_512(dst, src, n, stream) : f32_f16_256(dst, src, n);
    else if (st == PHX_F16 && dt == PHX_F32)
        wide ? f16_f32_512(dst, src, n) : f16_f32_256(dst, src, n);
    else if (st == PHX_F32 && dt == PHX_BF16)
        f32_bf16(dst, src, n, wide, stream);
    else if (st == PHX_BF16 && dt == PHX_F32)
        wide ? bf16_f32_512(dst, src, n) : bf16_f32_256(dst, src, n);
    else
        return 0;
    return 1;
}
#endif
