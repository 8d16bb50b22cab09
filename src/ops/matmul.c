/* torch.matmul: 1-D operands are promoted to matrices ((k) as (1, k) on
 * the left, (k, 1) on the right) and the added dim is removed from the
 * result; batch dims (all but the last two) broadcast. The products run on
 * the gemm slot: one call when the right operand has no batch (the left's
 * batch folds into its rows, as a Linear layer's input), gemm_batched when
 * both batches are equal, one gemm per batch entry otherwise. Gradients:
 * dA = dC B^T and dB = A^T dC on the promoted shapes, summed over the
 * broadcast batch dims (px_sum_to). */
#include "config.h"
#include <string.h>
#include "src/ops/math-impl.h"

/* op(x) @ op(y) for promoted operands (>= 2 dims each): x (.., r, c)
 * transposed when tx, likewise y. The result has the broadcast batch. */
static phx_tensor *mm_raw(const char *fn, const phx_tensor *x, bool tx, const phx_tensor *y, bool ty)
{
    const phx_kernels_v1 *k = PX_OP_SLOT(fn, x, gemm);
    if (!k) return NULL;
    int xb = x->ndim - 2, yb = y->ndim - 2;
    int64_t xr = x->shape[xb], xc = x->shape[xb + 1], yr = y->shape[yb], yc = y->shape[yb + 1];
    int64_t m = tx ? xc : xr, kx = tx ? xr : xc, ky = ty ? yc : yr, n = ty ? yr : yc;
    if (kx != ky) {
        char sa[64], sb[64];
        phx_error(PHX_EINVAL, "%s: shapes %s and %s cannot be multiplied (%lld and %lld in the contracted dim)", fn,
                  phx_tensor_shape_str(x, sa, sizeof sa), phx_tensor_shape_str(y, sb, sizeof sb), (long long)kx,
                  (long long)ky);
        return NULL;
    }
    /* the broadcast batch */
    int nb = xb > yb ? xb : yb;
    int64_t shape[PHX_MAX_DIMS], bx[PHX_MAX_DIMS], by[PHX_MAX_DIMS];
    for (int i = 0; i < nb; i++) {
        int ix = xb - nb + i, iy = yb - nb + i;
        int64_t dx = ix >= 0 ? x->shape[ix] : 1, dy = iy >= 0 ? y->shape[iy] : 1;
        if (dx != dy && dx != 1 && dy != 1) {
            char sa[64], sb[64];
            phx_error(PHX_EINVAL,
                      "%s: shapes %s and %s cannot broadcast their batch dims: batch dim %d has sizes %lld and %lld, "
                      "expected equal or 1",
                      fn, phx_tensor_shape_str(x, sa, sizeof sa), phx_tensor_shape_str(y, sb, sizeof sb), i,
                      (long long)dx, (long long)dy);
            return NULL;
        }
        shape[i] = dx == 1 ? dy : dx;
        bx[i] = ix >= 0 ? x->shape[ix] : 1;
        by[i] = iy >= 0 ? y->shape[iy] : 1;
    }
    shape[nb] = m, shape[nb + 1] = n;
    phx_device dev = x->storage->device;
    phx_tensor *c = px_op_new(fn, x->dtype, nb + 2, shape, dev);
    if (!c) return NULL;
    int64_t batch = 1, xbatch = 1, ybatch = 1;
    for (int i = 0; i < nb; i++) batch *= shape[i], xbatch *= bx[i], ybatch *= by[i];
    /* leading dims of at least 1: the gemm slot holds an empty operand
     * ((m, 0), (0, n)) to BLAS's rule too */
    int64_t lda = xc > 1 ? xc : 1, ldb = yc > 1 ? yc : 1, ldc = n > 1 ? n : 1, xs = xr * xc, ys = yr * yc;
    const char *px = px_tensor_ptr(x), *py = px_tensor_ptr(y);
    char *pc = px_tensor_ptr(c);
    size_t es = phx_dtype_size(x->dtype);
    phx_status st = PHX_OK;
    if (ybatch == 1 && !tx) { /* y has no batch: x's batch folds into its rows */
        st = k->gemm(dev.index, 0, ty, batch * m, n, kx, 1.0f, px, lda, py, ldb, x->dtype, 0.0f, pc, ldc, x->dtype);
    } else if (xbatch == batch && ybatch == batch && k->gemm_batched) {
        st = k->gemm_batched(dev.index, tx, ty, m, n, kx, 1.0f, px, lda, xs, py, ldb, ys, x->dtype, 0.0f, pc, ldc,
                             m * n, x->dtype, batch);
    } else {
        int64_t sx[PHX_MAX_DIMS], sy[PHX_MAX_DIMS], acc_x = 1, acc_y = 1;
        for (int i = nb - 1; i >= 0; i--) { /* batch strides in matrices, 0 where broadcast */
            sx[i] = bx[i] == 1 ? 0 : acc_x;
            sy[i] = by[i] == 1 ? 0 : acc_y;
            acc_x *= bx[i], acc_y *= by[i];
        }
        for (int64_t b = 0; b < batch && !st; b++) {
            int64_t r = b, ox = 0, oy = 0;
            for (int i = nb - 1; i >= 0; i--) {
                int64_t ci = r % shape[i];
                r /= shape[i];
                ox += ci * sx[i], oy += ci * sy[i];
            }
            st =
                k->gemm(dev.index, tx, ty, m, n, kx, 1.0f, px + (size_t)(ox * xs) * es, lda,
                        py + (size_t)(oy * ys) * es, ldb, x->dtype, 0.0f, pc + (size_t)(b * m * n) * es, ldc, x->dtype);
        }
    }
    if (st) {
        phx_tensor_free(c);
        return NULL;
    }
    return px_scope_own(c);
}

