/* DataParallel's bad inputs: each is a clear error (status and message)
 * and leaves the model's parameters and gradients bitwise unchanged; the
 * wrapper still trains afterwards.
 *
 * Where the input-versus-target batch mismatch is caught: the wrapper only
 * sees the input, so the loss rejects a target whose batch differs from
 * the gathered output, and the wrapper's backward rejects a dy whose batch
 * (dim 0) differs from the last forward's. */
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { IN = 6, OUT = 3 };

static phx_module *model(void)
{
    phx_rng *r = phx_rng_new(3);
    phx_module *s = phx_sequential_new();
    phx_sequential_add(s, phx_linear_new(IN, 8, true, r));
    phx_sequential_add(s, phx_relu_new());
    phx_sequential_add(s, phx_linear_new(8, OUT, true, r));
    phx_rng_free(r);
    return s;
}

/* Values and gradients of every parameter, as bytes. */
typedef struct snap {
    char *bytes;
    size_t n;
} snap;

static snap take(phx_module *m)
{
    snap s = {0};
    for (size_t i = 0; i < phx_module_num_params(m); i++)
        s.n += 2 * phx_tensor_nbytes(phx_param_value(phx_module_param(m, i)));
    s.bytes = malloc(s.n);
    size_t o = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i)), *g = phx_param_grad(phx_module_param(m, i));
        phx_tensor_to_host(v, s.bytes + o);
        o += phx_tensor_nbytes(v);
        phx_tensor_to_host(g, s.bytes + o);
        o += phx_tensor_nbytes(g);
    }
    return s;
}

static int unchanged(phx_module *m, const snap *before)
{
    snap now = take(m);
    int same = now.n == before->n && memcmp(now.bytes, before->bytes, now.n) == 0;
    free(now.bytes);
    return same;
}

static phx_tensor *rows(int64_t b, int64_t cols, float v)
{
    int64_t shape[2] = {b, cols};
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, shape, phx_cpu());
    phx_tensor_fill(t, v);
    return t;
}

/* A module without a clone slot: DataParallel cannot replicate it. */
static phx_status id_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    (void)self;
    *y = (phx_tensor *)x;
    return PHX_OK;
}
static phx_status id_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    (void)self;
    if (dx) *dx = (phx_tensor *)dy;
    return PHX_OK;
}
static void id_free(phx_module *self)
{
    (void)self;
}
static const phx_module_vtable no_clone_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "NoClone",
    .forward = id_forward,
    .backward = id_backward,
    .free = id_free,
};

static void check_construction(phx_module *m, const snap *s)
{
    phx_device two_cpu[2] = {phx_cpu(), phx_cpu()};
    phx_device cpu1 = {PHX_DEVICE_CPU, 1}, cuda99 = {PHX_DEVICE_CUDA, 99}, odd = {7, 0}, cuda0 = {PHX_DEVICE_CUDA, 0};

    ok(phx_dp_new(NULL, NULL, 0, NULL) == NULL, "NULL model: NULL");
    like(phx_last_error(), "model is NULL", "NULL model: message");

    ok(phx_dp_new(m, two_cpu, 0, NULL) == NULL, "empty device list: NULL");
    like(phx_last_error(), "n_devices is 0", "empty device list: message");

    phx_device bad1[2] = {phx_cpu(), cpu1};
    ok(phx_dp_new(m, bad1, 2, NULL) == NULL, "cpu:1: NULL");
    like(phx_last_error(), "devices[1] = cpu:1 does not exist", "cpu:1: message names the device");

    phx_device bad2[2] = {phx_cpu(), cuda99};
    ok(phx_dp_new(m, bad2, 2, NULL) == NULL, "cuda:99: NULL");
    like(phx_last_error(), "devices[1] = cuda:99 does not exist", "cuda:99: message names the device");

    phx_device bad3[1] = {odd};
    ok(phx_dp_new(m, bad3, 1, NULL) == NULL, "device kind 7: NULL");
    like(phx_last_error(), "unknown kind 7", "device kind 7: message");

    ok(phx_dp_new(m, two_cpu, 2, &cuda0) == NULL, "output device cuda:0 with two cpu devices: NULL");
    like(phx_last_error(), "output device cuda:0 is not one of the 2 devices", "output device: message");

    phx_module *nc = phx_module_new(&no_clone_vt, NULL);
    phx_sequential_add(m, nc); /* temporarily part of m: m cannot be replicated */
    ok(phx_dp_new(m, two_cpu, 2, NULL) == NULL, "model without clone slot: NULL");
    like(phx_last_error(), "no clone slot", "model without clone slot: message names the module");
    ok(unchanged(m, s), "construction errors leave the model bitwise unchanged");
}

