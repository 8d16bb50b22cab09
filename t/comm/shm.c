/* gloo's same-host segment (plugins/comm/gloo/gloo-shm.h):
 *   bits: worlds 2, 3 and 4 (phx_spawn: processes on this host) all-reduce
 *     f32 sum, max and avg, f16 sum and avg, bf16 avg and max of 1, 7,
 *     16411 and 1000003 elements, once with the segment (the default) and
 *     once over TCP (PHX_GLOO_SHM=0); and worlds 3 and 4 again with
 *     PHX_GLOO_ALGO=ring, where every size (1 element too: empty
 *     sub-slices) takes the segment, against the ring over TCP; every rank of both runs holds the
 *     same bits (a 64-bit hash of each result), and the f32 results of
 *     1000003 elements agree with a reference computed here from every
 *     rank's inputs (max exactly, sum and avg within rounding);
 *   reduce-scatter and all-gather, in the same worlds: reduce-scatters of
 *     1, 7, 16411 and 1000003 elements per rank (the same seven dtype/op
 *     cases) give each rank the bits PHX_GLOO_SHM=0 gives it (every size
 *     takes the segment), and f32 sum/max/avg of 1000003 agree
 *     with a reference computed here; all-gathers of f32 and f16 blocks
 *     of those sizes hold every rank's input exactly, the same bits on
 *     every rank and on both paths;
 *   streamed: worlds 2, 3 and 4, all-reduces just above 32 MiB (where the
 *     copy-out uses non-temporal stores; an odd count, unaligned ends):
 *     f32 sum of small integers equal to the sum computed here, and f32
 *     sum and f16 avg with TCP's bits on every rank;
 *   path: PHX_LOG=info's connect lines say the segment was chosen (and not,
 *     with PHX_GLOO_SHM=0), on every rank;
 *   dead: world 3 forked by hand, rank 2 SIGKILLs itself in the middle of a
 *     64 MiB all-reduce through the segment: ranks 0 and 1 get PHX_EPEER
 *     naming a peer rank well before PHX_TIMEOUT=20, and a later barrier
 *     fails at once; the same in the middle of a 64 MiB reduce-scatter;
 *   a bad PHX_GLOO_SHM fails phx_comm_init with PHX_EINVAL naming it.
 * The network-namespace case (ranks on one kernel, not one host) is
 * t/comm/shm_netns.sh. */
#include <fcntl.h>
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
#include "t/tap.h"

#define MAXW 4
#define NSIZES 4
#define NCASES 6
#define BIG (16 << 20) /* elements of the dead-peer all-reduce: 64 MiB of f32 */
/* Bytes from which the segment's all-reduce copies out with non-temporal
 * stores (kShmStream in plugins/comm/gloo/gloo-shm.h); the streamed case
 * runs just above it, an odd count so the sub-slices' ends are unaligned. */
#define STREAM_BYTES (32 << 20)
#define STREAM_EXTRA 13

static const int64_t sizes[NSIZES] = {1, 7, 16411, 1000003};
static const struct {
    phx_dtype dt;
    phx_reduce_op op;
    const char *name;
} cases[NCASES] = {{PHX_F32, PHX_SUM, "f32 sum"}, {PHX_F32, PHX_MAX, "f32 max"}, {PHX_F32, PHX_AVG, "f32 avg"},
                   {PHX_F16, PHX_SUM, "f16 sum"}, {PHX_F16, PHX_AVG, "f16 avg"}, {PHX_BF16, PHX_AVG, "bf16 avg"}};
#define NCASES_ALL (NCASES + 1) /* + bf16 max */

typedef struct result {
    uint64_t hash[2][MAXW][NSIZES][NCASES_ALL]; /* [shm on][rank][size][case] */
    int ref_ok[MAXW][3]; /* rank's f32 sum, max, avg of the largest size against the reference */
    double ref_err[MAXW][3];
    char log[2][MAXW][300]; /* each rank's gloo path line */
    uint64_t rs_hash[2][MAXW][NSIZES][NCASES_ALL]; /* reduce-scatter outputs */
    uint64_t ag_hash[2][MAXW][NSIZES][2]; /* all-gather outputs: f32, f16 */
    int ag_ok[2][MAXW]; /* every all-gather held every rank's input */
    int rs_ref_ok[MAXW][3];
    double rs_ref_err[MAXW][3];
    uint64_t st_hash[2][MAXW][2]; /* the streamed all-reduces: f32 sum, f16 avg */
    int st_exact[MAXW]; /* the f32 sum equals the sum computed here */
} result;

