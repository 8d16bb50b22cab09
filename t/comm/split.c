/* phx_comm_split on the backend PHX_COMM names (threads, gloo, mpi).
 *
 *   t/comm/split              phx_spawn worlds of 2, 3 and 4 ranks
 *                             (threads when PHX_COMM=threads), then a rank
 *                             that stops inside a group (SPLIT_DEAD=0 skips)
 *   mpirun -np N t/comm/split one world of N, from the environment
 *
 * Each rank works out its groups itself (who shares its color, in key
 * order) and checks what the library made against that: group rank and
 * size, all-reduce (sum and max), all-gather, broadcast and
 * reduce-scatter on the groups with values computed from the members'
 * world ranks; two overlapping splits used alternately with async work
 * (hybrid sharding's shape: reduce-scatter in a block, all-reduce across
 * blocks, all-gather in the block, which is the world's all-reduce);
 * PHX_COMM_SPLIT_UNDEFINED; a split of a group; bad arguments; a parent
 * freed before its group. At the end the ranks all-reduce their verdicts
 * and rank 0 prints one TAP line per check. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "src/world/free-port.h"
#include "t/comm_harness.h"

#define MAXC 64 /* checks per world */
#define MAXN 8

typedef struct verdicts {
    int n;
    int32_t ok[MAXC];
    char name[MAXC][120];
    char why[MAXC][240];
} verdicts;

static void check(verdicts *v, int cond, const char *why, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void check(verdicts *v, int cond, const char *why, const char *fmt, ...)
{
    if (v->n >= MAXC) return;
    int k = v->n++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->name[k], sizeof v->name[k], fmt, ap);
    va_end(ap);
    v->ok[k] = cond != 0;
    snprintf(v->why[k], sizeof v->why[k], "%s", cond ? "" : why ? why : "");
}

/* Rank w's value at element i: small integers, so every sum is exact. */
static float val(int w, int64_t i, int salt)
{
    return (float)((w + 1) * 1000 + (int)((i * 7 + salt) % 97));
}

/* The members of this rank's group as the test sees them: world ranks
 * with the same color, ordered by key then world rank. Returns the
 * count; *me gets this rank's place. */
static int members_of(const int *color, const int *key, int n, int rank, int *out, int *me)
{
    int m = 0;
    *me = -1;
    if (color[rank] < 0) return 0;
    for (int r = 0; r < n; r++)
        if (color[r] == color[rank]) out[m++] = r;
    for (int a = 1; a < m; a++) /* insertion sort by (key, rank) */
        for (int b = a;
             b > 0 && (key[out[b - 1]] > key[out[b]] || (key[out[b - 1]] == key[out[b]] && out[b - 1] > out[b])); b--) {
            int t = out[b];
            out[b] = out[b - 1];
            out[b - 1] = t;
        }
    for (int i = 0; i < m; i++)
        if (out[i] == rank) *me = i;
    return m;
}

static phx_tensor *vec(int64_t n)
{
    return phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
}
static float *fp(phx_tensor *t)
{
    return phx_tensor_data(t);
}

/* Every collective on group g (members mem[0..m), this rank at place me)
 * against values computed from the members' world ranks. */
