/* A rank program for t/comm/desync_mpi.sh (under mpirun, PHX_COMM=mpi):
 *   comm_desync_mpi CASE TAG   the cases of t/comm/desync-cases.h: after
 *                              two agreeing all-reduces the last rank
 *                              issues another collective as #2 (or, for
 *                              "late", the same one 5 s late)
 * Each rank prints "rank R: case CASE: STATUS after S s: MESSAGE" for
 * collective #2 (or #3, when #2 completed: a rank in step with its
 * neighbours can complete a broadcast from their root), then
 * "rank R: done" after freeing the communicator. */
#define D_RANK_PROGRAM
#include "t/comm/desync-cases.h"

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *name = argc > 1 ? argv[1] : "kinds";
    int mode = 0;
    while (mode < D_NCASES && strcmp(name, d_case_name[mode])) mode++;
    if (mode == D_NCASES) {
        printf("unknown case '%s'\n", name);
        return 2;
    }
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        printf("phx_comm_init: %s\n", phx_last_error());
        return 2;
    }
    int rank = phx_comm_rank(c), size = phx_comm_size(c), odd = rank == size - 1;
    int64_t n = D_N, half = D_N / 2;
    phx_tensor *f = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_tensor *h = phx_tensor_zeros(PHX_F32, 1, &half, phx_cpu());
    phx_tensor *i = phx_tensor_zeros(PHX_I32, 1, &n, phx_cpu());
    phx_status st = PHX_OK;
    for (int k = 0; k < 2 && !st; k++) st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    if (st) {
        printf("rank %d: the agreeing all-reduces failed: %s\n", rank, phx_last_error());
        return 1;
    }
    phx_tensor_fill(f, 1.0);
    double t0 = d_now();
    int at = 2;
    if (mode == D_LATE) {
        if (odd) sleep(D_LATE_S);
        st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    } else if (mode == D_KINDS) {
        st = odd ? phx_comm_broadcast(c, f, 0, NULL) : phx_comm_allreduce(c, f, PHX_SUM, NULL);
    } else if (mode == D_COUNTS) {
        st = phx_comm_allreduce(c, odd ? h : f, PHX_SUM, NULL);
    } else if (mode == D_DTYPES) {
        st = phx_comm_allreduce(c, odd ? i : f, PHX_SUM, NULL);
    } else {
        st = phx_comm_broadcast(c, f, odd ? 1 : 0, NULL);
    }
    if (st == PHX_OK && mode != D_LATE) {
        at = 3;
        st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    }
    double v = 0;
    phx_tensor_get(f, D_N - 1, &v);
    printf("rank %d: case %s: %s at #%d after %.2f s (last element %g): %s\n", rank, name, phx_status_name(st), at,
           d_now() - t0, v, st ? phx_last_error() : "ok");
    phx_tensor_free(f);
    phx_tensor_free(h);
    phx_tensor_free(i);
    phx_comm_free(c);
    printf("rank %d: done\n", rank);
    return st ? 1 : 0;
}
