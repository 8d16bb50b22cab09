/* Casts between any two dtypes, and fill. Float <-> float goes through
 * f32 (f32 -> f16/bf16 rounds to nearest even, NaN kept, overflow to
 * inf). Float -> integer truncates toward zero and saturates; NaN gives 0
 * (PyTorch leaves these undefined). Integer -> float rounds to nearest.
 * f32 <-> f16/bf16 use the conversion instructions where px_cpu_isa()
 * allows (cast-x86.c), with the same bits. */
#include "config.h"
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "src/base/util.h"
#include "src/tune/tune.h"

static int64_t f2i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

static int32_t f2i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

PX_INLINE void px_cast_ff(void *dst, int dt, const void *src, int st, int64_t n)
{
    for (int64_t i = 0; i < n; i++) px_st(dst, dt, i, px_ld(src, st, i));
}

PX_INLINE double px_ld_any(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case PHX_I32: return (double)((const int32_t *)p)[i];
    case PHX_I64: return (double)((const int64_t *)p)[i];
    default: return (double)px_ld(p, dt, i);
    }
}

static int valid(phx_dtype dt)
{
    return dt >= PHX_F32 && dt <= PHX_I64;
}

/* float <-> float, compiled for the generic and the AVX2 paths */
PX_INLINE phx_status cast_ff_any(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    PX_FLOAT_DISPATCH_AS("cast", dt, D, PX_FLOAT_DISPATCH_AS("cast", st, S, px_cast_ff(dst, D, src, S, n)));
    return PHX_OK;
}

static phx_status cast_ff_generic(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    return cast_ff_any(dst, dt, src, st, n);
}

#if PX_HAVE_X86
PX_TARGET_AVX2 static phx_status cast_ff_avx2(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    return cast_ff_any(dst, dt, src, st, n);
}
#endif

#if PX_HAVE_X86
static const char *const cast_names[] = {
    [PX_CAST_AVX512] = "avx512", [PX_CAST_AVX512_STREAM] = "avx512-stream", [PX_CAST_AVX2] = "avx2"};

/* A tuning measurement's operands: zeros of the cast's size. */
typedef struct cast_trial {
    phx_dtype dt, st;
    int64_t n;
    void *dst, *src;
} cast_trial;

static int cast_run_as(int variant, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    return px_x86_cast_as(variant == PX_CAST_AVX2 ? PX_ISA_AVX2 : PX_ISA_AVX512, dst, dt, src, st, n,
                          variant == PX_CAST_AVX512_STREAM);
}

static phx_status cast_trial_run(void *arg, int variant)
{
    cast_trial *t = arg;
    if (!t->src) { /* at the first run: a lookup that hits allocates nothing */
        t->src = px_calloc((size_t)t->n, phx_dtype_size(t->st));
        t->dst = px_calloc((size_t)t->n, phx_dtype_size(t->dt));
        if (!t->src || !t->dst) {
            px_free(t->src), px_free(t->dst);
            t->src = t->dst = NULL;
            return PHX_EUNSUPPORTED;
        }
    }
    return cast_run_as(variant, t->dst, t->dt, t->src, t->st, t->n) ? PHX_OK : PHX_EUNSUPPORTED;
}
#endif

phx_status px_cpu_cast_variant(phx_dtype dt, phx_dtype st, int64_t n, int *variant)
{
    int isa = px_cpu_isa();
    *variant = PX_CAST_AVX2;
    if (isa < PX_ISA_AVX512) return isa < 0 ? PHX_EINVAL : PHX_OK;
    *variant = st == PHX_F32 && px_cpu_streams(6 * n) ? PX_CAST_AVX512_STREAM : PX_CAST_AVX512;
#if PX_HAVE_X86
    int64_t bytes = n * (int64_t)(phx_dtype_size(dt) + phx_dtype_size(st));
    if (bytes < ((int64_t)1 << 20) || px_tune_measuring()) return PHX_OK; /* below: not worth a lookup */
    px_tune_mode mode;
    phx_status ms = px_tune_mode_get(&mode);
    if (ms != PHX_OK || mode == PX_TUNE_OFF) return ms;
    char key[64];
    size_t kl = 0;
    px_tune_key_str(key, &kl, sizeof key, "cast ");
    px_tune_key_str(key, &kl, sizeof key, phx_dtype_name(st));
    px_tune_key_str(key, &kl, sizeof key, ">");
    px_tune_key_str(key, &kl, sizeof key, phx_dtype_name(dt));
    px_tune_key_str(key, &kl, sizeof key, " n");
    px_tune_key_int(key, &kl, sizeof key, px_tune_pow2(n));
    int usable[3] = {[PX_CAST_AVX512] = 1, [PX_CAST_AVX512_STREAM] = st == PHX_F32, [PX_CAST_AVX2] = 1};
    cast_trial t = {dt, st, n, NULL, NULL};
    phx_status s = px_tune_choose(key, cast_names, usable, 3, *variant, cast_trial_run, &t, variant);
    px_free(t.src), px_free(t.dst);
    return s;
#else
    return PHX_OK;
#endif
}

