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

/* The f32 loops on rows r0 .. r0 + rows - 1 of a part, for the half path
 * (px_cpu_half_rows): forward in0 x; backward in0 x, in1 dy. The row
 * statistics arrays start at the part's first row. */
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

/* One LayerNorm pass over rows [0, rows) cut into parts of whole rows
 * (px_cpu_parallel_for): each row's output is computed alone, so the
 * parts give the bits of one serial pass. The backward's parts compute dx
 * only; dw and db, sums over the rows, are then added column range by
 * column range in row order (ln_param_part), the order of the serial
 * pass, whatever the number of parts. */
typedef struct ln_job {
    int backward;
    int64_t rows, cols;
    float eps;
    phx_dtype dt;
    const void *x, *dy;
    void *out; /* y or dx */
    const float *w, *b;
    float *mean_out, *rstd_out;
    const float *mean, *rstd;
    float *dw, *db; /* the serial pass's (one part), else NULL */
    phx_status st; /* the first failure of any part */
} ln_job;

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

PX_CLONES static void ln_bwd_f32(const void *arg, int64_t r0, int64_t rows, const float *x, const float *dy, float *dx)
{
    const ln_args *a = arg;
    px_ln_bwd_loop(rows, a->cols, x, a->w, a->mean + r0, a->rstd + r0, dy, dx, a->dw, a->db, PHX_F32);
}

PX_CLONES static void ln_part(void *arg, int64_t lo, int64_t hi)
{
    ln_job *j = arg;
    size_t es = phx_dtype_size(j->dt);
    int64_t off = lo * j->cols, n = hi - lo;
    const char *x = (const char *)j->x + off * (int64_t)es;
    const char *dy = j->dy ? (const char *)j->dy + off * (int64_t)es : NULL;
    char *out = (char *)j->out + off * (int64_t)es;
    float *mo = j->mean_out ? j->mean_out + lo : NULL, *ro = j->rstd_out ? j->rstd_out + lo : NULL;
    const float *mu = j->mean ? j->mean + lo : NULL, *rs = j->rstd ? j->rstd + lo : NULL;
    if (px_cpu_half_chunk(j->dt, j->cols)) {
        ln_args a = {j->cols, j->eps, j->w, j->b, mo, ro, mu, rs, j->dw, j->db};
        px_cpu_part_fail(&j->st,
                         px_cpu_half_rows(n, j->cols, j->dt, x, dy, out, j->backward ? ln_bwd_f32 : ln_fwd_f32, &a));
    } else if (j->backward) {
        PX_FLOAT_CALL(j->dt, px_ln_bwd_loop(n, j->cols, x, j->w, mu, rs, dy, out, j->dw, j->db, DT));
    } else {
        PX_FLOAT_CALL(j->dt, px_ln_fwd_loop(n, j->cols, j->eps, x, j->w, j->b, out, mo, ro, DT));
    }
}

/* dw, db over columns [c0, c1): every row in order, as the serial pass. */
PX_INLINE void px_ln_param_loop(const ln_job *j, int64_t c0, int64_t c1, int dt)
{
    for (int64_t r = 0; r < j->rows; r++) {
        int64_t o = r * j->cols;
        float mu = j->mean[r], rs = j->rstd[r];
        for (int64_t c = c0; c < c1; c++) {
            float d = px_ld(j->dy, dt, o + c);
            float xhat = (px_ld(j->x, dt, o + c) - mu) * rs;
            if (j->dw) j->dw[c] += d * xhat;
            if (j->db) j->db[c] += d;
        }
    }
}

typedef struct ln_param_job {
    const ln_job *j;
    float *dw, *db;
} ln_param_job;

#if PX_HAVE_X86
#include "kernels/cpu/half-x86.h"
/* px_ln_param_loop for f16 on AVX-512: x and dy widened 16 columns at a
 * time in registers (the element-by-element conversion of the compiled f16
 * loop does not vectorise); each column's sums in the same order, so the
 * same bits. */
