/* The 1.0 entry points: the functions whose structs gained their leading
 * struct_size keep their 1.0 behaviour under the symbol version
 * PHALANX_1.0, which programs linked against the 1.0 library (built
 * without symbol versions) bind to. A 1.0 struct is today's struct less
 * its leading size_t: fields were only ever appended after it, so the
 * 1.0 bytes sit at offset sizeof(size_t) of today's struct. */
#include <string.h>
#include "src/base/abi.h"
#include "src/base/util.h"
#include "src/data/dataset-impl.h"
#include "src/modules/module-impl.h"
#include "src/train/optim-impl.h"
#include "phalanx/phalanx.h"
#include "phalanx/plugin.h"

#define PX_V10(fn) __asm__(".symver px10_" #fn ", phx_" #fn "@PHALANX_1.0")

/* The 1.0 sizes (sizeof of the 1.0 headers' structs on LP64). */
enum {
    V10_COMM_OPTS = 64,
    V10_WORLD = 276,
    V10_LOADER_OPTS = 104,
    V10_DDP_OPTS = 24,
    V10_DDP_STATS = 56,
    V10_SGD_OPTS = 40,
    V10_ADAM_OPTS = 48,
    V10_SCALER_OPTS = 32,
    V10_SCHEDULE_OPTS = 64,
    V10_GPT_CONFIG = 64,
    V10_CONV2D_OPTS = 64,
    V10_MEMORY_STATS = 32,
    V10_PLUGIN_INFO = 4768,
    V10_MODULE_VTABLE = 48,
    V10_OPTIMIZER_VTABLE = 32,
    V10_DATASET_VTABLE = 32,
};
#define PRE sizeof(size_t)
_Static_assert(sizeof(phx_comm_opts) >= PRE + V10_COMM_OPTS && sizeof(phx_world) >= PRE + V10_WORLD &&
                   sizeof(phx_loader_opts) >= PRE + V10_LOADER_OPTS && sizeof(phx_ddp_opts) >= PRE + V10_DDP_OPTS &&
                   sizeof(phx_ddp_stats) >= PRE + V10_DDP_STATS && sizeof(phx_sgd_opts) >= PRE + V10_SGD_OPTS &&
                   sizeof(phx_adam_opts) >= PRE + V10_ADAM_OPTS && sizeof(phx_scaler_opts) >= PRE + V10_SCALER_OPTS &&
                   sizeof(phx_schedule_opts) >= PRE + V10_SCHEDULE_OPTS &&
                   sizeof(phx_gpt_config) >= PRE + V10_GPT_CONFIG && sizeof(phx_conv2d_opts) >= PRE + V10_CONV2D_OPTS &&
                   sizeof(phx_memory_stats) >= PRE + V10_MEMORY_STATS &&
                   sizeof(phx_plugin_info) >= PRE + V10_PLUGIN_INFO &&
                   sizeof(phx_module_vtable) >= PRE + V10_MODULE_VTABLE &&
                   sizeof(phx_optimizer_vtable) >= PRE + V10_OPTIMIZER_VTABLE &&
                   sizeof(phx_dataset_vtable) >= PRE + V10_DATASET_VTABLE,
               "a 1.0 struct fits today's after its struct_size");

/* The 1.0 structs returned by value: opaque bytes of the 1.0 size (all
 * are over 16 bytes, so returned in memory like the originals). */
typedef struct v10_comm_opts {
    unsigned char b[V10_COMM_OPTS];
} v10_comm_opts;
typedef struct v10_sgd_opts {
    unsigned char b[V10_SGD_OPTS];
} v10_sgd_opts;
typedef struct v10_adam_opts {
    unsigned char b[V10_ADAM_OPTS];
} v10_adam_opts;
typedef struct v10_gpt_config {
    unsigned char b[V10_GPT_CONFIG];
} v10_gpt_config;
typedef struct v10_conv2d_opts {
    unsigned char b[V10_CONV2D_OPTS];
} v10_conv2d_opts;

/* A 1.0 input struct (NULL stays NULL) as today's, in *own. */
static const void *up(void *own, size_t own_size, const void *old, size_t old_size)
{
    if (!old) return NULL;
    memset(own, 0, own_size);
    memcpy(own, &own_size, PRE);
    memcpy((unsigned char *)own + PRE, old, old_size);
    return own;
}
#define UP(type, old, size) ((const type *)up(&(type){0}, sizeof(type), old, size))

