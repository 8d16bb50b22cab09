/* The attention kernels on the CPU: strided-batched GEMM (one cblas_sgemm
 * per matrix through px_cpu_gemm) and softmax / log-softmax over rows
 * with an optional causal mask, forward and backward. Softmax math is f32
 * whatever the storage dtype.
 *   forward:  m = max_j s x_j, e_j = exp(s x_j - m), y_j = e_j / sum e
 *             (log: y_j = s x_j - m - log sum e)
 *   backward: dx_j = s y_j (dy_j - sum_k y_k dy_k)
 *             (log: dx_j = s (dy_j - exp(y_j) sum_k dy_k))
 * Under the causal mask row r keeps columns 0 .. r % cols; the others
 * are outputs 0 (-inf for log) and gradients 0. */
#include "config.h"
#include <math.h>
#include "kernels/cpu/cpu.h"

phx_status px_cpu_gemm_batched(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                               const void *a, int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                               int64_t stride_b, phx_dtype adt, float beta, void *c, int64_t ldc, int64_t stride_c,
                               phx_dtype cdt, int64_t batch)
{
    if (batch < 0) return phx_error(PHX_EINVAL, "gemm_batched: batch %lld, expected >= 0", (long long)batch);
    size_t ea = phx_dtype_size(adt), ec = phx_dtype_size(cdt);
    for (int64_t i = 0; i < batch; i++) {
        phx_status st =
            px_cpu_gemm(dev, trans_a, trans_b, m, n, k, alpha, (const char *)a + (size_t)(i * stride_a) * ea, lda,
                        (const char *)b + (size_t)(i * stride_b) * ea, ldb, adt, beta,
                        (char *)c + (size_t)(i * stride_c) * ec, ldc, cdt);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* The sum of p[0..n) in 8 lanes, so the compiler's vector clones keep
 * whole vectors in flight (a single accumulator is a serial chain). */
PX_INLINE float lanes_sum(const float acc[8])
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

PX_INLINE void px_softmax_fwd_loop(int64_t rows, int64_t cols, float scale, int causal, int lg, const void *x, void *y,
                                   float *e, int dt)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols, lim = causal ? r % cols + 1 : cols, c;
        float mx = -INFINITY;
        for (c = 0; c < lim; c++) {
            e[c] = scale * px_ld(x, dt, o + c);
            mx = e[c] > mx ? e[c] : mx;
        }
        /* e <- exp(e - mx) once (phx_expf vectorises; libm's expf does
         * not), summed in 8 lanes */
        float acc[8] = {0};
        for (c = 0; c + 8 <= lim; c += 8)
            for (int k = 0; k < 8; k++) {
                float v = phx_expf(e[c + k] - mx);
                acc[k] += v;
                if (!lg) e[c + k] = v;
            }
        for (; c < lim; c++) {
            float v = phx_expf(e[c] - mx);
            acc[0] += v;
            if (!lg) e[c] = v;
        }
        float sum = lanes_sum(acc);
        if (lg) {
            float ls = mx + logf(sum);
            for (c = 0; c < lim; c++) px_st(y, dt, o + c, e[c] - ls);
        } else {
            float inv = 1.0f / sum;
            for (c = 0; c < lim; c++) px_st(y, dt, o + c, e[c] * inv);
        }
        for (c = lim; c < cols; c++) px_st(y, dt, o + c, lg ? -INFINITY : 0.0f);
    }
}

PX_INLINE void px_softmax_bwd_loop(int64_t rows, int64_t cols, float scale, int causal, int lg, const void *y,
                                   const void *dy, void *dx, int dt)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols, lim = causal ? r % cols + 1 : cols, c;
        float acc8[8] = {0};
        for (c = 0; c + 8 <= lim; c += 8)
            for (int k = 0; k < 8; k++)
                acc8[k] += lg ? px_ld(dy, dt, o + c + k) : px_ld(y, dt, o + c + k) * px_ld(dy, dt, o + c + k);
        for (; c < lim; c++) acc8[0] += lg ? px_ld(dy, dt, o + c) : px_ld(y, dt, o + c) * px_ld(dy, dt, o + c);
        float acc = lanes_sum(acc8);
        for (c = 0; c < lim; c++) {
            float yy = px_ld(y, dt, o + c), d = px_ld(dy, dt, o + c);
            px_st(dx, dt, o + c, lg ? scale * (d - phx_expf(yy) * acc) : scale * yy * (d - acc));
        }
        for (c = lim; c < cols; c++) px_st(dx, dt, o + c, 0.0f);
    }
}

static phx_status softmax_check(const char *who, int64_t rows, int64_t cols)
{
    PX_CHECK_N(who, rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "%s: %lld columns, expected >= 1", who, (long long)cols);
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_softmax_forward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                            const void *x, void *y, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_forward", rows, cols);
    if (st != PHX_OK) return st;
    float *e = px_cpu_scratch(3, (size_t)cols * sizeof(float));
    if (!e) return PHX_ENOMEM;
    PX_FLOAT_DISPATCH("softmax_forward", dt, px_softmax_fwd_loop(rows, cols, scale, causal, log, x, y, e, DT));
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_softmax_backward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                             const void *y, const void *dy, void *dx, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_backward", rows, cols);
    if (st != PHX_OK) return st;
    PX_FLOAT_DISPATCH("softmax_backward", dt, px_softmax_bwd_loop(rows, cols, scale, causal, log, y, dy, dx, DT));
    return PHX_OK;
}
