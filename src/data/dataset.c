/* Datasets by callback (phalanx/dataset.h) and three built-in ones: rows
 * of in-memory tensors, IDX files decoded per sample, and byte-token
 * windows of a text file. */
#include <stdatomic.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "src/data/idx-impl.h"
#include "src/data/dataset-impl.h"
#include "src/base/abi.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/dataset.h"

struct phx_dataset {
    atomic_long refs;
    const phx_dataset_vtable *vt; /* &vtab */
    phx_dataset_vtable vtab; /* the author's table in this library's layout */
    void *ctx;
    int64_t len;
    int n_fields;
    phx_field fields[PHX_DATASET_MAX_FIELDS];
};

size_t phx_field_bytes(const phx_field *f)
{
    if (!f) return 0;
    size_t n = phx_dtype_size(f->dtype);
    for (int d = 0; d < f->ndim; d++) n *= (size_t)f->shape[d];
    return n;
}

phx_dataset *phx_dataset_new(const phx_dataset_vtable *vt, void *ctx, int64_t len, int n_fields,
                             const phx_field *fields)
{
    phx_dataset_vtable own;
    memset(&own, 0, sizeof own);
    if (vt && px_abi_in(&own, sizeof own, vt, "phx_dataset_new", "phx_dataset_vtable", "PHX_DATASET_VTABLE_SIZE"))
        return NULL;
    return px_dataset_new_adapted(vt ? &own : NULL, ctx, len, n_fields, fields);
}

phx_dataset *px_dataset_new_adapted(const phx_dataset_vtable *vt, void *ctx, int64_t len, int n_fields,
                                    const phx_field *fields)
{
    static const char who[] = "phx_dataset_new";
    if (!vt || !vt->get) {
        phx_error(PHX_EINVAL, "%s: the vtable %s (get is required)", who, vt ? "has no get" : "is NULL");
        return NULL;
    }
    const char *name = vt->type_name ? vt->type_name : "dataset";
    if (len < 0) {
        phx_error(PHX_EINVAL, "%s: %s has length %lld, expected >= 0", who, name, (long long)len);
        return NULL;
    }
    if (n_fields < 1 || n_fields > PHX_DATASET_MAX_FIELDS || !fields) {
        phx_error(PHX_EINVAL, "%s: %s has %d fields%s, expected 1 to %d", who, name, n_fields,
                  fields ? "" : " (fields is NULL)", PHX_DATASET_MAX_FIELDS);
        return NULL;
    }
    for (int f = 0; f < n_fields; f++) {
        const phx_field *fl = &fields[f];
        if (fl->ndim < 0 || fl->ndim > PHX_MAX_DIMS - 1) {
            phx_error(PHX_EINVAL, "%s: %s field %d has %d dims, expected 0 to %d (a batch adds one)", who, name, f,
                      fl->ndim, PHX_MAX_DIMS - 1);
            return NULL;
        }
        if (phx_dtype_size(fl->dtype) == 0) {
            phx_error(PHX_EINVAL, "%s: %s field %d has an unknown dtype %d", who, name, f, (int)fl->dtype);
            return NULL;
        }
        for (int d = 0; d < fl->ndim; d++)
            if (fl->shape[d] < 1) {
                phx_error(PHX_EINVAL, "%s: %s field %d has extent %lld in dim %d, expected >= 1", who, name, f,
                          (long long)fl->shape[d], d);
                return NULL;
            }
    }
    phx_dataset *ds = px_calloc(1, sizeof *ds);
    if (!ds) return NULL;
    atomic_init(&ds->refs, 1);
    ds->vtab = *vt;
    ds->vt = &ds->vtab;
    ds->ctx = ctx;
    ds->len = len;
    ds->n_fields = n_fields;
    memcpy(ds->fields, fields, (size_t)n_fields * sizeof *fields);
    return ds;
}

phx_dataset *phx_dataset_retain(phx_dataset *ds)
{
    if (ds) atomic_fetch_add(&ds->refs, 1);
    return ds;
}

void phx_dataset_free(phx_dataset *ds)
{
    if (!ds || atomic_fetch_sub(&ds->refs, 1) != 1) return;
    if (ds->vt->free) ds->vt->free(ds->ctx);
    px_free(ds);
}

int64_t phx_dataset_len(const phx_dataset *ds)
{
    return ds ? ds->len : 0;
}
int phx_dataset_num_fields(const phx_dataset *ds)
{
    return ds ? ds->n_fields : 0;
}

const phx_field *phx_dataset_field(const phx_dataset *ds, int f)
{
    return ds && f >= 0 && f < ds->n_fields ? &ds->fields[f] : NULL;
}

