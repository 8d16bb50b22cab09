/* Strided copies and indexing over (outer, n, inner) layouts: the kernels
 * behind permute, narrow, expand, cat, index_select, gather and their
 * gradients. Copies move bytes (any dtype); the adding kernels compute in
 * f32 and round once per store. Indices are checked before anything is
 * written, so a bad index changes nothing. */
#include "config.h"
#include <string.h>
#include "kernels/cpu/cpu.h"

/* Below this many bytes a copy runs on the calling thread: waking the
 * pool costs more than the copy. */
#define PX_STRIDED_PAR_BYTES ((int64_t)1 << 20)

/* ---- copy_strided ---- */

typedef struct cs_job {
    int nd; /* dims after coalescing; the last is the inner run */
    int tk; /* a transposing copy: the dim (not the last) the source steps over by 1; else -1 */
    int64_t tiles; /* blocks of PX_TILE along tk */
    int64_t shape[PHX_MAX_DIMS], ds[PHX_MAX_DIMS], ss[PHX_MAX_DIMS];
    char *dst;
    const char *src;
    size_t es;
} cs_job;

/* n elements of es bytes, dst and src each stepping by its own stride. */
static void cs_run(char *d, int64_t dstr, const char *s, int64_t sstr, int64_t n, size_t es)
{
    if (dstr == 1 && sstr == 1) {
        memcpy(d, s, (size_t)n * es);
        return;
    }
    switch (es) {
    case 2: {
        uint16_t *dp = (uint16_t *)d;
        const uint16_t *sp = (const uint16_t *)s;
        for (int64_t i = 0; i < n; i++) dp[i * dstr] = sp[i * sstr];
        break;
    }
    case 4: {
        uint32_t *dp = (uint32_t *)d;
        const uint32_t *sp = (const uint32_t *)s;
        for (int64_t i = 0; i < n; i++) dp[i * dstr] = sp[i * sstr];
        break;
    }
    case 8: {
        uint64_t *dp = (uint64_t *)d;
        const uint64_t *sp = (const uint64_t *)s;
        for (int64_t i = 0; i < n; i++) dp[i * dstr] = sp[i * sstr];
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + (size_t)(i * dstr) * es, s + (size_t)(i * sstr) * es, es);
    }
}

/* Outer positions lo .. hi-1 (row-major over every dim but the last). */
static void cs_part(void *arg, int64_t lo, int64_t hi)
{
    const cs_job *j = arg;
    int last = j->nd - 1;
    for (int64_t o = lo; o < hi; o++) {
        int64_t rem = o, doff = 0, soff = 0;
        for (int d = last - 1; d >= 0; d--) {
            int64_t c = rem % j->shape[d];
            rem /= j->shape[d];
            doff += c * j->ds[d];
            soff += c * j->ss[d];
        }
        cs_run(j->dst + (size_t)doff * j->es, j->ds[last], j->src + (size_t)soff * j->es, j->ss[last], j->shape[last],
               j->es);
    }
}

/* A transposing copy (the destination's run is the source's stride-1
 * dim tk's crossing) goes by PX_TILE x PX_TILE blocks, so both sides stay
 * in cache: element by element, a 4096 x 4096 f32 transpose ran 25x
 * slower than memcpy. */
#define PX_TILE 32

#define CS_TILE_LOOP(T) \
    do { \
        T *dp = (T *)d; \
        const T *sp = (const T *)s; \
        for (int64_t i = 0; i < ni; i++) \
            for (int64_t jj = 0; jj < nj; jj++) dp[i * dk + jj] = sp[i + jj * sl]; \
    } while (0)

/* dst[i dk + j] <- src[i + j sl] for i < ni, j < nj (dst's run stride 1,
 * src's stride along i 1). */
static void cs_tile(char *d, int64_t dk, const char *s, int64_t sl, int64_t ni, int64_t nj, size_t es)
{
    switch (es) {
    case 2: CS_TILE_LOOP(uint16_t); break;
    case 4: CS_TILE_LOOP(uint32_t); break;
    case 8: CS_TILE_LOOP(uint64_t); break;
    default:
        for (int64_t i = 0; i < ni; i++)
            for (int64_t jj = 0; jj < nj; jj++)
                memcpy(d + (size_t)(i * dk + jj) * es, s + (size_t)(i + jj * sl) * es, es);
    }
}

/* Units lo .. hi-1 of a transposing copy: unit u is block u % tiles along
 * tk of outer position u / tiles over the other dims. */