static void check_runtime(phx_module *m)
{
    phx_device dev3[3] = {phx_cpu(), phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, dev3, 3, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    phx_optimizer *opt = phx_sgd_new(dp, &o);
    phx_tensor *y, *dx;
    float l;
    if (!ok(dp && loss && opt, "wrapper over 3 cpu replicas")) diag("  %s", phx_last_error());

    /* One good step first so the gradients are non-zero. */
    phx_tensor *x = rows(10, IN, 0.5f), *t = rows(10, OUT, 1.0f);
    ok(!phx_module_forward(dp, x, &y) && !phx_loss_forward(loss, y, t, &l) &&
           !phx_module_backward(dp, phx_loss_grad(loss), NULL),
       "a good step");
    snap s = take(m);

    phx_tensor *x0 = rows(0, IN, 0.5f);
    is_int(phx_module_forward(dp, x0, &y), PHX_EINVAL, "batch of 0: PHX_EINVAL");
    like(phx_last_error(), "input (0, 6) has no batch rows", "batch of 0: message");
    is_int(phx_module_backward(dp, phx_loss_grad(loss), NULL), PHX_ESTATE,
           "backward after a failed forward: PHX_ESTATE");
    ok(unchanged(m, &s), "batch of 0: parameters and gradients bitwise unchanged");

    phx_tensor *xf = rows(10, IN - 1, 0.5f);
    ok(phx_module_forward(dp, xf, &y) == PHX_EINVAL, "5 features into Linear(6, 8): PHX_EINVAL");
    like(phx_last_error(), "replica 0 on cpu (rows 0..3)", "feature mismatch: message names the replica and rows");
    like(phx_last_error(), "input has 5 features, layer expects 6", "feature mismatch: and the layer's complaint");
    ok(unchanged(m, &s), "feature mismatch: parameters and gradients bitwise unchanged");

    /* Input batch 10, target batch 9: the loss sees it first... */
    phx_tensor *t9 = rows(9, OUT, 1.0f), *dy9 = rows(9, OUT, 0.1f), *dy5 = rows(10, OUT + 2, 0.1f);
    ok(phx_module_forward(dp, x, &y) == PHX_OK, "forward of 10 rows");
    is_int(phx_loss_forward(loss, y, t9, &l), PHX_EINVAL, "target of 9 rows for 10 outputs: the loss fails");
    /* ...and a dy of the wrong batch reaching the wrapper fails there. */
    is_int(phx_module_backward(dp, dy9, NULL), PHX_EINVAL, "dy of 9 rows after a forward of 10: PHX_EINVAL");
    like(phx_last_error(), "dy has 9 rows (dim 0) but the forward's batch had 10", "dy batch: message");
    is_int(phx_module_backward(dp, dy5, &dx), PHX_EINVAL, "dy (10, 5) for output (10, 3): PHX_EINVAL");
    like(phx_last_error(), "the output of the forward was f32 (10, 3)", "dy shape: message");
    ok(unchanged(m, &s), "target/dy mismatch: parameters and gradients bitwise unchanged");

    ok(!phx_optimizer_zero_grad(opt) && !phx_module_forward(dp, x, &y) && !phx_loss_forward(loss, y, t, &l) &&
           !phx_module_backward(dp, phx_loss_grad(loss), NULL) && !phx_optimizer_step(opt),
       "the wrapper still trains after the errors");
    ok(phx_dp_model(m) == NULL, "phx_dp_model of a plain module: NULL");
    like(phx_last_error(), "is not a DataParallel wrapper", "phx_dp_model: message");
    ok(phx_dp_model(dp) == m && phx_dp_num_replicas(dp) == 3, "phx_dp_model and phx_dp_num_replicas");

    free(s.bytes);
    phx_tensor_free(x);
    phx_tensor_free(t);
    phx_tensor_free(x0);
    phx_tensor_free(xf);
    phx_tensor_free(t9);
    phx_tensor_free(dy9);
    phx_tensor_free(dy5);
    phx_optimizer_free(opt);
    phx_loss_free(loss);
    phx_module_free(dp);
}

int main(void)
{
    phx_module *m = model();
    snap s = take(m);
    check_construction(m, &s);
    free(s.bytes);
    phx_module_free(m);
    m = model();
    check_runtime(m);
    phx_module_free(m);
    return done_testing();
}
