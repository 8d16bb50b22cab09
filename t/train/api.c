/* The module, loss and optimizer API: dotted names, hook order, gradient
 * accumulation, Linear's initialisation, clone, train/eval, the losses
 * against float64 formulas, the precision-aware Linear, and the errors
 * bad input gets. */
#include <math.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_tensor *tensor2(int64_t r, int64_t c, const float *v)
{
    int64_t s[2] = {r, c};
    return phx_tensor_from_data(PHX_F32, 2, s, v);
}

typedef struct rec {
    phx_module *m;
    char buf[256];
    int calls;
} rec;

static void record(phx_param *p, void *user)
{
    rec *r = user;
    r->calls++;
    for (size_t i = 0; i < phx_module_num_params(r->m); i++)
        if (phx_module_param(r->m, i) == p) {
            if (r->buf[0]) strcat(r->buf, " ");
            strcat(r->buf, phx_module_param_name(r->m, i));
        }
}

static phx_module *small(phx_rng *rng)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(4, 5, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(5, 3, true, rng));
    phx_sequential_add(m, phx_layernorm_new(3, 1e-5f, true));
    return m;
}

static void test_names_hooks(void)
{
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = small(rng);
    const char *want[] = {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"};
    is_int(phx_module_num_params(m), 6, "named_parameters: 6 parameters");
    bool same = true;
    for (size_t i = 0; i < 6; i++) same = same && strcmp(phx_module_param_name(m, i), want[i]) == 0;
    ok(same, "dotted names in PyTorch's order (0.weight ... 3.bias)");
    ok(phx_module_find_param(m, "2.bias") == phx_module_param(m, 3), "find_param by dotted name");
    ok(phx_module_find_param(m, "2.nope") == NULL, "find_param of an unknown name is NULL");
    is_str(phx_param_name(phx_module_param(m, 3)), "bias", "leaf name");

    float xv[8] = {0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 0.75f};
    phx_tensor *x = tensor2(2, 4, xv), *y = NULL, *dx = NULL;
    rec r = {m, "", 0};
    phx_module_set_grad_hook(m, record, &r);
    phx_module_forward(m, x, &y);
    phx_tensor *dy = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(y), phx_cpu());
    float dyv[6] = {1, -2, 0.5f, 0.3f, 0.1f, -1};
    phx_tensor_from_host(dy, dyv);
    ok(phx_module_backward(m, dy, &dx) == PHX_OK && dx && phx_tensor_dim(dx, 1) == 4, "backward gives dx (2, 4)");
    /* Recorded from torch 1.13 (tensor hooks on this model's parameters). */
    is_str(r.buf, "3.weight 3.bias 2.bias 2.weight 0.bias 0.weight", "hooks fire once each, in autograd's order");
    is_int(r.calls, 6, "one hook call per parameter per backward");

    /* Gradients accumulate until zero_grad. */
    /* 0.weight is (5, 4): 20 floats (was read into 15: a stack overflow). */
    phx_tensor *g0 = phx_param_grad(phx_module_param(m, 0));
    int64_t ng = phx_tensor_numel(g0);
    is_int(ng, 20, "0.weight's gradient has 20 elements");
    float g1[20], g2[20];
    phx_tensor_to_host(phx_param_grad(phx_module_param(m, 0)), g1);
    phx_module_forward(m, x, &y);
    phx_module_backward(m, dy, NULL);
    phx_tensor_to_host(phx_param_grad(phx_module_param(m, 0)), g2);
    bool twice = true;
    for (int i = 0; i < 20; i++) twice = twice && fabsf(g2[i] - 2 * g1[i]) <= 1e-6f * (1 + fabsf(g1[i]));
    ok(twice, "a second backward adds the same gradient again");
    phx_module_zero_grad(m);
    double s = 1;
    phx_tensor_reduce(phx_param_grad(phx_module_param(m, 0)), PHX_MAX, &s);
    ok(s == 0.0, "zero_grad zeroes");

    /* Clone: same structure and values, shares nothing. */
    phx_module *c = phx_module_clone(m);
    phx_tensor *yc = NULL;
    ok(c && phx_module_num_params(c) == 6 && strcmp(phx_module_param_name(c, 4), "3.weight") == 0,
       "clone has the same dotted names");
    phx_module_forward(m, x, &y);
    float ya[6], yb[6];
    phx_tensor_to_host(y, ya);
    phx_module_forward(c, x, &yc);
    phx_tensor_to_host(yc, yb);
    ok(memcmp(ya, yb, sizeof ya) == 0 && yc != y, "clone computes the same output into its own buffer");
    phx_tensor_fill(phx_param_value(phx_module_param(c, 0)), 0.0);
    phx_tensor_reduce(phx_param_value(phx_module_param(m, 0)), PHX_MAX, &s);
    ok(s != 0.0, "changing the clone leaves the original alone");
    phx_module_free(c);

    ok(phx_module_to(m, phx_cpu()) == PHX_OK, "to(cpu) on a CPU model");
    phx_module_free(m);
    phx_tensor_free(x);
    phx_tensor_free(dy);
    phx_rng_free(rng);
}

