/* CPU kernels (internal): the slots of the built-in CPU device's
 * phx_kernels_v1, one file per op family, plus the load/store helpers
 * they share. A loop written once over px_ld/px_st is specialised per
 * dtype by calling it through PX_FLOAT_DISPATCH with a constant dtype
 * (always_inline), so the f32 instance is a plain loop the compiler
 * vectorises and the f16/bf16 instances convert on the fly. */
#ifndef PHX_KERNELS_CPU_H
#define PHX_KERNELS_CPU_H

/* gcc -O2 only vectorises loops that need no runtime alias check ("very
 * cheap" cost model); the kernels' loops take possibly-aliasing pointers
 * (in-place use is allowed), so let it version them; sqrtf may become
 * sqrtps (errno is never read). Set before any include, so that the
 * inline functions of kernels/math.h share the options and still inline. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic", "unswitch-loops", "no-math-errno")
#endif

#include <stdint.h>
#include "kernels/math.h"
#include "phalanx/error.h"
#include "phalanx/tensor.h"
#include "phalanx/plugin/device_v1.h"

#define PX_INLINE static inline __attribute__((always_inline))

/* Hot kernels are also compiled for AVX2 and picked at load time (ifunc),
 * so a baseline x86-64 build still uses 256-bit vectors where the CPU
 * has them. No FMA: results are the same bits on either path. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define PX_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PX_CLONES
#endif

PX_INLINE float px_ld(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case PHX_F16: return phx_f16_to_f32(((const uint16_t *)p)[i]);
    case PHX_BF16: return phx_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

PX_INLINE void px_st(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case PHX_F16: ((uint16_t *)p)[i] = phx_f32_to_f16(v); break;
    case PHX_BF16: ((uint16_t *)p)[i] = phx_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* The instruction sets the activation and cast kernels choose from at run
 * time (kernels/cpu/isa.c): generic C (what the compiler's baseline
 * allows), AVX2 (+FMA, F16C: compiled loops, F16C casts) and AVX-512F
 * (hand-written loops, kernels/cpu/activation-avx512.c, cast-x86.c). */
enum { PX_ISA_GENERIC, PX_ISA_AVX2, PX_ISA_AVX512 };

/* The set to use: PHX_CPU_ISA (generic, avx2, avx512; read once) or the
 * best this CPU has. -1 with phx_error when PHX_CPU_ISA names no set or one
 * this CPU lacks (then every call says so again). */
int px_cpu_isa(void);
/* The best set this CPU (and its OS) supports. */
int px_cpu_isa_best(void);
/* 1 when the CPU has AVX512-BF16 (vcvtneps2bf16). */
int px_cpu_has_avx512bf16(void);
/* 1 when the CPU has AVX-512 with BW and VL (masked 16-bit loads and
 * stores: every AVX-512 CPU since Skylake-SP and Zen 4). */
int px_cpu_avx512bw(void);
/* "generic", "avx2", "avx512"; "?" for anything else. */
const char *px_cpu_isa_name(int isa);
/* Elements per block where f16 and bf16 kernels widen with the cast
 * kernel, run the f32 loop and round back (activation.c, elementwise.c;
 * the row kernels through half.c): a buffer that stays in L1. */
#define PX_F16_BLOCK 1024
/* Rows of cols values per such block for a row kernel (at least one): the
 * half-dtype path, for f16 and bf16 on a CPU with AVX2 (F16C comes with
 * it); 0 otherwise, where the per-element loops run. Both give the same
 * bits: widening is exact and both round to nearest even (half.c). */
int64_t px_cpu_half_chunk(phx_dtype dt, int64_t cols);
/* A row kernel's f32 loop on rows r0 .. r0 + rows - 1 of the whole: in0,
 * in1 (NULL when the kernel has one input) and out are those rows,
 * widened (rows x cols f32 each). */
typedef void (*px_half_rows_fn)(const void *arg, int64_t r0, int64_t rows, const float *in0, const float *in1,
                                float *out);
