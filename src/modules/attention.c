/* Causal multi-head self-attention (nanoGPT's CausalSelfAttention) on
 * (B, T, C) inputs, H heads of hs = C / H:
 *   qkv = c_attn(x)                         (B, T, 3C): q | k | v, head h at columns h*hs
 *   S_bh = q_bh k_bh^T                      (T, T), one strided-batched GEMM per b over h
 *   P_bh = softmax(S_bh / sqrt(hs), causal) in place, then dropout (training, p > 0)
 *   y_bh = P_bh v_bh                        written straight into (B, T, C) at column h*hs
 *   out  = dropout(c_proj(y))
 * q, k, v are read in place from qkv through leading dim 3C and head
 * stride hs, so no transposed copies exist; P (B, H, T, T) is what a
 * PyTorch eager run keeps too. Backward, per b over h:
 *   dP = dy_bh v_bh^T, dv = P^T dy_bh, dS = softmax'(dP) / sqrt(hs),
 *   dq = dS k_bh, dk = dS^T q_bh, into dqkv, then c_attn's backward. */
#include <math.h>
#include "src/modules/transformer-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/transformer.h"

typedef struct attention {
    int64_t C, H, hs;
    float p; /* dropout on the attention weights */
    uint64_t seed, offset; /* Philox stream of the attention dropout */
    phx_module *c_attn, *c_proj, *drop; /* drop: NULL when p == 0 */
    const phx_tensor *qkv; /* c_attn's output of the last forward (owned by c_attn) */
    bool dropped; /* the last forward masked P */
    int64_t B, T;
    px_buf att; /* (B, H, T, T) softmax output */
    px_buf attd; /* (B, H, T, T) after dropout */
    px_buf mask; /* dropout mask bytes */
    px_buf y; /* (B, T, C) heads side by side */
    px_buf datt; /* (B, H, T, T) */
    px_buf dqkv; /* (B, T, 3C) */
    phx_tensor *out; /* output of the last forward */
} attention;

static phx_status att_forward(phx_module *self, const phx_tensor *x, phx_tensor **yout)
{
    attention *A = phx_module_ctx(self);
    phx_status st = px_check_float_input("phx_attention_forward", x);
    if (st != PHX_OK) return st;
    if (x->ndim != 3 || x->shape[2] != A->C) {
        char a[64];
        return phx_error(PHX_EINVAL, "phx_attention_forward: input is %s, expected (B, T, %lld)",
                         phx_tensor_shape_str(x, a, sizeof a), (long long)A->C);
    }
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_attention_forward", dev, k, gemm_batched);
    PX_NEED_SLOT("phx_attention_forward", dev, k, softmax_forward);
    phx_tensor *qkv;
    if ((st = phx_module_forward(A->c_attn, x, &qkv)) != PHX_OK) return st;
    int64_t B = x->shape[0], T = x->shape[1], C = A->C, H = A->H, hs = A->hs, C3 = 3 * C;
    phx_dtype dt = qkv->dtype;
    size_t es = phx_dtype_size(dt);
    int64_t as[4] = {B, H, T, T}, ys[3] = {B, T, C};
    phx_tensor *att, *y;
    if ((st = px_buf_get(&A->att, dt, 4, as, dev, &att)) != PHX_OK ||
        (st = px_buf_get(&A->y, dt, 3, ys, dev, &y)) != PHX_OK)
        return st;
    char *q = px_tensor_ptr(qkv), *P = px_tensor_ptr(att), *yp = px_tensor_ptr(y);
    for (int64_t b = 0; b < B && st == PHX_OK; b++) {
        char *qb = q + (size_t)(b * T * C3) * es;
        st = k->gemm_batched(dev.index, 0, 1, T, T, hs, 1.0f, qb, C3, hs, qb + (size_t)C * es, C3, hs, dt, 0.0f,
                             P + (size_t)(b * H * T * T) * es, T, T * T, dt, H);
    }
    if (st == PHX_OK) st = k->softmax_forward(dev.index, B * H * T, T, (float)(1.0 / sqrt((double)hs)), 1, 0, P, P, dt);
    if (st != PHX_OK) return st;
    A->dropped = phx_module_is_training(self) && A->p > 0.0f;
    char *Pd = P;
    if (A->dropped) {
        int64_t n = B * H * T * T, words = (n + 3) / 4;
        phx_tensor *ad, *mask;
        if ((st = px_buf_get(&A->attd, dt, 4, as, dev, &ad)) != PHX_OK ||
            (st = px_buf_get(&A->mask, PHX_I32, 1, &words, dev, &mask)) != PHX_OK ||
            (st = k->dropout_forward(dev.index, n, A->p, A->seed, A->offset, P, px_tensor_ptr(ad), px_tensor_ptr(mask),
                                     dt)) != PHX_OK)
            return st;
        A->offset += (uint64_t)n;
        Pd = px_tensor_ptr(ad);
    }
    for (int64_t b = 0; b < B && st == PHX_OK; b++)
        st = k->gemm_batched(dev.index, 0, 0, T, hs, T, 1.0f, Pd + (size_t)(b * H * T * T) * es, T, T * T,
                             q + (size_t)(b * T * C3 + 2 * C) * es, C3, hs, dt, 0.0f, yp + (size_t)(b * T * C) * es, C,
                             hs, dt, H);
    phx_tensor *out;
    if (st != PHX_OK || (st = phx_module_forward(A->c_proj, y, &out)) != PHX_OK) return st;
    if (A->drop && (st = phx_module_forward(A->drop, out, &out)) != PHX_OK) return st;
    A->qkv = qkv;
    A->B = B;
    A->T = T;
    A->out = out;
    *yout = out;
    return PHX_OK;
}

