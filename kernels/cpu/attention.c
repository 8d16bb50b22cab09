/* The attention GEMM on the CPU: strided-batched, one px_cpu_gemm per
 * matrix, the matrices split over the pool (the softmax is in softmax.c). */
#include "config.h"
#include "kernels/cpu/cpu.h"

typedef struct batched_job {
    int dev, trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c;
    float alpha, beta;
    const char *a, *b;
    char *c;
    phx_dtype adt, cdt;
    phx_status first;
} batched_job;

/* matrices lo .. hi - 1, one after another */
static void batched_part(void *arg, int64_t lo, int64_t hi)
{
    batched_job *j = arg;
    size_t ea = phx_dtype_size(j->adt), ec = phx_dtype_size(j->cdt);
    for (int64_t i = lo; i < hi; i++) {
        phx_status st =
            px_cpu_gemm(j->dev, j->trans_a, j->trans_b, j->m, j->n, j->k, j->alpha,
                        j->a + (size_t)(i * j->stride_a) * ea, j->lda, j->b + (size_t)(i * j->stride_b) * ea, j->ldb,
                        j->adt, j->beta, j->c + (size_t)(i * j->stride_c) * ec, j->ldc, j->cdt);
        if (st != PHX_OK) {
            px_cpu_part_fail(&j->first, st);
            return;
        }
    }
}

/* The matrices split over the thread budget's pool, parts of at least
 * 2^20 multiply-adds: the GPT's attention products (128x128x32, 2^19
 * each, one call of 4 heads per sequence) are each too small to split
 * themselves (gemm.c), so 2 heads a part. The grain was 2^20 / fmas + 1,
 * 3 matrices: 4 heads made one part, and at 2 threads every attention
 * product ran on the calling thread (OpenBLAS) or was cut into two
 * 64-row oneDNN blocks of 2^18 multiply-adds, a pool dispatch each (bf16:
 * 20% of the step's samples in the pool's waits). The GPT step at 2
 * threads ran 1.10-1.16x (f32), 1.12-1.14x (bf16) and 1.10-1.21x (f16)
 * faster with 2 heads a part (doc/maint/kernels.md). */
phx_status px_cpu_gemm_batched(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                               int64_t stride_b, phx_dtype adt, float beta, void *c, int64_t ldc, int64_t stride_c,
                               phx_dtype cdt, int64_t batch)
{
    if (batch < 0) return phx_error(PHX_EINVAL, "gemm_batched: batch %lld, expected >= 0", (long long)batch);
    batched_job j = {dev,      trans_a,  trans_b, m,    n, k, lda, ldb, ldc, stride_a,
                     stride_b, stride_c, alpha,   beta, a, b, c,   adt, cdt, PHX_OK};
    int64_t fmas = m * n * (k > 0 ? k : 1);
    px_cpu_parallel_for(batch, fmas > 0 ? (((int64_t)1 << 20) + fmas - 1) / fmas : batch, batched_part, &j);
    return j.first;
}
