/* Reductions over dims (sum, mean, var, logsumexp, max/min, argmax),
 * softmax and log_softmax over any dim, and px_sum_to (the gradient of a
 * broadcast operand). Each runs the reduce_dim/softmax_dim kernels on the
 * (outer, n, inner) view of the tensor around the reduced dims; adjacent
 * reduced dims are reduced in one call. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include "src/ops/math-impl.h"

phx_status px_dims_mask(const char *fn, const phx_tensor *t, int ndim, const int *dims, unsigned *mask)
{
    unsigned m = 0;
    if (ndim < 0 || (ndim > 0 && !dims))
        return phx_error(PHX_EINVAL, "%s: %d dims given (dims %s), expected >= 0", fn, ndim, dims ? "set" : "NULL");
    for (int i = 0; i < ndim; i++) { /* a 0-dim t takes dim 0 or -1, as PyTorch: its one element */
        int d;
        if (px_op_dim(fn, t, t->ndim ? t->ndim : 1, dims[i], &d)) return PHX_EINVAL;
        if (m & (1u << d)) return phx_error(PHX_EINVAL, "%s: dim %d appears twice in the dims", fn, dims[i]);
        m |= 1u << d;
    }
    *mask = t->ndim == 0 ? 0 : ndim == 0 ? (1u << t->ndim) - 1 : m;
    return PHX_OK;
}

int px_reduced_shape(const phx_tensor *t, unsigned mask, bool keepdim, int64_t *shape)
{
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (!(mask & (1u << i)))
            shape[nd++] = t->shape[i];
        else if (keepdim)
            shape[nd++] = 1;
    }
    return nd;
}

static int64_t prod(const int64_t *s, int lo, int hi)
{
    int64_t p = 1;
    for (int i = lo; i < hi; i++) p *= s[i];
    return p;
}

phx_tensor *px_reduce_raw(const char *fn, int op, const phx_tensor *t, unsigned mask, bool keepdim)
{
    if (!t) return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, reduce_dim);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    int64_t cs[PHX_MAX_DIMS], fs[PHX_MAX_DIMS];
    int nd = t->ndim, fnd = px_reduced_shape(t, mask, keepdim, fs);
    for (int i = 0; i < nd; i++) cs[i] = t->shape[i];
    const phx_tensor *cur = t;
    phx_tensor *tmp = NULL;
    int d = 0;
    do { /* one kernel call per run of adjacent reduced dims (at least one call) */
        while (d < nd && !(mask & (1u << d))) d++;
        int e = d;
        while (e < nd && (mask & (1u << e))) e++;
        int64_t outer = prod(cs, 0, d), n = prod(cs, d, e), inner = prod(cs, e, nd);
        for (int i = d; i < e; i++) cs[i] = 1;
        int more = 0;
        for (int i = e; i < nd; i++) more |= (mask >> i) & 1;
        phx_tensor *out = more ? px_op_new(fn, t->dtype, nd, cs, dev) : px_op_new(fn, t->dtype, fnd, fs, dev);
        if (!out ||
            k->reduce_dim(dev.index, op, t->dtype, outer, n, inner, px_tensor_ptr(cur), px_tensor_ptr(out), NULL) !=
                PHX_OK) {
            phx_tensor_free(out);
            phx_tensor_free(tmp);
            return NULL;
        }
        phx_tensor_free(tmp);
        cur = tmp = out;
        d = e;
        if (!more) break;
    } while (1);
    return px_scope_own(tmp);
}