/* The half-dtype path (px_cpu_half_chunk(dt, cols) != 0): rows x cols of
 * in0 (and in1) in dt widened a chunk at a time into scratch slots 0 (1),
 * fn's output (slot 2) rounded into out. */
phx_status px_cpu_half_rows(int64_t rows, int64_t cols, phx_dtype dt, const void *in0, const void *in1, void *out,
                            px_half_rows_fn fn, const void *arg);

/* rows x cols of src (leading dim lds, dtype st) into dst (leading dim
 * ldd, dtype dt): a row per px_cpu_cast (the conversion instructions where
 * the CPU has them), or one call when both are contiguous, on the calling
 * thread (cast.c). Split over the pool, the GEMM casts of an fp16 MLP step
 * at 2 threads ran 1.5x slower, the pool's spinning workers taking cores
 * from OpenBLAS's threads. */
phx_status px_cpu_cast_rows(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                            int64_t rows, int64_t cols);
/* The same, f16 <-> f32 strided rows converted in one loop where the
 * kernels use AVX-512 (half.c): the same bits without a px_cpu_cast call
 * per row; the GEMMs' widened copies (gemm.c, gemm-dnnl.c). Rows split
 * over the pool in parts of 32 K values or more (the f32 products they
 * feed run there too now, with no BLAS threads waiting beside them). */
phx_status px_cpu_half_cast_rows(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                                 int64_t rows, int64_t cols);
/* The same on the calling thread, for callers already on the pool (our
 * GEMM's half-precision C, the row kernels' blocks): the conversion loop
 * also for contiguous rows under 1 MiB read and written, where
 * px_cpu_cast would neither stream nor look up the tuning cache and its
 * dispatch cost more than converting a 128-value row. */
phx_status px_cpu_half_cast_rows_here(void *dst, phx_dtype dt, int64_t ldd, const void *src, phx_dtype st, int64_t lds,
                                      int64_t rows, int64_t cols);
/* n contiguous values so (px_cpu_cast's arguments without the device):
 * the row kernels' widened and rounded blocks. */
static inline phx_status px_cpu_half_cast_here(void *dst, phx_dtype dt, const void *src, phx_dtype st, int64_t n)
{
    return px_cpu_half_cast_rows_here(dst, dt, n, src, st, n, 1, n);
}

/* Streaming (non-temporal) stores for the output of an elementwise
 * kernel whose output is no larger than its input (relu, narrowing casts),
 * once the bytes it reads and writes reach half the last-level cache (as
 * sysfs describes cpu0's caches; 16 MiB when unknown): such an output
 * cannot stay in the cache for its reader anyway, and ordinary stores
 * would first read every line they write (write-allocate) and evict the
 * input the caller may still need. glibc's memcpy streams large copies
 * for the same reasons. The values written are the same bits either way
 * (isa.c). */
int px_cpu_streams(int64_t bytes);
/* Sets the threshold in bytes (tests: 0 streams every output, INT64_MAX
 * none); negative restores the default. */
void px_cpu_stream_set(int64_t bytes);
/* Makes the kernels use isa from now on, as PHX_CPU_ISA would (tests and
 * benchmarks); PHX_EINVAL when the CPU lacks it. */
phx_status px_cpu_isa_set(int isa);

/* A function compiled for AVX2 (no FMA: the compiled loops give the same
 * bits as the generic ones). */
#if defined(__GNUC__) && defined(__x86_64__)
#define PX_HAVE_X86 1
#define PX_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define PX_HAVE_X86 0
#define PX_TARGET_AVX2
#endif

#if PX_HAVE_X86
/* AVX-512F activations on f32 (act: gelu, gelu_tanh, tanh or sigmoid;
 * activation-avx512.c). FMA and one shared exp make them differ from
 * kernels/math.h by a few ulp, within the bounds t/tensor/act checks. */
void px_avx512_act_forward(int act, int64_t n, const float *x, float *y);
void px_avx512_act_backward(int act, int64_t n, const float *x, const float *y, const float *dy, float *dx);
/* The vector exp (fn 0), tanh (1) and 1 + erf (2) those use, over n
 * floats (t/tensor/isa sweeps them). */
