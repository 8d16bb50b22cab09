/* The CNN modules against PyTorch 1.13 (t/ref/cnn_modules.safetensors
 * from bench/torch/cnn.py): each case gets the script's parameters (and,
 * for eval BatchNorm, running statistics), runs forward on its input and
 * backward on its dy; output, input gradient, every parameter gradient
 * and every buffer after the step must match torch's float32 results
 * within 1e-5 relative, and its float64 results within 1e-4. Then f32
 * central finite differences of L = sum(y * dy) for inputs and weights,
 * and the clear errors of issue 13's item 6. */
#include "t/gpt-util.h"

static phx_conv2d_opts conv_opts(int64_t s0, int64_t s1, int64_t p0, int64_t p1, int64_t d, int64_t g, bool bias)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.stride[0] = s0, o.stride[1] = s1, o.padding[0] = p0, o.padding[1] = p1;
    o.dilation[0] = o.dilation[1] = d, o.groups = g, o.bias = bias;
    return o;
}

/* The modules of bench/torch/cnn.py's CASES, in its order. */
static phx_module *make(const char *c, bool *train, bool *two)
{
    *train = strcmp(c, "bn2d_eval") != 0;
    *two = !strcmp(c, "bn2d_train") || !strcmp(c, "bn2d_cma") || !strcmp(c, "bn1d_2d");
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    if (!strcmp(c, "conv_basic")) return phx_conv2d_new(3, 4, 3, 3, NULL, NULL);
    if (!strcmp(c, "conv_s2p1")) return o = conv_opts(2, 2, 1, 1, 1, 1, true), phx_conv2d_new(3, 6, 3, 3, &o, NULL);
    if (!strcmp(c, "conv_dil2")) return o = conv_opts(1, 1, 2, 2, 2, 1, true), phx_conv2d_new(4, 4, 3, 3, &o, NULL);
    if (!strcmp(c, "conv_g2")) return o = conv_opts(1, 1, 1, 1, 1, 2, false), phx_conv2d_new(4, 6, 3, 3, &o, NULL);
    if (!strcmp(c, "conv_1x1")) return phx_conv2d_new(5, 3, 1, 1, NULL, NULL);
    if (!strcmp(c, "conv_same4")) {
        o = phx_conv2d_opts_default();
        o.padding_same = true;
        return phx_conv2d_new(3, 4, 4, 4, &o, NULL);
    }
    if (!strcmp(c, "conv_rect")) return o = conv_opts(2, 1, 1, 2, 1, 1, true), phx_conv2d_new(2, 3, 3, 5, &o, NULL);
    if (!strcmp(c, "bn2d_train") || !strcmp(c, "bn2d_eval")) return phx_batchnorm2d_new(4, 1e-5f, 0.1f, true, true);
    if (!strcmp(c, "bn2d_cma")) return phx_batchnorm2d_new(3, 1e-5f, -1.0f, true, true);
    if (!strcmp(c, "bn2d_noaffine")) return phx_batchnorm2d_new(3, 1e-5f, 0.1f, false, false);
    if (!strcmp(c, "bn1d_2d")) return phx_batchnorm1d_new(5, 1e-5f, 0.1f, true, true);
    if (!strcmp(c, "bn1d_3d")) return phx_batchnorm1d_new(5, 1e-3f, 0.3f, true, true);
    if (!strcmp(c, "maxpool2")) return phx_maxpool2d_new(2, 0, 0);
    if (!strcmp(c, "maxpool3s1p1")) return phx_maxpool2d_new(3, 1, 1);
    if (!strcmp(c, "avgpool_pad")) return phx_avgpool2d_new(3, 2, 1, true);
    if (!strcmp(c, "avgpool_nopad")) return phx_avgpool2d_new(3, 2, 1, false);
    if (!strcmp(c, "adaptive1")) return phx_adaptive_avgpool2d_new(1, 1);
    if (!strcmp(c, "adaptive2")) return phx_adaptive_avgpool2d_new(2, 2);
    return NULL;
}

