/* Which instruction set the compute-bound CPU kernels use (cpu.h,
 * "Instruction sets"): the best this CPU has, or PHX_CPU_ISA. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int chosen, forced;
static char bad[64];

static int best(void)
{
#if PX_HAVE_ISA_VARIANTS
    if (__builtin_cpu_supports("avx512f")) return PX_ISA_AVX512;
    if (__builtin_cpu_supports("avx2")) return PX_ISA_AVX2;
#endif
    return PX_ISA_GENERIC;
}

static void choose(void)
{
    static const char *const names[3] = {"generic", "avx2", "avx512"};
    int top = best();
    chosen = top;
    const char *v = getenv("PHX_CPU_ISA");
    if (!v || !*v) return;
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) {
            if (i > top) break; /* the CPU lacks it */
            chosen = i;
            forced = 1;
            return;
        }
    chosen = -1;
    snprintf(bad, sizeof bad, "%.40s", v);
}

int px_cpu_isa(int hint)
{
    pthread_once(&once, choose);
    if (chosen < 0) {
        static const char *const names[3] = {"generic", "avx2", "avx512"};
        return phx_error(PHX_EINVAL,
                         "PHX_CPU_ISA='%s': expected generic, avx2 or avx512, and one this CPU has (the best "
                         "here is %s)",
                         bad, names[best()]),
               -1;
    }
    return forced || chosen < hint ? chosen : hint;
}