static h_shared *H;
static char (*g_dead_msg)[300]; /* the survivors' errors (shared) */
static result *R;
static char g_dir[256];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Rank r's input (values that round differently in another order). */
static phx_tensor *input(int r, phx_dtype dt, int64_t n, int salt)
{
    phx_tensor *t = phx_tensor_new(dt, 1, &n, phx_cpu());
    phx_rng *g = phx_rng_new((uint64_t)(1000 * r + salt));
    phx_rng_normal(g, t, 0, 1000);
    phx_rng_free(g);
    return t;
}

/* The f32 results of the largest size against sums and maxima computed
 * here from every rank's inputs (in double). */
static void check_ref(int rank, int world, const float *sum, const float *max, const float *avg, int salt0)
{
    const int64_t n = sizes[NSIZES - 1];
    phx_tensor *in[3][MAXW];
    for (int r = 0; r < world; r++)
        for (int k = 0; k < 3; k++) in[k][r] = input(r, PHX_F32, n, salt0 + k);
    double err[3] = {0, 0, 0};
    int good[3] = {1, 1, 1};
    for (int64_t i = 0; i < n; i++) {
        double s = 0, a = 0, mag = 0, ma = 0;
        float m = -INFINITY;
        for (int r = 0; r < world; r++) {
            float x = ((const float *)phx_tensor_data(in[0][r]))[i], y = ((const float *)phx_tensor_data(in[1][r]))[i],
                  z = ((const float *)phx_tensor_data(in[2][r]))[i];
            s += x;
            mag += fabs(x);
            m = y > m ? y : m;
            a += z;
            ma += fabs(z);
        }
        double e0 = fabs(sum[i] - s) / (mag + 1e-30), e2 = fabs(avg[i] - a / world) / (ma / world + 1e-30);
        err[0] = e0 > err[0] ? e0 : err[0];
        err[2] = e2 > err[2] ? e2 : err[2];
        if (max[i] != m) good[1] = 0;
    }
    good[0] = err[0] < 1e-6 * world;
    good[2] = err[2] < 1e-6 * world;
    for (int k = 0; k < 3; k++) {
        R->ref_ok[rank][k] = good[k];
        R->ref_err[rank][k] = err[k];
        for (int r = 0; r < world; r++) phx_tensor_free(in[k][r]);
    }
}

/* Reduce-scatter's f32 sum, max and avg of the largest size (block rank of
 * every rank's input of world * n elements) against a reference computed
 * here in double. */
static void check_ref_rs(int rank, int world, float *const out[3], int salt0)
{
    const int64_t n = sizes[NSIZES - 1];
    phx_tensor *in[3][MAXW];
    for (int r = 0; r < world; r++)
        for (int k = 0; k < 3; k++) in[k][r] = input(r, PHX_F32, n * world, salt0 + k);
    double err[3] = {0, 0, 0};
    int good[3] = {1, 1, 1};
    for (int64_t i = 0; i < n; i++) {
        const int64_t x = (int64_t)rank * n + i;
        double sum = 0, a = 0, mag = 0, ma = 0;
        float m = -INFINITY;
        for (int r = 0; r < world; r++) {
            float u = ((const float *)phx_tensor_data(in[0][r]))[x], v = ((const float *)phx_tensor_data(in[1][r]))[x],
                  w = ((const float *)phx_tensor_data(in[2][r]))[x];
            sum += u;
            mag += fabs(u);
            m = v > m ? v : m;
            a += w;
            ma += fabs(w);
        }
        double e0 = fabs(out[0][i] - sum) / (mag + 1e-30), e2 = fabs(out[2][i] - a / world) / (ma / world + 1e-30);
        err[0] = e0 > err[0] ? e0 : err[0];
        err[2] = e2 > err[2] ? e2 : err[2];
        if (out[1][i] != m) good[1] = 0;
    }
    good[0] = err[0] < 1e-6 * world;
    good[2] = err[2] < 1e-6 * world;
    for (int k = 0; k < 3; k++) {
        R->rs_ref_ok[rank][k] = good[k];
        R->rs_ref_err[rank][k] = err[k];
        for (int r = 0; r < world; r++) phx_tensor_free(in[k][r]);
    }
}

