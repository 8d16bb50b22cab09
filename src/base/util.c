/* Counting allocators, clock, environment helpers. */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "src/base/util.h"
#include "phalanx/device.h"
#include "phalanx/log.h"

static atomic_uint_fast64_t px_allocs;

uint64_t phx_alloc_count(void)
{
    return atomic_load(&px_allocs);
}

void *px_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        phx_error(PHX_ENOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    atomic_fetch_add(&px_allocs, 1);
    return p;
}

void *px_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        phx_error(PHX_ENOMEM, "out of memory allocating %zu x %zu bytes", count, size);
        return NULL;
    }
    atomic_fetch_add(&px_allocs, 1);
    return p;
}

void *px_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        phx_error(PHX_ENOMEM, "out of memory reallocating %zu bytes", n);
        return NULL;
    }
    atomic_fetch_add(&px_allocs, 1);
    return q;
}

void px_free(void *p)
{
    free(p);
}

char *px_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = px_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

double px_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int px_env_int(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || *v < '0' || *v > '9' || x < 0 || x > 0x7fffffff) {
        phx_error(PHX_EINVAL, "environment variable %s='%s': expected a non-negative integer", name, v);
        return -1;
    }
    return (int)x;
}

double px_env_timeout(void)
{
    const char *v = getenv("PHX_TIMEOUT");
    if (!v || !*v) return 600.0;
    char *end;
    double t = strtod(v, &end);
    /* a decimal number (or inf: the largest) only: no blank, sign or 0x */
    if (isspace((unsigned char)*v) || *v == '+' || strpbrk(v, "xX") || *end || !(t > 0)) {
        phx_log(PHX_LOG_WARN, "PHX_TIMEOUT='%s' is not a positive number of seconds; using 600", v);
        return 600.0;
    }
    if (t > PX_TIMEOUT_MAX) {
        phx_log(PHX_LOG_WARN, "PHX_TIMEOUT='%s' exceeds the largest timeout, %.0f s (11.6 days); using that", v,
                PX_TIMEOUT_MAX);
        return PX_TIMEOUT_MAX;
    }
    return t;
}

double px_timeout(double t)
{
    if (!(t > 0)) return px_env_timeout(); /* <= 0 and NaN */
    return t > PX_TIMEOUT_MAX ? PX_TIMEOUT_MAX : t;
}

char *px_concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = px_malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

int px_open_regular(const char *path, bool *irregular)
{
    *irregular = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        *irregular = true;
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *px_fopen_regular(const char *path, bool *irregular)
{
    int fd = px_open_regular(path, irregular);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

phx_status px_open_error(const char *who, const char *what, const char *path, bool irregular)
{
    if (irregular) return phx_error(PHX_EIO, "%s: %s'%s' is not a regular file", who, what, path);
    int e = errno;
    return phx_error(e == ENOENT ? PHX_ENOTFOUND : PHX_EIO, "%s: cannot open %s'%s': %s", who, what, path, strerror(e));
}

phx_status px_append_record(int fd, const void *p, size_t len, const char *who, const char *path)
{
    /* Other writers (processes, or threads with their own descriptor)
     * append to the same file: the lock keeps them out between the end
     * found here and a cut back to it, which would take their records. */
    int locked = flock(fd, LOCK_EX) == 0;
    off_t before = lseek(fd, 0, SEEK_END);
    const char *c = p;
    size_t left = len;
    phx_status st = PHX_OK;
    while (left > 0) {
        ssize_t w = write(fd, c, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : 0;
            /* nothing written: nothing to cut; else only under the lock */
            const char *state = left == len                           ? "nothing was written"
                : locked && before >= 0 && ftruncate(fd, before) == 0 ? "the partial record was removed"
                                                                      : "a partial record may remain";
            st = phx_error(PHX_EIO, "%s: writing '%s': %s (%s)", who, path,
                           err ? strerror(err) : "short write (disk full?)", state);
            break;
        }
        c += w;
        left -= (size_t)w;
    }
    if (locked) flock(fd, LOCK_UN);
    return st;
}

bool px_utf8_valid(const char *s)
{
    if (!s) return false;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = *p++;
        if (c < 0x80) continue;
        int more = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
        if (more < 0) return false; /* a continuation byte, an overlong lead (c0, c1) or past f4 */
        unsigned cp = c & (0x3fu >> more);
        for (int i = 0; i < more; i++, p++) {
            if ((*p & 0xc0) != 0x80) return false;
            cp = cp << 6 | (*p & 0x3fu);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
    }
    return true;
}
