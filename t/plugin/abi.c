/* Plugin ABI evolution: plugins built against the frozen ABI 1.0 headers
 * (t/plugin/abi-1.0) load and work under this core; an optional slot left
 * NULL gets the core's default; a kernel appended since fails naming
 * it; a NULL required slot and a major-2 plugin are rejected with
 * messages naming the slot or both versions. The slot
 * tables themselves are checked against the structs. Test plugins:
 * t/plugins/abi-comm.c and abi-device.c (tools/local.mk). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "src/plugin/plugin-abi.h"
#include "phalanx/phalanx.h"
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define N 6

/* Each rank: allreduce, broadcast, allgather, reduce_scatter and barrier
 * through the named backend; returns the number of wrong results (or 100
 * + the status when a call fails) and prints what differed. */
static int collectives(int rank, void *arg)
{
    const char *backend = arg;
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = backend;
    phx_comm *c = NULL;
    phx_status st = phx_comm_init(&o, &c);
    if (st) {
        printf("# rank %d: phx_comm_init(%s): %s\n", rank, backend, phx_last_error());
        return 100 - st;
    }
    int size = phx_comm_size(c), bad = 0;
    float v[N * 2], got[N * 2];
    const int64_t n1[] = {N}, n2[] = {2 * N};
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, n1, phx_cpu());
    phx_tensor *big = phx_tensor_new(PHX_F32, 1, n2, phx_cpu());
    /* allreduce: rank r holds (r+1) * (i+1); the sum is (i+1) * size(size+1)/2 */
    for (int i = 0; i < N; i++) v[i] = (float)((rank + 1) * (i + 1));
    if ((st = phx_tensor_from_host(t, v)) || (st = phx_comm_allreduce(c, t, PHX_SUM, NULL)) ||
        (st = phx_tensor_to_host(t, got)))
        goto fail;
    for (int i = 0; i < N; i++)
        if (got[i] != (float)((i + 1) * size * (size + 1) / 2)) bad++, printf("# allreduce[%d] = %g\n", i, got[i]);
    /* broadcast from the last rank: 100 r + i */
    for (int i = 0; i < N; i++) v[i] = (float)(100 * rank + i);
    if ((st = phx_tensor_from_host(t, v)) || (st = phx_comm_broadcast(c, t, size - 1, NULL)) ||
        (st = phx_tensor_to_host(t, got)))
        goto fail;
    for (int i = 0; i < N; i++)
        if (got[i] != (float)(100 * (size - 1) + i)) bad++, printf("# broadcast[%d] = %g\n", i, got[i]);
    if (size == 2) {
        /* allgather: block r is rank r's 100 r + i */
        if ((st = phx_tensor_from_host(t, v)) || (st = phx_comm_allgather(c, t, big, NULL)) ||
            (st = phx_tensor_to_host(big, got)))
            goto fail;
        for (int i = 0; i < 2 * N; i++)
            if (got[i] != (float)(100 * (i / N) + i % N)) bad++, printf("# allgather[%d] = %g\n", i, got[i]);
        /* reduce_scatter: rank r sends j + r; block r of the sum, 2 j + 1 */
        for (int j = 0; j < 2 * N; j++) v[j] = (float)(j + rank);
        if ((st = phx_tensor_from_host(big, v)) || (st = phx_comm_reduce_scatter(c, big, t, PHX_SUM, NULL)) ||
            (st = phx_tensor_to_host(t, got)))
            goto fail;
        for (int i = 0; i < N; i++)
            if (got[i] != (float)(2 * (rank * N + i) + 1)) bad++, printf("# reduce_scatter[%d] = %g\n", i, got[i]);
    }
    /* barrier: the last rank arrives 0.3 s late; rank 0 must wait for it */
    if (rank == size - 1) usleep(300000);
    double t0 = now();
    if ((st = phx_comm_barrier(c, NULL))) goto fail;
    if (rank == 0 && size > 1 && now() - t0 < 0.2) bad++, printf("# barrier returned after %.3f s\n", now() - t0);
    phx_tensor_free(t);
    phx_tensor_free(big);
    phx_comm_free(c);
    return bad;
