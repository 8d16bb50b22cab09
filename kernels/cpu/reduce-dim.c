/* Reductions and softmax over one dim of an (outer, n, inner) layout.
 *
 * inner == 1 (the last dim): each output reduces one contiguous run, with
 * 8 interleaved f32 partial sums. inner > 1: a tile of up to PX_RD_TILE
 * inner positions is reduced together, walking the n rows of the tile in
 * order, so every load is contiguous and the tile's accumulators are a
 * vector. Work is split over the pool by outer index (and tile). Math in
 * f32; f16 and bf16 convert on load and round once on store. */
#include "config.h"
#include <math.h>
#include "kernels/cpu/cpu.h"

#define PX_RD_TILE 64
/* f16 items of at least this many values are widened in one cast call
 * first (fewer and the call costs more than it saves); bf16 widens by a
 * shift, which the sum loops vectorise in place, so only its max/min (a
 * loop with branches) are widened. */
#define PX_RD_WIDEN 256
#define RD_WIDENS(op, dt) ((dt) == PHX_F16 || ((dt) == PHX_BF16 && ((op) == PHX_RED_MAX || (op) == PHX_RED_MIN)))
/* Elements below this many run on the calling thread. */
#define PX_RD_GRAIN (1 << 20)

typedef struct rd_job {
    int op, log;
    phx_dtype dt;
    int64_t outer, n, inner, tiles;
    const void *x, *y2; /* y2: softmax backward's dy */
    void *y;
    int64_t *idx;
} rd_job;

static void rd_split(rd_job *j, px_range_fn fn)
{
    int64_t items = j->outer * j->tiles, per = j->n * (j->inner < PX_RD_TILE ? j->inner : PX_RD_TILE);
    if (per < 1) per = 1;
    if (items * per < PX_RD_GRAIN)
        fn(j, 0, items);
    else
        px_cpu_parallel_for(items, per >= PX_RD_GRAIN ? 1 : PX_RD_GRAIN / per, fn, j);
}

/* max/min step: NaN wins (the first NaN stays), else strictly better
 * (the first index on ties). */
PX_INLINE int rd_better(int op, float v, float best)
{
    if (best != best) return 0;
    if (v != v) return 1;
    return op == PHX_RED_MAX ? v > best : v < best;
}

/* One contiguous run of n at offset o. */
PX_INLINE float rd_run(int op, int dt, const void *x, int64_t o, int64_t n, int64_t *pos)
{
    switch (op) {
    case PHX_RED_SUM: return px_sum_shifted(x, dt, o, n, 0.0f);
    case PHX_RED_MEAN: return n ? px_sum_shifted(x, dt, o, n, 0.0f) / (float)n : NAN;
    case PHX_RED_MAX:
    case PHX_RED_MIN: {
        float best = px_ld(x, dt, o);
        int64_t bi = 0;
        for (int64_t k = 1; k < n; k++) {
            float v = px_ld(x, dt, o + k);
            if (rd_better(op, v, best)) best = v, bi = k;
        }
        *pos = bi;
        return best;
    }
    default: { /* logsumexp */
        if (n == 0) return -INFINITY;
        float m = px_ld(x, dt, o);
        for (int64_t k = 1; k < n; k++) {
            float v = px_ld(x, dt, o + k);
            m = (v > m || v != v) ? v : m;
        }
        if (m != m || isinf(m)) return m; /* NaN, all -inf, or an inf */
        float s = 0;
        for (int64_t k = 0; k < n; k++) s += phx_expf(px_ld(x, dt, o + k) - m);
        return m + logf(s);
    }
    }
}

/* One tile: rows k < n of w values at x + base + k ld; results in acc
 * (and bi, the positions for max/min). */
