/* PowerSGD as a DDP communication hook, following PyTorch 1.13's
 * powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/
 * powerSGD_hook.py) step for step:
 *
 *   launch:   [steps < start_iter: divide by the world size, all-reduce]
 *             g += error (error feedback); keep a copy of g;
 *             per gradient M (rows = shape[0], cols = numel / rows,
 *             r = min(rows, cols, rank)): compress when
 *             (rows + cols) * r * min_compression_rate < rows * cols;
 *             Q: fresh normal values (first step, or every step without
 *             warm start) or last step's, orthogonalised (Gram-Schmidt);
 *             P = M Q; one all-reduce of [uncompressed gradients | Ps]
 *   complete: uncompressed /= world, copied back; P orthogonalised;
 *             Q = M^T P; all-reduce of Qs, / world; M <- P Q^T;
 *             error = copy - g (every element of the bucket, the
 *             uncompressed ones included, as PyTorch); step count + 1
 *             after the last bucket.
 *
 * PyTorch all-reduces the uncompressed tensors and the Ps one after the
 * other; here they share one all-reduce (element-wise sums: the same
 * values, one collective fewer). PyTorch orthogonalises with QR above
 * rank 2; Gram-Schmidt is used at every rank here (the same subspace: the
 * product P Q^T does not depend on the columns' signs). The products run
 * through phx_gemm in f32, as torch.bmm; the norms and dot products of
 * the orthogonalisation accumulate in double. */
#include <math.h>
#include <string.h>
#include "src/ddp/ddp-hook.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

#define PSGD_MAGIC 0x50534744u /* "PSGD" */

/* One gradient of a bucket: its place and whether it is compressed. */
typedef struct psgd_mat {
    int64_t off; /* element offset in the bucket */
    int64_t rows, cols, r; /* the (rows, cols) view and its approximation rank */
    bool compress;
    int64_t unc_off; /* uncompressed: offset in the shared buffer */
    int64_t p_off, q_off; /* compressed: offsets of P (rows, r) and Q (cols, r) */
    size_t param; /* model index */
    phx_tensor *mv, *pv, *qv; /* compressed: views of M (rows, cols), P (rows, r), Q (cols, r) */
} psgd_mat;

typedef struct psgd_bucket {
    bool compressing; /* this step's launch took the PowerSGD path */
    int64_t numel; /* the bucket's size when its layout was made (0: none yet) */
    size_t n;
    psgd_mat *mats; /* (n) */
    int64_t n_unc, total_p, total_q;
    float *error; /* (numel) error feedback */
    bool has_error;
    float *copy; /* (numel) the input after error feedback */
    const void *data; /* the bucket's memory the views point into */
    phx_tensor *pu; /* (n_unc + total_p) f32: uncompressed gradients, then Ps */
    phx_tensor *q; /* (total_q) f32: Qs */
    bool has_q; /* q holds last step's values (warm start) */
} psgd_bucket;

struct phx_powersgd_state {
    uint32_t magic;
    phx_powersgd_opts o;
    int64_t iter;
    phx_rng *rng;
    psgd_bucket *b;
    size_t nb;
};

phx_powersgd_state *phx_powersgd_state_new(const phx_powersgd_opts *opts)
{
    static const char fn[] = "phx_powersgd_state_new";
    phx_powersgd_opts o = PHX_POWERSGD_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, fn, "phx_powersgd_opts", "PHX_POWERSGD_OPTS_INIT") != PHX_OK) return NULL;
    if (!o.matrix_approximation_rank) o.matrix_approximation_rank = 1;
    if (!o.start_iter) o.start_iter = 1000;
    if (o.min_compression_rate == 0) o.min_compression_rate = 2;
    const char *bad = o.matrix_approximation_rank < 0 ? "matrix_approximation_rank is negative"
        : o.start_iter < 0                            ? "start_iter is negative"
        : !(o.min_compression_rate >= 0)              ? "min_compression_rate is negative or NaN"
        : !(o.orthogonalization_epsilon >= 0)         ? "orthogonalization_epsilon is negative or NaN"
        : (!o.no_error_feedback || !o.no_warm_start) && o.start_iter < 2
        ? "start_iter must be at least 2 with error feedback or warm start (the buckets are "
          "rebuilt after the first step)"
        : NULL;
    if (bad) {
        phx_error(PHX_EINVAL, "%s: %s", fn, bad);
        return NULL;
    }
    phx_powersgd_state *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->magic = PSGD_MAGIC;
    s->o = o;
    if (!(s->rng = phx_rng_new(o.random_seed))) {
        px_free(s);
        return NULL;
    }
    return s;
}