static void collectives(verdicts *v, const char *what, phx_comm *g, const int *mem, int m, int me, int wrank, int salt)
{
    char why[240] = "";
    const int64_t L = 20000, S = 7; /* threads: beyond and within its 64 KiB staging */
    int64_t lens[2] = {S, L};
    int good = 1;
    for (int li = 0; li < 2 && good; li++) {
        int64_t n = lens[li];
        phx_tensor *t = vec(n), *u = vec(n);
        for (int64_t i = 0; i < n; i++) fp(t)[i] = fp(u)[i] = val(wrank, i, salt);
        phx_status st = phx_comm_allreduce(g, t, PHX_SUM, NULL);
        if (!st) st = phx_comm_allreduce(g, u, PHX_MAX, NULL);
        if (st) snprintf(why, sizeof why, "%s", phx_last_error());
        for (int64_t i = 0; i < n && !st && good; i++) {
            double want = 0, mx = -1;
            for (int j = 0; j < m; j++) {
                want += val(mem[j], i, salt);
                mx = fmax(mx, val(mem[j], i, salt));
            }
            if (fp(t)[i] != want || fp(u)[i] != mx) {
                snprintf(why, sizeof why, "count %lld element %lld: sum %g max %g, expected %g and %g", (long long)n,
                         (long long)i, fp(t)[i], fp(u)[i], want, mx);
                good = 0;
            }
        }
        good = good && !st;
        phx_tensor_free(t);
        phx_tensor_free(u);
    }
    check(v, good, why, "%s: all-reduce sum and max over the members", what);

    /* all-gather: block j is member j's */
    const int64_t A = 1000;
    phx_tensor *in = vec(A), *out = vec(A * m);
    for (int64_t i = 0; i < A; i++) fp(in)[i] = val(wrank, i, salt + 1);
    phx_status st = phx_comm_allgather(g, in, out, NULL);
    good = !st;
    snprintf(why, sizeof why, "%s", st ? phx_last_error() : "");
    for (int j = 0; j < m && good; j++)
        for (int64_t i = 0; i < A && good; i++)
            if (fp(out)[j * A + i] != val(mem[j], i, salt + 1)) {
                snprintf(why, sizeof why, "block %d element %lld: %g, expected world rank %d's %g", j, (long long)i,
                         fp(out)[j * A + i], mem[j], val(mem[j], i, salt + 1));
                good = 0;
            }
    check(v, good, why, "%s: all-gather puts member j's block at j", what);

    /* broadcast from group rank 1 % m */
    int root = 1 % m;
    for (int64_t i = 0; i < A; i++) fp(in)[i] = me == root ? val(wrank, i, salt + 2) : -1.0f;
    st = phx_comm_broadcast(g, in, root, NULL);
    good = !st;
    snprintf(why, sizeof why, "%s", st ? phx_last_error() : "");
    for (int64_t i = 0; i < A && good; i++)
        if (fp(in)[i] != val(mem[root], i, salt + 2)) {
            snprintf(why, sizeof why, "element %lld: %g, expected world rank %d's %g", (long long)i, fp(in)[i],
                     mem[root], val(mem[root], i, salt + 2));
            good = 0;
        }
    check(v, good, why, "%s: broadcast from group rank 1 %% size gives its world rank's data", what);

    /* reduce-scatter: group rank me gets the sum of block me */
    for (int64_t i = 0; i < A * m; i++) fp(out)[i] = val(wrank, i, salt + 3);
    st = phx_comm_reduce_scatter(g, out, in, PHX_SUM, NULL);
    good = !st;
    snprintf(why, sizeof why, "%s", st ? phx_last_error() : "");
    for (int64_t i = 0; i < A && good; i++) {
        double want = 0;
        for (int j = 0; j < m; j++) want += val(mem[j], me * A + i, salt + 3);
        if (fp(in)[i] != want) {
            snprintf(why, sizeof why, "element %lld: %g, expected %g", (long long)i, fp(in)[i], want);
            good = 0;
        }
    }
    check(v, good, why, "%s: reduce-scatter gives group rank r the sum of block r", what);
    phx_tensor_free(in);
    phx_tensor_free(out);
}

/* Splits c by color/key (arrays over world ranks), checks rank and size
 * against the test's own grouping; returns the group (NULL if none). */
