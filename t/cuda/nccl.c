/* The nccl communicator on real GPUs. One GPU: a world of one runs every
 * collective for every dtype on CUDA tensors and on CPU tensors (staged
 * through the device), many asynchronous works complete in order, DDP
 * over it trains a CUDA model like the plain model on the CPU, and a
 * world of two whose second rank never comes times out at init with
 * PHX_ETIMEOUT instead of hanging. Two or more GPUs: two processes check
 * the reductions' values and the watchdog: when rank 1 skips a collective,
 * rank 0's work fails with PHX_ETIMEOUT after PHX_TIMEOUT. Skips without a
 * CUDA device or without the nccl plugin. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_comm *world(int rank, int size, phx_device dev, double timeout_s, phx_status *st)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "nccl";
    o.rank = rank, o.size = size, o.local_rank = rank, o.local_size = size;
    o.device = dev;
    o.timeout_s = timeout_s;
    phx_comm *c = NULL;
    *st = phx_comm_init(&o, &c);
    return c;
}

static void test_world_of_one(phx_device dev)
{
    char dn[16];
    phx_device_name(dev, dn, sizeof dn);
    phx_status st;
    phx_comm *c = world(0, 1, dev, 60, &st);
    ok(c != NULL, "world of one on nccl, %s buffers", dn);
    if (!c) {
        diag("%s", phx_last_error());
        skip(11, "no communicator");
        return;
    }
    is_str(phx_comm_backend(c), "nccl", "backend is nccl");
    const phx_dtype dts[5] = {PHX_F32, PHX_F16, PHX_BF16, PHX_I32, PHX_I64};
    for (int d = 0; d < 5; d++) {
        int64_t n = 4097;
        phx_tensor *t = phx_tensor_new(dts[d], 1, &n, dev);
        double vals[4] = {0};
        int good = t != NULL;
        for (int op = 0; op < 4 && good; op++) {
            good = phx_tensor_fill(t, 3.0 + op) == PHX_OK &&
                phx_comm_allreduce(c, t, (phx_reduce_op)op, NULL) == PHX_OK &&
                phx_tensor_reduce(t, PHX_SUM, &vals[op]) == PHX_OK && vals[op] == (3.0 + op) * (double)n;
        }
        good = good && phx_comm_broadcast(c, t, 0, NULL) == PHX_OK;
        phx_tensor *out = phx_tensor_new(dts[d], 1, &n, dev);
        good = good && out && phx_tensor_fill(t, 2.0) == PHX_OK && phx_comm_allgather(c, t, out, NULL) == PHX_OK &&
            phx_tensor_reduce(out, PHX_SUM, &vals[0]) == PHX_OK && vals[0] == 2.0 * (double)n;
        good = good && phx_tensor_fill(out, 0.0) == PHX_OK &&
            phx_comm_reduce_scatter(c, t, out, PHX_SUM, NULL) == PHX_OK &&
            phx_tensor_reduce(out, PHX_SUM, &vals[0]) == PHX_OK && vals[0] == 2.0 * (double)n;
        if (!good) diag("%s", phx_last_error());
        ok(good, "%s %s: allreduce (sum, avg, max, min), broadcast, allgather, reduce_scatter", dn,
           phx_dtype_name(dts[d]));
        phx_tensor_free(t);
        phx_tensor_free(out);
    }
    ok(phx_comm_barrier(c, NULL) == PHX_OK, "barrier");
    /* many works in flight, completed in issue order */
    int64_t n = 1 << 20;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, dev);
    phx_tensor_fill(t, 1.5);
    phx_work *w[64];
    int issued = 1;
    for (int i = 0; i < 64; i++) issued &= phx_comm_allreduce(c, t, PHX_AVG, &w[i]) == PHX_OK;
    int good = issued;
    for (int i = 0; i < 64 && issued; i++) good &= phx_work_wait(w[i], -1) == PHX_OK;
    double s = 0;
    good = good && phx_tensor_reduce(t, PHX_SUM, &s) == PHX_OK && s == 1.5 * (double)n;
    for (int i = 0; i < 64 && issued; i++) phx_work_free(w[i]);
    ok(good, "64 asynchronous allreduces complete, values intact");
    phx_tensor_free(t);
    phx_comm_free(c);
}

