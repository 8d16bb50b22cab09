/* The BLAS adapter for OpenBLAS (built only when the BLAS has
 * openblas_set_num_threads): its thread count is process-wide, so
 * px_threads_blas_sync sets it from the calling thread's budget. */
#include "config.h"
#include "src/base/threads.h"

void openblas_set_num_threads(int n);

void px_threads_blas_set(int n)
{
    openblas_set_num_threads(n);
}