phx_tensor *px_sum_to(const phx_tensor *g, int ndim, const int64_t *shape)
{
    if (!g) return NULL;
    int lead = g->ndim - ndim;
    bool same = lead == 0;
    for (int i = 0; same && i < ndim; i++) same = g->shape[i] == shape[i];
    if (same) return px_scope_own(phx_tensor_retain((phx_tensor *)g));
    if (lead < 0) {
        char s[64];
        phx_error(PHX_EINTERNAL, "sum_to: gradient %s has fewer dims than its operand (%d)",
                  phx_tensor_shape_str(g, s, sizeof s), ndim);
        return NULL;
    }
    unsigned mask = lead ? (1u << lead) - 1 : 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 1 && g->shape[lead + i] != 1) mask |= 1u << (lead + i);
    phx_tensor *s = mask ? px_reduce_raw("sum_to", PHX_RED_SUM, g, mask, true) : (phx_tensor *)g;
    return px_view_as(s, ndim, shape);
}

/* ---- sum, mean, logsumexp ---- */

typedef struct red_ctx {
    unsigned mask;
    int op;
    int64_t count;
} red_ctx;

/* g viewed with the reduced dims kept (size 1), as the input's rank. */
static phx_tensor *g_keep(px_node *n, const phx_tensor *g, unsigned mask)
{
    int64_t ks[PHX_MAX_DIMS];
    const int64_t *in = px_node_in_shape(n, 0);
    int nd = px_node_in_ndim(n, 0);
    for (int i = 0; i < nd; i++) ks[i] = (mask & (1u << i)) ? 1 : in[i];
    return px_view_as(g, nd, ks);
}

static phx_status red_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const red_ctx *c = px_node_ctx(n);
    int nd = px_node_in_ndim(n, 0);
    const int64_t *in = px_node_in_shape(n, 0);
    phx_tensor *gk = g_keep(n, g, c->mask);
    if (c->op == PHX_RED_SUM) {
        in_grads[0] = px_expand_raw(px_node_name(n), gk, nd, in);
    } else if (c->op == PHX_RED_MEAN) {
        in_grads[0] = px_expand_raw(px_node_name(n), phx_div_scalar(gk, (double)c->count), nd, in);
    } else { /* logsumexp: g exp(x - out) */
        const phx_tensor *x = px_node_saved(n, 0), *y = px_node_saved(n, 1);
        if (!x || !y) return PHX_ESTATE;
        in_grads[0] = phx_mul(phx_exp(phx_sub(x, g_keep(n, y, c->mask))), gk);
    }
    return in_grads[0] ? PHX_OK : PHX_EINVAL;
}

static phx_tensor *reduce(const char *fn, int op, const phx_tensor *t, int ndim, const int *dims, bool keepdim)
{
    const phx_tensor *in[1] = {t};
    unsigned mask;
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t) ||
        px_dims_mask(fn, t, ndim, dims, &mask))
        return NULL;
    phx_tensor *y = px_reduce_raw(fn, op, t, mask, keepdim);
    if (!y) return NULL;
    if (!px_grad_needed(1, in)) {
        px_mark_nondiff(fn, 1, in, y); /* carries a cut path's name */
        return y;
    }
    px_node *n;
    if (px_record(fn, red_bwd, 1, in, y, &n) != PHX_OK) return NULL;
    red_ctx *c = px_node_ctx(n);
    c->mask = mask, c->op = op, c->count = t->numel / (y->numel ? y->numel : 1);
    if (op == PHX_RED_LOGSUMEXP) {
        px_node_save(n, t);
        px_node_save_out(n, y);
    }
    return y;
}

phx_tensor *phx_sum(const phx_tensor *t, int ndim, const int *dims, bool keepdim)
{
    t = px_autocast_f32(t);
    return reduce("sum", PHX_RED_SUM, t, ndim, dims, keepdim);
}
phx_tensor *phx_mean(const phx_tensor *t, int ndim, const int *dims, bool keepdim)
{
    t = px_autocast_f32(t);
    return reduce("mean", PHX_RED_MEAN, t, ndim, dims, keepdim);
}
phx_tensor *phx_logsumexp(const phx_tensor *t, int ndim, const int *dims, bool keepdim)
{
    t = px_autocast_f32(t);
    return reduce("logsumexp", PHX_RED_LOGSUMEXP, t, ndim, dims, keepdim);
}

