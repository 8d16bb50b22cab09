/* The CPU kernel table beside PyTorch (bench/torch/kernels.py): the same
 * ops at the same sizes, one thread each, best of R runs. Prints one line
 * per op: Phalanx ms, PyTorch ms, and PyTorch/Phalanx (above 1: Phalanx is
 * faster). With --torch, P passes (default 2) alternate: all of ours, then
 * all of PyTorch's, again; each side keeps its best time per op, so a
 * burst of load from another tenant of this shared machine is less likely
 * to land on one side only.
 *
 *   bench/kernels [--torch PATH/kernels.py] [--python PY] [--seconds S] [--repeats R]
 *                 [--passes P] [--only SUBSTRING]    (only the ops whose name holds it)
 *                 [--iters N]
 *
 * --iters N runs each op once to warm up, then exactly N times in
 * run_fixed (no PyTorch, no passes) and prints the mean: a count that does
 * not depend on the machine's speed, for instruction counts that compare
 * two builds on a loaded machine:
 *   valgrind --tool=callgrind --toggle-collect=run_fixed bench/kernels --iters 4 --only layernorm
 */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"
#define BENCH_NAME "bench/kernels"
#include "bench/bench-util.h"

#define N4M (1 << 22)

static const phx_kernels_v1 *K;
static float *x, *xn, *dy, *y, *h, *hd, *bias, *w, *bln, *dw, *db, *mean, *rstd, *lg, *gr, *p, *g, *m, *v, *loss;
static uint16_t *hb, *xb, *xh; /* narrowing casts' output; x in bf16 and in f16, the widening casts' inputs */
static int64_t *labels;
static phx_tensor *A, *B, *C, *Ab, *Bb, *Cb;

static float *fbuf(size_t n)
{
    float *q = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) q[i] = (float)((double)rand() / RAND_MAX * 2 - 1);
    return q;
}

static void op_gemm(void)
{
    phx_gemm(false, false, 1.0f, A, B, 0.0f, C);
}
static void op_gemm_bf16(void)
{
    phx_gemm(false, false, 1.0f, Ab, Bb, 0.0f, Cb);
}
static void op_relu(void)
{
    K->act_forward(0, PHX_ACT_RELU, N4M, x, y, PHX_F32);
}
/* the activations read xn, standard normal like torch.randn: their
 * speed depends on the values (erf's tail, tanh's large-|x| branch) */
static void op_gelu(void)
{
    K->act_forward(0, PHX_ACT_GELU, N4M, xn, y, PHX_F32);
}
static void op_gelu_fb(void)
{
    K->act_forward(0, PHX_ACT_GELU, N4M, xn, y, PHX_F32);
    K->act_backward(0, PHX_ACT_GELU, N4M, xn, y, dy, y, PHX_F32);
}
static void op_gelu_tanh(void)
{
    K->act_forward(0, PHX_ACT_GELU_TANH, N4M, xn, y, PHX_F32);
}
static void op_tanh(void)
{
    K->act_forward(0, PHX_ACT_TANH, N4M, xn, y, PHX_F32);
}
static void op_sigmoid(void)
{
    K->act_forward(0, PHX_ACT_SIGMOID, N4M, xn, y, PHX_F32);
}
static void op_axpby(void)
{
    K->axpby(0, N4M, 2.0f, x, PHX_F32, 0.5f, y, PHX_F32);
}
static void op_bias_add(void)
{
    K->bias_add(0, 4096, 1024, h, PHX_F32, bias);
}
static void op_bias_grad(void)
{
    K->bias_grad(0, 4096, 1024, hd, PHX_F32, 0.0f, db);
}
static void op_ln(void)
{
    K->layernorm_forward(0, 4096, 1024, 1e-5f, h, w, bln, y, mean, rstd, PHX_F32);
    memset(dw, 0, 1024 * sizeof *dw);
    memset(db, 0, 1024 * sizeof *db);
    K->layernorm_backward(0, 4096, 1024, h, w, mean, rstd, hd, gr, dw, db, PHX_F32);
}
static void op_xent(void)
{
    K->cross_entropy(0, 4096, 1000, lg, PHX_F32, labels, 0, loss, gr, NULL);
}
static int64_t adam_t;
static void op_adam(void)
{
    phx_adam_hparams hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0};
    K->adam_step(0, N4M, p, g, m, v, NULL, &hp, ++adam_t);
}
static void op_cast_bf16(void)
{
    K->cast(0, hb, PHX_BF16, x, PHX_F32, N4M);
}
static void op_cast_f16(void)
{
    K->cast(0, hb, PHX_F16, x, PHX_F32, N4M);
}
static void op_cast_bf16_f32(void)
{
    K->cast(0, y, PHX_F32, xb, PHX_BF16, N4M);
}
static void op_cast_f16_f32(void)
{
    K->cast(0, y, PHX_F32, xh, PHX_F16, N4M);
}
static uint64_t rng_off;
static void op_uniform(void)
{
    K->rng_uniform(0, y, PHX_F32, N4M, 7, rng_off += N4M, -1.0f, 1.0f);
}

