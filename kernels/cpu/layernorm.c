/* LayerNorm over the last dimension, PyTorch's definition: biased
 * variance, eps inside the sqrt; statistics in f32 (two passes over x
 * shifted by its first element).
 *   forward:  xhat = (x - mean) rstd, y = xhat w + b
 *   backward: g = dy w, dx = rstd (g - mean(g) - xhat mean(g xhat)),
 *             dw += sum_rows dy xhat, db += sum_rows dy */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_ln_fwd_loop(int64_t rows, int64_t cols, float eps, const void *x, const float *w, const float *b,
                              void *y, float *mean_out, float *rstd_out, int dt)
{
    float inv_n = 1.0f / (float)cols;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols;
        /* statistics of x - x0 (exact for nearby values): a large common
         * offset costs no precision in d = mean - x0 or in the variance */
        float x0 = px_ld(x, dt, o);
        float d = px_sum_shifted(x, dt, o, cols, x0) * inv_n;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= cols; i += 8)
            for (int j = 0; j < 8; j++) {
                float c = (px_ld(x, dt, o + i + j) - x0) - d;
                acc[j] += c * c;
            }
        float var = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; i < cols; i++) {
            float c = (px_ld(x, dt, o + i) - x0) - d;
            var += c * c;
        }
        float rstd = phx_ln_rstd(var * inv_n, eps);
        if (mean_out) mean_out[r] = x0 + d;
        if (rstd_out) rstd_out[r] = rstd;
        for (int64_t c = 0; c < cols; c++) {
            float v = ((px_ld(x, dt, o + c) - x0) - d) * rstd;
            if (w) v = v * w[c];
            if (b) v = v + b[c];
            px_st(y, dt, o + c, v);
        }
    }
}

/* The f32 loops on rows r0 .. r0 + rows - 1, for the half path
 * (px_cpu_half_rows): forward in0 x; backward in0 x, in1 dy */
typedef struct ln_args {
    int64_t cols;
    float eps;
    const float *w, *b;
    float *mean_out, *rstd_out; /* forward (either may be NULL) */
    const float *mean, *rstd; /* backward */
    float *dw, *db;
} ln_args;

PX_CLONES static void ln_fwd_f32(const void *arg, int64_t r0, int64_t rows, const float *x, const float *unused,
                                 float *y)
{
    const ln_args *a = arg;
    (void)unused;
    px_ln_fwd_loop(rows, a->cols, a->eps, x, a->w, a->b, y, a->mean_out ? a->mean_out + r0 : NULL,
                   a->rstd_out ? a->rstd_out + r0 : NULL, PHX_F32);
}

PX_CLONES phx_status px_cpu_layernorm_forward(int dev, int64_t rows, int64_t cols, float eps, const void *x,
                                              const float *w, const float *b, void *y, float *mean, float *rstd,
                                              phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_forward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_forward: %lld columns, expected >= 1", (long long)cols);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "layernorm_forward: eps=%g, expected >= 0", (double)eps);
    if (px_cpu_half_chunk(dt, cols)) {
        ln_args a = {cols, eps, w, b, mean, rstd, NULL, NULL, NULL, NULL};
        return px_cpu_half_rows(rows, cols, dt, x, NULL, y, ln_fwd_f32, &a);
    }
    PX_FLOAT_DISPATCH("layernorm_forward", dt, px_ln_fwd_loop(rows, cols, eps, x, w, b, y, mean, rstd, DT));
    return PHX_OK;
}

PX_INLINE void px_ln_bwd_loop(int64_t rows, int64_t cols, const void *x, const float *w, const float *mean,
                              const float *rstd, const void *dy, void *dx, float *dw, float *db, int dt)
{
    float inv_n = 1.0f / (float)cols;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols;
        float mu = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = 0; c < cols; c++) {
            float d = px_ld(dy, dt, o + c);
            float g = w ? d * w[c] : d;
            float xhat = (px_ld(x, dt, o + c) - mu) * rs;
            sg += g;
            sgx += g * xhat;
            if (dw) dw[c] += d * xhat;
            if (db) db[c] += d;
        }
        float mg = sg * inv_n, mgx = sgx * inv_n;
        for (int64_t c = 0; c < cols; c++) {
            float d = px_ld(dy, dt, o + c);
            float g = w ? d * w[c] : d;
            float xhat = (px_ld(x, dt, o + c) - mu) * rs;
            px_st(dx, dt, o + c, phx_ln_dx(g, xhat, rs, mg, mgx));
        }
    }
}

PX_CLONES static void ln_bwd_f32(const void *arg, int64_t r0, int64_t rows, const float *x, const float *dy,
                                 float *dx)
{
    const ln_args *a = arg;
    px_ln_bwd_loop(rows, a->cols, x, a->w, a->mean + r0, a->rstd + r0, dy, dx, a->dw, a->db, PHX_F32);
}

PX_CLONES phx_status px_cpu_layernorm_backward(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                               const float *mean, const float *rstd, const void *dy, void *dx,
                                               float *dw, float *db, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_backward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_backward: %lld columns, expected >= 1", (long long)cols);
    if (rows > 0 && (!mean || !rstd))
        return phx_error(PHX_EINVAL, "layernorm_backward: mean/rstd are NULL, expected forward's statistics");
    if (px_cpu_half_chunk(dt, cols)) {
        ln_args a = {cols, 0.0f, w, NULL, NULL, NULL, mean, rstd, dw, db};
        return px_cpu_half_rows(rows, cols, dt, x, dy, dx, ln_bwd_f32, &a);
    }
    PX_FLOAT_DISPATCH("layernorm_backward", dt, px_ln_bwd_loop(rows, cols, x, w, mean, rstd, dy, dx, dw, db, DT));
    return PHX_OK;
}
