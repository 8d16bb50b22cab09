/* The seed's DDP program in C: Linear(10, 1) trained with MSE and SGD
 * (lr 0.01) on random batches of 64 for 10 epochs under
 * DistributedDataParallel; rank 0 prints the loss each epoch.
 *
 *   examples/ddp [--world N]                    N ranks through phx_spawn (default 2)
 *   PHX_COMM=threads examples/ddp               ... as threads of one process
 *   phxrun --nproc-per-node 2 examples/ddp      ranks started by phxrun (no spawn)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

#define EPOCHS 10
#define BATCH 64

static int fail(int rank, const char *what)
{
    if (rank < 0) /* before the communicator: the message names its function */
        fprintf(stderr, "ddp: %s\n", phx_last_error());
    else
        fprintf(stderr, "ddp: rank %d: %s: %s\n", rank, what, phx_last_error());
    return 1;
}

/* --metrics, --tensorboard and --log-every, for rank 0 */
static phx_progress_opts progress_opts = PHX_PROGRESS_OPTS_INIT;

static int train(int rank, void *arg)
{
    (void)arg;
    phx_comm *comm = NULL;
    if (phx_comm_init(NULL, &comm) != PHX_OK) return fail(rank, "phx_comm_init");
    rank = phx_comm_rank(comm);

    phx_rng *init = phx_rng_new(0);
    phx_module *model = phx_linear_new(10, 1, true, init);
    phx_module *ddp = model ? phx_ddp_new(model, comm, NULL) : NULL;
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    int64_t xs[2] = {BATCH, 10}, ys[2] = {BATCH, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu());
    phx_tensor *y = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng *data = phx_rng_new(1000 + (uint64_t)rank); /* each rank its own data */
    int rc = !opt || !mse || !x || !y || !data ? fail(rank, "setup") : 0;
    phx_progress_opts po = progress_opts;
    po.total_steps = EPOCHS;
    po.rank = rank;
    phx_progress *prog = rc == 0 ? phx_progress_new(&po) : NULL;
    if (rc == 0 && !prog) rc = fail(rank, "--metrics/--tensorboard");

    for (int epoch = 0; epoch < EPOCHS && rc == 0; epoch++) {
        phx_tensor *out;
        float loss;
        if (phx_rng_normal(data, x, 0, 1) != PHX_OK || phx_rng_normal(data, y, 0, 1) != PHX_OK ||
            phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(ddp, x, &out) != PHX_OK ||
            phx_loss_forward(mse, out, y, &loss) != PHX_OK ||
            phx_module_backward(ddp, phx_loss_grad(mse), NULL) != PHX_OK || phx_optimizer_step(opt) != PHX_OK) {
            rc = fail(rank, "training step");
            break;
        }
        phx_progress_step(prog, epoch + 1, loss, so.lr, 0);
        if (rank == 0) {
            phx_progress_break(prog);
            printf("Epoch [%d/%d], Loss: %.4f\n", epoch + 1, EPOCHS, loss);
            fflush(stdout);
        }
    }
    phx_progress_free(prog);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_rng_free(data);
    phx_rng_free(init);
    phx_loss_free(mse);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(model);
    phx_comm_free(comm);
    return rc;
}

int main(int argc, char **argv)
{
    int world = 2;
    static const char usage[] =
        "usage: ddp [--world N] " EX_PROGRESS_USAGE "\n"
        "  --world N          ranks (threads or processes, by PHX_COMM; default 2)\n" EX_PROGRESS_HELP;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &progress_opts)) return 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--world") && i + 1 < argc) {
            if (ex_int_arg("ddp", "--world", argv[++i], 1, 1024, &world)) return 2;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    /* Started by phxrun (or mpirun, srun): this process is one rank. */
    if (getenv("WORLD_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_PROCID")) return train(-1, NULL);
    if (phx_spawn(world, train, NULL) != PHX_OK) {
        fprintf(stderr, "ddp: %s\n", phx_last_error());
        return 1;
    }
    return 0;
}
