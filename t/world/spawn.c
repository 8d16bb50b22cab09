/* phx_spawn: processes (the environment each rank sees, the first failing
 * rank named, the others stopped) and threads (failures named, a blocked
 * sibling released at once). */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static h_shared *H;

static int env_rank(int rank, void *arg)
{
    (void)arg;
    const char *v[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    char got[256] = "", want[64];
    for (int i = 0; i < 6; i++) {
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "%s%s", i ? " " : "", getenv(v[i]) ? getenv(v[i]) : "-");
    }
    snprintf(want, sizeof want, "%d 4 %d 4 127.0.0.1 ", rank, rank);
    h_check(H, rank, strncmp(got, want, strlen(want)) == 0, got, "rank sees RANK WORLD_SIZE LOCAL_* MASTER_ADDR");
    H->value[rank] = atoi(getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
    phx_world w = PHX_WORLD_INIT;
    h_check(H, rank, phx_world_from_env(&w) == PHX_OK && w.rank == rank && w.size == 4, phx_last_error(),
            "phx_world_from_env agrees");
    return 0;
}

static int fail_rank2(int rank, void *arg)
{
    (void)arg;
    if (rank == 2) {
        usleep(200000);
        return 3;
    }
    sleep(60); /* stopped by phx_spawn long before */
    return 0;
}

static int signal_rank1(int rank, void *arg)
{
    (void)arg;
    if (rank == 1) raise(SIGKILL);
    sleep(60);
    return 0;
}

/* threads: rank 1 fails at once; rank 0 is blocked waiting for it (in the
 * collective init, or in an all-reduce if init got through). */
static int blocked(int rank, void *arg)
{
    (void)arg;
    if (rank == 1) return 4;
    phx_comm *c = NULL;
    int64_t n = 16;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    double t0 = now();
    phx_status st = phx_comm_init(NULL, &c);
    if (st == PHX_OK) st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    H->value[0] = now() - t0;
    char why[600];
    snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
    h_check(H, 0, st == PHX_EPEER && strstr(phx_last_error(), "rank 1 returned 4") != NULL, why,
            "threads: a rank blocked waiting for a failed one gets PHX_EPEER naming it");
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    plan(13);
    H = h_new(4);
    unsetenv("PHX_COMM");
    unsetenv("MASTER_PORT");
    unsetenv("MASTER_ADDR");
    is_int(phx_spawn(4, env_rank, NULL), PHX_OK, "processes: 4 ranks succeed");
    h_print(H, 0, "processes: ");
    ok(H->value[0] > 0 && H->value[0] == H->value[1] && H->value[0] == H->value[3],
       "processes: one free MASTER_PORT shared by all (%g)", H->value[0]);
    ok(getenv("MASTER_PORT") == NULL, "processes: the parent's environment is unchanged");

    double t0 = now();
    phx_status st = phx_spawn(3, fail_rank2, NULL);
    double dt = now() - t0;
    is_int(st, PHX_EPEER, "processes: a rank returning 3 is PHX_EPEER");
    like(phx_last_error(), "rank 2 exited with status 3", "... naming the first failed rank and its status");
    ok(dt < 10, "... the sleeping ranks were stopped (%.2f s)", dt);

    st = phx_spawn(2, signal_rank1, NULL);
    like(phx_last_error(), "rank 1 was killed by signal 9", "processes: a rank killed by a signal is named");

    setenv("PHX_COMM", "threads", 1);
    h_reset(H, 1);
    t0 = now();
    st = phx_spawn(2, blocked, NULL);
    dt = now() - t0;
    is_int(st, PHX_EPEER, "threads: a failing rank makes phx_spawn PHX_EPEER");
    like(phx_last_error(), "the first: rank 1 returned 4", "... naming the thread rank and its result");
    h_print(H, 0, "");
    ok(H->value[0] < 3.0 && dt < 5.0, "threads: released after %.2f s, not PHX_TIMEOUT", H->value[0]);
    unsetenv("PHX_COMM");
    return done_testing();
}
