/* One epoch of a Fashion-MNIST MLP under fp32, fp16 (with loss scaling)
 * and bf16 from the same seed: the test accuracy of fp16 and bf16 must be
 * within 0.01 of fp32's. Skips when the data set is missing.
 *
 * The MLP is 784-512-256-10 (ReLU), batch 64, SGD lr 0.02 momentum 0.9,
 * one epoch over all 60000 training images (about 13 s for the three runs
 * on an idle 2-core machine, 20 s under load); accuracy over all 10000
 * test images. AMP_MNIST_TRAIN=n trains on the first n images only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { HID1 = 512, HID2 = 256, BATCH = 64, EVAL_BATCH = 1000 };

static phx_tensor *load(const char *dir, const char *file)
{
    char path[4096];
    phx_tensor *t = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (phx_idx_read(path, &t) != PHX_OK) skip_all(phx_last_error());
    return t;
}

/* Fraction of test images classified correctly. */
static double accuracy(phx_module *m, phx_tensor *x, phx_tensor *labels)
{
    phx_module_train(m, false);
    int64_t n = phx_tensor_dim(x, 0), f = phx_tensor_dim(x, 1), right = 0;
    const int64_t *lab = phx_tensor_data(labels);
    for (int64_t b = 0; b + EVAL_BATCH <= n; b += EVAL_BATCH) {
        int64_t shape[2] = {EVAL_BATCH, f};
        phx_tensor *xb = phx_tensor_view(x, b * f, 2, shape), *y = NULL;
        if (phx_module_forward(m, xb, &y) != PHX_OK) {
            diag("eval: %s", phx_last_error());
            phx_tensor_free(xb);
            return -1;
        }
        int64_t c = phx_tensor_dim(y, 1);
        for (int64_t i = 0; i < EVAL_BATCH; i++) {
            int64_t best = 0;
            double bv = -INFINITY, v;
            for (int64_t j = 0; j < c; j++)
                if (phx_tensor_get(y, i * c + j, &v) == PHX_OK && v > bv) bv = v, best = j;
            right += best == lab[b + i];
        }
        phx_tensor_free(xb);
    }
    phx_module_train(m, true);
    return (double)right / (double)(n - n % EVAL_BATCH);
}

typedef struct result {
    double acc, last_loss, final_scale;
    int skipped, errors;
} result;

static void train(const char *policy, phx_tensor *xtr, phx_tensor *ytr, phx_tensor *xte, phx_tensor *yte, result *r)
{
    memset(r, 0, sizeof *r);
    phx_precision *p = NULL;
    if (phx_precision_new(policy, &p) != PHX_OK) {
        diag("%s", phx_last_error());
        r->errors = 1;
        return;
    }
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(784, HID1, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(HID1, HID2, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(HID2, 10, true, rng));
    phx_module_set_precision(m, p);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.02;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    phx_scaler *s = phx_scaler_new(p, NULL);
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    phx_loader *ld = phx_loader_new(xtr, ytr, BATCH, true, 0, false, NULL, 0);
    phx_loader_set_epoch(ld, 0);
    phx_tensor *xb, *yb, *out;
    int more;
    while ((more = phx_loader_next(ld, &xb, &yb)) == 1) {
        float loss = NAN;
        bool stepped = false;
        phx_status st = phx_optimizer_zero_grad(opt);
        if (!st) st = phx_module_forward(m, xb, &out);
        if (!st) st = phx_loss_forward(ce, out, yb, &loss);
        if (!st) st = phx_scaler_scale_grad(s, phx_loss_grad(ce));
        if (!st) st = phx_module_backward(m, phx_loss_grad(ce), NULL);
        if (!st) st = phx_scaler_step(s, opt, &stepped);
        if (st) {
            diag("%s: %s", policy, phx_last_error());
            r->errors++;
            break;
        }
        r->skipped += !stepped;
        r->last_loss = loss;
    }
    r->errors += more < 0;
    r->final_scale = phx_scaler_get_scale(s);
    r->acc = accuracy(m, xte, yte);
    diag("%s: test accuracy %.4f, last loss %.4f, %d steps skipped, final scale %g", policy, r->acc, r->last_loss,
         r->skipped, r->final_scale);
    phx_loader_free(ld);
    phx_loss_free(ce);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_rng_free(rng);
    phx_precision_free(p);
}

int main(void)
{
    const char *dir = phx_fashion_mnist_dir();
    phx_tensor *xtr_all = load(dir, "train-images-idx3-ubyte.gz"), *ytr_all = load(dir, "train-labels-idx1-ubyte.gz");
    phx_tensor *xte = load(dir, "t10k-images-idx3-ubyte.gz"), *yte = load(dir, "t10k-labels-idx1-ubyte.gz");
    const char *env = getenv("AMP_MNIST_TRAIN");
    int64_t n = env ? atoll(env) : 0;
    if (n <= 0 || n > phx_tensor_dim(xtr_all, 0)) n = phx_tensor_dim(xtr_all, 0);
    int64_t xs[2] = {n, 784}, ys[1] = {n};
    phx_tensor *xtr = phx_tensor_view(xtr_all, 0, 2, xs), *ytr = phx_tensor_view(ytr_all, 0, 1, ys);

    plan(8);
    diag("784-%d-%d-10 MLP, one epoch over %lld training images, batch %d", HID1, HID2, (long long)n, BATCH);
    result r32, r16, rb;
    train("fp32", xtr, ytr, xte, yte, &r32);
    train("fp16", xtr, ytr, xte, yte, &r16);
    train("bf16", xtr, ytr, xte, yte, &rb);
    is_int(r32.errors + r16.errors + rb.errors, 0, "three runs without errors");
    ok(r32.acc > 0.75, "fp32 learns (test accuracy %.4f > 0.75)", r32.acc);
    ok(fabs(r16.acc - r32.acc) <= 0.01, "fp16 accuracy %.4f within 0.01 of fp32's %.4f (diff %+.4f)", r16.acc, r32.acc,
       r16.acc - r32.acc);
    ok(fabs(rb.acc - r32.acc) <= 0.01, "bf16 accuracy %.4f within 0.01 of fp32's %.4f (diff %+.4f)", rb.acc, r32.acc,
       rb.acc - r32.acc);
    ok(r16.acc != r32.acc || r16.last_loss != r32.last_loss, "fp16 really ran in lower precision (results differ)");
    ok(rb.last_loss != r16.last_loss, "bf16 and fp16 differ from each other");
    is_int(r32.skipped + rb.skipped, 0, "fp32 and bf16 never skip a step");
    ok(r16.skipped <= 3, "fp16 skipped %d step(s) (the scale starts at 65536 and only backs off when needed)",
       r16.skipped);
    phx_tensor_free(xtr);
    phx_tensor_free(ytr);
    phx_tensor_free(xtr_all);
    phx_tensor_free(ytr_all);
    phx_tensor_free(xte);
    phx_tensor_free(yte);
    return done_testing();
}
