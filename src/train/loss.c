/* Losses: mse (mean/sum), cross_entropy and nll (mean). The prediction may
 * be f32, f16 or bf16; the loss and its gradient are computed in f32 by the
 * device's kernels. The loss object owns its gradient buffer. */
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/loss.h"

struct phx_loss {
    phx_loss_kind kind;
    phx_reduction red;
    px_buf grad; /* f32, shape of y */
    px_buf value; /* (1) f32 on y's device */
    bool have;
};

static const char *loss_name(phx_loss_kind k)
{
    return k == PHX_LOSS_MSE ? "mse" : k == PHX_LOSS_CROSS_ENTROPY ? "cross_entropy" : "nll";
}

phx_loss *phx_loss_new(phx_loss_kind kind, phx_reduction red)
{
    if (kind != PHX_LOSS_MSE && kind != PHX_LOSS_CROSS_ENTROPY && kind != PHX_LOSS_NLL) {
        phx_error(PHX_EINVAL, "phx_loss_new: unknown loss kind %d", (int)kind);
        return NULL;
    }
    if (red == PHX_REDUCE_NONE) {
        phx_error(PHX_EINVAL, "phx_loss_new: reduction none gives a loss per position: a loss object gives one value%s",
                  kind == PHX_LOSS_CROSS_ENTROPY ? " (use phx_cross_entropy_ex)" : "");
        return NULL;
    }
    if (red != PHX_REDUCE_MEAN && red != PHX_REDUCE_SUM) {
        phx_error(PHX_EINVAL, "phx_loss_new: unknown reduction %d", (int)red);
        return NULL;
    }
    if (kind != PHX_LOSS_MSE && red != PHX_REDUCE_MEAN) {
        phx_error(PHX_EINVAL, "phx_loss_new: %s supports the mean reduction only", loss_name(kind));
        return NULL;
    }
    phx_loss *l = px_calloc(1, sizeof *l);
    if (l) {
        l->kind = kind;
        l->red = red;
    }
    return l;
}

void phx_loss_free(phx_loss *l)
{
    if (!l) return;
    px_buf_free(&l->grad);
    px_buf_free(&l->value);
    px_free(l);
}

phx_tensor *phx_loss_grad(const phx_loss *l)
{
    return l && l->have ? l->grad.view : NULL;
}

static phx_status check_args(const phx_loss *l, const phx_tensor *y, const phx_tensor *t)
{
    const char *who = loss_name(l->kind);
    char a[64], b[64];
    if (!y || !t) return phx_error(PHX_EINVAL, "phx_loss_forward(%s): %s is NULL", who, y ? "target" : "prediction");
    if (px_tensor_live("phx_loss_forward", "the prediction", y) != PHX_OK ||
        px_tensor_live("phx_loss_forward", "the target", t) != PHX_OK)
        return PHX_ESTATE;
    if (!phx_dtype_is_float(y->dtype))
        return phx_error(PHX_EINVAL, "phx_loss_forward(%s): prediction has dtype %s, expected a float type", who,
                         phx_dtype_name(y->dtype));
    if (!phx_device_equal(y->storage->device, t->storage->device))
        return phx_error(PHX_EINVAL, "phx_loss_forward(%s): prediction and target are on different devices", who);
    if (l->kind == PHX_LOSS_MSE) {
        if (t->dtype != PHX_F32 || !phx_tensor_same_shape(y, t))
            return phx_error(
                PHX_EINVAL, "phx_loss_forward(mse): prediction is %s, target is %s %s; expected f32 of the same shape",
                phx_tensor_shape_str(y, a, sizeof a), phx_dtype_name(t->dtype), phx_tensor_shape_str(t, b, sizeof b));
        return PHX_OK;
    }
    if (y->ndim < 2 || y->shape[y->ndim - 1] < 1)
        return phx_error(PHX_EINVAL,
                         "phx_loss_forward(%s): prediction is %s, expected (N, C) or (N, ..., C) with C >= 1", who,
                         phx_tensor_shape_str(y, a, sizeof a));
    /* (N, ..., C) logits take (N, ...) labels: rows are every position */
    bool fits = t->dtype == PHX_I64 && t->ndim == y->ndim - 1;
    for (int i = 0; fits && i < t->ndim; i++) fits = t->shape[i] == y->shape[i];
    if (!fits) {
        int64_t want[PHX_MAX_DIMS];
        for (int i = 0; i < y->ndim - 1; i++) want[i] = y->shape[i];
        char c[64];
        return phx_error(PHX_EINVAL, "phx_loss_forward(%s): target is %s %s, expected i64 %s labels", who,
                         phx_dtype_name(t->dtype), phx_tensor_shape_str(t, b, sizeof b),
                         px_shape_str(y->ndim - 1, want, c, sizeof c));
    }
    return PHX_OK;
}

phx_status phx_loss_forward(phx_loss *l, const phx_tensor *y, const phx_tensor *target, float *loss)
{
    if (!l || !loss) return phx_error(PHX_EINVAL, "phx_loss_forward: %s is NULL", l ? "loss pointer" : "loss object");
    phx_status st = check_args(l, y, target);
    if (st != PHX_OK) return st;
    if (y->numel == 0) return phx_error(PHX_EINVAL, "phx_loss_forward(%s): empty prediction", loss_name(l->kind));
    phx_device dev = y->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    phx_tensor *g, *v;
    int64_t one = 1;
    if ((st = px_buf_get(&l->grad, PHX_F32, y->ndim, y->shape, dev, &g)) != PHX_OK ||
        (st = px_buf_get(&l->value, PHX_F32, 1, &one, dev, &v)) != PHX_OK)
        return st;
    if (l->kind == PHX_LOSS_MSE) {
        st = k->mse(dev.index, y->numel, px_tensor_ptr(y), y->dtype, px_tensor_ptr(target), l->red == PHX_REDUCE_MEAN,
                    px_tensor_ptr(v), px_tensor_ptr(g));
    } else {
        int64_t bad = -1;
        int64_t classes = y->shape[y->ndim - 1];
        st = k->cross_entropy(dev.index, y->numel / classes, classes, px_tensor_ptr(y), y->dtype, px_tensor_ptr(target),
                              l->kind == PHX_LOSS_NLL, px_tensor_ptr(v), px_tensor_ptr(g), &bad);
        if (bad >= 0) { /* the kernel refused: say it in the loss's words */
            double lab = 0;
            (void)phx_tensor_get(target, bad, &lab);
            l->have = false;
            return phx_error(PHX_EINVAL, "phx_loss_forward(%s): label %lld of row %lld is outside [0, %lld)",
                             loss_name(l->kind), (long long)lab, (long long)bad, (long long)classes);
        }
    }
    if (st == PHX_OK) st = phx_tensor_to_host(v, loss);
    l->have = st == PHX_OK;
    return st;
}
