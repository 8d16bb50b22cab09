/* BatchNorm's f16 and bf16 loops on AVX-512 (kernels/cpu/batchnorm.c: read
 * and widened in registers, results rounded on the store) against the block
 * path they replaced (widen a block with the cast kernel, f32 loop, round
 * it back; forced with PHX_CPU_F16_BLOCKS=1): the same bits for the four
 * steps (stats, apply, backward_reduce, backward_apply), plane sizes
 * with and without a 16-lane tail, one and several blocks per plane, NaN
 * and inf inputs included. Mean and variance are also checked against a
 * float64 reference (to f32's error), so a path that drops or
 * double-counts values fails even where both paths would agree. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/half-x86.h"
#include "t/core-util.h"

typedef struct out {
    float mean[8], var[8], sd[8], sdx[8], dw[8], db[8];
    uint16_t *y, *dx;
} out;

static phx_status run(phx_dtype dt, int64_t n, int64_t c, int64_t hw, const uint16_t *x, const uint16_t *dy,
                      const float *w, const float *b, out *o)
{
    phx_status st = px_cpu_batchnorm_stats(0, n, c, hw, x, dt, o->mean, o->var);
    if (st == PHX_OK) st = px_cpu_batchnorm_apply(0, n, c, hw, x, o->mean, o->var, 1e-5f, w, b, o->y, dt);
    for (int i = 0; i < c; i++) o->dw[i] = o->db[i] = 0.5f;
    if (st == PHX_OK)
        st = px_cpu_batchnorm_backward_reduce(0, n, c, hw, x, dy, dt, o->mean, o->var, 1e-5f, o->sd, o->sdx, o->dw,
                                              o->db);
    if (st == PHX_OK)
        st = px_cpu_batchnorm_backward_apply(0, n, c, hw, x, dy, dt, o->mean, o->var, 1e-5f, w, o->sd, o->sdx,
                                             (double)(n * hw), o->dx);
    return st;
}

static uint16_t to_half(phx_dtype dt, float f)
{
    return dt == PHX_BF16 ? phx_f32_to_bf16(f) : phx_f32_to_f16(f);
}
static float from_half(phx_dtype dt, uint16_t h)
{
    return dt == PHX_BF16 ? phx_bf16_to_f32(h) : phx_f16_to_f32(h);
}

/* the four checks for one format */
static void check(phx_dtype dt)
{
    static const int64_t hws[] = {1, 7, 16, 49, 196, 1024, 1024 + 16 * 3 + 5, 3136};
    const int64_t n = 3, c = 5, nh = (int64_t)(sizeof hws / sizeof hws[0]);
    const char *name = phx_dtype_name(dt);
    int bad_stats = 0, bad_y = 0, bad_back = 0, bad_ref = 0;
    phx_status st = PHX_OK;
    float w[8], b[8];
    for (int i = 0; i < c; i++) w[i] = cu_frand(0.5f, 2.0f), b[i] = cu_frand(-1.0f, 1.0f);
    for (int64_t hi = 0; hi < nh && st == PHX_OK; hi++)
        for (int special = 0; special < 2 && st == PHX_OK; special++) {
            int64_t hw = hws[hi], len = n * c * hw;
            uint16_t *x = malloc((size_t)len * 2), *dy = malloc((size_t)len * 2);
            out a = {.y = malloc((size_t)len * 2), .dx = malloc((size_t)len * 2)};
            out r = {.y = malloc((size_t)len * 2), .dx = malloc((size_t)len * 2)};
            if (!x || !dy || !a.y || !a.dx || !r.y || !r.dx) {
                diag("out of memory");
                exit(1);
            }
            for (int64_t i = 0; i < len; i++) {
                x[i] = to_half(dt, cu_frand(-3.0f, 5.0f));
                dy[i] = to_half(dt, cu_frand(-1.0f, 1.0f));
            }
            if (special) { /* a NaN (with a payload), an inf, a subnormal, in the last channel only */
                x[len - 1] = dt == PHX_BF16 ? 0x7f83 : 0x7d23, dy[len - 2] = dt == PHX_BF16 ? 0xff80 : 0xfc00;
                x[(c - 2) * hw] = 0x0003;
            }
            unsetenv("PHX_CPU_F16_BLOCKS");
            st = run(dt, n, c, hw, x, dy, w, b, &a);
            setenv("PHX_CPU_F16_BLOCKS", "1", 1);
            if (st == PHX_OK) st = run(dt, n, c, hw, x, dy, w, b, &r);
            unsetenv("PHX_CPU_F16_BLOCKS");
            bad_stats += memcmp(a.mean, r.mean, (size_t)c * 4) != 0 || memcmp(a.var, r.var, (size_t)c * 4) != 0;
            bad_y += memcmp(a.y, r.y, (size_t)len * 2) != 0;
            bad_back += memcmp(a.sd, r.sd, (size_t)c * 4) != 0 || memcmp(a.sdx, r.sdx, (size_t)c * 4) != 0 ||
                memcmp(a.dw, r.dw, (size_t)c * 4) != 0 || memcmp(a.db, r.db, (size_t)c * 4) != 0 ||
                memcmp(a.dx, r.dx, (size_t)len * 2) != 0;
            for (int64_t ch = 0; ch < c - 1; ch++) { /* float64 reference, the finite channels */
                double s = 0, q = 0, cnt = (double)(n * hw);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t k = 0; k < hw; k++) s += from_half(dt, x[(i * c + ch) * hw + k]);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t k = 0; k < hw; k++) {
                        double d = from_half(dt, x[(i * c + ch) * hw + k]) - s / cnt;
                        q += d * d;
                    }
                if (fabs(a.mean[ch] - s / cnt) > 1e-5 * (1 + fabs(s / cnt)) ||
                    fabs(a.var[ch] - q / cnt) > 1e-5 * (1 + q / cnt))
                    bad_ref++,
                        diag("hw %lld ch %lld: mean %g var %g, float64 %g %g", (long long)hw, (long long)ch,
                             (double)a.mean[ch], (double)a.var[ch], s / cnt, q / cnt);
            }
            if (special && !isnan(a.mean[c - 1]))
                bad_ref++, diag("hw %lld: the NaN channel's mean %g", (long long)hw, (double)a.mean[c - 1]);
            free(x), free(dy), free(a.y), free(a.dx), free(r.y), free(r.dx);
        }
    if (st != PHX_OK) diag("batchnorm: %s", phx_last_error());
    ok(st == PHX_OK && bad_stats == 0, "%s stats: the block path's bits (%d runs differ)", name, bad_stats);
    ok(st == PHX_OK && bad_y == 0, "%s apply: the block path's bits (%d runs differ)", name, bad_y);
    ok(st == PHX_OK && bad_back == 0, "%s backward reduce and apply: the block path's bits (%d runs differ)", name,
       bad_back);
    ok(st == PHX_OK && bad_ref == 0, "%s mean and variance: float64's to f32 error, NaN propagated (%d off)", name,
       bad_ref);
}

