/* What make bench prints above every table (bench/run.sh): this CPU as
 * cpuid describes it, the instruction set Phalanx's kernels use, the BLAS
 * Phalanx links and the core it runs, the core the CPU's flags call for,
 * and the thread budget; one "key=value" line each. With --level CORE:
 * the vector width level of an OpenBLAS core name (2 AVX-512, 1 AVX2, 0
 * older), for the peer's core. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "kernels/cpu/cpu.h"
#include "src/base/threads.h"
#include "src/tune/tune.h"

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--level")) {
        printf("%d\n", px_tune_blas_core_level(argv[2]));
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: bench/cpu [--level OPENBLAS_CORE]\n");
        return 2;
    }
    const px_cpu_id *id = px_tune_cpu();
    const char *want = px_tune_blas_core_for_cpu();
    printf("cpu_name=%s\ncpu_vendor=%s\ncpu_family=%d\ncpu_model=%d\ncpu_flags=%s\n", id->name, id->vendor, id->family,
           id->model, id->flags);
    printf("kernels_isa=%s\nblas=%s\nblas_core=%s\nblas_core_for_cpu=%s\nblas_misdetected=%d\nthreads=%d\n",
           px_cpu_isa_name(px_cpu_isa()), px_tune_blas_name(), px_tune_blas_core(), want ? want : "-",
           px_tune_blas_misdetected(), px_threads_budget());
    return 0;
}