/* Rank's reduce-scatters and all-gathers (hashes into R); PHX_OK or the
 * first failure. */
static phx_status rsag(phx_comm *c, int rank, int world, int shm)
{
    phx_status st = PHX_OK;
    float *keep[3] = {NULL, NULL, NULL};
    for (int s = 0; s < NSIZES && !st; s++)
        for (int k = 0; k < NCASES_ALL && !st; k++) {
            phx_dtype dt = k < NCASES ? cases[k].dt : PHX_BF16;
            phx_reduce_op op = k < NCASES ? cases[k].op : PHX_MAX;
            int64_t n = sizes[s];
            phx_tensor *in = input(rank, dt, n * world, 500 + 10 * s + k), *out = phx_tensor_new(dt, 1, &n, phx_cpu());
            st = phx_comm_reduce_scatter(c, in, out, op, NULL);
            R->rs_hash[shm][rank][s][k] = fnv(phx_tensor_data(out), phx_tensor_nbytes(out));
            if (s == NSIZES - 1 && k < 3 && shm) {
                keep[k] = malloc(phx_tensor_nbytes(out));
                memcpy(keep[k], phx_tensor_data(out), phx_tensor_nbytes(out));
            }
            phx_tensor_free(in);
            phx_tensor_free(out);
        }
    int good = 1;
    for (int s = 0; s < NSIZES && !st; s++)
        for (int k = 0; k < 2 && !st; k++) {
            phx_dtype dt = k ? PHX_F16 : PHX_F32;
            int64_t n = sizes[s], all = n * world;
            phx_tensor *in = input(rank, dt, n, 900 + 10 * s + k), *out = phx_tensor_new(dt, 1, &all, phx_cpu());
            st = phx_comm_allgather(c, in, out, NULL);
            R->ag_hash[shm][rank][s][k] = fnv(phx_tensor_data(out), phx_tensor_nbytes(out));
            size_t nb = phx_tensor_nbytes(in);
            for (int r = 0; r < world; r++) {
                phx_tensor *e = input(r, dt, n, 900 + 10 * s + k);
                good &= memcmp((const char *)phx_tensor_data(out) + (size_t)r * nb, phx_tensor_data(e), nb) == 0;
                phx_tensor_free(e);
            }
            phx_tensor_free(in);
            phx_tensor_free(out);
        }
    R->ag_ok[shm][rank] = good && !st;
    if (keep[0] && keep[1] && keep[2]) check_ref_rs(rank, world, keep, 500 + 10 * (NSIZES - 1));
    for (int k = 0; k < 3; k++) free(keep[k]);
    return st;
}

/* Redirects this process's stderr to a file, for the log lines. */
static void log_to(int world, int shm, int rank)
{
    char p[400];
    snprintf(p, sizeof p, "%s/w%d-shm%d-r%d.log", g_dir, world, shm, rank);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

/* The gloo line about shared memory in a rank's log ("" if none). */
static void read_log(int world, int shm, int rank, char *out, size_t len)
{
    char p[400], line[256];
    snprintf(p, sizeof p, "%s/w%d-shm%d-r%d.log", g_dir, world, shm, rank);
    out[0] = 0;
    FILE *f = fopen(p, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "gloo:") && strstr(line, "shared memory")) {
            line[strcspn(line, "\n")] = 0;
            snprintf(out, len, "%s", line);
        }
    fclose(f);
    unlink(p);
}

/* All-reduces above STREAM_BYTES (the copy-out with non-temporal stores):
 * f32 sum of small integers (exact in any order: checked against the sum
 * computed here) and f16 avg of normals; hashes into R. */
