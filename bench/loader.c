/* The data loader: samples/s of loading alone from a dataset whose get
 * costs about 50 us of CPU per sample (a decode), with 0, 1 and 2 worker
 * threads; then the Fashion-MNIST MLP (784-512-256-10, AdamW lr 1e-3,
 * batch 128) trained from that slow dataset beside the same model on
 * in-memory rows. PyTorch's DataLoader over the same dataset beside it
 * (bench/torch/loader_speed.py; its workers are processes).
 *
 *   bench/loader [--torch PATH/loader_speed.py] [--cost-us U] [--samples N] [--steps S]
 *
 * The images are synthetic (a hash of the index), so the benchmark needs
 * no data set installed; only the cost of get matters here. */
#define BENCH_NAME "bench/loader"
#include <stdint.h>
#include "bench/bench-util.h"

typedef struct slow_ctx {
    double cost_s; /* CPU seconds spent in each get */
} slow_ctx;

/* A deterministic image in [0, 1) and label for sample i. */
static void fill(int64_t i, float *img, int64_t *label)
{
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < 784; k++) {
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        img[k] = (float)(h >> 40) * (1.0f / 16777216.0f);
    }
    *label = i % 10;
}

static phx_status slow_get(void *ctx, int64_t i, void *const *out)
{
    const slow_ctx *c = ctx;
    double until = bench_now() + c->cost_s;
    fill(i, out[0], out[1]);
    while (bench_now() < until) {
    }
    return PHX_OK;
}

static const phx_dataset_vtable slow_vt = {.struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "slow synthetic", .get = slow_get};

static const phx_field fields[2] = {{.dtype = PHX_F32, .ndim = 1, .shape = {784}}, {.dtype = PHX_I64, .ndim = 0}};

static phx_loader *loader(phx_dataset *ds, int workers)
{
    phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts), .batch = 128, .shuffle = true, .seed = 1, .drop_last = true, .workers = workers};
    phx_loader *l = phx_loader_new_opts(ds, &o);
    if (!l) bench_die("phx_loader_new_opts");
    return l;
}

/* Samples/s of one epoch of loading alone (after one batch of warm-up). */
static double load_rate(phx_dataset *ds, int workers)
{
    phx_loader *l = loader(ds, workers);
    phx_tensor *b[2];
    if (phx_loader_next_batch(l, b, 2) != 1) bench_die("first batch");
    double t0 = bench_now();
    int64_t n = 0;
    int r;
    while ((r = phx_loader_next_batch(l, b, 2)) == 1) n += 128;
    if (r < 0) bench_die("phx_loader_next_batch");
    double rate = (double)n / (bench_now() - t0);
    phx_loader_free(l);
    return rate;
}

/* Training steps/s of the MLP fed by a loader over ds, over `steps` steps
 * after 3 of warm-up (epochs roll over as needed). */
static double step_rate(phx_dataset *ds, int workers, int steps)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = bench_mlp(rng, 512, 256);
    phx_rng_free(rng);
    phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
    ao.lr = 1e-3;
    phx_optimizer *opt = m ? phx_adam_new(m, &ao) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    if (!opt || !loss) bench_die("the model");
    phx_loader *l = loader(ds, workers);
    double t0 = 0;
    for (int s = 0; s < steps + 3; s++) {
        if (s == 3) t0 = bench_now();
        phx_tensor *b[2];
        int r = phx_loader_next_batch(l, b, 2);
        if (r == 0) r = phx_loader_next_batch(l, b, 2); /* the next epoch */
        if (r != 1) bench_die("phx_loader_next_batch");
        bench_check(bench_step(m, opt, loss, b[0], b[1], NULL, NULL), "step");
    }
    double rate = steps / (bench_now() - t0);
    phx_loader_free(l);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(m);
    return rate;
}