static phx_status att_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    attention *A = phx_module_ctx(self);
    if (!A->out) return phx_error(PHX_ESTATE, "phx_attention_backward: no forward to differentiate");
    if (!px_dy_fits(dy, A->out)) return px_dy_mismatch("phx_attention_backward", dy, A->out);
    phx_device dev = dy->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_attention_backward", dev, k, softmax_backward);
    phx_status st;
    const phx_tensor *g = dy;
    phx_tensor *d;
    if (A->drop) {
        if ((st = phx_module_backward(A->drop, g, &d)) != PHX_OK) return st;
        g = d;
    }
    phx_tensor *dY;
    if ((st = phx_module_backward(A->c_proj, g, &dY)) != PHX_OK) return st;
    int64_t B = A->B, T = A->T, C = A->C, H = A->H, hs = A->hs, C3 = 3 * C;
    phx_dtype dt = A->qkv->dtype;
    size_t es = phx_dtype_size(dt);
    int64_t as[4] = {B, H, T, T}, qs[3] = {B, T, C3};
    phx_tensor *datt, *dqkv;
    if ((st = px_buf_get(&A->datt, dt, 4, as, dev, &datt)) != PHX_OK ||
        (st = px_buf_get(&A->dqkv, dt, 3, qs, dev, &dqkv)) != PHX_OK)
        return st;
    const phx_tensor *dYc = dY;
    if (dY->dtype != dt) /* c_proj runs in the same compute dtype: never taken */
        return phx_error(PHX_EINTERNAL, "phx_attention_backward: c_proj gave %s, expected %s",
                         phx_dtype_name(dY->dtype), phx_dtype_name(dt));
    char *q = px_tensor_ptr(A->qkv), *P = px_tensor_ptr(A->att.view), *dP = px_tensor_ptr(datt);
    char *Pd = A->dropped ? px_tensor_ptr(A->attd.view) : P, *dq = px_tensor_ptr(dqkv), *dyp = px_tensor_ptr(dYc);
    for (int64_t b = 0; b < B && st == PHX_OK; b++) {
        size_t ob = (size_t)(b * T * C3), oa = (size_t)(b * H * T * T), oy = (size_t)(b * T * C);
        /* dP = dY_bh v_bh^T; dv = P^T dY_bh */
        st = k->gemm_batched(dev.index, 0, 1, T, T, hs, 1.0f, dyp + oy * es, C, hs, q + (ob + 2 * C) * es, C3, hs, dt,
                             0.0f, dP + oa * es, T, T * T, dt, H);
        if (st == PHX_OK)
            st = k->gemm_batched(dev.index, 1, 0, T, hs, T, 1.0f, Pd + oa * es, T, T * T, dyp + oy * es, C, hs, dt,
                                 0.0f, dq + (ob + 2 * C) * es, C3, hs, dt, H);
    }
    if (st == PHX_OK && A->dropped)
        st = k->dropout_backward(dev.index, B * H * T * T, A->p, px_tensor_ptr(A->mask.view), dP, dP, dt);
    if (st == PHX_OK)
        st = k->softmax_backward(dev.index, B * H * T, T, (float)(1.0 / sqrt((double)hs)), 1, 0, P, dP, dP, dt);
    for (int64_t b = 0; b < B && st == PHX_OK; b++) {
        size_t ob = (size_t)(b * T * C3), oa = (size_t)(b * H * T * T);
        /* dq = dS k_bh; dk = dS^T q_bh */
        st = k->gemm_batched(dev.index, 0, 0, T, hs, T, 1.0f, dP + oa * es, T, T * T, q + (ob + C) * es, C3, hs, dt,
                             0.0f, dq + ob * es, C3, hs, dt, H);
        if (st == PHX_OK)
            st = k->gemm_batched(dev.index, 1, 0, T, hs, T, 1.0f, dP + oa * es, T, T * T, q + ob * es, C3, hs, dt, 0.0f,
                                 dq + (ob + C) * es, C3, hs, dt, H);
    }
    if (st != PHX_OK) return st;
    return phx_module_backward(A->c_attn, dqkv, dx);
}

