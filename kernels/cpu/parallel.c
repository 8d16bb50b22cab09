/* Splitting a kernel's loop over the BLAS threads: each calling thread
 * has its own pool of sleeping workers (core/dp/dp-pool.h), made once per
 * thread and size, so a step allocates nothing once warm. A DataParallel
 * replica runs on one BLAS thread and so runs its loops inline. */
#include "config.h"
#include <pthread.h>
#include "kernels/cpu/cpu.h"
#include "core/dp/dp-pool.h"

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pthread_key_t pool_key;

static void pool_destroy(void *p)
{
    px_pool_free(p);
}

static void pool_init(void)
{
    pthread_key_create(&pool_key, pool_destroy);
}

px_pool *px_cpu_thread_pool(size_t n)
{
    pthread_once(&pool_once, pool_init);
    px_pool *p = pthread_getspecific(pool_key);
    if (p && px_pool_size(p) == n) return p;
    px_pool_free(p);
    pthread_setspecific(pool_key, NULL);
    if (!(p = px_pool_new(n))) return NULL;
    pthread_setspecific(pool_key, p);
    return p;
}

typedef struct range_job {
    px_range_fn fn;
    void *arg;
    int64_t n, step;
} range_job;

static void range_task(void *arg, size_t i)
{
    range_job *j = arg;
    int64_t lo = (int64_t)i * j->step, hi = lo + j->step < j->n ? lo + j->step : j->n;
    if (lo < hi) j->fn(j->arg, lo, hi);
}

void px_cpu_parallel_for(int64_t n, int64_t grain, px_range_fn fn, void *arg)
{
    int threads = px_cpu_blas_get_threads();
    int64_t parts = grain > 0 ? n / grain : n;
    if (parts > threads) parts = threads;
    px_pool *pool = parts > 1 ? px_cpu_thread_pool((size_t)threads) : NULL;
    if (!pool) { /* one part, or no pool (out of memory): inline */
        if (n > 0) fn(arg, 0, n);
        return;
    }
    range_job j = {fn, arg, n, (n + parts - 1) / parts};
    px_pool_run(pool, (size_t)((n + j.step - 1) / j.step), range_task, &j);
}
