/* Fashion-MNIST: MLP 784-512-256-10 (ReLU), AdamW lr 1e-3, batch 128,
 * shuffled each epoch; a progress line per epoch (loss, samples/s), test
 * accuracy at the end. Data: Debian's dataset-fashion-mnist (or
 * $PHX_FASHION_MNIST).
 *
 * Under phxrun (WORLD_SIZE > 1) the model is wrapped in DDP and each rank
 * trains on its DistributedSampler shard with batch B; rank 0 prints the
 * progress and the test accuracy and saves the checkpoint:
 *
 *   phxrun --nproc-per-node 2 examples/fashion_mnist --epochs 2
 *
 * PHX_PRECISION=fp16|bf16 trains in mixed precision (fp16 with dynamic
 * loss scaling); the default is fp32. PHX_DEVICE=cuda trains on the GPU
 * (the default when one is usable).
 *
 *   fashion_mnist [--epochs N] [--batch B] [--lr LR] [--seed S]
 *                 [--save PATH] [--load PATH] [--resume PATH]
 *                 [--workers N] [--uneven] [--metrics FILE] [--tensorboard DIR]
 *                 [--log-every N] [--help]
 *
 * --load restores model and optimizer (and the epoch count) from a
 * checkpoint before training; --epochs 0 --load PATH only evaluates.
 * --resume PATH continues from PATH when it exists and saves it after every
 * epoch, so a run restarted by phxrun --max-restarts (or by hand) picks up
 * at its last finished epoch; --epochs is then the total to reach.
 * --workers N assembles batches on N threads ahead of the step (the same
 * batches as with 0, the default). --uneven (under phxrun) gives rank r a
 * share of the training set proportional to r + 1, so ranks run out of
 * batches at different steps, and trains inside a DDP join
 * (phx_ddp_join_begin/end) so none waits for the others.
 *
 * --zero 1|2|3 shards AdamW's state (with 2 the gradients, with 3 also
 * the parameters: FSDP) over the ranks (examples/args.h, ex_parallel_new); PATH of --save, --load and
 * --resume is then a folder holding a sharded checkpoint (every rank
 * writes its shard) and the file PATH/epoch, and loads at any number of
 * ranks. The global batch of a step (world x B) is the same rows at any
 * world size with the same world x B (DistributedSampler's rules), so
 * such a resume continues the run it came from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"
#include "examples/fmnist.h"

static phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    return phx_adam_new(m, arg);
}

int main(int argc, char **argv)
{
    fm_prog = "fashion_mnist";
    int epochs = 5;
    int64_t batch = 128;
    double lr = 1e-3;
    uint64_t seed = 0;
    const char *save = NULL, *load = NULL, *resume = NULL;
    int workers = 0, uneven = 0, zero = 0;
    static const char usage[] =
        "usage: fashion_mnist [--epochs N] [--batch B] [--lr LR] [--seed S] [--save PATH] [--load PATH]\n"
        "                     [--resume PATH] [--workers N] [--uneven] " EX_ZERO_USAGE "\n"
        "                     " EX_PROGRESS_USAGE "\n"
        "An MLP 784-512-256-10 on Fashion-MNIST; under phxrun each rank is a DDP replica.\n"
        "  --epochs N         epochs to train (default 5; with --resume, the total to reach)\n"
        "  --batch B          batch per rank (default 128)\n"
        "  --lr LR            AdamW's learning rate (default 1e-3)\n"
        "  --seed S           initialisation and shuffling seed (default 0)\n"
        "  --save PATH        save model, optimizer and epoch (safetensors) at the end\n"
        "  --load PATH        restore them before training (--epochs 0: only evaluate)\n"
        "  --resume PATH      continue from PATH when it exists; save it after every epoch\n"
        "  --workers N        threads assembling batches ahead of the step (default 0)\n"
        "  --uneven           (under phxrun) uneven shards, trained inside a DDP join\n" EX_ZERO_HELP
        "                     (and the epoch in PATH/epoch)\n" EX_PROGRESS_HELP
        "Environment: PHX_PRECISION=fp16|bf16, PHX_DEVICE=cuda|cpu, PHX_FASHION_MNIST=DIR (doc/reference/env.md).\n";
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int common;
        if (!strcmp(a, "--uneven")) {
            uneven = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "fashion_mnist: %s needs a value\n", a);
            return 2;
        } else if ((common = ex_common_arg(fm_prog, a, v, &epochs, &batch, &lr, &seed)) != 0) {
            if (common < 0) return 2;
        } else if (!strcmp(a, "--save"))
            save = v;
        else if (!strcmp(a, "--load"))
            load = v;
        else if (!strcmp(a, "--resume"))
            resume = v;
        else if (!strcmp(a, "--workers")) {
            if (ex_int_arg(fm_prog, a, v, 0, INT_MAX, &workers)) return 2;
        } else if (!strcmp(a, "--zero")) {
            if (ex_zero_arg(fm_prog, v, &zero)) return 2;
        } else {
            fprintf(stderr, "fashion_mnist: unknown option '%s'\n", a);
            fputs(usage, stderr);
            return 2;
        }
        i++;
    }
    if (zero && uneven) {
        fprintf(stderr, "fashion_mnist: --uneven (a DDP join) is not combined with --zero 1|2 in this example\n");
        return 2;
    }
    phx_world world = PHX_WORLD_INIT;
    check(phx_world_from_env(&world), "world");
    phx_comm *comm = NULL;
    if (world.size > 1) check(phx_comm_init(NULL, &comm), "phx_comm_init");
    int rank = comm ? phx_comm_rank(comm) : 0, size = comm ? phx_comm_size(comm) : 1;
    phx_tensor *xtr = read_idx("train-images-idx3-ubyte.gz"), *ytr = read_idx("train-labels-idx1-ubyte.gz");
    phx_tensor *xte = read_idx("t10k-images-idx3-ubyte.gz"), *yte = read_idx("t10k-labels-idx1-ubyte.gz");

    phx_rng *rng = phx_rng_new(seed);
    phx_module *model = phx_sequential_new();
    phx_sequential_add(model, phx_linear_new(784, 512, true, rng));
    phx_sequential_add(model, phx_relu_new());
    phx_sequential_add(model, phx_linear_new(512, 256, true, rng));
    phx_sequential_add(model, phx_relu_new());
    phx_sequential_add(model, phx_linear_new(256, 10, true, rng));
    if (phx_module_num_params(model) != 6) die("model");
    phx_precision *prec = NULL;
    check(phx_precision_new(NULL, &prec), "PHX_PRECISION");
    check(phx_module_set_precision(model, prec), "precision");
    /* PHX_DEVICE, else cuda:LOCAL_RANK when a GPU is usable, else the CPU. */
    phx_device dev;
    check(phx_device_default(&dev), "PHX_DEVICE");
    check(phx_module_to(model, dev), "model to device");
    phx_tensor *xdev = NULL, *ydev = NULL;
    phx_scaler *scaler = phx_scaler_new(prec, NULL);
    /* DDP: the wrapper all-reduces gradient buckets during backward;
     * --zero 1|2 shards the optimizer state over it. */
    phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
    ao.lr = lr;
    phx_module *net = NULL;
    phx_optimizer *opt = NULL;
    if (!scaler) die("setup");
    check(ex_parallel_new(zero, model, comm, 0, make_adamw, &ao, &net, &opt), "--zero");
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    /* Each rank's shard of the training set (DistributedSampler rules),
     * reshuffled every epoch; --workers threads assemble batches ahead, and
     * on a GPU the next batch's copy overlaps the step. */
    phx_tensor *pair[2] = {xtr, ytr};
    phx_dataset *train_set = phx_dataset_tensors(pair, 2);
    phx_loader_opts lo = {.struct_size = sizeof(phx_loader_opts),
                          .batch = batch,
                          .shuffle = true,
                          .seed = seed,
                          .num_replicas = size,
                          .rank = rank,
                          .workers = workers,
                          .device = dev};
    /* --uneven: rank r takes rows [N s(r), N s(r+1)) with s(r) = r(r+1) / (n(n+1)). */
    int64_t *mine = NULL;
    if (uneven && comm) {
        int64_t n = phx_tensor_dim(xtr, 0), tri = (int64_t)size * (size + 1) / 2;
        int64_t lo_row = n * ((int64_t)rank * (rank + 1) / 2) / tri;
        int64_t hi_row = n * ((int64_t)(rank + 1) * (rank + 2) / 2) / tri;
        if (!(mine = malloc((size_t)(hi_row - lo_row) * sizeof *mine))) die("--uneven");
        for (int64_t r = lo_row; r < hi_row; r++) mine[r - lo_row] = r;
        lo.indices = mine;
        lo.n_indices = (size_t)(hi_row - lo_row);
        lo.num_replicas = 1;
        lo.rank = 0;
    }
    phx_loader *train = train_set ? phx_loader_new_opts(train_set, &lo) : NULL;
    if (!opt || !ce || !train) die("setup");
    int first = 0, total = epochs;
    if (resume && (zero ? ex_sharded_exists(resume) : access(resume, F_OK) == 0)) {
        if (load) {
            fprintf(stderr, "fashion_mnist: --resume %s exists and --load %s is given: give one\n", resume, load);
            return 2;
        }
        load = resume;
    }
    if (load) first = load_epoch(load, zero, net, opt, scaler, rank);
    /* --resume: --epochs is the total; --load: that many more. */
    if (resume) epochs = total > first ? total - first : 0;
    /* a resumed run's steps continue from its epoch's */
    int64_t per_epoch = (int64_t)phx_loader_num_batches(train);
    po.first_step = (int64_t)first * per_epoch;
    po.total_steps = (int64_t)(first + epochs) * per_epoch;
    po.rank = rank;
    phx_progress *prog = phx_progress_new(&po);
    if (!prog) die("--metrics/--tensorboard");
    /* the run's settings, for TensorBoard's HPARAMS tab */
    phx_hparam hp[] = {{"lr", NULL, lr},
                       {"batch", NULL, (double)batch},
                       {"epochs", NULL, first + epochs},
                       {"seed", NULL, (double)seed},
                       {"world_size", NULL, size},
                       {"precision", phx_precision_name(prec), 0}};
    check(phx_metrics_hparams(phx_progress_metrics(prog), hp, 6), "--metrics/--tensorboard");
    if (rank == 0) {
        char dname[32];
        printf("MLP 784-512-256-10, AdamW lr %g, batch %lld x %d rank%s (%s), %s on %s, %d threads per rank\n", lr,
               (long long)batch, size, size > 1 ? "s" : "", comm ? phx_comm_backend(comm) : "single process",
               phx_precision_name(prec), phx_device_name(dev, dname, sizeof dname), phx_num_threads());
    }
    for (int e = first; e < first + epochs; e++) {
        phx_loader_set_epoch(train, e);
        if (mine) check(phx_ddp_join_begin(net, false), "join");
        double t0 = now(), sum = 0;
        int64_t seen = 0, steps = 0;
        phx_tensor *xb, *yb, *out;
        int got;
        while ((got = phx_loader_next(train, &xb, &yb)) == 1) {
            float loss;
            check(phx_optimizer_zero_grad(opt), "zero_grad");
            phx_tensor *xd = stage(xb, &xdev, dev, 0), *yd = stage(yb, &ydev, dev, 0);
            check(phx_module_forward(net, xd, &out), "forward");
            check(phx_loss_forward(ce, out, yd, &loss), "loss");
            phx_tensor_free(xd);
            phx_tensor_free(yd);
            check(phx_scaler_scale_grad(scaler, phx_loss_grad(ce)), "scale");
            check(phx_module_backward(net, phx_loss_grad(ce), NULL), "backward");
            check(phx_scaler_step(scaler, opt, NULL), "step");
            sum += loss;
            seen += phx_tensor_dim(xb, 0);
            steps++;
            phx_progress_step(prog, e + 1, loss, lr, (double)(seen * size) / (now() - t0));
        }
        if (got < 0) die("training data");
        if (mine) check(phx_ddp_join_end(net), "join");
        double dt = now() - t0;
        phx_progress_break(prog);
        if (rank == 0) {
            printf("Epoch [%d/%d], Loss: %.4f, %.0f samples/s (%.1f s)\n", e + 1, first + epochs, sum / (double)steps,
                   (double)(seen * size) / dt, dt);
            fflush(stdout);
        }
        if (resume && zero)
            save_sharded(resume, net, opt, scaler, e + 1, rank, comm);
        else if (resume && rank == 0)
            save_epoch(resume, net, opt, scaler, e + 1, "mlp-784-512-256-10");
    }
    check(ex_full_begin(zero, net), "gathering the model (--zero 3)");
    if (rank == 0) {
        double acc = accuracy(model, xte, yte, dev, 0);
        printf("Test accuracy: %.4f\n", acc);
        phx_progress_record(prog, first + epochs, "accuracy", acc);
    }
    ex_full_end(zero, net);
    phx_progress_free(prog);
    if (save && zero) {
        save_sharded(save, net, opt, scaler, first + epochs, rank, comm);
        if (rank == 0) printf("saved %s (sharded over %d rank%s)\n", save, size, size > 1 ? "s" : "");
    } else if (save && rank == 0) {
        save_epoch(save, net, opt, scaler, first + epochs, "mlp-784-512-256-10");
        printf("saved %s\n", save);
    }
    phx_tensor_free(xdev);
    phx_tensor_free(ydev);
    phx_loader_free(train);
    phx_dataset_free(train_set);
    free(mine);
    phx_loss_free(ce);
    phx_optimizer_free(opt);
    if (net != model) phx_module_free(net);
    phx_module_free(model);
    phx_scaler_free(scaler);
    phx_precision_free(prec);
    phx_comm_free(comm);
    phx_rng_free(rng);
    phx_tensor_free(xtr);
    phx_tensor_free(ytr);
    phx_tensor_free(xte);
    phx_tensor_free(yte);
    return 0;
}
