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
PX_INLINE void px_softmax_fwd_loop(int64_t r0, int64_t rows, int64_t cols, float scale, int causal, int lg,
                                   const void *x, void *y, float *e, int dt)
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

/* One pass (forward or backward) over rows [0, rows): in0 is x (forward)
 * or y (backward), in1 dy. Rows are independent, so the parts of
 * px_cpu_parallel_for give the bits of one serial pass. */
typedef struct softmax_job {
    int backward, causal, log;
    int64_t rows, cols;
    float scale;
    phx_dtype dt;
    const void *in0, *in1;
    void *out;
    phx_status st; /* the first failure of any part */
} softmax_job;

/* The f32 loop of a part's rows base + r0 .. base + r0 + rows - 1, for
 * the half path (px_cpu_half_rows numbers the part's rows from 0; the
 * causal mask needs the whole's). */
typedef struct softmax_args {
    const softmax_job *j;
    int64_t base;
    float *e;
} softmax_args;

PX_CLONES static void softmax_f32(const void *arg, int64_t r0, int64_t rows, const float *in0, const float *in1,
                                  float *out)
{
    const softmax_args *a = arg;
    const softmax_job *j = a->j;
    if (j->backward)
        px_softmax_bwd_loop(a->base + r0, rows, j->cols, j->scale, j->causal, j->log, in0, in1, out, PHX_F32);
    else
        px_softmax_fwd_loop(a->base + r0, rows, j->cols, j->scale, j->causal, j->log, in0, out, a->e, PHX_F32);
}

PX_CLONES static void softmax_part(void *arg, int64_t lo, int64_t hi)
{
    softmax_job *j = arg;
    size_t es = phx_dtype_size(j->dt);
    int64_t off = lo * j->cols;
    const char *in0 = (const char *)j->in0 + off * (int64_t)es;
    const char *in1 = j->in1 ? (const char *)j->in1 + off * (int64_t)es : NULL;
    char *out = (char *)j->out + off * (int64_t)es;
    float *e = j->backward ? NULL : px_cpu_scratch(3, (size_t)j->cols * sizeof(float));
    phx_status st = j->backward || e ? PHX_OK : PHX_ENOMEM;
    if (st == PHX_OK && px_cpu_half_chunk(j->dt, j->cols)) {
        softmax_args a = {j, lo, e};
        st = px_cpu_half_rows(hi - lo, j->cols, j->dt, in0, in1, out, softmax_f32, &a);
    } else if (st == PHX_OK && j->backward) {
        PX_FLOAT_CALL(j->dt, px_softmax_bwd_loop(lo, hi - lo, j->cols, j->scale, j->causal, j->log, in0, in1, out, DT));
    } else if (st == PHX_OK) {
        PX_FLOAT_CALL(j->dt, px_softmax_fwd_loop(lo, hi - lo, j->cols, j->scale, j->causal, j->log, in0, out, e, DT));
    }
    px_cpu_part_fail(&j->st, st);
}

/* A part is at least this many elements (a row of 128 takes ~0.3 us). */
#define PX_SOFTMAX_GRAIN 16384

static phx_status softmax_run(softmax_job *j)
{
    if (j->dt != PHX_F32 && j->dt != PHX_F16 && j->dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "softmax_%s: dtype %s, expected f32, f16 or bf16",
                         j->backward ? "backward" : "forward", phx_dtype_name(j->dt));
    int64_t grain = PX_SOFTMAX_GRAIN / j->cols;
    px_cpu_parallel_for(j->rows, grain > 0 ? grain : 1, softmax_part, j);
    return j->st;
}

phx_status px_cpu_softmax_forward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log, const void *x,
                                  void *y, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_forward", rows, cols);
    if (st != PHX_OK) return st;
    softmax_job j = {0, causal, log, rows, cols, scale, dt, x, NULL, y, PHX_OK};
    return softmax_run(&j);
}

phx_status px_cpu_softmax_backward(int dev, int64_t rows, int64_t cols, float scale, int causal, int log, const void *y,
                                   const void *dy, void *dx, phx_dtype dt)
{
    (void)dev;
    phx_status st = softmax_check("softmax_backward", rows, cols);
    if (st != PHX_OK) return st;
    softmax_job j = {1, causal, log, rows, cols, scale, dt, y, dy, dx, PHX_OK};
    return softmax_run(&j);
}
