/* Devices: naming, selection (PHX_DEVICE), the table lookup that loads
 * the cuda device plugin once. The CPU thread budget is src/base's
 * (threads.h), the local rank src/world's (world-impl.h). */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "src/tensor/device-impl.h"
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/plugin/plugin-abi.h"
#include "src/world/world-impl.h"
#include "kernels/cpu/cpu.h"
#include "phalanx/log.h"
#include "phalanx/plugin.h"
#include "src/base/abi.h"

phx_device phx_cpu(void)
{
    phx_device d = {PHX_DEVICE_CPU, 0};
    return d;
}

int phx_device_equal(phx_device a, phx_device b)
{
    return a.kind == b.kind && a.index == b.index;
}

/* ---- device tables: a plugin's as of its minor, with the defaults ---- */

/* The defaults of the optional slots: those of a synchronous device. */
static phx_status dflt_memory_stats(int dev, phx_device_memory_stats_v1 *out)
{
    (void)dev, (void)out;
    return phx_error(PHX_EUNSUPPORTED, "phx_device_memory_stats: the device has no statistics");
}
static phx_status dflt_synchronize(int dev)
{
    (void)dev;
    return PHX_OK;
}
static void *dflt_current_stream(int dev)
{
    (void)dev;
    return NULL;
}
static int dflt_event_token;
static phx_status dflt_event_create(int dev, void **event)
{
    (void)dev;
    *event = &dflt_event_token;
    return PHX_OK;
}
static phx_status dflt_event_record(void *event, void *stream)
{
    (void)event, (void)stream;
    return PHX_OK;
}
static phx_status dflt_stream_wait_event(void *stream, void *event)
{
    (void)stream, (void)event;
    return PHX_OK;
}
static phx_status dflt_event_synchronize(void *event)
{
    (void)event;
    return PHX_OK;
}
static int dflt_event_query(void *event)
{
    (void)event;
    return 1;
}
static void dflt_event_destroy(void *event)
{
    (void)event;
}

/* One device as the core uses it: its table (and kernel table) read
 * through px_abi_adapt, the optional slots filled. */
typedef struct px_devtab {
    phx_device_v1 dev;
    phx_kernels_v1 kernels;
    uint32_t minor; /* the plugin's descriptor minor */
    const char *name; /* "cpu", "cuda" */
} px_devtab;

static px_devtab px_cpu_tab, px_cuda_tab;

static phx_status dflt_host_alloc(int dev, size_t bytes, void **ptr)
{
    (void)dev;
    *ptr = px_malloc(bytes ? bytes : 1);
    return *ptr ? PHX_OK : phx_error(PHX_ENOMEM, "host_alloc: %zu bytes: out of memory", bytes);
}
static void dflt_host_release(int dev, void *ptr)
{
    (void)dev;
    px_free(ptr);
}
static phx_status dflt_stream_create(int dev, void **stream)
{
    (void)dev;
    *stream = NULL;
    return PHX_OK;
}
static void dflt_stream_destroy(int dev, void *stream)
{
    (void)dev, (void)stream;
}
/* copy_h2d_async's default is the same table's copy_h2d: one per table. */
static phx_status dflt_h2d_async_cpu(int dev, void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    return px_cpu_tab.dev.copy_h2d(dev, dst, src, bytes);
}
static phx_status dflt_h2d_async_cuda(int dev, void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    return px_cuda_tab.dev.copy_h2d(dev, dst, src, bytes);
}

