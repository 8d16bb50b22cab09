/* A persistent pool of worker threads (internal): the kernels' parallel
 * loops (px_threads_pool) and DataParallel's replicas run on it.
 *
 * px_pool_run(p, k, fn, arg) runs fn(arg, 0) on the calling thread and
 * fn(arg, i) for i = 1..k-1 on worker i, and returns once all k calls have
 * returned. Workers are created once; a run allocates nothing, so a
 * training step through DataParallel stays allocation-free. Idle workers
 * spin briefly (a step's forward and backward follow each other within
 * microseconds), then sleep on a condition variable. */
#ifndef PHX_CORE_BASE_THREADS_POOL_H
#define PHX_CORE_BASE_THREADS_POOL_H

#include <stddef.h>

typedef struct px_pool px_pool;
typedef void (*px_pool_fn)(void *arg, size_t i);

/* A pool able to run up to n tasks at once (n - 1 worker threads; task 0
 * runs on the caller). NULL with phx_last_error on ENOMEM or when a thread
 * cannot be created. */
px_pool *px_pool_new(size_t n);
/* Stops and joins the workers. NULL is a no-op. */
void px_pool_free(px_pool *p);
/* Tasks the pool can run at once (n of px_pool_new). */
size_t px_pool_size(const px_pool *p);
/* Runs fn(arg, i) for i in [0, k), k <= px_pool_size(p); waits for all.
 * A run started from inside task 0 of a run of the same pool (a kernel
 * that splits its work, called by a part of another) runs its k tasks
 * one after another on the caller: the workers are busy. */
void px_pool_run(px_pool *p, size_t k, px_pool_fn fn, void *arg);
/* 1 on a worker thread of any pool, else 0. */
int px_pool_in_worker(void);
#endif
