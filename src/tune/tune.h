/* Per-machine path choice (internal, px_): the CPU's signature, the BLAS
 * core OpenBLAS runs on it, and the tuning cache that records which
 * kernel path measured fastest for a shape class (doc/reference/env.md PHX_TUNE,
 * doc/maint/bench.md "Fair peers"). The kernels' choice points (kernels/cpu/
 * gemm.c, conv.c) ask px_tune_choose; forced paths (PHX_CPU_GEMM,
 * PHX_CPU_CONV) never reach it. */
#ifndef PHX_TUNE_H
#define PHX_TUNE_H

#include "phalanx/error.h"

/* ---- the CPU and its BLAS (src/tune/cpu.c) ---- */

/* What cpuid says, read once: vendor ("GenuineIntel"), family and model
 * (extended fields folded in, as lscpu prints them), the brand string,
 * and the SIMD extensions the CPU has and the OS enables, comma-separated
 * ("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,..."). */
typedef struct px_cpu_id {
    char vendor[16];
    int family, model;
    char name[64];
    char flags[192];
} px_cpu_id;
const px_cpu_id *px_tune_cpu(void);

/* The BLAS Phalanx links and the core it runs: OpenBLAS's
 * openblas_get_corename ("SkylakeX", "Prescott"), "BLIS", "CBLAS" for
 * another CBLAS, "none" without one. */
const char *px_tune_blas_name(void);
const char *px_tune_blas_core(void);

/* The OpenBLAS core this CPU's flags call for: "SkylakeX" with AVX-512
 * (F, BW, VL, DQ), "Zen" on an AMD CPU with AVX2, "Haswell" on another
 * with AVX2 and FMA; NULL below AVX2. */
const char *px_tune_blas_core_for_cpu(void);

/* The widest vectors an OpenBLAS x86-64 core's kernels use: 2 for AVX-512
 * (SkylakeX, Cooperlake, SapphireRapids), 1 for AVX2 (Haswell, Zen,
 * Excavator), 0 for the older ones and "unknown". */
int px_tune_blas_core_level(const char *core);

/* 0: the BLAS's kernels use what the CPU has (or the BLAS is not
 * OpenBLAS); 1: OpenBLAS runs AVX2 kernels on an AVX-512 CPU (slower
 * only for large GEMMs; Phalanx's own paths take those);
 * 2: OpenBLAS runs kernels without AVX2 (Prescott, "unknown", ...) on a
 * CPU with AVX2: 3-7x slower, and PHX_CPU_GEMM=auto then avoids it
 * where the kernels have another path. The first call logs the
 * finding at info, with the remedy OPENBLAS_CORETYPE=
 * <px_tune_blas_core_for_cpu()> (the first GEMM makes that call). */
int px_tune_blas_misdetected(void);

/* 1 when OpenBLAS runs its AVX-512 kernels (px_tune_blas_core_level 2),
 * where its sgemm measured faster than the packed AVX-512 GEMM on an
 * Intel Xeon and an AMD Zen 4 (kernels/cpu/gemm.c), else 0. */
int px_tune_blas_avx512(void);

/* The CPU signature a tuning cache is keyed by: vendor, family, model,
 * flags, the kernels' instruction set (PHX_CPU_ISA) and the BLAS core,
 * one line without tabs ("GenuineIntel 6 207 avx2,... isa=avx512
 * blas=OpenBLAS:SkylakeX"). */
const char *px_tune_signature(void);

/* ---- the tuning cache (src/tune/cache.c) ---- */

typedef enum px_tune_mode { PX_TUNE_OFF = 0, PX_TUNE_CACHED = 1, PX_TUNE_MEASURE = 2 } px_tune_mode;

/* PHX_TUNE: off (or unset, empty: the default), cached, measure. Read on
 * each call, so a test can switch it. PHX_EINVAL naming the value when
 * it is none of these. */
phx_status px_tune_mode_get(px_tune_mode *mode);

/* The cache file: PHX_TUNE_CACHE, else $XDG_CACHE_HOME/phalanx/tune-<h>.txt,
 * else $HOME/.cache/phalanx/tune-<h>.txt (h: 16 hex digits of a hash of
 * px_tune_signature(), so machines sharing a home keep one file each);
 * writes it into buf (NUL-terminated) and returns 0, or -1 when there is
 * no HOME or it does not fit. */
int px_tune_cache_path(char *buf, size_t len);

/* Runs candidate i once (on scratch operands the caller owns): PHX_OK,
 * PHX_EUNSUPPORTED when the candidate has no kernel for the shape (it is
 * then left out), another status on failure. */
typedef phx_status (*px_tune_run_fn)(void *arg, int candidate);

/* The path for one shape class. key names the op and the class (printable
 * ASCII, no tabs or newlines; the calling thread's budget is prepended);
 * names[0..n) the candidates, usable[i] 0 for those this build or CPU
 * lacks; fixed is the fixed rule's choice. Sets *choice to:
 *   PHX_TUNE=off: fixed;
 *   cached: the cache's entry for the key when it names a usable
 *   candidate, else fixed;
 *   measure: the same, and on a miss every usable candidate is timed by
 *   run (best of a few runs after one warm-up) and the fastest recorded
 *   and written to the cache (atomically: temporary file and rename).
 *   With more than one rank in the world, measure reads like cached:
 *   ranks must choose alike, so a cache is made by one process and read
 *   by all (doc/reference/env.md). Calls made while a measurement runs (a
 *   convolution's im2col GEMM), and calls from kernel pool workers, never
 *   measure.
 * A cache file that cannot be read as one (garbage, truncated, bad
 * checksum) is PHX_EIO naming the file and the line, every time it is
 * asked, until it is fixed or removed; a cache of another CPU signature
 * is ignored (logged at warn, once). With run NULL nothing is measured. */
phx_status px_tune_choose(const char *key, const char *const *names, const int *usable, int n, int fixed,
                          px_tune_run_fn run, void *arg, int *choice);

/* Key building without printf (a choice is made on every GEMM call):
 * appends s, or the decimal v, at buf[*len] (capacity cap), keeping buf
 * NUL-terminated; what does not fit is dropped. */
static inline void px_tune_key_str(char *buf, size_t *len, size_t cap, const char *s)
{
    while (*s && *len + 1 < cap) buf[(*len)++] = *s++;
    buf[*len] = 0;
}
/* The next power of two at or above x (at most 2^40): a size class's
 * bound. */
static inline long long px_tune_pow2(long long x)
{
    long long p = 1;
    while (p < x && p < (1ll << 40)) p <<= 1;
    return p;
}
static inline void px_tune_key_int(char *buf, size_t *len, size_t cap, long long v)
{
    char d[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do d[n++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) d[n++] = '-';
    while (n > 0 && *len + 1 < cap) buf[(*len)++] = d[--n];
    buf[*len] = 0;
}

/* 1 while the calling thread measures candidates (its nested choices take
 * their fixed rules). */
int px_tune_measuring(void);

#endif