static void test_linear_init(void)
{
    phx_rng *a = phx_rng_new(77), *b = phx_rng_new(77);
    phx_module *l = phx_linear_new(16, 3, true, a);
    int64_t ws[2] = {3, 16}, bs = 3;
    phx_tensor *w = phx_tensor_new(PHX_F32, 2, ws, phx_cpu()), *bb = phx_tensor_new(PHX_F32, 1, &bs, phx_cpu());
    phx_rng_uniform(b, w, -0.25f, 0.25f); /* 1/sqrt(16) */
    phx_rng_uniform(b, bb, -0.25f, 0.25f);
    float got[48], exp[48];
    phx_tensor_to_host(phx_param_value(phx_module_param(l, 0)), got);
    phx_tensor_to_host(w, exp);
    ok(memcmp(got, exp, sizeof got) == 0, "weight = U(-1/sqrt(in), 1/sqrt(in)) drawn first from the rng");
    phx_tensor_to_host(phx_param_value(phx_module_param(l, 1)), got);
    phx_tensor_to_host(bb, exp);
    ok(memcmp(got, exp, 3 * sizeof *got) == 0, "bias = U(-1/sqrt(in), 1/sqrt(in)) drawn next");
    is_int(phx_rng_offset(a), 51, "the layer consumed out*in + out numbers");
    double mx = 0, mn = 0;
    phx_module *big = phx_linear_new(100, 200, true, NULL);
    phx_tensor_reduce(phx_param_value(phx_module_param(big, 0)), PHX_MAX, &mx);
    phx_tensor_reduce(phx_param_value(phx_module_param(big, 0)), PHX_MIN, &mn);
    ok(mx < 0.1 && mn >= -0.1 && mx > 0.099 && mn < -0.099, "Linear(100, 200) weights fill (-0.1, 0.1): [%g, %g]", mn,
       mx);
    phx_module_free(big);
    phx_module_free(l);
    phx_tensor_free(w);
    phx_tensor_free(bb);
    phx_rng_free(a);
    phx_rng_free(b);
}

static void test_dropout(void)
{
    phx_module *d = phx_dropout_new(0.25f, 5);
    int64_t n = 4000;
    phx_tensor *x = phx_tensor_new(PHX_F32, 1, &n, phx_cpu()), *y = NULL;
    phx_tensor_fill(x, 1.0);
    phx_module_forward(d, x, &y);
    double sum = 0;
    phx_tensor_reduce(y, PHX_SUM, &sum);
    int zeros = 0;
    const float *yv = phx_tensor_data(y);
    for (int64_t i = 0; i < n; i++) zeros += yv[i] == 0.0f;
    ok(zeros > 850 && zeros < 1150, "train: about p of the elements dropped (%d of 4000)", zeros);
    ok(fabs(sum - (double)(n - zeros) / 0.75) < 1e-2, "train: kept elements scaled by 1/(1-p)");
    float first[4000];
    memcpy(first, yv, sizeof first);
    phx_module_forward(d, x, &y);
    ok(memcmp(first, phx_tensor_data(y), sizeof first) != 0, "a second forward draws a new mask");
    phx_module_train(d, false);
    ok(!phx_module_is_training(d), "eval mode set");
    phx_module_forward(d, x, &y);
    phx_tensor_reduce(y, PHX_SUM, &sum);
    ok(sum == 4000.0, "eval: identity");
    phx_module_free(d);
    phx_tensor_free(x);
}

