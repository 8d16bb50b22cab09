/* The kit's failure protocol in a plugin built on the kit alone
 * (t/plugins/kit-duo.c, two processes over one socket): when rank 1
 * leaves, rank 0's all-reduce is PHX_EPEER naming rank 1 as the peer, and
 * the communicator is broken after it. A world where both stay shows the
 * plugin works (the check can fail). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/tap.h"

static h_shared *H;

static int body(int rank, void *arg)
{
    int leave = *(int *)arg;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        h_check(H, rank, 0, phx_last_error(), "init");
        return 1;
    }
    const int64_t n = 4;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_tensor_fill(t, rank + 1.0);
    double x = 0;
    phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    phx_tensor_get(t, 3, &x);
    h_check(H, rank, st == PHX_OK && x == 3.0, phx_last_error(), "an all-reduce of 1 and 2 gives 3 (%g)", x);
    if (leave && rank == 1) _exit(0); /* without a word: the socket closes */
    if (rank == 0 || !leave) {
        st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
        char why[700];
        snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
        if (leave) {
            h_check(H, 0, st == PHX_EPEER, why, "the peer gone: PHX_EPEER");
            h_check(H, 0, strstr(phx_last_error(), "duo: rank 0: allreduce #1 failed with peer rank 1: ") != NULL, why,
                    "... naming the op and peer rank 1");
            st = phx_comm_barrier(c, NULL);
            h_check(H, 0, st == PHX_EPEER && strstr(phx_last_error(), "not run: the communicator failed earlier"),
                    phx_last_error(), "then the communicator is broken");
        } else {
            phx_tensor_get(t, 0, &x);
            h_check(H, rank, st == PHX_OK && x == 6.0, phx_last_error(), "a second all-reduce gives 3 + 3 = 6 (%g)", x);
        }
    }
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    char dir[PATH_MAX];
    const char *b = getenv("top_builddir");
    snprintf(dir, sizeof dir, "%s/t/plugins/kit/.libs", b ? b : ".");
    char so[PATH_MAX + 32];
    snprintf(so, sizeof so, "%s/phx-comm-duo.so", dir);
    if (access(so, R_OK) != 0) {
        printf("1..0 # SKIP %s not built\n", so);
        return 0;
    }
    plan(8);
    setenv("PHX_PLUGIN_PATH", dir, 1);
    setenv("PHX_COMM", "duo", 1);
    setenv("PHX_TIMEOUT", "30", 1);
    unsetenv("MASTER_PORT");
    H = h_new(2);
    for (int leave = 0; leave < 2; leave++) {
        h_reset(H, leave ? 1 : 2); /* the leaving rank's checks are not waited for */
        ok(phx_spawn(2, body, &leave) == PHX_OK, "%s: phx_spawn returns (%s)", leave ? "rank 1 leaves" : "both stay",
           phx_last_error());
        h_print(H, 0, leave ? "rank 1 leaves: " : "both stay: ");
    }
    return done_testing();
}
