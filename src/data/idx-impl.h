/* IDX reading shared by phx_idx_read and the IDX dataset (internal). */
#ifndef PHX_CORE_DATA_IDX_IMPL_H
#define PHX_CORE_DATA_IDX_IMPL_H

#include <stdint.h>
#include "src/data/zin.h"
#include "phalanx/error.h"

/* Opens path (plain or gzip) and reads its header: *type (0x08 u8, 0x0C
 * i32, 0x0D f32), *nd dims into dims (room for 255) and their product
 * *total. On success *g is positioned at the data (caller px_zin_closes).
 * Errors (PHX_ENOTFOUND, PHX_EIO) start with who and name the file. */
phx_status px_idx_open(const char *who, const char *path, px_zin **g, uint8_t *type, int *nd, int64_t *dims,
                       int64_t *total);
/* Reads exactly len bytes; PHX_EIO naming path and what otherwise. */
phx_status px_idx_rd(const char *who, px_zin *g, void *buf, size_t len, const char *path, const char *what);
/* After the data: PHX_OK at a clean end of file. PHX_EIO when bytes
 * follow the total elements the dims describe, or when the stream is
 * corrupt there (a gzip trailer whose CRC-32 or length does not match, a
 * truncated trailer, bytes after the stream). */
phx_status px_idx_end(const char *who, px_zin *g, const char *path, int64_t total);
#endif
