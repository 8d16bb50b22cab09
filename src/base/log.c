/* Logging: "[phx rank R] LEVEL: msg" lines on stderr, one write per line
 * so lines from threads and ranks never interleave mid-line. */
#include "config.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "phalanx/log.h"

static atomic_int px_log_level = -1; /* -1: not read from PHX_LOG yet */
static atomic_int px_log_rank = -1;
static const char *const px_level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

static int level_from_env(void)
{
    const char *v = getenv("PHX_LOG");
    if (!v || !*v) return PHX_LOG_WARN;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, names[i]) == 0) return i;
    if (strcasecmp(v, "warning") == 0) return PHX_LOG_WARN;
    fprintf(stderr, "[phx] WARN: PHX_LOG='%s' is not one of error, warn, info, debug; using warn\n", v);
    return PHX_LOG_WARN;
}

phx_log_level phx_log_get_level(void)
{
    int l = atomic_load_explicit(&px_log_level, memory_order_relaxed);
    if (l < 0) {
        int want = level_from_env();
        int expected = -1;
        /* First reader wins; a concurrent phx_log_set_level is kept. */
        if (!atomic_compare_exchange_strong(&px_log_level, &expected, want)) want = expected;
        l = want;
    }
    return (phx_log_level)l;
}

void phx_log_set_level(phx_log_level level)
{
    if (level < PHX_LOG_ERROR) level = PHX_LOG_ERROR;
    if (level > PHX_LOG_DEBUG) level = PHX_LOG_DEBUG;
    atomic_store(&px_log_level, (int)level);
}

/* Before a communicator set the rank, a process started by a launcher
 * already knows it: RANK (phxrun, torchrun), OMPI_COMM_WORLD_RANK
 * (mpirun), PMI_RANK, SLURM_PROCID (srun). -1 when none is a number. */
static int env_rank(void)
{
    static atomic_int cached = -2;
    int r = atomic_load(&cached);
    if (r != -2) return r;
    static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    r = -1;
    for (int i = 0; i < 4 && r < 0; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long x = v && *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : -1;
        if (x >= 0 && x < (1L << 30) && *end == 0) r = (int)x;
    }
    atomic_store(&cached, r);
    return r;
}

/* Threads of one process can be different ranks (phx_spawn with threads):
 * a thread that set its rank prints it; other threads print the process's. */
static _Thread_local int px_log_thread_rank = -2; /* -2: not set on this thread */

void phx_log_set_rank(int rank)
{
    atomic_store(&px_log_rank, rank < 0 ? -1 : rank);
    px_log_thread_rank = rank < 0 ? -1 : rank;
}

void phx_log(phx_log_level level, const char *fmt, ...)
{
    if ((int)level > (int)phx_log_get_level()) return;
    if (level < PHX_LOG_ERROR) level = PHX_LOG_ERROR;
    if (level > PHX_LOG_DEBUG) level = PHX_LOG_DEBUG;
    char line[2048];
    int rank = px_log_thread_rank != -2 ? px_log_thread_rank : atomic_load(&px_log_rank);
    if (rank < 0 && px_log_thread_rank == -2) rank = env_rank();
    int n = rank >= 0 ? snprintf(line, sizeof line, "[phx rank %d] %s: ", rank, px_level_names[level])
                      : snprintf(line, sizeof line, "[phx] %s: ", px_level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2; /* truncated: keep the newline */
    line[len++] = '\n';
    /* one write(2): atomic with respect to other writers of short lines */
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, line + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
}