/* The GPT's shapes (batch 16, 4 heads, T 128, head dim 32): attention
 * scores q k^T as one strided-batched GEMM, the causal softmax of the
 * scores forward and backward, and the token embedding forward and
 * backward (scatter-add) of 8192 tokens into a (4096, 256) table. */
#define ATT_B 64
#define ATT_T 128
#define ATT_D 32
static float *q, *kk, *sc, *emb, *demb;
static int64_t *tok;
static void op_gemm_batched(void)
{
    K->gemm_batched(0, 0, 1, ATT_T, ATT_T, ATT_D, 0.17677669f, q, ATT_D, ATT_T * ATT_D, kk, ATT_D, ATT_T * ATT_D,
                    PHX_F32, 0.0f, sc, ATT_T, ATT_T * ATT_T, PHX_F32, ATT_B);
}
static void op_softmax(void)
{
    int64_t rows = ATT_B * ATT_T;
    K->softmax_forward(0, rows, ATT_T, 0.17677669f, 1, 0, x, y, PHX_F32);
    K->softmax_backward(0, rows, ATT_T, 0.17677669f, 1, 0, y, dy, gr, PHX_F32);
}
static void op_embedding(void)
{
    int64_t bad;
    K->embedding_forward(0, 8192, 4096, 256, tok, emb, y, PHX_F32, &bad);
    memset(demb, 0, 4096 * 256 * sizeof *demb);
    K->embedding_backward(0, 8192, 4096, 256, tok, dy, PHX_F32, demb);
}

/* examples/cnn's layers at batch 128 (conv1: 1 -> 32 on 28x28, conv2:
 * 32 -> 64 on 13x13), a wider 3x3 and a 1x1 convolution, BatchNorm in
 * training and 2x2 max pooling of conv2's output; "fwd_bwd" is forward,
 * backward data (not for conv1, whose input needs none) and backward
 * weight with bias. */
