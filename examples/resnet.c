/* Fashion-MNIST with a small ResNet written with forward-only modules
 * (examples/resnet-model.h: BasicBlocks with projection shortcuts; the
 * core derives every backward, doc/autograd.md). AdamW lr 2e-3 with a
 * cosine decay to lr/100, batch 128, shuffled each epoch; test accuracy
 * at the end.
 *
 *   resnet [--epochs N] [--batch B] [--lr LR] [--seed S] [--save PATH]
 *          [--load PATH] [--dp] [--sync-bn] [--train-rows N] [--metrics FILE]
 *          [--tensorboard DIR] [--log-every N] [--help]
 *
 * Alone it trains in one process (--dp: DataParallel, the core cloning the
 * forward-only blocks); under phxrun as DDP (each rank on its
 * DistributedSampler shard), --sync-bn converting the BatchNorms to
 * SyncBatchNorm; PHX_PRECISION=bf16 runs the convolutions in bf16. The
 * documented run (README, doc/autograd.md):
 *
 *   PHX_PRECISION=bf16 phxrun --nproc-per-node 2 examples/resnet --sync-bn */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"
#include "examples/fmnist.h"
#include "examples/resnet-model.h"

int main(int argc, char **argv)
{
    fm_prog = "resnet";
    int epochs = 5, use_dp = 0, sync_bn = 0;
    int64_t batch = 128, train_rows = 0;
    double lr = 2e-3;
    uint64_t seed = 0;
    const char *save = NULL, *load = NULL;
    static const char usage[] =
        "usage: resnet [--epochs N] [--batch B] [--lr LR] [--seed S] [--save PATH] [--load PATH]\n"
        "           [--dp] [--sync-bn] [--train-rows N] " EX_PROGRESS_USAGE "\n"
        "A ResNet of forward-only blocks on Fashion-MNIST (doc/autograd.md); under phxrun each rank is a DDP replica.\n"
        "  --epochs N         epochs to train (default 5; 0 with --load only evaluates)\n"
        "  --batch B          batch per rank (default 128)\n"
        "  --lr LR            AdamW's peak learning rate, decayed by a cosine to LR/100 (default 2e-3)\n"
        "  --seed S           initialisation and shuffling seed (default 0)\n"
        "  --save PATH        save model, optimizer and epoch (safetensors) at the end\n"
        "  --load PATH        restore them before training\n"
        "  --dp               DataParallel over every GPU, or a CPU replica per thread\n"
        "  --sync-bn          SyncBatchNorm across ranks (under phxrun)\n"
        "  --train-rows N     train on the first N images only\n" EX_PROGRESS_HELP
        "Environment: PHX_PRECISION=fp16|bf16, PHX_DEVICE=cuda|cpu, PHX_FASHION_MNIST=DIR (doc/env.md).\n";
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dp") || !strcmp(a, "--sync-bn")) {
            *(a[2] == 'd' ? &use_dp : &sync_bn) = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "resnet: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "--epochs"))
            epochs = atoi(v);
        else if (!strcmp(a, "--batch"))
            batch = atoll(v);
        else if (!strcmp(a, "--lr"))
            lr = atof(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--train-rows"))
            train_rows = atoll(v);
        else if (!strcmp(a, "--save"))
            save = v;
        else if (!strcmp(a, "--load"))
            load = v;
        else {
            fprintf(stderr, "resnet: unknown option '%s'\n", a);
            fputs(usage, stderr);
            return 2;
        }
        i++;
    }
    phx_world world = PHX_WORLD_INIT;
    check(phx_world_from_env(&world), "world");
    phx_comm *comm = NULL;
    if (world.size > 1) check(phx_comm_init(NULL, &comm), "phx_comm_init");
    if (comm && use_dp) {
        fprintf(stderr, "resnet: --dp runs in one process; under phxrun every rank is already a replica (DDP)\n");
        return 2;
    }
    if (sync_bn && !comm && world.size <= 1 && !use_dp)
        fprintf(stderr, "resnet: --sync-bn in one process: BatchNorm stays as it is\n");
    int rank = comm ? phx_comm_rank(comm) : 0, size = comm ? phx_comm_size(comm) : 1;
    phx_tensor *xtr = read_idx("train-images-idx3-ubyte.gz"), *ytr = read_idx("train-labels-idx1-ubyte.gz");
    phx_tensor *xte = read_idx("t10k-images-idx3-ubyte.gz"), *yte = read_idx("t10k-labels-idx1-ubyte.gz");

    phx_rng *rng = phx_rng_new(seed);
    phx_module *model = resnet_new(rng);
    if (!model) die("model");
    if (sync_bn && comm) check(phx_sync_batchnorm_convert(model, comm, NULL), "--sync-bn");
    phx_precision *prec = NULL;
    check(phx_precision_new(NULL, &prec), "PHX_PRECISION");
    check(phx_module_set_precision(model, prec), "precision");
    phx_device dev;
    check(phx_device_default(&dev), "PHX_DEVICE");
    check(phx_module_to(model, dev), "model to device");
    phx_module *net = model;
    char how[64] = "single process";
    if (comm) {
        net = phx_ddp_new(model, comm, NULL);
        snprintf(how, sizeof how, "DDP over %s%s", phx_comm_backend(comm), sync_bn ? ", SyncBatchNorm" : "");
    } else if (use_dp) {
        int available = dev.kind == PHX_DEVICE_CPU ? phx_num_threads() : phx_device_count(dev.kind);
        if (available > 1) net = phx_dp_new(model, NULL, 0, NULL);
        snprintf(how, sizeof how, "DataParallel, %zu %s replicas", net != model ? phx_dp_num_replicas(net) : 1,
                 dev.kind == PHX_DEVICE_CPU ? "CPU" : "GPU");
    }
    phx_scaler *scaler = phx_scaler_new(prec, NULL);
    if (!scaler || !net) die("setup");
    phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
    ao.lr = lr;
    phx_optimizer *opt = phx_adam_new(net, &ao);
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    if (train_rows > 0 && train_rows < phx_tensor_dim(xtr, 0)) {
        int64_t xs[2] = {train_rows, 784};
        phx_tensor *xv = phx_tensor_view(xtr, 0, 2, xs), *yv = phx_tensor_view(ytr, 0, 1, &train_rows);
        if (!xv || !yv) die("--train-rows");
        phx_tensor_free(xtr), phx_tensor_free(ytr);
        xtr = xv, ytr = yv;
    }
    phx_tensor *pair[2] = {xtr, ytr};
    phx_dataset *train_set = phx_dataset_tensors(pair, 2);
    phx_loader_opts lo = {.struct_size = sizeof(phx_loader_opts),
                          .batch = batch,
                          .shuffle = true,
                          .seed = seed,
                          .num_replicas = size,
                          .rank = rank,
                          .device = dev};
    phx_loader *train = train_set ? phx_loader_new_opts(train_set, &lo) : NULL;
    if (!opt || !ce || !train) die("setup");
    int first = 0;
    int64_t per_epoch = (int64_t)phx_loader_num_batches(train);
    if (load) {
        char buf[32];
        check(phx_checkpoint_load(load, net, opt, scaler), "--load");
        if (phx_checkpoint_meta(load, "epoch", buf, sizeof buf) == PHX_OK) first = atoi(buf);
        if (rank == 0) printf("loaded %s (epoch %d)\n", load, first);
    }
    /* the schedule's step is the optimizer's (restored by --load): the
     * decay spans every epoch, the loaded ones included */
    int64_t total = (int64_t)(first + epochs) * per_epoch;
    phx_schedule_opts so = {.struct_size = sizeof(phx_schedule_opts),
                            .kind = PHX_SCHED_WARMUP_COSINE,
                            .warmup_steps = 0,
                            .total_steps = total > 0 ? total : 1,
                            .min_lr = lr / 100};
    phx_schedule *sched = phx_schedule_new(opt, &so);
    if (!sched) die("schedule");
    /* a loaded run's steps continue from its epoch's */
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
                       {"parallel", how, 0},
                       {"precision", phx_precision_name(prec), 0}};
    check(phx_metrics_hparams(phx_progress_metrics(prog), hp, 7), "--metrics/--tensorboard");
    if (rank == 0) {
        char dname[32];
        printf("ResNet 16-32-64 (forward-only blocks), AdamW lr %g, batch %lld x %d rank%s (%s), %s on %s, %d threads "
               "per rank\n",
               lr, (long long)batch, size, size > 1 ? "s" : "", how, phx_precision_name(prec),
               phx_device_name(dev, dname, sizeof dname), phx_num_threads());
    }
    phx_tensor *xdev = NULL, *ydev = NULL;
    for (int e = first; e < first + epochs; e++) {
        phx_loader_set_epoch(train, e);
        double t0 = now(), sum = 0;
        int64_t seen = 0, steps = 0;
        phx_tensor *xb, *yb, *out;
        int got;
        while ((got = phx_loader_next(train, &xb, &yb)) == 1) {
            float loss;
            double cur;
            check(phx_optimizer_zero_grad(opt), "zero_grad");
            phx_tensor *xd = stage(xb, &xdev, dev, 1), *yd = stage(yb, &ydev, dev, 0);
            check(phx_module_forward(net, xd, &out), "forward");
            check(phx_loss_forward(ce, out, yd, &loss), "loss");
            phx_tensor_free(xd);
            phx_tensor_free(yd);
            check(phx_scaler_scale_grad(scaler, phx_loss_grad(ce)), "scale");
            check(phx_module_backward(net, phx_loss_grad(ce), NULL), "backward");
            check(phx_schedule_apply(sched, &cur), "schedule");
            check(phx_scaler_step(scaler, opt, NULL), "step");
            sum += loss;
            seen += phx_tensor_dim(xb, 0);
            steps++;
            phx_progress_step(prog, e + 1, loss, cur, (double)(seen * size) / (now() - t0));
        }
        if (got < 0) die("training data");
        double dt = now() - t0;
        phx_progress_break(prog);
        if (rank == 0) {
            printf("Epoch [%d/%d], Loss: %.4f, %.0f samples/s (%.1f s)\n", e + 1, first + epochs, sum / (double)steps,
                   (double)(seen * size) / dt, dt);
            fflush(stdout);
        }
    }
    if (rank == 0) {
        double acc = accuracy(model, xte, yte, dev, 1);
        printf("Test accuracy: %.4f\n", acc);
        phx_progress_record(prog, first + epochs, "accuracy", acc);
    }
    phx_progress_free(prog);
    if (save && rank == 0) {
        save_epoch(save, net, opt, scaler, first + epochs, "resnet-16-32-64");
        printf("saved %s\n", save);
    }
    phx_tensor_free(xdev);
    phx_tensor_free(ydev);
    phx_loader_free(train);
    phx_dataset_free(train_set);
    phx_loss_free(ce);
    phx_schedule_free(sched);
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
