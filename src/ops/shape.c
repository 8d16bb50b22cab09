/* Shape operations. Every tensor is contiguous, so reshape, flatten,
 * squeeze, unsqueeze and a narrow whose leading dims have size 1 are free
 * views of the same storage (their gradient is the output gradient
 * reshaped); permute, transpose, expand, inner narrows, slices, cat and
 * stack copy through the copy_strided kernel, so that every other kernel
 * reads contiguous operands only (doc/reference/tensors.md). */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "src/ops/ops-impl.h"
#include "src/base/util.h"

/* Node state of the shape operations (fits PX_NODE_CTX_BYTES). */
typedef struct shape_ctx {
    int dim;
    int perm[PHX_MAX_DIMS];
    int64_t start, step;
} shape_ctx;

/* Records out (made by `name` from the n inputs, differentiated by bw)
 * when a gradient is needed and hands it to the scope; NULL (out freed)
 * when recording fails. *ctx (if asked) is the node's state or NULL. */
static phx_tensor *finish(const char *name, px_backward_fn bw, int n, const phx_tensor *const *in, phx_tensor *out,
                          shape_ctx **ctx)
{
    px_node *node = NULL;
    if (ctx) *ctx = NULL;
    if (out && px_record(name, bw, n, in, out, &node) != PHX_OK) {
        phx_tensor_free(out);
        return NULL;
    }
    if (ctx && node) *ctx = px_node_ctx(node);
    return px_scope_own(out);
}

static phx_status check_ndim(const char *fn, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "%s: %d dims, expected 0 .. %d", fn, ndim, PHX_MAX_DIMS);
    if (ndim > 0 && !shape) return phx_error(PHX_EINVAL, "%s: shape is NULL for %d dims", fn, ndim);
    return PHX_OK;
}

phx_status px_op_copy_strided(const char *fn, const phx_tensor *like, int ndim, const int64_t *shape, void *dst,
                              const int64_t *dst_strides, const void *src, const int64_t *src_strides)
{
    const phx_kernels_v1 *k = px_op_kernels(fn, like);
    if (!k->copy_strided)
        return phx_error(PHX_EUNSUPPORTED,
                         "%s: the device's kernel table has no copy_strided (a plugin older than "
                         "minor 4)",
                         fn);
    return k->copy_strided(like->storage->device.index, like->dtype, ndim, shape, dst, dst_strides, src, src_strides);
}

phx_tensor *px_op_zeros(const char *fn, phx_dtype dt, int ndim, const int64_t *shape, phx_device dev)
{
    phx_tensor *z = px_op_new(fn, dt, ndim, shape, dev);
    if (z && phx_tensor_fill(z, 0.0) != PHX_OK) {
        phx_tensor_free(z);
        z = NULL;
    }
    return px_scope_own(z);
}

/* ---- Views ---- */

/* The gradient of a view: the output gradient in the input's shape. */
static phx_status view_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    in_grads[0] = phx_reshape(grad, px_node_in_ndim(n, 0), px_node_in_shape(n, 0));
    return in_grads[0] ? PHX_OK : PHX_ENOMEM;
}

/* t's storage seen as shape (same element count), recorded as `name`. */
static phx_tensor *view_as(const char *name, const phx_tensor *t, int ndim, const int64_t *shape)
{
    return finish(name, view_backward, 1, &t, px_tensor_view(t, 0, ndim, shape), NULL);
}

phx_tensor *phx_reshape(const phx_tensor *t, int ndim, const int64_t *shape)
{
    const char *fn = "phx_reshape";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names) || check_ndim(fn, ndim, shape)) return NULL;
    int64_t s[PHX_MAX_DIMS], known = 1;
    int infer = -1;
    char a[64], b[96];
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] < 0) {
            phx_error(PHX_EINVAL, "%s: shape %s has size %" PRId64 " at dim %d, expected >= 0 (or one -1)", fn,
                      px_shape_str(ndim, shape, b, sizeof b), shape[i], i);
            return NULL;
        }
        known *= shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known) {
            phx_error(PHX_EINVAL, "%s: shape %s is invalid for a tensor of shape %s (%" PRId64 " elements)%s", fn,
                      px_shape_str(ndim, shape, b, sizeof b), phx_tensor_shape_str(t, a, sizeof a), t->numel,
                      known == 0 ? ": the -1 could be any size" : "");
            return NULL;
        }
        s[infer] = t->numel / known;
        known = t->numel;
    }
    if (known != t->numel) {
        phx_error(PHX_EINVAL,
                  "%s: shape %s (%" PRId64 " elements) is invalid for a tensor of shape %s (%" PRId64 " elements)", fn,
                  px_shape_str(ndim, shape, b, sizeof b), known, phx_tensor_shape_str(t, a, sizeof a), t->numel);
        return NULL;
    }
    return view_as("reshape", t, ndim, s);
}

