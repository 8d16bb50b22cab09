/* A module of your own, written against the public vtable: a residual
 * block  y = x + fc2(relu(fc1(x))).
 *
 * It registers its layers as children ("fc1", "act", "fc2"), so their
 * parameters get dotted names ("1.fc1.weight"), the gradient-ready hook,
 * zero_grad, to(device), precision and checkpoints all work without more
 * code. forward keeps nothing but its output buffer (the children keep
 * what their backward needs); backward runs the children in reverse and
 * adds the skip path's gradient. clone makes DataParallel replicas.
 *
 * The program checks the block's input gradient against finite
 * differences, then trains Sequential(Linear(8, 32), Residual(32),
 * Linear(32, 1)) on y = sin(x0 + ... + x7) with Adam. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

typedef struct residual {
    int64_t dim;
    phx_module *fc1, *act, *fc2; /* children: owned by the module */
    phx_tensor *y, *dx; /* output and input-gradient buffers, reused */
} residual;

/* A buffer of t's shape and dtype, allocated only when that changes. */
static phx_status ensure(phx_tensor **buf, const phx_tensor *like)
{
    if (*buf && phx_tensor_same_shape(*buf, like) && phx_tensor_dtype(*buf) == phx_tensor_dtype(like)) return PHX_OK;
    phx_tensor_free(*buf);
    *buf =
        phx_tensor_new(phx_tensor_dtype(like), phx_tensor_ndim(like), phx_tensor_shape(like), phx_tensor_device(like));
    return *buf ? PHX_OK : PHX_ENOMEM;
}

static phx_status residual_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    residual *r = phx_module_ctx(self);
    phx_tensor *h1, *h2, *h3;
    phx_status st;
    if ((st = phx_module_forward(r->fc1, x, &h1)) || (st = phx_module_forward(r->act, h1, &h2)) ||
        (st = phx_module_forward(r->fc2, h2, &h3)) || (st = ensure(&r->y, h3)))
        return st;
    /* y = h3 + x (x may be f32 while h3 is in a lower compute dtype) */
    if ((st = phx_tensor_copy(r->y, h3)) || (st = phx_tensor_axpby(1.0f, x, 1.0f, r->y))) return st;
    *y = r->y;
    return PHX_OK;
}

static phx_status residual_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    residual *r = phx_module_ctx(self);
    phx_tensor *g2, *g1, *g0;
    phx_status st;
    /* fc2 then fc1 announce their gradients through the hook as they go */
    if ((st = phx_module_backward(r->fc2, dy, &g2)) || (st = phx_module_backward(r->act, g2, &g1)) ||
        (st = phx_module_backward(r->fc1, g1, dx ? &g0 : NULL)))
        return st;
    if (!dx) return PHX_OK;
    /* dx = dy (skip path) + d fc1 */
    if ((st = ensure(&r->dx, g0)) || (st = phx_tensor_cast(r->dx, dy)) ||
        (st = phx_tensor_axpby(1.0f, g0, 1.0f, r->dx)))
        return st;
    *dx = r->dx;
    return PHX_OK;
}

static void residual_free(phx_module *self)
{
    residual *r = phx_module_ctx(self);
    phx_tensor_free(r->y);
    phx_tensor_free(r->dx);
    free(r);
}

static phx_module *residual_clone(const phx_module *self);

static const phx_module_vtable residual_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Residual",
    .forward = residual_forward,
    .backward = residual_backward,
    .free = residual_free,
    .set_train = NULL, /* children are switched by the core */
    .clone = residual_clone,
};

