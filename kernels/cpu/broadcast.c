/* Elementwise kernels with broadcasting: binary ops and where read each
 * operand through its strides; unary ops over flat arrays.
 *
 * The binary and where kernels first merge adjacent dims that every
 * operand walks as one (coalescing), so the common layouts become a flat
 * loop: same-shape contiguous operands (stride 1, 1), a scalar or a row
 * broadcast (stride 1, 0 in the innermost dim) and a column broadcast;
 * the remaining outer dims are walked with a counter. Each innermost run
 * is a loop specialised per op, dtype and stride pattern (vectorisable for
 * f32); large outputs are split over the pool by rows. Math in f32, one
 * rounding on store for f16 and bf16. */
#include "config.h"
#include <math.h>
#include <string.h>
#include "kernels/cpu/cpu.h"

/* Outputs below this many elements run on the calling thread: memory
 * bound loops gain little from more threads below a few MiB (and lose to
 * waking the pool). */
#define PX_BCAST_GRAIN (1 << 20)

typedef struct bcast_job {
    int op, nd;
    phx_dtype dt, cdt;
    int64_t shape[PHX_MAX_DIMS], st[3][PHX_MAX_DIMS];
    void *out;
    const void *in[3];
} bcast_job;

/* Merges dims that all k operands walk contiguously (stride[i] ==
 * stride[i+1] * shape[i+1], or both 0) and drops dims of size 1. */
static void bcast_coalesce(bcast_job *j, int k, int ndim, const int64_t *shape, const int64_t *const *strides)
{
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        int merge = nd > 0;
        for (int o = 0; merge && o < k; o++) merge = j->st[o][nd - 1] == strides[o][d] * shape[d];
        if (merge) {
            j->shape[nd - 1] *= shape[d];
            for (int o = 0; o < k; o++) j->st[o][nd - 1] = strides[o][d];
        } else {
            j->shape[nd] = shape[d];
            for (int o = 0; o < k; o++) j->st[o][nd] = strides[o][d];
            nd++;
        }
    }
    if (nd == 0) { /* one element */
        j->shape[0] = 1;
        for (int o = 0; o < k; o++) j->st[o][0] = 0;
        nd = 1;
    }
    j->nd = nd;
}

PX_INLINE float bin_apply(int op, float x, float y)
{
    switch (op) {
    case PHX_BIN_ADD: return x + y;
    case PHX_BIN_SUB: return x - y;
    case PHX_BIN_MUL: return x * y;
    case PHX_BIN_DIV: return x / y;
    case PHX_BIN_POW: return powf(x, y);
    case PHX_BIN_MAX: return (x > y || x != x) ? x : y; /* NaN in either wins */
    case PHX_BIN_MIN: return (x < y || x != x) ? x : y;
    case PHX_BIN_EQ: return x == y ? 1.0f : 0.0f;
    case PHX_BIN_NE: return x != y ? 1.0f : 0.0f;
    case PHX_BIN_LT: return x < y ? 1.0f : 0.0f;
    case PHX_BIN_LE: return x <= y ? 1.0f : 0.0f;
    case PHX_BIN_GT: return x > y ? 1.0f : 0.0f;
    default: return x >= y ? 1.0f : 0.0f;
    }
}

/* One innermost run of n elements: out contiguous from oo, a from ao by
 * sa, b from bo by sb. */
PX_INLINE void bin_run(int op, int dt, int64_t n, void *out, int64_t oo, const void *a, int64_t ao, int64_t sa,
                       const void *b, int64_t bo, int64_t sb)
{
    if (sa == 1 && sb == 1) {
        for (int64_t i = 0; i < n; i++)
            px_st(out, dt, oo + i, bin_apply(op, px_ld(a, dt, ao + i), px_ld(b, dt, bo + i)));
    } else if (sa == 1 && sb == 0) {
        float y = px_ld(b, dt, bo);
        for (int64_t i = 0; i < n; i++) px_st(out, dt, oo + i, bin_apply(op, px_ld(a, dt, ao + i), y));
    } else if (sa == 0 && sb == 1) {
        float x = px_ld(a, dt, ao);
        for (int64_t i = 0; i < n; i++) px_st(out, dt, oo + i, bin_apply(op, x, px_ld(b, dt, bo + i)));
    } else {
        for (int64_t i = 0; i < n; i++)
            px_st(out, dt, oo + i, bin_apply(op, px_ld(a, dt, ao + i * sa), px_ld(b, dt, bo + i * sb)));
    }
}

/* f16/bf16 operands run through f32 blocks: a strided or broadcast operand
 * is loaded element by element, a contiguous one widened with the cast
 * kernel (the conversion instructions where the CPU has them), the f32
 * loop computes, and the cast kernel rounds the block into out (the same
 * bits as px_st). */