static void cs_tiled_part(void *arg, int64_t lo, int64_t hi)
{
    const cs_job *j = arg;
    int last = j->nd - 1, k = j->tk;
    int64_t n = j->shape[last], kn = j->shape[k];
    for (int64_t u = lo; u < hi; u++) {
        int64_t rem = u / j->tiles, i0 = (u % j->tiles) * PX_TILE, doff = 0, soff = 0;
        for (int d = last - 1; d >= 0; d--) {
            if (d == k) continue;
            int64_t c = rem % j->shape[d];
            rem /= j->shape[d];
            doff += c * j->ds[d];
            soff += c * j->ss[d];
        }
        int64_t ni = kn - i0 < PX_TILE ? kn - i0 : PX_TILE;
        for (int64_t j0 = 0; j0 < n; j0 += PX_TILE) {
            int64_t nj = n - j0 < PX_TILE ? n - j0 : PX_TILE;
            cs_tile(j->dst + (size_t)(doff + i0 * j->ds[k] + j0) * j->es, j->ds[k],
                    j->src + (size_t)(soff + i0 + j0 * j->ss[last]) * j->es, j->ss[last], ni, nj, j->es);
        }
    }
}

phx_status px_cpu_copy_strided(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *dst,
                               const int64_t *dst_strides, const void *src, const int64_t *src_strides)
{
    (void)dev;
    size_t es = phx_dtype_size(dt);
    if (!es) return phx_error(PHX_EINVAL, "copy_strided: dtype %d is not a dtype", (int)dt);
    if (ndim < 0 || ndim > PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "copy_strided: %d dims, expected 0 .. %d", ndim, PHX_MAX_DIMS);
    cs_job j = {.dst = dst, .src = src, .es = es};
    int64_t total = 1;
    /* Size-1 dims dropped; a dim merged into the one after it where both
     * sides step over it as one run (stride = next stride * next size). */
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return phx_error(PHX_EINVAL, "copy_strided: dim %d has size %lld", i, (long long)shape[i]);
        total *= shape[i];
        if (shape[i] == 1) continue;
        j.shape[j.nd] = shape[i];
        j.ds[j.nd] = dst_strides[i];
        j.ss[j.nd] = src_strides[i];
        j.nd++;
    }
    if (total == 0) return PHX_OK;
    if (j.nd == 0) { /* one element */
        memcpy(dst, src, es);
        return PHX_OK;
    }
    int nd = 0;
    for (int i = 1; i < j.nd; i++) {
        if (j.ds[nd] == j.ds[i] * j.shape[i] && j.ss[nd] == j.ss[i] * j.shape[i]) {
            j.shape[nd] *= j.shape[i];
            j.ds[nd] = j.ds[i];
            j.ss[nd] = j.ss[i];
        } else {
            nd++;
            j.shape[nd] = j.shape[i];
            j.ds[nd] = j.ds[i];
            j.ss[nd] = j.ss[i];
        }
    }
    j.nd = nd + 1;
    int last = j.nd - 1;
    j.tk = -1;
    if (j.ds[last] == 1 && j.ss[last] != 1 && j.shape[last] >= PX_TILE / 2)
        for (int d = 0; d < last; d++)
            if (j.ss[d] == 1 && j.shape[d] >= PX_TILE / 2) j.tk = d;
    if (j.tk >= 0) {
        j.tiles = (j.shape[j.tk] + PX_TILE - 1) / PX_TILE;
        int64_t units = total / (j.shape[last] * j.shape[j.tk]) * j.tiles;
        int64_t grain = PX_STRIDED_PAR_BYTES / 4 / (PX_TILE * j.shape[last] * (int64_t)es) + 1;
        if (total * (int64_t)es >= PX_STRIDED_PAR_BYTES)
            px_cpu_parallel_for(units, grain, cs_tiled_part, &j);
        else
            cs_tiled_part(&j, 0, units);
        return PHX_OK;
    }
    int64_t outer = total / j.shape[last];
    if (total * (int64_t)es >= PX_STRIDED_PAR_BYTES && outer > 1) {
        int64_t grain = PX_STRIDED_PAR_BYTES / 4 / (j.shape[j.nd - 1] * (int64_t)es) + 1;
        px_cpu_parallel_for(outer, grain, cs_part, &j);
    } else
        cs_part(&j, 0, outer);
    return PHX_OK;
}

/* ---- Index checks ---- */

static phx_status check_layout(const char *who, int64_t outer, int64_t n, int64_t inner, int64_t m)
{
    if (outer < 0 || n < 0 || inner < 0 || m < 0)
        return phx_error(PHX_EINVAL, "%s: layout (%lld, %lld, %lld) with %lld indices, expected sizes >= 0", who,
                         (long long)outer, (long long)n, (long long)inner, (long long)m);
    return PHX_OK;
}

/* Every idx[0 .. count-1] in [0, n), else PHX_EINVAL naming the first
 * that is not, its position and the bound. */
static phx_status check_idx(const char *who, const int64_t *idx, int64_t count, int64_t n)
{
    for (int64_t i = 0; i < count; i++)
        if (idx[i] < 0 || idx[i] >= n)
            return phx_error(PHX_EINVAL,
                             "%s: index %lld (at position %lld of the index) is out of range for a dim of size "
                             "%lld (expected 0 .. %lld)",
                             who, (long long)idx[i], (long long)i, (long long)n, (long long)n - 1);
    return PHX_OK;
}

