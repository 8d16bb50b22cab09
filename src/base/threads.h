/* The CPU thread budget (internal): the one owner of how many threads the
 * kernel pool, the BLAS and oneDNN use.
 *
 * The library has one budget: phx_set_num_threads(n), else PHX_NUM_THREADS,
 * else the cores this process may run on divided by the ranks on this node
 * (src/world's local world size). A thread may hold its own budget that
 * wins over the library's: each rank thread of phx_spawn (cores / its world
 * size unless the library's was set), each DataParallel replica (its share
 * of the caller's), and each pool worker (1: a kernel's part runs inline).
 * Nothing here is process-wide state that two ranks could race on, except
 * the BLAS's own counter, which px_threads_blas_sync sets from the calling
 * thread's budget before each BLAS call (px_threads_blas_serial to 1, for
 * the f32 GEMM's blocks on the pool). */
#ifndef PHX_CORE_BASE_THREADS_H
#define PHX_CORE_BASE_THREADS_H

#include "config.h"
#include "src/base/threads-pool.h"

/* The calling thread's budget: its own when it holds one, else the
 * library's (resolved at the first call). At least 1. */
int px_threads_budget(void);

/* The library's budget resolved again from the environment (PHX_NUM_THREADS,
 * cores, local world size) unless phx_set_num_threads fixed it; what
 * phx_num_threads reports outside rank threads. */
int px_threads_resolve(void);

/* The default for a rank thread of a world of `ranks` threads on this
 * machine: the library's budget when phx_set_num_threads or
 * PHX_NUM_THREADS gave one, else cores / ranks. At least 1. */
int px_threads_rank_default(int ranks);

/* Gives the calling thread its own budget n (0: back to the library's).
 * Returns the thread's previous own budget (0: it had none). */
int px_threads_set_local(int n);

/* The budget of each of k tasks sharing the calling thread's budget
 * (DataParallel's replicas): budget / k, at least 1. */
int px_threads_share(int k);

/* The calling thread's pool of px_threads_budget() tasks, made once per
 * thread and width (a step allocates nothing once warm); NULL on ENOMEM.
 * Task 0 runs on the caller. */
px_pool *px_threads_pool(void);

/* Sets the BLAS's thread count to the calling thread's budget when it
 * differs from the count last set. Called before every BLAS call. */
void px_threads_blas_sync(void);

/* Sets the BLAS's thread count to 1 (when last set otherwise), for calls
 * that each compute a block of the product on the caller's own pool
 * (kernels/cpu/gemm.c): no BLAS thread then waits for work beside it. */
void px_threads_blas_serial(void);

/* The BLAS adapter: sets the BLAS's own (process-wide) thread count. A
 * no-op when the BLAS has no such control (reference CBLAS, no BLAS).
 * PX_BLAS_FORK_SAFE: the BLAS's threads survive fork (OpenBLAS restarts
 * them); BLIS's GNU OpenMP team does not, so a child forked by a thread
 * that ran it keeps the BLAS on 1 thread (px_threads_blas_sync). */
#if defined(HAVE_BLI_THREAD_SET_NUM_THREADS) && !defined(HAVE_OPENBLAS_SET_NUM_THREADS)
#define PX_BLAS_FORK_SAFE 0
#else
#define PX_BLAS_FORK_SAFE 1
#endif
#if defined(HAVE_OPENBLAS_SET_NUM_THREADS) || defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
#define PX_BLAS_THREADS_SET 1
void px_threads_blas_set(int n);
#else
#define PX_BLAS_THREADS_SET 0
static inline void px_threads_blas_set(int n)
{
    (void)n;
}
#endif

#endif
