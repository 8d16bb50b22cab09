/* The desync cases every backend's test runs (t/comm/desync_threads,
 * t/comm/desync_gloo): after two agreeing all-reduces the last rank of a
 * world of 2 or 3 issues another collective than the others as #2 (another
 * kind, count, dtype or root). Every rank must get PHX_EDESYNC naming both
 * collectives within 2 s, PHX_TIMEOUT being 600 s. In the "late" case the
 * last rank issues the same all-reduce 5 s late (PHX_TIMEOUT=30): nobody
 * may report anything, and the sums are right. */
#ifndef PHX_T_COMM_DESYNC_CASES_H
#define PHX_T_COMM_DESYNC_CASES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/tap.h"

enum { D_KINDS, D_COUNTS, D_DTYPES, D_ROOTS, D_LATE, D_NCASES };
static const char *const d_case_name[] = {"kinds", "counts", "dtypes", "roots", "late"};

#define D_N 100000 /* elements of the mismatched collective */
#define D_LATE_S 5

static inline double d_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What rank `odd` (the last) and the others issue as #2, as the kit names
 * them (phx_kit_op_text). */
static inline void d_texts(int mode, char *others, char *odd, size_t len)
{
    switch (mode) {
    case D_KINDS:
        snprintf(others, len, "allreduce(count=%d, f32, sum)", D_N);
        snprintf(odd, len, "broadcast(count=%d, f32, root 0)", D_N);
        break;
    case D_COUNTS:
        snprintf(others, len, "allreduce(count=%d, f32, sum)", D_N);
        snprintf(odd, len, "allreduce(count=%d, f32, sum)", D_N / 2);
        break;
    case D_DTYPES:
        snprintf(others, len, "allreduce(count=%d, f32, sum)", D_N);
        snprintf(odd, len, "allreduce(count=%d, i32, sum)", D_N);
        break;
    default:
        snprintf(others, len, "broadcast(count=%d, f32, root 0)", D_N);
        snprintf(odd, len, "broadcast(count=%d, f32, root 1)", D_N);
    }
}

#ifndef D_RANK_PROGRAM /* the mpi test's rank program uses the above only */
static h_shared *D_H;

typedef struct d_arg {
    int mode, size;
} d_arg;

static int d_body(int rank, void *arg)
{
    const d_arg *a = arg;
    int odd = rank == a->size - 1, mode = a->mode;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        h_check(D_H, rank, 0, phx_last_error(), "phx_comm_init");
        return 10;
    }
    int64_t n = D_N, half = D_N / 2;
    phx_tensor *f = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_tensor *h = phx_tensor_zeros(PHX_F32, 1, &half, phx_cpu());
    phx_tensor *i = phx_tensor_zeros(PHX_I32, 1, &n, phx_cpu());
    phx_status st = PHX_OK;
    int told_next = 0;
    for (int k = 0; k < 2 && !st; k++) st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    h_check(D_H, rank, st == PHX_OK, phx_last_error(), "two agreeing all-reduces");
    phx_tensor_fill(f, 1.0);
    double t0 = d_now();
    if (mode == D_LATE) {
        if (odd) sleep(D_LATE_S);
        st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    } else if (mode == D_KINDS) {
        st = odd ? phx_comm_broadcast(c, f, 0, NULL) : phx_comm_allreduce(c, f, PHX_SUM, NULL);
    } else if (mode == D_COUNTS) {
        st = phx_comm_allreduce(c, odd ? h : f, PHX_SUM, NULL);
    } else if (mode == D_DTYPES) {
        st = phx_comm_allreduce(c, odd ? i : f, PHX_SUM, NULL);
    } else {
        st = phx_comm_broadcast(c, f, odd ? 1 : 0, NULL);
    }
    if (st == PHX_OK && mode != D_LATE) {
        /* a rank in step with its neighbours can complete #2 (a broadcast
         * from the same root): it is told at its next collective */
        told_next = 1;
        st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    }
    double took = d_now() - t0;
    D_H->value[rank] = took;
    char why[900];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(st), took, phx_last_error());
    if (mode == D_LATE) {
        double v = 0;
        phx_tensor_get(f, D_N - 1, &v);
        h_check(D_H, rank, st == PHX_OK, why, "a rank %d s late with the same op: no error", D_LATE_S);
        h_check(D_H, rank, v == (double)a->size, why, "... and the sum is right (%g, expected %d)", v, a->size);
    } else {
        char others[96], oddt[96], mine[160], theirs[160];
        d_texts(mode, others, oddt, sizeof others);
        snprintf(mine, sizeof mine, "rank %d issued %s as collective #2 but rank ", rank, odd ? oddt : others);
        if (getenv("D_DEBUG")) fprintf(stderr, "rank %d: %s\n", rank, why);
        snprintf(theirs, sizeof theirs, " issued %s", odd ? others : oddt);
        h_check(D_H, rank, st == PHX_EDESYNC, why, "PHX_EDESYNC");
        h_check(D_H, rank, strstr(phx_last_error(), mine) && strstr(phx_last_error(), theirs), why,
                "the message names both collectives (this rank's first)");
        if (told_next) diag("rank %d completed #2 and was told at #3", rank);
        if (!odd) {
            char who[32];
            snprintf(who, sizeof who, "but rank %d issued", a->size - 1);
            h_check(D_H, rank, strstr(phx_last_error(), who) != NULL, why, "... and the rank that differs");
        } else {
            h_check(D_H, rank, 1, why, "... and the rank that differs");
        }
        h_check(D_H, rank, took < 2.0, why, "within 2 s (PHX_TIMEOUT=600)");
        /* the communicator is broken: later collectives fail at once */
        double t1 = d_now();
        st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
        h_check(D_H, rank, st != PHX_OK && d_now() - t1 < 0.5, phx_last_error(), "a later collective fails at once");
    }
    phx_tensor_free(f);
    phx_tensor_free(h);
    phx_tensor_free(i);
    phx_comm_free(c);
    return 0;
}

/* Runs every case at worlds 2 and 3 on backend (PHX_COMM). */
static void d_run_all(const char *backend)
{
    D_H = h_new(3);
    setenv("PHX_COMM", backend, 1);
    unsetenv("MASTER_PORT");
    unsetenv("PHX_DESYNC_CHECK_MS");
    const char *only = getenv("D_ONLY"); /* one case, by name, when debugging */
    for (int size = 2; size <= 3; size++)
        for (int mode = 0; mode < D_NCASES; mode++) {
            if (only && strcmp(only, d_case_name[mode])) continue;
            setenv("PHX_TIMEOUT", mode == D_LATE ? "30" : "600", 1);
            h_reset(D_H, size);
            d_arg a = {mode, size};
            double t0 = d_now();
            phx_status st = phx_spawn(size, d_body, &a);
            char head[64];
            snprintf(head, sizeof head, "%s, world %d: ", d_case_name[mode], size);
            ok(st == PHX_OK, "%severy rank returns (%s)", head, st ? phx_last_error() : "ok");
            h_print(D_H, 0, head);
            diag("%s%.2f s in the op on rank 0, %.2f s on rank %d; %.2f s in all", head, D_H->value[0],
                 D_H->value[size - 1], size - 1, d_now() - t0);
        }
}
#endif

#endif
