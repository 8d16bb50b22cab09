/* Elementwise operations with NumPy broadcasting (add .. ge, where) and
 * their scalar variants; each gradient is summed back to its operand's
 * shape (px_sum_to). */
#include "config.h"
#include <math.h>
#include "src/ops/math-impl.h"
#include "src/tensor/device-impl.h"

static const char *const ab_names[] = {"a", "b"};

const phx_kernels_v1 *px_op_slot_(const char *fn, const phx_tensor *t, const phx_kernels_v1 *k, const char *slot,
                                  bool has)
{
    if (has) return k;
    char d[32];
    phx_error(PHX_EUNSUPPORTED, "%s: the device %s has no kernel %s (plugin ABI minor 4 needed)", fn,
              phx_device_name(t->storage->device, d, sizeof d), slot);
    return NULL;
}

phx_tensor *px_op_finish(const char *name, px_backward_fn bwd, int n, const phx_tensor *const *in, phx_tensor *out,
                         px_node **node)
{
    if (node) *node = NULL;
    if (!out) return NULL;
    bool need = px_grad_needed(n, in);
    if (!need) px_mark_nondiff(name, n, in, out); /* carries a cut path's name */
    if (need) {
        px_node *nd = NULL;
        if (px_record(name, bwd, n, in, out, &nd) != PHX_OK) {
            phx_tensor_free(out);
            return NULL;
        }
        if (node) *node = nd;
    }
    return px_scope_own(out);
}

phx_tensor *px_scope_keep(phx_scope *s, phx_tensor *y)
{
    if (y) phx_tensor_retain(y);
    phx_scope_end(s);
    return px_scope_own(y);
}

int px_node_save_out(px_node *n, const phx_tensor *y)
{
    phx_tensor *v = px_tensor_view(y, 0, y->ndim, y->shape);
    if (!v) return -1;
    int i = px_node_save(n, v);
    phx_tensor_free(v);
    return i;
}

phx_tensor *px_scalar_new(const char *fn, double v, phx_dtype dt, phx_device dev)
{
    phx_tensor *t = px_op_new(fn, dt, 0, NULL, dev);
    if (t && phx_tensor_fill(t, v) != PHX_OK) {
        phx_tensor_free(t);
        return NULL;
    }
    return px_scope_own(t);
}

phx_tensor *px_view_as(const phx_tensor *t, int ndim, const int64_t *shape)
{
    return t ? px_scope_own(px_tensor_view(t, 0, ndim, shape)) : NULL;
}

/* The forward of a binary op, not recorded and not yet scope-owned. */
static phx_tensor *bin_new(const char *fn, int op, const phx_tensor *a, const phx_tensor *b)
{
    const phx_tensor *in[2] = {a, b};
    if (px_op_inputs(fn, 2, in, ab_names) || px_op_same(fn, "a", a, "b", b, true) || px_op_float(fn, "a", a))
        return NULL;
    int nd;
    int64_t shape[PHX_MAX_DIMS], sa[PHX_MAX_DIMS], sb[PHX_MAX_DIMS];
    if (px_broadcast_shape(fn, a, b, &nd, shape)) return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, a, binary);
    if (!k) return NULL;
    phx_device dev = a->storage->device;
    phx_tensor *out = px_op_new(fn, a->dtype, nd, shape, dev);
    if (!out) return NULL;
    px_broadcast_strides(a, nd, shape, sa);
    px_broadcast_strides(b, nd, shape, sb);
    if (k->binary(dev.index, op, a->dtype, nd, shape, px_tensor_ptr(out), px_tensor_ptr(a), sa, px_tensor_ptr(b), sb) !=
        PHX_OK) {
        phx_tensor_free(out);
        return NULL;
    }
    return out;
}

phx_tensor *px_binary_raw(const char *fn, int op, const phx_tensor *a, const phx_tensor *b)
{
    phx_tensor *out = bin_new(fn, op, a, b);
    if (out) px_mark_nondiff(fn, 2, (const phx_tensor *const[]){a, b}, out);
    return px_scope_own(out);
}

phx_tensor *px_expand_raw(const char *fn, const phx_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) return NULL;
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, t, binary);
    if (!k) return NULL;
    phx_device dev = t->storage->device;
    phx_tensor *z = px_scalar_new(fn, 0, t->dtype, dev);
    phx_tensor *out = z ? px_op_new(fn, t->dtype, ndim, shape, dev) : NULL;
    if (!out) return NULL;
    int64_t sz[PHX_MAX_DIMS] = {0}, st[PHX_MAX_DIMS];
    px_broadcast_strides(t, ndim, shape, st);
    if (k->binary(dev.index, PHX_BIN_ADD, t->dtype, ndim, shape, px_tensor_ptr(out), px_tensor_ptr(z), sz,
                  px_tensor_ptr(t), st) != PHX_OK) {
        phx_tensor_free(out);
        return NULL;
    }
    return px_scope_own(out);
}

