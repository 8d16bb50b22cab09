/* Choosing the cuda device and the nccl communicator, with or without a
 * GPU. Without one (this test's usual place): both plugins are found but
 * declined with "no CUDA device"; PHX_DEVICE=cuda and PHX_COMM=nccl are
 * clear errors that say why; every entry point of both plugins, called
 * directly, fails cleanly instead of crashing. With a GPU: both load,
 * PHX_DEVICE=cuda gives cuda:0, a bad index is refused, and a world of
 * one on NCCL reduces CPU and CUDA tensors. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

static phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};

static const phx_plugin_info *find(const char *kind, const char *name, size_t n)
{
    for (size_t i = 0; i < n && i < 64; i++)
        if (strcmp(infos[i].kind, kind) == 0 && strcmp(infos[i].name, name) == 0) return &infos[i];
    return NULL;
}

static const phx_plugin_desc *open_desc(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return h ? (const phx_plugin_desc *)dlsym(h, "phx_plugin_v1") : NULL;
}

/* Every cuda entry point without a device: an error naming the cause. */
static void cuda_entry_points(const phx_plugin_info *cu)
{
    const phx_plugin_desc *d = open_desc(cu->path);
    ok(d != NULL, "cuda plugin opens directly");
    if (!d) {
        skip(14, "no descriptor");
        return;
    }
    const phx_device_v1 *t = d->vtable;
    char why[256] = "";
    phx_probe_ctx ctx = {0, 1, 0};
    ok(d->probe(&ctx, why, sizeof why) < 0, "probe declines");
    like(why, "no CUDA device", "probe says why");
    is_int(t->count(), 0, "count() = 0");
    void *p = (void *)1;
    is_int(t->alloc(0, 64, &p), PHX_ENOTFOUND, "alloc: PHX_ENOTFOUND");
    like(phx_last_error(), "cuda:0: no CUDA device", "alloc says no CUDA device");
    ok(p == NULL, "alloc leaves *ptr NULL");
    phx_device_memory_stats_v1 ms;
    is_int(t->memory_stats(0, &ms), PHX_ENOTFOUND, "memory_stats: PHX_ENOTFOUND");
    ok(t->current_stream(0) == NULL, "current_stream: NULL");
    is_int(t->synchronize(0), PHX_ENOTFOUND, "synchronize: PHX_ENOTFOUND");
    char host[16] = {0};
    is_int(t->copy_h2d(0, (void *)64, host, sizeof host), PHX_ENOTFOUND, "copy_h2d: PHX_ENOTFOUND");
    is_int(t->kernels->fill(0, (void *)64, PHX_F32, 4, 1.0), PHX_ENOTFOUND, "kernel fill: PHX_ENOTFOUND");
    is_int(
        t->kernels->gemm(0, 0, 0, 2, 2, 2, 1.0f, (void *)64, 2, (void *)64, 2, PHX_F32, 0.0f, (void *)64, 2, PHX_F32),
        PHX_ENOTFOUND, "gemm: PHX_ENOTFOUND");
    /* argument checks come first, as on the CPU */
    is_int(t->kernels->axpby(0, 4, 1.0f, (void *)64, PHX_I32, 0.0f, (void *)64, PHX_F32), PHX_EINVAL,
           "axpby on i32: PHX_EINVAL before touching the device");
}

static void nccl_entry_points(const phx_plugin_info *nc)
{
    const phx_plugin_desc *d = open_desc(nc->path);
    ok(d != NULL, "nccl plugin opens directly");
    if (!d) {
        skip(3, "no descriptor");
        return;
    }
    char why[256] = "";
    phx_probe_ctx ctx = {0, 1, 0};
    ok(d->probe(&ctx, why, sizeof why) < 0, "nccl probe declines");
    const phx_comm_v1 *v = d->vtable;
    phx_store *st = phx_store_new_local();
    phx_comm_init_args a = {0, 1, 0, 1, st, "t/", 5.0, {PHX_DEVICE_CUDA, 0}};
    void *state = NULL;
    is_int(v->init(&a, &state), PHX_ENOTFOUND, "nccl init: PHX_ENOTFOUND");
    like(phx_last_error(), "no CUDA device", "nccl init says no CUDA device");
    phx_store_free(st);
}