PX_INLINE const float *half_in(const void *x, int dt, int64_t o, int64_t s, int64_t len, float *buf)
{
    if (s == 0) {
        buf[0] = px_ld(x, dt, o);
    } else if (s == 1) {
        px_cpu_half_cast_here(buf, PHX_F32, (const uint16_t *)x + o, (phx_dtype)dt, len);
    } else {
        for (int64_t i = 0; i < len; i++) buf[i] = px_ld(x, dt, o + i * s);
    }
    return buf;
}

PX_INLINE void bin_run_half(int op, int dt, int64_t n, void *out, int64_t oo, const void *a, int64_t ao, int64_t sa,
                            const void *b, int64_t bo, int64_t sb)
{
    float ab[PX_F16_BLOCK], bb[PX_F16_BLOCK], ob[PX_F16_BLOCK];
    for (int64_t i = 0; i < n; i += PX_F16_BLOCK) {
        int64_t len = n - i < PX_F16_BLOCK ? n - i : PX_F16_BLOCK;
        const float *x = half_in(a, dt, ao + i * sa, sa, len, ab), *y = half_in(b, dt, bo + i * sb, sb, len, bb);
        bin_run(op, PHX_F32, len, ob, 0, x, 0, sa ? 1 : 0, y, 0, sb ? 1 : 0);
        px_cpu_half_cast_here((uint16_t *)out + oo + i, (phx_dtype)dt, ob, PHX_F32, len);
    }
}

/* Rows lo .. hi-1 of the coalesced layout (a row: the innermost dim). */
PX_INLINE void bin_rows(int op, int dt, const bcast_job *j, int64_t lo, int64_t hi)
{
    int nd = j->nd;
    int64_t inner = j->shape[nd - 1], cnt[PHX_MAX_DIMS] = {0}, ao = 0, bo = 0, r = lo;
    for (int d = nd - 2; d >= 0; d--) {
        cnt[d] = r % j->shape[d];
        r /= j->shape[d];
        ao += cnt[d] * j->st[0][d];
        bo += cnt[d] * j->st[1][d];
    }
    for (int64_t row = lo; row < hi; row++) {
        if (dt == PHX_F32)
            bin_run(op, dt, inner, j->out, row * inner, j->in[0], ao, j->st[0][nd - 1], j->in[1], bo, j->st[1][nd - 1]);
        else
            bin_run_half(op, dt, inner, j->out, row * inner, j->in[0], ao, j->st[0][nd - 1], j->in[1], bo,
                         j->st[1][nd - 1]);
        for (int d = nd - 2; d >= 0; d--) {
            ao += j->st[0][d];
            bo += j->st[1][d];
            if (++cnt[d] < j->shape[d]) break;
            ao -= cnt[d] * j->st[0][d];
            bo -= cnt[d] * j->st[1][d];
            cnt[d] = 0;
        }
    }
}

#define BIN_FN(NAME, OP) \
    PX_CLONES static void bin_##NAME(void *arg, int64_t lo, int64_t hi) \
    { \
        const bcast_job *j = arg; \
        PX_FLOAT_CALL(j->dt, bin_rows(OP, DT, j, lo, hi)); \
    }
BIN_FN(add, PHX_BIN_ADD)
BIN_FN(sub, PHX_BIN_SUB)
BIN_FN(mul, PHX_BIN_MUL)
BIN_FN(div, PHX_BIN_DIV)
BIN_FN(pow, PHX_BIN_POW)
BIN_FN(max, PHX_BIN_MAX)
BIN_FN(min, PHX_BIN_MIN)
BIN_FN(eq, PHX_BIN_EQ)
BIN_FN(ne, PHX_BIN_NE)
BIN_FN(lt, PHX_BIN_LT)
BIN_FN(le, PHX_BIN_LE)
BIN_FN(gt, PHX_BIN_GT)
BIN_FN(ge, PHX_BIN_GE)

static const px_range_fn bin_fns[] = {bin_add, bin_sub, bin_mul, bin_div, bin_pow, bin_max, bin_min,
                                      bin_eq,  bin_ne,  bin_lt,  bin_le,  bin_gt,  bin_ge};

static phx_status bcast_check(const char *name, phx_dtype dt, int ndim, const int64_t *shape, int64_t *rows,
                              int64_t *numel)
{
    if (dt != PHX_F32 && dt != PHX_F16 && dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name, phx_dtype_name(dt));
    if (ndim < 0 || ndim > PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "%s: %d dims, expected 0 .. %d", name, ndim, PHX_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return phx_error(PHX_EINVAL, "%s: dim %d has size %lld", name, d, (long long)shape[d]);
        n *= shape[d];
    }
    *numel = n;
    *rows = 0;
    return PHX_OK;
}

