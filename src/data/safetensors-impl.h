/* The safetensors parser shared by phx_safetensors_read and the checkpoint
 * loader (internal). A file is validated completely by px_st_open; nothing
 * is copied out of it until the caller decides to. */
#ifndef PHX_CORE_SAFETENSORS_IMPL_H
#define PHX_CORE_SAFETENSORS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "phalanx/checkpoint.h"

/* A dtype safetensors files may hold that no Phalanx tensor has: F64
 * (what torch.float64 parameters save as). Loading converts it. */
#define PX_ST_F64 ((phx_dtype)64)

typedef struct px_st_entry {
    const char *name; /* owned by the JSON root */
    phx_dtype dtype; /* a phx_dtype or PX_ST_F64 */
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte offsets in the data section */
} px_st_entry;

typedef struct px_st_file {
    const char *path;
    void *map; /* the whole file, mapped read-only */
    size_t size;
    json_t *root;
    json_t *meta; /* "__metadata__" object or NULL */
    px_st_entry *e; /* in header order */
    size_t n;
    const uint8_t *data; /* start of the data section */
} px_st_file;

/* Opens, maps and validates path: length prefix, JSON header (jansson),
 * dtypes, shapes, offsets in range, sizes matching shapes, no overlap and
 * no hole. `who` prefixes the error messages. */
phx_status px_st_open(const char *who, const char *path, px_st_file *f);
/* As px_st_open (the file is mapped whole) but without the tensors' data
 * checksums: the header's are checked; a reader checks each tensor it reads
 * (the sharded checkpoint's shards) or needs only the metadata. */
phx_status px_st_open_header(const char *who, const char *path, px_st_file *f);
void px_st_close(px_st_file *f);
/* A metadata string, or NULL. */
const char *px_st_meta(const px_st_file *f, const char *key);
static inline const void *px_st_data(const px_st_file *f, const px_st_entry *e)
{
    return f->data + e->begin;
}

/* Checksums (safetensors-crc.c): metadata keys starting with
 * PX_ST_RESERVED are Phalanx's own; users may not write them. */
#define PX_ST_RESERVED "phx."
#define PX_ST_CRC_PREFIX "phx.crc32."
/* zlib's CRC-32 of len bytes. */
uint32_t px_st_crc(const void *p, size_t len);
/* The CRC-32 of a metadata object's pairs other than the checksums: keys
 * in strcmp order, each key and value with its NUL. */
phx_status px_st_meta_crc(const json_t *meta, uint32_t *out);
/* The metadata key of the tensor entries' checksum: outside
 * PX_ST_CRC_PREFIX, so no tensor's key can collide with it and the
 * metadata's checksum covers it. */
#define PX_ST_ENTRIES_KEY "phx.entries.crc32"
/* The CRC-32 of n tensor entries: names in strcmp order, each as name,
 * dtype name, shape ("3,5,"), offsets ("0,60"), each with its NUL. */
phx_status px_st_entries_crc(const px_st_entry *e, size_t n, uint32_t *out);
/* A checksum as written, exactly 8 hex digits (no sign, space or 0x),
 * parsed; false when s is NULL or malformed. */
bool px_st_parse_crc(const char *s, uint32_t *v);
/* The checksum stored under metadata key, so parsed. */
bool px_st_stored_crc(const px_st_file *f, const char *key, uint32_t *v);
/* Checks the checksums of f, if it has any: the metadata's, the tensor
 * entries' where the file has PX_ST_ENTRIES_KEY (files written before
 * it existed have none), and with_data each tensor's. PHX_EIO naming the
 * file and the tensor otherwise. */
phx_status px_st_verify(const char *who, const px_st_file *f, bool with_data);

/* "F32" etc.; NULL for dtypes safetensors cannot name. */
const char *px_st_dtype_name(phx_dtype dt);
/* Bytes per element of a file dtype (PX_ST_F64 included). */
size_t px_st_dtype_size(phx_dtype dt);
/* Whether entry data of dtype `from` can load into a tensor of dtype `to`:
 * the same dtype, or both floating point (F64, F32, F16, BF16), converted
 * as torch's load_state_dict copies them. */
bool px_st_convertible(phx_dtype from, phx_dtype to);
/* Copies e's data into t (same shape), converting the dtype if needed. */
phx_status px_st_load_into(const px_st_file *f, const px_st_entry *e, phx_tensor *t);
#endif