static phx_status devtab_fill(px_devtab *t, const phx_device_v1 *src, uint32_t minor, const char *name, int kind)
{
    static const char who[] = "device";
    phx_status st;
    t->minor = minor;
    t->name = name;
    if (!src) return phx_error(PHX_EABI, "%s: device plugin '%s' has no vtable", who, name);
    if ((st = px_abi_adapt(&px_device_abi, src, minor, &t->dev, who, "device", name))) return st;
    if (t->dev.kind != kind)
        return phx_error(PHX_EABI, "%s: device plugin '%s' says its kind is %d, expected %d", who, name, t->dev.kind,
                         kind);
    if ((st = px_abi_adapt(&px_kernels_abi, t->dev.kernels, minor, &t->kernels, who, "device", name))) return st;
    t->dev.kernels = &t->kernels;
    int events = !!t->dev.event_create + !!t->dev.event_record + !!t->dev.stream_wait_event +
        !!t->dev.event_synchronize + !!t->dev.event_query + !!t->dev.event_destroy;
    if (events != 0 && events != 6)
        return phx_error(PHX_EABI,
                         "%s: device plugin '%s' sets %d of the 6 event slots of phx_device_v1: "
                         "expected all or none",
                         who, name, events);
    int host = !!t->dev.host_alloc + !!t->dev.host_release;
    int async = !!t->dev.stream_create + !!t->dev.stream_destroy + !!t->dev.copy_h2d_async;
    if (host == 1 || async == 1 || async == 2)
        return phx_error(PHX_EABI, "%s: device plugin '%s' sets %s of phx_device_v1: expected %s or none", who, name,
                         host == 1 ? "one of host_alloc and host_release"
                                   : "some of stream_create, stream_destroy and copy_h2d_async",
                         host == 1 ? "both" : "all three");
    if (!host) {
        t->dev.host_alloc = dflt_host_alloc;
        t->dev.host_release = dflt_host_release;
    }
    if (!async) {
        t->dev.stream_create = dflt_stream_create;
        t->dev.stream_destroy = dflt_stream_destroy;
        t->dev.copy_h2d_async = kind == PHX_DEVICE_CUDA ? dflt_h2d_async_cuda : dflt_h2d_async_cpu;
    }
    if (!t->dev.memory_stats) t->dev.memory_stats = dflt_memory_stats;
    if (!t->dev.synchronize) t->dev.synchronize = dflt_synchronize;
    if (!t->dev.current_stream) t->dev.current_stream = dflt_current_stream;
    if (!events) {
        t->dev.event_create = dflt_event_create;
        t->dev.event_record = dflt_event_record;
        t->dev.stream_wait_event = dflt_stream_wait_event;
        t->dev.event_synchronize = dflt_event_synchronize;
        t->dev.event_query = dflt_event_query;
        t->dev.event_destroy = dflt_event_destroy;
    }
    return PHX_OK;
}

/* The built-in CPU device, checked as a plugin of the current minor. */
static phx_status px_cpu_status;
static pthread_once_t px_cpu_once = PTHREAD_ONCE_INIT;

/* ---- the cuda plugin, loaded at most once per process ---- */

static pthread_once_t px_cuda_once = PTHREAD_ONCE_INIT;
static const phx_device_v1 *px_cuda_table;
static int px_cuda_count;
static phx_status px_cuda_status;
static char px_cuda_error[1024];

static void cuda_load(void)
{
    phx_probe_ctx ctx = {0, 1, 0};
    /* an invalid variable fails device selection itself (default_cuda) */
    if (px_world_local(&ctx.local_rank, &ctx.local_size) != PHX_OK) phx_error_clear();
    const phx_plugin_desc *desc = NULL;
    phx_status st = phx_plugin_load(PHX_PLUGIN_DEVICE, "cuda", &ctx, &desc);
    if (st == PHX_OK) st = devtab_fill(&px_cuda_tab, desc->vtable, desc->abi_minor, "cuda", PHX_DEVICE_CUDA);
    if (st == PHX_OK) {
        px_cuda_count = px_cuda_tab.dev.count();
        px_cuda_table = &px_cuda_tab.dev;
        return;
    }
    px_cuda_status = st;
    snprintf(px_cuda_error, sizeof px_cuda_error, "%s", phx_last_error());
}

/* The cuda table without checking an index; NULL with the load error. */
static const phx_device_v1 *cuda_dev(void)
{
    pthread_once(&px_cuda_once, cuda_load);
    if (!px_cuda_table) phx_error(px_cuda_status, "%s", px_cuda_error);
    return px_cuda_table;
}

static void cpu_init(void)
{
    px_threads_blas_sync();
    px_cpu_status = devtab_fill(&px_cpu_tab, &px_cpu_device, PHX_PLUGIN_ABI_MINOR, "cpu", PHX_DEVICE_CPU);
    if (px_cpu_status) phx_log(PHX_LOG_ERROR, "%s", phx_last_error()); /* a bug of this build */
}

/* ---- tables ---- */

static phx_status table_of(phx_device d, const phx_device_v1 **out)
{
    *out = NULL;
    if (d.kind == PHX_DEVICE_CPU) {
        if (d.index != 0)
            return phx_error(PHX_ENOTFOUND, "device cpu:%d: no such device, expected cpu (index 0)", d.index);
        pthread_once(&px_cpu_once, cpu_init);
        if (px_cpu_status) return phx_error(px_cpu_status, "device cpu: its table is incomplete (see the log)");
        *out = &px_cpu_tab.dev;
        return PHX_OK;
    }
    if (d.kind == PHX_DEVICE_CUDA) {
        const phx_device_v1 *t = cuda_dev();
        if (!t) return px_cuda_status;
        if (d.index < 0 || d.index >= px_cuda_count)
            return phx_error(PHX_ENOTFOUND, "device cuda:%d: no such device (%d CUDA device%s)", d.index, px_cuda_count,
                             px_cuda_count == 1 ? "" : "s");
        *out = t;
        return PHX_OK;
    }
    return phx_error(PHX_EINVAL, "device kind %d: expected cpu (%d) or cuda (%d)", d.kind, PHX_DEVICE_CPU,
                     PHX_DEVICE_CUDA);
}