/* ---- Gradients ---- */

static phx_tensor *to_in(px_node *n, int i, const phx_tensor *g)
{
    return px_sum_to(g, px_node_in_ndim(n, i), px_node_in_shape(n, i));
}

static phx_status add_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    if (px_node_needs(n, 0) && !(in_grads[0] = to_in(n, 0, g))) return PHX_EINVAL;
    if (px_node_needs(n, 1) && !(in_grads[1] = to_in(n, 1, g))) return PHX_EINVAL;
    return PHX_OK;
}

static phx_status sub_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    if (px_node_needs(n, 0) && !(in_grads[0] = to_in(n, 0, g))) return PHX_EINVAL;
    if (px_node_needs(n, 1) && !(in_grads[1] = to_in(n, 1, phx_neg(g)))) return PHX_EINVAL;
    return PHX_OK;
}

static phx_status mul_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *a = px_node_saved(n, 0), *b = px_node_saved(n, 1);
    if (!a || !b) return PHX_ESTATE;
    if (px_node_needs(n, 0) && !(in_grads[0] = to_in(n, 0, phx_mul(g, b)))) return PHX_EINVAL;
    if (px_node_needs(n, 1) && !(in_grads[1] = to_in(n, 1, phx_mul(g, a)))) return PHX_EINVAL;
    return PHX_OK;
}

/* d(a/b) = g / b, -g a / b^2 */
static phx_status div_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *a = px_node_saved(n, 0), *b = px_node_saved(n, 1);
    if (!a || !b) return PHX_ESTATE;
    phx_tensor *gb = phx_div(g, b);
    if (px_node_needs(n, 0) && !(in_grads[0] = to_in(n, 0, gb))) return PHX_EINVAL;
    if (px_node_needs(n, 1) && !(in_grads[1] = to_in(n, 1, phx_neg(phx_div(phx_mul(gb, a), b))))) return PHX_EINVAL;
    return PHX_OK;
}

/* PyTorch's: d/da = g b a^(b-1) (0 where b == 0); d/db = g a^b ln a (0
 * where a == 0 and b >= 0). */
static phx_status pow_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *a = px_node_saved(n, 0), *b = px_node_saved(n, 1);
    if (!a || !b) return PHX_ESTATE;
    if (px_node_needs(n, 0)) {
        phx_tensor *d = phx_mul(b, phx_pow(a, phx_sub_scalar(b, 1)));
        d = phx_where(phx_eq_scalar(b, 0), px_scalar_new("pow", 0, a->dtype, a->storage->device), d);
        if (!(in_grads[0] = to_in(n, 0, phx_mul(g, d)))) return PHX_EINVAL;
    }
    if (px_node_needs(n, 1)) {
        phx_tensor *d = phx_mul(phx_pow(a, b), phx_ln(a));
        phx_tensor *z = phx_mul(phx_eq_scalar(a, 0), phx_ge_scalar(b, 0));
        d = phx_where(z, px_scalar_new("pow", 0, a->dtype, a->storage->device), d);
        if (!(in_grads[1] = to_in(n, 1, phx_mul(g, d)))) return PHX_EINVAL;
    }
    return PHX_OK;
}

/* PyTorch 1.13's maximum/minimum: a tie splits g half and half; the
 * operand that lost gets 0; NaN compares false, so both get g. */
static phx_status maxmin_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads, int lose_a_op, int lose_b_op)
{
    const phx_tensor *a = px_node_saved(n, 0), *b = px_node_saved(n, 1);
    if (!a || !b) return PHX_ESTATE;
    phx_tensor *tie = phx_mul_scalar(phx_eq(a, b), 0.5);
    for (int i = 0; i < 2; i++) {
        if (!px_node_needs(n, i)) continue;
        phx_tensor *lost = px_binary_raw("maximum", i == 0 ? lose_a_op : lose_b_op, a, b);
        phx_tensor *keep = phx_rsub_scalar(phx_add(lost, tie), 1.0);
        if (!(in_grads[i] = to_in(n, i, phx_mul(g, keep)))) return PHX_EINVAL;
    }
    return PHX_OK;
}

static phx_status max_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    return maxmin_bwd(n, g, in_grads, PHX_BIN_LT, PHX_BIN_GT);
}

static phx_status min_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    return maxmin_bwd(n, g, in_grads, PHX_BIN_GT, PHX_BIN_LT);
}

/* The public binary ops: save says which operands backward needs. */
static phx_tensor *binary(const char *fn, int op, px_backward_fn bwd, bool save, const phx_tensor *a,
                          const phx_tensor *b)
{
    const phx_tensor *in[2] = {a, b};
    px_node *node;
    phx_tensor *out = px_op_finish(fn, bwd, 2, in, bin_new(fn, op, a, b), &node);
    if (out && node && save) {
        px_node_save(node, a);
        px_node_save(node, b);
    }
    return out;
}

