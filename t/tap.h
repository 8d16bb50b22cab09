/* Minimal TAP producer for Phalanx tests: plan/ok/is/diag/skip, and
 * messages that show expected versus got. Header-only. */
#ifndef PHX_TAP_H
#define PHX_TAP_H

/* A macro's value as a string literal (PX_XSTR(PHX_PLUGIN_ABI_MINOR) is "2"). */
#define PX_STR(x) #x
#define PX_XSTR(x) PX_STR(x)

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

static int tap_planned_ = -1, tap_run_ = 0, tap_failed_ = 0;

static inline void plan(int n)
{
    tap_planned_ = n;
    printf("1..%d\n", n);
    fflush(stdout);
}
/* The whole file is skipped: prints "1..0 # SKIP why" and exits 0. */
static inline void skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

static inline int tap_vok_(int cond, const char *fmt, va_list ap)
{
    tap_run_++;
    if (!cond) tap_failed_++;
    printf("%sok %d - ", cond ? "" : "not ", tap_run_);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    return cond;
}
static inline int ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = tap_vok_(cond, fmt, ap);
    va_end(ap);
    return r;
}
/* Integers: on failure shows expected and got. */
#define is_int(got, expected, ...) \
    do { \
        long long g_ = (long long)(got), e_ = (long long)(expected); \
        if (!ok(g_ == e_, __VA_ARGS__)) diag("  expected: %lld\n#   got:      %lld", e_, g_); \
    } while (0)
/* Strings (NULL-safe). */
#define is_str(got, expected, ...) \
    do { \
        const char *g_ = (got), *e_ = (expected); \
        int c_ = (g_ && e_) ? strcmp(g_, e_) == 0 : g_ == e_; \
        if (!ok(c_, __VA_ARGS__)) \
            diag("  expected: '%s'\n#   got:      '%s'", e_ ? e_ : "(null)", g_ ? g_ : "(null)"); \
    } while (0)
/* Doubles within an absolute-or-relative tolerance. */
#define is_close(got, expected, tol, ...) \
    do { \
        double g_ = (got), e_ = (expected), t_ = (tol); \
        int c_ = fabs(g_ - e_) <= t_ * fmax(1.0, fabs(e_)); \
        if (!ok(c_, __VA_ARGS__)) diag("  expected: %.9g (tol %.3g)\n#   got:      %.9g", e_, t_, g_); \
    } while (0)
/* A substring check for error messages. */
#define like(got, needle, ...) \
    do { \
        const char *g_ = (got), *n_ = (needle); \
        if (!ok(g_ && strstr(g_, n_) != NULL, __VA_ARGS__)) \
            diag("  expected to contain: '%s'\n#   got: '%s'", n_, g_ ? g_ : "(null)"); \
    } while (0)

/* Skips n tests with a reason. */
static inline void skip(int n, const char *why)
{
    for (int i = 0; i < n; i++) {
        tap_run_++;
        printf("ok %d # SKIP %s\n", tap_run_, why);
    }
    fflush(stdout);
}
/* Exit status: 0 when all planned tests ran and passed. */
static inline int done_testing(void)
{
    if (tap_planned_ < 0)
        plan(tap_run_);
    else if (tap_run_ != tap_planned_)
        diag("planned %d tests but ran %d", tap_planned_, tap_run_);
    return tap_failed_ || (tap_planned_ >= 0 && tap_run_ != tap_planned_) ? 1 : 0;
}
#endif