PX_INLINE void rd_tile(int op, int dt, const void *x, int64_t base, int64_t ld, int64_t n, int64_t w, float *acc,
                       int64_t *bi)
{
    float m[PX_RD_TILE];
    if (op == PHX_RED_SUM || op == PHX_RED_MEAN) {
        for (int64_t t = 0; t < w; t++) acc[t] = 0;
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) acc[t] += px_ld(x, dt, base + k * ld + t);
        if (op == PHX_RED_MEAN)
            for (int64_t t = 0; t < w; t++) acc[t] = n ? acc[t] / (float)n : NAN;
    } else if (op == PHX_RED_MAX || op == PHX_RED_MIN) {
        for (int64_t t = 0; t < w; t++) acc[t] = px_ld(x, dt, base + t), bi[t] = 0;
        for (int64_t k = 1; k < n; k++)
            for (int64_t t = 0; t < w; t++) {
                float v = px_ld(x, dt, base + k * ld + t);
                if (rd_better(op, v, acc[t])) acc[t] = v, bi[t] = k;
            }
    } else {
        for (int64_t t = 0; t < w; t++) m[t] = -INFINITY, acc[t] = 0;
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) {
                float v = px_ld(x, dt, base + k * ld + t);
                m[t] = (v > m[t] || v != v) ? v : m[t];
            }
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) acc[t] += phx_expf(px_ld(x, dt, base + k * ld + t) - m[t]);
        for (int64_t t = 0; t < w; t++) acc[t] = (m[t] != m[t] || isinf(m[t])) ? m[t] : m[t] + logf(acc[t]);
    }
}

/* f16: item (o, t0)'s n x w values widened into scratch slot 3 with
 * the cast kernel (rows of w, leading dim w); NULL when the scratch cannot
 * grow (the caller then converts element by element). */
static const float *rd_widen(const rd_job *j, const void *x, int64_t base, int64_t w)
{
    float *buf = px_cpu_scratch(3, sizeof(float) * (size_t)(j->n * w));
    if (!buf) return NULL;
    if (px_cpu_cast_rows(buf, PHX_F32, w, (const uint16_t *)x + base, j->dt, j->inner, j->n, w) != PHX_OK) return NULL;
    return buf;
}

PX_INLINE void rd_items(int op, int dt, const rd_job *j, int64_t lo, int64_t hi)
{
    int64_t n = j->n, inner = j->inner;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / j->tiles, t0 = (it % j->tiles) * PX_RD_TILE;
        if (inner == 1) {
            int64_t pos = 0;
            const float *wide = RD_WIDENS(op, dt) && n >= PX_RD_WIDEN ? rd_widen(j, j->x, o * n, 1) : NULL;
            float v = wide ? rd_run(op, PHX_F32, wide, 0, n, &pos) : rd_run(op, dt, j->x, o * n, n, &pos);
            px_st(j->y, dt, o, v);
            if (j->idx) j->idx[o] = pos;
            continue;
        }
        int64_t w = inner - t0 < PX_RD_TILE ? inner - t0 : PX_RD_TILE, base = o * n * inner + t0;
        const float *wide = RD_WIDENS(op, dt) && n * w >= PX_RD_WIDEN ? rd_widen(j, j->x, base, w) : NULL;
        float acc[PX_RD_TILE];
        int64_t bi[PX_RD_TILE];
        if (wide) {
            rd_tile(op, PHX_F32, wide, 0, w, n, w, acc, bi);
        } else {
            rd_tile(op, dt, j->x, base, inner, n, w, acc, bi);
        }
        if (j->idx && (op == PHX_RED_MAX || op == PHX_RED_MIN))
            for (int64_t t = 0; t < w; t++) j->idx[o * inner + t0 + t] = bi[t];
        for (int64_t t = 0; t < w; t++) px_st(j->y, dt, o * inner + t0 + t, acc[t]);
    }
}

#define RD_FN(NAME, OP) \
    PX_CLONES static void rd_##NAME(void *arg, int64_t lo, int64_t hi) \
    { \
        const rd_job *j = arg; \
        PX_FLOAT_CALL(j->dt, rd_items(OP, DT, j, lo, hi)); \
    }