void px_avx512_math(int fn, int64_t n, const float *in, float *out);
/* relu on f32, 16 lanes at a time (the same bits as phx_f_relu: NaN
 * stays NaN, -0 gives +0), with streaming stores when stream is set (activation-avx512.c). */
void px_avx512_relu_forward(int64_t n, const float *x, float *y, int stream);
/* f32 <-> f16/bf16 with the conversion instructions, the same bits as
 * phx_f32_to_f16 and friends (NaN payloads and subnormals fixed up);
 * isa PX_ISA_AVX2 (F16C) or PX_ISA_AVX512; on AVX-512 the output is
 * written with streaming stores when px_cpu_streams() says so. Returns 0
 * when it does not handle the pair (cast-x86.c). */
int px_x86_cast(int isa, void *dst, int dt, const void *src, int st, int64_t n);
/* The same with the streaming stores chosen by the caller (narrowing
 * casts on AVX-512 only: elsewhere stream is ignored). */
int px_x86_cast_as(int isa, void *dst, int dt, const void *src, int st, int64_t n, int stream);
#endif
/* The variant of an f32 <-> f16/bf16 cast of n elements (cast.c): the
 * AVX-512 kernel with ordinary stores, with streaming stores (narrowing
 * only) or the AVX2 kernel. The rule: AVX-512 where the kernels use it,
 * streaming where px_cpu_streams says; under PHX_TUNE=cached/measure,
 * casts of at least 1 MiB (input and output) take the tuning cache's
 * choice for the size class (n rounded up to a power of two). The bits
 * are the same on every variant. */
enum { PX_CAST_AVX512, PX_CAST_AVX512_STREAM, PX_CAST_AVX2 };
phx_status px_cpu_cast_variant(phx_dtype dt, phx_dtype st, int64_t n, int *variant);

/* One case of a switch over phx_activation that runs CALL with ACT the
 * constant K (the activation loops are specialised per kind). */
#define PX_ACT_CASE(K, CALL) \
    case K: { \
        enum { ACT = K }; \
        CALL; \
        break; \
    }

/* Runs CALL (an expression using the constant SYM) for a float dtype dt;
 * otherwise returns PHX_EINVAL naming the kernel. */
#define PX_FLOAT_DISPATCH_AS(name, dt, SYM, CALL) \
    do { \
        switch (dt) { \
        case PHX_F32: { \
            enum { SYM = PHX_F32 }; \
            CALL; \
            break; \
        } \
        case PHX_F16: { \
            enum { SYM = PHX_F16 }; \
            CALL; \
            break; \
        } \
        case PHX_BF16: { \
            enum { SYM = PHX_BF16 }; \
            CALL; \
            break; \
        } \
        default: \
            return phx_error(PHX_EINVAL, "%s: dtype %s, expected f32, f16 or bf16", name, \
                             phx_dtype_name((phx_dtype)(dt))); \
        } \
    } while (0)
#define PX_FLOAT_DISPATCH(name, dt, CALL) PX_FLOAT_DISPATCH_AS(name, dt, DT, CALL)
/* As PX_FLOAT_DISPATCH for a dtype already checked (f16, bf16, else f32),
 * in functions that return nothing (px_cpu_parallel_for's parts). */
#define PX_FLOAT_CALL(dt, CALL) \
    do { \
        if ((dt) == PHX_F16) { \
            enum { DT = PHX_F16 }; \
            CALL; \
        } else if ((dt) == PHX_BF16) { \
            enum { DT = PHX_BF16 }; \
            CALL; \
        } else { \
            enum { DT = PHX_F32 }; \
            CALL; \
        } \
    } while (0)

/* Numbers first .. first + count - 1 of the Philox stream of seed, for
 * count <= PX_PHILOX_CHUNK: whole blocks into buf (4 * (PX_PHILOX_CHUNK/4
 * + 2) words, on the caller's stack), one independent block per iteration
 * so the loop vectorises; returns where number `first` landed. */