static int64_t bcast_rows(const bcast_job *j)
{
    int64_t rows = 1;
    for (int d = 0; d < j->nd - 1; d++) rows *= j->shape[d];
    return rows;
}

static int64_t bcast_grain(const bcast_job *j)
{
    int64_t inner = j->shape[j->nd - 1];
    return inner >= PX_BCAST_GRAIN ? 1 : PX_BCAST_GRAIN / inner;
}

phx_status px_cpu_binary(int dev, int op, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *a,
                         const int64_t *a_strides, const void *b, const int64_t *b_strides)
{
    (void)dev;
    int64_t rows, n;
    phx_status st = bcast_check("binary", dt, ndim, shape, &rows, &n);
    if (st) return st;
    if (op < 0 || op > PHX_BIN_GE) return phx_error(PHX_EINVAL, "binary: op %d, expected a phx_binary_op", op);
    if (n == 0) return PHX_OK;
    bcast_job j = {.op = op, .dt = dt, .out = out, .in = {a, b, NULL}};
    const int64_t *strides[2] = {a_strides, b_strides};
    bcast_coalesce(&j, 2, ndim, shape, strides);
    rows = bcast_rows(&j);
    if (rows * j.shape[j.nd - 1] < PX_BCAST_GRAIN)
        bin_fns[op](&j, 0, rows);
    else
        px_cpu_parallel_for(rows, bcast_grain(&j), bin_fns[op], &j);
    return PHX_OK;
}

/* ---- where ---- */

PX_INLINE float cond_ld(const void *p, int cdt, int64_t i)
{
    switch (cdt) {
    case PHX_F32: return ((const float *)p)[i] != 0.0f;
    case PHX_F16:
    case PHX_BF16: return (((const uint16_t *)p)[i] & 0x7fffu) != 0;
    case PHX_I64: return ((const int64_t *)p)[i] != 0;
    case PHX_I32: return ((const int32_t *)p)[i] != 0;
    default: return ((const uint8_t *)p)[i] != 0;
    }
}

PX_INLINE void where_rows(int dt, const bcast_job *j, int64_t lo, int64_t hi)
{
    int nd = j->nd;
    int64_t inner = j->shape[nd - 1], cnt[PHX_MAX_DIMS] = {0}, off[3] = {0, 0, 0}, r = lo;
    for (int d = nd - 2; d >= 0; d--) {
        cnt[d] = r % j->shape[d];
        r /= j->shape[d];
        for (int o = 0; o < 3; o++) off[o] += cnt[d] * j->st[o][d];
    }
    int64_t sc = j->st[0][nd - 1], sa = j->st[1][nd - 1], sb = j->st[2][nd - 1];
    for (int64_t row = lo; row < hi; row++) {
        for (int64_t i = 0; i < inner; i++) {
            int c = cond_ld(j->in[0], j->cdt, off[0] + i * sc) != 0;
            float v = c ? px_ld(j->in[1], dt, off[1] + i * sa) : px_ld(j->in[2], dt, off[2] + i * sb);
            px_st(j->out, dt, row * inner + i, v);
        }
        for (int d = nd - 2; d >= 0; d--) {
            for (int o = 0; o < 3; o++) off[o] += j->st[o][d];
            if (++cnt[d] < j->shape[d]) break;
            for (int o = 0; o < 3; o++) off[o] -= cnt[d] * j->st[o][d];
            cnt[d] = 0;
        }
    }
}

PX_CLONES static void where_fn(void *arg, int64_t lo, int64_t hi)
{
    const bcast_job *j = arg;
    PX_FLOAT_CALL(j->dt, where_rows(DT, j, lo, hi));
}

phx_status px_cpu_where(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *cond,
                        phx_dtype cdt, const int64_t *c_strides, const void *a, const int64_t *a_strides, const void *b,
                        const int64_t *b_strides)
{
    (void)dev;
    int64_t rows, n;
    phx_status st = bcast_check("where", dt, ndim, shape, &rows, &n);
    if (st) return st;
    if (n == 0) return PHX_OK;
    bcast_job j = {.dt = dt, .cdt = cdt, .out = out, .in = {cond, a, b}};
    const int64_t *strides[3] = {c_strides, a_strides, b_strides};
    bcast_coalesce(&j, 3, ndim, shape, strides);
    rows = bcast_rows(&j);
    if (rows * j.shape[j.nd - 1] < PX_BCAST_GRAIN)
        where_fn(&j, 0, rows);
    else
        px_cpu_parallel_for(rows, bcast_grain(&j), where_fn, &j);
    return PHX_OK;
}

/* ---- unary ---- */

