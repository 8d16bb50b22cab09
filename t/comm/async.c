/* Asynchronous collectives on the backend PHX_COMM names (phx_spawn, world
 * COMM_WORLD or 3): many issued back to back without waiting complete in
 * issue order with correct results, a chain whose result depends on that
 * order comes out right, and a steady loop of async collectives makes no
 * host allocation. */
#include <stdlib.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"

#define NOPS 48

static h_shared *H;

static phx_tensor *filled(phx_dtype dt, int64_t n, double v)
{
    phx_tensor *t = phx_tensor_new(dt, 1, &n, phx_cpu());
    phx_tensor_fill(t, v);
    return t;
}

/* 1 when every element of t equals v. */
static int all_eq(const phx_tensor *t, double v)
{
    for (int64_t i = 0; i < phx_tensor_numel(t); i++) {
        double x;
        phx_tensor_get(t, i, &x);
        if (x != v) return 0;
    }
    return 1;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c;
    char why[200] = "";
    if (phx_comm_init(NULL, &c)) {
        h_check(H, rank, 0, phx_last_error(), "phx_comm_init");
        return 1;
    }
    const int n = phx_comm_size(c);
    const double S = n * (n + 1) / 2.0; /* sum over ranks of rank + 1 */

    /* 1. back to back: a big one first, then small ones of every kind */
    phx_tensor *t[NOPS], *o[NOPS];
    phx_work *w[NOPS];
    int issued = 1;
    for (int k = 0; k < NOPS; k++) {
        int64_t cnt = k == 0 ? 4000000 : 1 + (k * 37) % 3000;
        t[k] = filled(k % 2 ? PHX_F32 : PHX_I64, cnt, rank + 1);
        o[k] = NULL;
        phx_status st;
        if (k % 4 == 3) { /* allgather of rank+1 */
            o[k] = filled(phx_tensor_dtype(t[k]), cnt * n, 0);
            st = phx_comm_allgather(c, t[k], o[k], &w[k]);
        } else if (k % 8 == 5) {
            st = phx_comm_broadcast(c, t[k], k % n, &w[k]);
        } else {
            st = phx_comm_allreduce(c, t[k], PHX_SUM, &w[k]);
        }
        if (st) {
            issued = 0;
            snprintf(why, sizeof why, "op %d: %s", k, phx_last_error());
            break;
        }
    }
    h_check(H, rank, issued, why, "%d collectives issued without waiting", NOPS);
    if (!issued) return 1;
    /* Watch completions as they come: when k is complete, all before it are. */
    int inorder = 1, seen = 0;
    while (seen < NOPS) {
        for (int k = NOPS - 1; k >= 0; k--) {
            if (!phx_work_test(w[k])) continue;
            for (int j = 0; j < k; j++)
                if (!phx_work_test(w[j])) {
                    inorder = 0;
                    snprintf(why, sizeof why, "op %d complete before op %d", k, j);
                }
            seen = k + 1;
            break;
        }
    }
    h_check(H, rank, inorder, why, "they complete in issue order");
    int good = 1;
    for (int k = NOPS - 1; k >= 0; k--) { /* wait in reverse order */
        phx_status st = phx_work_wait(w[k], -1);
        int right;
        if (k % 4 == 3) {
            right = 1;
            for (int q = 0; q < n && right; q++) {
                int64_t cnt = phx_tensor_numel(t[k]);
                phx_tensor *blk = phx_tensor_view(o[k], q * cnt, 1, &cnt);
                right = all_eq(blk, q + 1);
                phx_tensor_free(blk);
            }
        } else if (k % 8 == 5) {
            right = all_eq(t[k], k % n + 1);
        } else {
            right = all_eq(t[k], S);
        }
        if (st || !right) {
            good = 0;
            snprintf(why, sizeof why, "op %d: status %s, values %s", k, phx_status_name(st), right ? "right" : "wrong");
        }
        phx_work_free(w[k]);
        phx_tensor_free(t[k]);
        phx_tensor_free(o[k]);
    }
    h_check(H, rank, good, why, "every result is right");

    /* 2. a chain that only comes out right in issue order */
    int64_t one = 1, big = 1 << 20;
    phx_tensor *a = filled(PHX_F32, big, rank + 1), *g = filled(PHX_F32, n, 0);
    phx_tensor *a0 = phx_tensor_view(a, 0, 1, &one);
    phx_work *w1, *w2, *w3, *w4;
    phx_comm_allreduce(c, a, PHX_SUM, &w1); /* a = S everywhere */
    phx_comm_allgather(c, a0, g, &w2); /* g = [S, ..., S] if after w1 */
    phx_comm_allreduce(c, g, PHX_MAX, &w3); /* unchanged */
    phx_comm_broadcast(c, a, n - 1, &w4); /* a stays S */
    phx_status st = phx_work_wait(w4, -1);
    st = st ? st : phx_work_wait(w3, -1);
    st = st ? st : phx_work_wait(w2, -1);
    st = st ? st : phx_work_wait(w1, -1);
    h_check(H, rank, !st && all_eq(g, S) && all_eq(a, S), st ? phx_last_error() : "wrong values",
            "a dependent chain (allreduce -> allgather of its result -> ...) is right");
    phx_work_free(w1);
    phx_work_free(w2);
    phx_work_free(w3);
    phx_work_free(w4);

    /* 3. a steady loop of async collectives allocates nothing */
    uint64_t before = 0;
    for (int it = 0; it < 30; it++) {
        if (it == 10) before = phx_alloc_count();
        phx_comm_allreduce(c, a, PHX_AVG, &w1);
        phx_comm_allgather(c, a0, g, &w2);
        phx_comm_barrier(c, &w3);
        phx_comm_allreduce(c, g, PHX_SUM, NULL);
        phx_work_wait(w1, -1);
        phx_work_free(w1);
        phx_work_free(w2);
        phx_work_free(w3);
    }
    uint64_t delta = phx_alloc_count() - before;
    snprintf(why, sizeof why, "%llu allocations in 20 steps", (unsigned long long)delta);
    h_check(H, rank, delta == 0, why, "steady-state async collectives make no host allocation");
    phx_tensor_free(a0); /* after its last use in part 3 (was freed before it) */
    phx_tensor_free(a);
    phx_tensor_free(g);
    phx_comm_free(c);
    return 0;
}

