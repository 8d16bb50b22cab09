/* Indexing: index_select, gather, scatter_add (each differentiable, the
 * gradient of one being the other kind of kernel into zeros) and
 * one_hot. Indices are i64 on the operand's device; the kernels check
 * them before writing, so an index out of range changes nothing. */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "src/base/util.h"
#include "src/ops/ops-impl.h"

/* A kernel's failure re-said with fn in front. */
static phx_status kernel_failed(const char *fn, phx_status st)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", phx_last_error());
    return phx_error(st, "%s: %s", fn, msg);
}

static phx_status missing(const char *fn, const char *slot)
{
    return phx_error(PHX_EUNSUPPORTED, "%s: the device's kernel table has no %s (a plugin older than minor 4)", fn,
                     slot);
}

/* t viewed as (outer, n, inner) around dim d. */
static void layout(const phx_tensor *t, int d, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

static phx_status check_index(const char *fn, const char *name, const phx_tensor *idx, const phx_tensor *t)
{
    if (idx->dtype != PHX_I64)
        return phx_error(PHX_EINVAL, "%s: %s is %s, expected i64", fn, name, phx_dtype_name(idx->dtype));
    return px_op_same(fn, "t", t, name, idx, false);
}

/* ---- index_select ---- */

typedef struct index_ctx {
    int dim;
} index_ctx;

static phx_status index_select_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const char *fn = "backward of index_select";
    const index_ctx *c = px_node_ctx(n);
    const phx_tensor *idx = px_node_saved(n, 0);
    if (!idx) return PHX_ESTATE;
    phx_tensor *z = px_op_zeros(fn, grad->dtype, px_node_in_ndim(n, 0), px_node_in_shape(n, 0), grad->storage->device);
    if (!z) return PHX_ENOMEM;
    int64_t outer, inner;
    layout(z, c->dim, &outer, &inner);
    const phx_kernels_v1 *k = px_op_kernels(fn, z);
    if (!k->index_add) return missing(fn, "index_add");
    phx_status st = k->index_add(z->storage->device.index, z->dtype, outer, z->shape[c->dim], inner, px_tensor_ptr(z),
                                 px_tensor_ptr(idx), idx->numel, px_tensor_ptr(grad));
    if (st) return kernel_failed(fn, st);
    in_grads[0] = z;
    return PHX_OK;
}

/* The end of index_select, gather and scatter_add: st (an error already
 * set), then the node over the n_in inputs (dim d, the index saved) and
 * the result handed to the scope; out is freed on any failure. */
static phx_tensor *finish_indexed(const char *name, px_backward_fn bwd, phx_status st, int n_in,
                                  const phx_tensor *const *in, int d, const phx_tensor *idx, phx_tensor *out)
{
    px_node *node = NULL;
    if (!st) st = px_record(name, bwd, n_in, in, out, &node);
    if (!st && node) {
        ((index_ctx *)px_node_ctx(node))->dim = d;
        if (px_node_save(node, idx) < 0) st = PHX_ENOMEM;
    }
    if (st) {
        phx_tensor_free(out);
        return NULL;
    }
    return px_scope_own(out);
}

phx_tensor *phx_index_select(const phx_tensor *t, int dim, const phx_tensor *idx)
{
    const char *fn = "phx_index_select";
    static const char *const names[] = {"t", "idx"};
    const phx_tensor *in[2] = {t, idx};
    int d;
    if (px_op_inputs(fn, 2, in, names) || px_op_dim(fn, t, t->ndim, dim, &d) || check_index(fn, "idx", idx, t))
        return NULL;
    if (idx->ndim > 1) {
        char a[64];
        phx_error(PHX_EINVAL, "%s: idx has shape %s, expected 1 dim", fn, phx_tensor_shape_str(idx, a, sizeof a));
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS], outer, inner;
    memcpy(s, t->shape, sizeof s);
    s[d] = idx->numel;
    layout(t, d, &outer, &inner);
    const phx_kernels_v1 *k = px_op_kernels(fn, t);
    if (!k->index_select) {
        missing(fn, "index_select");
        return NULL;
    }
    phx_tensor *out = px_op_new(fn, t->dtype, t->ndim, s, t->storage->device);
    if (!out) return NULL;
    phx_status st = k->index_select(t->storage->device.index, t->dtype, outer, t->shape[d], inner, px_tensor_ptr(t),
                                    px_tensor_ptr(idx), idx->numel, px_tensor_ptr(out));
    if (st) kernel_failed(fn, st);
    return finish_indexed("index_select", index_select_backward, st, 1, &t, d, idx, out);
}

