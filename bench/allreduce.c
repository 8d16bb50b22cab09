/* All-reduce bandwidth, like nccl-tests' all_reduce_perf: f32 sum from
 * 4 B to 256 MiB (x2 steps) on the threads and gloo backends at world 2
 * and 4 (gloo twice: as it runs by default, through shared memory on one
 * host, and over TCP only, PHX_GLOO_SHM=0), on mpi (this program started again under mpirun, when mpirun and
 * the plugin are there), beside torch.distributed's gloo
 * (bench/torch/allreduce.py, run from here in the same session) and the
 * machine's memcpy bandwidth.
 *
 *   algbw = bytes / time;  busbw = algbw * 2 (n - 1) / n
 *
 * (busbw is what each rank's links carry in a bandwidth-optimal
 * all-reduce, comparable across world sizes.) Each point: 1-2 warm-up
 * calls, then `iters` blocking all-reduces between two barriers; the time
 * is rank 0's wall time divided by iters.
 *
 *   bench/allreduce [--torch bench/torch/allreduce.py | --no-torch] [--max BYTES] [--worlds "2 4"]
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "phalanx/phalanx.h"
#define BENCH_NAME "bench/allreduce"
#include "bench/bench-util.h"

#define MAX_SIZES 32
#define REPS 3 /* timed loops per point; the fastest counts (shared machines) */

typedef struct table {
    int n;
    size_t bytes[MAX_SIZES];
    double us[MAX_SIZES]; /* per all-reduce; < 0: not measured */
} table;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int iters_for(size_t bytes)
{
    size_t it = (128u << 20) / (bytes ? bytes : 1);
    return it < 2 ? 2 : it > 300 ? 300 : (int)it;
}

static size_t g_max = 256u << 20;
static table *g_tab; /* shared with the ranks (mmap) */

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    int64_t maxn = (int64_t)(g_max / 4);
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &maxn, phx_cpu());
    phx_tensor_fill(t, 1.0);
    int k = 0;
    for (size_t bytes = 4; bytes <= g_max && k < MAX_SIZES; bytes *= 2, k++) {
        int64_t cnt = (int64_t)(bytes / 4);
        phx_tensor *v = phx_tensor_view(t, 0, 1, &cnt);
        int it = iters_for(bytes);
        phx_status st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
        if (bytes < (16u << 20)) st = st ? st : phx_comm_allreduce(c, v, PHX_SUM, NULL);
        double dt = 1e30;
        for (int rep = 0; rep < REPS && !st; rep++) {
            st = phx_comm_barrier(c, NULL);
            double t0 = now();
            for (int i = 0; i < it && !st; i++) st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
            st = st ? st : phx_comm_barrier(c, NULL);
            if (now() - t0 < dt) dt = now() - t0;
        }
        phx_tensor_free(v);
        if (st) {
            fprintf(stderr, "rank %d: %zu bytes: %s\n", rank, bytes, phx_last_error());
            break;
        }
        if (rank == 0) {
            g_tab->bytes[k] = bytes;
            g_tab->us[k] = dt / it * 1e6;
            g_tab->n = k + 1;
        }
    }
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

/* shm: PHX_GLOO_SHM's value for the run (NULL: the environment's) */
static void run_backend(const char *be, int world, const char *shm, table *out)
{
    memset(g_tab, 0, sizeof *g_tab);
    setenv("PHX_COMM", be, 1);
    char *old = getenv("PHX_GLOO_SHM") ? strdup(getenv("PHX_GLOO_SHM")) : NULL;
    if (shm) setenv("PHX_GLOO_SHM", shm, 1);
    if (phx_spawn(world, rank_main, NULL)) fprintf(stderr, "%s world %d: %s\n", be, world, phx_last_error());
    if (shm && old)
        setenv("PHX_GLOO_SHM", old, 1);
    else if (shm)
        unsetenv("PHX_GLOO_SHM");
    free(old);
    *out = *g_tab;
}

/* "bytes us" lines from a command (the torch script, or this program
 * under mpirun). */
static void run_lines(const char *cmd, table *out)
{
    memset(out, 0, sizeof *out);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char line[256];
    size_t b;
    double us;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "%zu %lf", &b, &us) == 2 && out->n < MAX_SIZES) {
            out->bytes[out->n] = b;
            out->us[out->n++] = us;
        }
    pclose(p);
}