const phx_device_v1 *phx_device_table(phx_device d)
{
    const phx_device_v1 *t;
    table_of(d, &t);
    return t;
}

const phx_kernels_v1 *px_device_kernels(phx_device d)
{
    const phx_device_v1 *t = phx_device_table(d);
    return t ? t->kernels : NULL;
}

phx_status px_kernel_missing(const char *who, phx_device d, const char *slot)
{
    char name[32];
    const px_devtab *t = d.kind == PHX_DEVICE_CUDA ? &px_cuda_tab : &px_cpu_tab;
    uint32_t since = px_abi_since(&px_kernels_abi, slot);
    phx_device_name(d, name, sizeof name);
    if (since == UINT32_MAX)
        return phx_error(PHX_EUNSUPPORTED,
                         "%s: the kernel table of device %s has no '%s' slot (its plugin has ABI %d.%u)", who, name,
                         slot, PHX_PLUGIN_ABI_MAJOR, t->minor);
    return phx_error(PHX_EUNSUPPORTED,
                     "%s: the kernel table of device %s has no '%s' slot: its plugin has ABI %d.%u, the slot came "
                     "with ABI %d.%u%s",
                     who, name, slot, PHX_PLUGIN_ABI_MAJOR, t->minor, PHX_PLUGIN_ABI_MAJOR, since,
                     since > t->minor ? " (rebuild the plugin against this Phalanx's headers)" : "");
}

/* ---- names ---- */

phx_status phx_device_parse(const char *name, phx_device *out)
{
    if (!name || !out) return phx_error(PHX_EINVAL, "phx_device_parse: NULL argument");
    phx_device d = {PHX_DEVICE_CPU, 0};
    const char *rest;
    if (strncmp(name, "cpu", 3) == 0) {
        rest = name + 3;
    } else if (strncmp(name, "cuda", 4) == 0) {
        d.kind = PHX_DEVICE_CUDA;
        rest = name + 4;
    } else {
        return phx_error(PHX_EINVAL, "device '%s': expected cpu, cuda or cuda:N", name);
    }
    if (*rest == ':') {
        rest++;
        if (!isdigit((unsigned char)*rest))
            return phx_error(PHX_EINVAL, "device '%s': expected a number after ':'", name);
        char *end;
        errno = 0;
        long idx = strtol(rest, &end, 10);
        if (errno || *end || idx > 0x7fffffff)
            return phx_error(PHX_EINVAL, "device '%s': expected cpu, cuda or cuda:N", name);
        d.index = (int)idx;
    } else if (*rest) {
        return phx_error(PHX_EINVAL, "device '%s': expected cpu, cuda or cuda:N", name);
    }
    const phx_device_v1 *t;
    phx_status st = table_of(d, &t);
    if (st != PHX_OK) return st;
    *out = d;
    return PHX_OK;
}

const char *phx_device_name(phx_device d, char *buf, size_t len)
{
    if (!buf || !len) return buf;
    if (d.kind == PHX_DEVICE_CPU)
        snprintf(buf, len, "cpu");
    else if (d.kind == PHX_DEVICE_CUDA)
        snprintf(buf, len, "cuda:%d", d.index);
    else
        snprintf(buf, len, "device%d:%d", d.kind, d.index);
    return buf;
}

/* cuda:LOCAL_RANK (shared round-robin when ranks outnumber GPUs), or
 * ENOTFOUND with why; PHX_EINVAL (and *bad_env set) when the launcher's
 * variables are invalid. */
static phx_status default_cuda(phx_device *out, int *bad_env)
{
    if (!cuda_dev()) return PHX_ENOTFOUND;
    if (px_cuda_count < 1) return phx_error(PHX_ENOTFOUND, "device cuda: no CUDA device");
    int lr;
    phx_status st = px_world_local(&lr, NULL);
    if (st != PHX_OK) {
        *bad_env = 1;
        return phx_error(st, "device cuda: %s", phx_last_error());
    }
    if (lr >= px_cuda_count)
        phx_log(PHX_LOG_INFO, "local rank %d shares cuda:%d (%d CUDA devices)", lr, lr % px_cuda_count, px_cuda_count);
    out->kind = PHX_DEVICE_CUDA;
    out->index = lr % px_cuda_count;
    return PHX_OK;
}

