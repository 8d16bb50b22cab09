/* A rank program for t/tools/phxrun_fail.sh (run under phxrun, gloo):
 * all-reduces in a loop; the rank named by STOP_RANK stops itself with
 * SIGSTOP after a warm-up all-reduce. The others print their error
 * ("rank R: PHX_ETIMEOUT: ...") on stderr and exit 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include "phalanx/phalanx.h"

int main(void)
{
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        fprintf(stderr, "init: %s\n", phx_last_error());
        return 1;
    }
    int rank = phx_comm_rank(c);
    const char *sr = getenv("STOP_RANK");
    int64_t n = 1 << 16;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    if (st == PHX_OK && sr && atoi(sr) == rank) raise(SIGSTOP);
    for (int i = 0; i < 100000 && st == PHX_OK; i++) st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    fprintf(stderr, "rank %d: %s: %s\n", rank, phx_status_name(st), phx_last_error());
    phx_tensor_free(t);
    phx_comm_free(c);
    return st == PHX_OK ? 0 : 1;
}