static void bucket_clear(psgd_bucket *k)
{
    for (size_t j = 0; j < k->n; j++) {
        phx_tensor_free(k->mats[j].mv);
        phx_tensor_free(k->mats[j].pv);
        phx_tensor_free(k->mats[j].qv);
    }
    px_free(k->mats);
    px_free(k->error);
    px_free(k->copy);
    phx_tensor_free(k->pu);
    phx_tensor_free(k->q);
    memset(k, 0, sizeof *k);
}

void phx_powersgd_state_free(phx_powersgd_state *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->nb; i++) bucket_clear(&s->b[i]);
    px_free(s->b);
    phx_rng_free(s->rng);
    s->magic = 0;
    px_free(s);
}

int64_t phx_powersgd_iter(const phx_powersgd_state *s)
{
    return s && s->magic == PSGD_MAGIC ? s->iter : -1;
}

phx_status px_powersgd_check(void *state, const char *fn)
{
    phx_powersgd_state *s = state;
    if (!s || s->magic != PSGD_MAGIC)
        return phx_error(PHX_EINVAL, "%s: the PowerSGD hook's state must be a phx_powersgd_state (got %s)", fn,
                         s ? "another pointer" : "NULL");
    return PHX_OK;
}

/* ---- small dense algebra on row-major f32 ----------------------------- */

/* Gram-Schmidt on the r columns of a (n, r), PyTorch's
 * _orthogonalize_gram_schmidt: each column is normalised (a zero column
 * with epsilon 0 stays zero), then removed from the columns after it. */
static void orthogonalize(float *a, int64_t n, int64_t r, float eps)
{
    for (int64_t i = 0; i < r; i++) {
        double ss = 0;
        for (int64_t j = 0; j < n; j++) ss += (double)a[j * r + i] * a[j * r + i];
        float norm = (float)sqrt(ss) + eps;
        for (int64_t j = 0; j < n; j++) a[j * r + i] = norm > 0 ? a[j * r + i] / norm : 0.0f;
        for (int64_t k = i + 1; k < r; k++) {
            double dot = 0;
            for (int64_t j = 0; j < n; j++) dot += (double)a[j * r + i] * a[j * r + k];
            float fd = (float)dot;
            for (int64_t j = 0; j < n; j++) a[j * r + k] -= fd * a[j * r + i];
        }
    }
}

/* ---- the hook ---------------------------------------------------------- */

static psgd_bucket *bucket_state(phx_powersgd_state *s, size_t index)
{
    if (index >= s->nb) {
        psgd_bucket *n = px_realloc(s->b, (index + 1) * sizeof *n);
        if (!n) return NULL;
        memset(n + s->nb, 0, (index + 1 - s->nb) * sizeof *n);
        s->b = n;
        s->nb = index + 1;
    }
    return &s->b[index];
}

/* The bucket's layout and memory, made at its first PowerSGD step (and
 * again, with fresh error and Q, if its gradients changed). */