/* sum((t - mean(t))^2) / max(0, N - correction), from recorded
 * operations: a correction of N or more divides by 0, as PyTorch. */
phx_tensor *phx_var(const phx_tensor *t, int ndim, const int *dims, int64_t correction, bool keepdim)
{
    t = px_autocast_f32(t);
    const char *fn = "var";
    const phx_tensor *in[1] = {t};
    unsigned mask;
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t) ||
        px_dims_mask(fn, t, ndim, dims, &mask))
        return NULL;
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++)
        if (mask & (1u << i)) count *= t->shape[i];
    double denom = (double)(count - correction);
    phx_scope *sc = phx_scope_begin(); /* the intermediates go with it (or stay with the graph) */
    if (!sc) return NULL;
    phx_tensor *d = phx_sub(t, phx_mean(t, ndim, dims, true));
    phx_tensor *s = phx_sum(phx_mul(d, d), ndim, dims, keepdim);
    s = s ? phx_mul_scalar(s, denom > 0 ? 1.0 / denom : INFINITY) : NULL;
    return px_scope_keep(sc, s);
}

/* ---- max/min along one dim, argmax ---- */

typedef struct sel_ctx {
    int dim;
} sel_ctx;

/* The values (and i64 indices) of max/min along dim, not recorded. */
static phx_tensor *select_raw(const char *fn, int op, const phx_tensor *t, int dim, bool keepdim, phx_tensor **idx,
                              int *dout)
{
    const phx_tensor *in[1] = {t};
    int d;
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t) ||
        px_op_dim(fn, t, t->ndim, dim, &d))
        return NULL;
    if (t->shape[d] == 0) {
        char s[64];
        phx_error(PHX_EINVAL, "%s: dim %d of %s is empty, expected at least one element", fn, dim,
                  phx_tensor_shape_str(t, s, sizeof s));
        return NULL;
    }
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, reduce_dim);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    int64_t fs[PHX_MAX_DIMS];
    int fnd = px_reduced_shape(t, 1u << d, keepdim, fs);
    phx_tensor *y = px_op_new(fn, t->dtype, fnd, fs, dev), *ix = y ? px_op_new(fn, PHX_I64, fnd, fs, dev) : NULL;
    if (!ix ||
        k->reduce_dim(dev.index, op, t->dtype, prod(t->shape, 0, d), t->shape[d], prod(t->shape, d + 1, t->ndim),
                      px_tensor_ptr(t), px_tensor_ptr(y), px_tensor_ptr(ix)) != PHX_OK) {
        phx_tensor_free(y);
        phx_tensor_free(ix);
        return NULL;
    }
    *idx = px_scope_own(ix);
    *dout = d;
    return px_scope_own(y);
}

/* The gradient goes to the selected positions: mask = (position along
 * dim == index), dx = mask g. */