#if PX_HAVE_X86
/* px_b16_st and px_b16_ld (half-x86.h) against math.h on bit patterns the
 * loops above cannot reach: every tie, NaNs with payloads only in the low
 * 16 bits (quieted to 0x7fc0-like), subnormals, infs, random bits; short
 * vectors too. Returns the lanes that differ. */
PX_T512 static int b16_lanes(void)
{
    static const uint32_t pick[] = {0x7f800001u, 0xff800001u, 0x7f808000u, 0x7fffffffu, 0x7f800000u, 0xff800000u,
                                    0x00000001u, 0x80008000u, 0x00018000u, 0x00028000u, 0x3f808000u, 0x3f818000u,
                                    0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x00000000u, 0x80000000u, 0x7fc00000u};
    int bad = 0;
    for (int round = 0; round < 4096; round++) {
        uint32_t b[16];
        for (int l = 0; l < 16; l++)
            b[l] = round < 2 ? pick[(round * 16 + l) % (sizeof pick / sizeof pick[0])]
                             : (uint32_t)rand() << 17 ^ (uint32_t)rand() << 2 ^ (uint32_t)(rand() & 3);
        if (round % 3 == 0) b[round % 16] = (b[round % 16] & 0xffff0000u) | 0x8000u; /* a tie */
        float f[16];
        memcpy(f, b, sizeof f);
        int64_t k = 1 + round % 16;
        uint16_t h[16] = {0};
        px_b16_st(h, _mm512_loadu_ps(f), k);
        float w[16];
        _mm512_storeu_ps(w, px_b16_ld(h, k));
        for (int l = 0; l < k; l++) {
            float back = phx_bf16_to_f32(h[l]);
            bad += h[l] != phx_f32_to_bf16(f[l]) || memcmp(&w[l], &back, 4) != 0;
        }
    }
    return bad;
}
#endif

int main(void)
{
    plan(9);
    if (px_cpu_isa() != PX_ISA_AVX512) diag("the kernels do not use AVX-512 here: both runs take the block path");
    check(PHX_F16);
    check(PHX_BF16);
#if PX_HAVE_X86
    if (cu_cpu_has("avx512f")) {
        int bad = b16_lanes();
        ok(bad == 0, "bf16 in registers: math.h's rounding and widening on 4096 vectors (%d lanes differ)", bad);
    } else
        skip(1, "no AVX-512F: the bf16 register loads and stores do not run");
#else
    skip(1, "not x86: no bf16 register loads and stores");
#endif
    return done_testing();
}
