/* Softmax / log-softmax over rows on the CPU, with an optional causal
 * mask, forward and backward. Softmax math is f32 whatever the storage
 * dtype.
 *   forward:  m = max_j s x_j, e_j = exp(s x_j - m), y_j = e_j / sum e
 *             (log: y_j = s x_j - m - log sum e)
 *   backward: dx_j = s y_j (dy_j - sum_k y_k dy_k)
 *             (log: dx_j = s (dy_j - exp(y_j) sum_k dy_k))
 * Under the causal mask row r keeps columns 0 .. r % cols; the others
 * are outputs 0 (-inf for log) and gradients 0. */
#include "config.h"
#include <math.h>
#include "kernels/cpu/cpu.h"

/* The sum of p[0..n) in 8 lanes, so the compiler's vector clones keep
 * whole vectors in flight (a single accumulator is a serial chain). */
PX_INLINE float lanes_sum(const float acc[8])
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* rows r0 .. r0 + rows - 1 of the softmax, with x, y (and dy, dx below)
 * pointing at row r0 (the causal mask depends on the row's index) */
PX_INLINE void px_softmax_fwd_loop(int64_t r0, int64_t rows, int64_t cols, float scale, int causal, int lg, const void *x,
                                   void *y, float *e, int dt)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols, lim = causal ? (r0 + r) % cols + 1 : cols, c;
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

PX_INLINE void px_softmax_bwd_loop(int64_t r0, int64_t rows, int64_t cols, float scale, int causal, int lg,
                                   const void *y, const void *dy, void *dx, int dt)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * cols, lim = causal ? (r0 + r) % cols + 1 : cols, c;
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

/* The f32 loop of one pass on rows r0 .. r0 + rows - 1, for the half
 * path (px_cpu_half_rows): in0 x or y, in1 dy (backward) */
typedef struct softmax_args {
    int backward, causal, log;
    int64_t cols;
    float scale, *e;
} softmax_args;

PX_CLONES static void softmax_f32(const void *arg, int64_t r0, int64_t rows, const float *in0, const float *in1,
                                  float *out)
{
    const softmax_args *s = arg;
    if (s->backward)
        px_softmax_bwd_loop(r0, rows, s->cols, s->scale, s->causal, s->log, in0, in1, out, PHX_F32);
    else
        px_softmax_fwd_loop(r0, rows, s->cols, s->scale, s->causal, s->log, in0, out, s->e, PHX_F32);
}

PX_CLONES phx_status px_cpu_softmax_forward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                            const void *x, void *y, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_forward", rows, cols);
    if (st != PHX_OK) return st;
    float *e = px_cpu_scratch(3, (size_t)cols * sizeof(float));
    if (!e) return PHX_ENOMEM;
    if (px_cpu_half_chunk(dt, cols)) {
        softmax_args s = {0, causal, log, cols, scale, e};
        return px_cpu_half_rows(rows, cols, dt, x, NULL, y, softmax_f32, &s);
    }
    PX_FLOAT_DISPATCH("softmax_forward", dt, px_softmax_fwd_loop(0, rows, cols, scale, causal, log, x, y, e, DT));
    return PHX_OK;
}

PX_CLONES phx_status px_cpu_softmax_backward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log,
                                             const void *y, const void *dy, void *dx, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_backward", rows, cols);
    if (st != PHX_OK) return st;
    if (px_cpu_half_chunk(dt, cols)) {
        softmax_args s = {1, causal, log, cols, scale, NULL};
        return px_cpu_half_rows(rows, cols, dt, y, dy, dx, softmax_f32, &s);
    }
    PX_FLOAT_DISPATCH("softmax_backward", dt, px_softmax_bwd_loop(0, rows, cols, scale, causal, log, y, dy, dx, DT));
    return PHX_OK;
}
