/* The BLAS adapter for BLIS (built only when the BLAS has
 * bli_thread_set_num_threads and not OpenBLAS's call): BLIS's global
 * thread count, set from the calling thread's budget. */
#include "config.h"
#include <stdint.h>
#include "src/base/threads.h"

void bli_thread_set_num_threads(int64_t n); /* dim_t, 64 bits in a default BLIS build */

void px_threads_blas_set(int n)
{
    bli_thread_set_num_threads(n);
}
