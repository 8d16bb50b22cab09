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
 *   backward data:   the forward of dy with the weight flipped (conv-avx512.h)
 *   backward weight: S[e] (c, k) = sum over tiles V[e] (c, tiles) Z[e]^T,
 *                    Z = A dY A^T, then dW += G^T S G
 * The transforms run on 16 tiles of a tile row at once; the patches are
 * read straight from the NCHW planes with masked loads, zeros in the
 * padding. Images are taken in chunks of about 1000 tiles; threads take
 * whole chunks (forward, data) or 8-channel groups of the input channels
 * (weight), so every sum runs in the same order on any thread count.
 * The rounding differs from the direct convolution's (doc/cnn.md gives
 * the bound t/core_conv checks). */
#include "config.h"
#include <string.h>
#include "kernels/cpu/conv-avx512.h"

#if PX_HAVE_X86
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,fma")))

enum {
    NE = 16, /* transformed positions */
    TC_MOST = 8 * PX_NR, /* tiles of a chunk at most */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* lanes lo .. hi - 1 of 16, clipped to 0 .. 15 */
static __mmask16 lanes(int64_t lo, int64_t hi)
{
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}

typedef struct wino {
    const phx_conv2d_desc *d;
    const float *x, *bias, *dy;
    float *y, *dw;
    const float *up; /* forward: U packed, position after position */
    int64_t th, tw, tiles; /* tile rows and columns, tiles of an image */
    int64_t tc; /* tiles of a chunk: 48-column panels of the GEMMs */
    int64_t kc; /* depth of a packed block of U */
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

/* at most 16 tiles of one tile row from tile t of the batch, and at most
 * most: image b, tile row ty, tile columns tx .. tx + n - 1 */
typedef struct run {
    int64_t b, ty, tx, n;
} run;

static run run_at(const wino *g, int64_t t, int64_t most)
{
    run r = {t / g->tiles, t % g->tiles / g->tw, t % g->tw, 0};
    r.n = min64(min64(16, g->tw - r.tx), most);
    return r;
}

static const int32_t EVEN[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t ODD[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
static const int32_t LO[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
static const int32_t HI[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/* Where a run's 4 x 4 input patches sit in each input plane: patch row a
 * is plane row row[a] (-1: outside, zeros), read by four loads of 16 at
 * columns col[q] with lanes mk[q] (0 outside the plane); the even and
 * odd lanes of loads 0-1 and 2-3 are patch columns 0, 1, 2, 3 of the 16
 * tiles. */
typedef struct in_run {
    int64_t row[4], col[4];
    __mmask16 mk[4];
} in_run;

static in_run in_run_of(const phx_conv2d_desc *d, const run *r)
{
    in_run o;
    for (int a = 0; a < 4; a++) {
        int64_t iy = 2 * r->ty - d->pad_h + a;
        o.row[a] = iy < 0 || iy >= d->h ? -1 : iy * d->w;
    }
    for (int q = 0; q < 4; q++) {
        o.col[q] = 2 * r->tx - d->pad_w + (q & 1) * 16 + (q >> 1) * 2;
        o.mk[q] = lanes(-o.col[q], d->w - o.col[q]);
    }
    return o;
}

/* V = B^T p B of the run's tiles in plane xc, position e at v + e es,
 * lanes 0 .. n - 1 */
T512 static inline __attribute__((always_inline)) void input_tf(const in_run *o, const float *xc, float *v, int64_t es,
                                                                __mmask16 m)
{
    const __m512i even = _mm512_loadu_si512(EVEN), odd = _mm512_loadu_si512(ODD);
    __m512 p[4][4], t[4][4];
    for (int a = 0; a < 4; a++) {
        if (o->row[a] < 0) {
            for (int b = 0; b < 4; b++) p[a][b] = _mm512_setzero_ps();
            continue;
        }
        const float *row = xc + o->row[a];
        __m512 l0 = _mm512_maskz_loadu_ps(o->mk[0], row + o->col[0]);
        __m512 l1 = _mm512_maskz_loadu_ps(o->mk[1], row + o->col[1]);
        __m512 l2 = _mm512_maskz_loadu_ps(o->mk[2], row + o->col[2]);
        __m512 l3 = _mm512_maskz_loadu_ps(o->mk[3], row + o->col[3]);
        p[a][0] = _mm512_permutex2var_ps(l0, even, l1);
        p[a][1] = _mm512_permutex2var_ps(l0, odd, l1);
        p[a][2] = _mm512_permutex2var_ps(l2, even, l3);
        p[a][3] = _mm512_permutex2var_ps(l2, odd, l3);
    }
    for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_sub_ps(p[0][j], p[2][j]);
        t[1][j] = _mm512_add_ps(p[1][j], p[2][j]);
        t[2][j] = _mm512_sub_ps(p[2][j], p[1][j]);
        t[3][j] = _mm512_sub_ps(p[1][j], p[3][j]);
    }
    for (int i = 0; i < 4; i++) {
        _mm512_mask_storeu_ps(v + (4 * i) * es, m, _mm512_sub_ps(t[i][0], t[i][2]));
        _mm512_mask_storeu_ps(v + (4 * i + 1) * es, m, _mm512_add_ps(t[i][1], t[i][2]));
        _mm512_mask_storeu_ps(v + (4 * i + 2) * es, m, _mm512_sub_ps(t[i][2], t[i][1]));
        _mm512_mask_storeu_ps(v + (4 * i + 3) * es, m, _mm512_sub_ps(t[i][1], t[i][3]));
    }
}

/* V of input channels c0 .. c0 + nc - 1 for tiles t0 .. t0 + tc - 1:
 * tile t0 + q of channel c0 + i at v[e es + i cs + q] (plain), or,
 * packed, in 48-column panels pstride floats apart:
 * v[e es + i cs + (q / 48) pstride + q % 48] */
T512 static void chunk_in(const wino *g, int64_t c0, int64_t nc, int64_t t0, int64_t tc, float *v, int64_t es,
                          int64_t cs, int64_t pstride)
{
    const phx_conv2d_desc *d = g->d;
    int64_t hw = d->h * d->w, nr = 0;
    /* the chunk's runs, then each channel's plane through all of them (the
     * plane is read in order: a run per channel would jump between planes
     * and defeat the prefetchers) */
    in_run o[TC_MOST];
    int64_t at[TC_MOST], img[TC_MOST];
    __mmask16 mk[TC_MOST];
    for (int64_t q = 0; q < tc; nr++) {
        run r = run_at(g, t0 + q, pstride ? min64(tc - q, PX_NR - q % PX_NR) : tc - q);
        o[nr] = in_run_of(d, &r);
        at[nr] = pstride ? q / PX_NR * pstride + q % PX_NR : q;
        img[nr] = (r.b * d->c + c0) * hw;
        mk[nr] = lanes(0, r.n);
        q += r.n;
    }
    /* the span of the first image's plane the chunk reads, prefetched a
     * channel ahead (64 planes read a few rows each defeat the hardware
     * prefetchers) */
    int64_t lo = (2 * run_at(g, t0, 1).ty - d->pad_h) * d->w, hi = lo + 2 * tc / g->tw * d->w + 4 * d->w + 2 * 16;
    lo = lo < 0 ? 0 : lo, hi = hi > hw ? hw : hi;
    for (int64_t i = 0; i < nc; i++) {
        if (i + 1 < nc)
            for (int64_t f = lo; f < hi; f += 16) _mm_prefetch((const char *)(g->x + img[0] + (i + 1) * hw + f), _MM_HINT_T0);
        for (int64_t k = 0; k < nr; k++) input_tf(&o[k], g->x + img[k] + i * hw, v + at[k] + i * cs, es, mk[k]);
    }
}
/* Y = A^T M A + bias of every output channel for tiles t0 .. t0 + tc - 1
 * from m (tile t0 + q of channel co at m[e es + co g->tc + q]) */
T512 static void chunk_out(const wino *g, int64_t t0, int64_t tc, const float *m, int64_t es)
{
    const phx_conv2d_desc *d = g->d;
    const __m512i lo = _mm512_loadu_si512(LO), hi = _mm512_loadu_si512(HI);
    int64_t ohw = d->oh * d->ow;
    for (int64_t q = 0; q < tc;) {
        run r = run_at(g, t0 + q, tc - q);
        int64_t rows = min64(2, d->oh - 2 * r.ty), cnt = min64(d->ow - 2 * r.tx, 2 * r.n); /* pixels of a row */
        __mmask16 mk = lanes(0, r.n), m0 = lanes(0, cnt), m1 = lanes(0, cnt - 16);
        float *yb = g->y + r.b * d->k * ohw + 2 * r.ty * d->ow + 2 * r.tx;
        for (int64_t co = 0; co < d->k; co++) {
            const float *mt = m + co * g->tc + q;
            __m512 bv = _mm512_set1_ps(g->bias ? g->bias[co] : 0.0f), u[2][4];
            for (int j = 0; j < 4; j++) {
                __m512 a0 = _mm512_maskz_loadu_ps(mk, mt + j * es), a1 = _mm512_maskz_loadu_ps(mk, mt + (4 + j) * es);
                __m512 a2 = _mm512_maskz_loadu_ps(mk, mt + (8 + j) * es);
                __m512 a3 = _mm512_maskz_loadu_ps(mk, mt + (12 + j) * es);
                u[0][j] = _mm512_add_ps(_mm512_add_ps(a0, a1), a2);
                u[1][j] = _mm512_sub_ps(_mm512_sub_ps(a1, a2), a3);
            }
            for (int64_t i = 0; i < rows; i++) {
                __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(u[i][0], u[i][1]), u[i][2]), bv);
                __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(u[i][1], u[i][2]), u[i][3]), bv);
                float *out = yb + co * ohw + i * d->ow;
                _mm512_mask_storeu_ps(out, m0, _mm512_permutex2var_ps(y0, lo, y1));
                _mm512_mask_storeu_ps(out + 16, m1, _mm512_permutex2var_ps(y0, hi, y1));
            }
        }
        q += r.n;
    }
}

/* Z = A dY A^T of every output channel for tiles t0 .. t0 + tc - 1 into
 * z (tile t0 + q of channel co at z[e es + co tc + q]), dY 0 outside
 * the output */
T512 static void chunk_grad(const wino *g, int64_t t0, int64_t tc, float *z, int64_t es)
{
    const phx_conv2d_desc *d = g->d;
    const __m512i even = _mm512_loadu_si512(EVEN), odd = _mm512_loadu_si512(ODD);
    const __m512 zero = _mm512_setzero_ps();
    int64_t ohw = d->oh * d->ow;
    for (int64_t qt = 0; qt < tc;) {
        run rn = run_at(g, t0 + qt, tc - qt);
        int64_t rows = min64(2, d->oh - 2 * rn.ty), cnt = min64(d->ow - 2 * rn.tx, 2 * rn.n);
        __mmask16 mk = lanes(0, rn.n), m0 = lanes(0, cnt), m1 = lanes(0, cnt - 16);
        const float *db = g->dy + rn.b * d->k * ohw + 2 * rn.ty * d->ow + 2 * rn.tx;
        for (int64_t co = 0; co < d->k; co++) {
            __m512 q[2][2]; /* q[i][j] lane l: dY (2 ty + i, 2 (tx + l) + j) */
            for (int i = 0; i < 2; i++) {
                if (i >= rows) {
                    q[i][0] = q[i][1] = zero;
                    continue;
                }
                const float *row = db + co * ohw + i * d->ow;
                __m512 l0 = _mm512_maskz_loadu_ps(m0, row), l1 = _mm512_maskz_loadu_ps(m1, row + 16);
                q[i][0] = _mm512_permutex2var_ps(l0, even, l1);
                q[i][1] = _mm512_permutex2var_ps(l0, odd, l1);
            }
            __m512 r[4][2]; /* A q: rows q0, q0 + q1, q0 - q1, -q1 */
            for (int j = 0; j < 2; j++) {
                r[0][j] = q[0][j];
                r[1][j] = _mm512_add_ps(q[0][j], q[1][j]);
                r[2][j] = _mm512_sub_ps(q[0][j], q[1][j]);
                r[3][j] = _mm512_sub_ps(zero, q[1][j]);
            }
            float *zt = z + co * g->tc + qt;
            for (int i = 0; i < 4; i++) {
                _mm512_mask_storeu_ps(zt + (4 * i) * es, mk, r[i][0]);
                _mm512_mask_storeu_ps(zt + (4 * i + 1) * es, mk, _mm512_add_ps(r[i][0], r[i][1]));
                _mm512_mask_storeu_ps(zt + (4 * i + 2) * es, mk, _mm512_sub_ps(r[i][0], r[i][1]));
                _mm512_mask_storeu_ps(zt + (4 * i + 3) * es, mk, _mm512_sub_ps(zero, r[i][1]));
            }
        }
        qt += rn.n;
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
    for (int64_t ch = lo; ch < hi; ch++) {
        int64_t t0 = ch * g->tc, tc = min64(g->tc, all - t0);
        if (tc % PX_NR) /* the last panel's unused columns: zeros, not stale floats */
            for (int e = 0; e < NE; e++)
                memset(v + e * vs + tc / PX_NR * c * PX_NR, 0, (size_t)(c * PX_NR) * sizeof(float));
        chunk_in(g, 0, c, t0, tc, v, vs, PX_NR, c * PX_NR);
        for (int e = 0; e < NE; e++)
            for (int64_t pc = 0; pc < c; pc += g->kc)
                px_conv_tiles(min64(g->kc, c - pc), g->up + e * mp * c + pc * mp, v + e * vs + pc * PX_NR,
                              c * PX_NR, k, tc, m + e * ms, g->tc, pc ? 1.0f : 0.0f);
        chunk_out(g, t0, tc, m, ms);
    }
}

static phx_status forward(const phx_conv2d_desc *d, const float *x, const float *w, const float *bias, float *y)
{
    wino g = plan(d);
    g.x = x, g.bias = bias, g.y = y;
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

/* dW of input channels 8 lo .. 8 hi - 1, over every chunk in order:
 * S[e] (nci x k) += V[e] Z[e]^T, both plain (rows of tc tiles) */
T512 static void wgt_part(void *arg, int64_t lo, int64_t hi)
{
    wino *g = arg;
    const phx_conv2d_desc *d = g->d;
    int64_t c = d->c, k = d->k, c0 = lo * PX_MR, nci = min64(hi * PX_MR, c) - c0, all = d->n * g->tiles;
    int64_t nc_most = px_conv_cols(k, g->tc);
    int64_t vs = spaced(nci * g->tc), zs = spaced(k * g->tc);
    float *v = px_cpu_scratch(1, (size_t)(NE * vs) * sizeof(float));
    float *z = px_cpu_scratch(3, (size_t)(NE * zs) * sizeof(float));
    float *s = px_cpu_scratch(4, (size_t)(NE * nci * k) * sizeof(float));
    float *ap = px_cpu_scratch(5, (size_t)((nci + PX_MR - 1) / PX_MR * PX_MR * g->tc) * sizeof(float));
    float *bp = px_cpu_scratch(6, (size_t)(g->tc * nc_most) * sizeof(float));
    if (!v || !z || !s || !ap || !bp) {
        __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset(s, 0, (size_t)(NE * nci * k) * sizeof(float));
    for (int64_t t0 = 0; t0 < all; t0 += g->tc) {
        int64_t tc = min64(g->tc, all - t0);
        chunk_in(g, c0, nci, t0, tc, v, vs, g->tc, 0);
        chunk_grad(g, t0, tc, z, zs);
        for (int e = 0; e < NE; e++) {
            px_avx512_pack(ap, PX_MR, nci, tc, v + e * vs, PHX_F32, g->tc, 0);
            for (int64_t jc = 0; jc < k; jc += nc_most) {
                int64_t nc = min64(nc_most, k - jc);
                px_avx512_pack(bp, PX_NR, nc, tc, z + e * zs + jc * g->tc, PHX_F32, g->tc, 0);
                px_conv_tiles(tc, ap, bp, tc * PX_NR, nci, nc, s + e * nci * k + jc, k, 1.0f);
            }
        }
    }
    /* dW += G^T S G */
    for (int64_t ci = 0; ci < nci; ci++)
        for (int64_t co = 0; co < k; co++) {
            float q[4][4], r[3][4];
            for (int e = 0; e < NE; e++) q[e / 4][e % 4] = s[e * nci * k + ci * k + co];
            for (int j = 0; j < 4; j++) {
                r[0][j] = q[0][j] + 0.5f * (q[1][j] + q[2][j]);
                r[1][j] = 0.5f * (q[1][j] - q[2][j]);
                r[2][j] = 0.5f * (q[1][j] + q[2][j]) + q[3][j];
            }
            float *out = g->dw + (co * c + c0 + ci) * 9;
            for (int i = 0; i < 3; i++) {
                out[3 * i] += r[i][0] + 0.5f * (r[i][1] + r[i][2]);
                out[3 * i + 1] += 0.5f * (r[i][1] - r[i][2]);
                out[3 * i + 2] += 0.5f * (r[i][1] + r[i][2]) + r[i][3];
            }
        }
}

static phx_status weight(const phx_conv2d_desc *d, const float *x, const float *dy, float *dw, float *db)
{
    wino g = plan(d);
    g.x = x, g.dy = dy, g.dw = dw;
    px_cpu_parallel_for((d->c + PX_MR - 1) / PX_MR, 1, wgt_part, &g);
    if (g.failed) return phx_error(PHX_ENOMEM, "conv2d_backward_weight: out of memory for the Winograd tiles");
    if (db) px_conv_bias_grad(d, dy, db);
    return PHX_OK;
}

int px_cpu_conv2d_winograd_takes(int pass, const phx_conv2d_desc *d)
{
    return d->groups == 1 && d->n >= 1 && d->kh == 3 && d->kw == 3 && d->stride_h == 1 && d->stride_w == 1 &&
        d->dil_h == 1 && d->dil_w == 1 && (pass != 1 || (d->pad_h <= 2 && d->pad_w <= 2));
}

phx_status px_cpu_conv2d_winograd(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                  const float *dy, float *y, float *dx, float *dw, float *db)
{
    if (!px_cpu_conv2d_winograd_takes(pass, d)) return PHX_EUNSUPPORTED;
    if (pass == 0) return forward(d, x, w, bias, y);
    if (pass == 2) return weight(d, x, dy, dw, db);
    phx_conv2d_desc t;
    const float *wt = px_conv_flipped(d, w, &t);
    return wt ? forward(&t, dy, wt, NULL, dx) : PHX_ENOMEM;
}
#else
int px_cpu_conv2d_winograd_takes(int pass, const phx_conv2d_desc *d)
{
    (void)pass, (void)d;
    return 0;
}

phx_status px_cpu_conv2d_winograd(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                  const float *dy, float *y, float *dx, float *dw, float *db)
{
    (void)pass, (void)d, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dx, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}
#endif