phx_tensor *phx_flatten(const phx_tensor *t, int start_dim, int end_dim)
{
    const char *fn = "phx_flatten";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names)) return NULL;
    if (t->ndim == 0) { /* torch: a scalar flattens to (1,) */
        int64_t one = 1;
        if ((start_dim != 0 && start_dim != -1) || (end_dim != 0 && end_dim != -1)) {
            phx_error(PHX_EINVAL, "%s: dims %d .. %d of a 0-dim tensor, expected 0 or -1", fn, start_dim, end_dim);
            return NULL;
        }
        return view_as("flatten", t, 1, &one);
    }
    int s0, s1;
    if (px_op_dim(fn, t, t->ndim, start_dim, &s0) || px_op_dim(fn, t, t->ndim, end_dim, &s1)) return NULL;
    if (s0 > s1) {
        char a[64];
        phx_error(PHX_EINVAL, "%s: start_dim %d comes after end_dim %d in a tensor of shape %s", fn, start_dim, end_dim,
                  phx_tensor_shape_str(t, a, sizeof a));
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i <= s0 || i > s1)
            s[n++] = t->shape[i];
        else
            s[n - 1] *= t->shape[i];
    }
    return view_as("flatten", t, n, s);
}

phx_tensor *phx_squeeze(const phx_tensor *t, int dim)
{
    const char *fn = "phx_squeeze";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names)) return NULL;
    int d = 0;
    if (t->ndim == 0 ? (dim != 0 && dim != -1) : px_op_dim(fn, t, t->ndim, dim, &d) != PHX_OK) {
        if (t->ndim == 0) phx_error(PHX_EINVAL, "%s: dim %d of a 0-dim tensor, expected 0 or -1", fn, dim);
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != d || t->shape[i] != 1) s[n++] = t->shape[i];
    return view_as("squeeze", t, n, s);
}

phx_tensor *phx_unsqueeze(const phx_tensor *t, int dim)
{
    const char *fn = "phx_unsqueeze";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names)) return NULL;
    int d;
    if (px_op_dim(fn, t, t->ndim + 1, dim, &d)) return NULL;
    if (t->ndim == PHX_MAX_DIMS) {
        char a[64];
        phx_error(PHX_EINVAL, "%s: a tensor of shape %s has %d dims already, the most a tensor has", fn,
                  phx_tensor_shape_str(t, a, sizeof a), PHX_MAX_DIMS);
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) s[i] = i == d ? 1 : t->shape[j++];
    return view_as("unsqueeze", t, t->ndim + 1, s);
}

phx_tensor *phx_contiguous(const phx_tensor *t)
{
    static const char *const names[] = {"t"};
    if (px_op_inputs("phx_contiguous", 1, &t, names)) return NULL;
    return px_scope_own(phx_tensor_retain((phx_tensor *)t));
}

/* ---- Permutations (copies) ---- */

static phx_tensor *permute_impl(const char *fn, const char *name, const phx_tensor *t, const int *perm);

static phx_status permute_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const shape_ctx *c = px_node_ctx(n);
    int inv[PHX_MAX_DIMS];
    for (int i = 0; i < grad->ndim; i++) inv[c->perm[i]] = i;
    in_grads[0] = permute_impl("permute backward", "permute", grad, inv);
    return in_grads[0] ? PHX_OK : PHX_ENOMEM;
}