static phx_status streamed(phx_comm *c, int rank, int world, int shm)
{
    int64_t n = STREAM_BYTES / 4 + STREAM_EXTRA;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, phx_cpu());
    float *v = phx_tensor_data(t);
    for (int64_t i = 0; i < n; i++) v[i] = (float)((rank + 1) * (i % 1009) - 500);
    phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    R->st_hash[shm][rank][0] = fnv(v, phx_tensor_nbytes(t));
    int exact = !st;
    for (int64_t i = 0; i < n && exact; i++) {
        double want = 0;
        for (int r = 0; r < world; r++) want += (double)((r + 1) * (i % 1009) - 500);
        exact = v[i] == (float)want;
    }
    if (shm) R->st_exact[rank] = exact;
    phx_tensor_free(t);
    if (st) return st;
    t = input(rank, PHX_F16, STREAM_BYTES / 2 + STREAM_EXTRA, 77);
    st = phx_comm_allreduce(c, t, PHX_AVG, NULL);
    R->st_hash[shm][rank][1] = fnv(phx_tensor_data(t), phx_tensor_nbytes(t));
    phx_tensor_free(t);
    return st;
}

typedef struct arg {
    int world, shm;
} arg;

static int bits_rank(int rank, void *varg)
{
    const arg *a = varg;
    log_to(a->world, a->shm, rank);
    phx_log_set_level(PHX_LOG_INFO);
    phx_comm *c;
    phx_status st = phx_comm_init(NULL, &c);
    if (st) {
        h_check(H, rank, 0, phx_last_error(), "phx_comm_init");
        return 1;
    }
    float *keep[3] = {NULL, NULL, NULL};
    for (int s = 0; s < NSIZES && !st; s++)
        for (int k = 0; k < NCASES_ALL && !st; k++) {
            phx_dtype dt = k < NCASES ? cases[k].dt : PHX_BF16;
            phx_reduce_op op = k < NCASES ? cases[k].op : PHX_MAX;
            phx_tensor *t = input(rank, dt, sizes[s], 10 * s + k);
            st = phx_comm_allreduce(c, t, op, NULL);
            R->hash[a->shm][rank][s][k] = fnv(phx_tensor_data(t), phx_tensor_nbytes(t));
            if (s == NSIZES - 1 && k < 3 && a->shm) {
                keep[k] = malloc(phx_tensor_nbytes(t));
                memcpy(keep[k], phx_tensor_data(t), phx_tensor_nbytes(t));
            }
            phx_tensor_free(t);
        }
    if (!st && !getenv("PHX_GLOO_ALGO")) st = streamed(c, rank, a->world, a->shm);
    if (!st) st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "world %d, PHX_GLOO_SHM=%d: the all-reduces succeed", a->world,
            a->shm);
    if (!st) st = rsag(c, rank, a->world, a->shm);
    if (!st) st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(),
            "world %d, PHX_GLOO_SHM=%d: the reduce-scatters and all-gathers succeed", a->world, a->shm);
    phx_comm_free(c);
    if (keep[0] && keep[1] && keep[2]) check_ref(rank, a->world, keep[0], keep[1], keep[2], 10 * (NSIZES - 1));
    for (int k = 0; k < 3; k++) free(keep[k]);
    return 0;
}

/* ---- a peer killed mid-all-reduce (t/comm/deadpeer.c's pattern) ---- */

static int g_dead_rs; /* the dead case kills a reduce-scatter */

static int dead_rank(int rank)
{
    log_to(3, 9, rank);
    phx_log_set_level(PHX_LOG_INFO);
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "gloo";
    phx_comm *c;
    if (phx_comm_init(&o, &c)) {
        h_check(H, rank, 0, phx_last_error(), "dead: phx_comm_init");
        return 1;
    }
    int64_t n = BIG, m = BIG / 3;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu()), *out = phx_tensor_zeros(PHX_F32, 1, &m, phx_cpu());
    phx_tensor *big = phx_tensor_zeros(PHX_F32, 1, (int64_t[]){3 * m}, phx_cpu());
    const char *what = g_dead_rs ? "reduce-scatter" : "all-reduce";
#define DEAD_OP(w) \
    (g_dead_rs ? phx_comm_reduce_scatter(c, big, out, PHX_SUM, (w)) : phx_comm_allreduce(c, t, PHX_SUM, (w)))
    phx_status st = DEAD_OP(NULL); /* warm: the segment used once */
    if (rank == 2) {
        phx_work *w;
        DEAD_OP(&w);
        usleep(3000); /* well inside the op */
        raise(SIGKILL);
    }
    double t0 = now(), dt = 0;
    for (int i = 0; i < 1000 && st == PHX_OK; i++) {
        t0 = now();
        st = DEAD_OP(NULL);
        dt = now() - t0;
    }
