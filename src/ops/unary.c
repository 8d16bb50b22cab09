/* Unary operations (neg .. clamp) with the unary kernel, and the
 * activations with the built-in modules' kernels (act_forward and
 * act_backward). */
#include "config.h"
#include <math.h>
#include "src/ops/math-impl.h"

phx_tensor *px_unary_raw(const char *fn, int op, const phx_tensor *t, float alpha, float beta)
{
    const phx_tensor *in[1] = {t};
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t)) return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, unary);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    phx_tensor *y = px_op_new(fn, t->dtype, t->ndim, t->shape, dev);
    if (!y) return NULL;
    if (k->unary(dev.index, op, t->dtype, t->numel, px_tensor_ptr(y), px_tensor_ptr(t), alpha, beta) != PHX_OK) {
        phx_tensor_free(y);
        return NULL;
    }
    px_mark_nondiff(fn, 1, in, y); /* comparisons; or a cut path's name carried on */
    return px_scope_own(y);
}

typedef struct un_ctx {
    float lo, hi;
} un_ctx;

/* Records y = op(t) when needed, saving t (save_in) and/or y (save_out). */
static phx_tensor *unary(const char *fn, int op, px_backward_fn bwd, bool save_in, bool save_out, const phx_tensor *t,
                         float alpha, float beta)
{
    phx_tensor *y = px_unary_raw(fn, op, t, alpha, beta);
    const phx_tensor *in[1] = {t};
    if (!y || !px_grad_needed(1, in)) return y; /* px_unary_raw carried a cut path's name */
    px_node *n = NULL;
    if (px_record(fn, bwd, 1, in, y, &n) != PHX_OK) return NULL;
    if (save_in) px_node_save(n, t);
    if (save_out) px_node_save_out(n, y);
    un_ctx *c = px_node_ctx(n);
    c->lo = alpha, c->hi = beta;
    return y;
}

static phx_status neg_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    (void)n;
    return (in_grads[0] = phx_neg(g)) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: y = exp(x); dx = g y */
static phx_status exp_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *y = px_node_saved(n, 0);
    if (!y) return PHX_ESTATE;
    return (in_grads[0] = phx_mul(g, y)) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: x; dx = g / x */
static phx_status ln_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *x = px_node_saved(n, 0);
    if (!x) return PHX_ESTATE;
    return (in_grads[0] = phx_div(g, x)) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: y = sqrt(x); dx = g / (2 y) */
static phx_status sqrt_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *y = px_node_saved(n, 0);
    if (!y) return PHX_ESTATE;
    return (in_grads[0] = phx_div(g, phx_mul_scalar(y, 2.0))) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: y = x^-1/2; dx = -g y^3 / 2 */
static phx_status rsqrt_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *y = px_node_saved(n, 0);
    if (!y) return PHX_ESTATE;
    phx_tensor *y3 = phx_mul(phx_mul(y, y), y);
    return (in_grads[0] = phx_mul(g, phx_mul_scalar(y3, -0.5))) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: x; dx = g sign(x) */
static phx_status abs_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *x = px_node_saved(n, 0);
    if (!x) return PHX_ESTATE;
    return (in_grads[0] = phx_mul(g, px_unary_raw("abs", PHX_UN_SIGN, x, 0, 0))) ? PHX_OK : PHX_EINVAL;
}

/* saved 0: x; dx = g where lo <= x <= hi (PyTorch's clamp backward). */
static phx_status clamp_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const un_ctx *c = px_node_ctx(n);
    const phx_tensor *x = px_node_saved(n, 0);
    if (!x) return PHX_ESTATE;
    phx_tensor *m = NULL;
    if (!isnan(c->lo)) m = phx_ge_scalar(x, c->lo);
    if (!isnan(c->hi)) {
        phx_tensor *m2 = phx_le_scalar(x, c->hi);
        m = m ? phx_mul(m, m2) : m2;
    }
    in_grads[0] = m ? phx_mul(g, m) : px_scope_own(phx_tensor_retain((phx_tensor *)g));
    return in_grads[0] ? PHX_OK : PHX_EINVAL;
}