PX_INLINE float un_apply(int op, float x, float alpha, float beta)
{
    switch (op) {
    case PHX_UN_NEG: return -x;
    case PHX_UN_EXP: return phx_expf(x);
    case PHX_UN_LOG: return logf(x);
    case PHX_UN_SQRT: return sqrtf(x);
    case PHX_UN_RSQRT: return 1.0f / sqrtf(x);
    case PHX_UN_ABS: return fabsf(x);
    case PHX_UN_SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : x;
    case PHX_UN_AFFINE: return alpha * x + beta;
    case PHX_UN_POW: return powf(x, alpha);
    case PHX_UN_CLAMP: {
        float v = x;
        if (alpha == alpha && v < alpha) v = alpha; /* NaN bounds are absent; NaN x stays */
        if (beta == beta && v > beta) v = beta;
        return v;
    }
    case PHX_UN_RECIP: return 1.0f / x;
    case PHX_UN_EQ: return x == alpha ? 1.0f : 0.0f;
    case PHX_UN_NE: return x != alpha ? 1.0f : 0.0f;
    case PHX_UN_LT: return x < alpha ? 1.0f : 0.0f;
    case PHX_UN_LE: return x <= alpha ? 1.0f : 0.0f;
    case PHX_UN_GT: return x > alpha ? 1.0f : 0.0f;
    case PHX_UN_GE: return x >= alpha ? 1.0f : 0.0f;
    default: return x * x;
    }
}

typedef struct un_job {
    phx_dtype dt;
    void *y;
    const void *x;
    float alpha, beta;
} un_job;

PX_INLINE void un_range(int op, int dt, const un_job *j, int64_t lo, int64_t hi)
{
    float alpha = j->alpha, beta = j->beta;
    if (dt == PHX_F32) {
        for (int64_t i = lo; i < hi; i++) px_st(j->y, dt, i, un_apply(op, px_ld(j->x, dt, i), alpha, beta));
        return;
    }
    float buf[PX_F16_BLOCK];
    for (int64_t i = lo; i < hi; i += PX_F16_BLOCK) { /* f32 blocks, as the binary kernel */
        int64_t len = hi - i < PX_F16_BLOCK ? hi - i : PX_F16_BLOCK;
        px_cpu_half_cast_here(buf, PHX_F32, (const uint16_t *)j->x + i, (phx_dtype)dt, len);
        for (int64_t k = 0; k < len; k++) buf[k] = un_apply(op, buf[k], alpha, beta);
        px_cpu_half_cast_here((uint16_t *)j->y + i, (phx_dtype)dt, buf, PHX_F32, len);
    }
}

#define UN_FN(NAME, OP) \
    PX_CLONES static void un_##NAME(void *arg, int64_t lo, int64_t hi) \
    { \
        const un_job *j = arg; \
        PX_FLOAT_CALL(j->dt, un_range(OP, DT, j, lo, hi)); \
    }
UN_FN(neg, PHX_UN_NEG)
UN_FN(exp, PHX_UN_EXP)
UN_FN(log, PHX_UN_LOG)
UN_FN(sqrt, PHX_UN_SQRT)
UN_FN(rsqrt, PHX_UN_RSQRT)
UN_FN(abs, PHX_UN_ABS)
UN_FN(sign, PHX_UN_SIGN)
UN_FN(affine, PHX_UN_AFFINE)
UN_FN(pow, PHX_UN_POW)
UN_FN(clamp, PHX_UN_CLAMP)
UN_FN(recip, PHX_UN_RECIP)
UN_FN(eq, PHX_UN_EQ)
UN_FN(ne, PHX_UN_NE)
UN_FN(lt, PHX_UN_LT)
UN_FN(le, PHX_UN_LE)
UN_FN(gt, PHX_UN_GT)
UN_FN(ge, PHX_UN_GE)
UN_FN(square, PHX_UN_SQUARE)

static const px_range_fn un_fns[] = {un_neg,  un_exp,    un_log, un_sqrt,  un_rsqrt, un_abs,
                                     un_sign, un_affine, un_pow, un_clamp, un_recip, un_eq,
                                     un_ne,   un_lt,     un_le,  un_gt,    un_ge,    un_square};

phx_status px_cpu_unary(int dev, int op, phx_dtype dt, int64_t n, void *y, const void *x, float alpha, float beta)
{
    (void)dev;
    PX_CHECK_N("unary", n);
    if (dt != PHX_F32 && dt != PHX_F16 && dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "unary: dtype %s, expected f32, f16 or bf16", phx_dtype_name(dt));
    if (op < 0 || op > PHX_UN_SQUARE) return phx_error(PHX_EINVAL, "unary: op %d, expected a phx_unary_op", op);
    un_job j = {dt, y, x, alpha, beta};
    if (n < PX_BCAST_GRAIN)
        un_fns[op](&j, 0, n);
    else
        px_cpu_parallel_for(n, PX_BCAST_GRAIN, un_fns[op], &j);
    return PHX_OK;
}