/* Builds the block around given children (takes ownership of them). */
static phx_module *residual_make(int64_t dim, phx_module *fc1, phx_module *act, phx_module *fc2)
{
    residual *r = calloc(1, sizeof *r);
    phx_module *m = r ? phx_module_new(&residual_vt, r) : NULL;
    if (!m) {
        free(r);
        phx_module_free(fc1);
        phx_module_free(act);
        phx_module_free(fc2);
        return NULL;
    }
    r->dim = dim;
    r->fc1 = fc1;
    r->act = act;
    r->fc2 = fc2;
    if (!fc1 || !act || !fc2 || phx_module_add_child(m, "fc1", fc1) != PHX_OK ||
        phx_module_add_child(m, "act", act) != PHX_OK || phx_module_add_child(m, "fc2", fc2) != PHX_OK) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

static phx_module *residual_new(int64_t dim, phx_rng *rng)
{
    return residual_make(dim, phx_linear_new(dim, dim, true, rng), phx_relu_new(), phx_linear_new(dim, dim, true, rng));
}

static phx_module *residual_clone(const phx_module *self)
{
    const residual *r = phx_module_ctx(self);
    return residual_make(r->dim, phx_module_clone(r->fc1), phx_module_clone(r->act), phx_module_clone(r->fc2));
}

/* ---- the program ------------------------------------------------------ */

static void check(phx_status st, const char *what)
{
    if (st != PHX_OK) {
        fprintf(stderr, "custom_module: %s: %s\n", what, phx_last_error());
        exit(1);
    }
}

/* sum(w * block(x)) for the finite-difference check */
static double objective(phx_module *m, phx_tensor *x, const float *w)
{
    phx_tensor *y;
    check(phx_module_forward(m, x, &y), "forward");
    const float *v = phx_tensor_data(y);
    double s = 0;
    for (int64_t i = 0; i < phx_tensor_numel(y); i++) s += (double)w[i] * v[i];
    return s;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: custom_module " EX_PROGRESS_USAGE "\n" EX_PROGRESS_HELP;
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po) || argc > 1) {
        fputs(usage, stderr);
        return 2;
    }
    phx_rng *rng = phx_rng_new(1);

    /* 1. The block's dx against central differences. */
    phx_module *block = residual_new(4, rng);
    int64_t s[2] = {2, 4};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, s, phx_cpu()), *w = phx_tensor_new(PHX_F32, 2, s, phx_cpu()), *dx;
    check(phx_rng_normal(rng, x, 0, 1), "data");
    check(phx_rng_normal(rng, w, 0, 1), "data");
    objective(block, x, phx_tensor_data(w));
    check(phx_module_backward(block, w, &dx), "backward");
    float *xv = phx_tensor_data(x);
    double worst = 0;
    for (int i = 0; i < 8; i++) {
        float keep = xv[i], h = 1e-2f;
        xv[i] = keep + h;
        double lp = objective(block, x, phx_tensor_data(w));
        xv[i] = keep - h;
        double lm = objective(block, x, phx_tensor_data(w));
        xv[i] = keep;
        double fd = (lp - lm) / (2.0 * h), an = ((float *)phx_tensor_data(dx))[i];
        worst = fmax(worst, fabs(fd - an) / fmax(1.0, fabs(fd)));
    }
    printf("Residual(4): dx vs finite differences, max rel. error %.1e %s\n", worst, worst < 1e-2 ? "(ok)" : "(WRONG)");
    phx_module_free(block);

    /* 2. Train it inside a Sequential. */
    phx_module *model = phx_sequential_new();
    check(phx_sequential_add(model, phx_linear_new(8, 32, true, rng)), "model");
    check(phx_sequential_add(model, residual_new(32, rng)), "model");
    check(phx_sequential_add(model, phx_linear_new(32, 1, true, rng)), "model");
    printf("parameters:");
    for (size_t i = 0; i < phx_module_num_params(model); i++) printf(" %s", phx_module_param_name(model, i));
    printf("\n");
    int64_t xs[2] = {256, 8}, ys[2] = {256, 1};
    phx_tensor *data = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *target = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    check(phx_rng_uniform(rng, data, -1, 1), "data");
    const float *dv = phx_tensor_data(data);
    float *tv = phx_tensor_data(target);
    for (int r = 0; r < 256; r++) {
        double sum = 0;
        for (int c = 0; c < 8; c++) sum += dv[r * 8 + c];
        tv[r] = (float)sin(sum);
    }
    phx_adam_opts ao = PHX_ADAM_OPTS_INIT;
    ao.lr = 3e-3;
    phx_optimizer *opt = phx_adam_new(model, &ao);
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_module *replica = phx_module_clone(model);
    float first = 0, loss = 0;
    po.total_steps = 301;
    phx_progress *prog = phx_progress_new(&po);
    check(prog ? PHX_OK : PHX_EIO, "--metrics/--tensorboard");
    for (int step = 0; step <= 300; step++) {
        phx_tensor *out;
        check(phx_optimizer_zero_grad(opt), "zero_grad");
        check(phx_module_forward(model, data, &out), "forward");
        check(phx_loss_forward(mse, out, target, &loss), "loss");
        check(phx_module_backward(model, phx_loss_grad(mse), NULL), "backward");
        check(phx_optimizer_step(opt), "step");
        if (step == 0) first = loss;
        phx_progress_step(prog, 1, loss, ao.lr, 0);
        if (step % 100 == 0) {
            phx_progress_break(prog);
            printf("step %3d  loss %.4f\n", step, loss);
        }
    }
    phx_progress_free(prog);
    printf("loss %.4f -> %.4f; a clone made before training still has %zu parameters of its own\n", first, loss,
           phx_module_num_params(replica));
    phx_module_free(replica);
    phx_loss_free(mse);
    phx_optimizer_free(opt);
    phx_module_free(model);
    phx_tensor_free(data);
    phx_tensor_free(target);
    phx_tensor_free(x);
    phx_tensor_free(w);
    phx_rng_free(rng);
    return worst < 1e-2 && loss < first / 4 ? 0 : 1;
}
