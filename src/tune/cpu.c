/* The CPU's signature and the core its BLAS runs (tune.h). OpenBLAS picks
 * its kernels once, in its constructor, from the CPU's model numbers; a
 * CPU it does not know (a hypervisor's masked model name, a newer family)
 * gets its oldest x86-64 kernels (Prescott, SSE3), 3-7x slower. Nothing
 * can change the core after that constructor ran (OpenBLAS has no call
 * for it; OPENBLAS_CORETYPE is read at load), so Phalanx reports it and
 * keeps PHX_CPU_GEMM=auto off such a BLAS (kernels/cpu/gemm.c). */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "src/tune/tune.h"
#include "kernels/cpu/cpu.h"
#include "phalanx/log.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
char *openblas_get_corename(void);
#endif

static px_cpu_id cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void flag(int has, const char *name)
{
    if (!has) return;
    size_t n = strlen(cpu.flags);
    snprintf(cpu.flags + n, sizeof cpu.flags - n, "%s%s", n ? "," : "", name);
}

static void cpu_read(void)
{
    snprintf(cpu.vendor, sizeof cpu.vendor, "unknown");
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a = 0, b = 0, c = 0, d = 0, max = 0;
    if (!__get_cpuid(0, &max, &b, &c, &d)) return;
    memcpy(cpu.vendor, &b, 4), memcpy(cpu.vendor + 4, &d, 4), memcpy(cpu.vendor + 8, &c, 4);
    cpu.vendor[12] = 0;
    unsigned l1c = 0, l7b = 0, l7d = 0, l71a = 0;
    if (__get_cpuid(1, &a, &b, &l1c, &d)) {
        unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
        if (fam == 0xf) fam += (a >> 20) & 0xff;
        if (fam == 0x6 || fam >= 0xf) mod += ((a >> 16) & 0xf) << 4;
        cpu.family = (int)fam, cpu.model = (int)mod;
    }
    if (max >= 7) {
        __get_cpuid_count(7, 0, &a, &l7b, &c, &l7d);
        if (a >= 1) __get_cpuid_count(7, 1, &l71a, &b, &c, &d);
    }
    unsigned long long xcr0 = 0;
    if ((l1c >> 27) & 1u) { /* OSXSAVE: the OS says which register state it saves */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0, tiles = (xcr0 & 0x60000) == 0x60000;
    flag(ymm && ((l7b >> 5) & 1u), "avx2");
    flag(ymm && ((l1c >> 12) & 1u), "fma");
    flag(zmm && ((l7b >> 16) & 1u), "avx512f");
    flag(zmm && ((l7b >> 30) & 1u), "avx512bw");
    flag(zmm && ((l7b >> 31) & 1u), "avx512vl");
    flag(zmm && ((l7b >> 17) & 1u), "avx512dq");
    flag(zmm && ((l71a >> 5) & 1u), "avx512bf16");
    flag(zmm && ((l7d >> 23) & 1u), "avx512fp16");
    flag(tiles && ((l7d >> 24) & 1u), "amx");
    unsigned brand[12];
    if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
        char s[49];
        memcpy(s, brand, 48);
        s[48] = 0;
        const char *p = s;
        while (*p == ' ') p++;
        snprintf(cpu.name, sizeof cpu.name, "%s", p);
    }
#endif
    if (!cpu.flags[0]) snprintf(cpu.flags, sizeof cpu.flags, "-");
    if (!cpu.name[0]) snprintf(cpu.name, sizeof cpu.name, "unknown");
}

const px_cpu_id *px_tune_cpu(void)
{
    pthread_once(&cpu_once, cpu_read);
    return &cpu;
}

static int has(const char *name)
{
    const char *f = px_tune_cpu()->flags;
    size_t n = strlen(name);
    for (const char *p = f; (p = strstr(p, name)); p += n)
        if ((p == f || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

const char *px_tune_blas_name(void)
{
#if defined(HAVE_OPENBLAS_SET_NUM_THREADS)
    return "OpenBLAS";
#elif defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
    return "BLIS";
#elif defined(HAVE_CBLAS)
    return "CBLAS";
#else
    return "none";
#endif
}

const char *px_tune_blas_core(void)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    const char *c = openblas_get_corename();
    return c && *c ? c : "unknown";
#else
    return px_tune_blas_name();
#endif
}

const char *px_tune_blas_core_for_cpu(void)
{
    if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) return "SkylakeX";
    if (!has("avx2") || !has("fma")) return NULL;
    return strcmp(px_tune_cpu()->vendor, "AuthenticAMD") == 0 ? "Zen" : "Haswell";
}

/* The widest vectors an OpenBLAS 0.3 x86-64 core's kernels use: 2 for
 * AVX-512, 1 for AVX2, 0 for the older ones (Prescott ... Sandybridge,
 * Bulldozer, Piledriver, Steamroller) and "unknown". */
int px_tune_blas_core_level(const char *core)
{
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i])) return 2;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i])) return 1;
    return 0;
}

/* read once: OpenBLAS picks its core when it loads and keeps it */
static int misdetected, avx512_core;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_check(void)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    const char *core = px_tune_blas_core(), *want = px_tune_blas_core_for_cpu();
    const px_cpu_id *id = px_tune_cpu();
    int have = want ? px_tune_blas_core_level(want) : 0, got = px_tune_blas_core_level(core);
    misdetected = want && got < have ? (got == 0 ? 2 : 1) : 0;
    avx512_core = got == 2;
    /* at info: the programs still run right, and a warning on every start
     * of every program on such a machine would drown the ones that matter */
    if (misdetected == 2)
        phx_log(PHX_LOG_INFO,
                "OpenBLAS misdetected this CPU (%s, family %d model %d, %s): it runs its %s kernels, "
                "without AVX2; PHX_CPU_GEMM=auto keeps GEMMs on Phalanx's own kernels where it can; set "
                "OPENBLAS_CORETYPE=%s before starting the program for OpenBLAS's fast kernels",
                id->name, id->family, id->model, id->flags, core, want);
    else if (misdetected == 1)
        phx_log(PHX_LOG_INFO,
                "OpenBLAS misdetected this CPU (%s, family %d model %d): it runs its %s (AVX2) kernels on "
                "a CPU with AVX-512; OPENBLAS_CORETYPE=%s before starting the program selects its AVX-512 ones",
                id->name, id->family, id->model, core, want);
    else
        phx_log(PHX_LOG_INFO, "BLAS: OpenBLAS, core %s, on %s (family %d model %d, %s)", core, id->name, id->family,
                id->model, id->flags);
#endif
}

int px_tune_blas_misdetected(void)
{
    pthread_once(&blas_once, blas_check);
    return misdetected;
}

int px_tune_blas_avx512(void)
{
    pthread_once(&blas_once, blas_check);
    return avx512_core;
}

/* rebuilt when the kernels' instruction set changes (px_cpu_isa_set); the
 * BLAS core is fixed once OpenBLAS has loaded */
static __thread char signature[512];
static __thread int signature_isa = -2;

const char *px_tune_signature(void)
{
    int isa = px_cpu_isa();
    if (isa == signature_isa && signature[0]) return signature;
    const px_cpu_id *id = px_tune_cpu();
    snprintf(signature, sizeof signature, "%s %d %d %s isa=%s blas=%s:%s", id->vendor, id->family, id->model, id->flags,
             px_cpu_isa_name(isa), px_tune_blas_name(), px_tune_blas_core());
    for (char *p = signature; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '_';
    signature_isa = isa;
    return signature;
}
