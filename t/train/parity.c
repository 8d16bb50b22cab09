/* Training trajectories against PyTorch 1.13: bench/torch/parity.py wrote,
 * for each case, the initial weights, the data, the 50 per-step losses and
 * the final parameters (t/ref/parity_<case>.safetensors). Here the same
 * model starts from those weights and trains on the same batches; every
 * step's loss must match within 1e-5 relative and every final parameter
 * within 1e-5. The gelu_ln case also compares the order of the
 * gradient-ready hooks with the order autograd produced the gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define STEPS 50
#define BATCH 16
#define ROWS 64

typedef struct file {
    char **names;
    phx_tensor **ts;
    size_t n;
} file;

static phx_tensor *get(file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0) return f->ts[i];
    return NULL;
}

static phx_module *mlp(void)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(20, 32, true, NULL));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(32, 16, true, NULL));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(16, 4, true, NULL));
    return m;
}

static phx_module *gelu_ln(void)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(20, 32, true, NULL));
    phx_sequential_add(m, phx_layernorm_new(32, 1e-5f, true));
    phx_sequential_add(m, phx_gelu_new(false));
    phx_sequential_add(m, phx_dropout_new(0.2f, 0));
    phx_sequential_add(m, phx_linear_new(32, 16, true, NULL));
    phx_sequential_add(m, phx_gelu_new(true));
    phx_sequential_add(m, phx_linear_new(16, 4, true, NULL));
    return m;
}

typedef struct order {
    phx_module *m;
    char buf[512];
} order;

static void record(phx_param *p, void *user)
{
    order *o = user;
    for (size_t i = 0; i < phx_module_num_params(o->m); i++)
        if (phx_module_param(o->m, i) == p) {
            if (o->buf[0]) strcat(o->buf, ",");
            strcat(o->buf, phx_module_param_name(o->m, i));
        }
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i])));
    return e;
}

static void run(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/t/ref/parity_%s.safetensors", getenv("top_srcdir") ? getenv("top_srcdir") : ".",
             name);
    file f = {0};
    phx_status st = phx_safetensors_read(path, &f.names, &f.ts, &f.n);
    if (!ok(st == PHX_OK, "%s: read %s (%s)", name, path, phx_last_error())) {
        skip(4, "no data");
        return;
    }
    bool ce = strcmp(name, "gelu_ln") != 0;
    phx_module *m = ce ? mlp() : gelu_ln();
    phx_module_train(m, false); /* as model.eval() in the script: Dropout is the identity */
    size_t np = phx_module_num_params(m);
    bool loaded = true;
    for (size_t i = 0; i < np; i++) {
        char key[128];
        snprintf(key, sizeof key, "init.%s", phx_module_param_name(m, i));
        phx_tensor *t = get(&f, key);
        loaded = loaded && t && phx_tensor_copy(phx_param_value(phx_module_param(m, i)), t) == PHX_OK;
    }
    ok(loaded, "%s: initial weights loaded into %zu parameters", name, np);

    if (!ce) {
        char want[512] = "";
        order o = {m, ""};
        phx_checkpoint_meta(path, "hook_order", want, sizeof want);
        phx_module_set_grad_hook(m, record, &o);
        int64_t xs[2] = {BATCH, 20};
        phx_tensor *xb = phx_tensor_view(get(&f, "x"), 0, 2, xs), *y = NULL;
        phx_module_forward(m, xb, &y);
        phx_tensor *ones = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(y), phx_cpu());
        phx_tensor_fill(ones, 1.0);
        phx_module_backward(m, ones, NULL);
        is_str(o.buf, want, "%s: gradient-ready hooks fire in autograd's order", name);
        phx_module_set_grad_hook(m, NULL, NULL);
        phx_module_zero_grad(m);
        phx_tensor_free(ones);
        phx_tensor_free(xb);
    }

    phx_optimizer *opt;
    if (strcmp(name, "sgd") == 0) {
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.lr = 0.05, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 1e-3;
        opt = phx_sgd_new(m, &o);
    } else if (strcmp(name, "adamw") == 0) {
        phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
        o.lr = 5e-3;
        opt = phx_adam_new(m, &o);
    } else if (strcmp(name, "adam_ams") == 0) {
        phx_adam_opts o = PHX_ADAM_OPTS_INIT;
        o.lr = 5e-3, o.weight_decay = 1e-3, o.amsgrad = true;
        opt = phx_adam_new(m, &o);
    } else {
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.lr = 0.05, o.momentum = 0.5, o.dampening = 0.1;
        opt = phx_sgd_new(m, &o);
    }
    phx_loss *loss = phx_loss_new(ce ? PHX_LOSS_CROSS_ENTROPY : PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = get(&f, "x"), *yall = get(&f, "y");
    const float *want = phx_tensor_data(get(&f, "losses"));
    double worst_loss = 0;
    int bad_step = -1;
    for (int s = 0; s < STEPS; s++) {
        int64_t r0 = BATCH * (s % (ROWS / BATCH));
        int64_t xs[2] = {BATCH, 20}, ys[2] = {BATCH, 4};
        phx_tensor *xb = phx_tensor_view(x, r0 * 20, 2, xs);
        phx_tensor *yb = ce ? phx_tensor_view(yall, r0, 1, ys) : phx_tensor_view(yall, r0 * 4, 2, ys);
        phx_tensor *out = NULL;
        float l = NAN;
        phx_optimizer_zero_grad(opt);
        st = phx_module_forward(m, xb, &out);
        if (st == PHX_OK) st = phx_loss_forward(loss, out, yb, &l);
        if (st == PHX_OK) st = phx_module_backward(m, phx_loss_grad(loss), NULL);
        if (st == PHX_OK) st = phx_optimizer_step(opt);
        double e = fabs((double)l - want[s]) / fabs((double)want[s]);
        if (!(e <= worst_loss)) worst_loss = e;
        if (st != PHX_OK || !(e <= 1e-5)) bad_step = bad_step < 0 ? s : bad_step;
        phx_tensor_free(xb);
        phx_tensor_free(yb);
    }
    ok(bad_step < 0, "%s: %d per-step losses within 1e-5 relative (max %.2e%s)", name, STEPS, worst_loss,
       bad_step < 0 ? "" : ", first bad step follows");
    if (bad_step >= 0) diag("first step off: %d (%s)", bad_step, phx_last_error());
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
        char key[128];
        snprintf(key, sizeof key, "final.%s", phx_module_param_name(m, i));
        phx_tensor *t = get(&f, key), *v = phx_param_value(phx_module_param(m, i));
        worst = t ? fmax(worst, max_rel(phx_tensor_data(v), phx_tensor_data(t), phx_tensor_numel(t))) : INFINITY;
    }
    ok(worst <= 1e-5, "%s: final parameters within 1e-5 (max error %.2e)", name, worst);
    is_int(phx_optimizer_steps(opt), STEPS, "%s: optimizer counted %d steps", name, STEPS);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_safetensors_free(f.names, f.ts, f.n);
}

int main(void)
{
    plan(21);
    run("sgd");
    run("adamw");
    run("adam_ams");
    run("gelu_ln");
    return done_testing();
}
