/* GEMM on the CPU. Where the kernels use AVX-512: our packed GEMM
 * (gemm-avx512.c) for every dtype, widening f16 (and bf16 on a CPU
 * without AVX512-BF16) while it packs, bf16 pairs multiplied by vdpbf16ps
 * where the CPU has AVX512-BF16; but bf16 on oneDNN's matmul
 * (gemm-dnnl.c) where the build has it and the CPU multiplies bf16 in
 * hardware: it ran 1.0-1.1x our vdpbf16ps kernel (doc/reference/tensors.md).
 * Elsewhere f32 goes straight to cblas_sgemm (no copies), and f16/bf16
 * operands are widened to f32 in thread-local scratch for it, the result
 * rounded into C's dtype. PHX_CPU_GEMM forces one path (doc/reference/env.md). */
#include "config.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CBLAS
#include <cblas.h>
#endif
#include "kernels/cpu/cpu.h"
#include "src/base/threads.h"

static phx_status sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
#ifdef HAVE_CBLAS
    if (k > 0) {
        if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
            return phx_error(PHX_EUNSUPPORTED, "gemm: m=%lld n=%lld k=%lld exceed the BLAS int range", (long long)m,
                             (long long)n, (long long)k);
        px_threads_blas_sync();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return PHX_OK;
    }
#endif
    px_cpu_sgemm_loop(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return PHX_OK;
}

typedef enum { GEMM_AUTO, GEMM_BLAS, GEMM_DNNL, GEMM_AVX512 } gemm_path;

/* PHX_CPU_GEMM: auto (or unset, empty), blas, dnnl or avx512. Read on each call
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
    else if (strcmp(v, "avx512") == 0)
        *path = GEMM_AVX512;
    else
        return phx_error(PHX_EINVAL, "gemm: PHX_CPU_GEMM=%s, expected auto, blas, dnnl or avx512", v);
    if (*path == GEMM_AVX512 && px_cpu_isa() != PX_ISA_AVX512)
        return phx_error(PHX_EUNSUPPORTED,
                         "gemm: PHX_CPU_GEMM=avx512, but the kernels use %s (PHX_CPU_ISA, or the CPU)",
                         px_cpu_isa_name(px_cpu_isa()));
#ifndef HAVE_DNNL
    if (*path == GEMM_DNNL)
        return phx_error(PHX_EUNSUPPORTED,
                         "gemm: PHX_CPU_GEMM=dnnl, but this build has no oneDNN (configure "
                         "--with-dnnl; apt-get install libdnnl-dev)");
#endif
    return PHX_OK;
}

static int is_float(phx_dtype dt)
{
    return dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16;
}

/* PHX_CPU_GEMM=auto: the packed AVX-512 GEMM wherever the kernels use
 * AVX-512, for every dtype (bf16 reaches it only where oneDNN's matmul
 * did not take it, and runs there on vdpbf16ps where the CPU has
 * AVX512-BF16). f32 too: on 1024^3 it ran 1.9x OpenBLAS's sgemm held to
 * AVX2 by OPENBLAS_CORETYPE=Haswell, and 0.9-1.0x its AVX-512 kernels
 * (doc/reference/tensors.md). */
static int avx512_auto(int64_t m, int64_t n)
{
    if (px_cpu_isa() != PX_ISA_AVX512) return 0;
#ifdef HAVE_CBLAS
    /* the share of its 8 x 48 tiles that C, or C^T where it computes that,
     * fills: below half (a GEMV-like product, C of 1-3 rows or columns),
     * OpenBLAS was faster, 0.38-0.74x on 4096x1x1024 and 1x4096x1024 */
    if (px_gemm_avx512_fill(m, n) < 0.5) return 0;
#else
    (void)m, (void)n;
#endif
    return 1;
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

    /* bf16 on oneDNN: automatically where the CPU has AVX512-BF16 (it ran
     * 1.0-1.1x our vdpbf16ps kernel on 1024^3 and in bench/amp, at 1 and
     * 2 threads: at 97% of the instruction's peak here), always when forced (then on oneDNN's
     * own fallback ISA); f16 and f32 stay on BLAS (oneDNN has no f16
     * matmul without AVX512-FP16, and its f32 is not clearly faster than
     * OpenBLAS's sgemm here: doc/reference/tensors.md). */
    if (adt == PHX_BF16 && k > 0 && (path == GEMM_DNNL || (path == GEMM_AUTO && px_cpu_dnnl_bf16_native()))) {
        st = px_cpu_gemm_dnnl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);
        if (st != PHX_EUNSUPPORTED) return st;
    }

    /* (alpha 0 takes BLAS, which scales C by beta without computing A B,
     * as BLAS defines it) */
    if (k > 0 && alpha != 0.0f && (path == GEMM_AVX512 || (path == GEMM_AUTO && avx512_auto(m, n))))
        return px_cpu_gemm_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);

    const float *af = a, *bf = b;
    st = PHX_OK; /* oneDNN may have declined above */
    if (adt != PHX_F32 && k > 0) {
        float *sa = px_cpu_scratch(0, (size_t)(a_rows * a_cols) * sizeof(float));
        float *sb = px_cpu_scratch(1, (size_t)(b_rows * b_cols) * sizeof(float));
        if (!sa || !sb) return PHX_ENOMEM;
        if ((st = px_cpu_cast_rows(sa, PHX_F32, a_cols, a, adt, lda, a_rows, a_cols)) != PHX_OK ||
            (st = px_cpu_cast_rows(sb, PHX_F32, b_cols, b, adt, ldb, b_rows, b_cols)) != PHX_OK)
            return st;
        af = sa, lda = a_cols;
        bf = sb, ldb = b_cols;
    }
    if (cdt == PHX_F32) return sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);

    /* a f16/bf16 C: computed in f32 scratch, rounded once */
    float *sc = px_cpu_scratch(2, (size_t)(m * n) * sizeof(float));
    if (!sc) return PHX_ENOMEM;
    if (beta != 0.0f && (st = px_cpu_cast_rows(sc, PHX_F32, n, c, cdt, ldc, m, n)) != PHX_OK) return st;
    if ((st = sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, sc, n)) != PHX_OK) return st;
    return px_cpu_cast_rows(c, cdt, ldc, sc, PHX_F32, n, m, n);
}
