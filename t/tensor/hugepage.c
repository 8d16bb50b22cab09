/* Host blocks on transparent huge pages (kernels/cpu/hugepage.c): a tensor
 * or scratch block of 2 MiB and more starts on a 2 MiB boundary and its
 * mapping carries the MADV_HUGEPAGE flag ("hg" in /proc/self/smaps);
 * PHX_CPU_HUGEPAGES=0 (read once, so checked in a child forked before any
 * allocation) leaves the flag off; the contents and the memory statistics
 * are those of any block. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "kernels/cpu/cpu.h"
#include "t/tap.h"

/* 1: the mapping holding p has VmFlags "hg", 0: it has not, -1: unknown */
static int advised(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, got = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a >= lo && a < hi;
        } else if (in && !strncmp(line, "VmFlags:", 8)) {
            got = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return got;
}

/* THP in the kernel and not "never" */
static int thp_available(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    char line[128] = "";
    int r = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return r;
}

static phx_tensor *filled(int64_t n)
{
    int64_t s[1] = {n};
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, s, phx_cpu());
    if (!t) return NULL;
    float *d = phx_tensor_data(t);
    for (int64_t i = 0; i < n; i++) d[i] = (float)(i % 1021);
    return t;
}

static int intact(const phx_tensor *t, int64_t n)
{
    const float *d = phx_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        if (d[i] != (float)(i % 1021)) return 0;
    return 1;
}

int main(void)
{
    plan(12);
    const int64_t big = 1 << 20; /* 4 MiB of f32 */
    int thp = thp_available();

    /* PHX_CPU_HUGEPAGES=0 in a child, before this process reads it */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("PHX_CPU_HUGEPAGES", "0", 1);
        phx_tensor *t = filled(big);
        int r = !t ? 3 : !intact(t, big) ? 4 : advised(phx_tensor_data(t)) == 1 ? 5 : 0;
        phx_tensor_free(t);
        _exit(r);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    is_int(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0,
           "PHX_CPU_HUGEPAGES=0: a 4 MiB tensor holds its values and its mapping is not advised");

    phx_memory_stats before = PHX_MEMORY_STATS_INIT, after = PHX_MEMORY_STATS_INIT;
    is_int(phx_device_memory_stats(phx_cpu(), &before), PHX_OK, "memory statistics");
    phx_tensor *t = filled(big), *small = filled(1000);
    ok(t && small, "a 4 MiB and a 4 KB tensor");
    is_int((int64_t)((uintptr_t)phx_tensor_data(t) % (2u << 20)), 0, "the 4 MiB tensor starts on a 2 MiB boundary");
    is_int((int64_t)((uintptr_t)phx_tensor_data(small) % 64), 0, "the small one on a 64-byte boundary");
    ok(intact(t, big) && intact(small, 1000), "both hold what was written");
    is_int(phx_device_memory_stats(phx_cpu(), &after), PHX_OK, "memory statistics after");
    is_int((int64_t)(after.in_use_bytes - before.in_use_bytes), (int64_t)(big + 1000) * 4,
           "in-use bytes count the tensors' bytes, not the alignment");
    if (thp)
        is_int(advised(phx_tensor_data(t)), 1, "the 4 MiB tensor's mapping is advised for huge pages");
    else
        skip(1, "the kernel has no transparent huge pages");
    phx_tensor_free(t);
    phx_tensor_free(small);

    char *s = px_cpu_scratch(3, (size_t)3 << 20);
    ok(s && (uintptr_t)s % (2u << 20) == 0, "3 MiB of scratch start on a 2 MiB boundary");
    if (thp)
        is_int(s ? advised(s) : -1, 1, "and are advised for huge pages");
    else
        skip(1, "the kernel has no transparent huge pages");
    ok(px_cpu_scratch(3, 100) == s, "a smaller request keeps the same block");
    return done_testing();
}