phx_tensor *phx_add(const phx_tensor *a, const phx_tensor *b)
{
    return binary("add", PHX_BIN_ADD, add_bwd, false, a, b);
}
phx_tensor *phx_sub(const phx_tensor *a, const phx_tensor *b)
{
    return binary("sub", PHX_BIN_SUB, sub_bwd, false, a, b);
}
phx_tensor *phx_mul(const phx_tensor *a, const phx_tensor *b)
{
    return binary("mul", PHX_BIN_MUL, mul_bwd, true, a, b);
}
phx_tensor *phx_div(const phx_tensor *a, const phx_tensor *b)
{
    return binary("div", PHX_BIN_DIV, div_bwd, true, a, b);
}
phx_tensor *phx_pow(const phx_tensor *a, const phx_tensor *b)
{
    return binary("pow", PHX_BIN_POW, pow_bwd, true, a, b);
}
phx_tensor *phx_maximum(const phx_tensor *a, const phx_tensor *b)
{
    return binary("maximum", PHX_BIN_MAX, max_bwd, true, a, b);
}
phx_tensor *phx_minimum(const phx_tensor *a, const phx_tensor *b)
{
    return binary("minimum", PHX_BIN_MIN, min_bwd, true, a, b);
}
phx_tensor *phx_eq(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("eq", PHX_BIN_EQ, a, b);
}
phx_tensor *phx_ne(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("ne", PHX_BIN_NE, a, b);
}
phx_tensor *phx_lt(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("lt", PHX_BIN_LT, a, b);
}
phx_tensor *phx_le(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("le", PHX_BIN_LE, a, b);
}
phx_tensor *phx_gt(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("gt", PHX_BIN_GT, a, b);
}
phx_tensor *phx_ge(const phx_tensor *a, const phx_tensor *b)
{
    return px_binary_raw("ge", PHX_BIN_GE, a, b);
}

/* ---- where ---- */

static phx_status where_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *c = px_node_saved(n, 0);
    if (!c) return PHX_ESTATE;
    phx_tensor *z = px_scalar_new("where", 0, g->dtype, g->storage->device);
    if (px_node_needs(n, 1) && !(in_grads[1] = to_in(n, 1, phx_where(c, g, z)))) return PHX_EINVAL;
    if (px_node_needs(n, 2) && !(in_grads[2] = to_in(n, 2, phx_where(c, z, g)))) return PHX_EINVAL;
    return PHX_OK;
}

phx_tensor *phx_where(const phx_tensor *cond, const phx_tensor *a, const phx_tensor *b)
{
    static const char *const names[] = {"cond", "a", "b"};
    const char *fn = "where";
    const phx_tensor *in[3] = {cond, a, b};
    if (px_op_inputs(fn, 3, in, names) || px_op_same(fn, "a", a, "b", b, true) ||
        px_op_same(fn, "cond", cond, "a", a, false) || px_op_float(fn, "a", a))
        return NULL;
    int n1, nd;
    int64_t s1[PHX_MAX_DIMS], shape[PHX_MAX_DIMS], sc[PHX_MAX_DIMS], sa[PHX_MAX_DIMS], sb[PHX_MAX_DIMS];
    if (px_broadcast_shape(fn, a, b, &n1, s1)) return NULL;
    /* cond against the shape of a and b */
    nd = n1 > cond->ndim ? n1 : cond->ndim;
    for (int i = 0; i < nd; i++) {
        int ic = cond->ndim - nd + i, is = n1 - nd + i;
        int64_t dc = ic >= 0 ? cond->shape[ic] : 1, ds = is >= 0 ? s1[is] : 1;
        if (dc != ds && dc != 1 && ds != 1) {
            char sc1[64], sa1[64], sb1[64];
            phx_error(PHX_EINVAL,
                      "%s: cond %s cannot broadcast with a %s and b %s: dim %d has sizes %lld and %lld, "
                      "expected equal or 1",
                      fn, phx_tensor_shape_str(cond, sc1, sizeof sc1), phx_tensor_shape_str(a, sa1, sizeof sa1),
                      phx_tensor_shape_str(b, sb1, sizeof sb1), i, (long long)dc, (long long)ds);
            return NULL;
        }
        shape[i] = dc == 1 ? ds : dc;
    }
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, a, where);
    if (!k) return NULL;
    phx_device dev = a->storage->device;
    phx_tensor *out = px_op_new(fn, a->dtype, nd, shape, dev);
    if (!out) return NULL;
    px_broadcast_strides(cond, nd, shape, sc);
    px_broadcast_strides(a, nd, shape, sa);
    px_broadcast_strides(b, nd, shape, sb);
    if (k->where(dev.index, a->dtype, nd, shape, px_tensor_ptr(out), px_tensor_ptr(cond), cond->dtype, sc,
                 px_tensor_ptr(a), sa, px_tensor_ptr(b), sb) != PHX_OK) {
        phx_tensor_free(out);
        return NULL;
    }
    px_node *node;
    out = px_op_finish(fn, where_bwd, 3, in, out, &node);
    if (out && node) px_node_save(node, cond);
    return out;
}