static void att_free(phx_module *self)
{
    attention *A = phx_module_ctx(self);
    if (!A) return;
    px_buf_free(&A->att);
    px_buf_free(&A->attd);
    px_buf_free(&A->mask);
    px_buf_free(&A->y);
    px_buf_free(&A->datt);
    px_buf_free(&A->dqkv);
    px_free(A);
}

static phx_module *att_clone(const phx_module *self);

static const phx_module_vtable attention_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "CausalSelfAttention",
    .forward = att_forward,
    .backward = att_backward,
    .free = att_free,
    .clone = att_clone,
};

static phx_status add_child(phx_module *m, const char *name, phx_module *c, phx_module **slot)
{
    if (!c) return PHX_ENOMEM;
    phx_status st = phx_module_add_child(m, name, c);
    if (st != PHX_OK) {
        phx_module_free(c);
        return st;
    }
    *slot = c;
    return PHX_OK;
}

phx_module *phx_attention_new(int64_t d_model, int64_t n_head, float dropout, bool bias, uint64_t seed, phx_rng *rng)
{
    if (d_model < 1 || n_head < 1 || d_model % n_head != 0 || !(dropout >= 0.0f && dropout < 1.0f)) {
        phx_error(PHX_EINVAL,
                  "phx_attention_new: d_model %lld must be a positive multiple of n_head %lld and "
                  "dropout %g in [0, 1)",
                  (long long)d_model, (long long)n_head, (double)dropout);
        return NULL;
    }
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) return NULL;
    attention *A;
    phx_module *m = px_module_alloc(&attention_vt, sizeof *A, (void **)&A);
    if (m) {
        A->C = d_model;
        A->H = n_head;
        A->hs = d_model / n_head;
        A->p = dropout;
        A->seed = seed;
        if (add_child(m, "c_attn", phx_linear_new(d_model, 3 * d_model, bias, rng), &A->c_attn) != PHX_OK ||
            add_child(m, "c_proj", phx_linear_new(d_model, d_model, bias, rng), &A->c_proj) != PHX_OK ||
            (dropout > 0.0f && add_child(m, "resid_dropout", phx_dropout_new(dropout, seed + 1), &A->drop) != PHX_OK)) {
            phx_module_free(m);
            m = NULL;
        }
    }
    phx_rng_free(own);
    return m;
}

static phx_module *att_clone(const phx_module *self)
{
    const attention *A = phx_module_ctx(self);
    return px_tree_clone_values(phx_attention_new(A->C, A->H, A->p, A->c_attn->n_params > 1, A->seed, NULL), self);
}