static phx_status device_default(const char *sel, phx_device *out)
{
    if (!sel || !*sel) {
        /* cuda when the plugin is there and sees a GPU, else cpu; an
         * invalid LOCAL_RANK is an error, not a reason to use the cpu */
        int bad_env = 0;
        phx_status st = default_cuda(out, &bad_env);
        if (st == PHX_OK || bad_env) return st;
        phx_log(PHX_LOG_INFO, "device cuda not used: %s", phx_last_error());
        phx_error_clear();
        *out = phx_cpu();
        return PHX_OK;
    }
    /* "cuda:1", or a list "cuda,cpu" (first usable wins), or exclusions
     * "^cuda" (the best remaining: cuda before cpu). */
    char buf[256], why[1024] = "";
    size_t sl = strlen(sel);
    /* as PHX_COMM and PHX_PRECISION: "cpu," is a typo, not a list */
    if (sel[0] == ',' || sel[sl - 1] == ',' || strstr(sel, ",,") || strstr(sel, "^,"))
        return phx_error(PHX_EINVAL,
                         "PHX_DEVICE='%s' has an empty entry (expected cpu, cuda, cuda:N, a list "
                         "'cuda,cpu' or exclusions '^cuda')",
                         sel);
    if (sl >= sizeof buf)
        return phx_error(PHX_EINVAL, "PHX_DEVICE='%.40s...' is longer than %zu characters", sel, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", sel);
    if (buf[0] == '^') {
        int no_cpu = 0, no_cuda = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            const char *n = tok[0] == '^' ? tok + 1 : tok;
            if (strcmp(n, "cpu") == 0)
                no_cpu = 1;
            else if (strcmp(n, "cuda") == 0)
                no_cuda = 1;
            else
                return phx_error(PHX_EINVAL, "PHX_DEVICE='%s': unknown device '%s', expected cpu or cuda", sel, n);
        }
        if (!no_cuda) {
            int bad_env = 0;
            phx_status st = default_cuda(out, &bad_env);
            if (st == PHX_OK || bad_env) return st;
            snprintf(why, sizeof why, "cuda: %s", phx_last_error());
        }
        if (!no_cpu) {
            phx_error_clear();
            *out = phx_cpu();
            return PHX_OK;
        }
        return phx_error(PHX_ENOTFOUND, "PHX_DEVICE='%s': no device left to use%s%s", sel, why[0] ? "; " : "", why);
    }
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        phx_status st;
        int bad_env = 0;
        if (strcmp(tok, "cuda") == 0)
            st = default_cuda(out, &bad_env);
        else
            st = phx_device_parse(tok, out);
        if (st == PHX_OK) {
            phx_error_clear();
            return PHX_OK;
        }
        if (st == PHX_EINVAL) return phx_error(PHX_EINVAL, "PHX_DEVICE='%s': %s", sel, phx_last_error());
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "%s%s: %s", used ? "; " : "", tok, phx_last_error());
    }
    return phx_error(PHX_ENOTFOUND, "PHX_DEVICE='%s' asked for a device that is not usable (%s)", sel, why);
}

phx_status phx_device_default(phx_device *out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_device_default: out is NULL");
    const char *sel = getenv("PHX_DEVICE");
    phx_status st = device_default(sel, out);
    if (st == PHX_OK && phx_log_get_level() >= PHX_LOG_INFO) {
        char name[32];
        phx_log(PHX_LOG_INFO, "device %s chosen (%s%s%s)", phx_device_name(*out, name, sizeof name),
                sel && *sel ? "PHX_DEVICE='" : "PHX_DEVICE unset: cuda when usable, else cpu", sel && *sel ? sel : "",
                sel && *sel ? "'" : "");
    }
    return st;
}

int phx_device_count(phx_device_kind kind)
{
    if (kind == PHX_DEVICE_CPU) return 1;
    if (kind == PHX_DEVICE_CUDA) {
        if (cuda_dev()) return px_cuda_count;
        phx_error_clear();
    }
    return 0;
}

phx_status phx_device_synchronize(phx_device d)
{
    const phx_device_v1 *t;
    phx_status st = table_of(d, &t);
    if (st != PHX_OK) return st;
    return t->synchronize(d.index);
}

phx_status phx_device_memory_stats(phx_device d, phx_memory_stats *out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_device_memory_stats: out is NULL");
    const phx_device_v1 *t;
    phx_device_memory_stats_v1 v = {0};
    phx_status st = table_of(d, &t);
    if (st == PHX_OK) st = t->memory_stats(d.index, &v);
    if (st != PHX_OK) return st;
    phx_memory_stats m = {sizeof m, v.in_use_bytes, v.cached_bytes, v.peak_bytes, v.alloc_calls};
    return px_abi_out(out, &m, sizeof m, "phx_device_memory_stats", "phx_memory_stats", "PHX_MEMORY_STATS_INIT");
}
