/* Kill trials with teeth (doc/guide/failures.md): three gloo ranks (forked here,
 * ignoring SIGTERM as a rank that does not stop cleanly would), all-reduce
 * 16 MiB in a loop; rank 2 SIGKILLs itself 0-22.5 ms into an all-reduce (a
 * different phase of the ring each trial). Every survivor of every trial
 * must fail with PHX_EPEER within 2 s (PHX_TIMEOUT=5: a survivor that
 * waits for the dead rank instead shows up as a 5 s PHX_ETIMEOUT). The
 * race this catches (a send gloo holds for the dead rank's receive) hit
 * about 1 trial in 15: the trials repeat up to 40 times or 25 s, at least
 * 15. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "src/world/free-port.h"
#include "t/comm_harness.h"

#define N 3
#define BIG (4 << 20)

typedef struct {
    int st[N], done[N];
    double dt[N];
    char msg[N][300];
} trial_out;

static trial_out *T;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int rank_main(int rank, int trial)
{
    signal(SIGTERM, SIG_IGN);
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "gloo";
    phx_comm *c;
    if (phx_comm_init(&o, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    int64_t n = BIG;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_comm_allreduce(c, t, PHX_SUM, NULL); /* warm: every pair connected and used */
    if (rank == 2) {
        phx_work *w;
        phx_comm_allreduce(c, t, PHX_SUM, &w);
        usleep((useconds_t)(trial % 10) * 2500);
        raise(SIGKILL);
    }
    phx_status st = PHX_OK;
    double t0 = now(), dt = 0;
    for (int i = 0; i < 1000 && st == PHX_OK; i++) {
        t0 = now();
        st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
        dt = now() - t0;
    }
    T->st[rank] = st;
    T->dt[rank] = dt;
    T->done[rank] = 1;
    snprintf(T->msg[rank], sizeof T->msg[rank], "%s", phx_last_error());
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

/* One trial; returns 0 when it ran (the survivors' results are in T). */
static int trial(int k)
{
    char port[16];
    snprintf(port, sizeof port, "%d", px_free_port());
    memset(T, 0, sizeof *T);
    pid_t pids[N];
    fflush(NULL);
    for (int r = 0; r < N; r++) {
        if ((pids[r] = fork()) == 0) {
            char b[8];
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            snprintf(b, sizeof b, "%d", r);
            setenv("RANK", b, 1);
            setenv("WORLD_SIZE", "3", 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            _exit(rank_main(r, k));
        }
    }
    double end = now() + 20;
    int left = N, status[N] = {0};
    while (left && now() < end) {
        for (int r = 0; r < N; r++)
            if (pids[r] > 0 && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
                pids[r] = -1;
                left--;
            }
        usleep(5000);
    }
    for (int r = 0; r < N; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status[r], 0);
        }
    return left == 0 && WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL ? 0 : -1;
}

int main(void)
{
    setenv("PHX_TIMEOUT", "5", 1);
    plan(3);
    if (!h_have("gloo")) {
        skip(3, "no gloo plugin in this build");
        return done_testing();
    }
    T = mmap(NULL, sizeof *T, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (T == MAP_FAILED) {
        perror("mmap");
        return 99;
    }
    int trials = 0, broken = 0, wrong = 0;
    double worst = 0, t0 = now();
    char bad[400] = "";
    while (trials < 40 && now() - t0 < 25) {
        int k = trials++;
        if (trial(k)) {
            broken++;
            continue;
        }
        for (int r = 0; r < 2; r++) {
            if (T->dt[r] > worst) worst = T->dt[r];
            if (!T->done[r] || T->st[r] != PHX_EPEER || T->dt[r] >= 2.0) {
                wrong++;
                snprintf(bad, sizeof bad, "trial %d rank %d: %s after %.2f s: %s", k, r,
                         !T->done[r] ? "no result" : phx_status_name((phx_status)T->st[r]), T->dt[r], T->msg[r]);
            }
        }
    }
    diag("%d kill trials in %.1f s: worst time to error %.3f s, %d survivors late or not PHX_EPEER", trials, now() - t0,
         worst, wrong);
    if (bad[0]) diag("last bad: %s", bad);
    ok(trials >= 15, "at least 15 trials ran (%d)", trials);
    ok(broken == 0, "every trial: rank 2 died by SIGKILL and the survivors ended by themselves (%d did not)", broken);
    ok(wrong == 0, "every survivor failed with PHX_EPEER within 2 s (%d did not; worst %.3f s)", wrong, worst);
    munmap(T, sizeof *T);
    return done_testing();
}
