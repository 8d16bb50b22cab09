/* GEMM on the CPU. Where the kernels use AVX-512: our packed GEMM
 * (gemm-avx512.c) for every dtype, widening f16 (and bf16 on a CPU
 * without AVX512-BF16) while it packs, bf16 pairs multiplied by vdpbf16ps
 * where the CPU has AVX512-BF16; but bf16 on oneDNN's matmul
 * (gemm-dnnl.c) where the build has it and the CPU multiplies bf16 in
 * hardware: it ran 1.0-1.1x our vdpbf16ps kernel (doc/reference/tensors.md).
 * f16 on oneDNN's bf16 matmul too where it runs on AMX, each operand split
 * into exact bf16 hi and lo parts (gemm-dnnl.c, doc/guide/precision.md).
 * Where OpenBLAS runs its AVX-512 kernels, f32, and on a CPU with
 * AVX512-BF16 the f16 products the split does not take (widened), go to
 * OpenBLAS instead of our GEMM
 * (px_cpu_gemm_rule). Elsewhere f32 goes straight to
 * cblas_sgemm (no copies), and f16/bf16
 * operands are widened to f32 in thread-local scratch for it, the result
 * rounded into C's dtype. PHX_CPU_GEMM forces one path; PHX_TUNE replaces
 * auto's fixed rule by the tuning cache's choice (src/tune, doc/reference/env.md). */
#include "config.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CBLAS
#include <cblas.h>
#endif
#include "kernels/cpu/cpu.h"
#include "kernels/gemm-check.h"
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/tune/tune.h"

#ifdef HAVE_CBLAS
typedef struct sgemm_job {
    int ta, tb, by_rows;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} sgemm_job;

static void blas_call(const sgemm_job *j, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
    const float *a = j->a + (j->ta ? i0 : i0 * j->lda), *b = j->b + (j->tb ? j0 * j->ldb : j0);
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)j->k, j->alpha, a, (int)j->lda, b, (int)j->ldb, j->beta, j->c + i0 * j->ldc + j0, (int)j->ldc);
}

/* blocks lo .. hi - 1 of 16 rows (or columns) of C */
static void sgemm_part(void *arg, int64_t lo, int64_t hi)
{
    const sgemm_job *j = arg;
    int64_t span = j->by_rows ? j->m : j->n, from = lo * 16, to = hi * 16 < span ? hi * 16 : span;
    if (j->by_rows)
        blas_call(j, from, to - from, 0, j->n);
    else
        blas_call(j, 0, j->m, from, to - from);
}

/* Products of at least this many multiply-adds per part are cut into
 * blocks of C on the pool */
#define SGEMM_PART_FMAS (1 << 20)
#endif

/* f32 GEMM on the BLAS. With a budget of 2+ threads and a BLAS whose
 * thread count we set (OpenBLAS, BLIS) the BLAS runs on one
 * thread per call and C is cut into blocks of rows (of columns when C is
 * wider than tall: each block then packs all of the smaller of A and B)
 * run on the caller's pool, as oneDNN is (gemm-dnnl.c): OpenBLAS's own
 * threads spin for a while after each call, and on a machine with as
 * many threads as cores they took the cores from the pool's next kernels
 * (OPENBLAS_THREAD_TIMEOUT=4 ran bench/amp's fp32 MLP at 2 threads 1.2x as
 * fast). */
