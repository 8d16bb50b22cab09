/* The kit's ordered worker queue (phalanx/plugin/kit.h): a ring of jobs
 * that only grows, one thread that runs them in push order, and an inline
 * path that runs a job on the pushing thread when the queue is idle. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin/kit.h"

#define KIT_MSG_MAX 1024

typedef struct entry {
    phx_work *work;
    /* the job's bytes follow, padded to max_align_t */
} entry;

struct phx_kit_queue {
    size_t job_size, stride; /* stride: one entry with its job */
    phx_kit_run_fn run;
    void *ctx;
    char name[32];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *ring; /* cap entries */
    unsigned char *running; /* the thread's copy of the entry it runs */
    size_t cap, head, len; /* len counts the job running on the thread */
    int inline_running; /* a job runs on a pushing thread */
    phx_work *cur_work; /* the work of the job the thread runs */
    int expired; /* ... completed by phx_kit_queue_expire */
    int stop;
    pthread_t thread;
};

static entry *at(phx_kit_queue *q, size_t i)
{
    return (entry *)(q->ring + ((q->head + i) % q->cap) * q->stride);
}

static const void *job_of(const entry *e)
{
    return (const unsigned char *)e + sizeof(max_align_t);
}

static void run_one(phx_kit_queue *q, const void *job, phx_work *work)
{
    char msg[KIT_MSG_MAX];
    msg[0] = '\0';
    phx_status st = q->run(q->ctx, job, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    phx_work_complete(work, st, st ? msg : NULL);
}

static void *worker(void *p)
{
    phx_kit_queue *q = p;
    unsigned char *copy = q->running;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && (!q->len || q->inline_running)) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->len) break; /* stopping, nothing left */
        if (q->inline_running) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        /* The ring may grow (and move) while the job runs: run a copy. */
        memcpy(copy, at(q, 0), q->stride);
        const entry *e = (const entry *)copy;
        q->cur_work = e->work;
        q->expired = 0;
        pthread_mutex_unlock(&q->mu);
        char msg[KIT_MSG_MAX];
        msg[0] = '\0';
        phx_status st = q->run(q->ctx, job_of(e), msg, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        pthread_mutex_lock(&q->mu);
        int expired = q->expired;
        q->cur_work = NULL;
        pthread_mutex_unlock(&q->mu);
        if (!expired) phx_work_complete(e->work, st, st ? msg : NULL);
        pthread_mutex_lock(&q->mu);
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

phx_status phx_kit_queue_new(size_t job_size, phx_kit_run_fn run, void *ctx, const char *name, phx_kit_queue **out)
{
    if (!out || !run) return phx_error(PHX_EINVAL, "phx_kit_queue_new: %s is NULL", out ? "run" : "out");
    phx_kit_queue *q = calloc(1, sizeof *q);
    if (!q) return phx_error(PHX_ENOMEM, "%s: out of memory for the worker queue", name ? name : "kit");
    q->job_size = job_size;
    q->stride = sizeof(max_align_t) + (job_size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    q->run = run;
    q->ctx = ctx;
    snprintf(q->name, sizeof q->name, "%s", name ? name : "kit");
    if (!(q->running = malloc(q->stride))) {
        free(q);
        return phx_error(PHX_ENOMEM, "%s: out of memory for the worker queue", name ? name : "kit");
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->thread, NULL, worker, q) != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        phx_status st = phx_error(PHX_EIO, "%s: cannot start the worker thread", q->name);
        free(q->running);
        free(q);
        return st;
    }
    *out = q;
    return PHX_OK;
}

/* Appends under q->mu; PHX_ENOMEM when the ring cannot grow. */
static phx_status append(phx_kit_queue *q, const void *job, phx_work *work)
{
    if (q->len == q->cap) { /* grow: unroll into a ring twice as big */
        size_t cap = q->cap ? 2 * q->cap : 64;
        unsigned char *ring = malloc(cap * q->stride);
        if (!ring) return phx_error(PHX_ENOMEM, "%s: cannot grow the worker queue to %zu jobs", q->name, cap);
        for (size_t i = 0; i < q->len; i++) memcpy(ring + i * q->stride, at(q, i), q->stride);
        free(q->ring);
        q->ring = ring;
        q->cap = cap;
        q->head = 0;
    }
    entry *e = at(q, q->len);
    e->work = work;
    memcpy((unsigned char *)e + sizeof(max_align_t), job, q->job_size);
    q->len++;
    return PHX_OK;
}

phx_status phx_kit_queue_push(phx_kit_queue *q, const void *job, phx_work *work)
{
    if (!q || !job) return phx_error(PHX_EINVAL, "phx_kit_queue_push: %s is NULL", q ? "job" : "queue");
    pthread_mutex_lock(&q->mu);
    phx_status st = append(q, job, work);
    pthread_mutex_unlock(&q->mu);
    if (st == PHX_OK) pthread_cond_signal(&q->cv);
    return st;
}

phx_status phx_kit_queue_push_inline(phx_kit_queue *q, const void *job, phx_work *work)
{
    if (!q || !job) return phx_error(PHX_EINVAL, "phx_kit_queue_push_inline: %s is NULL", q ? "job" : "queue");
    pthread_mutex_lock(&q->mu);
    if (q->len || q->inline_running) { /* something ahead of it: keep the order */
        phx_status st = append(q, job, work);
        pthread_mutex_unlock(&q->mu);
        if (st == PHX_OK) pthread_cond_signal(&q->cv);
        return st;
    }
    q->inline_running = 1;
    pthread_mutex_unlock(&q->mu);
    run_one(q, job, work);
    pthread_mutex_lock(&q->mu);
    q->inline_running = 0;
    int queued = q->len != 0; /* pushed by another thread meanwhile */
    pthread_mutex_unlock(&q->mu);
    if (queued) pthread_cond_signal(&q->cv);
    return PHX_OK;
}

int phx_kit_queue_expire(phx_kit_queue *q, phx_status st, const char *msg)
{
    if (!q) return 0;
    pthread_mutex_lock(&q->mu);
    phx_work *w = q->expired ? NULL : q->cur_work;
    if (w) q->expired = 1;
    pthread_mutex_unlock(&q->mu);
    if (w) phx_work_complete(w, st, msg);
    return w != NULL;
}

void phx_kit_queue_free(phx_kit_queue *q)
{
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_mutex_unlock(&q->mu);
    pthread_cond_signal(&q->cv);
    pthread_join(q->thread, NULL); /* runs what is queued first */
    free(q->ring);
    free(q->running);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