/* DDP on a world of one over NCCL with CUDA tensors trains like the plain
 * model on the CPU (same init, same data): buckets, the broadcast at
 * construction and the averaged all-reduces all go through NCCL. */
static phx_module *mlp(void)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(64, 128, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(128, 10, true, rng));
    phx_rng_free(rng);
    return m;
}

static void test_ddp_world_of_one(void)
{
    phx_device cu = {PHX_DEVICE_CUDA, 0};
    phx_status st;
    phx_comm *c = world(0, 1, cu, 60, &st);
    phx_module *ref = mlp(), *model = mlp();
    int good = c && ref && model && phx_module_to(model, cu) == PHX_OK;
    phx_module *ddp = good ? phx_ddp_new(model, c, NULL) : NULL;
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    so.momentum = 0.9;
    phx_optimizer *o_ref = phx_sgd_new(ref, &so), *o_ddp = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *l_ref = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    phx_loss *l_ddp = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    int64_t xs[2] = {32, 64}, n = 32;
    phx_tensor *xh = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *yh = phx_tensor_new(PHX_I64, 1, &n, phx_cpu());
    phx_tensor *xd = phx_tensor_new(PHX_F32, 2, xs, cu), *yd = phx_tensor_new(PHX_I64, 1, &n, cu);
    phx_rng *data = phx_rng_new(7);
    good = good && ddp && o_ref && o_ddp && l_ref && l_ddp && xh && yh && xd && yd && data;
    for (int step = 0; step < 5 && good; step++) {
        phx_tensor *out;
        float lr_, ld;
        good = phx_rng_normal(data, xh, 0, 1) == PHX_OK;
        int64_t *lab = phx_tensor_data(yh);
        for (int i = 0; i < 32; i++) lab[i] = (i * 3 + step) % 10;
        good = good && phx_tensor_copy(xd, xh) == PHX_OK && phx_tensor_copy(yd, yh) == PHX_OK;
        good = good && phx_optimizer_zero_grad(o_ref) == PHX_OK && phx_module_forward(ref, xh, &out) == PHX_OK &&
            phx_loss_forward(l_ref, out, yh, &lr_) == PHX_OK &&
            phx_module_backward(ref, phx_loss_grad(l_ref), NULL) == PHX_OK && phx_optimizer_step(o_ref) == PHX_OK;
        good = good && phx_optimizer_zero_grad(o_ddp) == PHX_OK && phx_module_forward(ddp, xd, &out) == PHX_OK &&
            phx_loss_forward(l_ddp, out, yd, &ld) == PHX_OK &&
            phx_module_backward(ddp, phx_loss_grad(l_ddp), NULL) == PHX_OK && phx_optimizer_step(o_ddp) == PHX_OK;
        if (good && fabsf(lr_ - ld) > 1e-4f * fabsf(lr_)) {
            diag("step %d: loss cpu %.7f, ddp on cuda %.7f", step, lr_, ld);
            good = 0;
        }
    }
    if (!good) diag("%s", phx_last_error());
    double worst = 0;
    for (size_t i = 0; good && i < phx_module_num_params(ref); i++) {
        phx_tensor *a = phx_param_value(phx_module_param(ref, i)), *b = phx_param_value(phx_module_param(model, i));
        int64_t k = phx_tensor_numel(a);
        float *ha = malloc((size_t)k * 4), *hb = malloc((size_t)k * 4);
        good = phx_tensor_to_host(a, ha) == PHX_OK && phx_tensor_to_host(b, hb) == PHX_OK;
        for (int64_t j = 0; good && j < k; j++) {
            double e = fabs((double)ha[j] - hb[j]) / (fabs(ha[j]) + 1e-3);
            if (e > worst) worst = e;
        }
        free(ha), free(hb);
    }
    ok(good && worst <= 1e-4,
       "DDP over nccl (world of one, cuda tensors): 5 SGD steps match the CPU model (worst %.2e)", worst);
    phx_tensor_free(xh), phx_tensor_free(yh), phx_tensor_free(xd), phx_tensor_free(yd);
    phx_rng_free(data);
    phx_loss_free(l_ref), phx_loss_free(l_ddp);
    phx_optimizer_free(o_ref), phx_optimizer_free(o_ddp);
    phx_module_free(ddp), phx_module_free(model), phx_module_free(ref);
    phx_comm_free(c);
}