#undef DEAD_OP
    char why[300];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(st), dt, phx_last_error());
    h_check(H, rank, st == PHX_EPEER && strstr(phx_last_error(), "rank "), why,
            "dead: the survivors' %s fails with PHX_EPEER naming a rank", what);
    h_check(H, rank, st != PHX_OK && dt < 5.0, why, "dead: ... well before PHX_TIMEOUT=20 (under 5 s)");
    if (st) snprintf(g_dead_msg[rank], sizeof g_dead_msg[rank], "%s", phx_last_error());
    H->value[rank] = dt;
    t0 = now();
    st = phx_comm_barrier(c, NULL);
    h_check(H, rank, st != PHX_OK && now() - t0 < 5.0, phx_last_error(), "dead: a later barrier fails at once");
    phx_tensor_free(t);
    phx_tensor_free(out);
    phx_tensor_free(big);
    phx_comm_free(c);
    return 0;
}

static void run_dead(void)
{
    char port[16];
    snprintf(port, sizeof port, "%d", px_free_port());
    pid_t pids[3];
    fflush(NULL);
    for (int r = 0; r < 3; r++) {
        if ((pids[r] = fork()) == 0) {
            char b[8];
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            snprintf(b, sizeof b, "%d", r);
            setenv("RANK", b, 1);
            setenv("WORLD_SIZE", "3", 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            _exit(dead_rank(r));
        }
    }
    double end = now() + 60;
    int left = 3, status[3] = {0};
    while (left && now() < end) {
        for (int r = 0; r < 3; r++)
            if (pids[r] > 0 && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
                pids[r] = -1;
                left--;
            }
        usleep(20000);
    }
    for (int r = 0; r < 3; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status[r], 0);
        }
    ok(left == 0, "dead: every process ended by itself (%d still running after 60 s)", left);
    const char *what = g_dead_rs ? "reduce-scatter" : "all-reduce";
    ok(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL, "dead: rank 2 died by SIGKILL mid-%s", what);
    char line[300];
    read_log(3, 9, 0, line, sizeof line);
    /* a survivor's error names the op in shared memory (the watchdog may
     * end the other's wait with that rank's message) */
    char inshm[64];
    snprintf(inshm, sizeof inshm, "%s in shared memory", what);
    ok(strstr(line, "go through shared memory") != NULL &&
           (strstr(g_dead_msg[0], inshm) != NULL || strstr(g_dead_msg[1], inshm) != NULL),
       "dead: the %ss went through the segment ('%s'; a survivor's error says '%s')", what, line, inshm);
    read_log(3, 9, 1, line, sizeof line);
    read_log(3, 9, 2, line, sizeof line);
}

static int badenv_rank(int rank, void *varg)
{
    (void)varg;
    phx_comm *c;
    phx_status st = phx_comm_init(NULL, &c);
    h_check(H, rank, st == PHX_EINVAL && strstr(phx_last_error(), "PHX_GLOO_SHM"), phx_last_error(),
            "PHX_GLOO_SHM=yes: PHX_EINVAL naming the variable");
    if (!st) phx_comm_free(c);
    return 0;
}

/* One world's bits, paths and reference checks (15 TAP lines, 17 without ring); ring:
 * PHX_GLOO_ALGO=ring, so that every size, 1 and 7 elements too, takes
 * the segment (and the ring over TCP). */
