/* The loader on an accelerator, against t/plugins/async-device.c: a
 * "cuda" device in host memory whose stream copies are made only when
 * waited for. The batches are device tensors with the same rows as the
 * CPU loader's, with 0 and 2 workers, over two epochs and a partial last
 * batch; after each batch but an epoch's last the next one's copy is
 * queued and not yet made (the overlap); a stop mid-epoch and the loader's
 * end leave no copy pending, no stream and no pinned byte behind. */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "t/tap.h"
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"

static int *pending, *streams;
static long *pinned;

static phx_status index_get(void *ctx, int64_t i, void *const *out)
{
    useconds_t delay = *(useconds_t *)ctx;
    if (delay) usleep(delay); /* lets the workers race to refill slots */
    *(int64_t *)out[0] = i;
    float *v = out[1];
    v[0] = (float)i * 0.5f;
    v[1] = -(float)i;
    return PHX_OK;
}

static const phx_dataset_vtable index_vtable = {
    .struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "index", .get = index_get};

/* One epoch as text "i i i | i i" of field 0, rows checked against field
 * 1; with `dev`, every batch must be on the device, and every batch but
 * the last must leave the next one's copy pending. -1 on a bad batch. */
static int epoch_text(phx_loader *l, int dev, char *buf, size_t cap, int *overlapped)
{
    size_t len = 0;
    buf[0] = '\0';
    phx_tensor *b[2];
    int r;
    size_t k = 0, nb = phx_loader_num_batches(l);
    while ((r = phx_loader_next_batch(l, b, 2)) == 1) {
        int64_t n = phx_tensor_dim(b[0], 0), ix[16];
        float v[32];
        if (n > 16 || phx_tensor_dim(b[1], 0) != n) return -1;
        if (dev && (phx_tensor_device(b[0]).kind != PHX_DEVICE_CUDA || phx_tensor_device(b[1]).kind != PHX_DEVICE_CUDA))
            return -1;
        if (dev && ++k<nb && * pending> 0) (*overlapped)++;
        if (phx_tensor_to_host(b[0], ix) != PHX_OK || phx_tensor_to_host(b[1], v) != PHX_OK) return -1;
        len += (size_t)snprintf(buf + len, cap - len, "%s", len ? " | " : "");
        for (int64_t j = 0; j < n; j++) {
            if (v[2 * j] != (float)ix[j] * 0.5f || v[2 * j + 1] != -(float)ix[j]) return -1;
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", j ? " " : "", (long long)ix[j]);
        }
    }
    return r;
}

static phx_loader *make(phx_dataset *ds, int workers, int dev)
{
    phx_loader_opts o = {
        .struct_size = sizeof(phx_loader_opts), .batch = 8, .shuffle = true, .seed = 3, .workers = workers};
    if (dev) o.device = (phx_device){PHX_DEVICE_CUDA, 0};
    return phx_loader_new_opts(ds, &o);
}

int main(void)
{
    char dir[PATH_MAX], so[PATH_MAX + 32];
    const char *b = getenv("top_builddir");
    snprintf(dir, sizeof dir, "%s/t/plugins/asyncdev/.libs", b ? b : ".");
    snprintf(so, sizeof so, "%s/phx-device-cuda.so", dir);
    if (access(so, R_OK) != 0) {
        printf("Bail out! %s not built (make check builds it)\n", so);
        return 1;
    }
    setenv("PHX_PLUGIN_PATH", dir, 1);
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    plan(2 * 5 + 4);

    if (!phx_device_table((phx_device){PHX_DEVICE_CUDA, 0})) {
        printf("Bail out! the async device does not load: %s\n", phx_last_error());
        return 1;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    pending = h ? dlsym(h, "async_dev_pending") : NULL;
    streams = h ? dlsym(h, "async_dev_streams") : NULL;
    pinned = h ? dlsym(h, "async_dev_pinned") : NULL;
    if (!pending || !streams || !pinned) {
        printf("Bail out! the async device's counters are not visible\n");
        return 1;
    }

    useconds_t delay = 200;
    phx_field f[2] = {{.dtype = PHX_I64, .ndim = 0}, {.dtype = PHX_F32, .ndim = 1, .shape = {2}}};
    phx_dataset *ds = phx_dataset_new(&index_vtable, &delay, 37, 2, f);
    char want[2][1024], got[1024];
    phx_loader *cpu = make(ds, 0, 0);
    for (int e = 0; e < 2; e++) epoch_text(cpu, 0, want[e], sizeof want[e], NULL);
    phx_loader_free(cpu);

    for (int w = 0; w <= 2; w += 2) {
        phx_loader *l = make(ds, w, 1);
        ok(l != NULL, "workers %d: a loader on the device (%s)", w, l ? "ok" : phx_last_error());
        if (!l) {
            skip(4, "no loader");
            continue;
        }
        int overlapped = 0, same = 1;
        for (int e = 0; e < 2; e++) {
            int r = epoch_text(l, 1, got, sizeof got, &overlapped);
            if (r != 0 || strcmp(got, want[e])) {
                same = 0;
                diag("epoch %d: got %s (%d)\n  expected %s", e, got, r, want[e]);
            }
        }
        ok(same, "workers %d: two epochs of device batches hold the CPU loader's rows (5 batches, the last of 5)", w);
        ok(overlapped == 2 * 4,
           "workers %d: after each batch but an epoch's last the next copy is queued, not made (%d of 8)", w,
           overlapped);
        phx_tensor *bt[2];
        int r1 = phx_loader_next_batch(l, bt, 2);
        phx_loader_set_epoch(l, 7); /* a stop mid-epoch */
        ok(r1 == 1 && *pending == 0, "workers %d: a stop mid-epoch leaves no copy pending (%d)", w, *pending);
        phx_loader_free(l);
        ok(*pending == 0 && *streams == 0 && *pinned == 0,
           "workers %d: freed, no copy pending (%d), no stream (%d), no pinned byte (%ld)", w, *pending, *streams,
           *pinned);
    }

    /* A loader over the CPU never touches the device. */
    long before = *pinned;
    phx_loader *c = make(ds, 2, 0);
    phx_tensor *bt[2];
    ok(c && phx_loader_next_batch(c, bt, 2) == 1 && phx_tensor_device(bt[0]).kind == PHX_DEVICE_CPU &&
           *pinned == before && *streams == 0,
       "a CPU loader's batches are CPU tensors, with no pinned memory and no stream");
    phx_loader_free(c);

    /* A device index that does not exist: refused at construction. */
    phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts), .batch = 8, .device = {PHX_DEVICE_CUDA, 3}};
    phx_loader *bad = phx_loader_new_opts(ds, &o);
    ok(!bad && strstr(phx_last_error(), "cuda"), "device cuda:3 of 1: refused (%s)", phx_last_error());
    phx_loader_free(bad);

    /* Batches in pinned memory are CPU tensors the async copies read: the
     * slots outlive the device buffers' copies (checked above through the
     * rows); one more epoch after a restart. */
    phx_loader *l = make(ds, 2, 1);
    int overlapped = 0;
    phx_loader_set_epoch(l, 1);
    ok(l && epoch_text(l, 1, got, sizeof got, &overlapped) == 0 && !strcmp(got, want[1]),
       "set_epoch(1) before the first batch: epoch 1's rows");
    phx_loader_free(l);
    ok(*pending == 0 && *streams == 0 && *pinned == 0, "... and nothing left behind");
    phx_dataset_free(ds);
    return done_testing();
}