static phx_status sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
#ifdef HAVE_CBLAS
    /* alpha 0 (C <- beta C, A and B not read, as BLAS defines it) stays on
     * the loop: OpenBLAS's SkylakeX kernels multiply by it anyway, and
     * 0 * inf in A gives NaN */
    if (k > 0 && alpha != 0.0f) {
        if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
            return phx_error(PHX_EUNSUPPORTED, "gemm: m=%lld n=%lld k=%lld exceed the BLAS int range", (long long)m,
                             (long long)n, (long long)k);
        sgemm_job j = {ta, tb, m >= n, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
        if (PX_BLAS_THREADS_SET && px_threads_budget() > 1) {
            /* in 16s along C's longer side; each part gets the whole shorter one */
            int64_t span = j.by_rows ? m : n, across = j.by_rows ? n : m;
            px_threads_blas_serial();
            px_cpu_parallel_for((span + 15) / 16, SGEMM_PART_FMAS / (16 * across * k) + 1, sgemm_part, &j);
        } else {
            px_threads_blas_sync();
            blas_call(&j, 0, m, 0, n);
        }
        return PHX_OK;
    }
#endif
    px_cpu_sgemm_loop(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return PHX_OK;
}

typedef enum { GEMM_AUTO, GEMM_BLAS, GEMM_DNNL, GEMM_AVX512 } gemm_path;

/* PHX_CPU_GEMM: auto (or unset, empty), blas, dnnl or avx512. Read on each call
 * (a getenv beside a GEMM costs nothing) so a test can force each path. */
static phx_status gemm_path_env(gemm_path *path)
{
    const char *v = getenv("PHX_CPU_GEMM");
    if (!v || !*v || strcmp(v, "auto") == 0)
        *path = GEMM_AUTO;
    else if (strcmp(v, "blas") == 0)
        *path = GEMM_BLAS;
    else if (strcmp(v, "dnnl") == 0)
        *path = GEMM_DNNL;
    else if (strcmp(v, "avx512") == 0)
        *path = GEMM_AVX512;
    else
        return phx_error(PHX_EINVAL, "gemm: PHX_CPU_GEMM=%s, expected auto, blas, dnnl or avx512", v);
    if (*path == GEMM_AVX512 && px_cpu_isa() != PX_ISA_AVX512)
        return phx_error(PHX_EUNSUPPORTED,
                         "gemm: PHX_CPU_GEMM=avx512, but the kernels use %s (PHX_CPU_ISA, or the CPU)",
                         px_cpu_isa_name(px_cpu_isa()));
#ifndef HAVE_DNNL
    if (*path == GEMM_DNNL)
        return phx_error(PHX_EUNSUPPORTED,
                         "gemm: PHX_CPU_GEMM=dnnl, but this build has no oneDNN (configure "
                         "--with-dnnl; apt-get install libdnnl-dev)");
#endif
    return PHX_OK;
}

static int is_float(phx_dtype dt)
{
    return dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16;
}

/* PHX_CPU_GEMM=auto's fixed rule (PHX_TUNE=off, and shapes a tuning cache
 * lacks). The packed AVX-512 GEMM wherever the kernels use AVX-512, for
 * every dtype (bf16 reaches it only where oneDNN's matmul did not take
 * it, and runs there on vdpbf16ps where the CPU has AVX512-BF16). f32
 * too: on 1024^3 it ran 1.9x OpenBLAS's sgemm held to AVX2 by
 * OPENBLAS_CORETYPE=Haswell, and 0.9-1.0x its AVX-512 kernels
 * (doc/reference/tensors.md). */
static int avx512_auto(int64_t m, int64_t n)
{
    if (px_cpu_isa() != PX_ISA_AVX512) return 0;
#ifdef HAVE_CBLAS
    /* the share of its 8 x 48 tiles that C, or C^T where it computes that,
     * fills: below half (a GEMV-like product, C of 1-3 rows or columns),
     * OpenBLAS was faster, 0.38-0.74x on 4096x1x1024 and 1x4096x1024 --
     * unless OpenBLAS misdetected the CPU and runs kernels without AVX2
     * (src/tune/cpu.c), 3-7x slower than its own */
    if (px_gemm_avx512_fill(m, n) < 0.5 && px_tune_blas_misdetected() < 2) return 0;
#else
    (void)m, (void)n;
#endif
    return 1;
}

int px_cpu_gemm_rule(int64_t m, int64_t n, int64_t k, int alpha_nonzero, phx_dtype adt)
{
    px_tune_blas_misdetected(); /* the first GEMM says what OpenBLAS runs (PHX_LOG=info) */
    /* bf16 on oneDNN where the CPU has AVX512-BF16 (it ran 1.0-1.1x our
     * vdpbf16ps kernel on 1024^3 and in bench/amp, at 1 and 2 threads: at
     * 97% of the instruction's peak here); f16 and f32 stay off it
     * (oneDNN has no f16 matmul without AVX512-FP16, and its f32 is not
     * clearly faster than OpenBLAS's sgemm here: doc/reference/tensors.md) */
    if (adt == PHX_BF16 && k > 0 && px_cpu_dnnl_bf16_native()) return PX_GEMM_DNNL;
    /* f16 on oneDNN's bf16 matmul, split into bf16 hi and lo parts
     * (gemm-dnnl.c), where it runs on AMX: 3 bf16 products per f16 one
     * beat f32 FMA there on the MLP's and the GPT's forward products
     * (1.2-1.6x), not where C has under 64 rows or columns (10x1024x256:
     * 2x slower than our widening GEMM), k is under 64 (attention scores,
     * 128x128x32: 1.1x slower than BLAS on widened copies) or k is over
     * twice C's larger side with C under 128 wide (65x128x2048: 1.1-1.3x
     * slower; from 128 up the split was the fastest f16 path for those
     * weight gradients, 384x128x2048: 1.5-1.6 ms against 1.7-1.9 ms;
     * one thread, CPU time, doc/guide/precision.md) */
    int64_t small = m < n ? m : n, large = m > n ? m : n;
    if (adt == PHX_F16 && k >= 64 && small >= 64 && (k <= 2 * large || small >= 128) && px_cpu_dnnl_amx_bf16())
        return PX_GEMM_DNNL;
    /* f32 on OpenBLAS where it runs its AVX-512 kernels (core SkylakeX,
     * Cooperlake or SapphireRapids, detected or set by OPENBLAS_CORETYPE):
     * on a Xeon of family 6 model 207 its sgemm ran 1.0-1.3x our packed
     * GEMM on the MLP's, the GPT's and 1024^3's products (one thread, CPU
     * time, best of 20; 1.18x on the GPT's 2048x128x512), on an AMD Zen 4
     * (family 25 model 17, core Cooperlake) 0.95-1.17x at one thread (6 of
     * 10 shapes ahead) and 0.98-1.17x at two (6 of 7); where OpenBLAS runs AVX2
     * kernels (a Zen 4 it calls Zen) our GEMM led (doc/reference/tensors.md) */
    /* f16 products the split does not take, there too, on widened copies:
     * 1.05-1.9x our GEMM widening while it packs on the Xeon (attention's
     * 128x32x128: 0.60 against 1.14 ms for 64 of them; 65x128x2048:
     * 0.32-0.38 against 0.37-0.55 ms), 0.93-1.09x on the Zen 4 (7 of 10
     * shapes ahead at two threads, 5 of 10 at one). Not on a CPU with
     * AVX-512 but no AVX512-BF16 (Ice Lake, Skylake-SP): on a Xeon of
     * family 6 model 106 our GEMM widening while it packs ran the fp16
     * GPT step 1.08-1.10x (bench/step --only gpt --precision fp16
     * --threads 1, three alternating rounds) and bench/amp's fp16 MLP
     * 1.06-1.08x (2 threads, two rounds) */
    if ((adt == PHX_F32 || (adt == PHX_F16 && px_cpu_has_avx512bf16())) && k > 0 && alpha_nonzero &&
        px_tune_blas_avx512())
        return PX_GEMM_BLAS;
    /* (alpha 0 takes BLAS, which scales C by beta without computing A B,
     * as BLAS defines it) */
    if (k > 0 && alpha_nonzero && avx512_auto(m, n)) return PX_GEMM_AVX512;
    return PX_GEMM_BLAS;
}

/* f32 C <- alpha op(A) op(B) + beta C on the BLAS, f16/bf16 operands
 * widened in scratch and a f16/bf16 C computed in f32 scratch and
 * rounded once. */
static phx_status blas_path(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                            phx_dtype cdt)
{
    int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    const float *af = a, *bf = b;
    phx_status st;
    if (adt != PHX_F32 && k > 0) {
        float *sa = px_cpu_scratch(0, (size_t)(a_rows * a_cols) * sizeof(float));
        float *sb = px_cpu_scratch(1, (size_t)(b_rows * b_cols) * sizeof(float));
        if (!sa || !sb) return PHX_ENOMEM;
        if ((st = px_cpu_half_cast_rows(sa, PHX_F32, a_cols, a, adt, lda, a_rows, a_cols)) != PHX_OK ||
            (st = px_cpu_half_cast_rows(sb, PHX_F32, b_cols, b, adt, ldb, b_rows, b_cols)) != PHX_OK)
            return st;
        af = sa, lda = a_cols;
        bf = sb, ldb = b_cols;
    }
    if (cdt == PHX_F32) return sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);

    /* a f16/bf16 C: computed in f32 scratch, rounded once */
    float *sc = px_cpu_scratch(2, (size_t)(m * n) * sizeof(float));
    if (!sc) return PHX_ENOMEM;
    if (beta != 0.0f && (st = px_cpu_half_cast_rows(sc, PHX_F32, n, c, cdt, ldc, m, n)) != PHX_OK) return st;
    if ((st = sgemm(trans_a, trans_b, m, n, k, alpha, af, lda, bf, ldb, beta, sc, n)) != PHX_OK) return st;
    return px_cpu_half_cast_rows(c, cdt, ldc, sc, PHX_F32, n, m, n);
}

