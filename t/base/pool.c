/* The worker pool (src/base/threads-pool.c, internal): every task of
 * every run executes exactly once, on the caller for task 0, and the
 * caller sees all of their writes when px_pool_run returns -- with runs
 * back to back (workers spinning) and with pauses between them (workers
 * asleep on their condition variable), for k = 1..n. (The same loop ran
 * clean under ThreadSanitizer with 200,000 runs.) */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "src/base/threads-pool.h"
#include "t/tap.h"

enum { N = 4 };

typedef struct job {
    long round;
    long slot[N];
    pthread_t who[N];
    atomic_int calls;
} job;

static void task(void *arg, size_t i)
{
    job *j = arg;
    j->slot[i] = j->round * 10 + (long)i;
    j->who[i] = pthread_self();
    atomic_fetch_add(&j->calls, 1);
}

static int run_rounds(px_pool *p, long rounds, int pause_us, job *j)
{
    for (long r = 1; r <= rounds; r++) {
        size_t k = 1 + (size_t)(r % N);
        j->round = r;
        atomic_store(&j->calls, 0);
        px_pool_run(p, k, task, j);
        if (atomic_load(&j->calls) != (int)k || !pthread_equal(j->who[0], pthread_self())) return 0;
        for (size_t i = 0; i < k; i++)
            if (j->slot[i] != r * 10 + (long)i) return 0;
        if (pause_us) {
            struct timespec ts = {0, pause_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    return 1;
}

/* Task 0 of an outer run starts an inner run of the same pool, as a
 * kernel that splits its work does when a part of another calls it
 * (kernels/cpu/gemm.c inside attention.c's parts): the inner run's
 * tasks all run, on the caller, and the outer run completes. */
typedef struct nest {
    px_pool *p;
    job inner;
    atomic_int outer_calls;
} nest;

static void outer_task(void *arg, size_t i)
{
    nest *n = arg;
    if (i == 0) {
        n->inner.round = 7;
        px_pool_run(n->p, N, task, &n->inner);
    }
    atomic_fetch_add(&n->outer_calls, 1);
}

static int nested_runs(px_pool *p, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        nest n = {p, {0}, 0};
        px_pool_run(p, N, outer_task, &n);
        if (atomic_load(&n.outer_calls) != N || atomic_load(&n.inner.calls) != N) return 0;
        for (size_t i = 0; i < N; i++)
            if (n.inner.slot[i] != 70 + (long)i || !pthread_equal(n.inner.who[i], pthread_self())) return 0;
    }
    return 1;
}

int main(void)
{
    plan(6);
    px_pool *p = px_pool_new(N);
    job j = {0};
    ok(p && px_pool_size(p) == N, "a pool of %d", N);
    ok(p && run_rounds(p, 5000, 0, &j), "5000 runs back to back, k = 1..%d: each task once, results visible", N);
    ok(p && run_rounds(p, 200, 2000, &j), "200 runs 2 ms apart (workers asleep between runs)");
    int distinct = 1;
    for (int a = 0; a < N; a++)
        for (int b = a + 1; b < N; b++) distinct = distinct && !pthread_equal(j.who[a], j.who[b]);
    ok(distinct, "the %d tasks of a run ran on %d different threads", N, N);
    ok(p && nested_runs(p, 100), "100 runs whose task 0 runs the same pool: the inner tasks all ran, on the caller");
    px_pool_free(p);
    px_pool *one = px_pool_new(1);
    atomic_store(&j.calls, 0);
    if (one) px_pool_run(one, 3, task, &j); /* k is clamped to the pool's size */
    ok(one && px_pool_size(one) == 1 && atomic_load(&j.calls) == 1 && pthread_equal(j.who[0], pthread_self()),
       "a pool of 1 has no worker: its one task runs on the caller");
    px_pool_free(one);
    px_pool_free(NULL);
    return done_testing();
}
