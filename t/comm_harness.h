/* Multi-rank test harness: ranks (phx_spawn processes or threads, or
 * forked by hand) record checks into shared memory; the parent prints one
 * TAP line per check, ok when every rank that ran it passed. */
#ifndef PHX_T_COMM_HARNESS_H
#define PHX_T_COMM_HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define H_MAX_RANKS 8
#define H_MAX_CHECKS 64

typedef struct h_rank {
    int n; /* checks recorded */
    int ok[H_MAX_CHECKS]; /* 1 pass, 0 fail */
    char name[H_MAX_CHECKS][100];
    char why[H_MAX_CHECKS][200];
} h_rank;

typedef struct h_shared {
    int nranks;
    h_rank r[H_MAX_RANKS];
    double value[H_MAX_RANKS]; /* free use (timings) */
} h_shared;

/* Shared across fork() and threads; zeroed. */
static inline h_shared *h_new(int nranks)
{
    h_shared *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (h == MAP_FAILED) {
        perror("mmap");
        exit(99);
    }
    memset(h, 0, sizeof *h);
    h->nranks = nranks;
    return h;
}

static inline void h_reset(h_shared *h, int nranks)
{
    memset(h, 0, sizeof *h);
    h->nranks = nranks;
}

/* Records check number `k` on rank `rank` (names must match across ranks). */
static inline int h_check(h_shared *h, int rank, int cond, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static inline int h_check(h_shared *h, int rank, int cond, const char *why, const char *fmt, ...)
{
    h_rank *r = &h->r[rank];
    if (r->n >= H_MAX_CHECKS) return cond;
    int k = r->n++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->name[k], sizeof r->name[k], fmt, ap);
    va_end(ap);
    r->ok[k] = cond ? 1 : 0;
    snprintf(r->why[k], sizeof r->why[k], "%s", cond ? "" : (why ? why : ""));
    return cond;
}

/* 1 when the comm plugin `name` loads here, for worlds of threads or of
 * processes (gloo is optional at build time). */
static inline int h_have(const char *name)
{
    const phx_plugin_desc *d;
    phx_probe_ctx threads = {1, 1, 0}, procs = {0, 1, 0};
    return phx_plugin_load(PHX_PLUGIN_COMM, name, &threads, &d) == PHX_OK ||
        phx_plugin_load(PHX_PLUGIN_COMM, name, &procs, &d) == PHX_OK;
}

/* One TAP line per check of rank `lead` (all ranks run the same list);
 * returns the number of lines printed. */
static inline int h_print(const h_shared *h, int lead, const char *prefix)
{
    const h_rank *L = &h->r[lead];
    for (int k = 0; k < L->n; k++) {
        int all = 1, who = -1;
        for (int q = 0; q < h->nranks; q++) {
            if (k >= h->r[q].n || !h->r[q].ok[k]) {
                all = 0;
                if (who < 0) who = q;
            }
        }
        if (!ok(all, "%s%s", prefix, L->name[k]) && who >= 0)
            diag("  rank %d: %s", who, k < h->r[who].n ? h->r[who].why[k] : "check not reached");
    }
    return L->n;
}
#endif
