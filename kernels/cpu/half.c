/* The half-dtype path of the CPU row kernels: f16 and bf16 values widened
 * a chunk of rows at a time (AVX-512 conversion loops below, else the
 * cast kernel: F16C, shifts),
 * run through the kernel's f32 loop, and rounded back. The compiled half
 * loops convert each element in software and do not vectorise; widening
 * is exact and both round to nearest even, so the bits are the same. */
#include "config.h"
#include "kernels/cpu/cpu.h"

int64_t px_cpu_half_chunk(phx_dtype dt, int64_t cols)
{
    if ((dt != PHX_F16 && dt != PHX_BF16) || px_cpu_isa() < PX_ISA_AVX2) return 0;
    return cols >= PX_F16_BLOCK ? 1 : PX_F16_BLOCK / (cols > 0 ? cols : 1);
}

phx_status px_cpu_half_rows(int64_t rows, int64_t cols, phx_dtype dt, const void *in0, const void *in1, void *out,
                            px_half_rows_fn fn, const void *arg)
{
    int64_t chunk = px_cpu_half_chunk(dt, cols);
    size_t bytes = (size_t)(chunk * cols) * sizeof(float);
    float *a = px_cpu_scratch(0, bytes), *b = in1 ? px_cpu_scratch(1, bytes) : NULL, *o = px_cpu_scratch(2, bytes);
    if (!a || (in1 && !b) || !o) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (int64_t r = 0; r < rows && st == PHX_OK; r += chunk) {
        int64_t k = rows - r < chunk ? rows - r : chunk, off = r * cols;
        int64_t n = k * cols;
        st = px_cpu_half_cast_here(a, PHX_F32, (const uint16_t *)in0 + off, dt, n);
        if (st == PHX_OK && in1) st = px_cpu_half_cast_here(b, PHX_F32, (const uint16_t *)in1 + off, dt, n);
        if (st != PHX_OK) break;
        fn(arg, r, k, a, b, o);
        st = px_cpu_half_cast_here((uint16_t *)out + off, dt, o, PHX_F32, n);
    }
    return st;
}

/* Strided f16 <-> f32 rows for the GEMMs' widened copies: one call for
 * all the rows, where px_cpu_cast_rows makes one px_cpu_cast call (and
 * its kernel choice) per row -- the attention GEMMs' rows are 32 values
 * long (head size), and those calls cost more than the conversion. The
 * conversion instructions round to nearest even like phx_f32_to_f16;
 * NaN lanes go through phx_f16_to_f32 / phx_f32_to_f16, as in the cast
 * kernel (cast-x86.c), so the bits are px_cpu_cast's. */
#if PX_HAVE_X86
#include <immintrin.h>
#include <string.h>
#define HALF_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx512f,f16c"))) static void widen_rows_512(float *d, int64_t ldd, const uint16_t *s,
                                                                   int64_t lds, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++, d += ldd, s += lds)
        for (int64_t i = 0; i < cols; i += 16) {
            __mmask16 m = cols - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - i)) - 1);
            __m256i h;
            if (m == 0xffff)
                h = _mm256_loadu_si256((const __m256i *)(s + i));
            else { /* the tail through a buffer: masked 16-bit loads need AVX512BW */
                uint16_t t[16] = {0};
                memcpy(t, s + i, (size_t)(cols - i) * 2);
                h = _mm256_loadu_si256((const __m256i *)t);
            }
            __m512 v = _mm512_cvtph_ps(h);
            __mmask16 nan = _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
            _mm512_mask_storeu_ps(d + i, m, v);
            for (int64_t j = 0; nan; j++, nan >>= 1)
                if (nan & 1u) d[i + j] = phx_f16_to_f32(s[i + j]);
        }
}

__attribute__((target("avx512f,f16c"))) static void narrow_rows_512(uint16_t *d, int64_t ldd, const float *s,
                                                                    int64_t lds, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++, d += ldd, s += lds)
        for (int64_t i = 0; i < cols; i += 16) {
            __mmask16 m = cols - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - i)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, s + i);
            __mmask16 nan = _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
            __m256i h = _mm512_cvtps_ph(v, HALF_RNE);
            if (m == 0xffff)
                _mm256_storeu_si256((__m256i *)(d + i), h);
            else {
                uint16_t t[16];
                _mm256_storeu_si256((__m256i *)t, h);
                memcpy(d + i, t, (size_t)(cols - i) * 2);
            }
            for (int64_t j = 0; nan; j++, nan >>= 1)
                if (nan & 1u) d[i + j] = phx_f32_to_f16(s[i + j]);
        }
}
#endif

typedef struct rows_job {
    void *dst;
    const void *src;
    phx_dtype dt, st;
    int64_t ldd, lds, cols;
    phx_status first;
} rows_job;

static void rows_part(void *arg, int64_t lo, int64_t hi)
{
    rows_job *j = arg;
    size_t ed = phx_dtype_size(j->dt), es = phx_dtype_size(j->st);
    px_cpu_part_fail(&j->first,
                     px_cpu_half_cast_rows_here((char *)j->dst + (size_t)(lo * j->ldd) * ed, j->dt, j->ldd,
                                                (const char *)j->src + (size_t)(lo * j->lds) * es, j->st, j->lds,
                                                hi - lo, j->cols));
}

/* Rows split over the thread budget's pool, parts of at least 32 K values:
 * the widened copies of an f16 GEMM's operands on the BLAS path, and its
 * f32 result rounded, which the f32 product itself now runs on the pool
 * too (gemm.c) */
phx_status px_cpu_half_cast_rows(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                                 int64_t rows, int64_t cols)
{
    if (cols <= 0) return px_cpu_half_cast_rows_here(dst, dt, ldd, src, st, lds, rows, cols);
    rows_job j = {dst, src, dt, st, ldd, lds, cols, PHX_OK};
    px_cpu_parallel_for(rows, ((int64_t)1 << 15) / cols + 1, rows_part, &j);
    return j.first;
}

phx_status px_cpu_half_cast_rows_here(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                                      int64_t rows, int64_t cols)
{
#if PX_HAVE_X86
    /* contiguous and big: px_cpu_cast's one call (streaming stores, tuning) */
    int big = ldd == cols && lds == cols && rows * cols * 6 >= ((int64_t)1 << 20);
    if (!big && rows > 0 && cols > 0 && px_cpu_isa() == PX_ISA_AVX512) {
        if (dt == PHX_F32 && st == PHX_F16) {
            widen_rows_512(dst, ldd, src, lds, rows, cols);
            return PHX_OK;
        }
        if (dt == PHX_F16 && st == PHX_F32) {
            narrow_rows_512(dst, ldd, src, lds, rows, cols);
            return PHX_OK;
        }
    }
#endif
    return px_cpu_cast_rows(dst, dt, ldd, src, st, lds, rows, cols);
}
