/* Tests that kill a rank of a gloo world started by hand: n processes
 * forked with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (each dies
 * with the test), then reaped within a deadline. */
#ifndef PHX_T_GLOO_PROCS_H
#define PHX_T_GLOO_PROCS_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "src/world/free-port.h"

static inline double gp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Forks rank(r) as each of n (<= 16) processes of one gloo world on
 * 127.0.0.1 (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; each dies
 * with the test); pids[r] gets each process id. */
static inline void gp_start(int n, int (*rank)(int), pid_t *pids)
{
    char port[16], world[16];
    snprintf(port, sizeof port, "%d", px_free_port());
    snprintf(world, sizeof world, "%d", n);
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        if ((pids[r] = fork()) == 0) {
            char b[8];
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            snprintf(b, sizeof b, "%d", r);
            setenv("RANK", b, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            _exit(rank(r));
        }
    }
}

/* Runs rank(r) as each of n (<= 16) forked processes (gp_start) and
 * waits up to `seconds` for them: status[r] gets each wait status;
 * processes still running then are SIGKILLed and reaped. Returns how
 * many were still running. */
static inline int gp_run(int n, int (*rank)(int), double seconds, int *status)
{
    pid_t pids[16];
    gp_start(n, rank, pids);
    for (int r = 0; r < n; r++) status[r] = 0;
    double end = gp_now() + seconds;
    int left = n;
    while (left && gp_now() < end) {
        for (int r = 0; r < n; r++)
            if (pids[r] > 0 && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
                pids[r] = -1;
                left--;
            }
        usleep(20000);
    }
    for (int r = 0; r < n; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status[r], 0);
        }
    return left;
}

#ifdef PHX_TAP_H
/* Runs rank(r) as a gloo world of 3 (gp_run, 30 s) whose rank 2 kills
 * itself `when`, with the TAP checks (t/tap.h included first): every
 * process ended by itself, rank 2 died by SIGKILL, and, when
 * survivors_exit, ranks 0 and 1 exited with status 0. prefix ("" or
 * "gloo: ") starts each description. */
static inline void gp_run_rank2_killed(int (*rank)(int), const char *prefix, const char *when, int survivors_exit)
{
    int status[3];
    int left = gp_run(3, rank, 30, status);
    ok(left == 0, "%severy process ended by itself (%d still running after 30 s)", prefix, left);
    ok(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL, "%srank 2 died by SIGKILL %s", prefix, when);
    if (survivors_exit)
        ok(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0 && WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 0,
           "%sthe survivors exit normally (wait status %d, %d)", prefix, status[0], status[1]);
}
#endif

#endif
