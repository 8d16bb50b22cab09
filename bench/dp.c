/* DataParallel benchmark, all in one run:
 *  1. BLAS concurrency: two threads each calling phx_gemm with one BLAS
 *     thread, against the same products one after the other -- do
 *     concurrent single-threaded OpenBLAS calls really run in parallel?
 *  2. The MLP 784-1024-1024-10 (ReLU, cross-entropy, SGD lr 0.01), batch
 *     512: unwrapped with 1 BLAS thread, DataParallel over 2 CPU replicas,
 *     (for reference) unwrapped with 2 BLAS threads, and PyTorch's single
 *     process at 2 threads (bench/torch/dp.py; also at 1 thread, since
 *     its OpenMP pool at 2 threads can be slower than 1 on a busy machine). Steps/s are the best of
 *     short rounds; the first two variants interleaved round by round,
 *     since the machine may be shared.
 * Targets: DataParallel(2) >= 1.7x unwrapped at 1 thread, >= 1.2x PyTorch.
 *
 * usage: bench/dp [--seconds S] [--batch B] [--torch SCRIPT | --no-torch] */
#define BENCH_NAME "bench/dp"
#include "bench/bench-util.h"
#include "bench/bench-peak.h"

/* ---- 1. BLAS concurrency (bench/bench-peak.h) ------------------------- */

static void blas_concurrency(void)
{
    bench_peak p = bench_sgemm_peak();
    printf("BLAS concurrency: 2 x %d GEMMs (%d x %d x %d), 1 BLAS thread each\n", BENCH_PEAK_REPS, BENCH_PEAK_M,
           BENCH_PEAK_N, BENCH_PEAK_K);
    printf("  one after the other %8.1f ms  %6.1f GFLOP/s\n", p.serial_ms, p.one_gflops);
    printf("  two threads at once %8.1f ms  %6.1f GFLOP/s   speedup %.2fx (2.00 = fully parallel; the 2-core sgemm "
           "peak of bench/step)\n",
           p.parallel_ms, p.two_gflops, p.serial_ms / p.parallel_ms);
}

/* ---- 2. the MLP --------------------------------------------------------- */

typedef struct runner {
    const char *name;
    int blas_threads; /* for the unwrapped runs */
    phx_module *model, *net; /* net: the model or its wrapper */
    phx_optimizer *opt;
    double best; /* steps/s */
} runner;

static phx_tensor *g_x, *g_t;
static phx_loss *g_loss;

static phx_module *mlp(void)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = bench_mlp(rng, 1024, 1024);
    phx_rng_free(rng);
    return m;
}

static void step(runner *r)
{
    if (bench_step(r->net, r->opt, g_loss, g_x, g_t, NULL, NULL) != PHX_OK) bench_die(r->name);
}

static void setup(runner *r, const char *name, size_t replicas, int blas_threads)
{
    r->name = name;
    r->blas_threads = blas_threads;
    r->model = mlp();
    r->net = r->model;
    if (replicas > 1) {
        phx_device devs[2] = {phx_cpu(), phx_cpu()};
        if (!(r->net = phx_dp_new(r->model, devs, replicas, NULL))) bench_die("phx_dp_new");
    }
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.01;
    if (!(r->opt = phx_sgd_new(r->net, &o))) bench_die("phx_sgd_new");
    r->best = 0;
}

/* One round: a few steps, keep the best rate. */
static void round_of(runner *r, int steps)
{
    phx_set_num_threads(r->blas_threads);
    step(r); /* warm: buffers, BLAS threads */
    double t0 = bench_now();
    for (int s = 0; s < steps; s++) step(r);
    double sps = steps / (bench_now() - t0);
    if (sps > r->best) r->best = sps;
}

static double run_torch(const char *script, int threads, double seconds, int64_t batch)
{
    char cmd[2048], line[256];
    snprintf(cmd, sizeof cmd, "%s %s --threads %d --seconds %g --batch %lld", bench_python(), script, threads, seconds,
             (long long)batch);
    FILE *p = popen(cmd, "r");
    double v = -1;
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "torch_mlp_steps_per_s %lf", &v) == 1) break;
    if (p) pclose(p);
    return v;
}

