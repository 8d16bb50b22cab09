/* phx_work: a collective's completion (mutex + condition variable).
 * Handles are pooled per communicator: phx_work_free recycles them. */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include "phalanx/log.h"
#include "src/comm/comm-impl.h"
#include "src/base/util.h"

phx_work *px_work_get(phx_comm *c, const char *what)
{
    pthread_mutex_lock(&c->pool_mu);
    phx_work *w = c->free_works;
    if (w) {
        c->free_works = w->next_free;
    } else if ((w = px_calloc(1, sizeof *w))) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, &ca);
        pthread_condattr_destroy(&ca);
        w->comm = c;
        w->next_all = c->all_works;
        c->all_works = w;
    }
    pthread_mutex_unlock(&c->pool_mu);
    if (!w) return NULL;
    w->done = 0;
    w->orphan = 0;
    w->status = PHX_OK;
    w->msg[0] = 0;
    w->what = what;
    w->seq = c->seq;
    w->next_free = NULL;
    return w;
}

void px_work_put(phx_work *w)
{
    phx_comm *c = w->comm;
    pthread_mutex_lock(&c->pool_mu);
    w->next_free = c->free_works;
    c->free_works = w;
    pthread_mutex_unlock(&c->pool_mu);
}

void px_work_destroy_all(phx_comm *c)
{
    for (phx_work *w = c->all_works, *n; w; w = n) {
        n = w->next_all;
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        px_free(w);
    }
    c->all_works = c->free_works = NULL;
}

void phx_work_complete(phx_work *w, phx_status st, const char *msg)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    if (w->done) { /* a plugin bug: keep the first result */
        pthread_mutex_unlock(&w->mu);
        return;
    }
    w->status = st;
    if (st != PHX_OK) snprintf(w->msg, sizeof w->msg, "%s", msg && *msg ? msg : phx_status_name(st));
    w->done = 1;
    if (phx_log_get_level() >= PHX_LOG_DEBUG)
        phx_log(PHX_LOG_DEBUG, "comm %s rank %d: #%llu %s %s%s", w->comm->prefix, w->comm->rank,
                (unsigned long long)w->seq, w->what, st == PHX_OK ? "done" : "failed: ", st == PHX_OK ? "" : w->msg);
    int orphan = w->orphan;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (orphan) px_work_put(w);
}

/* Waits (w->mu held) until done or the deadline (< 0: forever). */
static int wait_locked(phx_work *w, double deadline)
{
    while (!w->done) {
        if (deadline < 0) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        double left = deadline - px_now();
        if (left <= 0) return 0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)((left > 1.0 ? 1.0 : left) * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    return 1;
}

phx_status phx_work_wait(phx_work *w, double timeout_s)
{
    if (!w) return PHX_OK; /* a world of one's collectives complete at once */
    /* The backend enforces the comm's timeout itself and reports the peer
     * at fault; the grace lets its message win the race. */
    double t = timeout_s >= 0 ? timeout_s : w->comm->timeout_s + PX_WORK_GRACE;
    pthread_mutex_lock(&w->mu);
    int done = wait_locked(w, px_now() + t);
    phx_status st = w->status;
    pthread_mutex_unlock(&w->mu);
    char group[PX_WORK_MSG_MAX / 2];
    if (!done)
        return phx_error(PHX_ETIMEOUT, "phx_work_wait: %s #%llu (rank %d of %d, %s) not complete after %.3g s%s",
                         w->what, (unsigned long long)w->seq, w->comm->rank, w->comm->size, w->comm->desc->name, t,
                         px_comm_group_text(w->comm, group, sizeof group));
    if (st != PHX_OK) return phx_error(st, "%s%s", w->msg, px_comm_group_text(w->comm, group, sizeof group));
    return PHX_OK;
}

int phx_work_test(phx_work *w)
{
    if (!w) return 1;
    pthread_mutex_lock(&w->mu);
    int d = w->done;
    pthread_mutex_unlock(&w->mu);
    return d;
}

void phx_work_free(phx_work *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    wait_locked(w, -1.0);
    pthread_mutex_unlock(&w->mu);
    px_work_put(w);
}

phx_status px_work_finish(phx_work *w)
{
    phx_status st = phx_work_wait(w, -1.0);
    pthread_mutex_lock(&w->mu);
    int done = w->done;
    if (!done) w->orphan = 1; /* the backend still holds it */
    pthread_mutex_unlock(&w->mu);
    if (done) px_work_put(w);
    return st;
}