static phx_status layout(phx_powersgd_state *s, psgd_bucket *k, const phx_comm_hook_bucket *b)
{
    int64_t numel = phx_tensor_numel(b->buffer), base = phx_tensor_offset(b->buffer);
    bool same = k->numel == numel && k->n == b->n_grads && k->data == px_tensor_ptr(b->buffer);
    for (size_t j = 0; same && j < b->n_grads; j++)
        same = k->mats[j].param == b->params[j] && k->mats[j].off == phx_tensor_offset(b->grads[j]) - base;
    if (same) return PHX_OK;
    bucket_clear(k);
    k->mats = px_calloc(b->n_grads ? b->n_grads : 1, sizeof *k->mats);
    k->error = px_calloc((size_t)(numel ? numel : 1), sizeof *k->error);
    k->copy = px_malloc((size_t)(numel ? numel : 1) * sizeof *k->copy);
    if (!k->mats || !k->error || !k->copy) return PHX_ENOMEM;
    k->n = b->n_grads;
    int64_t rank = s->o.matrix_approximation_rank;
    for (size_t j = 0; j < b->n_grads; j++) {
        const phx_tensor *g = b->grads[j];
        psgd_mat *m = &k->mats[j];
        m->param = b->params[j];
        m->off = phx_tensor_offset(g) - base;
        int64_t n = phx_tensor_numel(g);
        m->rows = phx_tensor_ndim(g) > 0 ? phx_tensor_dim(g, 0) : 1;
        m->cols = m->rows > 0 ? n / m->rows : 0;
        m->r = rank < m->rows ? rank : m->rows;
        if (m->cols < m->r) m->r = m->cols;
        m->compress = (double)((m->rows + m->cols) * m->r) * s->o.min_compression_rate < (double)(m->rows * m->cols);
        if (m->compress) {
            m->p_off = k->total_p;
            m->q_off = k->total_q;
            k->total_p += m->rows * m->r;
            k->total_q += m->cols * m->r;
        } else {
            m->unc_off = k->n_unc;
            k->n_unc += n;
        }
    }
    int64_t npu = k->n_unc + k->total_p, nq = k->total_q;
    if (npu > 0 && !(k->pu = phx_tensor_new(PHX_F32, 1, &npu, phx_cpu()))) return PHX_ENOMEM;
    if (nq > 0 && !(k->q = phx_tensor_new(PHX_F32, 1, &nq, phx_cpu()))) return PHX_ENOMEM;
    for (size_t j = 0; j < k->n; j++) {
        psgd_mat *m = &k->mats[j];
        if (!m->compress) continue;
        int64_t ms[2] = {m->rows, m->cols}, ps[2] = {m->rows, m->r}, qs[2] = {m->cols, m->r};
        m->mv = px_tensor_view(b->buffer, m->off, 2, ms);
        m->pv = px_tensor_view(k->pu, k->n_unc + m->p_off, 2, ps);
        m->qv = px_tensor_view(k->q, m->q_off, 2, qs);
        if (!m->mv || !m->pv || !m->qv) return PHX_ENOMEM;
    }
    k->numel = numel;
    k->data = px_tensor_ptr(b->buffer);
    return PHX_OK;
}

static phx_status vanilla(phx_powersgd_state *s, const phx_comm_hook_bucket *b, phx_work **work)
{
    /* PyTorch's maybe_increase_iter runs before this all-reduce. */
    if (b->is_last) s->iter++;
    phx_status st = PHX_OK;
    if (b->divisor > 1) st = phx_tensor_axpby(0.0f, NULL, 1.0f / (float)b->divisor, b->buffer);
    if (st == PHX_OK) st = phx_comm_allreduce(b->comm, b->buffer, PHX_SUM, work);
    if (st == PHX_OK && b->bytes) *b->bytes += phx_tensor_nbytes(b->buffer);
    return st;
}