static void run_torch(const char *script, int world, table *out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s --world %d --max %zu",
             bench_python(), script, world, g_max);
    run_lines(cmd, out);
}

/* mpi: this program under mpirun (as root in a container mpirun wants
 * to be told); rank 0 prints the lines (launched()). */
static void run_mpi(const char *self, int world, table *out)
{
    char cmd[2048];
    memset(out, 0, sizeof *out);
    if (system("command -v mpirun >/dev/null 2>&1") != 0) return;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    snprintf(cmd, sizeof cmd, "PHX_COMM=mpi mpirun --oversubscribe --bind-to none -np %d '%s' --max %zu", world, self,
             g_max);
    run_lines(cmd, out);
}

/* Under mpirun: one rank of the mpi world; rank 0 prints "bytes us". */
static int launched(void)
{
    g_tab = mmap(NULL, sizeof *g_tab, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int rank = atoi(getenv("OMPI_COMM_WORLD_RANK"));
    int rc = rank_main(rank, NULL);
    if (rank == 0)
        for (int i = 0; i < g_tab->n; i++) printf("%zu %.3f\n", g_tab->bytes[i], g_tab->us[i]);
    return rc;
}

static double memcpy_gbs(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        double t0 = now();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    free(a);
    free(b);
    return (double)bytes / best / 1e9;
}

static double busbw(size_t bytes, double us, int n)
{
    return us > 0 ? (double)bytes / us / 1e3 * 2.0 * (n - 1) / n : 0;
}

static double lookup(const table *t, size_t bytes)
{
    for (int i = 0; i < t->n; i++)
        if (t->bytes[i] == bytes) return t->us[i];
    return -1;
}

int main(int argc, char **argv)
{
    const char *torch = NULL, *worlds = "2 4";
    setenv("PHX_LOG", "error", 0);
    int64_t max = (int64_t)g_max;
    const bench_opt opts[] = {{"--torch", 's', &torch},
                              {"--no-torch", 'n', &torch},
                              {"--max", 'l', &max},
                              {"--worlds", 's', &worlds}};
    if (bench_args(argc, argv, opts, 4, "[--torch bench/torch/allreduce.py | --no-torch] [--max BYTES] [--worlds \"2 4\"]"))
        return 2;
    if (max < 4) {
        fprintf(stderr, "bench/allreduce: --max must be >= 4 bytes\n");
        return 2;
    }
    g_max = (size_t)max;
    if (getenv("OMPI_COMM_WORLD_RANK")) return launched(); /* started by run_mpi with --max */
    g_tab = mmap(NULL, sizeof *g_tab, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double mc = memcpy_gbs(64u << 20);
    printf("memcpy ceiling: %.2f GB/s (one thread, 64 MiB)\n", mc);
    bench_tsv("bench/allreduce", "memcpy", "64 MiB", "GB/s", mc);
    for (const char *w = worlds; *w;) {
        char *end;
        int n = (int)strtol(w, &end, 10);
        if (end == w) break;
        w = end;
        table th, gl, gt, tg, mp;
        run_backend("threads", n, NULL, &th);
        run_backend("gloo", n, NULL, &gl);
        run_backend("gloo", n, "0", &gt);
        run_mpi(argv[0], n, &mp);
        if (torch)
            run_torch(torch, n, &tg);
        else
            memset(&tg, 0, sizeof tg);
        printf("\nall-reduce f32 sum, world %d   (time in us, bandwidth in GB/s)\n", n);
        printf("gloo: the default path (shared memory when all ranks share this host); gloo tcp: PHX_GLOO_SHM=0\n");
        printf("%10s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s | %6s %6s\n", "bytes",
               "threads", "algbw", "busbw", "gloo", "algbw", "busbw", "gloo tcp", "algbw", "busbw", "mpi", "algbw",
               "busbw", "torch", "algbw", "busbw", "g/t", "m/g");
        double lat_g = 0, lat_t = 0, lat_m = 0, ratio_min = 1e30, ratio_log = 0;
        int nlat = 0, nlat_m = 0, nratio = 0;
        for (int i = 0; i < gl.n || i < th.n; i++) {
            size_t b = i < gl.n ? gl.bytes[i] : th.bytes[i];
            double a = lookup(&th, b), g = lookup(&gl, b), gc = lookup(&gt, b), t = lookup(&tg, b),
                   m = lookup(&mp, b);
            printf("%10zu | %9.1f %7.3f %7.3f | %9.1f %7.3f %7.3f | %9.1f %7.3f %7.3f | %9.1f %7.3f %7.3f | %9.1f "
                   "%7.3f %7.3f | %6.2f %6.2f\n",
                   b, a, a > 0 ? b / a / 1e3 : 0, busbw(b, a, n), g, g > 0 ? b / g / 1e3 : 0, busbw(b, g, n), gc,
                   gc > 0 ? b / gc / 1e3 : 0, busbw(b, gc, n), m, m > 0 ? b / m / 1e3 : 0, busbw(b, m, n), t,
                   t > 0 ? b / t / 1e3 : 0, busbw(b, t, n), g > 0 && t > 0 ? t / g : 0, g > 0 && m > 0 ? g / m : 0);
            char tab[32], row[32];
            snprintf(tab, sizeof tab, "busbw world %d", n);
            snprintf(row, sizeof row, "%zu", b);
            if (a > 0) bench_tsv("bench/allreduce", tab, row, "threads", busbw(b, a, n));
            if (g > 0) bench_tsv("bench/allreduce", tab, row, "gloo", busbw(b, g, n));
            if (gc > 0) bench_tsv("bench/allreduce", tab, row, "gloo tcp", busbw(b, gc, n));
            if (t > 0) bench_tsv("bench/allreduce", tab, row, "torch gloo", busbw(b, t, n));
            if (m > 0) bench_tsv("bench/allreduce", tab, row, "mpi", busbw(b, m, n));
            if (b <= 1024 && g > 0 && t > 0) {
                lat_g += g;
                lat_t += t;
                nlat++;
            }
            if (b <= 1024 && m > 0) {
                lat_m += m;
                nlat_m++;
            }
            if (b >= (1u << 20) && g > 0 && t > 0) {
                double r = t / g;
                ratio_min = r < ratio_min ? r : ratio_min;
                ratio_log += log(r);
                nratio++;
            }
        }
        double th64 = lookup(&th, 64u << 20), m64 = lookup(&mp, 64u << 20), g64 = lookup(&gl, 64u << 20),
               gt64 = lookup(&gt, 64u << 20);
        printf("world %d: threads busbw at 64 MiB = %.2f GB/s = %.0f%% of memcpy (target >= 50%%)\n", n,
               busbw(64u << 20, th64, n), 100.0 * busbw(64u << 20, th64, n) / mc);
        if (g64 > 0)
            printf("world %d: gloo busbw at 64 MiB = %.2f GB/s = %.0f%% of memcpy (target >= 50%% at world 2); "
                   "over TCP only %.2f GB/s = %.0f%%\n",
                   n, busbw(64u << 20, g64, n), 100.0 * busbw(64u << 20, g64, n) / mc, busbw(64u << 20, gt64, n),
                   100.0 * busbw(64u << 20, gt64, n) / mc);
        if (m64 > 0 && g64 > 0)
            printf("world %d: mpi busbw at 64 MiB = %.2f GB/s = %.2fx gloo, %.0f%% of memcpy (targets >= 3x gloo, "
                   ">= 50%% of memcpy at world 2)\n",
                   n, busbw(64u << 20, m64, n), g64 / m64, 100.0 * busbw(64u << 20, m64, n) / mc);
        if (nratio)
            printf("world %d: gloo busbw / torch gloo busbw at >= 1 MiB: min %.2f, geomean %.2f (target >= 0.95)\n", n,
                   ratio_min, exp(ratio_log / nratio));
        if (nlat)
            printf("world %d: latency 4 B..1 KiB: gloo %.1f us, torch gloo %.1f us (target gloo <= torch)\n", n,
                   lat_g / nlat, lat_t / nlat);
        if (nlat_m) printf("world %d: latency 4 B..1 KiB: mpi %.1f us\n", n, lat_m / nlat_m);
        fflush(stdout);
    }
    return 0;
}
