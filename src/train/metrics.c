/* JSON Lines metrics (include/phalanx/metrics.h). A record is formatted
 * into a fixed buffer inside the handle and written with one write(2):
 * logging allocates nothing after open, and a line is never split. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/base/util.h"
#include "phalanx/metrics.h"

#define RECORD_MAX 4096
#define KEY_MAX 64
#define KEYS_MAX 64

struct phx_metrics {
    int fd; /* -1: a handle that writes nothing */
    char *path;
    double t0; /* px_now() at open */
    int open_record; /* begin called, end not yet */
    size_t len; /* bytes of buf in use */
    int nkeys;
    size_t key_at[KEYS_MAX]; /* offsets of the keys in buf, for the duplicate check */
    char buf[RECORD_MAX + 2];
};

phx_metrics *phx_metrics_open(const char *path, int rank)
{
    phx_metrics *m = px_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->fd = -1;
    m->t0 = px_now();
    if (!path || rank != 0) return m;
    m->path = px_strdup(path);
    if (!m->path) {
        px_free(m);
        return NULL;
    }
    m->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (m->fd < 0) {
        phx_error(PHX_EIO, "phx_metrics_open: cannot open '%s' for appending: %s", path, strerror(errno));
        px_free(m->path);
        px_free(m);
        return NULL;
    }
    return m;
}

void phx_metrics_close(phx_metrics *m)
{
    if (!m) return;
    if (m->fd >= 0) close(m->fd);
    px_free(m->path);
    px_free(m);
}

phx_status phx_metrics_begin(phx_metrics *m)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_metrics_begin: metrics is NULL");
    m->open_record = 1;
    m->nkeys = 0;
    m->len = (size_t)snprintf(m->buf, sizeof m->buf, "{\"time\":%.3f", px_now() - m->t0);
    return PHX_OK;
}

static int key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > KEY_MAX || (k[0] >= '0' && k[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return 0;
    }
    return 1;
}

/* Drops the record under way and reports why. */
static phx_status drop(phx_metrics *m, const char *fn, const char *why, const char *key)
{
    m->open_record = 0;
    return phx_error(PHX_EINVAL, "%s: %s '%s' (the record is dropped)", fn, why, key ? key : "(null)");
}

/* Appends ,"key": after checking the key; the caller appends the value. */
static phx_status add_key(phx_metrics *m, const char *fn, const char *key)
{
    if (!m) return phx_error(PHX_EINVAL, "%s: metrics is NULL", fn);
    if (!m->open_record) return phx_error(PHX_EINVAL, "%s: no record begun (call phx_metrics_begin first)", fn);
    if (!key || !key_ok(key))
        return drop(m, fn, "key must be 1-64 letters, digits, '_', '.' or '-', not starting with a digit:", key);
    if (strcmp(key, "time") == 0) return drop(m, fn, "key is the library's own:", key);
    size_t kn = strlen(key);
    for (int i = 0; i < m->nkeys; i++) {
        const char *k = m->buf + m->key_at[i];
        if (strncmp(k, key, kn) == 0 && k[kn] == '"') return drop(m, fn, "key repeated in one record:", key);
    }
    if (m->nkeys == KEYS_MAX) return drop(m, fn, "more than 64 keys in one record at", key);
    if (m->len + kn + 4 > RECORD_MAX) return drop(m, fn, "record longer than 4096 bytes at", key);
    m->buf[m->len++] = ',';
    m->buf[m->len++] = '"';
    m->key_at[m->nkeys++] = m->len;
    memcpy(m->buf + m->len, key, kn);
    m->len += kn;
    m->buf[m->len++] = '"';
    m->buf[m->len++] = ':';
    return PHX_OK;
}

/* Appends printf output to the record, or drops it when it does not fit. */
static phx_status put(phx_metrics *m, const char *fn, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static phx_status put(phx_metrics *m, const char *fn, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(m->buf + m->len, RECORD_MAX - m->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= RECORD_MAX - m->len) return drop(m, fn, "record longer than 4096 bytes at", key);
    m->len += (size_t)n;
    return PHX_OK;
}

phx_status phx_metrics_add_i64(phx_metrics *m, const char *key, int64_t value)
{
    phx_status st = add_key(m, "phx_metrics_add_i64", key);
    if (st != PHX_OK) return st;
    return put(m, "phx_metrics_add_i64", key, "%" PRId64, value);
}

phx_status phx_metrics_add_f64(phx_metrics *m, const char *key, double value)
{
    phx_status st = add_key(m, "phx_metrics_add_f64", key);
    if (st != PHX_OK) return st;
    if (!isfinite(value)) return put(m, "phx_metrics_add_f64", key, "null");
    return put(m, "phx_metrics_add_f64", key, "%.9g", value);
}

phx_status phx_metrics_add_str(phx_metrics *m, const char *key, const char *value)
{
    static const char *fn = "phx_metrics_add_str";
    phx_status st = add_key(m, fn, key);
    if (st != PHX_OK) return st;
    if (!value) return put(m, fn, key, "null");
    st = put(m, fn, key, "\"");
    for (const unsigned char *p = (const unsigned char *)value; st == PHX_OK && *p; p++) {
        if (*p == '"' || *p == '\\')
            st = put(m, fn, key, "\\%c", *p);
        else if (*p < 0x20)
            st = put(m, fn, key, "\\u%04x", *p);
        else
            st = put(m, fn, key, "%c", *p);
    }
    return st == PHX_OK ? put(m, fn, key, "\"") : st;
}

phx_status phx_metrics_end(phx_metrics *m)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_metrics_end: metrics is NULL");
    if (!m->open_record)
        return phx_error(PHX_EINVAL, "phx_metrics_end: no record begun (call phx_metrics_begin first)");
    m->open_record = 0;
    m->buf[m->len++] = '}';
    m->buf[m->len++] = '\n';
    if (m->fd < 0) return PHX_OK;
    ssize_t n = write(m->fd, m->buf, m->len);
    if (n != (ssize_t)m->len)
        return phx_error(PHX_EIO, "phx_metrics_end: writing '%s': %s", m->path,
                         n < 0 ? strerror(errno) : "short write (disk full?)");
    return PHX_OK;
}