/* Under mpirun: one world from the environment. Rank 0 prints its checks;
 * each rank's exit status says whether all of its own passed. */
static int launched(int rank)
{
    if (rank >= H_MAX_RANKS) return 0; /* the harness records 8 ranks */
    H = h_new(1);
    rank_main(rank, NULL);
    const h_rank *me = &H->r[rank];
    int bad = me->n != 5;
    for (int k = 0; k < me->n; k++)
        if (!me->ok[k]) {
            bad = 1;
            fprintf(stderr, "rank %d: not ok: %s: %s\n", rank, me->name[k], me->why[k]);
        }
    if (rank == 0) {
        plan(5);
        int printed = h_print(H, 0, "launched: ");
        while (printed++ < 5) ok(0, "launched: check not reached");
        return done_testing() || bad;
    }
    return bad;
}

/* COMM_BACKENDS: the backends to run (default "threads gloo"), each in a
 * phx_spawn world of COMM_WORLD ranks (default 3); under mpirun, the world
 * it started on the backend PHX_COMM names. */
int main(void)
{
    if (getenv("OMPI_COMM_WORLD_RANK")) return launched(atoi(getenv("OMPI_COMM_WORLD_RANK")));
    char list[128], *bes[8], *sv;
    int n = getenv("COMM_WORLD") ? atoi(getenv("COMM_WORLD")) : 3, nb = 0;
    snprintf(list, sizeof list, "%s", getenv("COMM_BACKENDS") ? getenv("COMM_BACKENDS") : "threads gloo");
    for (char *tok = strtok_r(list, " ", &sv); tok && nb < 8; tok = strtok_r(NULL, " ", &sv)) bes[nb++] = tok;
    plan(5 * nb);
    H = h_new(n);
    for (int b = 0; b < nb; b++) {
        const char *be = bes[b];
        if (!h_have(be)) {
            skip(5, "backend not in this build");
            continue;
        }
        h_reset(H, n);
        setenv("PHX_COMM", be, 1);
        phx_status st = phx_spawn(n, rank_main, NULL);
        if (st) diag("phx_spawn: %s", phx_last_error());
        char prefix[96];
        snprintf(prefix, sizeof prefix, "%s world %d: ", be, n);
        int printed = h_print(H, 0, prefix);
        while (printed++ < 5) ok(0, "%scheck not reached", prefix);
    }
    return done_testing();
}