/* ---- index_select / index_add: one index per slice of the middle dim ---- */

phx_status px_cpu_index_select(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                               const int64_t *idx, int64_t m, void *y)
{
    (void)dev;
    size_t es = phx_dtype_size(dt);
    if (!es) return phx_error(PHX_EINVAL, "index_select: dtype %d is not a dtype", (int)dt);
    phx_status st = check_layout("index_select", outer, n, inner, m);
    if (!st) st = check_idx("index_select", idx, m, n);
    if (st) return st;
    /* Each (o, j) copies one contiguous run of inner elements. */
    const char *xs = x;
    char *ys = y;
    size_t run = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t jj = 0; jj < m; jj++)
            memcpy(ys + (size_t)(o * m + jj) * run, xs + (size_t)(o * n + idx[jj]) * run, run);
    return PHX_OK;
}

PX_INLINE void index_add_loop(int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m,
                              const void *src, int dt)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t jj = 0; jj < m; jj++) {
            int64_t xo = (o * n + idx[jj]) * inner, so = (o * m + jj) * inner;
            for (int64_t i = 0; i < inner; i++) px_st(x, dt, xo + i, px_ld(x, dt, xo + i) + px_ld(src, dt, so + i));
        }
}

phx_status px_cpu_index_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx,
                            int64_t m, const void *src)
{
    (void)dev;
    phx_status st = check_layout("index_add", outer, n, inner, m);
    if (!st) st = check_idx("index_add", idx, m, n);
    if (st) return st;
    PX_FLOAT_DISPATCH("index_add", dt, index_add_loop(outer, n, inner, x, idx, m, src, DT));
    return PHX_OK;
}

/* ---- gather / scatter_add: one index per element ---- */

typedef struct gather_job {
    int64_t n, m, inner;
    const char *x;
    const int64_t *idx;
    char *y;
    size_t es;
} gather_job;

#define GATHER_LOOP(T) \
    do { \
        const T *xp = (const T *)j->x; \
        T *yp = (T *)j->y; \
        for (int64_t i = 0; i < j->inner; i++) yp[k0 + i] = xp[(o * j->n + idx[k0 + i]) * j->inner + i]; \
    } while (0)

/* Rows lo .. hi-1 of the (outer * m) rows of inner elements. */
static void gather_part(void *arg, int64_t lo, int64_t hi)
{
    const gather_job *j = arg;
    const int64_t *idx = j->idx;
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / j->m, k0 = r * j->inner;
        switch (j->es) {
        case 2: GATHER_LOOP(uint16_t); break;
        case 4: GATHER_LOOP(uint32_t); break;
        case 8: GATHER_LOOP(uint64_t); break;
        default:
            for (int64_t i = 0; i < j->inner; i++)
                memcpy(j->y + (size_t)(k0 + i) * j->es,
                       j->x + (size_t)((o * j->n + idx[k0 + i]) * j->inner + i) * j->es, j->es);
        }
    }
}

phx_status px_cpu_gather(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                         const int64_t *idx, int64_t m, void *y)
{
    (void)dev;
    size_t es = phx_dtype_size(dt);
    if (!es) return phx_error(PHX_EINVAL, "gather: dtype %d is not a dtype", (int)dt);
    phx_status st = check_layout("gather", outer, n, inner, m);
    if (!st) st = check_idx("gather", idx, outer * m * inner, n);
    if (st) return st;
    gather_job j = {n, m, inner, x, idx, y, es};
    int64_t rows = outer * m, bytes = rows * inner * (int64_t)es;
    if (bytes >= PX_STRIDED_PAR_BYTES && rows > 1)
        px_cpu_parallel_for(rows, PX_STRIDED_PAR_BYTES / 4 / (inner * (int64_t)es + 1) + 1, gather_part, &j);
    else
        gather_part(&j, 0, rows);
    return PHX_OK;
}

PX_INLINE void scatter_add_loop(int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m,
                                const void *src, int dt)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t jj = 0; jj < m; jj++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * m + jj) * inner + i, xo = (o * n + idx[k]) * inner + i;
                px_st(x, dt, xo, px_ld(x, dt, xo) + px_ld(src, dt, k));
            }
}

phx_status px_cpu_scatter_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x,
                              const int64_t *idx, int64_t m, const void *src)
{
    (void)dev;
    phx_status st = check_layout("scatter_add", outer, n, inner, m);
    if (!st) st = check_idx("scatter_add", idx, outer * m * inner, n);
    if (st) return st;
    PX_FLOAT_DISPATCH("scatter_add", dt, scatter_add_loop(outer, n, inner, x, idx, m, src, DT));
    return PHX_OK;
}
