/* Checkpoints: a model's state_dict (parameters, then buffers; keys =
 * dotted names), the optimizer's
 * state ("optim.<param>.<state>", metadata "optim.steps"/"optim.type"),
 * the loss scaler ("scaler.scale", "scaler.growth_tracker") and user
 * metadata, in one safetensors file. Loading strips a "module." prefix
 * (what torch's DataParallel/DDP save) and checks the whole file against
 * the model before it changes anything. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "src/data/safetensors-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/precision/precision-impl.h"

#define OPT_PREFIX "optim."
#define DDP_PREFIX "module."

static char *joined(const char *a, const char *b)
{
    size_t len = strlen(a) + strlen(b) + 1;
    char *s = px_malloc(len);
    if (s) snprintf(s, len, "%s%s", a, b);
    return s;
}

/* The model's state_dict: parameters then buffers, names and tensors in
 * two arrays the caller frees; the count, or (size_t)-1 on ENOMEM. */
static size_t state_dict(phx_module *model, const char ***names, phx_tensor ***ts)
{
    size_t np = phx_module_num_params(model), nb = phx_module_num_buffers(model), n = np + nb;
    *names = px_calloc(n ? n : 1, sizeof **names);
    *ts = px_calloc(n ? n : 1, sizeof **ts);
    if (!*names || !*ts) {
        px_free(*names), px_free(*ts);
        *names = NULL, *ts = NULL;
        return (size_t)-1;
    }
    for (size_t i = 0; i < np; i++) {
        (*names)[i] = phx_module_param_name(model, i);
        (*ts)[i] = phx_param_value(phx_module_param(model, i));
    }
    for (size_t i = 0; i < nb; i++) {
        (*names)[np + i] = phx_module_buffer_name(model, i);
        (*ts)[np + i] = phx_module_buffer(model, i);
    }
    return n;
}

/* PHX_ESTATE when a parameter holds no memory: a model sharded by FSDP
 * between uses of its units. */
static phx_status check_resident(phx_module *model, const char *who)
{
    size_t np = phx_module_num_params(model);
    for (size_t i = 0; i < np; i++) {
        const phx_tensor *v = phx_param_value(phx_module_param(model, i));
        if (v->numel && !v->storage->data)
            return phx_error(PHX_ESTATE,
                             "%s: parameter '%s' holds no memory: the model is sharded (FSDP); call "
                             "phx_fsdp_gather_full first, or use phx_zero_checkpoint_save/_load",
                             who, phx_module_param_name(model, i));
    }
    return PHX_OK;
}

phx_status phx_checkpoint_save(const char *path, phx_module *model, phx_optimizer *opt, phx_scaler *scaler,
                               const phx_meta *meta, size_t n_meta)
{
    if (!path || !model || (n_meta && !meta))
        return phx_error(PHX_EINVAL, "phx_checkpoint_save: NULL %s", !path ? "path" : !model ? "model" : "metadata");
    if (opt && phx_optimizer_model(opt) != model)
        return phx_error(PHX_EINVAL, "phx_checkpoint_save: the optimizer belongs to another model");
    if (check_resident(model, "phx_checkpoint_save") != PHX_OK) return PHX_ESTATE;
    const char **mnames = NULL;
    phx_tensor **mts = NULL;
    size_t np = state_dict(model, &mnames, &mts);
    if (np == (size_t)-1) return PHX_ENOMEM;
    const char **snames = NULL;
    phx_tensor **stens = NULL;
    size_t ns = opt ? phx_optimizer_state(opt, &snames, &stens) : 0;
    size_t n = np + ns, nm = n_meta + 6;
    const char **names = px_calloc(n ? n : 1, sizeof *names);
    phx_tensor **ts = px_calloc(n ? n : 1, sizeof *ts);
    phx_meta *all = px_calloc(nm, sizeof *all);
    char **owned = px_calloc(ns ? ns : 1, sizeof *owned);
    char steps[32], scale[40], tracker[32];
    phx_status st = PHX_OK;
    if (!names || !ts || !all || !owned) {
        st = PHX_ENOMEM;
        goto out;
    }
    memcpy(names, mnames, np * sizeof *names);
    memcpy(ts, mts, np * sizeof *ts);
    for (size_t i = 0; i < ns; i++) {
        if (!(owned[i] = joined(OPT_PREFIX, snames[i]))) {
            st = PHX_ENOMEM;
            goto out;
        }
        names[np + i] = owned[i];
        ts[np + i] = stens[i];
    }
    size_t k = 0;
    for (size_t i = 0; i < n_meta; i++) {
        if (meta[i].key &&
            (strncmp(meta[i].key, OPT_PREFIX, strlen(OPT_PREFIX)) == 0 || strncmp(meta[i].key, "scaler.", 7) == 0)) {
            st = phx_error(PHX_EINVAL, "phx_checkpoint_save: metadata key '%s' is reserved (optim.*, scaler.*)",
                           meta[i].key);
            goto out;
        }
        all[k++] = meta[i];
    }
    if (opt) {
        snprintf(steps, sizeof steps, "%" PRId64, phx_optimizer_steps(opt));
        all[k++] = (phx_meta){"optim.steps", steps};
        all[k++] = (phx_meta){"optim.type", phx_optimizer_type(opt)};
    }
    if (scaler) {
        snprintf(scale, sizeof scale, "%.17g", phx_scaler_get_scale(scaler));
        snprintf(tracker, sizeof tracker, "%" PRId64, phx_scaler_growth_tracker(scaler));
        all[k++] = (phx_meta){"scaler.scale", scale};
        all[k++] = (phx_meta){"scaler.growth_tracker", tracker};
        all[k++] = (phx_meta){"scaler.enabled", px_scaler_enabled(scaler) ? "1" : "0"};
    }
    st = phx_safetensors_write(path, names, ts, n, all, k);
out:
    for (size_t i = 0; owned && i < ns; i++) px_free(owned[i]);
    px_free(owned);
    px_free(names);
    px_free(ts);
    px_free(mnames);
    px_free(mts);
    px_free(all);
    return st;
}

