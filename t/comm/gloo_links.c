/* gloo's links (plugins/comm/gloo/gloo-links.h), the path of every
 * all-reduce but halving-doubling:
 *   bits: world 3 (a folded, non-power-of-two world) gives the same bits
 *     over the links (spinning, and blocking at once with
 *     PHX_GLOO_SPIN_US=0) as over gloo's transport (PHX_GLOO_LINKS=0), on
 *     every rank: a 4000-byte f32 sum and a bf16 avg (recursive doubling),
 *     a 2 MB f32 sum (the ring, several receive pieces per chunk), a
 *     100 KB bf16 avg and an 80 KB f16 sum (the ring); and with
 *     PHX_GLOO_ALGO=rd the large ones by recursive doubling, links against
 *     gloo's transport;
 *   desync: ranks that all-reduce different sizes get PHX_EDESYNC naming
 *     both collectives long before PHX_TIMEOUT (the headers disagree),
 *     small (16 and 32 bytes) and large (1.2 and 2.4 MB: the ring, each
 *     rank sending while it reads the header);
 *   dead: a peer that exits makes the all-reduce fail with PHX_EPEER naming
 *     it, long before PHX_TIMEOUT, small and large (mid-ring);
 *   hang: a peer that issues nothing gives PHX_ETIMEOUT after PHX_TIMEOUT,
 *     and the late peer fails by its second all-reduce, small and large;
 *   chain: world 3, rank 2 silent during a ring all-reduce: rank 1, which
 *     waits for rank 0 (itself waiting for rank 2), names peer rank 2 too;
 *   a bad PHX_GLOO_SPIN_US or PHX_GLOO_LINKS fails phx_comm_init with
 *   PHX_EINVAL naming the variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/tap.h"

#define W 3
#define N 1000 /* f32: 4000 bytes, recursive doubling */
#define NB 7 /* bf16 */
#define NF 500009 /* f32: 2 MB, the ring (chunks of 3 receive pieces) */
#define NBB 50001 /* bf16: 100 KB, the ring */
#define NH 40001 /* f16: 80 KB, the ring */
#define SMALL 4 /* elements of the out-of-step checks' all-reduces (and twice that) */
#define LARGE 300000

/* paths: links, links without spin, gloo's transport; then forced
 * recursive doubling over the links and over gloo's transport */
enum { LINKS, LINKS_BLOCK, GLOO, LINKS_RD, GLOO_RD, NPATH };
enum { BITS, DESYNC, DEAD, HANG, CHAIN, BADENV };

typedef struct result {
    float f[NPATH][W][N];
    uint16_t b[NPATH][W][NB];
    float fl[NPATH][W][NF];
    uint16_t bl[NPATH][W][NBB];
    uint16_t hl[NPATH][W][NH];
} result;

static h_shared *H;
static result *R;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct arg {
    int mode, path;
    int64_t n; /* the out-of-step checks' all-reduce (SMALL or LARGE elements) */
} arg;

/* Values that round differently in another order of summation. */
static void fill(phx_tensor *t, int rank, int salt)
{
    phx_rng *g = phx_rng_new((uint64_t)(100 * rank + salt));
    phx_rng_normal(g, t, 0, 1000);
    phx_rng_free(g);
}

/* All-reduces t with op, filled for this rank; the result goes to out. */
static phx_status reduce_into(phx_comm *c, int rank, phx_dtype dt, int64_t n, phx_reduce_op op, int salt, void *out)
{
    phx_tensor *t = phx_tensor_new(dt, 1, &n, phx_cpu());
    fill(t, rank, salt);
    phx_status st = phx_comm_allreduce(c, t, op, NULL);
    memcpy(out, phx_tensor_data(t), phx_tensor_nbytes(t));
    phx_tensor_free(t);
    return st;
}

static void run_bits(phx_comm *c, int rank, int path)
{
    phx_status st = reduce_into(c, rank, PHX_F32, N, PHX_SUM, 1, R->f[path][rank]);
    if (!st) st = reduce_into(c, rank, PHX_BF16, NB, PHX_AVG, 2, R->b[path][rank]);
    if (!st) st = reduce_into(c, rank, PHX_F32, NF, PHX_SUM, 3, R->fl[path][rank]);
    if (!st) st = reduce_into(c, rank, PHX_BF16, NBB, PHX_AVG, 4, R->bl[path][rank]);
    if (!st) st = reduce_into(c, rank, PHX_F16, NH, PHX_SUM, 5, R->hl[path][rank]);
    if (!st) st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "all-reduces and a barrier succeed");
}