const char *phx_dataset_type(const phx_dataset *ds)
{
    return ds && ds->vt->type_name ? ds->vt->type_name : "dataset";
}

phx_status px_callback_status(phx_status st, const char *what)
{
    if (st == PHX_OK) return PHX_OK;
    bool known = st < PHX_OK && st >= PHX_EINTERNAL;
    char own[512];
    snprintf(own, sizeof own, "%s", phx_last_error());
    if (!known)
        return phx_error(PHX_EINVAL, "%s: returned %d, which is neither PHX_OK nor an error status (%s)", what, (int)st,
                         own[0] ? own : "it set no message");
    if (own[0]) return phx_error(st, "%s: %s", what, own);
    return phx_error(st, "%s: returned %s and set no message", what, phx_status_name(st));
}

/* get for sample i, its status as px_callback_status gives it. */
static phx_status get_one(phx_dataset *ds, int64_t i, void *const *out)
{
    phx_error_clear();
    phx_status st = ds->vt->get(ds->ctx, i, out);
    if (st == PHX_OK) return PHX_OK;
    char what[160];
    snprintf(what, sizeof what, "%s dataset: get of sample %lld", phx_dataset_type(ds), (long long)i);
    return px_callback_status(st, what);
}

phx_status phx_dataset_get(phx_dataset *ds, int64_t i, void *const *out)
{
    if (!ds || !out) return phx_error(PHX_EINVAL, "phx_dataset_get: %s is NULL", ds ? "out" : "the dataset");
    if (i < 0 || i >= ds->len)
        return phx_error(PHX_EINVAL, "phx_dataset_get: index %lld is outside [0, %lld) of %s", (long long)i,
                         (long long)ds->len, phx_dataset_type(ds));
    return get_one(ds, i, out);
}

