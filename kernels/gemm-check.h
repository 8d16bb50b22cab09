/* The leading-dimension rule every GEMM kernel checks (the CPU's and the
 * CUDA plugin's, one product or a batch): BLAS's rule, a leading dim is
 * at least its row length and at least 1, also for an empty matrix. C
 * only (host code). */
#ifndef PHX_KERNELS_GEMM_CHECK_H
#define PHX_KERNELS_GEMM_CHECK_H

#include <stdint.h>
#include "phalanx/error.h"

/* PHX_OK, or PHX_EINVAL "who: leading dims ..., expected >= ..." naming
 * the bounds it checks. */
static inline phx_status px_gemm_check_ld(const char *who, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                          int64_t lda, int64_t ldb, int64_t ldc)
{
    int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    int64_t lda_min = a_cols > 1 ? a_cols : 1, ldb_min = b_cols > 1 ? b_cols : 1, ldc_min = n > 1 ? n : 1;
    if (lda >= lda_min && ldb >= ldb_min && ldc >= ldc_min) return PHX_OK;
    return phx_error(PHX_EINVAL,
                     "%s: leading dims lda=%lld ldb=%lld ldc=%lld, expected >= %lld, %lld, %lld (the row lengths, "
                     "at least 1)",
                     who, (long long)lda, (long long)ldb, (long long)ldc, (long long)lda_min, (long long)ldb_min,
                     (long long)ldc_min);
}

#endif
