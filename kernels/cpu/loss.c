/* Loss kernels: mse (sum or mean) and cross entropy / nll (mean over
 * rows). The loss accumulates in double; gradients are f32. */
#include "config.h"
#include <math.h>
#include "kernels/cpu/cpu.h"

PX_INLINE double px_mse_loop(int64_t n, const void *y, int dt, const float *t, float scale, float *grad)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float v = px_ld(y, dt, i);
        s += (double)phx_mse_term(v, t[i]);
        if (grad) grad[i] = phx_mse_grad(v, t[i], scale);
    }
    return s;
}

PX_CLONES phx_status px_cpu_mse(int dev, int64_t n, const void *y, phx_dtype dt, const float *target, int mean,
                                float *loss, float *grad)
{
    (void)dev;
    PX_CHECK_N("mse", n);
    float scale = mean ? 1.0f / (float)n : 1.0f; /* n = 0 with mean: NaN loss, as torch */
    double s = 0.0;
    PX_FLOAT_DISPATCH("mse", dt, s = px_mse_loop(n, y, DT, target, scale, grad));
    if (loss) *loss = (float)(mean ? s / (double)n : s);
    return PHX_OK;
}

/* One row: returns its loss, writes its gradient row (scaled) if asked. */
PX_INLINE double px_xent_row(int64_t classes, const void *x, int dt, int64_t o, int64_t label, int log_probs,
                             float scale, float *g)
{
    if (log_probs) {
        if (g)
            for (int64_t j = 0; j < classes; j++) g[j] = phx_nll_grad(j == label, scale);
        return -(double)px_ld(x, dt, o + label);
    }
    /* row max in 8 lanes (a select, not fmaxf, so it vectorises; a NaN
     * logit is skipped here and reaches the loss through exp below) */
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t i = 0;
    for (; i + 8 <= classes; i += 8)
        for (int j = 0; j < 8; j++) {
            float v = px_ld(x, dt, o + i + j);
            m8[j] = phx_self_f32(v > m8[j], v, m8[j]);
        }
    float mx = -INFINITY;
    for (int j = 0; j < 8; j++) mx = m8[j] > mx ? m8[j] : mx;
    for (; i < classes; i++) {
        float v = px_ld(x, dt, o + i);
        mx = v > mx ? v : mx;
    }
    /* in shifted terms (x - mx, log s), as torch's log_softmax: large
     * logits lose no precision to the rounding of lse = mx + log s. The
     * gradient row holds exp(x - mx) between the two passes. */
    float s;
    if (g) {
        for (int64_t j = 0; j < classes; j++) g[j] = phx_expf(px_ld(x, dt, o + j) - mx);
        s = px_sum_shifted(g, PHX_F32, 0, classes, 0.0f);
        float inv = 1.0f / s;
        for (int64_t j = 0; j < classes; j++) g[j] = phx_softmax_grad(g[j], inv, j == label, scale);
    } else {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (i = 0; i + 8 <= classes; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += phx_expf(px_ld(x, dt, o + i + j) - mx);
        s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; i < classes; i++) s += phx_expf(px_ld(x, dt, o + i) - mx);
    }
    return (double)logf(s) - (double)(px_ld(x, dt, o + label) - mx);
}

PX_INLINE double px_xent_loop(int64_t rows, int64_t classes, const void *x, int dt, const int64_t *labels,
                              int log_probs, float scale, float *grad)
{
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++)
        total +=
            px_xent_row(classes, x, dt, r * classes, labels[r], log_probs, scale, grad ? grad + r * classes : NULL);
    return total;
}

/* The loop built once per instruction set (cpu.h, px_cpu_isa): exp and
 * log make it compute-bound. The library is built with -ffp-contract=off,
 * so the three give the same bits. */
#define PX_XENT_VARIANT(suffix, attr) \
    attr static double xent_##suffix(int64_t rows, int64_t classes, const void *logits, phx_dtype dt, \
                                     const int64_t *labels, int log_probs, float scale, float *grad) \
    { \
        double total = 0.0; \
        switch (dt) { \
        case PHX_F16: total = px_xent_loop(rows, classes, logits, PHX_F16, labels, log_probs, scale, grad); break; \
        case PHX_BF16: total = px_xent_loop(rows, classes, logits, PHX_BF16, labels, log_probs, scale, grad); break; \
        default: total = px_xent_loop(rows, classes, logits, PHX_F32, labels, log_probs, scale, grad); break; \
        } \
        return total; \
    }
PX_XENT_VARIANT(generic, )
#if PX_HAVE_X86
PX_XENT_VARIANT(avx2, PX_TARGET_AVX2)
PX_XENT_VARIANT(avx512, __attribute__((target("avx512f"))))
#endif

phx_status px_cpu_cross_entropy(int dev, int64_t rows, int64_t classes, const void *logits, phx_dtype dt,
                                const int64_t *labels, int log_probs, float *loss, float *grad, int64_t *bad_label_host)
{
    (void)dev;
    const char *name = log_probs ? "nll" : "cross_entropy";
    PX_CHECK_N(name, rows);
    if (classes < 1) return phx_error(PHX_EINVAL, "%s: %lld classes, expected >= 1", name, (long long)classes);
    if (bad_label_host) *bad_label_host = -1;
    /* labels first: a bad one changes nothing */
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] < 0 || labels[r] >= classes) {
            if (bad_label_host) *bad_label_host = r;
            return phx_error(PHX_EINVAL, "%s: label %lld at row %lld, expected 0 <= label < %lld", name,
                             (long long)labels[r], (long long)r, (long long)classes);
        }
    if (dt != PHX_F32 && dt != PHX_F16 && dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name, phx_dtype_name(dt));
    float scale = 1.0f / (float)rows;
    double total = 0.0;
    switch (px_cpu_isa()) {
    case -1: return PHX_EINVAL;
#if PX_HAVE_X86
    case PX_ISA_AVX512: total = xent_avx512(rows, classes, logits, dt, labels, log_probs, scale, grad); break;
    case PX_ISA_AVX2: total = xent_avx2(rows, classes, logits, dt, labels, log_probs, scale, grad); break;
#endif
    default: total = xent_generic(rows, classes, logits, dt, labels, log_probs, scale, grad); break;
    }
    if (loss) *loss = (float)(total / (double)rows); /* rows = 0: NaN, as torch */
    return PHX_OK;
}