/* ---- gather and scatter_add ---- */

/* idx (and src, when given) shaped as t except along dim d. */
static phx_status check_gather_shapes(const char *fn, const phx_tensor *t, int d, const phx_tensor *idx,
                                      const phx_tensor *src)
{
    char a[64], b[64];
    if (src && !phx_tensor_same_shape(idx, src))
        return phx_error(PHX_EINVAL, "%s: idx is %s and src is %s, expected one shape", fn,
                         phx_tensor_shape_str(idx, a, sizeof a), phx_tensor_shape_str(src, b, sizeof b));
    if (idx->ndim != t->ndim)
        return phx_error(PHX_EINVAL, "%s: t is %s and idx is %s: %d dims and %d, expected equal", fn,
                         phx_tensor_shape_str(t, a, sizeof a), phx_tensor_shape_str(idx, b, sizeof b), t->ndim,
                         idx->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (i != d && idx->shape[i] != t->shape[i])
            return phx_error(PHX_EINVAL,
                             "%s: t is %s and idx is %s: dim %d has sizes %" PRId64 " and %" PRId64
                             ", expected equal (every dim but dim %d)",
                             fn, phx_tensor_shape_str(t, a, sizeof a), phx_tensor_shape_str(idx, b, sizeof b), i,
                             t->shape[i], idx->shape[i], d);
    return PHX_OK;
}

/* x (t's shape) [.., idx[..], ..] += src along d: the scatter_add kernel. */
static phx_status scatter_into(const char *fn, phx_tensor *x, int d, const phx_tensor *idx, const phx_tensor *src)
{
    int64_t outer, inner;
    layout(x, d, &outer, &inner);
    const phx_kernels_v1 *k = px_op_kernels(fn, x);
    if (!k->scatter_add) return missing(fn, "scatter_add");
    phx_status st = k->scatter_add(x->storage->device.index, x->dtype, outer, x->shape[d], inner, px_tensor_ptr(x),
                                   px_tensor_ptr(idx), idx->shape[d], px_tensor_ptr(src));
    return st ? kernel_failed(fn, st) : PHX_OK;
}

static phx_status gather_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const char *fn = "backward of gather";
    const index_ctx *c = px_node_ctx(n);
    const phx_tensor *idx = px_node_saved(n, 0);
    if (!idx) return PHX_ESTATE;
    phx_tensor *z = px_op_zeros(fn, grad->dtype, px_node_in_ndim(n, 0), px_node_in_shape(n, 0), grad->storage->device);
    if (!z) return PHX_ENOMEM;
    phx_status st = scatter_into(fn, z, c->dim, idx, grad);
    if (!st) in_grads[0] = z;
    return st;
}

phx_tensor *phx_gather(const phx_tensor *t, int dim, const phx_tensor *idx)
{
    const char *fn = "phx_gather";
    static const char *const names[] = {"t", "idx"};
    const phx_tensor *in[2] = {t, idx};
    int d;
    if (px_op_inputs(fn, 2, in, names) || px_op_dim(fn, t, t->ndim, dim, &d) || check_index(fn, "idx", idx, t) ||
        check_gather_shapes(fn, t, d, idx, NULL))
        return NULL;
    int64_t outer, inner;
    layout(t, d, &outer, &inner);
    const phx_kernels_v1 *k = px_op_kernels(fn, t);
    if (!k->gather) {
        missing(fn, "gather");
        return NULL;
    }
    phx_tensor *out = px_op_new(fn, t->dtype, idx->ndim, idx->shape, t->storage->device);
    if (!out) return NULL;
    phx_status st = k->gather(t->storage->device.index, t->dtype, outer, t->shape[d], inner, px_tensor_ptr(t),
                              px_tensor_ptr(idx), idx->shape[d], px_tensor_ptr(out));
    if (st) kernel_failed(fn, st);
    return finish_indexed("gather", gather_backward, st, 1, &t, d, idx, out);
}

/* Inputs (t, src): t's gradient is grad itself, src's the gather of grad. */
static phx_status scatter_add_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const index_ctx *c = px_node_ctx(n);
    if (px_node_needs(n, 0)) in_grads[0] = px_scope_own(phx_tensor_retain((phx_tensor *)grad));
    if (px_node_needs(n, 1)) {
        const phx_tensor *idx = px_node_saved(n, 0);
        if (!idx) return PHX_ESTATE;
        in_grads[1] = phx_gather(grad, c->dim, idx);
        if (!in_grads[1]) return PHX_ENOMEM;
    }
    return PHX_OK;
}

