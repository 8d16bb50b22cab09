/* Losses as tensor operations: one node each, with the fused kernels of
 * the built-in losses (cross_entropy and mse slots), which give the loss
 * and its gradient in one pass; backward scales the saved gradient by the
 * incoming one. Results are 0-dim f32 tensors. cross_entropy_ex (weight,
 * ignore_index, reduction, label_smoothing) composes recorded operations
 * instead, so autograd differentiates it, and falls back to the fused
 * node when none of its options is in play. */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include "src/base/abi.h"
#include "src/base/util.h"
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

/* ---- cross_entropy_ex ---- */

/* A scope-owned tensor of shape on dev holding host's values (dt). */
static phx_tensor *from_host(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev,
                             const void *host)
{
    phx_tensor *t = px_op_new(fn, dt, ndim, shape, dev);
    if (t && phx_tensor_from_host(t, host) != PHX_OK) {
        phx_tensor_free(t);
        return NULL;
    }
    return t ? px_scope_own(t) : NULL;
}

/* Where position i of target is, for a message: " of row i" (1-D), " at
 * (i0, i1, ...)" (K-dim) or "" (0-dim). */
static const char *position_str(const phx_tensor *target, int64_t i, char *buf, size_t len)
{
    int64_t idx[PHX_MAX_DIMS];
    for (int d = target->ndim - 1; d >= 0; d--) idx[d] = i % target->shape[d], i /= target->shape[d];
    size_t at = (size_t)snprintf(buf, len, "%s", target->ndim == 1 ? " of row " : target->ndim ? " at (" : "");
    for (int d = 0; d < target->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (target->ndim > 1 && at < len) snprintf(buf + at, len - at, ")");
    return buf;
}

/* The arguments' checks, in the order the header lists them; cd is the
 * classes' dim. */
static phx_status ce_check(const char *fn, const phx_tensor *logits, const phx_tensor *target,
                           const phx_cross_entropy_opts *o, int *cd)
{
    const phx_tensor *in[2] = {logits, target};
    phx_status st;
    if ((st = px_op_inputs(fn, 2, in, (const char *const[]){"logits", "target"})) ||
        (st = px_op_same(fn, "logits", logits, "target", target, false)) || (st = px_op_float(fn, "logits", logits)))
        return st;
    char sl[64], st_[64], sw[64];
    *cd = logits->ndim == 1 ? 0 : 1;
    bool fits = logits->ndim >= 1 && target->ndim == logits->ndim - 1 && logits->numel > 0;
    for (int d = 0, j = 0; fits && d < logits->ndim; d++)
        if (d != *cd) fits = target->shape[j++] == logits->shape[d];
    if (target->dtype != PHX_I64 || !fits)
        return phx_error(PHX_EINVAL,
                         "%s: logits %s and target %s %s, expected logits (n, classes, d1, ...) or (classes), "
                         "non-empty, and an i64 target of their shape without the classes' dim, "
                         "(n, d1, ...) or () (class indices: probability targets are not supported)",
                         fn, phx_tensor_shape_str(logits, sl, sizeof sl), phx_dtype_name(target->dtype),
                         phx_tensor_shape_str(target, st_, sizeof st_));
    if (o->reduction != PHX_REDUCE_MEAN && o->reduction != PHX_REDUCE_SUM && o->reduction != PHX_REDUCE_NONE)
        return phx_error(PHX_EINVAL,
                         "%s: reduction %d, expected PHX_REDUCE_MEAN (0), PHX_REDUCE_SUM (1) or PHX_REDUCE_NONE (2)",
                         fn, (int)o->reduction);
    if (!(o->label_smoothing >= 0 && o->label_smoothing <= 1))
        return phx_error(PHX_EINVAL, "%s: label_smoothing %g, expected a value in [0, 1]", fn, o->label_smoothing);
    const phx_tensor *w = o->weight;
    int64_t classes = logits->shape[*cd];
    if (w && (w->dtype != PHX_F32 || w->ndim != 1 || w->shape[0] != classes))
        return phx_error(PHX_EINVAL, "%s: weight %s %s, expected f32 (%lld,): one weight per class of logits %s", fn,
                         phx_dtype_name(w->dtype), phx_tensor_shape_str(w, sw, sizeof sw), (long long)classes,
                         phx_tensor_shape_str(logits, sl, sizeof sl));
    if (w && (st = px_op_same(fn, "logits", logits, "weight", w, false))) return st;
    if (w && phx_tensor_requires_grad(w) && phx_grad_enabled())
        return phx_error(PHX_EINVAL,
                         "%s: weight requires a gradient, expected a constant: cross entropy is not "
                         "differentiable in its class weights (detach it, or turn grad mode off)",
                         fn);
    return PHX_OK;
}

phx_tensor *phx_cross_entropy_ex(const phx_tensor *logits, const phx_tensor *target, const phx_cross_entropy_opts *opts)
{
    const char *fn = "cross_entropy_ex";
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    int cd;
    if (px_abi_in(&o, sizeof o, opts, "phx_cross_entropy_ex", "phx_cross_entropy_opts",
                  "PHX_CROSS_ENTROPY_OPTS_INIT") ||
        ce_check(fn, logits = px_autocast_f32(logits), target, &o, &cd))
        return NULL;
    phx_device dev = logits->storage->device;
    int64_t classes = logits->shape[cd], m = target->numel;
    int64_t *t = px_malloc(sizeof *t * (size_t)m), ignored = 0;
    float *w = o.weight ? px_malloc(sizeof *w * (size_t)classes) : NULL, *a = px_malloc(sizeof *a * (size_t)m),
          *b = px_malloc(sizeof *b * (size_t)m), *keep = px_malloc(sizeof *keep * (size_t)m);
    float *ws = o.weight ? px_malloc(sizeof *ws * (size_t)classes) : NULL; /* w / den */
    phx_tensor *out = NULL;
    phx_scope *s = NULL;
    if (!t || !a || !b || !keep || (o.weight && (!w || !ws))) {
        phx_error(PHX_ENOMEM, "%s: no memory for %lld targets", fn, (long long)m);
        goto done;
    }
    if (phx_tensor_to_host(target, t) || (w && phx_tensor_to_host(o.weight, w))) goto done;
    double den = 0; /* the mean's divisor: sum of w[t_i] over the kept positions */
    for (int64_t i = 0; i < m; i++) {
        if (t[i] == o.ignore_index) {
            ignored++;
            continue;
        }
        if (t[i] < 0 || t[i] >= classes) {
            char pos[96], sl[64];
            phx_error(PHX_EINVAL,
                      "%s: target %lld%s is outside [0, %lld), the classes of logits %s, and is not "
                      "ignore_index %lld",
                      fn, (long long)t[i], position_str(target, i, pos, sizeof pos), (long long)classes,
                      phx_tensor_shape_str(logits, sl, sizeof sl), (long long)o.ignore_index);
            goto done;
        }
        den += w ? w[t[i]] : 1;
    }
    double sm = o.label_smoothing;
    if (o.reduction == PHX_REDUCE_MEAN && !w && sm == 0 && !ignored && logits->ndim == 2) {
        out = phx_cross_entropy(logits, target);
        goto done;
    }
    /* l_i = a_i log p_i[t_i] + b_i sum_c w[c] log p_i[c], a and b carrying
     * the minus, the weight of the target, 1 - s and s / C. The mean's
     * 1 / den goes into the weights in double (w / den stays finite for
     * denormal weights, where 1 / den alone would overflow f32). A den of
     * 0 (every target ignored, or kept weights summing to 0) divides the
     * class and smoothing sums by 0 each, then weighs them by 1 - s and s,
     * as PyTorch does: its 0/0, +-inf and inf - inf. */
    bool divide = o.reduction == PHX_REDUCE_MEAN && den == 0;
    double per = o.reduction == PHX_REDUCE_MEAN && !divide ? den : 1.0; /* what the mean divides by */
    double fa = divide ? 1 : 1 - sm, fb = divide ? 1 : sm; /* the weights of the two parts, before the sum */
    for (int64_t i = 0; i < m; i++) {
        bool kept = t[i] != o.ignore_index;
        keep[i] = kept;
        a[i] = kept ? (float)(w ? -fa * (w[t[i]] / per) : -fa / per) : 0;
        b[i] = kept ? (float)(w ? -fb / (double)classes : -fb / (double)classes / per) : 0;
        if (!kept) t[i] = 0; /* any class: its pick is multiplied by 0 and masked */
    }
    for (int64_t c = 0; w && c < classes; c++) ws[c] = (float)(w[c] / per);
    if (!(s = phx_scope_begin())) goto done;
    const phx_tensor *x = logits->dtype == PHX_F32 ? logits : phx_to_dtype(logits, PHX_F32);
    phx_tensor *lp = phx_log_softmax(x, cd);
    phx_tensor *idx = phx_unsqueeze(from_host(fn, PHX_I64, target->ndim, target->shape, dev, t), cd);
    phx_tensor *lc =
        phx_mul(phx_squeeze(phx_gather(lp, cd, idx), cd), from_host(fn, PHX_F32, target->ndim, target->shape, dev, a));
    phx_tensor *ls = NULL;
    if (sm > 0) {
        phx_tensor *wl = lp;
        if (w) { /* weight as (1, classes, 1, ...) against lp */
            int64_t wshape[PHX_MAX_DIMS];
            for (int d = 0; d < logits->ndim; d++) wshape[d] = d == cd ? classes : 1;
            wl = phx_mul(lp, from_host(fn, PHX_F32, logits->ndim, wshape, dev, ws));
        }
        ls = phx_mul(phx_sum(wl, 1, &cd, false), from_host(fn, PHX_F32, target->ndim, target->shape, dev, b));
    }
    phx_tensor *zero = ignored || divide ? px_scalar_new(fn, 0, PHX_F32, dev) : NULL;
    if (ignored) { /* exact zeros there, whatever log p holds (-inf of a masked class) */
        phx_tensor *kt = from_host(fn, PHX_F32, target->ndim, target->shape, dev, keep);
        lc = phx_where(kt, lc, zero);
        if (ls) ls = phx_where(kt, ls, zero);
    }
    if (divide) {
        out = phx_mul_scalar(phx_div(phx_sum(lc, 0, NULL, false), zero), 1 - sm);
        if (ls) out = phx_add(out, phx_mul_scalar(phx_div(phx_sum(ls, 0, NULL, false), zero), sm));
    } else {
        phx_tensor *l = ls ? phx_add(lc, ls) : lc;
        out = o.reduction == PHX_REDUCE_NONE ? l : phx_sum(l, 0, NULL, false);
    }
    out = px_scope_keep(s, out);
done:
    px_free(t), px_free(w), px_free(ws), px_free(a), px_free(b), px_free(keep);
    return out;
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
