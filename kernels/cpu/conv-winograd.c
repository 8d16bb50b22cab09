/* 3 x 3 stride-1 f32 convolutions by Winograd's minimal filtering
 * F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2015): the output is cut into 2 x 2 tiles, and a tile of
 * output channel co is
 *   Y = A^T [ sum over ci of (G g G^T) (.) (B^T d B) ] A
 * with d the tile's 4 x 4 input patch of channel ci and g the 3 x 3
 * kernel: 16 multiplications per tile and channel pair where the direct
 * convolution takes 36. For each of the 16 transformed positions e, the
 * sum over ci is a GEMM on the packed AVX-512 micro-kernel:
 *   forward:         M[e] (k, tiles) = U[e] (k, c) V[e] (c, tiles)
 *   backward data:   the adjoint: Q[e] (c, tiles) = U[e]^T Z[e], Z = A dY A^T,
 *                    then each tile's patch gradient B Q B^T added into dX
 *                    (patches overlap: threads take whole images)
 *   backward weight: S[e] (c, k) = sum over tiles V[e] (c, tiles) Z[e]^T,
 *                    Z = A dY A^T, then dW += G^T S G
 * The transforms run on 16 tiles of a tile row at once; the patches are
 * read straight from the NCHW planes with masked loads, zeros in the
 * padding. Images are taken in chunks of about 1000 tiles; threads take
 * whole chunks (forward), whole images (data, cut into the batch's
 * chunks all the same) or whole parts of the batch (weight, summed in
 * part order), so every sum runs in the same order on any thread count.
 * The rounding differs from the direct convolution's (doc/maint/kernels.md gives
 * the bound t/tensor/conv checks).
 * x, dy and y may be f16 or bf16 (px_cpu_conv2d_winograd_dt): the
 * transforms widen each patch exactly as they load it and round y as
 * they store it (half-x86.h, the cast kernel's bits), so the result is
 * the f32 pass's on widened copies, rounded after, without the copies;
 * the masked 16-bit loads and stores need AVX512BW and VL. */
#include "config.h"
#include <string.h>
#include "kernels/cpu/conv-avx512.h"
#include "kernels/cpu/half-x86.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

