/* Which instruction set the vectorised CPU kernels use: the best this CPU
 * has, or the one PHX_CPU_ISA names (read once, at the first kernel call
 * that asks). */
#include "config.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/cpu/cpu.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

static const char *const isa_names[] = {"generic", "avx2", "avx512"};

/* PX_ISA_* + 1 once decided; 0 before; -1: PHX_CPU_ISA is invalid */
static atomic_int chosen;

int px_cpu_isa_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    /* F16C: CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports lacks
     * "f16c"); the builtins check the OS saves ymm/zmm state */
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
    __builtin_cpu_init();
    if (!f16c || !__builtin_cpu_supports("fma")) return PX_ISA_GENERIC;
    if (__builtin_cpu_supports("avx512f")) return PX_ISA_AVX512;
    if (__builtin_cpu_supports("avx2")) return PX_ISA_AVX2;
#endif
    return PX_ISA_GENERIC;
}

/* 1 + the answer once known (cpuid may trap to a hypervisor: ask once) */
static atomic_int has_bf16;

int px_cpu_has_avx512bf16(void)
{
    int h = atomic_load_explicit(&has_bf16, memory_order_relaxed);
    if (h) return h - 1;
    h = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    /* CPUID leaf 7 subleaf 1, EAX bit 5; zmm state is checked by avx512f */
    if (px_cpu_isa_best() == PX_ISA_AVX512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) h = (a >> 5) & 1u;
#endif
    atomic_store_explicit(&has_bf16, h + 1, memory_order_relaxed);
    return h;
}

static atomic_int has_bw; /* 1 + the answer once known */

int px_cpu_avx512bw(void)
{
    int h = atomic_load_explicit(&has_bw, memory_order_relaxed);
    if (h) return h - 1;
    h = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    h = px_cpu_isa_best() == PX_ISA_AVX512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    atomic_store_explicit(&has_bw, h + 1, memory_order_relaxed);
    return h;
}

const char *px_cpu_isa_name(int isa)
{
    return isa >= 0 && isa <= PX_ISA_AVX512 ? isa_names[isa] : "?";
}

static phx_status isa_error(const char *v)
{
    for (int i = 0; i <= PX_ISA_AVX512; i++)
        if (!strcmp(v, isa_names[i]))
            return phx_error(PHX_EINVAL, "environment variable PHX_CPU_ISA='%s': this CPU supports at most %s", v,
                             isa_names[px_cpu_isa_best()]);
    return phx_error(PHX_EINVAL, "environment variable PHX_CPU_ISA='%s': expected generic, avx2 or avx512", v);
}

int px_cpu_isa(void)
{
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (c > 0) return c - 1;
    const char *v = getenv("PHX_CPU_ISA");
    if (c < 0) { /* a bad value stays an error; say so again */
        isa_error(v ? v : "");
        return -1;
    }
    int isa = px_cpu_isa_best();
    if (v && *v) {
        int want = -1;
        for (int i = 0; i <= PX_ISA_AVX512; i++)
            if (!strcmp(v, isa_names[i])) want = i;
        if (want < 0 || want > isa) {
            isa_error(v);
            atomic_store(&chosen, -1);
            return -1;
        }
        isa = want;
    }
    atomic_store(&chosen, isa + 1);
    return isa;
}

phx_status px_cpu_isa_set(int isa)
{
    if (isa < 0 || isa > px_cpu_isa_best())
        return phx_error(PHX_EINVAL, "px_cpu_isa_set: %s, this CPU supports at most %s", px_cpu_isa_name(isa),
                         isa_names[px_cpu_isa_best()]);
    atomic_store(&chosen, isa + 1);
    return PHX_OK;
}

/* 1 + the streaming threshold once known; 0 before */
static _Atomic int64_t stream_min;

/* The last-level cache in bytes as Linux's sysfs describes cpu0's caches
 * (what lscpu prints), else sysconf's, else -1. sysfs first: in a virtual
 * machine sysconf may report the host's whole L3 (320 MiB against the
 * 32 MiB this machine's two cores share). */
static int64_t llc_bytes(void)
{
    int64_t best = -1;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        int level = 0;
        long long size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        char unit = 0;
        if (fgets(buf, sizeof buf, f) && sscanf(buf, "%lld%c", &size, &unit) >= 1 && size > 0 && level >= best_level) {
            best_level = level;
            best = size * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best <= 0) best = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (best <= 0) best = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return best > 0 ? best : -1;
}

/* Half the last-level cache, at most 16 MiB: a virtual machine's sysfs
 * may describe the host socket's whole L3 (300 MiB on this two-vCPU
 * machine, shared with the other tenants), and relu on 4M floats
 * (32 MiB read and written) ran 0.96 ms streaming against 1.22 ms with
 * ordinary stores there. */
static int64_t stream_default(void)
{
    int64_t llc = llc_bytes(), cap = (int64_t)16 << 20;
    return llc > 0 && llc / 2 < cap ? llc / 2 : cap;
}

int px_cpu_streams(int64_t bytes)
{
    int64_t m = atomic_load_explicit(&stream_min, memory_order_relaxed);
    if (!m) {
        m = stream_default() + 1;
        atomic_store_explicit(&stream_min, m, memory_order_relaxed);
    }
    return bytes >= m - 1;
}

void px_cpu_stream_set(int64_t bytes)
{
    atomic_store(&stream_min, bytes < 0 ? 0 : bytes == INT64_MAX ? INT64_MAX : bytes + 1);
}
