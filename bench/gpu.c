/* GPU benchmark (run by t/gpu/run on a CUDA machine; prints a note and
 * exits 0 without one). In one run, on cuda:0:
 *   1. elementwise kernels' bandwidth (bytes read + written per second)
 *      beside a device-to-device copy of the same size (target >= 80%);
 *   2. GEMM TFLOP/s at 8192^3 in f32, TF32 (PHX_TF32=1) and bf16, beside
 *      torch.matmul on the same GPU (bench/torch/gpu.py);
 *   3. the MLP 784-1024-1024-10 training step (batch 256, cross entropy,
 *      SGD lr 0.01: zero_grad, forward, loss, backward, step) beside
 *      PyTorch eager on the same GPU (target >= 1.0x).
 * Timings: host clock around many launches between device synchronizations
 * (launch costs vanish at these sizes); each figure is the best of
 * --repeats runs. Data are random (never zeros).
 *
 *   bench/gpu [--torch PATH/gpu.py] [--python PY] [--repeats R] [--quick]
 */
#define BENCH_NAME "bench/gpu"
#include "bench/bench-util.h"
#include <phalanx/plugin/device_v1.h>

static const phx_device_v1 *G;
static const phx_kernels_v1 *K;
static const phx_device CU = {PHX_DEVICE_CUDA, 0};

static void *dalloc(size_t bytes, float lo, float hi, phx_dtype dt)
{
    void *p = NULL;
    bench_check(G->alloc(0, bytes, &p), "alloc");
    bench_check(K->rng_uniform(0, p, dt, (int64_t)(bytes / phx_dtype_size(dt)), 1234, (uint64_t)bytes, lo, hi), "rng");
    return p;
}

/* ---- 1. bandwidth */

typedef enum {
    OP_COPY,
    OP_FILL,
    OP_AXPBY,
    OP_MUL,
    OP_RELU,
    OP_GELU,
    OP_CAST,
    OP_AXPBY_BF16,
    OP_SGD,
    OP_ADAM,
    OP_UNSCALE,
    OP_N
} op_id;
static const char *op_name[OP_N] = {"d2d copy",     "fill f32", "axpby f32",      "mul f32",
                                    "relu f32",     "gelu f32", "cast f32->bf16", "axpby bf16",
                                    "sgd momentum", "adam",     "unscale_check"};

static void *X, *Y, *Z, *M, *V, *H, *FLAG;
static int64_t N;

static double op_bytes(op_id op)
{
    double f = (double)N * 4, h = (double)N * 2;
    switch (op) {
    case OP_COPY: return 2 * f;
    case OP_FILL: return f;
    case OP_AXPBY:
    case OP_MUL: return 3 * f;
    case OP_RELU:
    case OP_GELU:
    case OP_UNSCALE: return 2 * f;
    case OP_CAST: return f + h;
    case OP_AXPBY_BF16: return 3 * h;
    case OP_SGD: return 5 * f;
    case OP_ADAM: return 7 * f;
    default: return 0;
    }
}

static void run_op(op_id op)
{
    phx_sgd_hparams sh = {1e-6f, 0.9f, 0.f, 0.f, 0};
    phx_adam_hparams ah = {1e-6f, 0.9f, 0.999f, 1e-8f, 0.f, 0, 1};
    switch (op) {
    case OP_COPY: bench_check(G->copy_d2d(0, Y, 0, X, (size_t)N * 4), "copy"); break;
    case OP_FILL: bench_check(K->fill(0, Z, PHX_F32, N, 0.5), "fill"); break;
    case OP_AXPBY: bench_check(K->axpby(0, N, 0.999f, X, PHX_F32, 0.001f, Y, PHX_F32), "axpby"); break;
    case OP_MUL: bench_check(K->mul(0, N, X, Y, Z, PHX_F32), "mul"); break;
    case OP_RELU: bench_check(K->act_forward(0, PHX_ACT_RELU, N, X, Z, PHX_F32), "relu"); break;
    case OP_GELU: bench_check(K->act_forward(0, PHX_ACT_GELU, N, X, Z, PHX_F32), "gelu"); break;
    case OP_CAST: bench_check(K->cast(0, H, PHX_BF16, X, PHX_F32, N), "cast"); break;
    case OP_AXPBY_BF16: bench_check(K->axpby(0, N, 0.5f, H, PHX_BF16, 0.5f, (char *)Z, PHX_BF16), "axpby bf16"); break;
    case OP_SGD: bench_check(K->sgd_step(0, N, Y, X, M, &sh, 0), "sgd"); break;
    case OP_ADAM: bench_check(K->adam_step(0, N, Y, X, M, V, NULL, &ah, 10), "adam"); break;
    case OP_UNSCALE: bench_check(K->unscale_check(0, N, Z, 1.0f, FLAG), "unscale"); break;
    default: break;
    }
}

