/* The CPU thread budget (src/base/threads.c, internal; compiled in with
 * the kernels' parallel loop, kernels/cpu/parallel.c): a parallel kernel
 * region runs on as many distinct threads as the calling thread's budget
 * -- PHX_NUM_THREADS, phx_set_num_threads, a rank thread's own budget, a
 * replica's share -- in every BLAS configuration, --without-blas
 * included; and the BLAS's thread count follows the budget where the
 * build can set it. */
#include "config.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "src/base/threads.h"
#include "src/world/world-impl.h"
#include "kernels/cpu/cpu.h"
#include "phalanx/phalanx.h"
#include "t/tap.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
int openblas_get_num_threads(void);
#define BLAS_COUNT() openblas_get_num_threads()
#elif defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
#include <stdint.h>
int64_t bli_thread_get_num_threads(void);
#define BLAS_COUNT() ((int)bli_thread_get_num_threads())
#endif

/* world.c asks phx_spawn's world; this program has none. */
const px_spawn_tls *px_spawn_current(void)
{
    static const px_spawn_tls none;
    return &none;
}

enum { ITEMS = 64, MAXW = 8 };

typedef struct region {
    pthread_mutex_t mu;
    pthread_t who[MAXW];
    int n_who, items;
} region;

static void part(void *arg, int64_t lo, int64_t hi)
{
    region *r = arg;
    pthread_mutex_lock(&r->mu);
    int seen = 0;
    for (int i = 0; i < r->n_who; i++) seen |= pthread_equal(r->who[i], pthread_self());
    if (!seen && r->n_who < MAXW) r->who[r->n_who++] = pthread_self();
    r->items += (int)(hi - lo);
    pthread_mutex_unlock(&r->mu);
}

/* Distinct threads that ran a region of ITEMS items (grain 1); -1 when
 * some item was not run exactly once. */
static int width(void)
{
    region r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    px_cpu_parallel_for(ITEMS, 1, part, &r);
    pthread_mutex_destroy(&r.mu);
    return r.items == ITEMS ? r.n_who : -1;
}

typedef struct rank_arg {
    int budget, got, width;
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    px_threads_set_local(a->budget);
    a->got = phx_num_threads();
    a->width = width();
    return NULL;
}

static void *rank_set(void *p)
{
    (void)p;
    px_threads_set_local(1);
    phx_set_num_threads(2);
    return (void *)(intptr_t)(phx_num_threads() == 2 && width() == 2);
}

int main(void)
{
    plan(14);
    setenv("PHX_NUM_THREADS", "2", 1);
    is_int(px_threads_budget(), 2, "PHX_NUM_THREADS=2: a budget of 2");
    is_int(width(), 2, "a parallel region runs on 2 distinct threads");
#ifdef BLAS_COUNT
    px_threads_blas_sync();
    is_int(BLAS_COUNT(), 2, "the BLAS runs on the budget's 2 threads");
#else
    skip(1, "this build's BLAS has no thread count to set");
#endif

    is_int(phx_set_num_threads(1), PHX_OK, "phx_set_num_threads(1)");
    is_int(width(), 1, "a budget of 1: the region runs on 1 thread");
#ifdef BLAS_COUNT
    px_threads_blas_sync();
    is_int(BLAS_COUNT(), 1, "the BLAS follows to 1 thread");
#else
    skip(1, "this build's BLAS has no thread count to set");
#endif

    phx_set_num_threads(3);
    is_int(width(), 3, "phx_set_num_threads(3): 3 distinct threads");
    is_int(px_threads_share(3), 1, "3 replicas share a budget of 3: 1 thread each");
    is_int(px_threads_share(2), 1, "2 replicas: 1 thread each (3 / 2)");

    /* Two rank threads side by side, each on its own budget. */
    rank_arg a = {1, 0, 0}, b = {2, 0, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, rank_main, &a);
    pthread_create(&tb, NULL, rank_main, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ok(a.got == 1 && b.got == 2, "rank threads report their own budgets (%d, %d)", a.got, b.got);
    ok(a.width == 1 && b.width == 2, "and their regions run on 1 and 2 threads (%d, %d)", a.width, b.width);
    is_int(phx_num_threads(), 3, "the library's budget is untouched by them");

    /* A rank thread's phx_set_num_threads changes its own budget only. */
    pthread_t tc;
    pthread_create(&tc, NULL, rank_set, NULL);
    void *got = NULL;
    pthread_join(tc, &got);
    ok(got == (void *)1, "a rank thread's phx_set_num_threads(2) sets its own budget");
    is_int(phx_num_threads(), 3, "... and leaves the library's at 3");
    return done_testing();
}
