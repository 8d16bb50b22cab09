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
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/gloo-procs.h"

#define N 3
#define BIG (4 << 20)

typedef struct {
    int st[N], done[N];
    double dt[N];
    char msg[N][300];
} trial_out;

static trial_out *T;

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
    double t0 = gp_now(), dt = 0;
    for (int i = 0; i < 1000 && st == PHX_OK; i++) {
        t0 = gp_now();
        st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
        dt = gp_now() - t0;
    }
    T->st[rank] = st;
    T->dt[rank] = dt;
    T->done[rank] = 1;
    snprintf(T->msg[rank], sizeof T->msg[rank], "%s", phx_last_error());
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

static int cur_trial;
static int trial_rank(int rank)
{
    return rank_main(rank, cur_trial);
}

/* One trial; returns 0 when it ran (the survivors' results are in T). */
static int trial(int k)
{
    memset(T, 0, sizeof *T);
    cur_trial = k;
    int status[N];
    int left = gp_run(N, trial_rank, 20, status);
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
    double worst = 0, t0 = gp_now();
    char bad[400] = "";
    while (trials < 40 && gp_now() - t0 < 25) {
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
    diag("%d kill trials in %.1f s: worst time to error %.3f s, %d survivors late or not PHX_EPEER", trials,
         gp_now() - t0, worst, wrong);
    if (bad[0]) diag("last bad: %s", bad);
    ok(trials >= 15, "at least 15 trials ran (%d)", trials);
    ok(broken == 0, "every trial: rank 2 died by SIGKILL and the survivors ended by themselves (%d did not)", broken);
    ok(wrong == 0, "every survivor failed with PHX_EPEER within 2 s (%d did not; worst %.3f s)", wrong, worst);
    munmap(T, sizeof *T);
    return done_testing();
}
