/* The seed's DataParallel program in C: Linear(10, 1), MSE, SGD lr 0.01,
 * one random batch of 64 drawn before the loop, 10 epochs. When more than one device is available
 * the model is wrapped with phx_dp_new -- one line, the loop is unchanged.
 * Devices: every GPU when the cuda plugin finds more than one (PHX_DEVICE
 * as for phx_device_default), else a CPU replica per thread
 * (PHX_NUM_THREADS, default: the core count).
 *
 *   examples/data_parallel
 *   PHX_NUM_THREADS=4 examples/data_parallel     4 CPU replicas
 */
#include <stdio.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

#define EPOCHS 10
#define BATCH 64

static int fail(const char *what)
{
    fprintf(stderr, "data_parallel: %s: %s\n", what, phx_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: data_parallel " EX_PROGRESS_USAGE "\n" EX_PROGRESS_HELP;
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po) || argc > 1) {
        fputs(usage, stderr);
        return 2;
    }
    po.total_steps = EPOCHS;
    phx_progress *prog = phx_progress_new(&po);
    if (!prog) return fail("--metrics/--tensorboard");
    phx_device dev;
    if (phx_device_default(&dev) != PHX_OK) return fail("device");
    int available = dev.kind == PHX_DEVICE_CPU ? phx_num_threads() : phx_device_count(dev.kind);

    phx_rng *init = phx_rng_new(0);
    phx_module *model = phx_linear_new(10, 1, true, init);
    if (!model || phx_module_to(model, dev) != PHX_OK) return fail("model");
    phx_module *net = model, *dp = NULL;
    char name[32];
    if (available > 1) {
        if (!(net = dp = phx_dp_new(model, NULL, 0, NULL))) /* all devices of the model's kind */
            return fail("phx_dp_new");
        /* PyTorch's line; on the CPU the replicas are per-thread */
        if (dev.kind == PHX_DEVICE_CPU)
            printf("Let's use %zu CPU replicas!\n", phx_dp_num_replicas(dp));
        else
            printf("Let's use %zu GPUs!\n", phx_dp_num_replicas(dp));
    } else {
        printf("One device (%s): the model runs unwrapped\n", phx_device_name(dev, name, sizeof name));
    }

    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(net, &so);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    int64_t xs[2] = {BATCH, 10}, ys[2] = {BATCH, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, dev), *y = phx_tensor_new(PHX_F32, 2, ys, dev);
    phx_rng *data = phx_rng_new(1000);
    int rc = !opt || !mse || !x || !y || !data ? fail("setup") : 0;
    if (rc == 0 && (phx_rng_normal(data, x, 0, 1) != PHX_OK || phx_rng_normal(data, y, 0, 1) != PHX_OK))
        rc = fail("data");

    for (int epoch = 0; epoch < EPOCHS && rc == 0; epoch++) {
        phx_tensor *out;
        float loss;
        if (phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(net, x, &out) != PHX_OK ||
            phx_loss_forward(mse, out, y, &loss) != PHX_OK ||
            phx_module_backward(net, phx_loss_grad(mse), NULL) != PHX_OK || phx_optimizer_step(opt) != PHX_OK) {
            rc = fail("training step");
            break;
        }
        phx_progress_step(prog, epoch + 1, loss, so.lr, 0);
        phx_progress_break(prog);
        printf("Epoch [%d/%d], Loss: %.4f\n", epoch + 1, EPOCHS, loss);
    }
    phx_progress_free(prog);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_rng_free(data);
    phx_rng_free(init);
    phx_loss_free(mse);
    phx_optimizer_free(opt);
    phx_module_free(dp);
    phx_module_free(model);
    return rc;
}