static void test_losses(void)
{
    float yv[6] = {0.2f, -1.0f, 3.0f, 1.5f, 0.5f, -0.25f}, tv[6] = {0, 1, 2, 1, 0, -1};
    phx_tensor *y = tensor2(2, 3, yv), *t = tensor2(2, 3, tv);
    for (int red = 0; red < 2; red++) {
        phx_loss *l = phx_loss_new(PHX_LOSS_MSE, red);
        float v;
        double want = 0;
        for (int i = 0; i < 6; i++) want += ((double)yv[i] - tv[i]) * ((double)yv[i] - tv[i]);
        double scale = red == PHX_REDUCE_MEAN ? 1.0 / 6 : 1.0;
        ok(phx_loss_forward(l, y, t, &v) == PHX_OK, "mse %s", red ? "sum" : "mean");
        is_close(v, want * scale, 1e-6, "mse %s value", red ? "sum" : "mean");
        const float *g = phx_tensor_data(phx_loss_grad(l));
        double e = 0;
        for (int i = 0; i < 6; i++) e = fmax(e, fabs(g[i] - 2 * ((double)yv[i] - tv[i]) * scale));
        ok(e < 1e-6, "mse %s gradient 2(y-t)%s", red ? "sum" : "mean", red ? "" : "/n");
        phx_loss_free(l);
    }
    int64_t n2 = 2, lab[2] = {2, 0};
    phx_tensor *labels = phx_tensor_from_data(PHX_I64, 1, &n2, lab);
    phx_loss *ce = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    phx_loss *nll = phx_loss_new(PHX_LOSS_NLL, PHX_REDUCE_MEAN);
    float v;
    double want = 0, gw[6];
    for (int r = 0; r < 2; r++) {
        double m = -INFINITY, s = 0;
        for (int c = 0; c < 3; c++) m = fmax(m, yv[r * 3 + c]);
        for (int c = 0; c < 3; c++) s += exp(yv[r * 3 + c] - m);
        want += -(yv[r * 3 + lab[r]] - m - log(s)) / 2;
        for (int c = 0; c < 3; c++) gw[r * 3 + c] = (exp(yv[r * 3 + c] - m) / s - (c == lab[r])) / 2;
    }
    ok(phx_loss_forward(ce, y, labels, &v) == PHX_OK, "cross_entropy");
    is_close(v, want, 1e-6, "cross_entropy value (stable log-softmax, mean)");
    const float *g = phx_tensor_data(phx_loss_grad(ce));
    double e = 0;
    for (int i = 0; i < 6; i++) e = fmax(e, fabs(g[i] - gw[i]));
    ok(e < 1e-6, "cross_entropy gradient (softmax - onehot)/N");
    ok(phx_loss_forward(nll, y, labels, &v) == PHX_OK, "nll");
    is_close(v, -(yv[2] + yv[3]) / 2.0, 1e-6, "nll value -mean(y[label])");
    /* Large logits stay finite. */
    float big[6] = {1000, -1000, 0, 500, 500, 500};
    phx_tensor *yb = tensor2(2, 3, big);
    ok(phx_loss_forward(ce, yb, labels, &v) == PHX_OK && isfinite(v), "cross_entropy of logits +-1000 is finite (%g)",
       v);
    int64_t badl[2] = {1, 3};
    phx_tensor *bad = phx_tensor_from_data(PHX_I64, 1, &n2, badl);
    ok(phx_loss_forward(ce, y, bad, &v) == PHX_EINVAL, "label out of range is EINVAL");
    like(phx_last_error(), "label 3 of row 1 is outside [0, 3)", "message names the label, row and range");
    ok(phx_loss_forward(ce, y, t, &v) == PHX_EINVAL, "float target for cross_entropy is EINVAL");
    like(phx_last_error(), "expected i64 (2,) labels", "message says what was expected");
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    ok(phx_loss_forward(mse, y, labels, &v) == PHX_EINVAL, "mse with a wrong target shape is EINVAL");
    phx_loss_free(mse);
    ok(phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_SUM) == NULL, "cross_entropy with sum is refused");
    phx_loss_free(ce);
    phx_loss_free(nll);
    phx_tensor_free(y);
    phx_tensor_free(t);
    phx_tensor_free(yb);
    phx_tensor_free(bad);
    phx_tensor_free(labels);
}