static phx_status cast_ff(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    int isa = px_cpu_isa();
    if (isa < 0) return PHX_EINVAL;
#if PX_HAVE_X86
    if (isa >= PX_ISA_AVX2) { /* f32 <-> f16/bf16 by the conversion instructions (cast-x86.c) */
        int variant = PX_CAST_AVX2;
        phx_status vs = isa >= PX_ISA_AVX512 ? px_cpu_cast_variant(dt, st, n, &variant) : PHX_OK;
        if (vs != PHX_OK) return vs;
        if (cast_run_as(variant, dst, dt, src, st, n)) return PHX_OK;
        return cast_ff_avx2(dst, dt, src, st, n);
    }
#endif
    return cast_ff_generic(dst, dt, src, st, n);
}

/* the integer casts, compiled as AVX2 clones */
static phx_status cast_int(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n);

phx_status px_cpu_cast(int dev, void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    (void)dev;
    PX_CHECK_N("cast", n);
    if (!valid(dt) || !valid(st))
        return phx_error(PHX_EINVAL, "cast: dtypes %d -> %d, expected f32, f16, bf16, i32 or i64", (int)st, (int)dt);
    if (dt == st) {
        if (dst != src) memmove(dst, src, (size_t)n * phx_dtype_size(dt));
        return PHX_OK;
    }
    if (phx_dtype_is_float(dt) && phx_dtype_is_float(st)) return cast_ff(dst, dt, src, st, n);
    return cast_int(dst, dt, src, st, n);
}

PX_CLONES static phx_status cast_int(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    if (dt == PHX_I64 && st == PHX_I32) {
        for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
        return PHX_OK;
    }
    if (dt == PHX_I32 && st == PHX_I64) { /* wraps modulo 2^32, as PyTorch */
        for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)(uint32_t)((const int64_t *)src)[i];
        return PHX_OK;
    }
    /* one side integer, the other float */
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case PHX_I32: ((int32_t *)dst)[i] = f2i32(px_ld_any(src, st, i)); break;
        case PHX_I64: ((int64_t *)dst)[i] = f2i64(px_ld_any(src, st, i)); break;
        default:
            /* i64 -> f32 rounds once (int -> float), then to f16/bf16 */
            px_st(dst, dt, i, st == PHX_I64 ? (float)((const int64_t *)src)[i] : (float)((const int32_t *)src)[i]);
            break;
        }
    }
    return PHX_OK;
}

PX_INLINE void px_fill_u16(uint16_t *d, int64_t n, uint16_t v)
{
    for (int64_t i = 0; i < n; i++) d[i] = v;
}

phx_status px_cpu_fill(int dev, void *dst, phx_dtype dt, int64_t n, double value)
{
    (void)dev;
    PX_CHECK_N("fill", n);
    switch (dt) {
    case PHX_F32: {
        float v = (float)value, *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    case PHX_F16: px_fill_u16(dst, n, phx_f32_to_f16((float)value)); return PHX_OK;
    case PHX_BF16: px_fill_u16(dst, n, phx_f32_to_bf16((float)value)); return PHX_OK;
    case PHX_I32: {
        int32_t v = f2i32(value), *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    case PHX_I64: {
        int64_t v = f2i64(value), *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return PHX_OK;
    }
    }
    return phx_error(PHX_EINVAL, "fill: dtype %d, expected f32, f16, bf16, i32 or i64", (int)dt);
}

phx_status px_cpu_cast_rows(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                            int64_t rows, int64_t cols)
{
    size_t ed = phx_dtype_size(dt), es = phx_dtype_size(st);
    if (ldd == cols && lds == cols) return px_cpu_cast(0, dst, dt, src, st, rows * cols); /* contiguous: one call */
    phx_status s = PHX_OK;
    for (int64_t r = 0; r < rows && s == PHX_OK; r++)
        s = px_cpu_cast(0, (char *)dst + (size_t)(r * ldd) * ed, dt, (const char *)src + (size_t)(r * lds) * es, st,
                        cols);
    return s;
}
