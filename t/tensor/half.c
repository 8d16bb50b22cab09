/* f16 and bf16 conversions (kernels/math.h and the cast kernel):
 * every bit pattern round-trips; f32 -> f16/bf16 matches a reference
 * written from the definition (double arithmetic: quantum, rint ties to
 * even, encode) on every tie, its neighbours, subnormals, overflow,
 * NaN, and random patterns; cross-checked with the compiler's _Float16. */
#include "config.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "kernels/math.h"
#include "phalanx/phalanx.h"
#include "t/tap.h"

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Round |x| (a double holding an f32) to a format with `mbits` mantissa
 * bits, minimum normal exponent emin, overflow threshold 2^(emax+1), and
 * encode it. */
static uint16_t ref_encode(float f, int mbits, int emin, int emax, int ebias)
{
    uint16_t sign = (u_of(f) >> 31) ? (uint16_t)0x8000 : 0;
    uint16_t inf = (uint16_t)(((1u << (15 - mbits)) - 1u) << mbits);
    if (isinf(f)) return sign | inf;
    double x = fabs((double)f);
    double q;
    int e;
    if (x < ldexp(1.0, emin)) {
        q = ldexp(1.0, emin - mbits);
    } else {
        frexp(x, &e); /* x in [2^(e-1), 2^e) */
        q = ldexp(1.0, e - 1 - mbits);
    }
    double v = rint(x / q) * q; /* x / q is exact; rint: nearest, ties to even */
    if (v >= ldexp(1.0, emax + 1)) return sign | inf;
    if (v < ldexp(1.0, emin)) return sign | (uint16_t)(v / ldexp(1.0, emin - mbits));
    frexp(v, &e);
    int E = e - 1;
    uint32_t mant = (uint32_t)((v / ldexp(1.0, E) - 1.0) * (double)(1u << mbits));
    return sign | (uint16_t)((uint32_t)(E + ebias) << mbits) | (uint16_t)mant;
}

static uint16_t ref_f16(float f)
{
    return ref_encode(f, 10, -14, 15, 15);
}
static uint16_t ref_bf16(float f)
{
    return ref_encode(f, 7, -126, 127, 127);
}

