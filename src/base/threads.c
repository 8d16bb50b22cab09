/* The CPU thread budget: the library's, each thread's own, the kernel
 * pool of each thread, and the BLAS kept at the calling thread's budget
 * (threads.h). */
#include "config.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/world/world-impl.h"
#include "phalanx/device.h"
#include "phalanx/log.h"

#define PX_THREADS_MAX 4096

static atomic_int lib_set; /* phx_set_num_threads's n; 0: not called */
static atomic_int lib_budget; /* the library's budget; 0: not resolved */
static atomic_int blas_count; /* what the BLAS was last set to; 0: never */
static atomic_int blas_cap; /* 1: this process may run the BLAS on 1 thread only */
static __thread int own; /* the calling thread's own budget; 0: none */
static __thread int blas_team; /* this thread ran the BLAS on more than 1 thread */

static int cores(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? n : 1;
}

/* PHX_NUM_THREADS when it is set and valid (warns when it is set and not),
 * else 0. */
static int env_threads(void)
{
    const char *v = getenv("PHX_NUM_THREADS");
    if (!v || !*v) return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (*v >= '0' && *v <= '9' && !*end && n >= 1 && n <= PX_THREADS_MAX) return (int)n;
    phx_log(PHX_LOG_WARN, "PHX_NUM_THREADS='%s' is not an integer in 1..%d; using cores / local ranks", v,
            PX_THREADS_MAX);
    return 0;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t pool_key; /* each thread's kernel pool */

static void pool_destroy(void *p)
{
    px_pool_free(p);
}

/* A child of fork (phx_spawn's processes) is a rank of its own: it
 * resolves its budget from its own environment at its first use, and
 * drops the forking thread's pool, whose workers stayed in the parent
 * (left allocated: they cannot be joined). */
static void after_fork_child(void)
{
    if (atomic_load(&lib_set) == 0) atomic_store(&lib_budget, 0);
    atomic_store(&blas_count, 0);
    pthread_setspecific(pool_key, NULL);
    /* A BLAS threaded by GNU OpenMP (BLIS) keeps the forking thread's team
     * of OpenMP threads, which the child does not have: a parallel region
     * of more than 1 thread would wait for them forever. One thread runs
     * without them. */
    if (blas_team && !PX_BLAS_FORK_SAFE) atomic_store(&blas_cap, 1);
}

static void init(void)
{
    pthread_key_create(&pool_key, pool_destroy);
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* cores / ranks, at least 1. */
static int per_rank(int ranks)
{
    int n = cores() / (ranks > 0 ? ranks : 1);
    return n >= 1 ? n : 1;
}

int px_threads_resolve(void)
{
    pthread_once(&init_once, init);
    int n = atomic_load(&lib_set);
    if (n < 1 && (n = env_threads()) < 1 && (n = px_world_slurm_cpus()) > 0) {
        /* srun -c: the CPUs Slurm gave this task, which srun does not
         * divide among the node's tasks as phxrun does */
        int c = cores();
        if (n > c) n = c;
    } else if (n < 1) {
        int local = 1;
        if (px_world_local(NULL, &local) != PHX_OK)
            phx_log(PHX_LOG_WARN, "%s; the CPU thread budget counts 1 rank on this node", phx_last_error());
        n = per_rank(local);
    }
    atomic_store(&lib_budget, n);
    return n;
}

int px_threads_budget(void)
{
    if (own > 0) return own;
    if (px_pool_in_worker()) return 1;
    int n = atomic_load(&lib_budget);
    return n > 0 ? n : px_threads_resolve();
}

int px_threads_rank_default(int ranks)
{
    int n = atomic_load(&lib_set);
    if (n < 1) n = env_threads();
    return n >= 1 ? n : per_rank(ranks);
}

int px_threads_set_local(int n)
{
    int prev = own;
    own = n > 0 ? n : 0;
    return prev;
}

int px_threads_share(int k)
{
    int n = px_threads_budget() / (k > 0 ? k : 1);
    return n >= 1 ? n : 1;
}

void px_threads_blas_sync(void)
{
    pthread_once(&init_once, init);
    int n = px_threads_budget();
    if (n > 1 && atomic_load_explicit(&blas_cap, memory_order_relaxed)) {
        if (atomic_exchange(&blas_cap, 2) == 1)
            phx_log(PHX_LOG_INFO,
                    "the BLAS runs on 1 thread in this process: it was forked by a thread that "
                    "ran the BLAS's OpenMP threads, which a forked child cannot use");
        n = 1;
    }
    if (n > 1) blas_team = 1;
    if (atomic_load_explicit(&blas_count, memory_order_relaxed) != n) {
        px_threads_blas_set(n);
        atomic_store_explicit(&blas_count, n, memory_order_relaxed);
    }
}

void px_threads_blas_serial(void)
{
    pthread_once(&init_once, init);
    if (atomic_load_explicit(&blas_count, memory_order_relaxed) != 1) {
        px_threads_blas_set(1);
        atomic_store_explicit(&blas_count, 1, memory_order_relaxed);
    }
}

/* ---- each thread's kernel pool ---- */

px_pool *px_threads_pool(void)
{
    size_t n = (size_t)px_threads_budget();
    pthread_once(&init_once, init);
    px_pool *p = pthread_getspecific(pool_key);
    if (p && px_pool_size(p) == n) return p;
    px_pool_free(p);
    pthread_setspecific(pool_key, NULL);
    if (!(p = px_pool_new(n))) return NULL;
    pthread_setspecific(pool_key, p);
    return p;
}

/* ---- the public calls (phalanx/device.h) ---- */

int phx_num_threads(void)
{
    if (own > 0) return own;
    return px_pool_in_worker() ? 1 : px_threads_resolve();
}

phx_status phx_set_num_threads(int n)
{
    if (n < 1) return phx_error(PHX_EINVAL, "phx_set_num_threads: n=%d, expected >= 1", n);
    if (own > 0) {
        own = n; /* a rank thread or replica: its own budget only */
    } else {
        atomic_store(&lib_set, n);
        atomic_store(&lib_budget, n);
    }
    px_threads_blas_sync();
    return PHX_OK;
}
