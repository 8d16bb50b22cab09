/* Persistent worker pool: one mailbox per worker, spin then sleep, no
 * allocation per run. */
#include "config.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include "src/base/threads-pool.h"
#include "src/base/util.h"

/* Polls before sleeping: about 20-50 us, long enough to bridge the gap
 * between a step's forward and backward without a futex round trip. */
#define PX_POOL_SPIN 4000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct px_worker {
    px_pool *pool;
    size_t index; /* task index it runs (1..n-1) */
    pthread_t thread;
    bool started;
    atomic_uint go; /* run generation posted to this worker */
    atomic_int sleeping; /* 1 while (about to be) waiting on cv */
    pthread_cond_t cv;
} px_worker;

struct px_pool {
    size_t n; /* tasks at once: n - 1 workers + caller */
    px_worker *workers; /* workers[i] runs task i (workers[0] unused) */
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    atomic_int caller_sleeping;
    atomic_size_t pending; /* workers of the current run not finished */
    unsigned gen; /* last posted generation (caller only) */
    int running; /* 1 inside a run (caller only): a nested run goes inline */
    atomic_bool stop;
    /* The current run; written before the go stores that publish it. */
    px_pool_fn fn;
    void *arg;
};

static void worker_finish(px_pool *p)
{
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static __thread int in_worker;

int px_pool_in_worker(void)
{
    return in_worker;
}

static void *worker_main(void *arg)
{
    px_worker *w = arg;
    in_worker = 1;
    px_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load(&w->go);
        for (int s = 0; g == seen && s < PX_POOL_SPIN && !atomic_load(&p->stop); s++) {
            cpu_relax();
            g = atomic_load(&w->go);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_store(&w->sleeping, 1);
            while ((g = atomic_load(&w->go)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&w->cv, &p->mu);
            atomic_store(&w->sleeping, 0);
            pthread_mutex_unlock(&p->mu);
        }
        if (g == seen) break; /* stop */
        seen = g;
        p->fn(p->arg, w->index);
        worker_finish(p);
    }
    return NULL;
}

px_pool *px_pool_new(size_t n)
{
    if (n == 0) n = 1;
    px_pool *p = px_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->workers = px_calloc(n, sizeof *p->workers);
    if (!p->workers) {
        px_free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (size_t i = 1; i < n; i++) {
        px_worker *w = &p->workers[i];
        w->pool = p;
        w->index = i;
        pthread_cond_init(&w->cv, NULL);
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc) {
            phx_error(PHX_ENOMEM, "thread pool: cannot start worker thread %zu of %zu: %s", i, n - 1, strerror(rc));
            px_pool_free(p);
            return NULL;
        }
        w->started = true;
    }
    return p;
}

void px_pool_free(px_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    for (size_t i = 1; i < p->n; i++) pthread_cond_signal(&p->workers[i].cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 1; i < p->n; i++) {
        px_worker *w = &p->workers[i];
        if (w->started) pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cv);
    }
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    px_free(p->workers);
    px_free(p);
}

size_t px_pool_size(const px_pool *p)
{
    return p->n;
}

void px_pool_run(px_pool *p, size_t k, px_pool_fn fn, void *arg)
{
    if (k > p->n) k = p->n;
    if (k == 0) return;
    if (k == 1 || p->running) { /* one task, or a run from inside task 0: the workers are busy */
        for (size_t i = 0; i < k; i++) fn(arg, i);
        return;
    }
    p->running = 1;
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, k - 1);
    p->gen++;
    for (size_t i = 1; i < k; i++) {
        px_worker *w = &p->workers[i];
        atomic_store(&w->go, p->gen); /* publishes fn/arg (seq_cst) */
        if (atomic_load(&w->sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    fn(arg, 0);
    for (int s = 0; atomic_load(&p->pending) && s < PX_POOL_SPIN; s++) cpu_relax();
    if (atomic_load(&p->pending)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->pending)) pthread_cond_wait(&p->done_cv, &p->mu);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->mu);
    }
    p->running = 0;
}
