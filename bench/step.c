/* Training steps per second, Phalanx beside PyTorch (bench/torch/step.py)
 * in the same run, on the same shapes:
 *   linear: Linear(10, 1), batch 64, MSE, SGD lr 0.01 (the seed program)
 *   mlp:    784-1024-1024-10 ReLU MLP, batch 256, cross entropy, SGD lr 0.01
 *   gpt:    phx_gpt_defaults() (vocab 65, 4 layers, 4 heads, d_model 128) on
 *           16 x 128 tokens, cross entropy, AdamW lr 3e-4 (rows in tokens/s)
 *   cnn:    examples/cnn's model (conv32-BN-pool, conv64-BN-pool, fc128,
 *           dropout 0.5) on 128 28x28 images, cross entropy, AdamW lr 1e-3
 *   mlp_fo, cnn_fo: the same models written as forward-only modules (the
 *           layers as children, ReLU and Flatten as tensor operations; the
 *           core derives the backward): PyTorch's side is its mlp and cnn
 *   gpt_fo: the GPT's layers under a forward-only parent: embeddings and
 *           residual adds as tensor operations (PyTorch's side: its gpt)
 *   resnet: examples/resnet's model (forward-only blocks) on 128 images,
 *           cross entropy, SGD momentum (bench/torch/resnet.py's model)
 * each at 1 and 2 threads. A step is zero_grad, forward, loss, backward,
 * optimizer step. Each figure is the best of --repeats timed runs of
 * --seconds, and of --rounds passes over every row: a round runs each row
 * on our side and then on PyTorch's, so both sides of a row (and a
 * forward-only row and its fused one) meet the host's slow minutes in
 * every round instead of one side catching one. Two measures: steps per wall-clock second, and steps per
 * second of the process's CPU time (all its threads) -- on a shared
 * machine the wall clock also counts the time other processes took.
 *
 *   bench/step [--torch PATH/step.py] [--python PY] [--seconds S] [--repeats R]
 *              [--rounds N] [--only linear|mlp|gpt|gpt_bf16|cnn|mlp_fo|cnn_fo|resnet|gpt_fo]
 *              [--precision fp32|fp16|bf16] [--threads 1|2]
 * --threads runs that thread count's rows only (for a profiler).
 * --precision puts Phalanx's models under that policy (gpt_bf16 stays bf16;
 * PyTorch's side is unchanged: fp32, autocast bf16 for gpt_bf16).
 *   bench/step --rss NAME   (10 steps of that row's model; prints its peak RSS)
 *   bench/step --growth S   (the MLP step across batch sizes and widths at
 *                            1 and 2 threads, S seconds a point: where
 *                            GFLOP/s stops growing with the batch)
 */
#define BENCH_NAME "bench/step"
#include <sys/resource.h>
#include "bench/bench-util.h"
#include "bench/bench-peak.h"
#include "bench/bench-models.h"

/* The MLP step's useful GFLOP: 2·B·in·out per layer forward and again for
 * the weight gradient, and the input gradient of every layer but the
 * first (the data needs none). */
static double mlp_step_gflop(int64_t batch)
{
    const int64_t dims[] = {784, 1024, 1024, 10};
    double f = 0;
    for (int l = 0; l < 3; l++) f += 2.0 * (double)batch * (double)(dims[l] * dims[l + 1]) * (l ? 3 : 2);
    return f * 1e-9;
}

