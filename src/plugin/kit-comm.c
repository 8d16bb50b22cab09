/* The kit's communicator (phalanx/plugin/kit.h): the five collective
 * slots queue a phx_kit_op, the queue's thread runs it through the
 * plugin's run function, and the failure protocol turns a failed run into
 * a message that names the op, the peer and the root cause. A monitor
 * thread runs the stall check: an op that has not completed after
 * check_s publishes this rank's record of what it issued and compares the
 * other ranks' records, so ranks out of step are named within about a
 * second, without waiting for PHX_TIMEOUT. */
#include "config.h"
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "phalanx/log.h"
#include "src/plugin/kit-impl.h"

#define KIT_MSG 1024
#define KIT_REPORTED "another rank reported a failure: "
#define KIT_HIST 64 /* ops a record holds */
#define KIT_TEXT 160 /* one op's text */
#define KIT_REC_MAX (KIT_HIST * (KIT_TEXT + 24) + 64) /* a record's bytes */
#define KIT_CHECK_MS 1000 /* PHX_DESYNC_CHECK_MS default */
#define KIT_POLL_S 0.1 /* the stalled op's polls of the others' records */
#define KIT_IDLE_S 0.25 /* the monitor's nap while no op runs */

struct phx_kit_comm {
    phx_kit_queue *queue;
    phx_kit_op_fn run;
    void *ctx;
    char name[32];
    int rank, size;
    double timeout_s;
    phx_store *store;
    char prefix[128]; /* this plugin's keys: <comm prefix><name>/ */
    char issued[144]; /* <prefix>issued/ */
    size_t inline_max;
    /* the run's thread only */
    uint64_t seq; /* ops run */
    int peer, desync; /* phx_kit_comm_peer, during a run */
    char broken[KIT_MSG]; /* the first failure */
    /* under mu, for watchdogs */
    pthread_mutex_t mu;
    int running;
    phx_kit_op cur;
    uint64_t cur_seq, published_seq;
    struct timespec since;
    phx_kit_op hist[KIT_HIST]; /* op #s at hist[s % KIT_HIST] */
    uint64_t nissued; /* ops started */
    int desync_set; /* phx_kit_comm_desync: op desync_seq fails */
    uint64_t desync_seq;
    char desync_why[KIT_MSG];
    /* the stall check */
    double check_s; /* 0: off */
    int own_exchange; /* phx_kit_comm_set_exchange */
    phx_kit_abort_fn abort_fn;
    pthread_cond_t cv; /* the monitor's nap */
    int stop, monitor_on;
    pthread_t monitor;
};

static double since_s(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + 1e-9 * (double)(now.tv_nsec - t->tv_nsec);
}

/* ---- blame: who waited for whom */

/* After a timeout waiting for peer: this rank publishes whom it waited
 * for. Sends are often eager, so in a ring a rank behind a stopped one
 * times out waiting for an innocent peer that itself waits for the
 * stopped one; blame_chain follows the published waits. */
static void publish_waited(phx_kit_comm *kc, int peer)
{
    char key[192], v[16];
    snprintf(key, sizeof key, "%swaited/%d", kc->prefix, kc->rank);
    snprintf(v, sizeof v, "%d", peer);
    phx_store_set(kc->store, key, v, strlen(v));
}

/* The end of the chain of waits that starts at peer: the first rank that
 * published no wait (stopped, dead, or busy elsewhere), or the last one
 * before the chain comes back to a rank already on it. Runs after the
 * desync check has given the ranks that time out together time to
 * publish, so each look-up waits only a millisecond. via gets the ranks
 * passed ("; rank 0, which this rank waited for, timed out waiting for
 * rank 2"), or why the chain cannot be followed when the store itself
 * does not answer (its host stopped: rank 0 for the TCP store). */