/* perm: normalised and checked. */
static phx_tensor *permute_impl(const char *fn, const char *name, const phx_tensor *t, const int *perm)
{
    int64_t s[PHX_MAX_DIMS], st[PHX_MAX_DIMS], src[PHX_MAX_DIMS], dst[PHX_MAX_DIMS];
    px_contiguous_strides(t->ndim, t->shape, st);
    for (int i = 0; i < t->ndim; i++) {
        s[i] = t->shape[perm[i]];
        src[i] = st[perm[i]];
    }
    px_contiguous_strides(t->ndim, s, dst);
    phx_tensor *out = px_op_new(fn, t->dtype, t->ndim, s, t->storage->device);
    if (!out) return NULL;
    if (px_op_copy_strided(fn, t, t->ndim, s, px_tensor_ptr(out), dst, px_tensor_ptr(t), src)) {
        phx_tensor_free(out);
        return NULL;
    }
    shape_ctx *c;
    out = finish(name, permute_backward, 1, &t, out, &c);
    if (c) memcpy(c->perm, perm, (size_t)t->ndim * sizeof *perm);
    return out;
}

phx_tensor *phx_permute(const phx_tensor *t, int ndim, const int *dims)
{
    const char *fn = "phx_permute";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names)) return NULL;
    char a[64];
    if (ndim > 0 && !dims) {
        phx_error(PHX_EINVAL, "%s: dims is NULL with ndim %d, expected an array of %d dims for a tensor of shape %s",
                  fn, ndim, t->ndim, phx_tensor_shape_str(t, a, sizeof a));
        return NULL;
    }
    if (ndim != t->ndim) {
        phx_error(PHX_EINVAL, "%s: %d dims given for a tensor of shape %s, expected %d", fn, ndim,
                  phx_tensor_shape_str(t, a, sizeof a), t->ndim);
        return NULL;
    }
    int perm[PHX_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < ndim; i++) {
        if (px_op_dim(fn, t, ndim, dims[i], &perm[i])) return NULL;
        if (seen & (1u << perm[i])) {
            phx_error(PHX_EINVAL, "%s: dim %d appears twice in the permutation of a tensor of shape %s", fn, perm[i],
                      phx_tensor_shape_str(t, a, sizeof a));
            return NULL;
        }
        seen |= 1u << perm[i];
    }
    return permute_impl(fn, "permute", t, perm);
}

phx_tensor *phx_transpose(const phx_tensor *t, int d0, int d1)
{
    const char *fn = "phx_transpose";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names)) return NULL;
    int a, b, perm[PHX_MAX_DIMS];
    if (px_op_dim(fn, t, t->ndim, d0, &a) || px_op_dim(fn, t, t->ndim, d1, &b)) return NULL;
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return permute_impl(fn, "transpose", t, perm);
}

/* ---- Narrow and slice ---- */

static phx_tensor *slice_impl(const char *fn, const char *name, const phx_tensor *t, int d, int64_t start,
                              int64_t length, int64_t step);

/* The gradient of a narrow or slice: zeros with the output gradient
 * copied into the part the forward read. */
static phx_status slice_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const shape_ctx *c = px_node_ctx(n);
    int nd = px_node_in_ndim(n, 0);
    const int64_t *shape = px_node_in_shape(n, 0);
    phx_tensor *z = px_op_zeros("narrow backward", grad->dtype, nd, shape, grad->storage->device);
    if (!z) return PHX_ENOMEM;
    int64_t zs[PHX_MAX_DIMS], gs[PHX_MAX_DIMS];
    px_contiguous_strides(nd, shape, zs);
    px_contiguous_strides(grad->ndim, grad->shape, gs);
    char *dst = (char *)px_tensor_ptr(z) + (size_t)(c->start * zs[c->dim]) * phx_dtype_size(z->dtype);
    zs[c->dim] *= c->step;
    phx_status st = px_op_copy_strided("narrow backward", z, nd, grad->shape, dst, zs, px_tensor_ptr(grad), gs);
    if (st == PHX_OK) in_grads[0] = z;
    return st;
}

/* Elements start, start+step, ... (length of them) along dim d (checked):
 * a view when step is 1 and every dim before d has size 1, else a copy. */