static phx_comm *split_checked(verdicts *v, const char *what, phx_comm *c, const int *color, const int *key, int n,
                               int rank, int *mem, int *m, int *me)
{
    phx_comm *g = NULL;
    phx_status st = phx_comm_split(c, color[rank], key[rank], &g);
    *m = members_of(color, key, n, rank, mem, me);
    char why[300];
    snprintf(why, sizeof why, "%s; got rank %d of %d, expected %d of %d", st ? phx_last_error() : "status ok",
             phx_comm_rank(g), g ? phx_comm_size(g) : 0, *me, *m);
    int good = !st && (color[rank] < 0 ? g == NULL : g && phx_comm_rank(g) == *me && phx_comm_size(g) == *m);
    check(v, good, why, "%s: the split gives the expected group rank and size", what);
    if (!good && g) {
        phx_comm_free(g);
        g = NULL;
    }
    return g;
}

static void run_checks(verdicts *v, phx_comm *c)
{
    int rank = phx_comm_rank(c), n = phx_comm_size(c);
    int color[MAXN], key[MAXN], mem[MAXN], m, me;
    char what[64];

    /* by parity, key = world rank */
    for (int r = 0; r < n; r++) color[r] = r % 2, key[r] = r;
    phx_comm *par = split_checked(v, "rank % 2", c, color, key, n, rank, mem, &m, &me);
    if (par)
        collectives(v, "rank % 2", par, mem, m, me, rank, 10);
    else
        for (int i = 0; i < 4; i++) check(v, 0, "no group", "rank %% 2: collective %d", i);

    /* node-like blocks of 2, keys reversing the order */
    for (int r = 0; r < n; r++) color[r] = r / 2, key[r] = -r;
    int bmem[MAXN], bm, bme;
    phx_comm *blk = split_checked(v, "blocks of 2, reversed", c, color, key, n, rank, bmem, &bm, &bme);
    if (blk)
        collectives(v, "blocks of 2, reversed", blk, bmem, bm, bme, rank, 20);
    else
        for (int i = 0; i < 4; i++) check(v, 0, "no group", "blocks: collective %d", i);

    /* hybrid: shard = block of 2 in key order, replicate = same place
     * across blocks; used alternately, async */
    int sc[MAXN], sk[MAXN], rc[MAXN], rk[MAXN], smem[MAXN], rmem[MAXN], sm, sme, rm, rme;
    for (int r = 0; r < n; r++) sc[r] = r / 2, sk[r] = r, rc[r] = r % 2, rk[r] = r;
    phx_comm *shard = split_checked(v, "hybrid shard", c, sc, sk, n, rank, smem, &sm, &sme);
    phx_comm *repl = split_checked(v, "hybrid replicate", c, rc, rk, n, rank, rmem, &rm, &rme);
    {
        const int64_t B = 300; /* elements per shard rank */
        int good = shard && repl;
        char why[240] = "no group";
        phx_tensor *full[2] = {vec(B * sm), vec(B * sm)}, *part[2] = {vec(B), vec(B)};
        for (int it = 0; it < 4 && good; it++) {
            /* two steps in flight: reduce-scatter on the shard while the
             * previous step's all-reduce runs on the replicate group */
            phx_work *w1 = NULL, *w2 = NULL;
            for (int s = 0; s < 2; s++)
                for (int64_t i = 0; i < B * sm; i++) fp(full[s])[i] = val(rank, i, 30 + it * 2 + s);
            phx_status st = phx_comm_reduce_scatter(shard, full[0], part[0], PHX_SUM, &w1);
            if (!st) st = phx_comm_reduce_scatter(shard, full[1], part[1], PHX_SUM, &w2);
            if (!st) st = phx_work_wait(w1, -1);
            phx_work *w3 = NULL, *w4 = NULL;
            if (!st) st = phx_comm_allreduce(repl, part[0], PHX_SUM, &w3);
            if (!st) st = phx_work_wait(w2, -1);
            if (!st) st = phx_comm_allreduce(repl, part[1], PHX_SUM, &w4);
            if (!st) st = phx_work_wait(w3, -1);
            phx_work *w5 = NULL;
            if (!st) st = phx_comm_allgather(shard, part[0], full[0], &w5);
            if (!st) st = phx_work_wait(w4, -1);
            if (!st) st = phx_comm_allgather(shard, part[1], full[1], NULL);
            if (!st) st = phx_work_wait(w5, -1);
            phx_work_free(w1), phx_work_free(w2), phx_work_free(w3), phx_work_free(w4), phx_work_free(w5);
            if (st) {
                snprintf(why, sizeof why, "step %d: %s", it, phx_last_error());
                good = 0;
            }
            /* element i of the shard's block = the sum over the shard's
             * members' replicate groups: the world's sum when blocks are
             * full (n even); otherwise computed group by group */
            for (int s = 0; s < 2 && good; s++)
                for (int64_t i = 0; i < B * sm && good; i++) {
                    int blk_of = (int)(i / B), owner = smem[blk_of];
                    double want = 0;
                    for (int q = 0; q < n; q++) {
                        if (rc[q] != rc[owner]) continue;
                        int qm[MAXN], qme, qn = members_of(sc, sk, n, q, qm, &qme);
                        for (int j = 0; j < qn; j++) want += val(qm[j], (int64_t)qme * B + i % B, 30 + it * 2 + s);
                    }
                    if (fp(full[s])[i] != want) {
                        snprintf(why, sizeof why, "step %d buffer %d element %lld: %g, expected %g", it, s,
                                 (long long)i, fp(full[s])[i], want);
                        good = 0;
                    }
                    if (n % 2 == 0 && good) { /* and then it is the world's all-reduce */
                        double world = 0;
                        for (int q = 0; q < n; q++) world += val(q, i, 30 + it * 2 + s);
                        if (want != world) {
                            snprintf(why, sizeof why, "element %lld: hybrid %g, world all-reduce %g", (long long)i,
                                     want, world);
                            good = 0;
                        }
                    }
                }
        }
        for (int s = 0; s < 2; s++) phx_tensor_free(full[s]), phx_tensor_free(part[s]);
        check(v, good, why, "hybrid: two overlapping groups used alternately (async) give the expected sums");
    }

    /* PHX_COMM_SPLIT_UNDEFINED: world rank 0 joins no group */
    for (int r = 0; r < n; r++) color[r] = r == 0 ? PHX_COMM_SPLIT_UNDEFINED : 7, key[r] = 0;
    int umem[MAXN], um, ume;
    phx_comm *und = split_checked(v, "UNDEFINED for rank 0", c, color, key, n, rank, umem, &um, &ume);
    {
        phx_tensor *t = vec(5);
        for (int i = 0; i < 5; i++) fp(t)[i] = (float)(rank + 1);
        phx_status st = und ? phx_comm_allreduce(und, t, PHX_SUM, NULL) : PHX_OK;
        double want = rank == 0 ? 1 : (double)n * (n + 1) / 2 - 1;
        char why[240];
        snprintf(why, sizeof why, "%s; got %g, expected %g", st ? phx_last_error() : "ok", fp(t)[0], want);
        check(v, !st && fp(t)[0] == want, why, "UNDEFINED: the others' group all-reduces without rank 0");
        phx_tensor_free(t);
    }

    /* a split of a group: the parity group reversed */
    {
        phx_comm *rev = NULL;
        phx_status st = par ? phx_comm_split(par, 0, -phx_comm_rank(par), &rev) : PHX_EINVAL;
        int good = !st && rev && phx_comm_rank(rev) == phx_comm_size(par) - 1 - phx_comm_rank(par);
        phx_tensor *t = vec(3);
        for (int i = 0; i < 3; i++) fp(t)[i] = (float)phx_comm_rank(par);
        if (good) st = phx_comm_broadcast(rev, t, 0, NULL); /* from the parity group's last */
        good = good && !st && fp(t)[0] == (float)(phx_comm_size(par) - 1);
        snprintf(what, sizeof what, "%s", st ? phx_last_error() : "");
        check(v, good, what, "a group split again (reversed) ranks and broadcasts as expected");
        phx_tensor_free(t);
        phx_comm_free(rev);
    }

    /* bad arguments */
    {
        phx_status st = phx_comm_split(c, 0, 0, NULL);
        check(v, st == PHX_EINVAL && strstr(phx_last_error(), "sub is NULL"), phx_last_error(),
              "NULL sub: PHX_EINVAL naming it");
        phx_comm *g = (phx_comm *)&st;
        st = phx_comm_split(c, rank == n - 1 ? -5 : 0, 0, &g);
        char needle[64];
        snprintf(needle, sizeof needle, "rank %d of", n - 1);
        check(v, st == PHX_EINVAL && g == NULL && strstr(phx_last_error(), needle) && strstr(phx_last_error(), "-5"),
              phx_last_error(), "a color of -5 on the last rank: PHX_EINVAL on every rank, naming it, sub NULL");
        phx_comm *one = (phx_comm *)&st;
        st = phx_comm_split(NULL, 3, 0, &one);
        check(v, st == PHX_OK && one == NULL, phx_last_error(),
              "a NULL communicator (a world of one) splits into NULL");
    }

    /* the parent freed first: its group lives on; the freed one refuses */
    {
        phx_comm *dup = NULL, *half = NULL;
        phx_status st = phx_comm_split(c, 0, rank, &dup);
        if (!st) st = phx_comm_split(dup, rank % 2, rank, &half);
        char why[240];
        snprintf(why, sizeof why, "%s", st ? phx_last_error() : "");
        phx_comm_free(dup);
        phx_comm *again = NULL;
        phx_status s2 = dup ? phx_comm_split(dup, 0, 0, &again) : PHX_EINVAL;
        check(v, !st && s2 == PHX_EINVAL && again == NULL && strstr(phx_last_error(), "freed"),
              st ? why : phx_last_error(), "split of a freed communicator: PHX_EINVAL saying it was freed");
        phx_tensor *t = vec(4);
        s2 = dup ? phx_comm_allreduce(dup, t, PHX_SUM, NULL) : PHX_EINVAL;
        check(v, s2 == PHX_EINVAL && strstr(phx_last_error(), "freed"), phx_last_error(),
              "all-reduce on a freed communicator: PHX_EINVAL");
        for (int i = 0; i < 4; i++) fp(t)[i] = 1;
        s2 = half ? phx_comm_allreduce(half, t, PHX_SUM, NULL) : PHX_EINVAL;
        int hm = (n - rank % 2 + 1) / 2; /* ranks of my parity */
        snprintf(why, sizeof why, "%s; got %g, expected %d", s2 ? phx_last_error() : "ok", fp(t)[0], hm);
        check(v, !s2 && fp(t)[0] == (float)hm, why, "its group still all-reduces after the parent was freed");
        phx_tensor_free(t);
        phx_comm_free(half); /* frees what the parent left too */
    }

    /* free in mixed order: a group before and one after its siblings */
    phx_comm_free(repl);
    phx_comm_free(par);
    phx_comm_free(und);
    phx_comm_free(shard);
    phx_comm_free(blk);
}