fail:
    printf("# rank %d: %s: %s\n", rank, backend, phx_last_error());
    phx_tensor_free(t);
    phx_tensor_free(big);
    phx_comm_free(c);
    return 100 - st;
}

static void check_tables(void)
{
    const px_table_abi *tabs[] = {&px_comm_abi, &px_device_abi, &px_kernels_abi};
    for (int i = 0; i < 3; i++) {
        char why[256] = "";
        ok(px_abi_selfcheck(tabs[i], why, sizeof why) == 0, "%s: the slot table covers the struct in order%s%s",
           tabs[i]->name, why[0] ? ": " : "", why);
    }
    is_int((int)px_kernels_abi.nslots, (int)(sizeof(phx_kernels_v1) / sizeof(void (*)(void))),
           "one kernel slot per line of kernels_v1.def");
    ok(px_abi_since(&px_comm_abi, "barrier") == 0 && !px_comm_abi.slots[px_comm_abi.nslots - 1].required,
       "barrier is optional");
    ok(px_abi_has(&px_kernels_abi, "gemm", 0) && !px_abi_has(&px_kernels_abi, "no_such_kernel", 99),
       "px_abi_has: gemm is in 1.0; an unknown slot is in no minor");

    /* The adapter on a table of minor 0 with a hole where a required slot is. */
    phx_comm_v1 src, dst;
    memset(&src, 0x5a, sizeof src); /* non-NULL, never called */
    src.broadcast = NULL, src.barrier = NULL;
    is_int(px_abi_adapt(&px_comm_abi, &src, 0, &dst, "here", "comm", "holey"), PHX_EABI,
           "adapt: a NULL required slot is PHX_EABI");
    like(phx_last_error(),
         "here: comm plugin 'holey' (ABI 1.0): required slot phx_comm_v1.broadcast (since ABI 1.0) "
         "is NULL",
         "... naming the plugin, its ABI and the slot");
    memset(&src.broadcast, 0x5a, sizeof src.broadcast);
    is_int(px_abi_adapt(&px_comm_abi, &src, 0, &dst, "here", "comm", "holey"), PHX_OK,
           "adapt: optional barrier NULL is fine");
    ok(dst.broadcast == src.broadcast && dst.barrier == NULL, "adapt: slots copied, barrier stays NULL");
}

