/* Internal helpers shared by the core (not exported: px_ prefix). */
#ifndef PHX_CORE_UTIL_H
#define PHX_CORE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "phalanx/error.h"

/* Counting allocators: every host allocation libphalanx makes goes through
 * these, so phx_alloc_count() can prove a step allocates nothing. On
 * failure they set phx_last_error (PHX_ENOMEM) and return NULL. */
void *px_malloc(size_t n);
void *px_calloc(size_t count, size_t size);
void *px_realloc(void *p, size_t n);
void px_free(void *p);
char *px_strdup(const char *s);
/* a followed by b in a new px_malloc'd string (px_free it); NULL on ENOMEM. */
char *px_concat(const char *a, const char *b);

/* Opens path for reading, as open(O_RDONLY | O_CLOEXEC) / fopen("rb"),
 * but never blocks on a FIFO with no writer and never reads a device, a
 * socket or a directory: the path is opened with O_NONBLOCK, must be a
 * regular file, and O_NONBLOCK is cleared. -1 / NULL with errno set on
 * failure; *irregular is true when the path exists but is no regular
 * file (the message to give: "is not a regular file"). */
int px_open_regular(const char *path, bool *irregular);
FILE *px_fopen_regular(const char *path, bool *irregular);
/* The error for a failed px_open_regular / px_fopen_regular of path (what:
 * "" or a noun such as "the index "), errno as it left it: "who: what'path'
 * is not a regular file" (PHX_EIO), or "who: cannot open what'path':
 * strerror" (PHX_ENOTFOUND for ENOENT, else PHX_EIO). */
phx_status px_open_error(const char *who, const char *what, const char *path, bool irregular);

/* Appends len bytes to fd (a file opened with O_APPEND) whole or not at
 * all: a failed or short write (a full disk) is cut off again, so a log
 * never holds half a record that the next one would be glued onto.
 * PHX_EIO "who: writing 'path': reason". */
phx_status px_append_record(int fd, const void *p, size_t len, const char *who, const char *path);

/* Whether s (NUL-terminated) is valid UTF-8: no overlong forms,
 * surrogates or code points past U+10FFFF (JSON's strings). NULL: false. */
bool px_utf8_valid(const char *s);

/* Monotonic clock in seconds. */
double px_now(void);
/* The largest timeout in seconds (11.6 days): every timeout, from
 * PHX_TIMEOUT or an API argument, is clamped to it, so converting it to
 * milliseconds (int) or nanoseconds (long) never overflows. */
#define PX_TIMEOUT_MAX 1e6
/* PHX_TIMEOUT in seconds (default 600; invalid values warn and use 600;
 * larger than PX_TIMEOUT_MAX warns and uses that). */
double px_env_timeout(void);
/* An API timeout: t > 0 clamped to PX_TIMEOUT_MAX; <= 0 (or NaN):
 * PHX_TIMEOUT. */
double px_timeout(double t);
/* Parses a non-negative int from an env var; returns def when unset, -1
 * (with phx_error PHX_EINVAL naming the variable and value) when invalid. */
int px_env_int(const char *name, int def);

/* PHX_EINVAL "fn: what is NULL", followed by the error set before the call
 * (if any): a NULL argument usually comes from a constructor that failed,
 * and its message names the real cause. */
phx_status px_error_null(const char *fn, const char *what);

#define PX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#endif
