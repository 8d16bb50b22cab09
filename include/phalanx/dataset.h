/* Phalanx — datasets by callback: a length, fields with a per-sample
 * shape, and a function that writes sample i into caller buffers. The
 * loader (phalanx/data.h) assembles batches from any dataset, on worker
 * threads when asked. Built-in datasets: rows of in-memory tensors, IDX
 * files decoded per sample, and token windows of a text file. */
#ifndef PHALANX_DATASET_H
#define PHALANX_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PHX_DATASET_MAX_FIELDS 8

/* One field of a sample (an image, a label, a token window): its dtype and
 * its per-sample shape (ndim 0 is one value per sample). A batch of n
 * samples of this field is a tensor (n, shape...). */
typedef struct phx_field {
    phx_dtype dtype;
    int ndim; /* 0 .. PHX_MAX_DIMS - 1 */
    int64_t shape[PHX_MAX_DIMS - 1];
} phx_field;

/* Bytes of one sample of field f. */
size_t phx_field_bytes(const phx_field *f);

typedef struct phx_dataset_vtable {
    size_t struct_size; /* PHX_DATASET_VTABLE_SIZE (doc/maint/abi.md) */
    const char *type_name; /* (required) for messages */
    /* (required) Writes sample i (0 <= i < len) into out[f], a host buffer
     * of phx_field_bytes(field f) bytes, for every field f. May run on
     * several loader workers at once (with different out buffers): it must
     * be thread-safe, or the loader must use workers = 0. Returns PHX_OK,
     * or a negative status with phx_error naming the problem; any other
     * value is an error too (PHX_EINVAL). */
    phx_status (*get)(void *ctx, int64_t i, void *const *out);
    /* (optional) Writes samples idx[0..n) into consecutive rows of out[f]
     * (n samples of field f each). Defaults to get for each index. */
    phx_status (*get_batch)(void *ctx, const int64_t *idx, int64_t n, void *const *out);
    /* (optional) Releases ctx when the dataset is freed. Defaults to
     * nothing. */
    void (*free)(void *ctx);
} phx_dataset_vtable;
#define PHX_DATASET_VTABLE_SIZE sizeof(phx_dataset_vtable)

typedef struct phx_dataset phx_dataset;

/* A dataset of len samples with n_fields fields (1 .. PHX_DATASET_MAX_FIELDS)
 * served by vt on ctx. The vtable must outlive the dataset; ctx is released
 * through vt->free by the last phx_dataset_free. NULL with PHX_EINVAL
 * naming the bad argument (vtable without get, len < 0, a field's ndim or
 * shape); vt->free is not called then. */
phx_dataset *phx_dataset_new(const phx_dataset_vtable *vt, void *ctx, int64_t len, int n_fields,
                             const phx_field *fields);
/* Adds a reference (loaders keep one); returns ds. */
phx_dataset *phx_dataset_retain(phx_dataset *ds);
/* Drops a reference; the last one frees. NULL is a no-op. */
void phx_dataset_free(phx_dataset *ds);

int64_t phx_dataset_len(const phx_dataset *ds);
int phx_dataset_num_fields(const phx_dataset *ds);
/* Field f, or NULL when out of range. */
const phx_field *phx_dataset_field(const phx_dataset *ds, int f);
const char *phx_dataset_type(const phx_dataset *ds);

/* Sample i into out[f] (host buffers of each field's bytes). PHX_EINVAL
 * for i outside [0, len); otherwise the dataset's status, as a negative
 * phx_status (a positive or unknown value is PHX_EINVAL) whose message
 * names the sample and gives the callback's own message, or says it set
 * none. */
phx_status phx_dataset_get(phx_dataset *ds, int64_t i, void *const *out);
/* Samples idx[0..n) into consecutive rows of out[f] (through get_batch when
 * the dataset has it). PHX_EINVAL names the first index out of range. */
phx_status phx_dataset_get_batch(phx_dataset *ds, const int64_t *idx, int64_t n, void *const *out);

/* --- Built-in datasets --- */

/* Rows of n CPU tensors (1 .. PHX_DATASET_MAX_FIELDS) with the same first
 * dimension: sample i is row i of each (a tensor of 1 dim gives a scalar
 * field). The dataset keeps references to the tensors. */
phx_dataset *phx_dataset_tensors(phx_tensor *const *t, int n);

/* IDX images (u8, (N, rows, cols)) and, unless labels is NULL, IDX labels
 * (u8, (N)), plain or gzip: the files are read once as bytes and each
 * sample is decoded when fetched, as phx_idx_read does (images f32 in
 * [0, 1] shaped (rows*cols), labels i64). PHX_EIO names the file (bad
 * magic, truncated, counts that differ). */
phx_dataset *phx_dataset_idx(const char *images, const char *labels);

/* Token windows of a text file for next-token training: the file's bytes
 * are the tokens (0..255); sample i is x = tokens[i*stride, i*stride +
 * context) and y = tokens[i*stride + 1, i*stride + context + 1), both i64
 * (context). len = (bytes - context - 1) / stride + 1. PHX_EINVAL when the
 * file is shorter than context + 1 bytes or context, stride < 1. */
phx_dataset *phx_dataset_text(const char *path, int64_t context, int64_t stride);

#ifdef __cplusplus
}
#endif
#endif
