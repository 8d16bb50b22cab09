/* phx_store: the public calls, common to both backends (store-impl.h):
 * they check their arguments, resolve the timeout and dispatch through
 * the handle's table. Backends: store-local.c (in-process), store-tcp.c
 * (the client of the server in store-server.h). */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "src/world/store-impl.h"
#include "src/world/store-proto.h"
#include "src/base/util.h"

static phx_status check_key(const char *who, const char *key)
{
    if (!key) return phx_error(PHX_EINVAL, "%s: key is NULL", who);
    size_t n = strlen(key);
    if (n > PHX_STORE_MAX_KEY)
        return phx_error(PHX_EINVAL, "%s: key is %zu bytes long, at most %u allowed", who, n, PHX_STORE_MAX_KEY);
    return PHX_OK;
}

static phx_status check_value(const char *who, const void *v, size_t len)
{
    if (!v && len) return phx_error(PHX_EINVAL, "%s: value is NULL with length %zu", who, len);
    if (len > PHX_STORE_MAX_VALUE)
        return phx_error(PHX_EINVAL, "%s: value is %zu bytes long, at most %u allowed", who, len, PHX_STORE_MAX_VALUE);
    return PHX_OK;
}

/* The timeout of a waiting call: its own, else the handle's. */
void px_store_set_host(phx_store *s, const char *who)
{
    if (s) snprintf(s->host_of, sizeof s->host_of, " (%s)", who);
}

static double wait_timeout(const phx_store *s, double timeout_s)
{
    return timeout_s > 0 ? px_timeout(timeout_s) : s->timeout_s;
}

void *px_store_dup_value(const void *v, size_t len)
{
    uint8_t *d = px_malloc(len + 1);
    if (!d) return NULL;
    if (len) memcpy(d, v, len);
    d[len] = 0;
    return d;
}

size_t px_store_wait_size(const char *const *keys, size_t n)
{
    size_t total = 12; /* timeout (8), key count (4) */
    for (size_t i = 0; i < n; i++) total += 4 + strlen(keys[i]);
    return total;
}

phx_status px_store_not_set(const char *who, const char *key, double t)
{
    return phx_error(PHX_ETIMEOUT, "%s: key '%s' not set after %.3g s", who, key, t);
}

phx_status px_store_not_int(const char *who, const char *key)
{
    return phx_error(PHX_EINVAL, "%s: key '%s' holds a value that is not a decimal integer", who, key);
}

/* ------------------------------------------------------------- handles */

phx_status phx_store_clone(phx_store *s, phx_store **out)
{
    if (!s || !out) return phx_error(PHX_EINVAL, "phx_store_clone: %s is NULL", s ? "out" : "store");
    return s->ops->clone(s, out);
}

void phx_store_free(phx_store *s)
{
    if (s) s->ops->free(s);
}

int phx_store_port(const phx_store *s)
{
    return s ? s->ops->port(s) : -1;
}

int phx_store_is_local(const phx_store *s)
{
    return s && s->ops->in_process;
}

phx_status phx_store_local_addr(const phx_store *s, char *buf, size_t len)
{
    if (!s || !buf || !len) return phx_error(PHX_EINVAL, "phx_store_local_addr: NULL argument");
    return s->ops->local_addr(s, buf, len);
}

/* ---------------------------------------------------------- operations */

phx_status phx_store_set(phx_store *s, const char *key, const void *value, size_t len)
{
    static const char who[] = "phx_store_set";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key)) || (st = check_value(who, value, len))) return st;
    return s->ops->set(s, who, key, strlen(key), value, len);
}

phx_status phx_store_get(phx_store *s, const char *key, void **value, size_t *len, double timeout_s)
{
    static const char who[] = "phx_store_get";
    phx_status st;
    if (!s || !value || !len) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    if ((st = check_key(who, key))) return st;
    return s->ops->get(s, who, key, strlen(key), wait_timeout(s, timeout_s), value, len);
}

phx_status phx_store_add(phx_store *s, const char *key, int64_t delta, int64_t *result)
{
    static const char who[] = "phx_store_add";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key))) return st;
    return s->ops->add(s, who, key, strlen(key), delta, result);
}

phx_status phx_store_wait(phx_store *s, const char *const *keys, size_t n, double timeout_s)
{
    static const char who[] = "phx_store_wait";
    phx_status st;
    if (!s || (!keys && n)) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    for (size_t i = 0; i < n; i++)
        if ((st = check_key(who, keys[i]))) return st;
    size_t total = px_store_wait_size(keys, n);
    if (total > PX_STORE_MAX_WAIT_BODY)
        return phx_error(PHX_EINVAL, "%s: %zu keys take %zu bytes, at most %u allowed in one wait", who, n, total,
                         PX_STORE_MAX_WAIT_BODY);
    return s->ops->wait(s, who, keys, n, wait_timeout(s, timeout_s));
}

phx_status phx_store_compare_set(phx_store *s, const char *key, const void *expected, size_t elen, const void *desired,
                                 size_t dlen, void **actual, size_t *alen)
{
    static const char who[] = "phx_store_compare_set";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key)) || (st = check_value(who, expected, elen)) || (st = check_value(who, desired, dlen)))
        return st;
    uint8_t *now = NULL;
    size_t nlen = 0;
    st = s->ops->compare_set(s, who, key, strlen(key), expected, elen, desired, dlen, actual != NULL, &now, &nlen);
    if (st == PHX_OK && actual) {
        *actual = now;
        if (alen) *alen = nlen;
    } else {
        px_free(now);
        if (st == PHX_OK && alen) *alen = nlen;
    }
    return st;
}

phx_status phx_store_delete(phx_store *s, const char *key, int *deleted)
{
    static const char who[] = "phx_store_delete";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key))) return st;
    return s->ops->del(s, who, key, strlen(key), deleted);
}

phx_status phx_store_num_keys(phx_store *s, int64_t *count)
{
    static const char who[] = "phx_store_num_keys";
    if (!s || !count) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    return s->ops->num_keys(s, who, count);
}