static void test_init_timeout(void)
{
    phx_status st;
    /* an in-process store: no port to collide with other tests */
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "nccl";
    o.rank = 0, o.size = 2, o.local_rank = 0, o.local_size = 1;
    o.device = (phx_device){PHX_DEVICE_CUDA, 0};
    o.timeout_s = 3;
    o.store = phx_store_new_local();
    phx_comm *c = NULL;
    st = phx_comm_init(&o, &c);
    ok(c == NULL && st == PHX_ETIMEOUT, "world of two, rank 1 never comes: PHX_ETIMEOUT at init");
    like(phx_last_error(), "did not complete within", "the message says it timed out");
    phx_comm_free(c);
    phx_store_free(o.store);
}

/* two processes, two GPUs */
static int two_ranks(int rank, void *arg)
{
    (void)arg;
    phx_status st;
    phx_comm *c = world(rank, 2, (phx_device){PHX_DEVICE_CUDA, rank}, 4, &st);
    if (!c) return 10;
    int64_t n = 1000;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, (phx_device){PHX_DEVICE_CUDA, rank});
    double s = 0;
    phx_tensor_fill(t, rank + 1.0);
    if (phx_comm_allreduce(c, t, PHX_SUM, NULL) != PHX_OK || phx_tensor_reduce(t, PHX_SUM, &s) != PHX_OK ||
        s != 3.0 * (double)n)
        return 11;
    phx_tensor_fill(t, rank + 1.0);
    if (phx_comm_allreduce(c, t, PHX_AVG, NULL) != PHX_OK || phx_tensor_reduce(t, PHX_SUM, &s) != PHX_OK ||
        s != 1.5 * (double)n)
        return 12;
    /* rank 1 skips this one: rank 0 must time out, not hang */
    if (rank == 0) {
        phx_work *w = NULL;
        if (phx_comm_allreduce(c, t, PHX_SUM, &w) != PHX_OK) return 13;
        phx_status ws = phx_work_wait(w, 30);
        phx_work_free(w);
        if (ws != PHX_ETIMEOUT || !strstr(phx_last_error(), "did not complete within")) return 14;
        if (phx_comm_allreduce(c, t, PHX_SUM, NULL) == PHX_OK) return 15; /* aborted: later calls fail */
    }
    phx_tensor_free(t);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};
    size_t n = phx_plugin_scan(infos, 64, NULL);
    int found = 0;
    for (size_t i = 0; i < n && i < 64; i++) found |= strcmp(infos[i].name, "nccl") == 0;
    if (!found) skip_all("nccl plugin not built");
    /* forked ranks first: this process has not initialised CUDA yet (the
     * count and the probes above use NVML), as CUDA requires for fork */
    if (phx_device_count(PHX_DEVICE_CUDA) >= 2) {
        setenv("PHX_COMM", "nccl", 1);
        phx_status st = phx_spawn(2, two_ranks, NULL);
        if (st != PHX_OK) diag("%s", phx_last_error());
        ok(st == PHX_OK, "two processes on two GPUs: sums, averages, and a skipped collective times out");
        unsetenv("PHX_COMM");
    } else {
        skip(1, "one CUDA device: no two-rank NCCL run");
    }
    test_world_of_one((phx_device){PHX_DEVICE_CUDA, 0});
    test_world_of_one(phx_cpu());
    test_ddp_world_of_one();
    test_init_timeout();
    return done_testing();
}
