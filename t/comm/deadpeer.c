/* A rank that dies does not hang the others. With PHX_TIMEOUT=5:
 *   gloo: three processes (forked here, so nothing stops the survivors);
 *     rank 2 kills itself with SIGKILL in the middle of an all-reduce; ranks
 *     0 and 1 must get PHX_EPEER or PHX_ETIMEOUT in under 10 s.
 *   threads: rank 2 of three thread ranks leaves without joining the
 *     all-reduce; the others get PHX_ETIMEOUT naming rank 2, in under 10 s. */
#include <stdio.h>
#include <stdlib.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/gloo-procs.h"

#define N 3
#define BIG (4 << 20) /* elements: 16 MiB of f32, several ms per all-reduce */

static h_shared *H;

/* Survivors: all-reduce until one fails; record status, time and message. */
static void survive(phx_comm *c, int rank, phx_tensor *t, const char *be, const char *needle)
{
    phx_status st = PHX_OK;
    double t0 = gp_now(), dt = 0;
    for (int i = 0; i < 1000 && st == PHX_OK; i++) {
        t0 = gp_now();
        st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
        dt = gp_now() - t0;
    }
    char why[200];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(st), dt, phx_last_error());
    h_check(H, rank, st == PHX_EPEER || st == PHX_ETIMEOUT, why,
            "%s: survivors' all-reduce fails (PHX_EPEER or PHX_ETIMEOUT)", be);
    h_check(H, rank, st != PHX_OK && dt < 10.0, why, "%s: ... in under 10 s", be);
    h_check(H, rank, strstr(phx_last_error(), needle) != NULL, why, "%s: ... with a message naming '%s'", be, needle);
    H->value[rank] = dt;
    if (rank == 0) snprintf(H->r[0].why[H_MAX_CHECKS - 1], sizeof H->r[0].why[0], "%s", why);
    /* later collectives fail at once instead of hanging */
    t0 = gp_now();
    st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st != PHX_OK && gp_now() - t0 < 10.0, phx_last_error(),
            "%s: a later collective fails too, without hanging", be);
}

static int gloo_rank(int rank)
{
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
        usleep(2000); /* well inside the all-reduce */
        raise(SIGKILL);
    }
    survive(c, rank, t, "gloo", "peer rank ");
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

static void run_gloo(void)
{
    /* the survivors must finish well within 30 s; then stop everyone */
    gp_run_rank2_killed(gloo_rank, "gloo: ", "mid-all-reduce", 1);
}

static int thread_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) return 1;
    int64_t n = 1000;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    if (rank == 2) { /* leaves quietly (not a failure) */
        phx_tensor_free(t);
        phx_comm_free(c);
        return 0;
    }
    survive(c, rank, t, "threads", "ranks not there: 2");
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    setenv("PHX_TIMEOUT", "5", 1);
    int gloo = h_have("gloo");
    plan(13);
    if (!gloo) skip(7, "no gloo plugin in this build");
    H = h_new(N);
    if (gloo) {
        run_gloo();
        H->nranks = 2; /* rank 2 is dead: the survivors' checks */
        h_print(H, 0, "");
        diag("gloo survivors failed after %.2f s and %.2f s; rank 0: %s", H->value[0], H->value[1],
             H->r[0].why[H_MAX_CHECKS - 1]);
    }
    h_reset(H, 2);
    setenv("PHX_COMM", "threads", 1);
    double t0 = gp_now();
    phx_status st = phx_spawn(N, thread_rank, NULL);
    is_int(st, PHX_OK, "threads: phx_spawn returns (no rank failed; rank 2 just left)");
    ok(gp_now() - t0 < 20, "threads: ... in %.2f s", gp_now() - t0);
    h_print(H, 0, "");
    return done_testing();
}
