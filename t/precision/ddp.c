/* fp16 loss scaling under DDP: an overflow planted in ONE rank's batch (its
 * input scaled by 1e5, so its local gradients are inf/NaN) must make EVERY
 * rank skip that step, because the scaler checks the gradients after the
 * all-reduce. All ranks must keep the same scale and bitwise identical
 * parameters after every step. Runs on the threads backend (ranks are
 * threads) and on gloo (ranks are processes) when its plugin is built. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { WORLD = 2, BATCH = 32, IN = 10, HID = 16, STEPS = 20, GROWTH_INTERVAL = 4 };

/* Rank 1 sees a poisoned batch at these steps; rank 0 never does. */
static int poisoned(int rank, int step)
{
    return rank == 1 && (step == 5 || step == 6 || step == 12);
}

/* Per-rank record, in memory shared by threads and forked processes. */
typedef struct record {
    int done, errors;
    int stepped[STEPS];
    double scale[STEPS];
    uint64_t hash[STEPS]; /* FNV-1a of every parameter's bytes after the step */
    int finite;
    char error[256];
} record;

static uint64_t params_hash(phx_module *m, int *finite)
{
    uint64_t h = 1469598103934665603ull;
    *finite = 1;
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        const float *f = phx_tensor_data(v);
        const unsigned char *b = (const unsigned char *)f;
        for (size_t j = 0; j < phx_tensor_nbytes(v); j++) h = (h ^ b[j]) * 1099511628211ull;
        for (int64_t j = 0; j < phx_tensor_numel(v); j++) *finite &= isfinite(f[j]) != 0;
    }
    return h;
}

static int rank_main(int rank, void *arg)
{
    record *rec = (record *)arg + rank;
    phx_comm *comm = NULL;
    phx_precision *fp16 = NULL;
    phx_status st = phx_comm_init(NULL, &comm);
    if (!st) st = phx_precision_new("fp16", &fp16);
    if (st) {
        snprintf(rec->error, sizeof rec->error, "%s", phx_last_error());
        rec->errors++;
        phx_comm_free(comm);
        return 1;
    }
    /* Same initial weights everywhere anyway (DDP broadcasts rank 0's). */
    phx_rng *rng = phx_rng_new(11 + (uint64_t)rank);
    phx_module *model = phx_sequential_new();
    phx_sequential_add(model, phx_linear_new(IN, HID, true, rng));
    phx_sequential_add(model, phx_relu_new());
    phx_sequential_add(model, phx_linear_new(HID, 1, true, rng));
    phx_module_set_precision(model, fp16);
    phx_module *ddp = phx_ddp_new(model, comm, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    so.momentum = 0.9;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_scaler_opts o = {sizeof(phx_scaler_opts), 0, 0, 0, GROWTH_INTERVAL};
    phx_scaler *s = phx_scaler_new(fp16, &o);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    int64_t xs[2] = {BATCH, IN}, ys[2] = {BATCH, 1};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *t = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng *data = phx_rng_new(100 + (uint64_t)rank); /* each rank its own shard */
    if (!ddp || !opt || !s || !mse || !x || !t || !data) {
        snprintf(rec->error, sizeof rec->error, "setup: %s", phx_last_error());
        rec->errors++;
    }
    for (int step = 0; step < STEPS && !rec->errors; step++) {
        phx_tensor *y;
        float loss;
        bool stepped = false;
        st = phx_rng_normal(data, x, 0, 1);
        if (!st) st = phx_rng_normal(data, t, 0, 1);
        if (!st && poisoned(rank, step)) st = phx_tensor_axpby(0, NULL, 1e5f, x);
        if (!st) st = phx_optimizer_zero_grad(opt);
        if (!st) st = phx_module_forward(ddp, x, &y);
        if (!st) st = phx_loss_forward(mse, y, t, &loss);
        if (!st) st = phx_scaler_scale_grad(s, phx_loss_grad(mse));
        if (!st) st = phx_module_backward(ddp, phx_loss_grad(mse), NULL); /* all-reduce, waited */
        if (!st) st = phx_scaler_step(s, opt, &stepped);
        if (st) {
            snprintf(rec->error, sizeof rec->error, "step %d: %s", step, phx_last_error());
            rec->errors++;
            break;
        }
        rec->stepped[step] = stepped;
        rec->scale[step] = phx_scaler_get_scale(s);
        int fin;
        rec->hash[step] = params_hash(model, &fin);
        rec->finite = step == 0 ? fin : rec->finite && fin;
    }
    rec->done = 1;
    phx_rng_free(data);
    phx_rng_free(rng);
    phx_tensor_free(x);
    phx_tensor_free(t);
    phx_loss_free(mse);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(model);
    phx_precision_free(fp16);
    phx_comm_free(comm);
    return rec->errors ? 1 : 0;
}

static void run(const char *backend)
{
    phx_probe_ctx ctx = {!strcmp(backend, "threads"), WORLD, 0};
    const phx_plugin_desc *d;
    if (phx_plugin_load(PHX_PLUGIN_COMM, backend, &ctx, &d) != PHX_OK) {
        diag("%s: %s", backend, phx_last_error());
        skip(6, "communicator plugin not available");
        return;
    }
    record *rec = mmap(NULL, sizeof(record) * WORLD, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rec == MAP_FAILED) {
        printf("Bail out! mmap failed\n");
        exit(1);
    }
    memset(rec, 0, sizeof(record) * WORLD);
    setenv("PHX_COMM", backend, 1);
    phx_status st = phx_spawn(WORLD, rank_main, rec);
    unsetenv("PHX_COMM");
    for (int r = 0; r < WORLD; r++)
        if (rec[r].errors) diag("%s rank %d: %s", backend, r, rec[r].error);
    ok(st == PHX_OK && rec[0].done && rec[1].done, "%s: %d ranks trained %d steps", backend, WORLD, STEPS);
    if (st) diag("phx_spawn: %s", phx_last_error());

    int expected_skips = 1, same_steps = 1, same_scale = 1, same_params = 1;
    for (int i = 0; i < STEPS; i++) {
        int poison = poisoned(1, i);
        for (int r = 0; r < WORLD; r++)
            if (rec[r].stepped[i] == poison) {
                if (expected_skips)
                    diag("%s rank %d step %d: stepped %d, poisoned on rank 1: %d", backend, r, i, rec[r].stepped[i],
                         poison);
                expected_skips = 0;
            }
        same_steps &= rec[0].stepped[i] == rec[1].stepped[i];
        same_scale &= rec[0].scale[i] == rec[1].scale[i];
        same_params &= rec[0].hash[i] == rec[1].hash[i];
    }
    ok(expected_skips, "%s: every rank skips exactly the steps poisoned on rank 1 (5, 6, 12), rank 0 included",
       backend);
    ok(same_steps && same_scale, "%s: all ranks see the same verdict and the same scale at every step", backend);
    ok(same_params, "%s: parameters bitwise identical across ranks after every step", backend);
    ok(rec[0].finite && rec[1].finite, "%s: no NaN/inf in any rank's parameters", backend);
    ok(rec[0].scale[6] == rec[0].scale[4] / 4 && rec[0].scale[STEPS - 1] > rec[0].scale[12],
       "%s: scale backed off on the two overflows (%g -> %g) and grew again (%g at the end)", backend, rec[0].scale[4],
       rec[0].scale[6], rec[0].scale[STEPS - 1]);
    munmap(rec, sizeof(record) * WORLD);
}

int main(void)
{
    plan(12);
    run("threads");
    run("gloo");
    return done_testing();
}