static void without_gpu(const phx_plugin_info *cu, const phx_plugin_info *nc)
{
    ok(!cu->ok, "cuda plugin found but not usable");
    like(cu->reason, "no CUDA device", "its reason: no CUDA device");
    if (nc) {
        ok(!nc->ok, "nccl plugin found but not usable");
        like(nc->reason, "no CUDA device", "its reason: no CUDA device");
    } else {
        skip(2, "nccl plugin not built");
    }

    phx_device d = {7, 7};
    is_int(phx_device_parse("cuda:0", &d), PHX_ENOTFOUND, "phx_device_parse(cuda:0): PHX_ENOTFOUND");
    like(phx_last_error(), "no CUDA device", "... because there is no CUDA device");
    is_int(phx_device_count(PHX_DEVICE_CUDA), 0, "no CUDA devices counted");

    setenv("PHX_DEVICE", "cuda", 1);
    d.kind = 7;
    phx_status st = phx_device_default(&d);
    is_int(st, PHX_ENOTFOUND, "PHX_DEVICE=cuda: PHX_ENOTFOUND, no silent fallback to cpu");
    like(phx_last_error(), "PHX_DEVICE='cuda'", "the error names the variable");
    like(phx_last_error(), "no CUDA device", "and says why");
    is_int(d.kind, 7, "the output is untouched");
    unsetenv("PHX_DEVICE");
    ok(phx_device_default(&d) == PHX_OK && d.kind == PHX_DEVICE_CPU, "unset: the default is the cpu");

    if (nc) {
        setenv("PHX_COMM", "nccl", 1);
        phx_comm_opts o = PHX_COMM_OPTS_INIT;
        o.rank = 0;
        o.size = 1;
        o.local_rank = 0;
        o.local_size = 1;
        phx_comm *c = NULL;
        st = phx_comm_init(&o, &c);
        ok(st != PHX_OK && c == NULL, "PHX_COMM=nccl without a GPU: phx_comm_init fails");
        like(phx_last_error(), "nccl", "the error names nccl");
        like(phx_last_error(), "no CUDA device", "and says why: no CUDA device");
        diag("%s", phx_last_error());
        unsetenv("PHX_COMM");
        cuda_entry_points(cu);
        nccl_entry_points(nc);
    } else {
        skip(3, "nccl plugin not built");
        cuda_entry_points(cu);
    }
}

static void with_gpu(const phx_plugin_info *cu, const phx_plugin_info *nc)
{
    ok(cu->ok, "cuda plugin usable");
    int n = phx_device_count(PHX_DEVICE_CUDA);
    ok(n >= 1, "CUDA devices: %d", n);
    phx_device d;
    setenv("PHX_DEVICE", "cuda", 1);
    ok(phx_device_default(&d) == PHX_OK && d.kind == PHX_DEVICE_CUDA && d.index == 0, "PHX_DEVICE=cuda: cuda:0");
    unsetenv("PHX_DEVICE");
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", n);
    is_int(phx_device_parse(name, &d), PHX_ENOTFOUND, "%s: PHX_ENOTFOUND", name);
    like(phx_last_error(), "no such device", "a bad index says so");
    if (!nc) {
        skip(5, "nccl plugin not built");
        return;
    }
    ok(nc->ok, "nccl plugin usable");
    setenv("PHX_COMM", "nccl", 1);
    for (int on_gpu = 0; on_gpu < 2; on_gpu++) {
        phx_comm_opts o = PHX_COMM_OPTS_INIT;
        o.rank = 0, o.size = 1, o.local_rank = 0, o.local_size = 1;
        o.device = on_gpu ? (phx_device){PHX_DEVICE_CUDA, 0} : phx_cpu();
        phx_comm *c = NULL;
        phx_status st = phx_comm_init(&o, &c);
        if (st != PHX_OK) diag("%s", phx_last_error());
        int64_t shape = 1000;
        float host[1000];
        for (int i = 0; i < 1000; i++) host[i] = (float)i * 0.5f;
        phx_tensor *t = c ? phx_tensor_new(PHX_F32, 1, &shape, o.device) : NULL;
        int good = t && phx_tensor_from_host(t, host) == PHX_OK && phx_comm_allreduce(c, t, PHX_AVG, NULL) == PHX_OK &&
            phx_tensor_to_host(t, host) == PHX_OK;
        for (int i = 0; good && i < 1000; i++) good = host[i] == (float)i * 0.5f;
        ok(st == PHX_OK && good, "world of one on nccl, %s tensor: allreduce(avg) keeps the values",
           on_gpu ? "cuda" : "cpu");
        phx_tensor_free(t);
        phx_comm_free(c);
    }
    unsetenv("PHX_COMM");
}

int main(void)
{
    size_t n = phx_plugin_scan(infos, 64, NULL);
    const phx_plugin_info *cu = find("device", "cuda", n), *nc = find("comm", "nccl", n);
    if (!cu) skip_all("cuda plugin not built (configure --without-cuda or no CUDA toolkit)");
    ok(cu->abi_major == 1, "cuda plugin found: %s", cu->path);
    if (cu->ok)
        with_gpu(cu, nc);
    else
        without_gpu(cu, nc);
    return done_testing();
}