RD_FN(sum, PHX_RED_SUM)
RD_FN(mean, PHX_RED_MEAN)
RD_FN(max, PHX_RED_MAX)
RD_FN(min, PHX_RED_MIN)
RD_FN(lse, PHX_RED_LOGSUMEXP)
static const px_range_fn rd_fns[] = {rd_sum, rd_mean, rd_max, rd_min, rd_lse};

static phx_status rd_check(const char *name, phx_dtype dt, int64_t outer, int64_t n, int64_t inner)
{
    if (dt != PHX_F32 && dt != PHX_F16 && dt != PHX_BF16)
        return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name, phx_dtype_name(dt));
    if (outer < 0 || n < 0 || inner < 0)
        return phx_error(PHX_EINVAL, "%s: layout (%lld, %lld, %lld), expected sizes >= 0", name, (long long)outer,
                         (long long)n, (long long)inner);
    return PHX_OK;
}

phx_status px_cpu_reduce_dim(int dev, int op, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                             void *y, int64_t *idx)
{
    (void)dev;
    phx_status st = rd_check("reduce_dim", dt, outer, n, inner);
    if (st) return st;
    if (op < PHX_RED_SUM || op > PHX_RED_LOGSUMEXP)
        return phx_error(PHX_EINVAL, "reduce_dim: op %d, expected a phx_reduce_dim_op", op);
    if ((op == PHX_RED_MAX || op == PHX_RED_MIN) && n == 0)
        return phx_error(PHX_EINVAL, "reduce_dim: max/min over an empty dim");
    if (outer == 0 || inner == 0) return PHX_OK;
    rd_job j = {.op = op, .dt = dt, .outer = outer, .n = n, .inner = inner, .x = x, .y = y, .idx = idx};
    j.tiles = inner == 1 ? 1 : (inner + PX_RD_TILE - 1) / PX_RD_TILE;
    rd_split(&j, rd_fns[op]);
    return PHX_OK;
}

/* ---- softmax ---- */

PX_INLINE void sm_items(int dt, const rd_job *j, int64_t lo, int64_t hi)
{
    int64_t n = j->n, inner = j->inner;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / j->tiles, t0 = (it % j->tiles) * PX_RD_TILE;
        int64_t w = inner == 1 ? 1 : (inner - t0 < PX_RD_TILE ? inner - t0 : PX_RD_TILE);
        int64_t base = o * n * inner + t0;
        float m[PX_RD_TILE], s[PX_RD_TILE];
        for (int64_t t = 0; t < w; t++) m[t] = -INFINITY, s[t] = 0;
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) {
                float v = px_ld(j->x, dt, base + k * inner + t);
                m[t] = (v > m[t] || v != v) ? v : m[t];
            }
        for (int64_t t = 0; t < w; t++)
            if (isinf(m[t]) && m[t] < 0) m[t] = 0; /* all -inf: exp gives 0, 0 / 0 NaN as PyTorch */
        if (dt == PHX_F32 && !j->log) { /* exp once: kept in y, scaled in place */
            float *y = j->y;
            for (int64_t k = 0; k < n; k++)
                for (int64_t t = 0; t < w; t++) {
                    int64_t p = base + k * inner + t;
                    float e = phx_expf(px_ld(j->x, dt, p) - m[t]);
                    y[p] = e;
                    s[t] += e;
                }
            for (int64_t t = 0; t < w; t++) s[t] = 1.0f / s[t];
            for (int64_t k = 0; k < n; k++)
                for (int64_t t = 0; t < w; t++) y[base + k * inner + t] *= s[t];
            continue;
        }
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) s[t] += phx_expf(px_ld(j->x, dt, base + k * inner + t) - m[t]);
        if (j->log) {
            for (int64_t t = 0; t < w; t++) s[t] = m[t] + logf(s[t]);
            for (int64_t k = 0; k < n; k++)
                for (int64_t t = 0; t < w; t++) {
                    int64_t p = base + k * inner + t;
                    px_st(j->y, dt, p, px_ld(j->x, dt, p) - s[t]);
                }
        } else {
            for (int64_t t = 0; t < w; t++) s[t] = 1.0f / s[t];
            for (int64_t k = 0; k < n; k++)
                for (int64_t t = 0; t < w; t++) {
                    int64_t p = base + k * inner + t;
                    px_st(j->y, dt, p, phx_expf(px_ld(j->x, dt, p) - m[t]) * s[t]);
                }
        }
    }
}

