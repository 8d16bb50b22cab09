/* gloo's links (plugins/comm/gloo/gloo-links.h), the path of all-reduces up
 * to 4 KiB:
 *   bits: world 3 (a folded, non-power-of-two world) gives the same bits
 *     over the links (spinning, and blocking at once with
 *     PHX_GLOO_SPIN_US=0) as over gloo's transport (PHX_GLOO_LINKS=0), on
 *     every rank;
 *   desync: ranks that all-reduce different sizes get PHX_EDESYNC naming
 *     both collectives long before PHX_TIMEOUT (the headers disagree);
 *   dead: a peer that exits makes the all-reduce fail with PHX_EPEER naming
 *     it, long before PHX_TIMEOUT;
 *   hang: a peer that issues nothing gives PHX_ETIMEOUT after PHX_TIMEOUT,
 *     and the late peer fails by its second all-reduce;
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
#define N 1000 /* f32: 4000 bytes, the links' size */
#define NB 7 /* bf16 */

enum { LINKS, LINKS_BLOCK, GLOO, NPATH };
enum { BITS, DESYNC, DEAD, HANG, BADENV };

typedef struct result {
    float f[NPATH][W][N];
    uint16_t b[NPATH][W][NB];
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
} arg;

/* Values that round differently in another order of summation. */
static void fill(phx_tensor *t, int rank, int salt)
{
    phx_rng *g = phx_rng_new((uint64_t)(100 * rank + salt));
    phx_rng_normal(g, t, 0, 1000);
    phx_rng_free(g);
}

static void run_bits(phx_comm *c, int rank, int path)
{
    int64_t n = N, nb = NB;
    phx_tensor *f = phx_tensor_new(PHX_F32, 1, &n, phx_cpu()), *b = phx_tensor_new(PHX_BF16, 1, &nb, phx_cpu());
    fill(f, rank, 1);
    fill(b, rank, 2);
    phx_status st = phx_comm_allreduce(c, f, PHX_SUM, NULL);
    if (!st) st = phx_comm_allreduce(c, b, PHX_AVG, NULL);
    if (!st) st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "all-reduces and a barrier succeed");
    memcpy(R->f[path][rank], phx_tensor_data(f), sizeof R->f[path][rank]);
    memcpy(R->b[path][rank], phx_tensor_data(b), sizeof R->b[path][rank]);
    phx_tensor_free(f);
    phx_tensor_free(b);
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
    int64_t four = 4, eight = 8;
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 1, &four, phx_cpu()),
               *y = phx_tensor_zeros(PHX_F32, 1, &eight, phx_cpu());
    st = phx_comm_allreduce(c, x, PHX_SUM, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "an agreeing all-reduce");
    double t0 = now();
    char why[700];
    if (a->mode == DESYNC) {
        st = phx_comm_allreduce(c, rank == 0 ? x : y, PHX_SUM, NULL);
        snprintf(why, sizeof why, "%s: %s", phx_status_name(st), phx_last_error());
        const char *want = rank == 0 ? "issued allreduce(count=4, f32, sum) as collective #1 but rank 1 issued "
                                       "allreduce(count=8, f32, sum)"
                                     : "issued allreduce(count=8, f32, sum) as collective #1 but rank 0 issued "
                                       "allreduce(count=4, f32, sum)";
        h_check(H, rank, st == PHX_EDESYNC && strstr(phx_last_error(), want), why,
                "PHX_EDESYNC naming both collectives");
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
    plan(20);
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

    static const char *const path_name[] = {"links", "links, no spin", "gloo transport"};
    setenv("PHX_TIMEOUT", "30", 1);
    for (int p = 0; p < NPATH; p++) {
        setenv("PHX_GLOO_LINKS", p == GLOO ? "0" : "1", 1);
        setenv("PHX_GLOO_SPIN_US", p == LINKS_BLOCK ? "0" : "auto", 1);
        h_reset(H, W);
        arg a = {BITS, p};
        ok(phx_spawn(W, body, &a) == PHX_OK, "bits, %s: world %d runs (%s)", path_name[p], W, phx_last_error());
        char head[64];
        snprintf(head, sizeof head, "bits, %s: ", path_name[p]);
        h_print(H, 0, head);
    }
    unsetenv("PHX_GLOO_LINKS");
    unsetenv("PHX_GLOO_SPIN_US");
    int same_ranks = 1, same_paths = 1;
    for (int p = 0; p < NPATH; p++)
        for (int r = 1; r < W; r++)
            same_ranks &= !memcmp(R->f[p][r], R->f[p][0], sizeof R->f[p][0]) &&
                !memcmp(R->b[p][r], R->b[p][0], sizeof R->b[p][0]);
    for (int p = 1; p < NPATH; p++)
        same_paths &= !memcmp(R->f[p], R->f[0], sizeof R->f[0]) && !memcmp(R->b[p], R->b[0], sizeof R->b[0]);
    ok(same_ranks, "bits: every rank holds the same bits (f32 sum, bf16 avg)");
    ok(same_paths, "bits: the links give gloo's transport's bits, spinning or not");

    /* out of step, dead peer: fail at once, well inside PHX_TIMEOUT=30 */
    static const char *const name[] = {"", "desync", "dead", "hang"};
    for (int mode = DESYNC; mode <= HANG; mode++) {
        setenv("PHX_TIMEOUT", mode == HANG ? "2" : "30", 1);
        h_reset(H, mode == DEAD ? 1 : 2); /* the dead rank's checks are not waited for */
        arg a = {mode, LINKS};
        phx_status st = phx_spawn(2, body, &a);
        if (mode == DESYNC) ok(st == PHX_OK, "desync: both ranks return (%s)", st ? phx_last_error() : "ok");
        char head[64];
        snprintf(head, sizeof head, "%s: ", name[mode]);
        h_print(H, 0, head);
        if (mode == HANG)
            ok(H->value[0] >= 1.9 && H->value[0] < 4.5, "hang: after PHX_TIMEOUT=2 and within 2.5 s more (%.2f s)",
               H->value[0]);
        else
            ok(H->value[0] < 5, "%s: well before PHX_TIMEOUT=30 (%.2f s)", name[mode], H->value[0]);
    }

    setenv("PHX_TIMEOUT", "30", 1);
    static const char *const bad[][2] = {{"PHX_GLOO_SPIN_US", "fast"}, {"PHX_GLOO_LINKS", "yes"}};
    for (int i = 0; i < 2; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        h_reset(H, 2);
        arg a = {BADENV, LINKS};
        phx_spawn(2, body, &a);
        char head[64];
        snprintf(head, sizeof head, "%s=%s: ", bad[i][0], bad[i][1]);
        h_print(H, 0, head);
        unsetenv(bad[i][0]);
    }
    return done_testing();
}