/* ------------------------------------------------------------ drivers */

typedef struct report {
    int printed, failed;
} report;

typedef struct spawn_arg {
    int base;
    report *rep;
} spawn_arg;

/* All-reduces every rank's verdicts (min) and has rank 0 print them,
 * numbered from base; the first failing rank's reason as a diagnostic. */
static int publish(phx_comm *c, verdicts *v, int base, report *rep, const char *prefix)
{
    int64_t n = MAXC + 1;
    phx_tensor *t = phx_tensor_zeros(PHX_I32, 1, &n, phx_cpu()), *who = phx_tensor_zeros(PHX_I32, 1, &n, phx_cpu());
    int32_t *a = phx_tensor_data(t), *w = phx_tensor_data(who);
    for (int k = 0; k < MAXC; k++) {
        a[k] = k < v->n ? v->ok[k] : 1;
        w[k] = k < v->n && !v->ok[k] ? phx_comm_rank(c) : 1 << 20;
    }
    a[MAXC] = v->n;
    w[MAXC] = -v->n;
    phx_status st = phx_comm_allreduce(c, t, PHX_MIN, NULL);
    if (!st) st = phx_comm_allreduce(c, who, PHX_MIN, NULL);
    if (st) fprintf(stderr, "rank %d: gathering verdicts: %s\n", phx_comm_rank(c), phx_last_error());
    int rank = phx_comm_rank(c);
    /* each rank's reasons, in rank order, so rank 0 can print the first */
    for (int q = 0; q < phx_comm_size(c); q++) {
        if (q == rank)
            for (int k = 0; k < v->n; k++)
                if (!v->ok[k] && w[k] == rank) fprintf(stderr, "# rank %d: %s: %s\n", rank, v->name[k], v->why[k]);
        phx_comm_barrier(c, NULL);
    }
    if (rank == 0) {
        tap_run_ = base;
        for (int k = 0; k < v->n; k++) ok(!st && a[k], "%s%s", prefix, v->name[k]);
        if (st || a[MAXC] != -w[MAXC]) ok(0, "%severy rank ran the same checks (%d to %d)", prefix, a[MAXC], -w[MAXC]);
        if (rep) {
            rep->printed = tap_run_ - base;
            rep->failed = tap_failed_;
        }
    }
    phx_tensor_free(t);
    phx_tensor_free(who);
    return st != PHX_OK;
}