PX_CLONES static void sm_fn(void *arg, int64_t lo, int64_t hi)
{
    const rd_job *j = arg;
    PX_FLOAT_CALL(j->dt, sm_items(DT, j, lo, hi));
}

phx_status px_cpu_softmax_dim(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                              void *y)
{
    (void)dev;
    phx_status st = rd_check("softmax_dim", dt, outer, n, inner);
    if (st) return st;
    if (outer == 0 || inner == 0 || n == 0) return PHX_OK;
    if (inner == 1) /* rows: the attention kernel's row softmax */
        return px_cpu_softmax_forward(dev, outer, n, 1.0f, 0, log, x, y, dt);
    rd_job j = {.log = log, .dt = dt, .outer = outer, .n = n, .inner = inner, .x = x, .y = y};
    j.tiles = inner == 1 ? 1 : (inner + PX_RD_TILE - 1) / PX_RD_TILE;
    rd_split(&j, sm_fn);
    return PHX_OK;
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). */
PX_INLINE void smb_items(int dt, const rd_job *j, int64_t lo, int64_t hi)
{
    int64_t n = j->n, inner = j->inner;
    const void *yv = j->x, *dy = j->y2;
    for (int64_t it = lo; it < hi; it++) {
        int64_t o = it / j->tiles, t0 = (it % j->tiles) * PX_RD_TILE;
        int64_t w = inner == 1 ? 1 : (inner - t0 < PX_RD_TILE ? inner - t0 : PX_RD_TILE);
        int64_t base = o * n * inner + t0;
        float s[PX_RD_TILE];
        for (int64_t t = 0; t < w; t++) s[t] = 0;
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) {
                int64_t p = base + k * inner + t;
                float g = px_ld(dy, dt, p);
                s[t] += j->log ? g : g * px_ld(yv, dt, p);
            }
        for (int64_t k = 0; k < n; k++)
            for (int64_t t = 0; t < w; t++) {
                int64_t p = base + k * inner + t;
                float g = px_ld(dy, dt, p), yy = px_ld(yv, dt, p);
                px_st(j->y, dt, p, j->log ? g - phx_expf(yy) * s[t] : yy * (g - s[t]));
            }
    }
}

PX_CLONES static void smb_fn(void *arg, int64_t lo, int64_t hi)
{
    const rd_job *j = arg;
    PX_FLOAT_CALL(j->dt, smb_items(DT, j, lo, hi));
}

phx_status px_cpu_softmax_dim_backward(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner,
                                       const void *y, const void *dy, void *dx)
{
    (void)dev;
    phx_status st = rd_check("softmax_dim_backward", dt, outer, n, inner);
    if (st) return st;
    if (outer == 0 || inner == 0 || n == 0) return PHX_OK;
    if (inner == 1) return px_cpu_softmax_backward(dev, outer, n, 1.0f, 0, log, y, dy, dx, dt);
    rd_job j = {.log = log, .dt = dt, .outer = outer, .n = n, .inner = inner, .x = y, .y2 = dy, .y = dx};
    j.tiles = inner == 1 ? 1 : (inner + PX_RD_TILE - 1) / PX_RD_TILE;
    rd_split(&j, smb_fn);
    return PHX_OK;
}
