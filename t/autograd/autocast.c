/* The autocast table (doc/guide/precision.md) inside a forward-only module: under
 * the bf16 policy phx_matmul runs in bf16 (its f32 parameter cast with a
 * recorded phx_to_dtype, the gradient returning in f32) and softmax in f32;
 * the parameter's gradient is the f32 run's within bf16's rounding; under
 * fp32 nothing is cast; under fp16 phx_cat promotes an f16 and an f32 input
 * to f32 (PyTorch's promote list), and outside a module it refuses them. */
#include <math.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_status lin_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_tensor *h = phx_matmul(x, phx_param_value(phx_module_param(self, 0)));
    *y = phx_softmax(h, -1);
    return *y ? PHX_OK : PHX_EINVAL;
}

static void no_ctx(phx_module *self)
{
    (void)self;
}

static const phx_module_vtable lin_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Lin", .forward = lin_forward, .free = no_ctx};

static phx_module *lin_new(void)
{
    phx_module *m = phx_module_new(&lin_vt, NULL);
    int64_t ws[2] = {6, 5};
    phx_tensor *w = phx_tensor_new(PHX_F32, 2, ws, phx_cpu());
    phx_rng *rng = phx_rng_new(3);
    phx_rng_normal(rng, w, 0, 1);
    phx_rng_free(rng);
    phx_module_add_param(m, "w", w);
    return m;
}

/* cat([x @ w (the compute dtype), softmax(x @ w) (f32)], 1): autocast's
 * promote list; with spell_out the f32 conversion is written by hand */
static int spell_out;
static phx_status cat_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_tensor *h = phx_matmul(x, phx_param_value(phx_module_param(self, 0)));
    phx_tensor *parts[2] = {spell_out && h ? phx_to_dtype(h, PHX_F32) : h, phx_softmax(h, -1)};
    *y = parts[0] && parts[1] ? phx_cat(2, (const phx_tensor *const *)parts, 1) : NULL;
    return *y ? PHX_OK : PHX_EINVAL;
}

static const phx_module_vtable cat_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Cat", .forward = cat_forward, .free = no_ctx};

/* forward + backward (dy: ones) of cat_vt under p; the output's dtype
 * (-1 on error) and w's gradient */
static phx_dtype run_cat(const phx_precision *p, const phx_tensor *x, float *grad)
{
    phx_module *m = lin_new();
    phx_module *c = phx_module_new(&cat_vt, NULL);
    phx_module_add_param(c, "w", phx_tensor_retain(phx_param_value(phx_module_param(m, 0))));
    phx_module_set_precision(c, p);
    phx_tensor *y = NULL, *dy = NULL;
    phx_dtype dt = (phx_dtype)-1;
    if (phx_module_forward(c, x, &y) == PHX_OK &&
        (dy = phx_full(2, phx_tensor_shape(y), 1.0, phx_tensor_dtype(y), phx_cpu())) &&
        phx_module_backward(c, dy, NULL) == PHX_OK) {
        dt = phx_tensor_dtype(y);
        phx_tensor_to_host(phx_param_grad(phx_module_param(c, 0)), grad);
    } else
        diag("%s", phx_last_error());
    phx_tensor_free(dy);
    phx_module_free(c), phx_module_free(m);
    return dt;
}

/* Runs forward + backward with dy; returns the output dtype, fills grad. */
static phx_dtype run(const phx_precision *p, const phx_tensor *x, const phx_tensor *dy, float *grad, float *out,
                     const char **fn)
{
    phx_module *m = lin_new();
    if (p) phx_module_set_precision(m, p);
    phx_tensor *y = NULL;
    phx_dtype dt = (phx_dtype)-1;
    if (phx_module_forward(m, x, &y) == PHX_OK && phx_module_backward(m, dy, NULL) == PHX_OK) {
        dt = phx_tensor_dtype(y);
        *fn = phx_tensor_grad_fn(y);
        phx_tensor *o = phx_tensor_new(PHX_F32, phx_tensor_ndim(y), phx_tensor_shape(y), phx_cpu());
        phx_tensor_cast(o, y);
        phx_tensor_to_host(o, out);
        phx_tensor_free(o);
        phx_tensor_to_host(phx_param_grad(phx_module_param(m, 0)), grad);
    } else
        diag("%s", phx_last_error());
    phx_module_free(m);
    return dt;
}

