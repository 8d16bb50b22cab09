/* FSDP on the NCCL path: a world of one on nccl (CUDA device 0) trains an
 * MLP of two units plus the root (parameters not divisible into even
 * halves) for 3 SGD steps, in f32 and with bf16 gathers (param_dtype):
 * the f32 run's parameters (gathered with phx_fsdp_gather_full) equal
 * the same model trained on the CPU without FSDP within 1e-5, the bf16
 * run differs from it by less than 1e-2 (bf16-rounded weights), and no
 * full parameter memory is held after a step. With two GPUs, two ranks
 * end with bitwise equal parameters. Skips without a CUDA device or
 * without the nccl plugin. */
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"
#include "t/ddp-util.h"

static const int64_t sizes[] = {7, 13, 11, 5};

static bool wrap_even(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel, (void)arg;
    return strcmp(path, "0") == 0 || strcmp(path, "4") == 0;
}

static phx_optimizer *make_sgd(phx_module *m, void *arg)
{
    (void)arg;
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.1;
    return phx_sgd_new(m, &o);
}

static phx_comm *nccl_world(int rank, int size, phx_device dev)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "nccl";
    o.rank = rank, o.size = size, o.local_rank = rank, o.local_size = size;
    o.device = dev;
    o.timeout_s = 60;
    phx_comm *c = NULL;
    return phx_comm_init(&o, &c) == PHX_OK ? c : NULL;
}

/* x, y of step s for rank's rows, on dev. */
static void batch(int s, int rank, phx_device dev, phx_tensor **x, phx_tensor **y)
{
    phx_tensor *hx = tu_new2(4, sizes[0]), *hy = tu_new2(4, sizes[3]);
    tu_batch(s, 4 * rank, 4, hx, hy);
    *x = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(hx), dev);
    *y = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(hy), dev);
    phx_tensor_from_host(*x, phx_tensor_data(hx));
    phx_tensor_from_host(*y, phx_tensor_data(hy));
    phx_tensor_free(hx);
    phx_tensor_free(hy);
}

/* 3 steps of FSDP over comm on dev; the model (gathered) in *out, CPU. */
static phx_status train(phx_comm *c, phx_device dev, phx_dtype pd, int rank, phx_module **out, uint64_t *held)
{
    phx_module *m = tu_mlp(sizes, 4, 11);
    phx_status st = phx_module_to(m, dev);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_even;
    fo.param_dtype = pd;
    phx_module *f = st == PHX_OK ? phx_fsdp_new(m, c, &fo) : NULL;
    phx_optimizer *z = f ? phx_zero_optimizer_new(f, c, make_sgd, NULL, NULL) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (st == PHX_OK && !z) st = PHX_EINVAL;
    *held = 0;
    for (int s = 0; s < 3 && st == PHX_OK; s++) {
        phx_tensor *x, *y;
        batch(s, rank, dev, &x, &y);
        st = tu_step(f, z, loss, x, y);
        phx_tensor_free(x);
        phx_tensor_free(y);
        phx_fsdp_stats fs = PHX_FSDP_STATS_INIT;
        if (st == PHX_OK) st = phx_fsdp_get_stats(f, &fs);
        *held += fs.gathered_bytes + fs.grad_bytes;
    }
    if (st == PHX_OK) st = phx_fsdp_gather_full(f);
    phx_optimizer_free(z);
    phx_module_free(f); /* gathered: the model keeps its values */
    if (st == PHX_OK) st = phx_module_to(m, phx_cpu());
    phx_loss_free(loss);
    *out = m;
    return st;
}

static int two_ranks(int rank, void *arg)
{
    (void)arg;
    phx_device dev = {PHX_DEVICE_CUDA, rank};
    phx_comm *c = nccl_world(rank, 2, dev);
    phx_module *m = NULL;
    uint64_t held;
    /* tu_same_bits_across gathers CPU buffers, which the nccl communicator takes too */
    int bad = !c || train(c, dev, PHX_F32, rank, &m, &held) != PHX_OK || held != 0 || !tu_same_bits_across(c, m);
    phx_module_free(m);
    phx_comm_free(c);
    return bad;
}

int main(void)
{
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};
    size_t n = phx_plugin_scan(infos, 64, NULL);
    int found = 0;
    for (size_t i = 0; i < n && i < 64; i++) found |= strcmp(infos[i].name, "nccl") == 0;
    if (!found) skip_all("nccl plugin not built");
    plan(3);
    /* forked ranks first: CUDA is not initialised in this process yet */
    if (phx_device_count(PHX_DEVICE_CUDA) >= 2) {
        setenv("PHX_COMM", "nccl", 1);
        phx_status st = phx_spawn(2, two_ranks, NULL);
        unsetenv("PHX_COMM");
        ok(st == PHX_OK, "two GPUs: FSDP over nccl, 3 steps, nothing held after a step, ranks bitwise equal (%s)",
           st ? phx_last_error() : "ok");
    } else {
        skip(1, "one CUDA device: no two-rank run");
    }
    phx_device dev = {PHX_DEVICE_CUDA, 0};
    /* the reference: the same model and rows on the CPU, no FSDP */
    phx_module *ref = tu_mlp(sizes, 4, 11);
    phx_optimizer *o = make_sgd(ref, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    for (int s = 0; s < 3; s++) {
        phx_tensor *x, *y;
        batch(s, 0, phx_cpu(), &x, &y);
        tu_step(ref, o, loss, x, y);
        phx_tensor_free(x);
        phx_tensor_free(y);
    }
    for (int k = 0; k < 2; k++) {
        phx_comm *c = nccl_world(0, 1, dev);
        phx_module *m = NULL;
        uint64_t held = 0;
        phx_status st = c ? train(c, dev, k ? PHX_BF16 : PHX_F32, 0, &m, &held) : PHX_EINVAL;
        double e = st == PHX_OK ? tu_max_rel(m, ref) : INFINITY;
        ok(st == PHX_OK && held == 0 && e < (k ? 1e-2 : 1e-5),
           "%s gathers on nccl: 3 SGD steps within %g of the CPU model (difference %.3g), nothing held after a step",
           k ? "bf16" : "f32", k ? 1e-2 : 1e-5, e);
        if (st != PHX_OK) diag("%s", phx_last_error());
        phx_module_free(m);
        phx_comm_free(c);
    }
    phx_loss_free(loss);
    phx_optimizer_free(o);
    phx_module_free(ref);
    return done_testing();
}