static const char *const gemm_names[] = {[PX_GEMM_BLAS] = "blas", [PX_GEMM_DNNL] = "dnnl", [PX_GEMM_AVX512] = "avx512"};

/* A tuning measurement's operands: zeros of the call's shape and dtypes. */
typedef struct gemm_trial {
    int ta, tb;
    int64_t m, n, k;
    phx_dtype adt, cdt;
    void *a, *b, *c;
} gemm_trial;

static phx_status gemm_trial_run(void *arg, int path)
{
    gemm_trial *t = arg;
    if (!t->a) { /* at the first run: a lookup that hits allocates nothing */
        size_t ea = (size_t)phx_dtype_size(t->adt), ec = (size_t)phx_dtype_size(t->cdt);
        t->a = px_calloc((size_t)(t->m * t->k), ea);
        t->b = px_calloc((size_t)(t->k * t->n), ea);
        t->c = px_calloc((size_t)(t->m * t->n), ec);
        if (!t->a || !t->b || !t->c) {
            px_free(t->a), px_free(t->b), px_free(t->c);
            t->a = t->b = t->c = NULL;
            return PHX_EUNSUPPORTED; /* nothing measured: the fixed rule */
        }
    }
    int64_t lda = t->ta ? t->m : t->k, ldb = t->tb ? t->k : t->n;
    if (path == PX_GEMM_DNNL)
        return px_cpu_gemm_dnnl(t->ta, t->tb, t->m, t->n, t->k, 1.0f, t->a, lda, t->b, ldb, t->adt, 0.0f, t->c, t->n,
                                t->cdt);
    if (path == PX_GEMM_AVX512)
        return px_cpu_gemm_avx512(t->ta, t->tb, t->m, t->n, t->k, 1.0f, t->a, lda, t->b, ldb, t->adt, 0.0f, t->c, t->n,
                                  t->cdt);
    return blas_path(t->ta, t->tb, t->m, t->n, t->k, 1.0f, t->a, lda, t->b, ldb, t->adt, 0.0f, t->c, t->n, t->cdt);
}