static void run_world(int world, int ring)
{
    const char *tag = ring ? ", PHX_GLOO_ALGO=ring" : "";
    if (ring)
        setenv("PHX_GLOO_ALGO", "ring", 1);
    else
        unsetenv("PHX_GLOO_ALGO");
    memset(R->hash, 0, sizeof R->hash);
    memset(R->rs_hash, 0, sizeof R->rs_hash);
    memset(R->ag_hash, 0, sizeof R->ag_hash);
    memset(R->ag_ok, 0, sizeof R->ag_ok);
    memset(R->rs_ref_ok, 0, sizeof R->rs_ref_ok);
    memset(R->st_hash, 0, sizeof R->st_hash);
    memset(R->st_exact, 0, sizeof R->st_exact);
    for (int shm = 1; shm >= 0; shm--) {
        setenv("PHX_GLOO_SHM", shm ? "1" : "0", 1);
        h_reset(H, world);
        arg a = {world, shm};
        phx_status st = phx_spawn(world, bits_rank, &a);
        if (st) diag("world %d, PHX_GLOO_SHM=%d: %s", world, shm, phx_last_error());
        h_print(H, 0, ring ? "PHX_GLOO_ALGO=ring: " : "");
        for (int r = 0; r < world; r++) read_log(world, shm, r, R->log[shm][r], sizeof R->log[0][0]);
    }
    int on = 1, off = 1;
    for (int r = 0; r < world; r++) {
        on &= strstr(R->log[1][r], "go through shared memory") != NULL;
        off &= strstr(R->log[0][r], "no shared memory: PHX_GLOO_SHM=0") != NULL;
    }
    ok(on, "world %d%s: every rank's log says the segment is used ('%s')", world, tag, R->log[1][0]);
    ok(off, "world %d%s, PHX_GLOO_SHM=0: every rank's log says TCP only ('%s')", world, tag, R->log[0][0]);
    int ranks_same = 1, paths_same = 1, bad_s = -1, bad_k = -1;
    for (int s = 0; s < NSIZES; s++)
        for (int k = 0; k < NCASES_ALL; k++)
            for (int r = 0; r < world; r++) {
                int rs = R->hash[1][r][s][k] == R->hash[1][0][s][k] && R->hash[0][r][s][k] == R->hash[0][0][s][k];
                int ps = R->hash[1][r][s][k] == R->hash[0][r][s][k] && R->hash[1][r][s][k] != 0;
                if ((!rs || !ps) && bad_s < 0) {
                    bad_s = s;
                    bad_k = k;
                }
                ranks_same &= rs;
                paths_same &= ps;
            }
    ok(ranks_same, "world %d%s: every rank holds the same bits, on both paths", world, tag);
    ok(paths_same,
       "world %d%s: shared memory gives TCP's bits (f32 sum/max/avg, f16 sum/avg, bf16 avg/max; "
       "1, 7, 16411, 1000003 elements)",
       world, tag);
    if (bad_s >= 0)
        diag("first difference: %lld elements, %s", (long long)sizes[bad_s],
             bad_k < NCASES ? cases[bad_k].name : "bf16 max");
    if (!ring) {
        int st_same = 1, st_exact = 1;
        for (int r = 0; r < world; r++) {
            st_exact &= R->st_exact[r];
            for (int k = 0; k < 2; k++)
                st_same &= R->st_hash[1][r][k] == R->st_hash[0][r][k] && R->st_hash[1][r][k] == R->st_hash[1][0][k] &&
                    R->st_hash[1][r][k] != 0;
        }
        ok(st_same,
           "world %d: all-reduces of %d MiB + %d elements (non-temporal copy-out; f32 sum, f16 avg) give TCP's bits "
           "on every rank",
           world, STREAM_BYTES >> 20, STREAM_EXTRA);
        ok(st_exact, "world %d: ... the f32 sum of small integers equals the sum computed here on every rank", world);
    }
    static const char *const what[3] = {"sum", "max", "avg"};
    for (int k = 0; k < 3; k++) {
        int all = 1;
        double worst = 0;
        for (int r = 0; r < world; r++) {
            all &= R->ref_ok[r][k];
            worst = R->ref_err[r][k] > worst ? R->ref_err[r][k] : worst;
        }
        if (k == 1)
            ok(all, "world %d%s: f32 max of 1000003 elements equals the inputs' max computed here", world, tag);
        else
            ok(all, "world %d%s: f32 %s of 1000003 elements within rounding of a double sum (max rel. err %.2g)", world,
               tag, what[k], worst);
    }
    int rs_same = 1, ag_same = 1, ag_good = 1, rs_bad_s = -1, rs_bad_k = -1;
    for (int r = 0; r < world; r++) {
        for (int s = 0; s < NSIZES; s++) {
            for (int k = 0; k < NCASES_ALL; k++) {
                int same = R->rs_hash[1][r][s][k] == R->rs_hash[0][r][s][k] && R->rs_hash[1][r][s][k] != 0;
                if (!same && rs_bad_s < 0) {
                    rs_bad_s = s;
                    rs_bad_k = k;
                }
                rs_same &= same;
            }
            for (int k = 0; k < 2; k++)
                ag_same &= R->ag_hash[1][r][s][k] == R->ag_hash[0][0][s][k] &&
                    R->ag_hash[0][r][s][k] == R->ag_hash[0][0][s][k] && R->ag_hash[0][0][s][k] != 0;
        }
        ag_good &= R->ag_ok[0][r] && R->ag_ok[1][r];
    }
    ok(rs_same, "world %d%s: reduce-scatter in shared memory gives each rank TCP's bits (7 cases, 4 sizes)", world,
       tag);
    if (rs_bad_s >= 0)
        diag("first difference: %lld elements per rank, %s", (long long)sizes[rs_bad_s],
             rs_bad_k < NCASES ? cases[rs_bad_k].name : "bf16 max");
    ok(ag_same, "world %d%s: all-gather: every rank holds the same bits, on both paths", world, tag);
    ok(ag_good, "world %d%s: all-gather (f32, f16; 4 sizes) holds every rank's input exactly, on both paths", world,
       tag);
    int rs_all = 1;
    double rs_worst = 0;
    for (int r = 0; r < world; r++)
        for (int k = 0; k < 3; k++) {
            rs_all &= R->rs_ref_ok[r][k];
            if (k != 1 && R->rs_ref_err[r][k] > rs_worst) rs_worst = R->rs_ref_err[r][k];
        }
    ok(rs_all,
       "world %d%s: reduce-scatter f32 max of 1000003 elements per rank exact, sum and avg within rounding (max "
       "rel. err %.2g)",
       world, tag, rs_worst);
    unsetenv("PHX_GLOO_ALGO");
}