static int spawned(int rank, void *arg)
{
    spawn_arg *sa = arg;
    setvbuf(stdout, NULL, _IOLBF, 0);
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    verdicts *v = calloc(1, sizeof *v);
    run_checks(v, c);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s world %d: ", phx_comm_backend(c), phx_comm_size(c));
    int rc = publish(c, v, sa ? sa->base : 0, sa ? sa->rep : NULL, prefix);
    free(v);
    phx_comm_free(c);
    return rc;
}

/* ---- a rank that stops inside a group */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static h_shared *H;

/* World of 4 split by parity; world rank 3 (group rank 1 of the odd
 * group) dies (gloo: SIGKILL mid-all-reduce) or leaves (threads). World
 * rank 1 must fail within 10 s naming group rank 1 as world rank 3; the
 * even group is not touched. */
static int dead_rank(int rank, void *arg)
{
    int kill_it = *(int *)arg;
    phx_comm *c, *g = NULL;
    if (phx_comm_init(NULL, &c)) return 1;
    phx_status st = phx_comm_split(c, rank % 2, rank, &g);
    h_check(H, rank, !st && g, phx_last_error(), "dead rank: the parity split");
    int64_t n = 1 << 20;
    phx_tensor *t = vec(n);
    if (g) phx_comm_allreduce(g, t, PHX_SUM, NULL); /* every link used once */
    if (rank == 3) {
        if (kill_it) {
            phx_work *w;
            phx_comm_allreduce(g, t, PHX_SUM, &w);
            usleep(2000);
            raise(SIGKILL);
        }
        phx_tensor_free(t);
        phx_comm_free(g);
        phx_comm_free(c);
        return 0;
    }
    double t0 = now(), dt = 0;
    st = PHX_OK;
    for (int i = 0; i < 100 && !st && rank == 1; i++) {
        t0 = now();
        st = phx_comm_allreduce(g, t, PHX_SUM, NULL);
        dt = now() - t0;
    }
    char why[600];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(st), dt, phx_last_error());
    if (rank == 1) {
        h_check(H, rank, (kill_it ? st == PHX_EPEER || st == PHX_ETIMEOUT : st == PHX_ETIMEOUT) && dt < 10.0, why,
                "dead rank: its group peer fails (%s) in under 10 s", kill_it ? "PHX_EPEER" : "PHX_ETIMEOUT");
        h_check(H, rank, strstr(phx_last_error(), "group rank 1 is world rank 3") != NULL, why,
                "dead rank: ... and the message says group rank 1 is world rank 3");
        snprintf(H->r[rank].why[H_MAX_CHECKS - 1], sizeof H->r[0].why[0], "%.190s", why);
    } else {
        st = phx_comm_allreduce(g, t, PHX_SUM, NULL); /* the even group is fine */
        /* stay (rank 0 hosts the store) until rank 1 has its answer */
        for (double end = now() + 20; H->r[1].n < 3 && now() < end;) usleep(10000);
        h_check(H, rank, st == PHX_OK, phx_last_error(), "dead rank: its group peer fails (%s) in under 10 s",
                kill_it ? "PHX_EPEER" : "PHX_ETIMEOUT");
        h_check(H, rank, st == PHX_OK, phx_last_error(),
                "dead rank: ... and the message says group rank 1 is world rank 3");
    }
    phx_tensor_free(t);
    phx_comm_free(g);
    if (!kill_it) phx_comm_free(c); /* gloo: the world has lost a rank; exit */
    return 0;
}