phx_status px_cpu_gemm_path(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int alpha_nonzero, phx_dtype adt,
                            phx_dtype cdt, int *path)
{
    gemm_path forced;
    phx_status st = gemm_path_env(&forced);
    if (st != PHX_OK) return st;
    if (forced != GEMM_AUTO) {
        /* (PHX_CPU_GEMM=dnnl takes oneDNN for bf16 operands, and f16
         * ones split into bf16 parts, only) */
        *path = forced == GEMM_AVX512                                    ? PX_GEMM_AVX512
            : forced == GEMM_DNNL && (adt == PHX_BF16 || adt == PHX_F16) ? PX_GEMM_DNNL
                                                                         : PX_GEMM_BLAS;
        return PHX_OK;
    }
    int fixed = px_cpu_gemm_rule(m, n, k, alpha_nonzero, adt);
    *path = fixed;
    px_tune_mode mode;
    if ((st = px_tune_mode_get(&mode)) != PHX_OK) return st;
    if (mode == PX_TUNE_OFF || k == 0 || !alpha_nonzero || m == 0 || n == 0 || px_tune_measuring()) return PHX_OK;
    int usable[3] = {[PX_GEMM_BLAS] = 1, [PX_GEMM_DNNL] = 0, [PX_GEMM_AVX512] = px_cpu_isa() == PX_ISA_AVX512};
#ifndef HAVE_CBLAS
    usable[PX_GEMM_BLAS] = fixed == PX_GEMM_BLAS; /* the loop GEMM: a fallback, never a contender */
#endif
#ifdef HAVE_DNNL
    usable[PX_GEMM_DNNL] = 1;
#endif
    char key[160];
    size_t kl = 0;
    px_tune_key_str(key, &kl, sizeof key, "gemm ");
    px_tune_key_str(key, &kl, sizeof key, phx_dtype_name(adt));
    px_tune_key_str(key, &kl, sizeof key, ">");
    px_tune_key_str(key, &kl, sizeof key, phx_dtype_name(cdt));
    px_tune_key_str(key, &kl, sizeof key, trans_a ? " t" : " n");
    px_tune_key_str(key, &kl, sizeof key, trans_b ? "t m" : "n m");
    px_tune_key_int(key, &kl, sizeof key, px_tune_pow2(m));
    px_tune_key_str(key, &kl, sizeof key, " n");
    px_tune_key_int(key, &kl, sizeof key, px_tune_pow2(n));
    px_tune_key_str(key, &kl, sizeof key, " k");
    px_tune_key_int(key, &kl, sizeof key, px_tune_pow2(k));
    gemm_trial t = {trans_a, trans_b, m, n, k, adt, cdt, NULL, NULL, NULL};
    st = px_tune_choose(key, gemm_names, usable, 3, fixed, gemm_trial_run, &t, path);
    px_free(t.a), px_free(t.b), px_free(t.c);
    return st;
}