/* PyTorch's figures: "RESULT <what> <workers> <rate>" lines. */
static void torch_rates(const char *script, double cost_us, int64_t n, int steps, double load[3], double step[4])
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s --cost-us %g --samples %lld --steps %d", bench_python(), script, cost_us,
             (long long)n, steps);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char line[256], what[32];
    int w;
    double v;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "RESULT %31s %d %lf", what, &w, &v) != 3) {
            fprintf(stderr, "torch: %s", line);
            continue;
        }
        if (!strcmp(what, "load") && w >= 0 && w < 3) load[w] = v;
        if (!strcmp(what, "step_memory")) step[0] = v;
        if (!strcmp(what, "step_slow") && w >= 0 && w < 3) step[1 + w] = v;
    }
    pclose(p);
}

int main(int argc, char **argv)
{
    const char *torch = NULL;
    double cost_us = 50;
    int64_t n = 4096;
    int steps = 60;
    const bench_opt opts[] = {
        {"--torch", 's', &torch}, {"--cost-us", 'd', &cost_us}, {"--samples", 'l', &n}, {"--steps", 'i', &steps}};
    if (bench_args(argc, argv, opts, 4, "[--torch PATH/loader_speed.py] [--cost-us U] [--samples N] [--steps S]")) return 2;

    slow_ctx ctx = {.cost_s = cost_us * 1e-6};
    phx_dataset *slow = phx_dataset_new(&slow_vt, &ctx, n, 2, fields);
    /* The same samples as in-memory rows. */
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, (int64_t[]){n, 784}, phx_cpu());
    phx_tensor *y = phx_tensor_new(PHX_I64, 1, (int64_t[]){n}, phx_cpu());
    if (!slow || !x || !y) bench_die("the datasets");
    for (int64_t i = 0; i < n; i++) fill(i, (float *)phx_tensor_data(x) + i * 784, (int64_t *)phx_tensor_data(y) + i);
    phx_dataset *memory = phx_dataset_tensors((phx_tensor *[]){x, y}, 2);
    if (!memory) bench_die("phx_dataset_tensors");

    double pt_load[3] = {0}, pt_step[4] = {0};
    if (torch) torch_rates(torch, cost_us, n, steps, pt_load, pt_step);

    printf("loading alone: %lld samples, batch 128, get costs %.0f us of CPU (%d cores)\n", (long long)n, cost_us,
           phx_num_threads());
    printf("%-10s %12s %12s %8s\n", "workers", "samples/s", "torch", "ratio");
    for (int w = 0; w < 3; w++) {
        double r = load_rate(slow, w);
        char row[32];
        snprintf(row, sizeof row, "load_w%d", w);
        printf("%-10d %12.0f", w, r);
        bench_vs(r, pt_load[w], 12);
        printf("\n");
        bench_tsv("loader", "samples/s", row, "phalanx", r);
        bench_tsv("loader", "samples/s", row, "torch", pt_load[w]);
        bench_tsv_ratio("loader", row, r, pt_load[w]);
    }

    printf("MLP 784-512-256-10 step, batch 128, AdamW: steps/s\n");
    printf("%-22s %10s %8s %10s %8s\n", "data", "steps/s", "of mem", "torch", "ratio");
    double mem = step_rate(memory, 0, steps);
    const char *names[4] = {"in memory", "slow, 0 workers", "slow, 1 worker", "slow, 2 workers"};
    const char *rows[4] = {"step_memory", "step_slow_w0", "step_slow_w1", "step_slow_w2"};
    for (int k = 0; k < 4; k++) {
        double r = k == 0 ? mem : step_rate(slow, k - 1, steps);
        printf("%-22s %10.1f %7.0f%%", names[k], r, 100 * r / mem);
        bench_vs(r, pt_step[k], 10);
        printf("\n");
        bench_tsv("loader", "steps/s", rows[k], "phalanx", r);
        bench_tsv("loader", "steps/s", rows[k], "torch", pt_step[k]);
        bench_tsv_ratio("loader", rows[k], r, pt_step[k]);
    }
    phx_dataset_free(memory);
    phx_dataset_free(slow);
    phx_tensor_free(x);
    phx_tensor_free(y);
    return 0;
}
