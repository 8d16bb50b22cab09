/* A rank that fails under mpirun, for t/comm/mpi_fail.sh:
 *   comm_mpi_fail ok     every rank runs 40 all-reduces of 16 MiB and exits 0
 *   comm_mpi_fail kill   rank 1 SIGKILLs itself right after issuing the
 *                        6th (the others are in the middle of it)
 *   comm_mpi_fail stall  rank 1 stops issuing after the 5th and sleeps
 *   comm_mpi_fail late   rank 1 issues its first all-reduce 1 s late; rank
 *                        0 prints how long its own issue call took and
 *                        whether the work was still pending after it
 * Every rank prints "rank R: done" when its loop finishes, and the
 * status and message of the first collective that fails. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

#define BIG (4 << 20) /* f32 elements: 16 MiB */

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
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
    for (int i = 0; i < 40; i++) {
        if (rank == 1 && i == 5 && !strcmp(mode, "stall")) {
            printf("rank 1: stalling\n");
            for (;;) pause();
        }
        phx_work *w;
        int late = i == 0 && !strcmp(mode, "late");
        if (late && rank == 1) sleep(1);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        phx_status st = phx_comm_allreduce(c, t, PHX_AVG, &w);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (late && rank == 0)
            printf("rank 0: issue took %.6f s, then %s\n",
                   (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec),
                   st == PHX_OK && !phx_work_test(w) ? "pending" : "complete");
        if (rank == 1 && i == 5 && !strcmp(mode, "kill")) {
            printf("rank 1: killing itself\n");
            raise(SIGKILL);
        }
        if (!st) st = phx_work_wait(w, -1);
        if (st) {
            printf("rank %d: allreduce %d: %s: %s\n", rank, i, phx_status_name(st), phx_last_error());
            return 1;
        }
        phx_work_free(w);
    }
    double v = -1;
    phx_tensor_get(t, BIG - 1, &v);
    printf("rank %d: done, last element %g\n", rank, v);
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}