#define PX_PHILOX_CHUNK 512
#define PX_PHILOX_BUF (4 * (PX_PHILOX_CHUNK / 4 + 2))

PX_INLINE const uint32_t *px_philox_chunk(uint64_t seed, uint64_t first, int64_t count, uint32_t *buf)
{
    uint64_t b0 = first >> 2;
    int64_t nb = ((int64_t)(first & 3u) + count + 3) / 4;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int64_t k = 0; k < nb; k++) {
        uint64_t b = b0 + (uint64_t)k;
        uint32_t c0 = (uint32_t)b, c1 = (uint32_t)(b >> 32), c2 = 0, c3 = 0, key0 = k0, key1 = k1;
        for (int r = 0; r < 10; r++) { /* phx_philox4x32_10, unrolled on scalars */
            uint64_t p0 = (uint64_t)PHX_PHILOX_M0 * c0, p1 = (uint64_t)PHX_PHILOX_M1 * c2;
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ key0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ key1;
            c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
            key0 += PHX_PHILOX_W0, key1 += PHX_PHILOX_W1;
        }
        buf[4 * k] = c0, buf[4 * k + 1] = c1, buf[4 * k + 2] = c2, buf[4 * k + 3] = c3;
    }
    return buf + (first & 3u);
}

/* Sum of x[o..o+n) - shift in 8 interleaved f32 partial sums
 * (vectorisable, and an error bound 8x smaller than one running sum). */
PX_INLINE float px_sum_shifted(const void *x, int dt, int64_t o, int64_t n, float shift)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += px_ld(x, dt, o + i + j) - shift;
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += px_ld(x, dt, o + i) - shift;
    return s;
}

/* Returns PHX_EINVAL when n < 0. */
#define PX_CHECK_N(name, n) \
    do { \
        if ((n) < 0) return phx_error(PHX_EINVAL, "%s: %lld elements, expected >= 0", name, (long long)(n)); \
    } while (0)

/* Host blocks (kernels/cpu/hugepage.c): the alignment a block of bytes
 * gets (2 MiB for 2 MiB and more, where huge pages are on; else 64); and
 * the block's start in raw memory of at least head + align + bytes, past
 * head bytes, aligned, its whole 2 MiB pages advised for huge pages. */
size_t px_cpu_block_align(size_t bytes);
void *px_cpu_block_start(void *raw, size_t head, size_t bytes);

/* Thread-local scratch of at least bytes (64-byte aligned), grown on
 * demand and kept for the thread's life: slots 0..12 are independent.
 * NULL with phx_last_error on ENOMEM. Slots 5 and 6 hold the packed
 * panels of gemm-avx512.c; 7..9 the f32 copies of an f16/bf16
 * convolution's operands (conv.c), which the f32 kernels it calls never
 * touch; 10..12 the dense copies of a oneDNN matmul block's operands
 * (gemm-dnnl.c). */
void *px_cpu_scratch(int slot, size_t bytes);
/* Sets the calling thread's scratch aside (returned) and starts it afresh,
 * and frees the fresh one and puts the saved one back: a tuning
 * measurement (src/tune) runs kernels inside a kernel whose scratch holds
 * its operands. */
void *px_cpu_scratch_push(void);
void px_cpu_scratch_pop(void *saved);

/* Plain C SGEMM (row-major, BLAS semantics: beta 0 ignores C's old
 * contents), used when the build has no CBLAS; kept always compiled so
 * the tests check it too. */