phx_status px_powersgd_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work)
{
    phx_powersgd_state *s = state;
    phx_status st = px_powersgd_check(state, "powerSGD hook");
    if (st != PHX_OK) return st;
    if (phx_tensor_device(b->buffer).kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "powerSGD hook: bucket %zu is not on the CPU", b->index);
    psgd_bucket *k = bucket_state(s, b->index);
    if (!k) return PHX_ENOMEM;
    k->compressing = false;
    if (s->iter < s->o.start_iter) return vanilla(s, b, work);
    if ((st = layout(s, k, b)) != PHX_OK) return st; /* may clear *k */
    k->compressing = true;
    float *g = px_tensor_ptr(b->buffer);
    int64_t numel = k->numel;
    if (!s->o.no_error_feedback) {
        if (k->has_error)
            for (int64_t i = 0; i < numel; i++) g[i] += k->error[i];
        else
            memset(k->error, 0, (size_t)numel * sizeof *k->error);
        k->has_error = true;
        memcpy(k->copy, g, (size_t)numel * sizeof *g);
    }
    float *pu = k->pu ? px_tensor_ptr(k->pu) : NULL, *q = k->q ? px_tensor_ptr(k->q) : NULL;
    bool fresh = s->o.no_warm_start || !k->has_q;
    if (fresh && k->q && !s->o.init_q && (st = phx_rng_normal(s->rng, k->q, 0.0f, 1.0f)) != PHX_OK) return st;
    for (size_t j = 0; j < k->n; j++) {
        psgd_mat *m = &k->mats[j];
        if (!m->compress) {
            memcpy(pu + m->unc_off, g + m->off, (size_t)(m->rows * m->cols) * sizeof *g);
            continue;
        }
        float *qj = q + m->q_off;
        if (fresh && s->o.init_q) s->o.init_q(s->o.init_q_user, b->index, m->param, m->cols, m->r, qj);
        orthogonalize(qj, m->cols, m->r, s->o.orthogonalization_epsilon);
        if ((st = phx_gemm(false, false, 1.0f, m->mv, m->qv, 0.0f, m->pv)) != PHX_OK) return st; /* P = M Q */
    }
    k->has_q = true;
    if (!k->pu) return PHX_OK;
    st = phx_comm_allreduce(b->comm, k->pu, PHX_SUM, work);
    if (st == PHX_OK && b->bytes) *b->bytes += phx_tensor_nbytes(k->pu);
    return st;
}

static phx_status powersgd_complete(void *state, const phx_comm_hook_bucket *b)
{
    phx_powersgd_state *s = state;
    psgd_bucket *k = b->index < s->nb ? &s->b[b->index] : NULL;
    if (!k) return phx_error(PHX_ESTATE, "powerSGD hook: bucket %zu completes without a launch", b->index);
    if (!k->compressing) return PHX_OK;
    float *g = px_tensor_ptr(b->buffer);
    float *pu = k->pu ? px_tensor_ptr(k->pu) : NULL, *q = k->q ? px_tensor_ptr(k->q) : NULL;
    float world = (float)b->divisor;
    for (size_t j = 0; j < k->n; j++) {
        psgd_mat *m = &k->mats[j];
        if (!m->compress) {
            const float *u = pu + m->unc_off;
            float *d = g + m->off;
            for (int64_t i = 0; i < m->rows * m->cols; i++) d[i] = u[i] / world;
            continue;
        }
        float *pj = pu + k->n_unc + m->p_off;
        orthogonalize(pj, m->rows, m->r, s->o.orthogonalization_epsilon);
    }
    phx_status st = PHX_OK;
    if (k->q) {
        for (size_t j = 0; j < k->n; j++) {
            psgd_mat *m = &k->mats[j];
            if (m->compress && (st = phx_gemm(true, false, 1.0f, m->mv, m->pv, 0.0f, m->qv)) != PHX_OK)
                return st; /* Q = M^T P */
        }
        st = phx_comm_allreduce(b->comm, k->q, PHX_SUM, NULL);
        if (st != PHX_OK) return st;
        if (b->bytes) *b->bytes += phx_tensor_nbytes(k->q);
        for (int64_t i = 0; i < k->total_q; i++) q[i] /= world;
        for (size_t j = 0; j < k->n; j++) {
            psgd_mat *m = &k->mats[j];
            if (m->compress && (st = phx_gemm(false, true, 1.0f, m->pv, m->qv, 0.0f, m->mv)) != PHX_OK)
                return st; /* M = P Q^T */
        }
    }
    if (!s->o.no_error_feedback)
        for (int64_t i = 0; i < k->numel; i++) k->error[i] = k->copy[i] - g[i];
    if (s->o.no_warm_start) k->has_q = false;
    if (b->is_last) s->iter++;
    return PHX_OK;
}

static const phx_comm_hook powersgd_hook = {
    .struct_size = sizeof(phx_comm_hook),
    .name = "powerSGD",
    .launch = px_powersgd_launch,
    .complete = powersgd_complete,
};

const phx_comm_hook *phx_comm_hook_powersgd(void)
{
    return &powersgd_hook;
}
