/* Fuzz target: the IDX reader on gzip input (src/data/zin.c and idx.c).
 * An input starting with the gzip magic is the file itself. Any other
 * input is a mode byte and an IDX file's bytes: the target compresses
 * them (level: mode & 7 + 1; mode & 8: as two gzip members, split at
 * byte mode >> 4 of the payload) and reads both the gzip file and the
 * plain one, which must agree: both fail, or both give the same dtype,
 * shape and bytes. Every read must give a tensor or fail with a
 * "phx_idx_read: " message; anything else aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "phalanx/phalanx.h"

static char gz_path[256], raw_path[256];

static void put(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

/* Appends a gzip member holding data[0..size) to f. */
static void put_member(FILE *f, const uint8_t *data, size_t size, int level)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    uLong cap = deflateBound(&z, (uLong)size);
    uint8_t *out = malloc(cap ? cap : 1);
    if (!out) abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    if (fwrite(out, 1, z.total_out, f) != z.total_out) abort();
    deflateEnd(&z);
    free(out);
}

static phx_tensor *read_idx(const char *path)
{
    phx_tensor *t = NULL;
    phx_status st = phx_idx_read(path, &t);
    if (st == PHX_OK) {
        if (!t || phx_tensor_numel(t) < 0) abort();
        return t;
    }
    const char *e = phx_last_error();
    if (t || !e || strncmp(e, "phx_idx_read: ", 14) != 0) {
        fprintf(stderr, "phx_idx_read failed (%s) without its message or left a tensor\n", phx_status_name(st));
        abort();
    }
    return NULL;
}

static void same(phx_tensor *a, phx_tensor *b)
{
    if (!a != !b) {
        fprintf(stderr, "idx-gz: the gzip file %s but the plain one %s\n", a ? "loads" : "fails",
                b ? "loads" : "fails");
        abort();
    }
    if (!a) return;
    size_t n = phx_tensor_nbytes(a);
    int nd = phx_tensor_ndim(a);
    if (phx_tensor_dtype(a) != phx_tensor_dtype(b) || nd != phx_tensor_ndim(b) || n != phx_tensor_nbytes(b)) abort();
    for (int i = 0; i < nd; i++)
        if (phx_tensor_dim(a, i) != phx_tensor_dim(b, i)) abort();
    uint8_t *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    if (!x || !y || phx_tensor_to_host(a, x) != PHX_OK || phx_tensor_to_host(b, y) != PHX_OK) abort();
    if (memcmp(x, y, n) != 0) {
        fprintf(stderr, "idx-gz: the gzip and plain files load different data\n");
        abort();
    }
    free(x);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!gz_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(gz_path, sizeof gz_path, "%s/phx-fuzz-idxgz-%ld.gz", tmp && *tmp ? tmp : "/tmp", (long)getpid());
        snprintf(raw_path, sizeof raw_path, "%s/phx-fuzz-idxgz-%ld.idx", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    }
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        put(gz_path, data, size);
        phx_tensor *t = read_idx(gz_path);
        phx_tensor_free(t);
        unlink(gz_path);
        return 0;
    }
    if (size == 0) return 0;
    unsigned mode = data[0];
    const uint8_t *idx = data + 1;
    size_t n = size - 1;
    if (n >= 2 && idx[0] == 0x1f && idx[1] == 0x8b) return 0; /* the plain file would be read as gzip */
    FILE *f = fopen(gz_path, "wb");
    if (!f) abort();
    int level = (int)(mode & 7) + 1;
    size_t cut = (mode & 8) ? (mode >> 4) : n;
    if (cut > n) cut = n;
    put_member(f, idx, cut, level);
    if (cut < n) put_member(f, idx + cut, n - cut, level);
    fclose(f);
    put(raw_path, idx, n);
    phx_tensor *a = read_idx(gz_path);
    phx_tensor *b = read_idx(raw_path);
    same(a, b);
    phx_tensor_free(a);
    phx_tensor_free(b);
    unlink(gz_path);
    unlink(raw_path);
    return 0;
}
