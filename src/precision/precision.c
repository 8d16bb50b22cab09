/* Precision policies: a phx_precision is a loaded policy plugin (fp32,
 * fp16, bf16 or a user's) whose data-only vtable names the compute dtype
 * and the loss-scaling defaults. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/precision.h"
#include "phalanx/plugin.h"
#include "phalanx/plugin/precision_v1.h"
#include "src/base/util.h"
#include "src/precision/precision-impl.h"

struct phx_precision {
    const phx_plugin_desc *desc; /* lives as long as the process */
    const phx_precision_v1 *vt;
};

/* Appends ", name" for every usable precision plugin on the search path
 * into buf (at most len bytes, NUL-terminated). */
static void list_policies(char *buf, size_t len)
{
    enum { MAX_FOUND = 64 };
    phx_plugin_info *infos = px_calloc(MAX_FOUND, sizeof *infos);
    size_t used = 0;
    buf[0] = '\0';
    if (!infos) return;
    infos[0].struct_size = sizeof *infos; /* the array's stride for phx_plugin_scan */
    phx_probe_ctx ctx = {0, 1, 0};
    size_t n = phx_plugin_scan(infos, MAX_FOUND, &ctx);
    if (n > MAX_FOUND) n = MAX_FOUND;
    for (size_t i = 0; i < n && used + 1 < len; i++) {
        if (strcmp(infos[i].kind, "precision") != 0 || !infos[i].ok) continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", infos[i].name);
        if (w < 0) break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    px_free(infos);
    if (!used) snprintf(buf, len, "none");
}

/* A third-party policy could carry nonsense; reject it before use. */
static phx_status check_vtable(const phx_plugin_desc *d, const phx_precision_v1 *vt)
{
    if (!vt) return phx_error(PHX_EABI, "phx_precision_new: plugin '%s' has no vtable", d->name);
    if (vt->compute_dtype != PHX_F32 && vt->compute_dtype != PHX_F16 && vt->compute_dtype != PHX_BF16)
        return phx_error(PHX_EABI, "phx_precision_new: plugin '%s' has compute dtype %d, expected f32, f16 or bf16",
                         d->name, (int)vt->compute_dtype);
    if (vt->loss_scaling != 0 && vt->loss_scaling != 1)
        return phx_error(PHX_EABI, "phx_precision_new: plugin '%s' has loss_scaling %d, expected 0 or 1", d->name,
                         vt->loss_scaling);
    if (vt->loss_scaling &&
        (!(vt->init_scale > 0) || !isfinite(vt->init_scale) || !(vt->growth_factor > 1.0) ||
         !isfinite(vt->growth_factor) || !(vt->backoff_factor > 0) || !(vt->backoff_factor < 1.0) ||
         vt->growth_interval < 1))
        return phx_error(PHX_EABI,
                         "phx_precision_new: plugin '%s' has scaler defaults init %g, growth %g, backoff %g, "
                         "interval %d; expected init > 0, growth > 1, 0 < backoff < 1, interval >= 1",
                         d->name, vt->init_scale, vt->growth_factor, vt->backoff_factor, vt->growth_interval);
    return PHX_OK;
}

phx_status phx_precision_new(const char *name, phx_precision **out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_precision_new: out is NULL");
    *out = NULL;
    const char *from = "name";
    const char *sel = name;
    if (!sel) {
        sel = getenv("PHX_PRECISION");
        from = "PHX_PRECISION";
    }
    if (!sel || !*sel) {
        sel = "fp32";
        from = "default";
    }

    phx_probe_ctx ctx = {0, 1, 0};
    const phx_plugin_desc *d = NULL;
    phx_status st = phx_plugin_load(PHX_PLUGIN_PRECISION, sel, &ctx, &d);
    if (st != PHX_OK) {
        /* Keep the loader's explanation, but lead with the policies one
         * could have asked for. */
        char why[1536], avail[512];
        snprintf(why, sizeof why, "%s", phx_last_error());
        list_policies(avail, sizeof avail);
        return phx_error(st == PHX_EABI ? PHX_EABI : PHX_ENOTFOUND,
                         "phx_precision_new: no usable precision policy '%s' (%s); available policies: %s (%s)", sel,
                         from, avail, why);
    }
    st = check_vtable(d, d->vtable);
    if (st != PHX_OK) return st;
    phx_precision *p = px_calloc(1, sizeof *p);
    if (!p) return PHX_ENOMEM;
    p->desc = d;
    p->vt = d->vtable;
    *out = p;
    return PHX_OK;
}

void phx_precision_free(phx_precision *p)
{
    px_free(p);
}

const char *phx_precision_name(const phx_precision *p)
{
    return p ? p->desc->name : "fp32";
}

phx_dtype phx_precision_dtype(const phx_precision *p)
{
    return p ? p->vt->compute_dtype : PHX_F32;
}

bool phx_precision_scaling(const phx_precision *p)
{
    return p && p->vt->loss_scaling;
}

/* The policy's scaler defaults (src/precision/scaler.c); fp32 values for NULL. */
void px_precision_scaler_defaults(const phx_precision *p, phx_scaler_opts *o)
{
    o->init_scale = p ? p->vt->init_scale : 65536.0;
    o->growth_factor = p ? p->vt->growth_factor : 2.0;
    o->backoff_factor = p ? p->vt->backoff_factor : 0.5;
    o->growth_interval = p ? p->vt->growth_interval : 2000;
}
