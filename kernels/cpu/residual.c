/* Residual add (out = a + b, in place allowed) and the sum of squares
 * behind gradient-norm clipping (f64 accumulation in 4 partial sums). */
#include "config.h"
#include "kernels/cpu/cpu.h"

PX_INLINE void px_add_loop(int64_t n, const void *a, const void *b, void *out, int dt)
{
    for (int64_t i = 0; i < n; i++) px_st(out, dt, i, px_ld(a, dt, i) + px_ld(b, dt, i));
}

PX_CLONES static void add_f32(const void *arg, int64_t r0, int64_t n, const float *a, const float *b, float *out)
{
    (void)arg, (void)r0;
    px_add_loop(n, a, b, out, PHX_F32);
}

PX_CLONES static phx_status add_range(int64_t n, const void *a, const void *b, void *out, phx_dtype dt)
{
    /* f16, bf16: n rows of one value through the f32 loop (half.c) */
    if (px_cpu_half_chunk(dt, 1)) return px_cpu_half_rows(n, 1, dt, a, b, out, add_f32, NULL);
    PX_FLOAT_DISPATCH("add", dt, px_add_loop(n, a, b, out, DT));
    return PHX_OK;
}

#define PX_ADD_GRAIN ((int64_t)1 << 16) /* elements a part at least */

typedef struct add_job {
    const char *a, *b;
    char *out;
    phx_dtype dt;
    size_t es;
    phx_status st; /* the first part's (the caller's) */
} add_job;

static void add_part(void *arg, int64_t lo, int64_t hi)
{
    add_job *j = arg;
    size_t o = (size_t)lo * j->es;
    phx_status st = add_range(hi - lo, j->a + o, j->b + o, j->out + o, j->dt);
    if (lo == 0) j->st = st;
}

/* Elementwise: split over the calling thread's budget, the same bits. */
phx_status px_cpu_add(int dev, int64_t n, const void *a, const void *b, void *out, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("add", n);
    size_t es = phx_dtype_size(dt);
    if (!es || n == 0) return add_range(n, a, b, out, dt); /* its error, or nothing */
    add_job j = {a, b, out, dt, es, PHX_OK};
    px_cpu_parallel_for(n, PX_ADD_GRAIN, add_part, &j);
    return j.st;
}

PX_INLINE double px_sumsq_loop(int64_t n, const void *x, int dt)
{
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            double v = px_ld(x, dt, i + j);
            acc[j] += v * v;
        }
    double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (; i < n; i++) {
        double v = px_ld(x, dt, i);
        s += v * v;
    }
    return s;
}

PX_CLONES phx_status px_cpu_sum_squares(int dev, int64_t n, const void *x, phx_dtype dt, double *out_host)
{
    (void)dev;
    PX_CHECK_N("sum_squares", n);
    double r = 0.0;
    PX_FLOAT_DISPATCH("sum_squares", dt, r = px_sumsq_loop(n, x, DT));
    *out_host = r;
    return PHX_OK;
}