/* Reference decoders from the definition. */
static double ref_f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double ref_bf16_value(uint16_t b)
{
    int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

static int is_nan16(uint16_t h, int mbits)
{
    uint16_t ex = (uint16_t)(((1u << (15 - mbits)) - 1u) << mbits);
    return (h & ex) == ex && (h & ((1u << mbits) - 1u));
}

/* Compares conv(f) with ref(f) over a set; NaN inputs need a NaN of the
 * same sign. Returns mismatches, reporting the first. */
static long check_set(const char *what, const float *fs, long n, uint16_t (*conv)(float), uint16_t (*ref)(float),
                      int mbits)
{
    long bad = 0;
    for (long i = 0; i < n; i++) {
        uint16_t got = conv(fs[i]);
        int ok_;
        if (isnan(fs[i]))
            ok_ = is_nan16(got, mbits) && ((got >> 15) == (u_of(fs[i]) >> 31));
        else
            ok_ = got == ref(fs[i]);
        if (!ok_ && bad++ == 0)
            diag("%s: f32 0x%08x (%.9g): expected 0x%04x, got 0x%04x", what, u_of(fs[i]), (double)fs[i],
                 isnan(fs[i]) ? 0x7fff : ref(fs[i]), got);
    }
    return bad;
}

static uint16_t conv_f16(float f)
{
    return phx_f32_to_f16(f);
}
static uint16_t conv_bf16(float f)
{
    return phx_f32_to_bf16(f);
}

/* Every tie between consecutive finite values of a 16-bit format (and
 * the f32 just below and above it), both signs; plus the tie at the top
 * (halfway to the first value past the largest finite, which overflows). */
static long make_ties(float *out, float (*dec)(uint16_t), uint16_t inf)
{
    long n = 0;
    for (uint32_t h = 0; h < inf; h++) {
        double lo = (double)dec((uint16_t)h);
        double hi = h + 1 < inf ? (double)dec((uint16_t)(h + 1)) : 2.0 * lo - (double)dec((uint16_t)(h - 1));
        float mid = (float)((lo + hi) / 2); /* exact: one more bit than the format */
        float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        float cand[3] = {mid, below, above};
        for (int j = 0; j < 3; j++) {
            out[n++] = cand[j];
            out[n++] = -cand[j];
        }
    }
    return n;
}

static float specials[] = {
    0.0f,
    1.0f,
    65504.0f,
    65519.0f,
    65519.996f,
    65520.0f,
    65535.0f,
    65536.0f,
    1e5f,
    FLT_MAX,
    5.9604645e-8f /* 2^-24 */,
    2.9802322e-8f /* 2^-25: tie to 0 */,
    2.9802326e-8f /* just above */,
    8.940697e-8f /* 1.5 * 2^-24: tie to 2 */,
    6.097555e-5f /* max f16 subnormal */,
    6.1035156e-5f /* 2^-14 */,
    1.4e-45f /* smallest f32 subnormal */,
    1.1754942e-38f /* largest f32 subnormal */,
    1.17549435e-38f,
    3.3895314e38f /* max bf16 */,
    3.3961776e38f /* bf16 overflow tie */,
    0.1f,
    1.0f / 3.0f,
    3.14159265f,
};

static uint32_t xs = 2463534242u;
static uint32_t xorshift(void)
{
    xs ^= xs << 13;
    xs ^= xs >> 17;
    xs ^= xs << 5;
    return xs;
}

int main(void)
{
    plan(23);

    /* 1-4: every 16-bit pattern: f16/bf16 -> f32 -> same pattern; value as defined */
    long rt16 = 0, val16 = 0, rtb = 0, valb = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = phx_f16_to_f32((uint16_t)h);
        if (phx_f32_to_f16(f) != h && rt16++ == 0)
            diag("f16 0x%04x -> %.9g -> 0x%04x", h, (double)f, phx_f32_to_f16(f));
        double r = ref_f16_value((uint16_t)h);
        int same =
            isnan(r) ? isnan(f) && (signbit(f) != 0) == (h >> 15) : (double)f == r && (signbit(f) != 0) == (h >> 15);
        if (!same && val16++ == 0) diag("f16 0x%04x decodes to %.9g, expected %.9g", h, (double)f, r);
        float g = phx_bf16_to_f32((uint16_t)h);
        if (phx_f32_to_bf16(g) != h && rtb++ == 0)
            diag("bf16 0x%04x -> %.9g -> 0x%04x", h, (double)g, phx_f32_to_bf16(g));
        r = ref_bf16_value((uint16_t)h);
        same = isnan(r) ? isnan(g) && (signbit(g) != 0) == (h >> 15) : (double)g == r && (signbit(g) != 0) == (h >> 15);
        if (!same && valb++ == 0) diag("bf16 0x%04x decodes to %.9g, expected %.9g", h, (double)g, r);
    }
    is_int(rt16, 0, "all 65536 f16 patterns survive f16 -> f32 -> f16 (NaN payloads included)");
    is_int(val16, 0, "all 65536 f16 patterns decode to the value the format defines");
    is_int(rtb, 0, "all 65536 bf16 patterns survive bf16 -> f32 -> bf16 (NaN payloads included)");
    is_int(valb, 0, "all 65536 bf16 patterns decode to the value the format defines");

    /* 5-8: ties and their neighbours */
    static float ties16[31744 * 6], tiesb[32640 * 6];
    long n16 = make_ties(ties16, phx_f16_to_f32, 0x7c00);
    long nb = make_ties(tiesb, phx_bf16_to_f32, 0x7f80);
    is_int(check_set("f16 ties", ties16, n16, conv_f16, ref_f16, 10), 0,
           "f32 -> f16 on all %ld ties (round half to even) and their f32 neighbours", n16);
    is_int(check_set("bf16 ties", tiesb, nb, conv_bf16, ref_bf16, 7), 0,
           "f32 -> bf16 on all %ld ties and their f32 neighbours", nb);
    is_int(phx_f32_to_f16(65520.0f), 0x7c00, "65520 (tie above the largest f16) overflows to inf");
    is_int(phx_f32_to_f16(65519.996f), 0x7bff, "just below 65520 rounds to 65504");

    /* 9-10: specials and subnormals */
    long ns = (long)(sizeof specials / sizeof specials[0]);
    is_int(check_set("f16 specials", specials, ns, conv_f16, ref_f16, 10), 0,
           "f32 -> f16 on specials (overflow, subnormals, 2^-25 tie)");
    is_int(check_set("bf16 specials", specials, ns, conv_bf16, ref_bf16, 7), 0,
           "f32 -> bf16 on specials (overflow, subnormals)");

    /* 11-12: every f32 in the f16 subnormal range [0, 2^-14) with stride 7 */
    long bad = 0, cnt = 0;
    for (uint32_t u = 0; u < 0x38800000u; u += 7, cnt++) {
        float f = f_of(u);
        if (phx_f32_to_f16(f) != ref_f16(f) && bad++ == 0)
            diag("f32 0x%08x -> 0x%04x, expected 0x%04x", u, phx_f32_to_f16(f), ref_f16(f));
    }
    is_int(bad, 0, "f32 -> f16 on %ld values below 2^-14 (subnormal results)", cnt);
    bad = 0;
    for (uint32_t u = 0; u < 0x00800000u; u += 3) {
        float f = f_of(u | 0x80000000u);
        if (phx_f32_to_bf16(f) != ref_bf16(f) && bad++ == 0)
            diag("f32 0x%08x -> 0x%04x, expected 0x%04x", u, phx_f32_to_bf16(f), ref_bf16(f));
    }
    is_int(bad, 0, "f32 -> bf16 on negative f32 subnormals (bf16 subnormals)");

    /* 13-14: 4M random f32 bit patterns (NaN and inf included) */
    static float rnd[1 << 22];
    for (long i = 0; i < (1 << 22); i++) rnd[i] = f_of(xorshift());
    is_int(check_set("f16 random", rnd, 1 << 22, conv_f16, ref_f16, 10), 0, "f32 -> f16 on 4M random bit patterns");
    is_int(check_set("bf16 random", rnd, 1 << 22, conv_bf16, ref_bf16, 7), 0, "f32 -> bf16 on 4M random bit patterns");

    /* 15-16: NaN stays NaN, sign kept, even with a payload only in the low bits */
    uint16_t hn = phx_f32_to_f16(f_of(0x7f800001u)), bn = phx_f32_to_bf16(f_of(0xff800001u));
    ok(is_nan16(hn, 10) && !(hn >> 15), "f32 NaN 0x7f800001 -> f16 NaN (got 0x%04x)", hn);
    ok(is_nan16(bn, 7) && (bn >> 15), "f32 NaN 0xff800001 -> bf16 negative NaN (got 0x%04x)", bn);

    /* 17: independent cross-check against the compiler's _Float16 */
#ifdef __FLT16_MAX__
    bad = 0;
    for (long i = 0; i < (1 << 22); i++) {
        if (isnan(rnd[i])) continue;
        _Float16 h = (_Float16)rnd[i];
        uint16_t hb;
        memcpy(&hb, &h, 2);
        if (hb != phx_f32_to_f16(rnd[i]) && bad++ == 0)
            diag("0x%08x: _Float16 0x%04x, ours 0x%04x", u_of(rnd[i]), hb, phx_f32_to_f16(rnd[i]));
    }
    for (long i = 0; i < n16; i++) {
        _Float16 h = (_Float16)ties16[i];
        uint16_t hb;
        memcpy(&hb, &h, 2);
        if (hb != phx_f32_to_f16(ties16[i]) && bad++ == 0)
            diag("tie 0x%08x: _Float16 0x%04x, ours 0x%04x", u_of(ties16[i]), hb, phx_f32_to_f16(ties16[i]));
    }
    is_int(bad, 0, "f32 -> f16 agrees with the compiler's _Float16 on random values and all ties");
#else
    skip(1, "no _Float16 in this compiler");
#endif

    /* 18-22: the cast kernel (phx_tensor_cast) gives the same bits */
    int64_t shape[1] = {65536};
    static uint16_t pat[65536], back[65536];
    for (uint32_t h = 0; h < 65536; h++) pat[h] = (uint16_t)h;
    phx_tensor *t16 = phx_tensor_from_data(PHX_F16, 1, shape, pat);
    phx_tensor *tb = phx_tensor_from_data(PHX_BF16, 1, shape, pat);
    phx_tensor *t32 = phx_tensor_new(PHX_F32, 1, shape, phx_cpu());
    phx_tensor *o16 = phx_tensor_new(PHX_F16, 1, shape, phx_cpu());
    phx_status st = phx_tensor_cast(t32, t16);
    st |= phx_tensor_cast(o16, t32);
    phx_tensor_to_host(o16, back);
    ok(st == PHX_OK && memcmp(back, pat, sizeof pat) == 0, "cast kernel: f16 -> f32 -> f16 keeps all 65536 patterns");
    st = phx_tensor_cast(t32, tb);
    st |= phx_tensor_cast(o16, t32);
    phx_tensor *ob = phx_tensor_new(PHX_BF16, 1, shape, phx_cpu());
    st |= phx_tensor_cast(ob, t32);
    phx_tensor_to_host(ob, back);
    ok(st == PHX_OK && memcmp(back, pat, sizeof pat) == 0, "cast kernel: bf16 -> f32 -> bf16 keeps all 65536 patterns");
    /* bf16 -> f16 directly equals rounding the exact f32 value */
    st = phx_tensor_cast(o16, tb);
    phx_tensor_to_host(o16, back);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = phx_bf16_to_f32((uint16_t)h);
        int good = isnan(f) ? is_nan16(back[h], 10) : back[h] == ref_f16(f);
        if (!good && bad++ == 0) diag("bf16 0x%04x -> f16 0x%04x, expected 0x%04x", h, back[h], ref_f16(f));
    }
    ok(st == PHX_OK && bad == 0, "cast kernel: bf16 -> f16 rounds each value once, as the reference");
    int64_t tshape[1] = {n16};
    phx_tensor *tt = phx_tensor_from_data(PHX_F32, 1, tshape, ties16);
    phx_tensor *th = phx_tensor_new(PHX_F16, 1, tshape, phx_cpu());
    static uint16_t hres[31744 * 6];
    st = phx_tensor_cast(th, tt);
    phx_tensor_to_host(th, hres);
    bad = 0;
    for (long i = 0; i < n16; i++)
        if (hres[i] != ref_f16(ties16[i]) && bad++ == 0) diag("tie %ld: 0x%04x", i, hres[i]);
    ok(st == PHX_OK && bad == 0, "cast kernel: f32 -> f16 on all ties matches the reference");
    /* i32 -> f16/bf16 and back */
    int32_t ints[5] = {0, -3, 2049, 70000, -65504};
    int64_t s5[1] = {5};
    phx_tensor *ti = phx_tensor_from_data(PHX_I32, 1, s5, ints);
    phx_tensor *th5 = phx_tensor_new(PHX_F16, 1, s5, phx_cpu());
    phx_tensor *ti2 = phx_tensor_new(PHX_I32, 1, s5, phx_cpu());
    int32_t ib[5];
    st = phx_tensor_cast(th5, ti) | phx_tensor_cast(ti2, th5);
    phx_tensor_to_host(ti2, ib);
    ok(st == PHX_OK && ib[0] == 0 && ib[1] == -3 && ib[2] == 2048 && ib[3] == INT32_MAX && ib[4] == -65504,
       "cast i32 -> f16 -> i32: 2049 rounds to 2048, 70000 -> inf saturates (got %d %d %d %d %d)", ib[0], ib[1], ib[2],
       ib[3], ib[4]);
    /* 23: f32 -> f16 over every 251st bit pattern (17 million values of
     * every class, in blocks of 8 and a tail), against phx_f32_to_f16 bit
     * for bit; NaN for NaN. On a CPU with F16C the kernel uses it. */
    int64_t nsw = (int64_t)(4294967296ull / 251) + 1, sweep[1] = {nsw};
    phx_tensor *sf = phx_tensor_new(PHX_F32, 1, sweep, phx_cpu()), *sh = phx_tensor_new(PHX_F16, 1, sweep, phx_cpu());
    float *sv = sf ? phx_tensor_data(sf) : NULL;
    for (int64_t i = 0; sv && i < nsw; i++) sv[i] = f_of((uint32_t)((uint64_t)i * 251u));
    st = sf && sh ? phx_tensor_cast(sh, sf) : PHX_ENOMEM;
    const uint16_t *hv = sh ? phx_tensor_data(sh) : NULL;
    bad = 0;
    for (int64_t i = 0; hv && i < nsw; i++) {
        uint16_t want = phx_f32_to_f16(sv[i]);
        int good = isnan(sv[i]) ? is_nan16(hv[i], 10) : hv[i] == want;
        if (!good && bad++ == 0) diag("f32 0x%08x -> 0x%04x, expected 0x%04x", u_of(sv[i]), hv[i], want);
    }
#if defined(__x86_64__) && defined(__GNUC__)
    const char *path = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") ? "F16C" : "portable";
#else
    const char *path = "portable";
#endif
    ok(st == PHX_OK && hv && bad == 0, "cast kernel (%s path): f32 -> f16 on %lld bit patterns = phx_f32_to_f16", path,
       (long long)nsw);
    phx_tensor_free(sf);
    phx_tensor_free(sh);
    phx_tensor *all[] = {t16, tb, t32, o16, ob, tt, th, ti, th5, ti2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) phx_tensor_free(all[i]);
    return done_testing();
}
