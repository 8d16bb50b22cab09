/* The strided f16 <-> f32 row conversion of the GEMMs' widened copies
 * (px_cpu_half_cast_rows, kernels/cpu/half.c): one vector loop over all
 * rows with 16-lane tails through a buffer. It must give the bits of the
 * element-by-element conversions phx_f16_to_f32 (exact) and
 * phx_f32_to_f16 (round to nearest even) -- NaN payloads, infinities,
 * signed zeros, f16 subnormals, overflow to inf and ties included -- and
 * of px_cpu_cast_rows, the per-row path it replaces; it must write only
 * the cols of each row (the padding between rows keeps its sentinel).
 * Row lengths 1-40 cover empty, partial and full 16-lane blocks. The
 * calling-thread form (px_cpu_half_cast_rows_here) also converts
 * contiguous runs in its loop below 1 MiB read and written, and through
 * px_cpu_cast above: lengths on both sides of that line give the same
 * bits. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "t/core-util.h"

/* an f32 value of every kind the narrowing meets */
static float narrow_case(void)
{
    uint32_t u;
    float f;
    switch ((int)(cu_urand() * 8)) {
    case 0: /* NaN with a random payload and sign */
        u = 0x7f800001u | (uint32_t)(cu_urand() * 0x7fffff) | (cu_urand() < 0.5 ? 0x80000000u : 0);
        memcpy(&f, &u, 4);
        return f;
    case 1: /* an exact tie between two f16 values (f16 value + half its ulp, normal or subnormal) */
    {
        uint16_t h = (uint16_t)(cu_urand() * 0x7bff);
        float lo = phx_f16_to_f32(h), hi = phx_f16_to_f32((uint16_t)(h + 1));
        return (cu_urand() < 0.5 ? -1.0f : 1.0f) * (lo + (hi - lo) / 2);
    }
    case 2: return cu_frand(-1.0f, 1.0f) * 70000.0f; /* past f16's largest, 65504 */
    case 3: return cu_frand(-1.0f, 1.0f) * 1e-6f; /* f16 subnormals */
    case 4: return cu_urand() < 0.5 ? 0.0f : -0.0f;
    case 5: return cu_urand() < 0.5 ? 1.0f / 0.0f : -1.0f / 0.0f;
    default: /* any finite f32 bits of moderate exponent */
        u = (uint32_t)(cu_urand() * 4294967295.0);
        u = (u & 0x807fffffu) | ((uint32_t)(100 + cu_urand() * 56) << 23);
        memcpy(&f, &u, 4);
        return f;
    }
}

