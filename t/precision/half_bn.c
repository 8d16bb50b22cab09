/* BatchNorm's f16 loops on AVX-512 (kernels/cpu/batchnorm.c: f16 read and
 * widened in registers, results rounded on the store) against the block
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
#include "t/core-util.h"

typedef struct out {
    float mean[8], var[8], sd[8], sdx[8], dw[8], db[8];
    uint16_t *y, *dx;
} out;

static phx_status run(int64_t n, int64_t c, int64_t hw, const uint16_t *x, const uint16_t *dy, const float *w,
                      const float *b, out *o)
{
    phx_status st = px_cpu_batchnorm_stats(0, n, c, hw, x, PHX_F16, o->mean, o->var);
    if (st == PHX_OK) st = px_cpu_batchnorm_apply(0, n, c, hw, x, o->mean, o->var, 1e-5f, w, b, o->y, PHX_F16);
    for (int i = 0; i < c; i++) o->dw[i] = o->db[i] = 0.5f;
    if (st == PHX_OK)
        st = px_cpu_batchnorm_backward_reduce(0, n, c, hw, x, dy, PHX_F16, o->mean, o->var, 1e-5f, o->sd, o->sdx, o->dw,
                                              o->db);
    if (st == PHX_OK)
        st = px_cpu_batchnorm_backward_apply(0, n, c, hw, x, dy, PHX_F16, o->mean, o->var, 1e-5f, w, o->sd, o->sdx,
                                             (double)(n * hw), o->dx);
    return st;
}

int main(void)
{
    static const int64_t hws[] = {1, 7, 16, 49, 196, 1024, 1024 + 16 * 3 + 5, 3136};
    const int64_t n = 3, c = 5, nh = (int64_t)(sizeof hws / sizeof hws[0]);
    plan(4);
    if (px_cpu_isa() != PX_ISA_AVX512) diag("the kernels do not use AVX-512 here: both runs take the block path");
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
                return 1;
            }
            for (int64_t i = 0; i < len; i++) {
                x[i] = phx_f32_to_f16(cu_frand(-3.0f, 5.0f));
                dy[i] = phx_f32_to_f16(cu_frand(-1.0f, 1.0f));
            }
            if (special) /* a NaN (with a payload), an inf, a subnormal, in the last channel only */
                x[len - 1] = 0x7d23, dy[len - 2] = 0xfc00, x[(c - 2) * hw] = 0x0003;
            unsetenv("PHX_CPU_F16_BLOCKS");
            st = run(n, c, hw, x, dy, w, b, &a);
            setenv("PHX_CPU_F16_BLOCKS", "1", 1);
            if (st == PHX_OK) st = run(n, c, hw, x, dy, w, b, &r);
            unsetenv("PHX_CPU_F16_BLOCKS");
            bad_stats += memcmp(a.mean, r.mean, (size_t)c * 4) != 0 || memcmp(a.var, r.var, (size_t)c * 4) != 0;
            bad_y += memcmp(a.y, r.y, (size_t)len * 2) != 0;
            bad_back += memcmp(a.sd, r.sd, (size_t)c * 4) != 0 || memcmp(a.sdx, r.sdx, (size_t)c * 4) != 0 ||
                memcmp(a.dw, r.dw, (size_t)c * 4) != 0 || memcmp(a.db, r.db, (size_t)c * 4) != 0 ||
                memcmp(a.dx, r.dx, (size_t)len * 2) != 0;
            for (int64_t ch = 0; ch < c - 1; ch++) { /* float64 reference, the finite channels */
                double s = 0, q = 0, cnt = (double)(n * hw);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t k = 0; k < hw; k++) s += phx_f16_to_f32(x[(i * c + ch) * hw + k]);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t k = 0; k < hw; k++) {
                        double d = phx_f16_to_f32(x[(i * c + ch) * hw + k]) - s / cnt;
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
    ok(st == PHX_OK && bad_stats == 0, "f16 stats: the block path's bits (%d runs differ)", bad_stats);
    ok(st == PHX_OK && bad_y == 0, "f16 apply: the block path's bits (%d runs differ)", bad_y);
    ok(st == PHX_OK && bad_back == 0, "f16 backward reduce and apply: the block path's bits (%d runs differ)",
       bad_back);
    ok(st == PHX_OK && bad_ref == 0, "f16 mean and variance: float64's to f32 error, NaN propagated (%d off)", bad_ref);
    return done_testing();
}