static int blame_chain(phx_kit_comm *kc, int peer, char *via, size_t len)
{
    via[0] = '\0';
    if (kc->size < 3) return peer;
    char *seen = calloc((size_t)kc->size, 1);
    if (!seen) return peer;
    seen[kc->rank] = 1;
    int q = peer;
    while (q >= 0 && q < kc->size && !seen[q]) {
        char key[192];
        void *v = NULL;
        size_t n = 0;
        seen[q] = 1;
        snprintf(key, sizeof key, "%swaited/%d", kc->prefix, q);
        phx_status st = phx_store_get(kc->store, key, &v, &n, 1e-3);
        if (st != PHX_OK && st != PHX_ETIMEOUT && st != PHX_ENOTFOUND) {
            size_t used = strlen(via);
            snprintf(via + used, len - used, "; the job's store does not answer either (%s)", phx_last_error());
        }
        if (st) break;
        char t[16];
        snprintf(t, sizeof t, "%.*s", (int)n, (const char *)v);
        free(v);
        int next = atoi(t);
        if (next < 0 || next >= kc->size || seen[next]) break;
        size_t used = strlen(via);
        snprintf(via + used, len - used, "; rank %d%s timed out waiting for rank %d", q,
                 q == peer ? ", which this rank waited for," : ",", next);
        q = next;
    }
    free(seen);
    return q;
}

/* ---- the stall check: what each rank issued */