static phx_status select_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const sel_ctx *c = px_node_ctx(n);
    const phx_tensor *ix = px_node_saved(n, 0);
    if (!ix) return PHX_ESTATE;
    const char *fn = px_node_name(n);
    int nd = px_node_in_ndim(n, 0);
    const int64_t *in = px_node_in_shape(n, 0);
    phx_device dev = g->storage->device;
    int64_t ps[PHX_MAX_DIMS];
    for (int i = 0; i < nd; i++) ps[i] = i == c->dim ? in[i] : 1;
    phx_tensor *pos = px_op_new(fn, PHX_F32, nd, ps, dev);
    bool cpu = dev.kind == PHX_DEVICE_CPU; /* written in place; a staging buffer elsewhere */
    float *host = !pos ? NULL
        : cpu          ? px_tensor_ptr(pos)
                       : malloc(sizeof(float) * (size_t)(in[c->dim] ? in[c->dim] : 1));
    phx_status st = pos && host ? PHX_OK : PHX_ENOMEM;
    for (int64_t i = 0; !st && i < in[c->dim]; i++) host[i] = (float)i;
    if (!st && !cpu) st = phx_tensor_from_host(pos, host);
    if (!cpu) free(host);
    px_scope_own(pos);
    if (st) return st;
    phx_tensor *ixk = g_keep(n, ix, 1u << c->dim);
    phx_tensor *ixf = ixk ? px_op_new(fn, PHX_F32, ixk->ndim, ixk->shape, dev) : NULL;
    if (!ixf || phx_tensor_cast(ixf, ixk) != PHX_OK) {
        phx_tensor_free(ixf);
        return PHX_EINVAL;
    }
    phx_tensor *mask = phx_eq(pos, px_scope_own(ixf));
    if (mask && g->dtype != PHX_F32) {
        phx_tensor *mc = px_op_new(fn, g->dtype, mask->ndim, mask->shape, dev);
        if (!mc || phx_tensor_cast(mc, mask) != PHX_OK) {
            phx_tensor_free(mc);
            return PHX_EINVAL;
        }
        mask = px_scope_own(mc);
    }
    in_grads[0] = phx_mul(mask, g_keep(n, g, 1u << c->dim));
    return in_grads[0] ? PHX_OK : PHX_EINVAL;
}

/* A 0-dim t as the (1,) it holds (a recorded reshape), for the ops along
 * one dim: PyTorch takes dim 0 or -1 there and gives a 0-dim result.
 * *is_scalar: 0 when t is not 0-dim (NULL returned), 1 when it is and dim
 * is one of those, -1 (NULL, error set) otherwise. */
static phx_tensor *scalar_as_1d(const char *fn, const phx_tensor *t, int dim, int *is_scalar)
{
    int d;
    *is_scalar = 0;
    if (!t || t->ndim != 0) return NULL;
    if (px_op_dim(fn, t, 1, dim, &d)) {
        *is_scalar = -1;
        return NULL;
    }
    int64_t one = 1;
    phx_tensor *v = phx_reshape(t, 1, &one);
    *is_scalar = v ? 1 : -1;
    return v;
}

static phx_tensor *select_op(const char *fn, int op, const phx_tensor *t, int dim, bool keepdim, phx_tensor **indices)
{
    phx_tensor *ix = NULL;
    int d = 0;
    if (indices) *indices = NULL;
    if (t && t->ndim == 0) { /* the scalar itself, index 0 */
        phx_scope *s = phx_scope_begin();
        if (!s) return NULL;
        int is_scalar;
        phx_tensor *v = scalar_as_1d(fn, t, dim, &is_scalar);
        phx_tensor *y = v ? select_op(fn, op, v, 0, false, indices) : NULL;
        if (y && indices) phx_tensor_retain(*indices);
        y = px_scope_keep(s, y);
        if (y && indices) px_scope_own(*indices);
        return y;
    }
    phx_scope *s = phx_scope_begin(); /* ix goes with it unless wanted or saved */
    if (!s) return NULL;
    phx_tensor *y = select_raw(fn, op, t, dim, keepdim, &ix, &d);
    const phx_tensor *in[1] = {t};
    px_node *n = NULL;
    if (y && px_grad_needed(1, in)) {
        if (px_record(fn, select_bwd, 1, in, y, &n) != PHX_OK) {
            phx_scope_end(s);
            return NULL;
        }
        ((sel_ctx *)px_node_ctx(n))->dim = d;
        px_node_save(n, ix);
    }
    if (y && indices) *indices = phx_tensor_retain(ix);
    y = px_scope_keep(s, y);
    if (indices && *indices) px_scope_own(*indices);
    return y;
}

