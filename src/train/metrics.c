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
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/base/util.h"
#include "src/train/metrics-impl.h"
#include "src/train/tensorboard.h"
#include "phalanx/log.h"
#include "phalanx/metrics.h"

#define RECORD_MAX 4096
#define KEY_MAX 64
#define KEYS_MAX 64

struct phx_metrics {
    int fd; /* -1: a handle that writes nothing */
    char *path;
    double t0; /* px_now() at open */
    double t_base; /* the time of the file's last record at open (0: a new file) */
    int rank; /* only rank 0 writes */
    px_tb *tb; /* NULL: no TensorBoard events */
    int64_t step; /* the last record's "step" (for TensorBoard) */
    int nnum; /* numeric keys of the record under way */
    int num_key[KEYS_MAX]; /* their indices in key_at */
    float num[KEYS_MAX]; /* their values */
    int open_record; /* begin called, end not yet */
    size_t len; /* bytes of buf in use */
    int nkeys;
    size_t key_at[KEYS_MAX]; /* offsets of the keys in buf, for the duplicate check */
    char buf[RECORD_MAX + 2];
};

/* The "time" of the file's last record, so appending after a restart
 * continues the time axis; 0 for a new or unreadable file. Lines are
 * written whole (one write each), so the last line is a record unless
 * another writer wrote something else there. */
static double last_time(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 2) return 0;
    char tail[RECORD_MAX + 4];
    size_t n = sb.st_size < (off_t)(sizeof tail - 1) ? (size_t)sb.st_size : sizeof tail - 1;
    ssize_t got = pread(fd, tail, n, sb.st_size - (off_t)n);
    if (got != (ssize_t)n) return 0;
    tail[n] = '\0';
    size_t end = n;
    while (end > 0 && tail[end - 1] == '\n') end--;
    size_t start = end;
    while (start > 0 && tail[start - 1] != '\n') start--;
    static const char pre[] = "{\"time\":";
    if (end - start < sizeof pre || strncmp(tail + start, pre, sizeof pre - 1) != 0) return 0;
    char *stop;
    double t = strtod(tail + start + sizeof pre - 1, &stop);
    return stop != tail + start + sizeof pre - 1 && isfinite(t) && t > 0 ? t : 0;
}

phx_metrics *phx_metrics_open(const char *path, int rank)
{
    phx_metrics *m = px_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->fd = -1;
    m->t0 = px_now();
    m->rank = rank;
    if (!path || rank != 0) return m;
    m->path = px_strdup(path);
    if (!m->path) {
        px_free(m);
        return NULL;
    }
    m->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (m->fd < 0) m->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (m->fd < 0) {
        phx_error(PHX_EIO, "phx_metrics_open: cannot open '%s' for appending: %s", path, strerror(errno));
        px_free(m->path);
        px_free(m);
        return NULL;
    }
    m->t_base = last_time(m->fd);
    /* a record cut off (a crash mid-write by an older writer): the next
     * one starts on a line of its own, not glued onto it */
    struct stat sb;
    char last = '\n';
    flock(m->fd, LOCK_EX); /* one opener adds the newline, not each (px_append_record unlocks) */
    if (fstat(m->fd, &sb) == 0 && sb.st_size > 0 && pread(m->fd, &last, 1, sb.st_size - 1) == 1 && last != '\n') {
        phx_log(PHX_LOG_WARN, "phx_metrics_open: '%s' ends in an incomplete line; new records start on the next line",
                path);
        if (px_append_record(m->fd, "\n", 1, "phx_metrics_open", path) != PHX_OK) {
            close(m->fd);
            px_free(m->path);
            px_free(m);
            return NULL;
        }
    }
    flock(m->fd, LOCK_UN);
    return m;
}

phx_status phx_metrics_tensorboard(phx_metrics *m, const char *dir)
{
    static const char *fn = "phx_metrics_tensorboard";
    if (!m) return phx_error(PHX_EINVAL, "%s: metrics is NULL", fn);
    if (!dir || !*dir) return phx_error(PHX_EINVAL, "%s: directory is NULL or empty", fn);
    if (m->tb) return phx_error(PHX_EINVAL, "%s: already writing '%s'", fn, px_tb_path(m->tb));
    if (m->rank != 0) return PHX_OK;
    return px_tb_open(dir, fn, &m->tb);
}

const char *phx_metrics_tensorboard_file(const phx_metrics *m)
{
    return m ? px_tb_path(m->tb) : NULL;
}

void phx_metrics_close(phx_metrics *m)
{
    if (!m) return;
    if (m->fd >= 0) close(m->fd);
    px_tb_close(m->tb);
    px_free(m->path);
    px_free(m);
}

phx_status phx_metrics_begin(phx_metrics *m)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_metrics_begin: metrics is NULL");
    m->open_record = 1;
    m->nkeys = 0;
    m->nnum = 0;
    m->len = (size_t)snprintf(m->buf, sizeof m->buf, "{\"time\":%.3f", m->t_base + (px_now() - m->t0));
    return PHX_OK;
}

int px_metrics_key_ok(const char *k)
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
    if (!key || !px_metrics_key_ok(key))
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

/* Keeps the number just keyed for the TensorBoard event. */
static void number(phx_metrics *m, double value)
{
    m->num_key[m->nnum] = m->nkeys - 1;
    m->num[m->nnum++] = (float)value;
}