int main(void)
{
    char dirs[2 * PATH_MAX + 2];
    const char *b = getenv("top_builddir");
    if (!b) b = ".";
    snprintf(dirs, sizeof dirs, "%s/t/plugins/abi/.libs:%s/t/plugins/abidev/.libs", b, b);
    char so[PATH_MAX + 64];
    snprintf(so, sizeof so, "%s/t/plugins/abidev/.libs/phx-device-cuda.so", b);
    if (access(so, R_OK) != 0) {
        printf("Bail out! %s not built (make check builds it)\n", so);
        return 1;
    }
    setenv("PHX_PLUGIN_PATH", dirs, 1);
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    plan(44);

    check_tables();

    /* A comm plugin built against the 1.0 headers. */
    const phx_plugin_desc *d = NULL;
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "abi10", NULL, &d), PHX_OK, "the 1.0 comm plugin loads");
    ok(d && d->abi_major == 1 && d->abi_minor == 0, "it says ABI 1.0 (built against t/plugin/abi-1.0)");
    is_int(phx_spawn(1, collectives, "abi10"), PHX_OK, "1.0 comm plugin: every collective right, world of 1");
    is_int(phx_spawn(2, collectives, "abi10"), PHX_OK, "1.0 comm plugin: every collective right, world of 2");

    /* Optional barrier left NULL: the core's one-element all-reduce. */
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "nobarrier", NULL, &d), PHX_OK, "a 1.1 plugin without barrier loads");
    ok(d && d->abi_minor == PHX_PLUGIN_ABI_MINOR && ((const phx_comm_v1 *)d->vtable)->barrier == NULL,
       "it is ABI 1.%d and its barrier is NULL", PHX_PLUGIN_ABI_MINOR);
    is_int(phx_spawn(2, collectives, "nobarrier"), PHX_OK, "default barrier: waits for the late rank (0.3 s)");

    /* A NULL required slot. */
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.rank = 0, o.size = 1, o.backend = "nobcast";
    phx_comm *c = NULL;
    is_int(phx_comm_init(&o, &c), PHX_EABI, "required broadcast NULL: PHX_EABI");
    like(phx_last_error(),
         "phx_comm_init: comm plugin 'nobcast' (ABI 1." PX_XSTR(PHX_PLUGIN_ABI_MINOR) "): required slot phx_comm_v1.broadcast "
         "(since ABI 1.0) is NULL",
         "... naming the plugin and the slot");
    ok(c == NULL, "... and no communicator");

    /* A name that no plugin has: the message names where it came from. */
    o.backend = "ncl";
    is_int(phx_comm_init(&o, &c), PHX_ENOTFOUND, "backend 'ncl': PHX_ENOTFOUND");
    like(phx_last_error(), "phx_comm_init: phx_comm_opts.backend='ncl' names no usable communicator: ",
         "... naming the option and its value");
    o.backend = NULL;
    setenv("PHX_COMM", "ncl", 1);
    is_int(phx_comm_init(&o, &c), PHX_ENOTFOUND, "PHX_COMM=ncl: PHX_ENOTFOUND");
    like(phx_last_error(), "phx_comm_init: PHX_COMM='ncl' names no usable communicator: phx_plugin_load: comm plugin 'ncl' is not "
         "usable; ncl: not found",
         "... naming the variable, its value and the loader's reason");
    unsetenv("PHX_COMM");

    /* A major-2 plugin. */
    o.backend = "major2";
    is_int(phx_comm_init(&o, &c), PHX_EABI, "major 2: PHX_EABI");
    like(phx_last_error(),
         "phx-comm-major2.so): plugin ABI 2.0, but this Phalanx implements plugin ABI 1." PX_XSTR(PHX_PLUGIN_ABI_MINOR) " and "
         "loads ABI 1.0 or a newer 1.x (the major must be equal)",
         "... naming both versions");
    phx_plugin_info infos[16] = {PHX_PLUGIN_INFO_INIT};
    size_t n = phx_plugin_scan(infos, 16, NULL);
    int listed = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(infos[i].name, "major2") == 0 && !infos[i].ok && infos[i].abi_major == 2) listed = 1;
    ok(listed, "phx-info's scan lists major2 as rejected, ABI 2");

    /* A device plugin built against the 1.0 headers, every optional slot NULL. */
    phx_device cu;
    is_int(phx_device_parse("cuda:0", &cu), PHX_OK, "the 1.0 device plugin loads as cuda:0");
    is_int(phx_device_count(PHX_DEVICE_CUDA), 1, "one device");
    const phx_device_v1 *t = phx_device_table(cu);
    ok(t && t->synchronize && t->current_stream && t->memory_stats && t->event_create && t->event_record &&
           t->stream_wait_event && t->event_synchronize && t->event_query && t->event_destroy,
       "the core filled its optional slots");
    ok(t && t->current_stream(0) == NULL, "default stream: NULL (a synchronous device)");
    void *ev = NULL;
    ok(t && t->event_create(0, &ev) == PHX_OK && t->event_record(ev, NULL) == PHX_OK && t->event_query(ev) == 1,
       "default events: complete once recorded");
    if (t) t->event_destroy(ev);
    is_int(phx_device_synchronize(cu), PHX_OK, "default synchronize: PHX_OK");
    phx_memory_stats ms = PHX_MEMORY_STATS_INIT;
    is_int(phx_device_memory_stats(cu, &ms), PHX_EUNSUPPORTED, "default memory_stats: PHX_EUNSUPPORTED");
    like(phx_last_error(), "the device has no statistics", "... saying so");
    int present = 0, absent = 0, wrong = 0;
    for (size_t i = 0; t && i < px_kernels_abi.nslots; i++) {
        const px_slot *sl = &px_kernels_abi.slots[i];
        void *p;
        memcpy(&p, (const char *)t->kernels + sl->offset, sizeof p);
        if (sl->since == 0)
            present += p != NULL, wrong += p == NULL;
        else
            absent += p == NULL, wrong += p != NULL;
    }
    ok(t && !wrong, "kernels: the %d slots of 1.0 set, the %d appended since read as NULL", present, absent);

    /* It works: a gemm on it equals the CPU's, through its memory. */
    const int64_t sa[] = {3, 4}, sb[] = {4, 5}, sc[] = {3, 5};
    float A[12], B[20], C0[15], C1[15];
    for (int i = 0; i < 12; i++) A[i] = 0.25f * (float)(i - 5);
    for (int i = 0; i < 20; i++) B[i] = 0.125f * (float)(7 - i);
    phx_tensor *a0 = phx_tensor_from_data(PHX_F32, 2, sa, A), *b0 = phx_tensor_from_data(PHX_F32, 2, sb, B);
    phx_tensor *c0 = phx_tensor_zeros(PHX_F32, 2, sc, phx_cpu());
    phx_tensor *a1 = phx_tensor_new(PHX_F32, 2, sa, cu), *b1 = phx_tensor_new(PHX_F32, 2, sb, cu);
    phx_tensor *c1 = phx_tensor_zeros(PHX_F32, 2, sc, cu);
    ok(a1 && b1 && c1, "tensors on cuda:0 (the plugin's memory)");
    void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    int *allocs = h ? dlsym(h, "abi_dev_allocs") : NULL;
    ok(allocs && *allocs >= 3, "the plugin made the allocations (%d)", allocs ? *allocs : -1);
    is_int(phx_tensor_copy(a1, a0) || phx_tensor_copy(b1, b0) || phx_gemm(false, false, 1.0f, a0, b0, 0.0f, c0) ||
               phx_gemm(false, false, 1.0f, a1, b1, 0.0f, c1),
           PHX_OK, "copies and gemm on both devices");
    is_int(phx_tensor_to_host(c0, C0) || phx_tensor_to_host(c1, C1), PHX_OK, "results back to the host");
    double want = 0;
    for (int k = 0; k < 4; k++) want += (double)A[1 * 4 + k] * B[k * 5 + 2];
    ok(memcmp(C0, C1, sizeof C0) == 0 && C1[1 * 5 + 2] == (float)want,
       "the 1.0 device's gemm equals the CPU's (C[1,2] = %g, expected %g)", C1[7], want);

    /* A kernel appended after 1.0: the module says which one and why. */
    phx_module *sm = phx_softmax_new();
    phx_tensor *y = NULL;
    is_int(phx_module_forward(sm, a1, &y), PHX_EUNSUPPORTED, "softmax on the 1.0 device: PHX_EUNSUPPORTED");
    like(phx_last_error(),
         "phx_softmax_forward: the kernel table of device cuda:0 has no 'softmax_forward' slot: its plugin has "
         "ABI 1.0, the slot came with ABI 1.1 (rebuild the plugin",
         "... naming the function, the device, the slot and both ABIs");
    phx_tensor_free(y);
    phx_module_free(sm);
    if (h) dlclose(h);
    phx_tensor_free(a0), phx_tensor_free(b0), phx_tensor_free(c0);
    phx_tensor_free(a1), phx_tensor_free(b1), phx_tensor_free(c1);

    /* The built-in CPU device: every kernel slot of this minor set. */
    const phx_device_v1 *cpu = phx_device_table(phx_cpu());
    int holes = 0;
    for (size_t i = 0; cpu && i < px_kernels_abi.nslots; i++) {
        void *p;
        memcpy(&p, (const char *)cpu->kernels + px_kernels_abi.slots[i].offset, sizeof p);
        if (!p) holes++, diag("cpu kernel %s is NULL", px_kernels_abi.slots[i].name);
    }
    ok(cpu && !holes, "the CPU device has all %zu kernel slots", px_kernels_abi.nslots);
    return done_testing();
}