PX_CLONES phx_status px_cpu_gemm(int dev, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                 const void *a, int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta,
                                 void *c, int64_t ldc, phx_dtype cdt)
{
    (void)dev;
    if (m < 0 || n < 0 || k < 0)
        return phx_error(PHX_EINVAL, "gemm: m=%lld n=%lld k=%lld, expected sizes >= 0", (long long)m, (long long)n,
                         (long long)k);
    if (!is_float(adt) || !is_float(cdt))
        return phx_error(PHX_EINVAL, "gemm: operands %s, result %s, expected f32, f16 or bf16", phx_dtype_name(adt),
                         phx_dtype_name(cdt));
    phx_status st = px_gemm_check_ld("gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc);
    if (st != PHX_OK) return st;
    int path;
    st = px_cpu_gemm_path(trans_a, trans_b, m, n, k, alpha != 0.0f, adt, cdt, &path);
    if (st != PHX_OK) return st;
    if (m == 0 || n == 0) return PHX_OK;

    /* bf16 (or any dtype, when tuning chose it) on oneDNN; forced, on
     * oneDNN's own fallback ISA where the CPU lacks AVX512-BF16. Where
     * oneDNN declines, the path PHX_CPU_GEMM=auto's rule gives for a
     * non-oneDNN product (BLAS when forced). */
    if (path == PX_GEMM_DNNL && k > 0) {
        st = px_cpu_gemm_dnnl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);
        if (st != PHX_EUNSUPPORTED) return st;
        gemm_path forced;
        gemm_path_env(&forced);
        path = forced == GEMM_AUTO && alpha != 0.0f && avx512_auto(m, n) ? PX_GEMM_AVX512 : PX_GEMM_BLAS;
    }
    if (k > 0 && alpha != 0.0f && path == PX_GEMM_AVX512)
        return px_cpu_gemm_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);
    return blas_path(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, adt, beta, c, ldc, cdt);
}
