/* Rank 0 hosts the store, so stopping it stops the store too. Three gloo
 * ranks (forked here) all-reduce in a loop (small ones over recursive
 * doubling, every 4th a 256 KiB ring):
 *   a) PHX_TIMEOUT=30, rank 0 stopped (SIGSTOP) for 12 s, then continued:
 *      the job goes on and every result is right (a pause shorter than
 *      the timeout costs only its length);
 *   b) PHX_TIMEOUT=3, rank 0 stopped for good: ranks 1 and 2 fail within
 *      5 s of the stop (T + 2) with a message naming rank 0; the test then
 *      kills rank 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/gloo-procs.h"

#define N 3
#define BIG (64 << 10) /* elements: 256 KiB of f32, the ring */

typedef struct {
    volatile int iters[N]; /* all-reduces completed */
    volatile int stop; /* parent: finish (rank 0 contributes it) */
    int st[N], wrong[N], done[N];
    double end[N]; /* CLOCK_MONOTONIC when the loop ended */
    char msg[N][600];
} shared;

static shared *S;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* All-reduces until the parent says stop (through rank 0's second
 * element, so every rank leaves after the same all-reduce) or one fails;
 * checks every sum. */
static int rank_main(int rank)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "gloo";
    phx_comm *c;
    if (phx_comm_init(&o, &c)) {
        snprintf(S->msg[rank], sizeof S->msg[rank], "init: %s", phx_last_error());
        S->st[rank] = PHX_EIO;
        S->done[rank] = 1;
        return 1;
    }
    int64_t two = 2, big = BIG;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &two, phx_cpu());
    phx_tensor *b = phx_tensor_zeros(PHX_F32, 1, &big, phx_cpu());
    float *v = phx_tensor_data(t), *bv = phx_tensor_data(b);
    phx_status st = PHX_OK;
    for (int i = 0; st == PHX_OK; i++) {
        v[0] = (float)(rank + 1 + i);
        v[1] = rank == 0 ? (float)S->stop : 0.0f;
        if ((st = phx_comm_allreduce(c, t, PHX_SUM, NULL))) break;
        if (v[0] != (float)(6 + 3 * i)) S->wrong[rank]++;
        if (i % 4 == 0) {
            for (int k = 0; k < BIG; k++) bv[k] = (float)(rank + (k & 7));
            if ((st = phx_comm_allreduce(c, b, PHX_SUM, NULL))) break;
            for (int k = 0; k < BIG; k += 997)
                if (bv[k] != (float)(3 + 3 * (k & 7))) {
                    S->wrong[rank]++;
                    break;
                }
        }
        S->iters[rank] = i + 1;
        if (v[1] > 0) break;
    }
    S->end[rank] = now();
    S->st[rank] = st;
    snprintf(S->msg[rank], sizeof S->msg[rank], "%s", st ? phx_last_error() : "");
    S->done[rank] = 1;
    phx_tensor_free(t);
    phx_tensor_free(b);
    phx_comm_free(c);
    return st == PHX_OK ? 0 : 1;
}

static void start(pid_t *pids)
{
    memset(S, 0, sizeof *S);
    gp_start(N, rank_main, pids);
}

/* Waits until every rank has done `n` all-reduces (or one ended); 1 when
 * they all did within `limit` s. */
static int warm(int n, double limit)
{
    double end = now() + limit;
    for (;;) {
        int all = 1;
        for (int r = 0; r < N; r++) {
            if (S->done[r]) return 0;
            if (S->iters[r] < n) all = 0;
        }
        if (all) return 1;
        if (now() > end) return 0;
        nap(0.005);
    }
}

/* Reaps the ranks in `which` (a bit mask) within `limit` s, SIGKILLing
 * the rest; returns the mask of those that exited with status 0. */
static int reap(const pid_t *pids, int which, double limit)
{
    double end = now() + limit;
    int good = 0, left = which;
    while (left && now() < end) {
        for (int r = 0; r < N; r++) {
            int status;
            if (!(left & (1 << r)) || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
            left &= ~(1 << r);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) good |= 1 << r;
        }
        nap(0.01);
    }
    for (int r = 0; r < N; r++) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], NULL, 0);
    }
    return good;
}

static void paused(void)
{
    pid_t pids[N];
    setenv("PHX_TIMEOUT", "30", 1);
    start(pids);
    int ready = warm(40, 60);
    ok(ready, "a) three ranks all-reduce (40 each before the pause)");
    int before = S->iters[1];
    double t0 = now();
    kill(pids[0], SIGSTOP);
    nap(12.0);
    kill(pids[0], SIGCONT);
    double paused_s = now() - t0;
    /* rank 0 all-reduces again: the job is through the pause */
    int through = warm(before + 40, 20);
    S->stop = 1;
    int good = reap(pids, 7, 30);
    diag("a) rank 0 stopped %.1f s with PHX_TIMEOUT=30: %d, %d, %d all-reduces; %s", paused_s, S->iters[0], S->iters[1],
         S->iters[2], good == 7 ? "every rank finished" : "a rank failed");
    for (int r = 0; r < N; r++)
        if (S->st[r]) diag("a) rank %d: %s: %s", r, phx_status_name((phx_status)S->st[r]), S->msg[r]);
    ok(ready && through && good == 7 && S->st[0] == PHX_OK && S->st[1] == PHX_OK && S->st[2] == PHX_OK,
       "a) a 12 s stop of rank 0 with PHX_TIMEOUT=30 is survived: every rank goes on and finishes");
    ok(S->wrong[0] + S->wrong[1] + S->wrong[2] == 0, "a) every all-reduce's result is right (%d wrong)",
       S->wrong[0] + S->wrong[1] + S->wrong[2]);
}

static void stopped(void)
{
    pid_t pids[N];
    setenv("PHX_TIMEOUT", "3", 1);
    start(pids);
    int ready = warm(40, 60);
    double t0 = now();
    kill(pids[0], SIGSTOP);
    int good = reap(pids, 6, 30); /* kills the stopped rank 0 last */
    int named = 1, fast = 1;
    for (int r = 1; r < N; r++) {
        double dt = S->done[r] ? S->end[r] - t0 : -1;
        diag("b) rank %d ended %.2f s after rank 0 stopped: %s: %s", r, dt, phx_status_name((phx_status)S->st[r]),
             S->msg[r]);
        if (!S->done[r] || dt > 5.0) fast = 0;
        if (!strstr(S->msg[r], "rank 0")) named = 0;
    }
    ok(ready && good == 0 && S->st[1] != PHX_OK && S->st[2] != PHX_OK,
       "b) rank 0 stopped for good (PHX_TIMEOUT=3): ranks 1 and 2 fail");
    ok(fast, "b) ... within 5 s of the stop (T + 2)");
    ok(named, "b) ... with a message naming rank 0");
}

int main(void)
{
    plan(6);
    if (!h_have("gloo")) {
        skip(6, "no gloo plugin in this build");
        return done_testing();
    }
    S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED) {
        perror("mmap");
        return 99;
    }
    paused();
    stopped();
    munmap(S, sizeof *S);
    return done_testing();
}