phx_tensor *phx_neg(const phx_tensor *t)
{
    return unary("neg", PHX_UN_NEG, neg_bwd, false, false, t, 0, 0);
}
phx_tensor *phx_exp(const phx_tensor *t)
{
    return unary("exp", PHX_UN_EXP, exp_bwd, false, true, t, 0, 0);
}
phx_tensor *phx_ln(const phx_tensor *t)
{
    return unary("ln", PHX_UN_LOG, ln_bwd, true, false, t, 0, 0);
}
phx_tensor *phx_sqrt(const phx_tensor *t)
{
    return unary("sqrt", PHX_UN_SQRT, sqrt_bwd, false, true, t, 0, 0);
}
phx_tensor *phx_rsqrt(const phx_tensor *t)
{
    return unary("rsqrt", PHX_UN_RSQRT, rsqrt_bwd, false, true, t, 0, 0);
}
phx_tensor *phx_abs(const phx_tensor *t)
{
    return unary("abs", PHX_UN_ABS, abs_bwd, true, false, t, 0, 0);
}
phx_tensor *phx_clamp(const phx_tensor *t, double lo, double hi)
{
    return unary("clamp", PHX_UN_CLAMP, clamp_bwd, true, false, t, (float)lo, (float)hi);
}

/* ---- Activations ---- */

typedef struct act_ctx {
    int act;
} act_ctx;

/* saved 0: x, 1: y; dx = act_backward(x, y, g) */
static phx_status act_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const act_ctx *c = px_node_ctx(n);
    const phx_tensor *x = px_node_saved(n, 0), *y = px_node_saved(n, 1);
    if (!x || !y) return PHX_ESTATE;
    const char *fn = px_node_name(n);
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, x, act_backward);
    if (!k) return PHX_EUNSUPPORTED;
    phx_device dev = x->storage->device;
    phx_tensor *dx = px_op_new(fn, x->dtype, x->ndim, x->shape, dev);
    if (!dx) return PHX_ENOMEM;
    phx_status st = k->act_backward(dev.index, (phx_activation)c->act, x->numel, px_tensor_ptr(x), px_tensor_ptr(y),
                                    px_tensor_ptr(g), px_tensor_ptr(dx), x->dtype);
    if (st) {
        phx_tensor_free(dx);
        return st;
    }
    in_grads[0] = px_scope_own(dx);
    return PHX_OK;
}

static phx_tensor *activation(const char *fn, phx_activation act, const phx_tensor *t)
{
    const phx_tensor *in[1] = {t};
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t)) return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, act_forward);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    phx_tensor *y = px_op_new(fn, t->dtype, t->ndim, t->shape, dev);
    if (!y) return NULL;
    if (k->act_forward(dev.index, act, t->numel, px_tensor_ptr(t), px_tensor_ptr(y), t->dtype) != PHX_OK) {
        phx_tensor_free(y);
        return NULL;
    }
    px_node *n;
    y = px_op_finish(fn, act_bwd, 1, in, y, &n);
    if (y && n) {
        ((act_ctx *)px_node_ctx(n))->act = act;
        px_node_save(n, t);
        px_node_save_out(n, y);
    }
    return y;
}

phx_tensor *phx_relu(const phx_tensor *t)
{
    return activation("relu", PHX_ACT_RELU, t);
}
phx_tensor *phx_gelu(const phx_tensor *t, bool tanh_approx)
{
    return activation("gelu", tanh_approx ? PHX_ACT_GELU_TANH : PHX_ACT_GELU, t);
}
phx_tensor *phx_tanh(const phx_tensor *t)
{
    return activation("tanh", PHX_ACT_TANH, t);
}
phx_tensor *phx_sigmoid(const phx_tensor *t)
{
    return activation("sigmoid", PHX_ACT_SIGMOID, t);
}