/* ---- Scalar variants (the unary kernel) ---- */

typedef struct scalar_ctx {
    float alpha, s;
} scalar_ctx;

/* t alpha + beta: the gradient is g alpha. */
static phx_status affine_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const scalar_ctx *c = px_node_ctx(n);
    in_grads[0] = px_unary_raw("affine", PHX_UN_AFFINE, g, c->alpha, 0.0f);
    return in_grads[0] ? PHX_OK : PHX_EINVAL;
}

static phx_tensor *affine(const char *fn, const phx_tensor *t, float alpha, float beta)
{
    const phx_tensor *in[1] = {t};
    if (px_op_inputs(fn, 1, in, (const char *const[]){"t"})) return NULL;
    phx_tensor *y = px_unary_raw(fn, PHX_UN_AFFINE, t, alpha, beta);
    if (!y) return NULL;
    px_node *node = NULL;
    if (px_grad_needed(1, in)) {
        if (px_record(fn, affine_bwd, 1, in, y, &node) != PHX_OK) return NULL;
        ((scalar_ctx *)px_node_ctx(node))->alpha = alpha;
    }
    return y;
}

phx_tensor *phx_add_scalar(const phx_tensor *t, double s)
{
    return affine("add_scalar", t, 1.0f, (float)s);
}
phx_tensor *phx_sub_scalar(const phx_tensor *t, double s)
{
    return affine("sub_scalar", t, 1.0f, (float)-s);
}
phx_tensor *phx_mul_scalar(const phx_tensor *t, double s)
{
    return affine("mul_scalar", t, (float)s, 0.0f);
}
phx_tensor *phx_div_scalar(const phx_tensor *t, double s)
{
    return affine("div_scalar", t, (float)(1.0 / s), 0.0f);
}
phx_tensor *phx_rsub_scalar(const phx_tensor *t, double s)
{
    return affine("rsub_scalar", t, -1.0f, (float)s);
}

/* d t^s = g s t^(s-1) (0 when s == 0). */
static phx_status pow_scalar_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const scalar_ctx *c = px_node_ctx(n);
    const phx_tensor *t = px_node_saved(n, 0);
    if (!t) return PHX_ESTATE;
    if (c->s == 0.0f) {
        in_grads[0] = px_unary_raw("pow_scalar", PHX_UN_AFFINE, g, 0.0f, 0.0f);
    } else {
        phx_tensor *d = px_unary_raw("pow_scalar", PHX_UN_POW, t, c->s - 1.0f, 0.0f);
        in_grads[0] = phx_mul(g, px_unary_raw("pow_scalar", PHX_UN_AFFINE, d, c->s, 0.0f));
    }
    return in_grads[0] ? PHX_OK : PHX_EINVAL;
}

phx_tensor *phx_pow_scalar(const phx_tensor *t, double s)
{
    const phx_tensor *in[1] = {t};
    if (px_op_inputs("pow_scalar", 1, in, (const char *const[]){"t"})) return NULL;
    phx_tensor *y = px_unary_raw("pow_scalar", PHX_UN_POW, t, (float)s, 0.0f);
    if (!y) return NULL;
    px_node *node = NULL;
    if (px_grad_needed(1, in)) {
        if (px_record("pow_scalar", pow_scalar_bwd, 1, in, y, &node) != PHX_OK) return NULL;
        ((scalar_ctx *)px_node_ctx(node))->s = (float)s;
        px_node_save(node, t);
    }
    return y;
}

phx_tensor *phx_eq_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("eq_scalar", PHX_UN_EQ, t, (float)s, 0.0f);
}
phx_tensor *phx_ne_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("ne_scalar", PHX_UN_NE, t, (float)s, 0.0f);
}
phx_tensor *phx_lt_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("lt_scalar", PHX_UN_LT, t, (float)s, 0.0f);
}
phx_tensor *phx_le_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("le_scalar", PHX_UN_LE, t, (float)s, 0.0f);
}
phx_tensor *phx_gt_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("gt_scalar", PHX_UN_GT, t, (float)s, 0.0f);
}
phx_tensor *phx_ge_scalar(const phx_tensor *t, double s)
{
    return px_unary_raw("ge_scalar", PHX_UN_GE, t, (float)s, 0.0f);
}
