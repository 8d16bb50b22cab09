/* The seed program: Linear(10, 1) on random data (batch 64), MSE, SGD
 * lr 0.01, 10 epochs, one line per epoch, on the GPU when one is usable
 * (PHX_DEVICE as for phx_device_default) -- PyTorch's
 *
 *     device = "cuda" if torch.cuda.is_available() else "cpu"
 *     print("Using CUDA" if device == "cuda" else "Using CPU")
 *     model = nn.Linear(10, 1).to(device); opt = optim.SGD(model.parameters(), lr=0.01)
 *     for epoch in range(10):
 *         opt.zero_grad(); loss = F.mse_loss(model(x), y); loss.backward(); opt.step()
 *         print(f"Epoch [{epoch+1}/10], Loss: {loss.item():.4f}")
 */
#include <stdio.h>
#include <stdlib.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

static void check(phx_status st, const char *what)
{
    if (st != PHX_OK) {
        fprintf(stderr, "linear_regression: %s: %s\n", what, phx_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: linear_regression " EX_PROGRESS_USAGE "\n" EX_PROGRESS_HELP;
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po) || argc > 1) {
        fputs(usage, stderr);
        return 2;
    }
    po.total_steps = 10;
    phx_progress *prog = phx_progress_new(&po);
    check(prog ? PHX_OK : PHX_EIO, "--metrics/--tensorboard");
    phx_device dev;
    check(phx_device_default(&dev), "PHX_DEVICE");
    printf("Using %s\n", dev.kind == PHX_DEVICE_CPU ? "CPU" : "CUDA");
    phx_rng *rng = phx_rng_new(0);
    phx_module *model = phx_linear_new(10, 1, true, rng);
    int64_t xs[2] = {64, 10}, ys[2] = {64, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, dev), *y = phx_tensor_new(PHX_F32, 2, ys, dev);
    if (!rng || !model || !x || !y || phx_module_to(model, dev) != PHX_OK) {
        fprintf(stderr, "linear_regression: %s\n", phx_last_error());
        return 1;
    }
    check(phx_rng_normal(rng, x, 0.0f, 1.0f), "data");
    check(phx_rng_normal(rng, y, 0.0f, 1.0f), "targets");
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.01;
    phx_optimizer *opt = phx_sgd_new(model, &o);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (!opt || !mse) {
        fprintf(stderr, "linear_regression: %s\n", phx_last_error());
        return 1;
    }
    for (int epoch = 0; epoch < 10; epoch++) {
        phx_tensor *out;
        float loss;
        check(phx_optimizer_zero_grad(opt), "zero_grad");
        check(phx_module_forward(model, x, &out), "forward");
        check(phx_loss_forward(mse, out, y, &loss), "loss");
        check(phx_module_backward(model, phx_loss_grad(mse), NULL), "backward");
        check(phx_optimizer_step(opt), "step");
        phx_progress_step(prog, epoch + 1, loss, o.lr, 0);
        phx_progress_break(prog);
        printf("Epoch [%d/10], Loss: %.4f\n", epoch + 1, loss);
    }
    phx_progress_free(prog);
    phx_loss_free(mse);
    phx_optimizer_free(opt);
    phx_module_free(model);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_rng_free(rng);
    return 0;
}