int main(void)
{
    const int64_t rows = 7, pad = 5, maxc = 40;
    plan(6);
    if (px_cpu_isa() != PX_ISA_AVX512) diag("the kernels do not use AVX-512 here: this checks px_cpu_cast_rows");
    int64_t ld = maxc + pad;
    uint16_t *h = malloc((size_t)(rows * ld) * 2), *h2 = malloc((size_t)(rows * ld) * 2),
             *h3 = malloc((size_t)(rows * ld) * 2);
    float *f = malloc((size_t)(rows * ld) * 4), *f2 = malloc((size_t)(rows * ld) * 4),
          *f3 = malloc((size_t)(rows * ld) * 4);
    if (!h || !h2 || !h3 || !f || !f2 || !f3) {
        diag("out of memory");
        return 1;
    }
    int bad_w = 0, bad_wold = 0, bad_n = 0, bad_nold = 0;
    phx_status st = PHX_OK;
    for (int64_t cols = 1; cols <= maxc && st == PHX_OK; cols++) {
        int64_t lds = cols + (cols % 3), ldd = cols + (cols % 2) + pad; /* strided both sides */
        /* widening: every 16-bit pattern kind at random, NaNs and infs included */
        for (int64_t i = 0; i < rows * ld; i++) h[i] = (uint16_t)(cu_urand() * 65536);
        for (int64_t i = 0; i < rows * ld; i++) f2[i] = f[i] = -12345.0f; /* sentinel */
        st = px_cpu_half_cast_rows(f, PHX_F32, ldd, h, PHX_F16, lds, rows, cols);
        if (st == PHX_OK) st = px_cpu_cast_rows(f2, PHX_F32, ldd, h, PHX_F16, lds, rows, cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < ldd && r * ldd + c < rows * ld; c++) {
                float want = c < cols ? phx_f16_to_f32(h[r * lds + c]) : -12345.0f;
                bad_w += memcmp(&f[r * ldd + c], &want, 4) != 0;
                bad_wold += memcmp(&f[r * ldd + c], &f2[r * ldd + c], 4) != 0;
            }
        /* narrowing */
        for (int64_t i = 0; i < rows * ld; i++) f3[i] = narrow_case();
        for (int64_t i = 0; i < rows * ld; i++) h2[i] = h3[i] = 0xabcd; /* sentinel */
        if (st == PHX_OK) st = px_cpu_half_cast_rows(h2, PHX_F16, ldd, f3, PHX_F32, lds, rows, cols);
        if (st == PHX_OK) st = px_cpu_cast_rows(h3, PHX_F16, ldd, f3, PHX_F32, lds, rows, cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < ldd && r * ldd + c < rows * ld; c++) {
                uint16_t want = c < cols ? phx_f32_to_f16(f3[r * lds + c]) : 0xabcd;
                bad_n += h2[r * ldd + c] != want;
                bad_nold += h2[r * ldd + c] != h3[r * ldd + c];
            }
    }
    if (st != PHX_OK) diag("px_cpu_half_cast_rows: %s", phx_last_error());
    ok(st == PHX_OK && bad_w == 0,
       "f16 -> f32 strided rows of 1-40 values: phx_f16_to_f32's bits, padding untouched (%d differ)", bad_w);
    ok(st == PHX_OK && bad_wold == 0, "f16 -> f32: px_cpu_cast_rows's bits (%d differ)", bad_wold);
    ok(st == PHX_OK && bad_n == 0,
       "f32 -> f16 strided rows (NaN, inf, ties, overflow, subnormals): phx_f32_to_f16's bits, padding untouched (%d "
       "differ)",
       bad_n);
    ok(st == PHX_OK && bad_nold == 0, "f32 -> f16: px_cpu_cast_rows's bits (%d differ)", bad_nold);
    free(h), free(h2), free(h3), free(f), free(f2), free(f3);

    /* contiguous runs: the loop (under 1 MiB read and written) and px_cpu_cast */
    const int64_t lens[] = {1, 15, 16, 17, 1000, 1024, 174761, 174763, 300001};
    const int64_t maxn = 300001 + 1;
    h = malloc((size_t)maxn * 2), h2 = malloc((size_t)maxn * 2);
    f = malloc((size_t)maxn * 4), f3 = malloc((size_t)maxn * 4);
    if (!h || !h2 || !f || !f3) {
        diag("out of memory");
        return 1;
    }
    int bad_cw = 0, bad_cn = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0] && st == PHX_OK; li++) {
        int64_t n = lens[li];
        for (int64_t i = 0; i < maxn; i++) h[i] = (uint16_t)(cu_urand() * 65536), f3[i] = narrow_case();
        f[n] = -12345.0f, h2[n] = 0xabcd; /* past the end: untouched */
        st = px_cpu_half_cast_rows_here(f, PHX_F32, n, h, PHX_F16, n, 1, n);
        if (st == PHX_OK) st = px_cpu_half_cast_rows_here(h2, PHX_F16, n, f3, PHX_F32, n, 1, n);
        for (int64_t i = 0; i < n; i++) {
            float want = phx_f16_to_f32(h[i]);
            bad_cw += memcmp(&f[i], &want, 4) != 0;
            bad_cn += h2[i] != phx_f32_to_f16(f3[i]);
        }
        bad_cw += f[n] != -12345.0f;
        bad_cn += h2[n] != 0xabcd;
    }
    if (st != PHX_OK) diag("px_cpu_half_cast_rows_here: %s", phx_last_error());
    ok(st == PHX_OK && bad_cw == 0,
       "f16 -> f32 contiguous runs of 1 to 300001 values on the calling thread: "
       "phx_f16_to_f32's bits (%d differ)",
       bad_cw);
    ok(st == PHX_OK && bad_cn == 0,
       "f32 -> f16 contiguous runs of 1 to 300001 values on the calling thread: "
       "phx_f32_to_f16's bits (%d differ)",
       bad_cn);
    free(h), free(h2), free(f), free(f3);
    return done_testing();
}