phx_tensor *phx_max_dim(const phx_tensor *t, int dim, bool keepdim, phx_tensor **indices)
{
    return select_op("max_dim", PHX_RED_MAX, t, dim, keepdim, indices);
}
phx_tensor *phx_min_dim(const phx_tensor *t, int dim, bool keepdim, phx_tensor **indices)
{
    return select_op("min_dim", PHX_RED_MIN, t, dim, keepdim, indices);
}
phx_tensor *phx_argmax(const phx_tensor *t, int dim, bool keepdim)
{
    phx_tensor *ix = NULL;
    int d, is_scalar;
    phx_scope *s = phx_scope_begin(); /* the values go with it */
    if (!s) return NULL;
    phx_tensor *v = scalar_as_1d("argmax", t, dim, &is_scalar); /* a 0-dim t: index 0 */
    if (is_scalar < 0 ||
        !select_raw("argmax", PHX_RED_MAX, is_scalar ? v : t, is_scalar ? 0 : dim, is_scalar ? false : keepdim, &ix,
                    &d))
        ix = NULL;
    else if (ix)
        px_mark_nondiff("argmax", 1, &t, ix);
    return px_scope_keep(s, ix);
}

/* ---- softmax, log_softmax ---- */

typedef struct sm_ctx {
    int dim, log;
} sm_ctx;

static phx_status softmax_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const sm_ctx *c = px_node_ctx(n);
    const phx_tensor *y = px_node_saved(n, 0);
    if (!y) return PHX_ESTATE;
    const char *fn = px_node_name(n);
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, y, softmax_dim_backward);
    if (!k) return PHX_EUNSUPPORTED;
    phx_device dev = y->storage->device;
    phx_tensor *dx = px_op_new(fn, y->dtype, y->ndim, y->shape, dev);
    if (!dx) return PHX_ENOMEM;
    phx_status st = k->softmax_dim_backward(dev.index, c->log, y->dtype, prod(y->shape, 0, c->dim), y->shape[c->dim],
                                            prod(y->shape, c->dim + 1, y->ndim), px_tensor_ptr(y), px_tensor_ptr(g),
                                            px_tensor_ptr(dx));
    if (st) {
        phx_tensor_free(dx);
        return st;
    }
    in_grads[0] = px_scope_own(dx);
    return PHX_OK;
}

static phx_tensor *softmax(const char *fn, int log, const phx_tensor *t, int dim)
{
    if (t && t->ndim == 0) { /* over its one element: 1 (log: 0), gradient 0 */
        phx_scope *s = phx_scope_begin();
        if (!s) return NULL;
        int is_scalar;
        phx_tensor *v = scalar_as_1d(fn, t, dim, &is_scalar);
        return px_scope_keep(s, v ? phx_reshape(softmax(fn, log, v, 0), 0, NULL) : NULL);
    }
    const phx_tensor *in[1] = {t};
    int d;
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"}) || px_op_float(fn, "t", t) ||
        px_op_dim(fn, t, t->ndim, dim, &d))
        return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, softmax_dim);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    phx_tensor *y = px_op_new(fn, t->dtype, t->ndim, t->shape, dev);
    if (!y ||
        k->softmax_dim(dev.index, log, t->dtype, prod(t->shape, 0, d), t->shape[d], prod(t->shape, d + 1, t->ndim),
                       px_tensor_ptr(t), px_tensor_ptr(y)) != PHX_OK) {
        phx_tensor_free(y);
        return NULL;
    }
    px_node *n;
    y = px_op_finish(fn, softmax_bwd, 1, in, y, &n);
    if (y && n) {
        sm_ctx *c = px_node_ctx(n);
        c->dim = d, c->log = log;
        px_node_save_out(n, y);
    }
    return y;
}

phx_tensor *phx_softmax(const phx_tensor *t, int dim)
{
    t = px_autocast_f32(t);
    return softmax("softmax", 0, t, dim);
}
phx_tensor *phx_log_softmax(const phx_tensor *t, int dim)
{
    t = px_autocast_f32(t);
    return softmax("log_softmax", 1, t, dim);
}