static void step(setup *s)
{
    const char *failed;
    phx_status st = bench_step(s->m, s->opt, s->loss, s->x, s->y, NULL, &failed);
    bench_check(st, failed);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --growth: the MLP step (784-w-w-10, SGD) across batch sizes and widths at
 * the calling thread count, as GFLOP/s of useful work (mlp_step_gflop's
 * count) and samples/s, the best of 3 runs of `seconds`: where a row stops
 * growing with the batch is the knee. */
static void growth(double seconds)
{
    const int64_t widths[] = {256, 512, 1024, 2048, 4096}, batches[] = {8, 32, 128, 512, 2048};
    printf("MLP 784-w-w-10 SGD step, %d thread(s): GFLOP/s (samples/s)\n%6s", phx_num_threads(), "w \\ b");
    for (int j = 0; j < 5; j++) printf(" %19lld", (long long)batches[j]);
    printf("\n");
    for (int i = 0; i < 5; i++) {
        int64_t w = widths[i];
        printf("%6lld", (long long)w);
        for (int j = 0; j < 5; j++) {
            int64_t b = batches[j], xs[2] = {b, 784};
            phx_rng *rng = phx_rng_new(0);
            setup s = {0};
            s.m = bench_mlp(rng, w, w);
            classify(&s, rng, 2, xs);
            phx_sgd_opts o = PHX_SGD_OPTS_INIT;
            o.lr = 0.01;
            s.opt = s.m ? phx_sgd_new(s.m, &o) : NULL;
            if (!s.m || !s.x || !s.y || !s.loss || !s.opt) bench_check(PHX_ENOMEM, "growth setup");
            for (int k = 0; k < 3; k++) step(&s);
            double best = 0;
            for (int r = 0; r < 3; r++) {
                long n = 0;
                double t0 = bench_now(), dt;
                do {
                    step(&s);
                    n++;
                    dt = bench_now() - t0;
                } while (dt < seconds);
                if (n / dt > best) best = n / dt;
            }
            /* forward 2bw per layer, weight gradient again, input gradient but the first layer's */
            double gf = 2.0 * (double)b * (784.0 * w * 2 + (double)w * w * 3 + 10.0 * w * 3) * 1e-9;
            printf(" %8.1f (%8.0f)", gf * best, best * (double)b);
            char tab[48], row[32], col[32];
            snprintf(tab, sizeof tab, "growth %d thread(s)", phx_num_threads());
            snprintf(row, sizeof row, "width %lld", (long long)w);
            snprintf(col, sizeof col, "batch %lld GFLOP/s", (long long)b);
            bench_tsv("bench/step", tab, row, col, gf * best);
            setup_free(&s);
            phx_rng_free(rng);
        }
        printf("\n");
    }
}

/* Best steps/s over the repeats; *cpu_rate: best steps per CPU-second.
 * precision: a policy for the model, or NULL. */
static double rate(const char *name, const char *precision, double seconds, int repeats, double *cpu_rate)
{
    setup s = make(name);
    if (precision && !s.prec)
        bench_check(phx_precision_new(precision, &s.prec) == PHX_OK ? phx_module_set_precision(s.m, s.prec)
                                                                    : PHX_EINVAL,
                    "--precision");
    for (int i = 0; i < (strcmp(name, "linear") ? 3 : 20); i++) step(&s);
    double best = 0;
    *cpu_rate = 0;
    for (int r = 0; r < repeats; r++) {
        long n = 0;
        double t0 = bench_now(), c0 = cpu_now(), dt;
        do {
            step(&s);
            n++;
            dt = bench_now() - t0;
        } while (dt < seconds);
        double dc = cpu_now() - c0;
        if (n / dt > best) best = n / dt;
        if (dc > 0 && n / dc > *cpu_rate) *cpu_rate = n / dc;
    }
    setup_free(&s);
    return best;
}

/* Each side's best over the rounds, wall clock and CPU time apart. */
static void keep_best(double *best, double *best_cpu, double v, double cpu)
{
    if (v > *best) *best = v;
    if (cpu > *best_cpu) *best_cpu = cpu;
}

/* PyTorch's rate for model at threads (bench/torch/step.py in its own
 * process); 0 when it printed no RESULT line (its output goes to stderr). */
static int torch_rate(const char *py, const char *torch, const char *model, int threads, double seconds, int repeats,
                      double *v, double *cpu)
{
    /* torch.set_num_threads does not reach OpenBLAS's own pool:
     * pin both so "t threads" means t threads on either side. */
    char cmd[2048], line[256];
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=%d OMP_NUM_THREADS=%d '%s' '%s' --only %s --threads %d --seconds %g "
             "--repeats %d 2>&1",
             threads, threads, py, torch, model, threads, seconds, repeats);
    int got = 0;
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        char nm[32];
        int th;
        double a, b;
        if (sscanf(line, "RESULT %31s %d %lf %lf", nm, &th, &a, &b) == 4)
            *v = a, *cpu = b, got = 1;
        else
            fprintf(stderr, "torch: %s", line);
    }
    if (p) pclose(p);
    return got;
}