phx_status phx_dataset_get_batch(phx_dataset *ds, const int64_t *idx, int64_t n, void *const *out)
{
    if (!ds || !out || (n > 0 && !idx))
        return phx_error(PHX_EINVAL, "phx_dataset_get_batch: %s is NULL", !ds ? "the dataset" : !out ? "out" : "idx");
    for (int64_t k = 0; k < n; k++)
        if (idx[k] < 0 || idx[k] >= ds->len)
            return phx_error(PHX_EINVAL, "phx_dataset_get_batch: idx[%lld] = %lld is outside [0, %lld) of %s",
                             (long long)k, (long long)idx[k], (long long)ds->len, phx_dataset_type(ds));
    if (ds->vt->get_batch) {
        phx_error_clear();
        phx_status st = ds->vt->get_batch(ds->ctx, idx, n, out);
        if (st == PHX_OK) return PHX_OK;
        char what[200];
        snprintf(what, sizeof what, "%s dataset: get_batch of %lld samples (sample %lld%s)", phx_dataset_type(ds),
                 (long long)n, n > 0 ? (long long)idx[0] : -1LL, n > 1 ? " first" : "");
        return px_callback_status(st, what);
    }
    void *row[PHX_DATASET_MAX_FIELDS];
    size_t bytes[PHX_DATASET_MAX_FIELDS];
    for (int f = 0; f < ds->n_fields; f++) bytes[f] = phx_field_bytes(&ds->fields[f]);
    for (int64_t k = 0; k < n; k++) {
        for (int f = 0; f < ds->n_fields; f++) row[f] = (char *)out[f] + (size_t)k * bytes[f];
        phx_status st = get_one(ds, idx[k], row);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* ---- rows of tensors -------------------------------------------------- */

typedef struct tensors_ctx {
    int n;
    phx_tensor *t[PHX_DATASET_MAX_FIELDS];
    size_t row[PHX_DATASET_MAX_FIELDS]; /* bytes per row */
} tensors_ctx;

static phx_status tensors_get(void *ctx, int64_t i, void *const *out)
{
    tensors_ctx *c = ctx;
    for (int f = 0; f < c->n; f++)
        memcpy(out[f], (const char *)px_tensor_ptr(c->t[f]) + (size_t)i * c->row[f], c->row[f]);
    return PHX_OK;
}

static phx_status tensors_get_batch(void *ctx, const int64_t *idx, int64_t n, void *const *out)
{
    tensors_ctx *c = ctx;
    for (int f = 0; f < c->n; f++) {
        const char *src = px_tensor_ptr(c->t[f]);
        char *dst = out[f];
        for (int64_t k = 0; k < n; k++)
            memcpy(dst + (size_t)k * c->row[f], src + (size_t)idx[k] * c->row[f], c->row[f]);
    }
    return PHX_OK;
}

static void tensors_free(void *ctx)
{
    tensors_ctx *c = ctx;
    for (int f = 0; f < c->n; f++) phx_tensor_free(c->t[f]);
    px_free(c);
}

static const phx_dataset_vtable tensors_vtable = {
    .struct_size = PHX_DATASET_VTABLE_SIZE,
    .type_name = "tensors",
    .get = tensors_get,
    .get_batch = tensors_get_batch,
    .free = tensors_free,
};

phx_dataset *phx_dataset_tensors(phx_tensor *const *t, int n)
{
    static const char who[] = "phx_dataset_tensors";
    char a[64], b[64];
    if (!t || n < 1 || n > PHX_DATASET_MAX_FIELDS) {
        phx_error(PHX_EINVAL, "%s: %d tensors%s, expected 1 to %d", who, n, t ? "" : " (NULL array)",
                  PHX_DATASET_MAX_FIELDS);
        return NULL;
    }
    phx_field fields[PHX_DATASET_MAX_FIELDS];
    for (int f = 0; f < n; f++) {
        if (!t[f]) {
            px_error_null(who, "a tensor");
            return NULL;
        }
        if (px_tensor_live(who, "a tensor", t[f]) != PHX_OK) return NULL;
        if (t[f]->storage->device.kind != PHX_DEVICE_CPU) {
            phx_error(PHX_EUNSUPPORTED, "%s: tensor %d is not on the CPU (the loader copies batches to the device)",
                      who, f);
            return NULL;
        }
        if (t[f]->ndim < 1 || t[f]->shape[0] != t[0]->shape[0]) {
            phx_error(PHX_EINVAL, "%s: tensor %d is %s, tensor 0 is %s: expected the same number of rows", who, f,
                      phx_tensor_shape_str(t[f], a, sizeof a), phx_tensor_shape_str(t[0], b, sizeof b));
            return NULL;
        }
        fields[f].dtype = t[f]->dtype;
        fields[f].ndim = t[f]->ndim - 1;
        memset(fields[f].shape, 0, sizeof fields[f].shape);
        for (int d = 1; d < t[f]->ndim; d++) fields[f].shape[d - 1] = t[f]->shape[d];
    }
    tensors_ctx *c = px_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n = n;
    for (int f = 0; f < n; f++) c->row[f] = phx_field_bytes(&fields[f]);
    phx_dataset *ds = phx_dataset_new(&tensors_vtable, c, t[0]->shape[0], n, fields);
    if (!ds) {
        px_free(c);
        return NULL;
    }
    for (int f = 0; f < n; f++) c->t[f] = phx_tensor_retain(t[f]);
    return ds;
}

/* ---- IDX files, decoded per sample ------------------------------------ */

typedef struct idx_ctx {
    uint8_t *img; /* (n, pixels) */
    uint8_t *lab; /* (n) or NULL */
    int64_t pixels;
} idx_ctx;

static phx_status idx_get(void *ctx, int64_t i, void *const *out)
{
    idx_ctx *c = ctx;
    const uint8_t *p = c->img + (size_t)i * (size_t)c->pixels;
    float *x = out[0];
    for (int64_t k = 0; k < c->pixels; k++) x[k] = (float)p[k] / 255.0f;
    if (c->lab) *(int64_t *)out[1] = c->lab[i];
    return PHX_OK;
}

static void idx_free(void *ctx)
{
    idx_ctx *c = ctx;
    px_free(c->img);
    px_free(c->lab);
    px_free(c);
}

static const phx_dataset_vtable idx_vtable = {
    .struct_size = PHX_DATASET_VTABLE_SIZE,
    .type_name = "idx",
    .get = idx_get,
    .free = idx_free,
};

/* The u8 data of an IDX file with want_nd dims (0: 2 or more). */
static phx_status idx_bytes(const char *path, int want_nd, uint8_t **out, int64_t *n, int64_t *per)
{
    static const char who[] = "phx_dataset_idx";
    px_zin *g;
    uint8_t type;
    int nd;
    int64_t dims[255], total;
    phx_status st = px_idx_open(who, path, &g, &type, &nd, dims, &total);
    if (st != PHX_OK) return st;
    if (type != 0x08 || (want_nd ? nd != want_nd : nd < 2))
        st = phx_error(PHX_EIO, "%s: '%s' holds %s with %d dims, expected u8 %s", who, path,
                       type == 0x08       ? "u8"
                           : type == 0x0C ? "i32"
                                          : "f32",
                       nd, want_nd == 1 ? "labels (1 dim)" : "images (2 or more dims)");
    uint8_t *b = NULL;
    if (st == PHX_OK && !(b = px_malloc(total ? (size_t)total : 1))) st = PHX_ENOMEM;
    if (st == PHX_OK) st = px_idx_rd(who, g, b, (size_t)total, path, "the data");
    if (st == PHX_OK) st = px_idx_end(who, g, path, total);
    px_zin_close(g);
    if (st != PHX_OK) {
        px_free(b);
        return st;
    }
    *out = b;
    *n = dims[0];
    *per = dims[0] ? total / dims[0] : 0;
    return PHX_OK;
}

phx_dataset *phx_dataset_idx(const char *images, const char *labels)
{
    if (!images) {
        phx_error(PHX_EINVAL, "phx_dataset_idx: images path is NULL");
        return NULL;
    }
    idx_ctx *c = px_calloc(1, sizeof *c);
    if (!c) return NULL;
    int64_t n, nl = 0, one;
    phx_status st = idx_bytes(images, 0, &c->img, &n, &c->pixels);
    if (st == PHX_OK && labels) st = idx_bytes(labels, 1, &c->lab, &nl, &one);
    if (st == PHX_OK && labels && nl != n)
        st = phx_error(PHX_EIO, "phx_dataset_idx: '%s' has %lld images but '%s' has %lld labels", images, (long long)n,
                       labels, (long long)nl);
    if (st == PHX_OK && c->pixels < 1) st = phx_error(PHX_EIO, "phx_dataset_idx: '%s' has empty images", images);
    phx_dataset *ds = NULL;
    if (st == PHX_OK) {
        phx_field f[2] = {{.dtype = PHX_F32, .ndim = 1, .shape = {c->pixels}}, {.dtype = PHX_I64, .ndim = 0}};
        ds = phx_dataset_new(&idx_vtable, c, n, labels ? 2 : 1, f);
    }
    if (!ds) idx_free(c);
    return ds;
}

/* ---- byte-token windows of a text file -------------------------------- */

typedef struct text_ctx {
    uint8_t *bytes;
    int64_t context, stride;
} text_ctx;

static phx_status text_get(void *ctx, int64_t i, void *const *out)
{
    text_ctx *c = ctx;
    const uint8_t *p = c->bytes + (size_t)(i * c->stride);
    int64_t *x = out[0], *y = out[1];
    for (int64_t k = 0; k < c->context; k++) {
        x[k] = p[k];
        y[k] = p[k + 1];
    }
    return PHX_OK;
}

static void text_free(void *ctx)
{
    text_ctx *c = ctx;
    px_free(c->bytes);
    px_free(c);
}

static const phx_dataset_vtable text_vtable = {
    .struct_size = PHX_DATASET_VTABLE_SIZE,
    .type_name = "text",
    .get = text_get,
    .free = text_free,
};

phx_dataset *phx_dataset_text(const char *path, int64_t context, int64_t stride)
{
    static const char who[] = "phx_dataset_text";
    if (!path || context < 1 || stride < 1 || context > ((int64_t)1 << 30)) {
        phx_error(PHX_EINVAL, "%s: %s, context %lld and stride %lld: expected a path and context, stride >= 1", who,
                  path ? "path given" : "path NULL", (long long)context, (long long)stride);
        return NULL;
    }
    bool irregular;
    FILE *fp = px_fopen_regular(path, &irregular); /* not a FIFO (fopen would wait), /dev/zero or a folder */
    if (!fp) {
        px_open_error(who, "", path, irregular);
        return NULL;
    }
    text_ctx *c = px_calloc(1, sizeof *c);
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = c ? px_malloc(cap) : NULL;
    while (b) {
        if (n == cap) {
            uint8_t *nb = px_realloc(b, cap * 2);
            if (!nb) {
                px_free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n, fp);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    phx_dataset *ds = NULL;
    if (b && err)
        phx_error(PHX_EIO, "%s: reading '%s' failed after %zu bytes", who, path, n);
    else if (b && (int64_t)n < context + 1)
        phx_error(PHX_EINVAL, "%s: '%s' has %zu bytes, a window of context %lld needs at least %lld", who, path, n,
                  (long long)context, (long long)context + 1);
    else if (b) {
        c->bytes = b;
        c->context = context;
        c->stride = stride;
        phx_field f[2] = {{.dtype = PHX_I64, .ndim = 1, .shape = {context}},
                          {.dtype = PHX_I64, .ndim = 1, .shape = {context}}};
        ds = phx_dataset_new(&text_vtable, c, ((int64_t)n - context - 1) / stride + 1, 2, f);
        if (!ds) c->bytes = NULL;
    }
    if (!ds) {
        px_free(b);
        px_free(c);
    }
    return ds;
}