static double time_op(op_id op, int iters, int repeats)
{
    for (int i = 0; i < 3; i++) run_op(op);
    bench_check(G->synchronize(0), "sync");
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = bench_now();
        for (int i = 0; i < iters; i++) run_op(op);
        bench_check(G->synchronize(0), "sync");
        double dt = (bench_now() - t0) / iters;
        if (dt < best) best = dt;
    }
    return best;
}

/* ---- 2. GEMM */

static double gemm_tflops(phx_dtype dt, int tf32, int64_t n, int iters, int repeats)
{
    size_t es = phx_dtype_size(dt);
    void *a = dalloc((size_t)(n * n) * es, -1, 1, dt), *b = dalloc((size_t)(n * n) * es, -1, 1, dt),
         *c = dalloc((size_t)(n * n) * es, -1, 1, dt);
    if (tf32)
        setenv("PHX_TF32", "1", 1);
    else
        unsetenv("PHX_TF32");
    for (int i = 0; i < 2; i++) bench_check(K->gemm(0, 0, 0, n, n, n, 1.f, a, n, b, n, dt, 0.f, c, n, dt), "gemm");
    bench_check(G->synchronize(0), "sync");
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = bench_now();
        for (int i = 0; i < iters; i++)
            bench_check(K->gemm(0, 0, 0, n, n, n, 1.f, a, n, b, n, dt, 0.f, c, n, dt), "gemm");
        bench_check(G->synchronize(0), "sync");
        double dt_ = (bench_now() - t0) / iters;
        if (dt_ < best) best = dt_;
    }
    unsetenv("PHX_TF32");
    G->release(0, a), G->release(0, b), G->release(0, c);
    return 2.0 * (double)n * n * n / best / 1e12;
}

/* ---- 3. the MLP step */

static double mlp_steps(double seconds, int repeats)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = bench_mlp(rng, 1024, 1024);
    bench_check(phx_module_to(m, CU), "model to cuda:0");
    int64_t xs[2] = {256, 784}, nl = 256;
    phx_tensor *xh = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *yh = phx_tensor_new(PHX_I64, 1, &nl, phx_cpu());
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, CU), *y = phx_tensor_new(PHX_I64, 1, &nl, CU);
    bench_check(phx_rng_uniform(rng, xh, 0, 1), "data");
    bench_labels(phx_tensor_data(yh), 256, 0);
    bench_check(phx_tensor_copy(x, xh), "x to cuda");
    bench_check(phx_tensor_copy(y, yh), "y to cuda");
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(m, &o);
    if (!loss || !opt) bench_check(PHX_ENOMEM, "setup");
    double best = 0;
    float l = 0;
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
        long n = 0;
        double t0 = bench_now(), dt;
        do {
            const char *failed;
            phx_status st = bench_step(m, opt, loss, x, y, &l, &failed);
            bench_check(st, failed);
            n++;
            dt = bench_now() - t0;
        } while (dt < (r < 0 ? 0.5 : seconds));
        bench_check(G->synchronize(0), "sync");
        dt = bench_now() - t0;
        if (r >= 0 && n / dt > best) best = n / dt;
    }
    printf("  mlp: final loss %.4f\n", l);
    phx_optimizer_free(opt);
    phx_loss_free(loss);
    phx_module_free(m);
    phx_tensor_free(x), phx_tensor_free(y), phx_tensor_free(xh), phx_tensor_free(yh);
    phx_rng_free(rng);
    return best;
}

/* ---- torch's numbers: "RESULT <name> <value>" lines from bench/torch/gpu.py */

typedef struct {
    char name[32];
    double v;
} result;
static result tres[32];
static int ntres;

static double torch_get(const char *name)
{
    for (int i = 0; i < ntres; i++)
        if (!strcmp(tres[i].name, name)) return tres[i].v;
    return 0;
}