/* Whether path p's rank r and path q's rank s hold the same bits. */
static int same(int p, int q, int r, int s)
{
    return !memcmp(R->f[p][r], R->f[q][s], sizeof R->f[0][0]) && !memcmp(R->b[p][r], R->b[q][s], sizeof R->b[0][0]) &&
        !memcmp(R->fl[p][r], R->fl[q][s], sizeof R->fl[0][0]) &&
        !memcmp(R->bl[p][r], R->bl[q][s], sizeof R->bl[0][0]) && !memcmp(R->hl[p][r], R->hl[q][s], sizeof R->hl[0][0]);
}

static int body(int rank, void *varg)
{
    const arg *a = varg;
    phx_comm *c;
    phx_status st = phx_comm_init(NULL, &c);
    if (a->mode == BADENV) {
        h_check(H, rank, st == PHX_EINVAL && strstr(phx_last_error(), "PHX_GLOO_"), phx_last_error(),
                "PHX_EINVAL naming the variable");
        if (!st) phx_comm_free(c);
        return 0;
    }
    if (st) return 10;
    if (a->mode == BITS) {
        run_bits(c, rank, a->path);
        phx_comm_free(c);
        return 0;
    }
    int64_t n1 = a->n, n2 = 2 * a->n;
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 1, &n1, phx_cpu()), *y = phx_tensor_zeros(PHX_F32, 1, &n2, phx_cpu());
    st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "an agreeing all-reduce");
    double t0 = now();
    char why[700];
    if (a->mode == DESYNC) {
        st = phx_comm_allreduce(c, rank == 0 ? x : y, PHX_SUM, NULL);
        snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
        char want[160];
        snprintf(want, sizeof want,
                 "issued allreduce(count=%lld, f32, sum) as collective #1 but rank %d issued allreduce(count=%lld, "
                 "f32, sum)",
                 (long long)(rank == 0 ? n1 : n2), 1 - rank, (long long)(rank == 0 ? n2 : n1));
        h_check(H, rank, st == PHX_EDESYNC && strstr(phx_last_error(), want), why,
                "PHX_EDESYNC naming both collectives");
    } else if (a->mode == CHAIN) {
        /* world 3, rank 2 silent: in the ring rank 0 waits for rank 2 and
         * rank 1 for rank 0 (whose data is sent eagerly): both must blame
         * rank 2, the end of the chain of waits */
        if (rank == 2) {
            sleep(4);
        } else {
            st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
            snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
            h_check(H, rank, st == PHX_ETIMEOUT && strstr(phx_last_error(), "with peer rank 2"), why,
                    "PHX_ETIMEOUT naming peer rank 2");
        }
    } else if (rank == 1 && a->mode == DEAD) {
        _exit(0); /* leaves without a word: the sockets close */
    } else if (rank == 1) {
        sleep(4); /* HANG: issues nothing while rank 0 waits */
        /* rank 0 sent its data before it timed out: the late rank's first
         * all-reduce may still complete; the next finds rank 0 gone */
        st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
        if (st == PHX_OK) st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
        h_check(H, 1, st != PHX_OK, "both succeeded", "the late rank's all-reduces fail too (%s)", phx_status_name(st));
    } else {
        st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
        snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
        if (a->mode == DEAD)
            h_check(H, 0, st == PHX_EPEER && strstr(phx_last_error(), "rank 1"), why, "PHX_EPEER naming rank 1");
        else
            h_check(H, 0, st == PHX_ETIMEOUT, why, "PHX_ETIMEOUT");
    }
    H->value[rank] = now() - t0;
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    plan(37);
    H = h_new(W);
    R = mmap(NULL, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (R == MAP_FAILED) return 99;
    setenv("PHX_COMM", "gloo", 1);
    unsetenv("MASTER_PORT");
    unsetenv("PHX_GLOO_ALGO");
    const phx_plugin_desc *d;
    phx_probe_ctx procs = {0, 1, 0};
    if (phx_plugin_load(PHX_PLUGIN_COMM, "gloo", &procs, &d) != PHX_OK) {
        skip_all("the gloo plugin is not built");
        return 0;
    }

    static const char *const path_name[] = {"links", "links, no spin", "gloo transport", "links, rd",
                                            "gloo transport, rd"};
    setenv("PHX_TIMEOUT", "30", 1);
    for (int p = 0; p < NPATH; p++) {
        setenv("PHX_GLOO_LINKS", p == GLOO || p == GLOO_RD ? "0" : "1", 1);
        setenv("PHX_GLOO_SPIN_US", p == LINKS_BLOCK ? "0" : "auto", 1);
        if (p == LINKS_RD || p == GLOO_RD)
            setenv("PHX_GLOO_ALGO", "rd", 1);
        else
            unsetenv("PHX_GLOO_ALGO");
        h_reset(H, W);
        arg a = {BITS, p, 0};
        ok(phx_spawn(W, body, &a) == PHX_OK, "bits, %s: world %d runs (%s)", path_name[p], W, phx_last_error());
        char head[64];
        snprintf(head, sizeof head, "bits, %s: ", path_name[p]);
        h_print(H, 0, head);
    }
    unsetenv("PHX_GLOO_LINKS");
    unsetenv("PHX_GLOO_SPIN_US");
    unsetenv("PHX_GLOO_ALGO");
    int same_ranks = 1, same_paths = 1, same_rd = 1;
    for (int p = 0; p < NPATH; p++)
        for (int r = 1; r < W; r++) same_ranks &= same(p, p, r, 0);
    for (int r = 0; r < W; r++) {
        same_paths &= same(LINKS_BLOCK, LINKS, r, r) && same(GLOO, LINKS, r, r);
        same_rd &= same(GLOO_RD, LINKS_RD, r, r);
    }
    ok(same_ranks, "bits: every rank holds the same bits on every path (f32 sums, bf16 avgs, f16 sum)");
    ok(same_paths, "bits: the links give gloo's transport's bits, spinning or not (recursive doubling and ring)");
    ok(same_rd, "bits: forced recursive doubling gives the same bits over the links and gloo's transport");

    /* out of step, dead peer: fail at once, well inside PHX_TIMEOUT=30;
     * small all-reduces, then large ones (the ring) */
    static const char *const name[] = {"", "desync", "dead", "hang"};
    for (int big = 0; big < 2; big++) {
        for (int mode = DESYNC; mode <= HANG; mode++) {
            setenv("PHX_TIMEOUT", mode == HANG ? "2" : "30", 1);
            h_reset(H, mode == DEAD ? 1 : 2); /* the dead rank's checks are not waited for */
            arg a = {mode, LINKS, big ? LARGE : SMALL};
            phx_status st = phx_spawn(2, body, &a);
            char head[64];
            snprintf(head, sizeof head, "%s%s: ", name[mode], big ? ", large" : "");
            if (mode == DESYNC) ok(st == PHX_OK, "%sboth ranks return (%s)", head, st ? phx_last_error() : "ok");
            h_print(H, 0, head);
            if (mode == HANG)
                ok(H->value[0] >= 1.9 && H->value[0] < 4.5, "%safter PHX_TIMEOUT=2 and within 2.5 s more (%.2f s)",
                   head, H->value[0]);
            else
                ok(H->value[0] < 5, "%swell before PHX_TIMEOUT=30 (%.2f s)", head, H->value[0]);
        }
    }

    /* a silent rank behind an innocent one: the chain of waits is followed */
    setenv("PHX_TIMEOUT", "2", 1);
    h_reset(H, 2); /* ranks 0 and 1 check; rank 2 only sleeps */
    arg ch = {CHAIN, LINKS, LARGE};
    phx_spawn(W, body, &ch);
    h_print(H, 0, "chain, world 3, rank 2 silent: ");

    setenv("PHX_TIMEOUT", "30", 1);
    static const char *const bad[][2] = {{"PHX_GLOO_SPIN_US", "fast"}, {"PHX_GLOO_LINKS", "yes"}};
    for (int i = 0; i < 2; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        h_reset(H, 2);
        arg a = {BADENV, LINKS, SMALL};
        phx_spawn(2, body, &a);
        char head[64];
        snprintf(head, sizeof head, "%s=%s: ", bad[i][0], bad[i][1]);
        h_print(H, 0, head);
        unsetenv(bad[i][0]);
    }
    return done_testing();
}