int main(void)
{
    const phx_plugin_desc *d;
    phx_probe_ctx procs = {0, 1, 0};
    if (phx_plugin_load(PHX_PLUGIN_COMM, "gloo", &procs, &d) != PHX_OK) {
        skip_all("the gloo plugin is not built");
        return 0;
    }
    plan(5 * 15 + 3 * 2 + 2 * 6 + 1);
    H = h_new(MAXW);
    R = mmap(NULL, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (R == MAP_FAILED) return 99;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/phx-shm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) return 99;
    setenv("PHX_COMM", "gloo", 1);
    setenv("PHX_TIMEOUT", "60", 1);
    unsetenv("MASTER_PORT");
    unsetenv("PHX_GLOO_ALGO");
    unsetenv("PHX_GLOO_LINKS");

    for (int world = 2; world <= MAXW; world++) run_world(world, 0);
    run_world(3, 1);
    run_world(4, 1);
    /* run_world: 4 (h_print) + 2 (log) + 2 (bits) + 3 (reference) + 3 (RS/AG
     * bits, AG inputs) + 1 (RS reference) = 15 lines */
    unsetenv("PHX_GLOO_SHM");

    setenv("PHX_TIMEOUT", "20", 1);
    g_dead_msg = mmap(NULL, 3 * sizeof *g_dead_msg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_dead_msg == MAP_FAILED) return 99;
    for (g_dead_rs = 0; g_dead_rs < 2; g_dead_rs++) {
        memset(g_dead_msg, 0, 3 * sizeof *g_dead_msg);
        h_reset(H, 2);
        run_dead();
        H->nranks = 2; /* rank 2 is dead: the survivors' checks */
        h_print(H, 0, "");
        diag("dead: the survivors failed after %.2f s and %.2f s", H->value[0], H->value[1]);
        diag("dead: rank 0: %s", g_dead_msg[0]);
        diag("dead: rank 1: %s", g_dead_msg[1]);
    }

    setenv("PHX_TIMEOUT", "30", 1);
    setenv("PHX_GLOO_SHM", "yes", 1);
    h_reset(H, 2);
    phx_spawn(2, badenv_rank, NULL);
    h_print(H, 0, "");
    unsetenv("PHX_GLOO_SHM");
    rmdir(g_dir);
    return done_testing();
}
