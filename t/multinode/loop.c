/* A rank program for the multi-node and Slurm tests (under phxrun in
 * network namespaces, or srun): all-reduces a small and a 256 KiB tensor
 * in a loop for MN_SECONDS seconds (default 4), one pair every 20 ms, and
 * checks each result (every rank contributes rank + 1). After the first
 * pair it writes its pid to MN_READY.RANK (MN_READY set), so the harness
 * knows the world is up and whom to kill. With MN_SHOW_THREADS set each
 * rank first prints "rank R: N threads" (phx_num_threads). Rank 0 prints
 * "loop: N rounds, all right" at the end; a rank that fails prints
 * "rank R: PHX_...: message" on stderr and exits 1, after MN_LINGER
 * seconds (a rank 0 slow to exit keeps its store up that long). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static phx_status round_of(phx_comm *c, phx_tensor *t, float want, int *wrong)
{
    float *p = phx_tensor_data(t);
    int64_t n = phx_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(phx_comm_rank(c) + 1);
    phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    for (int64_t i = 0; st == PHX_OK && i < n; i++)
        if (p[i] != want) {
            (*wrong)++;
            break;
        }
    return st;
}

int main(void)
{
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        fprintf(stderr, "init: %s\n", phx_last_error());
        return 1;
    }
    int rank = phx_comm_rank(c), size = phx_comm_size(c), wrong = 0, rounds = 0;
    if (getenv("MN_SHOW_THREADS")) printf("rank %d: %d threads\n", rank, phx_num_threads());
    const char *secs_s = getenv("MN_SECONDS"), *ready = getenv("MN_READY");
    double secs = secs_s ? atof(secs_s) : 4, end = now() + secs;
    float want = (float)size * (float)(size + 1) / 2;
    int64_t small = 16, big = 64 << 10, one = 1;
    phx_tensor *a = phx_tensor_zeros(PHX_F32, 1, &small, phx_cpu());
    phx_tensor *b = phx_tensor_zeros(PHX_F32, 1, &big, phx_cpu());
    phx_tensor *flag = phx_tensor_zeros(PHX_F32, 1, &one, phx_cpu());
    phx_status st = a && b && flag ? PHX_OK : PHX_ENOMEM;
    while (st == PHX_OK) {
        if ((st = round_of(c, a, want, &wrong)) || (st = round_of(c, b, want, &wrong))) break;
        if (rounds++ == 0 && ready) {
            char path[4096];
            snprintf(path, sizeof path, "%s.%d", ready, rank);
            FILE *f = fopen(path, "w");
            if (f) fprintf(f, "%d\n", (int)getpid()), fclose(f);
        }
        /* every rank ends at the same round: rank 0's clock decides. An
         * all-reduce, not a broadcast from rank 0: rank 0 must not leave
         * before the others have its answer (its exit with bytes unread
         * resets the connections, losing what it sent last). */
        float *more = phx_tensor_data(flag);
        *more = rank == 0 ? (float)(now() < end) : 0;
        if ((st = phx_comm_allreduce(c, flag, PHX_MAX, NULL)) || !*more) break;
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    if (st) fprintf(stderr, "rank %d: %s: %s\n", rank, phx_status_name(st), phx_last_error());
    if (st && getenv("MN_LINGER")) {
        double t = atof(getenv("MN_LINGER"));
        nanosleep(&(struct timespec){(time_t)t, (long)((t - (double)(time_t)t) * 1e9)}, NULL);
    }
    if (!st && rank == 0) printf("loop: %d rounds, %s\n", rounds, wrong ? "some wrong" : "all right");
    phx_tensor_free(a);
    phx_tensor_free(b);
    phx_tensor_free(flag);
    phx_comm_free(c);
    return st || wrong ? 1 : 0;
}
