/* Mixed precision on the CPU: training steps/s of the MLP 784-512-256-10
 * (ReLU, batch 256, cross-entropy, SGD lr 0.01 momentum 0.9, the scaler in
 * the loop) under fp32, fp16 and bf16, beside PyTorch fp32 and CPU
 * autocast bf16 (bench/torch/amp.py, run in the same invocation with the
 * same thread count). On a CPU with AMX (oneDNN's bf16 matmul on its
 * tiles) bf16 GEMMs run there, and f16 ones too, each f16 operand split
 * into exact bf16 hi and lo parts (three bf16 products per f16 product,
 * f32 accumulation); elsewhere f16, and bf16 without AVX512-BF16, are
 * widened to f32 for the multiply, so the low-precision policies cost
 * conversions there (doc/guide/precision.md).
 *
 * Each policy runs --rounds alternating rounds (default 3) of --seconds
 * (default 1) and reports its median.
 *
 * usage: bench/amp [--seconds S] [--rounds R] [--torch SCRIPT | --no-torch] [--only fp32|fp16|bf16] */
#define BENCH_NAME "bench/amp"
#include "bench/bench-util.h"

enum { BATCH = 256 };

/* Steps per second under policy name; < 0 on error. */
static double measure(const char *name, double seconds)
{
    phx_precision *p = NULL;
    if (phx_precision_new(name, &p) != PHX_OK) {
        fprintf(stderr, "bench/amp: %s\n", phx_last_error());
        return -1;
    }
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = bench_mlp(rng, 512, 256);
    phx_module_set_precision(m, p);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    phx_scaler *s = phx_scaler_new(p, NULL);
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    int64_t xs[2] = {BATCH, 784}, ys[1] = {BATCH};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 1, ys, phx_cpu());
    phx_rng_uniform(rng, x, 0, 1);
    int64_t *lab = phx_tensor_data(y);
    for (int i = 0; i < BATCH; i++) lab[i] = i % 10;
    double sps = -1;
    long n = 0;
    double t0 = 0;
    for (int i = 0;; i++) {
        phx_tensor *out;
        float loss;
        bool stepped;
        if (i == 3) t0 = bench_now();
        if (phx_optimizer_zero_grad(opt) || phx_module_forward(m, x, &out) || phx_loss_forward(ce, out, y, &loss) ||
            phx_scaler_scale_grad(s, phx_loss_grad(ce)) || phx_module_backward(m, phx_loss_grad(ce), NULL) ||
            phx_scaler_step(s, opt, &stepped)) {
            fprintf(stderr, "bench/amp: %s: %s\n", name, phx_last_error());
            break;
        }
        if (i >= 3) {
            n++;
            double dt = bench_now() - t0;
            if (dt >= seconds) {
                sps = n / dt;
                break;
            }
        }
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(ce);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_rng_free(rng);
    phx_precision_free(p);
    return sps;
}

int main(int argc, char **argv)
{
    double seconds = 1;
    int rounds = 3;
    const char *script = "bench/torch/amp.py", *only = NULL;
    const bench_opt opts[] = {{"--seconds", 'd', &seconds},
                              {"--rounds", 'i', &rounds},
                              {"--torch", 's', &script},
                              {"--no-torch", 'n', &script},
                              {"--only", 's', &only}};
    if (bench_args(argc, argv, opts, 5,
                   "[--seconds S] [--rounds R] [--torch SCRIPT | --no-torch] [--only fp32|fp16|bf16]"))
        return 2;
    if (!(seconds > 0) || rounds < 1 || rounds > 99) {
        fprintf(stderr, "bench/amp: --seconds must be > 0, --rounds 1..99\n");
        return 2;
    }
    const char *names[3] = {"fp32", "fp16", "bf16"};
    double sps[3], torch_sps[3] = {-1, -1, -1}, runs[3][99];
    /* the policies alternate round by round; each reports its median, so
     * a busy moment on a shared machine does not decide a ratio */
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 3; i++) runs[i][r] = only && strcmp(only, names[i]) ? -1 : measure(names[i], seconds);
    for (int i = 0; i < 3; i++) sps[i] = bench_median(runs[i], rounds);
    if (script) {
        char cmd[4400], line[256], mode[16];
        double v;
        /* PyTorch: one run of each mode, as long as our rounds together */
        snprintf(cmd, sizeof cmd, "%s %s --seconds %g --threads %d 2>/dev/null", bench_python(), script,
                 seconds * rounds, phx_num_threads());
        FILE *f = popen(cmd, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "torch-amp %15s %lf", mode, &v) == 2)
                for (int i = 0; i < 3; i++)
                    if (!strcmp(mode, names[i])) torch_sps[i] = v;
        if (f) pclose(f);
    }
    printf("Mixed precision on the CPU, MLP 784-512-256-10, batch %d, %d thread(s) (steps/s; ours the median of %d "
           "alternating rounds of %g s)\n",
           BATCH, phx_num_threads(), rounds, seconds);
    printf("%-6s %10s %10s %8s %14s\n", "policy", "phalanx", "torch", "ratio", "vs own fp32");
    for (int i = 0; i < 3; i++) {
        printf("%-6s %10.1f", names[i], sps[i]);
        bench_tsv_ratio(BENCH_NAME, names[i], sps[i], torch_sps[i]);
        bench_vs(sps[i], torch_sps[i], 10);
        printf(" %13.2fx\n", sps[0] > 0 ? sps[i] / sps[0] : 0);
    }
    return sps[0] > 0 && sps[1] > 0 && sps[2] > 0 ? 0 : 1;
}
