/* A rank stopped mid-job under mpirun, for t/comm/mpi_stop.sh: every rank
 * runs 20 all-reduces of 16 MiB; rank 1 stops itself (SIGSTOP) right after
 * issuing the 6th, so the others wait in it. Every rank prints "rank R:
 * done" when its loop finishes, or the status and message of the first
 * collective that fails. */
#include <signal.h>
#include <stdio.h>
#include "phalanx/phalanx.h"

#define BIG (4 << 20) /* f32 elements: 16 MiB */

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        printf("phx_comm_init: %s\n", phx_last_error());
        return 2;
    }
    int rank = phx_comm_rank(c);
    int64_t n = BIG;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, phx_cpu());
    phx_tensor_fill(t, 1.0);
    for (int i = 0; i < 20; i++) {
        phx_work *w;
        phx_status st = phx_comm_allreduce(c, t, PHX_AVG, &w);
        if (rank == 1 && i == 5) {
            printf("rank 1: stopping itself\n");
            raise(SIGSTOP);
        }
        if (!st) st = phx_work_wait(w, -1);
        if (st) {
            printf("rank %d: allreduce %d: %s: %s\n", rank, i, phx_status_name(st), phx_last_error());
            return 1;
        }
        phx_work_free(w);
    }
    printf("rank %d: done\n", rank);
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}
