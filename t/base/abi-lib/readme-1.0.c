/* The README's program as of the 1.0 headers (commit 274f127), kept as it was
 * for t/base/abi_lib.sh: built against t/base/abi-lib-1.0, run on today's library. */
/* train.c: an MLP on random data, one process or DDP under phxrun.
 *   cc train.c $(pkg-config --cflags --libs phalanx) -o train
 *   ./train                                  # one process
 *   phxrun --nproc-per-node 2 ./train        # DDP, two processes */
#include <stdio.h>
#include <phalanx/phalanx.h>

static int fail(const char *what)
{
    fprintf(stderr, "train: %s: %s\n", what, phx_last_error());
    return 1;
}

int main(void)
{
    /* The world: one process, or the ranks phxrun (mpirun, srun) started. */
    phx_world world;
    phx_comm *comm = NULL;
    if (phx_world_from_env(&world) != PHX_OK) return fail("world");
    if (world.size > 1 && phx_comm_init(NULL, &comm) != PHX_OK) return fail("phx_comm_init");
    int rank = comm ? phx_comm_rank(comm) : 0;

    /* Device and precision: PHX_DEVICE and PHX_PRECISION, else the defaults
     * (a GPU when one is usable; fp32). A bad value is an error here. */
    phx_device dev;
    phx_precision *prec = NULL;
    if (phx_device_default(&dev) != PHX_OK) return fail("PHX_DEVICE");
    if (phx_precision_new(NULL, &prec) != PHX_OK) return fail("PHX_PRECISION");

    /* The model: the same seed on every rank (DDP also broadcasts rank 0's). */
    phx_rng *rng = phx_rng_new(0);
    phx_module *model = phx_sequential_new();
    phx_sequential_add(model, phx_linear_new(784, 512, true, rng));
    phx_sequential_add(model, phx_relu_new());
    if (phx_sequential_add(model, phx_linear_new(512, 10, true, rng)) != PHX_OK) return fail("model");
    if (phx_module_set_precision(model, prec) != PHX_OK || phx_module_to(model, dev) != PHX_OK)
        return fail("model setup");
    phx_module *net = comm ? phx_ddp_new(model, comm, NULL) : model; /* DDP: one line */
    phx_adam_opts o = phx_adamw_defaults();
    o.lr = 1e-3;
    phx_optimizer *opt = phx_adam_new(net, &o);
    phx_scaler *scaler = phx_scaler_new(prec, NULL); /* loss scaling under fp16 */
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    if (!net || !opt || !scaler || !ce) return fail("setup");

    /* Data: 64 random images per rank; the label is the largest of the first
     * ten pixels, so there is something to learn. Made on the CPU, copied to
     * the device. */
    int64_t xs[2] = {64, 784}, ys[1] = {64};
    phx_tensor *xh = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *yh = phx_tensor_new(PHX_I64, 1, ys, phx_cpu());
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, dev), *y = phx_tensor_new(PHX_I64, 1, ys, dev);
    phx_rng *data = phx_rng_new(100 + (uint64_t)rank);
    if (!xh || !yh || !x || !y || phx_rng_normal(data, xh, 0, 1) != PHX_OK) return fail("data");
    const float *px = phx_tensor_data(xh);
    int64_t *py = phx_tensor_data(yh);
    for (int i = 0; i < 64; i++) {
        py[i] = 0;
        for (int c = 1; c < 10; c++)
            if (px[i * 784 + c] > px[i * 784 + py[i]]) py[i] = c;
    }
    if (phx_tensor_copy(x, xh) != PHX_OK || phx_tensor_copy(y, yh) != PHX_OK) return fail("copy");

    for (int step = 1; step <= 50; step++) {
        phx_tensor *out;
        float loss;
        if (phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(net, x, &out) != PHX_OK ||
            phx_loss_forward(ce, out, y, &loss) != PHX_OK ||
            phx_scaler_scale_grad(scaler, phx_loss_grad(ce)) != PHX_OK ||
            phx_module_backward(net, phx_loss_grad(ce), NULL) != PHX_OK || /* all-reduce overlaps */
            phx_scaler_step(scaler, opt, NULL) != PHX_OK)
            return fail("training step");
        if (rank == 0 && step % 10 == 0) printf("step %d loss %.4f\n", step, loss);
    }

    /* Cleanup: the wrapper before the model, the communicator last. */
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_tensor_free(xh);
    phx_tensor_free(yh);
    phx_rng_free(data);
    phx_rng_free(rng);
    phx_loss_free(ce);
    phx_scaler_free(scaler);
    phx_optimizer_free(opt);
    if (net != model) phx_module_free(net);
    phx_module_free(model);
    phx_precision_free(prec);
    phx_comm_free(comm);
    return 0;
}
