/* gloo: ranks that go out of step (a different number of steps, so one
 * issues a collective the other does not) get PHX_EDESYNC naming both
 * collectives within PHX_TIMEOUT + 1.5 s, where gloo's I/O thread used to
 * abort the process (EnforceNotMet: op.preamble.length <= op.nbytes); a
 * rank that merely hangs still gives PHX_ETIMEOUT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/tap.h"

static h_shared *H;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { SIZES, KINDS, HANG };
static const char *const want[][2] = {
    {"issued allreduce(count=100000, f32, sum) as collective #2 but rank 1 issued allreduce(count=50000, f32, sum)",
     "issued allreduce(count=50000, f32, sum) as collective #2 but rank 0 issued allreduce(count=100000, f32, sum)"},
    {"issued allreduce(count=100000, f32, sum) as collective #2 but rank 1 issued broadcast(count=100000, f32, root 1)",
     "issued broadcast(count=100000, f32, root 1) as collective #2 but rank 0 issued allreduce(count=100000, f32, "
     "sum)"},
};

/* Two agreeing all-reduces, then the case's third collective. */
static int body(int rank, void *arg)
{
    int mode = *(int *)arg;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) return 10;
    int64_t n = 100000, m = 50000;
    phx_tensor *a = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu()), *b = phx_tensor_zeros(PHX_F32, 1, &m, phx_cpu());
    phx_status st = PHX_OK;
    for (int i = 0; i < 2 && !st; i++) st = phx_comm_allreduce(c, a, PHX_SUM, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "two agreeing all-reduces");
    double t0 = now();
    if (rank == 0 || mode == SIZES)
        st = phx_comm_allreduce(c, rank == 0 ? a : b, PHX_SUM, NULL);
    else if (mode == KINDS)
        st = phx_comm_broadcast(c, a, 1, NULL);
    else
        sleep(5); /* HANG: issues nothing while rank 0 waits */
    H->value[rank] = now() - t0;
    char why[700];
    snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
    if (mode == HANG && rank == 0) {
        h_check(H, 0, st == PHX_ETIMEOUT && !strstr(phx_last_error(), "out of step"), why,
                "a hung peer: PHX_ETIMEOUT, not a desync");
    } else if (mode == HANG) {
        st = phx_comm_allreduce(c, a, PHX_SUM, NULL);
        h_check(H, 1, st != PHX_OK, "it succeeded", "the late rank's collective fails too (%s)", phx_status_name(st));
    } else {
        h_check(H, rank, st == PHX_EDESYNC && strstr(phx_last_error(), want[mode][rank]), why,
                "PHX_EDESYNC naming both collectives");
        h_check(H, rank, strstr(phx_last_error(), "PHX_DEBUG=detail") != NULL, why, "... and PHX_DEBUG=detail");
    }
    phx_tensor_free(a);
    phx_tensor_free(b);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    plan(12);
    H = h_new(2);
    setenv("PHX_COMM", "gloo", 1);
    setenv("PHX_TIMEOUT", "3", 1);
    unsetenv("MASTER_PORT");
    static const char *const name[] = {"sizes", "kinds", "hang"};
    for (int mode = SIZES; mode <= HANG; mode++) {
        h_reset(H, 2);
        phx_status st = phx_spawn(2, body, &mode);
        char head[64];
        snprintf(head, sizeof head, "%s: ", name[mode]);
        if (mode != HANG) {
            ok(st == PHX_OK, "%s: both ranks return (no abort: %s)", name[mode], st ? phx_last_error() : "ok");
            h_print(H, 0, head);
            ok(H->value[0] < 4.5 && H->value[1] < 4.5, "%s: within PHX_TIMEOUT + 1.5 s (%.2f s, %.2f s)", name[mode],
               H->value[0], H->value[1]);
        } else {
            h_print(H, 0, head);
        }
    }
    return done_testing();
}
