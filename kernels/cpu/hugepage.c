/* Large host blocks on transparent huge pages. A GEMM packs its operands
 * from rows spread over many 4 KiB pages, each a TLB entry; on 2 MiB pages
 * the same block needs a handful. Blocks of at least 2 MiB (tensor storage
 * from the CPU device, the kernels' scratch) are therefore placed on a
 * 2 MiB boundary and madvise(MADV_HUGEPAGE)d, so that a kernel in
 * "madvise" mode (Debian's default) backs them with huge pages when it has
 * them; "always" does so anyway, "never" ignores the advice. Measured here
 * (doc/reference/tensors.md): OpenBLAS's 1024^3 sgemm 1.02-1.04x faster
 * best against best. PyTorch does the same from 2.1 (THP_MEM_ALLOC_ENABLE).
 *
 * Only whole 2 MiB pages inside the block are advised, so no memory
 * outside the block is ever backed for it: a 3 MiB tensor gets one huge
 * page and 4 KiB pages for the rest. PHX_CPU_HUGEPAGES=0 turns it off
 * (64-byte alignment, no advice), read once. */
#include "config.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif
#include "kernels/cpu/cpu.h"

#define PX_HUGE ((size_t)2 << 20)

static int huge_on(void)
{
    static atomic_int on = -1; /* every thread that reads it first computes the same */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("PHX_CPU_HUGEPAGES");
        v = !(e && !strcmp(e, "0"));
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

size_t px_cpu_block_align(size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= PX_HUGE && huge_on()) return PX_HUGE;
#endif
    (void)bytes;
    return 64;
}

/* the huge-page advice for the whole 2 MiB pages inside [p, p + bytes) */
static void block_advise(void *p, size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    uintptr_t lo = ((uintptr_t)p + PX_HUGE - 1) & ~(uintptr_t)(PX_HUGE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(PX_HUGE - 1);
    /* advice only: a kernel without THP says EINVAL, and nothing changes */
    if (hi > lo && huge_on()) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void *px_cpu_block_start(void *raw, size_t head, size_t bytes)
{
    uintptr_t align = px_cpu_block_align(bytes);
    void *p = (void *)(((uintptr_t)raw + head + align - 1) & ~(align - 1));
    block_advise(p, bytes);
    return p;
}