/* t promoted to >= 2 dims: (k) as (1, k) when left, (k, 1) when right. */
static phx_tensor *promote(const phx_tensor *t, bool left)
{
    if (t->ndim >= 2) return px_scope_own(phx_tensor_retain((phx_tensor *)t));
    int64_t s[2] = {left ? 1 : t->shape[0], left ? t->shape[0] : 1};
    return px_view_as(t, 2, s);
}

static phx_status matmul_bwd(px_node *n, const phx_tensor *g, phx_tensor **in_grads)
{
    const phx_tensor *a = px_node_saved(n, 0), *b = px_node_saved(n, 1);
    if (!a || !b) return PHX_ESTATE;
    phx_tensor *A = promote(a, true), *B = promote(b, false);
    if (!A || !B) return PHX_ENOMEM;
    /* g with the promoted result's shape: batch, m, n */
    int nb = (A->ndim > B->ndim ? A->ndim : B->ndim) - 2;
    int64_t gs[PHX_MAX_DIMS];
    int j = g->ndim - 1;
    gs[nb + 1] = b->ndim == 1 ? 1 : g->shape[j--];
    gs[nb] = a->ndim == 1 ? 1 : g->shape[j--];
    for (int i = nb - 1; i >= 0; i--) gs[i] = g->shape[j--];
    phx_tensor *G = px_view_as(g, nb + 2, gs);
    if (px_node_needs(n, 0)) {
        phx_tensor *da = mm_raw("matmul", G, false, B, true);
        if (!(in_grads[0] = px_view_as(px_sum_to(da, A->ndim, A->shape), a->ndim, a->shape))) return PHX_EINVAL;
    }
    if (px_node_needs(n, 1)) {
        phx_tensor *db;
        if (B->ndim == 2 && nb > 0) { /* B has no batch, so A's is the result's: fold it into rows */
            int64_t rows = 1; /* A's and G's rows: the batch times m (a product: k or n may be 0) */
            for (int i = 0; i <= nb; i++) rows *= gs[i];
            int64_t as[2] = {rows, A->shape[nb + 1]}, gs2[2] = {rows, G->shape[nb + 1]};
            db = mm_raw("matmul", px_view_as(A, 2, as), true, px_view_as(G, 2, gs2), false);
        } else {
            db = mm_raw("matmul", A, true, G, false);
        }
        if (!(in_grads[1] = px_view_as(px_sum_to(db, B->ndim, B->shape), b->ndim, b->shape))) return PHX_EINVAL;
    }
    return PHX_OK;
}

static phx_tensor *matmul(const phx_tensor *a, const phx_tensor *b)
{
    const char *fn = "matmul";
    const phx_tensor *in[2] = {a, b};
    if (px_op_inputs(fn, 2, in, (const char *const[]){"a", "b"}) || px_op_same(fn, "a", a, "b", b, true) ||
        px_op_float(fn, "a", a))
        return NULL;
    if (a->ndim == 0 || b->ndim == 0) {
        char sa[64], sb[64];
        phx_error(PHX_EINVAL, "matmul: shapes %s and %s, expected at least 1 dim each (use phx_mul for scalars)",
                  phx_tensor_shape_str(a, sa, sizeof sa), phx_tensor_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    phx_scope *s = phx_scope_begin();
    if (!s) return NULL;
    phx_tensor *A = promote(a, true), *B = promote(b, false);
    phx_tensor *C = A && B ? mm_raw(fn, A, false, B, false) : NULL;
    if (C) phx_tensor_retain(C);
    phx_scope_end(s);
    if (!C) return NULL;
    phx_tensor *out = C;
    if (a->ndim == 1 || b->ndim == 1) { /* drop the promoted dims */
        int64_t os[PHX_MAX_DIMS];
        int nd = 0;
        for (int i = 0; i < C->ndim - 2; i++) os[nd++] = C->shape[i];
        if (a->ndim != 1) os[nd++] = C->shape[C->ndim - 2];
        if (b->ndim != 1) os[nd++] = C->shape[C->ndim - 1];
        out = px_tensor_view(C, 0, nd, os);
        phx_tensor_free(C);
        if (!out) return NULL;
    }
    px_node *n;
    out = px_op_finish(fn, matmul_bwd, 2, in, out, &n);
    if (out && n) {
        px_node_save(n, a);
        px_node_save(n, b);
    }
    return out;
}

/* Under autocast both float operands go to the compute dtype (an f32
 * parameter's value with a recorded cast, so its gradient returns in f32). */
phx_tensor *phx_matmul(const phx_tensor *a, const phx_tensor *b)
{
    phx_dtype ac = px_autocast_dtype();
    if (ac != PHX_F32 && a && b && phx_dtype_is_float(a->dtype) && phx_dtype_is_float(b->dtype) &&
        (a->dtype != ac || b->dtype != ac))
        return matmul(phx_to_dtype(a, ac), phx_to_dtype(b, ac));
    return matmul(a, b);
}