static const char *cases[] = {"conv_basic", "conv_s2p1",     "conv_dil2",   "conv_g2",    "conv_1x1",
                              "conv_same4", "conv_rect",     "bn2d_train",  "bn2d_eval",  "bn2d_cma",
                              "bn2d_noaffine", "bn1d_2d",    "bn1d_3d",     "maxpool2",   "maxpool3s1p1",
                              "avgpool_pad", "avgpool_nopad", "adaptive1", "adaptive2"};

/* Buffers of m against "<c>.<tag>.<name>": the worst error, 0 without. */
static double buffers_err(const gu_file *f, phx_module *m, const char *c, const char *tag)
{
    double e = 0;
    for (size_t i = 0; i < phx_module_num_buffers(m); i++)
        e = fmax(e, gu_max_rel(phx_module_buffer(m, i), gu_get(f, "%s.%s.%s", c, tag, phx_module_buffer_name(m, i))));
    return e;
}

/* Case c's module with torch's parameters ("<c>.p.*") loaded; *loaded is
 * gu_load's answer, -1 when the module could not be made. */
static phx_module *make_loaded(const gu_file *f, const char *c, bool *train, bool *two, int *loaded)
{
    phx_module *m = make(c, train, two);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.p.", c);
    *loaded = m ? gu_load(f, m, prefix) : -1;
    return m;
}

static void run_case(const gu_file *f, const char *c)
{
    bool train, two;
    int loaded;
    phx_module *m = make_loaded(f, c, &train, &two, &loaded);
    for (size_t i = 0; m && i < phx_module_num_buffers(m); i++) { /* eval's fixed statistics */
        phx_tensor *b = gu_get(f, "%s.b0.%s", c, phx_module_buffer_name(m, i));
        if (!b || phx_tensor_copy(phx_module_buffer(m, i), b) != PHX_OK) loaded = -1;
    }
    phx_tensor *x = gu_get(f, "%s.x", c), *dy = gu_get(f, "%s.dy", c), *y = NULL, *dx = NULL;
    if (m) phx_module_train(m, train);
    phx_status fs = m && loaded >= 0 && x ? phx_module_forward(m, x, &y) : PHX_EINVAL;
    phx_status bs = fs == PHX_OK && dy ? phx_module_backward(m, dy, &dx) : PHX_EINVAL;
    ok(fs == PHX_OK && bs == PHX_OK, "%s: forward and backward run (%s)", c, fs || bs ? phx_last_error() : "ok");
    double ey = gu_max_rel(y, gu_get(f, "%s.y", c)), edx = gu_max_rel(dx, gu_get(f, "%s.dx", c));
    ok(ey <= 1e-5 && edx <= 1e-5, "%s: y and dx match torch f32 (%.2g, %.2g)", c, ey, edx);
    double ey64 = gu_max_rel(y, gu_get(f, "%s.y64", c)), edx64 = gu_max_rel(dx, gu_get(f, "%s.dx64", c));
    ok(ey64 <= 1e-4 && edx64 <= 1e-4, "%s: y and dx match torch f64 (%.2g, %.2g)", c, ey64, edx64);
    size_t np = m ? phx_module_num_params(m) : 0;
    if (np) {
        double eg = 0;
        for (size_t i = 0; i < np; i++)
            eg = fmax(eg, gu_max_rel(phx_param_grad(phx_module_param(m, i)),
                                     gu_get(f, "%s.g.%s", c, phx_module_param_name(m, i))));
        ok(eg <= 1e-5, "%s: %zu parameter gradients match (%.2g)", c, np, eg);
    }
    if (m && phx_module_num_buffers(m)) {
        double eb = buffers_err(f, m, c, "b");
        ok(eb <= 1e-5, "%s: %zu buffers after the step match (%.2g)", c, phx_module_num_buffers(m), eb);
        if (two) {
            phx_tensor *y2;
            phx_status s2 = phx_module_forward(m, gu_get(f, "%s.x2", c), &y2);
            double eb2 = s2 == PHX_OK ? buffers_err(f, m, c, "b2") : INFINITY;
            ok(eb2 <= 1e-5, "%s: buffers after a second step match (%.2g)", c, eb2);
        }
    }
    phx_module_free(m);
}

/* The worst gu_fd_err along six elements of t (the input or a parameter
 * p's value) against the analytic gradient ga. */