size_t phx_kit_comm_record(phx_kit_comm *kc, char *buf, size_t len)
{
    if (!len) return 0;
    phx_kit_op hist[KIT_HIST];
    pthread_mutex_lock(&kc->mu);
    uint64_t n = kc->nissued, lo = n > KIT_HIST ? n - KIT_HIST : 0;
    int running = kc->running;
    memcpy(hist, kc->hist, sizeof hist);
    pthread_mutex_unlock(&kc->mu);
    int w = snprintf(buf, len, "phx-kit-record %d %" PRIu64 " %d\n", kc->rank, n, running);
    size_t used = w < 0 ? 0 : (size_t)w < len ? (size_t)w : len - 1;
    for (uint64_t q = lo; q < n && used + KIT_TEXT + 24 < len; q++) {
        char text[KIT_TEXT];
        w = snprintf(buf + used, len - used, "%" PRIu64 " %s\n", q,
                     phx_kit_op_text(&hist[q % KIT_HIST], text, sizeof text));
        if (w > 0) used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    return used;
}

int phx_kit_comm_compare(phx_kit_comm *kc, int peer, const char *record, char *msg, size_t len)
{
    char *mine = malloc(KIT_REC_MAX);
    if (!mine) return 0;
    phx_kit_comm_record(kc, mine, KIT_REC_MAX);
    int differ = phx_kit_record_compare(kc->rank, mine, peer, record, msg, len);
    free(mine);
    return differ;
}

/* Publishes this rank's record (when publish) and compares the other
 * ranks' published ones with it, if the count of publications (*gen)
 * moved. 1 with msg when a rank differs. */
static int records_differ(phx_kit_comm *kc, int publish, int64_t *gen, char *msg, size_t len)
{
    pthread_mutex_lock(&kc->mu);
    int own = kc->own_exchange;
    pthread_mutex_unlock(&kc->mu);
    if (!kc->store || own || kc->size < 2) return 0;
    char *mine = malloc(KIT_REC_MAX);
    if (!mine) return 0;
    phx_kit_comm_record(kc, mine, KIT_REC_MAX);
    int differ = phx_kit_record_exchange(kc->store, kc->prefix, kc->rank, kc->size, mine, publish, gen, msg, len);
    free(mine);
    return differ;
}

int phx_kit_comm_desync(phx_kit_comm *kc, const char *why, char *msg, size_t len)
{
    char full[KIT_MSG];
    pthread_mutex_lock(&kc->mu);
    if (kc->desync_set) {
        pthread_mutex_unlock(&kc->mu);
        return 0;
    }
    int running = kc->running;
    kc->desync_set = 1;
    kc->desync_seq = running ? kc->cur_seq : kc->nissued;
    snprintf(kc->desync_why, sizeof kc->desync_why, "%s", why);
    snprintf(full, sizeof full, "%s: rank %d: %s #%" PRIu64 " failed: %s", kc->name, kc->rank,
             running ? phx_kit_kind_name(kc->cur.kind) : "collective", kc->desync_seq, why);
    phx_kit_abort_fn abort_fn = kc->abort_fn;
    pthread_mutex_unlock(&kc->mu);
    if (msg && len) snprintf(msg, len, "%s", full);
    if (running) {
        if (abort_fn)
            abort_fn(kc->ctx, PHX_EDESYNC, full);
        else
            phx_kit_comm_expire(kc, PHX_EDESYNC, full);
    }
    /* the others' waits end too (a plugin's watchdog polls this) */
    phx_kit_comm_report(kc, full);
    return running;
}

/* The monitor: sleeps while ops complete; once the running op has run
 * check_s, publishes this rank's record and compares the others', then
 * polls them every KIT_POLL_S while the op stays stalled. */
static void *monitor_main(void *arg)
{
    phx_kit_comm *kc = arg;
    uint64_t checked = UINT64_MAX;
    int64_t gen = -1;
    pthread_mutex_lock(&kc->mu);
    while (!kc->stop) {
        double nap = KIT_IDLE_S;
        if (kc->running && !kc->desync_set && !kc->own_exchange) {
            double secs = since_s(&kc->since);
            if (secs < kc->check_s) {
                nap = kc->check_s - secs;
            } else {
                int first = kc->cur_seq != checked;
                checked = kc->cur_seq;
                pthread_mutex_unlock(&kc->mu);
                char d[KIT_MSG];
                if (records_differ(kc, first, &gen, d, sizeof d)) phx_kit_comm_desync(kc, d, NULL, 0);
                pthread_mutex_lock(&kc->mu);
                nap = KIT_POLL_S;
            }
        }
        if (kc->stop) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(nap * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&kc->cv, &kc->mu, &ts);
    }
    pthread_mutex_unlock(&kc->mu);
    return NULL;
}

/* PHX_DESYNC_CHECK_MS in seconds (0: off). */
static double check_seconds(const char *name)
{
    const char *v = getenv("PHX_DESYNC_CHECK_MS");
    if (!v || !*v) return KIT_CHECK_MS / 1000.0;
    char *end;
    long ms = strtol(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || ms < 0 || ms > 86400000L) {
        phx_log(PHX_LOG_WARN, "%s: PHX_DESYNC_CHECK_MS='%s' is not a number of milliseconds (0 to 86400000); using %d",
                name, v, KIT_CHECK_MS);
        return KIT_CHECK_MS / 1000.0;
    }
    return (double)ms / 1000.0;
}

/* ---- the failure protocol around one run */

static phx_status execute(phx_kit_comm *kc, const phx_kit_op *op, char *msg, size_t len)
{
    char head[128];
    uint64_t seq = kc->seq;
    snprintf(head, sizeof head, "%s: rank %d: %s #%llu", kc->name, kc->rank, phx_kit_kind_name(op->kind),
             (unsigned long long)seq);
    if (kc->broken[0]) {
        snprintf(msg, len, "%s not run: the communicator failed earlier (%s)", head, kc->broken);
        return PHX_EPEER;
    }
    kc->peer = -1;
    kc->desync = 0;
    char why[KIT_MSG];
    why[0] = '\0';
    pthread_mutex_lock(&kc->mu);
    if (kc->desync_set) { /* found by the stall check while no op ran */
        snprintf(msg, len, "%s failed: %s", head, kc->desync_why);
        pthread_mutex_unlock(&kc->mu);
        snprintf(kc->broken, sizeof kc->broken, "%s", msg);
        return PHX_EDESYNC;
    }
    kc->running = 1;
    kc->cur = *op;
    kc->cur_seq = seq;
    kc->hist[seq % KIT_HIST] = *op;
    kc->nissued = seq + 1;
    clock_gettime(CLOCK_MONOTONIC, &kc->since);
    pthread_mutex_unlock(&kc->mu);
    phx_status st = kc->run(kc->ctx, op, why, sizeof why);
    pthread_mutex_lock(&kc->mu);
    kc->running = 0;
    int desynced = kc->desync_set && kc->desync_seq == seq;
    if (desynced) snprintf(why, sizeof why, "%s", kc->desync_why);
    pthread_mutex_unlock(&kc->mu);
    kc->seq++;
    if (desynced) { /* the stall check ended the run */
        snprintf(msg, len, "%s failed: %s", head, why);
        snprintf(kc->broken, sizeof kc->broken, "%s", msg);
        return PHX_EDESYNC;
    }
    if (st == PHX_OK) return PHX_OK;
    why[sizeof why - 1] = '\0';
    if (!why[0]) snprintf(why, sizeof why, "%s", phx_last_error());
    int peer = kc->peer, timed_out = st == PHX_ETIMEOUT;
    if (timed_out && peer >= 0 && kc->store) publish_waited(kc, peer);
    if (st == PHX_ETIMEOUT || st == PHX_EPEER || st == PHX_EDESYNC) {
        /* the others' records, as this rank sees them: the first op
         * number at which two ranks differ, from this rank's side */
        char d[KIT_MSG];
        if (records_differ(kc, 1, NULL, d, sizeof d)) {
            snprintf(msg, len, "%s failed: %s", head, d);
            snprintf(kc->broken, sizeof kc->broken, "%s", msg);
            return PHX_EDESYNC;
        }
    }
    if (st == PHX_ETIMEOUT || st == PHX_EPEER) {
        /* the peers of a timeout or of a mismatched header fail at about
         * the same time and publish what they issued: wait for them */
        double wait = timed_out || kc->desync ? (kc->timeout_s < 1 ? kc->timeout_s : 1) : 1e-3;
        char text[160], d[KIT_MSG];
        phx_kit_op_text(op, text, sizeof text);
        if (phx_kit_issued_differ(kc->store, kc->issued, seq, kc->rank, kc->size, text, wait, d, sizeof d) ||
            (wait > 1e-3 && records_differ(kc, 0, NULL, d, sizeof d))) {
            snprintf(msg, len, "%s failed: %s", head, d);
            snprintf(kc->broken, sizeof kc->broken, "%s", msg);
            return PHX_EDESYNC;
        }
    }
    if (timed_out && peer >= 0 && kc->store) {
        char via[512];
        int end = blame_chain(kc, peer, via, sizeof via);
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "%s", via);
        peer = end;
    }
    char who[32] = "";
    if (peer >= 0) snprintf(who, sizeof who, " with peer rank %d", peer);
    snprintf(msg, len, "%s failed%s: %s", head, who, why);
    snprintf(kc->broken, sizeof kc->broken, "%s", msg);
    if (st == PHX_EPEER && strncmp(why, KIT_REPORTED, strlen(KIT_REPORTED)) != 0) phx_kit_comm_report(kc, msg);
    return st;
}

