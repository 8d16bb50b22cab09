/* The case that started it: DDP on two ranks, rank 1 skips one backward
 * (so it issues one gradient all-reduce fewer), then both all-reduce a
 * 2-element metric after the loop. Every rank must get PHX_EDESYNC
 * naming the metric's all-reduce (one rank's own, the other's peer's)
 * within 2 s of the skip, PHX_TIMEOUT being 600 s, on threads and on
 * gloo processes (before: gloo waited PHX_TIMEOUT; threads averaged the
 * metric into the gradients and reported nothing). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "t/comm_harness.h"
#include "t/ddp-util.h"
#include "t/tap.h"

#define STEPS 4
#define SKIP 1 /* the step whose backward rank 1 skips */

static h_shared *H;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    const int64_t sizes[3] = {8, 16, 4};
    phx_module *m = tu_mlp(sizes, 3, 7), *ddp = phx_ddp_new(m, c, NULL);
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &o) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(4, 8), *y = tu_new2(4, 4);
    int64_t two = 2;
    phx_tensor *metric = phx_tensor_zeros(PHX_F32, 1, &two, phx_cpu());
    h_check(H, rank, ddp && opt && loss, phx_last_error(), "DDP, optimizer and loss made");
    phx_status st = PHX_OK;
    double t_skip = now();
    for (int s = 0; s < STEPS && st == PHX_OK && ddp; s++) {
        tu_batch(s, rank * 4, 4, x, y);
        if (s == SKIP) t_skip = now();
        if (rank == 1 && s == SKIP) {
            phx_tensor *out;
            float l;
            st = phx_module_forward(ddp, x, &out); /* forward and loss, no backward */
            if (!st) st = phx_loss_forward(loss, out, y, &l);
        } else {
            st = tu_step(ddp, opt, loss, x, y);
        }
    }
    if (st == PHX_OK && ddp) st = phx_comm_allreduce(c, metric, PHX_SUM, NULL);
    double took = now() - t_skip;
    char why[900];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(st), took, phx_last_error());
    h_check(H, rank, st == PHX_EDESYNC, why, "PHX_EDESYNC");
    h_check(H, rank,
            strstr(phx_last_error(), "allreduce(count=2, f32, sum)") && strstr(phx_last_error(), "as collective #") &&
                strstr(phx_last_error(), "the ranks went out of step"),
            why, "naming the metric's all-reduce and the collective it met");
    h_check(H, rank, took < 2.0, why, "within 2 s of the skipped backward (PHX_TIMEOUT=600)");
    if (rank == 0) diag("rank 0: %s", why);
    phx_tensor_free(metric);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    H = h_new(2);
    setenv("PHX_TIMEOUT", "600", 1);
    unsetenv("PHX_DESYNC_CHECK_MS");
    static const char *const backends[] = {"threads", "gloo"};
    for (int b = 0; b < 2; b++) {
        if (b == 1 && !h_have("gloo")) {
            skip(4, "the gloo plugin is not built here");
            continue;
        }
        h_reset(H, 2);
        phx_status st = tu_spawn(backends[b], 2, rank_main, NULL);
        ok(st == PHX_OK, "%s: every rank returns (%s)", backends[b], st ? phx_last_error() : "ok");
        char head[32];
        snprintf(head, sizeof head, "%s: ", backends[b]);
        h_print(H, 0, head);
    }
    return done_testing();
}