phx_status phx_metrics_add_i64(phx_metrics *m, const char *key, int64_t value)
{
    phx_status st = add_key(m, "phx_metrics_add_i64", key);
    if (st != PHX_OK) return st;
    if (strcmp(key, "step") == 0) {
        m->step = value;
    } else {
        number(m, (double)value);
    }
    return put(m, "phx_metrics_add_i64", key, "%" PRId64, value);
}

phx_status phx_metrics_add_f64(phx_metrics *m, const char *key, double value)
{
    phx_status st = add_key(m, "phx_metrics_add_f64", key);
    if (st != PHX_OK) return st;
    number(m, value);
    if (!isfinite(value)) return put(m, "phx_metrics_add_f64", key, "null");
    return put(m, "phx_metrics_add_f64", key, "%.9g", value);
}

/* Appends value as a JSON string (null for NULL). */
static phx_status put_string(phx_metrics *m, const char *fn, const char *key, const char *value)
{
    if (!value) return put(m, fn, key, "null");
    /* JSON is UTF-8: a Latin-1 name would make the whole file unreadable */
    if (!px_utf8_valid(value)) return drop(m, fn, "value is not valid UTF-8, for key", key);
    phx_status st = put(m, fn, key, "\"");
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

phx_status phx_metrics_add_str(phx_metrics *m, const char *key, const char *value)
{
    static const char *fn = "phx_metrics_add_str";
    phx_status st = add_key(m, fn, key);
    if (st != PHX_OK) return st;
    return put_string(m, fn, key, value);
}

/* Writes the record in buf (len bytes, a line) to the file. */
static phx_status write_line(phx_metrics *m, const char *fn)
{
    if (m->fd < 0) return PHX_OK;
    return px_append_record(m->fd, m->buf, m->len, fn, m->path);
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

phx_status phx_metrics_hparams(phx_metrics *m, const phx_hparam *hp, int n)
{
    static const char *fn = "phx_metrics_hparams";
    if (!m) return phx_error(PHX_EINVAL, "%s: metrics is NULL", fn);
    if (n < 1 || n > KEYS_MAX || !hp)
        return phx_error(PHX_EINVAL, "%s: %d hyperparameters%s: expected 1-%d", fn, n, hp ? "" : " (hp NULL)",
                         KEYS_MAX);
    if (m->open_record) return phx_error(PHX_EINVAL, "%s: a record is begun: end it (phx_metrics_end) first", fn);
    for (int i = 0; i < n; i++) {
        if (!hp[i].name || !px_metrics_key_ok(hp[i].name))
            return phx_error(PHX_EINVAL,
                             "%s: hyperparameter %d's name '%s': expected 1-64 letters, digits, '_', '.' or '-', "
                             "not starting with a digit",
                             fn, i, hp[i].name ? hp[i].name : "(null)");
        if (!hp[i].str && !isfinite(hp[i].num))
            return phx_error(PHX_EINVAL, "%s: hyperparameter '%s' is %g: expected a finite number", fn, hp[i].name,
                             hp[i].num);
        for (int j = 0; j < i; j++)
            if (!strcmp(hp[i].name, hp[j].name))
                return phx_error(PHX_EINVAL, "%s: hyperparameter '%s' given twice", fn, hp[i].name);
    }
    m->len = (size_t)snprintf(m->buf, sizeof m->buf, "{\"time\":%.3f,\"hparams\":{", m->t_base + (px_now() - m->t0));
    phx_status st = PHX_OK;
    for (int i = 0; i < n && st == PHX_OK; i++) {
        st = put(m, fn, hp[i].name, "%s\"%s\":", i ? "," : "", hp[i].name);
        if (st == PHX_OK)
            st = hp[i].str ? put_string(m, fn, hp[i].name, hp[i].str) : put(m, fn, hp[i].name, "%.17g", hp[i].num);
    }
    if (st == PHX_OK) st = put(m, fn, "}", "}}\n");
    if (st != PHX_OK) return st;
    if ((st = write_line(m, fn)) != PHX_OK) return st;
    if (!m->tb) return PHX_OK;
    const char *names[KEYS_MAX], *strs[KEYS_MAX];
    double nums[KEYS_MAX];
    for (int i = 0; i < n; i++) {
        names[i] = hp[i].name;
        strs[i] = hp[i].str;
        nums[i] = hp[i].num;
    }
    return px_tb_hparams(m->tb, wall_now(), n, names, strs, nums);
}

/* The record's numbers as one TensorBoard event at its "step" (else the
 * last record's step), wall_time now. */
static phx_status tb_event(phx_metrics *m)
{
    if (!m->tb || m->nnum == 0) return PHX_OK;
    const char *tags[KEYS_MAX];
    size_t len[KEYS_MAX];
    for (int i = 0; i < m->nnum; i++) {
        tags[i] = m->buf + m->key_at[m->num_key[i]];
        len[i] = (size_t)(strchr(tags[i], '"') - tags[i]);
    }
    return px_tb_scalars(m->tb, wall_now(), m->step, m->nnum, tags, len, m->num);
}

phx_status phx_metrics_end(phx_metrics *m)
{
    if (!m) return phx_error(PHX_EINVAL, "phx_metrics_end: metrics is NULL");
    if (!m->open_record)
        return phx_error(PHX_EINVAL, "phx_metrics_end: no record begun (call phx_metrics_begin first)");
    m->open_record = 0;
    m->buf[m->len++] = '}';
    m->buf[m->len++] = '\n';
    phx_status st = write_line(m, "phx_metrics_end");
    return st == PHX_OK ? tb_event(m) : st;
}