int main(void)
{
    plan(8);
    int64_t xs[2] = {4, 6}, ys[2] = {4, 5};
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *dy = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng *rng = phx_rng_new(9);
    phx_rng_normal(rng, x, 0, 1);
    phx_rng_normal(rng, dy, 0, 1);
    phx_precision *bf16 = NULL;
    phx_precision_new("bf16", &bf16);
    float g32[30], g16[30], o32[20], o16[20];
    const char *f32fn = NULL, *f16fn = NULL;
    phx_dtype d32 = run(NULL, x, dy, g32, o32, &f32fn), d16 = run(bf16, x, dy, g16, o16, &f16fn);
    ok(d32 == PHX_F32 && d16 == PHX_F32, "softmax's output is f32 under both policies (%s, %s)", phx_dtype_name(d32),
       phx_dtype_name(d16));
    double eg = 0, eo = 0, gmax = 0, diff = 0;
    for (int i = 0; i < 30; i++) {
        eg = fmax(eg, fabs(g32[i] - g16[i]));
        gmax = fmax(gmax, fabs(g32[i]));
    }
    for (int i = 0; i < 20; i++) eo = fmax(eo, fabs(o32[i] - o16[i]));
    for (int i = 0; i < 20; i++) diff += o32[i] != o16[i];
    ok(diff > 0, "the bf16 run rounded its matmul (%.0f of 20 outputs differ from f32)", diff);
    ok(eo < 0.03, "its outputs are f32's within bf16 rounding (max |diff| %.3g)", eo);
    ok(eg < 0.03 * gmax + 1e-3, "the f32 parameter's gradient is f32's within bf16 rounding (max |diff| %.3g of %.3g)",
       eg, gmax);
    ok(f16fn && !strcmp(f16fn, f32fn ? f32fn : ""), "the output was made by %s both times", f16fn ? f16fn : "?");
    /* outside a forward-only module nothing is cast */
    phx_tensor *xb = phx_tensor_new(PHX_BF16, 2, xs, phx_cpu());
    phx_tensor_cast(xb, x);
    int64_t ws[2] = {6, 5};
    phx_tensor *w = phx_tensor_zeros(PHX_F32, 2, ws, phx_cpu());
    ok(!phx_matmul(xb, w) && strstr(phx_last_error(), "bf16"), "outside a module bf16 @ f32 is refused: %s",
       phx_last_error());
    /* cat of an fp16 product and its f32 softmax: promoted to f32, as
     * PyTorch's autocast promotes cat; the gradient is the bits of the
     * same forward with the conversion written out */
    phx_precision *fp16 = NULL;
    phx_precision_new("fp16", &fp16);
    float gp[30], gs[30];
    spell_out = 0;
    phx_dtype dp = run_cat(fp16, x, gp);
    spell_out = 1;
    phx_dtype ds = run_cat(fp16, x, gs);
    ok(dp == PHX_F32 && ds == PHX_F32 && !memcmp(gp, gs, sizeof gp),
       "under fp16 cat(f16, f32) joins in f32, the gradient the bits of an explicit phx_to_dtype (%s)",
       dp == PHX_F32 ? "f32" : phx_last_error());
    int64_t s45[2] = {4, 5};
    phx_tensor *h16 = phx_tensor_zeros(PHX_F16, 2, s45, phx_cpu()), *h32 = phx_tensor_zeros(PHX_F32, 2, s45, phx_cpu());
    const phx_tensor *mix[2] = {h16, h32};
    ok(!phx_cat(2, mix, 1) && strstr(phx_last_error(), "expected one dtype"),
       "outside a module cat(f16, f32) is refused: %s", phx_last_error());
    phx_tensor_free(h16), phx_tensor_free(h32);
    phx_precision_free(fp16);
    phx_tensor_free(x), phx_tensor_free(dy), phx_tensor_free(xb), phx_tensor_free(w);
    phx_precision_free(bf16);
    phx_rng_free(rng);
    return done_testing();
}