static double fd_worst(phx_module *m, const phx_tensor *x, const phx_tensor *dy, phx_tensor *t, phx_param *p,
                       const phx_tensor *ga)
{
    int64_t n = phx_tensor_numel(t);
    double worst = 0, g = 0;
    for (int64_t k = 0; k < 6; k++) {
        int64_t i = (k * 7919) % n;
        phx_tensor_get(ga, i, &g);
        worst = fmax(worst, gu_fd_err(m, x, dy, t, p, i, g));
    }
    return worst;
}

static void fd_case(const gu_file *f, const char *c)
{
    bool train, two;
    int loaded;
    phx_module *m = make_loaded(f, c, &train, &two, &loaded);
    phx_module_train(m, train);
    phx_tensor *x0 = gu_get(f, "%s.x", c), *dy = gu_get(f, "%s.dy", c);
    phx_tensor *x = phx_tensor_new(PHX_F32, phx_tensor_ndim(x0), phx_tensor_shape(x0), phx_cpu());
    phx_tensor_copy(x, x0);
    phx_tensor *y, *dx;
    phx_module_zero_grad(m);
    phx_module_forward(m, x, &y);
    phx_module_backward(m, dy, &dx);
    phx_tensor *dxc = phx_tensor_new(PHX_F32, phx_tensor_ndim(dx), phx_tensor_shape(dx), phx_cpu());
    phx_tensor_copy(dxc, dx);
    double e = fd_worst(m, x, dy, x, NULL, dxc);
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_param *p = phx_module_param(m, i);
        phx_tensor *g = phx_tensor_new(PHX_F32, phx_tensor_ndim(phx_param_grad(p)), phx_tensor_shape(phx_param_grad(p)),
                                       phx_cpu());
        phx_tensor_copy(g, phx_param_grad(p));
        e = fmax(e, fd_worst(m, x, dy, phx_param_value(p), p, g));
        phx_tensor_free(g);
    }
    ok(e <= 1e-2, "%s: finite differences of the input and every parameter agree (worst %.2g)", c, e);
    phx_tensor_free(dxc);
    phx_tensor_free(x);
    phx_module_free(m);
}

static void expect_error(phx_module *m, const int64_t *shape, int ndim, const char *needle, const char *what)
{
    phx_tensor *x = phx_tensor_zeros(PHX_F32, ndim, shape, phx_cpu()), *y = NULL;
    phx_status st = m && x ? phx_module_forward(m, x, &y) : PHX_OK;
    ok(st == PHX_EINVAL && strstr(phx_last_error(), needle), "%s: EINVAL naming it (%s)", what, phx_last_error());
    phx_tensor_free(x);
    phx_module_free(m);
}

static void errors(void)
{
    int64_t nhwc[4] = {2, 28, 28, 1}, s[4] = {2, 1, 4, 4}, one[2] = {1, 3}, one4[4] = {1, 3, 1, 1};
    expect_error(phx_conv2d_new(1, 8, 3, 3, NULL, NULL), nhwc, 4, "looks like NHWC", "NHWC input to Conv2d");
    int64_t ch[4] = {2, 3, 8, 8};
    expect_error(phx_conv2d_new(1, 8, 3, 3, NULL, NULL), ch, 4, "expected (N, 1, H, W)", "channel mismatch");
    expect_error(phx_conv2d_new(1, 8, 5, 5, NULL, NULL), s, 4, "larger than the padded input 4x4",
                 "kernel larger than the padded input");
    expect_error(phx_maxpool2d_new(5, 0, 0), s, 4, "the output would be empty", "pooling to an empty output");
    phx_module *bn = phx_batchnorm1d_new(3, 1e-5f, 0.1f, true, true);
    expect_error(bn, one, 2, "expected more than 1 value per channel when training", "BatchNorm1d on a batch of 1");
    expect_error(phx_batchnorm2d_new(3, 1e-5f, 0.1f, true, true), one4, 4, "more than 1 value per channel",
                 "BatchNorm2d on one 1x1 image");
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.groups = 3;
    ok(!phx_conv2d_new(4, 6, 3, 3, &o, NULL) && strstr(phx_last_error(), "groups 3 must divide in_channels 4"),
       "groups not dividing the channels: NULL naming them (%s)", phx_last_error());
    o = phx_conv2d_opts_default();
    o.padding_same = true, o.stride[0] = 2;
    ok(!phx_conv2d_new(4, 6, 3, 3, &o, NULL) && strstr(phx_last_error(), "'same'"),
       "padding 'same' with stride 2: NULL naming it");
    /* eval BatchNorm on a batch of one is fine (running statistics) */
    phx_module *e = phx_batchnorm1d_new(3, 1e-5f, 0.1f, true, true);
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, one, phx_cpu()), *y;
    phx_module_train(e, false);
    ok(phx_module_forward(e, x, &y) == PHX_OK, "eval BatchNorm1d on a batch of 1 runs");
    phx_tensor_free(x);
    phx_module_free(e);
}