int main(int argc, char **argv)
{
    double seconds = 4;
    int64_t batch = 512;
    const char *script = "bench/torch/dp.py";
    const bench_opt opts[] = {{"--seconds", 'd', &seconds},
                              {"--batch", 'l', &batch},
                              {"--torch", 's', &script},
                              {"--no-torch", 'n', &script}};
    if (bench_args(argc, argv, opts, 4, "[--seconds S] [--batch B] [--torch SCRIPT | --no-torch]")) return 2;
    blas_concurrency();

    int64_t xs[2] = {batch, 784};
    g_x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu());
    g_t = phx_tensor_zeros(PHX_I64, 1, &batch, phx_cpu());
    g_loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    phx_rng *rng = phx_rng_new(3);
    if (!g_x || !g_t || !g_loss || !rng || phx_rng_uniform(rng, g_x, 0, 1)) bench_die("data");
    int64_t *labels = malloc(sizeof *labels * (size_t)batch);
    bench_labels(labels, batch, 0);
    phx_tensor_from_host(g_t, labels);
    free(labels);

    runner r[3];
    setup(&r[0], "unwrapped, 1 BLAS thread", 1, 1);
    setup(&r[1], "DataParallel, 2 CPU replicas", 2, 1);
    setup(&r[2], "unwrapped, 2 BLAS threads", 1, 2);
    /* The two 1-thread variants interleaved; the 2-thread one after them,
     * since OpenBLAS's idle pool threads keep spinning for a while after a
     * multi-threaded call and would slow whatever runs next. */
    double deadline = bench_now() + seconds;
    while (bench_now() < deadline)
        for (int i = 0; i < 2; i++) round_of(&r[i], 3);
    for (deadline = bench_now() + seconds / 2; bench_now() < deadline;) round_of(&r[2], 3);
    double torch = script ? run_torch(script, 2, seconds / 2, batch) : -1;
    double torch1 = script ? run_torch(script, 1, seconds / 2, batch) : -1;

    printf("MLP 784-1024-1024-10, batch %lld, cross-entropy, SGD (best of short rounds, %.0f s)\n", (long long)batch,
           seconds);
    for (int i = 0; i < 3; i++) printf("  %-32s %8.2f steps/s\n", r[i].name, r[i].best);
    if (torch > 0)
        printf("  %-32s %8.2f steps/s\n  %-32s %8.2f steps/s\n", "PyTorch, 1 process, 2 threads", torch,
               "PyTorch, 1 process, 1 thread", torch1);
    else
        printf("  %-32s  skipped (no python3-torch or --no-torch)\n", "PyTorch, 1 process, 2 threads");
    printf("  DataParallel(2) / unwrapped(1 thread)  %.2fx  (target >= 1.70, scaling efficiency %.0f%%)\n",
           r[1].best / r[0].best, 50.0 * r[1].best / r[0].best);
    printf("  DataParallel(2) / unwrapped(2 threads) %.2fx\n", r[1].best / r[2].best);
    bench_tsv_ratio(BENCH_NAME, "DataParallel(2) vs 2 threads", r[1].best, torch);
    if (torch > 0)
        printf("  DataParallel(2) / PyTorch(2 threads)   %.2fx  (target >= 1.20)\n"
               "  DataParallel(2) / PyTorch(1 thread)    %.2fx  (PyTorch's best single-process rate here)\n",
               r[1].best / torch, r[1].best / torch1);

    for (int i = 0; i < 3; i++) {
        phx_optimizer_free(r[i].opt);
        if (r[i].net != r[i].model) phx_module_free(r[i].net);
        phx_module_free(r[i].model);
    }
    phx_rng_free(rng);
    phx_loss_free(g_loss);
    phx_tensor_free(g_x);
    phx_tensor_free(g_t);
    return 0;
}