phx_tensor *phx_scatter_add(const phx_tensor *t, int dim, const phx_tensor *idx, const phx_tensor *src)
{
    const char *fn = "phx_scatter_add";
    static const char *const names[] = {"t", "idx", "src"};
    const phx_tensor *in[3] = {t, idx, src};
    int d;
    if (px_op_inputs(fn, 3, in, names) || px_op_dim(fn, t, t->ndim, dim, &d) || px_op_float(fn, "t", t) ||
        px_op_same(fn, "t", t, "src", src, true) || check_index(fn, "idx", idx, t) ||
        check_gather_shapes(fn, t, d, idx, src))
        return NULL;
    phx_tensor *out = px_op_new(fn, t->dtype, t->ndim, t->shape, t->storage->device);
    if (!out) return NULL;
    int64_t st_[PHX_MAX_DIMS];
    px_contiguous_strides(t->ndim, t->shape, st_);
    phx_status st = px_op_copy_strided(fn, t, t->ndim, t->shape, px_tensor_ptr(out), st_, px_tensor_ptr(t), st_);
    if (!st) st = scatter_into(fn, out, d, idx, src);
    const phx_tensor *gin[2] = {t, src};
    return finish_indexed("scatter_add", scatter_add_backward, st, 2, gin, d, idx, out);
}

/* ---- one_hot (on the host: the range check needs the values anyway) ---- */

phx_tensor *phx_one_hot(const phx_tensor *idx, int64_t num_classes)
{
    const char *fn = "phx_one_hot";
    static const char *const names[] = {"idx"};
    char a[64];
    if (px_op_inputs(fn, 1, &idx, names)) return NULL;
    if (idx->dtype != PHX_I64) {
        phx_error(PHX_EINVAL, "%s: idx is %s, expected i64", fn, phx_dtype_name(idx->dtype));
        return NULL;
    }
    if (idx->ndim == PHX_MAX_DIMS) {
        phx_error(PHX_EINVAL, "%s: idx of shape %s has %d dims already, the result would need %d", fn,
                  phx_tensor_shape_str(idx, a, sizeof a), PHX_MAX_DIMS, PHX_MAX_DIMS + 1);
        return NULL;
    }
    if (num_classes < 1 && num_classes != -1) {
        phx_error(PHX_EINVAL, "%s: num_classes %" PRId64 ", expected >= 1 (or -1: the largest index + 1)", fn,
                  num_classes);
        return NULL;
    }
    int64_t n = idx->numel;
    int64_t *h = px_malloc((size_t)(n ? n : 1) * sizeof *h);
    if (!h) {
        phx_error(PHX_ENOMEM, "%s: out of memory copying %" PRId64 " indices", fn, n);
        return NULL;
    }
    phx_tensor *out = NULL;
    float *v = NULL;
    if (phx_tensor_to_host(idx, h) != PHX_OK) goto done;
    if (num_classes == -1) {
        num_classes = 0;
        for (int64_t i = 0; i < n; i++)
            if (h[i] + 1 > num_classes) num_classes = h[i] + 1;
    }
    for (int64_t i = 0; i < n; i++)
        if (h[i] < 0 || h[i] >= num_classes) {
            phx_error(PHX_EINVAL,
                      "%s: index %" PRId64 " (at position %" PRId64 " of idx %s) is out of range for %" PRId64
                      " classes (expected 0 .. %" PRId64 ")",
                      fn, h[i], i, phx_tensor_shape_str(idx, a, sizeof a), num_classes, num_classes - 1);
            goto done;
        }
    int64_t s[PHX_MAX_DIMS];
    memcpy(s, idx->shape, (size_t)idx->ndim * sizeof *s);
    s[idx->ndim] = num_classes;
    v = px_calloc((size_t)(n * num_classes > 0 ? n * num_classes : 1), sizeof *v);
    if (!v) {
        phx_error(PHX_ENOMEM, "%s: out of memory for %" PRId64 " x %" PRId64 " values", fn, n, num_classes);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) v[i * num_classes + h[i]] = 1.0f;
    out = px_op_new(fn, PHX_F32, idx->ndim + 1, s, idx->storage->device);
    if (out && phx_tensor_from_host(out, v) != PHX_OK) {
        phx_tensor_free(out);
        out = NULL;
    }
done:
    px_free(h);
    px_free(v);
    return px_scope_own(out);
}