static void run_dead(const char *be)
{
    H = h_new(4);
    int threads = !strcmp(be, "threads");
    int kill_it = !threads;
    if (threads) {
        phx_spawn(4, dead_rank, &kill_it);
    } else {
        /* forked by hand: nothing stops the survivors but the backend */
        char port[16];
        snprintf(port, sizeof port, "%d", px_free_port());
        pid_t pids[4];
        fflush(NULL);
        for (int r = 0; r < 4; r++)
            if ((pids[r] = fork()) == 0) {
                char b[8];
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                snprintf(b, sizeof b, "%d", r);
                setenv("RANK", b, 1);
                setenv("WORLD_SIZE", "4", 1);
                setenv("MASTER_ADDR", "127.0.0.1", 1);
                setenv("MASTER_PORT", port, 1);
                _exit(dead_rank(r, &kill_it));
            }
        double end = now() + 40;
        int left = 4, status[4] = {0};
        while (left && now() < end) {
            for (int r = 0; r < 4; r++)
                if (pids[r] > 0 && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) pids[r] = -1, left--;
            usleep(20000);
        }
        for (int r = 0; r < 4; r++)
            if (pids[r] > 0) kill(pids[r], SIGKILL), waitpid(pids[r], &status[r], 0);
        ok(left == 0, "%s dead rank: every process ended by itself", be);
    }
    H->nranks = 3; /* world rank 3 is gone */
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s ", be);
    h_print(H, 0, prefix);
    if (H->r[1].why[H_MAX_CHECKS - 1][0]) diag("rank 1: %s", H->r[1].why[H_MAX_CHECKS - 1]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *launched = getenv("RANK") ? getenv("RANK") : getenv("OMPI_COMM_WORLD_RANK");
    if (launched) { /* under phxrun or mpirun: one world from the environment */
        int rc = spawned(0, NULL);
        if (!strcmp(launched, "0")) return done_testing() || rc;
        return rc;
    }
    const char *be = getenv("PHX_COMM") ? getenv("PHX_COMM") : "threads";
    if (!h_have(be)) skip_all("this comm plugin is not built here");
    if (!getenv("PHX_TIMEOUT")) setenv("PHX_TIMEOUT", "30", 1);
    report *rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int n = 2; n <= 4; n++) {
        int base = tap_run_;
        rep->printed = rep->failed = 0;
        spawn_arg a = {base, rep};
        phx_status st = phx_spawn(n, spawned, &a);
        tap_run_ = base + rep->printed;
        tap_failed_ = rep->failed > tap_failed_ ? rep->failed : tap_failed_;
        if (st) diag("world %d: %s", n, phx_last_error());
        ok(st == PHX_OK && rep->printed > 20, "%s world %d: every rank returned 0 and rank 0 printed %d checks", be, n,
           rep->printed);
    }
    const char *dead = getenv("SPLIT_DEAD");
    if (!dead || strcmp(dead, "0")) {
        setenv("PHX_TIMEOUT", "5", 1);
        run_dead(be);
    }
    return done_testing();
}
