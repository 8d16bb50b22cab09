/* GEMM on the CPU: f32 straight to cblas_sgemm (no copies); bf16
 * operands to oneDNN's matmul (gemm-dnnl.c) where the CPU multiplies
 * bf16 in hardware; otherwise f16/bf16 operands are widened to f32 in
 * thread-local scratch, multiplied with f32 accumulation, and the result
 * is rounded into C's dtype. PHX_CPU_GEMM forces one path (doc/env.md). */
#include "config.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CBLAS
#include <cblas.h>
#endif
#include "kernels/cpu/cpu.h"

void px_cpu_blas_threads(int n)
{
#ifdef HAVE_CBLAS
    openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

int px_cpu_blas_get_threads(void)
{
#ifdef HAVE_CBLAS
    return openblas_get_num_threads();
#else
    return 1;
#endif
}

static phx_status sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
#ifdef HAVE_CBLAS
    if (k > 0) {
        if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
            return phx_error(PHX_EUNSUPPORTED, "gemm: m=%lld n=%lld k=%lld exceed the BLAS int range", (long long)m,
                             (long long)n, (long long)k);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return PHX_OK;
    }
#endif
    px_cpu_sgemm_loop(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return PHX_OK;
}

/* rows x cols of src (leading dim ld, dtype dt) into contiguous f32 dst */
PX_INLINE void px_widen(float *dst, const void *src, int dt, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) dst[r * cols + j] = px_ld(src, dt, r * ld + j);
}

PX_INLINE void px_narrow(void *dst, int dt, int64_t ld, const float *src, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) px_st(dst, dt, r * ld + j, src[r * cols + j]);
}

typedef enum { GEMM_AUTO, GEMM_BLAS, GEMM_DNNL } gemm_path;

/* PHX_CPU_GEMM: auto (or unset, empty), blas or dnnl. Read on each call
 * (a getenv beside a GEMM costs nothing) so a test can force each path. */
static phx_status gemm_path_env(gemm_path *path)
{
    const char *v = getenv("PHX_CPU_GEMM");
    if (!v || !*v || strcmp(v, "auto") == 0)
        *path = GEMM_AUTO;
    else if (strcmp(v, "blas") == 0)
        *path = GEMM_BLAS;
    else if (strcmp(v, "dnnl") == 0)
        *path = GEMM_DNNL;
    else
        return phx_error(PHX_EINVAL, "gemm: PHX_CPU_GEMM=%s, expected auto, blas or dnnl", v);
#ifndef HAVE_DNNL
    if (*path == GEMM_DNNL)
        return phx_error(PHX_EUNSUPPORTED,
                         "gemm: PHX_CPU_GEMM=dnnl, but this build has no oneDNN (configure "
                         "--with-dnnl; apt-get install libdnnl-dev)");
#endif
    return PHX_OK;
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
/* f16 rows into f32 with F16C's vcvtph2ps, 8 at a time (exact, like the
 * scalar conversion: operands here are never written back) */
__attribute__((target("avx,f16c"))) static void widen_f16c(float *dst, const uint16_t *src, int64_t rows, int64_t cols,
                                                           int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *s = src + r * ld;
        float *d = dst + r * cols;
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8)
            _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + j))));
        for (; j < cols; j++) d[j] = phx_f16_to_f32(s[j]);
    }
}

static int have_f16c(void)
{
    return __builtin_cpu_supports("f16c");
}
#else
static void widen_f16c(float *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld)
{
    px_widen(dst, src, PHX_F16, rows, cols, ld);
}

static int have_f16c(void)
{
    return 0;
}
#endif

static int is_float(phx_dtype dt)
{
    return dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16;
}

PX_CLONES phx_status px_cpu_gemm(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                 const void *a, int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta,
                                 void *c, int64_t ldc, phx_dtype cdt)
{
    (void)dev;
    if (m < 0 || n < 0 || k < 0)
        return phx_error(PHX_EINVAL, "gemm: m=%lld n=%lld k=%lld, expected sizes >= 0", (long long)m, (long long)n,
                         (long long)k);
    if (!is_float(adt) || !is_float(cdt))
        return phx_error(PHX_EINVAL, "gemm: operands %s, result %s, expected f32, f16 or bf16", phx_dtype_name(adt),
                         phx_dtype_name(cdt));
    int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
        return phx_error(PHX_EINVAL, "gemm: leading dims lda=%lld ldb=%lld ldc=%lld, expected >= %lld, %lld, %lld",
                         (long long)lda, (long long)ldb, (long long)ldc, (long long)a_cols, (long long)b_cols,
                         (long long)n);
    gemm_path path;
    phx_status st = gemm_path_env(&path);
    if (st != PHX_OK) return st;
    if (m == 0 || n == 0) return PHX_OK;

    /* bf16 on oneDNN: automatically where the CPU has AVX512-BF16, always
     * when forced (then on oneDNN's own fallback ISA); f16 and f32 stay on
     * BLAS (oneDNN has no f16 matmul without AVX512-FP16, and its f32 is
     * not clearly faster than OpenBLAS's sgemm here: doc/tensors.md). */
    if (adt == PHX_BF16 && k > 0 && (path == GEMM_DNNL || (path == GEMM_AUTO && px_cpu_dnnl_bf16_native()))) {
        st = px_cpu_gemm_dnnl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);
        if (st != PHX_EUNSUPPORTED) return st;
    }

    const float *af = a, *bf = b;
    if (adt != PHX_F32 && k > 0) {
        float *sa = px_cpu_scratch(0, (size_t)(a_rows * a_cols) * sizeof(float));
        float *sb = px_cpu_scratch(1, (size_t)(b_rows * b_cols) * sizeof(float));
        if (!sa || !sb) return PHX_ENOMEM;
        if (adt == PHX_F16 && have_f16c())
            widen_f16c(sa, a, a_rows, a_cols, lda), widen_f16c(sb, b, b_rows, b_cols, ldb);
        else
            PX_FLOAT_DISPATCH("gemm", adt,
                              (px_widen(sa, a, DT, a_rows, a_cols, lda), px_widen(sb, b, DT, b_rows, b_cols, ldb)));
        af = sa, lda = a_cols;
        bf = sb, ldb = b_cols;
    }
    if (cdt == PHX_F32) return sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);

    float *sc = px_cpu_scratch(2, (size_t)(m * n) * sizeof(float));
    if (!sc) return PHX_ENOMEM;
    if (beta != 0.0f) PX_FLOAT_DISPATCH("gemm", cdt, px_widen(sc, c, DT, m, n, ldc));
    st = sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, sc, n);
    if (st != PHX_OK) return st;
    PX_FLOAT_DISPATCH("gemm", cdt, px_narrow(c, DT, ldc, sc, m, n));
    return PHX_OK;
}