static void test_errors(void)
{
    phx_module *l = phx_linear_new(10, 2, true, NULL);
    float xv[24] = {0};
    phx_tensor *x = tensor2(2, 12, xv), *y = NULL;
    ok(phx_module_backward(l, x, NULL) == PHX_ESTATE, "backward before forward is ESTATE");
    ok(phx_module_forward(l, x, &y) == PHX_EINVAL, "wrong feature count is EINVAL");
    like(phx_last_error(), "phx_linear_forward: input has 12 features, layer expects 10", "message names both");
    ok(phx_linear_new(0, 3, true, NULL) == NULL, "Linear(0, 3) refused");
    ok(phx_dropout_new(1.0f, 0) == NULL, "Dropout(1.0) refused");
    like(phx_last_error(), "expected 0 <= p < 1", "dropout message");
    int64_t s = 3;
    phx_tensor *extra = phx_tensor_zeros(PHX_F32, 1, &s, phx_cpu()); /* the caller keeps it on failure */
    ok(phx_module_add_param(l, "bias", extra) == NULL, "a second 'bias' is refused");
    ok(phx_module_add_param(l, "a.b", extra) == NULL, "a dotted leaf name is refused");
    phx_tensor_free(extra);
    ok(phx_sequential_add(l, phx_relu_new()) == PHX_EINVAL, "sequential_add on a Linear is EINVAL");
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.nesterov = true;
    ok(phx_sgd_new(l, &so) == NULL, "nesterov without momentum refused");
    like(phx_last_error(), "nesterov needs momentum > 0", "SGD message");
    so = phx_sgd_defaults();
    so.lr = -1;
    ok(phx_sgd_new(l, &so) == NULL, "negative lr refused");
    phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
    ao.beta2 = 1.0;
    ok(phx_adam_new(l, &ao) == NULL, "beta2 = 1 refused");
    like(phx_last_error(), "betas (0.9, 1) must lie in [0, 1)", "Adam message");
    phx_adam_opts aw = PHX_ADAMW_OPTS_INIT;
    ok(aw.weight_decay == 0.01 && aw.decoupled && phx_adam_defaults().weight_decay == 0.0,
       "AdamW defaults wd 0.01, Adam 0");
    phx_optimizer *o = phx_adam_new(l, &aw);
    ok(o && strcmp(phx_optimizer_type(o), "AdamW") == 0 && phx_optimizer_lr(o) == 1e-3, "AdamW lr 1e-3");
    ok(phx_optimizer_set_lr(o, -0.5) == PHX_EINVAL && phx_optimizer_lr(o) == 1e-3, "set_lr(-0.5) refused");
    const char **names;
    phx_tensor **ts;
    is_int(phx_optimizer_state(o, &names, &ts), 4, "AdamW state: exp_avg and exp_avg_sq per parameter");
    is_str(names[3], "bias.exp_avg_sq", "state names <param>.<state>");
    int64_t wrong = 5;
    phx_tensor *wg = phx_tensor_zeros(PHX_F32, 1, &wrong, phx_cpu());
    ok(phx_param_set_grad(phx_module_param(l, 1), wg) == PHX_EINVAL, "set_grad with another shape refused");
    phx_tensor_free(wg);
    phx_optimizer_free(o);
    static const phx_module_vtable half = {.struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Half"};
    ok(phx_module_new(&half, NULL) == NULL, "a vtable without forward is refused");
    phx_module_free(l);
    phx_tensor_free(x);
}

static void test_precision(void)
{
    phx_precision *p = NULL;
    if (phx_precision_new("bf16", &p) != PHX_OK) {
        skip(6, "bf16 policy plugin not found");
        return;
    }
    phx_module *l = phx_linear_new(8, 4, true, NULL);
    ok(phx_module_set_precision(l, p) == PHX_OK && phx_module_compute_dtype(l) == PHX_BF16, "bf16 policy set");
    float xv[16];
    for (int i = 0; i < 16; i++) xv[i] = (float)(i % 5) * 0.25f - 0.5f;
    phx_tensor *x = tensor2(2, 8, xv), *y = NULL;
    phx_module_forward(l, x, &y);
    ok(phx_tensor_dtype(y) == PHX_BF16, "activation stored in bf16");
    double before, after;
    phx_tensor_reduce(y, PHX_SUM, &before);
    /* Change W behind the layer's back: the bf16 copy is only refreshed
     * when the parameter's version moves. */
    phx_param *w = phx_module_param(l, 0);
    float *wv = phx_tensor_data(phx_param_value(w));
    for (int i = 0; i < 32; i++) wv[i] += 1.0f;
    phx_module_forward(l, x, &y);
    phx_tensor_reduce(y, PHX_SUM, &after);
    ok(after == before, "without a version change the bf16 weight copy is reused");
    phx_param_touch(w);
    phx_module_forward(l, x, &y);
    phx_tensor_reduce(y, PHX_SUM, &after);
    ok(after != before, "after phx_param_touch the copy is refreshed");
    phx_loss *mse = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    int64_t ys[2] = {2, 4};
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 2, ys, phx_cpu());
    float v;
    ok(phx_loss_forward(mse, y, t, &v) == PHX_OK && phx_tensor_dtype(phx_loss_grad(mse)) == PHX_F32,
       "the loss reads bf16 and gives an f32 gradient");
    phx_module_backward(l, phx_loss_grad(mse), NULL);
    ok(phx_tensor_dtype(phx_param_grad(w)) == PHX_F32, "parameter gradients stay f32");
    phx_loss_free(mse);
    phx_tensor_free(t);
    phx_tensor_free(x);
    phx_module_free(l);
    phx_precision_free(p);
}

int main(void)
{
    plan(69);
    test_names_hooks();
    test_linear_init();
    test_dropout();
    test_losses();
    test_errors();
    test_precision();
    return done_testing();
}