static phx_conv2d_desc cv1 = {128, 1, 28, 28, 32, 3, 3, 26, 26, 1, 1, 0, 0, 1, 1, 1};
static phx_conv2d_desc cv2 = {128, 32, 13, 13, 64, 3, 3, 11, 11, 1, 1, 0, 0, 1, 1, 1};
static phx_conv2d_desc cv3 = {32, 64, 28, 28, 64, 3, 3, 28, 28, 1, 1, 1, 1, 1, 1, 1};
static phx_conv2d_desc cv1x1 = {128, 64, 14, 14, 128, 1, 1, 14, 14, 1, 1, 0, 0, 1, 1, 1};
static phx_conv2d_desc mp2 = {128, 64, 11, 11, 64, 2, 2, 5, 5, 2, 2, 0, 0, 1, 1, 64};
static float *cx, *cy, *cdy, *cdx, *cw, *cdw, *cb, *cdb;
static int32_t *amax;
static void conv_fwd(const phx_conv2d_desc *d)
{
    K->conv2d_forward(0, d, cx, cw, cb, cy, PHX_F32);
}
static void conv_fb(const phx_conv2d_desc *d, int data)
{
    conv_fwd(d);
    if (data) K->conv2d_backward_data(0, d, cdy, cw, cdx, PHX_F32);
    K->conv2d_backward_weight(0, d, cx, cdy, cdw, cdb, PHX_F32);
}
static void op_conv1(void)
{
    conv_fwd(&cv1);
}
static void op_conv1_fb(void)
{
    conv_fb(&cv1, 0);
}
static void op_conv2(void)
{
    conv_fwd(&cv2);
}
static void op_conv2_fb(void)
{
    conv_fb(&cv2, 1);
}
static void op_conv3(void)
{
    conv_fwd(&cv3);
}
static void op_conv3_fb(void)
{
    conv_fb(&cv3, 1);
}
static void op_conv1x1(void)
{
    conv_fwd(&cv1x1);
}
static void op_conv1x1_fb(void)
{
    conv_fb(&cv1x1, 1);
}
static void op_bn(void)
{
    int64_t n = 128, c = 64, hw = 121;
    K->batchnorm_stats(0, n, c, hw, cx, PHX_F32, mean, rstd);
    K->batchnorm_apply(0, n, c, hw, cx, mean, rstd, 1e-5f, w, bln, cy, PHX_F32);
    K->batchnorm_backward_reduce(0, n, c, hw, cx, cdy, PHX_F32, mean, rstd, 1e-5f, bias, bias + 64, dw, db);
    K->batchnorm_backward_apply(0, n, c, hw, cx, cdy, PHX_F32, mean, rstd, 1e-5f, w, bias, bias + 64, (double)(n * hw),
                                cdx);
}
static void op_maxpool(void)
{
    K->maxpool2d_forward(0, &mp2, cx, cy, amax, PHX_F32);
    K->maxpool2d_backward(0, &mp2, amax, cdy, cdx, PHX_F32);
}

static const struct {
    const char *name;
    void (*fn)(void);
} ops[] = {
    {"gemm_f32_1024", op_gemm},
    {"gemm_bf16_1024", op_gemm_bf16},
    {"relu_4M", op_relu},
    {"gelu_4M", op_gelu},
    {"gelu_fwd_bwd_4M", op_gelu_fb},
    {"gelu_tanh_4M", op_gelu_tanh},
    {"tanh_4M", op_tanh},
    {"sigmoid_4M", op_sigmoid},
    {"axpby_4M", op_axpby},
    {"bias_add_4096x1024", op_bias_add},
    {"bias_grad_4096x1024", op_bias_grad},
    {"layernorm_fwd_bwd_4096x1024", op_ln},
    {"xent_fwd_bwd_4096x1000", op_xent},
    {"adam_4M", op_adam},
    {"cast_f32_bf16_4M", op_cast_bf16},
    {"cast_f32_f16_4M", op_cast_f16},
    {"cast_bf16_f32_4M", op_cast_bf16_f32},
    {"cast_f16_f32_4M", op_cast_f16_f32},
    {"uniform_4M", op_uniform},
    {"gemm_batched_64x128x128x32", op_gemm_batched},
    {"softmax_causal_fwd_bwd_8192x128", op_softmax},
    {"embedding_fwd_bwd_8192x256", op_embedding},
    {"conv3x3_fwd_128x1x28x28_32", op_conv1},
    {"conv3x3_fwd_bwd_128x1x28x28_32", op_conv1_fb},
    {"conv3x3_fwd_128x32x13x13_64", op_conv2},
    {"conv3x3_fwd_bwd_128x32x13x13_64", op_conv2_fb},
    {"conv3x3_fwd_32x64x28x28_64", op_conv3},
    {"conv3x3_fwd_bwd_32x64x28x28_64", op_conv3_fb},
    {"conv1x1_fwd_128x64x14x14_128", op_conv1x1},
    {"conv1x1_fwd_bwd_128x64x14x14_128", op_conv1x1_fb},
    {"batchnorm_fwd_bwd_128x64x11x11", op_bn},
    {"maxpool2_fwd_bwd_128x64x11x11", op_maxpool},
};
#define NOPS (int)(sizeof ops / sizeof ops[0])