/* names and initialisation as torch's (shapes; bounds of U(+-1/sqrt(fan_in))) */
static void init_and_names(void)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.groups = 2;
    phx_module *c = phx_conv2d_new(4, 6, 3, 5, &o, NULL);
    phx_tensor *w = phx_param_value(phx_module_find_param(c, "weight"));
    ok(w && phx_tensor_ndim(w) == 4 && phx_tensor_dim(w, 0) == 6 && phx_tensor_dim(w, 1) == 2 &&
           phx_tensor_dim(w, 2) == 3 && phx_tensor_dim(w, 3) == 5 && phx_module_find_param(c, "bias"),
       "Conv2d(4, 6, (3, 5), groups 2): weight (6, 2, 3, 5) and bias");
    double mx = 0, mn = 0, bound = 1.0 / sqrt(2.0 * 3 * 5);
    phx_tensor_reduce(w, PHX_MAX, &mx);
    phx_tensor_reduce(w, PHX_MIN, &mn);
    ok(mx <= bound && mn >= -bound && mx > 0.8 * bound && mn < -0.8 * bound,
       "weight within +-1/sqrt(fan_in) = %.4f and spread over it (%.4f .. %.4f)", bound, mn, mx);
    phx_module_free(c);
    phx_module *b = phx_batchnorm2d_new(3, 1e-5f, 0.1f, true, true);
    ok(phx_module_num_buffers(b) == 3 && !strcmp(phx_module_buffer_name(b, 0), "running_mean") &&
           !strcmp(phx_module_buffer_name(b, 1), "running_var") &&
           !strcmp(phx_module_buffer_name(b, 2), "num_batches_tracked") &&
           phx_tensor_dtype(phx_module_buffer(b, 2)) == PHX_I64 && phx_tensor_ndim(phx_module_buffer(b, 2)) == 0,
       "BatchNorm2d buffers: running_mean, running_var, num_batches_tracked (i64 scalar)");
    phx_module *seq = phx_sequential_new();
    phx_sequential_add(seq, phx_conv2d_new(1, 3, 3, 3, NULL, NULL));
    phx_sequential_add(seq, b);
    phx_module *cl = phx_module_clone(seq);
    ok(cl && phx_module_num_buffers(cl) == 3 && !strcmp(phx_module_buffer_name(cl, 1), "1.running_var"),
       "a Sequential's buffers have dotted names, and clone keeps them (%s)",
       cl ? phx_module_buffer_name(cl, 1) : phx_last_error());
    ok(phx_module_add_buffer(seq, "0", phx_tensor_zeros(PHX_F32, 0, NULL, phx_cpu())) == PHX_EINVAL,
       "a buffer named like a child is EINVAL");
    phx_module_free(cl);
    phx_module_free(seq);
}

int main(void)
{
    gu_file f;
    if (!gu_read(&f, "cnn_modules.safetensors")) {
        printf("Bail out! t/ref/cnn_modules.safetensors unreadable\n");
        return 1;
    }
    size_t n = sizeof cases / sizeof *cases;
    for (size_t i = 0; i < n; i++) run_case(&f, cases[i]);
    const char *fd[] = {"conv_s2p1", "conv_dil2", "conv_g2", "conv_same4", "bn2d_train", "bn1d_3d",
                        "avgpool_nopad", "adaptive1"};
    for (size_t i = 0; i < sizeof fd / sizeof *fd; i++) fd_case(&f, fd[i]);
    errors();
    init_and_names();
    gu_free(&f);
    return done_testing();
}
