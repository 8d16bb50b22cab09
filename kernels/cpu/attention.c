/* The attention GEMM on the CPU: strided-batched, one cblas_sgemm per
 * matrix through px_cpu_gemm (the softmax is in softmax.c). */
#include "config.h"
#include "kernels/cpu/cpu.h"

phx_status px_cpu_gemm_batched(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                               int64_t stride_b, phx_dtype adt, float beta, void *c, int64_t ldc, int64_t stride_c,
                               phx_dtype cdt, int64_t batch)
{
    if (batch < 0) return phx_error(PHX_EINVAL, "gemm_batched: batch %lld, expected >= 0", (long long)batch);
    size_t ea = phx_dtype_size(adt), ec = phx_dtype_size(cdt);
    for (int64_t i = 0; i < batch; i++) {
        phx_status st =
            px_cpu_gemm(dev, trans_a, trans_b, m, n, k, alpha, (const char *)a + (size_t)(i * stride_a) * ea, lda,
                        (const char *)b + (size_t)(i * stride_b) * ea, ldb, adt, beta,
                        (char *)c + (size_t)(i * stride_c) * ec, ldc, cdt);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}