static double time_op(void (*fn)(void), double seconds, int repeats)
{
    fn();
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        int k = 0;
        double t0 = bench_now(), dt;
        do {
            fn();
            k++;
            dt = bench_now() - t0;
        } while (dt < seconds);
        if (dt / k < best) best = dt / k;
    }
    return best * 1e3;
}

/* Exactly iters calls of fn (--iters); not inlined, so a profiler can
 * count what it runs and nothing else. */
__attribute__((noinline)) static double run_fixed(void (*fn)(void), int iters)
{
    double t0 = bench_now();
    for (int k = 0; k < iters; k++) fn();
    return (bench_now() - t0) / iters * 1e3;
}

/* One pass of the PyTorch script: its time per op, kept where better
 * than theirs[i] so far (-1: none yet). */
static void torch_pass(const char *py, const char *torch, double seconds, int repeats, const char *only, double *theirs)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 %s %s --seconds %g --repeats %d --only '%s' 2>&1", py, torch,
             seconds, repeats, only);
    FILE *f = popen(cmd, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char name[128];
        double ms;
        if (sscanf(line, "RESULT %127s %lf", name, &ms) == 2) {
            for (int i = 0; i < NOPS; i++)
                if (!strcmp(name, ops[i].name) && (theirs[i] < 0 || ms < theirs[i])) theirs[i] = ms;
        } else {
            fprintf(stderr, "torch: %s", line);
        }
    }
    if (f) pclose(f);
}

