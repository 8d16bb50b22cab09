/* GEMM on the GPU through cuBLAS (cublasGemmEx, which runs cublasLt's
 * kernels): f32, f16 and bf16 operands, f32 accumulation
 * (CUBLAS_COMPUTE_32F, reduced-precision reductions disallowed), tensor
 * cores for f16/bf16; f32 uses TF32 tensor cores only with PHX_TF32=1.
 * One handle per device per thread (in the thread's context, bound to its
 * stream) with its own 32 MiB workspace. Row-major C = op(A) op(B) is
 * computed as the column-major C^T = op(B)^T op(A)^T, without copies.
 * Result dtypes cuBLAS cannot produce directly (f32 operands into f16,
 * mixed half types) go through an f32 scratch and a cast. */
#include "config.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
#include "kernels/gemm-check.h"
#include "plugins/device/cuda/kernels/kernels.h"
#include "plugins/device/cuda/cuda-impl.h"

#define PX_BLAS_WS_BYTES ((size_t)32 << 20)

static const char *blas_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

static phx_status blas_error(cublasStatus_t s, int dev, const char *what)
{
    phx_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? PHX_ENOMEM
        : s == CUBLAS_STATUS_NOT_SUPPORTED          ? PHX_EUNSUPPORTED
                                                    : PHX_EDEVICE;
    return phx_error(st, "cuda:%d: %s: %s (%s)", dev, what, cublasGetStatusString(s), blas_name(s));
}

phx_status px_cuda_tf32(int *on)
{
    const char *v = getenv("PHX_TF32");
    if (!v || !*v || strcmp(v, "0") == 0) {
        *on = 0;
        return PHX_OK;
    }
    if (strcmp(v, "1") == 0) {
        *on = 1;
        return PHX_OK;
    }
    return phx_error(PHX_EINVAL, "PHX_TF32=%s, expected 0 or 1", v);
}

/* The thread's handle on ctx's device, created on first use. */
static phx_status blas_handle(px_cuda_ctx *ctx, cublasHandle_t *out)
{
    if (ctx->blas) {
        *out = (cublasHandle_t)ctx->blas;
        return PHX_OK;
    }
    cublasHandle_t h = NULL;
    cublasStatus_t s = cublasCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_error(s, ctx->dev, "cublasCreate");
    void *ws = NULL;
    phx_status st = px_cuda_alloc(ctx, PX_BLAS_WS_BYTES, &ws);
    if (st != PHX_OK) {
        cublasDestroy(h);
        return st;
    }
    /* cublasSetStream resets the workspace: set the stream first */
    if ((s = cublasSetStream(h, ctx->stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetWorkspace(h, ws, PX_BLAS_WS_BYTES)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
            CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST)) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        px_cuda_release(ctx, ws);
        return blas_error(s, ctx->dev, "cuBLAS handle setup");
    }
    ctx->blas = h;
    ctx->blas_ws = ws;
    ctx->blas_ws_bytes = PX_BLAS_WS_BYTES;
    *out = h;
    return PHX_OK;
}

