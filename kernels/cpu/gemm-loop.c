/* Plain C SGEMM for builds without CBLAS (and for k = 0). Row-major,
 * BLAS semantics: beta = 0 ignores C's old contents (NaN included). Two
 * loop orders keep the innermost loop contiguous: axpy over a row of B
 * when B is not transposed, dot products along rows of B when it is.
 * Self-contained so the tests can link it directly. */
#include <stdint.h>
#include <string.h>

void px_cpu_sgemm_loop(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

void px_cpu_sgemm_loop(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            memset(ci, 0, (size_t)n * sizeof *ci);
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++) ci[j] *= beta;
        if (alpha == 0.0f || k == 0) continue;
        if (!trans_b) {
            /* row of C += A(i,p) * row p of B: contiguous in j */
            for (int64_t p = 0; p < k; p++) {
                float aip = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
                const float *bp = b + p * ldb;
                for (int64_t j = 0; j < n; j++) ci[j] += aip * bp[j];
            }
        } else {
            /* C(i,j) += dot(A(i,:), row j of B): contiguous in p */
            for (int64_t j = 0; j < n; j++) {
                const float *bj = b + j * ldb;
                float s = 0.0f;
                if (!trans_a) {
                    const float *ai = a + i * lda;
                    for (int64_t p = 0; p < k; p++) s += ai[p] * bj[p];
                } else {
                    for (int64_t p = 0; p < k; p++) s += a[p * lda + i] * bj[p];
                }
                ci[j] += alpha * s;
            }
        }
    }
}