enum {
    NE = 16, /* transformed positions */
    TC_MOST = 8 * PX_NR, /* tiles of a chunk at most */
    AHEAD = 4, /* channels the transforms prefetch ahead: a channel's runs take less than a miss to DRAM */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

#define lanes px_lanes16

typedef struct wino {
    const phx_conv2d_desc *d;
    const void *x, *dy; /* f32, or (dt) f16/bf16 */
    void *y; /* forward: ydt; data: dX, f32 */
    phx_dtype dt, ydt;
    const float *bias;
    float *dw;
    const float *up; /* forward: U packed, position after position */
    int64_t th, tw, tiles; /* tile rows and columns, tiles of an image */
    int64_t tc; /* tiles of a chunk: 48-column panels of the GEMMs */
    int64_t kc; /* depth of a packed block of U */
    float *sp; /* weight: each part's S */
    int64_t parts;
    int failed;
} wino;

/* The tiles of the batch are numbered image by image, row by row, and
 * cut into chunks of tc whose transforms (16 (c + k) tc floats) stay in
 * a 1 MiB L2: ... */
static wino plan(const phx_conv2d_desc *d)
{
    wino g = {.d = d};
    g.th = (d->oh + 1) / 2, g.tw = (d->ow + 1) / 2, g.tiles = g.th * g.tw;
    int64_t panels = (int64_t)12288 / (d->c + d->k) / PX_NR;
    g.tc = (panels < 1 ? 1 : panels > TC_MOST / PX_NR ? TC_MOST / PX_NR : panels) * PX_NR;
    return g;
}

/* The distance between two positions' blocks of n floats: n rounded up
 * to an odd number of 64-byte lines, so that the 16 blocks' rows (read
 * and written together by the transforms) fall in different cache sets;
 * blocks a multiple of 4 KiB apart all fell in one, and the input
 * transform ran 3x slower. */
static int64_t spaced(int64_t n)
{
    int64_t lines = (n + 15) / 16;
    return (lines | 1) * 16;
}

/* The tiles the transforms take at once, one per lane: tiles tx .. tx +
 * n - 1 of tile row ty of image b in lanes 0 .. n - 1 and, when two,
 * the same of tile row ty + 1 in lanes 8 .. 8 + n - 1 (a narrow image,
 * tw <= 8, fills twice the lanes that way). Their tiles are consecutive
 * in the chunk: tiles() of them. */
typedef struct run {
    int64_t b, ty, tx, n;
    int two;
} run;

static int64_t tiles(const run *r)
{
    return r->two ? 2 * r->n : r->n;
}

static __mmask16 run_lanes(const run *r)
{
    return (__mmask16)(lanes(0, r->n) | (r->two ? lanes(8, 8 + r->n) : 0));
}

/* the run from tile t of the batch, of at most most tiles */
static run run_at(const wino *g, int64_t t, int64_t most)
{
    run r = {t / g->tiles, t % g->tiles / g->tw, t % g->tw, 0, 0};
    r.two = g->tw <= 8 && r.tx == 0 && r.ty + 1 < g->th && 2 * g->tw <= most;
    r.n = min64(min64(16, g->tw - r.tx), most);
    return r;
}

/* A run's lanes and its tiles: lanes, the run's lanes (run_lanes); tiles,
 * the first tiles(r) of 16 (lanes(0, tiles)); two, r->two. */
typedef struct run_mask {
    __mmask16 lanes, tiles;
    int two;
} run_mask;

static run_mask run_mask_of(const run *r)
{
    return (run_mask){run_lanes(r), lanes(0, tiles(r)), r->two};
}

/* a run's 16 lanes to its consecutive tiles at p, and back */
T512 static inline __attribute__((always_inline)) void put_tiles(float *p, run_mask m, __m512 v)
{
    if (m.two) v = _mm512_maskz_compress_ps(m.lanes, v);
    _mm512_mask_storeu_ps(p, m.tiles, v);
}

T512 static inline __attribute__((always_inline)) __m512 get_tiles(const float *p, run_mask m)
{
    if (!m.two) return _mm512_maskz_loadu_ps(m.lanes, p);
    return _mm512_maskz_expand_ps(m.lanes, _mm512_maskz_loadu_ps(m.tiles, p));
}

/* The runs of tiles t0 .. t0 + tc - 1, cut at 48-tile panels when panels;
 * the transforms take each channel through all of them, so that a plane
 * is read (or written) in order: a run through every channel jumped
 * between planes and defeated the prefetchers. */
typedef struct runs {
    int64_t n;
    run r[TC_MOST];
    int64_t q[TC_MOST]; /* the run's first tile, from t0 */
} runs;

static void runs_of(const wino *g, int64_t t0, int64_t tc, int panels, runs *rs)
{
    rs->n = 0;
    for (int64_t q = 0; q < tc; rs->n++) {
        rs->r[rs->n] = run_at(g, t0 + q, panels ? min64(tc - q, PX_NR - q % PX_NR) : tc - q);
        rs->q[rs->n] = q;
        q += tiles(&rs->r[rs->n]);
    }
}

/* Fetches into L1 what the runs read of channel i + AHEAD of n (and, at
 * channel 0, of channels 1 .. AHEAD - 1): rows 2 ty + r0 .. 2 ty + r1 of
 * each tile row of the planes (h x w per image, images istride apart)
 * from base (of dtype dt), a channel's planes plane elements apart. A
 * channel's runs take less time than a miss to DRAM. */
T512 static void prefetch(const runs *rs, const void *base, phx_dtype dt, int64_t i, int64_t n, int64_t plane,
                          int64_t istride, int64_t h, int64_t w, int64_t r0, int64_t r1)
{
    int64_t es = (int64_t)phx_dtype_size(dt), line = 64 / es;
    for (int64_t c = i ? i + AHEAD : 1; c <= i + AHEAD && c < n; c++)
        for (int64_t k = 0; k < rs->n; k++) {
            const run *r = &rs->r[k];
            if (k && r->tx) continue; /* a tile row once */
            int64_t a = 2 * r->ty + r0 < 0 ? 0 : 2 * r->ty + r0, b = min64(2 * r->ty + r1 + 1 + 2 * r->two, h);
            for (int64_t f = a * w; f < b * w; f += line)
                _mm_prefetch((const char *)base + (c * plane + r->b * istride + f) * es, _MM_HINT_T0);
        }
}

static const int32_t EVEN[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t ODD[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
static const int32_t LO[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
static const int32_t HI[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/* Two loads of 16 whose even and odd lanes together are a row's two
 * patch (or tile) columns j, j + 1 for every lane of a run: plane row y
 * from column c (and c + 16), or, for a run of two tile rows, rows y and
 * y + 2 from column c. The offsets in a plane of rows h x w, the lanes
 * inside it (0 where a row is outside, the offset then 0). */
typedef struct pair {
    int64_t off[2];
    __mmask16 mk[2];
} pair;

static pair pair_of(const run *r, int64_t y, int64_t c, int64_t h, int64_t w)
{
    pair p;
    for (int i = 0; i < 2; i++) {
        int64_t yy = y + (r->two ? 2 * i : 0), cc = c + (r->two ? 0 : 16 * i);
        int in = yy >= 0 && yy < h;
        p.off[i] = in ? yy * w + cc : 0;
        p.mk[i] = in ? lanes(-cc, w - cc) : 0;
    }
    return p;
}

/* Where a run's 4 x 4 input patches sit in each input plane: patch row
 * a, columns 0-1 and 2-3. */
typedef struct in_run {
    pair p[4][2];
} in_run;

static in_run in_run_of(const phx_conv2d_desc *d, const run *r)
{
    in_run o;
    for (int a = 0; a < 4; a++)
        for (int j = 0; j < 2; j++)
            o.p[a][j] = pair_of(r, 2 * r->ty - d->pad_h + a, 2 * r->tx - d->pad_w + 2 * j, d->h, d->w);
    return o;
}

/* lanes mk of the 16 elements from element at of base (of dtype dt:
 * f16/bf16 widened exactly, as the cast kernel widens them), zeros
 * elsewhere; and lanes mk of v stored there (f16/bf16: rounded once, the
 * cast kernel's bits) */
T512 static inline __attribute__((always_inline)) __m512 ld_at(const void *base, phx_dtype dt, int64_t at, __mmask16 mk)
{
    if (dt == PHX_F32) return _mm512_maskz_loadu_ps(mk, (const float *)base + at);
    return px_half_mask_ld(dt == PHX_BF16, (const uint16_t *)base + at, mk);
}

T512 static inline __attribute__((always_inline)) void st_at(void *base, phx_dtype dt, int64_t at, __mmask16 mk,
                                                             __m512 v)
{
    if (dt == PHX_F32)
        _mm512_mask_storeu_ps((float *)base + at, mk, v);
    else
        px_half_mask_st(dt == PHX_BF16, (uint16_t *)base + at, mk, v);
}

/* the even and odd lanes of the pair's two loads from the plane at
 * element at of base (of dtype dt) */
T512 static inline __attribute__((always_inline)) void pair_load(const pair *p, const void *base, phx_dtype dt,
                                                                 int64_t at, __m512 *even_cols, __m512 *odd_cols)
{
    const __m512i even = _mm512_loadu_si512(EVEN), odd = _mm512_loadu_si512(ODD);
    __m512 l0 = ld_at(base, dt, at + p->off[0], p->mk[0]);
    __m512 l1 = ld_at(base, dt, at + p->off[1], p->mk[1]);
    *even_cols = _mm512_permutex2var_ps(l0, even, l1);
    *odd_cols = _mm512_permutex2var_ps(l0, odd, l1);
}

/* V = B^T p B of the run's tiles in the plane at element at of x (of
 * dtype dt) into v (position e at v + e es) */
T512 static inline __attribute__((always_inline)) void input_tf(const in_run *o, run_mask rm, const void *x,
                                                                phx_dtype dt, int64_t at, float *v, int64_t es)
{
    __m512 p[4][4], t[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        pair_load(&o->p[a][0], x, dt, at, &p[a][0], &p[a][1]);
        pair_load(&o->p[a][1], x, dt, at, &p[a][2], &p[a][3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_sub_ps(p[0][j], p[2][j]);
        t[1][j] = _mm512_add_ps(p[1][j], p[2][j]);
        t[2][j] = _mm512_sub_ps(p[2][j], p[1][j]);
        t[3][j] = _mm512_sub_ps(p[1][j], p[3][j]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        put_tiles(v + (4 * i) * es, rm, _mm512_sub_ps(t[i][0], t[i][2]));
        put_tiles(v + (4 * i + 1) * es, rm, _mm512_add_ps(t[i][1], t[i][2]));
        put_tiles(v + (4 * i + 2) * es, rm, _mm512_sub_ps(t[i][2], t[i][1]));
        put_tiles(v + (4 * i + 3) * es, rm, _mm512_sub_ps(t[i][1], t[i][3]));
    }
}

/* V of input channels c0 .. c0 + nc - 1 for the runs: tile t0 + q of
 * channel c0 + i at v[e es + i cs + q] (plain), or, packed, in 48-column
 * panels pstride floats apart: v[e es + i cs + (q / 48) pstride + q % 48] */
T512 static void chunk_in(const wino *g, const runs *rs, int64_t c0, int64_t nc, float *v, int64_t es, int64_t cs,
                          int64_t pstride)
{
    const phx_conv2d_desc *d = g->d;
    int64_t hw = d->h * d->w, chw = d->c * hw;
    in_run o[TC_MOST];
    run_mask rm[TC_MOST];
    for (int64_t k = 0; k < rs->n; k++) o[k] = in_run_of(d, &rs->r[k]), rm[k] = run_mask_of(&rs->r[k]);
    for (int64_t i = 0; i < nc; i++) {
        prefetch(rs, (const char *)g->x + c0 * hw * (int64_t)phx_dtype_size(g->dt), g->dt, i, nc, hw, chw, d->h, d->w,
                 -d->pad_h, 3 - d->pad_h);
        for (int64_t k = 0; k < rs->n; k++) {
            int64_t q = rs->q[k];
            input_tf(&o[k], rm[k], g->x, g->dt, (c0 + i) * hw + rs->r[k].b * chw,
                     v + i * cs + (pstride ? q / PX_NR * pstride + q % PX_NR : q), es);
        }
    }
}

/* Where output rows 2 ty + i of each run sit in the output (or dY) of
 * the first channel, as pairs of 16 pixels clipped to the run's and the
 * row's, and the runs' masks */
static void out_pairs(const wino *g, const runs *rs, pair (*po)[2], run_mask *rms)
{
    const phx_conv2d_desc *d = g->d;
    int64_t kohw = d->k * d->oh * d->ow;
    for (int64_t k = 0; k < rs->n; k++) {
        const run *r = &rs->r[k];
        rms[k] = run_mask_of(r);
        for (int i = 0; i < 2; i++) {
            pair *p = &po[k][i];
            *p = pair_of(r, 2 * r->ty + i, 2 * r->tx, d->oh, d->ow);
            p->mk[0] &= lanes(0, 2 * r->n), p->mk[1] &= lanes(0, r->two ? 2 * r->n : 2 * r->n - 16);
            p->off[0] += r->b * kohw, p->off[1] += r->b * kohw;
        }
    }
}

/* Y = A^T M A + bias of every output channel for the runs from m (tile
 * t0 + q of channel co at m[e es + co g->tc + q]) */
T512 static void chunk_out(const wino *g, const runs *rs, const float *m, int64_t es)
{
    const phx_conv2d_desc *d = g->d;
    const __m512i lo = _mm512_loadu_si512(LO), hi = _mm512_loadu_si512(HI);
    int64_t ohw = d->oh * d->ow, kohw = d->k * ohw;
    /* the pixels of lanes 0-7 (lo) and 8-15 (hi) of output row i go where
     * the pair of that row reads them from */
    pair po[TC_MOST][2];
    run_mask rms[TC_MOST];
    out_pairs(g, rs, po, rms);
    for (int64_t co = 0; co < d->k; co++) {
        __m512 bv = _mm512_set1_ps(g->bias ? g->bias[co] : 0.0f);
        prefetch(rs, g->y, g->ydt, co, d->k, ohw, kohw, d->oh, d->ow, 0, 1);
        for (int64_t k = 0; k < rs->n; k++) {
            run_mask rm = rms[k];
            const float *mt = m + co * g->tc + rs->q[k];
            __m512 u[2][4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m512 a0 = get_tiles(mt + j * es, rm), a1 = get_tiles(mt + (4 + j) * es, rm);
                __m512 a2 = get_tiles(mt + (8 + j) * es, rm), a3 = get_tiles(mt + (12 + j) * es, rm);
                u[0][j] = _mm512_add_ps(_mm512_add_ps(a0, a1), a2);
                u[1][j] = _mm512_sub_ps(_mm512_sub_ps(a1, a2), a3);
            }
            for (int i = 0; i < 2; i++) {
                __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(u[i][0], u[i][1]), u[i][2]), bv);
                __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(u[i][1], u[i][2]), u[i][3]), bv);
                const pair *p = &po[k][i];
                st_at(g->y, g->ydt, co * ohw + p->off[0], p->mk[0], _mm512_permutex2var_ps(y0, lo, y1));
                st_at(g->y, g->ydt, co * ohw + p->off[1], p->mk[1], _mm512_permutex2var_ps(y0, hi, y1));
            }
        }
    }
}

/* Z = A dY A^T of every output channel for the runs into z: tile t0 + q
 * of channel co at z[e es + co cs + q] (plain), or, packed, in 48-column
 * panels pstride floats apart (as chunk_in); dY 0 outside the output */
T512 static void chunk_grad(const wino *g, const runs *rs, float *z, int64_t es, int64_t cs, int64_t pstride)
{
    const phx_conv2d_desc *d = g->d;
    const __m512 zero = _mm512_setzero_ps();
    int64_t ohw = d->oh * d->ow, kohw = d->k * ohw;
    pair pg[TC_MOST][2]; /* the dY rows of each run, as chunk_out writes Y */
    run_mask rms[TC_MOST];
    out_pairs(g, rs, pg, rms);
    for (int64_t co = 0; co < d->k; co++) {
        prefetch(rs, g->dy, g->dt, co, d->k, ohw, kohw, d->oh, d->ow, 0, 1);
        for (int64_t k = 0; k < rs->n; k++) {
            run_mask rm = rms[k];
            __m512 q[2][2]; /* q[i][j]: dY (2 ty + i, 2 tx + j) of each lane's tile */
            for (int i = 0; i < 2; i++) pair_load(&pg[k][i], g->dy, g->dt, co * ohw, &q[i][0], &q[i][1]);
            __m512 r[4][2]; /* A q: rows q0, q0 + q1, q0 - q1, -q1 */
            for (int j = 0; j < 2; j++) {
                r[0][j] = q[0][j];
                r[1][j] = _mm512_add_ps(q[0][j], q[1][j]);
                r[2][j] = _mm512_sub_ps(q[0][j], q[1][j]);
                r[3][j] = _mm512_sub_ps(zero, q[1][j]);
            }
            int64_t q0 = rs->q[k];
            float *zt = z + co * cs + (pstride ? q0 / PX_NR * pstride + q0 % PX_NR : q0);
            for (int i = 0; i < 4; i++) {
                put_tiles(zt + (4 * i) * es, rm, r[i][0]);
                put_tiles(zt + (4 * i + 1) * es, rm, _mm512_add_ps(r[i][0], r[i][1]));
                put_tiles(zt + (4 * i + 2) * es, rm, _mm512_sub_ps(r[i][0], r[i][1]));
                put_tiles(zt + (4 * i + 3) * es, rm, _mm512_sub_ps(zero, r[i][1]));
            }
        }
    }
}

/* dX += B Q B^T of every input channel for the runs, Q from q (tile t0 + q
 * of channel ci at q[e es + ci g->tc + q]): each tile's 4 x 4 patch
 * gradient added where its input patch was read, patches overlapping by
 * two rows and columns (dX zeroed by the caller; a pixel's sums in the
 * order of the tiles) */
T512 static void chunk_back(const wino *g, const runs *rs, const float *q, int64_t es)
{
    const phx_conv2d_desc *d = g->d;
    const __m512i lo = _mm512_loadu_si512(LO), hi = _mm512_loadu_si512(HI);
    const __m512 zero = _mm512_setzero_ps();
    int64_t hw = d->h * d->w, chw = d->c * hw;
    /* patch row a of each run: where its pixels go, clipped to the image
     * and to the run's 2 n + 2 pixels (2 n where the run fills its lanes:
     * the last tile's columns 2-3 then go apart, "spill") */
    pair pb[TC_MOST][4];
    run_mask rms[TC_MOST];
    for (int64_t k = 0; k < rs->n; k++) {
        const run *r = &rs->r[k];
        int full = r->two ? r->n == 8 : r->n == 16;
        int64_t cnt = full ? 2 * r->n : 2 * r->n + 2;
        rms[k] = run_mask_of(r);
        for (int a = 0; a < 4; a++) {
            pair *p = &pb[k][a];
            *p = pair_of(r, 2 * r->ty - d->pad_h + a, 2 * r->tx - d->pad_w, d->h, d->w);
            p->mk[0] &= lanes(0, cnt), p->mk[1] &= lanes(0, r->two ? cnt : cnt - 16);
            p->off[0] += r->b * chw, p->off[1] += r->b * chw;
        }
    }
    for (int64_t ci = 0; ci < d->c; ci++) {
        float *xc = (float *)g->y + ci * hw; /* dX */
        for (int64_t k = 0; k < rs->n; k++) {
            const run *r = &rs->r[k];
            run_mask rm = rms[k];
            const float *qt = q + ci * g->tc + rs->q[k];
            __m512 t[4][4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) { /* T = B Q: rows Q0, Q1 - Q2 + Q3, Q1 + Q2 - Q0, -Q3 */
                __m512 q0 = get_tiles(qt + j * es, rm), q1 = get_tiles(qt + (4 + j) * es, rm);
                __m512 q2 = get_tiles(qt + (8 + j) * es, rm), q3 = get_tiles(qt + (12 + j) * es, rm);
                t[0][j] = q0;
                t[1][j] = _mm512_add_ps(_mm512_sub_ps(q1, q2), q3);
                t[2][j] = _mm512_sub_ps(_mm512_add_ps(q1, q2), q0);
                t[3][j] = _mm512_sub_ps(zero, q3);
            }
            int full = r->two ? r->n == 8 : r->n == 16;
            __mmask16 keep = r->two && full ? (__mmask16)0xfeff : (__mmask16)0xffff; /* no carry into lane 8 */
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) { /* P = T B^T: columns T0, T1 - T2 + T3, T1 + T2 - T0, -T3 */
                __m512 p0 = t[a][0], p1 = _mm512_add_ps(_mm512_sub_ps(t[a][1], t[a][2]), t[a][3]);
                __m512 p2 = _mm512_sub_ps(_mm512_add_ps(t[a][1], t[a][2]), t[a][0]), p3 = _mm512_sub_ps(zero, t[a][3]);
                /* pixel 2 l + 0 / + 1 of the row: tile l's columns 0 / 1 and tile l - 1's 2 / 3 */
                __m512 shift2 = _mm512_castsi512_ps(
                    _mm512_maskz_alignr_epi32(keep, _mm512_castps_si512(p2), _mm512_setzero_si512(), 15));
                __m512 shift3 = _mm512_castsi512_ps(
                    _mm512_maskz_alignr_epi32(keep, _mm512_castps_si512(p3), _mm512_setzero_si512(), 15));
                __m512 ev = _mm512_add_ps(p0, shift2), od = _mm512_add_ps(p1, shift3);
                const pair *pp = &pb[k][a];
                float *o0 = xc + pp->off[0], *o1 = xc + pp->off[1];
                _mm512_mask_storeu_ps(
                    o0, pp->mk[0],
                    _mm512_add_ps(_mm512_maskz_loadu_ps(pp->mk[0], o0), _mm512_permutex2var_ps(ev, lo, od)));
                _mm512_mask_storeu_ps(
                    o1, pp->mk[1],
                    _mm512_add_ps(_mm512_maskz_loadu_ps(pp->mk[1], o1), _mm512_permutex2var_ps(ev, hi, od)));
                if (!full) continue;
                /* the spill: the run's last tile's columns 2 and 3 (each tile row's, for two) */
                float s2[16], s3[16];
                _mm512_storeu_ps(s2, p2), _mm512_storeu_ps(s3, p3);
                for (int row = 0; row <= r->two; row++) {
                    int64_t y = 2 * (r->ty + row) - d->pad_h + a, x = 2 * (r->tx + r->n) - d->pad_w;
                    int l = row ? 15 : r->n - 1;
                    if (y < 0 || y >= d->h) continue;
                    float *px = (float *)g->y + r->b * chw + ci * hw + y * d->w;
                    if (x >= 0 && x < d->w) px[x] += s2[l];
                    if (x + 1 >= 0 && x + 1 < d->w) px[x + 1] += s3[l];
                }
            }
        }
    }
}

/* U[e] (k x c) = G g G^T of every kernel of w (k, c, 3, 3), at u[e k c] */
static void weight_tf(const phx_conv2d_desc *d, const float *w, float *u)
{
    int64_t kc = d->k * d->c;
    for (int64_t i = 0; i < kc; i++) {
        const float *g = w + i * 9;
        float t[4][3]; /* G g */
        for (int j = 0; j < 3; j++) {
            t[0][j] = g[j];
            t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
            t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
            t[3][j] = g[6 + j];
        }
        for (int r = 0; r < 4; r++) {
            u[(4 * r) * kc + i] = t[r][0];
            u[(4 * r + 1) * kc + i] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
            u[(4 * r + 2) * kc + i] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
            u[(4 * r + 3) * kc + i] = t[r][2];
        }
    }
}

/* The last panel's unused columns of each position's packed block (rows
 * rows, blocks vs apart) for a chunk of tc tiles: zeros, not stale floats */
static void zero_tail(float *v, int64_t vs, int64_t tc, int64_t rows)
{
    for (int e = 0; tc % PX_NR && e < NE; e++)
        memset(v + e * vs + tc / PX_NR * rows * PX_NR, 0, (size_t)(rows * PX_NR) * sizeof(float));
}

/* forward of chunks lo .. hi - 1: V packed as the GEMMs' B panels
 * (position e at v + e c tc), M plain (k x tc per position) */
T512 static void fwd_part(void *arg, int64_t lo, int64_t hi)
{
    wino *g = arg;
    const phx_conv2d_desc *d = g->d;
    int64_t c = d->c, k = d->k, mp = (k + PX_MR - 1) / PX_MR * PX_MR, all = d->n * g->tiles;
    int64_t vs = spaced(c * g->tc), ms = spaced(k * g->tc);
    float *v = px_cpu_scratch(1, (size_t)(NE * vs) * sizeof(float));
    float *m = px_cpu_scratch(3, (size_t)(NE * ms) * sizeof(float));
    if (!v || !m) {
        __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    runs rs;
    for (int64_t ch = lo; ch < hi; ch++) {
        int64_t t0 = ch * g->tc, tc = min64(g->tc, all - t0);
        zero_tail(v, vs, tc, c);
        runs_of(g, t0, tc, 1, &rs);
        chunk_in(g, &rs, 0, c, v, vs, PX_NR, c * PX_NR);
        for (int e = 0; e < NE; e++)
            for (int64_t pc = 0; pc < c; pc += g->kc)
                px_conv_tiles(min64(g->kc, c - pc), g->up + e * mp * c + pc * mp, v + e * vs + pc * PX_NR, c * PX_NR, k,
                              tc, m + e * ms, g->tc, pc ? 1.0f : 0.0f);
        runs_of(g, t0, tc, 0, &rs);
        chunk_out(g, &rs, m, ms);
    }
}

static phx_status forward(const phx_conv2d_desc *d, phx_dtype dt, const void *x, const float *w, const float *bias,
                          void *y)
{
    wino g = plan(d);
    g.x = x, g.bias = bias, g.y = y, g.dt = g.ydt = dt;
    g.kc = px_conv_block(d->c, PX_KC, 1);
    int64_t mp = (d->k + PX_MR - 1) / PX_MR * PX_MR;
    float *u = px_cpu_scratch(4, (size_t)(NE * d->k * d->c) * sizeof(float));
    float *up = px_cpu_scratch(0, (size_t)(NE * mp * d->c) * sizeof(float));
    if (!u || !up) return phx_error(PHX_ENOMEM, "conv2d: out of memory for the transformed weight");
    weight_tf(d, w, u);
    for (int e = 0; e < NE; e++) px_conv_pack_rows(up + e * mp * d->c, d->k, d->c, g.kc, u + e * d->k * d->c);
    g.up = up;
    px_cpu_parallel_for((d->n * g.tiles + g.tc - 1) / g.tc, 1, fwd_part, &g);
    if (g.failed) return phx_error(PHX_ENOMEM, "conv2d: out of memory for the Winograd tiles");
    return PHX_OK;
}

/* dX of images lo .. hi - 1 (each image on one thread: patches overlap),
 * in chunks of their tiles: Z packed as the GEMMs' B panels, then
 * Q[e] (c x tc) = U[e]^T Z[e], then dX += the patches of B Q B^T */
T512 static void data_part(void *arg, int64_t lo, int64_t hi)
{
    wino *g = arg;
    const phx_conv2d_desc *d = g->d;
    int64_t c = d->c, k = d->k, mp = (c + PX_MR - 1) / PX_MR * PX_MR, end = hi * g->tiles;
    int64_t zs = spaced(k * g->tc), qs = spaced(c * g->tc);
    float *z = px_cpu_scratch(1, (size_t)(NE * zs) * sizeof(float));
    float *q = px_cpu_scratch(3, (size_t)(NE * qs) * sizeof(float));
    if (!z || !q) {
        __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset((float *)g->y + lo * c * d->h * d->w, 0, (size_t)((hi - lo) * c * d->h * d->w) * sizeof(float));
    runs rs;
    /* chunks cut where the batch's chunks of g->tc tiles end (and where
     * the images end): the runs, and so the order in which overlapping
     * patches add up, do not depend on which images a thread takes */
    for (int64_t t0 = lo * g->tiles, tc; t0 < end; t0 += tc) {
        tc = min64((t0 / g->tc + 1) * g->tc, end) - t0;
        zero_tail(z, zs, tc, k);
        runs_of(g, t0, tc, 1, &rs);
        chunk_grad(g, &rs, z, zs, PX_NR, k * PX_NR);
        for (int e = 0; e < NE; e++)
            for (int64_t pc = 0; pc < k; pc += g->kc)
                px_conv_tiles(min64(g->kc, k - pc), g->up + e * mp * k + pc * mp, z + e * zs + pc * PX_NR, k * PX_NR, c,
                              tc, q + e * qs, g->tc, pc ? 1.0f : 0.0f);
        runs_of(g, t0, tc, 0, &rs);
        chunk_back(g, &rs, q, qs);
    }
}

/* dx (n, c, h, w) from dy (n, k, oh, ow): the adjoint of the forward's
 * transforms, on the forward's tiles */
static phx_status data(const phx_conv2d_desc *d, phx_dtype dt, const float *w, const void *dy, float *dx)
{
    wino g = plan(d);
    g.dy = dy, g.y = dx, g.dt = dt, g.ydt = PHX_F32;
    g.kc = px_conv_block(d->k, PX_KC, 1);
    int64_t mp = (d->c + PX_MR - 1) / PX_MR * PX_MR;
    float *u = px_cpu_scratch(4, (size_t)(NE * d->k * d->c) * sizeof(float));
    float *up = px_cpu_scratch(0, (size_t)(NE * mp * d->k) * sizeof(float));
    if (!u || !up) return phx_error(PHX_ENOMEM, "conv2d_backward_data: out of memory for the transformed weight");
    weight_tf(d, w, u);
    for (int e = 0; e < NE; e++) /* U[e]^T: the transformed weight's columns as rows */
        for (int64_t pc = 0; pc < d->k; pc += g.kc)
            px_avx512_pack(up + e * mp * d->k + pc * mp, PX_MR, d->c, min64(g.kc, d->k - pc),
                           u + (e * d->k + pc) * d->c, PHX_F32, d->c, 1);
    g.up = up;
    px_cpu_parallel_for(d->n, 1, data_part, &g);
    if (g.failed) return phx_error(PHX_ENOMEM, "conv2d_backward_data: out of memory for the Winograd tiles");
    return PHX_OK;
}

/* s[a k + b] += the dot products of rows a < nv of v and b < nz of z
 * (rows ld apart) over tc tiles: 16 tiles per FMA, the lanes summed once
 * at the end (nv, nz <= 4; constants where the caller can make them so) */
T512 static inline __attribute__((always_inline)) void dots(int nv, int nz, int64_t tc, const float *v, const float *z,
                                                            int64_t ld, float *s, int64_t k)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t t = 0; t < tc; t += 16) {
        __mmask16 m = lanes(0, tc - t); /* past tc: stale scratch, masked on both sides */
        __m512 vv[4];
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) vv[a] = a < nv ? _mm512_maskz_loadu_ps(m, v + a * ld + t) : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            if (b >= nz) continue;
            __m512 zz = _mm512_maskz_loadu_ps(m, z + b * ld + t);
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++)
                if (a < nv) acc[a][b] = _mm512_fmadd_ps(vv[a], zz, acc[a][b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            if (a < nv && b < nz) s[a * k + b] += _mm512_reduce_add_ps(acc[a][b]);
}

/* S of parts lo .. hi - 1 of the batch's chunks: part p's chunks summed
 * into g->sp + p NE c k, S[e] (c x k) += V[e] Z[e]^T, both plain (rows of
 * tc tiles), as dot products of their rows in 4 x 4 blocks (a GEMM here
 * filled two thirds of its 48-column tiles for 64 channels, behind
 * transposing copies) */
T512 static void wgt_part(void *arg, int64_t lo, int64_t hi)
{
    wino *g = arg;
    const phx_conv2d_desc *d = g->d;
    int64_t c = d->c, k = d->k, all = d->n * g->tiles, chunks = (all + g->tc - 1) / g->tc;
    int64_t vs = spaced(c * g->tc), zs = spaced(k * g->tc);
    float *v = px_cpu_scratch(1, (size_t)(NE * vs) * sizeof(float));
    float *z = px_cpu_scratch(3, (size_t)(NE * zs) * sizeof(float));
    if (!v || !z) {
        __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    runs rs;
    for (int64_t p = lo; p < hi; p++) {
        float *s = g->sp + p * NE * c * k;
        memset(s, 0, (size_t)(NE * c * k) * sizeof(float));
        for (int64_t ch = p * chunks / g->parts; ch < (p + 1) * chunks / g->parts; ch++) {
            int64_t t0 = ch * g->tc, tc = min64(g->tc, all - t0);
            runs_of(g, t0, tc, 0, &rs);
            chunk_in(g, &rs, 0, c, v, vs, g->tc, 0);
            chunk_grad(g, &rs, z, zs, g->tc, 0);
            for (int e = 0; e < NE; e++)
                for (int64_t a = 0; a < c; a += 4)
                    for (int64_t b = 0; b < k; b += 4) {
                        const float *va = v + e * vs + a * g->tc, *zb = z + e * zs + b * g->tc;
                        float *sab = s + e * c * k + a * k + b;
                        if (a + 4 <= c && b + 4 <= k)
                            dots(4, 4, tc, va, zb, g->tc, sab, k);
                        else
                            dots((int)min64(4, c - a), (int)min64(4, k - b), tc, va, zb, g->tc, sab, k);
                    }
        }
    }
}

/* dW += G^T S G for input channels lo .. hi - 1, S the parts' sum (in
 * part 0) */
static void wgt_out(void *arg, int64_t lo, int64_t hi)
{
    wino *g = arg;
    int64_t c = g->d->c, k = g->d->k;
    for (int64_t ci = lo; ci < hi; ci++)
        for (int64_t co = 0; co < k; co++) {
            float q[4][4], r[3][4];
            for (int e = 0; e < NE; e++) q[e / 4][e % 4] = g->sp[e * c * k + ci * k + co];
            for (int j = 0; j < 4; j++) {
                r[0][j] = q[0][j] + 0.5f * (q[1][j] + q[2][j]);
                r[1][j] = 0.5f * (q[1][j] - q[2][j]);
                r[2][j] = 0.5f * (q[1][j] + q[2][j]) + q[3][j];
            }
            float *out = g->dw + (co * c + ci) * 9;
            for (int i = 0; i < 3; i++) {
                out[3 * i] += r[i][0] + 0.5f * (r[i][1] + r[i][2]);
                out[3 * i + 1] += 0.5f * (r[i][1] - r[i][2]);
                out[3 * i + 2] += 0.5f * (r[i][1] + r[i][2]) + r[i][3];
            }
        }
}

/* The batch's chunks are cut into parts (at most 8, and at most 64 MiB
 * of S) that the threads take whole, each transforming its tiles once;
 * the parts' S are added in part order. The parts depend on the shape
 * alone, so the sums, and the bits, are the same on any thread count. */
static phx_status weight(const phx_conv2d_desc *d, phx_dtype dt, const void *x, const void *dy, float *dw, float *db)
{
    wino g = plan(d);
    g.tc = TC_MOST; /* fewer lane sums; V and Z are read row by row */
    g.x = x, g.dy = dy, g.dw = dw, g.dt = dt;
    int64_t chunks = (d->n * g.tiles + g.tc - 1) / g.tc, per = NE * d->c * d->k;
    int64_t most = ((int64_t)16 << 20) / per;
    g.parts = min64(min64(chunks, 8), most > 1 ? most : 1);
    if (!(g.sp = px_cpu_scratch(0, (size_t)(g.parts * per) * sizeof(float))))
        return phx_error(PHX_ENOMEM, "conv2d_backward_weight: out of memory for the Winograd sums");
    px_cpu_parallel_for(g.parts, 1, wgt_part, &g);
    if (g.failed) return phx_error(PHX_ENOMEM, "conv2d_backward_weight: out of memory for the Winograd tiles");
    for (int64_t p = 1; p < g.parts; p++) /* in part order, element by element */
        for (int64_t i = 0; i < per; i++) g.sp[i] += g.sp[p * per + i];
    px_cpu_parallel_for(d->c, 1, wgt_out, &g);
    if (db) px_conv_bias_grad(d, dt, dy, db);
    return PHX_OK;
}

int px_cpu_conv2d_winograd_takes(int pass, const phx_conv2d_desc *d)
{
    (void)pass;
    return px_cpu_avx512bw() && d->groups == 1 && d->n >= 1 && d->kh == 3 && d->kw == 3 && d->stride_h == 1 &&
        d->stride_w == 1 && d->dil_h == 1 && d->dil_w == 1;
}

phx_status px_cpu_conv2d_winograd_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const float *w,
                                     const float *bias, const void *dy, void *y, float *dx, float *dw, float *db)
{
    if (!px_cpu_conv2d_winograd_takes(pass, d)) return PHX_EUNSUPPORTED;
    if (pass == 0) return forward(d, dt, x, w, bias, y);
    if (pass == 2) return weight(d, dt, x, dy, dw, db);
    return data(d, dt, w, dy, dx);
}
#else
int px_cpu_conv2d_winograd_takes(int pass, const phx_conv2d_desc *d)
{
    (void)pass, (void)d;
    return 0;
}

phx_status px_cpu_conv2d_winograd_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const float *w,
                                     const float *bias, const void *dy, void *y, float *dx, float *dw, float *db)
{
    (void)pass, (void)d, (void)dt, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dx, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}
#endif

phx_status px_cpu_conv2d_winograd(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                  const float *dy, float *y, float *dx, float *dw, float *db)
{
    return px_cpu_conv2d_winograd_dt(pass, d, PHX_F32, x, w, bias, dy, y, dx, dw, db);
}