static phx_status run_job(void *ctx, const void *job, char *msg, size_t len)
{
    return execute(ctx, job, msg, len);
}

/* ---- life */

phx_status phx_kit_comm_new(const phx_comm_init_args *a, const char *name, phx_kit_op_fn run, void *ctx,
                            phx_kit_comm **out)
{
    if (!a || !run || !out)
        return phx_error(PHX_EINVAL, "phx_kit_comm_new: %s is NULL", !a ? "args" : !run ? "run" : "out");
    phx_kit_comm *kc = calloc(1, sizeof *kc);
    if (!kc) return phx_error(PHX_ENOMEM, "%s: out of memory for the kit's communicator", name ? name : "kit");
    kc->run = run;
    kc->ctx = ctx;
    snprintf(kc->name, sizeof kc->name, "%s", name ? name : "kit");
    kc->rank = a->rank;
    kc->size = a->size;
    kc->timeout_s = a->timeout_s;
    kc->store = a->store;
    snprintf(kc->prefix, sizeof kc->prefix, "%s%s/", a->prefix ? a->prefix : "", kc->name);
    snprintf(kc->issued, sizeof kc->issued, "%sissued/", kc->prefix);
    kc->published_seq = UINT64_MAX;
    kc->check_s = check_seconds(kc->name);
    pthread_mutex_init(&kc->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&kc->cv, &ca);
    pthread_condattr_destroy(&ca);
    phx_status st = phx_kit_queue_new(sizeof(phx_kit_op), run_job, kc, kc->name, &kc->queue);
    if (!st && kc->check_s > 0 && kc->store && kc->size > 1) {
        if (pthread_create(&kc->monitor, NULL, monitor_main, kc)) {
            phx_kit_queue_free(kc->queue);
            st = phx_error(PHX_EIO, "%s: cannot start the kit's stall-check thread", kc->name);
        } else {
            kc->monitor_on = 1;
        }
    }
    if (st) {
        pthread_cond_destroy(&kc->cv);
        pthread_mutex_destroy(&kc->mu);
        free(kc);
        return st;
    }
    *out = kc;
    return PHX_OK;
}

void *phx_kit_comm_ctx(const phx_kit_comm *kc)
{
    return kc ? kc->ctx : NULL;
}

void phx_kit_comm_set_inline(phx_kit_comm *kc, size_t bytes)
{
    if (kc) kc->inline_max = bytes;
}

