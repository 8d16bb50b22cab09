/* The in-process store (phx_store_new_local): a key-value table under a
 * lock, with a condition variable broadcast on every change for the
 * calls that wait. Its clones share the table (reference-counted). */
#include "config.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include "src/world/store-impl.h"
#include "src/world/store-proto.h"
#include "src/base/util.h"

typedef struct px_local {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on every change */
    px_kv *kv;
} px_local;

typedef struct local_store {
    phx_store base;
    px_local *l; /* shared with the clones */
} local_store;

static const px_store_ops local_ops;

static px_local *table_of(phx_store *s)
{
    return ((local_store *)s)->l;
}

static local_store *handle_new(px_local *l, double timeout_s)
{
    local_store *h = px_calloc(1, sizeof *h);
    if (!h) return NULL;
    h->base.ops = &local_ops;
    h->base.timeout_s = timeout_s;
    h->l = l;
    return h;
}

phx_store *phx_store_new_local(void)
{
    px_local *l = px_calloc(1, sizeof *l);
    local_store *h = l ? handle_new(l, px_env_timeout()) : NULL;
    if (!h || !(l->kv = px_kv_new())) {
        px_free(h);
        px_free(l);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    return &h->base;
}

static phx_status local_clone(phx_store *s, phx_store **out)
{
    px_local *l = table_of(s);
    local_store *c = handle_new(l, s->timeout_s);
    if (!c) return PHX_ENOMEM;
    atomic_fetch_add(&l->refs, 1);
    *out = &c->base;
    return PHX_OK;
}

static void local_free(phx_store *s)
{
    px_local *l = table_of(s);
    if (atomic_fetch_sub(&l->refs, 1) == 1) {
        px_kv_free(l->kv);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        px_free(l);
    }
    px_free(s);
}

static int local_port(const phx_store *s)
{
    (void)s;
    return -1;
}

static phx_status local_addr(const phx_store *s, char *buf, size_t len)
{
    (void)s, (void)buf, (void)len;
    return phx_error(PHX_EUNSUPPORTED, "phx_store_local_addr: an in-process store has no network address");
}

/* Waits (mu held) until every key exists or the deadline; returns the
 * index of the first missing key, or n when all exist. */
static size_t wait_keys(px_local *l, const char *const *keys, size_t n, double deadline)
{
    for (;;) {
        size_t i, vl;
        for (i = 0; i < n; i++)
            if (!px_kv_get(l->kv, keys[i], strlen(keys[i]), &vl)) break;
        if (i == n) return n;
        double now = px_now();
        if (now >= deadline) return i;
        double left = deadline - now;
        if (left > 1.0) left = 1.0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(left * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
}

static phx_status local_set(phx_store *s, const char *who, const char *key, size_t kl, const void *value, size_t len)
{
    (void)who;
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    phx_status st = px_kv_set(l->kv, key, kl, value, len);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return st;
}

static phx_status local_get(phx_store *s, const char *who, const char *key, size_t kl, double t, void **value,
                            size_t *len)
{
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    size_t vl;
    const uint8_t *v = NULL;
    if (wait_keys(l, &key, 1, px_now() + t) == 1) v = px_kv_get(l->kv, key, kl, &vl);
    void *copy = v ? px_store_dup_value(v, vl) : NULL;
    pthread_mutex_unlock(&l->mu);
    if (!v) return px_store_not_set(who, key, t);
    if (!copy) return PHX_ENOMEM;
    *value = copy;
    *len = vl;
    return PHX_OK;
}

static phx_status local_add(phx_store *s, const char *who, const char *key, size_t kl, int64_t delta, int64_t *result)
{
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    phx_status st = px_kv_add(l->kv, key, kl, delta, result);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (st == PHX_EINVAL) return px_store_not_int(who, key);
    return st;
}

static phx_status local_wait(phx_store *s, const char *who, const char *const *keys, size_t n, double t)
{
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    size_t miss = wait_keys(l, keys, n, px_now() + t);
    pthread_mutex_unlock(&l->mu);
    if (miss < n) return px_store_not_set(who, keys[miss], t);
    return PHX_OK;
}

static phx_status local_compare_set(phx_store *s, const char *who, const char *key, size_t kl, const void *expected,
                                    size_t elen, const void *desired, size_t dlen, int want, uint8_t **now,
                                    size_t *nlen)
{
    (void)who;
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    phx_status st = px_kv_cas(l->kv, key, kl, expected, elen, desired, dlen, NULL);
    pthread_cond_broadcast(&l->cv);
    const uint8_t *v = px_kv_get(l->kv, key, kl, nlen);
    if (st == PHX_OK && want && !(*now = px_store_dup_value(v ? v : (const uint8_t *)"", v ? *nlen : 0)))
        st = PHX_ENOMEM;
    if (!v) *nlen = 0;
    pthread_mutex_unlock(&l->mu);
    return st;
}

static phx_status local_delete(phx_store *s, const char *who, const char *key, size_t kl, int *deleted)
{
    (void)who;
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    int d = px_kv_delete(l->kv, key, kl);
    pthread_mutex_unlock(&l->mu);
    if (deleted) *deleted = d;
    return PHX_OK;
}

static phx_status local_num_keys(phx_store *s, const char *who, int64_t *count)
{
    (void)who;
    px_local *l = table_of(s);
    pthread_mutex_lock(&l->mu);
    *count = px_kv_count(l->kv);
    pthread_mutex_unlock(&l->mu);
    return PHX_OK;
}

static const px_store_ops local_ops = {
    .in_process = 1,
    .set = local_set,
    .get = local_get,
    .add = local_add,
    .wait = local_wait,
    .compare_set = local_compare_set,
    .del = local_delete,
    .num_keys = local_num_keys,
    .clone = local_clone,
    .free = local_free,
    .port = local_port,
    .local_addr = local_addr,
};
