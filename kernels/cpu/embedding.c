/* Embedding rows on the CPU: a gather of f32 table rows into the output
 * dtype, and the scatter-add of the output gradient into the table's
 * gradient (rows in index order, so repeated indices sum the same way on
 * every run). */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_emb_fwd_loop(int64_t n, int64_t dim, const int64_t *idx, const float *w, void *y, int dt)
{
    for (int64_t i = 0; i < n; i++) {
        const float *row = w + idx[i] * dim;
        for (int64_t j = 0; j < dim; j++) px_st(y, dt, i * dim + j, row[j]);
    }
}

PX_INLINE void px_emb_bwd_loop(int64_t n, int64_t dim, const int64_t *idx, const void *dy, float *dw, int dt)
{
    for (int64_t i = 0; i < n; i++) {
        float *row = dw + idx[i] * dim;
        for (int64_t j = 0; j < dim; j++) row[j] += px_ld(dy, dt, i * dim + j);
    }
}

static phx_status emb_check(const char *who, int64_t n, int64_t num, int64_t dim)
{
    PX_CHECK_N(who, n);
    if (num < 1 || dim < 1)
        return phx_error(PHX_EINVAL, "%s: table (%lld, %lld), expected both sizes >= 1", who, (long long)num,
                         (long long)dim);
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_embedding_forward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                              const float *w, void *y, phx_dtype dt, int64_t *bad_host)
{
    (void)dev;
    phx_status st = emb_check("embedding_forward", n, num, dim);
    if (st != PHX_OK) return st;
    *bad_host = -1;
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= num) {
            *bad_host = i;
            return PHX_OK;
        }
    PX_FLOAT_DISPATCH("embedding_forward", dt, px_emb_fwd_loop(n, dim, idx, w, y, DT));
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_embedding_backward(int dev, int64_t n, int64_t num, int64_t dim, const int64_t *idx,
                                               const void *dy, phx_dtype dt, float *dw)
{
    (void)dev;
    phx_status st = emb_check("embedding_backward", n, num, dim);
    if (st != PHX_OK) return st;
    PX_FLOAT_DISPATCH("embedding_backward", dt, px_emb_bwd_loop(n, dim, idx, dy, dw, DT));
    return PHX_OK;
}