void px_cpu_sgemm_loop(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* GEMM through oneDNN's matmul (gemm-dnnl.c), the px_cpu_gemm contract
 * on validated arguments with m, n, k > 0. PHX_EUNSUPPORTED, with no
 * error set, when oneDNN has no implementation for these dtypes and
 * strides or the build has no oneDNN: the caller takes the BLAS path. */
phx_status px_cpu_gemm_dnnl(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                            phx_dtype cdt);
/* The packed AVX-512 GEMM (gemm-avx512.c), the px_cpu_gemm contract on
 * validated arguments with m, n, k > 0, for a CPU (and PHX_CPU_ISA) with
 * AVX-512: operands of any float dtype, widened while packed, except bf16
 * on a CPU with AVX512-BF16 (px_cpu_has_avx512bf16), packed as k-pairs
 * for vdpbf16ps (bf16 subnormals read as zero, subnormal results
 * flushed); a C of f16 or bf16 is computed in f32 scratch (slot 2) and
 * rounded once. */
/* The share of the packed GEMM's micro-tiles (8 x 48) that an m x n C
 * fills, 0 .. 1, in the orientation it computes (C, or C^T where C fills
 * under half and C^T more); PHX_CPU_GEMM=auto takes it from 0.5. */
double px_gemm_avx512_fill(int64_t m, int64_t n);
/* The paths of px_cpu_gemm (gemm.c). px_cpu_gemm_rule: PHX_CPU_GEMM=auto's
 * fixed rule (bf16 on oneDNN where the CPU multiplies bf16 in hardware;
 * the packed AVX-512 GEMM where the kernels use AVX-512 and C fills at
 * least half its tiles, or OpenBLAS runs pre-AVX2 kernels; else BLAS).
 * px_cpu_gemm_path: the path a px_cpu_gemm call with these arguments
 * takes: PHX_CPU_GEMM when forced, else the tuning cache's choice for
 * the shape class (PHX_TUNE, src/tune/tune.h; measured on a miss under
 * PHX_TUNE=measure), else the rule. A oneDNN path that declines the
 * product at run time falls to the rule's non-oneDNN path. */
enum { PX_GEMM_BLAS, PX_GEMM_DNNL, PX_GEMM_AVX512 };
int px_cpu_gemm_rule(int64_t m, int64_t n, int64_t k, int alpha_nonzero, phx_dtype adt);
phx_status px_cpu_gemm_path(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int alpha_nonzero, phx_dtype adt,
                            phx_dtype cdt, int *path);
phx_status px_cpu_gemm_avx512(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                              int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                              phx_dtype cdt);
/* An f32 convolution through oneDNN (conv-dnnl.c): pass 0 forward (x, w,
 * bias -> y), 1 backward data (dy, w -> dx), 2 backward weight (x, dy ->
 * dw +=, db += when db). PHX_EUNSUPPORTED, with nothing written and no
 * error set, when oneDNN has no kernel or the build has no oneDNN. */
phx_status px_cpu_conv2d_dnnl(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                              const float *dy, float *y, float *dx, float *dw, float *db);
/* The same in dt: PHX_F32 as above; PHX_BF16 (x, w, dy, y, dx in bf16;
 * bias, dw, db f32) on oneDNN's bf16 kernels (AVX512-BF16, AMX), f32
 * accumulation, each output rounded once; PHX_EUNSUPPORTED for other
 * dtypes. */
phx_status px_cpu_conv2d_dnnl_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const void *w,
                                 const float *bias, const void *dy, void *y, void *dx, float *dw, float *db);
/* An f32 convolution on the packed AVX-512 GEMM (conv-avx512.c), the
 * passes and arguments of px_cpu_conv2d_dnnl, for a CPU (and PHX_CPU_ISA)
 * with AVX-512; PHX_EUNSUPPORTED, with nothing written and no error set,
 * where px_cpu_conv2d_avx512_takes(pass, d) is 0: a stride other than 1,
 * groups other than 1, and for the data pass padding over (k - 1) dil. */
int px_cpu_conv2d_avx512_takes(int pass, const phx_conv2d_desc *d);
phx_status px_cpu_conv2d_avx512(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                const float *dy, float *y, float *dx, float *dw, float *db);
/* The same for 3 x 3, stride-1, undilated, ungrouped f32 convolutions by
 * Winograd's F(2x2, 3x3) on the packed AVX-512 GEMM (conv-winograd.c),
 * on a CPU with AVX512BW and VL (px_cpu_avx512bw). */