/* Today's struct's fields as 1.0 bytes. */
static void down(void *old, const void *own, size_t old_size)
{
    memcpy(old, (const unsigned char *)own + PRE, old_size);
}

/* ---- options in ---- */

phx_status px10_comm_init(const void *o, phx_comm **out);
PX_V10(comm_init);
phx_status px10_comm_init(const void *o, phx_comm **out)
{
    /* 1.0's "both < 0: from the environment" is today's size <= 0; 1.0's
     * local_rank < 0 with a local_size meant the global rank. */
    const phx_comm_opts *n = UP(phx_comm_opts, o, V10_COMM_OPTS);
    if (n && n->local_size >= 1 && n->local_rank < 0) {
        phx_comm_opts *m = (phx_comm_opts *)n;
        m->local_rank = m->rank;
    }
    return phx_comm_init(n, out);
}

phx_loader *px10_loader_new_opts(phx_dataset *ds, const void *o);
PX_V10(loader_new_opts);
phx_loader *px10_loader_new_opts(phx_dataset *ds, const void *o)
{
    return phx_loader_new_opts(ds, UP(phx_loader_opts, o, V10_LOADER_OPTS));
}

phx_module *px10_ddp_new(phx_module *model, phx_comm *comm, const void *o);
PX_V10(ddp_new);
phx_module *px10_ddp_new(phx_module *model, phx_comm *comm, const void *o)
{
    return phx_ddp_new(model, comm, UP(phx_ddp_opts, o, V10_DDP_OPTS));
}

phx_optimizer *px10_sgd_new(phx_module *model, const void *o);
PX_V10(sgd_new);
phx_optimizer *px10_sgd_new(phx_module *model, const void *o)
{
    return phx_sgd_new(model, UP(phx_sgd_opts, o, V10_SGD_OPTS));
}

phx_optimizer *px10_adam_new(phx_module *model, const void *o);
PX_V10(adam_new);
phx_optimizer *px10_adam_new(phx_module *model, const void *o)
{
    return phx_adam_new(model, UP(phx_adam_opts, o, V10_ADAM_OPTS));
}

phx_scaler *px10_scaler_new(const phx_precision *p, const void *o);
PX_V10(scaler_new);
phx_scaler *px10_scaler_new(const phx_precision *p, const void *o)
{
    return phx_scaler_new(p, UP(phx_scaler_opts, o, V10_SCALER_OPTS));
}

phx_schedule *px10_schedule_new(phx_optimizer *opt, const void *o);
PX_V10(schedule_new);
phx_schedule *px10_schedule_new(phx_optimizer *opt, const void *o)
{
    return phx_schedule_new(opt, UP(phx_schedule_opts, o, V10_SCHEDULE_OPTS));
}

phx_module *px10_gpt_new(const void *cfg, phx_rng *rng);
PX_V10(gpt_new);
phx_module *px10_gpt_new(const void *cfg, phx_rng *rng)
{
    return phx_gpt_new(UP(phx_gpt_config, cfg, V10_GPT_CONFIG), rng);
}

phx_module *px10_conv2d_new(int64_t in, int64_t out, int64_t kh, int64_t kw, const void *o, phx_rng *rng);
PX_V10(conv2d_new);
phx_module *px10_conv2d_new(int64_t in, int64_t out, int64_t kh, int64_t kw, const void *o, phx_rng *rng)
{
    return phx_conv2d_new(in, out, kh, kw, UP(phx_conv2d_opts, o, V10_CONV2D_OPTS), rng);
}

/* ---- defaults returned by value ---- */

#define V10_DEFAULTS(fn, type, vtype, size) \
    vtype px10_##fn(void); \
    PX_V10(fn); \
    vtype px10_##fn(void) \
    { \
        type n = phx_##fn(); \
        vtype r; \
        down(&r, &n, size); \
        return r; \
    }

/* 1.0 said "from the environment" with -1 in rank, size and the local
 * pair; today's zero means the same. */
