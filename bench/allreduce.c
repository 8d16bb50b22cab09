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
 * calls, then REPS timed loops of `iters` blocking all-reduces between two
 * barriers; a loop's time is rank 0's wall time divided by iters; the
 * fastest loop is the table's time, the median is printed beside it at
 * 64 MiB.
 *
 * The memcpy ceiling is measured inside every run, interleaved with the
 * collective: at every size >= 1 MiB, before each timed loop, rank 0
 * copies the collective's own tensor (the same pages, as warm as the
 * loops leave them) into a buffer of the same size, faulted in
 * beforehand, while the other ranks sleep (4 ns a byte, not polling in a
 * barrier): once "cold" (both ranges flushed from
 * the caches with clflush first) and once "warm" (right after). The
 * percentage of memcpy at 64 MiB is the collective's median busbw over
 * the warm memcpy's median in the same run; the spread (min..max over the
 * REPS copies) and the cold median are printed beside it.
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
#define REPS 5 /* timed loops per point; the fastest counts (shared machines) */
#define MC_MIN (1u << 20) /* memcpy measured beside the collective from this size */

typedef struct table {
    int n;
    size_t bytes[MAX_SIZES];
    double us[MAX_SIZES]; /* per all-reduce, the fastest loop; < 0: not measured */
    double us_med[MAX_SIZES]; /* the median loop */
    double mc_warm[MAX_SIZES][3]; /* memcpy GB/s of that size in the run: median, min, max; 0: none */
    double mc_cold[MAX_SIZES]; /* the cold copies' median */
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Evicts [p, p + n) from every cache level (x86 clflush; elsewhere a
 * no-op, and the "cold" copies are as warm as the others). */
static void flush_range(const void *p, size_t n)
{
#if defined(__x86_64__) || defined(__i386__)
    for (size_t i = 0; i < n; i += 64) __builtin_ia32_clflush((const char *)p + i);
    __builtin_ia32_mfence();
#else
    (void)p;
    (void)n;
#endif
}

/* GB/s of one memcpy of n bytes from src to dst (cold: both flushed first). */
static double copy_gbs(void *dst, const void *src, size_t n, int cold)
{
    if (cold) {
        flush_range(src, n);
        flush_range(dst, n);
    }
    double t0 = now();
    memcpy(dst, src, n);
    double dt = now() - t0;
    return dt > 0 ? (double)n / dt / 1e9 : 0;
}

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
    /* rank 0's memcpy destination, faulted in (as the tensor is) */
    char *copy = rank == 0 && g_max >= MC_MIN ? malloc(g_max) : NULL;
    if (copy) memset(copy, 3, g_max);
    int k = 0;
    for (size_t bytes = 4; bytes <= g_max && k < MAX_SIZES; bytes *= 2, k++) {
        int64_t cnt = (int64_t)(bytes / 4);
        phx_tensor *v = phx_tensor_view(t, 0, 1, &cnt);
        int it = iters_for(bytes);
        phx_status st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
        if (bytes < (16u << 20)) st = st ? st : phx_comm_allreduce(c, v, PHX_SUM, NULL);
        double dts[REPS], warm[REPS], cold[REPS];
        int reps = 0;
        const int mc = g_max >= MC_MIN && bytes >= MC_MIN; /* on every rank */
        for (int rep = 0; rep < REPS && !st; rep++) {
            if (mc) {
                /* rank 0 copies while the others sleep (not polling in a
                 * barrier for a core): 4 ns a byte covers the flush and
                 * both copies at >= 0.5 GB/s */
                st = phx_comm_barrier(c, NULL);
                if (copy) {
                    cold[rep] = copy_gbs(copy, phx_tensor_data(v), bytes, 1);
                    warm[rep] = copy_gbs(copy, phx_tensor_data(v), bytes, 0);
                } else if (!st) {
                    double s = 4e-9 * (double)bytes;
                    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
                    nanosleep(&ts, NULL);
                }
            }
            st = st ? st : phx_comm_barrier(c, NULL);
            double t0 = now();
            for (int i = 0; i < it && !st; i++) st = phx_comm_allreduce(c, v, PHX_SUM, NULL);
            st = st ? st : phx_comm_barrier(c, NULL);
            dts[reps++] = now() - t0;
        }
        phx_tensor_free(v);
        if (st) {
            fprintf(stderr, "rank %d: %zu bytes: %s\n", rank, bytes, phx_last_error());
            break;
        }
        if (rank == 0) {
            g_tab->bytes[k] = bytes;
            g_tab->us_med[k] = median(dts, reps) / it * 1e6;
            g_tab->us[k] = dts[0] / it * 1e6; /* sorted by median() */
            if (mc && copy) {
                g_tab->mc_cold[k] = median(cold, reps);
                g_tab->mc_warm[k][0] = median(warm, reps);
                g_tab->mc_warm[k][1] = warm[0];
                g_tab->mc_warm[k][2] = warm[reps - 1];
            }
            g_tab->n = k + 1;
        }
    }
    free(copy);
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

/* "bytes us" lines from a command (the torch script), or "bytes us
 * us_median memcpy_median memcpy_min memcpy_max memcpy_cold_median"
 * (this program under mpirun). */
static void run_lines(const char *cmd, table *out)
{
    memset(out, 0, sizeof *out);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char line[256];
    size_t b;
    double us, f[5];
    while (fgets(line, sizeof line, p)) {
        int got = sscanf(line, "%zu %lf %lf %lf %lf %lf %lf", &b, &us, &f[0], &f[1], &f[2], &f[3], &f[4]);
        if (got < 2 || out->n >= MAX_SIZES) continue;
        int i = out->n++;
        out->bytes[i] = b;
        out->us[i] = us;
        if (got == 7) { /* this program under mpirun: the median time and the memcpy */
            out->us_med[i] = f[0];
            out->mc_warm[i][0] = f[1];
            out->mc_warm[i][1] = f[2];
            out->mc_warm[i][2] = f[3];
            out->mc_cold[i] = f[4];
        }
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
        for (int i = 0; i < g_tab->n; i++)
            printf("%zu %.3f %.3f %.4f %.4f %.4f %.4f\n", g_tab->bytes[i], g_tab->us[i], g_tab->us_med[i],
                   g_tab->mc_warm[i][0], g_tab->mc_warm[i][1], g_tab->mc_warm[i][2], g_tab->mc_cold[i]);
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

static int index_of(const table *t, size_t bytes)
{
    for (int i = 0; i < t->n; i++)
        if (t->bytes[i] == bytes) return i;
    return -1;
}

static double lookup(const table *t, size_t bytes)
{
    int i = index_of(t, bytes);
    return i < 0 ? -1 : t->us[i];
}

/* One backend's busbw at `bytes` against the memcpy measured in the same
 * run (the median loop over the warm copies' median; the spread and the
 * cold copies beside it), and its bench/results.tsv rows. */
static void against_memcpy(const char *be, const table *t, int n, size_t bytes)
{
    int i = index_of(t, bytes);
    if (i < 0 || t->us_med[i] <= 0) return;
    double med = busbw(bytes, t->us_med[i], n), best = busbw(bytes, t->us[i], n);
    const double *w = t->mc_warm[i];
    printf("world %d: %s busbw at %zu MiB: median %.2f GB/s (fastest %.2f)", n, be, bytes >> 20, med, best);
    if (w[0] > 0)
        printf(" = %.0f%% of memcpy in the same run: warm median %.2f GB/s (%.2f..%.2f over %d copies), cold "
               "median %.2f",
               100.0 * med / w[0], w[0], w[1], w[2], REPS, t->mc_cold[i]);
    printf("\n");
    char tab[48];
    snprintf(tab, sizeof tab, "vs memcpy world %d, %zu MiB", n, bytes >> 20);
    bench_tsv("bench/allreduce", tab, be, "busbw median GB/s", med);
    if (w[0] > 0) {
        bench_tsv("bench/allreduce", tab, be, "memcpy warm median GB/s", w[0]);
        bench_tsv("bench/allreduce", tab, be, "memcpy cold median GB/s", t->mc_cold[i]);
        bench_tsv("bench/allreduce", tab, be, "% of memcpy", 100.0 * med / w[0]);
    }
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
    printf("memcpy alone: %.2f GB/s (one thread, 64 MiB, fastest of 5; the percentages below use the copies "
           "measured inside each run)\n",
           mc);
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
        const size_t b64 = 64u << 20;
        against_memcpy("threads", &th, n, b64);
        against_memcpy("gloo", &gl, n, b64);
        against_memcpy("gloo tcp", &gt, n, b64);
        against_memcpy("mpi", &mp, n, b64);
        double m64 = lookup(&mp, b64), g64 = lookup(&gl, b64);
        if (m64 > 0 && g64 > 0) printf("world %d: mpi / gloo busbw at 64 MiB (fastest loops): %.2fx\n", n, g64 / m64);
        printf("(targets at world 2, 64 MiB: gloo and mpi busbw >= 50%% of memcpy)\n");
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
