/* Splitting a kernel's loop over the calling thread's budget, on its
 * pool (src/base/threads.h): made once per thread and width, so a step
 * allocates nothing once warm. A pool worker, and a DataParallel replica
 * whose share is one thread, runs its loops inline. */
#include "config.h"
#include "kernels/cpu/cpu.h"
#include "src/base/threads.h"

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

static int64_t parts_of(int64_t n, int64_t grain)
{
    int threads = px_threads_budget();
    int64_t parts = grain > 0 ? n / grain : n;
    return parts > threads ? threads : parts;
}

int64_t px_cpu_parallel_parts(int64_t n, int64_t grain)
{
    int64_t parts = parts_of(n, grain);
    return parts > 1 && px_threads_pool() ? parts : 1;
}

void px_cpu_parallel_for(int64_t n, int64_t grain, px_range_fn fn, void *arg)
{
    int64_t parts = parts_of(n, grain);
    px_pool *pool = parts > 1 ? px_threads_pool() : NULL;
    if (!pool) { /* one part, or no pool (out of memory): inline */
        if (n > 0) fn(arg, 0, n);
        return;
    }
    range_job j = {fn, arg, n, (n + parts - 1) / parts};
    px_pool_run(pool, (size_t)((n + j.step - 1) / j.step), range_task, &j);
}

void px_cpu_part_fail(phx_status *first, phx_status st)
{
    phx_status ok = PHX_OK;
    if (st != PHX_OK) __atomic_compare_exchange_n(first, &ok, st, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