static cudaDataType_t cuda_type(phx_dtype dt)
{
    return dt == PHX_F16 ? CUDA_R_16F : dt == PHX_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* C (m x n, ldc, cdt) <- beta C, for k == 0 (cuBLAS is not asked). */
static phx_status scale_c(int dev, int64_t m, int64_t n, float beta, void *c, int64_t ldc, phx_dtype cdt)
{
    if (beta == 1.0f) return PHX_OK;
    size_t es = phx_dtype_size(cdt);
    if (ldc == n) return px_cuda_axpby(dev, m * n, 0.0f, NULL, cdt, beta, c, cdt);
    for (int64_t i = 0; i < m; i++) {
        phx_status st = px_cuda_axpby(dev, n, 0.0f, NULL, cdt, beta, (char *)c + (size_t)(i * ldc) * es, cdt);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* Row-by-row cast between C (ldc) and a contiguous m x n buffer. */
static phx_status cast_rows(int dev, void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st_, int64_t lds,
                            int64_t m, int64_t n)
{
    if (ldd == n && lds == n) return px_cuda_cast(dev, dst, dt, src, st_, m * n);
    size_t ed = phx_dtype_size(dt), es = phx_dtype_size(st_);
    for (int64_t i = 0; i < m; i++) {
        phx_status st = px_cuda_cast(dev, (char *)dst + (size_t)(i * ldd) * ed, dt,
                                     (const char *)src + (size_t)(i * lds) * es, st_, n);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

phx_status px_cuda_gemm(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                        int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                        phx_dtype cdt)
{
    if (m < 0 || n < 0 || k < 0)
        return phx_error(PHX_EINVAL, "gemm: m=%lld n=%lld k=%lld, expected sizes >= 0", (long long)m, (long long)n,
                         (long long)k);
    if (!phx_dtype_is_float(adt) || !phx_dtype_is_float(cdt))
        return phx_error(PHX_EINVAL, "gemm: operands %s, result %s, expected f32, f16 or bf16", phx_dtype_name(adt),
                         phx_dtype_name(cdt));
    phx_status ck = px_gemm_check_ld("gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc);
    if (ck != PHX_OK) return ck;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return phx_error(PHX_EUNSUPPORTED, "gemm: m=%lld n=%lld k=%lld (or a leading dim) exceed cuBLAS's int range",
                         (long long)m, (long long)n, (long long)k);
    int tf32 = 0;
    phx_status st = px_cuda_tf32(&tf32);
    if (st != PHX_OK) return st;
    if (m == 0 || n == 0) return PHX_OK;
    if (k == 0) return scale_c(dev, m, n, beta, c, ldc, cdt);

    px_cuda_ctx *ctx;
    cublasHandle_t h = NULL;
    if ((st = px_cuda_ctx_get(dev, &ctx)) != PHX_OK || (st = blas_handle(ctx, &h)) != PHX_OK) return st;

    /* cuBLAS writes C in the operands' type or in f32 */
    int direct = cdt == adt || cdt == PHX_F32;
    void *cc = c;
    int64_t ldcc = ldc;
    if (!direct) {
        if ((st = px_cuda_scratch(ctx, (size_t)(m * n) * sizeof(float), &cc)) != PHX_OK) return st;
        ldcc = n;
        if (beta != 0.0f && (st = cast_rows(dev, cc, PHX_F32, n, c, cdt, ldc, m, n)) != PHX_OK) return st;
    }
    cublasComputeType_t ct = adt == PHX_F32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t s =
        cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
                     (int)k, &alpha, b, cuda_type(adt), (int)ldb, a, cuda_type(adt), (int)lda, &beta, cc,
                     direct ? cuda_type(cdt) : CUDA_R_32F, (int)ldcc, ct, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_error(s, dev, "cublasGemmEx");
    if (!direct) return cast_rows(dev, c, cdt, ldc, cc, PHX_F32, n, m, n);
    return PHX_OK;
}

/* Strided-batched GEMM: one cublasGemmStridedBatchedEx when cuBLAS can
 * write C's dtype directly, else one px_cuda_gemm per matrix. */
phx_status px_cuda_gemm_batched(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                                int64_t stride_b, phx_dtype adt, float beta, void *c, int64_t ldc, int64_t stride_c,
                                phx_dtype cdt, int64_t batch)
{
    if (batch < 0) return phx_error(PHX_EINVAL, "gemm_batched: batch %lld, expected >= 0", (long long)batch);
    int direct = (cdt == adt || cdt == PHX_F32) && phx_dtype_is_float(adt) && k > 0 && m > 0 && n > 0 &&
        batch <= INT_MAX && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
        ldc <= INT_MAX;
    if (!direct || batch < 2) {
        size_t ea = phx_dtype_size(adt), ec = phx_dtype_size(cdt);
        for (int64_t i = 0; i < batch; i++) {
            phx_status st =
                px_cuda_gemm(dev, trans_a, trans_b, m, n, k, alpha, (const char *)a + (size_t)(i * stride_a) * ea, lda,
                             (const char *)b + (size_t)(i * stride_b) * ea, ldb, adt, beta,
                             (char *)c + (size_t)(i * stride_c) * ec, ldc, cdt);
            if (st != PHX_OK) return st;
        }
        return PHX_OK;
    }
    phx_status ck = px_gemm_check_ld("gemm_batched", trans_a, trans_b, m, n, k, lda, ldb, ldc);
    if (ck != PHX_OK) return ck;
    int tf32 = 0;
    phx_status st = px_cuda_tf32(&tf32);
    px_cuda_ctx *ctx;
    cublasHandle_t h = NULL;
    if (st != PHX_OK || (st = px_cuda_ctx_get(dev, &ctx)) != PHX_OK || (st = blas_handle(ctx, &h)) != PHX_OK) return st;
    cublasComputeType_t ct = adt == PHX_F32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b,
        cuda_type(adt), (int)ldb, (long long)stride_b, a, cuda_type(adt), (int)lda, (long long)stride_a, &beta, c,
        cuda_type(cdt), (int)ldc, (long long)stride_c, (int)batch, ct, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_error(s, dev, "cublasGemmStridedBatchedEx");
    return PHX_OK;
}