int main(int argc, char **argv)
{
    const char *torch = NULL, *py = bench_python();
    double seconds = 1.0;
    int repeats = 3, rounds = 1;
    const char *only = NULL; /* one model's rows only (profiling) */
    const char *rss = NULL; /* --rss NAME: peak RSS of 10 steps of that model */
    double grow = 0; /* --growth S: the MLP across batches and widths, S seconds a point */
    const char *precision = NULL; /* --precision: Phalanx's models under that policy */
    int threads = 0; /* --threads T: that thread count's rows only (profiling); 0: 1 and 2 */
    const bench_opt opts[] = {{"--torch", 's', &torch},     {"--python", 's', &py},
                              {"--seconds", 'd', &seconds}, {"--repeats", 'i', &repeats},
                              {"--only", 's', &only},       {"--rss", 's', &rss},
                              {"--growth", 'd', &grow},     {"--precision", 's', &precision},
                              {"--threads", 'i', &threads}, {"--rounds", 'i', &rounds}};
    if (bench_args(argc, argv, opts, 10,
                   "[--torch PATH/step.py] [--python PY] [--seconds S] [--repeats R] [--rounds N] "
                   "[--only linear|mlp|gpt|gpt_bf16|cnn|mlp_fo|cnn_fo|resnet|gpt_fo] [--rss NAME] "
                   "[--precision fp32|fp16|bf16] [--growth S] [--threads 1|2]"))
        return 2;
    if (rounds < 1 || repeats < 1) {
        fprintf(stderr, "bench/step: --rounds and --repeats take a count of at least 1\n");
        return 2;
    }
    if (grow > 0) {
        for (int t = 1; t <= 2; t++) {
            bench_check(phx_set_num_threads(t), "threads");
            growth(grow);
        }
        return 0;
    }
    if (rss) {
        setup s = make(rss);
        for (int i = 0; i < 10; i++) step(&s);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("%s_step_rss %.1f MiB\n", rss, ru.ru_maxrss / 1024.0);
        return 0;
    }
    enum { NM = 9 };
    const char *names[NM] = {"linear", "mlp", "gpt", "gpt_bf16", "cnn", "mlp_fo", "cnn_fo", "resnet", "gpt_fo"};
    /* PyTorch's side of each row (a forward-only model's is the same torch model) */
    const char *torch_names[NM] = {"linear", "mlp", "gpt", "gpt_bf16", "cnn", "mlp", "cnn", "resnet", "gpt"};
    const char *label[NM] = {"Linear(10,1) b64 SGD",      "MLP 784-1024-1024-10 b256 SGD", "GPT 16x128 AdamW, tokens",
                             "GPT bf16 (torch autocast)", "CNN b128 AdamW, images",        "MLP forward-only",
                             "CNN forward-only, images",  "ResNet b128 SGD, images",       "GPT forward-only, tokens"};
    /* a GPT step is 16 x 128 tokens, a CNN step 128 images: their rows count those */
    const double per_step[NM] = {1, 1, 16 * 128, 16 * 128, 128, 1, 128, 128, 16 * 128};
    double phx[NM][2] = {{0}}, pt[NM][2] = {{0}}, phx_c[NM][2] = {{0}}, pt_c[NM][2] = {{0}};
    int have_torch = 0;
    /* The sgemm peak (as bench/dp measures it), before the MLP rows. */
    bench_peak peak = {0};
    if (!only || !strcmp(only, "mlp")) peak = bench_sgemm_peak();
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < NM; k++)
            for (int t = 0; t < 2; t++) {
                if ((only && strcmp(only, names[k])) || (threads && threads != t + 1)) continue;
                bench_check(phx_set_num_threads(t + 1), "threads");
                double c, v = rate(names[k], precision, seconds, repeats, &c);
                keep_best(&phx[k][t], &phx_c[k][t], v, c);
                if (torch && torch_rate(py, torch, torch_names[k], t + 1, seconds, repeats, &v, &c)) {
                    keep_best(&pt[k][t], &pt_c[k][t], v, c);
                    have_torch = 1;
                }
            }
    printf("%-30s %3s | %11s %11s %7s | %11s %11s %7s\n", "training step", "thr", "Phalanx/s", "PyTorch/s", "ratio",
           "Phx/cpu-s", "Torch/cpu-s", "ratio");
    for (int k = 0; k < NM; k++)
        for (int t = 0; t < 2; t++) {
            phx[k][t] *= per_step[k], pt[k][t] *= per_step[k], phx_c[k][t] *= per_step[k], pt_c[k][t] *= per_step[k];
            printf("%-30s %3d | %11.1f ", label[k], t + 1, phx[k][t]);
            char row[64];
            snprintf(row, sizeof row, "%s, %d thread%s", label[k], t + 1, t ? "s" : "");
            bench_tsv_ratio(BENCH_NAME, row, phx[k][t], pt[k][t]);
            if (have_torch && pt[k][t] > 0)
                printf("%11.1f %6.2fx | ", pt[k][t], phx[k][t] / pt[k][t]);
            else
                printf("%11s %7s | ", "n/a", "-");
            printf("%11.1f ", phx_c[k][t]);
            if (have_torch && pt_c[k][t] > 0)
                printf("%11.1f %6.2fx\n", pt_c[k][t], phx_c[k][t] / pt_c[k][t]);
            else
                printf("%11s %7s\n", "n/a", "-");
        }
    if (peak.two_gflops > 0)
        for (int t = 0; t < 2; t++) {
            double gf = phx[1][t] * mlp_step_gflop(256), top = t ? peak.two_gflops : peak.one_gflops;
            printf("MLP at %d thread%s: %.1f GFLOP/s = %.0f%% of the sgemm peak of %d thread%s (%.1f GFLOP/s, "
                   "bench/bench-peak.h)%s\n",
                   t + 1, t ? "s" : "", gf, 100 * gf / top, t + 1, t ? "s at once" : "", top,
                   t ? "; target >= 75%" : "");
        }
    for (int k = 5; k < NM; k++) /* forward-only beside fused, same run */
        for (int t = 0, fused = k == 5 ? 1 : k == 6 ? 4 : 2; t < 2 && k != 7; t++)
            if (phx[fused][t] > 0 && phx[k][t] > 0)
                printf("%s at %d thread%s: %.3fx the fused modules' rate\n", label[k], t + 1, t ? "s" : "",
                       phx[k][t] / phx[fused][t]);
    printf("targets: seed >= 20x PyTorch, MLP >= 1.0x PyTorch at the same thread count; GPT (tokens/s) >= 1.5x "
           "PyTorch at its best thread count; CNN (images/s) >= 1.2x PyTorch at its best thread count; forward-only "
           ">= 0.9x fused and >= 1.2x PyTorch's best; ResNet >= 1.2x PyTorch's best\n");
    return 0;
}
