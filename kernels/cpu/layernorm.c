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

PX_CLONES phx_status px_cpu_layernorm_forward(int dev, int64_t rows, int64_t cols, float eps, const void *x,
                                              const float *w, const float *b, void *y, float *mean, float *rstd,
                                              phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_forward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_forward: %lld columns, expected >= 1", (long long)cols);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "layernorm_forward: eps=%g, expected >= 0", (double)eps);
    int64_t chunk = px_cpu_half_chunk(dt, cols);
    if (!chunk) {
        PX_FLOAT_DISPATCH("layernorm_forward", dt, px_ln_fwd_loop(rows, cols, eps, x, w, b, y, mean, rstd, DT));
        return PHX_OK;
    }
    /* f16, bf16: chunks of rows widened, the f32 loop, rounded back */
    size_t bytes = (size_t)(chunk * cols) * sizeof(float);
    float *a = px_cpu_scratch(0, bytes), *o = px_cpu_scratch(1, bytes);
    if (!a || !o) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (int64_t r = 0; r < rows && st == PHX_OK; r += chunk) {
        int64_t k = rows - r < chunk ? rows - r : chunk;
        st = px_cpu_cast(0, a, PHX_F32, (const uint16_t *)x + r * cols, dt, k * cols);
        px_ln_fwd_loop(k, cols, eps, a, w, b, o, mean ? mean + r : NULL, rstd ? rstd + r : NULL, PHX_F32);
        if (st == PHX_OK) st = px_cpu_cast(0, (uint16_t *)y + r * cols, dt, o, PHX_F32, k * cols);
    }
    return st;
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

PX_CLONES phx_status px_cpu_layernorm_backward(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                               const float *mean, const float *rstd, const void *dy, void *dx,
                                               float *dw, float *db, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_backward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_backward: %lld columns, expected >= 1", (long long)cols);
    if (rows > 0 && (!mean || !rstd))
        return phx_error(PHX_EINVAL, "layernorm_backward: mean/rstd are NULL, expected forward's statistics");
    int64_t chunk = px_cpu_half_chunk(dt, cols);
    if (!chunk) {
        PX_FLOAT_DISPATCH("layernorm_backward", dt, px_ln_bwd_loop(rows, cols, x, w, mean, rstd, dy, dx, dw, db, DT));
        return PHX_OK;
    }
    size_t bytes = (size_t)(chunk * cols) * sizeof(float);
    float *a = px_cpu_scratch(0, bytes), *g = px_cpu_scratch(1, bytes), *o = px_cpu_scratch(2, bytes);
    if (!a || !g || !o) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (int64_t r = 0; r < rows && st == PHX_OK; r += chunk) {
        int64_t k = rows - r < chunk ? rows - r : chunk;
        st = px_cpu_cast(0, a, PHX_F32, (const uint16_t *)x + r * cols, dt, k * cols);
        if (st == PHX_OK) st = px_cpu_cast(0, g, PHX_F32, (const uint16_t *)dy + r * cols, dt, k * cols);
        if (st != PHX_OK) break;
        px_ln_bwd_loop(k, cols, a, w, mean + r, rstd + r, g, o, dw, db, PHX_F32);
        st = px_cpu_cast(0, (uint16_t *)dx + r * cols, dt, o, PHX_F32, k * cols);
    }
    return st;
}