int main(int argc, char **argv)
{
    const char *torch = NULL, *py = bench_python();
    const char *only = "";
    double seconds = 0.25;
    int repeats = 3, passes = 2, iters = 0;
    const bench_opt opts[] = {{"--torch", 's', &torch},     {"--python", 's', &py},     {"--seconds", 'd', &seconds},
                              {"--repeats", 'i', &repeats}, {"--passes", 'i', &passes}, {"--only", 's', &only},
                              {"--iters", 'i', &iters}};
    if (bench_args(argc, argv, opts, 7,
                   "[--torch PATH/kernels.py] [--python PY] [--seconds S] [--repeats R] [--passes P] "
                   "[--only SUBSTRING] [--iters N]"))
        return 2;
    if (iters > 0) torch = NULL;
    if (passes < 1 || !torch) passes = 1;
    phx_set_num_threads(1);
    K = phx_device_table(phx_cpu())->kernels;
    srand(1);
    x = fbuf(N4M), dy = fbuf(N4M), y = fbuf(N4M), p = fbuf(N4M), g = fbuf(N4M), m = fbuf(N4M), v = fbuf(N4M);
    for (int i = 0; i < N4M; i++) m[i] = 0, v[i] = 0;
    xn = fbuf(N4M);
    for (int i = 0; i < N4M; i++) { /* Box-Muller */
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (RAND_MAX + 1.0);
        xn[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    h = fbuf(4096 * 1024), hd = fbuf(4096 * 1024), gr = fbuf(4096 * 1024), lg = fbuf(4096 * 1000);
    bias = fbuf(1024), w = fbuf(1024), bln = fbuf(1024), dw = fbuf(1024), db = fbuf(1024), mean = fbuf(4096),
    rstd = fbuf(4096);
    loss = fbuf(1);
    hb = (uint16_t *)fbuf(N4M / 2), xb = (uint16_t *)fbuf(N4M / 2), xh = (uint16_t *)fbuf(N4M / 2);
    /* the widening casts read x's values, as torch's xb.float() and
     * xh.float() do (hb's bits as f16 would hold NaNs when run alone) */
    K->cast(0, xb, PHX_BF16, x, PHX_F32, N4M);
    K->cast(0, xh, PHX_F16, x, PHX_F32, N4M);
    q = fbuf(ATT_B * ATT_T * ATT_D), kk = fbuf(ATT_B * ATT_T * ATT_D), sc = fbuf(ATT_B * ATT_T * ATT_T);
    emb = fbuf(4096 * 256), demb = fbuf(4096 * 256);
    tok = malloc(8192 * sizeof *tok);
    for (int i = 0; tok && i < 8192; i++) tok[i] = rand() % 4096;
    labels = malloc(4096 * sizeof *labels);
    for (int i = 0; i < 4096; i++) labels[i] = rand() % 1000;
    cx = fbuf(128 * 64 * 28 * 28), cy = fbuf(128 * 128 * 28 * 28), cdy = fbuf(128 * 128 * 28 * 28),
    cdx = fbuf(128 * 64 * 28 * 28), cw = fbuf(128 * 64 * 9), cdw = fbuf(128 * 64 * 9), cb = fbuf(128), cdb = fbuf(128);
    amax = malloc(128 * 64 * 25 * sizeof *amax);
    for (int i = 0; i < 64; i++) rstd[i] = 1.0f + 0.5f * (float)i / 64; /* BatchNorm's variances */
    int64_t s[2] = {1024, 1024};
    A = phx_tensor_new(PHX_F32, 2, s, phx_cpu()), B = phx_tensor_new(PHX_F32, 2, s, phx_cpu()),
    C = phx_tensor_new(PHX_F32, 2, s, phx_cpu());
    Ab = phx_tensor_new(PHX_BF16, 2, s, phx_cpu()), Bb = phx_tensor_new(PHX_BF16, 2, s, phx_cpu()),
    Cb = phx_tensor_new(PHX_BF16, 2, s, phx_cpu());
    phx_tensor_axpby(0.0f, NULL, 0.0f, A), phx_tensor_fill(B, 0.5), phx_tensor_fill(Ab, 0.25), phx_tensor_fill(Bb, 0.5);
    memcpy(phx_tensor_data(A), h, 1024 * 1024 * sizeof(float));

    double ours[NOPS], theirs[NOPS];
    for (int i = 0; i < NOPS; i++) ours[i] = -1, theirs[i] = -1;
    for (int pass = 0; pass < passes; pass++) {
        for (int i = 0; i < NOPS; i++)
            if (strstr(ops[i].name, only)) {
                double t;
                if (iters > 0) {
                    ops[i].fn();
                    t = run_fixed(ops[i].fn, iters);
                } else {
                    t = time_op(ops[i].fn, seconds, repeats);
                }
                if (ours[i] < 0 || t < ours[i]) ours[i] = t;
            }
        if (torch) torch_pass(py, torch, seconds, repeats, only, theirs);
    }
    if (iters > 0) printf("mean of %d runs after one warm-up run\n", iters);
    if (passes > 1)
        printf("best of %d alternating passes per side, each the best of %d runs of %g s\n", passes, repeats, seconds);
    printf("%-30s %12s %12s %10s\n", "op (1 thread)", "phalanx ms", "torch ms", "torch/phx");
    for (int i = 0; i < NOPS; i++) {
        if (ours[i] < 0) continue;
        bench_tsv_ratio("bench/kernels", ops[i].name, 1.0 / ours[i], theirs[i] > 0 ? 1.0 / theirs[i] : 0);
        if (theirs[i] > 0)
            printf("%-30s %12.3f %12.3f %10.2f\n", ops[i].name, ours[i], theirs[i], theirs[i] / ours[i]);
        else
            printf("%-30s %12.3f %12s %10s\n", ops[i].name, ours[i], "-", "-");
    }
    return 0;
}