int px_cpu_conv2d_winograd_takes(int pass, const phx_conv2d_desc *d);
phx_status px_cpu_conv2d_winograd(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                                  const float *dy, float *y, float *dx, float *dw, float *db);
/* The same with x, dy and y of dtype dt (f32, f16 or bf16), read and
 * written in place: f16/bf16 widened exactly as they are read and y
 * rounded once as it is written, so the bits are those of the f32 pass on
 * widened copies, rounded after. w, bias, dw, db and dx stay f32. */
phx_status px_cpu_conv2d_winograd_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const float *w,
                                     const float *bias, const void *dy, void *y, float *dx, float *dw, float *db);
/* The same, passes 0 and 2, for stride-1 ungrouped f32 convolutions with
 * c kh kw <= 27, computed directly (conv-small.c). */
int px_cpu_conv2d_small_takes(int pass, const phx_conv2d_desc *d);
phx_status px_cpu_conv2d_small(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                               const float *dy, float *y, float *dw, float *db);
/* The paths of a convolution pass (conv.c; pass 0 forward, 1 backward
 * data, 2 backward weight). PX_CONV_FALLBACK: oneDNN, then the implicit
 * GEMM where the kernels use AVX-512, then im2col.
 * px_cpu_conv2d_rule: PHX_CPU_CONV=auto's fixed rule; px_cpu_conv2d_path:
 * the path the pass takes (PHX_CPU_CONV when forced, else for f32 the
 * tuning cache's choice for the shape class, else the rule). f16/bf16
 * run the f32 kernels on f32 copies of their operands, rounded once,
 * except bf16 on CONV_DNNL where oneDNN has bf16 kernels for this CPU
 * (the rule then takes them for every pass but the direct kernel's);
 * px_cpu_conv2d_path_name: "im2col", "dnnl", ... */
enum { PX_CONV_IM2COL, PX_CONV_DNNL, PX_CONV_AVX512, PX_CONV_WINOGRAD, PX_CONV_DIRECT, PX_CONV_FALLBACK };
int px_cpu_conv2d_rule(int pass, const phx_conv2d_desc *d, phx_dtype dt);
phx_status px_cpu_conv2d_path(int pass, const phx_conv2d_desc *d, phx_dtype dt, int *path);
const char *px_cpu_conv2d_path_name(int path);
/* 1 when the build has oneDNN and the CPU has AVX512-BF16 (as oneDNN
 * sees it, ONEDNN_MAX_CPU_ISA included), else 0. */
int px_cpu_dnnl_bf16_native(void);
/* 1 when the build has oneDNN and it runs bf16 products on AMX tiles
 * (as oneDNN sees it, ONEDNN_MAX_CPU_ISA included), else 0: f16 GEMMs
 * then run on oneDNN's bf16 matmul, split into bf16 hi and lo parts
 * (gemm-dnnl.c). */
int px_cpu_dnnl_amx_bf16(void);

/* Runs fn(arg, lo, hi) over [0, n) cut into at most one contiguous part
 * per thread of the calling thread's budget (src/base/threads.h), each of
 * at least grain items, on the calling thread's pool
 * (kernels/cpu/parallel.c); inline when there is one part. The parts must
 * write disjoint memory. */
typedef void (*px_range_fn)(void *arg, int64_t lo, int64_t hi);
void px_cpu_parallel_for(int64_t n, int64_t grain, px_range_fn fn, void *arg);
/* How many parts px_cpu_parallel_for(n, grain, ...) would run (1: inline). */
int64_t px_cpu_parallel_parts(int64_t n, int64_t grain);
/* A part's failure: *first (PHX_OK before the run) keeps the first status
 * other than PHX_OK that any part reports, whichever thread ran it. */
void px_cpu_part_fail(phx_status *first, phx_status st);

/* The kernel slots, px_cpu_<name> for each line of kernels_v1.def (one
 * op family per file: gemm.c, cast.c, elementwise.c, ...). */
#define PHX_KERNEL_SLOT(name, ret, args, since) ret px_cpu_##name args;
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT

/* The table the CPU device points to (kernels/cpu/table.c). */
extern const phx_kernels_v1 px_cpu_kernels;
#endif
