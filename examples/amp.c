/* The seed's mixed-precision program: Linear(10, 1) trained with MSE and
 * SGD (lr 0.01), batch 64, 10 epochs, under the precision policy named by
 * PHX_PRECISION (fp16 when unset: this is the AMP example), with the loss
 * scaler -- PyTorch's
 *
 *     with autocast(): loss = criterion(model(x), y)
 *     scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
 *
 * The same loop serves fp32 and bf16: their scaler calls are no-ops.
 * Data: 1000 samples x ~ N(0, 1), y = x w + 0.5 + 0.1 N(0, 1) with a fixed
 * w ~ N(0, 1), all from Philox seed 0. Each epoch prints the mean loss of
 * its batches. */
#include <stdio.h>
#include <stdlib.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

enum { N = 1000, IN = 10, BATCH = 64, EPOCHS = 10 };

static int fail(const char *what)
{
    fprintf(stderr, "amp: %s: %s\n", what, phx_last_error());
    return 1;
}

/* x (N, IN), y (N, 1) of a noisy linear relation. */
static phx_status make_data(phx_rng *rng, phx_tensor *x, phx_tensor *y)
{
    int64_t ws[1] = {IN};
    phx_tensor *w = phx_tensor_new(PHX_F32, 1, ws, phx_cpu());
    phx_status st = w ? PHX_OK : PHX_ENOMEM;
    if (!st) st = phx_rng_normal(rng, x, 0, 1);
    if (!st) st = phx_rng_normal(rng, w, 0, 1);
    if (!st) st = phx_rng_normal(rng, y, 0.5f, 0.1f); /* bias + noise */
    if (!st) {
        const float *xd = phx_tensor_data(x), *wd = phx_tensor_data(w);
        float *yd = phx_tensor_data(y);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < IN; j++) yd[i] += xd[i * IN + j] * wd[j];
    }
    phx_tensor_free(w);
    return st;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: amp " EX_PROGRESS_USAGE "\n" EX_PROGRESS_HELP;
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po) || argc > 1) {
        fputs(usage, stderr);
        return 2;
    }
    const char *name = getenv("PHX_PRECISION");
    phx_precision *prec = NULL;
    if (phx_precision_new(name && *name ? name : "fp16", &prec) != PHX_OK) return fail("precision");

    phx_rng *rng = phx_rng_new(0);
    int64_t xs[2] = {N, IN}, ys[2] = {N, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    if (!rng || !x || !y || make_data(rng, x, y) != PHX_OK) return fail("data");

    phx_module *model = phx_linear_new(IN, 1, true, rng);
    if (!model || phx_module_set_precision(model, prec) != PHX_OK) return fail("model");
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(model, &so);
    phx_scaler *scaler = phx_scaler_new(prec, NULL);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_loader *loader = phx_loader_new(x, y, BATCH, true, 0, false, NULL, 0);
    if (!opt || !scaler || !mse || !loader) return fail("setup");

    po.total_steps = EPOCHS * (int64_t)phx_loader_num_batches(loader);
    phx_progress *prog = phx_progress_new(&po);
    if (!prog) return fail("--metrics/--tensorboard");
    printf("Precision: %s (compute %s, loss scaling %s)\n", phx_precision_name(prec),
           phx_dtype_name(phx_precision_dtype(prec)), phx_precision_scaling(prec) ? "on" : "off");
    int skipped = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        phx_loader_set_epoch(loader, epoch);
        phx_tensor *xb, *yb, *out;
        double sum = 0;
        int batches = 0, r;
        while ((r = phx_loader_next(loader, &xb, &yb)) == 1) {
            float loss;
            bool stepped;
            if (phx_optimizer_zero_grad(opt) || phx_module_forward(model, xb, &out) ||
                phx_loss_forward(mse, out, yb, &loss) || phx_scaler_scale_grad(scaler, phx_loss_grad(mse)) ||
                phx_module_backward(model, phx_loss_grad(mse), NULL) || phx_scaler_step(scaler, opt, &stepped))
                return fail("training step");
            skipped += !stepped;
            sum += loss;
            batches++;
            phx_progress_step(prog, epoch + 1, loss, so.lr, 0);
        }
        if (r < 0) return fail("loader");
        phx_progress_break(prog);
        phx_progress_record(prog, epoch + 1, "loss_scale", phx_scaler_get_scale(scaler));
        printf("Epoch [%d/%d], Loss: %.4f\n", epoch + 1, EPOCHS, sum / batches);
    }
    printf("Loss scale %g, %d of %d steps skipped\n", phx_scaler_get_scale(scaler), skipped,
           EPOCHS * (int)phx_loader_num_batches(loader));

    phx_progress_free(prog);
    phx_loader_free(loader);
    phx_loss_free(mse);
    phx_scaler_free(scaler);
    phx_optimizer_free(opt);
    phx_module_free(model);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_rng_free(rng);
    phx_precision_free(prec);
    return 0;
}