phx_status phx_checkpoint_save_model(const char *path, phx_module *model)
{
    return phx_checkpoint_save(path, model, NULL, NULL, NULL, 0);
}

/* Every way a file fails to match the model, grouped as torch's
 * load_state_dict reports them, so that one failed load names all. */
enum { MM_MISSING, MM_UNEXPECTED, MM_SHAPE, MM_DTYPE, MM_TWICE, MM_META, MM_KINDS };

typedef struct mismatch_list {
    char text[600]; /* "item, item, ..." as far as it fits */
    size_t len;
    size_t n, shown;
} mismatch_list;

typedef struct mismatches {
    mismatch_list l[MM_KINDS];
    size_t total;
} mismatches;

static void mm_add(mismatches *m, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void mm_add(mismatches *m, int kind, const char *fmt, ...)
{
    mismatch_list *l = &m->l[kind];
    char item[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    m->total++;
    l->n++;
    const char *sep = l->n > 1 ? (kind == MM_MISSING || kind == MM_UNEXPECTED ? ", " : "; ") : "";
    size_t need = strlen(sep) + strlen(item);
    if (l->shown + 1 != l->n || l->len + need + 1 > sizeof l->text) return; /* counted, not shown */
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s", sep, item);
    l->shown++;
}

/* The one message naming every mismatch, or PHX_OK when there is none. */
static phx_status mm_report(const mismatches *m, const char *path)
{
    if (m->total == 0) return PHX_OK;
    static const char *const heads[MM_KINDS] = {
        "missing keys (the model's, absent from the file)",
        "unexpected keys (in the file; no parameter or buffer of the model, or no state of the optimizer)",
        "shape mismatches",
        "dtype mismatches (floating-point dtypes convert into each other, integer ones must match)",
        "held twice",
        "metadata",
    };
    char msg[3800];
    size_t len = 0;
    for (int k = 0; k < MM_KINDS; k++) {
        const mismatch_list *l = &m->l[k];
        if (!l->n) continue;
        char more[48] = "";
        if (l->shown < l->n) snprintf(more, sizeof more, " (and %zu more)", l->n - l->shown);
        int w = snprintf(msg + len, sizeof msg - len, "%s%s: %s%s", len ? "; " : "", heads[k], l->text, more);
        if (w > 0) len += (size_t)w < sizeof msg - len ? (size_t)w : sizeof msg - len - 1;
    }
    return phx_error(PHX_EIO,
                     "phx_checkpoint_load: '%s' does not match the model, nothing was loaded (%zu problem%s): %s", path,
                     m->total, m->total > 1 ? "s" : "", msg);
}

/* e may fill slot *slot for `what` named key: a dtype that converts into
 * the tensor's and the same shape. Records what does not match. */
static void check_entry(mismatches *mm, const px_st_entry *e, const char *key, const phx_tensor *t, const char *what,
                        const px_st_entry **slot)
{
    char a[64], b[64];
    if (*slot) {
        mm_add(mm, MM_TWICE, "tensors '%s' and '%s' both hold %s '%s'", (*slot)->name, e->name, what, key);
        return;
    }
    if (!px_st_convertible(e->dtype, t->dtype)) {
        mm_add(mm, MM_DTYPE, "tensor '%s' has dtype %s, %s '%s' is %s", e->name, px_st_dtype_name(e->dtype), what, key,
               px_st_dtype_name(t->dtype));
    }
    bool same = e->ndim == t->ndim;
    for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t->shape[d];
    if (!same) {
        mm_add(mm, MM_SHAPE, "tensor '%s' has shape %s, %s '%s' has shape %s", e->name,
               px_shape_str(e->ndim, e->shape, a, sizeof a), what, key, phx_tensor_shape_str(t, b, sizeof b));
    }
    *slot = e; /* matched: not missing, even when it mismatches */
}

/* A decimal integer >= 0 as the writer prints it: digits only (strtoll
 * alone takes a leading space or sign). */
static bool parse_i64(const char *s, int64_t *out)
{
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < 0) return false;
    *out = v;
    return true;
}

typedef struct plan {
    const char **names; /* the model's state_dict */
    phx_tensor **ts;
    const px_st_entry **model; /* per state_dict entry */
    const px_st_entry **state; /* per optimizer state tensor */
    int64_t steps;
    double scale;
    int64_t tracker;
} plan;

/* Matches every entry of f to the model / optimizer and checks every
 * condition, collecting every mismatch; fills p. Changes nothing. */
static phx_status make_plan(px_st_file *f, phx_module *model, phx_optimizer *opt, phx_scaler *scaler, size_t np,
                            const char **snames, phx_tensor **stens, size_t ns, plan *p)
{
    size_t n_params = phx_module_num_params(model);
    mismatches *mm = px_calloc(1, sizeof *mm);
    if (!mm) return PHX_ENOMEM;
    for (size_t i = 0; i < f->n; i++) {
        const px_st_entry *e = &f->e[i];
        const char *key = e->name;
        if (strncmp(key, OPT_PREFIX, strlen(OPT_PREFIX)) == 0) {
            if (!opt) continue; /* a full checkpoint loads into a bare model too */
            const char *sk = key + strlen(OPT_PREFIX);
            size_t j = 0;
            while (j < ns && strcmp(snames[j], sk) != 0) j++;
            if (j == ns)
                mm_add(mm, MM_UNEXPECTED, "'%s' (no state of the %s optimizer)", key, phx_optimizer_type(opt));
            else
                check_entry(mm, e, sk, stens[j], "optimizer state", &p->state[j]);
            continue;
        }
        if (strncmp(key, DDP_PREFIX, strlen(DDP_PREFIX)) == 0) key += strlen(DDP_PREFIX);
        size_t j = 0;
        while (j < np && strcmp(p->names[j], key) != 0) j++;
        if (j == np)
            mm_add(mm, MM_UNEXPECTED, "'%s'", e->name);
        else
            check_entry(mm, e, key, p->ts[j], j < n_params ? "parameter" : "buffer", &p->model[j]);
    }
    for (size_t j = 0; j < np; j++)
        if (!p->model[j]) mm_add(mm, MM_MISSING, "%s '%s'", j < n_params ? "parameter" : "buffer", p->names[j]);
    if (opt) {
        for (size_t j = 0; j < ns; j++)
            if (!p->state[j]) mm_add(mm, MM_MISSING, "optimizer state 'optim.%s'", snames[j]);
        const char *s = px_st_meta(f, "optim.steps"), *type = px_st_meta(f, "optim.type");
        if (!parse_i64(s, &p->steps))
            mm_add(mm, MM_META, "optim.steps is %s%s%s, expected an integer >= 0", s ? "'" : "", s ? s : "missing",
                   s ? "'" : "");
        if (!type || strcmp(type, phx_optimizer_type(opt)) != 0)
            mm_add(mm, MM_META, "optim.type is %s%s%s: the state of another optimizer than this %s", type ? "'" : "",
                   type ? type : "missing", type ? "'" : "", phx_optimizer_type(opt));
    }
    if (scaler) {
        const char *s = px_st_meta(f, "scaler.scale"), *g = px_st_meta(f, "scaler.growth_tracker");
        char *end = NULL;
        p->scale = s ? strtod(s, &end) : 0.0;
        char why[160];
        if (!s || *end || *s < '0' || *s > '9' || strpbrk(s, "xX") || !(p->scale > 0.0) || isinf(p->scale) ||
            !parse_i64(g, &p->tracker))
            mm_add(mm, MM_META,
                   "scaler.scale '%s' / scaler.growth_tracker '%s' missing or invalid (need a finite scale > 0 and "
                   "an integer >= 0)",
                   s ? s : "(none)", g ? g : "(none)");
        else if (px_scaler_check_state(scaler, p->scale, p->tracker, why, sizeof why))
            mm_add(mm, MM_META, "scaler.scale '%s' / scaler.growth_tracker '%s': %s", s, g, why);
        /* files of earlier builds have no scaler.enabled */
        const char *en = px_st_meta(f, "scaler.enabled");
        if (en && strcmp(en, "0") != 0 && strcmp(en, "1") != 0)
            mm_add(mm, MM_META, "scaler.enabled is '%s', expected 0 or 1", en);
        else if (en && *en == '0' && px_scaler_enabled(scaler))
            mm_add(mm, MM_META, "%s", PX_SCALER_DISABLED_STATE);
    }
    phx_status st = mm_report(mm, f->path);
    px_free(mm);
    return st;
}

phx_status phx_checkpoint_load(const char *path, phx_module *model, phx_optimizer *opt, phx_scaler *scaler)
{
    if (!path || !model) return phx_error(PHX_EINVAL, "phx_checkpoint_load: NULL %s", path ? "model" : "path");
    if (opt && phx_optimizer_model(opt) != model)
        return phx_error(PHX_EINVAL, "phx_checkpoint_load: the optimizer belongs to another model");
    if (check_resident(model, "phx_checkpoint_load") != PHX_OK) return PHX_ESTATE;
    px_st_file f;
    phx_status st = px_st_open("phx_checkpoint_load", path, &f);
    if (st != PHX_OK) return st;
    plan p = {0};
    size_t np = state_dict(model, &p.names, &p.ts), n_params = phx_module_num_params(model);
    const char **snames = NULL;
    phx_tensor **stens = NULL;
    size_t ns = opt ? phx_optimizer_state(opt, &snames, &stens) : 0;
    p.model = np == (size_t)-1 ? NULL : px_calloc(np ? np : 1, sizeof *p.model);
    p.state = px_calloc(ns ? ns : 1, sizeof *p.state);
    if (!p.model || !p.state)
        st = PHX_ENOMEM;
    else
        st = make_plan(&f, model, opt, scaler, np, snames, stens, ns, &p);
    /* Everything checked: now change things. */
    for (size_t j = 0; st == PHX_OK && j < np; j++) {
        st = px_st_load_into(&f, p.model[j], p.ts[j]);
        if (j < n_params) phx_param_touch(phx_module_param(model, j));
    }
    for (size_t j = 0; st == PHX_OK && j < ns; j++) st = px_st_load_into(&f, p.state[j], stens[j]);
    if (st == PHX_OK && opt) phx_optimizer_set_steps(opt, p.steps);
    if (st == PHX_OK && scaler) st = phx_scaler_set_state(scaler, p.scale, p.tracker);
    px_free(p.model);
    px_free(p.state);
    px_free(p.names);
    px_free(p.ts);
    px_st_close(&f);
    return st;
}

phx_status phx_checkpoint_meta(const char *path, const char *key, char *buf, size_t len)
{
    if (!key || !buf || len == 0) return phx_error(PHX_EINVAL, "phx_checkpoint_meta: NULL key or empty buffer");
    px_st_file f;
    phx_status st = px_st_open_header("phx_checkpoint_meta", path, &f);
    if (st != PHX_OK) return st;
    const char *v = px_st_meta(&f, key);
    if (!v)
        st = phx_error(PHX_ENOTFOUND, "phx_checkpoint_meta: '%s' has no metadata key '%s'", path, key);
    else if (strlen(v) >= len)
        st = phx_error(PHX_EINVAL, "phx_checkpoint_meta: value of '%s' needs %zu bytes, buffer has %zu", key,
                       strlen(v) + 1, len);
    else
        memcpy(buf, v, strlen(v) + 1);
    px_st_close(&f);
    return st;
}