static void run_torch(const char *py, const char *script, int quick)
{
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd, "'%s' '%s'%s 2>&1", py, script, quick ? " --quick" : "");
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        result r;
        if (sscanf(line, "RESULT %31s %lf", r.name, &r.v) == 2 && ntres < 32)
            tres[ntres++] = r;
        else
            fputs(line, stdout);
    }
    if (p) pclose(p);
}

int main(int argc, char **argv)
{
    const char *torch = NULL, *py = getenv("TORCH_PYTHON") ? getenv("TORCH_PYTHON") : "python3";
    int repeats = 3, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--torch") && i + 1 < argc)
            torch = argv[++i];
        else if (!strcmp(argv[i], "--python") && i + 1 < argc)
            py = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench/gpu [--torch PATH/gpu.py] [--python PY] [--repeats R] [--quick]\n");
            return 2;
        }
    }
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) {
        printf("bench/gpu: no CUDA device: skipped (run it through t/gpu/run on a GPU machine)\n");
        return 0;
    }
    G = phx_device_table(CU);
    if (!G) bench_check(PHX_ENOTFOUND, "cuda device table");
    K = G->kernels;

    /* 1. bandwidth: 64 Mi elements (256 MiB per f32 buffer, >> L2) */
    N = quick ? (int64_t)16 << 20 : (int64_t)64 << 20;
    X = dalloc((size_t)N * 4, -1, 1, PHX_F32);
    Y = dalloc((size_t)N * 4, -1, 1, PHX_F32);
    Z = dalloc((size_t)N * 4, -1, 1, PHX_F32);
    M = dalloc((size_t)N * 4, -1, 1, PHX_F32);
    V = dalloc((size_t)N * 4, 0, 1, PHX_F32);
    H = dalloc((size_t)N * 2, -1, 1, PHX_BF16);
    FLAG = dalloc(4, 0, 0, PHX_F32);
    double gbs[OP_N];
    for (int op = 0; op < OP_N; op++)
        gbs[op] = op_bytes((op_id)op) / time_op((op_id)op, quick ? 10 : 50, repeats) / 1e9;
    G->release(0, X), G->release(0, Y), G->release(0, Z), G->release(0, M), G->release(0, V), G->release(0, H);

    /* 2. GEMM */
    int64_t gn = quick ? 4096 : 8192;
    double tf[3];
    tf[0] = gemm_tflops(PHX_F32, 0, gn, quick ? 3 : 10, repeats);
    tf[1] = gemm_tflops(PHX_F32, 1, gn, quick ? 3 : 10, repeats);
    tf[2] = gemm_tflops(PHX_BF16, 0, gn, quick ? 5 : 30, repeats);

    /* 3. MLP */
    double mlp = mlp_steps(quick ? 0.5 : 2.0, repeats);

    if (torch) run_torch(py, torch, quick);

    printf("\nbench/gpu on cuda:0%s\n", quick ? " (quick)" : "");
    printf("%-34s %12s %12s %8s\n", "", "phalanx", "torch", "ratio");
    double copy = gbs[OP_COPY];
    printf("%-34s %12.0f %12.0f %8s\n", "d2d copy GB/s (read+write)", copy, torch_get("copy_gbs"), "");
    for (int op = 1; op < OP_N; op++) {
        char lab[64];
        snprintf(lab, sizeof lab, "%s GB/s (%% of copy)", op_name[op]);
        printf("%-34s %12.0f %12s %7.0f%%%s\n", lab, gbs[op], "", 100.0 * gbs[op] / copy,
               gbs[op] >= 0.8 * copy ? "" : "  < 80%");
    }
    const char *gl[3] = {"gemm f32 TFLOP/s", "gemm tf32 TFLOP/s", "gemm bf16 TFLOP/s"};
    const char *gk[3] = {"gemm_f32", "gemm_tf32", "gemm_bf16"};
    for (int i = 0; i < 3; i++) {
        char lab[64];
        snprintf(lab, sizeof lab, "%s (%lld^3)", gl[i], (long long)gn);
        double t = torch_get(gk[i]);
        printf("%-34s %12.1f %12.1f %8.2f\n", lab, tf[i], t, t > 0 ? tf[i] / t : 0);
    }
    double tm = torch_get("mlp_steps");
    printf("%-34s %12.0f %12.0f %8.2f\n", "MLP 784-1024-1024-10 b256 step/s", mlp, tm, tm > 0 ? mlp / tm : 0);
    return 0;
}
