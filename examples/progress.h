/* Progress for the examples: a line every --log-every N steps with the
 * loss, the throughput, the elapsed time and an ETA, and the --metrics
 * JSON Lines file (include/phalanx/metrics.h). On a terminal the step
 * line is rewritten in place; into a pipe or a file each is a whole line.
 * Only rank 0 prints or writes. Header-only: each example includes it. */
#ifndef PHX_EXAMPLES_PROGRESS_H
#define PHX_EXAMPLES_PROGRESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <phalanx/phalanx.h>

typedef struct progress {
    double t0; /* when progress_init ran */
    int64_t total_steps; /* steps the run will make (0: unknown, no ETA) */
    int64_t done; /* steps made so far */
    int every; /* a step line every `every` steps (0: none) */
    int tty; /* stdout is a terminal */
    int pending; /* a step line is on screen without its newline */
    int rank;
    const char *unit; /* "samples" or "tokens" */
    phx_metrics *metrics; /* NULL when no --metrics was given */
} progress;

static inline double progress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes "1:02:03" or "4:05" into buf. */
static inline const char *progress_hms(double s, char *buf, size_t n)
{
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

/* metrics_path may be NULL. Returns 0, or -1 when the metrics file cannot
 * be opened (phx_last_error says why). */
static inline int progress_init(progress *p, int64_t total_steps, int every, const char *metrics_path, int rank,
                                const char *unit)
{
    p->t0 = progress_now();
    p->total_steps = total_steps;
    p->done = 0;
    p->every = every;
    p->tty = isatty(STDOUT_FILENO);
    p->pending = 0;
    p->rank = rank;
    p->unit = unit;
    p->metrics = NULL;
    if (metrics_path && !(p->metrics = phx_metrics_open(metrics_path, rank))) return -1;
    return 0;
}

/* Ends a step line left on screen, so the next output starts on its own line. */
static inline void progress_break(progress *p)
{
    if (p->pending) {
        putchar('\n');
        p->pending = 0;
    }
}

/* One training step done: records it in the metrics file (lr < 0 and
 * per_s <= 0 are left out) and prints the step line when it is due. */
static inline void progress_step(progress *p, int epoch, double loss, double lr, double per_s)
{
    p->done++;
    if (p->metrics) {
        phx_metrics_begin(p->metrics);
        phx_metrics_add_i64(p->metrics, "step", p->done);
        phx_metrics_add_i64(p->metrics, "epoch", epoch);
        phx_metrics_add_f64(p->metrics, "loss", loss);
        if (lr >= 0) phx_metrics_add_f64(p->metrics, "lr", lr);
        if (per_s > 0) phx_metrics_add_f64(p->metrics, p->unit[0] == 't' ? "tokens_per_s" : "samples_per_s", per_s);
        phx_metrics_end(p->metrics);
    }
    if (p->rank != 0 || p->every <= 0 || p->done % p->every != 0) return;
    double el = progress_now() - p->t0;
    char e[32], r[32];
    printf("%sstep %lld", p->tty ? "\r\033[K" : "", (long long)p->done);
    if (p->total_steps > 0) printf("/%lld", (long long)p->total_steps);
    printf(" loss %.4f", loss);
    if (per_s > 0) printf(" %.0f %s/s", per_s, p->unit);
    printf(" elapsed %s", progress_hms(el, e, sizeof e));
    if (p->total_steps > 0 && p->done < p->total_steps)
        printf(" ETA %s", progress_hms(el / (double)p->done * (double)(p->total_steps - p->done), r, sizeof r));
    if (p->tty) {
        p->pending = 1;
    } else {
        putchar('\n');
    }
    fflush(stdout);
}

/* Records an end-of-epoch value (e.g. "val_loss", "accuracy") in the
 * metrics file at the current step. */
static inline void progress_record(progress *p, int epoch, const char *key, double value)
{
    if (!p->metrics) return;
    phx_metrics_begin(p->metrics);
    phx_metrics_add_i64(p->metrics, "step", p->done);
    phx_metrics_add_i64(p->metrics, "epoch", epoch);
    phx_metrics_add_f64(p->metrics, key, value);
    phx_metrics_end(p->metrics);
}

/* Takes "--metrics FILE" and "--log-every N" out of argv (updating *argc)
 * so the example parses the rest. Returns 0, or 2 after saying what is
 * wrong. */
static inline int progress_args(int *argc, char **argv, const char **metrics, int *every)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int m = !strcmp(argv[i], "--metrics"), l = !strcmp(argv[i], "--log-every");
        if (!m && !l) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (m) {
            *metrics = v;
        } else {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 0 || n > 1000000000) {
                fprintf(stderr, "%s: --log-every %s: expected a number of steps >= 0\n", argv[0], v);
                return 2;
            }
            *every = (int)n;
        }
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

static inline void progress_free(progress *p)
{
    progress_break(p);
    phx_metrics_close(p->metrics);
    p->metrics = NULL;
}
#endif