v10_comm_opts px10_comm_opts_default(void);
PX_V10(comm_opts_default);
v10_comm_opts px10_comm_opts_default(void)
{
    phx_comm_opts n = PHX_COMM_OPTS_INIT;
    n.rank = n.size = n.local_rank = n.local_size = -1;
    v10_comm_opts r;
    down(&r, &n, V10_COMM_OPTS);
    return r;
}
V10_DEFAULTS(sgd_defaults, phx_sgd_opts, v10_sgd_opts, V10_SGD_OPTS)
V10_DEFAULTS(adam_defaults, phx_adam_opts, v10_adam_opts, V10_ADAM_OPTS)
V10_DEFAULTS(adamw_defaults, phx_adam_opts, v10_adam_opts, V10_ADAM_OPTS)
V10_DEFAULTS(gpt_defaults, phx_gpt_config, v10_gpt_config, V10_GPT_CONFIG)
V10_DEFAULTS(conv2d_opts_default, phx_conv2d_opts, v10_conv2d_opts, V10_CONV2D_OPTS)

/* ---- outputs ---- */

phx_status px10_world_from_env(void *out);
PX_V10(world_from_env);
phx_status px10_world_from_env(void *out)
{
    phx_world w = PHX_WORLD_INIT;
    phx_status st = phx_world_from_env(out ? &w : NULL);
    if (st == PHX_OK) down(out, &w, V10_WORLD);
    return st;
}

phx_status px10_ddp_get_stats(phx_module *ddp, void *out);
PX_V10(ddp_get_stats);
phx_status px10_ddp_get_stats(phx_module *ddp, void *out)
{
    phx_ddp_stats s = PHX_DDP_STATS_INIT;
    phx_status st = phx_ddp_get_stats(ddp, out ? &s : NULL);
    if (st == PHX_OK) down(out, &s, V10_DDP_STATS);
    return st;
}

phx_status px10_device_memory_stats(phx_device d, void *out);
PX_V10(device_memory_stats);
phx_status px10_device_memory_stats(phx_device d, void *out)
{
    phx_memory_stats s = PHX_MEMORY_STATS_INIT;
    phx_status st = phx_device_memory_stats(d, out ? &s : NULL);
    if (st == PHX_OK) down(out, &s, V10_MEMORY_STATS);
    return st;
}

size_t px10_plugin_scan(void *infos, size_t max, const phx_probe_ctx *ctx);
PX_V10(plugin_scan);
size_t px10_plugin_scan(void *infos, size_t max, const phx_probe_ctx *ctx)
{
    if (!infos || !max) return phx_plugin_scan(NULL, 0, ctx);
    phx_plugin_info *all = px_calloc(max, sizeof *all);
    if (!all) return 0;
    all[0].struct_size = sizeof *all;
    size_t n = phx_plugin_scan(all, max, ctx);
    for (size_t i = 0; i < n && i < max; i++)
        down((unsigned char *)infos + i * V10_PLUGIN_INFO, &all[i], V10_PLUGIN_INFO);
    px_free(all);
    return n;
}

/* ---- user vtables: a 1.0 table is today's less its struct_size ---- */

phx_module *px10_module_new(const void *vt, void *ctx);
PX_V10(module_new);
phx_module *px10_module_new(const void *vt, void *ctx)
{
    phx_module_vtable own;
    return px_module_new_typed(up(&own, sizeof own, vt, V10_MODULE_VTABLE), vt, ctx);
}

phx_optimizer *px10_optimizer_new(const void *vt, void *ctx, phx_module *model);
PX_V10(optimizer_new);
phx_optimizer *px10_optimizer_new(const void *vt, void *ctx, phx_module *model)
{
    phx_optimizer_vtable own;
    return px_optimizer_new_adapted(up(&own, sizeof own, vt, V10_OPTIMIZER_VTABLE), ctx, model);
}

phx_dataset *px10_dataset_new(const void *vt, void *ctx, int64_t len, int n_fields, const phx_field *fields);
PX_V10(dataset_new);
phx_dataset *px10_dataset_new(const void *vt, void *ctx, int64_t len, int n_fields, const phx_field *fields)
{
    phx_dataset_vtable own;
    return px_dataset_new_adapted(up(&own, sizeof own, vt, V10_DATASET_VTABLE), ctx, len, n_fields, fields);
}