void phx_kit_comm_drain(phx_kit_comm *kc)
{
    if (!kc) return;
    phx_kit_queue_free(kc->queue); /* runs what is queued first */
    kc->queue = NULL;
}

void phx_kit_comm_free(phx_kit_comm *kc)
{
    if (!kc) return;
    phx_kit_comm_drain(kc);
    if (kc->monitor_on) {
        pthread_mutex_lock(&kc->mu);
        kc->stop = 1;
        pthread_cond_broadcast(&kc->cv);
        pthread_mutex_unlock(&kc->mu);
        pthread_join(kc->monitor, NULL);
    }
    pthread_cond_destroy(&kc->cv);
    pthread_mutex_destroy(&kc->mu);
    free(kc);
}

double phx_kit_comm_check_s(const phx_kit_comm *kc)
{
    return kc ? kc->check_s : check_seconds("kit");
}

void phx_kit_comm_set_abort(phx_kit_comm *kc, phx_kit_abort_fn abort_fn)
{
    if (!kc) return;
    pthread_mutex_lock(&kc->mu);
    kc->abort_fn = abort_fn;
    pthread_mutex_unlock(&kc->mu);
}

void phx_kit_comm_set_exchange(phx_kit_comm *kc, int own)
{
    if (!kc) return;
    pthread_mutex_lock(&kc->mu);
    kc->own_exchange = own != 0;
    pthread_mutex_unlock(&kc->mu);
}

/* ---- for run and the plugin's watchdog */

void phx_kit_comm_peer(phx_kit_comm *kc, int peer, int desync)
{
    kc->peer = peer;
    kc->desync = desync;
}

int phx_kit_comm_running(phx_kit_comm *kc, phx_kit_op *op, uint64_t *seq, double *secs)
{
    pthread_mutex_lock(&kc->mu);
    int running = kc->running;
    if (running) {
        if (op) *op = kc->cur;
        if (seq) *seq = kc->cur_seq;
        if (secs) *secs = since_s(&kc->since);
    }
    pthread_mutex_unlock(&kc->mu);
    return running;
}

void phx_kit_comm_publish_running(phx_kit_comm *kc)
{
    phx_kit_op op;
    uint64_t seq;
    if (!kc->store || !phx_kit_comm_running(kc, &op, &seq, NULL)) return;
    pthread_mutex_lock(&kc->mu);
    int done = kc->published_seq == seq;
    kc->published_seq = seq;
    pthread_mutex_unlock(&kc->mu);
    if (done) return;
    char text[160];
    phx_kit_issued_set(kc->store, kc->issued, seq, kc->rank, phx_kit_op_text(&op, text, sizeof text));
}

int phx_kit_comm_failure(phx_kit_comm *kc, char *why, size_t why_len)
{
    if (!kc->store) return 0;
    if (phx_kit_aborted(kc->store, why, why_len)) return 1;
    char key[192];
    void *v = NULL;
    size_t n = 0;
    snprintf(key, sizeof key, "%sfailed", kc->prefix);
    phx_status st = phx_store_get(kc->store, key, &v, &n, 1e-6);
    if (st == PHX_OK) {
        snprintf(why, why_len, "%.*s", (int)n, (const char *)v);
        free(v);
        return 1;
    }
    if (st != PHX_ETIMEOUT && st != PHX_ENOTFOUND) {
        snprintf(why, why_len, "the job's store cannot be reached (%s)", phx_last_error());
        return 1;
    }
    return 0;
}

void phx_kit_comm_report(phx_kit_comm *kc, const char *msg)
{
    if (!kc->store) return;
    char key[192];
    snprintf(key, sizeof key, "%sfailed", kc->prefix);
    phx_store_compare_set(kc->store, key, NULL, 0, msg, strlen(msg), NULL, NULL);
}

int phx_kit_comm_expire(phx_kit_comm *kc, phx_status st, const char *msg)
{
    return kc && kc->queue ? phx_kit_queue_expire(kc->queue, st, msg) : 0;
}

phx_status px_kit_comm_push(phx_kit_comm *kc, const phx_kit_op *op, phx_work *work)
{
    if (op->kind == PHX_KIT_ALLREDUCE && (size_t)op->count * phx_dtype_size(op->dt) <= kc->inline_max)
        return phx_kit_queue_push_inline(kc->queue, op, work);
    return phx_kit_queue_push(kc->queue, op, work);
}