PX_T512 static void ln_param_f16(const ln_job *j, int64_t c0, int64_t c1)
{
    const uint16_t *x = j->x, *dy = j->dy;
    for (int64_t r = 0; r < j->rows; r++) {
        const uint16_t *xr = x + r * j->cols, *gr = dy + r * j->cols;
        __m512 mu = _mm512_set1_ps(j->mean[r]), rs = _mm512_set1_ps(j->rstd[r]);
        for (int64_t c = c0; c < c1; c += 16) {
            int64_t k = c1 - c < 16 ? c1 - c : 16;
            __mmask16 m = px_h16_mask(k);
            __m512 d = px_h16_ld(gr + c, k), xhat = _mm512_mul_ps(_mm512_sub_ps(px_h16_ld(xr + c, k), mu), rs);
            if (j->dw)
                _mm512_mask_storeu_ps(j->dw + c, m,
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(m, j->dw + c), _mm512_mul_ps(d, xhat)));
            if (j->db) _mm512_mask_storeu_ps(j->db + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, j->db + c), d));
        }
    }
}
#endif

PX_CLONES static void ln_param_part(void *arg, int64_t c0, int64_t c1)
{
    const ln_param_job *p = arg;
    ln_job j = *p->j;
    j.dw = p->dw;
    j.db = p->db;
#if PX_HAVE_X86
    if (j.dt == PHX_F16 && px_cpu_isa() == PX_ISA_AVX512 && !getenv("PHX_CPU_F16_BLOCKS")) {
        ln_param_f16(&j, c0, c1);
        return;
    }
#endif
    PX_FLOAT_CALL(j.dt, px_ln_param_loop(&j, c0, c1, DT));
}

/* A part is at least this many elements. */
#define PX_LN_GRAIN 16384

static phx_status ln_run(ln_job *j, float *dw, float *db)
{
    if (j->dt != PHX_F32 && j->dt != PHX_F16 && j->dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "layernorm_%s: dtype %s, expected f32, f16 or bf16",
                         j->backward ? "backward" : "forward", phx_dtype_name(j->dt));
    int64_t grain = PX_LN_GRAIN / j->cols;
    if (grain < 1) grain = 1;
    /* One part: the fused serial pass (dw, db in it). */
    if (px_cpu_parallel_parts(j->rows, grain) <= 1) {
        j->dw = dw;
        j->db = db;
        ln_part(j, 0, j->rows);
        return j->st;
    }
    px_cpu_parallel_for(j->rows, grain, ln_part, j);
    if (j->st == PHX_OK && j->backward && (dw || db)) {
        ln_param_job p = {j, dw, db};
        int64_t cgrain = PX_LN_GRAIN / (j->rows > 0 ? j->rows : 1);
        px_cpu_parallel_for(j->cols, cgrain > 16 ? cgrain : 16, ln_param_part, &p);
    }
    return j->st;
}

phx_status px_cpu_layernorm_forward(int dev, int64_t rows, int64_t cols, float eps, const void *x, const float *w,
                                    const float *b, void *y, float *mean, float *rstd, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_forward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_forward: %lld columns, expected >= 1", (long long)cols);
    if (!(eps >= 0.0f)) return phx_error(PHX_EINVAL, "layernorm_forward: eps=%g, expected >= 0", (double)eps);
    ln_job j = {0, rows, cols, eps, dt, x, NULL, y, w, b, mean, rstd, NULL, NULL, NULL, NULL, PHX_OK};
    return ln_run(&j, NULL, NULL);
}

phx_status px_cpu_layernorm_backward(int dev, int64_t rows, int64_t cols, const void *x, const float *w,
                                     const float *mean, const float *rstd, const void *dy, void *dx, float *dw,
                                     float *db, phx_dtype dt)
{
    (void)dev;
    PX_CHECK_N("layernorm_backward", rows);
    if (cols < 1) return phx_error(PHX_EINVAL, "layernorm_backward: %lld columns, expected >= 1", (long long)cols);
    if (rows > 0 && (!mean || !rstd))
        return phx_error(PHX_EINVAL, "layernorm_backward: mean/rstd are NULL, expected forward's statistics");
    ln_job j = {1, rows, cols, 0.0f, dt, x, dy, dx, w, NULL, NULL, NULL, mean, rstd, NULL, NULL, PHX_OK};
    return ln_run(&j, dw, db);
}