static phx_tensor *slice_impl(const char *fn, const char *name, const phx_tensor *t, int d, int64_t start,
                              int64_t length, int64_t step)
{
    int64_t s[PHX_MAX_DIMS], st[PHX_MAX_DIMS], src[PHX_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    s[d] = length;
    px_contiguous_strides(t->ndim, t->shape, st);
    bool view = step == 1;
    for (int i = 0; i < d; i++) view = view && t->shape[i] == 1;
    phx_tensor *out;
    if (view)
        out = px_tensor_view(t, length ? start * st[d] : 0, t->ndim, s);
    else {
        out = px_op_new(fn, t->dtype, t->ndim, s, t->storage->device);
        memcpy(src, st, sizeof src);
        src[d] *= step;
        int64_t dst[PHX_MAX_DIMS];
        px_contiguous_strides(t->ndim, s, dst);
        const char *from = (const char *)px_tensor_ptr(t) + (size_t)(start * st[d]) * phx_dtype_size(t->dtype);
        if (out && px_op_copy_strided(fn, t, t->ndim, s, px_tensor_ptr(out), dst, from, src)) {
            phx_tensor_free(out);
            out = NULL;
        }
    }
    shape_ctx *c;
    out = finish(name, slice_backward, 1, &t, out, &c);
    if (c) {
        c->dim = d;
        c->start = start;
        c->step = step;
    }
    return out;
}

phx_tensor *phx_narrow(const phx_tensor *t, int dim, int64_t start, int64_t length)
{
    const char *fn = "phx_narrow";
    static const char *const names[] = {"t"};
    int d;
    if (px_op_inputs(fn, 1, &t, names) || px_op_dim(fn, t, t->ndim, dim, &d)) return NULL;
    int64_t size = t->shape[d];
    char a[64];
    if (start < -size || start > size) {
        phx_error(PHX_EINVAL,
                  "%s: start %" PRId64 " along dim %d of a tensor of shape %s, expected -%" PRId64
                  " <= start <= %" PRId64 " (a negative start counts from the end)",
                  fn, start, dim, phx_tensor_shape_str(t, a, sizeof a), size, size);
        return NULL;
    }
    int64_t from = start < 0 ? start + size : start; /* torch counts a negative start from the end */
    if (length < 0 || length > size - from) {
        phx_error(PHX_EINVAL,
                  "%s: length %" PRId64 " from start %" PRId64 " along dim %d of a tensor of shape %s, expected "
                  "0 <= length <= %" PRId64,
                  fn, length, start, dim, phx_tensor_shape_str(t, a, sizeof a), size - from);
        return NULL;
    }
    start = from;
    return slice_impl(fn, "narrow", t, d, start, length, 1);
}

phx_tensor *phx_slice(const phx_tensor *t, int dim, int64_t start, int64_t end, int64_t step)
{
    const char *fn = "phx_slice";
    static const char *const names[] = {"t"};
    int d;
    if (px_op_inputs(fn, 1, &t, names) || px_op_dim(fn, t, t->ndim, dim, &d)) return NULL;
    if (step < 1) {
        phx_error(PHX_EINVAL, "%s: step %" PRId64 ", expected >= 1", fn, step);
        return NULL;
    }
    int64_t size = t->shape[d];
    /* Python's slice rules: negative bounds count from the end, then clamp. */
    if (start < 0) start += size;
    if (end < 0) end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    int64_t length = (end - start + step - 1) / step;
    return slice_impl(fn, "slice", t, d, start, length, step);
}

/* ---- Joining: cat and stack (copies) ---- */

/* PHX_OK when every ts[i] is there, on ts[0]'s device with its dtype. */
static phx_status check_many(const char *fn, int n, const phx_tensor *const *ts)
{
    if (!ts) return phx_error(PHX_EINVAL, "%s: ts is NULL (n %d), expected an array of n tensors", fn, n);
    if (n < 1) return phx_error(PHX_EINVAL, "%s: %d tensors, expected at least 1", fn, n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return phx_last_error()[0] ? PHX_EINVAL : phx_error(PHX_EINVAL, "%s: ts[%d] is NULL", fn, i);
    for (int i = 0; i < n; i++) {
        char an[16];
        snprintf(an, sizeof an, "ts[%d]", i);
        if (px_tensor_live(fn, an, ts[i]) != PHX_OK) return PHX_ESTATE;
    }
    for (int i = 1; i < n; i++) {
        char an[16], bn[16];
        snprintf(an, sizeof an, "ts[0]");
        snprintf(bn, sizeof bn, "ts[%d]", i);
        phx_status st = px_op_same(fn, an, ts[0], bn, ts[i], true);
        if (st) return st;
    }
    return PHX_OK;
}

/* Each input's gradient: its part of the output gradient along the dim
 * (ctx->step 1: cat's parts; 0: stack's single positions). */
static phx_status join_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    const shape_ctx *c = px_node_ctx(n);
    int64_t off = 0;
    for (int i = 0; i < px_node_num_inputs(n); i++) {
        int64_t len = c->step ? px_node_in_shape(n, i)[c->dim] : 1;
        if (px_node_needs(n, i)) {
            phx_tensor *g = phx_narrow(grad, c->dim, off, len);
            if (g && !c->step) g = phx_reshape(g, px_node_in_ndim(n, i), px_node_in_shape(n, i));
            if (!g) return PHX_ENOMEM;
            in_grads[i] = g;
        }
        off += len;
    }
    return PHX_OK;
}

/* out <- the n inputs, input i at offset offs[i] along dim d of out with
 * its dims mapped onto out's by skipping `skip` (-1: none). */
static phx_tensor *join(const char *fn, const char *name, int n, const phx_tensor *const *ts, int ndim,
                        const int64_t *shape, int d, bool stacked)
{
    phx_tensor *out = px_op_new(fn, ts[0]->dtype, ndim, shape, ts[0]->storage->device);
    if (!out) return NULL;
    int64_t os[PHX_MAX_DIMS], off = 0;
    px_contiguous_strides(ndim, shape, os);
    size_t es = phx_dtype_size(out->dtype);
    for (int i = 0; i < n; i++) {
        const phx_tensor *t = ts[i];
        int64_t ds[PHX_MAX_DIMS], ss[PHX_MAX_DIMS];
        px_contiguous_strides(t->ndim, t->shape, ss);
        for (int k = 0, j = 0; k < ndim; k++)
            if (!stacked || k != d) ds[j++] = os[k];
        char *dst = (char *)px_tensor_ptr(out) + (size_t)(off * os[d]) * es;
        if (px_op_copy_strided(fn, out, t->ndim, t->shape, dst, ds, px_tensor_ptr(t), ss)) {
            phx_tensor_free(out);
            return NULL;
        }
        off += stacked ? 1 : t->shape[d];
    }
    shape_ctx *c;
    out = finish(name, join_backward, n, ts, out, &c);
    if (c) {
        c->dim = d;
        c->step = !stacked;
    }
    return out;
}

static phx_tensor *cat(int n, const phx_tensor *const *ts, int dim)
{
    const char *fn = "phx_cat";
    if (check_many(fn, n, ts)) return NULL;
    const phx_tensor *t0 = ts[0];
    char a[64], b[64];
    if (t0->ndim == 0) {
        phx_error(PHX_EINVAL, "%s: ts[0] has 0 dims, expected at least 1 (a 0-dim tensor cannot be joined)", fn);
        return NULL;
    }
    int d;
    if (px_op_dim(fn, t0, t0->ndim, dim, &d)) return NULL;
    int64_t s[PHX_MAX_DIMS];
    memcpy(s, t0->shape, sizeof s);
    for (int i = 1; i < n; i++) {
        const phx_tensor *t = ts[i];
        int bad = t->ndim != t0->ndim ? -2 : -1;
        for (int k = 0; k < t0->ndim && bad == -1; k++)
            if (k != d && t->shape[k] != t0->shape[k]) bad = k;
        if (bad != -1) {
            if (bad == -2)
                phx_error(PHX_EINVAL, "%s: ts[0] is %s and ts[%d] is %s: %d dims and %d, expected equal", fn,
                          phx_tensor_shape_str(t0, a, sizeof a), i, phx_tensor_shape_str(t, b, sizeof b), t0->ndim,
                          t->ndim);
            else
                phx_error(PHX_EINVAL,
                          "%s: ts[0] is %s and ts[%d] is %s: dim %d has sizes %" PRId64 " and %" PRId64
                          ", expected equal (every dim but the cat dim %d)",
                          fn, phx_tensor_shape_str(t0, a, sizeof a), i, phx_tensor_shape_str(t, b, sizeof b), bad,
                          t0->shape[bad], t->shape[bad], d);
            return NULL;
        }
        s[d] += t->shape[d];
    }
    return join(fn, "cat", n, ts, t0->ndim, s, d, false);
}

static phx_tensor *stack(int n, const phx_tensor *const *ts, int dim)
{
    const char *fn = "phx_stack";
    if (check_many(fn, n, ts)) return NULL;
    const phx_tensor *t0 = ts[0];
    char a[64], b[64];
    for (int i = 1; i < n; i++)
        if (!phx_tensor_same_shape(t0, ts[i])) {
            phx_error(PHX_EINVAL, "%s: ts[0] is %s and ts[%d] is %s, expected one shape", fn,
                      phx_tensor_shape_str(t0, a, sizeof a), i, phx_tensor_shape_str(ts[i], b, sizeof b));
            return NULL;
        }
    int d;
    if (px_op_dim(fn, t0, t0->ndim + 1, dim, &d)) return NULL;
    if (t0->ndim == PHX_MAX_DIMS) {
        phx_error(PHX_EINVAL, "%s: the tensors of shape %s have %d dims already, the most a tensor has", fn,
                  phx_tensor_shape_str(t0, a, sizeof a), PHX_MAX_DIMS);
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS];
    for (int i = 0, j = 0; i <= t0->ndim; i++) s[i] = i == d ? n : t0->shape[j++];
    return join(fn, "stack", n, ts, t0->ndim + 1, s, d, true);
}

/* Autocast's "promote" ops (PyTorch's cat and stack): inside a
 * forward-only module under fp16 or bf16, float inputs of different
 * dtypes (a mean, which autocast runs in f32, beside a max in f16) join
 * in the widest, f32 where any is f32 or they mix f16 and bf16, each
 * converted with a recorded phx_to_dtype; elsewhere they must agree. */
static phx_tensor *joined(phx_tensor *(*op)(int, const phx_tensor *const *, int), int n, const phx_tensor *const *ts,
                          int dim)
{
    if (px_autocast_dtype() == PHX_F32 || n < 2 || !ts) return op(n, ts, dim);
    phx_dtype wide = PHX_NUM_DTYPES;
    bool mixed = false;
    for (int i = 0; i < n; i++) {
        if (!ts[i] || !phx_dtype_is_float(ts[i]->dtype)) return op(n, ts, dim);
        if (wide != PHX_NUM_DTYPES && ts[i]->dtype != wide) mixed = true;
        if (wide == PHX_NUM_DTYPES || ts[i]->dtype == PHX_F32) wide = ts[i]->dtype;
    }
    if (!mixed) return op(n, ts, dim);
    if (wide != PHX_F32) wide = PHX_F32; /* f16 beside bf16: neither holds the other */
    const phx_tensor **conv = px_malloc((size_t)n * sizeof *conv);
    if (!conv) {
        phx_error(PHX_ENOMEM, "phx_cat/phx_stack: out of memory");
        return NULL;
    }
    phx_tensor *out = NULL;
    int i = 0;
    for (; i < n && (conv[i] = ts[i]->dtype == wide ? ts[i] : phx_to_dtype(ts[i], wide)) != NULL; i++) {}
    if (i == n) out = op(n, conv, dim);
    px_free(conv);
    return out;
}

phx_tensor *phx_cat(int n, const phx_tensor *const *ts, int dim)
{
    return joined(cat, n, ts, dim);
}

phx_tensor *phx_stack(int n, const phx_tensor *const *ts, int dim)
{
    return joined(stack, n, ts, dim);
}

/* ---- Splitting: pieces are narrows ---- */

/* Pieces of size along d; a dim of size 0 gives `empty` empty pieces
 * (torch: 1 for split, `chunks` for chunk). */
static int split_impl(const char *fn, const phx_tensor *t, int64_t size, int d, int64_t empty, phx_tensor **out,
                      int max_out)
{
    int64_t len = t->shape[d];
    int64_t count = len == 0 ? empty : (len + size - 1) / size;
    char a[64];
    if (count > 0 && !out) {
        phx_error(PHX_EINVAL,
                  "%s: out is NULL, expected room for the %" PRId64 " pieces of a tensor of shape %s along dim %d", fn,
                  count, phx_tensor_shape_str(t, a, sizeof a), d);
        return -1;
    }
    if (count > max_out) {
        phx_error(PHX_EINVAL,
                  "%s: a tensor of shape %s splits into %" PRId64 " pieces along dim %d, out has room "
                  "for %d",
                  fn, phx_tensor_shape_str(t, a, sizeof a), count, d, max_out);
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t start = len ? i * size : 0, l = len - start < size ? len - start : size;
        out[i] = phx_narrow(t, d, start, l);
        if (!out[i]) {
            /* Pieces handed to a scope go with it; without one they are ours. */
            if (!px_scope_open())
                for (int64_t k = 0; k < i; k++) phx_tensor_free(out[k]);
            return -1;
        }
    }
    return (int)count;
}

int phx_split(const phx_tensor *t, int64_t split_size, int dim, phx_tensor **out, int max_out)
{
    const char *fn = "phx_split";
    static const char *const names[] = {"t"};
    int d;
    if (px_op_inputs(fn, 1, &t, names) || px_op_dim(fn, t, t->ndim, dim, &d)) return -1;
    if (split_size < 1) {
        phx_error(PHX_EINVAL, "%s: split_size %" PRId64 ", expected >= 1", fn, split_size);
        return -1;
    }
    return split_impl(fn, t, split_size, d, 1, out, max_out);
}

int phx_chunk(const phx_tensor *t, int chunks, int dim, phx_tensor **out, int max_out)
{
    const char *fn = "phx_chunk";
    static const char *const names[] = {"t"};
    int d;
    if (px_op_inputs(fn, 1, &t, names) || px_op_dim(fn, t, t->ndim, dim, &d)) return -1;
    if (chunks < 1) {
        phx_error(PHX_EINVAL, "%s: %d chunks, expected >= 1", fn, chunks);
        return -1;
    }
    int64_t size = (t->shape[d] + chunks - 1) / chunks;
    return split_impl(fn, t, size ? size : 1, d, chunks, out, max_out);
}

/* ---- Expand (a copy) ---- */

static phx_status expand_backward(px_node *n, const phx_tensor *grad, phx_tensor **in_grads)
{
    in_grads[0] = px_sum_to(grad, px_node_in_ndim(n, 0), px_node_in_shape(n, 0));
    return in_grads[0] ? PHX_OK : PHX_ENOMEM;
}

phx_tensor *phx_expand(const phx_tensor *t, int ndim, const int64_t *shape)
{
    const char *fn = "phx_expand";
    static const char *const names[] = {"t"};
    if (px_op_inputs(fn, 1, &t, names) || check_ndim(fn, ndim, shape)) return NULL;
    char a[64], b[96];
    if (ndim < t->ndim) {
        phx_error(PHX_EINVAL, "%s: a tensor of shape %s cannot expand to %s: %d dims, expected at least %d", fn,
                  phx_tensor_shape_str(t, a, sizeof a), px_shape_str(ndim, shape, b, sizeof b), ndim, t->ndim);
        return NULL;
    }
    int64_t s[PHX_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int it = i - (ndim - t->ndim);
        int64_t have = it >= 0 ? t->shape[it] : 1;
        s[i] = shape[i] == -1 && it >= 0 ? have : shape[i];
        if (s[i] < 0 || (have != 1 && have != s[i])) {
            phx_error(PHX_EINVAL,
                      "%s: a tensor of shape %s cannot expand to %s: dim %d has size %" PRId64 ", expected %" PRId64
                      "%s",
                      fn, phx_tensor_shape_str(t, a, sizeof a), px_shape_str(ndim, shape, b, sizeof b), i, have,
                      shape[i], s[i] < 0 ? " (>= 0; -1 keeps only a dim the tensor has)" : " or a size-1 dim");
            return NULL;
        }
    }
    int64_t src[PHX_MAX_DIMS], dst[PHX_MAX_DIMS];
    px_broadcast_strides(t, ndim, s, src);
    px_contiguous_strides(ndim, s, dst);
    phx_tensor *out = px_op_new(fn, t->dtype, ndim, s, t->storage->device);
    if (out && px_op_copy_strided(fn, t, ndim, s, px_tensor_ptr(out), dst, px_tensor_ptr(t), src)) {
        phx_tensor_free(out);
        out = NULL;
    }
    return out ? finish("expand", expand_backward, 1, &t, out, NULL) : NULL;
}
