/* Losses as tensor operations: one node each, with the fused kernels of
 * the built-in losses (cross_entropy and mse slots), which give the loss
 * and its gradient in one pass; backward scales the saved gradient by the
 * incoming one. Results are 0-dim f32 tensors. */
#include "config.h"
#include "src/ops/math-impl.h"

/* t in dtype dt (t itself when it already is), scope-owned. */
static phx_tensor *as_dtype(const char *fn, phx_tensor *t, phx_dtype dt)
{
    if (!t || t->dtype == dt) return t;
    phx_tensor *c = px_op_new(fn, dt, t->ndim, t->shape, t->storage->device);
    if (!c || phx_tensor_cast(c, t) != PHX_OK) {
        phx_tensor_free(c);
        return NULL;
    }
    return px_scope_own(c);
}

/* saved 0: d loss / d input 0 (f32, the input's shape); mse's target gets
 * its negation. */
static phx_status loss_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *d = px_node_saved(n, 0);
    if (!d) return PHX_ESTATE;
    const char *fn = px_node_name(n);
    phx_tensor *gi = phx_mul(d, g);
    if (px_node_needs(n, 0) && !(in_grads[0] = as_dtype(fn, gi, px_node_in_dtype(n, 0)))) return PHX_EINVAL;
    if (px_node_needs(n, 1) && !(in_grads[1] = as_dtype(fn, phx_neg(gi), px_node_in_dtype(n, 1)))) return PHX_EINVAL;
    return PHX_OK;
}

/* Records out from the two inputs when needed, saving grad. */
static phx_tensor *loss_finish(const char *fn, const phx_tensor *a, const phx_tensor *b, phx_tensor *out,
                               phx_tensor *grad)
{
    const phx_tensor *in[2] = {a, b};
    px_node *n;
    out = px_op_finish(fn, loss_bwd, 2, in, out, &n);
    if (out && n) px_node_save(n, grad);
    phx_tensor_free(grad);
    return out;
}

phx_tensor *phx_cross_entropy(const phx_tensor *logits, const phx_tensor *target)
{
    logits = px_autocast_f32(logits);
    const char *fn = "cross_entropy";
    const phx_tensor *in[2] = {logits, target};
    if (px_op_inputs(fn, 2, in, (const char *const[]){"logits", "target"}) ||
        px_op_same(fn, "logits", logits, "target", target, false) || px_op_float(fn, "logits", logits))
        return NULL;
    char sl[64], st_[64];
    if (logits->ndim != 2 || logits->shape[1] < 1 || logits->shape[0] < 1 || target->dtype != PHX_I64 ||
        target->ndim != 1 || target->shape[0] != logits->shape[0]) {
        phx_error(PHX_EINVAL,
                  "cross_entropy: logits %s and target %s %s, expected logits (n, classes) with n >= 1 "
                  "and an i64 target (n)",
                  phx_tensor_shape_str(logits, sl, sizeof sl), phx_dtype_name(target->dtype),
                  phx_tensor_shape_str(target, st_, sizeof st_));
        return NULL;
    }
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, logits, cross_entropy);
    if (!k) return NULL;
    phx_device dev = logits->storage->device;
    phx_tensor *out = px_op_new(fn, PHX_F32, 0, NULL, dev);
    phx_tensor *grad = out ? px_op_new(fn, PHX_F32, 2, logits->shape, dev) : NULL;
    int64_t bad = -1;
    phx_status st = grad
        ? k->cross_entropy(dev.index, logits->shape[0], logits->shape[1], px_tensor_ptr(logits), logits->dtype,
                           px_tensor_ptr(target), 0, px_tensor_ptr(out), px_tensor_ptr(grad), &bad)
        : PHX_ENOMEM;
    if (bad >= 0) {
        double lab = 0;
        (void)phx_tensor_get(target, bad, &lab);
        st = phx_error(PHX_EINVAL, "cross_entropy: target %lld of row %lld is outside [0, %lld)", (long long)lab,
                       (long long)bad, (long long)logits->shape[1]);
    }
    if (st) {
        phx_tensor_free(out);
        phx_tensor_free(grad);
        return NULL;
    }
    return loss_finish(fn, logits, target, out, grad);
}

phx_tensor *phx_mse_loss(const phx_tensor *y, const phx_tensor *target)
{
    y = px_autocast_f32(y);
    target = px_autocast_f32(target);
    const char *fn = "mse_loss";
    const phx_tensor *in[2] = {y, target};
    if (px_op_inputs(fn, 2, in, (const char *const[]){"y", "target"}) ||
        px_op_same(fn, "y", y, "target", target, false) || px_op_float(fn, "y", y) || px_op_float(fn, "target", target))
        return NULL;
    if (!phx_tensor_same_shape(y, target) || y->numel == 0) {
        char sa[64], sb[64];
        phx_error(PHX_EINVAL, "mse_loss: y %s and target %s, expected one non-empty shape",
                  phx_tensor_shape_str(y, sa, sizeof sa), phx_tensor_shape_str(target, sb, sizeof sb));
        return NULL;
    }
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, y, mse);
    if (!k) return NULL;
    phx_device dev = y->storage->device;
    phx_tensor *t32 = NULL;
    const phx_tensor *t = target;
    if (target->dtype != PHX_F32) { /* the kernel reads an f32 target */
        t32 = px_op_new(fn, PHX_F32, target->ndim, target->shape, dev);
        if (!t32 || phx_tensor_cast(t32, target) != PHX_OK) {
            phx_tensor_free(t32);
            return NULL;
        }
        t = t32;
    }
    phx_tensor *out = px_op_new(fn, PHX_F32, 0, NULL, dev);
    phx_tensor *grad = out ? px_op_new(fn, PHX_F32, y->ndim, y->shape, dev) : NULL;
    phx_status st = grad ? k->mse(dev.index, y->numel, px_tensor_ptr(y), y->dtype, px_tensor_ptr(t), 1,
                                  px_tensor_ptr(out), px_tensor_ptr(grad))
                         : PHX_ENOMEM;
    phx_tensor_free(t32);
    if (st) {
        phx_tensor_free(out);
        phx_tensor_free(grad);
        return NULL;
    }
    return loss_finish(fn, y, target, out, grad);
}
